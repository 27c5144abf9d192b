"""Reliability cases from users' bug reports: resume, checkpoints, non-finite guard, odd inputs."""

import functools
import json
import math
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from depthlab import checkpoint as ckpt
from depthlab.config import RunConfig
from depthlab.data import CharTokenizer
from depthlab.errors import DepthlabError, NonFiniteError
from depthlab.model import GPT
from depthlab.sample import check_sampling_args, generate, load_run, sample_text
from depthlab import train
from depthlab.trainer import Trainer

from conftest import QUIET, TINY_TEXT, evals, tiny_cli_args, tiny_config, tiny_gpt

def test_compiled_checkpoint_keys_are_stripped_and_accepted(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "r", tiny_text_file), **QUIET)
    model, _ = load_run(run)
    compiled = torch.compile(model)  # lazy: the wrapper's keys carry _orig_mod. without compiling
    assert all(k.startswith("_orig_mod.") for k in compiled.state_dict())
    data = ckpt.weights_bytes(compiled, {"format": "1"})
    from safetensors.torch import load

    assert not any("_orig_mod" in k or k.startswith("module.") for k in load(data))
    # a foreign checkpoint that still has the prefixes loads too
    from safetensors.torch import save_file

    foreign = {f"_orig_mod.{k}": v.contiguous() for k, v in model.state_dict().items()
               if k != "lm_head.weight"}
    save_file(foreign, tmp_path / "foreign.safetensors")
    sd, _ = ckpt.load_weights_file(tmp_path / "foreign.safetensors")
    fresh = GPT(model.config)
    ckpt.load_into(fresh, sd, tmp_path / "foreign.safetensors")
    assert torch.equal(fresh.lm_head.weight, model.lm_head.weight)


def test_nan_stops_and_best_checkpoint_untouched(tmp_path, tiny_text_file):
    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(learning_rate=1e3, min_lr=0.0, warmup_iters=0,
                                                                  grad_clip=0.0, max_iters=300, eval_interval=1000,
                                                                  optimizer="adamw"))
    with pytest.raises(NonFiniteError) as e:
        train(cfg, **QUIET)
    msg = str(e.value)
    assert "at step" in msg and "lr 1e+03" in msg and "float32" in msg
    manifest = json.loads((tmp_path / "r" / "checkpoints" / "manifest.json").read_text())
    assert manifest["best"]["step"] == 0  # only the step-0 checkpoint was ever written
    sd, _ = ckpt.load_weights_file(tmp_path / "r" / "checkpoints" / "best.safetensors")
    assert all(torch.isfinite(v).all() for v in sd.values())


def test_nonfinite_skip_counts(tmp_path, tiny_text_file):
    from depthlab.callbacks import Callback

    class Poison(Callback):  # makes step 3's gradient NaN, once
        def on_before_clip(self, trainer, info):
            if info.step == 3:
                next(trainer.raw_model.parameters()).grad.fill_(float("nan"))

    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(on_nonfinite="skip", max_iters=10))
    run = train(cfg, callbacks=[Poison()], **QUIET)
    s = json.loads((run / "summary.json").read_text())
    assert s["nonfinite_skips"] == 1 and s["final_step"] == 10
    cfg = tiny_config(tmp_path / "r2", tiny_text_file, train=dict(max_iters=10))
    with pytest.raises(NonFiniteError, match="transformer.wte.weight"):
        train(cfg, callbacks=[Poison()], **QUIET)


def test_resume_rejects_other_vocabulary_and_shape(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=10)), **QUIET)
    other = tmp_path / "other.txt"
    other.write_text(TINY_TEXT + "Zebra ☕ quux\n")
    cfg = tiny_config(run, other, train=dict(resume=True, max_iters=20))
    with pytest.raises(DepthlabError) as e:
        train(cfg, **QUIET)
    assert "vocabulary" in str(e.value) and "Z" in str(e.value) and "☕" in str(e.value)
    cfg = tiny_config(run, tiny_text_file, model=dict(n_layer=3), train=dict(resume=True, max_iters=20))
    with pytest.raises(DepthlabError, match="model.n_layer 2 -> 3"):
        train(cfg, **QUIET)


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
    assert t.step == 10 and any("step-000020.safetensors" in line and "corrupt" in line for line in logs)
    best = run / "checkpoints" / "best.safetensors"
    best.write_bytes(best.read_bytes()[:50])
    with pytest.raises(DepthlabError, match="best.safetensors"):
        load_run(run)
    for f in (run / "checkpoints").glob("step-*.safetensors"):
        f.write_bytes(b"junk")
    with pytest.raises(DepthlabError, match="no intact checkpoint"):
        Trainer(tiny_config(run, tiny_text_file, train=dict(resume=True, max_iters=30)), **QUIET)


