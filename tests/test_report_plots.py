"""Reports tell the truth and fit the page (issue 14, kind 4; issue 13's samples in the report).

The rank measure shown lies in [0, 1]; blocks are numbered 0..L-1; figures and tables fit a
1280-px-wide page (checked in headless Chromium when it is installed); throughputs have no
useless decimals; the training-time samples appear in the run report; the bigram card says what
the diagnosis says.
"""

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import QUIET, TINY_TEXT, tiny_config
from depthlab import train
from depthlab.analytics.activations import rank_measure
from depthlab.report import build_report, html_table, render_page
from depthlab.report import html as H
from depthlab.report import plots as P
from depthlab.units import fmt_value

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
CONTENT_PX = 1240 - 2 * 28  # the report's content column (main max-width minus padding)
N_LAYER, N_HEAD = 3, 8


def png_width(path: Path) -> int:
    return struct.unpack(">I", Path(path).read_bytes()[16:20])[0]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny real run with 8 heads, probes, gradient records and samples every 5 steps."""
    base = tmp_path_factory.mktemp("truth")
    text = base / "tiny.txt"
    text.write_text(TINY_TEXT, encoding="utf-8")
    cfg = tiny_config(base / "run", text, model={"n_layer": N_LAYER, "n_head": N_HEAD},
                      train={"max_iters": 15, "eval_interval": 5, "sample_interval": 5, "sample_tokens": 20,
                             "grad_log_interval": 5, "probe_interval": 5})
    cfg.data.cache_dir = str(base / "cache")
    rd = train(cfg, **QUIET)
    with open(rd / "metrics.jsonl", "a", encoding="utf-8") as f:  # one sample with HTML in it
        f.write(json.dumps({"kind": "sample", "step": 15, "text": "<b>bold</b> & co"}) + "\n")
    return rd


@pytest.fixture(scope="module")
def report(run_dir):
    return build_report(run_dir)


# ----------------------------------------------------------------------------- rank measure in [0, 1]
def test_rank_measure_never_exceeds_one():
    x = torch.zeros(1, 10, 4)
    x[0, 0, 0] = 1.0  # one token carries everything: the mean-only ratio is sqrt(2) * 9 / 10 = 1.27
    assert rank_measure(x) == pytest.approx(1.0)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        v = rank_measure(torch.randn(4, 8, 6, generator=g) * torch.rand(4, 8, 1, generator=g) ** 4)
        assert 0.0 <= v <= 1.0
    same = torch.randn(1, 4, generator=g).expand(6, 4)
    assert rank_measure(same) == pytest.approx(0.0, abs=1e-6)


def test_postnorm_probe_rank_at_most_one(tmp_path, tiny_text_file):
    from depthlab.analytics.probe import probe_at_init

    cfg = tiny_config(tmp_path, tiny_text_file, model={"variant": "postnorm", "n_layer": 3, "block_size": 64})
    ranks = [r["rank_measure"] for r in probe_at_init(cfg, n_batches=2, batch_size=4)["layers"]]
    assert all(0.0 <= v <= 1.0 for v in ranks), ranks  # 1.01 before: the mean is no minimiser in this norm


def test_old_records_above_one_are_shown_as_one():
    assert P.rank_for_display(1.0092) == 1.0 and P.rank_for_display(0.42) == 0.42


# ----------------------------------------------------------------------------- block numbering 0..L-1
def test_blocks_numbered_from_zero(run_dir, monkeypatch):
    figs = {}
    monkeypatch.setattr(P, "save_run_figure", lambda fig, run_dir, name, *a, **k: figs.setdefault(name, fig) and None)
    run = P.load_run_data(run_dir)
    for fn in (P.plot_grad_layers, P.plot_activations, P.plot_update_ratio, P.plot_attn_entropy, P.plot_grad_flow):
        fn(run)
    assert set(figs) == {"grad_layers", "activations", "update_ratio", "attn_entropy", "grad_flow"}
    for name, fig in figs.items():
        for ax in fig.axes:
            labels = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
            blocks = sorted(int(m) for t in labels for m in re.findall(r"^block (\d+)$", t))
            if blocks:
                assert blocks == list(range(N_LAYER)), (name, labels)
            for axis, label in ((ax.xaxis, ax.get_xlabel()), (ax.yaxis, ax.get_ylabel())):
                if label.startswith("block"):
                    ticks = [t for t in axis.get_ticklocs() if axis.get_view_interval()[0] <= t
                             <= axis.get_view_interval()[1]]
                    assert min(ticks) == 0 and max(ticks) == N_LAYER - 1, (name, label, ticks)


# ----------------------------------------------------------------------------- fits a 1280-px page
def test_run_figures_fit_the_content_column(run_dir, report):
    widths = {p.stem: png_width(p) for p in (run_dir / "plots").glob("*.png")}
    assert "attention" in widths and len(widths) >= 7
    assert all(w <= CONTENT_PX for w in widths.values()), widths  # 8 heads wrap onto rows of 4


def test_wide_tables_wrap_at_joints():
    cols = ["n_layer", "variant", "seed", "final_train_loss", "final_val_loss", "best_val_loss", "wall_time_s",
            "status", "best_val_bpc", "tokens_per_sec", "grad_ratio_first_last", "last_block_rank", "diagnosis", "run"]
    t = html_table([[16, "prenorm", 1, 2.2719, 2.2719, 2.2719, 131.64, "ok", 3.2777, 3889.3923, 6.1388, 0.8878,
                     "bigram_stuck;vanishing_gradients", "runs/depth/n_layer-16_variant-prenorm"]], header=cols)
    assert t.startswith('<div class="table-wrap"><table class="compact">')
    assert "final_<wbr>train_<wbr>loss" in t and "bigram_<wbr>stuck;<wbr>vanishing_<wbr>gradients" in t
    assert ">3,889<" in t and "3,889.3923" not in t


@pytest.mark.parametrize("value,shown", [(3098.5297, "3,099"), (104384.12, "104,384"), (198.288, "198.3"),
                                         (2.14631, "2.1463"), (0.90312, "0.9031"), (4.5e-05, "4.500e-05"),
                                         (1234, "1234"), (123456, "123,456")])
def test_numbers_without_useless_decimals(value, shown):
    assert fmt_value(value) == shown


PAGE_CHECK = """<pre id="check">pending</pre><script>
window.addEventListener('load', function () {
  var out = {page: document.documentElement.scrollWidth, scrolling: [], scaled: []};
  document.querySelectorAll('.table-wrap, figure').forEach(function (e) {
    if (e.scrollWidth > e.clientWidth + 1) out.scrolling.push(e.className || e.tagName); });
  Array.prototype.forEach.call(document.images, function (i) {
    out.scaled.push([i.naturalWidth, Math.round(i.getBoundingClientRect().width)]); });
  document.getElementById('check').textContent = 'PAGE ' + JSON.stringify(out);
});
</script>"""


def render_1280(html: str, tmp_path: Path) -> dict:
    html = html.replace("default-src 'none';", "default-src 'none'; script-src 'unsafe-inline';", 1)
    page = tmp_path / "check.html"
    page.write_text(html.replace("</body>", PAGE_CHECK + "</body>"), encoding="utf-8")
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,1000",
           "--virtual-time-budget=2000", "--dump-dom", page.as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r'<pre id="check">PAGE (.*?)</pre>', res.stdout, re.S)
    assert m, res.stdout[:2000]
    return json.loads(m.group(1))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian package `chromium`)")
def test_run_report_fits_1280_px_in_chromium(report, tmp_path):
    out = render_1280(report.read_text(encoding="utf-8"), tmp_path)
    assert out["page"] <= 1280 and out["scrolling"] == [], out
    assert all(abs(shown - natural) <= 2 for natural, shown in out["scaled"]), out  # 1:1 (+ the 1-px border)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian package `chromium`)")
def test_sweep_like_page_fits_1280_px_in_chromium(run_dir, tmp_path):
    """A runs table of 16 columns and a 1430-px learning-curve grid (the sweep report's sizes)."""
    from depthlab.figures import new_figure, panel_grid

    fig = new_figure((13.0, 5.6))
    panel_grid(fig, nrows=2, ncols=4)
    png = tmp_path / "grid.png"
    fig.savefig(png, dpi=110)
    cols = ["n_layer", "variant", "seed", "final_train_loss", "final_val_loss", "best_val_loss", "wall_time_s",
            "status", "train.learning_rate", "best_val_bpc", "tokens_per_sec", "grad_ratio_first_last",
            "last_block_rank", "diagnosis", "run"]
    row = [16, "prenorm", 1, 2.2719, 2.2719, 2.2719, 131.64, "ok", 0.001, 3.2777, 3889.3923, 6.1388, 0.8878,
           "bigram_stuck;vanishing_gradients;rank_collapse;uniform_attention",
           "runs/depth/learning_rate-0.001_n_layer-16_variant-prenorm_seed-1"]
    page = render_page("sweep", [("Curves", H.img_tag(png, "grid")), ("All runs", html_table([row] * 5, cols))])
    out = render_1280(page, tmp_path)
    assert png_width(png) == 1430
    assert out["page"] <= 1280 and out["scrolling"] == [], out
    assert out["scaled"][0][1] <= CONTENT_PX  # scaled into the column, not a scrolling box


# ----------------------------------------------------------------------------- samples in the run report
def test_run_report_shows_training_samples(run_dir, report):
    html = report.read_text(encoding="utf-8")
    assert 'href="#samples"' in html and "Samples during training" in html
    section = html[html.index('id="samples"'):]
    section = section[:section.index("</section>")]
    steps = [int(s) for s in re.findall(r'<tr><td class="num">(\d+)</td>', section)]
    recorded = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
                if r.get("kind") == "sample"]
    assert steps == [r["step"] for r in recorded] == [5, 10, 15, 15]
    for r in recorded[:-1]:
        assert H.esc(r["text"]) in section
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; co" in section and "<b>bold</b>" not in section


