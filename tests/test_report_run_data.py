"""report.run_data.RunData reads a run directory through depthlab.rundir (old and new record layouts)."""

import math

import pytest

from depthlab.errors import DepthlabError
from depthlab.report import plots as P
from depthlab.report.run_data import matrix, series
from depthlab.rundir import SUMMARY

from conftest import write_run_dir


def test_records_split_by_kind_old_and_new(tmp_path):
    recs = [{"kind": "train", "step": 10, "loss": 2.0, "lr": 1e-3},
            {"step": 5, "loss": 3.0, "lr": 1e-3},  # old layout: no kind
            {"kind": "eval", "step": 10, "train_loss": 2.1, "val_loss": "nan", "tokens_seen": 320},
            {"step": 0, "train_loss": 4.0, "val_loss": 4.1},
            {"kind": "grad", "step": 10, "grad_norm_block": [1.0, "inf"]},
            {"kind": "probe", "step": 0, "resid_rms": [1.0, 2.0]},
            {"kind": "event", "step": 7, "nonfinite": True}]
    run = P.load_run_data(write_run_dir(tmp_path, recs, **{SUMMARY: {"best_val_loss": 4.1}}))
    assert [r["step"] for r in run.train] == [5, 10]  # both layouts, sorted by step
    assert [r["step"] for r in run.evals] == [0, 10]
    assert [r["step"] for r in run.grads] == [10] and [r["step"] for r in run.probes] == [0]
    assert run.summary == {"best_val_loss": 4.1} and run.diagnosis is None
    # no baselines.json: recomputed from the run's corpus (its config names none: the embedded Tiny Shakespeare)
    assert run.baselines_recomputed and round(run.baselines["bigram"]["nats"], 3) == 2.482
    assert run.tokens_per_step() == 32.0 and run.title() == "run: 2 × prenorm"
    xs, ys = series(run.evals, "val_loss")
    assert xs == [0.0, 10.0] and ys[0] == 4.1 and math.isnan(ys[1])  # "nan" string -> gap
    steps, rows = matrix(run.grads, "grad_norm_block")
    assert rows[0][0] == 1.0 and math.isnan(rows[0][1])  # inf -> gap too


def test_not_a_run_directory(tmp_path):
    with pytest.raises(DepthlabError, match="not found"):
        P.load_run_data(tmp_path / "missing")
    with pytest.raises(DepthlabError, match="not a depthlab run directory"):
        P.load_run_data(tmp_path)
