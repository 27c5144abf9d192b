"""The ``depthlab`` command: one table of subcommands, one jsonargparse grammar for all of them.

Every command is built by :func:`new_parser` and shares its spellings: ``-c/--config FILE.yaml``
(keys = the command's option names, or the sections ``data``/``model``/``train`` for commands that
take a run config), ``--print_config``, dotted config fields (``--model.n_layer 8``), ``--device``
(``auto`` everywhere), ``--threads``, ``--overwrite``, ``--out`` for a file to write and
``--out_dir`` for a folder, and ``--debug``. Options are spelled with underscores as in litgpt;
the dashed spellings (``--max-new-tokens``, ``--out-dir``) are accepted aliases.

The CLI owns no logic: it parses, builds configs and calls the library. Bad input ends as one
line ``depthlab: error: ...`` on stderr with exit status 2 (3 for a non-finite loss, 130/143 for
SIGINT/SIGTERM); ``--debug`` shows the traceback instead. The command line is checked in
depthlab's own words before the parser reads it (:mod:`depthlab.cli_args`: each value against its
option's type, unknown options, missing values); no message of argparse or jsonargparse is read.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import signal
import sys
import warnings
from argparse import SUPPRESS, ArgumentError
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Sequence

from .cli_args import SECTIONS, check_argv, check_keys, check_no_empty_paths, files_first, flag, \
    hide_train_options, occurrences, one_line, spelled_as_typed, typed_flags
from .cli_expand import (attribute_config_error, attribute_option_error, deferred_warnings,  # noqa: F401
                         expand_presets, expand_train_argv, gpu_recipe_on_cpu, list_presets, preset_dir,
                         typed_gpt_fields_error,
                         preset_path, say_deferred_notices)
from .config import ConfigError
from .errors import (DepthlabError, NonFiniteError, Terminated, did_you_mean, no_space, no_space_words, sigint_seen,
                     watch_sigint, watch_sigterm)

from .cli_parser import PROG, add_device as _add_device, add_run_dir as _add_run_dir, config_from as _config_from, \
    new_parser, set_threads as _set_threads, value_types


# ------------------------------------------------------------------------- train
def build_train_parser():
    """The parser of ``depthlab train`` (sections data / model / train)."""
    p = new_parser("train", "Train a GPT. Defaults: the CPU recipe on the embedded Tiny Shakespeare corpus. "
                            "Losses are in nats per token (characters for the char tokenizer).",
                   config_fields=True)
    p.add_argument("--preset", type=Optional[str], default=None,
                   help="load a preset shipped with depthlab (see `depthlab presets`); a --data.*/--model.*/--train.* "
                        "flag overrides it wherever it stands, and a -c file given after it too")
    p.add_argument("--resume", type=Optional[str], default=None,
                   help="continue the run in RUN_DIR from its latest good checkpoint")
    p.add_argument("--init_from", "--init-from", type=Optional[str], default=None,
                   help="start a new run from the best weights of RUN_DIR (same model shape)")
    # set by --init-from of a model.source run when the command names no model.source: its model is that run's
    # own copy of the file (the code its weights were trained with), not the file as it is now
    p.add_argument("--init_from_copy", type=bool, default=False, help=SUPPRESS)
    p.add_argument("--overwrite", action="store_true", help="replace an existing run directory (only a depthlab run)")
    return p


def run_train(ns) -> int:
    """``depthlab train``: build the config, train with the default analytics, print the diagnosis."""
    from .analytics import default_callbacks
    from .trainer import Trainer, fit_checked
    from .training.autotune import Restart

    try:
        cfg = _config_from(ns)
    except DepthlabError as e:
        train = ns.as_dict().get("train") or {}
        if not train.get("resume"):
            raise
        from .resume_config import config_edits
        from .cli_expand import resume_config_fault
        from .rundir import CONFIG

        run = Path(train.get("out_dir") or ".")
        if resume_config_fault(run) is None:  # config.json alone is valid: a flag given with the resume failed
            raise
        edits = config_edits(run)  # the checkpoint's own config names the value to put back
        said = f"{e} (--resume reads {run / CONFIG}" + (
            f", which {edits}: put the checkpoint's values back)" if edits else
            ": if that value was edited there by hand, put back the one the run was trained with)")
        raise (e.reworded(said) if isinstance(e, ConfigError) else DepthlabError(said)) from None
    if ns.overwrite and cfg.train.resume:  # before: --overwrite was ignored and the run resumed
        raise DepthlabError(f"--overwrite and a resume (--resume, or train.resume true) contradict each other: "
                            f"resuming continues {cfg.train.out_dir} in place, overwriting replaces it; drop one")
    if cfg.train.flush_denormal and _PROCESS_ARGV is not None:
        # this process's own command line: set before any parallel work, so OpenMP's threads (made later)
        # inherit it; the process ends after training. Python callers get it around the loop only (numerics()).
        import torch

        torch.set_flush_denormal(True)
    if _PROCESS_ARGV is not None:  # the process ends after training: freed memory is kept from the start
        from .training import hostmem

        hostmem.keep_freed_memory()
    try:
        trainer = Trainer(cfg, callbacks=default_callbacks(cfg), overwrite=bool(ns.overwrite), init_from=ns.init_from,
                          restart_ok=_PROCESS_ARGV is not None, init_from_copy=bool(ns.init_from_copy),
                          command_line=True)
    except OSError as e:
        if not no_space(e):
            raise
        raise DepthlabError(_no_space_in_run(e, Path(cfg.train.out_dir))) from None
    except Restart as r:  # raised before anything was written: the same command, another OpenMP policy
        import os

        print(r.line(), flush=True)
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", "depthlab", *_PROCESS_ARGV], {**os.environ, **r.env})
    say_deferred_notices()  # the run is made: a refusal above said its one line alone
    for message in filter(None, [*deferred_warnings(), gpu_recipe_on_cpu(trainer.device)]):
        warnings.warn(message)
    try:
        fit_checked(trainer)
    except OSError as e:
        if not no_space(e):
            raise
        raise DepthlabError(_no_space_in_run(e, Path(cfg.train.out_dir))) from None
    return 0


def _no_space_in_run(e: OSError, run: Path) -> str:
    """The line of a run whose disk filled up while it trained: the device, the file, and how to go on (a resume
    from its last checkpoint where one is listed and intact, else from step 0)."""
    import shlex

    from .checkpoint import latest_checkpoint
    from .rundir import CONFIG

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            entry = latest_checkpoint(run)
    except (DepthlabError, OSError, ValueError, KeyError, TypeError):
        entry = None
    resume = f"depthlab train --resume {shlex.quote(str(run))}"
    elsewhere = "or train again with another --train.out_dir on a disk with room"
    if entry is not None:
        return (f"{no_space_words(e, run)} and resume with {resume} (it continues from its checkpoint of step "
                f"{entry.get('step')}), {elsewhere}")
    if (run / CONFIG).is_file():
        return (f"{no_space_words(e, run)} and run {resume} (no checkpoint was written yet: it starts from step 0), "
                f"{elsewhere}")
    return f"{no_space_words(e, run)} (or choose another --train.out_dir) and run the command again"


# ------------------------------------------------------------------------- probe
def build_probe_parser():
    """The parser of ``depthlab probe``: run-config fields plus the probe's own options."""
    from .analytics.probe import PROBE_BATCH_SIZE, PROBE_BATCHES

    p = new_parser("probe", "Build the model at initialisation, run forward/backward on a few seeded batches of "
                            "the corpus and print per block: gradient L2 norm, mean |grad|, activation RMS, rank "
                            "measure (Dong et al. 2021), a plain-words summary and a PNG (default "
                            "probe-<variant>-<norm>-<n_layer>.png, with -<field>-<value> for a residual_scale, "
                            "norm_scale or embed_scale it does not take by default). No training.", config_fields=True)
    p.add_argument("--preset", type=Optional[str], default=None, help="load a training preset's model/data")
    p.add_argument("--json", action="store_true", help="print the measurements as one JSON object")
    p.add_argument("--out", type=Optional[str], default=None,
                   help="PNG file to write (a new name without an extension gets .png added; an existing "
                        "file is replaced only if it is a .png probe wrote), or an existing folder to write the "
                        "default name in")
    p.add_argument("--batches", type=int, default=PROBE_BATCHES, help="batches of text to average over")
    p.add_argument("--probe_batch_size", "--probe-batch-size", type=int, default=PROBE_BATCH_SIZE,
                   help="sequences per batch")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = min(torch default, 4))")
    hide_train_options(p)  # probe trains nothing: of train.* it takes train.seed only
    return p


