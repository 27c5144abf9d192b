"""Findings of the 2026-12-06 session (third)."""

import pytest

from conftest import TINY_TEXT, cli_err, trained_tiny_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return trained_tiny_run(tmp_path_factory, "s55", TINY_TEXT, steps=4)


@pytest.mark.parametrize("command, mapping", [
    ("train", "{model: {n_layer: 4}}"), ("probe", "{model: {n_layer: 4}}"), ("sample", "{max_new_tokens: 200}"),
    ("layers", "{max_tokens: 10000}"), ("diagnose", "{threads: 2}"), ("export", "{checkpoint: best}"),
])
def test_a_missing_config_file_names_an_inline_mapping_the_command_takes(capsys, tmp_path, command, mapping):
    # sample, layers, diagnose and export take no train section: '{train: ...}' was named to all of them
    err = cli_err(capsys, command, "-c", str(tmp_path / "no.yaml"))
    assert f"inline YAML such as -c '{mapping}')" in err, err


def test_coordcheck_names_no_gpt_field_that_does_not_exist(capsys):
    # it said "depthlab's GPT takes foo as a model field: --axis model.foo=...", a field that does not exist
    err = cli_err(capsys, "coordcheck", "--axis", "model.init.foo=1,2")
    assert ("no --model.source is given; depthlab's GPT has no numeric field foo (its numeric fields: "
            "model.block_size, ") in err, err
    assert "model.foo" not in err, err
    err = cli_err(capsys, "coordcheck", "--axis", "model.init.n_layer=1,2")
    assert err.strip().endswith("depthlab's GPT takes n_layer as a model field: --axis model.n_layer=..."), err


@pytest.mark.parametrize("part", ["config.json", "checkpoints"])
def test_a_resume_of_a_part_of_a_run_names_the_run(capsys, run, part):
    # it said "move RUN/config.json out of RUN, then resume it there", advice for a run copied into a run
    err = cli_err(capsys, "train", "--train.resume", "true", "--train.out_dir", str(run / part))
    assert f"cannot resume {run / part}: it is no run but a part of the depthlab run {run}; to resume that run give " \
           f"its folder: --resume {run}" in err, err


@pytest.mark.parametrize("argv", [["train", "--resume", "{}"], ["sample", "{}"], ["layers", "{}"]])
def test_a_command_given_a_runs_checkpoints_folder_names_the_run(capsys, run, argv):
    err = cli_err(capsys, *[a.format(run / "checkpoints") for a in argv])
    assert f"{run / 'checkpoints'} is not a depthlab run directory but a part of the run {run}; give the run's " \
           f"folder, {run}" in err, err


def test_a_run_copied_into_a_run_is_still_told_to_move_out(capsys, run, tmp_path):
    import shutil

    outer = tmp_path / "outer"
    shutil.copytree(run, outer)
    shutil.copytree(run, outer / "inner")
    err = cli_err(capsys, "train", "--resume", str(outer / "inner"))
    assert f"move {outer / 'inner'} out of {outer}, then resume it there" in err, err


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
@pytest.mark.parametrize("more", [[], ["--train.learning_rate", "0.001"]])
def test_a_resume_a_stop_rule_ended_says_only_that_nothing_trains(capsys, tmp_path, more):
    # it said "resuming RUN from step 0" (and with a new rate, where that rate would go) before "nothing to train"
    from depthlab.cli import main

    from conftest import tiny_cli_args

    (tmp_path / "t.txt").write_text(TINY_TEXT)
    out = tmp_path / "run"
    assert main(["train", *tiny_cli_args(tmp_path / "t.txt", out, train__target_val_loss=100)]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(out), *more]) == 0
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.startswith("depthlab: nothing to train: stopped at step 0: val loss reached "
                                                "train.target_val_loss 100 at step 0"), cap
    assert len(cap.err.strip().splitlines()) == 1, cap.err


@pytest.mark.parametrize("given, said", [
    (["--model.n_layer", "4"], "--model.n_layer 4: this describes depthlab's GPT and does not apply to --model.source"),
    (["-c", "{model: {n_embd: 128}}"], "model.n_embd 128: this describes depthlab's GPT and does not apply to"),
])
def test_a_gpt_field_given_at_its_default_beside_a_source_is_refused(capsys, tmp_path, given, said):
    # --model.n_layer 4 (the default) with --model.source trained the user's model at its own depth, silently
    from test_usermodel import MODEL

    (tmp_path / "mine.py").write_text(MODEL)
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    err = cli_err(capsys, "train", "--model.source", f"{tmp_path / 'mine.py'}:MyGPT", "--data.path",
                  str(tmp_path / "t.txt"), "--train.out_dir", str(tmp_path / "run"), *given)
    assert said in err, err
    assert not (tmp_path / "run").exists()


