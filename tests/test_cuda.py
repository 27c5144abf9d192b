"""The CUDA path: skipped without a GPU (CI has none); run on a GPU machine with ``pytest tests/test_cuda.py``."""

import json

import pytest
import torch
from conftest import QUIET, evals, tiny_config

from depthlab.trainer import Trainer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _run(tmp_path, text, name, **train):
    cfg = dict(device="cuda", max_iters=40, eval_interval=20, eval_iters=4, learning_rate=1e-2)
    cfg.update(train)
    run = Trainer(tiny_config(tmp_path / name, text, train=cfg), **QUIET).fit()
    return run, json.loads((run / "config.json").read_text())


def test_cuda_eager_fp32_evaluates_as_the_cpu_does(tmp_path, tiny_text_file):
    """Same seed, fp32, eager, no dropout: the first evaluation (device-side losses) agrees with the CPU's."""
    gpu, cfg = _run(tmp_path, tiny_text_file, "gpu", compile=False, dtype="float32")
    cpu, _ = _run(tmp_path, tiny_text_file, "cpu", device="cpu", dtype="float32")
    assert cfg["resolved"]["device"].startswith("cuda") and cfg["resolved"]["compile"] is False
    (s1, tr1, v1), (s2, tr2, v2) = evals(gpu)[0], evals(cpu)[0]
    assert s1 == s2 == 0  # the same initial weights, evaluated on each device
    assert v1 == pytest.approx(v2, abs=2e-3) and tr1 == pytest.approx(tr2, abs=2e-3)


@pytest.mark.parametrize("mode", ["default", "auto"])
def test_cuda_compiled_bf16_trains(tmp_path, tiny_text_file, mode):
    """torch.compile (CUDA graphs with reduce-overhead) under bf16 autocast: the loss falls, config.json says so."""
    run, cfg = _run(tmp_path, tiny_text_file, mode, compile=True, compile_mode=mode, dtype="auto")
    assert cfg["resolved"]["compile"] is True
    assert cfg["resolved"]["compile_mode"] == {"auto": "reduce-overhead"}.get(mode, mode)
    assert cfg["resolved"]["dtype"] == "bfloat16"
    first, last = evals(run)[0][2], evals(run)[-1][2]
    assert last < first and last < 2.5, evals(run)


def test_cuda_graphs_with_the_analytics_observers_on(tmp_path, tiny_text_file):
    """compile_mode auto (CUDA graphs) with gradient records and activation probes (``depthlab.train`` attaches
    the observers; a bare Trainer has none): both recorded, the loss falls."""
    from depthlab import train

    cfg = dict(device="cuda", max_iters=40, eval_interval=20, eval_iters=4, learning_rate=1e-2, compile=True,
               dtype="auto", grad_log_interval=10, probe_interval=20)
    run = train(tiny_config(tmp_path / "observed", tiny_text_file, train=cfg), **QUIET)
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["resolved"]["compile_mode"] == "reduce-overhead"
    kinds = {json.loads(line).get("kind") for line in (run / "metrics.jsonl").read_text().splitlines()}
    assert {"grad", "probe"} <= kinds, kinds
    assert evals(run)[-1][2] < evals(run)[0][2]
