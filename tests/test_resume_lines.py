"""The lines a resume prints are true of the session: no ``resuming`` when nothing resumes, no ``best val inf``."""
from pathlib import Path
from types import SimpleNamespace

from conftest import run_cli, tiny_cli_args

from depthlab.training.checkpointer import Checkpointer


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
    assert _line(4.17543, max_iters=100) == []
