"""Diagnosis rules on synthetic metrics, the diagnose command's output, and findings that are true
of the run they are about (issue 14, kind 2).

Remedies read the run's config and never recommend what it already has; the bigram wording says
where the loss is (uniform / unigram / within the margin of bigram); a model that cannot see
context is flagged from its config at once; skipped steps are counted over the whole run; a
diverged run is not also called overfitting."""

import json

import pytest

from depthlab import train
from depthlab.analytics import diagnose as D
from depthlab.analytics.diagnose import RULES, Thresholds, diagnose_records, diagnose_run, write_diagnosis
from depthlab.cli import main
from depthlab.errors import DepthlabError

from conftest import QUIET, context_record, tiny_config
from conftest import SHAKESPEARE_BASELINES as BASE
from conftest import eval_records as evals
from conftest import grad_record as grad
from conftest import probe_record as probe


def rules(records, **kw):
    return [f.rule for f in diagnose_records(records, **kw)]


def test_bigram_stuck_needs_steps_and_tokens():
    stuck = evals([4.17, 3.2, 2.9, 2.77, 2.72], tokens_per_step=32)
    f = diagnose_records(stuck, BASE, {"model": {"block_size": 1}})
    assert [x.rule for x in f] == ["bigram_stuck"]
    assert "2.720" in f[0].evidence and "2.482" in f[0].evidence and "400 steps" in f[0].evidence
    assert "block_size" in f[0].remedy
    assert rules(evals([4.17, 2.9]), baselines=BASE) == []  # 100 steps: too early to judge
    assert rules(evals([4.17, 3.0, 2.7], tokens_per_step=1), baselines=BASE) == []  # 200 tokens < 2 V^2
    assert rules(evals([4.17, 2.6, 2.40]), baselines=BASE) == []  # below bigram - margin
    assert rules(evals([4.17, 2.6, 2.45]), baselines=BASE) == ["bigram_stuck"]  # within the margin
    assert rules(stuck) == []  # no baselines, no judgement


def test_vanishing_gradients():
    recs = [grad(s, [1e-5, 1e-3, 1.0]) for s in (50, 100, 150)]
    f = diagnose_records(recs)
    assert [x.rule for x in f] == ["vanishing_gradients"]
    assert "1.00e-05" in f[0].evidence and "50-150" in f[0].evidence
    assert rules([grad(s, [0.5, 1.0]) for s in (50, 100)]) == []
    assert rules([grad(50, [1.0])]) == []  # one block: no ratio


def test_exploding():
    assert rules(evals([4.1, 3.0, "nan"])) == ["exploding"]
    assert rules([{"step": 7, "nonfinite_skip": True, "nonfinite_skips": 1}]) == ["exploding"]
    f = diagnose_records(evals([4.1, 2.5, 2.4, 3.5]))
    assert [x.rule for x in f] == ["exploding"] and "2.400" in f[0].evidence and "3.500" in f[0].evidence
    assert rules(evals([4.1, 2.5, 2.4, 2.45])) == []


def test_rank_collapse_uses_last_probe():
    f = diagnose_records([probe(0, [0.9, 0.9, 0.9]), probe(500, [0.6, 0.04, 0.001])])
    assert [x.rule for x in f] == ["rank_collapse"]
    assert "block 1" in f[0].evidence and "1.00e-03" in f[0].evidence
    assert rules([probe(0, [0.6, 0.001]), probe(500, [0.9, 0.8])]) == []
    assert rules([probe(500, [None, None])]) == []  # block_size 1: undefined, not collapsed


def test_uniform_attention():
    assert rules([probe(500, [0.9], ent=[[3.8, 3.9]])]) == ["uniform_attention"]
    assert rules([probe(0, [0.9], ent=[[3.8, 3.9]])]) == []  # at init attention is uniform anyway
    assert rules([probe(500, [0.9], ent=[[2.0, 3.9]])]) == []
    assert rules([probe(500, [0.9], ent=[[0.0]], u=0.0)]) == []  # T = 1


