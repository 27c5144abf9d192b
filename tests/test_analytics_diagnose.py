"""Diagnosis rules on synthetic metrics, and the diagnose command's errors and output."""

import json

import pytest

from depthlab.analytics.diagnose import RULES, Thresholds, diagnose_records, diagnose_run, write_diagnosis
from depthlab.cli import main
from depthlab.errors import DepthlabError

BASE = {"uniform": {"nats": 4.174, "bits_per_char": 6.02}, "unigram": {"nats": 3.347, "bits_per_char": 4.83},
        "bigram": {"nats": 2.482, "bits_per_char": 3.58}, "vocab_size": 65}


def evals(vals, trains=None, every=100, tokens_per_step=1024):
    trains = trains or vals
    return [{"step": i * every, "val_loss": v, "train_loss": t, "tokens_seen": i * every * tokens_per_step}
            for i, (v, t) in enumerate(zip(vals, trains))]


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


def grad(step, blocks, upd=None):
    return {"step": step, "kind": "grad", "grad_norm_block": blocks,
            "update_ratio_block": upd or [1e-3] * len(blocks)}


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


def probe(step, rank, ent=None, u=4.0, cos=None):
    return {"step": step, "kind": "probe", "rank_measure": rank, "token_cosine": cos or [0.1] * len(rank),
            "attn_entropy": ent or [[1.0, 1.0]] * len(rank), "attn_entropy_uniform": u}


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
    assert text.startswith("diagnosis: no problems found by the rules that had data") and "not judged" in text
    full = evals([2.5, 2.4, 2.3, 2.2, 2.1, 2.0]) + [{"kind": "grad", "step": 50, "update_ratio_block": [1.0, 1.0]}] \
        + [{"kind": "grad", "step": s, "update_ratio_block": [1e-3]} for s in (100, 150, 200)] \
        + [{"kind": "probe", "step": 200}]
    assert rules_without_data(full, cfg, baselines=BASE) == []
    # without baselines bigram_stuck cannot judge: it says so (it used to be silently counted as "no problem")
    assert rules_without_data(full, cfg) == [
        "bigram_stuck (no corpus baselines: baselines.json is missing and the run's corpus could not be read to "
        "recompute it)"]
    assert format_findings([], []).startswith("diagnosis: no problems found (rules: ")
    assert "vanishing_gradients" in rules_without_data(evals([2.5]), cfg)[0]


def test_rules_that_need_evaluations_say_so_on_a_short_run():
    from depthlab.analytics.diagnose import rules_without_data

    cfg = {"train": {"grad_log_interval": 1, "probe_interval": 1}, "model": {"vocab_size": 65, "block_size": 64}}
    short = evals([4.2, 2.6, 2.5], every=20) + [{"kind": "probe", "step": 40}]  # 40 steps, 3 evaluations
    missing = "; ".join(rules_without_data(short, cfg))
    assert "bigram_stuck (it needs an evaluation at step 200 or later" in missing and "the run is 40 steps" in missing
    assert "plateau (3 of the 6 evaluations it needs)" in missing
    assert "overfitting" not in missing  # 3 evaluations with both losses: enough for its window
    assert "overfitting (2 of the 3" in "; ".join(rules_without_data(evals([4.2, 2.6], every=20), cfg))


def test_val_loss_above_the_uniform_baseline_is_exploding():
    cfg = {"model": {"vocab_size": 65}, "train": {"learning_rate": 1.0}}
    found = diagnose_records(evals([4.2, 13.09, 3.3], trains=[4.2, 13.0, 3.29]), config=cfg)
    ex = [f for f in found if f.rule == "exploding"]
    assert ex and "val loss 13.090 at step 100 is above the uniform baseline ln V = 4.174" in ex[0].evidence
    assert not [f for f in diagnose_records(evals([4.2, 3.0, 2.5]), config=cfg) if f.rule == "exploding"]


