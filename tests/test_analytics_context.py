"""analytics.context: val loss by position, context gain, the end-of-training record and ``context_unused``."""

import hashlib
import json
import math
from collections import Counter

import pytest
import torch

from depthlab.analytics.context import (context_gain, last_quarter_se, position_curve, run_context, token_losses,
                                       view_windows)
from depthlab.analytics.diagnose import Evidence, diagnose
from depthlab.errors import DepthlabError

from conftest import SHAKESPEARE_BASELINES as BASE
from conftest import context_record, run_cli, tiny_gpt
from conftest import eval_records as evals


def _conditional_entropy(pairs) -> float:
    """Empirical H(Y | X) in nats of (x, y) pairs: the lowest mean cross-entropy any predictor that sees only
    x can reach on exactly these pairs (Gibbs' inequality)."""
    joint, marg = Counter(pairs), Counter(x for x, _ in pairs)
    return -sum(c * math.log(c / marg[x]) for (x, _), c in joint.items()) / len(pairs)


def test_context_gain_is_position_0_minus_the_last_quarter_with_its_standard_error():
    lo = torch.tensor([[3.0, 2.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5],
                       [4.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.5, 1.5]])  # T 8: the last quarter is positions 6, 7
    gain, se = context_gain(lo)
    assert gain == pytest.approx(((3 - 0.5) + (4 - 1.5)) / 2)  # 2.5
    assert se == pytest.approx(0.0)  # both windows gain 2.5
    assert context_gain(lo[:, :1]) == (None, None)  # one position: nothing later to compare
    assert context_gain(torch.tensor([[2.0, 1.0, 0.0]]))[0] == pytest.approx(2.0)  # T 3: last quarter = 1 position


def test_last_quarter_standard_error_is_over_windows():
    lo = torch.tensor([[3.0, 2.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5],
                       [4.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.5, 2.5]])  # last-quarter means 0.5 and 2.0
    assert last_quarter_se(lo) == pytest.approx(math.sqrt(((0.5 - 1.25) ** 2 + (2.0 - 1.25) ** 2) / 1) / math.sqrt(2))
    assert last_quarter_se(lo[:1]) is None  # one window: no spread to measure


def test_context_use_is_claimed_only_beyond_the_sampling_error():
    """A new user's pass: "the model uses its context" from a last quarter 0.052 below the bigram line (margin
    0.05) while the gain read 0.022 ± 0.107; the bigram test had no standard error of its own."""
    from depthlab.analytics.rules.context import UNDECIDED, UNUSED, USED, context_state, context_verdict, uses_context

    curve = [2.46] * 12 + [2.43] * 4  # last quarter 2.430, 0.052 below bigram 2.482
    assert uses_context(0.022, curve, 2.482, 0.1, 0.05)  # no errors known (old records): the margin alone
    assert not uses_context(0.022, curve, 2.482, 0.1, 0.05, gain_se=0.107, lq_se=0.03)  # needs 0.06 below
    assert uses_context(0.022, curve, 2.482, 0.1, 0.05, gain_se=0.107, lq_se=0.02)  # 0.052 > 2 x 0.02
    assert not uses_context(0.15, [9.0] * 16, None, 0.1, 0.05, gain_se=0.1)  # gain inside 2 standard errors
    assert uses_context(0.15, [9.0] * 16, None, 0.1, 0.05, gain_se=0.07)
    state, words = context_verdict(0.022, 0.107, curve, bigram=2.482, unigram=3.347, lq_se=0.03)
    assert state == UNDECIDED and "last quarter 2.430 ± 0.030" in words
    assert "cannot tell whether the model uses" in words
    assert "does not use" not in words  # undecided: neither claim
    assert context_state(0.022, curve, 2.482, 0.1, 0.05) == USED
    state, words = context_verdict(0.0, 0.01, [2.6] * 16, bigram=2.482, unigram=3.347, lq_se=0.01)
    assert state == UNUSED and "does not use its context" in words  # nothing came near either line: plainly not used
    assert "0.118 nats above the bigram line 2.482" in words and "too noisy to say either way" not in words


def test_no_use_is_claimed_only_beyond_the_sampling_error():
    """A new user's pass: "does not use its context" for a gain of 0.073 ± 0.103 (as consistent with use as
    without); and "uses its context" from the bigram gap beside a gain of 0.210 ± 0.389, the gap unnamed as the
    evidence."""
    from depthlab.analytics.rules.context import UNDECIDED, UNUSED, USED, context_state, context_verdict

    noisy = [2.57] + [2.50] * 15  # gain 0.07, last quarter 2.500
    # the low-noise test decides: the last quarter stays above bigram - margin (2.432) by 2 x 0.02
    assert context_state(0.073, noisy, 2.482, 0.1, 0.05, 0.103, 0.02) == UNUSED
    state, words = context_verdict(0.073, 0.103, noisy, bigram=2.482, unigram=3.347, lq_se=0.02)
    assert "0.018 nats above the bigram line" in words
    assert "(the bigram line decides this: the gain over position 0 alone is within twice its error of 0.1" in words
    # a last quarter within twice its error of bigram - margin: neither test decides
    assert context_state(0.073, noisy, 2.482, 0.1, 0.05, 0.103, 0.04) == UNDECIDED
    assert context_state(0.073, [2.45] * 16, 2.482, 0.1, 0.05, 0.103, 0.0) == UNUSED  # only 0.032 below: < margin
    assert context_state(0.15, [2.6] * 16, 2.482, 0.1, 0.05, 0.103, 0.01) == UNDECIDED  # gain past 0.1, not 2 se
    # without a bigram line only the gain can tell: below 0.1 by twice its error
    assert context_state(0.073, noisy, None, 0.1, 0.05, 0.103, 0.02) == UNDECIDED
    assert context_state(-0.2, noisy, None, 0.1, 0.05, 0.1, None) == UNUSED
    used = [2.6] + [2.30] * 15  # the last quarter 0.182 below the bigram line; the gain 0.3 inside 2 x 0.389
    state, words = context_verdict(0.210, 0.389, used, bigram=2.482, unigram=3.347, lq_se=0.02)
    assert state == USED and "this gap below the line is the evidence" in words
    state, words = context_verdict(0.5, 0.05, used, bigram=2.482, unigram=3.347, lq_se=0.02)
    assert state == USED and "is the evidence" not in words  # the gain shows it by itself


