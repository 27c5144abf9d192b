"""depthlab.model: shapes, causality, every variant, inits, tying; the KV cache for generation.

KV cache tolerances: fp32 logits of the cached path equal the full forward's at every position to
atol 1e-5 (measured differences are ~1e-7: only the summation order of the matmuls differs)."""

import math
import warnings

import pytest
import torch

from depthlab.model import DecodePlan, GPT

from conftest import bigger_logits, tiny_gpt, tiny_model_config


VARIANTS = ["prenorm", "postnorm", "plain", "rezero", "deepnorm", "periln"]


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
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "dyt", "none"])
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


@pytest.mark.parametrize("variant", ["prenorm", "postnorm", "rezero", "deepnorm"])
def test_residual_scale_depth_multiplies_each_branch_by_one_over_sqrt_2L(variant):
    L = 3
    m = tiny_gpt(0, variant=variant, n_layer=L, residual_scale="depth")
    blk, s = m.transformer.h[1], 1 / math.sqrt(2 * L)
    with torch.no_grad():
        if variant == "rezero":
            blk.alpha_attn.fill_(0.7), blk.alpha_mlp.fill_(-0.4)
        x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(3))
        a, ln_1, ln_2 = (2 * L) ** 0.25, blk.ln_1, blk.ln_2
        if variant == "prenorm":
            mid = x + s * blk.attn(ln_1(x))
            want = mid + s * blk.mlp(ln_2(mid))
        elif variant == "postnorm":
            mid = ln_1(x + s * blk.attn(x))
            want = ln_2(mid + s * blk.mlp(mid))
        elif variant == "rezero":
            mid = x + 0.7 * s * blk.attn(x)
            want = mid - 0.4 * s * blk.mlp(mid)
        else:
            mid = ln_1(a * x + s * blk.attn(x))
            want = ln_2(a * mid + s * blk.mlp(mid))
        torch.testing.assert_close(blk(x), want, atol=1e-6, rtol=0)


def test_residual_scale_1_is_the_unscaled_model_bit_for_bit():
    idx = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(0))
    a = tiny_gpt(0, n_layer=3)(idx, idx)[1]
    b = tiny_gpt(0, n_layer=3, residual_scale=1)(idx, idx)[1]
    d = tiny_gpt(0, n_layer=3, residual_scale="depth")(idx, idx)[1]
    assert a.item() == b.item() and d.item() != a.item()


def test_dyt_is_gamma_tanh_alpha_x_plus_beta_with_the_papers_init():
    from depthlab.model import DyT

    d = DyT(16, bias=True)
    assert d.alpha.shape == (1,) and d.alpha.item() == 0.5  # Zhu et al. 2025: alpha0 = 0.5
    assert torch.equal(d.weight, torch.ones(16)) and torch.equal(d.bias, torch.zeros(16))
    assert DyT(16, bias=False).bias is None
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        d.alpha.fill_(1.7), d.weight.copy_(torch.randn(16, generator=g)), d.bias.copy_(torch.randn(16, generator=g))
    x = 3 * torch.randn(2, 5, 16, generator=g)
    want = d.weight * ((torch.exp(2 * 1.7 * x) - 1) / (torch.exp(2 * 1.7 * x) + 1)) + d.bias
    torch.testing.assert_close(d(x), want, atol=1e-5, rtol=0)


def test_norm_dyt_replaces_every_norm_the_final_one_too():
    from depthlab.model import DyT

    m = tiny_gpt(0, norm="dyt", n_layer=2)
    blk = m.transformer.h[0]
    assert all(isinstance(n, DyT) for n in (blk.ln_1, blk.ln_2, m.transformer.ln_f))
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        blk.ln_1.alpha.fill_(0.3), blk.ln_2.alpha.fill_(2.0)
        mid = x + blk.attn(torch.tanh(0.3 * x))
        torch.testing.assert_close(blk(x), mid + blk.mlp(torch.tanh(2.0 * mid)), atol=1e-6, rtol=0)
    assert not any(isinstance(n, DyT) for n in tiny_gpt(0, norm="dyt", variant="postnorm").transformer.ln_f.modules())


