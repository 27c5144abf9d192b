"""Findings of the seventeenth issue-24 session (an Intel Xeon with AMX): the rotary rotation in four ops, a Muon
run's too-low rate judged on its matrices, a command's --help into a closed pipe, a resume spelt in a -c file."""

from __future__ import annotations

import pytest
import torch

from depthlab.model import apply_rotary, rotary_rows, rotary_table, rotate


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotate_is_the_two_halves_rotation_bit_for_bit_on_a_permuted_view(dtype):
    torch.manual_seed(0)
    T, hs = 7, 8
    # laid out as the fused projection gives queries and keys: (B, T, 2, nh, hs) seen as (2, B, nh, T, hs)
    x = torch.randn(3, T, 2, 4, hs).to(dtype).permute(2, 0, 3, 1, 4)
    cos, sin = rotary_table(T, hs, dtype, x.device)
    x1, x2 = x.chunk(2, dim=-1)
    want = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    got = rotate(x, *rotary_rows(T, hs, dtype, x.device))
    assert torch.equal(got, want)
    assert got.is_contiguous()  # the queries and keys reach the attention matmuls without a copy
    assert torch.equal(apply_rotary(x, cos, sin), want)
    cos2, sin2 = rotary_rows(T, hs, dtype, x.device)
    assert torch.equal(cos2[:, : hs // 2], cos) and torch.equal(sin2[:, : hs // 2], -sin)
    assert torch.equal(sin2[:, hs // 2:], sin)


def test_the_gradient_monitor_records_the_blocks_matrices_update_ratio_apart_from_their_gains():
    """Note 33's list: a Muon run at train.muon_lr 1e-6 passed `diagnose`: the norms' gains, AdamW's, held the blocks'
    pooled update/weight ratio near 1e-3 while the matrices hardly moved."""
    import torch.nn as nn

    from depthlab.analytics.gradients import GradientMonitor

    class Block(nn.Module):
        def __init__(self, with_matrix):
            super().__init__()
            self.ln = nn.LayerNorm(4)
            self.fc = nn.Linear(4, 4, bias=False) if with_matrix else None

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.h = nn.ModuleList([Block(True), Block(False)])

    net = Net()
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    mon = GradientMonitor(net)
    mon.capture_grads()
    mon.snapshot_weights()
    with torch.no_grad():
        net.h[0].ln.weight.mul_(1.5)  # the gains move by half their norm, the matrix not at all
        net.h[0].fc.weight.mul_(1.001)
        net.h[1].ln.weight.mul_(1.5)
    rec = mon.collect(1).to_record(1)
    fc_norm, gain_norm = net.h[0].fc.weight.norm().item() / 1.001, 2.0  # |ones(4)| = 2
    assert rec["update_ratio_matrix_block"][0] == pytest.approx(1e-3, rel=1e-3)
    assert rec["update_ratio_matrix_block"][1] is None  # a block without a 2-D weight
    # the block's pooled ratio: the gains' step (norm 1) over the gains' and the matrix's norms
    assert rec["update_ratio_block"][0] > 0.1 and rec["update_ratio_block"][0] == pytest.approx(
        (1.0 + (1e-3 * fc_norm) ** 2) ** 0.5 / (gain_norm ** 2 + fc_norm ** 2) ** 0.5, rel=1e-3)


def test_a_muon_run_whose_matrices_hardly_move_is_lr_too_low_naming_muon_lr():
    from depthlab.analytics.diagnose import Evidence, diagnose

    from conftest import SHAKESPEARE_BASELINES, eval_records, grad_record

    def grads(matrices):
        return [{**grad_record(s, [0.5, 0.5], upd=[1.2e-3, 1.1e-3]),  # pooled with the gains: looks healthy
                 "update_ratio_matrix_block": matrices,
                 "update_ratio_component": {"embeddings": 5e-3, "attn.c_attn": 1e-6}} for s in (100, 150, 200, 250)]

    config = {"model": {"vocab_size": 65}, "train": {"optimizer": "muon", "learning_rate": 3e-3, "muon_lr": 1e-6,
                                                      "warmup_iters": 10}}
    evals = eval_records([4.17, 2.6, 2.5, 2.45])
    d = diagnose(Evidence(evals + grads([1e-6, 2e-6]), config, SHAKESPEARE_BASELINES))
    low = [f for f in d.findings if f.rule == "lr_too_low"]
    assert len(low) == 1 and low[0].evidence.startswith(
        "median update/weight ratio of the blocks' matrices 1.50e-06 per step (steps 100-250, 4 records) (block "
        "matrices trained by Muon, train.muon_lr 1e-06)"), d.findings
    assert low[0].remedy.startswith("raise train.muon_lr (now 1e-06)"), low[0].remedy
    healthy = diagnose(Evidence(evals + grads([1.4e-2, 1.5e-2]), config, SHAKESPEARE_BASELINES))
    assert not [f for f in healthy.findings if f.rule.startswith("lr_too")], healthy.findings
    # records written before the monitor kept the matrices' ratio: judged on the blocks' as before
    old = [{k: v for k, v in r.items() if k != "update_ratio_matrix_block"} for r in grads([1e-6, 1e-6])]
    assert "lr_too_low" not in [f.rule for f in diagnose(Evidence(evals + old, config, SHAKESPEARE_BASELINES)).findings]


@pytest.mark.parametrize("command", ["train", "sample"])
def test_a_commands_help_into_a_closed_pipe_exits_141(command):
    """Note 33's list: `depthlab train --help | head -1` exited 0 (argparse's writer swallows the closed pipe's
    error) where every other output into a closed pipe exits 141."""
    import os
    import subprocess
    import sys

    r, w = os.pipe()
    os.close(r)  # the reader has left, as head does after its lines
    try:
        p = subprocess.run([sys.executable, "-m", "depthlab", command, "--help"], stdout=w, stderr=subprocess.PIPE,
                           timeout=60)
    finally:
        os.close(w)
    assert p.returncode == 141 and p.stderr == b"", p.stderr[-300:]


def test_a_resume_spelt_in_a_c_file_takes_its_runs_openmp_policy_without_a_restart(tmp_path):
    """Note 33's list: a resume spelt with a `-c` file restarted its process for the OpenMP policy (the file was read
    only after torch had loaded), where `--resume RUN` and its flags did not."""
    from depthlab import cli

    run = str(tmp_path / "run")
    cfg = tmp_path / "resume.yaml"
    cfg.write_text(f"train:\n  resume: true\n  out_dir: {run}\n")
    assert cli._resumed_dir(["-c", str(cfg)]) == run
    assert cli._resumed_dir([f"--config={cfg}", "--model.n_layer", "2"]) == run
    assert cli._resumed_dir(["-c", str(cfg), "--train.resume", "false"]) is None  # a later flag wins
    assert cli._resumed_dir(["--train.resume", "false", "-c", str(cfg)]) == run  # as the parser reads them
    cfg.write_text("train:\n  resume: false\n")
    assert cli._resumed_dir(["-c", str(cfg), "--train.resume", "true", "--train.out_dir", run]) == run
    for bad in ("[1, 2]", "train: 3", ": : :"):
        cfg.write_text(bad)
        assert cli._resumed_dir(["-c", str(cfg)]) is None
    assert cli._resumed_dir(["-c", str(tmp_path / "missing.yaml")]) is None


class _DetachedAttention(torch.nn.Module):
    """nn.MultiheadAttention passes out_proj's weight to its attention function and never calls out_proj."""

    def __init__(self, vocab_size=65):
        super().__init__()
        self.e = torch.nn.Embedding(vocab_size, 16)
        self.att = torch.nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = torch.nn.Linear(16, vocab_size)

    def forward(self, idx):
        T = idx.size(1)
        h = self.e(idx)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        a, _ = self.att(h, h, h, attn_mask=mask, need_weights=False)
        return self.head((h + a).detach())


def test_multihead_attentions_out_proj_is_not_called_a_module_forward_never_calls():
    """A new user's pass: a block of nn.MultiheadAttention behind a .detach() was told its out_proj "belongs to modules
    that forward never calls" (call it or delete it), though forward used it: no gradient for the detach's reason."""
    from depthlab.analytics.check import check_model
    from depthlab.config import DataConfig
    from depthlab.data import load_corpus

    rep = check_model(_DetachedAttention(), load_corpus(DataConfig()), rules=("shape", "no_gradient"))
    ng = {c.rule: c for c in rep.checks}["no_gradient"]
    assert ng.ok is False and ng.evidence["never_called"] == []
    assert ng.evidence["no_grad"] == ["e.weight", "att.in_proj_weight", "att.in_proj_bias", "att.out_proj.weight",
                                      "att.out_proj.bias"]
    assert "never calls" not in ng.summary and ".detach()" in ng.remedy


def test_a_bpe_run_with_another_tokenizer_json_is_refused_by_its_views_and_its_resume(tmp_path, bpe_file, capsys):
    """A new user's pass: with another BPE tokenizer.json copied into a run, `layers` measured "val loss 5.12" of a run
    at 3.96 and `context` said "the model does not use its context" (exit 0); a resume said the corpus's vocabulary
    differs ("165 characters absent"), where `sample` names the tokenizer by its sha256."""
    from conftest import assert_clean_error, bpe_run_config, run_cli
    from depthlab.data import load_corpus
    from depthlab.trainer import train

    rd = train(bpe_run_config(tmp_path, bpe_file, max_iters=4), log=lambda s: None)
    other = tmp_path / "other.txt"
    other.write_text("".join(reversed(bpe_file.read_text(encoding="utf-8"))), encoding="utf-8")
    cfg = bpe_run_config(tmp_path / "o", other)
    (rd / "tokenizer.json").write_text(load_corpus(cfg.data).tokenizer.json, encoding="utf-8")
    want = f"{rd / 'tokenizer.json'} is not the tokenizer"
    for command in ("context", "layers"):
        rc, _, err = run_cli(capsys, command, str(rd))
        assert_clean_error(rc, err, want)
        assert "put the run's own tokenizer.json back" in err
    rc, _, err = run_cli(capsys, "train", "--resume", str(rd), "--train.max_iters", "6")
    assert_clean_error(rc, err, f"cannot resume {rd}: {want}")
    rc, _, err = run_cli(capsys, "report", str(rd))  # the hunt: report left layers and context out without a word
    assert rc == 0 and f"depthlab: warning: {want}" in err and "what is measured on its val split is left out" in err


def test_a_high_first_loss_after_init_from_does_not_blame_model_init():
    """A new user's pass: `--init-from` an export of a Shakespeare run onto Python source: "val loss 8.325 at step 0
    ... fix the initialisation (model.init (now gpt2) ...)", though the weights came from --init-from."""
    from depthlab.analytics.diagnose import diagnose_records

    from test_analytics_diagnose import BASE, _init_hot

    recs, cfg = _init_hot()
    cfg = {**cfg, "resolved": {**(cfg.get("resolved") or {}), "init_from": {
        "path": "/m/hf_shk", "source": "/m/hf_shk", "sha256": "ab" * 32, "step": 500, "val_loss": 1.6}}}
    init = {x.rule: x for x in diagnose_records(recs, BASE, cfg)}["init_loss"]
    assert init.evidence.endswith("; the run started from the weights of /m/hf_shk (--init-from), not from its own "
                                  "initialisation")
    assert init.remedy.startswith("not the learning rate, and not model.init: the weights it started from predict "
                                  "this corpus badly") and "(now gpt2)" not in init.remedy


def test_a_run_that_finished_while_its_worker_was_stopped_is_finished_by_the_next_sweep(tiny_text_file, tmp_path):
    """A new user's pass: a Ctrl-C after a run wrote summary.json, before its worker wrote its result, left the sweep
    stuck for good: every rerun said "all 12 runs had finished" and "1 of 12 runs gave no result" (exit 1), and the
    science rows "not judged ... run the same sweep command again". The rerun now finishes the worker's part, with
    the run's numbers as they were."""
    import json

    from depthlab import rundir, sweep

    from test_sweep_local import quiet, tiny_spec

    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1]}, train__max_iters=8)
    sw = tmp_path / "sw"
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=quiet)
    rd = rundir.RunDir(sw / "runs" / "n_layer-1")
    before = rd.file(rundir.SUMMARY).read_bytes()
    rd.file(rundir.SWEEP_STATUS).write_text(json.dumps({  # what reap writes for a worker a signal ended
        "name": "n_layer-1", "status": "interrupted", "wall_s": 3.0, "threads": 1,
        "message": "interrupted: the worker process ended on SIGINT before the run wrote a result"}))
    logs = []
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=logs.append)
    assert "0 already finished, 1 to run (1 of them resume from a checkpoint)" in logs[0], logs
    assert rd.sweep_status["status"] == "ok" and rd.file(rundir.SUMMARY).read_bytes() == before
    logs.clear()
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=logs.append)
    assert "1 already finished, 0 to run" in logs[0], logs


