"""Issue 23's writes audit: no command replaces or deletes what depthlab did not write, and every
file and folder it writes has the mode ``open()`` / ``mkdir`` give under the umask.

One test per kind of defect found (the table is in the audit note): a refusal whose advice was
itself refused, user files inside a run's folders deleted by ``--overwrite``, a symbolic link,
an ``--overwrite`` whose start failed after deleting the old run, a PNG of the user's replaced
by ``probe``, and modes (0700 / 0600 from ``mkdtemp`` and libraries, an existing file's mode lost).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

import pytest

from conftest import QUIET, TINY_TEXT, cli_err, run_cli, tiny_config
from depthlab import rundir
from depthlab.errors import DepthlabError
from depthlab.trainer import train

TINY = dict(model=dict(n_layer=2, n_head=2, n_embd=16, block_size=16), train=dict(max_iters=4, eval_interval=2))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("c") / "t.txt"
    p.write_text(TINY_TEXT, encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def made_run(tmp_path_factory, corpus):
    """A finished tiny run (copied by each test that changes it)."""
    return train(tiny_config(tmp_path_factory.mktemp("r") / "run", corpus, **TINY), **QUIET)


def _flags(corpus, out, *more):
    return ["train", "--data.path", str(corpus), "--model.n_layer", "2", "--model.n_head", "2", "--model.n_embd",
            "16", "--model.block_size", "16", "--train.batch_size", "4", "--train.max_iters", "4",
            "--train.eval_interval", "2", "--train.eval_iters", "1", "--train.tensorboard", "false",
            "--train.max_time", "0", "--train.out_dir", str(out), *more]


def _tree(d: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``d`` (what a user had there)."""
    return {p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(d).rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------- advice that works
def test_a_folder_that_is_no_run_is_refused_with_a_fix_that_works(tmp_path, corpus, capsys):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("mine")
    err = cli_err(capsys, *_flags(corpus, notes))
    # it used to suggest --resume and --overwrite, and each was then refused for this folder
    assert "not a depthlab run directory" in err and "another --train.out_dir" in err
    assert "--resume" not in err and "--overwrite" not in err
    cli_err(capsys, *_flags(corpus, notes, "--overwrite"))
    assert _tree(notes) == {"a.txt": hashlib.sha256(b"mine").hexdigest()}


def test_export_into_a_folder_that_is_no_export_names_a_fix_that_works(made_run, tmp_path, capsys):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "config.json").write_text("{}")  # an export's file name, beside one an export never has
    (notes / "mine.txt").write_text("mine")
    err = cli_err(capsys, "export", str(made_run), str(notes))
    assert "not an export directory" in err and "mine.txt" in err and "--overwrite" not in err
    assert sorted(_tree(notes)) == ["config.json", "mine.txt"]


# ----------------------------------------------------------------------------- what --overwrite deletes
@pytest.mark.parametrize("extra", ["plots/my_figure.svg", "plots/mine.png", "plots/loss.png", "checkpoints/notes.txt",
                                   "tb/readme.md", "source/__pycache__/keep.txt"])
def test_overwrite_keeps_a_run_holding_a_user_file_in_its_folders(made_run, tmp_path, corpus, capsys, extra):
    run = tmp_path / "run"
    shutil.copytree(made_run, run)
    (run / extra).parent.mkdir(parents=True, exist_ok=True)
    (run / extra).write_text("the user's")
    before = _tree(run)
    err = cli_err(capsys, *_flags(corpus, run, "--overwrite"))
    assert extra in err and "move them out" in err
    assert _tree(run) == before
    assert "--overwrite" not in cli_err(capsys, *_flags(corpus, run))  # not offered where it is refused


def test_the_source_copy_a_start_killed_before_config_json_leaves_can_be_overwritten(tmp_path, corpus, capsys):
    """A new user's pass: a model.source run killed in its first second left only source/ (the model's copy and
    ORIGIN); the folder was then "not a depthlab run directory", refused by train, --resume and --overwrite alike."""
    run = tmp_path / "run"
    (run / "source").mkdir(parents=True)
    (run / "source" / "mine.py").write_text("# the run's copy\n")
    (run / "source" / "ORIGIN").write_text(str(tmp_path))
    err = cli_err(capsys, *_flags(corpus, run))
    assert "holds only source/" in err and "use --overwrite to replace it" in err
    assert _tree(run) == {"source/mine.py": hashlib.sha256(b"# the run's copy\n").hexdigest(),
                          "source/ORIGIN": hashlib.sha256(str(tmp_path).encode()).hexdigest()}
    assert run_cli(capsys, *_flags(corpus, run, "--overwrite"))[0] == 0
    assert (run / "config.json").is_file() and not (run / "source").exists()  # the leftover copy was replaced
    mine = tmp_path / "mine"  # a user's own source/ of .py files (no ORIGIN) is not depthlab's: never replaced
    (mine / "source").mkdir(parents=True)
    (mine / "source" / "model.py").write_text("# the user's model\n")
    assert "is not a depthlab run directory" in cli_err(capsys, *_flags(corpus, mine, "--overwrite"))
    assert (mine / "source" / "model.py").read_text() == "# the user's model\n"


