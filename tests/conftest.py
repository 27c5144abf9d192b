"""Shared fixtures and builders: an isolated token cache, tiny seeded CPU configs, models, CLI flags,
run directories and synthetic records that more than one test module uses."""

import json
from pathlib import Path

import pytest
import torch

from depthlab.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from depthlab.model import GPT

torch.set_num_threads(1)  # tests are small; more threads only add noise on a 2-core machine

TINY_TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
             "First Citizen:\nYou are all resolved rather to die than to famish?\n\n") * 40


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    # seeded runs keep the rule-based CPU settings (no timing-dependent thread counts, no measuring
    # cost); tests/test_training_autotune.py turns it back on where it tests the chooser
    monkeypatch.setenv("DEPTHLAB_AUTOTUNE", "off")


@pytest.fixture
def tiny_text_file(tmp_path):
    p = tmp_path / "tiny.txt"
    p.write_text(TINY_TEXT, encoding="utf-8")
    return p


def tiny_config(out_dir, path=None, model=None, train=None) -> RunConfig:
    """n_layer 2, n_embd 32, block 16: each run takes well under a second per 20 steps."""
    m = dict(n_layer=2, n_head=2, n_embd=32, block_size=16)
    m.update(model or {})
    t = dict(out_dir=str(out_dir), batch_size=4, max_iters=20, eval_interval=10, eval_iters=2,
             log_interval=5, warmup_iters=2, learning_rate=3e-3, progress=False, tensorboard=False,
             grad_log_interval=0, probe_interval=0, dtype="float32", max_time=0.0)
    t.update(train or {})
    return RunConfig(DataConfig(path=str(path) if path else None), ModelConfig(**m), TrainConfig(**t))


QUIET = dict(log=lambda s: None)  # train(..., **QUIET) / Trainer(..., **QUIET): no progress lines

#: The tiny model of the unit tests: V 11, 2 blocks of 2 heads, C 16, context 8.
TINY_MODEL = dict(vocab_size=11, n_layer=2, n_head=2, n_embd=16, block_size=8)


def tiny_model_config(**kw) -> ModelConfig:
    """:data:`TINY_MODEL` with ``kw`` overriding its fields."""
    return ModelConfig(**{**TINY_MODEL, **kw})


