"""``context_unused``: the later positions of the val windows do not beat position 0.

Judged from the loss-by-position record the trainer writes at the end of training
(:class:`depthlab.analytics.context.ContextCallback`: ``kind: event``, ``event: context``), so
``diagnose`` reads records and never loads the model. Position 0 sees one character; a model whose
loss at the last quarter of the positions is no lower than at position 0 (context gain below
``Thresholds.context_min_gain``) and no lower than the bigram baseline (minus ``bigram_margin``, beyond
twice its standard error) predicts from the current character alone: the context before it does not
reach the loss. Use is claimed only beyond twice the standard error of the test that shows it; a curve
in between is undecided, and neither claim is made.
"""

from __future__ import annotations

import math
import shlex
from typing import Optional, Sequence

from ...units import finite_or_none, plus_minus
from ..baselines import one_token_line
from .advice import (SHORTCUT_VARIANTS, bounded_output_words, dropout_advice, no_grad_words, source_wiring_advice,
                     weight_decay_advice, wiring_advice)
from .signals import divergence, vanishing
from .evidence import CONTEXT_EVENT, Evidence, Finding, Thresholds
from .rule import BASELINES, CONTEXT, LATE_EVAL, LOSS_LEFT, Need, NotJudged, rule, who_needs

__all__ = ["CONTEXT_EVENT", "CONTEXT", "USED", "UNUSED", "UNDECIDED", "LEAKS", "MORE_WINDOWS", "uses_context",
           "context_state", "leak_gap", "last_quarter", "context_verdict", "record_verdict", "context_words",
           "context_causes", "context_unused"]

