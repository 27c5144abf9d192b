"""The local sweep backend: rows, resume, failures as results, worker processes, no report import."""

import json
import subprocess
import sys

import pytest

from depthlab import rundir, sweep
from depthlab.errors import DepthlabError, NonFiniteError

from conftest import TINY_SWEEP, read_sweep_rows, tiny_sweep_spec


def tiny_spec(text_file, grid, **over):
    return tiny_sweep_spec(text_file, grid, TINY_SWEEP, **over)


read_rows = read_sweep_rows


def quiet(_):
    pass


@pytest.mark.slow
def test_sweep_rows_and_resume_skips_finished(tiny_text_file, tmp_path):
    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1, 2], "model.variant": ["plain", "prenorm"]})
    sw = tmp_path / "sw"
    logs = []
    assert sweep.run_sweep(spec, sw, workers=1, threads=1, log=logs.append) == sw
    rows = read_rows(sw)
    assert len(rows) == 4
    assert list(rows[0])[:8] == sweep.RESULT_COLUMNS
    assert list(rows[0])[:5] == ["n_layer", "variant", "seed", "final_train_loss", "final_val_loss"]
    for col in ("best_val_bpc", "tokens_per_sec", "grad_ratio_first_last", "last_block_rank", "diagnosis"):
        assert col in rows[0]
    assert {(r["variant"], r["n_layer"]) for r in rows} == {("plain", "1"), ("plain", "2"), ("prenorm", "1"),
                                                             ("prenorm", "2")}
    assert all(r["status"] == "ok" and float(r["best_val_loss"]) > 0 for r in rows)
    assert all(r["last_block_rank"] != "" and r["grad_ratio_first_last"] != "" for r in rows)
    assert (sw / "results.md").read_text().count("| ok |") == 4
    assert not (sw / "report.html").exists()  # the report is the CLI's business
    runs = sorted((sw / "runs").iterdir())
    for r in runs:
        rd = rundir.RunDir(r)
        assert rd.summary and rd.config and rd.sweep_status["status"] == "ok"
        assert len(rd.init_probe["rank_measure"]) == rd.config["model"]["n_layer"]
        assert rd.file(rundir.TRAIN_LOG).stat().st_size > 0
        row = [x for x in rows if x["run"] == f"runs/{r.name}"][0]
        assert float(row["best_val_loss"]) == pytest.approx(rd.summary["best_val_loss"], abs=1e-4)
        assert float(row["whole_val_loss"]) == pytest.approx(rd.summary["final_validation"]["val_loss"], abs=1e-4)
    assert any("4 to run" in line for line in logs) and sum(line.startswith("[") for line in logs) == 4
    mtimes = {r.name: (r / rundir.SUMMARY).stat().st_mtime_ns for r in runs}

    # "interrupt": one run loses its summary (and looks half-done); the restart redoes only that one
    victim = runs[1]
    (victim / rundir.SUMMARY).unlink()
    (victim / rundir.SWEEP_STATUS).unlink()
    logs.clear()
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=logs.append)
    assert any("3 already finished, 1 to run" in line for line in logs)
    for r in runs:
        m = (r / rundir.SUMMARY).stat().st_mtime_ns
        assert (m != mtimes[r.name]) == (r == victim)
    assert len(read_rows(sw)) == 4
    logs.clear()
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=logs.append)
    assert any("nothing to run: all 4 runs had finished" in line for line in logs)


def test_rerun_with_changed_config_is_refused(tiny_text_file, tmp_path):
    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1]})
    sw = tmp_path / "sw"
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=quiet)
    spec.overrides = {"train.max_iters": 6}
    with pytest.raises(DepthlabError, match="different config.*train.max_iters: 4 there, 6 now"):
        sweep.run_sweep(spec, sw, workers=1, threads=1, log=quiet)
    sweep.run_sweep(spec, sw, workers=1, threads=1, rerun=True, log=quiet)
    assert rundir.RunDir(sw / "runs" / "n_layer-1").summary["final_step"] == 6


def test_out_dir_that_is_not_a_sweep_is_refused(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "precious.txt").write_text("x")
    spec = sweep.SweepSpec(experiments=[sweep.Experiment(grid={"model.n_layer": [1]})])
    with pytest.raises(DepthlabError, match="not a sweep directory"):
        sweep.run_sweep(spec, d, workers=1, threads=1, log=quiet)
    assert (d / "precious.txt").exists() and sorted(p.name for p in d.iterdir()) == ["precious.txt"]
    with pytest.raises(DepthlabError, match="--workers and --threads must be >= 0"):
        sweep.run_sweep(spec, tmp_path / "new", workers=-1, log=quiet)


