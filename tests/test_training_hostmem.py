"""training.hostmem: freed memory kept by glibc's malloc while training (no page faults for the step's
re-allocated tensors), undone afterwards; nothing changed where the C library is not glibc."""

import json
import resource

import pytest
import torch

from depthlab.trainer import Trainer
from depthlab.training import hostmem

from conftest import QUIET, OnStep, tiny_config

glibc = pytest.mark.skipif(not hostmem.available(), reason="the C library is not glibc")


def _faults_per_alloc(n: int = 20, nbytes: int = 2**20) -> float:
    """Minor page faults per allocate-touch-free of an ``nbytes`` tensor (what a training step does)."""
    r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):
        torch.ones(nbytes // 4)  # written: every page touched
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0) / n


@glibc
def test_kept_memory_is_reused_without_page_faults():
    assert not hostmem.kept()
    try:
        assert hostmem.keep_freed_memory() and hostmem.kept()
        assert hostmem.keep_freed_memory()  # a second call: already in force
        _faults_per_alloc(60)  # the heap grows to hold the block once (a few hundred faults)
        kept = min(_faults_per_alloc() for _ in range(3))  # the heap may still grow once
    finally:
        hostmem.release_freed_memory()
    assert not hostmem.kept()
    assert kept < 5, kept  # 256 when each 1 MiB block is mapped anew


def test_release_restores_glibcs_values_and_trims(monkeypatch):
    calls = []

    class FakeLibc:
        def mallopt(self, param, value):
            calls.append(("mallopt", param, value))
            return 1

        def malloc_trim(self, pad):
            calls.append(("malloc_trim", pad))
            return 1

    monkeypatch.setattr(hostmem, "_libc", lambda: FakeLibc())
    assert hostmem.keep_freed_memory()
    assert calls == [("mallopt", -3, 32 * 2**20), ("mallopt", -1, 2**31 - 1)]  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
    calls.clear()
    hostmem.release_freed_memory()
    assert calls == [("mallopt", -3, 128 * 1024), ("mallopt", -1, 128 * 1024), ("malloc_trim", 0)]
    assert not hostmem.kept()
    calls.clear()
    hostmem.release_freed_memory()  # nothing kept: nothing done
    assert calls == []


def test_nothing_is_changed_without_glibc(monkeypatch):
    monkeypatch.setattr(hostmem, "_libc", lambda: None)
    assert not hostmem.available()
    assert hostmem.keep_freed_memory() is False and not hostmem.kept()
    hostmem.release_freed_memory()  # a no-op


@glibc
def test_memory_is_kept_only_while_training_and_config_json_says_so(tmp_path, tiny_text_file):
    probe = OnStep(hostmem.kept)
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=2)), callbacks=[probe], **QUIET)
    assert not hostmem.kept()
    t.fit()
    assert probe.seen == [True, True] and not hostmem.kept()
    assert json.loads((tmp_path / "r" / "config.json").read_text())["resolved"]["host_memory"] == "kept"
