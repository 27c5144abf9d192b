"""Shared fixtures and builders: an isolated token cache, tiny seeded CPU configs, models and CLI flags."""

import json
from pathlib import Path

import pytest
import torch

from depthlab.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from depthlab.model import GPT

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


QUIET = dict(log=lambda s: None)  # train(..., **QUIET) / Trainer(..., **QUIET): no progress lines

#: The tiny model of the unit tests: V 11, 2 blocks of 2 heads, C 16, context 8.
TINY_MODEL = dict(vocab_size=11, n_layer=2, n_head=2, n_embd=16, block_size=8)


def tiny_model_config(**kw) -> ModelConfig:
    """:data:`TINY_MODEL` with ``kw`` overriding its fields."""
    return ModelConfig(**{**TINY_MODEL, **kw})


def tiny_gpt(seed: int = 0, **kw) -> GPT:
    """A GPT of :func:`tiny_model_config` (``kw``), initialised under ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    return GPT(tiny_model_config(**kw))


def tiny_cli_args(path, out, **fields) -> list[str]:
    """``depthlab train`` flags of the run :func:`tiny_config` describes (n_embd 32, block 16).

    ``fields`` override or add flags, dotted names spelt with ``__``: ``train__max_iters=600``.
    """
    flags = {"data.path": path, "model.n_layer": 2, "model.n_head": 2, "model.n_embd": 32,
             "model.block_size": 16, "train.batch_size": 8, "train.max_iters": 20, "train.eval_interval": 5,
             "train.eval_iters": 2, "train.tensorboard": "false", "train.threads": 1, "train.out_dir": out}
    flags.update({k.replace("__", "."): v for k, v in fields.items()})
    return [a for k, v in flags.items() for a in (f"--{k}", str(v))]


def evals(run) -> list[tuple[int, float, float]]:
    """(step, train_loss, val_loss) of every evaluation in ``run/metrics.jsonl``, in file order."""
    lines = (Path(run) / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [(r["step"], r["train_loss"], r["val_loss"]) for r in map(json.loads, lines) if "val_loss" in r]


def tiny_sweep_spec(text_file, grid, base, **over):
    """A one-experiment :class:`depthlab.sweep.SweepSpec` over ``grid`` on ``base`` (dotted fields) and
    ``text_file``; ``over`` adds or overrides fields, dotted names spelt with ``__``."""
    from depthlab import sweep

    fields = {**base, "data.path": str(text_file), **{k.replace("__", "."): v for k, v in over.items()}}
    return sweep.SweepSpec(experiments=[sweep.Experiment(grid=grid)], base=fields)


def read_sweep_rows(sweep_dir) -> list[dict]:
    """The rows of ``sweep_dir/results.csv`` as dicts of strings."""
    import csv

    with open(Path(sweep_dir) / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def run_two_ranks(worker, out, text, case, timeout=90) -> dict:
    """Run ``worker(rank, port, out, text, case, queue)`` as two spawned processes (gloo ranks on
    127.0.0.1) and return ``{rank: tuple(what it put after its rank)}``.

    Fails the test, after killing both, when a rank reports nothing within ``timeout`` seconds:
    the ranks disagreed on stopping and one is waiting in a collective.
    """
    import multiprocessing as mp
    import queue as queue_mod
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, port, str(out), str(text), case, q)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        got = [q.get(timeout=timeout) for _ in procs]
    except queue_mod.Empty:
        for p in procs:
            p.kill()
        pytest.fail(f"{case}: a rank was still waiting after {timeout} s (the ranks disagreed on stopping)")
    for p in procs:
        p.join(30)
    assert not any(p.is_alive() for p in procs)
    return {r: tuple(rest) for r, *rest in got}