def test_out_dir_under_a_file_is_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    spec = sweep.SweepSpec(experiments=[sweep.Experiment(grid={"model.n_layer": [1]})])
    with pytest.raises(DepthlabError, match="lies under .*notes.txt, which is a file"):
        sweep.run_sweep(spec, tmp_path / "notes.txt" / "sw", workers=1, threads=1, log=quiet)
    with pytest.raises(DepthlabError, match="which is a file"):
        sweep.dry_run(spec, tmp_path / "notes.txt" / "a" / "b")
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_read_only_out_dir_is_one_line_naming_the_folder_and_the_fix(tiny_text_file, tmp_path, monkeypatch):
    # was: "PermissionError: [Errno 13] ... .sweep.json.XXXX.tmp (check the paths given ...)"
    import os

    from depthlab.sweep import common

    d = tmp_path / "ro"
    d.mkdir()
    if os.geteuid() == 0:  # chmod does not stop root: the plan's write fails as it would for anyone else
        def denied(*a, **k):
            raise PermissionError(13, "Permission denied")
        monkeypatch.setattr(common, "write_json", denied)
    else:
        d.chmod(0o555)
    try:
        with pytest.raises(DepthlabError) as e:
            sweep.run_sweep(tiny_spec(tiny_text_file, {"model.n_layer": [1]}), d, workers=1, threads=1, log=quiet)
    finally:
        d.chmod(0o755)
    assert str(e.value) == (f"cannot write into --out_dir {d}: Permission denied; make it writable "
                            f"(chmod -R u+w {d}) or choose another folder")
    assert [p.name for p in d.iterdir()] in ([], [".lock"])  # no plan, no run folder


def test_another_grid_into_a_sweep_folder_is_refused_and_loses_nothing(tiny_text_file, tmp_path):
    sw = tmp_path / "sw"
    sweep.run_sweep(tiny_spec(tiny_text_file, {"model.n_layer": [1, 2]}), sw, workers=1, threads=1, log=quiet)
    plan = (sw / "sweep.json").read_text()
    other = tiny_spec(tiny_text_file, {"model.n_layer": [3]})
    with pytest.raises(DepthlabError, match="holds another sweep: it has 2 runs not in this one"):
        sweep.run_sweep(other, sw, workers=1, threads=1, log=quiet)
    with pytest.raises(DepthlabError, match="holds another sweep"):
        sweep.dry_run(other, sw)
    assert (sw / "sweep.json").read_text() == plan and len(list((sw / "runs").iterdir())) == 2
    # a grid that keeps every old run and adds one continues the sweep
    sweep.run_sweep(tiny_spec(tiny_text_file, {"model.n_layer": [1, 2, 3]}), sw, workers=1, threads=1, log=quiet)
    assert len(read_rows(sw)) == 3


def test_failing_runs_are_results(tiny_text_file, tmp_path):
    # block_size 4096 exceeds the tiny corpus: that run fails with an error, the other finishes
    spec = tiny_spec(tiny_text_file, {"model.block_size": [16, 4096]})
    sw = tmp_path / "sw"
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=quiet)
    rows = {r["model.block_size"]: r for r in read_rows(sw)}
    assert rows["16"]["status"] == "ok"
    assert rows["4096"]["status"] == "error" and "block_size" in rows["4096"]["message"]
    assert rows["4096"]["best_val_loss"] == ""


def test_nonfinite_run_is_recorded_and_kept(tiny_text_file, tmp_path, monkeypatch):
    tr = sys.modules["depthlab.analytics"]
    real = tr.train
    calls = []

    def fake(cfg, **kw):
        calls.append(cfg.model.n_layer)
        rd = real(cfg, **kw)
        if cfg.model.n_layer == 2:  # as if it diverged at the last step: no summary.json
            (rd / rundir.SUMMARY).unlink()
            raise NonFiniteError("non-finite loss at step 4 (test)")
        return rd

    monkeypatch.setattr(tr, "train", fake)
    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1, 2]})
    sw = tmp_path / "sw"
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=quiet)
    assert sorted(calls) == [1, 2]
    rows = {r["n_layer"]: r for r in read_rows(sw)}
    assert rows["1"]["status"] == "ok" and rows["2"]["status"] == "nonfinite"
    assert rows["2"]["best_val_loss"] != ""  # read back from the evaluations it logged
    assert "non-finite" in rows["2"]["message"]
    calls.clear()
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=quiet)
    assert calls == []  # a deterministic failure is a finished result: not redone


