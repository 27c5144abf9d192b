"""Sweeps: grid parsing, expansion, results rows, resume, failures, report, rank collapse at init."""

import csv
import json
from pathlib import Path

import pytest

from depthlab import experiments as ex
from depthlab.cli import main
from depthlab.errors import DepthlabError, NonFiniteError

TINY = {"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16},
        "train": {"batch_size": 4, "max_iters": 4, "eval_interval": 2, "eval_iters": 1, "log_interval": 2,
                  "warmup_iters": 1, "grad_log_interval": 2, "probe_interval": 2, "keep_last": 1}}


def tiny_spec(text_file, grid, **over):
    base = json.loads(json.dumps(TINY))
    base["data"] = {"path": str(text_file)}
    for k, v in over.items():
        sec, name = k.split("__")
        base[sec][name] = v
    return ex.SweepSpec(experiments=[ex.Experiment(grid=grid)], base=ex._flatten(base, "test base"))


def read_rows(sweep_dir):
    with open(Path(sweep_dir) / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


# ----------------------------------------------------------------------------- parsing
def test_parse_grid_arg_types():
    assert ex.parse_grid_arg("model.n_layer=1,2,4") == ("model.n_layer", [1, 2, 4])
    assert ex.parse_grid_arg("model.variant=plain, prenorm") == ("model.variant", ["plain", "prenorm"])
    assert ex.parse_grid_arg("train.learning_rate=1e-3,3e-3") == ("train.learning_rate", [1e-3, 3e-3])
    assert ex.parse_grid_arg("model.bias=true,false") == ("model.bias", [True, False])
    assert ex.parse_grid_arg("model.n_layer=2,2,1")[1] == [2, 1]


@pytest.mark.parametrize("text, needle", [
    ("model.n_layer", "expected SECTION.FIELD=V1,V2"),
    ("model.n_layers=1,2", "unknown field 'n_layers'"),
    ("modle.n_layer=1,2", "unknown section 'modle'"),
    ("n_layer=1,2", "expected SECTION.FIELD"),
    ("model.n_layer=", "empty value"),
    ("model.n_layer=1,,2", "empty value"),
    ("model.n_layer=1,two", "model.n_layer: cannot use 'two'"),
    ("model.variant=plain,resnet", "expected one of"),
    ("train.out_dir=a,b", "--out-dir"),
])
def test_parse_grid_arg_errors(text, needle):
    with pytest.raises(DepthlabError) as e:
        ex.parse_grid_arg(text)
    assert needle in str(e.value)


def test_cli_bad_grid_is_one_line_exit_2(capsys, tmp_path):
    rc = main(["sweep", "--grid", "model.n_layer", "--out-dir", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("depthlab: error:") and "model.n_layer" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


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


def test_dry_run_lists_runs(capsys, tmp_path):
    assert main(["sweep", "--profile", "quick", "--dry-run", "--out-dir", str(tmp_path / "q")]) == 0
    out = capsys.readouterr().out
    assert out.count("variant-") == 10 and "min on" in out
    assert not (tmp_path / "q").exists()


def test_expand_names_and_precedence(tmp_path):
    spec = ex.SweepSpec(experiments=[ex.Experiment(grid={"model.n_layer": [1, 16], "model.variant": ["plain"]},
                                                   base={"train.max_iters": 7})],
                        base={"train.max_iters": 5, "model.n_embd": 16, "model.n_head": 2},
                        overrides={"train.learning_rate": 1e-3})
    pts = ex.expand(spec, tmp_path / "sw")
    assert [p.name for p in pts] == ["n_layer-01_variant-plain", "n_layer-16_variant-plain"]
    c = pts[1].config
    assert c["model"]["n_layer"] == 16 and c["train"]["max_iters"] == 7 and c["train"]["learning_rate"] == 1e-3
    assert c["train"]["out_dir"] == str(tmp_path / "sw" / "runs" / "n_layer-16_variant-plain")
    assert c["train"]["tensorboard"] is False and c["train"]["progress"] is False


def test_profiles_expand(tmp_path):
    quick = ex.expand(ex.profile_spec("quick"), tmp_path)
    assert len(quick) >= 10
    cfgs = {(p.config["model"]["variant"], p.config["model"]["n_layer"]) for p in quick}
    assert ("plain", 16) in cfgs and ("prenorm", 16) in cfgs
    # the measured recipe: float32 and no wall-clock cut, whatever the trainer's defaults are
    assert all(p.config["train"]["dtype"] == "float32" and p.config["train"]["max_time"] == 0 for p in quick)
    # same recipe for every variant of a depth
    for L in {p.config["model"]["n_layer"] for p in quick}:
        recipes = {json.dumps({**p.config["train"], "out_dir": None}) for p in quick if p.config["model"]["n_layer"] == L}
        assert len(recipes) == 1
    assert len(ex.expand(ex.profile_spec("full"), tmp_path)) == 60
    sci = ex.expand(ex.profile_spec("science"), tmp_path)
    assert {p.experiment for p in sci} == {"rank_init", "degradation", "postln_warmup", "rezero_speed",
                                           "deepnorm_depth"}
    with pytest.raises(DepthlabError, match="unknown sweep profile"):
        ex.profile_spec("nope")


def test_sweep_file(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("base:\n  model: {n_embd: 16, n_head: 2}\n  train.max_iters: 3\n"
                 "grid:\n  model.n_layer: [1, 2]\n  model.ff_mult: 1,4\n")
    spec = ex.load_sweep_file(f)
    pts = ex.expand(spec, tmp_path / "sw")
    assert len(pts) == 4 and pts[0].config["model"]["ff_mult"] == 1 and pts[0].config["train"]["max_iters"] == 3
    f.write_text("grid:\n  model.n_layer: [1]\nbogus: 1\n")
    with pytest.raises(DepthlabError, match="bogus"):
        ex.load_sweep_file(f)
    f.write_text("grid: [1, 2\n")
    with pytest.raises(DepthlabError, match="not valid YAML"):
        ex.load_sweep_file(f)


# ----------------------------------------------------------------------------- running
def test_sweep_rows_and_resume_skips_finished(tiny_text_file, tmp_path):
    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1, 2], "model.variant": ["plain", "prenorm"]})
    sw = tmp_path / "sw"
    logs = []
    ex.run_sweep(spec, sw, workers=1, threads=1, report=False, log=logs.append)
    rows = read_rows(sw)
    assert len(rows) == 4
    assert list(rows[0])[:8] == ex.RESULT_COLUMNS
    for col in ("best_val_bpc", "tokens_per_sec", "grad_ratio_first_last", "last_block_rank", "diagnosis"):
        assert col in rows[0]
    assert {(r["variant"], r["n_layer"]) for r in rows} == {("plain", "1"), ("plain", "2"), ("prenorm", "1"),
                                                             ("prenorm", "2")}
    assert all(r["status"] == "ok" and float(r["best_val_loss"]) > 0 for r in rows)
    assert all(r["last_block_rank"] != "" and r["grad_ratio_first_last"] != "" for r in rows)
    assert (sw / "results.md").read_text().count("| ok |") == 4
    runs = sorted((sw / "runs").iterdir())
    assert all((r / "summary.json").exists() and (r / "config.json").exists() for r in runs)
    mtimes = {r.name: (r / "summary.json").stat().st_mtime_ns for r in runs}

    # "interrupt": one run loses its summary (and looks half-done); the restart redoes only that one
    victim = runs[1]
    (victim / "summary.json").unlink()
    (victim / "sweep_status.json").unlink()
    logs.clear()
    ex.run_sweep(spec, sw, workers=1, threads=1, report=False, log=logs.append)
    assert any("3 already finished, 1 to run" in line for line in logs)
    for r in runs:
        m = (r / "summary.json").stat().st_mtime_ns
        assert (m != mtimes[r.name]) == (r == victim)
    assert len(read_rows(sw)) == 4


def test_rerun_with_changed_config_is_refused(tiny_text_file, tmp_path):
    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1]})
    sw = tmp_path / "sw"
    ex.run_sweep(spec, sw, workers=1, threads=1, report=False, log=lambda s: None)
    spec.overrides = {"train.max_iters": 6}
    with pytest.raises(DepthlabError, match="different config"):
        ex.run_sweep(spec, sw, workers=1, threads=1, report=False, log=lambda s: None)


