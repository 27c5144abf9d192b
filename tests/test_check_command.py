"""Every ``depthlab check SRC`` a run prints names its model's file by a path that works from any folder."""
import json
from pathlib import Path

import pytest

from depthlab.cli import main
from test_usermodel import MODEL

ODD = '''
import torch
from base import MyGPT

class NaNOddBatch(MyGPT):
    def forward(self, idx):
        out, _ = super().forward(idx)
        return out * float('nan') if idx.shape[0] != 4 else out
'''


def _train(tmp_path, tiny_text_file, monkeypatch, capsys):
    models = tmp_path / "models"
    models.mkdir()
    (models / "base.py").write_text(MODEL)
    (models / "mine.py").write_text(ODD)
    monkeypatch.chdir(models)  # trained from the model's folder, by its relative name
    rc = main(["train", "--model.source", "mine.py:NaNOddBatch", "--data.path", str(tiny_text_file),
               "--model.block_size", "16", "--train.out_dir", str(tmp_path / "r"), "--train.batch_size", "4",
               "--train.max_iters", "20", "--train.eval_interval", "10", "--train.eval_iters", "2",
               "--train.max_time", "0", "--train.progress", "false", "--train.tensorboard", "false",
               "--train.final_validation", "true"])
    err = capsys.readouterr().err
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return rc, err, models / "mine.py"


def test_check_advice_names_the_original_file_by_its_absolute_path(tmp_path, tiny_text_file, monkeypatch, capsys):
    rc, err, original = _train(tmp_path, tiny_text_file, monkeypatch, capsys)
    want = f"depthlab check {original}:NaNOddBatch tests the forward"
    assert rc == 3 and want in err and "depthlab check mine.py" not in err
    run = str(tmp_path / "r")
    assert main(["diagnose", run]) == 0
    assert want in capsys.readouterr().out
    assert main(["diagnose", run, "--json"]) == 0
    remedies = [f["remedy"] for f in json.loads(capsys.readouterr().out)["findings"]]
    assert any(want in r for r in remedies)
    assert main(["sample", run, "--prompt", "Speak", "--max-new-tokens", "4"]) == 2
    assert f"depthlab check {original}:NaNOddBatch tests the forward;" in capsys.readouterr().err


def test_check_advice_points_at_the_runs_copy_when_the_original_is_gone(tmp_path, tiny_text_file, monkeypatch,
                                                                        capsys):
    rc, _, original = _train(tmp_path, tiny_text_file, monkeypatch, capsys)
    original.unlink()
    assert main(["diagnose", str(tmp_path / "r")]) == 0
    copy = Path(tmp_path / "r" / "source" / "mine.py").resolve()
    assert (f"depthlab check {copy}:NaNOddBatch (the run's copy: the original {original} is gone) tests the forward"
            in capsys.readouterr().out)
    original.write_text(ODD + "\n# edited\n")
    assert main(["diagnose", str(tmp_path / "r")]) == 0
    assert f"the original {original} has changed since this run" in capsys.readouterr().out


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_json_output_stays_one_object_when_the_models_file_prints(tmp_path, tiny_text_file, capsys):
    """A new user's pass: a learner's file that prints (at import, in forward) put its lines before the JSON object
    of `check --json` and `context --json` on stdout, so json.loads of the output failed."""
    from test_usermodel import _cfg
    from depthlab.trainer import Trainer
    from conftest import QUIET

    (tmp_path / "chatty.py").write_text("print('loading my model')\n" + MODEL.replace(
        "        for b in self.blocks:", "        print('forward', tuple(idx.shape))\n        for b in self.blocks:"))
    Trainer(_cfg(tmp_path / "r", tiny_text_file, f"{tmp_path / 'chatty.py'}:MyGPT", max_iters=2, eval_interval=2),
            **QUIET).fit()
    capsys.readouterr()
    assert main(["context", str(tmp_path / "r"), "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["loss_by_position"] and "loading my model\nforward (" in out.err
    assert main(["check", f"{tmp_path / 'chatty.py'}:MyGPT", "--init", '{"n_layer": 1}', "--data.path",
                 str(tiny_text_file), "--block_size", "8", "--json"]) in (0, 1)
    out = capsys.readouterr()
    assert [c["rule"] for c in json.loads(out.out)["checks"]][:2] == ["shape", "vocab"]
    assert "loading my model\nforward (" in out.err


def test_the_check_command_advice_is_shell_quoted_for_a_folder_with_a_space(tmp_path):
    """A new user's pass: the advice read `depthlab check /x/my models/mine.py:MyGPT`, two words in a shell."""
    import shlex

    from depthlab.usermodel import check_command

    f = tmp_path / "my models" / "mine.py"
    f.parent.mkdir()
    f.write_text(MODEL)
    cmd = check_command(f"{f}:MyGPT")
    assert cmd == f"depthlab check '{f}:MyGPT'" and shlex.split(cmd)[2] == f"{f}:MyGPT"
    plain = tmp_path / "mine.py"
    assert check_command(f"{plain}:MyGPT") == f"depthlab check {plain}:MyGPT"  # nothing to quote: as typed