def test_target_val_loss_stop_is_ok_not_time_capped(tiny_text_file, tmp_path):
    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1]}, train__max_iters=20, train__target_val_loss=10.0)
    sw = tmp_path / "sw"
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=quiet)
    (row,) = read_rows(sw)
    assert row["status"] == "ok" and row["message"] == ""
    assert rundir.RunDir(sw / "runs" / "n_layer-1").summary["final_step"] < 20


@pytest.mark.slow
def test_running_a_sweep_does_not_import_the_report(tiny_text_file, tmp_path):
    code = f"""
import sys
from depthlab import sweep
spec = sweep.build_spec(None, None, ["model.n_layer=1"], {{**{TINY_SWEEP!r}, "data.path": {str(tiny_text_file)!r}}},
                        None)
sweep.run_sweep(spec, {str(tmp_path / 'sw')!r}, workers=1, threads=1, log=lambda s: None)
bad = sorted(m for m in sys.modules if m.startswith(("depthlab.report", "depthlab.cli", "matplotlib.pyplot")))
print("BAD", bad)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "BAD []" in out.stdout
    assert (tmp_path / "sw" / "results.csv").exists()


@pytest.mark.slow
def test_worker_processes(tiny_text_file, tmp_path):
    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1, 2]})
    sw = tmp_path / "sw"
    sweep.run_sweep(spec, sw, workers=2, log=quiet)
    rows = read_rows(sw)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    st = json.loads((sw / "runs" / "n_layer-1" / "sweep_status.json").read_text())
    assert st["threads"] >= 1 and st["status"] == "ok"


def test_reaping_a_worker_that_died_without_a_result(tmp_path):
    from depthlab.sweep import local

    class Dead:
        exitcode = -9

    job = {"name": "n_layer-2", "config": {"train": {"out_dir": str(tmp_path / "r")}}, "threads": 1}
    res = local.reap(Dead(), job, t0=0.0)
    assert res["status"] == "error" and "exited with code -9 without a result" in res["message"]
    assert rundir.RunDir(tmp_path / "r").sweep_status["status"] == "error"


@pytest.mark.parametrize("code, name", [(-2, "SIGINT"), (-15, "SIGTERM")])
def test_a_worker_a_stop_signal_ended_before_its_result_is_interrupted_not_an_error(tmp_path, code, name):
    """Ctrl-C (SIGINT to the process group) or the sweep's SIGTERM that lands in a worker before the trainer's
    handler is in place ended it with no result: the row said `error ... exited with code -2 without a result`,
    though nothing failed and the same command continues the run."""
    from depthlab.sweep import local

    class Stopped:
        exitcode = code

    job = {"name": "n_layer-2", "config": {"train": {"out_dir": str(tmp_path / "r")}}, "threads": 1}
    res = local.reap(Stopped(), job, t0=0.0)
    assert res["status"] == "interrupted"
    assert res["message"] == f"interrupted: the worker process ended on {name} before the run wrote a result"
    assert rundir.RunDir(tmp_path / "r").sweep_status["status"] == "interrupted"


def _sigint_default(pid: int) -> bool:
    """Whether process ``pid`` neither catches nor ignores SIGINT (Linux /proc): a SIGINT ends it at once."""
    import signal

    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status", encoding="ascii").read().splitlines())
    bit = 1 << (signal.SIGINT - 1)
    return not (int(fields["SigCgt"], 16) & bit or int(fields["SigIgn"], 16) & bit)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in open(f"/proc/{pid}/task/{pid}/children", encoding="ascii").read().split()]
    except OSError:
        return []


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["start-up", "before the trainer"])
def test_ctrl_c_before_a_worker_trains_records_it_interrupted_not_error(tiny_text_file, tmp_path, moment):
    """Ctrl-C (SIGINT to the whole process group) while a worker starts (Python up, importing depthlab: the sweep's
    SIGTERM ends it) or between its start and the trainer's own handler (its torch import, the init probe: the SIGINT
    does): the row said `error` (`worker process exited with code -2` or `-15 without a result`)."""
    import os
    import signal
    import time

    sw = tmp_path / "sw"
    cmd = [sys.executable, "-m", "depthlab", "sweep", "--grid", "model.n_layer=1,2", "--data.path",
           str(tiny_text_file), "--model.n_embd", "16", "--model.n_head", "2", "--model.block_size", "16",
           "--train.batch_size", "4", "--train.max_iters", "100000", "--train.eval_iters", "1", "--train.dtype",
           "float32", "--train.max_time", "0", "--threads", "1", "--workers", "2", "--no-report", "--out-dir", str(sw)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    hit, seen, since = False, {}, {}  # worker pid -> SIGINT states seen in turn: Python's handler, then default
    try:
        deadline = time.time() + 120
        while not hit and time.time() < deadline and proc.poll() is None:
            for pid in _children(proc.pid):
                try:
                    if b"spawn_main" not in open(f"/proc/{pid}/cmdline", "rb").read():
                        continue  # not a worker (the resource tracker)
                    state = "default" if _sigint_default(pid) else "caught"
                except (OSError, KeyError, ValueError):
                    continue
                states = seen.setdefault(pid, [])
                if state == "caught" and not states:
                    states.append(state)  # Python is up: the worker's start-up (its imports, ~3 s), before its code
                    since[pid] = time.time()
                elif state == "default" and states == ["caught"]:
                    states.append(state)  # its own SIG_DFL: past its start-up, before the trainer's handler
                if moment == "start-up":  # well into its imports (a KeyboardInterrupt there printed a traceback)
                    hit = states == ["caught"] and time.time() - since[pid] > 0.5
                else:
                    hit = states == ["caught", "default"]
                if hit:
                    break
            if not hit:
                time.sleep(0.002)
        assert hit, f"no worker was seen at its {moment}"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the sweep and its workers
        out, err = proc.communicate(timeout=120)
    finally:
        try:  # the sweep and any worker it left (its own session)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode == 130, (out[-2000:], err[-2000:])
    rows = read_rows(sw)
    assert [r["status"] for r in rows] == ["interrupted", "interrupted"], rows
    assert not [r["message"] for r in rows if "without a result" in r["message"]], rows
    assert "Traceback" not in err and " error " not in out, (out, err)


@pytest.mark.slow
def test_killed_worker_is_an_error_row_and_the_sweep_goes_on(tiny_text_file, tmp_path):
    """Our own pool: a worker killed mid-run (SIGKILL) costs only its own run (ProcessPoolExecutor would break)."""
    import multiprocessing
    import os
    import signal
    import threading
    import time

    spec = tiny_spec(tiny_text_file, {"train.max_iters": [4, 5000]})
    sw = tmp_path / "sw"
    killed = []

    def killer():
        deadline = time.time() + 60
        while time.time() < deadline and not killed:
            for p in multiprocessing.active_children():
                if p.name.endswith("max_iters-5000") and (sw / "runs" / "max_iters-5000" / "config.json").exists():
                    os.kill(p.pid, signal.SIGKILL)
                    killed.append(p.pid)
            time.sleep(0.05)

    t = threading.Thread(target=killer)
    t.start()
    sweep.run_sweep(spec, sw, workers=2, threads=1, log=quiet)
    t.join()
    assert killed
    rows = {r["train.max_iters"]: r for r in read_rows(sw)}
    assert rows["4"]["status"] == "ok"
    assert rows["5000"]["status"] == "error" and "exited with code -9" in rows["5000"]["message"]


# -------------------------------------------------------------------------------------------------------- init probe
@pytest.mark.slow
def test_rank_collapse_at_init_plain_vs_residual():
    """Dong et al. 2021 at init: plain's last-block rank measure falls towards 0 with depth; residual stays."""
    from depthlab.config import RunConfig

    for seed in (1, 2):
        ranks = {}
        for v in ("plain", "prenorm"):
            for L in (4, 16, 32):
                cfg = RunConfig.from_dict({"model": {"n_layer": L, "n_embd": 16, "n_head": 2, "block_size": 16,
                                                     "variant": v}, "train": {"seed": seed}}).to_dict()
                ranks[v, L] = sweep.init_probe(cfg)["rank_measure"][-1]
        assert ranks["plain", 4] > ranks["plain", 16] > ranks["plain", 32] or ranks["plain", 32] < 1e-6
        assert ranks["plain", 32] < 0.01
        assert min(ranks["prenorm", L] for L in (4, 16, 32)) > 0.5


