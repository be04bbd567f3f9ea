"""The libtodre 1.x C ABI as ctypes declarations: the one place the package
restates include/todre/todre.h (and the DLPack structs of include/todre/dlpack.h).

Everything here is checked against the header by tests/test_header.py: every
TODRE_API function has an entry in PROTOTYPES with the same result and
argument types, every enumerator of the header's enums equals the member of
the matching IntEnum below (and the other way round), and every public struct
has the same field names, order, types, offsets and size as the C layout.
Nothing else in the package declares a C type, a prototype or an enum value.

Conventions: C enums are passed as ctypes.c_int; opaque handles
(todre_context *, ...) as ctypes.c_void_p; `const char *` as ctypes.c_char_p.
"""

import ctypes
import enum

# ---------------------------------------------------------------------------
# Version of the ABI this package was written against: a library is accepted
# when it has the same major and at least this minor (todre_version_number()).
# ---------------------------------------------------------------------------
ABI_MAJOR = 1
ABI_MINOR = 1
SONAME = "libtodre.so.%d" % ABI_MAJOR

# Macros of todre.h (checked by the header test as well).
TODRE_MAX_RANK = 8


# ---------------------------------------------------------------------------
# Enumerations (values pinned forever by the header)
# ---------------------------------------------------------------------------

class Status(enum.IntEnum):
    """todre_status."""
    OK = 0
    INVALID_ARGUMENT = 1
    OUT_OF_MEMORY = 2
    BACKEND_UNAVAILABLE = 3
    NONFINITE = 4
    UNSUPPORTED = 5
    DEVICE = 6
    STATE = 7
    INTERNAL = 8


class Objective(enum.IntEnum):
    """todre_objective."""
    MAX_SUM = 0
    MAX_MIN = 1
    CLS_TOPK = 2


class Pivot(enum.IntEnum):
    """todre_pivot."""
    AUTO = 0
    CLS = 1
    CENTER = 2
    FARTHEST = 3
    RANDOM = 4
    ISOLATED = 5


class Order(enum.IntEnum):
    """todre_order."""
    POSITION = 0
    SELECTION = 1
    BOTH = 2


class TokenType(enum.IntEnum):
    """todre_token_type (stored as uint8)."""
    SYSTEM = 0
    VISUAL = 1
    TEXT = 2


class Schedule(enum.IntEnum):
    """todre_probe_schedule."""
    LIST = 0
    UNTIL_DROP = 1


class Decision(enum.IntEnum):
    """todre_decision (written as int32)."""
    NOT_PROBED = 0
    KEEP = 1
    DROP = 2
    ALREADY_DROPPED = 3
    PENDING = 4  # a chunk of a chunked prefill; decided by the chunk that ends at the last position


class Budget(enum.IntEnum):
    """todre_budget (since 1.1)."""
    SET = 0
    SHARED = 1
    PER_GROUP = 2


class PositionsPolicy(enum.IntEnum):
    """todre_positions_policy (since 1.1)."""
    KEEP = 0
    COMPACT = 1
    KEEP_MAX = 2


class Param(enum.IntEnum):
    """todre_param: every parameter of every handle (context 100-199,
    selection 200-299, relevance 300-399, experimental >= 1000)."""
    CONTEXT_WORKSPACE_LIMIT = 100
    CONTEXT_NUM_THREADS = 101
    SELECT_OBJECTIVE = 200
    SELECT_PIVOT = 201
    SELECT_PIVOT_LO = 202
    SELECT_PIVOT_HI = 203
    SELECT_KEEP = 204
    SELECT_RATIO = 205
    SELECT_SEED = 206
    SELECT_ORDER = 207
    SELECT_BUDGET = 208
    SELECT_GROUP_MIN = 209
    RELEVANCE_TAU = 300
    RELEVANCE_SCHEDULE = 301
    RELEVANCE_NUM_LAYERS = 302
    RELEVANCE_BATCH = 303
    # Experimental (TODRE_EXPERIMENTAL_API, a macro in the header): not part of
    # the stable ABI. The package checks todre_param_name() before using it.
    CONTEXT_EXP_SELECT_STRATEGY = 1000
    CONTEXT_EXP_SELECT_ROWS_MADE = 1001  # read-only


# Parameters that are macros under TODRE_EXPERIMENTAL_API, not enumerators.
EXPERIMENTAL_PARAMS = {"TODRE_CONTEXT_EXP_SELECT_STRATEGY": Param.CONTEXT_EXP_SELECT_STRATEGY,
                       "TODRE_CONTEXT_EXP_SELECT_ROWS_MADE": Param.CONTEXT_EXP_SELECT_ROWS_MADE}


