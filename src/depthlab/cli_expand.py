"""What a ``depthlab train`` command line means before it is parsed: presets, ``--resume``, ``--init-from``.

``--preset NAME`` becomes ``--config <the preset's file>``; ``--resume RUN`` puts the run's own
config.json first; ``--init-from RUN`` puts the source run's model section first (the weights fix
the shape). Flags the user typed come after and win.
"""

from __future__ import annotations

import shlex
from importlib import resources
from pathlib import Path
from typing import Optional

from .cli_args import (BadValue, as_flag, check_section_file, convert, flag, flag_value, joined_config, occurrences,
                       yaml_fix)
from .errors import DepthlabError, did_you_mean

__all__ = ["attribute_config_error", "typed_gpt_fields_error", "attribute_option_error", "gpu_recipe_on_cpu",
           "GPU_PRESETS", "deferred_warnings", "say_deferred_notices", "expand_presets", "expand_train_argv",
           "resume_config_fault", "list_presets", "preset_dir", "preset_path", "corpus_target", "value_source"]


def preset_dir() -> Path:
    """Folder of the YAML presets shipped inside the package."""
    return Path(str(resources.files("depthlab") / "presets"))


def list_presets() -> dict[str, str]:
    """Preset name -> first comment line of its YAML file."""
    out = {}
    for p in sorted(preset_dir().glob("*.yaml")):
        text = p.read_text()
        out[p.stem] = text.splitlines()[0].lstrip("# ").strip() if text else ""
    return out


def preset_path(name: str) -> Path:
    """Path of preset ``name``.

    Raises:
        DepthlabError: unknown preset (lists the known ones).
    """
    p = preset_dir() / f"{name}.yaml"
    if not p.exists():
        raise DepthlabError(f"unknown preset {name!r}{did_you_mean(name, list_presets())}; known presets: "
                            f"{', '.join(list_presets()) or 'none'}")
    return p


SECTIONS = ("data", "model", "train")


def section_file_flags(section: str, path: Optional[str]) -> list[str]:
    """``--model FILE`` (``--data FILE``, ``--train FILE``): the file's fields as ``--model.FIELD=VALUE`` flags,
    in its place on the command line (a later flag wins, as jsonargparse places a group's file).

    The file holds the section's fields (``n_layer: 2``), or the section itself (``model: {n_layer: 2}``).

    Raises:
        DepthlabError: no file named, a file that cannot be read, is not YAML, or is not a mapping.
    """
    import json

    from .config import read_yaml

    example = {"data": "path: input.txt", "model": "n_layer: 2", "train": "max_iters: 500"}[section]
    how = f"--{section} FILE reads a YAML file of {section} fields (a line such as '{example}'); " \
          f"or give one field as --{section}.FIELD VALUE"
    if path is None or path.startswith("--"):
        raise DepthlabError(f"--{section} needs a file: {how}")
    if Path(path).is_dir():
        raise DepthlabError(f"--{section} {path} is a folder, not a file; {how}")
    if Path(path).exists() and not Path(path).is_file():  # was: "no such file" for /dev/zero
        raise DepthlabError(f"--{section} {path} is not a regular file (a device, pipe or socket); {how}")
    if not Path(path).is_file():
        raise DepthlabError(f"--{section} {path}: no such file; {how}")
    try:
        d = read_yaml(path, f"--{section} file", yaml_fix(path, how))
    except OSError as e:
        raise DepthlabError(f"--{section} {path} cannot be read ({e.strerror or e}); {how}") from None
    if isinstance(d, dict) and set(d) == {section} and isinstance(d[section], dict):
        d = d[section]  # the file repeats the section's name
    if not isinstance(d, dict):
        raise DepthlabError(f"--{section} {path} holds {type(d).__name__ if d is not None else 'nothing'}, not a "
                            f"mapping of fields; {how}")
    sections = [k for k in d if k in SECTIONS]
    if sections:  # a whole config file, or the section's name with something beside it
        raise DepthlabError(f"--{section} {path} holds a '{sections[0]}:' section; --{section} FILE reads the "
                            f"{section} fields (a line such as '{example}'), alone or under one '{section}:' line and "
                            "nothing beside it; a file with data/model/train sections is given with -c FILE")
    check_section_file(path, section, d)
    out = []
    for key, value in d.items():
        text = json.dumps(value) if isinstance(value, (dict, list)) else "null" if value is None else \
            str(value).lower() if isinstance(value, bool) else str(value)
        out.append(f"--{section}.{key}={text}")
    return out


