"""Resume honours or refuses every changed setting; records tell the truth (issue 10)."""

import json
import math
import os
import warnings

import pytest
import torch
from conftest import QUIET, run_two_ranks, tiny_cli_args, tiny_config

from depthlab import train
from depthlab.checkpoint import RESUME_NOTED, RESUME_SILENT, resume_changes
from depthlab.cli import main
from depthlab.config import RunConfig, TrainConfig, schedule_warnings
from depthlab.errors import DepthlabError
from depthlab.callbacks import Callback
from depthlab.trainer import Interrupted, Trainer, val_perplexity


def _snapshot(run):
    """Every file under ``run`` with its bytes: a resume that must change nothing keeps this equal."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.fixture
def run20(tmp_path, tiny_text_file):
    out = tmp_path / "r"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=20, train__eval_interval=10,
                              data__val_fraction=0.1)]) == 0
    return out


def test_changed_split_is_refused_naming_field_and_values(run20, capsys):
    before = _snapshot(run20)
    rc = main(["train", "--resume", str(run20), "--train.max_iters", "40", "--data.val_fraction", "0.3"])
    err = capsys.readouterr().err
    assert rc == 2 and "data.val_fraction 0.1 -> 0.3" in err and "Traceback" not in err
    assert _snapshot(run20) == before  # nothing the user had is touched


@pytest.mark.parametrize("how", [["--resume", "RUN"], ["--train.resume", "true", "--train.out_dir", "RUN"]])
def test_overwrite_with_resume_is_refused_and_the_run_is_untouched(run20, capsys, how):
    before = _snapshot(run20)
    rc = main(["train", *[str(run20) if a == "RUN" else a for a in how], "--train.max_iters", "30", "--overwrite"])
    err = capsys.readouterr().err
    assert rc == 2 and "--overwrite and --resume contradict each other" in err and err.count("\n") == 1
    assert _snapshot(run20) == before


def test_changed_optimiser_setting_is_allowed_with_a_line_and_recorded(run20, capsys):
    capsys.readouterr()
    assert main(["train", "--resume", str(run20), "--train.max_iters", "30", "--train.learning_rate", "0.001"]) == 0
    out = capsys.readouterr().out
    assert "resume: train.learning_rate 0.003 -> 0.001" in out
    cfg = json.loads((run20 / "config.json").read_text())
    assert cfg["train"]["learning_rate"] == 0.001 and cfg["train"]["max_iters"] == 30


def test_extending_max_iters_is_silent(run20, capsys):
    capsys.readouterr()
    assert main(["train", "--resume", str(run20), "--train.max_iters", "30"]) == 0
    out = capsys.readouterr().out
    assert "resume: train." not in out and json.loads((run20 / "summary.json").read_text())["final_step"] == 30
    assert "the learning rate continues from" in out  # the schedule is extended without a jump, and says so


def test_every_config_field_is_classified_and_unknown_fields_are_refused():
    fields = {f"{s}.{k}" for s, sec in RunConfig().to_dict().items() for k in sec}
    assert set(RESUME_NOTED) <= fields and RESUME_SILENT <= fields
    old = RunConfig().to_dict()
    new = json.loads(json.dumps(old))
    new["train"]["seed"] = 7
    new["model"]["n_head"] = 2
    new["train"]["max_iters"] = 5000
    new["train"]["beta2"] = 0.95
    refused, noted = resume_changes(old, new)
    assert [r.split()[0] for r in refused] == ["model.n_head", "train.seed"]
    assert [n.split()[0] for n in noted] == ["train.beta2"]
    new["model"]["future_field"] = 1  # a field the run never had, not at its default: refused
    assert "model.future_field" in resume_changes(old, new)[0][0]


def test_changed_corpus_bytes_are_refused(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=10)), **QUIET)
    text = tiny_text_file.read_text()
    tiny_text_file.write_text(text[::-1])  # same characters, other text
    with pytest.raises(DepthlabError, match="corpus .* changed since the checkpoint"):
        Trainer(tiny_config(run, tiny_text_file, train=dict(resume=True, max_iters=20)), **QUIET)


def test_resume_with_nothing_to_train_changes_nothing(tmp_path, tiny_text_file, capsys):
    out = tmp_path / "fin"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=20, train__eval_interval=10,
                              train__probe_interval=7, train__tensorboard="true")]) == 0
    before = _snapshot(out)
    capsys.readouterr()
    assert main(["train", "--resume", str(out)]) == 0
    assert "nothing to train" in capsys.readouterr().out
    assert _snapshot(out) == before
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["kind"] == "probe" and r["step"] == 20 for r in recs) == 1
    assert sum(r["kind"] == "eval" and r["step"] == 20 for r in recs) == 1


def test_tensorboard_after_fallback_resume_has_one_point_per_step(tmp_path, tiny_text_file):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "tb"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=30, train__eval_interval=20,
                              train__log_interval=1, train__tensorboard="true")]) == 0
    (out / "checkpoints" / "step-000030.safetensors").write_bytes(b"x")  # corrupt: falls back to step 20
    assert main(["train", "--resume", str(out)]) == 0
    acc = EventAccumulator(str(out / "tb"))
    acc.Reload()
    steps = [e.step for e in acc.Scalars("train/loss")]
    assert sorted(steps) == list(range(1, 31))


def test_val_ppl_is_the_true_value_or_null(tmp_path, tiny_text_file):
    assert val_perplexity(60.0) == math.exp(60.0)
    assert val_perplexity(800.0) is None and val_perplexity(float("nan")) is None
    t = Trainer(tiny_config(tmp_path / "p", tiny_text_file, train=dict(max_iters=2, eval_interval=1)), **QUIET)
    t.evaluate = lambda: {"train": 60.0, "val": 60.0}
    t.fit()
    r = [json.loads(line) for line in (tmp_path / "p" / "metrics.jsonl").read_text().splitlines()
         if '"val_ppl"' in line][0]
    assert abs(r["val_ppl"] - math.exp(60)) <= 1e-12 * math.exp(60)


def test_contradictory_schedule_is_refused_or_warned():
    with pytest.raises(DepthlabError, match="lr_decay_iters .* warmup_iters"):
        TrainConfig(max_iters=20, warmup_iters=10, lr_decay_iters=5)
    w = schedule_warnings(TrainConfig(max_iters=20, warmup_iters=100))
    assert len(w) == 1 and "train.warmup_iters (100) >= train.max_iters (20)" in w[0]
    assert schedule_warnings(TrainConfig(max_iters=200, warmup_iters=100)) == []


def test_schedule_warning_is_printed(tmp_path, tiny_text_file, capsys):
    args = tiny_cli_args(tiny_text_file, tmp_path / "w", train__max_iters=5, train__warmup_iters=100)
    assert main(["train", *args]) == 0
    assert "warning: train.warmup_iters (100) >= train.max_iters (5)" in capsys.readouterr().out


def test_rmsnorm_under_bf16_autocast_is_fused_and_close_to_fp32():
    from conftest import tiny_gpt

    m = tiny_gpt(norm="rmsnorm", variant="prenorm")
    x = torch.randint(0, 11, (2, 8))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "Mismatch dtype ... fused implementation" warning fails here
        l32 = m(x, x)[1]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            l16 = m(x, x)[1]
    assert abs(float(l32) - float(l16)) < 0.02


def test_file_writes_work_without_os_fchmod(tmp_path, tiny_text_file, monkeypatch):
    monkeypatch.delattr(os, "fchmod")  # Windows before Python 3.13
    out = tmp_path / "nf"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=5, train__eval_interval=5)]) == 0
    assert (out / "checkpoints" / "best.safetensors").exists()


@pytest.mark.slow
def test_ddp_ranks_stop_together_on_the_time_limit(tmp_path, tiny_text_file):
    import subprocess
    import sys
    import time

    out = tmp_path / "ddp"
    args = tiny_cli_args(tiny_text_file, out, train__max_time=6, train__max_iters=1000000,
                         train__eval_interval=1000000, train__grad_accum=2, train__threads=1)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    t0 = time.time()
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        "-m", "depthlab", "train", *args], env=env, capture_output=True, text=True, timeout=150)
    assert p.returncode == 0, p.stderr[-2000:]
    assert time.time() - t0 < 90
    s = json.loads((out / "summary.json").read_text())
    assert s["stopped_by"] == "max_time" and s["final_step"] > 0


# ---------------------------------------------------------------- every rank takes the same stop decision
class _PoisonGrad:
    """On this rank only: make one step's gradient NaN (as a bad batch on one rank would)."""

    def __init__(self, step):
        self.step = step

    def on_train_start(self, run, info): ...
    def on_step_end(self, run, info): ...
    def on_eval(self, run, info, record): ...
    def on_train_end(self, run, summary): ...

    def on_before_clip(self, run, info):
        if info.step == self.step:
            next(run.raw_model.parameters()).grad.fill_(float("nan"))


