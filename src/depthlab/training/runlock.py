"""The lock on a run folder: one process trains it at a time.

A process that trains a run folder (a new run, ``--resume``, ``--overwrite``) holds an exclusive
advisory lock (``fcntl.flock``, never waited for) on the folder itself until it ends; the kernel drops it
when the process dies, SIGKILL included, so no stale lock is left. Taking it writes nothing: a command that
refuses (a contradicting flag, nothing to train, a refused ``--overwrite``) leaves the folder as it was. Once the
process has committed to training (:func:`mark`, as it writes config.json) ``RUN/.lock`` names its pid.
Under torchrun rank 0 alone takes it (the other ranks share the folder). Readers (sample, diagnose, report)
take none.
"""
from __future__ import annotations

import atexit
import errno
import fcntl
import os
import time
from pathlib import Path
from typing import Optional

from ..errors import DepthlabError, no_space
from .. import rundir
from ..rundir import LOCK, prepare_run_dir, sweep_of

#: The folders this process holds locked, by resolved path: [descriptor of the folder (kept open: closing it
#: drops its lock), whether RUN/.lock names this process yet].
_HELD: dict[str, list] = {}


@atexit.register
def _close_held() -> None:
    """Close the folders still held when the process exits (a run that ended in an error)."""
    while _HELD:
        os.close(_HELD.popitem()[1][0])


def _key(run_dir: Path) -> str:
    return str(Path(run_dir).resolve())


def _flock_pid(fd: int) -> Optional[str]:
    """The pid holding a flock on the file open as ``fd``, from /proc/locks (Linux); None where it lists none."""
    st = os.fstat(fd)
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 5 and parts[1] == "FLOCK" and parts[5] == where and parts[4].isdigit() \
                        and int(parts[4]) > 0:
                    return parts[4]
    except OSError:
        pass
    return None


def _holder_pid(run_dir: Path, fd: int) -> str:
    """The pid holding the lock on the folder open as ``fd``: from /proc/locks (Linux) where it lists it, else
    the one RUN/.lock names."""
    pid = _flock_pid(fd)
    if pid:
        return pid
    try:
        return (Path(run_dir) / LOCK).read_text(encoding="ascii").strip() or "unknown"
    except (OSError, UnicodeDecodeError):
        return "unknown"


