"""Rules on the loss curves: ``bigram_stuck`` / ``unigram_stuck`` (and the config-only case of a
one-character window), ``exploding``, ``overfitting``, ``plateau``."""

from __future__ import annotations

import math
from typing import Optional

from ...config import TrainConfig
from ...rundir import init_from_record
from ...units import finite_or_none, finite_values
from .context import LEAKS, UNUSED, USED, more_windows, record_verdict
from .advice import (LONGER_KNOBS, bounded_output_words, clear_of_collapse, dropout_advice, lr_advice, lr_knob,
                     lr_knobs, no_grad_words, warmup_words, weight_decay_advice, wiring_advice, wiring_has)
from .evidence import Evidence, Finding
from .rule import BASELINES, LATE_EVAL, LOSS_LEFT, OVERFIT_EVALS, PLATEAU_EVALS, Need, NotJudged, rule, who_needs
from ...usermodel import MODEL_LOGITS
from .signals import divergence, init_too_high

__all__ = ["loss_level", "stuck_name", "one_char_window", "no_context", "stuck_at_baseline", "bigram_stuck",
           "exploding", "overfitting", "plateau"]


def loss_level(best: float, baselines: dict, margin: float, unit: str = "character") -> tuple[str, str]:
    """Where a validation loss sits among the corpus baselines, in words.

    The two lines mean different things: at the **unigram** line the model predicts character
    frequencies, so not even the character it has just read reaches its output (a stack without
    shortcuts that collapsed every position into one vector ends here); at the **bigram** line it
    predicts from the current character alone, so none of the context before it reaches the
    output (the path through attention does not reach the loss).

    Args:
        best: a validation loss (nats/char).
        baselines: ``baselines.json`` content (``uniform``, ``unigram``, ``bigram`` with ``nats``).
        margin: nats; a loss within this of a baseline counts as at that level.
        unit: what a token is, in words (``character``, or ``token`` for a BPE run).

    Returns:
        ``(short, long)``: ``short`` is one of ``"above uniform"``, ``"at uniform"`` (within ``margin``),
        ``"between unigram and uniform"``, ``"at unigram"`` (within ``margin``),
        ``"above bigram"``, ``"within margin of bigram"``, ``"below bigram"``; ``long`` says what
        the level means, with the numbers.
    """
    uni, ug, bg = (float(baselines[k]["nats"]) for k in ("uniform", "unigram", "bigram"))
    if best > uni + margin:
        return "above uniform", (f"best val loss {best:.3f} nats is {best - uni:.3f} above the uniform level ln V = "
                                 f"{uni:.3f}: worse than guessing every {unit} equally often")
    if best >= uni - margin:
        return "at uniform", (f"best val loss {best:.3f} nats is at the uniform level ln V = {uni:.3f} (within "
                              f"{margin:g}): the model has not even learned the {unit} frequencies")
    if best >= ug + margin:
        return "between unigram and uniform", (
            f"best val loss {best:.3f} nats is between the unigram level {ug:.3f} ({best - ug:.3f} above it) and "
            f"uniform guessing ln V = {uni:.3f}: the model has not even learned the {unit} frequencies yet")
    if best >= ug - margin:
        return "at unigram", (f"best val loss {best:.3f} nats is at the unigram level {ug:.3f} (within {margin:g}): "
                              f"the model predicts {unit} frequencies and uses no context at all, not even the "
                              f"current {unit} (the bigram baseline {bg:.3f} is what the current {unit} "
                              "alone gives)")
    # the margin on both sides: 0.013 above a line fitted on the train split (2x the loss's sampling error) was
    # "less than the current character tells" of a model whose position 0 sat below it
    if best >= bg + margin:
        return "above bigram", (f"best val loss {best:.3f} nats is {best - bg:.3f} above the bigram baseline "
                                f"{bg:.3f} (unigram {ug:.3f}): the model uses less than the current {unit} "
                                "tells, and none of the context before it")
    if best >= bg - margin:
        side = f"{bg - best:.3f} below it" if best < bg else f"{best - bg:.3f} above it"
        return "within margin of bigram", (f"best val loss {best:.3f} nats is within {margin:g} of the bigram baseline "
                                           f"{bg:.3f} ({side}; unigram {ug:.3f}): the model "
                                           f"predicts from the current {unit} alone and uses almost none of "
                                           "the context before it")
    return "below bigram", f"best val loss {best:.3f} nats is {bg - best:.3f} below the bigram baseline {bg:.3f}"


