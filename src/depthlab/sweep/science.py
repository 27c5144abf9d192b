"""Published claims and their verdicts, one function per experiment of the ``science`` profile.

Each function judges the experiment of the same name in ``profiles/science.yaml`` (the YAML
comment above each entry names its judge here) and returns one table row: claim, source,
setting, our numbers, verdict (a :class:`ClaimRow`, which also carries the comparisons behind
the verdict). A claim is a set of one-sided comparisons of *cells* (a grid point without its
seed: its runs differ only in ``train.seed``), each a Welch t-test over the seeds (Fisher's exact
test on the runs that did not finish ok where a cell has one), joined as :mod:`depthlab.sweep.stats`
says. The verdict is ``yes (p = 0.003, n = 4)``, ``no (p = ..., n = ...)``, ``undecided (p = 0.21,
n = 2): add seeds, about 6 per cell (...)`` or ``not run``; the rule behind each is in the judge's
docstring and, shortened, in the setting column, and was written before the runs it judges.
Each compared cell is shown as mean ± sd (n) with its 95 % t-interval. Losses are validation
cross-entropy in nats per character. Measured, never forced: a "no" means this small CPU setting
showed the opposite at alpha 0.05, "undecided" that its seeds cannot tell.

Every judge takes ``(items, extra)``: the experiment's per-run dicts (``config``, ``row``,
``details``, see :func:`depthlab.sweep.results.sweep_items`) and its extra settings from the
profile (``target_val_loss``). :func:`write_science_table` writes the table as Markdown
(``SWEEP_DIR/science.md``), which is what README's science table is pasted from;
:func:`depthlab.sweep.seeds.seeds_wanted` reads the same rows for ``depthlab sweep --seeds auto``.
"""

from __future__ import annotations

import math
import statistics as st
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..rundir import atomic_write
from ..units import finite_or_none, fmt_value
from .results import OK_STATUSES, field_value, sweep_items
from .stats import (ALPHA, All, Any as AnyOf, Leaf, Node, cell_stats, fewer_failures, fmt_p, greater, leaves,
                    p_yes, verdict, welch_greater)

__all__ = ["CLAIMS", "CLAIM_HEADER", "SCIENCE_MD", "ClaimRow", "science_claims", "claims_markdown",
           "write_science_table", "rank_init", "degradation", "depth_helps", "postln_warmup",
           "rezero_speed", "deepnorm_depth", "dyt_matches", "dyt_lr_window", "periln_stability", "lns_depth",
           "ablation_deltas", "init_last_rank", "init_grad_blocks",
           "steps_to"]

#: Column names of a claims row (the Markdown table and the HTML report use them).
CLAIM_HEADER = ["claim", "source", "setting", "our numbers", "verdict"]
#: The Markdown science table, written into the sweep directory.
SCIENCE_MD = "science.md"


# --------------------------------------------------------------------------- helpers
def _by(items: Sequence[dict], **want: Any) -> list[dict]:
    """Runs whose config has every ``section__field=value`` of ``want``."""
    return [it for it in items
            if all(field_value(it["config"], k.replace("__", ".")) == v for k, v in want.items())]


def _ok(it: dict) -> bool:
    return it["row"]["status"] in OK_STATUSES


def init_last_rank(it: dict) -> Optional[float]:
    """Rank measure (Dong et al. 2021) of the last block at initialisation.

    Args:
        it: a per-run dict with ``details`` (``init_probe``, ``probe``).

    Returns:
        The relative residual from rank one (0 = collapsed, dimensionless), from the init probe or
        else the step-0 activation probe; None when neither recorded it.
    """
    d = it["details"]
    p0 = [p for p in d["probe"] if p.get("step") == 0]
    vec = (d.get("init_probe") or {}).get("rank_measure") or (p0[0]["rank_measure"] if p0 else None)
    return finite_or_none(vec[-1]) if vec else None


