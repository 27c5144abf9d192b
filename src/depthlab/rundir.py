"""The run directory: the one module that knows its file names, reads it and writes it.

A run directory (``depthlab train --train.out_dir DIR``) holds::

    config.json        every resolved config field (sections data / model / train)
    vocab.json         the vocabulary (list of strings, id = position): characters, or for BPE each
                       token decoded alone
    tokenizer.json     BPE runs only: the trained Hugging Face ``tokenizers`` tokenizer (sha256 in the checkpoints)
    metrics.jsonl      one JSON object per line, each with ``step`` and ``kind``:
                         eval   step, train_loss, val_loss (nats/token), val_bpc, val_ppl, tokens_seen, elapsed_s
                         train  step, loss (nats/token), lr, grad_norm, tokens_per_sec
                         grad   per-block / per-component gradient statistics (analytics.gradients)
                         probe  activation statistics (analytics.activations)
                         event  nonfinite / nonfinite_skip and other one-off happenings
                         sample step, text: a short sample from the model during training
    summary.json       written at the end: best_val_loss, final_step, wall_time_s, tokens_seen, ...
    baselines.json     corpus baselines (uniform, unigram, bigram) in nats and bits/char
    diagnosis.json     findings of analytics.diagnose
    checkpoints/       weights (safetensors) + resume state, see :mod:`depthlab.checkpoint`
    source/            runs of a model the user wrote (``model.source``): a copy of its file, which
                       sample, report and --resume build the model from (sha256 in config.json)
    tb/                TensorBoard event files
    plots/, report.html                  written by ``depthlab report``
    train.log, init_probe.json, sweep_status.json   written by a sweep for each of its runs

Every writer goes through :func:`atomic_write` (temp file, fsync, rename), so a crash leaves the
old file or the new one, never half of one. Records written before ``kind`` existed are given
one when read (:func:`record_kind`), so older run directories load unchanged.
"""

from __future__ import annotations

import atexit
import base64
import glob
import io
import json
import math
import os
import re
import shlex
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Optional

from .errors import DepthlabError
from .units import counted, finite_or_none  # noqa: F401 (finite_or_none re-exported for readers of records)

CONFIG = "config.json"
VOCAB = "vocab.json"
TOKENIZER = "tokenizer.json"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
BASELINES = "baselines.json"
DIAGNOSIS = "diagnosis.json"
CHECKPOINTS = "checkpoints"
TENSORBOARD = "tb"
PLOTS = "plots"
REPORT = "report.html"
TRAIN_LOG = "train.log"
INIT_PROBE = "init_probe.json"
SWEEP_STATUS = "sweep_status.json"
#: A sweep folder's own file and the folder of its runs (each an ordinary run directory): here, below the sweep
#: package, so the readers of runs (the lock, --init-from, the not-a-run line) know a sweep folder too.
SWEEP_JSON = "sweep.json"
SWEEP_RUNS = "runs"
SOURCE = "source"
#: The file beside a run's copy of a model.source file (in SOURCE) that names the folder of the original.
ORIGIN = "ORIGIN"
LOCK = ".lock"  # held by the process training the run (training/runlock.py)

#: Everything a run directory may hold; ``--overwrite`` deletes a folder only if it holds nothing else.
RUN_ARTIFACTS = frozenset({CONFIG, VOCAB, TOKENIZER, METRICS, SUMMARY, BASELINES, DIAGNOSIS, CHECKPOINTS, TENSORBOARD,
                           PLOTS, REPORT, TRAIN_LOG, INIT_PROBE, SWEEP_STATUS, SOURCE, LOCK})

#: The values of a metrics record's ``kind``.
KINDS = ("eval", "train", "grad", "probe", "event", "sample")


# ------------------------------------------------------------------------- atomic writes
def _umask() -> int:
    """The process umask, read without changing it where the OS tells it (Linux >= 4.7).

    ``os.umask`` can only be read by setting it; for that instant a file another thread creates
    (TensorBoard's writer, a data loader) would get mode 0666, so the set-and-restore is the fallback.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: 0666 without the umask's bits."""
    return 0o666 & ~_umask()


def dir_mode() -> int:
    """The mode ``Path.mkdir`` gives a new folder: 0777 without the umask's bits."""
    return 0o777 & ~_umask()


def _chmod_fd(fd: int, mode: int) -> None:
    fchmod = getattr(os, "fchmod", None)  # absent on Windows before Python 3.13
    if fchmod is not None:
        fchmod(fd, mode)


def make_temp_dir(parent: Path, prefix: str) -> Path:
    """A new folder in ``parent`` (which must exist) for a write that is renamed into place when done.

    ``tempfile.mkdtemp`` makes it 0700; it gets :func:`dir_mode`, so the renamed folder has the mode
    of every other folder depthlab makes.
    """
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    os.chmod(tmp, dir_mode())
    return tmp


def normalise_modes(folder: Path) -> None:
    """Give every plain file directly in ``folder`` :func:`file_mode` (a library wrote some 0600)."""
    mode = file_mode()
    for p in Path(folder).iterdir():
        if p.is_file() and not p.is_symlink():
            os.chmod(p, mode)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder, fsync, rename (POSIX-atomic).

    The file gets the mode ``open(path, "w")`` would give it: an existing file's own mode, else
    :func:`file_mode` (``mkstemp`` alone makes 0600).

    Raises:
        DepthlabError: ``path`` is a symbolic link (the rename would replace the link, which
            depthlab did not make; writing through it would change a file elsewhere).
        OSError: the folder is missing or not writable (the temp file is removed).
    """
    path = Path(path)
    if path.is_symlink():
        raise DepthlabError(f"{path} is a symbolic link (to {os.readlink(path)}); depthlab writes only files it "
                            "made: remove the link or give another path")
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = file_mode()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # see _own_temp
    try:
        _chmod_fd(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError) and e.filename in (None, tmp):  # a failed write() names no file, a rename the
            e.filename = str(path)  # temporary one: the file it was for
        raise
    try:  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


#: The files depthlab writes by :func:`atomic_write` into a run folder, and into its checkpoints/ (a regex).
_ATOMIC_NAMES = {"": "|".join(re.escape(n) for n in sorted({CONFIG, VOCAB, TOKENIZER, METRICS, SUMMARY, BASELINES,
                                                              DIAGNOSIS, REPORT, TRAIN_LOG, INIT_PROBE, SWEEP_STATUS})),
                 CHECKPOINTS: r"manifest\.json|best(-step-\d+)?\.safetensors|step-\d+\.(safetensors|state\.pt)"}


def _own_temp(folder: str) -> re.Pattern:
    """The exact name :func:`atomic_write` gives the temporary file of a depthlab file in ``folder`` ("" for the run
    folder, or checkpoints): ``.NAME.XXXXXXXX.tmp``, XXXXXXXX being ``mkstemp``'s 8 characters of [a-z0-9_]."""
    return re.compile(rf"\.({_ATOMIC_NAMES[folder]})\.[a-z0-9_]{{8}}\.tmp")


def stale_temp_files(run_dir: Path, before: float) -> list[Path]:
    """Temporary files of the :func:`atomic_write` calls cut off mid-way (a kill, a full disk) in ``run_dir`` and its
    checkpoints/: plain files (not links) named exactly as depthlab names the temporary file of one of its own files
    there, last modified before ``before`` (seconds since the epoch: a write still under way is newer), sorted.
    Any other name is not depthlab's and is never listed."""
    out = []
    for folder in _ATOMIC_NAMES:
        where, own = Path(run_dir) / folder, _own_temp(folder)
        if where.is_dir() and not where.is_symlink():
            out += sorted(p for p in where.iterdir() if own.fullmatch(p.name) and p.is_file() and not p.is_symlink()
                          and p.lstat().st_mtime < before)
    return out


