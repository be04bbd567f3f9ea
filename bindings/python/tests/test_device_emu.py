"""The package's device paths on a registered "cuda" backend module, without a
GPU: libtodre's CUDA module built for the CPU emulator of CUDA
(tests/cuda_emu), loaded through $TODRE_BACKEND_PATH.

Run by ctest as python.device_emu (tests/python/CMakeLists.txt sets
TODRE_BACKEND_PATH to libtodre-cuda-emu.so and TODRE_TEST_EMULATED=1); not
collected otherwise (see conftest.py), since the registry is scanned once per
process; it imports no PyTorch, since a CUDA runtime loaded before the
module would take its CUDA symbols. What it shows: the registry and device records of a module backend,
contexts on it, host <-> device copies through todre_context_copy (also
those the package makes for device offsets and token types), stage 2 on
device arrays, and the errors of a registered but unavailable backend. The
device arrays are memory from todre_context_alloc() shown through DLPack
as (kDLCUDA, 0); no GPU, driver or device runtime is involved.
"""

import ctypes
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import todre
from todre import DeviceType, Status, TodreError
from todre._lib import lib
from todre._tensor import DLManagedTensor
from helpers import causal_softmax, ratios_reference

_CAPSULE_NAME = b"dltensor"
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_CODES = {"f": 2, "i": 0, "u": 1}


class DeviceArray:
    """Compact memory of todre_context_alloc() on a context's device, exported
    through (legacy) DLPack as a kDLCUDA array."""

    def __init__(self, ctx, shape, dtype):
        self.ctx, self.shape, self.dtype = ctx, tuple(shape), np.dtype(dtype)
        nbytes = max(1, math.prod(self.shape) * self.dtype.itemsize)
        self.ptr = ctypes.c_void_p()
        assert lib.todre_context_alloc(ctx.handle, nbytes, ctypes.byref(self.ptr)) == 0
        self._shape = (ctypes.c_int64 * max(1, len(self.shape)))(*self.shape)
        m = self.managed = DLManagedTensor()
        t = m.dl_tensor
        t.data = self.ptr
        t.device.device_type, t.device.device_id = int(DeviceType.CUDA), ctx.device
        t.ndim = len(self.shape)
        t.dtype.code, t.dtype.bits, t.dtype.lanes = (_CODES[self.dtype.kind],
                                                     8 * self.dtype.itemsize, 1)
        t.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))

    @classmethod
    def from_host(cls, ctx, arr):
        arr = np.ascontiguousarray(arr)
        dev = cls(ctx, arr.shape, arr.dtype)
        ctx.copy(dev, arr)
        return dev

    def __dlpack_device__(self):
        return int(DeviceType.CUDA), self.ctx.device

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        return _capsule_new(ctypes.addressof(self.managed), _CAPSULE_NAME, None)

    def free(self):
        if self.ptr:
            assert lib.todre_context_free(self.ctx.handle, self.ptr) == 0
            self.ptr = ctypes.c_void_p()


@pytest.fixture
def cuda():
    ctx = todre.Context("cuda")
    yield ctx
    ctx.close()


def test_the_module_backend_is_registered_and_available():
    info = {b.name: b for b in todre.backends()}
    cuda = info["cuda"]
    assert cuda.index >= 1 and cuda.available and cuda.reason == ""
    assert cuda.device_type == DeviceType.CUDA and cuda.device_count >= 1
    assert os.path.samefile(cuda.path, os.environ["TODRE_BACKEND_PATH"])
    assert todre.available_backends() == ["cpu", "cuda"]
    dev = todre.devices("cuda")[0]
    assert (dev.backend, dev.index) == ("cuda", 0)
    assert dev.arch == "sm_%d%d" % dev.compute_capability and dev.compute_capability >= (8, 0)
    assert dev.total_memory > 0 and dev.cores >= 1 and dev.name
    assert [d.backend for d in todre.devices()] == ["cpu"] + ["cuda"] * cuda.device_count


