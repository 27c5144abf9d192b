"""Findings of the 2026-12-06 session (fourth)."""

import pytest

from conftest import SHAKESPEARE_BASELINES as BASE
from conftest import QUIET, eval_records, grad_record, tiny_config


def _lr_grad(step, ratio, lr):
    rec = grad_record(step, [0.5, 1.0], [ratio, ratio])
    rec["lr"] = lr
    return rec


def test_lr_too_high_judges_the_ratios_at_the_peak_rate_not_the_end_of_the_cosine():
    # AdamW at learning_rate 0.1: 0.048 and 0.04 at the peak, then the cosine's end (1e-4 at 1.1x min_lr) pulled the
    # median of all five under the 3e-2 line and lr_too_high said nothing
    from depthlab.analytics.diagnose import Evidence, diagnose

    records = eval_records([4.2, 3.0, 2.8, 2.7, 2.6, 2.6]) + [
        _lr_grad(100, 0.048, 0.1), _lr_grad(150, 0.04, 0.09), _lr_grad(200, 0.021, 0.06),
        _lr_grad(250, 1e-4, 1.1e-3), _lr_grad(300, 5e-5, 1e-3)]
    cfg = {"model": {"vocab_size": 65}, "train": {"learning_rate": 0.1, "warmup_iters": 50, "optimizer": "adamw"}}
    d = diagnose(Evidence(records, cfg, BASE))
    high = [f for f in d.findings if f.rule == "lr_too_high"]
    assert high and "median update/weight ratio 4.00e-02 per step (steps 100-200, 3 records)" in high[0].evidence, d
    # records without their rate (older runs) are all judged, as before
    for r in records:
        r.pop("lr", None)
    assert not [f for f in diagnose(Evidence(records, cfg, BASE)).findings if f.rule == "lr_too_high"]


def test_the_lr_rules_not_judged_line_counts_the_records_left_out_for_their_rate():
    from depthlab.analytics.diagnose import Evidence, diagnose

    records = [_lr_grad(100, 1e-3, 0.1), _lr_grad(150, 1e-3, 0.09), _lr_grad(200, 1e-4, 0.01)]
    lines = diagnose(Evidence(records, {"train": {"warmup_iters": 50}}, BASE)).without_data()
    assert ("lr_too_high, lr_too_low (they need 3 gradient records after the warmup at 0.5x the peak learning rate "
            "or more (1 later in the decay are not judged), the run has 2;") in lines[-1] or any(
        "(1 later in the decay are not judged), the run has 2;" in x for x in lines), lines


def test_gradient_records_carry_the_learning_rate_of_their_step(tmp_path, tiny_text_file):
    from depthlab import train  # with the default observers (depthlab.trainer.train has none)
    from depthlab.rundir import read_metrics

    cfg = tiny_config(tmp_path / "run", tiny_text_file, train=dict(grad_log_interval=5, log_interval=5, max_iters=10))
    rd = train(cfg, **QUIET)
    recs = read_metrics(rd)
    lr_train = {r["step"]: r["lr"] for r in recs if r.get("kind") == "train"}
    grads = [r for r in recs if r.get("kind") == "grad"]
    assert [r["step"] for r in grads] == [5, 10]
    for r in grads:
        assert r["lr"] == pytest.approx(lr_train[r["step"]]), (r["step"], r["lr"], lr_train)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from conftest import TINY_TEXT, trained_tiny_run

    return trained_tiny_run(tmp_path_factory, "s56", TINY_TEXT, steps=4)


@pytest.mark.parametrize("kw, words", [
    (dict(which="nope"),
     "which must be 'best' (the lowest val loss) or 'last' (the newest step checkpoint), got 'nope'"),
    (dict(device="tpu"), "device must be auto, cpu, cuda, cuda:N or mps; got 'tpu'"),
    (dict(device="cuda:3"), "device cuda:3 requested but CUDA is not available on this machine; use device='cpu'"),
])
def test_the_python_api_names_its_own_arguments(run, kw, words):
    # load_run(which='nope') said "--checkpoint must be best or last", device='tpu' "--device tpu ... use --device cpu"
    import torch

    from depthlab import DepthlabError, load_run, sample_text

    if "cuda" in kw.get("device", "") and torch.cuda.is_available():
        pytest.skip("CUDA is here")
    for call in (load_run, sample_text):
        with pytest.raises(DepthlabError) as e:
            call(run, **kw)
        assert str(e.value) == words, (call, str(e.value))


def test_load_run_takes_device_auto(run):
    from depthlab import load_run

    model, tok = load_run(run, device="auto")
    assert tok.vocab_size > 1 and next(model.parameters()).device.type in ("cpu", "cuda", "mps")


def test_train_from_python_names_the_config_that_resumes_and_the_overwrite_argument(run):
    # it said "use --resume RUN to continue it, --overwrite to replace it, or another --train.out_dir"
    from depthlab import DepthlabError, RunConfig, TrainConfig, train

    with pytest.raises(DepthlabError) as e:
        train(RunConfig(train=TrainConfig(out_dir=str(run), max_iters=5)))
    assert str(e.value) == (f"train.out_dir {run} already exists; use depthlab.train(RunConfig.from_run({str(run)!r})) "
                            "to continue it, overwrite=True to replace it, or another train.out_dir"), str(e.value)


def test_api_words_keep_a_command_line_to_run_as_it_is():
    from depthlab.errors import api_words

    msg = "changed (run r): depthlab train -c r/config.json --model.n_layer 3 --train.out_dir NEW; or --checkpoint last"
    assert api_words(msg) == ("changed (run r): depthlab train -c r/config.json --model.n_layer 3 --train.out_dir NEW; "
                              "or which='last'")


