"""Rules on the gradient and probe records: ``no_gradient``, ``vanishing_gradients``, ``lr_too_high`` /
``lr_too_low``, ``rank_collapse``, ``uniform_attention``."""

from __future__ import annotations

import math
from typing import Optional

from ...config import TrainConfig
from ...units import counted, finite_or_none
from .advice import (LONGER_KNOBS, MUON_RATIO, clear_of_collapse, depth_setting, dropout_advice, lr_advice, lr_knob,
                     source_wiring_advice, warmup_words, weight_decay_advice, wiring_advice, wiring_has)
from .context import USED, record_verdict
from .evidence import Evidence, Finding, names_list
from .rule import (DISTINCT, GRAD, GRAD_LATE, LATE_PROBE, LOSS_LEFT, LR_RECORDS, PROBE, Need, NotJudged, rule,
                   who_needs)
from .signals import (NO_GRAD_FROM_STEP, adamw_low, blockless_words, adamw_ratio_median, block_grad_ratio, lr_verdict,
                      update_ratio_median, vanishing, zero_grad_params)

__all__ = ["no_gradient", "vanishing_gradients", "learning_rate", "rank_collapse", "uniform_attention",
           "NO_GRADIENT_CAUSE"]

NO_GRADIENT_CAUSE = ("a parameter whose gradient is always exactly 0 (or None) never reaches the loss: its module is "
                     "never called in forward (e.g. a position embedding defined in __init__ and never added: add it, "
                     "x = tok_emb(idx) + pos_emb(pos)), or its branch is computed and then not used (e.g. an attention "
                     "output never added to the stream: use it, x = x + out_proj(attention)), or it is detached "
                     "(.detach(), torch.no_grad()) or multiplied by 0")
"""What ``no_gradient`` means, in the words of ``depthlab check``'s rule of the same name."""


@rule("no_gradient", needs=(GRAD, GRAD_LATE))
def no_gradient(ev: Evidence) -> Optional[Finding]:
    """Parameters whose recorded gradient norm is exactly 0 in every gradient record from step 2 on
    (a gradient that is None is recorded as 0 too): they cannot learn, and their branch does not
    reach the loss. Step 1 is left out: a zero-initialised gate (ReZero's alpha) leaves its blocks
    without a gradient at initialisation by design. ``depthlab check``'s ``no_gradient`` tests the
    same before training, on the live model."""
    zero, total, steps = zero_grad_params(ev)
    if not zero:
        return None
    span = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
    evidence = (f"{len(zero)} of {total} parameters have a gradient norm of exactly 0 in all {len(steps)} gradient "
                f"records ({span}; from step {NO_GRAD_FROM_STEP} on): {names_list(zero)}")
    if len(zero) == total:
        evidence += "; no parameter gets a gradient, so the loss does not depend on the weights at all"
    parts = [NO_GRADIENT_CAUSE]
    m = ev.section("model")
    if m.get("source"):
        parts.append(f"{ev.check_command} finds it before training (no_gradient names the parameters)")
    else:
        wiring = wiring_advice(ev)
        if wiring:
            parts.append(f"in depthlab's GPT only a signal that underflows to 0 does this: {wiring}")
    return Finding("no_gradient", evidence, "; ".join(parts))


def _ratio_span(ev: Evidence, low: bool = False) -> str:
    """``steps A-B, N records``: the records the lr rules judged (``low``: ``lr_too_low``'s)."""
    vals, steps = ev.low_ratios if low else ev.update_ratios
    return f"steps {steps[0]}-{steps[-1]}, {len(vals)} records"


def _grad_blocks(ev: Evidence, who: str) -> Optional[str]:
    """Why ``vanishing_gradients`` is not judged on a run whose gradient records hold no two blocks' norms (a model
    whose blocks sit in no numbered list, an nn.ModuleDict say); None when one record has them, or without records."""
    if not ev.grads or block_grad_ratio(ev) is not None:
        return None
    if any(len(r.get("grad_norm_block") or []) == 1 for r in ev.grads):  # measured: one block has no pair
        n = ev.section("model").get("n_layer")
        return (f"{who} a first and a last block to compare, and the model has one block"
                + (f" (model.n_layer {n})" if n is not None and not ev.section("model").get("source") else "")
                + ": its gradients cannot vanish on the way down a stack")
    return blockless_words(ev, who, "the gradient norms of a first and a last block", "holds two")


GRAD_BLOCKS = Need("grad", "per-block gradient norms", _grad_blocks)