def test_contexts_on_the_module_backend(cuda):
    assert (cuda.backend, cuda.device_type, cuda.device) == ("cuda", DeviceType.CUDA, 0)
    assert not cuda.on_host
    assert todre.Context().backend == "cuda"          # auto: first available after cpu
    assert todre.Context("cpu").backend == "cpu"
    with pytest.raises(TodreError) as e:
        todre.Context("cuda", device=todre.backends()[1].device_count)
    assert e.value.status == Status.INVALID_ARGUMENT and "device" in e.value.message


def test_host_device_copies(cuda, rng):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    dev = DeviceArray.from_host(cuda, x)
    back = cuda.to_host(dev)
    assert isinstance(back, np.ndarray) and back.dtype == np.float32
    assert np.array_equal(back, x)
    dev2 = DeviceArray(cuda, (6, 5), np.float32)
    cuda.copy(dev2, dev)                               # device -> device
    assert np.array_equal(cuda.to_host(dev2), x)
    with pytest.raises(TodreError) as e:
        cuda.copy(np.zeros((5, 6), np.float32), dev)   # shape mismatch
    assert e.value.status == Status.INVALID_ARGUMENT
    with pytest.raises(TodreError):
        todre.Context("cpu").copy(np.zeros((6, 5), np.float32), dev)  # not its device
    for a in (dev, dev2):
        a.free()


def test_stage2_on_device_arrays_equals_the_cpu(cuda, rng):
    H, Hkv, K, dh = 4, 2, 20, 8
    q = rng.standard_normal((H, K, dh)).astype(np.float32)
    k = rng.standard_normal((Hkv, K, dh)).astype(np.float32)
    types = np.array([0] * 3 + [1] * 10 + [2] * 7, np.uint8)
    want = ratios_reference(causal_softmax(q, k), types)
    rel = todre.Relevance(2, probe_layers=[1], tau=1.0, context=cuda)
    dev_types = DeviceArray.from_host(cuda, types)
    rel.set_types(dev_types)                           # copied to the host via the context
    qd, kd = DeviceArray.from_host(cuda, q), DeviceArray.from_host(cuda, k)
    assert rel.observe_qk(1, qd, kd) == [todre.Decision.DROP]
    assert rel.ratios(1) == pytest.approx(want, abs=1e-5)
    assert rel.keep_positions().tolist() == [0, 1, 2] + list(range(13, 20))
    for a in (dev_types, qd, kd):
        a.free()


