import dataclasses

import pytest
import yaml

from depthlab.cli import list_presets, preset_path
from depthlab.config import ModelConfig, RunConfig, TrainConfig

from conftest import assert_clean_error, run_cli


# What each preset promises (its first comment line / the README), written out independently of the YAML.
EXPECTED = {
    "default": dict(model=dict(n_layer=4, n_head=4, n_embd=128, block_size=128, dropout=0.0, position="rope"),
                    train=dict(batch_size=16, max_iters=5000, max_time=270.0, fit_to_time=True, optimizer="auto",
                               learning_rate=3e-3, weight_decay=0.3,
                               min_lr=1e-4, warmup_iters=50, eval_interval=500, dtype="auto")),
    "fast-cpu": dict(model=dict(n_layer=2, n_head=4, n_embd=128, block_size=64, dropout=0.0),
                     train=dict(batch_size=32, max_iters=400, max_time=0.0, optimizer="muon", learning_rate=4e-3,
                                muon_lr=1e-2, min_lr=2e-4, weight_decay=0.1,
                                warmup_iters=50, eval_interval=50, eval_iters=10, target_val_loss=1.88,
                                grad_log_interval=100, probe_interval=0, dtype="auto")),
    "nanogpt-cpu": dict(model=dict(n_layer=4, n_head=4, n_embd=128, block_size=64, dropout=0.0, position="learned"),
                        train=dict(batch_size=12, max_iters=2000, max_time=0.0, optimizer="adamw",
                                   learning_rate=1e-3, min_lr=1e-4, weight_decay=0.1,
                                   warmup_iters=100, lr_decay_iters=2000, eval_interval=250, eval_iters=20,
                                   dtype="float32")),
    "nanogpt-gpu": dict(model=dict(n_layer=6, n_head=6, n_embd=384, block_size=256, dropout=0.2, position="learned"),
                        train=dict(batch_size=64, max_iters=5000, max_time=0.0, optimizer="adamw",
                                   learning_rate=1e-3, min_lr=1e-4, weight_decay=0.1,
                                   warmup_iters=100, beta2=0.99, eval_interval=250, eval_iters=200,
                                   dtype="auto")),
}


def loaded_preset(capsys, name: str) -> RunConfig:
    """The RunConfig `depthlab train --preset NAME` resolves to (via --print_config, then validated)."""
    with pytest.raises(SystemExit) as e:
        from depthlab.cli import main

        main(["train", "--preset", name, "--print_config"])
    assert e.value.code in (0, None)
    d = yaml.safe_load(capsys.readouterr().out)
    return RunConfig.from_dict({k: d[k] for k in ("data", "model", "train")})


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_presets_listed_and_valid(capsys):
    names = list_presets()
    assert set(names) == set(EXPECTED)
    assert all(names[n] for n in names)  # each has a one-line description
    defaults = RunConfig.from_dict({})
    for name, want in EXPECTED.items():
        cfg = loaded_preset(capsys, name)
        assert cfg.data == defaults.data, name  # no preset changes the data section
        for section in ("model", "train"):
            got, default = getattr(cfg, section), getattr(defaults, section)
            for f in dataclasses.fields(got):
                expected = want[section].get(f.name, getattr(default, f.name))
                assert getattr(got, f.name) == expected, (name, f"{section}.{f.name}")


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


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_section_file_gives_its_fields_in_its_place_and_bad_ones_are_one_line(tmp_path, capsys):
    """``--model FILE`` (listed by --help as jsonargparse's group config) was refused as 'unknown key __path__'."""
    from depthlab.cli import main

    m = tmp_path / "m.yaml"
    m.write_text("n_layer: 2\nn_embd: 32\nn_head: 2\n")
    wrapped = tmp_path / "w.yaml"
    wrapped.write_text("model:\n  n_layer: 3\n")

    def printed(*args):
        with pytest.raises(SystemExit):
            main(["train", *args, "--print_config"])
        return yaml.safe_load(capsys.readouterr().out)

    c = printed("--model", str(m))
    assert (c["model"]["n_layer"], c["model"]["n_embd"], c["model"]["n_head"]) == (2, 32, 2)
    assert printed(f"--model={wrapped}")["model"]["n_layer"] == 3  # the section's name repeated in the file
    assert printed("--model", str(wrapped), "--model.n_layer", "5")["model"]["n_layer"] == 5  # later flag wins
    assert printed("--model.n_layer", "5", "--model", str(wrapped))["model"]["n_layer"] == 3  # in its place
    t = tmp_path / "t.yaml"
    t.write_text("max_iters: 7\n")
    assert printed("--train", str(t))["train"]["max_iters"] == 7
    (tmp_path / "list.yaml").write_text("- 1\n")
    other = tmp_path / "other.yaml"
    other.write_text("data:\n  path: x.txt\n")
    extra = tmp_path / "extra.yaml"
    extra.write_text("model:\n  n_layer: 2\nn_embd: 32\n")
    for args, words in [(["--model", str(tmp_path / "nope.yaml")], "no such file"),
                        (["--model", str(tmp_path / "list.yaml")], "not a mapping of fields"),
                        (["--data"], "--data needs a file"), (["--model", str(tmp_path)], "is a folder, not a file"),
                        (["--model", str(other)], "holds a 'data:' section"),
                        (["--model", str(extra)], "holds a 'model:' section")]:
        assert main(["train", *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and "__path__" not in err, err


@pytest.mark.parametrize("command", ["train", "probe"])
def test_two_presets_are_refused_not_merged(capsys, command):
    """`--preset nanogpt-cpu --preset fast-cpu` gave fast-cpu's shape with nanogpt-cpu's learned positions (and the
    reverse a 'nanoGPT' run stopping at fast-cpu's target_val_loss): a recipe that is neither."""
    rc, out, err = run_cli(capsys, command, "--preset", "nanogpt-cpu", "--preset=fast-cpu", "--print_config")
    assert_clean_error(rc, err, "--preset given twice (nanogpt-cpu, then fast-cpu): a preset is a whole recipe",
                       "keep one --preset")
    assert out == ""
