"""Findings of session 59's new-user passes and of note 31's "seen, not fixed" list (each test failed before its
change)."""

import json
import re
import signal

import pytest
import torch

from conftest import QUIET, tiny_config
from depthlab import RunConfig, train
from depthlab.trainer import Interrupted, Trainer


def _cut_evaluation_at(tr: Trainer, step: int) -> None:
    """Make a SIGTERM arrive during ``tr``'s evaluation of ``step`` (as a user's `kill` would)."""
    real = tr.evaluator.port.loss

    def loss(model, x, y):
        if not model.training and tr.step == step:
            tr.stop.request(signal.SIGTERM)
        return real(model, x, y)

    tr.evaluator.port.loss = loss


@pytest.mark.slow  # three short trainings
def test_a_resume_whose_redone_evaluation_is_cut_again_puts_config_json_back(tmp_path, tiny_text_file):
    """A resume whose only work was to redo an evaluation a signal had cut, stopped there again, kept its new settings
    in config.json: the next plain --resume took them up as asked, though nothing had trained with them."""
    run = tmp_path / "r"
    tr = Trainer(tiny_config(run, tiny_text_file, train=dict(max_iters=20, eval_interval=5, eval_iters=4)), **QUIET)
    _cut_evaluation_at(tr, 10)
    with pytest.raises(Interrupted):
        tr.fit()
    before, ckpts = (run / "config.json").read_bytes(), sorted(p.name for p in (run / "checkpoints").iterdir())
    cfg = RunConfig.from_run(run)
    cfg.train.max_iters, cfg.train.learning_rate = 30, 3e-4
    again = Trainer(cfg, **QUIET)
    _cut_evaluation_at(again, 10)
    with pytest.raises(KeyboardInterrupt) as e:
        again.fit()
    assert (run / "config.json").read_bytes() == before
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ckpts
    assert str(e.value) == (f"terminated (SIGTERM) before the first step: nothing was trained, and {run}/config.json "
                            f"is as it was before this resume; to resume: depthlab train --resume {run}")
    train(RunConfig.from_run(run), **QUIET)  # the plain resume: the run's own settings, the cut evaluation redone
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if r["kind"] == "eval"] == [0, 5, 10, 15, 20]
    assert json.loads((run / "config.json").read_text())["train"]["max_iters"] == 20


def test_a_budget_that_ends_after_the_decay_says_the_rate_was_at_its_floor(tmp_path, tiny_text_file, fake_clock):
    """A max_time stop of a run whose rate sat at train.min_lr said "the learning rate had not finished its decay"."""
    fake_clock[1] = 0.2  # fake seconds per clock reading: the budget ends within the first steps
    lines = []
    cfg = tiny_config(tmp_path / "w", tiny_text_file, train=dict(max_iters=5000, max_time=3.0, warmup_iters=1,
                                                                 lr_decay_iters=2, fit_to_time=False,
                                                                 eval_interval=1000, log_interval=1))
    Trainer(cfg, log=lines.append).fit()
    said = [x for x in lines if x.startswith("stopped by train.max_time")]
    assert said and said[0].endswith("the learning rate was at its floor already, train.min_lr 0.0001"), lines


@pytest.mark.slow  # two short trainings
def test_a_resume_asking_max_iters_below_a_cut_evaluations_step_trains_and_changes_nothing(tmp_path, tiny_text_file):
    """A resume asking train.max_iters below the step of a cut evaluation warned of a warmup it would not run,
    evaluated, and left config.json's max_iters (8) below summary.json's final_step (10)."""
    run = tmp_path / "r"
    tr = Trainer(tiny_config(run, tiny_text_file, train=dict(max_iters=20, eval_interval=5, eval_iters=4)), **QUIET)
    _cut_evaluation_at(tr, 10)
    with pytest.raises(Interrupted):
        tr.fit()
    files = {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    cfg = RunConfig.from_run(run)
    cfg.train.max_iters = 8
    lines = []
    train(cfg, log=lines.append)
    assert lines == ["nothing to train: the run is at step 10 and train.max_iters is 8 (a total); pass a larger "
                     "train.max_iters to extend it. Nothing was changed."]
    assert {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()} == files


def test_a_run_with_only_its_step_0_probe_has_no_end_rank(tmp_path):
    """results.csv's last_block_rank ("after training") of a run that died after its step-0 probe was that probe's,
    the initialisation's."""
    from depthlab.sweep.results import _metric_cells

    d = {"summary": None, "grad": [], "init_probe": {"rank_measure": [0.5, 0.4]}, "diagnosis": [],
         "probe": [{"step": 0, "rank_measure": [0.6, 0.3]}]}
    row = _metric_cells(d, None)
    assert row["init_last_block_rank"] == 0.4 and row["last_block_rank"] is None
    d["probe"].append({"step": 50, "rank_measure": [0.6, 0.2]})
    assert _metric_cells(d, None)["last_block_rank"] == 0.2


def test_time_capped_runs_are_a_finding_left_out_of_the_means_not_runs_that_did_not_finish():
    """A sweep's findings said time-capped runs "did not finish normally" and that the comparisons below (which
    leave them out) were at unequal budgets; sweep --help calls them a finding."""
    from conftest import sweep_item

    from depthlab import sweep

    its = [sweep_item("prenorm", L, 3.2 + 0.01 * L) for L in (1, 2, 8)]
    its[2]["row"]["status"] = "time_capped"
    lines = sweep.summary_lines(its, "model.n_layer", ["model.variant"], None)
    assert lines[0] == ("1 run stopped by train.max_time before train.max_iters (status time_capped: runs/prenorm8): "
                        "left out of the means below, which are over the runs with status ok (raise train.max_time "
                        "or lower train.max_iters)."), lines
    assert not [ln for ln in lines if "did not finish normally" in ln], lines
    its[1]["row"]["status"] = "nonfinite"
    assert sweep.summary_lines(its, "model.n_layer", ["model.variant"], None)[-1] == \
        "1 run did not finish normally: runs/prenorm2 (nonfinite)."


def test_fit_after_close_says_the_trainer_was_closed_not_that_it_trained(tmp_path, tiny_text_file):
    """fit() after close() said the Trainer "has trained" the run, which had not trained a step."""
    from depthlab.errors import DepthlabError

    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=2)), **QUIET)
    t.close()
    with pytest.raises(DepthlabError) as e:
        t.fit()
    assert str(e.value).startswith(f"this Trainer of {tmp_path / 'r'} was closed (close()) before it trained, and "
                                   "trains no more; to train on, make a new Trainer(RunConfig.from_run(")
    train(RunConfig.from_run(tmp_path / "r"), **QUIET)  # the advice works: the run trains from its start
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["final_step"] == 2


