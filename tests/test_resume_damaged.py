"""A resume from checkpoints damaged after they were written: non-finite weights, deleted or truncated files,
a kept later best, and rotation past a damaged checkpoint (new-user round nu33)."""

import hashlib
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from depthlab import checkpoint as ckpt
from depthlab.cli import main

from conftest import tiny_cli_args


def _snapshot(run):
    """Every file under ``run`` with its bytes: a resume that must change nothing keeps this equal."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def _nan_weights(run, name):
    """Fill checkpoint ``name``'s float tensors with NaN and record its new sha256 in manifest.json."""
    path = run / "checkpoints" / f"{name}.safetensors"
    sd = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in load_file(path).items()}
    save_file(sd, path)
    m = json.loads((run / "checkpoints" / "manifest.json").read_text())
    for c in m["checkpoints"]:
        if path.name in c["files"]:
            c["files"][path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    (run / "checkpoints" / "manifest.json").write_text(json.dumps(m, indent=1))


@pytest.fixture
def run30(tmp_path, tiny_text_file):
    out = tmp_path / "r"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=30, train__eval_interval=10)]) == 0
    return out


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_checkpoint_with_nan_weights_is_refused_in_one_line_and_nothing_changes(run30, capsys):
    _nan_weights(run30, "step-000030")
    before = _snapshot(run30)
    capsys.readouterr()
    rc = main(["train", "--resume", str(run30), "--train.max_iters", "60"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith("depthlab: error: cannot resume")
    assert f"{run30 / 'checkpoints' / 'step-000030.safetensors'} holds non-finite weights" in err
    assert f"-c {run30 / 'config.json'} --init-from {run30} --train.resume false --train.out_dir NEW_DIR" in err
    assert "learning_rate" not in err  # the weights were NaN before this session's first step
    assert _snapshot(run30) == before  # config.json, summary.json, metrics.jsonl: all as they were


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
@pytest.mark.parametrize("damage,said", [("delete", "is missing (deleted?)"),
                                         ("truncate", "does not match its sha256 in manifest.json")])
def test_a_deleted_step_file_is_called_missing_and_a_truncated_one_a_sha256_mismatch(run30, capsys, damage, said):
    path = run30 / "checkpoints" / "step-000030.safetensors"
    if damage == "delete":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:1000])
    capsys.readouterr()
    assert main(["train", "--resume", str(run30), "--train.max_iters", "40"]) == 0
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if "step-000030.safetensors" in ln and "falling back" in ln)
    assert line == f"depthlab: warning: checkpoint file {path} {said}" + (
        " (damaged or replaced)" if damage == "truncate" else "") + "; falling back to the previous checkpoint"
    assert "missing or corrupt" not in err


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_when_every_step_checkpoint_is_damaged_the_refusal_names_each_file_and_its_fault(run30, capsys):
    """The one error said "each one ... is missing or fails its sha256 check" and which files were lost."""
    ck = run30 / "checkpoints"
    steps = sorted(p.name for p in ck.glob("step-*.safetensors"))
    assert len(steps) == 2, steps
    (ck / steps[-1]).unlink()
    (ck / steps[0]).write_bytes((ck / steps[0]).read_bytes()[:1000])
    capsys.readouterr()
    assert main(["train", "--resume", str(run30), "--train.max_iters", "40"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "falling back" not in err, err  # there is nothing to fall back to
    assert (f"no intact step checkpoint in {ck}: each one listed in manifest.json has a file that is missing or "
            f"fails its sha256 check ({steps[-1]} missing, {steps[0]} fails its sha256); restore its checkpoints/"
            in err), err


def _kept_line(run, val, step):
    return f"; a better best is kept aside: checkpoints/best-step-{step:06d}.safetensors (val {val:.4f} at step {step})"


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_the_done_line_and_a_later_resume_name_a_better_best_kept_aside(run30, capsys):
    best = json.loads((run30 / "checkpoints" / "manifest.json").read_text())["best"]
    (run30 / "checkpoints" / "step-000030.safetensors").unlink()  # the resume falls back to step 20
    capsys.readouterr()
    assert main(["train", "--resume", str(run30), "--train.max_iters", "22"]) == 0
    out = capsys.readouterr()
    kept = json.loads((run30 / "checkpoints" / "manifest.json").read_text())["kept"]
    assert [k["step"] for k in kept] == [30] and kept[0]["val_loss"] == best["val_loss"]
    done = out.out.splitlines()[-1]
    assert done.startswith("done: ") and done.endswith(f"-> {run30}{_kept_line(run30, best['val_loss'], 30)}")
    assert main(["train", "--resume", str(run30), "--train.max_iters", "24"]) == 0
    out = capsys.readouterr()
    now = json.loads((run30 / "summary.json").read_text())
    assert now["best_val_loss"] > best["val_loss"]  # still better than the run's best
    resuming = next(ln for ln in (out.out + out.err).splitlines() if ln.startswith("resuming "))
    assert resuming.endswith(_kept_line(run30, best["val_loss"], 30) + ")")
    assert out.out.splitlines()[-1].endswith(_kept_line(run30, best["val_loss"], 30))


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_kept_best_that_the_run_has_beaten_is_not_named(run30, capsys):
    (run30 / "checkpoints" / "step-000030.safetensors").unlink()
    assert main(["train", "--resume", str(run30), "--train.max_iters", "60"]) == 0
    out = capsys.readouterr()
    assert json.loads((run30 / "summary.json").read_text())["best_val_loss"] < json.loads(
        (run30 / "checkpoints" / "manifest.json").read_text())["kept"][0]["val_loss"]
    assert out.out.splitlines()[-1].startswith("done: ") and "kept aside" not in out.out.splitlines()[-1]


def _steps(run):
    return [c["step"] for c in json.loads((run / "checkpoints" / "manifest.json").read_text())["checkpoints"]]


@pytest.mark.slow
def test_rotation_after_a_fallback_resume_keeps_the_intact_checkpoint_and_leaves_the_damaged_one(run30, capsys):
    ckdir = run30 / "checkpoints"
    bad = ckdir / "step-000030.safetensors"
    bad.write_bytes(bad.read_bytes() + b"damaged")
    damaged = bad.read_bytes()
    assert main(["train", "--resume", str(run30), "--train.max_iters", "22", "--train.eval_interval", "2"]) == 0
    # keep_last 2 counts the intact 20 and 22; the damaged 30 is not counted, and not deleted
    assert _steps(run30) == [20, 22, 30] and (ckdir / "step-000020.safetensors").is_file()
    assert bad.read_bytes() == damaged
    assert main(["train", "--resume", str(run30), "--train.max_iters", "28", "--train.eval_interval", "2"]) == 0
    assert _steps(run30) == [26, 28, 30] and bad.read_bytes() == damaged
    capsys.readouterr()
    assert main(["train", "--resume", str(run30), "--train.max_iters", "34", "--train.eval_interval", "2"]) == 0
    err = capsys.readouterr().err
    assert ("depthlab: warning: the damaged checkpoint of step 30 (step-000030.safetensors, not matching its "
            "sha256), left untouched since a resume skipped it, is replaced now by this session's checkpoint of step "
            "30\n") in err
    assert _steps(run30) == [32, 34] and not bad.exists()


@pytest.mark.slow
def test_a_skipped_damaged_checkpoint_whose_step_the_run_passes_without_writing_it_is_removed_with_a_warning(
        run30, capsys):
    """A new user's pass: after a fallback resume the damaged step-30 checkpoint was deleted without a word once the
    run had passed step 30 on an eval_interval that never wrote step 30 again (README: left untouched until the
    run writes its step again)."""
    ckdir = run30 / "checkpoints"
    bad = ckdir / "step-000030.safetensors"
    bad.write_bytes(bad.read_bytes() + b"damaged")
    damaged, state = bad.read_bytes(), (ckdir / "step-000030.state.pt").read_bytes()
    assert main(["train", "--resume", str(run30), "--train.max_iters", "29", "--train.eval_interval", "4"]) == 0
    assert _steps(run30) == [28, 29, 30] and bad.is_file()  # 30 is skipped, kept, not counted
    capsys.readouterr()
    assert main(["train", "--resume", str(run30), "--train.max_iters", "35", "--train.eval_interval", "4"]) == 0
    err = capsys.readouterr().err
    assert err.count("is no longer listed") == 1 and (
        "depthlab: warning: the damaged checkpoint of step 30 (step-000030.safetensors, not matching its sha256), left "
        "untouched since a resume skipped it, is no longer listed in manifest.json: the run has passed its step (step "
        f"32) without writing it again; its files stay in {ckdir} (step-000030.*): delete them when you no longer "
        "need them\n") in err, err
    # nu42: its state.pt was intact (only the weights were damaged): nothing the user had is deleted
    assert _steps(run30) == [32, 35] and bad.read_bytes() == damaged
    assert (ckdir / "step-000030.state.pt").read_bytes() == state
    manifest = json.loads((ckdir / "manifest.json").read_text())
    assert not any("skipped" in c for c in manifest["checkpoints"])


def test_the_warning_naming_a_replaced_damaged_checkpoint_comes_before_its_files_are_written(
        run30, capsys, monkeypatch):
    """nu45: a fallback resume that reaches the skipped step again must say it replaces the damaged files before
    it writes over them (the order of events, not only that the warning appears)."""
    import sys

    import depthlab.checkpoint as ck

    bad = run30 / "checkpoints" / "step-000030.safetensors"
    bad.write_bytes(bad.read_bytes()[:-5])
    damaged, real = bad.read_bytes(), ck.atomic_write

    def marked(path, data, *a, **k):  # each write of a step-30 file, in the same stream as the warning
        if path.name.startswith("step-000030."):
            print(f"WRITE {path.name} (damaged bytes still there: {bad.read_bytes() == damaged})", file=sys.stderr)
        return real(path, data, *a, **k)

    monkeypatch.setattr(ck, "atomic_write", marked)
    capsys.readouterr()
    assert main(["train", "--resume", str(run30), "--train.max_iters", "30"]) == 0
    err = [x for x in capsys.readouterr().err.splitlines() if "WRITE" in x or "is replaced now" in x]
    assert err == [
        "depthlab: warning: the damaged checkpoint of step 30 (step-000030.safetensors, not matching its sha256), "
        "left untouched since a resume skipped it, is replaced now by this session's checkpoint of step 30",
        "WRITE step-000030.safetensors (damaged bytes still there: True)",
        "WRITE step-000030.state.pt (damaged bytes still there: False)"], err


@pytest.mark.parametrize("known", [True, False])
def test_a_best_the_manifest_does_not_name_is_adopted_or_kept_aside_never_replaced_unseen(run30, capsys, known):
    """A manifest without ``best`` (an older run, or edited) let the resumed run's next evaluation replace
    best.safetensors without a word. The bytes of the resumed state's best step (listed) are adopted with that
    step and val loss; any other bytes have no known provenance and move aside, said in one warning."""
    ck = run30 / "checkpoints"
    m = json.loads((ck / "manifest.json").read_text())
    best = m.pop("best")
    if not known:  # the bytes of another listed step: not the run's best, so nothing vouches for them as best
        other = next(c for c in m["checkpoints"] if c["step"] != best["step"])
        (ck / "best.safetensors").write_bytes((ck / f"{other['name']}.safetensors").read_bytes())
    (ck / "manifest.json").write_text(json.dumps(m, indent=1))
    old = (ck / "best.safetensors").read_bytes()
    digest = hashlib.sha256(old).hexdigest()
    copy = shutil.copytree(run30, run30.parent / "copy")  # adopted by the call itself, before any evaluation
    capsys.readouterr()
    assert main(["train", "--resume", str(run30), "--train.max_iters", "31", "--train.eval_interval", "100"]) == 0
    out = capsys.readouterr()
    after = json.loads((ck / "manifest.json").read_text())
    aside = ck / f"best-unrecorded-{digest[:12]}.safetensors"
    warned = [ln for ln in (out.out + out.err).splitlines() if "best.safetensors is not in manifest.json" in ln]
    if known:  # adopted, then beaten by the final evaluation of step 31 (a best replaced as it should be)
        assert warned == [] and not aside.exists()
        assert after["best"]["step"] == 31 and after["best"]["val_loss"] < best["val_loss"]
        assert ckpt.unrecorded_best(copy, best["step"], best["val_loss"]) is None
        assert json.loads((copy / "checkpoints" / "manifest.json").read_text())["best"] == best
    else:
        assert aside.read_bytes() == old
        assert warned == [f"depthlab: warning: {ck / 'best.safetensors'} is not in manifest.json (no sha256, step "
                          "or val loss recorded for it, and not the weights of the run's best step), so its "
                          f"provenance is unknown; kept as {aside} and the next evaluation writes a new best"]
        assert after["best"]["step"] == 31 and (ck / "best.safetensors").read_bytes() != old


@pytest.mark.parametrize("locked", ["", "checkpoints", "metrics.jsonl"])
def test_a_run_this_user_cannot_write_is_refused_before_resuming_and_nothing_changes(run30, capsys, monkeypatch,
                                                                                     locked):
    import os

    before = _snapshot(run30)
    capsys.readouterr()
    real = os.access
    # the tests run as root, which chmod cannot stop: os.access answers as for a user without write permission
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: not (mode & os.W_OK and str(p) == str(run30 / locked).
                                                                   rstrip("/")) and real(p, mode, **kw))
    assert main(["train", "--resume", str(run30), "--train.max_iters", "40"]) == 2
    out, err = capsys.readouterr()
    where = str(run30 / locked).rstrip("/")
    what = "the run folder" if not locked else "the run's"
    assert err == (f"depthlab: error: cannot write into {what} {where}: Permission denied; make the run writable "
                   f"(chmod -R u+w {run30}) or train into another --train.out_dir (a --resume can continue a "
                   "writable copy of it)\n")
    assert "resuming" not in out + err and _snapshot(run30) == before


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
@pytest.mark.parametrize("locked", ["", "checkpoints", "metrics.jsonl"])
def test_a_run_this_user_cannot_write_with_nothing_to_train_says_what_a_writable_one_says(run30, capsys, monkeypatch,
                                                                                         locked):
    """A resume of a read-only run already at its end writes nothing: it was refused for being read-only ("cannot
    write into the run folder") instead of saying "nothing to train", its notices included, as a writable one does."""
    import os

    args = ["train", "--resume", str(run30), "--model.dropout", "0.1"]  # a changed field: said only if it trains
    before = _snapshot(run30)
    capsys.readouterr()
    real = os.access
    with monkeypatch.context() as m:  # as above: os.access answers as for a user without write permission
        m.setattr(os, "access", lambda p, mode, **kw: not (mode & os.W_OK and str(p) == str(run30 / locked).
                                                             rstrip("/")) and real(p, mode, **kw))
        assert main(args) == 0
        read_only = capsys.readouterr()
    # no "model.dropout 0.0 -> 0.1: ... changes from the next step": no step follows in this session
    assert read_only.err == ("depthlab: nothing to train: the run is at step 30 and train.max_iters is 30 (a "
                             "total); pass a larger --train.max_iters to extend it. Nothing was changed.\n")
    assert _snapshot(run30) == before
    assert main(args) == 0  # the same run, writable: the same lines
    assert capsys.readouterr() == read_only and _snapshot(run30) == before
    assert main([*args, "--train.max_iters", "31"]) == 0  # a session that trains says the change
    assert "depthlab: resume: model.dropout 0.0 -> 0.1: the regularisation changes from the next step\n" in \
        capsys.readouterr().err


def test_temporary_files_of_writes_cut_off_are_removed_on_resume_and_nothing_else(run30, capsys):
    """A kill inside an atomic write left its ``.NAME.XXXXXXXX.tmp`` in the run for good; a resume that trains removes
    those older than its process in the run folder and checkpoints/, and says so; any other name stays."""
    import os
    import time

    ck = run30 / "checkpoints"
    stale = [run30 / ".config.json.k3_9a0zq.tmp", ck / ".step-000040.safetensors.a1b2c3d4.tmp",
             ck / ".manifest.json.zz_00x1y.tmp"]
    kept = [run30 / ".notes.txt.a1b2c3d4.tmp", run30 / ".config.json.a1b2c3.tmp", run30 / ".config.json.A1B2C3D4.tmp",
            run30 / "config.json.a1b2c3d4.tmp", run30 / ".config.json.a1b2c3d4.tmp.bak", ck / ".best.json.a1b2c3d4.tmp",
            run30 / "tb" / ".config.json.a1b2c3d4.tmp", ck / ".step-000040.state.pt.q1w2e3r4.tmp"]  # the last: new
    (run30 / "tb").mkdir()
    old = time.time() - 3600  # before this process started
    for p in stale + kept:
        p.write_bytes(b"cut")
        if p != kept[-1]:
            os.utime(p, (old, old))
    link = run30 / ".summary.json.l1n2k3s4.tmp"
    link.symlink_to(stale[0])  # a link is never depthlab's own
    os.utime(link, (old, old), follow_symlinks=False)
    capsys.readouterr()
    assert main(["train", "--resume", str(run30), "--train.max_iters", "40"]) == 0
    err = capsys.readouterr().err
    assert (f"depthlab: resume: removed 3 temporary files of depthlab's writes cut off mid-way (a kill?) from {run30} "
            f"and {ck}: .config.json.k3_9a0zq.tmp, .manifest.json.zz_00x1y.tmp, .step-000040.safetensors.a1b2c3d4.tmp\n"
            ) in err and err.count("temporary file") == 1, err
    assert [p.exists() for p in stale] == [False] * 3 and all(p.read_bytes() == b"cut" for p in kept)
    assert link.is_symlink() and _steps(run30) == [30, 40]


def test_step_files_the_manifest_does_not_list_are_set_aside_with_one_warning_never_used_or_replaced(run30, capsys):
    """kill -9 between a checkpoint's rename and the manifest's (or between the manifest and a rotation's delete)
    leaves step files manifest.json does not list: they were kept silently, and the session's own step-40 checkpoint
    replaced the unlisted step-40 files, perhaps the only copy of that later step."""
    ckdir = run30 / "checkpoints"
    later = {f"step-000040.{x}": (ckdir / f"step-000030.{x}").read_bytes() + b"later" for x in ("safetensors",
                                                                                                   "state.pt")}
    for name, data in {**later, "step-000005.state.pt": b"stale", "step-000040.state.pt.unlisted": b"earlier"}.items():
        (ckdir / name).write_bytes(data)
    assert main(["train", "--resume", str(run30), "--train.max_iters", "40"]) == 0
    err = capsys.readouterr().err
    assert err.count("not listed in manifest.json") == 1 and (
        f"depthlab: warning: 3 step checkpoint files in {ckdir} were not listed in manifest.json (a checkpoint write "
        "or rotation cut short, by a kill?): no sha256 vouches for them, so this run neither resumes from nor counts "
        "them; renamed to step-000005.state.pt.unlisted, step-000040.safetensors.unlisted, "
        "step-000040.state.pt.unlisted-2, so that no checkpoint of this session replaces them and no rotation "
        "deletes them: delete them when you no longer need them\n") in err, err
    assert (ckdir / "step-000040.safetensors.unlisted").read_bytes() == later["step-000040.safetensors"]
    assert (ckdir / "step-000040.state.pt.unlisted-2").read_bytes() == later["step-000040.state.pt"]
    assert (ckdir / "step-000040.state.pt.unlisted").read_bytes() == b"earlier"
    assert (ckdir / "step-000005.state.pt.unlisted").read_bytes() == b"stale"
    assert _steps(run30) == [30, 40]  # resumed from 30, the listed one; the session wrote its own step 40
    assert (ckdir / "step-000040.safetensors").read_bytes() != later["step-000040.safetensors"]
    assert not (ckdir / "step-000005.state.pt").exists()
    from depthlab.rundir import foreign_files

    assert foreign_files(run30) == []  # depthlab's own names: --overwrite does not call them the user's
    assert main(["train", "--resume", str(run30), "--train.max_iters", "50"]) == 0  # said once, not again
    assert "not listed in manifest.json" not in capsys.readouterr().err


def test_a_first_checkpoint_cut_short_before_its_manifest_is_set_aside_when_the_run_starts_again(run30, capsys):
    """kill -9 inside the first checkpoint's write: one step file and no manifest.json; the run starts again from
    step 0 and, before this fix, replaced that file at step 10 without a word."""
    ckdir = run30 / "checkpoints"
    orphan = ckdir / "step-000010.safetensors"
    (ckdir / "step-000030.safetensors").rename(orphan)  # rotation removed step 10's own; any weights will do
    data = orphan.read_bytes()
    for p in ckdir.iterdir():
        if p != orphan:
            p.unlink()
    (run30 / "summary.json").unlink()
    rundir_records = [r for r in (run30 / "metrics.jsonl").read_text().splitlines() if json.loads(r)["step"] < 10]
    (run30 / "metrics.jsonl").write_text("".join(r + "\n" for r in rundir_records))
    assert main(["train", "--resume", str(run30), "--train.max_iters", "10"]) == 0
    out, err = capsys.readouterr()
    assert f"no checkpoint in {run30} yet; starting it again from step 0" in out + err
    assert (f"depthlab: warning: 1 step checkpoint file in {ckdir} was not listed in manifest.json (a checkpoint "
            "write or rotation cut short, by a kill?): no sha256 vouches for it, so this run neither resumes from nor "
            "counts it; renamed to step-000010.safetensors.unlisted, so that no checkpoint of this session replaces "
            "it and no rotation deletes it: delete it when you no longer need it\n") in err, err
    assert (ckdir / "step-000010.safetensors.unlisted").read_bytes() == data and _steps(run30) == [0, 10]
