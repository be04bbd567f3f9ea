"""todre.hf as a drop-in, on tiny random LLaVA-NeXT and Qwen2.5-VL.

The identity property: enable(ratio=1.0, stage2=False) and enable(ratio=1.0,
tau=0.0) give exactly the plain model's generate() output (sequences, scores,
logits, beam scores) over a matrix of inputs (left / right padding, masked
placeholders, several images of different sizes per row, inputs_embeds with and
without input_ids) and decoding modes (greedy, seeded sampling, beam,
num_return_sequences, assisted, static cache, continue-from-cache). A pruning
configuration (ratio 0.5, a drop at layer 1) gives output of the same shape
with the caller's prompt in front, or a TodreError where it is refused.
"""

import pytest
import torch

import todre
import todre.hf
from tiny_models import (LLAVA_IMAGE, QWEN_IMAGE, llava_batch, llava_next, masked_placeholders,
                         qwen2_5_vl, qwen_batch, right_padded, with_embeds)

NEW = 4
BASE = dict(max_new_tokens=NEW, min_new_tokens=NEW, return_dict_in_generate=True,
            output_scores=True, output_logits=True)
MODES = {
    "greedy": dict(do_sample=False),
    "sample": dict(do_sample=True, top_k=0),
    "beam": dict(do_sample=False, num_beams=2),
    "sample_nrs": dict(do_sample=True, num_return_sequences=2),
    "beam_nrs": dict(do_sample=False, num_beams=3, num_return_sequences=2),
    "static_cache": dict(do_sample=False, cache_implementation="static"),
    "assisted": dict(do_sample=False),           # assistant_model = the model itself
    "prompt_lookup": dict(do_sample=False, prompt_lookup_num_tokens=2),
    "hidden_states": dict(do_sample=False, output_hidden_states=True),
}
SINGLE_ROW = ("assisted", "prompt_lookup")            # assisted decoding: batch size 1
VARIANTS = ("left", "right", "masked", "no_mask", "ids_and_embeds", "embeds_only")
IDENTITY = (dict(ratio=1.0, stage2=False), dict(ratio=1.0, tau=0.0))
PRUNED = dict(ratio=0.5, tau=1.0, probe_layers=[1])


@pytest.fixture(scope="module")
def models():
    return {"llava": llava_next(num_layers=3), "qwen": qwen2_5_vl(num_layers=3)}


_INPUTS = {}


def make_inputs(models, kind, variant, single=False):
    key = (kind, variant, single)
    if key in _INPUTS:
        return _INPUTS[key]
    model = models[kind]
    if kind == "llava":
        rows = ((40, 60), (32, 32)), ((64, 30),)
        batch, counts = llava_batch(model, rows=rows[:1] if single else rows)
        token = LLAVA_IMAGE
    else:
        rows = ((1, 8, 12), (1, 4, 4)), ((1, 4, 8),)
        batch, counts = qwen_batch(model, rows=rows[:1] if single else rows)
        token = QWEN_IMAGE
    if variant == "right":
        batch = right_padded(batch, token)
    elif variant == "masked":
        batch = masked_placeholders(batch, token)
        # the plain Qwen2.5-VL cannot place masked placeholders in 3-D with
        # mm_token_type_ids (its get_rope_index fails): it uses text positions
        batch.pop("mm_token_type_ids", None)
    elif variant == "no_mask":
        batch = {k: v for k, v in batch.items() if k != "attention_mask"}   # inferred from pad
    elif variant == "ids_and_embeds":
        batch = with_embeds(model, batch)
    elif variant == "embeds_only":
        batch = with_embeds(model, batch, keep_ids=False)
    _INPUTS[key] = (batch, counts)
    return batch, counts


def run(model, inputs, **kw):
    torch.manual_seed(0)
    with torch.no_grad():
        return model.generate(**inputs, **kw)


def assert_same_output(ref, out):
    """Every tensor field of two generate() outputs is identical."""
    assert type(ref) is type(out)

    def same(a, b, key):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b), key
        elif isinstance(a, (tuple, list)):
            assert len(a) == len(b), key
            for x, y in zip(a, b):
                same(x, y, key)
        else:
            assert a == b, key

    assert set(ref.keys()) == set(out.keys())
    for key in ref.keys():
        if key != "past_key_values":
            same(ref[key], out[key], key)


def expected_k(n, ratio):
    return max(1, min(n, int(ratio * n + 0.5)))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", ("llava", "qwen"))
