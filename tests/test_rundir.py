"""depthlab.rundir: metrics lines, atomic writes, TensorBoard scalars, and run directories of the
previous release (tests/fixtures/run_v0, see conftest.py) read as written."""

import json
import os

import pytest

from depthlab.cli import main
from depthlab.rundir import RunDir

from conftest import FIXTURES, OLD_EVALS, tiny_cli_args


def test_metrics_lines_are_strict_json_with_nested_non_finite_values(tmp_path):
    from depthlab.rundir import MetricsWriter, read_metrics

    w = MetricsWriter(tmp_path, tensorboard=False)
    w.log("probe", {"step": 1, "rank_measure": [0.5, float("nan")], "deep": {"x": [float("inf")]}})
    w.close()
    line = (tmp_path / "metrics.jsonl").read_text()
    json.loads(line, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    r = read_metrics(tmp_path, "probe")[0]
    assert r["rank_measure"] == [0.5, "nan"] and r["deep"] == {"x": ["inf"]}


def test_file_writes_work_without_os_fchmod(tmp_path, tiny_text_file, monkeypatch):
    monkeypatch.delattr(os, "fchmod")  # Windows before Python 3.13
    out = tmp_path / "nf"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=5, train__eval_interval=5)]) == 0
    assert (out / "checkpoints" / "best.safetensors").exists()


def test_tensorboard_scalars(report_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(report_run / "tb"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for tag in ("val/loss", "train/loss", "lr"):
        assert tag in tags, tags
    assert [e.step for e in acc.Scalars("val/loss")] == [0, 10, 20]  # eval_interval 10, max_iters 20
    assert [e.step for e in acc.Scalars("train/loss")] == [5, 10, 15, 20]  # log_interval 5
    assert [e.step for e in acc.Scalars("lr")] == [5, 10, 15, 20]
    evals = [r for r in map(json.loads, (report_run / "metrics.jsonl").read_text().splitlines()) if "val_loss" in r]
    assert acc.Scalars("val/loss")[-1].value == pytest.approx(evals[-1]["val_loss"], rel=1e-6)


def test_fixture_is_the_old_layout():
    """Guards the fixture itself: records without ``kind``, tiny size, no TensorBoard folder."""
    lines = [json.loads(line) for line in (FIXTURES / "run_v0" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in lines if "val_loss" in r]
    assert [r["step"] for r in evals] == [0, 3, 6] and not any("kind" in r for r in evals)
    assert {r.get("kind") for r in lines} == {None, "grad", "probe"}
    assert not (FIXTURES / "run_v0" / "tb").exists()
    assert sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file()) < 300_000


def test_rundir_reads_old_records(old_run):
    rd = RunDir(old_run)
    assert {r["step"]: r["val_loss"] for r in rd.evals} == OLD_EVALS
    assert [r["step"] for r in rd.metrics("train")] == [3, 6]
    assert [r["step"] for r in rd.metrics("grad")] == [3, 6]
    assert [r["step"] for r in rd.metrics("probe")] == [0, 3, 6]
    assert rd.summary["final_step"] == 6 and len(rd.vocab) == rd.config["model"]["vocab_size"] == 52


def _fake_run(path, config=None):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config or {"model": {}, "train": {}}))
    return path


