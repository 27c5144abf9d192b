"""The trainer of parts: the run directory it writes, determinism, the copy of the config it runs."""

import json

import pytest
import torch

from depthlab import train
from depthlab.errors import DepthlabError
from depthlab.trainer import Trainer
from depthlab.trainer import train as bare_train

from conftest import QUIET, evals, tiny_config, weights_hash


def test_run_directory_and_loss_falls(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=40)), **QUIET)
    for f in ("config.json", "vocab.json", "metrics.jsonl", "summary.json", "checkpoints/manifest.json",
              "checkpoints/best.safetensors"):
        assert (run / f).exists(), f
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["model"]["vocab_size"] == len(json.loads((run / "vocab.json").read_text()))
    s = json.loads((run / "summary.json").read_text())
    assert s["final_step"] == 40 and s["tokens_seen"] == 40 * 4 * 16
    ev = evals(run)
    assert [e[0] for e in ev] == [0, 10, 20, 30, 40]
    assert ev[-1][2] < ev[0][2] - 0.5
    assert s["best_val_loss"] == min(e[2] for e in ev)
    train_lines = [r for r in map(json.loads, open(run / "metrics.jsonl")) if "loss" in r]
    assert [r["step"] for r in train_lines] == list(range(5, 41, 5))
    assert all({"lr", "tokens_per_sec"} <= r.keys() for r in train_lines)


def test_config_json_resolves_embed_scale_auto_as_built(tmp_path, tiny_text_file):
    for norm, want in (("dyt", "learned"), ("layernorm", "none")):
        run = train(tiny_config(tmp_path / norm, tiny_text_file, model=dict(norm=norm), train=dict(max_iters=2)),
                    **QUIET)
        cfg = json.loads((run / "config.json").read_text())
        assert cfg["model"]["embed_scale"] == "auto" and cfg["resolved"]["embed_scale"] == want


def test_the_run_line_names_the_norm_and_the_embedding_scale_it_built(tmp_path, tiny_text_file):
    lines = []
    cfg = tiny_config(tmp_path / "r", tiny_text_file, model=dict(norm="dyt"), train=dict(max_iters=1))
    train(cfg, log=lines.append)
    run_line = next(line for line in lines if line.startswith("run "))
    assert ", 2 x prenorm + dyt + embed_scale learned, device cpu," in run_line, run_line


def test_deterministic_runs_identical(tmp_path, tiny_text_file):
    a = train(tiny_config(tmp_path / "a", tiny_text_file, model=dict(dropout=0.1)), **QUIET)
    b = train(tiny_config(tmp_path / "b", tiny_text_file, model=dict(dropout=0.1)), **QUIET)
    la = [r.get("loss") for r in map(json.loads, open(a / "metrics.jsonl"))]
    lb = [r.get("loss") for r in map(json.loads, open(b / "metrics.jsonl"))]
    assert la == lb and evals(a) == evals(b)
    assert weights_hash(a) == weights_hash(b)
    c = train(tiny_config(tmp_path / "c", tiny_text_file, model=dict(dropout=0.1), train=dict(seed=2)),
              **QUIET)
    assert evals(c) != evals(a)


def test_existing_out_dir_refused_then_overwritten(tmp_path, tiny_text_file):
    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=5))
    train(cfg, **QUIET)
    before = (tmp_path / "r" / "summary.json").read_bytes()
    with pytest.raises(DepthlabError, match="already exists"):
        train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=5)), **QUIET)
    assert (tmp_path / "r" / "summary.json").read_bytes() == before
    train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=10)), overwrite=True, **QUIET)
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["final_step"] == 10
    other = tmp_path / "notarun"
    other.mkdir()
    (other / "precious.txt").write_text("keep me")
    with pytest.raises(DepthlabError, match="not a depthlab run"):
        train(tiny_config(other, tiny_text_file), overwrite=True, **QUIET)
    assert (other / "precious.txt").read_text() == "keep me"


def test_run_config_is_a_copy_with_the_corpus_vocabulary_and_the_run_directory(tmp_path, tiny_text_file):
    cfg = tiny_config(None, tiny_text_file)
    cfg.train.out_dir = str(tmp_path / "x")
    t = Trainer(cfg, **QUIET)
    assert cfg.model.vocab_size != t.cfg.model.vocab_size == len(t.corpus.tokenizer.vocab)
    assert t.cfg.train.out_dir == str(tmp_path / "x") and t.cfg is not cfg


def test_resume_state_is_the_union_of_the_parts_state(tmp_path, tiny_text_file):
    run = bare_train(tiny_config(tmp_path / "s", tiny_text_file), **QUIET)
    st = torch.load(run / "checkpoints" / "step-000020.state.pt", weights_only=True)
    assert {"step", "tokens_seen", "nonfinite_skips", "best_val_loss", "best_step", "evals_without_improvement",
            "lr_anchor", "optimizer", "rng", "wall_time_s", "corpus_sha256"} <= set(st)
    assert st["step"] == 20 and st["tokens_seen"] == 20 * 4 * 16 and st["lr_anchor"] is None