def _probe_png(cfg, out: Optional[str]) -> Path:
    m = cfg.model
    # a setting beside variant/norm/depth that changes the model gets its own name, or one probe overwrites another's
    asked = [f"-{k}-depth" for k in ("residual_scale", "norm_scale") if getattr(m, k) == "depth"]
    if m.embed_scale != "auto" and m.built_embed_scale != dataclasses.replace(m, embed_scale="auto").built_embed_scale:
        asked.append(f"-embed_scale-{m.embed_scale}")
    norm = "none" if m.variant == "rezero" else m.norm  # ReZero has no norm whatever model.norm says
    default = f"probe-{m.variant}-{norm}-{m.n_layer}{''.join(asked)}.png"
    path = Path(out) if out else Path(default)
    if out and path.is_dir():  # a folder: the default name inside it (the "plot: PATH" line says where)
        path = path / default
    elif out and out.endswith(("/", os.sep)):  # Path drops the slash: was sub.png written for a folder sub/
        raise DepthlabError(f"probe: --out {out} names a folder that does not exist; create it (mkdir -p {out}) "
                            "or give a .png file name")
    if path.suffix.lower() != ".png" and (path.exists() or path.is_symlink()):  # was: afile.png written beside it
        raise DepthlabError(f"probe: --out {path} is an existing file, not a .png file name or a folder; give a "
                            ".png file name or a folder")
    if path.suffix.lower() not in (".png", ""):
        raise DepthlabError(f"probe: --out {path} must be a .png file name; give one such as "
                            f"{path.with_suffix('.png')}, or a folder")
    path = path.with_suffix(".png") if path.suffix == "" else path  # say the name that is actually written
    above = next((p for p in path.parents if p.exists()), None)  # the nearest existing path it goes under
    if above is not None and not above.is_dir():  # "does not exist; create it" was said of a file
        raise DepthlabError(f"probe: --out {path}: {above} is a file, not a folder; give a path inside a folder")
    if not path.parent.is_dir():
        raise DepthlabError(f"probe: the folder of --out {path} does not exist; create it or choose another path")
    from .analytics.probe import check_replaceable
    check_replaceable(path)  # only a PNG probe wrote is replaced
    _check_writable_folder(path)
    return path


def _unwritable(path: Path, e: OSError) -> DepthlabError:
    """The refusal of a plot ``path`` that cannot be written: the reason without the temp file's name."""
    return DepthlabError(f"probe: cannot write the plot {path} ({e.strerror or e}: {path.parent.resolve()}); "
                         "give --out PATH in a folder you can write")


def _check_writable_folder(path: Path) -> None:
    """Write and remove a temp file beside ``path`` (as the PNG is written), before measuring: a
    folder the user cannot write (or a read-only disk) was found only after them, and the measurements were lost."""
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise _unwritable(path, e) from None
    os.close(fd)
    os.unlink(tmp)


def run_probe(ns) -> int:
    """``depthlab probe``: measure at init, print the table and summary, write the PNG."""
    from .analytics.probe import format_probe_table, plot_probe, probe_at_init, summarise_probe, wiring_label

    for opt, n in (("--batches", ns.batches), ("--probe_batch_size", ns.probe_batch_size)):
        if n < 1:  # named by its flag (probe_at_init's own message knows no flags)
            raise DepthlabError(f"probe: {opt} must be at least 1, got {n}")
    cfg = _config_from(ns)
    out = _probe_png(cfg, ns.out)
    _set_threads(ns.threads, cap=4)
    result = probe_at_init(cfg, n_batches=ns.batches, batch_size=ns.probe_batch_size, command_line=True)
    summary = summarise_probe(result)
    try:
        plot_probe(result, out)
        failed = None
    except OSError as e:  # the folder was writable a moment ago: the measurements are printed all the same
        failed = _unwritable(out, e)
    if ns.json:
        print(json.dumps({**result, "summary": summary, "plot": None if failed else str(out)}), flush=True)
        if failed:
            raise DepthlabError(f"{failed} (the measurements are the JSON above, its plot null)")
        return 0
    c = result["config"]
    print(f"probe at init: {wiring_label(c)}, {c['n_layer']} blocks x {c['n_embd']} wide, "
          f"{ns.batches} batch{'es' if ns.batches != 1 else ''} of {ns.probe_batch_size} x {c['block_size']} "
          f"tokens; loss {result['loss']:.3f} nats (uniform ln V = {result['uniform_nats']:.3f})")
    print(format_probe_table(result))
    for s in summary:
        print("- " + s)
    if failed:
        sys.stdout.flush()
        raise DepthlabError(f"{failed} (the measurements are printed above)")
    print(f"plot: {out}")
    return 0


# ------------------------------------------------------------------------- check
def build_check_parser():
    """The parser of ``depthlab check PATH.py:NAME``: the model's file, its arguments and the sizes."""
    from .analytics.check import DEFAULT_BATCH_SIZE, RULES

    p = new_parser("check", "Check a model you wrote (PATH.py:NAME, a class or a function returning an nn.Module "
                            "whose forward(idx) gives logits (B, T, V)) before training it: "
                            f"{', '.join(RULES)}. Each check prints its evidence and, when it finds a problem, "
                            "the fix. The file is your code and runs as Python. Exit 0 = no problem found, "
                            "1 = problems found, 2 = usage error.")
    p.add_argument("source", type=str, help="PATH.py:NAME, the file and the class or function that makes the model "
                   "(PATH.py alone: the one nn.Module class the file defines, or of several the only one with a "
                   "forward that no other uses as a part)")
    p.add_argument("--init", type=Optional[str], default=None,
                   help="keyword arguments for NAME, a JSON object, e.g. '{\"n_layer\": 2}'")
    p.add_argument("--data.path", type=Optional[str], default=None,
                   help="text file of the corpus (default: the embedded Tiny Shakespeare)")
    p.add_argument("--batch_size", "--batch-size", type=int, default=DEFAULT_BATCH_SIZE,
                   help="sequences per forward (the training checks use their own small batches)")
    p.add_argument("--block_size", "--block-size", type=Optional[int], default=None,
                   help="sequence length T (default: the model's block_size attribute, at most 1024, else 64)")
    _add_blocks(p)
    p.add_argument("--seed", type=int, default=1337, help="seeds every check")
    p.add_argument("--json", action="store_true",
                   help='print one JSON object {"model": ..., "checks": [{"rule", "ok", "evidence", "remedy"}]}')
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    return p


def _add_blocks(p, ends: bool = False) -> None:
    """``--blocks ATTR`` of check and layers: one option, refused in one place
    (:func:`depthlab.analytics.check.flow.find_blocks`); with ``ends`` (layers, whose lens reads the stream through
    them) also ``--norm ATTR`` and ``--head ATTR``, refused in :func:`depthlab.analytics.layers.layer_access`."""
    p.add_argument("--blocks", type=Optional[str], default=None,
                   help="the model's list of blocks, e.g. transformer.h or encoder.layers (default: found)")
    if ends:
        from .analytics.layers import HEAD_NAMES, NORM_NAMES  # the names layers looks for: one list

        p.add_argument("--norm", type=Optional[str], default=None,
                       help="the model's final norm, after the last block, e.g. encoder.norm (default: found as "
                            f"{', '.join(NORM_NAMES[:-1])} or {NORM_NAMES[-1]})")
        p.add_argument("--head", type=Optional[str], default=None,
                       help="the model's output head, after the final norm (default: found as "
                            f"{', '.join(HEAD_NAMES[:-1])} or {HEAD_NAMES[-1]}; an nn.Embedding, e.g. "
                            "transformer.wte, is read as a head tied to it)")


def _user_prints_to_stderr(on: bool):
    """While a model.source file runs (import, forward): its print()s go to stderr when ``on`` (--json), so that
    stdout holds the one JSON object a script parses; a context manager (a no-op when off)."""
    import contextlib

    return contextlib.redirect_stdout(sys.stderr) if on else contextlib.nullcontext()


