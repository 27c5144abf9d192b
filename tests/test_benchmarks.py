"""The scripts in benchmarks/: they import, parse their arguments, and gpu_check.sh's CPU fallback runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest



ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_cpu_fallback(tmp_path):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "60", str(tmp_path / "run")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "tiny CPU fallback" in r.stdout and "tokens/s" in r.stdout and "MFU" in r.stdout
    assert (tmp_path / "run" / "summary.json").exists()


#: The program of :func:`script_runner`: it imports torch (what most benchmarks spend their start-up on, ~2-3 s on 2
#: cores), then, for each request on stdin (one JSON line), forks a process that runs ``python SCRIPT ARGS`` as the
#: interpreter would (``__main__``, sys.argv, the script's folder first on sys.path) with its stdout and stderr in
#: files, and answers the exit status. Each script runs in a copy of that one process, never after another script.
_SCRIPT_RUNNER = r"""
import atexit, json, os, runpy, signal, sys, traceback
import torch

for line in iter(sys.stdin.readline, ""):
    req = json.loads(line)
    pid = os.fork()
    if pid:
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
        continue
    for fd, name in ((1, "out"), (2, "err")):
        f = os.open(req[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.argv, sys.path[0] = [req["script"], *req["args"]], os.path.dirname(req["script"])
    signal.alarm(120)  # a script that hangs: killed by SIGALRM, a failed test, not a stuck suite
    code = 0
    try:
        runpy.run_path(req["script"], run_name="__main__")
    except SystemExit as e:  # as the interpreter reads sys.exit(x): None 0, an int itself, anything else printed, 1
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # an exit without the interpreter's teardown of torch's modules (~0.6 s a process)
"""


@pytest.fixture(scope="module")
def script_runner(tmp_path_factory):
    """``run(script, *args) -> (exit status, stdout, stderr)``: ``python benchmarks/SCRIPT ARGS`` as its own process
    with benchmarks/ on PYTHONPATH, forked from one interpreter that has imported torch (see _SCRIPT_RUNNER)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "benchmarks")}
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT_RUNNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    logs = tmp_path_factory.mktemp("scripts")

    def run(script: str, *args: str) -> tuple[int, str, str]:
        out, err = logs / f"{script}.out", logs / f"{script}.err"
        proc.stdin.write(json.dumps({"script": str(ROOT / "benchmarks" / script), "args": list(args),
                                     "out": str(out), "err": str(err)}) + "\n")
        proc.stdin.flush()
        answer = proc.stdout.readline()
        assert answer, f"the forking process died (exit {proc.wait()})"
        return int(answer), out.read_text(), err.read_text()

    try:
        yield run
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


@pytest.mark.slow  # a process per script, forked from one that imported torch: ~0.1-0.3 s each, not ~2-3.5 s
@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name != "_common.py"))
def test_benchmark_scripts_import_and_parse_args(script, script_runner):
    """Every benchmark imports what exists (analytics_overhead.py once imported a module removed by a
    refactor and nobody noticed) and its --help works; running them is for an idle machine, not CI."""
    rc, out, err = script_runner(script, "--help")
    assert rc == 0, err[-2000:]
    assert "usage" in out.lower()


# ------------------------------------------------------------------ benchmarks/vs_nanogpt.py
def _benchmark(name: str):
    """benchmarks/NAME.py as a module, with benchmarks/ on the path while it is used (for _common.py and the
    scripts they import)."""
    import importlib

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.fixture(scope="module")
def vs_nanogpt():
    yield from _benchmark("vs_nanogpt")


def test_vs_nanogpt_reads_train_py_log(vs_nanogpt):
    """train.py's own lines: iterations < 5 and the ones that ran an evaluation (dt holds it) are left out."""
    dt = [0.5 if i < 5 or i == 10 else 0.1 for i in range(13)]  # settling, and iteration 10 evaluates
    lines = [(0.5, "step 0: train loss 4.2000, val loss 4.1900"), (0.6, "saving checkpoint to out")]
    lines += [(1.0 + sum(dt[:i + 1]), f"iter {i}: loss 3.0000, time {dt[i] * 1000:.2f}ms, mfu -100.00%")
              for i in range(13)]
    lines.insert(12, (3.75, "step 10: train loss 2.5000, val loss 1.8700"))
    iters = vs_nanogpt.nanogpt_iters(lines)
    assert [i for i, _, _ in iters] == list(range(13))
    assert vs_nanogpt.nanogpt_train_tps(iters, eval_interval=10) == pytest.approx(768 * 7 / 0.7)  # iters 5-12 but 10
    assert vs_nanogpt.eval_lines(lines, vs_nanogpt.NANO_EVAL) == [(0, 4.19, 0.5), (10, 1.87, 3.75)]
    # the loop from iteration 5 to 12, evaluation included: 7 steps in 6 x 0.1 + 0.5 s
    assert vs_nanogpt.loop_tps([(i, t) for i, t, _ in iters]) == pytest.approx(7 * 768 / 1.1)


