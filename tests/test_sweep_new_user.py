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
