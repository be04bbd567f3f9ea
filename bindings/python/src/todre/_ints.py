"""Numbers crossing the ctypes boundary: the one place they are range-checked.

ctypes converts a Python int to a C integer type modulo 2**bits, silently
(ctypes.c_int64(2**64 + 5).value == 5), and NumPy's astype(np.int64) wraps
uint64 values the same way. Every integer the package hands to libtodre --
a keep count, a pivot range, a seed, a layer or sequence index, a layer count,
a batch size, a parameter value or id, a device index, a stream handle, the
entries of offsets / keep / probe-layer lists -- goes through `c_int` (or
`int64_array` for lists and arrays) first, which raises
TodreError(INVALID_ARGUMENT) naming the argument and the C type's range
instead of passing a different, valid-looking value. `c_double` does the same
for numbers passed as C doubles (a Python int too large for a double raises
OverflowError in float()).
"""

import ctypes

import numpy as np

from ._errors import invalid

# The C types of todre.h's integer arguments.
INT = ctypes.c_int          # enums (todre_param, todre_reset, ...), device indices
INT64 = ctypes.c_int64      # counts, indices, parameter values
SIZE_T = ctypes.c_size_t    # byte counts
POINTER = ctypes.c_void_p   # handles passed as integers (cudaStream_t)

_NAMES = {INT: "int", INT64: "int64", SIZE_T: "size_t", POINTER: "a pointer"}
_SIGNED = {INT: True, INT64: True, SIZE_T: False, POINTER: False}

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1


def c_range(ctype):
    """The inclusive range (lo, hi) of a ctypes integer type."""
    bits = 8 * ctypes.sizeof(ctype)
    if _SIGNED[ctype]:
        return -2**(bits - 1), 2**(bits - 1) - 1
    return 0, 2**bits - 1


def c_int(value, what, ctype=INT64):
    """`value` (a Python or NumPy integer, not a bool) as a Python int that
    `ctype` represents exactly; TodreError(INVALID_ARGUMENT) naming `what`
    otherwise. The library checks the argument's own range after that."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise invalid(f"{what}: expected an integer, got {value!r}")
    v = int(value)
    lo, hi = c_range(ctype)
    if not lo <= v <= hi:
        raise invalid(f"{what}: {v} is outside the range of the C type {_NAMES[ctype]} "
                      f"[{lo}, {hi}]")
    return v


def c_double(value, what):
    """`value` (a real number, not a bool) as a Python float; TodreError
    (INVALID_ARGUMENT) naming `what` for anything else, including an int too
    large for a double."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise invalid(f"{what}: expected a number, got {value!r}")
    try:
        return float(value)
    except OverflowError:
        raise invalid(f"{what}: {value} is too large for a C double") from None


def int64_array(x, what):
    """A C-contiguous int64 NumPy array holding exactly the integers of `x`
    (a sequence of Python / NumPy integers or an integer array); TodreError
    (INVALID_ARGUMENT) naming `what` for non-integers and for values outside
    int64 (which astype(np.int64) would wrap: uint64 2**63 becomes -2**63)."""
    try:
        # a Python list keeps its ints as they are (NumPy would turn
        # [-1, 2**63] into float64 and [2**63] into uint64)
        arr = np.array(x, dtype=object) if isinstance(x, (list, tuple)) else np.asarray(x)
    except (TypeError, ValueError, OverflowError) as exc:
        raise invalid(f"{what}: {exc}") from exc
    if arr.dtype == object:
        flat = arr.reshape(-1)
        values = [c_int(v, f"{what}[{i}]") for i, v in enumerate(flat.tolist())]
        return np.array(values, dtype=np.int64).reshape(arr.shape)
    if arr.dtype.kind not in "iu" and arr.size:
        raise invalid(f"{what}: expected integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > INT64_MAX:
        i = int(np.argmax(arr.reshape(-1) > INT64_MAX))
        raise invalid(f"{what}: {what}[{i}] = {int(arr.reshape(-1)[i])} is outside the range "
                      f"of the C type int64 [{INT64_MIN}, {INT64_MAX}]")
    return np.ascontiguousarray(arr, dtype=np.int64)
