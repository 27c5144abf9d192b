"""What a new user was told wrong (issue 23, cases 12-17): the words around the numbers.

A learner with a hand-written TinyTransformer at loss ~2.5 was sent the wrong way: the bigram line
was taught as "no context" (a stack without shortcuts ends at the *unigram* line; the bigram line
means the current character alone), parameters without gradient were never named, Muon runs were
given AdamW's knob and rule of thumb, a preset's Tiny Shakespeare target stopped other corpora,
probe and diagnose disagreed on vanishing gradients without saying when each measures, and a few
smaller sentences said something else than the numbers.
"""

import json
import re
from pathlib import Path

import pytest

from depthlab.analytics.diagnose import diagnose_records, diagnose_run
from depthlab.errors import DepthlabError

from conftest import QUIET, tiny_config
from conftest import SHAKESPEARE_BASELINES as BASE
from conftest import eval_records as evals
from conftest import grad_record as grad

ROOT = Path(__file__).resolve().parents[1]
PLANTED = ROOT / "tests" / "fixtures" / "planted.py"


def found(records, config=None, baselines=BASE):
    return {f.rule: f for f in diagnose_records(records, baselines, config)}


def gpt(variant="prenorm", norm="layernorm", **train):
    return {"model": {"variant": variant, "norm": norm, "n_layer": 8, "block_size": 64},
            "train": {"learning_rate": 3e-3, "muon_lr": 1e-2, "warmup_iters": 10, **train}}


# ------------------------------------------------------------------------- 12: unigram line vs bigram line
def test_a_plain_stack_at_the_unigram_line_is_not_called_bigram():
    f = found(evals([4.17, 3.6, 3.40, 3.348]), gpt("plain"))
    assert set(f) == {"unigram_stuck"}
    x = f["unigram_stuck"]
    assert "unigram level 3.347" in x.evidence and "not even the current character" in x.evidence
    assert "add residual connections" in x.remedy and "rank collapse" in x.remedy


def test_a_loss_at_the_bigram_line_points_at_attention_not_the_residual_path():
    f = found(evals([4.17, 3.0, 2.6, 2.476]), gpt("plain"))
    assert set(f) == {"bigram_stuck"}
    x = f["bigram_stuck"]
    assert "current character alone" in x.evidence and "none of the context before it" in x.evidence
    assert "through attention" in x.remedy and "add residual" not in x.remedy
    # a learner's own model (model.source): where attention gets lost, and the command that finds it
    own = {"model": {"source": "tiny.py:TinyTransformer", "variant": "prenorm", "norm": "layernorm",
                     "block_size": 64}, "train": {}}
    x = found(evals([4.17, 3.0, 2.6, 2.476]), own)["bigram_stuck"]
    assert "x = x + out_proj(attention)" in x.remedy and "depthlab check tiny.py:TinyTransformer" in x.remedy
    assert "model.variant" not in x.remedy  # the GPT's wiring fields say nothing about the user's model


def test_the_two_lines_are_told_apart_in_report_sweep_and_probe_words():
    from depthlab.analytics.probe import probe_verdicts
    from depthlab.report import html as H
    from depthlab.report.sweep import _cards
    from depthlab.sweep.findings import _plain_lines

    assert "no context" not in dict((k, u) for k, _, u in _cards([], {"bigram": 2.482, "unigram": 3.347}))[
        "bigram baseline"]
    assert "the context before it does not reach the loss" in H.FIGURE_NOTES["loss"]
    line = _plain_lines({1: (2.4, 0, 1), 8: (2.47, 0, 1)}, {"unigram": 3.347, "bigram": 2.482})[-1]
    assert "current character alone" in line
    layers = [{"grad_norm": 1.0, "mean_abs_grad": 1e-3, "weight_norm": 1.0, "act_rms": 1.0, "rank_measure": r,
               "token_cosine": 0.99} for r in (0.6, 0.1, 0.001)]
    collapse = [s for s in probe_verdicts({"layers": layers})[0] if s.startswith("rank collapse")][0]
    assert "unigram level" in collapse and "bigram/unigram" not in collapse


def test_readme_and_notebook_teach_the_two_lines_apart():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    flat = " ".join(readme.split())
    assert "bigram baseline means the model uses no context" not in flat
    assert "sits at the bigram line uses no context" not in flat
    # the plain stacks of the sweeps end at the unigram line: that is what diagnose says of them
    assert not re.search(r"unigram baseline \(3\.35[^)]*\)?[^.]*diagnosed `bigram_stuck`", flat)
    assert "`unigram_stuck`" in flat and "`no_gradient`" in flat
    nb = json.loads((ROOT / "examples" / "quickstart.ipynb").read_text(encoding="utf-8"))
    text = " ".join(" ".join("".join(c["source"]) for c in nb["cells"]).split())
    assert "bigram baseline** has learnt letter pairs and nothing more: it does not use its context" not in text
    assert "the loss stays near the bigram line" not in text  # plain n_layer 8 reached 3.333: the unigram line
    assert "stuck near the bigram baseline of section 2" not in text
    assert "unigram" in text and "current character alone" in text


