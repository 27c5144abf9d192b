"""Gradient monitor: per-parameter, per-block and per-component gradient and update statistics.

Works on any ``torch.nn.Module``. Parameters are grouped two ways:

* **blocks**: a parameter whose name contains an integer path segment (``transformer.h.3.attn...``,
  ``layers.7.weight``) belongs to the block named by the prefix up to that segment
  (``transformer.h.3``); blocks are ordered by first appearance. Everything else is a
  *non-block* group named by its module prefix (``transformer.wte``, ``lm_head``).
* **components**: for depthlab's GPT the GPT-2 names map to ``attn.c_attn``, ``attn.c_proj``,
  ``mlp.c_fc``, ``mlp.c_proj``, ``ln`` (every norm, ``ln_f`` included), ``embeddings``
  (``wte``, ``wpe``), ``head`` (``lm_head``, when untied) and ``alpha`` (ReZero gains). For any
  other model the component is the module path inside the block (or the module prefix).

All norms are computed with ``torch._foreach_norm`` and stacked into one tensor, so a logged
step costs one host sync (one ``.tolist()``), whatever the number of parameters.

Identities the tests check: per-parameter mean |grad| equals ``p.grad.abs().mean()`` exactly,
and sqrt(sum of block norms^2 + non-block norms^2) equals the global L2 gradient norm (the one
``torch.nn.utils.clip_grad_norm_`` reports).

The update/weight ratio ||delta theta|| / ||theta|| (theta before the step), per block, takes every
parameter of the block together: its matrices, and its norm gains and biases, whose norm (sqrt(2 C)
for two LayerNorms' gains of ones) can outweigh the small-init matrices' and barely moves. So it reads
below the per-matrix "update to data ratio" std(lr * grad) / std(theta) of Karpathy's *makemore*
lectures (about 3x below it for a 2 x 64 AdamW model at step 3: 0.035 against 0.11); the lr rules'
thresholds (:class:`~depthlab.analytics.rules.Thresholds`) are set on this measure.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Optional

import torch
import torch.nn as nn

from ..callbacks import Callback, RunView, StepInfo

__all__ = ["GradientMonitor", "GradStats", "GradientLogger", "param_component", "format_table"]

_INT_SEGMENT = re.compile(r"^((?:.*?\.)?\d+)\.(.+)$")
_GPT_COMPONENTS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")


def param_component(name: str) -> tuple[Optional[str], str]:
    """Split a parameter name into (block prefix or None, component).

    Args:
        name: a ``named_parameters`` name, e.g. ``transformer.h.3.attn.c_attn.weight``.

    Returns:
        ``("transformer.h.3", "attn.c_attn")`` for a block parameter, ``(None, "embeddings")``
        for ``transformer.wte.weight``; for unknown models the component is the module path
        without the trailing parameter attribute (``layers.2.fc.weight`` -> ``("layers.2", "fc")``), and
        ``block`` for the weight and bias of a block that is itself a layer (``layers.2.weight`` of a list of Linear
        layers: it was named ``weight``, pooling every block's weights under one name and their biases under
        ``bias``); a block's other own parameter keeps its name (``h.3.alpha`` -> ``alpha``).
    """
    m = _INT_SEGMENT.match(name)
    block, rest = (m.group(1), m.group(2)) if m else (None, name)
    module = rest.rsplit(".", 1)[0] if "." in rest else rest
    for comp in _GPT_COMPONENTS:
        if module == comp:
            return block, comp
    leaf = module.rsplit(".", 1)[-1]
    if leaf.startswith("ln_") or leaf in ("ln", "norm", "layernorm", "layer_norm"):
        return block, "ln"
    if block is not None and rest.startswith("alpha_"):
        return block, "alpha"
    if block is None and module in ("transformer.wte", "transformer.wpe", "transformer.emb_scale", "wte", "wpe"):
        return None, "embeddings"
    if block is None and module in ("lm_head", "head"):
        return None, "head"
    if block is not None and rest in ("weight", "bias"):  # the block is itself a layer (an nn.Linear)
        return block, "block"
    return block, module


@dataclass
class GradStats:
    """One measurement of a model's gradients (and, optionally, of its last update).

    Attributes:
        names: parameter names, in ``named_parameters`` order (tied weights once).
        grad_norm: name -> L2 norm of the gradient (0.0 if the parameter has no grad).
        mean_abs_grad: name -> mean |grad| over the parameter's elements.
        weight_norm: name -> L2 norm of the weights (before the update when one was measured).
        update_ratio: name -> ||delta theta|| / ||theta||, or None without a weight snapshot.
        total_norm: global L2 gradient norm, sqrt(sum of squared per-parameter norms).
        blocks: block prefixes in order (``transformer.h.0``, ...).
        grad_norm_block, mean_abs_grad_block, weight_norm_block, update_ratio_block: one value
            per block (norms are L2 over all of the block's elements; mean |grad| is over them).
        other: non-block group -> L2 gradient norm (``transformer.wte``, ``lm_head``, ...).
        grad_norm_component, update_ratio_component: component -> value over the whole model.
        update_ratio_matrix_block: per block, the update ratio of its 2-D weights alone (the matrices Muon
            trains; None for a block without one), or None without a weight snapshot. The block's ratio pools
            the norms' gains too, which AdamW trains on a Muon run: at train.muon_lr 1e-6 the matrices moved
            ~1e-6 of their norm per step while the gains held the block's ratio near 1e-3.
        step: optimizer step the numbers belong to, if known.
    """

    names: list[str]
    grad_norm: dict[str, float]
    mean_abs_grad: dict[str, float]
    weight_norm: dict[str, float]
    update_ratio: Optional[dict[str, float]]
    total_norm: float
    blocks: list[str]
    grad_norm_block: list[float]
    mean_abs_grad_block: list[float]
    weight_norm_block: list[float]
    update_ratio_block: Optional[list[float]]
    other: dict[str, float]
    grad_norm_component: dict[str, float]
    update_ratio_component: Optional[dict[str, float]]
    update_ratio_matrix_block: Optional[list[Optional[float]]] = None
    step: Optional[int] = None

    def to_record(self, step: int) -> dict:
        """The ``kind: grad`` record of ``metrics.jsonl`` (key names are a stable contract)."""
        rec: dict = {"step": step, "kind": "grad", "grad_2.0_norm_total": self.total_norm}
        for n in self.names:
            rec[f"grad_2.0_norm/{n}"] = self.grad_norm[n]
        rec["grad_norm_block"] = self.grad_norm_block
        rec["mean_abs_grad_block"] = self.mean_abs_grad_block
        rec["update_ratio_block"] = self.update_ratio_block
        rec["weight_norm_block"] = self.weight_norm_block
        rec["grad_norm_component"] = self.grad_norm_component
        rec["update_ratio_component"] = self.update_ratio_component
        rec["update_ratio_matrix_block"] = self.update_ratio_matrix_block
        return rec

    def tb_scalars(self) -> dict[str, float]:
        """TensorBoard scalars: ``grad_norm/block_<i>``, ``update_ratio/block_<i>`` (``grad_norm/total`` is the
        training log's, written at every log step: both wrote it, two points at the same step)."""
        out = {}
        for i, v in enumerate(self.grad_norm_block):
            out[f"grad_norm/block_{i}"] = v
        for i, v in enumerate(self.update_ratio_block or []):
            out[f"update_ratio/block_{i}"] = v
        return out


def _rss(values: Iterable[float]) -> float:
    return math.sqrt(sum(v * v for v in values))


class GradientMonitor:
    """Batched gradient statistics for any module; use it around any backward pass.

    Example (notebook)::

        mon = GradientMonitor(model)
        loss.backward()
        stats = mon.grad_stats()          # reads p.grad; one host sync
        print(format_table(stats))

        mon.snapshot_weights()            # before optimizer.step() ...
        opt.step()
        stats = mon.grad_stats()          # ... stats.update_ratio now filled (grads still set)

    or as a context manager: ``with GradientMonitor(model) as mon: loss.backward()`` then
    ``mon.stats``.

    Args:
        model: any ``nn.Module``; only parameters with ``requires_grad`` are watched.

    Raises:
        ValueError: if the model has no trainable parameters.
    """

    def __init__(self, model: nn.Module):
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError("GradientMonitor: the model has no trainable parameters")
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.numel = [p.numel() for p in self.params]
        self.matrix = [p.dim() == 2 for p in self.params]
        self.blocks: list[str] = []
        self.block_of: list[Optional[int]] = []
        self.group_of: list[str] = []
        self.component_of: list[str] = []
        for n in self.names:
            block, comp = param_component(n)
            if block is not None and block not in self.blocks:
                self.blocks.append(block)
            self.block_of.append(self.blocks.index(block) if block is not None else None)
            self.group_of.append(block if block is not None else (n.rsplit(".", 1)[0] if "." in n else n))
            self.component_of.append(comp)
        self.matrix_blocks = {b for b, m in zip(self.block_of, self.matrix) if m and b is not None}
        self._pending: Optional[tuple] = None
        self._snapshot: Optional[list[torch.Tensor]] = None
        self.stats: Optional[GradStats] = None

    # ------------------------------------------------------------------ measurement
    def snapshot_weights(self) -> None:
        """Copy the weights (call just before ``optimizer.step()``) so the next stats hold ratios."""
        with torch.no_grad():
            self._snapshot = [p.detach().clone() for p in self.params]

    def capture_grads(self) -> None:
        """Launch the batched gradient reductions now (no host sync); finish with :meth:`collect`.

        Separating the two lets a trainer read the gradients before clipping and report them after
        the optimizer step, together with the update ratio, in a single sync.
        """
        with torch.no_grad():
            grads = [p.grad for p in self.params]
            have = [g is not None for g in grads]
            live = [g.detach() for g in grads if g is not None]
            dev = self.params[0].device
            if live:
                norms = torch._foreach_norm(live, 2)
                # .abs().mean() per tensor is the definition users compare with, bit for bit
                means = [g.abs().mean() for g in live]
                gn = torch.stack([n.float() for n in norms])
                ga = torch.stack([m.float() for m in means])
            else:
                gn = ga = torch.zeros(0, device=dev)
            self._pending = (have, gn, ga)

    def collect(self, step: Optional[int] = None) -> GradStats:
        """Finish the measurement started by :meth:`capture_grads` (one host sync) and aggregate.

        If :meth:`snapshot_weights` was called since the last collect, the update ratio
        ||theta_now - theta_snapshot|| / ||theta_snapshot|| is included and the snapshot dropped.

        Args:
            step: optimizer step to stamp on the result.

        Returns:
            The :class:`GradStats`, also kept as ``self.stats``.

        Raises:
            RuntimeError: if :meth:`capture_grads` was not called first.
        """
        if self._pending is None:
            raise RuntimeError("GradientMonitor.collect() needs capture_grads() first")
        have, gn, ga = self._pending
        self._pending = None
        with torch.no_grad():
            ref = self._snapshot if self._snapshot is not None else [p.detach() for p in self.params]
            wn = torch.stack([n.float() for n in torch._foreach_norm(ref, 2)])
            parts = [gn, ga, wn]
            if self._snapshot is not None:
                delta = torch._foreach_sub([p.detach() for p in self.params], self._snapshot)
                parts.append(torch.stack([n.float() for n in torch._foreach_norm(delta, 2)]))
            flat = torch.cat([t.to(wn.device) for t in parts]).tolist()  # the one host sync
        had_snapshot = self._snapshot is not None
        self._snapshot = None
        k, P = len(gn), len(self.params)
        g_live, a_live = flat[:k], flat[k:2 * k]
        w = flat[2 * k:2 * k + P]
        d = flat[2 * k + P:] if had_snapshot else None
        it_g, it_a = iter(g_live), iter(a_live)
        g = [next(it_g) if h else 0.0 for h in have]
        a = [next(it_a) if h else 0.0 for h in have]
        self.stats = self._aggregate(g, a, w, d, step)
        return self.stats

    def grad_stats(self, step: Optional[int] = None) -> GradStats:
        """:meth:`capture_grads` then :meth:`collect`: statistics of the current ``.grad`` fields."""
        self.capture_grads()
        return self.collect(step)

    def __enter__(self) -> "GradientMonitor":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.grad_stats()

    # ------------------------------------------------------------------ aggregation
    def _aggregate(self, g: list[float], a: list[float], w: list[float], d: Optional[list[float]],
                   step: Optional[int]) -> GradStats:
        nb = len(self.blocks)
        sq_g = [0.0] * nb
        sq_w = [0.0] * nb
        sq_d = [0.0] * nb
        sq_dm, sq_wm = [0.0] * nb, [0.0] * nb  # the blocks' 2-D weights alone
        abs_sum = [0.0] * nb
        count = [0] * nb
        other: dict[str, float] = {}
        comp_g: dict[str, float] = {}
        comp_w: dict[str, float] = {}
        comp_d: dict[str, float] = {}
        for i, n in enumerate(self.names):
            b = self.block_of[i]
            if b is not None:
                sq_g[b] += g[i] ** 2
                sq_w[b] += w[i] ** 2
                abs_sum[b] += a[i] * self.numel[i]  # mean * numel = sum |grad|
                count[b] += self.numel[i]
                if d is not None:
                    sq_d[b] += d[i] ** 2
                    if self.matrix[i]:
                        sq_dm[b] += d[i] ** 2
                        sq_wm[b] += w[i] ** 2
            else:
                other[self.group_of[i]] = other.get(self.group_of[i], 0.0) + g[i] ** 2
            c = self.component_of[i]
            comp_g[c] = comp_g.get(c, 0.0) + g[i] ** 2
            comp_w[c] = comp_w.get(c, 0.0) + w[i] ** 2
            if d is not None:
                comp_d[c] = comp_d.get(c, 0.0) + d[i] ** 2

        def ratio(num_sq: float, den_sq: float) -> float:
            return math.sqrt(num_sq) / math.sqrt(den_sq) if den_sq > 0 else (0.0 if num_sq == 0 else math.inf)

        return GradStats(
            names=list(self.names),
            grad_norm=dict(zip(self.names, g)),
            mean_abs_grad=dict(zip(self.names, a)),
            weight_norm=dict(zip(self.names, w)),
            update_ratio=(None if d is None else {n: ratio(d[i] ** 2, w[i] ** 2) for i, n in enumerate(self.names)}),
            total_norm=_rss(g),
            blocks=list(self.blocks),
            grad_norm_block=[math.sqrt(v) for v in sq_g],
            mean_abs_grad_block=[abs_sum[b] / count[b] if count[b] else 0.0 for b in range(nb)],
            weight_norm_block=[math.sqrt(v) for v in sq_w],
            update_ratio_block=None if d is None else [ratio(sq_d[b], sq_w[b]) for b in range(nb)],
            other={k: math.sqrt(v) for k, v in other.items()},
            grad_norm_component={k: math.sqrt(v) for k, v in comp_g.items()},
            update_ratio_component=None if d is None else {k: ratio(comp_d[k], comp_w[k]) for k in comp_g},
            update_ratio_matrix_block=None if d is None else [
                ratio(sq_dm[b], sq_wm[b]) if b in self.matrix_blocks else None for b in range(nb)],
            step=step,
        )


def format_table(stats: GradStats, per_parameter: bool = True) -> str:
    """The classic hand-printed layout: one ``name  grad_norm`` line per parameter (or block).

    Args:
        stats: a measurement.
        per_parameter: one line per parameter; False gives one line per block and group.

    Returns:
        A multi-line string (no trailing newline).
    """
    if per_parameter:
        rows = [(n, stats.grad_norm[n]) for n in stats.names]
    else:
        rows = list(zip(stats.blocks, stats.grad_norm_block)) + list(stats.other.items())
    rows.append(("total", stats.total_norm))
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{n:<{width}}  {v:.4e}" for n, v in rows)


class GradientLogger(Callback):
    """Trainer callback: every ``interval`` steps, log a ``kind: grad`` record (see GradStats.to_record).

    Gradients are read in ``on_before_clip`` (averaged over accumulation and DDP ranks, before
    clipping); on those steps only, the weights are snapshotted so ``on_step_end`` can report the
    update ratio of that optimizer step. Off-interval steps cost one integer test.

    Args:
        interval: log when the step number after the update is a multiple of this (> 0).
        console_table: also print :func:`format_table` (per block) to the trainer's log.
    """

    def __init__(self, interval: int, console_table: bool = False):
        self.interval = int(interval)
        self.console_table = console_table
        self.monitor: Optional[GradientMonitor] = None
        self._armed = False

    def on_train_start(self, run: RunView, info: StepInfo) -> None:
        """Build the monitor over the unwrapped model (compiled/DDP wrappers share its parameters)."""
        self.monitor = GradientMonitor(run.raw_model) if run.is_main else None

    def on_before_clip(self, run: RunView, info: StepInfo) -> None:
        """On logged steps: launch the gradient reductions and snapshot the weights."""
        # the step counter is incremented after the optimizer step, so the record carries step + 1
        self._armed = self.monitor is not None and self.interval > 0 and (info.step + 1) % self.interval == 0
        if self._armed:
            self.monitor.capture_grads()
            self.monitor.snapshot_weights()

    def on_step_end(self, run: RunView, info: StepInfo) -> None:
        """On logged steps: one sync, then one metrics.jsonl record and the TensorBoard scalars."""
        if not self._armed:
            return
        self._armed = False
        stats = self.monitor.collect(info.step)
        rec = stats.to_record(info.step)
        rec.pop("kind", None)
        if info.lr is not None:  # the rate behind these updates: diagnose judges the ratios at the peak rate
            rec["lr"] = info.lr
        run.metrics.log("grad", rec, stats.tb_scalars())
        if self.console_table:
            run.log(f"gradients at step {info.step}:\n" + format_table(stats, per_parameter=False))
