"""Figures of a run directory: loss vs baselines, gradient flow, attention, activations, update ratio.

Every ``plot_*`` function reads what the run recorded (``metrics.jsonl``, ``baselines.json``,
the best checkpoint), writes one PNG into ``run_dir/plots/`` and returns its path, or returns
``None`` when the run holds no data for that figure (an old run, analytics switched off, a run
that failed early). Nothing here raises for missing data; only an unreadable run directory does.
The run directory is read through :mod:`depthlab.report.run_data`; figures are made and written
through :mod:`depthlab.figures` (a bare ``Figure`` on the Agg canvas, never ``pyplot``, so
no global matplotlib state changes). The attention-pattern figure, the one that loads the model,
is :mod:`depthlab.report.attention`.

Losses are in nats per character with a bits-per-character axis on the right (1 bit = ln 2 nats).
Metrics values are read with :func:`depthlab.units.finite_or` and NaN: a missing or non-finite
number is a gap in the figure.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..units import finite_or
from .attention import plot_attention
from .depth import plot_context, plot_layers
from ..figures import (BASELINE_STYLE, C_TRAIN, C_VAL, MAX_W, OKABE_ITO, TALL, WIDE, block_ticks, depth_colours,
                      depth_key, log_axis, new_figure, panel_grid, save_run_figure, time_key)
from ..analytics.rules.evidence import LR_JUDGED_FRACTION, Thresholds
from .run_data import RunData, as_run_data, load_run_data, matrix, series

__all__ = ["RunData", "load_run_data", "plot_loss", "plot_grad_flow", "plot_grad_layers",
           "plot_attention", "plot_activations", "plot_attn_entropy", "plot_update_ratio",
           "plot_rezero_alpha", "plot_layers", "plot_context", "make_all_plots", "rank_for_display", "PLOTS",
           "OKABE_ITO"]


def rank_for_display(v: float) -> float:
    """A recorded rank measure as shown: at most 1.

    :func:`depthlab.analytics.activations.rank_measure` lies in [0, 1]; runs recorded before it
    took the better of the token mean and 0 as the rank-one fit hold the authors' mean-only ratio,
    which can exceed 1 (1.01 for a post-LN stream at init). Their value 1 means the same thing
    the current measure says: the token mean explains nothing, no collapse.
    """
    return min(v, 1.0) if math.isfinite(v) else v


def _positive(vals) -> bool:
    return any(isinstance(v, float) and math.isfinite(v) and v > 0 for v in vals)


def _pick_steps(steps: Sequence[float]) -> list[int]:
    """Indices of the first, middle and last entries (deduplicated, in order)."""
    n = len(steps)
    return sorted({0, n // 2, n - 1}) if n else []


# ----------------------------------------------------------------------------- loss
def _baselines(run: RunData) -> list[tuple[str, float]]:
    out = []
    for name in ("uniform", "unigram", "bigram"):
        b = (run.baselines or {}).get(name)
        v = finite_or(b.get("nats"), math.nan) if isinstance(b, dict) else math.nan
        if math.isfinite(v):
            out.append((name, v))
    return out


def _baseline_bpc(run: RunData, name: str, nats: float) -> float:
    """A baseline's bits/char as baselines.json records it (a BPE run's: the whole val split's characters per
    token), else converted as the run's curves are (:meth:`RunData.bits_per_char`: the evaluation windows')."""
    bpc = finite_or((run.baselines or {}).get(name, {}).get("bits_per_char"), math.nan)
    return bpc if math.isfinite(bpc) else run.bits_per_char(nats)


def plot_loss(run: str | Path | RunData) -> Optional[Path]:
    """Train and validation loss vs optimizer step and vs tokens seen, with the corpus baselines.

    The baselines (uniform ln V, unigram, bigram cross-entropy on val) are labelled horizontal
    lines: a model at the unigram line uses no context at all (not even the current character);
    at the bigram line it predicts from the current character alone, and only below it does the
    context before that character reach the prediction.

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/loss.png``, or ``None`` when the run logged no losses.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    run = as_run_data(run)
    if not run.evals and not run.train:
        return None
    tps = run.tokens_per_step()
    fig = new_figure(WIDE)
    axes = panel_grid(fig, ncols=2)
    ax_s, ax_t = axes[0]
    base = _baselines(run)
    finite = []
    for ax, scale, xlabel in ((ax_s, 1.0, "optimizer step"),
                              (ax_t, tps, "tokens seen (characters)" if run.unit == "char" else "tokens seen")):
        if scale is None:
            ax.text(0.5, 0.5, "tokens per step unknown", transform=ax.transAxes, ha="center")
            continue
        xs, ys = series(run.train, "loss")
        if xs:
            ax.plot([x * scale for x in xs], ys, color=C_TRAIN, alpha=0.35, lw=1.0,
                    label="train (batch loss)")
            finite += ys
        xs, ys = series(run.evals, "train_loss")
        if xs:
            ax.plot([x * scale for x in xs], ys, "o-", color=C_TRAIN, ms=3.5, lw=1.6, label="train (eval)")
            finite += ys
        xs, ys = series(run.evals, "val_loss")
        if xs:
            ax.plot([x * scale for x in xs], ys, "s-", color=C_VAL, ms=3.5, lw=1.8, label="validation")
            finite += ys
        for name, v in base:
            col, ls = BASELINE_STYLE[name]
            ax.axhline(v, color=col, ls=ls, lw=1.3, zorder=1,
                       label=f"{name} baseline {v:.2f} nats ({_baseline_bpc(run, name, v):.2f} bits/char)")
            ax.annotate(f"{name} {v:.2f}", xy=(1.0, v), xycoords=("axes fraction", "data"),
                        xytext=(-3, 2), textcoords="offset points", ha="right", va="bottom",
                        fontsize=8, color=col, fontweight="bold", zorder=1)  # curves draw over it
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"cross-entropy (nats/{run.unit})")
        k = run.bits_per_char(1.0)  # bits/char per nat/token: 1/ln 2 for characters
        if math.isfinite(k) and k > 0:
            sec = ax.secondary_yaxis("right", functions=(lambda y, k=k: y * k, lambda y, k=k: y / k))
            sec.set_ylabel("bits/char")
        if scale != 1.0:
            ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 3))
    vals = [v for v in finite if math.isfinite(v)] + [v for _, v in base]
    if vals:
        lo, hi = min(vals), max(vals)
        pad = 0.06 * (hi - lo or 1.0)
        for ax in (ax_s, ax_t):
            ax.set_ylim(lo - pad, hi + pad)
    handles, labels = ax_s.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(handles), 3), fontsize=9,
                   frameon=False)
    best = finite_or((run.summary or {}).get("best_val_loss"), math.nan)
    sub = ("lower is better; dashed/dotted lines = corpus baselines (at unigram: no context at all; at bigram: the "
           f"current {run.unit_word} alone; below bigram: the context before it is used)")
    if math.isfinite(best):
        sub = f"best validation {best:.3f} nats/{run.unit} = {run.bits_per_char(best):.3f} bits/char; " + sub
    return save_run_figure(fig, run.run_dir, "loss", f"Loss — {run.title()}", sub)