def init_grad_blocks(it: dict) -> Optional[list[float]]:
    """Gradient L2 norm per block at initialisation (the sweep's init probe, same as ``depthlab probe``).

    Args:
        it: a per-run dict with ``details["init_probe"]``.

    Returns:
        One norm per block (first block first), or None when it was not recorded.
    """
    vec = (it["details"].get("init_probe") or {}).get("grad_norm_block")
    vals = [finite_or_none(v) for v in vec] if vec else []
    return vals if vals and all(v is not None for v in vals) else None


def steps_to(it: dict, target: float) -> Optional[int]:
    """Steps a run needed to reach a validation loss.

    Args:
        it: a per-run dict with ``details["evals"]`` (step, train loss, val loss).
        target: val loss to reach, in nats/char.

    Returns:
        The first evaluated step whose val loss is <= ``target``, or None if none was.
    """
    for s, _, v in it["details"]["evals"]:
        if finite_or_none(v) is not None and v <= target:
            return int(s)
    return None


def _vals(items: Sequence[dict], key: str) -> str:
    vs = sorted({field_value(it["config"], key) for it in items}, key=lambda v: (str(type(v)), v))
    return ", ".join(fmt_value(v, "g", missing="None") for v in vs)


def _sorted_values(items: Sequence[dict], key: str) -> list:
    return sorted({field_value(it["config"], key) for it in items if field_value(it["config"], key) is not None})


def _seeds(items: Sequence[dict]) -> str:
    """``seeds 1, 2`` (or ``seed 1``) of the runs."""
    s = _sorted_values(items, "train.seed")
    return ("seed " if len(s) == 1 else "seeds ") + ", ".join(map(str, s))


# --------------------------------------------------------------------------- cells and their tests
#: How every verdict is reached, as the setting column says it (the rules are in :mod:`.stats`).
TESTS_NOTE = ("one-sided Welch t-test per comparison (Fisher's exact test on runs not ok where a cell has one), "
              "alpha 0.05; CI = 95% t-interval")


class ClaimRow(list):
    """A claims row ``[claim, source, setting, our numbers, verdict]`` (text) that also carries its test.

    Attributes:
        test: the comparisons behind the verdict (:mod:`depthlab.sweep.stats` nodes), None when not run.
    """

    test: Optional[Node] = None


def _claim(texts: Sequence[str], test: Optional[Node], verdict_text: Optional[str] = None) -> ClaimRow:
    row = ClaimRow([*texts, verdict_text or verdict(test)])
    row.test = test
    return row


def _losses(items: Sequence[dict]) -> list[float]:
    """Best val losses (nats/char) of the runs that finished ok."""
    return [v for v in (finite_or_none(it["row"].get("best_val_loss")) for it in items if _ok(it)) if v is not None]


def _short(values: Sequence[float], spec: str = ".3f") -> str:
    cs = cell_stats(values)
    return cs.short(spec) if cs else "—"


def _cell_short(items: Sequence[dict]) -> str:
    """``2.006 ± 0.053`` of a cell's best val losses, ``diverged`` when no run finished ok."""
    bad = sum(not _ok(it) for it in items)
    if bad and bad == len(items):
        return "diverged" if any(it["row"]["status"] == "nonfinite" for it in items) else "not ok"
    return _short(_losses(items)) + (f" ({bad} of {len(items)} not ok)" if bad else "")


def _loss_leaf(label: str, a: Sequence[dict], b: Sequence[dict], margin: float = 0.0,
               names: tuple = ("a", "b")) -> Leaf:
    """The leaf "best val loss of cell a > cell b + margin" (Welch); when a run of either cell did not
    finish ok (a diverged run has no loss), Fisher's exact test that cell b fails less often than a."""
    fa, fb = (sum(not _ok(it) for it in x) for x in (a, b))
    if fa or fb:
        return fewer_failures(f"{label} (by runs not ok)", fb, len(b), fa, len(a), items=(b, a),
                              names=names[::-1])
    return greater(label, _losses(a), _losses(b), margin, items=(a, b), names=names)