def test_many_samples_are_thinned_and_none_means_no_section(run_dir, tmp_path):
    rd = Path(shutil.copytree(run_dir, tmp_path / "many"))
    with open(rd / "metrics.jsonl", "a", encoding="utf-8") as f:
        for s in range(20, 520, 10):
            f.write(json.dumps({"kind": "sample", "step": s, "text": f"text at {s}"}) + "\n")
    body = H._samples_section(P.load_run_data(rd))
    steps = [int(s) for s in re.findall(r'<tr><td class="num">(\d+)</td>', body)]
    assert len(steps) == H.MAX_SAMPLES and steps[0] == 5 and steps[-1] == 510 and "54 samples recorded" in body
    bare = Path(shutil.copytree(run_dir, tmp_path / "bare"))
    lines = (bare / "metrics.jsonl").read_text().splitlines(keepends=True)
    (bare / "metrics.jsonl").write_text("".join(x for x in lines if '"kind": "sample"' not in x))
    assert H._samples_section(P.load_run_data(bare)) is None


# ----------------------------------------------------------------------------- the bigram card
def test_bigram_card_agrees_with_the_diagnosis():
    base = {"uniform": {"nats": 4.174}, "unigram": {"nats": 3.347}, "bigram": {"nats": 2.482}}
    assert H._level_words(2.441, base) == "within 0.05 of bigram, little context used"
    assert H._level_words(2.2, base) == "below bigram, uses context"
    assert H._level_words(3.35, base) == "at the unigram level, no context used at all"
    assert H._level_words(2.441, {"bigram": {"nats": 2.482}}) == "within 0.05 of bigram, little context used"


# ----------------------------------------------------------------------------- the whole-split card
def test_whole_split_card_shows_the_final_validation(run_dir):
    data = P.load_run_data(run_dir)
    fv = (data.summary or {}).get("final_validation")
    assert fv is not None and fv["tokens"] == fv["of_tokens"]  # the tiny corpus's whole val split
    card = [c for c in H._cards(data) if c[0] == "whole val split"]
    assert card == [("whole val split", f"{fv['val_loss']:.3f}",
                     f"nats/char, best weights, all {fmt_value(fv['of_tokens'])} val characters")]
    data.summary = {**data.summary, "final_validation": {**fv, "tokens": 64}}
    assert [c for c in H._cards(data) if c[0] == "whole val split"][0][2].startswith("nats/char, best weights, 64 of ")
    data.summary = {**data.summary, "final_validation": None}  # off, or a run older than the field
    assert not [c for c in H._cards(data) if c[0] == "whole val split"]
