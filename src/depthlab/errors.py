"""The one exception type that depthlab raises for bad input.

The CLI turns a :class:`DepthlabError` into a single line ``depthlab: error: <message>`` on
stderr and exit status 2; library callers catch it like any exception. Ctrl-C is remembered here too
(:func:`watch_sigint`), for the command line's exit status 130.
"""

import errno
import os
import re
import shlex
import signal
import threading
from typing import Optional


class DepthlabError(Exception):
    """Bad input or an impossible request, with a message that names the problem and the fix.

    Args:
        message: one sentence, no trailing newline, naming the offending field/file and a fix.
    """


class Worded(Exception):
    """An exception other than :class:`DepthlabError` whose message depthlab writes in the command line's words
    (a stop's "Resume with: depthlab train --resume RUN"): :class:`api_errors` says it in the API's words too."""


class NonFiniteError(DepthlabError):
    """A non-finite loss or gradient stopped training (CLI exit status 3)."""


_API_FLAGS = {"--max-new-tokens": "max_new_tokens", "--num-samples": "num_samples", "--top-k": "top_k",
              "--top-p": "top_p", "--temperature": "temperature", "--prompt": "prompt", "--seed": "seed",
              "--checkpoint": "which", "--device": "device", "--overwrite": "overwrite=True",
              "--init-from": "init_from", "--batch_size": "batch_size", "--block_size": "block_size",
              "--blocks": "blocks", "--probe_batch_size": "batch_size", "--batches": "n_batches", "--init": "init"}
# prose that names a command ("a depthlab train run, or pass --train.resume false") is no command line to keep
_PROSE = r"(?!(?:run|runs|wrote|writes|of|drops|takes|refuses|waits|says|reads|finds)\b(?![/.]))"
_COMMAND_LINE = re.compile(rf"(depthlab [a-z]+ {_PROSE}[^;)]*)")


def _unquoted(word: str) -> str:
    """A shell word as the command line quoted it, unquoted (as it was when it cannot be split)."""
    try:
        return shlex.split(word)[0]
    except (ValueError, IndexError):
        return word


def _from_run(m: re.Match) -> str:
    return f"depthlab.train(RunConfig.from_run({_unquoted(m.group(1))!r}))"


# a command line that only resumes a run ("Resume with: depthlab train --resume RUN"): the API call that does it
_RESUME_ONLY = re.compile(r"depthlab train --resume ('[^']*'|[^\s,;:)]+)(?=\s*(?:[;)]|$))")


# "--resume RUN" where a run follows (the clause ends, or "to"/"continues" come next), not "a --resume gets ..."
_API_PATTERNS = ((re.compile(r"--resume ('[^']*'|[^\s,;:)]+)(?=[,;:)]|\s+(?:to|continues)\b|\s*$)"), _from_run),
                 (re.compile(r"--init-from (?!(?:cannot|to|then|starts|refuses|refusal|of|needs|its|exclude|began|an|a|"
                             r"would|checks|run|src|is|with)[\s,;:)])('[^']*'|[^\s,;:)]+)(?=[,;:)]|\s|$)"),
                  lambda m: f"init_from={_unquoted(m.group(1))!r}"),
                 (re.compile(r"those --model flags"), "those model fields"),
                 (re.compile(r"--checkpoint (best|last)\b"), r"which='\1'"),
                 (re.compile(r"--device (\w+(?::\d+)?)"), r"device='\1'"),
                 (re.compile(r"--(data|model|train)\.(\w+) (true|false)\b"),
                  lambda m: f"{m.group(1)}.{m.group(2)}={m.group(3).capitalize()}"),
                 (re.compile(r"--(data|model|train)\.(\w+) (-?\d[\d.e+-]*)(?=[\s,;:)]|$)"), r"\1.\2=\3"),
                 (re.compile(r"--(data|model|train)\.(\w+)"), r"\1.\2"))