# ------------------------------------------------------------------------- 13: parameters with no gradient
def _named_grad(step, zero=("query.weight", "out_proj.weight"), live=("ff1.weight", "output_head.weight")):
    return {"step": step, "kind": "grad", "grad_norm_block": [], "update_ratio_block": [],
            **{f"grad_2.0_norm/{n}": 0.0 for n in zero}, **{f"grad_2.0_norm/{n}": 0.1 for n in live}}


def test_no_gradient_names_the_parameters_and_the_branch():
    recs = evals([4.17, 3.0, 2.6, 2.476]) + [_named_grad(s) for s in (50, 100, 150)]
    own = {"model": {"source": "tiny.py:TinyTransformerAsLogged", "block_size": 64}, "train": {}}
    f = found(recs, own)
    ng = f["no_gradient"]
    assert "2 of 4 parameters" in ng.evidence and "query.weight, out_proj.weight" in ng.evidence
    assert "steps 50-150" in ng.evidence
    assert "never reaches the loss" in ng.remedy and "x = x + out_proj(attention)" in ng.remedy
    assert "depthlab check tiny.py:TinyTransformerAsLogged" in ng.remedy
    assert "add residual" not in f["bigram_stuck"].remedy and "query.weight" in f["bigram_stuck"].remedy
    # a gradient that is zero at step 1 only (ReZero's closed gates at initialisation) is no finding
    gate = [_named_grad(1, zero=("h.0.attn.weight",), live=("alpha",))] + [
        _named_grad(s, zero=(), live=("h.0.attn.weight", "alpha")) for s in (2, 10)]
    assert "no_gradient" not in found(gate)
    # only the step-1 record: not judged, and said
    from depthlab.analytics.diagnose import rules_without_data
    assert any(w.startswith("no_gradient (it needs a gradient record at step 2 or later")
               for w in rules_without_data(gate[:1]))


def test_a_trained_model_whose_attention_is_never_added(tmp_path, tiny_text_file):
    from depthlab import train

    from depthlab.config import ModelConfig

    cfg = tiny_config(tmp_path / "run", tiny_text_file, train={"max_iters": 6, "eval_interval": 3,
                                                               "grad_log_interval": 2})
    cfg.model = ModelConfig(block_size=16, source=f"{PLANTED}:unused_attention")
    f = {x.rule: x for x in diagnose_run(train(cfg, **QUIET))}
    assert "no_gradient" in f, f
    names = f["no_gradient"].evidence
    assert "blocks.0.attn.qkv.weight" in names and "blocks.1.attn.proj.bias" in names
    assert "blocks.0.mlp" not in names and "tok.weight" not in names


# ------------------------------------------------------------------------- 14: Muon runs
def muon_cfg(**train):
    c = gpt("prenorm", **train)
    c["resolved"] = {"optimizer": "muon", "dtype": "bfloat16", "attention": "explicit"}
    c["train"].update(optimizer="auto", dtype="auto", attention="auto")
    return c


def test_muon_runs_are_told_about_train_muon_lr():
    high = [grad(s, [1.0, 1.0], [5e-2, 6e-2]) for s in (50, 100, 150)]
    f = found(high, muon_cfg(), None)["lr_too_high"]
    assert "lower train.muon_lr (now 0.01)" in f.remedy and "train.learning_rate" not in f.remedy
    assert "healthy is about 1e-3" not in f.evidence and "rule of thumb does not apply" in f.evidence
    adam = found(high, gpt("prenorm"), None)["lr_too_high"]
    assert "lower train.learning_rate (now 0.003)" in adam.remedy and "healthy is about 1e-3" in adam.evidence
    # a healthy Muon run's ratios (~1e-2, measured on --preset fast-cpu) are no reason to lower anything
    from depthlab.analytics.rules import Evidence
    from depthlab.analytics.rules.advice import lr_advice
    healthy = [grad(s, [1.0, 1.0], [1.5e-2, 1.4e-2]) for s in (50, 100, 150)]
    assert lr_advice(Evidence(healthy, muon_cfg())) is None
    # nor are they for AdamW: its default recipe measures 6e-3 to 1e-2 (a helper's pass: "lower the rate" was
    # said of every stuck AdamW run on it); only lr_too_high's 3e-2 lowers it
    assert lr_advice(Evidence(healthy, gpt("prenorm"))) is None
    assert lr_advice(Evidence([grad(s, [1.0, 1.0], [4e-2, 5e-2]) for s in (50, 100, 150)], gpt("prenorm"))) == "lower"
    boom = found(evals([4.1, 3.0, "nan"]), muon_cfg(), None)["exploding"]
    assert "train.muon_lr (now 0.01)" in boom.remedy and "train.learning_rate (now 0.003)" in boom.remedy