def _side(lf: Leaf, i: int) -> str:
    if lf.kind == "fisher":
        fail, n = lf.counts[2 * i], lf.counts[2 * i + 1]
        return f"{lf.names[i]} {fail} of {n} not ok"
    cs = cell_stats(lf.values[i])
    return f"{lf.names[i]} {cs.text() if cs else '—'}"


def _compared(node: Node) -> str:
    """``compared: <label>: <cell a> vs <cell b>, p = 0.03; ...`` for every comparison of a claim."""
    parts = [f"{lf.label}: {_side(lf, 0)} vs {_side(lf, 1)}, "
             + (fmt_p(lf.p_yes) if lf.p_yes is not None else "untested (a cell has one run)")
             for lf in leaves(node)]
    return "compared: " + "; ".join(parts)


def _grid_text(items: Sequence[dict], value) -> str:
    """``plain: L1 2.386 ± 0.115, L2 ...; prenorm: ...`` (mean ± sd over seeds of ``value(cell items)``)."""
    depths = _sorted_values(items, "model.n_layer")
    return "; ".join(f"{v}: " + ", ".join(f"L{L} {value(_by(items, model__variant=v, model__n_layer=L))}"
                                         for L in depths if _by(items, model__variant=v, model__n_layer=L))
                     for v in _sorted_values(items, "model.variant"))


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
    depths, variants = _sorted_values(items, "model.n_layer"), _sorted_values(items, "model.variant")
    test = None
    if "plain" in variants and len(depths) > 1:
        d0, d1 = depths[0], depths[-1]
        p0, p1 = (_by(items, model__variant="plain", model__n_layer=L) for L in (d0, d1))
        kids = [greater(f"plain L{d1} < half of L{d0}", [0.5 * r for r in _ranks(p0)], _ranks(p1),
                        items=(p0, p1), names=(f"half of L{d0}", f"L{d1}"))]
        for v in variants:
            if v != "plain":
                sel = _by(items, model__variant=v, model__n_layer=d1)
                kids.append(greater(f"{v} L{d1} > 5x plain", _ranks(sel), [5 * r for r in _ranks(p1)],
                                    items=(sel, p1), names=(v, "5x plain")))
        test = All(kids)
    nums = _grid_text(items, lambda sel: _short(_ranks(sel)))
    return _claim(["Rank collapse without skips: at init the last-block rank measure of a plain stack falls towards 0 "
                   "with depth; residual variants stay well above",
                   "Dong et al. 2021, Attention is not all you need (ICML)",
                   f"depths {', '.join(map(str, depths))}, at init, mean ± sd over {_seeds(items)}; yes = plain's "
                   "deepest < half its shallowest and every residual variant's deepest > 5x plain's deepest; "
                   + TESTS_NOTE, nums + (f". {_compared(test)}" if test else "")], test)


def _by_depth(items: Sequence[dict], v: str) -> dict[int, list[dict]]:
    return {L: _by(items, model__variant=v, model__n_layer=L) for L in _sorted_values(_by(items, model__variant=v),
                                                                                      "model.n_layer")}


def _best_shallower(cells: dict[int, list[dict]]) -> Optional[int]:
    """The shallower depth (not the deepest) with the lowest mean best val loss, None if none finished."""
    deep = max(cells)
    means = [(st.mean(_losses(c)), L) for L, c in cells.items() if L < deep and _losses(c)]
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
    for v in _sorted_values(items, "model.variant"):
        cells = _by_depth(items, v)
        best = _best_shallower(cells) if len(cells) > 1 else None
        if best is None:
            continue
        deep = max(cells)
        if v == "plain":
            kids.insert(0, _loss_leaf(f"plain L{deep} > L{best} + 0.1", cells[deep], cells[best], 0.1,
                                      (f"L{deep}", f"L{best}")))
        else:
            kids.append(_loss_leaf(f"{v} L{deep} < L{best} + 0.02", cells[best], cells[deep], -0.02,
                                   (f"L{best}", f"L{deep}")))
    test = All(kids) if kids and "plain" in _sorted_values(items, "model.variant") else None
    return _claim(["Degradation: plain gets worse with depth at an equal step budget, residual variants do not",
                   "He et al. 2016, Deep residual learning (CVPR; shown there for CNNs)",
                   f"width {_vals(items, 'model.n_embd')}, lr {_vals(items, 'train.learning_rate')}, "
                   f"{_vals(items, 'train.max_iters')} steps, best val loss (nats/char), mean ± sd over "
                   f"{_seeds(items)}; yes = deepest plain > best shallower + 0.1 and every residual variant's "
                   f"deepest < its best shallower + 0.02; {TESTS_NOTE}",
                   _grid_text(items, _cell_short) + (f". {_compared(test)}" if test else "")], test)


