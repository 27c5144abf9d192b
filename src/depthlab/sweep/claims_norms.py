"""Judges of the normalisation claims: DeepNorm and Peri-LN non-inferiority, LayerNorm Scaling
in deep pre-LN stacks, DyT (see :mod:`depthlab.sweep.science`)."""

from __future__ import annotations

import math
import statistics as st
from typing import Optional, Sequence

from ..units import finite_or_none
from .stats import (All, Any as AnyOf, Leaf, greater)
from .claim_common import (TESTS_NOTE, ClaimRow, cell_short, claim_row, compared_text, final_losses, loss_leaf,
                           lr_of, run_ok, seeds_of, select, short_list, sorted_values, vals_of)


def _noninferior_cells(items: Sequence[dict], base: tuple[str, str], new: tuple[str, str],
                       margin: float = 0.02) -> tuple[list[str], list[Leaf]]:
    """Per (depth, lr) cell: the text of both variants and the leaf "new < base + margin" (best val loss,
    one-sided Welch; Fisher's exact test that ``new`` fails less often where a run did not finish ok).

    Args:
        items: the experiment's per-run dicts. base, new: ``(model.variant, display name)`` each.
        margin: nats of loss ``new`` may be worse by and still count as no worse.

    Returns:
        (one text per cell, one leaf per cell), cells in depth-then-lr order, only those with both variants.
    """
    parts, kids = [], []
    for L in sorted_values(items, "model.n_layer"):
        for lr in sorted_values(items, "train.learning_rate"):
            a, b = (select(items, model__variant=v, model__n_layer=L, train__learning_rate=lr) for v, _ in (base, new))
            if not a or not b:
                continue
            parts.append(f"L{L} lr {lr:g}: {base[1]} {cell_short(a)}, {new[1]} {cell_short(b)}")
            kids.append(loss_leaf(f"L{L} lr {lr:g}: {new[1]} < {base[1]} + {margin:g}", a, b, -margin,
                                   (base[1], new[1])))
    return parts, kids


def _noninferior_claim(items: Sequence[dict], base: tuple[str, str], new: tuple[str, str], claim: str,
                       source: str) -> ClaimRow:
    """The row "``new`` is no worse than ``base`` in every (depth, lr) cell" (:func:`_noninferior_cells`, all
    must hold): the claims of DeepNorm over post-LN and of Peri-LN over pre-LN."""
    parts, kids = _noninferior_cells(items, base, new)
    test = All(kids) if kids else None
    return claim_row([claim, source,
                   f"{vals_of(items, 'model.n_layer')} blocks, width {vals_of(items, 'model.n_embd')}, "
                   f"{lr_of(items)}, {vals_of(items, 'train.max_iters')} steps, best val loss "
                   f"(nats/char), mean ± sd over {seeds_of(items)}; yes = {new[1]} < {base[1]} + 0.02 (or fails less "
                   f"often) at every depth and lr; {TESTS_NOTE}",
                   "; ".join(parts) + (f". {compared_text(test)}" if test else "")], test)


def deepnorm_depth(items: Sequence[dict], extra: dict) -> ClaimRow:
    """DeepNorm keeps post-LN stable at depth (Wang et al. 2022, "DeepNet").

    Cells are (variant, depth, lr). yes = at every depth and learning rate DeepNorm's best val loss
    is below post-LN's + 0.02 nats (one-sided Welch; where a run did not finish ok, DeepNorm fails
    less often: Fisher), all at alpha 0.05.

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``).
        extra: its extra settings from the profile.

    Returns:
        The row; ``row.test`` holds the comparisons.
    """
    return _noninferior_claim(items, ("postnorm", "post-LN"), ("deepnorm", "DeepNorm"),
                              "DeepNorm keeps post-LN stable at depth where post-LN fails",
                              "Wang et al. 2022, DeepNet: scaling Transformers to 1,000 layers (arXiv:2203.00555)")


