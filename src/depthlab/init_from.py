"""Starting a run from another one (``--init-from``): a run's checked best weights or a ``depthlab export``
folder, the tokenizer they need, whether a changed model can take them, and the record the new run keeps.

The source's weights load only if every name and shape fits the new model (:func:`weights_fit` tells before any
is built) and its tokenizer is the new run's (ids would mean other text); the new run records where they came
from (:func:`init_record`: path, sha256, step and val loss) in config.json's ``resolved`` and summary.json.
"""

from __future__ import annotations

import json
import shlex
import warnings
from pathlib import Path
from typing import Any, Optional

import torch
from safetensors.torch import load as st_load

from . import hf_layout
from .checkpoint import (CKPT_DIR, best_copy, best_fix, clean_state_dict, load_run_tokenizer, load_weights_file,
                         read_metadata, unchecked_best)
from .config import DEFAULT_CACHE, ModelConfig, predating_model
from .data import BPETokenizer, CharTokenizer, Tokenizer, sha256_file
from .errors import DepthlabError
from .model import ROPE_BASE
from .usermodel import source_drift
from .rundir import CONFIG, TOKENIZER, RunDir, init_from_record, is_sweep_dir, not_a_run_error
from .units import counted

__all__ = ["NEOX_ROPE", "NEOX_ROTARY", "changed_source", "given_tokenizer_json", "init_from_flag", "init_weights",
           "init_record", "init_line", "kept_init_record", "weights_fit", "source_model"]


def init_from_flag(src) -> str:
    """``--init-from SRC`` as it would be typed in a shell (quoted when it holds a space), for the messages."""
    return f"--init-from {shlex.quote(str(src))}"


def _export_tokenizer(src: Path) -> Optional[Tokenizer]:
    """The tokenizer of a ``depthlab export`` folder (its ids are depthlab's), or None if it has none."""
    f = src / TOKENIZER
    if not f.is_file():
        return None
    text = f.read_text(encoding="utf-8")
    model = json.loads(text).get("model", {})
    if not model.get("merges") and (json.loads(text).get("pre_tokenizer") or {}).get("type") != "ByteLevel":
        vocab = model.get("vocab", {})
        return CharTokenizer(sorted(vocab, key=vocab.get))  # a char run's export: characters without merges
    return BPETokenizer.from_str(text, str(f))


def _describe(tok: Tokenizer) -> str:
    return f"bpe, {counted(tok.vocab_size, 'token')}" if isinstance(tok, BPETokenizer) else \
        f"char, {counted(tok.vocab_size, 'symbol')}"


def _check_same_tokenizer(src: Path, theirs: Optional[Tokenizer], ours: Tokenizer) -> None:
    same = theirs is not None and type(theirs) is type(ours) and (
        theirs.vocab == ours.vocab if isinstance(ours, CharTokenizer)
        else theirs.tok.get_vocab() == ours.tok.get_vocab())
    if not same:
        # a BPE source's tokenizer.json comes with it (any corpus encodes with it); a char vocabulary is its corpus's
        fix = ("pass --data.tokenizer bpe (the source's tokenizer.json is then this run's, whatever the corpus)"
               if isinstance(theirs, BPETokenizer) else
               "use the source's corpus (its data.path) with --data.tokenizer char: a char vocabulary is the set of "
               "its corpus's characters")
        raise DepthlabError(f"{init_from_flag(src)}: its tokenizer ({_describe(theirs) if theirs else 'none'}) differs "
                            f"from this run's ({_describe(ours)}); ids would mean other text: {fix}")


def given_tokenizer_json(cfg, init_from: Optional[str]) -> Optional[str]:
    """The trained BPE tokenizer a run must reuse instead of the cached one: its own on resume, the source's
    with ``--init-from`` (a run directory or an export); None for char runs and new BPE runs.

    Args:
        cfg: the :class:`~depthlab.config.RunConfig` asked for.
        init_from: the ``--init-from`` folder, if any.

    Raises:
        DepthlabError: resuming a BPE run whose ``tokenizer.json`` is gone.
    """
    theirs = _checked_export_tokenizer(Path(init_from)) if init_from else None  # for a char run too
    if cfg.data.tokenizer != "bpe":
        return None
    if cfg.train.resume and cfg.train.out_dir:
        rd = Path(cfg.train.out_dir)
        if (rd / TOKENIZER).is_file():
            return (rd / TOKENIZER).read_text(encoding="utf-8")
        old = (json.loads((rd / "config.json").read_text()) if (rd / "config.json").is_file() else {})
        if (old.get("data") or {}).get("tokenizer") == "bpe":
            raise DepthlabError(f"cannot resume {rd}: its {TOKENIZER} is missing, and the checkpoints' token ids "
                                f"mean nothing without it; put the run's {TOKENIZER} back (an export of this run holds "
                                f"the same file, and so does the BPE cache of its corpus where it is kept: "
                                f"data.cache_dir, else {DEFAULT_CACHE})")
        return None
    if init_from and isinstance(theirs, BPETokenizer):
        _refuse_other_vocab_size(Path(init_from), cfg.data.vocab_size)
        return theirs.json
    return None


