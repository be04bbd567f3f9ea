"""Stage 1 for Qwen2_5_VLForConditionalGeneration (no [CLS] token).

Candidates are each image's merged visual tokens (after the patch merger, in
the raster (t, h, w) order the model uses). Without a [CLS] map the default
pivot is the max-sum 'auto' pivot, i.e. CENTER (the token closest to the
mean direction); 'random' and the others can be asked for.

Positions: the position ids the model itself would use for the unpruned
prompt are computed first (as its own _prepare_position_ids_for_generation
computes them: 3-D mRoPE from get_rope_index when mm_token_type_ids are
given, text positions otherwise); the kept columns keep their ids, so every kept image token keeps
its (t, h, w) and the text after the image continues exactly as in the
unpruned model. The row of plain text positions (used only for masks) is
renumbered contiguously, as the model itself does. generate() then extends
all four rows by one per decoding step, so decoding positions also match the
unpruned model. A later turn that continues from the cache (with or without
new images) gets the plain model's positions for the whole conversation, the
same way. The positions are always passed to generate() explicitly: the
model's stored rope_deltas, which every thread's calls share, is neither read
nor written. Videos are passed through unpruned.
"""

import torch

from ._prompt import invalid, unsupported


def has_images(kw):
    if kw.get("pixel_values") is not None:
        return kw["pixel_values"].numel() > 0
    mm = kw.get("mm_encoder_outputs") or {}
    return mm.get("image") is not None


def image_token_id(model):
    return model.config.image_token_id


def encode(model, kw):
    """Pop the image inputs off the call: (features per image, None, pivot range)."""
    pixel_values = kw.pop("pixel_values", None)
    grid = kw.get("image_grid_thw")
    if pixel_values is None:
        mm = dict(kw["mm_encoder_outputs"])
        feats = list(mm.pop("image").pooler_output)
        kw["mm_encoder_outputs"] = mm
        return feats, None, (0, None)
    if grid is None:
        raise invalid("Qwen2.5-VL generate(): pixel_values need image_grid_thw")
    if (kw.get("mm_encoder_outputs") or {}).get("image") is not None:
        raise invalid("generate(): pass either pixel_values or mm_encoder_outputs['image']")
    feats = model.model.get_image_features(pixel_values, grid, return_dict=True).pooler_output
    return list(feats), None, (0, None)


def install(model):
    """Stage 1 needs no hooks on Qwen2.5-VL (no [CLS] map to capture)."""
    return []


def _text_positions(mask):
    """[B, L] 1-D positions as generate() numbers a prompt: over the real columns."""
    pos = mask.long().cumsum(-1) - 1
    return pos.masked_fill(mask == 0, 0)


def plain_positions(model, ids, mask, types, image_grid, video_grid, seconds):
    """[3, B, L] (t, h, w) position ids the plain model gives these columns, as
    its own _prepare_position_ids_for_generation computes them for a prompt
    (3-D from get_rope_index when token types and grids are given, else the
    text positions), without touching the model's stored rope_deltas (which
    other threads' calls share)."""
    if ids is not None and types is not None and (image_grid is not None
                                                  or video_grid is not None):
        try:
            pos, _ = model.model.get_rope_index(
                ids, mm_token_type_ids=types, image_grid_thw=image_grid,
                video_grid_thw=video_grid, second_per_grid_ts=seconds, attention_mask=mask)
        except (RuntimeError, IndexError, ValueError, StopIteration) as exc:
            # e.g. image placeholders under attention_mask 0 with mm_token_type_ids:
            # the model's get_rope_index cannot place them either
            raise invalid(f"Qwen2.5-VL: the model cannot compute the 3-D positions of this "
                          f"prompt ({type(exc).__name__}: {exc}); image placeholders under "
                          f"attention_mask 0 need mm_token_type_ids=None, and a continued "
                          f"turn takes image_grid_thw of its new images only") from exc
        return pos
    return _text_positions(mask)[None].expand(3, -1, -1)


def _with_text_row(mrope, new_mask):
    """[4, B, L']: the plain text row, numbered over the pruned prompt's real
    columns as the model itself numbers it, then (t, h, w)."""
    nm = new_mask.to(mrope.device).long()
    text = (nm.cumsum(-1) - 1).masked_fill(nm == 0, 0)
    return torch.cat([text[None].to(mrope.dtype), mrope], dim=0)


