"""depthlab.report.sweep: the sweep report (figures + HTML built from depthlab.sweep's numbers), which
says what its axes are: no 'vs depth' without a depth axis; blocks numbered from 0."""

import csv

import pytest

from depthlab import sweep
from depthlab.cli import main
from depthlab.report.sweep import build_sweep_report, figure_html, plot_per_block

from conftest import TINY_SWEEP


@pytest.mark.slow  # a few seconds: the fast tier stays under 3 min
def test_report_and_report_command(tiny_text_file, tmp_path, capsys):
    from depthlab.report.sweep import build_sweep_report

    over = {**TINY_SWEEP, "data.path": str(tiny_text_file), "model.variant": "plain"}
    spec = sweep.build_spec(None, None, ["model.n_layer=1,2", "train.seed=1,2"], over, None)
    sw = tmp_path / "sw"
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=lambda s: None)
    (sw / "results.csv").unlink()
    assert build_sweep_report(sw) == sw / "report.html"
    assert (sw / "results.csv").exists()  # the report rewrites the results first
    html = (sw / "report.html").read_text()
    assert "data:image/png;base64," in html and "http://" not in html.replace("http://www.w3.org", "")
    assert "Summary" in html and "means over 2 seeds" in html and "4 runs; losses in nats/char" in html
    pngs = sorted(p.name for p in (sw / "plots").glob("*.png"))
    assert pngs == ["sweep_curves.png", "sweep_grad_per_block.png", "sweep_loss_vs_n_layer.png",
                    "sweep_rank_per_block.png"]
    assert all((sw / "plots" / p).stat().st_size > 1000 for p in pngs)
    (sw / "report.html").unlink()
    capsys.readouterr()
    assert main(["report", str(sw)]) == 0
    assert (sw / "report.html").exists() and "report.html" in capsys.readouterr().out
    # a user's file under a name the report writes is never replaced: the page, then a figure
    page = (sw / "report.html").read_bytes()
    (sw / "report.html").write_text("my notes")
    assert main(["report", str(sw)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "report.html exists and was not written by depthlab report" in err
    assert (sw / "report.html").read_text() == "my notes"
    (sw / "report.html").write_bytes(page)
    mine = sw / "plots" / "sweep_curves.png"
    mine.write_bytes(b"\x89PNG\r\n\x1a\nmy figure")
    assert main(["report", str(sw)]) == 2
    assert "sweep_curves.png exists and was not written" in capsys.readouterr().err
    assert mine.read_bytes() == b"\x89PNG\r\n\x1a\nmy figure"


@pytest.mark.slow
def test_science_experiment_gets_a_claims_table(tiny_text_file, tmp_path):
    from depthlab.report.sweep import build_sweep_report

    f = tmp_path / "sci.yaml"
    f.write_text("experiments:\n  - name: depth\n    grid: {model.n_layer: [1, 2], model.variant: [plain]}\n")
    spec = sweep.build_spec(None, str(f), [], {**TINY_SWEEP, "data.path": str(tiny_text_file)}, None)
    sw = tmp_path / "sw"
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=lambda s: None)
    html = build_sweep_report(sw).read_text()
    assert "Published claims" in html and "Degradation: plain gets worse" in html and "He et al. 2016" in html
    assert "Experiment depth" in html
    # the same claims as Markdown, written where README's science table is pasted from
    text = sweep.write_science_table(sw)
    assert text.startswith("| claim | source | setting | our numbers | verdict |\n|---|---|---|---|---|\n| Degradation")
    assert (sw / sweep.SCIENCE_MD).read_text() == text and "With shortcuts, depth helps" in text


@pytest.mark.slow
def test_diverged_run_far_off_axis_still_gets_a_report(tiny_text_file, tmp_path, capsys):
    out = tmp_path / "sw"
    rc = main(["sweep", "--grid", "train.learning_rate=1e-3,1e3", "--grid", "model.n_layer=1",
               "--data.path", str(tiny_text_file), "--train.batch_size", "4", "--train.warmup_iters", "2",
               "--train.max_iters", "30", "--model.n_embd", "16", "--model.n_head", "2", "--model.block_size", "16",
               "--train.eval_interval", "10", "--train.eval_iters", "1", "--workers", "1", "--out-dir", str(out)])
    said = capsys.readouterr().out
    assert rc == 0, said  # a diverged run is a finding of the sweep, not a failed command
    status = sorted(r["status"] for r in csv.DictReader(open(out / "results.csv")))
    assert status == ["nonfinite", "ok"] and (out / "report.html").stat().st_size > 1000
    message = next(r["message"] for r in csv.DictReader(open(out / "results.csv")) if r["status"] == "nonfinite")
    assert len(message) > 120 and f"{message}" in (out / "results.md").read_text()  # the progress line cuts it short
    assert f"the whole message of the 1 run cut short above: {out / 'results.md'}" in said.splitlines()


@pytest.mark.slow
def test_learning_rate_grid_is_not_called_depth(tiny_text_file, tmp_path):
    over = {**TINY_SWEEP, "data.path": str(tiny_text_file)}
    spec = sweep.build_spec(None, None, ["train.learning_rate=0.001,0.003"], over, None)
    sw = tmp_path / "lr"
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=lambda s: None)
    page = build_sweep_report(sw).read_text()
    assert "Best validation loss vs learning_rate" in page
    assert "vs depth" not in page and "colours are depths" not in page and "degradation problem" not in page
    assert "colours are values of learning_rate" in page