def tiny_gpt(seed: int = 0, **kw) -> GPT:
    """A GPT of :func:`tiny_model_config` (``kw``), initialised under ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    return GPT(tiny_model_config(**kw))


def trained_tiny_run(tmp_path_factory, name: str, text: str, steps: int = 10):
    """A run directory ``<tmp>/<name>/run`` trained ``steps`` steps on ``text`` (:func:`tiny_cli_args`): the
    source of the module-scoped fixtures that copy or read one finished run."""
    from depthlab.cli import main

    d = tmp_path_factory.mktemp(name)
    (d / "t.txt").write_text(text)
    assert main(["train", *tiny_cli_args(d / "t.txt", d / "run", train__max_iters=steps)]) == 0
    return d / "run"


def tiny_cli_args(path, out, **fields) -> list[str]:
    """``depthlab train`` flags of the run :func:`tiny_config` describes (n_embd 32, block 16).

    ``fields`` override or add flags, dotted names spelt with ``__``: ``train__max_iters=600``.
    """
    flags = {"data.path": path, "model.n_layer": 2, "model.n_head": 2, "model.n_embd": 32,
             "model.block_size": 16, "train.batch_size": 8, "train.max_iters": 20, "train.eval_interval": 5,
             "train.eval_iters": 2, "train.tensorboard": "false", "train.threads": 1, "train.out_dir": out}
    flags.update({k.replace("__", "."): v for k, v in fields.items()})
    return [a for k, v in flags.items() for a in (f"--{k}", str(v))]


def evals(run) -> list[tuple[int, float, float]]:
    """(step, train_loss, val_loss) of every evaluation in ``run/metrics.jsonl``, in file order."""
    lines = (Path(run) / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [(r["step"], r["train_loss"], r["val_loss"]) for r in map(json.loads, lines) if "val_loss" in r]


def tiny_sweep_spec(text_file, grid, base, **over):
    """A one-experiment :class:`depthlab.sweep.SweepSpec` over ``grid`` on ``base`` (dotted fields) and
    ``text_file``; ``over`` adds or overrides fields, dotted names spelt with ``__``."""
    from depthlab import sweep

    fields = {**base, "data.path": str(text_file), **{k.replace("__", "."): v for k, v in over.items()}}
    return sweep.SweepSpec(experiments=[sweep.Experiment(grid=grid)], base=fields)


def read_sweep_rows(sweep_dir) -> list[dict]:
    """The rows of ``sweep_dir/results.csv`` as dicts of strings."""
    import csv

    with open(Path(sweep_dir) / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def run_two_ranks(worker, out, text, case, timeout=90) -> dict:
    """Run ``worker(rank, port, out, text, case, queue)`` as two spawned processes (gloo ranks on
    127.0.0.1) and return ``{rank: tuple(what it put after its rank)}``.

    Fails the test, after killing both, when a rank reports nothing within ``timeout`` seconds:
    the ranks disagreed on stopping and one is waiting in a collective.
    """
    import multiprocessing as mp
    import queue as queue_mod
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, port, str(out), str(text), case, q)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        got = [q.get(timeout=timeout) for _ in procs]
    except queue_mod.Empty:
        for p in procs:
            p.kill()
        pytest.fail(f"{case}: a rank was still waiting after {timeout} s (the ranks disagreed on stopping)")
    for p in procs:
        p.join(30)
    assert not any(p.is_alive() for p in procs)
    return {r: tuple(rest) for r, *rest in got}


def weights_hash(run, name="best.safetensors") -> str:
    """The payload sha256 of ``run/checkpoints/name`` (equal weights, equal hash)."""
    from depthlab.checkpoint import CKPT_DIR, payload_sha256

    return payload_sha256(Path(run) / CKPT_DIR / name)


# ----------------------------------------------------------------------------- the command line
def run_cli(capsys, *argv):
    """``depthlab ARGV`` in this process: (exit code, stdout, stderr)."""
    from depthlab.cli import main

    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def assert_clean_error(rc, err, *needles):
    """Exit code 2 and one ``depthlab: error:`` line on stderr holding every needle, no traceback."""
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("depthlab: error:"), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def cli_err(capsys, *argv) -> str:
    """stderr of ``depthlab ARGV``, after checking it is exit code 2 and one ``depthlab: error:`` line."""
    from depthlab.cli import main

    rc = main(list(argv))
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("depthlab: error:") and len(err.strip().splitlines()) == 1, err
    return err


def cli_print_config(capsys, *argv) -> str:
    """stdout of ``depthlab ARGV`` with ``--print_config`` in it (which exits 0)."""
    from depthlab.cli import main

    with pytest.raises(SystemExit) as e:
        main(list(argv))
    assert e.value.code == 0
    return capsys.readouterr().out


def train_cmd(*args) -> list[str]:
    """``python -m depthlab train ARGS``: a training process of its own (to be killed or signalled)."""
    import sys

    return [sys.executable, "-m", "depthlab", "train", *args]


def dropout_cli_args(path, out, iters, **fields) -> list[str]:
    """:func:`tiny_cli_args` with dropout 0.1 (so the torch RNG state matters on resume) and ``iters`` steps."""
    return tiny_cli_args(path, out, model__dropout=0.1, train__max_iters=iters, **fields)


# ----------------------------------------------------------------------------- train.fit_to_time
@pytest.fixture
def fake_clock(monkeypatch):
    """The trainer's clock advances ``now[1]`` (10 ms) per reading: timings, hence the plan, are
    deterministic. Returns ``now = [clock, seconds per reading]``."""
    import time
    import types

    import depthlab.trainer as tr

    now = [1000.0, 0.01]

    def tick():
        now[0] += now[1]
        return now[0]

    monkeypatch.setattr(tr, "time", types.SimpleNamespace(time=tick, perf_counter=time.perf_counter,
                                                          strftime=time.strftime, sleep=time.sleep))
    return now


class OnStep:
    """A callback that calls ``fn()`` after every optimizer step and keeps what it returns in ``seen``."""

    def __init__(self, fn):
        self.fn, self.seen = fn, []

    def __getattr__(self, name):  # every other hook: nothing
        return lambda *a, **k: None

    def on_step_end(self, run, info):
        self.seen.append(self.fn())


class StopAt:
    """A callback that asks the trainer to stop (as SIGTERM would) after step ``step``."""

    def __init__(self, step):
        self.step = step

    def __getattr__(self, name):  # every other hook: nothing
        return lambda *a, **k: None

    def on_step_end(self, run, info):
        if info.step == self.step:
            run.request_stop(15)


def fit_run(tmp_path, tiny_text_file, name, stop_at=None, **train):
    """A ``train.fit_to_time`` run of 6 s asked for 100,000 steps: (trainer, summary.json, config.json)."""
    from depthlab.trainer import Trainer

    cfg = dict(max_iters=100_000, max_time=6.0, eval_interval=50, log_interval=10, min_lr=1e-4)
    cfg.update(train)
    t = Trainer(tiny_config(tmp_path / name, tiny_text_file, train=cfg),
                callbacks=[StopAt(stop_at)] if stop_at else [], **QUIET)
    run = t.fit()
    return t, json.loads((run / "summary.json").read_text()), json.loads((run / "config.json").read_text())


def fit_resume(tmp_path, tiny_text_file, name, **train):
    """Resume the run ``name`` of :func:`fit_run` from its config.json: (trainer, summary.json, config.json)."""
    from depthlab.trainer import Trainer

    c = json.loads((tmp_path / name / "config.json").read_text())
    cfg = RunConfig.from_dict(c)
    cfg.train.resume = True
    t = Trainer(cfg, **QUIET)
    run = t.fit()
    return t, json.loads((run / "summary.json").read_text()), json.loads((run / "config.json").read_text())


# ----------------------------------------------------------------------------- corpora
VAL_WORD = "Xylophonequartz "


@pytest.fixture
def bpe_file(tmp_path):
    """TINY_TEXT, then a validation tail made of a word the train part never has."""
    train_part = TINY_TEXT + "café 世界 naïve\n"
    n = len(train_part)
    tail = (VAL_WORD * (n // 9 // len(VAL_WORD) + 1))[: n // 9]  # 10 % of the whole
    p = tmp_path / "bpe.txt"
    p.write_text(train_part + tail, encoding="utf-8")
    return p


def bpe_run_config(tmp_path, path, **train) -> RunConfig:
    """A tiny run (context 64) of a byte-level BPE of 300 tokens on ``path``, in ``tmp_path/bpe_run``."""
    cfg = tiny_config(tmp_path / "bpe_run", path, model=dict(block_size=64),
                      train={"max_iters": 20, "eval_iters": 3, **train})
    cfg.data.tokenizer, cfg.data.vocab_size = "bpe", 300
    return cfg


def made_up_names(n=2000, seed=0) -> list[str]:
    """n distinct made-up names (letters only), sorted alphabetically."""
    import random

    rng = random.Random(seed)
    out = set()
    while len(out) < n:
        out.add("".join(rng.choice("aeioubcdfghklmnprstvz") for _ in range(rng.randint(3, 9))).capitalize())
    return sorted(out)


@pytest.fixture
def names_files(tmp_path):
    """(sorted.txt, shuffled.txt, names): 2,000 names one per line, alphabetically and shuffled."""
    import random

    names = made_up_names()
    shuffled = names[:]
    random.Random(1).shuffle(shuffled)
    a, b = tmp_path / "sorted.txt", tmp_path / "shuffled.txt"
    a.write_text("\n".join(names) + "\n")
    b.write_text("\n".join(shuffled) + "\n")
    return a, b, names


# ----------------------------------------------------------------------------- a run of the previous release
# ``tests/fixtures/run_v0`` was made by the previous release's code (5c2efe6, before the architecture
# refactor; ``git worktree add /tmp/oldrel 5c2efe6``)::
#
#     PYTHONPATH=/tmp/oldrel/src python -m depthlab train --model.n_layer 1 --model.n_embd 16 \
#         --model.n_head 2 --model.block_size 16 --train.batch_size 4 --train.max_iters 6 \
#         --train.eval_interval 3 --train.eval_iters 1 --train.log_interval 3 --train.dtype float32 \
#         --train.max_time 0 --train.tensorboard false --train.probe_interval 3 \
#         --train.grad_log_interval 3 --data.path tests/fixtures/corpus.txt --train.out_dir tests/fixtures/run_v0
#
# Its eval and train records have no ``kind`` (only grad/probe records had one), its config.json
# stores ``data.path`` relative to the repository root, and its checkpoints are format 1. Tests that it
# still loads: test_rundir.py, test_sample.py, test_analytics_diagnose.py, test_report_html.py, test_resume.py.
FIXTURES = Path(__file__).resolve().parent / "fixtures"
CORPUS = FIXTURES / "corpus.txt"
OLD_EVALS = {0: 3.9425461292266846, 3: 3.9417850971221924, 6: 3.939636468887329}  # val_loss, from the old run


@pytest.fixture
def old_run(tmp_path):
    """A copy of the old run, its data.path pointed at the committed corpus (it was relative to the repo)."""
    import shutil

    rd = Path(shutil.copytree(FIXTURES / "run_v0", tmp_path / "run_v0"))
    cfg = json.loads((rd / "config.json").read_text())
    assert cfg["data"]["path"] == "tests/fixtures/corpus.txt"  # the fixture is what we think it is
    cfg["data"]["path"] = str(CORPUS)
    (rd / "config.json").write_text(json.dumps(cfg, indent=2))
    return rd


# ----------------------------------------------------------------------------- run directories for the report
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CONTENT_PX = 1240 - 2 * 28  # the report's content column (main max-width minus padding)
RUN_FIGURES = ("loss", "grad_flow", "grad_layers", "update_ratio", "activations", "attn_entropy", "attention",
               "layers", "context")
PROBED_N_LAYER, PROBED_N_HEAD = 3, 8


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the IHDR chunk; asserts the file is a PNG."""
    import struct

    data = Path(path).read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def png_width(path: Path) -> int:
    return png_size(path)[0]


