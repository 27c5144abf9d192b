"""depthlab.report.html: the self-contained HTML report, and reports that tell the truth and fit the
page (issue 14, kind 4; issue 13's samples in the report).

Figures and tables fit a 1280-px-wide page (checked in headless Chromium when it is installed);
the training-time samples appear in the run report; the bigram card says what the diagnosis says;
reports say bits per character for every tokenizer."""

import base64
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from depthlab import train
from depthlab.cli import main
from depthlab.errors import DepthlabError
from depthlab.report import (PLOTS, Section, build_report, html as H, html_table, img_tag, make_all_plots,
                             plots as P, render_page)
from depthlab.report.plots import RunData
from depthlab.units import fmt_value

from conftest import CONTENT_PX, QUIET, RUN_FIGURES, TINY_TEXT, png_width, tiny_config


CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


@pytest.mark.slow
def test_runs_without_analytics_skip_gracefully(report_run, tmp_path):
    rd = tmp_path / "old"
    rd.mkdir()
    for f in ("config.json", "summary.json"):
        shutil.copy(report_run / f, rd / f)
    core = [{k: v for k, v in r.items() if k != "kind"}  # as written before records had a kind
            for r in map(json.loads, (report_run / "metrics.jsonl").read_text().splitlines())
            if r.get("kind") in ("eval", "train")]
    (rd / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in core) + '{"step": 3, "tor')
    assert list(make_all_plots(rd)) == ["loss"]  # no checkpoint, no grads, no probes, torn last line
    html = build_report(rd).read_text(encoding="utf-8")
    assert "No diagnosis.json" in html  # baselines.json: recomputed from the run's corpus, and said so
    assert "Recomputed from the run" in html and "its baselines.json is missing or damaged" in html
    assert "Not drawn: " in html and "not recorded in this run, not measurable for this model" in html

    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text(json.dumps({"model": {"n_layer": 2}}))
    assert make_all_plots(bare) == {}
    assert "Nothing to plot yet" in build_report(bare).read_text(encoding="utf-8")


