"""training.evaluator: periodic evaluation (deterministic, bits per character), best tracking, patience
(issue 13), the final validation of the whole val split."""

import json
import math

import numpy as np
import pytest
import torch

from depthlab import data as D, evaluation, train
from depthlab.data import get_batch
from depthlab.sample import load_run
from depthlab.trainer import Trainer, val_perplexity

from conftest import QUIET, bpe_run_config, tiny_config


def test_eval_is_deterministic_with_dropout_and_restores_mode(tmp_path, tiny_text_file):
    from depthlab.trainer import Trainer

    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, model=dict(dropout=0.2)), **QUIET)
    t.model.train()
    a, b = t.evaluate(), t.evaluate()
    assert a == b and t.model.training


def test_val_bpc_is_total_nats_over_characters_of_the_evaluated_text(tmp_path, tiny_text_file):
    cfg = bpe_run_config(tmp_path, tiny_text_file)
    run = train(cfg, **QUIET)
    rec = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"val_loss"' in x][-1]
    # an independent count: the val windows evaluate() reads, decoded, their characters counted
    _, tok = load_run(run)
    c = D.load_corpus(cfg.data, tokenizer_json=tok.json)
    T, n = cfg.model.block_size, cfg.train.eval_iters * cfg.train.batch_size
    step = (len(c.val) - T) / n  # spaced windows: evenly over the split's starts, whichever batch holds them
    chars = tokens = 0
    for j in range(n):
        start = int((j + 0.5) * step)
        row = c.val[start + 1: start + T + 1].tolist()
        chars += len(tok.decode(row))
        tokens += len(row)
    assert rec["val_bpc"] == pytest.approx(rec["val_loss"] * tokens / chars / math.log(2), rel=1e-9)
    assert tokens / chars < 0.9  # BPE tokens hold more than one character: bpc is not val_loss / ln 2
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best_val_bpc"] == pytest.approx(summary["best_val_loss"] * tokens / chars / math.log(2))


def test_the_best_val_says_its_sampling_error_over_where_the_windows_fell(tmp_path, tiny_text_file, capsys):
    """Measured: the same weights read 1.5454 on the default seed's 20 windows and 1.4801 on another seed's, so
    the best val is given with its error: sd of the batch means / sqrt(eval_iters), recomputed here by hand."""
    from depthlab.analytics.context import load_weights
    from depthlab.training.evaluator import eval_batches, window_se

    assert window_se(torch.tensor([1.0, 2.0, 3.0, 4.0])) == pytest.approx(np.std([1, 2, 3, 4], ddof=1) / 2)
    assert window_se(torch.tensor([1.0])) is None and window_se(torch.tensor([1.0, float("inf")])) is None
    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=6, eval_interval=3, eval_iters=5))
    run = Trainer(cfg, log=print).fit()
    s = json.loads((run / "summary.json").read_text())
    recs = {r["step"]: r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "val_loss" in r}
    assert s["best_val_loss_se"] == recs[s["best_val_step"]]["val_loss_se"] > 0
    model, _ = load_weights(run, "best")
    c = D.load_corpus(cfg.data, seed=cfg.train.seed)
    with torch.no_grad():
        batch = torch.tensor([torch.nn.functional.cross_entropy(model(x)[0].flatten(0, 1), y.flatten()).item()
                              for x, y in eval_batches(c.val, cfg.model.block_size, cfg.train.batch_size,
                                                       cfg.train.seed, "val", 5)])
    assert batch.mean().item() == pytest.approx(s["best_val_loss"], abs=1e-5)
    assert s["best_val_loss_se"] == pytest.approx(batch.std().item() / math.sqrt(5), rel=1e-4)
    assert f"done: best val {s['best_val_loss']:.4f} ± {s['best_val_loss_se']:.3f} nats" in capsys.readouterr().out


def test_char_run_bpc_is_nats_over_ln2(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=5, eval_interval=5)), **QUIET)
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "val_loss" in r:
            assert r["val_bpc"] == r["val_loss"] / math.log(2)


def test_val_ppl_is_the_true_value_or_null(tmp_path, tiny_text_file):
    assert val_perplexity(60.0) == math.exp(60.0)
    assert val_perplexity(800.0) is None and val_perplexity(float("nan")) is None
    t = Trainer(tiny_config(tmp_path / "p", tiny_text_file, train=dict(max_iters=2, eval_interval=1)), **QUIET)
    t.evaluate = lambda: {"train": 60.0, "val": 60.0}
    t.fit()
    r = [json.loads(line) for line in (tmp_path / "p" / "metrics.jsonl").read_text().splitlines()
         if '"val_ppl"' in line][0]
    assert abs(r["val_ppl"] - math.exp(60)) <= 1e-12 * math.exp(60)


