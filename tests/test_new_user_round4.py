"""What a fresh new user found (issue 23, round 4): each case reproduced, then its fix checked.

The check tests use the small line corpus of conftest (``tiny_text_file``) and models written here,
at B=4 and T <= 32, so each runs in well under a second.
"""

import json
import math

import pytest
import torch
import torch.nn as nn

from depthlab.analytics.check import check_model
from depthlab.analytics.check.finite import finite_rule
from depthlab.analytics.check.flow import gradient_flow_rule
from depthlab.analytics.check.forward import causal_leak_rule, init_loss_rule, no_gradient_rule, shape_rule
from depthlab.analytics.check.subject import Subject
from depthlab.config import DataConfig
from depthlab.data import load_corpus

from conftest import cli_err, run_cli, write_run_dir


@pytest.fixture
def corpus(tiny_text_file):
    return load_corpus(DataConfig(path=str(tiny_text_file)))


def _vocab(corpus) -> int:
    return len(corpus.tokenizer.vocab)


# ------------------------------------------------------------------------- 1. the shape search
POSITIONS_FILE = '''import torch
import torch.nn as nn


class Positions(nn.Module):
    """A position table of 24 rows: lengths up to 24 work, 25 and more fail."""

    def __init__(self, vocab_size):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, 8)
        self.pos = nn.Embedding(24, 8)
        self.head = nn.Linear(8, vocab_size)

    def forward(self, idx):
        B, T = idx.shape
        # the failing line below is line 20 of this file: the old search took 20 from the error text
        #
        #
        #
        x = self.tok(idx) + self.pos(torch.arange(T))
        return self.head(x)
'''


def test_shape_finds_the_longest_length_by_trying_not_from_the_error_text(tmp_path, corpus):
    from depthlab.usermodel import build_model, parse_source

    f = tmp_path / "positions.py"
    f.write_text(POSITIONS_FILE)
    assert f.read_text().splitlines()[19].strip().startswith("x = self.tok(idx) + self.pos")
    model = build_model(parse_source(f"{f}:Positions"), {}, _vocab(corpus))
    rep = check_model(model, corpus, batch_size=4, block_size=30, rules=("shape",))
    sh = rep.checks[0]
    assert "positions.py:20" in sh.evidence["asked_error"]  # the number 20 is in the error text...
    assert sh.evidence["works_at"] == {"batch_size": 4, "block_size": 24}  # ...and not taken for the length
    assert sh.evidence["longest_length"] == 24
    assert "at most T=24" in sh.remedy and "--block_size 24" in sh.remedy


def test_shape_reading_no_error_text_at_all(corpus, monkeypatch):
    """The search's outcome does not change when every error message is replaced by one without numbers."""
    import depthlab.analytics.check.forward as fw

    real = fw._attempt
    monkeypatch.setattr(fw, "_attempt", lambda *a, **k: None if real(*a, **k) is None else "it failed")
    V = _vocab(corpus)

    class Fixed(nn.Module):  # batch 8 hard-coded in a reshape
        def __init__(self):
            super().__init__()
            self.emb, self.head = nn.Embedding(V, 8), nn.Linear(8, V)

        def forward(self, idx):
            return self.head(self.emb(idx).view(8, idx.shape[1], 8))

    sh = check_model(Fixed(), corpus, batch_size=4, block_size=16, rules=("shape",)).checks[0]
    assert sh.evidence["hard_coded_batch_size"] == 8 and sh.evidence["works_at"]["batch_size"] == 8


# ------------------------------------------------------------------------- 2. non-finite numbers
class _Block(nn.Module):
    def __init__(self, n: int, nan_inside: bool = False):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.nan_inside = nan_inside

    def forward(self, x):
        y = x + self.lin(x)
        return torch.log(-(y.abs() + 1)) if self.nan_inside else y  # log of a negative number: NaN


class NaNModel(nn.Module):
    """Blocks in a ModuleList; NaN made in the model's own code after them (0/0), or inside block 0."""

    def __init__(self, V: int, where: str = "after_blocks"):
        super().__init__()
        self.tok = nn.Embedding(V, 16)
        self.blocks = nn.ModuleList(_Block(16, nan_inside=(where == "block0" and i == 0)) for i in range(2))
        self.head = nn.Linear(16, V)
        self.where = where

    def forward(self, idx):
        x = self.tok(idx)
        for b in self.blocks:
            x = b(x)
        if self.where == "after_blocks":
            x = x / (x - x)
        return self.head(x)


