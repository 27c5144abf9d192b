"""Rules on the loss curves: ``bigram_stuck`` (and its config-only case), ``exploding``,
``overfitting``, ``plateau``."""

from __future__ import annotations

import math
from typing import Optional

from ...units import finite_or_none
from .advice import lr_advice, wiring_advice, wiring_has
from .evidence import Evidence, Finding
from .rule import BASELINES, LATE_EVAL, OVERFIT_EVALS, PLATEAU_EVALS, rule
from .signals import divergence

__all__ = ["loss_level", "no_context", "bigram_stuck", "exploding", "overfitting", "plateau"]


def loss_level(best: float, baselines: dict, margin: float) -> tuple[str, str]:
    """Where a validation loss sits among the corpus baselines, in words.

    Args:
        best: a validation loss (nats/char).
        baselines: ``baselines.json`` content (``uniform``, ``unigram``, ``bigram`` with ``nats``).
        margin: nats; a loss within this of a baseline counts as at that level.

    Returns:
        ``(short, long)``: ``short`` is one of ``"at uniform"``, ``"at unigram"``,
        ``"above bigram"``, ``"within margin of bigram"``, ``"below bigram"``; ``long`` says what
        the level means, with the numbers.
    """
    uni, ug, bg = (float(baselines[k]["nats"]) for k in ("uniform", "unigram", "bigram"))
    if best >= uni - margin:
        return "at uniform", (f"best val loss {best:.3f} nats is at the uniform level ln V = {uni:.3f} (within "
                              f"{margin:g}): the model has not even learned the character frequencies")
    if best >= ug - margin:
        return "at unigram", (f"best val loss {best:.3f} nats is at the unigram level {ug:.3f} (within {margin:g}): "
                              "the model predicts character frequencies and uses no context at all, not even the "
                              f"previous character (bigram baseline {bg:.3f})")
    if best >= bg:
        return "above bigram", (f"best val loss {best:.3f} nats is {best - bg:.3f} above the bigram baseline "
                                f"{bg:.3f} (unigram {ug:.3f}), so the model uses less than what the previous "
                                "character tells")
    if best >= bg - margin:
        return "within margin of bigram", (f"best val loss {best:.3f} nats is within {margin:g} of the bigram baseline "
                                           f"{bg:.3f} ({bg - best:.3f} below it; unigram {ug:.3f}): the model uses "
                                           "little context beyond the previous character")
    return "below bigram", f"best val loss {best:.3f} nats is {bg - best:.3f} below the bigram baseline {bg:.3f}"


# ---------------------------------------------------------------------------------- bigram_stuck
@rule("bigram_stuck")
def no_context(ev: Evidence) -> Optional[Finding]:
    """``model.block_size`` 1: no training takes the model past a bigram table; judged from the
    config alone (no steps or baselines needed). Ahead of :data:`bigram_stuck` in the rule set."""
    if ev.section("model").get("block_size") != 1:
        return None
    txt = ("model.block_size is 1: every prediction sees only the current character, so no amount of training "
           "takes this model past a bigram table")
    if ev.baselines and "bigram" in ev.baselines:
        txt += f" (bigram baseline {float(ev.baselines['bigram']['nats']):.3f} nats is its floor)"
    if ev.val_losses:
        txt += f"; best val loss {min(v for _, v in ev.val_losses):.3f} nats after {ev.val_losses[-1][0]} steps"
    return Finding("bigram_stuck", txt, "raise model.block_size (e.g. 64-256) so the model can see context; a "
                   "one-character window is exactly a bigram model")


@rule("bigram_stuck", needs=(LATE_EVAL, BASELINES))
def bigram_stuck(ev: Evidence) -> Optional[Finding]:
    """Best val loss not below the bigram baseline - margin after enough steps and tokens."""
    th = ev.thresholds
    best = min((v for _, v in ev.val_losses), default=math.inf)
    if best < float(ev.baselines["bigram"]["nats"]) - th.bigram_margin:
        return None
    last = ev.late_evals()[-1]
    tokens = last.get("tokens_seen")
    when = f"after {last['step']} steps" + (f" and {tokens:,} tokens" if tokens is not None else "")
    ev_txt = f"{when}: " + (loss_level(best, ev.baselines, th.bigram_margin)[1] if math.isfinite(best)
                            else "no finite validation loss")
    return Finding("bigram_stuck", ev_txt, _bigram_remedy(ev, last))


def _bigram_remedy(ev: Evidence, last: dict) -> str:
    """Remedies for ``bigram_stuck`` that the run does not already have."""
    parts = []
    wiring = wiring_advice(ev)
    if wiring:
        parts.append(wiring)
    lr = lr_advice(ev)
    if lr:
        parts.append(f"{lr} train.learning_rate{ev.now('train.learning_rate')}: the update/weight ratios "
                     f"say it is too {'high' if lr == 'lower' else 'low'}")
    block = ev.section("model").get("block_size")
    if isinstance(block, int) and block < 16:
        parts.append(f"raise model.block_size (now {block}; a short window holds little context)")
    parts.append(f"train longer ({last['step']} steps so far)")
    parts.append("check rank collapse and attention entropy (depthlab probe; the report's activation figures)")
    has = wiring_has(ev)
    return "; ".join(parts) + (f"; not the wiring: {has}" if has and not wiring else "")


