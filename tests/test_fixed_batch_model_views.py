"""Commands that run a trained model.source model on another batch shape than its training's: a model with its
batch size written into its code fails there, and the command says so in one line (the shape, the user's line,
the fix and depthlab check), exit 2, not "unexpected RuntimeError ... please report it"."""

import json
import shutil
import textwrap

import pytest
import torch

from depthlab.errors import DepthlabError

from conftest import TINY_TEXT, assert_clean_error, run_cli

MODEL = textwrap.dedent('''\
    import torch.nn as nn


    class Block(nn.Module):
        def __init__(self, C):
            super().__init__()
            self.fc = nn.Linear(C, C)

        def forward(self, x):
            return x + self.fc(x)


    class FixedBatch(nn.Module):
        def __init__(self, vocab_size=65):
            super().__init__()
            self.wte = nn.Embedding(vocab_size, 16)
            self.blocks = nn.ModuleList([Block(16) for _ in range(2)])
            self.ln_f = nn.LayerNorm(16)
            self.lm_head = nn.Linear(16, vocab_size)

        def forward(self, idx):
            x = self.wte(idx).view(8, 16, 16)
            for b in self.blocks:
                x = b(x)
            return self.lm_head(self.ln_f(x))
    ''')

LINE = "(at fixed.py:22: x = self.wte(idx).view(8, 16, 16))"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run of FixedBatch trained 4 steps at train.batch_size 8, model.block_size 16."""
    from depthlab.cli import main

    d = tmp_path_factory.mktemp("fixed")
    (d / "fixed.py").write_text(MODEL)
    (d / "t.txt").write_text(TINY_TEXT)
    assert main(["train", "--model.source", f"{d / 'fixed.py'}:FixedBatch", "--data.path", str(d / "t.txt"),
                 "--model.block_size", "16", "--train.batch_size", "8", "--train.max_iters", "4",
                 "--train.eval_interval", "2", "--train.eval_iters", "1", "--train.max_time", "0",
                 "--train.tensorboard", "false", "--train.threads", "1", "--train.out_dir", str(d / "run")]) == 0
    return d / "run"


def test_sample_names_the_batch_of_1_the_line_and_the_fix(run, capsys):
    """A new user's pass: `depthlab sample` of TinyTransformer (view(32, 64, 2, 32)) said "unexpected RuntimeError:
    shape '[32, 64, 2, 32]' is invalid ... please report it", exit 1."""
    rc, out, err = run_cli(capsys, "sample", str(run), "--max-new-tokens", "5")
    assert_clean_error(rc, err, f"{run}: the model's forward failed on idx of shape (1, 1) (sampling runs it on a "
                                "batch of 1, one sample at a time, of the prompt's length growing up to "
                                "model.block_size 16): RuntimeError: shape '[8, 16, 16]' is invalid for input of size "
                                f"16 {LINE}; make the model accept any batch size and any length up to 16 (training "
                                f"ran it on (8, 16)); depthlab check {run.parent / 'fixed.py'}:FixedBatch tests other "
                                "batch sizes and lengths")
    assert out == ""  # refused before any text


def test_a_prompt_of_the_whole_context_fails_at_its_own_length(run, capsys):
    rc, out, err = run_cli(capsys, "sample", str(run), "--prompt", "First Citizen:\nBefore", "--max-new-tokens", "3")
    assert_clean_error(rc, err, "failed on idx of shape (1, 16) (sampling runs it on a batch of 1",
                       "invalid for input of size 256 (at fixed.py:22")


class _Reshapes(torch.nn.Module):
    """Trained at (8, T): a .view(8, -1, C) turns any (B, T') of 8k tokens into (8, B T' / 8) without an error."""

    def __init__(self, vocab_size: int = 11):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab_size, 4)
        self.head = torch.nn.Linear(4, vocab_size)

    def forward(self, idx):
        return self.head(self.wte(idx).view(8, -1, 4))


def test_generate_refuses_logits_of_another_batch_or_length_before_drawing_from_them():
    """`depthlab sample --prompt` of 16 characters from a .view(8, -1, C) model: its (8, 2, V) logits were read as
    8 rows and the draw failed with "unexpected RuntimeError: The expanded size of the tensor (1) must match ..."."""
    from depthlab.sample import ForwardFailed, generate

    with pytest.raises(ForwardFailed) as e:
        generate(_Reshapes(), torch.zeros((1, 16), dtype=torch.long), 2, block_size=16)
    assert str(e.value) == ("the model's forward returned logits of shape (8, 2, 11) for idx of shape (1, 16), not "
                            "(1, 16, V) nor the last position's (1, 1, V) (sampling runs it on a batch of 1, one "
                            "sample at a time, of the prompt's length growing up to model.block_size 16); make the "
                            "model accept any batch size and any length up to 16")


class _LastPosition(torch.nn.Module):
    """nanoGPT's shortcut: without targets, the logits of the last position only, (B, 1, V)."""

    def __init__(self, vocab_size: int = 11):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab_size, vocab_size)

    def forward(self, idx, targets=None):
        return self.wte(idx)[:, [-1], :], None