def _checked_export_tokenizer(src: Path) -> Optional[Tokenizer]:
    """The tokenizer of ``--init-from src`` (:func:`_export_tokenizer`), an export's checked first: complete, and its
    tokenizer.json of as many tokens as its weights have rows (before a BPE tokenizer is trained in its place)."""
    hcfg = _export_config(src)
    if hcfg is not None:
        _refuse_incomplete_export(src)
    theirs = _export_tokenizer(src)
    if hcfg is not None and theirs is not None:
        _refuse_other_tokenizer(src, theirs, hcfg)
    return theirs


def _refuse_other_tokenizer(src: Path, tok: Tokenizer, hcfg: dict[str, Any]) -> None:
    """An export whose ``tokenizer.json`` holds another number of tokens than its weights' rows (config.json's
    ``vocab_size``: export writes both from one run): another run's tokenizer copied in. It was refused later as a
    shape mismatch of ``transformer.wte.weight`` that named neither file.

    Raises:
        DepthlabError: both files, both sizes, and the fix (export again).
    """
    rows = hcfg.get("vocab_size")
    if isinstance(rows, int) and not isinstance(rows, bool) and rows != tok.vocab_size:
        raise DepthlabError(f"{init_from_flag(src)}: {src / TOKENIZER} holds {counted(tok.vocab_size, 'token')} but "
                            f"the weights have {rows} rows ({src / 'config.json'} vocab_size): the tokenizer is not "
                            f"the one they were trained with (copied from another run?); export the run again "
                            f"({_export_fix(src)})")


def _refuse_other_vocab_size(src: Path, ours: Optional[int]) -> None:
    """``--init-from src`` (a BPE run) takes the source's trained tokenizer: a ``data.vocab_size`` other than the
    one it was trained with would be recorded in config.json while the run trains with the source's vocabulary
    (None, not given: the source's tokenizer, whatever its size).

    Raises:
        DepthlabError: data.vocab_size differs from the source run's config.json.
    """
    try:
        data = json.loads((src / CONFIG).read_text()).get("data") or {}
    except (OSError, ValueError, AttributeError):  # an export (no config.json), or one unreadable: nothing to compare
        data = {}
    theirs = data.get("vocab_size") if isinstance(data, dict) and data.get("tokenizer") == "bpe" else None
    if ours is not None and isinstance(theirs, int) and theirs != ours:
        raise DepthlabError(f"{init_from_flag(src)}: data.vocab_size {theirs} there, {ours} here; the new run trains "
                            "with the source's BPE tokenizer (its weights' ids are that tokenizer's): drop "
                            "--data.vocab_size to keep the source's tokenizer, or drop --init-from to train a new "
                            "tokenizer from scratch")


