"""train.fit_to_time: a run that would not fit max_time is shortened once, early, to end with its decay done."""

import json
import time
import types

import pytest
from conftest import QUIET, tiny_config
from depthlab.cli import main
from depthlab.trainer import FIT_STEPS, REFIT_STEPS, Trainer


@pytest.fixture
def fake_clock(monkeypatch):
    """The trainer's clock advances 10 ms per reading: timings, hence the plan, are deterministic."""
    import depthlab.trainer as tr

    now = [1000.0, 0.01]  # [clock, seconds per reading]

    def tick():
        now[0] += now[1]
        return now[0]

    monkeypatch.setattr(tr, "time", types.SimpleNamespace(time=tick, perf_counter=time.perf_counter,
                                                          strftime=time.strftime, sleep=time.sleep))
    return now


class _StopAt:
    """A callback that asks the trainer to stop (as SIGTERM would) after step ``step``."""

    def __init__(self, step):
        self.step = step

    def __getattr__(self, name):  # every other hook: nothing
        return lambda *a, **k: None

    def on_step_end(self, run, info):
        if info.step == self.step:
            run.request_stop(15)


def _run(tmp_path, tiny_text_file, name, stop_at=None, **train):
    cfg = dict(max_iters=100_000, max_time=6.0, eval_interval=50, log_interval=10, min_lr=1e-4)
    cfg.update(train)
    t = Trainer(tiny_config(tmp_path / name, tiny_text_file, train=cfg),
                callbacks=[_StopAt(stop_at)] if stop_at else [], **QUIET)
    run = t.fit()
    return t, json.loads((run / "summary.json").read_text()), json.loads((run / "config.json").read_text())


def _resume(tmp_path, tiny_text_file, name, **train):
    from depthlab.config import RunConfig

    c = json.loads((tmp_path / name / "config.json").read_text())
    cfg = RunConfig.from_dict(c)
    cfg.train.resume = True
    t = Trainer(cfg, **QUIET)
    run = t.fit()
    return t, json.loads((run / "summary.json").read_text()), json.loads((run / "config.json").read_text())


def test_run_that_does_not_fit_is_shortened_and_ends_with_its_decay(tmp_path, tiny_text_file, fake_clock):
    t, s, c = _run(tmp_path, tiny_text_file, "fit")
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


def test_off_the_time_limit_cuts_the_run_mid_decay(tmp_path, tiny_text_file, fake_clock):
    t, s, c = _run(tmp_path, tiny_text_file, "off", fit_to_time=False)
    assert "plan" not in c["resolved"] and c["train"]["max_iters"] == 100_000
    assert s["stopped_by"] == "max_time" and t.lr_at(s["final_step"]) > 1e-3  # cut far from min_lr


def test_a_run_that_fits_is_untouched(tmp_path, tiny_text_file, fake_clock):
    _, s, c = _run(tmp_path, tiny_text_file, "fits", max_iters=60)
    assert "plan" not in c["resolved"] and c["train"]["max_iters"] == 60 and s["final_step"] == 60
    assert s["stopped_by"] == "max_iters"


def test_resume_keeps_the_plan_and_does_not_fit_again(tmp_path, tiny_text_file, fake_clock, capsys):
    _, s, c = _run(tmp_path, tiny_text_file, "r")
    n = c["resolved"]["plan"]["max_iters"]
    assert main(["train", "--resume", str(tmp_path / "r")]) == 0
    assert "nothing to train" in capsys.readouterr().out
    c2 = json.loads((tmp_path / "r" / "config.json").read_text())
    assert c2 == c and c2["train"]["max_iters"] == 100_000 and c2["resolved"]["plan"]["max_iters"] == n < 100_000


def test_more_threads_than_cores_is_warned(tmp_path, tiny_text_file):
    import os

    import torch

    lines = []
    before = torch.get_num_threads()
    Trainer(tiny_config(tmp_path / "t", tiny_text_file, train=dict(threads=(os.cpu_count() or 1) + 1)),
            log=lines.append)
    assert any("more than this machine's" in s and "--train.threads" in s for s in lines)
    lines.clear()
    Trainer(tiny_config(tmp_path / "u", tiny_text_file, train=dict(threads=1)), log=lines.append)
    torch.set_num_threads(before)  # the trainer set it process-wide
    assert not any("more than this machine's" in s for s in lines)