@pytest.mark.slow  # over a second: the fast tier stays under 3 min
def test_html_is_self_contained(report_run, report_page):
    html = report_page.read_text(encoding="utf-8")
    assert report_page == report_run / "report.html"
    uris = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    embedded = sorted(base64.b64decode(u) for u in uris)
    on_disk = sorted(p.read_bytes() for p in (report_run / "plots").glob("*.png"))
    assert len(uris) == len(RUN_FIGURES) and embedded == on_disk  # every plot, embedded byte for byte
    assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?\s*(https?:|//|file:)""", html, re.I)
    assert "http://" not in html and "https://" not in html
    assert "<script" not in html and "Content-Security-Policy" in html
    # values from every part of the run are shown, and escaped
    assert "no improvement &lt;for&gt; 3 evals &amp; counting" in html
    for s in ("Diagnosis", "Baselines", "Configuration", "Summary", "best_val_loss", "bigram", "n_layer"):
        assert s in html


def test_render_page_reusable(report_run, report_page):  # report_page: the plots it embeds are drawn
    page = render_page("Sweep <x>", [Section("Curves", img_tag(report_run / "plots" / "loss.png", "loss")),
                                      ("Notes", "<p>ok</p>")], subtitle="a & b", cards=[("runs", "3", "")])
    assert page.startswith("<!DOCTYPE html>") and "Sweep &lt;x&gt;" in page and "a &amp; b" in page
    assert page.count("data:image/png;base64,") == 1 and 'href="#notes"' in page
    with pytest.raises(DepthlabError, match="not a PNG"):
        img_tag(report_run / "config.json")


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
@pytest.mark.slow
def test_report_renders_in_headless_chromium(report_page, tmp_path):
    html = report_page.read_text(encoding="utf-8")
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
    assert len(imgs) == len(RUN_FIGURES)
    for complete, w, h, shown in imgs:
        assert complete and w > 300 and h > 200 and shown > 300
    assert "Content Security Policy" not in res.stderr  # nothing tried to load from elsewhere
    assert "Uncaught" not in res.stderr


@pytest.mark.slow  # a few seconds: the fast tier stays under 3 min
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
    assert drawn == sorted(set(RUN_FIGURES) - {"attention"} | {"rezero_alpha"})
    assert html.count("data:image/png;base64,") == len(drawn)


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_run_of_the_previous_release_gets_a_report(old_run, capsys):
    """Two figures (speed): the loss curves (old eval/train records) and gradient flow (old grad records)."""
    skip = ["grad_layers", "update_ratio", "activations", "attn_entropy", "attention", "layers", "context"]
    assert main(["report", str(old_run), "--skip", *skip]) == 0
    assert capsys.readouterr().out.strip() == str(old_run / "report.html")
    html = (old_run / "report.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and html.count("data:image/png;base64,") == 2
    assert sorted(p.name for p in (old_run / "plots").glob("*.png")) == ["grad_flow.png", "loss.png"]
    assert "3.9396" in html  # the old run's best val loss is shown


@pytest.mark.slow
def test_a_run_of_the_previous_release_gets_every_figure(old_run, capsys):
    assert main(["report", str(old_run)]) == 0
    drawn = sorted(p.stem for p in (old_run / "plots").glob("*.png"))
    assert drawn == sorted(["loss", "grad_flow", "grad_layers", "update_ratio", "activations", "attn_entropy",
                            "attention", "layers", "context"])  # rezero_alpha: not a rezero run; the depth
    # views (layers, context) are measured from the run's checkpoint, which an old run has too
    html = (old_run / "report.html").read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == len(drawn)


# ----------------------------------------------------------------------------------------------- fits a 1280-px page
def test_wide_tables_wrap_at_joints():
    cols = ["n_layer", "variant", "seed", "final_train_loss", "final_val_loss", "best_val_loss", "wall_time_s",
            "status", "best_val_bpc", "tokens_per_sec", "grad_ratio_first_last", "last_block_rank", "diagnosis", "run"]
    t = html_table([[16, "prenorm", 1, 2.2719, 2.2719, 2.2719, 131.64, "ok", 3.2777, 3889.3923, 6.1388, 0.8878,
                     "bigram_stuck;vanishing_gradients", "runs/depth/n_layer-16_variant-prenorm"]], header=cols)
    assert t.startswith('<div class="table-wrap"><table class="compact">')
    assert "final_<wbr>train_<wbr>loss" in t and "bigram_<wbr>stuck;<wbr>vanishing_<wbr>gradients" in t
    assert ">3,889<" in t and "3,889.3923" not in t


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


@pytest.mark.slow  # a few seconds: the fast tier stays under 3 min
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian package `chromium`)")
def test_run_report_fits_1280_px_in_chromium(probed_page, tmp_path):
    out = render_1280(probed_page.read_text(encoding="utf-8"), tmp_path)
    assert out["page"] <= 1280 and out["scrolling"] == [], out
    assert all(abs(shown - natural) <= 2 for natural, shown in out["scaled"]), out  # 1:1 (+ the 1-px border)


@pytest.mark.slow  # a few seconds: the fast tier stays under 3 min
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian package `chromium`)")
def test_sweep_like_page_fits_1280_px_in_chromium(probed_run, tmp_path):
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


# ---------------------------------------------------------------------------------------------------- samples, cards
@pytest.mark.slow
def test_run_report_shows_training_samples(probed_run, probed_page):
    html = probed_page.read_text(encoding="utf-8")
    assert 'href="#samples"' in html and "Samples during training" in html
    section = html[html.index('id="samples"'):]
    section = section[:section.index("</section>")]
    steps = [int(s) for s in re.findall(r'<tr><td class="num">(\d+)</td>', section)]
    recorded = [r for r in map(json.loads, (probed_run / "metrics.jsonl").read_text().splitlines())
                if r.get("kind") == "sample"]
    assert steps == [r["step"] for r in recorded] == [5, 10, 15, 15]
    for r in recorded[:-1]:
        assert H.esc(r["text"]) in section
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; co" in section and "<b>bold</b>" not in section


def samples_section(run_dir):
    """The samples section of ``run_dir``'s report (drawn without figures), or None when it has none."""
    page = build_report(run_dir, skip=tuple(PLOTS)).read_text(encoding="utf-8")
    if 'id="samples"' not in page:
        return None
    section = page[page.index('id="samples"'):]
    return section[:section.index("</section>")]


