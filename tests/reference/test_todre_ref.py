"""Sanity tests of the float64 stage-1 reference itself (todre_ref.py): known
PRNG vectors, the budget arithmetic, small cases solved by hand, and that
check_trajectory accepts the reference's own output and rejects a broken one."""
import itertools
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import todre_ref as ref  # noqa: E402


def test_splitmix64_known_vectors():
    # Published first outputs of splitmix64 for seeds 0 and 1234567.
    assert ref._splitmix64_next(0)[1] == 0xE220A8397B1DCDAF
    assert ref._splitmix64_next(1234567)[1] == 6457827717110365317


def test_splitmix64_pivot_range_and_seed_wrap():
    for seed in (0, 1, -1, 2 ** 63 - 1, -(2 ** 63)):
        p = ref.splitmix64_pivot(seed, 17, 190)
        assert 17 <= p < 190
    assert ref.splitmix64_pivot(-1, 0, 1000) == ref.splitmix64_pivot(2 ** 64 - 1, 0, 1000)
    assert ref.splitmix64_pivot(5, 3, 4) == 3


def test_keep_count():
    assert ref.keep_count(2880, ratio=0.10) == 288
    assert ref.keep_count(2880, ratio=0.25) == 720
    assert ref.keep_count(5, ratio=0.5) == 3
    assert ref.keep_count(5, ratio=0.01) == 1
    assert ref.keep_count(7, keep=7) == 7
    for bad in (dict(keep=8), dict(ratio=0.0), dict(ratio=1.5)):
        with pytest.raises(ValueError):
            ref.keep_count(7, **bad)


def test_normalize_zero_row():
    X = ref.normalize([[3.0, 4.0], [0.0, 0.0]])
    assert np.allclose(X, [[0.6, 0.8], [0.0, 0.0]])


def test_max_sum_by_hand():
    # Four unit vectors in the plane at 0, 10, 90 and 180 degrees.
    ang = np.radians([0.0, 10.0, 90.0, 180.0])
    E = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    # CLS pivot 1 (10 deg); least similar to it: 180 deg (3); then the sums
    # s(v,1) + s(v,3) are cos 10 - 1 = -0.015 for 0 deg and cos 80 = 0.17 for
    # 90 deg, so 0 deg (0) comes before 90 deg (2).
    assert ref.select(E, 4, cls=[0.1, 0.9, 0.0, 0.0]) == [1, 3, 0, 2]


def test_max_min_is_max_min_distance():
    rng = np.random.default_rng(1)
    E = rng.standard_normal((9, 3))
    order = ref.select(E, 4, objective="max-min", pivot="center")
    X = ref.normalize(E)
    # brute force the greedy rule from the definition
    chosen = [order[0]]
    for _ in range(3):
        rest = [v for v in range(9) if v not in chosen]
        chosen.append(max(rest, key=lambda v: (min(1 - X[v] @ X[u] for u in chosen), -v)))
    assert order == chosen


def test_max_sum_matches_brute_force():
    rng = np.random.default_rng(2)
    E = rng.standard_normal((10, 4))
    order = ref.select(E, 5, pivot="farthest")
    X = ref.normalize(E)
    chosen = [order[0]]
    for _ in range(4):
        rest = [v for v in range(10) if v not in chosen]
        chosen.append(min(rest, key=lambda v: (sum(X[v] @ X[u] for u in chosen), v)))
    assert order == chosen


def test_ties_go_to_lowest_index():
    E = np.array([[1.0, 0.0]] * 3 + [[0.0, 1.0]] * 3)
    assert ref.select(E, 6, pivot="center") == [0, 3, 1, 4, 2, 5]
    assert ref.select(E, 3, cls=[1, 1, 1, 1, 1, 1], objective="cls-topk") == [0, 1, 2]


def test_isolated_and_video_cls_pivot():
    E = np.array([[1.0, 0.0], [0.99, 0.1], [0.0, 1.0], [-1.0, 0.05]])
    # nearest-other similarities: 0.995 (rows 0, 1), 0.1 (row 2: row 1) and
    # 0.05 (row 3: row 2): row 3's nearest neighbour is farthest
    assert ref.pivot(E, None, "isolated") == 3
    cls = np.array([[0.1, 0.2], [0.7, 0.3]])  # [frames, t], frame-major flat argmax
    assert ref.pivot(E, cls, "cls") == 2
    assert ref.pivot(E, cls, "cls", lo=0, hi=2) == 1


def test_check_trajectory_accepts_reference_rejects_swaps():
    rng = np.random.default_rng(3)
    E = rng.standard_normal((40, 6))
    for objective, piv in itertools.product(("max-sum", "max-min"), ("center", "isolated", "random")):
        order = ref.select(E, 12, objective=objective, pivot=piv, seed=9)
        check = ref.check_trajectory(E, order, objective=objective, pivot=piv, seed=9)
        assert check.valid and len(check.margins) == 12
        bad = order[:]
        bad[4], bad[7] = bad[7], bad[4]
        broken = ref.check_trajectory(E, bad, objective=objective, pivot=piv, seed=9, tol=1e-9)
        assert not broken.valid and broken.step == 4