# ---------------------------------------------------------------------------------- the one rule interface
def test_every_rule_has_the_one_interface():
    import inspect

    from depthlab.analytics.diagnose import RULE_SET, Evidence
    from depthlab.analytics.rules import Finding, Need, NotJudged, Rule

    assert RULES == ("bigram_stuck", "vanishing_gradients", "exploding", "rank_collapse", "uniform_attention",
                     "lr_too_high", "lr_too_low", "overfitting", "plateau")  # the stable contract
    assert {n for r in RULE_SET for n in r.names} == set(RULES)
    healthy = Evidence(evals([4.2, 3.0, 2.3, 2.2, 2.1, 2.0]) + [grad(s, [0.5, 1.0]) for s in (100, 150, 200)]
                       + [probe(500, [0.9, 0.8])], {"model": {"vocab_size": 65}}, BASE)
    for r in RULE_SET:
        assert isinstance(r, Rule) and set(r.names) <= set(RULES), r
        assert all(isinstance(n, Need) and n.source in {"eval", "grad", "probe", "baselines"} for n in r.needs), r
        assert list(inspect.signature(r.judge).parameters) == ["ev"], r  # one input: the evidence
        empty = r(Evidence())  # nothing recorded: a rule with needs says which, one without judges
        if r.needs:
            assert isinstance(empty, NotJudged) and empty.rules == r.names and empty.needs == r.needs, r
            assert str(empty).startswith(f"{', '.join(r.names)}: not judged: needs {r.needs[0].what}"), r
        else:
            assert empty is None, r
        assert r(healthy) is None or isinstance(r(healthy), Finding), r
        assert not isinstance(r(healthy), NotJudged), r  # this run meets every need


def test_a_rule_with_missing_needs_is_not_judged_and_named():
    from depthlab.analytics.diagnose import Evidence, diagnose
    from depthlab.analytics.rules import LR_RECORDS, PROBE, NotJudged, rule

    @rule("uniform_attention", needs=(PROBE, LR_RECORDS))
    def never_asked(ev):
        raise AssertionError("a rule whose needs are missing must not judge")

    ev = Evidence(evals([4.2, 3.0]), {"train": {"probe_interval": 0}})
    v = never_asked(ev)
    assert isinstance(v, NotJudged) and v.needs == (PROBE, LR_RECORDS)
    assert str(v) == ("uniform_attention: not judged: needs an activation probe, gradient records after the warmup "
                      "(no activation probe: train.probe_interval is 0)")
    d = diagnose(ev, [never_asked])
    assert d.findings == () and d.without_data() == [
        "uniform_attention (no activation probe: train.probe_interval is 0)"]
    lr = [grad(s, [1.0, 1.0]) for s in (50,)]  # one grad record: the lr rules' second need is the one missing
    v = diagnose(Evidence(lr)).without_data()
    assert v[0] == ("lr_too_high, lr_too_low (they need 3 gradient records after the warmup, the run has 1; lower "
                    "train.grad_log_interval or train longer)")


def test_a_rule_is_judged_or_not_judged_never_both():
    """The needs are written once: what stops a rule is what the not-judged line says (they used
    to be two checks that disagreed)."""
    from depthlab.analytics.diagnose import Evidence, diagnose

    # the only late evaluation is NaN: bigram_stuck judges it (best 3.000 is above bigram) and
    # is not also listed as lacking an evaluation
    d = diagnose(Evidence(evals([4.17, 3.0, "nan"]), {"model": {"vocab_size": 65}}, BASE))
    assert [f.rule for f in d.findings] == ["bigram_stuck", "exploding"]
    assert "0.518 above the bigram baseline 2.482" in d.findings[0].evidence
    assert not [w for w in d.without_data() if w.startswith("bigram_stuck")]
    # no config: the tokens bigram_stuck needs come from the baselines' V (the line said "0 tokens")
    d = diagnose(Evidence(evals([4.17, 3.0, 2.7], tokens_per_step=1), None, BASE))
    assert d.findings == () and d.without_data()[-2:] == [
        "bigram_stuck (it needs an evaluation at step 200 or later, with 8,450 tokens seen by then; the run is 200 "
        "steps)", "plateau (3 of the 6 evaluations it needs)"]
    for recs in (evals([4.1, 2.5, 2.4, 3.5]), [grad(s, [1e-9, 1e-4, 1.0], [1e-7, 1e-6, 1e-5]) for s in (150, 250)],
                 evals([4.17, 2.6, 2.45]) + [probe(500, [0.6, 0.001], ent=[[3.8, 3.9]] * 2)]):
        d = diagnose(Evidence(recs, {"model": {"block_size": 64}}, BASE))
        found = {f.rule for f in d.findings}
        assert found and not found & {n for nj in d.not_judged for n in nj.rules}, (found, d.without_data())