# ----------------------------------------------------------------------------- gradients
def plot_grad_flow(run: str | Path | RunData) -> Optional[Path]:
    """Gradient-flow heatmap: gradient L2 norm of each block (rows) at each logged step (columns).

    Log colour scale, so a gradient that vanishes towards the input shows as a dark band at the
    bottom rows whatever its absolute size.

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/grad_flow.png``, or ``None`` without gradient-monitor records.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    import numpy as np
    from matplotlib.colors import LogNorm

    run = as_run_data(run)
    steps, rows = matrix(run.grads, "grad_norm_block")
    if not steps:
        return None
    nb = max(len(r) for r in rows)
    M = np.full((nb, len(steps)), np.nan)
    for j, r in enumerate(rows):
        M[: len(r), j] = r
    M[~(np.isfinite(M) & (M > 0))] = np.nan  # log scale: zeros / non-finite become gaps
    if not np.isfinite(M).any():
        return None
    fig = new_figure((MAX_W, max(3.2, 1.6 + 0.28 * nb)))
    axes = panel_grid(fig)
    ax = axes[0, 0]
    ax.grid(False)
    s = np.asarray(steps, dtype=float)
    if len(s) > 1:
        mids = (s[1:] + s[:-1]) / 2
        edges = np.concatenate([[s[0] - (mids[0] - s[0])], mids, [s[-1] + (s[-1] - mids[-1])]])
    else:
        edges = np.array([s[0] - 0.5, s[0] + 0.5])
    lo, hi = np.nanmin(M), np.nanmax(M)
    mesh = ax.pcolormesh(edges, np.arange(nb + 1) - 0.5, np.ma.masked_invalid(M), cmap="cividis",
                         norm=LogNorm(vmin=lo, vmax=hi if hi > lo else lo * 10), shading="flat")
    cb = fig.colorbar(mesh, ax=ax, pad=0.01)
    cb.set_label("gradient L2 norm (log scale)")
    log_axis(cb.ax, "y", [lo, hi])
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("block (0 = nearest the input)")
    ax.set_yticks(block_ticks(nb))
    ratio = M[0, -1] / M[-1, -1] if nb > 1 and np.isfinite(M[0, -1]) and np.isfinite(M[-1, -1]) else None
    sub = "dark rows = little gradient reaches that block"
    if ratio is not None:
        # the last gradient record's step, not the run's last step (records come every train.grad_log_interval)
        sub = f"at step {int(s[-1])} (the last gradient record) block 0 gets {ratio:.2g}× the gradient norm of block " \
              f"{nb - 1}; " + sub
    return save_run_figure(fig, run.run_dir, "grad_flow", f"Gradient flow per block — {run.title()}", sub)


def plot_grad_layers(run: str | Path | RunData) -> Optional[Path]:
    """Gradient L2 norm per block at the first, middle and last logged steps (log scale), and,
    when recorded, per component (attention, MLP, norms, embeddings, head) at the last step.

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/grad_layers.png``, or ``None`` without gradient-monitor records.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    run = as_run_data(run)
    steps, rows = matrix(run.grads, "grad_norm_block")
    if not steps or not _positive([v for r in rows for v in r]):
        return None
    comp = None
    for r in reversed(run.grads):
        if isinstance(r.get("grad_norm_component"), dict) and r["grad_norm_component"]:
            comp = (r["step"], r["grad_norm_component"])
            break
    fig = new_figure(WIDE if comp else (8.0, 4.2))
    axes = panel_grid(fig, ncols=2 if comp else 1)
    ax = axes[0, 0]
    cols = [OKABE_ITO["sky"], OKABE_ITO["orange"], OKABE_ITO["blue"]]
    picked = _pick_steps(steps)
    for k, i in enumerate(picked):
        r = rows[i]
        ax.plot(range(len(r)), [v if v > 0 else math.nan for v in r], "o-", ms=4, lw=1.6,
                color=cols[k % 3] if len(picked) > 1 else cols[2], label=f"step {steps[i]:g}")
    log_axis(ax, "y", [rows[i][b] for i in picked for b in range(len(rows[i]))])
    ax.set_xlabel("block (0 = nearest the input)")
    ax.set_ylabel("gradient L2 norm (log scale)")
    nb = max(len(r) for r in rows)
    ax.set_xticks(block_ticks(nb))
    ax.legend(fontsize=8, frameon=False)
    ax.set_title("per block, first / middle / last logged step", fontsize=10)
    if comp:
        ax2 = axes[0, 1]
        names = list(comp[1])
        vals = [finite_or(comp[1][n], math.nan) for n in names]
        ax2.barh(range(len(names)), [v if v > 0 else math.nan for v in vals], color=OKABE_ITO["blue"])
        ax2.set_yticks(range(len(names)), names, fontsize=8)
        ax2.invert_yaxis()
        log_axis(ax2, "x", vals)
        ax2.set_xlabel("gradient L2 norm (log scale)")
        ax2.set_title(f"per component, step {finite_or(comp[0], math.nan):g}", fontsize=10)
    return save_run_figure(fig, run.run_dir, "grad_layers", f"Gradient norm by layer — {run.title()}",
                           "falling by orders of magnitude towards block 0 = vanishing gradients, rising by orders "
                           "of magnitude = exploding; a rise of a few times toward block 0 (as in a healthy pre-LN "
                           "stack) is neither")


