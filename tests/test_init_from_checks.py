"""--init-from checks the source run's best.safetensors against its manifest: a damaged manifest gives one warning
that the weights are loaded unchecked (they used to load without a word), a best that fails its sha256 is refused
naming its intact twin (it loaded silently)."""

import json
import shutil

import pytest

from depthlab.cli import main

from conftest import TINY_TEXT, assert_clean_error, run_cli, tiny_cli_args, trained_tiny_run


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    return trained_tiny_run(tmp_path_factory, "good", TINY_TEXT)


def _copy(good_run, tmp_path):
    run = tmp_path / "src"
    shutil.copytree(good_run, run)
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    return run, run / "checkpoints" / "manifest.json", run / "checkpoints" / "best.safetensors"


def _no_sha(manifest):
    m = json.loads(manifest.read_text())
    m["best"]["files"] = {}
    manifest.write_text(json.dumps(m))


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
@pytest.mark.parametrize("damage, why", [
    (lambda m: m.write_text('{"format": 1, "checkpoints": ['), "is unreadable (Expecting value"),
    (_no_sha, "holds no sha256 of best.safetensors")])
def test_init_from_a_run_whose_manifest_cannot_check_best_says_so_in_one_warning(good_run, tmp_path, capsys,
                                                                                 damage, why):
    """As resume's refusal of a damaged manifest offers ("start a new run from its best weights, unchecked"), the
    weights are loaded, and the one warning line says they were not checked and why."""
    run, manifest, best = _copy(good_run, tmp_path)
    damage(manifest)
    rc, _, err = run_cli(capsys, "train", "--init-from", str(run), *tiny_cli_args(tmp_path / "t.txt", tmp_path / "new"))
    assert rc == 0 and (tmp_path / "new" / "checkpoints" / "best.safetensors").exists()
    warned = [line for line in err.splitlines() if "--init-from" in line]
    assert warned == [f"depthlab: warning: --init-from {run}: {best} could not be checked against the run's manifest "
                      f"({manifest} {why}" + warned[0].split(why, 1)[1]], err
    assert warned[0].endswith("); its weights are loaded unchecked")


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_init_from_a_best_changed_in_place_is_refused_naming_its_intact_twin(good_run, tmp_path, capsys):
    """A flipped byte in the tensors still parses: it loaded silently. Now the sha256 is checked, as sample does."""
    run, manifest, best = _copy(good_run, tmp_path)
    data = bytearray(best.read_bytes())
    data[-5] ^= 1
    best.write_bytes(bytes(data))
    twin = run / "checkpoints" / "step-000010.safetensors"
    argv = ["train", "--init-from", str(run), *tiny_cli_args(tmp_path / "t.txt", tmp_path / "new")]
    rc, _, err = run_cli(capsys, *argv)
    assert_clean_error(rc, err, f"--init-from {run}: {best} does not match its sha256 in manifest.json",
                       f"(cp {twin} {best})")
    assert not (tmp_path / "new").exists()
    shutil.copyfile(twin, best)  # what the line says to do
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 0 and "--init-from" not in err, err  # an intact best: nothing to say


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_init_from_a_missing_folder_or_a_file_says_which(tmp_path, capsys, kind):
    """helper-51: a folder that does not exist was "neither a depthlab run (no checkpoints/) nor a Hugging Face
    export", as if it were there."""
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    src = tmp_path / "src"
    if kind == "file":
        src.write_text("x")
    rc = main(["train", *tiny_cli_args(tmp_path / "t.txt", tmp_path / "new", train__max_iters=2), "--init-from",
               str(src)])
    said = "is a file" if kind == "file" else "no such folder"
    assert_clean_error(rc, capsys.readouterr().err, f"--init-from {src}: {said}; give a depthlab run directory")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("kind", ["empty", "run_without_checkpoints", "folder_of_runs"])
