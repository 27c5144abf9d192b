"""Findings of the 2026-12-06 session (fifth)."""

import json

import numpy as np
import pytest
import torch

from conftest import QUIET, tiny_config


def test_eval_batch_is_the_global_batch_of_the_first_session_and_kept_by_resumes():
    from depthlab.config import TrainConfig
    from depthlab.training.evaluator import eval_batch

    t = TrainConfig(batch_size=4, grad_accum=2)
    assert eval_batch(t) == 8  # a new run: batch_size x grad_accum, whatever the processes
    assert eval_batch(t, {"train": {"batch_size": 16}, "resolved": {"eval_batch": 12, "processes": 2}}) == 12
    # a run from before the record evaluated batch_size x processes windows a batch (grad_accum ignored)
    assert eval_batch(t, {"train": {"batch_size": 16, "grad_accum": 4}, "resolved": {"processes": 2}}) == 32
    assert eval_batch(t, {"train": {"batch_size": 16}, "resolved": {}}) == 16


@pytest.fixture(scope="module")
def accum_run(tmp_path_factory):
    from conftest import TINY_TEXT
    from depthlab.trainer import Trainer

    base = tmp_path_factory.mktemp("accum")
    path = base / "tiny.txt"
    path.write_text(TINY_TEXT, encoding="utf-8")
    tr = Trainer(tiny_config(base / "run", path, train=dict(batch_size=2, grad_accum=3, max_iters=10, eval_iters=3)),
                 **QUIET)
    tr.fit()
    return tr


def test_an_evaluation_in_micro_batches_is_the_mean_over_the_global_batch(accum_run):
    from depthlab.training.evaluator import eval_batches

    tr = accum_run
    assert json.loads((tr.run_dir / "config.json").read_text())["resolved"]["eval_batch"] == 6
    got = tr.evaluator.evaluate(tr.model)
    tr.model.eval()
    with torch.no_grad():
        want = [tr.model(x, y)[1].item() for x, y in eval_batches(tr.corpus.val, 16, 6, 0, "val", 3)]
    assert got["val"] == pytest.approx(float(np.mean(want)), abs=1e-5)
    assert got["val_se"] == pytest.approx(float(np.std(want, ddof=1) / np.sqrt(3)), rel=1e-3)


def test_a_resume_with_another_batch_size_keeps_the_evaluation_windows(tmp_path, tiny_text_file):
    from depthlab.config import RunConfig
    from depthlab.trainer import Trainer

    Trainer(tiny_config(tmp_path / "run", tiny_text_file, train=dict(batch_size=4, max_iters=10)), **QUIET).fit()
    cfg = RunConfig.from_dict(json.loads((tmp_path / "run" / "config.json").read_text()))
    cfg.train.resume, cfg.train.max_iters, cfg.train.batch_size = True, 20, 2
    lines = []
    tr = Trainer(cfg, log=lines.append)
    tr.fit()
    assert tr.evaluator.batch == 4
    assert json.loads((tmp_path / "run" / "config.json").read_text())["resolved"]["eval_batch"] == 4
    assert ("evaluation: 2 batches of 4 windows per split, as the run's earlier sessions evaluated (config.json "
            "resolved.eval_batch), in micro-batches of 2") in lines, lines


def test_the_end_of_training_curve_reads_every_window_when_its_prefix_cannot_tell(tmp_path, tiny_text_file,
                                                                                    monkeypatch):
    # diagnose left context_unused "not judged" on a prefix of the windows that `depthlab context --max_tokens 0`
    # could have decided: diagnose has only this record
    import depthlab.analytics.context as ctx
    from depthlab import train
    from depthlab.rundir import read_metrics

    monkeypatch.setattr(ctx, "DEFAULT_MAX_TOKENS", 64)  # one batch of 4 windows of 16
    for tells, windows in ((False, 24), (True, 4)):  # 6 batches of 4, or the prefix's one
        monkeypatch.setattr(ctx, "_undecided", lambda curve, baselines, tells=tells: not tells)
        rd = train(tiny_config(tmp_path / f"run{tells}", tiny_text_file, train=dict(max_iters=4, eval_iters=6)),
                   **QUIET)
        rec = [r for r in read_metrics(rd, "event") if r.get("event") == "context"][-1]
        assert rec["windows"] == windows and rec["tokens"] == windows * 16, rec


def test_a_curve_that_tells_is_not_read_again():
    from depthlab.analytics.context import _undecided

    base = {"bigram": {"nats": 2.5}, "unigram": {"nats": 3.3}, "one_char_floor": {"nats": 2.4}}
    used = {"context_gain": 0.9, "context_gain_se": 0.02, "loss_by_position": [3.0] + [2.1] * 15,
            "last_quarter_se": 0.02, "distinct_windows": 40, "position_se": [0.03] * 16}
    assert not _undecided(used, base)
    noisy = {**used, "context_gain": 0.05, "context_gain_se": 0.2, "loss_by_position": [2.55] + [2.5] * 15,
             "last_quarter_se": 0.2}
    assert _undecided(noisy, base)
    assert not _undecided({**noisy, "context_gain": float("nan")}, base)
