"""depthlab probe with a plot it cannot write: refused before measuring when the folder takes no file, and when the
write fails only after measuring, the measurements are printed before the one error line, which names --out."""

import json
import tempfile
from pathlib import Path

import pytest

from conftest import assert_clean_error, run_cli

FLAGS = ["--model.n_layer", "1", "--model.n_embd", "16", "--model.n_head", "2", "--model.block_size", "8",
         "--batches", "1", "--probe_batch_size", "2"]


def _denied(folder):
    """tempfile.mkstemp that refuses ``folder`` as a folder the user cannot write does (we run as root here)."""
    real = tempfile.mkstemp

    def mkstemp(*a, **k):
        if k.get("dir") is not None and Path(k["dir"]).resolve() == folder.resolve():
            raise PermissionError(13, "Permission denied", f"{folder}/.probe-x.png.abc.tmp")
        return real(*a, **k)

    return mkstemp


def test_a_folder_the_user_cannot_write_is_refused_before_measuring(tmp_path, tiny_text_file, capsys, monkeypatch):
    """A new user's pass: "cannot write the plot probe-prenorm-layernorm-2.png: [Errno 13] Permission denied:
    '/.../.probe-....tmp'", after the measuring, not naming --out."""
    import depthlab.analytics.probe as probe

    ro = tmp_path / "ro"
    ro.mkdir()
    monkeypatch.chdir(ro)
    monkeypatch.setattr(tempfile, "mkstemp", _denied(ro))
    measured = []
    real = probe.probe_at_init
    monkeypatch.setattr(probe, "probe_at_init", lambda *a, **k: measured.append(1) or real(*a, **k))
    rc, out, err = run_cli(capsys, "probe", "--data.path", str(tiny_text_file), *FLAGS)
    assert_clean_error(rc, err, "cannot write the plot probe-prenorm-layernorm-1.png (Permission denied: "
                                f"{ro.resolve()}); give --out PATH in a folder you can write")
    assert ".tmp" not in err
    assert measured == [] and out == ""  # nothing measured: the refusal came first
    assert list(ro.iterdir()) == []


@pytest.mark.parametrize("as_json", [False, True])
def test_a_write_that_fails_after_measuring_prints_the_measurements_then_names_out(tmp_path, tiny_text_file, capsys,
                                                                                 monkeypatch, as_json):
    import depthlab.analytics.probe as probe

    monkeypatch.chdir(tmp_path)

    def fails(result, path):
        raise OSError(28, "No space left on device", f"{tmp_path}/.probe-x.png.abc.tmp")

    monkeypatch.setattr(probe, "plot_probe", fails)
    rc, out, err = run_cli(capsys, "probe", "--data.path", str(tiny_text_file), *FLAGS,
                           *(["--json"] if as_json else []))
    shown = "the JSON above, its plot null" if as_json else "printed above"
    assert_clean_error(rc, err, f"cannot write the plot probe-prenorm-layernorm-1.png (No space left on device: "
                                f"{tmp_path.resolve()}); give --out PATH in a folder you can write (the measurements "
                                f"are {shown})")
    if as_json:
        res = json.loads(out)
        assert res["plot"] is None and len(res["layers"]) == 1 and res["loss"] > 0 and res["summary"]
    else:
        lines = out.splitlines()
        assert lines[0].startswith("probe at init: prenorm + layernorm"), out
        assert any(s.startswith("- ") for s in lines) and not any(s.startswith("plot:") for s in lines), out