def test_overwrite_of_a_symlinked_run_is_refused_in_one_line(made_run, tmp_path, corpus, capsys):
    run = tmp_path / "run"
    shutil.copytree(made_run, run)
    link = tmp_path / "link"
    link.symlink_to(run, target_is_directory=True)
    before = _tree(run)
    err = cli_err(capsys, *_flags(corpus, link, "--overwrite"))  # was: OSError: Cannot call rmtree on a symbolic link
    assert "symbolic link" in err and str(run.resolve()) in err
    assert link.is_symlink() and _tree(run) == before


def test_a_dangling_symlink_out_dir_is_named(tmp_path, corpus, capsys):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone", target_is_directory=True)
    err = cli_err(capsys, *_flags(corpus, link))  # was: "cannot create train.out_dir ...: File exists"
    assert "is a symbolic link to" in err and "gone" in err and "does not exist" in err
    assert link.is_symlink() and not (tmp_path / "gone").exists()


def test_overwrite_whose_start_fails_keeps_the_old_run(made_run, tmp_path, corpus, capsys):
    run = tmp_path / "run"
    shutil.copytree(made_run, run)
    before = _tree(run)
    # a --model.n_embd the --init-from weights do not fit: the start fails after the folder was prepared
    err = cli_err(capsys, *_flags(corpus, run, "--overwrite", "--init-from", str(made_run), "--model.n_embd", "32"))
    assert "do not fit" in err
    assert _tree(run) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no hidden folder left beside it
    rc, _, _ = run_cli(capsys, *_flags(corpus, run, "--overwrite"))
    assert rc == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert _tree(run) != before