def write_run_dir(tmp_path, records, **files) -> Path:
    """``tmp_path/run`` with a 2-block config, ``records`` in metrics.jsonl (then a torn line) and
    ``files`` ({name: JSON object})."""
    from depthlab.rundir import CONFIG, METRICS

    rd = tmp_path / "run"
    rd.mkdir()
    (rd / CONFIG).write_text(json.dumps({"model": {"n_layer": 2, "variant": "prenorm", "block_size": 8},
                                         "train": {"batch_size": 4}}))
    (rd / METRICS).write_text("".join(json.dumps(r) + "\n" for r in records) + '{"torn": ')
    for name, obj in files.items():
        (rd / name).write_text(json.dumps(obj))
    return rd


def fresh_copy(run_dir: Path, dest: Path) -> Path:
    """A copy of a shared run without its plots/ and report.html (so every PNG or page found later was written by
    the test, whichever tests ran before)."""
    import shutil

    dest = Path(shutil.copytree(run_dir, dest))
    shutil.rmtree(dest / "plots", ignore_errors=True)
    (dest / "report.html").unlink(missing_ok=True)
    return dest


def add_synthetic_analytics(rd: Path, n_layer: int = 2, n_head: int = 2, steps=range(0, 21, 5)) -> None:
    """Append gradient/probe records and write baselines.json and diagnosis.json (the analytics contract)."""
    import math

    with open(rd / "metrics.jsonl", "a", encoding="utf-8") as f:
        for s in steps:
            g = [0.2 * 3.0 ** b * (1 + s / 20) for b in range(n_layer)]
            f.write(json.dumps({
                "step": s, "kind": "grad", "grad_2.0_norm_total": math.sqrt(sum(x * x for x in g)),
                "grad_2.0_norm/transformer.h.0.attn.c_attn.weight": g[0] / 2,
                "grad_norm_block": g, "mean_abs_grad_block": [x / 100 for x in g],
                "update_ratio_block": [1e-3 * (b + 1) / (1 + s / 10) for b in range(n_layer)],
                "weight_norm_block": [3.0] * n_layer,
                "grad_norm_component": {"embeddings": 0.1, "attn.c_attn": 0.2, "mlp.c_fc": 0.3, "head": 0.4},
                "update_ratio_component": {"head": 1e-3}}) + "\n")
            f.write(json.dumps({
                "step": s, "kind": "probe", "resid_rms": [1.0 + b for b in range(n_layer)],
                "attn_out_rms": [0.5] * n_layer, "mlp_out_rms": [0.7] * n_layer,
                "attn_entropy": [[2.0 - 0.02 * s * (h + 1) for h in range(n_head)] for b in range(n_layer)],
                "attn_entropy_uniform": 2.2, "rank_measure": [0.9 / (b + 1) for b in range(n_layer)],
                "token_cosine": [0.2 + 0.1 * b for b in range(n_layer)], "dead_frac": None,
                "rezero_alpha": None}) + "\n")
        f.write(json.dumps({"step": 21, "kind": "grad", "grad_norm_block": ["nan", "inf"]}) + "\n")  # tolerated
    (rd / "baselines.json").write_text(json.dumps({
        "uniform": {"nats": math.log(24), "bits_per_char": math.log2(24)},
        "unigram": {"nats": 2.9, "bits_per_char": 2.9 / math.log(2)},
        "bigram": {"nats": 2.1, "bits_per_char": 2.1 / math.log(2)}, "vocab_size": 24}))
    (rd / "diagnosis.json").write_text(json.dumps({"findings": [
        {"rule": "plateau", "evidence": "no improvement <for> 3 evals & counting", "remedy": "lower the LR"}]}))


