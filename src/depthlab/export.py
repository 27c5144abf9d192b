"""Hugging Face export: a run's weights and tokenizer as a directory ``transformers`` loads without depthlab.

``depthlab export RUN_DIR OUT_DIR`` writes::

    config.json              GPT2Config (prenorm + layernorm), OpenAIGPTConfig (postnorm + layernorm + relu)
                             or GPTNeoXConfig (prenorm + layernorm + position rope)
    model.safetensors        the weights (GPT-2's Conv1D = the transpose of nn.Linear; GPT-NeoX's q/k/v rows
                             regrouped per head; zero biases where bias: false)
    tokenizer.json           a ``tokenizers`` tokenizer whose ids are exactly depthlab's
    tokenizer_config.json    PreTrainedTokenizerFast, no clean-up of spaces, model_max_length = block_size
    special_tokens_map.json  BPE runs: <|endoftext|> as bos/eos; char runs: none
    generation_config.json   bos/eos ids, the same as config.json's
    depthlab.json            provenance: the run's config, checkpoint, step and val loss; the tokenizer's rules

Special tokens have one truth (:func:`special_ids`), written alike into ``config.json``,
``generation_config.json``, ``tokenizer_config.json`` and ``special_tokens_map.json``: a BPE run's
``<|endoftext|>`` (id 0) is bos and eos; a char run has no such token, so every file says none
(``null``, or absent): generation runs for ``max_new_tokens`` as in ``depthlab sample``, and a tool
that reads ``config.json`` does not stop at a newline.

Text is encoded as depthlab encodes it, or refused:

* char runs: a character outside the run's vocabulary has no id, and the exported tokenizer raises
  (``Unk token `<...>` not found in the vocabulary``: its unknown token names the reason) instead of
  dropping it, as ``depthlab sample`` refuses such a prompt; the export says so in one line.
* BPE runs: a ``<|endoftext|>`` typed in the text is its characters, not id 0
  (``"split_special_tokens": true`` in ``tokenizer_config.json``, which ``AutoTokenizer`` reads;
  a bare ``tokenizers.Tokenizer.from_file`` needs ``encode_special_tokens = True``).

Which depthlab models are the same function as a ``transformers`` class (checked by reading their
code, and at every export by comparing logits on random ids):

* ``prenorm`` + ``layernorm`` (``position learned``) = ``GPT2LMHeadModel``: ``activation_function``
  ``gelu`` is the exact erf GELU (``nn.GELU()``; GPT-2's default ``gelu_new`` is the tanh form), or ``relu``;
  ``n_inner = ff_mult * n_embd``; ``layer_norm_epsilon`` 1e-5 = ``nn.LayerNorm``'s; tied or untied head.
* ``prenorm`` + ``layernorm`` + ``position rope`` = ``GPTNeoXForCausalLM`` with ``use_parallel_residual``
  false (x = x + attn(ln1(x)); x = x + mlp(ln2(x)), as ``GPTNeoXLayer`` computes it then) and full rotary:
  ``rope_parameters`` = default type, ``rope_theta`` 10000, ``partial_rotary_factor`` 1.0 (GPT-NeoX's default
  rotates a quarter of each head); ``rotate_half`` pairs coordinates (j, j + hs/2) with inv_freq
  10000^(-2i/hs), as :func:`depthlab.model.apply_rotary` does. ``hidden_act`` ``gelu`` (``GELUActivation`` =
  ``F.gelu``, exact) or ``relu``; ``intermediate_size = ff_mult * n_embd``; ``layer_norm_eps`` 1e-5;
  ``attention_bias`` = ``bias`` (its LayerNorms and MLP always have biases: zeros); tied or untied head
  (``lm_head`` in memory, ``embed_out`` in the file). Unlike depthlab it runs past ``block_size``
  (``max_position_embeddings`` is not a limit for rotary positions): text beyond it is extrapolation.
* ``postnorm`` + ``layernorm`` + ``relu`` + ``ff_mult 4`` (``position learned``) = ``OpenAIGPTLMHeadModel``
  (x = LN(x + S(x)), no final norm). Its ``gelu`` is the tanh approximation and its MLP is always
  4 x n_embd, so a GELU or another ff_mult is refused; its causal mask adds -1e4 instead of -inf (the same
  softmax in float32 unless attention scores reach ~1e4); it has no rotary positions, so rope is refused.
* Every other variant or norm (plain, rezero, deepnorm, periln; rmsnorm, dyt, none), and a branch or
  norm scale (``residual_scale`` / ``norm_scale`` depth: none of the three has either multiplier), and an
  embedding scale (``embed_scale learned``) has no such class and is refused with one line naming the field.

``transformers`` is an optional dependency (``pip install -e ".[hf]"``), imported inside functions.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

from . import checkpoint as ckpt
from . import hf_layout
from .config import SAMPLE_DEFAULTS, ModelConfig
from .tokenizer import EOT, BPETokenizer, CharTokenizer, Tokenizer, control_ids
from .errors import DepthlabError, no_space, no_space_words
from .init_from import NEOX_ROPE, NEOX_ROTARY
from .model import GPT, require_float32_default
from .rundir import RunDir, make_temp_dir, normalise_modes, up_from_missing_error

#: Files an export writes; ``--overwrite`` replaces a folder only if it holds nothing else.
EXPORT_FILES = frozenset({"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                          "special_tokens_map.json", "generation_config.json", "depthlab.json"})

#: Largest |logit difference| between depthlab and the exported model tolerated at export time.
EXPORT_ATOL = 1e-4

def require_transformers():
    """Import and return ``transformers``.

    Raises:
        DepthlabError: not installed (names the ``hf`` extra).
    """
    try:
        import transformers
    except ImportError:
        raise DepthlabError('exporting to Hugging Face needs the transformers package: pip install -e ".[hf]" in '
                            "depthlab's folder (or pip install transformers)") from None
    return transformers


def check_exportable(cfg: ModelConfig) -> dict[str, Any]:
    """The :data:`depthlab.hf_layout.HF_FAMILIES` entry of ``cfg``, after checking it is exactly mappable.

    Raises:
        DepthlabError: one line naming the field that has no equivalent ``transformers`` class.
    """
    if cfg.source:
        raise DepthlabError(f"cannot export a model.source model ({cfg.source}): export maps depthlab's own GPT onto "
                            "transformers' GPT-2 and GPT-NeoX classes, and a model you wrote has no known mapping; its "
                            "weights are the run's checkpoints/*.safetensors (its state_dict, a tied weight stored "
                            "once: load it with safetensors.torch.load_model(model, path))")
    if cfg.variant not in ("prenorm", "postnorm"):
        raise DepthlabError(f"cannot export model.variant {cfg.variant}: no transformers class computes it "
                            "(exportable: prenorm, or postnorm with relu, ff_mult 4 and position learned, both with "
                            "layernorm)")
    if cfg.norm != "layernorm":
        raise DepthlabError(f"cannot export model.norm {cfg.norm}: GPT-2, OpenAI GPT and GPT-NeoX use LayerNorm "
                            "(exportable: model.norm layernorm)")
    for name in ("residual_scale", "norm_scale"):
        if getattr(cfg, name) != 1:
            raise DepthlabError(f"cannot export model.{name} {getattr(cfg, name)}: GPT-2, OpenAI GPT and GPT-NeoX "
                                f"have no multiplier there, so the exported model would compute another function "
                                f"(exportable: model.{name} 1)")
    if cfg.embed_scaled:
        raise DepthlabError(f"cannot export model.embed_scale {cfg.embed_scale}: GPT-2, OpenAI GPT and GPT-NeoX have "
                            "no scalar on the embeddings, so the exported model would compute another function "
                            "(exportable: model.embed_scale none or auto, without dyt)")
    if cfg.variant == "postnorm" and cfg.position != "learned":
        raise DepthlabError(f"cannot export model.position {cfg.position} with postnorm: OpenAI GPT adds a learned "
                            "table of positions and does not rotate queries and keys (exportable: model.position "
                            "learned, or rope with the prenorm variant)")
    if cfg.variant == "postnorm" and cfg.activation != "relu":
        raise DepthlabError(f"cannot export model.activation {cfg.activation} with postnorm: OpenAI GPT's gelu is "
                            "the tanh approximation, not nn.GELU (exportable: relu, or the prenorm variant)")
    if cfg.variant == "postnorm" and cfg.ff_mult != 4:
        raise DepthlabError(f"cannot export model.ff_mult {cfg.ff_mult} with postnorm: OpenAI GPT's MLP is always "
                            "4 x n_embd (exportable: ff_mult 4, or the prenorm variant)")
    return hf_layout.HF_FAMILIES[(cfg.variant, cfg.norm, cfg.position)]


def special_ids(tok: Tokenizer) -> tuple[Optional[int], Optional[int]]:
    """(bos, eos): the one source of every exported file's special-token ids.

    BPE: both are ``<|endoftext|>``. A char vocabulary has no such token (every id is a character
    of the text, the newline too): (None, None), so no file names one and generation runs for
    ``max_new_tokens`` like ``depthlab sample``.
    """
    ids = control_ids(tok)
    return (ids[0], ids[0]) if ids else (None, None)


#: The unknown token of an exported char tokenizer. It is not in the vocabulary (it has no id), so
#: ``tokenizers`` refuses a text with a character outside it, and its error names this reason.
CHAR_UNKNOWN = "<a character outside this char model's vocabulary: it has no id>"


def hf_config(cfg: ModelConfig, bos: Optional[int] = None, eos: Optional[int] = None) -> tuple[Any, Callable]:
    """The ``transformers`` config object and model class of ``cfg`` (``bos``/``eos``: :func:`special_ids`;
    None is written as null, never a default such as GPT-2's 50256).

    Raises:
        DepthlabError: not exportable (see :func:`check_exportable`), or transformers missing.
    """
    fam = check_exportable(cfg)
    tf = require_transformers()
    if fam["model_type"] == "gpt_neox":  # GPTNeoXConfig's own defaults (bos 0, eos 2, rotary on 1/4) are not ours
        neox = tf.GPTNeoXConfig(
            **hf_layout.to_hf_config(cfg, "gpt_neox"), hidden_act=cfg.activation, attention_dropout=cfg.dropout,
            hidden_dropout=cfg.dropout, layer_norm_eps=1e-5, use_parallel_residual=False,
            rope_parameters=dict(NEOX_ROPE),
            attention_bias=cfg.bias, bos_token_id=bos, eos_token_id=eos, tie_word_embeddings=cfg.tie_weights,
            rotary_pct=NEOX_ROTARY["rotary_pct"], rotary_emb_base=NEOX_ROTARY["rotary_emb_base"])
        for key, value in NEOX_ROTARY.items():  # every spelling into the object, so config.json says them all
            setattr(neox, key, value)
        return neox, tf.GPTNeoXForCausalLM
    common = dict(**hf_layout.to_hf_config(cfg, fam["model_type"]), resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout,
                  attn_pdrop=cfg.dropout, layer_norm_epsilon=1e-5, bos_token_id=bos, eos_token_id=eos,
                  tie_word_embeddings=cfg.tie_weights)
    if fam["model_type"] == "gpt2":  # to_hf_config gave n_inner = ff_mult * n_embd
        return tf.GPT2Config(activation_function=cfg.activation, scale_attn_weights=True,
                             scale_attn_by_inverse_layer_idx=False, reorder_and_upcast_attn=False,
                             **common), tf.GPT2LMHeadModel
    return tf.OpenAIGPTConfig(afn="relu", **common), tf.OpenAIGPTLMHeadModel


def hf_tokenizer(tok: Tokenizer):
    """A ``tokenizers.Tokenizer`` with depthlab's ids.

    Char runs: a BPE model without merges over the run's characters (a string splits into its
    characters) and a decoder that joins them; a character absent from the vocabulary is refused
    (its unknown token :data:`CHAR_UNKNOWN` has no id, so ``encode`` raises naming it), never
    dropped. BPE runs: the run's own tokenizer.
    """
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, normalizers

    if isinstance(tok, BPETokenizer):  # the run's own, byte for byte: --init-from an export checks its sha256
        return HFTokenizer.from_str(tok.json)
    t = HFTokenizer(models.BPE({c: i for i, c in enumerate(tok.vocab)}, [], unk_token=CHAR_UNKNOWN))
    t.decoder = decoders.Fuse()
    # line endings as depthlab reads its corpus and a prompt (sample.py): \r\n and \r are \n (the char export
    # refused a CRLF text that depthlab sample takes)
    t.normalizer = normalizers.Sequence([normalizers.Replace("\r\n", "\n"), normalizers.Replace("\r", "\n")])
    return t


def _write_tokenizer(out: Path, tok: Tokenizer, block_size: int) -> None:
    # the bytes Tokenizer.save writes, written by Python: a failed write is an OSError with its errno (a full disk
    # is told apart by it), not tokenizers' plain Exception
    _write_text(out / "tokenizer.json", hf_tokenizer(tok).to_str(pretty=True))
    tc: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
                          "model_max_length": block_size, "add_prefix_space": False}
    if isinstance(tok, BPETokenizer):
        tc["split_special_tokens"] = True  # a typed "<|endoftext|>" is text, as depthlab encodes it
    bos, eos = special_ids(tok)
    special: dict[str, str] = {}
    if bos is not None:  # the same ids as config.json and generation_config.json
        special = {"bos_token": tok.decode([bos]), "eos_token": tok.decode([eos])}
    _write_text(out / "tokenizer_config.json", json.dumps({**tc, **special}, indent=2))
    _write_text(out / "special_tokens_map.json", json.dumps(special, indent=2))


def _write_text(path: Path, text: str) -> None:
    """``path.write_text(text)`` in UTF-8; a failed write names ``path`` (a failed write() names no file)."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        if e.filename is None:
            e.filename = str(path)
        raise


