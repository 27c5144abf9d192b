"""Science claims (one judge per experiment of the science profile) and the statistics they are judged by.

Each judge gets tiny synthetic result rows and must give the verdict its docstring's rule says;
every verdict test has a case on each side of the threshold, so a broken rule fails. The tests of
:mod:`depthlab.sweep.stats` check against scipy and against textbook numbers."""

import math

import pytest

from depthlab import sweep
from depthlab.sweep import science, stats

from conftest import sweep_item

NOISE = (0.01, -0.01, 0.005, -0.005, 0.0, 0.008, -0.008, 0.002)


def cells(v, L, mean, n=2, spread=1.0, **kw):
    """``n`` seeds of one cell around ``mean`` (± spread x NOISE: sd 0.014 for n = 2 at spread 1)."""
    return [sweep_item(v, L, None if mean is None else mean + spread * NOISE[i], seed=i + 1, **kw) for i in range(n)]


def depth_grid(pre, plain, n=2, spread=1.0):
    """Cells of pre-LN and plain at depths 1, 2, 4, 8 with means ``pre`` / ``plain``."""
    return [it for v, ms in (("prenorm", pre), ("plain", plain)) for L, m in zip((1, 2, 4, 8), ms)
            for it in cells(v, L, m, n, spread)]


# --------------------------------------------------------------------------- statistics
def test_welch_p_value_matches_scipy_and_the_hand_computed_value():
    from scipy import stats as sps

    a, b = [2.31, 2.29, 2.35], [2.05, 2.01]
    t, df, p = stats.welch_greater(a, b)
    ref = sps.ttest_ind(a, b, equal_var=False, alternative="greater")
    assert t == pytest.approx(ref.statistic, rel=1e-9) and df == pytest.approx(ref.df, rel=1e-9)
    assert p == pytest.approx(ref.pvalue, rel=1e-9)
    # by hand: t = 0.25 / sqrt(0.0002/2 + 0.0002/2) = 17.678 on df 2 -> p = 0.0015924
    t, df, p = stats.welch_greater([2.31, 2.29], [2.06, 2.04])
    assert (t, df) == (pytest.approx(17.67767, abs=1e-4), pytest.approx(2.0))
    assert p == pytest.approx(0.0015924, abs=1e-6)
    # a margin shifts the difference: the same as testing a - margin against b
    p_m = stats.welch_greater(a, b, margin=0.2)[2]
    assert p_m == pytest.approx(sps.ttest_ind([x - 0.2 for x in a], b, equal_var=False, alternative="greater").pvalue)
    assert stats.welch_greater([1.0], [0.0, 0.1]) is None  # one run: no spread to test against
    assert stats.welch_greater([1.0, 1.0], [0.0, 0.0])[2] == 0.0  # no spread: the difference is exact
    assert stats.welch_greater([0.0, 0.0], [1.0, 1.0])[2] == 1.0
    # values read on a grid of 25: a spread of 0 is the grid's rounding, 25²/12 (Sheppard), not an exact value
    t, df, p = stats.welch_greater([75.0, 75.0], [25.0, 25.0], resolution=25.0)
    assert (round(t, 3), df, round(p, 4)) == (6.928, 2.0, 0.0101)
    assert stats.floored_variance([1.0, 3.0], resolution=1.0) == 2.0  # a spread above the grid's is kept


def test_cell_stats_t_interval():
    cs = stats.cell_stats([1.0, 2.0, 3.0])
    # mean 2, sd 1, t(0.975, 2) = 4.3027: 2 ± 4.3027 / sqrt(3) = 2 ± 2.4841
    assert (cs.mean, cs.sd, cs.n) == (2.0, 1.0, 3) and (cs.lo, cs.hi) == (pytest.approx(-0.48414, abs=1e-5),
                                                                         pytest.approx(4.48414, abs=1e-5))
    assert cs.text() == "2.000 ± 1.000 (n = 3, CI -0.484 to 4.484)"
    assert stats.cell_stats([2.5]).text() == "2.500 (n = 1)" and stats.cell_stats([]) is None


def test_seeds_needed_matches_the_textbook_power_table():
    # Cohen's d = 1 (0.5), one-sided alpha 0.05, power 0.8: 14 (51) per group (G*Power, two-sample t)
    assert stats.seeds_needed(1.0, 1.0, 1.0) == 14 and stats.seeds_needed(0.5, 1.0, 1.0) == 51
    assert stats.seeds_needed(0.0, 1.0, 1.0) == math.inf and stats.seeds_needed(-0.1, 1.0, 1.0) == math.inf
    assert stats.seeds_needed(0.01, 1.0, 1.0) == math.inf  # beyond MAX_ESTIMATE


