"""One process trains a run folder at a time: RUN/.lock (training/runlock.py)."""
import subprocess
import sys

from conftest import assert_clean_error, run_cli, tiny_cli_args, weights_hash

from depthlab.training import runlock

HOLD = ("import sys, time; from depthlab.training import runlock; runlock.hold(sys.argv[1]); "
        "print('held', flush=True); time.sleep(60)")


def _holder(run):
    """A second process that holds the lock of ``run`` (as a training process does) until killed."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_run_being_trained_refuses_resume_and_overwrite_then_frees_when_its_process_dies(
        tmp_path, tiny_text_file, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, run))[0] == 0
    before = (weights_hash(run), (run / "metrics.jsonl").read_text(), (run / "config.json").read_text())
    p = _holder(run)
    try:
        for argv in (["--resume", str(run), "--train.max_iters", "30"],
                     [*tiny_cli_args(tiny_text_file, run), "--overwrite"]):
            rc, out, err = run_cli(capsys, "train", *argv)
            assert_clean_error(rc, err, f"{run} is being trained by another process (pid {p.pid})",
                               "another --train.out_dir")
            assert out == ""
        assert (weights_hash(run), (run / "metrics.jsonl").read_text(), (run / "config.json").read_text()) == before
    finally:
        p.kill()  # SIGKILL: the kernel drops the lock, nothing stale is left
        p.wait()
    rc, out, err = run_cli(capsys, "train", "--resume", str(run), "--train.max_iters", "30")
    assert rc == 0 and "resuming" in out


def test_the_lock_is_exclusive_between_processes_and_kept_within_one(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    runlock.hold(run)
    runlock.hold(run)  # this process holds it already: kept
    code = ("import sys; from depthlab.training import runlock; from depthlab.errors import DepthlabError\n"
            "try:\n    runlock.hold(sys.argv[1])\nexcept DepthlabError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True).stdout
    assert out.strip() == (f"{run} is being trained by another process (pid {__import__('os').getpid()}): "
                           "wait for it to end, or train into another --train.out_dir")
    runlock.release(run)
    out = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True).stdout
    assert out == ""


def test_a_process_that_exits_holding_a_lock_closes_it_without_a_resource_warning(tmp_path):
    # a resume that ended in an error or "nothing to train" printed "sys:1: ResourceWarning: unclosed file
    # <... name='RUN/.lock'>" after its one line
    run = tmp_path / "run"
    run.mkdir()
    code = "import sys; from depthlab.training import runlock; runlock.hold(sys.argv[1]); print('held')"
    p = subprocess.run([sys.executable, "-W", "default", "-c", code, str(run)], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout == "held\n" and "ResourceWarning" not in p.stderr, p.stderr