def test_identity_and_pruned_output(models, kind, variant, mode):
    model = models[kind]
    kw = dict(BASE, **MODES[mode])
    inputs, counts = make_inputs(models, kind, variant, single=mode in SINGLE_ROW)
    if mode == "assisted":
        kw["assistant_model"] = model
    try:
        ref = run(model, inputs, **kw)
    except Exception as exc:        # e.g. assisted decoding from inputs_embeds alone
        todre.hf.enable(model, **IDENTITY[1])
        try:
            with pytest.raises(type(exc)):
                run(model, inputs, **kw)
        finally:
            todre.hf.disable(model)
        return
    assert ref.sequences.shape[1] == inputs.get("input_ids", torch.empty(0, 0)).shape[1] + NEW

    for cfg in IDENTITY:
        todre.hf.enable(model, **cfg)
        try:
            out = run(model, inputs, **kw)
            st = todre.hf.stats(model)
        finally:
            todre.hf.disable(model)
        assert_same_output(ref, out)
        assert st["kept_tokens"] == counts
        if cfg.get("stage2", True):
            assert set(st["drop_layer"]) == {None} and st["ratios"]   # probed, kept

    pruned = dict(PRUNED)
    if mode == "static_cache":
        # a drop needs the dynamic cache: refused at the call, before anything runs
        todre.hf.enable(model, **pruned)
        try:
            with pytest.raises(todre.TodreError) as err:
                run(model, inputs, **kw)
        finally:
            todre.hf.disable(model)
        assert err.value.status == todre.Status.UNSUPPORTED
        pruned = dict(ratio=0.5, stage2=False)
    todre.hf.enable(model, **pruned)
    try:
        out = run(model, inputs, **kw)
        st = todre.hf.stats(model)
    finally:
        todre.hf.disable(model)
    assert out.sequences.shape == ref.sequences.shape
    assert len(out.scores) == len(ref.scores) == NEW
    if "input_ids" in inputs:                           # the caller's prompt in front
        L = inputs["input_ids"].shape[1]
        rows = out.sequences.shape[0] // inputs["input_ids"].shape[0]
        assert torch.equal(out.sequences[:, :L], inputs["input_ids"].repeat_interleave(rows, 0))
    assert st["kept_tokens"] == [expected_k(n, 0.5) for n in counts]
    if pruned.get("stage2", True):
        assert set(st["drop_layer"]) == {1}


@pytest.mark.parametrize("variant", ("left", "right", "masked", "ids_and_embeds"))
@pytest.mark.parametrize("kind", ("llava", "qwen"))
def test_continue_from_cache(models, kind, variant):
    """transformers' continue-from-cache pattern: 3 tokens, then 1 more from the
    returned sequences and past_key_values."""
    model = models[kind]
    inputs, _ = make_inputs(models, kind, variant)
    kw = dict(do_sample=False, return_dict_in_generate=True, output_scores=True)

    def both(**extra):
        full = run(model, inputs, max_new_tokens=NEW, **kw, **extra)
        part = run(model, inputs, max_new_tokens=NEW - 1, **kw, **extra)
        nxt = {k: v for k, v in inputs.items() if k not in ("pixel_values", "inputs_embeds")}
        nxt["input_ids"] = part.sequences
        grown = part.sequences.shape[1] - inputs["input_ids"].shape[1]
        nxt["attention_mask"] = torch.nn.functional.pad(inputs["attention_mask"], (0, grown),
                                                        value=1)
        nxt["past_key_values"] = part.past_key_values
        cont = run(model, nxt, max_new_tokens=1, **kw)
        cont.scores = part.scores + cont.scores
        return full, cont

    plain_full, plain_cont = both()
    for cfg in IDENTITY:
        todre.hf.enable(model, **cfg)
        try:
            full, cont = both()
        finally:
            todre.hf.disable(model)
        assert_same_output(plain_full, full)
        assert_same_output(plain_cont, cont)
    for cfg in (PRUNED, dict(ratio=0.5, stage2=False), dict(ratio=None, tau=1.0, probe_layers=[1])):
        todre.hf.enable(model, **cfg)
        try:
            full, cont = both()
        finally:
            todre.hf.disable(model)
        assert cont.sequences.shape == plain_cont.sequences.shape
        assert torch.equal(cont.sequences[:, :inputs["input_ids"].shape[1]], inputs["input_ids"])
        lengths = [layer.keys.shape[-2] for layer in cont.past_key_values.layers]
        assert lengths == [layer.keys.shape[-2] for layer in full.past_key_values.layers]
        if variant != "right":
            # (right padding: generate() numbers new tokens after the last column, a
            # continuation after the real tokens; the plain model differs there too)
            assert torch.equal(cont.sequences, full.sequences)
            for a, b in zip(cont.scores, full.scores):
                assert torch.allclose(a, b, atol=1e-5)


