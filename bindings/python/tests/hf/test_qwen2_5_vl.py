"""todre.hf on a tiny random Qwen2_5_VLForConditionalGeneration (offline)."""

import pytest
import torch

import todre
import todre.hf
from common import (GEN, capture_llm_inputs, check_cache_after_drop,
                    check_cached_decoding_equals_recomputation,
                    check_ratio_one_equals_unpruned, expected_k, generate)
from tiny_models import QWEN_IMAGE, QWEN_START, qwen2_5_vl, qwen_inputs

GRIDS = ((1, 8, 12), (1, 4, 8))


@pytest.fixture(scope="module")
def model():
    return qwen2_5_vl(num_layers=8)


@pytest.fixture(scope="module")
def batch(model):
    return qwen_inputs(model, grids=GRIDS)


def test_ratio_one_without_stage2_equals_unpruned(model, batch):
    check_ratio_one_equals_unpruned(model, batch[0])


def test_both_stages_end_to_end(model, batch):
    inputs, counts = batch
    todre.hf.enable(model, ratio=0.25, tau=1.0, probe_layers=[5])
    try:
        out = generate(model, inputs)
        st = todre.hf.stats(model)
    finally:
        todre.hf.disable(model)
    assert torch.equal(out[:, :inputs["input_ids"].shape[1]], inputs["input_ids"])
    assert st["kept_tokens"] == [expected_k(n, 0.25) for n in counts]
    assert st["llm_image_tokens"] == st["kept_tokens"]
    assert st["drop_layer"] == [5, 5]


def test_fallback_pivot_is_center_and_random_is_seeded(model, batch):
    inputs, _ = batch
    with torch.no_grad():
        feats = model.model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"],
                                               return_dict=True).pooler_output
    for pivot, seed in (("auto", 0), ("random", 11)):
        todre.hf.enable(model, ratio=0.3, stage2=False, pivot=pivot, seed=seed)
        try:
            generate(model, inputs)
            st = todre.hf.stats(model)
        finally:
            todre.hf.disable(model)
        for f, kept in zip(feats, st["kept_indices"]):
            want = todre.select(f, ratio=0.3, pivot="center" if pivot == "auto" else pivot,
                                seed=seed)
            assert kept.tolist() == want.tolist()


def _positions(model, inputs, **enable):
    if enable:
        todre.hf.enable(model, **enable)
    seen, handle = capture_llm_inputs(model)
    try:
        out = generate(model, inputs)
        st = todre.hf.stats(model) if enable else None
    finally:
        handle.remove()
        todre.hf.disable(model)
    return out, [s["position_ids"] for s in seen], st


def test_mrope_positions_of_kept_tokens_and_text_are_preserved(model, batch):
    inputs, counts = batch
    _, full, _ = _positions(model, inputs)
    _, pruned, st = _positions(model, inputs, ratio=0.25, stage2=False)
    ids = inputs["input_ids"]
    assert len(full) == len(pruned) == GEN["max_new_tokens"]
    for b in range(ids.shape[0]):
        real = inputs["attention_mask"][b].bool()
        cols = torch.nonzero(real).flatten()
        img = torch.nonzero(ids[b] == QWEN_IMAGE).flatten()
        keep = torch.zeros_like(real)
        keep[cols] = True
        keep[img] = False
        keep[img[st["kept_indices"][b]]] = True
        want = full[0][1:, b][:, keep]                 # (t, h, w) of the kept columns
        n = int(keep.sum())
        got = pruned[0][1:, b, -n:]
        assert torch.equal(got, want)
        # the plain-text row is contiguous, as the model computes it
        assert pruned[0][0, b, -n:].tolist() == list(range(n))
    for step in range(1, GEN["max_new_tokens"]):       # decoding continues unchanged
        assert torch.equal(pruned[step][1:], full[step][1:])


def test_kv_cache_after_drop_excludes_visual_tokens(model, batch):
    check_cache_after_drop(model, batch[0], probe=3)


def test_cached_decoding_equals_recomputation(model, batch):
    check_cached_decoding_equals_recomputation(model, batch[0], probe=4)


