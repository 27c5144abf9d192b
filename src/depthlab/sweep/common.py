"""What the sweep backends share: planning and checking a sweep directory, the progress line.

The local process pool (:mod:`.local`), the Ray backend (:mod:`.ray`) and the driver that chooses
between them (:mod:`.run`) all plan, check and report a sweep the same way; the pieces live here,
under public names, so no backend reaches into another's private helpers. Parent side only:
nothing here trains (the job function is :func:`depthlab.sweep.local.execute`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
import warnings
from pathlib import Path
from typing import Callable, Optional, Sequence

from .. import rundir
from ..errors import DepthlabError
from ..rundir import RunDir, write_json
from ..units import counted
from ..training import runlock
from .results import FINAL_STATUSES
from .spec import (RUNS, SECTIONS, SWEEP_JSON, RunPoint, SweepSpec, expand, expand_point, run_name, spec_to_json,
                   varied_fields)

__all__ = ["Log", "cores", "check_counts", "check_sweep_dir", "check_same_sweep", "config_diff", "plan",
           "check_clearable", "clear_run_dir", "hold_sweep_dir", "placement", "resume_config", "write_plan",
           "check_corpora",
           "check_devices", "warm_token_cache",
           "Progress",
           "AUTO_MAX_SEEDS",
           "parse_seeds", "cell_key", "cell_seeds", "read_added", "add_seeds", "seeded_points"]

#: ``--seeds auto`` without ``:MAX``: at most this many seeds per cell.
AUTO_MAX_SEEDS = 8

#: Where progress lines go: ``log(line)``.
Log = Callable[[str], None]


# --------------------------------------------------------------------------- planning
def cores() -> int:
    """CPU cores this process may use (its affinity mask where the OS has one), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _comparable(cfg: dict) -> dict:
    c = json.loads(json.dumps(cfg))
    c["model"].pop("vocab_size", None)
    for k in ("path", "cache_dir"):  # the Ray backend gives its trials absolute paths
        if c.get("data", {}).get(k):
            c["data"][k] = str(Path(c["data"][k]).resolve())
    # how a run is executed, not what it computes
    for k in ("out_dir", "resume", "progress", "threads", "compile", "compile_mode"):
        c["train"].pop(k, None)
    return c


def config_diff(a: dict, b: dict) -> list[str]:
    """``section.field: <b> there, <a> now`` for each field in which run config ``a`` (requested) and
    ``b`` (a finished run's) differ in what they compute; how a run is executed (out_dir, threads, ...)
    and fields newer than ``b`` at the value ``b``'s release used do not count."""
    from ..config import PREDATING, RunConfig, built_model

    a, b = _comparable(a), _comparable(b)
    defaults = RunConfig().to_dict()
    for sec in SECTIONS:
        for k in set(a.get(sec, {})) - set(b.get(sec, {})):  # a field newer than the finished run: what it used
            b.setdefault(sec, {})[k] = PREDATING.get(sec, {}).get(k, defaults[sec].get(k))
    a["model"], b["model"] = built_model(a.get("model", {})), built_model(b.get("model", {}))  # auto as built
    out = []
    for sec in SECTIONS:
        x, y = a.get(sec, {}), b.get(sec, {})
        out += [f"{sec}.{k}: {y.get(k)!r} there, {x.get(k)!r} now" for k in sorted(set(x) | set(y))
                if x.get(k) != y.get(k)]
    return out


