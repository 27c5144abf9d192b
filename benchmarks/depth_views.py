"""Seconds of `depthlab layers` and `depthlab context` on a run of the default recipe's shape (issue 25: <= 10 s
each on 2 cores).

Usage: python benchmarks/depth_views.py [RUN_DIR] [--steps 20] [--repeats 2] [--threads N] [--max_tokens N]

Without RUN_DIR it trains a run of the default recipe's shapes (4 blocks x 128 wide, context 128, batch 16,
eval_iters 20: `depthlab presets` / default.yaml) for ``--steps`` steps into a temporary folder: the cost of
the views depends on the shapes and the number of checkpoints kept, not on how well the model trained.
Prints, for each command, the best (fastest) of ``--repeats`` runs of the library call (loading the run,
the corpus, every weights file it reads, and the measurement), the same in a fresh process
(``python -m depthlab ...``, imports included), the machine and the load average, since a busy machine only
ever slows a run down and the numbers then mean little.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from _common import machine_info


def train_default_shape(out: Path, steps: int) -> Path:
    """A run of the default recipe's shapes, ``steps`` steps, fit_to_time off (a fixed, short run)."""
    from depthlab import train
    from depthlab.cli_expand import preset_path
    from depthlab.config import RunConfig, read_yaml

    d = read_yaml(preset_path("default"), "preset", "")
    d["train"].update(out_dir=str(out), max_iters=steps, max_time=0.0, fit_to_time=False, eval_interval=steps // 2,
                      progress=False, tensorboard=False)
    return train(RunConfig.from_dict(d), log=lambda s: None)


def best_of(fn, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", nargs="?", default=None, help="a run directory (default: train one, default shapes)")
    ap.add_argument("--steps", type=int, default=20, help="steps of the run trained when no RUN_DIR is given")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--max_tokens", type=int, default=None, help="--max_tokens of both commands (default: theirs)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    from depthlab.analytics.context import DEFAULT_MAX_TOKENS, run_context
    from depthlab.analytics.layers import run_layers

    max_tokens = DEFAULT_MAX_TOKENS if a.max_tokens is None else a.max_tokens
    tmp = None
    run = Path(a.run_dir) if a.run_dir else None
    if run is None:
        threads = torch.get_num_threads()
        tmp = tempfile.TemporaryDirectory()
        run = train_default_shape(Path(tmp.name) / "run", a.steps)
        torch.set_num_threads(threads)  # the trainer sets its own count; the commands run with torch's default
    print(machine_info())
    print(f"load average {os.getloadavg()[0]:.1f}; run {run}")
    res = run_layers(run, "best", max_tokens)
    print(f"windows: {res['windows_described']}; {res['n_layer']} blocks")
    from depthlab.analytics.context import kept_weights, load_weights, open_run

    batches = open_run(run, max_tokens).windows.batches
    model, _ = load_weights(run)
    with torch.no_grad():
        fwd = best_of(lambda: model(batches[0][0]), 3)
    L, n = res["n_layer"], len(batches)
    layer_fw = n * (L + L * (L - 1) / 2) / L  # the clean pass, then blocks i+1.. after removing block i
    ctx_fw = n * len({p.read_bytes() for _, _, p in kept_weights(run)})
    print(f"one forward of a {tuple(batches[0][0].shape)} batch: {fwd:.3f} s now; the work is ~{layer_fw:.0f} such "
          f"forwards for layers (~{layer_fw * fwd:.1f} s) and {ctx_fw} for context (~{ctx_fw * fwd:.1f} s), "
          "plus loading the run")
    for name, fn in (("layers", lambda: run_layers(run, "best", max_tokens)),
                     ("context", lambda: run_context(run, "best", max_tokens))):
        lib = best_of(fn, a.repeats)
        cmd = [sys.executable, "-m", "depthlab", name, str(run), "--json", "--max_tokens", str(max_tokens)]
        cli = best_of(lambda: subprocess.run(cmd, capture_output=True, check=True), a.repeats)
        print(f"{name:8s} library {lib:6.2f} s | command (fresh process, imports included) {cli:6.2f} s")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
