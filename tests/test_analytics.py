"""analytics.train (depthlab.train): the default observers inside a real (tiny) run: record
contract, files, no effect on the trajectory."""

import json
import math

import pytest

from depthlab import train
from depthlab.callbacks import Callback
from depthlab.rundir import read_metrics

from conftest import QUIET, tiny_config


class GradNorms(Callback):
    def __init__(self):
        self.by_step = {}

    def on_step_end(self, trainer, info):
        self.by_step[info.step] = info.grad_norm  # clip_grad_norm_'s pre-clip total


@pytest.mark.slow
def test_records_files_and_identical_trajectory(tmp_path, tiny_text_file):
    seen = GradNorms()
    cfg = tiny_config(tmp_path / "on", tiny_text_file, model={"activation": "relu"},
                      train={"grad_log_interval": 5, "probe_interval": 10, "grad_accum": 2, "grad_clip": 0.5})
    rd = train(cfg, callbacks=[seen], **QUIET)
    recs = read_metrics(rd)
    grads = [r for r in recs if r.get("kind") == "grad"]
    probes = [r for r in recs if r.get("kind") == "probe"]
    assert [r["step"] for r in grads] == [5, 10, 15, 20]
    assert [r["step"] for r in probes] == [0, 10, 20]
    g = grads[1]
    # measured before clipping, after accumulation: the norm clip_grad_norm_ saw
    assert g["grad_2.0_norm_total"] == pytest.approx(seen.by_step[10], rel=1e-5)
    for key in ("grad_norm_block", "mean_abs_grad_block", "update_ratio_block", "weight_norm_block"):
        assert len(g[key]) == 2 and all(v > 0 for v in g[key])
    assert {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj", "ln", "embeddings"} <= set(g["grad_norm_component"])
    assert set(g["update_ratio_component"]) == set(g["grad_norm_component"])
    assert "grad_2.0_norm/transformer.h.1.mlp.c_fc.weight" in g
    p = probes[-1]
    for key in ("resid_rms", "attn_out_rms", "mlp_out_rms", "rank_measure", "token_cosine", "dead_frac"):
        assert len(p[key]) == 2
    assert len(p["attn_entropy"][0]) == 2 and p["rezero_alpha"] is None
    assert p["attn_entropy_uniform"] == pytest.approx(math.lgamma(17) / 16)
    b = json.loads((rd / "baselines.json").read_text())
    assert b["bigram"]["nats"] < b["unigram"]["nats"] < b["uniform"]["nats"]
    assert "findings" in json.loads((rd / "diagnosis.json").read_text())

    off = tiny_config(tmp_path / "off", tiny_text_file, model={"activation": "relu"},
                      train={"grad_accum": 2, "grad_clip": 0.5})
    rd_off = train(off, **QUIET)
    ev_on = [(r["step"], r["val_loss"], r["train_loss"]) for r in recs if "val_loss" in r]
    ev_off = [(r["step"], r["val_loss"], r["train_loss"]) for r in read_metrics(rd_off) if "val_loss" in r]
    assert ev_on == ev_off  # observers never change the maths (bit-identical losses)


@pytest.mark.slow
def test_rezero_alpha_tracked(tmp_path, tiny_text_file):
    lines = []
    cfg = tiny_config(tmp_path / "rz", tiny_text_file, model={"variant": "rezero"},
                      train={"max_iters": 10, "probe_interval": 10, "grad_log_interval": 10})
    rd = train(cfg, log=lines.append)
    probes = [r for r in read_metrics(rd) if r.get("kind") == "probe"]
    assert probes[0]["rezero_alpha"] == [[0.0, 0.0], [0.0, 0.0]]
    assert any(a != 0.0 for blk in probes[-1]["rezero_alpha"] for a in blk)  # alpha learns
    assert any(l.startswith("baselines (val, nats | bits/char): uniform") for l in lines)
    assert any(l.startswith("diagnosis:") for l in lines)
