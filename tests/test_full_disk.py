"""A full disk (ENOSPC; EDQUOT, a used-up quota) while train, export or a sweep writes: one line naming the device's
folder, the file and the fix, as a new user found on a small tmpfs. It was `OSError: [Errno 28] No space left on
device (check the paths given and their permissions/encoding)` (no file, a wrong hint) for train; `unexpected
SafetensorError ... please report it`, exit 1, for export; and for a sweep `worker process exited with code 0 without a
result`, `warning: could not write results: OSError ...`, then exit 2 where README says failed runs exit 1.

The disk fills where the system reports it: the fsync of the temporary file :func:`depthlab.rundir.atomic_write`
writes (a write() on a full disk names no file, as this one names none)."""

import errno
import os
from pathlib import Path

import pytest
from conftest import TINY_SWEEP, TINY_TEXT, assert_clean_error, read_sweep_rows, tiny_cli_args
from depthlab.cli import main
from depthlab.errors import no_space_words
from depthlab.sweep.common import clip_message

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names a file descriptor via /proc")


def _enospc(filename=None) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), *([filename] if filename else []))


@pytest.fixture
def full_at(monkeypatch):
    """A list of file names: atomic_write's write of any of them fails as on a full disk (ENOSPC, no file named)."""
    names: list[str] = []
    real = os.fsync

    def fsync(fd):
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))  # atomic_write's temp file: .NAME.XXXX.tmp
        if any(name.startswith(f".{n}.") for n in names):
            raise _enospc()
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return names


def test_no_space_words_name_the_device_the_file_and_the_fix():
    assert no_space_words(_enospc("/d/run/metrics.jsonl"), "/d/run") == \
        "no space left on the device holding /d/run while writing /d/run/metrics.jsonl; free space there"
    assert no_space_words(_enospc(), None, "/d/out/x.json") == \
        "no space left on the device holding /d/out while writing /d/out/x.json; free space there"
    quota = OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), "/d/run/a.pt")
    assert no_space_words(quota, "/d/run") == ("this user's disk quota is used up on the device holding /d/run while "
                                               "writing /d/run/a.pt; free space in this user's quota (or ask for a "
                                               "larger one)")


# ----------------------------------------------------------------------------- train
@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_train_on_a_full_disk_names_the_file_and_resumes_from_the_checkpoint(tmp_path, capsys, full_at):
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    run = tmp_path / "run"
    full_at.append("step-000010.safetensors")  # the evaluation at step 0 wrote its checkpoint; step 10's fails
    rc = main(["train", *tiny_cli_args(tmp_path / "t.txt", run, train__max_iters=20, train__eval_interval=10,
                                                       train__warmup_iters=2)])
    err = capsys.readouterr().err
    assert_clean_error(rc, err)
    assert err == (f"depthlab: error: no space left on the device holding {run} while writing "
                   f"{run}/checkpoints/step-000010.safetensors; free space there and resume with depthlab train "
                   f"--resume {run} (it continues from its checkpoint of step 0), or train again with another "
                   "--train.out_dir on a disk with room\n")
    full_at.clear()  # space freed: the resume it names works
    assert main(["train", "--resume", str(run)]) == 0
    assert "resuming" in capsys.readouterr().out
    assert (run / "summary.json").is_file()


def test_train_on_a_full_disk_before_any_checkpoint_says_the_resume_starts_at_step_0(tmp_path, capsys, full_at):
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    run = tmp_path / "run"
    full_at.append("step-000000.safetensors")
    rc = main(["train", *tiny_cli_args(tmp_path / "t.txt", run, train__max_iters=10, train__eval_interval=10,
                                                       train__warmup_iters=2)])
    err = capsys.readouterr().err
    assert_clean_error(rc, err)
    assert err == (f"depthlab: error: no space left on the device holding {run} while writing "
                   f"{run}/checkpoints/step-000000.safetensors; free space there and run depthlab train --resume "
                   f"{run} (no checkpoint was written yet: it starts from step 0), or train again with another "
                   "--train.out_dir on a disk with room\n")
    full_at.clear()
    assert main(["train", "--resume", str(run)]) == 0
    assert "starting it again from step 0" in capsys.readouterr().out