def test_the_curve_averages_to_the_models_own_loss_on_the_same_windows():
    model = tiny_gpt(seed=4).eval()
    w = view_windows(torch.randint(0, 11, (400,), generator=torch.Generator().manual_seed(0)).numpy(), 8, 4, 1337, 3)
    assert w.windows == 12 and w.tokens == 96 and len(w.batches) == 3
    c = position_curve(model, w)
    with torch.no_grad():
        own = sum(float(model(x, y)[1]) for x, y in w.batches) / 3
    assert len(c["loss_by_position"]) == 8 and c["val_loss"] == pytest.approx(own, abs=1e-5)
    assert sum(c["loss_by_position"]) / 8 == pytest.approx(own, abs=1e-5)
    assert c["last_quarter_se"] == pytest.approx(last_quarter_se(token_losses(model, w.batches)), rel=1e-9)
    assert c["last_quarter_se"] > 0
    assert view_windows(w.batches[0][0].flatten().numpy().repeat(20), 8, 4, 1337, 3, max_tokens=40).windows == 4


@pytest.mark.slow  # over a second: the fast tier stays under 3 min
def test_a_trained_runs_position_0_and_embedding_lens_cannot_beat_one_character(report_run):
    """Position 0 and the lens of the embeddings see one character (and a position): on the same windows their
    loss is at least the empirical conditional entropy a one-character predictor is bounded by."""
    from depthlab.analytics.context import load_weights
    from depthlab.analytics.layers import measure_layers
    from depthlab.config import RunConfig
    from depthlab.data import load_corpus

    cfg = RunConfig.from_dict(json.loads((report_run / "config.json").read_text()))
    # 512 windows, not the run's 8: with few samples the one-character floor is near 0 and proves nothing
    w = view_windows(load_corpus(cfg.data, seed=cfg.train.seed).val, 16, 64, cfg.train.seed, 8, max_tokens=0)
    model, _ = load_weights(report_run)
    lo = token_losses(model, w.batches)  # (W, T)
    x, y = torch.cat([b[0] for b in w.batches]), torch.cat([b[1] for b in w.batches])
    floor0 = _conditional_entropy(list(zip(x[:, 0].tolist(), y[:, 0].tolist())))
    assert floor0 > 0.3 and float(lo[:, 0].mean()) >= floor0 - 1e-5
    T = x.shape[1]
    floor_emb = _conditional_entropy([((int(a), t % T), int(b)) for t, (a, b) in
                                      enumerate(zip(x.flatten(), y.flatten()))])
    assert floor_emb > 0.3 and measure_layers(model, w.batches)["embedding_lens_loss"] >= floor_emb - 1e-5


def test_the_trainer_records_the_final_curve_and_context_reads_the_same(report_run, capsys):
    recs = [json.loads(r) for r in (report_run / "metrics.jsonl").read_text().splitlines()]
    rec = [r for r in recs if r.get("event") == "context"][-1]
    assert rec["kind"] == "event" and rec["step"] == 20 and len(rec["loss_by_position"]) == 16
    assert rec["windows"] == 8 and rec["tokens"] == 128
    res = run_context(report_run, "last")  # the final weights, the same windows
    assert res["loss_by_position"] == pytest.approx(rec["loss_by_position"], abs=1e-6)
    assert res["context_gain"] == pytest.approx(rec["context_gain"], abs=1e-6)
    assert [(c["label"], c["step"]) for c in res["checkpoints"]] == [("step 10", 10), ("best = step 20", 20)]
    assert res["checkpoints"][-1]["context_gain"] == pytest.approx(rec["context_gain"], abs=1e-6)  # best is last
    rc, out, _ = run_cli(capsys, "context", str(report_run), "--json")
    j = json.loads(out)
    assert rc == 0 and {"loss_by_position", "unigram", "bigram", "context_gain"} <= set(j)
    assert j["bigram"] == json.loads((report_run / "baselines.json").read_text())["bigram"]["nats"]
    rc, out, _ = run_cli(capsys, "context", str(report_run))
    # was "cannot beat the bigram line", which is fitted on the train split and lies above what one token allows
    floor = j["one_char_floor"]
    assert rc == 0 and 0 < floor < j["bigram"]
    assert (f"so it cannot go below the one-character floor {floor:.3f} (the best any predictor that sees one "
            "character does on this val split; the bigram line, fitted on the train split, lies above it) beyond its "
            "sampling error") in out
    assert f"context gain {j['context_gain']:.3f}" in out


def _ev(curve, variant="plain", block_size=None):
    cfg = {"model": {"vocab_size": 65, "variant": variant, "block_size": block_size or len(curve)}}
    return Evidence(evals([4.2, 3.0, 2.5]) + [context_record(200, curve)], cfg, BASE)


def test_context_unused_fires_on_a_flat_curve_and_names_the_knobs():
    flat = [2.49] * 12 + [2.50] * 4  # bigram 2.482: position 0 at the bigram line and no lower later
    d = diagnose(_ev(flat))
    f = [f for f in d.findings if f.rule == "context_unused"]
    assert len(f) == 1 and "context gain -0.010" in f[0].evidence and "do not beat position 0" in f[0].evidence
    assert "use model.variant prenorm" in f[0].remedy and "raise model.block_size, now 16" in f[0].remedy
    prenorm = [x.remedy for x in diagnose(_ev(flat, "prenorm")).findings if x.rule == "context_unused"][0]
    assert "model.variant prenorm has a shortcut" in prenorm and "is_causal" in prenorm
    used = [2.5] + [1.9] * 15  # later positions well below position 0 and the bigram line
    assert not [x for x in diagnose(_ev(used)).findings if x.rule == "context_unused"]
    lower = [2.49] * 12 + [2.40] * 4  # gain 0.09 < 0.1, but the last quarter is 0.08 below the bigram line
    assert not [x for x in diagnose(_ev(lower)).findings if x.rule == "context_unused"]


def test_diagnose_names_no_cause_for_an_undecided_curve():
    """context_unused is a finding only when the numbers show no use, not when the windows are too few to tell."""
    def findings(curve, gain_se, lq_se):
        ev = _ev(curve, "prenorm")
        rec = ev.records[-1]
        rec.update(context_gain_se=gain_se, last_quarter_se=lq_se)
        return [f for f in diagnose(ev).findings if f.rule == "context_unused"]

    near = [2.46] * 12 + [2.43] * 4  # gain 0.03, last quarter 0.052 below bigram 2.482
    assert findings(near, 0.107, 0.03) == []  # undecided: 0.052 < 2 x 0.03
    assert findings(near, 0.107, 0.02) == []  # used: 0.052 > 2 x 0.02
    flat = [2.49] * 12 + [2.50] * 4
    f = findings(flat, 0.1, 0.01)
    assert len(f) == 1 and "last quarter 2.500 ± 0.010" in f[0].evidence and "does not use" in f[0].evidence