def tiny_source(name: str, forward_end: str) -> str:
    """A model file of one class ``name``: embeddings, one residual linear block, a head, then ``forward_end``
    (the lines after the blocks, with ``x`` the stream and ``self.head`` the head)."""
    return f"""
import torch, torch.nn as nn, torch.nn.functional as F

class {name}(nn.Module):
    def __init__(self, vocab_size, d=16, block_size=16):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d); self.pos = nn.Embedding(block_size, d)
        self.blocks = nn.ModuleList([nn.Linear(d, d)])
        self.head = nn.Linear(d, vocab_size)

    def forward(self, idx, targets=None):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1)))
{forward_end}
"""


SOFTMAX_MODEL = tiny_source("Soft", "        for b in self.blocks:\n            x = x + b(x)\n"
                                    "        return F.softmax(self.head(x), dim=-1)")
FIXED_BATCH_MODEL = tiny_source("M", "        x = x.view(8, 16, -1)  # the batch size written into the code\n"
                                     "        for b in self.blocks:\n            x = x + torch.relu(b(x))\n"
                                     "        return self.head(x)")


def train_source(tmp_path, code: str, name: str, *more: str) -> int:
    """``depthlab train`` of the model file ``code`` (class ``name``) on TINY_TEXT x 4, 3 steps: its exit status."""
    from depthlab.cli import main

    from conftest import TINY_TEXT, tiny_cli_args

    (tmp_path / "m.py").write_text(code)
    (tmp_path / "t.txt").write_text(TINY_TEXT * 4)
    args = tiny_cli_args(tmp_path / "t.txt", tmp_path / "run", train__max_iters=3, train__eval_interval=3)
    drop = {"--model.n_layer", "--model.n_head", "--model.n_embd"}
    args = [a for i, a in enumerate(args) if a not in drop and (i == 0 or args[i - 1] not in drop)]
    return main(["train", *args, "--model.source", f"{tmp_path / 'm.py'}:{name}", *more])


def test_a_softmax_output_is_named_before_training_and_by_diagnose(tmp_path, capsys):
    # the trainer ran check's causal_leak only: a forward ending in softmax trained, and diagnose said "train longer"
    # and "first the training: the learning rate ... decide that"
    from depthlab.analytics.diagnose import diagnose_run
    from depthlab.rundir import read_metrics

    assert train_source(tmp_path, SOFTMAX_MODEL, "Soft") == 0
    out = capsys.readouterr()
    err = out.out + out.err
    assert "the forward returns probabilities (softmax over the vocabulary)" in err, err
    assert "its loss cannot fall below ln(1 + (V-1)/e) = " in err, err
    rec = [r for r in read_metrics(tmp_path / "run", "event") if r.get("event") == "causal_leak_check"][-1]
    assert rec["output_kind"] == "probabilities" and rec["output_floor"] > 0, rec
    findings = diagnose_run(tmp_path / "run")
    assert all("train longer" not in f.remedy for f in findings), [f.remedy for f in findings]


def test_diagnose_puts_a_bounded_output_and_a_missing_gradient_before_the_training():
    from depthlab.analytics.diagnose import Evidence, diagnose

    from conftest import context_record

    cfg = {"model": {"vocab_size": 65, "source": "m.py:M", "block_size": 64},
           "train": {"grad_log_interval": 50, "warmup_iters": 10}}
    start = {"kind": "event", "step": 0, "event": "causal_leak_check", "ok": True, "summary": "s", "remedy": None,
             "output_kind": "probabilities", "output_summary": "the forward returns probabilities",
             "output_remedy": "drop the softmax", "output_floor": 3.2}
    records = [start] + eval_records([4.17, 4.0, 3.96, 3.95, 3.95, 3.95]) + [context_record(250, [3.95] * 8)]
    d = diagnose(Evidence(records, cfg, BASE))
    by = {f.rule: f for f in d.findings}
    assert by["unigram_stuck"].remedy == (
        "the forward returns probabilities, seen by the test before training: the loss cannot fall below ln(1 + "
        "(V-1)/e) = 3.200 nats whatever the training; drop the softmax"), by["unigram_stuck"].remedy
    assert by["context_unused"].remedy.startswith("first the output: the forward returns probabilities"), by
    # an attention branch without a gradient (no_gradient's finding) comes before "first the training"
    grads = [{"kind": "grad", "step": s, "grad_norm_block": [1.0], "update_ratio_block": [1e-3],
              "grad_2.0_norm/q.weight": 0.0, "grad_2.0_norm/head.weight": 1.0} for s in (50, 100, 150)]
    records = eval_records([4.17, 3.0, 2.7, 2.6, 2.55, 2.52]) + grads + [context_record(250, [2.55] * 8)]
    d = diagnose(Evidence(records, cfg, BASE))
    unused = [f for f in d.findings if f.rule == "context_unused"]
    assert unused and unused[0].remedy.startswith("first the wiring: 1 of 2 parameters never get a gradient (q.weight; "
                                                  "see no_gradient)"), unused


def test_check_context_use_says_above_the_unigram_line_not_near_it():
    # 4.052 at position 0, 0.7 above the unigram line 3.347, was "near the unigram level"
    from depthlab.analytics.check.learning import _context_verdict

    ev = {"steps": 500, "batch_size": 16, "block_size": 64, "pairs": 512, "late_from": 32, "unigram_nats": 3.347}
    r = _context_verdict(dict(ev), 0.0, 0.0005, 4.052, 4.051, 2.482)
    assert r.ok is False and "even position 0 is 0.705 nats above the unigram level 3.347" in r.summary, r.summary
    assert "near the unigram" not in r.summary and r.remedy.startswith("first the output: a forward that ends in "
                                                                       "softmax or sigmoid (init_loss tests for it)")