def _sweep_holding(run_dir: Path) -> Optional[tuple[Path, str]]:
    """(sweep folder, its pid) when ``run_dir`` is a run of a sweep (:func:`~depthlab.rundir.sweep_of`)
    that a sweep process holds now (its folder's lock, as /proc/locks lists it; only looked at, never taken)."""
    sweep_dir = sweep_of(run_dir)
    if sweep_dir is None:
        return None
    try:
        fd = os.open(sweep_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return None
    try:
        pid = _flock_pid(fd)
    finally:
        os.close(fd)
    return (sweep_dir, pid) if pid else None


def _busy_line(run_dir: Path, pid: str, resume: bool = False) -> str:
    """The default refusal of a folder another process holds: a sweep's run says the sweep trains it. ``resume``: the
    refusal of a ``--resume``: wait, then resume (not a new run's "another --train.out_dir")."""
    swept = _sweep_holding(run_dir)
    if swept:
        who, it, by = (f"is a run of the sweep running in {swept[0]} (pid {swept[1]}), which is training it"
                       f"{f' in its worker (pid {pid})' if pid != swept[1] else ''}", "the sweep", "the sweep")
    else:
        who, it, by = f"is being trained by another process (pid {pid})", "it", "that process"
    then = (f"; then --resume it again: it resumes from the latest checkpoint {by} leaves" if resume else
            ", or train into another --train.out_dir")
    return f"{run_dir} {who}: wait for {it} to end{then}"


def hold(run_dir: Path, runtime=None, busy: str = "", resume: bool = False) -> None:
    """Take this process's lock on the existing folder ``run_dir`` (kept while it holds it already), writing
    nothing; held until the process ends or, with a ``runtime``, until its ``close()`` (the run finished: a
    notebook that trained a run does not keep it from another process). ``busy``: the refusal when another
    process holds it, ``{pid}`` standing for its pid (replaced, not ``str.format``: a folder's name may
    hold braces) (default: the run folder's, naming --train.out_dir, or with ``resume`` --resume; a sweep's run
    names the sweep).

    Raises:
        DepthlabError: another process holds it (naming its pid), or the folder cannot be opened.
    """
    key = _key(run_dir)
    held = _HELD.pop(key, None)
    if held is not None:
        try:
            if os.fstat(held[0]).st_ino == os.stat(run_dir).st_ino:
                _HELD[key] = held
                _release_on_close(run_dir, runtime)
                return
        except OSError:
            pass
        os.close(held[0])  # the folder it locked was replaced (--overwrite) or deleted
    try:
        fd = os.open(run_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as e:
        raise DepthlabError(f"cannot open the run folder {run_dir}: {e.strerror}; choose a folder you can read, "
                            "or another --train.out_dir") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _holder_pid(Path(run_dir), fd)
        os.close(fd)
        raise DepthlabError(busy.replace("{pid}", pid) if busy else _busy_line(Path(run_dir), pid, resume)) from None
    except OSError as e:  # a filesystem that cannot lock a folder (some network mounts): the lock only guards
        from .runtime import console  # against a mistake, so the run goes on, unguarded, and says so

        console(f"warning: cannot lock {run_dir} ({e.strerror}); nothing keeps another process from writing "
                "into it at the same time: start one at a time")
    _HELD[key] = [fd, False]
    _release_on_close(run_dir, runtime)


def mark(run_dir: Path) -> None:
    """Write this process's pid to ``RUN/.lock`` once it holds the folder and has committed to training it (once;
    a process that does not hold it, another rank, writes nothing).

    Raises:
        DepthlabError: the folder is not writable (before anything of the run is written).
        OSError: the disk is full (ENOSPC, EDQUOT), with ``RUN/.lock`` as its filename."""
    held = _HELD.get(_key(run_dir))
    if held is not None and not held[1]:
        require_writable(run_dir)  # a writable RUN/.lock (copied) in a read-only folder: later writes would fail
        try:
            (Path(run_dir) / LOCK).write_text(f"{os.getpid()}\n", encoding="ascii")
        except OSError as e:  # the first write of a run (resumed or new): nothing of the run is touched yet
            if no_space(e):  # a full disk, not a folder to make writable: the command says the file and the fix
                e.filename = e.filename or str(Path(run_dir) / LOCK)
                raise
            raise DepthlabError(_unwritable(run_dir, e.strerror or str(e))) from None
        held[1] = True


def _unwritable(run_dir: Path, why: str, where: Optional[Path] = None) -> str:
    where = run_dir if where is None else where
    what = "the run folder" if where == run_dir else "the run's"
    return (f"cannot write into {what} {where}: {why}; {rundir.writable_fix(Path(run_dir), 'the run')} or "
            "train into another --train.out_dir (a --resume can continue a writable copy of it)")


def require_writable(run_dir: Path, *inside: Path) -> None:
    """Refuse a run folder this process cannot make files in (a training run writes every file by rename), or any
    of the existing paths ``inside`` it that it cannot write (a resume's checkpoints/ and metrics.jsonl).

    Raises:
        DepthlabError: naming the first such path and the fix.
    """
    why = os.strerror(errno.EROFS if rundir.read_only_fs(run_dir) else errno.EACCES)
    if not os.access(run_dir, os.W_OK | os.X_OK):
        raise DepthlabError(_unwritable(run_dir, why))
    for p in inside:
        if p.exists() and not os.access(p, os.W_OK | (os.X_OK if p.is_dir() else 0)):
            raise DepthlabError(_unwritable(run_dir, why, p))


def process_start() -> float:
    """When this process started, in seconds since the epoch (/proc, Linux; within a second); where /proc cannot tell,
    now: a file older than either was not written by this process's training of a folder it has just locked."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime: clock ticks after boot
        with open("/proc/stat", encoding="ascii") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def _release_on_close(run_dir: Path, runtime) -> None:
    if runtime is not None:
        runtime.on_close.append(lambda: release(run_dir))


def is_held(run_dir: Path) -> bool:
    """Whether this process holds the lock on ``run_dir``."""
    return _key(run_dir) in _HELD


def release(run_dir: Path) -> None:
    """Drop this process's lock on ``run_dir`` (if it holds one)."""
    held = _HELD.pop(_key(run_dir), None)
    if held is not None:
        os.close(held[0])


def claim_run_dir(run_dir: Path, overwrite: bool, runtime=None) -> Optional[Path]:
    """:func:`~depthlab.rundir.prepare_run_dir` under the lock: an existing folder another process trains is
    refused with the lock's line before anything is written (a run still starting, before its config.json, and
    ``--overwrite`` included); the new folder is locked before it is returned. A refusal leaves no lock held."""
    run_dir = Path(run_dir)
    had = _key(run_dir) in _HELD
    try:
        if run_dir.is_dir():
            hold(run_dir)  # refuses while another process trains it; else ours until the folder is replaced
        replaced = prepare_run_dir(run_dir, overwrite)
    except DepthlabError:
        if not had:
            release(run_dir)
        raise
    hold(run_dir, runtime)  # refused only if another process made the folder since: the old run stays set aside, intact
    return replaced


__all__ = ["claim_run_dir", "hold", "is_held", "mark", "process_start", "release"]