class ParamType(enum.IntEnum):
    """todre_param_type."""
    INT = 0
    DOUBLE = 1


class Reset(enum.IntEnum):
    """todre_reset."""
    STATE = 1
    PARAMS = 2
    ALL = 3


class DeviceType(enum.IntEnum):
    """DLDeviceType (DLPack 0.6)."""
    CPU = 1
    CUDA = 2
    CUDA_HOST = 3
    OPENCL = 4
    VULKAN = 7
    METAL = 8
    VPI = 9
    ROCM = 10
    ROCM_HOST = 11
    EXT_DEV = 12
    CUDA_MANAGED = 13


class DataTypeCode(enum.IntEnum):
    """DLDataTypeCode (DLPack 0.6)."""
    INT = 0
    UINT = 1
    FLOAT = 2
    OPAQUE_HANDLE = 3
    BFLOAT = 4
    COMPLEX = 5


# C enum (typedef name) -> (IntEnum, prefix of its enumerators). The header
# test strips the prefix (and "ERR_" for statuses) and compares, ignoring
# underscores and case, so kDLCUDAHost matches DeviceType.CUDA_HOST.
C_ENUMS = {
    "todre_status": (Status, "TODRE_"),
    "todre_objective": (Objective, "TODRE_OBJECTIVE_"),
    "todre_pivot": (Pivot, "TODRE_PIVOT_"),
    "todre_order": (Order, "TODRE_ORDER_"),
    "todre_token_type": (TokenType, "TODRE_TOKEN_"),
    "todre_probe_schedule": (Schedule, "TODRE_PROBE_"),
    "todre_decision": (Decision, "TODRE_DECISION_"),
    "todre_budget": (Budget, "TODRE_BUDGET_"),
    "todre_positions_policy": (PositionsPolicy, "TODRE_POSITIONS_"),
    "todre_param": (Param, "TODRE_"),
    "todre_param_type": (ParamType, "TODRE_PARAM_"),
    "todre_reset": (Reset, "TODRE_RESET_"),
    "DLDeviceType": (DeviceType, "kDL"),
    "DLDataTypeCode": (DataTypeCode, "kDL"),
}


# ---------------------------------------------------------------------------
# Structs
# ---------------------------------------------------------------------------

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int),   # DLDeviceType
                ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class ParamBounds(ctypes.Structure):
    """todre_param_bounds."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int),  # todre_param_type
                ("read_only", ctypes.c_int32), ("int_min", ctypes.c_int64),
                ("int_max", ctypes.c_int64), ("int_default", ctypes.c_int64),
                ("double_min", ctypes.c_double), ("double_max", ctypes.c_double),
                ("double_default", ctypes.c_double)]


class BackendProps(ctypes.Structure):
    """todre_backend_props."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("name", ctypes.c_char_p),
                ("path", ctypes.c_char_p), ("device_type", ctypes.c_int32),
                ("available", ctypes.c_int32), ("device_count", ctypes.c_int32),
                ("reason", ctypes.c_char_p)]