def test_dry_run_lists_the_seeds_seeds_adds(tiny_text_file, tmp_path):
    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1, 2]}, train__seed=1)
    out = sweep.dry_run(spec, tmp_path / "sw", workers=1, seeds="2")
    assert "n_layer-1_seed-2" in out and "n_layer-2_seed-2" in out and "4 runs, about" in out
    with pytest.raises(DepthlabError, match=r"--seeds auto .*, and a command-line grid has no claim to judge"):
        sweep.dry_run(spec, tmp_path / "sw", workers=1, seeds="auto:3")
    with pytest.raises(DepthlabError, match="has no claim to judge"):
        sweep.run_sweep(spec, tmp_path / "sw", workers=1, threads=1, log=quiet, seeds="auto")
    spec.experiments[0].name = "depth"  # the science profile's depth claims judge this one
    auto = sweep.dry_run(spec, tmp_path / "sw", workers=1, seeds="auto:3")
    assert "2 runs, about" in auto and "--seeds auto: these are the first round" in auto and "at most 3" in auto
    assert not (tmp_path / "sw").exists()  # a dry run writes nothing


def test_a_damaged_sweep_json_is_refused_and_nothing_changes(tiny_text_file, tmp_path):
    sw = tmp_path / "sw"
    sweep.run_sweep(tiny_spec(tiny_text_file, {"model.n_layer": [1]}), sw, workers=1, threads=1, log=quiet)
    (sw / "sweep.json").write_text('{"spec": {"exper')  # cut off mid-write
    (sw / "report.html").write_text("mine")
    other = tiny_spec(tiny_text_file, {"model.n_layer": [3]})
    for call in (lambda: sweep.run_sweep(other, sw, workers=1, threads=1, log=quiet), lambda: sweep.dry_run(other, sw)):
        with pytest.raises(DepthlabError, match="sweep.json is not the JSON object depthlab wrote"):
            call()
    assert (sw / "sweep.json").read_text() == '{"spec": {"exper' and (sw / "report.html").read_text() == "mine"
    assert [p.name for p in (sw / "runs").iterdir()] == ["n_layer-1"]


