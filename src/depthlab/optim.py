"""Optimizers of the training loop: AdamW (torch's), or Muon for the blocks' matrices with AdamW for the rest.

Muon (Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks",
https://kellerjordan.github.io/posts/muon/) replaces each 2-D weight's momentum update by its
nearest semi-orthogonal matrix (a quintic Newton-Schulz iteration), so every direction of the
update moves at the same rate. Embeddings, the LM head, norm gains and biases stay with AdamW,
as in that post. ``torch.optim.Muon`` computes the iteration in bfloat16, which a CPU without
native bf16 (AVX-512 BF16 / AMX) emulates at ~1 GFLOP/s: a step of the default recipe took ~0.4 s
instead of ~0.1 s. :class:`Muon` here runs it in float32, or in bfloat16 where the run trains in bf16
(the dtype measured faster on this machine: native bf16 matmuls), on the matrices' small Gram matrices
(:func:`gram_newton_schulz`, the same iteration in fewer matmuls), and otherwise follows torch's definition
(same momentum, Nesterov form, coefficients, decoupled weight decay, and the ``match_rms_adamw``
learning-rate adjustment of Liu et al. 2025, "Muon is Scalable for LLM Training").
"""

from __future__ import annotations

import math
from typing import Iterable, Optional

import torch

__all__ = ["NS_COEFFICIENTS", "NS_RESTART", "gram_newton_schulz", "newton_schulz", "Muon", "MuonAdamW"]

#: Quintic Newton-Schulz coefficients (a, b, c) of Jordan et al. 2024 (torch.optim.Muon's default).
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
#: Iteration before which :func:`gram_newton_schulz` recomputes its Gram matrix from the iterate when it
#: runs in bfloat16 (the restart of Dao lab's Gram Newton-Schulz, 2026, and DeepSpeed's GramMuon:
#: iteration 2 of 5). A float32 iteration needs none: without it its error stays ~1e-4 of the result
#: (test), far below bf16's rounding, and on a CPU that iterates in float32 (no native bf16: FLOPs are
#: what costs) the restart's two extra products with the m x n matrix are ~12 % of the iteration.
NS_RESTART = 2


