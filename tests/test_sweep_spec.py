"""Sweep specs: grid values typed by the train grammar, profiles as data files, sweep files, expansion,
estimates."""

import json
from importlib import resources
from pathlib import Path

import pytest
import yaml

from depthlab import sweep
from depthlab.errors import DepthlabError



def test_parse_grid_arg_types():
    assert sweep.parse_grid_arg("model.n_layer=1,2,4") == ("model.n_layer", [1, 2, 4])
    assert sweep.parse_grid_arg("model.variant=plain, prenorm") == ("model.variant", ["plain", "prenorm"])
    assert sweep.parse_grid_arg("train.learning_rate=1e-3,3e-3") == ("train.learning_rate", [1e-3, 3e-3])
    assert sweep.parse_grid_arg("model.bias=true,false") == ("model.bias", [True, False])
    with pytest.raises(DepthlabError, match="model.n_layer lists 2 twice"):  # refused, not silently dropped
        sweep.parse_grid_arg("model.n_layer=2,2,1")
    key, vals = sweep.parse_grid_arg("model.n_layer=1,2")
    assert all(type(v) is int for v in vals)
    # a Literal[str] field stays text; a float field given an integer is a float
    assert sweep.parse_grid_arg("train.dtype=float32") == ("train.dtype", ["float32"])
    assert type(sweep.parse_grid_arg("train.dtype=float32")[1][0]) is str
    assert [type(v) for v in sweep.parse_grid_arg("train.learning_rate=3")[1]] == [float]


@pytest.mark.parametrize("text, needle", [
    ("model.n_layer", "expected SECTION.FIELD=V1,V2"),
    ("model.n_layers=1,2", "unknown field 'n_layers'"),
    ("modle.n_layer=1,2", "unknown section 'modle'"),
    ("n_layer=1,2", "expected SECTION.FIELD"),
    ("model.n_layer=", "empty value"),
    ("model.n_layer=1,,2", "empty value"),
    ("model.n_layer=1,two", "model.n_layer: cannot use 'two'"),
    ("model.variant=plain,resnet", "expected one of"),
    ("train.out_dir=a,b", "--out_dir"),
])
def test_parse_grid_arg_errors(text, needle):
    with pytest.raises(DepthlabError) as e:
        sweep.parse_grid_arg(text)
    assert needle in str(e.value)


def test_one_field_in_two_grid_arguments_is_refused_with_the_merged_flag():
    with pytest.raises(DepthlabError) as e:
        sweep.build_spec(None, None, ["model.n_layer=1,2", "model.variant=plain", "model.n_layer=4"], {}, None)
    assert str(e.value) == "--grid model.n_layer is given twice; give every value once: --grid model.n_layer=1,2,4"
    spec = sweep.build_spec(None, None, ["model.n_layer=1,2", "model.variant=plain"], {}, None)
    assert spec.experiments[0].grid == {"model.n_layer": [1, 2], "model.variant": ["plain"]}


def test_the_merged_grid_suggestion_lists_each_value_once_and_is_accepted():
    """--grid model.n_layer=1,2 --grid model.n_layer=1 once suggested 1,2,1, which the grid refuses (1 twice)."""
    with pytest.raises(DepthlabError) as e:
        sweep.build_spec(None, None, ["model.n_layer=1,2", "model.n_layer=1"], {}, None)
    assert str(e.value) == "--grid model.n_layer is given twice; give every value once: --grid model.n_layer=1,2"
    suggested = str(e.value).split("--grid ")[-1]
    assert sweep.build_spec(None, None, [suggested], {}, None).experiments[0].grid == {"model.n_layer": [1, 2]}
    with pytest.raises(DepthlabError) as e:
        sweep.build_spec(None, None, ["train.learning_rate=1e-3", "train.learning_rate=0.001,3e-3"], {}, None)
    suggested = str(e.value).split("--grid ")[-1]
    assert suggested == "train.learning_rate=0.001,0.003"
    assert sweep.build_spec(None, None, [suggested], {}, None).experiments[0].grid == {
        "train.learning_rate": [0.001, 0.003]}


