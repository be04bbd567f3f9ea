"""An enabled model through deepcopy, save / load, attention switches, plain
forwards, compilation and static caches."""

import copy

import pytest
import torch

import todre
import todre.hf
from tiny_models import LLAVA_IMAGE, llava_batch, llava_next, qwen2_5_vl, qwen_batch

GEN = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, return_dict_in_generate=True,
           output_scores=True)
PRUNED = dict(ratio=0.5, tau=1.0, probe_layers=[1])
BUILD = {"llava": (llava_next, llava_batch), "qwen": (qwen2_5_vl, qwen_batch)}


def build(kind, **kw):
    make, batch = BUILD[kind]
    model = make(num_layers=3, **kw)
    return model, batch(model)[0]


def gen(model, inputs, **kw):
    with torch.no_grad():
        return model.generate(**inputs, **dict(GEN, **kw))


def same(a, b):
    return torch.equal(a.sequences, b.sequences) and all(
        torch.equal(x, y) for x, y in zip(a.scores, b.scores))


def hook_owners(model):
    """The Stage2 objects the model's hooks call into."""
    owners = set()
    for module in model.modules():
        for hooks in (module._forward_pre_hooks, module._forward_hooks):
            for h in hooks.values():
                if hasattr(h, "owner"):
                    owners.add(id(h.owner))
    return owners


@pytest.mark.parametrize("kind", ("llava", "qwen"))
def test_deepcopy_gives_an_independent_enabled_model(kind):
    model, inputs = build(kind)
    todre.hf.enable(model, **PRUNED)
    early = copy.deepcopy(model)                      # before any forward
    want = gen(model, inputs)
    late = copy.deepcopy(model)                       # after one (no C handles kept)
    for clone in (early, late):
        assert todre.hf.is_enabled(clone)
        assert clone.generate.__self__ is clone
        assert hook_owners(clone) == {id(clone._todre_state.stage2)}
        assert clone._todre_state.stage2.layers is clone.model.language_model.layers
        assert same(gen(clone, inputs), want)
        assert todre.hf.stats(clone)["drop_layer"] == [1, 1]
    with torch.no_grad():
        for p in late.parameters():
            p.add_(0.05)
    assert not same(gen(late, inputs), want)          # the clone runs its own weights
    assert same(gen(model, inputs), want)             # and the original is untouched
    todre.hf.disable(late)
    assert not hook_owners(late) and hook_owners(model)


@pytest.mark.parametrize("kind", ("llava", "qwen"))
def test_attention_switch_after_enable(kind):
    """set_attn_implementation() after enable() is followed at the next prefill
    (the mask format of the layers after a drop): same output as a model that was
    eager before enable(); an unsupported implementation is refused at the call."""
    model, inputs = build(kind)
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    todre.hf.enable(eager, **PRUNED)
    want_eager = gen(eager, inputs)
    todre.hf.enable(model, **PRUNED)
    want_sdpa = gen(model, inputs)
    model.set_attn_implementation("eager")
    assert same(gen(model, inputs), want_eager)
    model.set_attn_implementation("sdpa")
    assert same(gen(model, inputs), want_sdpa)
    # a switch between a prefill and its continuation: the cached layouts get the
    # new mask format (a boolean mask added by eager attention would be off by ~0.1)
    part = gen(model, inputs, max_new_tokens=3, min_new_tokens=3)
    nxt = {k: v for k, v in inputs.items() if k != "pixel_values"}
    nxt.update(input_ids=part.sequences, past_key_values=part.past_key_values,
               attention_mask=torch.nn.functional.pad(inputs["attention_mask"], (0, 3), value=1))
    model.set_attn_implementation("eager")
    cont = gen(model, nxt, max_new_tokens=1, min_new_tokens=1)
    assert torch.equal(cont.sequences, want_sdpa.sequences)
    assert torch.allclose(cont.scores[0], want_sdpa.scores[3], atol=1e-4)
    model.set_attn_implementation("sdpa")
    if kind == "llava":                               # (Qwen2.5-VL has no flex attention)
        model.set_attn_implementation("flex_attention")
        with pytest.raises(todre.TodreError) as err:
            gen(model, inputs)
        assert err.value.status == todre.Status.UNSUPPORTED
        model.set_attn_implementation("sdpa")
    todre.hf.disable(model)


def test_plain_forward_is_the_plain_model():
    """Stage 1 and 2 act in generate() only: forward with labels, a prompt whose
    real tokens are all visual, and a fullgraph-compiled forward are untouched."""
    model, inputs = build("llava")
    plain = copy.deepcopy(model)
    ids = inputs["input_ids"]
    only_visual = dict(inputs, attention_mask=(ids == LLAVA_IMAGE).long())
    text = dict(input_ids=torch.where(ids == LLAVA_IMAGE, 3, ids)[:, -12:])
    todre.hf.enable(model, ratio=0.25, tau=1.0, probe_layers=[0])
    with torch.no_grad():
        for batch in (dict(inputs, labels=ids), only_visual):
            got, want = model(**batch), plain(**batch)
            assert torch.equal(got.logits, want.logits)
            assert got.logits.shape[1] == ids.shape[1]
            if "labels" in batch:
                assert torch.equal(got.loss, want.loss)
        compiled = torch.compile(model, fullgraph=True, backend="eager")
        assert torch.equal(compiled(**text).logits, plain(**text).logits)
    model.train()
    loss = model(**inputs, labels=ids).loss
    loss.backward()                                   # training: the plain graph
    assert model.lm_head.weight.grad is not None
    model.eval()
    todre.hf.disable(model)


