"""Checkpoints of a run: what is saved, the checks before a resume, loading it back, ``init_from``.

Files go through :mod:`depthlab.checkpoint` (atomic, verified) and only the main process writes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
import warnings
from pathlib import Path
from typing import Optional

from ..units import agree, counted
from .. import checkpoint as ckpt
from .. import resume_config, rundir
from ..init_from import (changed_source, init_from_flag, init_line, init_weights, kept_init_record, source_model,
                         weights_fit)
from ..budget import Plan
from ..config import PREDATING, as_ran, built_model, corpus_file
from ..errors import DepthlabError
from ..rundir import (BASELINES, CHECKPOINTS, CONFIG, DIAGNOSIS, METRICS, SUMMARY, TENSORBOARD, TOKENIZER, TRAIN_LOG,
                      VOCAB, RunDir, not_a_file_error, truncate_metrics)
from .ckwriter import BackgroundWrites
from .optimization import apply_hyperparameters, resolve_optimizer
from . import runlock

__all__ = ["Checkpointer", "ResumePoint"]


#: The ``train`` fields that shape the learning-rate schedule a checkpoint's weights were trained on.
SCHEDULE_FIELDS = ("max_iters", "lr_decay_iters", "warmup_iters", "learning_rate", "min_lr", "muon_lr")


class ResumePoint:
    """What a resume starts from: the latest good checkpoint (or None) and the run's own config.json.

    The schedule the run followed up to the checkpoint is read from the checkpoint itself (the config and time plan
    stored in its header), not from config.json: config.json is rewritten when a session starts, so a resume that
    stopped before its first checkpoint, or a hand edit, leaves settings there that the weights never trained with.

    Attributes:
        entry: the manifest entry of the checkpoint, or None when the run has none yet.
        old_config: the run's config.json as it was ({} if unreadable).
        optimizer: the optimizer the run was made with (what ``auto`` resolved to then).
        schedule_train: the ``train`` section the checkpoint was saved with (config.json's when the checkpoint
            holds none).
        plan: the time plan the run followed up to the checkpoint (its header's; config.json ``resolved`` for a
            checkpoint written before headers held it, when config.json's schedule is the checkpoint's), or None.
        schedule_edits: ``train.max_iters 60 -> 1000000000`` for each schedule field whose config.json value is not
            the checkpoint's (checkpoint -> config.json).
        vocab_missing: ``missing``, ``damaged`` or ``edited (...)`` when a character run's vocab.json is so and the
            corpus is the one it trained on: the trainer writes it again (and says which); else "".
    """

    def __init__(self, entry: Optional[dict], old_config: dict, optimizer: str, vocab_missing: str = "",
                 header: Optional[dict] = None):
        self.entry, self.old_config, self.optimizer = entry, old_config, optimizer
        self.vocab_missing = vocab_missing
        header = header or {}
        json_train = old_config.get("train") if isinstance(old_config.get("train"), dict) else {}
        saved = _json_or_none(header.get("config"))
        saved_train = saved.get("train") if isinstance(saved, dict) else None
        self.schedule_train = saved_train if isinstance(saved_train, dict) else json_train
        self.schedule_edits = [f"train.{k} {self.schedule_train[k]!r} -> {json_train.get(k)!r}"
                               for k in SCHEDULE_FIELDS
                               if k in self.schedule_train and json_train.get(k) != self.schedule_train[k]]
        self.json_plan = Plan.from_record(old_config.get("resolved"), json_train)
        if "plan" in header:
            self.plan = Plan.from_record({"plan": _json_or_none(header["plan"])}, self.schedule_train)
        else:  # a checkpoint from before headers held the plan: config.json's, if it is the checkpoint's schedule
            self.plan = None if self.schedule_edits else self.json_plan

    @property
    def record_slack(self) -> int:
        """Steps the checkpoint may follow metrics.jsonl's last record by: 0 for an evaluation's (and a manifest entry
        older than its ``evaluated`` key), the session's ``train.log_interval`` for one saved at a stop."""
        if self.entry is None or self.entry.get("evaluated", True):
            return 0
        v = (self.old_config.get("train") or {}).get("log_interval")
        return v if isinstance(v, int) and v > 0 else 1


def _json_or_none(text) -> object:
    """A checkpoint header's JSON value, or None when it is absent or not JSON."""
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _resume_point(rd: RunDir, entry: Optional[dict], old: dict, optimizer: str,
                  vocab_gone: str) -> tuple[ResumePoint, list[str], Optional[str]]:
    """The :class:`ResumePoint` of ``entry`` (its header's schedule), the ``resume:`` line when config.json's schedule
    is not the checkpoint's, and a warning when config.json's ``resolved.plan`` is not depthlab's record."""
    header = ckpt.read_metadata(rd.file(CHECKPOINTS) / f"{entry['name']}.safetensors") if entry else {}
    point = ResumePoint(entry, old, optimizer, vocab_missing=vocab_gone, header=header)
    said = []
    if point.schedule_edits and entry is not None:
        said.append(f"resume: {rd.file(CONFIG)} holds a schedule the checkpoint {entry['name']} was not trained with "
                    f"({'; '.join(point.schedule_edits)}; checkpoint -> {CONFIG}: edited by hand, or a session that "
                    "stopped before its first checkpoint): the learning rate continues from the checkpoint's")
    warning = None
    if "plan" in (old.get("resolved") or {}) and point.json_plan is None:
        follows = (f"the plan its checkpoint {entry['name']} holds" if point.plan is not None and entry else
                   "the schedule asked for (train.max_iters, train.fit_to_time)")
        warning = (f"{rd.file(CONFIG)}'s resolved.plan is not the record depthlab wrote (edited by hand?): the "
                   f"resumed run follows {follows}")
    return point, said, warning


def _trained_past_a_checkpoint(rd: RunDir) -> Optional[str]:
    """Why the run's own files say it wrote a checkpoint, or None: summary.json's final step (a finished run), or
    records after an evaluation (each evaluation past step 0 writes one before training goes on)."""
    final = (rd.summary or {}).get("final_step")
    if isinstance(final, int) and final > 0:
        return f"its {SUMMARY} says it trained {final} steps"
    records = rd.metrics() if rd.file(rundir.METRICS).is_file() else []
    evals = [r["step"] for r in records if "val_loss" in r and isinstance(r.get("step"), int) and r["step"] > 0]
    last = max((r["step"] for r in records if isinstance(r.get("step"), int)), default=0)
    if evals and last > min(evals):
        return (f"its {rundir.METRICS} records steps up to {last}, past the evaluation (and checkpoint) at step "
                f"{min(evals)}")
    return None