def test_an_interrupted_run_resumes_from_its_checkpoint_when_the_sweep_runs_again(tiny_text_file, tmp_path,
                                                                                   monkeypatch):
    from depthlab import analytics

    from conftest import StopAt

    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1]}, train__max_iters=8)
    sweep.run_sweep(spec, tmp_path / "whole", workers=1, threads=1, log=quiet)
    whole = rundir.RunDir(tmp_path / "whole" / "runs" / "n_layer-1").summary

    real, sw, logs = analytics.train, tmp_path / "sw", []
    monkeypatch.setattr(analytics, "train", lambda cfg, callbacks=(), **k: real(cfg, [*callbacks, StopAt(4)], **k))
    with pytest.raises(KeyboardInterrupt):  # stopped after step 4, as Ctrl-C would
        sweep.run_sweep(spec, sw, workers=1, threads=1, log=logs.append)
    assert logs[-1] == "[1/1] n_layer-1: interrupted in %.1fs (interrupted at step 4; checkpoint written)" % (
        rundir.RunDir(sw / "runs" / "n_layer-1").sweep_status["wall_s"])
    monkeypatch.setattr(analytics, "train", real)
    logs.clear()
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=logs.append)
    assert "1 to run (1 of them resume from a checkpoint)" in logs[0]
    rd = rundir.RunDir(sw / "runs" / "n_layer-1")
    assert "resuming" in rd.file(rundir.TRAIN_LOG).read_text()
    steps = [r["step"] for r in rd.metrics() if "val_loss" in r]
    assert steps == sorted(set(steps)) and steps[-1] == 8  # one history, not a restart from step 0
    assert rd.summary["final_step"] == 8 and rd.sweep_status["status"] == "ok"
    assert rd.summary["best_val_loss"] == pytest.approx(whole["best_val_loss"], abs=1e-6)