def test_a_run_nested_in_a_run_or_in_a_sweeps_own_files_is_refused(tmp_path):
    from depthlab.rundir import nested_run_error

    run = _fake_run(tmp_path / "runs" / "a")
    err = nested_run_error(run / "sub" / "deeper", "--train.out_dir")
    assert str(err) == (f"train.out_dir {run}/sub/deeper lies inside the depthlab run {run}; a run nested in a run "
                        f"mixes their files (and --overwrite of {run} would then refuse): choose another "
                        f"--train.out_dir, outside {run}")
    sweep = tmp_path / "sw"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "sweep.json").write_text("{}")
    assert nested_run_error(sweep / "runs" / "n_layer-1", "--train.out_dir") is None  # the sweep's own run
    # a named experiment's run (the quick profile's runs/depth/NAME): all 10 of its runs were refused
    assert nested_run_error(sweep / "runs" / "depth" / "n_layer-01_variant-plain", "--train.out_dir") is None
    for inside in (sweep / "plots", sweep / "runs", sweep / "other" / "runs" / "x"):
        assert f"lies inside the sweep folder {sweep}, but not as one of its runs" in str(
            nested_run_error(inside, "--out_dir"))
    hf = _fake_run(tmp_path / "hf", {"architectures": ["GPT2LMHeadModel"]})  # another tool's config.json
    assert nested_run_error(hf / "run", "--train.out_dir") is None
    assert nested_run_error(tmp_path / "runs" / "b", "--train.out_dir") is None