def expand_presets(argv: list[str], presets: bool = True) -> list[str]:
    """Turn ``--preset NAME`` into ``--config <the preset's file>`` and ``--model FILE`` (``--data``,
    ``--train``) into that file's fields as flags (:func:`section_file_flags`), in place.

    Args:
        presets: False for a command without ``--preset`` (``sweep``): its words are left to its parser.

    Raises:
        DepthlabError: ``--preset`` without a name, or an unknown preset; a bad section file.
    """
    out: list[str] = []
    chosen: Optional[str] = None  # the --preset already given
    _GPU_RECIPE.clear()
    i = 0
    while i < len(argv):
        a = argv[i]
        name, _, value = a.partition("=")
        if name[2:] in SECTIONS and name.startswith("--"):
            path = value if _ else (argv[i + 1] if i + 1 < len(argv) else None)
            out += section_file_flags(name[2:], path)
            i += 1 if _ else 2
            continue
        if presets and (a == "--preset" or a.startswith("--preset=")):
            name = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else None)
            if not name or name.startswith("-"):  # --preset at the end, or followed by another flag
                raise DepthlabError(f"--preset needs a name after it, one of {', '.join(list_presets()) or 'none'}"
                                    " (`depthlab presets` describes them)")
            if chosen is not None:  # two recipes would merge field by field into one that is neither
                raise DepthlabError(f"--preset given twice ({chosen}, then {name}): a preset is a whole recipe and two "
                                    "would merge into one that is neither; keep one --preset and set the fields you "
                                    "want from the other as flags (depthlab presets describes them)")
            chosen = name
            _GPU_RECIPE[:] = [name] if name in GPU_PRESETS else []
            out += ["--config", str(preset_path(name))]
            i += 1 if "=" in a else 2
            continue
        if joined_config(a) is not None:  # -cFILE: spelled as the other files, so that what reads them finds it
            out += ["-c", joined_config(a)]
            i += 1
            continue
        out.append(a)
        i += 1
    return out


_DEFERRED: list[str] = []  # warnings about the run to be made: said once it is made (:func:`deferred_warnings`)

#: Presets sized for a GPU: nanoGPT's Shakespeare-char GPU recipe evaluates 2 x 200 batches of 64 x 256 tokens with
#: a 10.7 M-parameter model, about 1.4e14 FLOPs: 23 min at 100 GFLOP/s, minutes on any CPU.
GPU_PRESETS = ("nanogpt-gpu",)
_GPU_RECIPE: list[str] = []  # the GPU preset the last expand_presets read, if any


def gpu_recipe_on_cpu(device) -> Optional[str]:
    """The warning of a GPU preset (:data:`GPU_PRESETS`) run on ``device`` a CPU, or None."""
    if not _GPU_RECIPE or getattr(device, "type", device) != "cpu":
        return None
    return (f"--preset {_GPU_RECIPE[0]} is a GPU recipe (nanoGPT's: 6 x 384, 64 x 256 tokens a step, evaluations of "
            "2 x 200 batches): on a CPU each evaluation alone takes minutes and train.max_time does not bound them; "
            "--preset nanogpt-cpu (nanoGPT's CPU recipe) or fast-cpu trains on a CPU (Ctrl-C stops this one within "
            "a batch)")


def deferred_warnings() -> list[str]:
    """The warnings the last :func:`expand_train_argv` kept for the run it describes, emptied: the caller warns
    once the run is set up, so that a command refused later says one line, and a restarted one says them once."""
    out = list(_DEFERRED)
    _DEFERRED.clear()
    return out