def plan(points: Sequence[RunPoint], sweep_dir: Path, rerun: bool = False) -> tuple[list[RunPoint], list[RunPoint]]:
    """Split runs into (already done, to do), checking finished runs still match their config.

    A run is done when its ``summary.json`` exists and does not say a signal cut its final validation (or it ended
    with a deterministic failure such as ``nonfinite``) and its ``config.json`` matches the requested config.

    Args:
        points: the sweep's runs.
        sweep_dir: the sweep directory.
        rerun: redo every run.

    Returns:
        (done, todo).

    Raises:
        DepthlabError: a finished run whose config differs from the requested one (use another
            ``--out_dir`` or ``--overwrite``).
    """
    done, todo = [], []
    for p in points:
        rd = RunDir(Path(sweep_dir) / RUNS / p.name)
        status = (rd.sweep_status or {}).get("status") if isinstance(rd.sweep_status, dict) else None
        # a signal cut its final validation: not done, the resume runs it (else the run stayed "interrupted" for good)
        cut = isinstance(rd.summary, dict) and rd.summary.get("final_validation_cut") is True
        # a worker stopped by a signal after its run wrote summary.json, before the worker wrote its result: not done
        # either, the resume finishes it (else "all runs had finished" and "1 run gave no result" for good)
        final = (rd.file(rundir.SUMMARY).exists() and not cut and status != "interrupted") or status in FINAL_STATUSES
        if final and not rerun and rd.config is not None:
            diff = config_diff(p.config, rd.config)
            if diff:
                raise DepthlabError(f"sweep run {rd.path} was made with a different config ({diff[0]}); use "
                                    "another --out_dir, or --overwrite to redo every run")
            changed = _source_changed(p.config, rd.config)
            if changed:
                raise DepthlabError(f"sweep run {rd.path} trained {changed}, so its results are not of the file as "
                                    "it is now; use another --out_dir, or --overwrite to redo every run")
            done.append(p)
        else:
            _refuse_other_config_checkpoint(rd, p.config, rerun)
            todo.append(p)
    return done, todo


def _source_changed(config: dict, saved: dict) -> Optional[str]:
    """How a finished run's model.source file differs from the one the sweep would train now: its sha256 in the
    run's config.json against the file's (the same config text with another model inside), or None when equal,
    not a model.source run, or the file or the record is missing (nothing to compare)."""
    from ..usermodel import source_drift

    source = (config.get("model") or {}).get("source")
    recorded = (saved.get("resolved") or {}).get("source_sha256") if isinstance(saved.get("resolved"), dict) else None
    drift = source_drift(source, recorded)
    if drift is None:
        return None
    path, now = drift
    return f"{source} before {path} changed (sha256 {recorded[:12]}... then, {now[:12]}... now)"


def _refuse_other_config_checkpoint(rd: RunDir, config: dict, rerun: bool) -> None:
    """Refuse (DepthlabError) to plan an unfinished run that has step checkpoints but another config than the
    sweep asks for: it would be deleted and trained again from step 0, its steps lost without a word."""
    manifest = rundir.read_json(rd.path / rundir.CHECKPOINTS / "manifest.json")
    steps = [c.get("step") for c in (manifest or {}).get("checkpoints") or [] if isinstance(c, dict)] \
        if isinstance(manifest, dict) else []
    steps = [s for s in steps if isinstance(s, int) and s > 0]
    if rerun or not steps or not isinstance(rd.config, dict):
        return
    diff = config_diff(config, rd.config)
    if diff:
        raise DepthlabError(f"sweep run {rd.path} was interrupted at step {max(steps)} with a different config "
                            f"({diff[0]}); run the sweep with the run's config to continue it, use another "
                            "--out_dir, or --overwrite to redo every run")


def _looks_like_run(d: Path) -> bool:
    return not any(d.iterdir()) or any((d / f).exists() for f in (rundir.CONFIG, rundir.SWEEP_STATUS,
                                                                  rundir.TRAIN_LOG))


def check_clearable(rd: Path) -> None:
    """Refuse (DepthlabError) to delete ``rd`` to redo it: a path that is not a depthlab run, or a run holding files
    depthlab did not write. Every run of a sweep is checked before any is deleted (:func:`clear_run_dir`)."""
    if rd.exists():
        if not rd.is_dir() or not _looks_like_run(rd):
            raise DepthlabError(f"{rd} exists and is not a depthlab run directory; refusing to delete it")
        foreign = rundir.foreign_files(rd)
        if foreign:  # a file of the user's inside the run: never deleted
            raise DepthlabError(f"{rd} holds files depthlab did not write ({', '.join(foreign[:3])}"
                                f"{', ...' if len(foreign) > 3 else ''}); move them out, then --overwrite again")


