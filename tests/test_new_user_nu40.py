"""A new user's findings (round nu40): a gradient norm that overflowed float32 is named as that, not as a
non-finite gradient; ..."""

from conftest import run_cli, tiny_cli_args


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
    assert line.endswith(f"); lower train.learning_rate or raise train.warmup_iters; this run's checkpoints in {run} "
                         "(the latest at step 0) are untouched"), line