def test_train_whose_first_write_finds_no_space_leaves_no_folder_and_says_run_again(tmp_path, capsys, monkeypatch):
    """RUN/.lock, the run's first write: was 'make the run writable (chmod -R u+w RUN)', for a full disk."""
    (tmp_path / "t.txt").write_text(TINY_TEXT)
    run = tmp_path / "run"
    real = Path.write_text

    def write_text(self, *a, **k):  # a write() on a full disk: no file named
        if self.name == ".lock":
            raise _enospc()
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", write_text)
    argv = ["train", *tiny_cli_args(tmp_path / "t.txt", run, train__max_iters=2, train__warmup_iters=1)]
    rc = main(argv)
    err = capsys.readouterr().err
    assert_clean_error(rc, err)
    assert err == (f"depthlab: error: no space left on the device holding {run} while writing {run}/.lock; free "
                   "space there (or choose another --train.out_dir) and run the command again\n")
    assert not run.exists()
    monkeypatch.setattr(Path, "write_text", real)  # space freed: the same command trains
    assert main(argv) == 0


def test_another_command_on_a_full_disk_names_the_file_not_the_paths_given(monkeypatch, capsys, tmp_path):
    import depthlab.cli as cli

    def full(*_a, **_k):
        raise _enospc(str(tmp_path / "out" / "samples.txt"))

    monkeypatch.setattr(cli, "dispatch", full)
    assert main(["sample", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"depthlab: error: no space left on the device holding {tmp_path / 'out'} "
                                       f"while writing {tmp_path / 'out' / 'samples.txt'}; free space there (or write "
                                       "to another disk) and run the command again\n")


# ----------------------------------------------------------------------------- export
@pytest.fixture(scope="module")
def exported_run(tmp_path_factory):
    from conftest import trained_tiny_run

    return trained_tiny_run(tmp_path_factory, "fulldisk", TINY_TEXT, steps=4)


def test_export_whose_weights_find_no_space_is_one_line_and_leaves_nothing(exported_run, tmp_path, capsys,
                                                                          monkeypatch):
    pytest.importorskip("transformers")
    import transformers.modeling_utils as mu
    from safetensors import SafetensorError

    text = "Error while serializing: I/O error: No space left on device (os error 28)"

    def full(*_a, **_k):  # safetensors' own error type, as its Rust writer raises it on a full disk
        raise SafetensorError(text)

    monkeypatch.setattr(mu, "safe_save_file", full)
    where = tmp_path / "disk"
    where.mkdir()
    out = where / "hf"
    rc = main(["export", str(exported_run), str(out)])
    err = capsys.readouterr().err
    assert_clean_error(rc, err)
    assert err == (f"depthlab: error: export: writing {out}/model.safetensors failed (SafetensorError: {text}); "
                   f"nothing of {out} was left behind; make room on the disk holding {where} (or make that folder "
                   "writable), or choose another OUT_DIR, and export again\n")
    assert list(where.iterdir()) == []  # nothing partial: no OUT_DIR, no temporary folder


def test_export_whose_tokenizer_finds_no_space_names_it_and_keeps_the_earlier_export(exported_run, tmp_path, capsys,
                                                                                     monkeypatch):
    pytest.importorskip("transformers")
    out = tmp_path / "hf"
    assert main(["export", str(exported_run), str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    real = Path.write_text

    def write_text(self, *a, **k):  # a write() on a full disk: no file named
        if self.name == "tokenizer.json":
            raise _enospc()
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", write_text)
    rc = main(["export", str(exported_run), str(out), "--overwrite"])
    err = capsys.readouterr().err
    assert_clean_error(rc, err)
    assert err == (f"depthlab: error: export: no space left on the device holding {tmp_path} while writing "
                   f"{out}/tokenizer.json; free space there (or choose another OUT_DIR) and export again; nothing of "
                   f"{out} was left behind (the earlier export there is kept)\n")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


# ----------------------------------------------------------------------------- sweep
def _sweep_argv(text: Path, sw: Path) -> list[str]:
    base = [a for k, v in TINY_SWEEP.items() if k != "model.n_layer" for a in (f"--{k}", str(v))]
    return ["sweep", "--grid", "model.n_layer=[1,2]", "--data.path", str(text), *base, "--workers", "1",
            "--threads", "1", "--out_dir", str(sw)]


@pytest.mark.slow  # over a second: the fast tier stays under 3 min
def test_a_sweep_on_a_full_disk_exits_1_naming_its_runs_and_the_files(tmp_path, capsys, full_at):
    """README: a run that gave no result ends the command with exit status 1 and a line on stderr naming it."""
    text, sw = tmp_path / "t.txt", tmp_path / "sw"
    text.write_text(TINY_TEXT)
    full_at.extend(["step-000000.safetensors", "sweep_status.json", "results.csv"])
    rc = main(_sweep_argv(text, sw))
    out, err = capsys.readouterr()
    assert rc == 1, err
    runs = [line for line in out.splitlines() if line.startswith("[")]
    assert len(runs) == 2
    for line in runs:  # the run's message, clipped to the progress line's length
        run = sw / "runs" / line[line.index("]") + 2:line.index(":")]
        said = (f"no space left on the device holding {run} while writing {run}/checkpoints/step-000000.safetensors; "
                "free space there and run the same sweep command again (it continues this run from its last "
                f"checkpoint, or from step 0 if it has none); sweep_status.json not written: no space left on the "
                f"device holding {run} while writing {run}/sweep_status.json; free space there")
        assert line.endswith(f" ({clip_message(said)})"), line
        assert f"{run.name}: {said}" in out.splitlines()  # results.md, which would hold it, was not written
    # s56: the sweep's warnings on stderr, as "depthlab: warning: ..." (they went to stdout, bare)
    assert out.splitlines()[-1].endswith(f"0 ok, 2 not ok (in {sw}/runs; results.csv was not written)")
    assert err.splitlines() == [
        f"depthlab: warning: could not write the sweep's results (results.csv, results.md): no space left on the "
        f"device holding {sw} while writing {sw}/results.csv; free space there and run the same command again to "
        "write them (it skips the finished runs)",
        f"depthlab: warning: could not write the sweep's report: no space left on the device holding {sw} while "
        f"writing {sw}/results.csv; free space there and run the same command again",
        "depthlab: 2 of 2 runs gave no result: n_layer-1 (unfinished), n_layer-2 (unfinished) (their lines above "
        "say why; results.csv could not be written); exit status 1"]
    assert not (sw / "results.csv").exists()
    full_at.clear()  # space freed: the same command finishes the runs and writes the results
    assert main(_sweep_argv(text, sw)) == 0
    assert [r["status"] for r in read_sweep_rows(sw)] == ["ok", "ok"]


@pytest.mark.slow  # over a second: the fast tier stays under 3 min
def test_a_worker_whose_status_file_cannot_be_written_still_gives_its_result(tmp_path):
    """The worker's result comes back to the sweep even where its sweep_status.json cannot be written (was: 'worker
    process exited with code 0 without a result', the run's own failure lost)."""
    from depthlab.config import RunConfig
    from depthlab.sweep import local

    run = tmp_path / "r"
    (run / "sweep_status.json").mkdir(parents=True)  # the status file cannot be written (a folder in its place)
    config = RunConfig().to_dict()
    config["data"]["path"] = str(tmp_path / "missing.txt")
    config["train"]["out_dir"] = str(run)
    said = []
    res = local.run_jobs([{"name": "r", "config": config, "threads": 1}], workers=2, log=said.append, total=1,
                         n_done=0)
    assert len(res) == 1 and res[0]["status"] == "error"
    message = res[0]["message"]
    assert "missing.txt" in message and "without a result" not in message
    assert message.endswith(f"; sweep_status.json not written: {os.strerror(errno.EISDIR)} ({run}/sweep_status.json)")
