"""nanoGPT's own ``train.py`` and ``depthlab train`` side by side, interleaved in one run, at nanoGPT's CPU shape.

Usage: python benchmarks/vs_nanogpt.py [--nanogpt PATH] [--rounds 2] [--steps 500 | --seconds S]
                                       [--target 1.88] [--eval-interval 100] [--no-ttq] [--quick]
                                       [--eval-iters N]
                                       [--variants defaults,fp32 AdamW,...]

``--nanogpt PATH`` is the root of a nanoGPT checkout (``git clone https://github.com/karpathy/nanoGPT``;
never committed here). Its ``*.py`` and ``config/`` are copied to a temporary folder and Tiny
Shakespeare is prepared there exactly as its ``data/shakespeare_char/prepare.py`` does (first 90 %
of the characters for training, the sorted characters as ids, uint16 ``.bin`` files, ``meta.pkl``),
from depthlab's embedded corpus (the same file prepare.py downloads): the checkout is only read.
Without ``--nanogpt`` the faithful re-implementation of benchmarks/time_to_loss.py runs instead,
through the same loop and log lines, and the output says so.

Each round runs, one after the other in this process tree, each as a user starts it (this script's
environment, printed, passed on unchanged): nanoGPT's README CPU command (``python train.py
config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20 --log_interval=1
--block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000
--lr_decay_iters=2000 --dropout=0.0``, with ``--max_iters`` set to ``--steps``: train.py then runs
iterations 0 to max_iters), then ``python -m depthlab train`` (the ``depthlab`` command, its own
start-up choices included) at the same shape (4 layers, 4 heads, n_embd 128, block_size 64, batch 12,
dropout 0, eval every 250 steps on 20 batches, a log line every step, ``--train.max_iters`` =
``--steps``, ``--train.max_time 0``) in four variants: its defaults (rotary positions since they became the
default), fp32 AdamW with nanoGPT's learned positions (``--train.dtype float32 --train.optimizer adamw
--model.position learned``: nanoGPT's model and algorithm), ``--train.dtype auto --train.optimizer adamw``,
and the defaults with ``--train.compile true`` (not a default on a CPU: depthlab compiles before its training clock
starts, so the compile time shows in the wall column only; torch's compile cache under /tmp makes a
later round's compile a few seconds instead of ~45 s cold on a 2-core Xeon); the
``resolved`` section of each run's config.json (what its ``auto`` settings became) is printed.
With ``--seconds S`` nanoGPT is stopped S seconds after its first step line and depthlab gets
``--train.max_time S --train.fit_to_time false``. Then, unless ``--no-ttq``, time to quality:
nanoGPT's CPU recipe (its 2000 steps, evaluated every ``--eval-interval`` steps instead of 250, so
the time is known to that many steps; stopped at the first val <= ``--target``) and ``depthlab train
--preset fast-cpu --train.target_val_loss TARGET`` (which stops itself there; evaluated every 50
steps), each timed from its launch to the log line of that evaluation.

Throughput, two figures per run, the first 5 steps left out of both (nanoGPT's own MFU estimate
waits 5 steps too):
- training tokens/s, from each tool's own log: nanoGPT's ``iter N: ... time Xms`` (the wall time
  between two iterations; the iterations that ran an evaluation and checkpoint are left out),
  depthlab's ``tokens_per_sec`` in metrics.jsonl (the steps' own time: without evaluation,
  checkpoints, logging and the analytics observers' hooks);
- loop tokens/s: steps between the first and last step line on stdout, over the seconds between
  them as this script saw them (everything in the loop: evaluations, checkpoints, logging, observers).
The ratios depthlab / nanoGPT are taken per round and shown as min-max over the rounds, and with three
or more rounds their median too (a 2-core virtual machine's speed was seen to switch by ~1.4x within
seconds, so one round can favour either side). ``--variants defaults`` runs only that depthlab run in
each round, leaving time for more rounds. Model
FLOP/s = tokens/s x (6N + 12·L·T·C) per token (Kaplan et al. 2020; PaLM, Chowdhery et al. 2022,
appendix B; nanoGPT's ``estimate_mfu``), N = 12·L·C² + V·C, as a share of a 1024³ ``torch.matmul``
timed in each round (fp32; bf16 too where the CPU has native bf16), the best round taken as the peak.

``--quick`` checks the plumbing (1 round of 12 steps; time to val <= 3.6 with evaluations every 10
steps, at most 100 steps; no final validation; no compiled run). Its numbers mean nothing; for figures, on an idle
machine: ``python benchmarks/vs_nanogpt.py --nanogpt PATH --rounds 2 --steps 1000``. ``--eval-iters N`` evaluates
on N batches per split instead of 20 in every run, both tools' (the smallest plumbing check: ``--quick
--eval-iters 2``; the time-to-quality figures then rest on noisier evaluations).
Bad input or a failed run: one line ``depthlab: error: ...``, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from depthlab import rundir
from depthlab.errors import DepthlabError

# torch, numpy and depthlab.benchmarking are imported in the functions that use them: --help (which the
# test suite runs for every benchmark) then answers without loading torch.

L, H, C, T, B = 4, 4, 128, 64, 12
TOKENS_PER_STEP = B * T
SETTLE = 5  # steps left out at the start of every run
README_FLAGS = ["--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=1", "--block_size=64",
                "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128", "--max_iters=2000",
                "--lr_decay_iters=2000", "--dropout=0.0"]
NANOGPT_EVAL_INTERVAL = 250  # config/train_shakespeare_char.py
DEPTHLAB_SHAPE = ["--model.n_layer", "4", "--model.n_head", "4", "--model.n_embd", "128", "--model.block_size",
                  "64", "--train.batch_size", "12", "--model.dropout", "0", "--train.eval_interval",
                  str(NANOGPT_EVAL_INTERVAL), "--train.eval_iters", "20", "--train.log_interval", "1"]
VARIANTS = {"defaults": [],
            # nanoGPT's model and algorithm: its learned table of positions, fp32, AdamW
            "fp32 AdamW": ["--train.dtype", "float32", "--train.optimizer", "adamw", "--model.position", "learned"],
            "dtype auto, AdamW": ["--train.dtype", "auto", "--train.optimizer", "adamw"],
            "defaults, compiled": ["--train.compile", "true"]}
NANO_ITER = re.compile(r"^iter (\d+): loss ([-\d.naif]+), time ([\d.]+)ms")
NANO_EVAL = re.compile(r"^step (\d+): train loss ([-\d.naif]+), val loss ([-\d.naif]+)")
DL_STEP = re.compile(r"^step (\d+)/\d+ \|")
DL_EVAL = re.compile(r"^eval step (\d+): train ([-\d.naif]+) val ([-\d.naif]+)")


# ------------------------------------------------------------------------------------------ parsing
def nanogpt_iters(lines: list[tuple[float, str]]) -> list[tuple[int, float, float]]:
    """``(iter, seconds since launch, dt seconds)`` of each ``iter N: loss X, time Yms`` line of train.py."""
    out = []
    for t, line in lines:
        m = NANO_ITER.match(line)
        if m:
            out.append((int(m.group(1)), t, float(m.group(3)) / 1000.0))
    return out


def eval_lines(lines: list[tuple[float, str]], pattern: re.Pattern) -> list[tuple[int, float, float]]:
    """``(step, val loss in nats, seconds since launch)`` of each evaluation line matching ``pattern``."""
    out = []
    for t, line in lines:
        m = pattern.match(line)
        if m:
            out.append((int(m.group(1)), float(m.group(3)), t))
    return out


def nanogpt_train_tps(iters: list[tuple[int, float, float]], eval_interval: int,
                      tokens_per_step: int = TOKENS_PER_STEP) -> float:
    """Training tokens/s from train.py's own per-iteration times.

    Iteration ``i``'s ``dt`` runs from the end of iteration ``i - 1`` to its own end, so when
    ``i % eval_interval == 0`` it holds that iteration's evaluation (and checkpoint): those are left
    out, as are the first :data:`SETTLE` iterations.

    Raises:
        DepthlabError: no iteration is left to measure.
    """
    dts = [dt for i, _, dt in iters if i >= SETTLE and i % eval_interval != 0]
    if not dts:
        raise DepthlabError(f"nanoGPT logged {len(iters)} iterations, none after the first {SETTLE}: "
                            "raise --steps or --seconds")
    return tokens_per_step * len(dts) / sum(dts)


def depthlab_train_tps(records: list[dict], tokens_per_step: int = TOKENS_PER_STEP) -> float:
    """Training tokens/s from depthlab's ``train`` records (``step``, ``tokens_per_sec``), steps > SETTLE.

    A record's ``tokens_per_sec`` covers the steps since the previous record, so its seconds are
    ``steps x tokens_per_step / tokens_per_sec``; the total tokens over the total seconds is returned.

    Raises:
        DepthlabError: no record after the first :data:`SETTLE` steps.
    """
    prev, tokens, secs = 0, 0, 0.0
    for r in sorted(records, key=lambda r: r["step"]):
        n = int(r["step"]) - prev
        prev = int(r["step"])
        tps = r.get("tokens_per_sec")
        if prev <= SETTLE or not isinstance(tps, (int, float)) or tps <= 0:
            continue
        tokens += n * tokens_per_step
        secs += n * tokens_per_step / tps
    if not secs:
        raise DepthlabError(f"depthlab logged no training step after the first {SETTLE}: raise --steps or --seconds")
    return tokens / secs


def loop_tps(points: list[tuple[int, float]], tokens_per_step: int = TOKENS_PER_STEP) -> float:
    """Tokens/s between the first step line after :data:`SETTLE` steps and the last: ``(step, seconds)`` pairs.

    Raises:
        DepthlabError: fewer than two such lines.
    """
    pts = [(s, t) for s, t in points if s >= SETTLE]
    if len(pts) < 2 or pts[-1][1] <= pts[0][1]:
        raise DepthlabError("fewer than two step lines after the first steps: raise --steps or --seconds")
    return (pts[-1][0] - pts[0][0]) * tokens_per_step / (pts[-1][1] - pts[0][1])


def model_flops_per_token(vocab_size: int) -> tuple[int, float]:
    """``(N, FLOPs per token)`` at nanoGPT's CPU shape: N = 12·L·C² + V·C (no biases, tied head)."""
    from depthlab.benchmarking import flops_per_token

    n = 12 * L * C * C + vocab_size * C
    return n, flops_per_token(n, L, T, C)


