"""Judges of the depth and training-dynamics claims: rank collapse at init, depth degradation,
depth helps, post-LN warmup, ReZero speed (see :mod:`depthlab.sweep.science`)."""

from __future__ import annotations

import math
import statistics as st
from typing import Optional, Sequence

from .stats import (ALPHA, All, Any as AnyOf, Node, fmt_p, greater, p_yes, verdict, welch_greater)
from .claim_common import (TESTS_NOTE, ClaimRow, cell_short, claim_row, compared_text, final_losses, grid_text,
                           init_grad_blocks, init_last_rank, loss_leaf, lr_of, run_ok, seeds_of, select, short_list,
                           sorted_values, steps_to, vals_of)


# --------------------------------------------------------------------------- the claims
def _ranks(items: Sequence[dict]) -> list[float]:
    return [r for r in (init_last_rank(it) for it in items) if r is not None]


def rank_init(items: Sequence[dict], extra: dict) -> ClaimRow:
    """Rank collapse without skips at init (Dong et al. 2021, "Attention is not all you need").

    Cells are (variant, depth); values are the last block's rank measure at init, one per seed.
    yes = the plain stack's deepest is below half its shallowest (Welch on half the shallowest
    values against the deepest) and every residual variant's deepest is above 5x plain's deepest
    (Welch on 5x plain's values), all comparisons at alpha 0.05 (intersection-union test).

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``).
        extra: its extra settings from the profile.

    Returns:
        The row; ``row.test`` holds the comparisons.
    """
    depths, variants = sorted_values(items, "model.n_layer"), sorted_values(items, "model.variant")
    test = None
    if "plain" in variants and len(depths) > 1:
        d0, d1 = depths[0], depths[-1]
        p0, p1 = (select(items, model__variant="plain", model__n_layer=L) for L in (d0, d1))
        kids = [greater(f"plain L{d1} < half of L{d0}", [0.5 * r for r in _ranks(p0)], _ranks(p1),
                        items=(p0, p1), names=(f"half of L{d0}", f"L{d1}"))]
        for v in variants:
            if v != "plain":
                sel = select(items, model__variant=v, model__n_layer=d1)
                kids.append(greater(f"{v} L{d1} > 5x plain", _ranks(sel), [5 * r for r in _ranks(p1)],
                                    items=(sel, p1), names=(v, "5x plain")))
        test = All(kids)
    nums = grid_text(items, lambda sel: short_list(_ranks(sel)))
    return claim_row(["Rank collapse without skips: at init the last-block rank measure of a plain stack falls "
                      "towards 0 "
                   "with depth; residual variants stay well above",
                   "Dong et al. 2021, Attention is not all you need (ICML)",
                   f"depths {', '.join(map(str, depths))}, at init, mean ± sd over {seeds_of(items)}; yes = plain's "
                   "deepest < half its shallowest and every residual variant's deepest > 5x plain's deepest; "
                   + TESTS_NOTE, nums + (f". {compared_text(test)}" if test else "")], test)


def _by_depth(items: Sequence[dict], v: str) -> dict[int, list[dict]]:
    return {L: select(items, model__variant=v, model__n_layer=L) for L in sorted_values(select(items, model__variant=v),
                                                                                      "model.n_layer")}


def _best_shallower(cells: dict[int, list[dict]]) -> Optional[int]:
    """The shallower depth (not the deepest) with the lowest mean best val loss, None if none finished."""
    deep = max(cells)
    means = [(st.mean(final_losses(c)), L) for L, c in cells.items() if L < deep and final_losses(c)]
    return min(means)[1] if means else None


