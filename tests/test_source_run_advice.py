"""A ``--model.source`` run (the user's own model, where depthlab's ``model.n_layer`` and ``model.variant`` are
refused) is told what applies to its model:

- ``depthlab layers`` names what sets its depth (the ``--model.init`` argument, or its own code), not
  ``model.n_layer``; ``vanishing_gradients`` gives the shortcut advice for its code, the depth knob that applies,
  and ``depthlab check``'s gradient_flow (was: only "use fewer layers").
- ``depthlab context`` names the model's file with diagnose's command builder (an absolute path that works from
  any folder; was the path relative to where the run was trained), and does not raise a leaking mask when the
  run's own leak test before training passed (a ``causal_leak_check`` event with ``ok`` true).
"""

import shutil

import pytest

from depthlab.analytics.context import format_context, start_leak_record
from depthlab.analytics.diagnose import diagnose_records
from depthlab.analytics.layers import format_layers, run_layers

from conftest import TINY_TEXT, FIXTURES, run_cli, tiny_cli_args
from conftest import eval_records as evals
from conftest import grad_record as grad

VANISHING = [grad(s, [1e-6, 1e-3, 1.0]) for s in (50, 100, 150)]  # first/last block ratio 1e-6


def _vanishing(model):
    return {f.rule: f for f in diagnose_records(VANISHING, None, {"model": model})}["vanishing_gradients"]


def test_vanishing_gradients_of_a_source_model_names_the_shortcut_and_its_init_argument():
    v = _vanishing({"source": "models/mine.py:Mine", "init": {"n_layer": 8}, "block_size": 32})
    assert "use fewer layers (n_layer in --model.init is 8)" in v.remedy
    assert "if the model has no shortcut around its blocks, add one (x = x + block(x)" in v.remedy
    assert "depthlab check models/mine.py:Mine tests the model for this at initialisation (gradient_flow)" in v.remedy
    assert "(its code, or arguments given with --model.init)" in v.remedy
    assert "model.n_layer" not in v.remedy and "model.variant" not in v.remedy
    assert "what depthlab check's gradient_flow measures" in v.evidence and "depthlab probe" not in v.evidence


def test_vanishing_gradients_of_a_source_model_without_a_depth_argument_names_its_code():
    v = _vanishing({"source": "models/mine.py:Mine", "init": {"d": 64}})
    assert "use fewer layers: Mine's code (or an argument of it, given with --model.init) sets them" in v.remedy
    assert "model.n_layer" not in v.remedy


def test_vanishing_gradients_of_depthlabs_gpt_is_unchanged():
    v = _vanishing({"n_layer": 8, "variant": "plain", "norm": "layernorm"})
    assert "use fewer layers (model.n_layer is 8)" in v.remedy and "model.variant is plain" in v.remedy
    assert "--model.init" not in v.remedy and "what depthlab probe measures" in v.evidence


def _layers_res(**over):
    blocks = [{"block": i, "lens_loss": 3.3, "ablation_delta": 0.0, "relative_update": 0.1} for i in range(3)]
    blocks[-1]["ablation_delta"] = 1.0
    res = {"bigram": 2.48, "unigram": 3.35, "n_layer": 3, "weights": "best.safetensors", "windows_described": "w",
           "val_loss": 3.3, "lens": "l", "embedding_lens_loss": 3.4, "blocks": blocks, "effective_depth": 1,
           "leak_check": None, "run_dir": "r"}
    return format_layers({**res, **over})


def test_layers_names_what_sets_the_depth_of_the_run():
    assert "and n_layer in --model.init sets the depth)" in _layers_res(source="m.py:Mine", init={"n_layer": 3})
    own = _layers_res(source="m.py:Mine", init={"width": 32})
    assert "and Mine's code (or an argument of it, given with --model.init) sets the depth)" in own
    assert "model.n_layer" not in own
    assert "and model.n_layer sets the depth)" in _layers_res()  # depthlab's GPT (and a result without the keys)