UNIGRAM_OR_WORSE = ("above uniform", "at uniform", "between unigram and uniform", "at unigram")
"""The :func:`loss_level` levels at the unigram line or above (no context at all)."""


def stuck_name(level: str) -> str:
    """The finding a loss level gives: ``unigram_stuck`` at or above the unigram line (no context at
    all), ``bigram_stuck`` from there down to the bigram line (the current character alone)."""
    return "unigram_stuck" if level in UNIGRAM_OR_WORSE else "bigram_stuck"


# ---------------------------------------------------------------------------------- bigram_stuck, unigram_stuck
SHORT_WINDOW = 16
"""A ``model.block_size`` under this holds little context: the stuck rules' remedies name it."""


@rule("bigram_stuck")
def one_char_window(ev: Evidence) -> Optional[Finding]:
    """``model.block_size`` 1: no training takes the model past a bigram table; judged from the
    config alone (no steps or baselines needed). Ahead of :data:`stuck_at_baseline` in the rule set."""
    if ev.section("model").get("block_size") != 1:
        return None
    txt = (f"model.block_size is 1: every prediction sees only the current {ev.unit}, so no amount of training "
           "takes this model past a bigram table")
    floor = finite_or_none(((ev.baselines or {}).get("one_char_floor") or {}).get("nats"))
    if ev.baselines and "bigram" in ev.baselines:  # the bigram estimate (train counts, smoothed) is not a floor
        txt += f" (bigram baseline {float(ev.baselines['bigram']['nats']):.3f} nats"
        txt += (f"; no such model scores the val split below {floor:.3f} nats, the conditional entropy of its own "
                f"{ev.unit} pairs)" if floor is not None else ")")
    if ev.val_losses:
        txt += f"; best val loss {min(v for _, v in ev.val_losses):.3f} nats after {ev.val_losses[-1][0]} steps"
    return Finding("bigram_stuck", txt, "raise model.block_size (e.g. 64-256) so the model can see context; a "
                   f"one-{ev.unit} window is exactly a bigram model")


no_context = one_char_window
"""The old name of :data:`one_char_window` (kept for imports)."""