@contextlib.contextmanager
def _no_progress_bar() -> Iterator[None]:
    """transformers' progress bars off (save_pretrained draws "Writing model shards" for one file); restored after."""
    from transformers.utils import logging as tf_logging

    was = tf_logging.is_progress_bar_enabled()
    tf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            tf_logging.enable_progress_bar()


class _WeightsNotWritten(Exception):
    """save_pretrained's write of the weights failed with safetensors' own error (not an OSError)."""

    def __init__(self, name: str, why: str):
        super().__init__(why)
        self.name, self.why = name, why


def _save_weights(hf, out: Path) -> None:
    """``hf.save_pretrained(out)`` (config.json and model.safetensors); a failed write of the weights is
    :class:`_WeightsNotWritten`, naming the file, with the exception's own text as the reason (never read).

    Raises:
        OSError: config.json (or another file Python writes) could not be written.
    """
    from safetensors import SafetensorError

    try:
        hf.save_pretrained(str(out))
    except SafetensorError as e:
        raise _WeightsNotWritten("model.safetensors", f"{type(e).__name__}: {e}") from None


def _write_generation_config(out: Path, bos: Optional[int], eos: Optional[int], max_length: Optional[int]) -> None:
    """generation_config.json: ``depthlab sample``'s defaults (:data:`~depthlab.config.SAMPLE_DEFAULTS`) and
    the special ids of config.json (none for a char run: generation runs for max_new_tokens, as depthlab's).

    ``max_length`` (a learned-position export: its ``block_size``) replaces ``max_new_tokens``: GPT-2's and OpenAI
    GPT's position table has ``block_size`` rows and transformers does not crop the context, so a default
    generation past it failed inside transformers (IndexError in ``wpe``); prompt + new tokens stop there."""
    tf = require_transformers()
    d = SAMPLE_DEFAULTS
    kw = {k: v for k, v in (("bos_token_id", bos), ("eos_token_id", eos), ("top_p", d["top_p"])) if v is not None}
    kw.update({"max_length": max_length} if max_length else {"max_new_tokens": d["max_new_tokens"]})
    tf.GenerationConfig(do_sample=d["temperature"] > 0, temperature=d["temperature"], top_k=d["top_k"],
                        **kw).save_pretrained(str(out))


