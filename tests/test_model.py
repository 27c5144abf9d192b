import math

import pytest
import torch

from depthlab.errors import DepthlabError
from depthlab.model import GPT

from conftest import tiny_model_config

VARIANTS = ["prenorm", "postnorm", "plain", "rezero", "deepnorm"]


def cfg(**kw):
    return tiny_model_config(**{"block_size": 16, **kw})


def test_shapes_and_initial_loss_near_uniform():
    torch.manual_seed(0)
    m = GPT(cfg())
    idx = torch.randint(0, 11, (3, 16))
    logits, loss = m(idx, torch.randint(0, 11, (3, 16)))
    assert logits.shape == (3, 16, 11)
    assert abs(loss.item() - math.log(11)) < 0.1  # 0.02-std init: near-uniform predictions
    logits2, none = m(idx)
    assert none is None and torch.equal(logits, logits2)


@pytest.mark.parametrize("explicit", [False, True])
def test_causality_future_tokens_do_not_leak(explicit):
    torch.manual_seed(0)
    m = GPT(cfg()).eval()
    for blk in m.transformer.h:
        blk.attn.explicit = explicit
    idx = torch.randint(0, 11, (2, 16))
    idx2 = idx.clone()
    idx2[:, 9:] = (idx2[:, 9:] + 1) % 11
    a, _ = m(idx)
    b, _ = m(idx2)
    assert torch.allclose(a[:, :9], b[:, :9], atol=1e-6)
    assert not torch.allclose(a[:, 9], b[:, 9])


def test_sdpa_and_explicit_paths_agree():
    torch.manual_seed(0)
    m = GPT(cfg(n_layer=3)).eval()
    idx = torch.randint(0, 11, (4, 16))
    a, _ = m(idx)
    for blk in m.transformer.h:
        blk.attn.explicit = True
    b, _ = m(idx)
    assert (a - b).abs().max().item() < 1e-5


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "none"])
def test_every_variant_forward_backward(variant, norm):
    torch.manual_seed(0)
    m = GPT(cfg(variant=variant, norm=norm, activation="relu" if norm == "none" else "gelu"))
    idx = torch.randint(0, 11, (2, 16))
    _, loss = m(idx, idx)
    loss.backward()
    assert math.isfinite(loss.item())
    grads = [p.grad for p in m.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    if variant == "rezero":  # alpha = 0: blocks are identities, so only the alphas/embeddings/head learn
        assert any(g.abs().sum() > 0 for n, g in zip([n for n, _ in m.named_parameters()], grads) if "alpha" in n)


def test_rezero_is_identity_at_init():
    torch.manual_seed(0)
    m = GPT(cfg(variant="rezero", n_layer=4))
    seen = {}
    blk = m.transformer.h[3]
    blk.hook_resid_pre.register_forward_hook(lambda mod, i, o: seen.__setitem__("pre", o))
    blk.hook_resid_post.register_forward_hook(lambda mod, i, o: seen.__setitem__("post", o))
    m(torch.randint(0, 11, (2, 16)))
    assert torch.equal(seen["pre"], seen["post"])
    assert not any("ln" in n for n, _ in m.named_parameters())


def test_plain_none_is_bare_stack_and_postnorm_formula():
    torch.manual_seed(0)
    m = GPT(cfg(variant="plain", norm="none", n_layer=1))
    blk = m.transformer.h[0]
    x = torch.randn(2, 16, 16)
    assert torch.allclose(blk(x), blk.mlp(blk.attn(x)), atol=1e-6)
    m2 = GPT(cfg(variant="postnorm", n_layer=1))
    b2 = m2.transformer.h[0]
    mid = b2.ln_1(x + b2.attn(x))
    assert torch.allclose(b2(x), b2.ln_2(mid + b2.mlp(mid)), atol=1e-6)
    m3 = GPT(cfg(variant="deepnorm", n_layer=3))
    b3 = m3.transformer.h[0]
    a = (2 * 3) ** 0.25
    mid = b3.ln_1(a * x + b3.attn(x))
    assert torch.allclose(b3(x), b3.ln_2(a * mid + b3.mlp(mid)), atol=1e-5)


def test_deepnorm_init_gains():
    torch.manual_seed(0)
    L, C = 6, 64
    m = GPT(cfg(variant="deepnorm", n_layer=L, n_embd=C, n_head=4))
    beta = (8 * L) ** -0.25
    w = torch.cat([b.attn.c_attn.weight for b in m.transformer.h])
    q = torch.cat([b.attn.c_attn.weight[:C] for b in m.transformer.h])
    v = torch.cat([b.attn.c_attn.weight[2 * C:] for b in m.transformer.h])
    fc = torch.cat([b.mlp.c_fc.weight for b in m.transformer.h])
    assert w.shape[0] == 3 * C * L
    assert q.std().item() == pytest.approx(math.sqrt(2 / (2 * C)), rel=0.05)
    assert v.std().item() == pytest.approx(beta * math.sqrt(2 / (2 * C)), rel=0.05)
    assert fc.std().item() == pytest.approx(beta * math.sqrt(2 / (5 * C)), rel=0.05)


def test_gpt2_init_scales_residual_projections():
    torch.manual_seed(0)
    m = GPT(cfg(n_layer=8, n_embd=64))
    proj = torch.cat([b.attn.c_proj.weight.flatten() for b in m.transformer.h])
    fc = torch.cat([b.mlp.c_fc.weight.flatten() for b in m.transformer.h])
    assert proj.std().item() == pytest.approx(0.02 / math.sqrt(16), rel=0.05)
    assert fc.std().item() == pytest.approx(0.02, rel=0.05)
    t = GPT(cfg(n_layer=8, n_embd=64, init="torch"))
    bound = 1 / math.sqrt(64)
    assert t.transformer.h[0].mlp.c_fc.weight.abs().max().item() <= bound
    assert t.transformer.h[0].mlp.c_fc.weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05)


def test_weight_tying_counts_once_and_gpt2_names():
    m = GPT(cfg())
    assert m.lm_head.weight is m.transformer.wte.weight
    names = {n for n, _ in m.named_parameters()}
    assert "transformer.h.0.attn.c_attn.weight" in names and "transformer.h.1.mlp.c_proj.weight" in names
    assert "transformer.ln_f.weight" in names and "transformer.h.0.ln_1.weight" in names
    total = sum(p.numel() for p in m.parameters())
    untied = GPT(cfg(tie_weights=False))
    assert sum(p.numel() for p in untied.parameters()) == total + 11 * 16


@pytest.mark.parametrize("kw,needle", [
    (dict(n_embd=30, n_head=4), "model.n_embd (30) must be divisible by model.n_head (4)"),
    (dict(n_layer=0), "model.n_layer"), (dict(block_size=-1), "model.block_size"),
    (dict(dropout=1.0), "model.dropout"), (dict(variant="resnet"), "model.variant"),
])
def test_impossible_configs_name_the_field(kw, needle):
    with pytest.raises(DepthlabError) as e:
        cfg(**kw)
    assert needle in str(e.value)


def test_sequence_longer_than_block_rejected():
    with pytest.raises(ValueError, match="block_size"):
        GPT(cfg())(torch.zeros(1, 17, dtype=torch.long))