def expand_train_argv(argv: list[str]) -> list[str]:
    """Presets, then ``--resume RUN``: the run's own config.json first, resume and out_dir last.

    Raises:
        DepthlabError: not a run directory, or ``--resume`` combined with another out_dir or
            with ``--init-from``.
    """
    from .rundir import CONFIG, RunDir

    _DEFERRED.clear()
    _NOTICES.clear()
    for names in (["--resume"], ["--init-from", "--init_from"]):
        values = list(dict.fromkeys(v for _, _, v in occurrences(argv, names) if v is not None))
        if len(values) > 1:  # the expansion reads the first, the parser keeps the last: refused, not mixed
            raise DepthlabError(f"{names[0]} is given {len(values)} times ({', '.join(values)}); give it once, "
                                "with the one run directory to use")
    given = occurrences(argv, ["--resume"])
    if given and (given[0][2] is None or given[0][2].startswith("--")):
        raise DepthlabError("--resume needs the run directory to continue: --resume RUN_DIR, the folder holding its "
                            "config.json (depthlab train writes runs/<date-time> unless --train.out_dir says "
                            "otherwise)")
    out = expand_presets(argv)
    if flag_value(argv, "--resume") is None:
        out = corpus_target(argv, out)
    resume = flag_value(argv, "--resume")
    if resume is None:
        init = flag_value(argv, "--init-from") or flag_value(argv, "--init_from")
        return _init_from_model_flags(init, flag_value(argv, "--model.source"), argv) + out if init else \
            _resume_in_file(out)
    rd = Path(resume)
    try:
        RunDir(rd).require("config")
    except DepthlabError as e:
        raise DepthlabError(f"cannot resume: {e}") from None
    source = flag_value(argv, "--model.source")
    ran_source = ((RunDir(rd).config or {}).get("model") or {}).get("source")
    if source is not None and convert(source, Optional[str]) is not None and not ran_source:
        src = shlex.quote(source)
        raise DepthlabError(f"--resume {shlex.quote(str(rd))}: that run was trained with depthlab's built-in GPT (its "
                            "config.json has no model.source), and a resume continues the same model; drop "
                            f"--model.source {src}, or train it as a new run: --model.source {src} --train.out_dir "
                            "NEW_DIR")
    # before the out_dir check, whose fix (--init-from RUN --train.out_dir NEW) was what the user had typed
    if flag_value(argv, "--init-from") is not None or flag_value(argv, "--init_from") is not None:
        raise DepthlabError("--resume and --init-from exclude each other: resume continues a run, "
                            "init-from starts a new one from its weights")
    off = flag_value(argv, "--train.resume")
    try:
        off = convert(off, bool) if off is not None else None
    except BadValue:  # refused in its own words by the flags' check, where --resume leaves it as typed
        raise DepthlabError(f"train: --train.resume: expected true or false, got {off!r}") from None
    if off is False:  # the --train.resume true appended below won, silently
        raise DepthlabError(f"--resume {shlex.quote(str(rd))} and --train.resume false contradict each other: drop "
                            "--train.resume false to continue the run, or drop --resume (--init-from "
                            f"{shlex.quote(str(rd))} --train.out_dir NEW_DIR starts a new run from its weights)")
    other = flag_value(argv, "--train.out_dir")
    if other is not None and Path(other).resolve() != rd.resolve():
        raise DepthlabError(f"--resume {shlex.quote(str(rd))} continues that run in place; drop --train.out_dir "
                            f"{shlex.quote(other)} (or use --init-from {shlex.quote(str(rd))} --train.out_dir "
                            f"{shlex.quote(other)} for a new run)")
    return ["--config", str(rd / CONFIG), *_as_ran(rd)] + out + ["--train.resume", "true",
                                                                          "--train.out_dir", str(rd)]


def _resume_in_file(out: list[str]) -> list[str]:
    """``train.resume: true`` with the run's ``train.out_dir``, set in a ``-c`` file or by flags rather than by
    ``--resume RUN``: the run's own config.json first, as ``--resume`` reads it, so that what the file leaves out
    is the run's value, not the default (was: a file naming only resume and out_dir was refused as a changed
    model, ``model.n_layer 1 -> 4``). ``out`` unchanged when the run has no readable config.json: the resume then
    says what is missing."""
    from .rundir import CONFIG

    given, resume = _final(out, "train.resume")
    _, out_dir = _final(out, "train.out_dir")
    if not given or str(resume).lower() != "true" or out_dir in (None, "", "null", "None"):
        return out
    rd = Path(str(out_dir))
    if not (rd / CONFIG).is_file() or not _yaml_section(str(rd / CONFIG), "model"):
        return out
    return ["--config", str(rd / CONFIG), *_as_ran(rd)] + out