@pytest.fixture(scope="session")
def report_run(tmp_path_factory):
    """One tiny real run (TensorBoard on) plus synthetic analytics records, shared by the report tests
    (they copy it before changing anything)."""
    from depthlab import train

    base = tmp_path_factory.mktemp("report")
    text = base / "tiny.txt"
    text.write_text(TINY_TEXT, encoding="utf-8")
    cfg = tiny_config(base / "run", text, train={"tensorboard": True})
    cfg.data.cache_dir = str(base / "cache")
    rd = train(cfg, **QUIET)
    add_synthetic_analytics(rd)
    return rd


@pytest.fixture(scope="session")
def report_page(report_run):
    """``report_run``'s report.html, every figure drawn."""
    from depthlab.report import build_report

    return build_report(report_run)


@pytest.fixture(scope="session")
def probed_run(tmp_path_factory):
    """A tiny real run with 8 heads, 3 blocks, probes, gradient records and samples every 5 steps."""
    from depthlab import train

    base = tmp_path_factory.mktemp("probed")
    text = base / "tiny.txt"
    text.write_text(TINY_TEXT, encoding="utf-8")
    cfg = tiny_config(base / "run", text, model={"n_layer": PROBED_N_LAYER, "n_head": PROBED_N_HEAD},
                      train={"max_iters": 15, "eval_interval": 5, "sample_interval": 5, "sample_tokens": 20,
                             "grad_log_interval": 5, "probe_interval": 5})
    cfg.data.cache_dir = str(base / "cache")
    rd = train(cfg, **QUIET)
    with open(rd / "metrics.jsonl", "a", encoding="utf-8") as f:  # one sample with HTML in it
        f.write(json.dumps({"kind": "sample", "step": 15, "text": "<b>bold</b> & co"}) + "\n")
    return rd


