"""Issue 23's stop-rules audit: what train.max_time, fit_to_time's plan, target_val_loss and patience
mean across the sessions of one run (``--resume``), with values changed on resume, and what the stop
message says about it (the table is in the audit note).

- ``max_time`` limits each session; summary.json's ``wall_time_s`` counts all of them.
- ``target_val_loss`` / ``patience`` apply to the whole run with this session's values: met before a
  resume, they stop it before it trains, naming the flag that trains on.
- a plan of ``fit_to_time`` carries over in steps; its stop message names the limit it was made for.
"""

from __future__ import annotations

import json
import types

import pytest

from conftest import TINY_TEXT, tiny_config
from depthlab.budget import Plan, TimeBudget
from depthlab.config import TrainConfig
from depthlab.trainer import train
from depthlab.training.stopping import StopRules

MODEL = dict(n_layer=1, n_head=2, n_embd=16, block_size=16)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("c") / "t.txt"
    p.write_text(TINY_TEXT, encoding="utf-8")
    return p


def _train(out, corpus, lines=None, **tr):
    t = dict(max_iters=10, eval_interval=5, eval_iters=1)
    t.update(tr)
    run = train(tiny_config(out, corpus, model=MODEL, train=t), log=(lines.append if lines is not None else print))
    return json.loads((run / "summary.json").read_text())


class _Agree:
    @staticmethod
    def agree(**flags):
        return flags


def _stop_lines(lines):
    """The stop lines, a resume's that trains nothing included ("nothing to train: stopped at ...")."""
    return [s.removeprefix("nothing to train: ") for s in lines if s.removeprefix("nothing to train: ")
            .startswith("stopped")]


# ----------------------------------------------------------------------------- target_val_loss
@pytest.mark.slow  # three tiny trainings (~1-2 s)
def test_a_target_reached_before_a_resume_stops_it_at_once_and_keeps_the_step_it_was_reached(tmp_path, corpus):
    run = tmp_path / "r"
    s = _train(run, corpus, target_val_loss=100.0)  # every loss is under 100 nats: reached at step 0
    assert (s["stopped_by"], s["final_step"], s["target_reached_step"]) == ("target_val_loss", 0, 0)
    lines = []
    s = _train(run, corpus, lines, target_val_loss=100.0, resume=True)
    # was: 5 more steps trained, then "reached" again and target_reached_step 5
    assert (s["stopped_by"], s["final_step"], s["target_reached_step"]) == ("target_val_loss", 0, 0)
    (line,) = _stop_lines(lines)
    # the Python API's words (s56): a config field, not the command line's flag
    assert "at step 0, before this resume" in line and "train.target_val_loss=0 (off)" in line
    s = _train(run, corpus, target_val_loss=0.0, resume=True)  # the named flag trains on
    assert (s["stopped_by"], s["final_step"], s["target_reached_step"]) == ("max_iters", 10, None)


def test_a_resume_reads_target_and_patience_from_the_runs_evaluations_with_this_sessions_values(tmp_path):
    from depthlab import rundir
    from depthlab.training.evaluator import Evaluator

    w = rundir.MetricsWriter(tmp_path, tensorboard=False)
    for step, vl in ((0, 3.5), (5, 3.4), (10, "nan"), (15, 3.3)):
        w.log("eval", {"step": step, "train_loss": 3.0, "val_loss": vl, "elapsed_s": step / 10})
    w.close()

    def resumed(**tr):
        ev = Evaluator(tiny_config(tmp_path, train=tr), None, _Agree(), None)
        ev.load_state_dict({"best_val_loss": 3.3, "best_step": 15, "evals_without_improvement": 2}, tmp_path, 10)
        return ev.target_reached, ev.patience_exhausted, ev.session_evals

    assert resumed(target_val_loss=3.45) == ((5, 0.5), False, 0)  # first reached at step 5, 0.5 s into the run
    assert resumed(target_val_loss=3.3) == (None, False, 0)  # step 15 is after the checkpoint; nan is no loss
    assert resumed(patience=2) == (None, True, 0) and resumed(patience=3) == (None, False, 0)


# ----------------------------------------------------------------------------- patience
@pytest.mark.slow  # three tiny trainings (~1-2 s)
def test_patience_lost_before_a_resume_stops_it_at_once_and_a_larger_patience_trains_on(tmp_path, corpus):
    run = tmp_path / "p"
    # min_delta 100 nats: no evaluation after the first counts as an improvement
    s = _train(run, corpus, patience=1, min_delta=100.0, max_iters=20)
    assert (s["stopped_by"], s["final_step"]) == ("patience", 5)
    lines = []
    s = _train(run, corpus, lines, patience=1, min_delta=100.0, max_iters=20, resume=True)
    assert (s["stopped_by"], s["final_step"]) == ("patience", 5)  # was: 5 more steps, then stopped at 10
    (line,) = _stop_lines(lines)
    assert "before this resume" in line and "a train.patience above 1" in line and "--train." not in line
    assert "step 5: 1 evaluation since step 0 (val loss " in line  # read back from the run's records
    lines = []
    s = _train(run, corpus, lines, patience=3, min_delta=100.0, max_iters=20, resume=True)
    # the count carried over (1 at step 5) meets patience 3 at step 15: two more evaluations
    assert (s["stopped_by"], s["final_step"]) == ("patience", 15)
    assert "3 evaluations in a row since step 0 (val loss " in _stop_lines(lines)[0]
    assert "before this resume" not in _stop_lines(lines)[0]