def test_report_shows_what_ran_and_no_adam_band_on_muon(tmp_path, monkeypatch):
    from depthlab.report import html as H
    from depthlab.report import plots as P
    from depthlab.report.run_data import RunData

    rd = tmp_path / "run"
    rd.mkdir()
    (rd / "config.json").write_text(json.dumps({**muon_cfg(), "data": {}}))
    (rd / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in
                                                [grad(s, [1.0, 1.0], [2e-2, 1e-2]) for s in (10, 20)]))
    run = RunData(rd)
    rows = dict(H.config_rows(run, "train"))
    assert rows["optimizer"] == "auto (ran: muon)" and rows["dtype"] == "auto (ran: bfloat16)"
    assert rows["attention"] == "auto (ran: explicit)"
    # fit_to_time's plan (a new user's pass: the table showed max_iters 5000 of a 131-step run)
    cfg = {**muon_cfg(max_iters=5000, warmup_iters=50), "data": {}}
    cfg["resolved"]["plan"] = {"max_iters": 131, "warmup_iters": 26, "lr_decay_iters": 0}
    (rd / "config.json").write_text(json.dumps(cfg))
    planned = dict(H.config_rows(RunData(rd), "train"))
    assert planned["max_iters"] == "5000 (planned: 131 by train.fit_to_time)"  # no summary.json: not ended
    assert planned["warmup_iters"] == "50 (ran: 26, train.fit_to_time's plan)"
    assert "rule of thumb does not apply" in H.figure_note(run, "update_ratio")
    seen = {}
    monkeypatch.setattr(P, "save_run_figure", lambda fig, d, name, title, sub=None: seen.update(
        sub=sub, lines=[ln.get_ydata()[0] for ln in fig.axes[0].get_lines()]) or d)
    P.plot_update_ratio(run)
    assert "train.muon_lr" in seen["sub"] and 1e-3 not in seen["lines"]  # no ~1e-3 reference line


# ------------------------------------------------------------------------- 15: a preset's corpus-specific target
def test_fast_cpu_target_is_dropped_on_another_corpus(tmp_path):
    from depthlab.cli_expand import corpus_target, expand_presets
    from depthlab.data import embedded_corpus_path

    other = tmp_path / "other.txt"
    other.write_text("a b c\n" * 100)
    lines = []

    def target(*extra):
        argv = ["--preset", "fast-cpu", *extra]
        out = corpus_target(argv, expand_presets(argv), log=lines.append)
        i = [k for k, a in enumerate(out) if a == "--train.target_val_loss"]
        return out[i[-1] + 1] if i else "preset"

    assert target("--data.path", str(other)) == "0" and "1.88" in lines[-1] and "dropped" in lines[-1]
    assert target("--data.tokenizer", "bpe") == "0"
    n = len(lines)
    assert target() == "preset" and target("--data.path", str(embedded_corpus_path())) == "preset"
    assert target("--data.path", str(other), "--train.target_val_loss", "2.1") == "2.1"  # the user's own
    assert len(lines) == n


def test_fast_cpu_on_another_corpus_runs_its_steps(tmp_path, capsys):
    from depthlab.cli import main

    other = tmp_path / "other.txt"
    other.write_text(("The quick brown fox jumps over the lazy dog. " * 40 + "\n") * 30)
    rc = main(["train", "--preset", "fast-cpu", "--data.path", str(other), "--model.n_embd", "32",
               "--train.max_iters", "4", "--train.eval_interval", "2", "--train.eval_iters", "1",
               "--train.batch_size", "4", "--train.progress", "false", "--train.out_dir", str(tmp_path / "r")])
    assert rc == 0
    assert "depthlab: preset fast-cpu: " in capsys.readouterr().err  # a notice: stderr (stdout is the run's log)
    assert json.loads((tmp_path / "r" / "config.json").read_text())["train"]["target_val_loss"] == 0


