"""``train.fit_to_time``: plan a run's number of steps so it ends inside ``train.max_time``.

A run asked for more steps than its time limit allows would be cut mid-decay by the limit, with
its learning rate still high. A :class:`TimeBudget` times the first steps of the session instead and
makes a :class:`Plan`: a lower end step (and decay end, and a warmup that ends within the first fifth of the
steps left when it plans) so the cosine ends inside 98 % of ``max_time``; it plans again from better-measured steps at
step 200 and then halfway through what is left, again and again while at least 100 steps lie on
each side (steps can speed up or slow down well after the start; the schedule continues the decay
from the current learning rate then, with no jump). The plan is a value: the config the user asked
for is never changed. The learning-rate schedule (:class:`depthlab.training.optimization.LRSchedule`)
reads it, and config.json keeps it under ``resolved.plan`` so a resumed run continues it. The
trainer owns the clock, the processes and the log; this module only counts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from .config import FIT_STEPS, TrainConfig, fit_can_shorten

__all__ = ["FIT_STEPS", "LATE_STEPS", "REFIT_STEPS", "Plan", "TimeBudget", "nothing_to_train"]

#: Training steps timed before the first plan (the first two are not timed; FIT_STEPS lives in config, whose
#: schedule warning needs it), and the step of the second, better-measured plan (both counted from the session's
#: first step).
REFIT_STEPS = 200

#: The fewest steps a late plan times (and leaves to the end): ~10 s of the default recipe on 2 cores.
LATE_STEPS = 100

#: Fraction of max_time a plan fills: a small overshoot then meets the time limit only at the very end.
FILL = 0.98

#: Fewer steps than this between a plan and its end cannot carry a cosine to min_lr: the last trained step
#: (``n - 1`` of a decay ending at ``n``) is still above min_lr by 1/2 (1 + cos(pi (k-1)/k)) of the range,
#: 3 % at k = 9, 50 % at k = 2, all of it at k = 1.
DECAY_STEPS = 10


def _decay_words(step: int, n: int, at_floor: bool = False) -> str:
    """What the learning rate does up to a plan's end ``n`` made at ``step``, true of a plan too short to decay
    and of a rate already at its floor (``at_floor``)."""
    if at_floor:
        return "the learning rate stays at train.min_lr"
    if n - step >= DECAY_STEPS:
        return "the learning rate decays to train.min_lr there"
    return (f"which leaves {n - step} step{'s' if n - step != 1 else ''} after step {step}: too few for the learning "
            "rate to decay to train.min_lr (a larger train.max_time gives the decay room)")


@dataclass(frozen=True)
class Plan:
    """What ``train.fit_to_time`` planned: the schedule the run follows instead of the one asked for.

    Attributes:
        max_iters: the step the run ends at (< ``max_iters_asked`` when the time limit ends it).
        lr_decay_iters: the step the cosine reaches ``min_lr`` (0 = ``max_iters``, as in the config).
        warmup_iters: the warmup the plan uses (shortened to end a fifth of the way from the planning step to the
            plan's end, when it would end later).
        max_iters_asked, lr_decay_iters_asked, warmup_iters_asked: the config values it replaces.
        s_per_step: measured seconds per training step; s_per_eval: seconds per evaluation.
        at_step: the step the (latest) plan was made at.
        max_time: the ``train.max_time`` (s) of the session that made it (0: a plan recorded before
            plans kept it); a resume continues the plan in steps whatever its own limit.
        warmup_from: ``[step, lr]`` when a plan shortened the warmup after it began: the warmup then goes on
            linearly from that rate to the peak at ``warmup_iters`` (no jump to the shorter ramp), else None.
    """

    max_iters: int
    lr_decay_iters: int
    warmup_iters: int
    max_iters_asked: int
    lr_decay_iters_asked: int
    warmup_iters_asked: int
    s_per_step: float
    s_per_eval: float
    at_step: int
    max_time: float = 0.0
    warmup_from: Optional[list] = None

    def made_for(self, train: TrainConfig) -> bool:
        """Whether a resume asking ``train`` continues this plan: it asks for the end the plan
        replaced, or for the planned end itself (as a run written before plans were values does: its
        config.json held the planned values). A new ``warmup_iters`` keeps the plan, and the plan's
        warmup (the schedule's line says the new one changes nothing); a new end drops it, and so does
        ``train.fit_to_time false`` (it was ignored: the run still stopped at the plan's end)."""
        asked = (train.max_iters, train.lr_decay_iters)
        ends = ((self.max_iters_asked, self.lr_decay_iters_asked), (self.max_iters, self.lr_decay_iters))
        return bool(train.fit_to_time) and asked in ends

    @property
    def ends_early(self) -> bool:
        """True when the plan ends before the steps asked for (the time limit ended the run)."""
        return self.max_iters < self.max_iters_asked

    def to_record(self) -> dict:
        """The plan as config.json's ``resolved.plan``."""
        return dataclasses.asdict(self)

    @classmethod
    def from_record(cls, rec: Optional[dict], train: Optional[dict] = None) -> Optional["Plan"]:
        """A plan read back from config.json's ``resolved``; None when it holds none.

        Args:
            rec: the ``resolved`` section. Its ``plan`` is this class's record; a run written before
                plans were values has ``fit_to_time`` instead (``max_iters_asked``, ``max_iters``,
                ``s_per_step``, ``s_per_eval``, ``at_step``, and the ``*_asked`` values it lowered),
                with the planned values in the ``train`` section.
            train: that config.json's ``train`` section (for the old record).
        """
        rec = rec if isinstance(rec, dict) else {}
        if "plan" in rec:  # None for a record edited into something else (the caller says so): no plan
            p = rec["plan"]
            steps = ("max_iters", "lr_decay_iters", "warmup_iters", "max_iters_asked", "lr_decay_iters_asked",
                     "warmup_iters_asked", "at_step")
            if not (isinstance(p, dict) and all(isinstance(p.get(k), int) and not isinstance(p.get(k), bool)
                                                and p[k] >= 0 for k in steps) and p["max_iters"] > 0):
                return None
            try:
                return cls(**{f.name: p[f.name] for f in dataclasses.fields(cls)
                              if f.name in p or f.default is dataclasses.MISSING})
            except (KeyError, TypeError):
                return None
        old = rec.get("fit_to_time")
        if not isinstance(old, dict):
            return None
        train = train or {}
        decay, warmup = int(train.get("lr_decay_iters", 0)), int(train.get("warmup_iters", 0))
        return cls(max_iters=int(old["max_iters"]), lr_decay_iters=decay, warmup_iters=warmup,
                   max_iters_asked=int(old["max_iters_asked"]),
                   lr_decay_iters_asked=int(old.get("lr_decay_iters_asked", decay)),
                   warmup_iters_asked=int(old.get("warmup_iters_asked", warmup)),
                   s_per_step=float(old.get("s_per_step", 0.0)), s_per_eval=float(old.get("s_per_eval", 0.0)),
                   at_step=int(old.get("at_step", 0)))


_EVAL_GUESS = "estimated: 2 x eval_iters forwards at 1/3 step"


def nothing_to_train(step: int, max_iters: int, plan: Optional[Plan]) -> str:
    """The line of a resume that has no step left: the end that stopped it (the plan's, when
    ``fit_to_time`` ended the run before ``max_iters``) and the knob that goes past it."""
    if plan is not None and plan.ends_early:
        return (f"nothing to train: the run is at step {step}, the end train.fit_to_time planned for "
                f"train.max_time {plan.max_time:g} s ({_end_words(plan)}); a resume continues that "
                f"plan, so a larger --train.max_time does not extend it. To train on, pass a --train.max_iters "
                f"larger than {step} (a total) and other than {plan.max_iters_asked}, the one that plan was made "
                f"from (it then plans this session anew). Nothing was changed.")
    return (f"nothing to train: the run is at step {step} and train.max_iters is {max_iters} (a total); pass a "
            f"larger --train.max_iters to extend it. Nothing was changed.")


def _end_words(plan: Plan) -> str:
    """What the rate had done by a plan's end: decayed, or (fewer than DECAY_STEPS steps after its warmup or its
    last re-plan) not, so that an extension goes on from the rate the run last trained at."""
    if plan.max_iters - max(plan.warmup_iters, plan.at_step) >= DECAY_STEPS:
        return "its learning rate decayed by then"
    return ("it ended too few steps after its warmup or last re-plan for the learning rate to decay; an extension "
            "goes on from the rate it last trained at")


class TimeBudget:
    """The timings of one run under ``train.fit_to_time`` and the :class:`Plan` they lead to.

    Args:
        train: the run's TrainConfig (read only).
        plan: the plan an earlier session of this run made (config.json ``resolved``), or None.

    Attributes:
        plan: the latest plan, or None while the run follows the schedule asked for.
        start: the step this session times from, or None when there is nothing to plan.
        eval_first: seconds of this session's first evaluation without its first batch's one-time costs
            (:meth:`note_eval`), or None before it.
        eval_total: seconds of evaluation in this session (taken out of the step timings).
        final_batches: forward batches of ``train.final_validation`` after the last step (0 = none);
            the plan leaves time for them.
    """

    def __init__(self, train: TrainConfig, plan: Optional[Plan] = None):
        self.train = train
        self.plan = plan
        self.start: Optional[int] = None
        self.eval_first: Optional[float] = None
        self.eval_total = 0.0
        self.final_batches = 0
        self.overrun = 0.0  # seconds past max_time of the shortest plan (steps_that_fit), 0 when it fits
        self.last_evals_s = 0.0
        self._mark: Optional[tuple[int, float, float]] = None  # (step, time, eval_total) at the last mark
        self.timed_from = 0  # the step of the reading before the latest one: the steps a plan timed begin there

    @property
    def max_iters(self) -> int:
        """The step the run ends at: the plan's, else the one asked for."""
        return self.plan.max_iters if self.plan is not None else self.train.max_iters

    def begin(self, step: int) -> None:
        """Start timing at ``step`` when a plan is to be made: fit_to_time on with a max_time, not
        planned before, and more than FIT_STEPS steps to go. A session resumed without a plan plans from
        where it starts (``max_time`` limits each session: the steps left must fit it, or the limit would
        cut the decay); one resumed with a plan continues it in steps."""
        t = self.train
        if not (t.fit_to_time and t.max_time > 0) or self.plan is not None:
            self.start = None
        else:
            self.start = step if step + FIT_STEPS < t.max_iters else None

    @property
    def may_shorten(self) -> bool:
        """Whether a plan may still end this session before its end step (after :meth:`begin`)."""
        return self.start is not None and fit_can_shorten(self.start, self.max_iters)

    @property
    def marks(self) -> tuple[int, ...]:
        """Steps at which the clock is read: start+2 (after one-off allocations), then each plan's: start+FIT_STEPS,
        start+REFIT_STEPS (or, when a plan ends before it, halfway from start+FIT_STEPS to that end: a first plan
        that measured a busy stretch and planned 196 steps is measured again while it can still grow).

        After start+REFIT_STEPS the clock is read again halfway through what is left, from the last
        reading, for as long as both halves have at least LATE_STEPS steps: a slow stretch that a plan
        measured (another process busy for a minute) is made up for once it passes, and a machine that
        slowed down late ends the run inside its time. Each late plan times only the steps since the
        previous reading.
        """
        s = self.start
        if s is None:
            return ()
        refit, first = s + REFIT_STEPS, s + FIT_STEPS
        # a first plan that ends before the second reading: that reading comes halfway to it, once (a later plan
        # moving the end does not move a reading already made)
        if self.max_iters <= refit and (self._mark is None or self._mark[0] <= first):
            short = self.max_iters - first
            refit = first + short // 2 if short >= 2 * FIT_STEPS else refit
        last = self._mark[0] if self._mark is not None and self._mark[0] >= refit else refit
        left = self.max_iters - last
        late = (last + left // 2,) if left >= 2 * LATE_STEPS else ()
        return (s + 2, s + FIT_STEPS, refit) + late

    def note_eval(self, seconds: float, first_batch_s: Optional[float] = None, batches: int = 0) -> None:
        """Account one evaluation of ``seconds`` (wall), ``batches`` forward batches of which the first took
        ``first_batch_s``.

        The first evaluation's cost, what the plan charges every evaluation and the final validation, leaves out
        its first batch's one-time costs: extrapolated from the others, ``(seconds - first) * batches / (batches -
        1)`` (the first evaluation of 8 batches took 0.775 s, 0.5 s of it the first forward; charged as it was to the
        final validation's 109 batches, 10.6 s of a 20-s budget were kept for 3.7 s of work).
        """
        if self.eval_first is None:
            warm = (seconds - first_batch_s) * batches / (batches - 1) \
                if first_batch_s is not None and batches > 1 and 0 <= first_batch_s <= seconds else seconds
            self.eval_first = warm
        self.eval_total += seconds

    def tick(self, step: int, now: float) -> Optional[float]:
        """Read the clock at a mark: seconds per training step since the previous mark, or None.

        Evaluation time since that mark is taken out. Steps get faster over the first hundred or so
        (measured 0.13 s/step over steps 2-20, 0.105 later at the default recipe on a 2-core CPU),
        so the second plan uses the budget the first would waste. Timing stops when no late mark
        fits in what is left (:attr:`marks`).

        Example (default recipe, 2-core CPU): steps 20-200 measured 0.110 s/step and planned 2327
        steps, which then took 244.5 s of a 270 s budget: later steps ran at ~0.100 s/step.
        """
        marks = self.marks
        if step not in marks:
            return None
        s_step = None
        if self._mark is not None:
            last_step, last_t, last_eval = self._mark
            s_step = max((now - last_t - (self.eval_total - last_eval)) / (step - last_step), 1e-6)
            self.timed_from = last_step
        self._mark = (step, now, self.eval_total)
        return s_step

    def _s_eval(self, s_step: float) -> float:
        """Seconds per evaluation: the measured first one, else 2 x eval_iters forwards at ~1/3 of a step."""
        return self.eval_first if self.eval_first is not None else 2 * self.train.eval_iters * s_step / 3

    def steps_that_fit(self, step: int, s_step: float, elapsed: float) -> int:
        """The step at which the run must end to finish inside FILL * max_time, its last evaluation included.

        Args:
            step: the current step. s_step: measured seconds per training step.
            elapsed: seconds since the session started.

        Evaluations cost :meth:`_s_eval` each (2 x eval_iters forward batches); the final
        validation's ``final_batches`` batches cost in proportion.
        """
        t = self.train
        s_eval = self._s_eval(s_step)
        s_final = s_eval * self.final_batches / (2 * max(t.eval_iters, 1))
        left = FILL * t.max_time - elapsed - s_eval - s_final
        fit = int(left / (s_step + s_eval / t.eval_interval))
        # the plan keeps one step even when none fits: by this much the session then runs past max_time
        self.overrun = max(0.0, elapsed + s_step + s_eval + s_final - t.max_time) if fit < 1 else 0.0
        self.last_evals_s = s_eval + s_final
        return step + max(1, fit)

    def propose(self, step: int, n: int, s_step: float, at_floor: bool = False) -> Optional[str]:
        """Make ending at step ``n`` (capped at the steps asked for) the plan, unless within 1 % of the current end.

        Sets :attr:`plan` to a new :class:`Plan` (the config is not touched); returns a line for the
        log, or None when the plan stands. ``at_floor``: the rate is already train.min_lr (a resumed run whose
        decay had ended), so the line says it stays there.
        """
        t, old = self.train, self.plan
        n = min(n, t.max_iters)
        if abs(n - self.max_iters) <= max(2, self.max_iters // 100):
            return None  # no change of schedule for noise
        decay = min(t.lr_decay_iters, n)  # 0 stays 0: the decay ends with the plan
        if old is not None:  # a later plan
            short = f", {_decay_words(step, n, at_floor)}" if n - step < DECAY_STEPS else ""
            msg = (f"train.fit_to_time: re-measured {s_step:.3g} s/step over steps {self.timed_from}-{step}; "
                   f"max_iters is now {n} (was {old.max_iters}){short}{self._overrun_words()}")
            self.plan = dataclasses.replace(old, max_iters=n, lr_decay_iters=decay, s_per_step=round(s_step, 4),
                                            at_step=step)
            return msg
        s_eval = self._s_eval(s_step)
        # no longer than a fifth of what is left to plan (a warmup already done stays as it was)
        limit = step + (n - step) // 5
        warmup = t.warmup_iters if t.warmup_iters <= limit else limit
        self.plan = Plan(max_iters=n, lr_decay_iters=decay, warmup_iters=warmup, max_iters_asked=t.max_iters,
                         lr_decay_iters_asked=t.lr_decay_iters, warmup_iters_asked=t.warmup_iters,
                         s_per_step=round(s_step, 4), s_per_eval=round(s_eval, 3), at_step=step,
                         max_time=t.max_time)
        shorter = f" and warmup_iters {warmup} (was {t.warmup_iters})" if warmup != t.warmup_iters else ""
        if warmup <= step < t.warmup_iters:  # cut where the ramp is now: the rate never reaches the peak
            shorter = (f" and the warmup ends at step {step} (train.warmup_iters was {t.warmup_iters}), short of the "
                       "peak train.learning_rate")
        steps = f"{t.max_iters} steps" if self.start in (None, 0) else f"the steps from {self.start} to {t.max_iters}"
        return (f"train.fit_to_time: {steps} would not fit this session's train.max_time {t.max_time:g} s "
                f"({s_step:.3g} s/step measured, {s_eval:.2f} s/evaluation "
                f"{'measured, without its first batch' if self.eval_first is not None else _EVAL_GUESS}); "
                f"max_iters is now {n}"
                f"{shorter}, {_decay_words(step, n, at_floor)} "
                f"(--train.fit_to_time false: keep {t.max_iters} and stop at the time limit){self._overrun_words()}")

    def _overrun_words(self) -> str:
        """The end of a first plan's line when even its one step runs past max_time (:meth:`steps_that_fit`)."""
        if self.overrun < 0.05:
            return ""
        t = self.train
        final = " and final validation" if self.final_batches else ""
        knobs = "train.eval_iters" + (" or --train.final_validation false" if self.final_batches else "")
        return (f"; even so this session ends ~{self.overrun:.1f} s past train.max_time {t.max_time:g} s: its last "
                f"evaluation{final} take{'' if final else 's'} ~{self.last_evals_s:.1f} s (a larger train.max_time, "
                f"a smaller {knobs} brings it inside)")

    def planned_end(self) -> bool:
        """True when the run ends at the plan's step, before the steps asked for (the time limit ended it)."""
        return self.plan is not None and self.plan.ends_early