def spread(xs: list[float], fmt: str = ".2f") -> str:
    """``min-max`` of ``xs`` (one value when there is one), formatted with ``fmt``."""
    lo, hi = min(xs), max(xs)
    return f"{lo:{fmt}}" if len(xs) == 1 or f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}-{hi:{fmt}}"


# ------------------------------------------------------------------------------------------ machine
def cpu_flags() -> str:
    """The CPU's SIMD / matrix flags that matter here (avx2, avx512*, amx*) from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split(":", 1)[-1].split()
    except OSError:
        return "unknown (no /proc/cpuinfo)"
    keep = sorted(f for f in set(flags) if f in ("avx", "avx2", "fma") or f.startswith(("avx512", "amx")))
    amx = "" if any(f.startswith("amx") for f in keep) else " (no AMX exposed)"
    return (" ".join(keep) or "none of avx/avx2/avx512/amx") + amx


def matmul_peaks(native_bf16: bool) -> dict[str, float]:
    """FLOP/s of a 1024³ matmul now: fp32 always, bf16 only with native bf16 (emulated it takes minutes)."""
    import torch

    from depthlab.benchmarking import matmul_flops

    out = {"fp32": matmul_flops(torch.float32)}
    if native_bf16:
        out["bf16"] = matmul_flops(torch.bfloat16)
    return out


# ------------------------------------------------------------------------------------------ processes
@dataclass
class Launch:
    """One subprocess: its output lines with the seconds since launch, exit status, wall seconds."""

    lines: list[tuple[float, str]]
    rc: int
    wall: float
    stopped: bool  # this script ended it (time up or target reached)


def run_logged(cmd: list[str], cwd: Path, stop: Callable[[float, str], bool] = lambda t, s: False,
               timeout: float = 3600.0) -> Launch:
    """Run ``cmd`` with unbuffered output, timestamping each line; SIGTERM it when ``stop(t, line)`` is true.

    Raises:
        DepthlabError: it exited non-zero without being stopped here, or ran past ``timeout`` seconds.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # a line's timestamp is when it was printed
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, stopped = [], False
    assert p.stdout is not None
    for raw in p.stdout:
        t = time.perf_counter() - t0
        lines.append((t, raw.rstrip("\n")))
        if not stopped and (stop(t, lines[-1][1]) or t > timeout):
            stopped = True
            p.send_signal(signal.SIGTERM)
    rc = p.wait()
    wall = time.perf_counter() - t0
    if rc != 0 and not stopped:
        tail = next((s for _, s in reversed(lines) if s.strip()), "(no output)")
        raise DepthlabError(f"`{' '.join(cmd[:4])} ...` exited {rc} in {cwd}: {tail.strip()}")
    return Launch(lines, rc, wall, stopped)


