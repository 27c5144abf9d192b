"""Sweeps: many ordinary runs over a grid of config fields, then one comparison.

A sweep is a list of *experiments*; each has a base config (nested ``data`` / ``model`` /
``train`` dict, dotted keys allowed) and a *grid*: dotted config field -> list of values. The
cartesian product of an experiment's grid gives its runs. Every run is an ordinary run
directory (``SWEEP_DIR/runs/<name>``) made by :func:`depthlab.train.train`, so ``depthlab
sample``, ``diagnose`` and ``report`` work on each one.

Layout of a sweep directory::

    SWEEP_DIR/
      sweep.json          the resolved plan: experiments, grid, every run's config
      runs/<name>/        one run directory per grid point (+ sweep_status.json, init_probe.json, train.log)
      results.csv         one row per run (see RESULT_COLUMNS), written at the end
      results.md          the same as a Markdown table
      report.html, *.png  the comparison report (:func:`depthlab.report.sweep.build_sweep_report`)

Runs execute in worker processes (``spawn``; default one per core, each with torch threads =
cores // workers), largest first. Every run of an experiment gets the same budget (the same
``train.max_iters``). Stopping a sweep and starting it again skips finished runs (those with a
``summary.json``, and deterministic failures such as a non-finite loss) and deletes and restarts
unfinished ones. A failing run is a result (``status`` ``nonfinite``, ``error``, ...), not a
crash of the sweep.

Precedence of settings, lowest first: dataclass defaults < :data:`SWEEP_DEFAULTS` < profile or
file ``base`` < experiment ``base`` < dotted command-line overrides (``--train.max_iters 300``)
< the grid point's values.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
import math
import os
import re
import shutil
import signal
import sys
import time
import typing
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from .errors import DepthlabError

__all__ = ["Experiment", "SweepSpec", "RunPoint", "PROFILES", "SWEEP_DEFAULTS", "RESULT_COLUMNS",
           "parse_grid_arg", "parse_override", "coerce_value", "load_sweep_file", "profile_spec",
           "expand", "run_sweep", "collect_results", "write_results", "cmd_sweep",
           "init_probe", "corpus_baselines", "estimate_seconds"]

SECTIONS = ("data", "model", "train")

#: Settings every sweep run gets unless the profile, file or command line says otherwise.
#: ``max_time`` 0: every run of a sweep gets the same step budget, never a wall-clock cut.
SWEEP_DEFAULTS: dict[str, Any] = {"train.progress": False, "train.tensorboard": False, "train.keep_last": 1,
                                  "train.max_time": 0.0}

#: Leading columns of results.csv / results.md; the varied fields and :data:`METRIC_COLUMNS` follow.
RESULT_COLUMNS = ["n_layer", "variant", "seed", "final_train_loss", "final_val_loss", "best_val_loss",
                  "wall_time_s", "status"]
#: Trailing columns: bits/char of best_val_loss, training throughput, grad-norm ratio first/last
#: block (last gradient record), rank measure at the last block (last probe), diagnosis rules.
METRIC_COLUMNS = ["best_val_bpc", "tokens_per_sec", "grad_ratio_first_last", "last_block_rank",
                  "diagnosis", "run", "message"]

#: Statuses that count as a finished, usable run.
OK_STATUSES = ("ok",)
#: Statuses that are kept on restart (deterministic outcomes); other failures are redone.
FINAL_STATUSES = ("ok", "nonfinite")

STATUS_FILE = "sweep_status.json"
INIT_PROBE_FILE = "init_probe.json"

# --------------------------------------------------------------------------- profiles
# The quick recipe: one recipe for every variant of a depth (no per-variant tuning). Measured on a
# 2-core CPU in float32 (pinned: bf16 autocast changes the numbers); see README for the table over
# two seeds.
_QUICK_BASE = {
    "model": {"n_embd": 32, "n_head": 4, "block_size": 64, "dropout": 0.0},
    "train": {"dtype": "float32", "batch_size": 16, "max_iters": 500, "learning_rate": 1e-2, "min_lr": 1e-3,
              "warmup_iters": 50, "eval_interval": 100, "eval_iters": 20, "log_interval": 50,
              "grad_log_interval": 100, "probe_interval": 250, "seed": 1},
}

PROFILES: dict[str, dict] = {
    "quick": {
        "description": "depths 1,2,4,8,16 x plain, prenorm at width 32, 500 steps: degradation without "
                       "shortcuts and its cure; measured 80 s on an idle 2-core CPU",
        "base": _QUICK_BASE,
        "experiments": [{"name": "depth", "grid": {"model.n_layer": [1, 2, 4, 8, 16],
                                                   "model.variant": ["plain", "prenorm"]}}],
    },
    "full": {
        "description": "all five variants x depths 1..32, two seeds, 2000 steps at width 64; "
                       "estimated 3 h on an idle 2-core CPU (see --dry-run)",
        "base": {
            "model": {"n_embd": 64, "n_head": 4, "block_size": 64, "dropout": 0.0},
            "train": {"dtype": "float32", "batch_size": 16, "max_iters": 2000, "learning_rate": 2e-3, "min_lr": 2e-4,
                      "warmup_iters": 100, "eval_interval": 200, "eval_iters": 20, "log_interval": 100,
                      "grad_log_interval": 200, "probe_interval": 500},
        },
        "experiments": [{"name": "depth", "grid": {
            "model.n_layer": [1, 2, 4, 8, 16, 32],
            "model.variant": ["plain", "postnorm", "prenorm", "rezero", "deepnorm"],
            "train.seed": [1, 2]}}],
    },
    "science": {
        "description": "small experiments tied to published claims (rank collapse, degradation, "
                       "post-LN warmup, ReZero speed, DeepNorm stability); measured 9 min on a 2-core CPU "
                       "2-core CPU",
        "base": _QUICK_BASE,
        "experiments": [
            # Dong et al. 2021: only the init probe matters; one step keeps it a real run directory.
            {"name": "rank_init", "base": {"train": {"max_iters": 1, "eval_interval": 1, "eval_iters": 1,
                                                     "warmup_iters": 0, "grad_log_interval": 1,
                                                     "probe_interval": 1}},
             "grid": {"model.n_layer": [4, 16, 32],
                      "model.variant": ["plain", "postnorm", "prenorm", "rezero", "deepnorm"],
                      "train.seed": [1, 2]}},
            # He et al. 2016 (for CNNs): equal step budget, plain vs residual variants.
            {"name": "degradation",
             "grid": {"model.n_layer": [2, 8, 16], "model.variant": ["plain", "postnorm", "prenorm"],
                      "train.seed": [1, 2]}},
            # Xiong et al. 2020: post-LN without warmup at a high lr; PyTorch init vs GPT-2 init.
            {"name": "postln_warmup",
             "base": {"model": {"n_layer": 16}, "train": {"max_iters": 300, "learning_rate": 1e-2,
                                                          "min_lr": 1e-3, "eval_interval": 50}},
             "grid": {"model.variant": ["postnorm", "prenorm"], "model.init": ["torch", "gpt2"],
                      "train.warmup_iters": [0, 100]}},
            # Bachlechner et al. 2020: steps to a target val loss, lr swept per variant.
            {"name": "rezero_speed",
             "base": {"model": {"n_layer": 8}, "train": {"max_iters": 400, "eval_interval": 25,
                                                         "warmup_iters": 20}},
             "grid": {"model.variant": ["rezero", "prenorm", "postnorm"],
                      "train.learning_rate": [1e-3, 3e-3, 1e-2]},
             "target_val_loss": 2.6},
            # Wang et al. 2022: DeepNorm keeps post-LN trainable at depth and lr where post-LN fails.
            {"name": "deepnorm_depth",
             "base": {"train": {"max_iters": 300, "warmup_iters": 20, "eval_interval": 50}},
             "grid": {"model.variant": ["postnorm", "deepnorm"], "model.n_layer": [16, 32],
                      "train.learning_rate": [3e-3, 1e-2]}},
        ],
    },
}


# --------------------------------------------------------------------------- spec objects
@dataclasses.dataclass
class Experiment:
    """One grid of runs sharing a base config.

    Attributes:
        name: short name ('' for a plain command-line sweep); becomes a folder under ``runs/``.
        base: nested or dotted config overrides for every run of this experiment.
        grid: dotted field -> list of values; runs are the cartesian product, in key order.
        extra: free-form settings read by the report (e.g. ``target_val_loss``).
    """

    name: str = ""
    base: dict = dataclasses.field(default_factory=dict)
    grid: dict = dataclasses.field(default_factory=dict)
    extra: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class SweepSpec:
    """A whole sweep: a shared base, experiments, and command-line overrides.

    Attributes:
        experiments: the grids.
        base: overrides for every run (below each experiment's own ``base``).
        overrides: dotted overrides from the command line (above every base, below the grid).
        profile: name of the profile it came from, if any.
    """

    experiments: list = dataclasses.field(default_factory=list)
    base: dict = dataclasses.field(default_factory=dict)
    overrides: dict = dataclasses.field(default_factory=dict)
    profile: Optional[str] = None


@dataclasses.dataclass
class RunPoint:
    """One run of a sweep.

    Attributes:
        name: path of the run directory relative to ``SWEEP_DIR/runs`` (``exp/field-value_...``).
        experiment: the experiment's name.
        point: the grid values of this run (dotted field -> value).
        config: the full nested run config (``out_dir`` set), as accepted by ``RunConfig.from_dict``.
    """

    name: str
    experiment: str
    point: dict
    config: dict


# --------------------------------------------------------------------------- values and keys
def _field_types() -> dict[str, dict[str, Any]]:
    from .config import DataConfig, ModelConfig, TrainConfig

    return {s: typing.get_type_hints(k) for s, k in
            (("data", DataConfig), ("model", ModelConfig), ("train", TrainConfig))}


def _check_key(key: str, what: str) -> tuple[str, str]:
    """Split ``section.field`` and check both exist."""
    parts = key.split(".")
    if len(parts) != 2 or not all(parts):
        raise DepthlabError(f"{what} {key!r}: expected SECTION.FIELD with SECTION one of "
                            f"{', '.join(SECTIONS)} (e.g. model.n_layer)")
    sec, name = parts
    types = _field_types()
    if sec not in types:
        raise DepthlabError(f"{what} {key!r}: unknown section {sec!r} (allowed: {', '.join(SECTIONS)})")
    if name not in types[sec]:
        raise DepthlabError(f"{what} {key!r}: unknown field {name!r} in {sec} "
                            f"(known: {', '.join(sorted(types[sec]))})")
    if key == "train.out_dir":
        raise DepthlabError(f"{what} {key!r}: the sweep sets each run's out_dir; use --out-dir for the sweep")
    return sec, name


def coerce_value(key: str, value: Any) -> Any:
    """Convert ``value`` (often text from the command line) to the type of config field ``key``.

    Args:
        key: dotted field name, e.g. ``model.n_layer`` or ``train.learning_rate``.
        value: text or an already typed value (from YAML).

    Returns:
        The value with the field's type (int, float, bool, str or None); range checks happen
        later, when the run config is built.

    Raises:
        DepthlabError: unknown field, or a value that cannot be read as the field's type
            (the message names the field and the value).
    """
    sec, name = _check_key(key, "config field")
    tp = _field_types()[sec][name]
    args = typing.get_args(tp)
    optional = type(None) in args
    if optional:
        inner = [a for a in args if a is not type(None)]
        tp = inner[0] if inner else str
        args = typing.get_args(tp)
    if isinstance(value, str):
        v = value.strip()
        if optional and v.lower() in ("none", "null", "~", ""):
            return None
    else:
        v = value
    try:
        if typing.get_origin(tp) is typing.Literal:
            if str(v) not in [str(a) for a in args]:
                raise ValueError(f"expected one of {', '.join(map(str, args))}")
            return str(v)
        if tp is bool:
            if isinstance(v, bool):
                return v
            s = str(v).lower()
            if s in ("true", "1", "yes", "on"):
                return True
            if s in ("false", "0", "no", "off"):
                return False
            raise ValueError("expected true or false")
        if tp is int:
            if isinstance(v, bool):
                raise ValueError("expected an integer")
            if isinstance(v, float):
                if not v.is_integer():
                    raise ValueError("expected an integer")
                return int(v)
            return int(str(v))
        if tp is float:
            if isinstance(v, bool):
                raise ValueError("expected a number")
            return float(v)
        return str(v)
    except (TypeError, ValueError) as e:
        msg = str(e) if "expected" in str(e) else f"expected {getattr(tp, '__name__', tp)}"
        raise DepthlabError(f"{key}: cannot use {value!r} ({msg})") from None


def parse_grid_arg(text: str) -> tuple[str, list]:
    """Parse one ``--grid`` argument ``SECTION.FIELD=V1,V2,...``.

    Args:
        text: e.g. ``model.n_layer=1,2,4`` or ``train.learning_rate=1e-3,3e-3``.

    Returns:
        (dotted field, list of typed values), duplicates removed, order kept.

    Raises:
        DepthlabError: missing ``=``, unknown field, empty value list or empty value, or a value
            of the wrong type; the message names the problem.
    """
    if "=" not in text:
        raise DepthlabError(f"--grid {text!r}: expected SECTION.FIELD=V1,V2,... "
                            "(e.g. --grid model.n_layer=1,2,4)")
    key, _, vals = text.partition("=")
    key = key.strip()
    _check_key(key, "--grid")
    items = [s.strip() for s in vals.split(",")]
    if not vals.strip() or any(s == "" for s in items):
        raise DepthlabError(f"--grid {text!r}: empty value in the list; give comma-separated values "
                            "like 1,2,4")
    out: list = []
    for s in items:
        v = coerce_value(key, s)
        if v not in out:
            out.append(v)
    return key, out


def parse_override(flag: str, value: str) -> tuple[str, Any]:
    """Parse a dotted override ``--SECTION.FIELD VALUE``.

    Args:
        flag: the flag with or without leading dashes (``--train.max_iters``).
        value: its text value.

    Returns:
        (dotted field, typed value).

    Raises:
        DepthlabError: unknown field or a value of the wrong type.
    """
    return flag.lstrip("-"), coerce_value(flag.lstrip("-"), value)


def _flatten(d: dict, what: str) -> dict[str, Any]:
    """``{"model": {"n_layer": 2}, "train.seed": 1}`` -> ``{"model.n_layer": 2, "train.seed": 1}``."""
    if not isinstance(d, dict):
        raise DepthlabError(f"{what} must be a mapping, got {type(d).__name__}")
    out = {}
    for k, v in d.items():
        k = str(k)
        if "." in k:
            out[k] = coerce_value(k, v)
        elif k in SECTIONS:
            if not isinstance(v, dict):
                raise DepthlabError(f"{what}: section {k!r} must be a mapping, got {type(v).__name__}")
            for f, fv in v.items():
                out[f"{k}.{f}"] = coerce_value(f"{k}.{f}", fv)
        else:
            raise DepthlabError(f"{what}: unknown key {k!r} (expected sections {', '.join(SECTIONS)} "
                                "or dotted fields like model.n_layer)")
    return out


def _grid(d: Any, what: str) -> dict[str, list]:
    if not isinstance(d, dict) or not d:
        raise DepthlabError(f"{what}: the grid must be a non-empty mapping FIELD: [values]")
    out = {}
    for k, vals in d.items():
        k = str(k)
        _check_key(k, f"{what} key")
        if isinstance(vals, str):
            vals = [s.strip() for s in vals.split(",")]
        if not isinstance(vals, (list, tuple)):
            vals = [vals]
        if not vals:
            raise DepthlabError(f"{what}: {k} has no values")
        typed = []
        for v in vals:
            cv = coerce_value(k, v)
            if cv not in typed:
                typed.append(cv)
        out[k] = typed
    return out


def _experiment(d: dict, what: str) -> Experiment:
    if not isinstance(d, dict):
        raise DepthlabError(f"{what} must be a mapping with keys name, base, grid")
    name = str(d.get("name", "") or "")
    if name and not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise DepthlabError(f"{what}: experiment name {name!r} may only use letters, digits, _ . -")
    extra = {k: v for k, v in d.items() if k not in ("name", "base", "grid")}
    return Experiment(name=name, base=_flatten(d.get("base") or {}, f"{what} base"),
                      grid=_grid(d.get("grid"), f"{what} grid"), extra=extra)


def _spec_from_mapping(d: dict, what: str, profile: Optional[str] = None) -> SweepSpec:
    if not isinstance(d, dict):
        raise DepthlabError(f"{what} must be a mapping with keys base and grid (or experiments)")
    allowed = {"base", "grid", "experiments", "description", "workers"}
    bad = sorted(set(map(str, d)) - allowed)
    if bad:
        raise DepthlabError(f"{what}: unknown key(s) {', '.join(bad)} (allowed: {', '.join(sorted(allowed))})")
    if ("grid" in d) == ("experiments" in d):
        raise DepthlabError(f"{what}: give either grid (one experiment) or experiments (a list), not "
                            f"{'both' if 'grid' in d else 'neither'}")
    if "grid" in d:
        exps = [_experiment({"grid": d["grid"]}, what)]
    else:
        if not isinstance(d["experiments"], list) or not d["experiments"]:
            raise DepthlabError(f"{what}: experiments must be a non-empty list")
        exps = [_experiment(e, f"{what} experiment {i + 1}") for i, e in enumerate(d["experiments"])]
        names = [e.name for e in exps]
        if len(set(names)) != len(names) or (len(exps) > 1 and "" in names):
            raise DepthlabError(f"{what}: experiments need distinct non-empty names, got {names}")
    return SweepSpec(experiments=exps, base=_flatten(d.get("base") or {}, f"{what} base"), profile=profile)


def profile_spec(name: str) -> SweepSpec:
    """The :class:`SweepSpec` of a built-in profile.

    Args:
        name: ``quick``, ``full`` or ``science``.

    Returns:
        A fresh spec (safe to modify).

    Raises:
        DepthlabError: unknown profile (lists the known ones).
    """
    if name not in PROFILES:
        raise DepthlabError(f"unknown sweep profile {name!r}; known: {', '.join(PROFILES)}")
    import copy

    return _spec_from_mapping(copy.deepcopy({k: v for k, v in PROFILES[name].items()}), f"profile {name}",
                              profile=name)


def load_sweep_file(path: str | Path) -> SweepSpec:
    """Read a sweep YAML file.

    The file holds ``base:`` (a run config: sections ``data``/``model``/``train`` or dotted
    keys; optional) and either ``grid:`` (dotted field -> list of values, or a comma-separated
    string) or ``experiments:`` (a list of ``{name, base, grid}``).

    Args:
        path: the YAML file.

    Returns:
        The parsed spec.

    Raises:
        DepthlabError: missing/unreadable file, invalid YAML, unknown keys or fields, bad values.
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise DepthlabError(f"sweep file {p} not found")
    try:
        d = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise DepthlabError(f"sweep file {p} is not valid YAML: {str(e).splitlines()[0]}") from None
    return _spec_from_mapping(d or {}, f"sweep file {p}")


# --------------------------------------------------------------------------- expansion
def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        s = f"{v:g}"
    else:
        s = str(v)
    return re.sub(r"[^A-Za-z0-9.+-]", "_", s)


def _nest(flat: dict[str, Any]) -> dict:
    out: dict = {s: {} for s in SECTIONS}
    for k, v in flat.items():
        sec, name = k.split(".")
        out[sec][name] = v
    return out


def expand(spec: SweepSpec, sweep_dir: str | Path) -> list[RunPoint]:
    """All runs of ``spec``, each with a full, validated config whose out_dir is under ``sweep_dir``.

    Args:
        spec: the sweep.
        sweep_dir: the sweep directory (run dirs go to ``sweep_dir/runs/<name>``).

    Returns:
        The runs in grid order (first grid key varies slowest).

    Raises:
        DepthlabError: a grid point whose config is invalid (names the run and the field), or two
            runs with the same name.
    """
    from .config import RunConfig

    sweep_dir = Path(sweep_dir)
    points: list[RunPoint] = []
    for exp in spec.experiments:
        keys = list(exp.grid)
        short = [k.split(".")[1] for k in keys]
        if len(set(short)) != len(short):
            short = [k.replace(".", "-") for k in keys]
        widths = {k: max(len(_fmt_value(v)) for v in exp.grid[k]) for k in keys
                  if all(isinstance(v, int) and not isinstance(v, bool) for v in exp.grid[k])}
        for combo in itertools.product(*(exp.grid[k] for k in keys)):
            point = dict(zip(keys, combo))
            parts = []
            for k, s, v in zip(keys, short, combo):
                fv = _fmt_value(v)
                if k in widths:
                    fv = fv.zfill(widths[k])
                parts.append(f"{s}-{fv}")
            name = "_".join(parts) or "run"
            if exp.name:
                name = f"{exp.name}/{name}"
            flat = dict(SWEEP_DEFAULTS)
            flat.update(spec.base)
            flat.update(exp.base)
            flat.update(spec.overrides)
            flat.update(point)
            flat["train.out_dir"] = str(sweep_dir / "runs" / name)
            flat["train.resume"] = False
            nested = _nest(flat)
            try:
                cfg = RunConfig.from_dict(nested)
            except DepthlabError as e:
                raise DepthlabError(f"sweep run {name}: {e}") from None
            points.append(RunPoint(name=name, experiment=exp.name, point=point, config=cfg.to_dict()))
    names = [p.name for p in points]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise DepthlabError(f"two sweep runs share the name {dup[0]}; give distinct grid values")
    return points


def varied_fields(spec: SweepSpec) -> list[str]:
    """Dotted fields that take more than one value across the sweep's grids.

    Args:
        spec: the sweep.

    Returns:
        Field names in first-seen order (these become results columns).
    """
    seen: dict[str, set] = {}
    for exp in spec.experiments:
        for k, vals in exp.grid.items():
            seen.setdefault(k, set()).update(map(repr, vals))
    return [k for k, v in seen.items() if len(v) > 1]


def estimate_seconds(config: dict, sec_per_gflop: float = 0.045) -> float:
    """Rough single-thread CPU time of one run, for scheduling and documentation.

    Counts 6 x parameters x tokens for the matmuls plus the attention scores, over the training
    steps and the evaluations, plus a per-block-per-step overhead (about 0.7 ms: kernel launches
    and the optimizer, which dominate at tiny widths) and a fixed start-up cost of 4 s.
    ``sec_per_gflop`` was measured on an
    idle 2-core x86 CPU, one thread, at width 32 (about 4 ms per block per 1024-token step);
    a busy machine is slower.

    Args:
        config: nested run config.
        sec_per_gflop: seconds per 10^9 floating-point operations, one thread.

    Returns:
        Estimated seconds.
    """
    m, t = config["model"], config["train"]
    C, L, T = m["n_embd"], m["n_layer"], m["block_size"]
    V = m.get("vocab_size") or 65
    per_tok = L * (C * C * (4 + 2 * m.get("ff_mult", 4)) + 2 * T * C) + V * C
    tokens = t["batch_size"] * t["grad_accum"] * T
    steps = t["max_iters"]
    evals = (steps // t["eval_interval"] + 2) * 2 * t["eval_iters"]
    flops = 6 * per_tok * tokens * steps + 2 * per_tok * t["batch_size"] * T * evals
    overhead = 0.7e-3 * (L + 1) * (steps + evals / 3)  # per-block kernel launches dominate tiny widths
    return flops / 1e9 * sec_per_gflop + overhead + 4.0


# --------------------------------------------------------------------------- init probe, baselines
def init_probe(config: dict) -> dict:
    """Gradient norm, activation RMS and rank measure per block of the freshly initialised model.

    Thin wrapper over :func:`depthlab.analytics.probe.probe_at_init` (same seed and init as
    the trainer, which reseeds afterwards, so the run's trajectory is unchanged).

    Args:
        config: nested run config (``RunConfig.to_dict()`` form).

    Returns:
        ``{"step": 0, "loss", "grad_norm_block": [L], "resid_rms": [L], "rank_measure": [L]}``
        (gradient L2 norms per block; rank measure of Dong et al. 2021: 0 for an all-zero block
        output, None where otherwise undefined).

    Raises:
        DepthlabError: bad config or corpus.
    """
    from .analytics.probe import probe_at_init
    from .config import RunConfig

    cfg = RunConfig.from_dict(json.loads(json.dumps(config)))
    r = probe_at_init(cfg)
    layers = r["layers"]
    # A block output that is exactly zero for every token (a deep plain stack underflows) has all
    # tokens equal: fully collapsed, so its measure is 0 rather than the undefined 0/0.
    ranks = [0.0 if la["rank_measure"] is None and la["act_rms"] is not None and la["act_rms"] < 1e-30
             else la["rank_measure"] for la in layers]
    return {"step": 0, "loss": r.get("loss"), "grad_norm_block": [la["grad_norm"] for la in layers],
            "resid_rms": [la["act_rms"] for la in layers], "rank_measure": ranks}


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
    from .analytics.baselines import corpus_baselines as cb
    from .config import DataConfig
    from .data import load_corpus

    corpus = load_corpus(DataConfig(**(data_config or {})))
    r = cb(corpus.train, corpus.val, corpus.tokenizer.vocab_size)
    return {k: float(r[k]["nats"]) for k in ("uniform", "unigram", "bigram")}


# --------------------------------------------------------------------------- one run (worker side)
def _status_path(run_dir: Path) -> Path:
    return run_dir / STATUS_FILE


def _write_json(path: Path, obj: Any) -> None:
    from .checkpoint import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(obj, indent=2).encode())


def _execute(job: dict) -> dict:
    """Run one sweep point; never raises for a failing run (the status says what happened).

    Args:
        job: ``{"name", "config", "threads"}``.

    Returns:
        ``{"name", "status", "message", "wall_s"}``; the same is written to
        ``run_dir/sweep_status.json``.
    """
    import torch

    from .config import RunConfig
    from .errors import NonFiniteError
    from .analytics import train
    from .trainer import Interrupted

    old_threads = torch.get_num_threads()
    if job.get("threads"):
        torch.set_num_threads(int(job["threads"]))
    run_dir = Path(job["config"]["train"]["out_dir"])
    pending: list[str] = []

    def log(msg: str) -> None:  # run output goes to run_dir/train.log, not the sweep console
        pending.append(msg)
        if run_dir.is_dir():
            with open(run_dir / "train.log", "a", encoding="utf-8") as f:
                f.write("\n".join(pending) + "\n")
            pending.clear()

    t0 = time.time()
    status, message = "ok", ""
    probe = None
    try:
        probe = init_probe(job["config"])
    except Exception as e:  # noqa: BLE001 - the probe is optional; the run decides the status
        message = f"init probe failed: {type(e).__name__}: {e}"
    try:
        cfg = RunConfig.from_dict(json.loads(json.dumps(job["config"])))
        train(cfg, log=log)
        summ = json.loads((run_dir / "summary.json").read_text())
        if summ.get("final_step", 0) < cfg.train.max_iters:
            status, message = "time_capped", f"stopped by train.max_time at step {summ.get('final_step')}"
    except NonFiniteError as e:
        status, message = "nonfinite", str(e)
    except Interrupted as e:
        status, message = "interrupted", str(e)
    except KeyboardInterrupt:
        status, message = "interrupted", "interrupted"
    except DepthlabError as e:
        status, message = "error", str(e)
    except Exception as e:  # noqa: BLE001 - a failing run is a result, not a crash of the sweep
        status, message = "error", f"{type(e).__name__}: {e}"
    torch.set_num_threads(old_threads)  # in-process runs leave the caller's setting as it was
    res = {"name": job["name"], "status": status, "message": re.sub(r"\s+", " ", message).strip()[:500],
           "wall_s": round(time.time() - t0, 3), "threads": job.get("threads")}
    try:
        if probe is not None:
            _write_json(run_dir / INIT_PROBE_FILE, probe)
        _write_json(_status_path(run_dir), res)
    except OSError:
        pass
    return res


def _child_main(job: dict) -> None:
    """Entry point of a worker process (spawn): run one point; the status file says the rest.

    Args:
        job: see :func:`_execute`.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the trainer installs its own handler
    res = _execute(job)
    sys.exit(0 if res["status"] != "interrupted" else 130)


# --------------------------------------------------------------------------- the sweep (parent side)
def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _comparable(cfg: dict) -> dict:
    c = json.loads(json.dumps(cfg))
    c["model"].pop("vocab_size", None)
    for k in ("out_dir", "resume", "progress", "threads"):
        c["train"].pop(k, None)
    return c


def _config_diff(a: dict, b: dict) -> list[str]:
    a, b = _comparable(a), _comparable(b)
    out = []
    for sec in SECTIONS:
        for k in sorted(set(a.get(sec, {})) | set(b.get(sec, {}))):
            if a.get(sec, {}).get(k) != b.get(sec, {}).get(k):
                out.append(f"{sec}.{k}: {b.get(sec, {}).get(k)!r} there, {a.get(sec, {}).get(k)!r} now")
    return out


def _looks_like_run(d: Path) -> bool:
    return not any(d.iterdir()) or any((d / f).exists() for f in ("config.json", STATUS_FILE, "train.log"))


def plan(points: Sequence[RunPoint], sweep_dir: Path, rerun: bool = False) -> tuple[list[RunPoint], list[RunPoint]]:
    """Split runs into (already done, to do), checking finished runs still match their config.

    A run is done when its ``summary.json`` exists (or it ended with a deterministic failure
    such as ``nonfinite``) and its ``config.json`` matches the requested config.

    Args:
        points: the sweep's runs.
        sweep_dir: the sweep directory.
        rerun: redo every run.

    Returns:
        (done, todo).

    Raises:
        DepthlabError: a finished run whose config differs from the requested one (use another
            ``--out-dir`` or ``--rerun``).
    """
    done, todo = [], []
    for p in points:
        rd = sweep_dir / "runs" / p.name
        finished = (rd / "summary.json").exists()
        st = {}
        if _status_path(rd).exists():
            try:
                st = json.loads(_status_path(rd).read_text())
            except ValueError:
                st = {}
        final = finished or st.get("status") in FINAL_STATUSES
        if final and not rerun and (rd / "config.json").exists():
            old = json.loads((rd / "config.json").read_text())
            diff = _config_diff(p.config, old)
            if diff:
                raise DepthlabError(f"sweep run {rd} was made with a different config ({diff[0]}); use another "
                                    "--out-dir, or --rerun to redo every run")
            done.append(p)
        else:
            todo.append(p)
    return done, todo


def _clear_run_dir(rd: Path) -> None:
    if rd.exists():
        if not rd.is_dir() or not _looks_like_run(rd):
            raise DepthlabError(f"{rd} exists and is not a depthlab run directory; refusing to delete it")
        shutil.rmtree(rd)


def _run_jobs(jobs: list[dict], workers: int, log: Callable[[str], None], total: int, n_done: int) -> list[dict]:
    """Run jobs, ``workers`` at a time: in this process when 1, else one spawned process per run."""
    results: list[dict] = []
    counter = [n_done]

    def report(res: dict) -> None:
        counter[0] += 1
        rd = Path(res["run_dir"])
        extra = ""
        if (rd / "summary.json").exists():
            try:
                s = json.loads((rd / "summary.json").read_text())
                extra = f" best val {s['best_val_loss']:.4f} nats"
            except (ValueError, KeyError, TypeError):
                pass
        msg = f" ({res['message'][:120]})" if res["status"] != "ok" and res.get("message") else ""
        log(f"[{counter[0]}/{total}] {res['name']}: {res['status']}{extra} in {res['wall_s']:.1f}s{msg}")

    if workers <= 1:
        for job in jobs:
            res = _execute(job)
            res["run_dir"] = job["config"]["train"]["out_dir"]
            results.append(res)
            report(res)
            if res["status"] == "interrupted":
                raise KeyboardInterrupt
        return results

    import multiprocessing as mp
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")
    queue = list(jobs)
    running: dict = {}  # sentinel -> (process, job, start time)
    interrupted = False
    old_term = None

    def on_term(signum, frame):
        raise KeyboardInterrupt

    import threading

    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, on_term)
    try:
        while queue or running:
            while queue and len(running) < workers and not interrupted:
                job = queue.pop(0)
                p = ctx.Process(target=_child_main, args=(job,), name=f"depthlab-sweep:{job['name']}")
                p.start()
                running[p.sentinel] = (p, job, time.time())
            if not running:
                break
            for s in wait(list(running)):
                p, job, t0 = running.pop(s)
                p.join()
                rd = Path(job["config"]["train"]["out_dir"])
                res = None
                if _status_path(rd).exists():
                    try:
                        res = json.loads(_status_path(rd).read_text())
                    except ValueError:
                        res = None
                if res is None or res.get("name") != job["name"]:
                    res = {"name": job["name"], "status": "error",
                           "message": f"worker process exited with code {p.exitcode} without a result",
                           "wall_s": round(time.time() - t0, 3), "threads": job.get("threads")}
                    try:
                        _write_json(_status_path(rd), res)
                    except OSError:
                        pass
                res["run_dir"] = str(rd)
                results.append(res)
                report(res)
                if res["status"] == "interrupted":
                    interrupted = True
        if interrupted:
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        # Ask the running workers to stop (they checkpoint and exit), then make sure they are gone.
        for p, _, _ in running.values():
            if p.is_alive():
                p.terminate()
        deadline = time.time() + 30
        for p, _, _ in running.values():
            p.join(max(0.1, deadline - time.time()))
            if p.is_alive():
                p.kill()
                p.join()
        raise
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
    return results


def _spec_to_json(spec: SweepSpec) -> dict:
    return {"profile": spec.profile, "base": spec.base, "overrides": spec.overrides,
            "experiments": [dataclasses.asdict(e) for e in spec.experiments]}


def run_sweep(spec: SweepSpec, out_dir: str | Path, workers: int = 0, report: bool = True,
              rerun: bool = False, log: Callable[[str], None] = print, threads: int = 0) -> Path:
    """Run every point of ``spec`` (skipping finished ones), write the results and the report.

    Args:
        spec: the sweep.
        out_dir: the sweep directory (created; an existing sweep there is continued).
        workers: worker processes; 0 = one per core. 1 runs in this process. Each worker gets
            torch threads = cores // workers (at least 1).
        report: build ``report.html`` at the end.
        rerun: delete and redo every run, finished or not.
        log: ``callable(str)`` for the one-line-per-run progress.
        threads: torch threads per run; 0 = cores // workers (at least 1).

    Returns:
        The sweep directory.

    Raises:
        DepthlabError: a bad grid or config (before any run starts), an ``out_dir`` that is a file
            or a non-sweep folder, or a finished run whose config differs.
        KeyboardInterrupt: the sweep was interrupted (running workers were stopped; run the same
            command again to finish it).
    """
    from .config import DataConfig
    from .data import load_corpus

    sweep_dir = Path(out_dir)
    points = expand(spec, sweep_dir)
    if sweep_dir.exists():
        if not sweep_dir.is_dir():
            raise DepthlabError(f"--out-dir {sweep_dir} is a file; choose a folder")
        if any(sweep_dir.iterdir()) and not (sweep_dir / "sweep.json").exists():
            raise DepthlabError(f"--out-dir {sweep_dir} exists and is not a sweep directory (no sweep.json); "
                                "choose a new --out-dir")
    done, todo = plan(points, sweep_dir, rerun=rerun)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    meta = {"spec": _spec_to_json(spec), "varied": varied_fields(spec), "created": time.strftime("%Y-%m-%d %H:%M:%S"),
            "runs": [dataclasses.asdict(p) for p in points]}
    _write_json(sweep_dir / "sweep.json", meta)
    # Warm the token cache once so workers do not race to build it.
    for dc in {json.dumps(p.config["data"], sort_keys=True) for p in points}:
        load_corpus(DataConfig(**json.loads(dc)))
    cores = _cores()
    workers = workers or cores
    n_workers = max(1, min(workers, len(todo))) if todo else 1
    threads = threads or max(1, cores // n_workers)
    todo.sort(key=lambda p: -estimate_seconds(p.config))  # longest first: shortest makespan
    est = sum(estimate_seconds(p.config) for p in todo)
    log(f"sweep {sweep_dir}: {len(points)} runs, {len(done)} already finished, {len(todo)} to run on "
        f"{n_workers} worker(s) x {threads} thread(s) (rough estimate {est / n_workers / 60:.1f} min)")
    jobs = []
    for p in todo:
        _clear_run_dir(sweep_dir / "runs" / p.name)
        jobs.append({"name": p.name, "config": p.config, "threads": threads})
    t0 = time.time()
    try:
        results = _run_jobs(jobs, n_workers, log, len(points), len(done))
    finally:
        try:
            write_results(sweep_dir)
        except Exception as e:  # noqa: BLE001 - never hide the original error
            log(f"warning: could not write results: {type(e).__name__}: {e}")
    failed = [r for r in results if r["status"] not in OK_STATUSES]
    if results:
        log(f"sweep finished in {time.time() - t0:.1f}s: {len(results) - len(failed)} ok, {len(failed)} not ok "
            f"-> {sweep_dir / 'results.csv'}")
    else:
        log(f"nothing to run: all {len(points)} runs had finished -> {sweep_dir / 'results.csv'}")
    if report:
        from .report.sweep import build_sweep_report

        path = build_sweep_report(sweep_dir)
        log(f"report: {path}")
    return sweep_dir


# --------------------------------------------------------------------------- results
def _read_jsonl_records(run_dir: Path) -> list[dict]:
    from .rundir import read_metrics

    return read_metrics(run_dir)


def _num(v: Any) -> Optional[float]:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f


def _lookup(config: dict, key: str) -> Any:
    sec, name = key.split(".")
    return config.get(sec, {}).get(name)


def load_sweep(sweep_dir: str | Path) -> dict:
    """The ``sweep.json`` of a sweep directory.

    Args:
        sweep_dir: a directory written by :func:`run_sweep`.

    Returns:
        ``{"spec", "varied", "created", "runs": [RunPoint as dict]}``.

    Raises:
        DepthlabError: not a sweep directory.
    """
    p = Path(sweep_dir) / "sweep.json"
    if not p.is_file():
        raise DepthlabError(f"{sweep_dir} is not a sweep directory (no sweep.json)")
    return json.loads(p.read_text())


def run_details(run_dir: str | Path) -> dict:
    """Everything the report needs from one run directory (missing pieces are empty).

    Args:
        run_dir: a run directory of the sweep.

    Returns:
        ``{"summary", "status", "config", "evals" [(step, train_loss, val_loss)], "grad"
        [records with grad_norm_block], "probe" [records with rank_measure], "init_probe",
        "diagnosis" [rule names]}``.
    """
    rd = Path(run_dir)

    def js(name):
        try:
            return json.loads((rd / name).read_text())
        except (OSError, ValueError):
            return None

    recs = _read_jsonl_records(rd)
    evals = [(r["step"], _num(r.get("train_loss")), _num(r.get("val_loss"))) for r in recs
             if "val_loss" in r and "step" in r]
    grad = [r for r in recs if r.get("kind") == "grad" and isinstance(r.get("grad_norm_block"), list)]
    probe = [r for r in recs if r.get("kind") == "probe" and isinstance(r.get("rank_measure"), list)]
    diag = js("diagnosis.json") or {}
    rules = []
    for f in diag.get("findings", []) if isinstance(diag, dict) else []:
        if isinstance(f, dict) and f.get("rule") and f["rule"] not in rules:
            rules.append(str(f["rule"]))
    return {"summary": js("summary.json"), "status": js(STATUS_FILE), "config": js("config.json"),
            "evals": evals, "grad": grad, "probe": probe, "init_probe": js(INIT_PROBE_FILE), "diagnosis": rules}


def collect_results(sweep_dir: str | Path) -> tuple[list[dict], list[str]]:
    """One result row per run of the sweep, read from the run directories.

    Args:
        sweep_dir: a sweep directory.

    Returns:
        (rows, columns): rows are dicts keyed by the columns (numbers as floats, missing = None);
        columns = :data:`RESULT_COLUMNS` + varied fields (+ ``experiment``) + :data:`METRIC_COLUMNS`.

    Raises:
        DepthlabError: not a sweep directory.
    """
    sweep_dir = Path(sweep_dir)
    meta = load_sweep(sweep_dir)
    varied = [k for k in meta.get("varied", []) if k not in ("model.n_layer", "model.variant", "train.seed")]
    multi = len({r["experiment"] for r in meta["runs"]}) > 1
    columns = RESULT_COLUMNS + (["experiment"] if multi else []) + varied + METRIC_COLUMNS
    rows = []
    for run in meta["runs"]:
        rd = sweep_dir / "runs" / run["name"]
        d = run_details(rd)
        cfg = d["config"] or run["config"]
        s, st = d["summary"] or {}, d["status"] or {}
        evals = [e for e in d["evals"] if e[2] is not None]
        finite = [e[2] for e in evals if math.isfinite(e[2])]
        status = st.get("status") or ("ok" if d["summary"] else ("running" if rd.exists() else "pending"))
        if d["summary"] and status in ("running", "interrupted", "error") and not st:
            status = "ok"
        best = _num(s.get("best_val_loss")) if s else (min(finite) if finite else None)
        if best is not None and not math.isfinite(best):
            best = None
        row = {
            "n_layer": cfg["model"]["n_layer"], "variant": cfg["model"]["variant"], "seed": cfg["train"]["seed"],
            "final_train_loss": _num(s.get("final_train_loss")) if s else (evals[-1][1] if evals else None),
            "final_val_loss": _num(s.get("final_val_loss")) if s else (evals[-1][2] if evals else None),
            "best_val_loss": best,
            "wall_time_s": _num(s.get("wall_time_s")) if s else _num(st.get("wall_s")),
            "status": status,
        }
        if multi:
            row["experiment"] = run["experiment"]
        for k in varied:
            row[k] = _lookup(cfg, k)
        row["best_val_bpc"] = best / math.log(2) if best is not None else None
        row["tokens_per_sec"] = _num(s.get("tokens_per_sec")) if s else None
        row["grad_ratio_first_last"] = None
        if d["grad"]:
            g = d["grad"][-1]["grad_norm_block"]
            if g and _num(g[-1]) and _num(g[0]) is not None and _num(g[-1]) > 0:
                row["grad_ratio_first_last"] = _num(g[0]) / _num(g[-1])
        row["last_block_rank"] = _num(d["probe"][-1]["rank_measure"][-1]) if d["probe"] and \
            d["probe"][-1]["rank_measure"] else None
        row["diagnosis"] = ";".join(d["diagnosis"])
        row["run"] = f"runs/{run['name']}"
        row["message"] = st.get("message", "") if status != "ok" else ""
        rows.append(row)
    return rows, columns


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
            return f"{v:.4g}"
        return f"{v:.4f}".rstrip("0").rstrip(".") if abs(v) < 100 else f"{v:.1f}"
    return str(v)


def write_results(sweep_dir: str | Path) -> tuple[Path, Path]:
    """Write ``results.csv`` and ``results.md`` in the sweep directory from its run directories.

    Args:
        sweep_dir: a sweep directory.

    Returns:
        (csv path, markdown path).

    Raises:
        DepthlabError: not a sweep directory.
    """
    from .checkpoint import atomic_write

    sweep_dir = Path(sweep_dir)
    rows, columns = collect_results(sweep_dir)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([_cell(r.get(c)) for c in columns])
    atomic_write(sweep_dir / "results.csv", buf.getvalue().encode())
    md_cols = [c for c in columns if c != "message"]
    lines = ["| " + " | ".join(md_cols) + " |", "|" + "|".join("---" for _ in md_cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(_cell(r.get(c)).replace("|", "/") for c in md_cols) + " |")
    notes = [f"- `{r['run']}`: {r['status']}: {r['message']}" for r in rows if r.get("message")]
    text = ("# Sweep results\n\nLosses in nats per character; `best_val_bpc` in bits per character.\n\n"
            + "\n".join(lines) + "\n" + ("\n" + "\n".join(notes) + "\n" if notes else ""))
    atomic_write(sweep_dir / "results.md", text.encode())
    return sweep_dir / "results.csv", sweep_dir / "results.md"


# --------------------------------------------------------------------------- CLI
def _split_overrides(argv: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Pull ``--section.field VALUE`` / ``--section.field=VALUE`` out of argv."""
    rest, over = [], {}
    i = 0
    while i < len(argv):
        a = argv[i]
        m = re.match(r"^--(data|model|train)\.([A-Za-z0-9_]+)(=(.*))?$", a)
        if m:
            if m.group(3) is not None:
                val = m.group(4)
                i += 1
            else:
                if i + 1 >= len(argv):
                    raise DepthlabError(f"{a} needs a value")
                val = argv[i + 1]
                i += 2
            k, v = parse_override(a.split("=", 1)[0], val)
            over[k] = v
            continue
        rest.append(a)
        i += 1
    return rest, over


def cmd_sweep(argv: list[str]) -> int:
    """run a grid of training runs (e.g. depth x variant) and compare them in one report

    Args:
        argv: the arguments after ``sweep`` (see ``depthlab sweep --help``).

    Returns:
        0 when the sweep finished (failed runs are results, not errors), 130 when interrupted.

    Raises:
        DepthlabError: bad arguments, grid, file or config (CLI: one line, exit status 2).
    """
    from .cli import _Parser

    p = _Parser(prog="depthlab sweep",
                description="Run many ordinary training runs over a grid of config fields (in worker "
                            "processes), then write results.csv, results.md and report.html in the sweep "
                            "directory. Running the same command again skips finished runs and redoes "
                            "unfinished ones. Dotted flags (--train.max_iters 300, --model.n_embd 64) "
                            "apply to every run. Losses are in nats per character.",
                epilog=("profiles: " + "; ".join(f"{k}: {v['description']}" for k, v in PROFILES.items())))
    p.add_argument("--profile", choices=list(PROFILES), help="a built-in sweep (quick, full, science)")
    p.add_argument("-f", "--file", help="sweep YAML file (base: run config; grid: FIELD: [values], or experiments:)")
    p.add_argument("--grid", action="append", default=[], metavar="SECTION.FIELD=V1,V2",
                   help="a grid axis, e.g. model.n_layer=1,2,4 (repeatable; replaces that axis of a profile)")
    p.add_argument("--out-dir", help="sweep directory (default: sweeps/<profile>, or sweeps/sweep-<hash of the "
                                     "grid and settings>, so the same command continues the same sweep)")
    p.add_argument("--workers", type=int, default=0, help="worker processes (0 = one per core; 1 = in this process)")
    p.add_argument("--threads", type=int, default=0, help="torch threads per run (0 = cores // workers)")
    p.add_argument("--rerun", action="store_true", help="redo every run, even finished ones")
    p.add_argument("--no-report", action="store_true", help="skip report.html (results.csv/md are still written)")
    p.add_argument("--only", metavar="NAME[,NAME]",
                   help="run only these experiments of a profile or file (e.g. --profile science --only rank_init)")
    p.add_argument("--dry-run", action="store_true", help="list the runs and the time estimate, run nothing")
    rest, overrides = _split_overrides(list(argv))
    a = p.parse_args(rest)
    if a.workers < 0 or a.threads < 0:
        raise DepthlabError(f"--workers and --threads must be >= 0, got {a.workers} and {a.threads}")
    if a.profile and a.file:
        raise DepthlabError("give either --profile or --file, not both")
    if a.profile:
        spec = profile_spec(a.profile)
    elif a.file:
        spec = load_sweep_file(a.file)
    else:
        spec = SweepSpec(experiments=[Experiment()])
    if a.only:
        want = [w.strip() for w in a.only.split(",") if w.strip()]
        names = [e.name for e in spec.experiments]
        bad = [w for w in want if w not in names]
        if bad or not want:
            raise DepthlabError(f"--only {a.only!r}: unknown experiment(s) {', '.join(bad) or '(none given)'}; "
                                f"this sweep has: {', '.join(n or '(unnamed)' for n in names)}")
        spec.experiments = [e for e in spec.experiments if e.name in want]
    grid = dict(parse_grid_arg(g) for g in a.grid)
    for exp in spec.experiments:
        exp.grid.update(grid)
    if not any(exp.grid for exp in spec.experiments):
        raise DepthlabError("nothing to sweep: give --grid SECTION.FIELD=V1,V2 (e.g. --grid model.n_layer=1,2,4), "
                            "--file SWEEP.yaml or --profile quick")
    spec.overrides = overrides
    if a.out_dir:
        out_dir = a.out_dir
    else:  # deterministic, so running the same command again continues the same sweep
        import hashlib

        digest = hashlib.sha256(json.dumps(_spec_to_json(spec), sort_keys=True, default=str).encode()).hexdigest()
        out_dir = str(Path("sweeps") / (a.profile if a.profile and not a.grid and not overrides and not a.only
                                        else f"{a.profile or 'sweep'}-{digest[:8]}"))
    if a.dry_run:
        points = expand(spec, out_dir)
        cores = _cores()
        nw = max(1, min(a.workers or cores, len(points)))
        total = 0.0
        for pt in points:
            e = estimate_seconds(pt.config)
            total += e
            print(f"{pt.name:50s} ~{e:7.1f}s")
        print(f"{len(points)} runs, about {total / nw / 60:.1f} min on {nw} worker(s) (rough estimate for an idle "
              f"CPU, one thread per worker) -> {out_dir}")
        return 0
    try:
        run_sweep(spec, out_dir, workers=a.workers, report=not a.no_report, rerun=a.rerun, threads=a.threads)
    except KeyboardInterrupt:
        print(f"depthlab: sweep interrupted; run the same command again to finish it (finished runs in "
              f"{out_dir} are kept)", file=sys.stderr)
        return 130
    return 0


def _register() -> None:
    try:
        from . import cli
    except ImportError:  # pragma: no cover
        return
    cli.register("sweep", cmd_sweep)


_register()
