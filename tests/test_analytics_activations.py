"""Activation probes: hooks removed, each statistic against a hand computation, the training callback."""

import math

import numpy as np
import pytest
import torch

from depthlab.analytics.activations import (attention_entropy, dead_fraction, probe_stats, rank_measure,
                                            record_activations, rms, token_cosine, uniform_attention_entropy)

from conftest import tiny_gpt as tiny  # V 11, 2 x 2 heads, C 16, context 8, seed 0


def n_hooks(model):
    return sum(len(mod._forward_hooks) for mod in model.modules())


def test_hooks_removed_even_on_error():
    model = tiny()
    idx = torch.randint(0, 11, (2, 8))
    ref, _ = model(idx)
    names = ["transformer.h.0.hook_resid_post", "transformer.h.1.attn.hook_pattern"]
    with record_activations(model, names) as acts:
        assert n_hooks(model) == 2
        out, _ = model(idx)
    assert n_hooks(model) == 0
    assert acts["transformer.h.1.attn.hook_pattern"].shape == (2, 2, 8, 8)
    assert torch.allclose(out, ref, atol=1e-5)  # explicit attention path agrees with SDPA
    with pytest.raises(RuntimeError):
        with record_activations(model, names):
            raise RuntimeError("boom")
    assert n_hooks(model) == 0
    with pytest.raises(KeyError, match="nope"):
        with record_activations(model, ["transformer.h.0.hook_resid_pre", "nope"]):
            pass
    assert n_hooks(model) == 0


def composite(m):
    a = np.abs(m)
    return math.sqrt(a.sum(axis=0).max() * a.sum(axis=1).max())


def test_rank_measure_against_numpy():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 4, generator=g)
    want = np.mean([composite(s - s.mean(axis=0, keepdims=True)) / composite(s) for s in x.numpy().astype(np.float64)])
    assert rank_measure(x) == pytest.approx(want, rel=1e-5)
    same = torch.randn(1, 4, generator=g).expand(6, 4)
    assert rank_measure(same) == pytest.approx(0.0, abs=1e-6)  # rank one: collapsed
    assert math.isnan(rank_measure(torch.randn(2, 1, 4)))  # one token: undefined


def test_rank_measure_never_exceeds_one():
    x = torch.zeros(1, 10, 4)
    x[0, 0, 0] = 1.0  # one token carries everything: the mean-only ratio is sqrt(2) * 9 / 10 = 1.27
    assert rank_measure(x) == pytest.approx(1.0)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        v = rank_measure(torch.randn(4, 8, 6, generator=g) * torch.rand(4, 8, 1, generator=g) ** 4)
        assert 0.0 <= v <= 1.0
    same = torch.randn(1, 4, generator=g).expand(6, 4)
    assert rank_measure(same) == pytest.approx(0.0, abs=1e-6)


def test_attention_entropy_uniform_and_peaked():
    T = 6
    uni = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1).unsqueeze(1)  # row i uniform over i+1
    pat = uni.expand(2, 3, T, T)
    h = attention_entropy(pat)
    assert h.shape == (3,)
    want = float(np.mean(np.log(np.arange(1, T + 1))))
    assert torch.allclose(h, torch.full((3,), want), atol=1e-6)
    assert uniform_attention_entropy(T) == pytest.approx(want)
    peaked = torch.eye(T).expand(1, 1, T, T)
    assert attention_entropy(peaked).item() == pytest.approx(0.0, abs=1e-6)


def test_token_cosine_dead_fraction_rms():
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
    # pairs: (1,2)=0, (1,3)=(2,3)=1/sqrt(2)
    assert token_cosine(x) == pytest.approx(2 / math.sqrt(2) / 3, rel=1e-6)
    assert token_cosine(torch.ones(4, 3)) == pytest.approx(1.0)
    h = torch.tensor([[[0.0, 1.0, 0.0, 2.0], [0.0, 0.0, 0.0, 1.0]]])
    assert dead_fraction(h) == 0.5
    assert rms(torch.tensor([3.0, 4.0])) == pytest.approx(math.sqrt(12.5))