# ------------------------------------------------------------------------------------------ nanoGPT
def prepare_nanogpt(src: Path, dst: Path, corpus: Path) -> str:
    """Copy the checkout's ``*.py`` and ``config/`` to ``dst`` and write ``data/shakespeare_char`` there.

    The data follows nanoGPT's ``data/shakespeare_char/prepare.py``: ids = positions in the sorted
    set of characters, first ``int(0.9 n)`` characters for training, uint16 ``train.bin`` /
    ``val.bin`` and ``meta.pkl`` (vocab_size, itos, stoi). Returns a description of the checkout.

    Raises:
        DepthlabError: ``src`` is not a nanoGPT checkout (no train.py, model.py, configurator.py or
            config/train_shakespeare_char.py).
    """
    import numpy as np

    need = ["train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py"]
    missing = [n for n in need if not (src / n).is_file()]
    if missing:
        raise DepthlabError(f"--nanogpt {src}: not a nanoGPT checkout (no {', '.join(missing)}): give the folder "
                            "of `git clone https://github.com/karpathy/nanoGPT`, or leave --nanogpt out to run "
                            "the re-implementation")
    dst.mkdir(parents=True)
    for f in src.glob("*.py"):
        shutil.copy2(f, dst / f.name)
    shutil.copytree(src / "config", dst / "config")
    data = corpus.read_text(encoding="utf-8")
    chars = sorted(set(data))
    stoi, itos = {ch: i for i, ch in enumerate(chars)}, dict(enumerate(chars))
    n = len(data)
    out = dst / "data" / "shakespeare_char"
    out.mkdir(parents=True)
    for name, part in (("train.bin", data[:int(n * 0.9)]), ("val.bin", data[int(n * 0.9):])):
        rundir.atomic_write(out / name, np.array([stoi[c] for c in part], dtype=np.uint16).tobytes())
    rundir.atomic_write(out / "meta.pkl", pickle.dumps({"vocab_size": len(chars), "itos": itos, "stoi": stoi}))
    commit = "no git metadata"
    if (src / ".git").exists():
        r = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        commit = f"commit {r.stdout.strip()}" if r.returncode == 0 else commit
    return f"nanoGPT's own train.py from {src} ({commit}), copied to {dst}"


