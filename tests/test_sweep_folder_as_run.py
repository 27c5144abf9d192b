"""A sweep folder given to diagnose/context/layers is named as one, with a run
to give instead, and the not-a-run line is the same for every command."""

import json

import pytest

from depthlab.cli import main


@pytest.fixture
def sweep_dir(tmp_path):
    """A sweep folder as ``depthlab sweep --out_dir SW`` leaves it: sweep.json and runs/NAME/config.json."""
    sw = tmp_path / "SW"
    for name in ("n_layer-2", "n_layer-1", "n_layer-3"):
        (sw / "runs" / name).mkdir(parents=True)
        (sw / "runs" / name / "config.json").write_text("{}")
    (sw / "sweep.json").write_text(json.dumps({"runs": []}))
    return sw


@pytest.mark.parametrize("command", ["diagnose", "context", "layers", "sample", "export"])
def test_a_sweep_folder_given_for_a_run_names_a_run_of_it(sweep_dir, capsys, command):
    # was: "SW is not a depthlab run directory (no config.json, metrics.jsonl); give the out_dir of a ... run"
    argv = [command, str(sweep_dir)] + ([str(sweep_dir.parent / "hf")] if command == "export" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (f"depthlab: error: {sweep_dir} is a sweep folder: give one of its runs, e.g. "
                   f"{sweep_dir / 'runs' / 'n_layer-1'} (3 runs)\n"), err
    assert not (sweep_dir.parent / "hf").exists()


def test_the_not_a_run_line_is_one_line_for_every_command(tmp_path, capsys):
    (tmp_path / "E").mkdir()
    assert main(["diagnose", str(tmp_path / "E")]) == 2
    assert capsys.readouterr().err == (f"depthlab: error: {tmp_path / 'E'} is not a depthlab run directory (no "
                                       "config.json or metrics.jsonl); give the out_dir of a depthlab train run\n")
    assert main(["report", str(tmp_path / "E")]) == 2  # report takes a sweep folder too: its line says so
    assert capsys.readouterr().err == (f"depthlab: error: report: {tmp_path / 'E'} is neither a depthlab run "
                                       "directory (no config.json or metrics.jsonl) nor a sweep folder (no "
                                       "sweep.json); give the out_dir of a depthlab train run or of a depthlab "
                                       "sweep\n")


PROBE = ["probe", "--model.n_layer", "1", "--model.n_embd", "32", "--model.n_head", "2", "--model.block_size", "16",
         "--batches", "1", "--probe_batch_size", "2"]


@pytest.mark.parametrize("name", ["afile", "notes.txt"])
def test_probe_out_an_existing_file_that_is_not_a_png_is_refused(tmp_path, capsys, name):
    # was: --out afile (an existing file, no extension) wrote afile.png beside it, while --out p4.txt was refused
    (tmp_path / name).write_text("mine")
    assert main([*PROBE, "--out", str(tmp_path / name)]) == 2
    assert capsys.readouterr().err == (f"depthlab: error: probe: --out {tmp_path / name} is an existing file, not a "
                                       ".png file name or a folder; give a .png file name or a folder\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [name] and (tmp_path / name).read_text() == "mine"


@pytest.mark.slow  # over a second: the fast tier stays under 3 min
def test_probe_out_a_new_name_without_extension_gets_png_as_its_help_says(tmp_path, capsys):
    assert main([*PROBE, "--out", str(tmp_path / "new")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"plot: {tmp_path / 'new.png'}"
    assert [p.name for p in tmp_path.iterdir()] == ["new.png"]
    with pytest.raises(SystemExit):
        main([*PROBE, "--help"])
    assert "a new name without an extension gets .png added" in " ".join(capsys.readouterr().out.split())