def test_a_dataclass_config_argument_is_told_to_use_a_function(tmp_path):
    # it said: give its keyword arguments as a JSON object, --model.init '{"cfg": ...}', which cannot build a dataclass
    from depthlab import DepthlabError
    from depthlab.usermodel import build_model, parse_source

    (tmp_path / "m.py").write_text("from dataclasses import dataclass\nimport torch.nn as nn\n@dataclass\n"
                                   "class Config:\n    n: int = 4\nclass M(nn.Module):\n"
                                   "    def __init__(self, cfg: Config):\n"
                                   "        super().__init__(); self.l = nn.Linear(cfg.n, cfg.n)\n")
    with pytest.raises(DepthlabError) as e:
        build_model(parse_source(f"{tmp_path / 'm.py'}:M"))
    assert str(e.value).endswith(f"it takes (cfg), and cfg is Config, which a JSON --model.init cannot build: add a "
                                 f"function to the file that builds the model, e.g. def make(): return M(Config(...)), "
                                 f"and give {tmp_path / 'm.py'}:make"), str(e.value)


def test_layers_refuses_a_head_that_does_not_reproduce_the_output():
    # --head emb on a model with its own head: lens 19.52 after the last block against a val loss of 2.39, and an
    # "effective depth" measured through the wrong head
    import torch

    from depthlab import DepthlabError
    from depthlab.analytics.layers import measure_layers

    from conftest import tiny_gpt

    model = tiny_gpt()
    with torch.no_grad():
        model.lm_head.weight.mul_(30)  # confident logits: a wrong norm shows in the loss
        model.transformer.ln_f.weight.uniform_(0.0, 3.0, generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, model.config.vocab_size, (4, model.config.block_size), generator=g)
    batches = [(x, torch.roll(x, -1, 1))]
    res = measure_layers(model, batches)  # its own final norm: the lens after the last block is the model
    assert abs(res["blocks"][-1]["lens_loss"] - res["val_loss"]) < 1e-4
    with pytest.raises(DepthlabError) as e:
        measure_layers(model, batches, norm_attr="transformer.h.0.ln_1")
    assert str(e.value).startswith("layers: the lens transformer.h.0.ln_1 + lm_head does not reproduce the model's "
                                   "output: after the last block it gives a val loss of "), str(e.value)


def test_a_huge_perplexity_is_printed_in_e_notation():
    from depthlab.training.evaluator import Evaluator

    rec = {"step": 0, "train_loss": 42.0, "val_loss": 42.7, "val_bpc": 61.6, "val_ppl": 3505613507260530688.0}
    assert Evaluator.describe(rec).endswith("(61.600 bits/char, ppl 3.51e+18)")


def test_a_sweep_run_whose_final_validation_was_cut_is_run_again(tmp_path):
    # a Ctrl-C in a sweep run's final validation left summary.json: every rerun counted it finished and still said
    # "2 of 6 runs gave no result" (exit 1); now the run is to do, and its resume runs the final validation
    import json

    from depthlab.config import RunConfig
    from depthlab.sweep.common import plan
    from depthlab.sweep.spec import RunPoint

    config = RunConfig().to_dict()
    run = tmp_path / "sw" / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(config))
    point = RunPoint(name="r1", experiment="e", point={}, config=config)
    (run / "summary.json").write_text(json.dumps({"final_step": 60, "final_validation": None,
                                                  "final_validation_cut": True}))
    assert plan([point], tmp_path / "sw") == ([], [point])
    (run / "summary.json").write_text(json.dumps({"final_step": 60, "final_validation": None,
                                                  "final_validation_cut": False}))
    assert plan([point], tmp_path / "sw") == ([point], [])


def test_a_sweep_over_another_field_is_not_told_in_blocks():
    # a learning-rate sweep said "improves with depth: 3.955 nats at 0.001 blocks -> 3.324 at 0.01 blocks" and "the
    # deepest plain model (0.01 blocks)"
    from depthlab.sweep.findings import _trend, summary_lines

    best, verdict = _trend({0.001: (3.955, 0, 1), 0.01: (3.324, 0, 1)}, "train.learning_rate")
    assert (best, verdict) == (0.01, "improves as learning_rate grows: 3.955 nats at learning_rate 0.001 -> 3.324 at "
                                     "learning_rate 0.01")
    items = [{"config": {"train": {"seed": 1, "learning_rate": lr}, "model": {"variant": "plain"}, "data": {}},
              "row": {"status": "ok", "best_val_loss": v}} for lr, v in ((0.001, 3.955), (0.01, 3.324))]
    lines = summary_lines(items, "train.learning_rate", ["model.variant"], {"unigram": 3.347, "bigram": 2.482})
    assert not [x for x in lines if "block" in x or "deepest" in x], lines


def test_a_line_whose_best_is_its_first_value_worsens_not_improves_then_worsens():
    from depthlab.sweep.findings import _trend

    assert _trend({1: (3.274, 0, 1), 2: (3.307, 0, 1)})[1] == ("worsens a little with depth: best 3.274 at 1 block, "
                                                              "3.307 at 2 blocks")
    assert _trend({1: (3.3, 0, 1), 2: (3.2, 0, 1), 4: (3.25, 0, 1)})[1].startswith("improves then worsens a little")