def test_vs_nanogpt_reads_depthlab_records(vs_nanogpt):
    """tokens_per_sec covers the steps since the previous record: the total is a step-weighted harmonic mean."""
    recs = [{"step": 5, "tokens_per_sec": 1.0}, {"step": 7, "tokens_per_sec": 1000.0},
            {"step": 8, "tokens_per_sec": 3000.0}]
    assert vs_nanogpt.depthlab_train_tps(recs) == pytest.approx(3 * 768 / (2 * 768 / 1000 + 768 / 3000))
    with pytest.raises(vs_nanogpt.DepthlabError, match="no training step after the first 5"):
        vs_nanogpt.depthlab_train_tps(recs[:1])
    lines = [(2.0, "eval step 50: train 1.9000 val 1.8790 nats/token (2.711 bits/char, ppl 6.55)"),
             (3.0, "step 51/400 | loss 1.9 | lr 1e-3 | grad_norm 0.3 | 9,000 tokens/s | 3.0s")]
    assert vs_nanogpt.eval_lines(lines, vs_nanogpt.DL_EVAL) == [(50, 1.879, 2.0)]
    assert vs_nanogpt.DL_STEP.match(lines[1][1]).group(1) == "51"


def test_vs_nanogpt_flops_at_nanogpt_cpu_shape(vs_nanogpt):
    """N = 12·L·C² + V·C = 794,752 (nanoGPT's 0.80 M without wpe); 6N + 12·4·64·128 per token."""
    n, fpt = vs_nanogpt.model_flops_per_token(65)
    assert n == 794_752
    assert fpt == 6 * 794_752 + 12 * 4 * 64 * 128 == 5_161_728


def test_vs_nanogpt_prepares_a_copy_like_prepare_py(vs_nanogpt, tmp_path):
    """train.bin + val.bin decode to the text (the first int(0.9 n) characters train); the checkout is untouched."""
    src = tmp_path / "nanoGPT"
    (src / "config").mkdir(parents=True)
    for name in ("train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py"):
        (src / name).write_text("# stub\n")
    before = sorted(p.relative_to(src) for p in src.rglob("*"))
    corpus = tmp_path / "corpus.txt"
    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n"
    corpus.write_text(text, encoding="utf-8")
    vs_nanogpt.prepare_nanogpt(src, tmp_path / "copy", corpus)
    import pickle

    import numpy as np

    data = tmp_path / "copy" / "data" / "shakespeare_char"
    meta = pickle.loads((data / "meta.pkl").read_bytes())
    assert meta["vocab_size"] == len(set(text)) and meta["itos"][0] == "\n"
    decode = lambda f: "".join(meta["itos"][int(i)] for i in np.fromfile(data / f, dtype=np.uint16))  # noqa: E731
    assert decode("train.bin") == text[:int(len(text) * 0.9)] and decode("val.bin") == text[int(len(text) * 0.9):]
    assert (tmp_path / "copy" / "config" / "train_shakespeare_char.py").is_file()
    assert sorted(p.relative_to(src) for p in src.rglob("*")) == before


def test_vs_nanogpt_bad_input_is_one_line(vs_nanogpt, tmp_path, capsys):
    (tmp_path / "train.py").write_text("")
    assert vs_nanogpt.main(["--nanogpt", str(tmp_path), "--no-ttq", "--rounds", "0"]) == 2
    assert capsys.readouterr().err == "depthlab: error: --rounds 0: give 1 or more\n"
    with pytest.raises(vs_nanogpt.DepthlabError, match=r"not a nanoGPT checkout \(no model.py, configurator.py"):
        vs_nanogpt.prepare_nanogpt(tmp_path, tmp_path / "copy", tmp_path / "corpus.txt")
    assert not (tmp_path / "copy").exists()


