"""The backend registry: todre.backends(), todre.devices() and friends."""

import ctypes
import dataclasses

from ._api import BackendProps, DeviceProps, DeviceType, Status
from ._errors import TodreError, check, invalid
from ._lib import lib


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    """One registered backend (todre_backend_get_props)."""
    index: int          #: registry index (0 is always "cpu")
    name: str           #: name for todre.Context / backend= ("cpu", "cuda", ...)
    path: str           #: file it was loaded from; "" for the built-in CPU backend
    device_type: int    #: DLPack device type of its arrays (a todre.DeviceType)
    available: bool     #: it has at least one usable device here
    device_count: int   #: devices it can use (0 when not available)
    reason: str         #: why it is not available; "" if it is


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """One device of an available backend (todre_device_get_props)."""
    backend: str        #: backend name
    index: int          #: device index for todre.Context(backend, device=index)
    name: str           #: "NVIDIA H100 80GB HBM3", the CPU model name, ...
    arch: str           #: code path in use: CPU "amx"/"avx512"/"avx2"/"generic", CUDA "sm_90"
    total_memory: int   #: bytes of device (or physical host) memory
    compute_capability: tuple  #: (major, minor) on CUDA; (0, 0) on the CPU
    cores: int          #: CPU: threads a context uses by default; CUDA: multiprocessors


def _text(raw):
    return (raw or b"").decode(errors="replace")


def backends():
    """Every registered backend, available or not, in registry order."""
    count = ctypes.c_int()
    check(lib.todre_backend_count(ctypes.byref(count)))
    out = []
    for i in range(count.value):
        props = BackendProps()
        props.struct_size = ctypes.sizeof(BackendProps)
        check(lib.todre_backend_get_props(i, ctypes.byref(props)))
        try:
            dev_type = DeviceType(props.device_type)
        except ValueError:
            dev_type = int(props.device_type)
        out.append(BackendInfo(i, _text(props.name), _text(props.path), dev_type,
                               bool(props.available), int(props.device_count),
                               _text(props.reason)))
    return out


def available_backends():
    """Names of the backends that can run here, e.g. ['cpu'] or ['cpu', 'cuda']."""
    return [b.name for b in backends() if b.available]


def backend_available(backend):
    """(available, reason) for a backend name; reason is '' when available and
    says why not otherwise (also for a name no module registered)."""
    name = backend_name(backend, allow_auto=False)
    registered = backends()
    for b in registered:
        if b.name == name:
            return b.available, b.reason
    return False, (f"no backend named {name!r} is registered (registered: "
                   + ", ".join(b.name for b in registered) + "); " + _not_registered(name))


def _not_registered(name):
    """The library's own account of an unregistered name: which module files
    it tried and why each failed to load (e.g. a CUDA module whose cuBLAS is
    missing), and where it searched. Asked through todre_context_create(),
    which fails with that message without creating anything."""
    handle = ctypes.c_void_p()
    status = lib.todre_context_create(name.encode(), 0, ctypes.byref(handle))
    if status == 0:  # registered after all (cannot happen: the registry is built once)
        lib.todre_context_destroy(handle)
        return "the library now accepts it"
    return _text(lib.todre_last_error()) or (
        "backend modules libtodre-<name>.so are looked for next to libtodre, in its "
        "todre/ subdirectory and its backend directory, or in $TODRE_BACKEND_PATH")


def devices(backend=None):
    """The devices of every available backend (or of the one named)."""
    if backend is not None:
        name = backend_name(backend, allow_auto=False)
        chosen = [b for b in backends() if b.name == name]
        if not chosen:
            raise invalid(f"backend: {name!r} is not a registered backend")
    else:
        chosen = [b for b in backends() if b.available]
    out = []
    for b in chosen:
        for dev in range(b.device_count):
            props = DeviceProps()
            props.struct_size = ctypes.sizeof(DeviceProps)
            check(lib.todre_device_get_props(b.name.encode(), dev, ctypes.byref(props)))
            out.append(DeviceInfo(b.name, dev, _text(props.name), _text(props.arch),
                                  int(props.total_memory),
                                  (int(props.compute_major), int(props.compute_minor)),
                                  int(props.cores)))
    return out


def backend_name(backend, allow_auto=True):
    """Normalise a backend argument ('CPU', todre.Backend.CUDA, None) to a name."""
    if backend is None:
        if allow_auto:
            return "auto"
        raise invalid("backend: expected a backend name, got None")
    value = getattr(backend, "value", backend)  # todre.Backend members
    if isinstance(value, str) and value.strip():
        name = value.strip().lower()
        if name == "auto" and not allow_auto:
            raise invalid("backend: 'auto' names no backend here; give 'cpu', 'cuda', ...")
        return name
    raise invalid(f"backend: expected a backend name such as 'cpu', 'cuda' or 'auto', "
                  f"got {backend!r}")


def backend_for_device_type(device_type):
    """Name of the registered backend whose arrays live on `device_type`
    (host types: 'cpu'; CUDA managed memory counts as CUDA)."""
    dev = int(device_type)
    if dev in (DeviceType.CPU, DeviceType.CUDA_HOST):
        return "cpu"
    if dev == DeviceType.CUDA_MANAGED:
        dev = int(DeviceType.CUDA)
    registered = backends()
    for b in registered:
        if int(b.device_type) == dev:
            return b.name
    try:
        label = DeviceType(dev).name
    except ValueError:
        label = str(dev)
    raise TodreError(Status.BACKEND_UNAVAILABLE,
                     f"array on DLPack device type {label} ({dev}): no registered backend "
                     "computes on it (registered: " + ", ".join(b.name for b in registered)
                     + ")")