def head_name(hf: torch.nn.Module) -> str:
    """The name of ``hf``'s output head weight in its own ``state_dict``: the module its
    ``get_output_embeddings()`` returns (``lm_head``; GPT-NeoX's is ``embed_out`` in transformers 4.x).

    Raises:
        ValueError: ``get_output_embeddings()`` returned None or a module that is not one of ``hf``'s named modules
            (a transformers class laid out otherwise), so the head has no name to load depthlab's ``lm_head`` into.
    """
    head = hf.get_output_embeddings()
    name = next((name for name, module in hf.named_modules() if module is head), None) if head is not None else None
    if name is None:
        got = "None" if head is None else f"a {type(head).__name__}"
        raise ValueError(f"{type(hf).__name__}.get_output_embeddings() returned {got}, which is not one of its named "
                         "modules, so its output head has no state_dict name to load depthlab's lm_head.weight into")
    return f"{name}.weight"


def build_hf_model(model: GPT, bos: Optional[int] = None, eos: Optional[int] = None):
    """The ``transformers`` model computing the same function as ``model`` (eval mode, float32);
    ``bos``/``eos`` go into its config (:func:`special_ids`).

    Raises:
        DepthlabError: not exportable, or its logits differ from depthlab's by more than :data:`EXPORT_ATOL`.
    """
    cfg = model.config
    hcfg, klass = hf_config(cfg, bos, eos)
    hf = klass(hcfg).eval()
    try:
        head = head_name(hf)
    except ValueError as e:  # this transformers lays its head out otherwise: one line, not a traceback
        raise DepthlabError(f"export: {e} (transformers {require_transformers().__version__}); nothing was written; "
                            "please report it") from None
    sd = hf_layout.to_hf_state_dict(ckpt.clean_state_dict(model.state_dict()), cfg)
    if "lm_head.weight" in sd:  # GPT-NeoX's head is lm_head in transformers 5.x, embed_out in 4.x
        sd[head] = sd.pop("lm_head.weight")
    missing, unexpected = hf.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if not (k == head and cfg.tie_weights)]
    if missing or unexpected:
        raise DepthlabError(f"export: weights do not map onto {klass.__name__} (missing {missing[:3]}, "
                            f"unexpected {unexpected[:3]}); please report it")
    max_diff = compare_logits(model, hf)
    if not max_diff <= EXPORT_ATOL:
        raise DepthlabError(f"export: {klass.__name__} differs from the depthlab model by {max_diff:.2e} in the "
                            f"logits (tolerance {EXPORT_ATOL:g}); nothing was written; please report it")
    return hf