def test_nan_logits_are_their_own_finding_and_the_rest_do_not_run(corpus):
    rep = check_model(NaNModel(_vocab(corpus)), corpus, batch_size=4, block_size=16)
    c = {r.rule: r for r in rep.checks}
    fin = c["finite"]
    assert fin.ok is False and rep.failed == ["finite"]
    assert "the logits are NaN at initialisation, before any training step" in fin.summary
    assert f"{4 * 16 * _vocab(corpus):,} NaN of {4 * 16 * _vocab(corpus):,} values" in fin.summary
    assert "in NaNModel.forward's own code after blocks.1 (_Block, finite output), before head" in fin.summary
    assert "learning" not in fin.remedy and "epsilon" in fin.remedy
    for rule in ("causal_leak", "init_loss", "no_gradient", "overfit_batch", "context_use", "gradient_flow"):
        assert c[rule].ok is None and "not finite at initialisation (finite)" in c[rule].summary


def test_nan_made_inside_a_block_is_named(corpus):
    rep = check_model(NaNModel(_vocab(corpus), "block0"), corpus, batch_size=4, block_size=16, rules=("finite",))
    fin = rep.checks[-1]
    assert fin.rule == "finite" and fin.ok is False
    assert fin.evidence["nonfinite_at"] == "inside blocks.0 (_Block): its inputs are finite, its output is not"


def _subject(model, corpus) -> Subject:
    s = Subject(model, None, corpus, seed=3)
    assert shape_rule(s, 4, 16).ok is True
    return s


@pytest.mark.parametrize("rule", [causal_leak_rule, init_loss_rule, no_gradient_rule, gradient_flow_rule])
def test_no_rule_passes_or_advises_on_nan(rule, corpus):
    """Each rule on its own (without the finite gate): NaN is a problem named as such, no other advice."""
    res = rule(_subject(NaNModel(_vocab(corpus)), corpus))
    assert res.ok is False and res.evidence["nonfinite"] is True
    assert "cannot judge" in res.summary
    assert all(w not in res.remedy for w in ("shortcut", "output layer", "std=0.02", "tril", "learning_rate"))


class SqrtAtZero(nn.Module):
    """Finite logits, NaN gradient: d sqrt(u)/du at u = 0 is inf, times 0."""

    def __init__(self, V: int):
        super().__init__()
        self.tok, self.head = nn.Embedding(V, 8), nn.Linear(8, V)

    def forward(self, idx):
        x = self.tok(idx)
        return self.head(x + torch.sqrt(x * 0))


def test_finite_logits_with_nan_gradients(corpus):
    rep = check_model(SqrtAtZero(_vocab(corpus)), corpus, batch_size=4, block_size=16,
                      rules=("finite", "causal_leak", "no_gradient", "gradient_flow"))
    c = {r.rule: r for r in rep.checks}
    assert c["finite"].ok is False and c["finite"].evidence["nonfinite_gradients"] == ["tok.weight"]
    assert "the gradient of 1 parameters is not: tok.weight" in c["finite"].summary
    assert c["causal_leak"].ok is True  # the logits are fine: the leak test still means something
    assert c["no_gradient"].ok is None and c["gradient_flow"].ok is None


def test_finite_passes_a_correct_model_with_its_numbers(corpus):
    s = _subject(_Tiny(_vocab(corpus)), corpus)
    res = finite_rule(s)
    assert res.ok is True and math.isfinite(res.evidence["loss"])
    assert res.evidence["nonfinite_gradients"] == [] and res.evidence["nonfinite_parameters"] == []


class _Tiny(nn.Module):
    def __init__(self, V: int):
        super().__init__()
        self.tok, self.head = nn.Embedding(V, 8), nn.Linear(8, V)

    def forward(self, idx):
        return self.head(self.tok(idx))


NAN_FILE = '''import torch.nn as nn


class M(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.tok, self.head = nn.Embedding(vocab_size, 8), nn.Linear(8, vocab_size)

    def forward(self, idx):
        x = self.tok(idx)
        return self.head(x / (x - x))
'''