def test_many_samples_are_thinned_and_none_means_no_section(probed_run, tmp_path):
    rd = Path(shutil.copytree(probed_run, tmp_path / "many"))
    with open(rd / "metrics.jsonl", "a", encoding="utf-8") as f:
        for s in range(20, 520, 10):
            f.write(json.dumps({"kind": "sample", "step": s, "text": f"text at {s}"}) + "\n")
    body = samples_section(rd)
    steps = [int(s) for s in re.findall(r'<tr><td class="num">(\d+)</td>', body)]
    assert len(steps) == H.MAX_SAMPLES and steps[0] == 5 and steps[-1] == 510 and "54 samples recorded" in body
    bare = Path(shutil.copytree(probed_run, tmp_path / "bare"))
    lines = (bare / "metrics.jsonl").read_text().splitlines(keepends=True)
    (bare / "metrics.jsonl").write_text("".join(x for x in lines if '"kind": "sample"' not in x))
    assert samples_section(bare) is None


def test_bigram_card_agrees_with_the_diagnosis(probed_run):
    base = {"uniform": {"nats": 4.174}, "unigram": {"nats": 3.347}, "bigram": {"nats": 2.482}}
    data = P.load_run_data(probed_run)

    def level_words(best, baselines):  # what the "minus bigram baseline" card says of a best val loss
        data.summary, data.baselines = {"best_val_loss": best}, baselines
        (note,) = [note for label, _, note in H.run_cards(data) if label == "minus bigram baseline"]
        return note.removeprefix("nats: ")

    # the two lines mean different things (issue 23 case 12): the bigram line is the current character alone,
    # the unigram line no context at all
    assert level_words(2.441, base) == "within 0.05 of bigram: the current character alone"
    assert level_words(2.2, base) == "below bigram, uses context"
    assert level_words(3.35, base) == "at the unigram level: no context at all, not even the current character"
    assert level_words(2.6, base) == "above bigram: less than the current character tells"
    assert level_words(4.016, base) == "between unigram and uniform: not even the character frequencies yet"
    assert level_words(4.4, base) == "above the uniform level, worse than equal guessing"
    assert level_words(2.441, {"bigram": {"nats": 2.482}}) == "within 0.05 of bigram: the current character alone"


def test_whole_split_card_shows_the_final_validation(probed_run):
    data = P.load_run_data(probed_run)
    fv = (data.summary or {}).get("final_validation")
    assert fv is not None and fv["tokens"] == fv["of_tokens"]  # the tiny corpus's whole val split
    card = [c for c in H.run_cards(data) if c[0] == "whole val split"]
    assert card == [("whole val split", f"{fv['val_loss']:.3f}",
                     f"nats/char, best weights, all {fmt_value(fv['of_tokens'])} predicted val characters")]
    data.summary = {**data.summary, "final_validation": {**fv, "tokens": 64}}
    (card,) = [c for c in H.run_cards(data) if c[0] == "whole val split"]
    assert card[2].startswith("nats/char, best weights, 64 of ")
    data.summary = {**data.summary, "final_validation": None}  # off, or a run older than the field
    assert not [c for c in H.run_cards(data) if c[0] == "whole val split"]


# ------------------------------- bits per character for every tokenizer (nats/ln 2 only when a token is a character)
@pytest.mark.slow
def test_bpe_report_shows_bits_per_character_not_per_token(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text(TINY_TEXT * 3, encoding="utf-8")
    cfg = tiny_config(tmp_path / "bpe", text, train=dict(max_iters=10, eval_interval=5))
    cfg.data.tokenizer, cfg.data.vocab_size = "bpe", 300
    run = train(cfg, **QUIET)
    s = json.loads((run / "summary.json").read_text())
    rd = RunData(run)
    assert rd.unit == "token"
    assert abs(rd.bits_per_char(s["best_val_loss"]) - s["best_val_bpc"]) < 1e-9
    assert abs(s["best_val_bpc"] - s["best_val_loss"] / math.log(2)) > 0.05  # a token is more than a character
    page = build_report(run).read_text()
    assert f"nats/token = {s['best_val_bpc']:.3f} bits/char" in page


@pytest.mark.slow
def test_char_report_keeps_nats_over_ln2(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "c", tiny_text_file, train=dict(max_iters=5, eval_interval=5)), **QUIET)
    s = json.loads((run / "summary.json").read_text())
    rd = RunData(run)
    assert rd.unit == "char" and rd.bits_per_char(s["best_val_loss"]) == s["best_val_loss"] / math.log(2)
    assert f"nats/char = {s['best_val_loss'] / math.log(2):.3f} bits/char" in build_report(run).read_text()


