"""training.runtime: memory check, threads, attention path, compile, what ``auto`` resolved to, processes
(DDP on CPU: gloo over loopback; 2 processes x batch B must match 1 process x batch 2B)."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from depthlab.cli import main
from depthlab.config import RunConfig
from depthlab.errors import DepthlabError
from depthlab.trainer import Trainer, check_memory, training_memory_bytes

from conftest import QUIET, tiny_cli_args, tiny_config


def test_memory_estimate_follows_korthikanti():
    cfg = RunConfig()
    m, t = cfg.model, cfg.train
    B, T, C, L, nh, V = t.batch_size, m.block_size, m.n_embd, m.n_layer, m.n_head, 65
    acts = 2 * L * T * B * C * (34 + 5 * nh * T / C)
    params = L * C * C * (4 + 2 * m.ff_mult) + (V + T) * C
    assert training_memory_bytes(cfg, V) == pytest.approx(acts + 12 * B * T * V + 16 * params)
    import torch

    check_memory(cfg, V, torch.device("cpu"))  # the default recipe fits


def test_sizes_that_cannot_fit_are_refused_before_anything_is_written(tmp_path, tiny_text_file, capsys):
    out = tmp_path / "huge"
    rc = main(["train", *tiny_cli_args(tiny_text_file, out, train__batch_size=1000000, model__n_layer=1)])
    err = capsys.readouterr().err
    assert rc == 2 and "GiB" in err and "train.batch_size" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    # weights that alone fill the machine: the advice names the model's size, not the batch (already 1)
    rc = main(["train", *tiny_cli_args(tiny_text_file, out, train__batch_size=1, model__block_size=8,
                                       model__n_embd=65536, model__n_layer=16, model__n_head=1)])
    err = capsys.readouterr().err
    assert rc == 2 and "lower model.n_embd or model.n_layer" in err and "train.batch_size (" not in err, err
    assert not out.exists()


def test_more_threads_than_cores_is_warned(tmp_path, tiny_text_file):
    import os

    import torch

    lines = []
    before = torch.get_num_threads()
    Trainer(tiny_config(tmp_path / "t", tiny_text_file, train=dict(threads=(os.cpu_count() or 1) + 1)),
            log=lines.append)
    # a Python caller's Trainer names the config field, the command line the flag
    assert any("more than this machine's" in s and "train.threads" in s and "--train" not in s for s in lines)
    lines.clear()
    Trainer(tiny_config(tmp_path / "u", tiny_text_file, train=dict(threads=1)), log=lines.append)
    torch.set_num_threads(before)  # the trainer set it process-wide
    assert not any("more than this machine's" in s for s in lines)


def test_omp_num_threads_above_the_cores_is_honoured_and_warned_like_train_threads(tmp_path, tiny_text_file,
                                                                                  monkeypatch):
    """torch alone caps OMP_NUM_THREADS at the cores, while the run said "OMP_NUM_THREADS=64 as given"
    and ran 2 threads without a word; now it runs what was given, with train.threads' warning."""
    from depthlab.trainer import banner

    cores = os.cpu_count() or 1
    monkeypatch.setenv("OMP_NUM_THREADS", str(cores + 1))
    before, lines = torch.get_num_threads(), []
    try:
        t = Trainer(tiny_config(tmp_path / "t", tiny_text_file, train=dict(threads=0, max_iters=2)),
                    log=lines.append)
        assert t.resolved()["threads"] == torch.get_num_threads() == cores + 1
        assert [s for s in lines if "more than this machine's" in s] == [
            f"warning: OMP_NUM_THREADS={cores + 1} is more than this machine's {cores} cores; oversubscribed "
            f"threads make each step slower (try OMP_NUM_THREADS={cores}, or unset it)"]
        said = banner(t, 1)
        assert any(f", {cores + 1} threads, " in s for s in said if s.startswith("run "))
        assert any(s.startswith(f"auto settings: {cores + 1} threads, ") and f"OMP_NUM_THREADS={cores + 1} as given"
                   in s for s in said), said
    finally:
        torch.set_num_threads(before)


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