def run_check(ns) -> int:
    """``depthlab check``: the table of checks (or JSON); exit 1 when a check found a problem."""
    from .analytics.check import check_source, format_check_table
    from .config import DataConfig

    _set_threads(ns.threads)
    _check_seed(ns.seed)
    log = None if ns.json else (lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    with _user_prints_to_stderr(ns.json):
        report = check_source(ns.source, ns.init, DataConfig(path=ns.data.path), batch_size=ns.batch_size,
                              block_size=ns.block_size, blocks=ns.blocks, seed=ns.seed, log=log, command_line=True)
    print(json.dumps(report.to_dict()) if ns.json else format_check_table(report))
    return report.exit_code


# ------------------------------------------------------------------------- sample
def build_sample_parser():
    """The parser of ``depthlab sample RUN_DIR``."""
    from .config import SAMPLE_DEFAULTS

    p = new_parser("sample", "Generate text from a trained run; prints prompt + generated text to stdout.")
    _add_run_dir(p)
    p.add_argument("--prompt", type=str, default="", help="text to continue (default: a newline)")
    d = SAMPLE_DEFAULTS
    p.add_argument("--max_new_tokens", "--max-new-tokens", type=int, default=d["max_new_tokens"],
                   help="tokens to generate")
    p.add_argument("--temperature", type=float, default=d["temperature"], help="0 = greedy (argmax)")
    p.add_argument("--top_k", "--top-k", type=int, default=d["top_k"], help="keep the k most likely tokens (0 = off)")
    p.add_argument("--top_p", "--top-p", type=Optional[float], default=d["top_p"],
                   help="nucleus sampling mass in (0, 1]")
    p.add_argument("--seed", type=int, default=1337, help="random seed of the sampler")
    p.add_argument("--num_samples", "--num-samples", type=int, default=1, help="independent samples to print")
    p.add_argument("--checkpoint", type=Literal["best", "last"], default="best", help="best (lowest val loss) or last")
    p.add_argument("--no_kv_cache", "--no-kv-cache", action="store_true",
                   help="re-encode the last block_size tokens for every new token (no key/value cache)")
    _add_device(p)
    return p


def _sample_device(name: str) -> str:
    """``--device`` resolved; a bad or absent device is named as ``--device``."""
    from .training.runtime import resolve_device

    return str(resolve_device(name, option="--device"))


def _sample_notes(run_dir: Path, which: str) -> list[str]:
    """The stderr lines of ``depthlab sample RUN`` before its text: which weights speak, and each of the run's
    config.json and vocab.json that is damaged, missing or edited (the checkpoint's own copies are used)."""
    from .checkpoint import describe_weights, read_metadata, select_weights
    from .resume_config import config_edits
    from .analytics.context import start_leak_record
    from .rundir import CONFIG, METRICS, VOCAB, RunDir

    notes, path = [], None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # load_run prints the fallback warning itself
        try:
            path = select_weights(run_dir, which)
            notes.append(f"{PROG}: sampling from {describe_weights(run_dir, path)}")
        except DepthlabError:
            pass  # load_run raises the same error with its own words
    rd = RunDir(run_dir)
    leak = start_leak_record(run_dir) if rd.file(METRICS).is_file() else None
    if leak is not None and leak.get("ok") is False:  # its val loss reads low, and its text is drawn without a future
        notes.append(f"{PROG}: warning: this run's model failed depthlab check's causal leak test when its training "
                     "started (it sees the tokens it predicts: depthlab diagnose says where), so its val loss is no "
                     "measure of it and the text it writes one token at a time, with no future to read, is poor")
    saved_vocab = (read_metadata(path) if path is not None else {}).get("vocab")
    for name in (CONFIG, VOCAB):  # the checkpoint carries both: sampling goes on, the damage is said
        if rd.damaged(name):
            notes.append(f"{PROG}: warning: {rd.file(name)} is not the JSON depthlab wrote (damaged or edited by "
                         "hand); sampling uses the copy inside the checkpoint")
        elif not rd.file(name).exists():
            notes.append(f"{PROG}: warning: {rd.file(name)} is missing (deleted?); sampling uses the copy inside "
                         "the checkpoint")
        elif name == CONFIG and (edits := config_edits(run_dir)) is not None:
            notes.append(f"{PROG}: warning: {rd.file(name)} {edits}; sampling uses the checkpoint's copy")
        elif name == VOCAB and saved_vocab is not None and rd.vocab != json.loads(saved_vocab):
            notes.append(f"{PROG}: warning: {rd.file(name)} differs from the characters stored in {path.name} (edited "
                         "by hand?); sampling uses the checkpoint's copy")
    return notes


def run_sample(ns) -> int:
    """``depthlab sample``: stream generated text (prompt included) to stdout."""
    from .sample import sample_text

    _set_threads(ns.threads)
    device = _sample_device(ns.device)

    info: list[str] = []  # the "sampling from" line, printed when the text starts (after every check passed)

    started: list[bool] = []  # whether any text has been written

    def stream(s: str) -> None:
        while info:
            print(info.pop(), file=sys.stderr)
        sys.stdout.write(s)
        sys.stdout.flush()
        started.append(True)

    from .sample import check_sampling_args

    check_sampling_args(ns.temperature, ns.top_k or None, ns.top_p, ns.max_new_tokens, ns.num_samples)  # one line
    _check_seed(ns.seed)
    if Path(ns.run_dir).is_dir():  # say which weights speak (stderr: stdout is the text alone)
        info.extend(_sample_notes(Path(ns.run_dir), ns.checkpoint))
    try:
        sample_text(ns.run_dir, ns.prompt, ns.max_new_tokens, ns.temperature, ns.top_k or None, ns.top_p,
                    ns.seed, ns.num_samples, ns.checkpoint, device, stream=stream, kv_cache=not ns.no_kv_cache)
    except DepthlabError:  # e.g. NaN logits at a later position: the text so far ends its line before the error
        if started:
            stream("\n")
        raise
    stream("\n")
    return 0


# ------------------------------------------------------------------------- diagnose, report, presets
def build_diagnose_parser():
    """The parser of ``depthlab diagnose RUN_DIR``."""
    from .analytics.diagnose import RULES  # every rule, from their registry (causal_leak and init_loss were left out)

    p = new_parser("diagnose", f"Apply the diagnosis rules ({', '.join(RULES)}) to a run directory's metrics and print "
                               "the findings with evidence and remedy.")
    _add_run_dir(p)
    p.add_argument("--json", action="store_true",
                   help='print {"findings": [{"rule", "evidence", "remedy"}], "not_judged": [...]} (diagnosis.json), '
                        'and "init_from": the weights a run started with --init-from began from (config.json '
                        'resolved.init_from: path, sha256, step, val_loss), null for a run trained from scratch')
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    return p


def run_diagnose(ns) -> int:
    """``depthlab diagnose``: findings in plain words (or JSON)."""
    from .analytics.diagnose import diagnose_run_full, findings_json, format_findings
    from .rundir import RunDir, init_from_record, init_from_words

    _set_threads(ns.threads)
    findings, missing = diagnose_run_full(ns.run_dir)
    warn_damaged_run(Path(ns.run_dir), "the rules judge the run without what was lost")
    init = init_from_record(RunDir(ns.run_dir).config)
    print(json.dumps({**findings_json(findings), "not_judged": missing, "init_from": init}) if ns.json
          else format_findings(findings, missing))
    if init is not None and not ns.json:
        print(f"note: {init_from_words(init)}")
    return 0


def _config_fault(rd) -> Optional[str]:
    """Why a run's readable config.json is not a config depthlab can run (a field edited to ``"two"``) or not the
    one its checkpoint was trained with (:func:`~depthlab.resume_config.config_edits`), or None."""
    from .config import RunConfig, as_ran

    if rd.config is None:
        return None  # damaged JSON: said by its own line
    try:
        RunConfig.from_dict(as_ran(rd.config))
    except DepthlabError as e:
        return str(e)
    from .resume_config import config_edits

    return config_edits(rd.path)


def warn_damaged_run(run_dir: Path, consequence: str, weights_consequence: str = "") -> None:
    """Warn on stderr, one ``depthlab: warning:`` line each, of a run's damaged files: its records
    (:func:`_record_damage`), a missing config.json, a summary.json that is not what depthlab wrote; with
    ``weights_consequence`` (for a command that reads the weights), what the weights are rebuilt from
    (:func:`_weights_damage`)."""
    from .rundir import BASELINES, CONFIG, SUMMARY, RunDir

    rd = RunDir(run_dir)
    lines = _record_damage(rd, consequence)
    if not (run_dir / CONFIG).is_file():
        lines.append(f"{run_dir / CONFIG} is missing (deleted?): {consequence}")
    elif (bad := _config_fault(rd)) is not None:
        lines.append(f"{run_dir / CONFIG}: {bad} (edited by hand?): {consequence}")
    elif not (run_dir / BASELINES).is_file() or rd.damaged(BASELINES):
        what = ("is not a file" if (run_dir / BASELINES).exists() and not (run_dir / BASELINES).is_file() else
                "is missing (deleted?)" if not rd.damaged(BASELINES) else
                "is not the JSON depthlab wrote (damaged or edited by hand)")
        lines.append(f"{run_dir / BASELINES} {what}: the corpus baselines are recomputed from the run's corpus, when "
                     "it can still be read")
    if rd.damaged(SUMMARY):
        lines.append(f"{run_dir / SUMMARY} is not the JSON object depthlab wrote (damaged): read as missing")
    elif (run_dir / SUMMARY).exists() and not (run_dir / SUMMARY).is_file():
        lines.append(f"{run_dir / SUMMARY} is not a file: read as missing")
    if weights_consequence:
        lines += _weights_damage(rd, weights_consequence)
    for line in lines:
        print(f"{PROG}: warning: {line}", file=sys.stderr)


def _record_damage(rd, consequence: str) -> list[str]:
    """metrics.jsonl lines that are not records; the file missing, no record, a cut last line, or records that end
    early, where summary.json says the run trained further."""
    from .rundir import METRICS, SUMMARY, damaged_metrics_lines, read_metrics, torn_last_line
    from .units import agree, counted

    run_dir, out = rd.path, []
    bad = damaged_metrics_lines(run_dir)
    if bad:
        what = agree(bad, "is not a JSON record", "are not JSON records")
        out.append(f"{counted(bad, 'line')} of {run_dir / METRICS} {what} (damaged): {consequence}")
    final = (rd.summary or {}).get("final_step")
    records = read_metrics(run_dir) if (run_dir / METRICS).is_file() else None
    if isinstance(final, int) and final > 0 and records is None:
        out.append(f"{run_dir / METRICS} is missing (deleted?), though {SUMMARY} says {counted(final, 'step')} were "
                   f"trained: {consequence}")
    none = not bad and isinstance(final, int) and final > 0 and records == []
    if none:
        out.append(f"{run_dir / METRICS} holds no records, though {SUMMARY} says {counted(final, 'step')} were "
                   f"trained (emptied or damaged): {consequence}")
    if rd.summary is not None and torn_last_line(run_dir) and not none:  # a lone cut line: "holds no records" says it
        out.append(f"the last line of {run_dir / METRICS} is cut mid-record, though the run finished ({SUMMARY}): "
                   f"its last record is lost: {consequence}")
    last = max((r["step"] for r in records or [] if isinstance(r.get("step"), int)), default=None)
    if isinstance(final, int) and last is not None and last < final:
        out.append(f"the readable records of {run_dir / METRICS} end at step {last}, though {SUMMARY} says the run "
                   f"trained to step {final} (cut short or damaged): {consequence}")
    return out


def _tokenizer_damage(rd) -> list[str]:
    """A BPE run's tokenizer.json that is not the one its best weights were trained with (the report left its
    layers and context figures out without a word): the line of ``sample``'s refusal."""
    import warnings

    from .checkpoint import check_run_tokenizer, select_weights

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a damaged newer checkpoint: said by the lines above
            path = select_weights(rd.path, "best")
    except DepthlabError:
        return []  # no weights: said by the lines above
    try:
        check_run_tokenizer(rd.path, path)
    except DepthlabError as e:
        return [f"{e}: what is measured on its val split is left out"]
    return []


def _weights_damage(rd, consequence: str) -> list[str]:
    """A damaged or deleted manifest.json, weights files that fail their sha256, a finished run's checkpoints gone,
    the corpus moved or edited (:func:`_corpus_damage`), and a ``model.source`` run's copy of its file that is
    missing or changed."""
    from .checkpoint import damaged_weights
    from .rundir import SUMMARY
    from .units import agree, counted
    from .usermodel import run_source

    run_dir, out = rd.path, []
    try:
        weights = damaged_weights(run_dir)
    except DepthlabError as e:  # manifest.json itself is damaged or gone: its own sentence says so
        out.append(f"{e}: {consequence}")
        weights = []
    if weights:
        out.append(f"{counted(len(weights), 'weights file')} in {run_dir / 'checkpoints'} "
                   f"{agree(len(weights), 'is missing or fails its', 'are missing or fail their')} sha256 check "
                   f"({', '.join(weights[:4])}{', ...' if len(weights) > 4 else ''}): {consequence}")
    ckdir, final = run_dir / "checkpoints", (rd.summary or {}).get("final_step")
    if isinstance(final, int) and final > 0 and not any(ckdir.glob("*.safetensors")) \
            and not (ckdir / "manifest.json").exists():  # a finished run always has a checkpoint
        out.append(f"{ckdir} holds no checkpoint, though {SUMMARY} says {counted(final, 'step')} were trained "
                   f"(deleted?): {consequence}")
    out += _corpus_damage(rd, "what is measured on its val split is left out")
    out += _tokenizer_damage(rd)
    source = ((rd.config or {}).get("model") or {}).get("source")
    if source:  # the weights are rebuilt with the run's own copy of the model's file
        try:
            run_source(run_dir, source)
        except DepthlabError as e:
            out.append(f"{e}: what is drawn from the weights is left out")
    return out


def _corpus_damage(rd, consequence: str) -> list[str]:
    """The corpus file a run trained on, when it is gone or no longer has the sha256 config.json recorded."""
    from .checkpoint import sha256_file
    from .rundir import CONFIG

    data = (rd.config or {}).get("data") or {}
    resolved = (rd.config or {}).get("resolved") or {}
    path, recorded = data.get("path"), resolved.get("corpus_sha256") if isinstance(resolved, dict) else None
    if not isinstance(path, str) or not isinstance(recorded, str):
        return []  # the embedded corpus, or a run from before the record
    p = Path(path).expanduser()
    if not p.is_file():
        return [f"the run's corpus {p} is missing (moved, or a path relative to another folder): {consequence}"]
    if sha256_file(p) != recorded:
        return [f"the run's corpus {p} changed since training (its sha256 is not {CONFIG}'s "
                f"resolved.corpus_sha256): {consequence}"]
    return []


def build_report_parser():
    """The parser of ``depthlab report RUN_DIR|SWEEP_DIR``."""
    from .report.plots import PLOTS

    p = new_parser("report", "Draw the figures of a run (PNGs in RUN_DIR/plots/) and write one self-contained "
                             "HTML file (images embedded, works offline). Given a sweep directory, rebuild the "
                             "sweep's comparison report.")
    _add_run_dir(p, "a run directory (depthlab train) or a sweep directory (depthlab sweep)")
    p.add_argument("--out", type=Optional[str], default=None,
                   help="HTML file to write (default: DIR/report.html); a run directory only (a sweep's report is "
                        "SWEEP/report.html)")
    p.add_argument("--skip", nargs="+", type=str, default=[],
                   help=f"figures not to draw, from: {', '.join(PLOTS)}; a run directory only")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    return p


def run_report(ns) -> int:
    """``depthlab report``: print the path of the written HTML report."""
    from .report.html import build_report
    from .report.plots import PLOTS
    from .report.sweep import build_sweep_report, is_sweep_dir

    _set_threads(ns.threads)
    bad = [s for s in ns.skip if s not in PLOTS]
    if bad:
        raise DepthlabError(f"report: --skip {' '.join(bad)}: unknown figure{did_you_mean(bad[0], PLOTS)}; choose "
                            f"from {', '.join(PLOTS)}")
    if ns.out is not None and not ns.out.lower().endswith((".html", ".htm")) and not Path(ns.out).is_dir():
        # "--out -1" wrote a file named -1 (a folder is refused as one, below)
        raise DepthlabError(f"report: --out {ns.out} is no .html file name; give one, e.g. --out report.html")
    if is_sweep_dir(ns.run_dir):
        if ns.out or ns.skip:
            raise DepthlabError("report: --out and --skip apply to a run directory; a sweep directory's report is "
                                "always SWEEP_DIR/report.html with every figure")
        from .sweep import write_science_table

        try:
            print(build_sweep_report(ns.run_dir))
            write_science_table(ns.run_dir)  # science.md too: it said one verdict while report.html said another
        except OSError as e:  # its files are rewritten in the folder: a read-only one (or a full disk) is said so
            why = no_space_words(e, Path(ns.run_dir)) if no_space(e) else (e.strerror or type(e).__name__)
            raise DepthlabError(f"report: cannot write the sweep's results and report into {ns.run_dir}: {why}; make "
                                f"{ns.run_dir} writable, or copy it elsewhere and report on the copy") from None
        return 0
    above = next((p for p in Path(ns.run_dir).parents if p.exists()), Path("."))
    if not Path(ns.run_dir).exists() and above.is_dir():  # report takes a sweep folder too: the fix names both
        raise DepthlabError(f"report: {ns.run_dir} not found; give the out_dir of a depthlab train run or of a "
                            "depthlab sweep")
    from .rundir import CONFIG, METRICS, RunDir, part_of_words
    given = Path(ns.run_dir)
    if given.exists() and not given.is_dir():
        raise DepthlabError(f"report: {given} is a file, not a run directory or a sweep folder; give the out_dir of a "
                            "depthlab train run or of a depthlab sweep")
    if given.is_dir() and not RunDir(given).ran:
        part = part_of_words(given)  # RUN/checkpoints, SWEEP/plots: report takes either folder, named
        if part:
            raise DepthlabError(f"report: {part}")
        # was: "give the out_dir of a depthlab train run", though report takes a sweep's folder too
        raise DepthlabError(f"report: {given} is neither a depthlab run directory (no {CONFIG} or {METRICS}) nor a "
                            "sweep folder (no sweep.json); give the out_dir of a depthlab train run or of a "
                            "depthlab sweep")
    out = build_report(ns.run_dir, ns.out, skip=ns.skip)
    warn_damaged_run(Path(ns.run_dir), "the report shows the run without what was lost",
                     "the report leaves out what it draws from them (attention patterns, what each block adds, "
                     "loss by position) or draws it from an older intact checkpoint")
    print(out)
    return 0


def build_presets_parser():
    """The parser of ``depthlab presets``."""
    return new_parser("presets", "List the training presets shipped with depthlab (`depthlab train --preset NAME`).")


def run_presets(ns) -> int:
    """``depthlab presets``: one line per preset."""
    for name, desc in list_presets().items():
        print(f"{name:12s} {desc}")
    return 0


# ------------------------------------------------------------------------- sweep
def build_sweep_parser():
    """The parser of ``depthlab sweep``: run-config fields (applied to every run) plus the sweep's options."""
    p = new_parser("sweep", "Run many ordinary training runs over a grid of config fields (in worker processes), "
                            "then write results.csv, results.md and report.html in the sweep directory. Running "
                            "the same command again skips finished runs and redoes unfinished ones. Dotted flags "
                            "(--train.max_iters 300, --model.n_embd 64) apply to every run. Losses are in nats. "
                            "Exit status: 0 when every run trained (ok, or a finding: nonfinite, time_capped), 1 when "
                            "any gave no result (results.csv's status: error), 2 for bad input (nothing run).",
                   config_fields=True)
    from .sweep import profile_descriptions

    p.add_argument("--profile", type=Optional[str], default=None,
                   help="a built-in sweep (profiles/*.yaml): " + "; ".join(
                       f"{name}: {desc}" for name, desc in profile_descriptions().items()))
    p.add_argument("--file", "-f", type=Optional[str], default=None,
                   help="sweep YAML file (base: run config; grid: FIELD: [values], or experiments:)")
    p.add_argument("--grid", action="append", default=[],
                   help="a grid axis SECTION.FIELD=V1,V2, e.g. model.n_layer=1,2,4, or a JSON list, e.g. "
                        "model.n_layer=[1,2,4] or model.init='[{\"a\":1,\"b\":2}]' (repeatable; replaces that axis "
                        "of a profile); values are typed and checked as the same flag of depthlab train")
    p.add_argument("--out_dir", "--out-dir", type=Optional[str], default=None,
                   help="sweep directory (default: sweeps/<profile>, or sweeps/<name>-<hash of the grid and "
                        "settings>, so the same command continues the same sweep)")
    p.add_argument("--workers", type=Optional[int], default=None,
                   help="worker processes (0 = one per core; 1 = in this process); default: the sweep file's "
                        "workers, else 0")
    p.add_argument("--threads", type=int, default=0, help="torch threads per run (0 = cores // workers)")
    p.add_argument("--overwrite", "--rerun", dest="overwrite", action="store_true",
                   help="redo every run, even finished ones")
    p.add_argument("--no_report", "--no-report", dest="no_report", action="store_true",
                   help="skip report.html (results.csv/md are still written)")
    p.add_argument("--only", type=Optional[str], default=None,
                   help="run only these experiments (NAME[,NAME]) of a profile or file")
    p.add_argument("--dry_run", "--dry-run", dest="dry_run", action="store_true",
                   help="list the runs and the time estimate, run nothing")
    p.add_argument("--seeds", type=Optional[str], default=None,
                   help="N: seeds 1..N in every cell, beside the cell's own train.seed (1337 unless set: then N+1 "
                   "runs a cell; --train.seed 1 gives N); auto[:MAX]: then add seeds to undecided claims' cells until "
                   "decided or MAX per cell (default 8)")
    p.add_argument("--backend", type=Literal["local", "ray"], default="local",
                   help="local: worker processes on this machine; ray: one Ray Tune trial per run (needs "
                        'pip install -e ".[ray]"; see README, Sweeps on a Ray cluster)')
    p.add_argument("--ray_address", "--ray-address", type=Optional[str], default=None,
                   help="--backend ray: auto or HOST:PORT of a running Ray cluster (default: start Ray on "
                        "127.0.0.1 for this sweep); the sweep directory must be on storage every node sees")
    p.add_argument("--ray_scheduler", "--ray-scheduler", type=Literal["fifo", "asha"], default="fifo",
                   help="--backend ray: fifo runs every point to its end; asha stops poor runs early (opt-in: it "
                        "biases a depth comparison against the slow deep runs)")
    from .sweep.spec import SWEEP_DEFAULTS
    p.set_defaults(SWEEP_DEFAULTS)  # what a sweep's runs get (--help and --print_config said train's defaults)
    return p


def _sweep_argv(argv: list[str]) -> list[str]:
    """``depthlab sweep``'s argv, with ``--model FILE`` (``--data``, ``--train``) as that file's fields' flags, refusing
    ``--print_config`` with ``--profile`` or ``--file``: the printed config
    would be the flags' alone, without the base config the profile's or file's runs take (it said width 128 and
    5,000 steps of the quick profile, whose runs are 32 wide and 500 steps long)."""
    words = argv[:argv.index("--")] if "--" in argv else argv
    source = next((name for _, name, _ in occurrences(words, ["--profile", "--file", "-f"])), None)
    if source and occurrences(words, ["--print_config"]):
        raise DepthlabError(f"sweep: --print_config shows a --grid sweep's options and base run config; with "
                            f"{source} each experiment's runs take the base config of the profile or file as well, "
                            "which it would not show: read the profile's YAML (depthlab/sweep/profiles/) or your "
                            "file, and --dry_run for the runs")
    return expand_presets(argv, presets=False)  # --model FILE (--data, --train) as train reads it


def _explicit_overrides(argv: list[str]) -> dict[str, Any]:
    """The dotted config fields given on the command line (typed by the config grammar), flattened: its
    ``-c/--config`` files' and its flags' (which win). The files' were left out: every run trained without them."""
    from .cli_args import config_files

    own, _ = _split_config_flags(argv)
    files = [a for path in config_files(argv) for a in ("--config", path)]
    ns = build_sweep_parser().parse_args(files + own, defaults=False)  # the files may hold the sweep's options too
    flat: dict[str, Any] = {}
    for section, fields in ns.as_dict().items():
        if section in SECTIONS and isinstance(fields, dict):
            flat.update({f"{section}.{k}": v for k, v in fields.items()})
    if flat.get("train.out_dir", "") is None:  # train --print_config's file: asks nothing (a value is refused)
        del flat["train.out_dir"]
    return flat


def _grid_over_files(spec, overrides: dict[str, Any], argv: list[str]) -> None:
    """A ``-c`` file's value of a field that is also a grid axis (a ``train --print_config`` file sets every field)
    gives way to the axis, with a notice; the same value given as a flag is refused (``refuse_flags_on_axes``).
    ``spec.overrides`` and ``overrides`` lose those fields."""
    own, _ = _split_config_flags(argv)
    ns = build_sweep_parser().parse_args(own, defaults=False)
    flags = {f"{sec}.{k}" for sec, fields in ns.as_dict().items() if sec in SECTIONS and isinstance(fields, dict)
             for k in fields}
    axes = {k: exp.grid[k] for exp in spec.experiments for k in exp.grid}
    for k in [k for k in spec.overrides if k in axes and k not in flags]:
        print(f"{PROG}: the config file's {k} {spec.overrides.pop(k)} gives way to the grid's axis ({k} over "
              f"{len(axes[k])} values)", file=sys.stderr)
        overrides.pop(k, None)


def _split_config_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """(``--data.*/--model.*/--train.*`` flags with their values, everything else)."""
    conf, rest, i = [], [], 0
    while i < len(argv):
        a = argv[i]
        if a.startswith(tuple(flag(f"{s}.") for s in SECTIONS)):
            take = 1 if "=" in a else 2
            conf += argv[i:i + take]
            i += take
            continue
        rest.append(a)
        i += 1
    return conf, rest


def _warn_sweep_omp(threads: int) -> None:
    """The sweep's own line for an ``OMP_NUM_THREADS`` that is not a thread count (its runs say it only in their
    train.log), naming what sets each run's threads instead."""
    from .training.machine import ignored_env_threads
    from .training.runtime import console

    warning = ignored_env_threads(f"lets --threads {threads} set each run's thread count" if threads else
                                  "gives each run the cores per worker (--threads sets it)")
    if warning:
        console(f"warning: {warning}")


def _sweep_reports(ns, out_dir: str, failed: bool) -> None:
    """A finished sweep's report.html (unless ``--no_report``) and science table (when an experiment has a judge).

    Raises:
        OSError: writing one failed (a full disk), unless some runs ``failed``: exit 1 says so then (README), and
            this is a warning.
    """
    from . import sweep

    try:
        if not ns.no_report:
            from .report.sweep import build_sweep_report

            print(f"report: {build_sweep_report(out_dir)}")
        table = sweep.write_science_table(out_dir)  # None unless an experiment has a judge (science profile)
        if table:
            print(f"\npublished claims ({Path(out_dir) / sweep.SCIENCE_MD}):\n{table}", end="")
    except OSError as e:
        if not failed:
            raise
        from .sweep.local import write_failure

        plain = " without --overwrite" if ns.overwrite else ""
        again = f" and run the same command again{plain}" if no_space(e) else ""
        print(f"{PROG}: warning: could not write the sweep's report: {write_failure(e, Path(out_dir))}{again}",
              file=sys.stderr)


def run_sweep(ns, argv: list[str]) -> int:
    """``depthlab sweep``: plan, run (or list) the grid, then write the comparison report."""
    from . import sweep
    from .training.runtime import console
    from .config import check_threads
    from .sweep.run import refuse_ray_options
    from .sweep.spec import refuse_flags_on_axes

    check_threads(ns.threads, "--threads")
    if ns.workers is not None and ns.workers < 0:
        raise DepthlabError(f"--workers must be >= 0, got {ns.workers}")
    _warn_sweep_omp(ns.threads)
    overrides = _explicit_overrides(argv)
    spec = sweep.build_spec(ns.profile, ns.file, list(ns.grid), overrides, ns.only)
    if ns.workers is None:  # the sweep file's, else one per core
        ns.workers = spec.workers if spec.workers is not None else 0
    _grid_over_files(spec, overrides, argv)
    refuse_flags_on_axes(spec)
    out_dir = ns.out_dir or sweep.default_sweep_dir(spec, ns.profile, ns.file, list(ns.grid), overrides, ns.only)
    if ns.dry_run:
        refuse_ray_options(ns.backend, ns.ray_address, ns.ray_scheduler)  # as the sweep itself does
        print(sweep.dry_run(spec, out_dir, ns.workers, seeds=ns.seeds, threads=ns.threads, backend=ns.backend,
                           rerun=ns.overwrite))
        if ns.backend == "ray" and importlib.util.find_spec("ray") is None:  # was silent: the real sweep then failed
            from .sweep.ray import EXTRA
            print(f"{PROG}: note: Ray Tune is not installed here; the sweep itself needs it: {EXTRA}",
                  file=sys.stderr)  # stderr: stdout is the plan
        return 0
    if not ns.no_report:
        _report_writable(Path(out_dir))
    try:
        # console: the sweep's warnings on stderr as "depthlab: warning: ..." (print put them on stdout, bare)
        sweep.run_sweep(spec, out_dir, workers=ns.workers, threads=ns.threads, rerun=ns.overwrite, log=console,
                        backend=ns.backend, ray_address=ns.ray_address, ray_scheduler=ns.ray_scheduler,
                        seeds=ns.seeds)
    except KeyboardInterrupt:
        # again with --overwrite, it would delete what this one trained
        kept = (f"the runs this command finished in {out_dir} are kept, the earlier ones --overwrite deleted are "
                "trained again" if ns.overwrite else f"finished runs in {out_dir} are kept")
        print(f"{PROG}: sweep interrupted; run the same command again{' without --overwrite' if ns.overwrite else ''} "
              f"to finish it ({kept}; interrupted ones continue from their last checkpoint, or from step 0 if they "
              "have none)", file=sys.stderr)
        return 130
    bad, n = sweep.failed_runs(out_dir)  # from the run folders: right also where results.csv could not be written
    _sweep_reports(ns, out_dir, bool(bad))
    if bad:  # scripts can tell: exit 1, as `depthlab check` does when it finds problems
        said = ("results.csv's status and message columns say why" if sweep.failed_runs(out_dir, from_csv=True) ==
                (bad, n) else f"their lines above say why; {sweep.RESULTS_CSV} could not be written")
        print(f"{PROG}: {len(bad)} of {n} runs gave no result: {', '.join(bad[:5])}{', ...' if len(bad) > 5 else ''} "
              f"({said}); exit status 1", file=sys.stderr)
        return 1
    return 0


# ------------------------------------------------------------------------- layers, context
def build_views_parser(command: str):
    """The parser of ``depthlab layers RUN_DIR`` / ``depthlab context RUN_DIR`` (the depth views)."""
    from .analytics.context import DEFAULT_MAX_TOKENS, VIEW_HELP

    p = new_parser(command, VIEW_HELP[command])
    _add_run_dir(p)
    p.add_argument("--checkpoint", type=Literal["best", "last"], default="best", help="best (lowest val loss) or last")
    p.add_argument("--max_tokens", "--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                   help="val tokens to read at most, in whole evaluation batches, at least one (which may hold "
                        "more): a prefix of the run's evaluation batches (0 = all of them)")
    if command == "layers":  # context reads only the logits: it needs no blocks
        _add_blocks(p, ends=True)
    p.add_argument("--json", action="store_true", help="print the measurements as one JSON object")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    return p


def run_views(ns, command: str) -> int:
    """``depthlab layers`` / ``context``: the table and what to read in it (or JSON)."""
    from .analytics import context, layers
    from .rundir import BASELINES

    _set_threads(ns.threads)
    mod = layers if command == "layers" else context
    with _user_prints_to_stderr(ns.json):
        kw = ({"blocks_attr": ns.blocks, "norm_attr": ns.norm, "head_attr": ns.head} if command == "layers"
              else {})  # context has no --blocks, --norm or --head
        res = getattr(mod, f"run_{command}")(ns.run_dir, ns.checkpoint, ns.max_tokens, **kw)
    if res.get("baselines_from", BASELINES) != BASELINES:  # said on stderr as diagnose and report say it
        print(f"{PROG}: warning: {Path(ns.run_dir) / BASELINES}: the corpus baselines are "
              f"{res['baselines_from']}", file=sys.stderr)
    print(json.dumps(res) if ns.json else getattr(mod, f"format_{command}")(res))
    return 0


# ------------------------------------------------------------------------- coordcheck
def build_coordcheck_parser():
    """The parser of ``depthlab coordcheck``: run-config fields plus the axis, grid, steps and seeds."""
    from .analytics.coordcheck import COORDCHECK_HELP

    p = new_parser("coordcheck", COORDCHECK_HELP, config_fields=True)
    p.add_argument("--axis", type=Optional[str], default=None,
                   help="FIELD=V1,V2,...: a numeric config field and at least two values > 0 (model.n_layer=2,4,8,16)")
    p.add_argument("--grid", action="append", default=[],
                   help="SECTION.FIELD=V1,V2 crossed with the axis, as depthlab sweep's (model.variant=plain,prenorm)")
    p.add_argument("--steps", type=int, default=3, help="measurements per point: step 1 = init, one update between")
    p.add_argument("--seeds", type=int, default=1, help="seeds averaged: train.seed, train.seed + 1, ...")
    p.add_argument("--json", action="store_true", help='print {"rows": [...], "slopes": [...], "verdicts": {...}}')
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    return p


def run_coordcheck(ns, argv: list[str]) -> int:
    """``depthlab coordcheck``: the table, the slopes and a verdict per variant (or JSON)."""
    from .analytics.coordcheck import coordcheck, format_coordcheck, parse_axis
    from .sweep.spec import parse_grid_arg

    _set_threads(ns.threads)
    axes = [v for _, _, v in occurrences(argv, ["--axis"])]
    if len(axes) > 1:  # the parser keeps the last: the others were dropped without a word
        raise DepthlabError(f"coordcheck: --axis given {len(axes)} times ({', '.join(map(str, axes))}); the check "
                            "varies one field: keep one --axis and cross another field with --grid FIELD=V1,V2")
    axis = parse_axis(ns.axis)
    grid = dict(parse_grid_arg(g) for g in ns.grid)
    for key, option in [(axis[0], "--axis"), *((k, "--grid") for k in grid)]:
        if occurrences(argv, [flag(key)]):  # the axis' values replace the flag's at every point: it did nothing
            raise DepthlabError(f"coordcheck: {key} is given both in {option} and as a flag ({flag(key)}); the "
                                f"{option} values replace the flag's at every point: drop {flag(key)}, or drop {key} "
                                f"from {option}")
    log = None if ns.json else (lambda line: print(line, file=sys.stderr, flush=True))
    result = coordcheck(_config_from(ns), axis, grid, ns.steps, ns.seeds, log=log)
    print(json.dumps(result) if ns.json else format_coordcheck(result))
    return 0


# ------------------------------------------------------------------------- export
def build_export_parser():
    """The parser of ``depthlab export RUN_DIR OUT_DIR``."""
    p = new_parser("export", "Write a Hugging Face directory (config.json, model.safetensors, tokenizer, "
                             "generation_config.json) that transformers loads with AutoModelForCausalLM / "
                             "AutoTokenizer, without depthlab. prenorm + layernorm -> GPTNeoXForCausalLM (position "
                             "rope, the default) or GPT2LMHeadModel (position learned); postnorm + layernorm + relu + "
                             "position learned -> OpenAIGPTLMHeadModel; other variants are refused. Needs "
                             'pip install -e ".[hf]".')
    _add_run_dir(p)
    p.add_argument("out_dir", type=str, help="folder to write (must not exist, or be empty)")
    p.add_argument("--checkpoint", type=Literal["best", "last"], default="best", help="best (lowest val loss) or last")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier export in OUT_DIR")
    return p


def run_export(ns) -> int:
    """``depthlab export``: print the written folder."""
    from .export import export_run

    print(export_run(ns.run_dir, ns.out_dir, ns.checkpoint, overwrite=bool(ns.overwrite)))
    return 0


# ------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Command:
    """One subcommand: its one-line help, its parser builder, its runner and an argv pre-pass.

    Attributes:
        help: one line for ``depthlab --help``.
        build: returns the command's parser (:func:`new_parser` plus its options).
        run: takes the parsed namespace (and the raw argv) and returns the exit status.
        expand: rewrites argv before parsing (``--preset`` -> ``--config FILE``, ``--resume``).
    """

    help: str
    build: Callable[[], Any]
    run: Callable[..., int]
    expand: Callable[[list[str]], list[str]] = list
    needs_argv: bool = False  # run(ns, argv): the sweep tells explicit config flags from defaults


COMMANDS: dict[str, Command] = {
    "train": Command("train a GPT (default: CPU recipe on embedded Tiny Shakespeare)", build_train_parser,
                     run_train, expand_train_argv),
    "sample": Command("generate text from a run directory", build_sample_parser, run_sample),
    "probe": Command("gradient flow, activation scale and rank per block at initialisation (no training)",
                     build_probe_parser, run_probe, expand_presets),
    "check": Command("check a model you wrote (PATH.py:NAME): shape, causal leak, init loss, gradients, ...",
                     build_check_parser, run_check),
    "diagnose": Command("findings in plain words (evidence + remedy) for a run directory", build_diagnose_parser,
                        run_diagnose),
    "report": Command("write a self-contained HTML report (figures, diagnosis, baselines) of a run or a sweep",
                      build_report_parser, run_report),
    "sweep": Command("run a grid of training runs (e.g. depth x variant) and compare them in one report",
                     build_sweep_parser, run_sweep, expand=_sweep_argv, needs_argv=True),
    "layers": Command("what each block adds: logit lens, block ablation, relative update (effective depth)",
                      partial(build_views_parser, "layers"), partial(run_views, command="layers")),
    "context": Command("val loss by position against the bigram baseline: does the model use its context?",
                       partial(build_views_parser, "context"), partial(run_views, command="context")),
    "coordcheck": Command("activation scale against depth or width at init and a few steps in: stable, grows or "
                          "vanishes per variant", build_coordcheck_parser, run_coordcheck, needs_argv=True),
    "export": Command("write a Hugging Face directory (transformers AutoModelForCausalLM / AutoTokenizer)",
                      build_export_parser, run_export),
    "presets": Command("list the shipped training presets", build_presets_parser, run_presets),
}


def _report_writable(sweep_dir: Path) -> None:
    """A rerun into ``sweep_dir``: a report it could not write (a user's file at its place) is refused before the
    runs, not after them (:func:`~depthlab.report.sweep.refuse_foreign_outputs`)."""
    from . import sweep

    if (sweep_dir / sweep.SWEEP_JSON).is_file():
        from .report.sweep import refuse_foreign_outputs

        refuse_foreign_outputs(sweep_dir)


def usage() -> str:
    """The text of ``depthlab --help``: every command with its one-line help."""
    rows = "".join(f"  {name:10s} {c.help}\n" for name, c in COMMANDS.items())
    return (f"usage: {PROG} <command> [options]\n\ncommands:\n{rows}\n"
            f"Every command takes -c/--config FILE.yaml, --print_config and --debug; "
            f"`{PROG} <command> --help` documents its options.")


def dispatch(name: str, argv: list[str]) -> int:
    """Check ``argv`` in depthlab's words (:mod:`depthlab.cli_args`), parse it with command ``name``'s
    parser and run it. What the checks do not model, the parser refuses in its own words.

    Raises:
        DepthlabError: unknown command or bad input (one line naming the option).
    """
    cmd = COMMANDS.get(name)
    if cmd is None:
        import difflib

        close = difflib.get_close_matches(name, [*COMMANDS, "--version", "--help"], n=1, cutoff=0.75)
        hint = f"did you mean {close[0]}? " if close else ""
        raise DepthlabError(f"unknown command {name!r}; {hint}choose from {', '.join(COMMANDS)}")
    check_no_empty_paths(name, list(argv))
    typed = list(argv)
    argv = files_first(cmd.expand(list(argv)))
    parser = cmd.build()
    types = value_types(parser)
    check_keys(name, parser, argv, types)
    check_argv(name, parser, argv, types)
    try:
        try:
            ns = parser.parse_args(argv)  # (--print_config validates the config it prints)
        except ArgumentError as e:  # not prechecked: the parser's own message, unread
            raise DepthlabError(f"{name}: {e}") from None
        except SystemExit as e:
            if not e.code:  # --print_config has printed: the notices of the command line it showed come after
                say_deferred_notices()
            raise
        gpt_fields = typed_gpt_fields_error(getattr(ns, "model", None), typed, argv)
        if gpt_fields is not None:
            raise gpt_fields
        return cmd.run(ns, argv) if cmd.needs_argv else cmd.run(ns)
    except ConfigError as e:  # the config these flags and files make is refused: say which of them gave the value
        if not e.command_line:
            raise
        raise attribute_config_error(e, typed, argv) from None
    except NonFiniteError as e:  # its advice names fields (lower train.learning_rate): the flags, where typed
        raise NonFiniteError(typed_flags(str(e), typed)) from None
    except DepthlabError as e:  # an option of two spellings as typed (--max-tokens), not as the check spells it
        said = spelled_as_typed(attribute_option_error(str(e), parser, typed, argv), parser, typed)
        if said != str(e):
            e.args = (said,)
        raise


def _user_exit_line(e: BaseException) -> Optional[str]:
    """``FILE:LINE`` of the last frame of a model.source file (module ``depthlab_user_*``) in ``e``'s traceback,
    or None when the exit is not the user's code's (a sys.exit in a forward would end depthlab with its status,
    unexplained: 3 reads as depthlab's "final validation not finite"; a KeyboardInterrupt as "interrupted")."""
    tb, where = e.__traceback__, None
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).startswith("depthlab_user_"):
            where = f"{Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def _usage_or_version(argv: list[str]) -> Optional[int]:
    """The exit status after the usage (``-h``/``--help``: 0), the one error line of no command (2) or
    ``--version`` (0); None when ``argv`` names a command."""
    if not argv:  # bad input gets one line; it names the commands and where the usage is
        _error(f"a command is needed: choose from {', '.join(COMMANDS)} (e.g. `{PROG} train`; `{PROG} --help` says "
               "what each does)")
        return 2
    if argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] == "--version":
        from . import __version__

        print(f"{PROG} {__version__}")
        return 0
    return None


