"""todre.select_batch: each set exactly as a single select() call."""

import numpy as np
import pytest
import torch

import todre
from todre import Status, TodreError


@pytest.fixture
def sets(rng):
    return [rng.standard_normal((n, 16)).astype(np.float32) for n in (30, 7, 55, 1)]


def test_list_form_equals_single_calls(sets):
    got = todre.select_batch(sets, ratio=0.2, order="selection", pivot="random", seed=3)
    assert len(got) == len(sets)
    for E, g in zip(sets, got):
        assert g.tolist() == todre.select(E, ratio=0.2, order="selection", pivot="random",
                                          seed=3).tolist()


def test_concatenated_form_with_offsets(sets):
    E = np.concatenate(sets)
    offs = np.cumsum([0] + [len(s) for s in sets])
    out, out_offs = todre.select_batch(E, offsets=offs, keep=[3, 2, 5, 1])
    assert out_offs.tolist() == [0, 3, 5, 10, 11]
    for b, s in enumerate(sets):
        part = out[out_offs[b]:out_offs[b + 1]]
        assert part.tolist() == todre.select(s, keep=[3, 2, 5, 1][b]).tolist()


def test_same_keep_for_every_set(sets):
    got = todre.select_batch(sets[:3], keep=4)
    assert [g.shape[0] for g in got] == [4, 4, 4]


def test_order_both_and_cls_lists(sets, rng):
    cls = [rng.random(len(s)).astype(np.float32) for s in sets]
    got = todre.select_batch(sets, cls=cls, keep=1, order="both", objective="cls-topk")
    for s, a, g in zip(sets, cls, got):
        assert g.shape == (2, 1) and g[0, 0] == int(np.argmax(a))


def test_torch_list(sets):
    tsets = [torch.from_numpy(s) for s in sets]
    got = todre.select_batch(tsets, ratio=0.3)
    assert all(isinstance(g, torch.Tensor) for g in got)
    assert [g.tolist() for g in got] == [g.tolist() for g in todre.select_batch(sets, ratio=0.3)]


@pytest.mark.parametrize("offsets", [[0, 10, 5, 93], [0, 10, 50], [1, 93], [0, 0, 93], [0],
                                     [[0, 93]]])
def test_bad_offsets_raise(sets, offsets):
    E = np.concatenate(sets)
    with pytest.raises(TodreError) as e:
        todre.select_batch(E, offsets=offsets, keep=1)
    assert e.value.status == Status.INVALID_ARGUMENT


def test_bad_batch_arguments_raise(sets):
    E = np.concatenate(sets)
    offs = [0, 30, 37, 92, 93]
    with pytest.raises(TodreError):
        todre.select_batch(E, offsets=offs, keep=[1, 1])          # wrong length
    with pytest.raises(TodreError):
        todre.select_batch(E, offsets=offs, keep=[1, 8, 1, 1])    # 8 > 7 rows
    with pytest.raises(TodreError):
        todre.select_batch(E, offsets=offs, keep=[1, 0, 1, 1])
    with pytest.raises(TodreError):
        todre.select_batch(E, keep=1)                             # no offsets
    with pytest.raises(TodreError):
        todre.select_batch(sets, offsets=offs, keep=1)            # offsets with a list
    with pytest.raises(TodreError):
        todre.select_batch(E, offsets=offs, keep=[1, 1, 1, 1], ratio=0.5)
    with pytest.raises(TodreError):
        todre.select_batch(E, offsets=[0.0, 93.0], keep=1)
