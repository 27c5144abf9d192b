"""Findings of session 58's new-user passes (each test failed before its change)."""

import json

import pytest
import torch

from conftest import QUIET, OnStep, StopAt, tiny_config
from depthlab import RunConfig, train
from depthlab.callbacks import Callback
from depthlab.errors import DepthlabError
from depthlab.trainer import Interrupted, Trainer
from depthlab.training import runlock
from depthlab.training.subnormals import flushing

SUBNORMAL = torch.tensor([1e-39])


def _threads_other_than_now() -> int:
    return 1 if torch.get_num_threads() != 1 else 2


def _raise(*a):
    raise ValueError("a callback's own bug")


@pytest.mark.parametrize("how", ["interrupted", "callback raises"])
def test_a_run_that_stops_with_an_exception_gives_the_run_folder_threads_and_records_back(tmp_path, tiny_text_file,
                                                                                           how):
    """After a notebook's interrupt (or a callback's error) the kernel kept the run locked: the resume the exception
    printed was refused as "being trained by another process", and the thread count stayed the run's."""
    before = torch.get_num_threads()
    cfg = tiny_config(tmp_path / "r", tiny_text_file,
                      train=dict(max_iters=40, threads=_threads_other_than_now(), tensorboard=True))
    cb = StopAt(12) if how == "interrupted" else OnStep(lambda: _raise())
    t = Trainer(cfg, callbacks=[cb], **QUIET)
    with pytest.raises(Interrupted if how == "interrupted" else ValueError):
        t.fit()
    assert torch.get_num_threads() == before
    assert not runlock.is_held(tmp_path / "r")
    assert t.metrics.closed and t.metrics.tb is None
    if how == "interrupted":  # resumed in this same process, as the exception says
        resumed = RunConfig.from_run(tmp_path / "r")
        train(resumed, **QUIET)
        summary = json.loads((tmp_path / "r" / "summary.json").read_text())
        assert summary["final_step"] == 40


def test_a_refused_train_and_a_trainer_given_back_unfit_leave_the_threads_and_the_lock(tmp_path, tiny_text_file):
    """A refusal (an existing out_dir) changed the process's thread count for good; a Trainer made and never fit
    kept its run locked until the process ended."""
    before = torch.get_num_threads()
    train(tiny_config(tmp_path / "a", tiny_text_file, train=dict(max_iters=4)), **QUIET)
    with pytest.raises(DepthlabError, match="already exists"):
        train(tiny_config(tmp_path / "a", tiny_text_file, train=dict(threads=_threads_other_than_now())), **QUIET)
    assert torch.get_num_threads() == before and not runlock.is_held(tmp_path / "a")
    t = Trainer(tiny_config(tmp_path / "b", tiny_text_file, train=dict(threads=_threads_other_than_now())), **QUIET)
    assert runlock.is_held(tmp_path / "b")
    t.close()
    assert torch.get_num_threads() == before and not runlock.is_held(tmp_path / "b")


@pytest.mark.parametrize("caller_flushes", [True, False])
def test_training_gives_the_caller_back_its_subnormal_handling(tmp_path, tiny_text_file, caller_flushes):
    """torch.set_flush_denormal returns whether the CPU supports flushing, not the state before: a caller that
    flushed subnormals had it turned off by every train(), probe, coordcheck and check."""
    if not torch.set_flush_denormal(caller_flushes) and caller_flushes:
        pytest.skip("this CPU cannot flush subnormals")
    try:
        assert flushing() is caller_flushes and (float(SUBNORMAL * 1) == 0.0) is caller_flushes
        train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4, flush_denormal=True)), **QUIET)
        assert flushing() is caller_flushes
        from depthlab.analytics.probe import probe_at_init

        probe_at_init(tiny_config(tmp_path / "p", tiny_text_file), n_batches=1, batch_size=2)
        assert flushing() is caller_flushes
    finally:
        torch.set_flush_denormal(False)