# -- what "valid output" means at other ratios --------------------------------------
@pytest.mark.parametrize("variant", ("left", "right"))
def test_llava_pruned_equals_the_plain_model_on_the_pruned_prompt(models, variant):
    """Stage 1 at ratio 0.5 = the plain model given the prompt without the dropped
    placeholders and the kept features, each row keeping the trailing padding the
    caller gave it (rows right-aligned: a row the caller did not pad at its end
    is not padded there after pruning either)."""
    model = models["llava"]
    inputs, counts = make_inputs(models, "llava", variant)
    kw = dict(BASE, do_sample=False)
    todre.hf.enable(model, ratio=0.5, stage2=False)
    try:
        out = run(model, inputs, **kw)
        kept = todre.hf.stats(model)["kept_indices"]
    finally:
        todre.hf.disable(model)
    with torch.no_grad():
        feats = model.model.get_image_features(inputs["pixel_values"], inputs["image_sizes"],
                                               return_dict=True).pooler_output
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    rows, image = [], 0
    for b in range(ids.shape[0]):
        cols = torch.nonzero(mask[b]).flatten()
        img = cols[ids[b, cols] == LLAVA_IMAGE]
        drop = torch.zeros(ids.shape[1], dtype=torch.bool)
        start = 0
        while start < img.numel():
            n = counts[image]
            own = torch.ones(n, dtype=torch.bool)
            own[kept[image]] = False
            drop[img[start:start + n][own]] = True
            start, image = start + n, image + 1
        rows.append(ids[b][mask[b].bool() & ~drop])
    # each row keeps the trailing padding the caller gave it; rows are right-aligned
    trailing = [int(torch.cumprod((mask[b].flip(0) == 0).long(), 0).sum()) for b in range(len(rows))]
    width = max(r.numel() + t for r, t in zip(rows, trailing))
    new_ids = torch.zeros(len(rows), width, dtype=torch.long)
    new_mask = torch.zeros_like(new_ids)
    for b, (r, t) in enumerate(zip(rows, trailing)):
        sl = slice(width - t - r.numel(), width - t)
        new_ids[b, sl], new_mask[b, sl] = r, 1
    from transformers.modeling_outputs import BaseModelOutputWithPooling
    pruned = BaseModelOutputWithPooling(pooler_output=[f[k] for f, k in zip(feats, kept)])
    ref = run(model, dict(input_ids=new_ids, attention_mask=new_mask,
                          mm_encoder_outputs={"image": pruned}), **kw)
    assert torch.equal(out.sequences[:, ids.shape[1]:], ref.sequences[:, width:])
    for a, b in zip(out.scores, ref.scores):
        assert torch.equal(a, b)


@pytest.mark.parametrize("mode", ("beam", "sample_nrs"))
@pytest.mark.parametrize("kind", ("llava", "qwen"))
def test_drop_with_expanded_rows_equals_recomputation(models, kind, mode):
    """Beams and return sequences after a drop: decoding from the pruned cache
    (rows expanded, beams reordered) equals recomputing every step without one."""
    model = models[kind]
    inputs, _ = make_inputs(models, kind, "left")
    kw = dict(MODES[mode], max_new_tokens=NEW, min_new_tokens=NEW)
    todre.hf.enable(model, **PRUNED)
    try:
        cached = run(model, inputs, **kw)
        assert set(todre.hf.stats(model)["drop_layer"]) == {1}
        recomputed = run(model, inputs, use_cache=False, **kw)
    finally:
        todre.hf.disable(model)
    assert torch.equal(cached, recomputed)


def test_max_length_counts_the_callers_prompt(models):
    model = models["llava"]
    inputs, _ = make_inputs(models, "llava", "left")
    L = inputs["input_ids"].shape[1]
    ref = run(model, inputs, max_length=L + 3, min_length=L + 3, do_sample=False)
    todre.hf.enable(model, ratio=0.25, tau=1.0, probe_layers=[1])
    try:
        out = run(model, inputs, max_length=L + 3, min_length=L + 3, do_sample=False)
    finally:
        todre.hf.disable(model)
    assert out.shape == ref.shape == (2, L + 3)