def test_the_patience_stop_line_names_the_evaluation_its_count_runs_from(tmp_path, tiny_text_file):
    """The tester's losses: the line named "the best val loss 2.4469 (step 150)" as the one not lowered
    by min_delta 0.5, though step 150 set it; the count runs from step 50's 2.7124."""
    lines = []
    t = Trainer(tiny_config(tmp_path / "p", tiny_text_file, train=dict(max_iters=200, eval_interval=5, patience=2,
                                                                        min_delta=0.5)), log=lines.append)
    vals = iter([4.1754, 2.7124, 2.4924, 2.4469, 1.0])
    t.evaluate = lambda: {"train": 1.0, "val": next(vals)}
    t.fit()
    assert [s for s in lines if s.startswith("stopped")] == [
        "stopped early at step 15: 2 evaluations in a row since step 5 (val loss 2.7124) without lowering the best "
        "val loss before each by train.min_delta 0.5 (train.patience 2); best.safetensors holds the best weights "
        "(val loss 2.4469, step 15)"]


def test_patience_stops_after_n_evaluations_without_improvement(tmp_path, tiny_text_file):
    t = Trainer(tiny_config(tmp_path / "p", tiny_text_file, train=dict(max_iters=200, eval_interval=5,
                                                                        patience=3, min_delta=0.01)), **QUIET)
    vals = iter([3.0, 2.0, 1.995, 2.5, 1.999, 9.0, 1.0, 1.0])
    t.evaluate = lambda: {"train": 1.0, "val": next(vals)}
    t.fit()
    s = json.loads((tmp_path / "p" / "summary.json").read_text())
    # 2.0 at step 5 is the last improvement by >= 0.01; steps 10, 15, 20 are not -> stop at 20
    assert s["stopped_by"] == "patience" and s["final_step"] == 20
    assert s["best_val_loss"] == 1.995 and s["best_val_step"] == 10  # best weights: any improvement


def test_run_summary_holds_the_whole_split_loss_of_the_best_weights(tmp_path, tiny_text_file):
    tr = Trainer(tiny_config(tmp_path / "r", tiny_text_file), **QUIET)
    run = tr.fit()
    fv = json.loads((run / "summary.json").read_text())["final_validation"]
    model, _ = load_run(run)
    want = evaluation.split_loss(model, tr.corpus.val, 16, 4, tr.corpus.tokenizer.token_chars, torch.device("cpu"))
    assert fv["tokens"] == fv["of_tokens"] == len(tr.corpus.val) - 1
    assert fv["val_loss"] == pytest.approx(want.loss, rel=1e-6) and fv["step"] == 20

    # a best checkpoint older than the last step: its weights are evaluated, not the model's own
    with torch.no_grad():
        for p in tr.raw_model.parameters():
            p.add_(torch.randn_like(p))
    tr.evaluator.final_validation(tr.raw_model, tr.step + 1, tr.run_dir, log=lambda s: None)
    assert tr.evaluator.final_val["val_loss"] == pytest.approx(want.loss, rel=1e-6)


def test_final_validation_off_leaves_the_summary_without_it(tmp_path, tiny_text_file):
    run = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(final_validation=False)), **QUIET).fit()
    assert json.loads((run / "summary.json").read_text())["final_validation"] is None


def test_spaced_windows_are_evenly_spaced_interleaved_into_batches_and_the_same_for_every_seed():
    from depthlab.training.evaluator import eval_batches

    data = np.arange(10_000, dtype=np.int64)  # token id = its position: x[:, 0] is the window's start
    T, B, k = 16, 4, 5
    starts = [x[:, 0].tolist() for x, _ in eval_batches(data, T, B, 1, "val", k)]
    n, M = B * k, len(data) - T
    want = [int((j + 0.5) * M / n) for j in range(n)]
    assert sorted(sum(starts, [])) == want  # every window once, evenly over [0, M)
    assert starts[0] == want[0::k] and starts[3] == want[3::k]  # window j in batch j mod k: each batch spans the split
    for x, y in eval_batches(data, T, B, 1, "val", k):
        assert torch.equal(y, x + 1) and int(x.max()) + 1 < len(data)  # y is x shifted; nothing past the end
    other = [x[:, 0].tolist() for x, _ in eval_batches(data, T, B, 999, "train", k)]
    assert other == starts  # no seed, no split salt: runs of one split read the same windows
    prefix = [x[:, 0].tolist() for x, _ in eval_batches(data, T, B, 1, "val", 2, of_batches=k)]
    assert prefix == starts[:2]  # fewer batches of the same layout: a prefix
    short = [x[:, 0].tolist() for x, _ in eval_batches(np.arange(T + 3), T, B, 1, "val", k)]
    assert set(sum(short, [])) <= {0, 1, 2}  # a split with 3 starts repeats them