def _as_ran(rd: Path) -> list[str]:
    """Flags after a resumed run's config.json that keep what the run did where config.json cannot say it:
    :func:`_source_attention`, and each field newer than the run at the value the run had
    (:func:`~depthlab.config.as_ran`: ``--train.eval_windows random``, whose windows its best loss was read on;
    ``--model.position learned``, its weights' table of positions)."""
    from .config import as_ran
    from .rundir import RunDir

    cfg = RunDir(rd).config
    if not isinstance(cfg, dict):
        return _source_attention(rd)
    ran, out = as_ran(cfg), []
    for section in ("data", "model", "train"):  # what as_ran added to the run's config.json
        had, has = cfg.get(section), ran.get(section)
        if isinstance(had, dict) and isinstance(has, dict):
            out += [a for k, v in has.items() if k not in had for a in (f"--{section}.{k}", str(v))]
    return _source_attention(rd) + out


def _source_attention(rd: Path) -> list[str]:
    """``--train.attention auto`` for a model.source run whose config.json records another value (written before
    that was refused with model.source; it never chose anything for the user's forward); after the run's
    config.json, so that a ``--train.attention`` given with the resume is still judged."""
    from .rundir import RunDir

    cfg = RunDir(rd).config or {}
    source = (cfg.get("model") or {}).get("source")
    attention = (cfg.get("train") or {}).get("attention")
    return ["--train.attention", "auto"] if source and attention not in (None, "auto") else []


def resume_config_fault(rd: Path) -> Optional[str]:
    """Why run ``rd``'s config.json, read as ``--resume`` reads it (with :func:`_source_attention`) and without the
    resume's flags, is not a config depthlab can run, or None (valid, or missing/unreadable: not the cause). A
    resume whose config fails while this is None failed on a value its command line gave."""
    from .config import RunConfig, as_ran
    from .rundir import RunDir

    cfg = RunDir(rd).config if (Path(rd) / "config.json").is_file() else None
    if not isinstance(cfg, dict):
        return None
    d = {k: dict(as_ran(cfg).get(k) or {}) for k in ("data", "model", "train")}
    if _source_attention(rd):
        d["train"]["attention"] = "auto"
    try:
        RunConfig.from_dict(d)
    except DepthlabError as e:
        return str(e)
    return None


def _refuse_file_model(init: str, model: dict, what: str, argv: list[str]) -> None:
    """``-c FILE --init-from SRC``: the source's model section comes after the files (only flags typed come later),
    so a file's model field that differs from the source's would be silently replaced by it; refused instead.
    A ``--preset``'s model fields are the preset's recipe, not the user's words: the run's shape wins with one
    warning naming each field the preset gave another value (kept for :func:`deferred_warnings`).

    Raises:
        DepthlabError: naming each differing field (its value in the file and in ``what``) and the two fixes.
    """
    from .cli_args import config_files

    files = [f for f in config_files(expand_presets(argv)) if _yaml_section(f, "model")]
    said = {k: (f, v) for f in files for k, v in _yaml_section(f, "model").items()}  # the last file wins
    differ = [(k, f, v) for k, (f, v) in said.items() if k in model and k != "vocab_size" and v != model[k]
              and flag_value(argv, f"--model.{k}") is None]  # a typed flag wins over both: not ignored
    preset = [(k, Path(f).stem, v) for k, f, v in differ if Path(f).parent == preset_dir()]
    differ = [d for d in differ if Path(d[1]).parent != preset_dir()]
    if preset and not differ:  # a preset's training settings for the run's model: meant, but said
        _DEFERRED.append(f"--init-from {init}: the new run trains {what}'s model, whose weights fix its shape: "
                         + ", ".join(f"model.{k} {model[k]} (preset {p}: {v})" for k, p, v in preset)
                         + "; a --model.FIELD flag typed on the command line that leaves the weights' shapes alone "
                           "still wins (e.g. a dropout)")
    if differ:
        fields = "; ".join(f"model.{k} {v} in {f}, {model[k]} in {init}" for k, f, v in differ)
        names = ", ".join(f"model.{k}" for k, _, _ in differ)
        raise DepthlabError(f"--init-from {init}: {fields}; the new run would train {what}'s model (its weights fix "
                            f"the shape) and ignore the file's values: remove {names} from "
                            f"{' / '.join(sorted({f for _, f, _ in differ}))}, or drop --init-from to train the "
                            "file's model from scratch (a --model.FIELD flag typed on the command line that leaves "
                            "the weights' shapes alone still wins, e.g. a dropout)")