class DeviceProps(ctypes.Structure):
    """todre_device_props."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("name", ctypes.c_char * 256),
                ("arch", ctypes.c_char * 64), ("total_memory", ctypes.c_int64),
                ("compute_major", ctypes.c_int32), ("compute_minor", ctypes.c_int32),
                ("cores", ctypes.c_int32)]


class SelectArgs(ctypes.Structure):
    """todre_select_args (since 1.1)."""
    _fields_ = [("struct_size", ctypes.c_size_t)] + [
        (name, ctypes.POINTER(DLTensor)) for name in (
            "embeddings", "cls", "offsets", "keep", "groups", "out", "out_offsets", "scores",
            "steps")]


# C struct (typedef name) -> ctypes class.
C_STRUCTS = {
    "DLDevice": DLDevice,
    "DLDataType": DLDataType,
    "DLTensor": DLTensor,
    "todre_param_bounds": ParamBounds,
    "todre_backend_props": BackendProps,
    "todre_device_props": DeviceProps,
    "todre_select_args": SelectArgs,
}

# Opaque handle types (passed as void *).
C_HANDLES = ("todre_context", "todre_select_config", "todre_relevance")


# ---------------------------------------------------------------------------
# Prototypes: name -> (restype, argtypes)
# ---------------------------------------------------------------------------

_P = ctypes.POINTER
_vp = ctypes.c_void_p
_i = ctypes.c_int
_i64 = ctypes.c_int64
_dbl = ctypes.c_double
_str = ctypes.c_char_p
_T = _P(DLTensor)  # const DLTensor *
_E = ctypes.c_int  # any enum (todre_status, todre_param, todre_reset)

PROTOTYPES = {
    # version, errors
    "todre_version_number": (ctypes.c_uint, []),
    "todre_version_string": (_str, []),
    "todre_status_string": (_str, [_E]),
    "todre_last_error": (_str, []),
    # parameters
    "todre_param_get_bounds": (_E, [_E, _P(ParamBounds)]),
    "todre_param_name": (_str, [_E]),
    # backends and devices
    "todre_backend_count": (_E, [_P(_i)]),
    "todre_backend_get_props": (_E, [_i, _P(BackendProps)]),
    "todre_device_get_props": (_E, [_str, _i, _P(DeviceProps)]),
    # context
    "todre_context_create": (_E, [_str, _i, _P(_vp)]),
    "todre_context_destroy": (None, [_vp]),
    "todre_context_backend": (_str, [_vp]),
    "todre_context_device": (_E, [_vp, _P(DLDevice)]),
    "todre_context_last_error": (_str, [_vp]),
    "todre_context_set_int": (_E, [_vp, _E, _i64]),
    "todre_context_get_int": (_E, [_vp, _E, _P(_i64)]),
    "todre_context_set_double": (_E, [_vp, _E, _dbl]),
    "todre_context_get_double": (_E, [_vp, _E, _P(_dbl)]),
    "todre_context_reset": (_E, [_vp, _E]),
    "todre_context_set_stream": (_E, [_vp, _vp]),
    "todre_context_synchronize": (_E, [_vp]),
    "todre_context_alloc": (_E, [_vp, ctypes.c_size_t, _P(_vp)]),
    "todre_context_free": (_E, [_vp, _vp]),
    "todre_context_copy": (_E, [_vp, _T, _T]),
    # stage 1
    "todre_select_config_create": (_E, [_P(_vp)]),
    "todre_select_config_destroy": (None, [_vp]),
    "todre_select_config_set_int": (_E, [_vp, _E, _i64]),
    "todre_select_config_get_int": (_E, [_vp, _E, _P(_i64)]),
    "todre_select_config_set_double": (_E, [_vp, _E, _dbl]),
    "todre_select_config_get_double": (_E, [_vp, _E, _P(_dbl)]),
    "todre_select_config_reset": (_E, [_vp, _E]),
    "todre_select_keep_count": (_E, [_vp, _i64, _P(_i64)]),
    "todre_select": (_E, [_vp, _vp, _T, _T, _T]),
    "todre_select_batch": (_E, [_vp, _vp, _T, _T, _T, _T, _T, _T]),
    # prune plans (1.1)
    "todre_select_group_counts": (_E, [_vp, _T, _T, _P(_i64)]),
    "todre_select_ex": (_E, [_vp, _vp, _P(SelectArgs)]),
    "todre_positions": (_E, [_E, _T, _T, _T, _P(_i64), _P(_i64)]),
    "todre_select_config_signature": (_E, [_vp, _str, ctypes.c_size_t, _P(ctypes.c_size_t)]),
    # stage 2
    "todre_relevance_create": (_E, [_i64, _i64, _P(_vp)]),
    "todre_relevance_destroy": (None, [_vp]),
    "todre_relevance_set_int": (_E, [_vp, _E, _i64]),
    "todre_relevance_get_int": (_E, [_vp, _E, _P(_i64)]),
    "todre_relevance_set_double": (_E, [_vp, _E, _dbl]),
    "todre_relevance_get_double": (_E, [_vp, _E, _P(_dbl)]),
    "todre_relevance_reset": (_E, [_vp, _E]),
    "todre_relevance_set_probe_layers": (_E, [_vp, _T]),
    "todre_relevance_get_probe_layers": (_E, [_vp, _T, _P(_i64)]),
    "todre_relevance_is_probe": (_E, [_vp, _i64, _i64, _P(_i)]),
    "todre_relevance_set_types": (_E, [_vp, _T]),
    "todre_relevance_set_layout": (_E, [_vp, _i64, _i64, _i64]),
    "todre_relevance_observe_probs": (_E, [_vp, _vp, _i64, _T, _T]),
    "todre_relevance_observe_qk": (_E, [_vp, _vp, _i64, _T, _T, _dbl, _T]),
    "todre_relevance_ratios": (_E, [_vp, _i64, _i64, _P(_dbl), _P(_dbl)]),
    "todre_relevance_drop_layer": (_E, [_vp, _i64, _P(_i64)]),
    "todre_relevance_keep_positions": (_E, [_vp, _i64, _T, _P(_i64)]),
    "todre_relevance_signature": (_E, [_vp, _str, ctypes.c_size_t, _P(ctypes.c_size_t)]),
}