def test_probe_stats_fields():
    model = tiny(activation="relu")
    model.train()
    idx = torch.randint(0, 11, (2, 8))
    st = probe_stats(model, idx)
    assert model.training and n_hooks(model) == 0
    assert len(st["resid_rms"]) == 2 and len(st["attn_entropy"][0]) == 2
    assert st["attn_entropy_uniform"] == pytest.approx(np.mean(np.log(np.arange(1, 9))))
    assert all(0.0 <= d <= 1.0 for d in st["dead_frac"])
    assert st["rezero_alpha"] is None
    with record_activations(model, ["transformer.h.1.hook_resid_post"]) as acts:
        model.eval()
        model(idx)
    assert st["resid_rms"][1] == pytest.approx(acts["transformer.h.1.hook_resid_post"].pow(2).mean().sqrt().item())
    assert st["rank_measure"][1] == pytest.approx(rank_measure(acts["transformer.h.1.hook_resid_post"]))
    rz = probe_stats(tiny(variant="rezero"), idx)
    assert rz["rezero_alpha"] == [[0.0, 0.0], [0.0, 0.0]] and rz["dead_frac"] is None
    one = probe_stats(tiny(), idx[:, :1])
    assert one["rank_measure"] == [None, None] and one["attn_entropy_uniform"] == 0.0


def test_block_stats_with_targets_backpropagates_and_matches_probe_stats():
    from depthlab.analytics.activations import block_stats

    model = tiny()
    idx, y = torch.randint(0, 11, (2, 8)), torch.randint(0, 11, (2, 8))
    st = block_stats(model, idx, y)
    model.eval()
    _, want = model(idx, y)
    # its hooks read the attention pattern (the explicit path), the plain forward takes SDPA: the same loss up to
    # rounding (equal bit for bit on a Zen 3, 1 ulp apart on an AVX-512 Xeon)
    assert st["_loss"].item() == pytest.approx(want.item(), rel=1e-6) and n_hooks(model) == 0
    st["_loss"].backward()
    assert model.transformer.h[0].attn.c_attn.weight.grad is not None
    with torch.no_grad():
        ref = probe_stats(model, idx)
    assert {k: v for k, v in st.items() if not k.startswith("_")} == ref


def test_training_probe_of_a_diverged_model_writes_its_histograms(tmp_path):
    """A model whose weights went non-finite (train.on_nonfinite skip at a huge lr) used to crash the
    run at the next probe: TensorBoard refuses an all-NaN histogram ("The histogram is empty")."""
    from types import SimpleNamespace

    import torch
    from torch.utils.tensorboard import SummaryWriter

    from conftest import tiny_gpt
    from depthlab.analytics.activations import ActivationProbe

    model = tiny_gpt()
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight.fill_(float("inf"))  # block 1's output is NaN
    writer = SummaryWriter(str(tmp_path / "tb"))
    logged = []
    metrics = SimpleNamespace(tb=writer, log=lambda kind, rec, tb: logged.append(rec),
                              histogram=lambda tag, v, step: writer.add_histogram(tag, v, step))
    cb = ActivationProbe(interval=1, histograms=True)
    cb.batch = torch.randint(0, 11, (2, 8))
    rec = cb.probe(SimpleNamespace(raw_model=model, metrics=metrics), 5)
    writer.close()
    assert rec["step"] == 5 and len(logged) == 1 and not math.isfinite(rec["resid_rms"][1])


def test_rms_and_rank_of_a_collapsed_stream_survive_flushed_subnormals():
    """A deep plain stack's stream at 1e-21: x^2 is subnormal in float32, and training flushes those to 0
    (train.flush_denormal). The statistics must read what they read at unit scale, times the scale."""
    import torch

    from depthlab.analytics.activations import rank_measure, rms

    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(0))
    before = torch.set_flush_denormal(True)
    try:
        tiny = x * 1e-21
        assert abs(rms(tiny) / rms(x) - 1e-21) < 1e-27
        assert abs(rank_measure(tiny) - rank_measure(x)) < 1e-6
    finally:
        torch.set_flush_denormal(False) if before else None