def test_a_float64_default_dtype_is_refused_not_trained_under_float32_records(tmp_path, tiny_text_file):
    """torch.set_default_dtype(torch.float64) in a notebook trained float64 weights (another trajectory) while
    config.json, the banner and layers said float32."""
    from depthlab.sample import load_run

    train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=2)), **QUIET)
    torch.set_default_dtype(torch.float64)
    try:
        with pytest.raises(DepthlabError, match=r"^train: torch's default dtype is torch.float64 in this process "):
            train(tiny_config(tmp_path / "f64", tiny_text_file, train=dict(max_iters=2)), **QUIET)
        assert not (tmp_path / "f64").exists()
        with pytest.raises(DepthlabError, match=r"torch.set_default_dtype\(torch.float32\) first"):
            load_run(tmp_path / "r")
    finally:
        torch.set_default_dtype(torch.float32)
    model, _ = load_run(tmp_path / "r")
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_the_apis_resume_refusals_name_the_config_fields_not_the_flags(tmp_path):
    """A phrase naming a command ("a depthlab train run, or pass --train.resume false ...") was kept as a command
    line, flags and all; a resume without out_dir told a Python caller to give --resume RUN_DIR."""
    from depthlab import TrainConfig

    missing = tmp_path / "nope"
    with pytest.raises(DepthlabError) as e:
        train(RunConfig(train=TrainConfig(out_dir=str(missing), resume=True)), **QUIET)
    assert "pass train.resume=False to start a new run" in str(e.value) and "--train" not in str(e.value)
    with pytest.raises(DepthlabError) as e:
        train(RunConfig(train=TrainConfig(resume=True)), **QUIET)
    assert str(e.value).startswith("train.resume needs the run to continue: give its folder as train.out_dir")


def test_the_apis_wrong_argument_types_are_one_clear_error(tmp_path, tiny_text_file):
    """top_k=True reached torch.topk (TypeError); run_dir=None failed in pathlib; callbacks=None or [object()]
    failed with TypeError/AttributeError, the latter only after the corpus baselines were computed."""
    from depthlab.sample import sample_text

    train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=2)), **QUIET)
    for kw, needle in (({"top_k": True}, "^top_k must be"), ({"temperature": True}, "^temperature must be"),
                       ({"max_new_tokens": True}, "max_new_tokens")):
        with pytest.raises(DepthlabError, match=needle):
            sample_text(tmp_path / "r", "a", **{"max_new_tokens": 3, **kw})
    with pytest.raises(DepthlabError, match=r"^run_dir must be a run folder's path \(str or pathlib.Path\), got None"):
        sample_text(None, "a", 3)
    with pytest.raises(DepthlabError, match=r"^RunConfig.from_run's run_dir must be a run folder's path"):
        RunConfig.from_run(None)
    cfg = tiny_config(tmp_path / "c", tiny_text_file, train=dict(max_iters=2))
    assert train(cfg, callbacks=None, **QUIET) == tmp_path / "c"
    with pytest.raises(DepthlabError, match=r"^callbacks\[1\] \(object\) has no on_train_start: subclass depthlab"):
        train(tiny_config(tmp_path / "d", tiny_text_file), callbacks=[StopAt(1), object()], **QUIET)
    assert not (tmp_path / "d").exists()


class _ThreeArgs(torch.nn.Module):
    def __init__(self, vocab_size=65):
        super().__init__()
        self.e = torch.nn.Embedding(vocab_size, vocab_size)

    def forward(self, idx, mask, extra):
        return self.e(idx)


def test_a_forward_that_needs_more_than_the_token_ids_is_named_not_sent_to_batch_and_block_size(tmp_path):
    """check tried 60 sizes, then said "give the sizes it is built for with --batch_size and --block_size"; train said
    "if the model has a fixed batch size or a context shorter than model.block_size, make them match"."""
    from depthlab.analytics.check import check_model
    from depthlab.config import DataConfig
    from depthlab.data import load_corpus
    from depthlab.usermodel import check_forward

    rep = check_model(_ThreeArgs(), load_corpus(DataConfig()), rules=("shape",))
    shape = {c.rule: c for c in rep.checks}["shape"]
    assert shape.ok is False
    assert shape.summary == ("_ThreeArgs.forward(idx, mask, extra) cannot be called as forward(idx), as depthlab calls "
                             "it (the token ids (B, T), nothing else)")
    assert shape.remedy == "give mask, extra a default (e.g. mask=None)"
    with pytest.raises(DepthlabError, match=r"^m.py:M: _ThreeArgs.forward\(idx, mask, extra\) cannot be called as "
                                            r"forward\(idx\), .*; give mask, extra a default"):
        check_forward(_ThreeArgs(), "m.py:M", 2, 8, 65)


def test_a_source_name_with_a_colon_is_named_not_a_missing_file(tmp_path):
    from depthlab.usermodel import parse_source

    (tmp_path / "m.py").write_text("")
    with pytest.raises(DepthlabError, match=r"the NAME after .*m.py: must be one class or function name, got "
                                            r"'GPT:x' \(e.g. .*m.py:GPT\)$"):
        parse_source(f"{tmp_path / 'm.py'}:GPT:x")


