"""Finding, loading and declaring libtodre (the prototypes live in _api.py).

Search order, first hit wins:
  1. the path in the environment variable TODRE_LIBRARY (an error if it does
     not load: an explicit request never falls back silently);
  2. a copy next to this package (todre/libtodre.so.1), bundled at install;
  3. the system library (libtodre.so.1 through the dynamic loader, then
     whatever ctypes.util.find_library("todre") finds).

Backend modules (libtodre-cuda.so, ...) are found by libtodre itself: in the
directory it was loaded from, its todre/ subdirectory, the configured
backend directory, or $TODRE_BACKEND_PATH.

ctypes.CDLL releases the GIL around every foreign call, so long selections
in one Python thread do not block the others.
"""

import ctypes
import ctypes.util
import os

from ._api import ABI_MAJOR, ABI_MINOR, PROTOTYPES, SONAME

# Kept under their 0.1 names for code that read them.
REQUIRED_MAJOR = ABI_MAJOR
REQUIRED_MINOR = ABI_MINOR


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
        f"todre: {SONAME} not found. Set TODRE_LIBRARY to its path, install the "
        "C library system-wide, or copy it next to the package. Tried: "
        + "; ".join(tried or ["(nothing)"]))


def _declare(lib, path):
    for name, (restype, argtypes) in PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError as exc:
            raise ImportError(f"todre: {path} lacks the symbol {name}; "
                              "is it an incompatible libtodre?") from exc
        fn.restype = restype
        fn.argtypes = argtypes


def check_version(number, path="libtodre"):
    """Raise ImportError unless a run-time version number is compatible:
    same major as the ABI this package declares, minor at least its minor."""
    major, minor = number // 10000, (number // 100) % 100
    if major != ABI_MAJOR or minor < ABI_MINOR:
        raise ImportError(
            f"todre: {path} is version {major}.{minor}.{number % 100}, but this package "
            f"needs {ABI_MAJOR}.x with x >= {ABI_MINOR} (same major, minor at "
            f"least the required one). Point TODRE_LIBRARY at a compatible {SONAME}.")


def load():
    """Open, version-check and declare libtodre. Returns (CDLL, path)."""
    lib, path = _open()
    if not hasattr(lib, "todre_version_number"):
        raise ImportError(f"todre: {path} is not libtodre (no todre_version_number)")
    lib.todre_version_number.restype = ctypes.c_uint
    lib.todre_version_number.argtypes = []
    check_version(int(lib.todre_version_number()), path)
    _declare(lib, path)
    return lib, path


lib, path = load()
