"""depthlab's fastest CPU mode vs a plain eager fp32 reference GPT at nanoGPT's CPU shape.

Usage: python benchmarks/vs_reference.py [--rounds 5 --steps 10]

The reference is the usual ~100-line GPT written here (fused qkv Linear, masked-softmax attention,
GELU MLP, pre-LN, AdamW) in eager fp32. Runs are interleaved (reference, depthlab, reference, ...)
so drifting machine load hits both; the median tokens/s ratio is printed, plus achieved model
FLOP/s (6N + 12*L*T*C per token, Kaplan et al. 2020 / PaLM appendix B) as a fraction of a large
matmul's FLOP/s measured in the same run, for fp32 and bf16.
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from _common import machine_info, median, time_steps
from depthlab.benchmarking import matmul_flops

L, H, C, T, B, V = 4, 4, 128, 64, 12, 65


class RefBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // H)
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class RefGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.Sequential(*[RefBlock() for _ in range(L)])
        self.ln_f, self.head = nn.LayerNorm(C), nn.Linear(C, V, bias=False)
        self.wte.weight = self.head.weight

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        logits = self.head(self.ln_f(self.blocks(x)))
        return F.cross_entropy(logits.view(-1, V), targets.view(-1))


def ref_step():
    torch.manual_seed(0)
    m = RefGPT()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x, y = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))

    def step():
        loss = m(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, sum(p.numel() for p in m.parameters())


def depthlab_step(dtype):
    from depthlab.config import ModelConfig, TrainConfig
    from depthlab.model import GPT
    from depthlab.training.optimization import make_optimizer
    from depthlab.training.runtime import autocast_ctx, configure_attention

    torch.manual_seed(0)
    # the reference's model: GPT-2's learned table of positions (depthlab's default is rotary)
    m = GPT(ModelConfig(vocab_size=V, block_size=T, n_layer=L, n_head=H, n_embd=C, bias=True, position="learned"))
    configure_attention(m, "auto", torch.device("cpu"), dtype == "bfloat16")  # what `depthlab train` does on CPU
    opt = make_optimizer(m, TrainConfig(optimizer="adamw"), torch.device("cpu"))  # the reference's algorithm
    ctx = autocast_ctx(torch.device("cpu"), dtype)
    x, y = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))

    def step():
        with ctx:
            _, loss = m(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    print(machine_info())
    ref, n_params = ref_step()
    fast = {"float32": depthlab_step("float32"), "bfloat16": depthlab_step("bfloat16")}
    times = {"reference fp32": [], "depthlab fp32": [], "depthlab bf16": []}
    for _ in range(a.rounds):  # interleaved
        times["reference fp32"] += time_steps(ref, a.steps, warmup=1)
        times["depthlab fp32"] += time_steps(fast["float32"], a.steps, warmup=1)
        times["depthlab bf16"] += time_steps(fast["bfloat16"], a.steps, warmup=1)
    flops_tok = 6 * n_params + 12 * L * T * C
    peak = {"fp32": matmul_flops(torch.float32), "bf16": matmul_flops(torch.bfloat16)}
    print(f"shape: {L} layers, {H} heads, n_embd {C}, block {T}, batch {B}; {n_params / 1e6:.2f} M params; "
          f"{flops_tok / 1e6:.2f} MFLOP/token (6N + 12LTC)")
    print(f"large matmul (1024^3): fp32 {peak['fp32'] / 1e9:.0f} GFLOP/s, bf16 {peak['bf16'] / 1e9:.0f} GFLOP/s")
    ref_tps = B * T / median(times["reference fp32"])
    for name, ts in times.items():
        tps = B * T / median(ts)
        p = peak["bf16"] if "bf16" in name else peak["fp32"]
        print(f"{name:15s} {median(ts) * 1000:7.1f} ms/iter {tps:9,.0f} tokens/s  ratio {tps / ref_tps:5.2f}x  "
              f"model {tps * flops_tok / 1e9:5.1f} GFLOP/s = {tps * flops_tok / p:5.1%} of matmul peak")


if __name__ == "__main__":
    main()