def test_vs_nanogpt_summary_ratios_and_peak_share(vs_nanogpt, capsys):
    """Ratios are per round (min-max), the share divides by the best round's matmul; a busy machine is said."""
    import argparse

    def rnd(nano, fp32, peak, load):
        r = {"peak": {"fp32": peak}, "busy": load, "nanoGPT": {"train_tps": nano, "loop_tps": nano / 2, "wall": 9.0}}
        r.update({n: {"train_tps": nano, "loop_tps": nano / 2, "wall": 9.0} for n in vs_nanogpt.VARIANTS})
        r["fp32 AdamW"] = {"train_tps": fp32, "loop_tps": fp32, "wall": 20.0 if nano > 15_000 else 30.0}
        return r

    rounds = [rnd(20_000.0, 12_000.0, 3e11, 0), rnd(10_000.0, 7_000.0, 1e11, 0)]
    vs_nanogpt.print_summary(rounds, 5e6, argparse.Namespace(no_ttq=True), "nanoGPT train.py")
    row = next(line for line in capsys.readouterr().out.splitlines() if "depthlab fp32 AdamW" in line).split()
    # tokens/s 7,000-12,000; ratio 0.60-0.70; loop ratio 1.20-1.40; 35-60 GFLOP/s = 11.7-20.0 % of 300 GFLOP/s
    assert row[3:] == ["7,000-12,000", "0.60-0.70", "7,000-12,000", "1.20-1.40", "35.0-60.0", "11.7-20.0",
                       "20.0-30.0"]  # the wall column: launch to exit
    assert "busy" not in capsys.readouterr().out  # no other process on the cores: nothing said
    rounds[1]["busy"] = os.cpu_count()  # one busy process per core
    vs_nanogpt.print_summary(rounds, 5e6, argparse.Namespace(no_ttq=True), "nanoGPT train.py")
    assert f"the machine was busy (up to {os.cpu_count()} of {os.cpu_count()} cores taken" in capsys.readouterr().out


def test_vs_nanogpt_time_to_quality_bound_when_nanogpt_never_reaches_the_target(vs_nanogpt, capsys):
    """nanoGPT's recipe ending above the target: depthlab's time over nanoGPT's whole wall time, said as a bound."""
    import argparse

    run = {"train_tps": 1.0, "loop_tps": 1.0, "wall": 1.0}
    rounds = [{"peak": {"fp32": 1e11}, "busy": 0, "nanoGPT": run, **{n: run for n in vs_nanogpt.VARIANTS},
               "ttq": {"nanoGPT": {"hit": None, "wall": 120.0}, "depthlab": {"hit": (300, 1.87, 24.0)}}}]
    vs_nanogpt.print_summary(rounds, 5e6, argparse.Namespace(no_ttq=False, target=1.88), "nanoGPT train.py")
    out = capsys.readouterr().out
    assert "< 0.20 in 1 round where nanoGPT's whole recipe ended above the target" in out
    both = {"nanoGPT": {"hit": (1000, 1.88, 100.0)}, "depthlab": {"hit": (300, 1.87, 25.0)}}
    rounds.append({**rounds[0], "ttq": both})
    vs_nanogpt.print_summary(rounds, 5e6, argparse.Namespace(no_ttq=False, target=1.88), "nanoGPT train.py")
    assert "0.25, and < 0.20 in 1 round" in capsys.readouterr().out


