"""analytics.rules: the one rule interface (declared needs, findings or "not judged: needs ...")."""



from depthlab.analytics.diagnose import RULES

from conftest import SHAKESPEARE_BASELINES as BASE
from conftest import eval_records as evals
from conftest import grad_record as grad
from conftest import context_record as context_rec
from conftest import probe_record as probe


def test_every_rule_has_the_one_interface():
    import inspect

    from depthlab.analytics.diagnose import RULE_SET, Evidence
    from depthlab.analytics.rules import Finding, Need, NotJudged, Rule

    # the stable contract (names are added, never renamed)
    assert RULES == ("bigram_stuck", "unigram_stuck", "context_unused", "causal_leak", "no_gradient",
                     "vanishing_gradients", "exploding", "init_loss", "rank_collapse", "uniform_attention",
                     "lr_too_high", "lr_too_low", "overfitting", "plateau", "fixed_shape",
                     "random_eval", "shifted_logits")
    assert {n for r in RULE_SET for n in r.names} == set(RULES)
    healthy = Evidence(evals([4.2, 3.0, 2.3, 2.2, 2.1, 2.0]) + [grad(s, [0.5, 1.0]) for s in (100, 150, 200)]
                       + [probe(500, [0.9, 0.8]), context_rec(500, [2.5, 2.0])], {"model": {"vocab_size": 65}}, BASE)
    for r in RULE_SET:
        assert isinstance(r, Rule) and set(r.names) <= set(RULES), r
        assert all(isinstance(n, Need) and n.source in {"eval", "grad", "probe", "baselines", "event"}
                   for n in r.needs), r
        assert list(inspect.signature(r.judge).parameters) == ["ev"], r  # one input: the evidence
        empty = r(Evidence())  # nothing recorded: a rule with needs says which, one without judges
        if r.needs:
            unmet = tuple(n for n in r.needs if not n.met(Evidence()))  # LOSS_LEFT: met where nothing is recorded
            assert isinstance(empty, NotJudged) and empty.rules == r.names and empty.needs == unmet, r
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
    # 200 steps is enough: the tokens are the gate that fails, and the line says the tokens (issue 23 case 17:
    # it said "with 8,450 tokens seen by then; the run is 200 steps", naming steps the run has)
    assert d.findings == () and d.without_data()[-2:] == [
        "bigram_stuck, unigram_stuck (they need 8,450 tokens seen (2 x V^2, V = 65) at an evaluation at step 200 "
        "or later; by its last evaluation, at step 200, the run had seen 200: raise train.batch_size or train "
        "longer)", "plateau (3 of the 6 evaluations it needs)"]
    for recs in (evals([4.1, 2.5, 2.4, 3.5]), [grad(s, [1e-9, 1e-4, 1.0], [1e-7, 1e-6, 1e-5]) for s in (150, 250)],
                 evals([4.17, 2.6, 2.45]) + [probe(500, [0.6, 0.001], ent=[[3.8, 3.9]] * 2)]):
        d = diagnose(Evidence(recs, {"model": {"block_size": 64}}, BASE))
        found = {f.rule for f in d.findings}
        assert found and not found & {n for nj in d.not_judged for n in nj.rules}, (found, d.without_data())
