"""FLOP accounting for throughput reports (model FLOP utilisation, MFU)."""

from __future__ import annotations

import time

import torch

# Dense bf16 tensor-core peaks (vendor datasheets), FLOP/s.
_GPU_PEAKS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12,
              "L4": 121e12, "4090": 165e12, "3090": 71e12}


def flops_per_token(n_params: int, n_layer: int, block_size: int, n_embd: int) -> float:
    """Training FLOPs per token: 6N + 12·L·T·C (Kaplan et al. 2020; PaLM, Chowdhery et al. 2022, app. B).

    Args:
        n_params: N, the parameters used in matrix multiplies (2-D weights; the tied token table
            counts once, as the output head; the position table is a lookup). ``GPT.num_params()``
            also counts norm gains and biases, which overstates N by < 1% at useful sizes.
        n_layer, block_size, n_embd: L, T (the full context: the formula counts the whole T x T
            score matrix, not the causal half) and C.

    Returns:
        FLOPs per trained token, forward + backward (tests/test_benchmarks.py checks it against
        ``torch.utils.flop_counter.FlopCounterMode``).
    """
    return 6.0 * n_params + 12.0 * n_layer * block_size * n_embd


def matmul_flops(dtype: torch.dtype, n: int = 1024, reps: int = 10) -> float:
    """FLOP/s (2 n^3 per product) of an n x n x n matmul in ``dtype`` on the CPU: the best of three
    timings of ``reps`` products, after one untimed product (the "peak" that MFU figures divide by)."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 * reps / best


def peak_flops() -> tuple[float, str]:
    """(peak FLOP/s, description): the datasheet bf16 peak of the CUDA device, else a measured CPU matmul.

    On CPU the "peak" is a 1024^3 matmul timed now (FLOP/s) — bf16 where the CPU has native bf16,
    fp32 otherwise — so MFU is relative to what this machine's BLAS achieves, not to a datasheet.
    """
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        for key, v in _GPU_PEAKS.items():
            if key in name:
                return v, f"{name} (datasheet bf16 dense peak {v / 1e12:.0f} TFLOP/s)"
        return 989e12, f"{name} (unknown: assuming 989 TFLOP/s)"
    from .training.runtime import cpu_has_bf16

    dtype = "bf16" if cpu_has_bf16() else "fp32"  # emulated bf16 (no avx512_bf16/AMX) is no peak at all
    v = matmul_flops(torch.bfloat16 if dtype == "bf16" else torch.float32, reps=5)
    return v, f"cpu (measured {dtype} matmul {v / 1e9:.0f} GFLOP/s)"
