"""nanoGPT's own GPU recipe (``train.py config/train_shakespeare_char.py``, ``compile=True``) and depthlab's
``--preset nanogpt-gpu`` variants, one after the other on the same GPU, each timed to val <= a target.

Usage: python benchmarks/gpu_vs_nanogpt.py --nanogpt PATH [--target 1.47] [--deadline 540]
                                           [--variants preset,no-graphs,eval250] [--logs DIR] [--quick]

``--nanogpt PATH`` is the root of a nanoGPT checkout (never committed here); it is copied to a temporary
folder and Tiny Shakespeare is prepared there as its ``prepare.py`` does, from depthlab's embedded corpus
(benchmarks/vs_nanogpt.py's ``prepare_nanogpt``): the checkout is only read.

nanoGPT runs first, then depthlab, one variant at a time (``python -m depthlab train --preset nanogpt-gpu
--train.target_val_loss TARGET --train.eval_interval 100 --train.eval_iters 40``, no analytics observers, plus
each variant's flags: :data:`VARIANTS`), each stopping itself at the first evaluation at or below the target.
nanoGPT's recipe runs exactly as its README gives it (``python train.py config/train_shakespeare_char.py``;
its defaults on a GPU: ``compile=True``, bf16 autocast, eval every 250 steps on 200 batches), stopped by this
script at its first eval line at or below the target, or after ``--nanogpt-limit`` seconds (the table then
says it was cut off); depthlab's variants share what is left of ``--deadline`` (the whole script's seconds).
Each run is timed from its launch to the log line of that evaluation ("wall to target": start-up, compile,
evaluations and checkpoints included) and depthlab's own training clock (summary.json's ``target_reached_s``:
the steps and evaluations, without start-up and compile) is shown beside it. Training tokens/s: the median of
depthlab's per-log-interval ``tokens_per_sec`` (first left out: it holds the first steps), and of nanoGPT's
own ``time Xms`` lines (iterations 0-4 and the ones that ran an evaluation left out).

``--quick`` checks the plumbing on any machine (CPU when there is no GPU): a tiny shape, 30 steps, target
3.9; its numbers mean nothing. Bad input or a failed run: one line ``depthlab: error: ...``, exit 2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from vs_nanogpt import DL_EVAL, NANO_EVAL, cli_main, eval_lines, nanogpt_iters, prepare_nanogpt, run_logged

from depthlab import rundir
from depthlab.errors import DepthlabError

#: depthlab's variants: name -> flags after ``--preset nanogpt-gpu`` (what each measures, in its name)
VARIANTS = {
    "preset": [],  # compile_mode auto: CUDA graphs on one GPU
    "no-graphs": ["--train.compile_mode", "default"],
    "eval250": ["--train.eval_interval", "250", "--train.eval_iters", "200"],  # nanoGPT's evaluation cadence
    "muon": ["--train.optimizer", "muon"],
}
EVAL = ["--train.eval_interval", "100", "--train.eval_iters", "40"]
QUICK_SHAPE = ["--model.n_layer", "1", "--model.n_head", "2", "--model.n_embd", "32", "--model.block_size", "32",
               "--train.batch_size", "8", "--train.max_iters", "30", "--train.eval_interval", "10",
               "--train.eval_iters", "2", "--train.warmup_iters", "5"]
NANO_QUICK = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=8", "--max_iters=30",
              "--lr_decay_iters=30", "--eval_interval=10", "--eval_iters=2", "--warmup_iters=5", "--log_interval=1"]


def median_tps(values: list[float]) -> Optional[float]:
    """The median of per-interval tokens/s, the first interval (it holds the first steps) left out."""
    vals = values[1:] or values
    return statistics.median(vals) if vals else None


def depthlab_run(name: str, flags: list[str], target: float, out: Path, logs: Path, limit: float, quick: bool,
                 device: str) -> dict:
    """One ``depthlab train --preset nanogpt-gpu`` variant to val <= target; its log written beside ``out``."""
    shape = QUICK_SHAPE + ["--train.device", device, "--train.compile", "false"] if quick else EVAL
    cmd = [sys.executable, "-m", "depthlab", "train", "--preset", "nanogpt-gpu", *shape, *flags,
           "--train.target_val_loss", str(target), "--train.max_time", f"{max(limit, 1):.0f}",
           "--train.fit_to_time", "false", "--train.out_dir", str(out), "--train.progress", "false",
           "--train.grad_log_interval", "0", "--train.probe_interval", "0"]
    try:
        launch = run_logged(cmd, out.parent, timeout=limit + 240)
    except DepthlabError as e:  # one variant failing (a backend error, say) must not cost the others
        print(f"depthlab {name}: failed: {e}", flush=True)
        return {"name": f"depthlab {name}", "flags": " ".join(flags), "hit": None, "best": None, "wall": 0.0,
                "trained_s": None, "tps": None, "resolved": {}, "cut": False, "failed": str(e)[:300]}
    (logs / f"{name}.log").write_text("\n".join(f"{t:8.2f} {s}" for t, s in launch.lines) + "\n")
    evals = eval_lines(launch.lines, DL_EVAL)
    summary = rundir.read_json(out / rundir.SUMMARY) or {}
    cfg = rundir.read_json(out / rundir.CONFIG) or {}
    tps = [r["tokens_per_sec"] for r in rundir.read_metrics(out, "train") if r.get("tokens_per_sec")]
    hit = next((e for e in evals if e[1] <= target), None)
    return {"name": f"depthlab {name}", "flags": " ".join(flags) or "(preset as shipped)", "hit": hit,
            "best": min((e[1] for e in evals), default=None), "wall": launch.wall,
            "trained_s": summary.get("target_reached_s"), "tps": median_tps(tps),
            "resolved": cfg.get("resolved", {}), "cut": launch.stopped}


def nanogpt_run(workdir: Path, target: float, limit: float, quick: bool, device: str, logs: Path) -> dict:
    """nanoGPT's recipe until its first eval line at or below ``target``, or ``limit`` seconds."""
    def reached(t: float, line: str) -> bool:
        m = NANO_EVAL.match(line)
        return bool(m) and float(m.group(3)) <= target

    extra = [f"--device={device}", "--compile=False", *NANO_QUICK] if quick else []
    cmd = [sys.executable, "train.py", "config/train_shakespeare_char.py", *extra]
    try:
        launch = run_logged(cmd, workdir, reached, timeout=limit)
    except DepthlabError as e:  # depthlab's runs still follow
        print(f"nanoGPT: failed: {e}", flush=True)
        return {"name": "nanoGPT train.py", "flags": " ".join(cmd[2:]), "hit": None, "best": None, "wall": 0.0,
                "trained_s": None, "tps": None, "resolved": {}, "cut": False, "failed": str(e)[:300],
                "last_step": None}
    (logs / "nanogpt.log").write_text("\n".join(f"{t:8.2f} {s}" for t, s in launch.lines) + "\n")
    evals = eval_lines(launch.lines, NANO_EVAL)
    hit = next((e for e in evals if e[1] <= target), None)
    tokens = (8 * 32) if quick else 64 * 256
    iters = [(i, dt) for i, _, dt in nanogpt_iters(launch.lines) if i >= 5 and i % (10 if quick else 250) != 0]
    tps = statistics.median(tokens / dt for _, dt in iters if dt > 0) if iters else None
    return {"name": "nanoGPT train.py", "flags": " ".join(cmd[2:]), "hit": hit,
            "best": min((e[1] for e in evals), default=None), "wall": launch.wall, "trained_s": None,
            "tps": tps, "resolved": {}, "cut": launch.stopped and hit is None,
            "last_step": evals[-1][0] if evals else None}


