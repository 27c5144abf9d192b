"""The one interface of a diagnosis rule: what it needs, and a judgement of the evidence.

A :class:`Rule` declares its :class:`Need` s once. Called on an :class:`Evidence` it checks them
and answers :class:`NotJudged` (naming every need the run does not meet) or asks its judge
function, which returns a :class:`Finding` or None (judged: nothing wrong). The judge never
checks the data it declared: the same need says both "enough to judge" and, in words, what
was missing. The needs of all rules are listed in :data:`NEEDS`, in the order the "not judged"
lines are said.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

from ...units import counted, finite_or_none
from .evidence import LR_JUDGED_FRACTION, Evidence, Finding
from .advice import warmup_words
from .signals import NO_GRAD_FROM_STEP, blockless_words, grad_records_judged

__all__ = ["Need", "Rule", "NotJudged", "Verdict", "rule", "who_needs", "NEEDS", "GRAD", "GRAD_LATE", "LR_RECORDS",
           "PROBE", "DISTINCT", "LEARNABLE", "LOSS_LEFT", "RANK_ZERO",
           "CONTEXT", "LATE_EVAL", "BASELINES", "PLATEAU_EVALS",
           "OVERFIT_EVALS"]


def who_needs(n_rules: int) -> str:
    """"it needs" for one rule, "they need" for several (the subject of a shortfall's words)."""
    return "they need" if n_rules > 1 else "it needs"


@dataclass(frozen=True)
class Need:
    """Data a rule cannot judge without.

    Attributes:
        source: the ``metrics.jsonl`` record kind or run file it reads (``"grad"``, ``"probe"``,
            ``"eval"``, ``"baselines"``).
        what: the need in a few words (``"gradient records"``).
        shortfall: ``(evidence, who_needs) -> words or None``: None when the evidence meets the
            need, else what is missing, with the run's numbers; ``who_needs`` is "it needs" or
            "they need" for the rules that share the line.
    """

    source: str
    what: str
    shortfall: Callable[[Evidence, str], Optional[str]]

    def met(self, ev: Evidence) -> bool:
        """True when ``ev`` has what this need asks for."""
        return self.shortfall(ev, who_needs(1)) is None


@dataclass(frozen=True)
class NotJudged:
    """A rule that did not judge: the needs it declared that the run does not meet.

    Attributes:
        rules: the rule names it would have given (``("lr_too_high", "lr_too_low")``).
        needs: every unmet need, in declared order.
        reason: the first unmet need's shortfall, in words.
    """

    rules: tuple[str, ...]
    needs: tuple[Need, ...]
    reason: str

    def __str__(self) -> str:
        return (f"{', '.join(self.rules)}: not judged: needs {', '.join(n.what for n in self.needs)} "
                f"({self.reason})")


Verdict = Union[Finding, NotJudged, None]
"""What a rule answers: a finding, "not judged", or None (judged, nothing wrong)."""


@dataclass(frozen=True)
class Rule:
    """A diagnosis rule.

    Attributes:
        names: the finding names it can give (one, or ``lr_too_high``/``lr_too_low``).
        needs: the data it cannot judge without, checked before ``judge`` is asked.
        judge: ``evidence -> Finding or None``, called only when every need is met.
    """

    names: tuple[str, ...]
    needs: tuple[Need, ...]
    judge: Callable[[Evidence], Optional[Finding]]

    def __post_init__(self) -> None:
        object.__setattr__(self, "__doc__", self.judge.__doc__)  # help(rule) shows what it judges

    @property
    def sources(self) -> tuple[str, ...]:
        """The record kinds and run files its needs read, each once, in declared order."""
        return tuple(dict.fromkeys(n.source for n in self.needs))

    def __call__(self, ev: Evidence) -> Verdict:
        unmet = tuple(n for n in (LEARNABLE, *self.needs) if not n.met(ev))  # every rule needs something to learn
        if unmet:
            return NotJudged(self.names, unmet, unmet[0].shortfall(ev, who_needs(len(self.names))) or "")
        return self.judge(ev)


def rule(*names: str, needs: tuple[Need, ...] = ()) -> Callable[[Callable[[Evidence], Optional[Finding]]], Rule]:
    """Decorator: ``@rule("plateau", needs=(PLATEAU_EVALS,))`` over a judge function makes a :class:`Rule`."""
    def make(judge: Callable[[Evidence], Optional[Finding]]) -> Rule:
        return Rule(tuple(names), tuple(needs), judge)
    return make


# ---------------------------------------------------------------------------------- the needs
def run_length(ev: Evidence) -> str:
    """``"the run is N steps"``: from the records, or from ``summary.json`` when it says more (damaged
    or cut records: their readable part ends earlier than the run did, and the sentence says both)."""
    step, source = ev.end_step
    if source == "records":
        return f"the run is {counted(step, 'step')}"
    end = (f"its readable records end at step {ev.last_step}" if ev.records else
           "metrics.jsonl holds no readable record")
    said = "summary.json" if source == "summary" else "its last checkpoint"
    return f"the run is {counted(step, 'step')} ({said}), {end}"


def _grad(ev: Evidence, who: str) -> Optional[str]:
    if ev.grads:
        return None
    return (f"no gradient records: train.grad_log_interval is {ev.section('train').get('grad_log_interval', '?')} "
            f"and {run_length(ev)}")


def _grad_late(ev: Evidence, who: str) -> Optional[str]:
    if grad_records_judged(ev):
        return None
    return (f"{who} a gradient record at step {NO_GRAD_FROM_STEP} or later (at step 1 a zero-initialised gate, "
            f"as in ReZero, has no gradient by design); the records are at steps "
            f"{', '.join(str(r['step']) for r in ev.grads[:5])}")


def _lr_records(ev: Evidence, who: str) -> Optional[str]:
    n, need = len(ev.update_ratios[0]), ev.thresholds.lr_min_records
    if n >= need:
        return None
    if n == 0 and ev.grads and all(r.get("update_ratio_block") == [] for r in ev.grads):
        # no block in any record: no grad_log_interval and no longer run helps (a count of the records did not say so)
        return blockless_words(ev, who, "the update/weight ratios of the model's blocks", "holds one")
    warm = warmup_words(ev) if n == 0 else None
    if warm:  # every record is in a ramp that never ends: no grad_log_interval or longer run at this warmup helps
        return f"{who} {need} gradient records after the warmup, the run has none: {warm}"
    late = len(ev.grads_after_warmup) - len(ev.lr_judged_grads)
    rate = (f" at {LR_JUDGED_FRACTION:g}x the peak learning rate or more ({late} later in the decay are not judged)"
            if late else "")
    return (f"{who} {need} gradient records after the warmup{rate}, the run has {n}; lower "
            "train.grad_log_interval or train longer")


def _probe(ev: Evidence, who: str) -> Optional[str]:
    if ev.last_probe is not None:
        return None
    if ev.section("model").get("source"):
        return "no activation probe: the training probe hooks depthlab's GPT only, and this run trained model.source"
    interval = ev.section("train").get("probe_interval", "?")
    if interval == 0:
        return "no activation probe: train.probe_interval is 0"
    if not ev.records:  # the trainer probes at step 0 and at the end whatever the interval: not why there is none
        return f"no activation probe: {run_length(ev)}"
    return (f"no activation probe among the readable records of metrics.jsonl (the trainer probes at step 0, every "
            f"train.probe_interval ({interval}) steps and at the end: lost, or written by another version)")


def _late_probe(ev: Evidence, who: str) -> Optional[str]:
    """A probe at ``uniform_attention_min_step`` or later: at initialisation every head attends near-uniformly, so an
    earlier probe's uniform attention is no finding, and none was no verdict either (it passed silently)."""
    if ev.last_probe is None:
        return _probe(ev, who)
    step, need = int(ev.last_probe["step"]), ev.thresholds.uniform_attention_min_step
    if step >= need:
        return None
    ahead = (f"{who} an activation probe at step {need} or later (attention starts near-uniform and sharpens with "
             "training)")
    end = ev.end_step[0]
    if isinstance(end, int) and end >= need:  # the run went on past it: its probes stopped earlier
        return (f"{ahead}; the last readable probe is at step {step} of {counted(end, 'step')} "
                f"(train.probe_interval {ev.section('train').get('probe_interval', '?')})")
    return f"{ahead}; {run_length(ev)}"


RANK_ZERO = 1e-5
"""A rank measure below this after block 0 is 0 up to float rounding (a float32 stream of equal vectors measures
~5e-8): the positions carried one and the same vector from the first block on, which the blocks do not do to
distinct tokens."""


def _distinct_positions(ev: Evidence, who: str) -> Optional[str]:
    """What the probe measures (the rank measure, attention entropy) says something about the model only when the
    positions carry different tokens: not when the stream is already the same vector at every position after block 0
    (a corpus of one distinct token is :data:`LEARNABLE`'s, asked of every rule first)."""
    if ev.last_probe is None:
        return _probe(ev, who)
    unit = ev.unit
    p = ev.last_probe
    rm = p.get("rank_measure") if isinstance(p.get("rank_measure"), list) else []
    first = finite_or_none(rm[0]) if rm else None
    if first is not None and first < RANK_ZERO:
        return (f"at step {p.get('step')} the rank measure after block 0 is {first:.1e}, 0 up to float rounding: every "
                f"position carries the same vector from the first block on, as windows that repeat one {unit} give, "
                f"so the probe cannot show what the blocks do to distinct {unit}s")
    return None


def _learnable(ev: Evidence, who: str) -> Optional[str]:
    """A corpus of one distinct token leaves nothing to learn: softmax over one class is 1, so every loss is 0 and
    every gradient of it is exactly 0 whatever the weights; no rule can say anything about the model."""
    if ev.vocab_size != 1:
        return None
    return (f"the corpus has one distinct {ev.unit} (V = 1): every window repeats it, so every loss and every "
            "gradient is 0 whatever the weights and there is nothing to learn; train on a text with at least two "
            f"distinct {ev.unit}s (data.path)")


def _late_eval(ev: Evidence, who: str) -> Optional[str]:
    if ev.late_evals():
        return None
    th, need = ev.thresholds, int(ev.bigram_tokens())
    late = [r for r in ev.evals if int(r["step"]) >= th.bigram_min_steps]
    if late:  # the step gate is met: the tokens gate is the one that fails, so say the tokens
        seen = max(int(r.get("tokens_seen") or 0) for r in late)
        return (f"{who} {need:,} tokens seen ({th.bigram_min_pairs_seen:g} x V^2, V = {ev.vocab_size}) at an "
                f"evaluation at step {th.bigram_min_steps} or later; by its last evaluation, at step "
                f"{late[-1]['step']}, the run had seen {seen:,}: raise train.batch_size or train longer")
    return (f"{who} an evaluation at step {th.bigram_min_steps} or later, with "
            f"{need:,} tokens seen by then ({th.bigram_min_pairs_seen:g} x V^2, V = {ev.vocab_size}: enough to "
            f"learn which {ev.unit} follows which); {run_length(ev)}")


def _context(ev: Evidence, who: str) -> Optional[str]:
    rec = ev.context
    if rec is None:
        final = (ev.summary or {}).get("final_step")
        why = ("metrics.jsonl holds no readable record" if not ev.records else
               f"{run_length(ev)}: the record of the run's end is among what is missing"
               if isinstance(final, int) and not isinstance(final, bool) and final > ev.last_step else
               "the last line of metrics.jsonl, where a finished run keeps it, is cut mid-record (damaged)"
               if ev.torn else "runs trained before it existed, and runs stopped before their end, have none")
        return (f"no loss-by-position record: the trainer writes one at the end of training ({why}; "
                "`depthlab context RUN` measures it from the checkpoint)")
    curve = rec.get("loss_by_position") or []
    if len(curve) < 2:
        return f"no later position to compare with position 0 (model.block_size {len(curve)})"
    if finite_or_none(rec.get("context_gain")) is None:  # a NaN run's curve: it was said to lack later positions
        return (f"the final weights' loss by position is not finite ({counted(len(curve), 'position')}, context gain "
                f"{rec.get('context_gain')}): nothing to compare")
    return None


def _baselines(ev: Evidence, who: str) -> Optional[str]:
    if ev.baselines and "bigram" in ev.baselines:
        return None
    if ev.baselines is None:
        return ("no corpus baselines: baselines.json is missing and the run's corpus could not be read (or changed "
                "since training) to recompute it")
    return "no bigram baseline in baselines.json"


def _plateau_evals(ev: Evidence, who: str) -> Optional[str]:
    n, need = len(ev.val_losses), ev.thresholds.plateau_evals + 1
    return None if n >= need else f"{n} of the {need} evaluations {who}"


def _overfit_evals(ev: Evidence, who: str) -> Optional[str]:
    n, need = len(ev.loss_pairs), ev.thresholds.overfit_window
    return None if n >= need else f"{n} of the {need} evaluations with train and val loss {who}"


def _loss_left(ev: Evidence, who: str) -> Optional[str]:
    """A best val loss within ``bigram_margin`` of 0, the least a cross-entropy can be: the model predicts the val
    split almost perfectly (a corpus whose current character fixes the next: the bigram line is 0 too). Being at
    the bigram line, attending uniformly or not using the context is then no fault: nothing is left to learn."""
    best = min((v for _, v in ev.val_losses), default=None)
    margin = ev.thresholds.bigram_margin
    if best is None or not best == best:
        return None
    if best < margin:
        return (f"the best val loss {best:.4f} nats is within {margin:g} of 0, the least a loss can be: the model "
                "predicts the val split almost perfectly, with nothing left to learn")
    return _no_structure(ev, best, margin)


def _no_structure(ev: Evidence, best: float, margin: float) -> Optional[str]:
    """A corpus whose unigram and bigram lines are at the uniform level ln V (random text: 1,000,000 characters of
    ACGT drawn uniformly read 1.3863 on all three), with the best val loss there too: what one token can tell, the
    model has learned, and a loss at that level, uniform attention or unused context are no fault of the model's.
    None otherwise (or without baselines)."""
    line = {k: finite_or_none(((ev.baselines or {}).get(k) or {}).get("nats"))
            for k in ("uniform", "unigram", "bigram")}
    if None in line.values() or abs(line["unigram"] - line["uniform"]) > margin or \
            line["bigram"] < line["unigram"] - margin or best < line["unigram"] - margin:
        return None
    return (f"the corpus shows no structure one {ev.unit} can predict: its unigram ({line['unigram']:.4f}) and bigram "
            f"({line['bigram']:.4f}) lines are at the uniform level ln V = {line['uniform']:.4f} (random text?), and "
            f"the best val loss {best:.4f} is there too: what one {ev.unit} can tell, the model has learned, and "
            "whether the context holds more, these baselines cannot say")


LEARNABLE = Need("vocab", "a vocabulary of two tokens or more", _learnable)
LOSS_LEFT = Need("eval", "something left to learn (a best val loss not within the margin of 0, on a corpus with "
                         "structure one token can predict)", _loss_left)
GRAD = Need("grad", "gradient records", _grad)
GRAD_LATE = Need("grad", "a gradient record after the first step", _grad_late)
LR_RECORDS = Need("grad", "gradient records after the warmup", _lr_records)
PROBE = Need("probe", "an activation probe", _probe)
DISTINCT = Need("probe", "a probe of positions that carry distinct tokens", _distinct_positions)
LATE_PROBE = Need("probe", "a probe late enough to judge attention", _late_probe)
LATE_EVAL = Need("eval", "a late evaluation", _late_eval)
BASELINES = Need("baselines", "corpus baselines", _baselines)
CONTEXT = Need("event", "a loss-by-position record", _context)
PLATEAU_EVALS = Need("eval", "evaluations with a finite val loss", _plateau_evals)
OVERFIT_EVALS = Need("eval", "evaluations with train and val loss", _overfit_evals)

NEEDS = (LEARNABLE, GRAD, GRAD_LATE, LR_RECORDS, PROBE, DISTINCT, LATE_PROBE, CONTEXT, LATE_EVAL, BASELINES,
         PLATEAU_EVALS, OVERFIT_EVALS, LOSS_LEFT)
"""Every need, in the order :func:`depthlab.analytics.diagnose.rules_without_data` says them."""