# ---------------------------------------------------------------------------------- exploding
@rule("exploding")
def exploding(ev: Evidence) -> Optional[Finding]:
    """Non-finite losses or gradients (skipped steps counted over the whole run), a val loss above
    ln V, or a train loss that grew far above its minimum; the evidence lists every sign found."""
    signs = divergence(ev)
    if not signs:
        return None
    t = ev.section("train")
    lr = t.get("learning_rate")
    parts = [f"lower train.learning_rate{ev.now('train.learning_rate')}"
             + (f", e.g. to {lr / 3:.2g}" if isinstance(lr, (int, float)) and lr > 0 else " (try / 3)"),
             f"raise train.warmup_iters{ev.now('train.warmup_iters')}"]
    clip = t.get("grad_clip")
    if clip is None or clip == 0 or clip > 1.0:
        parts.append(f"clip gradients at train.grad_clip 1.0{ev.now('train.grad_clip')}")
    wiring = wiring_advice(ev)
    if wiring:
        parts.append(wiring)
    return Finding("exploding", "; ".join(signs), "; ".join(parts))


# ---------------------------------------------------------------------------------- overfitting, plateau
@rule("overfitting", needs=(OVERFIT_EVALS,))
def overfitting(ev: Evidence) -> Optional[Finding]:
    """val - train gap above ``overfit_gap``, grown by ``overfit_growth`` over the last evals,
    while val loss no longer improves (the last val is not below the window's earlier best).

    A gap that grows while val still falls is the usual train/val shift of a small corpus, not
    harm: stopping then would give a worse model. A diverged run (see ``exploding``), or one
    whose train loss is above the uniform baseline ln V, has fitted nothing: never overfitting.
    """
    th = ev.thresholds
    recent = [(s, v, v - t) for s, v, t in ev.loss_pairs[-th.overfit_window:]]
    gaps = [g for _, _, g in recent]
    growing = all(b >= a for a, b in zip(gaps, gaps[1:])) and gaps[-1] - gaps[0] >= th.overfit_growth
    still_improving = recent[-1][1] < min(v for _, v, _ in recent[:-1]) - 1e-3
    if gaps[-1] <= th.overfit_gap or not growing or still_improving or divergence(ev):
        return None
    uniform = finite_or_none(((ev.baselines or {}).get("uniform") or {}).get("nats"))
    if uniform is not None and recent[-1][1] - recent[-1][2] > uniform:
        return None  # train loss above ln V: diverged, not overfitted
    return Finding("overfitting", f"val - train gap grew from {gaps[0]:.3f} (step {recent[0][0]}) to "
                   f"{gaps[-1]:.3f} nats (step {recent[-1][0]})", _overfit_remedy(ev))


def _overfit_remedy(ev: Evidence) -> str:
    """Regularisation the run does not have yet (patience, dropout, weight decay), then size/data."""
    t, m = ev.section("train"), ev.section("model")
    parts = []
    if t.get("patience"):
        parts.append(f"train.patience is {t['patience']}, so training stops after that many evaluations without "
                     "improvement and sample uses the best checkpoint")
    else:
        parts.append("stop earlier (train.patience 3 stops after 3 evaluations without improvement; sample uses "
                     "the best checkpoint)")
    drop = m.get("dropout")
    parts.append("add model.dropout 0.1-0.2" if not drop else f"raise model.dropout (now {drop:g})")
    parts.append(f"raise train.weight_decay{ev.now('train.weight_decay')}")
    parts.append("use a smaller model or more data")
    return "; ".join(parts)


@rule("plateau", needs=(PLATEAU_EVALS,))
def plateau(ev: Evidence) -> Optional[Finding]:
    """The last ``plateau_evals`` evals did not beat the best val loss before them by ``plateau_tol``
    (a diverged run's flat val loss is the divergence, not a plateau)."""
    vals, n = ev.val_losses, ev.thresholds.plateau_evals
    before = min(v for _, v in vals[:-n])
    recent = min(v for _, v in vals[-n:])
    if recent < before - ev.thresholds.plateau_tol or divergence(ev):
        return None
    return Finding("plateau", f"no val improvement over the last {n} evals (steps {vals[-n][0]}-{vals[-1][0]}): "
                   f"best recent {recent:.4f} vs {before:.4f} before",
                   f"the model has converged for this size/LR: stop, decay the LR further (train.min_lr"
                   f"{ev.now('train.min_lr')}), or grow the model (model.n_layer, model.n_embd) or its "
                   "context (model.block_size)")
