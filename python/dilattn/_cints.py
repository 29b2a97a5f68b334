"""_cints.py - every Python integer the package hands to the C library goes through one of
these checked conversions first, because ctypes converts an int that does not fit its C type
silently modulo 2**bits (segments=[2**64 + 4] would run as [4]).

An integer is a Python int or anything with __index__ (numpy integer scalars, 0-d integer
tensors). bool is not an integer here (True as a size or a count is a mistake, not a 1), nor is
a float, even 4.0, nor a string: each raises NotAnIntegerError (a TypeError). A value outside
the C type raises IntegerRangeError (an OverflowError). Both are dilattn.InvalidArgumentError
with status DILATTN_ERROR_INVALID_VALUE and a message "name=value: ...", name being the argument
as the caller wrote it (segments[1], levels[0][2], row_ptr[3])."""
import ctypes as C
import operator

import numpy as np

from . import _abi
from ._errors import IntegerRangeError, NotAnIntegerError

_INVALID_VALUE = _abi.STATUS["DILATTN_ERROR_INVALID_VALUE"]
_RANGES = {
    "int32_t": (-2**31, 2**31 - 1),
    "int64_t": (-2**63, 2**63 - 1),
    "uint64_t": (0, 2**64 - 1),
    "size_t": (0, 2**(8 * C.sizeof(C.c_size_t)) - 1),
    "an address": (0, 2**(8 * C.sizeof(C.c_void_p)) - 1),
}


def _is_bool(value):
    # numpy's and torch's bools have __index__ (numpy's with a deprecation warning).
    return isinstance(value, (bool, np.bool_)) or "bool" in str(getattr(value, "dtype", ""))


def _not_an_integer(name, value):
    return NotAnIntegerError(_INVALID_VALUE, f"{name}={value!r}: expected an integer, not a "
                                             f"{type(value).__name__}")


def _checked(value, name, ctype):
    if _is_bool(value) or isinstance(value, (str, bytes)):
        raise _not_an_integer(name, value)
    try:
        number = operator.index(value)
    except TypeError:
        raise _not_an_integer(name, value) from None
    low, high = _RANGES[ctype]
    if not low <= number <= high:
        raise IntegerRangeError(_INVALID_VALUE,
                                f"{name}={value!r}: out of the range of {ctype} [{low}, {high}]")
    return number


def int32(value, name):
    """value as a Python int that fits int32_t, or the error naming name."""
    return _checked(value, name, "int32_t")


def int64(value, name):
    return _checked(value, name, "int64_t")


def uint64(value, name):
    return _checked(value, name, "uint64_t")


def size_t(value, name):
    return _checked(value, name, "size_t")


def address(value, name):
    """A pointer given as an int (uintptr_t)."""
    return _checked(value, name, "an address")


def int64_list(values, name):
    """A sequence of integers (or one integer) as a list of int64_t values; entry i is named
    name[i]."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__") or (
            getattr(values, "ndim", 1) == 0):
        values = [values]
    return [int64(x, f"{name}[{i}]") for i, x in enumerate(values)]


def int64_array(values, name):
    """An array of integers as a C-contiguous int64 numpy array, checked where a cast could
    wrap or truncate: unsigned entries past int64_t are refused, and so are floats and bools
    (by dtype); a list or other non-array is checked entry by entry (name[i])."""
    if not isinstance(values, np.ndarray):
        flat = np.asarray(values, dtype=object).reshape(-1)
        return np.array([int64(x, f"{name}[{i}]") for i, x in enumerate(flat)], dtype=np.int64)
    if values.dtype.kind == "O":
        return int64_array(list(values.reshape(-1)), name)
    if values.dtype.kind not in "iu":
        raise NotAnIntegerError(_INVALID_VALUE,
                                f"{name} has dtype {values.dtype}: expected integers")
    # Compared as uint64: a Python int would make numpy 1.x compare in float64, where 2**63 - 1
    # rounds to 2**63.
    if values.dtype.kind == "u":
        too_big = values.reshape(-1) > np.uint64(_RANGES["int64_t"][1])
        if too_big.any():
            i = int(np.argmax(too_big))
            int64(int(values.reshape(-1)[i]), f"{name}[{i}]")  # raises, naming the entry
    return np.ascontiguousarray(values.reshape(-1), dtype=np.int64)