def test_max_length_errors_speak_of_the_callers_prompt(models):
    """A max_length the caller's prompt already reaches is refused with the very
    message the plain model gives, not with the pruned prompt's lengths."""
    model = models["llava"]
    inputs, _ = make_inputs(models, "llava", "left")
    L = inputs["input_ids"].shape[1]
    for max_length in (L - 5, 10):
        with pytest.raises(ValueError) as plain:
            run(model, inputs, max_length=max_length, do_sample=False)
        assert f"is {L}, but `max_length` is set to {max_length}." in str(plain.value)
        todre.hf.enable(model, ratio=0.25, tau=1.0, probe_layers=[1])
        try:
            with pytest.raises(ValueError) as err:
                run(model, inputs, max_length=max_length, do_sample=False)
        finally:
            todre.hf.disable(model)
        assert str(err.value) == str(plain.value)


@pytest.mark.parametrize("kind", ("llava", "qwen"))
def test_right_padding_keeps_each_rows_own_padding(models, kind):
    """Right padding where pruning shortens the longest (unpadded) row below another:
    that row still ends in its last real token (padding goes in front of it), so it
    continues exactly as the same row alone; the padded row keeps exactly the
    trailing padding the caller gave it."""
    model = models[kind]
    if kind == "llava":
        batch, counts = llava_batch(model, rows=(((64, 64),), ((32, 32),)))
        token = LLAVA_IMAGE
    else:
        batch, counts = qwen_batch(model, rows=(((1, 8, 12),), ((1, 4, 4),)))
        token = QWEN_IMAGE
    ids, mask = batch["input_ids"], batch["attention_mask"]
    real = [ids[b][mask[b].bool()].tolist() for b in range(2)]
    extra = len(real[0]) - len(real[1]) - 2          # row 1: 2 shorter than row 0, more text
    real[1] = real[1][:-2] + [20 + i % 50 for i in range(extra)] + real[1][-2:]
    width = len(real[0])
    new_ids = torch.zeros(2, width, dtype=torch.long)
    new_mask = torch.zeros(2, width, dtype=torch.long)
    for b, r in enumerate(real):
        new_ids[b, :len(r)], new_mask[b, :len(r)] = torch.tensor(r), 1
    right = dict(batch, input_ids=new_ids, attention_mask=new_mask)
    alone = {k: (v[:1] if k in ("input_ids", "attention_mask") else v) for k, v in right.items()}
    if kind == "qwen":
        right["mm_token_type_ids"] = (new_ids == token).int()
        alone["mm_token_type_ids"] = right["mm_token_type_ids"][:1]
        alone["image_grid_thw"] = right["image_grid_thw"][:1]
        alone["pixel_values"] = right["pixel_values"][:int(right["image_grid_thw"][0].prod())]
    else:
        alone["image_sizes"] = right["image_sizes"][:1]
        alone["pixel_values"] = right["pixel_values"][:1]
    assert new_mask[0].all() and not new_mask[1, -1]
    kw = dict(BASE, do_sample=False)
    seen = []
    lm = model.model.language_model
    todre.hf.enable(model, ratio=0.25, stage2=False)
    handle = lm.register_forward_pre_hook(
        lambda m, a, k: seen.append(k.get("attention_mask")), with_kwargs=True)
    try:
        out = run(model, right, **kw)
        st = todre.hf.stats(model)
        handle.remove()
        one = run(model, alone, **kw)
    finally:
        handle.remove()
        todre.hf.disable(model)
    k = [expected_k(n, 0.25) for n in counts]
    assert st["kept_tokens"] == k
    assert len(real[0]) - counts[0] + k[0] < len(real[1]) - counts[1] + k[1]   # row 0 now shorter
    prefill = seen[0]
    assert prefill[0, -1] == 1                       # row 0 still ends in a real token
    trailing = int(torch.cumprod((prefill[1].flip(0) == 0).long(), 0).sum())
    assert trailing == 2                             # row 1: exactly the caller's padding
    assert torch.equal(out.sequences[0, -NEW:], one.sequences[0, -NEW:])
    for a, b in zip(out.scores, one.scores):
        assert torch.allclose(a[0], b[0], atol=1e-5)


