"""TensorBoard HParams: each run writes its hyperparameters and final metrics into its own event files."""

import json

import pytest

from depthlab import analytics
from depthlab.analytics.hparams import BOOKKEEPING_FIELDS, HPARAM_METRICS, hparam_values

from conftest import QUIET, read_hparams, tiny_config


def test_hparam_values_all_scalars_or_chosen_fields():
    cfg = {"data": {"path": None, "cache_dir": "/c"}, "model": {"n_layer": 4, "variant": "plain", "bias": True},
           "train": {"learning_rate": 0.01, "out_dir": "/x", "resume": False, "progress": True, "extra": [1, 2]}}
    assert hparam_values(cfg) == {"model.n_layer": 4, "model.variant": "plain", "model.bias": True,
                                  "train.learning_rate": 0.01}
    assert set(BOOKKEEPING_FIELDS) >= {"train.out_dir", "data.cache_dir"}
    assert hparam_values(cfg, ["model.n_layer", "train.learning_rate", "model.missing"]) == {
        "model.n_layer": 4, "train.learning_rate": 0.01}


@pytest.mark.parametrize("fields", [None, ["model.n_layer", "model.variant"]])
def test_run_writes_hparams_into_its_own_event_files(tiny_text_file, tmp_path, fields):
    out = tmp_path / "run"
    cfg = tiny_config(out, tiny_text_file, model={"variant": "postnorm"}, train={"tensorboard": True})
    analytics.train(cfg, hparam_fields=fields, **QUIET)
    summary = json.loads((out / "summary.json").read_text())
    assert [p.name for p in (out / "tb").iterdir() if p.is_dir()] == []  # no folder per add_hparams call
    hp, metrics, scalars = read_hparams(out / "tb")
    if fields is None:  # a single run: every scalar field of its config
        assert hp["model.n_layer"] == 2 and hp["model.variant"] == "postnorm" and hp["model.n_embd"] == 32
        assert hp["train.learning_rate"] == pytest.approx(3e-3) and hp["train.seed"] == cfg.train.seed
        assert "train.out_dir" not in hp and "data.path" in hp
    else:  # a sweep's run: the fields the sweep varies
        assert hp == {"model.n_layer": 2, "model.variant": "postnorm"}
    assert metrics == sorted(HPARAM_METRICS)
    for tag, key in HPARAM_METRICS.items():
        ((step, value),) = scalars[tag]
        assert step == summary["final_step"] == 20
        assert value == pytest.approx(summary[key], rel=1e-6)
    assert summary["best_val_bpc"] == pytest.approx(summary["best_val_loss"] / 0.6931471805599453)


def test_tensorboard_off_no_hparams_except_in_a_sweep(tiny_text_file, tmp_path):
    out = tmp_path / "run"
    analytics.train(tiny_config(out, tiny_text_file), **QUIET)  # tiny_config: tensorboard off
    assert not (out / "tb").exists()
    out2 = tmp_path / "swept"  # a sweep's run (fields given): the HParams alone, in the run's own tb/
    analytics.train(tiny_config(out2, tiny_text_file, train={"learning_rate": 0.002}),
                    hparam_fields=["train.learning_rate"], **QUIET)
    hp, metrics, scalars = read_hparams(out2 / "tb")
    assert hp == {"train.learning_rate": pytest.approx(0.002)} and len(list((out2 / "tb").iterdir())) == 1
    assert sorted(scalars) == sorted(HPARAM_METRICS)