def last_quarter(curve: Sequence[float]) -> float:
    """Mean loss over the last ``max(1, T // 4)`` positions (nats)."""
    q = max(1, len(curve) // 4)
    return sum(curve[-q:]) / q


USED, UNUSED, UNDECIDED = "used", "unused", "undecided"


def _gain_shows_use(gain: float, min_gain: float, gain_se: Optional[float]) -> bool:
    return gain >= min_gain and (gain_se is None or gain > 2 * gain_se)


def _bigram_shows_use(curve: Sequence[float], bigram: Optional[float], margin: float, lq_se: Optional[float]) -> bool:
    return bigram is not None and last_quarter(curve) < bigram - max(margin, 2 * (lq_se or 0.0))


def uses_context(gain: float, curve: Sequence[float], bigram: Optional[float], min_gain: float,
                 margin: float, gain_se: Optional[float] = None, lq_se: Optional[float] = None) -> bool:
    """True when the later positions beat position 0 by ``min_gain`` nats and by twice the gain's standard
    error ``gain_se``, or the last quarter beats the bigram baseline by ``margin`` and by twice its own
    standard error ``lq_se`` (the low-noise test: it averages many tokens per window, position 0 one).
    A standard error of None (one window, or a record written before it was kept) is not tested. ``curve``: the
    mean loss at each position 0..T-1; every loss, margin and standard error in nats."""
    return _gain_shows_use(gain, min_gain, gain_se) or _bigram_shows_use(curve, bigram, margin, lq_se)


def context_state(gain: float, curve: Sequence[float], bigram: Optional[float], min_gain: float, margin: float,
                  gain_se: Optional[float] = None, lq_se: Optional[float] = None) -> str:
    """:data:`USED` when :func:`uses_context`; :data:`UNUSED` when the numbers show no use beyond their errors;
    else :data:`UNDECIDED` (these windows cannot tell, and neither claim is made).

    No use needs the last quarter to stay above ``bigram - margin`` by twice its standard error (the low-noise
    test: the later positions predict no better than the current character alone) and the gain to be below
    ``min_gain``; without a bigram baseline, the gain below ``min_gain`` by twice its standard error. Arguments
    as :func:`uses_context`'s, every loss, margin and standard error in nats."""
    if uses_context(gain, curve, bigram, min_gain, margin, gain_se, lq_se):
        return USED
    if bigram is not None:
        no_better = last_quarter(curve) - 2 * (lq_se or 0.0) >= bigram - margin
        return UNUSED if no_better and gain < min_gain else UNDECIDED
    return UNUSED if gain + 2 * (gain_se or 0.0) < min_gain else UNDECIDED


def causes_words(causes: Sequence[str]) -> str:
    """``a; b; or c``: :func:`context_causes`' reasons in one clause."""
    return "; ".join(causes[:-1]) + f"; or {causes[-1]}" if len(causes) > 1 else "".join(causes)


def at_unigram(curve: Sequence[float], unigram: Optional[float], margin: float, pos0_se: Optional[float]) -> bool:
    """Whether position 0 of a loss-by-position ``curve`` (nats per position) is at (or above) the ``unigram`` line
    (nats), within ``max(margin, 2 x pos0_se)`` (nats; ``pos0_se`` position 0's standard error): not even the current
    token reaches the output."""
    return unigram is not None and bool(curve) and curve[0] >= unigram - max(margin, 2 * (pos0_se or 0.0))


def context_causes(model: dict, check: Optional[str] = None, unit: Optional[str] = None) -> list[str]:
    """The reasons a model does not use its context, each with its knob, for the run's ``model`` section: no
    attention path to the loss, a broken causal mask, too short a context; and first, when ``unit`` is given
    (position 0 at the unigram line: not even the current character or token is used, which no attention fault
    explains, as a model without attention reaches the bigram line), nothing of the input reaching the output."""
    src, v, T = model.get("source"), model.get("variant"), model.get("block_size")
    first = []
    if unit and src:
        first = [f"nothing of the input reaching the output (position 0 does not use even the current {unit}): a "
                 "stack without shortcuts (x = x + block(x)) averages every position into one vector, and a forward "
                 "that ends in softmax returns probabilities, not logits"]
    elif unit:
        first = [f"nothing of the input reaching the output (position 0 does not use even the current {unit}): "
                 + ("model.variant plain has no shortcut and averages every position into one vector (use "
                    "model.variant prenorm)" if v == "plain" else "rank collapse (depthlab probe shows it at "
                    "initialisation)")]
    if src:
        path = "no attention path to the loss (an attention output that is zeroed, detached or never added)"
        mask = f"a broken causal mask ({check or 'depthlab check ' + src} runs causal_leak and context_use)"
    else:
        path = ("no attention path to the loss: model.variant plain has no shortcut, so what attention adds is "
                "lost on the way up (use model.variant prenorm)" if v == "plain" else
                f"no attention path to the loss (model.variant {v} has a shortcut: look at the other two first)")
        if first and v == "plain":  # the missing shortcut is named first already
            path = "no attention path to the loss (the same missing shortcut)"
        mask = "a broken causal mask (depthlab's GPT masks with is_causal, tested: not this run's cause)"
    short = f"too short a context (raise model.block_size, now {T})" if T else "too short a context (model.block_size)"
    return [*first, path, mask, short]


LEAKS = "leaks"

#: What the verdict suggests when the windows cannot tell (the ``context`` command drops ``--max_tokens 0`` once
#: it has read every window).
MORE_WINDOWS = "more windows: --max_tokens 0, or a run with a larger train.eval_iters"


def leak_gap(curve: Sequence[float], floor: Optional[float], margin: float,
             pos0_se: Optional[float]) -> Optional[float]:
    """How far (nats) position 0 is below the one-token floor beyond ``max(margin, 2 x its standard error)``, or
    None (also without a floor).

    Position 0 sees one token, so a causal model cannot score the val tokens below the floor
    (:func:`depthlab.analytics.baselines.one_char_floor_nats`) beyond its sampling error; one that does sees
    tokens after the one it predicts (a leaking causal mask)."""
    if floor is None or not math.isfinite(curve[0]):
        return None
    gap = floor - curve[0]
    return gap if gap > max(margin, 2 * (pos0_se or 0.0)) else None


def context_verdict(gain: Optional[float], se: Optional[float], curve: Sequence[float], bigram: Optional[float],
                    unigram: Optional[float], min_gain: float = Thresholds.context_min_gain,
                    margin: float = Thresholds.bigram_margin, lq_se: Optional[float] = None,
                    windows: Optional[int] = None, pos0_se: Optional[float] = None,
                    advice: str = MORE_WINDOWS, floor: Optional[float] = None, unit: str = "character"
                    ) -> tuple[str, str]:
    """``(state, one sentence with the numbers)`` of a loss-by-position curve (nats).

    The state is :func:`context_state`'s, except: :data:`LEAKS` when position 0 is below the one-token
    ``floor`` (:func:`leak_gap`; ``pos0_se`` its standard error, else ``se``); :data:`UNDECIDED` for one window
    (``windows`` 1: no error to judge by) and when only the gain over position 0 shows use while the last
    quarter stays above the bigram line (the gain can come from the position alone); :data:`UNUSED` when
    ``gain`` is None (one position per window). ``se`` is the gain's standard error, ``lq_se`` the last
    quarter's; ``advice`` what to do when the windows cannot tell; ``unit`` a token in words (:func:`unit_of`).
    The sentence names the test that decided."""
    if gain is None:
        return UNUSED, "one position per window (model.block_size 1): there is no context to use"
    pm = plus_minus(se)
    lq = last_quarter(curve)
    lq_pm = plus_minus(lq_se)
    head = f"context gain {gain:.3f}{pm} nats (position 0 {curve[0]:.3f} -> last quarter {lq:.3f}{lq_pm})"
    if not math.isfinite(gain) or not all(math.isfinite(x) for x in curve):
        return UNDECIDED, _non_finite_words(head, gain, curve)
    if windows is not None and windows < 2:
        return UNDECIDED, (f"{head}: one window (or copies of one) has no sampling error to judge by, so it cannot "
                           f"tell whether the model uses its context, nor whether its mask leaks ({advice})")
    leak = leak_gap(curve, floor, margin, pos0_se if pos0_se is not None else se)
    if leak is not None:
        return LEAKS, (f"{head}: position 0 is {leak:.3f} nats below {floor:.3f}, the lowest loss a model that sees "
                       "only the current token can reach on these val tokens: the model sees the tokens after the one "
                       "it predicts (a leaking causal mask), so its loss by position says nothing of its use of the "
                       "context (`depthlab check FILE.py:NAME` runs causal_leak on a model file)")
    name = "bigram line"
    if bigram is not None and one_token_line(bigram, unigram) < bigram:
        bigram, name = unigram, "one-token line (the unigram baseline: the add-one bigram estimate is higher here)"
    state = context_state(gain, curve, bigram, min_gain, margin, se, lq_se)
    if state == USED and bigram is not None and not _bigram_shows_use(curve, bigram, margin, lq_se):
        rel = lq - bigram
        where = f"still {rel:.3f} nats above" if rel >= 0 else f"only {-rel:.3f} nats below"
        cut = bigram - max(margin, 2 * (lq_se or 0.0))
        return UNDECIDED, (f"{head}: the later positions beat position 0, but the last quarter is {where} the "
                           f"{name} {bigram:.3f} (what the current token alone gives), not below {cut:.3f} (the "
                           f"line less {margin} or twice its error); a gain that stays above that can come from the "
                           "position alone, so these windows cannot tell whether the model uses what its context "
                           "says (train longer: train.max_iters)")
    if state == USED and bigram is not None and gain <= 0:
        return UNDECIDED, _negative_gain_words(head, gain, se, curve, bigram, name, unit)
    if state == USED:
        below = ""
        if bigram is not None and curve[0] < bigram:  # the line lies high: part of the gap needs no context at all
            below = (f"; the last quarter is {bigram - lq:.3f} nats below the {name}, but position 0, which has no "
                     f"context, is already {bigram - curve[0]:.3f} below it (the line lies above what the current "
                     f"{unit} alone gives on these windows): what the context adds is the gain over position 0, "
                     f"{gain:.3f} nats")
        elif bigram is not None:
            below = (f"; the last quarter is {bigram - lq:.3f} nats below the {name}: that much comes from the "
                     f"context before the current {unit}")
            if not _gain_shows_use(gain, min_gain, se):
                below += (" (the gain over position 0 is within twice its error, so this gap below the line "
                          "is the evidence)")
        return state, f"{head}: the model uses its context{below}"
    if state == UNDECIDED:
        return state, f"{head}: {_undecided_why(gain, se, lq, lq_se, bigram, name, min_gain)}, so these windows " \
                      f"cannot tell whether the model uses its context ({advice})"
    return state, _unused_words(head, gain, se, curve, bigram, unigram, name, min_gain, margin, lq_se, unit,
                                pos0_se if pos0_se is not None else se)


def _undecided_why(gain: float, se: Optional[float], lq: float, lq_se: Optional[float], bigram: Optional[float],
                   name: str, min_gain: float) -> str:
    """The test :func:`context_state` left undecided, in words: a gain of ``min_gain`` or more within twice its error
    ``se``; a smaller gain whose last quarter ``lq`` is within twice its error ``lq_se`` of the one-token line
    ``bigram`` (called ``name``); or, without a line, a smaller gain within twice its error of ``min_gain``."""
    if gain >= min_gain:
        return "what the later positions gain is within twice its sampling error"
    if bigram is not None:
        return (f"the later positions gain less than {min_gain} nats over position 0, and the last quarter is within "
                f"twice its error ({2 * (lq_se or 0.0):.3f}) of the {name} {bigram:.3f}")
    return f"the gain is under {min_gain} nats but within twice its sampling error ({2 * (se or 0.0):.3f}) of it"


def _negative_gain_words(head: str, gain: float, se: Optional[float], curve: Sequence[float], line: float,
                         name: str, unit: str) -> str:
    """:func:`context_verdict`'s sentence when the last quarter is below the one-token ``line`` but the gain over
    position 0 (which sees the current token alone) is not positive: the gap is not the context's."""
    worse = se is not None and gain + 2 * se < 0
    how = ("worse than position 0 beyond twice its error: the context makes the predictions worse, not better"
           if worse else "no better than position 0 (the gain is not positive)")
    return (f"{head}: the last quarter is {line - last_quarter(curve):.3f} nats below the {name} {line:.3f}, but "
            f"position 0, which sees the current {unit} alone, is {line - curve[0]:.3f} nats below it, and the later "
            f"positions are {how}; so that gap does not come from the context, and these windows do not show the "
            "model using its context (train longer: train.max_iters, or a longer corpus: data.path)")


def _non_finite_words(head: str, gain: float, curve: Sequence[float]) -> str:
    """:func:`context_verdict`'s sentence for a curve with NaN/inf in it: the weights, not the sampling error."""
    bad = [x for x in curve if not math.isfinite(x)]
    kind = " and ".join(k for k, hit in (("NaN", any(x != x for x in [*bad, gain])),
                                           ("inf", any(abs(x) == math.inf for x in [*bad, gain]))) if hit)
    return (f"{head}: the loss is non-finite ({kind}) at {len(bad)} of {len(curve)} positions: these weights compute "
            "non-finite losses, so there is no context gain to measure, whatever the number of windows (depthlab "
            "diagnose on the run looks for where it went non-finite)")


def _unused_words(head: str, gain: float, se: Optional[float], curve: Sequence[float], line: Optional[float],
                  unigram: Optional[float], name: str, min_gain: float, margin: float, lq_se: Optional[float],
                  unit: str = "character", pos0_se: Optional[float] = None) -> str:
    """:func:`context_verdict`'s sentence for :data:`UNUSED`: the gain, the last quarter against the one-token
    ``line`` called ``name``, and where position 0 stands against the unigram line: above it only beyond
    ``max(margin, 2 x pos0_se)`` (its standard error), as :func:`leak_gap` judges it against the floor."""
    lq = last_quarter(curve)
    level = ""
    tol = max(margin, 2 * (pos0_se or 0.0))
    if unigram is not None and curve[0] > unigram + tol:  # a 1-step run: near the uniform line
        level = (f" (position 0 is {curve[0] - unigram:.3f} nats above the unigram line: the model has not yet "
                 f"learned even how common each {unit} is)")
    elif at_unigram(curve, unigram, margin, pos0_se):
        within = f"within twice its error, {2 * pos0_se:.3f}" if tol > margin else f"within {margin}"
        level = f" (position 0 is at the unigram line ({within}): not even the current {unit} is used)"
    beat = f"the later positions do not beat position 0 by {min_gain} nats"
    if line is None:
        return f"{head}: {beat}, so the model does not use its context{level}"
    rel = lq - line
    where = f"{rel:.3f} nats above" if rel >= 0 else f"only {-rel:.3f} nats below"
    within = " within twice its error" if lq_se is not None else ""
    noisy = ("" if gain + 2 * (se or 0.0) < min_gain else
             f" (the {name} decides this: the gain over position 0 alone is within twice its error of {min_gain}, "
             "too noisy to say either way)")
    return (f"{head}: {beat}, and the last quarter is {where} the {name} {line:.3f} (the current {unit} alone), "
            f"not {margin} below it{within}, so the model does not use its context{level}{noisy}")


def context_words(gain: Optional[float], se: Optional[float], curve: Sequence[float], bigram: Optional[float],
                  unigram: Optional[float], model: Optional[dict] = None, lq_se: Optional[float] = None,
                  check: Optional[str] = None, leak_tested: bool = False, **verdict) -> tuple[str, str]:
    """:func:`context_verdict`'s ``(state, sentence)`` (``verdict``: its ``windows``, ``pos0_se``, ``advice``,
    ``floor``), the sentence followed, when the context is unused, by the three reasons with their knobs.

    ``check``: the ``depthlab check PATH:NAME`` of a ``model.source`` run (``Evidence.check_command``, a path that
    works from any folder); ``leak_tested``: its causal leak test before training passed (a ``leak_check`` event
    with ``ok`` true), so a context gain is not read as a possible leak."""
    state, words = context_verdict(gain, se, curve, bigram, unigram, lq_se=lq_se, **verdict)
    src = (model or {}).get("source")
    check = check or (f"depthlab check {src}" if src else None)
    if state == USED and src and not leak_tested:  # a leaking mask gains too: position 0 shows it only below the floor
        return state, (f"{words} (or it sees the tokens it predicts: a leaking mask gains as well, and position 0 "
                       f"shows a leak only below the floor; `{check}` tests the mask itself)")
    if state != UNUSED or gain is None:
        return state, words
    margin = verdict.get("margin", Thresholds.bigram_margin)
    low = at_unigram(curve, unigram, margin, verdict.get("pos0_se"))
    causes = context_causes(model or {}, check, verdict.get("unit", "character") if low else None)
    return state, f"{words}; in a model trained long enough this comes from {causes_words(causes)}"


def record_verdict(ev: Evidence, advice: str = MORE_WINDOWS) -> tuple[str, str]:
    """:func:`context_verdict` of the run's end-of-training loss-by-position record (``ev.context``, which must
    exist) against its baselines (``ev.baselines``, with ``bigram``); ``advice``: what to do when its windows
    cannot tell."""
    rec, th = ev.context, ev.thresholds
    curve = [float(v) if finite_or_none(v) is not None else math.nan for v in rec["loss_by_position"]]
    gain, se = float(rec["context_gain"]), finite_or_none(rec.get("context_gain_se"))
    bigram = float(ev.baselines["bigram"]["nats"])
    unigram = finite_or_none((ev.baselines.get("unigram") or {}).get("nats"))
    lq_se = finite_or_none(rec.get("last_quarter_se"))  # absent from records written before it was kept
    floor = finite_or_none((ev.baselines.get("one_char_floor") or {}).get("nats"))  # absent before it was kept
    pos0_se = finite_or_none(rec.get("position0_se"))  # absent before it was kept: the gain's error stands in
    # copies of one window are one (distinct_windows: absent before it was kept)
    windows = finite_or_none(rec.get("distinct_windows", rec.get("windows")))
    return context_verdict(gain, se, curve, bigram, unigram, th.context_min_gain, th.bigram_margin, lq_se,
                           windows=windows, floor=floor, unit=ev.unit, pos0_se=pos0_se, advice=advice)


def more_windows(ev: Evidence) -> str:
    """What reads more val windows than the run's end-of-training loss by position (``ev.context``) did: ``depthlab
    context RUN --max_tokens 0`` where that record read a prefix of the evaluation's windows (or does not say), and a
    run with a larger ``train.eval_iters``."""
    iters = ev.section("train").get("eval_iters")
    larger = "a larger train.eval_iters" + (f" (now {iters})" if iters is not None else "")
    if (ev.context or {}).get("all_windows"):
        return f"more windows: {larger}"
    where = shlex.quote(str(ev.run_dir)) if ev.run_dir else "RUN"
    return (f"more windows: depthlab context {where} --max_tokens 0 reads all of the run's evaluation windows, or "
            f"{larger}")


def _leak_remedy(model: dict, check: Optional[str] = None) -> str:
    src = model.get("source")
    if src:
        return (f"mask the attention scores so that position t sees tokens 0..t only (torch.tril, or "
                f"F.scaled_dot_product_attention(..., is_causal=True)); {check or 'depthlab check ' + src} runs "
                "causal_leak and names the positions that leak")
    return ("depthlab's GPT masks with is_causal (tested), so position 0 cannot go below the floor: baselines.json "
            "was not computed on this run's corpus (copied from another run?); delete it and diagnose recomputes it")


def _start_leak(ev: Evidence) -> Optional[Finding]:
    """``causal_leak`` from the record of ``depthlab check``'s test of a ``model.source`` model when its training
    started (:attr:`Evidence.leak_check`), with the offsets that leak; None without a leak found there."""
    rec = ev.leak_check
    if rec is None or rec.get("ok") is not False:
        return None
    step = rec.get("step", 0)
    when = "at the start of training (step 0)" if not step else f"when training resumed at step {step}"
    return Finding("causal_leak", f"{when}, depthlab check's causal_leak test: {rec.get('summary')}",
                   str(rec.get("remedy") or "") or _leak_remedy(ev.section("model"), ev.check_command))


def _context_tells(ev: Evidence, who: str) -> Optional[str]:
    """Why ``context_unused`` is not judged when the run's end-of-training loss by position cannot tell whether the
    context is used (:data:`UNDECIDED`): its windows and numbers, and the knob that gives more; None otherwise."""
    if ev.context is None or not ev.baselines or "bigram" not in ev.baselines:
        return None
    state, words = record_verdict(ev, more_windows(ev))
    if state != UNDECIDED:
        return None
    return f"{who} a loss by position that tells: the final weights' {ev.context.get('windows')} val windows, {words}"


CONTEXT_TELLS = Need("event", "a loss by position that tells", _context_tells)


def _final_overfit(ev: Evidence, who: str) -> Optional[str]:
    """Why the end-of-training record says nothing of the run's best weights: the final weights it measured overfit
    (val rose from its best by ``overfit_growth`` while train fell), or None. An overfit run's final weights were
    called "the model does not use its context" with the architecture's causes, while its best weights used it."""
    pairs = ev.loss_pairs
    if len(pairs) < 2:
        return None
    best, last = min(pairs, key=lambda p: p[1]), pairs[-1]
    if last[1] - best[1] < ev.thresholds.overfit_growth or last[2] >= best[2]:
        return None
    return (f"its end-of-training record is of the final weights (step {last[0]}), which overfit: val {last[1]:.3f} "
            f"against the best {best[1]:.3f} (step {best[0]}) while train fell; depthlab context RUN measures the "
            "best weights")


FINAL_NOT_OVERFIT = Need("eval", "final weights that have not overfitted", _final_overfit)


@rule("fixed_shape")
def fixed_shape(ev: Evidence) -> Optional[Finding]:
    """``fixed_shape``: the model's forward failed on the final validation's batches (summary.json
    ``final_validation_error``), whose last batch holds fewer windows than training's: a batch size (or length)
    written into the model's code. The run trained, but its whole-split loss, its samples and depthlab's views
    (layers, context) need other shapes. None without such an error."""
    err = (ev.summary or {}).get("final_validation_error")
    if not isinstance(err, str) or not err:
        return None
    cmd = ev.check_command
    return Finding("fixed_shape", f"the final validation (the whole val split, in batches that may hold fewer or "
                                  f"shorter windows than training's) could not run: {err}",
                   "make the forward take any batch size and any length up to model.block_size: read B, T = "
                   "idx.shape instead of numbers written into the code (x.view(B, T, C), masks built for T)"
                   + (f"; {cmd} tests other sizes (its shape rule)" if cmd else "")
                   + "; until then --train.final_validation false skips the final validation")


@rule("random_eval")
def random_eval(ev: Evidence) -> Optional[Finding]:
    """``random_eval``: the test before training found the forward random in eval mode (the start record's
    ``random_in_eval``): dropout drawn without ``training=self.training``. Every val loss, the best checkpoint's choice
    and every sample carry its noise, and the causal leak test could not run. None otherwise."""
    return _start_flag(ev, "random_in_eval", "random_eval")


@rule("shifted_logits")
def shifted_logits(ev: Evidence) -> Optional[Finding]:
    """``shifted_logits``: the test before training found that position t's logits never depend on token t while
    later positions' do (the start record's ``own_token_ignored``): logits one position late, or each position's own
    token masked out. Such a model predicts the token after next from the tokens before the current one. None
    otherwise."""
    return _start_flag(ev, "own_token_ignored", "shifted_logits")


def _start_flag(ev: Evidence, flag: str, name: str) -> Optional[Finding]:
    """The finding ``name`` of the test before training when its record (:attr:`Evidence.leak_check`) holds ``flag``
    true: its summary as the evidence, its remedy; None otherwise."""
    rec = ev.leak_check
    if rec is None or rec.get(flag) is not True:
        return None
    return Finding(name, f"{rec.get('summary')} (the test before training)", str(rec.get("remedy")))


@rule("causal_leak")
def leak_at_start(ev: Evidence) -> Optional[Finding]:
    """``causal_leak`` from ``depthlab check``'s test of a ``model.source`` model when its training started
    (:func:`_start_leak`): found at any length of run, where the loss by position shows a leak only once
    position 0 falls below the one-token floor. None without such a record or when the test found no leak."""
    return _start_leak(ev)


@rule("context_unused", "causal_leak", needs=(CONTEXT, LATE_EVAL, BASELINES))
def context_unused(ev: Evidence) -> Optional[Finding]:
    """``context_unused``: the final weights' loss over the last quarter of the positions is not below position
    0's by ``context_min_gain`` and stays above the bigram baseline minus ``bigram_margin`` beyond twice its
    standard error (:func:`context_state`): the context before the current character does not reach the loss.
    A curve the windows cannot decide is no finding. ``causal_leak``: position 0 is below the one-token floor
    beyond its error (:func:`leak_gap`): the model sees the tokens it predicts. A leak the test before training
    found (:func:`_start_leak`) is said instead, with its offsets: the curve of such a model measures no context."""
    start = _start_leak(ev)
    if start is not None:
        return start
    rec = ev.context
    state, words = record_verdict(ev)
    where = (f"final weights (step {rec.get('step')}), {rec.get('windows')} val windows of "
             f"{len(rec['loss_by_position'])} positions")
    if state == LEAKS:
        return Finding("causal_leak", f"{where}: {words}", _leak_remedy(ev.section("model"), ev.check_command))
    if state == UNDECIDED:  # no finding, but no pass either: "no problems found" read as one
        return NotJudged(("context_unused",), (CONTEXT_TELLS,), CONTEXT_TELLS.shortfall(ev, who_needs(1)) or "")
    if state != UNUSED or divergence(ev):  # diverged final weights' curve tells of the divergence (exploding)
        return None  # a finding needs the numbers themselves to show no use, not only too few windows
    overfit = _final_overfit(ev, who_needs(1))
    if overfit:  # the final weights lost what the best used: overfitting's finding says why, not the wiring
        return NotJudged(("context_unused",), (FINAL_NOT_OVERFIT,), overfit)
    solved = LOSS_LEFT.shortfall(ev, who_needs(1))
    if solved:  # the context unused by a model that predicts almost perfectly: nothing it could add (a leak is said)
        return NotJudged(("context_unused",), (LOSS_LEFT,), solved)
    curve = [float(v) if finite_or_none(v) is not None else math.nan for v in rec["loss_by_position"]]
    low = at_unigram(curve, finite_or_none((ev.baselines.get("unigram") or {}).get("nats")),
                     ev.thresholds.bigram_margin, finite_or_none(rec.get("position0_se")))
    causes = context_causes(ev.section("model"), ev.check_command, ev.unit if low else None)
    return Finding("context_unused", f"{where}: {words}",
                   _training_cause(ev) + f"the cause is one of: {causes_words(causes)}")


def _training_cause(ev: Evidence) -> str:
    """The remedy's first clause when the run's best val loss is not below the bigram baseline (by its margin): a
    model that has not learned what one character says is no evidence of its architecture, and the knobs that
    decide are the training's. "" otherwise."""
    best = min((v for _, v in ev.val_losses), default=None)
    bigram = finite_or_none((ev.baselines or {}).get("bigram", {}).get("nats"))
    if best is None or bigram is None or best < bigram - ev.thresholds.bigram_margin:
        return ""
    def first(what: str, why: str) -> str:
        return (f"first the {what}: {why}; the best val loss {best:.3f} is not below the bigram baseline "
                f"{bigram:.3f}; once it is, if this stays, ")

    bounded = bounded_output_words(ev)
    if bounded:  # no learning rate gets it below its floor
        return first("output", bounded)
    if ev.section("model").get("source") and vanishing(ev):  # the run's own vanishing_gradients: its wiring first
        return first("wiring", "the run's gradient records show the early blocks starved (vanishing_gradients): "
                               f"{source_wiring_advice()}")
    nograd = no_grad_words(ev)
    if nograd:  # the run's own no_gradient finding: an architecture fault shown already
        return first("wiring", nograd)
    wiring = wiring_advice(ev) if ev.section("model").get("variant") not in SHORTCUT_VARIANTS else None
    if wiring:  # a stack without a shortcut is an architecture that can be judged now: it loses the current token
        # (post-LN has a shortcut: its wiring advice is no reason to put the wiring before the training)
        return (f"first the wiring: {wiring}; the best val loss {best:.3f} is not below the bigram baseline "
                f"{bigram:.3f}, and a stack without a shortcut can lose even the current {ev.unit} on its way up; once "
                "it is below, if this stays, ")
    lr = "train.learning_rate" + (" and train.muon_lr (the blocks' matrices)" if ev.muon else "")
    drop = f", model.dropout{ev.now('model.dropout')}" if dropout_advice(ev) else ""
    drop += f", train.weight_decay{ev.now('train.weight_decay')}" if weight_decay_advice(ev) else ""
    return (f"first the training: the best val loss {best:.3f} is not below the bigram baseline {bigram:.3f}, so the "
            f"model has not learned even what the current {ev.unit} says, and its architecture cannot be judged "
            f"yet (the learning rate, {lr}{drop}, and train.max_iters decide that; see the run's other findings); "
            "if it trains well and this stays, ")
