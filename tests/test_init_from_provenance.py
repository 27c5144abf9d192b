"""A run started ``--init-from`` says so: one console line at start (the file, its step and val loss, and what starts
fresh), config.json ``resolved.init_from`` (path and sha256, kept by a resume), summary.json, diagnose and report
(it used to leave no trace, and its low step-0 loss read as a from-scratch run's)."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest


from conftest import TINY_TEXT, assert_clean_error, evals, run_cli, tiny_cli_args, trained_tiny_run


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return trained_tiny_run(tmp_path_factory, "nu51", TINY_TEXT)


@pytest.mark.slow  # several seconds on 2 cores: the fast tier stays under 3 min
def test_init_from_a_run_is_said_recorded_and_kept_by_a_resume(source, tmp_path, capsys):
    best = source / "checkpoints" / "best.safetensors"
    manifest = json.loads((source / "checkpoints" / "manifest.json").read_text())["best"]
    rc, out, _ = run_cli(capsys, "train", "--init-from", str(source),
                         *tiny_cli_args(source.parent / "t.txt", tmp_path / "B", train__max_iters=10))
    assert rc == 0
    assert out.splitlines()[0] == (
        f"init-from: {best} (step {manifest['step']}, val {manifest['val_loss']:.4f} nats): the model starts from "
        "these weights; optimizer state, step count and learning-rate schedule start fresh (step 0)")
    want = {"source": str(source.resolve()), "path": str(best.resolve()),
            "sha256": hashlib.sha256(best.read_bytes()).hexdigest(), "kind": "run", "step": manifest["step"],
            "val_loss": manifest["val_loss"]}
    assert json.loads((tmp_path / "B" / "config.json").read_text())["resolved"]["init_from"] == want
    assert json.loads((tmp_path / "B" / "summary.json").read_text())["init_from"] == want
    # the step-0 evaluation is the source's best, not a fresh model's ~ln V
    first = evals(tmp_path / "B")[0]
    assert first[0] == 0 and first[2] == pytest.approx(manifest["val_loss"], abs=2e-3)
    rc, out, _ = run_cli(capsys, "diagnose", str(tmp_path / "B"))
    assert rc == 0 and out.splitlines()[-1] == (
        f"note: not trained from scratch: the model started from the step {manifest['step']} weights of "
        f"{best.resolve()}, val {manifest['val_loss']:.4f} nats (--init-from, sha256 {want['sha256'][:12]}…), so "
        "its step-0 loss is theirs")
    assert run_cli(capsys, "report", str(tmp_path / "B"))[0] == 0
    assert "started from</div><div class=\"v\">run</div>" in (tmp_path / "B" / "report.html").read_text()
    rc, out, _ = run_cli(capsys, "train", "--resume", str(tmp_path / "B"), "--train.max_iters", "15")
    assert rc == 0 and "init-from:" not in out
    assert json.loads((tmp_path / "B" / "config.json").read_text())["resolved"]["init_from"] == want
    assert json.loads((tmp_path / "B" / "summary.json").read_text())["init_from"] == want


def test_init_from_a_run_hashes_its_best_once(source, tmp_path, capsys, monkeypatch):
    """It hashed best.safetensors three times at start (the manifest's check in the load, then the record, which
    ran that check again): a file of gigabytes read three times before step 0."""
    from depthlab import checkpoint, data, init_from

    hashed = []

    def counting(path):
        hashed.append(Path(path).name)
        return data.sha256_file(path)

    for module in (checkpoint, init_from):
        monkeypatch.setattr(module, "sha256_file", counting)
    best = source / "checkpoints" / "best.safetensors"
    rc, _, err = run_cli(capsys, "train", "--init-from", str(source),
                         *tiny_cli_args(source.parent / "t.txt", tmp_path / "B", train__max_iters=2))
    assert rc == 0, err
    assert hashed.count("best.safetensors") == 1
    record = json.loads((tmp_path / "B" / "config.json").read_text())["resolved"]["init_from"]
    manifest = json.loads((source / "checkpoints" / "manifest.json").read_text())["best"]
    assert record["sha256"] == hashlib.sha256(best.read_bytes()).hexdigest()
    assert (record["step"], record["val_loss"]) == (manifest["step"], manifest["val_loss"])


def test_a_run_from_scratch_has_no_init_from_record(source):
    assert "init_from" not in json.loads((source / "config.json").read_text())["resolved"]
    assert "init_from" not in json.loads((source / "summary.json").read_text())


def _advice(err: str, new_dir) -> list[str]:
    """The command a refusal ends with (after ``: depthlab ``), NEW_DIR replaced, as argv."""
    line = err.strip().splitlines()[-1]
    return line.rsplit(": depthlab ", 1)[1].replace("NEW_DIR", str(new_dir)).split()


@pytest.mark.slow
def test_a_resume_with_a_new_shape_advises_a_new_model_from_scratch_and_the_advice_works(source, tmp_path, capsys):
    """nu51: it advised --init-from "where the weights fit", which then refused every shape change."""
    run = tmp_path / "A"
    shutil.copytree(source, run)
    rc, _, err = run_cli(capsys, "train", "--resume", str(run), "--model.n_layer", "3", "--train.max_iters", "20")
    assert_clean_error(rc, err)
    assert err.strip().endswith(
        f"resume with the run's own values (depthlab train --resume {run} alone reads them from its config.json), "
        "or train the changed model as a new run from scratch (model.n_layer "
        "changes the number or shape of the model's weights, so --init-from cannot reuse the run's): depthlab train "
        f"-c {run / 'config.json'} --model.n_layer 3 --train.max_iters 20 --train.resume false "
        "--train.out_dir NEW_DIR")  # the other flag typed goes along (it was dropped)
    rc, _, err2 = run_cli(capsys, "train", "--resume", str(run), "--model.n_layer", "3", "--model.n_embd", "64",
                          "--train.max_iters", "20")  # two fields: "change", not "changes"
    assert "(model.n_embd, model.n_layer change the number or shape of the model's weights" in err2, err2
    assert "(run value -> asked); this changes what" in err and "(run value -> asked); these change what" in err2
    rc, out, _ = run_cli(capsys, *_advice(err, tmp_path / "new"))
    assert rc == 0 and "init-from:" not in out
    assert json.loads((tmp_path / "new" / "config.json").read_text())["model"]["n_layer"] == 3
    assert json.loads((tmp_path / "new" / "config.json").read_text())["train"]["max_iters"] == 20
    rc, _, err = run_cli(capsys, "train", "--init-from", str(run),
                         *tiny_cli_args(source.parent / "t.txt", tmp_path / "C", model__n_layer=3))
    assert_clean_error(rc, err, "its weights do not fit this model (model.n_layer 2 there, 3 here); drop those "
                       "--model flags to take the source run's shape, or drop --init-from: a model of this shape is a "
                       "new model and trains from scratch")


def test_a_resume_with_a_change_the_weights_fit_advises_init_from_and_the_advice_works(source, tmp_path, capsys):
    """model.activation keeps every weight's name and shape: --init-from loads them, so it is offered."""
    run = tmp_path / "A"
    shutil.copytree(source, run)
    rc, _, err = run_cli(capsys, "train", "--resume", str(run), "--model.activation", "relu")
    assert_clean_error(rc, err)
    assert err.strip().endswith(
        "start a new run from its weights (the changed model has the same weights, by name and shape; the optimizer "
        f"state, step count and schedule start fresh): depthlab train -c {run / 'config.json'} --init-from {run} "
        "--model.activation relu --train.resume false --train.out_dir NEW_DIR")
    rc, out, _ = run_cli(capsys, *_advice(err, tmp_path / "new"), "--train.max_iters", "5")
    assert rc == 0 and out.startswith(f"init-from: {run / 'checkpoints' / 'best.safetensors'} (step 10")
    config = json.loads((tmp_path / "new" / "config.json").read_text())
    assert config["model"]["activation"] == "relu" and config["resolved"]["init_from"]["step"] == 10