def plot_update_ratio(run: str | Path | RunData) -> Optional[Path]:
    """Update/weight ratio ‖Δθ‖/‖θ‖ of each block over training, with the ~1e-3 reference line.

    Ratios far above 1e-3 mean the learning rate is high for that layer (weights change fast),
    far below mean it barely learns.

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/update_ratio.png``, or ``None`` without update-ratio records.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    run = as_run_data(run)
    steps, rows = matrix(run.grads, "update_ratio_block")
    if not steps or not _positive([v for r in rows for v in r]):
        return None
    nb = max(len(r) for r in rows)
    muon = run.optimizer == "muon"
    fig = new_figure((9.0, 4.2))
    axes = panel_grid(fig)
    ax = axes[0, 0]
    low, high = Thresholds.lr_low, Thresholds.lr_high  # the band diagnose's lr rules leave alone
    if not muon:  # Adam's rule of thumb; Muon sizes each matrix update from muon_lr, whatever the gradient
        ax.axhspan(low, high, color=OKABE_ITO["green"], alpha=0.08, lw=0)
        ax.axhline(1e-3, color=OKABE_ITO["black"], ls="--", lw=1.2)
        ax.annotate("~1e-3 reference", xy=(0.0, 1e-3), xycoords=("axes fraction", "data"), xytext=(3, 3),
                    textcoords="offset points", fontsize=8)
    for b, col in enumerate(depth_colours(nb)):
        ys = [r[b] if b < len(r) and r[b] > 0 else math.nan for r in rows]
        ax.plot(steps, ys, lw=1.5, color=col, label=f"block {b}", marker="o" if len(steps) < 3 else None, ms=3)
    log_axis(ax, "y", [v for r in rows for v in r] + ([] if muon else [low, high]))
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("‖Δθ‖ / ‖θ‖ per step (log scale)")
    depth_key(fig, ax, nb)
    return save_run_figure(fig, run.run_dir, "update_ratio", f"Update / weight ratio per block — {run.title()}",
                           UPDATE_RATIO_MUON if muon else
                           f"AdamW: ~1e-3 is the rule of thumb; the shaded band {low:g} … {high:g} is where diagnose "
                           f"calls train.learning_rate neither too high nor too low (judged after the warmup, at "
                           f"{LR_JUDGED_FRACTION:g} of the peak rate or more: the ratio falls with the cosine)")


UPDATE_RATIO_MUON = ("Muon run: the block matrices' updates are orthogonalised and sized by train.muon_lr (about 0.2 × "
                     "muon_lr per element, whatever the gradient), so AdamW's ~1e-3 rule of thumb does not apply; "
                     "the ratio falls as the schedule decays muon_lr and as the weights grow")
"""The update-ratio caption of a Muon run (no Adam band is drawn)."""


# ----------------------------------------------------------------------------- probes
def plot_activations(run: str | Path | RunData) -> Optional[Path]:
    """Activation statistics per block: residual-stream RMS, sublayer output RMS, rank measure,
    and mean pairwise token cosine, one line per probe step (colour = training step).

    The rank measure min(‖X − 1·x̄ᵀ‖, ‖X‖) / ‖X‖ (Dong et al. 2021; :func:`~depthlab.analytics.activations.rank_measure`)
    near 0 means every token's vector has
    collapsed onto the mean: the block can no longer tell positions apart.

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/activations.png``, or ``None`` without probe records.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    run = as_run_data(run)
    panels = [("resid_rms", "residual-stream RMS after the block", True),
              ("rank_measure", "rank measure min(‖X − 1x̄ᵀ‖, ‖X‖)/‖X‖, 0 … 1 (0 = collapsed)", False),
              ("token_cosine", "mean pairwise token cosine (1 = identical)", False)]
    have = [p for p in panels if matrix(run.probes, p[0])[0]]
    if not have:
        return None
    fig = new_figure(TALL)
    axes = panel_grid(fig, nrows=2, ncols=2)
    flat = list(axes.flat)
    for (key, label, logy), ax in zip(panels, [flat[0], flat[2], flat[3]]):
        _per_block_panel(fig, ax, run.probes, key, label, logy)
    _sublayer_panel(flat[1], run.probes[-1])
    return save_run_figure(fig, run.run_dir, "activations", f"Activations per block — {run.title()}",
                           "exploding RMS = no normalisation; rank measure → 0 or cosine → 1 = tokens collapse to "
                           "one vector")


