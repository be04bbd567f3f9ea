"""Finding, loading and declaring libtodre (the prototypes live in _api.py).

Search order, first hit wins:
  1. the path in the environment variable TODRE_LIBRARY (an error if it does
     not load: an explicit request never falls back silently);
  2. the copy the package carries (todre/libtodre.so.1): a wheel built from
     the repository (pip install .) always has one;
  3. the system library (libtodre.so.1 through the dynamic loader, then
     whatever ctypes.util.find_library("todre") finds), for a package
     installed without its own copy.

Backend modules (libtodre-cuda.so, ...) are found by libtodre itself: in the
directory it was loaded from, its todre/ subdirectory, the configured
backend directory, or $TODRE_BACKEND_PATH. A wheel's CUDA module links
cuBLAS, which the wheel does not carry: before libtodre scans for modules,
the package loads cuBLAS from NVIDIA's runtime wheels (site-packages/nvidia/
cu13/lib, as PyTorch installs them) when they are on sys.path, so that the
module finds it wherever those wheels were installed; otherwise the module's
own search applies (RUNPATH: those wheels beside the package, the CUDA
toolkit it was built with; then LD_LIBRARY_PATH and the loader cache).

ctypes.CDLL releases the GIL around every foreign call, so long selections
in one Python thread do not block the others.
"""

import ctypes
import ctypes.util
import os
import sys

from ._api import ABI_MAJOR, ABI_MINOR, PROTOTYPES, SONAME

# Kept under their 0.1 names for code that read them.
REQUIRED_MAJOR = ABI_MAJOR
REQUIRED_MINOR = ABI_MINOR


HERE = os.path.dirname(os.path.abspath(__file__))

#: cuBLAS files the package loaded for the CUDA module (see _preload_cublas).
cublas_preloaded = []


def _candidates():
    """(path, explicit) pairs in search order."""
    env = os.environ.get("TODRE_LIBRARY")
    if env:
        return [(env, True)]
    out = [(os.path.join(HERE, SONAME), False), (SONAME, False)]
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
        f"todre: {SONAME} not found: this copy of the package carries none (the wheel "
        "built by `pip install .` from the libtodre repository does). Set TODRE_LIBRARY "
        "to its path, or install the C library system-wide. Tried: "
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


def build_config():
    """The wheel's build record (todre/_build_config.py, written by CMake), or
    None for a package that does not carry its own library."""
    try:
        from . import _build_config
    except ImportError:
        return None
    return _build_config


def _nvidia_lib_dirs(major):
    """Library directories of NVIDIA's CUDA `major` runtime wheels on sys.path:
    nvidia/cu<major>/lib (one directory per CUDA release from 13 on) and
    nvidia/cublas/lib (CUDA 12 and before)."""
    out = []
    for entry in sys.path:
        for sub in (f"cu{major}", "cublas"):
            d = os.path.join(entry or os.curdir, "nvidia", sub, "lib")
            if os.path.isfile(os.path.join(d, f"libcublas.so.{major}")) and d not in out:
                out.append(d)
    return out


def mapped_files():
    """Paths of the files mapped into this process (Linux /proc/self/maps)."""
    out = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    name = parts[5].rstrip("\n")
                    if name not in out:
                        out.append(name)
    except OSError:
        pass
    return out


def _mapped(basename):
    return any(os.path.basename(p) == basename for p in mapped_files())


def _preload_cublas(path):
    """Load cuBLAS from NVIDIA's wheels (RTLD_GLOBAL) before libtodre's first
    registry scan, when the library loaded is the package's own and the package
    carries the CUDA module. dlopen() of the module then finds libcublas.so.N
    already loaded. Nothing found or a failed load changes nothing: the module's
    own search applies, and a module that still cannot be loaded is reported
    by the registry with the loader's reason (python -m todre info)."""
    config = build_config()
    if (config is None or not config.cuda_major or os.environ.get("TODRE_BACKEND_PATH")
            or os.path.dirname(os.path.abspath(path)) != HERE
            or not os.path.exists(os.path.join(HERE, "libtodre-cuda.so"))):
        return
    major = config.cuda_major
    if _mapped(f"libcublas.so.{major}"):  # already loaded (e.g. by PyTorch): that one serves
        return
    for d in _nvidia_lib_dirs(major):
        try:
            # cublasLt first: libcublas needs it (its own RUNPATH would also
            # find it there).
            for name in (f"libcublasLt.so.{major}", f"libcublas.so.{major}"):
                ctypes.CDLL(os.path.join(d, name), mode=ctypes.RTLD_GLOBAL)
                cublas_preloaded.append(os.path.join(d, name))
            return
        except OSError:
            continue


def load():
    """Open, version-check and declare libtodre. Returns (CDLL, path)."""
    lib, path = _open()
    _preload_cublas(path)
    if not hasattr(lib, "todre_version_number"):
        raise ImportError(f"todre: {path} is not libtodre (no todre_version_number)")
    lib.todre_version_number.restype = ctypes.c_uint
    lib.todre_version_number.argtypes = []
    check_version(int(lib.todre_version_number()), path)
    _declare(lib, path)
    return lib, path


lib, path = load()
