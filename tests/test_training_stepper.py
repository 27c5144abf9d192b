"""The device-side non-finite check (CUDA's default) forced on CPU: same run as the host check.

``Trainer.device_checks = True`` takes the path that keeps the check on the device (fused AdamW
``found_inf``, flags read at log / eval / last steps). Every comparison with the host path is
exact (bit-identical weights, equal metrics records), except where documented: callbacks'
``on_step_end`` also sees skipped steps that are not read steps.
"""

import json

import pytest
import torch

from depthlab.callbacks import Callback
from depthlab.errors import NonFiniteError
from depthlab.trainer import Trainer

from conftest import QUIET, run_two_ranks, tiny_config


class Poison(Callback):
    """Make the gradient of the given (1-based) steps NaN, or the loss path inf, once each."""

    def __init__(self, *steps: int):
        self.steps = set(steps)

    def on_before_clip(self, run, info):
        if info.step + 1 in self.steps:
            next(run.raw_model.parameters()).grad.fill_(float("nan"))


def _run(path, text, device_checks, callbacks=(), **train):
    cfg = tiny_config(path, text, train=dict(max_iters=20, eval_interval=10, log_interval=5, optimizer="adamw",
                                             **train))  # the device check needs fused AdamW
    t = Trainer(cfg, callbacks=list(callbacks), **QUIET)
    t.device_checks = device_checks
    assert t.checks_on_device is device_checks
    error = None
    try:
        t.fit()
    except NonFiniteError as e:
        error = e
    records = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    for r in records:  # wall-clock fields differ between any two runs
        for k in ("tokens_per_sec", "elapsed_s", "wall_time_s", "time"):
            r.pop(k, None)
    return t, records, error


def _same_weights(a, b):
    sa, sb = a.raw_model.state_dict(), b.raw_model.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _optimizer_state_equal(a, b):
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    return all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i])


def test_finite_run_is_identical_to_the_host_check(tmp_path, tiny_text_file):
    host, rec_h, _ = _run(tmp_path / "h", tiny_text_file, False)
    dev, rec_d, _ = _run(tmp_path / "d", tiny_text_file, True)
    assert _same_weights(host, dev) and _optimizer_state_equal(host, dev)
    assert rec_h == rec_d and any(r.get("kind") == "train" and r["loss"] > 0 for r in rec_d)
    assert host.tokens_seen == dev.tokens_seen and dev.stepper.read_pending() is None  # nothing left unread


@pytest.mark.parametrize("bad_steps", [(3,), (5,), (3, 4, 12)])  # mid-interval, a log step, a burst
def test_skipped_steps_leave_weights_and_records_as_the_host_check(tmp_path, tiny_text_file, bad_steps):
    host, rec_h, _ = _run(tmp_path / "h", tiny_text_file, False, [Poison(*bad_steps)], on_nonfinite="skip")
    dev, rec_d, _ = _run(tmp_path / "d", tiny_text_file, True, [Poison(*bad_steps)], on_nonfinite="skip")
    assert _same_weights(host, dev) and _optimizer_state_equal(host, dev)
    assert rec_h == rec_d  # skip events (step, count), train lines, eval lines: all equal
    skips = [r["step"] for r in rec_d if r.get("nonfinite_skip")]
    assert skips == list(bad_steps) and dev.stepper.nonfinite_skips == len(bad_steps)
    assert dev.tokens_seen == host.tokens_seen == (20 - len(bad_steps)) * 4 * 16
    summary = json.loads((tmp_path / "d" / "summary.json").read_text())
    assert summary["nonfinite_skips"] == len(bad_steps) and summary["final_step"] == 20


def test_stop_raises_at_the_read_with_the_weights_before_the_bad_step(tmp_path, tiny_text_file):
    host, rec_h, err_h = _run(tmp_path / "h", tiny_text_file, False, [Poison(7)])
    dev, rec_d, err_d = _run(tmp_path / "d", tiny_text_file, True, [Poison(7)])
    assert err_h is not None and err_d is not None and "at step 7" in str(err_d)
    assert "checked on the device" in str(err_d) and "transformer.wte.weight" in str(err_h)
    assert host.step == 6 and dev.step == 10  # the device check is read at the step-10 eval...
    assert _same_weights(host, dev) and _optimizer_state_equal(host, dev)  # ...but steps 7-10 never landed
    assert rec_h == rec_d  # same "nonfinite" event (step, loss, grad_norm, lr), no eval or train line after it
    ck = sorted(p.name for p in (tmp_path / "d" / "checkpoints").glob("*.safetensors"))
    assert ck == sorted(p.name for p in (tmp_path / "h" / "checkpoints").glob("*.safetensors"))
    assert not (tmp_path / "d" / "summary.json").exists()


