"""depthlab.config: valid values are taken as given, anything else is one DepthlabError naming the field;
schedules that contradict themselves are refused or warned about."""


import pytest
from hypothesis import given, settings, strategies as st

from depthlab.cli import main
from depthlab.config import DataConfig, ModelConfig, RunConfig, TrainConfig, schedule_warnings
from depthlab.errors import DepthlabError

from conftest import tiny_cli_args, tiny_model_config


_values = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=8), st.lists(st.integers(), max_size=3))


_keys = st.sampled_from(["n_layer", "n_head", "n_embd", "block_size", "dropout", "variant", "norm", "bias",
                         "batch_size", "max_iters", "learning_rate", "path", "encoding", "val_fraction",
                         "seed", "device", "dtype", "bogus", "eval_interval", "min_lr"])


@st.composite
def _valid_config(draw):
    """A dict of valid values for every config field (dependent fields drawn together)."""
    from depthlab.config import NORMS, VARIANTS

    n_head = draw(st.integers(1, 16))
    warmup = draw(st.integers(0, 1000))
    lr = draw(st.floats(1e-6, 1.0))
    position = draw(st.sampled_from(["learned", "rope"]))
    head_size = draw(st.integers(1, 64)) * (2 if position == "rope" else 1)  # rope rotates pairs: an even head
    model = dict(n_layer=draw(st.integers(1, 64)), n_head=n_head, n_embd=n_head * head_size, position=position,
                 block_size=draw(st.integers(1, 4096)), dropout=draw(st.floats(0.0, 0.99)),
                 bias=draw(st.booleans()), ff_mult=draw(st.integers(1, 8)),
                 activation=draw(st.sampled_from(["gelu", "relu"])), variant=draw(st.sampled_from(VARIANTS)),
                 norm=draw(st.sampled_from(NORMS)), tie_weights=draw(st.booleans()),
                 init=draw(st.sampled_from(["gpt2", "torch"])), vocab_size=draw(st.integers(0, 10**5)),
                 residual_scale=draw(st.sampled_from([1, "depth"])))
    if model["variant"] == "prenorm" and model["norm"] != "none":  # the only wiring LayerNorm Scaling has
        model["norm_scale"] = draw(st.sampled_from([1, "depth"]))
    train = dict(batch_size=draw(st.integers(1, 512)), grad_accum=draw(st.integers(1, 8)),
                 max_iters=draw(st.integers(1, 10**6)), max_time=draw(st.floats(0.0, 1e6)), learning_rate=lr,
                 min_lr=lr * draw(st.floats(0.0, 1.0)), warmup_iters=warmup,
                 lr_decay_iters=draw(st.one_of(st.just(0), st.integers(max(warmup, 1), 10**6))),
                 weight_decay=draw(st.floats(0.0, 1.0)), beta1=draw(st.floats(0.0, 0.999)),
                 beta2=draw(st.floats(0.0, 0.999)), grad_clip=draw(st.floats(0.0, 10.0)),
                 eval_interval=draw(st.integers(1, 10**4)), seed=draw(st.integers(0, 2**63 - 1)),
                 device=draw(st.sampled_from(["auto", "cpu", "cuda", "cuda:1", "mps"])),
                 dtype=draw(st.sampled_from(["float32", "bfloat16", "auto"])),
                 attention=draw(st.sampled_from(["auto", "sdpa", "explicit"])),
                 on_nonfinite=draw(st.sampled_from(["stop", "skip"])), target_val_loss=draw(st.floats(0.0, 5.0)),
                 grad_log_interval=draw(st.integers(0, 1000)), probe_interval=draw(st.integers(0, 1000)))
    path = draw(st.one_of(st.none(), st.text(min_size=1, max_size=8)))
    data = dict(path=path,  # another encoding is a file's: the embedded corpus is UTF-8
                encoding=draw(st.sampled_from(["utf-8"] if path is None else ["utf-8", "cp1252", "latin-1", "utf-16"])),
                val_fraction=draw(st.floats(0.0, 0.5, exclude_min=True)))
    sections = {"model": model, "train": train, "data": data}
    keep = draw(st.sets(st.sampled_from(sorted(sections))))  # absent sections take the defaults
    return {k: v for k, v in sections.items() if k in keep}


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["data", "model", "train", "extra"]),
                       st.dictionaries(_keys, _values, max_size=4), max_size=3),
       _valid_config())