def test_compile_auto_is_the_default_and_means_cuda_only(tmp_path, tiny_text_file):
    from depthlab.config import TrainConfig
    from depthlab.errors import DepthlabError

    assert TrainConfig().compile == "auto"
    with pytest.raises(DepthlabError, match="train.compile must be true, false or auto"):
        TrainConfig(compile="yes")
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file), **QUIET)
    assert t.model is t.raw_model and t.resolved()["compile"] is False  # CPU: eager
    assert json.loads((tmp_path / "r" / "config.json").read_text())["resolved"]["compile"] is False
    from depthlab.training.runtime import Runtime

    for compile_, device, want in (("auto", "cuda", True), (False, "cuda", False), (True, "cpu", True),
                                   ("auto", "cpu", False)):
        rt = Runtime(TrainConfig(compile=compile_))
        rt.device = torch.device(device)  # the decision alone (no CUDA here)
        assert rt.compile_wanted is want, (compile_, device)


def test_compile_mode_auto_is_cuda_graphs_on_one_cuda_device_only():
    """``auto``: reduce-overhead on one CUDA device; default on a CPU and under DDP; explicit values win."""
    from depthlab.config import TrainConfig
    from depthlab.training.runtime import Runtime

    assert TrainConfig().compile_mode == "auto"
    with pytest.raises(DepthlabError, match="train.compile_mode must be one of auto, default, reduce-overhead"):
        TrainConfig(compile_mode="fast")
    for mode, device, world, want in (("auto", "cuda", 1, "reduce-overhead"), ("auto", "cpu", 1, "default"),
                                      ("auto", "cuda", 2, "default"), ("default", "cuda", 1, "default"),
                                      ("max-autotune", "cpu", 1, "max-autotune")):
        rt = Runtime(TrainConfig(compile_mode=mode))
        rt.device, rt.world_size = torch.device(device), world  # the decision alone (no CUDA here)
        assert rt.compile_mode == want, (mode, device, world)


def test_a_compile_mode_that_does_nothing_says_so(tmp_path, tiny_text_file, monkeypatch):
    """A mode asked for with the model not compiled, or CUDA graphs on a CPU: one warning each, naming the knob."""
    from depthlab.trainer import Trainer

    logs = []
    Trainer(tiny_config(tmp_path / "a", tiny_text_file, train=dict(compile_mode="max-autotune", max_iters=2)),
            log=logs.append)
    assert [line for line in logs if "compile_mode" in line] == [
        "warning: train.compile_mode max-autotune has no effect: the model is not compiled (train.compile auto = "
        "on CUDA only; train.compile=True compiles it)"]  # a Python caller's Trainer: the API's words
    monkeypatch.setattr(torch, "compile", lambda model, **kw: model)  # the warning, not a 40-s compile
    logs.clear()
    Trainer(tiny_config(tmp_path / "b", tiny_text_file, train=dict(compile=True, compile_mode="reduce-overhead",
                                                                   max_iters=2)), log=logs.append)
    assert sum("reduce-overhead's CUDA graphs do nothing on cpu" in line for line in logs) == 1
    logs.clear()
    Trainer(tiny_config(tmp_path / "c", tiny_text_file, train=dict(max_iters=2)), log=logs.append)
    assert not [line for line in logs if "compile_mode" in line]  # auto says nothing


def test_compile_failure_falls_back_to_eager_with_one_warning(tmp_path, tiny_text_file, monkeypatch):
    from depthlab.trainer import Trainer

    def broken_compile(model, *a, **k):
        def fail(*args, **kwargs):
            raise RuntimeError("no C++ compiler found")
        return fail

    monkeypatch.setattr(torch, "compile", broken_compile)
    logs = []
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(compile=True, max_iters=5)), log=logs.append)
    assert t.model is t.raw_model
    assert sum("torch.compile unavailable" in line for line in logs) == 1
    t.fit()
    assert (tmp_path / "r" / "summary.json").exists()


@pytest.mark.slow
def test_compiled_training_matches_eager_and_warmup_leaves_the_trajectory(tmp_path, tiny_text_file):
    """torch.compile (static shapes, warm-up at the training shape) on CPU: eval losses equal eager's
    to 1e-4 nats (inductor fuses and reorders float ops) over 10 steps.

    One block, not tiny_config's two: every block is the same code, and a cold compile's time grows with the graph's
    kernels (each a C++ compile: 2 blocks took ~60 s on 2 busy cores, 1 block ~45 s)."""
    from conftest import evals

    for name, c in (("eager", False), ("compiled", True)):
        lines: list[str] = []
        t = Trainer(tiny_config(tmp_path / name, tiny_text_file, model=dict(n_layer=1),
                                train=dict(compile=c, max_iters=10, eval_interval=5)), log=lines.append)
        assert (t.model is not t.raw_model) == c
        # the compile's own time is said, apart from the run's clock
        assert any(ln.startswith("compiled the training step's forward and backward in") for ln in lines) == c
        assert any(ln.startswith("compiled the evaluation graph in") for ln in lines) == c
        t.fit()
    a, b = evals(tmp_path / "eager"), evals(tmp_path / "compiled")
    assert [s for s, *_ in a] == [s for s, *_ in b] == [0, 5, 10]
    for (_, ta, va), (_, tb, vb) in zip(a, b):
        assert abs(ta - tb) < 1e-4 and abs(va - vb) < 1e-4