@pytest.mark.slow
def test_vs_nanogpt_quick_against_the_reimplementation():
    """--quick end to end (re-implementation, 1 round of 12 steps, time to val <= 3.6): every figure printed.

    Its smallest form: evaluations of 2 batches per split (--eval-iters 2, not the README's 20), one thread for
    both tools (OMP_NUM_THREADS=1: the re-implementation at torch's default 2 threads, whose OpenMP threads spin
    while they wait, ran ~4x slower on 2 cores shared with other work), and one depthlab run of the round (--variants
    defaults: each other one is the same code with other flags, ~6 s more of the whole suite). The figures mean
    nothing either way."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "benchmarks"), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vs_nanogpt.py"), "--quick", "--eval-iters", "2",
                        "--variants", "defaults"], capture_output=True, text=True, env=env, timeout=1800)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert "NOT nanoGPT's own train.py" in out and "cpu flags:" in out and "resolved: device cpu" in out
    rows = {"nanoGPT re-implementation": 13, "depthlab defaults": 12}  # train.py's loop runs iterations 0..max_iters
    for name, steps in rows.items():
        assert f"  {name}" in out and f" {steps} steps" in out.split(f"  {name}")[1].splitlines()[0]
    assert "depthlab fp32 AdamW" not in out  # --variants chose the round's runs
    assert "% fp32 peak" in out and "time to val <= 3.6 from launch" in out
    assert "depthlab defaults, compiled" not in out  # --quick leaves the cold compile out
    assert "OMP_NUM_THREADS=1," in out  # the environment both were started with, printed


# ------------------------------------------------------------------ benchmarks/gpu_vs_nanogpt.py
@pytest.fixture(scope="module")
def gpu_vs():
    yield from _benchmark("gpu_vs_nanogpt")


def test_gpu_vs_nanogpt_row_and_ratio(gpu_vs):
    """The table's row: target step, wall to target, training clock, tokens/s (first interval left out), ratio."""
    assert gpu_vs.median_tps([10.0, 3.0, 5.0, 4.0]) == 4.0 and gpu_vs.median_tps([]) is None
    r = {"name": "depthlab preset", "hit": (1600, 1.4655, 45.7), "best": 1.4655, "wall": 49.6, "trained_s": 14.1,
         "tps": 3026212.0, "cut": False}
    line = gpu_vs.row(r, 69.0)
    assert line.split()[2:7] == ["1600", "45.7", "14.1", "49.6", "3,026,212"] and "0.66x" in line
    missed = gpu_vs.row(dict(r, hit=None, best=1.4735, cut=False), 69.0)
    assert "ended above the target" in missed and "x " not in missed
    failed = gpu_vs.row(dict(r, hit=None, best=None, failed="exited 1"), None)
    assert "FAILED: exited 1" in failed
    with pytest.raises(gpu_vs.DepthlabError, match="choose from preset"):
        gpu_vs.parse_args(["--nanogpt", ".", "--variants", "fast"])


def test_vs_nanogpt_variants_and_median_ratio(vs_nanogpt, capsys):
    """--variants picks the depthlab runs of a round (a wrong name: one line); 3+ rounds print the median ratio."""
    import argparse

    a = vs_nanogpt.parse_args(["--variants", "defaults, fp32 AdamW", "--no-ttq"])
    assert list(vs_nanogpt.variants(a)) == ["defaults", "fp32 AdamW"]
    assert list(vs_nanogpt.variants(vs_nanogpt.parse_args([]))) == list(vs_nanogpt.VARIANTS)
    assert vs_nanogpt.main(["--variants", "defaults,fast", "--no-ttq"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("depthlab: error: --variants: no depthlab run named 'fast'; give some of 'defaults', ")
    rounds = [{"peak": {"fp32": 1e11}, "busy": 0, "nanoGPT": {"train_tps": nano, "loop_tps": nano, "wall": 9.0},
               "defaults": {"train_tps": ours, "loop_tps": ours, "wall": 9.0}}
              for nano, ours in ((10_000.0, 15_000.0), (10_000.0, 9_000.0), (8_000.0, 16_000.0))]
    args = argparse.Namespace(no_ttq=True, variants=["defaults"])
    vs_nanogpt.print_summary(rounds, 5e6, args, "nanoGPT train.py")
    out = capsys.readouterr().out
    assert "0.90-2.00" in out and "median training-tokens/s ratio over the 3 rounds: defaults 1.50" in out
    vs_nanogpt.print_summary(rounds[:2], 5e6, args, "nanoGPT train.py")
    assert "median" not in capsys.readouterr().out  # two rounds: min-max says it all
    # --eval-iters: appended to both tools' flags (later flags win), the time-to-quality run's included
    a = vs_nanogpt.parse_args(["--quick", "--eval-iters", "2"])
    assert a.nano_extra == ("--eval_iters=2",) and a.dl_extra == ("--train.eval_iters", "2")
    assert a.ttq_extra[-2:] == ["--train.eval_iters", "2"] and not vs_nanogpt.parse_args([]).nano_extra
    assert vs_nanogpt.main(["--eval-iters", "0"]) == 2
    assert "--eval-iters 0: give 1 or more batches" in capsys.readouterr().err