@pytest.mark.parametrize("hf_only", [False, True])
def test_init_from_an_export_of_another_shape_is_one_line_naming_the_field_and_the_fix(source, tmp_path, capsys,
                                                                                     hf_only):
    """nu51: it was 'checkpoint EX does not fit this model: missing transformer.h.2.ln_1.weight, ...' and no fix.
    Without depthlab.json the shape comes from the Hugging Face config.json."""
    pytest.importorskip("transformers")
    export = tmp_path / "ex"
    assert run_cli(capsys, "export", str(source), str(export))[0] == 0
    if hf_only:
        (export / "depthlab.json").unlink()
    argv = ["train", "--init-from", str(export), *tiny_cli_args(source.parent / "t.txt", tmp_path / "new")]
    rc, _, err = run_cli(capsys, *argv, "--model.n_layer", "3", "--model.n_embd", "64")
    assert_clean_error(rc, err)
    assert err.strip() == (
        f"depthlab: error: --init-from {export}: its weights do not fit this model (model.n_embd 32 there, 64 here; "
        "model.n_layer 2 there, 3 here); drop those --model flags to take the export's shape, or drop --init-from: a "
        "model of this shape is a new model and trains from scratch")
    assert not (tmp_path / "new").exists()
    rc, out, _ = run_cli(capsys, *argv, "--train.max_iters", "5")  # the fix: the export's shape
    assert rc == 0 and out.startswith(f"init-from: {export / 'model.safetensors'}: the model starts")


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
@pytest.mark.parametrize("hf_only", [False, True])
def test_init_from_an_export_takes_its_shape_as_from_a_run(source, tmp_path, capsys, hf_only):
    """Without --model flags a run folder gave the new run its shape, an export did not: the defaults (4 layers,
    n_embd 128, block 128) were refused as not fitting. Without depthlab.json the shape is the Hugging Face
    config.json's."""
    pytest.importorskip("transformers")
    export = tmp_path / "ex"
    assert run_cli(capsys, "export", str(source), str(export))[0] == 0
    if hf_only:
        (export / "depthlab.json").unlink()
    shape = ("n_layer", "n_head", "n_embd", "block_size")
    flags = ["--data.path", str(source.parent / "t.txt"), "--train.max_iters", "3", "--train.eval_interval", "3",
             "--train.eval_iters", "1", "--train.batch_size", "4", "--train.tensorboard", "false", "--train.threads",
             "1"]
    for src, out in ((source, tmp_path / "from_run"), (export, tmp_path / "from_export")):
        rc, _, err = run_cli(capsys, "train", "--init-from", str(src), *flags, "--train.out_dir", str(out))
        assert rc == 0, err
    made = [json.loads((tmp_path / d / "config.json").read_text())["model"] for d in ("from_run", "from_export")]
    want = json.loads((source / "config.json").read_text())["model"]
    assert [{k: m[k] for k in shape} for m in made] == [{k: want[k] for k in shape}] * 2 == [
        {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16}] * 2