def test_diagnose_nan_at_step_0_is_not_the_learning_rate():
    from depthlab.analytics.diagnose import diagnose_records

    evs = [{"kind": "eval", "step": 0, "train_loss": "nan", "val_loss": "nan"}]
    cfg = {"model": {"source": "my.py:M"}, "train": {"learning_rate": 0.003, "warmup_iters": 10}}
    f = diagnose_records(evs, config=cfg)
    assert [x.rule for x in f] == ["exploding"]
    assert "at step 0, before any optimizer update" in f[0].evidence
    assert f[0].remedy.startswith("not the learning rate") and "depthlab check my.py:M" in f[0].remedy
    later = diagnose_records([{"kind": "eval", "step": 0, "train_loss": 4.1, "val_loss": 4.1},
                              {"kind": "eval", "step": 100, "train_loss": "nan", "val_loss": "nan"}], config=cfg)
    assert "lower train.learning_rate (now 0.003)" in later[0].remedy  # after updates the rate is the suspect


@pytest.mark.slow
def test_training_a_nan_model_does_not_blame_the_learning_rate(tmp_path, tiny_text_file, capsys):
    f = tmp_path / "nanmodel.py"
    f.write_text(NAN_FILE)
    out = tmp_path / "run"
    rc, _, err = run_cli(capsys, "train", "--data.path", str(tiny_text_file), "--model.source", f"{f}:M",
                         "--model.block_size", "8", "--train.batch_size", "2", "--train.max_iters", "3",
                         "--train.eval_iters", "1", "--train.out_dir", str(out), "--train.tensorboard", "false",
                         "--train.progress", "false")
    assert rc == 3
    assert "before any optimizer update, so not the learning rate" in err and "lower train.learning_rate" not in err
    assert f"depthlab check {f}:M" in err
    rc, out_text, _ = run_cli(capsys, "diagnose", str(out), "--json")
    found = {x["rule"]: x for x in json.loads(out_text)["findings"]}
    assert "before any optimizer update" in found["exploding"]["evidence"]
    assert "learning_rate" not in found["exploding"]["remedy"] and "depthlab check" in found["exploding"]["remedy"]


# ------------------------------------------------------------------------- 3. messages that give the fix
def test_check_given_a_gpt_field_says_to_use_init(capsys, tmp_path):
    err = cli_err(capsys, "check", f"{tmp_path}/m.py:M", "--model.n_layer", "3")
    assert "check takes no --model.* fields" in err and """--init '{"n_layer": 3}'""" in err
    err = cli_err(capsys, "check", f"{tmp_path}/m.py:M", "--train.batch_size", "3")
    assert "check's own is --batch_size" in err


@pytest.mark.parametrize("flag, shown", [("--batch_size", "--batch_size must be >= 1 (got 0)"),
                                         ("--block_size", "--block_size must be >= 1 (got 0)")])
def test_check_size_zero_names_the_flag_alone(capsys, tmp_path, tiny_text_file, flag, shown):
    f = tmp_path / "tiny_model.py"
    f.write_text("import torch.nn as nn\n\n\nclass M(nn.Module):\n    def __init__(self, vocab_size):\n"
                 "        super().__init__()\n        self.e = nn.Embedding(vocab_size, vocab_size)\n\n"
                 "    def forward(self, idx):\n        return self.e(idx)\n")
    err = cli_err(capsys, "check", f"{f}:M", "--data.path", str(tiny_text_file), flag, "0")
    assert shown in err and "None" not in err and ", " not in err.split("(got")[1].split(")")[0]


@pytest.mark.parametrize("argv", [["--resume"], ["--resume", "--train.max_iters", "5"]])
def test_bare_resume_says_what_to_give(capsys, argv):
    err = cli_err(capsys, "train", *argv)
    assert "--resume needs the run directory to continue: --resume RUN_DIR" in err


def test_resume_of_a_gpt_run_with_a_source_says_it_was_the_built_in_gpt(capsys, tmp_path):
    rd = write_run_dir(tmp_path, [])
    err = cli_err(capsys, "train", "--resume", str(rd), "--model.source", "mine.py:M")
    assert "trained with depthlab's built-in GPT" in err and "drop --model.source mine.py:M" in err
    assert "n_layer" not in err


