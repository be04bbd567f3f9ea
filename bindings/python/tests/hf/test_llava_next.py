"""todre.hf on a tiny random LlavaNextForConditionalGeneration (offline)."""

import pytest
import torch

import todre
import todre.hf
from common import (GEN, capture_llm_inputs, check_cache_after_drop,
                    check_cached_decoding_equals_recomputation,
                    check_ratio_one_equals_unpruned, expected_k, generate)
from tiny_models import LLAVA_IMAGE, llava_inputs, llava_next

SIZES = ((40, 60), (64, 30))   # two AnyRes layouts: 2 and 2 crops, different unpadding


@pytest.fixture(scope="module")
def model():
    return llava_next(num_layers=8)


@pytest.fixture(scope="module")
def batch(model):
    return llava_inputs(model, sizes=SIZES, texts=((5, 6), (7, 8, 9)))


def test_ratio_one_without_stage2_equals_unpruned(model, batch):
    check_ratio_one_equals_unpruned(model, batch[0])


def test_both_stages_end_to_end(model, batch):
    inputs, counts = batch
    todre.hf.enable(model, ratio=0.1, tau=1.0, probe_layers=[4])
    try:
        out = generate(model, inputs)
        st = todre.hf.stats(model)
    finally:
        todre.hf.disable(model)
    assert out.shape == (2, inputs["input_ids"].shape[1] + GEN["max_new_tokens"])
    assert torch.equal(out[:, :inputs["input_ids"].shape[1]], inputs["input_ids"])
    assert st["image_tokens"] == counts
    assert st["kept_tokens"] == [expected_k(n, 0.1) for n in counts]
    assert st["drop_layer"] == [4, 4]
    assert set(st["ratios"]) == {(0, 4), (1, 4)}


def test_visual_tokens_reaching_the_llm_are_the_k_kept_features(model, batch):
    inputs, counts = batch
    with torch.no_grad():
        feats = model.model.get_image_features(inputs["pixel_values"], inputs["image_sizes"],
                                               return_dict=True).pooler_output
    todre.hf.enable(model, ratio=0.25, stage2=False)
    seen, handle = capture_llm_inputs(model)
    try:
        generate(model, inputs)
        st = todre.hf.stats(model)
    finally:
        handle.remove()
        todre.hf.disable(model)
    k = [expected_k(n, 0.25) for n in counts]
    assert st["llm_image_tokens"] == k
    embeds = seen[0]["inputs_embeds"]                     # the prefill
    assert embeds.shape[1] == max(int(m) - n + kk for m, n, kk in
                                  zip(inputs["attention_mask"].sum(-1), counts, k))
    for b in range(2):
        # the image slots of row b hold exactly features[b][kept], in position order
        slots = embeds[b, -(embeds.shape[1]):]
        kept = st["kept_indices"][b]
        want = feats[b][kept]
        found = torch.stack([row for row in slots if any(torch.equal(row, w) for w in want)])
        assert torch.equal(found, want)


def test_pivot_is_the_thumbnail_cls_argmax(model, batch):
    """Stage 1 equals todre.select on the packed features with the thumbnail's CLS
    attention (pivot range = the thumbnail's tokens)."""
    from todre.hf._llava_next import image_features
    inputs, _ = batch
    todre.hf.enable(model, ratio=0.2, stage2=False)
    try:
        generate(model, inputs)
        st = todre.hf.stats(model)
        with torch.no_grad():          # (the [CLS] capture hooks belong to the enabled model)
            feats, cls, thumb = image_features(model, inputs["pixel_values"],
                                               inputs["image_sizes"], -2, "default")
    finally:
        todre.hf.disable(model)
    assert thumb == 16 and cls is not None
    for f, a, kept in zip(feats, cls, st["kept_indices"]):
        assert a.shape[0] == f.shape[0] and float(a.max()) <= 1.0
        order = todre.select(f, ratio=0.2, cls=a, pivot="cls", pivot_range=(0, thumb),
                             order="selection")
        assert int(order[0]) == int(torch.argmax(a[:thumb]))
        assert sorted(order.tolist()) == kept.tolist()