def test_config_json_records_what_auto_resolved_to(tmp_path, tiny_text_file, capsys):
    out = tmp_path / "a"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=5, train__dtype="auto")]) == 0
    banner = capsys.readouterr().out
    c = json.loads((out / "config.json").read_text())
    assert c["train"]["dtype"] == "auto" and c["resolved"]["dtype"] in ("float32", "bfloat16")
    assert c["resolved"]["device"] == "cpu" and c["resolved"]["threads"] == 1
    assert f"device cpu, {c['resolved']['dtype']}, 1 thread," in banner
    assert main(["train", "--resume", str(out), "--train.max_iters", "8"]) == 0  # config.json reads back


def test_grad_accum_must_divide_world_size(monkeypatch, tmp_path, tiny_text_file):
    from depthlab.trainer import Trainer

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(DepthlabError, match=r"train.grad_accum \(3\).*processes \(2\)"):
        Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(grad_accum=3)), **QUIET)


def _args(path, out, batch, accum):
    return ["train", *tiny_cli_args(path, out, train__batch_size=batch, train__grad_accum=accum,
                                    train__eval_interval=10, train__log_interval=1, train__grad_log_interval=0,
                                    train__probe_interval=0, train__device="cpu", train__dtype="float32")]


def _losses(run):
    return [(r["step"], r.get("loss"), r.get("val_loss")) for r in map(json.loads, open(run / "metrics.jsonl"))
            if "loss" in r or "val_loss" in r]


@pytest.mark.slow
def test_two_processes_match_one_process_with_double_batch(tmp_path, tiny_text_file):
    torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # one process: this one (one thread, as conftest sets and train.threads says), no interpreter of its own to start
    assert main(_args(tiny_text_file, tmp_path / "one", 8, 1)) == 0
    two = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", "-m", "depthlab",
                          *_args(tiny_text_file, tmp_path / "two", 4, 2)], capture_output=True, text=True, env=env)
    assert two.returncode == 0, two.stderr[-3000:]
    assert "processes 2" in two.stdout
    a, b = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert [x[0] for x in a] == [x[0] for x in b] and len(a) > 20
    for (s, la, va), (_, lb, vb) in zip(a, b):
        if la is not None:
            assert abs(la - lb) < 1e-4, (s, la, lb)
        if va is not None:
            assert abs(va - vb) < 1e-4, (s, va, vb)
    from depthlab.checkpoint import load_weights_file

    sd, _ = load_weights_file(tmp_path / "two" / "checkpoints" / "best.safetensors")
    assert not any(k.startswith("module.") for k in sd)
    # one process accumulating the same two micro-batches trains the same and evaluates the same windows (it read
    # batch_size x processes windows a batch, 4 against torchrun's 8, and reported other val losses)
    assert main(_args(tiny_text_file, tmp_path / "accum", 4, 2)) == 0
    for (s, la, va), (_, lb, vb) in zip(_losses(tmp_path / "accum"), b):
        assert la is None or abs(la - lb) < 1e-4, (s, la, lb)
        assert va is None or abs(va - vb) < 1e-4, (s, va, vb)