@rule("bigram_stuck", "unigram_stuck", needs=(LATE_EVAL, BASELINES, LOSS_LEFT))
def stuck_at_baseline(ev: Evidence) -> Optional[Finding]:
    """Best val loss not below the bigram baseline - margin after enough steps and tokens:
    ``unigram_stuck`` when it sits at the unigram line or above (no context at all: not even the
    current character reaches the output), else ``bigram_stuck`` (the current character alone:
    the context before it does not reach the output)."""
    th = ev.thresholds
    best = min((v for _, v in ev.val_losses), default=math.inf)
    if best < float(ev.baselines["bigram"]["nats"]) - th.bigram_margin:
        return None
    last = ev.late_evals()[-1]
    tokens = last.get("tokens_seen")
    when = f"after {last['step']} steps" + (f" and {tokens:,} tokens" if tokens is not None else "")
    if not math.isfinite(best):
        return Finding("bigram_stuck", f"{when}: no finite validation loss", _bigram_remedy(ev, last))
    level, words = loss_level(best, ev.baselines, th.bigram_margin, ev.unit)
    name = stuck_name(level)
    if divergence(ev):  # "train longer" and the wiring's checks come after a run that no longer rises
        remedy = ("the run diverged (the exploding finding): fix that first, with its remedy; a run whose loss rises "
                  "far above its best learns nothing more by training longer, and the wiring is judged on a run that "
                  "does not diverge")
    elif name == "unigram_stuck":
        remedy = _unigram_remedy(ev, last)
    elif level == "above bigram":  # part of even the current token is lost: the residual path, not attention's
        remedy = (f"the current {ev.unit} alone gives the bigram line, with no attention at all, so above it part of "
                  f"even the current {ev.unit} is lost on its way to the output: " + _unigram_remedy(ev, last))
    else:
        remedy = _bigram_remedy(ev, last)
    verdict = _context_verdict(ev) if name == "bigram_stuck" else None
    block = ev.section("model").get("block_size")
    if verdict == USED and isinstance(block, int) and block < SHORT_WINDOW:  # the little context there is, used
        return Finding("bigram_stuck", f"{when}: {words}; the loss by position shows the context used, but with "
                       f"model.block_size {block} a prediction sees at most {block} {ev.unit}s",
                       f"raise model.block_size (now {block}; e.g. 64-256): a short window holds little context")
    if verdict not in (None, UNUSED):
        if verdict == LEAKS or (verdict == USED and level != "above bigram"):
            return None  # the loss by position, measured directly, decides whether the context is used (no claim)
        # above the bigram line is a fact, but "none of the context reaches the output" is not what was measured;
        # at the line, windows that cannot tell leave the rule undecided: said, where it passed silently
        return NotJudged(("bigram_stuck",), (CONTEXT_DECIDES,), CONTEXT_DECIDES.shortfall(ev, who_needs(1)) or "")
    return Finding(name, f"{when}: {words}", remedy)


def _context_verdict(ev: Evidence) -> Optional[str]:
    """The verdict of the run's loss-by-position record (:func:`record_verdict`), None without one. Any verdict but
    :data:`UNUSED` (the context is used, the windows cannot tell, or position 0 leaks) contradicts "uses almost
    none of the context"."""
    if ev.context is None or not isinstance(ev.context.get("context_gain"), (int, float)):
        return None
    return record_verdict(ev)[0]


def _context_decides(ev: Evidence, who: str) -> Optional[str]:
    """Why ``bigram_stuck`` is not judged above the bigram line (the run's loss by position shows the context used, or
    cannot tell) or within the margin of it (it cannot tell): the finding's "none of the context before it" is no
    claim to make."""
    verdict = _context_verdict(ev)
    if verdict in (None, UNUSED):
        return None
    best = min((v for _, v in ev.val_losses), default=math.inf)
    bg = float(ev.baselines["bigram"]["nats"])
    seen = "shows the context used" if verdict == USED else \
        f"cannot tell whether the context is used ({more_windows(ev)})"
    line, margin = f"the bigram baseline {bg:.3f} (what the current {ev.unit} alone gives)", ev.thresholds.bigram_margin
    where = (f"{best - bg:.3f} above {line}" if best >= bg + margin else
             f"{abs(bg - best):.3f} {'below' if best < bg else 'above'} {line}, inside the rule's margin of {margin:g}")
    return f"the best val loss {best:.3f} nats is {where}, but the run's loss by position {seen}"


CONTEXT_DECIDES = Need("event", "a loss by position that shows the context unused", _context_decides)


bigram_stuck = stuck_at_baseline
"""The old name of :data:`stuck_at_baseline` (kept for imports)."""


def _source_check(ev: Evidence, rules: str) -> str:
    """``depthlab check FILE:NAME`` (its rules ``rules``) for a run of the user's own model, else ""."""
    cmd = ev.check_command
    return f"{cmd} tests the model for this ({rules})" if cmd else ""


DEFAULT_LR = TrainConfig.learning_rate
"""``train.learning_rate``'s default (AdamW's rate in the default recipe)."""


def _lr_part(ev: Evidence) -> Optional[str]:
    lr, warm = lr_advice(ev), warmup_words(ev)
    said = f"{lr} {lr_knob(ev)}: the update/weight ratios say it is too {'high' if lr == 'lower' else 'low'}" \
        if lr else None
    return "; ".join(p for p in (warm, said) if p) or None