@torch.no_grad()
def compare_logits(model: GPT, hf, batch: int = 2, seed: int = 0) -> float:
    """Largest |logit difference| of ``model`` and ``hf`` on seeded random ids, shape (batch, block_size)."""
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=g)
    model = model.float().eval()
    return (model(x)[0] - hf(x).logits).abs().max().item()


def _check_out_parents(out: Path) -> None:
    """The folders above OUT_DIR: the nearest one that exists must be a folder this user can write in (the export
    is made there, beside OUT_DIR, and renamed onto it), checked on the paths themselves before any work.

    Raises:
        DepthlabError: one line naming the path above OUT_DIR that is a file (or a symbolic link to nothing), or the
            folder that is not writable, and the fix.
    """
    above = next((p for p in out.parents if os.path.lexists(p)), None)  # nearest first; "." or "/" exist
    if above is None:
        return
    if not above.is_dir():
        what = "a symbolic link to nothing" if above.is_symlink() and not above.exists() else "a file, not a folder"
        raise DepthlabError(f"export: {above} is {what}, so OUT_DIR {out} cannot be made inside it; choose an OUT_DIR "
                            f"that is not inside {above} (e.g. a new folder beside it)")
    if not os.access(above, os.W_OK | os.X_OK):  # read-only file system included (access says EROFS)
        raise DepthlabError(f"export: {above} is not writable by this user (or is on a read-only disk), so OUT_DIR "
                            f"{out} cannot be made there; choose an OUT_DIR in a folder you can write to")


