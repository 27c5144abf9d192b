"""One grammar for every command, and a command line that means what it says (issues 9 and 14)."""

import json

import pytest

from depthlab.cli import COMMANDS, files_first, main


def _err(capsys, *argv):
    rc = main(list(argv))
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("depthlab: error:") and len(err.strip().splitlines()) == 1, err
    return err


def _print_config(capsys, *argv):
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    assert e.value.code == 0
    return capsys.readouterr().out


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_shares_the_common_options(name):
    opts = {s for a in COMMANDS[name].build()._actions for s in a.option_strings}
    assert {"-c", "--config", "--print_config", "--debug"} <= opts


@pytest.mark.parametrize("name", ["sample", "probe", "diagnose", "report", "sweep"])
def test_every_computing_command_takes_threads(name):
    assert "--threads" in {s for a in COMMANDS[name].build()._actions for s in a.option_strings}


@pytest.mark.parametrize("name", ["sample", "diagnose", "report"])
def test_run_dir_commands_name_it_the_same(name):
    assert "run_dir" in {a.dest for a in COMMANDS[name].build()._actions}


def test_flag_before_preset_or_config_file_still_wins(capsys, tmp_path):
    before = _print_config(capsys, "train", "--train.max_iters", "50", "--preset", "fast-cpu", "--print_config")
    after = _print_config(capsys, "train", "--preset", "fast-cpu", "--train.max_iters", "50", "--print_config")
    assert "max_iters: 50" in before and before == after
    f = tmp_path / "c.yaml"
    f.write_text("model:\n  n_layer: 3\n")
    out = _print_config(capsys, "train", "--print_config", "--model.n_layer", "7", "-c", str(f))
    assert "n_layer: 7" in out


def test_files_first_keeps_file_order_and_puts_print_config_last():
    argv = ["--a.b", "1", "--print_config", "-c", "x.yaml", "--config=y.yaml", "--c.d", "2"]
    assert files_first(argv) == ["-c", "x.yaml", "--config=y.yaml", "--a.b", "1", "--c.d", "2", "--print_config"]


def test_unknown_keys_are_all_listed_with_suggestions(capsys, tmp_path):
    err = _err(capsys, "train", "--model.n_layers", "3", "--train.max_iterz", "4")
    assert "--model.n_layers (did you mean --model.n_layer?)" in err
    assert "--train.max_iterz (did you mean --train.max_iters?)" in err
    f = tmp_path / "flat.yaml"
    f.write_text("n_layer: 3\nmodel:\n  n_heads: 2\n")
    err = _err(capsys, "train", "-c", str(f))
    assert "n_layer belongs under model:" in err and "model.n_heads (did you mean model.n_head?)" in err


def test_fields_the_command_does_not_use_are_refused(capsys):
    assert "model.vocab_size is set from the corpus" in _err(capsys, "train", "--model.vocab_size", "10")
    err = _err(capsys, "probe", "--train.max_iters", "5")
    assert "--train.max_iters has no effect" in err


def test_sample_options_have_dashed_aliases(tmp_path, capsys):
    err = _err(capsys, "sample", str(tmp_path / "none"), "--max-new-tokens", "5", "--top-k", "3")
    assert "not found" in err  # parsed fine; the run directory is what is missing


def test_command_line_sets_passive_openmp_before_torch_loads():
    import subprocess
    import sys

    code = ("import os, sys; import depthlab.cli as c; assert 'torch' not in sys.modules; "
            "c.main(['presets']); import torch; print(os.environ['OMP_WAIT_POLICY'])")
    env = {k: v for k, v in __import__("os").environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "PASSIVE"
    env["OMP_WAIT_POLICY"] = "ACTIVE"  # the user's choice wins
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "ACTIVE"


def test_sample_says_which_checkpoint_it_loaded(tmp_path, tiny_text_file, capsys):
    from conftest import tiny_cli_args

    out = tmp_path / "r"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=10, train__eval_interval=5)]) == 0
    val = {json.loads(line)["step"]: json.loads(line)["val_loss"]
           for line in (out / "metrics.jsonl").read_text().splitlines() if '"val_loss"' in line}
    best = json.loads((out / "checkpoints" / "manifest.json").read_text())["best"]["step"]
    capsys.readouterr()
    assert main(["sample", str(out), "--max_new_tokens", "5"]) == 0
    captured = capsys.readouterr()
    assert f"sampling from best.safetensors (step {best}, val loss {val[best]:.4f} nats)" in captured.err
    assert "sampling from" not in captured.out  # stdout stays the text alone


def test_suggestions_know_other_tools_names_and_missing_sections(capsys):
    err = _err(capsys, "train", "--train.lr", "1e-3", "--n_layer", "3")
    assert "--train.lr (did you mean --train.learning_rate?)" in err
    assert "--n_layer (did you mean --model.n_layer?)" in err