@pytest.fixture(scope="session")
def probed_page(probed_run):
    """``probed_run``'s report.html, every figure drawn."""
    from depthlab.report import build_report

    return build_report(probed_run)


def read_hparams(tb_dir):
    """(hparams {name: value}, metric names, scalars {tag: [(step, value)]}) of the event files in ``tb_dir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    ea = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    ea.Reload()
    content = ea.PluginTagToContent(metadata.PLUGIN_NAME)
    start = HParamsPluginData.FromString(content[metadata.SESSION_START_INFO_TAG]).session_start_info
    exp = HParamsPluginData.FromString(content[metadata.EXPERIMENT_TAG]).experiment
    hp = {}
    for k, v in start.hparams.items():
        kind = v.WhichOneof("kind")
        hp[k] = getattr(v, kind)
    metrics = sorted(m.name.tag for m in exp.metric_infos)
    scalars = {t: [(e.step, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}
    return hp, metrics, scalars


# ----------------------------------------------------------------------------- synthetic records for the diagnosis
SHAKESPEARE_BASELINES = {"uniform": {"nats": 4.174, "bits_per_char": 6.02},
                         "unigram": {"nats": 3.347, "bits_per_char": 4.83},
                         "bigram": {"nats": 2.482, "bits_per_char": 3.58}, "vocab_size": 65}


def eval_records(vals, trains=None, every=100, tokens_per_step=1024) -> list[dict]:
    """Evaluation records with val losses ``vals`` (train losses ``trains``, default the same) every ``every`` steps."""
    trains = trains or vals
    return [{"step": i * every, "val_loss": v, "train_loss": t, "tokens_seen": i * every * tokens_per_step}
            for i, (v, t) in enumerate(zip(vals, trains))]


def grad_record(step, blocks, upd=None) -> dict:
    """A gradient record: per-block gradient norms ``blocks``, update ratios ``upd`` (default 1e-3 each)."""
    return {"step": step, "kind": "grad", "grad_norm_block": blocks,
            "update_ratio_block": upd or [1e-3] * len(blocks)}


def probe_record(step, rank, ent=None, u=4.0, cos=None) -> dict:
    """A probe record: per-block rank measures ``rank``, attention entropies ``ent`` (uniform level ``u``)."""
    return {"step": step, "kind": "probe", "rank_measure": rank, "token_cosine": cos or [0.1] * len(rank),
            "attn_entropy": ent or [[1.0, 1.0]] * len(rank), "attn_entropy_uniform": u}


def context_record(step, curve, windows=64) -> dict:
    """A loss-by-position record (``event: context``) of the curve ``curve`` (nats per position), its
    context gain = curve[0] minus the mean over the last quarter (the curve of identical windows: se 0)."""
    q = max(1, len(curve) // 4)
    gain = curve[0] - sum(curve[-q:]) / q if len(curve) > 1 else None
    return {"step": step, "kind": "event", "event": "context", "loss_by_position": list(curve),
            "context_gain": gain, "context_gain_se": 0.0, "windows": windows, "tokens": windows * len(curve)}


# ----------------------------------------------------------------------------- sweeps
TINY_SWEEP = {"model.n_layer": 1, "model.n_head": 2, "model.n_embd": 16, "model.block_size": 16,
              "train.batch_size": 4, "train.max_iters": 4, "train.eval_interval": 2, "train.eval_iters": 1,
              "train.log_interval": 2, "train.warmup_iters": 1, "train.grad_log_interval": 2,
              "train.probe_interval": 2, "train.keep_last": 1}
"""A sweep's base: one 16-wide block, 4 steps, an evaluation, gradient record and probe every 2 steps."""


