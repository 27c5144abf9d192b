"""The training step at one token budget (batch x block_size = 2,048 tokens) and several context lengths, with
explicit attention and SDPA and each ``model.position`` (learned table, rotary), interleaved: what a longer
context costs per step on this machine, from which length SDPA's causal kernel beats the explicit path, and
what rotating the queries and keys costs against adding a position table.

A bare loop of depthlab's GPT at the default width (4 layers x 128, 4 heads, V 65): forward, backward,
the default optimizer (Muon for the blocks' matrices, AdamW for the rest), float32, ``--threads`` threads,
subnormals flushed. Each case is warmed up, then timed for ``--steps`` steps per round, rounds interleaved;
printed: median and min ms per step over the rounds, tokens/s at the median, and rope / learned of the medians.

    python benchmarks/context_length.py [--steps 10] [--rounds 5] [--threads 2] [--positions learned,rope]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_info  # noqa: E402

from depthlab.config import ModelConfig, TrainConfig  # noqa: E402
from depthlab.model import GPT  # noqa: E402
from depthlab.training.optimization import make_optimizer  # noqa: E402
from depthlab.training.runtime import configure_attention  # noqa: E402

TOKENS = 2048  #: batch x block_size of every case (the default recipe's 16 x 128)


def make_step(batch: int, block: int, attention: str, position: str = "learned"):
    """One training step of the default-width GPT at (batch, block), as a closure."""
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=65, n_layer=4, n_head=4, n_embd=128, block_size=block, position=position))
    configure_attention(model, attention, torch.device("cpu"), False)
    opt = make_optimizer(model, TrainConfig(optimizer="muon"), torch.device("cpu"))
    x = torch.randint(0, 65, (batch, block))
    y = torch.randint(0, 65, x.shape)

    def step() -> None:
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10, help="steps per case and round")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--blocks", default="128,256,512", help="context lengths (each divides 2,048)")
    ap.add_argument("--positions", default="learned,rope", help="model.position values")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    print(machine_info())
    cases = {(TOKENS // t, t, a, p): make_step(TOKENS // t, t, a, p)
             for t in map(int, args.blocks.split(",")) for a in ("explicit", "sdpa")
             for p in args.positions.split(",")}
    for step in cases.values():
        for _ in range(3):
            step()
    ms: dict = {k: [] for k in cases}
    for _ in range(args.rounds):
        for k, step in cases.items():
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            ms[k].append((time.perf_counter() - t0) / args.steps * 1e3)
    for (b, t, a, p), v in ms.items():
        med = statistics.median(v)
        learned = ms.get((b, t, a, "learned"))
        ratio = f"  rope / learned {med / statistics.median(learned):.3f}" if p == "rope" and learned else ""
        print(f"{b:3d} x {t:4d} {a:8s} {p:7s}  median {med:7.1f} ms/step  min {min(v):7.1f}  "
              f"({TOKENS / med * 1e3:,.0f} tokens/s){ratio}")


if __name__ == "__main__":
    main()
