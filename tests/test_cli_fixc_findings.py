"""New-user findings (fixC): notices off stdout, suggested commands that run, inline -c checked as a file is,
flags named as typed."""

import pytest
import yaml

from depthlab.cli import main


def print_config(capsys, *argv):
    """(stdout, stderr) of ``depthlab ARGV`` with ``--print_config`` in it (which exits 0)."""
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    assert e.value.code == 0
    cap = capsys.readouterr()
    return cap.out, cap.err


# ------------------------------------------------------------------------- 1: --print_config's stdout is the YAML
def test_preset_target_notice_goes_to_stderr_so_print_config_round_trips(tmp_path, capsys):
    other = tmp_path / "other.txt"
    other.write_text("hello world this is text. " * 400)
    for extra in (["--data.tokenizer", "bpe"], ["--data.path", str(other)]):
        out, err = print_config(capsys, "train", "--preset", "fast-cpu", *extra, "--print_config")
        assert "target is dropped" not in out
        assert err.startswith("depthlab: preset fast-cpu: its train.target_val_loss 1.88") and err.count("\n") == 1
        printed = yaml.safe_load(out)
        assert {"data", "model", "train"} <= set(printed) and printed["train"]["target_val_loss"] == 0
        my = tmp_path / "my.yaml"
        my.write_text(out)
        again, err = print_config(capsys, "train", "-c", str(my), "--print_config")
        assert err == "" and yaml.safe_load(again) == printed

