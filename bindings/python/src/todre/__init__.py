"""todre: ToDRE visual token pruning (libtodre) for Python.

Stage 1 keeps k of n visual tokens by greedy diversity selection
(:func:`select`, :func:`select_batch`, with groups and budget policies);
stage 2 decides inside the LLM when to drop every visual token
(:class:`Relevance`). Around them, the prune plan: keep counts from sizes
(:func:`group_counts`), position ids after pruning (:func:`positions`) and
the signatures a cache keys on (:func:`select_signature`,
:meth:`Relevance.signature`). Inputs are read in place through
DLPack (NumPy, PyTorch CPU/CUDA, CuPy, JAX); outputs are index arrays of the
caller's kind on the caller's device. Foreign calls release the GIL.

The Hugging Face transformers integration is :mod:`todre.hf`.
"""

import os as _os

from ._lib import lib as _cdll, path as library_path
from ._api import (Budget, DataTypeCode, Decision, DeviceType, Objective, Order, Param,
                   ParamType, Pivot, PositionsPolicy, Reset, Schedule, Status, TokenType)
from ._enums import Backend, ContextParam, RelevanceParam, SelectParam
from ._errors import TodreError
from ._params import ParamInfo, param_info
from ._registry import (BackendInfo, DeviceInfo, available_backends, backend_available,
                        backends, devices)
from ._context import Context
from ._select import select, select_batch
from ._selection import SelectConfig
from ._relevance import Relevance
from ._plan import group_counts, positions, select_signature

__all__ = ["select", "select_batch", "group_counts", "positions", "select_signature",
           "Context", "SelectConfig", "Relevance", "TodreError",
           "version", "version_info", "backends", "available_backends", "backend_available",
           "devices", "param_info", "library_path", "BackendInfo", "DeviceInfo", "ParamInfo",
           "Backend", "Budget", "ContextParam", "DataTypeCode", "Decision", "DeviceType",
           "Objective", "Order", "Param", "ParamType", "Pivot", "PositionsPolicy",
           "RelevanceParam", "Reset", "Schedule", "SelectParam", "Status", "TokenType"]


def version():
    """The loaded libtodre's version string, e.g. '1.0.0'."""
    return _cdll.todre_version_string().decode()


def version_info():
    """The loaded libtodre's version as (major, minor, patch)."""
    n = int(_cdll.todre_version_number())
    return n // 10000, (n // 100) % 100, n % 100


def _package_version():
    """The installed distribution's version (pyproject's, i.e. CMakeLists.txt's),
    when the metadata found belongs to this very copy of the package; else the
    loaded library's (e.g. when imported from the source tree)."""
    try:
        from importlib import metadata
        dist = metadata.distribution("todre")
        here = _os.path.realpath(_os.path.dirname(__file__))
        mine = _os.path.realpath(_os.path.dirname(str(dist.locate_file("todre/__init__.py"))))
        if mine == here:
            return dist.version
    except Exception:  # no metadata (source tree), or an unreadable one
        pass
    return version()


__version__ = _package_version()
