"""training.hostmem: freed memory kept by glibc's malloc while training (no page faults for the step's
re-allocated tensors), undone afterwards; nothing changed where the C library is not glibc."""

import json
import resource

import pytest
import torch

from depthlab.trainer import Trainer
from depthlab.training import hostmem

from conftest import QUIET, tiny_config

glibc = pytest.mark.skipif(not hostmem.available(), reason="the C library is not glibc")


def _faults_per_alloc(n: int = 20, nbytes: int = 2**20) -> float:
    """Minor page faults per allocate-touch-free of an ``nbytes`` tensor (what a training step does)."""
    r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):
        torch.ones(nbytes // 4)  # written: every page touched
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0) / n


@glibc
def test_kept_memory_is_reused_without_page_faults_and_release_restores_the_mapping():
    assert not hostmem.kept()
    try:
        assert hostmem.keep_freed_memory() and hostmem.kept()
        assert hostmem.keep_freed_memory()  # a second call: already in force
        _faults_per_alloc(60)  # the heap grows to hold the block once (a few hundred faults)
        kept = min(_faults_per_alloc() for _ in range(3))  # the heap may still grow once
    finally:
        hostmem.release_freed_memory()
    assert not hostmem.kept()
    system = _faults_per_alloc()  # 128 KiB threshold: each 1 MiB block is mapped anew, 256 pages
    assert kept < 5 and system > 100, (kept, system)


def test_nothing_is_changed_without_glibc(monkeypatch):
    monkeypatch.setattr(hostmem, "_libc", lambda: None)
    assert not hostmem.available()
    assert hostmem.keep_freed_memory() is False and not hostmem.kept()
    hostmem.release_freed_memory()  # a no-op


@glibc
def test_memory_is_kept_only_while_training_and_config_json_says_so(tmp_path, tiny_text_file):
    seen = []

    class Probe:
        def __getattr__(self, name):
            return lambda *a, **k: None

        def on_step_end(self, run, info):
            seen.append(hostmem.kept())

    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=2)), callbacks=[Probe()], **QUIET)
    assert not hostmem.kept()
    t.fit()
    assert seen == [True, True] and not hostmem.kept()
    assert json.loads((tmp_path / "r" / "config.json").read_text())["resolved"]["host_memory"] == "kept"
