"""training.optimization: the learning-rate schedule, parameter groups, the optimizer a run gets and its
hyperparameters (which follow the config, also after a resume: test_resume.py)."""

import pytest

from depthlab.model import GPT
from depthlab.optim import MuonAdamW
from depthlab.trainer import Trainer, get_lr, param_groups

from conftest import QUIET, muon_model_and_optimizer, tiny_config, tiny_model_config


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


def test_warmup_of_a_huge_finite_learning_rate_stays_finite_and_ordinary_ones_are_unchanged_bit_for_bit():
    """--train.learning_rate 1e308 overflowed in warmup (1e308 * 2 = inf) and the non-finite stop said "lr inf"."""
    assert get_lr(1, 1e308, 0.0, 100, 2000) == pytest.approx(1e308 * (2 / 101))
    assert get_lr(99, 1e308, 0.0, 100, 2000) == pytest.approx(1e308 * (100 / 101))
    for it in range(0, 100, 7):  # resumed runs continue bit for bit: the usual order of operations
        assert get_lr(it, 6e-4, 6e-5, 100, 2000) == 6e-4 * (it + 1) / 101


def test_param_groups_each_param_once():
    m = GPT(tiny_model_config(bias=True))
    groups = param_groups(m, 0.1)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(m.parameters()))
    assert all(p.dim() >= 2 for p in groups[0]["params"]) and all(p.dim() < 2 for p in groups[1]["params"])
    assert groups[0]["weight_decay"] == 0.1 and groups[1]["weight_decay"] == 0.0
    assert sum(p.numel() for g in groups for p in g["params"]) == m.num_params(non_embedding=False)


def test_muon_takes_the_blocks_matrices_and_adamw_the_rest_each_once():
    m, opt = muon_model_and_optimizer()
    assert isinstance(opt, MuonAdamW)
    muon = {id(p) for g in opt.muon.param_groups for p in g["params"]}
    adamw = {id(p) for g in opt.adamw.param_groups for p in g["params"]}
    names = {id(p): n for n, p in m.named_parameters()}
    assert muon.isdisjoint(adamw) and muon | adamw == set(names)
    assert sorted(names[i].split(".")[-2] for i in muon) == sorted(["c_attn", "c_proj", "c_fc", "c_proj"] * 2)
    assert all(g["muon"] for g in opt.param_groups[:len(opt.muon.param_groups)])


def test_a_fresh_run_decays_matrices_only(tmp_path, tiny_text_file):
    t = Trainer(tiny_config(tmp_path / "f", tiny_text_file, train=dict(optimizer="adamw", weight_decay=0.2)), **QUIET)
    decay, no_decay = t.optimizer.param_groups
    assert decay["weight_decay"] == 0.2 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])


def test_a_muon_run_s_step_lines_show_muon_s_rate_beside_adamw_s(tmp_path, tiny_text_file):
    """helper-48: on a Muon run the step lines' lr was AdamW's alone (the embeddings' and head's), 10x below the rate
    the blocks' matrices trained with; both are shown, Muon's the same schedule at train.muon_lr's peak."""
    lines: list[str] = []
    cfg = tiny_config(tmp_path / "m", tiny_text_file, train=dict(max_iters=4, log_interval=1, optimizer="muon",
                                                                   learning_rate=1e-3, muon_lr=2e-2, warmup_iters=0))
    t = Trainer(cfg, log=lines.append)
    t.fit()
    steps = [x for x in lines if x.startswith("step 1/")]
    lr = t.lr_at(0)
    assert len(steps) == 1 and f"| lr {lr:.2e} (Muon {lr * 20:.2e}) |" in steps[0], steps
    lines.clear()
    cfg = tiny_config(tmp_path / "a", tiny_text_file, train=dict(max_iters=2, log_interval=1, optimizer="adamw"))
    Trainer(cfg, log=lines.append).fit()
    assert any(x.startswith("step 1/") and "| lr " in x and "Muon" not in x for x in lines), lines
