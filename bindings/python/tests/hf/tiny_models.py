"""Tiny random-weight LLaVA-NeXT and Qwen2.5-VL models and prompts, built from
configs (nothing is downloaded)."""

import torch
from transformers import (CLIPVisionConfig, LlamaConfig, LlavaNextConfig,
                          LlavaNextForConditionalGeneration, Qwen2_5_VLConfig,
                          Qwen2_5_VLForConditionalGeneration)
from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

LLAVA_IMAGE = 100
QWEN_IMAGE, QWEN_START, QWEN_END = 151, 150, 153


def llava_next(num_layers=8, attn="sdpa", seed=0):
    torch.manual_seed(seed)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                              num_attention_heads=4, image_size=32, patch_size=8,
                              projection_dim=32)
    text = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=num_layers,
                       num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                       max_position_embeddings=1024, bos_token_id=1, eos_token_id=2,
                       pad_token_id=0, initializer_range=0.2)
    cfg = LlavaNextConfig(vision_config=vision, text_config=text, image_token_id=LLAVA_IMAGE,
                          image_grid_pinpoints=[[32, 32], [32, 64], [64, 32], [64, 64]],
                          vision_feature_layer=-2, vision_feature_select_strategy="default")
    cfg._attn_implementation = attn
    cfg.text_config._attn_implementation = attn
    model = LlavaNextForConditionalGeneration(cfg).eval()
    model.generation_config.pad_token_id = 0
    return model


def llava_inputs(model, sizes=((40, 60),), texts=((5, 6), (7, 8, 9)), seed=1):
    """A left-padded batch: row b = [bos, *texts[0], <image> x N_b, *texts[1]]."""
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    image_sizes = torch.tensor(sizes)
    patches = [image_size_to_num_patches(s, cfg.image_grid_pinpoints, 32) for s in image_sizes]
    pv = torch.zeros(len(sizes), max(patches), 3, 32, 32)
    for i, n in enumerate(patches):
        pv[i, :n] = torch.randn(n, 3, 32, 32, generator=g)
    with torch.no_grad():
        feats = model.model.get_image_features(pv, image_sizes, return_dict=True).pooler_output
    rows = [[1, *texts[0]] + [LLAVA_IMAGE] * f.shape[0] + [*texts[1]] for f in feats]
    return _left_pad(rows) | {"pixel_values": pv, "image_sizes": image_sizes}, \
        [f.shape[0] for f in feats]


def qwen2_5_vl(num_layers=8, attn="sdpa", seed=0):
    torch.manual_seed(seed)
    cfg = Qwen2_5_VLConfig(
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                           out_hidden_size=64, patch_size=2, spatial_merge_size=2,
                           temporal_patch_size=2, window_size=8, fullatt_block_indexes=[1],
                           in_channels=3),
        text_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=num_layers,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=160,
                         max_position_embeddings=1024, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0, initializer_range=0.2,
                         rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
        image_token_id=QWEN_IMAGE, video_token_id=152, vision_start_token_id=QWEN_START,
        vision_end_token_id=QWEN_END, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg._attn_implementation = attn
    cfg.text_config._attn_implementation = attn
    cfg.vision_config._attn_implementation = attn
    model = Qwen2_5_VLForConditionalGeneration(cfg).eval()
    model.generation_config.pad_token_id = 0
    return model


def qwen_inputs(model, grids=((1, 8, 12),), texts=((5, 6), (7, 8, 9)), seed=1):
    """One image per row; row b = [bos, *texts[0], <start>, <image> x N_b, <end>, *texts[1]]."""
    g = torch.Generator().manual_seed(seed)
    thw = torch.tensor(grids)
    pv = torch.randn(int(thw.prod(-1).sum()), 3 * 2 * 2 * 2, generator=g)
    counts = [int(t * h * w) // 4 for t, h, w in grids]
    rows = [[1, *texts[0], QWEN_START] + [QWEN_IMAGE] * n + [QWEN_END, *texts[1]]
            for n in counts]
    batch = _left_pad(rows)
    batch["mm_token_type_ids"] = (batch["input_ids"] == QWEN_IMAGE).int()
    return batch | {"pixel_values": pv, "image_grid_thw": thw}, counts


def _left_pad(rows):
    L = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), L, dtype=torch.long)
    mask = torch.zeros(len(rows), L, dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, L - len(r):] = torch.tensor(r)
        mask[b, L - len(r):] = 1
    return {"input_ids": ids, "attention_mask": mask}


