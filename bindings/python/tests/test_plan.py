"""Prune plans (libtodre 1.1) against a reference written from
docs/semantics.md ("Prune plans"), not from the C code: group counts under
each budget policy, grouped selection (each group as its own set, against
the float64 greedy of tests/reference/todre_ref.py), per-token scores and
steps, positions under each policy, and the signatures' equality rule. Inputs
cover single images, AnyRes, multi-image prompts, videos of 1 to 64 frames,
empty groups and groups of one token, budgets that do not divide, and bad
input."""

import math
import random

import numpy as np
import pytest

import todre
import todre_ref as ref
from todre import Status, TodreError

# -- the reference ------------------------------------------------------------------


def ref_keep(n, keep=None, ratio=0.1):
    if keep:
        return keep
    return int(min(max(math.floor(ratio * n + 0.5), 1), n))


def ref_counts(sizes, budget, keep=None, ratio=0.1, group_min=1):
    """(counts, total) by docs/semantics.md; ValueError where it says invalid."""
    n = sum(sizes)
    if budget == "set":
        K = ref_keep(n, keep, ratio)
        if K > n:
            raise ValueError("keep above n")
        return [-1] * len(sizes), K
    if budget == "per-group":
        counts = [0 if s == 0 else (min(keep, s) if keep else ref_keep(s, None, ratio))
                  for s in sizes]
        return counts, sum(counts)
    K = ref_keep(n, keep, ratio)
    if K > n:
        raise ValueError("keep above n")
    floor = [min(group_min, s) for s in sizes]
    F = sum(floor)
    if F >= K:                             # the minimums are kept
        return floor, F
    R, C = K - F, n - F
    room = [s - f for s, f in zip(sizes, floor)]
    share = [R * c // C if C else 0 for c in room]
    rem = [R * c % C if C else 0 for c in room]
    left = R - sum(share)
    order = sorted(range(len(sizes)), key=lambda j: (-rem[j], j))
    for j in order[:left]:
        share[j] += 1
    return [f + s for f, s in zip(floor, share)], K


def offsets(sizes):
    return [0] + list(np.cumsum(sizes).tolist())


# -- group counts ---------------------------------------------------------------------

CASES = {
    "single image": [2880],
    "anyres": [576, 576, 576, 576, 576],
    "anyres, thumbnail and a crop grid": [576, 1728],
    "two images and a video": [576, 2304, 64 * 16],
    "empty and one-token groups": [0, 1, 7, 0, 1, 300],
    "budget that does not divide": [3, 5, 7, 11],
}
VIDEOS = {f"video of {f} frames": [144] * f for f in (1, 2, 7, 16, 64)}


@pytest.mark.parametrize("sizes", list(CASES.values()) + list(VIDEOS.values()),
                         ids=list(CASES) + list(VIDEOS))
@pytest.mark.parametrize("budget", ("set", "shared", "per-group"))
@pytest.mark.parametrize("ratio", (0.1, 0.25, 0.333, 1.0))
def test_group_counts_equal_the_reference(sizes, budget, ratio):
    for group_min in (1, 3):
        want_counts, want_total = ref_counts(sizes, budget, ratio=ratio, group_min=group_min)
        got = todre.group_counts(offsets(sizes), ratio=ratio, budget=budget,
                                 group_min=group_min)
        assert got[0].tolist() == want_counts and got[1] == want_total
        if budget != "set":
            assert sum(got[0]) == got[1]
            assert all(0 <= k <= s for k, s in zip(got[0], sizes))
            assert all(k >= 1 for k, s in zip(got[0], sizes) if s)     # none starved


def test_group_counts_random():
    rng = random.Random(7)
    for _ in range(400):
        G = rng.randint(1, 12)
        sizes = [rng.choice([0, 1, 2, rng.randint(1, 50), rng.randint(1, 3000)])
                 for _ in range(G)]
        if sum(sizes) == 0:
            sizes[0] = 1
        budget = rng.choice(["set", "shared", "per-group"])
        keep = rng.choice([None, None, rng.randint(1, max(1, sum(sizes)))])
        ratio = None if keep else rng.choice([0.01, 0.1, 0.5, rng.random() or 0.5])
        group_min = rng.randint(1, 20)
        try:
            want = ref_counts(sizes, budget, keep=keep, ratio=ratio, group_min=group_min)
        except ValueError:
            with pytest.raises(TodreError) as err:
                todre.group_counts(offsets(sizes), keep=keep, ratio=ratio, budget=budget,
                                   group_min=group_min)
            assert err.value.status == Status.INVALID_ARGUMENT
            continue
        got = todre.group_counts(offsets(sizes), keep=keep, ratio=ratio, budget=budget,
                                 group_min=group_min)
        assert (got[0].tolist(), got[1]) == (want[0], want[1]), (sizes, budget, keep, ratio)


def test_group_counts_bad_input():
    def refused(*args, **kw):
        with pytest.raises(TodreError) as err:
            todre.group_counts(*args, **kw)
        assert err.value.status == Status.INVALID_ARGUMENT
        return err.value.message

    assert "decrease" in refused([0, 10, 5, 20], budget="shared")    # unsorted / overlapping
    assert "groups[0]" in refused([1, 10], budget="shared")
    assert "no rows" in refused([0, 0, 0], budget="shared")
    assert "G >= 1" in refused([0], budget="shared")
    assert "keep" in refused([0, 5, 10], keep=11, budget="set")
    with pytest.raises(TodreError) as err:
        todre.group_counts([0, 5], budget="shared", group_min=0)
    assert err.value.status == Status.INVALID_ARGUMENT


# -- selection with groups ---------------------------------------------------------------

def ref_grouped(E, sizes, budget, ratio, cls=None, objective="max-sum", pivot="auto",
                group_min=1):
    """Kept indices (position order) and the selection order, by the reference:
    SET is one selection; SHARED and PER_GROUP select every group alone."""
    counts, total = ref_counts(sizes, budget, ratio=ratio, group_min=group_min)
    if budget == "set":
        order = ref.select(E, total, cls=cls, objective=objective, pivot=pivot)
        return sorted(order), list(order)
    kept, sel, start = [], [], 0
    for s, k in zip(sizes, counts):
        if s:
            part = ref.select(E[start:start + s], k,
                              cls=None if cls is None else cls[start:start + s],
                              objective=objective, pivot=pivot)
            kept += sorted(int(i) + start for i in part)
            sel += [int(i) + start for i in part]
        start += s
    return kept, sel


def separated(sizes, budget, ratio, objective, cls, group_min):
    """Embeddings (from the first seed that gives them) whose every greedy step,
    in every group the reference selects, wins by more than 1e-4, so that
    fp32 rounding cannot flip a choice."""
    counts, total = ref_counts(sizes, budget, ratio=ratio, group_min=group_min)
    spans = [(0, sum(sizes), total)] if budget == "set" else \
        [(a, a + s, k) for a, s, k in zip(offsets(sizes), sizes, counts) if s]
    for seed in range(100):
        E = np.random.default_rng(seed).standard_normal((sum(sizes), 24)).astype(np.float32)
        E64 = E.astype(np.float64)
        ok = True
        for a, b, k in spans:
            c = None if cls is None else cls[a:b]
            order = ref.select(E64[a:b], k, cls=c, objective=objective)
            m = ref.check_trajectory(E64[a:b], order, cls=c, objective=objective).margins
            ok = ok and min(m, default=np.inf) > 1e-4
        if ok:
            return E
    raise AssertionError("no well-separated input in 100 seeds")


@pytest.mark.parametrize("budget", ("set", "shared", "per-group"))
@pytest.mark.parametrize("objective", ("max-sum", "max-min", "cls-topk"))
@pytest.mark.parametrize("sizes", ([40, 0, 1, 25, 60], [30] * 8, [90]), ids=("mixed", "frames",
                                                                             "one"))
def test_grouped_selection_equals_the_reference(budget, objective, sizes):
    n = sum(sizes)
    cls = (np.random.default_rng(4).permutation(n) / n).astype(np.float32)  # gaps of 1/n
    use_cls = cls if objective == "cls-topk" else None
    E = separated(sizes, budget, 0.25, objective, use_cls, 2)
    want_kept, want_sel = ref_grouped(E, sizes, budget, 0.25, cls=use_cls, objective=objective,
                                      group_min=2)
    got = todre.select(E, ratio=0.25, groups=offsets(sizes), budget=budget, group_min=2,
                       cls=use_cls, objective=objective, order="both")
    assert got[1].tolist() == want_kept
    assert got[0].tolist() == want_sel


def test_a_group_equals_its_rows_alone_and_batches_equal_single_sets():
    rng = np.random.default_rng(11)
    sizes_a, sizes_b = [576, 0, 1152, 3], [200, 200]
    A = rng.standard_normal((sum(sizes_a), 64)).astype(np.float32)
    B = rng.standard_normal((sum(sizes_b), 64)).astype(np.float32)
    for budget in ("shared", "per-group"):
        ka = todre.select(A, ratio=0.1, groups=offsets(sizes_a), budget=budget)
        counts, _ = todre.group_counts(offsets(sizes_a), ratio=0.1, budget=budget)
        start, parts = 0, []
        for s, k in zip(sizes_a, counts):
            if s:
                parts += (todre.select(A[start:start + s], keep=int(k)) + start).tolist()
            start += s
        assert ka.tolist() == parts
        kb = todre.select(B, ratio=0.1, groups=offsets(sizes_b), budget=budget)
        both = todre.select_batch([A, B], ratio=0.1, groups=[offsets(sizes_a), offsets(sizes_b)],
                                  budget=budget)
        assert both[0].tolist() == ka.tolist() and both[1].tolist() == kb.tolist()
        cat, out_off = todre.select_batch(np.concatenate([A, B]), offsets=[0, len(A), len(A) + len(B)],
                                          ratio=0.1, budget=budget,
                                          groups=offsets(sizes_a + sizes_b))
        assert cat[:out_off[1]].tolist() == ka.tolist()
        assert cat[out_off[1]:].tolist() == kb.tolist()
    # SET with groups is the 1.0 selection
    assert np.array_equal(todre.select(A, ratio=0.1, groups=offsets(sizes_a)),
                          todre.select(A, ratio=0.1))


def test_the_video_pivot_is_the_best_of_the_frames_best():
    rng = np.random.default_rng(5)
    frames, t = 6, 20
    E = rng.standard_normal((frames * t, 32)).astype(np.float32)
    cls = rng.random((frames, t)).astype(np.float32)
    order = todre.select(E, ratio=0.2, cls=cls, order="selection",
                         groups=offsets([t] * frames))
    per_frame_best = [f * t + int(np.argmax(cls[f])) for f in range(frames)]
    assert int(order[0]) == max(per_frame_best, key=lambda i: (cls.reshape(-1)[i], -i))


def test_groups_that_cross_a_set_are_refused():
    E = np.ones((10, 4), dtype=np.float32)
    with pytest.raises(TodreError) as err:
        todre.select_batch(E, offsets=[0, 4, 10], ratio=0.5, groups=[0, 5, 10],
                           budget="shared")
    assert err.value.status == Status.INVALID_ARGUMENT and "set boundary" in err.value.message


# -- scores and steps ---------------------------------------------------------------------

@pytest.mark.parametrize("objective", ("max-sum", "max-min", "cls-topk"))
@pytest.mark.parametrize("budget", ("set", "per-group"))
def test_scores_and_steps_equal_the_reference(objective, budget):
    rng = np.random.default_rng(9)
    sizes = [50, 1, 70]
    E = rng.standard_normal((sum(sizes), 16)).astype(np.float32)
    E[3] = 0                                            # a zero row
    cls = rng.random(sum(sizes)).astype(np.float32)
    use_cls = cls if objective == "cls-topk" else None
    kept, scores, steps = todre.select(E, ratio=0.2, groups=offsets(sizes), budget=budget,
                                       cls=use_cls, objective=objective, with_scores=True)
    order = todre.select(E, ratio=0.2, groups=offsets(sizes), budget=budget, cls=use_cls,
                         objective=objective, order="selection")
    X = ref.normalize(E)
    spans = [(0, sum(sizes))] if budget == "set" else \
        [(a, b) for a, b in zip(offsets(sizes), offsets(sizes)[1:]) if b > a]
    want_scores, want_steps = np.zeros(len(E)), np.full(len(E), -1)
    at = 0
    for a, b in spans:
        k = sum(1 for i in order if a <= i < b)
        C = [int(i) for i in order[at:at + k]]
        at += k
        for j, c in enumerate(C):
            want_steps[c] = j
        S = X[a:b] @ X[C].T
        if objective == "max-sum":
            want_scores[a:b] = S.sum(1)
        elif objective == "max-min":
            want_scores[a:b] = S.max(1)
        else:
            want_scores[a:b] = cls[a:b]
    assert steps.tolist() == want_steps.tolist()
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)
    assert sorted(kept.tolist()) == sorted(int(i) for i in np.nonzero(steps >= 0)[0])