def test_init_from_starts_new_run_with_old_weights(tmp_path, tiny_text_file):
    old = train(tiny_config(tmp_path / "old", tiny_text_file), **QUIET)
    t = Trainer(tiny_config(tmp_path / "new", tiny_text_file), init_from=str(old), **QUIET)
    m, _ = load_run(old)
    assert torch.equal(t.raw_model.lm_head.weight, m.lm_head.weight) and t.step == 0


def test_tied_weights_share_storage_after_load(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "r", tiny_text_file), **QUIET)
    m, _ = load_run(run)
    assert m.lm_head.weight is m.transformer.wte.weight
    assert m.lm_head.weight.data_ptr() == m.transformer.wte.weight.data_ptr()
    n_vocab = m.config.vocab_size
    assert m.num_params(non_embedding=False) == sum(p.numel() for p in m.parameters())
    untied = sum(p.numel() for p in m.state_dict().values())
    assert untied - m.num_params(non_embedding=False) == n_vocab * m.config.n_embd


def test_tiny_corpora(tmp_path):
    p = tmp_path / "30.txt"
    p.write_text("abcdefghij" * 3)
    with pytest.raises(DepthlabError) as e:
        train(tiny_config(tmp_path / "a", p, model=dict(block_size=64)), **QUIET)
    assert "30" in str(e.value) and "65" in str(e.value)
    run = train(tiny_config(tmp_path / "b", p, model=dict(block_size=8), train=dict(max_iters=5)), **QUIET)
    assert json.loads((run / "summary.json").read_text())["final_step"] == 5
    one = tmp_path / "one.txt"
    one.write_text("a" * 200)
    logs = []
    train(tiny_config(tmp_path / "c", one, model=dict(block_size=8), train=dict(max_iters=5)), log=logs.append)
    assert any("single distinct character" in line for line in logs)


def test_no_newline_no_space_corpus_samples_without_prompt(tmp_path):
    p = tmp_path / "dense.txt"
    p.write_text("abcabcabdabc" * 40)
    run = train(tiny_config(tmp_path / "r", p, train=dict(max_iters=5)), **QUIET)
    text = sample_text(run, "", 20, seed=0)[0]
    assert len(text) == 21 and set(text) <= set("abcd")


def test_crlf_and_cr_shakespeare_keep_65_symbols(tmp_path):
    from depthlab.config import DataConfig
    from depthlab.data import embedded_corpus_path, load_corpus

    text = embedded_corpus_path().read_text()
    for name, nl in (("crlf", "\r\n"), ("cr", "\r")):
        p = tmp_path / f"{name}.txt"
        p.write_bytes(text.replace("\n", nl).encode())
        c = load_corpus(DataConfig(path=str(p)))
        assert c.tokenizer.vocab_size == 65 and "\r" not in c.tokenizer.vocab
        assert c.tokenizer.decode(c.tokens[:200]).count("\n") == text[:200].count("\n")


def test_cp1252_trains_with_encoding(tmp_path):
    p = tmp_path / "w.txt"
    p.write_bytes(b"It\x92s a fine day, isn\x92t it?\n" * 30)
    run = train(tiny_config(tmp_path / "r", p, train=dict(max_iters=3)).__class__.from_dict(
        {**tiny_config(tmp_path / "r", p, train=dict(max_iters=3)).to_dict(),
         "data": {"path": str(p), "encoding": "cp1252"}}), **QUIET)
    vocab = json.loads((run / "vocab.json").read_text())
    assert "\u2019" in vocab and "\x92" not in vocab


# ------------------------------------------------------------------------- fuzzing
@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1))
def test_fuzz_tokenizer_round_trip(text):
    tok = CharTokenizer.from_text(text)
    assert tok.decode(tok.encode(text)) == text


_values = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=8), st.lists(st.integers(), max_size=3))
_keys = st.sampled_from(["n_layer", "n_head", "n_embd", "block_size", "dropout", "variant", "norm", "bias",
                         "batch_size", "max_iters", "learning_rate", "path", "encoding", "val_fraction",
                         "seed", "device", "dtype", "bogus", "eval_interval", "min_lr"])


