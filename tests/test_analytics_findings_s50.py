"""A demanding new user's pass over diagnose, layers, context, coordcheck, probe and report (session 50): each test
holds a number or a sentence one of these commands printed that was false for the run, or a crash on bad input."""

import json

import pytest

from conftest import QUIET, SHAKESPEARE_BASELINES, TINY_TEXT, assert_clean_error, run_cli, tiny_config


# ------------------------------------------------ context_unused: position 0 "above the unigram line" within its error
def test_position_0_within_twice_its_error_of_the_unigram_line_is_not_called_above_it():
    """8 plain blocks x 32 wide, 200 steps: position 0 read 3.475 ± 0.110 against the unigram line 3.347, and
    context_unused said "position 0 is 0.128 nats above the unigram line: the model has not yet learned even how
    common each character is", while unigram_stuck (val loss 3.351 at the unigram line) said the model predicts
    the character frequencies: 0.128 is within twice the error of position 0."""
    from depthlab.analytics.rules.context import context_verdict

    curve = [3.475] + [3.40] * 11 + [3.378] * 4  # position 0, the middle, the last quarter
    state, words = context_verdict(0.097, 0.114, curve, bigram=2.482, unigram=3.347, lq_se=0.030)
    assert state == "unused"
    assert "not yet learned even how common" not in words
    assert "position 0 is at the unigram line" in words and "within twice its error" in words
    # the same gap measured on many windows (a small error) still says it
    state, words = context_verdict(0.097, 0.02, curve, bigram=2.482, unigram=3.347, lq_se=0.005, pos0_se=0.02)
    assert state == "unused" and "position 0 is 0.128 nats above the unigram line" in words


# ------------------------------------------------ diagnose: why rank_collapse / uniform_attention are not judged
def _run_with_empty_metrics(tmp_path, probe_interval=250):
    rd = tmp_path / "run"
    rd.mkdir()
    (rd / "config.json").write_text(json.dumps({
        "model": {"n_layer": 2, "variant": "prenorm", "block_size": 128, "vocab_size": 65},
        "train": {"batch_size": 16, "probe_interval": probe_interval, "grad_log_interval": 50, "max_iters": 200}}))
    (rd / "metrics.jsonl").write_text("")
    (rd / "summary.json").write_text(json.dumps({"final_step": 200, "best_val_loss": 2.485}))
    (rd / "baselines.json").write_text(json.dumps(SHAKESPEARE_BASELINES))
    return rd


def test_an_emptied_metrics_file_is_the_reason_no_probe_is_judged_not_the_probe_interval(tmp_path):
    """metrics.jsonl emptied after a 200-step run: diagnose said "not judged: rank_collapse, uniform_attention (no
    activation probe: train.probe_interval is 250)", but the trainer probes at step 0 and at the end whatever the
    interval (the run had probes at steps 0 and 200); every other not-judged line named the empty file."""
    from depthlab.analytics.diagnose import diagnose_run_full

    _, missing = diagnose_run_full(_run_with_empty_metrics(tmp_path))
    (line,) = [m for m in missing if m.startswith("rank_collapse")]
    assert "probe_interval is 250" not in line
    assert "metrics.jsonl holds no readable record" in line


def test_probes_switched_off_still_name_the_probe_interval(tmp_path):
    from depthlab.analytics.diagnose import diagnose_run_full

    _, missing = diagnose_run_full(_run_with_empty_metrics(tmp_path, probe_interval=0))
    (line,) = [m for m in missing if m.startswith("rank_collapse")]
    assert "train.probe_interval is 0" in line


# ------------------------------------------------ report of a BPE run: tokens, not characters
def _bpe_run(tmp_path):
    from depthlab import train

    text = tmp_path / "t.txt"
    text.write_text(TINY_TEXT * 3, encoding="utf-8")
    cfg = tiny_config(tmp_path / "bpe", text, train=dict(max_iters=10, eval_interval=5))
    cfg.data.tokenizer, cfg.data.vocab_size = "bpe", 300
    return train(cfg, **QUIET)


@pytest.mark.slow
def test_the_report_of_a_bpe_run_says_tokens_where_it_said_characters(tmp_path, monkeypatch):
    """depthlab report of a --data.tokenizer bpe --data.vocab_size 300 run said "Vocabulary: 300 characters",
    "Losses are per character", "the embeddings alone see one character", "Position 0 sees one character", and
    drew the loss against "tokens seen (characters)", though a token there is 1.4 characters on average."""
    from depthlab.report import build_report, plots
    from depthlab.report.html import figure_note
    from depthlab.report.run_data import RunData

    run = _bpe_run(tmp_path)
    labels = []
    real_save = plots.save_run_figure

    def keep_labels(fig, run_dir, name, title, subtitle=None):
        labels.extend(ax.get_xlabel() for ax in fig.axes)
        return real_save(fig, run_dir, name, title, subtitle)

    monkeypatch.setattr(plots, "save_run_figure", keep_labels)
    plots.plot_loss(run)
    assert "tokens seen (characters)" not in labels and "tokens seen" in labels

    page = build_report(run).read_text(encoding="utf-8")
    assert "Vocabulary: 300 tokens" in page and "300 characters" not in page
    data = RunData(run)
    for name in ("layers", "context"):
        note = figure_note(data, name)
        assert "character" not in note, (name, note)
    assert figure_note(data, "loss").startswith("Losses are per token, in nats (left axis), and in bits per "
                                                "character of the text (right axis). ")
    assert "the current character" not in figure_note(data, "loss")
    assert "see one token" in figure_note(data, "layers") and "one-token predictor" in figure_note(data, "layers")


