"""A new user's findings (nu83): --init-from or --resume given twice with different runs took the model's shape
(or the run's config) from the first and the weights (or the resume flag) from the last, so `--init-from A
--init-from B` refused with "drop those --model flags" when none were typed, and `--resume A --resume B`
silently continued A; both are now refused in one line."""

import os

import pytest

from conftest import cli_err, run_cli, tiny_cli_args


@pytest.fixture
def two_runs(tmp_path, tiny_text_file, capsys):
    runs = []
    for name, width in (("a", 32), ("b", 16)):
        run = tmp_path / name
        rc, _, err = run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, run, model__n_embd=width,
                                                              train__max_iters=2, train__eval_interval=2))
        assert rc == 0, err
        runs.append(run)
    return runs


@pytest.mark.parametrize("flag", ["--init-from", "--init_from"])
def test_init_from_given_twice_is_refused_in_one_line(tmp_path, two_runs, capsys, flag):
    a, b = two_runs
    new = tmp_path / "new"
    err = cli_err(capsys, "train", "--init-from", str(a), flag, str(b), "--train.out_dir", str(new))
    assert err == (f"depthlab: error: --init-from is given 2 times ({a}, {b}); give it once, with the one run "
                   "directory to use\n"), err
    assert not new.exists()


def test_resume_given_twice_is_refused_in_one_line(two_runs, capsys):
    a, b = two_runs
    before = [(p / "metrics.jsonl").read_text() for p in (a, b)]
    err = cli_err(capsys, "train", "--resume", str(a), "--resume", str(b), "--train.max_iters", "4")
    assert err == (f"depthlab: error: --resume is given 2 times ({a}, {b}); give it once, with the one run "
                   "directory to use\n"), err
    assert [(p / "metrics.jsonl").read_text() for p in (a, b)] == before


def test_probe_out_with_another_extension_says_the_fix(tmp_path, capsys):
    # was: "probe: --out out.txt must be a .png file name", no fix
    out = tmp_path / "out.txt"
    err = cli_err(capsys, "probe", "--model.n_layer", "1", "--model.n_embd", "32", "--model.n_head", "2",
                  "--out", str(out))
    assert err == (f"depthlab: error: probe: --out {out} must be a .png file name; give one such as "
                   f"{tmp_path / 'out.png'}, or a folder\n"), err
    assert not out.exists() and not (tmp_path / "out.png").exists()


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_resumed_runs_config_given_with_c_for_a_new_out_dir_says_train_resume_is_true(two_runs, tmp_path, capsys):
    # a resumed run's config.json says train.resume: true; `-c RUN/config.json --train.out_dir NEW` was refused
    # with "cannot resume: run directory NEW not found; give the out_dir of a depthlab train run" though the
    # user typed no --resume, and without the fix (--train.resume false)
    a, _ = two_runs
    rc, _, err = run_cli(capsys, "train", "--resume", str(a), "--train.max_iters", "3")
    assert rc == 0, err
    new = tmp_path / "new"
    err = cli_err(capsys, "train", "-c", str(a / "config.json"), "--train.out_dir", str(new))
    assert err == (f"depthlab: error: cannot resume: run directory {new} not found; give the out_dir of a depthlab "
                   f"train run, or pass --train.resume false to start a new run in {new} (train.resume is true, "
                   "e.g. in a run's config.json given with -c)\n"), err
    assert not new.exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_a_pipe_as_data_path_is_not_called_empty(tmp_path, capsys):
    # was: "data.path FIFO is empty; give a file with some text" (also for /dev/zero): a device or pipe has size 0
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    run = tmp_path / "run"
    err = cli_err(capsys, "train", *tiny_cli_args(fifo, run))
    assert err == (f"depthlab: error: data.path {fifo} is not a regular file (a device, pipe or socket); give a text "
                   "file (a pipe's text can be saved to one first)\n"), err
    assert not run.exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_a_pipe_as_config_file_or_model_file_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    # was: -c FIFO waited for a writer forever (-c /dev/zero read until memory ran out); check FIFO.py:A said
    # "file FIFO.py not found in DIR; ... (DIR holds FIFO.py)"
    monkeypatch.chdir(tmp_path)
    os.mkfifo("c.yaml")
    os.mkfifo("m.py")
    err = cli_err(capsys, "check", "m.py:A")
    assert err == ("depthlab: error: check m.py:A: m.py is not a regular file (a device, pipe or socket); give the "
                   "model's .py file\n"), err
    err = cli_err(capsys, "train", "-c", "c.yaml")
    assert err == ("depthlab: error: config file c.yaml is not a regular file (a device, pipe or socket); give a "
                   "YAML file\n"), err


def test_coordcheck_refuses_an_axis_of_model_vocab_size(capsys):
    # was: measured the same model at every value (vocab_size comes from the corpus), identical rows, "-> stable"
    err = cli_err(capsys, "coordcheck", "--axis", "model.vocab_size=32,64")
    assert err == ("depthlab: error: --axis model.vocab_size: the vocabulary is set from the corpus's tokenizer, so "
                   "every value would measure the same model; vary another field, e.g. --axis "
                   "model.n_layer=2,4,8,16\n"), err
    err = cli_err(capsys, "coordcheck", "--axis", "model.nope=1,2")
    assert "model.vocab_size" not in err and "model.n_layer" in err, err


@pytest.mark.parametrize("field", ["train.keep_last", "train.batch_size", "train.eval_interval", "train.threads"])
def test_coordcheck_refuses_an_axis_of_a_train_field_it_never_reads(capsys, field):
    # was: --axis train.keep_last=1,2 measured the same model at both values, identical rows, "-> stable"
    err = cli_err(capsys, "coordcheck", "--axis", f"{field}=1,2")
    assert err.startswith(f"depthlab: error: --axis {field}: the coordinate check does not read it (each step "
                          "trains on its own batch of 4 windows;"), err
    assert err.endswith("so every value would measure the same model; vary another field, e.g. --axis "
                        "model.n_layer=2,4,8,16\n"), err
    err = cli_err(capsys, "coordcheck", "--axis", "model.nope=1,2")
    assert field not in err and "train.learning_rate" in err, err
