"""`todre select` against the float64 reference (tests/reference/todre_ref.py).

Inputs are random but screened: a case is used only when every greedy step
of the reference trajectory wins by a margin far above float32 rounding, so
the exact index sequence is the right expectation (no near-ties).
"""
import json

import numpy as np
import pytest

import todre_ref as ref
from conftest import auto_backend

MIN_MARGIN = 1e-4


def separated_case(n, d, k, *, dtype=np.float32, cls=None, frames=None, objective="max-sum",
                   pivot="auto", pivot_range=(0, None), seed=0, start=0):
    """(E, cls_map, order): the first data seed from `start` whose reference
    trajectory has no step closer than MIN_MARGIN."""
    for data_seed in range(start, start + 200):
        rng = np.random.default_rng(data_seed)
        E = rng.standard_normal((n, d)).astype(dtype)
        C = None
        if cls is not None:
            C = rng.random(n).astype(cls)
            if frames:
                C = C.reshape(frames, n // frames)
        kw = dict(cls=None if C is None else C.astype(np.float64), objective=objective,
                  pivot=pivot, pivot_range=pivot_range, seed=seed)
        E64 = E.astype(np.float64)
        order = ref.select(E64, k, **kw)
        margins = ref.check_trajectory(E64, order, **kw).margins
        if min(margins) > MIN_MARGIN:
            return E, C, order
    pytest.fail("no well-separated case found")


def run_select(cli, npy, E, C, *args):
    argv = ["select", "--embeddings", npy("emb", E)]
    if C is not None:
        argv += ["--cls", npy("cls", C)]
    return json.loads(cli(*argv, *args, "--json").ok())


CASES = [
    # (objective, pivot option or None, with CLS map, reference pivot mode)
    ("max-sum", None, False, "auto"),       # AUTO without CLS = CENTER
    ("max-sum", None, True, "auto"),        # AUTO with CLS = CLS
    ("max-sum", "cls", True, "cls"),
    ("max-sum", "center", True, "center"),
    ("max-sum", "farthest", False, "farthest"),
    ("max-sum", "random", False, "random"),
    ("max-sum", "isolated", False, "isolated"),
    ("max-min", None, False, "auto"),       # AUTO = ISOLATED (DivPrune)
    ("max-min", None, True, "auto"),        # still ISOLATED with a CLS map
    ("max-min", "cls", True, "cls"),
    ("max-min", "center", False, "center"),
    ("max-min", "random", False, "random"),
    ("cls-topk", None, True, "auto"),
]


@pytest.mark.parametrize("objective,pivot,with_cls,mode", CASES)
def test_matches_reference(cli, npy, objective, pivot, with_cls, mode):
    n, d, k = 90, 24, 17
    E, C, order = separated_case(n, d, k, cls=np.float32 if with_cls else None,
                                 objective=objective, pivot=mode, seed=11)
    args = ["--keep", k, "--order", "selection", "--seed", 11]
    if objective != "max-sum":
        args += ["--objective", objective]
    if pivot:
        args += ["--pivot", pivot]
    out = run_select(cli, npy, E, C, *args)
    assert out["indices"] == order
    assert out["pivot"] == order[0]
    assert (out["n"], out["k"], out["order"]) == (n, k, "selection")


def test_position_order_is_the_sorted_selection(cli, npy):
    E, C, order = separated_case(70, 16, 12, cls=np.float32)
    out = run_select(cli, npy, E, C, "--keep", 12)
    assert out["order"] == "position"
    assert out["indices"] == sorted(order)
    assert out["pivot"] == order[0]


@pytest.mark.parametrize("rng_text,bounds", [("20:50", (20, 50)), ("33:", (33, None)),
                                             ("10:-1", (10, None))])
@pytest.mark.parametrize("pivot", ["cls", "center", "farthest", "random"])
def test_pivot_range(cli, npy, rng_text, bounds, pivot):
    E, C, order = separated_case(80, 20, 9, cls=np.float32, pivot=pivot, pivot_range=bounds,
                                 seed=5)
    out = run_select(cli, npy, E, C, "--keep", 9, "--pivot", pivot, "--pivot-range", rng_text,
                     "--seed", 5, "--order", "selection")
    assert out["indices"] == order
    lo, hi = bounds
    assert lo <= out["pivot"] < (hi if hi is not None else 80)


def test_random_pivot_follows_the_seed(cli, npy):
    E, _, _ = separated_case(200, 8, 3)
    pivots = set()
    for seed in (0, 1, 2, -7, 2**63 - 1):
        out = run_select(cli, npy, E, None, "--keep", 3, "--pivot", "random", "--seed", seed)
        assert out["pivot"] == ref.splitmix64_pivot(seed, 0, 200)
        pivots.add(out["pivot"])
    assert len(pivots) > 1


def test_float16_inputs(cli, npy):
    E, C, order = separated_case(100, 32, 20, dtype=np.float16, cls=np.float16)
    out = run_select(cli, npy, E, C, "--keep", 20, "--order", "selection")
    assert out["indices"] == order


def test_video_cls_map_is_flattened_frame_major(cli, npy):
    E, C, order = separated_case(96, 16, 10, cls=np.float32, frames=4, pivot="cls",
                                 pivot_range=(24, 72))
    assert C.shape == (4, 24)
    out = run_select(cli, npy, E, C, "--keep", 10, "--pivot-range", "24:72", "--order",
                     "selection")
    assert out["indices"] == order
    topk = run_select(cli, npy, E, C, "--keep", 10, "--objective", "cls-topk", "--order",
                      "selection")
    assert topk["indices"] == ref.select(E, 10, cls=C, objective="cls-topk")


@pytest.mark.parametrize("n,ratio", [(45, "0.1"), (2880, "0.1"), (2880, "0.25"), (7, "0.01"),
                                     (9, "1"), (15, "0.5")])
def test_ratio_budget(cli, npy, n, ratio):
    E = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
    out = run_select(cli, npy, E, None, "--ratio", ratio, "--pivot", "random")
    k = ref.keep_count(n, ratio=float(ratio))
    assert out["k"] == k and len(out["indices"]) == k
    assert out["indices"] == sorted(set(out["indices"]))


def test_keep_everything_and_keep_one(cli, npy):
    E, _, order = separated_case(30, 8, 30)
    assert run_select(cli, npy, E, None, "--keep", 30, "--order", "selection")["indices"] == order
    assert run_select(cli, npy, E, None, "--keep", 30)["indices"] == list(range(30))
    one = run_select(cli, npy, E, None, "--keep", 1)
    assert one["indices"] == [order[0]] and one["pivot"] == order[0]


def test_json_fields(cli, npy):
    E, _, _ = separated_case(50, 8, 5)
    out = run_select(cli, npy, E, None, "--keep", 5, "--backend", "cpu")
    assert set(out) == {"indices", "order", "n", "k", "pivot", "backend", "seconds"}
    assert out["backend"] == "cpu"
    assert isinstance(out["seconds"], float) and 0 <= out["seconds"] < 60
    assert all(isinstance(i, int) for i in out["indices"])


def test_plain_output_is_one_line_of_indices(cli, npy):
    E, _, order = separated_case(60, 8, 7)
    text = cli("select", "--embeddings", npy("e", E), "--keep", "7").ok()
    assert text.endswith("\n") and text.count("\n") == 1
    assert text == " ".join(str(i) for i in sorted(order)) + "\n"
    text = cli("select", "--embeddings=" + str(npy("e", E)), "--keep=7", "--order=selection").ok()
    assert [int(t) for t in text.split()] == order


def test_zero_rows_are_allowed(cli, npy):
    E = np.random.default_rng(3).standard_normal((40, 8)).astype(np.float32)
    E[[5, 17]] = 0
    out = run_select(cli, npy, E, None, "--keep", 40, "--order", "selection")
    assert sorted(out["indices"]) == list(range(40))


def test_auto_backend_reports_what_ran(cli, npy):
    info = json.loads(cli("info", "--json").ok())
    E, _, order = separated_case(50, 8, 6)
    out = run_select(cli, npy, E, None, "--keep", 6, "--order", "selection")
    assert out["backend"] == auto_backend(info)
    assert out["indices"] == order
