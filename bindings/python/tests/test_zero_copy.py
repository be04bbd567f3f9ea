"""Inputs reach the C library without a copy: the DLTensor structs handed to
the library point at the caller's own memory (and outputs are written in place)."""

import ctypes

import numpy as np
import pytest
import torch

import todre
from todre import _api, _lib
from todre._tensor import Borrowed


def dl_of(arg):
    """The DLTensor behind a `const DLTensor *` argument (byref or pointer), or None."""
    if arg is None:
        return None
    obj = getattr(arg, "_obj", None)            # ctypes.byref(...)
    if isinstance(obj, _api.DLTensor):
        return obj
    return ctypes.cast(arg, ctypes.POINTER(_api.DLTensor)).contents


@pytest.fixture
def seen(monkeypatch):
    """Record, per call of a function taking arrays, the data address of every
    DLTensor argument (None for NULL), in argument order."""
    calls = []
    tensor_arg = ctypes.POINTER(_api.DLTensor)
    for name, (_, argtypes) in _api.PROTOTYPES.items():
        slots = [i for i, t in enumerate(argtypes) if t is tensor_arg]
        if not slots:
            continue
        real = getattr(_lib.lib, name)

        def spy(*args, _real=real, _slots=slots, _name=name):
            addrs = []
            for i in _slots:
                dl = dl_of(args[i])
                addrs.append(None if dl is None else (dl.data or 0) + dl.byte_offset)
            calls.append((_name, addrs))
            return _real(*args)

        monkeypatch.setattr(_lib.lib, name, spy)
    return calls


def test_numpy_input_is_not_copied(seen, rng):
    E = rng.standard_normal((64, 16)).astype(np.float32)
    out = todre.select(E, keep=4)
    assert seen == [("todre_select", [E.ctypes.data, None, out.ctypes.data])]


def test_numpy_view_is_not_copied(seen, rng):
    big = rng.standard_normal((64, 40)).astype(np.float32)
    view = big[5:, 8:24]
    todre.select(view, keep=4)
    assert seen[0][1][0] == view.ctypes.data


def test_torch_input_is_not_copied(seen):
    t = torch.randn(64, 16)
    cls = torch.rand(64)
    out = todre.select(t, keep=4, cls=cls)
    assert seen == [("todre_select", [t.data_ptr(), cls.data_ptr(), out.data_ptr()])]


def test_bf16_torch_input_is_not_copied(seen):
    t = torch.randn(32, 8).to(torch.bfloat16)
    todre.select(t, keep=3)
    assert seen[0][1][0] == t.data_ptr()


def test_relevance_inputs_are_not_copied(seen):
    q = torch.randn(2, 6, 4)
    k = torch.randn(2, 6, 4)
    rel = todre.Relevance(2, probe_layers=[1])
    rel.set_layout(1, 3, 2)
    rel.observe_qk(1, q, k)
    name, addrs = seen[-1]
    assert name == "todre_relevance_observe_qk"
    assert addrs[:2] == [q.data_ptr(), k.data_ptr()] and addrs[2] is not None


def test_borrowed_descriptor_views_the_array(rng):
    E = rng.standard_normal((10, 3)).astype(np.float16)
    with Borrowed(E, "E") as b:
        assert b.data_ptr == E.ctypes.data
        assert b.ndim == 2 and b.shape == (10, 3)
        assert b.dtype == (_api.DataTypeCode.FLOAT, 16, 1)
        assert b.device == (_api.DeviceType.CPU, 0)
        t = dl_of(b.ref)
        assert ctypes.addressof(t) == ctypes.addressof(b.tensor)
    assert b.capsule is None


def test_array_interface_descriptor(rng):
    E = rng.standard_normal((6, 8)).astype(np.float32)[:, 2:6]

    class OnlyArrayInterface:
        __array_interface__ = E.__array_interface__

    with Borrowed(OnlyArrayInterface(), "E") as b:
        assert b.data_ptr == E.ctypes.data and b.shape == (6, 4)
        assert [b.tensor.strides[i] for i in range(2)] == [8, 1]
        assert b.dtype == (_api.DataTypeCode.FLOAT, 32, 1)


def test_batch_concatenated_input_is_not_copied(seen, rng):
    E = rng.standard_normal((30, 8)).astype(np.float32)
    out, out_offs = todre.select_batch(E, offsets=[0, 10, 30], keep=2)
    name, addrs = seen[0]
    assert name == "todre_select_batch" and len(addrs) == 6
    assert addrs[0] == E.ctypes.data and addrs[1] is None and addrs[3] is None
    assert addrs[4] == out.ctypes.data and addrs[5] == out_offs.ctypes.data