def newton_schulz(g: torch.Tensor, steps: int = 5, eps: float = 1e-7,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Approximately orthogonalise a matrix: U S' V^T for g = U S V^T, S' in about [0.6, 1.3].

    The iteration as Jordan et al. define it, on the matrix itself: the reference that
    :func:`gram_newton_schulz` (what :class:`Muon` runs) is tested against.

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


def gram_newton_schulz(stacks: list[torch.Tensor], steps: int = 5, eps: float = 1e-7,
                       dtype: torch.dtype = torch.float32, restart: Optional[int] = None) -> list[torch.Tensor]:
    """:func:`newton_schulz` of every matrix in ``stacks``, iterated on their small Gram matrices.

    For a tall X (m x n, m >= n; a wide one is iterated as its transpose, a view) one step is
    X <- X P with P = a I + b G + c G^2 and G = X^T X. Every P is a polynomial in the first G, so the
    iteration can run on the n x n matrices alone: G <- G P^2, Q <- Q P, and X0 Q at the end
    (Gram Newton-Schulz, Dao lab 2026, https://tridao.me/blog/2026/gram-newton-schulz/). In exact
    arithmetic it is the same iteration (test: float64). In bfloat16 the drifting G lets errors grow,
    even blow up for ill-conditioned inputs; as in that work the iterate is rebuilt once, X <- X Q and
    G = X^T X before iteration ``restart``, which keeps the bf16 error at the standard iteration's level.
    Matrices whose small side agrees (every block matrix of a GPT: n_embd) iterate as one batch of
    n x n matrices. Per matrix, 4 products with the m x n matrix (two Gram matrices, the restart's and
    the final X Q) instead of the standard iteration's 10; at nanoGPT's CPU shape a Muon step makes 30
    matmul calls instead of 60 (torch.profiler), which matters as much: bf16 matmuls cost ~25 us per call
    whatever their size on the AMX Xeon measured (README, issue 24).

    Args:
        stacks: (k, A, B) stacks, any float dtype; each matrix is normalised and iterated on its own.
        steps, eps: as :func:`newton_schulz`. dtype: the iteration's dtype (float32 or bfloat16).
        restart: iteration (0-based) before which the iterate is rebuilt; 0 or >= steps: never;
            None: :data:`NS_RESTART` below float32 (bfloat16, float16), never in float32 or float64.

    Returns:
        One tensor per stack, its shape, in ``dtype`` (a wide stack's result is a transposed view).
    """
    if restart is None:
        restart = NS_RESTART if torch.finfo(dtype).bits < 32 else 0
    xs = []
    for g in stacks:
        x = g.float()
        scale = x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
        x = torch.div(x, scale, out=torch.empty(x.shape, dtype=dtype, device=x.device))
        xs.append(x if x.size(-2) >= x.size(-1) else x.mT)
    by_side: dict[int, list[int]] = {}
    for i, x in enumerate(xs):
        by_side.setdefault(x.size(-1), []).append(i)
    for idx in by_side.values():
        for i, y in zip(idx, _gram_iterate([xs[i] for i in idx], steps, restart)):
            xs[i] = y
    return [x if g.size(-2) >= g.size(-1) else x.mT for x, g in zip(xs, stacks)]


def _gram_iterate(xs: list[torch.Tensor], steps: int, restart: int) -> list[torch.Tensor]:
    """The Gram iteration of tall (k_i, m_i, n) stacks sharing their small side n: their results, same shapes."""
    a, b, c = NS_COEFFICIENTS
    sizes = [x.size(0) for x in xs]
    n, dtype, device = xs[0].size(-1), xs[0].dtype, xs[0].device

    def grams() -> torch.Tensor:  # (sum k_i, n, n): each X^T X written into its slice
        out = torch.empty(sum(sizes), n, n, dtype=dtype, device=device)
        for x, o in zip(xs, out.split(sizes)):
            torch.bmm(x.mT, x, out=o)
        return out

    gram, q = grams(), None
    for i in range(steps):
        if 0 < i == restart:  # rebuild the iterate and its Gram matrix from it (bf16 stability)
            xs = [torch.bmm(x, qi) for x, qi in zip(xs, q.split(sizes))]
            gram, q = grams(), None
        p = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)  # b G + c G^2
        p.diagonal(dim1=-2, dim2=-1).add_(a)  # + a I
        q = p if q is None else torch.bmm(q, p)  # all polynomials in one G: they commute
        if i + 1 < steps and i + 1 != restart:
            gram = torch.bmm(torch.bmm(gram, p), p)  # (X P)^T (X P) = P G P = G P^2
    return [torch.bmm(x, qi) for x, qi in zip(xs, q.split(sizes))]


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
        self._stacks: dict[tuple, tuple] = {}  # (group, shape) -> (params, momentum stack, its per-parameter views)
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                                      ns_steps=ns_steps))
        for group in self.param_groups:
            for p in group["params"]:
                if p.dim() != 2:
                    raise ValueError(f"Muon updates 2-D weights only, got a parameter of shape {tuple(p.shape)}")

    def _momentum_stack(self, key: tuple, ps: list) -> torch.Tensor:
        """The (k, A, B) momentum buffer of the parameters ``ps`` (one param group's of one shape: ``key``), made
        once and reused.

        Each parameter's ``state["momentum_buffer"]`` is a view of the stack, so ``state_dict`` and
        ``load_state_dict`` see torch's per-parameter layout; a state loaded since (new tensors, not the
        views) or another set of parameters with gradients is stacked again from those entries.
        """
        hit = self._stacks.get(key)
        if (hit is not None and len(hit[0]) == len(ps) and all(a is b for a, b in zip(hit[0], ps))
                and all(self.state[p].get("momentum_buffer") is v for p, v in zip(ps, hit[2]))):
            return hit[1]
        bufs = [self.state[p].get("momentum_buffer") for p in ps]
        stack = torch.stack([torch.zeros_like(p) if b is None else b for b, p in zip(bufs, ps)])
        views = list(stack.unbind(0))
        for p, v in zip(ps, views):
            self.state[p]["momentum_buffer"] = v
        self._stacks[key] = (list(ps), stack, views)
        return stack

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter with a gradient (``closure`` is not supported: None).

        Parameters of one shape form one (k, A, B) stack, and every stack is orthogonalised in one
        :func:`gram_newton_schulz` call (the same numbers as :func:`newton_schulz` one matrix at a time, up
        to rounding; each matrix is normalised and iterated on its own): at nanoGPT's CPU shape the
        iteration's arithmetic is ~60 % of the model's, and the Gram form does it in fewer, batched
        matmuls. Measured on a 2-core Xeon with AMX (bf16, 8 alternated rounds of 40 steps): the whole
        training step 27.9 -> 25.4 ms at nanoGPT's CPU shape (1.10x), 49.1 -> 47.9 ms at the default shape.
        The momentum of a stack is one tensor too (:meth:`_momentum_stack`): its update is two ops, not two
        per matrix, which matters at that shape, where each op on a CPU costs ~10-30 us whatever its size:
        Muon.step of its 16 matrices 13.8 -> 12.9 ms (bf16) and 18.5 -> 17.0 ms (float32), medians of 300
        interleaved steps on a 2-core Zen 4 EPYC with another process running (the same numbers bit for bit).
        """
        for gi, group in enumerate(self.param_groups):
            lr, wd, mu = group["lr"], group["weight_decay"], group["momentum"]
            by_shape: dict[tuple, list] = {}
            for p in group["params"]:
                if p.grad is not None:
                    by_shape.setdefault(tuple(p.shape), []).append(p)
            stacks = []
            for shape, ps in by_shape.items():
                buf = self._momentum_stack((gi, shape), ps)
                grads = torch.stack([p.grad for p in ps])  # a copy: the Nesterov update below may write it
                buf.mul_(mu).add_(grads)
                stacks.append(grads.add_(buf, alpha=mu) if group["nesterov"] else buf)
                torch._foreach_mul_(ps, _f32(1.0 - lr * wd))
            orthos = gram_newton_schulz(stacks, group["ns_steps"], dtype=self.ns_dtype) if stacks else []
            for ps, ortho in zip(by_shape.values(), orthos):
                scale = 0.2 * math.sqrt(max(ps[0].shape))
                # a bf16 update is cast to the weights' dtype in one op, then added
                torch._foreach_add_(ps, ortho.to(ps[0].dtype).unbind(0), alpha=_f32(-lr * scale))
        return None


_F32_MAX = torch.finfo(torch.float32).max


def _f32(x: float) -> float:
    """``x`` within float32's range: a rate of 1e300 (the user's choice, as AdamW takes it) makes inf weights and the
    run stops at its non-finite loss, instead of torch refusing the scalar ("cannot be converted to type float
    without overflow")."""
    return min(max(x, -_F32_MAX), _F32_MAX)


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