def sweep_item(v, L, loss, seed=1, status="ok", rank=None, evals=(), grads=None, **cfg) -> dict:
    """A synthetic per-run item (config, row, details) as the sweep's results give it to the judges."""
    model = {"variant": v, "n_layer": L, "init": cfg.pop("init", "gpt2"), "n_embd": cfg.pop("width", 32),
             "block_size": 64}
    train = {"seed": seed, "max_iters": 10, "learning_rate": cfg.pop("lr", 1e-2),
             "warmup_iters": cfg.pop("warmup", 0), "eval_interval": 25, "batch_size": 16, "grad_accum": 1}
    probe = {"rank_measure": [rank or 0.5]}
    if grads:
        probe["grad_norm_block"] = grads
    return {"config": {"model": model, "train": train},
            "row": {"status": status, "best_val_loss": loss, "run": f"runs/{v}{L}"},
            "details": {"evals": list(evals), "grad": [], "probe": [], "init_probe": probe}}


# ----------------------------------------------------------------------------- models
def bigger_logits(m: GPT) -> GPT:
    """Scale the head so logits spread over several nats (a random init is near-uniform; untie first
    or the embeddings grow too); returns ``m`` in eval mode."""
    with torch.no_grad():
        m.lm_head.weight.mul_(20.0)
    return m.eval()


def muon_model_and_optimizer(seed=0):
    """A :func:`tiny_gpt` and the Muon + AdamW optimizer ``train.optimizer muon`` gives it."""
    from depthlab.config import TrainConfig
    from depthlab.trainer import make_optimizer

    m = tiny_gpt(seed)
    return m, make_optimizer(m, TrainConfig(optimizer="muon"), torch.device("cpu"))

