"""Reading a sweep back: ``sweep.json``, one result row per run, results.csv / results.md, grouping.

Everything is read from the run directories through :class:`depthlab.rundir.RunDir`, so the
results can be rebuilt at any time (``depthlab report SWEEP_DIR``), also of an unfinished sweep.
Losses are in nats per character (token); ``best_val_bpc`` is bits per character.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics as st
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..errors import DepthlabError
from ..rundir import RunDir, read_json, write_generated
from ..units import LN2, finite_or_none, number_or_none
from .spec import RESULTS_CSV, RESULTS_MD, RUNS, SWEEP_JSON

__all__ = ["RESULT_COLUMNS", "METRIC_COLUMNS", "OK_STATUSES", "FINAL_STATUSES", "AGGREGATES_CSV", "AGGREGATE_COLUMNS",
           "read_results", "cell_aggregates", "is_sweep_dir", "load_sweep",
           "run_details", "collect_results", "write_results", "sweep_items", "sweep_baselines",
           "corpus_baselines", "field_value", "group_name", "aggregate", "experiment_axes", "mean_metric"]

#: Leading columns of results.csv / results.md; the varied fields and :data:`METRIC_COLUMNS` follow.
RESULT_COLUMNS = ["n_layer", "variant", "seed", "final_train_loss", "final_val_loss", "best_val_loss",
                  "wall_time_s", "status"]
#: Trailing columns: bits/char of best_val_loss, the best weights' loss on the whole val split
#: (``train.final_validation``; empty when off), training throughput, grad-norm ratio first/last
#: block (last gradient record), rank measure of the last block at initialisation (the init probe, on train
#: batches) and after training (the run's last probe past step 0, on its fixed val batch: for a one-step run that
#: is after one optimizer step; empty where the run has none), diagnosis.
METRIC_COLUMNS = ["best_val_bpc", "whole_val_loss", "tokens_per_sec", "grad_ratio_first_last", "init_last_block_rank",
                  "last_block_rank", "diagnosis", "run", "message"]

#: Statuses that count as a finished, usable run.
OK_STATUSES = ("ok",)
#: Statuses that are kept on restart (deterministic outcomes); other failures are redone.
FINAL_STATUSES = ("ok", "nonfinite")
#: Statuses of runs that trained and measured something: a diverged run and one stopped by train.max_time are
#: findings of the experiment (the report shows them); any other status (an error) gave no result.
RESULT_STATUSES = ("ok", "nonfinite", "time_capped")
#: The status of a run train.max_time stopped before train.max_iters (and before any end fit_to_time planned).
CAPPED = "time_capped"
#: Statuses of runs that have not finished yet (the same sweep command trains them on): no result, and no failure.
UNFINISHED_STATUSES = ("pending", "unfinished", "interrupted")

#: Seed statistics per cell (a grid point without its seed), computed from results.csv (:func:`cell_aggregates`).
AGGREGATES_CSV = "aggregates.csv"
#: Its columns after the cell's fields: finished runs, mean, sample sd and the 95 % t-interval of best_val_loss.
AGGREGATE_COLUMNS = ["metric", "n", "mean", "sd", "ci_low", "ci_high"]

#: Fields with their own leading column (not repeated among the varied fields).
_LEADING_FIELDS = ("model.n_layer", "model.variant", "train.seed")


def field_value(config: dict, key: str) -> Any:
    """The value of a dotted field in a nested run config.

    Args:
        config: ``{"data": {...}, "model": {...}, "train": {...}}``.
        key: ``SECTION.FIELD``, e.g. ``model.n_layer``.

    Returns:
        The value, or None when the section or field is missing.
    """
    sec, name = key.split(".")
    return config.get(sec, {}).get(name)


# --------------------------------------------------------------------------- reading a sweep
def is_sweep_dir(path: str | Path) -> bool:
    """Whether ``path`` is a sweep directory, so ``depthlab report`` builds the sweep report.

    Args:
        path: a folder.

    Returns:
        True when it holds a ``sweep.json``.
    """
    return (Path(path) / SWEEP_JSON).is_file()


def load_sweep(sweep_dir: str | Path) -> dict:
    """The ``sweep.json`` of a sweep directory.

    Args:
        sweep_dir: a directory written by :func:`depthlab.sweep.run_sweep`.

    Returns:
        ``{"spec", "varied", "created", "runs": [RunPoint as dict]}``.

    Raises:
        DepthlabError: not a sweep directory (or an unreadable sweep.json).
    """
    if not is_sweep_dir(sweep_dir):
        raise DepthlabError(f"{sweep_dir} is not a sweep directory (no {SWEEP_JSON})")
    meta = read_json(Path(sweep_dir) / SWEEP_JSON)
    if not isinstance(meta, dict) or not isinstance(meta.get("runs"), list):
        raise DepthlabError(f"{Path(sweep_dir) / SWEEP_JSON} is not readable; run the sweep command again")
    return meta


def _not_judged(diag: object) -> int:
    """How many rules a diagnosis.json says could not judge its run (its ``not_judged`` lines each start with the
    rules' names, ``a, b (why)``)."""
    from ..analytics.diagnose import not_judged_names

    lines = diag.get("not_judged") if isinstance(diag, dict) else None
    return len(not_judged_names(lines if isinstance(lines, list) else []))


def run_details(run_dir: str | Path) -> dict:
    """Everything the results and the report need from one run directory (missing pieces are empty).

    Args:
        run_dir: a run directory of the sweep.

    Returns:
        ``{"summary", "status", "config", "evals" [(step, train_loss, val_loss) in nats],
        "grad" [records with grad_norm_block], "probe" [records with rank_measure], "init_probe",
        "diagnosis" [rule names]}``.
    """
    rd = RunDir(run_dir)
    evals = [(r["step"], number_or_none(r.get("train_loss")), number_or_none(r.get("val_loss"))) for r in rd.evals]
    grad = [r for r in rd.metrics("grad") if isinstance(r.get("grad_norm_block"), list)]
    probe = [r for r in rd.metrics("probe") if isinstance(r.get("rank_measure"), list)]
    diag = rd.diagnosis
    rules: list[str] = []
    for f in diag.get("findings", []) if isinstance(diag, dict) else []:
        if isinstance(f, dict) and f.get("rule") and f["rule"] not in rules:
            rules.append(str(f["rule"]))
    unjudged = _not_judged(diag)
    if not rules and unjudged:  # an empty cell read as a clean bill of health where most rules could not judge
        rules = [f"none found; {unjudged} not judged (diagnosis.json)"]
    return {"summary": rd.summary, "status": rd.sweep_status, "config": rd.config, "evals": evals,
            "grad": grad, "probe": probe, "init_probe": rd.init_probe, "diagnosis": rules}


def _status(d: dict, exists: bool) -> str:
    """A run's status: its sweep_status.json, else ok / unfinished / pending from what is on disk.

    ``unfinished``: a run folder without a summary or a status, i.e. stopped before it could write one
    (Ctrl-C in its first seconds) or, read while a sweep runs, still going; results.csv is written
    when no run of its sweep is running, so it never says "running".
    """
    st_ = d["status"] or {}
    status = st_.get("status") or ("ok" if d["summary"] else ("unfinished" if exists else "pending"))
    if d["summary"] and status in ("unfinished", "interrupted", "error") and not st_:
        status = "ok"
    return status


def _metric_cells(d: dict, best: Optional[float]) -> dict:
    """best_val_bpc, whole_val_loss, tokens_per_sec, grad_ratio_first_last, init/last last_block_rank,
    diagnosis of one run."""
    s = d["summary"] or {}
    per_char = 1.0 / LN2  # bits per character per nat of loss: 1 / ln 2 for chars
    sb, sl = (number_or_none(s.get("best_val_bpc")), number_or_none(s.get("best_val_loss"))) if s else (None, None)
    if sb and sl and abs(sb / sl * LN2 - 1.0) > 1e-9:  # BPE: the run's characters per token
        per_char = sb / sl
    fv = s.get("final_validation") if isinstance(s.get("final_validation"), dict) else {}
    row: dict[str, Any] = {"best_val_bpc": best * per_char if best is not None else None,
                           "whole_val_loss": number_or_none(fv.get("val_loss")),
                           "tokens_per_sec": number_or_none(s.get("tokens_per_sec")) if s else None,
                           "grad_ratio_first_last": None}
    if d["grad"]:
        g = d["grad"][-1]["grad_norm_block"]
        g0, g1 = (number_or_none(g[0]), number_or_none(g[-1])) if g else (None, None)
        if g0 is not None and g1 is not None and g1 > 0:
            row["grad_ratio_first_last"] = g0 / g1
    init = (d.get("init_probe") or {}).get("rank_measure")
    row["init_last_block_rank"] = number_or_none(init[-1]) if isinstance(init, list) and init else None
    # after training: a probe past step 0 (a run that died before its first periodic or end probe has only the
    # step-0 one, which is the initialisation, not an end)
    after = [r for r in d["probe"] if isinstance(r.get("step"), int) and r["step"] > 0]
    last = after[-1]["rank_measure"] if after else None
    row["last_block_rank"] = number_or_none(last[-1]) if last else None
    row["diagnosis"] = ";".join(d["diagnosis"])
    return row


def _row(run: dict, d: dict, exists: bool, varied: list[str], multi: bool) -> dict:
    """The results row of one run (see :func:`collect_results`)."""
    cfg = d["config"] or run["config"]
    s, st_ = d["summary"] or {}, d["status"] or {}
    evals = [e for e in d["evals"] if e[2] is not None]
    finite = [e[2] for e in evals if math.isfinite(e[2])]
    status = _status(d, exists)
    best = number_or_none(s.get("best_val_loss")) if s else (min(finite) if finite else None)
    if best is not None and not math.isfinite(best):
        best = None
    row = {
        # a model.source run is the user's model: depthlab's GPT fields describe nothing there
        **({"n_layer": None, "variant": None} if cfg["model"].get("source") else
           {"n_layer": cfg["model"]["n_layer"], "variant": cfg["model"]["variant"]}),
        "seed": cfg["train"]["seed"],
        "final_train_loss": number_or_none(s.get("final_train_loss")) if s else (evals[-1][1] if evals else None),
        "final_val_loss": number_or_none(s.get("final_val_loss")) if s else (evals[-1][2] if evals else None),
        "best_val_loss": best,
        "wall_time_s": number_or_none(s.get("wall_time_s")) if s else number_or_none(st_.get("wall_s")),
        "status": status,
    }
    if multi:
        row["experiment"] = run["experiment"]
    for k in varied:
        row[k] = field_value(cfg, k)
    row.update(_metric_cells(d, best))
    row["run"] = f"{RUNS}/{run['name']}"
    row["message"] = st_.get("message", "") if status != "ok" else ""
    return row


def _collect(sweep_dir: Path) -> tuple[dict, list[dict], list[str], list[dict]]:
    """(sweep.json, rows, columns, run details in run order)."""
    meta = load_sweep(sweep_dir)
    varied = [k for k in meta.get("varied", []) if k not in _LEADING_FIELDS]
    multi = len({r["experiment"] for r in meta["runs"]}) > 1
    columns = RESULT_COLUMNS + (["experiment"] if multi else []) + varied + METRIC_COLUMNS
    rows, details = [], []
    for run in meta["runs"]:
        rd = sweep_dir / RUNS / run["name"]
        d = run_details(rd)
        rows.append(_row(run, d, rd.exists(), varied, multi))
        details.append(d)
    return meta, rows, columns, details


def collect_results(sweep_dir: str | Path) -> tuple[list[dict], list[str]]:
    """One result row per run of the sweep, read from the run directories.

    Args:
        sweep_dir: a sweep directory.

    Returns:
        (rows, columns): rows are dicts keyed by the columns (losses in nats as floats, missing =
        None); columns = :data:`RESULT_COLUMNS` + (``experiment`` when there are several) + varied
        fields + :data:`METRIC_COLUMNS`.

    Raises:
        DepthlabError: not a sweep directory.
    """
    _, rows, columns, _ = _collect(Path(sweep_dir))
    return rows, columns


def _cell(v: Any) -> str:
    """A value as results.csv / results.md / aggregates.csv write it: empty for None, a JSON object or list for a
    dict or list (``model.init``'s keyword arguments), so a CSV or JSON reader can parse it (``str`` gave Python's
    ``{'a': 1}``, ``None``), a float rounded to what the table needs."""
    if v is None:
        return ""
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
            return f"{v:.4g}"
        return f"{v:.4f}".rstrip("0").rstrip(".") if abs(v) < 100 else f"{v:.1f}"
    return str(v)


def write_results(sweep_dir: str | Path) -> tuple[Path, Path]:
    """Write ``results.csv`` and ``results.md`` in the sweep directory from its run directories.

    Both are written atomically; a copy edited by hand is kept aside first (:func:`depthlab.rundir.write_generated`).

    Args:
        sweep_dir: a sweep directory.

    Returns:
        (csv path, markdown path).

    Raises:
        DepthlabError: not a sweep directory.
        OSError: the sweep directory is not writable.
    """
    sweep_dir = Path(sweep_dir)
    rows, columns = collect_results(sweep_dir)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([_cell(r.get(c)) for c in columns])
    write_generated(sweep_dir / RESULTS_CSV, buf.getvalue().encode())
    md_cols = [c for c in columns if c != "message"]
    lines = ["| " + " | ".join(md_cols) + " |", "|" + "|".join("---" for _ in md_cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(_cell(r.get(c)).replace("|", "/") for c in md_cols) + " |")
    notes = [f"- `{r['run']}`: {r['status']}: {r['message']}" for r in rows if r.get("message")]
    unit = _unit(sweep_dir)
    # bpc is bits per character on a BPE run too (nats per token / ln 2 / characters per token)
    text = (f"# Sweep results\n\nLosses in nats per {unit}; `best_val_bpc` in bits per character.\n\n"
            + "\n".join(lines) + "\n" + ("\n" + "\n".join(notes) + "\n" if notes else ""))
    write_generated(sweep_dir / RESULTS_MD, text.encode())
    _write_aggregates(sweep_dir, rows, columns)
    return sweep_dir / RESULTS_CSV, sweep_dir / RESULTS_MD


def _unit(sweep_dir: Path) -> str:
    """What one token of the sweep's planned runs is: ``character`` when every run is on characters, else ``token``
    (a BPE run's loss is per token: its results once said "per character")."""
    from ..analytics.rules.evidence import unit_of

    meta = read_json(sweep_dir / SWEEP_JSON)
    runs = meta.get("runs") if isinstance(meta, dict) else None
    configs = [r.get("config") for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []
    return "character" if all(unit_of(c) == "character" for c in configs) else "token"


def read_results(csv_path: str | Path) -> tuple[list[dict], list[str]]:
    """The rows of a results.csv, as written (text; an empty cell is ``""``), and its columns."""
    with open(csv_path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader), list(reader.fieldnames or [])


def failed_runs(sweep_dir: str | Path, from_csv: bool = False) -> tuple[list[str], int]:
    """The runs of a sweep that gave no result (a status outside :data:`RESULT_STATUSES`, such as ``error``):
    ``NAME (STATUS)``, in row order, and the number of rows.

    Read from the run folders (what results.csv is written from: right also when its write failed, e.g. on a full
    disk, where results.csv is missing or an earlier session's); ``from_csv``: from results.csv as written, ``([],
    0)`` when there is none.
    """
    path = Path(sweep_dir) / RESULTS_CSV
    if not from_csv:
        rows, _ = collect_results(sweep_dir)
    elif not path.is_file():
        return [], 0
    else:
        rows, _ = read_results(path)
    return [f"{Path(r.get('run') or '?').name} ({r.get('status') or '?'})" for r in rows
            if r.get("status") not in RESULT_STATUSES], len(rows)


def cell_aggregates(rows: Sequence[dict], columns: Sequence[str], metric: str = "best_val_loss") -> list[dict]:
    """Seed statistics of ``metric`` per cell: the runs that share every column but the seed and the measurements.

    Args:
        rows: results rows (from :func:`read_results` or :func:`collect_results`); only status ``ok`` counts.
        columns: their columns; the cell is made of ``n_layer``, ``variant``, ``experiment`` and the varied
            fields (those between :data:`RESULT_COLUMNS` and :data:`METRIC_COLUMNS`), ``seed`` left out.
        metric: the column to summarise (nats/char for losses).

    Returns:
        One dict per cell in first-seen order: the cell's fields (as text) + :data:`AGGREGATE_COLUMNS`
        (:func:`depthlab.sweep.stats.cell_stats`: mean, sample sd, 95 % t-interval; None where undefined).
    """
    from .stats import cell_stats

    skip = set(RESULT_COLUMNS[2:]) | set(METRIC_COLUMNS)
    keys = [c for c in columns if c not in skip]
    cells: dict[tuple, list[float]] = {}
    for r in rows:
        key = tuple("" if r.get(k) is None else r[k] if isinstance(r[k], str) else _cell(r[k]) for k in keys)
        vals = cells.setdefault(key, [])
        v = finite_or_none(r.get(metric)) if r.get("status") in OK_STATUSES else None
        if v is not None:
            vals.append(v)
    out = []
    for key, vals in cells.items():
        cs = cell_stats(vals)
        out.append({**dict(zip(keys, key)), "metric": metric, "n": len(vals), "mean": cs.mean if cs else None,
                    "sd": cs.sd if cs and cs.n > 1 else None, "ci_low": cs.lo if cs else None,
                    "ci_high": cs.hi if cs else None})
    return out


def _write_aggregates(sweep_dir: Path, rows: Sequence[dict], columns: Sequence[str]) -> None:
    """``aggregates.csv`` from the rows results.csv was just written from, at their full precision (read back from
    the CSV's 4 decimals, a cell's sd of 1.944e-04 read 2.121e-04; the science table's statistics use the full
    values too)."""
    agg = cell_aggregates(rows, columns)
    header = (list(agg[0]) if agg else AGGREGATE_COLUMNS)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for a in agg:
        w.writerow([_cell(a[c]) for c in header])
    write_generated(sweep_dir / AGGREGATES_CSV, buf.getvalue().encode())


def sweep_items(sweep_dir: str | Path) -> tuple[dict, list[dict], list[str], list[dict]]:
    """Everything about a sweep's runs in one pass: what the report and the science claims read.

    Args:
        sweep_dir: a sweep directory.

    Returns:
        (sweep.json, rows, columns, items); each item is ``{"name", "experiment", "config" (the
        run's config.json, else the planned one), "row" (its results row), "details"
        (:func:`run_details`), "run_dir"}``.

    Raises:
        DepthlabError: not a sweep directory.
    """
    sweep_dir = Path(sweep_dir)
    meta, rows, columns, details = _collect(sweep_dir)
    items = [{"name": run["name"], "experiment": run["experiment"], "config": det["config"] or run["config"],
              "row": row, "details": det, "run_dir": str(sweep_dir / RUNS / run["name"])}
             for run, row, det in zip(meta["runs"], rows, details)]
    return meta, rows, columns, items


# --------------------------------------------------------------------------- corpus baselines
def corpus_baselines(data_config: Optional[dict] = None) -> dict[str, float]:
    """Corpus baselines in nats per character: uniform ln V, unigram and bigram cross-entropy.

    Computed by :func:`depthlab.analytics.baselines.corpus_baselines` (train counts, add-one
    smoothing, scored on val).

    Args:
        data_config: the ``data`` section of a run config (None = embedded corpus).

    Returns:
        ``{"uniform": .., "unigram": .., "bigram": ..}`` (nats/char).

    Raises:
        DepthlabError: unreadable corpus.
    """
    from ..analytics.baselines import corpus_baselines as cb
    from ..config import DataConfig
    from ..data import load_corpus

    corpus = load_corpus(DataConfig(**(data_config or {})))
    r = cb(corpus.train, corpus.val, corpus.tokenizer.vocab_size)
    return {k: float(r[k]["nats"]) for k in ("uniform", "unigram", "bigram")}


def sweep_baselines(items: Sequence[dict]) -> Optional[dict[str, float]]:
    """The corpus baselines of a sweep's runs (nats/char), or None when they cannot be had.

    Read from the runs' ``baselines.json``; else computed from the first run's corpus (:func:`corpus_baselines`).
    None too when the runs have different baselines (a grid over ``data.tokenizer`` or ``data.path``): one set of
    lines drawn for all of them put a BPE line against the characters' baselines.

    Args:
        items: from :func:`sweep_items`.

    Returns:
        ``{"uniform", "unigram", "bigram"}`` in nats per token, or None.
    """
    seen = []
    for it in items:
        b = RunDir(it["run_dir"]).baselines
        if isinstance(b, dict):
            try:
                seen.append({k: float(b[k]["nats"]) for k in ("uniform", "unigram", "bigram")})
            except (KeyError, TypeError, ValueError):
                pass
    datas = {json.dumps((it.get("config") or {}).get("data"), sort_keys=True, default=str) for it in items}
    if len({tuple(round(v, 6) for v in b.values()) for b in seen}) > 1 or (len(datas) > 1 and len(seen) < len(items)):
        return None  # the runs' corpora or tokenizers differ: no one set of lines is true of all of them
    if seen:
        return seen[0]
    try:
        return corpus_baselines((items[0]["config"] if items else {}).get("data"))
    except Exception:  # noqa: BLE001 - baselines are decoration; results work without them
        return None


# --------------------------------------------------------------------------- grouping runs
def _label(key: str, v: Any) -> str:
    """``prenorm`` for a variant, ``norm=rmsnorm`` for another field; a dict or list (model.init's keyword
    arguments) as JSON, as results.csv writes it, not Python's repr."""
    text = json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list, tuple)) else str(v)
    return text if key == "model.variant" else f"{key.split('.')[-1]}={text}"


def group_name(config: dict, groups: Sequence[str]) -> str:
    """The line (plot legend, table group) a run belongs to.

    Args:
        config: the run's nested config.
        groups: dotted fields that define the lines.

    Returns:
        ``"prenorm"``, ``"prenorm, learning_rate=0.01"``, or ``"all"`` without group fields.
    """
    return ", ".join(_label(k, field_value(config, k)) for k in groups) or "all"


def experiment_axes(exp: dict) -> tuple[Optional[str], list[str]]:
    """The x axis and the lines of an experiment's plots and tables.

    Args:
        exp: an experiment as stored in ``sweep.json`` (``{"name", "base", "grid", "extra"}``).

    Returns:
        (x field, group fields): x is ``model.n_layer`` when it varies, else the first varied
        numeric field (None if there is none); the other varied fields (except ``train.seed``,
        which is averaged over) define the lines.
    """
    grid = {k: v for k, v in exp["grid"].items() if len(v) > 1}
    keys = [k for k in grid if k != "train.seed"]
    x = None
    if "model.n_layer" in keys:
        x = "model.n_layer"
    else:
        for k in keys:
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in grid[k]):
                x = k
                break
    return x, [k for k in keys if k != x]