class _CtrlCAtStart:
    """A Ctrl-C while the run starts (the corpus baselines of a large file take seconds)."""

    def on_train_start(self, trainer, info):
        raise KeyboardInterrupt

    def __getattr__(self, name):
        return lambda *a, **k: None


def test_a_ctrl_c_before_the_first_step_removes_the_new_run_folder_and_says_so(tmp_path, tiny_text_file):
    """A new user's Ctrl-C during the baselines left config.json and metrics.jsonl, and the same command then refused
    the folder as an existing run. A folder that was there before the command stays."""
    lines = []
    cfg = tiny_config(tmp_path / "runs" / "new", tiny_text_file, train=dict(max_iters=3))
    with pytest.raises(KeyboardInterrupt) as e:
        bare_train(cfg, callbacks=[_CtrlCAtStart()], log=lines.append)
    assert not (tmp_path / "runs").exists()
    assert str(e.value) == (f"interrupted before the first step: nothing was trained, and the new run folder "
                         f"{tmp_path / 'runs' / 'new'} was removed")
    (tmp_path / "mine").mkdir()  # an empty folder the user made: kept, emptied of what the start wrote
    cfg = tiny_config(tmp_path / "mine", tiny_text_file, train=dict(max_iters=3))
    with pytest.raises(KeyboardInterrupt) as e:
        bare_train(cfg, callbacks=[_CtrlCAtStart()], log=lines.append)
    assert (tmp_path / "mine").is_dir() and not any((tmp_path / "mine").iterdir())
    assert str(e.value) == (f"interrupted before the first step: nothing was trained, and what it wrote into the "
                            f"folder {tmp_path / 'mine'} (empty before) was removed")
    bare_train(cfg, log=lines.append)  # the same command then trains (it was refused as an existing run)
    assert (tmp_path / "mine" / "summary.json").is_file()


def test_a_ctrl_c_before_the_first_step_of_an_overwrite_puts_the_old_run_back(tmp_path, tiny_text_file):
    """A fresh-install pass: Ctrl-C/SIGTERM while an --overwrite computed the baselines of a 20 MB corpus (after the
    start, before step 1) left RUN holding the new run's config.json and metrics.jsonl; the old run had been deleted
    at the end of the start. It is deleted only once the first step is near; a stop before that puts it back."""
    old = tmp_path / "run"
    bare_train(tiny_config(old, tiny_text_file, train=dict(max_iters=2)), log=lambda s: None)
    before = {p.relative_to(old).as_posix(): p.read_bytes() for p in old.rglob("*") if p.is_file()}
    lines = []
    with pytest.raises(KeyboardInterrupt) as e:
        bare_train(tiny_config(old, tiny_text_file, model=dict(n_embd=16), train=dict(max_iters=3)),
                   callbacks=[_CtrlCAtStart()], overwrite=True, log=lines.append)
    assert {p.relative_to(old).as_posix(): p.read_bytes() for p in old.rglob("*") if p.is_file()} == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing left aside
    assert not any("interrupted" in x for x in lines)  # said once, by the exception (the CLI's stderr line)
    assert str(e.value) == (f"interrupted before the first step: nothing was trained, and the run --overwrite was "
                         f"replacing is back in {old}")
    bare_train(tiny_config(old, tiny_text_file, model=dict(n_embd=16), train=dict(max_iters=3)), overwrite=True,
               log=lambda s: None)  # trained through: the old run is gone, the new one in its place
    assert json.loads((old / "config.json").read_text())["model"]["n_embd"] == 16
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.slow  # over a second: the fast tier stays under 3 min
def test_a_sigterm_while_an_overwrite_starts_puts_the_old_run_back(tmp_path, tiny_text_file, capsys):
    """A new user's pass: SIGTERM (timeout, a job scheduler) while `train --overwrite` was starting ended the process
    at once: no word, exit 143, the run folder empty and the old run left in a hidden .NAME.replaced-* folder that no
    command named. SIGTERM now unwinds as Ctrl-C does: the old run is back, one line, exit 143."""
    import subprocess
    import sys

    from conftest import tiny_cli_args

    old = tmp_path / "run"
    bare_train(tiny_config(old, tiny_text_file, train=dict(max_iters=2)), log=lambda s: None)
    before = {p.relative_to(old).as_posix(): p.read_bytes() for p in old.rglob("*") if p.is_file()}
    code = ("import os, signal, sys; import depthlab.trainer as t; from depthlab.cli import main\n"
            "real = t.Trainer._setup\n"
            "def setup(self, *a, **k):\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    return real(self, *a, **k)\n"
            "t.Trainer._setup = setup\n"
            "sys.exit(main(sys.argv[1:]))\n")
    argv = ["train", *tiny_cli_args(tiny_text_file, old, model__n_embd=16), "--overwrite"]
    p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    assert p.returncode == 143 and p.stderr.splitlines()[-1] == "depthlab: terminated (SIGTERM)", p.stderr
    assert not [q.name for q in tmp_path.iterdir() if q.name.startswith(".")]  # no hidden .run.replaced-* left
    assert {q.relative_to(old).as_posix(): q.read_bytes() for q in old.rglob("*") if q.is_file()} == before
    # a SIGKILL there cannot be unwound: the commands then name where the old run is and the mv that puts it back
    from depthlab.cli import main

    (tmp_path / ".run.replaced-abc").mkdir()
    old.rename(tmp_path / ".run.replaced-abc" / "run")
    old.mkdir()
    for argv in (["sample", str(old)], ["diagnose", str(old)], ["train", "--resume", str(old)]):
        assert main(argv) == 2
        assert (f"{old} holds no run, but the run that was there is in {tmp_path / '.run.replaced-abc' / 'run'}"
                in capsys.readouterr().err), argv


