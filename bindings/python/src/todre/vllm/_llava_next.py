"""ToDRE stage 1 for vLLM's LlavaNextForConditionalGeneration (AnyRes, CLIP).

As todre.hf does for transformers (docs/hf.md, LLaVA-NeXT): per image the
candidates are the packed features exactly as the model feeds them (the
thumbnail first, then the unpadded crop grid with one image-newline token per
row), the budget k (the library's count, todre.group_counts) is global over
all of them unless the deployment's budget groups thumbnail and crops, and the pivot
is the argmax of the thumbnail's [CLS] attention (pivot range = the
thumbnail's tokens), taken from the vision layer that produces the selected
features (averaged over heads, computed from that layer's own Q and K by a
pre-hook, so the tower keeps its attention implementation). Image-newline
tokens are ordinary candidates with [CLS] value 0.

Placeholders: the processing info reports k for an image of n tokens, so the
prompt holds k <image> tokens. Positions: LLaVA-NeXT uses 1-D RoPE, so the
pruned prompt is simply a shorter prompt (text after the image takes the next
positions), as in the LLaVA-based pruning methods and todre.hf.
"""

import contextlib

import torch
from vllm.model_executor.models.llava import LlavaDummyInputsBuilder
from vllm.model_executor.models.llava_next import (LlavaNextForConditionalGeneration,
                                                   LlavaNextMultiModalProcessor,
                                                   LlavaNextProcessingInfo)
from vllm.multimodal import MULTIMODAL_REGISTRY

from ._common import SettingsInfo, attach, host_list, image_groups, select_each


def _thumbnail(cfg):
    """Tokens of the thumbnail (base image) at the head of the packed features."""
    per_tile = cfg.vision_config.image_size // cfg.vision_config.patch_size
    return per_tile * per_tile + (0 if cfg.vision_feature_select_strategy == "default" else 1)


class TodreLlavaNextProcessingInfo(SettingsInfo, LlavaNextProcessingInfo):
    def get_num_image_tokens(self, *, image_width, image_height):
        n = super().get_num_image_tokens(image_width=image_width, image_height=image_height)
        return self.todre_settings.counts(image_groups(n, _thumbnail(self.get_hf_config()),
                                                       self.todre_settings))[1]


class _ClsCapture:
    """The [CLS] row of one vLLM CLIP encoder layer's attention, averaged over
    heads, recomputed from the layer's packed QKV projection."""

    def __init__(self, attn):
        self.maps = None
        self.handle = attn.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, attn, args, kwargs):
        x = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        P, T, _ = x.shape
        hd, heads = attn.head_dim, attn.num_heads_per_partition
        q = attn.qkv_proj(x[:, :1])[0].chunk(3, dim=-1)[0]
        k = attn.qkv_proj(x)[0].chunk(3, dim=-1)[1]
        q = q.view(P, 1, heads, hd).transpose(1, 2).float()
        k = k.view(P, T, heads, hd).transpose(1, 2).float()
        probs = torch.softmax((q @ k.transpose(-1, -2)) * attn.scale, dim=-1)
        self.maps = probs.mean(dim=1)[:, 0]          # [P, T], the CLS row
        return None

    def close(self):
        self.handle.remove()


@contextlib.contextmanager
def _newline_marker(model, value):
    """Swap image_newline for a 1-channel marker, so that the model's own
    packing lays a per-token map out exactly like the features."""
    saved = model._parameters["image_newline"]
    model._parameters["image_newline"] = torch.nn.Parameter(value, requires_grad=False)
    try:
        yield
    finally:
        model._parameters["image_newline"] = saved


@MULTIMODAL_REGISTRY.register_processor(LlavaNextMultiModalProcessor,
                                        info=TodreLlavaNextProcessingInfo,
                                        dummy_inputs=LlavaDummyInputsBuilder)
class TodreLlavaNextForConditionalGeneration(LlavaNextForConditionalGeneration):
    """LLaVA-NeXT with ToDRE stage 1 on every image (settings: todre.vllm)."""

    def __init__(self, *, vllm_config, prefix=""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        attach(self, vllm_config, "llava_next")

    def _cls_layer(self):
        """The attention of the encoder layer whose output is the selected
        vision feature (None: no [CLS] token or several feature layers)."""
        cfg = self.config
        tower = getattr(self.vision_tower, "vision_model", None)
        emb = getattr(tower, "embeddings", None)
        if emb is None or not hasattr(emb, "class_embedding") or self.select_layers:
            return None
        fl = cfg.vision_feature_layer
        h = fl if fl >= 0 else cfg.vision_config.num_hidden_layers + 1 + fl
        layers = tower.encoder.layers
        idx = min(max(h - 1, 0), len(layers) - 1)
        return layers[idx].self_attn

    def embed_multimodal(self, **kwargs):
        if not self.todre.enabled:
            return super().embed_multimodal(**kwargs)
        image_input = self._parse_and_validate_image_input(**kwargs)
        if image_input is None:
            return []
        if image_input["type"] != "pixel_values":
            feats = list(self._process_image_input(image_input))
            return self._todre_select(feats, None, (0, None))
        attn = self._cls_layer()
        capture = None if attn is None else _ClsCapture(attn)
        try:
            feats = list(self._process_image_input(image_input))
        finally:
            if capture is not None:
                capture.close()
        strategy = self.config.vision_feature_select_strategy
        thumb = _thumbnail(self.config)
        cls = None
        if capture is not None and capture.maps is not None:
            cls = self._pack_cls(capture.maps, image_input, strategy, feats)
        return self._todre_select(feats, cls, (0, thumb))

    def _pack_cls(self, maps, image_input, strategy, feats):
        """The CLS values laid out like the packed features (newlines get 0)."""
        maps = maps[:, 1:] if strategy == "default" else maps
        pixel_values = image_input["pixel_values"]
        if isinstance(pixel_values, torch.Tensor):      # [B, patches, C, H, W]
            counts = [pixel_values.shape[1]] * pixel_values.shape[0]
        else:                                           # B x [patches_b, C, H, W]
            counts = [v.shape[0] for v in pixel_values]
        image_sizes = image_input.get("image_sizes")
        out, start = [], 0
        marker = torch.tensor([-1.0], dtype=maps.dtype, device=maps.device)
        with _newline_marker(self, marker):
            for i, (n, f) in enumerate(zip(counts, feats)):
                m = maps[start:start + n, :, None]
                start += n
                p = self._merge_image_patch_embeddings(image_sizes[i], m,
                                                       strategy="spatial_unpad")
                p = p[:, 0].clamp_min(0).contiguous()
                if p.shape[0] != f.shape[0]:
                    return None
                out.append(p)
        return out

    def _todre_select(self, feats, cls, pivot_range):
        ns = [f.shape[0] for f in feats]
        kept, keeps = select_each(feats, cls, pivot_range[1], self.todre)
        if self._todre_trace:
            self._todre_trace.write("select", n=ns, k=keeps, kept=[host_list(k) for k in kept],
                                    pivot_range=list(pivot_range),
                                    cls_argmax=None if cls is None else
                                    [int(c[:pivot_range[1]].argmax()) for c in cls])
        return [f.index_select(0, k) for f, k in zip(feats, kept)]

    def embed_input_ids(self, input_ids, multimodal_embeddings=None, *, is_multimodal=None,
                        **kwargs):
        if self._todre_trace and is_multimodal is not None and multimodal_embeddings:
            self._todre_trace.write("embed", mm_tokens=int(is_multimodal.sum()))
        return super().embed_input_ids(input_ids, multimodal_embeddings,
                                       is_multimodal=is_multimodal, **kwargs)