def write_json(path: Path, obj: Any) -> None:
    """:func:`atomic_write` of ``obj`` as indented UTF-8 JSON (non-ASCII kept readable)."""
    atomic_write(Path(path), json.dumps(obj, indent=2, ensure_ascii=False).encode("utf-8"))


#: sha256 of each file a sweep folder's results are rewritten into (results.csv, results.md, aggregates.csv,
#: science.md, report.html) as depthlab last wrote it: one whose bytes differ was edited by hand
#: (:func:`write_generated`).
WRITTEN = ".depthlab-written.json"


def write_generated(path: Path, data: bytes) -> Optional[Path]:
    """:func:`atomic_write` of a file depthlab rewrites from its runs whenever asked (a sweep's results.csv, ...). A
    file there whose bytes are neither what depthlab last wrote there (:data:`WRITTEN`) nor ``data`` was edited by
    hand: it is first renamed ``NAME.edited-YYYYmmdd-HHMMSS.SUFFIX`` beside it, said in a warning, and that path is
    returned (else None). A file of no record (a folder of an older depthlab) is rewritten as before.

    Raises:
        OSError: the folder is not writable.
    """
    import hashlib
    import warnings

    path = Path(path)
    record = read_json(path.parent / WRITTEN)
    record = record if isinstance(record, dict) else {}
    new, kept = hashlib.sha256(data).hexdigest(), None
    if path.is_file() and not path.is_symlink() and path.name in record:
        old = hashlib.sha256(path.read_bytes()).hexdigest()
        if old not in (record[path.name], new):
            kept = path.with_name(f"{path.stem}.edited-{time.strftime('%Y%m%d-%H%M%S')}{path.suffix}")
            os.replace(path, kept)
            warnings.warn(f"{path} was edited since depthlab wrote it: your version is kept as {kept.name} beside "
                          "it, and the file is written anew from the runs", stacklevel=2)
    atomic_write(path, data)
    write_json(path.parent / WRITTEN, {**record, path.name: new})
    return kept


def read_json(path: Path) -> Optional[Any]:
    """The JSON in ``path``, or None when the file is missing or not valid JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------- metrics records
def _clean(v: Any) -> Any:
    """``v`` with every non-finite float, at any depth, written as its string ("nan", "inf")."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # JSON has no NaN/inf; keep them readable instead of invalid
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]  # per-block lists of probe/grad records
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    return v


def json_values(v: Any) -> Any:
    """``v`` with every non-finite float written as its string ("nan", "inf", "-inf"), as metrics.jsonl keeps them:
    valid JSON for any reader (:func:`~depthlab.units.finite_or_none` reads them back as None)."""
    return _clean(v)


def record_kind(r: dict) -> str:
    """The ``kind`` of a metrics record; inferred for records written before ``kind`` existed."""
    k = r.get("kind")
    if isinstance(k, str):
        return k
    if "val_loss" in r:
        return "eval"
    if "nonfinite" in r or "nonfinite_skip" in r:
        return "event"
    if any(str(key).startswith("grad_") and key != "grad_norm" for key in r):
        return "grad"
    return "train"


def read_metrics(run_dir: Path, kind: Optional[str] = None) -> list[dict]:
    """Parseable records of ``run_dir/metrics.jsonl`` (a torn last line is skipped), each with ``kind``.

    Args:
        run_dir: the run directory.
        kind: keep only records of this kind (one of :data:`KINDS`); None = all.

    Raises:
        DepthlabError: ``metrics.jsonl`` is there but is not a file (a folder).
    """
    out = []
    p = Path(run_dir) / METRICS
    if not p.exists():
        return out
    if not p.is_file():
        raise not_a_file_error(p)
    # undecodable bytes (a damaged file) become lines that do not parse: skipped, and counted as damage
    for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
        r = _record(line)
        if r is None:
            continue
        r.setdefault("kind", record_kind(r))
        if kind is None or r["kind"] == kind:
            out.append(r)
    return out


def _record(line: str) -> Optional[dict]:
    """One line of ``metrics.jsonl`` as a record: a JSON object whose ``step``, when it has one, is an integer
    >= 0 (every reader orders and cuts records by it); None for a blank or damaged line."""
    line = line.strip()
    if not line:
        return None
    try:
        r = json.loads(line)
    except ValueError:
        return None
    if not isinstance(r, dict):
        return None
    step = r.get("step", 0)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return None  # "abc", 1e400 (inf), 2.5: written by hand or damaged, not by depthlab
    return r


def damaged_file_error(path: Path, fix: str = "restore it from a copy or train the run again") -> DepthlabError:
    """The error for a depthlab file that exists but is not the JSON object depthlab wrote: names it and ``fix``."""
    return DepthlabError(f"{path} is not the JSON object depthlab wrote (damaged or edited by hand); {fix}")


def damaged_config_error(path: Path) -> DepthlabError:
    """:func:`damaged_file_error` for a config.json, naming the section when the JSON is whole but a section
    is not an object (``"model": null``): the fix is then an edit, not a new run."""
    v = read_json(path)
    bad = _config_section_faults(v) if isinstance(v, dict) else []
    if not bad:
        return damaged_file_error(path)
    # only "model" is a fault when absent: an absent key is said as such, not as the null that .get gives
    what = ", ".join(f'"{k}": {json.dumps(v[k])[:40]}' for k in bad if k in v)
    clauses = [f"{what} is not the object depthlab wrote there"] if what else []
    clauses += [f'it has no "{k}" section, which depthlab wrote there' for k in bad if k not in v]
    return DepthlabError(f"{path}: {'; '.join(clauses)} (edited by hand?); put back the "
                         "section as depthlab wrote it, or restore config.json from a copy")


def is_sweep_dir(path: Path) -> bool:
    """Whether ``path`` is a sweep folder (it holds :data:`SWEEP_JSON`)."""
    return (Path(path) / SWEEP_JSON).is_file()


def sweep_of(run_dir: Path) -> Optional[Path]:
    """The sweep folder ``run_dir`` is a run of (``SWEEP/runs/NAME``, or ``SWEEP/runs/EXPERIMENT/NAME`` for a named
    experiment, beside ``SWEEP/sweep.json``), or None."""
    run_dir = Path(run_dir)
    for above in run_dir.parents:
        if above.name == SWEEP_RUNS and is_sweep_dir(above.parent):
            return above.parent
    return None


def sweep_runs(sweep_dir: Path) -> list[Path]:
    """The run folders a sweep has started (each with its config.json), sorted, at any depth under ``SWEEP/runs``."""
    runs = Path(sweep_dir) / SWEEP_RUNS
    return sorted(p.parent for p in runs.rglob(CONFIG)) if runs.is_dir() else []


def _is_depthlab_run(path: Path) -> bool:
    """Whether ``path`` is surely a depthlab run folder (stricter than :func:`is_run_dir`): its ``config.json``
    beside a ``metrics.jsonl``, or a config.json with depthlab's ``model`` and ``train`` sections (a run that
    failed before its first metric). Another tool's folder with a config.json of its own (a Hugging Face
    model, say) is not one."""
    path = Path(path)
    if not (path / CONFIG).is_file():
        return False
    if (path / METRICS).is_file():
        return True
    cfg = read_json(path / CONFIG)
    return isinstance(cfg, dict) and isinstance(cfg.get("model"), dict) and isinstance(cfg.get("train"), dict)