@pytest.mark.parametrize("argv,msg", [
    (["train", "--train.fit_to_time", "maybe"], "--train.fit_to_time: expected true or false, got 'maybe'"),
    (["train", "--train.dtype", "float16"], "--train.dtype: expected one of float32, bfloat16, auto, got 'float16'"),
    (["train", "--train.learning_rate", "nan"], "--train.learning_rate: expected a finite number, got 'nan'"),
    (["train", "--model.n_layer", "two"], "--model.n_layer: expected an integer, got 'two'"),
    (["train", "--train.compile", "maybe"], "--train.compile: expected true or false or auto, got 'maybe'"),
    # the option as the user spelt it (a new user's report: --max-new-tokens was named --max_new_tokens)
    (["sample", "nowhere", "--max-new-tokens", "abc"], "--max-new-tokens: expected an integer, got 'abc'"),
    (["sample", "nowhere", "--max-new-tokens=abc"], "--max-new-tokens: expected an integer, got 'abc'"),
    (["sample", "nowhere", "--max_new_tokens", "abc"], "--max_new_tokens: expected an integer, got 'abc'"),
    # the value as typed (the parser turned 1e3 into 1000.0), and an empty one (was jsonargparse's raw text)
    (["sample", "nowhere", "--max-new-tokens", "1e3"], "--max-new-tokens: expected an integer, got '1e3'"),
    (["train", "--train.max_iters", "1e3"], "--train.max_iters: expected an integer, got '1e3'"),
    (["train", "--train.max_iters", ""], "--train.max_iters: expected an integer, got ''"),
    (["train", "--train.compile="], "--train.compile: expected true or false or auto, got ''"),
    # argparse takes -1e-3 for an option: say how to write it (was "expected one argument")
    (["train", "--train.learning_rate", "-1e-3"],
     "--train.learning_rate: the value -1e-3 was read as an option; write --train.learning_rate=-1e-3"),
])
def test_type_errors_say_what_to_type(capsys, argv, msg):
    from depthlab.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and "<class" not in err and err.count("\n") == 1


def test_a_negative_number_is_quoted_as_typed(capsys):
    from depthlab.cli import main

    assert main(["train", "--train.max_time", "-3"]) == 2
    assert capsys.readouterr().err.strip().endswith("train.max_time must be a non-negative number, got -3")


@pytest.mark.parametrize("text,msg", [
    ("train: 5\n", "section train: must hold fields"), ("model:\n", "section model: must hold fields"),
    ("model: [1\n", "is not valid YAML at line 2"), ("- 1\n- 2\n", "must be a mapping with sections"),
])
def test_bad_config_files_are_named(tmp_path, capsys, text, msg):
    from depthlab.cli import main

    f = tmp_path / "c.yaml"
    f.write_text(text)
    assert main(["train", "-c", str(f), "--train.out_dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert msg in err and str(f) in err and not (tmp_path / "r").exists()


@pytest.mark.parametrize("argv,msg", [
    (["train", "--train.out_dir", ""], "train: --train.out_dir: the path is empty"),
    (["train", "--train.out_dir="], "train: --train.out_dir: the path is empty"),
    (["train", "--resume", ""], "train: --resume: the path is empty"),
    (["report", "somewhere", "--out="], "report: --out: the path is empty"),
    (["sample", ""], "sample: argument 1 is empty"),
    (["export", "somewhere", ""], "export: argument 2 is empty"),
    # devices and thread counts torch itself would reject with a RuntimeError / overflow (exit 1 before)
    (["sample", "somewhere", "--device", "tpu"], "--device must be auto, cpu, cuda, cuda:N or mps; got 'tpu'"),
    (["sample", "somewhere", "--device", "cuda:x"], "--device must be auto, cpu, cuda, cuda:N or mps; got 'cuda:x'"),
    (["diagnose", "somewhere", "--threads", "99999999999999999999"], "--threads must be between 0 and 4096"),
    (["train", "--train.threads", "99999999999999999999"], "train.threads must be at most 4096"),
    # argparse's / jsonargparse's own wording, reworded
    (["train", "--overwrite=yes"], "train: --overwrite is a switch and takes no value (got 'yes')"),
    (["sample", "somewhere", "--no-kv-cache=maybe"], "--no-kv-cache is a switch and takes no value (got 'maybe')"),
    (["sample", "somewhere", "--no_kv_cache", "yes"], "--no_kv_cache is a switch and takes no value, so 'yes' was"),
    # the same word after an option that takes a value is not the switch's (it named --prompt once)
    (["sample", "somewhere", "--prompt", "yes", "--no_kv_cache", "yes"], "--no_kv_cache is a switch"),
    # a shortened option is not silently taken for the one it starts (argparse's allow_abbrev)
    (["sample", "somewhere", "--max_new_token", "10"], "unrecognized arguments: --max_new_token 10 (did you mean "
                                                       "--max_new_tokens?)"),
    (["diagnose", "somewhere", "-c", "missing.yaml"], "/missing.yaml: file not found"),
])
def test_empty_paths_bad_devices_and_thread_counts_are_refused(tmp_path, monkeypatch, capsys, argv, msg):
    from depthlab.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists()  # nothing trained into the default folder
