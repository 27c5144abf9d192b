"""training.stopping: why the loop stops (time, signal, non-finite, a failed save, the plan), agreed
by every process so that no rank waits in a collective."""

import json
import os
import signal
import subprocess
import time

import pytest
import torch

from depthlab import checkpoint as ckpt
from depthlab.trainer import Trainer

from conftest import QUIET, dropout_cli_args, run_two_ranks, tiny_cli_args, tiny_config, train_cmd


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_sigint_checkpoint_and_exit_code(tmp_path, tiny_text_file, sig, code):
    out = tmp_path / "R"
    p = subprocess.Popen(train_cmd(*dropout_cli_args(tiny_text_file, out, 100000)), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    manifest = out / "checkpoints" / "manifest.json"
    deadline = time.time() + 60
    while time.time() < deadline and not manifest.exists():
        time.sleep(0.05)
    time.sleep(0.3)
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == code, err[-500:]
    assert f"depthlab train --resume {out}" in err and "Traceback" not in err
    step = ckpt.latest_checkpoint(out)["step"]
    assert step > 0 and not (out / "summary.json").exists()
    assert max(json.loads(l)["step"] for l in open(out / "metrics.jsonl")) <= step


@pytest.mark.slow
def test_ddp_ranks_stop_together_on_the_time_limit(tmp_path, tiny_text_file):
    import subprocess
    import sys
    import time

    out = tmp_path / "ddp"
    # 3 s: the same course as 6 s took (a plan after 20 timed steps, one re-plan, the stop at the planned end)
    args = tiny_cli_args(tiny_text_file, out, train__max_time=3, train__max_iters=1000000,
                         train__eval_interval=1000000, train__grad_accum=2, train__threads=1)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    t0 = time.time()
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        "-m", "depthlab", "train", *args], env=env, capture_output=True, text=True, timeout=150)
    assert p.returncode == 0, p.stderr[-2000:]
    assert time.time() - t0 < 90
    s = json.loads((out / "summary.json").read_text())
    assert s["stopped_by"] == "max_time" and s["final_step"] > 0


class _PoisonGrad:
    """On this rank only: make one step's gradient NaN (as a bad batch on one rank would)."""

    def __init__(self, step):
        self.step = step

    def on_train_start(self, run, info): ...
    def on_step_end(self, run, info): ...
    def on_eval(self, run, info, record): ...
    def on_train_end(self, run, summary): ...

    def on_before_clip(self, run, info):
        if info.step == self.step:
            next(run.raw_model.parameters()).grad.fill_(float("nan"))


class _SignalOnThisRank(_PoisonGrad):
    """On this rank only: behave as if SIGTERM arrived after ``step``."""

    def on_before_clip(self, run, info): ...

    def on_step_end(self, run, info):
        if info.step == self.step:
            run.request_stop(15)


def _ddp_worker(rank, port, out, text, case, queue):
    import torch.distributed as dist

    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    cfg = tiny_config(out, text, train=dict(max_iters=40, eval_interval=10, grad_accum=2, threads=1,
                                            on_nonfinite="skip" if case == "skip" else "stop"))
    if case == "fit":  # train.fit_to_time under a 4 s budget
        cfg.train.max_iters, cfg.train.max_time, cfg.train.eval_interval = 100_000, 4.0, 1000
    cbs = []
    if case in ("skip", "nonfinite") and rank == 1:
        cbs = [_PoisonGrad(3)]
    if case == "signal" and rank == 1:
        cbs = [_SignalOnThisRank(5)]
    t = Trainer(cfg, callbacks=cbs, **QUIET)
    if case == "fit" and rank == 1:  # this rank measures itself twice as slow: its shorter plan must win
        fit = t.budget.steps_that_fit
        t.budget.steps_that_fit = lambda step, s_step, elapsed: fit(step, 2 * s_step, elapsed)
    if case == "savefail" and rank == 0:
        real = t.save

        def failing_save(**kw):
            if t.step == 10:
                raise OSError(28, "No space left on device")
            real(**kw)
        t.save = failing_save
    try:
        t.fit()
        result = "ok"
    except BaseException as e:  # noqa: BLE001 - the test compares what each rank ended with
        result = type(e).__name__
    queue.put((rank, result, t.step, t.stopped_by, t.schedule.max_iters))
    if dist.is_initialized():
        dist.destroy_process_group()


def _run_two_ranks(tmp_path, text, case):
    return run_two_ranks(_ddp_worker, tmp_path / case, text, case)


#: What the forkserver of :func:`forked_ranks` imports once: what a rank spends ~3-4 s of a 2-core CPU importing.
RANK_PRELOAD = ["torch", "torch.distributed", "depthlab.trainer"]


@pytest.fixture
def forked_ranks(monkeypatch):
    """conftest.run_two_ranks's two ranks forked from multiprocessing's forkserver, which imports
    :data:`RANK_PRELOAD` once a session (a fresh interpreter that only imports: safe to fork), instead of spawned,
    each a fresh interpreter importing them (two per run, ~7 runs in the slow tier). A rank is still a process of
    its own made by multiprocessing from the pickled worker, with its own torch state; its environment is the
    forkserver's (the session's: conftest's autouse settings are the same for every test), and the worker sets the
    rank's variables itself. The forkserver runs spawn's preparation (sys.path, the main module) as spawn does."""
    import multiprocessing as mp

    real = mp.get_context

    def get_context(method=None):
        if method != "spawn":
            return real(method)
        ctx = real("forkserver")
        ctx.set_forkserver_preload(RANK_PRELOAD)  # read when the forkserver starts: at the first such run
        return ctx

    monkeypatch.setattr(mp, "get_context", get_context)


@pytest.mark.slow
@pytest.mark.usefixtures("forked_ranks")
@pytest.mark.parametrize("case,expect", [("nonfinite", ("NonFiniteError", 3)), ("skip", ("ok", 40)),
                                         ("signal", ("Interrupted", 5)), ("savefail", (None, 10))])
def test_two_ranks_stop_at_the_same_step_for_every_reason(tmp_path, tiny_text_file, case, expect):
    res = _run_two_ranks(tmp_path, tiny_text_file, case)
    assert res[0][1] == res[1][1] == expect[1], res
    if expect[0] is not None:
        assert res[0][0] == res[1][0] == expect[0], res
    else:  # rank 0 re-raises its own OSError, the others a DepthlabError saying why they stop
        assert res[0][0] == "OSError" and res[1][0] == "DepthlabError", res


@pytest.mark.slow
@pytest.mark.usefixtures("forked_ranks")
def test_two_ranks_plan_the_same_fit_to_time_schedule(tmp_path, tiny_text_file):
    res = _run_two_ranks(tmp_path, tiny_text_file, "fit")
    assert res[0] == res[1], res  # same planned max_iters (the slower rank's), same last step
    result, step, stopped_by, max_iters = res[0]
    assert result == "ok" and stopped_by == "max_time" and 20 < step == max_iters < 100_000
