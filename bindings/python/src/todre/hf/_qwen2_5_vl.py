"""Stage 1 for Qwen2_5_VLForConditionalGeneration (no [CLS] token).

Candidates are each image's merged visual tokens (after the patch merger, in
the raster (t, h, w) order the model uses). Without a [CLS] map the default
pivot is the max-sum 'auto' pivot, i.e. CENTER (the token closest to the
mean direction); 'random' and the others can be asked for.

Positions: the position ids the model itself would use for the unpruned
prompt are computed first (its own _prepare_position_ids_for_generation:
3-D mRoPE from get_rope_index when mm_token_type_ids are given, as in the
plain model); the kept columns keep their ids, so every kept image token keeps
its (t, h, w) and the text after the image continues exactly as in the
unpruned model. The row of plain text positions (used only for masks) is
renumbered contiguously, as the model itself does. generate() then extends
all four rows by one per decoding step, so decoding positions also match the
unpruned model; rope_deltas is set for the pruned prompt (continuing from the
cache uses it). Videos are passed through unpruned.
"""

import torch

from ._prompt import invalid


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


def _plain_positions(model, kw, mask):
    """The [4, B, L] position ids generate() would compute for the unpruned call."""
    ids, embeds = kw.get("input_ids"), kw.get("inputs_embeds")
    mk = {k: kw[k] for k in ("mm_token_type_ids", "image_grid_thw", "video_grid_thw",
                             "second_per_grid_ts") if kw.get(k) is not None}
    mk["attention_mask"] = mask
    if ids is not None:
        mk["input_ids"] = ids
    saved = model.model.rope_deltas
    try:
        return model._prepare_position_ids_for_generation(
            ids if ids is not None else embeds, mk)
    except (RuntimeError, IndexError, ValueError, StopIteration) as exc:
        # e.g. image placeholders under attention_mask 0 with mm_token_type_ids:
        # the model's get_rope_index cannot place them either
        raise invalid(f"Qwen2.5-VL: the model cannot compute the 3-D positions of this "
                      f"prompt ({type(exc).__name__}: {exc}); image placeholders under "
                      f"attention_mask 0 need mm_token_type_ids=None") from exc
    finally:
        model.model.rope_deltas = saved


def prune_columns(model, kw, orig_kw, pmap, mask, new_mask):
    positions = orig_kw.get("position_ids")
    if positions is None:
        positions = _plain_positions(model, orig_kw, mask)
    if positions.dim() == 2:                            # plain text positions [B, L]
        kw["position_ids"] = pmap.gather(positions, 0, dim=1)
        return
    pos = pmap.gather(positions, 0, dim=2)              # [3 or 4, B, L']
    mrope = pos[-3:]
    if pos.shape[0] == 4:
        nm = new_mask.to(pos.device).long()
        text = (nm.cumsum(-1) - 1).masked_fill(nm == 0, 0)
        pos = torch.cat([text[None].to(pos.dtype), mrope], dim=0)
    kw["position_ids"] = pos
    deltas = (mrope.amax(dim=(0, 2)) + 1 - new_mask.to(pos.device).sum(-1))[:, None]
    model.model.rope_deltas = deltas
    pmap.extra["rope_deltas"] = deltas
    types = kw.get("mm_token_type_ids")
    if types is not None:
        kw["mm_token_type_ids"] = pmap.gather(types, 0)


def continue_columns(model, kw, pmap):
    """Continuing from a pruned cache: token types of the caller's full sequences
    follow the map, and the pruned prompt's rope_deltas place the new tokens."""
    types = kw.get("mm_token_type_ids")
    if types is not None and types.shape[1] >= pmap.length:
        kw["mm_token_type_ids"] = pmap.gather(types, 0)
    pid = kw.get("position_ids")
    if pid is not None and pid.shape[-1] >= pmap.length:
        kw["position_ids"] = pmap.gather(pid, 0, dim=pid.dim() - 1)
    deltas = pmap.extra.get("rope_deltas")
    if deltas is not None:
        ref = kw.get("input_ids", kw.get("inputs_embeds"))
        model.model.rope_deltas = deltas[pmap.rows_for(ref.shape[0]).to(deltas.device)]
