"""Activation probes: forward hooks on the model's hook points and the statistics computed from them.

Hooks exist only inside :func:`record_activations` (TransformerLens style): the context manager
registers them and removes every one on exit, even after an exception, so a probed model is the
model it was before.

Statistics (all on detached float32 copies):

* :func:`rms` -- root mean square of a tensor (residual stream or sublayer output).
* :func:`rank_measure` -- relative distance to rank one in [0, 1], ||X - 1 x^T|| / ||X|| with
  ||M||_{1,inf} = sqrt(||M||_1 ||M||_inf) (Dong, Cordonnier & Loukas 2021, "Attention is not all
  you need: pure attention loses rank doubly exponentially with depth", and their code).
* :func:`attention_entropy` -- entropy per head in nats; uniform attention over t visible tokens
  has entropy ln t (:func:`uniform_attention_entropy`).
* :func:`token_cosine` -- mean pairwise cosine similarity of the token vectors of a sequence.
* :func:`dead_fraction` -- fraction of ReLU units that are zero for every token of the batch.

:func:`block_stats` is the one function that runs the hooked forward and computes these per block;
the training callback (:class:`ActivationProbe`), the probe at initialisation
(:func:`depthlab.analytics.probe.probe_at_init`) and the sweep all get their numbers from it.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn

from ..callbacks import Callback, RunView, StepInfo
from ..rundir import RunDir
from ..units import finite_or_none

__all__ = ["record_activations", "rms", "rank_measure", "attention_entropy", "uniform_attention_entropy",
           "token_cosine", "dead_fraction", "block_hook_names", "block_stats", "probe_stats", "ActivationProbe",
           "BLOCK_POINTS"]

BLOCK_POINTS = ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post")


@contextlib.contextmanager
def record_activations(model: nn.Module, names: Sequence[str]) -> Iterator[dict[str, torch.Tensor]]:
    """Record the outputs of the named submodules during forward passes inside the ``with``.

    Args:
        model: any module; ``names`` are ``named_modules`` names
            (``transformer.h.0.hook_resid_post``, ``transformer.h.0.attn.hook_pattern``, ...).
        names: the modules to observe. A hook on an ``attn.hook_pattern`` makes depthlab's
            attention take its explicit path, so the weights (B, nh, T, T) exist.

    Yields:
        A dict name -> detached output of the *last* forward pass (shape as produced).

    Raises:
        KeyError: a name that is not a submodule of ``model`` (no hook is left behind).
    """
    modules = dict(model.named_modules())
    missing = [n for n in names if n not in modules]
    if missing:
        raise KeyError(f"no such module(s): {', '.join(missing)}")
    store: dict[str, torch.Tensor] = {}
    handles = []

    def make(name: str):
        def hook(_mod, _inp, out):
            store[name] = out.detach()
        return hook

    try:
        for n in names:
            handles.append(modules[n].register_forward_hook(make(n)))
        yield store
    finally:
        for h in handles:
            h.remove()


def rms(x: torch.Tensor) -> float:
    """Root mean square sqrt(mean(x^2)) over all elements (same unit as x).

    Computed in float64: in float32 x^2 underflows for |x| < 1e-19 (a collapsed deep stack's stream),
    and with subnormals flushed to zero (``train.flush_denormal``) it would read 0.
    """
    return float(x.detach().double().pow(2).mean().sqrt())


def _composite_norm(m: torch.Tensor) -> torch.Tensor:
    # ||M||_1 = max column abs sum, ||M||_inf = max row abs sum, over the last two dims (T, C)
    a = m.abs()
    n1 = a.sum(dim=-2).amax(dim=-1)
    ninf = a.sum(dim=-1).amax(dim=-1)
    return (n1 * ninf).sqrt()


def rank_measure(x: torch.Tensor) -> float:
    """Relative residual of the best "all tokens equal" approximation, averaged over sequences; in [0, 1].

    Dong et al. (2021) define res(X) = X - 1 x^T with x = argmin_x ||X - 1 x^T||, measured in the
    composite norm ||M||_{1,inf} = sqrt(||M||_1 ||M||_inf) (||M||_1 the largest column abs sum,
    ||M||_inf the largest row abs sum), and their code takes x = xbar, the token mean. In this
    norm the mean is not the minimiser, and ||X - 1 xbar^T|| / ||X|| can exceed 1 (by at most a
    factor 2: one token carrying everything gives sqrt(2) (T - 1) / T, 1.27 at T = 10; a post-LN
    stream at init gives ~1.01). The paper's argmin can never exceed 1, because x = 0 leaves ||X||. So for each
    sequence X (T, C) the measure uses the better of the two candidates, x = xbar (the authors'
    code) and x = 0:

        min(||X - 1 xbar^T||, ||X||) / ||X||  (composite norms)

    which is the authors' number whenever that is <= 1, and 1 ("nothing shared to remove") when
    the token mean is a worse fit than nothing. 0 means every token carries the same vector (rank
    collapse); random tokens give values just below 1.

    Args:
        x: (B, T, C) or (T, C) activations.

    Returns:
        Mean over the batch (dimensionless, in [0, 1]); NaN when T < 2 (undefined: one token is
        trivially "collapsed") or when a sequence is all zeros.
    """
    x = x.detach().double()  # the norms' product underflows float32 for a collapsed stream (see rms)
    if x.dim() == 2:
        x = x.unsqueeze(0)
    if x.size(1) < 2:
        return float("nan")
    res = x - x.mean(dim=1, keepdim=True)
    full = _composite_norm(x)
    return float((torch.minimum(_composite_norm(res), full) / full).mean())


def attention_entropy(pattern: torch.Tensor) -> torch.Tensor:
    """Entropy of each head's attention distribution in nats, averaged over batch and positions.

    H = -sum_j p_ij ln p_ij for query i (0 ln 0 = 0); uniform attention over the t = i + 1
    visible tokens gives ln t.

    Args:
        pattern: attention weights (B, nh, T, T), rows summing to 1 (causal zeros above the diagonal).

    Returns:
        Tensor (nh,) of mean entropies in nats.
    """
    p = pattern.detach().float()
    h = -(p * torch.log(p.clamp_min(1e-30))).sum(dim=-1)  # (B, nh, T); clamp makes 0 ln 0 = 0
    return h.mean(dim=(0, 2))


def uniform_attention_entropy(T: int) -> float:
    """Mean over query positions of ln t, t = 1..T: the entropy of uniform causal attention (nats)."""
    return float(np.mean(np.log(np.arange(1, T + 1)))) if T >= 1 else float("nan")


def token_cosine(x: torch.Tensor) -> float:
    """Mean pairwise cosine similarity between distinct token vectors of each sequence.

    Args:
        x: (B, T, C) or (T, C).

    Returns:
        Mean over pairs i != j and over the batch, in [-1, 1]; 1 means all tokens point the same
        way (collapse). NaN when T < 2.
    """
    x = x.detach().double()
    if x.dim() == 2:
        x = x.unsqueeze(0)
    B, T, _ = x.shape
    if T < 2:
        return float("nan")
    # float64, each vector scaled by its largest entry first: a collapsed plain stack's stream (norm ~1e-17) fell
    # under normalize's eps 1e-12 in float32 and read as cosine 0 ("fully diverse") beside a rank measure of 0.5
    peak = x.abs().amax(dim=-1, keepdim=True)
    x = x / torch.where(peak > 0, peak, torch.ones_like(peak))
    xn = torch.nn.functional.normalize(x, dim=-1)
    g = xn @ xn.transpose(1, 2)  # (B, T, T)
    off = g.sum(dim=(1, 2)) - g.diagonal(dim1=1, dim2=2).sum(dim=1)
    return float((off / (T * (T - 1))).mean())


def dead_fraction(h: torch.Tensor) -> float:
    """Fraction of hidden units that are exactly zero for every token in the batch (dead ReLUs).

    Args:
        h: post-activation hidden values (B, T, H).

    Returns:
        Fraction in [0, 1] of the H units.
    """
    alive = (h.detach().reshape(-1, h.shape[-1]) != 0).any(dim=0)
    return float(1.0 - alive.float().mean())


def block_hook_names(n_layer: int) -> list[str]:
    """The hook points :func:`block_stats` observes, for blocks 0 .. n_layer - 1.

    Per block ``transformer.h.{i}``: ``hook_resid_post``, ``hook_attn_out``, ``hook_mlp_out``
    (each (B, T, C)), ``attn.hook_pattern`` (B, nh, T, T) and ``mlp.hook_post`` (B, T, ff_mult*C).
    """
    names = []
    for i in range(n_layer):
        p = f"transformer.h.{i}"
        names += [f"{p}.hook_resid_post", f"{p}.hook_attn_out", f"{p}.hook_mlp_out",
                  f"{p}.attn.hook_pattern", f"{p}.mlp.hook_post"]
    return names


def _per_block(acts: dict[str, torch.Tensor], n_layer: int, relu: bool) -> dict:
    """The per-block lists of :func:`block_stats` from the recorded hook outputs."""
    out: dict = {"resid_rms": [], "attn_out_rms": [], "mlp_out_rms": [], "attn_entropy": [],
                 "rank_measure": [], "token_cosine": [], "dead_frac": [] if relu else None}
    for i in range(n_layer):
        p = f"transformer.h.{i}"
        r = acts[f"{p}.hook_resid_post"]
        out["resid_rms"].append(rms(r))
        out["attn_out_rms"].append(rms(acts[f"{p}.hook_attn_out"]))
        out["mlp_out_rms"].append(rms(acts[f"{p}.hook_mlp_out"]))
        out["attn_entropy"].append(attention_entropy(acts[f"{p}.attn.hook_pattern"]).tolist())
        out["rank_measure"].append(finite_or_none(rank_measure(r)))
        out["token_cosine"].append(finite_or_none(token_cosine(r)))
        if relu:
            out["dead_frac"].append(dead_fraction(acts[f"{p}.mlp.hook_post"]))
    return out


def block_stats(model: nn.Module, idx: torch.Tensor, targets: Optional[torch.Tensor] = None,
                keep_resid: bool = False) -> dict:
    """Per-block activation statistics of one eval-mode forward: the one place they are computed.

    Used by the training callback (:class:`ActivationProbe`, through :func:`probe_stats`), by the
    probe at initialisation (:func:`depthlab.analytics.probe.probe_at_init`) and so by the sweep.
    Gradient mode is the caller's: under ``torch.no_grad()`` for a pure probe, with grad enabled
    when ``targets`` are given and the caller backpropagates ``"_loss"``. Hooks are removed and the
    model's train/eval mode restored on return, even after an exception.

    Args:
        model: a :class:`depthlab.model.GPT` (unwrapped).
        idx: token ids (B, T).
        targets: next-token ids (B, T); when given, the forward also returns the loss.
        keep_resid: also return the raw ``hook_resid_post`` tensors (B, T, C) under ``"_resid"``.

    Returns:
        The probe-record fields, lists indexed by block: ``resid_rms`` (RMS of the block output,
        ``hook_resid_post``), ``attn_out_rms``, ``mlp_out_rms`` (sublayer outputs), ``attn_entropy``
        ([per head], nats, :func:`attention_entropy`), ``rank_measure`` (Dong et al. 2021, of the
        block output), ``token_cosine`` (None where undefined, e.g. T = 1), ``dead_frac`` (ReLU
        models only, else None); and ``attn_entropy_uniform`` (mean ln t over the T query
        positions, nats), ``rezero_alpha`` ([[alpha_attn, alpha_mlp]] per block, or None). Keys
        starting with ``_`` are not record fields: ``_loss`` (mean cross-entropy in nats, a
        tensor with its graph, or None without ``targets``) and ``_resid`` (with ``keep_resid``).
    """
    blocks = list(model.transformer.h)
    L = len(blocks)
    was_training = model.training
    model.eval()
    try:
        with record_activations(model, block_hook_names(L)) as acts:
            _, loss = model(idx, targets)
    finally:
        model.train(was_training)
    relu = getattr(model.config, "activation", "gelu") == "relu"
    out = _per_block(acts, L, relu)
    out["attn_entropy_uniform"] = uniform_attention_entropy(idx.shape[1])
    if hasattr(blocks[0], "alpha_attn"):
        out["rezero_alpha"] = [[float(b.alpha_attn.detach()), float(b.alpha_mlp.detach())] for b in blocks]
    else:
        out["rezero_alpha"] = None
    out["_loss"] = loss
    if keep_resid:
        out["_resid"] = [acts[f"transformer.h.{i}.hook_resid_post"] for i in range(L)]
    return out


@torch.no_grad()
def probe_stats(model: nn.Module, idx: torch.Tensor, with_resid: bool = False) -> dict:
    """The ``kind: probe`` record fields of :func:`block_stats` on ``idx``, without grad.

    Args:
        model: a :class:`depthlab.model.GPT` (unwrapped).
        idx: token ids (B, T).
        with_resid: also return the raw ``hook_resid_post`` tensors under ``"_resid"``.

    Returns:
        :func:`block_stats`'s dict without ``_loss``. The model's train/eval mode is restored.
    """
    out = block_stats(model, idx, keep_resid=with_resid)
    del out["_loss"]
    return out


class ActivationProbe(Callback):
    """Trainer callback: probe a fixed validation batch at step 0, every ``interval`` steps and at the end.

    The batch is drawn once from its own generator seeded with (train.seed, 2), so probing never
    touches the training batch RNG; the forward runs in eval mode without grad (no dropout, so no
    torch RNG either), hence the training trajectory is bit-identical with or without probes.
    Cost: one forward of ``batch_size`` sequences per ``interval`` steps (the defaults, 8 sequences
    every 250 steps, are far below 1 % of training time).

    Args:
        interval: steps between probes (> 0).
        batch_size: sequences in the probe batch.
        histograms: write TensorBoard histograms of each block's residual stream.

    Attributes:
        batch: the fixed probe batch, token ids (B, T), drawn at train start (None before); set it to
            probe another batch with :meth:`probe`.
    """

    def __init__(self, interval: int, batch_size: int = 8, histograms: bool = True):
        self.interval = int(interval)
        self.batch_size = int(batch_size)
        self.histograms = histograms
        self.batch: Optional[torch.Tensor] = None
        self.last_step: Optional[int] = None

    def on_train_start(self, run: RunView, info: StepInfo) -> None:
        """Draw the fixed probe batch and probe the initial model (unless resuming past step 0)."""
        if not run.is_main:
            return
        from ..data import get_batch

        rng = np.random.default_rng([run.cfg.train.seed, 2])
        x, _ = get_batch(run.corpus.val, run.cfg.model.block_size, self.batch_size, rng, run.device)
        self.batch = x
        if info.step == 0:
            self.probe(run, 0)
        elif any(r.get("step") == info.step for r in RunDir(run.run_dir).metrics("probe")):
            # a resume at a step its records probed already (a finished run's last step, whose final validation or
            # summary.json the resume redoes): the end's probe would write the same record twice
            self.last_step = info.step

    def on_step_end(self, run: RunView, info: StepInfo) -> None:
        """Probe when the step is a multiple of ``interval``."""
        if self.batch is not None and self.interval > 0 and info.step % self.interval == 0:
            self.probe(run, info.step)

    def on_train_end(self, run: RunView, summary: dict) -> None:
        """Probe the final model unless the last step was just probed."""
        if self.batch is not None and self.last_step != summary["final_step"]:
            self.probe(run, summary["final_step"])

    def probe(self, run: RunView, step: int) -> dict:
        """Run the probe now and log a ``kind: probe`` record for ``step``; returns it."""
        st = probe_stats(run.raw_model, self.batch, with_resid=self.histograms)
        resid = st.pop("_resid", None)
        rec = {"step": step, **st}
        tb = {f"act_rms/block_{i}": v for i, v in enumerate(st["resid_rms"])}
        tb.update({f"rank_measure/block_{i}": v for i, v in enumerate(st["rank_measure"]) if v is not None})
        run.metrics.log("probe", rec, tb)
        if resid is not None and getattr(run.metrics, "tb", None) is not None:
            for i, r in enumerate(resid):
                r = r.float().cpu()
                r = r[torch.isfinite(r)]  # a diverged model's NaN/inf would make TensorBoard's histogram raise
                if r.numel():
                    run.metrics.histogram(f"resid/block_{i}", r, step)
        self.last_step = step
        return {"kind": "probe", **rec}
