"""depthlab.sweep.common: a finished run counts when its config matches (execution fields and newer
defaults aside)."""





def test_finished_runs_match_despite_execution_fields_and_newer_defaults():
    from depthlab.config import RunConfig
    from depthlab.sweep.common import config_diff

    now = RunConfig().to_dict()
    then = RunConfig().to_dict()
    then["train"]["compile"] = False  # the default became "auto": same computation on CPU
    del then["data"]["tokenizer"]  # written before the field existed; now at its default
    assert config_diff(now, then) == []
    then["train"]["learning_rate"] = 0.5
    assert config_diff(now, then) == ["train.learning_rate: 0.5 there, 0.003 now"]


def test_a_finished_run_older_than_train_optimizer_counts_as_adamw():
    from depthlab.config import RunConfig
    from depthlab.sweep.common import config_diff

    old = RunConfig().to_dict()
    del old["train"]["optimizer"]  # a run made before the field existed: it trained with AdamW
    want = RunConfig().to_dict()
    want["train"]["optimizer"] = "adamw"
    assert config_diff(want, old) == []  # the profiles pin adamw: their finished runs still count
    want["train"]["optimizer"] = "auto"  # muon on CPU: not what that run did
    assert config_diff(want, old) == ["train.optimizer: 'adamw' there, 'auto' now"]


def test_a_finished_run_older_than_embed_scale_counts_as_none():
    """Runs from before model.embed_scale had no scalar: a LayerNorm one is what auto builds now, a DyT one is not."""
    from depthlab.config import RunConfig
    from depthlab.sweep.common import config_diff

    old = RunConfig().to_dict()
    del old["model"]["embed_scale"]
    assert config_diff(RunConfig().to_dict(), old) == []  # auto with layernorm: no scalar, the same model
    old["model"]["norm"] = "dyt"
    want = RunConfig().to_dict()
    want["model"]["norm"] = "dyt"
    assert config_diff(want, old) == ["model.embed_scale: 'none' there, 'learned' now"]
    want["model"]["embed_scale"] = "none"
    assert config_diff(want, old) == []


def test_a_resume_compares_embed_scale_as_built():
    from depthlab.config import RunConfig
    from depthlab.resume_config import changed_fields

    old = RunConfig().to_dict()
    del old["model"]["embed_scale"]
    new = RunConfig().to_dict()
    assert changed_fields(old, new) == []
    new["model"]["embed_scale"] = "learned"
    assert changed_fields(old, new) == ["model.embed_scale"]


def _spec(grid, **base):
    from depthlab import sweep

    return sweep.SweepSpec(experiments=[sweep.Experiment(name="depth", grid=grid)],
                           base={"model.n_embd": 16, "model.n_head": 2, "model.block_size": 16, "train.seed": 1,
                                 **base})


def test_seeds_n_adds_seeds_to_every_cell_and_keeps_the_grids_names(tmp_path):
    from depthlab.sweep.common import seeded_points

    # no seed axis (the base's seed 1): the grid's runs keep their names, seeds 2 and 3 are appended
    pts, added = seeded_points(_spec({"model.n_layer": [1, 2]}), tmp_path, {}, fixed=3)
    names = sorted(p.name for p in pts)
    assert names == ["depth/n_layer-1", "depth/n_layer-1_seed-2", "depth/n_layer-1_seed-3", "depth/n_layer-2",
                     "depth/n_layer-2_seed-2", "depth/n_layer-2_seed-3"]
    assert sorted(p.config["train"]["seed"] for p in pts) == [1, 1, 2, 2, 3, 3]
    assert {len(v) for v in added.values()} == {2}
    # a seed axis 1, 2 with --seeds 3: only seed 3 is new, named like the grid's own seeds (never zero-padded)
    pts, _ = seeded_points(_spec({"model.n_layer": [1], "train.seed": [1, 2]}), tmp_path, {}, fixed=3)
    assert [p.name for p in pts] == ["depth/n_layer-1_seed-1", "depth/n_layer-1_seed-2", "depth/n_layer-1_seed-3"]
    pts, _ = seeded_points(_spec({"model.n_layer": [1], "train.seed": [1, 2]}), tmp_path, {}, fixed=12)
    assert pts[-1].name == "depth/n_layer-1_seed-12" and pts[0].name == "depth/n_layer-1_seed-1"


def test_parse_seeds():
    import pytest

    from depthlab.errors import DepthlabError
    from depthlab.sweep.common import AUTO_MAX_SEEDS, parse_seeds

    assert parse_seeds(None) is None and parse_seeds("4") == ("fixed", 4) and parse_seeds(" auto:5 ") == ("auto", 5)
    assert parse_seeds("auto") == ("auto", AUTO_MAX_SEEDS) == ("auto", 8)
    for bad in ("0", "auto:0", "two", "auto:x", "autox", "1001", "99999999999", "auto:1001"):
        with pytest.raises(DepthlabError, match="give N from 1 to 1000"):
            parse_seeds(bad)
    assert parse_seeds("1000") == ("fixed", 1000)


def test_a_finished_run_of_a_model_source_file_changed_since_is_refused_not_counted(tmp_path):
    """A new user's pass: after editing the model file, the same sweep said "all 2 runs had finished" and kept
    the results of the old file (the config text, model.source good.py:MyGPT, had not changed)."""
    import hashlib
    import json

    import pytest

    from depthlab.config import RunConfig
    from depthlab.errors import DepthlabError
    from depthlab.sweep.common import plan
    from depthlab.sweep.spec import RunPoint

    model = tmp_path / "good.py"
    model.write_text("# the model as it trained\n")
    config = RunConfig().to_dict()
    config["model"]["source"] = f"{model}:MyGPT"
    run = tmp_path / "sw" / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "summary.json").write_text("{}")
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    (run / "config.json").write_text(json.dumps({**config, "resolved": {"source_sha256": sha}}))
    point = RunPoint(name="r1", experiment="e", point={}, config=config)
    assert plan([point], tmp_path / "sw") == ([point], [])  # unchanged: finished, not run again
    model.write_text("# the model, edited\n")
    with pytest.raises(DepthlabError) as e:
        plan([point], tmp_path / "sw")
    assert str(e.value) == (f"sweep run {run} trained {model}:MyGPT before {model} changed (sha256 {sha[:12]}... "
                            f"then, {hashlib.sha256(model.read_bytes()).hexdigest()[:12]}... now), so its results "
                            "are not of the file as it is now; use another --out_dir, or --overwrite to redo every run")
    assert plan([point], tmp_path / "sw", rerun=True)[1] == [point]  # --overwrite redoes it
