"""A config value depthlab refuses is said in one line naming where it came from: the config file (a ``-c``
file, a preset, a ``--model FILE``, a resumed run's config.json) or the flag as typed, with the key, the value
and the fix; a null in a file is no value at all; non-finite numbers are refused by the config itself."""

import dataclasses
import json
import math

import pytest

from depthlab.cli import COMMANDS, main
from depthlab.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from depthlab.errors import DepthlabError, NonFiniteError

from conftest import cli_err, cli_print_config


def _file(tmp_path, text, name="my.yaml"):
    f = tmp_path / name
    f.write_text(text)
    return f


@pytest.mark.parametrize("text, said", [
    # was: "model.position must be one of learned, rope; got None", no file named
    ("model:\n  position: null\n", "model.position: expected one of learned, rope, got null (no value); give one, "
                                   "or delete the line for the default (rope)"),
    ("train:\n  batch_size:\n", "train.batch_size: expected an integer, got null (no value); give one, or delete "
                                "the line for the default (16)"),
    # was: accepted, a model without biases made of a null
    ("model:\n  bias: ~\n", "model.bias: expected true or false, got null (no value); give one, or delete the line "
                            "for the default (false)"),
    # was: "bad value in model: float() argument must be a string or a real number, not 'NoneType'"
    ("model:\n  dropout: null\n", "model.dropout: expected a finite number, got null (no value); give one, or delete "
                                  "the line for the default (0.0)"),
    ("data:\n  val_fraction: null\n", "data.val_fraction: expected a finite number, got null (no value); give one, or "
                                      "delete the line for the default (0.1)"),
])
def test_a_null_in_a_config_file_names_the_file_the_key_and_the_default(tmp_path, capsys, text, said):
    f = _file(tmp_path, text)
    assert cli_err(capsys, "train", "-c", str(f), "--print_config") == f"depthlab: error: {f}: {said}\n"


def test_a_null_where_the_field_takes_one_is_still_taken(tmp_path, capsys):
    f = _file(tmp_path, "train:\n  out_dir: null\ndata:\n  vocab_size: null\n")
    out = cli_print_config(capsys, "train", "-c", str(f), "--print_config")
    assert "out_dir: null" in out and "vocab_size: null" in out


@pytest.mark.parametrize("text, said", [
    ("model:\n  n_embd: 30\n  n_head: 4\n", "model.n_embd (30) must be divisible by model.n_head (4); try n_head 3"),
    ("model:\n  n_embd: 36\n  n_head: 4\n", "model.position rope rotates each head's vector in pairs of coordinates, "
                                            "so the head size n_embd / n_head must be even (it is 9); change "
                                            "model.n_embd or model.n_head, or use --model.position learned"),
    ("model:\n  n_layer: -1\n", "model.n_layer must be a positive integer, got -1"),
    ("model:\n  dropout: 1.5\n", "model.dropout must be in [0, 1), got 1.5"),
    ("train:\n  learning_rate: 0\n", "train.learning_rate must be a number > 0, got 0"),
    ("train:\n  warmup_iters: 100\n  lr_decay_iters: 50\n", "train.lr_decay_iters (50) is before the end of "
                                                          "train.warmup_iters (100)"),
])
def test_a_value_a_config_file_gives_is_refused_naming_the_file(tmp_path, capsys, text, said):
    f = _file(tmp_path, text)
    err = cli_err(capsys, "train", "-c", str(f), "--print_config")
    assert err.startswith(f"depthlab: error: {f}: {said}"), err


@pytest.mark.parametrize("argv, said", [
    (["--model.n_layer", "-1"], "--model.n_layer must be a positive integer, got -1"),
    (["--train.learning_rate=-1"], "--train.learning_rate must be a number > 0, got -1"),
    (["--train.learning_rate", "0"], "--train.learning_rate must be a number > 0, got 0"),
    (["--model.n_head", "3"], "model.n_embd (128) must be divisible by --model.n_head (3); try n_head 2"),
    (["--train.min_lr", "1"], "--train.min_lr (1.0) must not exceed train.learning_rate (0.003): lower "
                              "--train.min_lr too (e.g. to 0.0001, a thirtieth, as the default recipe's ratio)"),
])
def test_a_value_a_flag_gives_is_refused_naming_the_flag(capsys, argv, said):
    assert cli_err(capsys, "train", *argv, "--print_config") == f"depthlab: error: {said}\n"


