"""What a new user found wrong in the sweep and its report (README claims, dry-run estimates, exit codes)."""

import re
from pathlib import Path

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
