"""What the trainer needs of a model, and the optional extras only depthlab's own GPT has.

The protocol is the one of DESIGN.md ("The user's own model"): ``forward(idx)`` with ``idx`` (B, T)
int64 token ids returns logits (B, T, V), or a tuple holding them (its first tensor of 2+ dimensions). The
loss is the mean cross-entropy in nats per target token. depthlab's :class:`~depthlab.model.GPT` computes
that loss itself (``forward(idx, targets)``), which the trainer uses so its numbers stay bit-identical;
its attention path and the blocks Muon updates are extras asked for through this module only.

A model whose ``forward`` takes ``targets`` (nanoGPT, minGPT) is called as ``forward(idx, targets)``:
nanoGPT returns the logits of the last position only without targets (a generation shortcut). The
loss is still computed here from the logits it returns, never taken from the model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..model import GPT
from ..errors import DepthlabError
from ..usermodel import forward_fault, full_logits, takes_targets

__all__ = ["ModelPort"]


class ModelPort:
    """The trainer's view of one model.

    Args:
        raw: the model, unwrapped (no DDP, no torch.compile).
    """

    def __init__(self, raw: torch.nn.Module):
        self.raw = raw
        self.native = isinstance(raw, GPT)
        self.takes_targets = takes_targets(raw)

    def logits(self, model: torch.nn.Module, x: torch.Tensor, y=None) -> torch.Tensor:
        """Logits (B, T, V) of every position of ``model`` (``raw`` or a wrapper of it) on ``x`` (B, T).

        ``y``: the targets to pass a forward that takes them (zeros when not given).
        """
        return full_logits(model, x, y, with_targets=self.native or self.takes_targets)

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy (0-d, nats/token) of ``model`` (``raw`` or a wrapper of it) on ``x``, ``y`` (B, T)."""
        if self.native:
            return model(x, y)[1]
        try:
            logits = self.logits(model, x, y)
        except DepthlabError:
            raise
        except Exception as e:  # noqa: BLE001 - the user's forward: its error is theirs, in one line
            raise DepthlabError(f"the model's forward failed on idx of shape {tuple(x.shape)}: "
                                f"{forward_fault(self.raw, e)}{_under_autocast(x)}") from None
        if logits.dim() != 3 or logits.shape[:2] != x.shape:  # a .view(B, -1, C) of the same size: read wrongly
            raise DepthlabError(f"the model's forward returned logits of shape {tuple(logits.shape)} for idx of shape "
                                f"{tuple(x.shape)}, not ({x.size(0)}, {x.size(1)}, V): if it has a batch size or "
                                "length written into its code, make it accept any (depthlab check PATH.py:NAME on its "
                                "file tests other batch sizes)")
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))

    def set_attention(self, explicit: bool) -> None:
        """depthlab's GPT: choose the explicit matmul + softmax attention path (else SDPA); others: no-op."""
        if self.native:
            for blk in self.raw.transformer.h:
                blk.attn.explicit = explicit

    def hidden_matrices(self) -> list[torch.nn.Parameter]:
        """The 2-D weights Muon updates: those inside the transformer blocks.

        depthlab's GPT: every 2-D parameter of ``transformer.h``. Another model: every 2-D parameter
        that is not an embedding table or the output head (the last 2-D parameter with V rows).
        """
        if self.native:
            return [p for p in self.raw.transformer.h.parameters() if p.requires_grad and p.dim() == 2]
        emb = {id(m.weight) for m in self.raw.modules() if isinstance(m, torch.nn.Embedding)}
        mats = [p for p in self.raw.parameters() if p.requires_grad and p.dim() == 2 and id(p) not in emb]
        return mats[:-1] if mats else mats

    def num_params(self) -> int:
        """Parameters of the model (depthlab's GPT: without the position embedding, as nanoGPT counts)."""
        if self.native:
            return self.raw.num_params()
        return sum(p.numel() for p in self.raw.parameters())


def _under_autocast(x: torch.Tensor) -> str:
    """The clause that says a failing forward ran under bf16 autocast, and the way out ('' outside it).

    A forward that works in float32 can fail there (a float32 tensor it builds met by ``torch.lerp``): without
    this the user sees a dtype error with no word of the autocast train.dtype chose, nor of --train.dtype float32.
    """
    if not torch.is_autocast_enabled(x.device.type):
        return ""
    return ("; it ran under bf16 autocast (train.dtype auto or bfloat16): make the tensor that line builds follow "
            "the activations (dtype=x.dtype), or train with --train.dtype float32 (depthlab check's bf16 rule "
            "tests this)")

