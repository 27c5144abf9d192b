"""The local backend: run a sweep's points in worker processes on this machine.

Runs execute in worker processes (``spawn``; default one per core, each with torch threads =
cores // workers), longest first. The pool is our own, not ``ProcessPoolExecutor``: one process
per run, so a worker that crashes (segfault, out of memory) only costs its own run, which is
recorded as ``error`` (one that Ctrl-C or the sweep's SIGTERM ended before it wrote a result:
``interrupted``). Every run of an experiment gets the same budget (the same
``train.max_iters``). Stopping a sweep and starting it again skips finished runs (those with a
``summary.json``, and deterministic failures such as a non-finite loss), resumes interrupted ones
from their latest checkpoint (as ``depthlab train --resume`` would) and deletes and restarts
other unfinished ones (:func:`depthlab.sweep.common.plan`, shared with the Ray backend like the
sweep-directory checks and the progress line). A failing run is a result (``status``
``nonfinite``, ``error``, ...), not a crash of the sweep.

Each run is an ordinary run directory made by :func:`depthlab.analytics.train` (trainer plus
the default analytics callbacks), plus ``sweep_status.json``, ``init_probe.json`` and
``train.log`` (:mod:`depthlab.rundir` names them). Running a sweep never imports
:mod:`depthlab.report`.
"""

from __future__ import annotations

import heapq

import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Optional, Sequence

from ..units import counted
from .. import rundir
from ..errors import DepthlabError, no_space, no_space_words
from ..rundir import RunDir, write_json
from ..training import runlock
from .common import (Log, Progress, check_corpora, check_counts, check_devices, check_same_sweep, check_sweep_dir,
                     parse_seeds, placement, plan, read_added, seeded_points)
from .seeds import check_auto_seeds
from .spec import SweepSpec, estimate_seconds

__all__ = ["dry_run", "init_probe", "execute", "run_jobs"]

#: Signals that stop a sweep: the user's Ctrl-C (to the whole process group) and the SIGTERM the sweep sends its
#: workers when it stops (:func:`_stop_workers`); a worker that died of one before it wrote a result was interrupted,
#: not failed.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


# --------------------------------------------------------------------------- one run (worker side)
def init_probe(config: dict) -> dict:
    """Gradient norm, activation RMS and rank measure per block of the freshly initialised model.

    Thin wrapper over :func:`depthlab.analytics.probe.probe_at_init` (same seed and init as
    the trainer, which reseeds afterwards, so the run's trajectory is unchanged).

    Args:
        config: nested run config (``RunConfig.to_dict()`` form).

    Returns:
        ``{"step": 0, "loss" (nats), "grad_norm_block": [L], "resid_rms": [L], "rank_measure": [L]}``
        (gradient L2 norms per block; rank measure of Dong et al. 2021: 0 for an all-zero block
        output, None where otherwise undefined).

    Raises:
        DepthlabError: bad config or corpus.
    """
    from ..analytics.probe import probe_at_init
    from ..config import RunConfig

    r = probe_at_init(RunConfig.from_dict(json.loads(json.dumps(config))))
    layers = r["layers"]
    # A block output that is exactly zero for every token (a deep plain stack underflows) has all
    # tokens equal: fully collapsed, so its measure is 0 rather than the undefined 0/0.
    ranks = [0.0 if la["rank_measure"] is None and la["act_rms"] is not None and la["act_rms"] < 1e-30
             else la["rank_measure"] for la in layers]
    return {"step": 0, "loss": r.get("loss"), "grad_norm_block": [la["grad_norm"] for la in layers],
            "resid_rms": [la["act_rms"] for la in layers], "rank_measure": ranks}


