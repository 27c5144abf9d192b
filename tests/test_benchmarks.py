"""The scripts in benchmarks/: they import, parse their arguments, and gpu_check.sh's CPU fallback runs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest



ROOT = Path(__file__).resolve().parents[1]


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
