"""Subnormal floats on the CPU: whether they are computed as zero now, and a scope that flushes them.

A bare deep stack (or a collapsing one) drives its activations below float32's smallest normal number (1.18e-38),
where x86 arithmetic is ~100x slower; training, the probe, coordcheck and check flush them to zero while they run
and then give the caller back the handling it had. torch has no getter for it: ``torch.set_flush_denormal``
returns whether the CPU supports flushing, not the state before the call, so the state is measured.
"""

import contextlib
from typing import Iterator

import torch

__all__ = ["flushing", "subnormals_flushed"]

#: Between float32's smallest subnormal (1.4e-45) and its smallest normal (1.18e-38).
_SUBNORMAL = 1e-39


def flushing() -> bool:
    """Whether this thread computes float32 subnormals as zero now (a subnormal times 1 reads 0)."""
    return float(torch.tensor([_SUBNORMAL], dtype=torch.float32).mul(1.0)) == 0.0


@contextlib.contextmanager
def subnormals_flushed(on: bool = True) -> Iterator[None]:
    """Compute subnormals as zero inside (``on``; where the CPU can), then the handling the caller had again.

    Args:
        on: False leaves the handling as it is (a run with ``train.flush_denormal false``).
    """
    was = flushing()
    if on and not was:
        torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if on and not was:
            torch.set_flush_denormal(False)