@pytest.mark.slow
def test_fuzz_config_raises_only_depthlab_error(d, valid):
    cfg = RunConfig.from_dict(valid)  # valid values are accepted, as given
    got = cfg.to_dict()
    for section, fields in valid.items():
        assert {k: got[section][k] for k in fields} == fields
    assert RunConfig.from_dict(got) == cfg  # config.json round trip
    try:
        RunConfig.from_dict(d)
    except DepthlabError:
        pass


@pytest.mark.parametrize("kw,needle", [
    (dict(n_embd=30, n_head=4), "model.n_embd (30) must be divisible by model.n_head (4)"),
    (dict(n_layer=0), "model.n_layer"), (dict(block_size=-1), "model.block_size"),
    (dict(dropout=1.0), "model.dropout"), (dict(variant="resnet"), "model.variant"),
    *[(dict(residual_scale=v), "model.residual_scale must be 1 (no branch scaling) or depth")
      for v in (True, 1.0, 2, "Depth", "1")],
    (dict(norm_scale=0), "model.norm_scale must be 1 (no scaling) or depth"),
    (dict(norm_scale="depth", variant="periln"), "not defined for model.variant periln; use --model.variant prenorm"),
    (dict(norm_scale="depth", norm="none"), "not defined for model.norm none (no norm)"),
    (dict(norm="batchnorm"), "model.norm must be one of layernorm, rmsnorm, dyt, none"),
])
def test_impossible_configs_name_the_field(kw, needle):
    with pytest.raises(DepthlabError) as e:
        tiny_model_config(**{"block_size": 16, **kw})
    assert needle in str(e.value)


@pytest.mark.parametrize("kw,msg", [(dict(tokenizer="char", vocab_size=300), "data.tokenizer bpe only"),
                                    (dict(tokenizer="bpe", vocab_size=100), "[257, 1048576]"),
                                    (dict(tokenizer="wordpiece"), "data.tokenizer must be one of char, bpe"),
                                    (dict(split="random"), "data.split must be one of tail, lines")])
