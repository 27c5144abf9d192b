"""`depthlab probe`: numbers recomputed by hand for a small model, the CLI output contract, and a
probe that judges magnitudes absolutely as well as by ratio and names the mechanism (issue 14).

``depthlab probe --model.variant plain --model.n_layer 16 --model.n_embd 32`` (the quick profile's
width) measured: every block's gradient ~1e-6 with a first/last ratio of 4, and block outputs of
RMS 4e-3 shrinking to 9e-7, because at width 32 with GPT-2 init the sublayer outputs are below
sqrt(eps) of LayerNorm, which then divides by a constant instead of normalising. At width 192
the same variant keeps RMS ~1 and only the rank collapses."""

import json
import math

import numpy as np
import pytest
import torch

from depthlab.analytics.activations import rank_measure
from depthlab.analytics.probe import probe_at_init, summarise_probe
from depthlab.cli import main
from depthlab.data import get_batch, load_corpus
from depthlab.model import GPT

from conftest import tiny_config


def test_probe_numbers_recomputed(tmp_path, tiny_text_file):
    cfg = tiny_config(tmp_path, tiny_text_file, model={"n_layer": 3, "variant": "postnorm", "position": "learned"})
    res = probe_at_init(cfg, n_batches=2, batch_size=3)
    corpus = load_corpus(cfg.data)
    import dataclasses

    torch.manual_seed(cfg.train.seed)
    model = GPT(dataclasses.replace(cfg.model, vocab_size=len(corpus.tokenizer.vocab)))
    model.eval()
    rng = np.random.default_rng([cfg.train.seed, 3])
    outs = []
    for _ in range(2):
        x, y = get_batch(corpus.train, cfg.model.block_size, 3, rng)
        h = model.transformer.drop(model.transformer.wte(x) + model.transformer.wpe(torch.arange(x.shape[1])))
        per_block = []
        for blk in model.transformer.h:
            h = blk(h)
            per_block.append(h.detach())
        outs.append(per_block)
        loss = torch.nn.functional.cross_entropy(model.lm_head(model.transformer.ln_f(h)).flatten(0, 1), y.flatten())
        (loss / 2).backward()
    for i, row in enumerate(res["layers"]):
        ps = [p for n, p in model.named_parameters() if n.startswith(f"transformer.h.{i}.")]
        want_norm = math.sqrt(sum(p.grad.norm().item() ** 2 for p in ps))
        want_mean = sum(p.grad.abs().sum().item() for p in ps) / sum(p.numel() for p in ps)
        assert row["block"] == i
        assert row["grad_norm"] == pytest.approx(want_norm, rel=1e-4)
        assert row["mean_abs_grad"] == pytest.approx(want_mean, rel=1e-4)
        assert row["act_rms"] == pytest.approx(np.mean([o[i].pow(2).mean().sqrt().item() for o in outs]), rel=1e-4)
        assert row["rank_measure"] == pytest.approx(np.mean([rank_measure(o[i]) for o in outs]), rel=1e-4)


def test_summary_names_what_breaks():
    def lay(g, a, r):
        return [{"block": i, "grad_norm": g[i], "mean_abs_grad": g[i] / 100, "act_rms": a[i], "rank_measure": r[i],
                 "token_cosine": None if r[i] is None else 1 - r[i]} for i in range(len(g))]

    collapse = summarise_probe({"layers": lay([9, 10, 10], [0.1, 0.9, 0.9], [0.6, 0.1, 0.001]), "loss": 4.2})
    assert collapse[0].startswith("rank collapse") and "block 2" in collapse[0]
    assert any("not the problem here: gradient magnitude" in s for s in collapse)
    assert any("vanishing gradients' explanation does not fit" in s for s in collapse)
    under = summarise_probe({"layers": lay([1e-12, 1e-6, 1.0], [1e-7, 0.0, 0.0], [0.7, None, None]), "loss": 4.2})
    assert under[0].startswith("activations underflow") and under[1].startswith("vanishing gradients")
    dead = summarise_probe({"layers": lay([0.0, 0.0, 0.0], [1e-7, 0.0, 0.0], [0.7, None, None]), "loss": 4.17})
    assert dead[0].startswith("activations underflow") and dead[1].startswith("no gradient at all")
    assert not any("not the problem here: gradient" in s for s in dead)
    healthy = summarise_probe({"layers": lay([1, 1.2, 1.1], [1, 1.1, 1.2], [0.9, 0.9, 0.9]), "loss": 4.2,
                               "config": {"variant": "prenorm"}})
    assert len(healthy) == 1 and healthy[0].startswith("healthy at initialisation (prenorm, 3 blocks)")


