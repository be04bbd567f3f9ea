"""todre.select against the float64 reference, across dtypes, orders, pivots and
array libraries."""

import numpy as np
import pytest
import torch

import todre
import todre_ref as ref
from helpers import well_separated

PIVOTS = ["auto", "center", "farthest", "random", "isolated", "cls"]


@pytest.mark.parametrize("objective", ["max-sum", "max-min"])
@pytest.mark.parametrize("pivot", PIVOTS)
def test_selection_order_equals_reference(objective, pivot):
    E, a, order, seed = well_separated(120, 24, 15, seed=10, cls=True, objective=objective,
                                       pivot=pivot)
    got = todre.select(E, keep=15, cls=a, objective=objective, pivot=pivot, seed=seed,
                       order="selection")
    assert got.tolist() == order


def test_cls_topk_equals_reference(rng):
    E = rng.standard_normal((64, 8)).astype(np.float32)
    a = rng.random(64).astype(np.float32)
    got = todre.select(E, keep=9, cls=a, objective="cls-topk", order="selection")
    assert got.tolist() == ref.select(E, 9, cls=a, objective="cls-topk")


def test_cls_topk_ties_go_to_the_lower_index():
    E = np.eye(6, dtype=np.float32)
    a = np.array([0.1, 0.5, 0.5, 0.2, 0.5, 0.0], np.float32)
    assert todre.select(E, keep=4, cls=a, objective="cls-topk",
                        order="selection").tolist() == [1, 2, 4, 3]


@pytest.mark.parametrize("pivot", ["cls", "center", "random"])
def test_pivot_range_equals_reference(pivot):
    rng_range = (20, 50)
    E, a, order, seed = well_separated(90, 16, 12, seed=40, cls=True, pivot=pivot,
                                       pivot_range=rng_range)
    got = todre.select(E, keep=12, cls=a, pivot=pivot, pivot_range=rng_range, seed=seed,
                       order="selection")
    assert got.tolist() == order
    assert 20 <= got[0] < 50


def test_pivot_range_open_end():
    E, a, order, seed = well_separated(60, 16, 6, seed=70, pivot="center",
                                       pivot_range=(30, None))
    got = todre.select(E, keep=6, pivot="center", pivot_range=(30, None), order="selection")
    assert got.tolist() == order


def test_video_cls_map_is_flattened_frame_major():
    E, a, order, seed = well_separated(96, 16, 10, seed=80, cls=True, pivot="cls")
    got = todre.select(E, keep=10, cls=a.reshape(4, 24), pivot="cls", order="selection")
    assert got.tolist() == order


@pytest.mark.parametrize("ratio", [0.1, 0.25, 0.5, 1.0, 0.001])
def test_ratio_budget(ratio):
    n = 97
    k = ref.keep_count(n, ratio=ratio)
    E, _, order, _ = well_separated(n, 16, k, seed=90)
    got = todre.select(E, ratio=ratio)
    assert got.shape == (k,) and got.tolist() == sorted(order)


def test_default_budget_is_ratio_0_10():
    E, _, order, _ = well_separated(200, 16, 20, seed=95)
    assert todre.select(E).tolist() == sorted(order)


def test_orders_are_consistent():
    E, _, order, _ = well_separated(80, 12, 10, seed=100)
    pos = todre.select(E, keep=10)
    sel = todre.select(E, keep=10, order="selection")
    both = todre.select(E, keep=10, order="both")
    assert pos.tolist() == sorted(order) and sel.tolist() == order
    assert both.shape == (2, 10) and both[0].tolist() == order
    assert both[1].tolist() == sorted(order)


def test_float16_equals_reference_on_the_rounded_values():
    E, _, order, _ = well_separated(100, 32, 12, seed=110, dtype=np.float16)
    assert E.dtype == np.float16
    assert todre.select(E, keep=12, order="selection").tolist() == order


def test_bfloat16_through_torch_equals_reference_on_the_rounded_values():
    for s in range(120, 170):
        t = torch.from_numpy(np.random.default_rng(s).standard_normal((100, 32),
                                                                     dtype=np.float32))
        t = t.to(torch.bfloat16)
        E64 = t.double().numpy()
        order = ref.select(E64, 12)
        if min(ref.check_trajectory(E64, order).margins) > 1e-4:
            break
    got = todre.select(t, keep=12, order="selection")
    assert got.dtype == torch.int64 and got.tolist() == order


def test_zero_rows_normalise_to_zero():
    E = np.zeros((5, 4), np.float32)
    E[1] = [1, 0, 0, 0]
    E[3] = [0, 1, 0, 0]
    # all similarities 0 or 1; exact ties resolved to the lowest index
    got = todre.select(E, keep=5, pivot="center", order="selection")
    assert got.tolist() == ref.select(E, 5, pivot="center")


def test_numpy_in_numpy_out_torch_in_torch_out(rng):
    E = rng.standard_normal((70, 16)).astype(np.float32)
    a = todre.select(E, keep=7)
    b = todre.select(torch.from_numpy(E), keep=7)
    assert isinstance(a, np.ndarray) and a.dtype == np.int64
    assert isinstance(b, torch.Tensor) and b.dtype == torch.int64 and b.device.type == "cpu"
    assert a.tolist() == b.tolist()


def test_torch_and_numpy_agree_for_every_dtype(rng):
    E = rng.standard_normal((90, 16)).astype(np.float32)
    for np_dtype, t_dtype in ((np.float32, torch.float32), (np.float16, torch.float16)):
        x = E.astype(np_dtype)
        assert todre.select(x, keep=9, order="selection").tolist() == \
            todre.select(torch.from_numpy(x), keep=9, order="selection").tolist()
        assert t_dtype == torch.from_numpy(x).dtype


def test_torch_tensor_requiring_grad_is_read_without_a_copy(rng):
    t = torch.randn(40, 8, requires_grad=True)
    got = todre.select(t, keep=4)
    assert got.tolist() == todre.select(t.detach().numpy(), keep=4).tolist()


def test_python_lists_are_accepted():
    E = [[1.0, 0.0], [0.0, 1.0], [1.0, 0.1], [-1.0, 0.0]]
    got = todre.select(E, keep=2, order="selection")
    assert isinstance(got, np.ndarray)
    assert got.tolist() == ref.select(np.array(E), 2)


def test_row_stride_larger_than_d_is_read_in_place():
    E, _, order, _ = well_separated(50, 16, 5, seed=130)
    wide = np.zeros((50, 40), np.float32)
    wide[:, 3:19] = E
    view = wide[:, 3:19]
    assert not view.flags.c_contiguous
    assert todre.select(view, keep=5, order="selection").tolist() == order


def test_generic_array_interface_object_is_accepted():
    E, _, order, _ = well_separated(40, 8, 4, seed=140)

    class OnlyArrayInterface:
        def __init__(self, arr):
            self._arr = arr
            self.__array_interface__ = arr.__array_interface__

    got = todre.select(OnlyArrayInterface(E), keep=4, order="selection")
    assert got.tolist() == order


def test_results_are_deterministic(rng):
    E = rng.standard_normal((400, 48)).astype(np.float32)
    first = todre.select(E, ratio=0.1, order="selection")
    for _ in range(3):
        assert np.array_equal(todre.select(E, ratio=0.1, order="selection"), first)
