"""``train.fit_to_time``: plan a run's number of steps so it ends inside ``train.max_time``.

A run asked for more steps than its time limit allows would be cut mid-decay by the limit, with
its learning rate still high. A :class:`TimeBudget` times the first steps of the session instead,
lowers ``max_iters`` (and ``lr_decay_iters``, and a warmup longer than a fifth of the plan) so the
cosine ends inside 98 % of ``max_time``, and plans again from better-measured steps: at step 200
and, in a run long enough, halfway through what is left (steps can speed up or slow down well after
the start; the trainer continues the decay from the current learning rate then, with no jump). What it
planned is a record the trainer keeps in config.json (``resolved.fit_to_time``), so a resumed run
keeps its schedule. The trainer owns the clock, the processes and the log; this module only counts.
"""

from __future__ import annotations

from typing import Optional

from .config import TrainConfig

__all__ = ["FIT_STEPS", "REFIT_STEPS", "TimeBudget"]

#: Training steps timed before the first plan (the first two are not timed), and the step of the
#: second, better-measured plan (both counted from the session's first step).
FIT_STEPS = 20
REFIT_STEPS = 200

#: Fraction of max_time a plan fills: a small overshoot then meets the time limit only at the very end.
FILL = 0.98


class TimeBudget:
    """The plan of one run under ``train.fit_to_time`` and the timings it is made from.

    Args:
        train: the run's TrainConfig; :meth:`apply` lowers its ``max_iters``, ``lr_decay_iters`` and
            ``warmup_iters`` in place.
        record: the plan an earlier session of this run made (config.json), or None.

    Attributes:
        record: what was planned (``max_iters_asked``, ``max_iters``, ``s_per_step`` in seconds,
            ``s_per_eval`` in seconds, ``at_step``, and the ``*_asked`` values it lowered), or None.
        start: the step this session times from, or None when there is nothing to plan.
        eval_first: seconds of this session's first evaluation, or None before it.
        eval_total: seconds of evaluation in this session (taken out of the step timings).
        final_batches: forward batches of ``train.final_validation`` after the last step (0 = none);
            the plan leaves time for them.
    """

    def __init__(self, train: TrainConfig, record: Optional[dict] = None):
        self.train = train
        self.record = record
        self.start: Optional[int] = None
        self.eval_first: Optional[float] = None
        self.eval_total = 0.0
        self.final_batches = 0
        self._mark: Optional[tuple[int, float, float]] = None  # (step, time, eval_total) at the last mark

    def begin(self, step: int) -> None:
        """Start timing at ``step`` when a plan is to be made: fit_to_time on with a max_time, not
        planned before, within the first FIT_STEPS steps (a session resumed from an early checkpoint
        plans too), and more than FIT_STEPS steps to go."""
        t = self.train
        if not (t.fit_to_time and t.max_time > 0) or self.record is not None or step >= FIT_STEPS:
            self.start = None
        else:
            self.start = step if step + FIT_STEPS < t.max_iters else None

    @property
    def marks(self) -> tuple[int, ...]:
        """Steps at which the clock is read: start+2 (after one-off allocations), then each plan's.

        The last plan is halfway between start+REFIT_STEPS and max_iters, when at least
        4 x REFIT_STEPS steps are left there (a shorter run is timed well enough by then).
        """
        s = self.start
        if s is None:
            return ()
        refit = s + REFIT_STEPS
        left = self.train.max_iters - refit
        late = (refit + left // 2,) if left >= 4 * REFIT_STEPS else ()
        return (s + 2, s + FIT_STEPS, refit) + late

    def note_eval(self, seconds: float) -> None:
        """Account one evaluation of ``seconds`` (wall)."""
        self.eval_first = seconds if self.eval_first is None else self.eval_first
        self.eval_total += seconds

    def tick(self, step: int, now: float) -> Optional[float]:
        """Read the clock at a mark: seconds per training step since the previous mark, or None.

        Evaluation time since that mark is taken out. Steps get faster over the first hundred or so
        (measured 0.13 s/step over steps 2-20, 0.105 later at the default recipe on a 2-core CPU),
        so the second plan uses the budget the first would waste. After the last mark (or when it
        is past max_iters) timing stops: ``start`` becomes None.

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
        self._mark = (step, now, self.eval_total)
        if step == marks[-1] or marks[-1] >= self.train.max_iters - 1:
            self.start = None
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
        return step + max(1, int(left / (s_step + s_eval / t.eval_interval)))

    def apply(self, step: int, n: int, s_step: float) -> Optional[str]:
        """Make ``n`` (capped at the steps asked for) the run's max_iters, unless within 1 % of it.

        Updates ``train`` and :attr:`record`; returns a line for the log, or None when the plan stands.
        """
        t = self.train
        rec = self.record
        asked = rec["max_iters_asked"] if rec else t.max_iters
        n = min(n, asked)
        if abs(n - t.max_iters) <= max(2, t.max_iters // 100):
            return None  # no change of schedule for noise
        if rec:  # a later plan
            msg = (f"train.fit_to_time: re-measured {s_step:.3f} s/step over the steps since step "
                   f"{rec['at_step']}; max_iters is now {n} (was {t.max_iters})")
            rec.update(max_iters=n, s_per_step=round(s_step, 4), at_step=step)
        else:
            s_eval = self._s_eval(s_step)
            self.record = rec = {"max_iters_asked": asked, "max_iters": n, "s_per_step": round(s_step, 4),
                                 "s_per_eval": round(s_eval, 3), "at_step": step}
            msg = (f"train.fit_to_time: {asked} steps would not fit train.max_time {t.max_time:g} s "
                   f"({s_step:.3f} s/step, {s_eval:.2f} s/evaluation measured); max_iters is now {n}"
                   f"{self._shorten_warmup(step, n)}, the learning rate decays to train.min_lr there "
                   f"(--train.fit_to_time false: keep {asked} and stop at the time limit)")
        if t.lr_decay_iters > n or "lr_decay_iters_asked" in rec:
            rec.setdefault("lr_decay_iters_asked", t.lr_decay_iters)
            t.lr_decay_iters = min(rec["lr_decay_iters_asked"], n)
        t.max_iters = n
        return msg

    def _shorten_warmup(self, step: int, n: int) -> str:
        """Shorten a warmup longer than a fifth of an ``n``-step plan (it would leave no room to decay)."""
        t = self.train
        if t.warmup_iters <= n // 5:
            return ""
        self.record["warmup_iters_asked"] = t.warmup_iters
        t.warmup_iters = max(step, n // 5)
        return f" and warmup_iters {t.warmup_iters} (was {self.record['warmup_iters_asked']})"

    def planned_end(self) -> bool:
        """True when max_iters is the plan's, lower than the steps asked for (the time limit ended the run)."""
        r = self.record
        return r is not None and r["max_iters"] < r["max_iters_asked"]
