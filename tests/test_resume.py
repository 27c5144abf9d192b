"""Resume, every way in: it continues exactly where an uninterrupted run would be, honours or refuses
every changed setting and says which, and survives processes killed at any moment (issue 10)."""

import copy
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from depthlab import checkpoint as ckpt, data as D, train
from depthlab.budget import FIT_STEPS
from depthlab.callbacks import Callback
from depthlab.checkpoint import latest_checkpoint, payload_sha256
from depthlab.cli import main
from depthlab.config import RunConfig
from depthlab.resume_config import RESUME_NOTED, RESUME_SCHEDULE, RESUME_SILENT, resume_changes
from depthlab.errors import DepthlabError
from depthlab.rundir import RunDir
from depthlab.sample import load_run, sample_text
from depthlab.trainer import Interrupted, REFIT_STEPS, Trainer, train as bare_train

from conftest import (OLD_EVALS, QUIET, TINY_TEXT, assert_clean_error, bpe_run_config, dropout_cli_args, evals,
                      fit_resume, fit_run, run_cli, tiny_cli_args, tiny_config, weights_hash)


# --------------------------------------------------------------------------------------------------------- exactness
@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
@pytest.mark.parametrize("accum", [1, 3])
def test_resume_continues_identical_trajectory(tmp_path, tiny_text_file, accum):
    kw = dict(model=dict(dropout=0.1), train=dict(max_iters=40, lr_decay_iters=40, grad_accum=accum))
    full = train(tiny_config(tmp_path / "full", tiny_text_file, **kw), **QUIET)
    half = tiny_config(tmp_path / "half", tiny_text_file, **kw)
    half.train.max_iters = 20
    train(half, **QUIET)
    again = tiny_config(tmp_path / "half", tiny_text_file, **kw)
    again.train.resume = True
    train(again, **QUIET)
    assert evals(full) == evals(tmp_path / "half")
    last = "step-000040.safetensors"
    assert weights_hash(full, last) == weights_hash(tmp_path / "half", last)
    def trajectory(run):  # train/eval records; each session's end adds its own loss-by-position event
        return [(r["kind"], r["step"]) for r in map(json.loads, open(run / "metrics.jsonl"))
                if r["kind"] in ("train", "eval")]

    assert trajectory(tmp_path / "half") == trajectory(full)


def _intact_manifest(out) -> dict:
    """The manifest, after checking (with hashlib here, not the package) that every step checkpoint
    it names is whole. (``best`` is not checked here: see test_kill_before_manifest_keeps_best_verifiable.)"""
    import hashlib

    ckdir = out / "checkpoints"
    manifest = json.loads((ckdir / "manifest.json").read_text())  # never half-written: it parses
    for entry in manifest["checkpoints"]:
        for f, digest in entry["files"].items():
            assert (ckdir / f).exists(), f"manifest names {f}, which is missing"
            assert hashlib.sha256((ckdir / f).read_bytes()).hexdigest() == digest, f"{f} does not match"
    steps = [c["step"] for c in manifest["checkpoints"]]
    assert steps == sorted(steps) and len(steps) == len(set(steps))
    return manifest


@pytest.mark.slow
@pytest.mark.parametrize("accum", ["1", "2"])
def test_sigkill_then_resume_is_bit_exact(tmp_path, tiny_text_file, accum, forker):
    n = 150  # long enough that B is still running 0.3 s after its step-10 checkpoint on a fast CPU (~1 s left)
    args_a = dropout_cli_args(tiny_text_file, tmp_path / "A", n) + ["--train.grad_accum", accum]
    # A, the uninterrupted run, trains alongside B: on a 2-core machine it then costs no wall time of its own
    # (each is one thread; a slower B only lives longer after its step-10 checkpoint). Every process is forked from
    # the forker's interpreter (the forker fixture kills A if B's part fails)
    a = forker.start(tmp_path / "A.log", "train", *args_a)
    _sigkill_and_resume(tmp_path, tiny_text_file, accum, n, forker)
    rc = forker.wait(a)
    assert rc == 0, (tmp_path / "A.log").read_text()[-2000:]
    assert evals(tmp_path / "A") == evals(tmp_path / "B")
    name = f"step-{n:06d}.safetensors"
    assert ckpt.payload_sha256(tmp_path / "A" / "checkpoints" / name) == \
        ckpt.payload_sha256(tmp_path / "B" / "checkpoints" / name)
    steps = [json.loads(l)["step"] for l in open(tmp_path / "B" / "metrics.jsonl")]
    assert len(steps) == len([json.loads(l)["step"] for l in open(tmp_path / "A" / "metrics.jsonl")])


def _sigkill_and_resume(tmp_path, tiny_text_file, accum: str, n: int, forker) -> None:
    """Run B, SIGKILL it at a random moment after its step-10 checkpoint, then ``--resume`` it to the end."""
    args_b = dropout_cli_args(tiny_text_file, tmp_path / "B", n) + ["--train.grad_accum", accum]
    p = forker.start(tmp_path / "B.log", "train", *args_b)
    manifest = tmp_path / "B" / "checkpoints" / "manifest.json"
    deadline = time.time() + 60
    while time.time() < deadline and not (manifest.exists() and '"step": 10' in manifest.read_text()):
        time.sleep(0.05)
    time.sleep(random.uniform(0.0, 0.3))
    assert forker.kill(p) == -signal.SIGKILL, "B finished before the kill: make it longer"
    assert not (tmp_path / "B" / "summary.json").exists(), "B finished before the kill: make it longer"
    r = forker.start(tmp_path / "resume.log", "train", "--resume", str(tmp_path / "B"))
    assert forker.wait(r) == 0, (tmp_path / "resume.log").read_text()[-2000:]


#: Processes killed in a row, each at a seeded random moment while it writes a checkpoint every step. Each was a fresh
#: interpreter's torch import (~3 s on a slow 2-core CPU) until they were forked from one (:class:`TrainForker`):
#: 20 took 98 s of the slow tier, 12 took 60-68 s, 9 kept the whole suite inside 15 min on the slowest host seen.
KILLS = 9

#: The program of :class:`TrainForker`: it imports what ``depthlab train`` imports, then, for each request on stdin
#: (one JSON line), forks a training process (``{"args", "log"}``: it answers the child's pid) or reaps one
#: (``{"wait": pid}``: it answers its exit status, negative for a signal).
_FORKER = r"""
import json, os, sys

# what a training process spends its first seconds importing, once here (torch._dynamo: its optimizer's
# step is wrapped to keep dynamo out; jsonargparse: the command line)
import jsonargparse, torch, torch._dynamo
import depthlab.analytics, depthlab.cli, depthlab.trainer

for line in iter(sys.stdin.readline, ""):
    req = json.loads(line)
    if "wait" in req:
        print(os.waitstatus_to_exitcode(os.waitpid(req["wait"], 0)[1]), flush=True)
        continue
    pid = os.fork()
    if pid:
        print(pid, flush=True)
        continue
    # the child: `depthlab ARGS` as its own process, in the environment of the test that asked (as a subprocess
    # started there would have), its output (unbuffered: PYTHONUNBUFFERED=1) into the log
    os.environ.clear()
    os.environ.update(req["env"])
    fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.argv = ["depthlab", *req["args"]]
    sys.exit(depthlab.cli.main())  # as `python -m depthlab ARGS`: its own command line, exit status, atexit
"""