def test_cls_map_matches_eager_attention(model, batch):
    """The CLS row computed from the layer's Q and K equals the attention
    probabilities an eager vision tower reports."""
    from todre.hf._llava_next import _REQUEST, _ClsRequest, install
    inputs, _ = batch
    tower = model.model.vision_tower
    pv = inputs["pixel_values"][0, :3]
    handles = install(model)
    req = _ClsRequest(tower.encoder.layers[1].self_attn)
    token = _REQUEST.set(req)
    old = tower.config._attn_implementation
    tower.config._attn_implementation = "eager"
    try:
        with torch.no_grad():
            out = tower(pv, output_attentions=True, return_dict=True)
    finally:
        tower.config._attn_implementation = old
        _REQUEST.reset(token)
        for h in handles:
            h.remove()
    want = out.attentions[1].mean(dim=1)[:, 0]
    assert torch.allclose(req.maps, want, atol=1e-6)


def test_kv_cache_after_drop_excludes_visual_tokens(model, batch):
    check_cache_after_drop(model, batch[0], probe=4)


def test_cached_decoding_equals_recomputation(model, batch):
    check_cached_decoding_equals_recomputation(model, batch[0], probe=3)


def test_prefill_after_drop_matches_a_manual_computation(model):
    """Logits of a dropped prefill = layers 0..l on the full prompt, then layers
    l+1.. on the non-visual positions with their original positions."""
    inputs, counts = llava_inputs(model, sizes=((40, 60),))
    probe = 3
    lm = model.model.language_model
    with torch.no_grad():
        full = model(**inputs, output_hidden_states=True, return_dict=True)
        hidden = full.hidden_states[probe + 1]
        ids = inputs["input_ids"][0]
        keep = torch.nonzero(ids != LLAVA_IMAGE).flatten()
        h = hidden[:, keep]
        pos = keep[None]
        rope = lm.rotary_emb(h, position_ids=pos)
        for layer in lm.layers[probe + 1:]:
            h = layer(h, attention_mask=None, position_embeddings=rope, position_ids=pos)
        want = model.lm_head(lm.norm(h))[:, -1]
        todre.hf.enable(model, ratio=None, tau=1.0, probe_layers=[probe])
        try:
            got = model.generate(**inputs, max_new_tokens=1, do_sample=False,
                                 return_dict_in_generate=True, output_logits=True).logits[0]
        finally:
            todre.hf.disable(model)
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(got, full.logits[:, -1], atol=1e-3)   # the drop changed it


def test_no_drop_when_tau_is_zero(model, batch):
    inputs, _ = batch
    base = generate(model, inputs)
    todre.hf.enable(model, ratio=1.0, tau=0.0, probe_layers=[4])
    try:
        out = generate(model, inputs)
        st = todre.hf.stats(model)
    finally:
        todre.hf.disable(model)
    assert st["drop_layer"] == [None, None]
    assert torch.equal(out, base)


def test_batch_rows_match_single_rows(model, batch):
    inputs, _ = batch
    todre.hf.enable(model, ratio=0.25, tau=1.0, probe_layers=[4])
    try:
        both = generate(model, inputs)
        singles = []
        for b, size in enumerate(SIZES):
            one, _ = llava_inputs(model, sizes=(size,), texts=((5, 6), (7, 8, 9)))
            one["pixel_values"] = inputs["pixel_values"][b:b + 1, :one["pixel_values"].shape[1]]
            singles.append(generate(model, one)[0, -GEN["max_new_tokens"]:])
    finally:
        todre.hf.disable(model)
    assert torch.equal(both[:, -GEN["max_new_tokens"]:], torch.stack(singles))


def test_eager_attention_model(batch):
    model = llava_next(num_layers=6, attn="eager")
    inputs, _ = llava_inputs(model, sizes=SIZES)
    check_cache_after_drop(model, inputs, probe=2)
    check_cached_decoding_equals_recomputation(model, inputs, probe=2)


def test_disable_restores_the_model(model, batch):
    inputs, _ = batch
    base = generate(model, inputs)
    todre.hf.enable(model, ratio=0.1, tau=1.0, probe_layers=[2])
    assert todre.hf.is_enabled(model)
    todre.hf.disable(model)
    assert not todre.hf.is_enabled(model) and "generate" not in model.__dict__
    assert torch.equal(generate(model, inputs), base)


def test_bad_settings_raise_todre_error(model):
    for kwargs in (dict(ratio=0.0), dict(ratio=2.0), dict(keep=0), dict(objective="x"),
                   dict(pivot="middle"), dict(tau=2.0), dict(probe_layers=[99]),
                   dict(schedule="never"), dict(fallback_pivot="cls")):
        with pytest.raises(todre.TodreError):
            todre.hf.enable(model, **kwargs)
        assert not todre.hf.is_enabled(model)


