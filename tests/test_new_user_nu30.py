"""A new user's findings (round nu30): NaN weights refused by sample and context, absent-character
lists that say they are cut, a truncated --init_from weights file with a way forward, probe --out
a folder, edited vocab/config files said by sample, a cap on --num-samples."""

import json
import shutil
import string

from pathlib import Path

import pytest

from depthlab.cli import main
from depthlab.errors import DepthlabError

from conftest import TINY_TEXT, assert_clean_error, run_cli, tiny_cli_args, trained_tiny_run

NAN_MODEL = """import torch
class NaN(torch.nn.Module):
    def __init__(self, vocab_size=65):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab_size, 8)
        self.head = torch.nn.Linear(8, vocab_size)
    def forward(self, idx):
        return self.head(self.emb(idx)) * float("nan")
"""


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory):
    """A model.source run whose model gives NaN logits: training stops at step 1, the step-0 checkpoint stays."""
    d = tmp_path_factory.mktemp("nan")
    (d / "t.txt").write_text(TINY_TEXT)
    (d / "m.py").write_text(NAN_MODEL)
    rc = main(["train", "--data.path", str(d / "t.txt"), "--model.source", f"{d / 'm.py'}:NaN",
               "--model.block_size", "16", "--train.batch_size", "4", "--train.max_iters", "10",
               "--train.eval_interval", "5", "--train.eval_iters", "2", "--train.tensorboard", "false",
               "--train.threads", "1", "--train.max_time", "0", "--train.out_dir", str(d / "run")])
    assert rc == 3 and (d / "run" / "checkpoints" / "step-000000.safetensors").exists()
    return d / "run"


def test_sample_refuses_weights_whose_logits_are_nan(nan_run, capsys):
    rc, out, err = run_cli(capsys, "sample", str(nan_run), "--max-new-tokens", "5")
    assert out == ""  # was 6 bare newlines, exit 0
    # a model.source run: its forward (here) or its weights give the NaN; check tests the forward
    assert_clean_error(rc, err, f"{nan_run}'s model (model.source ", "gives non-finite logits (NaN)",
                       "nothing to sample", "depthlab check ", f"depthlab diagnose {nan_run}")


def test_context_blames_the_nan_not_the_sampling_error(nan_run, capsys):
    rc, out, err = run_cli(capsys, "context", str(nan_run))
    verdict = [line for line in out.splitlines() if line.startswith("context gain")]
    assert rc == 0 and len(verdict) == 1, out
    assert "the loss is non-finite (NaN) at 16 of 16 positions" in verdict[0]
    assert "no context gain to measure" in verdict[0]
    assert "sampling error" not in verdict[0] and "train.eval_iters" not in out  # was: "within twice its sampling
    assert "Train longer" not in out  # error ... (more windows: a run with a larger train.eval_iters)"


GOOD_TEXT = TINY_TEXT + ("\n" + string.ascii_letters + string.digits) * 20


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    return trained_tiny_run(tmp_path_factory, "good", GOOD_TEXT)


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_resume_on_another_corpus_counts_the_absent_characters_and_marks_the_cut(good_run, tmp_path, capsys):
    other = tmp_path / "other.txt"
    other.write_bytes(b"xyz \xe9\xe8\n" * 50)  # latin-1: two characters the run never saw, nearly all of its own gone
    gone = sorted(set(GOOD_TEXT) - set("xyz \n"))
    rc, _, err = run_cli(capsys, "train", "--resume", str(good_run), "--data.path", str(other),
                         "--data.encoding", "latin-1")
    assert len(gone) > 40
    assert_clean_error(rc, err, "2 characters absent from the checkpoint: 'èé'",
                       f"{len(gone)} checkpoint characters absent from this corpus, the first 40: "
                       f"{''.join(gone[:40])!r} ({len(gone) - 40} more not shown)")