def test_diagnose_json_carries_the_init_from_record(source, tmp_path, capsys):
    """A new user's pass: `diagnose --json` of a run started with --init-from had no init_from (the text said
    "note: not trained from scratch")."""
    rc, _, _ = run_cli(capsys, "train", "--init-from", str(source),
                       *tiny_cli_args(source.parent / "t.txt", tmp_path / "C", train__max_iters=10))
    assert rc == 0
    want = json.loads((tmp_path / "C" / "config.json").read_text())["resolved"]["init_from"]
    rc, out, _ = run_cli(capsys, "diagnose", str(tmp_path / "C"), "--json")
    got = json.loads(out)
    assert rc == 0 and got["init_from"] == want and got["init_from"]["path"].endswith("best.safetensors")
    assert "findings" in got and "not_judged" in got
    rc, out, _ = run_cli(capsys, "diagnose", str(source), "--json")
    assert rc == 0 and json.loads(out)["init_from"] is None  # trained from scratch


def test_a_refused_resume_quotes_a_json_model_init_in_its_advice_so_the_shell_keeps_it_whole(tmp_path, capsys):
    """A new user's pass: the advice ended `--model.init {"n_layer": 3} ...`, which bash splits into two words."""
    import shlex

    from depthlab.training.checkpointer import _flag_text

    assert _flag_text({"n_layer": 3}) == "'{\"n_layer\": 3}'" and _flag_text(64) == "64"
    assert _flag_text("mine.py:MyGPT") == "mine.py:MyGPT" and _flag_text(True) == "true"
    assert shlex.split(f"--model.init {_flag_text({'n_layer': 3})}") == ["--model.init", '{"n_layer": 3}']
