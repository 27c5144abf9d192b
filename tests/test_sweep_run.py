"""depthlab.sweep.run: ``--seeds auto`` adds seeds only to the cells of undecided claims, never redoes a run."""

import sys
from pathlib import Path

import pytest

import depthlab.analytics  # noqa: F401 - the fake trainer replaces its train
from depthlab import rundir, sweep

from conftest import read_sweep_rows

#: Seed noise of the fake trainer (nats): sd 0.042 over seeds 1-2, 0.029 over 1-4.
NOISE = (0.03, -0.03, 0.02, -0.02, 0.01, -0.01, 0.03, -0.03)
#: Mean best val loss of the fake trainer per (variant, n_layer): pre-LN falls by 0.05 from 1 to 4 blocks
#: (undecided at 2 seeds, decided at 4), plain rises by ~1 nat (decided at 2).
MEANS = {("prenorm", 1): 2.30, ("prenorm", 2): 2.32, ("prenorm", 4): 2.25,
         ("plain", 1): 2.40, ("plain", 2): 3.35, ("plain", 4): 3.35}


def _fake_trainer(monkeypatch, calls):
    from depthlab.sweep import local

    def train(cfg, **kw):
        out = cfg.train.out_dir
        Path(out).mkdir(parents=True, exist_ok=True)
        calls.append((cfg.model.variant, cfg.model.n_layer, cfg.train.seed))
        loss = MEANS[(cfg.model.variant, cfg.model.n_layer)] + NOISE[(cfg.train.seed - 1) % len(NOISE)]
        rundir.write_json(f"{out}/{rundir.CONFIG}", cfg.to_dict())
        rundir.write_json(f"{out}/{rundir.SUMMARY}", {"best_val_loss": loss, "final_step": cfg.train.max_iters,
                                                      "stopped_by": "max_iters", "wall_time_s": 0.0})
        return out

    monkeypatch.setattr(sys.modules["depthlab.analytics"], "train", train)
    monkeypatch.setattr(local, "init_probe", lambda config: {"step": 0, "rank_measure": [0.5]})


@pytest.mark.slow  # 24 fake runs in 3 rounds: a few seconds
def test_seeds_auto_adds_seeds_only_to_undecided_cells(tiny_text_file, tmp_path, monkeypatch):
    calls, lines = [], []
    _fake_trainer(monkeypatch, calls)
    spec = sweep.SweepSpec(experiments=[sweep.Experiment(name="depth", grid={
        "model.n_layer": [1, 2, 4], "model.variant": ["plain", "prenorm"], "train.seed": [1, 2]})],
        base={"data.path": str(tiny_text_file), "model.n_embd": 16, "model.n_head": 2, "model.block_size": 16,
              "train.max_iters": 2})
    sw = tmp_path / "sw"
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=lines.append, seeds="auto")
    seeds = {}
    for v, L, s in calls:
        seeds.setdefault((v, L), []).append(s)
    # depth_helps and degradation compare 1 and 4 blocks (and 1 is plain's best shallower); plain's comparison
    # is decided at 2 seeds, so only pre-LN's 1- and 4-block cells get seeds 3-4 (the 2-seed estimate asks for
    # more, a round at most doubles); the 2-block cells are in no comparison and keep 2
    assert {k: sorted(v) for k, v in seeds.items()} == {
        ("plain", 1): [1, 2], ("plain", 2): [1, 2], ("plain", 4): [1, 2],
        ("prenorm", 1): [1, 2, 3, 4], ("prenorm", 2): [1, 2], ("prenorm", 4): [1, 2, 3, 4]}
    assert any("--seeds auto: undecided claims: adding seeds to 2 cells (up to 4 seeds per cell)" in s
               for s in lines)
    assert len(read_sweep_rows(sw)) == 16  # one row per run
    table = sweep.write_science_table(sw)
    assert "| yes (p = " in table and "n = 2-4)" in table and "undecided" not in table
    calls.clear()
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=lines.append)  # without --seeds: the added runs stay
    assert calls == [] and len(read_sweep_rows(sw)) == 16
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=lines.append, seeds="auto:3")
    assert calls == []  # everything decided: nothing re-run, nothing added