def test_the_report_card_of_a_leaking_run_does_not_say_it_uses_context(run):
    # a model without a causal mask (val 1.9 nats below bigram) was carded "below bigram, uses context" beside the
    # report's own causal_leak finding
    from depthlab.report.html import leaks_future, run_cards
    from depthlab.report.run_data import RunData

    data = RunData(run)
    data.summary = {**data.summary, "best_val_loss": float(data.baselines["bigram"]["nats"]) - 1.0}
    card = dict((label, note) for label, _, note in run_cards(data))["minus bigram baseline"]
    assert card == "nats: below bigram, uses context", card
    card = dict((label, note) for label, _, note in run_cards(data, leaks=True))["minus bigram baseline"]
    assert card == ("nats: below bigram, but the model sees the tokens it predicts (causal_leak, under Diagnosis), so "
                    "its loss is no measure of the context it uses"), card
    assert leaks_future({"findings": [{"rule": "context_unused"}, {"rule": "causal_leak"}]})
    assert not leaks_future({"findings": [{"rule": "context_unused"}]}) and not leaks_future(None)


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_in_the_last_steps_evaluation_is_a_stop_the_resume_finishes(tmp_path, tiny_text_file, sig):
    """The sweep pass: a Ctrl-C in the evaluation of the last step ended the run as finished (summary.json with step
    0's losses, no checkpoint of the 20 steps trained), and every rerun of the sweep called it finished."""
    import json
    import signal

    from depthlab.trainer import Interrupted, Trainer

    from conftest import tiny_config

    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=20, eval_interval=100, eval_iters=4))
    tr = Trainer(cfg, log=lambda s: None)
    real = tr.evaluator.port.loss

    def loss(model, x, y):
        if not model.training and tr.step == 20:  # in the step-20 (last) evaluation
            tr.stop.request(getattr(signal, sig))
        return real(model, x, y)

    tr.evaluator.port.loss = loss
    with pytest.raises(Interrupted) as e:
        tr.fit()
    assert e.value.step == 20 and "at step 20; checkpoint written" in str(e.value), str(e.value)
    assert not (tmp_path / "r" / "summary.json").exists()
    assert (tmp_path / "r" / "checkpoints" / "step-000020.safetensors").is_file()
    lines = []
    resumed = tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=20, eval_interval=100, eval_iters=4,
                                                                     resume=True))
    Trainer(resumed, log=lines.append).fit()
    recs = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if r["kind"] == "eval"] == [0, 20]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    last = [r for r in recs if r["kind"] == "eval"][-1]
    assert summary["final_step"] == 20 and summary["final_val_loss"] == last["val_loss"]
    assert summary["final_validation"] is not None
    assert not any("nothing to train" in x for x in lines), lines
    assert lines[0].startswith(f"resuming {tmp_path / 'r'} from step 20 "), lines  # said: it evaluates, then ends
    again = []
    Trainer(resumed, log=again.append).fit()  # the evaluated step is not evaluated again: nothing left
    assert again[-1].startswith("nothing to train: the run is at step 20"), again


def test_a_sweep_resumes_a_run_whose_last_evaluation_a_signal_cut(tmp_path):
    # its checkpoint at the last step was taken for a finished run whose summary.json is gone: trained again from 0
    from depthlab.config import RunConfig
    from depthlab.rundir import write_json
    from depthlab.sweep.common import resume_config

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    cfg = RunConfig.from_dict({"train": {"max_iters": 30}}).to_dict()
    write_json(run / "config.json", cfg)

    from unittest import mock

    with mock.patch("depthlab.checkpoint.latest_checkpoint", lambda d: {"step": 30, "evaluated": False}):
        assert resume_config(run, cfg)["train"]["resume"] is True
    with mock.patch("depthlab.checkpoint.latest_checkpoint", lambda d: {"step": 30, "evaluated": True}):
        assert resume_config(run, cfg) is None  # a finished run whose summary.json is gone: trained again
    with mock.patch("depthlab.checkpoint.latest_checkpoint", lambda d: {"step": 20, "evaluated": True}):
        assert resume_config(run, cfg)["train"]["resume"] is True


def test_a_typo_in_an_experiments_keys_is_refused_not_kept_as_a_claim_setting(capsys, tmp_path):
    # "bas:" for "base:" was stored as a science-claim setting, and the experiment trained the default variant
    f = tmp_path / "s.yaml"
    f.write_text("base: {train: {max_iters: 2}}\nexperiments:\n  - name: post\n    bas:\n      model: {variant: "
                 "postnorm}\n    grid: {model.n_layer: [1]}\n")
    err = cli_err(capsys, "sweep", "-f", str(f), "--out_dir", str(tmp_path / "sw"), "--dry_run")
    assert err.strip().endswith("experiment 1: unknown key(s) bas (allowed: name, base, grid, target_val_loss); did "
                                "you mean base?"), err


