"""What may change when a run is resumed, and whether its config.json was edited against its checkpoint.

A resume compares the run's stored config with the one asked for, field by field (:func:`resume_changes`): some
fields change without a word (when to stop, log, evaluate, save), some with a line saying what the rest of the run
does differently, the learning-rate schedule's with the schedule's own line, and every other field is refused. The
same comparison between config.json and the config stored in the newest checkpoint finds a config.json edited by
hand (:func:`config_edits`), which resume, ``layers`` and ``context`` refuse.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from .checkpoint import CKPT_DIR, read_manifest, read_metadata
from .config import corpus_file
from .errors import DepthlabError
from .rundir import CONFIG, RunDir

__all__ = ["RESUME_SILENT", "RESUME_SCHEDULE", "RESUME_NOTED", "changed_fields", "resume_changes", "config_edits",
           "config_json_notes", "refuse_edited_config"]

#: Fields that may change on ``--resume`` without a word: when to stop, log, evaluate, save, and where.
RESUME_SILENT = frozenset({
    "data.cache_dir", "train.max_iters", "train.max_time", "train.eval_interval", "train.log_interval",
    "train.out_dir", "train.resume", "train.progress", "train.tensorboard", "train.grad_log_interval",
    "train.probe_interval", "train.keep_last", "train.threads", "train.device", "train.compile",
    "train.compile_mode", "train.flush_denormal",
    "train.target_val_loss", "train.on_nonfinite", "model.vocab_size", "train.patience", "train.min_delta",
    "train.sample_interval", "train.sample_tokens", "train.fit_to_time", "train.final_validation"})

#: Fields that may change on ``--resume`` and whose line depends on the step the run is at: the schedule
#: (:meth:`depthlab.training.optimization.LRSchedule.resume`) says what each does, or that nothing trains.
RESUME_SCHEDULE = frozenset({"train.learning_rate", "train.muon_lr", "train.min_lr", "train.warmup_iters",
                             "train.lr_decay_iters"})

#: Fields that may change on ``--resume`` with a printed line: the run goes on, but it is no longer the
#: trajectory of one uninterrupted run with either setting.
RESUME_NOTED = {
    "train.weight_decay": "AdamW's decoupled decay changes from the next step",
    "train.beta1": "AdamW's moment averages change from the next step",
    "train.beta2": "AdamW's moment averages change from the next step",
    "train.grad_clip": "gradient clipping changes from the next step",
    "train.batch_size": "tokens per step change; the data order differs from an uninterrupted run",
    "train.grad_accum": "tokens per step change; the data order differs from an uninterrupted run",
    "train.dtype": "the rest of the run computes in the new precision (not bit-identical to either)",
    "train.attention": "the same function by another kernel (float rounding differs)",
    "model.dropout": "the regularisation changes from the next step",
}
# Every other field (the corpus, its split and encoding, the model's shape and function, the seed,
# the evaluation set behind the best loss, and any field added later) is refused: resuming would
# compare or mix numbers that do not mean the same thing.


def _flat(d: dict) -> dict[str, Any]:
    """``section.field: value`` of a config; the model section as built (``embed_scale auto`` resolved)."""
    from .config import built_model

    return {f"{s}.{k}": v for s, sec in d.items() if isinstance(sec, dict)
            for k, v in (built_model(sec) if s == "model" else sec).items()}


def _same_file(a: dict, b: dict, key: str) -> bool:
    """Both values of ``key`` are paths of one file (config.json holds it absolute; the command line may not)."""
    x = corpus_file(a.get(key))
    return x is not None and x == corpus_file(b.get(key))


def same_source(old: Any, asked: Any) -> bool:
    """``asked`` (a resume's model.source) names the model ``old`` (config.json's ``PATH.py:NAME``) names: the same
    file however written (relative, absolute, through a link) and the same class, or the bare ``PATH.py`` whose one
    class config.json recorded."""
    if not (isinstance(old, str) and isinstance(asked, str)):
        return False
    path, _, name = old.rpartition(":")
    a_path, sep, a_name = asked.rpartition(":")
    if not sep:
        a_path, a_name = asked, ""
    return bool(path) and corpus_file(path) == corpus_file(a_path) and a_name in ("", name)


def _shown(key: str, flat: dict) -> str:
    """A field's value as a resume line shows it: repr (JSON for a mapping or list), ``(absent)``, and an unset
    data.path as what it means."""
    if key == "model.init" and flat.get("model.source") and not isinstance(flat.get(key), dict):
        # absent too: config.json leaves depthlab's GPT's fields (init among them) out of a source run's record
        return "(none: the model's own defaults)"  # "gpt2" is depthlab's GPT's init scheme, not a source model's
    if key not in flat:
        return "(absent)"
    if key == "data.path" and not flat[key]:
        return "(the embedded corpus)"
    # a mapping or list (model.init's keyword arguments) as the user types it on the line: JSON, not Python's repr
    return json.dumps(flat[key]) if isinstance(flat[key], (dict, list)) else repr(flat[key])


def changed_fields(old: dict, new: dict) -> list[str]:
    """The dotted fields whose values differ between a run's stored config and the config now asked for, sorted.

    Not a change: the same corpus file or model file written another way, ``train.attention`` of a model.source
    run (its forward computes its own attention), a field newer than the run at its default, a field the run's
    config.json leaves out at its default.

    Args:
        old: the run's ``config.json`` (sections data/model/train). new: the config now asked for (same shape).
    """
    from .config import RunConfig, as_ran

    # a run from before train.eval_windows (or model.position) evaluated on random windows (had a learned table):
    # so does its resume (cli_expand), and config.json and its checkpoint's copy both leave the field out
    a, b = _flat(as_ran(old)), _flat(as_ran(new))
    defaults = _flat(RunConfig().to_dict())
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) == b.get(key) or (key == "data.path" and _same_file(a, b, key)):
            continue
        if key == "model.source" and same_source(a.get(key), b.get(key)):
            continue
        if key == "train.attention" and (a.get("model.source") or b.get("model.source")):
            continue  # chooses depthlab's GPT's code: a model.source forward computes its own attention
        if key not in a and b.get(key) == defaults.get(key):
            continue  # a field newer than the run, at its default: the run used that behaviour
        if key not in b and a.get(key) == defaults.get(key):
            continue  # left out at its default (a model.source run's config.json omits depthlab's GPT's fields)
        out.append(key)
    return out


def resume_changes(old: dict, new: dict, resolved: Optional[dict] = None) -> tuple[list[str], list[str]]:
    """Compare a run's stored config with the config it is resumed with, field by field.

    Args:
        old: the run's ``config.json`` (sections data/model/train).
        new: the config now asked for (same shape).
        resolved: the run's ``config.json`` ``resolved`` section: a dtype or attention asked as what ``auto`` had
            resolved to is no change.

    Returns:
        ``(refused, noted)``: one sentence per changed field, naming it and both values; refused
        ones must stop the resume (see :data:`RESUME_SILENT`, :data:`RESUME_NOTED`,
        :data:`RESUME_SCHEDULE`; all other fields are refused).
    """
    from .config import as_ran

    a, b = _flat(as_ran(old)), _flat(as_ran(new))  # fields newer than the run: as it ran
    refused, noted = [], []
    changed = changed_fields(old, new)
    batch = _same_global_batch(a, b) if {"train.batch_size", "train.grad_accum"} <= set(changed) else None
    if batch:  # torchrun's micro-batches of the same global batch: no "tokens per step change" (it was said, false)
        noted.append(batch)
        changed = [k for k in changed if k not in ("train.batch_size", "train.grad_accum")]
    ran = resolved if isinstance(resolved, dict) else {}
    for key in changed:
        if key in RESUME_SILENT or _resolved_the_same(key, b.get(key), ran):
            continue
        change = f"{key} {_shown(key, a)} -> {_shown(key, b)}"
        if key in RESUME_SCHEDULE:
            continue  # allowed; the schedule says what it does at this step
        if key in RESUME_NOTED:
            noted.append(f"{change}: {RESUME_NOTED[key]}")
        else:
            refused.append(change)
    return refused, noted


def _resolved_the_same(key: str, asked: Any, ran: dict) -> bool:
    """Whether ``train.dtype`` / ``train.attention`` asked on a resume is what the run computed with already
    (``resolved``): ``auto`` -> ``float32`` on a run ``auto`` made float32 changed nothing, and was said to. ``auto``
    keeps the run's settings on a resume (the runtime says any that differ)."""
    name = {"train.dtype": "dtype", "train.attention": "attention"}.get(key)
    return name is not None and (asked == "auto" or (ran.get(name) is not None and asked == ran.get(name)))


