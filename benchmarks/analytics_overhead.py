"""Cost of the gradient monitor when it logs EVERY step, at the default model shape.

Runs the training step of ``depthlab.train`` (forward, backward, clip, AdamW step) on the embedded
corpus, alternating blocks of steps without and with :class:`GradientLogger` at interval 1 (the
real callback: grads read before clipping, weight snapshot, update ratio, one host sync, one
metrics.jsonl line + TensorBoard scalars). Alternating blocks cancels slow drifts of a shared CPU;
the medians of the per-step times are compared. Wall time on a shared or quota-throttled machine
jumps in scheduler quanta, so CPU time (``time.process_time``, all threads) is reported too, and
the headline ratio is 1 + (CPU time inside the callbacks) / (CPU time of a plain step).
Target: overhead <= 5 %.

Usage: python benchmarks/analytics_overhead.py [--blocks 4] [--steps-per-block 5] [--threads 0]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from depthlab.analytics.gradients import GradientLogger
from depthlab.config import DataConfig, ModelConfig, TrainConfig
from depthlab.data import get_batch, load_corpus
from depthlab.model import GPT
from depthlab.callbacks import StepInfo
from depthlab.rundir import MetricsWriter
from depthlab.training.optimization import make_optimizer


class _StubRun:
    """The parts of a run (callbacks.RunView) GradientLogger reads."""

    def __init__(self, model, metrics):
        self.raw_model = model
        self.metrics = metrics
        self.is_main = True
        self.step = 0
        self.log = print


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=4, help="pairs of (off, on) blocks")
    ap.add_argument("--steps-per-block", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    tcfg = TrainConfig()
    corpus = load_corpus(DataConfig())
    mcfg = ModelConfig(vocab_size=len(corpus.tokenizer.vocab))  # the default recipe's shape
    torch.manual_seed(tcfg.seed)
    model = GPT(mcfg)
    opt = make_optimizer(model, tcfg, torch.device("cpu"))
    rng = np.random.default_rng(0)
    tmp = Path(tempfile.mkdtemp(prefix="depthlab-bench-"))
    metrics = MetricsWriter(tmp, tensorboard=True)
    trainer = _StubRun(model, metrics)
    logger = GradientLogger(interval=1)
    logger.on_train_start(trainer, StepInfo(step=0))
    params = list(model.parameters())

    cb_time: list[float] = []

    def step(monitor: bool) -> tuple[float, float]:
        t0, p0 = time.perf_counter(), time.process_time()
        x, y = get_batch(corpus.train, mcfg.block_size, tcfg.batch_size, rng)
        _, loss = model(x, y)
        loss.backward()
        if monitor:
            c0 = time.process_time()
            logger.on_before_clip(trainer, StepInfo(step=trainer.step))
            cb = time.process_time() - c0
        gnorm = torch.nn.utils.clip_grad_norm_(params, tcfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        trainer.step += 1
        if monitor:
            c0 = time.process_time()
            logger.on_step_end(trainer, StepInfo(step=trainer.step, loss=float(loss), lr=tcfg.learning_rate,
                                                 grad_norm=float(gnorm), tokens_seen=0))
            cb_time.append(cb + time.process_time() - c0)
        loss.item()  # the trainer syncs on the loss every step too
        return time.perf_counter() - t0, time.process_time() - p0

    for _ in range(3):
        step(False)
    off, on = [], []
    for _ in range(a.blocks):
        off += [step(False) for _ in range(a.steps_per_block)]
        on += [step(True) for _ in range(a.steps_per_block)]
    metrics.close()
    w_off, w_on = (statistics.median(t[0] for t in x) for x in (off, on))
    c_off, c_on = (statistics.median(t[1] for t in x) for x in (off, on))
    c_cb = statistics.median(cb_time)
    n_logged = sum(1 for line in (tmp / "metrics.jsonl").read_text().splitlines() if '"kind": "grad"' in line)
    print(f"machine: {platform.machine()} {platform.processor() or ''} | {os.cpu_count()} CPUs | torch "
          f"{torch.__version__} | threads {torch.get_num_threads()} | python {platform.python_version()}")
    print(f"model: {mcfg.n_layer} x {mcfg.n_embd} wide, block {mcfg.block_size}, batch {tcfg.batch_size}, "
          f"{model.num_params() / 1e6:.2f} M params; {len(off)} + {len(on)} timed steps, {n_logged} grad records")
    print(f"wall time per step (median): {w_off * 1e3:.1f} ms without, {w_on * 1e3:.1f} ms with grad logging "
          f"every step -> ratio {w_on / w_off:.3f} (noisy when other processes share or throttle the CPU)")
    print(f"CPU time per step (median):  {c_off * 1e3:.1f} ms without, {c_on * 1e3:.1f} ms with -> "
          f"ratio {c_on / c_off:.3f}")
    print(f"CPU time inside the gradient callbacks: {c_cb * 1e3:.2f} ms per logged step")
    print(f"overhead ratio: {1 + c_cb / c_off:.3f} ({c_cb / c_off * 100:+.2f} % of a step; target <= +5 %)")

if __name__ == "__main__":
    main()