def test_a_trainer_made_in_python_speaks_in_the_apis_words(tmp_path, tiny_text_file):
    """Trainer(cfg) refused an existing run with "use --resume ... to continue it, --overwrite to replace it, or another
    --train.out_dir", flags a Python caller has no use for (depthlab.train said it in the API's words)."""
    from depthlab.errors import DepthlabError

    train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=2)), **QUIET)
    with pytest.raises(DepthlabError) as e:
        Trainer(tiny_config(tmp_path / "r", tiny_text_file), **QUIET)
    assert str(e.value) == (f"train.out_dir {tmp_path / 'r'} already exists; use depthlab.train(RunConfig.from_run("
                            f"'{tmp_path / 'r'}')) to continue it, overwrite=True to replace it, or another "
                            "train.out_dir")
    lines = []
    cfg = RunConfig.from_run(tmp_path / "r")
    cfg.train.max_iters = 2
    Trainer(cfg, log=lines.append).fit()
    assert [ln for ln in lines if ln.startswith("nothing to train")] == [
        "nothing to train: the run is at step 2 and train.max_iters is 2 (a total); pass a larger train.max_iters "
        "to extend it. Nothing was changed."]


def test_a_last_evaluation_that_dips_far_above_the_best_is_still_overfitting():
    """A 21-byte corpus's run: val 0.9 at its best, then 17.3, 17.3 and a last 17.29 (0.01 below the two before)
    while train fell to 0.01: `overfitting` took the dip for improvement, and diagnose said to train longer."""
    from conftest import eval_records

    from depthlab.analytics.diagnose import diagnose_records

    vals, trains = [3.0, 0.9, 5.0, 17.3, 17.3, 17.29], [3.0, 0.8, 0.2, 0.05, 0.02, 0.01]
    f = diagnose_records(eval_records(vals, trains=trains))
    assert [x.rule for x in f] == ["overfitting"], [(x.rule, x.evidence) for x in f]
    assert f[0].evidence.startswith("val rose from its best 0.900 (step 100) to 17.290 nats (step 500)")
    # near its best, a last evaluation below the others is still improvement (the usual train/val shift)
    assert diagnose_records(eval_records([3.0, 2.0, 1.9, 1.95, 1.89], trains=[3.0, 1.9, 1.7, 1.5, 1.3])) == []


def test_check_says_every_rule_it_ran_the_shape_rule_too(tmp_path, tiny_text_file):
    """check printed a progress line for every rule but its first, shape."""
    from test_check import PLANTED

    from depthlab.analytics.check import check_model
    from depthlab.config import DataConfig
    from depthlab.data import load_corpus
    from depthlab.usermodel import build_model, parse_source

    corpus = load_corpus(DataConfig(path=str(tiny_text_file), cache_dir=str(tmp_path)))
    model = build_model(parse_source(f"{PLANTED}:TinyGPT"), {}, len(corpus.tokenizer.vocab))
    lines = []
    check_model(model, corpus, block_size=8, rules=("shape", "init_loss"), log=lines.append)
    assert [ln.split(":")[0] for ln in lines] == ["shape", "finite", "init_loss"], lines
    assert lines[0].startswith("shape: ok (") and lines[0].endswith(" s)")


LEARNER = "tests/fixtures/learner_gpt.py"


def _learner(tmp_path, **init):
    from depthlab.usermodel import build_model, parse_source

    torch.manual_seed(0)
    return build_model(parse_source(f"{LEARNER}:GPT"), init, 65)


@pytest.fixture(scope="module")
def shakespeare(tmp_path_factory):
    from depthlab.config import DataConfig
    from depthlab.data import load_corpus

    return load_corpus(DataConfig(cache_dir=str(tmp_path_factory.mktemp("cache"))))