def test_learning_rate_rules():
    cfg = {"train": {"warmup_iters": 100, "learning_rate": 0.05}}
    hi = [grad(s, [1.0, 1.0], [0.08, 0.1]) for s in (50, 150, 200, 250)]
    f = diagnose_records(hi, config=cfg)
    assert [x.rule for x in f] == ["lr_too_high"] and "0.05" in f[0].evidence
    lo = [grad(s, [1.0, 1.0], [2e-5, 3e-5]) for s in (150, 200, 250)]
    assert rules(lo, config=cfg) == ["lr_too_low"]
    assert rules([grad(s, [1.0, 1.0], [2e-3, 4e-3]) for s in (150, 200, 250)], config=cfg) == []
    assert rules(lo[:2], config=cfg) == []  # too few records


def test_vanishing_gradients_explain_tiny_updates():
    recs = [grad(s, [1e-9, 1e-4, 1.0], [1e-7, 1e-6, 1e-5]) for s in (150, 200, 250)]
    f = diagnose_records(recs, config={"train": {"warmup_iters": 100}})
    assert [x.rule for x in f] == ["vanishing_gradients"]  # not lr_too_low: raising the LR would not help
    assert "update/weight ratio 1.00e-06" in f[0].evidence


def test_overfitting_and_plateau():
    f = diagnose_records(evals([3.0, 2.0, 1.9, 1.95, 2.05], trains=[3.0, 1.95, 1.7, 1.6, 1.5]))
    assert "overfitting" in [x.rule for x in f]
    assert rules(evals([3.0, 2.0, 1.9, 1.85], trains=[3.0, 1.97, 1.86, 1.80])) == []
    # the gap grows (0 -> 0.165) but val is still falling: the usual train/val shift, not overfitting
    assert rules(evals([4.2, 2.12, 1.835], trains=[4.2, 2.04, 1.67])) == []
    pl = evals([3.0, 2.0, 1.5, 1.52, 1.51, 1.5, 1.53, 1.5001], trains=[3.0, 2.0, 1.5, 1.52, 1.51, 1.5, 1.53, 1.5001])
    f = diagnose_records(pl)
    assert [x.rule for x in f] == ["plateau"] and "1.5000" in f[0].evidence
    assert rules(pl, thresholds=Thresholds(plateau_evals=8)) == []


def test_a_slowly_widening_gap_with_val_above_its_best_is_overfitting_not_a_plateau_to_grow_out_of():
    """A new user's 6,000-character corpus, 2 x 64, 400 steps: val fell to 2.258 at step 200 and rose to 2.321 while
    train fell to 0.964; the gap grew 0.047 over the last 3 evaluations (under 0.05), so overfitting was silent and
    the only finding was a plateau whose remedy said "grow the model (model.n_layer, model.n_embd)"."""
    vals = [4.2, 3.0, 2.6, 2.4, 2.3, 2.27, 2.262, 2.26, 2.258, 2.262, 2.27, 2.275, 2.282, 2.29, 2.31, 2.315, 2.321]
    trains = [4.2, 2.9, 2.4, 2.1, 1.9, 1.75, 1.6, 1.5, 1.42, 1.35, 1.28, 1.21, 1.15, 1.09, 0.99, 0.975, 0.964]
    f = diagnose_records(evals(vals, trains=trains, every=25), BASE, cfg("prenorm"))
    assert [x.rule for x in f] == ["overfitting"], [(x.rule, x.evidence) for x in f]
    assert f[0].evidence == ("val rose from its best 2.258 (step 200) to 2.321 nats (step 400) while train fell from "
                             "1.420 to 0.964: the val - train gap is 1.357 nats")
    assert "model.n_layer" not in f[0].remedy and "smaller model" in f[0].remedy
    # val up by less than overfit_growth above its best: a plateau, as before
    flat = [*vals[:9], 2.262, 2.27, 2.265, 2.27, 2.268, 2.27, 2.27, 2.27]
    assert [x.rule for x in diagnose_records(evals(flat, trains=trains, every=25), BASE, cfg("prenorm"))] == ["plateau"]


