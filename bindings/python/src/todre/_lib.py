"""Finding, loading and declaring libtodre (the C ABI of include/todre/todre.h).

Search order, first hit wins:
  1. the path in the environment variable TODRE_LIBRARY (an error if it does
     not load: an explicit request never falls back silently);
  2. a copy next to this package (todre/libtodre.so.0), bundled at install;
  3. the system library (libtodre.so.0 through the dynamic loader, then
     whatever ctypes.util.find_library("todre") finds).

ctypes.CDLL releases the GIL around every foreign call, so long selections
in one Python thread do not block the others.
"""

import ctypes
import ctypes.util
import os

# The ABI this package was written against: same major, at least this minor.
REQUIRED_MAJOR = 0
REQUIRED_MINOR = 1

SONAME = "libtodre.so.0"

_c_int64_p = ctypes.POINTER(ctypes.c_int64)
_vp = ctypes.c_void_p
_i = ctypes.c_int
_i64 = ctypes.c_int64
_dbl = ctypes.c_double

# name: (restype, argtypes). Enums are passed as C int.
_PROTOTYPES = {
    "todre_version_number": (ctypes.c_uint, []),
    "todre_version_string": (ctypes.c_char_p, []),
    "todre_status_string": (ctypes.c_char_p, [_i]),
    "todre_last_error": (ctypes.c_char_p, []),
    "todre_context_create": (_i, [_i, _i, ctypes.POINTER(_vp)]),
    "todre_context_destroy": (None, [_vp]),
    "todre_context_backend": (_i, [_vp, ctypes.POINTER(_i)]),
    "todre_context_last_error": (ctypes.c_char_p, [_vp]),
    "todre_context_set_param": (_i, [_vp, _i, _i64]),
    "todre_context_get_param": (_i, [_vp, _i, _c_int64_p]),
    "todre_context_set_stream": (_i, [_vp, _vp]),
    "todre_context_synchronize": (_i, [_vp]),
    "todre_backend_available": (_i, [_i, ctypes.POINTER(_i)]),
    "todre_tensor_create": (_i, [_vp, _i, _i, _i, _i, _c_int64_p, _c_int64_p,
                                 ctypes.POINTER(_vp)]),
    "todre_tensor_from_dlpack": (_i, [_vp, ctypes.POINTER(_vp)]),
    "todre_tensor_destroy": (None, [_vp]),
    "todre_tensor_set_data": (_i, [_vp, _vp]),
    "todre_tensor_info": (_i, [_vp, ctypes.POINTER(_i), ctypes.POINTER(_i),
                               ctypes.POINTER(_i), _c_int64_p, _c_int64_p]),
    "todre_select_config_create": (_i, [ctypes.POINTER(_vp)]),
    "todre_select_config_destroy": (None, [_vp]),
    "todre_select_config_set": (_i, [_vp, _i, _i64]),
    "todre_select_config_get": (_i, [_vp, _i, _c_int64_p]),
    "todre_select_param_bounds": (_i, [_i, _c_int64_p, _c_int64_p]),
    "todre_select_config_set_ratio": (_i, [_vp, _dbl]),
    "todre_select_config_get_ratio": (_i, [_vp, ctypes.POINTER(_dbl)]),
    "todre_select_keep_count": (_i, [_vp, _i64, _c_int64_p]),
    "todre_select": (_i, [_vp, _vp, _vp, _vp, _vp]),
    "todre_select_batch": (_i, [_vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp]),
    "todre_relevance_create": (_i, [_i64, _i64, ctypes.POINTER(_vp)]),
    "todre_relevance_destroy": (None, [_vp]),
    "todre_relevance_set_tau": (_i, [_vp, _dbl]),
    "todre_relevance_get_tau": (_i, [_vp, ctypes.POINTER(_dbl)]),
    "todre_relevance_set_probe_layers": (_i, [_vp, _c_int64_p, _i64]),
    "todre_relevance_set_schedule": (_i, [_vp, _i]),
    "todre_relevance_is_probe": (_i, [_vp, _i64, _i64, ctypes.POINTER(_i)]),
    "todre_relevance_set_types": (_i, [_vp, _vp]),
    "todre_relevance_set_layout": (_i, [_vp, _i64, _i64, _i64]),
    "todre_relevance_reset": (_i, [_vp]),
    "todre_relevance_observe_probs": (_i, [_vp, _vp, _i64, _vp, ctypes.POINTER(_i)]),
    "todre_relevance_observe_qk": (_i, [_vp, _vp, _i64, _vp, _vp, _dbl,
                                        ctypes.POINTER(_i)]),
    "todre_relevance_ratios": (_i, [_vp, _i64, _i64, ctypes.POINTER(_dbl),
                                    ctypes.POINTER(_dbl)]),
    "todre_relevance_drop_layer": (_i, [_vp, _i64, _c_int64_p]),
    "todre_relevance_keep_positions": (_i, [_vp, _i64, _c_int64_p, _i64, _c_int64_p]),
}


def _candidates():
    """(path, explicit) pairs in search order."""
    env = os.environ.get("TODRE_LIBRARY")
    if env:
        return [(env, True)]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [(os.path.join(here, SONAME), False), (SONAME, False)]
    found = ctypes.util.find_library("todre")
    if found:
        out.append((found, False))
    return out


def _open():
    tried = []
    for path, explicit in _candidates():
        if not explicit and os.sep in path and not os.path.exists(path):
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as exc:
            if explicit:
                raise ImportError(
                    f"todre: TODRE_LIBRARY={path!r} could not be loaded: {exc}") from exc
            tried.append(f"{path}: {exc}")
    raise ImportError(
        "todre: libtodre.so.0 not found. Set TODRE_LIBRARY to its path, install the "
        "C library system-wide, or copy it next to the package. Tried: "
        + "; ".join(tried or ["(nothing)"]))


def _declare(lib, path):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError as exc:
            raise ImportError(f"todre: {path} lacks the symbol {name}; "
                              "is it an incompatible libtodre?") from exc
        fn.restype = restype
        fn.argtypes = argtypes


def check_version(number, path="libtodre"):
    """Raise ImportError unless a run-time version number is compatible."""
    major, minor = number // 10000, (number // 100) % 100
    if major != REQUIRED_MAJOR or minor < REQUIRED_MINOR:
        raise ImportError(
            f"todre: {path} is version {major}.{minor}.{number % 100}, but this package "
            f"needs {REQUIRED_MAJOR}.x with x >= {REQUIRED_MINOR} (same major, minor at "
            "least the required one). Point TODRE_LIBRARY at a compatible libtodre.so.0.")


def load():
    """Open, declare and version-check libtodre. Returns (CDLL, path)."""
    lib, path = _open()
    if not hasattr(lib, "todre_version_number"):
        raise ImportError(f"todre: {path} is not libtodre (no todre_version_number)")
    lib.todre_version_number.restype = ctypes.c_uint
    lib.todre_version_number.argtypes = []
    check_version(int(lib.todre_version_number()), path)
    _declare(lib, path)
    return lib, path


lib, path = load()
