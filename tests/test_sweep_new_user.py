"""What a new user found wrong in the sweep and its report (README claims, dry-run estimates, exit codes)."""

import re
from pathlib import Path

import pytest

from depthlab.sweep import SWEEP_DEFAULTS

ROOT = Path(__file__).resolve().parents[1]


def test_readme_sweep_lines_do_not_promise_a_time_budget_the_sweep_removes():
    assert SWEEP_DEFAULTS["train.max_time"] == 0.0
    lines = [ln for ln in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
             if ln.startswith("depthlab sweep") and "--train.max_time" not in ln]
    assert lines
    for ln in lines:
        assert not re.search(r"planned into its|270 s budget\)", ln), ln
    ff = [ln for ln in lines if "model.ff_mult=1,2,4,8" in ln][0]
    assert "5,000 steps each" in ff and "train.max_time 0" in ff


def _estimates(tmp_path, **overrides):
    from depthlab.sweep import build_spec, estimate_seconds, expand
    spec = build_spec(None, None, ["model.n_layer=1,8"], overrides, None)
    return {p.name: estimate_seconds(p.config) for p in expand(spec, tmp_path / "sw")}


def test_dry_run_estimate_stops_at_max_time_plus_what_runs_outside_it(tmp_path):
    free = _estimates(tmp_path)  # the sweep default: max_time 0, the whole 5,000 steps
    capped = _estimates(tmp_path, **{"train.max_time": 30})
    assert free["n_layer-8"] > 1000 and free["n_layer-1"] > 100
    for name, e in capped.items():
        # 30 s of loop + 4 s start-up + the stop's evaluation and the whole-val-split pass: a few seconds
        assert 34.0 < e < 50.0, (name, e)
    assert capped["n_layer-8"] > capped["n_layer-1"]  # the deeper model's final validation costs more
    short = _estimates(tmp_path, **{"train.max_time": 30, "train.max_iters": 20})
    assert short == _estimates(tmp_path, **{"train.max_time": 0, "train.max_iters": 20})  # fits: not capped
    assert short["n_layer-1"] < 30


def test_report_max_iters_says_what_ran_apart_from_fit_to_time_plan(tmp_path):
    import json

    from depthlab.report import html as H
    from depthlab.report.run_data import RunData

    rd = tmp_path / "run"
    rd.mkdir()
    cfg = {"model": {}, "data": {}, "train": {"max_iters": 5000, "warmup_iters": 50, "max_time": 270.0},
           "resolved": {"plan": {"max_iters": 1261, "warmup_iters": 50, "lr_decay_iters": 1261}}}
    (rd / "config.json").write_text(json.dumps(cfg))

    def rows(summary):
        (rd / "summary.json").write_text(json.dumps(summary))
        return dict(H.config_rows(RunData(rd), "train"))

    # the new user's run: the plan was 1261 steps, the budget ended it at 874
    cut = rows({"final_step": 874, "stopped_by": "max_time"})
    assert cut["max_iters"] == "5000 (planned: 1261 by train.fit_to_time; ran: 874, stopped by max_time)"
    assert cut["warmup_iters"] == 50
    assert rows({"final_step": 1261, "stopped_by": "max_time"})["max_iters"] == \
        "5000 (planned: 1261 by train.fit_to_time; ran: 1261)"
    del cfg["resolved"]["plan"]  # fit_to_time off: max_time only cut the run
    (rd / "config.json").write_text(json.dumps(cfg))
    assert rows({"final_step": 874, "stopped_by": "max_time"})["max_iters"] == "5000 (ran: 874, stopped by max_time)"
    assert rows({"final_step": 5000, "stopped_by": "max_iters"})["max_iters"] == 5000


