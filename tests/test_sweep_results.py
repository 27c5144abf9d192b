"""depthlab.sweep.results: one row per run, its columns said when they were measured."""

from depthlab import sweep

from conftest import TINY_SWEEP


def test_rank_columns_say_when_they_were_measured(tiny_text_file, tmp_path):
    import json

    from conftest import read_sweep_rows, tiny_sweep_spec

    spec = tiny_sweep_spec(tiny_text_file, {"model.n_layer": [2]}, TINY_SWEEP)
    sw = tmp_path / "rk"
    sweep.run_sweep(spec, sw, workers=1, threads=1, log=lambda s: None)
    row = read_sweep_rows(sw)[0]
    (probe_file,) = sw.glob("runs/*/init_probe.json")
    init = json.loads(probe_file.read_text())["rank_measure"][-1]
    assert abs(float(row["init_last_block_rank"]) - init) < 1e-4
    assert row["last_block_rank"] != ""  # after training: the last probe
