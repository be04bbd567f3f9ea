"""Inputs reach the C library without a copy: the DLTensor handed to
todre_tensor_from_dlpack points at the caller's own memory."""

import ctypes

import numpy as np
import pytest
import torch

import todre
from todre import _lib
from todre._tensor import Borrowed, DLTensor


@pytest.fixture
def seen(monkeypatch):
    """Record the data address of every DLTensor given to the C library."""
    addrs = []
    real = _lib.lib.todre_tensor_from_dlpack

    def spy(dl_ptr, out):
        dl = DLTensor.from_address(dl_ptr.value)
        addrs.append((dl.data or 0) + dl.byte_offset)
        return real(dl_ptr, out)

    monkeypatch.setattr(_lib.lib, "todre_tensor_from_dlpack", spy)
    return addrs


def test_numpy_input_is_not_copied(seen, rng):
    E = rng.standard_normal((64, 16)).astype(np.float32)
    todre.select(E, keep=4)
    assert seen[0] == E.ctypes.data


def test_numpy_view_is_not_copied(seen, rng):
    big = rng.standard_normal((64, 40)).astype(np.float32)
    view = big[5:, 8:24]
    todre.select(view, keep=4)
    assert seen[0] == view.ctypes.data


def test_torch_input_is_not_copied(seen):
    t = torch.randn(64, 16)
    cls = torch.rand(64)
    out = todre.select(t, keep=4, cls=cls)
    assert seen[0] == t.data_ptr() and seen[1] == cls.data_ptr()
    assert seen[2] == out.data_ptr()  # the output is written in place too


def test_bf16_torch_input_is_not_copied(seen):
    t = torch.randn(32, 8).to(torch.bfloat16)
    todre.select(t, keep=3)
    assert seen[0] == t.data_ptr()


def test_relevance_inputs_are_not_copied(seen):
    q = torch.randn(2, 6, 4)
    k = torch.randn(2, 6, 4)
    rel = todre.Relevance(2, probe_layers=[1])
    rel.set_layout(1, 3, 2)
    rel.observe_qk(1, q, k)
    assert seen[0] == q.data_ptr() and seen[1] == k.data_ptr()


def test_borrowed_descriptor_views_the_array(rng):
    E = rng.standard_normal((10, 3)).astype(np.float16)
    with Borrowed(E, "E") as b:
        assert b.data_ptr == E.ctypes.data and b.handle
        rank = ctypes.c_int()
        shape = (ctypes.c_int64 * 8)()
        dtype = ctypes.c_int()
        _lib.lib.todre_tensor_info(b.handle, ctypes.byref(dtype), None, ctypes.byref(rank),
                                   shape, None)
        assert rank.value == 2 and list(shape[:2]) == [10, 3]
        assert dtype.value == todre.DType.F16
    assert not b.handle


def test_batch_concatenated_input_is_not_copied(seen, rng):
    E = rng.standard_normal((30, 8)).astype(np.float32)
    todre.select_batch(E, offsets=[0, 10, 30], keep=2)
    assert seen[0] == E.ctypes.data
