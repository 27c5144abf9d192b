import dataclasses

import pytest
import yaml

from depthlab.cli import list_presets, preset_path
from depthlab.config import ModelConfig, RunConfig, TrainConfig


def test_presets_listed_and_valid():
    names = list_presets()
    assert {"default", "fast-cpu", "nanogpt-cpu", "nanogpt-gpu"} <= set(names)
    for name in names:
        cfg = RunConfig.from_dict(yaml.safe_load(preset_path(name).read_text()))
        assert cfg.model.n_embd % cfg.model.n_head == 0


def test_default_preset_is_the_zero_argument_recipe():
    d = yaml.safe_load(preset_path("default").read_text())
    m, t = ModelConfig(), TrainConfig()
    for k, v in d["model"].items():
        assert getattr(m, k) == v, k
    for k, v in d["train"].items():
        assert getattr(t, k) == v, k


def test_preset_then_flags_override(capsys):
    from depthlab.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--preset", "nanogpt-cpu", "--model.n_layer", "2", "--print_config"])
    out = capsys.readouterr().out
    cfg = yaml.safe_load(out)
    assert cfg["model"]["n_layer"] == 2 and cfg["model"]["n_embd"] == 128 and cfg["train"]["batch_size"] == 12