def _init_from_model_flags(init: str, source: Optional[str] = None, argv: Optional[list[str]] = None) -> list[str]:
    """``--init-from SRC``: the source's model section as flags, before the user's own (which win).

    ``source``: the ``--model.source`` the command gives. Its weights cannot come from depthlab's GPT: refused in
    one line (DepthlabError) instead of as depthlab's GPT's shape fields "given" with a model.source, which the
    user never typed.

    The weights fix the shape, so the new run takes it from where they come from instead of the defaults: a run's
    config.json, an export's depthlab.json, else the shape its Hugging Face config.json gives
    (:func:`~depthlab.init_from.source_model`), so an export starts a run as its run does. A run of a model.source
    that the command does not name again also gives ``--init_from_copy=true``: the model is built from its copy.
    """
    import json

    from .init_from import source_model

    model, what = source_model(Path(init)) if Path(init).is_dir() else ({}, "")
    _refuse_file_model(init, model, what, argv or [])
    if source and model and not model.get("source"):
        raise DepthlabError(f"--init-from {init} holds depthlab's GPT (model.n_layer {model.get('n_layer')}, n_embd "
                            f"{model.get('n_embd')}), and --init-from starts a model.source model only from a run "
                            f"of one: drop --model.source {source} to continue depthlab's GPT, or --init-from a "
                            f"run of {source}")
    # the run's model.source, taken because the command names none: built from the run's own copy (the Trainer's
    # init_from_copy), since the file it names may have changed since its weights were trained
    out: list[str] = ["--init_from_copy=true"] if model.get("source") and not source else []
    for key, value in model.items():
        if key == "vocab_size" or value is None:
            continue  # the vocabulary comes from the tokenizer; None is a field's unset default
        text = json.dumps(value) if isinstance(value, dict) else str(value).lower() if isinstance(value, bool) \
            else str(value)
        out += [f"--model.{key}={text}"]
    return out


# ------------------------------------------------------------------------- a preset's corpus-specific target
def _yaml_section(path: str, section: str) -> dict:
    """``section`` of the config file ``path`` ({} when it cannot be read: the parser says why later)."""
    from .config import read_yaml

    try:
        d = read_yaml(path, "config file", "")
    except (OSError, DepthlabError):
        return {}
    sec = d.get(section) if isinstance(d, dict) else None
    return sec if isinstance(sec, dict) else {}


def _final(out: list[str], key: str) -> tuple[bool, object]:
    """(given, value) of config field ``section.field`` after every ``--config`` file and flag of the
    expanded ``out`` (later ones win, as the parser reads them)."""
    sec, field = key.split(".")
    given, value = False, None
    for i, name, v in occurrences(out, ["--config", "-c", f"--{key}"]):
        if name == f"--{key}":
            given, value = True, v
        elif v is not None and field in (section := _config_section(v, sec)):  # a file's, or an inline mapping's
            given, value = True, section[field]
    return given, value


def _is_embedded(path: object) -> bool:
    """True for no ``data.path`` (the embedded Tiny Shakespeare) or a file with exactly its bytes."""
    from .data import embedded_corpus_path

    if path in (None, "", "null", "None"):
        return True
    p, emb = Path(str(path)), embedded_corpus_path()
    try:
        return p.stat().st_size == emb.stat().st_size and p.read_bytes() == emb.read_bytes()
    except OSError:
        return False


_NOTICES: list[str] = []  # notices about the command line: said once it is accepted (:func:`say_deferred_notices`)


def say_deferred_notices() -> None:
    """Say (on stderr, as ``depthlab: LINE``) and forget the notices the last :func:`expand_train_argv` kept: once
    the run is set up, or ``--print_config`` has printed (stdout is the result: its YAML, which ``-c`` reads back),
    so that a command refused later says its one line alone."""
    import sys

    for line in _NOTICES:
        print(f"depthlab: {line}", file=sys.stderr, flush=True)
    _NOTICES.clear()


