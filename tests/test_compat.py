"""Run directories written by the previous release (5c2efe6, before the architecture refactor) still load.

``tests/fixtures/run_v0`` was made by that release's code (``git worktree add /tmp/oldrel 5c2efe6``)::

    PYTHONPATH=/tmp/oldrel/src python -m depthlab train --model.n_layer 1 --model.n_embd 16 \
        --model.n_head 2 --model.block_size 16 --train.batch_size 4 --train.max_iters 6 \
        --train.eval_interval 3 --train.eval_iters 1 --train.log_interval 3 --train.dtype float32 \
        --train.max_time 0 --train.tensorboard false --train.probe_interval 3 \
        --train.grad_log_interval 3 --data.path tests/fixtures/corpus.txt --train.out_dir tests/fixtures/run_v0

Its eval and train records have no ``kind`` (only grad/probe records had one), its config.json
stores ``data.path`` relative to the repository root, and its checkpoints are format 1.
"""

import json
import shutil
from pathlib import Path

import pytest

from depthlab.cli import main
from depthlab.rundir import RunDir

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CORPUS = FIXTURES / "corpus.txt"
OLD_EVALS = {0: 3.9425461292266846, 3: 3.9417850971221924, 6: 3.939636468887329}  # val_loss, from the old run


@pytest.fixture
def old_run(tmp_path):
    """A copy of the old run, its data.path pointed at the committed corpus (it was relative to the repo)."""
    rd = Path(shutil.copytree(FIXTURES / "run_v0", tmp_path / "run_v0"))
    cfg = json.loads((rd / "config.json").read_text())
    assert cfg["data"]["path"] == "tests/fixtures/corpus.txt"  # the fixture is what we think it is
    cfg["data"]["path"] = str(CORPUS)
    (rd / "config.json").write_text(json.dumps(cfg, indent=2))
    return rd


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


@pytest.mark.parametrize("checkpoint", ["best", "last"])
def test_sample(old_run, capsys, checkpoint):
    rc = main(["sample", str(old_run), "--prompt", "First", "--max_new_tokens", "20", "--seed", "1",
               "--checkpoint", checkpoint, "--device", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("First")
    text = out[:-1] if out.endswith("\n") else out
    assert len(text) == len("First") + 20
    assert set(text) <= set(RunDir(old_run).vocab)


def test_diagnose_json(old_run, capsys):
    assert main(["diagnose", str(old_run), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert isinstance(d["findings"], list)
    for f in d["findings"]:
        assert {"rule", "evidence", "remedy"} <= set(f)


def test_report(old_run, capsys):
    """Two figures (speed): the loss curves (old eval/train records) and gradient flow (old grad records)."""
    skip = ["grad_layers", "update_ratio", "activations", "attn_entropy", "attention"]
    assert main(["report", str(old_run), "--skip", *skip]) == 0
    assert capsys.readouterr().out.strip() == str(old_run / "report.html")
    html = (old_run / "report.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and html.count("data:image/png;base64,") == 2
    assert sorted(p.name for p in (old_run / "plots").glob("*.png")) == ["grad_flow.png", "loss.png"]
    assert "3.9396" in html  # the old run's best val loss is shown


@pytest.mark.slow
def test_report_every_figure(old_run, capsys):
    assert main(["report", str(old_run)]) == 0
    drawn = sorted(p.stem for p in (old_run / "plots").glob("*.png"))
    assert drawn == sorted(["loss", "grad_flow", "grad_layers", "update_ratio", "activations", "attn_entropy",
                            "attention"])  # rezero_alpha: not a rezero run
    html = (old_run / "report.html").read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == len(drawn)


def test_resume(old_run, capsys):
    assert main(["train", "--resume", str(old_run), "--train.max_iters", "9"]) == 0
    capsys.readouterr()
    rd = RunDir(old_run)
    assert rd.summary["final_step"] == 9
    evals = rd.evals
    assert [r["step"] for r in evals] == [0, 3, 6, 9]
    assert {r["step"]: r["val_loss"] for r in evals[:3]} == OLD_EVALS  # the old records are kept as written
    assert all(r["kind"] == "eval" for r in evals)
    manifest = json.loads((old_run / "checkpoints" / "manifest.json").read_text())
    assert manifest["checkpoints"][-1]["step"] == 9
    assert json.loads((old_run / "config.json").read_text())["train"]["max_iters"] == 9