def test_depth_wording_kept_for_depth_axis(tmp_path):
    png = tmp_path / "x.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n")
    html = figure_html("loss", png, "model.n_layer")
    assert "vs n_layer" in html and "degradation problem" in html


def test_per_block_panels_number_blocks_from_zero(monkeypatch, tmp_path):
    import depthlab.report.sweep as rs

    seen = []
    real = rs.write_png

    def capture(fig, path, **savefig):
        for ax in fig.axes:
            for line in ax.get_lines():
                seen.append((line.get_linestyle(), list(line.get_xdata()), list(line.get_ydata())))
        return real(fig, path, **savefig)
    monkeypatch.setattr(rs, "write_png", capture)
    items = [{"config": {"model": {"n_layer": 3, "variant": "prenorm"}, "train": {"seed": 1}},
              "details": {"init_probe": {"grad_norm_block": [1.0, 2.0, 3.0]},
                          "grad": [{"grad_norm_block": [1.0, 2.0, 4.0]}], "probe": []}}]
    plot_per_block(items, "model.n_layer", ["model.variant"], "grad", tmp_path / "g.png")
    assert seen and all(xs[0] == 0 and xs[-1] == 2 for _, xs, _ in seen)
    assert sorted((style, ys) for style, _, ys in seen) == [("-", [1.0, 2.0, 4.0]), ("--", [1.0, 2.0, 3.0])]


def _full_like_items():
    """Runs of three experiments along depth, as the full profile has them (variants; DyT; LayerNorm Scaling)."""
    from conftest import sweep_item

    out = []
    for exp, v, extra in (("depth", "plain", {}), ("depth", "prenorm", {}), ("dyt_depth", "prenorm", {"norm": "dyt"}),
                          ("lns_depth", "prenorm", {"norm_scale": "depth"})):
        for L, loss in ((1, 2.4), (2, 2.3), (4, 2.2)):
            it = sweep_item(v, L, loss + (0.5 if v == "plain" and L > 1 else 0.0) + 0.01 * len(extra))
            it["config"]["model"].update({"norm": "layernorm", "norm_scale": 1, **extra})
            it["experiment"] = exp
            out.append(it)
    exps = [{"name": "depth", "base": {}, "grid": {"model.n_layer": [1, 2, 4], "model.variant": ["plain", "prenorm"]}},
            {"name": "dyt_depth", "base": {"model.variant": "prenorm", "model.norm": "dyt"},
             "grid": {"model.n_layer": [1, 2, 4]}},
            {"name": "lns_depth", "base": {"model": {"variant": "prenorm", "norm_scale": "depth"}},
             "grid": {"model.n_layer": [1, 2, 4]}}]
    return exps, out


