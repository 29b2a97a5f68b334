"""_owned_handle.py - a library handle (pool, plan, comm) owned by one Python object that
several threads may use at once, and that one of them may close while the others' calls run.

The C library frees a handle at once when it is destroyed; a call another thread is making with
it would then read freed memory. So every library call that takes the handle runs inside use(),
which counts it, and close() first refuses new calls (they raise the owner's "closed" error),
then waits until the calls in flight have returned, and only then destroys the handle. A second
close() while the first waits returns once the handle is gone. Closing from inside a call on
the same handle would wait for itself: that is refused instead.

Python objects whose __init__ failed before a handle existed hold no OwnedHandle: their close()
and __del__ look it up with getattr and do nothing. HandleOwner is that lookup, once, for the
classes that own one (Plan, Pool, Comm)."""
import contextlib
import threading

from ._errors import error_for


class HandleOwner:
    """Mixin of a class whose instances own an OwnedHandle in self._owned (absent when __init__
    failed before the library made the handle). The class sets _closed_error, its "closed"
    exception for a use after close() (a staticmethod)."""

    def _owned_handle(self):
        owned = getattr(self, "_owned", None)
        if owned is None:
            raise self._closed_error()
        return owned

    def _use(self):
        """A with-block holding the handle for one library call; close() waits for it."""
        return self._owned_handle().use()


class OwnedHandle:
    """handle: the ctypes.c_void_p the library made; destroy(handle) frees it and returns a
    dilattn_status; closed_error() is the exception for a use after close()."""

    def __init__(self, handle, destroy, closed_error):
        self._handle = handle
        self._destroy = destroy
        self._closed_error = closed_error
        self._cond = threading.Condition()
        self._calls = {}      # thread id -> that thread's calls in flight
        self._state = "open"  # "open", "closing" (waiting for calls in flight), "closed"

    @property
    def closed(self):
        """True once close() has begun: no new call may use the handle."""
        return self._state != "open"

    def handle(self):
        """The handle without holding it, for a check (a library call uses use()); the closed
        error once close() has begun."""
        if self._state != "open":
            raise self._closed_error()
        return self._handle

    @contextlib.contextmanager
    def use(self):
        """The handle for one library call; close() waits until the with-block has ended."""
        me = threading.get_ident()
        with self._cond:
            if self._state != "open":
                raise self._closed_error()
            self._calls[me] = self._calls.get(me, 0) + 1
        try:
            yield self._handle
        finally:
            with self._cond:
                self._calls[me] -= 1
                if not self._calls[me]:
                    del self._calls[me]
                self._cond.notify_all()

    def close(self):
        """Destroys the handle once no call uses it. Returns the destroy status, or None when
        another close() destroyed it."""
        with self._cond:
            if threading.get_ident() in self._calls:
                raise error_for("DILATTN_ERROR_INVALID_VALUE",
                                "close() was called from inside a library call that uses the "
                                "same handle, and would wait for itself")
            if self._state != "open":
                self._cond.wait_for(lambda: self._state == "closed")
                return None
            self._state = "closing"
            self._cond.wait_for(lambda: not self._calls)
            handle, self._handle = self._handle, None
        try:
            return self._destroy(handle)
        finally:
            with self._cond:
                self._state = "closed"
                self._cond.notify_all()