@rule("vanishing_gradients", needs=(GRAD,))
def vanishing_gradients(ev: Evidence) -> Optional[Finding]:
    """Median first/last block grad-norm ratio over the grad records below ``vanishing_ratio``.

    When the update/weight ratios are below ``lr_low`` too, the evidence says so and that the
    gradients are the cause (``lr_too_low`` then stays silent: raising the LR would be bad advice).
    """
    ratio = block_grad_ratio(ev)
    if ratio is None:  # records without two blocks: nothing compared, which is no pass (it read as one)
        return NotJudged(("vanishing_gradients",), (GRAD_BLOCKS,), GRAD_BLOCKS.shortfall(ev, who_needs(1)) or "")
    if not vanishing(ev):
        return None
    wiring, has = wiring_advice(ev), wiring_has(ev)
    parts = [wiring] if wiring else []
    m = ev.section("model")
    if m.get("source"):  # its wiring and depth are in its code: model.variant and model.n_layer are refused
        knob, depth = depth_setting(m)
        fewer = f"use fewer layers ({knob} is {depth})" if depth is not None else f"use fewer layers: {knob} sets them"
        parts += [source_wiring_advice(), fewer,
                  "if it has shortcuts, look at its initialisation (its code, or arguments given with --model.init) "
                  f"and {lr_knob(ev)} instead",
                  f"{ev.check_command} tests the model for this at initialisation (gradient_flow)"]
        return Finding("vanishing_gradients", _vanishing_evidence(ev, ratio), "; ".join(parts))
    n_layer = m.get("n_layer")
    parts.append(f"use fewer layers{f' (model.n_layer is {n_layer})' if n_layer else ''}")
    if not wiring and has:
        parts.append(f"{has}, so look at the initialisation (model.init) and the learning rate instead of the wiring")
    return Finding("vanishing_gradients", _vanishing_evidence(ev, ratio), "; ".join(parts))


def _vanishing_evidence(ev: Evidence, ratio: tuple) -> str:
    med, steps = ratio
    # depthlab probe builds depthlab's GPT; a model.source model is probed at initialisation by check's gradient_flow
    probe = "depthlab check's gradient_flow" if ev.section("model").get("source") else "depthlab probe"
    at = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
    evidence = (f"during training, first/last block gradient-norm ratio median {med:.2e} over "
                f"{counted(len(steps), 'gradient record')} ({at}; threshold {ev.thresholds.vanishing_ratio:g}): "
                f"the early blocks get a faint learning signal{_updates_level(ev)}. That is the trained run; at "
                f"initialisation, before any update (what {probe} measures), the gradients can still be level (a "
                "stack without shortcuts then fails through rank collapse instead): both hold, at different moments")
    if lr_verdict(ev) == "low":
        evidence += (f"; the update/weight ratios are tiny too (median update/weight ratio "
                     f"{update_ratio_median(ev, low=True):.2e}), because the gradients vanish, not because the "
                     "learning rate is low")
    return evidence


def _updates_level(ev: Evidence) -> str:
    """Where the last gradient record's update/weight ratios of the first and last block are within 3x of each
    other: words saying the optimizer scaled the faint gradients back up (AdamW and Muon set an update's size
    apart from the gradient's), so the early blocks do move ("they barely learn" was said of level updates)."""
    last = next((r for r in reversed(ev.grads) if r.get("update_ratio_block")), None)
    u = [finite_or_none(x) for x in (last or {}).get("update_ratio_block") or []]
    if len(u) < 2 or not u[0] or not u[-1] or not 1 / 3 <= u[0] / u[-1] <= 3:
        return ""
    return (f" (their updates are as large as the last block's, update/weight ratio {u[0]:.2e} vs {u[-1]:.2e} at "
            f"step {last.get('step')}: the optimizer scales each update to its own size, so the early blocks move, "
            "but in directions that faint gradient hardly sets)")


@rule("lr_too_high", "lr_too_low", needs=(GRAD, LR_RECORDS))
def learning_rate(ev: Evidence) -> Optional[Finding]:
    """Median (over records after warmup, of the median over blocks) update/weight ratio far from ~1e-3.

    Too low while the gradients vanish is the vanishing gradients' finding, not this one.
    """
    verdict, th = lr_verdict(ev), ev.thresholds
    if verdict == "low" and vanishing(ev):
        verdict = None
    if verdict is None and adamw_low(ev):
        return _adamw_too_low(ev)
    if verdict is None:
        return None
    low = verdict == "low"
    med, span = update_ratio_median(ev, low), _ratio_span(ev, low)
    if ev.muon:
        lr = ev.section("train").get("muon_lr")
        lr_txt = f" (block matrices trained by Muon, train.muon_lr {lr:g})" if lr is not None else " (Muon)"
        whose = "the blocks' matrices" if low and ev.matrix_ratios else "the blocks"
        head = f"median update/weight ratio of {whose} {med:.2e} per step ({span}){lr_txt}; {MUON_RATIO}, but "
    else:
        lr = ev.section("train").get("learning_rate")
        lr_txt = f" with train.learning_rate {lr:g}" if lr is not None else ""
        head = f"median update/weight ratio {med:.2e} per step ({span}){lr_txt}; healthy is about 1e-3, "
    if verdict == "high":
        warmup = "" if warmup_words(ev) else f" or raise train.warmup_iters{ev.now('train.warmup_iters')}"
        return Finding("lr_too_high", head + f"above {th.lr_high:g} the weights are rewritten every few steps",
                       f"lower {lr_knob(ev)} ({_rate_step(ev, med / HEALTHY_RATIO[1], '/')}){warmup}")
    also = (f"; AdamW's embeddings and head hardly move either ({adamw_ratio_median(ev):.2e} per step): raise "
            f"train.learning_rate{ev.now('train.learning_rate')} too") if adamw_low(ev) else ""
    return Finding("lr_too_low", head + f"below {th.lr_low:g} the weights hardly move",
                   f"raise {lr_knob(ev)} ({_rate_step(ev, HEALTHY_RATIO[0] / med, 'x')}){also}")


