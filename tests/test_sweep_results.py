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
    (agg,) = list(__import__("csv").DictReader(open(sw / "aggregates.csv")))  # written with results.csv
    assert (agg["n_layer"], agg["n"], agg["mean"]) == ("2", "1", row["best_val_loss"])


def test_aggregates_are_computed_from_results_csv_round_trip(tmp_path):
    """aggregates.csv is results.csv's cells with mean ± sd (n) and the 95 % t-interval, read back equal."""
    import csv

    import pytest
    from scipy import stats as sps

    from depthlab.sweep.results import AGGREGATES_CSV, cell_aggregates, read_results

    columns = sweep.RESULT_COLUMNS + ["learning_rate"] + sweep.METRIC_COLUMNS
    losses = {("1", "0.01"): [2.31, 2.29, 2.35], ("2", "0.01"): [2.05, 2.01], ("2", "0.03"): [3.3]}
    rows = [{"n_layer": L, "variant": "prenorm", "seed": i + 1, "learning_rate": lr, "best_val_loss": v,
             "status": "ok"} for (L, lr), vs in losses.items() for i, v in enumerate(vs)]
    rows.append({"n_layer": "2", "variant": "prenorm", "seed": 9, "learning_rate": "0.03", "best_val_loss": None,
                 "status": "nonfinite"})  # a failed run is not in the cell's statistics
    path = tmp_path / "results.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    back, cols = read_results(path)
    assert cols == columns and len(back) == len(rows)
    agg = cell_aggregates(back, cols)
    assert agg == cell_aggregates(rows, columns)  # the same from the file as from the rows
    a = agg[0]
    assert (a["n_layer"], a["learning_rate"], a["n"]) == ("1", "0.01", 3)
    assert a["mean"] == pytest.approx(2.31667, abs=1e-5) and a["sd"] == pytest.approx(0.030551, abs=1e-6)
    lo, hi = sps.t.interval(0.95, 2, loc=a["mean"], scale=a["sd"] / 3 ** 0.5)
    assert (a["ci_low"], a["ci_high"]) == (pytest.approx(lo), pytest.approx(hi))
    assert [(x["n"], x["sd"], x["ci_low"]) for x in agg[2:]] == [(1, None, None)]
    assert AGGREGATES_CSV == "aggregates.csv"


def test_model_init_is_written_as_json_and_read_back(tmp_path):
    """A new user's pass: results.csv wrote model.init as Python's repr ({'n_layer': 2}), which neither a CSV nor a
    JSON reader parses; it is JSON now, an unset one an empty cell, and the files that read results.csv still work."""
    import csv
    import json

    from depthlab.config import RunConfig
    from depthlab.sweep.results import failed_runs

    runs = []
    for name, init in (("a", {"n_layer": 2, "tag": "x'y"}), ("b", None)):
        cfg = RunConfig().to_dict()
        cfg["model"]["init"] = init
        runs.append({"name": name, "experiment": "", "point": {"model.init": init}, "config": cfg})
    sw = tmp_path / "sw"
    sw.mkdir()
    (sw / "sweep.json").write_text(json.dumps({"spec": {}, "varied": ["model.init"], "runs": runs}))
    sweep.write_results(sw)
    rows = list(csv.DictReader(open(sw / "results.csv", newline="")))
    assert json.loads(rows[0]["model.init"]) == {"n_layer": 2, "tag": "x'y"}
    assert (rows[1]["model.init"], rows[1]["status"]) == ("", "pending")
    agg = list(csv.DictReader(open(sw / "aggregates.csv", newline="")))
    assert [json.loads(a["model.init"]) if a["model.init"] else None for a in agg] == [{"n_layer": 2, "tag": "x'y"},
                                                                                      None]
    assert '| {"n_layer": 2, "tag": "x\'y"} |' in (sw / "results.md").read_text()
    assert failed_runs(sw) == (["a (pending)", "b (pending)"], 2)
