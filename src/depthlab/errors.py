"""The one exception type that depthlab raises for bad input.

The CLI turns a :class:`DepthlabError` into a single line ``depthlab: error: <message>`` on
stderr and exit status 2; library callers catch it like any exception. Ctrl-C is remembered here too
(:func:`watch_sigint`), for the command line's exit status 130.
"""

import signal
import threading


class DepthlabError(Exception):
    """Bad input or an impossible request, with a message that names the problem and the fix.

    Args:
        message: one sentence, no trailing newline, naming the offending field/file and a fix.
    """


class NonFiniteError(DepthlabError):
    """A non-finite loss or gradient stopped training (CLI exit status 3)."""


_SIGINT_SEEN = False
_SIGINTS = 0  # every Ctrl-C noted in this process (never reset)


def _note_sigint(signum, frame) -> None:
    global _SIGINT_SEEN, _SIGINTS
    _SIGINT_SEEN = True
    _SIGINTS += 1
    signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt, as Python's own handler does


def watch_sigint() -> None:
    """Remember that Ctrl-C came, then raise KeyboardInterrupt as usual (the main thread only).

    A Ctrl-C inside an import (torch, transformers) can leave a half-imported module whose next use
    raises something else (RecursionError, ImportError, ModuleNotFoundError): :func:`sigint_seen` lets
    the command line report such an end as the interruption it is.
    """
    global _SIGINT_SEEN
    _SIGINT_SEEN = False
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _note_sigint):
        signal.signal(signal.SIGINT, _note_sigint)


def sigint_seen() -> bool:
    """Whether Ctrl-C (SIGINT) came since :func:`watch_sigint` (or during a :func:`note_sigint` stretch)."""
    return _SIGINT_SEEN


def sigint_count() -> int:
    """How many Ctrl-Cs this process has noted: compare two readings to tell whether one came in between."""
    return _SIGINTS


def note_sigint():
    """Note Ctrl-C as :func:`watch_sigint` does, whatever handler was set (for a stretch of code, e.g. importing the
    user's model file, whose KeyboardInterrupt must be told apart from a Ctrl-C); returns the handler it replaced, to
    be restored after, or None where no handler can be set (a thread other than the main one)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    old = signal.signal(signal.SIGINT, _note_sigint)
    return old if old is not None else signal.default_int_handler  # None: a handler set outside Python