HEALTHY_RATIO = (1e-3, 1e-2)
"""Update/weight ratios per step of healthy runs: about 1e-3 (AdamW's rule of thumb) to 1e-2 (the default AdamW
recipe measures 6e-3 to 1e-2; Muon's blocks about 1e-2): the ends the lr remedies' factors aim at."""


def _rate_step(ev: Evidence, far: float, op: str) -> str:
    """How far to move the rate :func:`lr_knob` names: ``try x 3 to x 10`` for a ratio up to ten times off the healthy
    band (``far``: how many times), else the default recipe's rate where it lies that way, else the factor.

    The update/weight ratio does not follow the rate in proportion (larger weights under a large rate, Adam's
    normalisation): AdamW at lr 5 (ratio 0.165) told "/ 16" still measured 0.077 at lr 0.31, and lr 1e-6 told
    "x 82" measured 5e-4 at 8.2e-5; so a far-off rate is pointed at a known good one, and the ratio is to be
    measured again.
    """
    if not math.isfinite(far) or far <= 10:
        return f"try {op} 3 to {op} 10"
    muon = "muon_lr" in lr_knob(ev)
    now, default = ev.section("train").get("muon_lr" if muon else "learning_rate"), \
        TrainConfig.muon_lr if muon else TrainConfig.learning_rate
    side = "above" if op == "/" else "below"
    band = (f"{far:,.0f} times {side} a healthy run's {HEALTHY_RATIO[0]:g} to {HEALTHY_RATIO[1]:g}, and does not "
            "follow the rate in proportion")
    if isinstance(now, (int, float)) and not isinstance(now, bool) and (now > default if op == "/" else now < default):
        return f"e.g. to {default:g}, the default recipe's, then look at the ratio again: it is {band}"
    return f"try {op} {far:,.0f} and look at the ratio again: it is {band}"


def _adamw_too_low(ev: Evidence) -> Finding:
    """``lr_too_low`` of a Muon run's AdamW side: the blocks move at train.muon_lr's rate, the embeddings not."""
    lr = ev.section("train").get("learning_rate")
    lr_txt = f", train.learning_rate {lr:g}" if lr is not None else ""
    return Finding("lr_too_low", f"median update/weight ratio of the embeddings and head {adamw_ratio_median(ev):.2e} "
                   f"per step (AdamW{lr_txt}; the blocks' matrices are Muon's, at train.muon_lr); below "
                   f"{ev.thresholds.lr_low:g} they hardly move, so the model cannot learn which {ev.unit} is which",
                   f"raise train.learning_rate{ev.now('train.learning_rate')} (AdamW's rate: embeddings, head, "
                   "norms, biases; try x 10 and more)")


@rule("rank_collapse", needs=(PROBE, DISTINCT, LOSS_LEFT))
def rank_collapse(ev: Evidence) -> Optional[Finding]:
    """Deepest block's rank measure at the last probe below ``rank_collapse``."""
    p, th = ev.last_probe, ev.thresholds.rank_collapse
    rm = [(i, v) for i, v in ((i, finite_or_none(x)) for i, x in enumerate(p.get("rank_measure") or []))
          if v is not None]
    if not rm or rm[-1][1] >= th:
        return None  # no finite measure (block_size 1: undefined, not collapsed), or not collapsed
    first_bad = next(i for i, v in rm if v < th)
    cos = p.get("token_cosine") or []
    last_cos = finite_or_none(cos[-1]) if cos else None
    cos_txt = f", token cosine {last_cos:.3f}" if last_cos is not None else ""
    if len(rm) == 1:  # one block: no fall along depth to speak of, only its level
        where = f"the rank measure after block {rm[0][0]}, the only block measured, is {rm[0][1]:.2e}{cos_txt}"
    else:  # a first measure of 1e-4 was written "0.000", as if it rose to the last one's 1e-4
        first = f"{rm[0][1]:.3f}" if rm[0][1] >= 0.01 else f"{rm[0][1]:.2e}"
        where = (f"the rank measure falls from {first} (block {rm[0][0]}) to {rm[-1][1]:.2e} "
                 f"(block {rm[-1][0]}{cos_txt})")
    return Finding("rank_collapse", f"at step {p['step']} {where}; below {th:g} from block {first_bad} on: all "
                   "positions carry nearly the same vector", _rank_remedy(ev))