# ------------------------------------------------------------------------- 16: probe (init) vs diagnose (training)
def test_probe_and_diagnose_say_which_moment_they_measure():
    from depthlab.analytics.probe import summarise_probe

    layers = [{"grad_norm": 1.0, "mean_abs_grad": 1e-3, "weight_norm": 1.0, "act_rms": 1.0, "rank_measure": r,
               "token_cosine": 0.99} for r in (0.6, 0.1, 0.001)]
    note = [s for s in summarise_probe({"layers": layers, "config": {"variant": "plain"}}) if s.startswith("note")][0]
    assert "at initialisation" in note and "depthlab diagnose" in note and "during training" in note
    v = found([grad(s, [1e-5, 1e-3, 1.0]) for s in (50, 100, 150)], None, None)["vanishing_gradients"]
    assert v.evidence.startswith("during training") and "depthlab probe" in v.evidence
    assert "at initialisation" in v.evidence
    flat = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "both hold, at different moments" in flat


# ------------------------------------------------------------------------- 17: the smaller ones
def _figures(tmp_path, monkeypatch):
    """A run with one pre-LN-like gradient record and one probe whose middle block's rank is 0; the
    figures drawn from it are caught as ``{name: (figure, caption)}`` instead of written."""
    from depthlab.report import plots as P
    from depthlab.report.run_data import RunData

    rd = tmp_path / "run"
    rd.mkdir()
    (rd / "config.json").write_text(json.dumps(gpt("prenorm")))
    (rd / "metrics.jsonl").write_text(json.dumps(grad(10, [2.0, 1.5, 1.0])) + "\n" + json.dumps(
        {"step": 5, "kind": "probe", "rank_measure": [0.9, 0.0, 0.5], "resid_rms": [1.0, 1.0, 1.0]}))
    seen = {}

    def grab(fig, d, name, title, sub=None):
        seen[name] = (fig, sub)
        return d

    monkeypatch.setattr(P, "save_run_figure", grab)
    return P, RunData(rd), seen


def test_grad_caption_does_not_call_a_healthy_pre_ln_rise_exploding(tmp_path, monkeypatch):
    P, run, seen = _figures(tmp_path, monkeypatch)
    P.plot_grad_layers(run)
    sub = seen["grad_layers"][1]
    assert "rising = exploding" not in sub and "orders of magnitude" in sub and "pre-LN" in sub


def test_rank_measure_axis_can_show_zero(tmp_path, monkeypatch):
    P, run, seen = _figures(tmp_path, monkeypatch)
    P.plot_activations(run)
    fig = seen["activations"][0]
    (ax,) = [a for a in fig.axes if "rank measure" in a.get_ylabel()]
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] <= 0.0 <= ax.get_ylim()[1]  # a 0 is drawn


def test_parameter_card_does_not_say_non_embedding(tmp_path):
    from depthlab.report import html as H
    from depthlab.report.run_data import RunData

    rd = tmp_path / "run"
    rd.mkdir()
    (rd / "config.json").write_text(json.dumps(gpt()))
    (rd / "metrics.jsonl").write_text("")
    (rd / "summary.json").write_text(json.dumps({"params": 402176}))
    (card,) = [c for c in H.run_cards(RunData(rd)) if c[0] == "parameters"]
    assert "non-embedding" not in card[2] and "token embedding" in card[2] and "included" in card[2]


def test_diagnosis_json_holds_not_judged(tmp_path, tiny_text_file):
    from depthlab import train

    rd = train(tiny_config(tmp_path / "run", tiny_text_file), **QUIET)
    d = json.loads((rd / "diagnosis.json").read_text())
    assert "not_judged" in d and any(w.startswith("rank_collapse, uniform_attention") for w in d["not_judged"])


def test_sweep_file_type_error_names_the_file(tmp_path):
    from depthlab.sweep.spec import load_sweep_file

    for body in ("grid:\n  model.n_layer: [1, two]\n",
                 "base:\n  model:\n    n_layer: two\ngrid:\n  model.n_embd: [32]\n"):
        p = tmp_path / "s.yaml"
        p.write_text(body)
        with pytest.raises(DepthlabError, match=re.escape(f"sweep file {p}") + ".*model.n_layer: cannot use 'two'"):
            load_sweep_file(p)


def test_a_short_resume_is_not_told_the_decay_never_starts():
    from depthlab.config import TrainConfig, schedule_warnings

    (w,) = schedule_warnings(TrainConfig(max_iters=40, warmup_iters=50, resume=True))
    assert "never reached" in w and "never starts" not in w
    (w,) = schedule_warnings(TrainConfig(max_iters=40, warmup_iters=50))
    assert "the cosine decay never starts" in w  # a fresh run: it does not


def test_science_sources_are_documents_users_have():
    from depthlab.sweep import science

    text = (ROOT / "src" / "depthlab" / "sweep" / "science.py").read_text(encoding="utf-8")
    assert "shortcut notes" not in text and "the learner's" not in text
    assert "shortcut notes" not in (ROOT / "README.md").read_text(encoding="utf-8")
    assert science  # the module still imports
