"""The depth-view figures of a run: what each block adds (lens, ablation) and the loss by position.

Both load the run's best weights and measure on its fixed val evaluation windows
(:mod:`depthlab.analytics.layers`, :mod:`depthlab.analytics.context`), as ``depthlab layers`` and
``depthlab context`` print them; written like every figure through :mod:`depthlab.figures`. A run
without a checkpoint, whose corpus is gone, or (for the lens) whose model does not expose its
blocks, final norm and head gets no figure (None), never an error.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Optional

from ..errors import DepthlabError
from ..figures import BASELINE_STYLE, OKABE_ITO, WIDE, block_ticks, depth_colours, new_figure, panel_grid, \
    save_run_figure
from .run_data import RunData, as_run_data

__all__ = ["plot_layers", "plot_context"]


def _baseline_lines(ax, res: dict) -> None:
    for name in ("unigram", "bigram"):
        v = res.get(name)
        if v is not None and math.isfinite(v):
            col, ls = BASELINE_STYLE[name]
            ax.axhline(v, color=col, ls=ls, lw=1.3, zorder=1, label=f"{name} baseline {v:.2f}")


def _measured(run: str | Path | RunData, measure: Callable[[Path], dict]) -> tuple[RunData, Optional[dict]]:
    """The run and ``measure(run_dir)``: the one guard of both figures.

    Args:
        run: a run directory or its :class:`RunData`.
        measure: :func:`~depthlab.analytics.layers.run_layers` or :func:`~depthlab.analytics.context.run_context`
            (run directory -> its result dict).

    Returns:
        (the run's :class:`RunData`, the result), the result None when ``measure`` raised a
        DepthlabError (no checkpoint, corpus gone, a model without blocks/norm/head): no figure.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    import warnings

    from ..checkpoint import WeightsFallback

    run = as_run_data(run)
    try:
        with warnings.catch_warnings():  # the report says in one warning of its own what its checkpoints lack
            warnings.simplefilter("ignore", WeightsFallback)
            return run, measure(run.run_dir)
    except DepthlabError:
        return run, None


def plot_layers(run: str | Path | RunData) -> Optional[Path]:
    """Lens loss per block (with the unigram and bigram lines) and the ablation delta per block.

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/layers.png``, or None (no checkpoint, corpus gone, a model without blocks/norm/head).

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    from ..analytics.layers import EFFECTIVE_DELTA, block_role, run_layers

    run, res = _measured(run, run_layers)
    if res is None:
        return None
    L = res["n_layer"]
    fig = new_figure(WIDE)
    ax_l, ax_a = panel_grid(fig, ncols=2)[0]
    xs = list(range(-1, L))
    ax_l.plot(xs, [res["embedding_lens_loss"]] + [b["lens_loss"] for b in res["blocks"]], "o-",
              color=OKABE_ITO["vermillion"], lw=1.8, ms=4, label="lens loss")
    ax_l.axhline(res["val_loss"], color=OKABE_ITO["black"], lw=0.8, ls=":",
                 label=f"model's own output {res['val_loss']:.3f}")
    _baseline_lines(ax_l, res)
    ax_l.set_xticks(xs, ["emb"] + [str(i) for i in range(L)] if L <= 24 else None)
    ax_l.set_xlabel("after block (emb = the embeddings alone)")
    ax_l.set_ylabel("val loss (nats/token)")
    # a variant whose final norm is the identity (plain, post-LN) decodes the stream through the head alone
    head_only = res.get("lens_head_only", "alone" in res["lens"])  # a layers.json of before the field: its words
    ax_l.set_title("logit lens: the stream decoded by " + ("the head alone" if head_only else "the final norm + head"),
                   fontsize=10)
    # the title's val loss is training's evaluation of these weights (all its batches, its dtype); this line is
    # the model's forward on the windows the lens reads, in float32, which the lens after the last block meets
    ax_l.legend(fontsize=8, frameon=False)
    deltas = [b["ablation_delta"] for b in res["blocks"]]
    role_colour = {"used": OKABE_ITO["blue"], "idle": OKABE_ITO["grey"], "harmful": OKABE_ITO["vermillion"]}
    ax_a.bar(range(L), deltas, color=[role_colour[block_role(d)] for d in deltas])
    ax_a.axhline(EFFECTIVE_DELTA, color=OKABE_ITO["black"], lw=0.8, ls="--", label=f"{EFFECTIVE_DELTA:g} nats")
    ax_a.set_xticks(list(block_ticks(L)))
    ax_a.set_xlabel("block removed (replaced by the identity)")
    ax_a.set_ylabel("val loss increase (nats)")
    ax_a.set_title(f"ablation: effective depth {res['effective_depth']} of {L}", fontsize=10)
    ax_a.legend(fontsize=8, frameon=False)
    return save_run_figure(fig, run.run_dir, "layers", f"What each block adds — {run.title()}",
                           f"{res['weights']} in training; here {res['windows_described']}, float32; "
                           f"lens: {res['lens']}")


def plot_context(run: str | Path | RunData) -> Optional[Path]:
    """Val loss by position, one line per kept checkpoint, with the unigram and bigram lines.

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/context.png``, or None (no checkpoint, corpus gone).

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    from ..analytics.context import run_context

    run, res = _measured(run, run_context)
    if res is None:
        return None
    fig = new_figure(WIDE)
    ax = panel_grid(fig)[0, 0]
    curves = res["checkpoints"]
    for c, col in zip(curves, depth_colours(len(curves))):
        g = c["context_gain"]
        ax.plot(range(len(c["loss_by_position"])), c["loss_by_position"], lw=1.6, color=col,
                label=f"{c['label']}: context gain {g:.2f} nats" if g is not None else c["label"])
    lo = [a - 2 * s for a, s in zip(res["loss_by_position"], res["position_se"]) if s is not None]
    hi = [a + 2 * s for a, s in zip(res["loss_by_position"], res["position_se"]) if s is not None]
    if len(lo) == len(res["loss_by_position"]):
        ax.fill_between(range(len(lo)), lo, hi, color=OKABE_ITO["grey"], alpha=0.2, lw=0,
                        label="± 2 standard errors (chosen weights)")
    _baseline_lines(ax, res)
    ax.set_xlabel(f"position in the window (0 = sees one {res.get('unit', 'character')})")
    ax.set_ylabel("val loss (nats/token)")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    return save_run_figure(fig, run.run_dir, "context", f"Loss by position — {run.title()}",
                           f"{res['windows_described']}; position 0 sees one token and cannot go below the "
                           "best one-token predictor of the val split (at or below the bigram line) beyond its "
                           "sampling error; later positions below it are context the model uses")
