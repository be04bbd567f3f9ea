"""todre.Context: one backend instance with its reusable workspace."""

import ctypes
import threading

from ._enums import Backend, ContextParam, Device, Status, parse
from ._errors import TodreError, check
from ._handle import OwnsHandle
from ._lib import lib
from ._tensor import current_stream, device_of


class Context(OwnsHandle):
    """A libtodre context: a backend (CPU or CUDA), its workspace and its errors.

    Reusing a context across calls avoids re-allocating the workspace. One
    thread at a time may use a context (the module-level functions keep one
    per thread and device for you).

    Args:
        backend: 'auto' (CUDA if it can run, else CPU), 'cpu' or 'cuda'.
        device: CUDA device ordinal (ignored for CPU).
        workspace_limit: bytes a strategy may use beyond O(n*d) (default 256 MiB).
        select_strategy: 0 automatic, 1 matrix-vector, 2 Gram matrix, 3 speculative Gram rows.
        num_threads: CPU threads, 0 = all.
    """

    def __init__(self, backend="auto", device=0, workspace_limit=None,
                 select_strategy=None, num_threads=None):
        self._handle = ctypes.c_void_p()
        kind = parse(Backend, backend, "backend")
        check(lib.todre_context_create(int(kind), int(device), ctypes.byref(self._handle)))
        self.device = int(device)
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
        """The backend the context runs on: Backend.CPU or Backend.CUDA."""
        out = ctypes.c_int()
        check(lib.todre_context_backend(self.handle, ctypes.byref(out)), self._handle)
        return Backend(out.value)

    def set_param(self, param, value):
        param = parse(ContextParam, param, "param")
        check(lib.todre_context_set_param(self.handle, int(param), int(value)), self._handle)

    def get_param(self, param):
        param = parse(ContextParam, param, "param")
        out = ctypes.c_int64()
        check(lib.todre_context_get_param(self.handle, int(param), ctypes.byref(out)),
              self._handle)
        return out.value

    def set_stream(self, stream):
        """Set the CUDA stream (an int cudaStream_t, or a torch/cupy stream object)."""
        ptr = getattr(stream, "cuda_stream", None) or getattr(stream, "ptr", None) or stream
        check(lib.todre_context_set_stream(self.handle, ctypes.c_void_p(int(ptr or 0))),
              self._handle)

    def synchronize(self):
        check(lib.todre_context_synchronize(self.handle), self._handle)

    @property
    def last_error(self):
        return (lib.todre_context_last_error(self._handle) or b"").decode(errors="replace")

    def follow(self, obj):
        """Enqueue on the stream `obj`'s library is using; returns that stream (or None)."""
        if device_of(obj)[0] != Device.CUDA or self.backend != Backend.CUDA:
            return None
        stream = current_stream(obj)
        self.set_stream(stream)
        return stream

    def select(self, embeddings, **kwargs):
        """todre.select() on this context."""
        from ._select import select_on
        return select_on(self, embeddings, **kwargs)

    def select_batch(self, embeddings, **kwargs):
        """todre.select_batch() on this context."""
        from ._select import select_batch_on
        return select_batch_on(self, embeddings, **kwargs)

    def close(self):
        if self._handle:
            lib.todre_context_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    def __repr__(self):
        if not self._handle:
            return "<todre.Context closed>"
        return f"<todre.Context backend={self.backend.name.lower()} device={self.device}>"


_local = threading.local()


def context_for(obj, backend="auto"):
    """A cached per-thread Context for `obj`'s device under `backend`.

    'auto' follows the data: host arrays run on the CPU backend, CUDA arrays
    on the CUDA backend of their device.
    """
    kind = parse(Backend, backend, "backend")
    dev, index = device_of(obj)
    if kind == Backend.AUTO:
        kind = Backend.CUDA if dev == Device.CUDA else Backend.CPU
    cache = getattr(_local, "contexts", None)
    if cache is None:
        cache = _local.contexts = {}
    key = (int(kind), index if kind == Backend.CUDA else 0)
    ctx = cache.get(key)
    if ctx is None:
        ctx = cache[key] = Context(kind, key[1])
    return ctx