# ------------------------------------------------------------------------- 4. stdout for results, stderr for the rest
BANNER: list[str] = []  # the log lines of tiny_run


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from depthlab.trainer import train

    from conftest import TINY_TEXT, tiny_config

    d = tmp_path_factory.mktemp("round4")
    p = d / "t.txt"
    p.write_text(TINY_TEXT)
    BANNER.clear()
    return train(tiny_config(d / "run", p, train=dict(max_iters=2, eval_interval=2)), log=BANNER.append)


@pytest.mark.slow
def test_export_draws_no_progress_bar_and_writes_the_sampling_defaults(tiny_run, tmp_path, capsys):
    from depthlab.config import SAMPLE_DEFAULTS

    rc, out, err = run_cli(capsys, "export", str(tiny_run), str(tmp_path / "hf"))
    assert rc == 0 and out.strip() == str(tmp_path / "hf")  # the result alone on stdout
    assert "Writing model shards" not in err and "%|" not in err
    assert all(line.startswith("depthlab: export: ") for line in err.strip().splitlines())
    gen = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert gen["temperature"] == SAMPLE_DEFAULTS["temperature"] == 0.8 and gen["do_sample"] is True
    assert gen["top_k"] == SAMPLE_DEFAULTS["top_k"] and gen["max_new_tokens"] == SAMPLE_DEFAULTS["max_new_tokens"]
    assert gen.get("eos_token_id") == cfg["eos_token_id"] is None  # a char run: no end-of-text token anywhere


def test_train_warnings_go_to_stderr_and_the_log_to_stdout(tmp_path, tiny_text_file, capsys):
    from depthlab.training.runtime import console

    console("warning: something to see")
    console("eval step 0: a log line")
    out, err = capsys.readouterr()
    assert out == "eval step 0: a log line\n" and err == "depthlab: warning: something to see\n"


# ------------------------------------------------------------------------- 5. probe --help lists what probe takes
def test_probe_help_lists_of_train_only_what_probe_accepts(capsys):
    import re

    from depthlab.cli import build_probe_parser

    shown = set(re.findall(r"--train\.\w+", build_probe_parser().format_help()))
    assert shown == {"--train.seed"}
    err = cli_err(capsys, "probe", "--train.max_iters", "3")
    assert "uses only train.seed" in err


# ------------------------------------------------------------------------- 6. one parameter count
def test_check_counts_parameters_as_training_does(corpus):
    from depthlab.model import GPT
    from depthlab.training.protocol import ModelPort

    from conftest import tiny_model_config

    gpt = GPT(tiny_model_config(vocab_size=_vocab(corpus), position="learned"))  # a table of positions, not counted
    rep = check_model(gpt, corpus, batch_size=4, block_size=8, rules=("shape",))
    n = ModelPort(gpt).num_params()  # what the training banner and summary.json count
    assert rep.model["parameters"] == n == sum(p.numel() for p in gpt.parameters()) - gpt.transformer.wpe.weight.numel()


@pytest.mark.slow
def test_banner_summary_and_report_card_are_one_number(tiny_run):
    from depthlab.report.html import run_cards
    from depthlab.report.run_data import RunData

    params = json.loads((tiny_run / "summary.json").read_text())["params"]
    banner = next(line for line in BANNER if line.startswith("run ") and "M parameters" in line)
    assert f"{params / 1e6:.3f} M parameters" in banner
    card = {label: (value, note) for label, value, note in run_cards(RunData(tiny_run))}["parameters"]
    assert card == (f"{params:,}", "token embedding (tied to the head) included (rotary positions)")


