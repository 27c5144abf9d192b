"""A new user's findings (round nu40): a gradient norm that overflowed float32 is named as that, not as a
non-finite gradient; an out_dir under a file names the file; a resume with no intact step checkpoint names the
ways forward (--init-from its intact best, else the run again from its config.json); one autotune candidate is
"1 candidate"."""

import re

import pytest

from conftest import run_cli, tiny_cli_args

from depthlab.training import autotune as at


def test_an_overflowed_gradient_norm_is_not_called_a_non_finite_gradient(tmp_path, tiny_text_file, capsys):
    # was: "non-finite gradient at step 2 (loss ..., first non-finite gradient: (none: every gradient is finite but
    # their total norm overflowed float32), lr ...": the headline said a gradient was non-finite, then that none was
    run = tmp_path / "run"
    args = tiny_cli_args(tiny_text_file, run, train__learning_rate=1e9, train__warmup_iters=0, model__n_layer=1,
                         model__block_size=32)
    rc, _, err = run_cli(capsys, "train", *args)
    assert rc == 3, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("depthlab: error: the gradient norm overflowed float32 at step 2 (every gradient is "
                           "finite; loss "), line
    assert "non-finite gradient" not in line and "(none" not in line
    assert line.endswith(f"); lower --train.learning_rate (AdamW: embeddings, head, gains; now 1e+09) or "
                         "train.muon_lr (Muon: the blocks' matrices; now 0.01), or raise --train.warmup_iters; this "
                         f"run's checkpoints in {run} (the latest at step 0) are untouched"), line


def test_an_out_dir_under_a_file_names_the_file(tmp_path, tiny_text_file, capsys):
    # was: "cannot create train.out_dir .../afile/sub: Not a directory; choose a writable folder"
    (tmp_path / "afile").write_text("mine")
    for out in (tmp_path / "afile" / "sub", tmp_path / "afile" / "sub" / "deeper"):
        rc, out_text, err = run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, out))
        assert rc == 2 and out_text == ""
        assert err == (f"depthlab: error: cannot create train.out_dir {out}: {tmp_path / 'afile'} is a file, not a "
                       f"folder; choose a --train.out_dir that is not under the file {tmp_path / 'afile'}\n"), err
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.mark.slow
def test_a_resume_with_no_intact_step_checkpoint_names_the_ways_forward(tmp_path, tiny_text_file, capsys):
    # was: "no intact step checkpoint in RUN/checkpoints: each one listed in manifest.json has a file that is missing
    # or fails its sha256 check", with no way forward
    run = tmp_path / "run"
    assert run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, run))[0] == 0
    for f in (run / "checkpoints").glob("step-*.safetensors"):
        f.unlink()
    head = (f"depthlab: error: cannot resume {run}: no intact step checkpoint in {run / 'checkpoints'}: each one "
            "listed in manifest.json has a file that is missing or fails its sha256 check (step-000020.safetensors "
            "missing, step-000015.safetensors missing); restore its checkpoints/ "
            "from a copy of the run, ")
    rc, out, err = run_cli(capsys, "train", "--resume", str(run), "--train.max_iters", "30")
    assert rc == 2 and out == ""
    assert err == (f"{head}or start a new run from its best weights (best.safetensors is intact): depthlab train "
                   f"-c {run / 'config.json'} --init-from {run} --train.resume false --train.out_dir NEW_DIR\n"), err
    said = err.rsplit(": depthlab ", 1)[1].replace("NEW_DIR", str(tmp_path / "new")).split()
    rc, out, err = run_cli(capsys, *said, "--train.max_iters", "5", "--train.eval_interval", "5")  # as named: works
    assert rc == 0, err
    best = run / "checkpoints" / "best.safetensors"
    best.write_bytes(best.read_bytes()[:100])
    rc, out, err = run_cli(capsys, "train", "--resume", str(run), "--train.max_iters", "30")
    assert rc == 2 and out == ""
    assert err == (f"{head}or start it again from step 0 in a new folder (its best.safetensors is missing or damaged "
                   f"too, so --init-from cannot reuse its weights): depthlab train -c {run / 'config.json'} "
                   "--train.resume false --train.out_dir NEW_DIR\n"), err
    said = err.rsplit(": depthlab ", 1)[1].replace("NEW_DIR", str(tmp_path / "again")).split()
    rc, out, err = run_cli(capsys, *said, "--train.max_iters", "5", "--train.eval_interval", "5")
    assert rc == 0, err


def test_one_timed_candidate_is_one_candidate(tmp_path, tiny_text_file, capsys, monkeypatch):
    # was: "auto settings: timing 1 candidates of ..." and "...; 1 candidates, measured in 1.0 s, ..."
    monkeypatch.setenv("DEPTHLAB_AUTOTUNE", "on")  # measured although the run is short
    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "cache"))  # nothing cached: it is timed here
    monkeypatch.setattr(at.os, "cpu_count", lambda: 1)  # threads timed (0): 1 is the one count worth timing
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    args = tiny_cli_args(tiny_text_file, tmp_path / "run", train__dtype="float32", train__attention="sdpa",
                         train__threads=0, train__max_iters=5)  # dtype, attention given: one setting to time
    rc, out, err = run_cli(capsys, "train", *args)
    assert rc == 0, err
    said = [x for x in (out + err).splitlines() if x.startswith("auto settings:")]
    # and then (nu47): one possible setting is not timed at all ("1 candidate, measured in 1.0 s" measured nothing)
    assert len(said) == 1 and re.fullmatch(r"auto settings: 1 thread, float32, sdpa, \w+ \(train\.dtype, "
                                           r"train\.attention as given; only one setting possible, not timed\)",
                                           said[0]), said