def _enclosing(path: Path) -> Optional[tuple[str, Path]]:
    """The nearest folder above ``path`` a run may not lie in: ``("run", RUN)`` for a depthlab run, ``("sweep",
    SWEEP)`` for a sweep folder when ``path`` is not one of its runs (``SWEEP/runs/NAME`` or
    ``SWEEP/runs/EXPERIMENT/NAME``), shown as the user wrote it when they wrote it; None when under neither."""
    given = Path(path)
    target = given.absolute()
    shown = {p.absolute(): p for p in given.parents if p != Path(".")}
    for above in target.parents:
        if _is_depthlab_run(above):
            return "run", shown.get(above, above)
        rel = target.relative_to(above).parts  # a sweep's runs: runs/NAME, or runs/EXPERIMENT/NAME
        if is_sweep_dir(above) and not (len(rel) >= 2 and rel[0] == SWEEP_RUNS):
            return "sweep", shown.get(above, above)
    return None


def _inside_words(kind: str, name: Path) -> str:
    """Why a run may not lie in ``name`` (:func:`_enclosing`'s kind and folder), for the refusals below."""
    if kind == "run":
        return (f"the depthlab run {name}; a run nested in a run mixes their files (and --overwrite of {name} would "
                "then refuse)")
    return f"the sweep folder {name}, but not as one of its runs ({name / SWEEP_RUNS}/NAME)"


def up_from_missing_error(path: Path, option: str) -> Optional[DepthlabError]:
    """The refusal of a folder path that goes up (``..``) out of a folder that does not exist (``runs/new/..``);
    None otherwise. Such a path names the folder above (``runs``), but it does not exist as written, so the checks
    of what the folder holds would pass it as new, and making it would create the missing folder and then write into
    the one above, among whatever it holds."""
    p = Path(path)
    for i, part in enumerate(p.parts):
        if part == ".." and i and not Path(*p.parts[:i]).exists():
            what = Path(*p.parts[:i])
            return DepthlabError(f"{option} {path} goes up (..) out of {what}, which does not exist; give the folder "
                                 f"you mean without the .. ({os.path.normpath(path)})")
    return None


def nested_run_error(path: Path, option: str) -> Optional[DepthlabError]:
    """The refusal of a new run or sweep folder ``path`` inside an existing run folder, or inside a sweep folder
    anywhere but as one of its runs (``SWEEP/runs/NAME``); None when ``path`` is under neither.

    A run nested in a run mixes their files, and ``--overwrite`` of the outer run then refuses (the inner one is a
    file it did not write). The nearest enclosing folder is named, as the user wrote it when they wrote it. When
    ``path`` is itself a run (copied there), that is said with what works: neither --resume nor --overwrite may
    continue it there (:func:`nested_resume_error`), so it must move out first.

    Args:
        path: the new folder (it may not exist yet). option: the flag that gave it, e.g. ``--train.out_dir``.
    """
    found = _enclosing(path)
    if found is None:
        return None
    kind, name = found
    also = (f"; {path} is itself a depthlab run, which cannot be resumed or replaced inside {name}: move it out of "
            f"{name}, then --resume it there" if _is_depthlab_run(Path(path)) else "")
    return DepthlabError(f"{option.lstrip('-')} {path} lies inside {_inside_words(kind, name)}: choose another "
                         f"{option}, outside {name}{also}")


def nested_resume_error(run_dir: Path) -> Optional[DepthlabError]:
    """The refusal of a resume of ``run_dir`` when it lies inside another run or a sweep's own files (copied or
    moved there): resuming would keep writing a run nested in a run, which a new run there is refused
    (:func:`nested_run_error`). A sweep's own runs (``SWEEP/runs/NAME``) are not nested. None when it may resume.
    """
    found = _enclosing(run_dir)
    if found is None:
        return None
    kind, name = found
    if kind == "run" and not _is_depthlab_run(Path(run_dir)):  # a file or folder of the run: the run was meant
        return DepthlabError(f"cannot resume {run_dir}: it is no run but a part of the depthlab run {name}; to "
                             f"resume that run give its folder: --resume {name}")
    return DepthlabError(f"cannot resume {run_dir}: it lies inside {_inside_words(kind, name)}; move {run_dir} out "
                         f"of {name}, then resume it there (--resume NEW_PLACE)")


def part_of_words(path: Path) -> Optional[str]:
    """``X is not a depthlab run directory but a part of the run RUN; give the run's folder, RUN`` when ``path`` lies
    inside a run (``RUN/checkpoints``, ``RUN/plots``), or the same of a sweep folder; None otherwise."""
    found = _enclosing(path)
    if found is None:
        return None
    kind, where = found
    what = "the run" if kind == "run" else "the sweep folder"
    return f"{path} is not a depthlab run directory but a part of {what} {where}; give the {kind}'s folder, {where}"


def not_a_run_error(path: Path, missing: Iterable[str] = (CONFIG, METRICS)) -> DepthlabError:
    """The one error for a folder that is not a run: it lacks all of ``missing``. A sweep folder (``sweep.json``,
    its runs in ``runs/NAME/``) is named as one, with a run of it to give instead.

    Returns:
        e.g. ``SW is a sweep folder: give one of its runs, e.g. SW/runs/n_layer-1 (2 runs)``, or ``X is not a
        depthlab run directory (no config.json or metrics.jsonl); give the out_dir of a depthlab train run``.
    """
    from .units import counted

    if is_sweep_dir(path):
        runs = sweep_runs(path)
        if runs:
            return DepthlabError(f"{path} is a sweep folder: give one of its runs, e.g. {runs[0]} "
                                 f"({counted(len(runs), 'run')})")
        return DepthlabError(f"{path} is a sweep folder none of whose runs has started ({path / SWEEP_RUNS} holds no "
                             "run); run the sweep first, or give the out_dir of a depthlab train run")
    aside = set_aside_run(path)
    if aside is not None:  # a --overwrite killed (SIGKILL, power) before its new run started: the old run is there
        return DepthlabError(f"{path} holds no run, but {set_aside_words(path, aside, 'rmdir')}")
    found = _enclosing(path)
    if found is not None and found[0] == "run":  # RUN/checkpoints, RUN/config.json: the run was meant
        return DepthlabError(part_of_words(path))
    return DepthlabError(f"{path} is not a depthlab run directory (no {' or '.join(missing) or 'files'}); "
                         "give the out_dir of a depthlab train run")


#: The file ``depthlab export`` writes beside the Hugging Face files, naming the run (``run_dir``).
EXPORT_INFO = "depthlab.json"


def export_origin(folder: Path) -> Optional[tuple[Optional[str], bool]]:
    """``(the run it came from or None, whether that run is still there)`` for a folder ``depthlab export`` wrote
    (its :data:`EXPORT_INFO`, no ``checkpoints/``); None for any other folder."""
    folder = Path(folder)
    if not (folder / EXPORT_INFO).is_file() or (folder / CHECKPOINTS).exists():
        return None
    info = read_json(folder / EXPORT_INFO)
    run = info.get("run_dir") if isinstance(info, dict) else None
    run = run if isinstance(run, str) else None
    return run, run is not None and (Path(run) / CHECKPOINTS).is_dir()


