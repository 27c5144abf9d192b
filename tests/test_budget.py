"""TimeBudget (train.fit_to_time's arithmetic) on known numbers without a trainer, then in a run:
a run that would not fit max_time is shortened once, early, to end with its decay done."""

import dataclasses
import json

import pytest

from depthlab.budget import FILL, FIT_STEPS, LATE_STEPS, Plan, REFIT_STEPS, TimeBudget
from depthlab.config import TrainConfig, schedule_warnings
from depthlab.trainer import Trainer

from conftest import fit_run, tiny_config


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
    assert b.marks[-1] == late == 1200
    assert b.tick(late, 66.0 + (late - REFIT_STEPS) * 0.2) == pytest.approx(0.2)
    # then halfway through what is left, timing only the steps since the last reading, while 100 steps lie each side
    ends, now = [], 66.0 + (late - REFIT_STEPS) * 0.2
    while b.marks[-1] > late:
        ends.append(b.marks[-1])
        now += (ends[-1] - late) * 0.1
        assert b.tick(ends[-1], now) == pytest.approx(0.1)
        late = ends[-1]
    assert ends == [1700, 1950, 2075] and 2200 - late < 2 * LATE_STEPS
    assert b.tick(2100, 300.0) is None  # not a mark: timing is over
    t2, b2 = _budget(max_iters=REFIT_STEPS + 2 * LATE_STEPS - 1)
    assert b2.marks == (2, FIT_STEPS, REFIT_STEPS)  # too short for a late plan
    t3, b3 = _budget(max_iters=REFIT_STEPS + 2 * LATE_STEPS)
    assert b3.marks == (2, FIT_STEPS, REFIT_STEPS, REFIT_STEPS + LATE_STEPS)


def test_a_slow_stretch_the_first_plans_measured_is_made_up_for_once_it_passes():
    """Measured: another process busy during steps 20-200 of the default recipe made the plan at step 200 read
    0.446 s/step and plan 592 steps, which ended at 221 s of a 270 s budget once the machine was idle again (the
    one late plan needed 800 steps left). The late plans now come while 2 x LATE_STEPS are left."""
    t, b = _budget()
    clock, step = 0.0, 0
    while step < b.max_iters:
        if step in b.marks:
            s_step = b.tick(step, clock)
            if s_step is not None:
                b.propose(step, b.steps_that_fit(step, s_step, clock), s_step)
        clock += 0.45 if FIT_STEPS <= step < REFIT_STEPS else 0.125  # the busy stretch, then idle again
        step += 1
    assert 0.95 * FILL * t.max_time < clock <= FILL * t.max_time * 1.01, (step, clock)
    assert b.plan.max_iters == step > 1500  # the plan at step 200 alone: ~600