def init_weights(src: Path, cfg: ModelConfig, tok: Tokenizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The weights that start a new run ``--init-from src``: a run's ``best`` checkpoint or a Hugging Face export,
    and their :func:`init_record` (the file is hashed once, for the manifest's check and the record).

    Args:
        src: a depthlab run directory, or a folder written by ``depthlab export``.
        cfg: the new run's model (its shape must match the weights; checked by :func:`load_into`).
        tok: the new run's tokenizer (must be the source's).

    Returns:
        (depthlab state dict, :func:`init_record`).

    Raises:
        DepthlabError: neither kind of folder, another tokenizer, an export of another variant, norm, position,
            activation (:func:`_refuse_other_activation`) or bias setting, a GPT-NeoX config that depthlab's GPT
            does not compute (:func:`_neox_refusal`), an export without its tokenizer.json or model.safetensors
            (:func:`_refuse_incomplete_export`), with a config.json shape key absent, null or mistyped
            (:func:`_refuse_faulty_config`) or a damaged model.safetensors, or a best.safetensors that is damaged or
            fails its sha256 (one that cannot be checked is a warning).
    """
    src = Path(src)
    if not src.is_dir():
        raise DepthlabError(f"{init_from_flag(src)}: {'is a file' if src.exists() else 'no such folder'}; give a "
                            "depthlab run directory (it holds checkpoints/) or a folder written by depthlab export")
    if (src / CKPT_DIR).is_dir():
        path = src / CKPT_DIR / "best.safetensors"
        if not path.exists():
            raise DepthlabError(f"{init_from_flag(src)}: no {CKPT_DIR}/best.safetensors there; {_no_best_fix(src)}")
        try:
            sd, meta = load_weights_file(path)
        except DepthlabError as e:
            raise DepthlabError(f"{init_from_flag(src)}: {e}; {best_fix(src)}") from None
        digest = sha256_file(path)  # once (a file of gigabytes): the manifest's check and the record share it
        why = unchecked_best(src, digest)  # after the load: a truncated file is named as such, with its fix
        if why is not None:
            warnings.warn(f"{init_from_flag(src)}: {path} could not be checked against the run's manifest ({why}); its "
                          "weights are loaded unchecked")
        _check_same_tokenizer(src, load_run_tokenizer(src, meta, path), tok)
        return sd, init_record(src, digest, vouched=why is None)
    try:
        hcfg = json.loads((src / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        hcfg = {}
    family = hf_layout.hf_family(str(hcfg.get("model_type")))
    if family is None:  # a sweep folder is named as one, with one of its runs (as diagnose does)
        raise DepthlabError(f"--init-from {not_a_run_error(src)}" if is_sweep_dir(src) else str(_not_a_source(src)))
    if (cfg.variant, cfg.norm, cfg.position) != family:
        raise DepthlabError(f"{init_from_flag(src)}: a {hcfg['model_type']} model is model.variant {family[0]} with "
                            f"model.norm {family[1]} and model.position {family[2]}; set --model.variant {family[0]} "
                            f"--model.norm {family[1]} --model.position {family[2]}")
    _refuse_incomplete_export(src)
    _refuse_faulty_config(src, hcfg, _export_model(src))
    if hcfg["model_type"] == "gpt_neox":
        _neox_refusal(src, hcfg)
    _refuse_other_activation(src, hcfg, cfg.activation)
    _check_same_tokenizer(src, _export_tokenizer(src), tok)
    path = src / "model.safetensors"
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DepthlabError(f"{init_from_flag(src)}: {path} cannot be read ({e.strerror or type(e).__name__}); make "
                            "it readable by this user and run the command again") from None
    try:
        hf = st_load(data)
    except Exception as e:  # noqa: BLE001 - safetensors raises its own types for a cut or garbled file
        why = str(e).splitlines()[0] if str(e) else ""
        raise DepthlabError(f"{init_from_flag(src)}: {path} is damaged or truncated, not a whole safetensors file "
                            f"({type(e).__name__}{': ' + why if why else ''}; {counted(len(data), 'byte')}); export "
                            f"the run again ({_export_fix(src)}), or copy an intact model.safetensors into {src} (one "
                            "cut short in a copy or download: copy it again)") from None
    return hf_layout.from_hf_state_dict(hf, cfg, src), init_record(src)


def _no_best_fix(src: Path) -> str:
    """What to do about a run whose ``checkpoints/best.safetensors`` is gone: copy its step's twin back when one is
    kept, else restore it or start from another run."""
    twin, best = best_copy(src), src / CKPT_DIR / "best.safetensors"
    if twin is not None:
        return (f"{twin.name} is the same weights (the manifest's sha256 of best): copy it back "
                f"(cp {shlex.quote(str(twin))} {shlex.quote(str(best))}) and run the command again")
    return ("restore best.safetensors from a copy of the run, or give another run directory (or a folder written by "
            "depthlab export) to --init-from")


def _runs_in(src: Path) -> list[Path]:
    """The runs and exports ``--init-from`` would read among the folders in ``src`` (none when it cannot be read)."""
    try:
        return sorted(d for d in src.iterdir() if (d / CKPT_DIR).is_dir() or _export_config(d) is not None)
    except OSError:
        return []


def _not_a_source(src: Path) -> DepthlabError:
    """The error for a folder that is neither a run (no checkpoints/) nor an export depthlab reads, with what to
    give instead: one of the runs inside it, when it holds some (a folder of runs given for one)."""
    types = ", ".join(f["model_type"] for f in hf_layout.HF_FAMILIES.values())
    inside = _runs_in(src)
    runs = counted(len(inside), "run") + ("" if all((d / CKPT_DIR).is_dir() for d in inside) else " or exports")
    fix = (f"it holds {runs}: give one of them, e.g. {init_from_flag(inside[0])}" if inside
           else "give the out_dir of a depthlab train run (it holds checkpoints/) or a folder written by depthlab "
                "export")
    return DepthlabError(f"{init_from_flag(src)}: neither a depthlab run (no {CKPT_DIR}/) nor a Hugging Face export of "
                         f"model_type {types} (depthlab export); {fix}")


def _export_config(src: Path) -> Optional[dict[str, Any]]:
    """The ``config.json`` of ``src`` when it is a Hugging Face export ``--init-from`` would read (a folder without
    checkpoints/ whose config.json names a model_type of :data:`~depthlab.hf_layout.HF_FAMILIES`), else None."""
    if not src.is_dir() or (src / CKPT_DIR).is_dir():
        return None
    try:
        h = json.loads((src / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return h if isinstance(h, dict) and hf_layout.hf_family(str(h.get("model_type"))) is not None else None


def _export_model(src: Path) -> dict[str, Any]:
    """The model section an export's ``depthlab.json`` records (the run's, which export wrote config.json from);
    {} when the folder has none or it cannot be read."""
    try:
        model = (json.loads((src / "depthlab.json").read_text(encoding="utf-8")).get("config") or {}).get("model")
    except (OSError, ValueError, AttributeError):
        return {}
    return predating_model(model) if isinstance(model, dict) else {}


def _export_fix(src: Path) -> str:
    """The command that writes a whole, unedited export into ``src`` again: ``depthlab export RUN src --overwrite``,
    RUN being the run ``depthlab.json`` names when that run is still there (else the word RUN)."""
    try:
        run = json.loads((src / "depthlab.json").read_text(encoding="utf-8")).get("run_dir")
    except (OSError, ValueError, AttributeError):
        run = None
    run = shlex.quote(run) if isinstance(run, str) and run and (Path(run) / CKPT_DIR).is_dir() else "RUN"
    return f"depthlab export {run} {shlex.quote(str(src))} --overwrite"


def _refuse_incomplete_export(src: Path) -> None:
    """An export folder without its ``tokenizer.json`` or ``model.safetensors`` (a partial copy, a file deleted):
    refused naming the file, instead of as a tokenizer "differing" from the run's (blaming data.path) or an
    unreadable weights file. Every ``depthlab export`` writes both.

    Raises:
        DepthlabError: the first missing file, why it is needed, and the two fixes (export again, copy it back).
    """
    for name, why in ((TOKENIZER, "its weights' token ids mean nothing without the tokenizer they were trained with, "
                                  "and this run's data.path and data.tokenizer cannot stand in for it"),
                      ("model.safetensors", "it holds the weights")):
        if not (src / name).is_file():
            raise DepthlabError(f"{init_from_flag(src)}: {src} has no {name}, so the export is incomplete ({why}): "
                                f"export the run again ({_export_fix(src)}), or copy {name} back into {src} from a "
                                "complete export of the same run")


def _refuse_faulty_config(src: Path, hcfg: dict[str, Any], model: dict[str, Any]) -> None:
    """An export's ``config.json`` with a shape key absent, null or of the wrong type
    (:func:`~depthlab.hf_layout.hf_config_faults`), e.g. edited by hand to ``"num_hidden_layers": null``: refused.
    transformers builds the model of the folder from that file (with its class's default for a key it lacks, or
    not at all), and depthlab would drop the key and take ``depthlab.json``'s value or its own default, so the two
    would disagree silently. ``model``: ``depthlab.json``'s model section, whose values export wrote ({} if none).

    Raises:
        DepthlabError: one line naming the file, each key, what it has and needs, and the fix (the value depthlab
            export wrote, when depthlab.json records it; else export again).
    """
    faults = hf_layout.hf_config_faults(hcfg)
    if not faults:
        return
    path = src / "config.json"
    wrote = hf_layout.hf_config_values(model, hcfg["model_type"])
    if "tie_weights" in model:
        wrote["tie_word_embeddings"] = model["tie_weights"]
    has = " and ".join(f"{k} {said}" for k, said, _ in faults)
    needs = " and ".join(f"{k} to be {need}" for k, _, need in faults)
    back = {k: wrote[k] for k, _, _ in faults if k in wrote}
    sound = len(back) == len(faults) and not hf_layout.hf_config_faults({**hcfg, **back})  # depthlab.json edited too?
    fix = (f"put {', '.join(f'{json.dumps(k)}: {json.dumps(v)}' for k, v in back.items())} back into {path} (what "
           "depthlab export wrote, as its depthlab.json records), or export the run again "
           f"({_export_fix(src)})") if sound else f"export the run again ({_export_fix(src)})"
    raise DepthlabError(f"{init_from_flag(src)}: {path} has {has}, but transformers builds this folder's model from "
                        f"that file and needs {needs} (edited by hand?): {fix}")


def _refuse_other_activation(src: Path, hcfg: dict[str, Any], ours: str) -> None:
    """An export whose ``config.json`` activation is not the new run's ``model.activation``, or not one depthlab
    computes exactly (a key absent is its class's default, e.g. GPT-2's tanh ``gelu_new``): refused with the fix that
    fits the case. ``depthlab.json`` records the activation the weights were trained with: a config.json that says
    another was edited (restore the value export wrote, or export again); else the weights' activation is
    config.json's, and ``--model.activation`` (or a config file) asked for another.

    Raises:
        DepthlabError: one line naming the file, the key, its value, and the fix.
    """
    fam = hf_layout.HF_FAMILIES[hf_layout.hf_family(hcfg["model_type"])]
    key, computed = fam["act_key"], fam["act_computed"]
    act = hcfg.get(key, fam["act_default"])
    if act == ours and act in computed:
        return
    path = src / "config.json"
    said = f"{key} {json.dumps(act)}" if key in hcfg else f"no {key} ({hcfg['model_type']}'s default: {act})"
    trained = _export_model(src).get("activation")
    if trained in computed and act != trained:
        raise DepthlabError(f"{init_from_flag(src)}: {path} has {said}, but depthlab export wrote "
                            f"{json.dumps(key)}: {json.dumps(trained)} there (depthlab.json: model.activation "
                            f"{trained}, the activation its weights were trained with), so transformers would build "
                            f"another model from this folder (edited by hand?): put {json.dumps(key)}: "
                            f"{json.dumps(trained)} back into {path}, or export the run again ({_export_fix(src)})")
    if act not in computed:
        can = " or ".join(computed) if len(computed) > 1 else f"only {computed[0]} for {hcfg['model_type']}"
        raise DepthlabError(f"{init_from_flag(src)}: {path} has {said}, an activation depthlab does not compute "
                            f"exactly (it computes {can}; gelu is the exact erf form), so these weights would compute "
                            "another function: start from a depthlab export of a run (depthlab export RUN FOLDER)")
    raise DepthlabError(f"{init_from_flag(src)}: {path} has {said}, the activation its weights were trained with, "
                        f"but this run asks model.activation {ours}: set --model.activation {act}")


#: depthlab's rotary as GPT-NeoX's ``rope_parameters`` says it (transformers 5.x): the whole head, base
#: :data:`~depthlab.model.ROPE_BASE`, no scaling. What export writes and what ``--init-from`` accepts (one home).
NEOX_ROPE = {"rope_type": "default", "rope_theta": ROPE_BASE, "partial_rotary_factor": 1.0}
#: depthlab's rotary (the whole head, base :data:`~depthlab.model.ROPE_BASE`) in every top-level spelling some
#: transformers ``GPTNeoXConfig`` reads besides 5.x's ``rope_parameters`` (which 4.x ignores). 4.x's constructor takes
#: ``rotary_pct`` / ``rotary_emb_base``, and 4.46+ copies them into ``partial_rotary_factor`` / ``rope_theta``, from
#: which its model makes the rotary frequencies (4.57.6 rotates as many dims as there are frequencies): with
#: ``rotary_pct`` set on the object only after construction, 4.57.6 kept 0.25 and rotated a quarter of each head.
#: :func:`depthlab.export.hf_config` passes them to the constructor and sets all four on the object, so every version
#: builds the same model and writes every spelling into ``config.json`` (5.x reads them as fallbacks for
#: ``rope_parameters``); :func:`_neox_refusal` checks each one present.
NEOX_ROTARY = {"rotary_pct": 1.0, "rotary_emb_base": ROPE_BASE, "partial_rotary_factor": 1.0, "rope_theta": ROPE_BASE}

#: GPTNeoXConfig's default rotary fraction, which every transformers takes when a config.json names none.
_NEOX_DEFAULT_ROTARY = 0.25


def _same_value(have: Any, want: Any) -> bool:
    """``have`` (read from a config.json) is ``want``: numbers by value (10000 is 10000.0, ``true`` is not 1.0),
    anything else by type and value."""
    if isinstance(want, bool) or isinstance(have, bool):
        return have is want
    if isinstance(want, (int, float)):
        return isinstance(have, (int, float)) and have == want
    return type(have) is type(want) and have == want


def _neox_refusal(src: Path, hcfg: dict[str, Any]) -> None:
    """Refuse a GPT-NeoX ``config.json`` whose function is not depthlab's ``position rope`` GPT, though its weights
    would load: Pythia's parallel residual, rotary on a quarter of each head (GPT-NeoX's default), another base or
    rope type.

    The rotary settings have several spellings, and transformers versions read different ones: 5.x reads
    ``rope_parameters`` (``rope_scaling`` first when present), falling back to ``rotary_pct`` / ``rotary_emb_base``;
    4.x reads ``rotary_pct`` / ``rotary_emb_base`` and a ``rope_scaling`` dict and ignores ``rope_parameters``.
    depthlab export writes both (consistent), so every spelling present must say depthlab's values (full rotary,
    base 10000, rope type default); one edited alone would make some transformers build another model from the
    folder. The top-level ``partial_rotary_factor`` / ``rope_theta`` are checked too. A rotary fraction that no
    spelling gives is GPTNeoXConfig's default, a quarter; an absent ``use_parallel_residual`` its default, true.

    Raises:
        DepthlabError: one line naming every key that differs (as spelt in the file), its value and depthlab's.
    """
    wrong: list[tuple[str, str]] = []  # (what config.json says, keys as spelt there; what depthlab's would say)

    def check(key: str, have: Any, want: Any) -> None:
        if not _same_value(have, want):
            wrong.append((f"{key} {json.dumps(have)}", f"{key} {json.dumps(want)}"))

    if "use_parallel_residual" in hcfg:
        check("use_parallel_residual", hcfg["use_parallel_residual"], False)
    else:
        wrong.append(("no use_parallel_residual (GPTNeoXConfig's default: true)", "use_parallel_residual false"))
    check("layer_norm_eps", hcfg.get("layer_norm_eps", 1e-5), 1e-5)
    fraction_given = "rotary_pct" in hcfg  # what every transformers reads (5.x after rope_parameters)
    for name in ("rope_parameters", "rope_scaling"):
        rope = hcfg.get(name)
        if rope is None:
            continue  # absent or null: transformers falls back to the other spellings
        if not isinstance(rope, dict):  # 5.x refuses to build one, 4.x ignores rope_parameters: neither is ours
            check(name, rope, NEOX_ROPE)
            continue
        for key in ("rope_type", "type", "rope_theta", "partial_rotary_factor"):  # "type": 4.x's rope_type
            if key in rope:
                check(f"{name}.{key}", rope[key], NEOX_ROPE["rope_type" if key == "type" else key])
        fraction_given = fraction_given or "partial_rotary_factor" in rope
    for key in ("rotary_pct", "partial_rotary_factor", "rotary_emb_base", "rope_theta"):
        if key in hcfg:
            check(key, hcfg[key], NEOX_ROTARY[key])
    # rope_parameters.partial_rotary_factor alone (no rotary_pct) is accepted: it is what transformers 5.x itself
    # writes for GPTNeoXConfig(rotary_pct=1.0) (5.25 checked: save_pretrained keeps only rope_parameters, and a
    # re-save of a depthlab export drops rotary_pct / rotary_emb_base), and 5.x builds depthlab's full rotary from it.
    # transformers 4.x ignores rope_parameters and would rotate a quarter of each head of such a folder; refusing it
    # would refuse every full-rotary GPT-NeoX that 5.x saved. depthlab's own export writes both spellings
    # (NEOX_ROTARY, tested), so its folders load alike under 4.x and 5.x.
    if not fraction_given:
        wrong.append((f"no rotary_pct nor rope_parameters.partial_rotary_factor (GPTNeoXConfig's default: "
                      f"{_NEOX_DEFAULT_ROTARY} of each head rotated)",
                      "rotary_pct 1.0 and rope_parameters.partial_rotary_factor 1.0"))
    if wrong:
        raise DepthlabError(f"{init_from_flag(src)}: its config.json has {' and '.join(h for h, _ in wrong)}, but "
                            f"depthlab's position rope GPT is a GPT-NeoX with {' and '.join(w for _, w in wrong)} (as "
                            "depthlab export writes it), so these weights would compute another function; start from "
                            "a depthlab export (an edited one: export its run again, depthlab export RUN FOLDER "
                            "--overwrite)")


def init_record(src: Path, digest: Optional[str] = None, vouched: Optional[bool] = None) -> dict[str, Any]:
    """What ``--init-from src`` loaded (config.json ``resolved.init_from``): the weights file's absolute path and
    sha256, and for a run's ``best.safetensors`` the step and val loss its manifest records for those bytes (None
    when it cannot say; a Hugging Face export has neither). ``digest``: the file's sha256 when the caller has it,
    ``vouched``: whether it passed :func:`~depthlab.checkpoint.unchecked_best` (each found here when None)."""
    src = Path(src)
    run = (src / CKPT_DIR).is_dir()
    path = src / CKPT_DIR / "best.safetensors" if run else src / "model.safetensors"
    digest = digest or sha256_file(path)
    step = val = None
    if run:
        try:  # the entry of best the load checked (unchecked_best): a damaged step entry leaves it intact
            if vouched is None:
                vouched = unchecked_best(src, digest) is None
            best = json.loads((src / CKPT_DIR / "manifest.json").read_text())["best"] if vouched else None
        except (DepthlabError, OSError, ValueError, KeyError, TypeError):
            best = None
        if isinstance(best, dict) and (best.get("files") or {}).get("best.safetensors") == digest:
            step, val = best.get("step"), best.get("val_loss")
    return {"source": str(src.resolve()), "path": str(path.resolve()), "sha256": digest,
            "kind": "run" if run else "export", "step": step, "val_loss": val}


def init_line(record: dict[str, Any], src: str) -> str:
    """The console line of a run started ``--init-from src`` (its :func:`init_record`)."""
    file = Path(src) / Path(record["path"]).relative_to(record["source"])
    at = [f"step {record['step']}"] if record.get("step") is not None else []
    at += [f"val {record['val_loss']:.4f} nats"] if isinstance(record.get("val_loss"), (int, float)) else []
    where = f" ({', '.join(at)})" if at else ""
    return (f"init-from: {file}{where}: the model starts from these weights; optimizer state, step count and "
            "learning-rate schedule start fresh (step 0)")


def kept_init_record(old_config: dict) -> dict[str, Any]:
    """``{"init_from": record}`` from a run's config.json ``resolved`` (a resume keeps it), or {} when it has none."""
    init = init_from_record(old_config)
    return {"init_from": init} if init is not None else {}