@pytest.mark.parametrize("loss, words", [
    (3.830, "above the unigram baseline (3.347) by 0.483: it has not learned even how common each character is"),
    (3.330, "at the unigram baseline (3.347)"),
    (3.295, "between the unigram (3.347) and bigram (2.482) baselines"),
    (2.900, "between the unigram (3.347) and bigram (2.482) baselines"),
    (2.470, "no better than the bigram baseline (2.482)"),
    (2.000, None),
])
def test_the_plain_baseline_sentence_judges_both_sides(loss, words):
    # 3.830 (0.48 above unigram) was "at the unigram baseline"; 3.295 (0.81 above bigram) "no better than bigram"
    from depthlab.sweep.findings import baseline_words

    got = baseline_words(loss, {"unigram": 3.347, "bigram": 2.482}, "character")
    assert (got is None) if words is None else got.startswith(words), got


def test_a_sweep_of_runs_with_different_baselines_draws_none(tmp_path):
    # a char x BPE sweep drew the char runs' baselines under the BPE line (its own: unigram 3.31, bigram 3.89)
    import json

    from depthlab.sweep.results import sweep_baselines

    items = []
    for name, (uni, big) in {"char": (3.19, 1.40), "bpe": (3.31, 3.89)}.items():
        rd = tmp_path / name
        rd.mkdir()
        (rd / "baselines.json").write_text(json.dumps({k: {"nats": v} for k, v in
                                                       (("uniform", 3.74), ("unigram", uni), ("bigram", big))}))
        items.append({"run_dir": rd, "config": {"data": {"tokenizer": name}}})
    assert sweep_baselines(items) is None
    assert sweep_baselines(items[:1]) == {"uniform": 3.74, "unigram": 3.19, "bigram": 1.40}


@pytest.mark.parametrize("summary, status", [
    ({"stopped_by": "max_time", "planned_end": True, "final_step": 57}, "ok"),
    ({"stopped_by": "max_time", "planned_end": False, "final_step": 57}, "time_capped"),
])
def test_a_sweep_run_at_the_end_fit_to_time_planned_is_finished(tmp_path, monkeypatch, summary, status):
    # a sweep with --train.max_time 5: both runs ended where fit_to_time planned, and the report said "0 ok, 2 not
    # ok", "No finished runs yet" and drew no figure
    import json

    from depthlab import analytics
    from depthlab.config import RunConfig
    from depthlab.sweep.local import _train_one

    def fake_train(cfg, log=None, callbacks=(), hparam_fields=None):
        rd = tmp_path / "run"
        rd.mkdir(exist_ok=True)
        (rd / "summary.json").write_text(json.dumps(summary))
        return rd

    monkeypatch.setattr(analytics, "train", fake_train)
    config = RunConfig().to_dict()
    config["train"]["max_iters"] = 100000
    assert _train_one(config, lambda s: None)[0] == status


def test_token_cosine_of_a_tiny_stream_is_its_direction_not_zero():
    # a collapsed plain stack's stream of norm ~1e-17 read as cosine 0.000 (normalize's eps in float32)
    import torch

    from depthlab.analytics.activations import token_cosine

    g = torch.Generator().manual_seed(0)
    base = torch.randn(1, 1, 32, generator=g)
    x = base + 0.1 * torch.randn(2, 8, 32, generator=g)
    ref = token_cosine(x)
    assert 0.9 < ref < 1.0
    for scale in (1e-17, 1e-30, 1e20):
        assert token_cosine(x * scale) == pytest.approx(ref, rel=1e-6), scale
    assert token_cosine(torch.zeros(1, 4, 8)) == 0.0  # all zero: no direction, as before


def test_a_sweeps_schedule_warning_is_a_depthlab_warning_on_stderr(capsys, tmp_path):
    # "warning: 4 of the 4 runs to train: train.warmup_iters (50) >= train.max_iters (30) ..." went to stdout, bare
    from depthlab.cli import main

    from conftest import TINY_TEXT

    (tmp_path / "t.txt").write_text(TINY_TEXT)
    rc = main(["sweep", "--grid", "model.n_layer=1", "--data.path", str(tmp_path / "t.txt"), "--model.n_embd", "16",
               "--model.n_head", "2", "--model.block_size", "8", "--train.max_iters", "3", "--train.warmup_iters", "5",
               "--train.eval_iters", "1", "--out_dir", str(tmp_path / "sw"), "--no_report", "--threads", "1"])
    out = capsys.readouterr()
    assert rc == 0
    assert "depthlab: warning: 1 of the 1 run to train: train.warmup_iters (5) >= train.max_iters (3)" in out.err, out
    assert "warning:" not in out.out, out.out


def test_report_of_a_part_of_a_run_names_the_run(capsys, run):
    # "report: RUN/checkpoints is neither a depthlab run directory ... nor a sweep folder", while diagnose, sample
    # and layers name the run
    from conftest import cli_err

    err = cli_err(capsys, "report", str(run / "checkpoints"))
    assert err.strip() == (f"depthlab: error: report: {run / 'checkpoints'} is not a depthlab run directory but a part "
                           f"of the run {run}; give the run's folder, {run}"), err


def test_from_run_of_a_config_file_names_its_run(run):
    # "RUN/config.json/config.json cannot be read (Not a directory)"
    from depthlab import DepthlabError, RunConfig

    with pytest.raises(DepthlabError) as e:
        RunConfig.from_run(run / "config.json")
    assert str(e.value) == (f"{run / 'config.json'} is a file, not a run directory; give the out_dir of a depthlab "
                            f"train run; its run is {run}: RunConfig.from_run({str(run)!r})"), str(e.value)


