"""Is a deep ``plain`` stack (no shortcut: it collapses, and its activations and gradients sink into
subnormal floats) slower per token than a pre-LN stack of the same shape? With and without
``train.flush_denormal``, interleaved.

Each row is one `depthlab train` process (16 blocks, n_embd 64, block 64, batch 16, AdamW, fp32,
``--steps`` steps); its figure is the median training tokens/s over the logged steps after the first
third (by then plain has collapsed). The goal (issue 24): plain / pre-LN >= ~1 with flushing on.

    python benchmarks/deep_plain.py [--steps 150] [--rounds 2] [--n_layer 16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_info  # noqa: E402


def run(variant: str, flush: bool, steps: int, n_layer: int, out: Path) -> tuple[float, float]:
    """One run; returns (median training tokens/s after the first third, last logged train loss)."""
    args = [sys.executable, "-m", "depthlab", "train", "--model.variant", variant, "--model.n_layer", str(n_layer),
            "--model.n_embd", "64", "--model.n_head", "4", "--model.block_size", "64", "--train.batch_size", "16",
            "--train.optimizer", "adamw", "--train.dtype", "float32", "--train.max_iters", str(steps),
            "--train.max_time", "0", "--train.eval_interval", str(10 * steps), "--train.eval_iters", "1",
            "--train.log_interval", "5", "--train.final_validation", "false", "--train.probe_interval", "0",
            "--train.grad_log_interval", "0", "--train.tensorboard", "false",
            "--train.flush_denormal", str(flush).lower(), "--train.out_dir", str(out)]
    env = {**os.environ, "DEPTHLAB_AUTOTUNE": "off"}  # the same threads for every row
    subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"tokens_per_sec"' in line]
    late = [r["tokens_per_sec"] for r in recs if r["step"] > steps // 3] or [r["tokens_per_sec"] for r in recs]
    return statistics.median(late), recs[-1]["loss"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--n_layer", type=int, default=16)
    a = ap.parse_args()
    print(machine_info())
    rows: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as d:
        cells = [(v, f) for v in ("prenorm", "plain") for f in (True, False)]
        for r in range(a.rounds):
            for variant, flush in (cells if r % 2 == 0 else cells[::-1]):  # a drift of the machine favours none
                rows.setdefault((variant, flush), []).append(
                    run(variant, flush, a.steps, a.n_layer, Path(d) / f"{variant}_{flush}_{r}"))
    med = {k: statistics.median(t for t, _ in v) for k, v in rows.items()}
    for (variant, flush), v in rows.items():
        tps = [t for t, _ in v]
        print(f"  {variant:8s} flush_denormal {str(flush).lower():5s} {med[(variant, flush)]:9,.0f} tokens/s "
              f"(min {min(tps):,.0f}, max {max(tps):,.0f}); last train loss {v[-1][1]:.4f}")
    for flush in (True, False):
        print(f"  plain / prenorm, flush_denormal {str(flush).lower()}: "
              f"{med[('plain', flush)] / med[('prenorm', flush)]:.2f}")
    print(f"  plain, flush on / off: {med[('plain', True)] / med[('plain', False)]:.2f}")


if __name__ == "__main__":
    main()