def periln_stability(items: Sequence[dict], extra: dict) -> ClaimRow:
    """Peri-LN is at least as stable as pre-LN at depth and at a higher learning rate (Kim et al. 2025,
    "Peri-LN: revisiting normalization layer in the Transformer architecture": pre-LN's unnormalised
    sublayer outputs grow into massive activations and loss spikes or divergence at larger lrs, while
    normalising each sublayer's output keeps Peri-LN trainable).

    Cells are (variant, depth, lr). yes = in every cell Peri-LN's best val loss is below pre-LN's +
    0.02 nats (one-sided Welch; where a run did not finish ok, Peri-LN fails less often: Fisher), all
    at alpha 0.05 (intersection-union); no = some cell shows Peri-LN worse by more than 0.02 (or
    failing more often) at alpha 0.05 / (number of cells). Rule fixed before any run of this experiment.

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``).
        extra: its extra settings from the profile.

    Returns:
        The row; ``row.test`` holds the comparisons.
    """
    claim = "Peri-LN is at least as stable as pre-LN at depth and higher lr: no worse loss, no more divergence"
    source = "Kim et al. 2025, Peri-LN: revisiting normalization layer in the Transformer architecture (ICML)"
    return _noninferior_claim(items, ("prenorm", "pre-LN"), ("periln", "Peri-LN"), claim, source)


def ablation_deltas(it: dict) -> Optional[list[float]]:
    """Per block, the val loss rise when the block is replaced by the identity (``depthlab layers``).

    Read from ``details["layers"]`` when the run's details carry it, else measured on the run's best
    checkpoint and fixed val windows (:func:`depthlab.analytics.layers.run_layers`, 4,096 tokens).

    Args:
        it: a per-run dict (``details``, ``run_dir``, ``row``).

    Returns:
        Nats per block, first block first; None for a run not ok or without a checkpoint.
    """
    layers = it["details"].get("layers")
    if layers is None and run_ok(it) and it.get("run_dir"):
        from ..analytics.layers import run_layers  # loads a checkpoint: only when a judge asks
        from ..errors import DepthlabError
        try:
            layers = run_layers(it["run_dir"], max_tokens=LAYERS_TOKENS)
        except (DepthlabError, OSError):
            layers = None
        it["details"]["layers"] = layers  # once per run per table
    vals = [finite_or_none(b.get("ablation_delta")) for b in (layers or {}).get("blocks", [])]
    return vals if vals and all(v is not None for v in vals) else None


#: Tokens of the run's val windows the ablation deltas are measured on (4 of the science recipe's
#: 16 x 64 evaluation batches).
LAYERS_TOKENS = 4096


def _halves(deltas: list[float]) -> tuple[float, float]:
    """Mean ablation delta of the first and of the last half of the blocks (an odd middle block left out)."""
    h = len(deltas) // 2
    return st.mean(deltas[:h]), st.mean(deltas[-h:])


def _deep_share(deltas: list[float]) -> float:
    """The last half's mean delta over the first half's: 1 = deep blocks matter as much as shallow ones."""
    first, last = _halves(deltas)
    return last / first if first > 0 else math.inf