def degradation(items: Sequence[dict], extra: dict) -> ClaimRow:
    """Degradation with depth at an equal step budget (He et al. 2016, shown there for CNNs).

    Cells are (variant, depth), values the best val loss per seed (nats/char). yes = plain's deepest
    is worse than its best shallower depth (lowest mean) by more than 0.1 nats, and every residual
    variant's deepest is within 0.02 nats of its best shallower or better; each comparison a
    one-sided Welch test at alpha 0.05, all must hold.

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``).
        extra: its extra settings from the profile.

    Returns:
        The row; ``row.test`` holds the comparisons.
    """
    kids = []
    for v in sorted_values(items, "model.variant"):
        cells = _by_depth(items, v)
        if len(cells) < 2:
            continue
        # no shallower run finished: the shallowest cell, whose runs not ok Fisher's exact test compares (without
        # its leaf, plain's comparison was dropped and "yes" stood on the residual variants alone)
        best = _best_shallower(cells) or min(cells)
        deep = max(cells)
        if v == "plain":
            kids.insert(0, loss_leaf(f"plain L{deep} > L{best} + 0.1", cells[deep], cells[best], 0.1,
                                      (f"L{deep}", f"L{best}")))
        else:
            kids.append(loss_leaf(f"{v} L{deep} < L{best} + 0.02", cells[best], cells[deep], -0.02,
                                   (f"L{best}", f"L{deep}")))
    test = All(kids) if kids and "plain" in sorted_values(items, "model.variant") else None
    why = None if test is not None or not items else (
        "not judged: it compares plain with the residual variants at two depths or more, and this sweep has "
        f"model.variant {vals_of(items, 'model.variant')} at model.n_layer {vals_of(items, 'model.n_layer')}")
    return claim_row(["Degradation: plain gets worse with depth at an equal step budget, residual variants do not",
                   "He et al. 2016, Deep residual learning (CVPR; shown there for CNNs)",
                   f"width {vals_of(items, 'model.n_embd')}, {lr_of(items)}, "
                   f"{vals_of(items, 'train.max_iters')} steps, best val loss (nats/char), mean ± sd over "
                   f"{seeds_of(items)}; yes = deepest plain > best shallower + 0.1 and every residual variant's "
                   f"deepest < its best shallower + 0.02; {TESTS_NOTE}",
                   grid_text(items, cell_short) + (f". {compared_text(test)}" if test else "")], test, why)


def _doublings(cells: dict[int, list[dict]]) -> str:
    """Per depth step of pre-LN: the change of mean loss and the one-sided p of a fall (reported, not judged)."""
    out, depths = [], sorted(cells)
    for a, b in zip(depths, depths[1:]):
        la, lb = final_losses(cells[a]), final_losses(cells[b])
        if la and lb:
            r = welch_greater(la, lb)
            out.append(f"L{a}->L{b} {st.mean(lb) - st.mean(la):+.3f}" + (f" ({fmt_p(r[2])})" if r else ""))
    return ("pre-LN per depth step, not judged: " + ", ".join(out)) if out else ""


def depth_helps(items: Sequence[dict], extra: dict) -> ClaimRow:
    """With shortcuts depth helps, without them it hurts: the two halves of the degradation story.

    Cells are (variant, depth), values the best val loss per seed (nats/char). yes = pre-LN's
    deepest is below its shallowest (He et al.'s claim: the deeper residual net is the better one)
    and plain's deepest is above its shallowest + 0.1 nats; one-sided Welch tests at alpha 0.05,
    both must hold. The change at each depth step of pre-LN is reported with its p, not judged.
    (The rule before was "pre-LN falls at every step by more than 2x the largest seed sd", a hand
    rule on two seeds; replaced by these tests before the runs that decide it.)

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``).
        extra: its extra settings from the profile.

    Returns:
        The row; ``row.test`` holds the comparisons.
    """
    pre, plain = _by_depth(items, "prenorm"), _by_depth(items, "plain")
    test = None
    if len(pre) > 1 and len(plain) > 1:
        (p0, p1), (q0, q1) = (min(pre), max(pre)), (min(plain), max(plain))
        test = All([loss_leaf(f"pre-LN L{p1} < L{p0}", pre[p0], pre[p1], 0.0, (f"L{p0}", f"L{p1}")),
                    loss_leaf(f"plain L{q1} > L{q0} + 0.1", plain[q1], plain[q0], 0.1, (f"L{q1}", f"L{q0}"))])
    steps = _doublings(pre) if len(pre) > 2 else ""
    nums = grid_text(items, cell_short) + (f". {compared_text(test)}" if test else "") + (f". {steps}" if steps else "")
    return claim_row(["With shortcuts, depth helps: pre-LN's best val loss falls as blocks are added while "
                      "plain's rises",
                   "He et al. 2016 (deeper residual nets are better, plain ones worse)",
                   f"width {vals_of(items, 'model.n_embd')}, {lr_of(items)}, "
                   f"{vals_of(items, 'train.max_iters')} steps for every depth, mean ± sd over "
                   f"{seeds_of(items)}; yes = "
                   f"pre-LN's deepest < its shallowest and plain's deepest > its shallowest + 0.1; {TESTS_NOTE}",
                   nums], test, None if test is not None or not items else (
                       "not judged: it needs pre-LN and plain runs at two depths or more each, and this sweep has "
                       f"model.variant {vals_of(items, 'model.variant')} at model.n_layer "
                       f"{vals_of(items, 'model.n_layer')}"))


