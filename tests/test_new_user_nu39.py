"""A new user's findings (round nu39): a sweep folder given to diagnose/context/layers is named as one, with a run
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
    for command in ("diagnose", "report"):
        assert main([command, str(tmp_path / "E")]) == 2
        assert capsys.readouterr().err == (f"depthlab: error: {tmp_path / 'E'} is not a depthlab run directory (no "
                                           "config.json or metrics.jsonl); give the out_dir of a depthlab train run\n")