def test_a_short_first_plan_is_measured_again_halfway_and_the_line_names_the_steps_timed():
    """helper-19: steps 2-20 ran slowly beside another program and planned 196 steps; the second reading, at step 200,
    never came, and the run ended at 5.8 s of its 20 s. The line of a later plan named the steps since the last plan
    ("since step 200") instead of the steps it timed."""
    t, b = _budget(max_iters=5000, max_time=20.0)
    assert b.tick(2, 0.0) is None
    s_step = b.tick(FIT_STEPS, 0.1 * (FIT_STEPS - 2))
    assert "max_iters is now 196" in b.propose(FIT_STEPS, 196, s_step)
    half = FIT_STEPS + (196 - FIT_STEPS) // 2
    assert b.marks[:3] == (2, FIT_STEPS, half)  # the reading at step 200 would come after the end
    s_fast = b.tick(half, 0.1 * (FIT_STEPS - 2) + 0.015 * (half - FIT_STEPS))
    assert s_fast == pytest.approx(0.015)
    msg = b.propose(half, 1200, s_fast)
    assert f"re-measured 0.015 s/step over steps {FIT_STEPS}-{half}; max_iters is now 1200 (was 196)" in msg
    assert b.marks[2] == REFIT_STEPS  # a plan past step 200 reads the clock there again
    # helper-20: each short re-plan moved the next reading (20-58, 58-69, 69-90, 90-92): one halfway reading only
    t, b = _budget(max_iters=5000, max_time=8.0)
    b.tick(2, 0.0)
    b.propose(FIT_STEPS, 97, b.tick(FIT_STEPS, 0.5))
    half = FIT_STEPS + (97 - FIT_STEPS) // 2
    assert b.marks[2] == half
    b.propose(half, 118, b.tick(half, 1.0))
    assert b.marks == (2, FIT_STEPS, REFIT_STEPS)  # past the plan's end: no more readings
    t, b = _budget(max_iters=5000)
    b.plan = Plan(max_iters=FIT_STEPS + 30, lr_decay_iters=0, warmup_iters=5, max_iters_asked=5000,
                  lr_decay_iters_asked=0, warmup_iters_asked=50, s_per_step=0.1, s_per_eval=1.0, at_step=FIT_STEPS)
    assert b.marks == (2, FIT_STEPS, REFIT_STEPS)  # too few steps left to time: no reading before the end


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
    # the warmup: no longer than a fifth of what is left to plan, 20 + (2448 - 20) // 5
    assert "max_iters is now 2448" in msg and "warmup_iters 505 (was 1000)" in msg
    assert b.plan == Plan(max_iters=2448, lr_decay_iters=2448, warmup_iters=505, max_iters_asked=5000,
                          lr_decay_iters_asked=4000, warmup_iters_asked=1000, s_per_step=0.1, s_per_eval=2.0,
                          at_step=20, max_time=t.max_time)
    assert b.max_iters == 2448 and dataclasses.asdict(t) == asked  # the plan is a value beside the config
    assert b.propose(200, 2460, 0.099) is None  # within 1 %: the plan stands
    assert "re-measured" in b.propose(200, 2700, 0.09) and b.plan.max_iters == 2700 == b.plan.lr_decay_iters
    assert b.plan.warmup_iters == 505 and b.plan.at_step == 200
    assert b.propose(200, 9000, 0.01) and b.plan.max_iters == 5000  # never more than asked
    assert b.plan.lr_decay_iters == 4000 and b.planned_end() is False  # 5000 of 5000: max_iters ended it


def test_a_plan_too_short_to_decay_says_so_instead_of_promising_min_lr():
    t, b = _budget()
    b.note_eval(2.0)
    msg = b.propose(20, 21, 0.5)  # a budget nearly spent by the steps timed: one step left
    assert "max_iters is now 21" in msg and "decays to train.min_lr there" not in msg
    assert "which leaves 1 step after step 20: too few for the learning rate to decay to train.min_lr" in msg
    # the warmup (50 asked) is cut where the ramp is: the line must not read as if the peak was reached
    assert "the warmup ends at step 20 (train.warmup_iters was 50), short of the peak" in msg
    assert "warmup_iters 20" not in msg and b.plan.warmup_iters == 20
    assert "decays to train.min_lr there" in _budget()[1].propose(20, 30, 0.5)  # 10 steps: 3 % above min_lr
    assert "which leaves 4 steps after step 200" in b.propose(200, 204, 0.5)  # a re-plan that shortens to 4 steps


def test_a_plan_of_a_rate_already_at_its_floor_says_it_stays_there():
    """A resumed run whose decay had ended: 'stays at train.min_lr', not 'decays to train.min_lr there'."""
    msg = _budget()[1].propose(200, 500, 0.01, at_floor=True)
    assert "max_iters is now 500, the learning rate stays at train.min_lr" in msg and "decays" not in msg
    assert "decays to train.min_lr there" in _budget()[1].propose(200, 500, 0.01)


def test_plan_round_trips_through_its_record_and_reads_the_old_record():
    p = Plan(max_iters=1876, lr_decay_iters=0, warmup_iters=50, max_iters_asked=5000, lr_decay_iters_asked=0,
             warmup_iters_asked=50, s_per_step=0.135, s_per_eval=2.1, at_step=200)
    assert Plan.from_record({"device": "cpu", "plan": p.to_record()}) == p
    assert Plan.from_record({"device": "cpu"}) is None and Plan.from_record(None) is None
    # helper-20: a record edited by hand is no plan (the resume warns), not a plan ending at step -5
    for bad in ("garbage", {**p.to_record(), "max_iters": -5}, {**p.to_record(), "at_step": "x"},
                {k: v for k, v in p.to_record().items() if k != "s_per_step"}):
        assert Plan.from_record({"plan": bad}) is None, bad
    # a run written before plans were values: the planned values stood in its train section
    old = {"fit_to_time": {"max_iters_asked": 5000, "max_iters": 1876, "s_per_step": 0.135, "s_per_eval": 2.1,
                           "at_step": 200, "warmup_iters_asked": 1000}}
    q = Plan.from_record(old, {"max_iters": 1876, "lr_decay_iters": 0, "warmup_iters": 375})
    assert (q.max_iters, q.warmup_iters, q.warmup_iters_asked, q.lr_decay_iters_asked) == (1876, 375, 1000, 0)
    assert q.made_for(TrainConfig(max_iters=1876, warmup_iters=375))  # its config.json asks the planned values
    assert q.made_for(TrainConfig(max_iters=5000, warmup_iters=1000))  # or the ones it replaced
    assert not q.made_for(TrainConfig(max_iters=8000, warmup_iters=1000))  # an extension drops the plan
    assert q.made_for(TrainConfig(max_iters=5000, warmup_iters=10))  # a new warmup keeps it (and its warmup)