def _check_tokenizer(rd: RunDir, bpe: bool) -> None:
    """A BPE run's tokenizer.json against the one its latest intact checkpoint records
    (:func:`~depthlab.checkpoint.check_run_tokenizer`), as ``sample`` checks it: another file's tokens were called a
    changed corpus ("165 characters absent").

    Raises:
        DepthlabError: another file than the checkpoint's.
    """
    if not bpe:
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a damaged newer checkpoint is said where the resume picks its entry
            entry = ckpt.latest_checkpoint(rd.path)
    except DepthlabError:
        return  # said where the resume picks its checkpoint
    if entry is None:
        return
    try:
        ckpt.check_run_tokenizer(rd.path, rd.file(CHECKPOINTS) / f"{entry['name']}.safetensors")
    except DepthlabError as e:
        raise DepthlabError(f"cannot resume {rd.path}: {e}") from None


def _check_corpus(rd: RunDir, cfg, vocab: list[str], corpus_sha256: Optional[str]) -> tuple[bool, str]:
    """A resume's corpus against the run's: ``(same_corpus, vocab_gone)``.

    ``same_corpus``: the file's sha256 is config.json's ``resolved.corpus_sha256``. ``vocab_gone``: ``missing``,
    ``damaged`` or ``edited`` when a character run's vocab.json is so and the corpus is the run's (the trainer writes
    it again from ``vocab``: the same file has the same characters), else "".

    Raises:
        DepthlabError: the corpus changed since training (checked before its length or characters are judged), or
            its characters differ from vocab.json's, or vocab.json is gone and nothing says the corpus is the run's.
    """
    old, old_vocab = rd.config or {}, rd.vocab or []
    char = (old.get("data") or {}).get("tokenizer", "char") == "char"
    recorded = (old.get("resolved") or {}).get("corpus_sha256")
    same_corpus = corpus_sha256 is not None and recorded == corpus_sha256
    vocab_gone = ("" if not char else "missing" if not rd.file(VOCAB).exists() else
                  "damaged" if rd.damaged(VOCAB) else
                  "edited (not the characters the run trained on)" if same_corpus and old_vocab != list(vocab) else "")
    if vocab_gone and not same_corpus:
        what = ("missing (deleted?)" if vocab_gone == "missing" else
                "not the JSON list of characters depthlab wrote (damaged or edited by hand)")
        fix = (f"the corpus {cfg.data.path or 'embedded'} changed since training too (its sha256 is not config.json's "
               f"resolved.corpus_sha256): restore the file the run trained on, and the resume writes {VOCAB} again "
               "from it" if recorded and corpus_sha256 else
               "resuming checks the corpus's characters against it: restore it from a copy of the run")
        raise DepthlabError(f"cannot resume {rd.path}: its {VOCAB} is {what}, and {fix}")
    old_path, path = (old.get("data") or {}).get("path"), cfg.data.path
    same_path = (old_path or None) == (path or None) or (corpus_file(path) is not None
                                                         and corpus_file(old_path) == corpus_file(path))
    if recorded and corpus_sha256 and not same_corpus and same_path:
        raise DepthlabError(f"cannot resume {rd.path}: the corpus {path or 'embedded'} changed since training, or "
                            "config.json's data.path was edited to another file (its sha256 is not config.json's "
                            "resolved.corpus_sha256); resume with the original file, or start a new run (--init-from)")
    if vocab_gone:
        old_vocab = list(vocab)  # the trainer writes it again, once the resume is allowed
    same_kind = (old.get("data") or {}).get("tokenizer", "char") == cfg.data.tokenizer
    new = [c for c in vocab if c not in set(old_vocab)]  # another tokenizer is refused later, by name
    gone = [c for c in old_vocab if c not in set(vocab)]
    if same_kind and (new or gone):
        parts = []
        if new:
            parts.append(_chars_said("characters absent from the checkpoint", new))
        if gone:
            parts.append(_chars_said("checkpoint characters absent from this corpus", gone))
        raise DepthlabError(
            f"cannot resume {rd.path}: the corpus vocabulary differs from the checkpoint's "
            f"({'; '.join(parts)}); resume with the run's own corpus (a new run on this one cannot start from "
            "these weights either: --init-from needs the same characters)")
    return same_corpus, vocab_gone


#: Most characters a vocabulary-difference message lists; the count says how many more there are.
CHARS_SHOWN = 40


def _missing_corpus(cfg) -> str:
    """The error for a resume whose ``data.path`` does not exist: the run's own corpus gone (moved or deleted), or
    a path given for this resume that is not the run's (a typo, or the run used the embedded corpus)."""
    out = cfg.train.out_dir
    old = ((RunDir(Path(out)).config or {}).get("data") or {}) if out and Path(out).is_dir() else {}
    own = old.get("path")
    given = Path(cfg.data.path).expanduser()
    if "path" in old and (own is None or Path(own).expanduser().resolve() != given.resolve()):
        trained = (f"its own corpus {own}" if own else "the embedded corpus (data.path unset)")
        fix = ("fix the path (the run's own file is gone too)" if own and not Path(own).expanduser().exists() else
               "fix the path, or give no data.path (the resume then reads the run's own)")
        # data.path came from --data.path or from a -c file: the words hold for both
        return (f"cannot resume {out}: data.path {cfg.data.path} (given for this resume) does not exist; the run "
                f"was trained on {trained}: {fix}")
    return (f"cannot resume {out}: its corpus {cfg.data.path} is missing (moved or deleted?): put the file back at "
            "that path, or give --data.path where it is now (the resume checks it is the same file by its sha256)")


def _chars_said(what: str, chars: list[str]) -> str:
    """``"52 WHAT, the first 40: '...' (12 more)"``, or ``"3 WHAT: 'xyz'"`` when all of them fit."""
    shown = repr("".join(chars[:CHARS_SHOWN]))
    if len(chars) <= CHARS_SHOWN:
        return f"{len(chars)} {what}: {shown}"
    return f"{len(chars)} {what}, the first {CHARS_SHOWN}: {shown} ({len(chars) - CHARS_SHOWN} more not shown)"


def _refuse_blocked_folders(rd: RunDir) -> None:
    """A file where the run writes a folder (checkpoints/, tb/), or a folder inside checkpoints/ where a checkpoint
    file goes, fails a resume only after it has written (or after a whole session, at its checkpoint).

    Raises:
        DepthlabError: naming the first such path.
    """
    for name in (CHECKPOINTS, TENSORBOARD):
        p = rd.file(name)
        if p.exists() and not p.is_dir():
            raise DepthlabError(f"{p} is not a folder (depthlab writes the run's {name}/ there): move it out of the "
                                f"run directory, or restore the run's {name}/ from a copy")
    ck = rd.file(CHECKPOINTS)
    for p in sorted(ck.iterdir()) if ck.is_dir() else ():
        if not p.is_file():
            raise not_a_file_error(p)


