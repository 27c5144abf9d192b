import json

import pytest
import torch

from depthlab.checkpoint import CKPT_DIR, payload_sha256
from depthlab.errors import DepthlabError
from depthlab.model import GPT
from depthlab import train
from depthlab.trainer import get_lr, param_groups

from conftest import QUIET, evals, tiny_config, tiny_model_config


def test_lr_schedule_boundaries():
    lr, mn, w, d = 1e-3, 1e-4, 100, 2000
    assert get_lr(0, lr, mn, w, d) == pytest.approx(lr / 101) and get_lr(0, lr, mn, w, d) > 0
    assert get_lr(99, lr, mn, w, d) == pytest.approx(lr * 100 / 101)
    assert get_lr(100, lr, mn, w, d) == pytest.approx(lr)
    assert get_lr(1500, lr, mn, w, d) == pytest.approx(2.452e-4, abs=5e-8)  # a user's bug report
    assert get_lr(2000, lr, mn, w, d) == pytest.approx(mn)
    assert get_lr(5000, lr, mn, w, d) == mn
    assert get_lr(1050, lr, mn, w, d) == pytest.approx((lr + mn) / 2)  # cosine midpoint
    assert get_lr(0, lr, mn, 0, d) == pytest.approx(lr)


def test_param_groups_each_param_once():
    m = GPT(tiny_model_config(bias=True))
    groups = param_groups(m, 0.1)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(m.parameters()))
    assert all(p.dim() >= 2 for p in groups[0]["params"]) and all(p.dim() < 2 for p in groups[1]["params"])
    assert groups[0]["weight_decay"] == 0.1 and groups[1]["weight_decay"] == 0.0
    assert sum(p.numel() for g in groups for p in g["params"]) == m.num_params(non_embedding=False)


def _weights_hash(run, name="best.safetensors"):
    return payload_sha256(run / CKPT_DIR / name)


def test_run_directory_and_loss_falls(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=40)), **QUIET)
    for f in ("config.json", "vocab.json", "metrics.jsonl", "summary.json", "checkpoints/manifest.json",
              "checkpoints/best.safetensors"):
        assert (run / f).exists(), f
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["model"]["vocab_size"] == len(json.loads((run / "vocab.json").read_text()))
    s = json.loads((run / "summary.json").read_text())
    assert s["final_step"] == 40 and s["tokens_seen"] == 40 * 4 * 16
    ev = evals(run)
    assert [e[0] for e in ev] == [0, 10, 20, 30, 40]
    assert ev[-1][2] < ev[0][2] - 0.5
    assert s["best_val_loss"] == min(e[2] for e in ev)
    train_lines = [r for r in map(json.loads, open(run / "metrics.jsonl")) if "loss" in r]
    assert [r["step"] for r in train_lines] == list(range(5, 41, 5))
    assert all({"lr", "tokens_per_sec"} <= r.keys() for r in train_lines)


def test_deterministic_runs_identical(tmp_path, tiny_text_file):
    a = train(tiny_config(tmp_path / "a", tiny_text_file, model=dict(dropout=0.1)), **QUIET)
    b = train(tiny_config(tmp_path / "b", tiny_text_file, model=dict(dropout=0.1)), **QUIET)
    la = [r.get("loss") for r in map(json.loads, open(a / "metrics.jsonl"))]
    lb = [r.get("loss") for r in map(json.loads, open(b / "metrics.jsonl"))]
    assert la == lb and evals(a) == evals(b)
    assert _weights_hash(a) == _weights_hash(b)
    c = train(tiny_config(tmp_path / "c", tiny_text_file, model=dict(dropout=0.1), train=dict(seed=2)),
              **QUIET)
    assert evals(c) != evals(a)


@pytest.mark.parametrize("accum", [1, 3])
def test_resume_continues_identical_trajectory(tmp_path, tiny_text_file, accum):
    kw = dict(model=dict(dropout=0.1), train=dict(max_iters=40, lr_decay_iters=40, grad_accum=accum))
    full = train(tiny_config(tmp_path / "full", tiny_text_file, **kw), **QUIET)
    half = tiny_config(tmp_path / "half", tiny_text_file, **kw)
    half.train.max_iters = 20
    train(half, **QUIET)
    again = tiny_config(tmp_path / "half", tiny_text_file, **kw)
    again.train.resume = True
    train(again, **QUIET)
    assert evals(full) == evals(tmp_path / "half")
    last = "step-000040.safetensors"
    assert _weights_hash(full, last) == _weights_hash(tmp_path / "half", last)
    steps = [json.loads(l)["step"] for l in open(tmp_path / "half" / "metrics.jsonl")]
    assert len(steps) == len([json.loads(l)["step"] for l in open(full / "metrics.jsonl")])


def test_existing_out_dir_refused_then_overwritten(tmp_path, tiny_text_file):
    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=5))
    train(cfg, **QUIET)
    before = (tmp_path / "r" / "summary.json").read_bytes()
    with pytest.raises(DepthlabError, match="already exists"):
        train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=5)), **QUIET)
    assert (tmp_path / "r" / "summary.json").read_bytes() == before
    train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=10)), overwrite=True, **QUIET)
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["final_step"] == 10
    other = tmp_path / "notarun"
    other.mkdir()
    (other / "precious.txt").write_text("keep me")
    with pytest.raises(DepthlabError, match="not a depthlab run"):
        train(tiny_config(other, tiny_text_file), overwrite=True, **QUIET)
    assert (other / "precious.txt").read_text() == "keep me"


def test_eval_is_deterministic_with_dropout_and_restores_mode(tmp_path, tiny_text_file):
    from depthlab.trainer import Trainer

    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, model=dict(dropout=0.2)), **QUIET)
    t.model.train()
    a, b = t.evaluate(), t.evaluate()
    assert a == b and t.model.training


def test_nonfinite_loss_stops_with_step(tmp_path, tiny_text_file):
    from depthlab.errors import NonFiniteError

    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(learning_rate=1e3, min_lr=0.0, warmup_iters=0,
                                                                  grad_clip=0.0, max_iters=200))
    with pytest.raises(NonFiniteError, match="at step"):
        train(cfg, **QUIET)
    assert not (tmp_path / "r" / "summary.json").exists()


def test_compile_failure_falls_back_to_eager_with_one_warning(tmp_path, tiny_text_file, monkeypatch):
    from depthlab.trainer import Trainer

    def broken_compile(model, *a, **k):
        def fail(*args, **kwargs):
            raise RuntimeError("no C++ compiler found")
        return fail

    monkeypatch.setattr(torch, "compile", broken_compile)
    logs = []
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(compile=True, max_iters=5)), log=logs.append)
    assert t.model is t.raw_model
    assert sum("torch.compile unavailable" in line for line in logs) == 1
    t.fit()
    assert (tmp_path / "r" / "summary.json").exists()


def test_package_exports_the_train_function():
    import importlib

    import depthlab
    import depthlab.analytics  # noqa: F401 - importing submodules must not shadow the function

    importlib.import_module("depthlab.trainer")
    assert callable(depthlab.train) and depthlab.train.__name__ == "train"