#: Why a folder could not be made, by the OSError's errno (depthlab's words, not the system's message).
_CANNOT_MAKE = {errno.EACCES: "the folder is not writable by this user",
                errno.EPERM: "the folder is not writable by this user", errno.EROFS: "the disk is read-only",
                errno.ENOSPC: "the disk has no room left", errno.EDQUOT: "this user's disk quota is used up",
                errno.ENOTDIR: "a file, not a folder, is in the way",
                errno.EEXIST: "a file, not a folder, is in the way"}


def _make_temp_beside(out: Path) -> tuple[Path, list[Path]]:
    """The temporary folder the export is written into, beside ``out`` (whose missing parents are made), and the
    parents made for it (nearest first: :func:`_remove_made` takes them away again if the export fails).

    Raises:
        DepthlabError: a folder cannot be made there, with the reason its errno gives; nothing is left made.
    """
    made = [p for p in out.parents if not os.path.lexists(p)]
    above = next((p for p in out.parents if os.path.lexists(p)), out.parent)  # the folder the user has
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return make_temp_dir(out.parent, f".{out.name}.tmp-"), made
    except OSError as e:
        _remove_made(made)
        why = _CANNOT_MAKE.get(e.errno or 0, f"the system refused ({errno.errorcode.get(e.errno or 0, 'OSError')})")
        raise DepthlabError(f"export: cannot make OUT_DIR {out} in {above}: {why}; choose an OUT_DIR in a folder you "
                            "can write to") from None


