"""Borrowing caller arrays as DLTensor structs for one call, without copying.

libtodre 1.x takes every array as a `const DLTensor *` that it reads during
the call only. For each call the package builds a ctypes DLTensor per array:

* anything that speaks DLPack (NumPy >= 1.22, PyTorch, CuPy, JAX, ...) is
  asked for a capsule (`__dlpack__(max_version=(1, 0))`, else the legacy
  form); PyCapsule_GetPointer gives the DLManagedTensor(Versioned), whose
  DLTensor is copied field by field into the struct the call receives (the
  data, shape and strides pointers still point at the producer's memory);
* objects with only `__array_interface__` are described from its fields.

The capsule (and so the producer's memory) is kept alive until the Borrowed
object is closed; it is never marked consumed, so its own destructor
releases the producer's reference as usual. Nothing is copied.
"""

import ctypes
import sys

import numpy as np

from ._api import DataTypeCode, DeviceType, DLTensor, Status
from ._errors import TodreError, invalid
from ._handle import OwnsHandle
from ._ints import INT64, POINTER, c_int

_FLAG_READ_ONLY = 1
HOST_DEVICE_TYPES = (DeviceType.CPU, DeviceType.CUDA_HOST)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    """DLPack >= 1.0; its dl_tensor has the same layout as DLPack 0.6's."""
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", DLTensor)]


_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype = ctypes.c_void_p
_capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]

# __array_interface__ type kinds -> DLPack codes (the library decides which it accepts).
_KIND_CODE = {"f": DataTypeCode.FLOAT, "i": DataTypeCode.INT, "u": DataTypeCode.UINT,
              "b": DataTypeCode.UINT, "c": DataTypeCode.COMPLEX}
# DLPack (code, bits) -> NumPy dtype, for host copies.
_NUMPY_DTYPE = {(DataTypeCode.FLOAT, 32): np.float32, (DataTypeCode.FLOAT, 16): np.float16,
                (DataTypeCode.FLOAT, 64): np.float64, (DataTypeCode.INT, 64): np.int64,
                (DataTypeCode.INT, 32): np.int32, (DataTypeCode.INT, 16): np.int16,
                (DataTypeCode.INT, 8): np.int8, (DataTypeCode.UINT, 8): np.uint8,
                (DataTypeCode.UINT, 16): np.uint16, (DataTypeCode.UINT, 32): np.uint32,
                (DataTypeCode.UINT, 64): np.uint64, (6, 8): np.bool_}  # 6 = kDLBool


def kind_of(obj):
    """The array library an object comes from: numpy, torch, cupy, jax or other."""
    top = type(obj).__module__.split(".")[0]
    if top in ("numpy", "torch", "cupy"):
        return top
    if top in ("jax", "jaxlib"):
        return "jax"
    return "other"


def dl_device_of(obj):
    """(DLPack device type, device id) of an array-like object; host = (kDLCPU, 0)."""
    if hasattr(obj, "__dlpack_device__"):
        try:
            dev_type, dev_id = obj.__dlpack_device__()
        except (TypeError, ValueError, RuntimeError, BufferError) as exc:
            raise invalid(f"array on an unsupported device: {exc}") from exc
        dev_type = int(dev_type)
        if dev_type in HOST_DEVICE_TYPES:
            return DeviceType.CPU, 0
        try:
            dev_type = DeviceType(dev_type)
        except ValueError:
            pass
        return dev_type, int(dev_id)
    return DeviceType.CPU, 0


