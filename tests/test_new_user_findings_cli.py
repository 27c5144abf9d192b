"""A new user's findings (round 53): layers and context measure the val split training used on a corpus so short
that training enlarged it; a misspelt config section, a grid value of the wrong type, a run path under a file,
--preset without a name, a model.source constructor's error line, a forward that takes fewer positions than
model.block_size, and 'token' (not 'character') on BPE runs each get one true line."""

import json

import pytest

from conftest import cli_err, run_cli, tiny_cli_args

from depthlab.analytics.baselines import run_baselines
from depthlab.analytics.context import open_run


def test_layers_and_context_use_the_val_split_training_enlarged(tmp_path, capsys):
    # was: train warned "the last 17 tokens are the validation split instead" and trained, then layers and context
    # refused: "the val split has 9 tokens, not more than model.block_size 16: no evaluation window fits"
    text = tmp_path / "one.txt"
    text.write_text(("abcdefghij" * 10)[:95] + "\n", encoding="utf-8")  # 96 characters: 10% is 9 val tokens
    run = tmp_path / "run"
    rc, _, err = run_cli(capsys, "train", *tiny_cli_args(text, run))
    assert rc == 0 and "the last 17 tokens are the validation split instead" in err, err
    for cmd in ("context", "layers"):
        rc, out, err = run_cli(capsys, cmd, str(run))
        assert rc == 0 and "no evaluation window fits" not in err, err
    w = open_run(run).windows
    assert w.batches[0][0].shape == (8, 16)  # windows of the 17-token split the run was evaluated on
    config = json.loads((run / "config.json").read_text())
    saved = json.loads((run / "baselines.json").read_text())
    again = run_baselines(config)  # recomputed (baselines.json lost) over the same 17 tokens
    assert again["bigram"]["nats"] == saved["bigram"]["nats"] and again["unigram"]["nats"] == saved["unigram"]["nats"]


def test_a_misspelt_section_in_a_config_file_is_suggested_without_a_leading_dot(tmp_path, capsys):
    # was: "bad.yaml: unknown key(s) modle (did you mean .model?): edit or remove it"
    bad = tmp_path / "bad.yaml"
    bad.write_text("modle:\n  n_layer: 2\n", encoding="utf-8")
    err = cli_err(capsys, "train", "-c", str(bad))
    assert err == f"depthlab: error: {bad}: unknown key(s) modle (did you mean model?): edit or remove it\n", err


def test_a_grid_value_a_field_does_not_take_says_what_it_takes_in_words(capsys):
    # was: "model.init: cannot use '[{n_layer:1}]' (expected Union)", an internal type name
    err = cli_err(capsys, "sweep", "--grid", "model.init=xavier")
    assert err == ("depthlab: error: model.init: cannot use 'xavier' (expected gpt2, torch or a JSON object "
                   'of keyword arguments for model.source such as {"n_layer": 2})\n'), err
    # a bracketed value is read as a JSON list of values (helper-55): broken JSON says so, with both forms
    err = cli_err(capsys, "sweep", "--grid", "model.init=[{n_layer:1}]")
    assert "[{n_layer:1}] is not valid JSON" in err and "a JSON list like model.init=[...]" in err, err
    err = cli_err(capsys, "sweep", "--grid", "train.compile=maybe")
    assert err == "depthlab: error: train.compile: cannot use 'maybe' (expected true, false or auto)\n", err


@pytest.mark.parametrize("command", ["diagnose", "layers", "context", "report"])
def test_a_run_path_that_is_a_file_or_under_one_says_so(tmp_path, capsys, command):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    err = cli_err(capsys, command, str(afile))
    if command == "report":  # report takes a sweep folder too
        assert err == (f"depthlab: error: report: {afile} is a file, not a run directory or a sweep folder; give the "
                       "out_dir of a depthlab train run or of a depthlab sweep\n")
    else:
        assert err == (f"depthlab: error: {afile} is a file, not a run directory; give the out_dir of a depthlab "
                       "train run\n")
    # was: "run directory .../afile/sub not found", not saying that afile is a file
    err = cli_err(capsys, command, str(afile / "sub"))
    assert err == (f"depthlab: error: run directory {afile / 'sub'} not found: {afile} is a file, not a folder; give "
                   "the out_dir of a depthlab train run\n"), err
    assert afile.read_text() == "mine"


@pytest.mark.parametrize("argv", [["--preset", "--train.out_dir", "X"], ["--preset"], ["--preset="]])
def test_a_preset_flag_without_a_name_says_it_needs_one_and_lists_them(tmp_path, capsys, monkeypatch, argv):
    # was: "unknown preset '--train.out_dir'; known presets: ..." (the next flag taken as the preset's name)
    monkeypatch.chdir(tmp_path)
    err = cli_err(capsys, "train", *argv)
    assert err == ("depthlab: error: --preset needs a name after it, one of default, fast-cpu, nanogpt-cpu, "
                   "nanogpt-gpu (`depthlab presets` describes them)\n"), err
    assert not (tmp_path / "X").exists()