def test_random_windows_are_the_seeded_draws_of_runs_before_eval_windows():
    from depthlab.training.evaluator import eval_batches

    data = np.arange(5_000, dtype=np.int64)
    got = [x for x, _ in eval_batches(data, 8, 3, 7, "val", 4, windows="random")]
    rng = np.random.default_rng([7, 1, 1])
    want = [get_batch(data, 8, 3, rng)[0] for _ in range(4)]
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_spaced_windows_read_the_whole_split_closer_than_random_ones():
    # a split whose second half is harder: random windows over- or under-sample it by chance, evenly spaced
    # ones take each half in proportion; both estimate the per-token mean of the whole split
    from depthlab.training.evaluator import eval_batches

    loss = np.concatenate([np.zeros(50_000), np.ones(50_000)])  # per-token loss, indexed by position
    T, B, k = 32, 8, 5

    def mean(windows, seed):
        return float(np.mean([loss[y.numpy()].mean() for _, y in eval_batches(np.arange(len(loss)), T, B, seed, "val",
                                                                              k, windows=windows)]))
    spaced = abs(mean("spaced", 0) - 0.5)
    random = [abs(mean("random", s) - 0.5) for s in range(20)]
    assert spaced < 0.01 and spaced < min(random) + 1e-12 and np.median(random) > 0.02


@pytest.mark.slow
def test_a_run_from_before_eval_windows_resumes_and_is_measured_on_its_random_windows(tmp_path, tiny_text_file,
                                                                                       capsys):
    """A run whose config.json has no train.eval_windows evaluated on windows drawn with its seed: its resume
    keeps them (the best loss it compares with was read there), and changing them on resume is refused."""
    from depthlab.cli import main
    from depthlab.resume_config import changed_fields

    from conftest import assert_clean_error, run_cli, tiny_cli_args

    out = tmp_path / "old"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__eval_windows="random",
                                         train__max_iters=10)]) == 0
    cfg = json.loads((out / "config.json").read_text())
    del cfg["train"]["eval_windows"]  # as written before the field
    (out / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    assert changed_fields(cfg, {**cfg, "train": {**cfg["train"], "eval_windows": "random"}}) == []
    assert changed_fields(cfg, {**cfg, "train": {**cfg["train"], "eval_windows": "spaced"}}) == ["train.eval_windows"]
    rc, _, err = run_cli(capsys, "train", "--resume", str(out), "--train.max_iters", "20",
                         "--train.eval_windows", "spaced")
    assert_clean_error(rc, err, "train.eval_windows 'random' -> 'spaced'")
    rc, _, err = run_cli(capsys, "train", "--resume", str(out), "--train.max_iters", "20")
    assert rc == 0, err
    assert json.loads((out / "config.json").read_text())["train"]["eval_windows"] == "random"
    # layers and context read the run's own windows: its seeded draw, not the spaced layout
    from depthlab.analytics.context import open_run
    from depthlab.config import RunConfig

    first = open_run(out, max_tokens=0).windows.batches[0][0]
    rc_cfg = RunConfig.from_dict({k: cfg[k] for k in ("data", "model", "train")})
    val = D.load_corpus(rc_cfg.data, seed=rc_cfg.train.seed).val
    rng = np.random.default_rng([rc_cfg.train.seed, 1, 1])
    assert torch.equal(first, get_batch(val, rc_cfg.model.block_size, rc_cfg.train.batch_size, rng)[0])


@pytest.mark.parametrize("eval_iters, block, val_fraction, why", [
    # was "± 0.000": a 20-character text leaves the val split one place for a window, so both batches are the
    # same windows and their means agree by construction
    (4, 4, 0.1, "no ±: its evaluation batches are all the same windows; "),
    (1, 4, 0.1, "no ±: 1 evaluation batch (train.eval_iters 1), and its error needs the spread of 4 or more; "),
    # a user's eval_iters 2 run said "± 0.006" of a mean 0.085 off the whole split: 2 means give no usable spread
    (3, 4, 0.1, "no ±: 3 evaluation batches (train.eval_iters 3), and its error needs the spread of 4 or more; "),
    (4, 2, 0.5, None),  # 10 val characters, 4 batches of 2 windows of 3: they differ, and so do their means
])
def test_a_val_loss_whose_batches_cannot_differ_has_no_plus_minus(tmp_path, capsys, eval_iters, block, val_fraction,
                                                                   why):
    from depthlab.cli import main

    (tmp_path / "tiny.txt").write_text("hello world, hi all\n")
    run = tmp_path / "r"
    assert main(["train", "--data.path", str(tmp_path / "tiny.txt"), "--model.block_size", str(block),
                 "--data.val_fraction", str(val_fraction), "--model.n_layer", "1", "--model.n_embd", "16",
                 "--model.n_head", "1", "--train.batch_size", "2", "--train.eval_iters", str(eval_iters),
                 "--train.max_iters", "3", "--train.out_dir", str(run)]) == 0
    done = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("done: ")][0]
    s = json.loads((run / "summary.json").read_text())
    recs = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    ses = [r["val_loss_se"] for r in recs if r.get("kind") == "eval"]
    if why is None:
        assert s["best_val_loss_se"] > 0 and all(se > 0 for se in ses)
        assert done.startswith(f"done: best val {s['best_val_loss']:.4f} ± {s['best_val_loss_se']:.3f} nats (")
    else:
        assert s["best_val_loss_se"] is None and ses == [None, None]
        assert done.startswith(f"done: best val {s['best_val_loss']:.4f} nats ({why}{s['best_val_bpc']:.3f} bits")
        assert "±" not in done.replace("no ±", "")