def test_bad_tokenizer_settings_name_the_field(kw, msg):
    with pytest.raises(DepthlabError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        DataConfig(**kw)


def test_contradictory_schedule_is_refused_or_warned():
    with pytest.raises(DepthlabError, match="lr_decay_iters .* warmup_iters"):
        TrainConfig(max_iters=20, warmup_iters=10, lr_decay_iters=5)
    w = schedule_warnings(TrainConfig(max_iters=20, warmup_iters=100))
    assert len(w) == 1 and "train.warmup_iters (100) >= train.max_iters (20)" in w[0]
    assert schedule_warnings(TrainConfig(max_iters=200, warmup_iters=100)) == []
    # a new user's pass: the warning said the peak is never reached while fit_to_time's plan capped the warmup
    (w,) = schedule_warnings(TrainConfig(max_iters=40, warmup_iters=100, max_time=30, fit_to_time=True))
    assert "unless train.fit_to_time shortens the run" in w
    (w,) = schedule_warnings(TrainConfig(max_iters=20, warmup_iters=100, max_time=0))
    assert "fit_to_time" not in w  # no time limit: no plan, the warning stands as it is


def test_schedule_warning_is_printed(tmp_path, tiny_text_file, capsys):
    args = tiny_cli_args(tiny_text_file, tmp_path / "w", train__max_iters=5, train__warmup_iters=100)
    assert main(["train", *args]) == 0
    assert "depthlab: warning: train.warmup_iters (100) >= train.max_iters (5)" in capsys.readouterr().err


def test_residual_scale_on_the_command_line_is_typed(capsys):
    from conftest import cli_print_config

    assert "residual_scale: depth\n" in cli_print_config(capsys, "train", "--model.residual_scale", "depth",
                                                       "--print_config")
    assert "residual_scale: 1\n" in cli_print_config(capsys, "train", "--model.residual_scale", "1",
                                                   "--print_config")
    assert main(["train", "--model.residual_scale", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("depthlab: error:") and "model.residual_scale" in err and "Traceback" not in err


@pytest.mark.parametrize("field", ["max_iters", "lr_decay_iters", "eval_interval"])
def test_step_counts_beyond_any_run_are_refused_in_one_line(field):
    from depthlab.config import MAX_STEPS, TrainConfig

    TrainConfig(**{field: MAX_STEPS, **({"max_iters": MAX_STEPS} if field == "lr_decay_iters" else {})})  # the bound
    with pytest.raises(DepthlabError, match=rf"train\.{field} must be at most 1,000,000,000,000 steps, got "
                                            r"99,999,999,999,999,999,999,999"):
        TrainConfig(**{field: 99999999999999999999999})  # accepted before: beyond int64


def test_eval_iters_beyond_any_split_is_refused_in_one_line():
    from depthlab.config import TrainConfig

    TrainConfig(eval_iters=1_000_000)
    with pytest.raises(DepthlabError, match=r"train\.eval_iters must be at most 1,000,000 batches per evaluation, "
                                            r"got 99,999,999,999,999,999"):
        TrainConfig(eval_iters=99999999999999999)  # crashed allocating its losses, after making the run folder


def test_a_runs_config_from_before_a_field_reads_as_the_run_had_it():
    from depthlab.config import PREDATING, as_ran, predating_model

    old = {"data": {}, "model": {"n_layer": 2}, "train": {"seed": 1}}
    ran = as_ran(old)
    assert ran["train"]["eval_windows"] == "random" and ran["model"]["position"] == "learned"
    assert old == {"data": {}, "model": {"n_layer": 2}, "train": {"seed": 1}}  # a copy: the caller's dict untouched
    new = RunConfig().to_dict()
    assert as_ran(new) == new and new["model"]["position"] == "rope" and new["train"]["eval_windows"] == "spaced"
    assert predating_model({"source": "m.py:Net"}) == {"source": "m.py:Net"}  # a model of one's own has no such field
    assert predating_model({}) == {}  # nothing known of the model: nothing to say of its positions
    assert PREDATING["model"]["position"] != ModelConfig().position  # only fields whose default changed are listed


# a 2-line file whose last line leaves a `[` open was "at line 3" (PyYAML's end of stream is one past the last line)
@pytest.mark.parametrize("text, where", [
    ("train:\n  max_iters: [1, 2\n", "at the end of the file (line 2, column 19): expected ',' or ']', but got "
                                     "'<stream end>' (the unfinished part starts at line 2, column 14); fix it"),
    ("train:\r\n  max_iters: [1, 2\r\n", "at the end of the file (line 2, column 19)"),
    ("a: 1\nb: [\n", "at the end of the file (line 2, column 5): expected the node content"),
    ("a: {b: 1\n\n\n", "at the end of the file (line 3, column 1)"),  # blank lines are lines of the file
    ("a: 1\nb: [", "at line 2, column 5"),  # no final line break: PyYAML's mark is on the last line already
    ("train:\n  max_iters: 3\n bad", "at line 3, column 2"),  # a bad indent on a last line without a break
])
def test_a_yaml_error_at_the_end_of_a_file_names_a_line_the_file_has(tmp_path, text, where):
    from depthlab.config import read_yaml

    f = tmp_path / "bad.yaml"
    f.write_bytes(text.encode())
    with pytest.raises(DepthlabError) as e:
        read_yaml(f, "config file", "fix it")
    assert f"config file {f} is not valid YAML {where}" in str(e.value)


def test_the_cli_names_the_last_line_of_a_two_line_config_file(tmp_path, capsys):
    f = tmp_path / "bad.yaml"
    f.write_text("train:\n  max_iters: [3\n")
    assert main(["train", "-c", str(f), "--print_config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"depthlab: error: config file {f} is not valid YAML at the end of the file (line 2, "
                          "column 16): expected ',' or ']'") and "line 3" not in err and err.count("\n") == 1