def _truncated_copy(good_run, tmp_path):
    run = tmp_path / "trunc"
    shutil.copytree(good_run, run)
    best = run / "checkpoints" / "best.safetensors"
    best.write_bytes(best.read_bytes()[:len(best.read_bytes()) // 2])
    return run, best


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_init_from_a_truncated_best_names_the_intact_copy_of_its_step_and_the_fix_works(good_run, tmp_path, capsys):
    run, best = _truncated_copy(good_run, tmp_path)
    twin = run / "checkpoints" / "step-000010.safetensors"  # the run's last and best step
    argv = ["train", "--init_from", str(run), *tiny_cli_args(tmp_path / "t.txt", tmp_path / "new")]
    (tmp_path / "t.txt").write_text(GOOD_TEXT)
    rc, _, err = run_cli(capsys, *argv)
    assert_clean_error(rc, err, f"--init_from {run}: checkpoint {best} is corrupt or truncated",  # as typed
                       "step-000010.safetensors is the same weights, intact", f"(cp {twin} {best})")
    shutil.copyfile(twin, best)  # what the line says to do
    assert main(argv) == 0 and (tmp_path / "new" / "checkpoints" / "best.safetensors").exists()


def test_init_from_a_truncated_best_without_its_step_says_restore_from_a_copy(good_run, tmp_path, capsys):
    run, best = _truncated_copy(good_run, tmp_path)
    for f in (run / "checkpoints").glob("step-000010.*"):
        f.unlink()
    (tmp_path / "t.txt").write_text(GOOD_TEXT)
    rc, _, err = run_cli(capsys, "train", "--init_from", str(run),
                         *tiny_cli_args(tmp_path / "t.txt", tmp_path / "new"))
    assert_clean_error(rc, err, "is corrupt or truncated", "no intact step checkpoint holds the same weights: "
                       "restore best.safetensors from a copy of the run, or train the source run again")


@pytest.mark.slow  # over a second: the fast tier stays under 3 min
def test_probe_out_a_folder_writes_inside_it_and_says_where(tmp_path, tiny_text_file, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "figs").mkdir()
    rc, out, _ = run_cli(capsys, "probe", "--data.path", str(tiny_text_file), "--model.n_layer", "1",
                         "--model.n_embd", "32", "--model.n_head", "2", "--model.block_size", "16", "--out", "figs")
    want = Path("figs") / "probe-prenorm-layernorm-1.png"
    assert rc == 0 and f"plot: {want}" in out.splitlines()
    assert (tmp_path / want).stat().st_size > 1000
    assert not (tmp_path / "figs.png").exists()  # was written silently beside the folder


def test_sample_says_an_edited_vocab_or_config_json_is_not_what_it_uses(good_run, tmp_path, capsys):
    run = tmp_path / "edited"
    shutil.copytree(good_run, run)
    rc, want, err = run_cli(capsys, "sample", str(run), "--max-new-tokens", "10", "--temperature", "0")
    assert rc == 0 and "warning" not in err  # untouched: no word
    vocab = json.loads((run / "vocab.json").read_text())
    (run / "vocab.json").write_text(json.dumps(vocab[::-1]))
    cfg = json.loads((run / "config.json").read_text())
    cfg["model"]["n_layer"] = 3
    (run / "config.json").write_text(json.dumps(cfg))
    rc, out, err = run_cli(capsys, "sample", str(run), "--max-new-tokens", "10", "--temperature", "0")
    assert rc == 0 and out == want  # the checkpoint's own copies, as before
    lines = err.splitlines()
    assert (f"depthlab: warning: {run / 'vocab.json'} differs from the characters stored in best.safetensors "
            "(edited by hand?); sampling uses the checkpoint's copy") in lines, err
    assert [line for line in lines if line.startswith(f"depthlab: warning: {run / 'config.json'} differs from the "
            "checkpoint step-000010") and "model.n_layer 2 -> 3" in line
            and line.endswith("sampling uses the checkpoint's copy")], err


def test_an_absurd_num_samples_is_one_line_like_max_new_tokens(good_run, capsys):
    from depthlab.sample import MAX_NEW_TOKENS, MAX_NUM_SAMPLES, check_sampling_args

    check_sampling_args(1.0, None, None, 10, MAX_NUM_SAMPLES)  # the bound itself is accepted
    with pytest.raises(DepthlabError, match="--num-samples 10001 is more than"):
        check_sampling_args(1.0, None, None, 10, MAX_NUM_SAMPLES + 1)
    for n in (MAX_NUM_SAMPLES + 1, 100_000_000, 2**63 - 1):  # 100,000,000 stalled for many minutes
        rc, out, err = run_cli(capsys, "sample", str(good_run), "--num-samples", str(n))
        assert out == ""
        assert_clean_error(rc, err, f"--num-samples {n} is more than depthlab samples in one call (10,000: ",
                           "ask for at most 10000")
    rc, out, err = run_cli(capsys, "sample", str(good_run), "--num-samples", "10000", "--max-new-tokens", "1001")
    assert out == "" and MAX_NEW_TOKENS == 10_000_000
    assert_clean_error(rc, err, "--num-samples 10000 x --max-new-tokens 1001 = 10,010,000 tokens is more than "
                       "depthlab samples in one call (10,000,000: ")