def nanogpt_cmd(workdir: Optional[Path], overrides: list[str]) -> list[str]:
    """The README's CPU command (train.py, or the re-implementation when ``workdir`` is None) + overrides."""
    if workdir is None:
        return [sys.executable, str(Path(__file__).resolve()), "--reference-train", *README_FLAGS, *overrides]
    return [sys.executable, "train.py", "config/train_shakespeare_char.py", *README_FLAGS, *overrides]


def _reference_batches() -> tuple[int, Callable]:
    """``(V, get_batch)`` of the embedded corpus as train.py reads it: ``get_batch(split) -> x, y`` (B, T) int64,
    random windows drawn with ``torch.randint``, the first 90 % of the characters for ``train``."""
    import torch

    from depthlab.data import embedded_corpus_path

    text = embedded_corpus_path().read_text(encoding="utf-8")
    stoi = {ch: i for i, ch in enumerate(sorted(set(text)))}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    splits = {"train": data[:int(0.9 * len(data))], "val": data[int(0.9 * len(data)):]}

    def get_batch(split):
        d = splits[split]
        ix = torch.randint(len(d) - T, (B,))
        return torch.stack([d[i:i + T] for i in ix]), torch.stack([d[i + 1:i + 1 + T] for i in ix])

    return len(stoi), get_batch


def reference_train(argv: list[str]) -> None:
    """The re-implementation run like train.py: its loop order, its log lines, README flags as ``--key=value``.

    Model, lr schedule and data come from benchmarks/time_to_loss.py (nanoGPT's GPT at the baby shape,
    AdamW betas 0.9/0.99 with weight decay 0.1 on matrices, warmup 100 then cosine to 1e-4 at
    2000). Read here: ``max_iters``, ``eval_interval``, ``eval_iters``; the shape flags must be the
    README's, which is the only shape the re-implementation has.

    Raises:
        DepthlabError: a shape flag other than the README's.
    """
    import torch

    from time_to_loss import LR, NanoGPT, lr_at  # benchmarks/ is on sys.path when this file runs

    opts = {"max_iters": 2000, "eval_interval": NANOGPT_EVAL_INTERVAL, "eval_iters": 20}
    fixed = {"block_size": T, "batch_size": B, "n_layer": L, "n_head": H, "n_embd": C}
    for a in argv:
        k, _, v = a.lstrip("-").partition("=")
        if k in opts:
            opts[k] = int(v)
        elif k in fixed and int(v) != fixed[k]:
            raise DepthlabError(f"--{k}={v}: the re-implementation has nanoGPT's CPU shape only ({k} {fixed[k]})")
    vocab_size, get_batch = _reference_batches()
    torch.manual_seed(1337)
    model = NanoGPT(vocab_size)
    groups = [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.99))
    best, it = 1e9, 0
    x, y = get_batch("train")
    t0 = time.time()
    while True:
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        if it % opts["eval_interval"] == 0:
            model.eval()
            with torch.no_grad():
                ev = {s: sum(model(*get_batch(s)).item() for _ in range(opts["eval_iters"])) / opts["eval_iters"]
                      for s in ("train", "val")}
            model.train()
            print(f"step {it}: train loss {ev['train']:.4f}, val loss {ev['val']:.4f}")
            if ev["val"] < best:
                best = ev["val"]
                if it > 0:  # train.py's checkpoint, for its cost; written, never loaded
                    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, "ckpt.pt")
        loss = model(x, y)
        x, y = get_batch("train")  # train.py fetches the next batch between forward and backward
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        print(f"iter {it}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms")
        it += 1
        if it > opts["max_iters"]:
            break


