"""Findings of the 2026-12-06 session (second): a ``-c`` value that is inline YAML but no mapping is said as such
(it was "file not found"), and a command option's bad value given by a ``-c`` file or mapping is named as coming
from it (it named the flag, which was never typed)."""

import pytest

from conftest import TINY_TEXT, cli_err, trained_tiny_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return trained_tiny_run(tmp_path_factory, "s54", TINY_TEXT, steps=4)


@pytest.mark.parametrize("value, said", [
    ("[1,2]", "-c [1,2]: inline YAML is a list, not a mapping; give a mapping of sections such as -c "
              "'{train: {max_iters: 100}}' (or the path of a YAML config file)"),
    ("{train: {seed: 1}", "-c {train: {seed: 1}: inline YAML does not parse (check its braces, brackets and colons)"),
])
def test_inline_yaml_that_is_no_mapping_is_not_called_a_missing_file(capsys, value, said):
    err = cli_err(capsys, "train", "-c", value, "--print_config")
    assert said in err and "file not found" not in err, err


def test_a_plain_word_that_is_no_file_is_still_a_missing_file(capsys, tmp_path):
    err = cli_err(capsys, "train", "-c", str(tmp_path / "no.yaml"), "--print_config")
    assert "no.yaml: file not found" in err, err


@pytest.mark.parametrize("command, key", [("layers", "max_tokens"), ("context", "max_tokens"),
                                          ("sample", "max_new_tokens")])
def test_a_bad_value_from_an_inline_mapping_names_the_mapping_not_a_flag(capsys, run, command, key):
    err = cli_err(capsys, command, str(run), "-c", f"{{{key}: -1}}")
    assert err.startswith(f"depthlab: error: -c {{{key}: -1}}: {key} must be >= 0"), err
    assert "--" not in err.split(":")[2], err


def test_a_bad_value_from_a_file_names_the_file_and_a_typed_flag_wins(capsys, run, tmp_path):
    f = tmp_path / "l.yaml"
    f.write_text("max_tokens: -1\n")
    assert cli_err(capsys, "layers", str(run), "-c", str(f)).startswith(
        f"depthlab: error: {f}: max_tokens must be >= 0 (0 = every evaluation batch), got -1"), f
    err = cli_err(capsys, "layers", str(run), "-c", str(f), "--max-tokens", "-2")
    assert err.startswith("depthlab: error: --max-tokens must be >= 0 (0 = every evaluation batch), got -2"), err