def row(r: dict, ref: Optional[float]) -> str:
    """One table line: the run's target step, wall to target, training clock, tokens/s, ratio to nanoGPT."""
    hit = r["hit"]
    to_t = f"{hit[2]:7.1f}" if hit else "    n/a"
    step = f"{hit[0]:5d}" if hit else "  n/a"
    trained = f"{r['trained_s']:6.1f}" if r.get("trained_s") is not None else "     -"
    tps = f"{r['tps']:11,.0f}" if r.get("tps") else "          -"
    ratio = f"{hit[2] / ref:5.2f}x" if hit and ref else "     -"
    best = f"{r['best']:.4f}" if r.get("best") is not None else "-"
    note = "" if hit else (f" FAILED: {r['failed']}" if r.get("failed") else
                           " (cut off before the target)" if r["cut"] else " (ended above the target)")
    return f"{r['name']:<26} {step} {to_t} {trained} {r['wall']:7.1f} {tps} {ratio}  best {best}{note}"


def gpu_line() -> tuple[str, str]:
    """(device description, the device name to pass on): the GPU and torch, or the CPU fallback."""
    import torch

    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        return (f"{p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs; torch {torch.__version__}",
                "cuda")
    return f"no CUDA device (CPU); torch {torch.__version__}", "cpu"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Arguments; one ``DepthlabError`` line for a bad one."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], usage=__doc__.split("\n\n")[1][7:])
    p.add_argument("--nanogpt", type=Path, required=True, help="root of a nanoGPT checkout")
    p.add_argument("--target", type=float, default=1.47, help="val loss in nats (default 1.47)")
    p.add_argument("--deadline", type=float, default=540.0, help="seconds for the whole script (default 540)")
    p.add_argument("--variants", default="preset,no-graphs,eval250", help=f"comma list of {', '.join(VARIANTS)}")
    p.add_argument("--nanogpt-limit", type=float, default=240.0,
                   help="seconds nanoGPT may run (it runs first; default 240)")
    p.add_argument("--logs", type=Path, default=None, help="keep every run's log and the table in this folder")
    p.add_argument("--quick", action="store_true", help="plumbing check: tiny shape, 30 steps, target 3.9")
    a = p.parse_args(argv)
    a.variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    bad = [v for v in a.variants if v not in VARIANTS]
    if bad or not a.variants:
        raise DepthlabError(f"--variants {','.join(bad) or '(none)'}: choose from {', '.join(VARIANTS)}")
    if a.deadline <= 0:
        raise DepthlabError(f"--deadline {a.deadline:g}: give a positive number of seconds")
    if a.quick:
        a.target = 3.9
    return a