def test_degradation_is_no_yes_when_plains_shallower_runs_all_diverged():
    """A new user's pass: with plain's shallower runs all diverged, degradation read "yes (p = 0.024, n = 3)" on pre-LN
    alone (plain's comparison dropped) while depth_helps, on the same runs, compared plain by Fisher's exact test; with
    every run diverged it said "not judged: it compares plain with the residual variants at two depths or more, and
    this sweep has model.variant plain, prenorm at model.n_layer 1, 2", which is what the sweep had."""
    from depthlab.sweep import science

    from test_sweep_science import cells

    def grid(plain1="nonfinite", pre="ok"):
        return (cells("plain", 1, None, n=3, status=plain1) + cells("plain", 2, 3.356, n=3)
                + cells("prenorm", 1, None if pre != "ok" else 3.25, n=3, status=pre)
                + cells("prenorm", 2, None if pre != "ok" else 3.09, n=3, status=pre))

    row = science.degradation(grid(), {})
    assert "plain L2 > L1 + 0.1 (by runs not ok): L1 3 of 3 not ok vs L2 0 of 3 not ok, p = 1" in row[3], row[3]
    assert row[-1].startswith("undecided (p = 1, n = 3)"), row[-1]
    every = [dict(it, row={**it["row"], "status": "nonfinite", "best_val_loss": None})
             for it in grid(pre="nonfinite")]
    assert not science.degradation(every, {})[-1].startswith("not judged"), science.degradation(every, {})[-1]


