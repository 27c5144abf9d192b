"""The C allocator's handling of freed memory while a CPU run trains: kept for reuse, not handed back.

A training step allocates and frees the same tensors every step. glibc's malloc serves a block of
128 KiB or more with a fresh ``mmap`` and unmaps it when freed, and trims the top of its heaps back to
the system, raising both thresholds only after it has freed a large block: whether every step touches
new pages (one page fault per 4 KiB) depends on the process's history. Measured at nanoGPT's CPU shape
(4 layers x 128, batch 12 x 64, bf16 autocast, Muon) on a 2-core Zen 5 virtual machine, in a process
that builds the model and trains: ~2,700-3,000 page faults per step, 5-15 with the settings below, the
same peak memory, the step 0.65-0.74x as long (``benchmarks/host_memory.py``; README "A busy laptop").
This is what the jemalloc/tcmalloc advice of CPU performance guides fixes; ``mallopt`` does it in the
process, with nothing to install: no trimming, and ``mmap`` only above 32 MiB (glibc's largest allowed
threshold on 64-bit, ``DEFAULT_MMAP_THRESHOLD_MAX``; see ``man 3 mallopt``).

Nothing here imports torch. Where the C library is not glibc (macOS, musl) nothing is changed.
"""

from __future__ import annotations

import ctypes
from typing import Optional

__all__ = ["available", "keep_freed_memory", "release_freed_memory", "kept"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_MMAP_THRESHOLD = 32 * 2**20  # glibc's maximum on 64-bit
_TRIM_THRESHOLD = 2**31 - 1  # an int: larger than any heap top a run leaves free
_DEFAULT_THRESHOLD = 128 * 2**10  # both thresholds' glibc default
_kept = False


def _libc() -> Optional[ctypes.CDLL]:
    try:
        libc = ctypes.CDLL(None)  # the process's own C library
    except OSError:
        return None
    # gnu_get_libc_version: glibc only (musl's mallopt is a stub that accepts and ignores everything)
    if all(hasattr(libc, f) for f in ("mallopt", "malloc_trim", "gnu_get_libc_version")):
        return libc
    return None


def available() -> bool:
    """Whether :func:`keep_freed_memory` can work here (the C library is glibc)."""
    return _libc() is not None


def kept() -> bool:
    """Whether :func:`keep_freed_memory` is in force in this process."""
    return _kept


def keep_freed_memory() -> bool:
    """Keep freed memory in the process for the next allocation (glibc: no trim, mmap above 32 MiB only).

    Returns:
        True when the settings are in force (now or already); False where the C library is not glibc
        or refused them (nothing changed then).
    """
    global _kept
    if _kept:
        return True
    libc = _libc()
    if libc is None:
        return False
    if libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) != 1:
        return False
    if libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD) != 1:
        libc.mallopt(_M_MMAP_THRESHOLD, _DEFAULT_THRESHOLD)
        return False
    _kept = True
    return True


def release_freed_memory() -> None:
    """Undo :func:`keep_freed_memory`: both thresholds back to glibc's default value, 128 KiB (glibc's
    raising of the mmap threshold as blocks are freed stays off: mallopt cannot turn it back on), and
    the freed memory handed back to the system (``malloc_trim``): a notebook that trained goes on at
    its usual size."""
    global _kept
    if not _kept:
        return
    libc = _libc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, _DEFAULT_THRESHOLD)
        libc.mallopt(_M_TRIM_THRESHOLD, _DEFAULT_THRESHOLD)
        libc.malloc_trim(0)
    _kept = False
