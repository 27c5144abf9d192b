"""training.stepper: one optimisation step, its throughput (the steps' own time only) and its non-finite
check, on the host or on the device.

``Trainer.device_checks = True`` forces on CPU the path that keeps the check on the device (CUDA's
default: fused AdamW ``found_inf``, flags read at log / eval / last steps). Every comparison with
the host path is exact (bit-identical weights, equal metrics records), except where documented:
callbacks' ``on_step_end`` also sees skipped steps that are not read steps."""

import json
import math
import types

import pytest
import torch

from depthlab import checkpoint as ckpt, train
from depthlab.callbacks import Callback
from depthlab.errors import NonFiniteError
from depthlab.trainer import Trainer

from conftest import QUIET, run_two_ranks, tiny_config
from test_training_stopping import forked_ranks  # noqa: F401 - a fixture


def test_nan_stops_and_best_checkpoint_untouched(tmp_path, tiny_text_file):
    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(learning_rate=1e3, min_lr=0.0, warmup_iters=0,
                                                                  grad_clip=0.0, max_iters=300, eval_interval=1000,
                                                                  optimizer="adamw"))
    with pytest.raises(NonFiniteError) as e:
        train(cfg, **QUIET)
    msg = str(e.value)
    assert "at step" in msg and "lr 1e+03" in msg and "float32" in msg
    manifest = json.loads((tmp_path / "r" / "checkpoints" / "manifest.json").read_text())
    assert manifest["best"]["step"] == 0  # only the step-0 checkpoint was ever written
    sd, _ = ckpt.load_weights_file(tmp_path / "r" / "checkpoints" / "best.safetensors")
    assert all(torch.isfinite(v).all() for v in sd.values())


def test_nonfinite_loss_stops_with_step(tmp_path, tiny_text_file):
    from depthlab.errors import NonFiniteError

    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(learning_rate=1e3, min_lr=0.0, warmup_iters=0,
                                                                  grad_clip=0.0, max_iters=200))
    with pytest.raises(NonFiniteError, match="at step"):
        train(cfg, **QUIET)
    assert not (tmp_path / "r" / "summary.json").exists()


def test_nonfinite_skip_counts(tmp_path, tiny_text_file):
    from depthlab.callbacks import Callback

    class Poison(Callback):  # makes step 3's gradient NaN, once
        def on_before_clip(self, trainer, info):
            if info.step == 3:
                next(trainer.raw_model.parameters()).grad.fill_(float("nan"))

    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(on_nonfinite="skip", max_iters=10))
    run = train(cfg, callbacks=[Poison()], **QUIET)
    s = json.loads((run / "summary.json").read_text())
    assert s["nonfinite_skips"] == 1 and s["final_step"] == 10
    cfg = tiny_config(tmp_path / "r2", tiny_text_file, train=dict(max_iters=10))
    with pytest.raises(NonFiniteError, match="transformer.wte.weight"):
        train(cfg, callbacks=[Poison()], **QUIET)


def test_tokens_per_sec_leaves_out_evaluation_and_observers(tmp_path, tiny_text_file, monkeypatch):
    import depthlab.training.stepper as st

    clock = [0.0]

    def tick():  # every reading of the stepper's clock advances it 10 ms: a step reads it 4 times
        clock[0] += 0.01
        return clock[0]

    monkeypatch.setattr(st, "time", types.SimpleNamespace(perf_counter=tick))
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=20, eval_interval=5,
                                                                       log_interval=5)), **QUIET)
    real = t.evaluate

    def slow_evaluate():
        clock[0] += 1000.0  # an evaluation "takes" 1000 s on the same clock
        return real()

    t.evaluate = slow_evaluate
    t.fit()
    rows = [r for r in map(json.loads, (tmp_path / "r" / "metrics.jsonl").open()) if r.get("kind") == "train"]
    # 3 readings inside a step, 1 of them the before-clip observers' window: 0.02 s of training per step
    assert [r["tokens_per_sec"] for r in rows] == [pytest.approx(5 * 4 * 16 / (5 * 0.02))] * 4
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert s["tokens_per_sec"] == pytest.approx(20 * 64 / (20 * 0.02))
    # the overall figure is against the real wall clock, evaluations included
    assert s["tokens_per_sec_overall"] == pytest.approx(s["tokens_seen"] / s["wall_time_s"], rel=1e-2)


# ----------------------------------------------- the device-side check forced on CPU: the same run as the host check
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
    # the host path reads loss and grad norm every step (CPU default): the norm with clipping's factor in one
    assert sorted(reads) == ["item", "tolist"]


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
@pytest.mark.usefixtures("forked_ranks")  # the ranks forked from one interpreter that imported torch (not spawned)
@pytest.mark.parametrize("mode,expect", [("skip", ("ok", 20, 1)), ("stop", ("NonFiniteError", 5, 0))])
def test_two_ranks_agree_on_device_flags_without_host_reads(tmp_path, tiny_text_file, mode, expect):
    """Rank 1 alone sees a NaN at step 3: the all-reduced device flag makes both ranks skip it (or both
    stop at the next read, the step-5 log line), with identical weights on both ranks."""
    res = run_two_ranks(_ddp_worker, tmp_path / mode, tiny_text_file, mode, timeout=120)
    assert tuple(res[0][:3]) == tuple(res[1][:3]) == expect, (res[0][:3], res[1][:3])
    assert res[0][3] == res[1][3]  # the same weights on both ranks: every update applied or skipped together


def _grads(scale: float, seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    ps = [torch.nn.Parameter(torch.zeros(n, 7)) for n in (3, 5, 1)]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g) * scale
    ps.append(torch.nn.Parameter(torch.zeros(2)))  # no gradient: left out, as torch does
    return ps


@pytest.mark.parametrize("scale,max_norm", [(0.01, 1.0), (10.0, 1.0), (1.0, float("inf")), (0.3, 0.5)])
def test_clip_on_host_matches_clip_grad_norm_bit_for_bit(scale, max_norm):
    from depthlab.training.stepper import clip_on_host
    ours, ref = _grads(scale), _grads(scale)
    norm = clip_on_host(ours, max_norm)
    want = torch.nn.utils.clip_grad_norm_(ref, max_norm).item()
    assert norm == want
    for a, b in zip(ours[:3], ref[:3]):
        assert torch.equal(a.grad, b.grad)
    if scale == 10.0:  # clipped: the total norm is max_norm now
        assert torch.nn.utils.get_total_norm([p.grad for p in ours[:3]]).item() == pytest.approx(1.0, rel=1e-5)


def test_clip_on_host_skips_the_pass_when_nothing_is_clipped(monkeypatch):
    from depthlab.training.stepper import clip_on_host
    calls = []
    real = torch.nn.utils.clip_grads_with_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grads_with_norm_", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert clip_on_host(_grads(0.01), 1.0) < 1.0 and calls == []
    assert clip_on_host(_grads(10.0), 1.0) > 1.0 and calls == [1]
    ps = _grads(1.0)
    ps[0].grad[0, 0] = float("nan")
    assert math.isnan(clip_on_host(ps, 1.0)) and calls == [1, 1]  # torch multiplies by nan: so does this
    assert clip_on_host([torch.nn.Parameter(torch.zeros(2))], 1.0) == 0.0