def _per_block_panel(fig, ax, probes: list[dict], key: str, label: str, logy: bool) -> None:
    """One line per probe step (colour = step) of the per-block list ``key`` against block index."""
    steps, rows = matrix(probes, key)
    if key == "rank_measure":
        rows = [[rank_for_display(v) for v in r] for r in rows]
    if not steps:
        ax.text(0.5, 0.5, f"no {key} recorded", transform=ax.transAxes, ha="center", color="grey")
        ax.set_axis_off()
        return
    cols = time_key(fig, ax, steps)
    for s, r, c in zip(steps, rows, cols):
        ax.plot(range(len(r)), r, "o-", ms=3, lw=1.3, color=c)
    if logy and _positive([v for r in rows for v in r]):
        log_axis(ax, "y", [v for r in rows for v in r])
    if key in ("token_cosine", "rank_measure"):  # both live in [0, 1] (cosine down to -1): a linear axis shows 0
        fin = [v for r in rows for v in r if math.isfinite(v)]
        ax.set_ylim(min(0.0, min(fin, default=0.0)) - 0.02, max(1.0, max(fin, default=1.0)) + 0.02)
    ax.set_ylabel(label, fontsize=9)
    ax.set_xlabel("block (0 = nearest the input)")
    nb = max(len(r) for r in rows)
    ax.set_xticks(block_ticks(nb))