@pytest.mark.parametrize("reads, words", [
    ("last", "and later tokens move them (the logits at position "),
    ("first", "and only the token at position 0 moves them (by up to "),
])
def test_a_head_reading_one_positions_state_is_named_not_the_mask_or_depth(tmp_path, shakespeare, reads, words):
    """The own-model pass: a head given x[:, -1:] broadcast was sent to the attention mask ("about as much" of a
    6.4 x ratio), and one given x[:, 0] was "a deep stack without shortcuts", not judged."""
    from depthlab.analytics.check import check_model

    rep = check_model(_learner(tmp_path, head_reads=reads), shakespeare, block_size=64,
                      rules=("shape", "causal_leak"))
    leak = {c.rule: c for c in rep.checks}["causal_leak"]
    assert leak.ok is False and leak.summary.startswith("every position gets the same logits (the 64 positions' "
                                                        "differ by at most ")
    assert words in leak.summary and leak.remedy.startswith("apply the output layer to every position's own state")
    assert "masked_fill" not in leak.remedy and "shortcut" not in leak.summary
    good = check_model(_learner(tmp_path), shakespeare, block_size=64, rules=("shape", "causal_leak"))
    assert [c.ok for c in good.checks] == [True, True]  # shape, causal_leak: no false alarm


def test_heads_split_with_n_head_where_t_belongs_is_no_context_limit(tmp_path, shakespeare):
    """train --model.source said "the model accepts at most T=4 positions: run with --model.block_size 4" of a
    forward that runs at T=1 and 4 only (q.view(B, n_head, T, hs) works where T equals n_head); check said "T=2, 3
    fails"."""
    from depthlab.analytics.check import check_model
    from depthlab.errors import DepthlabError
    from depthlab.usermodel import check_forward

    model = _learner(tmp_path, split="no transpose")
    with pytest.raises(DepthlabError) as e:
        check_forward(model, "mine.py:GPT", 16, 64, 65)
    assert "accepts at most" not in str(e.value) and "--model.block_size 4" not in str(e.value)
    assert "it runs at T=4 but fails at T=2, 3 too, so no context length is the limit" in str(e.value)
    shape = check_model(model, shakespeare, block_size=64, rules=("shape",)).checks[0]
    assert "length 4 is hard-coded: T=2, 3 fail (" in shape.summary
    assert "view(B, n_head, T, C // n_head) for view(B, T, n_head, C // n_head).transpose(1, 2)" in shape.remedy


def test_vanishing_gradients_with_level_updates_does_not_say_the_early_blocks_barely_learn():
    """A 6-block stack without shortcuts: first/last gradient ratio 5.9e-4 while Muon's update ratios were level
    (0.00895 ... 0.0102); diagnose said "the early blocks barely learn"."""
    from conftest import grad_record

    from depthlab.analytics.diagnose import diagnose_records

    level = [grad_record(s, [6e-4, 1e-2, 1.0], [0.00895, 0.0093, 0.0102]) for s in (50, 100)]
    (f,) = diagnose_records(level)
    assert f.rule == "vanishing_gradients" and "barely learn" not in f.evidence
    assert ("the early blocks get a faint learning signal (their updates are as large as the last block's, "
            "update/weight ratio 8.95e-03 vs 1.02e-02 at step 100: the optimizer scales") in f.evidence
    (f,) = diagnose_records([grad_record(s, [1e-5, 1e-3, 1.0], [1e-6, 1e-4, 1e-3]) for s in (50, 100)])
    assert "the early blocks get a faint learning signal. That is" in f.evidence  # small updates: no such words


def test_export_of_a_run_without_best_safetensors_says_which_weights_it_wrote(tmp_path, tiny_text_file, capsys):
    """export of a run whose best.safetensors was deleted wrote the newest step's weights (val 1.389 against the
    best's 1.112) as "checkpoint": "best" without a word; sample warns of the same case."""
    pytest.importorskip("transformers")
    from depthlab.export import export_run

    run = tmp_path / "r"
    train(tiny_config(run, tiny_text_file, train=dict(max_iters=6, eval_interval=3)), **QUIET)
    manifest = json.loads((run / "checkpoints" / "manifest.json").read_text())
    (run / "checkpoints" / "best.safetensors").unlink()
    capsys.readouterr()
    export_run(run, tmp_path / "hf")
    err = capsys.readouterr().err
    assert f"depthlab: warning: {run / 'checkpoints'} has no best.safetensors (deleted?)" in err
    info = json.loads((tmp_path / "hf" / "depthlab.json").read_text())
    assert info["checkpoint"] == "best" and info["weights_file"] == "step-000006.safetensors"
    assert info["weights_note"].startswith(f"{run / 'checkpoints'} has no best.safetensors (deleted?)")
    assert manifest["best"]["step"] in (3, 6) and info["step"] == 6


def test_context_claims_for_the_context_only_what_position_0_does_not_reach_already():
    """A BPE run: position 0 at 1.880, already 0.569 below the bigram line 2.449 (fitted on train, add-one smoothed),
    last quarter 1.058: context said "the last quarter is 1.391 nats below the bigram line: that much comes from the
    context", where at most the gain, 0.822, does."""
    from depthlab.analytics.rules.context import USED, context_verdict

    curve = [1.880] + [1.3] * 3 + [1.058] * 4
    state, words = context_verdict(0.822, 0.096, curve, 2.449, 3.5, lq_se=0.02, windows=64, unit="token")
    assert state == USED and "that much comes from" not in words
    assert words.endswith("the last quarter is 1.391 nats below the bigram line, but position 0, which has no "
                          "context, is already 0.569 below it (the line lies above what the current token alone "
                          "gives on these windows): what the context adds is the gain over position 0, 0.822 nats")
    state, words = context_verdict(0.9, 0.05, [2.6] + [2.0] * 7, 2.482, 3.3, lq_se=0.02, windows=64)
    assert state == USED and words.endswith("the last quarter is 0.482 nats below the bigram line: that much comes "
                                            "from the context before the current character")


