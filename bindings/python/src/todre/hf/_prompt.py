"""Rewriting a batch of prompts after stage 1: only the kept image placeholders
remain, rows are re-packed with left padding (what decoder-only generation
expects), and per-column tensors (position ids, token types) follow."""

import torch

import todre


def _bad(message):
    return todre.TodreError(todre.Status.INVALID_ARGUMENT, message)


def split_generate_call(settings, args, kwargs):
    """The prompt of a generate() call and the rest of its arguments, or None
    when stage 1 has nothing to do (no images, no input_ids, or switched off).
    input_ids may come positionally or by keyword; it is removed from both."""
    input_ids = kwargs.get("input_ids", args[0] if args else None)
    if kwargs.get("pixel_values") is None or input_ids is None or settings.stage1_off:
        return None
    kwargs = dict(kwargs)
    kwargs.pop("input_ids", None)
    return input_ids, args[1:], kwargs


def kept_columns(input_ids, attention_mask, image_token_id, lengths, kept_per_image):
    """Per row, the columns that stay (ascending LongTensor per row).

    Every real non-image column stays. The image placeholders are consumed
    image by image in row-major order (as masked_scatter fills them): image j
    owns the next lengths[j] placeholders, of which only those at the kept
    local indices kept_per_image[j] stay.
    """
    rows, image = [], 0
    for b in range(input_ids.shape[0]):
        real = torch.ones_like(input_ids[b], dtype=torch.bool) if attention_mask is None \
            else attention_mask[b].bool()
        is_img = (input_ids[b] == image_token_id) & real
        keep = real & ~is_img
        cols = torch.nonzero(is_img).flatten()
        start = 0
        while start < cols.numel():
            if image >= len(lengths):
                raise _bad("input_ids: more image placeholders than image features")
            n = int(lengths[image])
            if start + n > cols.numel():
                raise _bad(f"input_ids: image {image} has {n} features but fewer placeholders")
            keep[cols[start + kept_per_image[image].to(cols.device)]] = True
            start += n
            image += 1
        rows.append(torch.nonzero(keep).flatten())
    if image != len(lengths):
        raise _bad(f"input_ids: placeholders for {image} images, features for {len(lengths)}")
    return rows


def left_pack(rows, pad_value):
    """Stack tensors [..., n_b] into [B, ..., L] left-padded with pad_value.

    Returns (packed, mask) with mask [B, L] (1 = real column)."""
    length = max(r.shape[-1] for r in rows)
    packed = torch.full((len(rows), *rows[0].shape[:-1], length), pad_value,
                        dtype=rows[0].dtype, device=rows[0].device)
    mask = torch.zeros(len(rows), length, dtype=torch.long, device=rows[0].device)
    for b, r in enumerate(rows):
        n = r.shape[-1]
        packed[b, ..., length - n:] = r
        mask[b, length - n:] = 1
    return packed, mask


def pad_token(model, input_ids, attention_mask):
    """The id that pads rebuilt prompts: the generation config's, the model
    config's, else whatever the caller padded with, else 0."""
    for cfg in (getattr(model, "generation_config", None), model.config,
                getattr(model.config, "text_config", None)):
        value = getattr(cfg, "pad_token_id", None) if cfg is not None else None
        if isinstance(value, int):
            return value
    if attention_mask is not None and (attention_mask == 0).any():
        return int(input_ids[attention_mask == 0][0])
    return 0


def restore_prompt(output, original_ids, new_len):
    """Put the caller's own prompt in front of the generated ids, so that slicing
    the output by the caller's prompt length keeps working."""
    seqs = output.sequences if hasattr(output, "sequences") else output
    fixed = torch.cat([original_ids.to(seqs.device), seqs[:, new_len:]], dim=1)
    if hasattr(output, "sequences"):
        output.sequences = fixed
        return output
    return fixed
