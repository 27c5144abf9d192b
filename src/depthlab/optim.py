"""Optimizers of the training loop: AdamW (torch's), or Muon for the blocks' matrices with AdamW for the rest.

Muon (Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks",
https://kellerjordan.github.io/posts/muon/) replaces each 2-D weight's momentum update by its
nearest semi-orthogonal matrix (a quintic Newton-Schulz iteration), so every direction of the
update moves at the same rate. Embeddings, the LM head, norm gains and biases stay with AdamW,
as in that post. ``torch.optim.Muon`` computes the iteration in bfloat16, which a CPU without
native bf16 (AVX-512 BF16 / AMX) emulates at ~1 GFLOP/s: a step of the default recipe took ~0.4 s
instead of ~0.1 s. :class:`Muon` here runs it in float32, or in bfloat16 where the run trains in bf16
(the dtype measured faster on this machine: native bf16 matmuls), and otherwise follows torch's definition
(same momentum, Nesterov form, coefficients, decoupled weight decay, and the ``match_rms_adamw``
learning-rate adjustment of Liu et al. 2025, "Muon is Scalable for LLM Training").
"""

from __future__ import annotations

import math
from typing import Iterable

import torch

__all__ = ["NS_COEFFICIENTS", "newton_schulz", "Muon", "MuonAdamW"]