def test_diagnose_reads_copies_of_one_window_as_one_window():
    """A record of 64 windows that are copies of one (distinct_windows 1): diagnose named a cause from a flat curve
    whose spread of 0 was no error; now it is one window, which cannot tell."""
    flat = [2.49] * 12 + [2.50] * 4
    ev = _ev(flat)
    ev.records[-1].update(distinct_windows=1, context_gain_se=None, last_quarter_se=None)
    assert not [f for f in diagnose(ev).findings if f.rule == "context_unused"]
    ev.records[-1].update(distinct_windows=64)
    assert [f for f in diagnose(ev).findings if f.rule == "context_unused"]


def test_context_unused_is_not_judged_without_a_record():
    d = diagnose(Evidence(evals([4.2, 3.0, 2.5]), {"model": {"vocab_size": 65}}, BASE))
    assert any(w.startswith("context_unused, causal_leak (no loss-by-position record") for w in d.without_data())


def test_bad_input_to_the_depth_views_is_one_line(report_run, tmp_path, capsys):
    from conftest import cli_err

    for cmd in ("layers", "context"):
        assert "not found" in cli_err(capsys, cmd, str(tmp_path / "none"))
        assert "--max_tokens must be >= 0" in cli_err(capsys, cmd, str(report_run), "--max_tokens", "-1")
        assert "--checkpoint" in cli_err(capsys, cmd, str(report_run), "--checkpoint", "middle")


def test_a_damaged_config_json_is_named_by_every_reader(report_run, tmp_path, capsys):
    from conftest import cli_err, fresh_copy, run_cli

    run = fresh_copy(report_run, tmp_path / "run")
    cfg = run / "config.json"
    cfg.write_text('{"model": {')  # cut off mid-write
    for cmd in ("layers", "context", "diagnose"):
        assert f"{cfg} is not the JSON object depthlab wrote" in cli_err(capsys, cmd, str(run))
    for bad, section in (('{"data": {}, "model": 5, "train": {}}', '"model": 5'),
                         ('{"data": {}, "model": "gpt", "train": {}}', '"model": "gpt"'),
                         ('{"data": {}, "model": null, "train": {}}', '"model": null'),
                         ('{"data": [], "model": {}, "train": {}}', '"data": []')):
        cfg.write_text(bad)  # whole JSON, one section not an object: the section is named, the fix is an edit
        for cmd in ("layers", "context", "diagnose", "report"):
            err = cli_err(capsys, cmd, str(run))
            assert f"{cfg}: {section} is not the object depthlab wrote there (edited by hand?); put back the " \
                   "section" in err, (bad, cmd, err)
        rc, out, err = run_cli(capsys, "sample", str(run), "--max-new-tokens", "5")  # the checkpoint holds a copy
        assert rc == 0 and f"{cfg} is not the JSON depthlab wrote" in err and "sampling uses the copy" in err, err
    cfg.write_text('{"data": {}, "train": {}}')  # the section deleted: no key to show as null
    for cmd in ("layers", "context", "diagnose", "report"):
        err = cli_err(capsys, cmd, str(run)).strip()
        assert err == (f'depthlab: error: {cfg}: it has no "model" section, which depthlab wrote there (edited by '
                       "hand?); put back the section as depthlab wrote it, or restore config.json from a copy"), cmd


@pytest.mark.slow  # several seconds on 2 cores: the fast tier stays under 3 min
def test_a_config_json_edited_against_its_checkpoint_is_named_by_every_reader(report_run, tmp_path, capsys):
    from conftest import cli_err, fresh_copy, run_cli

    run = fresh_copy(report_run, tmp_path / "run")
    cfg = json.loads((run / "config.json").read_text())
    cfg["data"]["tokenizer"] = "bpe"  # had read the char run's weights through a new BPE encoding: IndexError
    (run / "config.json").write_text(json.dumps(cfg))
    edit = "differs from the checkpoint step-000020 (the config its weights were trained with): data.tokenizer " \
           "'char' -> 'bpe' (checkpoint -> config.json)"
    for cmd in ("layers", "context"):
        assert f"cannot measure {run}: its config.json {edit}" in cli_err(capsys, cmd, str(run))
    for cmd in ("diagnose", "report"):
        rc, out, err = run_cli(capsys, cmd, str(run))
        assert rc == 0 and f"warning: {run / 'config.json'}: {edit} (edited by hand?)" in err, err


def test_a_damaged_run_file_is_named_not_read_as_other_data(report_run, tmp_path, capsys):
    from conftest import cli_err, fresh_copy

    from depthlab.report import build_report

    run = fresh_copy(report_run, tmp_path / "run")
    cfg = run / "config.json"
    (run / "report.html").write_text("the good report")
    cfg.write_text("[1, 2]")  # valid JSON, not a config
    assert f"{cfg} is not the JSON object depthlab wrote" in cli_err(capsys, "report", str(run))
    assert (run / "report.html").read_text() == "the good report"
    with pytest.raises(DepthlabError, match="is not the JSON object depthlab wrote"):
        build_report(run)
    rc, out, err = run_cli(capsys, "sample", str(run), "--max_new_tokens", "5")
    assert rc == 0 and "Traceback" not in err  # the weights and their vocabulary are in the checkpoint
    assert f"warning: {cfg} is not the JSON depthlab wrote" in err and "vocab.json" not in err
    # a damaged vocab.json is named on resume instead of blamed on the corpus
    c = json.loads((report_run / "config.json").read_text())
    del c["resolved"]["corpus_sha256"]  # nothing says the corpus is the run's: not written again from it
    cfg.write_text(json.dumps(c))
    (run / "vocab.json").write_text('["a", ')
    err = cli_err(capsys, "train", "--resume", str(run))
    assert "vocab.json is not the JSON list of characters" in err and "vocabulary differs" not in err
    for vocab, config in [('["a", ', None), ("[1, 2]", None), (None, "{}")]:  # JSON of the wrong shape too
        if vocab is not None:
            (run / "vocab.json").write_text(vocab)
        if config is not None:
            (run / "vocab.json").write_text((report_run / "vocab.json").read_text())
            cfg.write_text(config)
        rc, out, err = run_cli(capsys, "sample", str(run), "--max_new_tokens", "5")
        bad = run / ("vocab.json" if vocab is not None else "config.json")
        assert rc == 0 and f"warning: {bad} is not the JSON depthlab wrote" in err and err.count("warning") == 1, err
    for name in ("vocab.json", "config.json"):  # a deleted file is said too, and the text still comes
        (run / "vocab.json").write_text((report_run / "vocab.json").read_text())
        cfg.write_text((report_run / "config.json").read_text())
        (run / name).unlink()
        rc, out, err = run_cli(capsys, "sample", str(run), "--max_new_tokens", "5")
        assert rc == 0 and len(out) >= 5 and err.count("warning") == 1, err
        assert f"warning: {run / name} is missing (deleted?); sampling uses the copy inside the checkpoint" in err


