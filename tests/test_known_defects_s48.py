"""Defects listed as seen-not-fixed in earlier closing notes, each fixed with the failing case here."""

from __future__ import annotations

import shlex

from conftest import cli_err, tiny_cli_args
from test_known_defects_s47 import _tiny_run


def test_init_from_and_resume_refusals_quote_a_run_path_with_a_space(tmp_path, capsys, tiny_text_file):
    # was: "--init-from /x/r 1: its weights do not fit ..." and "use --resume /x/r 1 to continue it": pasted into a
    # shell, the path splits in two
    run = _tiny_run(capsys, tiny_text_file, tmp_path / "r 1")
    q = shlex.quote(str(run))
    err = cli_err(capsys, "train", *tiny_cli_args(tiny_text_file, tmp_path / "new"), "--init-from", str(run),
                  "--model.n_embd", "16")
    assert err.startswith(f"depthlab: error: --init-from {q}: its weights do not fit this model"), err
    err = cli_err(capsys, "train", *tiny_cli_args(tiny_text_file, run))
    assert f"use --resume {q} to continue it" in err, err
    other = str(tmp_path / "x y")
    err = cli_err(capsys, "train", "--resume", str(run), "--train.out_dir", other)
    assert err == (f"depthlab: error: --resume {q} continues that run in place; drop --train.out_dir "
                   f"{shlex.quote(other)} (or use --init-from {q} --train.out_dir {shlex.quote(other)} for a new "
                   "run)\n"), err
    assert not (tmp_path / "new").exists() and not (tmp_path / "x y").exists()


def test_export_into_a_run_directory_is_named_as_one(tmp_path, capsys, tiny_text_file):
    # was: "... is not an export directory (it holds .lock, baselines.json, checkpoints, ...)"
    run = _tiny_run(capsys, tiny_text_file, tmp_path / "run")
    before = sorted(p.name for p in run.iterdir())
    err = cli_err(capsys, "export", str(run), str(run))
    assert err == (f"depthlab: error: export: {run} is a depthlab run directory, not an export directory; choose "
                   "another OUT_DIR (a new or empty folder)\n"), err
    assert sorted(p.name for p in run.iterdir()) == before