def _sublayer_panel(ax, last: dict) -> None:
    """Attention and MLP output RMS (and the residual stream's) per block, from the last probe record."""
    a, m = last.get("attn_out_rms"), last.get("mlp_out_rms")
    if isinstance(a, list) or isinstance(m, list):
        vals: list[float] = []
        for vec, style, colour, label in ((a, "o-", "blue", "attention output"), (m, "s--", "orange", "MLP output"),
                                          (last.get("resid_rms"), ":", "grey", "residual stream")):
            if isinstance(vec, list):
                ys = [finite_or(v, math.nan) for v in vec]
                ax.plot(range(len(ys)), ys, style, color=OKABE_ITO[colour], label=label)
                vals += ys
        if _positive(vals):
            log_axis(ax, "y", vals)
        ax.set_xticks(block_ticks(max(len(a or []), len(m or []))))
        ax.set_ylabel("RMS", fontsize=9)
        ax.set_xlabel("block (0 = nearest the input)")
        ax.set_title(f"sublayer outputs at step {finite_or(last['step'], math.nan):g}", fontsize=10)
        ax.legend(fontsize=8, frameon=False)
    else:
        ax.text(0.5, 0.5, "no sublayer RMS recorded", transform=ax.transAxes, ha="center", color="grey")
        ax.set_axis_off()