# ------------------------------------------------------------------------------------------ the runs
def _stop_after(seconds: float, step_line: re.Pattern) -> Callable[[float, str], bool]:
    """A ``stop`` for :func:`run_logged`: true ``seconds`` after the first line matching ``step_line``."""
    first: list[float] = []

    def stop(t: float, line: str) -> bool:
        if not first and step_line.match(line):
            first.append(t)
        return bool(first) and t - first[0] >= seconds

    return stop


def nanogpt_throughput(workdir: Optional[Path], cwd: Path, steps: int, seconds: float,
                       extra: tuple[str, ...] = ()) -> dict:
    """One nanoGPT run at its README CPU command (plus ``extra`` overrides) for ``steps`` (or ``seconds`` after its
    first step)."""
    if seconds:
        launch = run_logged(nanogpt_cmd(workdir, ["--max_iters=100000000", *extra]), cwd,
                            _stop_after(seconds, NANO_ITER))
    else:
        launch = run_logged(nanogpt_cmd(workdir, [f"--max_iters={steps}", *extra]), cwd)
    iters = nanogpt_iters(launch.lines)
    return {"train_tps": nanogpt_train_tps(iters, NANOGPT_EVAL_INTERVAL),
            "loop_tps": loop_tps([(i, t) for i, t, _ in iters]), "wall": launch.wall, "steps": len(iters)}


def depthlab_throughput(extra: list[str], out: Path, steps: int, seconds: float, quick: bool) -> dict:
    """One ``depthlab train`` run at nanoGPT's shape with ``extra`` flags; its figures and ``resolved``."""
    cmd = [sys.executable, "-m", "depthlab", "train", *DEPTHLAB_SHAPE, *extra, "--train.out_dir", str(out),
           "--train.progress", "false"]
    if seconds:  # the loop's own wall-clock budget; no re-planned schedule
        cmd += ["--train.max_iters", "100000000", "--train.max_time", str(seconds), "--train.fit_to_time", "false"]
    else:
        cmd += ["--train.max_iters", str(steps), "--train.max_time", "0"]
    if quick:
        cmd += ["--train.final_validation", "false"]
    launch = run_logged(cmd, out.parent)
    steps_seen = [(int(m.group(1)), t) for t, s in launch.lines if (m := DL_STEP.match(s))]
    cfg = rundir.read_json(out / rundir.CONFIG) or {}
    return {"train_tps": depthlab_train_tps(rundir.read_metrics(out, "train")), "loop_tps": loop_tps(steps_seen),
            "wall": launch.wall, "steps": len(steps_seen), "resolved": cfg.get("resolved", {})}


def nanogpt_ttq(workdir: Optional[Path], cwd: Path, target: float, eval_interval: int, max_iters: int,
                extra: tuple[str, ...] = ()) -> dict:
    """nanoGPT's CPU recipe (plus ``extra`` overrides) evaluated every ``eval_interval`` steps, ended at the first
    val <= ``target``."""
    def reached(t: float, line: str) -> bool:
        m = NANO_EVAL.match(line)
        return bool(m) and float(m.group(3)) <= target

    cmd = nanogpt_cmd(workdir, [f"--eval_interval={eval_interval}", f"--max_iters={max_iters}", *extra])
    launch = run_logged(cmd, cwd, reached)
    evals = eval_lines(launch.lines, NANO_EVAL)
    return {"hit": next((e for e in evals if e[1] <= target), None), "last": evals[-1] if evals else None,
            "wall": launch.wall}


def depthlab_ttq(out: Path, target: float, extra: list[str]) -> dict:
    """``depthlab train --preset fast-cpu`` with ``--train.target_val_loss target``; the first eval line at it."""
    cmd = [sys.executable, "-m", "depthlab", "train", "--preset", "fast-cpu", "--train.target_val_loss", str(target),
           "--train.out_dir", str(out), "--train.progress", "false", *extra]
    launch = run_logged(cmd, out.parent)
    evals = eval_lines(launch.lines, DL_EVAL)
    summary = rundir.read_json(out / rundir.SUMMARY) or {}
    cfg = rundir.read_json(out / rundir.CONFIG) or {}
    return {"hit": next((e for e in evals if e[1] <= target), None), "last": evals[-1] if evals else None,
            "wall": launch.wall, "trained_s": summary.get("target_reached_s"), "resolved": cfg.get("resolved", {}),
            "eval_interval": (cfg.get("train") or {}).get("eval_interval")}


# ------------------------------------------------------------------------------------------ report
def fmt_resolved(r: dict) -> str:
    """config.json's ``resolved`` section: its plain values on one line, each nested one (as JSON) on its own."""
    flat = ", ".join(f"{k} {v}" for k, v in r.items() if not isinstance(v, (dict, list)))
    nested = "".join(f"\n      resolved.{k}: {json.dumps(v)}" for k, v in r.items() if isinstance(v, (dict, list)))
    return (flat or "(no resolved section written)") + nested