def changed_source(src: Path, source: Optional[str]) -> str:
    """Why the weights of ``--init-from src`` (a run of ``source``, named again on the command line) may not fit:
    the file changed since that run copied it (config.json ``resolved.source_sha256``), with the fix, as a
    parenthesis to add to the refusal; "" when that is not the case (or cannot be told)."""
    config = RunDir(src).config if (Path(src) / CONFIG).is_file() else None
    if not source or not isinstance(config, dict) or (config.get("model") or {}).get("source") != source:
        return ""
    drift = source_drift(source, (config.get("resolved") or {}).get("source_sha256"))
    if drift is None:
        return ""
    return (f" ({drift[0]} changed since {src} copied it: drop --model.source {source} to start from that run's own "
            "copy, the code its weights were trained with)")


def _saved_shapes(model: torch.nn.Module) -> tuple[dict[str, tuple], set[str]]:
    """Names and shapes of ``model``'s weights (a tied weight once, under its first name, as
    :func:`weights_bytes` stores them), and the names of its tied repeats."""
    shapes: dict[str, tuple] = {}
    tied: set[str] = set()
    seen: set[int] = set()
    for k, v in clean_state_dict(model.state_dict(keep_vars=True)).items():
        if id(v) in seen:
            tied.add(k)
            continue
        seen.add(id(v))
        shapes[k] = tuple(v.shape)
    return shapes, tied


