"""depthlab.sweep.findings: plain-language findings and the aggregate table per experiment."""

import pytest

from depthlab import sweep

from conftest import sweep_item


def test_init_lines_and_aggregate_table():
    its = [sweep_item("plain", 4, 2.5, rank=0.4), sweep_item("plain", 4, 2.7, seed=2, rank=0.2),
           sweep_item("plain", 16, 3.0, rank=0.01)]
    for it, last_rank in zip(its, (0.3, 0.1, 0.001)):
        it["row"].update(last_block_rank=last_rank, tokens_per_sec=1000.0, grad_ratio_first_last=None)
    lines = sweep.init_lines(its, "model.n_layer", ["model.variant"])
    assert "plain: last-block rank measure at init n_layer 4: 0.3, n_layer 16: 0.01." in lines
    header, rows = sweep.aggregate_table(its, "model.n_layer", ["model.variant"])
    assert header[:3] == ["line", "n_layer", "best val loss (mean)"]
    assert rows[0][:5] == ["plain", 4, 2.6, pytest.approx(0.1414, abs=1e-4), 2]
    assert rows[1][:5] == ["plain", 16, 3.0, None, 1]
    assert rows[0][5:] == [pytest.approx(2.6 / 0.6931, rel=1e-3), None, pytest.approx(0.2), 1000.0]
    assert header[6:] == ["grad ratio first/last block", "last-block rank", "tokens/s"]


def test_a_bpe_sweeps_findings_say_token_not_character():
    """A new user's pass: a BPE sweep's findings said 'nats/char' and 'the current character alone'."""
    its = [sweep_item("plain", 1, 2.9), sweep_item("plain", 4, 3.05)]
    for it in its:
        it["config"]["data"] = {"tokenizer": "bpe"}
    assert sweep.sweep_unit(its) == "token"
    lines = sweep.summary_lines(its, "model.n_layer", ["model.variant"], {"unigram": 3.4, "bigram": 3.0})
    assert "plain: best n_layer = 1 (2.900 nats/token, 4.184 bits/token); gets worse with depth" in lines[0]
    assert "the current token alone and uses almost none of the context" in lines[2]
    assert not any("char" in s for s in lines)
    assert sweep.aggregate_table(its, "model.n_layer", ["model.variant"])[0][5] == "bits/token"
    for it in its:  # character runs keep their words
        it["config"]["data"] = {"tokenizer": "char"}
    lines = sweep.summary_lines(its, "model.n_layer", ["model.variant"], {"unigram": 3.4, "bigram": 3.0})
    assert "nats/char, 4.184 bits/char" in lines[0] and "the current character alone" in lines[2]


def test_a_sweep_without_an_x_axis_states_each_lines_best_without_a_depth_of_0():
    """A new user's pass: a grid over model.init (a model.source sweep) said "best = 0 (3.979 nats/char ...); one
    depth only": 0 is no setting of the sweep and no depth was swept."""
    its = [sweep_item("plain", 1, 2.9), sweep_item("prenorm", 1, 2.5)]
    lines = sweep.summary_lines(its, None, ["model.variant"], None)
    assert lines == ["plain: best val loss 2.900 nats/char (4.184 bits/char).",
                     "prenorm: best val loss 2.500 nats/char (3.607 bits/char)."]


def test_a_table_without_an_x_axis_labels_its_rows_by_the_sweeps_values():
    """A new user's pass: a grid over model.norm alone (no numeric axis) gave a table whose rows read "x 0", and
    an init summary "x 0: 0.5": 0 is no setting of the sweep. The rows are the norms now, with no x column; a grid
    over model.init's keyword arguments is labelled by them as JSON."""
    its = [sweep_item("prenorm", 2, 2.5, rank=0.4), sweep_item("prenorm", 2, 2.7, rank=0.2)]
    its[0]["config"]["model"]["norm"], its[1]["config"]["model"]["norm"] = "layernorm", "rmsnorm"
    x, groups = sweep.experiment_axes({"name": "", "grid": {"model.norm": ["layernorm", "rmsnorm"]}})
    assert (x, groups) == (None, ["model.norm"])
    header, rows = sweep.aggregate_table(its, x, groups)
    assert header[:4] == ["line", "best val loss (mean)", "sd", "seeds"] and len(header) == len(rows[0])
    assert [r[:3] for r in rows] == [["norm=layernorm", 2.5, None], ["norm=rmsnorm", 2.7, None]]
    assert sweep.init_lines(its, x, groups)[1:] == ["norm=layernorm: last-block rank measure at init 0.4.",
                                                    "norm=rmsnorm: last-block rank measure at init 0.2."]
    its[0]["config"]["model"]["init"], its[1]["config"]["model"]["init"] = {"n_layer": 2}, {"n_layer": 4}
    header, rows = sweep.aggregate_table(its, None, ["model.init"])
    assert [r[0] for r in rows] == ['init={"n_layer": 2}', 'init={"n_layer": 4}']
    its[1]["config"]["train"]["learning_rate"] = 0.03  # a numeric axis keeps its column, labelled by its values
    x, groups = sweep.experiment_axes({"name": "", "grid": {"train.learning_rate": [0.01, 0.03]}})
    header, rows = sweep.aggregate_table(its, x, groups)
    assert header[:3] == ["line", "learning_rate", "best val loss (mean)"]
    assert [r[:3] for r in rows] == [["all", 0.01, 2.5], ["all", 0.03, 2.7]]


def test_the_findings_say_seeds_per_cell_and_runs_cut_short_of_the_budget():
    # after --seeds auto:3 one experiment said "means over 3 seeds" while its cells had 2; a fit_to_time plan gave
    # 8 blocks 21 steps of 40 and the findings said "gets worse with depth" without a word
    its = [sweep_item("prenorm", L, 3.2 + 0.01 * L, seed=s) for L in (1, 8) for s in (1, 2)]
    its.append(sweep_item("prenorm", 1, 3.21, seed=3))
    its[2]["details"]["summary"] = {"stopped_by": "max_time", "final_step": 5, "planned_end": True}
    lines = sweep.summary_lines(its, "model.n_layer", ["model.variant"], None)
    assert lines[0].startswith("Numbers are means over 2 to 3 seeds per cell (1, 2, 3)"), lines
    assert lines[1].startswith("1 run stopped by train.max_time before train.max_iters (runs/prenorm8): their "
                               "losses are at fewer steps than the run asked for, so the comparisons"), lines
