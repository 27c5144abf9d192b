"""TensorBoard HParams: each run writes its hyperparameters and final metrics into its own event files."""

import json

import pytest

from depthlab import analytics
from depthlab.analytics.hparams import BOOKKEEPING_FIELDS, HPARAM_METRICS, hparam_values

from conftest import QUIET, read_hparams, tiny_cli_args, tiny_config


def test_hparam_values_every_field_with_the_type_its_declaration_gives():
    cfg = {"data": {"path": None, "cache_dir": "/c"}, "model": {"n_layer": 4, "variant": "plain", "bias": True},
           "train": {"learning_rate": 0.01, "out_dir": "/x", "resume": False, "progress": True, "compile": False}}
    hp = hparam_values(cfg)
    from depthlab.config import SECTIONS

    every = {f"{s}.{f}" for s, k in SECTIONS for f in k.__dataclass_fields__} - set(BOOKKEEPING_FIELDS)
    assert set(hp) == every  # fields a config lacks take their defaults: every run names every field
    assert hp["model.n_layer"] == 4.0 and isinstance(hp["model.n_layer"], float)
    assert hp["model.variant"] == "plain" and hp["model.bias"] is True and hp["train.learning_rate"] == 0.01
    assert hp["train.compile"] == "false" and hparam_values({})["train.compile"] == "auto"  # one type: str
    assert hp["data.path"] == "none" and hp["data.vocab_size"] == "none" and hp["train.max_iters"] == 5000.0
    assert set(BOOKKEEPING_FIELDS) >= {"train.out_dir", "data.cache_dir"}
    assert hparam_values(cfg, ["model.n_layer", "train.learning_rate", "model.missing"]) == {
        "model.n_layer": 4.0, "train.learning_rate": 0.01}
    assert hparam_values({"model": {"source": "m.py:M", "init": {"b": 1, "a": 2}}})["model.init"] == '{"a": 2, "b": 1}'


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


# ---------------------------------------------------------------- issue 23: HParams (cases 5-7), init-from (11)
def _sessions(tb_dir):
    """Every HParams session start in a run's event files: [(values, kinds)], file order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    out = []
    for f in sorted(tb_dir.glob("events.out.tfevents.*")):
        ea = EventAccumulator(str(f), size_guidance={"tensors": 0})
        ea.Reload()
        for content in ea.PluginTagToContent("hparams").values():
            d = plugin_data_pb2.HParamsPluginData.FromString(content)
            if d.HasField("session_start_info"):
                hp = d.session_start_info.hparams
                out.append(({k: getattr(v, v.WhichOneof("kind")) for k, v in hp.items()},
                            {k: v.WhichOneof("kind") for k, v in hp.items()}))
    return out


@pytest.mark.slow
def test_hparams_one_type_per_field_every_field_and_the_resumed_values(tmp_path, tiny_text_file):
    from depthlab.cli import main

    base = tiny_cli_args(tiny_text_file, None, train__max_iters=10, train__eval_interval=10,
                         train__tensorboard="true")
    runs = {"a": [], "b": ["--train.compile", "false", "--data.tokenizer", "bpe", "--data.vocab_size", "300"]}
    for name, extra in runs.items():
        out = [a if a != "None" else str(tmp_path / name) for a in base]
        assert main(["train", *out, *extra]) == 0
    assert main(["train", "--resume", str(tmp_path / "a"), "--train.max_iters", "20", "--train.learning_rate",
                 "1e-3"]) == 0
    a, b = _sessions(tmp_path / "a" / "tb"), _sessions(tmp_path / "b" / "tb")
    assert len(a) == 2 and len(b) == 1  # one per event file: the resumed run has two sessions' files
    assert all(v["train.max_iters"] == 20 and v["train.learning_rate"] == pytest.approx(1e-3) for v, _ in a)
    assert set(a[0][0]) == set(b[0][0])  # the same fields, data.vocab_size ("none" / "300") included
    assert a[0][1] == b[0][1]  # each with one type: compile "auto" and "false" are both strings
    assert a[0][0]["train.compile"] == "auto" and b[0][0]["train.compile"] == "false"
    assert a[0][0]["data.vocab_size"] == "none" and b[0][0]["data.vocab_size"] == "300"
    assert a[0][1]["model.n_layer"] == "number_value" and a[0][1]["train.compile"] == "string_value"