def _latest_to_resume(run_dir: Path) -> Optional[dict]:
    """:func:`~depthlab.checkpoint.latest_checkpoint` of the run to resume; when no step checkpoint is intact, the
    refusal names the ways forward: --init-from its best weights when they verify, else a new run.

    Raises:
        DepthlabError: no listed step checkpoint verifies (or the manifest is damaged: its own line).
    """
    try:
        return ckpt.latest_checkpoint(run_dir)
    except ckpt.NoIntactCheckpoint as e:
        if ckpt.finite_best(run_dir) is not None:
            new = ("or start a new run from its best weights (best.safetensors is intact): "
                   f"{ckpt.new_run_command(run_dir, True)}")
        else:
            new = ("or start it again from step 0 in a new folder (its best.safetensors is missing or damaged too, so "
                   f"--init-from cannot reuse its weights): {ckpt.new_run_command(run_dir, False)}")
        raise DepthlabError(f"cannot resume {run_dir}: {e}; restore its checkpoints/ from a copy of the run, "
                            f"{new}") from None


_VOCAB_FIELDS = ("data.tokenizer", "data.vocab_size")  # another vocabulary: --init-from refuses the run's weights


#: Fields a refused resume's new-run command does not carry over: it sets its own folder and resume flag, and the
#: vocabulary size comes from the corpus.
_NOT_FOR_A_NEW_RUN = ("train.out_dir", "train.resume", "model.vocab_size")


def _new_run_advice(run_dir: Path, refused: list[str], old: dict, asked: dict) -> str:
    """The new run a refused resume offers: ``--init-from`` when the changed model's weights have the run's names
    and shapes (:func:`~depthlab.init_from.weights_fit`) and the tokenizer is the run's, else the changed run
    trained from scratch. ``old``: the run's config.json sections that ``asked`` has; ``refused``: the
    :func:`~depthlab.resume_config.resume_changes` sentences."""
    keys = [r.split(" ", 1)[0] for r in refused]
    model = [k.split(".", 1)[1] for k in keys if k.startswith("model.")]
    # the other values asked for go along (--model.dropout, --train.max_iters, ...): was only the refused ones
    rest = [k for k in resume_config.changed_fields(old, asked) if k not in keys and k not in _NOT_FOR_A_NEW_RUN]
    flags = " ".join(f"--{k} {_flag_text(_field(asked, k))}" for k in keys + rest)
    vocab = [k for k in keys if k in _VOCAB_FIELDS]
    if vocab:
        return (f"train a new run from scratch ({', '.join(vocab)} {'change' if len(vocab) > 1 else 'changes'} the "
                f"tokenizer, whose ids the run's weights "
                f"are trained on, so --init-from cannot reuse them): {ckpt.new_run_command(run_dir, False, flags)}")
    if not any((Path(run_dir) / CHECKPOINTS).glob("*.safetensors")):  # nothing trained: no weights to start from
        return (f"start it again as a new run with the new values (it has no checkpoint yet, so no weights for "
                f"--init-from): {ckpt.new_run_command(run_dir, False, flags)}")
    old = as_ran(old)  # a run from before model.position had a learned table: its weights are judged as such
    fit = weights_fit(old.get("model") or {}, asked.get("model") or {}) if model else True
    if fit:
        why = "the changed model has the same weights, by name and shape; " if model else ""
        return (f"start a new run from its weights ({why}the optimizer state, step count and schedule start fresh): "
                f"{ckpt.new_run_command(run_dir, True, flags)}")
    if fit is False:  # the fields that change weights themselves (was: every refused one, model.n_head and init too)
        was, now = old.get("model") or {}, asked.get("model") or {}
        model = [k for k in model if weights_fit(was, {**was, k: now.get(k)}) is False] or model
    verb = "change" if len(model) > 1 else "changes"
    what = (f"{verb} the number or shape of the model's weights, so --init-from cannot reuse the run's" if fit is False
            else f"{_other_model(model)}, whose weights cannot be compared with the run's before it is built; "
            f"--init-from {run_dir} would check them and refuse weights that do not fit")
    return (f"train the changed model as a new run from scratch ({', '.join(f'model.{k}' for k in model)} {what}): "
            f"{ckpt.new_run_command(run_dir, False, flags)}")


def _other_model(fields: list[str]) -> str:
    """What changed model fields ``fields`` (source, init) do to a model.source run: other code, or other keyword
    arguments to the same code."""
    if fields == ["source"]:
        return "is other model code"
    if fields == ["init"]:
        return "builds the model with other keyword arguments"
    return "build another model (its code or its keyword arguments)"


def _model_diff(src: Path, ours: dict) -> tuple[dict, dict, str, list[str], list[str]]:
    """``(theirs, ours, what, diff, unfit)``: the model sections of ``--init-from src`` and of the new run (built:
    ``embed_scale auto`` as each GPT has it), what the source is, the fields that differ (``vocab_size`` aside), and
    of those the ones that change the weights' names or shapes (:func:`~depthlab.init_from.weights_fit`)."""
    from ..usermodel import parse_init

    theirs, what = source_model(src)
    theirs, ours = built_model(theirs), built_model(ours)
    # a model.source run's config.json leaves out an empty model.init: the user's keyword arguments are compared too
    named = sorted({*theirs, "init"} if ours.get("source") else theirs)
    norm = (lambda k, v: parse_init(v) if k == "init" else v) if ours.get("source") else (lambda k, v: v)
    diff = [k for k in named if k in ours and k != "vocab_size" and norm(k, theirs.get(k)) != norm(k, ours[k])]
    unfit = [k for k in diff if weights_fit({**ours, **theirs}, {**ours, **theirs, k: ours[k]}) is False]
    return theirs, ours, what, diff, unfit


def same_shape_changes(src: Path, ours: dict) -> Optional[str]:
    """The line of an ``--init-from`` whose model differs from the source's in fields that keep every weight's name
    and shape (``model.n_head``, ``activation``, ``norm``): the weights load, but compute another function than the
    one they were trained in (it was accepted without a word). None when no such field differs."""
    theirs, ours, what, diff, _ = _model_diff(src, ours)
    diff = [k for k in diff if k != "dropout"]  # a regulariser of training: the function the weights compute stays
    if not diff:
        return None
    said = "; ".join(f"model.{k} {theirs.get(k)!r} there, {ours[k]!r} here" for k in diff)
    return (f"warning: --init-from {src}: {said}: the weights load (the same names and shapes) but were trained to "
            f"compute with {what}'s settings; the new run starts from them with its own")