def _mean_sd(xs: Sequence[float]) -> tuple[float, float, int]:
    xs = [x for x in xs if x is not None]
    if not xs:
        return math.nan, math.nan, 0
    return st.mean(xs), (st.stdev(xs) if len(xs) > 1 else 0.0), len(xs)


def aggregate(items: Sequence[dict], x: Optional[str], groups: Sequence[str], metric: str = "best_val_loss",
              ok_only: bool = True, name: Optional[Callable[[dict], str]] = None
              ) -> dict[str, dict[Any, tuple[float, float, int]]]:
    """Mean, sample standard deviation and count of ``metric`` per group and x value (over seeds).

    Args:
        items: per-run dicts with ``config`` and ``row`` (see :func:`sweep_items`).
        x: dotted x field (None = a single point per group).
        groups: dotted fields that define the lines.
        metric: results column to average (e.g. ``best_val_loss`` in nats).
        ok_only: use only runs whose status is ``ok``.
        name: run config -> its line's name (default :func:`group_name` of ``groups``).

    Returns:
        ``{group name: {x value: (mean, sd, n)}}`` with x values sorted; non-finite values skipped.
    """
    acc: dict[str, dict[Any, list[float]]] = {}
    for it in items:
        if ok_only and it["row"]["status"] not in OK_STATUSES:
            continue
        v = finite_or_none(it["row"].get(metric))
        if v is None:
            continue
        g = name(it["config"]) if name else group_name(it["config"], groups)
        xv = field_value(it["config"], x) if x else 0
        acc.setdefault(g, {}).setdefault(xv, []).append(v)
    return {g: {xv: _mean_sd(vs) for xv, vs in sorted(d.items(), key=lambda kv: kv[0])} for g, d in acc.items()}


def mean_metric(items: Sequence[dict], metric: str = "best_val_loss", ok_only: bool = True) -> Optional[float]:
    """Mean of a results column over some runs.

    Args:
        items: per-run dicts with ``row``.
        metric: results column (e.g. ``best_val_loss`` in nats/char).
        ok_only: use only runs whose status is ``ok``.

    Returns:
        The mean of the finite values, or None when there is none.
    """
    vs = [finite_or_none(it["row"].get(metric)) for it in items
          if (not ok_only or it["row"]["status"] in OK_STATUSES)]
    vs = [v for v in vs if v is not None]
    return st.mean(vs) if vs else None