def _train_one(config: dict, log: Log, callbacks: Sequence = (),
               hparam_fields: Optional[Sequence[str]] = None) -> tuple[str, str]:
    """Train one run with the default analytics; (status, message). A failing run is a status, not an exception."""
    from .. import analytics
    from ..config import RunConfig
    from ..errors import NonFiniteError
    from ..trainer import Interrupted

    try:
        cfg = RunConfig.from_dict(json.loads(json.dumps(config)))
        # looked up now, so tests can replace it
        run_dir = analytics.train(cfg, log=log, callbacks=list(callbacks), hparam_fields=hparam_fields)
        summ = RunDir(run_dir).summary or {}
        by = summ.get("stopped_by")  # absent in runs of older releases: a short run was time-capped
        if summ.get("planned_end") is True:  # the end train.fit_to_time planned: the run is whole, its decay done
            return "ok", ""
        if by == "max_time" or (by is None and summ.get("final_step", 0) < cfg.train.max_iters):
            return "time_capped", f"stopped by train.max_time at step {summ.get('final_step')}"
        return "ok", ""
    except NonFiniteError as e:
        return "nonfinite", str(e)
    except Interrupted as e:  # not the trainer's "Resume with: depthlab train --resume": the sweep resumes it
        return "interrupted", f"interrupted at step {e.step}; checkpoint written"
    except KeyboardInterrupt:
        return "interrupted", "interrupted"
    except DepthlabError as e:
        return "error", str(e)
    except OSError as e:
        if not no_space(e):
            return "error", f"{type(e).__name__}: {e}"
        # an "error" run is run again by the same command: from its last checkpoint where it has one
        return "error", (f"{no_space_words(e, config['train']['out_dir'])} and run the same sweep command again (it "
                         "continues this run from its last checkpoint, or from step 0 if it has none)")
    except Exception as e:  # noqa: BLE001 - a failing run is a result, not a crash of the sweep
        return "error", f"{type(e).__name__}: {e}"


def write_failure(e: OSError, folder: Path) -> str:
    """Why a sweep's file could not be written, in one clause: for a full disk (told by errno) the device, the file
    and ``free space there``; else the system's reason and the file (``e.filename``, else ``folder``)."""
    if no_space(e):
        return no_space_words(e, folder)
    return f"{e.strerror or type(e).__name__} ({e.filename or folder})"


def _run_log(run_dir: Path) -> Log:
    """A ``log`` that appends to ``run_dir/train.log`` (lines wait until the folder exists)."""
    pending: list[str] = []

    def log(msg: str) -> None:
        pending.append(msg)
        if run_dir.is_dir():
            try:
                with open(run_dir / rundir.TRAIN_LOG, "a", encoding="utf-8") as f:
                    f.write("\n".join(pending) + "\n")
            except OSError as e:  # e.g. a full disk: a failed write() names no file, the one it was for
                if e.filename is None:
                    e.filename = str(run_dir / rundir.TRAIN_LOG)
                raise
            pending.clear()

    return log


def execute(job: dict, callbacks: Sequence = ()) -> dict:
    """Run one sweep point; never raises for a failing run (the status says what happened).

    Probes the model at initialisation (``init_probe.json``), trains it with
    :func:`depthlab.analytics.train` (console lines to ``train.log``; TensorBoard HParams of the
    fields in ``job["hparams"]``), and writes ``sweep_status.json``.

    Args:
        job: ``{"name", "config" (nested run config with train.out_dir), "threads" (0 = keep)}``,
            optionally ``"hparams"`` (the sweep's varied fields) and ``"meta"`` (extra fields for
            the status, e.g. the Ray node id).
        callbacks: extra training observers (the Ray backend reports evaluations to Tune).

    Returns:
        ``{"name", "status", "message", "wall_s" (seconds), "threads", **meta}``; the same is
        written to ``run_dir/sweep_status.json``.
    """
    import torch

    old_threads = torch.get_num_threads()
    if job.get("threads"):
        torch.set_num_threads(int(job["threads"]))
    run_dir = Path(job["config"]["train"]["out_dir"])
    t0 = time.time()
    probe, message = None, ""
    try:  # the init probe hooks depthlab's GPT: a model.source run has none
        probe = None if job["config"]["model"].get("source") else init_probe(job["config"])
    except Exception as e:  # noqa: BLE001 - the probe is optional; the run decides the status
        message = f"init probe failed: {type(e).__name__}: {e}"
    cfg = job["config"]
    if job.get("threads") and not (cfg.get("train") or {}).get("threads"):
        # the sweep's share of the cores is the run's given thread count: measured auto must not replace it,
        # nor read Ray's OMP_NUM_THREADS=1 in its workers as the user's
        cfg = {**cfg, "train": {**(cfg.get("train") or {}), "threads": int(job["threads"])}}
    had = runlock.is_held(run_dir)
    try:
        status, msg = _train_one(cfg, _run_log(run_dir), callbacks, job.get("hparams"))
    finally:  # a run that ended in an exception (interrupted, non-finite) never closed its runtime: its folder
        if not had:  # would stay locked while this process lives (an in-process sweep run again from a notebook)
            runlock.release(run_dir)
    if status != "ok":  # a failure's message replaces a failed probe's
        message = msg
    torch.set_num_threads(old_threads)  # in-process runs leave the caller's setting as it was
    res = {"name": job["name"], "status": status, "message": re.sub(r"\s+", " ", message).strip()[:500],
           "wall_s": round(time.time() - t0, 3), "threads": job.get("threads"), **job.get("meta", {})}
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        if probe is not None:
            write_json(run_dir / rundir.INIT_PROBE, probe)
        write_json(run_dir / rundir.SWEEP_STATUS, res)
    except OSError as e:  # the result is still returned (a worker sends it to the sweep), not lost without a word
        said = f"{rundir.SWEEP_STATUS} not written: {write_failure(e, run_dir)}"
        res["message"] = f"{res['message']}; {said}" if res["message"] else said
    return res


