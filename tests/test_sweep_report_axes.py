"""A sweep report says what its axes are: no 'vs depth' without a depth axis; blocks numbered from 0."""

from test_sweep_report import TINY

from depthlab import sweep
from depthlab.report.sweep import _figure_html, _per_block, build_sweep_report, plot_per_block


def test_learning_rate_grid_is_not_called_depth(tiny_text_file, tmp_path):
    over = {**TINY, "data.path": str(tiny_text_file)}
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
    html = _figure_html("loss", png, "model.n_layer")
    assert "vs n_layer" in html and "degradation problem" in html


def test_per_block_panels_number_blocks_from_zero(monkeypatch, tmp_path):
    import depthlab.report.sweep as rs

    seen = []
    real = rs._save

    def capture(fig, path):
        for ax in fig.axes:
            for line in ax.get_lines():
                seen.append(list(line.get_xdata()))
        return real(fig, path)
    monkeypatch.setattr(rs, "_save", capture)
    items = [{"config": {"model": {"n_layer": 3, "variant": "prenorm"}, "train": {"seed": 1}},
              "details": {"init_probe": {"grad_norm_block": [1.0, 2.0, 3.0]},
                          "grad": [{"grad_norm_block": [1.0, 2.0, 4.0]}], "probe": []}}]
    assert _per_block(items, ["model.variant"], "model.n_layer", "grad")["prenorm"][3][1] == [1.0, 2.0, 4.0]
    plot_per_block(items, "model.n_layer", ["model.variant"], "grad", tmp_path / "g.png")
    assert seen and all(xs[0] == 0 and xs[-1] == 2 for xs in seen)


def test_finished_runs_match_despite_execution_fields_and_newer_defaults():
    from depthlab.config import RunConfig
    from depthlab.sweep.common import config_diff

    now = RunConfig().to_dict()
    then = RunConfig().to_dict()
    then["train"]["compile"] = False  # the default became "auto": same computation on CPU
    del then["data"]["tokenizer"]  # written before the field existed; now at its default
    assert config_diff(now, then) == []
    then["train"]["learning_rate"] = 0.5
    assert config_diff(now, then) == ["train.learning_rate: 0.5 there, 0.003 now"]


def test_estimate_scales_with_width_as_calibrated():
    from depthlab import sweep

    cfg = sweep.expand(sweep.profile_spec("quick"), "x")[0].config
    base = sweep.estimate_seconds(cfg)
    wide = json_copy(cfg)
    wide["model"]["n_embd"] = 192
    C, L, T, V = 192, 1, 64, 65
    per_tok = L * (C * C * 12 + 2 * T * C) + V * C
    evals = (500 // 100 + 2) * 2 * 20
    flops = 6 * per_tok * 16 * T * 500 + 2 * per_tok * 16 * T * evals
    expect = flops / 1e9 * 0.045 * (32 / 192) ** 0.8 + 0.7e-3 * 2 * (500 + evals / 3) + 4.0
    assert abs(sweep.estimate_seconds(wide) - expect) < 1e-9 and sweep.estimate_seconds(wide) > base


def json_copy(d):
    import json

    return json.loads(json.dumps(d))


def test_rank_columns_say_when_they_were_measured(tiny_text_file, tmp_path):
    import json

    from conftest import read_sweep_rows, tiny_sweep_spec

    spec = tiny_sweep_spec(tiny_text_file, {"model.n_layer": [2]}, TINY)
    sw = tmp_path / "rk"
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=lambda s: None)
    row = read_sweep_rows(sw)[0]
    (probe_file,) = sw.glob("runs/*/init_probe.json")
    init = json.loads(probe_file.read_text())["rank_measure"][-1]
    assert abs(float(row["init_last_block_rank"]) - init) < 1e-4
    assert row["last_block_rank"] != ""  # after training: the last probe