def plot_attn_entropy(run: str | Path | RunData) -> Optional[Path]:
    """Attention entropy per head (nats) against ln t, the entropy of uniform attention.

    Left: mean over heads for each block across training. Right: every head of every block at
    the last probe step, as a fraction of the uniform entropy (1.0 = attends to everything
    equally, i.e. uses position/content not at all).

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/attn_entropy.png``, or ``None`` without attention-entropy records.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    run = as_run_data(run)
    recs = [r for r in run.probes if isinstance(r.get("attn_entropy"), list) and r["attn_entropy"]
            and all(isinstance(b, list) for b in r["attn_entropy"])]
    if not recs:
        return None
    steps = [finite_or(r["step"], math.nan) for r in recs]
    ent = [[[finite_or(h, math.nan) for h in b] for b in r["attn_entropy"]] for r in recs]
    uni = [finite_or(r.get("attn_entropy_uniform"), math.nan) for r in recs]
    fig = new_figure(WIDE)
    axes = panel_grid(fig, ncols=2)
    _entropy_over_training(fig, axes[0, 0], steps, ent, uni)
    _entropy_per_head(fig, axes[0, 1], ent[-1], uni[-1], steps[-1])
    u = uni[-1]
    sub = "near the dashed line / near 1.0 = attention almost uniform over the visible tokens"
    if math.isfinite(u):
        sub = f"uniform attention over t visible tokens has entropy ln t (mean {u:.2f} nats here); " + sub
    return save_run_figure(fig, run.run_dir, "attn_entropy", f"Attention entropy per head — {run.title()}", sub)


def _entropy_over_training(fig, ax, steps: list[float], ent: list[list[list[float]]], uni: list[float]) -> None:
    """Mean-over-heads entropy (nats) of each block against step, with the uniform mean ln t dashed.

    Args:
        fig, ax: where to draw.
        steps: probe steps.
        ent: per step, per block, per head entropies (nats).
        uni: per step, the mean ln t of uniform causal attention (nats).
    """
    import numpy as np

    nb = max(len(e) for e in ent)
    for b, col in enumerate(depth_colours(nb)):
        ys = [float(np.nanmean(e[b])) if b < len(e) and e[b] else math.nan for e in ent]
        ax.plot(steps, ys, "o-" if len(steps) < 20 else "-", ms=3, lw=1.5, color=col, label=f"block {b}")
    if any(math.isfinite(u) for u in uni):
        ax.plot(steps, uni, color=OKABE_ITO["black"], ls="--", lw=1.2, label="uniform (mean ln t)")
    ax.set_xlabel("training step")
    ax.set_ylabel("attention entropy (nats), mean over heads")
    top = max([v for e in ent for b in e for v in b if math.isfinite(v)] + [u for u in uni if math.isfinite(u)],
              default=1.0)
    ax.set_ylim(0, top * 1.1 if top > 0 else 1.0)
    if nb <= 6:
        ax.legend(fontsize=8, frameon=False)
    else:
        depth_key(fig, ax, nb)
        ax.legend(handles=[ax.lines[-1]], fontsize=8, frameon=False)
    ax.set_title("mean entropy per block over training", fontsize=10)


def _entropy_per_head(fig, ax, last: list[list[float]], u: float, step: float) -> None:
    """Heatmap (block x head) of one probe's entropies as a fraction of ln t (nats printed in cells).

    Args:
        fig, ax: where to draw.
        last: per block, per head entropies (nats) at ``step``.
        u: mean ln t of uniform causal attention (nats); NaN shows raw nats instead of the fraction.
        step: the probe step (for the title).
    """
    import numpy as np

    ax.grid(False)
    nh = max(len(b) for b in last)
    M = np.full((len(last), nh), np.nan)
    for b, hs in enumerate(last):
        M[b, : len(hs)] = hs
    frac = M / u if math.isfinite(u) and u > 0 else M
    im = ax.imshow(frac, cmap="cividis", vmin=0, vmax=1 if math.isfinite(u) and u > 0 else None,
                   aspect="auto", origin="lower")
    cb = fig.colorbar(im, ax=ax, pad=0.01)
    cb.set_label("entropy / ln t (1 = uniform)" if math.isfinite(u) and u > 0 else "entropy (nats)")
    if M.size <= 96:
        for (b, h), v in np.ndenumerate(M):
            if math.isfinite(v):
                ax.text(h, b, f"{v:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if frac[b, h] < 0.6 else "black")
    ax.set_xticks(range(nh))
    ax.set_yticks(block_ticks(len(last)))
    ax.set_xlabel("head")
    ax.set_ylabel("block")
    ax.set_title(f"per head at step {step:g} (numbers in nats)", fontsize=10)


def plot_rezero_alpha(run: str | Path | RunData) -> Optional[Path]:
    """The ReZero gates α (attention and MLP, per block) over training (``rezero`` runs only).

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/rezero_alpha.png``, or ``None`` when no α was recorded.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    run = as_run_data(run)
    recs = [r for r in run.probes if isinstance(r.get("rezero_alpha"), list) and r["rezero_alpha"]]
    if not recs:
        return None
    steps = [finite_or(r["step"], math.nan) for r in recs]
    nb = max(len(r["rezero_alpha"]) for r in recs)
    fig = new_figure(WIDE)
    axes = panel_grid(fig, ncols=2)
    for k, (ax, name) in enumerate(zip(axes[0], ("attention α", "MLP α"))):
        for b, col in enumerate(depth_colours(nb)):
            ys = []
            for r in recs:
                a = r["rezero_alpha"]
                ys.append(finite_or(a[b][k] if b < len(a) and isinstance(a[b], list) and len(a[b]) > k else None,
                                    math.nan))
            ax.plot(steps, ys, lw=1.5, color=col, label=f"block {b}")
        ax.axhline(0, color=OKABE_ITO["grey"], lw=0.8)
        ax.set_xlabel("training step")
        ax.set_ylabel(name)
        ax.set_title(f"{name} per block", fontsize=10)
        depth_key(fig, ax, nb)
    return save_run_figure(fig, run.run_dir, "rezero_alpha", f"ReZero gates α over training — {run.title()}",
                           "α starts at 0 (every block the identity); |α| then shows how much each sublayer adds "
                           "to the residual stream")