def test_damaged_metrics_lines_are_counted_and_diagnose_says_so(report_run, tmp_path, capsys):
    from conftest import fresh_copy

    from depthlab.rundir import damaged_metrics_lines

    run = fresh_copy(report_run, tmp_path / "run")
    m = run / "metrics.jsonl"
    lines = m.read_text().splitlines()
    m.write_text("\n".join(lines) + '\n{"torn": ')  # a torn last line is no damage of a live run
    assert damaged_metrics_lines(run) == 0
    rc, _, err = run_cli(capsys, "diagnose", str(run))
    assert rc == 0 and err.count("warning") == 1 and "cut mid-record, though the run finished" in err
    (run / "summary.json").unlink()  # a run still training (a resume removes it until its end)
    rc, _, err = run_cli(capsys, "diagnose", str(run))
    assert rc == 0 and "damaged" not in err and "cut" not in err
    lines[1] = "garb{"
    lines[2] = "[1, 2]"
    m.write_text("\n".join(lines) + "\n")
    assert damaged_metrics_lines(run) == 2
    rc, _, err = run_cli(capsys, "diagnose", str(run))
    assert rc == 0 and "warning: 2 lines of" in err and "not JSON records (damaged)" in err


def test_a_whole_junk_last_line_is_damage_not_a_cut_record(report_run, tmp_path, capsys):
    """A new user's pass: `echo 'garbage line' >> metrics.jsonl` on a finished run made diagnose say the last line
    "is cut mid-record ... its last record is lost" (every record was intact), and a resume dropped it unsaid."""
    from conftest import fresh_copy

    from depthlab.rundir import damaged_metrics_lines, read_metrics, torn_last_line

    run = fresh_copy(report_run, tmp_path / "run")
    m = run / "metrics.jsonl"
    good = read_metrics(run)
    m.write_text(m.read_text() + "garbage line\n")
    assert damaged_metrics_lines(run) == 1 and not torn_last_line(run) and read_metrics(run) == good
    rc, _, err = run_cli(capsys, "diagnose", str(run))
    assert rc == 0 and [x for x in err.splitlines() if "warning" in x] == [
        f"depthlab: warning: 1 line of {m} is not a JSON record (damaged): the rules judge the run without what was "
        "lost"], err
    step = json.loads((run / "summary.json").read_text())["final_step"]
    rc, _, err = run_cli(capsys, "train", "--resume", str(run), "--train.max_iters", str(step + 1))
    assert rc == 0 and ("warning: 1 line of metrics.jsonl was not a JSON record (damaged); the resumed run drops it, "
                        "and its figures and diagnosis lack what it held") in err, err
    assert "garbage" not in m.read_text()
    m.write_text(m.read_text() + '{"step": 3, "kind": "tr')  # cut before its newline: a torn write, no damage
    assert damaged_metrics_lines(run) == 0 and torn_last_line(run)


def test_records_with_a_step_that_is_not_an_integer_are_damage_not_a_crash(report_run, tmp_path, capsys):
    """JSON lines with the wrong types crashed diagnose (ValueError, OverflowError) and resume (TypeError) with
    "unexpected ... please report" (a new user's pass): now they are damaged lines like any other."""
    from conftest import fresh_copy

    from depthlab.rundir import damaged_metrics_lines, read_metrics

    run = fresh_copy(report_run, tmp_path / "run")
    m = run / "metrics.jsonl"
    good = read_metrics(run)
    m.write_text(m.read_text() + '{"step": "abc", "kind": "eval", "val_loss": "x"}\n{"kind": "eval", "step": 1e400, '
                 '"val_loss": NaN}\n{"step": -3}\n{"step": true}\n' + m.read_text().splitlines()[-1] + "\n")
    assert damaged_metrics_lines(run) == 4 and len(read_metrics(run)) == len(good) + 1
    rc, _, err = run_cli(capsys, "diagnose", str(run))
    assert rc == 0 and "warning: 4 lines of" in err and "unexpected" not in err, err
    step = json.loads((run / "summary.json").read_text())["final_step"]
    rc, _, err = run_cli(capsys, "train", "--resume", str(run), "--train.max_iters", str(step + 1))
    assert rc == 0 and "unexpected" not in err, err


def test_a_run_whose_checkpoints_were_deleted_is_named_as_a_run(report_run, tmp_path, capsys):
    """sample said "is not a depthlab run directory (no checkpoints/manifest.json); give the out_dir of a depthlab
    train run" of a run whose checkpoints were deleted: the fix it named was wrong."""
    import shutil

    from conftest import fresh_copy

    run = fresh_copy(report_run, tmp_path / "run")
    (run / "checkpoints" / "manifest.json").unlink()  # the manifest alone: the step checkpoints are still there
    rc, _, err = run_cli(capsys, "sample", str(run), "--max_new_tokens", "5")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{run} is a depthlab run, but its checkpoints/manifest.json is missing" in err
    assert "restore it from a copy or train the run again" in err and "not a depthlab run" not in err
    shutil.rmtree(run / "checkpoints")
    steps = json.loads((run / "summary.json").read_text())["final_step"]
    # nu36: context and layers said "RUN has no checkpoint yet" of a finished run; sample and export said only that
    # the manifest was missing, in other words than these two
    for cmd in ("context", "layers", "sample", "export"):
        rc, _, err = run_cli(capsys, cmd, str(run), *([str(tmp_path / "hf")] if cmd == "export" else []))
        assert rc == 2 and len(err.strip().splitlines()) == 1, err
        assert f"depthlab: error: {run} holds no checkpoint, though summary.json says {steps} steps were trained: " \
            "its checkpoints/ was deleted or emptied; restore it from a copy or train the run again" in err, err
        assert "yet" not in err