def test_embed_scale_auto_is_learned_with_dyt_and_starts_the_stream_at_rms_1():
    """DyT's embedding scale (the DyT authors' LLaMA code: embeddings N(0, 1/C) times sqrt(C), a stream at RMS 1):
    here 1 / the initial token embeddings' RMS, applied to tokens + positions, in the full and the cached forward."""
    from depthlab.model import KVCache

    for pos in ("rope", "learned"):
        m = tiny_gpt(0, norm="dyt", position=pos).eval()
        tr = m.transformer
        wte_rms = tr.wte.weight.detach().pow(2).mean().sqrt()
        torch.testing.assert_close(tr.emb_scale.scale.detach(), 1 / wte_rms)
        assert 40 < tr.emb_scale.scale.item() < 60  # GPT-2's std 0.02 -> ~50
        seen = {}
        hook = tr.h[0].register_forward_pre_hook(lambda mod, args: seen.update(x=args[0]))  # returns None
        idx = torch.randint(0, m.config.vocab_size, (2, 8), generator=torch.Generator().manual_seed(3))
        full, _ = m(idx)
        hook.remove()  # the cached steps below take the DecodePlan path, which runs only without hooks
        emb = tr.wte(idx) + (tr.wpe.weight[:8] if pos == "learned" else 0)
        torch.testing.assert_close(seen["x"], emb * tr.emb_scale.scale)
        assert 0.8 < seen["x"].pow(2).mean().sqrt().item() < 1.5
        cache = KVCache(m.config, 2)
        with torch.no_grad():
            m.forward_cached(idx[:, :4], cache)
            steps = [m.forward_cached(idx[:, t:t + 1], cache) for t in range(4, 8)]  # the DecodePlan path
        torch.testing.assert_close(steps[-1], full[:, -1], atol=1e-5, rtol=0)
    assert "emb_scale" not in tiny_gpt(0).transformer  # LayerNorm: GPT-2's embeddings, no scalar
    assert "emb_scale" not in tiny_gpt(0, norm="dyt", embed_scale="none").transformer
    assert "emb_scale" in tiny_gpt(0, embed_scale="learned").transformer


def test_a_dyt_run_from_before_embed_scale_loads_as_it_trained():
    """Checkpoints and config.json files written before model.embed_scale had no scalar: read as none."""
    from depthlab.config import ModelConfig, predating_model

    old = {k: v for k, v in tiny_model_config(norm="dyt").__dict__.items() if k != "embed_scale"}
    assert predating_model(old)["embed_scale"] == "none"
    assert predating_model({**old, "embed_scale": "auto"})["embed_scale"] == "auto"
    m = GPT(ModelConfig(**predating_model(old)))
    ref = tiny_gpt(0, norm="dyt", embed_scale="none")
    m.load_state_dict(ref.state_dict())  # strict: the same keys, no emb_scale
    idx = torch.zeros(1, 4, dtype=torch.long)
    torch.testing.assert_close(m(idx)[0], ref(idx)[0])


def test_periln_normalises_each_sublayers_input_and_output():
    m = tiny_gpt(0, variant="periln", n_layer=2)
    blk = m.transformer.h[1]
    names = {n for n, _ in m.named_parameters()}
    assert {"transformer.h.1.ln_1.weight", "transformer.h.1.ln_1_out.weight", "transformer.h.1.ln_2.weight",
            "transformer.h.1.ln_2_out.weight", "transformer.ln_f.weight"} <= names
    x = 5 * torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        for ln in (blk.ln_1, blk.ln_1_out, blk.ln_2, blk.ln_2_out):  # distinct gains: a swapped norm shows
            ln.weight.uniform_(0.5, 1.5)
        ln = torch.nn.functional.layer_norm
        mid = x + ln(blk.attn(ln(x, (16,), blk.ln_1.weight)), (16,), blk.ln_1_out.weight)
        want = mid + ln(blk.mlp(ln(mid, (16,), blk.ln_2.weight)), (16,), blk.ln_2_out.weight)
        torch.testing.assert_close(blk(x), want, atol=1e-5, rtol=0)
        # the stream is never normalised inside: its RMS keeps the input's scale, unlike postnorm's ~1
        assert blk(x).pow(2).mean().sqrt().item() > 3