#: Quintic Newton-Schulz coefficients (a, b, c) of Jordan et al. 2024 (torch.optim.Muon's default).
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def newton_schulz(g: torch.Tensor, steps: int = 5, eps: float = 1e-7,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Approximately orthogonalise a matrix: U S' V^T for g = U S V^T, S' in about [0.6, 1.3].

    The band holds for singular values down to ~1/10 of the largest (test); much smaller ones are
    raised less in 5 steps (Jordan et al. 2024 describe S' ~ Uniform(0.5, 1.5)).

    Args:
        g: (A, B) matrix or (k, A, B) stack of k matrices (each orthogonalised on its own), any float dtype.
        steps: iterations of X <- a X + (b X X^T + c (X X^T)^2) X (Jordan et al. 2024).
        eps: guards the initial division by the Frobenius norm (which bounds the spectral norm by 1).
        dtype: the iteration's dtype: float32, or bfloat16 as in Jordan et al.'s and torch's Muon (only
            where the CPU or GPU has native bf16 matmuls; emulated bf16 is ~100x slower).

    Returns:
        ``g``'s shape, in ``dtype``.
    """
    a, b, c = NS_COEFFICIENTS
    x = g.float()
    # Normalised straight into the iteration's dtype (one pass); the norm is taken in float32 either way.
    scale = x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    x = torch.div(x, scale, out=torch.empty(x.shape, dtype=dtype, device=x.device))
    # A tall matrix iterates as itself with the Gram matrix X^T X (the smaller one) on the other side:
    # the same iteration as on X^T, without a transposed copy (matmuls read transposed operands as they are).
    tall = x.size(-2) > x.size(-1)
    mm = torch.baddbmm if x.dim() == 3 else torch.addmm
    for _ in range(steps):
        gram = x.mT @ x if tall else x @ x.mT
        poly = mm(gram, gram, gram, beta=b, alpha=c)
        x = mm(x, x, poly, beta=a) if tall else mm(x, poly, x, beta=a)
    return x


class Muon(torch.optim.Optimizer):
    """Muon over 2-D parameters, Newton-Schulz in float32 (or bfloat16 where that is the faster dtype).

    Per parameter W (A x B) with gradient G: M <- mu M + G; U = G + mu M (Nesterov) or M;
    W <- W (1 - lr * wd); W <- W - lr * 0.2 * sqrt(max(A, B)) * NS(U). The factor 0.2 sqrt(max(A, B))
    gives the update the RMS of a typical AdamW update (Liu et al. 2025), so ``lr`` is on AdamW's scale.

    Args:
        params: 2-D tensors (or param groups of them).
        lr: learning rate (the trainer sets it every step).
        weight_decay: decoupled weight decay (multiplied by lr).
        momentum: mu. nesterov: use the Nesterov form. ns_steps: Newton-Schulz iterations.
        ns_dtype: the iteration's dtype (:func:`newton_schulz`); the attribute ``ns_dtype`` may be changed
            between steps (:func:`depthlab.training.optimization.set_update_precision`).

    Raises:
        ValueError: a parameter that is not 2-D.
    """

    def __init__(self, params: Iterable, lr: float = 1e-2, weight_decay: float = 0.1, momentum: float = 0.95,
                 nesterov: bool = True, ns_steps: int = 5, ns_dtype: torch.dtype = torch.float32):
        self.ns_dtype = ns_dtype
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                                      ns_steps=ns_steps))
        for group in self.param_groups:
            for p in group["params"]:
                if p.dim() != 2:
                    raise ValueError(f"Muon updates 2-D weights only, got a parameter of shape {tuple(p.shape)}")

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter with a gradient (``closure`` is not supported: None).

        Parameters of one shape are orthogonalised as one (k, A, B) stack: the same numbers as one at a
        time (each matrix is normalised and iterated on its own), in a few larger matmuls instead of many
        small ones (at nanoGPT's CPU shape the iteration's arithmetic is ~60 % of the model's). A matrix
        and its transpose are stacked apart, each iterated in its own orientation (no transposed copies);
        the whole training step measured the same as with them stacked together (nanoGPT's CPU shape, bf16,
        Zen 5, 8 alternated rounds: 1.02x, within the noise).
        """
        for group in self.param_groups:
            lr, wd, mu = group["lr"], group["weight_decay"], group["momentum"]
            by_shape: dict[tuple, list] = {}
            for p in group["params"]:
                if p.grad is not None:
                    by_shape.setdefault(tuple(p.shape), []).append(p)
            for ps in by_shape.values():
                grads = [p.grad for p in ps]
                bufs = []
                for p in ps:
                    state = self.state[p]
                    if "momentum_buffer" not in state:
                        state["momentum_buffer"] = torch.zeros_like(p.grad)
                    bufs.append(state["momentum_buffer"])
                torch._foreach_mul_(bufs, mu)
                torch._foreach_add_(bufs, grads)
                updates = torch._foreach_add(grads, bufs, alpha=mu) if group["nesterov"] else bufs
                torch._foreach_mul_(ps, 1.0 - lr * wd)
                ortho = newton_schulz(torch.stack(updates), group["ns_steps"], dtype=self.ns_dtype)
                scale = 0.2 * math.sqrt(max(ps[0].shape))
                for p, o in zip(ps, ortho.unbind(0)):  # a bf16 update is added in the weight's dtype
                    p.add_(o, alpha=-lr * scale)
        return None


class MuonAdamW:
    """Muon for the transformer blocks' 2-D weights, AdamW for everything else, stepped as one optimizer.

    Exposes what the trainer uses of an optimizer: ``param_groups`` (Muon's first, each marked
    ``"muon": True``), ``step``, ``zero_grad``, ``state_dict``/``load_state_dict`` and ``defaults``.

    Args:
        muon: a :class:`Muon`. adamw: a ``torch.optim.AdamW`` over the other parameters.
    """

    def __init__(self, muon: Muon, adamw: torch.optim.AdamW):
        self.muon, self.adamw = muon, adamw
        for g in muon.param_groups:
            g["muon"] = True
        self.param_groups = muon.param_groups + adamw.param_groups
        self.defaults = {"fused": False}  # no found_inf: non-finite steps are checked on the host

    def step(self) -> None:
        """Step both optimizers."""
        self.muon.step()
        self.adamw.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's gradient."""
        self.muon.zero_grad(set_to_none=set_to_none)
        self.adamw.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        """``{"muon": ..., "adamw": ...}``: both optimizers' states (tensors and numbers only)."""
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output.

        Raises:
            ValueError: the state is not a Muon + AdamW state (e.g. a checkpoint of an AdamW run).
        """
        if set(state) != {"muon", "adamw"}:
            raise ValueError("the checkpoint's optimizer state is not a Muon + AdamW state")
        self.muon.load_state_dict(state["muon"])
        self.adamw.load_state_dict(state["adamw"])
        for g in self.muon.param_groups:
            g["muon"] = True
        self.param_groups = self.muon.param_groups + self.adamw.param_groups
