"""todre.hf under threads, as a threaded web server runs it: several threads
calling generate() on the same enabled models at the same time, with different
settings per model, inputs and decoding modes. Every call must give exactly
what the same call gives alone (sequences, scores) and stats() in each thread
must describe that thread's own last call."""

import copy
import random
import threading

import pytest
import torch

import todre
import todre.hf
from tiny_models import llava_batch, llava_next, qwen2_5_vl, qwen_batch

SETTINGS = {
    "identity": dict(ratio=1.0, tau=0.0),
    "stage1": dict(ratio=0.5, stage2=False),
    "both": dict(ratio=0.5, tau=1.0, probe_layers=[1]),
    "keep": dict(keep=3, tau=0.0),
}
CALLS = {
    "batch": dict(max_new_tokens=4, min_new_tokens=4, do_sample=False),
    "row": dict(max_new_tokens=3, min_new_tokens=3, do_sample=False),
    "beam": dict(max_new_tokens=3, min_new_tokens=3, do_sample=False, num_beams=2),
}
THREADS = 6


def _row(batch, b):
    """Row b of a one-image-per-row batch, as a batch of its own."""
    out = {}
    for key, value in batch.items():
        out[key] = value[b:b + 1] if key in ("input_ids", "attention_mask",
                                              "mm_token_type_ids") else value
    return out


@pytest.fixture(scope="module")
def world():
    """Models of both architectures, one per setting, and the calls made on them."""
    models, inputs = {}, {}
    for kind, make, batch in (("llava", llava_next, llava_batch), ("qwen", qwen2_5_vl, qwen_batch)):
        base = make(num_layers=3)
        rows = (((40, 60),), ((64, 30),)) if kind == "llava" else (((1, 8, 12),), ((1, 4, 8),))
        two, _ = batch(base, rows=rows)
        one, _ = batch(base, rows=rows[:1])
        inputs[kind] = {"batch": two, "row": one, "beam": two}
        for name, cfg in SETTINGS.items():
            model = copy.deepcopy(base)
            todre.hf.enable(model, **cfg)
            models[(kind, name)] = model
    work = [(kind, name, call) for (kind, name) in models for call in CALLS]
    return models, inputs, work


def _call(models, inputs, item):
    kind, name, call = item
    model = models[(kind, name)]
    with torch.no_grad():
        out = model.generate(**inputs[kind][call], **CALLS[call], return_dict_in_generate=True,
                             output_scores=True)
    return out, todre.hf.stats(model)


def _same(ref, got):
    (a, sa), (b, sb) = ref, got
    assert torch.equal(a.sequences, b.sequences)
    assert len(a.scores) == len(b.scores)
    assert all(torch.equal(x, y) for x, y in zip(a.scores, b.scores))
    assert sa.keys() == sb.keys()
    for key in sa:
        if key == "kept_indices":
            assert all(torch.equal(x, y) for x, y in zip(sa[key], sb[key]))
        else:
            assert sa[key] == sb[key], key


def test_concurrent_calls_equal_the_same_calls_alone(world):
    models, inputs, work = world
    ref = {item: _call(models, inputs, item) for item in work}
    # the settings did act (not all identity): pruned calls keep fewer tokens
    assert ref[("llava", "stage1", "batch")][1]["kept_tokens"] != \
        ref[("llava", "identity", "batch")][1]["kept_tokens"]
    assert set(ref[("qwen", "both", "batch")][1]["drop_layer"]) == {1}
    errors, done = [], []
    start = threading.Barrier(THREADS)

    def worker(seed):
        order = list(work) * 2
        random.Random(seed).shuffle(order)
        start.wait()
        try:
            for item in order:
                _same(ref[item], _call(models, inputs, item))
                done.append(item)
        except BaseException as exc:        # reported in the main thread
            errors.append((item, exc))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len(done) == THREADS * 2 * len(work)


def test_stats_are_those_of_the_calling_threads_last_call(world):
    models, inputs, _ = world
    model = models[("llava", "stage1")]
    _, mine = _call(models, inputs, ("llava", "stage1", "row"))
    other = threading.Thread(target=_call, args=(models, inputs, ("llava", "stage1", "batch")))
    other.start()
    other.join()
    assert _same_stats(todre.hf.stats(model), mine)
    assert len(todre.hf.stats(model)["image_tokens"]) == 1        # this thread's one-row call
    seen = {}
    fresh = threading.Thread(target=lambda: seen.update(todre.hf.stats(model)))
    fresh.start()
    fresh.join()
    assert seen == {}                                               # no call in that thread


def _same_stats(a, b):
    return a.keys() == b.keys() and all(
        all(torch.equal(x, y) for x, y in zip(a[k], b[k])) if k == "kept_indices" else a[k] == b[k]
        for k in a)


@pytest.mark.parametrize("kind", ("llava", "qwen"))
def test_a_running_call_leaves_other_threads_plain_and_blocks_enable(world, kind):
    """While one thread is inside an enabled generate(), a plain forward of the same
    model in another thread is the plain model's (the hooks act on their own call's
    state only), and enable() / disable() refuse with STATE instead of pulling the
    hooks from under the running call."""
    models, inputs, _ = world
    model = models[(kind, "both")]
    batch = inputs[kind]["batch"]
    plain = copy.deepcopy(model)
    todre.hf.disable(plain)
    with torch.no_grad():
        want = plain(**batch).logits
    entered, release = threading.Event(), threading.Event()
    holder = {}

    def block(module, args, output):
        if threading.current_thread() is holder.get("thread"):
            entered.set()
            release.wait(60)

    handle = model.lm_head.register_forward_hook(block)
    result = {}
    runner = threading.Thread(target=lambda: result.update(
        out=_call(models, inputs, (kind, "both", "batch"))))
    holder["thread"] = runner
    try:
        runner.start()
        assert entered.wait(60)
        with torch.no_grad():
            got = model(**batch).logits
        assert torch.equal(got, want)
        for action in (lambda: todre.hf.disable(model),
                       lambda: todre.hf.enable(model, **SETTINGS["stage1"])):
            with pytest.raises(todre.TodreError) as err:
                action()
            assert err.value.status == todre.Status.STATE
            assert "running" in str(err.value)
    finally:
        release.set()
        runner.join()
        handle.remove()
    assert todre.hf.is_enabled(model)
    assert result["out"][1]["drop_layer"] == [1, 1]