def test_the_report_of_a_char_run_keeps_characters(tmp_path, tiny_text_file):
    from depthlab import train
    from depthlab.report.html import figure_note
    from depthlab.report.run_data import RunData

    run = train(tiny_config(tmp_path / "c", tiny_text_file, train=dict(max_iters=2, eval_interval=2)), **QUIET)
    data = RunData(run)
    assert figure_note(data, "loss").startswith("Losses are per character")
    assert "Position 0 sees one character" in figure_note(data, "context")


# ------------------------------------------------ report: a run without diagnosis.json
def test_a_run_stopped_before_its_end_gets_its_diagnosis_in_the_report(tmp_path, capsys):
    """A run killed mid-training has no diagnosis.json (the trainer writes it at the end); its report said "run
    depthlab diagnose RUN_DIR to produce one", but diagnose prints and writes nothing, so the report never had one.
    The report now applies the rules itself, as diagnose does."""
    from depthlab.rundir import DIAGNOSIS

    run = _run_with_empty_metrics(tmp_path)
    with open(run / "metrics.jsonl", "w", encoding="utf-8") as f:
        for step, val in ((0, 4.17), (100, 3.40), (200, 3.36)):
            f.write(json.dumps({"step": step, "val_loss": val, "train_loss": val, "tokens_seen": step * 2048}) + "\n")
    (run / "summary.json").unlink()
    rc, _, _ = run_cli(capsys, "report", str(run), "--skip", "loss", "activations", "attn_entropy")
    page = (run / "report.html").read_text(encoding="utf-8")
    assert rc == 0 and not (run / DIAGNOSIS).exists()  # the report writes no diagnosis.json of its own
    assert "to produce one" not in page
    assert "unigram_stuck" in page and "3.360 nats is at the unigram level 3.347" in page
    assert "applied now by depthlab report" in page


# ------------------------------------------------ coordcheck: an infinite axis value
def test_an_infinite_axis_value_is_not_said_to_be_below_zero(capsys):
    """coordcheck --axis train.learning_rate=inf,1e-3 said "'inf' must be > 0"; inf is > 0, it is not finite."""
    for bad in ("inf", "-inf", "nan"):
        rc, _, err = run_cli(capsys, "coordcheck", "--axis", f"train.learning_rate={bad},1e-3", "--steps", "1")
        assert_clean_error(rc, err, f"'{bad}' is not a finite number > 0")


# ------------------------------------------------ probe: a batch beyond the machine's memory
def test_a_probe_batch_beyond_memory_is_a_usage_error_not_an_unexpected_crash(capsys, tmp_path):
    """depthlab probe --probe_batch_size 100000 ended "depthlab: error: unexpected RuntimeError: [enforce fail at
    alloc_cpu.cpp:127] ... you tried to allocate 26214400000 bytes ... please report it" with exit 1 (on a machine
    of 23 GiB): the size is refused before anything is allocated, as train refuses its train.batch_size."""
    import os

    import pytest

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if ram > 150 * 2**30:
        pytest.skip("a machine with more than 150 GiB of RAM may hold this probe")
    rc, out, err = run_cli(capsys, "probe", "--model.n_layer", "1", "--model.n_embd", "32", "--probe_batch_size",
                           "100000", "--batches", "1", "--out", str(tmp_path))
    assert_clean_error(rc, err, "--probe_batch_size 100000", "GiB", "lower --probe_batch_size")
    assert "unexpected" not in err and "please report" not in err and not list(tmp_path.iterdir())


# ------------------------------------------------ layers/context --max_tokens: at least one whole batch is read
def test_max_tokens_help_says_a_whole_batch_is_read(capsys):
    """`depthlab context RUN --max_tokens 1` read "1 of the run's 20 fixed val evaluation batches: 16 windows x 128 =
    2,048 tokens", while --help called --max_tokens the "most val tokens to read"."""
    import pytest

    from depthlab.cli import main

    for command in ("layers", "context"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert "most val tokens to read" not in out
        assert "whole evaluation batches, at least one" in out, out


def test_a_plateau_at_a_rate_that_never_decayed_does_not_advise_a_lower_min_lr():
    """A new user's pass: a run cut by max_time at lr 0.00297 (fit_to_time false) was told "the model has converged
    ...: decay the LR further (train.min_lr (now 0.0001))", which changes nothing for a decay that never ran."""
    from conftest import eval_records
    from depthlab.analytics.diagnose import Evidence, diagnose

    flat = eval_records([4.2, 2.0, 1.9, 1.9, 1.9, 1.9, 1.9, 1.9])
    cfg = {"train": {"min_lr": 1e-4, "learning_rate": 3e-3}}
    high = flat + [{"step": 700, "lr": 0.00297, "loss": 1.9}]
    found = {f.rule: f for f in diagnose(Evidence(high, cfg)).findings}
    assert found["plateau"].remedy.startswith("the learning rate was still 0.00297 at step 700 (its floor "
                                              "train.min_lr 0.0001): the decay had not run")
    low = flat + [{"step": 700, "lr": 1.2e-4, "loss": 1.9}]
    found = {f.rule: f for f in diagnose(Evidence(low, cfg)).findings}
    assert found["plateau"].remedy.startswith("the model has converged for this size/LR")