@st.composite
def _valid_config(draw):
    """A dict of valid values for every config field (dependent fields drawn together)."""
    from depthlab.config import NORMS, VARIANTS

    n_head = draw(st.integers(1, 16))
    warmup = draw(st.integers(0, 1000))
    lr = draw(st.floats(1e-6, 1.0))
    model = dict(n_layer=draw(st.integers(1, 64)), n_head=n_head, n_embd=n_head * draw(st.integers(1, 64)),
                 block_size=draw(st.integers(1, 4096)), dropout=draw(st.floats(0.0, 0.99)),
                 bias=draw(st.booleans()), ff_mult=draw(st.integers(1, 8)),
                 activation=draw(st.sampled_from(["gelu", "relu"])), variant=draw(st.sampled_from(VARIANTS)),
                 norm=draw(st.sampled_from(NORMS)), tie_weights=draw(st.booleans()),
                 init=draw(st.sampled_from(["gpt2", "torch"])), vocab_size=draw(st.integers(0, 10**5)))
    train = dict(batch_size=draw(st.integers(1, 512)), grad_accum=draw(st.integers(1, 8)),
                 max_iters=draw(st.integers(1, 10**6)), max_time=draw(st.floats(0.0, 1e6)), learning_rate=lr,
                 min_lr=lr * draw(st.floats(0.0, 1.0)), warmup_iters=warmup,
                 lr_decay_iters=draw(st.one_of(st.just(0), st.integers(max(warmup, 1), 10**6))),
                 weight_decay=draw(st.floats(0.0, 1.0)), beta1=draw(st.floats(0.0, 0.999)),
                 beta2=draw(st.floats(0.0, 0.999)), grad_clip=draw(st.floats(0.0, 10.0)),
                 eval_interval=draw(st.integers(1, 10**4)), seed=draw(st.integers(0, 2**63 - 1)),
                 device=draw(st.sampled_from(["auto", "cpu", "cuda", "cuda:1", "mps"])),
                 dtype=draw(st.sampled_from(["float32", "bfloat16", "auto"])),
                 attention=draw(st.sampled_from(["auto", "sdpa", "explicit"])),
                 on_nonfinite=draw(st.sampled_from(["stop", "skip"])), target_val_loss=draw(st.floats(0.0, 5.0)),
                 grad_log_interval=draw(st.integers(0, 1000)), probe_interval=draw(st.integers(0, 1000)))
    data = dict(path=draw(st.one_of(st.none(), st.text(min_size=1, max_size=8))),
                encoding=draw(st.sampled_from(["utf-8", "cp1252", "latin-1", "utf-16"])),
                val_fraction=draw(st.floats(0.0, 0.5, exclude_min=True)))
    sections = {"model": model, "train": train, "data": data}
    keep = draw(st.sets(st.sampled_from(sorted(sections))))  # absent sections take the defaults
    return {k: v for k, v in sections.items() if k in keep}


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["data", "model", "train", "extra"]),
                       st.dictionaries(_keys, _values, max_size=4), max_size=3),
       _valid_config())
def test_fuzz_config_raises_only_depthlab_error(d, valid):
    cfg = RunConfig.from_dict(valid)  # valid values are accepted, as given
    got = cfg.to_dict()
    for section, fields in valid.items():
        assert {k: got[section][k] for k in fields} == fields
    assert RunConfig.from_dict(got) == cfg  # config.json round trip
    try:
        RunConfig.from_dict(d)
    except DepthlabError:
        pass


@functools.cache
def _sampler_model():
    return tiny_gpt(vocab_size=7, block_size=4, n_layer=1, n_head=1, n_embd=8).eval()


@settings(max_examples=150, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True, width=32), st.one_of(st.none(), st.integers(-5, 300)),
       st.one_of(st.none(), st.floats(-1, 2), st.just(float("nan"))))