def _exit_of_user_code(e: BaseException, debug: bool) -> Optional[int]:
    """2, after one error line, when ``e`` (a SystemExit, or a KeyboardInterrupt that no Ctrl-C caused) was raised
    in a model.source file; None when it is depthlab's own (or --debug asks for the traceback)."""
    where = _user_exit_line(e)
    if where is None or debug or isinstance(e, Terminated) or (isinstance(e, KeyboardInterrupt) and sigint_seen()):
        return None
    if isinstance(e, KeyboardInterrupt):  # no Ctrl-C came: "interrupted" would be untrue
        _error(f"the model's code raised KeyboardInterrupt itself ({where}; no Ctrl-C was pressed); raise "
               "another exception (e.g. ValueError) there instead, so that depthlab can say what was wrong")
    else:
        _error(f"the model's code called sys.exit({e.code!r}) ({where}); raise an exception (e.g. ValueError) "
               "there instead, so that depthlab can say what was wrong")
    return 2


def _error(msg: str) -> None:
    print(f"{PROG}: error: {one_line(msg)}", file=sys.stderr)


def _check_seed(seed: int) -> None:
    """``--seed`` of sample and check: torch's generators take 0 <= seed < 2**63 (as ``train.seed``).

    Raises:
        DepthlabError: outside that range.
    """
    if not 0 <= seed < 2**63:
        raise DepthlabError(f"--seed must be an integer from 0 to 2**63 - 1, got {seed}")