def _bigram_remedy(ev: Evidence, last: dict) -> str:
    """Remedies for ``bigram_stuck``: the prediction comes from the current character alone, so the
    context before it does not reach the loss. That points at the path through attention (not at
    the residual path, which carries the current character)."""
    bounded = bounded_output_words(ev)
    if bounded:  # no training gets such a model below its floor: the rest would send the learner elsewhere
        return bounded
    parts = [p for p in (dropout_advice(ev), weight_decay_advice(ev), no_grad_words(ev)) if p]
    src = ev.section("model").get("source")
    if src:
        parts.append(f"the {ev.unit}s before the current one reach the prediction only through attention: check "
                     "that the attention output is added into the stream (x = x + out_proj(attention)), is not "
                     "detached, and that the causal mask lets earlier positions through (torch.tril, not torch.eye); "
                     + _source_check(ev, "no_gradient, causal_leak, context_use"))
    else:
        # the report draws its attention figure for character runs only (its labels are characters)
        where = ("attention entropy and the attention figure (the report; depthlab probe)" if ev.unit == "character"
                 else "attention entropy (depthlab probe; the report's entropy figure)")
        parts.append(f"the {ev.unit}s before the current one reach the prediction only through attention: check "
                     f"{where} to see whether the heads select earlier {ev.unit}s")
    block = ev.section("model").get("block_size")
    if isinstance(block, int) and block < SHORT_WINDOW:
        parts.append(f"raise model.block_size (now {block}; a short window holds little context)")
    lr = _lr_part(ev)
    if lr:
        parts.append(lr)
    parts.append(f"train longer ({LONGER_KNOBS}; {last['step']} steps so far)")
    return "; ".join(parts)


def _rank_words(ev: Evidence) -> str:
    """The rank-collapse part of a stuck run's remedy: "check" it, or, where the run's last probe measured the
    deepest block well clear of collapse (:func:`clear_of_collapse`), that it is not the cause (the learner was sent
    to check what the same diagnosis had just measured and ruled out)."""
    p = ev.last_probe
    if clear_of_collapse(p):
        rm = finite_values(p.get("rank_measure"))
        return (f"not rank collapse: the last probe (step {p['step']}) measures {rm[-1]:.2f} after the last block "
                f"(collapse is below {ev.thresholds.rank_collapse:g}), so the positions still carry distinct vectors")
    return ("check rank collapse (depthlab probe at initialisation; the report's activation figure during training): "
            f"a stack that averages every position into one vector loses even the current {ev.unit}")


def _unigram_remedy(ev: Evidence, last: dict) -> str:
    """Remedies for ``unigram_stuck``: not even the current character (token) reaches the output. In a stack
    without shortcuts that is rank collapse (every position carries the same vector)."""
    bounded = bounded_output_words(ev)
    if bounded:  # no training gets such a model below its floor: the rest would send the learner elsewhere
        return bounded
    parts = [p for p in (dropout_advice(ev), weight_decay_advice(ev)) if p]
    wiring = wiring_advice(ev)
    if wiring:
        parts.append(wiring)
    nog = no_grad_words(ev)
    if nog:
        parts.append(nog)
    if ev.section("model").get("source"):
        parts.append(f"either the output does not depend on the input {ev.unit}: check that the token embedding "
                     "reaches the head through every block (a shortcut x = x + block(x) keeps it; without one a deep "
                     "stack averages every position into one vector); or the forward ends in softmax (probabilities, "
                     "not logits: cross-entropy applies log-softmax itself, so the loss cannot fall below "
                     "ln(1 + (V-1)/e)); "
                     + _source_check(ev, "init_loss, gradient_flow, overfit_batch"))
    else:
        parts.append(_rank_words(ev))
    lr = _lr_part(ev)
    if lr:
        parts.append(lr)
    parts.append(f"train longer ({LONGER_KNOBS}; {last['step']} steps so far)")
    has = wiring_has(ev)
    return "; ".join(parts) + (f"; not the wiring: {has}" if has and not wiring else "")