def test_a_deleted_baselines_json_is_recomputed_in_the_report_as_the_warning_says(tmp_path, tiny_text_file, capsys):
    """A new user's pass: with baselines.json deleted, report warned "the corpus baselines are recomputed" on
    stderr while its page said "No baselines.json in this run" and drew no bigram line."""
    from conftest import RUN_FIGURES, run_cli

    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4)), **QUIET)
    bigram = json.loads((run / "baselines.json").read_text())["bigram"]["nats"]
    (run / "baselines.json").unlink()
    skip = ["--skip", *RUN_FIGURES]
    rc, _, err = run_cli(capsys, "report", str(run), "--out", str(tmp_path / "a.html"), *skip)
    page = (tmp_path / "a.html").read_text()
    assert rc == 0 and "baselines are recomputed" in err
    assert "Recomputed from the run&#x27;s corpus" in page or "Recomputed from the run's corpus" in page
    assert RunData(run).baselines["bigram"]["nats"] == pytest.approx(bigram)
    tiny_text_file.write_text(tiny_text_file.read_text()[::-1])  # the same characters, another text
    assert RunData(run).baselines is None
    rc, _, err = run_cli(capsys, "report", str(run), "--out", str(tmp_path / "b.html"), *skip)
    assert rc == 0 and "could not be read (or changed since training) to recompute" in (tmp_path / "b.html").read_text()


@pytest.mark.slow
def test_report_warns_of_what_it_leaves_out_as_its_page_says(tmp_path, tiny_text_file, capsys):
    """A new user's pass: with checkpoints/ or metrics.jsonl deleted, or the corpus edited, report left figures
    out silently, though its page says the missing files are named in a warning."""
    from conftest import RUN_FIGURES, run_cli

    skip = ["--skip", *RUN_FIGURES]
    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4)), **QUIET)
    rc, _, err = run_cli(capsys, "report", str(run), "--out", str(tmp_path / "0.html"), *skip)
    assert rc == 0 and "warning" not in err, err  # an intact run: nothing to say
    text = tiny_text_file.read_text()
    from depthlab.report.attention import plot_attention

    assert plot_attention(run) is not None
    tiny_text_file.write_text(text[::-1])
    err = run_cli(capsys, "report", str(run), "--out", str(tmp_path / "1.html"), *skip)[2]
    assert f"warning: the run's corpus {tiny_text_file} changed since training" in err and err.count("warning") == 1
    assert plot_attention(run) is None  # helper-19: drawn on the edited file's text, called the validation text
    tiny_text_file.unlink()
    err = run_cli(capsys, "report", str(run), "--out", str(tmp_path / "2.html"), *skip)[2]
    assert f"warning: the run's corpus {tiny_text_file} is missing" in err and err.count("warning") == 1
    tiny_text_file.write_text(text)
    shutil.rmtree(run / "checkpoints")
    (run / "metrics.jsonl").unlink()
    err = run_cli(capsys, "report", str(run), "--out", str(tmp_path / "3.html"), *skip)[2]
    assert f"{run / 'checkpoints'} holds no checkpoint, though summary.json says 4 steps were trained" in err
    assert f"{run / 'metrics.jsonl'} is missing (deleted?), though summary.json says 4 steps" in err
    c = json.loads((run / "config.json").read_text())
    c["model"]["n_layer"] = "two"  # helper-19: the figures that need the model were left out without a word
    (run / "config.json").write_text(json.dumps(c))
    rc, _, err = run_cli(capsys, "report", str(run), "--out", str(tmp_path / "4.html"), *skip)
    assert rc == 0 and f"warning: {run / 'config.json'}: model.n_layer" in err and "(edited by hand?)" in err, err


def test_report_of_a_missing_folder_names_runs_and_sweeps_as_the_fix(tmp_path, capsys):
    """A new user's pass: `depthlab report sweeps/typo` said "give the out_dir of a depthlab train run", though
    report takes a sweep folder too."""
    assert main(["report", str(tmp_path / "sweeps" / "typo")]) == 2
    assert capsys.readouterr().err == (f"depthlab: error: report: {tmp_path / 'sweeps' / 'typo'} not found; give the "
                                       "out_dir of a depthlab train run or of a depthlab sweep\n")
    assert not (tmp_path / "sweeps").exists()
