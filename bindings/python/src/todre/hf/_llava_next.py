"""Stage 1 for LlavaNextForConditionalGeneration (AnyRes, CLIP with [CLS]).

Per image, the candidates are the packed features exactly as the model would
feed them (thumbnail first, then the unpadded crop grid with one image-newline
token closing each row). The budget is global over all of them, the pivot is
the argmax of the thumbnail's [CLS] attention (pivot range = the thumbnail's
tokens), taken from the layer that produces the selected vision features.

Image-newline tokens are ordinary candidates: the selection keeps a newline
only when it adds diversity (its embedding is one learned vector, so at most
one or two survive at low ratios); they count towards k like any other visual
token, and ratio 1.0 reproduces the unpruned prompt exactly. Their [CLS] value
is 0 (they have no vision-tower attention).
"""

import contextvars

import torch

from ._prompt import invalid


class _ClsRequest:
    """One call's request for the [CLS] row of one CLIP attention module."""

    def __init__(self, attn):
        self.attn = attn
        self.maps = None


# The request of the image encoding running in this context (thread), if any.
_REQUEST = contextvars.ContextVar("todre_hf_cls_request", default=None)


def _cls_hook(attn, args, kwargs):
    """Forward pre-hook on every CLIP attention module of an enabled model: when
    the encoding running in this context asked for this module's [CLS] row,
    compute it, averaged over heads, from the layer's own Q and K (the tower
    keeps its attention implementation). A module-level function: deepcopy of
    the model keeps it, and it holds no state of its own."""
    if torch.compiler.is_compiling():
        return None
    req = _REQUEST.get()
    if req is None or req.attn is not attn:
        return None
    x = kwargs.get("hidden_states", args[0] if args else None)
    P, T, _ = x.shape
    hd = attn.head_dim
    q = attn.q_proj(x[:, :1]).view(P, 1, -1, hd).transpose(1, 2)
    k = attn.k_proj(x).view(P, T, -1, hd).transpose(1, 2)
    probs = torch.softmax((q.float() @ k.float().transpose(-1, -2)) * attn.scale, dim=-1)
    req.maps = probs.mean(dim=1)[:, 0]           # [P, T], CLS row
    return None


def install(model):
    """The hooks stage 1 needs, installed once by enable() (removed by disable()):
    the [CLS] capture on each vision encoder layer, idle outside an encoding
    that asks for it."""
    tower = model.model.vision_tower
    if not _has_cls(tower):
        return []
    return [layer.self_attn.register_forward_pre_hook(_cls_hook, with_kwargs=True)
            for layer in _body(tower).encoder.layers]


def _body(vision_tower):
    """The module holding embeddings and encoder (older CLIPVisionModel wraps it)."""
    return getattr(vision_tower, "vision_model", vision_tower)


def _feature_layer_index(vision_tower, feature_layer):
    """The encoder layer whose output is hidden_states[feature_layer]."""
    layers = _body(vision_tower).encoder.layers
    if isinstance(feature_layer, (list, tuple)):
        feature_layer = feature_layer[-1]
    h = feature_layer if feature_layer >= 0 else len(layers) + 1 + feature_layer
    return max(h - 1, 0)


def _has_cls(vision_tower):
    emb = getattr(_body(vision_tower), "embeddings", None)
    return emb is not None and hasattr(emb, "class_embedding")


def image_features(model, pixel_values, image_sizes, layer, strategy):
    """(packed features per image, CLS map per image or None, thumbnail tokens)."""
    inner = model.model
    tower = inner.vision_tower
    capture = None
    if _has_cls(tower):
        idx = _feature_layer_index(tower, layer)
        capture = _ClsRequest(_body(tower).encoder.layers[idx].self_attn)
    token = _REQUEST.set(capture)
    try:
        out = inner.get_image_features(pixel_values, image_sizes, vision_feature_layer=layer,
                                       vision_feature_select_strategy=strategy,
                                       return_dict=True)
    finally:
        _REQUEST.reset(token)
    feats = list(out.pooler_output)
    per_tile = model.config.vision_config.image_size // model.config.vision_config.patch_size
    thumb = per_tile * per_tile + (0 if strategy == "default" else 1)
    if capture is None or capture.maps is None:
        return feats, None, thumb
    maps = capture.maps[:, 1:] if strategy == "default" else capture.maps
    return feats, _pack_cls(inner, maps, image_sizes, strategy, feats), thumb


def _pack_cls(inner, maps, image_sizes, strategy, feats):
    """Lay the CLS values out like the packed features (newline slots get 0)."""
    counts, start, per_image = [], 0, []
    from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches
    cfg = inner.config
    for size in image_sizes:
        counts.append(image_size_to_num_patches(size, cfg.image_grid_pinpoints,
                                                cfg.vision_config.image_size))
    for n in counts:
        per_image.append(maps[start:start + n, :, None])
        start += n
    marker = torch.tensor([-1.0], dtype=maps.dtype, device=maps.device)
    packed, _ = inner.pack_image_features(per_image, image_sizes, strategy, image_newline=marker)
    out = []
    for p, f in zip(packed, feats):
        m = p[:, 0].clamp_min(0).contiguous()
        if m.shape[0] != f.shape[0]:
            return None
        out.append(m)
    return out


def has_images(kw):
    pv = kw.get("pixel_values")
    if pv is not None:
        return pv.shape[0] > 0
    mm = kw.get("mm_encoder_outputs") or {}
    return mm.get("image") is not None


def image_token_id(model):
    return model.config.image_token_id


def encode(model, kw):
    """Pop the image inputs off the call: (features per image, CLS map per image
    or None, pivot range). Pre-encoded features (mm_encoder_outputs) have no
    [CLS] map: their pivot is fallback_pivot ('auto': CENTER)."""
    cfg = model.config
    pixel_values = kw.pop("pixel_values", None)
    image_sizes = kw.pop("image_sizes", None)
    layer = kw.pop("vision_feature_layer", None)
    layer = cfg.vision_feature_layer if layer is None else layer
    strategy = kw.pop("vision_feature_select_strategy", None)
    strategy = cfg.vision_feature_select_strategy if strategy is None else strategy
    if pixel_values is None:
        mm = dict(kw["mm_encoder_outputs"])
        feats = list(mm.pop("image").pooler_output)
        kw["mm_encoder_outputs"] = mm
        return feats, None, (0, None)
    if image_sizes is None:
        raise invalid("LLaVA-NeXT generate(): pixel_values need image_sizes")
    if (kw.get("mm_encoder_outputs") or {}).get("image") is not None:
        raise invalid("generate(): pass either pixel_values or mm_encoder_outputs['image']")
    feats, cls, thumb = image_features(model, pixel_values, image_sizes, layer, strategy)
    return feats, cls, (0, thumb)


def prune_columns(model, kw, orig_kw, pmap, mask, new_mask):
    """Per-column inputs besides ids / mask / embeddings: explicit position ids
    follow the kept columns (else generate() numbers the shorter prompt)."""
    pid = kw.get("position_ids")
    if pid is not None:
        kw["position_ids"] = pmap.gather(pid, 0, dim=pid.dim() - 1)


def continue_columns(model, kw, orig_kw, base, pmap, mask, new_mask):
    """A continued turn: explicit position ids follow the map (else generate()
    numbers the translated sequence from its mask, continuing the pruned one)."""
    pid = kw.get("position_ids")
    if pid is not None and pid.shape[-1] >= pmap.length:
        kw["position_ids"] = pmap.gather(pid, 0, dim=pid.dim() - 1)
