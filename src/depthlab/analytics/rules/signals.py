"""Facts about a run that more than one rule reads, each measured in one place.

The rules do not read each other's findings: where one rule's judgement depends on another's
(a diverged run is not also "overfitting"; vanishing gradients explain tiny updates; the
learning-rate advice of a remedy), both read the same fact from here.
"""

from __future__ import annotations

import math
import statistics
from typing import Optional

from ...units import counted
from ...usermodel import MODEL_LOGITS
from ...units import finite_or_none
from .evidence import Evidence, written_number

__all__ = ["divergence", "init_too_high", "block_grad_ratio", "vanishing", "update_ratio_median", "lr_verdict",
           "NO_GRAD_FROM_STEP", "grad_records_judged", "zero_grad_params"]

_NONFINITE_KEYS = ("loss", "train_loss", "val_loss", "grad_2.0_norm_total", "grad_norm")


def divergence(ev: Evidence) -> list[str]:
    """Every sign that the run diverged, in words; empty when there is none.

    Non-finite losses or gradients (skipped steps counted over the whole run), a val loss above
    the uniform baseline ln V, or a train loss that grew far above its minimum.
    """
    signs = []
    skipped = _nonfinite_skips(ev)
    if skipped:
        signs.append(skipped)
    for r in ev.records:
        # a number written as NaN/inf (finite_or_none reads it as None; a missing key is no sign)
        bad = [k for k in _NONFINITE_KEYS if k in r and written_number(r[k]) and finite_or_none(r[k]) is None]
        if bad:
            signs.append(f"{bad[0]} is {r[bad[0]]} at step {r['step']}")
            break
    v_size = ev.section("model").get("vocab_size")
    first = next((v for s, v in ev.val_losses if s == 0), None)
    if isinstance(v_size, int) and v_size > 1:  # worse than guessing uniformly: the run blew up at some point
        worst = max(((s, v) for s, v in ev.val_losses if s > 0), key=lambda sv: sv[1], default=None)
        # above ln V from the start and never rose: the initialisation (a model's own output scale), not a
        # blow-up, however far above ln V it started (init_too_high judges starts more than init_excess above)
        if first is not None and worst is not None and worst[1] <= first + ev.thresholds.exploding_growth:
            worst = None
        if worst is not None and _train_falls_to(ev, worst[0]):  # memorising a tiny corpus: overfitting's to judge
            worst = None
        if worst is not None and worst[1] > math.log(v_size) + ev.thresholds.exploding_growth:
            signs.append(f"val loss {worst[1]:.3f} at step {worst[0]} is above the uniform baseline "
                         f"ln V = {math.log(v_size):.3f}: the model was worse than guessing")
    train = [(r["step"], v) for r, v in ((r, finite_or_none(r["train_loss"])) for r in ev.evals) if v is not None]
    if len(train) >= 3:
        lo_step, lo = min(train, key=lambda t: t[1])
        last_step, last = train[-1]
        if last - lo > ev.thresholds.exploding_growth:
            shown = f"{last:.3f}" if last < 1e4 else f"{last:.3g}"
            signs.append(f"train loss rose from its minimum {lo:.3f} (step {lo_step}) to {shown} at step {last_step}")
    return signs


def _train_falls_to(ev: Evidence, step: int) -> bool:
    """Whether the train loss at ``step``'s evaluation is below the first evaluation's by more than
    ``exploding_growth``: a val loss rising above ln V while the train loss falls is a model memorising its train
    split (a 12-character corpus), not a blow-up that a lower learning rate cures."""
    train = {r["step"]: finite_or_none(r.get("train_loss")) for r in ev.evals if "step" in r}
    first = next((v for _, v in sorted(train.items()) if v is not None), None)
    at = train.get(step)
    return first is not None and at is not None and at < first - ev.thresholds.exploding_growth


def init_too_high(ev: Evidence) -> Optional[tuple[float, float]]:
    """(val loss at step 0, ln V) when the first evaluation, before any update, is already more than
    ``thresholds.init_excess`` above the uniform baseline ln V (the output scale at initialisation); else None.
    A model.source model with more logits than tokens (config.json ``resolved.model_logits``, a padded vocabulary)
    starts near ln of its logits' count: that is its V here."""
    v_size = ev.section("resolved").get(MODEL_LOGITS) or ev.section("model").get("vocab_size")
    first = next((v for s, v in ev.val_losses if s == 0), None)
    if not isinstance(v_size, int) or v_size < 2 or first is None:
        return None
    return (first, math.log(v_size)) if first > math.log(v_size) + ev.thresholds.init_excess else None


def _nonfinite_skips(ev: Evidence) -> Optional[str]:
    """"N optimizer steps skipped ..." from the skip events and ``summary.json``, or None if none."""
    skips = [r for r in ev.records if r.get("nonfinite_skip")]
    counts = [int(c) for c in (finite_or_none(r.get("nonfinite_skips")) for r in skips) if c is not None]
    total = max(counts + [len(skips), int(finite_or_none((ev.summary or {}).get("nonfinite_skips")) or 0)])
    if total == 0:
        return None
    steps = [r["step"] for r in skips if "step" in r]
    where = f", first at step {steps[0]}, last at step {steps[-1]}" if steps else ""
    return (f"{counted(total, 'optimizer step')} skipped for a non-finite loss or gradient "
            f"(train.on_nonfinite skip{where})")


