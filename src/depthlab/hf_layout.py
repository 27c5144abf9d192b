"""Hugging Face's GPT weight layouts: which of its classes computes a depthlab model's function, and the
mapping of weights between the two (export writes it, ``--init-from`` a Hugging Face checkpoint reads it).

Three classes: ``GPT2LMHeadModel`` and ``OpenAIGPTLMHeadModel`` keep depthlab's (GPT-2's) block names but store
every Linear as ``Conv1D`` (weight transposed); ``GPTNeoXForCausalLM`` renames every module, keeps
``nn.Linear``'s (out, in) weights, and interleaves its fused q/k/v projection per head (:func:`neox_qkv`).
Their ``config.json`` names depthlab's shape fields in their own words: one table (:data:`HF_CONFIG_KEYS`), which
export writes with (:func:`to_hf_config`) and ``--init-from`` reads back with (:func:`from_hf_config`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import torch

from .config import ModelConfig
from .errors import DepthlabError

__all__ = ["CONV1D", "HF_CONFIG_KEYS", "HF_FAMILIES", "from_hf_config", "from_hf_state_dict", "hf_config_faults",
           "hf_config_values", "hf_family", "neox_qkv", "to_hf_config", "to_hf_state_dict"]

_GPT2_BLOCK = ("transformer.h.", {})  # GPT-2 and OpenAI GPT name a block's modules as depthlab does

#: depthlab (variant, norm, position) -> the Hugging Face ``model_type`` that computes the same function, and how
#: its weights are named and stored:
#:
#: * ``names``: depthlab name prefix outside the blocks -> the class's (None: the class has no such weight);
#: * ``block``: (the class's prefix of block ``i``'s names, without ``i``; depthlab module -> its own name);
#: * ``conv1d``: Linear weights stored (in, out) (:data:`CONV1D`); ``qkv_per_head``: :func:`neox_qkv`;
#: * ``bias_always``: whether every Linear has a bias (zeros for ``bias: false``), else only the MLP's
#:   (GPT-NeoX's ``attention_bias`` follows depthlab's ``bias``; its LayerNorms and MLP always have one);
#: * ``head_file``: the head's name in ``model.safetensors`` when it differs from the class's ``lm_head``;
#: * ``ignore``: name endings of buffers some transformers versions saved (causal masks, rotary frequencies);
#: * ``act_key``: the ``config.json`` key of the MLP's activation, and ``act_default`` what the class takes when the
#:   file has none (GPT-2's is the tanh GELU ``gelu_new``, OpenAI GPT's ``gelu`` the tanh form too, GPT-NeoX's the
#:   exact ``gelu``); ``act_computed``: the values depthlab computes exactly (OpenAI GPT's ``gelu`` is not one).
HF_FAMILIES: dict[tuple[str, str, str], dict[str, Any]] = {
    ("prenorm", "layernorm", "learned"): {
        "model_type": "gpt2", "names": {}, "block": _GPT2_BLOCK, "conv1d": True, "qkv_per_head": False,
        "bias_always": True, "head_file": None, "ignore": (".attn.bias", ".attn.masked_bias"),
        "act_key": "activation_function", "act_default": "gelu_new", "act_computed": ("gelu", "relu")},
    ("postnorm", "layernorm", "learned"): {
        "model_type": "openai-gpt", "names": {"transformer.wte.": "transformer.tokens_embed.",
                                              "transformer.wpe.": "transformer.positions_embed.",
                                              "transformer.ln_f.": None},
        "block": _GPT2_BLOCK, "conv1d": True, "qkv_per_head": False, "bias_always": True, "head_file": None,
        "ignore": (".attn.bias", ".attn.masked_bias"), "act_key": "afn", "act_default": "gelu",
        "act_computed": ("relu",)},
    # transformers' GPTNeoXForCausalLM (modeling_gpt_neox.py): GPTNeoXLayer with use_parallel_residual=False is
    # x + attn(input_layernorm(x)), then + mlp(post_attention_layernorm(.)); rotate_half = depthlab's pairing
    ("prenorm", "layernorm", "rope"): {
        "model_type": "gpt_neox", "names": {"transformer.wte.": "gpt_neox.embed_in.", "transformer.wpe.": None,
                                            "transformer.ln_f.": "gpt_neox.final_layer_norm."},
        "block": ("gpt_neox.layers.", {"ln_1.": "input_layernorm.", "ln_2.": "post_attention_layernorm.",
                                       "attn.c_attn.": "attention.query_key_value.", "attn.c_proj.": "attention.dense.",
                                       "mlp.c_fc.": "mlp.dense_h_to_4h.", "mlp.c_proj.": "mlp.dense_4h_to_h."}),
        "conv1d": False, "qkv_per_head": True, "bias_always": False, "head_file": "embed_out.weight",
        "ignore": (".attention.bias", ".attention.masked_bias", ".rotary_emb.inv_freq"),
        "act_key": "hidden_act", "act_default": "gelu", "act_computed": ("gelu", "relu")},
}

#: The depthlab model fields a Hugging Face ``config.json`` names, and each class's name for them: the one table that
#: export writes (:func:`to_hf_config`) and ``--init-from`` reads back (:func:`from_hf_config`). Rows are
#: (depthlab field, ``gpt2``'s key, ``openai-gpt``'s, ``gpt_neox``'s); None: that class has no such key. ``ff_mult``
#: is stored as the MLP's width, ``ff_mult * n_embd`` (OpenAI GPT's MLP is always 4 x n_embd: no key).
HF_CONFIG_KEYS: tuple[tuple[str, Optional[str], Optional[str], Optional[str]], ...] = (
    ("n_layer", "n_layer", "n_layer", "num_hidden_layers"),
    ("n_head", "n_head", "n_head", "num_attention_heads"),
    ("n_embd", "n_embd", "n_embd", "hidden_size"),
    ("block_size", "n_positions", "n_positions", "max_position_embeddings"),
    ("vocab_size", "vocab_size", "vocab_size", "vocab_size"),
    ("ff_mult", "n_inner", None, "intermediate_size"),
)

#: The ``model_type`` of each key column of :data:`HF_CONFIG_KEYS`, in order.
_KEY_COLUMNS = ("gpt2", "openai-gpt", "gpt_neox")


def _config_keys(model_type: str) -> dict[str, str]:
    """depthlab field -> ``model_type``'s config key (:data:`HF_CONFIG_KEYS`), for the keys that class has."""
    col = _KEY_COLUMNS.index(model_type) + 1
    return {row[0]: row[col] for row in HF_CONFIG_KEYS if row[col] is not None}