def test_the_python_api_checks_types_and_says_its_own_words(run, capsys):
    import torch

    from depthlab import DepthlabError, RunConfig, generate, load_run, sample_text, train

    model, tok = load_run(run)
    for call, words in [
        (lambda: generate(model, torch.tensor([[1]]), -1), "max_new_tokens must be >= 0, got -1"),
        (lambda: generate(model, torch.tensor([[1]]), 3, top_p="x"), "top_p must be a number in (0, 1], got 'x'"),
        (lambda: sample_text(run, 5, 5), "prompt must be a string (\"\" or None: start from a newline), got 5"),
        (lambda: sample_text(run, "a", 3, top_p="x"), "top_p must be a number in (0, 1], got 'x'"),
    ]:
        with pytest.raises(DepthlabError) as e:
            call()
        assert str(e.value) == words
    # a resume with nothing to train: its line names the config field, not the flag
    lines = []
    train(RunConfig.from_run(run), log=lines.append)
    said = " ".join(lines) + capsys.readouterr().err
    assert "nothing to train" in said and "--train." not in said, said


@pytest.mark.parametrize("source, how", [
    ("measured", "was fastest"), ("cached", "was fastest when measured earlier on this machine"),
    ("resumed", "is the run's own earlier choice"),
    ("rule", "is the auto choice (not measured: about 20 s of training planned, under 60 s)"),
])
def test_the_restart_line_says_how_the_setting_was_chosen(source, how):
    # a resume that kept its run's policy (nothing measured) said "passive was fastest; restarting ..."
    from depthlab.training.autotune import Restart, Setting, Tuning

    setting = Setting(threads=2, dtype="float32", attention="sdpa", omp_wait="passive")
    r = Restart({"OMP_WAIT_POLICY": "PASSIVE"}, Tuning(setting, source, "not measured: about 20 s of training "
                                                                         "planned, under 60 s"))
    assert r.line() == (f"auto settings: {setting.label()} {how}; restarting with OMP_WAIT_POLICY=PASSIVE (read "
                        "once, when torch loads)")


def test_a_claims_setting_names_muons_rate_on_muon_runs():
    # "width 16, lr 0.005, 30 steps": the runs resolved to Muon, whose block matrices trained at muon_lr 0.01
    from depthlab.sweep.claim_common import lr_of

    def item(opt):
        return {"config": {"train": {"learning_rate": 0.005, "muon_lr": 0.01, "optimizer": "auto"},
                           "resolved": {"optimizer": opt}}}

    assert lr_of([item("muon")]) == "Muon lr 0.01 (blocks' matrices), AdamW lr 0.005 (the rest)"
    assert lr_of([item("adamw")]) == "lr 0.005"


def test_not_judged_names_reads_the_rule_names_of_the_lines_only():
    from depthlab.analytics.diagnose import no_rule_judged, not_judged_names

    lines = ["lr_too_high, lr_too_low (they need 3 gradient records after the warmup, the run has 1; lower x)",
             "plateau (3 of the 6 evaluations it needs)", "a line of another shape, (x)", 5]
    assert not_judged_names(lines) == {"lr_too_high", "lr_too_low", "plateau"}
    assert not no_rule_judged(lines)


def test_layers_says_whether_its_lens_is_the_head_alone():
    import torch

    from depthlab.analytics.layers import measure_layers

    from conftest import tiny_gpt

    x = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(0))
    for variant, alone in (("prenorm", False), ("postnorm", True)):
        res = measure_layers(tiny_gpt(variant=variant), [(x, torch.roll(x, -1, 1))])
        assert res["lens_head_only"] is alone, variant


def test_a_model_with_its_batch_size_in_its_code_is_diagnosed(tmp_path, capsys):
    # it trained, skipped its final validation with a line, and diagnose found nothing (check does)
    import json

    from depthlab.analytics.diagnose import diagnose_run

    assert train_source(tmp_path, FIXED_BATCH_MODEL, "M", "--train.sample_interval", "0") == 0
    capsys.readouterr()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["final_validation"] is None and "the model's forward failed" in summary["final_validation_error"]
    found = {f.rule: f for f in diagnose_run(tmp_path / "run")}
    assert "fixed_shape" in found and found["fixed_shape"].remedy.startswith(
        "make the forward take any batch size and any length up to model.block_size: read B, T = idx.shape"), found


def test_an_undecided_loss_by_position_is_not_judged_not_a_pass():
    # "no problems found by the rules that could judge" while `depthlab context` said "these windows cannot tell"
    from depthlab.analytics.diagnose import Evidence, diagnose

    from conftest import context_record

    cfg = {"model": {"vocab_size": 65, "variant": "prenorm", "block_size": 32}, "train": {"eval_iters": 4}}
    rec = context_record(250, [2.60, 2.55, 2.56, 2.54, 2.55, 2.53, 2.54, 2.53])
    rec.update(context_gain_se=0.15, last_quarter_se=0.06, position0_se=0.1)
    d = diagnose(Evidence(eval_records([4.2, 3.0, 2.7, 2.6, 2.55, 2.53]) + [rec], cfg, BASE))
    assert "context_unused" not in [f.rule for f in d.findings]
    line = [x for x in d.without_data() if x.startswith("context_unused")]
    assert line and line[0].endswith("val windows, context gain 0.065 ± 0.150 nats (position 0 2.600 -> last quarter "
                                     "2.535 ± 0.060): the later positions gain less than 0.1 nats over position 0, and "
                                     "the last quarter is within twice its error (0.120) of the bigram line 2.482, so "
                                     "these windows cannot tell whether the model uses its context (more windows: "
                                     "depthlab context RUN --max_tokens 0 reads all of the run's evaluation windows, "
                                     "or a larger train.eval_iters (now 4)))"), d.without_data()


