"""Findings of the 2026-12-06 session (third)."""

import pytest

from conftest import cli_err


@pytest.mark.parametrize("command, mapping", [
    ("train", "{model: {n_layer: 4}}"), ("probe", "{model: {n_layer: 4}}"), ("sample", "{max_new_tokens: 200}"),
    ("layers", "{max_tokens: 10000}"), ("diagnose", "{threads: 2}"), ("export", "{checkpoint: best}"),
])
def test_a_missing_config_file_names_an_inline_mapping_the_command_takes(capsys, tmp_path, command, mapping):
    # sample, layers, diagnose and export take no train section: '{train: ...}' was named to all of them
    err = cli_err(capsys, command, "-c", str(tmp_path / "no.yaml"))
    assert f"inline YAML such as -c '{mapping}')" in err, err


def test_coordcheck_names_no_gpt_field_that_does_not_exist(capsys):
    # it said "depthlab's GPT takes foo as a model field: --axis model.foo=...", a field that does not exist
    err = cli_err(capsys, "coordcheck", "--axis", "model.init.foo=1,2")
    assert "no --model.source is given; depthlab's GPT has no numeric field foo (its numeric fields: model.block_size, " in err, err
    assert "model.foo" not in err, err
    err = cli_err(capsys, "coordcheck", "--axis", "model.init.n_layer=1,2")
    assert err.strip().endswith("depthlab's GPT takes n_layer as a model field: --axis model.n_layer=..."), err
