"""Ctrl-C (SIGINT) while ``depthlab train`` measures its auto settings, before the first training step."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import tiny_cli_args

# the command line, with the timing of each candidate replaced by a slow fake that says when it starts
_SCRIPT = """
import sys, time
import depthlab.training.autotune as at

def slow(*a, **k):
    print("TIMING", file=sys.stderr, flush=True)
    time.sleep(60)

at.time_settings = slow
from depthlab.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_ctrl_c_during_autotune_exits_130_in_one_line_leaving_the_cache_and_no_run(tmp_path, tiny_text_file):
    cache = tmp_path / "cache"
    cache.mkdir()
    mine = {"some key": {"omp_wait": "passive"}}  # an earlier measurement: kept, and the file stays JSON
    (cache / "autotune.json").write_text(json.dumps(mine))
    out = tmp_path / "run"
    env = {**os.environ, "DEPTHLAB_CACHE": str(cache), "DEPTHLAB_AUTOTUNE": "on", "OMP_NUM_THREADS": "1"}
    args = tiny_cli_args(tiny_text_file, out, train__threads=0, train__dtype="auto", train__attention="auto",
                         train__max_iters=100_000)
    p = subprocess.Popen([sys.executable, "-c", _SCRIPT, "train", *args], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                                            signal.SIG_DFL))
    try:
        assert p.stderr.readline().strip() == "TIMING"  # measuring now
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        rest_out, rest_err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130, rest_err
    assert rest_err == "depthlab: interrupted\n", rest_err
    assert json.loads((cache / "autotune.json").read_text()) == mine
    assert not out.exists() or not any(out.iterdir()), sorted(out.rglob("*"))
    # a later run into the same folder starts as if nothing happened
    env["DEPTHLAB_AUTOTUNE"] = "off"
    again = subprocess.run([sys.executable, "-m", "depthlab", "train", *tiny_cli_args(tiny_text_file, out)],
                           env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
