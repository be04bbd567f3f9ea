"""The C enumerations (values pinned by todre.h) and their Python spellings."""

import enum


class Status(enum.IntEnum):
    OK = 0
    INVALID_ARGUMENT = 1
    OUT_OF_MEMORY = 2
    BACKEND_UNAVAILABLE = 3
    NONFINITE = 4
    UNSUPPORTED = 5
    DEVICE = 6
    STATE = 7
    INTERNAL = 8


class Backend(enum.IntEnum):
    AUTO = 0
    CPU = 1
    CUDA = 2


class DType(enum.IntEnum):
    F32 = 0
    F16 = 1
    BF16 = 2
    I32 = 3
    I64 = 4
    U8 = 5


class Device(enum.IntEnum):
    HOST = 0
    CUDA = 1


class Objective(enum.IntEnum):
    MAX_SUM = 0
    MAX_MIN = 1
    CLS_TOPK = 2


class Pivot(enum.IntEnum):
    AUTO = 0
    CLS = 1
    CENTER = 2
    FARTHEST = 3
    RANDOM = 4
    ISOLATED = 5


class Order(enum.IntEnum):
    POSITION = 0
    SELECTION = 1
    BOTH = 2


class TokenType(enum.IntEnum):
    SYSTEM = 0
    VISUAL = 1
    TEXT = 2


class Schedule(enum.IntEnum):
    LIST = 0
    UNTIL_DROP = 1


class Decision(enum.IntEnum):
    NOT_PROBED = 0
    KEEP = 1
    DROP = 2
    ALREADY_DROPPED = 3
    PENDING = 4  # a chunk of a chunked prefill; decided by the chunk that ends at the last position


class ContextParam(enum.IntEnum):
    WORKSPACE_LIMIT = 0
    SELECT_STRATEGY = 1
    NUM_THREADS = 2


class SelectParam(enum.IntEnum):
    OBJECTIVE = 0
    PIVOT = 1
    PIVOT_LO = 2
    PIVOT_HI = 3
    KEEP = 4
    SEED = 5
    ORDER = 6


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