def _rank_remedy(ev: Evidence) -> str:
    m = ev.section("model")
    if m.get("variant") == "plain" or not m:
        return (wiring_advice(ev) + "; a shortcut keeps the token identity that stacked attention + normalisation "
                "averages away (Dong et al. 2021)")
    remedy = (f"{wiring_has(ev)}, so this collapse was learned, not built in: lower {lr_knob(ev)} or raise "
              f"train.warmup_iters{ev.now('train.warmup_iters')}, and compare the probes over steps (the report's "
              "activation figure) to see when it happened")
    if m.get("norm") == "none" and m.get("variant") != "rezero":
        remedy += "; normalise (model.norm is none: use layernorm or rmsnorm)"
    if m.get("variant") == "postnorm":
        remedy += ("; at depth, pre-LN (model.variant prenorm) or DeepNorm (model.variant deepnorm) keep the "
                   "shortcut an identity, which post-LN's norm does not")
    return remedy


def _uses_context(ev: Evidence) -> bool:
    """Whether the run's end-of-training loss by position shows the model using its context (its verdict
    :data:`~depthlab.analytics.rules.context.USED`, against the bigram line)."""
    if ev.context is None or not isinstance((ev.baselines or {}).get("bigram"), dict):
        return False
    try:
        return record_verdict(ev)[0] == USED
    except (KeyError, TypeError, ValueError):  # a record of an older or damaged run: no verdict to lean on
        return False


@rule("uniform_attention", needs=(PROBE, DISTINCT, LATE_PROBE, LOSS_LEFT))
def uniform_attention(ev: Evidence) -> Optional[Finding]:
    """Mean attention entropy over heads and blocks >= ``uniform_attention_frac`` of ln t, late in training.

    The remedy follows :func:`~depthlab.analytics.rules.advice.lr_advice`: "lower the learning
    rate" when the update/weight ratios are high or the run diverged (the usual reason attention
    never sharpens is a step size that keeps rewriting the weights), "raise" only when they are
    low, and neither without evidence or when vanishing gradients explain the small updates.
    """
    p, th = ev.last_probe, ev.thresholds  # a probe at uniform_attention_min_step or later (LATE_PROBE)
    u = finite_or_none(p.get("attn_entropy_uniform"))
    ent = [v for blk in (p.get("attn_entropy") or []) for v in (finite_or_none(h) for h in blk) if v is not None]
    if u is None or u < th.uniform_attention_min_nats or not ent:
        return None
    mean = sum(ent) / len(ent)
    if mean < th.uniform_attention_frac * u or _uses_context(ev):
        return None  # broad heads that carry context (a pre-LN 6 x 64 gaining 0.56 nats by position) are no fault
    lr = lr_advice(ev)
    if lr == "lower":
        parts = [f"lower {lr_knob(ev)}: the update/weight ratios are high, "
                 "and attention that is rewritten every few steps never sharpens"]
    elif lr == "raise":
        moves = "AdamW's embeddings and head hardly move" if ev.muon and lr_verdict(ev) != "low" else \
            "the update/weight ratios are low, the attention weights hardly move"  # else Muon's blocks, or all
        parts = [f"raise {lr_knob(ev)}: {moves}"]
    else:
        parts = [f"train longer ({LONGER_KNOBS}; {p['step']} steps so far)"]
    # a dropout this high first (noise no step size fixes), and a warmup that never reached the peak rate
    parts[:0] = [d for d in (dropout_advice(ev), weight_decay_advice(ev), warmup_words(ev)) if d]
    wiring = wiring_advice(ev)
    if wiring:
        parts.append(wiring)
    if not clear_of_collapse(p):  # a probe measuring distinct vectors has ruled it out: not sent to check
        parts.append("check rank collapse (uniform attention averages the tokens into one vector)")
    return Finding(
        "uniform_attention",
        f"at step {p['step']} mean attention entropy {mean:.3f} nats = {mean / u:.0%} of uniform "
        f"({u:.3f} nats = mean ln t): the heads average over the context instead of selecting",
        "; ".join(parts))