def _child_main(job: dict, conn=None) -> None:
    """Entry point of a worker process (spawn): run one point; the status file says the rest, and the result is
    sent on ``conn`` too (the sweep's copy when the status file could not be written, e.g. on a full disk)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the trainer installs its own handler
    res = execute(job)
    if conn is not None:
        try:
            conn.send(res)
        except (OSError, ValueError):  # the sweep has gone: the status file is all there is
            pass
    sys.exit(0 if res["status"] != "interrupted" else 130)


# --------------------------------------------------------------------------- dry run (parent side)
def dry_run(spec: SweepSpec, out_dir: str | Path, workers: int = 0, seeds: Optional[str | int] = None,
            threads: int = 0, backend: str = "local", rerun: bool = False, log: Optional[Log] = print) -> str:
    """The runs of ``spec`` still to do with a time estimate each, and the total; no run is started, nothing written.

    Args:
        spec: the sweep.
        out_dir: the sweep directory the runs would go to (its finished runs are not run again).
        workers: worker processes (0 = one per core; Ray: trials at a time, 0 = as the cluster holds).
        threads: torch threads per run (0 = cores // workers, at least 1, as the real sweep picks them).
        seeds: ``--seeds``: ``N`` lists seeds 1..N of every cell; ``auto[:MAX]`` lists the first round
            (the seeds it adds depend on the results) and says so.
        backend: ``local`` or ``ray`` (says how the runs would be placed, as the real sweep's first line).
        rerun: ``--overwrite``: every run is to do, finished or not.
        log: told, before it is imported, of each model.source file the dry run imports to check it, as the real
            sweep does (the file runs as Python: said first, so also when its import fails); None: those lines
            open the returned text.

    Returns:
        One line per run to do (``name ~seconds``), then a line with the run count (and how many are finished
        already), the estimated minutes (:func:`depthlab.sweep.estimate_seconds`) and ``out_dir``.

    Raises:
        DepthlabError: an invalid grid point (names the run and the field), ``workers`` < 0, an
            ``out_dir`` the sweep itself would refuse (a file, a non-empty folder that is not a sweep, a finished
            run made with another config), or a ``data.path`` that is missing, a folder or empty.
    """
    check_counts(workers, threads)
    mode = parse_seeds(seeds)
    if mode and mode[0] == "auto":
        check_auto_seeds(spec)
    check_sweep_dir(Path(out_dir))  # a dry run says what the real run would: not "ok" for a path it refuses
    lines: list[str] = []
    points, _ = seeded_points(spec, Path(out_dir), read_added(Path(out_dir)),
                              mode[1] if mode and mode[0] == "fixed" else None, log=log or lines.append)
    check_same_sweep(Path(out_dir), points)
    check_corpora(points)  # the real sweep refuses a missing corpus before it writes anything
    done, todo = plan(points, Path(out_dir), rerun=rerun)
    check_devices(todo, backend)  # as the real sweep: a train.device this machine lacks is refused
    nw, _, where = placement(backend, workers, threads, todo)  # as run.py picks them
    seconds = []
    for pt in todo:
        seconds.append(estimate_seconds(pt.config))
        lines.append(f"{pt.name:50s} ~{seconds[-1]:7.1f}s")
    total = sweep_seconds(seconds, nw, backend)
    if not todo:
        lines.append(f"nothing to run: {'all ' if len(points) > 1 else ''}{counted(len(points), 'run')} had finished "
                     f"-> {out_dir}")
    else:
        count = counted(len(points), "run") + (f" ({len(done)} already finished, {len(todo)} to run)" if done else "")
        source = any((p.config.get("model") or {}).get("source") for p in todo)
        size = ("; a model.source model's size is unknown before it is built: these count depthlab's GPT of the "
                "model fields (model.n_layer, model.n_embd), not your model" if source else "")
        lines.append(f"{count}, about {total / 60:.1f} min on {where} (rough estimate for an idle CPU{size}) "
                     f"-> {out_dir}")
    if rerun and todo:  # what --overwrite deletes was not said: a finished sweep's runs looked like new ones
        finished = len(plan(points, Path(out_dir), rerun=False)[0])
        started = sum((Path(out_dir) / rundir.SWEEP_RUNS / p.name).exists() for p in todo) - finished
        gone = [counted(n, w) for n, w in ((finished, "finished run"), (started, "started run")) if n]
        if gone:
            lines.append(f"--overwrite: {' and '.join(gone)} in {out_dir} would be deleted and trained again from "
                         "step 0")
    if mode and mode[0] == "auto":
        lines.append(f"--seeds auto: these are the first round; it then adds seeds (at most {mode[1]} per cell) to "
                     "the cells of undecided claims, which depends on their results")
    return "\n".join(lines)


def sweep_seconds(seconds: list[float], workers: int, backend: str) -> float:
    """Wall seconds of runs estimated at ``seconds`` each (:func:`depthlab.sweep.estimate_seconds`, one core's
    time) on ``workers``, taken longest first: :func:`makespan`, where on the local backend more workers than cores
    share them (4 workers on 2 cores were estimated twice as fast as 2); a Ray cluster's cores are not known here."""
    longest_first = sorted(seconds, reverse=True)  # the order the sweep takes them in (run.py): the dry run agrees
    return makespan(longest_first, min(workers, os.cpu_count() or workers) if backend == "local" else workers)


def makespan(seconds: list[float], workers: int) -> float:
    """Wall seconds until the last of the runs ends when ``workers`` take them in this order, each the next run
    as it comes free (as the sweep's pool does): never less than the longest run (the sum over the workers was
    printed before, a 454 s run in "about 5.7 min on 2 workers")."""
    free = [0.0] * max(1, workers)
    for s in seconds:
        heapq.heapreplace(free, free[0] + s)
    return max(free)


# --------------------------------------------------------------------------- running jobs
def _run_in_process(jobs: list[dict], progress: Progress) -> list[dict]:
    """Run jobs one after another in this process (``--workers 1``)."""
    results = []
    for job in jobs:
        res = execute(job)
        res["run_dir"] = job["config"]["train"]["out_dir"]
        results.append(res)
        progress(res)
        if res["status"] == "interrupted":
            raise KeyboardInterrupt
    return results


def _no_result(exitcode: Optional[int]) -> tuple[str, str]:
    """(status, message) of a worker that ended without a result: ``interrupted`` when a stop signal ended it (the
    same command runs it again, as it does an interrupted run), else ``error``."""
    if exitcode is not None and -exitcode in STOP_SIGNALS:
        return "interrupted", (f"interrupted: the worker process ended on {signal.Signals(-exitcode).name} before the "
                               "run wrote a result")
    return "error", f"worker process exited with code {exitcode} without a result"


def reap(proc, job: dict, t0: float, conn=None) -> dict:
    """The result of a finished worker: its status file, else the result it sent on ``conn`` (its status file could
    not be written), or, when it died without either, an ``interrupted`` row when a stop signal (:data:`STOP_SIGNALS`)
    ended it and an ``error`` row otherwise."""
    rd = RunDir(job["config"]["train"]["out_dir"])
    res = rd.sweep_status
    if not isinstance(res, dict) or res.get("name") != job["name"]:
        res = _sent(conn, job["name"])
    if res is None:
        status, message = _no_result(proc.exitcode)
        res = {"name": job["name"], "status": status, "message": message,
               "wall_s": round(time.time() - t0, 3), "threads": job.get("threads")}
        try:
            rd.path.mkdir(parents=True, exist_ok=True)
            write_json(rd.file(rundir.SWEEP_STATUS), res)
        except OSError:
            pass
    res["run_dir"] = str(rd.path)
    return res


def _sent(conn, name: str) -> Optional[dict]:
    """The result a worker sent on ``conn`` (closed after), or None when it sent none."""
    if conn is None:
        return None
    try:
        got = conn.recv() if conn.poll() else None
    except (EOFError, OSError, ValueError):  # died before (or while) sending
        got = None
    finally:
        conn.close()
    return got if isinstance(got, dict) and got.get("name") == name else None


def _stop_workers(procs: list, grace_s: float = 30.0) -> None:
    """Ask running workers to stop (SIGTERM: they checkpoint and exit), then kill stragglers."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.time() + grace_s
    for p in procs:
        p.join(max(0.1, deadline - time.time()))
        if p.is_alive():
            p.kill()
            p.join()


def _start_ignoring_sigint(p) -> None:
    """``p.start()`` with SIGINT ignored, which the spawned interpreter inherits: a Ctrl-C (sent to the whole process
    group) while it imports torch and depthlab would print a KeyboardInterrupt traceback from it. It is stopped
    instead by the sweep's SIGTERM (:func:`_stop_workers`), and :func:`_child_main` restores SIGINT once it runs.
    A Ctrl-C in the millisecond of the start itself is ignored by the sweep too (press it again)."""
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        p.start()
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)


def _pool_loop(jobs: list[dict], workers: int, progress: Progress, running: dict) -> list[dict]:
    """Start one spawned process per job, ``workers`` at a time, and collect their results."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")
    queue, results, interrupted = list(jobs), [], False
    while queue or running:
        while queue and len(running) < workers and not interrupted:
            job = queue.pop(0)
            got, send = ctx.Pipe(duplex=False)  # the worker's result, where its status file cannot be written
            p = ctx.Process(target=_child_main, args=(job, send), name=f"depthlab-sweep:{job['name']}")
            _start_ignoring_sigint(p)
            send.close()  # the worker's end: held only by the worker, so a dead worker reads as EOF
            running[p.sentinel] = (p, job, time.time(), got)
        if not running:
            break
        for s in wait(list(running)):
            p, job, t0, got = running.pop(s)
            p.join()
            res = reap(p, job, t0, got)
            results.append(res)
            progress(res)
            interrupted = interrupted or res["status"] == "interrupted"
    if interrupted:
        raise KeyboardInterrupt
    return results


def _run_pool(jobs: list[dict], workers: int, progress: Progress) -> list[dict]:
    """Run jobs in worker processes; on SIGTERM/SIGINT stop the workers and raise KeyboardInterrupt."""
    running: dict = {}  # sentinel -> (process, job, start time)

    def on_term(signum, frame):
        raise KeyboardInterrupt

    old_term = None
    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, on_term)
    try:
        return _pool_loop(jobs, workers, progress, running)
    except KeyboardInterrupt:
        stopped = list(running.values())
        _stop_workers([p for p, _, _, _ in stopped])
        for p, job, t0, got in stopped:  # each gets its [k/N] line, as a run stopped in-process does
            progress(reap(p, job, t0, got))
        raise
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)


def run_jobs(jobs: list[dict], workers: int, log: Log, total: int, n_done: int) -> list[dict]:
    """Run jobs, ``workers`` at a time: in this process when 1, else one spawned process per run.

    Args:
        jobs: ``{"name", "config", "threads"}`` each (see :func:`execute`).
        workers: processes at a time (1 = in this process).
        log: ``callable(str)`` for one progress line per finished run.
        total: runs in the whole sweep (for ``[k/total]``).
        n_done: runs already finished before this call.

    Returns:
        The result of each job (:func:`execute` plus ``run_dir``), in finishing order.

    Raises:
        KeyboardInterrupt: a run was interrupted, or this process got SIGINT/SIGTERM (running
            workers are stopped first).
    """
    progress = Progress(log, total, n_done)
    if workers <= 1:
        return _run_in_process(jobs, progress)
    return _run_pool(jobs, workers, progress)