class _SignalOnThisRank(_PoisonGrad):
    """On this rank only: behave as if SIGTERM arrived after ``step``."""

    def on_before_clip(self, run, info): ...

    def on_step_end(self, run, info):
        if info.step == self.step:
            run.request_stop(15)


def _ddp_worker(rank, port, out, text, case, queue):
    import torch.distributed as dist

    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    cfg = tiny_config(out, text, train=dict(max_iters=40, eval_interval=10, grad_accum=2, threads=1,
                                            on_nonfinite="skip" if case == "skip" else "stop"))
    if case == "fit":  # train.fit_to_time under a 4 s budget
        cfg.train.max_iters, cfg.train.max_time, cfg.train.eval_interval = 100_000, 4.0, 1000
    cbs = []
    if case in ("skip", "nonfinite") and rank == 1:
        cbs = [_PoisonGrad(3)]
    if case == "signal" and rank == 1:
        cbs = [_SignalOnThisRank(5)]
    t = Trainer(cfg, callbacks=cbs, **QUIET)
    if case == "fit" and rank == 1:  # this rank measures itself twice as slow: its shorter plan must win
        fit = t.budget.steps_that_fit
        t.budget.steps_that_fit = lambda step, s_step, elapsed: fit(step, 2 * s_step, elapsed)
    if case == "savefail" and rank == 0:
        real = t.save

        def failing_save(**kw):
            if t.step == 10:
                raise OSError(28, "No space left on device")
            real(**kw)
        t.save = failing_save
    try:
        t.fit()
        result = "ok"
    except BaseException as e:  # noqa: BLE001 - the test compares what each rank ended with
        result = type(e).__name__
    queue.put((rank, result, t.step, t.stopped_by, t.schedule.max_iters))
    if dist.is_initialized():
        dist.destroy_process_group()


