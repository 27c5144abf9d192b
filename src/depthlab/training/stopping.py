"""Why the training loop stops now: the plan's end, the time limit, a signal, the target loss, patience.

Every flag that ends the loop is agreed across the processes (:meth:`Runtime.agree`), so every rank
leaves at the same step. Across sessions of one run (``--resume`` after a stop, a crash, SIGINT/SIGTERM):

- ``train.max_time`` limits each session: a resume gets the whole limit again (summary.json's
  ``wall_time_s`` counts every session). A plan of ``train.fit_to_time`` is in steps and carries over.
- ``train.target_val_loss`` and ``train.patience`` apply to the whole run, with the values this session
  is given: a target the run's evaluations already reached, or patience already lost, stops a resumed
  run before it trains (the message names the flag that trains on); the patience count and the best
  val loss carry over in the checkpoint.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Iterator, Optional

from ..units import counted

__all__ = ["StopRules"]


class StopRules:
    """The stop decisions of one run.

    Args:
        train: the run's train section (read only). runtime: its Runtime. log: console lines.

    Attributes:
        signum: SIGINT / SIGTERM caught since the loop started (or asked for by
            :meth:`request`), else None.
        stopped_by: the reason the loop ended (``max_iters`` until another is decided).
    """

    def __init__(self, train, runtime, log):
        self.train, self.runtime, self.log = train, runtime, log
        self.signum: Optional[int] = None
        self.stopped_by = "max_iters"
        self.planned_end = False  # stopped_by max_time at the end train.fit_to_time planned (its decay finished)

    def caught(self) -> bool:
        """Whether a SIGINT / SIGTERM was caught (or asked for) since the loop started."""
        return self.signum is not None

    def request(self, signum: int = signal.SIGTERM) -> None:
        """Stop at the next step boundary as ``signum`` would: checkpoint, then :class:`Interrupted`."""
        self.signum = signum

    @contextlib.contextmanager
    def signals_caught(self) -> Iterator[None]:
        """SIGINT/SIGTERM set a flag (checked between steps) instead of killing the process mid-write."""
        import threading

        old = {}
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                old[s] = signal.signal(s, lambda signum, frame: self.request(signum))
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def flags(self, elapsed_s: float) -> dict[str, bool]:
        """``time_up`` (``elapsed_s`` of this session reached train.max_time) and ``signal``, agreed by every process.

        ``elapsed_s`` is this session's time only: each session of a run gets the whole ``max_time``.

        Every process takes the same decision, or one leaves while another waits in an all-reduce.
        """
        t = self.train
        return self.runtime.agree(time_up=t.max_time > 0 and elapsed_s >= t.max_time,
                                  signal=self.signum is not None)

    def reason(self, step: int, time_up: bool, schedule, budget, evaluator) -> Optional[str]:
        """``max_iters`` | ``max_time`` | ``target_val_loss`` | ``patience`` when training must stop now, else None.

        The reason is logged and kept in :attr:`stopped_by`.
        """
        why = self._reason(step, time_up, schedule, budget, evaluator)
        if why is not None:
            self.stopped_by = why
        return why

    def _reason(self, step: int, time_up: bool, schedule, budget, ev) -> Optional[str]:
        t = self.train
        if step >= schedule.max_iters:
            if not budget.planned_end():
                return "max_iters"
            planned = budget.plan.max_time or t.max_time  # 0: a plan recorded before plans kept it
            other = (f" in an earlier session; this session's limit is {t.max_time:g} s and a resume continues "
                     "the stored plan" if planned != t.max_time else "")
            self.log(f"stopped at step {step}: the end train.fit_to_time planned for train.max_time "
                     f"{planned:g} s{other} ({budget.plan.max_iters_asked} steps were asked for)")
            self.planned_end = True
            return "max_time"  # the time budget ended the run, with its decay finished
        if time_up:
            plan = (" (the budget ended before train.fit_to_time had timed the steps it plans from)"
                    if t.fit_to_time and budget.plan is None else "")
            if step < schedule.warmup_iters:
                where = f"was still warming up{plan}"
            elif schedule.at_floor(step):  # a decay that ended before (or a constant rate)
                where = f"was at its floor already, train.min_lr {t.min_lr:g}"
            else:
                where = "had not finished its decay"
            self.log(f"stopped by train.max_time ({t.max_time:g} s of this session; a resume gets as long "
                     f"again) at step {step} of {schedule.max_iters}: the learning rate {where}")
            return "max_time"
        early = self._early_end(step, ev)
        if early is None:
            return None
        self.log(early[1])
        return early[0]

    def ended_before_resume(self, step: int, ev) -> Optional[str]:
        """The line of a resume whose run a stop rule ended already (a target reached, patience lost, as this
        session states them), or None: such a resume trains nothing and changes nothing on disk."""
        early = self._early_end(step, ev) if not ev.session_evals else None
        return f"nothing to train: {early[1]}. Nothing was changed." if early is not None else None  # a notice

    def _early_end(self, step: int, ev) -> Optional[tuple[str, str]]:
        """(``target_val_loss`` | ``patience``, its line) when that rule stops the run at ``step``, else None."""
        t = self.train
        before = "" if ev.session_evals else ", before this resume; nothing more was trained"
        if ev.target_reached is not None:
            train_on = "; --train.target_val_loss 0 (off) or a lower value trains on" if before else ""
            return "target_val_loss", (f"stopped at step {step}: val loss reached train.target_val_loss "
                                       f"{t.target_val_loss:g} at step {ev.target_reached[0]}{before}{train_on}")
        if ev.patience_exhausted:
            more = f"; a --train.patience above {ev.evals_without_improvement} (or 0, off) trains on"
            train_on = more if before else ""
            ref = ev.patience_ref
            since = f" since step {ref[1]} (val loss {ref[0]:.4f})" if ref else ""
            n = ev.evals_without_improvement
            row, each = (" in a row", "each") if n > 1 else ("", "it")
            return "patience", (f"stopped early at step {step}: {counted(n, 'evaluation')}{row}{since} without "
                                f"lowering the best val loss before {each} by train.min_delta {t.min_delta:g} "
                                f"(train.patience {t.patience}){before}; best.safetensors holds the best weights "
                                f"(val loss {ev.best_val:.4f}, step {ev.best_step}){train_on}")
        return None
