"""What a CPU run's automatic settings depend on, readable before torch loads: the machine (CPU model,
cores, how busy), this process's OpenMP wait policy, and the measurement cache of
:mod:`depthlab.training.autotune`. Nothing here imports torch: the command line asks it which policy
to start with, and OpenMP reads that once, when torch loads.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional

from ..config import MAX_THREADS

__all__ = ["OMP_MARK", "busy_cores", "cache_file", "cpu_model", "env_threads", "guess_policy", "ignored_env_threads",
           "machine_name", "omp_free", "omp_policy", "oversubscribed_threads", "policy_key", "read_cache",
           "resumed_policy", "start_policy"]

#: Environment variable depthlab sets beside ``OMP_WAIT_POLICY`` when it chose the policy itself (so a
#: policy the user exported is theirs and is never changed).
OMP_MARK = "DEPTHLAB_OMP_WAIT"


def omp_policy() -> str:
    """This process's OpenMP wait policy, ``passive`` or ``active`` (libgomp's default spins for a while
    before sleeping, which counts as ``active``). It is read once, when torch loads."""
    return "passive" if os.environ.get("OMP_WAIT_POLICY", "").lower() == "passive" else "active"


def env_threads() -> int:
    """``OMP_NUM_THREADS`` when the environment sets it to an integer in [1, MAX_THREADS], else 0. A run honours
    it as a given thread count (torch itself starts with at most one thread per core, whatever it says; a count
    past MAX_THREADS given to ``torch.set_num_threads`` measured a segfault at 999999)."""
    raw = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(raw) if raw.isdigit() and 0 < int(raw) <= MAX_THREADS else 0


OMP_GIVEN = "DEPTHLAB_OMP_NUM_THREADS_GIVEN"
"""Where the command line keeps an ``OMP_NUM_THREADS`` that is no thread count, moved there before torch loads:
libgomp printed its own "Invalid value for environment variable" lines before depthlab's one warning."""


def set_aside_bad_env_threads() -> None:
    """Move an ``OMP_NUM_THREADS`` that :func:`env_threads` ignores (``abc``, ``0``, empty) to :data:`OMP_GIVEN`,
    before torch (and libgomp) loads: depthlab's warning (:func:`ignored_env_threads`) is then the only one."""
    raw = os.environ.get("OMP_NUM_THREADS")
    if raw is not None and not env_threads():
        os.environ[OMP_GIVEN] = os.environ.pop("OMP_NUM_THREADS")


def ignored_env_threads(instead: str) -> Optional[str]:
    """The one warning (without ``warning: ``) for an ``OMP_NUM_THREADS`` that is set but not a positive integer
    (``abc``, ``0``, ``4,2``, an empty value), which :func:`env_threads` ignores, or None when it is unset or a
    thread count. Every command that sets the thread count says it in these words.

    Args:
        instead: what sets the thread count instead, as the end of "depthlab ignores it and ...", e.g.
            ``lets --threads 2 set the thread count`` or ``runs with 2 threads, torch's default``.
    """
    raw = os.environ.get("OMP_NUM_THREADS", os.environ.get(OMP_GIVEN))
    if raw is None or env_threads():  # an empty one too: libgomp's own complaint says nothing of what runs
        return None
    what = (f"is more than the {MAX_THREADS:,} threads depthlab accepts" if raw.strip().isdigit() and int(raw) > 0
            else "is not a thread count (a positive integer)")
    return (f"OMP_NUM_THREADS={raw!r} {what}: depthlab ignores it and {instead}; "
            "set it to a number (OMP_NUM_THREADS=1) or unset it")