def test_prompts_without_text_after_the_image_keep_their_visual_tokens(models):
    """A row whose last real token is visual (or that has no text at all) is not
    eligible for a drop: the next token is predicted from its last token."""
    model = models["llava"]
    inputs, _ = make_inputs(models, "llava", "left")
    ids, mask = inputs["input_ids"], inputs["attention_mask"].clone()
    mask[1] = (ids[1] == LLAVA_IMAGE).long()            # row 1: image tokens only
    cut = dict(inputs, attention_mask=mask)
    todre.hf.enable(model, ratio=None, tau=1.0, probe_layers=[1])
    try:
        out = run(model, cut, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
        assert todre.hf.stats(model)["drop_layer"] == [1, None]
        ends = dict(inputs, input_ids=ids[:, :-3], attention_mask=inputs["attention_mask"][:, :-3])
        run(model, ends, max_new_tokens=NEW, do_sample=False)     # [..., <image>]
        assert todre.hf.stats(model)["drop_layer"] == [None, None]
    finally:
        todre.hf.disable(model)
    assert out.shape == (2, ids.shape[1] + NEW)


@pytest.mark.parametrize("kind", ("llava", "qwen"))
def test_pre_encoded_features_are_pruned_too(models, kind):
    """mm_encoder_outputs instead of pixel values: identical at ratio 1, pruned
    (with the fallback pivot: no [CLS] map) at lower ratios."""
    model = models[kind]
    inputs, counts = make_inputs(models, kind, "left")
    from transformers.modeling_outputs import BaseModelOutputWithPooling
    with torch.no_grad():
        args = ("image_sizes",) if kind == "llava" else ("image_grid_thw",)
        feats = model.model.get_image_features(inputs["pixel_values"], inputs[args[0]],
                                               return_dict=True).pooler_output
    pre = {k: v for k, v in inputs.items() if k not in ("pixel_values", "image_sizes")}
    pre["mm_encoder_outputs"] = {"image": BaseModelOutputWithPooling(pooler_output=list(feats))}
    kw = dict(BASE, do_sample=False)

    def fresh():
        return dict(pre, mm_encoder_outputs={
            "image": BaseModelOutputWithPooling(pooler_output=list(feats))})

    ref = run(model, fresh(), **kw)
    todre.hf.enable(model, ratio=1.0, tau=0.0)
    try:
        assert_same_output(ref, run(model, fresh(), **kw))
        todre.hf.enable(model, ratio=0.5, stage2=False)
        out = run(model, fresh(), **kw)
        st = todre.hf.stats(model)
    finally:
        todre.hf.disable(model)
    assert st["kept_tokens"] == [expected_k(n, 0.5) for n in counts]
    assert out.sequences.shape == ref.sequences.shape


# -- refused inputs: TodreError at the call -------------------------------------------
def test_bad_inputs_are_todre_errors(models):
    model = models["llava"]
    inputs, _ = make_inputs(models, "llava", "left")
    todre.hf.enable(model, ratio=0.5, stage2=False)
    try:
        ids = inputs["input_ids"].clone()
        ids[0, -1] = LLAVA_IMAGE                        # one placeholder too many
        with pytest.raises(todre.TodreError) as err:
            run(model, dict(inputs, input_ids=ids), max_new_tokens=2)
        assert err.value.status == todre.Status.INVALID_ARGUMENT
        part = run(model, inputs, max_new_tokens=2, return_dict_in_generate=True)
        other = part.sequences.clone()
        other[0, 1] += 1                                # not the prompt the cache holds
        mask = torch.nn.functional.pad(inputs["attention_mask"], (0, 2), value=1)
        with pytest.raises(todre.TodreError) as err:
            run(model, dict(input_ids=other, attention_mask=mask,
                            past_key_values=part.past_key_values), max_new_tokens=1)
        assert err.value.status == todre.Status.INVALID_ARGUMENT
    finally:
        todre.hf.disable(model)

    qwen = models["qwen"]
    inputs, _ = make_inputs(models, "qwen", "left")
    masked = masked_placeholders(inputs, QWEN_IMAGE)    # with mm_token_type_ids: mRoPE
    with pytest.raises(RuntimeError):
        run(qwen, masked, max_new_tokens=2)             # the plain model fails deep inside
    todre.hf.enable(qwen, ratio=0.5, stage2=False)
    try:
        with pytest.raises(todre.TodreError) as err:
            run(qwen, masked, max_new_tokens=2)
        assert err.value.status == todre.Status.INVALID_ARGUMENT
    finally:
        todre.hf.disable(qwen)
