"""Shared fixtures: an isolated token cache and tiny seeded CPU configs."""

import os

import pytest
import torch

from depthlab.config import DataConfig, ModelConfig, RunConfig, TrainConfig

torch.set_num_threads(1)  # tests are small; more threads only add noise on a 2-core machine

TINY_TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
             "First Citizen:\nYou are all resolved rather to die than to famish?\n\n") * 40


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture
def tiny_text_file(tmp_path):
    p = tmp_path / "tiny.txt"
    p.write_text(TINY_TEXT, encoding="utf-8")
    return p


def tiny_config(out_dir, path=None, model=None, train=None) -> RunConfig:
    """n_layer 2, n_embd 32, block 16: each run takes well under a second per 20 steps."""
    m = dict(n_layer=2, n_head=2, n_embd=32, block_size=16)
    m.update(model or {})
    t = dict(out_dir=str(out_dir), batch_size=4, max_iters=20, eval_interval=10, eval_iters=2,
             log_interval=5, warmup_iters=2, learning_rate=3e-3, progress=False, tensorboard=False,
             grad_log_interval=0, probe_interval=0, dtype="float32", max_time=0.0)
    t.update(train or {})
    return RunConfig(DataConfig(path=str(path) if path else None), ModelConfig(**m), TrainConfig(**t))