def test_grid_value_typed_like_the_train_flag():
    """The grid, a sweep file and the train command share one grammar: same accepted values, same types."""
    from jsonargparse import ArgumentParser

    from depthlab.config import add_config_arguments

    train = ArgumentParser(exit_on_error=False)
    add_config_arguments(train)
    for key, text in [("model.n_layer", "3"), ("train.learning_rate", "1e-2"), ("model.bias", "yes"),
                      ("train.dtype", "float32"), ("data.path", "null"), ("train.max_time", "0")]:
        expect = train.parse_args([f"--{key}={text}"])[key]
        got = sweep.parse_grid_arg(f"{key}={text}")[1][0]
        assert got == expect and type(got) is type(expect), key
    assert sweep.coerce_value("data.path", None) is None and sweep.coerce_value("model.bias", True) is True
    with pytest.raises(DepthlabError, match=r"model\.n_layer: cannot use 'two' \(expected an integer\)"):
        sweep.parse_grid_arg("model.n_layer=two")
    # train refuses 2.0 for an int flag: so does the grid (the old hand-written parser accepted it)
    with pytest.raises(DepthlabError, match="model.n_layer"):
        sweep.parse_grid_arg("model.n_layer=2.0")
    with pytest.raises(DepthlabError, match="model.dropout: cannot use 'true'"):
        sweep.coerce_value("model.dropout", True)
    with pytest.raises(DepthlabError, match="unknown field 'n_layers' in model"):
        sweep.parse_grid_arg("model.n_layers=1")


@pytest.mark.slow
def test_profile_files_are_the_profiles():
    files = sorted(p.name.removesuffix(".yaml")
                   for p in (resources.files("depthlab.sweep") / "profiles").iterdir() if p.name.endswith(".yaml"))
    assert files == sorted(sweep.PROFILE_NAMES)
    desc = sweep.profile_descriptions()
    assert list(desc) == list(sweep.PROFILE_NAMES)
    assert "148 s" in desc["quick"] and "min" in desc["full"] and "minutes" in desc["science"]
    # the science profile runs on the quick recipe
    assert sweep.profile_spec("science").base == sweep.profile_spec("quick").base


def test_profiles_expand(tmp_path):
    quick = sweep.expand(sweep.profile_spec("quick"), tmp_path)
    assert len(quick) == 10
    cfgs = {(p.config["model"]["variant"], p.config["model"]["n_layer"]) for p in quick}
    assert ("plain", 16) in cfgs and ("prenorm", 16) in cfgs
    # the measured recipe: float32 and no wall-clock cut, whatever the trainer's defaults are
    assert all(p.config["train"]["dtype"] == "float32" and p.config["train"]["max_time"] == 0 for p in quick)
    assert quick[0].config["train"]["learning_rate"] == 0.01 and quick[0].config["model"]["n_embd"] == 32
    # same recipe for every variant of a depth
    for L in {p.config["model"]["n_layer"] for p in quick}:
        recipes = {json.dumps({**p.config["train"], "out_dir": None})
                   for p in quick if p.config["model"]["n_layer"] == L}
        assert len(recipes) == 1
    full = sweep.expand(sweep.profile_spec("full"), tmp_path)
    assert len(full) == 80
    wirings = {(p.config["model"]["variant"], p.config["model"]["norm"], p.config["model"]["norm_scale"]) for p in full}
    assert {("periln", "layernorm", 1), ("prenorm", "dyt", 1), ("prenorm", "layernorm", "depth")} <= wirings
    sci = sweep.expand(sweep.profile_spec("science"), tmp_path)
    assert len(sci) == 154  # every experiment two seeds or more (a verdict is a test over seeds); + periln, lns
    assert all(len({p.config["train"]["seed"] for p in sci if p.experiment == e}) >= 2 for e in sweep.CLAIMS)
    assert {p.config["model"]["variant"] for p in sci if p.experiment == "rank_init"} >= {"periln"}
    assert {p.experiment for p in sci} == {"rank_init", "depth", "postln_warmup", "rezero_speed",
                                           "deepnorm_depth", "dyt_lr", "periln_stability", "lns_depth"}
    assert {p.experiment for p in sci} == set(sweep.CLAIMS)  # every science experiment has its judge
    rz = [e for e in sweep.profile_spec("science").experiments if e.name == "rezero_speed"][0]
    assert rz.extra == {"target_val_loss": 2.6} and rz.grid["train.learning_rate"] == [1e-3, 3e-3, 1e-2, 3e-2]
    with pytest.raises(DepthlabError, match="unknown sweep profile"):
        sweep.profile_spec("nope")


