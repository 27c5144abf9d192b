"""Training-step speed: ms/iter and tokens/s at nanoGPT's CPU shape and at depthlab's default recipe.

Usage: python benchmarks/train_speed.py [--steps 20]
Prints machine info, then one line per (shape, dtype) with tokens/s and model FLOP/s (6N + 12LTC
per token) as a fraction of a 1024^3 matmul's FLOP/s in the same dtype, measured in the same run.
On a CPU without native bf16 (no avx512_bf16/AMX) bf16 is emulated: its rows are compared with the
fp32 matmul, the fastest this CPU has (an emulated bf16 matmul is no peak: ~1 GFLOP/s).
Uses depthlab's own model, optimizer and autocast, i.e. what `depthlab train` runs (without
evaluation and logging), with AdamW (whose cost is not in the model FLOPs); a last line times the
default recipe with Muon (``optimizer: auto`` on CPU), whose Newton-Schulz matmuls are extra work.
"""

import argparse

import torch

from _common import machine_info, median, time_steps
from depthlab.benchmarking import flops_per_token, matmul_flops
from depthlab.config import ModelConfig, TrainConfig
from depthlab.model import GPT
from depthlab.training.optimization import make_optimizer
from depthlab.training.runtime import autocast_ctx, configure_attention, cpu_has_bf16

SHAPES = {
    "nanoGPT CPU (4L 4H 128C T64 B12)": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch=12),
    "default recipe": None,  # filled from the packaged defaults
}


def step_fn(shape: dict, dtype: str, optimizer: str = "adamw"):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=65, **{k: v for k, v in shape.items() if k != "batch"})
    model = GPT(cfg)
    configure_attention(model, "auto", torch.device("cpu"), dtype == "bfloat16")
    opt = make_optimizer(model, TrainConfig(optimizer=optimizer), torch.device("cpu"))
    ctx = autocast_ctx(torch.device("cpu"), dtype)
    x = torch.randint(0, 65, (shape["batch"], cfg.block_size))
    y = torch.randint(0, 65, (shape["batch"], cfg.block_size))

    def step():
        with ctx:
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    d, t = ModelConfig(), TrainConfig()
    SHAPES["default recipe"] = dict(n_layer=d.n_layer, n_head=d.n_head, n_embd=d.n_embd,
                                    block_size=d.block_size, batch=t.batch_size)
    print(machine_info())
    print(f"default recipe: dtype {t.dtype}, max_iters {t.max_iters}")
    peak = {dt: matmul_flops(getattr(torch, dt)) for dt in ("float32", "bfloat16")}
    native_bf16 = cpu_has_bf16()
    print(f"1024^3 matmul: fp32 {peak['float32'] / 1e9:.0f} GFLOP/s, bf16 {peak['bfloat16'] / 1e9:.0f} GFLOP/s")
    shape = SHAPES["default recipe"]
    tok = shape["batch"] * shape["block_size"]
    s_muon = median(time_steps(step_fn(shape, "float32", "muon"), a.steps))
    s_adamw = median(time_steps(step_fn(shape, "float32", "adamw"), a.steps))
    print(f"default recipe, float32: Muon {s_muon * 1000:.1f} ms/iter ({tok / s_muon:,.0f} tokens/s) vs AdamW "
          f"{s_adamw * 1000:.1f} ms/iter: Muon's step costs {s_muon / s_adamw:.2f}x")
    for name, shape in SHAPES.items():
        n = GPT(ModelConfig(vocab_size=65, **{k: v for k, v in shape.items() if k != "batch"})).num_params()
        fpt = flops_per_token(n, shape["n_layer"], shape["block_size"], shape["n_embd"])
        for dtype in ("float32", "bfloat16"):
            s = median(time_steps(step_fn(shape, dtype), a.steps))
            tok = shape["batch"] * shape["block_size"]
            ref = dtype if native_bf16 else "float32"
            print(f"{name:34s} {dtype:9s} {s * 1000:8.1f} ms/iter {tok / s:10,.0f} tokens/s  model "
                  f"{tok / s * fpt / 1e9:6.1f} GFLOP/s = {tok / s * fpt / peak[ref]:6.1%} of the {ref} matmul"
                  + ("" if ref == dtype else " (bf16 emulated here)"))



if __name__ == "__main__":
    main()