# ---------------------------------------------------------------------------------- exploding
@rule("exploding", "init_loss")
def exploding(ev: Evidence) -> Optional[Finding]:
    """Non-finite losses or gradients (skipped steps counted over the whole run), a val loss above
    ln V, or a train loss that grew far above its minimum; the evidence lists every sign found. Without
    one: a non-finite final validation, else ``init_loss`` (a step-0 loss far above ln V that never rose)."""
    signs = divergence(ev)
    if not signs:
        return _final_nonfinite(ev) or _init_loss(ev)
    at_init = _nonfinite_at_init(ev)
    if at_init:
        return at_init
    t = ev.section("train")
    lr = t.get("learning_rate")
    if ev.muon:
        first = f"lower {lr_knobs(ev)} (try / 3)"
    else:
        # from a rate far above the default recipe's, a third is still far above it (lr 3 was told "e.g. to 1")
        to = None if not isinstance(lr, (int, float)) or lr <= 0 else lr / 3 if lr <= 10 * DEFAULT_LR else DEFAULT_LR
        first = (f"lower train.learning_rate{ev.now('train.learning_rate')}"
                 + (" (try / 3)" if to is None else f", e.g. to {to:.2g}"
                    + (" (the default recipe's)" if to == DEFAULT_LR else "")))
    parts = [first] + ([] if warmup_words(ev) else [f"raise train.warmup_iters{ev.now('train.warmup_iters')}"])
    clip = t.get("grad_clip")
    if clip is None or clip == 0 or clip > 1.0:
        parts.append(f"clip gradients at train.grad_clip 1.0{ev.now('train.grad_clip')}")
    wiring = wiring_advice(ev)
    if wiring:
        parts.append(wiring)
    return Finding("exploding", "; ".join(signs), "; ".join(parts))


def _init_loss(ev: Evidence) -> Optional[Finding]:
    """``init_loss``: the first evaluation (step 0) is far above ln V: the output scale at initialisation."""
    init = init_too_high(ev)
    if init is None:
        return None
    first, ln_v = init
    padded = ev.section("resolved").get(MODEL_LOGITS)
    of = f" (uniform over the model's {padded} logits)" if padded else ""
    evidence = (f"val loss {first:.3f} at step 0 (before any update) is {first - ln_v:.3f} nats above the uniform "
                f"baseline ln V = {ln_v:.3f}{of}: the model starts out confidently wrong")
    last_step, last = ev.val_losses[-1]
    if last_step > 0:
        evidence += (f"; from there it {'falls' if last < first else 'does not fall'} ({first:.3f} -> {last:.3f} at "
                     f"step {last_step}), so the run did not diverge")
    record = init_from_record(ev.config)
    if record is not None:  # not the model's own initialisation: model.init played no part
        evidence += (f"; the run started from the weights of {record.get('path')} (--init-from), not from its own "
                     "initialisation")
        return Finding("init_loss", evidence, "not the learning rate, and not model.init: the weights it started from "
                                              "predict this corpus badly (expected where they were trained on another "
                                              "text); while the loss falls from there, the start costs only steps; to "
                                              "start from the model's own initialisation, train without --init-from")
    cmd = ev.check_command
    where = (f"the forward's output scale (a factor on the logits, a large init of the head); {cmd} measures the "
             "loss at initialisation (its init_loss rule), which should start near ln V" if cmd else
             f"the initialisation (model.init{_now_str(ev.section('model').get('init'))}; depthlab's GPT with "
             "model.init gpt2 starts near ln V)")
    return Finding("init_loss", evidence, f"not the learning rate: the logits at initialisation are far too large; "
                                          f"fix {where}")


def _now_str(v: object) -> str:
    return f" (now {v})" if isinstance(v, str) and v else ""