@pytest.mark.slow
def test_probe_cli_json_and_table(tmp_path, tiny_text_file, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["probe", "--data.path", str(tiny_text_file), "--model.variant", "plain", "--model.n_layer", "4",
            "--model.n_embd", "32", "--model.n_head", "2", "--model.block_size", "16"]
    assert main(args + ["--json"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out)  # exactly one JSON object on stdout
    assert [l["block"] for l in data["layers"]] == [0, 1, 2, 3]
    assert {"grad_norm", "mean_abs_grad", "act_rms", "rank_measure"} <= set(data["layers"][0])
    assert data["summary"] and (tmp_path / "probe-plain-layernorm-4.png").stat().st_size > 1000
    assert main(args + ["--out", str(tmp_path / "x.png")]) == 0
    text = capsys.readouterr().out
    assert "block   grad_norm  mean_abs_grad" in text and (tmp_path / "x.png").exists()
    assert main(["probe", "--model.variant", "nope"]) == 2
    assert capsys.readouterr().err.startswith("depthlab: error:")


def test_training_probe_and_init_probe_agree(tmp_path, tiny_text_file):
    """The callback's probe record and probe_at_init share one statistics function (block_stats)."""
    import dataclasses
    from types import SimpleNamespace

    from depthlab.analytics.activations import ActivationProbe

    cfg = tiny_config(tmp_path, tiny_text_file, model={"n_layer": 3, "variant": "postnorm"})
    res = probe_at_init(cfg, n_batches=1, batch_size=3)
    corpus = load_corpus(cfg.data)
    torch.manual_seed(cfg.train.seed)
    model = GPT(dataclasses.replace(cfg.model, vocab_size=len(corpus.tokenizer.vocab)))
    x, _ = get_batch(corpus.train, cfg.model.block_size, 3, np.random.default_rng([cfg.train.seed, 3]))
    logged = []
    run = SimpleNamespace(raw_model=model, metrics=SimpleNamespace(tb=None, log=lambda k, r, tb: logged.append((k, r))))
    cb = ActivationProbe(interval=1, histograms=False)
    cb.batch = x
    rec = cb.probe(run, 0)
    assert logged[0][0] == "probe" and rec["kind"] == "probe"
    for i, row in enumerate(res["layers"]):
        assert row["act_rms"] == rec["resid_rms"][i]
        assert row["rank_measure"] == rec["rank_measure"][i]
        assert row["token_cosine"] == rec["token_cosine"][i]
        assert row["attn_entropy"] == pytest.approx(np.mean(rec["attn_entropy"][i]), rel=1e-6)
        assert row["attn_entropy_uniform"] == rec["attn_entropy_uniform"]


def test_postnorm_probe_rank_at_most_one(tmp_path, tiny_text_file):
    from depthlab.analytics.probe import probe_at_init

    cfg = tiny_config(tmp_path, tiny_text_file, model={"variant": "postnorm", "n_layer": 3, "block_size": 64})
    ranks = [r["rank_measure"] for r in probe_at_init(cfg, n_batches=2, batch_size=4)["layers"]]
    assert all(0.0 <= v <= 1.0 for v in ranks), ranks  # 1.01 before: the mean is no minimiser in this norm


# ----------------------------------------------------------------- magnitudes judged absolutely, the mechanism named
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
    far = {**NARROW, "layers": [{**r, "mean_abs_grad": r["mean_abs_grad"] * 1e-11} for r in NARROW["layers"]]}
    assert "below AdamW's eps" in "\n".join(summarise_probe(far))  # 1e-19 is not "near" 1e-8


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


def test_dyt_after_the_sum_fades_by_its_own_mechanism_not_eps(tmp_path, tiny_text_file):
    cfg = tiny_config(tmp_path, tiny_text_file, model={"n_layer": 3, "variant": "postnorm", "norm": "dyt"})
    res = probe_at_init(cfg, n_batches=1, batch_size=2)
    a = [r["act_rms"] for r in res["layers"]]
    text = " ".join(summarise_probe(res))
    assert res["norm_eps"] is None and "eps dominates" not in text
    gain = (a[-1] / a[0]) ** 0.5
    assert 0.2 < gain < 0.3  # two DyTs per block at alpha 0.5 on a small signal: ~0.25
    assert "mechanism: DyT does not normalise" in text and f"passes on ~{gain:.2g} x" in text
    assert "model.variant prenorm or periln" in text


def test_prenorm_dyt_names_the_final_dyt_and_the_init(tmp_path, tiny_text_file):
    cfg = tiny_config(tmp_path, tiny_text_file, model={"norm": "dyt", "embed_scale": "none"})
    res = probe_at_init(cfg, n_batches=1, batch_size=2)
    text = " ".join(summarise_probe(res))
    a = res["layers"][-1]["act_rms"]
    assert a < 0.1 and f"hands the head RMS ~{0.5 * a:.1e}" in text
    assert "std 0.02 and model.embed_scale is none" in text and "model.embed_scale learned" in text
    # the default with DyT (embed_scale auto = learned): the embeddings start the stream at RMS ~1
    scaled = probe_at_init(tiny_config(tmp_path, tiny_text_file, model={"norm": "dyt"}), n_batches=1, batch_size=2)
    assert 0.5 < scaled["layers"][0]["act_rms"] < 2.0
    assert summarise_probe(scaled)[0].startswith("healthy at initialisation (prenorm, 2 blocks)")
    # N(0, 1) token and position embeddings: a stream of RMS ~1.4, where DyT's tanh(0.5 x) is past its linear part
    big = tiny_config(tmp_path, tiny_text_file, model={"norm": "dyt", "init": "torch", "position": "learned"})
    healthy = summarise_probe(probe_at_init(big, n_batches=1, batch_size=2))
    assert healthy[0].startswith("healthy at initialisation (prenorm, 2 blocks)"), healthy
    peri = probe_at_init(tiny_config(tmp_path, tiny_text_file, model={"norm": "dyt", "variant": "periln",
                                                                      "embed_scale": "none"}),
                         n_batches=1, batch_size=2)
    assert "the final DyT (ln_f) hands the head" in " ".join(summarise_probe(peri))  # Peri-LN ends in ln_f too


def test_periln_and_depth_scalings_are_named(tmp_path, tiny_text_file):
    from depthlab.analytics.probe import wiring_label

    cfg = tiny_config(tmp_path, tiny_text_file, model={"variant": "periln", "residual_scale": "depth"})
    res = probe_at_init(cfg, n_batches=1, batch_size=2)
    assert summarise_probe(res)[0].startswith("healthy at initialisation (periln + residual_scale depth, 2 blocks)")
    assert wiring_label(res["config"]) == "periln + layernorm + residual_scale depth"
    assert wiring_label({"variant": "prenorm", "norm": "rmsnorm", "norm_scale": "depth"}) == \
        "prenorm + rmsnorm + norm_scale depth"
    assert wiring_label({"variant": "rezero", "norm": "layernorm"}) == "rezero (no norm)"


def test_the_embedding_scale_is_named_as_built_where_it_is_on_or_off_under_dyt():
    from depthlab.analytics.probe import wiring_label

    assert wiring_label({"variant": "prenorm", "norm": "dyt", "embed_scale": "auto"}) == \
        "prenorm + dyt + embed_scale learned"
    assert wiring_label({"variant": "prenorm", "norm": "dyt", "embed_scale": "none"}) == \
        "prenorm + dyt + embed_scale none"
    assert wiring_label({"variant": "prenorm", "norm": "layernorm", "embed_scale": "auto"}) == "prenorm + layernorm"
    assert wiring_label({"variant": "postnorm", "norm": "layernorm", "embed_scale": "learned"}) == \
        "postnorm + layernorm + embed_scale learned"


@pytest.mark.slow  # about a second per case: the fast tier stays under 3 min
@pytest.mark.parametrize("flags, name", [
    ((), "probe-prenorm-dyt-1.png"),
    (("--model.embed_scale", "learned"), "probe-prenorm-dyt-1.png"),  # what auto builds with DyT: the same model
    (("--model.embed_scale", "none"), "probe-prenorm-dyt-1-embed_scale-none.png"),
    (("--model.norm_scale", "depth"), "probe-prenorm-dyt-1-norm_scale-depth.png"),
])
def test_probe_default_name_tells_apart_models_that_differ_in_a_scale(tmp_path, tiny_text_file, capsys, monkeypatch,
                                                                       flags, name):
    from depthlab.cli import main

    monkeypatch.chdir(tmp_path)
    rc = main(["probe", "--data.path", str(tiny_text_file), "--model.n_layer", "1", "--model.n_embd", "16",
               "--model.n_head", "2", "--model.block_size", "8", "--model.norm", "dyt", "--batches", "1",
               "--probe_batch_size", "2", *flags])
    out = capsys.readouterr().out
    assert rc == 0 and f"plot: {name}" in out.splitlines() and (tmp_path / name).is_file()
    built = "none" if "none" in flags else "learned"
    assert out.startswith(f"probe at init: prenorm + dyt + {'norm_scale depth + ' if 'depth' in flags else ''}"
                          f"embed_scale {built}, 1 blocks"), out


def test_rank_collapse_on_a_bpe_run_says_token(tmp_path, tiny_text_file):
    """A new user's pass: the probe of a BPE config said 'not even on the current character'."""
    import dataclasses

    cfg = tiny_config(tmp_path, tiny_text_file)
    assert probe_at_init(cfg, n_batches=1, batch_size=2)["unit"] == "character"
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, tokenizer="bpe", vocab_size=300))
    assert probe_at_init(cfg, n_batches=1, batch_size=2)["unit"] == "token"
    layers = [{"block": i, "grad_norm": 10.0, "mean_abs_grad": 0.1, "act_rms": 0.9, "rank_measure": r,
               "token_cosine": 1 - r} for i, r in enumerate([0.6, 0.1, 0.001])]
    collapse = summarise_probe({"layers": layers, "loss": 4.2, "unit": "token"})[0]
    assert "not even on the current token -- expect a loss stuck at the unigram level (token frequencies)" in collapse
    collapse = summarise_probe({"layers": layers, "loss": 4.2})[0]
    assert "not even on the current character" in collapse