@example(0.8, 200, None).via("the CLI defaults")
@example(0.0, None, None).via("greedy")
@example(1.5, 1, 0.3).via("top-k 1")
@example(1.0, 0, 1.0).via("top-k off, top-p no filter")
def test_fuzz_sampler_settings(temperature, top_k, top_p):
    valid = (math.isfinite(temperature) and temperature >= 0 and (top_k is None or top_k >= 0)
             and (top_p is None or 0 < top_p <= 1))  # the documented ranges, checked independently
    if not valid:
        with pytest.raises(DepthlabError):
            check_sampling_args(temperature, top_k, top_p)
        return
    check_sampling_args(temperature, top_k, top_p)  # valid settings are accepted
    model = _sampler_model()
    start = torch.zeros(1, 1, dtype=torch.long)
    out = generate(model, start, 6, temperature, top_k, top_p, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 7) and int(out.min()) >= 0 and int(out.max()) < 7 and out[0, 0] == 0
    if temperature == 0 or top_k == 1:  # one token left: the greedy continuation, whatever the seed
        greedy = start
        with torch.no_grad():
            for _ in range(6):
                logits, _ = model(greedy[:, -4:])
                greedy = torch.cat([greedy, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        assert torch.equal(out, greedy)


# ------------------------------------------------------------------------- processes killed for real
def _cli(*args):
    return [sys.executable, "-m", "depthlab", "train", *args]


def _tiny_args(path, out, iters, **fields):
    return tiny_cli_args(path, out, model__dropout=0.1, train__max_iters=iters, **fields)


@pytest.mark.slow
@pytest.mark.parametrize("accum", ["1", "2"])
def test_sigkill_then_resume_is_bit_exact(tmp_path, tiny_text_file, accum):
    n = 600
    args_a = _tiny_args(tiny_text_file, tmp_path / "A", n) + ["--train.grad_accum", accum]
    subprocess.run(_cli(*args_a), check=True, capture_output=True)
    args_b = _tiny_args(tiny_text_file, tmp_path / "B", n) + ["--train.grad_accum", accum]
    p = subprocess.Popen(_cli(*args_b), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    manifest = tmp_path / "B" / "checkpoints" / "manifest.json"
    deadline = time.time() + 60
    while time.time() < deadline and not (manifest.exists() and '"step": 10' in manifest.read_text()):
        time.sleep(0.05)
    time.sleep(random.uniform(0.0, 0.3))
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not (tmp_path / "B" / "summary.json").exists(), "B finished before the kill: make it longer"
    subprocess.run(_cli("--resume", str(tmp_path / "B")), check=True, capture_output=True)
    assert evals(tmp_path / "A") == evals(tmp_path / "B")
    name = f"step-{n:06d}.safetensors"
    assert ckpt.payload_sha256(tmp_path / "A" / "checkpoints" / name) == \
        ckpt.payload_sha256(tmp_path / "B" / "checkpoints" / name)
    steps = [json.loads(l)["step"] for l in open(tmp_path / "B" / "metrics.jsonl")]
    assert len(steps) == len([json.loads(l)["step"] for l in open(tmp_path / "A" / "metrics.jsonl")])


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
def test_twenty_kills_during_checkpoint_writes_always_resume(tmp_path, tiny_text_file):
    """A checkpoint every step, SIGKILL at random moments: after every kill each file the manifest
    names is intact, the next process resumes from the manifest's newest checkpoint, and the run
    then ends with exactly the weights and evaluations of a run that was never interrupted."""
    out = tmp_path / "R"
    # a checkpoint every step, so kills land in writes; the LR schedule fixed, so max_iters only says when to stop
    args = _tiny_args(tiny_text_file, out, 100000, train__eval_interval=1, train__lr_decay_iters=2000)
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # the log of a killed process is complete up to the kill
    rng = random.Random(0)
    newest = None  # step of the manifest's newest checkpoint after the last kill
    for i in range(20):
        log = tmp_path / f"log-{i}.txt"
        with open(log, "w") as f:
            p = subprocess.Popen(_cli(*args) if newest is None else _cli("--resume", str(out)),
                                 stdout=f, stderr=subprocess.STDOUT, env=env)
            deadline = time.time() + 60
            while time.time() < deadline:  # wait until this process has written a checkpoint of its own
                try:
                    if json.loads((out / "checkpoints" / "manifest.json").read_text())["checkpoints"][-1]["step"] \
                            > (newest if newest is not None else -1):
                        break
                except (OSError, ValueError, KeyError, IndexError):
                    pass
                if p.poll() is not None:
                    pytest.fail(f"run {i} exited early: {log.read_text()[-500:]}")
                time.sleep(0.02)
            else:
                pytest.fail(f"run {i} wrote no checkpoint in 60 s: {log.read_text()[-500:]}")
            time.sleep(rng.uniform(0.0, 0.2))
            p.kill()
            p.wait()
        if newest is not None:
            assert f"resuming {out} from step {newest} " in log.read_text(), log.read_text()[:500]
        manifest = _intact_manifest(out)
        assert newest is None or manifest["checkpoints"][-1]["step"] > newest  # progress is never lost
        newest = manifest["checkpoints"][-1]["step"]
        assert ckpt.latest_checkpoint(out)["step"] == newest
        assert not (out / "summary.json").exists()

    n = newest + 3
    r = subprocess.run(_cli("--resume", str(out), "--train.max_iters", str(n)), capture_output=True, text=True)
    assert r.returncode == 0 and f"resuming {out} from step {newest} " in r.stdout, r.stderr[-500:]
    args[args.index("--train.max_iters") + 1] = str(n)
    args[args.index("--train.out_dir") + 1] = str(tmp_path / "A")
    subprocess.run(_cli(*args), check=True, capture_output=True)  # the same run, never interrupted
    assert json.loads((out / "summary.json").read_text())["final_step"] == n
    assert evals(out) == evals(tmp_path / "A") and [e[0] for e in evals(out)] == list(range(n + 1))
    name = f"step-{n:06d}.safetensors"
    assert ckpt.payload_sha256(out / "checkpoints" / name) == ckpt.payload_sha256(tmp_path / "A" / "checkpoints" / name)


class _Killed(BaseException):
    """Stands for SIGKILL: nothing in the trainer may catch it."""


def test_kill_before_manifest_keeps_best_verifiable(tmp_path, tiny_text_file, monkeypatch):
    """A process killed after writing a new best's weights but before the manifest: `sample` still works."""
    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4, eval_interval=2)), **QUIET)
    real = ckpt.atomic_write

    def dies_before_manifest(path, data):
        if path.name == "manifest.json":
            raise _Killed
        real(path, data)

    monkeypatch.setattr(ckpt, "atomic_write", dies_before_manifest)
    with pytest.raises(_Killed):
        train(tiny_config(run, tiny_text_file, train=dict(resume=True, max_iters=6, eval_interval=2)), **QUIET)
    monkeypatch.undo()
    assert json.loads((run / "checkpoints" / "manifest.json").read_text())["best"]["step"] == 4
    model, _ = load_run(run)  # the best the manifest names, verified