def _final_nonfinite(ev: Evidence) -> Optional[Finding]:
    """The final validation (summary.json) is not finite while every periodic evaluation was: the forward gives
    NaN/inf only for some inputs (the whole split's shorter windows or batches), not a learning-rate problem."""
    final = (ev.summary or {}).get("final_validation")
    if not isinstance(final, dict) or "val_loss" not in final or finite_or_none(final["val_loss"]) is not None:
        return None
    source = ev.section("model").get("source")
    where = (f"{ev.check_command} tests the forward at many lengths and names where the first NaN/inf is made"
             if source else "look for an operation that makes NaN/inf only for some lengths or positions")
    return Finding("exploding", f"the final validation loss is not finite ({final['val_loss']} nats over the whole "
                                f"val split, best weights of step {final.get('step')}) while every periodic "
                                "evaluation was finite: the forward gives NaN/inf for some inputs (the whole split "
                                "is read in windows and batches that can be shorter than training's)",
                   f"not the learning rate: {where}")


def _nonfinite_at_init(ev: Evidence) -> Optional[Finding]:
    """A loss already non-finite at step 0 (the evaluation before any update): the weights as built, not the
    learning rate, which has not acted yet."""
    bad = next((r for r in ev.evals if r.get("step") == 0 and any(
        k in r and finite_or_none(r[k]) is None for k in ("train_loss", "val_loss"))), None)
    if bad is None:
        return None
    source = ev.section("model").get("source")
    where = (f"{ev.check_command} names where the first NaN/inf is made (its finite check)" if source else
             "look for an operation that makes NaN/inf at initialisation (0/0, log or sqrt of values <= 0, exp of "
             "large scores)")
    return Finding("exploding", f"the loss is non-finite at step 0, before any optimizer update (train_loss "
                                f"{bad.get('train_loss')}, val_loss {bad.get('val_loss')}): the weights the run "
                                "started with already compute NaN/inf",
                   f"not the learning rate (no update had happened): {where}")


# ---------------------------------------------------------------------------------- overfitting, plateau
@rule("overfitting", needs=(OVERFIT_EVALS,))
def overfitting(ev: Evidence) -> Optional[Finding]:
    """val - train gap above ``overfit_gap`` while val loss no longer improves, and either the gap grew by
    ``overfit_growth`` over the last ``overfit_window`` evals, or val rose by ``overfit_growth`` above its best
    while train kept falling (the textbook picture: a gap that widens slowly over many evals, each step under the
    window's growth, still ends there).

    A gap that grows while val still falls is the usual train/val shift of a small corpus, not
    harm: stopping then would give a worse model. A diverged run (see ``exploding``), or one
    whose train loss is above the uniform baseline ln V, has fitted nothing: never overfitting.
    """
    th = ev.thresholds
    recent = [(s, v, v - t) for s, v, t in ev.loss_pairs[-th.overfit_window:]]
    gaps = [g for _, _, g in recent]
    growing = all(b >= a for a, b in zip(gaps, gaps[1:])) and gaps[-1] - gaps[0] >= th.overfit_growth
    best = min(ev.loss_pairs, key=lambda p: p[1])  # (step, val, train) at the best val
    last = ev.loss_pairs[-1]
    rose = last[1] - best[1] >= th.overfit_growth and last[2] < best[2]
    # a last evaluation below the window's others is improvement only near the best: one 16 nats above it that dips
    # 0.01 is still overfit (a tiny corpus's run was told to train longer)
    still_improving = recent[-1][1] < min(v for _, v, _ in recent[:-1]) - 1e-3 and not rose
    if gaps[-1] <= th.overfit_gap or not (growing or rose) or still_improving or divergence(ev):
        return None
    uniform = finite_or_none(((ev.baselines or {}).get("uniform") or {}).get("nats"))
    if uniform is not None and recent[-1][1] - recent[-1][2] > uniform:
        return None  # train loss above ln V: diverged, not overfitted
    if growing:
        words = (f"val - train gap grew from {gaps[0]:.3f} (step {recent[0][0]}) to {gaps[-1]:.3f} nats "
                 f"(step {recent[-1][0]})")
    else:
        words = (f"val rose from its best {best[1]:.3f} (step {best[0]}) to {last[1]:.3f} nats (step {last[0]}) "
                 f"while train fell from {best[2]:.3f} to {last[2]:.3f}: the val - train gap is {gaps[-1]:.3f} nats")
    return Finding("overfitting", words, _overfit_remedy(ev))


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
    if m.get("source"):  # model.dropout is depthlab's GPT's (refused with a model.source): the user's code has its own
        parts.append("add dropout (0.1-0.2) in the model's code, or raise it through an argument given with "
                     "--model.init")
    else:
        parts.append("add model.dropout 0.1-0.2" if not drop else f"raise model.dropout (now {drop:g})")
    parts.append(f"raise train.weight_decay{ev.now('train.weight_decay')}")
    parts.append("use a smaller model or more data")
    return "; ".join(parts)