def test_the_plan_charges_evaluations_without_the_first_batchs_one_time_costs():
    """The first evaluation (8 batches) took 0.775 s, 0.5 s of it its first forward; charged at that rate, the final
    validation's 109 batches were kept 10.6 s of a 20-s budget and took 3.7 s: the run stopped at 62 % of it."""
    from depthlab.budget import TimeBudget
    from depthlab.config import TrainConfig

    t = TrainConfig(max_iters=5000, max_time=20.0, fit_to_time=True, eval_interval=100, eval_iters=4)
    b = TimeBudget(t)
    b.begin(0)
    b.note_eval(0.775, first_batch_s=0.5, batches=8)
    assert b.eval_first == pytest.approx(0.275 * 8 / 7) and b.eval_total == pytest.approx(0.775)
    b.final_batches = 109
    ev = 0.275 * 8 / 7
    assert b.steps_that_fit(20, 0.114, 3.0) == 20 + int((0.98 * 20 - 3.0 - ev * (1 + 109 / 8)) / (0.114 + ev / 100))
    b.note_eval(0.3, first_batch_s=0.04, batches=8)  # later evaluations: the first one's figure stays
    assert b.eval_first == pytest.approx(0.275 * 8 / 7)
    b2 = TimeBudget(t)
    b2.note_eval(0.5)  # no batch timing: the whole evaluation, as before
    assert b2.eval_first == 0.5


@pytest.mark.slow  # a BPE run
def test_a_bpe_run_never_samples_its_control_token(tmp_path, tiny_text_file):
    """At a high temperature a BPE run drew id 0, printed as the text "<|endoftext|>" (an export's generate stops
    there): 12 in 3,000 tokens."""
    from depthlab.sample import sample_text

    run = tmp_path / "b"
    cfg = tiny_config(run, tiny_text_file, train=dict(max_iters=2))
    cfg.data.tokenizer, cfg.data.vocab_size, cfg.data.cache_dir = "bpe", 300, str(tmp_path / "cache")
    train(cfg, **QUIET)
    (text,) = sample_text(run, prompt="a", max_new_tokens=3000, temperature=100.0, top_k=0, seed=0)
    assert "<|endoftext|>" not in text and len(text) > 3000