def _same_global_batch(a: dict, b: dict) -> Optional[str]:
    """The line of a resume whose ``train.batch_size`` and ``train.grad_accum`` both change while their product, the
    global batch in sequences per step, stays (a run moved to or from torchrun's processes), else None."""
    try:
        before = int(a["train.batch_size"]) * int(a["train.grad_accum"])
        after = int(b["train.batch_size"]) * int(b["train.grad_accum"])
    except (KeyError, TypeError, ValueError):
        return None
    if before != after:
        return None
    return (f"train.batch_size {a['train.batch_size']} -> {b['train.batch_size']} and train.grad_accum "
            f"{a['train.grad_accum']} -> {b['train.grad_accum']}: the same global batch of {after} sequences per step "
            "in other micro-batches (float rounding may differ)")


def _saved_config(ckdir: Path) -> tuple[Optional[str], Optional[dict]]:
    """The newest step checkpoint listed in ``ckdir``'s manifest whose header reads, and the run config stored in
    it: ``(name, config)``, or ``(None, None)``. Its sha256 is not checked here (the commands that load weights do);
    every checkpoint of a run holds the same fields that a resume may not change."""
    try:
        entries = read_manifest(ckdir, strict=False)["checkpoints"]
    except DepthlabError:
        return None, None  # the command names the manifest's fault itself
    for e in reversed(entries):
        name = e.get("name") if isinstance(e, dict) else None
        meta = read_metadata(ckdir / f"{name}.safetensors") if isinstance(name, str) else {}
        try:
            saved = json.loads(meta.get("config", "null"))
        except ValueError:
            continue
        if isinstance(saved, dict):
            return name, saved
    return None, None


