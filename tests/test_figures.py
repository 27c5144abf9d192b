"""depthlab.figures: plotting (run report, probe) leaves matplotlib's global state alone."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from depthlab.report import plots as P

from conftest import fresh_copy, png_size


def with_rezero_gates(rd: Path) -> Path:
    """Give the probe records ReZero gates, so plot_rezero_alpha draws too."""
    lines = (rd / "metrics.jsonl").read_text().splitlines(keepends=True)
    alpha = json.dumps([[0.01 * b, -0.02 * b] for b in range(2)])
    (rd / "metrics.jsonl").write_text("".join(line.replace('"rezero_alpha": null', f'"rezero_alpha": {alpha}')
                                              for line in lines))
    return rd


PROBE_RESULT = {"config": {"variant": "prenorm", "norm": "layernorm", "n_layer": 3},
                "layers": [{"block": b, "grad_norm": 0.1 * (b + 1), "act_rms": 1.0 + b, "rank_measure": 0.5 / (b + 1)}
                           for b in range(3)]}


@pytest.mark.slow
def test_plotting_leaves_matplotlib_global_state_alone(report_run, tmp_path):
    """In this process, under a non-Agg backend and a caller's style: the backend, rcParams and pyplot's
    figures stay as they were (and pyplot is not imported if it was not). Every figure, in a fresh
    process: the slow test below."""
    import matplotlib

    from depthlab.analytics.probe import plot_probe

    rd = with_rezero_gates(fresh_copy(report_run, tmp_path / "copy"))
    backend, had_pyplot = matplotlib.get_backend(), "matplotlib.pyplot" in sys.modules
    matplotlib.use("pdf")  # the caller's choice; plots must not switch it to Agg
    try:
        with matplotlib.rc_context({"lines.linewidth": 3.25, "font.size": 13.0}):  # the caller's style
            figs = sys.modules["matplotlib.pyplot"].get_fignums() if had_pyplot else []
            rc = {k: repr(v) for k, v in matplotlib.rcParams.items()}
            assert P.plot_loss(rd) == rd / "plots" / "loss.png"
            assert P.plot_rezero_alpha(rd) == rd / "plots" / "rezero_alpha.png"
            assert plot_probe(PROBE_RESULT, rd / "probe.png") == rd / "probe.png"
            assert matplotlib.get_backend() == "pdf"
            assert [k for k, v in matplotlib.rcParams.items() if repr(v) != rc.get(k)] == []
            if had_pyplot:
                assert sys.modules["matplotlib.pyplot"].get_fignums() == figs
            else:
                assert "matplotlib.pyplot" not in sys.modules
    finally:
        matplotlib.use(backend)
    for name in ("plots/loss.png", "plots/rezero_alpha.png", "probe.png"):
        png_size(rd / name)


PLOT_STATE_CHILD = r"""
import json, sys
from pathlib import Path
import matplotlib
matplotlib.use("pdf")  # a caller's non-Agg backend: the library must leave it as it is
matplotlib.rcParams["lines.linewidth"] = 3.25  # and the caller's style
before = {k: repr(v) for k, v in matplotlib.rcParams.items()}
from depthlab.report import plots as P
from depthlab.analytics.probe import plot_probe

rd = Path(sys.argv[1])
drawn = {name: str(fn(rd)) for name, (fn, _) in P.PLOTS.items()}
drawn["probe"] = str(plot_probe(json.loads(sys.argv[2]), rd / "probe.png"))
after = {k: repr(v) for k, v in matplotlib.rcParams.items()}
figs = sys.modules["matplotlib.pyplot"].get_fignums() if "matplotlib.pyplot" in sys.modules else []
print(json.dumps({"backend": matplotlib.get_backend(), "pyplot": "matplotlib.pyplot" in sys.modules,
                  "figures": figs, "rc_changed": sorted(k for k in before if before[k] != after.get(k)),
                  "drawn": drawn}))
"""


@pytest.mark.slow
def test_every_plot_function_leaves_matplotlib_alone_in_a_fresh_process(report_run, tmp_path):
    """A fresh process with the pdf backend: every figure (and the probe's) draws, pyplot is never
    imported (so no figure is left open), and the backend and rcParams are as the caller set them."""
    rd = with_rezero_gates(fresh_copy(report_run, tmp_path / "copy"))
    r = subprocess.run([sys.executable, "-c", PLOT_STATE_CHILD, str(rd), json.dumps(PROBE_RESULT)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["backend"] == "pdf"
    assert not res["pyplot"] and res["figures"] == []
    assert res["rc_changed"] == []
    assert res["drawn"] == {**{name: str(rd / "plots" / f"{name}.png") for name in P.PLOTS},
                            "probe": str(rd / "probe.png")}
    for path in res["drawn"].values():
        png_size(Path(path))  # written by the child (plots/ was emptied first), and a PNG
