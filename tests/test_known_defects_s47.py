"""Defects listed as seen-not-fixed in earlier closing notes, each fixed with the failing case here."""

from __future__ import annotations

import pytest

from conftest import cli_err, run_cli


def _tiny_run(capsys, text_file, run, steps: int = 2):
    """A finished tiny run at ``run`` (the defaults of conftest.tiny_cli_args, ``steps`` steps): its path."""
    from conftest import tiny_cli_args

    rc, _, err = run_cli(capsys, "train", *tiny_cli_args(text_file, run, train__max_iters=steps,
                                                         train__eval_interval=2))
    assert rc == 0, err
    return run


def test_probe_out_a_missing_folder_with_a_trailing_slash_is_refused_not_written_as_png(tmp_path, capsys):
    # was: `probe --out newdir/sub/` wrote newdir/sub.png (Path drops the trailing slash)
    out = f"{tmp_path / 'sub'}/"
    err = cli_err(capsys, "probe", "--model.n_layer", "1", "--model.n_embd", "32", "--model.n_head", "2",
                  "--out", out)
    assert err == (f"depthlab: error: probe: --out {out} names a folder that does not exist; create it "
                   f"(mkdir -p {out}) or give a .png file name\n"), err
    assert list(tmp_path.iterdir()) == []