def test_prefill_after_drop_matches_a_manual_computation(model):
    inputs, _ = qwen_inputs(model, grids=((1, 8, 12),))
    probe = 2
    lm = model.model.language_model
    with torch.no_grad():
        full = model(**inputs, output_hidden_states=True, return_dict=True)
        pos, _ = model.model.get_rope_index(inputs["input_ids"], inputs["mm_token_type_ids"],
                                            image_grid_thw=inputs["image_grid_thw"])
        keep = torch.nonzero(inputs["input_ids"][0] != QWEN_IMAGE).flatten()
        h = full.hidden_states[probe + 1][:, keep]
        rope = lm.rotary_emb(h, pos[:, :, keep])
        for layer in lm.layers[probe + 1:]:
            h = layer(h, attention_mask=None, position_embeddings=rope, position_ids=None)
        want = model.lm_head(lm.norm(h))[:, -1]
        todre.hf.enable(model, ratio=None, tau=1.0, probe_layers=[probe])
        try:
            got = model.generate(**inputs, max_new_tokens=1, do_sample=False,
                                 return_dict_in_generate=True, output_logits=True).logits[0]
        finally:
            todre.hf.disable(model)
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(got, full.logits[:, -1], atol=1e-3)


def test_batch_rows_match_single_rows(model, batch):
    inputs, _ = batch
    todre.hf.enable(model, ratio=0.5, tau=1.0, probe_layers=[4])
    try:
        both = generate(model, inputs)
        singles = []
        start = 0
        for grid in GRIDS:
            one, _ = qwen_inputs(model, grids=(grid,))
            n = grid[0] * grid[1] * grid[2]
            one["pixel_values"] = inputs["pixel_values"][start:start + n]
            start += n
            singles.append(generate(model, one)[0, -GEN["max_new_tokens"]:])
    finally:
        todre.hf.disable(model)
    assert torch.equal(both[:, -GEN["max_new_tokens"]:], torch.stack(singles))


def test_eager_attention_model():
    model = qwen2_5_vl(num_layers=6, attn="eager")
    inputs, _ = qwen_inputs(model, grids=GRIDS)
    check_cache_after_drop(model, inputs, probe=2)
    check_cached_decoding_equals_recomputation(model, inputs, probe=2)


def test_no_mm_token_type_ids_given(model, batch):
    """Without mm_token_type_ids the plain model uses text positions: so does the
    enabled one."""
    inputs, _ = batch
    inputs = dict(inputs)
    del inputs["mm_token_type_ids"]
    ref = generate(model, inputs)
    todre.hf.enable(model, ratio=1.0, stage2=False)
    try:
        out = generate(model, inputs)
    finally:
        todre.hf.disable(model)
    assert torch.equal(out, ref)


def test_bfloat16_model():
    model = qwen2_5_vl(num_layers=6).to(torch.bfloat16)
    inputs, _ = qwen_inputs(model, grids=GRIDS)
    inputs["pixel_values"] = inputs["pixel_values"].to(torch.bfloat16)
    check_cache_after_drop(model, inputs, probe=3)


def test_videos_pass_through_stage1_and_count_as_visual_in_stage2():
    model = qwen2_5_vl(num_layers=3)
    g = torch.Generator().manual_seed(3)
    img, vid = (1, 8, 12), (2, 4, 4)
    n_img, n_vid = 24, 8
    row = [1, 5, QWEN_START] + [QWEN_IMAGE] * n_img + [153, 6, QWEN_START] + [152] * n_vid \
        + [153, 7, 8]
    ids = torch.tensor([row])
    types = (ids == QWEN_IMAGE).int() + 2 * (ids == 152).int()
    inputs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=types,
                  pixel_values=torch.randn(96, 24, generator=g), image_grid_thw=torch.tensor([img]),
                  pixel_values_videos=torch.randn(32, 24, generator=g),
                  video_grid_thw=torch.tensor([vid]))
    kw = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, return_dict_in_generate=True,
              output_scores=True)
    ref = model.generate(**inputs, **kw)
    todre.hf.enable(model, ratio=1.0, tau=0.0)
    try:
        out = model.generate(**inputs, **kw)
        assert torch.equal(out.sequences, ref.sequences)
        assert all(torch.equal(a, b) for a, b in zip(out.scores, ref.scores))
        todre.hf.enable(model, ratio=0.5, tau=1.0, probe_layers=[1])
        out = model.generate(**inputs, **kw)
        st = todre.hf.stats(model)
    finally:
        todre.hf.disable(model)
    assert out.sequences.shape == ref.sequences.shape
    assert st["kept_tokens"] == [12] and st["llm_image_tokens"] == [12]
    assert st["visual_tokens"] == [12 + n_vid] and st["drop_layer"] == [1]