def test_diagnose_run_and_cli(tmp_path, capsys):
    with pytest.raises(DepthlabError, match="not found"):
        diagnose_run(tmp_path / "missing")
    with pytest.raises(DepthlabError, match="not a depthlab run"):
        diagnose_run(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model": {"block_size": 1}, "train": {}}))
    (tmp_path / "baselines.json").write_text(json.dumps(BASE))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals([4.1, 3.0, 2.8])) + '{"torn')
    assert main(["diagnose", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [f["rule"] for f in out["findings"]] == ["bigram_stuck"]
    assert set(out["findings"][0]) == {"rule", "evidence", "remedy"}
    assert main(["diagnose", str(tmp_path)]) == 0
    assert "[bigram_stuck]" in capsys.readouterr().out
    assert main(["diagnose", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.startswith("depthlab: error: run directory")
    write_diagnosis(tmp_path, diagnose_run(tmp_path))
    assert json.loads((tmp_path / "diagnosis.json").read_text())["findings"][0]["rule"] in RULES


def test_rules_without_data_are_named_not_passed():
    from depthlab.analytics.diagnose import format_findings, rules_without_data

    cfg = {"train": {"grad_log_interval": 50, "probe_interval": 0, "warmup_iters": 5}, "model": {"vocab_size": 65}}
    recs = evals([2.5, 2.4, 2.3]) + [{"kind": "grad", "step": 50, "update_ratio_block": [1.0, 1.0]}]
    missing = rules_without_data(recs, cfg)
    assert missing[0].startswith(
        "lr_too_high, lr_too_low (they need 3 gradient records after the warmup, the run has 1;")
    assert missing[1].startswith("rank_collapse, uniform_attention (no activation probe")
    text = format_findings([], missing)
    assert text.startswith("diagnosis: no problems found by the rules that could judge this run")
    assert "not judged" in text
    # per-block gradient norms too: without them vanishing_gradients is not judged (s56)
    full = evals([2.5, 2.4, 2.3, 2.2, 2.1, 2.0]) + [{"kind": "grad", "step": 50, "update_ratio_block": [1.0, 1.0],
                                                    "grad_norm_block": [1.0, 1.0]}] \
        + [{"kind": "grad", "step": s, "update_ratio_block": [1e-3], "grad_norm_block": [1.0, 1.0]}
           for s in (100, 150, 200)] \
        + [{"kind": "probe", "step": 200}] \
        + [context_record(200, [2.5, 2.0])]
    assert rules_without_data(full, cfg, baselines=BASE) == []
    # without baselines bigram_stuck cannot judge: it says so (it used to be silently counted as "no problem")
    assert rules_without_data(full, cfg) == [
        "bigram_stuck, unigram_stuck, context_unused, causal_leak (no corpus baselines: baselines.json is missing and "
        "the run's corpus could not be read (or changed since training) to recompute it)"]
    assert format_findings([], []).startswith("diagnosis: no problems found (rules: ")
    assert "vanishing_gradients" in rules_without_data(evals([2.5]), cfg)[0]


def test_the_lr_rules_of_a_model_without_blocks_name_what_is_missing_not_the_interval():
    """A new user's pass: a model.source run with 30 grad records (grad_log_interval 10) was told "they need 3
    gradient records after the warmup, the run has 0; lower train.grad_log_interval": its model has no numbered
    blocks, so every record's update_ratio_block is [] and no interval would change that."""
    from depthlab.analytics.diagnose import rules_without_data

    cfg = {"train": {"grad_log_interval": 10, "probe_interval": 0, "warmup_iters": 50},
           "model": {"vocab_size": 65, "source": "m.py:Good"}}
    recs = evals([2.5, 2.4, 2.3]) + [{"kind": "grad", "step": s, "update_ratio_block": [],
                                      "update_ratio_component": {"tok": 1e-3}} for s in range(10, 310, 10)]
    lr = [m for m in rules_without_data(recs, cfg) if m.startswith("lr_too_high")]
    assert lr == ["lr_too_high, lr_too_low (they need the update/weight ratios of the model's blocks, and none of the "
                  "run's 30 gradient records holds one: no parameter of model.source m.py:Good sits in a "
                  "numbered list of blocks (such as blocks.0.attn.weight); keep the blocks in an nn.ModuleList to "
                  "have them measured)"]
    # one record after the warmup, none with a block: still the blocks, not the interval (a new user's pass of
    # 2026-12-06: 6 records, 2 after the warmup, were told "lower train.grad_log_interval or train longer")
    few = recs[:3] + [r for r in recs[3:] if r["step"] <= 60]
    assert [m for m in rules_without_data(few, cfg) if m.startswith("lr_too_high")][0].startswith(
        "lr_too_high, lr_too_low (they need the update/weight ratios of the model's blocks, and none of the run's 6 "
        "gradient records holds one")
    some = few + [{"kind": "grad", "step": 70, "update_ratio_block": [1e-3]}]  # a block somewhere: the count it is
    assert [m for m in rules_without_data(some, cfg) if m.startswith("lr_too_high")][0].startswith(
        "lr_too_high, lr_too_low (they need 3 gradient records after the warmup, the run has 1; lower "
        "train.grad_log_interval")


def test_the_lr_rules_count_from_the_warmup_a_fit_to_time_plan_shortened():
    """helper-19: a fit_to_time run asked warmup_iters 4000, planned 230 (resolved.plan); with 23 gradient records after
    step 230, diagnose said "they need 3 gradient records after the warmup, the run has 0" (it read the 4000)."""
    from depthlab.analytics.diagnose import rules_without_data
    from depthlab.analytics.rules.evidence import Evidence

    plan = {"max_iters": 1150, "lr_decay_iters": 1150, "warmup_iters": 230, "max_iters_asked": 5000,
            "lr_decay_iters_asked": 0, "warmup_iters_asked": 4000, "s_per_step": 0.02, "s_per_eval": 0.5,
            "at_step": 20}
    cfg = {"train": {"grad_log_interval": 50, "probe_interval": 0, "warmup_iters": 4000, "learning_rate": 1.0},
           "model": {"vocab_size": 65}, "resolved": {"plan": plan}}
    recs = evals([2.5, 2.4, 2.3]) + [{"kind": "grad", "step": s, "update_ratio_block": [0.5, 0.5]}
                                     for s in range(50, 1200, 50)]
    assert not any(m.startswith("lr_too_high") for m in rules_without_data(recs, cfg)), rules_without_data(recs, cfg)
    ev = Evidence(recs, cfg, BASE)
    assert ev.warmup_iters == 230 and ev.update_ratios[1][0] == 250
    high = [f for f in diagnose_records(recs, BASE, cfg) if f.rule == "lr_too_high"]
    assert high and "raise train.warmup_iters (now 4000; train.fit_to_time shortened it to 230" in high[0].remedy
    del cfg["resolved"]  # no plan: the warmup asked for
    assert Evidence(recs, cfg, BASE).warmup_iters == 4000


def test_a_resume_that_left_its_plan_counts_from_where_the_logged_rate_peaked():
    """A fit_to_time run planned a warmup of 230 (asked 4000), then a session resumed with a new train.max_iters
    followed no plan and config.json lost ``resolved.plan``: the records said "the run has 0 after the warmup"
    (read as 4000). The logged learning rate peaks at step 250, the first record after the planned warmup."""
    from depthlab.analytics.diagnose import rules_without_data
    from depthlab.analytics.rules.evidence import Evidence

    cfg = {"train": {"grad_log_interval": 50, "probe_interval": 0, "warmup_iters": 4000, "learning_rate": 1.0},
           "model": {"vocab_size": 65}}
    lr = [min(1.0, (s + 1) / 231) if s < 230 else 1.0 - (s - 230) / 2000 for s in range(50, 1200, 50)]
    recs = evals([2.5, 2.4, 2.3]) + [{"kind": "grad", "step": s, "update_ratio_block": [0.5, 0.5]}
                                     for s in range(50, 1200, 50)]
    recs += [{"kind": "train", "step": s, "loss": 2.0, "lr": r} for s, r in zip(range(50, 1200, 50), lr)]
    ev = Evidence(recs, cfg, BASE)
    assert ev.warmup_iters == 250 and ev.update_ratios[1][0] == 300 and ev.now("train.warmup_iters") == " (now 4000)"
    assert not any(m.startswith("lr_too_high") for m in rules_without_data(recs, cfg))
    rising = [r for r in recs if r["step"] <= 200]  # a run stopped while warming up: no record after its warmup
    assert Evidence(rising, cfg, BASE).warmup_iters == 200 and not Evidence(rising, cfg, BASE).update_ratios[0]
    cfg["train"]["warmup_iters"] = 100  # a warmup asked shorter than the peak record: the one asked
    assert Evidence(recs, cfg, BASE).warmup_iters == 100


def test_rules_that_need_evaluations_say_so_on_a_short_run():
    from depthlab.analytics.diagnose import rules_without_data

    cfg = {"train": {"grad_log_interval": 1, "probe_interval": 1}, "model": {"vocab_size": 65, "block_size": 64}}
    short = evals([4.2, 2.6, 2.5], every=20) + [{"kind": "probe", "step": 40}]  # 40 steps, 3 evaluations
    missing = "; ".join(rules_without_data(short, cfg))
    assert "bigram_stuck, unigram_stuck (they need an evaluation at step 200 or later" in missing
    assert "the run is 40 steps" in missing
    assert "plateau (3 of the 6 evaluations it needs)" in missing
    assert "overfitting" not in missing  # 3 evaluations with both losses: enough for its window
    assert "overfitting (2 of the 3" in "; ".join(rules_without_data(evals([4.2, 2.6], every=20), cfg))


def test_val_loss_above_the_uniform_baseline_is_exploding():
    cfg = {"model": {"vocab_size": 65}, "train": {"learning_rate": 1.0}}
    found = diagnose_records(evals([4.2, 13.09, 3.3], trains=[4.2, 13.0, 3.29]), config=cfg)
    ex = [f for f in found if f.rule == "exploding"]
    assert ex and "val loss 13.090 at step 100 is above the uniform baseline ln V = 4.174" in ex[0].evidence
    assert not [f for f in diagnose_records(evals([4.2, 3.0, 2.5]), config=cfg) if f.rule == "exploding"]


def test_a_start_above_ln_v_that_only_falls_is_not_exploding():
    # a user's model starting 0.55 nats above ln V 4.174 (less than init_excess) whose loss only fell: not a blow-up
    cfg = {"model": {"vocab_size": 65}, "train": {"learning_rate": 3e-3}}
    assert [f.rule for f in diagnose_records(evals([4.7231, 4.7216], every=5), config=cfg)] == []
    # the same start rising by more than exploding_growth is one
    found = diagnose_records(evals([4.7231, 5.3], every=5), config=cfg)
    assert [f.rule for f in found] == ["exploding"] and "val loss 5.300 at step 5" in found[0].evidence


def test_a_run_of_the_previous_release_diagnoses_as_json(old_run, capsys):
    assert main(["diagnose", str(old_run), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert isinstance(d["findings"], list)
    for f in d["findings"]:
        assert {"rule", "evidence", "remedy"} <= set(f)


# ------------------------------------------------------------------------- findings and remedies are true of the run
def cfg(variant, norm="layernorm", **train_kw):
    t = {"learning_rate": 3e-3, "warmup_iters": 100, "grad_clip": 1.0, **train_kw}
    return {"model": {"variant": variant, "norm": norm, "n_layer": 8, "block_size": 64, "dropout": 0.0}, "train": t}


# one record set per rule whose remedy is about the wiring (bigram_stuck's is not: a loss at the bigram
# line points at attention, not at the residual path; unigram_stuck's is)
TRIGGERS = {
    "vanishing_gradients": [grad(s, [1e-5, 1e-3, 1.0]) for s in (150, 200, 250)],
    "exploding": evals([4.1, 3.0, "nan"]),
    "rank_collapse": [probe(0, [0.9, 0.9]), probe(500, [0.6, 0.001])],
    "unigram_stuck": evals([4.17, 3.6, 3.4, 3.35]),
}


@pytest.mark.parametrize("rule", list(TRIGGERS))
@pytest.mark.parametrize("variant,norm", [("prenorm", "layernorm"), ("postnorm", "layernorm"),
                                          ("deepnorm", "rmsnorm"), ("rezero", "layernorm"),
                                          ("plain", "layernorm"), ("plain", "none"), ("prenorm", "none"),
                                          ("periln", "layernorm"), ("prenorm", "dyt")])
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
    if rule == "rank_collapse" and has_shortcut:  # the remedy starts from what the run has
        assert r.startswith(f"model.variant {variant}") and "already has residual connections" in r, r


def test_remedies_without_config_are_conditional():
    f = diagnose_records(TRIGGERS["vanishing_gradients"])[0]
    assert "if the model has no residual connections" in f.remedy


def test_uniform_attention_remedy_follows_the_learning_rate():
    late = probe(500, [0.9, 0.9], ent=[[3.8, 3.9]] * 2)
    high = [grad(s, [1.0, 1.0], [4e-2, 5e-2]) for s in (150, 200, 250)]  # over lr_too_high's 3e-2
    f = {x.rule: x for x in diagnose_records(high + [late], config=cfg("prenorm", learning_rate=0.05))}
    r = f["uniform_attention"].remedy
    assert "lower train.learning_rate (now 0.05)" in r and "higher" not in r and "raise train.learning" not in r
    # 1e-2 is the default AdamW recipe's healthy level (measured 6e-3 to 1e-2): no reason to lower the rate
    healthy = [grad(s, [1.0, 1.0], [1e-2, 2e-2]) for s in (150, 200, 250)]
    r = {x.rule: x for x in diagnose_records(healthy + [late], config=cfg("prenorm"))}["uniform_attention"].remedy
    assert "learning_rate" not in r, r
    r = {x.rule: x for x in diagnose_records(evals([4.1, 3.0, "nan"]) + [late])}["uniform_attention"].remedy
    assert "lower train.learning_rate" in r  # a run that exploded: its LR is the suspect
    low = [grad(s, [1.0, 1.0], [1e-4, 2e-4]) for s in (150, 200, 250)]
    r = {x.rule: x for x in diagnose_records(low + [late], config=cfg("prenorm"))}["uniform_attention"].remedy
    assert "raise train.learning_rate" in r
    r = {x.rule: x for x in diagnose_records([late], config=cfg("prenorm"))}["uniform_attention"].remedy
    # no evidence either way
    assert "learning_rate" not in r
    assert "train longer (train.max_iters, or train.max_time where it set the end; 500 steps so far)" in r
    assert "prenorm learns" not in r


def test_bigram_wording_says_where_the_loss_is():
    f = diagnose_records(evals([4.17, 2.6, 2.441]), BASE, cfg("prenorm"))[0]
    assert f.rule == "bigram_stuck"
    assert "within 0.05 of the bigram baseline 2.482" in f.evidence and "0.041 below it" in f.evidence
    assert "not below" not in f.evidence
    f = diagnose_records(evals([4.17, 3.4, 3.351]), BASE, cfg("plain"))[0]
    assert f.rule == "unigram_stuck"
    assert "unigram level 3.347" in f.evidence and "no context at all, not even the current character" in f.evidence
    f = diagnose_records(evals([4.17, 4.17, 4.16]), BASE, cfg("plain"))[0]
    assert f.rule == "unigram_stuck"
    assert "uniform level ln V = 4.174" in f.evidence and "not even learned the character frequencies" in f.evidence
    f = diagnose_records(evals([4.17, 2.8, 2.6]), BASE, cfg("plain"))[0]
    assert f.rule == "bigram_stuck" and "0.118 above the bigram baseline 2.482" in f.evidence
    assert D.loss_level(2.3, BASE, 0.05)[0] == "below bigram"


def test_loss_level_sentence_true_at_every_branch_boundary():
    from depthlab.analytics.rules import stuck_name
    # uniform 4.174, unigram 3.347, bigram 2.482, margin 0.05: each level's sentence states what the numbers show
    lvl = lambda best: D.loss_level(best, BASE, 0.05)  # noqa: E731
    assert lvl(4.225)[0] == "above uniform" and "0.051 above the uniform level ln V = 4.174" in lvl(4.225)[1]
    assert lvl(4.224)[0] == "at uniform" and "(within 0.05)" in lvl(4.224)[1]
    assert lvl(4.125)[0] == "at uniform"
    b = lvl(4.016)  # the tester's Probs run: 0.67 above unigram, not "at the unigram level (within 0.05)"
    assert b[0] == "between unigram and uniform" and "within" not in b[1]
    assert "between the unigram level 3.347 (0.669 above it) and uniform guessing ln V = 4.174" in b[1]
    assert lvl(4.123)[0] == "between unigram and uniform" and lvl(3.398)[0] == "between unigram and uniform"
    assert lvl(3.396)[0] == "at unigram" and "(within 0.05)" in lvl(3.396)[1]
    assert lvl(3.298)[0] == "at unigram" and lvl(3.296)[0] == "above bigram"
    assert all(stuck_name(lvl(x)[0]) == "unigram_stuck" for x in (4.3, 4.2, 4.016, 3.3))
    f = diagnose_records(evals([4.17, 4.1, 4.016]), BASE, cfg("plain"))[0]
    assert f.rule == "unigram_stuck" and "between the unigram level 3.347" in f.evidence
    assert "within 0.05" not in f.evidence


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
    assert f.rule == "exploding" and "97 optimizer steps skipped" in f.evidence
    assert "first at step 4, last at step 100" in f.evidence and "1 skip" not in f.evidence
    f = diagnose_records(skips[:1], summary={"nonfinite_skips": 97})[0]  # summary.json has the total
    assert "97 optimizer steps skipped" in f.evidence


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
    assert set(f) == {"unigram_stuck", "vanishing_gradients", "rank_collapse", "uniform_attention"}
    for x in f.values():
        assert "raise train.learning_rate" not in x.remedy and "higher" not in x.remedy, x


def test_a_run_whose_records_end_early_is_measured_by_its_summary_and_one_step_is_singular():
    from depthlab.analytics.diagnose import diagnose
    from depthlab.analytics.rules import Evidence

    cfg = {"train": {"grad_log_interval": 50, "probe_interval": 250}, "model": {"vocab_size": 65, "block_size": 64}}
    # metrics.jsonl of random bytes reads as no records; summary.json still says 100 steps were trained
    damaged = "; ".join(diagnose(Evidence((), cfg, BASE, {"final_step": 100})).without_data())
    assert "the run is 100 steps (summary.json), metrics.jsonl holds no readable record" in damaged
    assert "the run is 0 steps" not in damaged and "end at step 0" not in damaged  # what it said before
    assert "(metrics.jsonl holds no readable record; `depthlab context RUN` measures it" in damaged
    cut = "; ".join(diagnose(Evidence(evals([4.3, 4.2], every=1), cfg, BASE, {"final_step": 100})).without_data())
    assert "the run is 100 steps (summary.json), its readable records end at step 1" in cut
    one = "; ".join(diagnose(Evidence(evals([4.3, 4.2], every=1), cfg, BASE)).without_data())
    assert "the run is 1 step" in one and "1 steps" not in one


def test_unigram_stuck_of_a_source_model_names_softmax_output_and_init_loss():
    """A new user's pass: base.py:Probs (forward ends in softmax) sat at 4.0 nats and diagnose named only the
    shortcut and gradient_flow/overfit_batch; check's init_loss names a forward that returns probabilities."""
    f = diagnose_records(evals([4.17, 4.1, 4.016]), BASE, {"model": {"source": "base.py:Probs"}, "train": {}})[0]
    assert f.rule == "unigram_stuck"
    assert "the forward ends in softmax (probabilities, not logits: cross-entropy applies log-softmax" in f.remedy
    # two causes offered as alternatives: a softmax output does depend on the input character
    assert "either the output does not depend on the input character" in f.remedy and "; or the forward" in f.remedy
    assert "depthlab check base.py:Probs tests the model for this (init_loss, gradient_flow, overfit_batch)" in f.remedy


def _init_hot(source=None):
    """A model whose step-0 loss is ~40 nats (ln V = 4.17), falling slowly under a tiny learning rate, with
    Muon update ratios that are truly small."""
    model = {"vocab_size": 65, "block_size": 32, "init": "gpt2", **({"source": source} if source else {})}
    cfg = {"model": model, "train": {"optimizer": "muon", "muon_lr": 1e-4, "learning_rate": 1e-5,
                                     "warmup_iters": 50, "max_iters": 240}}
    recs = evals([40.35, 40.02, 39.21, 38.50, 38.03, 37.77, 37.66], every=40)
    recs += [grad(s, [0.5, 1.0], [7.7e-5, 7.7e-5]) for s in range(60, 250, 10)]
    return recs, cfg


def test_a_first_loss_far_above_ln_v_is_the_init_not_the_learning_rate():
    """A new user's pass: `30 * logits` trained with a tiny lr was told "lower train.muon_lr … too high" (unigram),
    "val loss above the uniform baseline … lower the learning rate" (exploding) and "raise train.muon_lr"
    (lr_too_low) at once: a loss that starts at 40 nats and falls did not explode; the init did it."""
    recs, cfg = _init_hot()
    f = {x.rule: x for x in diagnose_records(recs, BASE, cfg)}
    assert "exploding" not in f
    init = f["init_loss"]
    assert init.evidence == ("val loss 40.350 at step 0 (before any update) is 36.176 nats above the uniform "
                             "baseline ln V = 4.174: the model starts out confidently wrong; from there it falls "
                             "(40.350 -> 37.660 at step 240), so the run did not diverge")
    assert init.remedy == ("not the learning rate: the logits at initialisation are far too large; fix the "
                           "initialisation (model.init (now gpt2); depthlab's GPT with model.init gpt2 starts near "
                           "ln V)")
    said = " ".join(x.remedy for x in f.values())
    assert "lower train.muon_lr" not in said and "lower the learning rate" not in said
    assert "raise train.muon_lr (now 0.0001): the update/weight ratios say it is too low" in f["unigram_stuck"].remedy
    recs, cfg = _init_hot("/m/mine.py:Hot")
    src = {x.rule: x for x in diagnose_records(recs, BASE, cfg)}
    assert ("depthlab check /m/mine.py:Hot measures the loss at initialisation (its init_loss rule), which should "
            "start near ln V") in src["init_loss"].remedy


def test_a_loss_that_rises_above_its_high_start_still_explodes():
    recs, cfg = _init_hot()
    recs = evals([40.35, 39.0, 45.0], every=40)
    f = {x.rule: x for x in diagnose_records(recs, BASE, cfg)}
    assert "init_loss" not in f
    assert f["exploding"].evidence.startswith("val loss 45.000 at step 80 is above the uniform baseline")


def test_stuck_remedies_name_the_runs_unit_on_a_bpe_run():
    """On a BPE run unigram_stuck's remedy said "loses even the current character" (bigram_stuck's "earlier
    characters"): a BPE run's unit is a token, as the rules' evidence already says."""
    bpe = {**cfg("plain"), "data": {"tokenizer": "bpe"}}
    f = diagnose_records(evals([4.17, 3.4, 3.351]), BASE, bpe)[0]
    assert f.rule == "unigram_stuck"
    assert "a stack that averages every position into one vector loses even the current token" in f.remedy
    assert "character" not in f.remedy
    src = {"model": {"source": "base.py:Probs"}, "train": {}, "data": {"tokenizer": "bpe"}}
    f = diagnose_records(evals([4.17, 4.1, 4.016]), BASE, src)[0]
    assert "either the output does not depend on the input token" in f.remedy and "character" not in f.remedy
    f = diagnose_records(evals([4.17, 2.6, 2.441]), BASE, {**cfg("prenorm"), "data": {"tokenizer": "bpe"}})[0]
    assert f.rule == "bigram_stuck" and "the tokens before the current one reach the prediction" in f.remedy
    assert "heads select earlier tokens" in f.remedy and "character" not in f.remedy
    f = diagnose_records(evals([4.17, 3.4, 3.351]), BASE, cfg("plain"))[0]
    assert "loses even the current character" in f.remedy