def prune_columns(model, kw, orig_kw, pmap, mask, new_mask):
    """The kept columns keep the positions the plain model gives them; the
    caller's positions (3-D, in the caller's columns) stay with the map for a
    later turn that continues from the cache."""
    positions = orig_kw.get("position_ids")
    text_row = positions is None or (positions.dim() == 3 and positions.shape[0] == 4)
    if positions is None:
        ids = orig_kw.get("input_ids")
        positions = plain_positions(model, ids, mask, orig_kw.get("mm_token_type_ids"),
                                    orig_kw.get("image_grid_thw"), orig_kw.get("video_grid_thw"),
                                    orig_kw.get("second_per_grid_ts"))
    if positions.dim() == 2:                            # the caller's text positions [B, L]
        kw["position_ids"] = pmap.gather(positions, 0, dim=1)
        pmap.extra["positions"] = positions[None].expand(3, -1, -1)
    else:
        mrope = positions[-3:]
        pmap.extra["positions"] = mrope
        pruned = pmap.gather(mrope, 0, dim=2)
        kw["position_ids"] = _with_text_row(pruned, new_mask) if text_row else pruned
    types = kw.get("mm_token_type_ids")
    if types is not None:
        kw["mm_token_type_ids"] = pmap.gather(types, 0)


def continue_columns(model, kw, orig_kw, base, pmap, mask, new_mask):
    """A turn continuing from a cache, in the caller's columns [0, T): `base`
    maps the columns the earlier turns pruned, `pmap` this turn's pruned
    sequence (base itself when the turn adds no images). Token types follow
    the map; the positions are the plain model's for the whole conversation:
    the earlier turns' kept with the map, the new columns continuing after
    the largest position so far (text one by one, new images in 3-D from
    their own image_grid_thw), exactly as the plain model places a
    continuation. Passed explicitly, so nothing reads the model's stored
    rope_deltas."""
    types = kw.get("mm_token_type_ids")
    if types is not None and types.shape[1] >= pmap.length:
        kw["mm_token_type_ids"] = pmap.gather(types, 0)
    pid = kw.get("position_ids")
    if pid is not None:
        if pid.shape[-1] >= pmap.length:
            kw["position_ids"] = pmap.gather(pid, 0, dim=pid.dim() - 1)
        return
    ids = orig_kw.get("input_ids")
    ref = ids if ids is not None else orig_kw["inputs_embeds"]
    n, T = ref.shape[:2]
    Lb = base.length
    if T < Lb:
        return                                  # generate() reports the short input
    prefix = base.extra.get("positions")
    if prefix is not None:
        prefix = prefix[:, base.rows_for(n).to(prefix.device)].to(mask.device)
    elif ids is None or not _has_placeholders(model, ids[:, :Lb]):
        prefix = _text_positions(mask[:, :Lb])[None].expand(3, -1, -1)
    else:
        raise unsupported("past_key_values: the cache holds images of a prompt that no enabled "
                      "generate() pruned, so the 3-D positions of this turn are unknown; "
                      "run the first turn with the enabled model")
    real = mask[:, :Lb].bool().to(prefix.device)
    offset = prefix.masked_fill(~real[None], -1).amax(dim=(0, 2)) + 1          # [n]
    caller_types = orig_kw.get("mm_token_type_ids")
    new_types = caller_types[:, Lb:] if caller_types is not None \
        and caller_types.shape[1] == T else None
    if new_types is not None and not bool(new_types.any()):
        new_types = None                        # no new images: text positions
    suffix = plain_positions(model, None if ids is None else ids[:, Lb:], mask[:, Lb:],
                             new_types, orig_kw.get("image_grid_thw"),
                             orig_kw.get("video_grid_thw"), orig_kw.get("second_per_grid_ts"))
    suffix = suffix.to(prefix.device) + offset.to(prefix.device)[None, :, None]
    suffix = suffix.masked_fill(mask[:, Lb:].to(suffix.device)[None] == 0, 0)
    positions = torch.cat([prefix.to(suffix.dtype), suffix], dim=2)              # [3, n, T]
    if pmap is not base:
        pmap.extra["positions"] = positions
    kw["position_ids"] = _with_text_row(pmap.gather(positions, 0, dim=2), new_mask)


def _has_placeholders(model, ids):
    cfg = model.config
    visual = [cfg.image_token_id, getattr(cfg, "video_token_id", None)]
    return any(bool((ids == t).any()) for t in visual if t is not None)
