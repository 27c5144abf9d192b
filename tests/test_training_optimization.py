"""training/optimization.py: the optimizer's hyperparameters follow the config, also after a resume."""

import pytest
import torch
from conftest import QUIET, tiny_config
from depthlab.trainer import Trainer, train


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_resume_applies_a_changed_weight_decay_and_betas(tmp_path, tiny_text_file, optimizer):
    base = dict(max_iters=10, eval_interval=10, weight_decay=0.1, optimizer=optimizer)
    train(tiny_config(tmp_path / "r", tiny_text_file, train=base), **QUIET)
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file,
                            train=dict(base, max_iters=20, weight_decay=0.0, beta2=0.95, resume=True)), **QUIET)
    groups = t.optimizer.param_groups
    assert all(g["weight_decay"] == 0.0 for g in groups)  # was 0.1 in the checkpoint's state
    assert {tuple(g["betas"]) for g in groups if "betas" in g} == {(0.9, 0.95)}
    assert any(g.get("muon") for g in groups) == (optimizer == "muon")
    t.fit()
    st = torch.load(tmp_path / "r" / "checkpoints" / "step-000020.state.pt", weights_only=True)["optimizer"]
    saved = st["param_groups"] if "param_groups" in st else [g for v in st.values() for g in v["param_groups"]]
    assert max(g["weight_decay"] for g in saved) == 0.0 and {g["betas"][1] for g in saved if "betas" in g} == {0.95}


def test_a_fresh_run_decays_matrices_only(tmp_path, tiny_text_file):
    t = Trainer(tiny_config(tmp_path / "f", tiny_text_file, train=dict(optimizer="adamw", weight_decay=0.2)), **QUIET)
    decay, no_decay = t.optimizer.param_groups
    assert decay["weight_decay"] == 0.2 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