@pytest.mark.slow
def test_500mb_file_streams_with_bounded_memory(tmp_path):
    from depthlab.data import embedded_corpus_path

    base = embedded_corpus_path().read_bytes()
    p = tmp_path / "big.txt"
    size = 500_000_000
    with open(p, "wb") as f:
        for _ in range(size // len(base)):
            f.write(base)
        f.write(base[: size % len(base)])
    child = ("import sys; from depthlab.config import DataConfig; from depthlab.data import load_corpus\n"
             "c = load_corpus(DataConfig(path=sys.argv[1], cache_dir=sys.argv[2]))\n"
             "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
             "print(len(c.tokens), c.tokens.dtype, c.tokenizer.vocab_size, int(hwm) * 1024)")
    r = subprocess.run([sys.executable, "-c", child, str(p), str(tmp_path / "cache")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-1000:]
    n, dtype, v, rss = r.stdout.split()
    assert int(n) == size and dtype == "uint8" and int(v) == 65
    assert int(rss) <= 3 * size
    assert int(rss) < 400_000_000  # streaming: memory does not grow with the file
    tok = next((tmp_path / "cache").glob("*/tokens.bin"))
    assert tok.stat().st_size == size  # one byte per character


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_sigint_checkpoint_and_exit_code(tmp_path, tiny_text_file, sig, code):
    out = tmp_path / "R"
    p = subprocess.Popen(_cli(*_tiny_args(tiny_text_file, out, 100000)), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    manifest = out / "checkpoints" / "manifest.json"
    deadline = time.time() + 60
    while time.time() < deadline and not manifest.exists():
        time.sleep(0.05)
    time.sleep(0.3)
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == code, err[-500:]
    assert f"depthlab train --resume {out}" in err and "Traceback" not in err
    step = ckpt.latest_checkpoint(out)["step"]
    assert step > 0 and not (out / "summary.json").exists()
    assert max(json.loads(l)["step"] for l in open(out / "metrics.jsonl")) <= step


def test_utf16_file_gets_the_right_fix(tmp_path):
    from depthlab.config import DataConfig
    from depthlab.data import load_corpus

    p = tmp_path / "u16.txt"
    p.write_text("hello world\n" * 20, encoding="utf-16")
    with pytest.raises(DepthlabError, match="utf-16"):
        load_corpus(DataConfig(path=str(p)))
    assert load_corpus(DataConfig(path=str(p), encoding="utf-16")).tokenizer.vocab_size == 9


def test_resume_with_more_steps_updates_config_json(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=10)), **QUIET)
    train(tiny_config(run, tiny_text_file, train=dict(resume=True, max_iters=20)), **QUIET)
    assert json.loads((run / "config.json").read_text())["train"]["max_iters"] == 20
    assert json.loads((run / "summary.json").read_text())["final_step"] == 20