@pytest.mark.parametrize("objective", ("max-sum", "max-min", "cls-topk"))
@pytest.mark.parametrize("budget", ("set", "shared", "per-group"))
def test_select_ex_on_device_arrays_equals_the_cpu(cuda, rng, objective, budget):
    """todre_select_ex on the CUDA module (groups, the sets' index bases, scores
    and steps, all on the device) equals the CPU backend's call: the same kept
    indices in both orders, steps, and scores within fp32 rounding."""
    import ctypes as C
    from todre._api import SelectArgs
    from todre._tensor import Borrowed
    sizes, sets = [30, 0, 1, 45, 24], [0, 31, 100]      # two sets, one split in groups
    groups = np.array([0, 30, 30, 31, 76, 100], np.int64)
    offsets = np.array(sets, np.int64)
    E = rng.standard_normal((100, 16)).astype(np.float32)
    cls = (rng.permutation(100) / 100).astype(np.float32)
    use_cls = cls if objective == "cls-topk" else None
    cfg = todre.SelectConfig(ratio=0.3, objective=objective, order="both", budget=budget,
                             group_min=2)
    want = todre.select_batch(E, offsets=offsets, ratio=0.3, cls=use_cls, objective=objective,
                              order="both", budget=budget, group_min=2, groups=groups,
                              with_scores=True, backend="cpu")
    (want_out, want_off), want_scores, want_steps = want
    K = want_out.shape[1]
    dev = {"emb": DeviceArray.from_host(cuda, E),
           "out": DeviceArray(cuda, (2, K), np.int64),
           "scores": DeviceArray(cuda, (100,), np.float32),
           "steps": DeviceArray(cuda, (100,), np.int64)}
    if use_cls is not None:
        dev["cls"] = DeviceArray.from_host(cuda, cls)
    out_off = np.zeros(3, np.int64)
    held = []

    def ptr(obj, what, writable=False):
        b = Borrowed(obj, what, writable=writable)
        held.append(b)
        return C.pointer(b.tensor)

    args = SelectArgs()
    args.struct_size = C.sizeof(SelectArgs)
    args.embeddings = ptr(dev["emb"], "embeddings")
    if use_cls is not None:
        args.cls = ptr(dev["cls"], "cls")
    args.offsets = ptr(offsets, "offsets")
    args.groups = ptr(groups, "groups")
    args.out = ptr(dev["out"], "out", True)
    args.out_offsets = ptr(out_off, "out_offsets", True)
    args.scores = ptr(dev["scores"], "scores", True)
    args.steps = ptr(dev["steps"], "steps", True)
    assert lib.todre_select_ex(cuda.handle, cfg.handle, C.byref(args)) == 0, \
        lib.todre_context_last_error(cuda.handle)
    assert lib.todre_context_synchronize(cuda.handle) == 0
    for b in held:
        b.close()
    got = {name: np.empty(a.shape, a.dtype) for name, a in dev.items() if name != "emb"}
    for name in ("out", "scores", "steps"):
        cuda.copy(got[name], dev[name])
    assert out_off.tolist() == want_off.tolist()
    assert got["out"].tolist() == want_out.tolist()
    assert got["steps"].tolist() == want_steps.tolist()
    np.testing.assert_allclose(got["scores"], want_scores, rtol=1e-5, atol=1e-5)
    for a in dev.values():
        a.free()
    cfg.close()


def test_device_offsets_are_copied_to_the_host_through_the_context(cuda):
    from todre._selection import _host_int64
    offs = DeviceArray.from_host(cuda, np.array([0, 4, 9], np.int64))
    got = _host_int64(offs, "offsets", cuda)
    assert isinstance(got, np.ndarray) and got.tolist() == [0, 4, 9]
    offs.free()


def test_device_output_needs_an_array_library(cuda, rng):
    """Index outputs are arrays of the caller's library; a bare DLPack producer
    on a device gets a clear error (torch here has no CUDA), not a crash."""
    E = DeviceArray.from_host(cuda, rng.standard_normal((8, 4)).astype(np.float32))
    with pytest.raises(TodreError) as e:
        todre.select(E, keep=2)
    assert e.value.status == Status.UNSUPPORTED and "DeviceArray" in e.value.message
    E.free()


def test_a_registered_but_unavailable_backend():
    """A driver that sees no device: 'cuda' stays registered with the reason,
    contexts on it fail with BACKEND_UNAVAILABLE, 'auto' falls back to the CPU."""
    script = textwrap.dedent("""
        import todre
        info = [b for b in todre.backends() if b.name == "cuda"][0]
        assert not info.available and info.device_count == 0, info
        assert "no CUDA-capable device" in info.reason, info.reason
        assert todre.backend_available("cuda") == (False, info.reason)
        assert todre.available_backends() == ["cpu"] and todre.devices("cuda") == []
        assert todre.Context().backend == "cpu"
        for make in (lambda: todre.Context("cuda"),
                     lambda: todre.select(CudaThing(), keep=1)):
            try:
                make()
            except todre.TodreError as e:
                assert e.status == todre.Status.BACKEND_UNAVAILABLE, e
                assert "no CUDA-capable device" in e.message, e.message
            else:
                raise AssertionError("no error")
        print("ok")
    """)
    script = ("class CudaThing:\n    def __dlpack_device__(self):\n        return (2, 0)\n"
              "    def __dlpack__(self, **kw):\n        raise AssertionError('not exported')\n"
              + script)
    env = dict(os.environ, TODRE_EMU_DEVICES="0")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
