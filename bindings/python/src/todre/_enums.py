"""Python spellings of the C enumerations (declared once, in _api.py)."""

import enum

from ._api import (DataTypeCode, Decision, DeviceType, Objective, Order, Param, ParamType,
                   Pivot, Reset, Schedule, Status, TokenType)

__all__ = ["Backend", "ContextParam", "DataTypeCode", "Decision", "DeviceType", "Objective",
           "Order", "Param", "ParamType", "Pivot", "RelevanceParam", "Reset", "Schedule",
           "SelectParam", "Status", "TokenType", "parse"]


class Backend(str, enum.Enum):
    """Well-known backend names. Contexts take any registered name (see
    todre.backends()); members compare equal to their name strings."""
    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"

    def __str__(self):
        return self.value


# The parameters of each handle kind under their short names; the values are
# the C ones (todre_param), so a member can be passed wherever a Param can.
ContextParam = enum.IntEnum("ContextParam", {
    "WORKSPACE_LIMIT": int(Param.CONTEXT_WORKSPACE_LIMIT),
    "NUM_THREADS": int(Param.CONTEXT_NUM_THREADS),
    "SELECT_STRATEGY": int(Param.CONTEXT_EXP_SELECT_STRATEGY),  # experimental
    "SELECT_ROWS_MADE": int(Param.CONTEXT_EXP_SELECT_ROWS_MADE),  # experimental, read-only
}, module=__name__)
ContextParam.__doc__ = "Context parameters (TODRE_CONTEXT_*), C values."

SelectParam = enum.IntEnum("SelectParam", {
    name[len("SELECT_"):]: int(member) for name, member in Param.__members__.items()
    if name.startswith("SELECT_")}, module=__name__)
SelectParam.__doc__ = "Selection parameters (TODRE_SELECT_*), C values."

RelevanceParam = enum.IntEnum("RelevanceParam", {
    name[len("RELEVANCE_"):]: int(member) for name, member in Param.__members__.items()
    if name.startswith("RELEVANCE_")}, module=__name__)
RelevanceParam.__doc__ = "Relevance parameters (TODRE_RELEVANCE_*), C values."


def parse(enum_cls, value, what):
    """An enum member from a member, an int, or a name such as 'max-sum'.

    Raises TodreError(INVALID_ARGUMENT) naming `what` for anything else.
    """
    from ._errors import TodreError
    if isinstance(value, enum_cls):
        return value
    if isinstance(value, str):
        key = value.strip().upper().replace("-", "_")
        if key in enum_cls.__members__:
            return enum_cls[key]
    elif isinstance(value, int) and not isinstance(value, bool):
        try:
            return enum_cls(value)
        except ValueError:
            pass
    names = ", ".join(repr(m.lower().replace("_", "-")) for m in enum_cls.__members__)
    raise TodreError(Status.INVALID_ARGUMENT,
                     f"{what}: {value!r} is not one of {names}")
