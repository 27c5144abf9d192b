"""The learner's loop: samples during training and early stopping by patience (issue 13)."""

import json

from conftest import QUIET, tiny_config

from depthlab import train
from depthlab.rundir import RunDir
from depthlab.trainer import Trainer


def test_samples_every_interval_are_recorded_and_leave_the_trajectory_alone(tmp_path, tiny_text_file):
    on = train(tiny_config(tmp_path / "on", tiny_text_file, train=dict(sample_interval=5, sample_tokens=40)),
               **QUIET)
    off = train(tiny_config(tmp_path / "off", tiny_text_file), **QUIET)
    samples = RunDir(on).metrics("sample")
    assert [s["step"] for s in samples] == [5, 10, 15, 20]
    assert all(len(s["text"]) == 41 and s["text"][0] == "\n" for s in samples)  # prompt + 40 characters
    assert len({s["text"] for s in samples}) > 1  # same seed: they differ only because the weights did
    def curve(run):
        return [(r["step"], r["val_loss"]) for r in RunDir(run).evals]
    assert curve(on) == curve(off)


def test_patience_stops_after_n_evaluations_without_improvement(tmp_path, tiny_text_file):
    t = Trainer(tiny_config(tmp_path / "p", tiny_text_file, train=dict(max_iters=200, eval_interval=5,
                                                                        patience=3, min_delta=0.01)), **QUIET)
    vals = iter([3.0, 2.0, 1.995, 2.5, 1.999, 9.0, 1.0, 1.0])
    t.evaluate = lambda: {"train": 1.0, "val": next(vals)}
    t.fit()
    s = json.loads((tmp_path / "p" / "summary.json").read_text())
    # 2.0 at step 5 is the last improvement by >= 0.01; steps 10, 15, 20 are not -> stop at 20
    assert s["stopped_by"] == "patience" and s["final_step"] == 20
    assert s["best_val_loss"] == 1.995 and s["best_val_step"] == 10  # best weights: any improvement


def test_patience_counter_survives_resume(tmp_path, tiny_text_file):
    cfg = dict(max_iters=10, eval_interval=5, patience=2)
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=cfg), **QUIET)
    vals = iter([3.0, 2.0, 2.5])
    t.evaluate = lambda: {"train": 1.0, "val": next(vals)}
    t.fit()  # one evaluation without improvement at step 10
    t2 = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, max_iters=100, resume=True)), **QUIET)
    assert t2.evaluator.evals_without_improvement == 1
    t2.evaluate = lambda: {"train": 1.0, "val": 2.6}
    t2.fit()
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["final_step"] == 15
