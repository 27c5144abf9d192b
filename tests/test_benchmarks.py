import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from depthlab.benchmarking import flops_per_token

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("n_layer,n_embd,block_size,bias", [(2, 16, 8, False), (3, 24, 12, True)])
def test_flops_per_token_formula(n_layer, n_embd, block_size, bias):
    """6N + 12·L·T·C against FLOPs counted by torch on one forward + backward of the real model.

    N = the parameters that take part in matrix multiplies (every 2-D weight except the position
    table, which is a lookup; the tied token table counts once, as the output head), taken from the
    model's named parameters. The attention term: per layer and token, q·kᵀ and att·v each cost
    2·T·C multiply-adds forward and twice that backward, so 3 × 4·T·C = 12·T·C (PaLM, Chowdhery et al.
    2022, appendix B, with H·Q = C; Kaplan et al. 2020 count 2·L·T·C forward). Counted on the
    explicit attention path (full T×T scores, as the formula assumes; torch's CPU flash kernel has no
    FLOP formula). Biases and norms are not matmuls: FlopCounterMode counts only the mm part.
    """
    from torch.utils.flop_counter import FlopCounterMode

    from conftest import tiny_gpt

    model = tiny_gpt(n_layer=n_layer, n_head=2, n_embd=n_embd, block_size=block_size, bias=bias)
    for blk in model.transformer.h:
        blk.attn.explicit = True
    n_matmul = sum(p.numel() for name, p in model.named_parameters()
                   if p.dim() == 2 and name != "transformer.wpe.weight")
    assert n_matmul == model.transformer.wte.weight.numel() + n_layer * 12 * n_embd ** 2  # 4C² attn + 8C² MLP
    batch = 3
    idx = torch.randint(0, model.config.vocab_size, (batch, block_size))
    with FlopCounterMode(display=False) as counter:
        _, loss = model(idx, idx)
        loss.backward()
    measured = counter.get_total_flops() / (batch * block_size)
    assert flops_per_token(n_matmul, n_layer, block_size, n_embd) == pytest.approx(measured, rel=1e-12)


@pytest.mark.slow
def test_gpu_check_cpu_fallback(tmp_path):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "60", str(tmp_path / "run")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "tiny CPU fallback" in r.stdout and "tokens/s" in r.stdout and "MFU" in r.stdout
    assert (tmp_path / "run" / "summary.json").exists()


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name != "_common.py"))
def test_benchmark_scripts_import_and_parse_args(script):
    """Every benchmark imports what exists (analytics_overhead.py once imported a module removed by a
    refactor and nobody noticed) and its --help works; running them is for an idle machine, not CI."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "benchmarks")}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--help"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in r.stdout.lower()