class _UncalledNorm(torch.nn.Module):
    def __init__(self, vocab_size=65):
        super().__init__()
        self.e, self.ln = torch.nn.Embedding(vocab_size, 16), torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, vocab_size)

    def forward(self, idx):
        return self.head(self.e(idx))


def test_parameters_of_a_module_forward_never_calls_are_named_as_such():
    """A LayerNorm defined and never called was told "a part that is computed but never reaches the loss"."""
    from depthlab.analytics.check import check_model
    from depthlab.config import DataConfig
    from depthlab.data import load_corpus

    rep = check_model(_UncalledNorm(), load_corpus(DataConfig()), rules=("shape", "no_gradient"))
    ng = {c.rule: c for c in rep.checks}["no_gradient"]
    assert ng.ok is False and ng.evidence["never_called"] == ["ln.weight", "ln.bias"] and ng.evidence["no_grad"] == []
    assert ng.summary == "2 of 5 parameters belong to modules that forward never calls: ln.weight, ln.bias"
    assert "computed but never reaches" not in ng.remedy and ng.remedy.startswith("call each module where it belongs")


class _EndHook(Callback):
    """Calls ``fn(run)`` at the end of training (every other hook: Callback's no-op)."""

    def __init__(self, fn):
        self.fn = fn

    def on_train_end(self, run, summary):
        self.fn(run)


def _ctrl_c(run):
    raise KeyboardInterrupt


@pytest.mark.parametrize("how", ["Ctrl-C in the diagnosis", "SIGTERM after the final validation"])
def test_a_signal_after_the_final_validation_keeps_the_summary_and_says_the_run_is_whole(tmp_path, tiny_text_file,
                                                                                        how):
    """A Ctrl-C while the end-of-run diagnosis ran lost summary.json for good (a resume had nothing to train); a
    SIGTERM after a whole final validation said its final_validation was null and to resume for it."""
    hook = _EndHook(_ctrl_c if how.startswith("Ctrl-C") else lambda run: run.request_stop(15))
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4)), callbacks=[hook], **QUIET)
    with pytest.raises(Interrupted) as e:
        t.fit()
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["final_step"] == 4 and summary["final_validation"]["val_loss"] > 0
    assert e.value.exit_code == (130 if how.startswith("Ctrl-C") else 143)
    assert str(e.value).endswith("after the last step (4) and its final validation: the run is finished (summary.json "
                                 "written); its end-of-run diagnosis may be missing: depthlab diagnose "
                                 f"{tmp_path / 'r'}")
    assert not runlock.is_held(tmp_path / "r")
    if how.startswith("Ctrl-C"):  # without a final validation, none is named
        t = Trainer(tiny_config(tmp_path / "n", tiny_text_file, train=dict(max_iters=4, final_validation=False)),
                    callbacks=[hook], **QUIET)
        with pytest.raises(Interrupted, match=r"interrupted after the last step \(4\): the run is finished"):
            t.fit()


@pytest.mark.parametrize("edit, said", [(-3, "config.json's resolved.eval_batch is -3, not the whole number >= 1"),
                                        ("abc", "config.json's resolved.eval_batch is 'abc', not the whole number"),
                                        (7, "config.json's resolved.eval_batch is 7, but the checkpoint of step 4 was "
                                            "evaluated with 4 windows a batch (edited by hand?)")])
def test_a_hand_edited_eval_batch_is_refused_before_anything_changes(tmp_path, tiny_text_file, capsys, edit, said):
    """-3 read every loss as 0.0000, which became the run's best (best.safetensors replaced), then exit 1; 'abc' was
    "unexpected ValueError"; 7 evaluated other windows without a word."""
    from conftest import run_cli

    train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4, eval_interval=2)), **QUIET)
    cfg_path = tmp_path / "r" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    assert cfg["resolved"]["eval_batch"] == 4
    cfg["resolved"]["eval_batch"] = edit
    cfg_path.write_text(json.dumps(cfg))
    before = {p.name: p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file()}
    rc, out, err = run_cli(capsys, "train", "--resume", str(tmp_path / "r"), "--train.max_iters", "8")
    assert rc == 2 and err.count("\n") == 1 and said in err, err
    assert {p.name: p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file()} == before