class TrainForker:
    """Training processes forked from one interpreter that has imported torch and depthlab already.

    Each is a process of its own, SIGKILLed and reaped as one started by ``python -m depthlab train`` would be,
    without its interpreter's start-up (~3 s of imports on a slow 2-core CPU, most of such a test's time).
    torch is imported in the parent before ``depthlab.cli.main`` runs, so the child keeps torch's default
    OpenMP wait policy (as a Python caller does) instead of the one the command picks before it imports torch:
    the runs here have one thread, and the policy changes how idle threads wait, never a result.
    """

    def __init__(self):
        # unbuffered, as the killed processes were started: the log of a killed one is complete up to the kill
        self.proc = subprocess.Popen([sys.executable, "-c", _FORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.live: set = set()

    def _ask(self, req: dict) -> int:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer, f"the forking process died (exit {self.proc.wait()})"
        return int(answer)

    def start(self, log: Path, *args) -> int:
        """Fork ``depthlab ARGS`` in this process's environment now, its stdout and stderr into ``log``: its pid."""
        pid = self._ask({"args": [str(a) for a in args], "log": str(log),
                         "env": dict(os.environ, PYTHONUNBUFFERED="1")})
        self.live.add(pid)
        return pid

    def running(self, pid: int) -> bool:
        """Whether ``pid`` has not exited (an exited child stays a zombie until :meth:`wait` reaps it)."""
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    def wait(self, pid: int) -> int:
        """Reap ``pid``: its exit status (-9 after SIGKILL)."""
        self.live.discard(pid)
        return self._ask({"wait": pid})

    def kill(self, pid: int) -> int:
        os.kill(pid, signal.SIGKILL)
        return self.wait(pid)

    def kill_live(self) -> None:
        for pid in list(self.live):  # a test that failed half-way leaves no training process behind
            self.kill(pid)

    def close(self) -> None:
        self.kill_live()
        self.proc.kill()  # it holds nothing but imported modules
        self.proc.wait()


@pytest.fixture(scope="module")
def _forker_process():
    """One forking interpreter for the module's tests (its imports, ~3 s on 2 cores, once)."""
    f = TrainForker()
    try:
        yield f
    finally:
        f.close()


@pytest.fixture
def forker(_forker_process):
    """The module's :class:`TrainForker`; the processes a test started and did not reap are killed after it."""
    try:
        yield _forker_process
    finally:
        _forker_process.kill_live()


@pytest.mark.slow
def test_kills_during_checkpoint_writes_always_resume(tmp_path, tiny_text_file, forker):
    """A checkpoint every step, SIGKILL at random moments: after every kill each file the manifest
    names is intact, the next process resumes from the manifest's newest checkpoint, and the run
    then ends with exactly the weights and evaluations of a run that was never interrupted."""
    out = tmp_path / "R"
    # a checkpoint every step, so kills land in writes; the LR schedule fixed, so max_iters only says when to stop
    args = dropout_cli_args(tiny_text_file, out, 100000, train__eval_interval=1, train__lr_decay_iters=2000)
    rng = random.Random(0)
    newest = None  # step of the manifest's newest checkpoint after the last kill
    for i in range(KILLS):
        log = tmp_path / f"log-{i}.txt"
        p = forker.start(log, "train", *(args if newest is None else ["--resume", str(out)]))
        deadline = time.time() + 60
        while time.time() < deadline:  # wait until this process has written a checkpoint of its own
            try:
                if json.loads((out / "checkpoints" / "manifest.json").read_text())["checkpoints"][-1]["step"] \
                        > (newest if newest is not None else -1):
                    break
            except (OSError, ValueError, KeyError, IndexError):
                pass
            if not forker.running(p):
                pytest.fail(f"run {i} exited early: {log.read_text()[-500:]}")
            time.sleep(0.02)
        else:
            pytest.fail(f"run {i} wrote no checkpoint in 60 s: {log.read_text()[-500:]}")
        time.sleep(rng.uniform(0.0, 0.2))
        assert forker.kill(p) == -signal.SIGKILL  # it was still running: killed, not ended
        if newest is not None:
            assert f"resuming {out} from step {newest} " in log.read_text(), log.read_text()[:500]
        manifest = _intact_manifest(out)
        assert newest is None or manifest["checkpoints"][-1]["step"] > newest  # progress is never lost
        newest = manifest["checkpoints"][-1]["step"]
        assert ckpt.latest_checkpoint(out)["step"] == newest
        assert not (out / "summary.json").exists()

    n = newest + 3
    args[args.index("--train.max_iters") + 1] = str(n)
    args[args.index("--train.out_dir") + 1] = str(tmp_path / "A")
    # the same run, never interrupted, alongside the last resume: on a 2-core machine it costs no wall time
    a = forker.start(tmp_path / "A.log", "train", *args)
    r = forker.start(tmp_path / "R.log", "train", "--resume", str(out), "--train.max_iters", str(n))
    r_rc, a_rc = forker.wait(r), forker.wait(a)
    r_log = (tmp_path / "R.log").read_text()
    assert r_rc == 0 and f"resuming {out} from step {newest} " in r_log, r_log[-500:]
    assert a_rc == 0, (tmp_path / "A.log").read_text()[-500:]
    assert json.loads((out / "summary.json").read_text())["final_step"] == n
    assert evals(out) == evals(tmp_path / "A") and [e[0] for e in evals(out)] == list(range(n + 1))
    name = f"step-{n:06d}.safetensors"
    assert ckpt.payload_sha256(out / "checkpoints" / name) == ckpt.payload_sha256(tmp_path / "A" / "checkpoints" / name)


EVAL = 5


DECAY = 60


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs."""


class KillAfter(Callback):
    def __init__(self, steps: int):
        self.left = steps

    def on_step_end(self, run, info):
        self.left -= 1
        if self.left == 0:
            raise Killed()


def _cfg(out, text, max_iters, resume):
    return tiny_config(out, text, model=dict(n_layer=1, n_embd=16, block_size=8),
                       train=dict(max_iters=max_iters, eval_interval=EVAL, eval_iters=1, lr_decay_iters=DECAY,
                                  warmup_iters=3, keep_last=1, resume=resume, batch_size=4))


def _evals(run):
    lines = (Path(run) / "metrics.jsonl").read_text().splitlines()
    return [(r["step"], r["train_loss"], r["val_loss"], r["tokens_seen"]) for r in map(json.loads, lines)
            if r.get("kind") == "eval"]


def _final_weights(run):
    entry = latest_checkpoint(run)
    return payload_sha256(Path(run) / "checkpoints" / f"{entry['name']}.safetensors"), entry["step"]


class ResumeMachine(RuleBasedStateMachine):
    """Stateful property test: random kills, resumes and extensions end where one run ends.

    Any sequence of "train until killed after k steps", "extend max_iters" and "resume" must finish
    with the same weights and the same evaluation lines as one uninterrupted run to the final
    ``max_iters``. The kill is an exception raised from a callback between steps (the process dies
    with whatever was on disk then); kills *during* a checkpoint write are covered by
    test_kills_during_checkpoint_writes_always_resume. The schedule's decay length is fixed
    (``lr_decay_iters``) so that extending ``max_iters`` does not change the learning rate of steps
    already planned, and ``max_iters`` stays a multiple of ``eval_interval`` so that both runs
    evaluate at the same steps.
    """

    @initialize(first=st.integers(1, 4))
    def start(self, first):
        self.tmp = Path(tempfile.mkdtemp(prefix="depthlab-stateful-"))
        self.text = self.tmp / "t.txt"
        self.text.write_text(TINY_TEXT)
        self.run = self.tmp / "run"
        self.max_iters = first * EVAL
        self.started = False

    def _train(self, callbacks):
        t = Trainer(_cfg(self.run, self.text, self.max_iters, resume=self.started), callbacks=callbacks, **QUIET)
        self.started = True
        try:
            t.fit()
        except Killed:
            pass
        finally:
            t.metrics.close()

    @rule(k=st.integers(1, 12))
    def train_until_killed(self, k):
        self._train([KillAfter(k)])

    @precondition(lambda self: self.max_iters + EVAL <= DECAY)
    @rule(more=st.integers(1, 3))
    def extend(self, more):
        self.max_iters += more * EVAL

    def teardown(self):
        """Resume to the end, then compare with one uninterrupted run."""
        try:
            if hasattr(self, "run"):
                self._train([])
                ref = self.tmp / "ref"
                Trainer(_cfg(ref, self.text, self.max_iters, resume=False), **QUIET).fit()
                assert _final_weights(self.run) == _final_weights(ref)
                assert _evals(self.run) == _evals(ref)
        finally:
            if hasattr(self, "tmp"):
                shutil.rmtree(self.tmp, ignore_errors=True)


_COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@pytest.fixture
def no_fsync(monkeypatch):
    """``os.fsync`` a no-op. The machine's kills are exceptions in this process, not a crash of the computer, so
    what fsync makes durable is never what it reads back (test_kills_during_checkpoint_writes_always_resume kills
    real processes, with fsync); its ~2,000 fsyncs were a third of test_resume_sequences_many's time."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.mark.slow
@pytest.mark.usefixtures("no_fsync")
def test_resume_sequences_fast():
    ResumeMachine.TestCase.settings = settings(max_examples=3, stateful_step_count=4, **_COMMON)
    ResumeMachine.TestCase().runTest()


@pytest.mark.slow
@pytest.mark.usefixtures("no_fsync")
def test_resume_sequences_many():
    ResumeMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=8, **_COMMON)
    ResumeMachine.TestCase().runTest()


# ------------------------------------------------------------------------ changed settings: refused, noted or silent
def _snapshot(run):
    """Every file under ``run`` with its bytes: a resume that must change nothing keeps this equal."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.fixture
def run20(tmp_path, tiny_text_file):
    out = tmp_path / "r"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=20, train__eval_interval=10,
                              data__val_fraction=0.1)]) == 0
    return out


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
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
    assert rc == 2 and "--overwrite and a resume (--resume, or train.resume true) contradict each other" in err \
        and err.count("\n") == 1
    assert _snapshot(run20) == before


@pytest.mark.parametrize("section,key,value", [("model", "activation", "relu"), ("train", "seed", 7),
                                               ("data", "tokenizer", "bpe")])
def test_a_config_json_edited_by_hand_is_refused_against_the_checkpoints_config(run20, capsys, section, key, value):
    cfg = json.loads((run20 / "config.json").read_text())
    was = cfg[section][key]
    cfg[section][key] = value
    (run20 / "config.json").write_text(json.dumps(cfg))
    before = _snapshot(run20)
    rc = main(["train", "--resume", str(run20), "--train.max_iters", "30"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"cannot resume {run20}: its config.json differs from the checkpoint step-000020 (the config its weights " \
        f"were trained with): {section}.{key} {was!r} -> {value!r} (checkpoint -> config.json); edited by hand? put " \
        "the checkpoint's values back in config.json" in err
    assert _snapshot(run20) == before


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_config_json_edited_into_an_invalid_value_names_config_json_on_resume(run20, capsys):
    """model.n_head 3 against n_embd 32: the train-time hint ("try n_head ...") would not resume the run; the
    line says --resume read it from config.json and what puts it right."""
    cfg = json.loads((run20 / "config.json").read_text())
    cfg["model"]["n_head"] = 3
    (run20 / "config.json").write_text(json.dumps(cfg))
    before = _snapshot(run20)
    rc = main(["train", "--resume", str(run20), "--train.max_iters", "30"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "must be divisible by model.n_head (3)" in err, err
    assert f"(--resume reads {run20 / 'config.json'}, which differs from the checkpoint step-000020 (the config its " \
           "weights were trained with): model.n_head 2 -> 3 (checkpoint -> config.json): put the checkpoint's values " \
           "back)" in err
    assert _snapshot(run20) == before
    rc = main(["train", "--model.n_head", "3", "--train.out_dir", str(run20.parent / "new")])
    assert rc == 2 and "--resume reads" not in capsys.readouterr().err  # not a resume: the plain line


def test_an_invalid_flag_on_resume_is_not_blamed_on_config_json(run20, capsys):
    """config.json is valid and --model.n_head 3 is the bad value: the line said "if that value was edited there
    by hand, put back the one the run was trained with", untrue of a flag."""
    before = _snapshot(run20)
    rc = main(["train", "--resume", str(run20), "--model.n_head", "3"])
    err = capsys.readouterr().err
    assert rc == 2 and err == "depthlab: error: model.n_embd (32) must be divisible by --model.n_head (3); try " \
        f"n_head 2 (model.n_embd from {run20 / 'config.json'})\n", err
    assert _snapshot(run20) == before


def test_a_noted_field_edited_in_config_json_is_announced_like_a_command_line_change(run20, capsys):
    """model.dropout edited by hand in config.json: the resume uses it, so it says so, as for --model.dropout."""
    cfg = json.loads((run20 / "config.json").read_text())
    cfg["model"]["dropout"] = 0.1
    (run20 / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    assert main(["train", "--resume", str(run20), "--train.max_iters", "30"]) == 0
    cap = capsys.readouterr()
    assert "depthlab: resume: model.dropout 0.0 -> 0.1 (in config.json, not the checkpoint step-000020: edited by " \
           "hand, or left by a session that stopped before its first checkpoint): the regularisation changes from " \
           "the next step\n" in cap.err
    saved = json.loads(ckpt.read_metadata(run20 / "checkpoints" / "step-000030.safetensors")["config"])
    assert saved["model"]["dropout"] == 0.1  # the line is true: the resumed steps trained with it
    assert main(["train", "--resume", str(run20), "--train.max_iters", "40"]) == 0
    cap = capsys.readouterr()
    assert "model.dropout" not in cap.out + cap.err  # the newer checkpoint holds 0.1: nothing changed since


def test_changed_optimiser_setting_is_allowed_with_a_line_and_recorded(run20, capsys):
    capsys.readouterr()
    assert main(["train", "--resume", str(run20), "--train.max_iters", "30", "--train.learning_rate", "0.001"]) == 0
    cap = capsys.readouterr()  # a notice: on stderr (README: results on stdout, warnings and notices on stderr)
    assert "depthlab: resume: train.learning_rate 0.003 -> 0.001" in cap.err and "resume: " not in cap.out
    cfg = json.loads((run20 / "config.json").read_text())
    assert cfg["train"]["learning_rate"] == 0.001 and cfg["train"]["max_iters"] == 30


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_resume_applies_a_changed_weight_decay_and_betas(tmp_path, tiny_text_file, optimizer):
    base = dict(max_iters=10, eval_interval=10, weight_decay=0.1, optimizer=optimizer)
    bare_train(tiny_config(tmp_path / "r", tiny_text_file, train=base), **QUIET)
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file,
                            train=dict(base, max_iters=20, weight_decay=0.0, beta2=0.95, resume=True)), **QUIET)
    groups = t.optimizer.param_groups
    assert all(g["weight_decay"] == 0.0 for g in groups)  # was 0.1 in the checkpoint's state
    assert {tuple(g["betas"]) for g in groups if "betas" in g} == {(0.9, 0.95)}
    assert any(g.get("muon") for g in groups) == (optimizer == "muon")
    t.fit()
    st = torch.load(tmp_path / "r" / "checkpoints" / "step-000020.state.pt", weights_only=True)["optimizer"]
    saved = st["param_groups"] if "param_groups" in st else [g for v in st.values() for g in v["param_groups"]]
    assert max(g["weight_decay"] for g in saved) == 0.0 and {g["betas"][1] for g in saved if "betas" in g} == {0.95}


def test_extending_max_iters_is_silent(run20, capsys):
    capsys.readouterr()
    assert main(["train", "--resume", str(run20), "--train.max_iters", "30"]) == 0
    err = capsys.readouterr().err
    assert "resume: train." not in err and json.loads((run20 / "summary.json").read_text())["final_step"] == 30
    assert "depthlab: resume: the learning rate continues from" in err  # extended without a jump, and says so


