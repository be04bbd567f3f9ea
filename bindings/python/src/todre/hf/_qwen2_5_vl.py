"""Stage 1 for Qwen2_5_VLForConditionalGeneration (no [CLS] token).

Candidates are each image's merged visual tokens (after the patch merger, in
the raster (t, h, w) order the model uses). Without a [CLS] map the default
pivot is the max-sum 'auto' pivot, i.e. CENTER (the token closest to the
mean direction); 'random' and the others can be asked for.

Positions: the unpruned prompt's 3-D mRoPE position ids are computed first
(the model's own get_rope_index); the kept tokens keep their original
(t, h, w) ids and every text token keeps its id, so the text after the image
continues exactly as in the unpruned model. The row of plain text positions
(used only for masks) is renumbered contiguously, as the model itself does.
generate() then extends all four rows by one per decoding step, so decoding
positions also match the unpruned model. Videos are passed through unpruned.
"""

import torch

from ._prompt import (kept_columns, left_pack, pad_token, restore_prompt,
                      split_generate_call)
from ._select import select_each


def _token_types(cfg, input_ids):
    types = torch.zeros_like(input_ids, dtype=torch.int)
    types[input_ids == cfg.image_token_id] = 1
    types[input_ids == cfg.video_token_id] = 2
    return types


def generate(model, original_generate, settings, args, kwargs):
    """generate() with stage 1 applied to the prompt's images."""
    call = split_generate_call(settings, args, kwargs)
    if call is None:
        return original_generate(*args, **kwargs)
    input_ids, args, kwargs = call
    cfg = model.config
    inner = model.model
    pixel_values = kwargs.pop("pixel_values")
    grid = kwargs.pop("image_grid_thw", None)
    if grid is None:
        raise ValueError("Qwen2.5-VL generate(): pixel_values need image_grid_thw")
    mask = kwargs.pop("attention_mask", None)
    types = kwargs.pop("mm_token_type_ids", None)
    if types is None:
        types = _token_types(cfg, input_ids)

    with torch.no_grad():
        feats = list(inner.get_image_features(pixel_values, grid, return_dict=True).pooler_output)
        kept = select_each(feats, None, (0, None), settings)
        positions, _ = inner.get_rope_index(
            input_ids, mm_token_type_ids=types, image_grid_thw=grid,
            video_grid_thw=kwargs.get("video_grid_thw"),
            second_per_grid_ts=kwargs.get("second_per_grid_ts"), attention_mask=mask)
    rows = kept_columns(input_ids, mask, cfg.image_token_id, [f.shape[0] for f in feats], kept)
    pad = pad_token(model, input_ids, mask)
    new_ids, new_mask = left_pack([input_ids[b][c] for b, c in enumerate(rows)], pad)
    new_types, _ = left_pack([types[b][c] for b, c in enumerate(rows)], 0)
    mrope, _ = left_pack([positions[:, b][:, c] for b, c in enumerate(rows)], 0)  # [B, 3, L]
    text = (new_mask.cumsum(-1) - 1).masked_fill(new_mask == 0, 0)
    position_ids = torch.cat([text[None], mrope.permute(1, 0, 2)], dim=0)        # [4, B, L]
    last = mrope.amax(dim=(1, 2))
    inner.rope_deltas = (last + 1 - new_mask.sum(-1))[:, None]
    pruned = [f[k.to(f.device)] for f, k in zip(feats, kept)]
    settings.record_stage1([f.shape[0] for f in feats], kept, new_ids, new_mask,
                           cfg.image_token_id)

    from transformers.modeling_outputs import BaseModelOutputWithPooling
    encoded = BaseModelOutputWithPooling(pooler_output=pruned)
    out = original_generate(*args, input_ids=new_ids, attention_mask=new_mask,
                            position_ids=position_ids, mm_token_type_ids=new_types,
                            mm_encoder_outputs={"image": encoded}, **kwargs)
    return restore_prompt(out, input_ids, new_ids.shape[1])