def throughput_line(name: str, r: dict) -> str:
    """One run's figures as printed after it ends."""
    return (f"  {name:26s} {r['steps']:5d} steps: training {r['train_tps']:8,.0f} tokens/s, loop "
            f"{r['loop_tps']:8,.0f} tokens/s, {r['wall']:6.1f} s wall (launch to exit)")


def ttq_line(name: str, r: dict, target: float, every: Optional[int]) -> str:
    """One time-to-quality run: when (from launch) and at which step val first read <= target."""
    if r["hit"] is None:
        last = r["last"]
        end = f"last val {last[1]:.4f} at step {last[0]}" if last else "no evaluation logged"
        return f"  {name:34s} did NOT reach val <= {target} ({end}; {r['wall']:.1f} s wall)"
    step, val, t = r["hit"]
    own = f"; its own target_reached_s {r['trained_s']} s of training" if r.get("trained_s") is not None else ""
    return (f"  {name:34s} val {val:.4f} <= {target} at step {step} (evaluated every {every} steps), "
            f"{t:6.1f} s after launch{own}")


def variants(a: argparse.Namespace) -> dict[str, list[str]]:
    """The depthlab runs of a round: :data:`VARIANTS`, without the compiled one under ``--quick`` (a cold
    compile takes 45-105 s on a 2-core CPU, longer than the rest of the plumbing check)."""
    chosen = getattr(a, "variants", None) or list(VARIANTS)
    return {k: v for k, v in VARIANTS.items()
            if k in chosen and not (getattr(a, "quick", False) and "--train.compile" in v)}


def run_round(k: int, a: argparse.Namespace, nano: Optional[Path], tmp: Path, native_bf16: bool) -> dict:
    """One interleaved round: matmul peak, nanoGPT, the depthlab variants, then time to quality."""
    cwd = nano if nano is not None else tmp
    from depthlab.training.machine import busy_cores

    # Cores other processes keep busy now (/proc/stat over 1 s, this script asleep): the 1-minute load
    # average still counts this script's own previous runs, so it read "busy" on an idle machine.
    res: dict = {"busy": busy_cores(1.0), "load": os.getloadavg()[0]}
    res["peak"] = matmul_peaks(native_bf16)
    peaks = ", ".join(f"{d} {v / 1e9:.0f} GFLOP/s" for d, v in res["peak"].items())
    print(f"round {k}: {res['busy']} of {os.cpu_count()} cores busy with other processes (load average "
          f"{res['load']:.1f}, this script's runs included); 1024^3 matmul {peaks}", flush=True)
    res["nanoGPT"] = nanogpt_throughput(nano, cwd, a.steps, a.seconds, a.nano_extra)
    print(throughput_line("nanoGPT train.py" if nano else "nanoGPT re-implementation", res["nanoGPT"]), flush=True)
    for name, extra in variants(a).items():
        out = tmp / f"round{k}-{re.sub(r'[^a-z0-9]+', '-', name.lower())}"
        res[name] = r = depthlab_throughput([*extra, *a.dl_extra], out, a.steps, a.seconds, a.quick)
        print(throughput_line(f"depthlab {name}", r) + f"\n      resolved: {fmt_resolved(r['resolved'])}", flush=True)
    if a.no_ttq:
        return res
    n = nanogpt_ttq(nano, cwd, a.target, a.eval_interval, a.ttq_iters, a.nano_extra)
    print(ttq_line("nanoGPT CPU recipe", n, a.target, a.eval_interval), flush=True)
    d = depthlab_ttq(tmp / f"round{k}-fast-cpu", a.target, a.ttq_extra)
    print(ttq_line("depthlab --preset fast-cpu", d, a.target, d["eval_interval"])
          + f"\n      resolved: {fmt_resolved(d['resolved'])}", flush=True)
    res["ttq"] = {"nanoGPT": n, "depthlab": d}
    return res