def test_norm_scale_depth_is_layernorm_scaling_one_over_sqrt_l():
    L = 3
    m = tiny_gpt(0, n_layer=L, norm_scale="depth")
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        for i, blk in enumerate(m.transformer.h):
            c = 1 / math.sqrt(i + 1)  # Sun et al. 2025: block l = i + 1 scales its norms' outputs by 1/sqrt(l)
            mid = x + blk.attn(blk.ln_1(x) * c)
            torch.testing.assert_close(blk(x), mid + blk.mlp(blk.ln_2(mid) * c), atol=1e-6, rtol=0)
        idx = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(5))
        plain = tiny_gpt(0, n_layer=L)
        assert torch.equal(m(idx)[0], m(idx)[0]) and not torch.allclose(m(idx)[0], plain(idx)[0])
        plain.transformer.h[0].load_state_dict(m.transformer.h[0].state_dict())
        h0 = [torch.equal(a(x), b(x)) for a, b in zip(m.transformer.h, plain.transformer.h)]
        assert h0[0]  # l = 1: 1/sqrt(1), the first block is unscaled


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


def test_sequence_longer_than_block_rejected():
    with pytest.raises(ValueError, match="block_size"):
        GPT(cfg())(torch.zeros(1, 17, dtype=torch.long))


def test_rmsnorm_under_bf16_autocast_is_fused_and_close_to_fp32():
    from conftest import tiny_gpt

    m = tiny_gpt(norm="rmsnorm", variant="prenorm")
    x = torch.randint(0, 11, (2, 8))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "Mismatch dtype ... fused implementation" warning fails here
        l32 = m(x, x)[1]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            l16 = m(x, x)[1]
    assert abs(float(l32) - float(l16)) < 0.02


# ------------------------------------------------ KV cache: the cached forward computes the plain forward's function
ATOL = 1e-5


#: (variant, extra fields) the cache tests run: every variant, and each field that changes the wiring
CACHED = [(v, {}) for v in VARIANTS] + [("prenorm", {"residual_scale": "depth"}),
                                        ("rezero", {"residual_scale": "depth"}),
                                        ("periln", {"residual_scale": "depth"}),
                                        ("prenorm", {"norm_scale": "depth"}),
                                        ("prenorm", {"position": "rope"}), ("postnorm", {"position": "rope"})]


@pytest.mark.parametrize("variant,extra", CACHED)
@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("chunks", [[1] * 8, [3, 1, 1, 1, 2], [8], [5, 3]])
def test_cached_logits_equal_full_forward_at_every_position(variant, extra, explicit, chunks):
    norm = "rmsnorm" if variant == "plain" else "layernorm"
    m = bigger_logits(tiny_gpt(1, tie_weights=False, variant=variant, norm=norm, **extra))
    for blk in m.transformer.h:
        blk.attn.explicit = explicit
    idx = torch.randint(0, 11, (3, 8), generator=torch.Generator().manual_seed(2))
    full, _ = m(idx)  # (B, T, V)
    cache, t = m.new_kv_cache(3), 0
    for n in chunks:
        got = m.forward_cached(idx[:, t:t + n], cache)  # (B, V) of position t + n - 1
        t += n
        assert cache.pos == t
        torch.testing.assert_close(got, full[:, t - 1], atol=ATOL, rtol=0)
    assert t == 8


@pytest.mark.parametrize("variant,extra", CACHED)
@pytest.mark.parametrize("norm,activation,bias", [("layernorm", "gelu", False), ("rmsnorm", "relu", True),
                                                  ("none", "gelu", True), ("layernorm", "relu", True),
                                                  ("dyt", "gelu", True)])
def test_decode_plan_computes_the_full_forward_one_position_at_a_time(variant, extra, norm, activation, bias):
    if norm == "none" and extra.get("norm_scale") == "depth":
        pytest.skip("norm_scale depth needs a norm (refused by ModelConfig)")
    m = bigger_logits(tiny_gpt(3, tie_weights=False, variant=variant, norm=norm, activation=activation,
                                bias=bias, **extra))
    with torch.no_grad():  # biases start at 0 (GPT-2 init): make them count
        for name, p in m.named_parameters():
            if name.endswith("bias") or "alpha" in name or (norm == "dyt" and "ln" in name):
                p.normal_(0.0, 0.5)  # DyT's weights too: ones would hide a swapped gamma / alpha
    idx = torch.randint(0, 11, (3, 8), generator=torch.Generator().manual_seed(1))
    full, _ = m(idx)
    cache = m.new_kv_cache(3)
    m.forward_cached(idx[:, :2], cache)  # module path writes positions 0, 1; the plan reads them
    for t in range(2, 8):
        got = m.forward_cached(idx[:, t:t + 1], cache)
        torch.testing.assert_close(got, full[:, t], atol=ATOL, rtol=0)
    assert isinstance(cache.decode_plan, DecodePlan) and cache.decode_plan.usable()