def split_overlap(src: Path, cfg, sha256: str) -> Optional[str]:
    """The line of an ``--init-from`` run trained on another split of the same corpus (its ``data.split``,
    ``val_fraction`` or, for ``lines``, ``train.seed`` differ) whose train text holds part of this run's val text,
    so the new run's val losses are no held-out numbers (a resume's refusal of a changed split suggests
    --init-from); None otherwise, and for an export (no record of its split). ``cfg``: the new run's config;
    ``sha256``: its corpus file's."""
    old = RunDir(src).config if (src / CONFIG).is_file() else None
    if not isinstance(old, dict) or (old.get("resolved") or {}).get("corpus_sha256") != sha256:
        return None
    d, t = old.get("data") or {}, old.get("train") or {}
    theirs = (d.get("split", "tail"), d.get("val_fraction"), t.get("seed") if d.get("split") == "lines" else None)
    ours = (cfg.data.split, cfg.data.val_fraction, cfg.train.seed if cfg.data.split == "lines" else None)
    if theirs == ours or theirs[0] == ours[0] == "tail" and isinstance(theirs[1], (int, float)) \
            and ours[1] <= theirs[1]:  # a shorter tail of the same text is inside its val split
        return None
    seed = f", train.seed {theirs[2]}" if theirs[2] != ours[2] and theirs[0] == ours[0] == "lines" else ""
    return (f"warning: --init-from {src} trained on another split of this corpus (data.split {theirs[0]}, "
            f"val_fraction {theirs[1]}{seed} there; {ours[0]}, {ours[1]}{seed and f', train.seed {ours[2]}'} here): "
            "part of this run's val text was in its training, so this run's val losses are not held-out numbers")


def _unfit_weights(src: Path, ours: dict, weights: str = "") -> Optional[str]:
    """Why ``--init-from src``'s weights do not fit a model of section ``ours``: the fields that change their names
    or shapes (:func:`~depthlab.init_from.weights_fit`; every differing one when it cannot tell), the weights that
    differ (``weights``, :func:`~depthlab.checkpoint.misfit`) and the fix; None when no field differs."""
    theirs, ours, what, diff, unfit = _model_diff(src, ours)
    keys = unfit or diff
    if not keys:
        return None
    # a model.source model's fields do not say which weights they change; depthlab's GPT's do
    said = "; ".join(f"model.{k} {theirs.get(k)!r} there, {ours[k]!r} here" for k in keys) + \
        (f": {weights}" if weights and ours.get("source") else "")
    # without those flags the command line takes the source's model section (cli_expand), a run's or an export's
    return (f"{init_from_flag(src)}: its weights do not fit this model ({said}); drop those --model "
            f"flags to take {what}'s shape, or drop --init-from: a model of this shape is a new model and trains from "
            "scratch")


def _field(cfg: dict, key: str):
    section, name = key.split(".", 1)
    return (cfg.get(section) or {}).get(name)


def _flag_text(value) -> str:
    """A config value as a command-line flag value (as ``--init-from`` passes its run's model section), spelled as
    the parser reads it (``null``, ``true``/``false``; was ``None``, which an integer field refuses) and quoted for
    the shell: the advice is pasted there, and bash splits an unquoted {"n_layer": 3} into two words."""
    text = ("null" if value is None else json.dumps(value) if isinstance(value, (dict, list))
            else str(value).lower() if isinstance(value, bool) else str(value))
    return shlex.quote(text)


def _keep_later_best(run_dir: Path, step: int, log) -> None:
    """A best later than the checkpoint resumed from (``step``) is copied aside before the session can replace
    best.safetensors (:func:`~depthlab.checkpoint.keep_later_best`), and one warning (``log``) names the copy."""
    kept = ckpt.keep_later_best(run_dir, step)
    if kept is not None:
        path, best = kept
        log(f"warning: best.safetensors (step {best['step']}, val {float(best['val_loss']):.4f}) is later than the "
            f"checkpoint resumed from (step {step}); kept as {path} (this session's evaluations write a new "
            "best.safetensors)")


def _set_aside_unlisted(run_dir: Path, log) -> None:
    """Step checkpoint files manifest.json does not list are renamed ``NAME.unlisted``
    (:func:`~depthlab.checkpoint.set_aside_unlisted`), and one warning (``log``) names them."""
    moved = ckpt.set_aside_unlisted(run_dir)
    if moved:
        n = len(moved)
        it = agree(n, "it", "them")
        log(f"warning: {counted(n, 'step checkpoint file')} in {run_dir / CHECKPOINTS} {agree(n, 'was', 'were')} "
            f"not listed in manifest.json (a checkpoint write or rotation cut short, by a kill?): no sha256 vouches "
            f"for {it}, so this run neither resumes from nor counts {it}; renamed to {', '.join(moved)}, so that no "
            f"checkpoint of this session replaces {it} and no rotation deletes {it}: delete {it} when you no "
            f"longer need {it}")


def _remove_stale_temps(run_dir: Path, log) -> None:
    """Remove the temporary files of depthlab's own writes cut off mid-way (:func:`~depthlab.rundir.stale_temp_files`,
    older than this process) from the run folder and its checkpoints/, with one line (count and where); only while
    this process holds the run's lock, so no other process of depthlab is writing them."""
    if not runlock.is_held(run_dir):
        return
    gone = []
    for p in rundir.stale_temp_files(run_dir, runlock.process_start()):
        try:
            p.unlink()
        except FileNotFoundError:
            continue
        gone.append(p)
    if gone:
        where = " and ".join(sorted({str(p.parent) for p in gone}))
        log(f"resume: removed {len(gone)} temporary file{'s' if len(gone) > 1 else ''} of depthlab's writes cut off "
            f"mid-way (a kill?) from {where}: {', '.join(p.name for p in gone[:3])}{', ...' if len(gone) > 3 else ''}")