def test_report_of_a_sweep_rewrites_its_science_table(tmp_path, monkeypatch):
    """A new user's pass: `depthlab report SWEEP` rewrote report.html and results.csv but left science.md with the
    verdict of before (the two files in one folder disagreed)."""
    from depthlab import cli, sweep

    called = []
    monkeypatch.setattr("depthlab.report.sweep.build_sweep_report", lambda d: str(d) + "/report.html")
    monkeypatch.setattr("depthlab.report.sweep.is_sweep_dir", lambda d: True)
    monkeypatch.setattr(sweep, "write_science_table", lambda d: called.append(str(d)) or "| table |")
    assert cli.main(["report", str(tmp_path)]) == 0
    assert called == [str(tmp_path)]


def test_bigram_stuck_on_a_bpe_run_speaks_of_tokens_and_of_figures_the_report_draws():
    """A new user's pass: a BPE run's bigram_stuck remedies said "a one-character window", "the characters before the
    current one" (a model.source run) and pointed at the attention figure, which the report draws for character runs
    only."""
    from depthlab.analytics.diagnose import diagnose_records

    from test_analytics_diagnose import BASE, evals

    stuck = evals([4.17, 3.2, 2.9, 2.77, 2.72], tokens_per_step=32)
    bpe = {"data": {"tokenizer": "bpe"}}
    one = diagnose_records(stuck, BASE, {**bpe, "model": {"block_size": 1}})[0]
    assert one.remedy.endswith("a one-token window is exactly a bigram model"), one.remedy
    stuck = evals([4.17, 2.6, 2.45])  # within the bigram line's margin
    gpt = [f for f in diagnose_records(stuck, BASE, {**bpe, "model": {"block_size": 64}}) if f.rule == "bigram_stuck"]
    assert "check attention entropy (depthlab probe; the report's entropy figure) to see whether the heads select " \
           "earlier tokens" in gpt[0].remedy and "attention figure" not in gpt[0].remedy
    src = [f for f in diagnose_records(stuck, BASE, {**bpe, "model": {"block_size": 64, "source": "m.py:M"}})
           if f.rule == "bigram_stuck"]
    assert "the tokens before the current one reach the prediction only through attention" in src[0].remedy
    char = [f for f in diagnose_records(stuck, BASE, {"model": {"block_size": 64}}) if f.rule == "bigram_stuck"]
    assert "attention entropy and the attention figure (the report; depthlab probe)" in char[0].remedy