def to_hf_config(cfg: ModelConfig, model_type: str) -> dict[str, int]:
    """The keyword arguments of ``model_type``'s ``transformers`` config class that give ``cfg``'s shape
    (:data:`HF_CONFIG_KEYS`; ``ff_mult`` as the MLP width ``ff_mult * n_embd``).

    Args:
        cfg: the depthlab model. model_type: one of ``gpt2``, ``openai-gpt``, ``gpt_neox``.
    """
    return hf_config_values({f: getattr(cfg, f) for f, _ in _config_keys(model_type).items()}, model_type)


def hf_config_values(model: dict[str, Any], model_type: str) -> dict[str, Any]:
    """:func:`to_hf_config` of a model section as a dict (a run's or an export's ``depthlab.json``): the
    ``config.json`` values export writes for it, for the fields the dict has (``ff_mult`` needs ``n_embd`` too)."""
    out: dict[str, Any] = {}
    for field, key in _config_keys(model_type).items():
        if field == "ff_mult" and isinstance(model.get("ff_mult"), int) and isinstance(model.get("n_embd"), int):
            out[key] = model["ff_mult"] * model["n_embd"]
        elif field != "ff_mult" and field in model:
            out[key] = model[field]
    return out


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def hf_config_faults(h: dict[str, Any]) -> list[tuple[str, str, str]]:
    """What in a Hugging Face ``config.json`` (as a dict, of a :data:`HF_FAMILIES` ``model_type``) builds no model
    depthlab can load the weights into, though the file parses: a shape key (:data:`HF_CONFIG_KEYS`) absent, null or
    not a whole number above 0 (transformers would take its class's default, e.g. 44 layers for GPT-NeoX, or fail;
    :func:`from_hf_config` would drop it and depthlab take its own); an MLP width that is no whole multiple of the
    width (depthlab's ``ff_mult`` is a whole number); a ``tie_word_embeddings`` that is not true or false.
    GPT-2's ``n_inner`` may be null: GPT2Config reads it as 4 x ``n_embd``, as depthlab's default ff_mult.

    Returns:
        (key, what the file has, what it needs) for each fault, in the table's order; [] when none.
    """
    keys = _config_keys(h["model_type"])
    faults: list[tuple[str, str, str]] = []
    for field, key in keys.items():
        v = h.get(key)
        if field == "ff_mult" and key == "n_inner" and v is None:
            continue
        said = json.dumps(v) if key in h else "nothing"
        if not _whole(v):
            faults.append((key, said, "a whole number above 0"))
        elif field == "ff_mult" and _whole(h.get(keys["n_embd"])) and v % h[keys["n_embd"]]:
            faults.append((key, said, f"a whole multiple of {keys['n_embd']} {h[keys['n_embd']]} (depthlab's "
                                      "model.ff_mult times the width)"))
    if "tie_word_embeddings" in h and not isinstance(h["tie_word_embeddings"], bool):
        faults.append(("tie_word_embeddings", json.dumps(h["tie_word_embeddings"]), "true or false"))
    return faults