@pytest.mark.slow
def test_fit_to_time_does_not_charge_evaluations_the_compile_time(tmp_path, tiny_text_file, monkeypatch):
    # issue 23 case 8: a compiled model's first evaluation compiled the evaluation graph, and the plan
    # charged every evaluation that much; the training graph's backward compiled in step 0, on the clock.
    # A fake compile costs 30 s of the trainer's clock per new graph.
    import types

    import depthlab.trainer as tr

    now = [1000.0]

    def tick():
        now[0] += 0.01
        return now[0]

    monkeypatch.setattr(tr, "time", types.SimpleNamespace(time=tick))

    class Compiled(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self._orig_mod, self.graphs = model, set()

        def forward(self, *args, **kw):
            key = (self._orig_mod.training, torch.is_grad_enabled())
            out = self._orig_mod(*args, **kw)
            if key not in self.graphs:
                self.graphs.add(key)
                now[0] += 30.0  # compiling this graph
            if torch.is_grad_enabled() and "backward" not in self.graphs:  # its backward: at the first backward
                out[1].register_hook(self._backward_compiles)
            return out

        def _backward_compiles(self, grad):
            if "backward" not in self.graphs:
                self.graphs.add("backward")
                now[0] += 30.0

    def fake_compile(model, *a, **k):
        return Compiled(model)

    monkeypatch.setattr(torch, "compile", fake_compile)
    cfg = tiny_config(tmp_path / "c", tiny_text_file, train=dict(compile=True, max_iters=100_000, max_time=6.0,
                                                                 eval_interval=50, final_validation=False))
    t = Trainer(cfg, **QUIET)
    t.fit()
    plan = t.budget.plan
    assert plan is not None and plan.s_per_eval < 1.0  # the evaluations' own cost, not a compile's 30 s
    assert t.step == plan.max_iters  # the backward's compile did not eat the budget either
    assert plan.max_iters > 100  # 6 s of 10 ms readings: hundreds of steps, not the handful 30 s/eval leaves


def test_subnormals_are_flushed_only_while_training(tmp_path, tiny_text_file):
    """train.flush_denormal is process state: a Trainer that is made (or has trained) leaves it as it was."""
    from conftest import OnStep

    probe = OnStep(lambda: torch.tensor([1e-40]).item())  # a subnormal float32 reads 0 while flushed
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=2)), callbacks=[probe], **QUIET)
    assert torch.tensor([1e-40]).item() != 0.0  # made, not training: untouched
    t.fit()
    assert probe.seen and all(v == 0.0 for v in probe.seen)
    assert torch.tensor([1e-40]).item() != 0.0


def test_a_context_no_batch_size_fits_is_refused_first_in_one_line_naming_block_size(tmp_path, capsys):
    """A new user's pass: --model.block_size 500000 on the embedded corpus printed the validation split's warning
    (enlarged to 500001 tokens: advice that could not help) and then the memory error advising a smaller batch,
    which no batch size could satisfy. Now the one line comes first and says what does help."""
    import dataclasses

    out = tmp_path / "huge"
    rc = main(["train", "--model.n_layer", "1", "--model.n_embd", "32", "--model.n_head", "2", "--model.block_size",
               "500000", "--train.max_iters", "2", "--train.out_dir", str(out)])
    err = capsys.readouterr().err
    cfg = RunConfig.from_dict({"model": dict(n_layer=1, n_embd=32, n_head=2, block_size=500000)})
    one = training_memory_bytes(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, batch_size=1)), 65)
    assert rc == 2 and len(err.splitlines()) == 1 and "validation split" not in err, err
    assert err.startswith("depthlab: error: a training step with train.batch_size 16, model.block_size 500000, "
                          f"model.n_embd 32, model.n_layer 1 needs about {training_memory_bytes(cfg, 65) / 2**30:,.0f} "
                          "GiB, more than this machine's ")
    assert err.endswith(f"; even train.batch_size 1 needs about {one / 2**30:,.0f} GiB: lower model.block_size\n")
    assert not out.exists()


@pytest.mark.parametrize("threads, raw, world, given", [
    (3, "2", 1, (3, "train.threads")), (3, "2", 2, (3, "train.threads")),  # train.threads wins, and names itself
    (0, "2", 1, (2, "OMP_NUM_THREADS")), (0, "abc", 1, (0, "")), (0, None, 1, (0, "")),
    (0, "1", 2, (0, "")),  # torchrun set OMP_NUM_THREADS=1 for its processes: not the user's count
])
def test_the_thread_count_the_user_gave_has_one_home(monkeypatch, threads, raw, world, given):
    """runtime.given_threads is the rule; the Runtime asks it with its processes, autotune (one process only: it
    keeps the rules with several) asks it too, so the two cannot drift apart."""
    from depthlab.config import TrainConfig
    from depthlab.training import autotune, runtime

    if raw is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", raw)
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setenv("RANK", "0")
    train = TrainConfig(threads=threads, device="cpu")
    assert runtime.given_threads(train, world) == given
    rt = object.__new__(runtime.Runtime)  # no thread setting or process group: only the rule under test
    rt.train, rt.world_size = train, world
    assert rt.given_threads() == given
    if world == 1:
        assert autotune.given_threads(train) == given[0]
    monkeypatch.setattr(runtime, "given_threads", lambda t, world_size=1: (7, "train.threads"))
    assert autotune.given_threads(train) == 7 and rt.given_threads() == (7, "train.threads")