def test_init_from_a_folder_that_is_no_run_says_what_to_give(good_run, tmp_path, capsys, kind):
    """Was "neither a depthlab run (no checkpoints/) nor a Hugging Face export of model_type ...": the problem, no
    fix. Now the line ends with what to give: a run's out_dir or an export, or one of the runs the folder holds."""
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    src = tmp_path / "src"
    src.mkdir()
    if kind == "run_without_checkpoints":
        (src / "config.json").write_text("{}")
    if kind == "folder_of_runs":
        shutil.copytree(good_run, src / "b")
        shutil.copytree(good_run, src / "a")
    rc = main(["train", *tiny_cli_args(tmp_path / "t.txt", tmp_path / "new", train__max_iters=2), "--init-from",
               str(src)])
    fix = f"it holds 2 runs: give one of them, e.g. --init-from {src / 'a'}" if kind == "folder_of_runs" else \
        "give the out_dir of a depthlab train run (it holds checkpoints/) or a folder written by depthlab export"
    assert_clean_error(rc, capsys.readouterr().err, f"--init-from {src}: neither a depthlab run (no checkpoints/) "
                       f"nor a Hugging Face export of model_type gpt2, openai-gpt, gpt_neox (depthlab export); {fix}")
    assert not (tmp_path / "new").exists()


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
@pytest.mark.parametrize("twin_kept", [True, False])
def test_init_from_a_run_without_its_best_checkpoint_says_what_to_do(good_run, tmp_path, capsys, twin_kept):
    """Was "no checkpoints/best.safetensors there" and nothing more. Now: copy back its twin, when one is kept."""
    run, manifest, best = _copy(good_run, tmp_path)
    best.unlink()
    twin = run / "checkpoints" / "step-000010.safetensors"
    if not twin_kept:
        manifest.unlink()
    argv = ["train", "--init-from", str(run), *tiny_cli_args(tmp_path / "t.txt", tmp_path / "new")]
    rc, _, err = run_cli(capsys, *argv)
    fix = f"step-000010.safetensors is the same weights (the manifest's sha256 of best): copy it back (cp {twin} " \
          f"{best}) and run the command again" if twin_kept else "restore best.safetensors from a copy of the run, " \
          "or give another run directory (or a folder written by depthlab export) to --init-from"
    assert_clean_error(rc, err, f"--init-from {run}: no checkpoints/best.safetensors there; {fix}")
    assert not (tmp_path / "new").exists()
    if twin_kept:
        shutil.copyfile(twin, best)  # what the line says to do
        assert run_cli(capsys, *argv)[0] == 0