def test_train_refuses_a_run_inside_a_run_and_writes_nothing(tmp_path, tiny_text_file, capsys, monkeypatch):
    run = _fake_run(tmp_path / "runs" / "a")
    (run / "metrics.jsonl").write_text("")
    monkeypatch.chdir(tmp_path)
    assert main(["train", *tiny_cli_args(tiny_text_file, "runs/a/sub")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("depthlab: error: train.out_dir runs/a/sub lies inside the depthlab run runs/a;")
    assert err.count("\n") == 1 and "choose another --train.out_dir, outside runs/a" in err
    assert sorted(p.name for p in run.iterdir()) == ["config.json", "metrics.jsonl"]


def test_a_run_copied_into_a_run_is_neither_resumed_nor_replaced_there(tmp_path, tiny_text_file, capsys, monkeypatch):
    """runs/a/sub, itself a run inside the run runs/a: --resume kept writing it there (a new run there is refused),
    and the new-run refusal did not say that runs/a/sub is a run nor what works for it."""
    from depthlab.rundir import nested_resume_error

    monkeypatch.chdir(tmp_path)
    (_fake_run(tmp_path / "runs" / "a") / "metrics.jsonl").write_text("")
    sub = _fake_run(tmp_path / "runs" / "a" / "sub", {"data": {"path": str(tiny_text_file)}, "model": {}, "train": {}})
    (sub / "metrics.jsonl").write_text("")
    assert main(["train", "--resume", "runs/a/sub"]) == 2
    err = capsys.readouterr().err
    assert err == ("depthlab: error: cannot resume runs/a/sub: it lies inside the depthlab run runs/a; a run nested "
                   "in a run mixes their files (and --overwrite of runs/a would then refuse); move runs/a/sub out of "
                   "runs/a, then resume it there (--resume NEW_PLACE)\n")
    assert sorted(p.name for p in sub.iterdir()) == ["config.json", "metrics.jsonl"]
    assert main(["train", *tiny_cli_args(tiny_text_file, "runs/a/sub")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith(
        "choose another --train.out_dir, outside runs/a; runs/a/sub is itself a depthlab run, which cannot be "
        "resumed or replaced inside runs/a: move it out of runs/a, then --resume it there\n")
    sweep = tmp_path / "sw"
    sweep.mkdir()
    (sweep / "sweep.json").write_text("{}")
    for ok in (sweep / "runs" / "n_layer-1", sweep / "runs" / "depth" / "n_layer-1", tmp_path / "runs" / "b"):
        assert nested_resume_error(_fake_run(ok)) is None  # a sweep's own runs, at either depth, and a plain run
    assert str(nested_resume_error(_fake_run(sweep / "plots" / "x"))) == (
        f"cannot resume {sweep}/plots/x: it lies inside the sweep folder {sweep}, but not as one of its runs "
        f"({sweep}/runs/NAME); move {sweep}/plots/x out of {sweep}, then resume it there (--resume NEW_PLACE)")


def test_a_sweeps_runs_are_found_at_either_depth_under_runs(tmp_path):
    """A named experiment puts its runs at SWEEP/runs/EXPERIMENT/NAME: the run lock's 'a running sweep trains it'
    and the not-a-run line's list of a sweep's runs looked only at SWEEP/runs/NAME."""
    from depthlab.rundir import not_a_run_error, sweep_of, sweep_runs

    sweep = tmp_path / "sw"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "sweep.json").write_text("{}")
    a, b = _fake_run(sweep / "runs" / "depth" / "n_layer-1"), _fake_run(sweep / "runs" / "n_layer-2")
    assert sweep_of(a) == sweep and sweep_of(b) == sweep and sweep_of(tmp_path / "x" / "runs" / "y") is None
    assert sweep_runs(sweep) == [a, b]
    assert str(not_a_run_error(sweep)) == f"{sweep} is a sweep folder: give one of its runs, e.g. {a} (2 runs)"


@pytest.mark.parametrize("argv", [["sample", "{d}"], ["diagnose", "{d}"], ["report", "{d}"], ["context", "{d}"],
                                  ["layers", "{d}"], ["export", "{d}", "{d}_out"], ["train", "--resume", "{d}"]])
def test_another_programs_config_json_folder_is_not_called_a_damaged_run(tmp_path, capsys, argv):
    # a Hugging Face model folder (what depthlab export writes) holds a config.json of its own; it was never a
    # run, so "a depthlab run whose files are missing" or '"model": null ... edited by hand' would be untrue
    hf = tmp_path / "hf_model"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 4}))
    assert main([a.format(d=hf) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"depthlab: error: {'cannot resume: ' if argv[0] == 'train' else ''}{hf} is not a depthlab run "
                   "directory: its config.json is not depthlab's (none of the data/model/train sections depthlab "
                   "writes; another program's, such as a Hugging Face model folder?); give the out_dir of a depthlab "
                   "train run"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf_model"]  # nothing written beside it
    assert sorted(p.name for p in hf.iterdir()) == ["config.json"]


def test_a_path_that_goes_up_out_of_a_missing_folder_is_refused_by_train_sweep_and_export(tmp_path):
    """A new user's pass: train.out_dir ud/nosub/.. (nosub missing) passed the 'holds files' check as a new folder
    and wrote the run into ud, beside the user's files; sweep and export the same."""
    from depthlab.errors import DepthlabError
    from depthlab.export import _check_out_dir
    from depthlab.rundir import prepare_run_dir
    from depthlab.sweep.common import check_sweep_dir

    ud = tmp_path / "ud"
    ud.mkdir()
    (ud / "thesis.md").write_text("mine")
    bad = ud / "nosub" / ".."
    for check in (lambda: prepare_run_dir(bad, False), lambda: check_sweep_dir(bad),
                  lambda: _check_out_dir(bad, False)):
        with pytest.raises(DepthlabError, match=r"goes up \(\.\.\) out of .*nosub, which does not exist; give the "
                                                r"folder you mean without the \.\. \(.*ud\)$"):
            check()
    assert sorted(p.name for p in ud.iterdir()) == ["thesis.md"]  # nothing made, nothing written
    from depthlab.rundir import up_from_missing_error

    (ud / "sub").mkdir()  # going up out of a folder that exists is a path like any other
    assert up_from_missing_error(ud / "sub" / "..", "x") is None and up_from_missing_error(ud / "a" / "b", "x") is None


def test_the_writable_fix_is_one_the_user_can_run(tmp_path, monkeypatch):
    """chmod on another user's folder is refused: a new user's resume of a root-owned run was told to chmod it."""
    from depthlab.rundir import writable_fix

    assert writable_fix(tmp_path, "the run") == f"make the run writable (chmod -R u+w {tmp_path})"
    monkeypatch.setattr("os.getuid", lambda: tmp_path.stat().st_uid + 1)
    assert writable_fix(tmp_path, "the run") == (f"copy the run to a folder you own (cp -r {tmp_path} COPY; another "
                                                 "user owns it)")