def test_default_sweep_dir_is_stable():
    """The same command continues the same sweep. (Profile hashes changed once, when the profiles pinned
    ``train.optimizer: adamw``: science-ef5ef4db -> science-dad275e9, quick-37fd8e6e -> quick-2320e1bf; and
    when rank_init added Peri-LN: science-dad275e9 -> science-a6fc3566; when the profiles pinned
    ``train.weight_decay: 0.1`` as the default recipe moved to 0.3: science-a6fc3566 -> science-d105ec6b,
    quick-2320e1bf -> quick-d421428f; when they pinned ``model.position: learned`` and ``train.eval_windows:
    random`` as rotary positions and evenly spaced windows became the defaults: science-d105ec6b ->
    science-03259d31, quick-d421428f -> quick-7a1e82d8.)"""
    s = sweep.build_spec("science", None, [], {}, "rank_init")
    assert sweep.default_sweep_dir(s, "science", None, [], {}, "rank_init") == str(Path("sweeps/science-03259d31"))
    over = {"model.n_embd": 32, "model.n_head": 2, "model.block_size": 16, "train.batch_size": 8,
            "train.max_iters": 50, "train.eval_interval": 10, "train.eval_iters": 2, "train.target_val_loss": 4.5}
    s = sweep.build_spec(None, None, ["model.n_layer=1,2"], over, None)
    assert sweep.default_sweep_dir(s, None, None, ["model.n_layer=1,2"], over, None) == \
        str(Path("sweeps/sweep-8031e321"))
    s = sweep.build_spec("quick", None, [], {"train.max_iters": 100}, None)
    assert sweep.default_sweep_dir(s, "quick", None, [], {"train.max_iters": 100}, None) == \
        str(Path("sweeps/quick-7a1e82d8"))
    s = sweep.build_spec("quick", None, [], {}, None)
    assert sweep.default_sweep_dir(s, "quick", None, [], {}, None) == str(Path("sweeps/quick"))


def test_build_spec_errors_and_selection(tmp_path):
    with pytest.raises(DepthlabError, match="nothing to sweep"):
        sweep.build_spec(None, None, [], {}, None)
    with pytest.raises(DepthlabError, match="either --profile or --file"):
        sweep.build_spec("quick", str(tmp_path / "x.yaml"), [], {}, None)
    with pytest.raises(DepthlabError, match="unknown experiment.*nope.*rank_init"):
        sweep.build_spec("science", None, [], {}, "rank_init,nope")
    s = sweep.build_spec("science", None, ["model.n_layer=2,4"], {"train.max_iters": "7"}, "depth, rezero_speed")
    assert [e.name for e in s.experiments] == ["depth", "rezero_speed"]
    assert all(e.grid["model.n_layer"] == [2, 4] for e in s.experiments)  # --grid replaces that axis
    assert s.overrides == {"train.max_iters": 7}  # typed by the train grammar
    with pytest.raises(DepthlabError, match="train.max_iters: cannot use 'many'"):
        sweep.build_spec(None, None, ["model.n_layer=1"], {"train.max_iters": "many"}, None)
    with pytest.raises(DepthlabError, match="unknown field 'max_iterz'"):
        sweep.build_spec(None, None, ["model.n_layer=1"], {"train.max_iterz": 3}, None)