def test_a_sweep_over_tokenizers_says_its_losses_per_token_do_not_compare():
    """A new user's pass: `--grid data.tokenizer=char,bpe`: the summary gave char 2.700 nats/token against BPE's 5.186
    (char looked far better), where per character BPE was the better one (3.10 against 3.90 bits/char)."""
    from depthlab.sweep.findings import summary_lines

    from conftest import sweep_item

    items = [sweep_item("prenorm", 2, 2.7, seed=1), sweep_item("prenorm", 2, 5.186, seed=2)]
    items[1]["config"]["data"] = {"tokenizer": "bpe", "vocab_size": 512}
    lines = summary_lines(items, "model.n_layer", ["model.variant"], None)
    assert "These runs split the text into different tokens (bpe 512, char): their losses per token below do not " \
           "compare across tokenizers; bits per character do" in " ".join(lines), lines
    assert not any("different tokens" in x for x in summary_lines(items[:1], "model.n_layer", ["model.variant"], None))


def test_a_probe_whose_one_sequence_does_not_fit_names_the_model_not_the_batch(tmp_path, capsys):
    """A new user's pass: `probe --model.block_size 100000 --probe_batch_size 1` was told to lower --probe_batch_size,
    already at its least."""
    import os

    from conftest import assert_clean_error, run_cli

    if os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") > 1000 * 2**30:
        pytest.skip("a machine with more than 1000 GiB of RAM may hold this probe")
    rc, _, err = run_cli(capsys, "probe", "--model.n_layer", "4", "--model.n_embd", "64", "--model.block_size",
                         "100000", "--probe_batch_size", "1", "--out", str(tmp_path))
    assert_clean_error(rc, err, "--probe_batch_size 1 sequences", "even one sequence does not fit: lower "
                                "model.block_size")
    assert "lower --probe_batch_size" not in err