def test_check_refuses_a_bad_size_before_running_the_users_file(tmp_path, capsys):
    """`depthlab check good.py --block_size 0` said which class it picked from the file, then the error: two lines."""
    from depthlab.cli import main

    rc = main(["check", LEARNER, "--block_size", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip().splitlines() == [
        "depthlab: error: --block_size must be >= 1 (got 0): the tokens per sequence, e.g. --block_size 32; leave it "
        "out to use the model's own block_size"]


def test_a_constructor_that_fails_on_a_given_value_names_the_value_to_check(tmp_path):
    """GPT(n_layer='x') failed with the TypeError and no fix."""
    from depthlab.errors import DepthlabError
    from depthlab.usermodel import build_model, parse_source

    with pytest.raises(DepthlabError) as e:
        build_model(parse_source(f"{LEARNER}:GPT"), {"n_layer": "x"}, 65)
    assert str(e.value).endswith("; the arguments fit its signature, so its own code raised this: check the value "
                                 "given in model.init (n_layer; depthlab check: --init) against what that line needs")


def test_diagnose_no_gradient_names_a_module_forward_never_calls():
    """A learner's position embedding defined and never added: check said "modules that forward never calls", diagnose
    only "its branch is computed and then not used", which nothing was."""
    from conftest import grad_record

    from depthlab.analytics.diagnose import diagnose_records

    recs = [{**grad_record(s, [0.5, 1.0]), "grad_2.0_norm/pos_emb.weight": 0.0, "grad_2.0_norm/tok_emb.weight": 0.3}
            for s in (50, 100)]
    f = [x for x in diagnose_records(recs) if x.rule == "no_gradient"]
    assert f and "its module is never called in forward (e.g. a position embedding defined in __init__ and never " \
                 "added" in f[0].remedy, [(x.rule, x.remedy) for x in diagnose_records(recs)]


def test_every_config_field_in_train_help_says_what_it_is():
    """--train.beta1 and --train.beta2 had no description in `depthlab train --help` (README: "documents every field
    with its unit")."""
    from depthlab.cli import build_train_parser

    p = build_train_parser()
    bare = [a.option_strings[0] for a in p._actions
            if a.option_strings and a.option_strings[0].startswith(("--data.", "--model.", "--train."))
            and not (a.help or "").split("(type:")[0].strip()]
    assert bare == []


def test_a_sweeps_plain_at_a_baseline_after_a_few_steps_says_how_few():
    """A 60-step sweep's report: "At 2 blocks plain is at the unigram baseline (3.347): it predicts character
    frequencies and uses no context at all", while diagnose did not judge its runs before step 200 (pre-LN was at
    2.98-3.05 too)."""
    from conftest import sweep_item

    from depthlab import sweep

    base = {"unigram": 3.347, "bigram": 2.482}
    its = [sweep_item(v, L, loss) for v, L, loss in (("plain", 1, 3.0), ("plain", 2, 3.35), ("prenorm", 1, 3.0),
                                                    ("prenorm", 2, 2.98))]
    for it in its:
        it["config"]["train"]["max_iters"] = 60
    lines = sweep.summary_lines(its, "model.n_layer", ["model.variant"], base)
    assert lines[-1] == ("At 2 blocks plain is at the unigram baseline (3.347): it predicts character frequencies and "
                         "uses no context at all, not even the current character, after only 60 steps (diagnose "
                         "judges a loss at a baseline from step 200 on: a longer run tells whether it stays there).")
    for it in its:
        it["config"]["train"]["max_iters"] = 400
    assert sweep.summary_lines(its, "model.n_layer", ["model.variant"], base)[-1].endswith(
        "not even the current character.")


def test_a_prompt_refusal_says_a_typed_cr_is_read_as_a_newline(tmp_path, capsys):
    """A prompt 'ab\\r\\nc\\rd' on a run without newlines was refused naming '\\n' at positions 2, 3 and 5, two of
    which hold a typed '\\r'."""
    from depthlab.cli import main

    text = tmp_path / "t.txt"
    text.write_text("abcd efgh " * 300)
    train(tiny_config(tmp_path / "r", text, train=dict(max_iters=2)), **QUIET)
    assert main(["sample", str(tmp_path / "r"), "--prompt", "ab\r\nc\rd", "--max_new_tokens", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("depthlab: error: the prompt has characters the model's vocabulary lacks: '\\n' at position 2, "
                   "'\\n' at position 3, '\\n' at position 5; remove them or train on a corpus that contains them (a "
                   "'\\r' typed in the prompt, alone or before '\\n', is read as '\\n', as the corpus's line ends "
                   "were; the positions are the typed prompt's)")


@pytest.mark.slow  # a BPE run
def test_a_missing_tokenizer_json_is_refused_with_where_to_find_it(tmp_path, tiny_text_file):
    """sample, export and a resume of a BPE run without its tokenizer.json were refused without a fix."""
    from depthlab.errors import DepthlabError
    from depthlab.sample import sample_text

    run = tmp_path / "b"
    cfg = tiny_config(run, tiny_text_file, train=dict(max_iters=2))
    cfg.data.tokenizer, cfg.data.vocab_size, cfg.data.cache_dir = "bpe", 300, str(tmp_path / "cache")
    train(cfg, **QUIET)
    (run / "tokenizer.json").unlink()
    with pytest.raises(DepthlabError, match=r"cannot be decoded without it: put the run's tokenizer.json back \(the "
                                            r"checkpoint records its sha256, [0-9a-f]{12}\.\.\.\); an export of this"):
        sample_text(run, max_new_tokens=2)
    resumed = RunConfig.from_run(run)
    resumed.train.max_iters = 4
    with pytest.raises(DepthlabError, match="mean nothing without it; put the run's tokenizer.json back"):
        train(resumed, **QUIET)


def test_init_from_with_another_tokenizer_names_what_makes_them_match(tmp_path, tiny_text_file, capsys):
    """--init-from a BPE run into a char run said "use the same data.path and data.tokenizer"; the corpus need not be
    the same (the source's tokenizer.json comes with it), only --data.tokenizer bpe."""
    from depthlab.cli import main

    run = tmp_path / "b"
    cfg = tiny_config(run, tiny_text_file, train=dict(max_iters=2))
    cfg.data.tokenizer, cfg.data.vocab_size, cfg.data.cache_dir = "bpe", 300, str(tmp_path / "cache")
    train(cfg, **QUIET)
    rc = main(["train", "--init-from", str(run), "--data.path", str(tiny_text_file), "--train.out_dir",
               str(tmp_path / "c"), "--model.n_layer", "2", "--model.n_head", "2", "--model.n_embd", "32",
               "--model.block_size", "16"])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip().endswith("ids would mean other text: pass --data.tokenizer bpe (the source's "
                                            "tokenizer.json is then this run's, whatever the corpus)"), err
    assert not (tmp_path / "c").exists()


@pytest.mark.slow  # two BPE runs and an export
def test_init_from_an_export_with_another_runs_tokenizer_names_both_files(tmp_path, tiny_text_file, capsys):
    """An export whose tokenizer.json came from a 400-token run was refused as "shape mismatch transformer.wte.weight
    (300, 64) saved vs (400, 64)", naming neither file nor a fix."""
    import shutil

    pytest.importorskip("transformers")
    from depthlab.cli import main
    from depthlab.export import export_run

    runs = {}
    for v in (300, 280):
        cfg = tiny_config(tmp_path / f"b{v}", tiny_text_file, train=dict(max_iters=1))
        cfg.data.tokenizer, cfg.data.vocab_size, cfg.data.cache_dir = "bpe", v, str(tmp_path / "cache")
        runs[v] = train(cfg, **QUIET)
    export_run(runs[300], tmp_path / "hf")
    shutil.copy(runs[280] / "tokenizer.json", tmp_path / "hf" / "tokenizer.json")
    capsys.readouterr()
    rc = main(["train", "--init-from", str(tmp_path / "hf"), "--data.path", str(tiny_text_file), "--data.tokenizer",
               "bpe", "--train.out_dir", str(tmp_path / "n")])
    err = capsys.readouterr().err.strip()
    hf = tmp_path / "hf"
    assert rc == 2 and err.startswith(f"depthlab: error: --init-from {hf}: {hf}/tokenizer.json holds 280 tokens but "
                                      "the weights have 300 rows"), err
    assert "export the run again (depthlab export" in err and not (tmp_path / "n").exists()
    # without --data.tokenizer bpe (a char run asked for): the same refusal, not a shape mismatch naming no file
    rc = main(["train", "--init-from", str(hf), "--data.path", str(tiny_text_file), "--train.out_dir",
               str(tmp_path / "n")])
    assert rc == 2 and "tokenizer.json holds 280 tokens but the weights have 300 rows" in capsys.readouterr().err


@pytest.mark.parametrize("own", ["active", "passive"])
def test_a_resume_starts_with_its_runs_own_wait_policy(tmp_path, monkeypatch, own):
    """`depthlab train --resume RUN` started with the load's policy, then restarted its process to take the run's own
    ("restarting with OMP_WAIT_POLICY=ACTIVE"), even when nothing was left to train."""
    from depthlab import cli
    from depthlab.training import machine

    other = "passive" if own == "active" else "active"
    monkeypatch.setattr(machine, "busy_cores", lambda: 0 if other == "active" else 2)
    monkeypatch.setattr(machine, "guess_policy", lambda busy=None: None)
    (tmp_path / "config.json").write_text(json.dumps({"resolved": {"tuning": {
        "setting": {"omp_wait": own}, "machine": machine.machine_name()}}}))
    assert machine.start_policy() == other  # a new run: the load decides
    assert machine.start_policy(str(tmp_path)) == own
    assert cli._resumed_dir(["--model.n_layer", "2", "--resume", str(tmp_path)]) == str(tmp_path)
    assert cli._resumed_dir([f"--resume={tmp_path}"]) == str(tmp_path) and cli._resumed_dir(["--resume"]) is None
    (tmp_path / "config.json").write_text(json.dumps({"resolved": {"tuning": {
        "setting": {"omp_wait": own}, "machine": "another CPU x64"}}}))
    assert machine.start_policy(str(tmp_path)) == other  # measured on another machine: not this one's


def test_a_sweep_config_printed_and_read_back_continues_the_same_sweep(tmp_path, capsys):
    """`depthlab sweep --grid model.n_layer=1,2 --model.n_embd 32 --print_config > s.yaml` then `-c s.yaml` went to
    another default folder (sweeps/sweep-ae38e485 against sweep-0134e524): every run redone."""
    from depthlab.cli import main

    args = ["sweep", "--grid", "model.n_layer=1,2", "--model.n_embd", "32"]
    with pytest.raises(SystemExit) as e:
        main([*args, "--print_config"])
    assert e.value.code in (0, None)
    (tmp_path / "s.yaml").write_text(capsys.readouterr().out)
    folders = []
    for cmd in (args, ["sweep", "-c", str(tmp_path / "s.yaml")], ["sweep", "--grid", "model.n_layer=1,2"]):
        assert main([*cmd, "--dry_run"]) == 0
        out = capsys.readouterr()
        folders.append(re.search(r"sweeps/sweep-[0-9a-f]{8}", out.out + out.err).group(0))
    assert folders[0] == folders[1] != folders[2]


def test_a_sweep_files_misspelt_key_gets_a_suggestion(tmp_path):
    """A sweep file's `n_embdd` was refused listing every field, with no "did you mean" as train's flags get."""
    from depthlab.errors import DepthlabError
    from depthlab.sweep.spec import build_spec

    f = tmp_path / "s.yaml"
    f.write_text("base:\n  model: {n_embdd: 32}\ngrid:\n  model.n_layer: [1]\n")
    with pytest.raises(DepthlabError, match=r"unknown field 'n_embdd' in model \(did you mean n_embd\?\) \(known: "):
        build_spec(None, f, [], {}, None)
    with pytest.raises(DepthlabError, match=r"unknown section 'modle' \(did you mean model\?\)"):
        build_spec(None, None, ["modle.n_layer=1,2"], {}, None)


def test_a_science_claim_with_runs_not_finished_is_not_judged_and_asks_for_no_seeds():
    """An interrupted science sweep: its pending and interrupted runs were counted as failures ("L3 2 of 2 not ok vs
    L1 2 of 2 not ok ... undecided: add seeds (more than 1000 per cell)")."""
    from conftest import sweep_item

    from depthlab.sweep.science import science_claims

    its = [sweep_item(v, L, 3.0 - 0.1 * L, seed=s) for v in ("plain", "prenorm") for L in (1, 3) for s in (1, 2)]
    for it in its[4:]:
        it["row"]["status"], it["row"]["best_val_loss"] = "pending", None
    its[3]["row"]["status"] = "interrupted"
    rows = science_claims({"depth": its}, {})
    assert [r[-1] for r in rows] == ["not judged: some of its runs have not finished; run the same sweep command "
                                     "again to finish them"] * 2
    assert all(r.test is None for r in rows)
    assert rows[0][3].startswith("(5 of 8 runs not finished (interrupted, pending): runs/plain3, runs/prenorm1, ")


def test_equal_failure_rates_are_not_told_to_add_a_thousand_seeds():
    """DeepNorm 2 of 2 not ok vs post-LN 2 of 2 not ok: "undecided (p = 1, n = 2): add seeds (more than 1000 per cell
    at the measured effect)" (the search stopped at 200; no count decides equal rates)."""
    from depthlab.sweep import stats as S

    same = S.All([S.fewer_failures("x", 2, 2, 2, 2)])
    assert S.verdict(same) == ("undecided (p = 1, n = 2): more seeds are unlikely to decide it (at the measured "
                               "effects not even 1000 per cell would)")
    apart = S.All([S.fewer_failures("x", 0, 2, 1, 2)])  # 0 of 2 against 1 of 2: a count decides it
    n = S.needed(apart)
    assert 2 < n < 1000 and S.fisher_fewer(0, n, round(n / 2), n) < 0.05
    assert S.fisher_fewer(0, n - 1, round((n - 1) / 2), n - 1) >= 0.05


def test_aggregates_use_the_full_precision_of_the_losses(tmp_path, monkeypatch):
    """Two seeds' losses 3.048919439 and 3.048644543 (sd 1.944e-04): aggregates.csv said 0.0002121 (from results.csv's
    4 decimals) and the report's table "2.000e-04"."""
    import statistics

    from conftest import sweep_item

    from depthlab import sweep
    from depthlab.sweep.results import cell_aggregates

    vals = [3.048919439, 3.048644543]
    rows = [{"n_layer": 1, "variant": "prenorm", "seed": s, "best_val_loss": v, "status": "ok"}
            for s, v in zip((1, 2), vals)]
    (agg,) = cell_aggregates(rows, sweep.RESULT_COLUMNS + sweep.METRIC_COLUMNS)
    assert agg["sd"] == pytest.approx(statistics.stdev(vals), rel=1e-9) and agg["n_layer"] == "1"
    from depthlab.sweep import results

    monkeypatch.setattr(results, "collect_results", lambda d: (rows, sweep.RESULT_COLUMNS + sweep.METRIC_COLUMNS))
    monkeypatch.setattr(results, "_unit", lambda d: "character")
    results.write_results(tmp_path)
    (written,) = list(__import__("csv").DictReader(open(tmp_path / "aggregates.csv")))
    assert float(written["sd"]) == pytest.approx(statistics.stdev(vals), rel=1e-3)  # not 2.121e-04
    its = [sweep_item("prenorm", 1, v, seed=s) for s, v in zip((1, 2), vals)]
    header, table = sweep.aggregate_table(its, "model.n_layer", ["model.variant"])
    assert table[0][header.index("sd")] == pytest.approx(1.944e-4, rel=1e-3)


def test_an_encoding_without_a_file_and_empty_paths_from_a_file_are_refused():
    """--data.encoding cp037 without --data.path trained on EBCDIC-decoded Shakespeare; a file's `path: ""` was
    "data.path is a directory", its `out_dir: ""` trained into runs/<time>."""
    from depthlab.config import ConfigError, DataConfig, TrainConfig

    with pytest.raises(ConfigError, match="data.encoding 'cp037' is the encoding of a file given with data.path; the "
                                          "embedded Tiny Shakespeare is UTF-8"):
        DataConfig(encoding="cp037")
    assert DataConfig(encoding="UTF8").encoding == "UTF8" and DataConfig(path="a.txt", encoding="cp037")
    with pytest.raises(ConfigError, match="data.path is empty; give a text file"):
        DataConfig(path="")
    with pytest.raises(ConfigError, match="train.out_dir is empty; give a folder"):
        TrainConfig(out_dir="")


def test_a_cache_folder_that_cannot_be_written_is_named_with_its_knob(tmp_path):
    """--data.cache_dir /sys/foo (or an unwritable HOME's ~/.cache): "PermissionError: [Errno 1] Operation not
    permitted: '/sys/nohome' (check the paths given ...)", naming neither the cache nor its setting."""
    from depthlab.config import DataConfig
    from depthlab.data import load_corpus
    from depthlab.errors import DepthlabError

    with pytest.raises(DepthlabError, match=r"^the data cache folder /proc/depthlab-nope cannot be written \(.+\); "
                                            r"point --data.cache_dir \(or DEPTHLAB_CACHE\) at a folder you can write$"):
        load_corpus(DataConfig(cache_dir="/proc/depthlab-nope"))


def test_the_parameter_count_says_it_leaves_the_position_table_out(tmp_path, tiny_text_file):
    """nanogpt-cpu printed "0.796 M parameters" of a model holding 804,096: the count leaves the learned position
    table out (nanoGPT's convention) without a word."""

    lines = []
    train(tiny_config(tmp_path / "r", tiny_text_file, model=dict(position="learned"), train=dict(max_iters=1)),
          log=lines.append)
    (run,) = [ln for ln in lines if ln.startswith("run ")]
    assert " M parameters (and 512 of the position table, left out as nanoGPT counts), vocab " in run  # 16 x 32
    lines.clear()
    train(tiny_config(tmp_path / "rope", tiny_text_file, train=dict(max_iters=1)), log=lines.append)
    (run,) = [ln for ln in lines if ln.startswith("run ")]
    assert "position table" not in run  # rope: no table, nothing left out


def test_resume_and_train_resume_false_together_are_refused(tmp_path, tiny_text_file, capsys):
    """`--resume RUN --train.resume false` resumed without a word (the --train.resume true --resume adds won)."""
    from depthlab.cli import main

    train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=2)), **QUIET)
    before = (tmp_path / "r" / "config.json").read_bytes()
    assert main(["train", "--resume", str(tmp_path / "r"), "--train.resume", "false", "--train.max_iters", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"depthlab: error: --resume {tmp_path / 'r'} and --train.resume false contradict each other: drop "
                   f"--train.resume false to continue the run, or drop --resume (--init-from {tmp_path / 'r'} "
                   "--train.out_dir NEW_DIR starts a new run from its weights)")
    assert (tmp_path / "r" / "config.json").read_bytes() == before


def test_a_section_file_refusal_says_a_file_under_its_own_section_line_is_taken(tmp_path, capsys):
    """`--model w.yaml` holding `model:` alone is taken, but with a `train:` beside it the refusal said "--model FILE
    reads the model fields alone", which the first file contradicted."""
    from depthlab.cli import main

    (tmp_path / "w.yaml").write_text("model:\n  n_layer: 3\ntrain:\n  max_iters: 5\n")
    assert main(["train", "--model", str(tmp_path / "w.yaml"), "--train.out_dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--model FILE reads the model fields (a line such as 'n_layer: 2'), alone or under one "
                        "'model:' line and nothing beside it; a file with data/model/train sections is given with -c "
                        "FILE"), err


def test_more_workers_than_cores_are_not_estimated_faster(monkeypatch):
    """--dry_run --workers 4 --threads 2 on 2 cores: "about 0.1 min", against 0.2 for the default 2 workers."""
    import os

    from depthlab.sweep.local import makespan, sweep_seconds

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    secs = [30.0, 30.0, 30.0, 30.0]
    assert sweep_seconds(secs, 4, "local") == sweep_seconds(secs, 2, "local") == makespan(secs, 2) == 60.0
    assert sweep_seconds(secs, 4, "ray") == 30.0  # a cluster's cores are not known here


def test_the_check_command_trains_advice_gives_builds_the_same_model(tmp_path):
    """train --model.source with --model.init '{"split": ...}' said "`depthlab check bugs.py:M` tries more sizes", a
    command that builds the model without its init (another model, which passed)."""
    from depthlab.errors import DepthlabError
    from depthlab.usermodel import check_forward

    model = _learner(tmp_path, split="no transpose")
    with pytest.raises(DepthlabError) as e:
        check_forward(model, f"{LEARNER}:GPT", 16, 64, 65, {"split": "no transpose"})
    assert str(e.value).endswith(":GPT --init '{\"split\": \"no transpose\"}'` tries more sizes")


def test_the_dry_run_estimates_the_order_the_sweep_runs_in():
    """--grid model.n_layer=1,2,3,16 estimated 3.7 min, 16,3,2,1 3.2 min: the sweep runs the longest first."""
    from depthlab.sweep.local import sweep_seconds

    secs = [16.7, 28.3, 39.9, 191.0]
    assert sweep_seconds(secs, 2, "ray") == sweep_seconds(secs[::-1], 2, "ray") == pytest.approx(191.0)


def test_a_sweep_figure_without_any_finished_run_warns_of_no_legend():
    """`depthlab report` on an interrupted science sweep (plot_per_block's first panel had no labelled line):
    "depthlab: warning: No artists with labels found to put in legend", matplotlib's words said as depthlab's."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from depthlab.report.sweep import _legend

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _legend(ax, fontsize=6)
    assert ax.get_legend() is None
    ax.plot([0, 1], [1, 0], label="L2")
    _legend(ax, fontsize=6)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["L2"]
    plt.close(fig)


def test_a_sweep_refused_for_its_folder_says_no_schedule_warning_first(tmp_path, tiny_text_file, monkeypatch):
    """A sweep into a folder it could not write printed its runs' schedule warnings, then the error line."""
    from conftest import TINY_SWEEP, tiny_sweep_spec

    from depthlab import sweep
    from depthlab.errors import DepthlabError
    from depthlab.sweep import run as sweep_run

    def refuse(*a, **k):
        raise DepthlabError("cannot write sweep.json")

    monkeypatch.setattr(sweep_run, "write_plan", refuse)
    spec = tiny_sweep_spec(tiny_text_file, {"model.n_layer": [1, 2]}, TINY_SWEEP, train__warmup_iters=50)
    logs = []
    with pytest.raises(DepthlabError, match="cannot write sweep.json"):
        sweep.run_sweep(spec, tmp_path / "sw", workers=1, threads=1, log=logs.append)
    assert not [ln for ln in logs if ln.startswith("warning:")], logs


def test_empty_arguments_are_named_for_what_the_command_takes(tmp_path, capsys):
    """`check ''` and `export RUN ''` were told to "give a run directory or path"; `--resume ''` to "drop --resume
    for the default"; `--blocks ''` read as the whole model ("GPT '' is one module")."""
    from depthlab.analytics.check.flow import find_blocks
    from depthlab.cli import main
    from depthlab.errors import DepthlabError

    for argv, words in ((["check", ""], "check: argument 1 is empty; give the model's file and name, PATH.py:NAME"),
                        (["export", "r", ""], "export: argument 2 is empty; give the run directory, then the folder"),
                        (["train", "--resume", ""],
                         "train: --resume: the path is empty; give a path, or drop --resume\n")):
        assert main(argv) == 2
        assert words in capsys.readouterr().err
    with pytest.raises(DepthlabError, match=r"^--blocks '': an empty name; give the dotted name of the ModuleList"):
        find_blocks(_learner(tmp_path), "")
