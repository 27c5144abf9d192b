"""Where a trained model's tanh and sigmoid are saturated: overfit_batch's evidence when a model stops learning.

A tanh (or sigmoid) whose inputs have grown large outputs +-1 (0 or 1) whatever they are, and passes
almost no gradient: the layers before it stop learning and the information it carried is lost. DyT
(``weight * tanh(alpha * x) + bias``, Zhu et al. 2025, depthlab's ``--model.norm dyt``) in place of a norm does
this when the residual stream grows during training: measured on depthlab's 2-block DyT GPT (64 wide, GPT-2
init, stream RMS ~0.03 at the start), overfit_batch's AdamW at lr 3e-3 grows the stream to RMS ~20 in 30 steps
and every DyT after the first block saturates (all values |alpha x| > 2); the loss then sits at the batch's
unigram level for 1,000+ steps.

Every call of ``torch.tanh`` / ``Tensor.tanh`` / ``F.tanh`` / ``torch.sigmoid`` / ``Tensor.sigmoid`` /
``F.sigmoid`` during one forward is seen (a :class:`~torch.overrides.TorchFunctionMode`), and named by the
innermost module whose forward made it. Activations computed inside torch's own kernels (GELU's tanh form) are
not calls of these functions and are not seen.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

__all__ = ["saturated_sites", "describe_sites", "SATURATED", "SATURATED_SHARE"]

SATURATED = 0.99
"""A tanh output beyond +-this (|input| > 2.65), a sigmoid output below 1 - this or above it (|input| > 4.6), is
saturated: its gradient is below 2% of the gradient at 0."""
SATURATED_SHARE = 0.9
"""A call site is named when at least this share of its outputs is saturated."""

_TANH = {torch.tanh, torch.Tensor.tanh, torch.nn.functional.tanh}
_SIGMOID = {torch.sigmoid, torch.Tensor.sigmoid, torch.nn.functional.sigmoid}


class _Watch(TorchFunctionMode):
    """Counts saturated outputs of tanh / sigmoid per innermost module (``stack`` holds the modules' names)."""

    def __init__(self, stack: list[str]):
        super().__init__()
        self.stack = stack
        self.seen: dict[tuple[str, str], list[int]] = {}  # (module, function) -> [saturated, total]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        kind = "tanh" if func in _TANH else "sigmoid" if func in _SIGMOID else None
        if kind and isinstance(out, torch.Tensor) and out.is_floating_point() and out.numel():
            with torch.no_grad():
                o = out.detach().float()
                sat = (o.abs() > SATURATED) if kind == "tanh" else ((o > SATURATED) | (o < 1 - SATURATED))
                n = self.seen.setdefault((self.stack[-1] if self.stack else "", kind), [0, 0])
                n[0] += int(sat.sum())
                n[1] += o.numel()
        return out


def saturated_sites(model: nn.Module, forward) -> list[dict]:
    """Run ``forward()`` (a call of ``model``, no gradient needed) and return the tanh / sigmoid call sites with at
    least :data:`SATURATED_SHARE` of their outputs saturated, in the order first seen: ``{"module": dotted name
    ("" = the model's own forward), "class": its class, "function": "tanh" | "sigmoid", "saturated": share}``.
    An exception from ``forward`` propagates."""
    names = {m: n for n, m in model.named_modules()}
    stack: list[str] = []

    def enter(mod: nn.Module, args) -> None:  # a hook's non-None return value would replace the input or output
        stack.append(names[mod])

    def leave(mod: nn.Module, args, out) -> None:
        if stack:
            stack.pop()

    handles = [h for m in names for h in (m.register_forward_pre_hook(enter), m.register_forward_hook(leave))]
    watch = _Watch(stack)
    try:
        with torch.no_grad(), watch:
            forward()
    finally:
        for h in handles:
            h.remove()
    classes = {n: type(m).__name__ for m, n in names.items()}
    return [{"module": mod, "class": classes.get(mod, ""), "function": kind, "saturated": s / t}
            for (mod, kind), (s, t) in watch.seen.items() if t and s / t >= SATURATED_SHARE]


def describe_sites(sites: list[dict], limit: int = 4) -> Optional[str]:
    """``the tanh of transformer.h.1.ln_2 (DyT, 98% of its outputs), ...`` (None when there are none)."""
    if not sites:
        return None
    parts = [f"the {s['function']} of {s['module'] or 'the forward'} ({s['class']}, {s['saturated']:.0%} of its "
             "outputs)" for s in sites[:limit]]
    more = f" and {len(sites) - limit} more" if len(sites) > limit else ""
    return ", ".join(parts) + more