def _remove_made(made: list[Path]) -> None:
    """Remove the (still empty) folders an export made above OUT_DIR, nearest first: a failed export leaves nothing."""
    for p in made:
        try:
            p.rmdir()
        except OSError:
            return  # not made, or not empty: someone else's now


def _check_out_dir(out: Path, overwrite: bool) -> None:
    up = up_from_missing_error(out, "export:")
    if up is not None:
        raise up
    if out.is_symlink():  # the finished folder is renamed onto OUT_DIR: that would replace the link itself
        raise DepthlabError(f"export: {out} is a symbolic link; give the folder itself ({out.resolve()}) or "
                            "another OUT_DIR")
    if out.exists() and not out.is_dir():
        raise DepthlabError(f"export: {out} is a file; choose a folder name for OUT_DIR")
    if out.exists() and any(out.iterdir()):
        # only an earlier export is offered --overwrite: for any other folder it is refused
        foreign = sorted(p.name for p in out.iterdir() if p.name not in EXPORT_FILES or not p.is_file()
                         or p.is_symlink())
        there = RunDir(out)
        if foreign and there.ran and not there.foreign_config:  # a listing would lead with its .lock
            raise DepthlabError(f"export: {out} is a depthlab run directory, not an export directory; choose another "
                                "OUT_DIR (a new or empty folder)")
        if foreign:
            raise DepthlabError(f"export: {out} already exists and is not an export directory (it holds "
                                f"{', '.join(foreign[:5])}); choose another OUT_DIR (a new or empty folder)")
        if not overwrite:
            raise DepthlabError(f"export: {out} already exists and holds an earlier export; choose another OUT_DIR "
                                "(or --overwrite to replace it)")


def _stderr(line: str) -> None:
    print(f"depthlab: export: {line}", file=sys.stderr)


def tokenizer_rules(tok: Tokenizer) -> list[str]:
    """What the exported tokenizer does with text depthlab's own tokenizer would treat otherwise (one line each)."""
    if isinstance(tok, CharTokenizer):
        return [f"the char tokenizer knows the run's {tok.vocab_size} characters; a text with any other "
                "character is refused (tokenizers raises 'Unk token ... not found'), as depthlab sample refuses "
                "such a prompt; no character is dropped", ENDINGS]
    return [f"a {EOT} typed in a text is encoded as its characters, as depthlab encodes it "
            "(split_special_tokens in tokenizer_config.json; with tokenizers alone set encode_special_tokens = True)",
            "the run's own tokenizer, unchanged: a \\r in a text is encoded as its byte, which the run never trained "
            "on (depthlab reads \\r\\n and \\r as \\n: replace them before encoding)"]


ENDINGS = "a \\r\\n or \\r line ending reads as \\n (its normalizer), as depthlab reads its corpus and a prompt"


def _provenance(rd: Path, which: str, path: Path, fallback: Optional[str], meta: dict[str, str]) -> dict[str, Any]:
    """depthlab.json's record of the weights: the run (absolute: the run an --init-from refusal names to export
    again, whatever folder it runs in), the checkpoint asked for, the file read (and why, where best was gone), its
    step, tokenizer and config."""
    config = json.loads(meta["config"])
    written = (config.get("data") or {}).get("path")
    if isinstance(written, str) and written and not Path(written).is_absolute():
        # a checkpoint of before its header's data.path was absolute: the path is relative to the folder training
        # ran in, which config.json (written then) has resolved
        run_path = ((RunDir(rd).config or {}).get("data") or {}).get("path")
        if isinstance(run_path, str) and Path(run_path).is_absolute() and Path(run_path).name == Path(written).name:
            config["data"]["path"] = run_path
    return {"run_dir": str(rd.resolve()), "checkpoint": which, "weights_file": path.name,
            **({"weights_note": fallback} if fallback else {}), "step": int(meta.get("step", -1)),
            "tokenizer": meta.get("tokenizer", "char"), "config": config}


def _weights_to_export(rd: Path, which: str) -> tuple[Path, Optional[str]]:
    """(the weights file of ``which``, the warning of a ``best`` read from a step checkpoint or None): with
    best.safetensors gone, the newest step's weights, which may not be the best, are exported; said on stderr (as
    sample says it) and recorded in depthlab.json."""
    path = ckpt.select_weights(rd, which)
    fallback = ckpt.best_fallback(rd, path) if which == "best" else None
    if fallback:
        print(f"depthlab: warning: {fallback}", file=sys.stderr)
    return path, fallback


