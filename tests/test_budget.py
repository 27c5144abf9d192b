"""TimeBudget (train.fit_to_time's arithmetic) on known numbers, without a trainer."""

import pytest

import dataclasses

from depthlab.budget import FILL, FIT_STEPS, REFIT_STEPS, Plan, TimeBudget
from depthlab.config import TrainConfig


def _budget(**kw):
    t = TrainConfig(**{**dict(max_iters=5000, max_time=270.0, fit_to_time=True, eval_interval=500,
                              eval_iters=20, warmup_iters=50, lr_decay_iters=0), **kw})
    b = TimeBudget(t)
    b.begin(0)
    return t, b


def test_marks_and_timing_take_evaluation_out():
    t, b = _budget()
    late = REFIT_STEPS + (5000 - REFIT_STEPS) // 2
    assert b.marks == (2, FIT_STEPS, REFIT_STEPS, late)
    assert b.tick(1, 10.0) is None  # not a mark
    assert b.tick(2, 10.0) is None  # the first mark only starts the clock
    b.note_eval(1.5)
    b.note_eval(0.5)
    assert b.eval_first == 1.5 and b.eval_total == 2.0
    # 18 steps in 11.0 s of which 2.0 s were evaluations: 0.5 s/step
    assert b.tick(FIT_STEPS, 21.0) == pytest.approx(0.5)
    assert b.start == 0
    assert b.tick(REFIT_STEPS, 21.0 + 180 * 0.25) == pytest.approx(0.25)
    b.plan = Plan(max_iters=2200, lr_decay_iters=0, warmup_iters=50, max_iters_asked=5000, lr_decay_iters_asked=0,
                  warmup_iters_asked=50, s_per_step=0.25, s_per_eval=1.5, at_step=REFIT_STEPS)
    # what the plan at REFIT_STEPS decided: the last mark moves with it
    late = REFIT_STEPS + (2200 - REFIT_STEPS) // 2
    assert b.marks[-1] == late
    assert b.tick(late, 66.0 + (late - REFIT_STEPS) * 0.2) == pytest.approx(0.2)
    assert b.start is None and b.marks == ()  # timing is over after the last plan
    t2, b2 = _budget(max_iters=REFIT_STEPS + 4 * REFIT_STEPS - 1)
    assert b2.marks == (2, FIT_STEPS, REFIT_STEPS)  # too short for a late plan


def test_steps_that_fit_counts_the_last_evaluation_and_one_per_interval():
    t, b = _budget()
    b.note_eval(2.0)
    # left = 0.98 * 270 - 10 - 2 = 252.6 s; each step costs 0.1 + 2/500 = 0.104 s -> 2428 steps after step 20
    assert b.steps_that_fit(20, 0.1, 10.0) == 20 + int((FILL * 270 - 10 - 2) / 0.104) == 2448


def test_steps_that_fit_leaves_time_for_the_final_validation():
    t, b = _budget()
    b.note_eval(2.0)  # 2 x eval_iters forward batches
    b.final_batches = 5 * t.eval_iters  # 2.5 evaluations' worth: 5 s
    assert b.steps_that_fit(20, 0.1, 10.0) == 20 + int((FILL * 270 - 10 - 2 - 5) / 0.104) == 2400


def test_propose_plans_a_lower_end_decay_and_warmup_and_leaves_the_config_alone():
    t, b = _budget(warmup_iters=1000, lr_decay_iters=4000)
    asked = dataclasses.asdict(t)
    b.note_eval(2.0)
    msg = b.propose(20, 2448, 0.1)
    assert "max_iters is now 2448" in msg and "warmup_iters 489 (was 1000)" in msg
    assert b.plan == Plan(max_iters=2448, lr_decay_iters=2448, warmup_iters=489, max_iters_asked=5000,
                          lr_decay_iters_asked=4000, warmup_iters_asked=1000, s_per_step=0.1, s_per_eval=2.0,
                          at_step=20)
    assert b.max_iters == 2448 and dataclasses.asdict(t) == asked  # the plan is a value beside the config
    assert b.propose(200, 2460, 0.099) is None  # within 1 %: the plan stands
    assert "re-measured" in b.propose(200, 2700, 0.09) and b.plan.max_iters == 2700 == b.plan.lr_decay_iters
    assert b.plan.warmup_iters == 489 and b.plan.at_step == 200
    assert b.propose(200, 9000, 0.01) and b.plan.max_iters == 5000  # never more than asked
    assert b.plan.lr_decay_iters == 4000 and b.planned_end() is False  # 5000 of 5000: max_iters ended it


def test_plan_round_trips_through_its_record_and_reads_the_old_record():
    p = Plan(max_iters=1876, lr_decay_iters=0, warmup_iters=50, max_iters_asked=5000, lr_decay_iters_asked=0,
             warmup_iters_asked=50, s_per_step=0.135, s_per_eval=2.1, at_step=200)
    assert Plan.from_record({"device": "cpu", "plan": p.to_record()}) == p
    assert Plan.from_record({"device": "cpu"}) is None and Plan.from_record(None) is None
    # a run written before plans were values: the planned values stood in its train section
    old = {"fit_to_time": {"max_iters_asked": 5000, "max_iters": 1876, "s_per_step": 0.135, "s_per_eval": 2.1,
                           "at_step": 200, "warmup_iters_asked": 1000}}
    q = Plan.from_record(old, {"max_iters": 1876, "lr_decay_iters": 0, "warmup_iters": 375})
    assert (q.max_iters, q.warmup_iters, q.warmup_iters_asked, q.lr_decay_iters_asked) == (1876, 375, 1000, 0)
    assert q.made_for(TrainConfig(max_iters=1876, warmup_iters=375))  # its config.json asks the planned values
    assert q.made_for(TrainConfig(max_iters=5000, warmup_iters=1000))  # or the ones it replaced
    assert not q.made_for(TrainConfig(max_iters=8000, warmup_iters=1000))  # an extension drops the plan


def test_nothing_to_plan_without_fit_to_time_or_time_limit_or_when_planned_or_late():
    for kw in (dict(fit_to_time=False), dict(max_time=0.0), dict(max_iters=FIT_STEPS)):
        assert _budget(**kw)[1].start is None
    t = TrainConfig(max_iters=5000, max_time=270.0)
    b = TimeBudget(t, Plan(max_iters=2000, lr_decay_iters=0, warmup_iters=50, max_iters_asked=5000,
                           lr_decay_iters_asked=0, warmup_iters_asked=50, s_per_step=0.1, s_per_eval=1.0, at_step=20))
    b.begin(0)
    assert b.start is None and b.planned_end()
    b = TimeBudget(t)
    b.begin(FIT_STEPS)  # a session resumed after the first FIT_STEPS steps of an unplanned run
    assert b.start is None
    b.begin(5)  # resumed early: plans from there
    assert b.marks[:3] == (7, 5 + FIT_STEPS, 5 + REFIT_STEPS)
