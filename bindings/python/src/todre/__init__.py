"""todre: ToDRE visual token pruning (libtodre) for Python.

Stage 1 keeps k of n visual tokens by greedy diversity selection
(:func:`select`, :func:`select_batch`); stage 2 decides inside the LLM when to
drop every visual token (:class:`Relevance`). Inputs are read in place through
DLPack (NumPy, PyTorch CPU/CUDA, CuPy, JAX); outputs are index arrays of the
caller's kind on the caller's device. Foreign calls release the GIL.

The Hugging Face transformers integration is :mod:`todre.hf`.
"""

import ctypes as _ctypes

from ._lib import lib as _cdll, path as library_path
from ._enums import (Backend, ContextParam, Decision, Device, DType, Objective, Order,
                     Pivot, Schedule, SelectParam, Status, TokenType)
from ._errors import TodreError
from ._context import Context
from ._select import select, select_batch
from ._relevance import Relevance

__version__ = "0.1.0"

__all__ = ["select", "select_batch", "Context", "Relevance", "TodreError", "version",
           "version_info", "backends", "backend_available", "library_path",
           "Backend", "ContextParam", "Decision", "Device", "DType", "Objective", "Order",
           "Pivot", "Schedule", "SelectParam", "Status", "TokenType"]


def version():
    """The loaded libtodre's version string, e.g. '0.1.0'."""
    return _cdll.todre_version_string().decode()


def version_info():
    """The loaded libtodre's version as (major, minor, patch)."""
    n = int(_cdll.todre_version_number())
    return n // 10000, (n // 100) % 100, n % 100


def backend_available(backend):
    """(available, reason) for 'cpu' or 'cuda'; reason is '' when available."""
    from ._enums import parse
    kind = parse(Backend, backend, "backend")
    flag = _ctypes.c_int()
    status = _cdll.todre_backend_available(int(kind), _ctypes.byref(flag))
    reason = (_cdll.todre_last_error() or b"").decode(errors="replace")
    if status != 0:
        raise TodreError(status, reason)
    return bool(flag.value), "" if flag.value else reason


def backends():
    """Names of the backends that can run here, e.g. ['cpu'] or ['cpu', 'cuda']."""
    return [name for name in ("cpu", "cuda") if backend_available(name)[0]]
