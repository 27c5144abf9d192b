"""The probe judges magnitudes absolutely as well as by ratio, and names the mechanism (issue 14, kind 2).

``depthlab probe --model.variant plain --model.n_layer 16 --model.n_embd 32`` (the quick profile's
width) measured: every block's gradient ~1e-6 with a first/last ratio of 4, and block outputs of
RMS 4e-3 shrinking to 9e-7, because at width 32 with GPT-2 init the sublayer outputs are below
sqrt(eps) of LayerNorm, which then divides by a constant instead of normalising. At width 192
the same variant keeps RMS ~1 and only the rank collapses.
"""

import math

import pytest

from conftest import tiny_config
from depthlab.analytics.probe import probe_at_init, summarise_probe


def layers(grad, act, rank, weight=8.0, attn=None, mlp=None):
    out = []
    for i in range(len(grad)):
        out.append({"block": i, "grad_norm": grad[i], "mean_abs_grad": grad[i] / 250, "weight_norm": weight,
                    "act_rms": act[i], "rank_measure": rank[i], "token_cosine": None if rank[i] is None else 0.99,
                    "attn_out_rms": (attn or [None] * len(grad))[i], "mlp_out_rms": (mlp or [None] * len(grad))[i]})
    return out


L = 16
# measured: plain + layernorm, 16 blocks x 32 wide, GPT-2 init (rounded)
NARROW = {"config": {"variant": "plain", "norm": "layernorm", "n_layer": L, "n_embd": 32, "init": "gpt2"},
          "loss": 4.174, "norm_eps": 1e-5,
          "layers": layers([1.2e-5 * 0.85 ** i + 1.5e-6 for i in range(L)], [4.24e-3 * 0.57 ** i for i in range(L)],
                           [0.52 * 0.7 ** i for i in range(L)], attn=[1.9e-5] * L, mlp=[1.4e-5] * L)}
# measured: the same at width 192: RMS ~1 after block 0, gradients ~10, rank collapse only
WIDE = {"config": {"variant": "plain", "norm": "layernorm", "n_layer": L, "n_embd": 192, "init": "gpt2"},
        "loss": 4.179, "norm_eps": 1e-5,
        "layers": layers([13.0] * L, [0.13] + [0.98] * (L - 1), [0.58 * 0.62 ** i for i in range(L)], weight=25.0)}


def test_tiny_gradients_everywhere_are_reported():
    s = summarise_probe(NARROW)
    text = "\n".join(s)
    assert any(x.startswith("tiny gradients in every block") for x in s), text
    assert "not vanish with depth" in text and "ratio" in text
    assert "gradient magnitude" not in text  # never "not the problem here: gradient magnitude"
    assert "near AdamW's eps" in text  # mean |grad| ~5e-8 .. 6e-9 per element


def test_shrinking_activations_and_the_eps_mechanism_are_reported():
    s = summarise_probe(NARROW)
    text = "\n".join(s)
    assert "activations shrink" in text and "-fold across depth" in text
    mech = next(x for x in s if x.startswith("mechanism:"))
    assert "LayerNorm's eps dominates" in mech and "sqrt(eps) = 3.2e-03" in mech
    assert "attention RMS 1.9e-05" in mech and "~0.57 x" in mech and "width 32" in mech
    assert "vanishing gradients' explanation does not fit" not in text  # the mechanism is named instead


def test_wide_plain_is_rank_collapse_not_eps():
    s = summarise_probe(WIDE)
    text = "\n".join(s)
    assert s[0].startswith("rank collapse")
    assert "mechanism:" not in text and "tiny gradients" not in text
    assert "not the problem here:" in text and "gradient magnitude" in text


def test_rezero_identity_is_not_tiny_gradients():
    rz = {"config": {"variant": "rezero", "norm": "layernorm", "n_layer": 4, "n_embd": 32},
          "loss": 4.17, "layers": layers([4e-7] * 4, [0.028] * 4, [0.99] * 4)}
    text = "\n".join(summarise_probe(rz))
    assert "tiny gradients" not in text and text.startswith("healthy at initialisation (rezero")


@pytest.mark.parametrize("norm,eps", [("layernorm", 1e-5), ("rmsnorm", 1.1920928955078125e-07), ("none", None)])
def test_real_probe_records_what_the_checks_need(tmp_path, tiny_text_file, norm, eps):
    cfg = tiny_config(tmp_path, tiny_text_file, model={"variant": "plain", "n_layer": 6, "norm": norm})
    res = probe_at_init(cfg, n_batches=1, batch_size=2)
    assert res["norm_eps"] == eps
    for r in res["layers"]:
        assert r["weight_norm"] > 0 and r["attn_out_rms"] >= 0 and r["mlp_out_rms"] >= 0
    assert res["layers"][0]["attn_out_rms"] > 0


def test_real_narrow_plain_probe_names_eps(tmp_path, tiny_text_file):
    """A real plain stack at width 32, GPT-2 init: the norm cannot normalise (block outputs RMS ~0.02,
    not 1); with RMSNorm's far smaller eps it can; pre-LN of the same size is healthy."""
    cfg = tiny_config(tmp_path, tiny_text_file, model={"variant": "plain", "n_layer": 8})
    res = probe_at_init(cfg, n_batches=1, batch_size=2)
    assert max(r["act_rms"] for r in res["layers"]) < 0.1
    text = "\n".join(summarise_probe(res))
    assert "LayerNorm's eps dominates" in text, text
    cfg = tiny_config(tmp_path, tiny_text_file, model={"variant": "plain", "n_layer": 8, "norm": "rmsnorm"})
    assert "mechanism:" not in "\n".join(summarise_probe(probe_at_init(cfg, n_batches=1, batch_size=2)))
    cfg = tiny_config(tmp_path, tiny_text_file, model={"variant": "prenorm", "n_layer": 8})
    text = "\n".join(summarise_probe(probe_at_init(cfg, n_batches=1, batch_size=2)))
    assert text.startswith("healthy at initialisation (prenorm"), text


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
    cb._idx = torch.randint(0, 11, (2, 8))
    rec = cb.probe(SimpleNamespace(raw_model=model, metrics=metrics), 5)
    writer.close()
    assert rec["step"] == 5 and len(logged) == 1 and not math.isfinite(rec["resid_rms"][1])