def test_all_is_intersection_union_and_any_is_bonferroni():
    def leaf(p):
        return stats.Leaf("x", "welch", p, 1 - p, (2, 2))

    both = stats.All([leaf(0.01), leaf(0.04)])
    assert stats.p_yes(both) == 0.04 and stats.p_no(both) == pytest.approx(2 * 0.96 if 2 * 0.96 < 1 else 1.0)
    assert stats.verdict(both).startswith("yes (p = 0.04")
    some = stats.Any([leaf(0.03), leaf(0.5)])
    assert stats.p_yes(some) == pytest.approx(0.06) and stats.verdict(some).startswith("undecided (p = 0.06")
    refuted = stats.All([leaf(0.5), leaf(0.99)])  # the second part goes the other way: p_no = 2 x 0.01
    assert stats.p_no(refuted) == pytest.approx(0.02) and stats.verdict(refuted) == "no (p = 0.02, n = 2)"
    assert stats.verdict(None) == "not run"


def test_fisher_on_runs_not_ok():
    # 0 of 4 vs 4 of 4 failed: 1 / C(8, 4) = 1/70
    assert stats.fisher_fewer(0, 4, 4, 4) == pytest.approx(1 / 70)
    assert stats.fisher_fewer(4, 4, 0, 4) == pytest.approx(1.0)


# --------------------------------------------------------------------------- verdict strings
def test_depth_helps_yes_no_undecided_with_seeds_needed():
    row = science.depth_helps(depth_grid((2.30, 2.20, 2.10, 2.05), (2.30, 2.50, 3.30, 3.35)), {})
    # pre-LN L1 2.300 ± 0.014 vs L8 2.050 ± 0.014: t = 17.68 on df 2, p = 0.0016 (plain's part is smaller)
    assert row[-1] == "yes (p = 0.0016, n = 2)"
    assert "L1 2.300 ± 0.014 (n = 2, CI 2.173 to 2.427)" in row[3] and "seeds 1, 2" in row[2]
    assert "pre-LN per depth step, not judged: L1->L2 -0.100" in row[3]
    # pre-LN rises with depth (8 blocks worse than 1 by 0.1): the claim's first part is refuted, p = 2 x 0.0097
    row = science.depth_helps(depth_grid((2.30, 2.30, 2.35, 2.40), (2.30, 2.50, 3.30, 3.35)), {})
    assert row[-1].startswith("no (p = 0.0") and row[-1].endswith(", n = 2)")
    # falls by 0.03 with sd 0.028: undecided, and Welch's power says about 12 seeds per cell
    row = science.depth_helps(depth_grid((2.30, 2.29, 2.28, 2.27), (2.3, 2.5, 3.3, 3.35), spread=2.0), {})
    assert row[-1] == ("undecided (p = 0.2, n = 2): add seeds, about 12 per cell (power 0.8 at alpha 0.05, "
                       "Bonferroni-split where the verdict's rule splits it)")
    # the same effect at 8 seeds (sd 0.013): decided
    assert science.depth_helps(depth_grid((2.30, 2.29, 2.28, 2.27), (2.3, 2.5, 3.3, 3.35), n=8, spread=2.0),
                               {})[-1].startswith("yes (")
    one = science.depth_helps(depth_grid((2.30, 2.20, 2.10, 2.05), (2.30, 2.50, 3.30, 3.35), n=1), {})
    assert one[-1] == "undecided (n = 1): add seeds (a cell has one run: at least 2 per cell to measure the spread)"
    # runs that cannot be compared are "not judged", with why (they ran: "not run" was false)
    assert science.depth_helps([sweep_item("prenorm", 4, 2.4)], {})[-1] == (
        "not judged: it needs pre-LN and plain runs at two depths or more each, and this sweep has model.variant "
        "prenorm at model.n_layer 4")
    assert not any("partly" in science.depth_helps(depth_grid(p, q), {})[-1]
                   for p, q in [((2.3,) * 4, (2.3,) * 4), ((2.3, 2.2, 2.1, 2.1), (2.3, 2.32, 2.34, 2.35))])