def is_host(obj):
    return dl_device_of(obj)[0] == DeviceType.CPU


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
    dev, index = dl_device_of(obj)
    if dev not in (DeviceType.CUDA, DeviceType.CUDA_MANAGED):
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
    """A DLTensor viewing one caller array for the duration of a call (zero-copy).

    `tensor` is the ctypes DLTensor handed to the library (pass `ref`),
    `data_ptr` the address of the first element (data + byte_offset). Use as
    a context manager or call close().
    """

    def __init__(self, obj, what, stream=None, writable=False):
        self.obj = obj
        self.what = what
        self.capsule = None
        self._keep = None  # shape / strides arrays of the __array_interface__ path
        self.tensor = DLTensor()
        if hasattr(obj, "__dlpack__"):
            self._from_dlpack(stream, writable)
        elif hasattr(obj, "__array_interface__"):
            self._from_array_interface(writable)
        else:
            raise invalid(f"{what}: {type(obj).__name__} supports neither DLPack nor "
                          "__array_interface__")

    # -- views of the struct -------------------------------------------------
    @property
    def ref(self):
        """The `const DLTensor *` argument for a foreign call."""
        return ctypes.byref(self.tensor)

    @property
    def data_ptr(self):
        t = self.tensor
        return (t.data or 0) + t.byte_offset

    @property
    def ndim(self):
        return int(self.tensor.ndim)

    @property
    def shape(self):
        t = self.tensor
        return tuple(int(t.shape[i]) for i in range(t.ndim)) if t.ndim else ()

    @property
    def device(self):
        return int(self.tensor.device.device_type), int(self.tensor.device.device_id)

    @property
    def dtype(self):
        d = self.tensor.dtype
        return int(d.code), int(d.bits), int(d.lanes)

    # -- construction --------------------------------------------------------
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
            src = managed.dl_tensor
        elif _capsule_valid(cap, b"dltensor"):
            src = DLTensor.from_address(_capsule_get(cap, b"dltensor"))
        else:
            raise invalid(f"{self.what}: __dlpack__ did not return a DLPack capsule")
        ctypes.pointer(self.tensor)[0] = src  # a copy of the producer's struct

    def _from_array_interface(self, writable):
        ai = self.obj.__array_interface__
        typestr = ai["typestr"]
        code = _KIND_CODE.get(typestr[1:2])
        if code is None or (typestr[0] == ">" and sys.byteorder == "little") or \
                (typestr[0] == "<" and sys.byteorder == "big"):
            raise invalid(f"{self.what}: dtype {typestr!r} is not supported")
        size = int(typestr[2:])
        ptr, readonly = ai["data"]
        if writable and readonly:
            raise invalid(f"{self.what}: output array is read-only")
        # every field becomes a C integer: range-checked, never wrapped
        shape = tuple(c_int(s, f"{self.what}: shape", INT64) for s in ai["shape"])
        c_shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        c_strides = None
        strides = ai.get("strides")
        if strides is not None:
            if any(s % size for s in strides):
                raise invalid(f"{self.what}: strides {strides} are not a multiple of the "
                              f"element size {size}")
            c_strides = (ctypes.c_int64 * len(shape))(
                *(c_int(s // size, f"{self.what}: strides", INT64) for s in strides))
        self._keep = (c_shape, c_strides)
        t = self.tensor
        t.data = c_int(ptr + ai.get("offset", 0) * size, f"{self.what}: data",
                       POINTER) if ptr else None
        t.device.device_type = DeviceType.CPU
        t.device.device_id = 0
        t.ndim = len(shape)
        t.dtype.code, t.dtype.bits, t.dtype.lanes = int(code), 8 * size, 1
        t.shape = ctypes.cast(c_shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(c_strides, ctypes.POINTER(ctypes.c_int64)) \
            if c_strides is not None else None
        t.byte_offset = 0

    def close(self):
        self.capsule = None
        self._keep = None


def ref(borrowed):
    """`borrowed.ref`, or NULL for None."""
    return None if borrowed is None else borrowed.ref


def numpy_dtype(borrowed):
    """The NumPy dtype of a borrowed array (TodreError if NumPy has none)."""
    code, bits, lanes = borrowed.dtype
    dt = _NUMPY_DTYPE.get((code, bits)) if lanes == 1 else None
    if dt is None:
        raise invalid(f"{borrowed.what}: DLPack dtype (code {code}, {bits} bits, "
                      f"{lanes} lanes) has no NumPy equivalent")
    return np.dtype(dt)


def obj_dlpack(obj, kwargs, versioned):
    if versioned:
        return obj.__dlpack__(max_version=(1, 0), **kwargs)
    return obj.__dlpack__(**kwargs)


def empty_int64(like, shape, dtype="int64"):
    """An int64 (or `dtype`: 'float32') array of `shape` of the caller's kind,
    on the caller's device."""
    kind = kind_of(like)
    dev, index = dl_device_of(like)
    if kind == "torch":
        import torch
        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
    if kind == "cupy":
        import cupy
        with cupy.cuda.Device(index):
            return cupy.empty(shape, dtype=dtype)
    if dev == DeviceType.CPU:
        return np.empty(shape, dtype=dtype)
    # A device array of another library (e.g. JAX on CUDA): allocate with torch
    # or CuPy and hand the result over through DLPack afterwards (finish()).
    why = []
    if dev in (DeviceType.CUDA, DeviceType.CUDA_MANAGED):
        for name in ("torch", "cupy"):
            try:
                if name == "torch":
                    import torch
                    return torch.empty(shape, dtype=getattr(torch, dtype),
                                       device=f"cuda:{index}")
                import cupy
                with cupy.cuda.Device(index):
                    return cupy.empty(shape, dtype=dtype)
            except ImportError:
                why.append(f"{name} is not installed")
            except Exception as exc:  # e.g. a torch without CUDA
                why.append(f"{name}: {exc}")
    raise TodreError(Status.UNSUPPORTED,
                     f"out: the index output for a {type(like).__name__} on DLPack device "
                     f"type {int(dev)} is allocated with torch or cupy on that device"
                     + (" (" + "; ".join(why) + ")" if why else ""))


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
