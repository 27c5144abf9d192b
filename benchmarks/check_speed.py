"""Speed of `depthlab check` per rule (issue 22: <= 30 s on 2 cores at 8 blocks x 64 wide).

Usage: python benchmarks/check_speed.py [--repeats 2] [--threads N] [--n_layer 8] [--n_embd 64]
                                        [--block_size 64] [--batch_size 16]

Checks two models of ``--n_layer`` blocks x ``--n_embd`` wide on the embedded Tiny Shakespeare
corpus, at the CLI's defaults (batch 16, length 64): depthlab's own GPT (pre-LN, built through a
factory as a user would) and a learner-style GPT written with plain torch (tests/fixtures/planted.py
TinyGPT). Prints the seconds of each rule and the total, the best (fastest) of ``--repeats`` runs,
because other processes on a shared machine only ever slow a run down; and the machine and the
load average, since the numbers mean little on a busy machine. The one-off import of torch.optim
(~2 s in a fresh process) is paid before the timing, as the CLI pays it once.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from _common import machine_info
from depthlab.analytics.check import RULES, check_model
from depthlab.config import DataConfig, ModelConfig
from depthlab.data import load_corpus
from depthlab.model import GPT

ROOT = Path(__file__).resolve().parents[1]


def models(n_layer: int, n_embd: int, block_size: int, V: int) -> dict:
    sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
    from planted import TinyGPT

    def depthlab_gpt():
        torch.manual_seed(0)
        return GPT(ModelConfig(vocab_size=V, n_layer=n_layer, n_embd=n_embd, n_head=4, block_size=block_size))

    def learner_gpt():
        torch.manual_seed(0)
        return TinyGPT(V, n_embd=n_embd, n_head=4, block_size=block_size, n_layer=n_layer)

    return {"depthlab GPT (prenorm)": depthlab_gpt, "learner-style GPT": learner_gpt}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--n_layer", type=int, default=8)
    ap.add_argument("--n_embd", type=int, default=64)
    ap.add_argument("--block_size", type=int, default=64)
    ap.add_argument("--batch_size", type=int, default=16)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.optim.AdamW  # noqa: B018 - the one-off import cost of torch.optim, outside the timing

    corpus = load_corpus(DataConfig())
    V = len(corpus.tokenizer.vocab)
    print(machine_info())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for label, build in models(a.n_layer, a.n_embd, a.block_size, V).items():
        best: dict = {}
        totals = []
        for _ in range(a.repeats):
            t = time.perf_counter()
            rep = check_model(build(), corpus, rebuild=build, batch_size=a.batch_size, block_size=a.block_size)
            totals.append(time.perf_counter() - t)
            for c in rep.checks:
                best[c.rule] = min(best.get(c.rule, float("inf")), c.seconds)
            failed = rep.failed
            steps = next(c.evidence.get("steps") for c in rep.checks if c.rule == "context_use")
        print(f"\n{label}: {a.n_layer} blocks x {a.n_embd} wide, batch {a.batch_size} x length {a.block_size}; "
              f"problems found: {', '.join(failed) or 'none'}; context_use trained {steps} steps")
        for r in RULES:
            print(f"  {r:<14} {best[r]:7.2f} s")
        print(f"  {'total':<14} {min(totals):7.2f} s (best of {a.repeats}; all: "
              f"{', '.join(f'{x:.1f}' for x in totals)}); budget 30 s")
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
