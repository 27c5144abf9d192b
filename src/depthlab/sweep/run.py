"""Running a sweep: pick the backend (the local process pool or Ray Tune), plan, run, write results.

Both backends run the same job function and write the same run directories; this module is the
one place that chooses between them, so neither backend imports the other.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional

from ..units import counted
from ..errors import DepthlabError, no_space
from ..training import runlock
from . import local
from .common import (Log, add_seeds, cell_seeds, check_counts, check_devices, check_same_sweep, check_sweep_dir,
                     check_clearable, clear_run_dir, clip_message, hold_sweep_dir, placement, resume_config,
                     parse_seeds, plan, read_added, seeded_points, warm_token_cache, write_plan)
from .ray import ray_runner
from .results import OK_STATUSES, read_results, write_results
from .seeds import check_auto_seeds, seeds_wanted
from .spec import RESULTS_CSV, RESULTS_MD, RUNS, SweepSpec, estimate_seconds, varied_fields

#: A backend's way of running jobs: ``runner(jobs, workers, log, total, n_done) -> results`` (see :func:`run_jobs`).
Runner = Callable[[list, int, Log, int, int], list]


def refuse_ray_options(backend: str, ray_address: Optional[str], ray_scheduler: str) -> None:
    """Refuse Ray's options on the local backend, naming those given (``--dry_run`` checks it too).

    Raises:
        DepthlabError: ``--ray_address`` or a ``--ray_scheduler`` other than fifo without ``--backend ray``.
    """
    given = [f for f, on in (("--ray_address", bool(ray_address)), ("--ray_scheduler", ray_scheduler != "fifo")) if on]
    if backend == "local" and given:
        raise DepthlabError(f"{' and '.join(given)} need{'s' if len(given) == 1 else ''} --backend ray")


def _runner(backend: str, sweep_dir: Path, workers: int, ray_address: Optional[str], ray_scheduler: str) -> Runner:
    """The job runner of ``backend``; for Ray, checks that Ray is installed before anything is written."""
    refuse_ray_options(backend, ray_address, ray_scheduler)
    if backend == "local":
        return local.run_jobs
    if backend == "ray":
        return ray_runner(sweep_dir, address=ray_address, workers=workers, scheduler=ray_scheduler)
    raise DepthlabError(f"--backend must be local or ray, got {backend!r}")


def run_sweep(spec: SweepSpec, out_dir: str | Path, workers: int = 0, threads: int = 0, rerun: bool = False,
              log: Optional[Log] = print, backend: str = "local", ray_address: Optional[str] = None,
              ray_scheduler: str = "fifo", seeds: Optional[str | int] = None) -> Path:
    """Run every point of ``spec`` (skipping finished ones) and write results.csv / results.md.

    No report is built here (``depthlab.report.sweep.build_sweep_report`` does that afterwards).

    Args:
        spec: the sweep.
        out_dir: the sweep directory (created; an existing sweep there is continued).
        workers: worker processes (Ray: trials at a time); 0 = one per core (Ray: as many as the
            cluster's CPUs hold). 1 runs in this process (local backend).
        threads: torch threads per run (Ray: also the CPUs each trial reserves); 0 = cores of this
            machine // workers (at least 1).
        rerun: delete and redo every run, finished or not.
        log: ``callable(str)`` for the one-line-per-run progress (None = silent).
        backend: ``local`` (this machine's process pool) or ``ray`` (one Ray Tune trial per run,
            :mod:`depthlab.sweep.ray`).
        ray_address: Ray backend: ``auto``, ``HOST:PORT`` of a running cluster, or None to start
            a one-machine Ray on 127.0.0.1 for this sweep.
        ray_scheduler: Ray backend: ``fifo`` (every run to the end) or ``asha`` (early stopping).
        seeds: ``--seeds``: ``N`` runs seeds 1..N in every cell (the grid's other seeds stay);
            ``auto[:MAX]`` then judges the science claims (:func:`depthlab.sweep.seeds.seeds_wanted`)
            and adds seeds to the cells of undecided ones, round after round, until every claim is
            decided or its cells have MAX seeds (default 8). Seeds added earlier stay in the sweep.

    Returns:
        The sweep directory.

    Raises:
        DepthlabError: a bad grid, config or ``seeds`` (before any run starts), negative workers/threads,
            an ``out_dir`` that is a file or a non-sweep folder, or a finished run whose config differs;
            Ray missing (naming the extra), unreachable, or a sweep directory its nodes cannot write.
        KeyboardInterrupt: the sweep was interrupted (running workers were stopped; run the same
            command again to finish it). results.csv is written first.
    """
    log = log or (lambda s: None)
    check_counts(workers, threads)
    mode = parse_seeds(seeds)
    if mode and mode[0] == "auto":
        check_auto_seeds(spec)
    sweep_dir = Path(out_dir)
    runner = _runner(backend, sweep_dir, workers, ray_address, ray_scheduler)
    check_sweep_dir(sweep_dir)
    had = runlock.is_held(sweep_dir)
    hold_sweep_dir(sweep_dir)  # before anything is read or written: one sweep in a folder at a time
    try:
        return _run_locked(spec, sweep_dir, (workers, threads), rerun, log, backend, runner, mode)
    finally:
        if not had:
            runlock.release(sweep_dir)


def _run_locked(spec: SweepSpec, sweep_dir: Path, counts: tuple[int, int], rerun: bool, log: Log, backend: str,
                runner: Runner, mode: Optional[tuple[str, int]]) -> Path:
    """:func:`run_sweep` once the sweep folder is locked (or made and locked as sweep.json is written)."""
    checked: set = set()  # the model.source files imported (and told) once for every round
    points, added = seeded_points(spec, sweep_dir, read_added(sweep_dir), mode[1] if mode and mode[0] == "fixed"
                                  else None, checked, log)
    check_same_sweep(sweep_dir, points)
    t0, results = time.time(), []
    while True:
        ran, written = _run_round(spec, sweep_dir, points, added, runner, backend, counts, rerun, log)
        results += ran
        rerun = False  # a later round only adds runs
        if not mode or mode[0] != "auto":
            break
        want = seeds_wanted(sweep_dir, mode[1])
        more = add_seeds(added, cell_seeds(points), want)
        if more == added:
            # "or more": cells an earlier --seeds N grew past this cap keep their seeds
            log(f"--seeds auto: nothing to add: every claim is decided, or its undecided comparisons' cells have "
                f"{mode[1]} seeds or more (--seeds auto:{mode[1]} adds none past {mode[1]}; raise it for more)")
            break
        grown = [k for k in more if len(more[k]) != len(added.get(k, []))]
        log(f"--seeds auto: undecided claims: adding seeds to {counted(len(grown), 'cell')} (up to "
            f"{max(want[k] for k in grown)} seeds per cell)")
        points, added = seeded_points(spec, sweep_dir, more, checked=checked, log=log)
    # results.csv named only where it was written (else the warning above says why not)
    to = f"-> {sweep_dir / RESULTS_CSV}" if written else f"(in {sweep_dir / RUNS}; {RESULTS_CSV} was not written)"
    if results:
        log(f"sweep finished in {time.time() - t0:.1f}s: {_finished_counts(sweep_dir, results, len(points))} {to}")
    else:
        log(f"nothing to run: {'all ' if len(points) > 1 else ''}{counted(len(points), 'run')} had finished {to}")
    return sweep_dir


def _finished_counts(sweep_dir: Path, results: list, n_points: int) -> str:
    """``N ok, M not ok`` of this session's runs; when some runs had finished before (skipped), what this session
    did and what the whole sweep (results.csv) holds, apart: a re-run once said "0 ok, 1 not ok" of a sweep whose
    results.csv held an ok run beside the failed one it retried."""
    failed = sum(r["status"] not in OK_STATUSES for r in results)
    skipped = n_points - len(results)
    if skipped <= 0:
        return f"{len(results) - failed} ok, {failed} not ok"
    try:
        rows, _ = read_results(sweep_dir / RESULTS_CSV)
    except OSError:
        rows = []
    ok = sum(r.get("status") in OK_STATUSES for r in rows)
    return (f"this session: {len(results)} ran ({len(results) - failed} ok, {failed} not ok), {skipped} skipped "
            f"(finished before); the sweep: {ok} ok, {len(rows) - ok} not ok")


def _say_schedule_warnings(todo: list, log: Log) -> None:
    """The schedule warnings of the runs about to train (:func:`~depthlab.config.schedule_warnings`), each once on
    the sweep's console with how many runs it concerns: each run's train.log holds it, which a sweep's user does
    not read before the runs end (a warmup longer than every run was said nowhere else)."""
    from ..config import RunConfig, schedule_warnings

    counts: dict[str, int] = {}
    for p in todo:
        for w in schedule_warnings(RunConfig.from_dict(p.config).train):
            counts[w] = counts.get(w, 0) + 1
    for w, n in counts.items():
        log(f"warning: {n} of the {counted(len(todo), 'run')} to train: {w}")


def _run_round(spec: SweepSpec, sweep_dir: Path, points: list, added: dict, runner: Runner, backend: str,
               counts: tuple[int, int], rerun: bool, log: Log) -> tuple[list, bool]:
    """Plan ``points``, write sweep.json, run what is not finished, write results.csv; the new results, and whether
    results.csv was written (a warning line says why not).

    ``counts`` is (workers, threads) as :func:`run_sweep` takes them (0 = automatic).
    """
    workers, threads = counts
    done, todo = plan(points, sweep_dir, rerun=rerun)
    check_devices(todo, backend)  # a run this machine cannot place is refused before anything is written
    # an interrupted run continues from its checkpoint; any other unfinished one starts again, its folder deleted
    # once every such folder is known to be depthlab's alone: a refusal loses nothing
    resumed_configs = {p.name: None if rerun else resume_config(sweep_dir / RUNS / p.name, p.config) for p in todo}
    for p in todo:
        if resumed_configs[p.name] is None:
            check_clearable(sweep_dir / RUNS / p.name)
    warm_token_cache(points)  # first: a corpus that is missing is refused before sweep.json makes the folder
    write_plan(sweep_dir, spec, points, added)  # a folder it cannot write is refused here, before any warning
    _say_schedule_warnings(todo, log)  # after the refusals: a refused sweep says its one line alone
    n_workers, threads, where = placement(backend, workers, threads, todo)
    todo.sort(key=lambda p: -estimate_seconds(p.config))  # longest first: shortest makespan
    est = local.sweep_seconds([estimate_seconds(p.config) for p in todo], n_workers, backend)
    jobs, varied = [], varied_fields(spec)
    for p in todo:
        config = resumed_configs[p.name]
        if config is None:
            clear_run_dir(sweep_dir / RUNS / p.name)
        jobs.append({"name": p.name, "config": config or p.config, "threads": threads, "hparams": varied})
    resumed = sum(bool(j["config"]["train"].get("resume")) for j in jobs)
    log(f"sweep {sweep_dir}: {counted(len(points), 'run')}, {len(done)} already finished, {len(todo)} to run"
        f"{f' ({resumed} of them resume from a checkpoint)' if resumed else ''} on {where} "
        f"(rough estimate {est / 60:.1f} min)")
    results, written = [], False
    try:
        results = runner(jobs, n_workers, log, len(points), len(done)) if jobs else []
    finally:
        try:
            write_results(sweep_dir)
            written = True
        except OSError as e:  # e.g. a full disk: the file and the reason (results.csv is made from the run folders)
            again = (f" and run the same command again{' without --overwrite' if rerun else ''} to write them (it "
                     "skips the finished runs)" if no_space(e) else "")
            log(f"warning: could not write the sweep's results ({RESULTS_CSV}, results.md): "
                f"{local.write_failure(e, sweep_dir)}{again}")
        except Exception as e:  # noqa: BLE001 - never hide the original error
            log(f"warning: could not write results: {type(e).__name__}: {e}")
        _whole_messages(results, sweep_dir, written, log)
    return results, written


def _whole_messages(results: list[dict], sweep_dir: Path, written: bool, log: Log) -> None:
    """Where the whole message of each run whose progress line cut it short (:func:`clip_message`) is: results.md,
    or, when that could not be written, printed here in full."""
    cut = [r for r in results if r.get("message") and clip_message(r["message"]) != r["message"]]
    if cut and written:
        log(f"the whole message of the {counted(len(cut), 'run')} cut short above: {sweep_dir / RESULTS_MD}")
    elif cut:
        for r in cut:
            log(f"{r['name']}: {r['message']}")