def weights_fit(old: dict, new: dict) -> Optional[bool]:
    """Whether ``--init-from`` loads the weights of a run whose config.json model section is ``old`` into a model
    of section ``new`` (the names and shapes :func:`load_into` checks), built on the meta device (no memory).

    Returns:
        True or False; None when it cannot be told (a ``model.source`` model, or a section that does not build).
    """
    from .model import GPT

    if old.get("source") or new.get("source"):
        return None
    try:
        with torch.device("meta"):
            theirs, _ = _saved_shapes(GPT(ModelConfig(**old)))
            ours, tied = _saved_shapes(GPT(ModelConfig(**{**new, "vocab_size": old.get("vocab_size")})))
    except Exception:  # noqa: BLE001 - a field this depthlab cannot build: the caller says what it can
        return None
    return all(k in theirs or k in tied for k in ours) and all(ours.get(k) == s for k, s in theirs.items())


def source_model(src: Path) -> tuple[dict[str, Any], str]:
    """The model section of what ``--init-from src`` loads, and what it is (``the source run``, ``the export``): a
    run's config.json, an export's depthlab.json, else the shape and ``position`` its Hugging Face config.json
    gives (GPT-2's or GPT-NeoX's names); {} if none.

    Raises:
        DepthlabError: a run whose config.json is missing or edited (:func:`_run_model`), or an export whose two
            configs disagree (:func:`_refuse_two_models`).
    """
    src = Path(src)
    if (src / CKPT_DIR).is_dir():
        return _run_model(src), "the source run"

    def read(name: str) -> dict:
        try:
            d = json.loads((src / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return d if isinstance(d, dict) else {}

    h = read("config.json")
    if hf_layout.hf_family(str(h.get("model_type"))) is not None:  # null keys would be dropped below
        _refuse_faulty_config(src, h, _export_model(src))
    shape = hf_layout.from_hf_config(h)  # the inverse of what export writes into config.json
    model = (read("depthlab.json").get("config") or {}).get("model")
    if isinstance(model, dict) and model:
        model = predating_model(model)
        _refuse_two_models(src, model, shape, h.get("tie_word_embeddings"))
        return model, "the export"
    return shape, "the export"


def _run_model(src: Path) -> dict[str, Any]:
    """The model section of run ``src``'s config.json (a run from before model.position: a learned table), which
    the new run takes, checked against the model its ``checkpoints/best.safetensors`` records in its metadata (the
    weights ``--init-from`` loads; ``sample`` and ``export`` read the model from there too).

    A config.json deleted, unreadable, or edited to a model those weights do not fit (another shape or position, or a
    value depthlab does not know, such as ``"position": "bogus"``) is refused here, naming the file: later the
    weights would be said not to fit, or the value blamed on the ``--model`` flag it is passed as. Fields whose
    edit leaves the weights fitting (a dropout) are the file's, as a ``--model`` flag's would be.

    Returns:
        The model section; {} when neither file says anything (the weights' fit then says what it can).

    Raises:
        DepthlabError: config.json missing, unreadable or without a model section, or edited as above, while
            best.safetensors records the model: names the path, the fields and the values to put back.
    """
    path, best = src / CONFIG, src / CKPT_DIR / "best.safetensors"
    try:
        recorded = json.loads(read_metadata(best)["config"])["model"]
    except (KeyError, TypeError, ValueError):  # no best, or not depthlab's: nothing to check against
        recorded = None
    recorded = predating_model(recorded) if isinstance(recorded, dict) and recorded else None
    try:
        config, problem = json.loads(path.read_text(encoding="utf-8")), None
    except FileNotFoundError:
        config, problem = None, "is missing"
    except ValueError:
        config, problem = None, "is not JSON"
    except OSError:
        config, problem = None, "cannot be read"
    model = config.get("model") if isinstance(config, dict) else None
    if problem is None and not isinstance(model, dict):
        problem = "has no model section"
    if problem is not None:
        if recorded is None:
            return {}
        raise DepthlabError(f"{init_from_flag(src)}: {path} {problem}; the new run takes its model from it (the one "
                            f"{CKPT_DIR}/best.safetensors was trained as): restore it from a copy of the run")
    model = predating_model(model)
    if recorded is None or recorded.get("source") or model.get("source"):
        return model  # a model.source model's fields do not say which weights it has
    keys = [*recorded, *(k for k in model if k not in recorded)]
    edited = [k for k in keys if k != "vocab_size" and model.get(k) != recorded.get(k)
              and weights_fit(recorded, {**recorded, k: model.get(k)}) is not True]
    if edited:
        said = ", ".join(f"model.{k} {json.dumps(model[k])}" if k in model else f"no model.{k}" for k in edited)
        was = ", ".join(f"model.{k} {json.dumps(recorded.get(k))}" for k in edited)
        raise DepthlabError(f"{init_from_flag(src)}: its config.json says {said}, but its {CKPT_DIR}/best.safetensors "
                            f"was trained with {was} (config.json edited?), and the new run takes its model from "
                            f"config.json, which these weights do not fit: set {was} in {path} again, or restore the "
                            "file from a copy of the run")
    return model


def _refuse_two_models(src: Path, model: dict, shape: dict, tied: Any) -> None:
    """An export whose ``config.json`` (the model transformers builds from the folder) and ``depthlab.json`` (the one
    ``--init-from`` builds) describe different models, e.g. one file edited by hand: refused, since the weights would
    be read as a model that the folder's own config does not describe.

    Raises:
        DepthlabError: naming each field that differs and the two fixes.
    """
    said = [f"model.{k} {v!r} in config.json, {model[k]!r} in depthlab.json" for k, v in shape.items()
            if k in model and model[k] != v]
    if isinstance(tied, bool) and isinstance(model.get("tie_weights"), bool) and tied != model["tie_weights"]:
        said.append(f"tie_word_embeddings {str(tied).lower()} in config.json, model.tie_weights "
                    f"{str(model['tie_weights']).lower()} in depthlab.json")
    if said:
        raise DepthlabError(f"{init_from_flag(src)}: its config.json and depthlab.json describe different models "
                            f"({'; '.join(said)}; edited by hand?): export the run again into that folder "
                            "(depthlab export RUN FOLDER --overwrite), or delete depthlab.json to load the model "
                            "config.json describes")
