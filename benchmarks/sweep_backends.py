"""Sweep wall time, local backend against Ray backend, on the same grid (Ray's start-up included).

Usage: python benchmarks/sweep_backends.py [--profile quick] [--repeats 1] [-- EXTRA SWEEP FLAGS]
       python benchmarks/sweep_backends.py --profile "" -- --grid train.seed=1,2,3,4,5,6,7,8 --train.max_iters 2
       (the second: per-run overhead of each backend, the runs themselves being nearly empty)

Runs ``depthlab sweep --profile P --no-report`` once per backend and repeat, alternating
(local, ray, local, ray, ...) in fresh sweep directories, each as its own process so both pay the
same imports. Ray is started for the sweep on 127.0.0.1 and stopped at its end, as
``--backend ray`` without ``--ray-address`` does. Prints the machine, the load average, the wall
time of each run, the ratio ray / local of the medians (goal: <= 1.3 for the quick profile on
2 cores), Ray's start-up as the sweep logged it, and whether the two results.csv agree (same
points and statuses, best_val_loss within 1e-5 nats).
"""

import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine_info


def run(backend: str, out: Path, profile: str, extra: list[str]) -> tuple[float, str]:
    """(wall seconds, stdout) of one ``depthlab sweep`` on ``backend``."""
    cmd = [sys.executable, "-m", "depthlab", "sweep", *(["--profile", profile] if profile else []), "--no-report",
           "--out-dir", str(out), "--backend", backend, *extra]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"{backend} sweep failed ({r.returncode}): {r.stderr.strip().splitlines()[-1:]}")
    return wall, r.stdout


def rows(sweep_dir: Path) -> dict:
    with open(sweep_dir / "results.csv", newline="") as f:
        return {r["run"]: r for r in csv.DictReader(f)}


def agree(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        if a[k]["status"] != b[k]["status"]:
            return False
        if a[k]["best_val_loss"] and abs(float(a[k]["best_val_loss"]) - float(b[k]["best_val_loss"])) > 1e-5:
            return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="quick", help='a sweep profile; "" for none (give --grid flags after --)')
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("extra", nargs="*", help="more depthlab sweep flags (after --)")
    args = ap.parse_args()
    print(machine_info())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    walls: dict[str, list[float]] = {"local": [], "ray": []}
    with tempfile.TemporaryDirectory() as tmp:
        outs = {}
        for i in range(args.repeats):
            for backend in ("local", "ray"):
                out = Path(tmp) / f"{backend}-{i}"
                wall, stdout = run(backend, out, args.profile, args.extra)
                walls[backend].append(wall)
                outs[backend] = out
                start = re.search(r"ray: started on \S+ in ([\d.]+)s", stdout)
                n = len(rows(out))
                print(f"{backend:5s} repeat {i}: {wall:7.1f} s wall for {n} runs"
                      + (f" (Ray start-up {start.group(1)} s)" if start else ""), flush=True)
        same = agree(rows(outs["local"]), rows(outs["ray"]))
    loc, ray_ = statistics.median(walls["local"]), statistics.median(walls["ray"])
    n = len(walls["local"])
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"profile {args.profile}: local {loc:.1f} s | ray {ray_:.1f} s | ray/local {ray_ / loc:.2f}x "
          f"(goal <= 1.30; medians of {n}) | overhead {ray_ - loc:+.1f} s | results agree: {same}")


if __name__ == "__main__":
    main()