def test_overwrite_of_a_run_that_cannot_move_is_one_line_and_leaves_no_folder(made_run, tmp_path, monkeypatch):
    import errno

    run = tmp_path / "run"
    shutil.copytree(made_run, run)
    before = _tree(run)

    def busy(src, dst):  # a run folder that is a mount point cannot be renamed
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))

    monkeypatch.setattr(rundir.os, "replace", busy)
    with pytest.raises(DepthlabError, match="delete the old run yourself or choose another --train.out_dir"):
        rundir.prepare_run_dir(run, overwrite=True)
    assert _tree(run) == before and sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_foreign_files_names_only_what_depthlab_did_not_write(made_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(made_run, run)
    assert rundir.foreign_files(run) == [] and rundir.is_pure_run_dir(run)
    (run / "checkpoints" / ".manifest.json.x1.tmp").write_bytes(b"")  # an atomic write a crash left: depthlab's
    (run / "source").mkdir()
    (run / "source" / "model.py").write_text("")
    (run / "source" / "ORIGIN").write_text("/x")
    assert rundir.foreign_files(run) == []
    (run / "plots").mkdir()
    text = b"Software\x00" + rundir.REPORT_SOFTWARE.encode()
    ours = (b"\x89PNG\r\n\x1a\n" + len(text).to_bytes(4, "big") + b"tEXt" + text + bytes(4)
            + bytes(4) + b"IEND" + bytes(4))
    for name in rundir.RUN_FIGURES:  # the figures depthlab report draws are its own ...
        (run / "plots" / f"{name}.png").write_bytes(ours)
    assert rundir.foreign_files(run) == []
    (run / "plots" / "mine.png").write_bytes(b"")  # ... any other PNG is the user's (was: deleted by --overwrite)
    (run / "plots" / "loss.png").write_text("mine")  # ... and so is a file of a figure's name report did not write
    assert rundir.foreign_files(run) == ["plots/loss.png", "plots/mine.png"]
    shutil.rmtree(run / "plots")
    (run / "checkpoints" / "best.safetensors").unlink()
    (run / "checkpoints" / "best.safetensors").symlink_to(run / "config.json")
    (run / "plots").write_text("a file where depthlab makes a folder")
    assert rundir.foreign_files(run) == ["checkpoints/best.safetensors", "plots"]


def test_run_figures_names_every_figure_the_report_draws():
    from depthlab.report.plots import PLOTS

    assert sorted(PLOTS) == sorted(rundir.RUN_FIGURES)


# ----------------------------------------------------------------------------- links and the user's files
def test_export_to_a_symlink_is_refused_and_the_link_kept(made_run, tmp_path, capsys):
    target = tmp_path / "big_disk"
    target.mkdir()
    link = tmp_path / "hf"
    link.symlink_to(target, target_is_directory=True)
    err = cli_err(capsys, "export", str(made_run), str(link))  # was: the link replaced by a new folder
    assert "symbolic link" in err and str(target.resolve()) in err
    assert link.is_symlink() and not any(target.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big_disk", "hf"]


def test_atomic_write_refuses_a_symlink_and_keeps_its_target(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text("theirs")
    link = tmp_path / "summary.json"
    link.symlink_to(target)
    with pytest.raises(DepthlabError, match="symbolic link"):
        rundir.write_json(link, {"a": 1})
    assert link.is_symlink() and target.read_text() == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.json", "summary.json"]  # no temp file left


def _probe_args(corpus):
    return ["probe", "--data.path", str(corpus), "--model.n_layer", "2", "--model.n_head", "2", "--model.n_embd",
            "16", "--model.block_size", "16", "--batches", "1", "--probe_batch_size", "2"]


def test_probe_refuses_to_replace_a_png_it_did_not_write(tmp_path, corpus, capsys):
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\n the user's picture")
    err = cli_err(capsys, *_probe_args(corpus), "--out", str(photo))  # was: overwritten with the probe figure
    assert "not written by depthlab probe" in err and "another --out" in err
    assert photo.read_bytes() == b"\x89PNG\r\n\x1a\n the user's picture"


@pytest.mark.slow  # two probes with their figures (~2 s)
def test_probe_replaces_its_own_png(tmp_path, corpus, capsys):
    args = _probe_args(corpus)
    own = tmp_path / "p.png"
    assert run_cli(capsys, *args, "--out", str(own))[0] == 0
    first = own.stat().st_mtime_ns
    assert run_cli(capsys, *args, "--out", str(own))[0] == 0  # its own file: replaced again
    assert own.stat().st_mtime_ns >= first and own.read_bytes().startswith(b"\x89PNG")


# ----------------------------------------------------------------------------- modes
@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def _modes(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


@pytest.mark.slow  # loads transformers (2-4 s)
def test_every_written_file_and_folder_has_the_umask_mode(umask_027, tmp_path, corpus, capsys):
    pytest.importorskip("transformers")
    run, hf = tmp_path / "run", tmp_path / "hf"
    assert run_cli(capsys, *_flags(corpus, run, "--train.tensorboard", "true"))[0] == 0
    assert run_cli(capsys, "report", str(run))[0] == 0
    assert run_cli(capsys, "export", str(run), str(hf))[0] == 0
    assert run_cli(capsys, "export", str(run), str(hf), "--overwrite")[0] == 0
    modes = {**{f"run/{k}": v for k, v in _modes(run).items()}, **{f"hf/{k}": v for k, v in _modes(hf).items()}}
    want = {k: 0o750 if (tmp_path / k).is_dir() else 0o640 for k in modes}
    # the export folder was 0700 and its weights 0600
    assert {k: oct(v) for k, v in modes.items()} == {k: oct(v) for k, v in want.items()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "run"]  # no temp folder of the export left


def test_atomic_write_gives_a_new_file_the_umask_mode_and_keeps_an_existing_files(umask_027, tmp_path):
    new = tmp_path / "new.json"
    rundir.write_json(new, {})
    assert stat.S_IMODE(new.stat().st_mode) == 0o640
    private = tmp_path / "config.json"
    private.write_text("{}")
    private.chmod(0o600)  # the user made it private: a rewrite must not open it up again (open("w") keeps it)
    rundir.write_json(private, {"a": 1})
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and private.read_text().startswith("{")


def test_temp_folders_get_the_umask_mode(umask_027, tmp_path):
    tmp = rundir.make_temp_dir(tmp_path, ".x-")
    (tmp / "w").write_bytes(b"")
    (tmp / "w").chmod(0o600)
    rundir.normalise_modes(tmp)
    assert (stat.S_IMODE(tmp.stat().st_mode), stat.S_IMODE((tmp / "w").stat().st_mode)) == (0o750, 0o640)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="the umask is read from /proc on Linux")
def test_reading_the_umask_does_not_change_it(umask_027, tmp_path, monkeypatch):
    calls = []
    real = os.umask
    monkeypatch.setattr(os, "umask", lambda m: calls.append(m) or real(m))
    rundir.write_json(tmp_path / "a.json", {})
    # os.umask(0) for an instant gave files other threads created then mode 0666
    assert calls == [] and rundir.file_mode() == 0o640


def test_sweep_rerun_keeps_a_run_folder_holding_a_user_file(tmp_path):
    """sweep --rerun deletes a run folder to redo it: never one with a file depthlab did not write."""
    from depthlab.errors import DepthlabError
    from depthlab.sweep.common import clear_run_dir

    rd = tmp_path / "plain-L2-s1"
    rd.mkdir()
    (rd / "config.json").write_text("{}")
    (rd / "train.log").write_text("x")
    (rd / "my_notes.txt").write_text("mine")
    with pytest.raises(DepthlabError, match="my_notes.txt"):
        clear_run_dir(rd)
    assert (rd / "my_notes.txt").read_text() == "mine"
    (rd / "my_notes.txt").unlink()
    clear_run_dir(rd)  # depthlab's own files only: redone
    assert not rd.exists()
