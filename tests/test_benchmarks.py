import os
import subprocess
import sys
from pathlib import Path

import pytest

from depthlab.benchmarking import flops_per_token

ROOT = Path(__file__).resolve().parents[1]


def test_flops_per_token_formula():
    assert flops_per_token(1_000_000, 4, 64, 128) == 6e6 + 12 * 4 * 64 * 128


@pytest.mark.slow
def test_gpu_check_cpu_fallback(tmp_path):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "60", str(tmp_path / "run")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "tiny CPU fallback" in r.stdout and "tokens/s" in r.stdout and "MFU" in r.stdout
    assert (tmp_path / "run" / "summary.json").exists()
