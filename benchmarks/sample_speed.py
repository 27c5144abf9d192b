"""Sampling speed: KV cache vs re-encoding the cropped context for every token (issue 12, goal >= 5x).

Usage: python benchmarks/sample_speed.py [--tokens 2000] [--repeats 3] [--run RUN_DIR] [--threads N]

Generates ``--tokens`` new tokens from a one-token prompt (batch 1, temperature 0.8, top-k 200,
as ``depthlab sample``) with ``sample.generate(kv_cache=True)`` and ``kv_cache=False``, and prints
seconds, ms/token and the speed-up; the best (fastest) of ``--repeats`` runs of each, because
other processes on a shared machine only ever slow a run down. The model is the default recipe's
shape (4 x 128, 4 heads, context 128, V 65) with random weights, or a trained run's best
checkpoint with ``--run`` (the cost does not depend on the weights). Also checks that greedy
output is identical both ways while prompt + output fit in block_size.

``depthlab sample`` runs with ``OMP_WAIT_POLICY=PASSIVE`` (idle OpenMP threads sleep; see
``cli._passive_openmp``), which slows the two-thread re-encoding more than the one-thread cached
step: ``OMP_WAIT_POLICY=PASSIVE python benchmarks/sample_speed.py`` measures that setting; without
it, spinning threads (the faster setting for the re-encoding on an idle machine).
"""

import argparse
import time

import torch

from _common import machine_info
from depthlab.config import ModelConfig
from depthlab.model import GPT
from depthlab.sample import generate, load_run


def seconds(model: GPT, n: int, kv_cache: bool) -> float:
    """Wall seconds to generate ``n`` tokens (seeded sampling, as ``depthlab sample``)."""
    g = torch.Generator().manual_seed(1)
    t = time.perf_counter()
    generate(model, torch.zeros(1, 1, dtype=torch.long), n, temperature=0.8, top_k=200, generator=g,
             kv_cache=kv_cache)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--run", default=None, help="a run directory (default: random default-shape model)")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch's default)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.run:
        model, _ = load_run(a.run)
    else:
        torch.manual_seed(0)
        model = GPT(ModelConfig(vocab_size=65)).eval()
    c = model.config
    print(machine_info())
    print(f"model: {c.n_layer} x {c.n_embd}, {c.n_head} heads, block_size {c.block_size}, V {c.vocab_size}, "
          f"{'run ' + a.run if a.run else 'random weights'}; {a.tokens} new tokens, best of {a.repeats}")
    seconds(model, 20, True), seconds(model, 20, False)  # warm-up (allocator, kernels)
    best = {kv: min(seconds(model, a.tokens, kv) for _ in range(a.repeats)) for kv in (True, False)}
    for kv, s in best.items():
        print(f"{'kv cache' if kv else 'no cache (crop)':16s} {s:8.2f} s  {s / a.tokens * 1e3:7.2f} ms/token")
    n = c.block_size - 1
    same = torch.equal(generate(model, torch.zeros(1, 1, dtype=torch.long), n, temperature=0),
                       generate(model, torch.zeros(1, 1, dtype=torch.long), n, temperature=0, kv_cache=False))
    print(f"speed-up {best[False] / best[True]:.1f}x (goal >= 5); greedy identical for {n} tokens "
          f"within block_size: {same}")


if __name__ == "__main__":
    main()
