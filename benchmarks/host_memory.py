"""The C allocator keeping freed memory (depthlab.training.hostmem) against glibc's defaults, interleaved.

Usage: python benchmarks/host_memory.py [--rounds 6] [--steps 40] [--shape nanogpt|default]

Each round starts two child processes one after the other (the order reversed every other round),
identical but for :func:`depthlab.training.hostmem.keep_freed_memory`: each builds depthlab's GPT at
the shape, with the run's settings on this machine's rules (bf16 autocast where the CPU has native bf16,
Muon, flush-to-zero, 2 threads spinning), and times ``--steps`` training steps (forward, backward, clip,
optimizer step; 5 warm-up steps first). It prints per child ms/step, page faults per step (minor faults,
``getrusage``) and peak resident memory, then the medians and the ratio kept / system per round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import torch
from depthlab.config import ModelConfig, TrainConfig
from depthlab.model import GPT
from depthlab.training import hostmem
from depthlab.training.optimization import make_optimizer, set_update_precision
from depthlab.training.runtime import autocast_ctx, configure_attention, cpu_has_bf16
keep, shape, steps = json.loads(sys.argv[1])
if keep:
    assert hostmem.keep_freed_memory(), "this C library is not glibc: nothing to compare"
torch.set_flush_denormal(True)
if shape == "nanogpt":
    mc, B = ModelConfig(vocab_size=65, n_layer=4, n_head=4, n_embd=128, block_size=64, dropout=0.0), 12
else:
    mc, B = ModelConfig(vocab_size=65), TrainConfig().batch_size
bf16 = cpu_has_bf16()
torch.manual_seed(0)
model = GPT(mc)
configure_attention(model, "auto", torch.device("cpu"), bf16)
opt = make_optimizer(model, TrainConfig(optimizer="muon"), torch.device("cpu"))
set_update_precision(opt, bf16)
ctx = autocast_ctx(torch.device("cpu"), "bfloat16" if bf16 else "float32")
params = list(model.parameters())
g = torch.Generator().manual_seed(1)
def step():
    x = torch.randint(0, 65, (B, mc.block_size), generator=g)
    y = torch.randint(0, 65, (B, mc.block_size), generator=g)
    with ctx:
        _, loss = model(x, y)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(params, 1.0)
    loss.item(), gn.item()
    opt.step()
    opt.zero_grad(set_to_none=True)
for _ in range(5):
    step()
r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
for _ in range(steps):
    step()
dt, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"ms": dt / steps * 1e3, "faults": (r1.ru_minflt - r0.ru_minflt) / steps,
                  "rss_mb": r1.ru_maxrss / 1024, "dtype": "bfloat16" if bf16 else "float32"}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--shape", choices=["nanogpt", "default"], default="nanogpt")
    a = ap.parse_args()
    from _common import machine_info

    print(machine_info())
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "active"), "OMP_NUM_THREADS": "2"}
    print(f"shape {a.shape}, {a.steps} steps per child, OMP_WAIT_POLICY={env['OMP_WAIT_POLICY']}, 2 threads")
    rows: dict[str, list[dict]] = {"system": [], "kept": []}
    ratios = []
    for r in range(a.rounds):
        order = ["system", "kept"] if r % 2 == 0 else ["kept", "system"]
        got = {}
        for name in order:
            out = subprocess.run([sys.executable, "-c", CHILD, json.dumps([name == "kept", a.shape, a.steps])],
                                 env=env, capture_output=True, text=True, check=True)
            got[name] = json.loads(out.stdout.strip().splitlines()[-1])
            rows[name].append(got[name])
            g = got[name]
            print(f"round {r + 1} {name:6s}: {g['ms']:7.2f} ms/step, {g['faults']:7.1f} page faults/step, "
                  f"peak RSS {g['rss_mb']:.0f} MB ({g['dtype']})")
        ratios.append(got["kept"]["ms"] / got["system"]["ms"])
    for name, v in rows.items():
        print(f"{name:6s}: median {statistics.median(x['ms'] for x in v):.2f} ms/step "
              f"(min {min(x['ms'] for x in v):.2f}), {statistics.median(x['faults'] for x in v):.1f} page faults/step")
    print(f"kept / system, same round: median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, "
          f"max {max(ratios):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