def _run_two_ranks(tmp_path, text, case):
    return run_two_ranks(_ddp_worker, tmp_path / case, text, case)


@pytest.mark.slow
@pytest.mark.parametrize("case,expect", [("nonfinite", ("NonFiniteError", 3)), ("skip", ("ok", 40)),
                                         ("signal", ("Interrupted", 5)), ("savefail", (None, 10))])
def test_two_ranks_stop_at_the_same_step_for_every_reason(tmp_path, tiny_text_file, case, expect):
    res = _run_two_ranks(tmp_path, tiny_text_file, case)
    assert res[0][1] == res[1][1] == expect[1], res
    if expect[0] is not None:
        assert res[0][0] == res[1][0] == expect[0], res
    else:  # rank 0 re-raises its own OSError, the others a DepthlabError saying why they stop
        assert res[0][0] == "OSError" and res[1][0] == "DepthlabError", res


@pytest.mark.slow
def test_two_ranks_plan_the_same_fit_to_time_schedule(tmp_path, tiny_text_file):
    res = _run_two_ranks(tmp_path, tiny_text_file, "fit")
    assert res[0] == res[1], res  # same planned max_iters (the slower rank's), same last step
    result, step, stopped_by, max_iters = res[0]
    assert result == "ok" and stopped_by == "max_time" and 20 < step == max_iters < 100_000


# ---------------------------------------------------------------- extending a run, resolved settings
def test_extending_a_finished_run_continues_from_its_learning_rate(tmp_path, tiny_text_file):
    from depthlab.trainer import get_lr

    cfg = dict(max_iters=20, warmup_iters=2, learning_rate=3e-3, min_lr=1e-4)
    train(tiny_config(tmp_path / "r", tiny_text_file, train=cfg), **QUIET)
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, max_iters=40, resume=True)), **QUIET)
    end_of_old = get_lr(20, 3e-3, 1e-4, 2, 20)
    assert end_of_old == 1e-4 and t.lr_at(20) == end_of_old  # no jump back towards the 3e-3 peak
    lrs = [t.lr_at(i) for i in range(20, 41)]
    assert all(b <= a for a, b in zip(lrs, lrs[1:])) and lrs[-1] == 1e-4
    t.fit()
    again = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, max_iters=40, resume=True)),
                    **QUIET)
    assert again.schedule.anchor == t.schedule.anchor  # stored in the checkpoint: a later resume keeps it