def test_seeds_auto_stops_at_max(tiny_text_file, tmp_path, monkeypatch):
    calls, lines = [], []
    _fake_trainer(monkeypatch, calls)
    spec = sweep.SweepSpec(experiments=[sweep.Experiment(name="depth", grid={
        "model.n_layer": [1, 4], "model.variant": ["plain", "prenorm"]})],
        base={"data.path": str(tiny_text_file), "model.n_embd": 16, "model.n_head": 2, "model.block_size": 16,
              "train.max_iters": 2, "train.seed": 1})
    sweep.run_sweep(spec, tmp_path / "sw", workers=1, threads=1, log=lines.append, seeds="auto:2")
    assert sorted(calls) == sorted((v, L, s) for v in ("plain", "prenorm") for L in (1, 4) for s in (1, 2))
    assert lines[-2].startswith("--seeds auto: nothing to add: every claim is decided, or its undecided "
                                "comparisons' cells have 2 seeds or more (--seeds auto:2 adds none past 2")
    assert "undecided (p = " in sweep.write_science_table(tmp_path / "sw")
    sweep.run_sweep(spec, tmp_path / "sw", workers=1, threads=1, log=lines.append, seeds="3")
    calls.clear()
    sweep.run_sweep(spec, tmp_path / "sw", workers=1, threads=1, log=lines.append, seeds="auto:2")
    assert calls == [] and " cells have 2 seeds or more " in lines[-2]  # they have 3: "have 2 seeds" was untrue


def test_a_progress_line_cuts_a_long_message_at_a_word_with_its_parentheses_closed():
    """A diverged run's line ended "(the gradient norm overflowed float32 at step 2 (every gradient is finite; lo"."""
    from depthlab.sweep.common import clip_message

    msg = ("the gradient norm overflowed float32 at step 2 (every gradient is finite; loss 4.17, grad norm inf, "
           "lr 3.92e+28, dtype bfloat16); lower train.learning_rate")
    assert clip_message(msg) == ("the gradient norm overflowed float32 at step 2 (every gradient is finite; loss 4.17, "
                                 "grad norm inf, lr 3.92e+28, dtype …)")
    assert clip_message("short (fine)") == "short (fine)"


def test_a_rerun_says_what_it_ran_and_what_the_sweep_holds_apart(tmp_path):
    """A re-run retrying one failed run said "0 ok, 1 not ok" of a sweep whose results.csv held an ok run too."""
    from depthlab.sweep.run import _finished_counts

    (tmp_path / "results.csv").write_text("run,status\nruns/a,ok\nruns/b,error\n")
    assert _finished_counts(tmp_path, [{"status": "error"}], 2) == (
        "this session: 1 ran (0 ok, 1 not ok), 1 skipped (finished before); the sweep: 1 ok, 1 not ok")
    assert _finished_counts(tmp_path, [{"status": "ok"}, {"status": "error"}], 2) == "1 ok, 1 not ok"


def test_init_from_a_sweep_folder_names_one_of_its_runs(tmp_path, capsys, tiny_text_file):
    from conftest import run_cli, tiny_cli_args

    sw = tmp_path / "sw"
    (sw / "runs" / "n_layer-1").mkdir(parents=True)
    (sw / "runs" / "n_layer-1" / "config.json").write_text("{}")
    (sw / "sweep.json").write_text("{}")
    rc, _, err = run_cli(capsys, "train", "--init-from", str(sw), *tiny_cli_args(tiny_text_file, tmp_path / "new"))
    assert rc == 2 and err.strip() == (f"depthlab: error: --init-from {sw} is a sweep folder: give one of its runs, "
                                       f"e.g. {sw / 'runs' / 'n_layer-1'} (1 run)"), err
    assert not (tmp_path / "new").exists()