def block_grad_ratio(ev: Evidence) -> Optional[tuple[float, list[int]]]:
    """Median over the grad records after the warmup (all of them when none is after it) of the first/last block
    gradient-norm ratio, and their steps; None when no record has two blocks with finite norms (the last one
    positive).

    The warmup's records are the gradients near initialisation, level in a plain stack that collapses later (what
    ``depthlab probe`` measures): counted, they lifted a plain 8 x 32's median to 0.0103 over the 1e-2 line while
    half of its records were at 1e-4 and the report's figure showed block 0 starved."""
    ratios, steps = [], []
    for r in ev.grads_after_warmup or ev.grads:
        g = [finite_or_none(v) for v in r.get("grad_norm_block") or []]
        if len(g) < 2 or g[0] is None or g[-1] is None or g[-1] <= 0:
            continue
        ratios.append(g[0] / g[-1])
        steps.append(r["step"])
    return (statistics.median(ratios), steps) if ratios else None


def blockless_words(ev: Evidence, who: str, what: str, holds: str) -> str:
    """Why a rule cannot judge a run whose gradient records hold no blocks: ``who`` needs ``what``, and none of the
    run's records ``holds`` it, because no parameter of the model sits in a numbered list of blocks."""
    source = ev.section("model").get("source")
    model = f"model.source {source}" if source else "the model"
    return (f"{who} {what}, and none of the run's {len(ev.grads)} gradient records {holds}: no parameter of {model} "
            "sits in a numbered list of blocks (such as blocks.0.attn.weight); keep the blocks in an nn.ModuleList to "
            "have them measured")


def vanishing(ev: Evidence) -> bool:
    """True when the median first/last block gradient-norm ratio is below ``vanishing_ratio`` and above 0: a first
    block whose gradient is exactly 0 is cut from the graph (a ``.detach()`` after it), not starved by depth, and
    ``no_gradient`` names it (its "add a shortcut" remedies went to a model that had them)."""
    ratio = block_grad_ratio(ev)
    return ratio is not None and 0 < ratio[0] < ev.thresholds.vanishing_ratio


ADAMW_SIDE = ("embeddings", "head")
"""The components AdamW trains on a Muon run (at ``train.learning_rate``) whose update ratio is recorded: the token
(and position) embeddings and an untied head; the norms' gains and biases are AdamW's too, but start at 1 and 0."""


def adamw_ratio_median(ev: Evidence) -> Optional[float]:
    """On a Muon run, the median over the records the lr rules judge (``Evidence.lr_judged_grads``) of the
    :data:`ADAMW_SIDE` components' update/weight ratio (``update_ratio_component``); None on another run or with
    fewer than ``lr_min_records``."""
    if not ev.muon:
        return None
    vals = []
    for r in ev.lr_judged_grads:
        comp = r.get("update_ratio_component")
        if not isinstance(comp, dict):
            continue
        u = [v for v in (finite_or_none(comp.get(c)) for c in ADAMW_SIDE) if v is not None and v > 0]
        if u:
            vals.append(statistics.median(u))
    return statistics.median(vals) if len(vals) >= ev.thresholds.lr_min_records else None


def adamw_low(ev: Evidence) -> bool:
    """True on a Muon run whose embeddings (and head), trained by AdamW, move less than ``lr_low`` of their weight
    per step: ``train.learning_rate`` too low (seen: 1e-7, val loss above the unigram line, while the blocks,
    Muon's, moved at train.muon_lr's rate and lr_too_low said nothing)."""
    med = adamw_ratio_median(ev)
    return med is not None and med < ev.thresholds.lr_low


def update_ratio_median(ev: Evidence, low: bool = False) -> Optional[float]:
    """Median over the records the lr rules judge (``Evidence.lr_judged_grads``) of their median update/weight
    ratio (None: none); ``low``: of the ratios ``lr_too_low`` judges (``Evidence.low_ratios``)."""
    vals = (ev.low_ratios if low else ev.update_ratios)[0]
    return statistics.median(vals) if vals else None


def lr_verdict(ev: Evidence) -> Optional[str]:
    """"high" / "low" when ``lr_min_records`` or more ratios put the median above ``lr_high`` /
    below ``lr_low`` (what ``lr_too_high`` / ``lr_too_low`` judge; "low" on ``Evidence.low_ratios``); None
    otherwise."""
    th = ev.thresholds
    if len(ev.update_ratios[0]) >= th.lr_min_records and update_ratio_median(ev) > th.lr_high:
        return "high"
    if len(ev.low_ratios[0]) >= th.lr_min_records and update_ratio_median(ev, low=True) < th.lr_low:
        return "low"
    return None


NO_GRAD_FROM_STEP = 2
"""The first gradient record :func:`zero_grad_params` reads: step 1's gradients are those at
initialisation, where a zero-initialised gate (ReZero's alpha) leaves its blocks without a gradient
by design; after one update it opens."""


def grad_records_judged(ev: Evidence) -> list[dict]:
    """The ``kind: grad`` records from step :data:`NO_GRAD_FROM_STEP` on."""
    return [r for r in ev.grads if int(r.get("step", 0)) >= NO_GRAD_FROM_STEP]


def zero_grad_params(ev: Evidence) -> tuple[list[str], int, list[int]]:
    """(parameters whose gradient norm is exactly 0 in every judged gradient record, parameters
    recorded, the records' steps).

    A record holds ``grad_2.0_norm/<name>`` for every trainable parameter, 0.0 both for a gradient
    that is None (the parameter never reached the loss) and for one that is all zero; neither
    can be told apart afterwards, and neither learns. A parameter missing from some record is
    not judged.
    """
    recs = grad_records_judged(ev)
    if not recs:
        return [], 0, []
    prefix = "grad_2.0_norm/"
    names = [k[len(prefix):] for k in recs[0] if k.startswith(prefix)]
    zero = [n for n in names if all(written_number(r.get(prefix + n)) and float(r[prefix + n]) == 0.0 for r in recs)]
    return zero, len(names), [int(r["step"]) for r in recs]