def test_a_sweeps_trend_words_say_when_the_change_is_within_the_seeds_spread():
    """A new user's pass: "prenorm ... improves with depth: 2.684 nats at 1 block -> 2.661 at 2 blocks" beside sds of
    0.041 and 0.049 (n = 3), where the same page's Welch test gave p = 0.29."""
    from scipy.stats import ttest_ind_from_stats

    from depthlab.sweep.findings import _trend

    _, verdict = _trend({1: (2.684, 0.041, 3), 2: (2.661, 0.049, 3)})
    p = ttest_ind_from_stats(2.684, 0.041, 3, 2.661, 0.049, 3, equal_var=False).pvalue
    assert verdict == ("improves with depth: 2.684 nats at 1 block -> 2.661 at 2 blocks; within the seeds' spread: "
                       f"not a clear change at these seeds (Welch p = {p:.2g})"), verdict
    _, clear = _trend({1: (2.684, 0.004, 3), 2: (2.461, 0.005, 3)})
    assert clear == "improves with depth: 2.684 nats at 1 block -> 2.461 at 2 blocks"
    _, one = _trend({1: (2.684, 0.0, 1), 2: (2.661, 0.0, 1)})
    assert "spread" not in one


@pytest.mark.parametrize("axis", ["data.cache_dir=a,b", "train.progress=true,false", "train.tensorboard=true,false"])
def test_a_grid_axis_that_trains_the_same_model_is_refused(axis, capsys):
    """A new user's pass: `--grid data.cache_dir=a,b` (train.progress, train.tensorboard) trained the identical model
    twice, where model.vocab_size is refused for exactly that reason."""
    from conftest import assert_clean_error, run_cli

    key = axis.split("=")[0]
    rc, _, err = run_cli(capsys, "sweep", "--grid", axis, "--dry_run")
    assert_clean_error(rc, err, f"--grid '{key}': ", "so every value would train the same model; give it once, as a "
                                                     f"flag (--{key} VALUE), not as a grid axis")