def test_out_dir_that_is_not_a_sweep_is_refused(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "precious.txt").write_text("x")
    spec = ex.SweepSpec(experiments=[ex.Experiment(grid={"model.n_layer": [1]})])
    with pytest.raises(DepthlabError, match="not a sweep directory"):
        ex.run_sweep(spec, d, workers=1, threads=1, report=False, log=lambda s: None)
    assert (d / "precious.txt").exists()


def test_failing_runs_are_results(tiny_text_file, tmp_path, monkeypatch):
    # block_size 4096 exceeds the tiny corpus: that run fails with an error, the other finishes
    spec = tiny_spec(tiny_text_file, {"model.block_size": [16, 4096]})
    sw = tmp_path / "sw"
    ex.run_sweep(spec, sw, workers=1, threads=1, report=False, log=lambda s: None)
    rows = {r["model.block_size"]: r for r in read_rows(sw)}
    assert rows["16"]["status"] == "ok"
    assert rows["4096"]["status"] == "error" and "block_size" in rows["4096"]["message"]
    assert rows["4096"]["best_val_loss"] == ""


def test_nonfinite_run_is_recorded_and_kept(tiny_text_file, tmp_path, monkeypatch):
    import sys

    tr = sys.modules["depthlab.analytics"]
    real = tr.train
    calls = []

    def fake(cfg, **kw):
        calls.append(cfg.model.n_layer)
        rd = real(cfg, **kw)
        if cfg.model.n_layer == 2:  # as if it diverged at the last step: no summary.json
            (rd / "summary.json").unlink()
            raise NonFiniteError("non-finite loss at step 4 (test)")
        return rd

    monkeypatch.setattr(tr, "train", fake)
    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1, 2]})
    sw = tmp_path / "sw"
    ex.run_sweep(spec, sw, workers=1, threads=1, report=False, log=lambda s: None)
    rows = {r["n_layer"]: r for r in read_rows(sw)}
    assert rows["1"]["status"] == "ok" and rows["2"]["status"] == "nonfinite"
    assert rows["2"]["best_val_loss"] != ""  # read back from the evaluations it logged
    assert "non-finite" in rows["2"]["message"]
    calls.clear()
    ex.run_sweep(spec, sw, workers=1, threads=1, report=False, log=lambda s: None)
    assert calls == []  # a deterministic failure is a finished result: not redone