def test_claims_from_rows_and_table_order():
    deg = (cells("plain", 1, 2.6) + cells("plain", 4, 2.5) + cells("plain", 16, 3.3) + cells("prenorm", 1, 2.6)
           + cells("prenorm", 4, 2.4) + cells("prenorm", 16, 2.3))
    claims = sweep.science_claims({"depth": deg}, {})
    assert [r[-1].split(" ")[0] for r in claims] == ["yes", "yes"] and all(len(r) == 5 for r in claims)
    assert claims[0][1].startswith("He et al. 2016") and claims[0].test is not None
    ranks = [sweep_item(v, L, 0, seed=s, rank=r + 0.001 * s) for v, L, r in
             (("plain", 4, 0.4), ("plain", 32, 0.0001), ("prenorm", 4, 0.98), ("prenorm", 32, 0.97)) for s in (1, 2)]
    rows = sweep.science_claims({"depth": deg, "rank_init": ranks, "other": deg, "rezero_speed": []}, {})
    assert [r[0].split(":")[0] for r in rows] == ["Rank collapse without skips", "Degradation",
                                                  "With shortcuts, depth helps"]
    assert rows[0][-1].startswith("yes (p < 0.001") and "plain: L4 0.402 ± 0.001, L32 0.002 ± 0.001" in rows[0][3]


def test_claims_markdown():
    md = sweep.claims_markdown([["a|b", "src", "set", "1.0", "yes"]])
    assert md == ("| claim | source | setting | our numbers | verdict |\n|---|---|---|---|---|\n"
                  "| a/b | src | set | 1.0 | yes |\n")
    assert sweep.claims_markdown([]) == ""


def test_degradation_verdicts():
    deg = depth_grid((2.30, 2.20, 2.10, 2.05), (2.30, 2.50, 3.30, 3.35))
    assert science.degradation(deg, {})[-1].startswith("yes (")
    # pre-LN's 8 blocks 0.01 better than 4 with sd 0.014: within the 0.02 margin, but only at p = 0.084
    assert science.degradation(depth_grid((2.30, 2.20, 2.10, 2.09), (2.30, 2.50, 3.30, 3.35)), {})[-1] == \
        ("undecided (p = 0.084, n = 2): add seeds, about 4 per cell (power 0.8 at alpha 0.05, Bonferroni-split where "
         "the verdict's rule splits it)")
    flat = depth_grid((2.30, 2.20, 2.10, 2.09), (2.30, 2.30, 2.30, 2.31))  # plain does not degrade: refuted
    assert science.degradation(flat, {})[-1].startswith("no (")
    assert science.degradation([sweep_item("prenorm", 4, 2.4)], {})[-1] == (
        "not judged: it compares plain with the residual variants at two depths or more, and this sweep has "
        "model.variant prenorm at model.n_layer 4")
    assert science.degradation([], {})[-1] == "not run"


def _warm_grid(post0, post100, pre0=2.3, init="torch", status0="ok", lr=1e-3):
    pre_g, post_g = [0.6, 0.5], [0.8, 0.6]
    return (cells("postnorm", 12, post0, init=init, warmup=0, lr=lr, status=status0, grads=post_g)
            + cells("postnorm", 12, post100, init=init, warmup=100, lr=lr, grads=post_g)
            + cells("prenorm", 12, pre0, init=init, warmup=0, lr=lr, grads=pre_g)
            + cells("prenorm", 12, pre0, init=init, warmup=100, lr=lr, grads=pre_g))


def test_postln_warmup_verdicts():
    row = science.postln_warmup(_warm_grid(3.37, 2.5), {})
    assert row[-1].startswith("yes (p = ") and row[-1].endswith("; torch init)")
    assert "L12 lr 0.001 torch: post-LN warmup 0 3.370 ± 0.014, warmup 100 2.500 ± 0.014; pre-LN warmup 0 " \
        "2.300 ± 0.014 [needs warmup]" in row[3]
    assert "post-LN last-block grad 0.6 (last/first 0.75) vs pre-LN 0.5 (last/first 0.83)" in row[3]
    # two cells, only the GPT-2 one shows it (Bonferroni over the 2 cells)
    both = science.postln_warmup(_warm_grid(2.5, 2.5) + _warm_grid(3.3, 2.4, init="gpt2"), {})
    assert both[-1].endswith("; gpt2 init)")
    # without warmup 0.05 better than with it: the cell's first part is refuted
    assert science.postln_warmup(_warm_grid(2.45, 2.5), {})[-1].startswith("no (")
    diverged = science.postln_warmup(_warm_grid(None, 2.5, status0="nonfinite"), {})
    assert "post-LN warmup 0 diverged, warmup 100 2.500" in diverged[3] and "(by runs not ok)" in diverged[3]
    assert diverged[-1].startswith("undecided (p = 0.17, n = 2)")  # 2 of 2 vs 0 of 2 diverged: Fisher p = 1/6


