"""Parameters: one model for every handle (todre_param, typed set/get, bounds).

Every handle kind (context, selection configuration, relevance handle) has
`_set_int`/`_get_int`/`_set_double`/`_get_double` C functions; which pair a
parameter uses is what todre_param_get_bounds() says, so the package never
restates a parameter's type or range.
"""

import ctypes
import dataclasses
import enum

import numpy as np

from ._api import EXPERIMENTAL_PARAMS, Param, ParamBounds, ParamType, Status
from ._errors import TodreError, check, invalid
from ._ints import INT, c_double, c_int
from ._lib import lib


@dataclasses.dataclass(frozen=True)
class ParamInfo:
    """What todre_param_get_bounds() and todre_param_name() say about a parameter."""
    param: int          #: the C value (a todre.Param member when the package knows it)
    name: str           #: the C name, e.g. "TODRE_SELECT_PIVOT"
    type: ParamType     #: INT or DOUBLE
    read_only: bool
    min: object         #: inclusive bounds and default, int or float after `type`
    max: object
    default: object


_INFO = {}


def param_info(param):
    """ParamInfo of a parameter (a todre.Param, its int value, or a name)."""
    p = resolve(param, None, "param")
    info = _INFO.get(p)
    if info is None:
        bounds = ParamBounds()
        bounds.struct_size = ctypes.sizeof(ParamBounds)
        check(lib.todre_param_get_bounds(p, ctypes.byref(bounds)))
        name = (lib.todre_param_name(p) or b"").decode()
        ptype = ParamType(bounds.type)
        if ptype == ParamType.INT:
            lo, hi, default = bounds.int_min, bounds.int_max, bounds.int_default
        else:
            lo, hi, default = bounds.double_min, bounds.double_max, bounds.double_default
        try:
            p_enum = Param(p)
        except ValueError:
            p_enum = p
        info = _INFO[p] = ParamInfo(p_enum, name, ptype, bool(bounds.read_only), lo, hi,
                                    default)
    return info


def resolve(param, short, what):
    """The C value of a parameter given as a todre.Param, a member of the handle's
    own enum (`short`, e.g. ContextParam), an int, or a name ('select-strategy',
    'SELECT_PIVOT', 'TODRE_SELECT_PIVOT')."""
    if isinstance(param, enum.IntEnum):
        value = int(param)
    elif isinstance(param, (int, np.integer)) and not isinstance(param, (bool, np.bool_)):
        value = c_int(param, what, INT)  # a C enum: 2**32 + 204 must not become 204
    elif isinstance(param, str):
        key = param.strip().upper().replace("-", "_").replace(" ", "_")
        if key.startswith("TODRE_"):
            key = key[len("TODRE_"):]
        kinds = [short] if short is not None else _kind_enums()
        hits = {int(k[key]) for k in kinds if key in k.__members__}
        if len(hits) == 1:
            value = hits.pop()
        elif key in Param.__members__:
            value = int(Param[key])
        else:
            names = ", ".join(repr(m.lower().replace("_", "-"))
                              for m in (short or Param).__members__)
            raise invalid(f"{what}: {param!r} is not one of {names}")
    else:
        raise invalid(f"{what}: expected a todre.Param, an int or a name, got {param!r}")
    for c_name, member in EXPERIMENTAL_PARAMS.items():
        if value == member:
            got = lib.todre_param_name(value)
            if (got or b"").decode() != c_name:
                raise TodreError(Status.UNSUPPORTED,
                                 f"{what}: this libtodre has no experimental parameter "
                                 f"{c_name} (value {value} is "
                                 f"{(got or b'nothing').decode()!s})")
    return value


def _kind_enums():
    from ._enums import ContextParam, RelevanceParam, SelectParam
    return [ContextParam, SelectParam, RelevanceParam]


class _Kind:
    """The typed set/get functions of one handle kind ('context', 'select_config',
    'relevance')."""

    def __init__(self, prefix, short):
        self.prefix = prefix
        self.short = short

    def _fn(self, op, ptype):
        suffix = "int" if ptype == ParamType.INT else "double"
        return getattr(lib, f"todre_{self.prefix}_{op}_{suffix}")

    def set(self, handle, param, value, ctx=None):
        """Set `param` on `handle`; `ctx` is the context handle for its message."""
        info = param_info(resolve(param, self.short, "param"))
        label = info.name or str(int(info.param))
        if info.type == ParamType.INT:
            c_value = c_int(value, label)
        else:
            c_value = c_double(value, label)
        check(self._fn("set", info.type)(handle, int(info.param), c_value), ctx)

    def get(self, handle, param, ctx=None):
        """Read `param` of `handle` (an int or a float after its type)."""
        info = param_info(resolve(param, self.short, "param"))
        out = ctypes.c_int64() if info.type == ParamType.INT else ctypes.c_double()
        check(self._fn("get", info.type)(handle, int(info.param), ctypes.byref(out)), ctx)
        return out.value