def test_save_and_load_round_trip(tmp_path):
    """save_pretrained of an enabled model saves the plain model; a loaded model is
    not enabled (enable() again), and then behaves as the original."""
    from transformers import LlavaNextForConditionalGeneration
    model, inputs = build("llava")
    plain = gen(model, inputs)
    todre.hf.enable(model, **PRUNED)
    want = gen(model, inputs)
    model.save_pretrained(tmp_path)
    assert todre.hf.is_enabled(model) and same(gen(model, inputs), want)
    loaded = LlavaNextForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert not todre.hf.is_enabled(loaded)
    assert same(gen(loaded, inputs), plain)
    todre.hf.enable(loaded, **PRUNED)
    assert same(gen(loaded, inputs), want)


def test_refusals_are_unsupported_todre_errors():
    from transformers import StaticCache
    model, inputs = build("llava")

    def refused(call):
        with pytest.raises(todre.TodreError) as err:
            call()
        assert err.value.status == todre.Status.UNSUPPORTED

    # at enable(): what the model's setup already decides
    model.generation_config.cache_implementation = "static"
    refused(lambda: todre.hf.enable(model, tau=0.5))
    todre.hf.enable(model, tau=0.0)                   # no drop possible: fine
    todre.hf.enable(model, stage2=False)
    todre.hf.disable(model)
    model.generation_config.cache_implementation = None
    compiled = copy.deepcopy(model)
    compiled.compile(backend="eager")
    refused(lambda: todre.hf.enable(compiled))
    todre.hf.enable(compiled, stage2=False)
    refused(lambda: todre.hf.enable(torch.compile(model, backend="eager")))
    assert not todre.hf.is_enabled(model)
    qwen = qwen2_5_vl(num_layers=2)
    qwen.config.text_config.layer_types = ["sliding_attention", "full_attention"]
    refused(lambda: todre.hf.enable(qwen, tau=0.5))     # sliding-window layers
    todre.hf.enable(qwen, tau=0.0)

    # at the call: what the call (or a later change) asks for
    todre.hf.enable(model, **PRUNED)
    refused(lambda: gen(model, inputs, cache_implementation="static"))
    cache = StaticCache(config=model.config, max_cache_len=512)
    refused(lambda: gen(model, inputs, past_key_values=cache))
    refused(lambda: gen(model, inputs, prefill_chunk_size=8))
    refused(lambda: gen(model, inputs, cache_implementation="paged"))
    model.compile(backend="eager")
    refused(lambda: gen(model, inputs))
    model._compiled_call_impl = None
    model.forward = torch.compile(model.forward, backend="eager")
    refused(lambda: gen(model, inputs))
    del model.forward
    gen(model, inputs)                                # back to normal
    todre.hf.disable(model)


def test_static_cache_with_compiled_decoding_and_no_drop():
    """A static cache with generate()'s automatic compilation of the decoding
    steps (fullgraph): the stage-2 hooks stay out of the graph when no drop is
    possible (tau 0), and the output equals the plain model's."""
    from transformers import CompileConfig
    model, inputs = build("llava")
    cfg = CompileConfig(backend="eager", fullgraph=True)
    cfg._compile_all_devices = True
    kw = dict(cache_implementation="static", compile_config=cfg)
    want = gen(model, inputs, **kw)
    todre.hf.enable(model, ratio=1.0, tau=0.0)
    try:
        got = gen(model, inputs, **kw)
    finally:
        todre.hf.disable(model)
    assert same(got, want)


def _recompilations(model, batches, cfg):
    """Recompilations torch.compile reports (its recompiles log, which
    transformers' own compile test reads) for generate()'s automatic
    compilation of the decoding steps, over calls on two different batches of
    one shape, after the same calls without compilation (the sequence that
    test runs)."""
    import logging
    from transformers import CompileConfig
    compile_config = CompileConfig(backend="eager", fullgraph=True, dynamic=False)
    compile_config._compile_all_devices = True
    kw = dict(GEN, max_new_tokens=5, min_new_tokens=5, compile_config=compile_config)
    torch.compiler.reset()
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("torch._dynamo")
    if cfg is not None:
        todre.hf.enable(model, **cfg)
    try:
        with torch.compiler.set_stance("force_eager"):
            for batch in batches:
                gen(model, batch, **kw)
        torch._logging.set_logs(recompiles=True)
        logger.addHandler(handler)
        outs = [gen(model, batch, cache_implementation="static", **kw) for batch in batches]
    finally:
        logger.removeHandler(handler)
        torch._logging.set_logs()
        if cfg is not None:
            todre.hf.disable(model)
    return sum("ecompil" in r.getMessage() for r in records), outs


@pytest.mark.parametrize("kind", ("llava", "qwen"))
def test_compiled_decoding_compiles_as_often_as_the_plain_model(kind):
    """The hooks add no recompilation in any mode that compiles the decoding
    steps (stage 2 at tau 0, stage 2 off, with or without stage 1): inside a
    compiled graph they return before reading any state."""
    make, batch = BUILD[kind]
    model = make(num_layers=3)
    rows = (((40, 60),), ((64, 30),)) if kind == "llava" else (((1, 8, 12),), ((1, 4, 8),))
    first = batch(model, rows=rows, seed=1)[0]
    second = batch(model, rows=rows, seed=2)[0]
    second["input_ids"] = second["input_ids"].clone()
    second["input_ids"][:, -1] = 11                  # a different prompt of the same shape
    plain, want = _recompilations(model, (first, second), None)
    for cfg in (dict(ratio=1.0, tau=0.0), dict(ratio=None, tau=0.0),
                dict(ratio=0.5, tau=0.0), dict(ratio=0.5, stage2=False)):
        count, outs = _recompilations(model, (first, second), cfg)
        assert count == plain, cfg
        if cfg["ratio"] == 1.0 or cfg["ratio"] is None:
            assert all(same(a, b) for a, b in zip(outs, want))
