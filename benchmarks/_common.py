"""Shared helpers for the benchmark scripts (machine info, timing one training step)."""

from __future__ import annotations

import platform
import statistics
import time

import torch


def machine_info() -> str:
    """One line: CPU model, cores, torch version, intra-op threads and whether the CPU has native bf16."""
    cpu = platform.processor() or "unknown cpu"
    fields: dict[str, str] = {}
    try:
        for line in open("/proc/cpuinfo"):
            k, _, v = line.partition(":")
            fields.setdefault(k.strip(), v.strip())
            if not line.strip():
                break  # the first core's block is enough
    except OSError:
        pass
    cpu = fields.get("model name", cpu)
    if "cpu family" in fields:  # a virtual machine's "AMD EPYC" names no generation: family/model do
        cpu += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    flags = set(fields.get("flags", "").split())
    if flags:
        cpu += f", avx512f {'yes' if 'avx512f' in flags else 'no'}, amx {'yes' if 'amx_bf16' in flags else 'no'}"
    import os

    from depthlab.training.runtime import cpu_has_bf16

    bf16 = "yes" if cpu_has_bf16() else "no (bf16 rows are emulated, far slower than fp32)"
    return (f"cpu: {cpu} | cores: {os.cpu_count()} | torch {torch.__version__} | "
            f"threads {torch.get_num_threads()} | native bf16 (avx512_bf16/amx): {bf16}")


def time_steps(step, n: int, warmup: int = 3) -> list[float]:
    """Seconds per call of ``step()`` for ``n`` calls after ``warmup`` untimed calls."""
    for _ in range(warmup):
        step()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        step()
        out.append(time.perf_counter() - t)
    return out


def median(xs) -> float:
    """Median of a list of numbers."""
    return statistics.median(xs)
