"""Wall time to val <= 1.88 nats: `depthlab train --preset fast-cpu` vs nanoGPT's CPU recipe, same run.

Usage: python benchmarks/time_to_loss.py [--target 1.88] [--preset fast-cpu] [--ref-iters 2000]
                                         [--skip-reference] [--threads 0]

The reference is a faithful re-implementation of nanoGPT's ``train_shakespeare_char`` recipe with
the README's CPU overrides (``--device=cpu --compile=False --eval_iters=20 --log_interval=1
--block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000
--lr_decay_iters=2000 --dropout=0.0``), written here, not nanoGPT's own code: same model (GPT-2
blocks without biases, SDPA causal attention, tied embeddings, N(0, 0.02) init with c_proj scaled by
1/sqrt(2 n_layer)), same data (first 90 % of the characters for training, random windows drawn
with ``torch.randint``), AdamW (betas 0.9/0.99, weight decay 0.1 on matrices, foreach as nanoGPT
uses on CPU), lr 1e-3 with 100 warmup steps and cosine to 1e-4 at 2000, grad clip 1, evaluation of
20 batches per split every 250 steps with a checkpoint when val improves, one ``loss.item()`` per
step (log_interval 1). Its wall time is the whole recipe (2000 steps), as a user would run it; the
val loss it ends on is printed next to it. depthlab runs as a user runs it (the ``depthlab``
command in a subprocess, start-up, corpus and baselines included) and stops at the first
evaluation with val <= target. Both use the same intra-op threads (torch's default unless
``--threads``). The ratio printed is depthlab's wall time / the reference's.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from _common import machine_info

L, H, C, T, B = 4, 4, 128, 64, 12
LR, MIN_LR, WARMUP, ITERS, EVAL_INTERVAL, EVAL_ITERS = 1e-3, 1e-4, 100, 2000, 250, 20


class Block(nn.Module):
    """nanoGPT's Block (bias=False, dropout 0): x + attn(ln_1(x)); x + mlp(ln_2(x))."""

    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C, bias=False), nn.LayerNorm(C, bias=False)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C, bias=False), nn.Linear(C, C, bias=False)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C, bias=False), nn.Linear(4 * C, C, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class NanoGPT(nn.Module):
    """nanoGPT's GPT at the baby shape; ``forward(idx (B, T), targets (B, T)) -> loss`` in nats."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab_size, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(C, bias=False)
        self.lm_head = nn.Linear(C, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, 0.0, 0.02)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L))

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def lr_at(it: int) -> float:
    """nanoGPT's get_lr: linear warmup, cosine to MIN_LR at ITERS."""
    if it < WARMUP:
        return LR * (it + 1) / (WARMUP + 1)
    ratio = (it - WARMUP) / (ITERS - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * min(ratio, 1.0))) * (LR - MIN_LR)


def reference_run(text: str, iters: int, workdir: Path) -> tuple[float, float]:
    """Run the reference recipe; returns (wall seconds, last val loss in nats)."""
    t0 = time.perf_counter()
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    splits = {"train": data[:n], "val": data[n:]}

    def get_batch(split):
        d = splits[split]
        ix = torch.randint(len(d) - T, (B,))
        return torch.stack([d[i:i + T] for i in ix]), torch.stack([d[i + 1:i + 1 + T] for i in ix])

    torch.manual_seed(1337)
    model = NanoGPT(len(chars))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.99))
    best, val = 1e9, float("nan")
    for it in range(iters + 1):
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        if it % EVAL_INTERVAL == 0:
            model.eval()
            with torch.no_grad():
                losses = {s: sum(model(*get_batch(s)).item() for _ in range(EVAL_ITERS)) / EVAL_ITERS
                          for s in ("train", "val")}
            model.train()
            val = losses["val"]
            print(f"  reference step {it}: train {losses['train']:.4f} val {val:.4f}", flush=True)
            if val < best and it > 0:
                best = val
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, workdir / "ckpt.pt")
        if it == iters:
            break
        loss = model(*get_batch("train"))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()  # log_interval 1
    return time.perf_counter() - t0, val


def depthlab_run(preset: str, target: float, workdir: Path, threads: int) -> dict:
    """``depthlab train --preset PRESET`` to val <= target in a subprocess; wall seconds and its summary."""
    out = workdir / "run"
    cmd = [sys.executable, "-m", "depthlab", "train", "--preset", preset, "--train.target_val_loss", str(target),
           "--train.out_dir", str(out), "--train.progress", "false"]
    if threads:
        cmd += ["--train.threads", str(threads)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"depthlab train failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    s = json.loads((out / "summary.json").read_text())
    return {"wall": wall, "summary": s, "resolved": json.loads((out / "config.json").read_text())["resolved"]}


def main() -> None:
    """Run both, print the figures and the ratio."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", type=float, default=1.88)
    ap.add_argument("--preset", default="fast-cpu")
    ap.add_argument("--ref-iters", type=int, default=ITERS, help="reference steps (2000 = the recipe)")
    ap.add_argument("--skip-reference", action="store_true", help="only time depthlab")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads for both (0 = torch's default)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    print(machine_info())
    from depthlab.data import embedded_corpus_path

    text = embedded_corpus_path().read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        d = depthlab_run(a.preset, a.target, Path(tmp), a.threads)
        s = d["summary"]
        print(f"depthlab --preset {a.preset} ({d['resolved']['dtype']}, {d['resolved']['attention']} attention): "
              f"val {s['best_val_loss']:.4f} at step {s['best_val_step']}; target {a.target} reached at step "
              f"{s['target_reached_step']} after {s['target_reached_s']} s of training; "
              f"{d['wall']:.1f} s wall (process start to exit)")
        if a.skip_reference:
            return
        ref_wall, ref_val = reference_run(text, a.ref_iters, Path(tmp))
    print(f"nanoGPT CPU recipe (re-implementation, fp32, {a.ref_iters} steps): final val {ref_val:.4f} in "
          f"{ref_wall:.1f} s wall")
    reached = s["target_reached_step"] is not None
    print(f"ratio depthlab / reference wall time: {d['wall'] / ref_wall:.2f} (goal <= 0.33)"
          + ("" if reached else f"  [depthlab did NOT reach {a.target}]"))


if __name__ == "__main__":
    main()