def clear_run_dir(rd: Path) -> None:
    """Delete a run directory to redo it, after :func:`check_clearable`."""
    check_clearable(rd)
    if rd.exists():
        shutil.rmtree(rd)


def resume_config(run_dir: Path, config: dict) -> Optional[dict]:
    """``config`` set to resume the unfinished run in ``run_dir`` from its latest checkpoint (as ``depthlab train
    --resume`` would), or None when there is nothing to resume: no run there, one made with another config, or one
    without an intact checkpoint before its last step (it then starts again from step 0)."""
    from ..checkpoint import latest_checkpoint

    rd = RunDir(run_dir)
    if not rd.path.is_dir() or not isinstance(rd.config, dict) or config_diff(config, rd.config):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            entry = latest_checkpoint(rd.path)
    except (DepthlabError, OSError, ValueError, KeyError, TypeError):
        return None
    last = config["train"].get("max_iters", 0)
    # a checkpoint at the last step is a finished run whose summary.json is gone (trained again), unless a signal cut
    # that step's evaluation ("evaluated": false): its resume evaluates the step and finishes the run
    cut = entry is not None and entry.get("step") == last and entry.get("evaluated") is False
    # a run that finished (summary.json) while its worker was stopped before writing its result: its resume only
    # finishes the worker's part (the result, the init probe), with the run's numbers as they are
    finished = rd.file(rundir.SUMMARY).is_file() and (rd.sweep_status or {}).get("status") == "interrupted"
    if entry is None or not (entry.get("step", 0) < last or cut or finished):
        return None
    return {**config, "train": {**config["train"], "resume": True}}


def check_sweep_dir(sweep_dir: Path) -> None:
    """Refuse an out_dir that is a file or lies under one, or inside a run or another sweep's own files, a
    non-empty folder that is not a sweep, or a sweep whose sweep.json is damaged."""
    above = next((q for q in Path(sweep_dir).parents if q.exists()), None)
    if above is not None and not above.is_dir():
        raise DepthlabError(f"--out_dir {sweep_dir} lies under {above}, which is a file; choose a folder")
    up = rundir.up_from_missing_error(sweep_dir, "--out_dir")
    if up is not None:
        raise up
    nested = rundir.nested_run_error(sweep_dir, "--out_dir")  # its runs would be runs nested in a run
    if nested is not None:
        raise nested
    if sweep_dir.exists():
        if not sweep_dir.is_dir():
            raise DepthlabError(f"--out_dir {sweep_dir} is a file; choose a folder")
        if any(sweep_dir.iterdir()) and not (sweep_dir / SWEEP_JSON).exists():
            raise DepthlabError(f"--out_dir {sweep_dir} exists and is not a sweep directory (no {SWEEP_JSON}); "
                                "choose a new --out_dir")
        if (sweep_dir / SWEEP_JSON).exists() and not isinstance(rundir.read_json(sweep_dir / SWEEP_JSON), dict):
            # its plan is what says which runs are this sweep's: without it they could not be kept apart
            raise rundir.damaged_file_error(sweep_dir / SWEEP_JSON, "restore it from a copy, or choose a new --out_dir")


def hold_sweep_dir(sweep_dir: Path) -> None:
    """Lock the sweep folder, if it exists, for this process (the run-folder lock of
    :mod:`depthlab.training.runlock`, kept until the process ends or :func:`~depthlab.training.runlock.release`):
    two sweeps in one folder would race for its runs.

    Raises:
        DepthlabError: another process holds it (naming its pid).
    """
    if Path(sweep_dir).is_dir():
        runlock.hold(Path(sweep_dir), busy=f"--out_dir {sweep_dir} is in use by another sweep (pid {{pid}}): wait for "
                                           "it to end, or choose another --out_dir")