def test_the_done_line_says_how_much_of_the_val_split_a_capped_final_validation_read(tmp_path):
    """A new user's 60 MB corpus: the final validation read 1,048,576 of 6,291,409 val tokens and the done line
    called it the whole val split."""
    from depthlab.trainer import done_line

    summary = {"best_val_loss": 2.7357, "best_val_loss_se": 0.01, "best_val_bpc": 3.947, "best_val_step": 30,
               "final_step": 30, "wall_time_s": 12.0}
    part = {"val_loss": 2.7357, "tokens": 1048576, "of_tokens": 6291409}
    assert "(1,048,576 of the val split's 6,291,409 tokens 2.7357)" in done_line(summary, part, tmp_path)
    whole = {"val_loss": 2.7357, "tokens": 111538, "of_tokens": 111538}
    assert "(whole val split 2.7357)" in done_line(summary, whole, tmp_path)


class _CtrlCAtTheEnd:
    """A Ctrl-C after the last step's evaluation, while the final validation reads the val split (minutes on a
    large corpus). (One before that evaluation ends it, and the run stops at a checkpoint: test_findings_s55.)"""

    def __init__(self, last: int):
        self.last = last

    def on_eval(self, trainer, info, rec):
        if info.step == self.last:
            import signal

            trainer.request_stop(signal.SIGINT)

    def __getattr__(self, name):
        return lambda *a, **k: None


def test_a_ctrl_c_during_the_final_validation_skips_it_and_says_so(tmp_path, tiny_text_file):
    """A new user's pass: SIGINT during the final validation of a 60 MB corpus was ignored (5.4 s more, exit 0,
    a full final_validation in summary.json, which README says is null for an interrupted run)."""
    import signal

    from depthlab.trainer import Interrupted

    lines = []
    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4))
    with pytest.raises(Interrupted) as e:  # the exit says the signal came (130; it was 0), after the done line
        bare_train(cfg, callbacks=[_CtrlCAtTheEnd(4)], log=lines.append)
    run = e.value.run_dir
    assert e.value.exit_code == 128 + signal.SIGINT and lines[-1].startswith("done: best val ")
    assert str(e.value) == ("interrupted during the final validation, after the last step (4): the run is finished "
                            f"(summary.json written) and its final_validation is null; to run it: "
                            f"depthlab.train(RunConfig.from_run({str(run)!r}))")  # a Python caller's words (s60)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["final_step"] == 4 and summary["final_validation"] is None and summary["final_validation_cut"]
    said = [x for x in lines if x.startswith("final validation")]
    assert len(said) == 1 and said[0].startswith("final validation stopped by a signal after ") and said[0].endswith(
        "s: skipped (summary.json's final_validation is null); the training itself ended at step 4, its checkpoints "
        "written"), lines
    # a new user's sweep stayed "interrupted" for good: its rerun skipped the run (summary.json) and a resume said
    # "nothing to train"; the resume runs the final validation now, and trains nothing
    from depthlab.config import RunConfig

    again = []
    bare_train(RunConfig.from_run(run), log=again.append)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["final_step"] == 4 and summary["final_validation"]["step"] == summary["best_val_step"]
    assert summary["final_validation_cut"] is False and not [x for x in again if x.startswith("step ")], again
    assert not any("nothing to train" in x for x in again), again


def test_split_loss_gives_up_between_batches_when_asked():
    import numpy as np

    from depthlab.evaluation import Stopped, split_loss
    from depthlab.model import GPT
    from depthlab.config import ModelConfig

    model = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=5))
    tokens, chars = np.zeros(100, dtype=np.int64), np.ones(5, dtype=np.int64)
    asked = []
    with pytest.raises(Stopped):
        split_loss(model, tokens, 8, 2, chars, torch.device("cpu"), stop=lambda: asked.append(1) or len(asked) > 3)
    assert len(asked) == 4  # three batches read, the fourth not
    assert split_loss(model, tokens, 8, 2, chars, torch.device("cpu"), stop=lambda: False).tokens == 99