def test_expand_names_and_precedence(tmp_path):
    spec = sweep.SweepSpec(experiments=[sweep.Experiment(grid={"model.n_layer": [1, 16], "model.variant": ["plain"]},
                                                         base={"train.max_iters": 7})],
                           base={"train.max_iters": 5, "model.n_embd": 16, "model.n_head": 2},
                           overrides={"train.learning_rate": 1e-3, "model.n_layer": 3})
    pts = sweep.expand(spec, tmp_path / "sw")
    assert [p.name for p in pts] == ["n_layer-01_variant-plain", "n_layer-16_variant-plain"]
    c = pts[1].config  # the grid point beats the command-line override of the same field
    assert c["model"]["n_layer"] == 16 and c["train"]["max_iters"] == 7 and c["train"]["learning_rate"] == 1e-3
    assert c["train"]["out_dir"] == str(tmp_path / "sw" / "runs" / "n_layer-16_variant-plain")
    assert c["train"]["tensorboard"] is False and c["train"]["progress"] is False
    bad = sweep.SweepSpec(experiments=[sweep.Experiment(grid={"model.n_embd": [32, 30]})],
                          base={"model.n_head": 4})
    with pytest.raises(DepthlabError, match="n_embd-30.*model.n_embd"):
        sweep.expand(bad, tmp_path / "sw2")