@pytest.mark.slow  # several seconds on 2 cores: the fast tier stays under 3 min
def test_report_and_diagnose_warn_of_damaged_empty_metrics_and_summary(report_run, tmp_path, capsys):
    """report said nothing of a metrics.jsonl of random bytes (its page: 'Not recorded in this run') or of a damaged
    summary.json ('the run did not finish'); diagnose said nothing of an emptied metrics.jsonl (a new user's pass)."""
    from conftest import fresh_copy

    run = fresh_copy(report_run, tmp_path / "run")
    m, sm = run / "metrics.jsonl", run / "summary.json"
    m.write_bytes(b"\x9e\xff\x00garbage\n" * 3 + b"\n")
    rc, _, err = run_cli(capsys, "report", str(run))
    # the last of the 3 lines ends with its newline: whole, so damage, not a torn write
    assert rc == 0 and "warning: 3 lines of" in err and "the report shows the run without what was lost" in err
    m.write_text("")
    rc, _, err = run_cli(capsys, "diagnose", str(run))
    assert rc == 0 and f"warning: {m} holds no records, though summary.json says" in err, err
    m.write_text("x")  # one cut line and nothing else: one warning, not two (a new user's pass)
    rc, _, err = run_cli(capsys, "report", str(run))
    assert rc == 0 and f"warning: {m} holds no records" in err and err.count("metrics.jsonl") == 1, err
    sm.write_bytes(b"\x00\x01 not json")
    rc, _, err = run_cli(capsys, "report", str(run))
    assert rc == 0 and f"warning: {sm} is not the JSON object depthlab wrote (damaged): read as missing" in err, err


def test_binary_or_folder_metrics_is_one_line_or_read_as_damage(report_run, tmp_path, capsys):
    """A metrics.jsonl of random bytes printed Python's UnicodeDecodeError from diagnose/report/sample, and a
    folder in its place an IsADirectoryError (a new user's pass): now damage that is said, or one line naming it."""
    from conftest import fresh_copy

    from depthlab.rundir import damaged_metrics_lines

    run = fresh_copy(report_run, tmp_path / "run")
    m = run / "metrics.jsonl"
    m.write_bytes(m.read_bytes() + b"\x9e\xff\x00garbage\n" + m.read_bytes().splitlines(keepends=True)[-1])
    assert damaged_metrics_lines(run) == 1
    rc, _, err = run_cli(capsys, "diagnose", str(run))
    assert rc == 0 and "warning: 1 line of" in err and "is not a JSON record (damaged)" in err, err
    rc, out, err = run_cli(capsys, "sample", str(run), "--max_new_tokens", "5")
    assert rc == 0 and "Error" not in err, err
    m.unlink()
    m.mkdir()
    for cmd in ("report", "diagnose", "context"):  # diagnose had said "no metrics.jsonl" of a folder
        rc, _, err = run_cli(capsys, cmd, str(run))
        assert rc == 2 and f"depthlab: error: {m} is not a file" in err and len(err.strip().splitlines()) == 1, err
    rc, out, err = run_cli(capsys, "sample", str(run), "--max_new_tokens", "5")  # needs no metrics
    assert rc == 0 and "Error" not in err, err
    m.rmdir()
    m.write_bytes(b"")
    c = run / "config.json"  # a folder in config.json's place: report had said "No config.json in this run"
    c.rename(run / "config.saved")
    c.mkdir()
    for cmd in ("report", "diagnose", "context"):
        rc, _, err = run_cli(capsys, cmd, str(run))
        assert rc == 2 and f"depthlab: error: {c} is not a file" in err and len(err.strip().splitlines()) == 1, err
    assert not (run / "report.html").exists()