@pytest.mark.parametrize("more, said", [
    ([], "run the same command again to finish it (finished runs in "),
    # s56: "finished runs are kept" was false of the earlier runs --overwrite had deleted
    (["--overwrite"], "run the same command again without --overwrite to finish it (the runs this command finished "
                      "in "),
])
def test_an_interrupted_overwrite_sweep_is_told_to_go_on_without_overwrite(capsys, monkeypatch, tmp_path, more, said):
    # "run the same command again" with --overwrite deleted the checkpoints it promised to continue from
    from depthlab import sweep
    from depthlab.cli import main

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "run_sweep", interrupted)
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    assert main(["sweep", "--grid", "model.n_layer=1", "--data.path", str(tmp_path / "t.txt"), "--no_report",
                 "--out_dir", str(tmp_path / "sw"), *more]) == 130
    err = capsys.readouterr().err
    assert f"depthlab: sweep interrupted; {said}" in err, err


@pytest.mark.parametrize("kw, fix", [
    (dict(n_embd=63), "try n_embd 64, or --model.position learned --model.n_head 3"),  # rope: no head count works
    (dict(n_embd=63, n_head=5), "try n_embd 60, or --model.position learned --model.n_head 3"),
    (dict(n_embd=63, position="learned"), "try n_head 3"),
    (dict(n_embd=36, n_head=8), "try n_head 6"),
])
def test_the_fix_of_an_n_embd_n_head_does_not_divide_is_one_that_builds(kw, fix):
    # "try n_head 3" for n_embd 63 was refused next: rope needs an even head size (21)
    from depthlab.config import ConfigError, ModelConfig

    with pytest.raises(ConfigError) as e:
        ModelConfig(**kw)
    assert str(e.value).endswith(fix), str(e.value)
    if fix.startswith("try n_head"):
        ModelConfig(**{**kw, "n_head": int(fix.split()[-1])})
    else:  # both fixes build
        ModelConfig(**{**kw, "n_embd": int(fix.split()[2].rstrip(","))})
        ModelConfig(**{**kw, "position": "learned", "n_head": int(fix.split()[-1])})


def test_report_on_a_sweep_folder_it_cannot_write_is_one_line_naming_the_folder(capsys, monkeypatch, tmp_path):
    # it said "PermissionError: [Errno 1] Operation not permitted: 'SW/.results.csv.esi60s8k.tmp'" and no fix
    import depthlab.report.sweep as report_sweep

    sw = tmp_path / "sw"
    sw.mkdir()
    (sw / "sweep.json").write_text("{}")
    monkeypatch.setattr(report_sweep, "is_sweep_dir", lambda p: True)

    def read_only(d):
        raise PermissionError(1, "Operation not permitted", str(sw / ".results.csv.esi60s8k.tmp"))

    monkeypatch.setattr(report_sweep, "build_sweep_report", read_only)
    err = cli_err(capsys, "report", str(sw))
    assert err.strip() == (f"depthlab: error: report: cannot write the sweep's results and report into {sw}: Operation "
                           f"not permitted; make {sw} writable, or copy it elsewhere and report on the copy"), err


PADDED = '''
import torch, torch.nn as nn

class Padded(nn.Module):
    """A byte-level head: 256 logits whatever the corpus's vocabulary."""
    def __init__(self, vocab_size):
        super().__init__()
        self.emb = nn.Embedding(256, 16)
        self.head = nn.Linear(16, 256)

    def forward(self, idx):
        return self.head(self.emb(idx))
'''


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_model_with_more_logits_than_tokens_trains_samples_and_is_judged_against_its_own_count(tmp_path, capsys):
    # depthlab check called 256 logits for 65 tokens "harmless, e.g. a padded vocabulary"; train refused them
    import json
    import math

    import torch

    from depthlab.analytics.rules.evidence import Evidence
    from depthlab.analytics.rules.signals import init_too_high
    from depthlab.cli import main
    from depthlab.sample import generate

    (tmp_path / "pad.py").write_text(PADDED)
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    out = tmp_path / "run"
    assert main(["train", "--model.source", f"{tmp_path / 'pad.py'}:Padded", "--data.path", str(tmp_path / "t.txt"),
                 "--model.block_size", "16", "--train.max_iters", "4", "--train.eval_interval", "2",
                 "--train.eval_iters", "2", "--train.batch_size", "4", "--train.out_dir", str(out)]) == 0
    cfg = json.loads((out / "config.json").read_text())
    V = cfg["model"]["vocab_size"]
    assert cfg["resolved"]["model_logits"] == 256 and V < 256
    # the uniform level of 256 logits is ln 256: a start there is no "confidently wrong" initialisation
    ev = Evidence([{"kind": "eval", "step": 0, "val_loss": math.log(256), "train_loss": math.log(256)}], cfg)
    assert init_too_high(ev) is None
    ev = Evidence([{"kind": "eval", "step": 0, "val_loss": math.log(256) + 1.5, "train_loss": 6.0}], cfg)
    assert init_too_high(ev) == (math.log(256) + 1.5, math.log(256))
    capsys.readouterr()
    assert main(["sample", str(out), "--max_new_tokens", "20"]) == 0

    class Loud(torch.nn.Module):  # every draw would be id 200 without the crop to the tokenizer's V
        def forward(self, idx):
            out = torch.zeros(*idx.shape, 256)
            out[..., 200] = 50.0
            return out

    ids = generate(Loud(), torch.zeros(1, 1, dtype=torch.long), 10, block_size=8, vocab_size=V)
    assert int(ids.max()) < V


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
@pytest.mark.parametrize("flags, said", [
    # a huge Muon rate: "unexpected RuntimeError: value cannot be converted to type float without overflow"
    # (dtype pinned: auto chooses bfloat16 where its matmuls are faster, an AMX Xeon)
    (["--train.muon_lr", "1e300", "--train.dtype", "float32"],
     "e+299), dtype float32); lower train.learning_rate (AdamW: embeddings, head, gains; now 0.003) or "
     "--train.muon_lr (Muon: the blocks' matrices; now 1e+300)"),
    # the advice named train.learning_rate alone for a rate it did not set
    (["--train.muon_lr", "1e6"], "or --train.muon_lr (Muon: the blocks' matrices; now 1e+06)"),
    (["--train.weight_decay", "1e300"], "lower --train.weight_decay (now 1e+300): times the peak rate 0.01 it is >= 1"),
])
def test_a_non_finite_stop_names_the_knob_that_made_it(capsys, tmp_path, flags, said):
    from depthlab.cli import main

    from conftest import tiny_cli_args

    (tmp_path / "t.txt").write_text(TINY_TEXT)
    rc = main(["train", *tiny_cli_args(tmp_path / "t.txt", tmp_path / "r", train__warmup_iters=0), *flags])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 3 and err.startswith("depthlab: error: non-finite ") and said in err, err


