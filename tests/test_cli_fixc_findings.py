"""New-user findings (fixC): notices off stdout, suggested commands that run, inline -c checked as a file is,
flags named as typed."""

import json

import pytest
import yaml

from depthlab.cli import main


def print_config(capsys, *argv):
    """(stdout, stderr) of ``depthlab ARGV`` with ``--print_config`` in it (which exits 0)."""
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    assert e.value.code == 0
    cap = capsys.readouterr()
    return cap.out, cap.err


# ------------------------------------------------------------------------- 1: --print_config's stdout is the YAML
def test_preset_target_notice_goes_to_stderr_so_print_config_round_trips(tmp_path, capsys):
    other = tmp_path / "other.txt"
    other.write_text("hello world this is text. " * 400)
    for extra in (["--data.tokenizer", "bpe"], ["--data.path", str(other)]):
        out, err = print_config(capsys, "train", "--preset", "fast-cpu", *extra, "--print_config")
        assert "target is dropped" not in out
        assert err.startswith("depthlab: preset fast-cpu: its train.target_val_loss 1.88") and err.count("\n") == 1
        printed = yaml.safe_load(out)
        assert {"data", "model", "train"} <= set(printed) and printed["train"]["target_val_loss"] == 0
        my = tmp_path / "my.yaml"
        my.write_text(out)
        again, err = print_config(capsys, "train", "-c", str(my), "--print_config")
        assert err == "" and yaml.safe_load(again) == printed


# ------------------------------------------------------------------------- 2: a refusal's command runs as printed
@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_refused_resume_advice_spells_null_as_the_parser_reads_it(tmp_path, bpe_file, capsys, monkeypatch):
    import shlex

    from conftest import assert_clean_error, run_cli, tiny_cli_args

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "bpe"
    rc, _, err = run_cli(capsys, "train", *tiny_cli_args(bpe_file, run, train__max_iters=2, model__block_size=64),
                         "--data.tokenizer", "bpe", "--data.vocab_size", "300")
    assert rc == 0, err
    # the run's own vocab_size, with the char tokenizer: the fix named is the flag that works (was "drop it")
    rc, _, err = run_cli(capsys, "train", "--resume", str(run), "--data.tokenizer", "char", "--train.max_iters", "3")
    assert_clean_error(rc, err, "data.vocab_size 300 applies to --data.tokenizer bpe only",
                       "set --data.vocab_size null or --data.tokenizer bpe", f"from {run / 'config.json'}")
    rc, _, err = run_cli(capsys, "train", "--resume", str(run), "--data.tokenizer", "char", "--data.vocab_size",
                         "null", "--train.max_iters", "3")
    assert_clean_error(rc, err, "cannot resume")
    command = err.split("so --init-from cannot reuse them): ")[1].strip()
    assert command == (f"depthlab train -c {run / 'config.json'} --data.tokenizer char --data.vocab_size null "
                       "--train.max_iters 3 --train.resume false --train.out_dir NEW_DIR")
    argv = shlex.split(command.replace("NEW_DIR", str(tmp_path / "new")))[1:]
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 0, err
    assert json.loads((tmp_path / "new" / "config.json").read_text())["data"]["vocab_size"] is None


# ------------------------------------------------------------------------- 3: inline -c is checked as a file is
@pytest.mark.parametrize("mapping, said", [
    ("{data: {path: 5}}", "data.path: expected a string or null, got 5"),
    ("{modle: {n_layer: 3}}", "unknown key(s) modle (did you mean model?): edit or remove it"),
    ("{model: {n_layr: 3}}", "unknown key(s) model.n_layr (did you mean model.n_layer?): edit or remove it"),
    ("{model: {n_layer: x}}", "model.n_layer: expected an integer, got 'x'"),
    ("{model: 3}", "section model: must hold fields ({model: {FIELD: VALUE}}), got 3"),
    ("{model: {position: }}", "model.position: expected one of learned, rope, got null (no value); give one, or "
                              "delete the key for the default (rope)"),
    ("{preset: fast-cpu}", "preset: fast-cpu: a preset is chosen on the command line, not in a config file (which "
                           "would train without it); delete the key and give --preset fast-cpu (or -c the preset's "
                           "own file first)"),
])
def test_inline_config_gets_the_checks_and_words_of_a_file(tmp_path, capsys, mapping, said):
    from conftest import cli_err

    assert cli_err(capsys, "train", "-c", mapping, "--print_config") == f"depthlab: error: -c {mapping}: {said}\n"
    f = tmp_path / "c.yaml"  # the same mistake in a file: the same words, the file named
    f.write_text(mapping)
    if "delete the key" not in said and "section model" not in said:  # (a file says how its lines hold one)
        assert cli_err(capsys, "train", "-c", str(f), "--print_config") == f"depthlab: error: {f}: {said}\n"


# ------------------------------------------------------------------------- 4: an option named as it was typed
def test_an_option_of_two_spellings_is_named_as_typed(tmp_path_factory, capsys):
    from conftest import TINY_TEXT, cli_err, trained_tiny_run

    run = str(trained_tiny_run(tmp_path_factory, "views", TINY_TEXT, steps=2))
    capsys.readouterr()  # the training's own lines
    for command in ("layers", "context"):
        for typed in ("--max-tokens", "--max_tokens"):
            assert cli_err(capsys, command, run, typed, "-1") == \
                f"depthlab: error: {typed} must be >= 0 (0 = every evaluation batch), got -1\n"
    assert cli_err(capsys, "layers", run, "--max-tokens=-1") == \
        "depthlab: error: --max-tokens must be >= 0 (0 = every evaluation batch), got -1\n"
    assert cli_err(capsys, "probe", "--probe-batch-size", "0") == \
        "depthlab: error: probe: --probe-batch-size must be at least 1, got 0\n"
    assert cli_err(capsys, "sample", run, "--top_k", "-1") == \
        "depthlab: error: --top_k must be an integer >= 0 (0 = off), got -1\n"
    assert cli_err(capsys, "sample", run, "--num_samples", "0") == \
        "depthlab: error: --num_samples must be >= 1, got 0\n"
    assert cli_err(capsys, "sample", run, "--max-new-tokens", "-1") == \
        "depthlab: error: --max-new-tokens must be >= 0, got -1\n"  # the check's own spelling, typed: unchanged