def test_a_sweeps_placement_says_where_a_runs_own_train_threads_wins(tiny_text_file):
    """A new user's pass: `--grid train.threads=1,2` said "2 workers x 1 thread" while run threads-2 trained with 2
    threads beside the other worker."""
    from depthlab.sweep.common import RunPoint, placement

    def point(t):
        return RunPoint(name=f"threads-{t}", experiment="e", point={"train.threads": t},
                        config={"train": {"threads": t}, "model": {}, "data": {}})

    _, _, where = placement("local", 2, 1, [point(1), point(2)])
    assert where == "2 workers x 1 thread (train.threads 2 where a run sets it)"
    _, _, plain = placement("local", 2, 1, [point(0), point(1)])
    assert plain == "2 workers x 1 thread"


# --------------------------------------------------------------------------- the regression hunt over s61's changes
class _UnusedButRead(torch.nn.Module):
    def __init__(self, vocab_size=65):
        super().__init__()
        self.e, self.extra = torch.nn.Embedding(vocab_size, 16), torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, vocab_size)

    def forward(self, idx):
        return self.head(self.e(idx.to(self.extra.weight.device)))  # reads an attribute of extra, never calls it


def test_a_modules_weight_whose_device_is_read_is_still_a_module_forward_never_calls():
    """The hunt: the op watcher counted `self.extra.weight.device` as a use of the weight ("do not .detach() it")."""
    from depthlab.analytics.check import check_model
    from depthlab.config import DataConfig
    from depthlab.data import load_corpus

    rep = check_model(_UnusedButRead(), load_corpus(DataConfig()), rules=("shape", "no_gradient"))
    ng = {c.rule: c for c in rep.checks}["no_gradient"]
    assert ng.evidence["never_called"] == ["extra.weight", "extra.bias"] and ng.evidence["no_grad"] == []