#: The command line of this process when :func:`main` is the process's entry point (so ``train`` may
#: restart it with another OpenMP wait policy); None when main() is called from Python.
_PROCESS_ARGV: Optional[list[str]] = None


def _resumed_dir(args: list[str]) -> Optional[str]:
    """The run folder of a ``--resume RUN`` (or ``--resume=RUN``) among a command's arguments, or of
    ``--train.resume true`` with ``--train.out_dir RUN`` (README: the same resume, spelt as flags), set by flags or by
    a ``-c`` file's ``train:`` section (later arguments win, as the parser reads them), or None."""
    flags: dict[str, str] = {}
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if name in ("--resume", "--train.resume", "--train.out_dir", "-c", "--config"):
            if not eq:
                if i + 1 >= len(args):
                    continue  # a flag without its value: the parser says so
                value = args[i + 1]
            if name in ("-c", "--config"):
                flags.update(_config_file_resume(value))
            else:
                flags[name] = value
    if "--resume" in flags:
        return flags["--resume"]
    if flags.get("--train.resume", "").lower() in ("true", "yes", "1") and flags.get("--train.out_dir"):
        return flags["--train.out_dir"]
    return None


def _config_file_resume(path: str) -> dict[str, str]:
    """``train.resume`` and ``train.out_dir`` of a ``-c`` file, as :func:`_resumed_dir`'s flags (``{}`` for a file
    that cannot be read or holds neither: the parser says what is wrong with it, after torch has loaded)."""
    if not Path(path).is_file():  # a FIFO or a terminal would block here: the parser refuses what is no file
        return {}
    try:
        import yaml

        with open(path, encoding="utf-8") as f:
            train = (yaml.safe_load(f) or {}).get("train")
    except Exception:  # noqa: BLE001 - any unreadable file: the parser's error names it later
        return {}
    if not isinstance(train, dict):
        return {}
    return {f"--train.{k}": str(train[k]) for k in ("resume", "out_dir") if train.get(k) is not None}