def _sweep_cli(capsys, text_file, out_dir, *argv):
    from conftest import TINY_SWEEP, run_cli

    axes = {a.split("=")[0] for a in argv if "=" in a}  # a flag that is also a grid axis is refused
    flags = [f"--{k}={v}" for k, v in TINY_SWEEP.items() if k not in axes]
    return run_cli(capsys, "sweep", f"--data.path={text_file}", *flags, "--train.max_time=0", "--workers", "1",
                   "--threads", "1", "--no_report", "--out_dir", str(out_dir), *argv)


@pytest.mark.slow
def test_sweep_exits_1_when_a_run_is_not_ok_and_names_it(tiny_text_file, tmp_path, capsys):
    sw = tmp_path / "sw"
    # block_size 4096 exceeds the tiny corpus: that run ends with an error, the other is ok
    rc, out, err = _sweep_cli(capsys, tiny_text_file, sw, "--grid", "model.block_size=16,4096")
    assert "1 ok, 1 not ok" in out
    assert rc == 1
    assert err.strip().splitlines()[-1] == ("depthlab: 1 of 2 runs gave no result: block_size-4096 (error) "
                                            "(results.csv's status and message columns say why); exit status 1")
    rc, out, err = _sweep_cli(capsys, tiny_text_file, sw, "--grid", "model.block_size=16,4096")  # again: still
    assert rc == 1 and "block_size-4096 (error)" in err
    assert "this session: 1 ran (0 ok, 1 not ok), 1 skipped (finished before); the sweep: 1 ok, 1 not ok" in out
    rc, out, err = _sweep_cli(capsys, tiny_text_file, tmp_path / "good", "--grid", "model.block_size=8,16")
    assert rc == 0 and "2 ok, 0 not ok" in out and "not ok:" not in err


@pytest.mark.slow
def test_sweep_and_dry_run_refuse_a_device_this_machine_lacks_up_front(tiny_text_file, tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    sw = tmp_path / "sw"
    for dry in (["--dry_run"], []):
        rc, out, err = _sweep_cli(capsys, tiny_text_file, sw, "--grid", "train.device=cpu,cuda", *dry)
        assert rc == 2 and out == ""
        assert err.strip() == ("depthlab: error: run device-cuda: train.device cuda requested but CUDA is not "
                               "available on this machine; give train.device cpu or auto in the sweep's grid, file "
                               "or command line (or --backend ray on a cluster that has the device)")
        assert not sw.exists()  # nothing written, no run started
    rc, out, _ = _sweep_cli(capsys, tiny_text_file, sw, "--grid", "train.device=cpu,auto", "--dry_run")
    assert rc == 0 and "2 runs, about" in out


def test_a_value_listed_twice_in_a_grid_is_refused_naming_it(tmp_path, capsys):
    import pytest

    from conftest import run_cli
    from depthlab.errors import DepthlabError
    from depthlab.sweep import load_sweep_file, parse_grid_arg

    rc, out, err = run_cli(capsys, "sweep", "--dry_run", "--grid", "model.n_layer=1,1,2", "--out_dir",
                           str(tmp_path / "sw"))
    assert rc == 2 and out == "" and not (tmp_path / "sw").exists()
    assert err.strip() == ("depthlab: error: --grid 'model.n_layer=1,1,2': model.n_layer lists 1 twice; list each "
                           "value once (model.n_layer=1,2)")
    with pytest.raises(DepthlabError, match=r"lists 0\.001 twice \(as 1e-3 and 0\.001\); list each value once "
                                            r"\(train\.learning_rate=1e-3,2e-3\)"):
        parse_grid_arg("train.learning_rate=1e-3,0.001,2e-3")
    assert parse_grid_arg("model.n_layer=4,1,2") == ("model.n_layer", [4, 1, 2])
    f = tmp_path / "s.yaml"
    f.write_text("grid:\n  model.variant: [plain, prenorm, plain]\n")
    with pytest.raises(DepthlabError, match=r"model\.variant lists plain twice; list each value once "
                                            r"\(model\.variant=plain,prenorm\)"):
        load_sweep_file(f)
