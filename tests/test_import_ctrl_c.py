"""Ctrl-C while the learner's model file is imported is an interruption ("depthlab: interrupted", 130), not a
KeyboardInterrupt blamed on the file: a new user's `timeout -s INT 8 depthlab train --model.source slowimport.py:M`
(a file that sleeps at import) was told "the model's code raised KeyboardInterrupt itself (slowimport.py:4; no
Ctrl-C was pressed)", exit 2."""

import signal

import pytest
from conftest import TINY_TEXT
from depthlab.cli import main

# the Ctrl-C comes from outside (as `timeout -s INT` sends it) while the file's module-level code runs
SLOW_IMPORT = ("import os, signal, time\nimport torch.nn as nn\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(20)\n"
               "class M(nn.Module):\n    def forward(self, idx):\n        return idx\n")


@pytest.fixture
def slow_file(tmp_path):
    d = tmp_path / "my models"
    d.mkdir()
    (d / "slowimport.py").write_text(SLOW_IMPORT)
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    return d / "slowimport.py"


@pytest.mark.parametrize("command", ["check", "train", "sweep"])
def test_ctrl_c_while_the_model_file_imports_is_interrupted_130(slow_file, capsys, command):
    handler = signal.getsignal(signal.SIGINT)
    text, out = slow_file.parent.parent / "t.txt", slow_file.parent.parent / "run"
    argv = {"check": ["check", f"{slow_file}:M"],
            "train": ["train", "--model.source", f"{slow_file}:M", "--data.path", str(text),
                      "--train.max_iters", "2", "--train.out_dir", str(out)],
            "sweep": ["sweep", "--grid", 'model.init=[{"a":1},{"a":2}]', "--model.source", f"{slow_file}:M",
                      "--data.path", str(text), "--dry_run"]}[command]
    try:
        assert main(argv) == 130
    finally:
        signal.signal(signal.SIGINT, handler)
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == "depthlab: interrupted", err
    assert "error" not in err and "no Ctrl-C" not in err


def test_a_keyboardinterrupt_the_file_raises_at_import_is_still_its_own(tmp_path, capsys):
    """No Ctrl-C came: the file's own `raise KeyboardInterrupt` at import is still one error line (exit 2)."""
    (tmp_path / "ki.py").write_text("raise KeyboardInterrupt\n")
    assert main(["check", f"{tmp_path / 'ki.py'}:M"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("depthlab: error: ") and "raised KeyboardInterrupt itself (no Ctrl-C was pressed)" in err
