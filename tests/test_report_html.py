"""Figures, the self-contained HTML report, `depthlab report`, Chromium rendering, TensorBoard."""

import base64
import json
import math
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from depthlab.cli import main
from depthlab.errors import DepthlabError
from depthlab.report import Section, build_report, img_tag, make_all_plots, render_page
from depthlab.report import plots as P
from depthlab import train

from conftest import QUIET, TINY_TEXT, tiny_config

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the IHDR chunk; asserts the file is a PNG."""
    data = Path(path).read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def add_synthetic_analytics(rd: Path, n_layer: int = 2, n_head: int = 2, steps=range(0, 21, 5)) -> None:
    """Append gradient/probe records and write baselines.json and diagnosis.json (the analytics contract)."""
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


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """One tiny real run (TensorBoard on) plus synthetic analytics records; shared by the tests."""
    base = tmp_path_factory.mktemp("report")
    text = base / "tiny.txt"
    text.write_text(TINY_TEXT, encoding="utf-8")
    cfg = tiny_config(base / "run", text, train={"tensorboard": True})
    cfg.data.cache_dir = str(base / "cache")
    rd = train(cfg, **QUIET)
    add_synthetic_analytics(rd)
    return rd


@pytest.fixture(scope="module")
def report(run_dir):
    return build_report(run_dir)


ALL = ("loss", "grad_flow", "grad_layers", "update_ratio", "activations", "attn_entropy", "attention")


def test_plots_are_valid_pngs(run_dir, report):
    plots = run_dir / "plots"
    for name in ALL:
        w, h = png_size(plots / f"{name}.png")
        assert 500 <= w <= 3000 and 250 <= h <= 3000, (name, w, h)
        assert (plots / f"{name}.png").stat().st_size > 5000
    assert not (plots / "rezero_alpha.png").exists()  # rezero_alpha null: skipped, not drawn empty
    assert not list(plots.glob("*.tmp"))


def fresh_copy(run_dir: Path, dest: Path) -> Path:
    """A copy of the shared run without its plots/ (so every PNG found later was written by the test)."""
    dest = Path(shutil.copytree(run_dir, dest))
    shutil.rmtree(dest / "plots", ignore_errors=True)
    return dest


def test_each_plot_function_returns_its_path(run_dir, tmp_path):
    run_dir = fresh_copy(run_dir, tmp_path / "copy")
    run = P.load_run_data(run_dir)
    plots = run_dir / "plots"
    assert P.plot_loss(run) == plots / "loss.png"
    assert P.plot_grad_flow(run_dir) == plots / "grad_flow.png"  # a path works too
    assert P.plot_attention(run, snippet="Speak, speak.") == plots / "attention.png"
    assert P.plot_attention(run, snippet="\u2603 not in vocab") is None
    assert P.plot_rezero_alpha(run) is None  # rezero_alpha is null in these records: nothing drawn
    assert sorted(p.name for p in plots.iterdir()) == ["attention.png", "grad_flow.png", "loss.png"]
    for name in ("attention", "grad_flow", "loss"):
        w, h = png_size(plots / f"{name}.png")
        assert w >= 500 and h >= 250 and (plots / f"{name}.png").stat().st_size > 5000


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


def test_plotting_leaves_matplotlib_global_state_alone(run_dir, tmp_path):
    """In this process, under a non-Agg backend and a caller's style: the backend, rcParams and pyplot's
    figures stay as they were (and pyplot is not imported if it was not). Every figure, in a fresh
    process: the slow test below."""
    import matplotlib

    from depthlab.analytics.probe import plot_probe

    rd = with_rezero_gates(fresh_copy(run_dir, tmp_path / "copy"))
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
def test_every_plot_function_leaves_matplotlib_alone_in_a_fresh_process(run_dir, tmp_path):
    """A fresh process with the pdf backend: every figure (and the probe's) draws, pyplot is never
    imported (so no figure is left open), and the backend and rcParams are as the caller set them."""
    rd = with_rezero_gates(fresh_copy(run_dir, tmp_path / "copy"))
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


def test_runs_without_analytics_skip_gracefully(run_dir, tmp_path):
    rd = tmp_path / "old"
    rd.mkdir()
    for f in ("config.json", "summary.json"):
        shutil.copy(run_dir / f, rd / f)
    core = [{k: v for k, v in r.items() if k != "kind"}  # as written before records had a kind
            for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
            if r.get("kind") in ("eval", "train")]
    (rd / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in core) + '{"step": 3, "tor')
    assert list(make_all_plots(rd)) == ["loss"]  # no checkpoint, no grads, no probes, torn last line
    html = build_report(rd).read_text(encoding="utf-8")
    assert "No baselines.json" in html and "No diagnosis.json" in html and "Not recorded in this run" in html

    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text(json.dumps({"model": {"n_layer": 2}}))
    assert make_all_plots(bare) == {}
    assert "Nothing to plot yet" in build_report(bare).read_text(encoding="utf-8")


def test_html_is_self_contained(run_dir, report):
    html = report.read_text(encoding="utf-8")
    assert report == run_dir / "report.html"
    uris = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    embedded = sorted(base64.b64decode(u) for u in uris)
    on_disk = sorted(p.read_bytes() for p in (run_dir / "plots").glob("*.png"))
    assert len(uris) == len(ALL) and embedded == on_disk  # every plot, embedded byte for byte
    assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?\s*(https?:|//|file:)""", html, re.I)
    assert "http://" not in html and "https://" not in html
    assert "<script" not in html and "Content-Security-Policy" in html
    # values from every part of the run are shown, and escaped
    assert "no improvement &lt;for&gt; 3 evals &amp; counting" in html
    for s in ("Diagnosis", "Baselines", "Configuration", "Summary", "best_val_loss", "bigram", "n_layer"):
        assert s in html


