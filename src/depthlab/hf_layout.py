"""Hugging Face's GPT weight layout: which of its classes computes a depthlab model's function, and the
mapping of weights between the two (export writes it, ``--init-from`` a Hugging Face checkpoint reads it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from .config import ModelConfig
from .errors import DepthlabError

__all__ = ["CONV1D", "HF_FAMILIES", "from_hf_state_dict", "hf_family", "to_hf_state_dict"]

#: depthlab (variant, norm) -> the Hugging Face ``model_type`` that computes the same function, and the
#: name of its token / position embeddings and of its final norm (None: the class has none).
HF_FAMILIES = {
    ("prenorm", "layernorm"): {"model_type": "gpt2", "wte": "wte", "wpe": "wpe", "ln_f": "ln_f"},
    ("postnorm", "layernorm"): {"model_type": "openai-gpt", "wte": "tokens_embed", "wpe": "positions_embed",
                                "ln_f": None},
}

#: Linear layers stored by Hugging Face's GPT classes as ``Conv1D`` (weight (in, out) = ``nn.Linear``'s transposed).
CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")


def hf_family(model_type: str) -> Optional[tuple[str, str]]:
    """The depthlab (variant, norm) whose function a Hugging Face ``model_type`` computes, or None."""
    return next((k for k, v in HF_FAMILIES.items() if v["model_type"] == model_type), None)


def to_hf_state_dict(sd: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """depthlab weights -> the state dict of the matching Hugging Face ``*LMHeadModel``.

    Conv1D weights are the transposes of ``nn.Linear``'s; biases absent in depthlab (``bias: false``) are
    zeros there (Conv1D and GPT-2's LayerNorm always have one); a tied head is left to the class's tying.

    Args:
        sd: depthlab state dict (prefix-stripped), weights (out, in).
        cfg: its model config; (variant, norm) must be a key of :data:`HF_FAMILIES`.

    Returns:
        Hugging Face names -> contiguous float tensors.
    """
    fam = HF_FAMILIES[(cfg.variant, cfg.norm)]
    out: dict[str, torch.Tensor] = {}
    for k, v in sd.items():
        if k == "lm_head.weight":
            if not cfg.tie_weights:
                out[k] = v
            continue
        name = k.replace("transformer.wte.", f"transformer.{fam['wte']}.").replace(
            "transformer.wpe.", f"transformer.{fam['wpe']}.")
        if any(f".{c}.weight" in k for c in CONV1D):
            v = v.t()
        out[name] = v.contiguous()
    if not cfg.bias:  # zero biases where depthlab has none
        for k in list(out):
            if k.endswith(".weight") and k.startswith("transformer.") and not k.startswith(
                    (f"transformer.{fam['wte']}.", f"transformer.{fam['wpe']}.")):
                # Conv1D weight (in, out) and norm weight (C,): the bias has the last dim's size
                out.setdefault(k[: -len("weight")] + "bias", torch.zeros(out[k].shape[-1], dtype=out[k].dtype))
    return out


def from_hf_state_dict(hf: dict[str, torch.Tensor], cfg: ModelConfig, source: Path) -> dict[str, torch.Tensor]:
    """Inverse of :func:`to_hf_state_dict`: Hugging Face GPT weights -> depthlab's names and layout.

    Args:
        hf: the state dict of a Hugging Face GPT-2 / OpenAI-GPT checkpoint (``model.safetensors``).
        cfg: the depthlab model to load into (decides whether biases are kept and the head is tied).
        source: the file, for error messages.

    Returns:
        depthlab state dict for :func:`load_into`.

    Raises:
        DepthlabError: a non-zero bias for a ``bias: false`` model, or a separate head for a tied one.
    """
    fam = HF_FAMILIES[(cfg.variant, cfg.norm)]
    out: dict[str, torch.Tensor] = {}
    for k, v in hf.items():
        if k.endswith((".attn.bias", ".attn.masked_bias")):
            continue  # causal-mask buffers of older transformers versions
        name = k.replace(f"transformer.{fam['wte']}.", "transformer.wte.").replace(
            f"transformer.{fam['wpe']}.", "transformer.wpe.")
        if any(f".{c}.weight" in k for c in CONV1D):
            v = v.t()
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