def _doublings(cells: dict[int, list[dict]]) -> str:
    """Per depth step of pre-LN: the change of mean loss and the one-sided p of a fall (reported, not judged)."""
    out, depths = [], sorted(cells)
    for a, b in zip(depths, depths[1:]):
        la, lb = _losses(cells[a]), _losses(cells[b])
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
        test = All([_loss_leaf(f"pre-LN L{p1} < L{p0}", pre[p0], pre[p1], 0.0, (f"L{p0}", f"L{p1}")),
                    _loss_leaf(f"plain L{q1} > L{q0} + 0.1", plain[q1], plain[q0], 0.1, (f"L{q1}", f"L{q0}"))])
    steps = _doublings(pre) if len(pre) > 2 else ""
    nums = _grid_text(items, _cell_short) + (f". {_compared(test)}" if test else "") + (f". {steps}" if steps else "")
    return _claim(["With shortcuts, depth helps: pre-LN's best val loss falls as blocks are added while plain's rises",
                   "He et al. 2016 (deeper residual nets are better, plain ones worse)",
                   f"width {_vals(items, 'model.n_embd')}, lr {_vals(items, 'train.learning_rate')}, "
                   f"{_vals(items, 'train.max_iters')} steps for every depth, mean ± sd over {_seeds(items)}; yes = "
                   f"pre-LN's deepest < its shallowest and plain's deepest > its shallowest + 0.1; {TESTS_NOTE}",
                   nums], test)