@rule("plateau", needs=(PLATEAU_EVALS,))
def plateau(ev: Evidence) -> Optional[Finding]:
    """The last ``plateau_evals`` evals did not beat the best val loss before them by ``plateau_tol``
    (a diverged run's flat val loss is the divergence, and an overfitting one's the overfitting: not a plateau)."""
    vals, n = ev.val_losses, ev.thresholds.plateau_evals
    before = min(v for _, v in vals[:-n])
    recent = min(v for _, v in vals[-n:])
    if recent < before - ev.thresholds.plateau_tol or divergence(ev):
        return None
    if OVERFIT_EVALS.met(ev) and isinstance(overfitting.judge(ev), Finding):
        return None  # the flat val loss is the overfitting, whose remedy is the other way from "grow the model"
    worse = recent > before + ev.thresholds.plateau_tol
    return Finding("plateau", f"no val improvement over the last {n} evals (steps {vals[-n][0]}-{vals[-1][0]}): "
                   f"best recent {recent:.4f} vs {before:.4f} before" + (" (worse, not only flat)" if worse else ""),
                   _plateau_remedy(ev, worse))


def _plateau_remedy(ev: Evidence, worse: bool = False) -> str:
    """Lower a high dropout first; let the rate decay when the run stopped with it still far above its floor (a
    lower min_lr would change nothing there); a val loss that rose is no converged model; else the converged
    model's ways forward."""
    drop = dropout_advice(ev)
    if drop:
        return drop
    if worse:
        return ("the val loss rose above its best, so the model did not converge: best.safetensors holds the best "
                "weights; the run's other findings (a learning rate too high, exploding) say why, or lower "
                f"train.learning_rate{ev.now('train.learning_rate')} and judge again")
    last = next((r for r in reversed(ev.records) if finite_or_none(r.get("lr")) is not None and "step" in r), None)
    floor, peak = (finite_or_none(ev.section("train").get(k)) for k in ("min_lr", "learning_rate"))
    # more than halfway from the floor to the peak: most of the decay was still to come
    if last is not None and floor is not None and peak is not None and last["lr"] > floor + 0.5 * (peak - floor):
        return (f"the learning rate was still {last['lr']:.3g} at step {last['step']} (its floor train.min_lr "
                f"{floor:g}): the decay had not run, and a plateau at a high rate is often only its noise; let it "
                "decay (train.fit_to_time true ends the decay inside train.max_time, or a train.max_iters the time "
                "allows), then judge again")
    # model.n_layer / n_embd are depthlab's GPT's (refused with a model.source): the user's model has its own sizes
    sizes = ("its sizes, in its code or the arguments given with --model.init" if ev.section("model").get("source")
             else "model.n_layer, model.n_embd")
    return (f"the model has converged for this size/LR: stop, decay the LR further (train.min_lr"
            f"{ev.now('train.min_lr')}), or grow the model ({sizes}) or its context (model.block_size)")