class _StopAfter(Callback):
    """Asks the run to stop (as SIGTERM would) after step ``step``."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, run, info):
        if info.step == self.step:
            run.request_stop()


def test_extension_mid_run_decays_from_the_current_rate(tmp_path, tiny_text_file):
    from depthlab.trainer import get_lr

    cfg = dict(max_iters=20, eval_interval=10, warmup_iters=2, learning_rate=3e-3, min_lr=1e-4)
    t = Trainer(tiny_config(tmp_path / "m", tiny_text_file, train=cfg), callbacks=[_StopAfter(10)], **QUIET)
    with pytest.raises(Interrupted):  # stopped at the step-10 checkpoint, as a crash would leave it
        t.fit()
    r = Trainer(tiny_config(tmp_path / "m", tiny_text_file, train=dict(cfg, max_iters=60, resume=True)), **QUIET)
    # the run planned a decay to step 20 (its config.json); at step 10 that schedule was at get_lr(10, .., 20)
    assert r.step == 10 and abs(r.lr_at(10) - get_lr(10, 3e-3, 1e-4, 2, 20)) < 1e-12
    assert r.lr_at(11) < r.lr_at(10) and r.lr_at(60) == 1e-4


def test_config_json_records_what_auto_resolved_to(tmp_path, tiny_text_file, capsys):
    out = tmp_path / "a"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=5, train__dtype="auto")]) == 0
    banner = capsys.readouterr().out
    c = json.loads((out / "config.json").read_text())
    assert c["train"]["dtype"] == "auto" and c["resolved"]["dtype"] in ("float32", "bfloat16")
    assert c["resolved"]["device"] == "cpu" and c["resolved"]["threads"] == 1
    assert f"device cpu, {c['resolved']['dtype']}, 1 thread," in banner
    assert main(["train", "--resume", str(out), "--train.max_iters", "8"]) == 0  # config.json reads back


def test_kill_between_new_best_and_its_manifest_entry_keeps_best_loadable(tmp_path, tiny_text_file, monkeypatch):
    import depthlab.checkpoint as ckpt
    from depthlab.sample import load_run

    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4, eval_interval=2)), **QUIET)
    real, writes = ckpt.atomic_write, []

    def dies_at_second_manifest_of_a_save(path, data):
        writes.append(path.name)
        if path.name == "manifest.json" and writes.count("manifest.json") == 2:
            raise KeyboardInterrupt  # the second manifest write of step 6's save: best.safetensors is new
        real(path, data)

    monkeypatch.setattr(ckpt, "atomic_write", dies_at_second_manifest_of_a_save)
    with pytest.raises(KeyboardInterrupt):
        train(tiny_config(run, tiny_text_file, train=dict(resume=True, max_iters=6, eval_interval=2)), **QUIET)
    monkeypatch.undo()
    assert writes[-2:] == ["best.safetensors", "manifest.json"]
    m = json.loads((run / "checkpoints" / "manifest.json").read_text())
    assert m["best"]["step"] == 4 and m["checkpoints"][-1]["step"] == 6
    model, _ = load_run(run)  # best.safetensors holds step 6's bytes, vouched for by the step-6 entry
    sd6, _ = ckpt.load_weights_file(run / "checkpoints" / "step-000006.safetensors")
    assert torch.equal(model.lm_head.weight, sd6["transformer.wte.weight"])


@pytest.mark.parametrize("dtype,bf16_cpu,want", [("float32", True, "sdpa"), ("bfloat16", True, "explicit"),
                                                 ("auto", False, "sdpa"), ("auto", True, "explicit")])
def test_attention_auto_is_explicit_only_under_cpu_bf16(tmp_path, tiny_text_file, monkeypatch, dtype, bf16_cpu, want):
    # explicit attention pays only under bf16 autocast on CPU; in fp32 SDPA is faster (benchmarks/train_speed.py)
    import depthlab.training.runtime as rt
    from depthlab.trainer import use_explicit_attention

    monkeypatch.setattr(rt, "cpu_has_bf16", lambda: bf16_cpu)
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=1, dtype=dtype)), **QUIET)
    assert t.resolved()["attention"] == want
    assert all(b.attn.explicit == (want == "explicit") for b in t.model.transformer.h)
    assert use_explicit_attention("explicit", torch.device("cuda"), False)
    assert not use_explicit_attention("auto", torch.device("cuda"), True)


def test_api_resume_of_a_missing_folder_says_not_found(tmp_path, tiny_text_file):
    with pytest.raises(DepthlabError, match="nope not found"):
        Trainer(tiny_config(tmp_path / "nope", tiny_text_file, train=dict(resume=True)), **QUIET)
    assert not (tmp_path / "nope").exists()


def test_resume_with_nothing_to_train_says_only_that(tmp_path, tiny_text_file):
    run = tmp_path / "r"
    train(tiny_config(run, tiny_text_file), **QUIET)
    lines = []
    Trainer(tiny_config(run, tiny_text_file, train=dict(resume=True, max_iters=15)), log=lines.append).fit()
    assert any(line.startswith("nothing to train") for line in lines)
    assert not any("learning rate" in line for line in lines), lines  # was: "stays at train.min_lr ..."