# -- positions -------------------------------------------------------------------------

def ref_positions(pos, kept, policy):
    pos = np.asarray(pos, dtype=np.int64).reshape(len(pos), -1)
    start, end = int(pos.min()), int(pos.max())
    k = len(kept)
    if policy == "keep":
        ids, nxt = pos[kept], end + 1
    elif policy == "compact":
        ids, nxt = np.repeat((start + np.arange(k))[:, None], pos.shape[1], 1), start + k
    else:
        ids = pos[kept]
        nxt = int(ids.max()) + 1
    return ids, nxt, nxt - start - k


def qwen_image(start, t, h, w):
    """(t, h, w) ids of a Qwen2.5-VL span of t x h x w merged tokens."""
    tt, hh, ww = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")
    return np.stack([start + tt.ravel(), start + hh.ravel(), start + ww.ravel()], 1)


@pytest.mark.parametrize("policy", ("keep", "compact", "keep-max"))
def test_positions_equal_the_reference(policy):
    rng = np.random.default_rng(2)
    spans = [np.arange(100, 160)[:, None],                       # 1-D RoPE
             qwen_image(5, 1, 2, 3),                              # the worked example
             qwen_image(40, 1, 16, 24),                           # an image
             qwen_image(7, 8, 6, 6)]                              # a video (t = frames)
    for pos in spans:
        n = len(pos)
        for k in (1, 2, n // 3 + 1, n):
            kept = np.sort(rng.choice(n, size=k, replace=False))
            got = todre.positions(pos, kept, policy)
            want = ref_positions(pos, kept, policy)
            assert np.array_equal(got[0], want[0]) and got[1:] == want[1:]
    ids, nxt, delta = todre.positions(np.arange(10, 20), [0, 5], policy)   # 1-D in, 1-D out
    assert ids.shape == (2,)


def test_positions_worked_example():
    pos = qwen_image(5, 1, 2, 3)
    assert todre.positions(pos, [0, 4], "keep")[1:] == (8, 1)
    assert todre.positions(pos, [0, 4], "compact")[0].tolist() == [[5, 5, 5], [6, 6, 6]]
    assert todre.positions(pos, [0, 4], "keep-max")[1:] == (7, 0)
    assert todre.positions(pos, range(6), "keep")[1:] == (8, -3)


def test_a_prompts_rope_delta_is_the_sum_of_its_spans():
    """Text, an image, text, a video, text: every token's position after the
    spans is its pruned column plus the spans' deltas so far."""
    img, vid = qwen_image(3, 1, 4, 4), None
    kept_img = [0, 5, 10, 15]
    ids_img, nxt, d1 = todre.positions(img, kept_img, "keep")
    vid = qwen_image(nxt + 2, 4, 2, 2)                       # after 2 text tokens
    kept_vid = [0, 3, 8, 15]
    ids_vid, nxt2, d2 = todre.positions(vid, kept_vid, "keep")
    # pruned prompt: 3 text, 4 image, 2 text, 4 video, then text from column 13
    assert nxt2 == 13 + d1 + d2


def test_positions_bad_input():
    pos = qwen_image(0, 1, 2, 2)

    def refused(p, k, policy="keep"):
        with pytest.raises(TodreError) as err:
            todre.positions(p, k, policy)
        assert err.value.status == Status.INVALID_ARGUMENT
        return err.value.message

    assert "ascend" in refused(pos, [2, 1])
    assert "ascend" in refused(pos, [1, 1])
    assert "outside" in refused(pos, [0, 4])
    assert "k <= n" in refused(pos, [0, 1, 2, 3, 3])
    assert "1 <= P <= 8" in refused(np.zeros((4, 9), dtype=np.int64), [0])
    assert "policy" in refused(pos, [0], policy=7)
    assert "int64" in refused(np.array([[2**63 - 1]]), [0])


# -- signatures --------------------------------------------------------------------------

def sig(**kw):
    return todre.select_signature(**kw)


def test_signature_equality_follows_the_selection():
    # the same tokens from every input: equal
    assert sig(objective="max-min") == sig(objective="max-min", pivot="isolated")
    assert sig(ratio=0.1, seed=1) == sig(ratio=0.1, seed=2)                # seed unused
    assert sig(pivot="random", seed=1) != sig(pivot="random", seed=2)
    assert sig(objective="cls-topk", pivot="center", pivot_range=(0, 5)) == \
        sig(objective="cls-topk")                                          # pivot unused
    assert sig(budget="set", group_min=5) == sig(budget="set")
    assert sig(budget="shared", group_min=5) != sig(budget="shared", group_min=4)
    cfg_a = todre.SelectConfig(ratio=0.1, order="selection")
    cfg_b = todre.SelectConfig(ratio=0.1, order="position")
    assert cfg_a.signature() == cfg_b.signature()                          # order: not which
    # differ where some input selects differently
    assert sig(ratio=0.1) != sig(ratio=0.1000001)
    assert sig(keep=10) != sig(ratio=0.1)
    assert sig(pivot="auto") != sig(pivot="cls") != sig(pivot="center")
    assert sig(pivot_range=(0, 576)) != sig()
    assert sig(budget="shared") != sig(budget="per-group") != sig()
    assert sig().startswith("todre-select-1;")


def test_equal_signatures_select_alike():
    rng = np.random.default_rng(1)
    pairs = [(dict(objective="max-min"), dict(objective="max-min", pivot="isolated")),
             (dict(ratio=0.2, seed=3), dict(ratio=0.2, seed=9)),
             (dict(ratio=0.2, order="selection"), dict(ratio=0.2, order="position"))]
    for a, b in pairs:
        assert sig(**{k: v for k, v in a.items() if k != "order"}) == \
            sig(**{k: v for k, v in b.items() if k != "order"})
        for _ in range(5):
            E = rng.standard_normal((120, 16)).astype(np.float32)
            assert sorted(todre.select(E, **a).tolist()) == sorted(todre.select(E, **b).tolist())


def test_relevance_signature():
    a = todre.Relevance(32)
    b = todre.Relevance(32, batch=4)                   # the batch is not in it
    assert a.signature() == b.signature() == \
        "todre-relevance-1;layers=32;tau=0x1.999999999999ap-4;schedule=list;probes=28"
    c = todre.Relevance(32, probe_layers=[20, 25], schedule="until-drop")
    d = todre.Relevance(32, probe_layers=[20], schedule="until-drop")
    assert c.signature() == d.signature() and c.signature().endswith("probes=20+")
    assert todre.Relevance(32, tau=0.2).signature() != a.signature()
    assert todre.Relevance(32, probe_layers=[20, 25]).signature().endswith("probes=20,25")
