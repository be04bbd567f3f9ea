"""todre.Context: one backend instance with its reusable workspace."""

import contextlib
import ctypes
import threading

import numpy as np

from ._api import DeviceType, DLDevice, Reset, Status
from ._enums import ContextParam, parse
from ._errors import TodreError, check, invalid
from ._handle import OwnsHandle, serialized
from ._ints import INT, POINTER, c_int
from ._lib import lib
from ._params import _Kind
from ._registry import backend_for_device_type, backend_name
from ._selection import select_batch_on, select_on
from ._tensor import Borrowed, current_stream, dl_device_of, numpy_dtype

_PARAMS = _Kind("context", ContextParam)


class Context(OwnsHandle):
    """A libtodre context: a backend on one device, its workspace and its errors.

    Reusing a context across calls avoids re-allocating the workspace. A
    context shared between threads has its calls take turns (a lock); for
    parallel work use one per thread (the module-level functions keep one per
    thread and device for you).

    Args:
        backend: a registered backend name ('cpu', 'cuda', ...; see
            todre.backends()) or 'auto' (the first available backend after
            'cpu', else 'cpu').
        device: device index of that backend (0 for 'cpu').
        workspace_limit: bytes a strategy may use beyond O(n*d) (default 256 MiB).
        select_strategy: experimental: 0 automatic, 1 matrix-vector, 2 Gram
            matrix, 3 speculative Gram rows.
        num_threads: threads of libtodre's own CPU kernels for this context, 0 = all.
    """

    def __init__(self, backend="auto", device=0, workspace_limit=None,
                 select_strategy=None, num_threads=None):
        self._handle = ctypes.c_void_p()
        name = backend_name(backend)
        device = c_int(device, "device", INT)
        check(lib.todre_context_create(name.encode(), device, ctypes.byref(self._handle)))
        self._backend = (lib.todre_context_backend(self._handle) or b"").decode()
        dev = DLDevice()
        check(lib.todre_context_device(self._handle, ctypes.byref(dev)), self._handle)
        try:
            self.device_type = DeviceType(dev.device_type)
        except ValueError:
            self.device_type = int(dev.device_type)
        self.device = int(dev.device_id)
        for param, value in ((ContextParam.WORKSPACE_LIMIT, workspace_limit),
                             (ContextParam.SELECT_STRATEGY, select_strategy),
                             (ContextParam.NUM_THREADS, num_threads)):
            if value is not None:
                self.set_param(param, value)

    @property
    def handle(self):
        """The raw todre_context* (for other ctypes code); invalid after close()."""
        if not self._handle:
            raise TodreError(Status.STATE, "context: already closed")
        return self._handle

    @property
    def backend(self):
        """The name of the backend the context runs on ('cpu', 'cuda'; never 'auto').
        Compares equal to the todre.Backend members."""
        self.handle  # noqa: B018 - raises on a closed context
        return self._backend

    @property
    def on_host(self):
        """Whether the context computes on host memory."""
        return self.device_type in (DeviceType.CPU, DeviceType.CUDA_HOST)

    @serialized
    def set_param(self, param, value):
        """Set a context parameter: a todre.ContextParam / todre.Param, or a name
        such as 'workspace-limit'. Integers or floats as the parameter's type."""
        _PARAMS.set(self.handle, param, value, self._handle)

    @serialized
    def get_param(self, param):
        return _PARAMS.get(self.handle, param, self._handle)

    @serialized
    def reset(self, what="all"):
        """'state' frees the cached workspace, 'params' restores the defaults,
        'all' both. The stream is kept."""
        check(lib.todre_context_reset(self.handle, int(parse(Reset, what, "what"))),
              self._handle)

    @serialized
    def set_stream(self, stream):
        """Set the CUDA stream (an int cudaStream_t, or a torch/cupy stream object)."""
        ptr = stream
        for attr in ("cuda_stream", "ptr"):  # torch, CuPy stream objects
            if hasattr(stream, attr):
                ptr = getattr(stream, attr)
                break
        ptr = c_int(0 if ptr is None else ptr, "stream", POINTER)
        check(lib.todre_context_set_stream(self.handle, ctypes.c_void_p(ptr)), self._handle)

    @serialized
    def synchronize(self):
        check(lib.todre_context_synchronize(self.handle), self._handle)

    @property
    @serialized
    def last_error(self):
        return (lib.todre_context_last_error(self._handle) or b"").decode(errors="replace")

    @serialized
    def copy(self, dst, src):
        """Copy `src` into `dst` (same dtype and shape, compact), each on the host
        or on this context's device, through todre_context_copy(): no device
        runtime is needed in Python. Returns `dst`."""
        with contextlib.ExitStack() as stack:
            s = stack.enter_context(Borrowed(src, "src"))
            d = stack.enter_context(Borrowed(dst, "dst", writable=True))
            check(lib.todre_context_copy(self.handle, d.ref, s.ref), self._handle)
        return dst

    def to_host(self, array, what="array"):
        """A NumPy copy of an array that lives on this context's device (an array
        already on the host is returned as is)."""
        if dl_device_of(array)[0] == DeviceType.CPU:
            return array
        with Borrowed(array, what) as b:
            out = np.empty(b.shape, dtype=numpy_dtype(b))
            if b.tensor.strides and not _compact(b):
                raise invalid(f"{what}: a device array must be compact to be copied to "
                              "the host")
        return self.copy(out, array)

    def follow(self, obj):
        """Enqueue on the stream `obj`'s library is using; returns that stream (or None)."""
        if self.on_host or dl_device_of(obj)[0] == DeviceType.CPU:
            return None
        stream = current_stream(obj)
        if stream is not None:
            self.set_stream(stream)
        return stream

    def select(self, embeddings, **kwargs):
        """todre.select() on this context."""
        return select_on(self, embeddings, **kwargs)

    def select_batch(self, embeddings, **kwargs):
        """todre.select_batch() on this context."""
        return select_batch_on(self, embeddings, **kwargs)

    @serialized
    def close(self):
        if self._handle:
            lib.todre_context_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    def __repr__(self):
        if not self._handle:
            return "<todre.Context closed>"
        return f"<todre.Context backend={self._backend} device={self.device}>"


def _compact(b):
    """Whether a borrowed array's strides are the row-major ones."""
    shape, t = b.shape, b.tensor
    expect = 1
    for i in reversed(range(len(shape))):
        if shape[i] != 1 and t.strides[i] != expect:
            return False
        expect *= shape[i]
    return True


_local = threading.local()


def context_for(obj, backend="auto"):
    """A cached per-thread Context for `obj`'s device under `backend`.

    'auto' follows the data: host arrays run on the CPU backend, device arrays
    on the registered backend of their device type (CUDA arrays on 'cuda').
    """
    name = backend_name(backend)
    dev, index = dl_device_of(obj)
    if name == "auto":
        name = backend_for_device_type(dev)
    if name == "cpu":
        index = 0
    cache = getattr(_local, "contexts", None)
    if cache is None:
        cache = _local.contexts = {}
    key = (name, index)
    ctx = cache.get(key)
    if ctx is None:
        ctx = cache[key] = Context(name, index)
    return ctx
