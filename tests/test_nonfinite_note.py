"""A run stopped by a non-finite loss says truly what its folder holds (--overwrite's replaced run included)."""
from conftest import run_cli, tiny_cli_args

NAN_MODEL = '''
from torch import nn


class NaN(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, 16)
        self.head = nn.Linear(16, vocab_size)

    def forward(self, idx):
        x = self.tok(idx)
        return self.head(x / (x - x))
'''


def _nan_run(capsys, text, run, *extra):
    m = run.parent / "m.py"
    m.write_text(NAN_MODEL)
    argv = ["train", "--data.path", str(text), "--model.source", f"{m}:NaN", "--model.block_size", "16",
            "--train.batch_size", "8", "--train.max_iters", "20", "--train.eval_interval", "5",
            "--train.eval_iters", "2", "--train.warmup_iters", "2", "--train.tensorboard", "false",
            "--train.out_dir", str(run), *extra]
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 3, err  # the run stopped (not bad input)
    return err.strip().splitlines()[-1]


def test_overwrite_then_nan_does_not_call_the_replaced_checkpoints_untouched(tmp_path, tiny_text_file, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, run))[0] == 0
    line = _nan_run(capsys, tiny_text_file, run, "--overwrite")
    assert line.startswith("depthlab: error: non-finite loss at step 1")
    # was: "--overwrite replaced the run held before (its checkpoints are gone)", which stayed hidden in a
    # .run.replaced-* folder, never said, even after the process ended (its new run had a step-0 checkpoint)
    assert line.endswith(f"; no step has trained in place of the run {run} held before: it is put back there as it "
                         "was (--overwrite replaces it once a step has trained), and this run's files are removed")
    assert (run / "checkpoints" / "step-000020.safetensors").exists()  # the old run's last one: back
    assert sorted(p.name for p in run.parent.iterdir() if p.name.startswith(".")) == []


def test_a_new_run_stopped_by_nan_names_its_own_checkpoints(tmp_path, tiny_text_file, capsys):
    run = tmp_path / "new"
    line = _nan_run(capsys, tiny_text_file, run)
    assert line.endswith(f"; this run's checkpoints in {run} (the latest at step 0) are untouched")
    assert "--overwrite" not in line