def test_context_on_early_weights_says_it_is_too_early_to_judge(tmp_path):
    from depthlab.analytics.context import format_context

    T = 16
    flat = [2.5] * T  # later positions no better than position 0: unused context
    falling = [2.5 - 0.1 * t for t in range(T)]

    def res(curve, step):
        gain = curve[0] - sum(curve[3 * T // 4:]) / (T // 4)
        return {"loss_by_position": curve, "position_se": [0.01] * T, "bigram": 2.45, "unigram": 3.2,
                "context_gain": gain, "context_gain_se": 0.01, "checkpoints": [], "run_dir": str(tmp_path),
                "weights": f"step-{step:06d}.safetensors", "windows_described": "2 windows", "step": step}

    assert "these weights are from step 80" in format_context(res(flat, 80))
    assert "these weights are from step" not in format_context(res(flat, 400))  # late enough: the verdict stands
    assert "these weights are from step" not in format_context(res(falling, 80))  # it uses its context already


def test_a_curve_above_the_bigram_line_is_not_called_below_it():
    from depthlab.analytics.rules.context import context_verdict

    curve = [3.0] * 4 + [2.6] * 12  # gain 0.4, last quarter 2.6
    used, words = context_verdict(0.4, 0.01, curve, bigram=2.5, unigram=3.3)
    # a new user's pass: a gain while the last quarter stays above the bigram line came from the position alone
    # (swapping the context for another window's did not change the loss): not "uses its context"
    assert used == "undecided" and "still 0.100 nats above the bigram line 2.500" in words
    assert "nats below" not in words
    assert "can come from the position alone" in words and "uses its context" not in words
    used, words = context_verdict(0.4, 0.01, curve, bigram=2.7, unigram=3.3)
    assert used == "used" and "0.100 nats below the bigram line" in words


def test_position_0_near_the_uniform_line_is_not_called_at_the_unigram_line():
    """A 1-step run's position 0 read 4.114 (uniform 4.174, unigram 3.347) and context said it was "at the unigram
    line" (a new user's pass)."""
    from depthlab.analytics.rules.context import context_verdict

    used, words = context_verdict(0.0, 0.01, [4.114] * 16, bigram=2.482, unigram=3.347)
    assert used == "unused" and "0.767 nats above the unigram line" in words and "at the unigram line" not in words
    used, words = context_verdict(0.0, 0.01, [3.36] * 16, bigram=2.482, unigram=3.347)
    assert used == "unused" and "position 0 is at the unigram line" in words


def test_corrupt_checkpoints_are_warning_lines_and_the_advice_fits_what_is_left(report_run, tmp_path, capsys):
    """Every weights file replaced: context printed Python's UserWarning format (path, source line) and then
    advised --checkpoint last, which was corrupt too (a new user's pass)."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(report_run, run)
    for f in (run / "checkpoints").glob("*.safetensors"):
        f.write_bytes(b"garbage")
    rc, _, err = run_cli(capsys, "context", str(run), "--checkpoint", "last")
    lines = err.strip().splitlines()
    assert rc == 2 and lines[-1].startswith("depthlab: error: no intact step checkpoint")
    # which files are damaged is in the error itself (no "falling back" warnings: there is nothing to fall back to)
    assert len(lines) == 1 and lines[0].endswith("(step-000020.safetensors fails its sha256, "
                                                 "step-000010.safetensors fails its sha256); restore "
                                                 f"{run / 'checkpoints'} from a copy of the run, or train the run "
                                                 "again"), lines
    rc, _, err = run_cli(capsys, "context", str(run))
    assert rc == 2 and "no step checkpoint is intact either" in err and "try --checkpoint last" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow  # a few seconds: the fast tier stays under 3 min
def test_report_says_which_weights_files_are_damaged(report_run, tmp_path, capsys):
    """Every weights file replaced: the report page said 'Not recorded in this run' of the figures drawn from the
    weights, and nothing on the console (a new user's pass)."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(report_run, run)
    bad = sorted(f.name for f in (run / "checkpoints").glob("*.safetensors"))
    for name in bad:
        (run / "checkpoints" / name).write_bytes(b"garbage")
    rc, _, err = run_cli(capsys, "report", str(run))
    assert rc == 0 and f"{len(bad)} weights files in {run / 'checkpoints'} are missing or fail their sha256" in err
    assert ", ".join(bad[:4]) in err and "the report leaves out what it draws from them" in err
    shutil.copy(report_run / "checkpoints" / bad[0], run / "checkpoints" / bad[0])
    rc, _, err = run_cli(capsys, "diagnose", str(run))
    assert rc == 0 and "weights file" not in err  # diagnose reads records only


def test_a_cut_last_line_is_named_as_the_reason_the_record_is_missing(report_run, tmp_path, capsys):
    """A new user's pass: metrics.jsonl cut mid-line gave no warning, and context_unused's reason blamed "runs
    stopped before their end" of a run that had finished."""
    from conftest import fresh_copy

    run = fresh_copy(report_run, tmp_path / "run")
    m = run / "metrics.jsonl"
    lines = m.read_text().splitlines()
    ctx = [ln for ln in lines if '"event": "context"' in ln]
    assert len(ctx) == 1
    text = "".join(ln + "\n" for ln in lines if ln not in ctx) + ctx[0] + "\n"  # last, as a finished run's is
    m.write_text(text[: len(text) - 40])
    rc, out, err = run_cli(capsys, "diagnose", str(run))
    assert rc == 0 and err.count("warning:") == 1 and "is cut mid-record, though the run finished" in err
    assert "context_unused, causal_leak (no loss-by-position record" in out and "is cut mid-record (damaged)" in out
    assert "runs stopped before their end" not in out
    m.write_text("".join(ln + "\n" for ln in lines if json.loads(ln)["step"] <= 15))  # the run's end cut off
    rc, out, err = run_cli(capsys, "diagnose", str(run))
    assert "records of" in err and "end at step 15, though summary.json says the run trained to step 20" in err
    assert "its readable records end at step 15: the record of the run's end is among what is missing" in out


def test_position_0_below_the_bigram_line_is_a_leak_not_context_use():
    """A new user's pass: a model without a causal mask (position 0 at 0.628 against the bigram line 2.482, se
    0.17) was told it "uses its context", and diagnose found nothing."""
    from depthlab.analytics.rules.context import LEAKS, UNDECIDED, context_verdict

    leaky = [0.628] + [0.9] * 27 + [3.457] * 4  # every position sees its target but the last
    floor = 2.374  # the Shakespeare val split's own one-character conditional entropy
    state, words = context_verdict(-0.9, 0.2, leaky, bigram=2.482, unigram=3.347, pos0_se=0.17, floor=floor)
    assert state == LEAKS and "position 0 is 1.746 nats below 2.374, the lowest loss a model that sees only" in words
    assert "uses its context" not in words and "leaking causal mask" in words
    assert context_verdict(-0.9, 0.2, leaky, bigram=2.482, unigram=3.347, pos0_se=0.17)[0] != LEAKS  # no floor known
    assert context_verdict(0.0, 0.2, [2.1] * 16, 2.482, 3.347, pos0_se=0.17, floor=floor)[0] != LEAKS  # 0.27 < 2 se
    # below the smoothed bigram baseline but above the floor: no leak (a model can beat an add-one estimate)
    assert context_verdict(0.0, 0.01, [2.42] * 16, 2.482, 3.347, pos0_se=0.01, floor=floor)[0] != LEAKS
    cfg = {"model": {"vocab_size": 65, "variant": "prenorm", "block_size": len(leaky)}}
    d = diagnose(Evidence(evals([4.2, 3.0, 2.5]) + [context_record(200, leaky)], cfg,
                          {**BASE, "one_char_floor": {"nats": floor}}))
    f = [x for x in d.findings if x.rule == "causal_leak"]
    assert len(f) == 1 and not [x for x in d.findings if x.rule == "context_unused"]
    assert "is_causal (tested)" in f[0].remedy  # depthlab's GPT: the baselines are another corpus's
    # one window has no error to judge by, and the advice drops a flag already given
    state, words = context_verdict(0.0, None, [2.6] * 16, bigram=2.482, unigram=3.347, windows=1, advice="ADVICE")
    assert state == UNDECIDED and "one window (or copies of one) has no sampling error" in words and "(ADVICE)" in words
    state, words = context_verdict(0.038, 0.016, [2.6] * 16, bigram=2.482, unigram=3.347, lq_se=0.01)
    assert "the later positions do not beat position 0 by 0.1 nats" in words  # 0.038 is > 2 se, < 0.1


def test_a_bigram_estimate_above_the_unigram_is_not_the_line():
    """A new user's pass: i.i.d. text over 700 characters (unigram 4.544, add-one bigram 4.780): context said "uses
    its context; the last quarter is 0.209 nats below the bigram line"."""
    from depthlab.analytics.rules.context import USED, context_verdict

    state, words = context_verdict(0.0, 0.01, [4.571] * 16, bigram=4.780, unigram=4.544, lq_se=0.01)
    assert state != USED and "one-token line (the unigram baseline" in words and "4.544" in words
    state, words = context_verdict(0.2, 0.05, [4.7] * 4 + [4.462] * 12, bigram=2.482, unigram=3.347, lq_se=0.01)
    assert "still 1.980 nats above the bigram line" in words  # the usual case: the bigram line
    state, words = context_verdict(0.3, 0.05, [2.76] * 4 + [2.46] * 12, bigram=2.482, unigram=3.347, lq_se=0.01)
    assert state == "undecided" and "only 0.022 nats below the bigram line 2.482" in words  # was "-0.020 above"
    assert "not below 2.432 (the line less 0.05 or twice its error)" in words


def test_a_corpus_that_gained_characters_is_one_line(tiny_text_file, tmp_path, capsys):
    """A new user's pass: characters appended to the run's corpus made context/layers fail with "unexpected
    IndexError ... please report it"."""
    from conftest import QUIET, assert_clean_error, tiny_config

    from depthlab import train

    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4)), **QUIET)
    text = tiny_text_file.read_text()
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["resolved"]["corpus_sha256"] == hashlib.sha256(tiny_text_file.read_bytes()).hexdigest()
    tiny_text_file.write_text(text + "@#~ZQ")
    for cmd in ("context", "layers"):
        rc, _, err = run_cli(capsys, cmd, str(run))
        assert_clean_error(rc, err, "changed since training (its sha256 is not the one in config.json's resolved")
    del cfg["resolved"]["corpus_sha256"]  # a run from before the record: its vocab.json still tells
    (run / "config.json").write_text(json.dumps(cfg))
    for cmd in ("context", "layers"):
        rc, _, err = run_cli(capsys, cmd, str(run))
        assert_clean_error(rc, err, "no longer has the characters of the run's vocab.json")