def test_a_training_sample_longer_than_sampling_allows_is_refused_before_training(capsys):
    # it trained, then warned at the first sample naming --max-new-tokens and --prompt, which train does not take
    err = cli_err(capsys, "train", "--train.sample_tokens", "10000001", "--print_config")
    assert err.strip() == ("depthlab: error: --train.sample_tokens must be at most 10,000,000 (each sample is held in "
                           "memory), got 10,000,001"), err


def test_a_utf8_file_read_as_another_encoding_is_told_it_reads_as_utf8(capsys, tmp_path):
    # the fix offered latin-1, which reads a UTF-8 file's emoji as wrong characters without a word
    f = tmp_path / "u8.txt"
    f.write_text("héllo wörld 😀 " * 300, encoding="utf-8")
    err = cli_err(capsys, "train", "--data.path", str(f), "--data.encoding", "ascii",
                  "--train.out_dir", str(tmp_path / "r"))
    assert err.strip().endswith("it reads as UTF-8, the default: set --data.encoding utf-8 (or leave it out)"), err
    f.write_bytes(b"h\xe9llo " * 300)  # latin-1: the usual advice stands
    err = cli_err(capsys, "train", "--data.path", str(f), "--data.encoding", "ascii",
                  "--train.out_dir", str(tmp_path / "r"))
    assert err.strip().endswith("set data.encoding (e.g. --data.encoding cp1252 or latin-1) to the file's encoding")


def test_a_print_in_the_users_forward_goes_to_stderr_not_into_the_sampled_text(capsys):
    # `depthlab sample RUN > out.txt` held the model's debug prints among the text
    import torch

    from depthlab.sample import generate

    class Chatty(torch.nn.Module):
        def forward(self, idx):
            print("forward", tuple(idx.shape))
            return torch.zeros(*idx.shape, 5)

    generate(Chatty(), torch.zeros(1, 1, dtype=torch.long), 3, temperature=0, block_size=8, vocab_size=5)
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("forward (1, ") == 3, cap