def _init_grad_note(items: Sequence[dict]) -> str:
    """Gradient scale at init from the probe: post-LN's last block vs pre-LN's, per depth and init."""
    notes = []
    for L in sorted_values(items, "model.n_layer"):
        for init in sorted_values(items, "model.init"):
            g = {}
            for v in ("postnorm", "prenorm"):
                gs = [x for x in (init_grad_blocks(it) for it in select(items, model__variant=v, model__n_layer=L,
                                                                     model__init=init)) if x]
                g[v] = (st.mean(x[-1] for x in gs), st.mean(x[-1] / x[0] for x in gs)) if gs else None
            if g["postnorm"] and g["prenorm"]:
                notes.append(f"L{L} {init}: post-LN last-block grad {g['postnorm'][0]:.3g} "
                             f"(last/first {g['postnorm'][1]:.2f}) vs pre-LN {g['prenorm'][0]:.3g} "
                             f"(last/first {g['prenorm'][1]:.2f})")
    return ("gradient norm per block at init: " + "; ".join(notes)) if notes else ""


def _warmup_cells(items: Sequence[dict], warms: list) -> list[tuple[str, str, Node]]:
    """(init, text, test) of every (depth, lr, init) cell: post-LN needs warmup there."""
    out = []
    for L in sorted_values(items, "model.n_layer"):
        for lr in sorted_values(items, "train.learning_rate"):
            for init in sorted_values(items, "model.init"):
                cell = select(items, model__n_layer=L, train__learning_rate=lr, model__init=init)
                if not cell:
                    continue
                post0, post1, pre0 = (select(cell, model__variant=v, train__warmup_iters=w) for v, w in
                                      (("postnorm", warms[0]), ("postnorm", warms[-1]), ("prenorm", warms[0])))
                where = f"L{L} lr {lr:g} {init}"
                test = All([loss_leaf(f"{where}: post-LN warmup {warms[0]} > warmup {warms[-1]} + 0.1", post0, post1,
                                       0.1, (f"warmup {warms[0]}", f"warmup {warms[-1]}")),
                            loss_leaf(f"{where}: pre-LN warmup {warms[0]} < post-LN warmup {warms[-1]} + 0.1", post1,
                                       pre0, -0.1, ("post-LN", "pre-LN"))])
                text = (f"{where}: post-LN warmup {warms[0]} {cell_short(post0)}, warmup {warms[-1]} "
                        f"{cell_short(post1)}; pre-LN warmup {warms[0]} {cell_short(pre0)}")
                out.append((init, text, test))
    return out