def test_unsupported_attention_and_model():
    model = llava_next(num_layers=2)
    model.config.text_config._attn_implementation = "flash_attention_2"
    with pytest.raises(todre.TodreError) as e:
        todre.hf.enable(model)
    assert e.value.status == todre.Status.UNSUPPORTED
    with pytest.raises(todre.TodreError):
        todre.hf.enable(torch.nn.Linear(2, 2))


def test_text_only_prompt_is_untouched(model):
    ids = torch.tensor([[1, 5, 6, 7, 8, 9, 10]])
    base = model.generate(input_ids=ids, **GEN)
    todre.hf.enable(model, ratio=0.1, tau=1.0, probe_layers=[2])
    try:
        out = model.generate(input_ids=ids, **GEN)
    finally:
        todre.hf.disable(model)
    assert torch.equal(out, base)


def test_stage2_only_through_generate(model, batch):
    inputs, counts = batch
    todre.hf.enable(model, ratio=None, tau=1.0, probe_layers=[5])
    try:
        out = generate(model, inputs, return_dict_in_generate=True)
        st = todre.hf.stats(model)
    finally:
        todre.hf.disable(model)
    assert st["drop_layer"] == [5, 5] and st["visual_tokens"] == counts
    real = inputs["attention_mask"].sum(-1)
    steps = GEN["max_new_tokens"] - 1
    lengths = [layer.keys.shape[-2] for layer in out.past_key_values.layers]
    assert lengths[:6] == [inputs["input_ids"].shape[1] + steps] * 6
    assert lengths[6:] == [int((real - torch.tensor(counts)).max()) + steps] * 2


def test_sequences_dropping_at_different_layers(model, batch, monkeypatch):
    """Row 0 drops after layer 2, row 1 after layer 4: layers 3-4 run without row
    0's visual tokens, layers 5.. without either; decoding from that cache
    equals recomputation."""
    inputs, counts = batch
    todre.hf.enable(model, ratio=None, tau=1.0, probe_layers=[2, 4])
    created = []

    class PerRowProbe(todre.Relevance):
        def __init__(self, num_layers, **kw):
            kw["probe_layers"] = [2] if len(created) % 2 == 0 else [4]
            created.append(self)
            super().__init__(num_layers, **kw)

    monkeypatch.setattr(todre, "Relevance", PerRowProbe)
    try:
        out = generate(model, inputs, return_dict_in_generate=True)
        st = todre.hf.stats(model)
        recomputed = generate(model, inputs, use_cache=False)
    finally:
        todre.hf.disable(model)
    assert st["drop_layer"] == [2, 4]
    assert torch.equal(out.sequences, recomputed)
    real = inputs["attention_mask"].sum(-1)
    steps = GEN["max_new_tokens"] - 1
    lengths = [layer.keys.shape[-2] for layer in out.past_key_values.layers]
    mid = int(max(real[0] - counts[0], real[1])) + steps
    late = int((real - torch.tensor(counts)).max()) + steps
    assert lengths == [inputs["input_ids"].shape[1] + steps] * 3 + [mid] * 2 + [late] * 3


def test_bfloat16_model():
    """bf16 features and bf16 Q/K go to the library as they are."""
    model = llava_next(num_layers=6).to(torch.bfloat16)
    inputs, _ = llava_inputs(model, sizes=SIZES)
    inputs["pixel_values"] = inputs["pixel_values"].to(torch.bfloat16)
    check_cache_after_drop(model, inputs, probe=3)


@pytest.mark.parametrize("budget", ("shared", "per-group"))
def test_grouped_budget_over_thumbnail_and_crop_grid(model, batch, budget):
    """budget 'shared' / 'per-group': an image's thumbnail and its crop grid are
    two groups; each keeps the count todre.group_counts gives from the sizes,
    and each is selected as its own rows alone."""
    inputs, counts = batch
    todre.hf.enable(model, ratio=0.25, stage2=False, budget=budget, group_min=3)
    try:
        generate(model, inputs)
        st = todre.hf.stats(model)
        with torch.no_grad():
            from todre.hf._llava_next import image_features
            feats, cls, thumb = image_features(model, inputs["pixel_values"],
                                               inputs["image_sizes"], -2, "default")
    finally:
        todre.hf.disable(model)
    for f, a, n, kept in zip(feats, cls, counts, st["kept_indices"]):
        group_k, total = todre.group_counts([0, thumb, n], ratio=0.25, budget=budget,
                                            group_min=3)
        assert len(kept) == total
        want = []
        for (lo, hi), k in zip(((0, thumb), (thumb, n)), group_k):
            want += (todre.select(f[lo:hi], keep=int(k), cls=a[lo:hi]) + lo).tolist()
        assert kept.tolist() == want