def test_a_flag_against_a_files_value_names_both(tmp_path, capsys):
    f = _file(tmp_path, "model:\n  n_embd: 30\n")
    assert cli_err(capsys, "train", "-c", str(f), "--model.n_head", "4", "--print_config") == (
        f"depthlab: error: model.n_embd (30) must be divisible by --model.n_head (4); try n_head 3 (model.n_embd "
        f"from {f})\n")
    assert cli_err(capsys, "train", "--preset", "fast-cpu", "--model.n_head", "7", "--print_config") == (
        "depthlab: error: model.n_embd (128) must be divisible by --model.n_head (7); try n_head 4 (model.n_embd "
        "from preset fast-cpu)\n")
    g = _file(tmp_path, "model:\n  n_head: 4\n", "heads.yaml")
    assert cli_err(capsys, "train", "-c", str(f), "-c", str(g), "--print_config") == (
        f"depthlab: error: {f} (model.n_embd), {g} (model.n_head): model.n_embd (30) must be divisible by "
        "model.n_head (4); try n_head 3\n")


def test_a_section_file_and_an_inline_config_are_named_as_given(tmp_path, capsys):
    f = _file(tmp_path, "n_layer: 0\n", "model.yaml")  # --model FILE: its fields become flags the user never typed
    assert cli_err(capsys, "train", "--model", str(f), "--print_config") == \
        f"depthlab: error: {f}: model.n_layer must be a positive integer, got 0\n"
    assert cli_err(capsys, "train", "-c", "{model: {n_layer: -2}}", "--print_config") == \
        "depthlab: error: -c {model: {n_layer: -2}}: model.n_layer must be a positive integer, got -2\n"


def _run_dir(tmp_path, **edits):
    """A run folder holding only a config.json (the default config with ``edits``, "model.n_layer": 0): enough for
    ``--resume`` to read it and refuse it before any checkpoint is read."""
    run = tmp_path / "run"
    run.mkdir()
    d = RunConfig().to_dict()
    for key, value in edits.items():
        sec, name = key.split("__")
        d[sec][name] = value
    (run / "config.json").write_text(json.dumps(d))
    return run


def test_a_bad_value_in_a_resumed_runs_config_json_names_that_file_not_a_flag(tmp_path, capsys):
    run = _run_dir(tmp_path, model__n_layer=0)
    err = cli_err(capsys, "train", "--resume", str(run))
    assert err.startswith(f"depthlab: error: {run / 'config.json'}: model.n_layer must be a positive integer, got 0 "
                          f"(--resume reads {run / 'config.json'}"), err
    assert "--model.n_layer" not in err


def test_a_null_in_a_resumed_runs_config_json_asks_for_the_runs_value(tmp_path, capsys):
    run = _run_dir(tmp_path, model__position=None)
    assert cli_err(capsys, "train", "--resume", str(run)) == (
        f"depthlab: error: {run / 'config.json'}: model.position: expected one of learned, rope, got null (no value); "
        "put back the value the run was trained with\n")


def test_a_bad_flag_on_a_resume_names_the_flag_and_config_json_as_the_other_value(tmp_path, capsys):
    run = _run_dir(tmp_path)
    assert cli_err(capsys, "train", "--resume", str(run), "--model.n_head", "3") == (
        f"depthlab: error: model.n_embd (128) must be divisible by --model.n_head (3); try n_head 2 (model.n_embd from "
        f"{run / 'config.json'})\n")


@pytest.mark.parametrize("field, value, said", [
    ("learning_rate", math.inf, "train.learning_rate must be a finite number, got inf"),
    ("muon_lr", math.inf, "train.muon_lr must be a finite number, got inf"),
    ("weight_decay", math.inf, "train.weight_decay must be a finite number, got inf"),
    ("grad_clip", math.inf, "train.grad_clip must be a finite number, got inf (0 = no clipping)"),
    ("max_time", math.inf, "train.max_time must be a finite number, got inf (0 = no time limit)"),
    ("target_val_loss", math.inf, "train.target_val_loss must be a finite number, got inf (0 = no target)"),
    ("learning_rate", math.nan, "train.learning_rate must be a number > 0, got nan"),
    ("beta2", None, "train.beta2 must be in [0, 1), got None"),
    ("tensorboard", None, "train.tensorboard must be true or false, got None"),
])
def test_the_train_section_refuses_non_finite_and_missing_numbers(field, value, said):
    # was: inf accepted for each (a sweep or a notebook could train with lr inf), None a TypeError
    with pytest.raises(DepthlabError) as e:
        TrainConfig(**{field: value})
    assert str(e.value) == said and getattr(e.value, "fields", None) == (f"train.{field}",)


def test_a_huge_finite_learning_rate_is_the_users_choice():
    assert TrainConfig(learning_rate=1e308).learning_rate == 1e308