# -- batches for the drop-in matrix -------------------------------------------------
# row b holds the images rows[b] (several per row, different sizes):
# [bos, 5, 6, (<image> x N, 7) per image, 8, 9]
LLAVA_ROWS = (((40, 60), (32, 32)), ((64, 30),))
QWEN_ROWS = (((1, 8, 12), (1, 4, 4)), ((1, 4, 8),))


def llava_batch(model, rows=LLAVA_ROWS, seed=1):
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    image_sizes = torch.tensor([s for r in rows for s in r])
    patches = [image_size_to_num_patches(s, cfg.image_grid_pinpoints, 32) for s in image_sizes]
    pv = torch.zeros(len(image_sizes), max(patches), 3, 32, 32)
    for i, n in enumerate(patches):
        pv[i, :n] = torch.randn(n, 3, 32, 32, generator=g)
    with torch.no_grad():
        feats = model.model.get_image_features(pv, image_sizes, return_dict=True).pooler_output
    counts = [f.shape[0] for f in feats]
    seqs, k = [], 0
    for r in rows:
        s = [1, 5, 6]
        for _ in r:
            s += [LLAVA_IMAGE] * counts[k] + [7]
            k += 1
        seqs.append(s + [8, 9])
    return _left_pad(seqs) | {"pixel_values": pv, "image_sizes": image_sizes}, counts


def qwen_batch(model, rows=QWEN_ROWS, seed=1):
    g = torch.Generator().manual_seed(seed)
    thw = torch.tensor([gr for r in rows for gr in r])
    pv = torch.randn(int(thw.prod(-1).sum()), 3 * 2 * 2 * 2, generator=g)
    counts = [int(t * h * w) // 4 for t, h, w in thw.tolist()]
    seqs, k = [], 0
    for r in rows:
        s = [1, 5, 6]
        for _ in r:
            s += [QWEN_START] + [QWEN_IMAGE] * counts[k] + [QWEN_END, 7]
            k += 1
        seqs.append(s + [8, 9])
    batch = _left_pad(seqs)
    batch["mm_token_type_ids"] = (batch["input_ids"] == QWEN_IMAGE).int()
    return batch | {"pixel_values": pv, "image_grid_thw": thw}, counts


def right_padded(batch, image_token):
    """The same rows padded on the right."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    new_ids, new_mask = torch.zeros_like(ids), torch.zeros_like(mask)
    for b in range(ids.shape[0]):
        row = ids[b][mask[b].bool()]
        new_ids[b, :row.numel()] = row
        new_mask[b, :row.numel()] = 1
    out = dict(batch, input_ids=new_ids, attention_mask=new_mask)
    if "mm_token_type_ids" in batch:
        out["mm_token_type_ids"] = (new_ids == image_token).int()
    return out


def masked_placeholders(batch, image_token, row=-1, n=3):
    """The first n image placeholders of `row` under attention_mask 0."""
    mask = batch["attention_mask"].clone()
    cols = torch.nonzero(batch["input_ids"][row] == image_token).flatten()
    mask[row, cols[:n]] = 0
    return dict(batch, attention_mask=mask)


def with_embeds(model, batch, keep_ids=True):
    out = dict(batch)
    out["inputs_embeds"] = model.get_input_embeddings()(batch["input_ids"]).detach()
    if not keep_ids:
        del out["input_ids"]
    return out
