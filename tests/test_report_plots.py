"""depthlab.report.plots: every run figure is a PNG of the right size, written where it says, blocks
numbered 0..L-1, rank measures shown in [0, 1], fitting the report's content column."""

import re

import pytest


from depthlab.report import plots as P
from depthlab.rundir import PLOTS

from conftest import CONTENT_PX, PROBED_N_LAYER, RUN_FIGURES, fresh_copy, png_size, png_width, write_run_dir


def test_plots_are_valid_pngs(report_run, report_page):
    plots = report_run / "plots"
    for name in RUN_FIGURES:
        w, h = png_size(plots / f"{name}.png")
        assert 500 <= w <= 3000 and 250 <= h <= 3000, (name, w, h)
        assert (plots / f"{name}.png").stat().st_size > 5000
    assert not (plots / "rezero_alpha.png").exists()  # rezero_alpha null: skipped, not drawn empty
    assert not list(plots.glob("*.tmp"))


@pytest.mark.slow
def test_each_plot_function_returns_its_path(report_run, tmp_path):
    run_dir = fresh_copy(report_run, tmp_path / "copy")
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


def test_loss_plot_written_into_the_plots_folder(tmp_path):
    rd = write_run_dir(tmp_path, [{"kind": "train", "step": s, "loss": 3.0 - s / 10} for s in (1, 2, 3)])
    p = P.plot_loss(rd)
    assert p == rd / PLOTS / "loss.png" and p.read_bytes().startswith(b"\x89PNG")
    assert not [f for f in (rd / PLOTS).iterdir() if f.name != "loss.png"]  # no temp file left behind


def test_old_records_above_one_are_shown_as_one():
    assert P.rank_for_display(1.0092) == 1.0 and P.rank_for_display(0.42) == 0.42


def test_blocks_numbered_from_zero(probed_run, monkeypatch):
    figs = {}
    monkeypatch.setattr(P, "save_run_figure", lambda fig, run_dir, name, *a, **k: figs.setdefault(name, fig) and None)
    run = P.load_run_data(probed_run)
    for fn in (P.plot_grad_layers, P.plot_activations, P.plot_update_ratio, P.plot_attn_entropy, P.plot_grad_flow):
        fn(run)
    assert set(figs) == {"grad_layers", "activations", "update_ratio", "attn_entropy", "grad_flow"}
    for name, fig in figs.items():
        for ax in fig.axes:
            labels = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
            blocks = sorted(int(m) for t in labels for m in re.findall(r"^block (\d+)$", t))
            if blocks:
                assert blocks == list(range(PROBED_N_LAYER)), (name, labels)
            for axis, label in ((ax.xaxis, ax.get_xlabel()), (ax.yaxis, ax.get_ylabel())):
                if label.startswith("block"):
                    ticks = [t for t in axis.get_ticklocs() if axis.get_view_interval()[0] <= t
                             <= axis.get_view_interval()[1]]
                    assert min(ticks) == 0 and max(ticks) == PROBED_N_LAYER - 1, (name, label, ticks)


@pytest.mark.slow  # over a second: the fast tier stays under 3 min
def test_run_figures_fit_the_content_column(probed_run, probed_page):
    widths = {p.stem: png_width(p) for p in (probed_run / "plots").glob("*.png")}
    assert "attention" in widths and len(widths) >= 7
    assert all(w <= CONTENT_PX for w in widths.values()), widths  # 8 heads wrap onto rows of 4


@pytest.mark.slow  # about a second: the fast tier stays under 3 min
def test_cjk_and_emoji_are_labelled_by_code_point_without_a_glyph_warning(tmp_path):
    """The bundled DejaVu fonts lack CJK and emoji: such a character is labelled U+XXXX (an empty box and one
    "Glyph ... missing from font(s)" warning per character before), in tick labels and in the title."""
    import warnings

    import torch

    from depthlab.figures import drawable, save_run_figure
    from depthlab.report.attention import _attention_grid

    text = "世a🚀\n"
    pats = {0: torch.full((1, 2, 4, 4), 0.25)}
    fig = _attention_grid(pats, [0], 2, text)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["U+4E16", "a", "U+1F680", "↵"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["U+4E16", "a", "U+1F680", "↵"]
    assert drawable("Tokyo 東京 ok") == "Tokyo [U+6771][U+4EAC] ok" and drawable("plain — ↵") == "plain — ↵"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = save_run_figure(fig, tmp_path, "attention", "run 東京", f"on the validation text “{text}”")
    assert out.is_file() and [str(w.message) for w in caught if "missing from font" in str(w.message)] == []
    assert " ".join(fig.get_suptitle().split()) == "run [U+6771][U+4EAC] on the validation text “[U+4E16]a[U+1F680] ”"