def test_an_interrupted_run_with_another_config_is_refused_not_deleted(tiny_text_file, tmp_path, monkeypatch):
    from depthlab import analytics

    from conftest import StopAt

    real, sw = analytics.train, tmp_path / "sw"
    monkeypatch.setattr(analytics, "train", lambda cfg, callbacks=(), **k: real(cfg, [*callbacks, StopAt(4)], **k))
    with pytest.raises(KeyboardInterrupt):  # stopped after step 4, as Ctrl-C would
        sweep.run_sweep(tiny_spec(tiny_text_file, {"model.n_layer": [1]}, train__max_iters=8), sw, workers=1,
                        threads=1, log=quiet)
    monkeypatch.setattr(analytics, "train", real)
    ck = sw / "runs" / "n_layer-1" / "checkpoints"
    before = {p.name: p.read_bytes() for p in ck.iterdir()}
    plan_before = (sw / "sweep.json").read_text()
    with pytest.raises(DepthlabError) as e:  # a re-run with another max_iters used to delete the 4 steps silently
        sweep.run_sweep(tiny_spec(tiny_text_file, {"model.n_layer": [1]}, train__max_iters=12), sw, workers=1,
                        threads=1, log=quiet)
    assert str(e.value) == (f"sweep run {sw / 'runs' / 'n_layer-1'} was interrupted at step 4 with a different config "
                            "(train.max_iters: 8 there, 12 now); run the sweep with the run's config to continue it, "
                            "use another --out_dir, or --overwrite to redo every run")
    assert {p.name: p.read_bytes() for p in ck.iterdir()} == before and "step-000004.safetensors" in before
    assert (sw / "sweep.json").read_text() == plan_before


@pytest.mark.slow
def test_a_second_sweep_in_a_folder_another_process_sweeps_is_refused_naming_it(tiny_text_file, tmp_path, capsys):
    import time

    from conftest import assert_clean_error, run_cli

    sw = tmp_path / "sw"
    sweep.run_sweep(tiny_spec(tiny_text_file, {"model.n_layer": [1]}), sw, workers=1, threads=1, log=quiet)
    for f in (rundir.SUMMARY, rundir.SWEEP_STATUS):  # left to do, as in a sweep still running
        (sw / "runs" / "n_layer-1" / f).unlink()
    before = {p: p.stat().st_mtime_ns for p in sw.rglob("*")}
    code = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(sw)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        rc, out, err = run_cli(capsys, "sweep", "--grid", "model.n_layer=1", "--data.path", str(tiny_text_file),
                               "--out_dir", str(sw), "--workers", "1", "--no-report", "--train.max_iters", "4",
                               "--model.n_embd", "16", "--model.block_size", "16")
    finally:
        holder.kill()
        holder.wait()
    assert_clean_error(rc, err, f"--out_dir {sw} is in use by another sweep (pid {holder.pid}): wait for it to end, "
                       "or choose another --out_dir")
    assert out == "" and {p: p.stat().st_mtime_ns for p in sw.rglob("*")} == before  # nothing read into or written
    time.sleep(0.1)
    sweep.run_sweep(tiny_spec(tiny_text_file, {"model.n_layer": [1]}), sw, workers=1, threads=1, log=quiet)
    assert rundir.RunDir(sw / "runs" / "n_layer-1").summary["final_step"] == 4  # once it has ended, the folder is free


@pytest.mark.slow
def test_dry_run_refuses_a_missing_corpus_as_the_real_sweep_does(tiny_text_file, tmp_path, capsys):
    from conftest import assert_clean_error, run_cli

    line = f"data.path {tmp_path / 'nope'} not found; give an existing text file"
    for how in (["--data.path", str(tmp_path / "nope")], ["--grid", f"data.path={tmp_path / 'nope'}"]):
        for dry in (["--dry_run"], []):
            rc, out, err = run_cli(capsys, "sweep", "--grid", "model.n_layer=1", *how, "--out_dir",
                                   str(tmp_path / "sw"), "--train.max_iters", "4", "--workers", "1", *dry)
            assert_clean_error(rc, err, line)
            assert out == "" and not (tmp_path / "sw").exists()