def test_rezero_speed_verdicts():
    def run(v, lr, first_step_below, seed=1, loss=2.5):
        evals = [(s, 3.0, 3.0 if s < first_step_below else 2.5) for s in (25, 50, 75, 100)]
        it = sweep_item(v, 8, loss, lr=lr, evals=evals, seed=seed)
        it["config"]["train"]["max_iters"] = 100
        return it

    its = [run("rezero", 1e-2, 25), run("rezero", 1e-2, 25, seed=2), run("rezero", 1e-3, 100),
           run("rezero", 1e-3, 100, seed=2), run("prenorm", 1e-2, 75), run("prenorm", 1e-2, 75, seed=2),
           run("postnorm", 1e-2, 100), run("postnorm", 1e-2, 999, seed=2)]
    row = science.rezero_speed(its, {"target_val_loss": 2.6})
    # postnorm's seed 2 never reached 2.6: counted as the budget + one evaluation, 100 + 25 = 125 steps;
    # (100, 125) against ReZero's (25, 25), whose spread of 0 counts as the 25-step grid's rounding, 25²/12:
    # t = 6.48 on df 1.32, p = 0.029 (scipy), the largest of the two comparisons
    assert row[-1] == "yes (p = 0.029, n = 2)" and "<= 2.6 nats" in row[2]
    # pre-LN's (75, 75) against (25, 25): t = 50 / sqrt(2 * 625/12 / 2) = 6.93 on df 2, p = 0.010, where two
    # seeds on one evaluation step each made the difference "exact" (p = 0)
    assert row[3].endswith("prenorm 75.000 ± 0.000 (n = 2, CI 75.000 to 75.000) vs rezero 25.000 ± 0.000 "
                           "(n = 2, CI 25.000 to 25.000), p = 0.01")
    assert "eval_interval/sqrt(12)" in row[2]
    assert "rezero: lr 0.001 100 ± 0 / 2.500 ± 0.000, lr 0.01 25 ± 0 / 2.500 ± 0.000" in row[3]
    assert "postnorm: lr 0.01 — / 2.500" in row[3] and "postnorm lr 0.01: 112.5 steps (115,200 tokens)" in row[3]
    its[4:6] = [run("prenorm", 1e-2, 25), run("prenorm", 1e-2, 25, seed=2)]  # ties ReZero exactly
    assert science.rezero_speed(its, {"target_val_loss": 2.6})[-1].startswith("undecided (p = 0.5")
    # a target below every loss: nobody reaches it, all censored alike: nothing to compare, and no seeds help
    # (it said "175 steps" of 150-step runs and "add seeds (more than 1000 per cell")
    low = science.rezero_speed(its, {"target_val_loss": 1.0})
    assert low[-1] == ("not judged: no run reached val <= 1 nats/char (raise train.max_iters, or the experiment's "
                       "target_val_loss)")
    assert "rezero lr 0.001: not reached in 100 steps" in low[3] and "125 steps" not in low[3].split("Best:")[1]
    its[:2] = [run("rezero", 1e-2, 100), run("rezero", 1e-2, 100, seed=2)]  # ReZero slower than pre-LN: refuted
    assert science.rezero_speed(its, {"target_val_loss": 2.6})[-1].startswith("no (")


def test_deepnorm_depth_verdicts():
    its = (cells("postnorm", 16, 2.6, lr=1e-2) + cells("deepnorm", 16, 2.5, lr=1e-2)
           + cells("postnorm", 32, 2.7, lr=1e-2) + cells("deepnorm", 32, 2.55, lr=1e-2))
    row = science.deepnorm_depth(its, {})
    assert row[-1].startswith("yes (") and "L32 lr 0.01: post-LN 2.700 ± 0.014, DeepNorm 2.550 ± 0.014" in row[3]
    its[2:4] = cells("deepnorm", 16, 2.7, lr=1e-2)  # worse than post-LN by 0.1 at depth 16
    assert science.deepnorm_depth(its, {})[-1].startswith("no (")