def test_every_config_field_is_classified_and_unknown_fields_are_refused():
    fields = {f"{s}.{k}" for s, sec in RunConfig().to_dict().items() for k in sec}
    assert set(RESUME_NOTED) <= fields and RESUME_SILENT <= fields and RESUME_SCHEDULE <= fields
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
    with pytest.raises(DepthlabError,
                       match="corpus .* changed since training, or config.json.s data.path was edited to another file"):
        Trainer(tiny_config(run, tiny_text_file, train=dict(resume=True, max_iters=20)), **QUIET)


def test_resume_rejects_other_vocabulary_and_shape(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=10)), **QUIET)
    other = tmp_path / "other.txt"
    other.write_text(TINY_TEXT + "Zebra ☕ quux\n")
    cfg = tiny_config(run, other, train=dict(resume=True, max_iters=20))
    with pytest.raises(DepthlabError) as e:
        train(cfg, **QUIET)
    assert "vocabulary" in str(e.value) and "Z" in str(e.value) and "☕" in str(e.value)
    cfg = tiny_config(run, tiny_text_file, model=dict(n_layer=3), train=dict(resume=True, max_iters=20))
    with pytest.raises(DepthlabError, match="model.n_layer 2 -> 3") as e:
        train(cfg, **QUIET)
    # nu43: "--init-from to reuse its weights" was said of a new shape, which --init-from then refuses
    # nu51: a new shape is a new model, trained from scratch (nu51's tests follow the advice)
    assert str(e.value).endswith("train the changed model as a new run from scratch (model.n_layer changes the number "
                                 "or shape of the model's weights, so init_from cannot reuse the run's): depthlab "
                                 f"train -c {run / 'config.json'} --model.n_layer 3 --train.max_iters 20 "
                                 "--train.resume false --train.out_dir NEW_DIR")  # the other value asked goes along
    cfg = tiny_config(run, tiny_text_file, train=dict(resume=True, max_iters=20, seed=7))
    with pytest.raises(DepthlabError, match="train.seed") as e:
        train(cfg, **QUIET)
    assert str(e.value).endswith("start a new run from its weights (the optimizer state, step count and schedule "
                                 f"start fresh): depthlab train -c {run / 'config.json'} --init-from {run} "
                                 "--train.seed 7 --train.max_iters 20 --train.resume false --train.out_dir NEW_DIR")


def test_resume_with_another_tokenizer_names_both(tmp_path, bpe_file):
    run = bare_train(tiny_config(tmp_path / "r", bpe_file, model=dict(block_size=64), train=dict(max_iters=5)), **QUIET)
    cfg = bpe_run_config(tmp_path, bpe_file, max_iters=10, resume=True, out_dir=str(run))
    with pytest.raises(DepthlabError) as e:
        bare_train(cfg, **QUIET)
    assert "data.tokenizer 'char' -> 'bpe'" in str(e.value) and "data.vocab_size None -> 300" in str(e.value)


def test_split_is_recorded_and_resume_refuses_to_change_it(tmp_path, names_files):
    sorted_f = names_files[0]
    cfg = tiny_config(tmp_path / "r", sorted_f, train=dict(max_iters=5))
    cfg.data.split = "lines"
    run = bare_train(cfg, **QUIET)
    assert '"split": "lines"' in (run / "config.json").read_text()
    again = tiny_config(run, sorted_f, train=dict(max_iters=10, resume=True))
    with pytest.raises(DepthlabError, match="data.split 'lines' -> 'tail'"):
        bare_train(again, **QUIET)


def test_trainer_runs_muon_on_its_schedule_and_refuses_to_resume_with_another_optimizer(tmp_path, tiny_text_file,
                                                                                        capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short run path: the one-line error keeps the whole message
    out = tmp_path / "m"
    args = tiny_cli_args(tiny_text_file, out, train__optimizer="muon", train__muon_lr=0.02,
                         train__learning_rate=0.004, train__max_iters=30, train__log_interval=5)
    assert main(["train", *args]) == 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r.get("kind") == "train"]
    assert train[-1]["loss"] < train[0]["loss"]
    state = torch.load(sorted((out / "checkpoints").glob("step-*.state.pt"))[-1], weights_only=True)
    lrs = {g.get("muon", False): g["lr"] for g in state["optimizer"]["muon"]["param_groups"]
           + state["optimizer"]["adamw"]["param_groups"]}
    assert lrs[True] == pytest.approx(lrs[False] * 0.02 / 0.004)  # one schedule, Muon's scaled to its peak
    capsys.readouterr()
    assert main(["train", "--resume", "m", "--train.max_iters", "40", "--train.optimizer", "adamw"]) == 2
    assert "changed train.optimizer 'muon' -> 'adamw'" in capsys.readouterr().err


@pytest.mark.slow  # about a second: the fast tier stays under 3 min
def test_auto_and_what_it_resolved_to_are_the_same_optimizer_on_resume(tmp_path, tiny_text_file, capsys,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *tiny_cli_args(tiny_text_file, "a", train__max_iters=10)]) == 0  # auto: muon on CPU
    assert json.loads((tmp_path / "a" / "config.json").read_text())["resolved"]["optimizer"] == "muon"
    assert main(["train", "--resume", "a", "--train.max_iters", "15", "--train.optimizer", "muon"]) == 0
    assert main(["train", "--resume", "a", "--train.max_iters", "20", "--train.optimizer", "auto"]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", "a", "--train.max_iters", "25", "--train.optimizer", "adamw"]) == 2
    assert "changed train.optimizer" in capsys.readouterr().err


@pytest.mark.slow  # about a second per case: the fast tier stays under 3 min
@pytest.mark.parametrize("edit", ["deleted", "edited"])
def test_a_lost_resolved_optimizer_names_the_checkpoints_and_the_fix_works(tmp_path, tiny_text_file, capsys,
                                                                             monkeypatch, edit):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *tiny_cli_args(tiny_text_file, "a", train__max_iters=10)]) == 0  # auto: muon on CPU
    cfg_file = tmp_path / "a" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    if edit == "deleted":
        del cfg["resolved"]
    else:
        cfg["resolved"]["optimizer"] = "adamw"
    cfg_file.write_text(json.dumps(cfg))
    capsys.readouterr()
    assert main(["train", "--resume", "a", "--train.max_iters", "15"]) == 2
    err = capsys.readouterr().err
    why = "is missing (deleted?)" if edit == "deleted" else "says 'adamw' (edited by hand?)"
    assert "its checkpoint holds muon's optimizer state, not the adamw this resume would use" in err, err
    assert f"resolved.optimizer{',' if edit == 'deleted' else ''} " in err and why in err
    assert 'set "optimizer": "muon" in the "resolved" section of a/config.json' in err
    cfg.setdefault("resolved", {})["optimizer"] = "muon"  # what the line says to do
    cfg_file.write_text(json.dumps(cfg))
    assert main(["train", "--resume", "a", "--train.max_iters", "15"]) == 0
    assert json.loads(cfg_file.read_text())["resolved"]["optimizer"] == "muon"


def test_resume_with_more_steps_updates_config_json(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=10)), **QUIET)
    train(tiny_config(run, tiny_text_file, train=dict(resume=True, max_iters=20)), **QUIET)
    assert json.loads((run / "config.json").read_text())["train"]["max_iters"] == 20
    assert json.loads((run / "summary.json").read_text())["final_step"] == 20


# ------------------------------------------------------------------------------- the schedule and the plan on resume
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
    # a new peak with the longer run: the same shape, scaled to it ("continues ... scaled to the new peak");
    # it was the old peak's rate, while the resume line said the new peak applied (a new user's pass)
    t = Trainer(tiny_config(tmp_path / "m2", tiny_text_file, train=cfg), callbacks=[_StopAfter(10)], **QUIET)
    with pytest.raises(Interrupted):
        t.fit()
    lines = []
    r2 = Trainer(tiny_config(tmp_path / "m2", tiny_text_file, train=dict(cfg, max_iters=60, learning_rate=1e-2,
                                                                          resume=True)), log=lines.append)
    assert abs(r2.lr_at(10) - get_lr(10, 1e-2, 1e-4, 2, 20)) < 1e-12 and r2.lr_at(60) == 1e-4
    said = [x for x in lines if "learning" in x]
    assert len(said) == 1 and said[0].startswith("resume: train.learning_rate 0.003 -> 0.01: the learning rate "
                                                 f"continues from {r2.lr_at(10):.3g} at step 11 (the run's old "
                                                 f"settings: {get_lr(10, 3e-3, 1e-4, 2, 20):.3g})")
    assert ("and decays toward train.min_lr 0.0001, which it would first reach at step 61, after the run's last "
            "step 60 (the decay used to end at 20)") in said[0]
    # Muon follows the same schedule times muon_lr / learning_rate: a new AdamW peak moves it, and the line says so
    muon = r2.cfg.train.muon_lr
    assert said[0].endswith(f"; Muon's rate {get_lr(10, 3e-3, 1e-4, 2, 20) * muon / 3e-3:.3g} -> "
                            f"{r2.lr_at(10) * muon / 1e-2:.3g}")


def test_a_new_peak_does_not_raise_a_decay_that_has_ended(tmp_path, tiny_text_file):
    cfg = dict(max_iters=20, warmup_iters=2, learning_rate=3e-3, min_lr=1e-4)
    train(tiny_config(tmp_path / "r", tiny_text_file, train=cfg), **QUIET)
    shutil.copytree(tmp_path / "r", tmp_path / "r2")  # a resume reopens its run (summary.json goes): on a copy
    lines = []
    t = Trainer(tiny_config(tmp_path / "r2", tiny_text_file, train=dict(cfg, max_iters=30, learning_rate=1e-2,
                                                                         resume=True)), log=lines.append)
    assert t.lr_at(20) == t.lr_at(30) == 1e-4
    said = [x for x in lines if "learning" in x]  # one line, not also "scaled to the new peak" (a new user's pass)
    assert said == ["resume: train.learning_rate 0.003 -> 0.01: the learning rate stays at train.min_lr 0.0001 (the "
                    "decay ended at step 20; the new train.learning_rate 0.01 does not raise it); no jump back to the "
                    "peak; Muon's rate 0.000333 -> 0.0001"], lines  # Muon: min_lr x muon_lr / learning_rate
    lines.clear()  # a new peak on a run with nothing left to train: only that is said
    Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, learning_rate=1e-2, resume=True)),
            log=lines.append).fit()
    assert any(x.startswith("nothing to train") for x in lines) and not any("learning" in x for x in lines), lines
    lines.clear()  # a lower peak raises Muon's floor: said, with the knob that lowers it (a new user's pass)
    Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, max_iters=30, learning_rate=2e-3,
                                                                    resume=True)), log=lines.append)
    said = [x for x in lines if "learning" in x]
    assert said[-1].endswith("; Muon's rate 0.000333 -> 0.0005 (Muon's rate is the AdamW rate x train.muon_lr / "
                            "train.learning_rate, so a lower train.learning_rate raises it where the AdamW rate stays; "
                            "lower train.muon_lr to lower Muon's)"), said


def test_a_new_min_lr_on_an_ended_decay_says_the_rate_moves(tmp_path, tiny_text_file):
    """A new user's pass: --train.min_lr 0.001 on a finished run printed "stays at train.min_lr 0.001" while the
    rate went from 1.03e-4 to 1e-3; a new muon_lr on an AdamW run was announced as changing Muon's schedule."""
    cfg = dict(max_iters=20, warmup_iters=2, learning_rate=3e-3, min_lr=1e-4, optimizer="adamw")
    train(tiny_config(tmp_path / "r", tiny_text_file, train=cfg), **QUIET)
    shutil.copytree(tmp_path / "r", tmp_path / "same")
    lines = []
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, max_iters=30, min_lr=1e-3, muon_lr=0.05,
                                                                        resume=True)), log=lines.append)
    assert t.lr_at(20) == t.lr_at(30) == 1e-3
    said = [x for x in lines if x.startswith("resume:")]
    assert said == ["resume: train.muon_lr 0.01 -> 0.05 changes nothing: this run trains every parameter with AdamW "
                    "(train.optimizer)",
                    "resume: train.min_lr 0.0001 -> 0.001: the learning rate goes from 0.0001 to the new train.min_lr "
                    "0.001 (the decay ended at step 20); no jump back to the peak"], lines
    lines.clear()  # the same settings: nothing to say
    Trainer(tiny_config(tmp_path / "same", tiny_text_file, train=dict(cfg, max_iters=30, resume=True)),
            log=lines.append)
    said = [x for x in lines if x.startswith("resume:")]
    assert said == ["resume: the learning rate stays at train.min_lr 0.0001 (the decay ended at step 20); no jump back "
                    "to the peak"], lines