def test_generate_still_takes_the_last_position_logits_of_a_nanogpt_style_forward():
    from depthlab.sample import generate

    model = _LastPosition()
    with torch.no_grad():
        model.wte.weight.copy_(torch.eye(11).roll(1, dims=1) * 50)  # token i -> i + 1, all but certain
    out = generate(model, torch.tensor([[3]]), 4, temperature=0, block_size=16)
    assert out.tolist() == [[3, 4, 5, 6, 7]]


def test_generate_names_what_the_forward_raised_for_a_library_caller():
    from depthlab.sample import ForwardFailed, generate

    with pytest.raises(ForwardFailed) as e:
        generate(_Reshapes(), torch.zeros((3, 2), dtype=torch.long), 2, block_size=16)
    assert e.value.shape == (3, 2)
    assert str(e.value).startswith("the model's forward failed on idx of shape (3, 2) (sampling runs it on a batch "
                                   "of 3, of the prompt's length growing up to model.block_size 16): RuntimeError: "
                                   "shape '[8, -1, 4]' is invalid for input of size 24 (at "
                                   "test_fixed_batch_model_views.py:")
    assert str(e.value).endswith("return self.head(self.wte(idx).view(8, -1, 4))); make the model accept any batch "
                                 "size and any length up to 16")


def test_context_refuses_logits_of_another_batch_read_silently_as_the_windows():
    """(16, 16) windows through a .view(8, -1, C): (8, 32, V) logits, the same number of rows as the targets, so the
    cross-entropy paired each target with another window's logits and the curve was wrong without a word."""
    from depthlab.analytics.context import token_losses

    x = torch.zeros((16, 16), dtype=torch.long)
    with pytest.raises(DepthlabError) as e:
        token_losses(_Reshapes(), [(x, x)])
    assert str(e.value) == ("context: the model's forward returned logits of shape (8, 32, 11), not (16, 16, V), for "
                            "idx of shape (16, 16) (a micro-batch of the run's val evaluation windows: "
                            "train.batch_size of them, or fewer where its evaluation batch, config.json "
                            "resolved.eval_batch, does not divide into them); if the model has a batch size written "
                            "into its code, make it accept any (depthlab check PATH.py:NAME on its file tests other "
                            "batch sizes)")


@pytest.fixture(scope="module")
def two_process_run(run, tmp_path_factory):
    """The run as if its first session's global batch was 12 (a resume went on with 8): layers and context read
    batches of 12 windows, in micro-batches of 8 and 4."""
    d = tmp_path_factory.mktemp("two") / "run"
    shutil.copytree(run, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.setdefault("resolved", {})["eval_batch"] = 12
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("command", ["context", "layers"])
def test_layers_and_context_name_the_global_batch_the_line_and_the_fix(two_process_run, capsys, command):
    rc, out, err = run_cli(capsys, command, str(two_process_run))
    assert_clean_error(rc, err, f"{command}: the model's forward failed on idx of shape (4, 16) (a micro-batch of the "
                                "run's val evaluation windows: train.batch_size of them, or fewer where its evaluation "
                                "batch, config.json resolved.eval_batch, does not divide into them): "
                                "RuntimeError: shape '[8, 16, 16]' is invalid for input of size 1024 "
                                f"{LINE}; if the model has a batch size written into its code, make it accept any "
                                "(depthlab check PATH.py:NAME on its file tests other batch sizes)")


def test_the_training_loss_refuses_logits_of_another_batch_read_silently_as_the_targets():
    """The final validation's batch (14, 64) through a .view(8, -1, C) model of the same size paired each target with
    another window's logits without a word (the training batch was checked when the run started)."""
    from depthlab.training.protocol import ModelPort

    model = _Reshapes()
    x = torch.zeros((16, 16), dtype=torch.long)
    with pytest.raises(DepthlabError) as e:
        ModelPort(model).loss(model, x, x)
    assert str(e.value).startswith("the model's forward returned logits of shape (8, 32, 11) for idx of shape "
                                   "(16, 16), not (16, 16, V): if it has a batch size or length written into its code")


def test_training_with_samples_of_such_a_model_says_so_once_and_trains_on(tmp_path, capsys):
    """train.sample_interval on a model that cannot run a batch of 1 stopped the run at step 0 with exit 2."""
    (tmp_path / "fixed.py").write_text(MODEL)
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    rc, out, err = run_cli(capsys, "train", "--model.source", f"{tmp_path / 'fixed.py'}:FixedBatch", "--data.path",
                           str(tmp_path / "t.txt"), "--model.block_size", "16", "--train.batch_size", "8",
                           "--train.max_iters", "4", "--train.sample_interval", "2", "--train.max_time", "0",
                           "--train.eval_interval", "2", "--train.eval_iters", "1", "--train.tensorboard", "false",
                           "--train.threads", "1", "--train.out_dir", str(tmp_path / "run"))
    said = [line for line in (out + err).splitlines() if "samples skipped" in line]
    assert rc == 0 and len(said) == 1, out + err
    assert said[0].startswith("depthlab: warning: samples skipped from step 2 on, training goes on: ")
    assert said[0].endswith("(--train.sample_interval 0 turns the samples off)")
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["final_step"] == 4