def _openmp_policy(command: str, args: Sequence[str] = ()) -> None:
    """Choose how idle OpenMP threads wait (spin or sleep), unless the user set ``OMP_WAIT_POLICY``.

    The policy is read once, when torch loads, and which is faster depends on the machine and its load:
    on a busy laptop spinning threads wait for a core that is taken (409 tokens/s spinning against
    2,480 passive, 2 AMD cores, load average 8); on an idle Xeon passive waiting halved the speed
    (issue 24). ``train`` starts with the policy last measured fastest on this machine at this load,
    else spinning when no other process keeps a core busy and sleeping when one does
    (:func:`depthlab.training.machine.start_policy`); its measurement may restart it with the other one.
    Results are unchanged: only the waiting differs.
    """
    import os

    from .training.machine import OMP_MARK, set_aside_bad_env_threads

    if "torch" not in sys.modules:
        set_aside_bad_env_threads()
    if "torch" in sys.modules or ("OMP_WAIT_POLICY" in os.environ and os.environ.get(OMP_MARK) is None):
        return  # too late, or the user's choice
    if OMP_MARK in os.environ:
        return  # a restart: the policy it was given
    policy = "passive"
    if command == "train":
        from .training.machine import start_policy

        policy = start_policy(_resumed_dir(list(args)))  # a resume: its run's own, no restart to take it
    os.environ["OMP_WAIT_POLICY"] = os.environ[OMP_MARK] = policy.upper()