def export_run(run_dir: str | Path, out_dir: str | Path, which: str = "best", overwrite: bool = False,
               log: Optional[Callable[[str], None]] = _stderr) -> Path:
    """Write the Hugging Face directory of a run's ``best`` or ``last`` checkpoint.

    Everything is written to a temporary folder beside ``out_dir`` and renamed at the end, so a
    failure leaves nothing (and never touches what ``out_dir`` held).

    Args:
        run_dir: a depthlab run directory.
        out_dir: the folder to create (must not exist or be empty, unless ``overwrite``).
        which: ``best`` or ``last``.
        overwrite: replace an earlier export in ``out_dir``.
        log: told, once written, the tokenizer's rules (:func:`tokenizer_rules`; default: stderr,
            ``depthlab: export: ...``); None = silent. They are in ``depthlab.json`` too.

    Returns:
        ``out_dir``.

    Raises:
        DepthlabError: not a run, no checkpoint, a model with no equivalent ``transformers`` class,
            transformers missing, or ``out_dir`` in the way.
    """
    require_float32_default("export")  # a float64 default wrote float64 weights, twice the size
    rd = RunDir(run_dir).require("checkpoints").path
    out = Path(out_dir)
    _check_out_parents(out)
    _check_out_dir(out, overwrite)
    path, fallback = _weights_to_export(rd, which)
    sd, meta = ckpt.load_weights_file(path)
    cfg = ckpt.model_config_from_meta(meta, path)
    check_exportable(cfg)
    tok = ckpt.load_run_tokenizer(rd, meta, path)
    model = GPT(cfg)
    ckpt.load_into(model, sd, path)
    bos, eos = special_ids(tok)
    hf = build_hf_model(model, bos, eos)
    tmp, made = _make_temp_beside(out)
    old, earlier = None, out.is_dir() and any(out.iterdir())  # an empty folder holds no earlier export
    try:
        with _no_progress_bar():
            _save_weights(hf, tmp)
        _write_generation_config(tmp, bos, eos, cfg.block_size if cfg.position == "learned" else None)
        _write_tokenizer(tmp, tok, cfg.block_size)
        rules = tokenizer_rules(tok)
        info = {**_provenance(rd, which, path, fallback, meta), "tokenizer_rules": rules, "bos_token_id": bos,
                "eos_token_id": eos}
        _write_text(tmp / "depthlab.json", json.dumps(info, indent=2, ensure_ascii=False))
        normalise_modes(tmp)  # save_pretrained writes model.safetensors 0600, the other files 0666 & ~umask
        if out.exists():  # the earlier export moves aside; it comes back if the new one cannot take its place
            old = make_temp_dir(out.parent, f".{out.name}.old-")
            out.rename(old / out.name)
        tmp.rename(out)
    except _WeightsNotWritten as e:  # safetensors' own error: its text says why, depthlab does not read it
        raise DepthlabError(f"export: writing {out / e.name} failed ({e.why}); nothing of {out} was left behind"
                            + (" (the earlier export there is kept)" if earlier else "")
                            + f"; make room on the disk holding {out.parent} (or make that folder writable), or "
                              "choose another OUT_DIR, and export again") from None
    except OSError as e:  # e.g. the disk filled up: the temporary folder goes, an earlier export stays
        kept = " (the earlier export there is kept)" if earlier else ""
        if no_space(e):  # told by errno: the file, the device and the fix
            named = Path(os.fsdecode(e.filename)) if e.filename else None  # the temporary folder's: as in OUT_DIR
            file = out / named.name if named is not None and named.parent == tmp else (named or out)
            raise DepthlabError(f"export: {no_space_words(e, out.parent, file)} (or choose another OUT_DIR) and "
                                f"export again; nothing of {out} was left behind{kept}") from None
        raise DepthlabError(f"export: writing {out} failed: {e.strerror or e}; nothing of it was left behind"
                            + (f"; the earlier export in {out} is kept" if earlier else "")
                            + "; make OUT_DIR and its folder writable (with room on the disk) or choose another "
                              "OUT_DIR") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not out.exists():  # the new export did not arrive: the earlier one goes back
            (old / out.name).rename(out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        if not out.exists():  # the folders made above OUT_DIR go too
            _remove_made(made)
    for line in rules if log else ():
        log(line)
    return out