def test_decode_plan_is_not_used_in_training_mode_or_with_hooks_or_explicit_attention():
    m = tiny_gpt(2).eval()
    idx = torch.zeros(1, 1, dtype=torch.long)
    cache = m.new_kv_cache(1)
    m.forward_cached(idx, cache)
    assert cache.decode_plan.usable()
    m.train()
    assert not cache.decode_plan.usable()
    m.eval()
    m.transformer.h[0].attn.explicit = True
    assert not DecodePlan(m).usable()
    m.transformer.h[0].attn.explicit = False
    h = m.transformer.h[1].hook_mlp_out.register_forward_hook(lambda *a: None)
    assert not DecodePlan(m).usable()
    h.remove()
    h = torch.nn.modules.module.register_module_forward_hook(lambda *a: None)
    try:
        assert not DecodePlan(m).usable()
    finally:
        h.remove()
    assert DecodePlan(m).usable()


def test_decode_plan_sees_in_place_weight_updates():
    m = tiny_gpt(8).eval()
    idx = torch.randint(0, 11, (2, 4), generator=torch.Generator().manual_seed(0))
    cache = m.new_kv_cache(2)
    m.forward_cached(idx[:, :1], cache)  # makes the plan
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(1.5)
    cache.reset()
    for t in range(4):
        got = m.forward_cached(idx[:, t:t + 1], cache)
    torch.testing.assert_close(got, m(idx)[0][:, -1], atol=ATOL, rtol=0)


def test_attention_pattern_under_cache_is_the_full_patterns_row():
    m = tiny_gpt(3).eval()
    idx = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(0))
    seen = []
    h = m.transformer.h[1].attn.hook_pattern.register_forward_hook(lambda mod, i, o: seen.append(o))
    try:
        m(idx)
        cache = m.new_kv_cache(2)
        m.forward_cached(idx[:, :5], cache)
        m.forward_cached(idx[:, 5:6], cache)
    finally:
        h.remove()
    full, prefill, one = seen
    assert prefill.shape == (2, 2, 5, 5) and one.shape == (2, 2, 1, 6)
    torch.testing.assert_close(prefill, full[:, :, :5, :5], atol=ATOL, rtol=0)
    torch.testing.assert_close(one[:, :, 0], full[:, :, 5, :6], atol=ATOL, rtol=0)


def test_cache_refuses_positions_past_block_size():
    m = tiny_gpt().eval()
    cache = m.new_kv_cache(1)
    m.forward_cached(torch.zeros(1, 6, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="exceed block_size 8"):
        m.forward_cached(torch.zeros(1, 3, dtype=torch.long), cache)
    cache.reset()
    assert cache.pos == 0 and m.forward_cached(torch.zeros(1, 8, dtype=torch.long), cache).shape == (1, 11)


def test_causal_bias_is_made_once_and_is_a_plain_tensor_even_when_first_made_in_inference_mode():
    from depthlab.model import causal_bias

    with torch.inference_mode():
        b = causal_bias(2, 4, torch.float32, torch.device("cpu"))  # query i is position 2 + i
    assert not b.is_inference() and causal_bias(2, 4, torch.float32, torch.device("cpu")) is b
    assert torch.equal(torch.isinf(b), torch.tensor([[False, False, False, True], [False] * 4]))
    assert causal_bias(2, 4, torch.bfloat16, torch.device("cpu")).dtype == torch.bfloat16
    q = torch.randn(1, 1, 2, 8, requires_grad=True)  # used by a training forward after sampling made it
    att = torch.baddbmm(b, q.reshape(1, 2, 8), torch.randn(1, 8, 4))
    att.softmax(-1).sum().backward()
    assert q.grad is not None
