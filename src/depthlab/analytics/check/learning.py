"""The rules that train a copy of the model briefly: overfit_batch and context_use.

Both use one small loop of their own (AdamW, linear warmup, gradient clipping at 1.0, CPU,
seeded), not the trainer: a check must not write a run directory, and its budget is seconds.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..baselines import bigram_nats, one_token_line, unigram_nats
from .finite import nonfinite_result
from .outputs import BOUNDED, output_kind, probs_floor
from .saturation import SATURATED, describe_sites, saturated_sites
from .subject import CheckResult, Subject, call_user

__all__ = ["overfit_batch_rule", "context_use_rule", "OVERFIT_STEPS", "OVERFIT_MAX_STEPS", "OVERFIT_TARGET",
           "CONTEXT_STEPS", "CONTEXT_MIN_GAIN"]

OVERFIT_BATCH = 4
"""Sequences in the one batch overfit_batch memorises (unless the batch size is hard-coded)."""
OVERFIT_STEPS = 150
"""overfit_batch's first look: past it, training goes on only while the loss keeps falling (OVERFIT_MIN_FALL).

Measured (CPU, 2 threads, the check's loop: AdamW lr 3e-3, warmup 15; steps to a loss below OVERFIT_TARGET): depthlab's
2-block GPT (64 wide) prenorm, postnorm, deepnorm and periln, with rope or learned positions, at T = 32 and 64, in
37-77 steps; but ``rezero`` with rope in 202-406 steps at T = 32 and 381-746 at 64 (9 seeds), with learned
positions 155-238 at 64, and ``plain`` 137-158 at 32 (4 seeds) and 221-708 at 64 (one of 18 runs stays at the
unigram level, 3.32 nats, for 1,300 steps). ReZero's gate alpha starts at 0, so every
block is the identity at first and only a bigram of the batch can be fitted; AdamW moves alpha by at most about the
lr per step, so what the blocks add grows slowly; with rope nothing in the residual stream says where a token is (a
learned table puts it there from step 0), so telling apart the batch's repeated characters needs the blocks. At lr
1e-2 ReZero memorises in 96-165 steps, but the plain stack then stays at the unigram level in 6 of 10 runs: no lr
fits both, and a higher fixed limit would train every model that fails for that long. The models that cannot
memorise stop improving early instead (the loss near a floor: the unigram level of a deep stack without shortcuts,
3.35 nats, flat from step ~100; a forward that predicts from the current character alone, 0.69 nats by step ~250;
softmax or sigmoid outputs, whose floor is above the target); so training goes on while it falls, and stops when
it does not."""
OVERFIT_LR = 3e-3
OVERFIT_TARGET = 0.3
"""overfit_batch passes when the loss on its batch falls below this many nats (it stops there)."""
OVERFIT_WINDOW = 100
OVERFIT_MIN_FALL = 0.05
"""Past OVERFIT_STEPS, every OVERFIT_LOOK steps, training goes on while the best loss so far is at least this
fraction below the best of OVERFIT_WINDOW steps earlier. Measured as above (each looked at every 50 steps): the
ratio best now / best 100 steps before of the correct models that memorise was at most 0.91 (plain, learned
positions, T = 64, at step 150; it memorises at 666), 0.88 at most at every later look; the failing ones' is 0.98
or more one look after they reach their floor (no_shortcut 0.93 at step 150, 0.994 at 200; the current-character
model 0.95 at 250, 0.986 at 300), so they stop there, 50-150 steps past the old fixed limit."""
OVERFIT_LOOK = 50
OVERFIT_MAX_STEPS = 1000
"""The most steps overfit_batch trains while the loss keeps falling (the slowest correct model measured: 746)."""
CONTEXT_TOKENS = 1024
"""Tokens per step of context_use's training (batch = this / T, unless the batch size is hard-coded)."""
CONTEXT_STEPS = 250
"""Training steps of context_use (twice that when the first ones end above the bigram baseline, undecided)."""
CONTEXT_LOOKS = (50, 100)
"""Steps at which context_use also scores its pairs (besides the end of each pass), stopping at a score that shows
use: a model that uses its context mostly shows it long before CONTEXT_STEPS (a depthlab GPT by step 50), one that
does not trains on, at ~0.15 s per extra score."""
CONTEXT_LR = 1e-2
CONTEXT_PAIRS = 512
"""Targets scored twice by context_use: at position 0 (one token seen) and at a late position (many seen)."""
CONTEXT_MIN_GAIN = 0.05
"""context_use passes when the same targets are predicted this many nats better with context (and > 2 s.e.)."""


class _Loop:
    """AdamW (betas 0.9/0.99, no weight decay), linear warmup over ``warmup`` steps, clipping at 1.0;
    :meth:`run` can be called again to continue (optimizer state and step count kept)."""

    def __init__(self, subject: Subject, model: nn.Module, lr: float, warmup: int):
        self.subject, self.model, self.lr, self.warmup = subject, model, lr, max(1, warmup)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
        self.step = 0
        self.history: list[list[float]] = []  # [step, loss] every record_every steps (and at a stop)
        self.losses: list[float] = []  # every step's loss
        self.nonfinite: Optional[int] = None  # the step of a non-finite loss
        self.no_grad = False  # the loss had no gradient (logits cut from the graph): no step was taken

    def run(self, steps: int, batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]], record_every: int = 25,
            stop_below: Optional[float] = None) -> bool:
        """Train ``steps`` more steps (fewer when the loss falls below ``stop_below``); False on a non-finite loss."""
        for _ in range(steps):
            s = self.step
            for g in self.opt.param_groups:
                g["lr"] = self.lr * min(1.0, (s + 1) / self.warmup)
            x, y = batch(s)
            loss = self.subject.loss(self.model, x, y)
            if not torch.isfinite(loss):
                self.nonfinite = s
                return False
            value = float(loss.detach())
            self.losses.append(value)
            below = stop_below is not None and value < stop_below
            if s % record_every == 0 or below:
                self.history.append([s, value])
            self.no_grad = not loss.requires_grad
            if below or self.no_grad:
                return True
            self.opt.zero_grad(set_to_none=True)
            call_user(loss.backward)
            torch.nn.utils.clip_grad_norm_(self.params, 1.0)
            self.opt.step()
            self.step += 1
        return True