def test_an_edited_corpus_without_vocab_json_is_refused_not_measured(tiny_text_file, tmp_path, capsys):
    """A new user's pass: with vocab.json deleted and the corpus edited (same characters), context and layers
    measured the new text as the run's val split; diagnose recomputed the deleted baselines from it."""
    from conftest import QUIET, assert_clean_error, tiny_config

    from depthlab import train

    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4)), **QUIET)
    (run / "vocab.json").unlink()
    (run / "baselines.json").unlink()
    assert Evidence.from_run(run).baselines["bigram"]["nats"] > 0  # recomputed from the same corpus
    text = tiny_text_file.read_text()
    tiny_text_file.write_text(text[::-1])  # the same characters, reversed
    for cmd in ("context", "layers"):
        rc, _, err = run_cli(capsys, cmd, str(run))
        assert_clean_error(rc, err, f"the corpus {tiny_text_file} changed since training")
    assert Evidence.from_run(run).baselines is None  # not another text's lines


def test_bigram_stuck_does_not_contradict_the_loss_by_position():
    """A new user's pass: healthy 250-step pre-LN runs at the bigram level got bigram_stuck's "uses almost none of
    the context" while `context` on the same weights said the windows cannot tell."""
    def rules(curve, gain_se, lq_se):
        ev = _ev(curve, "prenorm")
        ev.records[-1].update(context_gain_se=gain_se, last_quarter_se=lq_se)
        return {f.rule for f in diagnose(ev).findings}

    flat = [2.49] * 12 + [2.50] * 4  # unused beyond its error: both findings stand
    assert {"bigram_stuck", "context_unused"} <= rules(flat, 0.1, 0.01)
    near = [2.76] * 4 + [2.46] * 12  # a gain of 0.3 with the last quarter only 0.022 below the line: undecided
    assert "bigram_stuck" not in rules(near, 0.05, 0.01) and "context_unused" not in rules(near, 0.05, 0.01)
    # ... and said as not judged, with the loss level it is about (a new user's pass: it was silently dropped)
    ev = _ev(near, "prenorm")
    ev.records[-1].update(context_gain_se=0.05, last_quarter_se=0.01)
    said = [w for w in diagnose(ev).without_data() if w.startswith("bigram_stuck")]
    assert said == ["bigram_stuck (the best val loss 2.500 nats is 0.018 above the bigram baseline 2.482 (what the "
                    "current character alone gives), inside the rule's margin of 0.05, but the run's loss by position "
                    "cannot tell whether the context "
                    "is used (more windows: depthlab context RUN --max_tokens 0 reads all of the run's evaluation "
                    "windows, or a larger train.eval_iters))"], said
    ev.records[-1]["all_windows"] = True  # the record read every window: the command would read the same
    said = [w for w in diagnose(ev).without_data() if w.startswith("bigram_stuck")]
    assert said[0].endswith("cannot tell whether the context is used (more windows: a larger train.eval_iters))"), said


@pytest.mark.slow  # several seconds on 2 cores: the fast tier stays under 3 min
def test_a_hand_edited_baselines_json_is_damaged_not_a_crash(report_run, tmp_path, capsys):
    """A new user's pass: valid JSON of another shape in baselines.json ({"bigram": 2.4}, a null or text nats, no
    "uniform") made diagnose, report, context and layers fail with "unexpected ...Error ... please report it"."""
    from conftest import fresh_copy

    run = fresh_copy(report_run, tmp_path / "run")
    good = json.loads((run / "baselines.json").read_text())
    bads = ({"bigram": 2.4}, {**good, "bigram": {"nats": None}}, {**good, "bigram": {}},
            {**good, "bigram": {"nats": "abc"}}, {k: good[k] for k in ("unigram", "bigram")}, {**good, "unigram": 7})
    for i, bad in enumerate(bads):
        (run / "baselines.json").write_text(json.dumps(bad))
        # one reader checks the shape for every command: each shape through diagnose, two through all four
        for cmd in ("diagnose", "report", "context", "layers") if i < 2 else ("diagnose",):
            rc, out, err = run_cli(capsys, cmd, str(run))
            assert rc == 0 and "unexpected" not in err, (bad, cmd, err)
            said = ("is not the JSON depthlab wrote" in err if cmd in ("diagnose", "report")
                    else "(recomputed from the corpus: baselines.json is damaged" in out
                    and f"warning: {run / 'baselines.json'}: the corpus baselines are recomputed from the corpus: "
                        "baselines.json is damaged" in err)  # on stderr, as diagnose and report warn
            assert said, (bad, cmd, out, err)
        (run / "report.html").unlink(missing_ok=True)


def test_a_moved_corpus_is_named_with_a_fix_that_applies(tiny_text_file, tmp_path, capsys):
    """A new user's pass: with the run's corpus moved, context said "give an existing text file (or leave data.path
    unset for the embedded Tiny Shakespeare)": train's advice, not an option of context."""
    from conftest import QUIET, assert_clean_error, tiny_config

    from depthlab import train

    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4)), **QUIET)
    tiny_text_file.rename(tmp_path / "elsewhere.txt")
    for cmd in ("context", "layers"):
        rc, _, err = run_cli(capsys, cmd, str(run))
        assert_clean_error(rc, err, f"the run's corpus {tiny_text_file} is missing (moved or deleted?)",
                           "put the file back at that path", "--data.path NEW records a file's new place")
        assert "leave data.path unset" not in err


@pytest.mark.parametrize("edit", [("train", "warmup_iters", "x"), ("data", "path", 5), ("model", None, []),
                                  ("resolved", None, 7)])