def test_a_c_file_that_is_a_fifo_does_not_block_the_start(tmp_path):
    """The hunt: `depthlab train -c FIFO` hung where it had said "not a regular file"."""
    import os
    import threading

    from depthlab import cli

    fifo = tmp_path / "ff"
    os.mkfifo(fifo)
    got = []
    t = threading.Thread(target=lambda: got.append(cli._resumed_dir(["-c", str(fifo)])), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive() and got == [None]


def test_help_with_stdout_closed_goes_to_stderr_as_argparse_sends_it():
    """The hunt: `depthlab train --help >&-` was "unexpected AttributeError ... please report it" (stdout None)."""
    import subprocess
    import sys

    p = subprocess.run(f"{sys.executable} -m depthlab train --help >&-", shell=True, capture_output=False,
                       stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 0 and b"usage: depthlab train" in p.stderr and b"Traceback" not in p.stderr


def test_improves_then_worsens_is_tested_on_its_best_and_last_cells():
    from depthlab.sweep.findings import _trend, _vocabulary

    _, verdict = _trend({1: (2.46, 0.01, 3), 4: (2.40, 0.002, 3), 8: (2.47, 0.01, 3)})
    assert verdict.startswith("improves then worsens a little") and "spread" not in verdict, verdict
    assert _vocabulary({"data": {"tokenizer": "bpe", "vocab_size": None}}) == "bpe"
    assert _vocabulary({"data": {"tokenizer": "bpe", "vocab_size": 512}}) == "bpe 512"


def test_a_probe_whose_one_sequence_does_not_fit_says_so_at_any_batch(tmp_path, capsys):
    import os

    from conftest import assert_clean_error, run_cli

    if os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") > 1000 * 2**30:
        pytest.skip("a machine with more than 1000 GiB of RAM may hold this probe")
    rc, _, err = run_cli(capsys, "probe", "--model.block_size", "200000", "--out", str(tmp_path))
    assert_clean_error(rc, err, "even one sequence does not fit: lower model.block_size")


def test_a_muon_run_with_too_few_matrix_records_is_judged_on_its_pooled_ratios():
    """The hunt: a run resumed across the change (old records without the matrices' ratio) was judged "low" on two
    new records, fewer than lr_min_records: silent, with no "not judged" line."""
    from depthlab.analytics.diagnose import Evidence

    from conftest import SHAKESPEARE_BASELINES, eval_records, grad_record

    grads = [grad_record(s, [0.5, 0.5], upd=[1.2e-3, 1.1e-3]) for s in (100, 150, 200, 250)]
    for r in grads[2:]:
        r["update_ratio_matrix_block"] = [1e-6, 1e-6]
    config = {"model": {"vocab_size": 65}, "train": {"optimizer": "muon", "muon_lr": 1e-6, "warmup_iters": 10}}
    ev = Evidence(eval_records([4.17, 2.6, 2.5, 2.45]) + grads, config, SHAKESPEARE_BASELINES)
    assert ev.matrix_ratios is False and len(ev.low_ratios[0]) == 4


def test_an_unreadable_model_file_is_told_to_be_made_readable():
    """The fresh install: `check m.py:GPT` on a file it could not read said "fix the code it runs when imported"."""
    from pathlib import Path

    from depthlab.usermodel import _import_fix

    e = PermissionError(13, "Permission denied", "/x/m.py")
    assert _import_fix(e, Path("/x/m.py")) == ("the file itself cannot be read: give the user running depthlab read "
                                              "permission (chmod u+r)")
    assert _import_fix(PermissionError(13, "Permission denied", "/x/other"), Path("/x/m.py")) != _import_fix(
        e, Path("/x/m.py"))


def test_a_data_cache_folder_that_cannot_be_read_names_the_knob(tmp_path, monkeypatch):
    """The fresh install: with HOME's cache another user's, `train` ended on a bare PermissionError naming
    .../meta.json, without --data.cache_dir or DEPTHLAB_CACHE."""
    from pathlib import Path

    from depthlab import data
    from depthlab.errors import DepthlabError

    real = Path.exists

    def exists(self):
        if self.name == "meta.json":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "exists", exists)
    with pytest.raises(DepthlabError) as e:
        data._cached(tmp_path / "entry", lambda: None)
    assert str(e.value) == (f"the data cache folder {tmp_path / 'entry'} cannot be read (Permission denied); point "
                            "--data.cache_dir (or DEPTHLAB_CACHE) at a folder you can write")


def test_an_unreadable_corpus_names_data_path_and_the_fix(tmp_path, monkeypatch):
    """The fresh install: `train --data.path f.txt` on a file it could not read: "PermissionError: [Errno 13] ...
    (check the paths given ...)", naming neither data.path nor a fix."""
    from depthlab import data
    from depthlab.config import DataConfig
    from depthlab.errors import DepthlabError

    f = tmp_path / "f.txt"
    f.write_text("hello world\n" * 50)

    def refuse(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(data, "sha256_file", refuse)  # chmod 000 does not stop root, who runs CI
    with pytest.raises(DepthlabError) as e:
        data.load_corpus(DataConfig(path=str(f)))
    assert str(e.value).startswith(f"data.path {f} cannot be read (Permission denied): give the user running "
                                   "depthlab read permission (chmod u+r)")


def test_a_print_config_file_given_to_sweep_f_is_told_to_go_to_c(tmp_path, capsys):
    """The fresh install: `sweep -f` on `sweep --print_config`'s file listed 14 unknown keys with no hint that the
    file is for -c (which reads it back)."""
    from conftest import assert_clean_error, run_cli

    from depthlab import cli

    try:
        cli.main(["sweep", "--grid", "model.n_layer=1,2", "--print_config"])
    except SystemExit as e:  # --print_config exits after printing, as jsonargparse does
        assert e.code in (0, None)
    out = capsys.readouterr().out
    assert "out_dir" in out and "seeds" in out
    f = tmp_path / "s.yaml"
    f.write_text(out)
    rc, _, err = run_cli(capsys, "sweep", "-f", str(f), "--dry_run")
    assert_clean_error(rc, err, "unknown key(s)", "this is `depthlab sweep --print_config`'s file of the command's "
                                                  "options: give it with -c, not -f")


def test_keyword_arguments_for_a_model_that_takes_none_are_told_to_be_dropped():
    """The second fresh install: `check model.py:TinyTransformer --init '{"nonsense_kw": 3}'` on a class taking no
    argument was told to give '{"n_layer": ...}'."""
    from depthlab.usermodel import _init_hint

    class NoArgs(torch.nn.Module):
        def __init__(self):
            super().__init__()

    assert _init_hint(NoArgs, {"nonsense_kw": 3}) == ("; it takes no keyword arguments: drop --model.init (depthlab "
                                                      "check: --init)")

