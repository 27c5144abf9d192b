"""The lines a resume prints are true of the session: no ``resuming`` when nothing resumes, no ``best val inf``."""
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import run_cli, tiny_cli_args

from depthlab.training.checkpointer import Checkpointer


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_resume_with_nothing_to_train_does_not_say_resuming(tmp_path, tiny_text_file, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, run))[0] == 0
    rc, out, err = run_cli(capsys, "train", "--resume", str(run), "--train.max_iters", "10")
    assert rc == 0 and "resuming" not in out + err
    assert "nothing to train: the run is at step 20 and train.max_iters is 10" in err
    rc, out, err = run_cli(capsys, "train", "--resume", str(run), "--train.max_iters", "25")
    assert rc == 0 and f"resuming {run} from step 20 (best val " in out


def _line(best_val, step=157, max_iters=300):
    """What a resume at ``step`` of a run whose best val loss is ``best_val`` prints, to ``max_iters``."""
    lines = []
    run = SimpleNamespace(step=step, best_val=best_val, schedule=SimpleNamespace(max_iters=max_iters))
    runtime = SimpleNamespace(device=SimpleNamespace(type="cpu"))
    Checkpointer(Path("RUN"), runtime, lines.append).announce_resume(run)
    return lines


def test_the_resume_line_states_the_best_val_loss_as_it_is():
    assert _line(4.17543) == ["resuming RUN from step 157 (best val 4.1754)"]
    assert _line(float("inf")) == ["resuming RUN from step 157 (no finite val loss yet)"]
    # at its last step too (the caller, the trainer, leaves out a resume with nothing to train): one whose last
    # evaluation a signal cut evaluates that step again, and says it resumes
    assert _line(4.17543, max_iters=100) == ["resuming RUN from step 157 (best val 4.1754)"]


@pytest.mark.slow  # about a second: the fast tier stays under 3 min
def test_a_resume_that_falls_back_keeps_the_later_best_and_says_so(tmp_path, tiny_text_file, capsys):
    import hashlib
    import json

    run = tmp_path / "run"
    ck = run / "checkpoints"
    assert run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, run))[0] == 0
    best = json.loads((ck / "manifest.json").read_text())["best"]
    assert best["step"] == 20  # the newest checkpoint holds the run's best
    weights = (ck / "best.safetensors").read_bytes()
    with open(ck / "step-000020.state.pt", "r+b") as f:
        f.truncate(100)  # the newest checkpoint is damaged: the resume falls back to step 15
    rc, out, err = run_cli(capsys, "train", "--resume", str(run), "--train.max_iters", "16")
    assert rc == 0, err
    line = next(s for s in out.splitlines() if s.startswith("resuming"))
    assert line.startswith(f"resuming {run} from step 15 (best val ")
    assert line.endswith(f" as of this checkpoint; the run's best is val {best['val_loss']:.4f} at step 20, after it)")
    kept = ck / "best-step-000020.safetensors"
    assert (f"warning: best.safetensors (step 20, val {best['val_loss']:.4f}) is later than the checkpoint resumed "
            f"from (step 15); kept as {kept} (this session's evaluations write a new best.safetensors)") in err
    assert kept.read_bytes() == weights
    manifest = json.loads((ck / "manifest.json").read_text())
    assert manifest["kept"] == [{"step": 20, "val_loss": best["val_loss"],
                                 "files": {kept.name: hashlib.sha256(weights).hexdigest()}}]
    assert run_cli(capsys, "train", "--resume", str(run), "--train.max_iters", "30")[0] == 0
    assert kept.read_bytes() == weights  # never rotated away


def test_a_source_runs_unset_model_init_is_shown_as_none_not_as_gpt2():
    """A new user's pass: resuming a model.source run (no --model.init) with one said "model.init 'gpt2' ->
    {'n_layer': 3}": gpt2 is depthlab's GPT's init scheme, which that run never used."""
    from depthlab.resume_config import resume_changes

    old = {"model": {"source": "mine.py:MyGPT", "init": "gpt2"}}
    refused, _ = resume_changes(old, {"model": {"source": "mine.py:MyGPT", "init": {"n_layer": 3}}})
    assert refused == ['model.init (none: the model\'s own defaults) -> {"n_layer": 3}']
    refused, _ = resume_changes({"model": {"init": "gpt2"}}, {"model": {"init": "torch"}})
    assert refused == ["model.init 'gpt2' -> 'torch'"]  # depthlab's own GPT: the scheme's name, as before
    # a source run's config.json leaves model.init out (config.model_record): said the same, not "(absent)"
    refused, _ = resume_changes({"model": {"source": "mine.py:MyGPT"}},
                                {"model": {"source": "mine.py:MyGPT", "init": {"n_layer": 3}}})
    assert refused == ['model.init (none: the model\'s own defaults) -> {"n_layer": 3}']