def config_edits(run_dir: Path) -> Optional[str]:
    """How a run's config.json differs from the config stored in its checkpoint, or None: a resume, ``layers`` and
    ``context`` build the model and read the corpus from config.json, so a field edited there by hand
    (``model.activation`` gelu -> relu, ``train.seed``, ``data.tokenizer``) would run the weights as another model,
    on another draw or encoding, or fail with another cause. The fields a resume may change (:data:`RESUME_NOTED`,
    ...) and ``data.path`` (a moved corpus is judged by its sha256) are not compared; nor is anything without a
    checkpoint or a readable config.json (the commands name those themselves).

    Returns:
        e.g. ``differs from the checkpoint step-000030 (the config its weights were trained with): model.activation
        'gelu' -> 'relu' (checkpoint -> config.json)``.
    """
    name, saved = _saved_config(Path(run_dir) / CKPT_DIR)
    old = RunDir(run_dir).config if (Path(run_dir) / CONFIG).is_file() else None
    if saved is None or old is None:
        return None
    edited, _ = resume_changes(saved, {k: v for k, v in old.items() if k in ("data", "model", "train")})
    edited = [e for e in edited if not e.startswith("data.path ")]
    if not edited:
        return None
    return (f"differs from the checkpoint {name} (the config its weights were trained with): {'; '.join(edited)} "
            f"(checkpoint -> {CONFIG})")


def config_json_notes(run_dir: Path) -> list[str]:
    """The fields a resume may change with a line (:data:`RESUME_NOTED`) whose value in a run's config.json differs
    from the config stored in its newest checkpoint: edited there by hand (or left by a resumed session killed before
    its first checkpoint), they would be used without a word.

    Returns:
        e.g. ``["model.dropout 0.0 -> 0.1 (in config.json, not the checkpoint step-000020: edited by hand, or left by
        a session that stopped before its first checkpoint): the regularisation changes from the next step"]``;
        empty without a checkpoint or a readable config.json.
    """
    name, saved = _saved_config(Path(run_dir) / CKPT_DIR)
    old = RunDir(run_dir).config if (Path(run_dir) / CONFIG).is_file() else None
    if saved is None or old is None:
        return []
    _, noted = resume_changes(saved, {k: v for k, v in old.items() if k in ("data", "model", "train")})
    # a resume rewrites config.json when it starts: a session killed before its first checkpoint leaves its values
    return [line.replace(": ", f" (in {CONFIG}, not the checkpoint {name}: edited by hand, or left by a session that "
                                f"stopped before its first checkpoint): ", 1) for line in noted]


def refuse_edited_config(run_dir: Path, prefix: str) -> None:
    """Refuse a run whose config.json was edited against its checkpoint (:func:`config_edits`).

    Args:
        run_dir: the run directory. prefix: the error's opening words (``cannot resume``).

    Raises:
        DepthlabError: naming each edited field with the checkpoint's value and config.json's.
    """
    edits = config_edits(run_dir)
    if edits:
        raise DepthlabError(f"{prefix} {run_dir}: its {CONFIG} {edits}; edited by hand? put the checkpoint's values "
                            f"back in {CONFIG}")
