"""One process trains a run folder at a time: RUN/.lock (training/runlock.py)."""
import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import assert_clean_error, run_cli, tiny_cli_args, weights_hash

from depthlab.training import runlock

HOLD = ("import sys, time; from depthlab.training import runlock; runlock.hold(sys.argv[1]); "
        "print('held', flush=True); time.sleep(60)")


def _holder(run):
    """A second process that holds the lock of ``run`` (as a training process does) until killed."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


@pytest.mark.slow  # about a second: the fast tier stays under 3 min
def test_a_run_being_trained_refuses_resume_and_overwrite_then_frees_when_its_process_dies(
        tmp_path, tiny_text_file, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, run))[0] == 0
    before = (weights_hash(run), (run / "metrics.jsonl").read_text(), (run / "config.json").read_text())
    p = _holder(run)
    try:
        busy = f"depthlab: error: {run} is being trained by another process (pid {p.pid}): wait for it to end"
        # a resume is not told to train into another --train.out_dir (that would be a new run, not this one resumed)
        for argv, after in ((["--resume", str(run), "--train.max_iters", "30"],
                             "; then --resume it again: it resumes from the latest checkpoint that process leaves"),
                            ([*tiny_cli_args(tiny_text_file, run), "--overwrite"],
                             ", or train into another --train.out_dir")):
            rc, out, err = run_cli(capsys, "train", *argv)
            assert rc == 2 and err == f"{busy}{after}\n", err
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


def _snapshot(run):
    """Every path under ``run`` with its bytes (files) and mtime, and the folder's own mtime (a file made or deleted
    changes it)."""
    return run.stat().st_mtime_ns, {str(p.relative_to(run)): (p.read_bytes() if p.is_file() else None,
                                                             p.stat().st_mtime_ns) for p in sorted(run.rglob("*"))}


@pytest.mark.slow
def test_a_refused_resume_or_overwrite_changes_nothing_in_the_run_folder_not_even_its_lock_file(
        tmp_path, tiny_text_file, capsys):
    # each of these wrote its pid into RUN/.lock (made it where there was none) before refusing
    run = tmp_path / "run"
    assert run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, run))[0] == 0
    assert (run / ".lock").read_text() == f"{__import__('os').getpid()}\n"
    (run / ".lock").write_text("12345\n")  # a previous process's: its bytes and mtime must stay
    refusals = [(["--resume", str(run)], "nothing to train"),
                (["--resume", str(run), "--model.n_layer", "3"], "cannot resume"),
                ([*tiny_cli_args(tiny_text_file, run), "--overwrite"], "depthlab did not write (notes.txt)")]
    for lock in (True, False):
        if not lock:
            (run / ".lock").unlink()
        (run / "notes.txt").write_text("mine")
        before = _snapshot(run)
        for argv, said in refusals:
            rc, out, err = run_cli(capsys, "train", *argv)
            assert rc != 0 or "nothing to train" in err, err
            assert said in err, err
            assert _snapshot(run) == before, argv
        (run / "notes.txt").unlink()
        runlock.release(run)
    rc, out, err = run_cli(capsys, "train", "--resume", str(run), "--train.max_iters", "30")
    assert rc == 0 and (run / ".lock").read_text() == f"{__import__('os').getpid()}\n"  # a resume that trains: named


def test_a_new_run_into_a_folder_another_process_is_training_gets_the_lock_line(tmp_path, tiny_text_file, capsys):
    # in a run's first seconds (no config.json yet) a second train said "not a depthlab run directory", and once
    # config.json existed "already exists; use --resume RUN", which the lock then refused
    run = tmp_path / "run"
    run.mkdir()
    (run / "tb").mkdir()  # a starting run's first file, before its config.json
    p = _holder(run)
    try:
        for config in (False, True):
            if config:
                (run / "config.json").write_text("{}")
            before = _snapshot(run)
            for extra in ([], ["--overwrite"]):
                rc, out, err = run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, run), *extra)
                assert_clean_error(rc, err, f"{run} is being trained by another process (pid {p.pid}): wait for it "
                                            "to end, or train into another --train.out_dir")
                assert _snapshot(run) == before
    finally:
        p.kill()
        p.wait()


def _flock_pids(folder):
    """The pids /proc/locks lists as holding a flock on ``folder`` (Linux)."""
    st = os.stat(folder)
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    with open("/proc/locks") as f:
        return [int(p[4]) for p in map(str.split, f) if len(p) > 5 and p[1] == "FLOCK" and p[5] == where]


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="reads /proc/locks (Linux)")
def test_under_torchrun_rank_0_alone_holds_the_lock_and_a_plain_train_is_refused(tmp_path, tiny_text_file, capsys):
    torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
    run = tmp_path / "run"
    argv = tiny_cli_args(tiny_text_file, run, train__max_iters=100000, train__eval_interval=1000, train__grad_accum=2,
                         train__device="cpu", train__dtype="float32", train__max_time=0)
    with open(tmp_path / "err", "w") as log:
        p = subprocess.Popen([torchrun, "--standalone", "--nproc_per_node", "2", "-m", "depthlab", "train", *argv],
                             stdout=subprocess.DEVNULL, stderr=log, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        deadline = time.time() + 120
        while not (run / ".lock").is_file() and p.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert (run / ".lock").is_file(), (tmp_path / "err").read_text()[-3000:]
        pid = int((run / ".lock").read_text())
        assert _flock_pids(run) == [pid]  # one holder: the other rank takes no lock on the folder
        environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
        env = dict(kv.split("=", 1) for kv in environ if "=" in kv)
        assert env["RANK"] == "0" and env["WORLD_SIZE"] == "2"
        before = _snapshot(run)[1]["config.json"]
        for cmd, after in ((["--resume", str(run), "--train.max_iters", "200000"], "; then --resume it again"),
                           (tiny_cli_args(tiny_text_file, run), ", or train into another --train.out_dir"),
                           ([*tiny_cli_args(tiny_text_file, run), "--overwrite"],
                            ", or train into another --train.out_dir")):
            rc, out, err = run_cli(capsys, "train", *cmd)
            assert_clean_error(rc, err, f"{run} is being trained by another process (pid {pid}): wait for it to end"
                                        f"{after}")
        assert (run / "config.json").read_bytes() == before[0] and p.poll() is None
    finally:
        p.terminate()  # torchrun passes SIGTERM on to its workers (in sessions of their own) and waits for them
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_a_filesystem_that_cannot_lock_a_folder_trains_unguarded_with_one_warning(tmp_path, monkeypatch, capsys):
    import errno
    import fcntl

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setattr(fcntl, "flock", no_locks)
    try:
        runlock.hold(run)  # no traceback: the run goes on
        runlock.mark(run)
        assert (run / ".lock").read_text() == f"{os.getpid()}\n"
    finally:
        runlock.release(run)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"depthlab: warning: cannot lock {run} (No locks available); nothing keeps")


def test_a_sweep_folder_with_braces_in_its_name_gets_the_busy_line(tmp_path):
    from depthlab.sweep.common import hold_sweep_dir

    sw = tmp_path / "sw{x}"
    sw.mkdir()
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; from depthlab.training import runlock; "
                              f"runlock.hold({str(sw)!r}); print('held', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(runlock.DepthlabError) as e:
            hold_sweep_dir(sw)
        assert str(e.value) == (f"--out_dir {sw} is in use by another sweep (pid {child.pid}): wait for it to end, "
                                "or choose another --out_dir")
    finally:
        child.kill()
        child.wait()


@contextlib.contextmanager
def _sweep_training(tmp_path, tiny_text_file, workers):
    """A sweep (in a subprocess) training its run ``max_iters-100000``, in itself (--workers 1) or in a worker
    process: yields (sweep folder, the run, the sweep's process, the pid RUN/.lock names); stopped on exit."""
    import signal

    sw = tmp_path / "sw"
    cmd = [sys.executable, "-m", "depthlab", "sweep", "--grid", f"train.max_iters={'4,' * (workers > 1)}100000",
           "--data.path", str(tiny_text_file), "--model.n_layer", "1", "--model.n_embd", "16", "--model.n_head", "2",
           "--model.block_size", "16", "--train.batch_size", "4", "--train.eval_interval", "100000",
           "--train.eval_iters", "1", "--train.max_time", "0", "--threads", "1", "--workers", str(workers),
           "--no-report", "--out-dir", str(sw)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = sw / "runs" / "max_iters-100000"
    try:
        deadline = time.time() + 180
        while time.time() < deadline and not (run / "metrics.jsonl").exists() and proc.poll() is None:
            time.sleep(0.05)
        trainer = (run / ".lock").read_text().strip()
        assert trainer == str(proc.pid) if workers == 1 else trainer != str(proc.pid)
        yield sw, run, proc, trainer
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(120)


@pytest.fixture(scope="module", params=[1, 2], ids=["1", "2"])
def sweep_training(request, tmp_path_factory):
    """:func:`_sweep_training` once per ``--workers`` value for the two refusal tests below (a sweep's start-up, ~3-5 s
    on 2 cores, each): ``(workers, the text file, sweep folder, the run, the sweep's process, the lock's pid)``.
    Neither refusal writes anything in the sweep's folders (both check it). The sweep process gets the environment
    conftest's autouse fixture gives each test (set here: a module's fixture is made before those)."""
    from conftest import TINY_TEXT

    tmp = tmp_path_factory.mktemp(f"sweep-workers-{request.param}")
    text = tmp / "tiny.txt"
    text.write_text(TINY_TEXT, encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DEPTHLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
        mp.setenv("DEPTHLAB_AUTOTUNE", "off")
        with _sweep_training(tmp, text, request.param) as (sw, run, proc, trainer):
            yield request.param, text, sw, run, proc, trainer


@pytest.mark.slow
def test_a_run_a_running_sweep_trains_is_refused_naming_the_sweep(sweep_training, capsys):
    """``train --overwrite`` into a sweep's run said "being trained by another process": the sweep trains it, in
    itself (--workers 1) or in a worker process."""
    workers, text, sw, run, proc, trainer = sweep_training
    before = (run / "config.json").read_bytes()
    rc, out, err = run_cli(capsys, "train", *tiny_cli_args(text, run), "--overwrite")
    worker = "" if workers == 1 else f" in its worker (pid {trainer})"
    assert rc == 2 and err == (f"depthlab: error: {run} is a run of the sweep running in {sw} (pid {proc.pid}), "
                               f"which is training it{worker}: wait for the sweep to end, or train into another "
                               "--train.out_dir\n"), err
    assert (run / "config.json").read_bytes() == before and proc.poll() is None  # the sweep's run, untouched


@pytest.mark.slow
def test_a_resume_of_a_run_a_running_sweep_trains_is_refused_naming_the_sweep(sweep_training, capsys):
    """nu49: ``train --resume SWEEP/runs/NAME`` said "being trained by another process (pid N)", naming neither the
    sweep nor, with --workers 2, the process the user started; it names the sweep as a plain train's refusal does."""
    workers, _, sw, run, proc, trainer = sweep_training
    before = (run / "config.json").read_text()
    rc, out, err = run_cli(capsys, "train", "--resume", str(run), "--train.max_iters", "30")
    worker = "" if workers == 1 else f" in its worker (pid {trainer})"
    assert rc == 2 and out == "" and err == (
        f"depthlab: error: {run} is a run of the sweep running in {sw} (pid {proc.pid}), which is training "
        f"it{worker}: wait for the sweep to end; then --resume it again: it resumes from the latest checkpoint "
        "the sweep leaves\n"), err
    assert (run / "config.json").read_text() == before


def _read_only(folder, monkeypatch):
    """Make ``folder`` unwritable: chmod 555, or as root (whom chmod does not stop) runlock's access check says so."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return
    real = os.access
    monkeypatch.setattr(runlock.os, "access",
                        lambda p, mode, **kw: False if Path(p) == folder and mode & os.W_OK else real(p, mode, **kw))


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_read_only_run_folder_is_refused_in_one_line_before_anything_is_written(
        tmp_path, tiny_text_file, capsys, monkeypatch):
    # was: 'PermissionError: ... run/.lock (check the paths given ...)', or with a copied .lock the config.json write
    run, empty = tmp_path / "run", tmp_path / "empty"
    assert run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, run, train__max_iters=5))[0] == 0
    runlock.release(run)
    empty.mkdir()
    before = _snapshot(run)
    try:
        for folder, argv in ((run, ["--resume", str(run), "--train.max_iters", "30"]),
                             (empty, tiny_cli_args(tiny_text_file, empty))):
            _read_only(folder, monkeypatch)
            rc, out, err = run_cli(capsys, "train", *argv)
            assert_clean_error(rc, err, f"cannot write into the run folder {folder}: ",
                               f"make the run writable (chmod -R u+w {folder}) or train into another --train.out_dir")
            runlock.release(folder)
        assert _snapshot(run) == before and list(empty.iterdir()) == []
    finally:
        run.chmod(0o755)
        empty.chmod(0o755)