def test_init_from_the_folder_the_run_would_overwrite_is_refused_and_nothing_is_lost(good_run, tmp_path, capsys):
    """Before: "neither a depthlab run (no checkpoints/) nor a Hugging Face export" (--overwrite had set the run
    aside), though the folder holds checkpoints/. Now the refusal says what is wrong, before anything is moved."""
    run, _, _ = _copy(good_run, tmp_path)
    before = {p.relative_to(run): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    rc, _, err = run_cli(capsys, "train", "--init-from", str(run), "--overwrite",
                         *tiny_cli_args(tmp_path / "t.txt", run))
    assert_clean_error(rc, err, f"--init-from {run}: that is the folder this run would replace (--overwrite of "
                       f"train.out_dir {run}), so its weights cannot start the run; give another --train.out_dir")
    assert "neither a depthlab run" not in err
    assert {p.relative_to(run): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src", "t.txt"]


def _edit(manifest, **fields):
    m = json.loads(manifest.read_text())
    m.update(fields)
    manifest.write_text(json.dumps(m))


def _init_from(tmp_path, run, capsys):
    rc, _, err = run_cli(capsys, "train", "--init-from", str(run), *tiny_cli_args(tmp_path / "t.txt", tmp_path / "new",
                                                                                   train__max_iters=2))
    return rc, err


@pytest.mark.parametrize("checkpoints", ["x", [1, 2]])
def test_init_from_a_manifest_that_is_not_depthlabs_warns_it_loaded_unchecked(good_run, tmp_path, capsys, checkpoints):
    """Before: loaded silently (resume and sample refuse the manifest), and the provenance lost step and val."""
    run, manifest, best = _copy(good_run, tmp_path)
    _edit(manifest, checkpoints=checkpoints)
    rc, err = _init_from(tmp_path, run, capsys)
    assert rc == 0, err
    warned = [line for line in err.splitlines() if "--init-from" in line]
    assert warned == [f"depthlab: warning: --init-from {run}: {best} could not be checked against the run's manifest "
                      f"({manifest} is not a depthlab checkpoint manifest); its weights are loaded unchecked"]
    record = json.loads((tmp_path / "new" / "config.json").read_text())["resolved"]["init_from"]
    assert (record["step"], record["val_loss"]) == (None, None)


def test_init_from_a_manifest_of_a_newer_format_is_refused_as_resume_refuses_it(good_run, tmp_path, capsys):
    run, manifest, _ = _copy(good_run, tmp_path)
    _edit(manifest, format=99)
    rc, err = _init_from(tmp_path, run, capsys)
    assert_clean_error(rc, err, f"--init-from {run}: {manifest} has checkpoint format 99, newer than this depthlab "
                       "understands (1); upgrade depthlab")
    assert not (tmp_path / "new").exists()


def test_a_damaged_step_entry_leaves_best_checked_its_step_and_val_recorded(good_run, tmp_path, capsys):
    """Only a step checkpoint's sha256 blanked, best's entry intact and matching: the provenance recorded step and
    val null, and resume's refusal offered the best weights "unchecked"; they are checked."""
    run, manifest, _ = _copy(good_run, tmp_path)
    m = json.loads(manifest.read_text())
    step = m["checkpoints"][0]
    step["files"][next(iter(step["files"]))] = ""
    manifest.write_text(json.dumps(m))
    rc, err = run_cli(capsys, "train", "--resume", str(run))[::2]
    assert_clean_error(rc, err, "or start a new run from its best weights (best.safetensors matches its sha256 in the "
                       f"manifest): depthlab train -c {run / 'config.json'} --init-from {run} ")
    assert "unchecked" not in err
    rc, err = _init_from(tmp_path, run, capsys)
    assert rc == 0 and "unchecked" not in err, err
    record = json.loads((tmp_path / "new" / "config.json").read_text())["resolved"]["init_from"]
    assert (record["step"], record["val_loss"]) == (m["best"]["step"], m["best"]["val_loss"])
    assert isinstance(record["step"], int) and isinstance(record["val_loss"], float)


def _drop_best(manifest, steps_too: bool):
    m = json.loads(manifest.read_text())
    del m["best"]
    if steps_too:
        m["checkpoints"] = []
    manifest.write_text(json.dumps(m))


@pytest.mark.parametrize("command", ["sample", "layers", "context"])
def test_a_best_the_manifest_lists_no_sha256_of_is_called_unverifiable_not_corrupt(good_run, tmp_path, capsys,
                                                                                   command):
    """A manifest without a ``best`` entry beside an intact best.safetensors was called "missing or does not match
    its sha256 in manifest.json (corrupt or replaced)": false, there is nothing to check it against."""
    run, manifest, best = _copy(good_run, tmp_path)
    _drop_best(manifest, steps_too=True)
    extra = ["--max_new_tokens", "3"] if command == "sample" else []
    rc, _, err = run_cli(capsys, command, str(run), *extra)
    assert_clean_error(rc, err)
    assert err.strip() == (f"depthlab: error: {manifest} holds no sha256 of best.safetensors, so {best} cannot be "
                           "checked and depthlab does not read it; restore manifest.json from a copy of the run, or "
                           f"start a new run from its best weights, unchecked: depthlab train -c {run}/config.json "
                           f"--init-from {run} --train.resume false --train.out_dir NEW_DIR")


def test_a_first_best_not_yet_named_in_the_manifest_is_a_listed_steps_bytes_and_is_read(good_run, tmp_path, capsys):
    """A kill between writing the first best.safetensors and naming it: its bytes are a listed step checkpoint's,
    so sample reads it (and --init-from loads it without an "unchecked" warning), as for any later best."""
    run, manifest, best = _copy(good_run, tmp_path)
    _drop_best(manifest, steps_too=False)
    rc, _, err = run_cli(capsys, "sample", str(run), "--max_new_tokens", "3")
    assert rc == 0 and "sampling from best.safetensors (step 10" in err, err
    rc, _, err = run_cli(capsys, "train", "--init-from", str(run), *tiny_cli_args(tmp_path / "t.txt", tmp_path / "new"))
    assert rc == 0 and "unchecked" not in err, err


def test_a_non_finite_best_val_loss_in_the_manifest_is_damage(good_run, tmp_path, capsys):
    """A forged ``best.val_loss: NaN`` was printed as "(step 10, val nan nats)"."""
    run, manifest, best = _copy(good_run, tmp_path)
    m = json.loads(manifest.read_text())
    m["best"]["val_loss"] = float("nan")
    manifest.write_text(json.dumps(m))
    rc, _, err = run_cli(capsys, "sample", str(run), "--max_new_tokens", "3")
    assert_clean_error(rc, err, f"{manifest} records val_loss nan for best.safetensors, not a measured loss: the "
                       "sha256 of the run's checkpoints cannot be checked", f"--init-from {run} --train.resume false")
    new = tiny_cli_args(tmp_path / "t.txt", tmp_path / "new")
    rc, out, err = run_cli(capsys, "train", "--init-from", str(run), *new)
    assert rc == 0 and "nan" not in out + err.replace("records val_loss nan", ""), out + err
    assert f"init-from: {best}: the model starts" in out + err
    assert f"({manifest} records val_loss nan for best.safetensors, not a measured loss); its weights are loaded " \
           "unchecked" in err


def test_init_from_depthlabs_gpt_with_a_model_source_names_the_mix_not_fields_never_typed(good_run, tmp_path,
                                                                                          capsys):
    """A new user's pass: `--init-from RUN --model.source mine.py:MyGPT` said "model.n_layer 2, ...: these
    describe depthlab's GPT and do not apply to model.source", fields the user never gave (the run's shape)."""
    run, _, _ = _copy(good_run, tmp_path)
    cfg = json.loads((run / "config.json").read_text())["model"]
    mine = tmp_path / "mine.py"
    mine.write_text("import torch.nn as nn\n")
    rc, _, err = run_cli(capsys, "train", "--init-from", str(run), "--model.source", f"{mine}:MyGPT",
                         *tiny_cli_args(tmp_path / "t.txt", tmp_path / "new"))
    assert_clean_error(rc, err, f"--init-from {run} holds depthlab's GPT (model.n_layer {cfg['n_layer']}, n_embd "
                       f"{cfg['n_embd']}), and --init-from starts a model.source model only from a run of one: "
                       f"drop --model.source {mine}:MyGPT to continue depthlab's GPT, or --init-from a run of "
                       f"{mine}:MyGPT")
    assert "do not apply" not in err and not (tmp_path / "new").exists()


def _no_model_flags(tmp_path, **fields) -> list[str]:
    args = tiny_cli_args(tmp_path / "t.txt", tmp_path / "new", train__max_iters=2, train__eval_interval=2, **fields)
    keep = [i for i in range(0, len(args), 2) if not args[i].startswith("--model.")]
    return [a for i in keep for a in args[i:i + 2]]


def test_init_from_with_a_config_file_of_another_model_is_refused_naming_the_fields(good_run, tmp_path, capsys):
    # was: the run's model section, put after the file, silently replaced the file's n_layer 3 / n_embd 64
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    f = tmp_path / "c.yaml"
    f.write_text("model:\n  n_layer: 3\n  n_head: 2\n  n_embd: 64\n  block_size: 16\n")
    rc, _, err = run_cli(capsys, "train", "-c", str(f), "--init-from", str(good_run), *_no_model_flags(tmp_path))
    assert_clean_error(rc, err, f"--init-from {good_run}: model.n_layer 3 in {f}, 2 in {good_run}; model.n_embd 64 "
                       f"in {f}, 32 in {good_run}; the new run would train the source run's model",
                       f"remove model.n_layer, model.n_embd from {f}, or drop --init-from")
    assert err.rstrip().endswith("(a --model.FIELD flag typed on the command line that leaves the weights' shapes "
                                 "alone still wins, e.g. a dropout)")
    assert not (tmp_path / "new").exists()


def test_init_from_with_a_config_file_of_the_same_model_or_a_flag_over_it_trains(good_run, tmp_path, capsys):
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    f = tmp_path / "c.yaml"
    f.write_text("model:\n  n_layer: 3\n  n_head: 2\n  n_embd: 32\n")  # n_layer 3 is overridden by the flag
    rc, _, err = run_cli(capsys, "train", "-c", str(f), "--init-from", str(good_run), "--model.n_layer", "2",
                         *_no_model_flags(tmp_path))
    assert rc == 0, err
    assert json.loads((tmp_path / "new" / "config.json").read_text())["model"]["n_layer"] == 2


def test_init_from_with_a_preset_of_another_shape_trains_the_runs_model_and_says_so(good_run, tmp_path, capsys):
    # was: --preset fast-cpu (4 heads x 128, block 64) trained the run's 2 heads x 32 model without a word
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    rc, _, err = run_cli(capsys, "train", "--preset", "fast-cpu", "--init-from", str(good_run),
                         *_no_model_flags(tmp_path), "--train.dtype", "float32")
    assert rc == 0, err
    assert (f"depthlab: warning: --init-from {good_run}: the new run trains the source run's model, whose weights "
            "fix its shape: model.n_head 2 (preset fast-cpu: 4), model.n_embd 32 (preset fast-cpu: 128), "
            "model.block_size 16 (preset fast-cpu: 64)") in err
    model = json.loads((tmp_path / "new" / "config.json").read_text())["model"]
    assert (model["n_head"], model["n_embd"], model["block_size"]) == (2, 32, 16)


def test_init_from_with_a_preset_and_a_refused_shape_says_one_line_not_the_warning(good_run, tmp_path, capsys):
    # was: the preset's "the new run trains the source run's model" warning, then the refusal: two lines, and the
    # warning spoke of a run that was never made
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    rc, _, err = run_cli(capsys, "train", "--preset", "fast-cpu", "--init-from", str(good_run), "--model.n_embd",
                         "64", *_no_model_flags(tmp_path), "--train.dtype", "float32")
    assert_clean_error(rc, err, f"--init-from {good_run}")
    assert "warning" not in err and not (tmp_path / "new").exists()


def _set_model(**fields):
    def edit(config):
        c = json.loads(config.read_text())
        c["model"].update(fields)
        config.write_text(json.dumps(c))
    return edit


@pytest.mark.parametrize("edit, said, was", [
    (_set_model(position="learned"), 'model.position "learned"', 'model.position "rope"'),
    (_set_model(position="bogus"), 'model.position "bogus"', 'model.position "rope"'),  # was blamed on the flag
    (_set_model(n_layer=3, n_embd=64), "model.n_layer 3, model.n_embd 64", "model.n_layer 2, model.n_embd 32")])
def test_init_from_a_run_whose_config_json_was_edited_names_the_file_and_the_values(good_run, tmp_path, capsys, edit,
                                                                                  said, was):
    """Was: the weights that do not fit ("unexpected transformer.wpe.weight"), or "--model.position: expected one of
    learned, rope, got 'bogus'", a flag the user never typed (the run's config.json is passed on as flags)."""
    run, _, _ = _copy(good_run, tmp_path)
    edit(run / "config.json")
    rc, _, err = run_cli(capsys, "train", "--init-from", str(run), *_no_model_flags(tmp_path))
    assert_clean_error(rc, err)
    assert err == (f"depthlab: error: --init-from {run}: its config.json says {said}, but its "
                   f"checkpoints/best.safetensors was trained with {was} (config.json edited?), and the new run takes "
                   f"its model from config.json, which these weights do not fit: set {was} in {run / 'config.json'} "
                   "again, or restore the file from a copy of the run\n")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("damage, problem", [(lambda c: c.unlink(), "is missing"),
                                             (lambda c: c.write_text('{"model": '), "is not JSON"),
                                             (lambda c: c.write_text('{"data": {}}'), "has no model section")])
def test_init_from_a_run_whose_config_json_is_gone_names_the_file(good_run, tmp_path, capsys, damage, problem):
    """Was: "checkpoint RUN does not fit this model: missing transformer.h.2...": the defaults' model, compared with
    the weights, said nothing of the file."""
    run, _, _ = _copy(good_run, tmp_path)
    damage(run / "config.json")
    rc, _, err = run_cli(capsys, "train", "--init-from", str(run), *_no_model_flags(tmp_path))
    assert_clean_error(rc, err)
    assert err == (f"depthlab: error: --init-from {run}: {run / 'config.json'} {problem}; the new run takes its model "
                   "from it (the one checkpoints/best.safetensors was trained as): restore it from a copy of the run\n")
    assert not (tmp_path / "new").exists()
    shutil.copyfile(good_run / "config.json", run / "config.json")  # what the line says to do
    rc, _, err = run_cli(capsys, "train", "--init-from", str(run), *_no_model_flags(tmp_path))
    assert rc == 0, err


def test_init_from_a_dyt_run_names_its_embedding_scale_as_built(tmp_path, capsys):
    """A DyT run asked with ``embed_scale auto`` has the learned scale: a new run without it is refused naming
    'learned' (was "'auto' there", which says nothing of the weights), and one asking ``learned`` loads them."""
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    src = tmp_path / "dyt"
    assert main(["train", *tiny_cli_args(tmp_path / "t.txt", src, model__norm="dyt", train__max_iters=2)]) == 0
    capsys.readouterr()
    rc, _, err = run_cli(capsys, "train", "--init-from", str(src), "--model.embed_scale", "none",
                         *_no_model_flags(tmp_path))
    assert_clean_error(rc, err, f"--init-from {src}: its weights do not fit this model (model.embed_scale "
                       "'learned' there, 'none' here)")
    rc, _, err = run_cli(capsys, "train", "--init-from", str(src), "--model.embed_scale", "learned",
                         *_no_model_flags(tmp_path, train__out_dir=tmp_path / "new2"))
    assert rc == 0, err