def test_an_extension_stopped_at_the_floor_says_when_the_decay_ended_not_the_extensions_end(tmp_path,
                                                                                          tiny_text_file):
    """A new user's pass: finished at 20, extended to 35 and stopped at 22, resumed with max_iters 25: the line
    said "the decay ended at step 35" at step 22; the rate has been at min_lr since step 20."""
    cfg = dict(max_iters=20, eval_interval=100, warmup_iters=2, learning_rate=3e-3, min_lr=1e-4)
    train(tiny_config(tmp_path / "r", tiny_text_file, train=cfg), **QUIET)
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, max_iters=35, resume=True)),
                callbacks=[_StopAfter(22)], **QUIET)
    with pytest.raises(Interrupted):
        t.fit()
    lines = []
    r = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, max_iters=25, resume=True)),
                log=lines.append)
    assert r.step == 22 and r.lr_at(22) == r.lr_at(25) == 1e-4
    assert [x for x in lines if x.startswith("resume:")] == [
        "resume: the learning rate stays at train.min_lr 0.0001 (the decay ended by step 20; the schedule's later end "
        "at step 35 kept it there); no jump back to the peak"], lines


@pytest.mark.slow
@pytest.mark.parametrize("fit_to_time", [True, False])
def test_the_config_given_is_unchanged_by_a_run_and_its_resume(tmp_path, tiny_text_file, fake_clock, fit_to_time):
    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=100_000, max_time=6.0, eval_interval=50,
                                                                 fit_to_time=fit_to_time, warmup_iters=50_000))
    asked = copy.deepcopy(cfg)
    t = Trainer(cfg, callbacks=[_StopAfter(FIT_STEPS + 30)], **QUIET)
    with pytest.raises(Interrupted):
        t.fit()
    assert cfg == asked and t.cfg.train.max_iters == 100_000 == t.cfg.train.warmup_iters * 2
    if fit_to_time:  # the plan is beside the config: a lower end and a shortened warmup
        assert FIT_STEPS < t.schedule.max_iters < 100_000 and t.schedule.warmup_iters < 50_000
    else:
        assert t.budget.plan is None and t.schedule.max_iters == 100_000
    again = RunConfig.from_dict(json.loads((tmp_path / "r" / "config.json").read_text()))
    assert again.train.max_iters == 100_000 and again.train.warmup_iters == 50_000  # config.json: as asked
    again.train.resume = True  # (building the resume config, before any run sees it)
    asked_again = copy.deepcopy(again)
    r = Trainer(again, **QUIET)
    assert (r.schedule.max_iters == t.schedule.max_iters) and r.step == FIT_STEPS + 30
    r.fit()
    assert again == asked_again and cfg == asked
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["stopped_by"] == "max_time"


@pytest.mark.slow
def test_resume_keeps_the_plan_and_does_not_fit_again(tmp_path, tiny_text_file, fake_clock, capsys):
    _, s, c = fit_run(tmp_path, tiny_text_file, "r")
    n = c["resolved"]["plan"]["max_iters"]
    c["resolved"]["threads"] += 1  # as if its first session had another: a session that trains would say so
    (tmp_path / "r" / "config.json").write_text(json.dumps(c))
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "r"), "--train.max_time", "999"]) == 0
    out = capsys.readouterr().err
    assert "resolved section" not in out, out  # nothing trains: no setting of this session to speak of
    # the plan's end is named, not max_iters (100,000 > n read as a contradiction)
    assert f"depthlab: nothing to train: the run is at step {n}, the end train.fit_to_time planned" in out
    assert f"--train.max_iters larger than {n} (a total) and other than 100000, the one that plan was made from" \
        in out and "is 100000" not in out  # 100000 itself keeps the plan: the line must not invite it
    c2 = json.loads((tmp_path / "r" / "config.json").read_text())
    assert c2 == c and c2["train"]["max_iters"] == 100_000 and c2["resolved"]["plan"]["max_iters"] == n < 100_000


@pytest.mark.slow
def test_resuming_a_planned_run_keeps_the_plan_and_its_record(tmp_path, tiny_text_file, fake_clock):
    from depthlab.trainer import Interrupted

    with pytest.raises(Interrupted):
        fit_run(tmp_path, tiny_text_file, "k", stop_at=FIT_STEPS + 30)
    c = json.loads((tmp_path / "k" / "config.json").read_text())
    n = c["resolved"]["plan"]["max_iters"]
    assert n < 100_000 == c["train"]["max_iters"]
    t, s, c2 = fit_resume(tmp_path, tiny_text_file, "k")
    assert c2["resolved"]["plan"] == c["resolved"]["plan"] and c2["train"] == {**c["train"], "resume": True}
    assert s["final_step"] == n and s["stopped_by"] == "max_time"


def read_metadata_of(run, name):
    from depthlab.checkpoint import read_metadata

    return read_metadata(Path(run) / "checkpoints" / f"{name}.safetensors")


@pytest.mark.slow
def test_a_plan_edited_by_hand_is_said_and_the_run_follows_its_checkpoints(tmp_path, tiny_text_file, fake_clock):
    from depthlab.trainer import Interrupted

    with pytest.raises(Interrupted):
        fit_run(tmp_path, tiny_text_file, "g", stop_at=FIT_STEPS + 30)
    c = json.loads((tmp_path / "g" / "config.json").read_text())
    planned = c["resolved"]["plan"]
    c["resolved"]["plan"] = {**planned, "max_iters": -5}
    (tmp_path / "g" / "config.json").write_text(json.dumps(c))
    lines = []
    cfg = RunConfig.from_dict(c)
    cfg.train.resume = True
    t = Trainer(cfg, log=lines.append)
    name = json.loads((tmp_path / "g" / "checkpoints" / "manifest.json").read_text())["checkpoints"][-1]["name"]
    assert any(x.endswith("config.json's resolved.plan is not the record depthlab wrote (edited by hand?): the "
                          f"resumed run follows the plan its checkpoint {name} holds") for x in lines), lines
    assert t.budget.plan.to_record() == planned  # the checkpoint's header holds the plan it was trained on
    # a checkpoint from before headers held the plan: config.json's, while its schedule is the checkpoint's
    from depthlab.training.checkpointer import ResumePoint

    good = json.loads(read_metadata_of(tmp_path / "g", name)["config"])
    old = {**c, "resolved": {**c["resolved"], "plan": planned}}
    assert ResumePoint({}, old, "adamw", header={"config": json.dumps(good)}).plan.to_record() == planned
    edited = {**old, "train": {**old["train"], "max_iters": 7}}
    point = ResumePoint({}, edited, "adamw", header={"config": json.dumps(good)})
    assert point.plan is None and point.schedule_edits == [f"train.max_iters {good['train']['max_iters']} -> 7"]
    assert ResumePoint({}, old, "adamw", header={"config": json.dumps(good), "plan": "null"}).plan is None


@pytest.mark.slow
def test_a_run_stopped_before_it_was_planned_is_planned_on_resume(tmp_path, tiny_text_file, fake_clock):
    from depthlab.trainer import Interrupted

    with pytest.raises(Interrupted):
        fit_run(tmp_path, tiny_text_file, "e", stop_at=10)
    assert "plan" not in json.loads((tmp_path / "e" / "config.json").read_text())["resolved"]
    t, s, c = fit_resume(tmp_path, tiny_text_file, "e")
    plan = c["resolved"]["plan"]
    assert plan["at_step"] in (10 + FIT_STEPS, 10 + REFIT_STEPS) and s["final_step"] == plan["max_iters"] < 100_000
    assert s["stopped_by"] == "max_time"


def test_patience_counter_survives_resume(tmp_path, tiny_text_file):
    cfg = dict(max_iters=10, eval_interval=5, patience=2)
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=cfg), **QUIET)
    vals = iter([3.0, 2.0, 2.5])
    t.evaluate = lambda: {"train": 1.0, "val": next(vals)}
    t.fit()  # one evaluation without improvement at step 10
    t2 = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, max_iters=100, resume=True)), **QUIET)
    assert t2.evaluator.evals_without_improvement == 1
    t2.evaluate = lambda: {"train": 1.0, "val": 2.6}
    t2.fit()
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["final_step"] == 15


def test_resumed_log_lines_show_total_training_time(tmp_path, tiny_text_file):
    cfg = dict(max_iters=10, eval_interval=5, log_interval=5)
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=cfg), **QUIET)
    t.fit()
    lines = []
    r = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, max_iters=20, resume=True)),
                log=lines.append)
    r.wall_before += 1000.0  # as if the first session had trained for 1000 s
    r.fit()
    step_lines = [x for x in lines if x.startswith("step 15/20")]
    assert step_lines and float(step_lines[0].rsplit("|", 1)[1].strip().rstrip("s")) >= 1000.0
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["wall_time_s"] >= 1000.0


# ------------------------------------------------------------------------- nothing to train, missing or damaged runs
def test_resume_with_nothing_to_train_changes_nothing(tmp_path, tiny_text_file, capsys):
    out = tmp_path / "fin"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=20, train__eval_interval=10,
                              train__probe_interval=7, train__tensorboard="true")]) == 0
    before = _snapshot(out)
    capsys.readouterr()
    assert main(["train", "--resume", str(out)]) == 0
    cap = capsys.readouterr()
    assert "depthlab: nothing to train" in cap.err and "nothing to train" not in cap.out
    assert _snapshot(out) == before
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["kind"] == "probe" and r["step"] == 20 for r in recs) == 1
    assert sum(r["kind"] == "eval" and r["step"] == 20 for r in recs) == 1


def test_resume_with_nothing_to_train_says_only_that(tmp_path, tiny_text_file):
    run = tmp_path / "r"
    train(tiny_config(run, tiny_text_file), **QUIET)
    lines = []
    Trainer(tiny_config(run, tiny_text_file, train=dict(resume=True, max_iters=15)), log=lines.append).fit()
    assert any(line.startswith("nothing to train") for line in lines)
    assert not any("learning rate" in line for line in lines), lines  # was: "stays at train.min_lr ..."


def test_api_resume_of_a_missing_folder_says_not_found(tmp_path, tiny_text_file):
    with pytest.raises(DepthlabError, match="nope not found"):
        Trainer(tiny_config(tmp_path / "nope", tiny_text_file, train=dict(resume=True)), **QUIET)
    assert not (tmp_path / "nope").exists()


def test_resume_not_a_run(tmp_path, capsys):
    missing = tmp_path / "missing"
    assert_clean_error(*run_cli(capsys, "train", "--resume", str(missing))[::2], "missing not found")
    assert not missing.exists()  # the refused resume made no folder
    assert_clean_error(*run_cli(capsys, "train", "--resume", str(tmp_path))[::2], "not a depthlab run directory")


def test_newer_checkpoint_format_rejected(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=10)), **QUIET)
    m = run / "checkpoints" / "manifest.json"
    d = json.loads(m.read_text())
    d["format"] = 99
    m.write_text(json.dumps(d))
    with pytest.raises(DepthlabError, match="newer"):
        train(tiny_config(run, tiny_text_file, train=dict(resume=True, max_iters=20)), **QUIET)