def set_aside_run(path: Path) -> Optional[Path]:
    """The run :func:`prepare_run_dir` moved out of ``path`` (``PARENT/.NAME.replaced-*/NAME``) and that nothing put
    back or deleted (the process was killed in between), when there is one; the newest of several."""
    path = Path(path)
    try:
        found = [p / path.name for p in path.parent.glob(f".{glob.escape(path.name)}.replaced-*")
                 if (p / path.name / CONFIG).is_file()]
    except OSError:
        return None
    return max(found, key=lambda p: p.stat().st_mtime, default=None)


def set_aside_words(path: Path, aside: Path, remove: str) -> str:
    """"the run that was there is in ASIDE (...): put it back with REMOVE PATH && mv ASIDE PATH": the one wording of a
    run :func:`set_aside_run` found; ``remove`` empties ``path`` first (``rmdir`` an empty folder, ``rm -r`` a stub)."""
    q, a = shlex.quote(str(path)), shlex.quote(str(aside))
    return (f"the run that was there is in {aside} (an --overwrite was stopped before its new run started): put it "
            f"back with {remove} {q} && mv {a} {q}")


def not_a_file_error(path: Path) -> DepthlabError:
    """The error for a folder (or other non-file) where a run directory's file ``path`` belongs: names it, the fix."""
    return DepthlabError(f"{path} is not a file (depthlab writes its {path.name} there): move it out of the run "
                         f"directory, or restore the run's {path.name} from a copy")


def damaged_metrics_lines(run_dir: Path) -> int:
    """Lines of ``run_dir/metrics.jsonl`` that are not records (:func:`_record`), a torn last line not counted.

    depthlab writes whole lines and only the last can be torn (a process killed mid-write, before its
    newline: :func:`torn_last_line`); any other unreadable line, a whole last line too, is damage, and every
    reader skips it.
    """
    lines, ended = _nonblank_lines(run_dir)
    whole = lines if ended else lines[:-1]
    return sum(_record(ln) is None for ln in whole)


def torn_last_line(run_dir: Path) -> bool:
    """True when the last non-blank line of ``run_dir/metrics.jsonl`` is not a record (:func:`_record`) and no
    newline ends it: cut mid-write. Damage once the run has finished; in a live run, a record being appended.
    A whole line that is not a record (newline-ended: ``echo junk >> metrics.jsonl``) is damage, not a cut
    (:func:`damaged_metrics_lines`)."""
    lines, ended = _nonblank_lines(run_dir)
    return bool(lines) and not ended and _record(lines[-1]) is None


