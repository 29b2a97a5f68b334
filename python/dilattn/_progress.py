"""_progress.py - the progress= argument of the calls (docs/spec.md section 14.11).

progress=None: no callback (the library does nothing extra). progress=True: a tqdm bar when
tqdm is installed, else a line on stderr when stderr is a terminal (nothing otherwise).
progress=callable: called as callable(done, total) from the calling thread; a true return stops
the call, which raises dilattn.CancelledError with the outputs untouched.

An exception raised by the callable, KeyboardInterrupt included (Ctrl-C while a long call runs:
Python runs its signal handler when the callback re-enters Python), cannot cross the C library.
It is kept, the call is told to stop, and the exception is raised again once the call returned,
so Ctrl-C stops a long dilattn call as it stops Python code.
"""
import ctypes as C
import sys

from . import _abi


def _tqdm_or_none():
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm


class _Bar:
    """progress=True: tqdm's bar, or a plain line on a terminal; a callable (done, total)."""

    def __init__(self, label):
        self.label = label
        self.bar = None
        self.tqdm = _tqdm_or_none()
        self.shown = 0

    def __call__(self, done, total):
        if self.tqdm is not None:
            if self.bar is None:
                self.bar = self.tqdm(total=total, desc=f"dilattn {self.label}", leave=False)
            self.bar.update(done - self.shown)
        elif sys.stderr.isatty():
            sys.stderr.write(f"\rdilattn {self.label}: {100 * done / total:3.0f}%"
                             + ("\r\x1b[K" if done >= total else ""))
            sys.stderr.flush()
        self.shown = done
        return False

    def close(self):
        if self.bar is not None:
            self.bar.close()


class Progress:
    """One call's progress argument as a C callback. Use as a context manager around the call:
    on leaving, an exception the callable raised is raised again."""

    def __init__(self, progress, label):
        if progress is True:
            self.target = _Bar(label)
        elif callable(progress):
            self.target = progress
        else:
            raise TypeError(f"progress must be None, True or a callable (done, total), not "
                            f"{type(progress).__name__}")
        self.raised = None
        self.c_function = _abi.PROGRESS_FN(self._called)  # kept alive for the call

    def _called(self, _user, done, total):
        if self.raised is not None:
            return 1
        try:
            return 1 if self.target(int(done), int(total)) else 0
        except BaseException as e:  # noqa: B902 - KeyboardInterrupt too: see the docstring
            self.raised = e
            return 1

    def fill(self, options):
        """Points a CallOptions at this callback."""
        options.progress = self.c_function
        options.progress_user = None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if isinstance(self.target, _Bar):
            self.target.close()
        if self.raised is not None:
            raised, self.raised = self.raised, None
            raise raised
        return False


def make(progress, label):
    """A Progress for progress= (None: None)."""
    return None if progress is None or progress is False else Progress(progress, label)