def test_sweep_file(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("base:\n  model: {n_embd: 16, n_head: 2}\n  train.max_iters: 3\n"
                 "grid:\n  model.n_layer: [1, 2]\n  model.ff_mult: 1,4\n")
    spec = sweep.load_sweep_file(f)
    pts = sweep.expand(spec, tmp_path / "sw")
    assert len(pts) == 4 and pts[0].config["model"]["ff_mult"] == 1 and pts[0].config["train"]["max_iters"] == 3
    # YAML reads 1e-2 as text: the train grammar makes it the number
    f.write_text("base: {train.learning_rate: 1e-2}\ngrid: {model.n_layer: [1]}\n")
    assert sweep.load_sweep_file(f).base == {"train.learning_rate": 0.01}
    f.write_text("grid:\n  model.n_layer: [1, two]\n")
    with pytest.raises(DepthlabError, match="model.n_layer: cannot use 'two'"):
        sweep.load_sweep_file(f)
    f.write_text("grid:\n  model.n_layer: [1]\nbogus: 1\n")
    with pytest.raises(DepthlabError, match="bogus"):
        sweep.load_sweep_file(f)
    f.write_text("grid: [1, 2\n")
    with pytest.raises(DepthlabError, match=r"not valid YAML at the end of the file \(line 1, column 12\): .*; fix"):
        sweep.load_sweep_file(f)  # where, as a -c config file says it (one reader of YAML files)
    f.write_bytes(b"\xff\xfe")
    with pytest.raises(DepthlabError, match="not UTF-8 text"):
        sweep.load_sweep_file(f)
    assert yaml.safe_load("a: 1e-2")["a"] == "1e-2"  # why the grammar, not YAML, types the values


def test_an_empty_grid_key_or_experiments_list_says_what_to_write(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("grid: {model.n_layer: []}\n")
    with pytest.raises(DepthlabError) as e:
        sweep.load_sweep_file(f)
    assert str(e.value).endswith("model.n_layer has no values; give it at least one (model.n_layer: [a, b]) or "
                                 "delete the key")
    for bad in ("3", "[]"):
        f.write_text(f"experiments: {bad}\n")
        with pytest.raises(DepthlabError) as e:
            sweep.load_sweep_file(f)
        assert "(experiments: [{name: a, grid: {model.n_layer: [1, 2]}}])" in str(e.value)
    f.write_text("experiments: [{name: a, grid: {model.n_layer: [1, 2]}}]\n")  # the example is accepted
    assert len(sweep.expand(sweep.load_sweep_file(f), tmp_path / "sw")) == 2


def test_sweep_file_that_is_a_folder_says_so(tmp_path):
    """nu36: ``sweep --file FOLDER`` (a sweep's own folder, given to continue it) said "sweep file FOLDER not
    found" of a folder that exists."""
    with pytest.raises(DepthlabError) as e:
        sweep.load_sweep_file(tmp_path)
    assert str(e.value) == f"sweep file {tmp_path} is a folder, not a YAML file; give the sweep's .yaml file"
    (tmp_path / "sweep.json").write_text("{}")
    with pytest.raises(DepthlabError) as e:
        sweep.load_sweep_file(tmp_path)
    assert str(e.value).endswith(f"; to continue the sweep in it, run the command that made it with --out_dir "
                                 f"{tmp_path}")
    with pytest.raises(DepthlabError) as e:
        sweep.load_sweep_file(tmp_path / "none.yaml")
    assert str(e.value) == (f"sweep file {tmp_path / 'none.yaml'} not found; give the path of an existing sweep .yaml "
                            "file, or sweep without one: --profile quick|full|science, or --grid FIELD=V1,V2,...")


def test_a_sweep_takes_at_least_its_longest_run_on_any_number_of_workers():
    """`--dry_run` printed "about 5.7 min on 2 workers" for runs of 235 s and 454.5 s (the sum over the workers)."""
    from depthlab.sweep.local import makespan

    assert makespan([235.0, 454.5], 2) == 454.5
    assert makespan([1.0, 1.0, 1.0, 1.0], 2) == 2.0 and makespan([3.0, 1.0, 1.0, 1.0], 2) == 3.0
    assert makespan([2.0, 2.0, 2.0], 1) == 6.0 and makespan([5.0], 8) == 5.0


def test_dry_run_lists_runs(tmp_path):
    spec = sweep.build_spec("quick", None, [], {}, None)
    text = sweep.dry_run(spec, tmp_path / "q", 2)
    lines = text.splitlines()
    assert len(lines) == 11 and text.count("variant-") == 10
    assert lines[-1].startswith("10 runs, about ") and "min on 2 workers" in lines[-1]
    assert lines[-1].endswith(f"-> {tmp_path / 'q'}")
    from depthlab.sweep.local import makespan

    each = [sweep.estimate_seconds(p.config) for p in sweep.expand(spec, tmp_path / "q")]
    assert f"about {makespan(each, 2) / 60:.1f} min" in lines[-1]
    assert makespan(each, 2) >= max(max(each), sum(each) / 2)
    assert not (tmp_path / "q").exists()
    with pytest.raises(DepthlabError, match="--workers"):
        sweep.dry_run(spec, tmp_path / "q", -1)
    # a path the real run refuses is refused by the dry run too (it printed the plan before)
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(DepthlabError, match="is a file"):
        sweep.dry_run(spec, tmp_path / "afile", 2)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(DepthlabError, match="not a sweep directory"):
        sweep.dry_run(spec, tmp_path / "mine", 2)
    assert (tmp_path / "afile").read_text() == (tmp_path / "mine" / "notes.txt").read_text() == "mine"


def test_estimate_seconds_counts_flops():
    cfg = sweep.expand(sweep.profile_spec("quick"), "x")[0].config  # n_layer 1, n_embd 32, T 64, 500 steps
    C, L, T, V = 32, 1, 64, 65
    per_tok = L * (C * C * 12 + 2 * T * C) + V * C
    evals = (500 // 100 + 2) * 2 * 20
    flops = 6 * per_tok * 16 * T * 500 + 2 * per_tok * 16 * T * evals
    expect = flops / 1e9 * 0.045 + 0.7e-3 * 2 * (500 + evals / 3) + 4.0
    assert sweep.estimate_seconds(cfg) == pytest.approx(expect)


def test_estimate_scales_with_width_as_calibrated():
    from depthlab import sweep

    cfg = sweep.expand(sweep.profile_spec("quick"), "x")[0].config
    base = sweep.estimate_seconds(cfg)
    wide = json_copy(cfg)
    wide["model"]["n_embd"] = 192
    C, L, T, V = 192, 1, 64, 65
    per_tok = L * (C * C * 12 + 2 * T * C) + V * C
    evals = (500 // 100 + 2) * 2 * 20
    flops = 6 * per_tok * 16 * T * 500 + 2 * per_tok * 16 * T * evals
    expect = flops / 1e9 * 0.045 * (32 / 192) ** 0.8 + 0.7e-3 * 2 * (500 + evals / 3) + 4.0
    assert abs(sweep.estimate_seconds(wide) - expect) < 1e-9 and sweep.estimate_seconds(wide) > base


def json_copy(d):
    import json

    return json.loads(json.dumps(d))


def test_a_grid_given_as_a_json_list_is_the_same_grid_as_the_comma_form(tmp_path, capsys):
    """A new user's pass: --grid 'model.n_layer=[1,2]' said "cannot use '[1'" (the values were split on commas)."""
    from depthlab.cli import main

    assert sweep.parse_grid_arg("model.n_layer=[1,2]") == sweep.parse_grid_arg("model.n_layer=1,2")
    assert sweep.parse_grid_arg("model.n_layer=[1, 2]") == ("model.n_layer", [1, 2])
    assert sweep.parse_grid_arg('data.tokenizer=["char","bpe"]') == ("data.tokenizer", ["char", "bpe"])
    # a JSON object with two keys is one value (a comma inside it does not split it)
    assert sweep.parse_grid_arg('model.init=[{"a":1,"b":2}]') == ("model.init", [{"a": 1, "b": 2}])
    assert sweep.parse_grid_arg('model.init={"a":1,"b":2}') == ("model.init", [{"a": 1, "b": 2}])
    with pytest.raises(DepthlabError, match=r"model.n_layer lists 1 twice"):
        sweep.parse_grid_arg("model.n_layer=[1,1]")
    with pytest.raises(DepthlabError, match=r"the list is empty"):
        sweep.parse_grid_arg("model.n_layer=[]")
    assert main(["sweep", "--grid", "model.n_layer=[1,2", "--out_dir", str(tmp_path / "sw"), "--dry_run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "[1,2 is not valid JSON" in err and "comma-separated like model.n_layer=A,B" in err
    assert main(["sweep", "--grid", "model.n_layer=[1,2]", "--out_dir", str(tmp_path / "sw"), "--dry_run"]) == 0
    out = capsys.readouterr().out
    assert "n_layer-1" in out and "n_layer-2" in out and "2 runs" in out


def test_two_grid_values_a_run_name_writes_alike_are_named_in_the_refusal(tmp_path):
    """A grid over 日本.txt and 東京.txt was refused with "share the name path-__.txt; give distinct grid values",
    though the values were distinct: the refusal now names them and why a run name writes them alike."""
    def spec(grid):
        return sweep.SweepSpec(experiments=[sweep.Experiment(grid=grid)])

    with pytest.raises(DepthlabError) as e:
        sweep.expand(spec({"data.path": ["日本.txt", "東京.txt"], "model.n_layer": [1]}), tmp_path)
    assert str(e.value) == ("two sweep runs share the name path-__.txt_n_layer-1: data.path 日本.txt and 東京.txt are "
                            "written alike in a run name (numbers to 6 significant digits, each character outside "
                            "A-Za-z0-9.+- as _); give values that differ there (rename a file to ASCII, say)")
    with pytest.raises(DepthlabError, match=r"name learning_rate-0.123457: train.learning_rate 0.1234567 and "
                                            r"0.12345671 are written alike"):
        sweep.expand(spec({"train.learning_rate": [0.1234567, 0.12345671]}), tmp_path)
    assert [p.name for p in sweep.expand(spec({"data.path": ["日本.txt", "b.txt"]}), tmp_path)] == [
        "path-__.txt", "path-b.txt"]


def test_a_sweep_file_with_run_sections_at_the_top_is_told_to_put_them_under_base(tmp_path):
    """A new user's pass: `model:` and `train:` at the top of a sweep file (as in a train -c file) were refused as
    unknown keys with no word of where they go."""
    f = tmp_path / "sw.yaml"
    f.write_text("model:\n  n_embd: 16\ntrain:\n  max_iters: 3\ngrid:\n  model.n_layer: [1]\n")
    with pytest.raises(DepthlabError) as e:
        sweep.load_sweep_file(f)
    assert str(e.value) == (f"sweep file {f}: unknown key(s) model, train (allowed: base, description, experiments, "
                            "grid, workers); the fields every run shares go under base: (base: {model: {...}})")
    f.write_text("base:\n  model:\n    n_embd: 16\n  train:\n    max_iters: 3\ngrid:\n  model.n_layer: [1]\n")
    assert sweep.load_sweep_file(f).base["model.n_embd"] == 16  # the advice, followed, loads
    f.write_text("modle:\n  n_embd: 16\ngrid:\n  model.n_layer: [1]\n")
    with pytest.raises(DepthlabError) as e:  # a misspelled key: no advice about base
        sweep.load_sweep_file(f)
    assert str(e.value).endswith("(allowed: base, description, experiments, grid, workers)")


@pytest.mark.parametrize("in_grid", [True, False])
def test_a_missing_model_source_file_is_refused_before_any_run_starts(tmp_path, monkeypatch, capsys, in_grid):
    """A new user's pass: a sweep whose grid or base named a model.source file that does not exist trained every
    point, each failing with the same missing file, and wrote the sweep folder; it is now one line, nothing written."""
    from depthlab.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("hello world\n" * 50)
    (tmp_path / "ok.py").write_text("import torch.nn as nn\nclass Net(nn.Module):\n    pass\n")
    model = {"block_size": 8} if in_grid else {"block_size": 8, "source": "gone.py:Net"}
    grid = {"model.source": ["ok.py:Net", "gone.py:Net"]} if in_grid else {"train.seed": [1, 2]}
    (tmp_path / "sw.yaml").write_text(yaml.safe_dump({"base": {"data": {"path": "t.txt"}, "model": model},
                                                      "experiments": [{"name": "a", "grid": grid}]}))
    for dry in ([], ["--dry_run"]):
        assert main(["sweep", "--file", "sw.yaml", "--out_dir", "out", "--workers", "1", *dry]) == 2
        err = capsys.readouterr().err
        run, where = ("a/source-gone.py_Net", "grid value model.source") if in_grid else \
            ("a/seed-1", "model.source (the sweep's base)")
        assert err == (f"depthlab: error: sweep run {run}: {where} gone.py:Net: file gone.py not found in {tmp_path}; "
                       "give the path of the model's .py file, relative to this folder or absolute "
                       f"({tmp_path} holds ok.py)\n")
        assert not (tmp_path / "out").exists()


@pytest.mark.slow  # about a second per case: the fast tier stays under 3 min
@pytest.mark.parametrize("in_grid", [True, False])
def test_a_model_source_file_without_the_named_class_is_refused_before_any_run_starts(tmp_path, monkeypatch, capsys,
                                                                                         in_grid):
    """A new user's pass: a sweep whose model.source file existed but lacked the class named (ok.py:Nope) started
    every run, each failing with "defines no 'Nope'", and wrote the sweep folder; it is now one line naming the file,
    the class and what the file defines, nothing written; a good file is imported once for all its runs."""
    from depthlab.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("hello world\n" * 50)
    (tmp_path / "ok.py").write_text("open('imports.txt', 'a').write('x')\nimport torch.nn as nn\n"
                                    "class Net(nn.Module):\n    pass\ndef make():\n    return Net()\n")
    model = {"block_size": 8} if in_grid else {"block_size": 8, "source": "ok.py:Nope"}
    grid = {"model.source": ["ok.py:Net", "ok.py:Nope"]} if in_grid else {"train.seed": [1, 2]}
    (tmp_path / "sw.yaml").write_text(yaml.safe_dump({"base": {"data": {"path": "t.txt"}, "model": model},
                                                      "experiments": [{"name": "a", "grid": grid}]}))
    for dry in ([], ["--dry_run"]):
        assert main(["sweep", "--file", "sw.yaml", "--out_dir", "out", "--workers", "1", *dry]) == 2
        err = capsys.readouterr().err
        run, where = ("a/source-ok.py_Nope", "grid value model.source") if in_grid else \
            ("a/seed-1", "model.source (the sweep's base)")
        assert err == (f"depthlab: error: sweep run {run}: {where} ok.py:Nope: ok.py defines no 'Nope' (it defines "
                       "Net, make); give PATH.py:NAME with NAME the model's class (an nn.Module subclass) or a "
                       "function that returns the model\n")
        assert not (tmp_path / "out").exists()
    (tmp_path / "imports.txt").unlink()
    (tmp_path / "sw.yaml").write_text(yaml.safe_dump({"base": {"data": {"path": "t.txt"}, "model": {
        "block_size": 8, "source": "ok.py:Net"}}, "experiments": [{"name": "a", "grid": {"train.seed": [1, 2, 3]}}]}))
    assert main(["sweep", "--file", "sw.yaml", "--out_dir", "out", "--workers", "1", "--dry_run"]) == 0
    assert (tmp_path / "imports.txt").read_text() == "x"  # checked once for its 3 runs, not once per run


def test_a_sweep_says_it_imports_its_model_source_file_and_why_once_for_all_runs(tmp_path, monkeypatch, capsys):
    """The sweep imports a model.source file in its own process to refuse a bad one before any run starts (only an
    import tells a file that fails to import from a good one), so the file runs there: the sweep now says so, and
    why (it names the file), before it imports it, in the real sweep and the dry run; and imports it once for all
    runs, the seeds --seeds adds included (each added run's import had run the file again)."""
    from depthlab.cli import main
    from depthlab.sweep import run as sweep_run

    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("hello world\n" * 50)
    (tmp_path / "ok.py").write_text("open('imports.txt', 'a').write('x')\nimport torch.nn as nn\n"
                                    "class Net(nn.Module):\n    pass\n")
    (tmp_path / "sw.yaml").write_text(yaml.safe_dump({"base": {"data": {"path": "t.txt"}, "model": {
        "block_size": 8, "source": "ok.py:Net"}}, "experiments": [{"name": "a", "grid": {"train.seed": [1, 2]}}]}))
    said = ("model.source (the sweep's base) ok.py:Net: your code, imported here to check that it gives the model "
            "before any run starts (run as Python because the sweep names it; each run imports it again)")
    assert main(["sweep", "--file", "sw.yaml", "--out_dir", "out", "--workers", "1", "--seeds", "4",
                 "--dry_run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == said and sum(said in line for line in out) == 1
    assert [line.split()[0] for line in out[1:5]] == [f"a/seed-{s}" for s in (1, 2, 3, 4)]  # 2 grid + 2 added runs
    assert (tmp_path / "imports.txt").read_text() == "x"
    # said before the import, so also when the file then fails to import
    (tmp_path / "ok.py").write_text("import no_such_module_here\n")
    assert main(["sweep", "--file", "sw.yaml", "--out_dir", "out", "--workers", "1", "--dry_run"]) == 2
    out, err = capsys.readouterr()[:2]
    assert out == said + "\n" and err.startswith("depthlab: error: sweep run a/seed-1: model.source (the sweep's "
                                                  "base) ok.py:Net: importing ok.py failed: ModuleNotFoundError")
    (tmp_path / "ok.py").write_text("open('imports.txt', 'a').write('x')\nimport torch.nn as nn\n"
                                    "class Net(nn.Module):\n    pass\n")

    def stop(*a, **k):  # what is tested happens before any run starts
        raise DepthlabError("stopped by the test")

    monkeypatch.setattr(sweep_run, "_run_round", stop)
    assert main(["sweep", "--file", "sw.yaml", "--out_dir", "out", "--workers", "1", "--seeds", "4"]) == 2
    assert capsys.readouterr()[:2] == (said + "\n", "depthlab: error: stopped by the test\n")
    assert (tmp_path / "imports.txt").read_text() == "xx"  # once more: the real sweep's own check
