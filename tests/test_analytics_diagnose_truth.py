"""Every finding and remedy is true of the run it is about (issue 14, kind 2).

Remedies read the run's config and never recommend what it already has; the bigram wording says
where the loss is (uniform / unigram / within the margin of bigram); a model that cannot see
context is flagged from its config at once; skipped steps are counted over the whole run; a
diverged run is not also called overfitting.
"""

import json

import pytest

from conftest import QUIET, tiny_config
from test_analytics_diagnose import BASE, evals
from depthlab import train
from depthlab.analytics import diagnose as D
from depthlab.analytics.diagnose import diagnose_records, diagnose_run



def grad(step, blocks, upd=None):
    return {"step": step, "kind": "grad", "grad_norm_block": blocks, "update_ratio_block": upd or [1e-3] * len(blocks)}


def probe(step, rank, ent=None, u=4.0):
    return {"step": step, "kind": "probe", "rank_measure": rank, "token_cosine": [0.1] * len(rank),
            "attn_entropy": ent or [[1.0, 1.0]] * len(rank), "attn_entropy_uniform": u}


def cfg(variant, norm="layernorm", **train_kw):
    t = {"learning_rate": 3e-3, "warmup_iters": 100, "grad_clip": 1.0, **train_kw}
    return {"model": {"variant": variant, "norm": norm, "n_layer": 8, "block_size": 64, "dropout": 0.0}, "train": t}


# one record set per rule whose remedy is about the wiring
TRIGGERS = {
    "vanishing_gradients": [grad(s, [1e-5, 1e-3, 1.0]) for s in (150, 200, 250)],
    "exploding": evals([4.1, 3.0, "nan"]),
    "rank_collapse": [probe(0, [0.9, 0.9]), probe(500, [0.6, 0.001])],
    "bigram_stuck": evals([4.17, 3.0, 2.6, 2.5]),
}


@pytest.mark.parametrize("rule", list(TRIGGERS))
@pytest.mark.parametrize("variant,norm", [("prenorm", "layernorm"), ("postnorm", "layernorm"),
                                          ("deepnorm", "rmsnorm"), ("rezero", "layernorm"),
                                          ("plain", "layernorm"), ("plain", "none"), ("prenorm", "none")])
def test_remedies_never_recommend_what_the_run_has(rule, variant, norm):
    f = {x.rule: x for x in diagnose_records(TRIGGERS[rule], BASE, cfg(variant, norm))}[rule]
    r = f.remedy
    has_shortcut = variant != "plain"
    has_norm = norm != "none" or variant == "rezero"
    assert ("add residual" in r) == (not has_shortcut), r
    assert ("normalise" in r) == (not has_norm), r
    for recommended in (f"use {variant}", f"(model.variant {variant}", f"use a residual variant ({variant})",
                        f"model.norm {norm})", f"variant {variant} or"):
        assert recommended not in r, (recommended, r)
    if variant == "postnorm":  # it has both, but the norm on the shortcut is the known weakness at depth
        assert "already has residual connections and normalisation" in r and "model.variant prenorm" in r


def test_remedies_without_config_are_conditional():
    f = diagnose_records(TRIGGERS["vanishing_gradients"])[0]
    assert "if the model has no residual connections" in f.remedy


def test_uniform_attention_remedy_follows_the_learning_rate():
    late = probe(500, [0.9, 0.9], ent=[[3.8, 3.9]] * 2)
    high = [grad(s, [1.0, 1.0], [1e-2, 2e-2]) for s in (150, 200, 250)]  # high, under lr_too_high's 3e-2
    f = {x.rule: x for x in diagnose_records(high + [late], config=cfg("prenorm", learning_rate=0.05))}
    r = f["uniform_attention"].remedy
    assert "lower train.learning_rate (now 0.05)" in r and "higher" not in r and "raise train.learning" not in r
    r = {x.rule: x for x in diagnose_records(evals([4.1, 3.0, "nan"]) + [late])}["uniform_attention"].remedy
    assert "lower train.learning_rate" in r  # a run that exploded: its LR is the suspect
    low = [grad(s, [1.0, 1.0], [1e-4, 2e-4]) for s in (150, 200, 250)]
    r = {x.rule: x for x in diagnose_records(low + [late], config=cfg("prenorm"))}["uniform_attention"].remedy
    assert "raise train.learning_rate" in r
    r = {x.rule: x for x in diagnose_records([late], config=cfg("prenorm"))}["uniform_attention"].remedy
    assert "learning_rate" not in r and "train longer (500 steps so far)" in r  # no evidence either way
    assert "prenorm learns" not in r


def test_bigram_wording_says_where_the_loss_is():
    f = diagnose_records(evals([4.17, 2.6, 2.441]), BASE, cfg("prenorm"))[0]
    assert f.rule == "bigram_stuck"
    assert "within 0.05 of the bigram baseline 2.482" in f.evidence and "0.041 below it" in f.evidence
    assert "not below" not in f.evidence
    f = diagnose_records(evals([4.17, 3.4, 3.351]), BASE, cfg("plain"))[0]
    assert "unigram level 3.347" in f.evidence and "no context at all, not even the previous character" in f.evidence
    f = diagnose_records(evals([4.17, 4.17, 4.16]), BASE, cfg("plain"))[0]
    assert "uniform level ln V = 4.174" in f.evidence and "not even learned the character frequencies" in f.evidence
    f = diagnose_records(evals([4.17, 2.8, 2.6]), BASE, cfg("plain"))[0]
    assert "0.118 above the bigram baseline 2.482" in f.evidence
    assert D.loss_level(2.3, BASE, 0.05)[0] == "below bigram"