def corpus_target(argv: list[str], out: list[str], log=_NOTICES.append) -> list[str]:
    """A preset's ``train.target_val_loss`` is measured on the embedded Tiny Shakespeare with the char
    tokenizer (fast-cpu's 1.88 nats/char): on another corpus or tokenizer it means nothing, so it is
    dropped (``--train.target_val_loss 0`` after the preset) and ``log`` says so (default: a notice kept for
    :func:`say_deferred_notices`). A target the user sets (a flag, or a ``-c`` file after the preset) is kept.

    Args:
        argv: the command line as typed. out: it with ``--preset`` expanded (:func:`expand_presets`).

    Returns:
        ``out``, with the drop inserted after each preset that sets a target.
    """
    presets = [(v, str(preset_path(v))) for _, _, v in occurrences(argv, ["--preset"]) if v is not None]
    tuned = [(name, path) for name, path in presets
             if float(_yaml_section(path, "train").get("target_val_loss") or 0) > 0]
    if not tuned:
        return out
    name, path = tuned[-1]
    after = out[max(i for i, a in enumerate(out) if a == path) + 1:]
    if _final(after, "train.target_val_loss")[0]:
        return out  # the user's own target, after the preset: theirs
    _, data_path = _final(out, "data.path")
    _, tokenizer = _final(out, "data.tokenizer")
    if _is_embedded(data_path) and (tokenizer is None or tokenizer == "char"):
        return out
    target = float(_yaml_section(path, "train")["target_val_loss"])
    what = (f"--data.path {data_path}" if not _is_embedded(data_path) else "") + \
        (f"{' and ' if not _is_embedded(data_path) else ''}--data.tokenizer {tokenizer}"
         if tokenizer not in (None, "char") else "")
    log(f"preset {name}: its train.target_val_loss {target:g} nats/char was measured on the embedded Tiny "
        f"Shakespeare with the char tokenizer; {what} is another corpus or unit, so that target is dropped and "
        "training runs its planned steps (set one for this corpus with --train.target_val_loss; the run prints "
        "its corpus baselines at start)")
    i = out.index(path) + 1
    return out[:i] + ["--train.target_val_loss", "0"] + out[i:]


# ------------------------------------------------------------------------- where a refused value came from
def _file_label(path: str) -> str:
    """A config file as the user knows it: ``preset NAME`` for a shipped preset, else the path as given."""
    return f"preset {Path(path).stem}" if Path(path).parent == preset_dir() else path


def _config_mapping(value: str) -> dict:
    """The whole mapping of a ``-c`` value: a file's, or the inline YAML's (``-c '{max_tokens: 0}'``); {} when it
    cannot be read or is no mapping (the parser says why)."""
    from .config import read_yaml

    try:
        d = read_yaml(value, "config file", "") if Path(value).is_file() else _inline_yaml(value)
    except (OSError, DepthlabError):
        return {}
    return d if isinstance(d, dict) else {}


def _inline_yaml(value: str) -> object:
    import yaml

    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return None


def _config_section(value: str, section: str) -> dict:
    """``section`` of a ``-c`` value: a file's (:func:`_yaml_section`), or the inline YAML mapping's (``-c '{model:
    {n_layer: 2}}'``); {} when it has none."""
    if Path(value).is_file():
        return _yaml_section(value, section)
    sec = _config_mapping(value).get(section)
    return sec if isinstance(sec, dict) else {}


