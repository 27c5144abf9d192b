"""What a sweep is: experiments, grids, profiles, sweep files, and their expansion into runs.

A sweep is a list of *experiments*; each has a base config (nested ``data`` / ``model`` /
``train`` mapping, dotted keys allowed) and a *grid*: dotted config field -> list of values. The
cartesian product of an experiment's grid gives its runs (:func:`expand`).

Every value (grid, base, override) is typed and checked by the same grammar as the flags of
``depthlab train``: :func:`depthlab.config.add_config_arguments` on a ``jsonargparse``
parser, so ``--grid model.n_layer=two`` fails exactly like ``depthlab train --model.n_layer two``.
Range checks (``n_embd % n_head``) happen when each run's :class:`~depthlab.config.RunConfig` is
built, and name the run.

Built-in profiles are YAML files in ``depthlab/sweep/profiles/`` (read when asked for), with the
same keys as a sweep file plus ``description``.

Precedence of settings, lowest first: dataclass defaults < :data:`SWEEP_DEFAULTS` < profile or
file ``base`` < experiment ``base`` < command-line overrides (``--train.max_iters 300``) < the grid
point's values.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from .. import rundir as _rundir
from ..errors import DepthlabError, did_you_mean
from ..units import fmt_value

__all__ = ["Experiment", "SweepSpec", "RunPoint", "PROFILE_NAMES", "SWEEP_DEFAULTS", "SECTIONS", "SWEEP_JSON",
           "refuse_flags_on_axes", "RUNS", "RESULTS_CSV", "RESULTS_MD",
           "coerce_value", "parse_grid_arg", "grid_values", "load_profile", "profile_descriptions", "profile_spec",
           "load_sweep_file", "build_spec", "spec_to_json", "default_sweep_dir", "expand", "expand_point", "run_name",
           "varied_fields",
           "estimate_seconds"]

SECTIONS = ("data", "model", "train")

#: The built-in profiles: ``profiles/<name>.yaml`` (a test checks this matches the files).
PROFILE_NAMES = ("quick", "full", "science")

#: Settings every sweep run gets unless the profile, file or command line says otherwise.
#: ``max_time`` 0: every run of a sweep gets the same step budget, never a wall-clock cut.
SWEEP_DEFAULTS: dict[str, Any] = {"train.progress": False, "train.tensorboard": False, "train.keep_last": 1,
                                  "train.max_time": 0.0}

#: Files and folders of a sweep directory (each run is an ordinary run directory under ``runs/``).
SWEEP_JSON = _rundir.SWEEP_JSON
RUNS = _rundir.SWEEP_RUNS
RESULTS_CSV = "results.csv"
RESULTS_MD = "results.md"

#: Keys of a sweep file or profile.
_SPEC_KEYS = {"base", "grid", "experiments", "description", "workers"}
#: An experiment's keys: its runs (name, base, grid) and the settings a science claim reads (``extra``).
_EXPERIMENT_KEYS = ("name", "base", "grid", "target_val_loss")


# --------------------------------------------------------------------------- spec objects
@dataclasses.dataclass
class Experiment:
    """One grid of runs sharing a base config.

    Attributes:
        name: short name ('' for a plain command-line sweep); becomes a folder under ``runs/``.
        base: dotted config field -> typed value, for every run of this experiment.
        grid: dotted field -> list of typed values; runs are the cartesian product, in key order.
        extra: free-form settings read by the science claims (e.g. ``target_val_loss`` in nats).
    """

    name: str = ""
    base: dict = dataclasses.field(default_factory=dict)
    grid: dict = dataclasses.field(default_factory=dict)
    extra: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class SweepSpec:
    """A whole sweep: a shared base, experiments, and command-line overrides.

    Attributes:
        experiments: the grids (:class:`Experiment`).
        base: dotted overrides for every run (below each experiment's own ``base``).
        overrides: dotted overrides from the command line (above every base, below the grid).
        profile: name of the profile it came from, if any.
        workers: the sweep file's ``workers`` (0 = one per core), or None; ``--workers`` wins over it.
    """

    experiments: list = dataclasses.field(default_factory=list)
    base: dict = dataclasses.field(default_factory=dict)
    overrides: dict = dataclasses.field(default_factory=dict)
    profile: Optional[str] = None
    workers: Optional[int] = None


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


# --------------------------------------------------------------------------- values (the train grammar)
@functools.lru_cache(maxsize=1)
def _config_parser():
    """The ``jsonargparse`` parser of every config field (built once: it takes about a second)."""
    from jsonargparse import ArgumentParser

    from ..config import add_config_arguments

    p = ArgumentParser(prog="depthlab sweep", exit_on_error=False)
    add_config_arguments(p)
    return p


def _fields() -> dict[str, dict[str, Any]]:
    """section -> {field -> the parser's type hint}, from the same parser as the values."""
    out: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    for a in _config_parser()._actions:
        sec, _, name = str(a.dest).partition(".")
        if sec in out and name:
            out[sec][name] = getattr(a, "_typehint", None)
    return out


def _check_key(key: str, what: str) -> tuple[str, str]:
    """Split ``section.field`` and check both exist (and that the sweep may set it).

    Raises:
        DepthlabError: malformed key, unknown section or field, or ``train.out_dir``.
    """
    parts = key.split(".")
    if len(parts) == 3 and parts[:2] == ["model", "init"] and parts[2]:  # one keyword of a model.source model
        k = parts[2]
        example = (f"--grid 'model.init=[{{\"{k}\": 1}}, {{\"{k}\": 2}}]'" if what.startswith("--") else
                   f"the grid key model.init: [{{{k}: 1}}, {{{k}: 2}}]")
        raise DepthlabError(f"{what} {key!r}: a grid takes whole fields, and model.init is one JSON object: list its "
                            f"values as objects, e.g. {example} (each object is the model's keyword arguments of "
                            "one run)")
    if len(parts) != 2 or not all(parts):
        raise DepthlabError(f"{what} {key!r}: expected SECTION.FIELD with SECTION one of "
                            f"{', '.join(SECTIONS)} (e.g. model.n_layer)")
    sec, name = parts
    fields = _fields()
    if sec not in fields:
        raise DepthlabError(f"{what} {key!r}: unknown section {sec!r}{did_you_mean(sec, SECTIONS)} (allowed: "
                            f"{', '.join(SECTIONS)})")
    if name not in fields[sec]:
        raise DepthlabError(f"{what} {key!r}: unknown field {name!r} in {sec}"
                            f"{did_you_mean(name, fields[sec])} (known: {', '.join(sorted(fields[sec]))})")
    if key == "train.out_dir":
        raise DepthlabError(f"{what} {key!r}: the sweep sets each run's out_dir; use --out_dir for the sweep")
    return sec, name


def _check_axis(key: str, what: str) -> None:
    """A grid axis must change the runs: ``model.vocab_size`` is set from each run's corpus (every value trained the
    same model under another name, as ``depthlab train`` refuses the flag).

    Raises:
        DepthlabError: ``key`` is ``model.vocab_size``, or as :func:`_check_key`.
    """
    _check_key(key, what)
    if key == "model.vocab_size":
        raise DepthlabError(f"{what} {key!r}: model.vocab_size is set from the corpus's tokenizer, so every value "
                            "would train the same model; sweep data.vocab_size (with data.tokenizer bpe) instead")
    if key in _NO_MODEL_AXES:
        raise DepthlabError(f"{what} {key!r}: {_NO_MODEL_AXES[key]}, so every value would train the same model; give "
                            f"it once, as a flag (--{key} VALUE), not as a grid axis")


#: Fields whose values change where a run writes or what it prints, never what it trains (refused as grid axes: each
#: value trained the same model again under another run name).
_NO_MODEL_AXES = {"data.cache_dir": "data.cache_dir is where the tokenized corpus is kept",
                  "train.progress": "train.progress only turns the progress bar on or off",
                  "train.tensorboard": "train.tensorboard only turns the TensorBoard log on or off"}


def _alternatives(hint: Any) -> list[str]:
    """What one type hint takes, in words (a ``Union``: each member's), e.g. ``["true", "false", "auto"]``."""
    import typing

    if typing.get_origin(hint) is typing.Union:
        return [w for a in typing.get_args(hint) for w in _alternatives(a)]
    if typing.get_origin(hint) is typing.Literal:
        return [str(a) for a in typing.get_args(hint)]
    words = {bool: ["true", "false"], int: ["an integer"], float: ["a number"], str: ["text"],
             dict: ['a JSON object of keyword arguments for model.source such as {"n_layer": 2}']}
    return words.get(hint, [getattr(hint, "__name__", str(hint))])


def _expected(hint: Any) -> str:
    """Words for what a field takes, from its type hint (``expected an integer``, ``expected true, false or auto``)."""
    import typing

    args = typing.get_args(hint)
    optional = type(None) in args
    if optional:
        inner = [a for a in args if a is not type(None)]
        hint = typing.Union[tuple(inner)] if inner else str
    alts = _alternatives(hint)
    if typing.get_origin(hint) is typing.Literal and len(alts) > 1:
        words = f"expected one of {', '.join(alts)}"
    else:
        words = "expected " + (f"{', '.join(alts[:-1])} or {alts[-1]}" if len(alts) > 1 else alts[0])
    return words + (" or null" if optional else "")


@functools.lru_cache(maxsize=4096)
def _parse_text(key: str, text: str) -> Any:
    """``depthlab train --KEY=TEXT``'s typed value of ``key`` (cached; errors are not)."""
    from jsonargparse import ArgumentError

    sec, name = key.split(".")
    try:
        ns = _config_parser().parse_args([f"--{key}={text}"])
    except ArgumentError:
        raise DepthlabError(f"{key}: cannot use {text!r} ({_expected(_fields()[sec][name])})") from None
    return ns[key]


def coerce_value(key: str, value: Any) -> Any:
    """Type ``value`` exactly as the flag ``--KEY VALUE`` of ``depthlab train`` would.

    Text is parsed as it is; a value already typed (from YAML, or from the CLI's own parser) is
    written as JSON text first (``True`` -> ``true``, ``None`` -> ``null``), so both go through the
    same grammar (:func:`depthlab.config.add_config_arguments`).

    Args:
        key: dotted field name, e.g. ``model.n_layer`` or ``train.learning_rate``.
        value: text or an already typed value.

    Returns:
        The value with the field's type (int, float, bool, str or None); range checks happen
        later, when the run config is built.

    Raises:
        DepthlabError: unknown field, ``train.out_dir``, or a value the field does not accept (the
            message names the field and the value).
    """
    _check_key(key, "config field")
    text = value.strip() if isinstance(value, str) else json.dumps(value)
    return _parse_text(key, text)


def parse_grid_arg(text: str) -> tuple[str, list]:
    """Parse one ``--grid`` argument ``SECTION.FIELD=V1,V2,...`` (or a JSON list of values: :func:`grid_values`).

    Args:
        text: e.g. ``model.n_layer=1,2,4``, ``model.n_layer=[1,2,4]`` or ``train.learning_rate=1e-3,3e-3``.

    Returns:
        (dotted field, list of typed values), in the order given.

    Raises:
        DepthlabError: missing ``=``, unknown field, empty value list or empty value, a value
            the field does not accept, or a value listed twice; the message names the problem.
    """
    if "=" not in text:
        raise DepthlabError(f"--grid {text!r}: expected SECTION.FIELD=V1,V2,... "
                            "(e.g. --grid model.n_layer=1,2,4)")
    key, _, vals = text.partition("=")
    key = key.strip()
    _check_axis(key, "--grid")
    items = grid_values(vals, f"--grid {text!r}", key)
    return key, _unique([(s, coerce_value(key, s)) for s in items], f"--grid {text!r}", key)


def grid_values(vals: str, what: str, key: str) -> list:
    """The values of one grid field written as text: a JSON list (``[1,2]``, ``[{"a":1,"b":2}]``: its items as
    parsed, each a value of the field), one JSON object (``{"a":1,"b":2}``: one value), or comma-separated
    values (``1,2``: each as text).

    Raises:
        DepthlabError: an empty list or empty value, or text that starts with ``[`` or ``{`` and is not JSON; the
            message shows the comma form.
    """
    vals = vals.strip()
    if vals[:1] in ("[", "{"):
        try:
            parsed = json.loads(vals)
        except ValueError as e:
            raise DepthlabError(f"{what}: {vals} is not valid JSON ({e.msg}); give the values as a JSON list "
                                f"like {key}=[...] (strings and keys in double quotes) or comma-separated like "
                                f"{key}=A,B") from None
        items = parsed if isinstance(parsed, list) else [parsed]
        if not items:
            raise DepthlabError(f"{what}: the list is empty; give at least one value, like {key}=[1,2] or {key}=1,2")
        return items
    items = [s.strip() for s in vals.split(",")]
    if not vals or any(s == "" for s in items):
        raise DepthlabError(f"{what}: empty value in the list; give comma-separated values like 1,2,4")
    return items


def _unique(pairs: list[tuple[Any, Any]], what: str, key: str) -> list:
    """The typed values of ``(as written, typed)`` pairs; a value listed twice (``1,1`` or ``1e-3,0.001``) is
    refused, naming it and the list without it: a point listed twice would be one run, not the grid asked for."""
    out: list = []
    written: list[str] = []  # the first spelling of each value in ``out``
    again = None  # the first repeat: (as written, typed)
    for raw, v in pairs:
        if v in out:
            again = again or (raw, v)
        else:
            out.append(v)
            written.append(str(raw))
    if again is not None:
        raw, v = again
        first = written[out.index(v)]
        same = f"{raw} twice" if str(raw) == first else f"{v!r} twice (as {first} and {raw})"
        raise DepthlabError(f"{what}: {key} lists {same}; list each value once ({key}={','.join(written)})")
    return out


def _grid_text(values: list) -> str:
    """Typed grid values written back as one ``--grid`` value list, each value once (first order kept): comma
    form for plain values (``1,2``), a JSON list when one is a list or mapping."""
    once: list = []
    for v in values:
        if v not in once:
            once.append(v)
    if any(isinstance(v, (dict, list)) for v in once):
        return json.dumps(once, separators=(",", ":"))
    return ",".join(v if isinstance(v, str) else json.dumps(v) for v in once)


# --------------------------------------------------------------------------- mappings -> spec
def _coerce_in(what: str, key: str, value: Any) -> Any:
    """:func:`coerce_value`, with a refusal that names where the value was written (``sweep file F.yaml grid``)."""
    try:
        return coerce_value(key, value)
    except DepthlabError as e:
        msg = str(e)
        raise DepthlabError(msg if msg.startswith(what) else f"{what}: {msg}") from None


def _flatten(d: Any, what: str) -> dict[str, Any]:
    """``{"model": {"n_layer": 2}, "train.seed": 1}`` -> ``{"model.n_layer": 2, "train.seed": 1}``, typed."""
    if not isinstance(d, dict):
        raise DepthlabError(f"{what} must be a mapping, got {type(d).__name__}")
    out = {}
    for k, v in d.items():
        k = str(k)
        if "." in k:
            out[k] = _coerce_in(what, k, v)
        elif k in SECTIONS:
            if not isinstance(v, dict):
                raise DepthlabError(f"{what}: section {k!r} must be a mapping, got {type(v).__name__}")
            for f, fv in v.items():
                out[f"{k}.{f}"] = _coerce_in(what, f"{k}.{f}", fv)
        else:
            raise DepthlabError(f"{what}: unknown key {k!r} (expected sections {', '.join(SECTIONS)} "
                                "or dotted fields like model.n_layer)")
    return out


def _grid(d: Any, what: str) -> dict[str, list]:
    """A grid mapping (values: a list, one value, or a comma-separated string) with typed values."""
    if not isinstance(d, dict) or not d:
        raise DepthlabError(f"{what}: the grid must be a non-empty mapping FIELD: [values]")
    out = {}
    for k, vals in d.items():
        k = str(k)
        _check_axis(k, f"{what} key")
        if isinstance(vals, str):
            vals = grid_values(vals, what, k)
        if not isinstance(vals, (list, tuple)):
            vals = [vals]
        if not vals:
            raise DepthlabError(f"{what}: {k} has no values; give it at least one ({k}: [a, b]) or delete the key")
        out[k] = _unique([(v, _coerce_in(what, k, v)) for v in vals], what, k)
    return out


def _experiment(d: Any, what: str) -> Experiment:
    if not isinstance(d, dict):
        raise DepthlabError(f"{what} must be a mapping with keys name, base, grid")
    name = str(d.get("name", "") or "")
    if name and not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise DepthlabError(f"{what}: experiment name {name!r} may only use letters, digits, _ . -")
    bad = [str(k) for k in d if k not in _EXPERIMENT_KEYS]
    if bad:  # a typo (bas: for base:) was kept as a claim setting, and the experiment's runs trained without it
        import difflib

        close = difflib.get_close_matches(bad[0], _EXPERIMENT_KEYS, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise DepthlabError(f"{what}: unknown key(s) {', '.join(bad)} (allowed: {', '.join(_EXPERIMENT_KEYS)}){hint}")
    extra = {k: v for k, v in d.items() if k not in ("name", "base", "grid")}
    return Experiment(name=name, base=_flatten(d.get("base") or {}, f"{what} base"),
                      grid=_grid(d.get("grid"), f"{what} grid"), extra=extra)


def _spec_from_mapping(d: Any, what: str, profile: Optional[str] = None) -> SweepSpec:
    if not isinstance(d, dict):
        raise DepthlabError(f"{what} must be a mapping with keys base and grid (or experiments)")
    bad = sorted(set(map(str, d)) - _SPEC_KEYS)
    if bad:
        # a run config's sections written at the top, as in a train -c file: they belong under base:
        # `depthlab sweep --print_config` writes the command's own options (out_dir, seeds, ...): a file for -c
        printed = {"out_dir", "seeds", "profile"} <= set(bad)
        fix = (f"; the fields every run shares go under base: (base: {{{bad[0]}: {{...}}}})"
               if set(bad) <= set(SECTIONS) else
               "; this is `depthlab sweep --print_config`'s file of the command's options: give it with -c, not -f"
               if printed else "")
        raise DepthlabError(f"{what}: unknown key(s) {', '.join(bad)} (allowed: {', '.join(sorted(_SPEC_KEYS))})"
                            f"{fix}")
    if ("grid" in d) == ("experiments" in d):
        raise DepthlabError(f"{what}: give either grid (one experiment) or experiments (a list), not "
                            f"{'both' if 'grid' in d else 'neither'}")
    if "grid" in d:
        exps = [_experiment({"grid": d["grid"]}, what)]
    else:
        if not isinstance(d["experiments"], list) or not d["experiments"]:
            raise DepthlabError(f"{what}: experiments must be a non-empty list of experiments, each a mapping "
                                "with keys name, base, grid (experiments: [{name: a, grid: {model.n_layer: [1, 2]}}])")
        exps = [_experiment(e, f"{what} experiment {i + 1}") for i, e in enumerate(d["experiments"])]
        names = [e.name for e in exps]
        if len(set(names)) != len(names) or (len(exps) > 1 and "" in names):
            raise DepthlabError(f"{what}: experiments need distinct non-empty names, got {names}")
    workers = d.get("workers")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
        raise DepthlabError(f"{what}: workers must be a whole number >= 0 (0 = one per core, 1 = in the sweep's own "
                            f"process), got {workers!r}; fix it, or leave it out and give --workers")
    return SweepSpec(experiments=exps, base=_flatten(d.get("base") or {}, f"{what} base"), profile=profile,
                     workers=workers)


def _read_yaml(path: Path, what: str) -> Any:
    from ..config import read_yaml

    return read_yaml(path, what, "fix the file (`grid:` with `field: [values]`, or `experiments:`; see README)")


# --------------------------------------------------------------------------- profiles and files
def _profile_path(name: str) -> Path:
    return Path(str(resources.files("depthlab.sweep") / "profiles" / f"{name}.yaml"))


def load_profile(name: str) -> dict:
    """The raw mapping of a built-in profile (``profiles/<name>.yaml``), read now.

    Args:
        name: one of :data:`PROFILE_NAMES`.

    Returns:
        ``{"description", "base", "experiments"}`` as written in the file (values not yet typed).

    Raises:
        DepthlabError: unknown profile (lists the known ones).
    """
    if name not in PROFILE_NAMES:
        raise DepthlabError(f"unknown sweep profile {name!r}{did_you_mean(name, PROFILE_NAMES)}; known: "
                                f"{', '.join(PROFILE_NAMES)}")
    return _read_yaml(_profile_path(name), "profile")


def profile_descriptions() -> dict[str, str]:
    """The descriptions of the built-in profiles (for ``--help``), read from their files now.

    Returns:
        Profile name -> one-line description, in :data:`PROFILE_NAMES` order.
    """
    return {n: str(load_profile(n).get("description", "")) for n in PROFILE_NAMES}


def profile_spec(name: str) -> SweepSpec:
    """The :class:`SweepSpec` of a built-in profile.

    Args:
        name: ``quick``, ``full`` or ``science``.

    Returns:
        A fresh spec (safe to modify).

    Raises:
        DepthlabError: unknown profile (lists the known ones).
    """
    return _spec_from_mapping(load_profile(name), f"profile {name}", profile=name)


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
    p = Path(path)
    if p.is_dir():  # a sweep's folder given to continue it is the common case: say how
        cont = (f"; to continue the sweep in it, run the command that made it with --out_dir {p}"
                if (p / SWEEP_JSON).is_file() else "")
        raise DepthlabError(f"sweep file {p} is a folder, not a YAML file; give the sweep's .yaml file{cont}")
    if not p.is_file():
        raise DepthlabError(f"sweep file {p} not found; give the path of an existing sweep .yaml file, or sweep "
                            f"without one: --profile {'|'.join(profile_descriptions())}, or --grid FIELD=V1,V2,...")
    return _spec_from_mapping(_read_yaml(p, "sweep file") or {}, f"sweep file {p}")


def _select(spec: SweepSpec, only: str) -> None:
    """Keep only the experiments named in ``only`` (``"a,b"``)."""
    want = [w.strip() for w in only.split(",") if w.strip()]
    names = [e.name for e in spec.experiments]
    bad = [w for w in want if w not in names]
    if bad or not want:
        raise DepthlabError(f"--only {only!r}: unknown experiment(s) {', '.join(bad) or '(none given)'}; "
                            f"this sweep has: {', '.join(n or '(unnamed)' for n in names)}")
    spec.experiments = [e for e in spec.experiments if e.name in want]


def build_spec(profile: Optional[str], file: Optional[str | Path], grid: Sequence[str],
               overrides: dict[str, Any], only: Optional[str]) -> SweepSpec:
    """The sweep a ``depthlab sweep`` command line describes.

    Args:
        profile: a built-in profile name, or None.
        file: a sweep YAML file, or None (not together with ``profile``).
        grid: ``--grid`` arguments ``SECTION.FIELD=V1,V2``; each replaces that axis in every experiment.
        overrides: dotted field -> value for every run (``{"train.max_iters": 50}``); typed again
            by the train grammar, so text works too.
        only: ``"a,b"``: keep only these experiments, or None.

    Returns:
        The spec (no run has been expanded or validated yet: see :func:`expand`).

    Raises:
        DepthlabError: both ``profile`` and ``file``; unknown profile, experiment, field or bad value;
            or nothing to sweep (no grid at all), or one field in two ``--grid`` arguments.
    """
    if profile and file:
        raise DepthlabError("give either --profile or --file, not both")
    if profile:
        spec = profile_spec(profile)
    elif file:
        spec = load_sweep_file(file)
    else:
        spec = SweepSpec(experiments=[Experiment()])
    if only:
        _select(spec, only)
    axes: dict[str, list] = {}
    for g in grid:
        key, values = parse_grid_arg(g)
        if key in axes:  # before: the later one silently replaced the earlier
            raise DepthlabError(f"--grid {key} is given twice; give every value once: "
                                f"--grid {key}={_grid_text(axes[key] + values)}")
        axes[key] = values
    for exp in spec.experiments:
        exp.grid.update(axes)
    if not any(exp.grid for exp in spec.experiments):
        raise DepthlabError("nothing to sweep: give --grid SECTION.FIELD=V1,V2 (e.g. --grid model.n_layer=1,2,4), "
                            "--file SWEEP.yaml or --profile quick")
    spec.overrides = {k: coerce_value(k, v) for k, v in (overrides or {}).items()}
    return spec


def refuse_flags_on_axes(spec: SweepSpec) -> None:
    """Refuse a command-line config flag (``spec.overrides``) that is also an axis of an experiment's grid, whose
    values would replace it without a word (``--model.n_layer 3 --grid model.n_layer=1,2``).

    Raises:
        DepthlabError: the first such flag, with its grid and the fix.
    """
    for exp in spec.experiments:  # was: the grid's values replaced the flag's silently
        both = [k for k in spec.overrides if k in exp.grid]
        if both:
            k = both[0]
            where = f" of experiment {exp.name}" if exp.name else ""
            v = spec.overrides[k]
            shown = json.dumps(v) if isinstance(v, (dict, list)) else str(v).lower() if isinstance(v, bool) else v
            raise DepthlabError(f"--{k} {shown} is also an axis of the grid{where} "
                                f"({k}={_grid_text(exp.grid[k])}), whose values would replace it; drop it (the flag, "
                                f"or the line of a --model/--train/--data file), or give the values as --grid {k}=...")


def spec_to_json(spec: SweepSpec) -> dict:
    """The spec as plain JSON data (what ``sweep.json`` stores under ``spec``; hashed by :func:`default_sweep_dir`).

    Args:
        spec: the sweep.

    Returns:
        ``{"profile", "base", "overrides", "experiments": [{"name", "base", "grid", "extra"}]}``.
    """
    return {"profile": spec.profile, "base": spec.base, "overrides": spec.overrides,
            "experiments": [dataclasses.asdict(e) for e in spec.experiments]}


@functools.lru_cache(maxsize=1)
def _field_defaults() -> dict[str, Any]:
    """``section.field`` -> the default of every config field (a run's value where nothing sets it)."""
    from ..config import RunConfig

    return {f"{sec}.{k}": v for sec, d in RunConfig().to_dict().items() if isinstance(d, dict) for k, v in d.items()}


def _as_without(spec: SweepSpec, key: str, value: Any) -> bool:
    """Whether every run of ``spec`` gets ``value`` for ``key`` without the flag (from the sweep's defaults, its
    bases or the config's default), so that giving it changes nothing."""
    missing = object()
    for exp in spec.experiments:
        if key in exp.grid:
            return False
        base = {**SWEEP_DEFAULTS, **spec.base, **exp.base}
        if base.get(key, _field_defaults().get(key, missing)) != value:
            return False
    return True


def default_sweep_dir(spec: SweepSpec, profile: Optional[str], file: Optional[str | Path], grid: Sequence[str],
                      overrides: dict[str, Any], only: Optional[str]) -> str:
    """The sweep directory when ``--out_dir`` is not given; the same command gives the same folder.

    ``sweeps/<profile>`` for a profile as shipped; otherwise ``sweeps/<profile or 'sweep'>-<hash>``
    where the hash is the first 8 hex digits of SHA-256 over the spec's JSON (sorted keys).

    Args:
        spec: the result of :func:`build_spec` for the other arguments.
        profile, file, grid, overrides, only: the arguments given to :func:`build_spec`.

    Returns:
        A relative path (text).
    """
    del file  # a file's content is in the spec, hence in the hash
    if profile and not grid and not overrides and not only:
        return str(Path("sweeps") / profile)
    # flags that give a run what it gets anyway are left out: the config --print_config wrote (every field) and read
    # back with -c is the same sweep as the command that printed it, and goes to its folder
    same = dataclasses.replace(spec, overrides={k: v for k, v in spec.overrides.items() if not _as_without(spec, k, v)})
    digest = hashlib.sha256(json.dumps(spec_to_json(same), sort_keys=True, default=str).encode()).hexdigest()
    return str(Path("sweeps") / f"{profile or 'sweep'}-{digest[:8]}")


# --------------------------------------------------------------------------- expansion
def _name_part(v: Any) -> str:
    """A grid value as a run name writes it: :func:`~depthlab.units.fmt_value` with ``g`` (None is
    ``None``), every character outside ``A-Za-z0-9.+-`` replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9.+-]", "_", fmt_value(v, "g", missing="None"))


def _nest(flat: dict[str, Any]) -> dict:
    out: dict = {s: {} for s in SECTIONS}
    for k, v in flat.items():
        sec, name = k.split(".")
        out[sec][name] = v
    return out


def _name_widths(exp: Experiment) -> dict[str, int]:
    """Zero-padding width of each all-integer grid axis (not the seed: ``--seeds`` adds seeds later)."""
    return {k: max(len(_name_part(v)) for v in vals) for k, vals in exp.grid.items()
            if k != "train.seed" and all(isinstance(v, int) and not isinstance(v, bool) for v in vals)}


def run_name(exp: Experiment, point: dict) -> str:
    """The run name of one point of ``exp``: ``field-value`` per grid key joined by ``_``, under ``exp.name/``.

    Integers are zero-padded to the widest value of their axis so names sort numerically; a
    ``train.seed`` that is not a grid key (a seed added by ``--seeds``) is appended as ``seed-S``,
    so the runs the grid already names keep their names.

    Args:
        exp: the experiment.
        point: dotted field -> value for every grid key (and optionally ``train.seed``).

    Returns:
        The name relative to ``SWEEP_DIR/runs``.
    """
    keys = list(exp.grid) + [k for k in ("train.seed",) if k in point and k not in exp.grid]
    short = [k.split(".")[1] for k in keys]
    if len(set(short)) != len(short):
        short = [k.replace(".", "-") for k in keys]
    widths = _name_widths(exp)
    parts = []
    for k, s in zip(keys, short):
        fv = _name_part(point[k])
        parts.append(f"{s}-{fv.zfill(widths[k]) if k in widths else fv}")
    name = "_".join(parts) or "run"
    return f"{exp.name}/{name}" if exp.name else name


def _run_names(exp: Experiment) -> list[tuple[str, dict]]:
    """(run name, grid point) of every point of ``exp``, first grid key varying slowest (:func:`run_name`)."""
    keys = list(exp.grid)
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(exp.grid[k] for k in keys))]
    return [(run_name(exp, pt), pt) for pt in points]


def expand_point(spec: SweepSpec, exp: Experiment, name: str, point: dict, sweep_dir: str | Path,
                 checked: Optional[set] = None, log: Optional[Callable[[str], None]] = None) -> RunPoint:
    """One run of ``exp`` at ``point`` with its full, validated config (out_dir ``sweep_dir/runs/name``).

    Args:
        checked: ``(file, name)`` of the model.source files already imported and found good by this expansion
            (each is imported once, not once per run; added to); None = import it here.
        log: told, before a model.source file is imported here, that it is (:func:`_check_source`).

    Raises:
        DepthlabError: the point's config is invalid (names the run and the field), or its ``model.source``
            file is missing (:func:`~depthlab.usermodel.parse_source`) or does not give the model: it lacks
            the named class or function (naming those it defines), fails to import, or, a bare PATH.py, defines
            no nn.Module class or several (:func:`~depthlab.usermodel.load_factory`, as ``depthlab train`` loads
            it); every run of it would fail.
    """
    from ..config import RunConfig

    flat = {**SWEEP_DEFAULTS, **spec.base, **exp.base, **spec.overrides, **point,
            "train.out_dir": str(Path(sweep_dir) / RUNS / name), "train.resume": False}
    try:
        cfg = RunConfig.from_dict(_nest(flat))
        if cfg.model.source:  # a file that gives no model fails every run that names it: refused before any starts
            _check_source(cfg.model.source, "grid value model.source" if "model.source" in point else
                          "model.source (the sweep's base)", checked, log)
    except DepthlabError as e:
        raise DepthlabError(f"sweep run {name}: {e}") from None
    return RunPoint(name=name, experiment=exp.name, point=point, config=cfg.to_dict())


def _check_source(source: str, option: str, checked: Optional[set],
                  log: Optional[Callable[[str], None]] = None) -> None:
    """Refuse a model.source whose file is missing or gives no model, as ``depthlab train`` would at its start.

    The file is imported here, in the sweep's own process, and so runs as Python: it must, since only importing it
    tells a file that fails to import, builds its classes when run, or takes its model from another module, from a
    good one, and otherwise every run would start and fail alike. It runs because the sweep names it, as each run
    will import it; ``log`` is told so first (once per file and name).

    Raises:
        DepthlabError: ``"{option} {source}: ..."`` (:func:`~depthlab.usermodel.parse_source`,
            :func:`~depthlab.usermodel.load_factory`).
    """
    from ..usermodel import load_factory, parse_source

    src = parse_source(source, option)
    key = (str(src.path.resolve()), src.name)
    if checked is not None and key in checked:
        return
    if log is not None:
        log(f"{option} {source}: your code, imported here to check that it gives the model before any run starts "
            "(run as Python because the sweep names it; each run imports it again)")
    try:
        load_factory(src)
    except DepthlabError as e:
        raise DepthlabError(f"{option} {e}") from None
    if checked is not None:
        checked.add(key)


def expand(spec: SweepSpec, sweep_dir: str | Path, checked: Optional[set] = None,
           log: Optional[Callable[[str], None]] = None) -> list[RunPoint]:
    """All runs of ``spec``, each with a full, validated config whose out_dir is under ``sweep_dir``.

    Args:
        spec: the sweep.
        sweep_dir: the sweep directory (run dirs go to ``sweep_dir/runs/<name>``).
        checked, log: as :func:`expand_point` (None: a set of this expansion's own).

    Returns:
        The runs in grid order (first grid key varies slowest).

    Raises:
        DepthlabError: a grid point whose config is invalid (names the run and the field), or two
            runs with the same name.
    """
    checked = set() if checked is None else checked
    points = [expand_point(spec, exp, name, point, sweep_dir, checked, log) for exp in spec.experiments
              for name, point in _run_names(exp)]
    err = _shared_name_error(points)
    if err:
        raise err
    return points


def _shared_name_error(points: list[RunPoint]) -> Optional[DepthlabError]:
    """The refusal of two runs with one name (one run folder), naming the grid values a run name writes alike
    (``日本.txt`` and ``東京.txt`` are both ``__.txt``, :func:`_name_part`); None if every name is its own."""
    seen: dict[str, RunPoint] = {}
    for p in points:
        first = seen.setdefault(p.name, p)
        if first is p:
            continue
        differ = [f"{k} {first.point[k]} and {p.point[k]}" for k in p.point
                  if k in first.point and first.point[k] != p.point[k]]
        if not differ:
            return DepthlabError(f"two sweep runs share the name {p.name}; give distinct grid values")
        return DepthlabError(f"two sweep runs share the name {p.name}: {', '.join(differ)} are written alike in "
                             "a run name (numbers to 6 significant digits, each character outside A-Za-z0-9.+- as "
                             "_); give values that differ there (rename a file to ASCII, say)")
    return None


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


#: Target tokens of Tiny Shakespeare's val split (the default corpus), which ``train.final_validation`` reads whole.
_VAL_TOKENS = 111_539


def estimate_seconds(config: dict, sec_per_gflop: float = 0.045) -> float:
    """Rough single-thread CPU time of one run in seconds, for scheduling and documentation.

    Counts 6 x parameters x tokens for the matmuls plus the attention scores (the usual
    training-FLOPs rule, Kaplan et al. 2020, eq. 2.1), over the training steps and the
    evaluations (2 x for a forward pass), plus a per-block-per-step overhead (about 0.7 ms:
    kernel launches and the optimizer, which dominate at tiny widths) and a fixed start-up cost
    of 4 s. ``sec_per_gflop`` was measured on an idle 2-core x86 CPU, one thread, at width 32
    (about 4 ms per block per 1024-token step); a busy machine is slower. Wider matmuls run closer
    to the CPU's peak, so the rate is scaled by (32 / n_embd)^0.8 above width 32 — an empirical fit
    to three measurements on this kind of machine: width 32 (the base rate), width 64 (a run took
    1/1.6 of the unscaled estimate) and the default width-192 recipe (300-950 s measured against
    3,963 s unscaled, i.e. 4-13x). It remains a rough planning figure, not a measurement.

    A ``train.max_time`` > 0 caps the training loop (evaluations included) at that many seconds, as the
    run itself stops there (``fit_to_time`` plans into it, or the budget cuts it); the estimate then adds
    what runs outside the budget: the start-up, the evaluation at the stop and ``final_validation``'s
    pass over the whole val split (:data:`_VAL_TOKENS` target tokens).

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
    flops = 6 * per_tok * tokens * steps + 2 * per_tok * tokens * evals  # an evaluation batch: the global batch
    overhead = 0.7e-3 * (L + 1) * (steps + evals / 3)  # per-block kernel launches dominate tiny widths
    rate = sec_per_gflop * (32 / C) ** 0.8 if C > 32 else sec_per_gflop
    loop = flops / 1e9 * rate + overhead
    if t.get("max_time", 0) > 0 and loop > t["max_time"]:
        tail = 2 * per_tok * (tokens * 2 * t["eval_iters"]
                              + (_VAL_TOKENS if t.get("final_validation", True) else 0))
        loop = t["max_time"] + tail / 1e9 * rate + 0.7e-3 * (L + 1) * 2 * t["eval_iters"] / 3
    return loop + 4.0
