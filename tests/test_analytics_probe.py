"""`depthlab probe`: numbers recomputed by hand for a small model; CLI output contract."""

import json
import math

import numpy as np
import pytest
import torch

from conftest import tiny_config
from depthlab.analytics.activations import rank_measure
from depthlab.analytics.probe import probe_at_init, summarise_probe
from depthlab.cli import main
from depthlab.data import get_batch, load_corpus
from depthlab.model import GPT


def test_probe_numbers_recomputed(tmp_path, tiny_text_file):
    cfg = tiny_config(tmp_path, tiny_text_file, model={"n_layer": 3, "variant": "postnorm"})
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
    cb._idx = x
    rec = cb.probe(run, 0)
    assert logged[0][0] == "probe" and rec["kind"] == "probe"
    for i, row in enumerate(res["layers"]):
        assert row["act_rms"] == rec["resid_rms"][i]
        assert row["rank_measure"] == rec["rank_measure"][i]
        assert row["token_cosine"] == rec["token_cosine"][i]
        assert row["attn_entropy"] == pytest.approx(np.mean(rec["attn_entropy"][i]), rel=1e-6)
        assert row["attn_entropy_uniform"] == rec["attn_entropy_uniform"]