def value_source(key: str, typed: list[str], argv: list[str]) -> Optional[str]:
    """Where the value of config field ``key`` (``model.n_layer``) that the parser read from ``argv`` came from, in
    the user's words: the flag they typed (``--model.n_layer``), the file (a ``-c`` file's path, ``preset NAME``, a
    resumed run's config.json, a ``--model FILE``), or None: the default, or a value an expansion put there
    (``--init-from``'s model, a resumed run's fields newer than it).

    Args:
        key: the dotted field. typed: the command line as typed. argv: it expanded (:func:`expand_train_argv`) and
            files first (:func:`~depthlab.cli_args.files_first`): files are read first and flags win, the last of
            each kind.
    """
    sec, _, name = key.partition(".")
    if not name:  # a command's own option (layers' max_tokens): a -c mapping holds it at its top level
        if occurrences(typed, [flag(key)]):
            return flag(key)
        for _, _, value in reversed(occurrences(argv, ["--config", "-c"])):
            if value is not None and key in _config_mapping(value):
                return _file_label(value) if Path(value).is_file() else f"-c {value}"
        return None
    if occurrences(argv, [flag(key)]):
        if occurrences(typed, [flag(key)]):
            return flag(key)
        for _, _, path in reversed(occurrences(typed, [f"--{sec}"])):  # --model FILE: its fields became flags
            try:
                given = path is not None and any(f.startswith(f"{flag(key)}=") for f in section_file_flags(sec, path))
            except DepthlabError:
                given = False
            if given:
                return path
        return None
    for _, _, value in reversed(occurrences(argv, ["--config", "-c"])):
        if value is not None and name in _config_section(value, sec):
            return _file_label(value) if Path(value).is_file() else f"-c {value}"
    return None


def attribute_option_error(msg: str, parser, typed: list[str], argv: list[str]) -> str:
    """``msg``, a refusal that opens with the option whose value it refuses (``--max_tokens must be >= 0, got -1``),
    said as coming from the ``-c`` file or inline mapping that gave the value where no spelling of the option was
    typed (``-c {max_tokens: -1}: max_tokens must be >= 0, got -1``); ``msg`` otherwise."""
    for act in parser._actions:
        names = [o for o in act.option_strings if o.startswith("--")]
        opened = next((o for o in names if msg.startswith(f"{o} ")), None)
        if opened is None or occurrences(typed, names):
            continue
        where = value_source(act.dest, typed, argv)
        if where is not None and not where.startswith("--"):
            return f"{where}: {act.dest}{msg[len(opened):]}"
    return msg


def typed_gpt_fields_error(model, typed: list[str], argv: list[str]) -> Optional[DepthlabError]:
    """The refusal of a GPT-only field (:data:`~depthlab.config.GPT_ONLY`) the user gave (a flag, a ``-c`` file or
    mapping, a ``--model FILE``) beside a ``model.source``, at any value: the config refuses only values other than
    the default, so ``--model.n_layer 4`` trained the user's model at its own depth without a word. A preset's and a
    resumed run's values are not the user's words. None when there is none, or no ``model.source``.

    Args:
        model: the parsed model section (``ns.model``). typed, argv: as :func:`value_source` takes them.
    """
    from .config import GPT_ONLY, gpt_only_error

    source = getattr(model, "source", None)
    if not source:
        return None
    given = []
    for name in GPT_ONLY:
        where = value_source(f"model.{name}", typed, argv) if hasattr(model, name) else None
        if where is not None and (where == flag(f"model.{name}") or where.startswith("-c ") or where in typed):
            given.append((name, getattr(model, name)))
    return attribute_config_error(gpt_only_error(given, source), typed, argv) if given else None


def attribute_config_error(e, typed: list[str], argv: list[str]) -> DepthlabError:
    """A :class:`~depthlab.config.ConfigError` of the config that command line ``argv`` made, said with where its
    fields' values came from (:func:`value_source`): a flag the user typed is named as typed (``--model.n_layer must
    be a positive integer, got -1``), a file opens the line (``my.yaml: model.position must be one of learned, rope;
    got ...``), as the file's other errors do (``my.yaml: model.n_layer: expected an integer, got 'x'``). A value
    left at its default is named as the field. The message is ``e``'s otherwise.
    """
    msg, files, typed_flag = str(e), {}, False
    for key in dict.fromkeys(e.fields):
        where = value_source(key, typed, argv)
        if where == flag(key):
            msg, typed_flag = as_flag(msg, key), True
        elif where is not None:
            files.setdefault(where, []).append(key)
    each = {where: ", ".join(keys) for where, keys in files.items()}
    if typed_flag and files:  # a flag's value against a file's: the file is named after, not as the culprit
        return DepthlabError(f"{msg} ({'; '.join(f'{keys} from {where}' for where, keys in each.items())})")
    if len(files) == 1:
        return DepthlabError(f"{next(iter(files))}: {msg}")
    if files:
        return DepthlabError(f"{', '.join(f'{where} ({keys})' for where, keys in each.items())}: {msg}")
    return DepthlabError(msg)