_PACKAGE_DIR = str(Path(__file__).resolve().parent)
_PYTHON_SHOWWARNING = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """depthlab's own warnings as one ``depthlab: warning: ...`` line; any other library's in Python's format."""
    if issubclass(category, UserWarning) and str(Path(filename).resolve()).startswith(_PACKAGE_DIR):
        print(f"{PROG}: warning: {message}", file=file or sys.stderr)
        return
    _PYTHON_SHOWWARNING(message, category, filename, lineno, file, line)


def _stopped(e: BaseException, debug: bool) -> int:
    """The exit status of a KeyboardInterrupt (Ctrl-C: 130; :class:`Terminated`, SIGTERM: 143) or SystemExit that
    reached :func:`main`, after its one line; one the user's model code raised is said as such (2).

    Raises:
        SystemExit: depthlab's own (``--help``, argparse's usage errors): their status is depthlab's.
    """
    status = _exit_of_user_code(e, debug)
    if status is not None:
        return status
    if isinstance(e, SystemExit):
        raise e
    said = str(e) or ("terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted")  # words: what it undid
    print(f"{PROG}: {said}", file=sys.stderr)
    return 143 if isinstance(e, Terminated) else 130


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point; returns the exit status (0 ok, 2 bad input, 3 non-finite, 130/143 signals, 141 a closed pipe)."""
    global _PROCESS_ARGV
    if argv is None:
        _PROCESS_ARGV = list(sys.argv[1:])
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        status = _usage_or_version(argv)  # inside the try: `depthlab --help | head -2` closes the pipe
        if status is not None:
            return status
        watch_sigint()
        watch_sigterm()
        _openmp_policy(argv[0], argv[1:])  # inside the try: a Ctrl-C while it imports torch is an interruption too
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return dispatch(argv[0], argv[1:])
    except NonFiniteError as e:
        if debug:
            raise
        _error(str(e))
        return 3
    except DepthlabError as e:
        if debug:
            raise
        _error(str(e))
        return 2
    except (KeyboardInterrupt, SystemExit) as e:
        return _stopped(e, debug)
    except BrokenPipeError:  # e.g. `depthlab sample ... | head`: the reader left; no traceback, and the status of
        import os  # a process SIGPIPE ended (128 + 13), as `yes | head` gives: not 0, which told a `check | head`
        # under `set -o pipefail` that no problem was found

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except (OSError, UnicodeDecodeError) as e:  # a path, permission or encoding problem of the user's input
        if debug:
            raise
        if no_space(e):  # a full disk (told by errno): not the paths given; the file it was writing, and the fix
            _error(f"{no_space_words(e)} (or write to another disk) and run the command again")
            return 2
        _error(f"{type(e).__name__}: {one_line(str(e))[:300]} (check the paths given and their permissions/encoding)")
        return 2
    except Exception as e:  # noqa: BLE001 - the last line of defence: no raw tracebacks for users
        from .trainer import Interrupted

        if isinstance(e, Interrupted):
            print(f"{PROG}: {e}", file=sys.stderr)
            return e.exit_code
        if sigint_seen() and not debug:  # Ctrl-C inside an import leaves a half-imported module that fails later
            print(f"{PROG}: interrupted", file=sys.stderr)
            return 130
        if debug:
            raise
        _error(f"unexpected {type(e).__name__}: {one_line(str(e))[:300]} "
               "(run again with --debug for the traceback, and please report it)")
        return 1