def test_no_host_read_between_read_steps(tmp_path, tiny_text_file, monkeypatch):
    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=20, eval_interval=10, log_interval=5,
                                                                  optimizer="adamw"))  # fused AdamW's found_inf
    t = Trainer(cfg, **QUIET)
    t.stepper.on_device = True
    reads = []
    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _r=real, _n=name, **k: (reads.append(_n),
                                                                                          _r(self, *a, **k))[1])
    params = list(t.raw_model.parameters())
    per_step = []
    for _ in range(5):
        reads.clear()
        t.stepper.train_step(params, 64)
        per_step.append(len(reads))
    assert per_step[:4] == [0, 0, 0, 0] and per_step[4] == 1  # steps 1-4 none; step 5 (log) one tolist
    t.stepper.on_device = False
    reads.clear()
    t.stepper.train_step(params, 64)
    assert reads.count("item") == 2  # the host path reads loss and grad norm every step (CPU default)


def test_time_up_reads_pending_steps_before_its_checkpoint(tmp_path, tiny_text_file, monkeypatch):
    import types

    import depthlab.trainer as tr

    clock = [1000.0]
    monkeypatch.setattr(tr, "time", types.SimpleNamespace(time=lambda: clock[0]))

    class TimeUpAt(Callback):
        def on_step_end(self, run, info):
            if info.step == 3:
                clock[0] += 1e6  # the next loop check finds train.max_time used up

    t, rec, err = _run(tmp_path / "d", tiny_text_file, True, [Poison(2), TimeUpAt()], on_nonfinite="skip",
                       max_time=3600.0)
    assert err is None and t.step == 3 and t.stepper.nonfinite_skips == 1 and t.tokens_seen == 2 * 4 * 16
    st = torch.load(tmp_path / "d" / "checkpoints" / "step-000003.state.pt", weights_only=True)
    assert st["nonfinite_skips"] == 1 and st["tokens_seen"] == 2 * 4 * 16


def _ddp_worker(rank, port, out, text, mode, queue):
    import os

    import torch.distributed as dist

    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    cfg = tiny_config(out, text, train=dict(max_iters=20, eval_interval=10, grad_accum=2, threads=1,
                                            on_nonfinite=mode, optimizer="adamw"))  # fused AdamW's found_inf
    t = Trainer(cfg, callbacks=[Poison(3)] if rank == 1 else [], **QUIET)  # a bad batch on rank 1 only
    t.device_checks = True
    try:
        t.fit()
        result = "ok"
    except BaseException as e:  # noqa: BLE001 - the test compares what each rank ended with
        result = type(e).__name__
    w = torch.cat([p.detach().flatten() for p in t.raw_model.parameters()]).numpy().tobytes()
    queue.put((rank, result, t.step, t.stepper.nonfinite_skips, w))
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("mode,expect", [("skip", ("ok", 20, 1)), ("stop", ("NonFiniteError", 5, 0))])
def test_two_ranks_agree_on_device_flags_without_host_reads(tmp_path, tiny_text_file, mode, expect):
    """Rank 1 alone sees a NaN at step 3: the all-reduced device flag makes both ranks skip it (or both
    stop at the next read, the step-5 log line), with identical weights on both ranks."""
    res = run_two_ranks(_ddp_worker, tmp_path / mode, tiny_text_file, mode, timeout=120)
    assert tuple(res[0][:3]) == tuple(res[1][:3]) == expect, (res[0][:3], res[1][:3])
    assert res[0][3] == res[1][3]  # the same weights on both ranks: every update applied or skipped together


# ---------------------------------------------------------------- train.compile: auto
def test_compile_auto_is_the_default_and_means_cuda_only(tmp_path, tiny_text_file):
    from depthlab.config import TrainConfig
    from depthlab.errors import DepthlabError

    assert TrainConfig().compile == "auto"
    with pytest.raises(DepthlabError, match="train.compile must be true, false or auto"):
        TrainConfig(compile="yes")
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file), **QUIET)
    assert t.model is t.raw_model and t.resolved()["compile"] is False  # CPU: eager
    assert json.loads((tmp_path / "r" / "config.json").read_text())["resolved"]["compile"] is False
    from depthlab.training.runtime import Runtime

    for compile_, device, want in (("auto", "cuda", True), (False, "cuda", False), (True, "cpu", True),
                                   ("auto", "cpu", False)):
        rt = Runtime(TrainConfig(compile=compile_))
        rt.device = torch.device(device)  # the decision alone (no CUDA here)
        assert rt.compile_wanted is want, (compile_, device)


@pytest.mark.slow
def test_compiled_training_matches_eager_and_warmup_leaves_the_trajectory(tmp_path, tiny_text_file):
    """torch.compile (static shapes, warm-up at the training shape) on CPU: eval losses equal eager's
    to 1e-4 nats (inductor fuses and reorders float ops) over 10 steps."""
    from conftest import evals

    for name, c in (("eager", False), ("compiled", True)):
        t = Trainer(tiny_config(tmp_path / name, tiny_text_file, train=dict(compile=c, max_iters=10, eval_interval=5)),
                    **QUIET)
        assert (t.model is not t.raw_model) == c
        t.fit()
    a, b = evals(tmp_path / "eager"), evals(tmp_path / "compiled")
    assert [s for s, *_ in a] == [s for s, *_ in b] == [0, 5, 10]
    for (_, ta, va), (_, tb, vb) in zip(a, b):
        assert abs(ta - tb) < 1e-4 and abs(va - vb) < 1e-4