def _warn_cut_records(run_dir: Path, step: int, slack: int, log) -> None:
    """Warnings (``log``) of damaged lines in metrics.jsonl and of records that end more than ``slack`` steps before
    the checkpoint at ``step`` (see :meth:`Checkpointer.reopen`)."""
    bad = rundir.damaged_metrics_lines(run_dir)
    if bad:
        what = agree(bad, "was not a JSON record", "were not JSON records")
        them = agree(bad, "it", "them")
        log(f"warning: {counted(bad, 'line')} of {rundir.METRICS} {what} (damaged); the resumed run drops {them}, "
            f"and its figures and diagnosis lack what {them} held")
    kept = [int(r["step"]) for r in rundir.read_metrics(run_dir) if int(r.get("step", 0)) <= step]
    last = max(kept, default=0)
    if step > 0 and last < step - slack:
        if not (run_dir / rundir.METRICS).is_file():  # not cut: gone ("end at step 0 ... cut" said of no file)
            log(f"warning: {rundir.METRICS} is missing (deleted?): the resumed run starts a new one and has no records "
                f"of steps 0-{step}")
            return
        log(f"warning: the records of {rundir.METRICS} end at step {last}, before the checkpoint at step {step} (cut "
            f"or damaged): the resumed run has no records of steps {last + 1}-{step}")


def _refuse_nonfinite(run_dir: Path, path: Path, sd: dict) -> None:
    """A checkpoint whose weights hold NaN or inf (never written so: changed after it was written, its sha256
    with it) is refused before anything is written, naming it and the way forward that works for this run.

    Raises:
        DepthlabError: a weight of ``sd`` is not finite.
    """
    bad = ckpt.nonfinite_weight(sd)
    if bad is None:
        return
    best = ckpt.finite_best(run_dir)
    fix = (f"restore {path.name} from a copy of the run, or start a new run from its best weights ({best.name}, "
           f"finite): {ckpt.new_run_command(run_dir, True)}" if best is not None else
           f"restore {path.name} from a copy of the run (its best.safetensors is no finite, intact alternative)")
    raise DepthlabError(f"cannot resume {run_dir}: its checkpoint {path} holds non-finite weights ({bad} is "
                        "NaN or inf) though its sha256 matches manifest.json; depthlab never writes such a file, "
                        f"so it was replaced after training; nothing was changed; {fix}")

def _other_optimizer(run_dir: Path, state, used: str) -> DepthlabError:
    """The error for a checkpoint whose optimizer state (``state``) is not the ``used`` optimizer's: names the
    one it holds (Muon's is a ``{"muon", "adamw"}`` pair) and why this resume chose another: config.json's
    ``resolved.optimizer`` records what ``auto`` became, and it was deleted or edited (the checkpoint's own
    config says ``auto`` too, and a changed ``train.optimizer`` is refused before this)."""
    held = "muon" if isinstance(state, dict) and set(state) == {"muon", "adamw"} else "adamw"
    resolved = (RunDir(run_dir).config or {}).get("resolved")
    why = (f"{CONFIG}'s resolved.optimizer, which records what train.optimizer auto became, is missing (deleted?), "
           f"and a run without it is taken as one from before the field, an {PREDATING['train']['optimizer']} run"
           if not isinstance(resolved, dict) or "optimizer" not in resolved else
           f"{CONFIG}'s resolved.optimizer says {resolved['optimizer']!r} (edited by hand?)")
    return DepthlabError(f"cannot resume {run_dir}: its checkpoint holds {held}'s optimizer state, not the "
                         f"{used} this resume would use: {why}; set \"optimizer\": \"{held}\" in the \"resolved\" "
                         f"section of {run_dir / CONFIG}")


