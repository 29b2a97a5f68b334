"""_errors.py - the exceptions of the package: every failing dilattn call becomes a dilattn.Error
carrying the C status (SPEC 7) and the library's message (dilattn_last_error()).

The subclasses group statuses by what a caller does about them, and also derive from the
built-in exception a Python user would catch (bad input is a ValueError, and so on):

    InvalidArgumentError (ValueError)         bad input: shapes, dtypes, segments, masks, values
      IntegerRangeError  (+ OverflowError)     an integer outside its C type (_cints.py)
      NotAnIntegerError  (+ TypeError)         a float, bool or string where an integer belongs
    UnsupportedError     (NotImplementedError) the backend cannot take this input, or a feature
                                               the bindings do not offer (e.g. dropout in torch)
    DeviceError          (RuntimeError)        a device or backend this build or machine lacks
    OutOfMemoryError     (MemoryError)
    CancelledError                             a progress callback stopped the call (progress=,
                                               docs/spec.md section 14.11); outputs untouched
    InternalError        (RuntimeError)        a bug in dilattn: please report it

Checks made in Python before any C call (e.g. a 3-d array) raise the same classes, with the
status the C library would have used.
"""
from . import _abi


class Error(Exception):
    """A dilattn call failed. status: the dilattn_status (int); status_name: its C name;
    message: the library's detail, naming the argument and its value."""

    def __init__(self, status, message):
        self.status = int(status)
        self.status_name = (_abi.STATUS_NAMES[status] if 0 <= status < len(_abi.STATUS_NAMES)
                            else f"status {status}")
        self.message = message
        super().__init__(f"{self.status_name}: {message}")


class InvalidArgumentError(Error, ValueError):
    pass


class IntegerRangeError(InvalidArgumentError, OverflowError):
    """An integer argument outside the range of the C type it is passed as (it is never
    wrapped); status DILATTN_ERROR_INVALID_VALUE."""


class NotAnIntegerError(InvalidArgumentError, TypeError):
    """A float, bool, string or other non-integer where an integer argument belongs; status
    DILATTN_ERROR_INVALID_VALUE."""


class UnsupportedError(Error, NotImplementedError):
    pass


class DeviceError(Error, RuntimeError):
    pass


class OutOfMemoryError(Error, MemoryError):
    pass


class InternalError(Error, RuntimeError):
    pass


class CancelledError(Error):
    """The progress callback (progress=) returned a true value: the call stopped and its
    outputs are as they were (docs/spec.md section 14.11)."""


_CLASS_OF = {
    "DILATTN_ERROR_UNSUPPORTED": UnsupportedError,
    "DILATTN_ERROR_DEVICE_NOT_BUILT": DeviceError,
    "DILATTN_ERROR_DEVICE_MISMATCH": DeviceError,
    "DILATTN_ERROR_BACKEND_NOT_BUILT": DeviceError,
    "DILATTN_ERROR_CUDA": DeviceError,
    "DILATTN_ERROR_OUT_OF_MEMORY": OutOfMemoryError,
    "DILATTN_ERROR_INTERNAL": InternalError,
    "DILATTN_ERROR_CANCELLED": CancelledError,
}


def error_for(status, message):
    """The exception for a status (an int or its DILATTN_ERROR_... name)."""
    if isinstance(status, str):
        status = _abi.STATUS[status]
    name = _abi.STATUS_NAMES[status] if 0 <= status < len(_abi.STATUS_NAMES) else ""
    return _CLASS_OF.get(name, InvalidArgumentError)(status, message)


def check(status):
    """Raises the error of a non-success status, with dilattn_last_error() as its message."""
    if status != _abi.SUCCESS:
        raise error_for(status, _abi.lib().dilattn_last_error().decode(errors="replace"))
