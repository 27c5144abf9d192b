"""``depthlab report RUN`` never replaces a file of the user's in ``RUN/plots/``: a figure's place holding a file
depthlab report did not write is refused in one line naming the file and the fix, before anything is written,
as ``report.html`` is. depthlab's figures carry the PNG ``Software`` text "depthlab report" (the report page's
generator name); a figure written before they carried it counts as depthlab's when the run's report.html embeds
its exact bytes."""

import base64
import shutil

import pytest

from depthlab.figures import REPORT_SOFTWARE, new_figure, png_text, write_png, written_by_report
from depthlab.report.html import GENERATOR
from depthlab.report.plots import PLOTS

from conftest import TINY_TEXT, assert_clean_error, run_cli, trained_tiny_run

FAST = ("--skip", "attention", "layers", "context")  # the figures that load the model: not needed here


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trained_tiny_run(tmp_path_factory, "ownplots", TINY_TEXT)


@pytest.fixture
def run(trained, tmp_path):
    return shutil.copytree(trained, tmp_path / "run")


def _user_png(path, software):
    fig = new_figure((2, 1))
    fig.add_subplot().plot([0, 1], [1, 0])
    write_png(fig, path, metadata={"Software": software})


def test_a_users_file_in_plots_is_refused_and_kept(run, capsys):
    plots = run / "plots"
    plots.mkdir(exist_ok=True)
    (plots / "loss.png").write_text("my notes\n")
    rc, out, err = run_cli(capsys, "report", str(run), *FAST)
    assert_clean_error(rc, err, f"{plots / 'loss.png'} exists and was not written by depthlab report",
                       "refusing to overwrite it", "--skip loss")
    assert (plots / "loss.png").read_text() == "my notes\n"
    assert sorted(p.name for p in plots.iterdir()) == ["loss.png"]  # refused before any figure was drawn
    assert not (run / "report.html").exists()


@pytest.mark.slow  # over a second: the fast tier stays under 3 min
def test_every_users_file_is_named_in_one_line_and_skip_is_the_fix(run, capsys):
    plots = run / "plots"
    plots.mkdir(exist_ok=True)
    (plots / "loss.png").write_text("my notes\n")
    _user_png(plots / "grad_flow.png", "Matplotlib")  # a PNG, but the user's
    (plots / "update_ratio.png").symlink_to(plots / "loss.png")  # depthlab makes no links
    before = (plots / "grad_flow.png").read_bytes()
    rc, out, err = run_cli(capsys, "report", str(run), *FAST)
    assert_clean_error(rc, err, "loss.png", "grad_flow.png", "update_ratio.png", "exist and were not written",
                       "--skip loss grad_flow update_ratio")
    rc, out, err = run_cli(capsys, "report", str(run), *FAST, "loss", "grad_flow", "update_ratio")
    assert rc == 0, err
    assert (plots / "loss.png").read_text() == "my notes\n"
    assert (plots / "grad_flow.png").read_bytes() == before
    assert (plots / "update_ratio.png").is_symlink()
    assert (run / "report.html").is_file() and (plots / "activations.png").is_file()


@pytest.mark.slow  # over a second: the fast tier stays under 3 min
def test_depthlabs_own_figures_carry_the_marker_and_are_replaced(run, capsys):
    assert GENERATOR == REPORT_SOFTWARE == "depthlab report"
    rc, out, err = run_cli(capsys, "report", str(run))
    assert rc == 0, err
    drawn = sorted(p.stem for p in (run / "plots").glob("*.png"))
    assert set(drawn) <= set(PLOTS) and {"loss", "activations", "layers", "context"} <= set(drawn)
    assert {n: png_text(run / "plots" / f"{n}.png", "Software") for n in drawn} == dict.fromkeys(drawn, GENERATOR)
    rc, out, err = run_cli(capsys, "report", str(run))  # its own figures: replaced without a word
    assert rc == 0 and err == "", err


def test_a_figure_from_before_the_marker_counts_when_the_report_embeds_it(run, capsys):
    plots = run / "plots"
    plots.mkdir(exist_ok=True)
    _user_png(plots / "loss.png", None)  # as depthlab wrote its figures before: no Software text
    data = (plots / "loss.png").read_bytes()
    assert png_text(plots / "loss.png", "Software") is None
    page = f'<html><head><meta name="generator" content="{GENERATOR}"></head><body><img src="data:image/png;base64,'
    (run / "report.html").write_text(page + base64.b64encode(data).decode() + '"></body></html>')
    assert written_by_report(plots / "loss.png")
    (run / "report.html").write_text(page + '"></body></html>')  # the report does not hold those bytes
    assert not written_by_report(plots / "loss.png")
    rc, out, err = run_cli(capsys, "report", str(run), *FAST)
    assert_clean_error(rc, err, "loss.png exists and was not written by depthlab report")
    assert (plots / "loss.png").read_bytes() == data