def test_report_on_a_folder_that_is_neither_a_run_nor_a_sweep_names_both(tmp_path, capsys):
    # was: "... give the out_dir of a depthlab train run", though report takes a sweep folder as well
    (tmp_path / "notes.txt").write_text("x")
    err = cli_err(capsys, "report", str(tmp_path))
    assert err == (f"depthlab: error: report: {tmp_path} is neither a depthlab run directory (no config.json or "
                   "metrics.jsonl) nor a sweep folder (no sweep.json); give the out_dir of a depthlab train run or "
                   "of a depthlab sweep\n"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_bare_file_whose_one_class_does_not_build_gives_one_error_line_not_the_notice_first(tmp_path, capsys):
    # was: "noforward.py defines one nn.Module class, Net: it is the model (...)" and then the error on stderr
    f = tmp_path / "noforward.py"
    f.write_text("import torch.nn as nn\nclass Net(nn.Module):\n    def __init__(self, vocab_size=65):\n"
                 "        super().__init__()\n        self.emb = nn.Embedding(vocab_size, 16)\n")
    want = (f"depthlab: error: {f}:Net: Net(...) has no forward method; define forward(self, idx) returning the "
            "logits (B, T, V)\n")
    for argv in (["check", str(f)], ["train", "--model.source", str(f), "--train.out_dir", str(tmp_path / "run")]):
        assert run_cli(capsys, *argv) == (2, "", want)
    assert not (tmp_path / "run").exists()


def test_sweep_print_config_shows_what_a_sweeps_runs_get(capsys, tiny_text_file):
    # was: train's defaults (max_time 270, keep_last 2, progress and tensorboard on), which a sweep's runs never get
    from conftest import cli_print_config

    out = cli_print_config(capsys, "sweep", "--grid", "model.n_layer=1,2", "--print_config")
    for line in ("  max_time: 0.0", "  keep_last: 1", "  progress: false", "  tensorboard: false"):
        assert line in out.splitlines(), out
    # a profile's base config is not among the flags: refused, not printed as if it were the runs' config
    for src in (["--profile", "quick"], ["--file", str(tiny_text_file)]):
        err = cli_err(capsys, "sweep", *src, "--print_config")
        assert f"with {src[0]} each experiment's runs take the base config of the profile or file" in err


@pytest.mark.slow  # about a second: the fast tier stays under 3 min
def test_sweep_flag_that_is_also_a_grid_axis_is_refused(capsys, tiny_text_file, tmp_path):
    # was: --model.n_layer 3 silently replaced by the grid's 1 and 2
    err = cli_err(capsys, "sweep", "--dry_run", "--grid", "model.n_layer=1,2", "--model.n_layer", "3",
                  "--data.path", str(tiny_text_file), "--out_dir", str(tmp_path / "sw"))
    assert err == ("depthlab: error: --model.n_layer 3 is also an axis of the grid (model.n_layer=1,2), whose values "
                   "would replace it; drop it (the flag, or the line of a --model/--train/--data file), or give the "
                   "values as --grid model.n_layer=...\n"), err
    err = cli_err(capsys, "sweep", "--dry_run", "--profile", "quick", "--model.n_layer", "3")
    assert "is also an axis of the grid of experiment depth (model.n_layer=" in err
    assert not (tmp_path / "sw").exists()


def test_sweep_dry_run_refuses_ray_options_without_ray_as_the_sweep_does(capsys, tiny_text_file, tmp_path):
    # was: exit 0 with --ray_scheduler asha / --ray_address on the local backend; the sweep itself refuses them
    for opt in (["--ray_scheduler", "asha"], ["--ray_address", "127.0.0.1:6379"]):
        err = cli_err(capsys, "sweep", "--dry_run", "--grid", "model.n_layer=1,2", *opt,
                      "--data.path", str(tiny_text_file), "--out_dir", str(tmp_path / "sw"))
        assert err == f"depthlab: error: {opt[0]} needs --backend ray\n"  # the one given, not both


def test_a_refused_resume_names_only_the_fields_that_change_the_weights_and_quotes_the_run(tmp_path, capsys,
                                                                                          tiny_text_file):
    # was: "(model.init, model.n_embd, model.n_head change the number or shape of the model's weights" (init and
    # n_head change none), and "depthlab train --resume r r alone", which a shell splits

    run = _tiny_run(capsys, tiny_text_file, tmp_path / "r r", 2)
    err = cli_err(capsys, "train", "--resume", str(run), "--model.n_embd", "64", "--model.n_head", "4",
                  "--model.init", "torch")
    assert err.startswith(f"depthlab: error: cannot resume '{run}' with changed model.init")
    assert f"(depthlab train --resume '{run}' alone reads them from its config.json)" in err, err
    assert "train the changed model as a new run from scratch (model.n_embd changes the number or shape of the " \
           "model's weights, so --init-from cannot reuse the run's)" in err, err


def test_small_wording_defects_of_a_new_user_pass(tmp_path, capsys, tiny_text_file):

    # report on a file: no "report:" prefix and no word of sweeps
    (tmp_path / "file.txt").write_text("mine")
    assert cli_err(capsys, "report", str(tmp_path / "file.txt")) == (
        f"depthlab: error: report: {tmp_path / 'file.txt'} is a file, not a run directory or a sweep folder; give "
        "the out_dir of a depthlab train run or of a depthlab sweep\n")
    # one GPT field with model.source: "these describe" of one field
    model = tmp_path / "m.py"
    model.write_text("import torch.nn as nn\nclass M(nn.Module):\n    def __init__(self, vocab_size=65):\n"
                     "        super().__init__()\n        self.e = nn.Embedding(vocab_size, vocab_size)\n"
                     "    def forward(self, idx):\n        return self.e(idx)\n")
    err = cli_err(capsys, "train", "--model.source", str(model), "--model.n_layer", "3")
    assert "--model.n_layer 3: this describes depthlab's GPT and does not apply to --model.source" in err, err
    # --resume with --init-from and another out_dir: the fix offered was the command typed
    run = _tiny_run(capsys, tiny_text_file, tmp_path / "run", 2)
    err = cli_err(capsys, "train", "--resume", str(run), "--init-from", str(run), "--train.out_dir",
                  str(tmp_path / "new"))
    assert err == ("depthlab: error: --resume and --init-from exclude each other: resume continues a run, init-from "
                   "starts a new one from its weights\n"), err


@pytest.mark.slow  # over a second: the fast tier stays under 3 min
def test_resume_true_in_a_config_file_reads_the_runs_own_config(tmp_path, capsys, tiny_text_file):
    # was: a file with only train.resume true and the run's out_dir resumed with the defaults, refused as
    # "cannot resume RUN with changed ... model.n_layer 2 -> 4"
    import json


    run = _tiny_run(capsys, tiny_text_file, tmp_path / "run", 4)
    f = tmp_path / "res.yaml"
    f.write_text(f"train:\n  resume: true\n  out_dir: {run}\n  max_iters: 6\n")
    rc, out, err = run_cli(capsys, "train", "-c", str(f))
    assert rc == 0, err
    assert json.loads((run / "summary.json").read_text())["final_step"] == 6
    rc, out, err = run_cli(capsys, "train", "--train.resume", "true", "--train.out_dir", str(run),
                           "--train.max_iters", "8")  # the same by flags
    assert rc == 0, err
    assert json.loads((run / "summary.json").read_text())["final_step"] == 8
    f.write_text(f"model:\n  n_layer: 3\ntrain:\n  resume: true\n  out_dir: {run}\n  max_iters: 10\n")
    err = cli_err(capsys, "train", "-c", str(f))  # what the file sets is still what it asks for
    assert "with changed model.n_layer 2 -> 3 (run value -> asked)" in err, err


def test_a_one_symbol_corpus_has_baselines_of_zero_not_minus_zero():
    # was: "unigram -0.000 | -0.000, bigram -0.000 | -0.000" and "nats": -0.0 in baselines.json
    import math

    import numpy as np

    from depthlab.analytics.baselines import bigram_nats, one_char_floor_nats, unigram_nats

    ids = np.zeros(50, dtype=np.int64)
    for v in (unigram_nats(ids, ids, 1), bigram_nats(ids, ids, 1), one_char_floor_nats(ids, 1)):
        assert v == 0.0 and math.copysign(1.0, v) == 1.0 and f"{v:.3f}" == "0.000"


def test_context_use_of_a_users_model_points_to_check_for_the_mask():
    # was: "the model uses its context" for a model.source model that read the tokens it predicted (its position 0
    # not yet below the one-token floor), with no word of depthlab check
    from depthlab.analytics.rules.context import USED, context_words

    curve = [2.40] + [1.5] * 31
    args = dict(gain=0.9, se=0.05, curve=curve, bigram=2.48, unigram=3.35, lq_se=0.02, floor=2.37, pos0_se=0.08)
    state, words = context_words(**args, model={"source": "my.py:LeakyGPT"})
    assert state == USED and words.endswith("`depthlab check my.py:LeakyGPT` tests the mask itself)"), words
    state, words = context_words(**args, model={"n_layer": 4})
    assert state == USED and "depthlab check" not in words  # depthlab's GPT: its mask is tested


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_refused_init_from_says_one_line_not_the_corpus_warnings_first(tmp_path, capsys, tiny_text_file):
    # was: two "depthlab: warning:" lines about the corpus (short val split, one distinct character), then the error

    run = _tiny_run(capsys, tiny_text_file, tmp_path / "run", 2)
    one = tmp_path / "onechar.txt"
    one.write_text("a" * 103)
    rc, out, err = run_cli(capsys, "train", "--init-from", str(run), "--data.path", str(one), "--train.max_iters", "3",
                           "--train.max_time", "0", "--train.threads", "1", "--train.out_dir", str(tmp_path / "new"))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "its tokenizer (char, 33 symbols)" in err, err
    assert "(char, 1 symbol)" in err and "warning" not in out + err
    assert not (tmp_path / "new").exists()
    rc, out, err = run_cli(capsys, "train", "--data.path", str(one), "--model.n_layer", "1", "--model.n_embd", "16",
                           "--model.n_head", "2", "--model.block_size", "8", "--train.max_iters", "2",
                           "--train.max_time", "0", "--train.threads", "1", "--train.out_dir", str(tmp_path / "one"))
    assert rc == 0, err  # the warnings are still said where the run goes ahead, and say what happens
    assert "holds a single distinct character ('a'): every loss and every gradient is 0" in out + err


def test_probe_does_not_call_the_scale_its_mechanism_blames_not_the_problem(tmp_path, capsys):
    # was: "...; the stream stays at that small scale" for RMS 0.021 -> 0.2 (it grows 10-fold), then "not the
    # problem here: ... activation scale (RMS 0.021 -> 0.2)" in the same summary
    from depthlab.analytics.probe import summarise_probe

    lay = [{"grad_norm": 0.6, "mean_abs_grad": 3e-3, "weight_norm": 8.0, "act_rms": v, "rank_measure": 0.8,
            "token_cosine": 0.5} for v in (0.021, 0.042, 0.094, 0.2)]
    res = {"layers": lay, "loss": 4.2, "norm_eps": 1e-5,
           "config": {"variant": "plain", "norm": "layernorm", "n_layer": 4, "n_embd": 32, "init": "gpt2"}}
    text = " ".join(summarise_probe(res))
    assert "mechanism: LayerNorm's eps dominates" in text
    assert "stays at that small scale" not in text and "so the stream grows, yet its last block is still at 2.0e-01" \
        in text
    assert "activation scale" not in text


def test_a_users_model_with_a_short_context_argument_is_told_to_build_it_longer(tmp_path, capsys):
    # was: "run with --model.block_size 32, or give the model a larger position table (and mask)" for a class
    # whose own block_size argument sizes that table
    f = tmp_path / "pos.py"
    f.write_text("import torch, torch.nn as nn\nclass P(nn.Module):\n"
                 "    def __init__(self, vocab_size=65, block_size=32):\n        super().__init__()\n"
                 "        self.tok = nn.Embedding(vocab_size, 16)\n        self.pos = nn.Embedding(block_size, 16)\n"
                 "        self.head = nn.Linear(16, vocab_size)\n"
                 "    def forward(self, idx):\n        T = idx.shape[1]\n"
                 "        return self.head(self.tok(idx) + self.pos(torch.arange(T)))\n")
    err = cli_err(capsys, "train", "--model.source", f"{f}:P", "--model.block_size", "64", "--train.out_dir",
                  str(tmp_path / "run"))
    assert ("the model accepts at most T=32 positions (it runs on (16, 32)): run with --model.block_size 32, or build "
            "it with a larger one: --model.init '{\"block_size\": 64}' (its own argument, beside any other keys you "
            "give model.init)") in err, err


def test_view_windows_of_a_short_val_split_say_they_repeat():
    # was: "320 windows x 32 = 10,240 tokens" of a val split of 116 tokens, read as that many independent tokens
    import numpy as np

    from depthlab.analytics.context import view_windows

    short = view_windows(np.arange(40) % 7, block_size=8, batch_size=16, seed=1, eval_iters=4, max_tokens=0)
    assert short.describe().startswith("all the run's 4 fixed val evaluation batches: 64 windows x 8 = 512 tokens "
                                       "(only ")
    assert short.describe().endswith(" distinct: the val split is short, so windows repeat)")
    long = view_windows(np.random.default_rng(0).integers(0, 65, 100_000), block_size=8, batch_size=4, seed=1,
                        eval_iters=2, max_tokens=0)
    assert long.describe() == "all the run's 2 fixed val evaluation batches: 8 windows x 8 = 64 tokens"