class Checkpointer:
    """Saving and loading the checkpoints of the run in ``run_dir``.

    Args:
        run_dir: the run directory. runtime: the run's Runtime (only its main process writes).
        log: console lines.

    Attributes:
        background: the training loop's :meth:`save_agreed` takes the snapshot (the files' bytes) at once and
            hands hashing and writing to a thread, one write at a time and in order, so training goes on
            meanwhile. True on CUDA, where the step checkpoint at every evaluation held the GPU idle ~0.42 s on
            an H200 machine at nanoGPT's GPU shape, about a third of a run to val 1.47; False elsewhere (a CPU's
            cores are busy training). A failed background write is raised by the next :meth:`save` or
            :meth:`wait`; the trainer waits for the last one before it reads ``best`` or returns.
    """

    def __init__(self, run_dir: Path, runtime, log, init_source: Optional[str] = None):
        self.run_dir, self.runtime, self.log = run_dir, runtime, log
        self.init_source = init_source  # --init-from: the run or export whose weights start this new run
        self.init_record: dict = {}  # {"init_from": init_record(...)}: config.json resolved and summary.json
        self.background = runtime.device.type == "cuda"
        self.writes = BackgroundWrites()  # save(background=True)'s write in flight
        self.replaced = False  # claim(): --overwrite replaced a previous run
        self.later_best: Optional[dict] = None  # check_resume(): a best after the checkpoint resumed from
        # check_resume() of a folder this user cannot write: the refusal and the lines held back until it is known
        # whether the session trains (:meth:`settle_writable`); a resume with nothing to train writes nothing
        self._unwritable: Optional[DepthlabError] = None
        self._held: Optional[tuple[list, object]] = None  # (lines held back, the log they go to)
        self._noted: list[str] = []  # check_resume(): the changed fields' lines, said once the session trains

    # ------------------------------------------------------------------ before the model exists
    def check_resume(self, cfg, corpus, device) -> ResumePoint:
        """Refuse a resume whose corpus or config differs where it matters; find its checkpoint.

        A character run's deleted vocab.json is written again from the ``corpus`` (a :class:`~depthlab.data.Corpus`)
        when it is the file the run trained on (its sha256 is config.json's ``resolved.corpus_sha256``): its
        characters are the run's. The corpus's length is judged against ``model.block_size`` once it is the run's.

        Raises:
            DepthlabError: not a run, another vocabulary, or a refused field change (naming them).
        """
        rd = RunDir(self.run_dir)
        if self.runtime.is_main and self.run_dir.is_dir():
            # before anything is written: one process trains a run at a time
            runlock.hold(self.run_dir, self.runtime, resume=True)
            self._check_writable(rd)
        try:
            rd.require("config")
            # before anything is written: a folder where the run writes a file fails only after config.json changed
            rd.refuse_non_files(METRICS, SUMMARY, VOCAB, TOKENIZER, BASELINES, DIAGNOSIS, TRAIN_LOG)
            _refuse_blocked_folders(rd)
        except DepthlabError as e:
            if not self.run_dir.exists() and not self.run_dir.is_symlink():  # train.resume true from a file or flag
                raise DepthlabError(f"cannot resume: {e}, or pass --train.resume false to start a new run in "
                                    f"{self.run_dir} (train.resume is true, e.g. in a run's config.json given "
                                    "with -c)") from None
            raise DepthlabError(f"cannot resume: {e}") from None
        old = rd.config or {}
        self.init_record = kept_init_record(old)  # a resume keeps the record of its --init-from
        _check_tokenizer(rd, getattr(corpus.tokenizer, "sha256", None) is not None)
        same_corpus, vocab_gone = _check_corpus(rd, cfg, corpus.tokenizer.vocab, corpus.sha256)
        corpus.check_block_size(cfg.model.block_size, log=self.log if self.runtime.is_main else None)
        asked = self._asked(cfg, old, same_corpus)
        optimizer = self._resume_optimizer(cfg, old, asked, device)
        ran = {k: v for k, v in old.items() if k in asked}  # the sections a resume compares
        refused, noted = resume_config.resume_changes(ran, asked, old.get("resolved"))
        if refused:
            quoted = shlex.quote(str(rd.path))
            raise DepthlabError(f"cannot resume {quoted} with changed {'; '.join(refused)} (run value -> asked); "
                                f"{'these change' if len(refused) > 1 else 'this changes'} what the run's numbers "
                                f"mean: resume with the run's own values (depthlab train --resume {quoted} alone "
                                f"reads them from its config.json), or {_new_run_advice(rd.path, refused, ran, asked)}")
        # said by settle_writable if the session trains
        self._noted = [f"resume: {line}" for line in (*resume_config.config_json_notes(rd.path), *noted)]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            entry = _latest_to_resume(rd.path)
        for w in caught:
            self.log(f"warning: {w.message}")
        trained = _trained_past_a_checkpoint(rd) if entry is None else None
        if trained is not None:
            ckdir = rd.file(CHECKPOINTS)
            files = sorted(p.name for p in ckdir.glob("*.safetensors")) if ckdir.is_dir() else []
            where = (f"its manifest.json lists no checkpoint, though {ckdir} holds {', '.join(files[:3])} (emptied or "
                     "edited?)" if files else f"{ckdir} holds no checkpoint (deleted?)")
            raise DepthlabError(f"cannot resume {rd.path}: {trained}, but {where}, and starting again from step 0 "
                                "would overwrite the run's records; restore its checkpoints from a copy, or train "
                                "into a new train.out_dir")
        point, said, warning = _resume_point(rd, entry, old, optimizer, vocab_gone)
        self._noted[:0] = said  # said by settle_writable if the session trains
        if warning:
            self.log(f"warning: {warning}")
        self.later_best = ckpt.later_best(rd.path, entry["step"]) if entry is not None else None
        return point

    def _check_writable(self, rd: RunDir) -> None:
        """A run folder (its checkpoints/, metrics.jsonl) this user cannot write: the resume's lines are held back
        and the refusal kept for :meth:`settle_writable`: a session that trains writes its lock, checkpoints and
        records, so it is refused before the resume's notices, which would not come true; one with nothing to
        train writes nothing, so it says what it says on a writable run."""
        try:
            runlock.require_writable(self.run_dir, rd.file(CHECKPOINTS), rd.file(METRICS))
        except DepthlabError as e:
            self._unwritable, self._held = e, ([], self.log)
            self.log = self._held[0].append

    def settle_writable(self, trains: bool) -> None:
        """Whether the resumed session ``trains`` is known (before anything is written or a ``resuming`` line):
        the held-back lines are said when it does not; a folder this user cannot write is refused when it does.

        Raises:
            DepthlabError: ``trains`` into a folder :meth:`check_resume` found not writable (naming it and the fix).
        """
        if trains and self._unwritable is not None:
            raise self._unwritable
        if self._held is not None:
            lines, self.log = self._held
            self._held = None
            for line in lines:
                self.log(line)
        # a changed field "changes from the next step": untrue of a session with nothing to train
        for line in self._noted if trains else ():
            self.log(line)
        self._noted = []

    @staticmethod
    def _resume_optimizer(cfg, old: dict, asked: dict, device) -> str:
        """The optimizer a resume keeps: the one the run was made with (``old``: its config.json).

        ``auto`` resumes with what it resolved to then, whatever this device is, and ``auto`` and
        that optimizer count as the same value in ``asked`` (the config compared for changes). A
        run without ``resolved.optimizer`` predates the field (:data:`~depthlab.config.PREDATING`).
        """
        ran = (old.get("resolved") or {}).get("optimizer") or PREDATING["train"]["optimizer"]
        old_field = (old.get("train") or {}).get("optimizer")
        if old_field is not None and {old_field, asked["train"]["optimizer"]} <= {"auto", ran}:
            asked["train"]["optimizer"] = old_field
        return ran if cfg.train.optimizer == "auto" else resolve_optimizer(cfg.train.optimizer, device)

    # ------------------------------------------------------------------ loading
    def load(self, entry: dict, run) -> dict:
        """Load checkpoint ``entry`` into ``run`` (weights, optimizer, batch RNG); returns its resume state.

        Raises:
            DepthlabError: the checkpoint holds another optimizer's state, or the corpus changed.
        """
        ckdir = self.run_dir / ckpt.CKPT_DIR
        path = ckdir / f"{entry['name']}.safetensors"
        sd, _ = ckpt.load_weights_file(path)
        _refuse_nonfinite(self.run_dir, path, sd)
        ckpt.load_into(run.raw_model, sd, path)
        st = ckpt.load_state(ckdir / f"{entry['name']}.state.pt")
        try:
            run.optimizer.load_state_dict(st["optimizer"])
        except (ValueError, KeyError):  # a state of another optimizer: config.json was edited by hand
            raise _other_optimizer(self.run_dir, st["optimizer"], run.optimizer_name) from None
        apply_hyperparameters(run.optimizer, run.cfg.train)  # the state brought the old decay and betas back
        ckpt.restore_rng_state(st["rng"], run.batch_rng, self.runtime.device)
        old_sha = st.get("corpus_sha256")
        if old_sha is not None and old_sha != run.corpus.sha256:
            raise DepthlabError(f"cannot resume {self.run_dir}: the corpus {run.corpus.path} changed since the "
                                f"checkpoint (sha256 {old_sha[:12]}... then, {run.corpus.sha256[:12]}... now); "
                                "resume with the original file, or start a new run (--init-from)")
        return st

    def _asked(self, cfg, old: dict, same_corpus: bool) -> dict:
        """The config a resume asks for, as config.json would hold it (``data.path`` absolute) to compare with the
        run's ``old`` one; a moved corpus (the same sha256 as the run's) compares as the run's path, said once; a
        copy of the embedded corpus for a run trained on it sets ``cfg.data.path`` back to unset (config.json too)."""
        asked = cfg.to_dict()
        path, old_path = asked["data"].get("path"), (old.get("data") or {}).get("path")
        if corpus_file(path) is not None:
            asked["data"]["path"] = path = str(corpus_file(path))
            # a link to the run's file (or the run's own path written another way) did not move: nothing to say
            if same_corpus and corpus_file(old_path) not in (None, Path(path)):
                self.log(f"resume: the corpus moved: data.path {old_path} -> {path} (the same file: its sha256 is "
                         f"the one config.json recorded)")
                asked["data"]["path"] = old_path
            elif same_corpus and not old_path:  # a copy of the embedded text: the run keeps the embedded corpus
                self.log(f"resume: data.path {path} holds exactly the text of the embedded corpus the run was trained "
                         "on (the sha256 config.json recorded): the run keeps the embedded corpus (config.json's "
                         "data.path stays unset; this file is not needed by the run)")
                asked["data"]["path"] = cfg.data.path = None
        old_source = (old.get("model") or {}).get("source")
        if asked["model"].get("source") != old_source and resume_config.same_source(old_source, cfg.model.source):
            asked["model"]["source"] = cfg.model.source = old_source  # the run's model, written another way
        return asked

    @staticmethod
    def refuse_before_loading(cfg) -> None:
        """Before a resume loads its corpus: config.json edited by hand against its checkpoint
        (:func:`~depthlab.resume_config.refuse_edited_config`), and a data.path that is gone, named with the fixes
        that apply to a resume (train's "leave data.path unset" is none: another text is refused).

        Raises:
            DepthlabError: the run lies inside another run (rundir.nested_resume_error), an edited field, or the
                corpus file is missing.
        """
        nested = rundir.nested_resume_error(Path(cfg.train.out_dir)) if cfg.train.out_dir else None
        if nested is not None:  # resuming would keep writing a run nested in a run, as a new one there is refused
            raise nested
        if cfg.train.out_dir and Path(cfg.train.out_dir).is_dir():
            resume_config.refuse_edited_config(Path(cfg.train.out_dir), "cannot resume")
        if cfg.data.path and not Path(cfg.data.path).expanduser().exists():
            raise DepthlabError(_missing_corpus(cfg))

    def claim(self, overwrite: bool) -> Optional[Path]:
        """Make (or, with ``overwrite``, replace) the run folder under this process's lock
        (:func:`~depthlab.training.runlock.claim_run_dir`); remembers whether a previous run was replaced.

        Raises:
            DepthlabError: ``overwrite`` of the folder ``--init-from`` names (before anything is moved or deleted).
        """
        if overwrite and self.init_source and Path(self.init_source).resolve() == self.run_dir.resolve():
            raise DepthlabError(f"{init_from_flag(self.init_source)}: that is the folder this run "
                                f"would replace (--overwrite of train.out_dir {self.run_dir}), so its weights cannot "
                                "start the run; give another --train.out_dir (nothing was changed)")
        replaced = runlock.claim_run_dir(self.run_dir, overwrite, self.runtime)
        self.replaced = replaced is not None
        return replaced

    def kept_note(self, back: bool = False) -> str:
        """What a run that stopped (a non-finite loss) leaves (:func:`kept_words`)."""
        return kept_words(self.run_dir, self.replaced, back)

    def restart(self) -> None:
        """A run with no checkpoint yet starts again from step 0: its records go, and an unlisted step file (its first
        checkpoint's write cut short) is set aside, not replaced."""
        self.log(f"no checkpoint in {self.run_dir} yet; starting it again from step 0")
        _say_set_aside(self.run_dir, self.log)
        _remove_stale_temps(self.run_dir, self.log)
        truncate_metrics(self.run_dir, -1)
        _set_aside_unlisted(self.run_dir, self.log)

    def announce_resume(self, run) -> None:
        """``resuming RUN from step N (best val X)`` for a session that trains or evaluates (the caller leaves out a
        run with nothing left, which says ``nothing to train``); a run without a finite val loss says so (not
        ``best val inf``)."""
        best = f"best val {run.best_val:.4f}" if math.isfinite(run.best_val) else "no finite val loss yet"
        if self.later_best is not None:  # the newest checkpoint was damaged: the run's best is later than this one
            lb = self.later_best
            best += (f" as of this checkpoint; the run's best is val {float(lb['val_loss']):.4f} at step "
                     f"{lb['step']}, after it")
        else:  # a best kept aside by an earlier fallback resume, still better than this checkpoint's
            best += ckpt.kept_clause(self.run_dir, run.best_val)
        self.log(f"resuming {self.run_dir} from step {run.step} ({best})")

    def reopen(self, step: int, slack: int = 0, best: tuple[int, float] = (-1, math.inf)) -> bool:
        """Files of a resumed run at ``step``: later records dropped, no summary or diagnosis, ``best`` repaired, the
        temporary files of writes cut off mid-way removed.

        ``slack``: steps the checkpoint may follow the last record by: 0 for an evaluation's (its record is written
        before it; a manifest entry older than its ``evaluated`` key counts as one), ``log_interval`` for one saved
        at a stop (Ctrl-C, SIGTERM); records ending earlier than that were cut, and a warning says so. ``best``:
        the resumed state's best (step, val loss in nats), which adopts a best.safetensors the manifest does not
        name (:func:`~depthlab.checkpoint.unrecorded_best`).

        Returns:
            True when the best checkpoint could not be kept and the next evaluation becomes the best.
        """
        _remove_stale_temps(self.run_dir, self.log)
        _keep_later_best(self.run_dir, step, self.log)
        _set_aside_unlisted(self.run_dir, self.log)
        _warn_cut_records(self.run_dir, step, slack, self.log)
        truncate_metrics(self.run_dir, step)
        # the end's records describe the session that wrote them: the run now goes on (a report read a stopped
        # resume's diagnosis.json of its first 5 steps as the diagnosis of its 479)
        for name in (rundir.SUMMARY, DIAGNOSIS):
            (self.run_dir / name).unlink(missing_ok=True)
        repaired = ckpt.repair_best(self.run_dir) or ckpt.unrecorded_best(self.run_dir, *best)
        if repaired is None:
            return False
        self.log(f"warning: {repaired}")
        return "next evaluation" in repaired

    def start_weights(self, model, run):
        """``model`` (of ``run``, a Trainer in set-up) with the ``--init-from`` weights loaded (:meth:`init_from`)
        when given; their file, sha256, step and val loss go to :attr:`init_record` and one console line."""
        if self.init_source:
            self.init_record = {"init_from": self.init_from(Path(self.init_source), model, run.cfg.model,
                                                            run.corpus.tokenizer)}
            self.log(init_line(self.init_record["init_from"], self.init_source))
            for line in (same_shape_changes(Path(self.init_source), dataclasses.asdict(run.cfg.model)),
                         split_overlap(Path(self.init_source), run.cfg, run.corpus.sha256)):
                if line:
                    self.log(line)
        return model

    @staticmethod
    def init_from(rd: Path, raw_model, model_cfg, tokenizer) -> dict:
        """Load the best weights of run ``rd`` (or of a ``depthlab export`` folder) into a fresh run's model;
        returns their :func:`~depthlab.init_from.init_record`.

        Raises:
            DepthlabError: the weights do not fit; the model fields that differ from the source run's
                are named (the command line takes the source's shape unless told otherwise).
        """
        sd, record = init_weights(rd, model_cfg, tokenizer)
        weights = ckpt.misfit(raw_model, sd)
        if weights:
            why = _unfit_weights(rd, dataclasses.asdict(model_cfg), weights) or \
                f"checkpoint {rd} does not fit this model: {weights}"
            raise DepthlabError(why + changed_source(rd, model_cfg.source))
        ckpt.load_into(raw_model, sd, rd)
        return record

    # ------------------------------------------------------------------ saving
    @staticmethod
    def meta(cfg, tokenizer, plan: Optional[Plan] = None) -> dict[str, str]:
        """The string metadata stored in every weights file: config (``data.path`` absolute), vocabulary, tokenizer
        kind, and the time plan the run follows (``null`` for none): with the config, the schedule its weights were
        trained on."""
        d = cfg.to_dict()
        if d["data"].get("path"):  # absolute, as config.json has it: an export's depthlab.json names it from anywhere
            d["data"]["path"] = str(corpus_file(d["data"]["path"]))
        meta = {"config": json.dumps(d), "vocab": json.dumps(tokenizer.vocab, ensure_ascii=False),
                "tokenizer": cfg.data.tokenizer, "plan": json.dumps(plan.to_record() if plan is not None else None)}
        if getattr(tokenizer, "json", None) is not None:
            meta["tokenizer_sha256"] = tokenizer.sha256
        return meta

    def save(self, run, is_best: bool = False, val_loss: Optional[float] = None, background: bool = False) -> None:
        """Write a step checkpoint of ``run`` (and ``best`` if ``is_best``) on the main process: now, or with
        ``background`` (the training loop's saves, where :attr:`background` allows) from a snapshot taken now.

        Raises:
            OSError or DepthlabError: this write failed, or the background write before it did.
        """
        if not self.runtime.is_main:
            return
        meta = self.meta(run.cfg, run.corpus.tokenizer, run.budget.plan)
        files = ckpt.checkpoint_bytes(run.step, run.raw_model, run.resume_state(), meta)
        self.wait()
        self._say_replaced(run.step)
        args = (self.run_dir, files, run.cfg.train.keep_last, is_best, val_loss)
        if not (background and self.background):
            ckpt.write_checkpoint(*args)
            return
        self.writes.start(*args)

    def _say_replaced(self, step: int) -> None:
        """One warning when this step's checkpoint replaces a damaged one of the same step (kept untouched since a
        fallback resume skipped it): the user's file is not lost without a word."""
        bad = ckpt.damaged_at(self.run_dir, step)
        if bad is not None:
            self.log(f"warning: the damaged checkpoint of step {step} ({bad}, {self._fault(bad)}), left untouched "
                     f"since a resume skipped it, is replaced now by this session's checkpoint of step {step}")
        for old, bad in ckpt.passed_damaged(self.run_dir, step):
            self.log(f"warning: the damaged checkpoint of step {old} ({bad}, {self._fault(bad)}), left untouched since "
                     f"a resume skipped it, is no longer listed in manifest.json: the run has passed its step (step "
                     f"{step}) without writing it again; its files stay in {self.run_dir / ckpt.CKPT_DIR} "
                     f"(step-{old:06d}.*): delete them when you no longer need them")

    def _fault(self, bad: str) -> str:
        return "missing" if not (self.run_dir / ckpt.CKPT_DIR / bad).exists() else "not matching its sha256"

    def wait(self) -> None:
        """Wait for the background write in flight, if any (:meth:`BackgroundWrites.wait`).

        Raises:
            the error that write ended with (once).
        """
        self.writes.wait()

    def save_agreed(self, run, is_best: bool = False, val_loss: Optional[float] = None) -> None:
        """``run.save`` on rank 0, then every rank learns whether it failed and stops together if so.

        Raises:
            DepthlabError or OSError: the checkpoint could not be written (on every rank).
        """
        self._agreed(lambda: run.save(is_best=is_best, val_loss=val_loss, background=True))

    def settle(self) -> None:
        """:meth:`wait` where another error is already on its way: a failed write is logged, not raised."""
        self.writes.settle(self.log)

    def wait_agreed(self) -> None:
        """:meth:`wait` on every process, stopping together if the main process's background write failed.

        Raises:
            DepthlabError or OSError: the checkpoint could not be written (on every rank).
        """
        self._agreed(self.wait)

    def _agreed(self, write) -> None:
        error: Optional[BaseException] = None
        try:
            write()
        except (DepthlabError, OSError) as e:
            error = e
        if self.runtime.agree(save_failed=error is not None)["save_failed"]:
            raise error if error is not None else DepthlabError(
                "the checkpoint write failed on the main process; every process stops")