def lns_depth(items: Sequence[dict], extra: dict) -> ClaimRow:
    """Deep pre-LN blocks contribute less than shallow ones, and LayerNorm Scaling changes that (Sun et al.
    2025, "The curse of depth in large language models": in pre-LN the output variance grows with depth,
    so deep blocks approach the identity and removing them costs little; scaling block l's norm outputs
    by 1/sqrt(l) makes the deep blocks contribute again).

    Values per run from ``depthlab layers``' block ablation (:func:`ablation_deltas`): the mean ablation
    delta of the first and of the last half of the blocks, and their ratio (last / first). yes = in
    pre-LN (``norm_scale 1``) the first half's mean delta > the last half's (deep blocks contribute less)
    and with ``norm_scale depth`` the ratio last / first is larger than without (LayerNorm Scaling gives
    the deep half a larger share); one-sided Welch tests over the seeds at alpha 0.05, both must hold.
    Rule fixed before any run of this experiment.

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``, ``run_dir``).
        extra: its extra settings from the profile.

    Returns:
        The row; ``row.test`` holds the comparisons.
    """
    cells = {ns: [(it, d) for it in select(items, model__norm_scale=ns) if (d := ablation_deltas(it)) and len(d) > 1]
             for ns in (1, "depth")}
    parts = []
    for ns, name in ((1, "pre-LN"), ("depth", "pre-LN + LayerNorm Scaling")):
        if cells[ns]:
            halves = [_halves(d) for _, d in cells[ns]]
            parts.append(f"{name}: first half {short_list([h[0] for h in halves], '.4f')}, last half "
                         f"{short_list([h[1] for h in halves], '.4f')}, last/first "
                         f"{short_list([_deep_share(d) for _, d in cells[ns]], '.2f')}")
    test = None
    if cells[1] and cells["depth"]:
        base, lns = cells[1], cells["depth"]
        b_items, l_items = [it for it, _ in base], [it for it, _ in lns]
        test = All([greater("pre-LN: first half's delta > last half's", [_halves(d)[0] for _, d in base],
                            [_halves(d)[1] for _, d in base], items=(b_items, b_items),
                            names=("first half", "last half")),
                    greater("last/first: LayerNorm Scaling > pre-LN", [_deep_share(d) for _, d in lns],
                            [_deep_share(d) for _, d in base], items=(l_items, b_items),
                            names=("LayerNorm Scaling", "pre-LN"))])
    return claim_row(["Deep pre-LN blocks contribute less than shallow ones, and LayerNorm Scaling changes that",
                   "Sun et al. 2025, The curse of depth in large language models (arXiv:2502.05795)",
                   f"pre-LN, {vals_of(items, 'model.n_layer')} blocks, width {vals_of(items, 'model.n_embd')}, "
                   f"{vals_of(items, 'train.max_iters')} steps, norm_scale "
                   f"{vals_of(items, 'model.norm_scale')}; per run "
                   "the mean block-ablation delta (depthlab layers, nats) of the first and the last half of the "
                   f"blocks, mean ± sd over {seeds_of(items)}; yes = without scaling first half > last half, and "
                   f"last/first larger with LayerNorm Scaling; {TESTS_NOTE}",
                   "; ".join(parts) + (f". {compared_text(test)}" if test else "")], test)


def _norm_lrs(items: Sequence[dict], norm: str) -> dict[float, list[dict]]:
    sel = select(items, model__norm=norm)
    return {lr: select(sel, train__learning_rate=lr) for lr in sorted_values(sel, "train.learning_rate")}


def _best_lr(cells: dict[float, list[dict]]) -> Optional[float]:
    """The learning rate whose cell has the lowest mean best val loss (every run ok), or None."""
    ok = [(st.mean(final_losses(c)), lr) for lr, c in cells.items() if c and all(run_ok(it) for it in c)]
    return min(ok)[1] if ok else None


def _dyt_cells(items: Sequence[dict]) -> tuple[dict, dict, Optional[float], Optional[float], str]:
    """LayerNorm's and DyT's cells per lr, each one's best lr, and the per-lr text."""
    ln, dyt = _norm_lrs(items, "layernorm"), _norm_lrs(items, "dyt")
    text = "; ".join(f"{name}: " + ", ".join(f"lr {lr:g} {cell_short(c)}" for lr, c in cells.items())
                     for name, cells in (("LayerNorm", ln), ("DyT", dyt)) if cells)
    return ln, dyt, _best_lr(ln), _best_lr(dyt), text


def _dyt_setting(items: Sequence[dict], rule: str) -> str:
    return (f"pre-LN, {vals_of(items, 'model.n_layer')} blocks, width {vals_of(items, 'model.n_embd')}, lr "
            f"{vals_of(items, 'train.learning_rate')} per norm, {vals_of(items, 'train.max_iters')} steps (equal for "
            f"both), best val loss (nats/char), mean ± sd over {seeds_of(items)}; {rule}; {TESTS_NOTE}")


