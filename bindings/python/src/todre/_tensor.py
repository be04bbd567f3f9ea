"""Borrowing caller arrays as todre_tensor descriptors, without copying.

Anything that speaks DLPack (NumPy >= 1.22, PyTorch, CuPy, JAX, ...) is
described through its capsule: PyCapsule_GetPointer gives the
DLManagedTensor(Versioned), whose DLTensor goes to todre_tensor_from_dlpack.
Objects without __dlpack__ but with __array_interface__ are described field
by field. The capsule (and so the producer's memory) is kept alive until the
descriptor is destroyed; the capsule is never marked consumed, so its own
destructor releases the producer's reference as usual.
"""

import ctypes
import sys

import numpy as np

from ._enums import Device, DType, Status
from ._errors import TodreError, check, invalid
from ._handle import OwnsHandle
from ._lib import lib

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
_FLAG_READ_ONLY = 1


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", DLTensor)]


_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype = ctypes.c_void_p
_capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]

_TYPESTR = {"f4": DType.F32, "f2": DType.F16, "i4": DType.I32, "i8": DType.I64,
            "u1": DType.U8, "b1": DType.U8}
_ITEMSIZE = {DType.F32: 4, DType.F16: 2, DType.BF16: 2, DType.I32: 4, DType.I64: 8,
             DType.U8: 1}


def kind_of(obj):
    """The array library an object comes from: numpy, torch, cupy, jax or other."""
    top = type(obj).__module__.split(".")[0]
    if top in ("numpy", "torch", "cupy"):
        return top
    if top in ("jax", "jaxlib"):
        return "jax"
    return "other"


def device_of(obj):
    """(Device.HOST or Device.CUDA, index) of an array-like object."""
    if hasattr(obj, "__dlpack_device__"):
        try:
            dev_type, dev_id = obj.__dlpack_device__()
        except (TypeError, ValueError, RuntimeError, BufferError) as exc:
            raise invalid(f"array on an unsupported device: {exc}") from exc
        dev_type = int(dev_type)
        if dev_type in (KDL_CPU, KDL_CUDA_HOST):
            return Device.HOST, 0
        if dev_type in (KDL_CUDA, KDL_CUDA_MANAGED):
            return Device.CUDA, int(dev_id)
        raise invalid(f"array on DLPack device type {dev_type} is not supported "
                      "(host and CUDA only)")
    return Device.HOST, 0