def test_a_config_json_edited_by_hand_is_one_line_or_a_warning_never_a_crash(report_run, tmp_path, capsys, edit):
    """helper-20: train.warmup_iters "x" crashed diagnose (ValueError), data.path 5 report/context/layers (TypeError),
    "model": [] read as defaults (block_size 128 against the weights' 32), "resolved": 7 an AttributeError."""
    from conftest import RUN_FIGURES, fresh_copy

    run = fresh_copy(report_run, tmp_path / "run")
    c = json.loads((run / "config.json").read_text())
    section, key, value = edit
    if key is None:
        c[section] = value
    else:
        c[section][key] = value
    (run / "config.json").write_text(json.dumps(c))
    for cmd, extra in (("diagnose", []), ("report", ["--skip", *RUN_FIGURES]), ("context", []), ("layers", [])):
        rc, out, err = run_cli(capsys, cmd, str(run), *extra)
        assert "unexpected" not in err and "Traceback" not in err, (cmd, err)
        assert (rc == 2 and err.count("\n") == 1 and err.startswith("depthlab: error: ")) or (
            rc == 0 and "depthlab: warning:" in err and "config.json" in err), (cmd, rc, err)


def test_context_unused_puts_the_training_first_when_the_run_has_not_beaten_the_bigram_line():
    """A new user's run with train.muon_lr 3 never learned even the bigram statistics; the remedy blamed the
    architecture and the context length alone (block_size was the default and not the cause)."""
    flat = [2.49] * 12 + [2.50] * 4
    cfg = {"model": {"vocab_size": 65, "variant": "prenorm", "block_size": 16}, "train": {"optimizer": "muon"}}
    stuck = [f for f in diagnose(Evidence(evals([4.2, 3.0, 2.5]) + [context_record(200, flat)], cfg, BASE)).findings
             if f.rule == "context_unused"][0]
    assert stuck.remedy.startswith("first the training: the best val loss 2.500 is not below the bigram baseline 2.482")
    assert "train.learning_rate and train.muon_lr" in stuck.remedy and "raise model.block_size" in stuck.remedy
    learned = [f for f in diagnose(Evidence(evals([4.2, 3.0, 2.2]) + [context_record(200, flat)], cfg, BASE)).findings
               if f.rule == "context_unused"]
    assert learned and "first the training" not in learned[0].remedy  # below the line: the architecture's turn


def test_a_gap_below_the_bigram_line_with_a_negative_gain_is_not_context_use():
    """A new user's pass: a run on a 96-character corpus read "the model uses its context" beside a context gain
    of -0.378 nats (and a tiny BPE run beside -0.010), judged by the gap below the bigram line alone."""
    from depthlab.analytics.rules.context import UNDECIDED, context_verdict

    curve = [1.622] + [2.0] * 15  # position 0 lower than the last quarter: gain -0.378; both below bigram 2.9
    state, words = context_verdict(-0.378, 0.05, curve, bigram=2.9, unigram=3.3, lq_se=0.02, windows=8)
    assert state == UNDECIDED and "uses its context" not in words.replace("using its context", "")
    assert "position 0, which sees the current character alone, is 1.278 nats below it" in words
    assert "worse than position 0 beyond twice its error" in words
    state, words = context_verdict(-0.010, 0.03, [2.29] + [2.3] * 15, bigram=3.0, unigram=4.0, lq_se=0.01,
                                   windows=8, unit="token")
    assert state == UNDECIDED and "no better than position 0 (the gain is not positive)" in words
    assert "the current token alone" in words and "the model uses its context" not in words


def test_copies_of_one_window_are_one_window_neither_context_use_nor_a_leak(tmp_path):
    """helper-55: on a val split one window long every evaluation window is the same window; their spread of 0
    read as '± 0.000', and a repeated-phrase corpus's position 0 (always the same token) below the floor over all
    val tokens was called a leaking causal mask."""
    from depthlab.analytics.rules.context import LEAKS, UNDECIDED, context_verdict

    val = torch.arange(17) % 5  # T + 1 tokens: a single possible window start
    w = view_windows(val.numpy(), 16, 4, 1337, 3)
    res = position_curve(tiny_gpt(block_size=16), w)
    assert res["windows"] == 12 and res["distinct_windows"] == 1
    curve = [0.5] + [2.6] * 15  # position 0 far below the floor, with no error to judge by
    state, words = context_verdict(-2.0, 0.0, curve, bigram=2.482, unigram=3.347, windows=res["distinct_windows"],
                                   pos0_se=0.0, floor=2.374)
    assert state == UNDECIDED and "one window (or copies of one)" in words and "nor whether its mask leaks" in words
    assert context_verdict(-2.0, 0.0, curve, bigram=2.482, unigram=3.347, windows=12, pos0_se=0.0,
                           floor=2.374)[0] == LEAKS  # as many different windows: the same curve is a leak
    other = view_windows(torch.randint(0, 5, (400,), generator=torch.Generator().manual_seed(0)).numpy(), 16, 4, 1, 3)
    assert position_curve(tiny_gpt(block_size=16), other)["distinct_windows"] == 12


def test_copies_of_one_window_print_and_record_no_plus_minus(tmp_path, capsys):
    """A 20-character corpus: the val split has room for one window, every evaluation window is a copy of it, and
    `depthlab context` printed '± 0.000' on every position, each gain and the verdict, with the fix 'a run with a
    larger train.eval_iters' (more copies); the end-of-training record held context_gain_se 0.0."""
    from depthlab.analytics.context import load_weights, open_run
    from depthlab.cli import main

    (tmp_path / "tiny.txt").write_text("hello world, hi all\n")
    run = tmp_path / "r"
    assert main(["train", "--data.path", str(tmp_path / "tiny.txt"), "--model.block_size", "4", "--model.n_layer",
                 "1", "--model.n_embd", "16", "--model.n_head", "1", "--train.batch_size", "2", "--train.eval_iters",
                 "2", "--train.max_iters", "3", "--train.out_dir", str(run)]) == 0
    rec = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r.get("event") == "context"]
    assert len(rec) == 1 and rec[0]["windows"] == 4 and rec[0]["distinct_windows"] == 1
    assert rec[0]["context_gain_se"] is None and rec[0]["last_quarter_se"] is None
    res = position_curve(load_weights(run, "best")[0], open_run(run).windows)
    assert res["position_se"] == [None] * 4 and res["context_gain_se"] is None and res["last_quarter_se"] is None
    capsys.readouterr()
    rc, out, err = run_cli(capsys, "context", str(run))
    assert rc == 0 and "±" not in out.replace("± se", ""), out
    table = out.splitlines()[2:6]
    assert [ln.split()[0] for ln in table] == ["0", "1", "2", "3"] and all(ln.split()[2] == "-" for ln in table)
    assert "one window (or copies of one) has no sampling error" in out
    assert ("(its windows are all the same text, as a val split this short gives: a longer text or a larger "
            "data.val_fraction gives different ones)") in out and "train.eval_iters" not in out