def test_truncated_checkpoint_falls_back_or_errors(tmp_path, tiny_text_file, capsys):
    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=20)), **QUIET)
    latest = run / "checkpoints" / "step-000020.safetensors"
    latest.write_bytes(latest.read_bytes()[:100])
    logs = []
    t = Trainer(tiny_config(run, tiny_text_file, train=dict(resume=True, max_iters=30)), log=logs.append)
    assert t.step == 10 and any("step-000020.safetensors does not match its sha256" in line for line in logs)
    best = run / "checkpoints" / "best.safetensors"
    best.write_bytes(best.read_bytes()[:50])
    with pytest.raises(DepthlabError, match="best.safetensors"):
        load_run(run)
    for f in (run / "checkpoints").glob("step-*.safetensors"):
        f.write_bytes(b"junk")
    with pytest.raises(DepthlabError, match="no intact step checkpoint .* missing or fails its sha256 check"):
        Trainer(tiny_config(run, tiny_text_file, train=dict(resume=True, max_iters=30)), **QUIET)


@pytest.mark.parametrize("fault", ["corrupt", "deleted"])
def test_resume_repairs_a_corrupt_best_from_its_step_checkpoint(tmp_path, tiny_text_file, fault):
    from depthlab.sample import load_run

    cfg = dict(max_iters=10, eval_interval=5, keep_last=5)
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=cfg), **QUIET)
    t.fit()
    ck = tmp_path / "r" / "checkpoints"
    best_step = json.loads((ck / "manifest.json").read_text())["best"]["step"]
    if fault == "corrupt":
        (ck / "best.safetensors").write_bytes(b"x")
    else:
        (ck / "best.safetensors").unlink()
    lines = []
    Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, max_iters=15, resume=True)),
            log=lines.append).fit()
    said = ("did not match its sha256 in manifest.json (corrupt or replaced)" if fault == "corrupt" else
            "was missing (deleted?)")
    assert any(f"best.safetensors {said}; restored from" in x for x in lines), lines
    load_run(tmp_path / "r")  # verifies again
    assert (ck / "best.safetensors").stat().st_size > 100 and best_step in (5, 10, 15)


@pytest.mark.slow  # about a second: the fast tier stays under 3 min
def test_a_damaged_or_deleted_baselines_json_is_said_when_a_resume_writes_it_again(run20, capsys):
    before = (run20 / "baselines.json").read_text()
    (run20 / "baselines.json").write_text('{"bigram": 2.4}')
    capsys.readouterr()
    assert main(["train", "--resume", str(run20), "--train.max_iters", "25"]) == 0
    out = capsys.readouterr().err
    assert f"warning: {run20 / 'baselines.json'} was not the JSON depthlab wrote (damaged or edited by hand): " \
        "written now from the run's corpus" in out
    assert json.loads((run20 / "baselines.json").read_text()) == json.loads(before)  # the same corpus's numbers
    (run20 / "baselines.json").unlink()
    assert main(["train", "--resume", str(run20), "--train.max_iters", "30"]) == 0
    assert f"{run20 / 'baselines.json'} was missing (deleted, or the run's earlier sessions had no " \
        "BaselinesCallback): written now" in capsys.readouterr().err
    assert main(["train", "--resume", str(run20), "--train.max_iters", "35"]) == 0
    assert "baselines.json was" not in str(capsys.readouterr())  # intact: nothing to say


@pytest.mark.slow
def test_a_deleted_manifest_is_refused_and_nothing_is_replaced(tmp_path, tiny_text_file, capsys):
    """A new user's pass: with checkpoints/manifest.json deleted, --resume said "No checkpoint yet; starting it
    again from step 0" and overwrote the run's metrics and checkpoints; context/layers blamed best's sha256."""
    from conftest import assert_clean_error

    out = tmp_path / "r"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=20, train__eval_interval=10)]) == 0
    (out / "checkpoints" / "manifest.json").unlink()
    before = {p.name: p.read_bytes() for p in [*out.glob("*.json*"), *(out / "checkpoints").iterdir()]}
    capsys.readouterr()
    for argv in (["train", "--resume", str(out), "--train.max_iters", "30"], ["context", str(out)],
                 ["layers", str(out)]):
        rc = main(argv)
        assert_clean_error(rc, capsys.readouterr().err, "manifest.json is missing", "restore manifest.json")
    assert {p.name: p.read_bytes() for p in [*out.glob("*.json*"), *(out / "checkpoints").iterdir()]} == before
    assert main(["report", str(out)]) == 0
    assert "manifest.json is missing" in capsys.readouterr().err
    # a kill inside the first checkpoint write (step files, no manifest yet) still restarts from step 0
    (out / "checkpoints" / "best.safetensors").unlink()
    (out / "checkpoints" / "step-000010.safetensors").unlink()
    assert ckpt.latest_checkpoint(out) is None


@pytest.mark.slow  # about a second per case: the fast tier stays under 3 min
@pytest.mark.parametrize("name", ["summary.json", "baselines.json"])
def test_a_folder_where_the_run_writes_a_file_is_refused_before_anything_is_written(tmp_path, tiny_text_file, capsys,
                                                                                    name):
    """helper-19: summary.json replaced by a folder: --resume rewrote config.json (max_iters, resume, out_dir), then
    failed with "IsADirectoryError: [Errno 21] ..." when it came to remove the old summary."""
    from conftest import assert_clean_error

    out = tmp_path / "r"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=10, train__eval_interval=5)]) == 0
    (out / name).unlink()
    (out / name).mkdir()
    before = {p.name: p.read_bytes() for p in [*out.glob("*.json*"), *(out / "checkpoints").iterdir()] if p.is_file()}
    capsys.readouterr()
    rc = main(["train", "--resume", str(out), "--train.max_iters", "15"])
    assert_clean_error(rc, capsys.readouterr().err, f"cannot resume: {out / name} is not a file (depthlab writes its "
                       f"{name} there)", "move it out of the run directory")
    assert {p.name: p.read_bytes() for p in [*out.glob("*.json*"), *(out / "checkpoints").iterdir()]
            if p.is_file()} == before
    assert main(["diagnose", str(out)]) == 0  # diagnose said nothing of the folder, or called it "missing (deleted?)"
    assert f"warning: {out / name} is not a file" in capsys.readouterr().err
    # helper-20: a file where tb/ goes, a folder where a checkpoint file goes (now, or at the session's end)
    (out / name).rmdir()
    for blocked, make in (("tb", Path.touch), ("checkpoints/best.safetensors", Path.mkdir),
                          ("checkpoints/step-000015.safetensors", Path.mkdir)):
        saved = tmp_path / "saved"
        if (out / blocked).exists():
            (out / blocked).rename(saved)
        make(out / blocked)
        before = {p.name: p.read_bytes() for p in out.glob("*.json*")}
        kind = "not a folder" if blocked == "tb" else "not a file"
        assert_clean_error(main(["train", "--resume", str(out), "--train.max_iters", "15"]), capsys.readouterr().err,
                           f"cannot resume: {out / blocked} is {kind}")
        assert {p.name: p.read_bytes() for p in out.glob("*.json*")} == before, blocked
        (out / blocked).unlink() if blocked == "tb" else (out / blocked).rmdir()
        if saved.exists():
            saved.rename(out / blocked)
    shutil.rmtree(out / "checkpoints")
    (out / "checkpoints").write_text("")  # sample had said "checkpoints/manifest.json is missing"
    assert_clean_error(main(["sample", str(out)]), capsys.readouterr().err,
                       f"{out / 'checkpoints'} is not a folder (depthlab keeps the run's checkpoints there)")


@pytest.mark.slow
def test_a_finished_run_without_its_checkpoints_is_refused_not_restarted(tmp_path, tiny_text_file, capsys):
    """A new user's pass: --resume on a finished run whose checkpoints/ was deleted or emptied said "no checkpoint
    yet; starting it again from step 0" and replaced its metrics.jsonl, summary.json and diagnosis.json."""
    from conftest import assert_clean_error

    out = tmp_path / "r"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=20, train__eval_interval=10)]) == 0
    for emptied in (False, True):
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
        if emptied:
            (out / "checkpoints").mkdir()
        before = {p.name: p.read_bytes() for p in out.glob("*.json*")}
        capsys.readouterr()
        rc = main(["train", "--resume", str(out), "--train.max_iters", "30"])
        assert_clean_error(rc, capsys.readouterr().err, "summary.json says it trained 20 steps",
                           "holds no checkpoint (deleted?)", "a new train.out_dir")
        assert {p.name: p.read_bytes() for p in out.glob("*.json*")} == before
    # a second pass: summary.json deleted too (the records still show training past the checkpoint at step 10)
    (out / "summary.json").unlink()
    before = {p.name: p.read_bytes() for p in out.glob("*.json*")}
    rc = main(["train", "--resume", str(out), "--train.max_iters", "30"])
    assert_clean_error(rc, capsys.readouterr().err, "metrics.jsonl records steps up to 20, past the evaluation (and "
                       "checkpoint) at step 10", "holds no checkpoint (deleted?)")
    assert {p.name: p.read_bytes() for p in out.glob("*.json*")} == before
    # the manifest emptied, the weights still there: named as such
    shutil.rmtree(out)
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=20, train__eval_interval=10)]) == 0
    (out / "checkpoints" / "manifest.json").write_text("{}")
    capsys.readouterr()
    rc = main(["train", "--resume", str(out), "--train.max_iters", "30"])
    assert_clean_error(rc, capsys.readouterr().err, "its manifest.json lists no checkpoint, though", "best.safetensors")


@pytest.mark.parametrize("damage,fault", [('{"checkpoints": [', "is unreadable (Expecting value"),
                                          ("[1]", "is not a depthlab checkpoint manifest")])
def test_a_damaged_manifest_is_named_with_the_ways_forward_and_nothing_is_touched(run20, tmp_path, capsys, damage,
                                                                                  fault):
    """A new user's pass: a corrupt checkpoints/manifest.json said only that the checkpoints "cannot be trusted"."""
    m = run20 / "checkpoints" / "manifest.json"
    m.write_text(damage)
    before = _snapshot(run20)
    for argv in (["train", "--resume", str(run20), "--train.max_iters", "30"], ["sample", str(run20)],
                 ["export", str(run20), str(tmp_path / "hf")]):
        capsys.readouterr()
        assert_clean_error(main(argv), capsys.readouterr().err, f"{m} {fault}", "the sha256 of the run's checkpoints "
                           "cannot be checked, so depthlab neither reads nor replaces them; restore manifest.json from "
                           "a copy of the run, or start a new run from its best weights, unchecked: depthlab train "
                           f"-c {run20 / 'config.json'} --init-from {run20} --train.resume false "
                           "--train.out_dir NEW_DIR")
        assert _snapshot(run20) == before and not (tmp_path / "hf").exists()
    # the way forward it names works, and still touches nothing of the run
    new = tmp_path / "new"
    assert main(["train", "--init-from", str(run20), "--train.out_dir", str(new), "--train.max_iters", "2",
                 "--data.path", json.loads((run20 / "config.json").read_text())["data"]["path"]]) == 0
    assert (new / "summary.json").is_file() and _snapshot(run20) == before


def _no_sha_of_best(m):
    m["best"]["files"] = {}


def _checkpoint_files_a_list(m):
    m["checkpoints"][0]["files"] = []


def _empty_sha_of_a_step(m):
    m["checkpoints"][-1]["files"]["step-000020.safetensors"] = ""


@pytest.mark.parametrize("edit,fault", [(_no_sha_of_best, "holds no sha256 of best.safetensors"),
                                        (_checkpoint_files_a_list, "holds no sha256 of the checkpoint of step 10"),
                                        (_empty_sha_of_a_step, "holds no sha256 of step-000020.safetensors")])