def oversubscribed_threads(n: int, knob: str) -> Optional[str]:
    """The one warning (without ``warning: ``) for a given thread count above the cores, or None. Every command
    that runs torch work honours a given count and says it in these words.

    Args:
        n: the threads given. knob: what gave them: ``OMP_NUM_THREADS``, ``train.threads`` or ``--threads``.
    """
    cores = os.cpu_count() or 1
    if n <= cores:
        return None
    said, fix = ((f"OMP_NUM_THREADS={n}", f"OMP_NUM_THREADS={cores}, or unset it") if knob == "OMP_NUM_THREADS"
                 else (f"{knob} {n}", f"--{knob.lstrip('-')} {cores}, or 0"))
    return f"{said} is more than this machine's {cores} cores; oversubscribed threads make each step slower (try {fix})"


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (``unknown`` elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def machine_name() -> str:
    """``"<CPU model> x<cores>"``: which machine a measurement belongs to."""
    return f"{cpu_model()} x{os.cpu_count() or 1}"


def _proc_stat() -> Optional[tuple[int, int]]:
    """All cores' (total, idle + iowait) time from /proc/stat, in clock ticks; None where it is unreadable."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    return sum(v), v[3] + (v[4] if len(v) > 4 else 0)


def _own_cpu_ticks() -> float:
    """This process's CPU time (all its threads, user + system), in /proc/stat's clock ticks."""
    t = os.times()
    return (t.user + t.system) * os.sysconf("SC_CLK_TCK")


def busy_cores(window_s: float = 0.15) -> int:
    """How many cores other processes keep busy now: non-idle time over ``window_s`` from /proc/stat, less
    this process's own CPU time over the same window (OpenMP threads spinning after torch work measured the
    run's own load as "2 of 2 cores busy"), rounded. 0 where /proc/stat is missing.
    """
    a, own_a = _proc_stat(), _own_cpu_ticks()
    time.sleep(window_s)
    b, own_b = _proc_stat(), _own_cpu_ticks()
    if a is None or b is None or b[0] <= a[0]:
        return 0
    total = b[0] - a[0]
    others = max(0.0, total - (b[1] - a[1]) - max(0.0, own_b - own_a))
    return int(round(min(1.0, others / total) * (os.cpu_count() or 1)))


def omp_free() -> bool:
    """Whether depthlab chose this process's wait policy (so it may choose another): the user did not."""
    return os.environ.get(OMP_MARK, "") == os.environ.get("OMP_WAIT_POLICY", "-")


def cache_file() -> Path:
    base = os.environ.get("DEPTHLAB_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                           os.path.join(os.path.expanduser("~"), ".cache"), "depthlab")
    return Path(base) / "autotune.json"


def read_cache() -> dict:
    try:
        d = json.loads(cache_file().read_text())
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def policy_key(busy: int) -> str:
    """The cache entry of the wait policy last measured fastest on this machine at this load (any shape)."""
    return f"omp_wait {machine_name()} busy {busy}"


def guess_policy(busy: Optional[int] = None) -> Optional[str]:
    """The wait policy to start a training process with (before torch loads): the one last measured
    fastest on this machine at the present load (``busy`` cores taken by others; read now when None),
    or None if never measured."""
    w = (read_cache().get(policy_key(busy_cores() if busy is None else busy)) or {}).get("omp_wait")
    return w if w in ("passive", "active") else None


def resumed_policy(run_dir: str) -> Optional[str]:
    """The wait policy the run in ``run_dir`` trains with on this machine (config.json ``resolved.tuning``, which
    a resume keeps: :func:`depthlab.training.autotune.tune`), or None (another machine, no record, unreadable).
    A resume started with another policy restarted its process to take this one (seconds, even for a resume
    with nothing left to train)."""
    try:
        tuning = json.loads((Path(run_dir) / "config.json").read_text(encoding="utf-8"))["resolved"]["tuning"]
        w = tuning["setting"]["omp_wait"]
        return w if w in ("passive", "active") and tuning.get("machine") == machine_name() else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def start_policy(resume: Optional[str] = None) -> str:
    """The wait policy ``depthlab train`` starts with: a resumed run's own (:func:`resumed_policy`, ``resume``
    its folder), else :func:`guess_policy`, else spinning on an idle machine and sleeping on a busy one.

    Never measured here, the load decides: spinning was faster idle on all three CPU classes measured
    (default recipe, 2 cores: 1.17x on an AVX2 EPYC, 1.9x on a Zen 5 EPYC, ~2x on a Xeon) and up to
    6x slower with other processes on the cores (issue 24's tables in README)."""
    own = resumed_policy(resume) if resume else None
    if own is not None:
        return own
    busy = busy_cores()
    return guess_policy(busy) or ("active" if busy == 0 else "passive")