@pytest.mark.parametrize("make, said", [
    (lambda: ModelConfig(dropout=None), "model.dropout must be in [0, 1), got None"),
    (lambda: ModelConfig(dropout="x"), "model.dropout must be in [0, 1), got 'x'"),
    (lambda: ModelConfig(bias=None), "model.bias must be true or false, got None"),
    (lambda: DataConfig(val_fraction=None), "data.val_fraction must be in (0, 0.5], got None"),
    (lambda: RunConfig.from_dict({"model": {"dropout": None}}), "model.dropout must be in [0, 1), got None"),
])
def test_a_missing_number_or_switch_names_its_field(make, said):
    # was: TypeError / ValueError from float(), said as "bad value in model: float() argument must be ..."
    with pytest.raises(DepthlabError) as e:
        make()
    assert str(e.value) == said


def test_a_non_finite_stop_names_the_flags_the_user_typed(monkeypatch, capsys):
    def stop(ns):
        raise NonFiniteError("non-finite loss at step 2 (loss nan, lr inf); lower train.learning_rate or raise "
                             "train.warmup_iters; checkpoints untouched")

    monkeypatch.setitem(COMMANDS, "train", dataclasses.replace(COMMANDS["train"], run=stop))
    assert main(["train", "--train.learning_rate", "1e308"]) == 3
    assert capsys.readouterr().err == ("depthlab: error: non-finite loss at step 2 (loss nan, lr inf); lower "
                                       "--train.learning_rate or raise train.warmup_iters; checkpoints untouched\n")


def test_as_flag_names_whole_field_names_only():
    from depthlab.cli_args import as_flag, typed_flags

    msg = "model.n_embd (128) must be divisible by model.n_head (3); use --model.n_head 2, not model.n_head_x"
    assert as_flag(msg, "model.n_head") == ("model.n_embd (128) must be divisible by --model.n_head (3); use "
                                            "--model.n_head 2, not model.n_head_x")
    assert typed_flags("lower train.learning_rate or raise train.warmup_iters", ["--train.warmup_iters=9"]) == \
        "lower train.learning_rate or raise --train.warmup_iters"


@pytest.mark.slow
def test_a_huge_learning_rate_trains_and_stops_at_the_first_non_finite_loss_naming_the_flag(tmp_path, capsys,
                                                                                             tiny_text_file):
    rc = main(["train", "--data.path", str(tiny_text_file), "--train.learning_rate", "1e308", "--train.max_iters", "3",
               "--train.out_dir", str(tmp_path / "r"), "--model.n_layer", "1", "--model.n_embd", "16",
               "--model.n_head", "2", "--model.block_size", "16", "--train.batch_size", "2", "--train.eval_iters", "1",
               "--train.max_time", "0", "--train.tensorboard", "false", "--train.progress", "false"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 3 and err.startswith("depthlab: error: non-finite ") and \
        "lower --train.learning_rate (AdamW: embeddings, head, gains; now 1e+308) or train.muon_lr (Muon: the " \
        "blocks' matrices; now 0.01), or raise train.warmup_iters" in err, err


@pytest.mark.parametrize("text, said", [
    # was: "train: --model.n_layer: expected an integer, got 'x'", a flag the user never typed
    ("n_layer: x\n", "model.n_layer: expected an integer, got 'x'"),
    ("position:\n", "model.position: expected one of learned, rope, got null (no value); give one, or delete the line "
                    "for the default (rope)"),
    ("n_layrs: 3\n", "unknown key(s) model.n_layrs (did you mean model.n_layer?): edit or remove it"),
])
def test_a_section_files_bad_field_names_the_file_not_a_flag(tmp_path, capsys, text, said):
    f = _file(tmp_path, text, "model.yaml")
    assert cli_err(capsys, "train", "--model", str(f), "--print_config") == f"depthlab: error: {f}: {said}\n"


def test_a_sweeps_config_file_applies_to_its_runs(tmp_path, capsys):
    """``depthlab sweep -c FILE``: the file's data/model/train fields were read by the parser and then left out of
    every run (the runs trained the defaults); they are the runs' base, under the flags."""
    from depthlab.cli import _explicit_overrides

    f = _file(tmp_path, "workers: 1\nmodel:\n  n_embd: 32\n  n_head: 2\ntrain:\n  max_iters: 7\n")
    assert _explicit_overrides(["--config", str(f), "--model.n_embd", "64", "--grid", "model.n_layer=1,2"]) == \
        {"model.n_embd": 64, "model.n_head": 2, "train.max_iters": 7}
    bad = _file(tmp_path, "model:\n  n_embd: 30\n  n_head: 4\n", "bad.yaml")
    err = cli_err(capsys, "sweep", "-c", str(bad), "--grid", "model.n_layer=1,2", "--out-dir", str(tmp_path / "sw"),
                  "--dry-run")
    assert "model.n_embd (30) must be divisible by model.n_head (4)" in err, err


def test_an_empty_config_path_is_not_offered_a_default(capsys):
    assert cli_err(capsys, "train", "--config=") == \
        "depthlab: error: train: --config: the path is empty; give a path, or drop --config\n"