def test_a_manifest_entry_without_a_sha256_is_refused_as_a_damaged_manifest(run20, tmp_path, capsys, edit, fault):
    """A new user's pass (nu49): a hand-edited manifest whose sha256 entries were emptied made resume continue and
    sample print "sampling from best.safetensors" (nothing to compare, nothing found wrong), or crashed on a list.
    A file with no sha256 cannot be checked: refused as a damaged manifest, as --init-from warns of one. The best
    weights it offers are "unchecked" only when best's own entry is the damaged one (nu56)."""
    best = (", unchecked" if edit is _no_sha_of_best
            else " (best.safetensors matches its sha256 in the manifest)")
    m = run20 / "checkpoints" / "manifest.json"
    data = json.loads(m.read_text())
    edit(data)
    m.write_text(json.dumps(data))
    before = _snapshot(run20)
    for argv in (["train", "--resume", str(run20), "--train.max_iters", "30"], ["sample", str(run20)],
                 ["export", str(run20), str(tmp_path / "hf")], ["context", str(run20)]):
        capsys.readouterr()
        rc = main(argv)
        out, err = capsys.readouterr()
        assert_clean_error(rc, err, f"{m} {fault}: the sha256 of the run's checkpoints cannot be checked, so "
                           "depthlab neither reads nor replaces them; restore manifest.json from a copy of the run, "
                           f"or start a new run from its best weights{best}: depthlab train "
                           f"-c {run20 / 'config.json'} --init-from {run20} --train.resume false "
                           "--train.out_dir NEW_DIR")
        assert "sampling from" not in err + out and "resuming" not in out, argv
        assert _snapshot(run20) == before and not (tmp_path / "hf").exists()


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


def test_a_run_of_the_previous_release_resumes(old_run, capsys):
    assert main(["train", "--resume", str(old_run), "--train.max_iters", "9"]) == 0
    capsys.readouterr()
    rd = RunDir(old_run)
    assert rd.summary["final_step"] == 9
    evals = rd.evals
    assert [r["step"] for r in evals] == [0, 3, 6, 9]
    assert {r["step"]: r["val_loss"] for r in evals[:3]} == OLD_EVALS  # the old records are kept as written
    assert all(r["kind"] == "eval" for r in evals)
    manifest = json.loads((old_run / "checkpoints" / "manifest.json").read_text())
    assert manifest["checkpoints"][-1]["step"] == 9
    assert json.loads((old_run / "config.json").read_text())["train"]["max_iters"] == 9


@pytest.mark.slow
def test_bpe_run_samples_resumes_exports_and_restarts_from_its_export(tmp_path, bpe_file, monkeypatch):
    pytest.importorskip("transformers")
    from depthlab.cli import main

    cfg = bpe_run_config(tmp_path, bpe_file, max_iters=10)
    run = train(cfg, **QUIET)
    tok_json = (run / "tokenizer.json").read_text()
    text = sample_text(run, "café 世", 30, temperature=0)[0]
    assert text.startswith("café 世") and "\ufffd" not in text[:6]
    # resume: the run's own tokenizer, never a retrained one (the cache is gone, training would fail)
    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "fresh-cache"))
    monkeypatch.setattr(D, "train_bpe", lambda *a, **k: (_ for _ in ()).throw(AssertionError("retrained")))
    cfg2 = bpe_run_config(tmp_path, bpe_file, max_iters=20, resume=True)
    train(cfg2, **QUIET)
    assert (run / "tokenizer.json").read_text() == tok_json
    assert json.loads((run / "summary.json").read_text())["final_step"] == 20
    assert main(["export", str(run), str(tmp_path / "hf")]) == 0
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    htok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    model, tok = load_run(run)
    ids = tok.encode("café 世界")
    assert htok("café 世界").input_ids == ids and htok.eos_token_id == 0
    with torch.no_grad():
        assert torch.allclose(hf(torch.tensor([ids])).logits, model(torch.tensor([ids]))[0], atol=1e-5)
    # --init-from the export: the export's tokenizer and weights start a new run
    cfg3 = bpe_run_config(tmp_path, bpe_file, max_iters=1, out_dir=str(tmp_path / "again"))
    t = Trainer(cfg3, init_from=str(tmp_path / "hf"), **QUIET)
    assert t.corpus.tokenizer.sha256 == tok.sha256
    for k, v in model.state_dict().items():
        assert torch.equal(t.raw_model.state_dict()[k], v), k


def test_resume_says_when_the_records_end_before_its_checkpoint(tmp_path, tiny_text_file):
    """A new user's pass: metrics.jsonl cut to half, then --resume: a silent gap in the records."""
    out = tmp_path / "r"
    train(tiny_config(out, tiny_text_file, train=dict(max_iters=20, eval_interval=10, log_interval=1)), **QUIET)
    m = out / "metrics.jsonl"
    m.write_text("".join(ln + "\n" for ln in m.read_text().splitlines() if json.loads(ln)["step"] <= 12))
    lines = []
    Trainer(tiny_config(out, tiny_text_file, train=dict(max_iters=30, eval_interval=10, log_interval=1, resume=True)),
            log=lines.append).fit()
    assert ("warning: the records of metrics.jsonl end at step 12, before the checkpoint at step 20 (cut or damaged): "
            "the resumed run has no records of steps 13-20") in lines
    steps = sorted({r["step"] for r in RunDir(out).metrics() if r["kind"] == "train"})
    assert steps == list(range(1, 13)) + list(range(21, 31))
    # helper-20: a checkpoint saved at a stop (Ctrl-C at step 36, the last record at step 30) is no gap
    from conftest import StopAt

    from depthlab.trainer import Interrupted

    with pytest.raises(Interrupted):
        Trainer(tiny_config(out, tiny_text_file, train=dict(max_iters=60, eval_interval=10, log_interval=100,
                                                             resume=True)), callbacks=[StopAt(36)], **QUIET).fit()
    assert max(r["step"] for r in RunDir(out).metrics()) == 30
    lines = []
    Trainer(tiny_config(out, tiny_text_file, train=dict(max_iters=40, eval_interval=10, resume=True)), log=lines.append)
    assert any("resuming" in x and "from step 36" in x for x in lines), lines
    assert not any("cut or damaged" in x for x in lines), lines
    # helper-21: records cut further back than log_interval before a stop's checkpoint are still a gap that is said
    m.write_text("".join(ln + "\n" for ln in m.read_text().splitlines() if json.loads(ln)["step"] <= 12))
    lines = []
    Trainer(tiny_config(out, tiny_text_file, train=dict(max_iters=40, eval_interval=10, log_interval=10, resume=True)),
            log=lines.append)
    assert any("end at step 12, before the checkpoint at step 36 (cut or damaged)" in x for x in lines), lines


def test_a_deleted_vocab_json_is_named_not_the_corpus(tmp_path, tiny_text_file):
    """A new user's pass: with vocab.json deleted, resume said the corpus vocabulary differs from the checkpoint's."""
    out = tmp_path / "r"
    train(tiny_config(out, tiny_text_file, train=dict(max_iters=10)), **QUIET)
    (out / "vocab.json").unlink()
    cfg = json.loads((out / "config.json").read_text())
    del cfg["resolved"]["corpus_sha256"]  # a run from before the record: nothing says the corpus is the same
    (out / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(DepthlabError, match=r"its vocab.json is missing \(deleted\?\).*restore it from a copy"):
        Trainer(tiny_config(out, tiny_text_file, train=dict(max_iters=20, resume=True)), **QUIET)


def _stopped_and_resumed(tmp_path, tiny_text_file, cfg: dict, stop: int, **changes):
    """Train ``cfg`` until ``stop`` (interrupted there), then build its resume with ``changes``: ``(the first
    Trainer, the resumed one, its resume: lines)``."""
    t = Trainer(tiny_config(tmp_path / "w", tiny_text_file, train=cfg), callbacks=[_StopAfter(stop)], **QUIET)
    with pytest.raises(Interrupted):
        t.fit()
    lines = []
    r = Trainer(tiny_config(tmp_path / "w", tiny_text_file, train=dict(cfg, **changes, resume=True)),
                log=lines.append)
    return t, r, [x for x in lines if x.startswith("resume:")]


def test_a_resume_inside_the_warmup_says_the_rate_still_rises(tmp_path, tiny_text_file):
    """A new user's pass: resumed at step 20 of a 50-step warmup with a new peak, the line said the rate "decays"
    while it rose to the peak."""
    cfg = dict(max_iters=100, eval_interval=10, warmup_iters=50, learning_rate=3e-3, min_lr=1e-4)
    _, r, said = _stopped_and_resumed(tmp_path, tiny_text_file, cfg, 20, learning_rate=1e-3)
    assert r.lr_at(21) < r.lr_at(49) < r.lr_at(50) == pytest.approx(1e-3, rel=0.05)
    assert len(said) == 1 and f"continues from {r.lr_at(20):.3g} at step 21" in said[0]
    assert ("warms up to train.learning_rate 0.001 at step 51, and decays toward train.min_lr 0.0001, which it "
            "would first reach at step 101, after the run's last step 100") in said[0]


def test_a_new_warmup_on_resume_says_the_rate_it_gives(tmp_path, tiny_text_file):
    """A new user's pass: a resume at step 20 with train.warmup_iters 50 -> 10 said only "the schedule is
    recomputed" while the rate jumped from 1.2e-3 to 3.0e-3; the schedule's line now gives both rates."""
    from depthlab.training.optimization import get_lr

    cfg = dict(max_iters=100, eval_interval=10, warmup_iters=50, learning_rate=3e-3, min_lr=1e-4)
    _, r, said = _stopped_and_resumed(tmp_path, tiny_text_file, cfg, 20, warmup_iters=10)
    new, old = get_lr(20, 3e-3, 1e-4, 10, 100), get_lr(20, 3e-3, 1e-4, 50, 100)
    assert r.lr_at(20) == pytest.approx(new) and new > 2 * old
    assert len(said) == 1 and f"continues from {new:.3g} at step 21 (the run's old settings: {old:.3g})" in said[0]
    assert said[0].startswith("resume: train.warmup_iters 50 -> 10: the learning rate continues")
    assert "(the warmup now ends at step 11, was 51)" in said[0] and "no jump" not in said[0]
    # config.json now holds warmup 10 (the resumed Trainer wrote it) but no checkpoint was saved on it: the weights
    # at step 20 still trained on warmup 50, so the same resume says the same jump again (it said nothing before)
    lines = []
    again = Trainer(tiny_config(tmp_path / "w", tiny_text_file, train=dict(cfg, warmup_iters=10, resume=True)),
                    log=lines.append)
    assert again.lr_at(20) == pytest.approx(new)
    assert [x for x in lines if x.startswith("resume:")] == [
        f"resume: {tmp_path / 'w' / 'config.json'} holds a schedule the checkpoint step-000020 was not trained with "
        "(train.warmup_iters 50 -> 10; checkpoint -> config.json: edited by hand, or a session that stopped before "
        "its first checkpoint): the learning rate continues from the checkpoint's", said[0]]


def test_a_new_warmup_keeps_the_time_plan_and_says_it_changes_nothing(tmp_path, tiny_text_file, fake_clock):
    """A new user's pass: `--resume --train.warmup_iters 10` on a fit_to_time run dropped its plan (the run went on
    to max_iters 3000 at min_lr) while the line said the new warmup "changes nothing"."""
    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=100_000, max_time=6.0, eval_interval=50,
                                                                 warmup_iters=20))
    t = Trainer(cfg, callbacks=[_StopAfter(FIT_STEPS + 30)], **QUIET)
    with pytest.raises(Interrupted):
        t.fit()
    planned = t.schedule.max_iters
    assert FIT_STEPS + 30 < planned < 100_000 and t.schedule.warmup_iters == 20
    lines = []
    again = dict(max_iters=100_000, max_time=6.0, eval_interval=50, warmup_iters=10, resume=True)
    r = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=again), log=lines.append)
    assert r.schedule.max_iters == planned and r.schedule.warmup_iters == 20 and r.budget.plan is not None
    said = [x for x in lines if x.startswith("resume:")]
    assert said == [f"resume: train.warmup_iters 20 -> 10 changes nothing from step {FIT_STEPS + 31}: the learning "
                    f"rate continues from {r.lr_at(FIT_STEPS + 30):.3g} as before"], lines