# ----------------------------------------------------------------------------- max_time
@pytest.mark.slow  # three tiny trainings (~1-2 s)
def test_max_time_limits_each_session_and_the_summary_counts_them_all(tmp_path, corpus, fake_clock):
    run = tmp_path / "t"
    lines = []
    limit = dict(max_iters=10_000, max_time=0.5, eval_interval=1000, final_validation=False, fit_to_time=False)
    s1 = _train(run, corpus, lines, **limit)
    assert s1["stopped_by"] == "max_time" and 0 < s1["final_step"] < 10_000
    (line,) = _stop_lines(lines)
    assert "0.5 s of this session; a resume gets as long again" in line  # was: "(0.5 s)", which time unsaid
    lines = []
    s2 = _train(run, corpus, lines, **limit, resume=True)
    assert s2["stopped_by"] == "max_time" and s2["final_step"] > s1["final_step"]
    assert s2["wall_time_s"] > 0.5 + s1["wall_time_s"] - 0.05  # both sessions, each near its own 0.5 s


# ----------------------------------------------------------------------------- fit_to_time's plan
def _planned_end(plan: Plan, max_time: float) -> str:
    t = TrainConfig(max_iters=plan.max_iters_asked, max_time=max_time, fit_to_time=True)
    lines = []
    rules = StopRules(t, _Agree(), lines.append)
    ev = types.SimpleNamespace(target_reached=None, patience_exhausted=False, session_evals=1)
    why = rules.reason(plan.max_iters, False, types.SimpleNamespace(max_iters=plan.max_iters), TimeBudget(t, plan), ev)
    assert why == "max_time"
    return lines[0]


def test_the_planned_end_names_the_limit_it_was_planned_for():
    t = TrainConfig(max_iters=5000, max_time=270.0, fit_to_time=True)
    b = TimeBudget(t)
    assert "this session's train.max_time 270 s" in b.propose(20, 2000, 0.1)
    assert b.plan.max_time == 270.0
    assert Plan.from_record({"plan": b.plan.to_record()}) == b.plan  # round trip through config.json
    old = {k: v for k, v in b.plan.to_record().items() if k != "max_time"}  # a plan written before the field
    assert Plan.from_record({"plan": old}).max_time == 0.0
    assert "planned for train.max_time 270 s (5000 steps" in _planned_end(b.plan, 270.0)
    # resumed with --train.max_time 600: the stored plan goes on; it was made for 270 s, not 600 (said so)
    line = _planned_end(b.plan, 600.0)
    assert "planned for train.max_time 270 s in an earlier session; this session's limit is 600 s" in line


# ----------------------------------------------------------------------------- the sweep's runs
def test_a_sweep_rerun_keeps_time_capped_runs_and_redoes_interrupted_ones_from_step_0(tmp_path, corpus):
    from conftest import tiny_sweep_spec
    from depthlab import rundir
    from depthlab.sweep.common import clear_run_dir, plan
    from depthlab.sweep.spec import expand

    spec = tiny_sweep_spec(corpus, {"model.n_layer": [1, 2]}, {"model.n_embd": 16, "model.n_head": 2,
                                                                "model.block_size": 16, "train.max_time": 5.0})
    capped, cut = expand(spec, tmp_path)
    for p, status in ((capped, "time_capped"), (cut, "interrupted")):
        d = tmp_path / "runs" / p.name
        (d / "checkpoints").mkdir(parents=True)
        rundir.write_json(d / rundir.CONFIG, p.config)
        rundir.write_json(d / rundir.SWEEP_STATUS, {"name": p.name, "status": status})
    rundir.write_json(tmp_path / "runs" / capped.name / rundir.SUMMARY, {"stopped_by": "max_time"})
    done, todo = plan([capped, cut], tmp_path)
    # each run's max_time is its own (one process, one session); a capped run is a result, an interrupted
    # one is started again (what "run the same command again" after an interrupted sweep does)
    assert [p.name for p in done] == [capped.name] and [p.name for p in todo] == [cut.name]
    clear_run_dir(tmp_path / "runs" / cut.name)
    assert not (tmp_path / "runs" / cut.name).exists()