# ----------------------------------------------------------------------------- all
PLOTS: dict[str, tuple[Callable[[RunData], Optional[Path]], str]] = {
    "loss": (plot_loss, "Training and validation loss against the corpus baselines"),
    "grad_flow": (plot_grad_flow, "Gradient flow: gradient norm per block over training"),
    "grad_layers": (plot_grad_layers, "Gradient norm per block and per component"),
    "update_ratio": (plot_update_ratio, "Update / weight ratio per block"),
    "activations": (plot_activations, "Activation statistics per block"),
    "attn_entropy": (plot_attn_entropy, "Attention entropy per head"),
    "attention": (plot_attention, "Attention patterns on a validation snippet"),
    "rezero_alpha": (plot_rezero_alpha, "ReZero gates over training"),
    "layers": (plot_layers, "What each block adds: logit lens and block ablation"),
    "context": (plot_context, "Loss by position against the baselines"),
}
"""Figure name -> (function, one-line caption), in report order."""


def make_all_plots(run_dir: str | Path, skip: Sequence[str] = ()) -> dict[str, Path]:
    """Draw every figure the run has data for.

    Args:
        run_dir: a run directory.
        skip: figure names (keys of :data:`PLOTS`) not to draw, e.g. ``("attention",)`` to avoid
            loading the model.

    Returns:
        Figure name -> PNG path, for the figures that were drawn (report order).

    Raises:
        DepthlabError: ``run_dir`` is not a run directory.
    """
    run = load_run_data(run_dir)
    out = {}
    for name, (fn, _caption) in PLOTS.items():
        if name in skip:
            continue
        p = fn(run)
        if p is not None:
            out[name] = p
    return out