def test_a_model_whose_constructor_fails_names_the_line_of_the_users_file(tmp_path, tiny_text_file, capsys):
    # was: "...: BadInit(vocab_size=...) failed: NameError: name 'undefined_name' is not defined", with no line
    (tmp_path / "base.py").write_text("import torch.nn as nn\n\n\nclass BadInit(nn.Module):\n"
                                      "    def __init__(self, vocab_size):\n        super().__init__()\n"
                                      "        undefined_name + 1\n", encoding="utf-8")
    src = f"{tmp_path / 'base.py'}:BadInit"
    run = tmp_path / "run"
    err = cli_err(capsys, "train", "--data.path", str(tiny_text_file), "--model.source", src, "--model.block_size",
                  "16", "--train.max_iters", "2", "--train.out_dir", str(run))
    assert err.startswith(f"depthlab: error: {src}: BadInit(vocab_size="), err
    assert err.endswith(") failed: NameError: name 'undefined_name' is not defined (at base.py:7: undefined_name + 1)"
                        "; the arguments fit its signature, so its own code raised this: fix that line\n"), err
    assert not run.exists()


def test_a_model_with_a_shorter_position_table_names_its_longest_length_and_the_fix(tmp_path, tiny_text_file, capsys):
    # was: "...: IndexError: index out of range in self; if the model has a fixed batch size or a context shorter
    # than model.block_size, make them match", not saying the length it takes (depthlab check does)
    (tmp_path / "base.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Good(nn.Module):\n"
        "    def __init__(self, vocab_size):\n        super().__init__()\n"
        "        self.tok, self.pos = nn.Embedding(vocab_size, 8), nn.Embedding(12, 8)\n"
        "        self.head = nn.Linear(8, vocab_size)\n\n"
        "    def forward(self, idx):\n        return self.head(self.tok(idx) + self.pos(torch.arange(idx.shape[1])))\n",
        encoding="utf-8")
    src = f"{tmp_path / 'base.py'}:Good"
    run = tmp_path / "run"
    err = cli_err(capsys, "train", "--data.path", str(tiny_text_file), "--model.source", src, "--model.block_size",
                  "16", "--train.batch_size", "4", "--train.max_iters", "2", "--train.out_dir", str(run))
    assert err == (f"depthlab: error: {src}: forward(idx) failed on idx of shape (4, 16) (train.batch_size, "
                   "model.block_size): IndexError: index out of range in self (at base.py:12: return "
                   "self.head(self.tok(idx) + self.pos(torch.arange(idx.shape[1])))); the model accepts at most T=12 "
                   "positions (it runs on (4, 12)): run with --model.block_size 12, or give the model a larger "
                   "position table (and mask)\n"), err
    assert not run.exists()
    rc, _, err = run_cli(capsys, "train", "--data.path", str(tiny_text_file), "--model.source", src,  # the fix works
                         "--model.block_size", "12", "--train.batch_size", "4", "--train.max_iters", "2",
                         "--train.eval_interval", "2", "--train.eval_iters", "1", "--train.tensorboard", "false",
                         "--train.out_dir", str(run))
    assert rc == 0, err


def test_a_token_run_says_token_where_a_character_run_says_character(tmp_path, bpe_file, capsys):
    # was: a BPE run's diagnosis said "(... V = 300: enough to learn which character follows which)"
    from conftest import bpe_run_config

    from depthlab.trainer import train

    run = train(bpe_run_config(tmp_path, bpe_file), log=lambda s: None)
    rc, out, err = run_cli(capsys, "diagnose", str(run))
    assert rc == 0, err
    line = next(x for x in out.splitlines() if "not judged: bigram_stuck" in x)
    assert ": enough to learn which token follows which)" in line and "character" not in line, line
    # was: "position 0 sees one character" and "the bigram line ... (the current character alone)"
    for cmd, says in (("context", "position 0 sees one token, so"),
                      ("layers", "the embedding lens sees one token, so")):
        rc, out, err = run_cli(capsys, cmd, str(run))
        assert rc == 0 and says in out and "character" not in out, (out, err)


def test_a_missing_config_file_and_a_name_the_model_file_lacks_say_the_fix(tmp_path, capsys):
    """helper-59: "-c missing.yaml: file not found" and "m.py defines no 'M'" named the problem only."""
    err = cli_err(capsys, "train", "-c", str(tmp_path / "missing.yaml"))
    assert "file not found; give the path of an existing YAML config file (or inline YAML such as -c " in err, err
    (tmp_path / "m.py").write_text("import torch\n")
    err = cli_err(capsys, "check", f"{tmp_path / 'm.py'}:M")
    assert "defines no 'M' (nor any class or function); give PATH.py:NAME with NAME the model's class" in err, err