def _dyt_grid(ln, dyt, n=2):
    """Pre-LN cells per lr 1e-3, 3e-3, 1e-2, 3e-2 with mean losses ``ln`` (LayerNorm) and ``dyt`` (None: diverged)."""
    out = []
    for norm, ms in (("layernorm", ln), ("dyt", dyt)):
        for lr, m in zip((1e-3, 3e-3, 1e-2, 3e-2), ms):
            for it in cells("prenorm", 4, m, n, lr=lr, status="ok" if m is not None else "nonfinite"):
                it["config"]["model"]["norm"] = norm
                out.append(it)
    return out


def test_dyt_rows():
    wide, narrow = (2.40, 2.22, 2.20, 2.21), (2.60, 2.35, 2.21, None)
    match = science.dyt_matches(_dyt_grid(wide, narrow), {})
    window = science.dyt_lr_window(_dyt_grid(wide, narrow, 4), {})
    # DyT's best (lr 0.01, 2.21) within 0.02 of LayerNorm's best (lr 0.01, 2.20)? 0.01 worse with sd 0.014: undecided
    assert match[-1].startswith("undecided (p = ") and "DyT (lr 0.01) < LayerNorm (lr 0.01) + 0.02" in match[3]
    assert science.dyt_matches(_dyt_grid(wide, (2.6, 2.35, 2.15, None)), {})[-1].startswith("yes (")
    assert science.dyt_matches(_dyt_grid(wide, (2.6, 2.35, 2.30, None)), {})[-1].startswith("no (")
    # at lr 3e-3 LayerNorm is 0.02 from its best, DyT 0.14 from its own: narrower window (4 seeds; Bonferroni
    # over the 3 lrs that are neither norm's best)
    assert window[-1].startswith("yes (") and "DyT: lr 0.001 2.600 ± 0.009" in window[3] and "diverged" in window[3]
    same = science.dyt_lr_window(_dyt_grid(wide, wide, 4), {})  # identical windows: every lr refutes one part
    assert same[-1].startswith("no (")
    assert science.dyt_matches([sweep_item("prenorm", 4, 2.4)], {})[-1] == "not run"
    # LayerNorm best at lr 0.03, where DyT diverges on every seed: inside LayerNorm's window by definition, outside
    # DyT's (LayerNorm's best lr was dropped from the comparisons: a significant "no")
    at_best = science.dyt_lr_window(_dyt_grid((2.30, 2.29, 2.28, 2.27), (2.31, 2.30, 2.29, None), 4), {})
    assert not at_best[-1].startswith("no ("), at_best[-1]
    assert "lr 0.03: DyT > its best + 0.05 (by runs not ok)" in at_best[3]


def test_periln_stability_verdicts():
    its = [it for L in (8, 16) for lr in (1e-2, 3e-2) for v, m in (("prenorm", 2.40), ("periln", 2.35))
           for it in cells(v, L, m + (0.1 if lr == 3e-2 else 0.0), lr=lr)]
    row = science.periln_stability(its, {})
    assert row[-1].startswith("yes (") and "L16 lr 0.03: pre-LN 2.500 ± 0.014, Peri-LN 2.450 ± 0.014" in row[3]
    # Peri-LN 0.2 worse in one cell: refuted (the other cells cannot rescue an intersection-union claim)
    its = [it for it in its if (it["config"]["model"]["variant"], it["config"]["model"]["n_layer"],
                                it["config"]["train"]["learning_rate"]) != ("periln", 16, 3e-2)]
    its += cells("periln", 16, 2.70, lr=3e-2)
    assert science.periln_stability(its, {})[-1].startswith("no (")
    # pre-LN diverges at depth and the higher lr while Peri-LN trains: decided by Fisher on the failures
    div = [it for L in (16,) for v, m, status in (("prenorm", None, "nonfinite"), ("periln", 2.5, "ok"))
           for it in cells(v, L, m, n=4, lr=3e-2, status=status)]
    row = science.periln_stability(div, {})
    assert row[-1].startswith("yes (") and "diverged" in row[3] and "by runs not ok" in row[3]


def _lns_grid(base, scaled, n=3):
    """Pre-LN runs of 4 blocks, ``n`` seeds per norm_scale, ablation deltas ``base`` / ``scaled`` (± noise)."""
    out = []
    for ns, deltas in ((1, base), ("depth", scaled)):
        for it in cells("prenorm", 4, 2.0, n):
            k = it["config"]["train"]["seed"] - 1
            it["config"]["model"]["norm_scale"] = ns
            it["details"]["layers"] = {"blocks": [{"ablation_delta": d * (1 + NOISE[k])} for d in deltas]}
            out.append(it)
    return out


