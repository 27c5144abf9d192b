"""The sweep's command line and its report (figures + HTML built from depthlab.sweep's numbers)."""

import csv

import pytest

from depthlab import sweep
from depthlab.cli import main

TINY = {"model.n_layer": 1, "model.n_head": 2, "model.n_embd": 16, "model.block_size": 16,
        "train.batch_size": 4, "train.max_iters": 4, "train.eval_interval": 2, "train.eval_iters": 1,
        "train.log_interval": 2, "train.warmup_iters": 1, "train.grad_log_interval": 2, "train.probe_interval": 2,
        "train.keep_last": 1}


# ----------------------------------------------------------------------------- command line
def test_cli_bad_grid_is_one_line_exit_2(capsys, tmp_path):
    rc = main(["sweep", "--grid", "model.n_layer", "--out-dir", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("depthlab: error:") and "model.n_layer" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()
    assert main(["sweep", "--grid", "model.n_layer=1,two", "--out-dir", str(tmp_path / "s")]) == 2
    assert "model.n_layer: cannot use 'two' (expected an integer)" in capsys.readouterr().err


def test_cli_nothing_to_sweep(capsys):
    assert main(["sweep"]) == 2
    assert "nothing to sweep" in capsys.readouterr().err


def test_cli_bad_override_and_invalid_point(capsys, tmp_path):
    assert main(["sweep", "--grid", "model.n_layer=1,2", "--train.max_iterz", "3"]) == 2
    assert "max_iterz" in capsys.readouterr().err
    # n_embd 30 is not divisible by 4 heads: the error names the run and the field, before any run starts
    assert main(["sweep", "--grid", "model.n_embd=32,30", "--model.n_head", "4",
                 "--out-dir", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "n_embd-30" in err and "model.n_embd" in err
    assert not (tmp_path / "s").exists()


def test_cli_dry_run_lists_runs(capsys, tmp_path):
    assert main(["sweep", "--profile", "quick", "--dry-run", "--out-dir", str(tmp_path / "q")]) == 0
    out = capsys.readouterr().out
    assert out.count("variant-") == 10 and "min on" in out
    assert not (tmp_path / "q").exists()


# ----------------------------------------------------------------------------- report
def test_report_and_report_command(tiny_text_file, tmp_path, capsys):
    from depthlab.report.sweep import build_sweep_report

    over = {**TINY, "data.path": str(tiny_text_file), "model.variant": "plain"}
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


def test_science_experiment_gets_a_claims_table(tiny_text_file, tmp_path):
    from depthlab.report.sweep import build_sweep_report

    f = tmp_path / "sci.yaml"
    f.write_text("experiments:\n  - name: depth\n    grid: {model.n_layer: [1, 2], model.variant: [plain]}\n")
    spec = sweep.build_spec(None, str(f), [], {**TINY, "data.path": str(tiny_text_file)}, None)
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
    assert rc == 0, capsys.readouterr().err
    status = sorted(r["status"] for r in csv.DictReader(open(out / "results.csv")))
    assert status == ["nonfinite", "ok"] and (out / "report.html").stat().st_size > 1000