def test_report_and_report_command(tiny_text_file, tmp_path, capsys):
    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1, 2], "train.seed": [1, 2]}, model__variant="plain")
    sw = tmp_path / "sw"
    ex.run_sweep(spec, sw, workers=1, threads=1, report=True, log=lambda s: None)
    html = (sw / "report.html").read_text()
    assert "data:image/png;base64," in html and "http://" not in html.replace("http://www.w3.org", "")
    assert "Summary" in html and "means over 2 seeds" in html
    assert (sw / "plots").is_dir() and list((sw / "plots").glob("*.png"))
    (sw / "report.html").unlink()
    capsys.readouterr()
    assert main(["report", str(sw)]) == 0
    assert (sw / "report.html").exists() and "report.html" in capsys.readouterr().out


@pytest.mark.slow
def test_worker_processes(tiny_text_file, tmp_path):
    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1, 2]})
    sw = tmp_path / "sw"
    ex.run_sweep(spec, sw, workers=2, report=False, log=lambda s: None)
    rows = read_rows(sw)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    st = json.loads((sw / "runs" / "n_layer-1" / "sweep_status.json").read_text())
    assert st["threads"] >= 1 and st["status"] == "ok"


# ----------------------------------------------------------------------------- science
def test_rank_collapse_at_init_plain_vs_residual():
    """Dong et al. 2021 at init: plain's last-block rank measure falls towards 0 with depth; residual stays."""
    from depthlab.config import RunConfig

    for seed in (1, 2):
        ranks = {}
        for v in ("plain", "prenorm"):
            for L in (4, 16, 32):
                cfg = RunConfig.from_dict({"model": {"n_layer": L, "n_embd": 16, "n_head": 2, "block_size": 16,
                                                     "variant": v}, "train": {"seed": seed}}).to_dict()
                ranks[v, L] = ex.init_probe(cfg)["rank_measure"][-1]
        assert ranks["plain", 4] > ranks["plain", 16] > ranks["plain", 32] or ranks["plain", 32] < 1e-6
        assert ranks["plain", 32] < 0.01
        assert min(ranks["prenorm", L] for L in (4, 16, 32)) > 0.5


def test_summary_and_claims_from_rows():
    from depthlab.report.sweep import science_claims, summary_lines

    def item(v, L, loss, seed=1, status="ok", rank=None):
        return {"config": {"model": {"variant": v, "n_layer": L}, "train": {"seed": seed, "max_iters": 10}},
                "row": {"status": status, "best_val_loss": loss, "run": f"runs/{v}{L}"},
                "details": {"evals": [], "grad": [], "probe": [], "init_probe": {"rank_measure": [rank or 0.5]}}}

    items = [item("plain", 1, 2.6), item("plain", 4, 2.5), item("plain", 16, 3.3),
             item("prenorm", 1, 2.6), item("prenorm", 4, 2.4), item("prenorm", 16, 2.3)]
    lines = " ".join(summary_lines(items, "model.n_layer", ["model.variant"], {"unigram": 3.3, "bigram": 2.5}))
    assert "plain: best n_layer = 4" in lines and "gets worse with depth" in lines
    assert "prenorm: best n_layer = 16" in lines and "improves with depth" in lines
    assert "+0.800 nats/char" in lines and "unigram baseline" in lines
    claims = science_claims({"degradation": items}, {})
    assert claims[0][-1] == "yes"
    rank_items = [item("plain", 4, 0, rank=0.4), item("plain", 32, 0, rank=0.0001),
                  item("prenorm", 4, 0, rank=0.98), item("prenorm", 32, 0, rank=0.97)]
    assert science_claims({"rank_init": rank_items}, {})[0][-1] == "yes"


def test_diverged_run_far_off_axis_still_gets_a_report(tmp_path, capsys):
    from depthlab.cli import main

    out = tmp_path / "sw"
    rc = main(["sweep", "--grid", "train.learning_rate=1e-3,1e3", "--grid", "model.n_layer=1",
               "--train.max_iters", "30", "--model.n_embd", "16", "--model.n_head", "2", "--model.block_size", "16",
               "--train.eval_interval", "10", "--train.eval_iters", "1", "--workers", "1", "--out-dir", str(out)])
    assert rc == 0, capsys.readouterr().err
    import csv

    status = sorted(r["status"] for r in csv.DictReader(open(out / "results.csv")))
    assert status == ["nonfinite", "ok"] and (out / "report.html").stat().st_size > 1000
