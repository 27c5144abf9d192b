"""DDP on CPU (gloo over loopback): 2 processes x batch B must match 1 process x batch 2B."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from depthlab.errors import DepthlabError

from conftest import QUIET, tiny_cli_args, tiny_config


def _args(path, out, batch, accum):
    return ["train", *tiny_cli_args(path, out, train__batch_size=batch, train__grad_accum=accum,
                                    train__eval_interval=10, train__log_interval=1, train__grad_log_interval=0,
                                    train__probe_interval=0, train__device="cpu")]


def _losses(run):
    return [(r["step"], r.get("loss"), r.get("val_loss")) for r in map(json.loads, open(run / "metrics.jsonl"))
            if "loss" in r or "val_loss" in r]


@pytest.mark.slow
def test_two_processes_match_one_process_with_double_batch(tmp_path, tiny_text_file):
    torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    one = subprocess.run([sys.executable, "-m", "depthlab", *_args(tiny_text_file, tmp_path / "one", 8, 1)],
                         capture_output=True, text=True, env=env)
    assert one.returncode == 0, one.stderr[-2000:]
    two = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", "-m", "depthlab",
                          *_args(tiny_text_file, tmp_path / "two", 4, 2)], capture_output=True, text=True, env=env)
    assert two.returncode == 0, two.stderr[-3000:]
    assert "processes 2" in two.stdout
    a, b = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert [x[0] for x in a] == [x[0] for x in b] and len(a) > 20
    for (s, la, va), (_, lb, vb) in zip(a, b):
        if la is not None:
            assert abs(la - lb) < 1e-4, (s, la, lb)
        if va is not None:
            assert abs(va - vb) < 1e-4, (s, va, vb)
    from depthlab.checkpoint import load_weights_file

    sd, _ = load_weights_file(tmp_path / "two" / "checkpoints" / "best.safetensors")
    assert not any(k.startswith("module.") for k in sd)


def test_grad_accum_must_divide_world_size(monkeypatch, tmp_path, tiny_text_file):
    from depthlab.trainer import Trainer

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(DepthlabError, match=r"train.grad_accum \(3\).*processes \(2\)"):
        Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(grad_accum=3)), **QUIET)
