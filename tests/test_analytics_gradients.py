"""Gradient monitor: exact identities, generic modules, the trainer callback's records."""

import json
import math

import pytest
import torch
import torch.nn as nn

from depthlab.analytics.gradients import GradientMonitor, format_table, param_component

from conftest import tiny_gpt as _tiny_gpt


def tiny_gpt(**kw):
    return _tiny_gpt(n_layer=3, **kw)  # three blocks: a middle one between first and last


def backward(model):
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 11, (2, 8), generator=g)
    _, loss = model(idx, torch.roll(idx, -1, 1))
    loss.backward()


def test_component_names():
    assert param_component("transformer.h.3.attn.c_attn.weight") == ("transformer.h.3", "attn.c_attn")
    assert param_component("transformer.h.0.mlp.c_proj.bias") == ("transformer.h.0", "mlp.c_proj")
    assert param_component("transformer.h.1.ln_2.weight") == ("transformer.h.1", "ln")
    assert param_component("transformer.h.1.alpha_mlp") == ("transformer.h.1", "alpha")
    assert param_component("transformer.ln_f.weight") == (None, "ln")
    assert param_component("transformer.wpe.weight") == (None, "embeddings")
    assert param_component("lm_head.weight") == (None, "head")
    assert param_component("layers.2.fc.weight") == ("layers.2", "fc")


def test_exact_identities_on_gpt():
    model = tiny_gpt(tie_weights=False, bias=True)
    backward(model)
    st = GradientMonitor(model).grad_stats()
    named = dict(model.named_parameters())
    for n in st.names:
        assert st.mean_abs_grad[n] == named[n].grad.abs().mean().item()  # exactly, not approx
        assert st.grad_norm[n] == pytest.approx(named[n].grad.norm().item(), rel=1e-6)
    ref = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")).item()
    assert st.total_norm == pytest.approx(ref, rel=1e-6)
    composed = math.sqrt(sum(v * v for v in st.grad_norm_block) + sum(v * v for v in st.other.values()))
    assert composed == pytest.approx(ref, rel=1e-6)
    assert math.sqrt(sum(v * v for v in st.grad_norm_component.values())) == pytest.approx(ref, rel=1e-6)
    assert st.blocks == ["transformer.h.0", "transformer.h.1", "transformer.h.2"]
    assert set(st.other) == {"transformer.wte", "transformer.ln_f", "lm_head"}  # rope: no table of positions
    assert {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj", "ln", "embeddings", "head"} <= set(
        st.grad_norm_component)
    # per-block mean |grad| = total |grad| of the block / its element count
    blk = [p for n, p in named.items() if n.startswith("transformer.h.1.")]
    want = sum(p.grad.abs().sum().item() for p in blk) / sum(p.numel() for p in blk)
    assert st.mean_abs_grad_block[1] == pytest.approx(want, rel=1e-6)


def test_generic_module_and_context_manager():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with GradientMonitor(net) as mon:
        net(torch.randn(5, 4)).pow(2).sum().backward()
    st = mon.stats
    assert st.blocks == ["0", "2"]  # Sequential indices are the blocks
    assert st.grad_norm_block[0] == pytest.approx(
        math.hypot(net[0].weight.grad.norm().item(), net[0].bias.grad.norm().item()), rel=1e-6)
    assert st.update_ratio is None
    table = format_table(st).splitlines()
    assert table[0].split()[0] == "0.weight" and table[-1].split()[0] == "total"


def test_update_ratio_matches_manual_step():
    model = tiny_gpt()
    backward(model)
    mon = GradientMonitor(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    mon.capture_grads()
    mon.snapshot_weights()
    with torch.no_grad():  # a hand-written SGD step (torch.optim's first step imports for seconds)
        for p in model.parameters():
            p.add_(p.grad, alpha=-0.1)
    st = mon.collect(step=1)
    for n, p in model.named_parameters():
        want = (p.detach() - before[n]).norm().item() / before[n].norm().item() if before[n].norm() > 0 else 0.0
        assert st.update_ratio[n] == pytest.approx(want, rel=1e-5, abs=1e-12)
    blk = [n for n in before if n.startswith("transformer.h.0.")]
    num = math.sqrt(sum((dict(model.named_parameters())[n].detach() - before[n]).norm().item() ** 2 for n in blk))
    den = math.sqrt(sum(before[n].norm().item() ** 2 for n in blk))
    assert st.update_ratio_block[0] == pytest.approx(num / den, rel=1e-5)
    rec = st.to_record(1)
    assert rec["kind"] == "grad" and rec["step"] == 1 and "grad_2.0_norm/transformer.wte.weight" in rec
    json.dumps(rec)


def test_one_host_sync_per_collect(monkeypatch):
    model = tiny_gpt()
    backward(model)
    mon = GradientMonitor(model)
    calls = {"n": 0}
    orig = torch.Tensor.tolist

    def counting(self):
        calls["n"] += 1
        return orig(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counting)
    mon.capture_grads()
    mon.snapshot_weights()
    mon.collect()
    assert calls["n"] == 1