def kept_words(run_dir: Path, replaced: bool, back: bool = False) -> str:
    """What a run that stopped (a non-finite loss) leaves: its checkpoints, none yet, and whether ``--overwrite``
    replaced the run the folder held before (``replaced``: whose checkpoints are gone), or, ``back``, that no step
    has trained in that run's place, so it goes back and this run's files go."""
    if back:
        return (f"no step has trained in place of the run {run_dir} held before: it is put back there as it "
                "was (--overwrite replaces it once a step has trained), and this run's files are removed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            entry = ckpt.latest_checkpoint(run_dir)
        except DepthlabError:
            entry = None
    ours = (f"this run's checkpoints in {run_dir} (the latest at step {entry['step']}) are untouched"
            if entry is not None else f"{run_dir} holds no checkpoint of this run")
    if replaced:
        return f"--overwrite replaced the run {run_dir} held before (its checkpoints are gone); {ours}"
    return ours


def _say_set_aside(run_dir: Path, log) -> None:
    """The warning of a run ``--overwrite`` set aside beside ``run_dir`` and never put back (the process was killed
    before the new run's first step), said when a resume starts that new run again: it was never said again."""
    aside = rundir.set_aside_run(run_dir)
    if aside is not None:
        log(f"warning: {rundir.set_aside_words(run_dir, aside, 'rm -r')}; this resume trains the new run instead, "
            f"and leaves it there (rm -r {shlex.quote(str(aside.parent))} once you no longer need it)")