def postln_warmup(items: Sequence[dict], extra: dict) -> ClaimRow:
    """Post-LN needs learning-rate warmup (Xiong et al. 2020, "On layer normalization in the Transformer").

    A cell is one depth, learning rate and init. Post-LN needs warmup there when, without warmup,
    its best val loss is above the warmed-up run's + 0.1 nats (or it diverges more often: Fisher),
    and pre-LN without warmup trains there (below warmed-up post-LN + 0.1, or better) — both
    one-sided tests must hold in the cell. yes = some cell shows it, at alpha 0.05 / (number of
    cells) (Bonferroni); no = every cell fails one of its tests. The verdict names the inits whose
    cells show it (``yes (p = 0.01, n = 2; gpt2 init)``). The per-block gradient norm at init (the
    paper's explanation) is reported next to it, not judged.

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``).
        extra: its extra settings from the profile.

    Returns:
        The row; ``row.test`` holds the comparisons.
    """
    warms = sorted_values(items, "train.warmup_iters")
    cells = _warmup_cells(items, warms) if len(warms) > 1 else []
    test = AnyOf([t for _, _, t in cells]) if cells else None
    def holds(t) -> bool:  # an exact p of 0 (cells of zero spread) is a p, not a missing one
        p = p_yes(t)
        return p is not None and p * len(cells) < ALPHA

    hits = sorted({init for init, _, t in cells if holds(t)})
    parts = [text + (" [needs warmup]" if holds(t) else "") for _, text, t in cells]
    v = verdict(test)
    if v.startswith("yes (") and hits:
        v = v[:-1] + f"; {', '.join(hits)} init)"
    note = _init_grad_note(items)
    return claim_row(["Post-LN needs warmup: without warmup post-LN trains badly or diverges where post-LN with warmup "
                   "and pre-LN train",
                   "Xiong et al. 2020, On layer normalization in the Transformer architecture (ICML)",
                   f"{vals_of(items, 'model.n_layer')} blocks, width {vals_of(items, 'model.n_embd')}, "
                   f"{lr_of(items)}, warmup {vals_of(items, 'train.warmup_iters')} "
                   "steps, init "
                   f"{vals_of(items, 'model.init')}, {vals_of(items, 'train.max_iters')} steps, best val loss "
                   "(nats/char), "
                   f"mean ± sd over {seeds_of(items)}; yes = in some cell (depth, lr, init) post-LN without warmup > "
                   "with warmup + 0.1 (or diverges more often) and pre-LN without warmup < warmed-up post-LN + 0.1 "
                   f"(Bonferroni over the cells); {TESTS_NOTE}",
                   "; ".join(parts) + (f". {compared_text(test)}" if test else "") + (f". {note}" if note else "")],
                  test, v)


def _tokens_per_step(items: Sequence[dict]) -> Optional[int]:
    """Training tokens per optimizer step (batch x accumulation x context) of the first run, or None."""
    t, m = items[0]["config"]["train"], items[0]["config"]["model"]
    if not t.get("batch_size") or not m.get("block_size"):
        return None
    return int(t["batch_size"] * t.get("grad_accum", 1) * m["block_size"])


def _steps_censored(it: dict, target: float) -> float:
    """Steps to the target, or ``max_iters + eval_interval`` for a run that never reached it (a lower bound)."""
    s = steps_to(it, target) if run_ok(it) else None
    t = it["config"]["train"]
    return float(s) if s is not None else float(t["max_iters"] + t["eval_interval"])


def _rezero_variant(items: Sequence[dict], v: str, target: float) -> tuple[str, Optional[tuple]]:
    """(text, (mean censored steps, lr, cell items) at the variant's best lr) of one variant."""
    cells, best = [], None
    for lr in sorted_values(select(items, model__variant=v), "train.learning_rate"):
        sel = select(items, model__variant=v, train__learning_rate=lr)
        steps = [_steps_censored(it, target) for it in sel]
        reached = all(steps_to(it, target) is not None and run_ok(it) for it in sel)
        cells.append(f"lr {lr:g} {short_list(steps, 'g') if reached else '—'} / {cell_short(sel)}")
        # ties (every seed censored at the budget) go to the lower best val loss, not to the first lr
        key = (st.mean(steps), st.mean(final_losses(sel)) if final_losses(sel) else math.inf)
        if best is None or key < (best[0], best[3]):
            best = (key[0], lr, sel, key[1])
    return f"{v}: " + ", ".join(cells), best