# ------------------------------------------------------------------------- 7. what a new user breaks
def test_check_on_a_too_short_corpus_names_checks_own_flags(capsys, tmp_path):
    text = tmp_path / "short.txt"
    text.write_text("abcdefghijklmnopqrstuvwxyz0123456789")  # 36 characters
    model = tmp_path / "tiny_model.py"
    model.write_text("import torch.nn as nn\n\n\nclass M(nn.Module):\n    def __init__(self, vocab_size):\n"
                     "        super().__init__()\n        self.e = nn.Embedding(vocab_size, vocab_size)\n\n"
                     "    def forward(self, idx):\n        return self.e(idx)\n")
    err = cli_err(capsys, "check", f"{model}:M", "--data.path", str(text))
    assert "has 36 tokens, but checking at length T=64 (the default length) needs 130" in err
    assert "give --block_size 17 or a longer text (--data.path)" in err and "model.block_size" not in err
    (tmp_path / "two.txt").write_text("ab")
    err = cli_err(capsys, "check", f"{model}:M", "--data.path", str(tmp_path / "two.txt"), "--block_size", "4")
    assert "has 2 tokens, but checking at length T=4 (--block_size) needs 10" in err and "give a longer text" in err
    (tmp_path / "one.txt").write_text("a")  # one distinct character: nothing to learn, said first
    err = cli_err(capsys, "check", f"{model}:M", "--data.path", str(tmp_path / "one.txt"), "--block_size", "4")
    assert "holds a single distinct character ('a')" in err and "no rule can test the model on it" in err


def test_report_into_a_read_only_place_is_one_line(capsys, tmp_path, monkeypatch):
    import depthlab.report.html as html

    rd = write_run_dir(tmp_path, [{"kind": "eval", "step": 0, "train_loss": 4.0, "val_loss": 4.0}])
    monkeypatch.setattr(html, "make_all_plots", lambda *a, **k: {})

    def read_only(path, data):
        raise OSError(30, "Read-only file system", str(path))

    monkeypatch.setattr(html, "atomic_write", read_only)
    err = cli_err(capsys, "report", str(rd), "--out", str(tmp_path / "r.html"))
    assert f"report: cannot write {tmp_path / 'r.html'}: Read-only file system; choose a writable --out" in err


def test_ctrl_c_that_a_library_turns_into_another_error_is_still_an_interruption(capsys, monkeypatch):
    import os
    import signal

    import depthlab.export as export

    def interrupted_import(*a, **k):
        try:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while a library imports (the handler raises here)...
        except KeyboardInterrupt:
            raise ImportError("cannot load module more than once per process") from None  # ...which it turns into this

    monkeypatch.setattr(export, "export_run", interrupted_import)
    # Python's own Ctrl-C handler, as a fresh process has it: in one whole-suite run (load ~3) an earlier
    # test had left another handler in place and this test read rc 0 (not reproduced alone or per file)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        rc, _, err = run_cli(capsys, "export", "some_run", "some_out")
    finally:
        signal.signal(signal.SIGINT, old)
    assert rc == 130 and err.strip() == "depthlab: interrupted"


@pytest.mark.slow
def test_export_into_a_read_only_place_is_one_line(tiny_run, tmp_path, capsys, monkeypatch):
    import depthlab.export as export

    def read_only(parent, prefix):
        raise OSError(30, "Read-only file system", str(parent))

    monkeypatch.setattr(export, "make_temp_dir", read_only)
    err = cli_err(capsys, "export", str(tiny_run), str(tmp_path / "ro" / "hf"))
    # depthlab's words for the errno (was the system's "Read-only file system"); the folder it made is gone again
    assert f"export: cannot make OUT_DIR {tmp_path / 'ro' / 'hf'} in {tmp_path}: the disk is read-only; choose an " \
           "OUT_DIR in a folder you can write to" in err
    assert not (tmp_path / "ro").exists()


@pytest.mark.parametrize("argv", [["sample", "{f}"], ["diagnose", "{f}"], ["export", "{f}", "{d}/out"],
                                  ["train", "--resume", "{f}"]])
def test_a_run_dir_that_is_a_file_is_called_a_file(capsys, tmp_path, argv):
    f = tmp_path / "notes.txt"
    f.write_text("my notes")
    err = cli_err(capsys, *[a.format(f=f, d=tmp_path) for a in argv])
    assert f"{f} is a file, not a run directory" in err and "(no " not in err
    assert f.read_text() == "my notes"


def test_check_of_a_folder_says_it_is_a_folder(capsys, tmp_path):
    err = cli_err(capsys, "check", f"{tmp_path}:M")
    assert f"{tmp_path} is a folder; give the .py file in it that defines M" in err and "not found" not in err