def api_words(message: str) -> str:
    """``message``, written for the command line, said to a Python caller: a command's flags become the keyword
    arguments of the API function that takes the same value (``--max-new-tokens`` -> ``max_new_tokens``,
    ``--checkpoint`` -> ``which``, ``--overwrite`` -> ``overwrite=True``, ``--init-from SRC`` -> ``init_from='SRC'``),
    ``--resume RUN`` and a command line that only resumes RUN the config that resumes it
    (``depthlab.train(RunConfig.from_run(RUN))``) and ``--train.out_dir`` the config field ``train.out_dir``; a
    command line to run (``depthlab train -c ... --model.n_layer 3``) is kept as it is.

    Only depthlab's own messages pass through here (the API entries :func:`depthlab.sample.sample_text`,
    :func:`depthlab.sample.load_run`, :func:`depthlab.sample.generate`, :func:`depthlab.trainer.train` and
    :func:`depthlab.analytics.train`, errors and console lines)."""
    parts = _COMMAND_LINE.split(_RESUME_ONLY.sub(_from_run, message))  # odd items: a command line to run (its
    # flags stay flags)
    for i in range(0, len(parts), 2):
        for pattern, repl in _API_PATTERNS:
            parts[i] = pattern.sub(repl, parts[i])
        for flag, name in _API_FLAGS.items():
            parts[i] = re.sub(re.escape(flag) + r"(?![\w.-])", name, parts[i])
    return "".join(parts)


class api_errors:
    """``with api_errors(): ...``: a :class:`DepthlabError` raised inside is re-raised, the same exception of the same
    type, with its message in the API's words (:func:`api_words`)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, e, tb) -> bool:
        if isinstance(e, (DepthlabError, Worded)) and e.args and isinstance(e.args[0], str):
            e.args = (api_words(e.args[0]),) + e.args[1:]
        return False


#: The errnos of a full disk: no space left on the device (ENOSPC), or this user's disk quota used up (EDQUOT).
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def did_you_mean(name: str, choices) -> str:
    """`` (did you mean X?)`` for the one choice ``name`` misspells (difflib's closest at 0.75, or the only one it
    begins or that matches it but for ``-``/``_``), else ""."""
    import difflib

    choices = [str(c) for c in choices]
    norm = {c.replace("_", "-").lower(): c for c in choices}
    close = [norm[name.replace("_", "-").lower()]] if name.replace("_", "-").lower() in norm else \
        [c for c in choices if c.startswith(name)] if len(name) > 2 else []
    close = close if len(close) == 1 else difflib.get_close_matches(name, choices, n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def no_space(e: BaseException) -> bool:
    """Whether ``e`` is an OSError of a full disk (:data:`NO_SPACE`, told by its errno)."""
    return isinstance(e, OSError) and e.errno in NO_SPACE


def no_space_words(e: OSError, folder: Optional[os.PathLike | str] = None,
                   file: Optional[os.PathLike | str] = None) -> str:
    """``no space left on the device holding FOLDER while writing FILE`` for a :func:`no_space` error (EDQUOT: this
    user's disk quota is used up ...), and how to free it: the words of a line that then says how to go on.

    FILE is ``file`` when given (e.g. the name a temporary file stood for), else ``e.filename`` where the system named
    one; FOLDER, when not given, the folder of FILE.
    """
    file = file or e.filename
    if folder is None and file:
        folder = os.path.dirname(os.path.abspath(os.fsdecode(file)))
    full = "this user's disk quota is used up" if e.errno == errno.EDQUOT else "no space left"
    where = f" on the device holding {os.fsdecode(folder)}" if folder else " on the disk"
    what = f" while writing {os.fsdecode(file)}" if file else ""
    free = ("free space in this user's quota (or ask for a larger one)" if e.errno == errno.EDQUOT else
            "free space there")
    return f"{full}{where}{what}; {free}"


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


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be (:func:`watch_sigterm`): the same clean-up runs
    (a run ``--overwrite`` set aside is put back, a folder a start made is removed) and the command exits 143.
    Python's default for SIGTERM ends the process at once, with no clean-up and no word."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def watch_sigterm() -> None:
    """Turn SIGTERM into :class:`Terminated` (the main thread only; a handler set by someone else is kept). The
    training loop replaces it while it trains (it stops between steps and writes a checkpoint) and puts it back."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, _raise_terminated):
        signal.signal(signal.SIGTERM, _raise_terminated)


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