def run(a: argparse.Namespace) -> None:
    """Prepare nanoGPT, run depthlab's variants then nanoGPT, print and keep the table."""
    from depthlab.data import embedded_corpus_path

    start = time.perf_counter()
    what, device = gpu_line()
    print(f"device: {what}; target val <= {a.target}; deadline {a.deadline:g} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu_vs_nanogpt-") as tmp:
        tmp = Path(tmp)
        logs = a.logs or tmp
        logs.mkdir(parents=True, exist_ok=True)
        print(prepare_nanogpt(a.nanogpt.expanduser().resolve(), tmp / "nanogpt", embedded_corpus_path()))
        left = a.deadline - (time.perf_counter() - start)
        nano = nanogpt_run(tmp / "nanogpt", a.target, min(a.nanogpt_limit, left), a.quick, device, logs)
        print(row(nano, None), flush=True)
        results = []
        for k, name in enumerate(a.variants):
            left = a.deadline - (time.perf_counter() - start)
            share = left / (len(a.variants) - k)
            # start-up and compile (~25 s from a warm compile cache, ~35 s cold) come out of the share
            r = depthlab_run(name, VARIANTS[name], a.target, tmp / f"run-{name}", logs,
                             share if a.quick else max(share - 25, 20), a.quick, device)
            shown = {k: v for k, v in r["resolved"].items() if k not in ("tuning", "corpus_sha256")}
            print(row(r, None), f"| resolved {shown}", flush=True)
            results.append(r)
        table(results, nano, a.target, what, logs)


def table(results: list[dict], nano: dict, target: float, what: str, logs: Path) -> None:
    """Print the table and write it to ``logs/table.txt``."""
    # nanoGPT's wall to the target; if its whole recipe ended above the target, its whole run's wall
    ref = nano["hit"][2] if nano["hit"] else (None if nano["cut"] else nano["wall"])
    head = (f"{'run':<26} {'step':>5} {'wall→T':>7} {'train':>6} {'wall':>7} {'tokens/s':>11} {'ratio':>6}"
            f"   (wall→T: launch to the eval line at val <= {target}, s; train: depthlab's training clock "
            "to it, s; ratio: wall→T / nanoGPT's)")
    lines = [head, *(row(r, ref) for r in [*results, nano])]
    if not nano["hit"] and not nano["cut"]:
        lines.append(f"nanoGPT's whole recipe ended at best val {nano['best']} (above the target) after "
                     f"{nano['wall']:.1f} s: the ratios are to that whole run's wall time")
    if nano["cut"]:
        lines.append(f"nanoGPT was stopped by the deadline at its eval of step {nano['last_step']} "
                     f"after {nano['wall']:.0f} s: its wall to target is longer than that")
    print("\n".join(lines))
    (logs / "table.txt").write_text(f"device: {what}\n" + "\n".join(lines) + "\n")


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point: 0 done, 2 bad input or a failed run (one ``depthlab: error:`` line)."""
    return cli_main(lambda a: run(parse_args(a)), argv)


if __name__ == "__main__":
    sys.exit(main())