def test_a_resume_asking_the_dtype_and_attention_auto_chose_says_no_change(tmp_path, tiny_text_file, capsys):
    """"resume: train.dtype 'auto' -> 'float32': the rest of the run computes in the new precision" on a run auto had
    made float32: its losses were identical to a plain resume's."""
    from conftest import run_cli

    train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4, dtype="auto", attention="auto")),
          **QUIET)
    ran = json.loads((tmp_path / "r" / "config.json").read_text())["resolved"]
    rc, out, err = run_cli(capsys, "train", "--resume", str(tmp_path / "r"), "--train.max_iters", "6",
                           "--train.dtype", ran["dtype"], "--train.attention", ran["attention"])
    said = out + err
    assert rc == 0 and "resume: train.dtype" not in said and "resume: train.attention" not in said, said
    other = "explicit" if ran["attention"] == "sdpa" else "sdpa"
    rc, out, err = run_cli(capsys, "train", "--resume", str(tmp_path / "r"), "--train.max_iters", "8",
                           "--train.attention", other)
    # the first resume recorded the value it was given: the change is from it
    said = f"resume: train.attention '{ran['attention']}' -> '{other}': the same function by another kernel"
    assert rc == 0 and said in out + err


def test_an_explicit_bf16_on_a_cpu_without_it_is_warned(tmp_path, tiny_text_file, monkeypatch):
    """--train.dtype bfloat16 on an AVX2 CPU trained 7x slower than float32 without a word."""
    from depthlab.training import runtime

    lines = []
    monkeypatch.setattr(runtime, "cpu_has_bf16", lambda: False)
    train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=2, dtype="bfloat16")), log=lines.append)
    assert [ln for ln in lines if ln.startswith("warning: train.dtype bfloat16 on a CPU without native bf16")]
    monkeypatch.setattr(runtime, "cpu_has_bf16", lambda: True)
    lines.clear()
    train(tiny_config(tmp_path / "n", tiny_text_file, train=dict(max_iters=2, dtype="bfloat16")), log=lines.append)
    assert not [ln for ln in lines if "without native bf16" in ln]


class _StartHook(_EndHook):
    def on_train_start(self, run, info):
        self.fn(run)


def test_a_resume_stopped_before_its_first_step_puts_config_json_back(tmp_path, tiny_text_file):
    """A Ctrl-C during a resume's baselines left its new batch_size and max_iters in config.json, which the next plain
    --resume took up as if asked ("resume: train.batch_size 16 -> 8")."""
    train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4)), **QUIET)
    before = (tmp_path / "r" / "config.json").read_bytes()
    cfg = RunConfig.from_run(tmp_path / "r")
    cfg.train.batch_size, cfg.train.max_iters = 8, 30
    with pytest.raises(KeyboardInterrupt) as e:
        Trainer(cfg, callbacks=[_StartHook(_ctrl_c)], **QUIET).fit()
    assert (tmp_path / "r" / "config.json").read_bytes() == before
    assert str(e.value) == (f"interrupted before the first step: nothing was trained, and {tmp_path / 'r'}"
                            f"/config.json is as it was before this resume; to resume: depthlab train --resume "
                            f"{tmp_path / 'r'}")


def test_a_resumed_runs_wall_time_keeps_the_earlier_sessions_final_validation(tmp_path, tiny_text_file):
    """The checkpoint's clock stops before the final validation: a resume's wall_time_s left out ~3 s of the
    earlier session, against the README's "wall_time_s counts every session"."""
    train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4)), **QUIET)
    first = json.loads((tmp_path / "r" / "summary.json").read_text())["wall_time_s"]
    cfg = RunConfig.from_run(tmp_path / "r")
    cfg.train.max_iters = 6
    t = Trainer(cfg, **QUIET)
    assert t.wall_before == first  # above the checkpoint's clock by the final validation and what followed it
    t.fit()
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["wall_time_s"] > first


def test_the_report_header_names_the_wiring_as_the_trainer_does():
    """A ReZero run's report read "variant rezero, norm layernorm" of a model without any norm."""
    from depthlab.report.run_data import RunData

    rd = RunData.__new__(RunData)
    rd.config = {"model": {"variant": "rezero", "norm": "layernorm", "n_layer": 3, "n_head": 4, "n_embd": 64,
                           "block_size": 128}}
    assert rd.model_line() == "rezero (no norm), n_layer 3, n_head 4, n_embd 64, block_size 128"
    rd.config["model"]["variant"] = "prenorm"
    assert rd.model_line().startswith("prenorm + layernorm, n_layer 3")