@pytest.mark.slow  # about a second: the fast tier stays under 3 min
def test_a_run_stopped_inside_its_warmup_and_extended_still_warms_up(tmp_path, tiny_text_file):
    """A new user's pass: a run stopped at step 4 of a 20-step warmup and resumed with a larger max_iters stayed
    at 7.1e-4 (a quarter of the peak) for every step: the extension anchored the cosine at the warmup's rate.
    The steps the line names are the ones the console and metrics.jsonl log (update it is step it + 1)."""
    cfg = dict(max_iters=60, eval_interval=10, warmup_iters=20, learning_rate=3e-3, min_lr=1e-4, log_interval=1)
    t, r, said = _stopped_and_resumed(tmp_path, tiny_text_file, cfg, 4, max_iters=100)
    assert r.lr_at(4) == pytest.approx(t.lr_at(4)) and r.lr_at(20) == pytest.approx(3e-3)  # the peak, at last
    assert len(said) == 1 and f"continues from {r.lr_at(4):.3g} at step 5" in said[0], said
    assert ("warms up to train.learning_rate 0.003 at step 21, and decays toward train.min_lr 0.0001, which it "
            "would first reach at step 101, after the run's last step 100") in said[0]
    r.fit()
    lrs = {x["step"]: x["lr"] for x in map(json.loads, (tmp_path / "w" / "metrics.jsonl").read_text().splitlines())
           if x.get("kind") == "train"}
    assert lrs[5] == pytest.approx(r.lr_at(4)) and lrs[21] == pytest.approx(3e-3)


def test_the_resume_line_names_the_step_metrics_jsonl_first_logs_at_min_lr(tmp_path, tiny_text_file):
    """nu45: "decays to train.min_lr 0.0001 at step 50" while the console and metrics.jsonl first showed min_lr at
    step 51 (update ``it`` is logged as step it + 1, and lr_at(decay_iters) is the first at the floor)."""
    cfg = dict(max_iters=30, lr_decay_iters=100, eval_interval=10, warmup_iters=5, learning_rate=3e-3, min_lr=1e-4,
               log_interval=1)
    _, r, said = _stopped_and_resumed(tmp_path, tiny_text_file, cfg, 20, max_iters=60, lr_decay_iters=50)
    r.fit()
    lrs = {x["step"]: x["lr"] for x in map(json.loads, (tmp_path / "w" / "metrics.jsonl").read_text().splitlines())
           if x.get("kind") == "train"}
    first = min(s for s, lr in lrs.items() if lr == pytest.approx(1e-4, rel=1e-9))
    assert first == 51 and lrs[50] > 1.01e-4, lrs
    assert len(said) == 1 and f"decays to train.min_lr 0.0001 at step {first} (the decay used to end at 100)" in \
        said[0], said


@pytest.mark.slow  # about a second: the fast tier stays under 3 min
def test_a_relative_data_path_works_from_another_folder(tmp_path, tiny_text_file, capsys, monkeypatch):
    """A new user's pass: a run trained with `--data.path corp.txt` could not be resumed from another folder ("not
    found"), and the right path from there was refused as a changed data.path. config.json holds it absolute."""
    (tmp_path / "a").mkdir()
    shutil.copy(tiny_text_file, tmp_path / "a" / "corp.txt")
    monkeypatch.chdir(tmp_path / "a")
    assert main(["train", *tiny_cli_args("corp.txt", Path("run"), train__max_iters=10, train__eval_interval=5)]) == 0
    assert json.loads(Path("run/config.json").read_text())["data"]["path"] == str(tmp_path / "a" / "corp.txt")
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--resume", "a/run", "--train.max_iters", "15"]) == 0
    assert main(["train", "--resume", "a/run", "--train.max_iters", "20", "--data.path", "a/corp.txt"]) == 0
    assert json.loads((tmp_path / "a/run/summary.json").read_text())["final_step"] == 20
    capsys.readouterr()
    assert main(["context", "a/run"]) == 0


@pytest.mark.slow
def test_a_mistyped_data_path_on_resume_is_named_as_the_given_flag_not_the_runs_corpus(tmp_path, tiny_text_file,
                                                                                        capsys):
    """nu36: ``--resume RUN --data.path /nonexistent`` said "its corpus /nonexistent is missing (moved or
    deleted?)", blaming the run's corpus for the path just typed. It names the given flag and what the run was
    trained on (the embedded corpus, or its own file), with the fix: drop the flag or fix the path."""
    emb = tmp_path / "emb"
    args = tiny_cli_args(None, emb, train__max_iters=4, train__eval_interval=2)
    i = args.index("--data.path")
    assert main(["train", *args[:i], *args[i + 2:]]) == 0
    capsys.readouterr()
    rc = main(["train", "--resume", str(emb), "--data.path", str(tmp_path / "nope.txt"), "--train.max_iters", "6"])
    assert_clean_error(rc, capsys.readouterr().err,
                       f"cannot resume {emb}: data.path {tmp_path / 'nope.txt'} (given for this resume) does not "
                       "exist; the run was trained on the embedded corpus (data.path unset): fix the path, or give no "
                       "data.path (the resume then reads the run's own)")
    # nu39: from a -c file it said "the given --data.path", a flag never typed
    (tmp_path / "c.yaml").write_text(f"data:\n  path: {tmp_path / 'nope.txt'}\n")
    rc = main(["train", "--resume", str(emb), "-c", str(tmp_path / "c.yaml"), "--train.max_iters", "6"])
    err = capsys.readouterr().err
    assert_clean_error(rc, err, f"data.path {tmp_path / 'nope.txt'} (given for this resume) does not exist")
    assert "--data.path" not in err
    own = tmp_path / "own"
    assert main(["train", *tiny_cli_args(tiny_text_file, own, train__max_iters=4, train__eval_interval=2)]) == 0
    capsys.readouterr()
    rc = main(["train", "--resume", str(own), "--data.path", "typo.txt", "--train.max_iters", "6"])
    err = capsys.readouterr().err
    assert_clean_error(rc, err, f"data.path typo.txt (given for this resume) does not exist; the run was trained on "
                       f"its own corpus {tiny_text_file}: fix the path, or give no data.path (the resume then reads "
                       "the run's own)")
    assert "moved or deleted" not in err
    assert json.loads((own / "summary.json").read_text())["final_step"] == 4


@pytest.mark.slow
def test_a_moved_corpus_is_named_on_resume_and_found_where_it_is_now(tmp_path, tiny_text_file, capsys):
    """helper-19: with the run's corpus moved, --resume gave train's advice ("give an existing text file (or leave
    data.path unset ...)"), and the moved file given with --data.path was refused as a changed data.path, shown
    relative. The same bytes (sha256) elsewhere are the run's corpus: config.json then records where it is."""
    from conftest import assert_clean_error

    out = tmp_path / "r"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=10, train__eval_interval=5)]) == 0
    moved = tmp_path / "moved.txt"
    tiny_text_file.rename(moved)
    capsys.readouterr()
    rc = main(["train", "--resume", str(out), "--train.max_iters", "15"])
    assert_clean_error(rc, capsys.readouterr().err, f"cannot resume {out}: its corpus {tiny_text_file} is missing",
                       "put the file back at that path, or give --data.path where it is now")
    assert "leave data.path unset" not in capsys.readouterr().err
    assert main(["train", "--resume", str(out), "--train.max_iters", "15", "--data.path", str(moved)]) == 0
    assert f"depthlab: resume: the corpus moved: data.path {tiny_text_file} -> {moved} (the same file" in \
        capsys.readouterr().err
    assert json.loads((out / "config.json").read_text())["data"]["path"] == str(moved)
    moved.rename(tmp_path / "kept.txt")
    moved.write_text("short text\n")  # helper-20: another, short file in its place was "has 11 tokens but block_size"
    rc = main(["train", "--resume", str(out), "--train.max_iters", "20"])
    assert_clean_error(rc, capsys.readouterr().err, f"the corpus {moved} changed since training")
    (tmp_path / "kept.txt").replace(moved)
    other = tmp_path / "other.txt"
    other.write_text(moved.read_text()[::-1])  # the same characters, another text: refused, shown absolute
    rc = main(["train", "--resume", str(out), "--train.max_iters", "20", "--data.path", str(other)])
    assert_clean_error(rc, capsys.readouterr().err, f"changed data.path '{moved}' -> '{other}'")


@pytest.mark.slow
def test_a_deleted_vocab_json_is_written_again_when_the_corpus_is_the_runs(tmp_path, tiny_text_file, capsys):
    """A new user's pass: resume refused a run whose vocab.json was deleted though the corpus was unchanged (its
    sha256 is config.json's) and the checkpoint holds the vocabulary; another text is still refused."""
    out = tmp_path / "r"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=10, train__eval_interval=5)]) == 0
    vocab = (out / "vocab.json").read_text()
    (out / "vocab.json").unlink()
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--train.max_iters", "15"]) == 0
    assert (out / "vocab.json").read_text() == vocab
    assert f"depthlab: resume: {out / 'vocab.json'} was missing; written again from the corpus" in \
        capsys.readouterr().err
    (out / "vocab.json").unlink()
    tiny_text_file.write_text(tiny_text_file.read_text()[::-1])
    from conftest import assert_clean_error

    rc = main(["train", "--resume", str(out), "--train.max_iters", "20"])
    # helper-19: the edited corpus is named (it had said only "restore vocab.json from a copy", then refused again)
    assert_clean_error(rc, capsys.readouterr().err, "vocab.json is missing (deleted?), and the corpus "
                       f"{tiny_text_file} changed since training too", "restore the file the run trained on, and the "
                       "resume writes vocab.json again")
    assert not (out / "vocab.json").exists()
    tiny_text_file.write_text(tiny_text_file.read_text()[::-1])  # the run's corpus back; vocab.json damaged
    (out / "vocab.json").write_text('["a", ')
    assert main(["train", "--resume", str(out), "--train.max_iters", "20"]) == 0
    assert (out / "vocab.json").read_text() == vocab
    assert f"depthlab: resume: {out / 'vocab.json'} was damaged; written again from the corpus" in \
        capsys.readouterr().err
    (out / "vocab.json").write_text('["a", "b"]')  # helper-20: valid JSON, not the run's: was blamed on the corpus
    assert main(["train", "--resume", str(out), "--train.max_iters", "25"]) == 0
    assert (out / "vocab.json").read_text() == vocab
    assert f"depthlab: resume: {out / 'vocab.json'} was edited (not the characters the run trained on); written " \
        "again" in capsys.readouterr().err