def test_a_plan_shorter_than_the_warmup_shortens_the_warmup(tmp_path, tiny_text_file, fake_clock):
    t, s, c = _run(tmp_path, tiny_text_file, "w", warmup_iters=5000, learning_rate=3e-3)
    plan = c["resolved"]["plan"]
    n, w = plan["max_iters"], plan["warmup_iters"]
    assert c["train"]["warmup_iters"] == 5000  # what was asked stays in the config
    assert plan["warmup_iters_asked"] == 5000 and FIT_STEPS <= w <= n // 4
    assert t.lr_at(w) == 3e-3 and t.lr_at(n) == 1e-4  # reaches the peak, then decays to min_lr
    assert s["stopped_by"] == "max_time" and s["final_step"] == n


def test_resuming_a_planned_run_keeps_the_plan_and_its_record(tmp_path, tiny_text_file, fake_clock):
    from depthlab.trainer import Interrupted

    with pytest.raises(Interrupted):
        _run(tmp_path, tiny_text_file, "k", stop_at=FIT_STEPS + 30)
    c = json.loads((tmp_path / "k" / "config.json").read_text())
    n = c["resolved"]["plan"]["max_iters"]
    assert n < 100_000 == c["train"]["max_iters"]
    t, s, c2 = _resume(tmp_path, tiny_text_file, "k")
    assert c2["resolved"]["plan"] == c["resolved"]["plan"] and c2["train"] == {**c["train"], "resume": True}
    assert s["final_step"] == n and s["stopped_by"] == "max_time"


def test_a_run_stopped_before_it_was_planned_is_planned_on_resume(tmp_path, tiny_text_file, fake_clock):
    from depthlab.trainer import Interrupted

    with pytest.raises(Interrupted):
        _run(tmp_path, tiny_text_file, "e", stop_at=10)
    assert "plan" not in json.loads((tmp_path / "e" / "config.json").read_text())["resolved"]
    t, s, c = _resume(tmp_path, tiny_text_file, "e")
    plan = c["resolved"]["plan"]
    assert plan["at_step"] in (10 + FIT_STEPS, 10 + REFIT_STEPS) and s["final_step"] == plan["max_iters"] < 100_000
    assert s["stopped_by"] == "max_time"


class _SpeedUp:
    """From step ``step`` on, the fake clock advances ``factor`` times as much per reading."""

    def __init__(self, clock, step, factor):
        self.clock, self.step, self.factor = clock, step, factor

    def __getattr__(self, name):
        return lambda *a, **k: None

    def on_step_end(self, run, info):
        if info.step == self.step:
            self.clock[1] *= self.factor


@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_the_second_plan_follows_the_measured_speed(tmp_path, tiny_text_file, fake_clock, factor):
    # steps get faster (or slower) after the first plan: the plan at REFIT_STEPS moves the end
    cfg = tiny_config(tmp_path / "s", tiny_text_file, train=dict(max_iters=100_000, max_time=20.0, eval_interval=50,
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
    assert n - n // 50 <= s["final_step"] <= n and s["stopped_by"] == "max_time" and s["wall_time_s"] <= 20.0 * 1.03
    assert t.lr_at(n) == 1e-4 and t.lr_at(s["final_step"]) < 1.01e-4


def test_a_late_change_of_speed_moves_the_end_halfway_and_the_rate_continues_without_a_jump(
        tmp_path, tiny_text_file, fake_clock):
    # the steps after REFIT_STEPS + 50 run twice as fast: the plan halfway through what is left sees it
    cfg = tiny_config(tmp_path / "late", tiny_text_file, train=dict(max_iters=100_000, max_time=60.0,
                                                                    eval_interval=500, log_interval=10, min_lr=1e-4))
    lines = []
    t = Trainer(cfg, callbacks=[_SpeedUp(fake_clock, REFIT_STEPS + 50, 0.5)], log=lines.append)
    run = t.fit()
    plan = json.loads((run / "config.json").read_text())["resolved"]["plan"]
    at, n = plan["at_step"], plan["max_iters"]
    assert at > REFIT_STEPS + 4 * 50 and n > at and sum("re-measured" in x for x in lines) >= 1
    assert t.schedule.anchor is not None and t.schedule.anchor[0] == at and t.schedule.anchor[2] == n
    # continuity at the late plan: the logged rate (every 10 steps) moves by what ~10 steps of decay do;
    # recomputing the cosine for the new end instead would jump by ~1e-3 here
    lrs = {r["step"]: r["lr"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
           if r.get("kind") == "train"}
    before, after = max(k for k in lrs if k < at), min(k for k in lrs if k > at)
    assert 0 < lrs[before] - lrs[after] < 5e-5, (lrs[before], lrs[after])
    assert t.lr_at(at) == pytest.approx(t.schedule.anchor[1]) and t.lr_at(at + 1) < t.lr_at(at)
    assert t.lr_at(n) == 1e-4
    s = json.loads((run / "summary.json").read_text())
    assert n - n // 50 <= s["final_step"] <= n and s["stopped_by"] == "max_time"
