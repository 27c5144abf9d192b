"""The lock on a run folder: one process trains it at a time.

A process that trains a run folder (a new run, ``--resume``, ``--overwrite``) holds an exclusive
advisory lock (``fcntl.flock``, never waited for) on ``RUN/.lock`` until it ends; the kernel drops it
when the process dies, SIGKILL included, so no stale lock is left. Under torchrun rank 0 alone takes
it (the other ranks share the folder). Readers (sample, diagnose, report) take none.
"""
from __future__ import annotations

import atexit
import fcntl
import os
from pathlib import Path
from typing import IO, Optional

from ..errors import DepthlabError
from ..rundir import LOCK, prepare_run_dir

#: The lock files this process holds, by resolved path (kept open: closing one drops its lock).
_HELD: dict[str, IO] = {}


@atexit.register
def _close_held() -> None:
    """Close the lock files still held when the process exits (a run that ended in an error): the kernel would
    drop the locks anyway, but an open file object left to the interpreter's shutdown prints a ResourceWarning."""
    while _HELD:
        _HELD.popitem()[1].close()


def _refusal(run_dir: Path, f: IO) -> DepthlabError:
    f.seek(0)
    pid = f.read().strip() or "unknown"
    return DepthlabError(f"{run_dir} is being trained by another process (pid {pid}): wait for it to end, "
                         "or train into another --train.out_dir")


def hold(run_dir: Path, runtime=None) -> None:
    """Take this process's lock on the existing folder ``run_dir`` (kept while it holds it already); held
    until the process ends or, with a ``runtime``, until its ``close()`` (the run finished: a notebook that
    trained a run does not keep it from another process).

    Raises:
        DepthlabError: another process holds it (naming its pid).
    """
    path = Path(run_dir) / LOCK
    key = str(path.resolve())
    held = _HELD.pop(key, None)
    if held is not None:
        try:
            if os.fstat(held.fileno()).st_ino == os.stat(path).st_ino:
                _HELD[key] = held
                _release_on_close(run_dir, runtime)
                return
        except OSError:
            pass
        held.close()  # the folder it locked was replaced (--overwrite) or deleted
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        err = _refusal(Path(run_dir), f)
        f.close()
        raise err from None
    f.truncate(0)
    f.write(f"{os.getpid()}\n")
    f.flush()
    _HELD[key] = f
    _release_on_close(run_dir, runtime)


def _release_on_close(run_dir: Path, runtime) -> None:
    if runtime is not None:
        runtime.on_close.append(lambda: release(run_dir))


def release(run_dir: Path) -> None:
    """Drop this process's lock on ``run_dir`` (if it holds one)."""
    f = _HELD.pop(str((Path(run_dir) / LOCK).resolve()), None)
    if f is not None:
        f.close()


def claim_run_dir(run_dir: Path, overwrite: bool, runtime=None) -> Optional[Path]:
    """:func:`~depthlab.rundir.prepare_run_dir` under the lock: a folder another process trains is refused
    before anything is written (``--overwrite`` included); the new folder is locked before it is returned."""
    run_dir = Path(run_dir)
    if overwrite and (run_dir / LOCK).is_file():
        hold(run_dir)  # refuses while another process trains it; else ours until the folder is replaced
    replaced = prepare_run_dir(run_dir, overwrite)
    hold(run_dir, runtime)  # refused only if another process made the folder since: the old run stays set aside, intact
    return replaced


__all__ = ["claim_run_dir", "hold", "release"]