def check_same_sweep(sweep_dir: Path, points: Sequence[RunPoint]) -> None:
    """Refuse to plan ``points`` into a sweep folder whose ``sweep.json`` lists runs that are not among them.

    Writing the new plan would drop those runs from sweep.json while their folders stay: the results,
    report and science table would no longer see them, and their stale figures would stay in plots/.

    Raises:
        DepthlabError: runs of the folder's own plan that have a run folder and are not in ``points``.
    """
    try:
        old = [r["name"] for r in (rundir.read_json(Path(sweep_dir) / SWEEP_JSON) or {}).get("runs") or []]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return
    new = {p.name for p in points}
    stray = [n for n in old if n not in new and (Path(sweep_dir) / RUNS / n).exists()]
    if stray:
        raise DepthlabError(f"--out_dir {sweep_dir} holds another sweep: it has {counted(len(stray), 'run')} not in "
                            f"this one (e.g. {stray[0]}); choose a new --out_dir, or run it with the grid it was made "
                            "with to continue it")


def placement(backend: str, workers: int, threads: int, todo: Sequence[RunPoint]) -> tuple[int, int, str]:
    """How the runs ``todo`` are placed: (runs at a time the estimate divides by, threads per run, where in words).

    ``workers``/``threads`` as :func:`depthlab.sweep.run_sweep` takes them (0 = automatic): the local pool runs
    ``workers`` processes (one per core) of cores // workers threads; on Ray each trial reserves that many CPUs
    and threads, and ``--workers`` caps the trials at a time (0: as many as the cluster's CPUs hold). A run's own
    ``train.threads`` (a grid axis, a flag) wins over the placement's, and the words say so.
    """
    n_cores = cores()
    n_workers = max(1, min(workers or n_cores, len(todo)))
    threads = threads or max(1, n_cores // n_workers)
    own = sorted({int(t) for p in todo if (t := (p.config.get("train") or {}).get("threads")) and int(t) != threads})
    mind = f" (train.threads {', '.join(map(str, own))} where a run sets it)" if own else ""
    if backend == "local":
        return n_workers, threads, f"{counted(n_workers, 'worker')} x {counted(threads, 'thread')}{mind}"
    at_once = f"at most {workers} at a time (--workers)" if workers else \
        "as many at a time as the cluster's CPUs hold (--workers caps it)"
    return n_workers, threads, (f"Ray Tune trials of {counted(threads, 'CPU')} and {counted(threads, 'thread')} "
                                f"each (--threads){mind}, {at_once}")


def check_counts(workers: int, threads: int) -> None:
    """Refuse negative ``--workers`` / ``--threads`` (DepthlabError)."""
    if workers < 0 or threads < 0:
        raise DepthlabError(f"--workers and --threads must be >= 0, got {workers} and {threads}")


def check_corpora(points: Sequence[RunPoint]) -> None:
    """Refuse a run whose ``data.path`` is missing, a folder or empty, in the line the real sweep's
    :func:`warm_token_cache` gives; reads no corpus and writes nothing (``--dry_run``)."""
    from ..config import DataConfig
    from ..data import corpus_path

    for dc in {json.dumps(p.config["data"], sort_keys=True) for p in points}:
        corpus_path(DataConfig(**json.loads(dc)))


def check_devices(points: Sequence[RunPoint], backend: str) -> None:
    """Refuse a run whose ``train.device`` this machine does not have (``cuda`` without CUDA, ``mps`` without
    MPS), as ``depthlab train`` refuses it (:func:`~depthlab.training.runtime.resolve_device`), before anything is
    written. Local backend only: a Ray cluster's nodes may have devices this machine lacks."""
    if backend != "local":
        return
    from ..training.runtime import resolve_device

    fix = ("give train.device cpu or auto in the sweep's grid, file or command line (or --backend ray on a cluster "
           "that has the device)")
    for p in points:
        try:
            resolve_device(p.config["train"]["device"], fix=fix)
        except DepthlabError as e:
            raise DepthlabError(f"run {p.name}: {e}") from None


def warm_token_cache(points: Sequence[RunPoint]) -> None:
    """Encode each corpus once here, so workers do not race to build the token cache."""
    from ..config import DataConfig
    from ..data import load_corpus

    for dc in {json.dumps(p.config["data"], sort_keys=True) for p in points}:
        load_corpus(DataConfig(**json.loads(dc)))


def write_plan(sweep_dir: Path, spec: SweepSpec, points: Sequence[RunPoint],
               added: Optional[dict[str, list[int]]] = None) -> None:
    """Write ``sweep.json``: the spec, the varied fields, every run's config and the seeds ``--seeds`` added
    (``added_seeds``: ``[{"experiment", "cell", "seeds"}]``); creates ``sweep_dir`` and locks it
    (:func:`hold_sweep_dir`).

    Raises:
        DepthlabError: ``sweep_dir`` cannot be created or written into (its folder is named with the fix)."""
    try:
        sweep_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DepthlabError(f"cannot create --out_dir {sweep_dir}: {e.strerror}; choose a writable folder") from None
    hold_sweep_dir(sweep_dir)  # a folder made just now: locked before its plan is written
    extra = [dict(zip(("experiment", "cell"), json.loads(k)), seeds=sorted(v))
             for k, v in sorted((added or {}).items())]
    try:  # atomic: an earlier sweep.json stays whole when this fails
        write_json(sweep_dir / SWEEP_JSON, {"spec": spec_to_json(spec), "varied": varied_fields(spec),
                                            "created": time.strftime("%Y-%m-%d %H:%M:%S"),
                                            "runs": [dataclasses.asdict(p) for p in points], "added_seeds": extra})
    except OSError as e:
        raise DepthlabError(f"cannot write into --out_dir {sweep_dir}: {e.strerror or e}; "
                            f"{rundir.writable_fix(sweep_dir)} or choose another folder") from None


# --------------------------------------------------------------------------- seeds (--seeds N | auto[:MAX])
def parse_seeds(text: Optional[str | int]) -> Optional[tuple[str, int]]:
    """The ``--seeds`` value: None, ``N`` -> ``("fixed", N)``, ``auto`` / ``auto:MAX`` -> ``("auto", MAX)``.

    Raises:
        DepthlabError: anything else, or a count below 1 (the message shows both forms).
    """
    if text is None or text == "":
        return None
    t = str(text).strip().lower()
    mode, _, num = t.partition(":") if t.startswith("auto") else ("fixed", "", t)
    try:
        n = AUTO_MAX_SEEDS if mode == "auto" and not num else int(num)
    except ValueError:
        n = 0
    if mode not in ("fixed", "auto") or not 1 <= n <= MAX_SEEDS:
        raise DepthlabError(f"--seeds {text!r}: give N from 1 to {MAX_SEEDS} (seeds 1..N in every cell, e.g. "
                            f"--seeds 4) or auto[:MAX] (seeds added to the cells of undecided claims, at most MAX "
                            f"per cell, default {AUTO_MAX_SEEDS}; e.g. --seeds auto:6)")
    return mode, n


#: The most seeds ``--seeds`` gives a cell: a verdict over seeds needs a few to a few dozen, and every
#: seed is a whole run per cell (``--seeds 99999999999`` once planned runs until memory ran out).
MAX_SEEDS = 1000


def cell_key(experiment: str, point: dict) -> str:
    """The cell of a run: its experiment and grid values without ``train.seed``, as JSON text."""
    return json.dumps([experiment, {k: v for k, v in sorted(point.items()) if k != "train.seed"}])


def cell_seeds(points: Sequence[RunPoint]) -> dict[str, set[int]]:
    """Cell key -> the seeds its runs use."""
    out: dict[str, set[int]] = {}
    for p in points:
        out.setdefault(cell_key(p.experiment, p.point), set()).add(int(p.config["train"]["seed"]))
    return out


def read_added(sweep_dir: Path) -> dict[str, list[int]]:
    """The seeds earlier ``--seeds`` runs added to this sweep (cell key -> seeds), from its ``sweep.json``."""
    try:
        meta = rundir.read_json(Path(sweep_dir) / SWEEP_JSON)
        return {cell_key(a["experiment"], a["cell"]): [int(s) for s in a["seeds"]]
                for a in (meta or {}).get("added_seeds") or []}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def add_seeds(added: dict[str, list[int]], have: dict[str, set[int]], want: dict[str, int]) -> dict[str, list[int]]:
    """``added`` plus the smallest unused positive seeds that bring each cell of ``want`` to its count.

    Args:
        added: cell key -> seeds added so far.
        have: cell key -> seeds the cell has now (grid and added).
        want: cell key -> seeds it should have.

    Returns:
        A new mapping (the old seeds kept).
    """
    out = {k: list(v) for k, v in added.items()}
    for key, n in want.items():
        used, s = set(have.get(key, set())), 1
        while len(used) < n:
            if s not in used:
                used.add(s)
                out.setdefault(key, []).append(s)
            s += 1
    return out


def seeded_points(spec: SweepSpec, sweep_dir: Path, added: dict[str, list[int]],
                  fixed: Optional[int] = None, checked: Optional[set] = None,
                  log: Optional[Log] = None) -> tuple[list[RunPoint], dict[str, list[int]]]:
    """The sweep's runs: its grid (:func:`depthlab.sweep.spec.expand`) plus the seeds added to its cells.

    Args:
        spec: the sweep.
        sweep_dir: the sweep directory.
        added: cell key -> seeds added earlier (a cell no longer in the grid is dropped).
        fixed: ``--seeds N``: every cell gets seeds 1..N too.
        checked: the model.source files imported and found good so far (one set for a whole sweep command, so each
            is imported once; added to; None: a set of this call's own).
        log: told before a model.source file is imported (:func:`depthlab.sweep.spec.expand_point`).

    Returns:
        (runs, added seeds); the grid's own runs keep their names (:func:`depthlab.sweep.spec.run_name`).
    """
    checked = set() if checked is None else checked
    base = expand(spec, sweep_dir, checked, log)
    have = cell_seeds(base)
    if fixed:
        now = {k: v | set(added.get(k, ())) for k, v in have.items()}
        added = add_seeds(added, now, {k: len(v | set(range(1, fixed + 1))) for k, v in now.items()})
    exps, names = {e.name: e for e in spec.experiments}, {p.name for p in base}
    points, kept = list(base), {}
    for key, seeds in sorted(added.items()):
        if key not in have:  # the cell is not in this grid any more
            continue
        exp_name, cell = json.loads(key)
        kept[key] = sorted(set(seeds))
        for s in kept[key]:
            point = {**{k: cell[k] for k in exps[exp_name].grid if k in cell}, "train.seed": s}
            name = run_name(exps[exp_name], point)
            if name not in names:
                names.add(name)
                points.append(expand_point(spec, exps[exp_name], name, point, sweep_dir, checked, log))
    return points, kept


# --------------------------------------------------------------------------- progress
def clip_message(message: str, limit: int = 120) -> str:
    """``message`` cut to about ``limit`` characters at a word boundary, ending "…" with every parenthesis it opened
    closed (a cut once left "(... (every gradient is finite; loss" open, or ended mid-word); whole when short."""
    if len(message) <= limit:
        return message
    cut = message[:limit]
    cut = cut[:cut.rfind(" ")] if " " in cut else cut
    cut = cut.rstrip(" ,;:(")
    return f"{cut} …" + ")" * max(0, cut.count("(") - cut.count(")"))


# --------------------------------------------------------------------------- progress
class Progress:
    """Prints ``[k/total] name: status best val ... in s`` after each finished run."""

    def __init__(self, log: Log, total: int, n_done: int):
        self.log, self.total, self.count = log, total, n_done

    def __call__(self, res: dict) -> None:
        self.count += 1
        extra, own = "", ""
        s = RunDir(res["run_dir"]).summary
        if isinstance(s, dict):
            try:
                extra = f" best val {s['best_val_loss']:.4f} nats"
            except (KeyError, TypeError, ValueError):
                pass
            if isinstance(s.get("wall_time_s"), (int, float)):  # the two clocks differ by start-up and imports
                own = f" (the run's own clock {s['wall_time_s']:.1f}s: results.csv's wall_time_s)"
        msg = f" ({clip_message(res['message'])})" if res["status"] != "ok" and res.get("message") else ""
        self.log(f"[{self.count}/{self.total}] {res['name']}: {res['status']}{extra} in {res['wall_s']:.1f}s{own}"
                 f"{msg}")