def test_lns_depth_verdicts_from_the_ablation_deltas():
    row = science.lns_depth(_lns_grid((0.40, 0.30, 0.05, 0.03), (0.30, 0.25, 0.20, 0.18)), {})
    # halves: pre-LN first 0.35, last 0.04 (ratio 0.114; x (1 + noise) per seed); scaled 0.275, 0.19 (ratio 0.69)
    assert row[-1].startswith("yes (") and "pre-LN: first half 0.3506 ± 0.0036" in row[3]
    assert "last/first 0.11" in row[3]
    # deep blocks matter as much as shallow ones: the first half of the claim is refuted
    flat = _lns_grid((0.2, 0.2, 0.3, 0.3), (0.2, 0.2, 0.4, 0.4))
    assert science.lns_depth(flat, {})[-1].startswith("no (")
    # LayerNorm Scaling gives the deep half a smaller share: refuted too
    assert science.lns_depth(_lns_grid((0.4, 0.3, 0.05, 0.03), (0.5, 0.5, 0.01, 0.01)), {})[-1].startswith("no (")
    # a run without a checkpoint or layers record gives no deltas: not run
    its = cells("prenorm", 4, 2.0)
    for it in its:
        it["config"]["model"]["norm_scale"] = 1
    assert science.lns_depth(its, {})[-1] == "not run"


def test_ablation_deltas_measured_from_a_real_run(report_run, tmp_path):
    """The judge measures a run's deltas itself from its checkpoint when the details do not carry them."""
    from depthlab.analytics.layers import run_layers

    run_dir = report_run
    it = {"details": {}, "run_dir": str(run_dir), "row": {"status": "ok"}}
    got = science.ablation_deltas(it)
    want = [b["ablation_delta"] for b in run_layers(run_dir, max_tokens=science.LAYERS_TOKENS)["blocks"]]
    assert got == want and len(got) == 2 and it["details"]["layers"]["blocks"]
    assert science.ablation_deltas({"details": {}, "run_dir": str(tmp_path / "nope"), "row": {"status": "ok"}}) is None


def test_postln_warmup_tags_a_cell_whose_p_is_exactly_0():
    # zero-spread cells give an exact p of 0, which `p or 1.0` read as 1: no [needs warmup], no init in the verdict
    flat = [it for it in _warm_grid(3.3, 2.7, pre0=2.6)]
    for it in flat:
        it["row"]["best_val_loss"] = round(it["row"]["best_val_loss"], 1)
    row = science.postln_warmup(flat, {})
    assert row[-1].startswith("yes (") and row[-1].endswith("; torch init)"), row[-1]
    assert "[needs warmup]" in row[3]


def test_runs_the_clock_stopped_before_their_budget_are_left_out_of_the_claims():
    # --train.max_time 3: every 8-block run time_capped at step 21 of 40, and Fisher's test on "runs not ok" refuted
    # both depth claims on the cut alone ("plain L8 > L1 + 0.1 (by runs not ok): L1 0 of 4 not ok vs L8 4 of 4")
    from depthlab.sweep.science import science_claims

    items = depth_grid((2.30, 2.20, 2.10, 2.09), (2.30, 2.80, 3.30, 3.35))
    for it in items:
        if it["config"]["model"]["n_layer"] == 8:
            it["row"]["status"] = "time_capped"
    rows = science_claims({"depth": items}, {})
    assert all("(by runs not ok)" not in r[3] for r in rows), rows
    assert all("(4 of 16 runs left out: train.max_time stopped them before train.max_iters (runs/prenorm8" in r[3]
               for r in rows), [r[3] for r in rows]
    # a fit_to_time plan that ended ok runs early is the same cut
    plan = depth_grid((2.30, 2.20, 2.10, 2.09), (2.30, 2.80, 3.30, 3.35))
    for it in plan:
        if it["config"]["model"]["n_layer"] == 8:
            it["details"]["summary"] = {"stopped_by": "max_time", "final_step": 5, "planned_end": True}
    assert all("4 of 16 runs left out" in r[3] for r in science_claims({"depth": plan}, {}))
    for it in items:
        it["row"]["status"] = "time_capped"
    assert all(r[-1] == "not judged: every run stopped before its step budget"
               for r in science_claims({"depth": items}, {}))