def test_a_post_ln_run_is_sent_to_its_training_first_not_its_wiring():
    # "first the wiring: model.variant postnorm already has residual connections ..., and a stack without a
    # shortcut can lose even the current character": post-LN has a shortcut
    from depthlab.analytics.diagnose import Evidence, diagnose

    from conftest import context_record

    records = eval_records([4.2, 3.0, 2.7, 2.6, 2.55, 2.51]) + [context_record(250, [2.60] + [2.593] * 7)]
    for variant, first in (("postnorm", "first the training"), ("plain", "first the wiring")):
        cfg = {"model": {"vocab_size": 65, "variant": variant, "block_size": 32, "norm": "layernorm"}}
        d = {f.rule: f for f in diagnose(Evidence(records, cfg, BASE)).findings}
        assert d["context_unused"].remedy.startswith(first), (variant, d["context_unused"].remedy)


def test_vanishing_gradients_judges_the_records_after_the_warmup():
    # a plain 8 x 32: half of its records near 1e-4, but the warmup's (0.93 at step 10) lifted the median to 0.0103
    from depthlab.analytics.diagnose import Evidence, diagnose

    ratios = {10: 0.933, 20: 0.0133, 30: 0.0114, 40: 0.00837, 50: 0.0125, 60: 1.1e-4, 70: 2.4e-3, 80: 9.5e-3,
              90: 1.8e-3, 100: 0.0206, 110: 5.9e-4, 120: 3.3e-3, 130: 0.4, 140: 0.0137, 150: 9.2e-3, 160: 0.13,
              170: 0.028, 180: 0.054, 190: 1.2e-4, 200: 3.1e-5}
    grads = [grad_record(s, [r, 1.0]) for s, r in ratios.items()]
    cfg = {"model": {"vocab_size": 65, "variant": "plain", "n_layer": 8}, "train": {"warmup_iters": 50}}
    d = {f.rule: f for f in diagnose(Evidence(eval_records([4.2, 3.4, 3.3]) + grads, cfg, BASE)).findings}
    assert "median 9.20e-03 over 15 gradient records (steps 60-200" in d["vanishing_gradients"].evidence, d


def test_report_out_must_name_an_html_file(capsys, run, tmp_path):
    # "--out -1" exited 0 and wrote a file named -1 into the current folder
    from conftest import cli_err

    err = cli_err(capsys, "report", str(run), "--out", str(tmp_path / "-1"))
    assert err.strip().endswith(f"--out {tmp_path / '-1'} is no .html file name; give one, e.g. --out report.html")
    assert not (tmp_path / "-1").exists()


def test_a_rezero_probe_plot_is_named_without_a_norm():
    # "probe at init: rezero (no norm)" wrote probe-rezero-layernorm-8.png
    from depthlab.cli import _probe_png
    from depthlab.config import ModelConfig, RunConfig

    cfg = RunConfig(model=ModelConfig(variant="rezero", n_layer=8))
    assert str(_probe_png(cfg, None)) == "probe-rezero-none-8.png"


def test_a_nan_run_writes_valid_json_and_says_why_its_context_is_not_judged(tmp_path):
    # summary.json held bare NaN (not JSON: jq, JavaScript refuse it); "ppl inf" for a NaN loss; context_unused was
    # "not judged (no later position to compare with position 0 (model.block_size 32))"
    import json

    from depthlab.analytics.diagnose import Evidence, diagnose
    from depthlab.rundir import json_values
    from depthlab.training.evaluator import Evaluator

    text = json.dumps(json_values({"final_val_loss": float("nan"), "best": float("inf"), "x": [1.0, float("-inf")]}),
                      allow_nan=False)
    assert json.loads(text) == {"final_val_loss": "nan", "best": "inf", "x": [1.0, "-inf"]}
    rec = {"step": 20, "train_loss": float("nan"), "val_loss": float("nan"), "val_bpc": float("nan"), "val_ppl": None}
    assert Evaluator.describe(rec).endswith("(nan bits/char, ppl nan)")
    ctx = {"step": 40, "kind": "event", "event": "context", "loss_by_position": ["nan"] * 32, "context_gain": "nan"}
    lines = diagnose(Evidence(eval_records([4.2, 3.0]) + [ctx], {"model": {"vocab_size": 65}}, BASE)).without_data()
    assert any(x.startswith("context_unused, causal_leak (the final weights' loss by position is not finite (32 "
                            "positions, context gain nan): nothing to compare)") for x in lines), lines


def test_modules_in_a_plain_list_are_refused_naming_module_list(tmp_path):
    # blocks in a Python list: check found nothing wrong with its gradients, the run saved no blocks, and every
    # reload (context, sample --temperature 0) drew new random ones
    import torch.nn as nn

    from depthlab import DepthlabError
    from depthlab.usermodel import build_model, parse_source, unregistered_modules

    (tmp_path / "m.py").write_text(tiny_source("M", "        for b in self.blocks:\n            x = x + b(x)\n"
                                                    "        return self.head(x)").replace(
        "self.blocks = nn.ModuleList([nn.Linear(d, d)])", "self.blocks = [nn.Linear(d, d), nn.Linear(d, d)]"))
    with pytest.raises(DepthlabError) as e:
        build_model(parse_source(f"{tmp_path / 'm.py'}:M"), vocab_size=11)
    assert str(e.value).endswith("M.blocks is a Python list of 2 modules: PyTorch registers no module kept in a plain "
                                 "list, so their weights never train, are not saved in a checkpoint (every reload "
                                 "draws new random ones) and move to no device; make it nn.ModuleList([...])")

    class Fine(nn.Module):  # references to registered modules, and modules without weights, lose nothing
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(2, 2)
            self.refs = [self.a, nn.ReLU()]
            self.heads = {"h": nn.Linear(2, 2)}

    assert unregistered_modules(Fine()) == [("Fine.heads", "dict", 1)]