@pytest.mark.slow
def test_a_resume_that_drops_the_plan_plans_the_steps_left_and_the_rate_goes_on(tmp_path, tiny_text_file, fake_clock):
    """helper-18: `--resume --train.max_iters N` on a fit_to_time run made no new plan (plans were made only in a
    session's first 20 steps), so the session's max_time cut the decay. Now the steps left are planned, and the rate
    continues from where it was (no jump back to the peak) to min_lr at the planned end."""
    from conftest import StopAt

    from depthlab.trainer import Interrupted

    base = dict(max_iters=200, max_time=0.0, eval_interval=50, log_interval=1, min_lr=1e-4, learning_rate=3e-3,
                warmup_iters=10)
    with pytest.raises(Interrupted):
        Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=base), callbacks=[StopAt(60)], **QUIET).fit()
    lines = []
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(base, max_iters=100_000, max_time=3.0,
                                                                       fit_to_time=True, resume=True)),
                log=lines.append)
    run = t.fit()
    s = json.loads((run / "summary.json").read_text())
    plan = json.loads((run / "config.json").read_text())["resolved"]["plan"]
    n = plan["max_iters"]
    assert any("the steps from 60 to 100000 would not fit" in x for x in lines), lines
    said = [x for x in lines if x.startswith("resume: ")]  # helper-20: it said "decays ... at step 100000" alone
    assert said and said[0].endswith("(unless train.fit_to_time plans an earlier end for this session's "
                                     "train.max_time)"), said
    assert plan["at_step"] >= 60 + FIT_STEPS and 60 + FIT_STEPS < n < 100_000
    assert s["final_step"] == n and s["stopped_by"] == "max_time" and t.lr_at(n) == 1e-4
    lrs = [r["lr"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
           if r.get("kind") == "train" and r["step"] >= 60]
    assert 2e-3 < lrs[0] < 3e-3 and lrs[1] == pytest.approx(lrs[0], rel=1e-2)  # where the first session left it
    assert all(b <= a * (1 + 1e-9) for a, b in zip(lrs, lrs[1:]))  # down from there, never back up to the peak


def test_a_new_lr_decay_iters_is_said_by_the_schedule_and_only_when_the_end_moves(tmp_path, tiny_text_file):
    """helper-19: `--resume --train.lr_decay_iters 0` where 0 means the same end step printed "the cosine decay is
    recomputed from the current step" though nothing changed. The schedule's line now says it, with the rate."""
    from conftest import StopAt

    from depthlab.trainer import Interrupted

    base = dict(max_iters=40, lr_decay_iters=40, eval_interval=10, learning_rate=3e-3, min_lr=1e-4, warmup_iters=5)
    with pytest.raises(Interrupted):
        Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=base), callbacks=[StopAt(20)], **QUIET).fit()
    shutil.copytree(tmp_path / "r", tmp_path / "s")
    lines = []
    Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(base, lr_decay_iters=0, max_iters=30, resume=True)),
            log=lines.append)  # 0 = max_iters: the end moves from 40 to 30
    said = [x for x in lines if x.startswith("resume: train.lr_decay_iters")]
    assert said and "train.lr_decay_iters 40 -> 0: the learning rate continues from" in said[0], lines
    assert ("decays toward train.min_lr 0.0001, which it would first reach at step 31, after the run's last step "
            "30 (the decay used to end at 40)") in said[0]
    lines.clear()
    Trainer(tiny_config(tmp_path / "s", tiny_text_file, train=dict(base, lr_decay_iters=0, resume=True)),
            log=lines.append)  # 0 = max_iters 40: the same end
    assert not [x for x in lines if x.startswith("resume:")], lines


def test_a_run_that_ends_inside_its_warmup_is_said_to_warm_up_to_its_end(tmp_path, tiny_text_file):
    """helper-20: a 40-step run (warmup 50) resumed with max_iters 50 was said to "warm up to 0.003 at step 51, and
    decay to train.min_lr 0.0001 at step 50"; the rate rises to its last step."""
    base = dict(max_iters=40, eval_interval=20, learning_rate=3e-3, min_lr=1e-4, warmup_iters=50, max_time=0.0)
    Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=base), **QUIET).fit()
    lines = []
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(base, max_iters=50, resume=True)),
                log=lines.append)
    said = [x for x in lines if x.startswith("resume: ")]
    assert said and "warms up until the run ends at step 50 (train.warmup_iters 50 reaches past it: no decay)" in \
        said[0] and "decays" not in said[0], said
    assert t.lr_at(49) > t.lr_at(40) and t.lr_at(49) < 3e-3  # still rising at the last step


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_resumed_session_with_other_resolved_settings_says_so_in_one_line(run20, capsys):
    """A new user's pass: a resume went from resolved.omp_wait passive to active without a word (the environment's
    OMP_WAIT_POLICY, or auto settings, decide it anew each session)."""
    from depthlab.training.machine import omp_policy

    cfg = json.loads((run20 / "config.json").read_text())
    now, threads = omp_policy(), cfg["resolved"]["threads"]
    other = {"passive": "active", "active": "passive"}[now]
    cfg["resolved"].update(omp_wait=other, threads=threads + 1)  # as if the run's first session had them
    (run20 / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    assert main(["train", "--resume", str(run20), "--train.max_iters", "30"]) == 0
    cap = capsys.readouterr()
    said = [x for x in cap.err.splitlines() if "resolved section" in x]
    assert said == [f"depthlab: resume: this session runs with other settings than config.json's resolved section "
                    f"records (run -> now): threads {threads + 1} -> {threads}: the speed, and float rounding where a "
                    f"sum is split across threads; omp_wait {other!r} -> {now!r}: how idle OpenMP threads wait, which "
                    "changes the speed only"], cap.err
    assert "resolved section" not in cap.out
    new = json.loads((run20 / "config.json").read_text())["resolved"]
    assert (new["omp_wait"], new["threads"]) == (now, threads)  # what the line says this session ran with
    assert main(["train", "--resume", str(run20), "--train.max_iters", "40"]) == 0
    assert "resolved section" not in capsys.readouterr().err  # the same settings again: nothing to say


def test_a_run_that_ended_inside_its_warmup_is_extended_from_its_warmed_up_rate_not_dropped_to_min_lr(
        tmp_path, tiny_text_file):
    """A new user's pass: warmup 50 with max_iters 30, extended to 50, then to 60: the second extension printed
    "the learning rate stays at train.min_lr (the decay ended at step 50)" and trained at 1e-4, though the run had
    never decayed (its rate at step 49 was 2.94e-3): the schedule's end fell before its warmup."""
    cfg = dict(max_iters=10, eval_interval=100, warmup_iters=20, learning_rate=3e-3, min_lr=1e-4)
    train(tiny_config(tmp_path / "r", tiny_text_file, train=cfg), **QUIET)
    train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, max_iters=20, resume=True)), **QUIET)
    lines = []
    r = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, max_iters=30, resume=True)),
                log=lines.append)
    assert r.step == 20
    assert r.lr_at(20) == pytest.approx(3e-3)  # the warmup ended at step 20: the peak, then the cosine
    assert 1e-4 < r.lr_at(25) < r.lr_at(21) < 3e-3 and r.lr_at(30) == 1e-4
    said = [x for x in lines if x.startswith("resume:")]
    assert len(said) == 1 and "ended" not in said[0], lines
    assert "decays toward train.min_lr 0.0001, which it would first reach at step 31, after the run's last step 30" in \
        said[0], lines
    # nu42: "(the decay used to end at 20)" of a run that never decayed: what moved is the run's end
    assert said[0].endswith("(the run used to end at step 20, with no decay: its warmup reached that far); no jump "
                            "back to the peak"), said


@pytest.mark.slow
def test_a_resume_given_a_copy_of_the_embedded_corpus_goes_on_with_one_line(tmp_path, capsys):
    """nu41: ``--resume RUN --data.path COPY`` of a run trained on the embedded corpus, COPY holding the same text,
    was refused as "changed data.path None -> COPY ... these change what the run's numbers mean": the same corpus."""
    import depthlab

    emb = tmp_path / "emb"
    args = tiny_cli_args(None, emb, train__max_iters=4, train__eval_interval=2)
    i = args.index("--data.path")
    assert main(["train", *args[:i], *args[i + 2:]]) == 0
    dup = tmp_path / "shakespeare.txt"
    shutil.copyfile(Path(depthlab.__file__).parent / "data" / "tinyshakespeare.txt", dup)
    capsys.readouterr()
    assert main(["train", "--resume", str(emb), "--data.path", str(dup), "--train.max_iters", "6"]) == 0
    err = capsys.readouterr().err
    assert (f"depthlab: resume: data.path {dup} holds exactly the text of the embedded corpus the run was trained "
            "on (the sha256 config.json recorded): the run keeps the embedded corpus (config.json's data.path stays "
            "unset; this file is not needed by the run)\n") in err, err
    # nu45: config.json recorded data.path = COPY, tying the run to that file: gone, the next resume was refused,
    # and --data.path null (the embedded text it trained on) was refused as a change
    assert json.loads((emb / "config.json").read_text())["data"]["path"] is None
    assert json.loads((emb / "summary.json").read_text())["final_step"] == 6
    dup.unlink()
    assert main(["train", "--resume", str(emb), "--train.max_iters", "8"]) == 0
    assert main(["train", "--resume", str(emb), "--data.path", "null", "--train.max_iters", "10"]) == 0
    assert json.loads((emb / "config.json").read_text())["data"]["path"] is None
    assert json.loads((emb / "summary.json").read_text())["final_step"] == 10


@pytest.mark.slow
def test_a_resume_given_another_text_names_the_embedded_corpus_not_none(tmp_path, tiny_text_file, capsys):
    """nu42: a run on the embedded corpus resumed with another text was refused as "changed data.path None -> ..."."""
    emb = tmp_path / "emb"
    args = tiny_cli_args(None, emb, train__max_iters=4, train__eval_interval=2)
    i = args.index("--data.path")
    assert main(["train", *args[:i], *args[i + 2:]]) == 0
    other = tmp_path / "other.txt"
    text = (Path(depthlab_file()).parent / "data" / "tinyshakespeare.txt").read_text()
    other.write_text("\n".join(reversed(text.splitlines())) + "\n")  # the same characters, another text
    capsys.readouterr()
    rc = main(["train", "--resume", str(emb), "--data.path", str(other), "--train.max_iters", "6"])
    err = capsys.readouterr().err
    assert_clean_error(rc, err, f"changed data.path (the embedded corpus) -> '{other}'")
    assert "None" not in err


def depthlab_file() -> str:
    import depthlab

    return depthlab.__file__


def test_the_resume_command_an_interrupt_prints_is_shell_quoted_for_a_folder_with_a_space():
    """A new user's pass: `Resume with: depthlab train --resume runs/my run` pasted into a shell as two words."""
    import shlex
    from pathlib import Path

    from depthlab.trainer import Interrupted

    e = Interrupted(2, Path("runs/my run"), 804)
    assert e.exit_code == 130 and str(e).endswith("Resume with: depthlab train --resume 'runs/my run'")
    assert shlex.split(str(e).split("Resume with: ")[1])[-1] == "runs/my run"
    assert str(Interrupted(15, Path("runs/int"), 3)).endswith("--resume runs/int")  # nothing to quote: as is


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_resume_that_goes_on_from_its_checkpoints_rate_gives_no_warmup_warning(tmp_path, tiny_text_file):
    """A new user's pass: a resume of a planned run (its warmup ended at step 105 under the plan) with a new
    train.max_iters below the asked warmup_iters warned 'the peak train.learning_rate is never reached', beside the
    line saying the rate stays at min_lr: the peak had been reached; this session does not warm up again."""
    cfg = dict(max_iters=20, warmup_iters=2, learning_rate=3e-3, min_lr=1e-4)
    train(tiny_config(tmp_path / "r", tiny_text_file, train=cfg), **QUIET)
    lines = []
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, max_iters=22, warmup_iters=40,
                                                                        resume=True)), log=lines.append)
    t.fit()
    assert t.schedule.anchor is not None and not [x for x in lines if "is never reached" in x], lines
    fresh = []  # a new run asking the same: warned, as before
    Trainer(tiny_config(tmp_path / "n", tiny_text_file, train=dict(cfg, max_iters=22, warmup_iters=40)),
            log=fresh.append).fit()
    assert [x for x in fresh if "train.warmup_iters (40) >= train.max_iters (22)" in x], fresh