def from_hf_config(h: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`to_hf_config`: the depthlab model fields a Hugging Face ``config.json`` (as a dict) gives:
    its shape, read with the names of its ``model_type`` (any other model_type with GPT-2's, which ``--init-from``
    then refuses), and the ``position`` its class computes (:func:`hf_family`: GPT-2's learned table or GPT-NeoX's
    rotation). Absent or null keys are left out; ``ff_mult`` = the MLP width // ``n_embd`` when both are ints
    (``n_embd`` non-zero). Values are as the file has them (unchecked)."""
    model_type = h.get("model_type")
    family = hf_family(str(model_type))
    keys = _config_keys(model_type if model_type in _KEY_COLUMNS else "gpt2")
    shape = {field: h.get(key) for field, key in keys.items() if field != "ff_mult"}
    shape["position"] = family[2] if family else None
    inner, n_embd = h.get(keys.get("ff_mult", "")), shape.get("n_embd")
    if isinstance(inner, int) and isinstance(n_embd, int) and n_embd:
        shape["ff_mult"] = inner // n_embd
    return {k: v for k, v in shape.items() if v is not None}


#: Linear layers stored by Hugging Face's GPT-2 classes as ``Conv1D`` (weight (in, out) = ``nn.Linear``'s transposed).
CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")

#: depthlab's attention Linear layers, whose GPT-NeoX twins have a bias only when ``attention_bias`` is true.
_ATTN = (".attn.c_attn.", ".attn.c_proj.")


def hf_family(model_type: str) -> Optional[tuple[str, str, str]]:
    """The depthlab (variant, norm, position) whose function a Hugging Face ``model_type`` computes, or None."""
    return next((k for k, v in HF_FAMILIES.items() if v["model_type"] == model_type), None)


def _family(cfg: ModelConfig) -> dict[str, Any]:
    return HF_FAMILIES[(cfg.variant, cfg.norm, cfg.position)]


def _rename(name: str, fam: dict[str, Any], to_hf: bool) -> Optional[str]:
    """``name`` in the other layout (``to_hf``: depthlab -> Hugging Face), or None: the other has no such weight."""
    top = fam["names"] if to_hf else {b: a for a, b in fam["names"].items() if b is not None}
    for a, b in top.items():
        if name.startswith(a):
            return None if b is None else b + name[len(a):]
    hf_blocks, modules = fam["block"]
    src, dst = ("transformer.h.", hf_blocks) if to_hf else (hf_blocks, "transformer.h.")
    if not name.startswith(src):
        return name  # lm_head.weight, and GPT-2's own transformer.wte./wpe./ln_f.
    i, rest = name[len(src):].split(".", 1)
    for a, b in (modules if to_hf else {b: a for a, b in modules.items()}).items():
        if rest.startswith(a):
            rest = b + rest[len(a):]
            break
    return f"{dst}{i}.{rest}"


def neox_qkv(v: torch.Tensor, n_head: int, to_hf: bool) -> torch.Tensor:
    """depthlab's fused q/k/v rows <-> GPT-NeoX's (``to_hf``: depthlab -> GPT-NeoX; False: the inverse).

    depthlab's ``attn.c_attn`` output (3C rows) is [q of heads 0..nh-1 | k of ... | v of ...] (it splits at C,
    then views each part as (nh, hs)). ``GPTNeoXAttention.forward`` views ``query_key_value``'s output as
    (B, T, nh, 3 * hs) and chunks the last dim into q, k, v: per head [q_h | k_h | v_h]. Row r = (part, head, j)
    in depthlab's order is row (head, part, j) in GPT-NeoX's.

    Args:
        v: the weight (3C, C) or bias (3C,) in the source layout.
        n_head: nh (hs = C / nh).

    Returns:
        The same rows permuted, same shape, contiguous.
    """
    rest = v.shape[1:]
    hs = v.shape[0] // (3 * n_head)
    split = (3, n_head, hs) if to_hf else (n_head, 3, hs)
    return v.reshape(*split, *rest).transpose(0, 1).reshape(v.shape).contiguous()


def to_hf_state_dict(sd: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """depthlab weights -> the state dict of the :data:`HF_FAMILIES` class of ``cfg`` (names as the class's
    ``state_dict`` in transformers 5.x: GPT-NeoX's head is ``lm_head`` there, ``embed_out`` in 4.x, and
    :func:`depthlab.export.build_hf_model` moves it to the name the model has; ``save_pretrained`` of either
    writes it as ``embed_out``).

    Conv1D weights (GPT-2, OpenAI GPT) are the transposes of ``nn.Linear``'s; GPT-NeoX's q/k/v rows are
    regrouped per head (:func:`neox_qkv`). Biases absent in depthlab (``bias: false``) are zeros there (Conv1D,
    and the LayerNorms of all three, always have one; GPT-NeoX's MLP too, its attention only with
    ``attention_bias``); a tied head is left to the class's tying.

    Args:
        sd: depthlab state dict (prefix-stripped), weights (out, in).
        cfg: its model config; (variant, norm, position) must be a key of :data:`HF_FAMILIES`.

    Returns:
        Hugging Face names -> contiguous tensors.
    """
    fam = _family(cfg)
    sd = dict(sd)
    if cfg.tie_weights:
        sd.pop("lm_head.weight", None)
    if not cfg.bias:  # zeros where depthlab has no bias, in depthlab's layout (bias size = rows of the weight)
        for k, v in list(sd.items()):
            in_blocks = k.startswith("transformer.h.") and k.endswith(".weight")
            if (in_blocks or k == "transformer.ln_f.weight") and (fam["bias_always"] or not any(a in k for a in _ATTN)):
                sd.setdefault(k[: -len("weight")] + "bias", torch.zeros(v.shape[0], dtype=v.dtype))
    out: dict[str, torch.Tensor] = {}
    for k, v in sd.items():
        name = _rename(k, fam, to_hf=True)
        if name is None:
            continue  # OpenAI GPT's ln_f is nn.Identity here: nothing is stored under it anyway
        if fam["conv1d"] and any(f".{c}.weight" in k for c in CONV1D):
            v = v.t()
        if fam["qkv_per_head"] and ".attn.c_attn." in k:
            v = neox_qkv(v, cfg.n_head, to_hf=True)
        out[name] = v.contiguous()
    return out


def from_hf_state_dict(hf: dict[str, torch.Tensor], cfg: ModelConfig, source: Path) -> dict[str, torch.Tensor]:
    """Inverse of :func:`to_hf_state_dict`: Hugging Face weights (as ``model.safetensors`` holds them) ->
    depthlab's names and layout.

    Args:
        hf: the state dict of a GPT-2, OpenAI GPT or GPT-NeoX checkpoint (``model.safetensors``).
        cfg: the depthlab model to load into (decides the family, whether biases are kept and the head is tied).
        source: the folder, for error messages.

    Returns:
        depthlab state dict for :func:`load_into`.

    Raises:
        DepthlabError: a non-zero bias for a ``bias: false`` model, or a separate head for a tied one.
    """
    fam = _family(cfg)
    out: dict[str, torch.Tensor] = {}
    for k, v in hf.items():
        if k.endswith(fam["ignore"]):
            continue
        name = "lm_head.weight" if k == fam["head_file"] else _rename(k, fam, to_hf=False)
        if fam["conv1d"] and any(f".{c}.weight" in name for c in CONV1D):
            v = v.t()
        if fam["qkv_per_head"] and ".attn.c_attn." in name:
            v = neox_qkv(v, cfg.n_head, to_hf=False)
        if name.endswith(".bias") and not cfg.bias:
            if torch.count_nonzero(v):
                raise DepthlabError(f"--init-from {source}: {k} is not zero but model.bias is false; "
                                    "use --model.bias true")
            continue
        out[name] = v.contiguous()
    if "lm_head.weight" in out and cfg.tie_weights:
        if not torch.equal(out["lm_head.weight"], out["transformer.wte.weight"]):
            raise DepthlabError(f"--init-from {source}: its output head is not tied to the token embedding; "
                                "use --model.tie_weights false")
        del out["lm_head.weight"]
    if "lm_head.weight" not in out and not cfg.tie_weights and "transformer.wte.weight" in out:
        out["lm_head.weight"] = out["transformer.wte.weight"].clone()  # a tied export into an untied model
    return out
