"""Is ``auto`` as fast as the best fixed choice? `depthlab train` under each fixed setting of threads,
dtype, attention and OpenMP waiting, and under ``auto``, interleaved, on an idle machine and with one
busy process per core.

Each row is one `depthlab train` process at the shape asked (default: the default recipe's, Muon) for
``--steps`` steps, no evaluation after step 0; its figure is the median training tokens/s of the
logged steps (metrics.jsonl ``tokens_per_sec``, which excludes evaluation). ``auto`` runs with a fresh
measurement cache first (its measurement's seconds are printed), then with that cache (what every later
run on the machine gets). Round 1 runs every row; rounds 2.. run auto and the ``--finalists`` fastest fixed
rows of round 1, interleaved, the order reversed every other round. Each figure is the median over its runs
with the min-max spread. The ratio auto / best fixed is the issue's goal (>= 0.95), printed from the medians
and as the median of the same-round pairs (two processes a minute apart differ by up to ~20 % on the
virtual machines measured; a pair from one round shares the machine's state of that minute).

    python benchmarks/auto_choice.py [--steps 60] [--rounds 6] [--finalists 3] [--load idle,busy]
                                     [--shape default|nanogpt]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_info  # noqa: E402

SHAPES = {
    "default": [],
    "nanogpt": ["--model.n_layer", "4", "--model.n_head", "4", "--model.n_embd", "128", "--model.block_size", "64",
                "--train.batch_size", "12", "--train.optimizer", "adamw"],
}


def fixed_settings(cores: int, bf16: bool) -> list[dict]:
    """Every fixed choice: threads {1, cores} x dtype x attention x waiting (1 thread: waiting moot)."""
    out = []
    for threads in sorted({1, cores}):
        for dtype in (["float32", "bfloat16"] if bf16 else ["float32"]):
            for attn in ("sdpa", "explicit"):
                for wait in (["PASSIVE"] if threads == 1 else ["PASSIVE", "ACTIVE"]):
                    out.append({"threads": threads, "dtype": dtype, "attention": attn, "omp": wait})
    return out


def run(shape: list[str], steps: int, setting: dict | None, cache: str, out: Path) -> tuple[float, dict]:
    """One `depthlab train`; returns (median training tokens/s, config.json resolved)."""
    env = {**os.environ, "DEPTHLAB_CACHE": cache}
    args = [sys.executable, "-m", "depthlab", "train", *shape, "--train.max_iters", str(steps),
            "--train.max_time", "0", "--train.eval_interval", str(10 * steps), "--train.eval_iters", "1",
            "--train.log_interval", "5", "--train.final_validation", "false", "--train.probe_interval", "0",
            "--train.grad_log_interval", "0", "--train.tensorboard", "false", "--train.out_dir", str(out)]
    if setting is not None:
        args += ["--train.threads", str(setting["threads"]), "--train.dtype", setting["dtype"],
                 "--train.attention", setting["attention"]]
        env["OMP_WAIT_POLICY"] = setting["omp"]
        env.pop("DEPTHLAB_OMP_WAIT", None)
    else:
        for k in ("OMP_WAIT_POLICY", "DEPTHLAB_OMP_WAIT"):
            env.pop(k, None)
        env["DEPTHLAB_AUTOTUNE"] = "on"  # measure although this benchmark's runs are short
    subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tps = [json.loads(line)["tokens_per_sec"] for line in (out / "metrics.jsonl").read_text().splitlines()
           if '"tokens_per_sec"' in line]
    resolved = json.loads((out / "config.json").read_text()).get("resolved", {})
    return statistics.median(tps[1:] or tps), resolved


def _spin(stop) -> None:
    while not stop.is_set():
        pass


def label(s: dict | None) -> str:
    if s is None:
        return "auto"
    return f"{s['threads']} thr, {s['dtype']}, {s['attention']}, {s['omp'].lower()}"


def measure(shape, steps: int, rounds: int, settings: list[dict], tmp: Path, finalists: int = 3) -> None:
    """Round 1 runs auto and every fixed setting; the later rounds only auto and the ``finalists`` fastest
    fixed settings of round 1, in an order reversed every other round (a slow drift of the machine then
    favours none of them). Each round's auto / best-fixed-row pair is one ratio: pairs from the same round
    cancel what the machine did that minute."""
    rows: dict[str, list[float]] = {}
    per_round: list[dict[str, float]] = []
    cache = str(tmp / "cache")  # auto's: its first run measures, the later ones read it
    first = chosen = None
    order: list = [None, *settings]
    for r in range(rounds):
        this: dict[str, float] = {}
        for i, s in enumerate(order if r % 2 == 0 else order[::-1]):
            tps, res = run(shape, steps, s, cache, tmp / f"r{r}_{i}")
            rows.setdefault(label(s), []).append(tps)
            this[label(s)] = tps
            if s is None:
                chosen = (res.get("tuning") or {}).get("setting")
                first = first or res.get("tuning") or {}
        per_round.append(this)
        if r == 0:
            ranked = sorted(settings, key=lambda s: -this[label(s)])
            order = [None, *ranked[:finalists]]
    best_fixed = max((statistics.median(v), k) for k, v in rows.items() if k != "auto")
    auto = statistics.median(rows["auto"])
    for k, v in sorted(rows.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"  {k:38s} {statistics.median(v):9,.0f} tokens/s  (min {min(v):,.0f}, max {max(v):,.0f}, "
              f"{len(v)} run{'s' if len(v) > 1 else ''})")
    print(f"  auto chose: {label_of(chosen)}; its first run measured {len(first.get('ms_per_step', {}))} candidates "
          f"in {first.get('seconds')} s ({first.get('source')}, {first.get('busy_cores')} cores busy)")
    print(f"  auto / best fixed ({best_fixed[1]}), medians: {auto / best_fixed[0]:.3f}")
    pairs = [d["auto"] / d[best_fixed[1]] for d in per_round if best_fixed[1] in d]
    print(f"  auto / {best_fixed[1]} in the same round: median {statistics.median(pairs):.3f} "
          f"(min {min(pairs):.3f}, max {max(pairs):.3f}, {len(pairs)} rounds)")
    # auto's own row and the fixed row of the setting it chose run the same code: their difference is the
    # machine's noise between processes. The choice itself is judged by the fixed row of what it chose.
    # (one thread: waiting is moot, its fixed rows are the passive ones)
    mine = rows.get(label_of({**chosen, "omp_wait": "passive"} if chosen["threads"] == 1 else chosen)) \
        if chosen else None
    if mine:
        print(f"  fixed row of auto's choice / best fixed: {statistics.median(mine) / best_fixed[0]:.3f}"
              f" ({'the same setting' if label_of(chosen) == best_fixed[1] else 'another setting'})")


def label_of(setting: dict | None) -> str:
    if not setting:
        return "?"
    return label({**setting, "omp": setting["omp_wait"].upper()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--finalists", type=int, default=3, help="fixed rows kept after round 1")
    ap.add_argument("--load", default="idle,busy")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="default")
    a = ap.parse_args()
    from depthlab.training.runtime import cpu_has_bf16

    print(machine_info())
    cores = os.cpu_count() or 1
    settings = fixed_settings(cores, cpu_has_bf16())
    for load in a.load.split(","):
        stop = mp.Event()
        spinners = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(cores if load == "busy" else 0)]
        for p in spinners:
            p.start()
        print(f"{load}: shape {a.shape}, {a.steps} steps per run, {a.rounds} interleaved rounds, {a.finalists} "
              f"finalists "
              f"({len(spinners)} busy processes)")
        t0 = time.time()
        with tempfile.TemporaryDirectory() as d:
            measure(SHAPES[a.shape], a.steps, a.rounds, settings, Path(d), a.finalists)
        stop.set()
        for p in spinners:
            p.join()
        print(f"  ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