def as_array(obj, what):
    """Pass arrays through; turn plain Python sequences into float32 NumPy."""
    if hasattr(obj, "__dlpack__") or hasattr(obj, "__array_interface__"):
        return obj
    if isinstance(obj, (list, tuple)):
        try:
            return np.asarray(obj, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise invalid(f"{what}: cannot convert to an array: {exc}") from exc
    raise invalid(f"{what}: expected an array (DLPack or __array_interface__), "
                  f"got {type(obj).__name__}")


def current_stream(obj):
    """The CUDA stream the producer of `obj` currently works on (int, 0 = legacy default).

    Work is enqueued on the producer's stream so that results are ordered with
    the caller's own kernels, without a device-wide synchronisation.
    """
    kind = kind_of(obj)
    dev, index = device_of(obj)
    if dev != Device.CUDA:
        return None
    if kind == "torch":
        import torch
        return int(torch.cuda.current_stream(index).cuda_stream)
    if kind == "cupy":
        import cupy
        with cupy.cuda.Device(index):
            return int(cupy.cuda.get_current_stream().ptr)
    return 0


class Borrowed(OwnsHandle):
    """A todre_tensor descriptor viewing one caller array (zero-copy).

    `handle` is the todre_tensor*, `data_ptr` the address of the first element
    (DLTensor.data + byte_offset). Use as a context manager or call close().
    """

    def __init__(self, obj, what, stream=None, writable=False):
        self.obj = obj
        self.what = what
        self.capsule = None
        self.handle = ctypes.c_void_p()
        self.data_ptr = None
        if hasattr(obj, "__dlpack__"):
            self._from_dlpack(stream, writable)
        elif hasattr(obj, "__array_interface__"):
            self._from_array_interface(writable)
        else:
            raise invalid(f"{what}: {type(obj).__name__} supports neither DLPack nor "
                          "__array_interface__")

    def _export(self, stream):
        kwargs = {} if stream is None else {"stream": stream if stream else 1}
        try:
            return obj_dlpack(self.obj, kwargs, versioned=True)
        except (TypeError, BufferError, NotImplementedError, RuntimeError):
            return obj_dlpack(self.obj, kwargs, versioned=False)

    def _from_dlpack(self, stream, writable):
        try:
            cap = self._export(stream)
        except (TypeError, BufferError, RuntimeError, ValueError) as exc:
            raise invalid(f"{self.what}: DLPack export failed: {exc}") from exc
        self.capsule = cap
        if _capsule_valid(cap, b"dltensor_versioned"):
            managed = DLManagedTensorVersioned.from_address(
                _capsule_get(cap, b"dltensor_versioned"))
            if managed.version.major != 1:
                raise TodreError(Status.UNSUPPORTED,
                                 f"{self.what}: DLPack major version "
                                 f"{managed.version.major} is not supported")
            if writable and managed.flags & _FLAG_READ_ONLY:
                raise invalid(f"{self.what}: output array is read-only")
            dl_addr = ctypes.addressof(managed.dl_tensor)
        elif _capsule_valid(cap, b"dltensor"):
            dl_addr = _capsule_get(cap, b"dltensor")
        else:
            raise invalid(f"{self.what}: __dlpack__ did not return a DLPack capsule")
        dl = DLTensor.from_address(dl_addr)
        self.data_ptr = (dl.data or 0) + dl.byte_offset
        _named(self.what, lib.todre_tensor_from_dlpack(ctypes.c_void_p(dl_addr),
                                                       ctypes.byref(self.handle)))

    def _from_array_interface(self, writable):
        ai = self.obj.__array_interface__
        typestr = ai["typestr"]
        dtype = _TYPESTR.get(typestr[1:])
        if dtype is None or (typestr[0] == ">" and sys.byteorder == "little"):
            raise invalid(f"{self.what}: dtype {typestr!r} is not supported")
        ptr, readonly = ai["data"]
        if writable and readonly:
            raise invalid(f"{self.what}: output array is read-only")
        shape = tuple(int(s) for s in ai["shape"])
        strides = ai.get("strides")
        c_strides = None
        if strides is not None:
            size = _ITEMSIZE[dtype]
            if any(s % size for s in strides):
                raise invalid(f"{self.what}: strides {strides} are not a multiple of the "
                              f"element size {size}")
            c_strides = (ctypes.c_int64 * len(shape))(*(s // size for s in strides))
        c_shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self.data_ptr = ptr + ai.get("offset", 0) * _ITEMSIZE[dtype] if ptr else ptr
        _named(self.what, lib.todre_tensor_create(ctypes.c_void_p(self.data_ptr), int(dtype),
                                                  int(Device.HOST), 0, len(shape), c_shape,
                                                  c_strides, ctypes.byref(self.handle)))

    def close(self):
        if self.handle:
            lib.todre_tensor_destroy(self.handle)
            self.handle = ctypes.c_void_p()
        self.capsule = None


def _named(what, status):
    """check(), with the argument's name in front of the descriptor's message."""
    try:
        check(status)
    except TodreError as exc:
        raise TodreError(exc.status, f"{what}: {exc.message}") from None


def obj_dlpack(obj, kwargs, versioned):
    if versioned:
        return obj.__dlpack__(max_version=(1, 0), **kwargs)
    return obj.__dlpack__(**kwargs)


def empty_int64(like, shape):
    """An int64 array of `shape` of the caller's kind, on the caller's device."""
    kind = kind_of(like)
    dev, index = device_of(like)
    if kind == "torch":
        import torch
        return torch.empty(shape, dtype=torch.int64, device=like.device)
    if kind == "cupy":
        import cupy
        with cupy.cuda.Device(index):
            return cupy.empty(shape, dtype=cupy.int64)
    if dev == Device.HOST:
        return np.empty(shape, dtype=np.int64)
    # A CUDA array of another library (e.g. JAX): allocate with torch or CuPy
    # and hand the result over through DLPack afterwards (finish()).
    try:
        import torch
        return torch.empty(shape, dtype=torch.int64, device=f"cuda:{index}")
    except ImportError:
        pass
    try:
        import cupy
        with cupy.cuda.Device(index):
            return cupy.empty(shape, dtype=cupy.int64)
    except ImportError:
        raise TodreError(Status.UNSUPPORTED,
                         f"output for a CUDA {type(like).__name__} needs torch or cupy "
                         "to allocate device memory") from None


def finish(like, out):
    """Convert an output allocated by empty_int64 to the caller's kind, if needed."""
    kind = kind_of(like)
    if kind in ("numpy", "torch", "cupy") or kind_of(out) == kind:
        return out
    if kind == "jax":
        import jax.numpy as jnp
        if isinstance(out, np.ndarray):
            return jnp.asarray(out)
        return jnp.from_dlpack(out)
    return out