def test_a_learners_stack_with_starved_early_blocks_is_sent_to_its_wiring_first():
    # a hand-written 6-block stack without x + ...: vanishing_gradients found, while context_unused said "first the
    # training: ... the learning rate ... decide that"
    from depthlab.analytics.diagnose import Evidence, diagnose

    from conftest import context_record

    cfg = {"model": {"vocab_size": 65, "source": "m.py:NoShortcut", "block_size": 64}, "train": {"warmup_iters": 10}}
    grads = [grad_record(s, [3e-4, 1.0]) for s in (50, 100, 150, 200)]
    records = eval_records([4.2, 3.5, 3.4, 3.36, 3.35, 3.34]) + grads + [context_record(250, [3.39] + [3.33] * 7)]
    d = {f.rule: f for f in diagnose(Evidence(records, cfg, BASE)).findings}
    assert "vanishing_gradients" in d
    assert d["context_unused"].remedy.startswith("first the wiring: the run's gradient records show the early blocks "
                                                 "starved (vanishing_gradients): if the model has no shortcut"), d


def test_a_grad_accum_that_processes_cannot_share_names_the_flags_that_keep_the_global_batch(monkeypatch):
    # a one-process run resumed under torchrun: "must be divisible by the number of processes (2)", and no way on
    from depthlab import DepthlabError, TrainConfig
    from depthlab.training.runtime import Runtime

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(DepthlabError) as e:
        Runtime(TrainConfig(batch_size=16, grad_accum=1))
    assert str(e.value).endswith("must be divisible by the number of processes (2); for the same global batch of 16 "
                                 "sequences use --train.grad_accum 2 --train.batch_size 8"), str(e.value)


def test_muon_lr_zero_is_refused_and_one_adamw_never_reads_is_said():
    # --train.muon_lr 0 trained with frozen blocks; --train.muon_lr 0.5 --train.optimizer adamw said nothing
    from depthlab.config import ConfigError, TrainConfig, schedule_warnings

    with pytest.raises(ConfigError) as e:
        TrainConfig(muon_lr=0.0)
    assert str(e.value) == "train.muon_lr must be a number > 0, got 0"
    said = schedule_warnings(TrainConfig(optimizer="adamw", muon_lr=0.5, max_iters=100, warmup_iters=10))
    assert said == ["train.muon_lr 0.5 changes nothing: train.optimizer adamw trains every parameter with AdamW at "
                    "train.learning_rate (Muon's rate applies with train.optimizer muon, or auto on a CPU)"]
    assert schedule_warnings(TrainConfig(optimizer="adamw", max_iters=100, warmup_iters=10)) == []


def test_a_resume_with_the_same_global_batch_in_other_micro_batches_says_so():
    # a one-process run (batch 16, accum 1) resumed under torchrun with batch 8, accum 2: "train.batch_size 16 -> 8:
    # tokens per step change" (false: the run was bit-identical to a one-process resume)
    from depthlab.config import RunConfig
    from depthlab.resume_config import resume_changes

    old = RunConfig().to_dict()
    new = RunConfig().to_dict()
    old["train"].update(batch_size=16, grad_accum=1)
    new["train"].update(batch_size=8, grad_accum=2)
    assert resume_changes(old, new) == ([], [
        "train.batch_size 16 -> 8 and train.grad_accum 1 -> 2: the same global batch of 16 sequences per step in "
        "other micro-batches (float rounding may differ)"])
    new["train"].update(batch_size=8, grad_accum=1)
    assert resume_changes(old, new)[1] == ["train.batch_size 16 -> 8: tokens per step change; the data order differs "
                                           "from an uninterrupted run"]


def leak_check_of(tmp_path, code: str, name: str):
    """check's causal_leak result for the model file ``code`` (class ``name``) on TINY_TEXT x 4, at length 16."""
    from depthlab.analytics.check import check_model
    from depthlab.config import DataConfig
    from depthlab.data import load_corpus
    from depthlab.usermodel import build_model, parse_source

    from conftest import TINY_TEXT

    (tmp_path / f"{name}.py").write_text(code)
    (tmp_path / "c.txt").write_text(TINY_TEXT * 4)
    corpus = load_corpus(DataConfig(path=str(tmp_path / "c.txt")))
    model = build_model(parse_source(f"{tmp_path / name}.py:{name}"), vocab_size=corpus.tokenizer.vocab_size)
    return {c.rule: c for c in check_model(model, corpus, block_size=16, rules=("shape", "causal_leak")).checks}[
        "causal_leak"]