def print_summary(rounds: list[dict], fpt: float, a: argparse.Namespace, nano_label: str) -> None:
    """Ratios depthlab / nanoGPT per round (min-max), model FLOP/s and its share of the best matmul peak."""
    peak = {d: max(r["peak"][d] for r in rounds) for d in rounds[0]["peak"]}
    shares = " ".join(f"{'% ' + d + ' peak':>12s}" for d in peak)
    print(f"\nsummary over {len(rounds)} round{'s' * (len(rounds) > 1)} (min-max; ratio = depthlab / nanoGPT in the "
          "same round):")
    print(f"  {'run':26s} {'training tok/s':>17s} {'ratio':>10s} {'loop tok/s':>17s} {'ratio':>10s} "
          f"{'model GFLOP/s':>14s} {shares} {'wall s':>12s}")
    over = False
    for name in ["nanoGPT", *variants(a)]:
        tr, lp = [r[name]["train_tps"] for r in rounds], [r[name]["loop_tps"] for r in rounds]
        rt = [r[name]["train_tps"] / r["nanoGPT"]["train_tps"] for r in rounds]
        rl = [r[name]["loop_tps"] / r["nanoGPT"]["loop_tps"] for r in rounds]
        share = " ".join(f"{spread([x * fpt / peak[d] * 100 for x in tr], '.1f'):>12s}" for d in peak)
        over = over or max(tr) * fpt > min(peak.values())
        label = nano_label if name == "nanoGPT" else f"depthlab {name}"
        print(f"  {label:26s} {spread(tr, ',.0f'):>17s} {spread(rt):>10s} {spread(lp, ',.0f'):>17s} "
              f"{spread(rl):>10s} {spread([x * fpt / 1e9 for x in tr], '.1f'):>14s} {share} "
              f"{spread([r[name]['wall'] for r in rounds], '.1f'):>12s}")
    if len(rounds) >= 3:  # min-max alone is ruled by the one round the host ran slow for one side
        med = {name: statistics.median(r[name]["train_tps"] / r["nanoGPT"]["train_tps"] for r in rounds)
               for name in variants(a)}
        print(f"  median training-tokens/s ratio over the {len(rounds)} rounds: "
              + ", ".join(f"{name} {m:.2f}" for name, m in med.items()))
    if over:
        print("  (a share over 100 %: the matmul was timed under a heavier load than that run had; "
              "rerun on an idle machine)")
    busy = max(r["busy"] for r in rounds)
    if busy:  # other work on the cores: neither side had the machine
        print(f"  the machine was busy (up to {busy} of {os.cpu_count()} cores taken by other processes at a "
              "round's start): these are not idle figures")
    if a.no_ttq:
        return
    ratios = [r["ttq"]["depthlab"]["hit"][2] / r["ttq"]["nanoGPT"]["hit"][2] for r in rounds
              if r["ttq"]["depthlab"]["hit"] and r["ttq"]["nanoGPT"]["hit"]]
    # nanoGPT's whole recipe ending above the target: it needs longer than its wall time, so depthlab's
    # time over that wall time is an upper bound of the ratio
    bounds = [r["ttq"]["depthlab"]["hit"][2] / r["ttq"]["nanoGPT"]["wall"] for r in rounds
              if r["ttq"]["depthlab"]["hit"] and not r["ttq"]["nanoGPT"]["hit"]]
    missed = len(rounds) - len(ratios) - len(bounds)
    text = spread(ratios) if ratios else ""
    if bounds:
        text += (", and " if text else "") + (f"< {max(bounds):.2f} in {len(bounds)} round{'s' * (len(bounds) > 1)} "
                                              "where nanoGPT's whole recipe ended above the target (its wall time "
                                              "is a lower bound of its time)")
    text = text or "none (depthlab did not reach the target)"
    print(f"  time to val <= {a.target} from launch, depthlab --preset fast-cpu / nanoGPT CPU recipe: {text}"
          + (f" ({missed} round{'s' * (missed > 1)} without a ratio)" if ratios and missed else "")
          + " (goal <= 0.33)")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line; ``--quick`` replaces rounds, steps, target and the recipes' length.

    Raises:
        DepthlabError: a count or duration out of range.
    """
    ap = argparse.ArgumentParser(description="nanoGPT's own train.py vs depthlab train, interleaved, at "
                                 "nanoGPT's CPU shape (see the module docstring)")
    ap.add_argument("--nanogpt", type=Path, help="root of a nanoGPT checkout (default: the re-implementation)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds (default 2)")
    ap.add_argument("--steps", type=int, default=500, help="training steps per throughput run (default 500)")
    ap.add_argument("--seconds", type=float, default=0.0, help="seconds per throughput run instead of --steps")
    ap.add_argument("--target", type=float, default=1.88, help="val loss (nats) for time to quality")
    ap.add_argument("--eval-interval", type=int, default=100,
                    help="nanoGPT's eval_interval in the time-to-quality run (its recipe: 250)")
    ap.add_argument("--no-ttq", action="store_true", help="skip the time-to-quality runs")
    ap.add_argument("--variants", default="", help="comma-separated depthlab runs of a round (default: all of "
                    + ", ".join(VARIANTS) + "); fewer runs per round leave time for more rounds")
    ap.add_argument("--quick", action="store_true", help="plumbing check: 1 round of 12 steps, time to val "
                    "<= 3.6 with evaluations every 10 steps, no final validation, no compiled run")
    ap.add_argument("--eval-iters", type=int, default=None, help="batches per split of every evaluation, in every "
                    "run (default: the README's 20; fewer make a quicker plumbing check with --quick)")
    a = ap.parse_args(argv)
    a.ttq_iters, a.ttq_extra = 2000, []
    if a.quick:
        a.rounds, a.steps, a.seconds, a.target, a.eval_interval, a.ttq_iters = 1, 12, 0.0, 3.6, 10, 100
        a.ttq_extra = ["--train.eval_interval", "10", "--train.max_iters", "100", "--train.final_validation", "false"]
    if a.eval_iters is not None and a.eval_iters < 1:
        raise DepthlabError(f"--eval-iters {a.eval_iters}: give 1 or more batches")
    # later flags win in both tools: the README's --eval_iters=20 and the shape's --train.eval_iters 20 give way
    a.nano_extra = (f"--eval_iters={a.eval_iters}",) if a.eval_iters else ()
    a.dl_extra = ("--train.eval_iters", str(a.eval_iters)) if a.eval_iters else ()
    a.ttq_extra += a.dl_extra
    if a.rounds < 1:
        raise DepthlabError(f"--rounds {a.rounds}: give 1 or more")
    a.variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    unknown = [v for v in a.variants if v not in VARIANTS]
    if unknown:
        raise DepthlabError(f"--variants: no depthlab run named {', '.join(map(repr, unknown))}; give some of "
                            + ", ".join(map(repr, VARIANTS)) + ", separated by commas")
    if a.seconds < 0 or (not a.seconds and a.steps < SETTLE + 5):
        raise DepthlabError(f"--steps {a.steps} / --seconds {a.seconds}: give at least {SETTLE + 5} steps "
                            f"(the first {SETTLE} are left out) or a positive number of seconds")
    if a.eval_interval < 1:
        raise DepthlabError(f"--eval-interval {a.eval_interval}: give 1 or more steps")
    return a


def run(a: argparse.Namespace) -> None:
    """Print the machine, prepare nanoGPT, run the rounds and print the summary."""
    from _common import machine_info
    from depthlab.data import embedded_corpus_path
    from depthlab.training.runtime import cpu_has_bf16

    native_bf16 = cpu_has_bf16()
    print(machine_info())
    print(f"cpu flags: {cpu_flags()}")
    env = ", ".join(f"{k}={os.environ.get(k, '(unset)')}" for k in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS",
                                                                      "GOMP_SPINCOUNT", "KMP_BLOCKTIME"))
    print(f"environment both are started with: {env}")
    corpus = embedded_corpus_path()
    vocab = len(set(corpus.read_text(encoding="utf-8")))
    n, fpt = model_flops_per_token(vocab)
    print(f"shape: {L} layers, {H} heads, n_embd {C}, block_size {T}, batch {B} ({TOKENS_PER_STEP} tokens/step), "
          f"V {vocab}; N = 12·L·C² + V·C = {n:,}; 6N + 12·L·T·C = {fpt / 1e6:.2f} MFLOP/token")
    what = f"{a.steps} steps" if not a.seconds else f"{a.seconds:g} s (nanoGPT: from its first step line; " \
        "depthlab: --train.max_time, no re-plan)"
    print(f"throughput runs: {what} each; first {SETTLE} steps left out")
    with tempfile.TemporaryDirectory(prefix="vs_nanogpt-") as tmp:
        tmp = Path(tmp)
        nano = None
        if a.nanogpt is not None:
            print(prepare_nanogpt(a.nanogpt.expanduser().resolve(), tmp / "nanogpt", corpus))
            nano = tmp / "nanogpt"
        else:
            print("nanoGPT: no checkout given (--nanogpt PATH), so NOT nanoGPT's own train.py: its faithful "
                  "re-implementation (benchmarks/time_to_loss.py's model, train.py's loop and log lines)")
        rounds = [run_round(k + 1, a, nano, tmp, native_bf16) for k in range(a.rounds)]
    print_summary(rounds, fpt, a, "nanoGPT train.py" if nano else "nanoGPT re-implementation")


def cli_main(body: Callable[[list[str]], None], argv: Optional[list[str]] = None) -> int:
    """Run ``body(argv)`` (default: this process's arguments): 0 done, 2 bad input or a failed run (one
    ``depthlab: error:`` line on stderr). Shared by the benchmarks that compare with nanoGPT."""
    try:
        body(sys.argv[1:] if argv is None else argv)
    except DepthlabError as e:
        print(f"depthlab: error: {e}", file=sys.stderr)
        return 2
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point: 0 done, 2 bad input or a failed run (one ``depthlab: error:`` line)."""
    return cli_main(lambda a: reference_train(a[1:]) if a[:1] == ["--reference-train"] else run(parse_args(a)), argv)


if __name__ == "__main__":
    sys.exit(main())