def _init_grad_note(items: Sequence[dict]) -> str:
    """Gradient scale at init from the probe: post-LN's last block vs pre-LN's, per depth and init."""
    notes = []
    for L in _sorted_values(items, "model.n_layer"):
        for init in _sorted_values(items, "model.init"):
            g = {}
            for v in ("postnorm", "prenorm"):
                gs = [x for x in (init_grad_blocks(it) for it in _by(items, model__variant=v, model__n_layer=L,
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
    for L in _sorted_values(items, "model.n_layer"):
        for lr in _sorted_values(items, "train.learning_rate"):
            for init in _sorted_values(items, "model.init"):
                cell = _by(items, model__n_layer=L, train__learning_rate=lr, model__init=init)
                if not cell:
                    continue
                post0, post1, pre0 = (_by(cell, model__variant=v, train__warmup_iters=w) for v, w in
                                      (("postnorm", warms[0]), ("postnorm", warms[-1]), ("prenorm", warms[0])))
                where = f"L{L} lr {lr:g} {init}"
                test = All([_loss_leaf(f"{where}: post-LN warmup {warms[0]} > warmup {warms[-1]} + 0.1", post0, post1,
                                       0.1, (f"warmup {warms[0]}", f"warmup {warms[-1]}")),
                            _loss_leaf(f"{where}: pre-LN warmup {warms[0]} < post-LN warmup {warms[-1]} + 0.1", post1,
                                       pre0, -0.1, ("post-LN", "pre-LN"))])
                text = (f"{where}: post-LN warmup {warms[0]} {_cell_short(post0)}, warmup {warms[-1]} "
                        f"{_cell_short(post1)}; pre-LN warmup {warms[0]} {_cell_short(pre0)}")
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
    warms = _sorted_values(items, "train.warmup_iters")
    cells = _warmup_cells(items, warms) if len(warms) > 1 else []
    test = AnyOf([t for _, _, t in cells]) if cells else None
    hits = sorted({init for init, _, t in cells if (p_yes(t) or 1.0) * len(cells) < ALPHA})
    parts = [text + (" [needs warmup]" if (p_yes(t) or 1.0) * len(cells) < ALPHA else "") for _, text, t in cells]
    v = verdict(test)
    if v.startswith("yes (") and hits:
        v = v[:-1] + f"; {', '.join(hits)} init)"
    note = _init_grad_note(items)
    return _claim(["Post-LN needs warmup: without warmup post-LN trains badly or diverges where post-LN with warmup "
                   "and pre-LN train",
                   "Xiong et al. 2020, On layer normalization in the Transformer architecture (ICML)",
                   f"{_vals(items, 'model.n_layer')} blocks, width {_vals(items, 'model.n_embd')}, Adam lr "
                   f"{_vals(items, 'train.learning_rate')}, warmup {_vals(items, 'train.warmup_iters')} steps, init "
                   f"{_vals(items, 'model.init')}, {_vals(items, 'train.max_iters')} steps, best val loss (nats/char), "
                   f"mean ± sd over {_seeds(items)}; yes = in some cell (depth, lr, init) post-LN without warmup > "
                   "with warmup + 0.1 (or diverges more often) and pre-LN without warmup < warmed-up post-LN + 0.1 "
                   f"(Bonferroni over the cells); {TESTS_NOTE}",
                   "; ".join(parts) + (f". {_compared(test)}" if test else "") + (f". {note}" if note else "")],
                  test, v)


def _tokens_per_step(items: Sequence[dict]) -> Optional[int]:
    """Training tokens per optimizer step (batch x accumulation x context) of the first run, or None."""
    t, m = items[0]["config"]["train"], items[0]["config"]["model"]
    if not t.get("batch_size") or not m.get("block_size"):
        return None
    return int(t["batch_size"] * t.get("grad_accum", 1) * m["block_size"])


def _steps_censored(it: dict, target: float) -> float:
    """Steps to the target, or ``max_iters + eval_interval`` for a run that never reached it (a lower bound)."""
    s = steps_to(it, target) if _ok(it) else None
    t = it["config"]["train"]
    return float(s) if s is not None else float(t["max_iters"] + t["eval_interval"])


def _rezero_variant(items: Sequence[dict], v: str, target: float) -> tuple[str, Optional[tuple]]:
    """(text, (mean censored steps, lr, cell items) at the variant's best lr) of one variant."""
    cells, best = [], None
    for lr in _sorted_values(_by(items, model__variant=v), "train.learning_rate"):
        sel = _by(items, model__variant=v, train__learning_rate=lr)
        steps = [_steps_censored(it, target) for it in sel]
        reached = all(steps_to(it, target) is not None and _ok(it) for it in sel)
        cells.append(f"lr {lr:g} {_short(steps, 'g') if reached else '—'} / {_cell_short(sel)}")
        if best is None or st.mean(steps) < best[0]:
            best = (st.mean(steps), lr, sel)
    return f"{v}: " + ", ".join(cells), best


def rezero_speed(items: Sequence[dict], extra: dict) -> ClaimRow:
    """ReZero converges in fewer steps (Bachlechner et al. 2020, "ReZero is all you need").

    Each variant at its own best learning rate of the grid (fewest mean steps): the steps to val
    loss <= ``extra["target_val_loss"]`` (nats, default 2.6) per seed, a seed that never reaches it
    counted as ``max_iters + eval_interval`` (a lower bound: censored in the other variants' favour
    when ReZero is faster). yes = ReZero needs fewer steps than every other variant (one-sided
    Welch, alpha 0.05, all must hold); the best val loss at the budget is reported, not judged.

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``).
        extra: its extra settings from the profile (``target_val_loss`` in nats/char).

    Returns:
        The row; ``row.test`` holds the comparisons.
    """
    target = float((extra or {}).get("target_val_loss", 2.6))
    tps = _tokens_per_step(items) if items else None
    parts, best = [], {}
    for v in _sorted_values(items, "model.variant"):
        text, best[v] = _rezero_variant(items, v, target)
        parts.append(text)
    rz, test = best.get("rezero"), None
    if rz is not None and len(best) > 1:
        test = All([greater(f"{o} (lr {b[1]:g}) slower than rezero (lr {rz[1]:g})",
                            [_steps_censored(it, target) for it in b[2]], [_steps_censored(it, target) for it in rz[2]],
                            items=(b[2], rz[2]), names=(o, "rezero")) for o, b in best.items() if o != "rezero"])
    summary = [f"{v} lr {b[1]:g}: {b[0]:g} steps" + (f" ({b[0] * tps:,.0f} tokens)" if tps else "")
               for v, b in best.items() if b]
    return _claim(["ReZero trains faster: fewer steps (tokens) to a target loss than LayerNorm variants",
                   "Bachlechner et al. 2020, ReZero is all you need (arXiv:2003.04887)",
                   f"{_vals(items, 'model.n_layer')} blocks, width {_vals(items, 'model.n_embd')}, lr "
                   f"{_vals(items, 'train.learning_rate')} per variant, {_vals(items, 'train.max_iters')} steps, "
                   f"{_seeds(items)}; per lr: steps to val <= {target:g} nats/char, mean ± sd (evaluated every "
                   f"{_vals(items, 'train.eval_interval')} steps; — = not reached by every seed) / best val loss; "
                   "each variant at its lr of fewest mean steps (a seed not reaching counts as the budget + one "
                   f"evaluation); yes = ReZero fewer steps than every other variant; {TESTS_NOTE}",
                   "; ".join(parts) + ". Best: " + "; ".join(summary) + (f". {_compared(test)}" if test else "")],
                  test)


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
    for L in _sorted_values(items, "model.n_layer"):
        for lr in _sorted_values(items, "train.learning_rate"):
            a, b = (_by(items, model__variant=v, model__n_layer=L, train__learning_rate=lr) for v, _ in (base, new))
            if not a or not b:
                continue
            parts.append(f"L{L} lr {lr:g}: {base[1]} {_cell_short(a)}, {new[1]} {_cell_short(b)}")
            kids.append(_loss_leaf(f"L{L} lr {lr:g}: {new[1]} < {base[1]} + {margin:g}", a, b, -margin,
                                   (base[1], new[1])))
    return parts, kids


def _noninferior_claim(items: Sequence[dict], base: tuple[str, str], new: tuple[str, str], claim: str,
                       source: str) -> ClaimRow:
    """The row "``new`` is no worse than ``base`` in every (depth, lr) cell" (:func:`_noninferior_cells`, all
    must hold): the claims of DeepNorm over post-LN and of Peri-LN over pre-LN."""
    parts, kids = _noninferior_cells(items, base, new)
    test = All(kids) if kids else None
    return _claim([claim, source,
                   f"{_vals(items, 'model.n_layer')} blocks, width {_vals(items, 'model.n_embd')}, lr "
                   f"{_vals(items, 'train.learning_rate')}, {_vals(items, 'train.max_iters')} steps, best val loss "
                   f"(nats/char), mean ± sd over {_seeds(items)}; yes = {new[1]} < {base[1]} + 0.02 (or fails less "
                   f"often) at every depth and lr; {TESTS_NOTE}",
                   "; ".join(parts) + (f". {_compared(test)}" if test else "")], test)


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
    if layers is None and _ok(it) and it.get("run_dir"):
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
    cells = {ns: [(it, d) for it in _by(items, model__norm_scale=ns) if (d := ablation_deltas(it)) and len(d) > 1]
             for ns in (1, "depth")}
    parts = []
    for ns, name in ((1, "pre-LN"), ("depth", "pre-LN + LayerNorm Scaling")):
        if cells[ns]:
            halves = [_halves(d) for _, d in cells[ns]]
            parts.append(f"{name}: first half {_short([h[0] for h in halves], '.4f')}, last half "
                         f"{_short([h[1] for h in halves], '.4f')}, last/first "
                         f"{_short([_deep_share(d) for _, d in cells[ns]], '.2f')}")
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
    return _claim(["Deep pre-LN blocks contribute less than shallow ones, and LayerNorm Scaling changes that",
                   "Sun et al. 2025, The curse of depth in large language models (arXiv:2502.05795)",
                   f"pre-LN, {_vals(items, 'model.n_layer')} blocks, width {_vals(items, 'model.n_embd')}, "
                   f"{_vals(items, 'train.max_iters')} steps, norm_scale {_vals(items, 'model.norm_scale')}; per run "
                   "the mean block-ablation delta (depthlab layers, nats) of the first and the last half of the "
                   f"blocks, mean ± sd over {_seeds(items)}; yes = without scaling first half > last half, and "
                   f"last/first larger with LayerNorm Scaling; {TESTS_NOTE}",
                   "; ".join(parts) + (f". {_compared(test)}" if test else "")], test)


def _norm_lrs(items: Sequence[dict], norm: str) -> dict[float, list[dict]]:
    sel = _by(items, model__norm=norm)
    return {lr: _by(sel, train__learning_rate=lr) for lr in _sorted_values(sel, "train.learning_rate")}


def _best_lr(cells: dict[float, list[dict]]) -> Optional[float]:
    """The learning rate whose cell has the lowest mean best val loss (every run ok), or None."""
    ok = [(st.mean(_losses(c)), lr) for lr, c in cells.items() if c and all(_ok(it) for it in c)]
    return min(ok)[1] if ok else None


def _dyt_cells(items: Sequence[dict]) -> tuple[dict, dict, Optional[float], Optional[float], str]:
    """LayerNorm's and DyT's cells per lr, each one's best lr, and the per-lr text."""
    ln, dyt = _norm_lrs(items, "layernorm"), _norm_lrs(items, "dyt")
    text = "; ".join(f"{name}: " + ", ".join(f"lr {lr:g} {_cell_short(c)}" for lr, c in cells.items())
                     for name, cells in (("LayerNorm", ln), ("DyT", dyt)) if cells)
    return ln, dyt, _best_lr(ln), _best_lr(dyt), text


def _dyt_setting(items: Sequence[dict], rule: str) -> str:
    return (f"pre-LN, {_vals(items, 'model.n_layer')} blocks, width {_vals(items, 'model.n_embd')}, lr "
            f"{_vals(items, 'train.learning_rate')} per norm, {_vals(items, 'train.max_iters')} steps (equal for "
            f"both), best val loss (nats/char), mean ± sd over {_seeds(items)}; {rule}; {TESTS_NOTE}")


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
        test = All([_loss_leaf(f"DyT (lr {bd:g}) < LayerNorm (lr {bl:g}) + 0.02", ln[bl], dyt[bd], -0.02,
                               ("LayerNorm", "DyT"))])
    return _claim(["DyT matches LayerNorm at this scale: equal steps, each at its best lr",
                   "Zhu et al. 2025, Transformers without normalization (CVPR)",
                   _dyt_setting(items, "yes = DyT's best < LayerNorm's best + 0.02"),
                   text + (f". {_compared(test)}" if test else "")], test)


def dyt_lr_window(items: Sequence[dict], extra: dict) -> ClaimRow:
    """DyT is more sensitive to the learning rate than LayerNorm (Zhu et al. 2025 tune alpha0 with the lr
    for LLMs; users report DyT runs that do not train at LayerNorm's lr).

    The lr window of a norm is the set of grid lrs whose mean loss is within 0.05 nats of that norm's
    best lr's. yes = at some lr LayerNorm is inside its window (its loss < its best + 0.05) while DyT
    is outside its own (its loss > its best + 0.05, or runs not ok: Fisher), both one-sided at
    alpha 0.05 / (number of lrs) (Bonferroni over the lrs); no = at every lr one of the two is refuted.
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
        kids = [All([_loss_leaf(f"lr {lr:g}: LayerNorm < its best + 0.05", ln[bl], ln[lr], -0.05,
                                ("best", f"lr {lr:g}")),
                     _loss_leaf(f"lr {lr:g}: DyT > its best + 0.05", dyt[lr], dyt[bd], 0.05, (f"lr {lr:g}", "best"))])
                for lr in ln if lr in dyt and lr not in (bl, bd)]
        test = AnyOf(kids) if kids else None
    return _claim(["DyT is more sensitive to the learning rate than LayerNorm: a narrower lr window",
                   "Zhu et al. 2025, Transformers without normalization (CVPR; alpha0 and lr tuned together)",
                   _dyt_setting(items, "window = lrs within 0.05 of the norm's best; yes = some lr inside "
                                "LayerNorm's window and outside DyT's (Bonferroni over the lrs)"),
                   text + (f". {_compared(test)}" if test else "")], test)


#: Experiment name (in ``profiles/science.yaml``) -> its judges (one table row each), in table order.
#: ``depth`` gives two rows from the same runs: degradation (plain) and "depth helps" (pre-LN).
CLAIMS: dict[str, tuple[Callable[[Sequence[dict], dict], ClaimRow], ...]] = {
    "rank_init": (rank_init,), "depth": (degradation, depth_helps), "postln_warmup": (postln_warmup,),
    "rezero_speed": (rezero_speed,), "deepnorm_depth": (deepnorm_depth,),
    "dyt_lr": (dyt_matches, dyt_lr_window), "periln_stability": (periln_stability,), "lns_depth": (lns_depth,),
}


def science_claims(by_exp: dict[str, list[dict]], extras: dict[str, dict]) -> list[list[str]]:
    """Rows "claim, source, setting, our numbers, verdict" for the experiments that have a judge in :data:`CLAIMS`.

    Only experiments present (with runs) in ``by_exp`` give a row, in :data:`CLAIMS` order.

    Args:
        by_exp: experiment name -> per-run dicts (``config``, ``row``, ``details``).
        extras: experiment name -> its extra settings (e.g. ``target_val_loss`` in nats).

    Returns:
        Table rows of strings (columns :data:`CLAIM_HEADER`).
    """
    return [judge(by_exp[name], extras.get(name) or {}) for name, judges in CLAIMS.items() if by_exp.get(name)
            for judge in judges]


def claims_markdown(rows: Sequence[Sequence[str]]) -> str:
    """The claims as a Markdown table (columns :data:`CLAIM_HEADER`; ``|`` in a cell becomes ``/``).

    Args:
        rows: from :func:`science_claims`.

    Returns:
        The table text, ending with a newline; empty when there are no rows.
    """
    if not rows:
        return ""
    lines = ["| " + " | ".join(CLAIM_HEADER) + " |", "|" + "|".join("---" for _ in CLAIM_HEADER) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "/").replace("\n", " ") for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_science_table(sweep_dir: str | Path) -> Optional[str]:
    """Judge every experiment of a sweep that has a judge and write ``SWEEP_DIR/science.md``.

    Read from the run directories (:func:`depthlab.sweep.results.sweep_items`), so it works on a
    finished, a partial or a resumed sweep; README's science table is this file's table.

    Args:
        sweep_dir: a sweep directory.

    Returns:
        The Markdown table, or None when no experiment of the sweep has a judge (nothing written).

    Raises:
        DepthlabError: not a sweep directory.
        OSError: the sweep directory is not writable.
    """
    meta, _, _, items = sweep_items(sweep_dir)
    exps = meta["spec"]["experiments"]
    by_exp = {e["name"]: [it for it in items if it["experiment"] == e["name"]] for e in exps}
    table = claims_markdown(science_claims(by_exp, {e["name"]: e.get("extra") or {} for e in exps}))
    if not table:
        return None
    n = sum(len(v) for k, v in by_exp.items() if k in CLAIMS)  # runs behind the table
    text = (f"{table}\nLosses are validation cross-entropy in nats/char; {n} runs in {Path(sweep_dir)}.\n")
    atomic_write(Path(sweep_dir) / SCIENCE_MD, text.encode("utf-8"))
    return text