def test_tensorboard_gets_one_total_gradient_norm_per_step(tmp_path, tiny_text_file):
    """grad_norm/total had two points at every step both the training log and the gradient monitor wrote."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(tiny_config(tmp_path / "r", tiny_text_file,
                      train=dict(max_iters=20, tensorboard=True, log_interval=5, grad_log_interval=10)), **QUIET)
    ea = EventAccumulator(str(tmp_path / "r" / "tb"))
    ea.Reload()
    steps = [e.step for e in ea.Scalars("grad_norm/total")]
    assert steps == sorted(set(steps)) and {10, 20} <= set(steps)
    assert [e.step for e in ea.Scalars("grad_norm/block_0")] == [10, 20]


def test_the_sweep_curves_keep_a_healthy_run_readable_beside_a_diverged_one(monkeypatch, tmp_path):
    """A learning-rate sweep with one diverged run (val 2.9e7) drew both panels blank, the loss axis from -1.45e6."""
    import depthlab.report.sweep as rs
    from conftest import sweep_item

    limits = []
    real = rs.write_png

    def capture(fig, path, **savefig):
        limits.extend(ax.get_ylim() for ax in fig.axes)
        return real(fig, path, **savefig)
    monkeypatch.setattr(rs, "write_png", capture)
    items = [sweep_item("prenorm", 2, 2.56, evals=[(0, 4.2, 4.2), (25, 2.9, 2.9), (50, 2.56, 2.56)]),
             sweep_item("prenorm", 2, 4.2, evals=[(0, 4.2, 4.2), (25, 2.9e7, 2.9e7)])]
    items[1]["config"]["train"]["learning_rate"] = 30
    base = {"uniform": 4.17, "unigram": 3.35, "bigram": 2.48}
    assert rs.plot_curves(items, "train.learning_rate", [], base, tmp_path / "c.png") is not None
    assert limits and all(lo == pytest.approx(2.46) and hi == pytest.approx(4.27) for lo, hi in limits), limits


def test_the_context_record_of_overfit_final_weights_is_not_judged_as_the_architecture():
    """An overfit run (val best 2.315 at step 200, 2.957 at step 600): diagnose said the final weights do not use
    their context and blamed the attention path, the mask and model.block_size, while the report's card and
    `depthlab context` on the best weights said the model uses its context."""
    from depthlab.analytics.diagnose import diagnose_records, rules_without_data

    from conftest import SHAKESPEARE_BASELINES, context_record, eval_records

    recs = eval_records([4.2, 2.6, 2.315, 2.5, 2.7, 2.85, 2.957], trains=[4.2, 2.5, 2.1, 1.7, 1.4, 1.2, 1.0])
    unused = context_record(600, [2.9] * 64)
    found = diagnose_records(recs + [unused], baselines=SHAKESPEARE_BASELINES)
    rules = [f.rule for f in found]
    assert "overfitting" in rules and "context_unused" not in rules, rules
    said = [w for w in rules_without_data(recs + [unused], baselines=SHAKESPEARE_BASELINES) if "context_unused" in w]
    assert said == ["context_unused (its end-of-training record is of the final weights (step 600), which overfit: val "
                    "2.957 against the best 2.315 (step 200) while train fell; depthlab context RUN measures the best "
                    "weights)"], said


def test_a_sweep_report_of_runs_all_stopped_by_max_time_says_what_they_ended_with():
    """A finished sweep whose two runs were stopped by train.max_time said "No finished runs yet." and carded
    "runs finished 0/2"."""
    from depthlab.report.sweep import _cards, _no_ok_runs

    from conftest import sweep_item

    its = [sweep_item("prenorm", L, 2.4, status="time_capped") for L in (1, 2)]
    assert _no_ok_runs(its) == ("No run ended with status ok (status time_capped): the table averages the ok runs; "
                                "every run is in All runs below.")
    assert _cards([it["row"] for it in its], None)[0] == ("runs ok", "0/2", "status ok; 2 stopped by train.max_time")


@pytest.mark.slow  # a BPE run and its report: ~7 s
def test_a_bpe_runs_report_says_why_it_has_no_attention_figure(tmp_path, bpe_file):
    """It said "not recorded in this run, not measurable for this model, or drawn from files that are missing or
    damaged, which the command then names in a warning": no warning came, nothing was damaged."""
    from depthlab.report import build_report

    from conftest import bpe_run_config

    run = train(bpe_run_config(tmp_path, bpe_file, max_iters=4, probe_interval=2), **QUIET)
    html = build_report(run).read_text()
    assert ("Not drawn: attention patterns on a validation snippet (drawn for character-level runs, whose labels are "
            "characters; this run&#x27;s tokenizer is bpe).") in html
    assert "attention patterns on a validation snippet (not recorded" not in html