def test_render_page_reusable(run_dir):
    page = render_page("Sweep <x>", [Section("Curves", img_tag(run_dir / "plots" / "loss.png", "loss")),
                                      ("Notes", "<p>ok</p>")], subtitle="a & b", cards=[("runs", "3", "")])
    assert page.startswith("<!DOCTYPE html>") and "Sweep &lt;x&gt;" in page and "a &amp; b" in page
    assert page.count("data:image/png;base64,") == 1 and 'href="#notes"' in page
    with pytest.raises(DepthlabError, match="not a PNG"):
        img_tag(run_dir / "config.json")


def test_report_cli(run_dir, tmp_path, capsys):
    out = tmp_path / "r.html"
    skip = ["--skip", *(n for n in ALL if n != "loss")]  # one figure is enough here (speed)
    assert main(["report", str(run_dir), "--out", str(out), *skip]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert out.read_text(encoding="utf-8").count("data:image/png") == 1
    assert main(["report", str(run_dir), "--out", str(out), *skip]) == 0  # written by us: may be replaced

    mine = tmp_path / "notes.html"
    mine.write_text("my notes")
    for argv, msg in ((["report", str(tmp_path / "missing")], "not found"),
                      (["report", str(tmp_path)], "not a depthlab run directory"),
                      (["report", str(run_dir), "--out", str(mine)], "refusing to overwrite"),
                      (["report", str(run_dir), "--out", str(tmp_path)], "is a folder"),
                      (["report"], "run_dir")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("depthlab: error:") and msg in err and "Traceback" not in err
    assert mine.read_text() == "my notes"


def test_report_listed_in_help(capsys):
    assert main(["--help"]) == 0
    assert re.search(r"^\s+report\s+write a self-contained HTML report", capsys.readouterr().out, re.M)


CHECK_SCRIPT = """<pre id="check">pending</pre><script>
window.onerror = function (m) { document.getElementById('check').textContent = 'ERROR ' + m; };
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  document.getElementById('check').textContent = 'IMAGES ' + JSON.stringify(imgs.map(function (i) {
    return [i.complete, i.naturalWidth, i.naturalHeight, i.getBoundingClientRect().width]; }));
});
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian package `chromium`); "
                                             "the HTML is still checked without a browser")
def test_report_renders_in_headless_chromium(report, tmp_path):
    html = report.read_text(encoding="utf-8")
    # The report itself allows no scripts; this copy lets one inline checker in, nothing else.
    html = html.replace("default-src 'none';", "default-src 'none'; script-src 'unsafe-inline';", 1)
    page = tmp_path / "check.html"
    page.write_text(html.replace("</body>", CHECK_SCRIPT + "</body>"), encoding="utf-8")
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr",
           "--v=0", "--window-size=1280,1000", "--virtual-time-budget=2000", "--dump-dom", page.as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r'<pre id="check">(.*?)</pre>', res.stdout, re.S)
    assert m, res.stdout[:2000]
    assert m.group(1).startswith("IMAGES "), m.group(1)
    imgs = json.loads(m.group(1)[len("IMAGES "):])
    assert len(imgs) == len(ALL)
    for complete, w, h, shown in imgs:
        assert complete and w > 300 and h > 200 and shown > 300
    assert "Content Security Policy" not in res.stderr  # nothing tried to load from elsewhere
    assert "Uncaught" not in res.stderr


def test_tensorboard_scalars(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tb"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for tag in ("val/loss", "train/loss", "lr"):
        assert tag in tags, tags
    assert [e.step for e in acc.Scalars("val/loss")] == [0, 10, 20]  # eval_interval 10, max_iters 20
    assert [e.step for e in acc.Scalars("train/loss")] == [5, 10, 15, 20]  # log_interval 5
    assert [e.step for e in acc.Scalars("lr")] == [5, 10, 15, 20]
    evals = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "val_loss" in r]
    assert acc.Scalars("val/loss")[-1].value == pytest.approx(evals[-1]["val_loss"], rel=1e-6)


def test_report_from_real_analytics_records(tmp_path):
    """A rezero run with the gradient monitor and probes on: every figure, the α plot included."""
    pytest.importorskip("depthlab.analytics")
    text = tmp_path / "tiny.txt"
    text.write_text(TINY_TEXT, encoding="utf-8")
    cfg = tiny_config(tmp_path / "run", text, model={"variant": "rezero"},
                      train={"max_iters": 10, "eval_interval": 5, "grad_log_interval": 5, "probe_interval": 5})
    rd = train(cfg, **QUIET)
    html = build_report(rd, skip=("attention",)).read_text(encoding="utf-8")
    drawn = sorted(p.stem for p in (rd / "plots").glob("*.png"))
    assert drawn == sorted(set(ALL) - {"attention"} | {"rezero_alpha"})
    assert html.count("data:image/png;base64,") == len(drawn)
