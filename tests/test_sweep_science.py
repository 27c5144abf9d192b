"""Science claims (one judge per experiment of the science profile) and per-experiment findings."""

import pytest

from depthlab import sweep
from depthlab.sweep import science


def item(v, L, loss, seed=1, status="ok", rank=None, evals=(), **cfg):
    model = {"variant": v, "n_layer": L, "init": cfg.pop("init", "gpt2")}
    train = {"seed": seed, "max_iters": 10, "learning_rate": cfg.pop("lr", 1e-2),
             "warmup_iters": cfg.pop("warmup", 0), "eval_interval": 25}
    return {"config": {"model": model, "train": train},
            "row": {"status": status, "best_val_loss": loss, "run": f"runs/{v}{L}"},
            "details": {"evals": list(evals), "grad": [], "probe": [], "init_probe": {"rank_measure": [rank or 0.5]}}}


DEG = [item("plain", 1, 2.6), item("plain", 4, 2.5), item("plain", 16, 3.3),
       item("prenorm", 1, 2.6), item("prenorm", 4, 2.4), item("prenorm", 16, 2.3)]


def test_summary_and_claims_from_rows():
    lines = " ".join(sweep.summary_lines(DEG, "model.n_layer", ["model.variant"], {"unigram": 3.3, "bigram": 2.5}))
    assert "plain: best n_layer = 4" in lines and "gets worse with depth" in lines
    assert "prenorm: best n_layer = 16" in lines and "improves with depth" in lines
    assert "+0.800 nats/char" in lines and "unigram baseline" in lines
    claims = sweep.science_claims({"degradation": DEG}, {})
    assert len(claims) == 1 and claims[0][-1] == "yes"
    rank_items = [item("plain", 4, 0, rank=0.4), item("plain", 32, 0, rank=0.0001),
                  item("prenorm", 4, 0, rank=0.98), item("prenorm", 32, 0, rank=0.97)]
    assert sweep.science_claims({"rank_init": rank_items}, {})[0][-1] == "yes"


def test_claims_table_order_and_missing_experiments():
    rank_items = [item("plain", 4, 0, rank=0.4), item("plain", 32, 0, rank=0.3)]
    rows = sweep.science_claims({"degradation": DEG, "rank_init": rank_items, "depth": DEG, "rezero_speed": []}, {})
    assert [r[0].split(" (")[0] for r in rows] == ["Rank collapse without skips", "Degradation"]
    assert rows[0][-1] == "no"  # 0.4 -> 0.3 falls, but not below half, and no residual variant to compare
    assert "plain: L4 0.400, L32 0.300" in rows[0][2]


def test_degradation_verdicts():
    assert science.degradation(DEG, {})[-1] == "yes"
    flat_plain = [it for it in DEG if it["config"]["model"]["variant"] != "plain"] + \
        [item("plain", 1, 2.6), item("plain", 16, 2.62)]
    assert science.degradation(flat_plain, {})[-1] == "partly"  # residual fine, plain does not degrade
    assert science.degradation([item("prenorm", 4, 2.4)], {})[-1] == "not run"


def test_postln_warmup_verdicts():
    def grid(pt_no_warm, pt_warm, gpt_no_warm=2.4, gpt_warm=2.4, status="ok"):
        return [item("postnorm", 16, pt_no_warm, init="torch", warmup=0, status=status),
                item("postnorm", 16, pt_warm, init="torch", warmup=100),
                item("postnorm", 16, gpt_no_warm, init="gpt2", warmup=0),
                item("postnorm", 16, gpt_warm, init="gpt2", warmup=100),
                item("prenorm", 16, 2.3, init="torch", warmup=0), item("prenorm", 16, 2.3, init="torch", warmup=100)]

    assert science.postln_warmup(grid(2.9, 2.5), {})[-1] == "yes"
    assert science.postln_warmup(grid(2.9, 2.5, 2.9, 2.5), {})[-1] == "yes (also with GPT-2 init)"
    assert science.postln_warmup(grid(2.55, 2.5), {})[-1] == "no"
    diverged = science.postln_warmup(grid(None, 2.5, status="nonfinite"), {})
    assert diverged[-1] == "yes" and "postnorm/torch: warmup 0 diverged, warmup 100 2.500" in diverged[2]


def test_rezero_speed_verdicts():
    def run(v, lr, first_step_below):
        evals = [(s, 3.0, 3.0 if s < first_step_below else 2.5) for s in (25, 50, 75, 100)]
        return item(v, 8, 2.5, lr=lr, evals=evals)

    its = [run("rezero", 1e-2, 25), run("rezero", 1e-3, 100), run("prenorm", 1e-2, 50), run("postnorm", 1e-2, 75)]
    row = science.rezero_speed(its, {"target_val_loss": 2.6})
    assert row[-1] == "yes" and "rezero: lr 0.001 100, lr 0.01 25" in row[2] and "<= 2.6 nats" in row[1]
    its[2] = run("prenorm", 1e-2, 25)
    assert science.rezero_speed(its, {"target_val_loss": 2.6})[-1] == "partly (ties)"
    # a target below every loss: nobody reaches it, ReZero included
    assert science.rezero_speed(its, {"target_val_loss": 1.0})[-1] == "no"


def test_deepnorm_depth_verdicts():
    its = [item("postnorm", 16, 2.6, lr=1e-2), item("deepnorm", 16, 2.5, lr=1e-2),
           item("postnorm", 32, None, lr=1e-2, status="nonfinite"), item("deepnorm", 32, 2.55, lr=1e-2)]
    row = science.deepnorm_depth(its, {})
    assert row[-1] == "yes" and "L32 lr 0.01: post-LN diverged, DeepNorm 2.550" in row[2]
    its[1] = item("deepnorm", 16, 2.7, lr=1e-2)  # worse than post-LN by 0.1 at depth 16
    assert science.deepnorm_depth(its, {})[-1] == "partly"


def test_init_lines_and_aggregate_table():
    its = [item("plain", 4, 2.5, rank=0.4), item("plain", 4, 2.7, seed=2, rank=0.2), item("plain", 16, 3.0, rank=0.01)]
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