def overfit_batch_rule(subject: Subject) -> CheckResult:
    """Memorise one small batch: the loss on it must fall near zero (OVERFIT_TARGET).

    Trains OVERFIT_STEPS steps, then on while the loss keeps falling (OVERFIT_MIN_FALL per OVERFIT_WINDOW steps,
    looked at every OVERFIT_LOOK) up to OVERFIT_MAX_STEPS; it stops at the target.
    """
    torch.manual_seed(subject.seed)
    model = subject.fresh().eval()  # eval: no dropout, the point is whether it *can* fit
    if not any(p.requires_grad for p in model.parameters()):
        return CheckResult("overfit_batch", False, {"summary": "no parameter requires grad: nothing can be fitted"},
                           "set requires_grad=True on the model's parameters")
    B, T = subject.free_batch(OVERFIT_BATCH), subject.T
    x, y = subject.batch(B, T, subject.rng(5))
    with torch.no_grad():
        kind = output_kind(subject.logits(model, x))
    loop = _Loop(subject, model, OVERFIT_LR, OVERFIT_STEPS // 10)
    ok = loop.run(OVERFIT_STEPS, lambda s: (x, y), stop_below=OVERFIT_TARGET)
    # probabilities or a sigmoid cannot reach the target (their floor is above it): no point training on
    while ok and not loop.no_grad and kind not in BOUNDED and loop.step < OVERFIT_MAX_STEPS and \
            min(loop.losses) >= OVERFIT_TARGET and _still_falling(loop.losses):
        ok = loop.run(min(OVERFIT_LOOK, OVERFIT_MAX_STEPS - loop.step), lambda s: (x, y), stop_below=OVERFIT_TARGET)
    if loop.no_grad:
        return _no_step("overfit_batch")
    history, bad = loop.history, loop.nonfinite
    reached = history[-1][0] if history and history[-1][1] < OVERFIT_TARGET else None
    if reached is None:
        with torch.no_grad():
            final = float(subject.loss(model, x, y))
        if bad is None and not math.isfinite(final):  # the last update made the weights non-finite
            bad = loop.step
    else:
        final = history[-1][1]
    first = history[0][1] if history else math.nan
    ev = {"batch_size": B, "block_size": T, "tokens": B * T, "steps": loop.step, "first_look": OVERFIT_STEPS,
          "max_steps": OVERFIT_MAX_STEPS, "lr": OVERFIT_LR, "initial_loss": first, "final_loss": final,
          "target": OVERFIT_TARGET, "reached_at_step": reached, "history": history}
    if bad is not None:
        why = f"the loss became non-finite at step {bad} while fitting one batch (lr {OVERFIT_LR:g})"
        return CheckResult("overfit_batch", False, {"summary": why, **ev},
                           "something overflows in training: look for a division by a small number, exp() of "
                           "large scores, or an initialisation that makes the logits huge (see init_loss)")
    ev["unigram_level"] = unigram_level(y)
    return _overfit_verdict(subject, kind, loop.losses, ev,
                            lambda: saturated_sites(model, lambda: subject.logits(model, x)))


def unigram_level(y: torch.Tensor) -> float:
    """The batch's unigram level: the entropy (nats) of its targets' frequencies, the loss of the best prediction
    that does not depend on the input."""
    p = torch.bincount(y.reshape(-1)).double()
    p = p[p > 0] / p.sum()
    return float(-(p * p.log()).sum())


def _overfit_verdict(subject: Subject, kind: Optional[str], losses: list[float], ev: dict,
                     saturation: Callable[[], list[dict]] = list) -> CheckResult:
    """overfit_batch's verdict on a finite training: the target reached, a floor (bounded outputs), a loss that
    stopped falling, or one still falling at OVERFIT_MAX_STEPS; fills ``ev``. ``saturation()`` gives the trained
    model's saturated tanh / sigmoid sites (:func:`saturated_sites`), asked only when it failed."""
    B, T, steps, reached = ev["batch_size"], ev["block_size"], ev["steps"], ev["reached_at_step"]
    first, final = ev["initial_loss"], ev["final_loss"]
    head = f"one batch of {B}x{T} tokens: loss {first:.3f} -> {final:.3f} nats"
    how = f"(AdamW lr {OVERFIT_LR:g}; target < {OVERFIT_TARGET})"
    if final < OVERFIT_TARGET:  # at a step, or only after the last update
        txt = f"{head} at step {reached} {how}" if reached is not None else f"{head} after {steps} steps {how}"
        if (reached if reached is not None else steps - 1) >= OVERFIT_STEPS:
            txt += (f", trained past step {OVERFIT_STEPS} because the loss was still falling ({OVERFIT_MIN_FALL:.0%} "
                    f"or more per {OVERFIT_WINDOW} steps)")
        return CheckResult("overfit_batch", True, {"summary": txt, **ev})
    txt = f"{head} after {steps} steps {how}"
    if kind in BOUNDED:
        V, (what, fix, _) = subject.model_vocab or subject.vocab_size, BOUNDED[kind]
        return CheckResult("overfit_batch", False, {"summary": txt + ": it cannot even memorise a batch", **ev},
                           f"{what}, so the loss cannot fall below ln(1 + (V-1)/e) = {probs_floor(V):.2f} "
                           f"nats whatever it learns (see init_loss): {fix}")
    then, now = _best_before(losses), min(losses)
    last = len(losses) - 1  # the last step whose loss was computed
    ev.update({"best_loss": now, "best_loss_window_before": then})
    best = f"best {then:.3f} by step {max(0, last - OVERFIT_WINDOW)}, {now:.3f} by step {last}"
    try:
        sites = saturation()
    except Exception:  # noqa: BLE001 - extra evidence only: a forward that cannot be watched gives none
        sites = []
    ev["saturated"] = sites
    why = _why_stuck(now, ev["unigram_level"], sites)
    if now < (1 - OVERFIT_MIN_FALL) * then:  # still falling at OVERFIT_MAX_STEPS
        return CheckResult("overfit_batch", False, {
            "summary": txt + f": still falling ({best}) but not to the target in the {OVERFIT_MAX_STEPS} steps the "
                             f"check trains: it memorises a batch very slowly{why}", "still_falling": True, **ev},
            _saturation_fix(sites) or
            "the loss falls, so the gradient reaches the parameters, but slowly: look for a scale that keeps what "
            "the layers add small (a gate or multiplier near 0, a division by a large number), a deep stack without "
            "shortcuts (gradient_flow) or parameters without gradient (no_gradient)")
    return CheckResult("overfit_batch", False, {
        "summary": txt + f": the best loss fell by less than {OVERFIT_MIN_FALL:.0%} in the last {OVERFIT_WINDOW} "
                         f"steps ({best}), so training stopped: it does not memorise a batch{why}", **ev},
        _saturation_fix(sites) or
        "a model that cannot memorise a handful of sequences does not learn from its input: look "
        "for outputs cut from the graph (.detach(), torch.no_grad(), .data), parameters without "
        "gradient (no_gradient), logits misaligned with the targets, or a deep stack without "
        "shortcuts (gradient_flow)")


UNIGRAM_MARGIN = 0.02
"""A best loss within this many nats of the batch's unigram level is said to sit there."""


def _why_stuck(best: float, unigram: float, sites: list[dict]) -> str:
    """The summary's tail on a failed overfit_batch: a loss at the batch's unigram level, saturated sites."""
    out = ""
    if abs(best - unigram) < UNIGRAM_MARGIN:
        out += (f"; the loss sits at the batch's unigram level ({unigram:.3f} nats, what predicting the batch's token "
                "frequencies gives whatever the input): the predictions do not depend on the input")
    where = describe_sites(sites)
    if where:
        out += (f"; after the training, {where} {'is' if len(sites) == 1 else 'are'} saturated (outputs within "
                f"{1 - SATURATED:.2f} of their bounds, where less than 2% of the gradient passes)")
    return out


def _saturation_fix(sites: list[dict]) -> Optional[str]:
    """overfit_batch's remedy when tanh / sigmoid sites saturated in its training (None when none did)."""
    if not sites:
        return None
    fix = ("a tanh or sigmoid whose inputs grow large in training saturates and stops passing the gradient: keep "
           "its inputs small (a norm before it, a smaller initialisation)")
    if any(s["function"] == "tanh" and s["class"].lower() in ("dyt", "dynamictanh") for s in sites):
        fix += ("; for DyT (gamma * tanh(alpha * x)) in place of a norm: with GPT-2's N(0, 0.02) embeddings the "
                "stream starts near 0.02 and the first steps grow it until the tanh saturate; multiply the "
                "embeddings by a learnable scalar that starts the stream at RMS ~1 (1 / their initial RMS, ~50; the "
                "DyT authors' LLaMA code multiplies N(0, 1/n_embd) embeddings by a learnable sqrt(n_embd); "
                "depthlab's GPT: model.embed_scale learned, auto's choice with DyT, with which its 2-block pre-LN "
                "DyT GPT memorises this batch), keep DyT on the branch inputs (pre-LN: after the sum it passes "
                "~alpha of the stream on, and depthlab's post-LN DyT GPT still saturates), or use LayerNorm / "
                "RMSNorm")
    return fix


def _best_before(losses: list[float]) -> float:
    """The best loss up to OVERFIT_WINDOW steps before the last (the first loss when fewer steps were taken)."""
    return min(losses[:max(1, len(losses) - OVERFIT_WINDOW)])


def _still_falling(losses: list[float]) -> bool:
    """Whether the best loss so far is OVERFIT_MIN_FALL below the best of OVERFIT_WINDOW steps earlier."""
    return min(losses) < (1 - OVERFIT_MIN_FALL) * _best_before(losses)


def _no_step(rule: str) -> CheckResult:
    """Not run: the loss carries no gradient (every output detached), so no training step could be taken."""
    return CheckResult(rule, None, {"summary": "not run: the loss has no gradient (the logits are cut from the graph: "
                                               "see no_gradient), so no training step could be taken", "steps": 0},
                       "let the logits keep their graph: no .detach(), torch.no_grad() or .data in forward")


def _pairs(subject: Subject, T: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Windows scoring each target twice: A[i] has it at position 0, Bw[i] at position k[i] >= T // 2."""
    val = np.asarray(subject.corpus.val)
    rng = subject.rng(6)
    s = rng.integers(T, len(val) - T - 1, size=CONTEXT_PAIRS)
    k = rng.integers(T // 2, T, size=CONTEXT_PAIRS)
    ar = np.arange(T + 1)
    a = torch.from_numpy(val[s[:, None] + ar].astype(np.int64))
    b = torch.from_numpy(val[(s - k)[:, None] + ar].astype(np.int64))
    return a, b, torch.from_numpy(k), torch.from_numpy(s)


def _per_position_loss(subject: Subject, model: nn.Module, w: torch.Tensor) -> torch.Tensor:
    """Cross-entropy (N, T) of windows w (N, T + 1): inputs w[:, :-1], targets w[:, 1:]."""
    with torch.no_grad():
        logits = subject.logits_many(model, w[:, :-1].contiguous())  # as training gives it: idx.view works
    n, T, V = logits.shape
    return F.cross_entropy(logits.reshape(-1, V), w[:, 1:].reshape(-1), reduction="none").view(n, T)


def _measure_context(subject: Subject, model: nn.Module, ev: dict) -> tuple[float, float, float, float]:
    """Score the validation pairs; fills ``ev``; returns (gain, its standard error, position-0 loss, late loss)."""
    T = subject.T
    model.eval()
    a, b, k, _ = _pairs(subject, T)
    la, lb = _per_position_loss(subject, model, a), _per_position_loss(subject, model, b)
    model.train()
    gain = la[:, 0] - lb[torch.arange(len(k)), k]
    g, se = float(gain.mean()), float(gain.std() / math.sqrt(len(gain)))
    both = torch.cat([la, lb])
    pos0, late = float(both[:, 0].mean()), float(both[:, T // 2:].mean())
    ev.update({"loss_position_0": pos0, "loss_late": late, "late_from": T // 2, "gain_nats": g, "gain_se": se,
               "pairs": len(gain),
               "loss_by_position": {str(p): float(both[:, p].mean())
                                    for p in sorted({0, 1, 2, T // 4, T // 2, T - 1})}})
    return g, se, pos0, late


def context_use_rule(subject: Subject) -> CheckResult:
    """After a short training on the corpus: are the same targets predicted better late than at position 0?

    Trains up to CONTEXT_STEPS steps, scored at CONTEXT_LOOKS and the end (it stops at the first score that
    shows use); when they do not show it and the loss is still above the bigram baseline (the training did not
    get far enough to tell), CONTEXT_STEPS more, once.
    """
    T = subject.T
    if T < 4 or len(subject.corpus.val) < 3 * T + 2:
        return CheckResult("context_use", None, {"summary": f"not run: needs T >= 4 and a validation split of at least "
                                                            f"{3 * T + 2} tokens (T={T}, {len(subject.corpus.val)})"})
    if subject.leaks:
        return CheckResult("context_use", None, {"summary": "not judged: the logits see later tokens (causal_leak), so "
                                                            "a trained model's loss measures copying the answer, not "
                                                            "use of the context; fix the leak first"})
    torch.manual_seed(subject.seed)
    model = subject.fresh().train()
    B = subject.free_batch(max(1, CONTEXT_TOKENS // T))
    rng = subject.rng(7)
    V = subject.vocab_size
    bigram = bigram_nats(subject.corpus.train, subject.corpus.val, V)
    ev: dict = {"batch_size": B, "block_size": T, "lr": CONTEXT_LR, "bigram_nats": bigram,
                "unigram_nats": unigram_nats(subject.corpus.train, subject.corpus.val, V)}
    loop = _Loop(subject, model, CONTEXT_LR, CONTEXT_STEPS // 10)
    for _ in range(2):
        scores = _train_and_score(subject, model, loop, lambda s: subject.batch(B, T, rng), ev)
        if isinstance(scores, CheckResult):
            return scores
        g, se, pos0, late = scores
        if _uses_context(g, se) or late <= bigram:
            break
    return _context_verdict(ev, g, se, pos0, late, bigram)


def _train_and_score(subject: Subject, model: nn.Module, loop: _Loop, batch: Callable, ev: dict):
    """Train up to CONTEXT_STEPS more steps, scored at CONTEXT_LOOKS and at the end; stop at a score showing use.

    Returns (gain, its standard error, position-0 loss, late loss) of the last score, or the rule's
    CheckResult when the loss had no gradient or the loss or the logits became non-finite.
    """
    end = loop.step + CONTEXT_STEPS
    for stop in [s for s in CONTEXT_LOOKS if s > loop.step] + [end]:
        ok = loop.run(stop - loop.step, batch, record_every=50)
        if loop.no_grad:
            return _no_step("context_use")
        ev.update({"steps": loop.step, "history": loop.history})
        if not ok:
            why = f"the training loss became non-finite at step {loop.nonfinite} (AdamW lr {CONTEXT_LR:g}, clip 1.0)"
            return CheckResult("context_use", False, {"summary": why, **ev},
                               "something overflows in training: see init_loss and gradient_flow")
        scores = _measure_context(subject, model, ev)
        if not all(math.isfinite(v) for v in scores):
            return nonfinite_result("context_use", f"after {loop.step} training steps (loss finite throughout) the "
                                                   "logits on the validation windows are not finite", ev)
        if _uses_context(*scores[:2]):
            break
    return scores


def _uses_context(g: float, se: float) -> bool:
    return g >= CONTEXT_MIN_GAIN and g > 2 * se


def _unused(txt: str, ev: dict, remedy: str) -> CheckResult:
    """``context_use``'s PROBLEM: the summary ``txt`` said as no use of the context, with ``remedy``."""
    # of this check's short training (its lr suits a pre-norm stack; a plain stack fails at it where a run at
    # depthlab's default rate trains): a claim about that training, not a property of the model alone
    return CheckResult("context_use", False, {"summary": txt + f": trained at AdamW lr {CONTEXT_LR:g}, the model "
                                              "does not use its context", **ev}, remedy)


def _context_verdict(ev: dict, g: float, se: float, pos0: float, late: float, bigram: float) -> CheckResult:
    versus = "below" if late < bigram else "still above"
    cost = f"{g:.3f} +- {se:.3f} nats less" if g >= 0 else f"{-g:.3f} +- {se:.3f} nats more"
    txt = (f"after {ev['steps']} steps ({ev['batch_size']}x{ev['block_size']} tokens each): the same "
           f"{ev['pairs']} validation targets cost {cost} at a late position than at position 0 (one token seen), "
           f"scored in pairs; over all these windows (different targets at each position) the loss at positions "
           f">= {ev['late_from']} is {late:.3f} and at position 0 {pos0:.3f}, {versus} the bigram baseline "
           f"{bigram:.3f}")
    if _uses_context(g, se):
        return CheckResult("context_use", True, {"summary": txt, **ev})
    line = one_token_line(bigram, ev["unigram_nats"])
    if late < line - CONTEXT_MIN_GAIN and pos0 > line - CONTEXT_MIN_GAIN:  # no one-token predictor gets there
        return CheckResult("context_use", True, {"summary": txt + f": the late positions are {line - late:.3f} nats "
                                                              f"below {line:.3f}, what the current token alone gives, "
                                                              "which only the context before it beats", **ev})
    if g + 2 * se >= CONTEXT_MIN_GAIN:  # neither use nor its absence shown
        return CheckResult("context_use", None, {
            "summary": txt + f": the paired gain is neither above {CONTEXT_MIN_GAIN} and twice its error nor below "
                             f"{CONTEXT_MIN_GAIN} beyond twice its error, so these targets cannot tell whether the "
                             "model uses its context", "undecided": True, **ev},
            "train the model with --model.source and look at depthlab context RUN, which measures more windows")
    unigram = ev["unigram_nats"]
    if pos0 > unigram + CONTEXT_MIN_GAIN:  # not even the frequencies: the outputs' scale, or nothing learned at all
        txt += (f"; even position 0 is {pos0 - unigram:.3f} nats above the unigram level {unigram:.3f}: the model "
                "has not learned even how common each token is")
        return _unused(txt, ev,
                       "first the output: a forward that ends in softmax or sigmoid (init_loss tests for it) "
                       "cannot get below ln(1 + (V-1)/e) whatever it learns, so nothing after it can be judged; "
                       "else the input does not reach the prediction: an output cut from the graph, or "
                       "parameters that get no gradient (no_gradient)")
    if pos0 > unigram - 0.5 * (unigram - bigram):  # nearer the unigram level than the bigram one
        txt += (f"; even position 0 is near the unigram level {unigram:.3f}: the prediction does not depend on the "
                "current token either, the input hardly reaches the output")
        return _unused(txt, ev,
                       "the input does not reach the prediction: a stack without shortcuts (each block adds to "
                       "the stream: x = x + sublayer(norm(x)); gradient_flow judges the blocks at initialisation "
                       "only, training can collapse them later), an output cut from the graph, or parameters "
                       "that get no gradient (no_gradient)")
    return _unused(txt, ev,
                   "the tokens before the current one do not reach the prediction, so the loss stays at the "
                   f"bigram level ({bigram:.3f} on this corpus): check that the attention output is added into "
                   "the residual stream (x = x + out_proj(attn)), that the mask keeps the past visible "
                   "(torch.tril, not torch.eye), and that no parameter lacks a gradient (no_gradient)")