def dyt_matches(items: Sequence[dict], extra: dict) -> ClaimRow:
    """DyT matches LayerNorm (Zhu et al. 2025, "Transformers without normalization": DyT "matches or
    exceeds" its normalised counterpart).

    Each norm at its own best learning rate of the grid (lowest mean best val loss, every seed ok),
    the same step budget. yes = DyT's best < LayerNorm's best + 0.02 nats (non-inferiority, one-sided
    Welch at alpha 0.05); no = DyT is worse by more than 0.02 at p < 0.05. Rule fixed before any run.

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``).
        extra: its extra settings from the profile.

    Returns:
        The row; ``row.test`` holds the comparison.
    """
    ln, dyt, bl, bd, text = _dyt_cells(items)
    test = None
    if bl is not None and bd is not None:
        test = All([loss_leaf(f"DyT (lr {bd:g}) < LayerNorm (lr {bl:g}) + 0.02", ln[bl], dyt[bd], -0.02,
                               ("LayerNorm", "DyT"))])
    return claim_row(["DyT matches LayerNorm at this scale: equal steps, each at its best lr",
                   "Zhu et al. 2025, Transformers without normalization (CVPR)",
                   _dyt_setting(items, "yes = DyT's best < LayerNorm's best + 0.02"),
                   text + (f". {compared_text(test)}" if test else "")], test)


def dyt_lr_window(items: Sequence[dict], extra: dict) -> ClaimRow:
    """DyT is more sensitive to the learning rate than LayerNorm (Zhu et al. 2025 tune alpha0 with the lr
    for LLMs; users report DyT runs that do not train at LayerNorm's lr).

    The lr window of a norm is the set of grid lrs whose mean loss is within 0.05 nats of that norm's
    best lr's. yes = at some lr LayerNorm is inside its window (its loss < its best + 0.05; at its best lr by
    definition) while DyT is outside its own (its loss > its best + 0.05, or runs not ok: Fisher), both
    one-sided at alpha 0.05 / (number of lrs) (Bonferroni over the lrs); no = at every lr one of the two is
    refuted.
    Rule fixed before any run.

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``).
        extra: its extra settings from the profile.

    Returns:
        The row; ``row.test`` holds the comparisons.
    """
    ln, dyt, bl, bd, text = _dyt_cells(items)
    test = None
    if bl is not None and bd is not None:
        # at LayerNorm's best lr LayerNorm is inside its window by definition: DyT outside its own decides there
        # (dropped, a DyT that diverged exactly there read as a significant "no")
        kids = [All(([] if lr == bl else [loss_leaf(f"lr {lr:g}: LayerNorm < its best + 0.05", ln[bl], ln[lr], -0.05,
                                                     ("best", f"lr {lr:g}"))])
                    + [loss_leaf(f"lr {lr:g}: DyT > its best + 0.05", dyt[lr], dyt[bd], 0.05, (f"lr {lr:g}", "best"))])
                for lr in ln if lr in dyt and lr != bd]
        test = AnyOf(kids) if kids else None
    # what the rule tests (a window as wide as LayerNorm's, at other lrs, passes it too): it said "a narrower lr window"
    return claim_row(["DyT is more sensitive to the learning rate than LayerNorm: some lr inside LayerNorm's lr window "
                      "is outside DyT's",
                   "Zhu et al. 2025, Transformers without normalization (CVPR; alpha0 and lr tuned together)",
                   _dyt_setting(items, "window = lrs within 0.05 of the norm's best; yes = some lr inside "
                                "LayerNorm's window and outside DyT's (Bonferroni over the lrs)"),
                   text + (f". {compared_text(test)}" if test else "")], test)


#: Experiment name (in ``profiles/science.yaml``) -> its judges (one table row each), in table order.
#: ``depth`` gives two rows from the same runs: degradation (plain) and "depth helps" (pre-LN).