@pytest.fixture(scope="module")
def source_run(tmp_path_factory):
    """A 3-step run of tests/fixtures/planted.py:TinyGPT (1 block) trained as ``models/mine.py:TinyGPT`` from its
    project folder, a relative --model.source as a user types it; its causal leak test before training passed."""
    proj = tmp_path_factory.mktemp("proj")
    (proj / "models").mkdir()
    shutil.copy(FIXTURES / "planted.py", proj / "models" / "mine.py")
    (proj / "t.txt").write_text(TINY_TEXT)
    import os

    here = os.getcwd()
    os.chdir(proj)
    try:
        from depthlab.cli import main

        args = tiny_cli_args("t.txt", "run", train__max_iters=3)
        for flag in ("--model.n_layer", "--model.n_head", "--model.n_embd"):  # depthlab's GPT's: refused here
            i = args.index(flag)
            del args[i:i + 2]
        assert main(["train", *args, "--model.source", "models/mine.py:TinyGPT",
                     "--model.init", '{"n_layer": 1}']) == 0
    finally:
        os.chdir(here)
    return proj, proj / "run"


def test_layers_of_a_source_run_keeps_its_source_and_init(source_run):
    _, run = source_run
    res = run_layers(run, norm_attr="ln", head_attr="head")
    assert res["source"] == "models/mine.py:TinyGPT" and res["init"] == {"n_layer": 1}


def _context_res(run, curve, leak_check):
    return {"loss_by_position": curve, "position_se": [0.05] * len(curve), "context_gain": curve[0] - curve[-1],
            "context_gain_se": 0.05, "last_quarter_se": 0.02, "windows": 64, "distinct_windows": 64,
            "weights": "best.safetensors", "windows_described": "w", "unigram": 3.35, "bigram": 2.48,
            "one_char_floor": 2.37, "checkpoints": [], "all_windows": True, "run_dir": str(run), "unit": "character",
            "leak_check": leak_check}


def test_context_of_a_source_run_names_its_file_by_a_path_that_works_anywhere(source_run, tmp_path, monkeypatch):
    proj, run = source_run
    monkeypatch.chdir(tmp_path)  # not the folder the run was trained from
    model = (proj / "models" / "mine.py").resolve()
    used = [2.40] + [1.5] * 15
    unused = [2.60] * 16
    # a run without a leak test record (trained before it existed): the leak is raised, with the absolute path
    text = format_context(_context_res(run, used, None))
    assert "(or it sees the tokens it predicts" in text and f"`depthlab check {model}:TinyGPT` tests the mask" in text
    text = format_context(_context_res(run, unused, None))
    assert f"a broken causal mask (depthlab check {model}:TinyGPT runs causal_leak and context_use)" in text
    assert "depthlab check models/mine.py" not in text


def test_context_does_not_raise_a_leak_the_runs_own_test_ruled_out(source_run, tmp_path, monkeypatch):
    proj, run = source_run
    monkeypatch.chdir(tmp_path)
    rec = start_leak_record(run)
    assert rec is not None and rec["ok"] is True  # the test before training found no leak
    text = format_context(_context_res(run, [2.40] + [1.5] * 15, rec))
    assert "the model uses its context" in text
    assert "sees the tokens it predicts" not in text and "depthlab check" not in text


def test_context_command_from_another_folder(source_run, tmp_path, monkeypatch, capsys):
    proj, run = source_run
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli(capsys, "context", str(run))
    assert rc == 0, err
    assert "depthlab check models/" not in out  # a relative path fails from here
    assert "sees the tokens it predicts" not in out  # its leak test passed
    model = (proj / "models" / "mine.py").resolve()
    assert f"a broken causal mask (depthlab check {model}:TinyGPT runs causal_leak and context_use)" in out


def test_overfitting_and_plateau_of_a_source_model_name_no_knob_of_depthlabs_gpt():
    src = {"model": {"source": "models/mine.py:Mine", "init": {"n_layer": 2}}}
    over = evals([3.0, 2.0, 1.9, 1.95, 2.05], trains=[3.0, 1.95, 1.7, 1.6, 1.5])
    f = {x.rule: x for x in diagnose_records(over, None, src)}["overfitting"]
    assert "add dropout (0.1-0.2) in the model's code, or raise it through an argument given with --model.init" in \
        f.remedy and "model.dropout" not in f.remedy
    assert "add model.dropout 0.1-0.2" in {x.rule: x for x in diagnose_records(over)}["overfitting"].remedy
    flat = [3.0, 2.0, 1.5, 1.52, 1.51, 1.5, 1.53, 1.5001]
    f = {x.rule: x for x in diagnose_records(evals(flat), None, src)}["plateau"]
    assert "grow the model (its sizes, in its code or the arguments given with --model.init)" in f.remedy
    assert "model.n_layer" not in f.remedy and "model.n_embd" not in f.remedy
    assert "grow the model (model.n_layer, model.n_embd)" in diagnose_records(evals(flat))[0].remedy