def test_block_size_one_flagged_from_config_at_once():
    one = {"model": {"block_size": 1, "variant": "prenorm"}, "train": {}}
    for recs in ([], evals([4.17]), evals([4.17, 3.0], every=10)):  # no steps, no baselines needed
        f = diagnose_records(recs, None, one)
        assert [x.rule for x in f] == ["bigram_stuck"] and "model.block_size is 1" in f[0].evidence
        assert "raise model.block_size" in f[0].remedy
    assert diagnose_records(evals([4.17, 3.0], every=10), BASE, cfg("prenorm")) == []  # too early otherwise


def test_skipped_steps_counted_over_the_run():
    skips = [{"kind": "event", "step": s, "nonfinite_skip": True, "nonfinite_skips": i + 1}
             for i, s in enumerate(range(4, 4 + 97))]
    f = diagnose_records(skips)[0]
    assert f.rule == "exploding" and "97 optimizer step(s) skipped" in f.evidence
    assert "first at step 4, last at step 100" in f.evidence and "1 skip" not in f.evidence
    f = diagnose_records(skips[:1], summary={"nonfinite_skips": 97})[0]  # summary.json has the total
    assert "97 optimizer step(s) skipped" in f.evidence


def test_diverged_run_is_not_overfitting():
    recs = evals([4.1, 2.3, 2.2, 60.0, 5e7], trains=[4.1, 2.2, 2.1, 50.0, 3.6e7])
    f = diagnose_records(recs, BASE, cfg("prenorm", grad_clip=0.0))
    assert [x.rule for x in f] == ["exploding"]
    assert "3.6e+07" in f[0].evidence and "clip gradients at train.grad_clip 1.0 (now 0)" in f[0].remedy
    f = diagnose_records(recs, BASE, cfg("prenorm"))
    assert "grad_clip" not in f[0].remedy  # clipping at 1.0 is already on


def test_divergence_is_not_also_overfitting_or_a_plateau():
    """The gap grows and val is flat, but a NaN loss says the run diverged: only ``exploding``
    (here the train loss stays below ln V, so only the divergence itself rules overfitting out)."""
    gap = evals([3.0, 2.0, 1.9, 1.95, 2.05], trains=[3.0, 1.95, 1.7, 1.6, 1.5])
    assert [x.rule for x in diagnose_records(gap, BASE)] == ["overfitting"]
    f = diagnose_records(gap + [{"step": 450, "loss": "nan"}], BASE)
    assert [(x.rule, x.evidence) for x in f] == [("exploding", "loss is nan at step 450")]
    flat = evals([3.0, 2.0, 1.5, 1.52, 1.51, 1.5, 1.53, 1.5001])
    assert [x.rule for x in diagnose_records(flat)] == ["plateau"]
    assert [x.rule for x in diagnose_records(flat + [{"step": 750, "loss": "inf"}])] == ["exploding"]


def test_exploding_remedy_reads_the_config():
    f = diagnose_records(evals([4.1, 3.0, "nan"]), config=cfg("prenorm", learning_rate=0.03, warmup_iters=10))[0]
    assert "lower train.learning_rate (now 0.03), e.g. to 0.01" in f.remedy
    assert "raise train.warmup_iters (now 10)" in f.remedy and "prenorm" not in f.remedy


def test_overfitting_remedy_reads_the_config():
    recs = evals([3.0, 2.0, 1.9, 1.95, 2.05], trains=[3.0, 1.95, 1.7, 1.6, 1.5])
    c = cfg("prenorm", patience=3, weight_decay=0.1)
    c["model"]["dropout"] = 0.2
    r = {x.rule: x for x in diagnose_records(recs, config=c)}["overfitting"].remedy
    assert "train.patience is 3" in r and "raise model.dropout (now 0.2)" in r and "add model.dropout" not in r
    assert "raise train.weight_decay (now 0.1)" in r


def test_real_block_size_one_run(tmp_path, tiny_text_file):
    rd = train(tiny_config(tmp_path / "run", tiny_text_file, model={"block_size": 1},
                           train={"max_iters": 4, "eval_interval": 2}), **QUIET)
    assert [f.rule for f in diagnose_run(rd)] == ["bigram_stuck"]
    assert json.loads((rd / "diagnosis.json").read_text())["findings"][0]["rule"] == "bigram_stuck"


def test_no_higher_learning_rate_when_gradients_vanish():
    """Measured on the quick profile's plain 16-block run: tiny updates because nothing reaches the
    early blocks; 'raise train.learning_rate' in the bigram/uniform-attention remedies was bad advice."""
    recs = ([grad(s, [1e-9, 1e-4, 1.0], [1e-7, 1e-6, 1e-5]) for s in (150, 200, 250)]
            + evals([4.17, 3.4, 3.351]) + [probe(300, [0.6, 0.001], ent=[[3.8, 3.9]] * 2)])
    f = {x.rule: x for x in diagnose_records(recs, BASE, cfg("plain"))}
    assert set(f) == {"bigram_stuck", "vanishing_gradients", "rank_collapse", "uniform_attention"}
    for x in f.values():
        assert "raise train.learning_rate" not in x.remedy and "higher" not in x.remedy, x