def test_sweep_lines_count_in_words_and_the_dry_run_says_the_workers_and_threads_the_run_uses(tiny_text_file,
                                                                                              tmp_path):
    from depthlab.sweep.common import cores

    spec, sw, logs = tiny_spec(tiny_text_file, {"model.n_layer": [1]}), tmp_path / "sw", []
    dry = sweep.dry_run(spec, sw, workers=1).splitlines()[-1]
    assert dry == (f"1 run, about {sweep.estimate_seconds(sweep.expand(spec, sw)[0].config) / 60:.1f} min on 1 worker "
                   f"x {cores()} thread{'s' * (cores() > 1)} (rough estimate for an idle CPU) -> {sw}")
    assert " on 1 worker x 3 threads (" in sweep.dry_run(spec, sw, workers=1, threads=3)
    sweep.run_sweep(spec, sw, workers=1, threads=3, log=logs.append)
    assert logs[0].startswith(f"sweep {sw}: 1 run, 0 already finished, 1 to run on 1 worker x 3 threads (")
    logs.clear()
    sweep.run_sweep(spec, sw, workers=1, threads=3, log=logs.append)
    assert logs[-1] == f"nothing to run: 1 run had finished -> {sw / sweep.RESULTS_CSV}"
    other = tiny_spec(tiny_text_file, {"model.n_layer": [2]})
    with pytest.raises(DepthlabError, match="holds another sweep: it has 1 run not in this one"):
        sweep.dry_run(other, sw)


@pytest.mark.parametrize("threads", [0, 1])
def test_sweep_warns_on_its_stderr_of_a_junk_omp_num_threads(tiny_text_file, tmp_path, capsys, monkeypatch, threads):
    """Every other command said it; a sweep said it only inside each run's train.log (libgomp's own line alone
    on the console). ``--dry_run``: the same start, nothing trained."""
    from conftest import run_cli

    monkeypatch.setenv("OMP_NUM_THREADS", "abc")
    rc, out, err = run_cli(capsys, "sweep", "--grid", "model.n_layer=1,2", "--data.path", str(tiny_text_file),
                           "--out_dir", str(tmp_path / "sw"), "--threads", str(threads), "--dry_run")
    instead = "lets --threads 1 set each run's thread count" if threads else \
        "gives each run the cores per worker (--threads sets it)"
    assert rc == 0 and [x for x in err.splitlines() if "OMP_NUM_THREADS" in x] == [
        f"depthlab: warning: OMP_NUM_THREADS='abc' is not a thread count (a positive integer): depthlab ignores it "
        f"and {instead}; set it to a number (OMP_NUM_THREADS=1) or unset it"]
    assert "OMP_NUM_THREADS" not in out


def test_a_ray_dry_run_says_what_ray_decides_not_the_local_pool(tiny_text_file, tmp_path, capsys, monkeypatch):
    """It said "2 workers x 1 thread": Ray runs trials that reserve --threads CPUs each, as many at a time as the
    cluster holds (or --workers)."""
    from conftest import run_cli

    spec, sw = tiny_spec(tiny_text_file, {"model.n_layer": [1, 2]}), tmp_path / "sw"
    auto = sweep.dry_run(spec, sw, threads=1, backend="ray").splitlines()[-1]
    assert " on Ray Tune trials of 1 CPU and 1 thread each (--threads), as many at a time as the cluster's CPUs " \
           "hold (--workers caps it) (rough estimate" in auto and "worker x" not in auto
    capped = sweep.dry_run(spec, sw, workers=1, threads=3, backend="ray").splitlines()[-1]
    assert " on Ray Tune trials of 3 CPUs and 3 threads each (--threads), at most 1 at a time (--workers) (" in capped
    rc, out, _ = run_cli(capsys, "sweep", "--grid", "model.n_layer=1,2", "--data.path", str(tiny_text_file),
                         "--out_dir", str(sw), "--threads", "2", "--backend", "ray", "--dry_run")
    assert rc == 0 and " on Ray Tune trials of 2 CPUs and 2 threads each (--threads), as many " in out
    assert "Ray Tune is not installed" not in out  # Ray is installed where this runs (test extras)
    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not: the dry run said nothing, the sweep failed
    rc, out, err = run_cli(capsys, "sweep", "--grid", "model.n_layer=1,2", "--data.path", str(tiny_text_file),
                           "--out_dir", str(sw), "--backend", "ray", "--dry_run")
    assert "not installed" not in out  # stdout is the plan; the note is on stderr
    assert rc == 0 and err.splitlines()[-1] == ('depthlab: note: Ray Tune is not installed here; the sweep itself '
                                                'needs it: '
                                                'pip install -e ".[ray]"')
    assert " on 2 workers x 1 thread (" in sweep.dry_run(spec, sw, workers=2, threads=1)  # the local pool's, as before
    assert not sw.exists()