def rezero_speed(items: Sequence[dict], extra: dict) -> ClaimRow:
    """ReZero converges in fewer steps (Bachlechner et al. 2020, "ReZero is all you need").

    Each variant at its own best learning rate of the grid (fewest mean steps): the steps to val
    loss <= ``extra["target_val_loss"]`` (nats, default 2.6) per seed, a seed that never reaches it
    counted as ``max_iters + eval_interval`` (a lower bound: censored in the other variants' favour
    when ReZero is faster). yes = ReZero needs fewer steps than every other variant (one-sided
    Welch, alpha 0.05, all must hold; a cell's spread is never taken below the evaluation interval's
    rounding, eval_interval²/12, :func:`~depthlab.sweep.stats.floored_variance`); the best val loss
    at the budget is reported, not judged.

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``).
        extra: its extra settings from the profile (``target_val_loss`` in nats/char).

    Returns:
        The row; ``row.test`` holds the comparisons.
    """
    target = float((extra or {}).get("target_val_loss", 2.6))
    tps = _tokens_per_step(items) if items else None
    parts, best = [], {}
    for v in sorted_values(items, "model.variant"):
        text, best[v] = _rezero_variant(items, v, target)
        parts.append(text)
    rz, test = best.get("rezero"), None
    if rz is not None and len(best) > 1:
        # steps are seen only at each evaluation: two seeds on one evaluation step are not an exact value
        grid = float(max(it["config"]["train"]["eval_interval"] for it in items))
        test = All([greater(f"{o} (lr {b[1]:g}) slower than rezero (lr {rz[1]:g})",
                            [_steps_censored(it, target) for it in b[2]], [_steps_censored(it, target) for it in rz[2]],
                            items=(b[2], rz[2]), names=(o, "rezero"), resolution=grid)
                    for o, b in best.items() if o != "rezero"])
    def reached(cell: Sequence[dict]) -> bool:
        return any(run_ok(it) and steps_to(it, target) is not None for it in cell)

    summary = [f"{v} lr {b[1]:g}: " + (f"{b[0]:g} steps" + (f" ({b[0] * tps:,.0f} tokens)" if tps else "")
                                       if reached(b[2]) else f"not reached in {vals_of(b[2], 'train.max_iters')} steps")
               for v, b in best.items() if b]
    # censored values alone (no seed of any variant reached the target) compare nothing: more seeds cannot help
    why = None if not items or any(reached(b[2]) for b in best.values() if b) else (
        f"not judged: no run reached val <= {target:g} nats/char (raise train.max_iters, or the experiment's "
        "target_val_loss)")
    return claim_row(["ReZero trains faster: fewer steps (tokens) to a target loss than LayerNorm variants",
                   "Bachlechner et al. 2020, ReZero is all you need (arXiv:2003.04887)",
                   f"{vals_of(items, 'model.n_layer')} blocks, width {vals_of(items, 'model.n_embd')}, lr "
                   f"{vals_of(items, 'train.learning_rate')} per variant, {vals_of(items, 'train.max_iters')} steps, "
                   f"{seeds_of(items)}; per lr: steps to val <= {target:g} nats/char, mean ± sd (evaluated every "
                   f"{vals_of(items, 'train.eval_interval')} steps; — = not reached by every seed) / best val loss; "
                   "each variant at its lr of fewest mean steps (a seed not reaching counts as the budget + one "
                   "evaluation; an sd below the evaluation grid's rounding, eval_interval/sqrt(12), counts as that); "
                   f"yes = ReZero fewer steps than every other variant; {TESTS_NOTE}",
                   "; ".join(parts) + ". Best: " + "; ".join(summary) + (f". {compared_text(test)}" if test else "")],
                  test, why)