def test_nothing_to_plan_without_fit_to_time_or_time_limit_or_when_planned_or_late():
    for kw in (dict(fit_to_time=False), dict(max_time=0.0), dict(max_iters=FIT_STEPS)):
        assert _budget(**kw)[1].start is None
    t = TrainConfig(max_iters=5000, max_time=270.0)
    b = TimeBudget(t, Plan(max_iters=2000, lr_decay_iters=0, warmup_iters=50, max_iters_asked=5000,
                           lr_decay_iters_asked=0, warmup_iters_asked=50, s_per_step=0.1, s_per_eval=1.0, at_step=20))
    b.begin(0)
    assert b.start is None and b.planned_end()
    b = TimeBudget(t)
    b.begin(5)  # resumed early: plans from there
    assert b.marks[:3] == (7, 5 + FIT_STEPS, 5 + REFIT_STEPS)
    b.begin(4990)  # fewer than FIT_STEPS steps left: nothing to plan
    assert b.start is None


@pytest.mark.parametrize("warmup, planned", [(50, 50), (2000, 820 + (1600 - 820) // 5)])
def test_a_session_resumed_mid_run_without_a_plan_plans_the_steps_left(warmup, planned):
    """helper-18: `--resume --train.max_iters 1600` on a planned run (a new end drops the plan) made no new plan, since
    plans were made only in a session's first FIT_STEPS steps: the time limit then cut the decay. max_time limits each
    session, so the steps left are planned; a warmup already done stays, a longer one ends within a fifth of them."""
    t = TrainConfig(max_iters=5000, max_time=270.0, warmup_iters=warmup)
    b = TimeBudget(t)
    b.begin(800)
    assert b.marks[:3] == (802, 800 + FIT_STEPS, 800 + REFIT_STEPS)
    msg = b.propose(800 + FIT_STEPS, 1600, 0.1)
    assert msg.startswith("train.fit_to_time: the steps from 800 to 5000 would not fit this session's train.max_time")
    # no evaluation timed yet in this session: its cost is an estimate, said so (it said "measured")
    assert "(0.1 s/step measured, 1.33 s/evaluation estimated: 2 x eval_iters forwards at 1/3 step)" in msg
    assert b.plan.max_iters == 1600 and b.plan.warmup_iters == planned


# ------------------------------------------------ train.fit_to_time in a run (the trainer's clock faked: fake_clock)
@pytest.mark.slow
def test_run_that_does_not_fit_is_shortened_and_ends_with_its_decay(tmp_path, tiny_text_file, fake_clock):
    t, s, c = fit_run(tmp_path, tiny_text_file, "fit")
    plan = c["resolved"]["plan"]
    n = plan["max_iters"]
    assert plan["max_iters_asked"] == 100_000 and plan["at_step"] in (FIT_STEPS, REFIT_STEPS)
    assert FIT_STEPS < n < 100_000
    assert c["train"]["max_iters"] == 100_000  # config.json keeps what was asked; the plan is beside it
    # the time budget ended it (as a cut would say), at the planned step with the decay finished
    assert s["stopped_by"] == "max_time" and s["final_step"] == n
    assert s["wall_time_s"] <= 6.0
    assert t.lr_at(n) == 1e-4 and t.lr_at(n - 1) < 1.01e-4 + 3e-3 * 1e-3  # the cosine reached min_lr
    assert t.lr_at(FIT_STEPS + 1) > t.lr_at(n // 2) > t.lr_at(n - 1)


@pytest.mark.slow
def test_off_the_time_limit_cuts_the_run_mid_decay(tmp_path, tiny_text_file, fake_clock):
    t, s, c = fit_run(tmp_path, tiny_text_file, "off", fit_to_time=False)
    assert "plan" not in c["resolved"] and c["train"]["max_iters"] == 100_000
    assert s["stopped_by"] == "max_time" and t.lr_at(s["final_step"]) > 1e-3  # cut far from min_lr


def test_a_run_that_fits_is_untouched(tmp_path, tiny_text_file, fake_clock):
    _, s, c = fit_run(tmp_path, tiny_text_file, "fits", max_iters=60)
    assert "plan" not in c["resolved"] and c["train"]["max_iters"] == 60 and s["final_step"] == 60
    assert s["stopped_by"] == "max_iters"


@pytest.mark.slow
def test_a_plan_shorter_than_the_warmup_shortens_the_warmup(tmp_path, tiny_text_file, fake_clock):
    t, s, c = fit_run(tmp_path, tiny_text_file, "w", warmup_iters=5000, learning_rate=3e-3)
    plan = c["resolved"]["plan"]
    n, w = plan["max_iters"], plan["warmup_iters"]
    assert c["train"]["warmup_iters"] == 5000  # what was asked stays in the config
    assert plan["warmup_iters_asked"] == 5000 and FIT_STEPS <= w <= n // 4
    assert t.lr_at(w) == 3e-3 and t.lr_at(n) == 1e-4  # reaches the peak, then decays to min_lr
    assert s["stopped_by"] == "max_time" and s["final_step"] == n
    # a new user's pass: steps 1-20 followed the 5000-step ramp, then the shorter one (x8 at step 21); the warmup now
    # goes on straight from the rate it had, as the plan records
    at, lr = plan["warmup_from"]
    assert at == FIT_STEPS and lr == pytest.approx(3e-3 * (at + 1) / 5001)  # the rate of the 5000-step ramp
    steps = [t.lr_at(it + 1) - t.lr_at(it) for it in range(at, w)]
    assert t.lr_at(at) == pytest.approx(lr) and max(steps) == pytest.approx(min(steps))  # one straight line
    assert max(steps) < 3e-3 / (w - at) * 1.01  # from that rate to the peak: no jump at step 21


class _SpeedUp:
    """From step ``step`` on, the fake clock advances ``factor`` times as much per reading."""

    def __init__(self, clock, step, factor):
        self.clock, self.step, self.factor = clock, step, factor

    def __getattr__(self, name):
        return lambda *a, **k: None

    def on_step_end(self, run, info):
        if info.step == self.step:
            self.clock[1] *= self.factor


@pytest.mark.slow
@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_the_second_plan_follows_the_measured_speed(tmp_path, tiny_text_file, fake_clock, factor):
    # steps get faster (or slower) after the first plan: the plan at REFIT_STEPS moves the end
    budget = 10.0  # fake seconds: ~1,000 steps at the first plan, enough for the plan at REFIT_STEPS to move
    cfg = tiny_config(tmp_path / "s", tiny_text_file, train=dict(max_iters=100_000, max_time=budget, eval_interval=50,
                                                                 log_interval=10, min_lr=1e-4))
    lines = []
    t = Trainer(cfg, callbacks=[_SpeedUp(fake_clock, FIT_STEPS + 5, factor)], log=lines.append)
    run = t.fit()
    s = json.loads((run / "summary.json").read_text())
    plan = json.loads((run / "config.json").read_text())["resolved"]["plan"]
    first = [x for x in lines if "would not fit" in x][0]
    n1 = int(first.split("max_iters is now ")[1].split()[0].rstrip(","))
    assert plan["at_step"] >= REFIT_STEPS and any("re-measured" in x for x in lines)
    assert (plan["max_iters"] > n1) if factor < 1 else (plan["max_iters"] < n1)
    # ends at the plan, or (the plan aims at 98 % of the budget) meets the time limit within its last 2 %
    n = plan["max_iters"]
    assert n - n // 50 <= s["final_step"] <= n and s["stopped_by"] == "max_time" and s["wall_time_s"] <= budget * 1.03
    assert t.lr_at(n) == 1e-4 and t.lr_at(s["final_step"]) < 1.01e-4


@pytest.mark.slow  # ~1,300 tiny steps (2,363 at max_time 15 took 30-100 s on 2 cores, most of the fast tier's time)
def test_a_late_change_of_speed_moves_the_end_halfway_and_the_rate_continues_without_a_jump(
        tmp_path, tiny_text_file, fake_clock):
    # the steps after REFIT_STEPS + 50 run twice as fast: the plan halfway through what is left sees it (at step
    # ~830 of ~1,300 with max_time 9: past REFIT_STEPS + 200, the rate still ~6e-4, so a 5 % jump there shows)
    cfg = tiny_config(tmp_path / "late", tiny_text_file, train=dict(max_iters=100_000, max_time=9.0,
                                                                    eval_interval=500, log_interval=10, min_lr=1e-4))
    lines = []
    t = Trainer(cfg, callbacks=[_SpeedUp(fake_clock, REFIT_STEPS + 50, 0.5)], log=lines.append)
    run = t.fit()
    plan = json.loads((run / "config.json").read_text())["resolved"]["plan"]
    at, n = plan["at_step"], plan["max_iters"]
    assert at > REFIT_STEPS + 4 * 50 and n > at and sum("re-measured" in x for x in lines) >= 1
    assert t.schedule.anchor is not None and t.schedule.anchor[0] == at and t.schedule.anchor[2] == n
    # continuity at the late plan: the logged rate (every 10 steps) moves by what ~10 steps of decay do;
    # recomputing the cosine for the new end instead would jump up by ~2e-4 here
    lrs = {r["step"]: r["lr"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
           if r.get("kind") == "train"}
    before, after = max(k for k in lrs if k < at), min(k for k in lrs if k > at)
    assert 0 < lrs[before] - lrs[after] < 5e-5, (lrs[before], lrs[after])
    assert t.lr_at(at) == pytest.approx(t.schedule.anchor[1]) and t.lr_at(at + 1) < t.lr_at(at)
    assert t.lr_at(n) == 1e-4
    s = json.loads((run / "summary.json").read_text())
    assert n - n // 50 <= s["final_step"] <= n and s["stopped_by"] == "max_time"


def test_a_plan_ending_just_after_its_warmup_decays_and_never_jumps_to_the_peak():
    """helper-20: max_time 12 on the default model planned 21 steps, warmup 20 (from 50): the rate went 0.00118 at step
    20 to the peak 0.003 at step 21, the last one, and never decayed. A plan whose warmup ends at the step it is made
    decays from the rate the run has."""
    from depthlab.training.optimization import LRSchedule

    t, b = _budget(max_iters=5000, max_time=12.0, learning_rate=3e-3, min_lr=1e-4)
    sched = LRSchedule(t, b)
    lr_before, warmup_before = sched.lr_at(FIT_STEPS), sched.warmup_iters
    assert b.propose(FIT_STEPS, FIT_STEPS + 1, 0.5) and b.plan.warmup_iters == FIT_STEPS
    sched.replanned(FIT_STEPS, lr_before, warmup_before)
    assert sched.lr_at(FIT_STEPS) == pytest.approx(lr_before) and lr_before < 3e-3
    assert sched.lr_at(FIT_STEPS + 1) == pytest.approx(1e-4)  # min_lr at the planned end


def test_a_budget_that_ends_inside_the_warmup_says_so(tmp_path, tiny_text_file, fake_clock):
    """helper-21: max_time 5 on the default model stopped at step 5, inside the 50-step warmup, with "the learning rate
    had not finished its decay" (it had not begun one)."""
    fake_clock[1] = 0.2  # fake seconds per clock reading: the budget ends within the first steps
    lines = []
    cfg = tiny_config(tmp_path / "w", tiny_text_file, train=dict(max_iters=5000, max_time=3.0, warmup_iters=50,
                                                                 eval_interval=1000, log_interval=1))
    Trainer(cfg, log=lines.append).fit()
    said = [x for x in lines if x.startswith("stopped by train.max_time")]
    assert said and said[0].endswith("the learning rate was still warming up (the budget ended before "
                                     "train.fit_to_time had timed the steps it plans from)"), lines


@pytest.mark.slow
def test_the_plan_line_of_a_resumed_finished_decay_says_the_rate_stays_and_a_warmup_is_not_a_floor(
        tmp_path, tiny_text_file, capsys):
    from conftest import run_cli, tiny_cli_args

    run = tmp_path / "r"
    rc, _, _ = run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, run, train__max_iters=40,
                                                      train__max_time=0, train__warmup_iters=5))
    assert rc == 0
    rc, out, err = run_cli(capsys, "train", "--resume", str(run), "--train.max_iters", "1000000", "--train.max_time",
                           "3")
    # the schedule's resume: line is a notice, on stderr; the plan's line is the log's
    assert rc == 0 and "depthlab: resume: the learning rate stays at train.min_lr 0.0001 (the decay ended at step " \
        "40)" in err, err
    plan = next(line for line in out.splitlines() if line.startswith("train.fit_to_time: the steps from 40"))
    assert "the learning rate stays at train.min_lr (" in plan and "decays" not in plan, plan
    # a long warmup starts below min_lr: not a floor (the rate at step 20 of 1000 is 6e-5 of a 3e-3 peak)
    rc, out, _ = run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, tmp_path / "w", train__max_iters=1000000,
                                                      train__max_time=3, train__warmup_iters=1000))
    plan = next(line for line in out.splitlines() if line.startswith("train.fit_to_time:"))
    assert rc == 0 and "stays at train.min_lr" not in plan, plan


def test_a_plan_that_cannot_fit_even_one_step_says_by_how_much_it_runs_past_max_time():
    t, b = _budget(max_time=12.0)
    b.note_eval(2.0)
    b.final_batches = 5 * t.eval_iters  # the final validation: 2.5 evaluations' worth, 5 s
    # at 9 s: one step (0.1 s), the last evaluation (2 s) and the final validation (5 s) end at 16.1 s
    assert b.steps_that_fit(20, 0.1, 9.0) == 21
    msg = b.propose(20, 21, 0.1)
    assert "ends ~4.1 s past train.max_time 12 s" in msg and "evaluation and final validation take ~7.0 s" in msg
    assert "--train.final_validation false" in msg
    t, b = _budget(max_time=12.0)
    b.note_eval(2.0)
    assert b.steps_that_fit(20, 0.1, 2.0) > 21  # when steps fit, no such clause
    assert "past train.max_time" not in b.propose(20, b.steps_that_fit(20, 0.1, 2.0), 0.1)


@pytest.mark.parametrize("max_iters", [1, 2, 3, 20, 23])
def test_the_warmup_warning_of_a_run_too_short_to_plan_says_nothing_of_fit_to_time(max_iters):
    """A new user's pass: with --train.max_iters 1-3 the warning said fit_to_time could shorten the run and end
    its warmup early; its first plan comes after FIT_STEPS steps, so it never can."""
    from depthlab.config import schedule_warnings

    t = TrainConfig(max_iters=max_iters, warmup_iters=50, max_time=30, fit_to_time=True)
    (w,) = schedule_warnings(t)
    assert w == (f"train.warmup_iters (50) >= train.max_iters ({max_iters}): the peak train.learning_rate 0.003 "
                 "is never reached, nor train.muon_lr 0.01 (where Muon updates the blocks' matrices) and the cosine "
                 "decay never starts")
    b = TimeBudget(t)
    b.begin(0)
    assert not b.may_shorten
    b.start = 0  # even timed, the earliest plan (a step after the first reading) is no change of the end
    assert b.propose(FIT_STEPS, FIT_STEPS + 1, 0.1) is None and b.plan is None


def test_the_warmup_warning_keeps_the_fit_to_time_clause_where_a_plan_can_shorten_the_run():
    from depthlab.config import schedule_warnings

    t = TrainConfig(max_iters=24, warmup_iters=50, max_time=30, fit_to_time=True)
    assert "unless train.fit_to_time shortens the run" in schedule_warnings(t)[0]
    b = TimeBudget(t)
    b.begin(0)
    assert b.may_shorten and b.propose(FIT_STEPS, FIT_STEPS + 1, 0.1) is not None and b.plan.max_iters == 21
    b = TimeBudget(t)
    b.begin(4)  # a session resumed at step 4 would time 20 steps first: too late to end before 24
    assert not b.may_shorten
    assert "unless" not in schedule_warnings(t, plannable=False)[0]


def test_a_three_step_run_prints_the_warmup_warning_without_the_fit_to_time_clause(tmp_path, tiny_text_file,
                                                                                   capsys):
    from depthlab.cli import main
    from conftest import tiny_cli_args

    assert main(["train", *tiny_cli_args(tiny_text_file, tmp_path / "r", train__max_iters=3,
                                         train__warmup_iters=50)]) == 0
    err = capsys.readouterr().err
    assert ("depthlab: warning: train.warmup_iters (50) >= train.max_iters (3): the peak train.learning_rate 0.003 "
            "is never reached, nor train.muon_lr 0.01 (where Muon updates the blocks' matrices) and the cosine "
            "decay never starts\n") in err and "fit_to_time" not in err
    w = schedule_warnings(TrainConfig(max_iters=3, warmup_iters=50, optimizer="adamw"))
    assert "muon_lr" not in w[0]  # AdamW alone: its rate is the only one


def test_the_plan_lines_show_a_tiny_step_time_to_three_significant_digits():
    """helper-48: a tiny model's re-plans all read "re-measured 0.006 s/step" while the plan moved 1210 -> 1130 ->
    1193: three decimals hid the differences that moved it (0.0055 and 0.0064 s/step are both "0.006")."""
    t, b = _budget(max_iters=5000, max_time=20.0)
    b.tick(2, 0.0)
    s_step = b.tick(FIT_STEPS, 0.00612 * (FIT_STEPS - 2))
    assert "(0.00612 s/step measured, " in b.propose(FIT_STEPS, 1200, s_step)
    assert "re-measured 0.00555 s/step over steps" in b.propose(FIT_STEPS + 50, 1300, 0.00555)


def test_extending_a_plan_that_ended_just_after_its_warmup_goes_on_from_the_rate_it_trained_at():
    """A new user's default run on a busy machine: planned 21 steps, warmup 20, re-planned at step 20 (anchor
    [20, 0.00118, 21]). A plain --resume said "its learning rate decayed by then", and --train.max_iters 60 trained 39
    steps at min_lr 1e-4, though the weights last trained at 0.00118 (41 % of the peak)."""
    from depthlab.budget import nothing_to_train
    from depthlab.training.optimization import LRSchedule

    t, b = _budget(max_iters=5000, max_time=12.0, learning_rate=3e-3, min_lr=1e-4)
    sched = LRSchedule(t, b)
    lr_before, warmup_before = sched.lr_at(FIT_STEPS), sched.warmup_iters
    assert b.propose(FIT_STEPS, FIT_STEPS + 1, 0.5)
    sched.replanned(FIT_STEPS, lr_before, warmup_before)
    end, plan = b.plan.max_iters, b.plan
    assert "too few steps after its warmup or last re-plan for the learning rate to decay" in \
        nothing_to_train(end, 5000, plan)
    t2 = dataclasses.replace(t, max_iters=60, max_time=0.0)
    later, lines = LRSchedule(t2, TimeBudget(t2)), []
    later.resume(end, list(sched.anchor), dataclasses.asdict(t), plan, lines.append)
    assert later.lr_at(end) == pytest.approx(lr_before) and lr_before > 1e-3
    assert later.lr_at(59) < later.lr_at(40) < later.lr_at(end) and later.lr_at(60) == pytest.approx(1e-4)
    assert lines == [f"resume: the learning rate continues from {lr_before:.3g} at step {end + 1}, and decays toward "
                     "train.min_lr 0.0001, which it would first reach at step 61, after the run's last step 60 (the "
                     f"decay used to end at {end}); no jump back to the peak"]


def test_a_plan_whose_decay_ran_its_course_still_stays_at_the_floor_when_extended():
    from depthlab.budget import nothing_to_train
    from depthlab.training.optimization import LRSchedule

    t, b = _budget(max_iters=5000, max_time=12.0, learning_rate=3e-3, min_lr=1e-4, warmup_iters=5)
    assert b.propose(FIT_STEPS, 40, 0.5) and b.plan.max_iters - max(b.plan.warmup_iters, FIT_STEPS) >= 10
    sched = LRSchedule(t, b)
    end = b.plan.max_iters
    assert "its learning rate decayed by then" in nothing_to_train(end, 5000, b.plan)
    t2 = dataclasses.replace(t, max_iters=end + 30, max_time=0.0)
    later, lines = LRSchedule(t2, TimeBudget(t2)), []
    later.resume(end, None, dataclasses.asdict(t), b.plan, lines.append)
    assert later.lr_at(end) == pytest.approx(1e-4) and "stays at train.min_lr 0.0001" in lines[0]
    assert sched.lr_at(end - 1) - 1e-4 < 0.025 * (3e-3 - 1e-4)