def test_a_dry_run_of_a_half_finished_sweep_counts_and_sizes_only_the_runs_still_to_do(tiny_text_file, tmp_path):
    """It listed and estimated every run, finished ones too, on as many workers as runs."""
    from depthlab.sweep.common import cores
    from depthlab.units import counted

    sw = tmp_path / "sw"
    sweep.run_sweep(tiny_spec(tiny_text_file, {"model.n_layer": [1]}), sw, workers=1, threads=1, log=quiet)
    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1, 2]})
    est = sweep.estimate_seconds(sweep.expand(spec, sw)[1].config)
    lines = sweep.dry_run(spec, sw).splitlines()
    assert lines == [f"{'n_layer-2':50s} ~{est:7.1f}s",
                     f"2 runs (1 already finished, 1 to run), about {est / 60:.1f} min on 1 worker x "
                     f"{counted(cores(), 'thread')} (rough estimate for an idle CPU) -> {sw}"]
    assert sweep.dry_run(tiny_spec(tiny_text_file, {"model.n_layer": [1]}), sw) == \
        f"nothing to run: 1 run had finished -> {sw}"
    rerun = sweep.dry_run(spec, sw, workers=2, rerun=True).splitlines()
    assert rerun[-2].startswith("2 runs, about ") and rerun[-1].startswith("--overwrite: 1 finished run in ")


@pytest.mark.slow
def test_runs_the_pool_stops_on_ctrl_c_get_their_progress_line_as_in_process(tiny_text_file, tmp_path):
    """With --workers 2 the runs stopped by Ctrl-C got no [k/N] line (in-process they do)."""
    import signal
    import time

    sw = tmp_path / "sw"
    cmd = [sys.executable, "-m", "depthlab", "sweep", "--grid", "train.max_iters=4,100000", "--data.path",
           str(tiny_text_file), "--model.n_layer", "1", "--model.n_embd", "16", "--model.n_head", "2",
           "--model.block_size", "16", "--train.batch_size", "4", "--train.eval_interval", "100000",
           "--train.eval_iters", "1", "--train.dtype", "float32", "--train.max_time", "0", "--threads", "1",
           "--workers", "2", "--no-report", "--out-dir", str(sw)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    short, long_ = sw / "runs" / "max_iters-000004" / "summary.json", sw / "runs" / "max_iters-100000" / "metrics.jsonl"
    deadline = time.time() + 180
    while time.time() < deadline and not (short.exists() and long_.exists()) and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(1)  # the short run's line is out
    proc.send_signal(signal.SIGINT)  # Ctrl-C to the sweep
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, (out[-2000:], err[-2000:])
    status = rundir.RunDir(sw / "runs" / "max_iters-100000").sweep_status
    assert status["status"] == "interrupted" and status["message"].startswith("interrupted at step ")
    lines = sorted(x for x in out.splitlines() if x.startswith("["))
    assert [x[:5] for x in lines] == ["[1/2]", "[2/2]"], out
    assert any(x[6:].startswith("max_iters-000004: ok best val ") for x in lines), out
    # the process's seconds and the run's own (results.csv's wall_time_s) differ by start-up: both named
    own = json.loads(short.read_text())["wall_time_s"]
    assert any(x.endswith(f"s (the run's own clock {own:.1f}s: results.csv's wall_time_s)") for x in lines), out
    assert f"max_iters-100000: interrupted in {status['wall_s']:.1f}s ({status['message']})" in {x[6:] for x in lines}


def test_a_named_experiment_runs_end_to_end_into_runs_experiment_name(tiny_text_file, tmp_path):
    """Every run of a named experiment (SWEEP/runs/EXPERIMENT/NAME, as `sweep --profile quick` has) once failed
    with "lies inside the sweep folder ... but not as one of its runs": nested_run_error allowed only runs/NAME."""
    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1, 2]}, train__max_iters=2)
    spec.experiments[0].name = "depth"
    sw = tmp_path / "sw"
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=quiet)
    rows = read_rows(sw)
    assert sorted((r["run"], r["status"]) for r in rows) == [("runs/depth/n_layer-1", "ok"),
                                                            ("runs/depth/n_layer-2", "ok")]
    assert rundir.sweep_runs(sw) == [sw / "runs" / "depth" / "n_layer-1", sw / "runs" / "depth" / "n_layer-2"]
    for r in rundir.sweep_runs(sw):
        rd = rundir.RunDir(r)
        assert rd.sweep_status["status"] == "ok" and rd.summary["final_step"] == 2
        assert rundir.sweep_of(r) == sw