def _nonblank_lines(run_dir: Path) -> tuple[list[str], bool]:
    """The non-blank lines of ``run_dir/metrics.jsonl``, stripped ([] when it cannot be read), and whether a
    newline ends the last of them (depthlab ends every record it writes with one)."""
    try:
        text = (Path(run_dir) / METRICS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return [], True
    return [ln.strip() for ln in text.splitlines() if ln.strip()], text.rstrip(" \t\r\f\v").endswith("\n")


def truncate_metrics(run_dir: Path, step: int) -> None:
    """Keep only records with ``step <= step`` (resume continues after a checkpoint at ``step``)."""
    keep = [r for r in read_metrics(run_dir) if int(r.get("step", 0)) <= step]
    atomic_write(Path(run_dir) / METRICS, "".join(json.dumps(r) + "\n" for r in keep).encode())


class MetricsWriter:
    """Appends records to ``run_dir/metrics.jsonl`` and mirrors scalars to TensorBoard (``run_dir/tb``).

    Only the main process (rank 0) writes; with ``enabled=False`` every method does nothing.

    Args:
        run_dir: the run directory.
        tensorboard: also write TensorBoard event files (``torch.utils.tensorboard``).
        enabled: False on non-zero ranks.
        purge_step: on resume, the first step after the checkpoint: TensorBoard then hides the
            events at and after it that the interrupted session had written (``SummaryWriter``'s
            ``purge_step``), as :func:`truncate_metrics` does for ``metrics.jsonl``.
    """

    def __init__(self, run_dir: Path, tensorboard: bool = True, enabled: bool = True,
                 purge_step: Optional[int] = None):
        self.enabled = enabled
        self.run_dir = Path(run_dir)
        self._f = open(self.run_dir / METRICS, "a", encoding="utf-8") if enabled else None
        self.tb = None
        self._older_events: list[Path] = []
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                tb_dir = self.run_dir / TENSORBOARD
                self._older_events = sorted(tb_dir.glob("events.out.tfevents.*"))  # earlier sessions' files
                self.tb = SummaryWriter(log_dir=str(tb_dir), purge_step=purge_step)
            except ImportError:  # tensorboard not installed: metrics.jsonl is the record
                self.tb = None

    def log(self, kind: str, record: dict[str, Any], tb_scalars: Optional[dict[str, float]] = None) -> None:
        """Write one JSON line ``{"kind": kind, **record}`` (``record`` must hold ``step``).

        Args:
            kind: one of :data:`KINDS`.
            record: the values; non-finite floats are written as strings ("nan", "inf").
            tb_scalars: TensorBoard tag -> value at ``record["step"]`` (non-finite ones skipped).

        Raises:
            ValueError: unknown ``kind`` (a programming error, not user input).
        """
        if kind not in KINDS:
            raise ValueError(f"metrics kind must be one of {KINDS}, got {kind!r}")
        if not self.enabled:
            return
        rec = {"kind": kind, **record}
        try:
            self._f.write(json.dumps({k: _clean(v) for k, v in rec.items()}) + "\n")
            self._f.flush()
        except OSError as e:  # e.g. a full disk: write() names no file, the one it was for
            if e.filename is None:
                e.filename = str(self.run_dir / METRICS)
            raise
        if self.tb is not None and tb_scalars:
            for k, v in tb_scalars.items():
                if v is not None and math.isfinite(v):
                    self.tb.add_scalar(k, v, record["step"])

    def text(self, tag: str, text: str, step: int) -> None:
        """TensorBoard text at ``step`` (no-op without TensorBoard)."""
        if self.enabled and self.tb is not None:
            self.tb.add_text(tag, text, step)

    def histogram(self, tag: str, values, step: int) -> None:
        """TensorBoard histogram of a tensor/array at ``step`` (no-op without TensorBoard)."""
        if self.enabled and self.tb is not None:
            self.tb.add_histogram(tag, values, step)

    def hparams(self, hparams: dict[str, Any], metrics: dict[str, Optional[float]], step: int) -> None:
        """TensorBoard HParams of this run, written into the run's own ``tb/`` event files.

        ``SummaryWriter.add_hparams`` would open a new log folder per call; this writes the same
        three summaries (experiment, session start, session end) into this run's writer instead,
        and each metric as a scalar at ``step``, so ``tensorboard --logdir`` over many runs shows
        one HParams row (and one parallel-coordinates line) per run. The event files of earlier
        sessions of a resumed run (depthlab wrote them) get this session's HParams in place of theirs
        (:func:`_replace_hparams`): the row then shows what config.json says, not the first session's
        values (Lightning #1778). When the run logs no other TensorBoard events (``train.tensorboard``
        off, as in sweeps), a writer is opened on ``run_dir/tb`` for these alone. No-op on non-zero
        ranks or without the tensorboard package.

        Args:
            hparams: name -> int, float, str or bool (None values are left out).
            metrics: scalar tag -> value (e.g. ``hparams/best_val_loss`` in nats); non-finite
                values are written as no scalar, the column stays empty for this run.
            step: the step the metric scalars are written at (the run's final step).
        """
        if not self.enabled:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
            from torch.utils.tensorboard.summary import hparams as hparams_summaries
        except ImportError:  # tensorboard not installed
            return
        tb_dir = self.run_dir / TENSORBOARD
        older = sorted(tb_dir.glob("events.out.tfevents.*")) if self.tb is None else self._older_events
        tb = self.tb or SummaryWriter(log_dir=str(tb_dir))
        values = {k: v for k, v in hparams.items() if isinstance(v, (int, float, str, bool))}
        summaries = list(hparams_summaries(values, dict(metrics)))
        for f in older:
            _replace_hparams(f, summaries)
        writer = tb._get_file_writer()
        for summ in summaries:
            writer.add_summary(summ)
        for tag, v in metrics.items():
            if v is not None and math.isfinite(v):
                tb.add_scalar(tag, v, step)
        if tb is self.tb:
            tb.flush()
        else:
            tb.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has closed metrics.jsonl (a writer that never writes, on another rank, is not)."""
        return self.enabled and self._f is None

    def close(self) -> None:
        """Flush and close the files."""
        if self._f is not None:
            self._f.close()
            self._f = None
        if self.tb is not None:
            self.tb.close()
            self.tb = None


def _replace_hparams(path: Path, summaries: list) -> None:
    """Rewrite the event file ``path`` (one depthlab wrote) with ``summaries`` in place of its HParams.

    Every other event is kept byte for byte; the file is replaced through :func:`atomic_write`. A file
    that cannot be read is left as it is.
    """
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    try:
        raw = list(RawEventFileLoader(str(path)).Load())
    except Exception:  # noqa: BLE001 - a damaged file of an earlier session: keep it as it is
        return
    keep = []
    for rec in raw:
        ev = event_pb2.Event.FromString(rec)
        if ev.HasField("summary") and any(v.metadata.plugin_data.plugin_name == "hparams" for v in ev.summary.value):
            continue
        keep.append(rec)
    keep += [event_pb2.Event(wall_time=time.time(), summary=s).SerializeToString() for s in summaries]
    buf = io.BytesIO()
    w = RecordWriter(buf)
    for rec in keep:
        w.write(rec)
    atomic_write(path, buf.getvalue())


# ------------------------------------------------------------------------- creating a run directory
def default_out_dir() -> Path:
    """``runs/<YYYYmmdd-HHMMSS>`` (with a numeric suffix if taken)."""
    base = Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    p, i = base, 1
    while p.exists():
        p, i = Path(f"{base}-{i}"), i + 1
    return p


#: The figures depthlab draws into a run's ``plots/`` folder (``<name>.png``, :func:`figures.save_run_figure`
#: refuses any other name): any other file there is the user's, kept by ``--overwrite``.
RUN_FIGURES = ("loss", "grad_flow", "grad_layers", "update_ratio", "activations", "attn_entropy", "attention",
               "rezero_alpha", "layers", "context")
#: What depthlab writes inside a run directory's folders (``checkpoint.py``, ``figures.py``, TensorBoard's
#: ``SummaryWriter``, ``usermodel.keep_source`` and the ``__pycache__`` Python makes beside that copy).
_RUN_SUBFILES = {CHECKPOINTS: re.compile(r"manifest\.json|best(-step-\d+)?\.safetensors"  # best-step-N: kept on resume
                                          r"|step-\d+\.(safetensors|state\.pt)(\.unlisted(-\d+)?)?"),  # set aside
                 PLOTS: re.compile(rf"({'|'.join(RUN_FIGURES)})\.png"),
                 TENSORBOARD: re.compile(r"events\.out\.tfevents\..+"),
                 SOURCE: re.compile(r"ORIGIN|[^/]+\.py|__pycache__/[^/]+\.pyc")}
#: The temporary name of an :func:`atomic_write` that a crash left behind (depthlab's own).
_TEMP = re.compile(r"\..+\.tmp")


#: Who wrote a run's figures and its report.html: the PNG ``Software`` text of every :func:`save_run_figure`
#: and the ``<meta name="generator">`` of the report page (:data:`depthlab.report.html.GENERATOR`). A file at
#: either place that does not carry it is the user's, never replaced.
REPORT_SOFTWARE = "depthlab report"
#: The ``<meta name="generator">`` tag of every page ``depthlab report`` writes (in its first 4,000 characters).
_GENERATOR_TAG = f'name="generator" content="{REPORT_SOFTWARE}"'


def png_text(path: str | Path, keyword: str) -> Optional[str]:
    """The text of the PNG tEXt chunk ``keyword`` of the file at ``path`` (PNG spec 11.3.4), read among the
    chunks before the image data (where matplotlib writes them); None when the file is not a PNG, cannot be
    read or has no such chunk."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return None
    if not head.startswith(b"\x89PNG\r\n\x1a\n"):
        return None
    i, key = 8, keyword.encode("latin-1")
    while i + 8 <= len(head):
        size, kind = int.from_bytes(head[i:i + 4], "big"), head[i + 4:i + 8]
        if kind in (b"IDAT", b"IEND"):
            break
        if kind == b"tEXt":
            k, sep, text = head[i + 8:i + 8 + size].partition(b"\0")
            if sep and k == key:
                return text.decode("latin-1")
        i += 12 + size  # length, type, data, CRC
    return None


def written_by_report(path: str | Path) -> bool:
    """True when the run figure at ``path`` (``RUN/plots/<name>.png``) was written by ``depthlab report``.

    Its PNG ``Software`` text says :data:`REPORT_SOFTWARE`; a figure written before the figures carried it
    counts when its exact bytes are embedded in the run's ``report.html`` that ``depthlab report`` wrote
    (the report embeds each figure it draws as base64). A symbolic link is never depthlab's (it makes none).
    """
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        return False
    if png_text(path, "Software") == REPORT_SOFTWARE:
        return True
    page = path.parent.parent / REPORT
    try:
        data = path.read_bytes()
        html = page.read_text(encoding="utf-8", errors="replace") if page.is_file() and not page.is_symlink() else ""
    except OSError:
        return False
    return (data.startswith(b"\x89PNG") and _GENERATOR_TAG in html[:4000]
            and base64.b64encode(data).decode("ascii") in html)



def written_report_page(path: str | Path) -> bool:
    """True when the HTML file at ``path`` (not a symbolic link) carries depthlab report's generator tag in its head:
    a page ``depthlab report`` wrote, which it may replace."""
    path = Path(path)
    try:
        return not path.is_symlink() and _GENERATOR_TAG in path.read_text(encoding="utf-8", errors="replace")[:4000]
    except OSError:
        return False


def foreign_files(path: Path) -> list[str]:
    """Paths inside the run directory ``path`` (relative, sorted) that depthlab did not write.

    Everything not named in :data:`RUN_ARTIFACTS` at the top, anything in its folders depthlab would not
    have written there, and every symbolic link (depthlab makes none) is foreign. Used before a
    folder is deleted (``--overwrite``): one foreign file means it is not deleted.
    """
    path = Path(path)
    out = []
    for p in path.iterdir():
        if p.is_symlink() or p.name not in RUN_ARTIFACTS and not _TEMP.fullmatch(p.name):
            out.append(p.name)
        elif p.is_dir():
            pattern = _RUN_SUBFILES.get(p.name)
            for q in p.rglob("*"):
                rel = q.relative_to(p).as_posix()
                ok = q.is_dir() and not q.is_symlink() and rel == "__pycache__" and p.name == SOURCE
                ok = ok or (q.is_file() and not q.is_symlink() and pattern is not None
                            and (pattern.fullmatch(rel) is not None or _TEMP.fullmatch(q.name) is not None))
                if ok and p.name == PLOTS and not _TEMP.fullmatch(q.name):  # a figure's name is not enough
                    ok = written_by_report(q)
                if not ok:
                    out.append(f"{p.name}/{rel}")
        elif p.name in _RUN_SUBFILES:  # a file where depthlab makes a folder
            out.append(p.name)
    return sorted(out)


def missing_run_error(path: Path) -> DepthlabError:
    """The refusal of a run directory ``path`` that does not exist, naming the file it is under if any."""
    above = next((p for p in Path(path).parents if p.exists()), None)  # the nearest existing path it is under
    why = f": {above} is a file, not a folder" if above is not None and not above.is_dir() else ""
    return DepthlabError(f"run directory {path} not found{why}; give the out_dir of a depthlab train run")


def is_pure_run_dir(path: Path) -> bool:
    """True when ``path`` holds a ``config.json`` and nothing depthlab did not write (:func:`foreign_files`)."""
    path = Path(path)
    return (path / CONFIG).is_file() and not foreign_files(path)


def _check_replaceable(out_dir: Path, overwrite: bool) -> None:
    """Refuse to put a run into the existing, non-empty ``out_dir`` unless ``overwrite`` may replace it.

    Every message names a fix that works for this folder: ``--resume`` only for a run, ``--overwrite``
    only for a run that holds nothing else.
    """
    flag = "--train.out_dir"
    # a start killed between copying the model's file (source/) and writing config.json leaves source/ alone:
    # depthlab's own leftover, which --overwrite may replace, not a folder of the user's (its ORIGIN, written
    # last, tells it from a user's own source/ of .py files, which is never deleted)
    unstarted = (not (out_dir / CONFIG).is_file() and (out_dir / SOURCE / ORIGIN).is_file()
                 and all(p.name in (SOURCE, LOCK) or _TEMP.fullmatch(p.name) for p in out_dir.iterdir())
                 and not foreign_files(out_dir))
    if unstarted and not overwrite:
        raise DepthlabError(f"train.out_dir {out_dir} holds only {SOURCE}/, the copy of the model's file a start "
                            f"stopped before it wrote config.json leaves; use --overwrite to replace it, or another "
                            f"{flag}")
    if not (out_dir / CONFIG).is_file() and not unstarted:
        raise DepthlabError(f"train.out_dir {out_dir} already exists and is not a depthlab run directory (it "
                            f"holds {_names(p.name for p in out_dir.iterdir())} and no config.json); choose another "
                            f"{flag} (a new or empty folder)")
    export = export_origin(out_dir) is not None
    if export or RunDir(out_dir).foreign_config:  # "--resume it" would be refused: it was never a run
        what = "a Hugging Face export depthlab export wrote" if export else "its config.json is another program's"
        raise DepthlabError(f"train.out_dir {out_dir} already exists and is not a depthlab run directory ({what}); "
                            f"choose another {flag} (a new or empty folder)")
    foreign = foreign_files(out_dir)
    if not overwrite:
        replace = "" if foreign else ", --overwrite to replace it"
        raise DepthlabError(f"train.out_dir {out_dir} already exists; use --resume {shlex.quote(str(out_dir))} to "
                            f"continue it{replace}, or another {flag}")
    if foreign:
        raise DepthlabError(f"train.out_dir {out_dir} holds files depthlab did not write ({_names(foreign)}); "
                            f"refusing to delete them with --overwrite: move them out, or choose another {flag}")
    if out_dir.is_symlink():
        raise DepthlabError(f"train.out_dir {out_dir} is a symbolic link (to {os.readlink(out_dir)}); --overwrite "
                            f"replaces only a folder itself: give {out_dir.resolve()} or another {flag}")
    cwd = Path.cwd().resolve()
    target = out_dir.resolve()
    if target == cwd or target in cwd.parents:
        raise DepthlabError(f"refusing to --overwrite {out_dir}: it is the current folder or contains it")


def _names(names: Iterable[str]) -> str:
    names = sorted(names)
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def prepare_run_dir(out_dir: Path, overwrite: bool) -> Optional[Path]:
    """Create ``out_dir``; refuse an existing non-empty one unless ``overwrite`` and it is a run.

    The run ``overwrite`` replaces is not deleted yet: it is renamed to a hidden folder beside
    ``out_dir`` whose path is returned, for :func:`drop_replaced` once the new run has started, or
    :func:`restore_replaced` when starting it fails (bad input then loses nothing).

    Returns:
        The old run's hidden folder, or None when nothing was replaced.

    Raises:
        DepthlabError: the folder exists (and what to do), or is a file, or is not a depthlab run,
            or holds files depthlab did not write, or is the current folder, or lies inside another
            run or a sweep's own files (:func:`nested_run_error`), or cannot be created.
    """
    out_dir = Path(out_dir)
    up = up_from_missing_error(out_dir, "train.out_dir")
    if up is not None:
        raise up
    if out_dir.exists() and not out_dir.is_dir():
        raise DepthlabError(f"train.out_dir {out_dir} is a file; choose another --train.out_dir")
    nested = nested_run_error(out_dir, "--train.out_dir")
    if nested is not None:
        raise nested
    if out_dir.is_symlink() and not out_dir.exists():
        raise DepthlabError(f"train.out_dir {out_dir} is a symbolic link to {os.readlink(out_dir)}, which does not "
                            "exist; create that folder or choose another --train.out_dir")
    aside = None
    if out_dir.exists() and any(p.name != LOCK for p in out_dir.iterdir()):  # a lone .lock: a start that failed
        _check_replaceable(out_dir, overwrite)
        try:  # the old run is moved aside within its parent folder, so that folder must be writable too
            aside = make_temp_dir(out_dir.parent, f".{out_dir.name}.replaced-")
        except OSError as e:
            raise DepthlabError(f"cannot replace train.out_dir {out_dir}: its folder {out_dir.parent} is not "
                                f"writable ({e.strerror}); nothing was changed: make that folder writable or "
                                "choose another --train.out_dir") from None
        try:
            os.replace(out_dir, aside / out_dir.name)
        except OSError as e:  # e.g. out_dir is a mount point: it cannot move
            aside.rmdir()
            raise DepthlabError(f"cannot replace train.out_dir {out_dir}: {e.strerror}; delete the old run "
                                "yourself or choose another --train.out_dir") from None
        _put_back_at_exit(out_dir, aside)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        restore_replaced(out_dir, aside)
        above = next((p for p in out_dir.parents if p.exists()), None)  # the nearest existing path it goes under
        if above is not None and not above.is_dir():
            raise DepthlabError(f"cannot create train.out_dir {out_dir}: {above} is a file, not a folder; choose "
                                f"a --train.out_dir that is not under the file {above}") from None
        raise DepthlabError(f"cannot create train.out_dir {out_dir}: {e.strerror}; choose a writable folder") from None
    return aside


#: Runs :func:`prepare_run_dir` set aside whose new run has neither started nor failed: a Python ``Trainer(...,
#: overwrite=True)`` never fit. They are put back when the process exits.
_ASIDE: dict[Path, Path] = {}


def _put_back_at_exit(out_dir: Path, aside: Path) -> None:
    if not _ASIDE:
        atexit.register(_put_back_pending)
    _ASIDE[aside] = Path(os.path.abspath(out_dir))


def _put_back_pending() -> None:
    for aside, out_dir in list(_ASIDE.items()):
        if (out_dir / SUMMARY).exists() or any((out_dir / CHECKPOINTS).glob("*.safetensors")):
            continue  # trained since (by hand, or another process): never deleted; the commands name the old one
        try:
            restore_replaced(out_dir, aside)
        except OSError:  # moved or deleted by hand meanwhile: sample/diagnose name a run left aside
            pass


def restore_replaced(out_dir: Path, aside: Optional[Path]) -> None:
    """Put the run :func:`prepare_run_dir` set aside back at ``out_dir`` (the new run's files are deleted)."""
    if aside is None:
        return
    _ASIDE.pop(aside, None)
    if Path(out_dir).is_dir():
        shutil.rmtree(out_dir)
    os.replace(aside / Path(out_dir).name, out_dir)
    aside.rmdir()


def drop_replaced(aside: Optional[Path]) -> None:
    """Delete the run :func:`prepare_run_dir` set aside: the new run has started in its place."""
    if aside is not None:
        out_dir = _ASIDE.pop(aside, None)
        shutil.rmtree(aside)
        for earlier in [a for a, d in _ASIDE.items() if d == out_dir]:  # a Trainer never fit set it aside first:
            del _ASIDE[earlier]  # this overwrite of the same folder has started, so that old run goes too
            shutil.rmtree(earlier, ignore_errors=True)


# ------------------------------------------------------------------------- the reader
#: The sections of a run's config.json: depthlab's RunConfig, and the ``resolved`` record of what ran.
CONFIG_SECTIONS = ("data", "model", "train", "resolved")
def _nats(entry: Any) -> bool:
    """A baselines.json entry as depthlab writes it: an object with a finite number ``nats``."""
    v = entry.get("nats") if isinstance(entry, dict) else None
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _config_section_faults(v: dict) -> list[str]:
    """The sections of a config.json object that are not objects: ``model`` must be one; ``data``, ``train`` and
    ``resolved`` (depthlab's record alone) must be when present (``"model": null`` had read as the default model)."""
    return [k for k in CONFIG_SECTIONS
            if (k in v or k == "model") and not isinstance(v.get(k), dict)]


#: What the run files read through :class:`RunDir` must hold beyond their JSON type (else: damaged).
_SHAPES = {
    CONFIG: lambda v: not _config_section_faults(v),
    VOCAB: lambda v: all(isinstance(c, str) for c in v),
    BASELINES: lambda v: (all(_nats(v.get(k)) for k in ("uniform", "unigram", "bigram"))
                          and ("one_char_floor" not in v or _nats(v["one_char_floor"]))),
}


class RunDir:
    """Read-only view of a run directory; each file is read when first asked for.

    Args:
        path: the run directory.

    Attributes:
        path: the directory as a :class:`~pathlib.Path`.

    Every accessor returns None (or an empty list) for a missing or unreadable file;
    :meth:`require` turns "not a run" into a clear error.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._cache: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def file(self, name: str) -> Path:
        """Path of the run file ``name`` (one of this module's constants)."""
        return self.path / name

    def _json(self, name: str, kind: type = dict) -> Optional[Any]:
        """The file's JSON when it is a ``kind`` (every run file is an object but vocab.json, a list), else None:
        a damaged or hand-edited file reads as missing, never as data of another shape (config.json: an object
        with a ``model`` section; vocab.json: a list of strings)."""
        if name not in self._cache:
            v = read_json(self.path / name)
            shape = _SHAPES.get(name)
            self._cache[name] = v if isinstance(v, kind) and (shape is None or shape(v)) else None
        return self._cache[name]

    def damaged(self, name: str) -> bool:
        """True when the run file ``name`` exists but does not hold what depthlab wrote there (see :meth:`_json`)."""
        return (self.path / name).is_file() and self._json(name, list if name == VOCAB else dict) is None

    @property
    def ran(self) -> bool:
        """Whether any file that a depthlab run writes is here (config.json, metrics.jsonl, summary.json or
        checkpoints/manifest.json; a folder by such a name counts, as a damaged one): a folder of a run whose
        other files were deleted or damaged, not some other folder."""
        return any((self.path / n).exists() for n in (CONFIG, METRICS, SUMMARY, f"{CHECKPOINTS}/manifest.json"))

    def require(self, what: str = "config") -> "RunDir":
        """Check that this is a run directory and return self.

        Args:
            what: ``config`` (needs config.json), ``metrics`` (config.json and metrics.jsonl) or
                ``checkpoints`` (needs ``checkpoints/manifest.json``).

        Raises:
            DepthlabError: the folder is missing or lacks the files ``what`` needs, or its config.json
                is not the JSON object depthlab wrote.
        """
        rd = self.path
        if not rd.exists():
            raise missing_run_error(rd)
        needs = {"config": [CONFIG], "metrics": [CONFIG, METRICS],
                 "checkpoints": [f"{CHECKPOINTS}/manifest.json"]}[what]
        if not rd.is_dir():
            raise DepthlabError(f"{rd} is a file, not a run directory; give the out_dir of a depthlab train run")
        if what == "checkpoints" and (rd / CHECKPOINTS).exists() and not (rd / CHECKPOINTS).is_dir():
            raise DepthlabError(f"{rd / CHECKPOINTS} is not a folder (depthlab keeps the run's checkpoints there): "
                                "move it out of the run directory, or restore the run's checkpoints/ from a copy")
        self.refuse_non_files(*needs)
        self.refuse_foreign()
        missing = [n for n in needs if not (rd / n).is_file()]
        if missing and what == "checkpoints" and (self._trained_steps() or self.ran and set_aside_run(rd)) and \
                not any((rd / CHECKPOINTS).glob("*.safetensors")):
            raise self.no_checkpoint_error()  # the whole folder is gone, not just its manifest; or never made
        if missing and self.ran:  # a run whose files were deleted: not "not a run directory"
            raise DepthlabError(f"{rd} is a depthlab run, but its {' and '.join(missing)} is missing (deleted or "
                                "never written); restore it from a copy or train the run again")
        if missing:
            raise not_a_run_error(rd, missing)
        if CONFIG in needs and self.damaged(CONFIG):
            raise damaged_config_error(rd / CONFIG)
        return self

    def no_checkpoint_error(self) -> DepthlabError:
        """A run without a checkpoint: "yet" while it has not trained a step as far as summary.json says; a finished
        run whose checkpoints were deleted is named so (it will never get one by waiting)."""
        steps = self._trained_steps()
        if steps:
            return DepthlabError(f"{self.path} holds no checkpoint, though {SUMMARY} says {counted(steps, 'step')} "
                                 f"{'was' if steps == 1 else 'were'} trained: its {CHECKPOINTS}/ was deleted or "
                                 "emptied; restore it from a copy or train the run again")
        aside = set_aside_run(self.path)
        if aside is not None:  # a Python Trainer(overwrite=True) killed by SIGTERM before its first step: its stub
            return DepthlabError(f"{self.path} has no checkpoint: it holds a run that never trained a step, and "
                                 f"{set_aside_words(self.path, aside, 'rm -r')}")
        return DepthlabError(f"{self.path} has no checkpoint yet")

    def _trained_steps(self) -> int:
        """The steps summary.json says the run trained (0 when it has none, or no summary)."""
        steps = (self.summary or {}).get("final_step")
        return steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else 0

    @property
    def foreign_config(self) -> bool:
        """Whether config.json is another program's JSON object (none of depthlab's sections, as a Hugging Face
        model folder's) with no other run file beside it: a folder that was never a run."""
        v = read_json(self.file(CONFIG)) if self.file(CONFIG).is_file() else None
        others = (METRICS, SUMMARY, f"{CHECKPOINTS}/manifest.json")
        return (isinstance(v, dict) and not any(k in v for k in CONFIG_SECTIONS)
                and not any(self.file(n).exists() for n in others))

    def refuse_foreign(self) -> None:
        """Refuse a folder whose config.json is another program's (a Hugging Face model folder, as ``depthlab
        export`` writes): a JSON object with none of depthlab's sections, and no other run file beside it. Such a
        folder was never a run, so "a depthlab run whose files are missing" or "edited by hand" would be untrue.

        Raises:
            DepthlabError: as said, naming the folder and what to give instead.
        """
        origin = export_origin(self.path)
        if origin is not None:  # depthlab's own Hugging Face export: its depthlab.json names the run
            run, there = origin
            which = f", {run}" if there else (f" ({run}, no longer there)" if run else "")
            raise DepthlabError(f"{self.path} is a Hugging Face export written by depthlab export, not a run "
                                f"directory; give the run it was exported from{which}")
        if self.foreign_config:
            raise DepthlabError(f"{self.path} is not a depthlab run directory: its config.json is not depthlab's "
                                "(none of the data/model/train sections depthlab writes; another program's, such as "
                                "a Hugging Face model folder?); give the out_dir of a depthlab train run")

    def refuse_non_files(self, *names: str) -> None:
        """Raise :func:`not_a_file_error` for the first of ``names`` that is there but is not a file (a folder).

        Raises:
            DepthlabError: as said.
        """
        for n in names:
            if self.file(n).exists() and not self.file(n).is_file():
                raise not_a_file_error(self.file(n))

    @property
    def config(self) -> Optional[dict]:
        """``config.json``: {"data": {...}, "model": {...}, "train": {...}}."""
        return self._json(CONFIG)

    def corpus_changed(self, sha256: str) -> bool:
        """True when config.json's ``resolved.corpus_sha256`` (the corpus file's bytes at training) is not
        ``sha256``; False when they match or the run predates the record."""
        return self.corpus_changed_in(self.config, sha256)

    @staticmethod
    def corpus_changed_in(config: Optional[dict], sha256: str) -> bool:
        """:meth:`corpus_changed` of a config.json's content."""
        resolved = (config or {}).get("resolved") if isinstance(config, dict) else None
        recorded = resolved.get("corpus_sha256") if isinstance(resolved, dict) else None
        return isinstance(recorded, str) and recorded != sha256

    @property
    def vocab(self) -> Optional[list[str]]:
        """``vocab.json``: the characters, id = position."""
        return self._json(VOCAB, list)

    @property
    def summary(self) -> Optional[dict]:
        """``summary.json`` (absent while the run is unfinished)."""
        return self._json(SUMMARY)

    @property
    def baselines(self) -> Optional[dict]:
        """``baselines.json``: name -> {"nats", "bpc"}."""
        return self._json(BASELINES)

    @property
    def diagnosis(self) -> Optional[Any]:
        """``diagnosis.json``: the findings written at the end of training."""
        return self._json(DIAGNOSIS)

    @property
    def sweep_status(self) -> Optional[dict]:
        """``sweep_status.json`` of a sweep's run (status, message)."""
        return self._json(SWEEP_STATUS)

    @property
    def init_probe(self) -> Optional[dict]:
        """``init_probe.json`` of a sweep's run (the probe at initialisation)."""
        return self._json(INIT_PROBE)

    def metrics(self, kind: Optional[str] = None) -> list[dict]:
        """Records of ``metrics.jsonl``, optionally of one ``kind`` (see :func:`read_metrics`)."""
        if "metrics" not in self._cache:
            self._cache["metrics"] = read_metrics(self.path)
        recs = self._cache["metrics"]
        return list(recs) if kind is None else [r for r in recs if r["kind"] == kind]

    @property
    def evals(self) -> list[dict]:
        """Evaluation records (``step``, ``train_loss``, ``val_loss`` in nats, ...), in file order."""
        return [r for r in self.metrics("eval") if "val_loss" in r and "step" in r]

    def write(self, name: str, obj: Any) -> Path:
        """Write ``obj`` as JSON to the run file ``name`` atomically; returns its path."""
        p = self.path / name
        write_json(p, obj)
        self._cache.pop(name, None)
        return p


def is_run_dir(path: str | Path) -> bool:
    """True when ``path`` looks like a run directory (has ``config.json``)."""
    return (Path(path) / CONFIG).is_file()


def iter_run_dirs(root: str | Path) -> Iterable[RunDir]:
    """The run directories directly inside ``root``, sorted by name."""
    root = Path(root)
    if not root.is_dir():
        return []
    return [RunDir(p) for p in sorted(root.iterdir()) if p.is_dir() and is_run_dir(p)]


def init_from_record(config: Any) -> Optional[dict]:
    """config.json's ``resolved.init_from`` (the weights a run started from with ``--init-from``: path, sha256,
    step and val loss), or None for a run trained from scratch (or a damaged record)."""
    resolved = config.get("resolved") if isinstance(config, dict) else None
    record = resolved.get("init_from") if isinstance(resolved, dict) else None
    return record if isinstance(record, dict) else None


def init_from_words(record: dict) -> str:
    """What an :func:`init_from_record` says, for report and diagnose: the weights the run started from."""
    at = f"step {record['step']} " if record.get("step") is not None else ""
    val = f", val {record['val_loss']:.4f} nats" if isinstance(record.get("val_loss"), (int, float)) else ""
    return (f"not trained from scratch: the model started from the {at}weights of {record.get('path')}{val} "
            f"(--init-from, sha256 {str(record.get('sha256'))[:12]}…), so its step-0 loss is theirs")


def remove_made(run_dir: Path, made: list[Path], was_empty: bool = False) -> Optional[str]:
    """Remove what a start that failed made: the run folder and the empty folders made around it (``made``, innermost
    first: the folders that did not exist before), so that it leaves nothing behind. An outer folder is removed only
    while empty (another run may have appeared there). A run folder that was there and empty before (``was_empty``)
    is kept, emptied again. Returns what was removed, in words, or None (the run folder held files before)."""
    if not made:
        if not was_empty:
            return None
        for p in Path(run_dir).iterdir():  # all of it this start's: the folder was empty
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        return f"what it wrote into the folder {run_dir} (empty before) was removed"
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in made[1:]:
        try:
            parent.rmdir()
        except OSError:
            break
    return f"the new run folder {run_dir} was removed"


def read_only_fs(path: Path) -> bool:
    """Whether ``path`` (or, where it does not exist, the nearest folder above it) lies on a file system mounted
    read-only (``statvfs``'s ``ST_RDONLY``), where no chmod helps."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return bool(os.statvfs(p).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs on this system
        return False


def writable_fix(path: Path, what: str = "it") -> str:
    """How to make ``path`` writable, as a user can: on a read-only file system a copy on a writable disk; where they
    own it, ``chmod -R u+w PATH``; else (another user's folder, where chmod is refused) a copy of their own."""
    if read_only_fs(path):
        return (f"copy {what} to a writable disk (cp -r {shlex.quote(str(path))} COPY; it lies on a read-only file "
                "system, where chmod cannot help)")
    try:
        theirs = os.stat(path).st_uid != os.getuid()
    except (OSError, AttributeError):  # gone, or no uids on this system: the usual fix
        theirs = False
    if theirs:
        return f"copy {what} to a folder you own (cp -r {shlex.quote(str(path))} COPY; another user owns it)"
    return f"make {what} writable (chmod -R u+w {shlex.quote(str(path))})"