def test_a_forward_random_in_eval_mode_is_a_problem_in_check_and_a_finding_in_diagnose(tmp_path, capsys):
    # F.dropout(w, p=0.3) (training=True by default): check said "causal_leak not run" and "0 problems found", and
    # diagnose "no problems found", while train's warning named the fix
    from depthlab.analytics.diagnose import diagnose_run

    code = tiny_source("R", "        for b in self.blocks:\n            x = x + F.dropout(b(x), p=0.3)\n"
                            "        return self.head(x)")
    res = leak_check_of(tmp_path, code, "R")
    assert res.status == "PROBLEM" and res.summary.startswith(
        "the same sequence, computed twice in eval mode, gives logits differing by")
    assert train_source(tmp_path, code, "R", "--train.sample_interval", "0") == 0
    said = capsys.readouterr()
    assert "the forward is random at evaluation (dropout drawn without training=self.training?)" in said.err
    assert "sees the tokens it predicts" not in said.err + said.out
    found = {f.rule: f for f in diagnose_run(tmp_path / "run")}
    assert "random_eval" in found and "causal_leak" not in found, found
    assert found["random_eval"].remedy.startswith("draw randomness only in training: nn.Dropout, or F.dropout(x, p, "
                                                  "training=self.training)")


def test_logits_one_position_late_are_a_problem_in_check_and_a_finding_in_diagnose(tmp_path, capsys):
    # torch.cat([logits[:, :1], logits[:, :-1]], 1): check said "0 problems found" (its own line showed "the changed
    # position itself moves by up to 0"), and diagnose "no problems found"
    from depthlab.analytics.diagnose import diagnose_run

    code = tiny_source("S", "        for b in self.blocks:\n            x = x + b(x)\n        logits = self.head(x)\n"
                            "        return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)")
    res = leak_check_of(tmp_path, code, "S")
    assert res.status == "PROBLEM" and res.evidence["own_token_ignored"] is True
    assert train_source(tmp_path, code, "S", "--train.sample_interval", "0") == 0
    said = capsys.readouterr()
    assert "position t predicts without its own token" in said.err and "sees the tokens it predicts" not in said.err
    found = {f.rule: f for f in diagnose_run(tmp_path / "run")}
    assert "shifted_logits" in found and "causal_leak" not in found, found


def test_init_from_with_a_model_field_that_keeps_the_shapes_says_so(run, tmp_path, capsys):
    # --init-from RUN --model.activation relu (n_head, norm alike): the weights loaded without a word, though they
    # were trained to compute GELU
    from depthlab.cli import main

    from conftest import tiny_cli_args

    text = (run.parent / "t.txt")
    args = tiny_cli_args(text, tmp_path / "new", train__max_iters=1, model__activation="relu")
    assert main(["train", *args, "--init-from", str(run)]) == 0
    err = capsys.readouterr().err
    assert (f"depthlab: warning: --init-from {run}: model.activation 'gelu' there, 'relu' here: the weights load (the "
            "same names and shapes) but were trained to compute with the source run's settings") in err, err


def test_an_embedding_without_a_gradient_gets_an_embedding_example():
    # pos.weight never added: the fix gave "x = x + out_proj(attention)", an attention example
    from depthlab.analytics.check.forward import _no_gradient_verdict

    r = _no_gradient_verdict({}, ["pos.weight"], [], [], 50)
    assert "e.g. x = tok(idx) + pos(torch.arange(T))" in r.remedy
    assert "out_proj" in _no_gradient_verdict({}, ["blocks.0.attn.q.weight"], [], [], 50).remedy


def test_vanishing_gradients_without_block_norms_is_not_judged_not_a_pass():
    # a correct model with its blocks in an nn.ModuleDict: every grad record's grad_norm_block was [], and diagnose
    # counted vanishing_gradients as judged ("no problems found by the rules that could judge")
    from depthlab.analytics.diagnose import Evidence, diagnose

    cfg = {"model": {"vocab_size": 65, "source": "m.py:make"}, "train": {"warmup_iters": 10}}
    grads = [{"kind": "grad", "step": s, "grad_norm_block": [], "update_ratio_block": []} for s in (25, 50, 75)]
    lines = diagnose(Evidence(eval_records([4.2, 3.0, 2.6]) + grads, cfg, BASE)).without_data()
    assert any(x.startswith("vanishing_gradients (it needs the gradient norms of a first and a last block, and none "
                            "of the run's 3 gradient records holds two: no parameter of model.source m.py:make sits "
                            "in a numbered list of blocks") for x in lines), lines


def test_a_config_refused_in_depthlab_train_names_model_init_not_its_flag(tmp_path):
    from depthlab import DepthlabError, RunConfig, train

    (tmp_path / "m.py").write_text(tiny_source("M", "        return self.head(x)"))
    c = RunConfig()
    c.train.out_dir = str(tmp_path / "r")
    c.model.source = f"{tmp_path / 'm.py'}:M"
    c.model.dropout = 0.2
    with pytest.raises(DepthlabError) as e:
        train(c)
    assert "with model.init JSON" in str(e.value) and "--model.init" not in str(e.value), str(e.value)


def test_api_words_turn_only_a_run_after_resume_into_from_run():
    # "a --resume gets as long again" became "a depthlab.train(RunConfig.from_run('gets')) as long again"
    from depthlab.errors import api_words

    assert api_words("stopped (0.5 s of this session; a --resume gets as long again)").endswith(
        "a --resume gets as long again)")
    assert api_words("use --resume runs/x to continue it") == \
        "use depthlab.train(RunConfig.from_run('runs/x')) to continue it"


def test_init_from_with_another_dropout_is_no_same_shape_warning(run):
    import dataclasses

    from depthlab.config import RunConfig
    from depthlab.training.checkpointer import same_shape_changes

    model = RunConfig.from_run(run).model
    assert same_shape_changes(run, dataclasses.asdict(dataclasses.replace(model, dropout=0.3))) is None
    assert "model.activation" in same_shape_changes(run, dataclasses.asdict(dataclasses.replace(model,
                                                                                              activation="relu")))