def test_a_resume_with_fit_to_time_false_leaves_the_plan():
    """--resume --train.fit_to_time false on a planned run still stopped at the plan's end (the help: "Off: max_time
    only cuts the run")."""
    from depthlab.budget import Plan
    from depthlab.config import TrainConfig

    plan = Plan(max_iters=180, lr_decay_iters=180, warmup_iters=49, max_iters_asked=5000, lr_decay_iters_asked=5000,
                warmup_iters_asked=50, s_per_step=0.025, s_per_eval=0.4, at_step=20, max_time=6.0)
    assert plan.made_for(TrainConfig(max_iters=5000, lr_decay_iters=5000))
    assert not plan.made_for(TrainConfig(max_iters=5000, lr_decay_iters=5000, fit_to_time=False))


def test_once_the_command_ends_a_ctrl_c_ends_the_process_without_a_traceback(monkeypatch, capsys):
    """A second Ctrl-C as the interpreter shut down printed "Exception ignored in atexit callback" and a traceback
    (depthlab's Ctrl-C handler was still installed)."""
    import signal

    from depthlab import _entry, cli

    before = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr("sys.argv", ["depthlab", "--version"])
    monkeypatch.setattr(cli, "_PROCESS_ARGV", None)  # main() sets it as the process's own: put back after
    try:
        assert _entry.main() == 0
        assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_log_axis_over_a_narrow_range_has_readable_labels():
    """Update ratios from 0.0177 to 0.0195 cross no decade, 2 or 5: the axis carried no tick label at all."""
    from depthlab.figures import log_axis, new_figure

    fig = new_figure((4, 3))
    ax = fig.add_subplot(1, 1, 1)
    vals = [0.0177, 0.0185, 0.0195]
    ax.plot([1, 2, 3], vals)
    log_axis(ax, "y", vals)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    lo, hi = ax.get_ylim()
    shown = [float(s) for s in labels if lo <= float(s) <= hi]
    assert len(shown) >= 2, labels


class _KeywordOnly(_ThreeArgs):
    def forward(self, idx, targets=None, *, scale):
        return self.e(idx)


class _MaskSecond(_ThreeArgs):
    def forward(self, idx, attn_mask=None, targets=None):
        return self.e(idx)


def test_the_forward_signature_check_names_keyword_only_and_misplaced_targets():
    """forward(idx, targets=None, *, scale) was told "take the token ids (B, T) as its first argument"; forward(idx,
    attn_mask=None, targets=None) passed check and trained with the targets in attn_mask."""
    from depthlab.usermodel import call_fault

    assert call_fault(_KeywordOnly())[1] == "give scale a default (e.g. scale=None)"
    problem, fix = call_fault(_MaskSecond())
    assert problem.endswith("takes targets, but not as its second argument: depthlab calls forward(idx, targets), the "
                            "targets second (as nanoGPT's forward(idx, targets=None)), so attn_mask would receive them")
    assert fix == "put targets second: forward(self, idx, targets=None, ...)"
    assert call_fault(_ThreeArgs())[1] == "give mask, extra a default (e.g. mask=None)"
    from depthlab.model import GPT

    from conftest import tiny_model_config
    assert call_fault(GPT(tiny_model_config())) is None


def test_a_callback_class_is_refused_as_one():
    from depthlab.callbacks import Callback, checked_callbacks

    with pytest.raises(DepthlabError, match=r"^callbacks\[0\] is the class Callback; pass an instance: Callback\(\)$"):
        checked_callbacks([Callback])


def test_an_out_dir_that_is_no_path_and_a_float64_export_are_one_clear_error(tmp_path, tiny_text_file):
    from depthlab.analytics.context import load_weights
    from depthlab.export import export_run

    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=2))
    cfg.train.out_dir = 5
    with pytest.raises(DepthlabError, match=r"^train.out_dir must be a run folder's path \(str or pathlib.Path\), "
                                            r"got 5$"):
        train(cfg, **QUIET)
    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=2)), **QUIET)
    torch.set_default_dtype(torch.float64)
    try:
        with pytest.raises(DepthlabError, match=r"^export: torch's default dtype is torch.float64"):
            export_run(run, tmp_path / "hf")
        with pytest.raises(DepthlabError, match=r"torch's default dtype is torch.float64"):
            load_weights(run)
    finally:
        torch.set_default_dtype(torch.float32)
    assert not (tmp_path / "hf").exists()