def test_all_experiments_along_depth_in_one_figure(tmp_path):
    """The full profile's variants, DyT and LayerNorm Scaling lines on one depth axis, named by what differs."""
    from depthlab.report.sweep import _depth_overview, depth_lines
    from depthlab.sweep import aggregate

    exps, items = _full_like_items()
    name = depth_lines(exps, items)
    agg = aggregate(items, "model.n_layer", [], name=name)
    assert sorted(agg) == ["plain", "prenorm", "prenorm, norm=dyt", "prenorm, norm_scale=depth"]
    assert agg["plain"][2][0] == pytest.approx(2.8) and agg["prenorm, norm=dyt"][4][0] == pytest.approx(2.21)
    by_exp = {e["name"]: [it for it in items if it["experiment"] == e["name"]] for e in exps}
    sec = _depth_overview(exps, by_exp, None, tmp_path)
    assert sec is not None and (tmp_path / "all_loss_vs_n_layer.png").stat().st_size > 1000
    assert "depth, dyt_depth, lns_depth" in sec.body
    # one experiment along depth: its own section has the figure, no overview
    assert _depth_overview(exps[:1], {"depth": by_exp["depth"]}, None, tmp_path / "one") is None


def test_the_baseline_cards_of_a_bpe_sweep_say_token(tmp_path):
    """A new user's pass: a BPE sweep's report card read 'nats/char (the current character alone)'."""
    from depthlab.report.sweep import _cards

    cards = {label: note for label, _, note in _cards([], {"bigram": 3.0, "unigram": 3.4}, "token")}
    assert cards["bigram baseline"] == "nats/token (the current token alone)"
    assert cards["unigram baseline"] == "nats/token (token frequencies, no context at all)"
    cards = {label: note for label, _, note in _cards([], {"bigram": 3.0, "unigram": 3.4})}
    assert cards["bigram baseline"] == "nats/char (the current character alone)"
    (tmp_path / "l.png").write_bytes(bytes.fromhex(  # a 1x1 PNG
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360000002000154"
        "a24f5d0000000049454e44ae426082"))
    caption = figure_html("loss", tmp_path / "l.png", "model.n_layer", "token")
    assert "unigram: token frequencies, no context at all; bigram: the current token alone" in caption
    assert "bigram: the current character alone" in figure_html("loss", tmp_path / "l.png", "model.n_layer")


@pytest.mark.slow  # over a second: the fast tier stays under 3 min
def test_a_cjk_grid_value_is_labelled_by_code_point_without_a_glyph_warning(monkeypatch, tmp_path):
    """A grid over two Japanese corpora drew each line's name (legend, panel title) as empty boxes, with one
    "Glyph ... missing from font(s)" warning per character; they are code points now, as a run's figures have."""
    import warnings

    from matplotlib.text import Text

    import depthlab.report.sweep as rs
    from depthlab.report.sweep import plot_curves, plot_vs_x

    from conftest import sweep_item

    texts = []
    real = rs.write_png

    def capture(fig, path, **savefig):
        texts.extend(t.get_text() for t in fig.findobj(Text))
        return real(fig, path, **savefig)
    monkeypatch.setattr(rs, "write_png", capture)
    items = []
    for corpus in ("日本.txt", "東京.txt"):
        for L in (1, 2):
            it = sweep_item("prenorm", L, 2.0 + L / 10, evals=[(0, 3.0, 3.0), (10, 2.5, 2.5)], grads=[1.0] * L)
            it["config"]["data"] = {"path": corpus, "tokenizer": "char"}
            items.append(it)
    groups = ["data.path"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert plot_vs_x(items, "model.n_layer", groups, None, tmp_path / "l.png", "loss") is not None
        assert plot_curves(items, "model.n_layer", groups, None, tmp_path / "c.png") is not None
        assert plot_per_block(items, "model.n_layer", groups, "grad", tmp_path / "g.png") is not None
    assert [str(w.message) for w in caught if "missing from font" in str(w.message)] == []
    jp, tokyo = "path=[U+65E5][U+672C].txt", "path=[U+6771][U+4EAC].txt"
    assert texts.count(jp) == texts.count(tokyo) == 3  # the legends of loss and curves, a per-block panel title
    assert not any("日" in t or "東" in t for t in texts)