def test_a_forward_that_requires_targets_samples_as_it_trains():
    # training called forward(idx, targets); sampling called forward(idx) and failed, blaming the batch size
    import torch

    from depthlab.sample import generate

    class LossFirst(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(5, 5)

        def forward(self, idx, targets):
            logits = self.emb(idx)
            return torch.nn.functional.cross_entropy(logits.view(-1, 5), targets.view(-1)), logits

    out = generate(LossFirst(), torch.zeros(1, 1, dtype=torch.long), 4, temperature=0, block_size=8, vocab_size=5)
    assert out.shape == (1, 5)


BATCHNORM = '''
import torch, torch.nn as nn

class Normed(nn.Module):
    """Causal attention, then a norm over the features: BatchNorm1d (batch and time statistics in training) or
    LayerNorm (each position alone)."""
    def __init__(self, vocab_size, batch_norm=True, n=16):
        super().__init__()
        self.tok, self.qkv = nn.Embedding(vocab_size, n), nn.Linear(n, 3 * n)
        self.norm = nn.BatchNorm1d(n) if batch_norm else nn.LayerNorm(n)
        self.drop, self.head = nn.Dropout(0.1), nn.Linear(n, vocab_size)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok(idx)
        q, k, v = self.qkv(x).split(x.size(-1), dim=-1)
        att = (q @ k.transpose(-2, -1)).masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
        x = x + att.softmax(-1) @ v
        x = self.norm(x.transpose(1, 2)).transpose(1, 2) if isinstance(self.norm, nn.BatchNorm1d) else self.norm(x)
        return self.head(self.drop(x))
'''


@pytest.mark.parametrize("batch_norm", [True, False])
def test_check_finds_the_leak_of_batch_statistics_in_train_mode(tmp_path, batch_norm):
    # BatchNorm over the embeddings passed causal_leak (eval mode uses running averages); in training a position's
    # logits moved with a later token of its sequence (0.0135) and with another sequence (0.0156)
    import torch

    from depthlab.analytics.check import check_model
    from depthlab.config import DataConfig
    from depthlab.data import load_corpus
    from depthlab.usermodel import build_model, parse_source

    (tmp_path / "bn.py").write_text(BATCHNORM)
    torch.manual_seed(0)
    model = build_model(parse_source(f"{tmp_path / 'bn.py'}:Normed"), {"batch_norm": batch_norm}, 65)
    corpus = load_corpus(DataConfig(cache_dir=str(tmp_path / "cache")))
    rep = check_model(model, corpus, block_size=16, rules=("shape", "causal_leak"), name="Normed")
    leak = {c.rule: c for c in rep.checks}["causal_leak"]
    if batch_norm:
        assert leak.ok is False and leak.evidence["mode"] == "train", leak.evidence
        assert leak.summary.startswith("in train mode, as it trains (norm normalises with statistics over the batch "
                                       "and its positions"), leak.summary
        assert leak.remedy.startswith("normalise each position on its own: LayerNorm"), leak.remedy
    else:
        assert leak.ok is True, leak.evidence


@pytest.mark.parametrize("model, first", [
    ({"source": "deep.py:DeepNoRes", "block_size": 64},
     "nothing of the input reaching the output (position 0 does not use even the current character): a stack "
     "without shortcuts (x = x + block(x)) averages"),
    ({"variant": "plain", "block_size": 64}, "model.variant plain has no shortcut and averages every position into "
                                            "one vector (use model.variant prenorm)"),
])
def test_context_unused_at_the_unigram_line_names_what_keeps_even_the_current_token_out(model, first):
    # the causes named were attention's (path, mask, context length), none of which explains position 0 at the
    # unigram line: a model without attention reaches the bigram line
    from depthlab.analytics.rules.context import UNUSED, context_words

    curve = [3.35] * 64
    state, words = context_words(0.0, 0.01, curve, 2.48, 3.35, model, lq_se=0.01, pos0_se=0.01)
    assert state == UNUSED and "this comes from nothing of the input reaching the output (position 0 does not use " \
                               "even the current character): " in words and first in words, words
    assert words.endswith("or too short a context (raise model.block_size, now 64)"), words
    state, words = context_words(0.0, 0.01, [2.5] * 64, 2.48, 3.35, model, lq_se=0.01, pos0_se=0.01)
    assert state == UNUSED and "this comes from no attention path" in words, words  # at the bigram line: attention's


def test_a_sweeps_schedule_warning_is_said_once_on_its_console_with_its_count():
    # every run's train.log warned that its warmup outlasts it; the sweep's console said nothing
    from depthlab.config import RunConfig
    from depthlab.sweep.run import _say_schedule_warnings
    from depthlab.sweep.spec import RunPoint

    def point(name, max_iters):
        cfg = RunConfig.from_dict({"train": {"max_iters": max_iters, "warmup_iters": 50}}).to_dict()
        return RunPoint(name, "", {}, cfg)

    lines = []
    _say_schedule_warnings([point("a", 40), point("b", 40), point("c", 400)], lines.append)
    assert len(lines) == 1 and lines[0].startswith("warning: 2 of the 3 runs to train: train.warmup_iters (50) >= "
                                                   "train.max_iters (40): the peak"), lines


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_dry_run_with_overwrite_says_which_runs_it_would_delete(tmp_path):
    # it listed a finished sweep's runs as if new: nothing said --overwrite would delete and retrain them
    from depthlab import sweep

    from conftest import TINY_SWEEP

    (tmp_path / "t.txt").write_text(TINY_TEXT)
    spec = sweep.build_spec(None, None, ["model.n_layer=1,2"], {**TINY_SWEEP, "data.path": str(tmp_path / "t.txt")},
                            None)
    sweep.run_sweep(spec, tmp_path / "sw", workers=1, threads=1, log=lambda s: None)
    out = sweep.dry_run(spec, tmp_path / "sw", 1, rerun=True)
    assert out.splitlines()[-1] == f"--overwrite: 2 finished runs in {tmp_path / 'sw'} would be deleted and trained " \
                                   "again from step 0", out
    assert "--overwrite" not in sweep.dry_run(spec, tmp_path / "sw", 1, rerun=False)


def test_uniform_attention_is_no_finding_for_a_model_that_uses_its_context():
    # a pre-LN 6 x 64 at val 2.139, gaining 0.556 +- 0.085 nats along the positions, was told its heads "average over
    # the context instead of selecting" (and so was every run of a 6-run sweep)
    from depthlab.analytics.diagnose import diagnose_records

    from conftest import SHAKESPEARE_BASELINES, context_record, eval_records, probe_record

    broad = probe_record(500, [0.9], ent=[[3.8, 3.9]])
    used = context_record(500, [2.5] + [2.0] * 63)  # position 0 at 2.5, the rest 0.5 nats lower
    unused = context_record(500, [2.6] * 64)
    base = eval_records([3.0, 2.6, 2.3])
    found = [f.rule for f in diagnose_records(base + [broad, used], baselines=SHAKESPEARE_BASELINES)]
    assert "uniform_attention" not in found, found
    found = [f.rule for f in diagnose_records(base + [broad, unused], baselines=SHAKESPEARE_BASELINES)]
    assert "uniform_attention" in found, found


def test_probe_and_check_judge_a_relative_rank_collapse_alike():
    # probe called plain 6 x 64 (rank measure 0.58 -> 0.12) "healthy ... all stay in range"; check's gradient_flow
    # called the same model a PROBLEM, and diagnose sent the learner to probe
    from depthlab.analytics.probe import probe_verdicts

    def layers(ranks):
        return [{"block": i, "grad_norm": 0.2, "mean_abs_grad": 1e-3, "weight_norm": 1.0, "act_rms": 0.5,
                 "rank_measure": r, "token_cosine": 0.9} for i, r in enumerate(ranks)]

    problems, _ = probe_verdicts({"layers": layers([0.58, 0.4, 0.3, 0.2, 0.15, 0.12]), "loss": 4.2})
    assert problems and problems[0].startswith("token diversity collapses across the blocks: the rank measure falls "
                                               "from 0.58 (block 0) to 0.12 (block 5), 4.8x"), problems
    problems, fine = probe_verdicts({"layers": layers([0.99, 0.95, 0.9]), "loss": 4.2})  # pre-LN: in range
    assert not problems and any(f.startswith("token diversity (rank measure 0.99 -> 0.90)") for f in fine), fine


def test_bigram_stuck_above_the_bigram_line_names_the_residual_path_not_attention_alone():
    # plain 1 x 32 at 3.117 (0.635 above bigram, 0.23 below unigram) was told to "check attention entropy"; the
    # missing shortcut, which loses even the current character, was named only under uniform_attention
    from depthlab.analytics.diagnose import diagnose_records

    from conftest import SHAKESPEARE_BASELINES, eval_records

    recs = eval_records([4.17, 3.3, 3.117])
    f = {x.rule: x for x in diagnose_records(recs, config={"model": {"variant": "plain", "n_layer": 1}},
                                             baselines=SHAKESPEARE_BASELINES)}
    assert f["bigram_stuck"].remedy.startswith("the current character alone gives the bigram line, with no attention "
                                               "at all, so above it part of even the current character is lost on its "
                                               "way to the output: add residual connections (model.variant is plain"), \
        f["bigram_stuck"].remedy
    f = {x.rule: x for x in diagnose_records(eval_records([4.17, 2.9, 2.47]), config={"model": {"variant": "plain"}},
                                             baselines=SHAKESPEARE_BASELINES)}
    assert "attention" in f["bigram_stuck"].remedy.split(";")[0], f["bigram_stuck"].remedy  # at the line: attention's


def test_a_run_on_a_read_only_disk_is_told_to_copy_it_not_to_chmod(monkeypatch, tmp_path):
    # "Permission denied; make the run writable (chmod -R u+w ...)", which fails with "Read-only file system"
    import os
    from types import SimpleNamespace

    from depthlab.errors import DepthlabError
    from depthlab.training import runlock

    monkeypatch.setattr(os, "statvfs", lambda p: SimpleNamespace(f_flag=os.ST_RDONLY))
    monkeypatch.setattr(os, "access", lambda p, mode: False)
    with pytest.raises(DepthlabError) as e:
        runlock.require_writable(tmp_path)
    assert str(e.value).startswith(f"cannot write into the run folder {tmp_path}: Read-only file system; copy the run "
                                   f"to a writable disk (cp -r {tmp_path} COPY; it lies on a read-only file system"), e


@pytest.mark.parametrize("text", ["hello\n", ""])
def test_a_config_file_error_of_a_command_without_sections_describes_its_own_keys(capsys, run, tmp_path, text):
    # sample/context/diagnose were told to write "train:, then max_iters: 100", which they then refuse
    f = tmp_path / "c.yaml"
    f.write_text(text)
    err = cli_err(capsys, "sample", str(run), "-c", str(f))
    said = ("must be a mapping with the command's options (e.g. max_new_tokens:), got a str; write one `option: value` "
            "line per option of the command (e.g. `max_new_tokens: 200`)") if text else \
        "is empty; give it the command's options (e.g. max_new_tokens:) (or drop -c)"
    assert said in err and "train:" not in err, err
    f.write_text("max_new_tokens: 5\n")  # what it says works
    from depthlab.cli import main

    assert main(["sample", str(run), "-c", str(f)]) == 0


def test_a_val_loss_rising_above_uniform_while_the_train_loss_falls_is_overfitting_not_exploding():
    # a 12-character corpus: train 2.14 -> 0.17, val 2.39 -> 4.55 (above ln V) was "exploding ... lower the rates"
    from depthlab.analytics.diagnose import diagnose_records

    def recs(train, val):
        return [{"kind": "eval", "step": s, "train_loss": t, "val_loss": v, "tokens_seen": 1000 * s}
                for s, t, v in zip((0, 10, 20), train, val)]

    base = {"uniform": {"nats": 2.08}, "unigram": {"nats": 2.0}, "bigram": {"nats": 1.0}, "vocab_size": 8}
    cfg = {"model": {"vocab_size": 8}}
    found = [f.rule for f in diagnose_records(recs([2.14, 0.37, 0.17], [2.39, 4.05, 4.55]), config=cfg,
                                              baselines=base)]
    assert "exploding" not in found and "overfitting" in found, found
    found = [f.rule for f in diagnose_records(recs([2.14, 3.9, 4.6], [2.39, 4.05, 4.55]), config=cfg, baselines=base)]
    assert "exploding" in found, found  # both rising: a blow-up


def test_layers_finds_a_final_norm_and_head_by_other_common_names():
    # LLMs-from-scratch style (trf_blocks, final_norm, out_head): layers and the report's figure were refused
    import torch.nn as nn

    from depthlab.analytics.layers import layer_access

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.fc = nn.LayerNorm(8), nn.Linear(8, 8)

        def forward(self, x):
            return x + self.fc(self.ln(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(5, 8)
            self.trf_blocks = nn.Sequential(Block(), Block())
            self.final_norm = nn.LayerNorm(8)
            self.out_head = nn.Linear(8, 5)

        def forward(self, idx):
            return self.out_head(self.final_norm(self.trf_blocks(self.emb(idx))))

    m = Model()
    acc = layer_access(m)
    assert acc.names == ("trf_blocks", "final_norm", "out_head") and acc.head is m.out_head


@pytest.mark.parametrize("kw, said", [({"max_new_tokens": -1}, "max_new_tokens must be >= 0, got -1"),
                                      ({"top_p": 2.0}, "top_p must be a number in (0, 1], got 2.0"),
                                      ({"num_samples": 0}, "num_samples must be >= 1, got 0")])
def test_the_python_api_names_its_own_keyword_arguments_not_the_commands_flags(run, kw, said):
    # sample_text(..., max_new_tokens=-1) said "--max-new-tokens must be >= 0"
    from depthlab.errors import DepthlabError
    from depthlab.sample import sample_text

    with pytest.raises(DepthlabError) as e:
        sample_text(run, **kw)
    assert str(e.value) == said


def test_an_all_clear_of_findings_alone_does_not_claim_every_rule_judged_the_run():
    # the notebook's print(format_findings(diagnose_run(run))) listed no_gradient etc. as applied to a run without a
    # single gradient record
    from depthlab.analytics.diagnose import RULES, format_findings

    assert format_findings([]) == ("diagnosis: no problems found (which rules could judge this run: "
                                   "format_findings(*diagnose_run_full(RUN)), or depthlab diagnose RUN)")
    assert format_findings([], []) == "diagnosis: no problems found (rules: " + ", ".join(RULES) + ")"
    assert format_findings([], ["no_gradient (no gradient records)"]).splitlines() == [
        "diagnosis: no problems found by the rules that could judge this run",
        "  not judged: no_gradient (no gradient records)"]


def test_python_api_bad_input_is_said_in_its_own_terms(run, tmp_path):
    # train({...}) and train(None): AttributeError; seed="7": torch's RuntimeError; decode(-1): the last symbol;
    # DataConfig(path=Path(...)): "must be the path of a text file", of a text file
    from pathlib import Path

    from depthlab import RunConfig, train
    from depthlab.config import DataConfig
    from depthlab.errors import DepthlabError
    from depthlab.sample import sample_text
    from depthlab.tokenizer import CharTokenizer

    for bad in ({"model": {"n_layer": 1}}, None):
        with pytest.raises(DepthlabError) as e:
            train(bad)
        assert str(e.value).startswith(f"train takes a RunConfig, got {type(bad).__name__}: RunConfig(...), or "
                                       "RunConfig.from_dict")
    cfg = RunConfig()
    cfg.model = {"n_layer": 1}
    with pytest.raises(DepthlabError, match=r"RunConfig\(model=\.\.\.\) takes a ModelConfig, got dict"):
        train(cfg)
    with pytest.raises(DepthlabError, match=r"^seed must be an integer from 0 to 2\*\*63 - 1, got '7'$"):
        sample_text(run, "a", 3, seed="7")
    with pytest.raises(DepthlabError, match=r"^decode: token id -1 is outside the vocabulary's ids 0..1$"):
        CharTokenizer(["a", "b"]).decode([0, -1])
    assert DataConfig(path=Path(tmp_path / "t.txt")).path == str(tmp_path / "t.txt")
    with pytest.raises(DepthlabError) as e:
        RunConfig.from_run(tmp_path)  # no run there
    assert str(e.value).startswith(f"{tmp_path / 'config.json'} cannot be read"), str(e.value)


def test_sweep_figure_captions_describe_the_panels_and_colours_drawn(tmp_path):
    # a grid over model.variant alone drew one panel of two coloured lines, captioned "one panel per setting"; the
    # per-block figures drew a panel per variant, captioned "colours are values of setting"
    import re

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from depthlab.report.sweep import figure_html

    png = tmp_path / "f.png"
    plt.figure(figsize=(1, 1)).savefig(png)
    plt.close("all")

    def caption(kind, x, groups):
        return re.search(r"<figcaption[^>]*>(.*?)</figcaption>", figure_html(kind, png, x, groups=groups), re.S)[1]

    assert caption("curves", None, ["model.variant"]).startswith(
        "Validation loss vs step, one panel, one colour per variant, one line per run")
    assert caption("curves", "model.n_layer", ["model.variant"]).startswith(
        "Validation loss vs step, one panel per value of n_layer, one colour per variant, one line per run")
    assert "; one panel per variant, blocks are numbered" in caption("grad", None, ["model.variant"])
    assert "; one panel per variant, colours are values of n_layer, blocks" in caption("grad", "model.n_layer",
                                                                                       ["model.variant"])


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_the_gradient_flow_subtitle_names_the_step_of_its_record(monkeypatch, tmp_path):
    # "at the last step block 0 gets ..." came from the last gradient record (step 200), the run's last step was 248
    import depthlab.report.plots as plots
    from depthlab.cli import main

    from conftest import tiny_cli_args

    (tmp_path / "t.txt").write_text(TINY_TEXT)
    r = tmp_path / "r"
    assert main(["train", *tiny_cli_args(tmp_path / "t.txt", r, train__max_iters=5, train__grad_log_interval=2)]) == 0
    said = {}
    monkeypatch.setattr(plots, "save_run_figure", lambda fig, d, name, title, sub: said.setdefault(name, sub))
    plots.plot_grad_flow(r)
    grads = [json_line for json_line in (r / "metrics.jsonl").read_text().splitlines() if '"kind": "grad"' in json_line]
    import json

    last = json.loads(grads[-1])["step"]
    assert said["grad_flow"].startswith(f"at step {last} (the last gradient record) block 0 gets "), said


def test_context_unused_of_a_stack_without_a_shortcut_names_the_wiring_first():
    # plain 8 x 64 at the unigram line: "first the training: ... its architecture cannot be judged yet (the learning
    # rate ...)", beside unigram_stuck and rank_collapse blaming model.variant plain
    from depthlab.analytics.diagnose import diagnose_records

    from conftest import SHAKESPEARE_BASELINES, context_record, eval_records

    recs = eval_records([4.17, 3.4, 3.35]) + [context_record(200, [3.4] + [3.38] * 63)]
    f = {x.rule: x for x in diagnose_records(recs, config={"model": {"variant": "plain", "n_layer": 8}},
                                             baselines=SHAKESPEARE_BASELINES)}
    remedy = f["context_unused"].remedy
    assert remedy.startswith("first the wiring: add residual connections (model.variant is plain"), remedy
    f = {x.rule: x for x in diagnose_records(recs, config={"model": {"variant": "prenorm", "n_layer": 8}},
                                             baselines=SHAKESPEARE_BASELINES)}
    assert f["context_unused"].remedy.startswith("first the training: "), f["context_unused"].remedy


def test_a_sweep_rows_diagnosis_cell_says_rules_not_judged_rather_than_nothing(run, tmp_path):
    # a blank cell read as a clean bill of health for a plain run at the unigram line that no rule could judge yet
    import json
    import shutil

    from depthlab.sweep.results import run_details

    r = tmp_path / "r"
    shutil.copytree(run, r)
    (r / "diagnosis.json").write_text(json.dumps({"findings": [], "not_judged": [
        "bigram_stuck, unigram_stuck, context_unused (they need an evaluation at step 200 or later)",
        "plateau (1 of the 6 evaluations it needs)"]}))
    assert run_details(r)["diagnosis"] == ["none found; 4 not judged (diagnosis.json)"]
    (r / "diagnosis.json").write_text(json.dumps({"findings": [{"rule": "plateau"}], "not_judged": ["x (y)"]}))
    assert run_details(r)["diagnosis"] == ["plateau"]
    (r / "diagnosis.json").write_text(json.dumps({"findings": [], "not_judged": []}))
    assert run_details(r)["diagnosis"] == []
