"""depthlab.checkpoint: weights files (prefixes stripped, tied weights), and checkpoints that stay
loadable when a process dies between writes."""

import json

import pytest
import torch

from depthlab import checkpoint as ckpt, train
from depthlab.model import GPT
from depthlab.sample import load_run

from conftest import QUIET, tiny_config


@pytest.mark.slow
def test_compiled_checkpoint_keys_are_stripped_and_accepted(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "r", tiny_text_file), **QUIET)
    model, _ = load_run(run)
    compiled = torch.compile(model)  # lazy: the wrapper's keys carry _orig_mod. without compiling
    assert all(k.startswith("_orig_mod.") for k in compiled.state_dict())
    data = ckpt.weights_bytes(compiled, {"format": "1"})
    from safetensors.torch import load

    assert not any("_orig_mod" in k or k.startswith("module.") for k in load(data))
    # a foreign checkpoint that still has the prefixes loads too
    from safetensors.torch import save_file

    foreign = {f"_orig_mod.{k}": v.contiguous() for k, v in model.state_dict().items()
               if k != "lm_head.weight"}
    save_file(foreign, tmp_path / "foreign.safetensors")
    sd, _ = ckpt.load_weights_file(tmp_path / "foreign.safetensors")
    fresh = GPT(model.config)
    ckpt.load_into(fresh, sd, tmp_path / "foreign.safetensors")
    assert torch.equal(fresh.lm_head.weight, model.lm_head.weight)


def test_tied_weights_share_storage_after_load(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "r", tiny_text_file), **QUIET)
    m, _ = load_run(run)
    assert m.lm_head.weight is m.transformer.wte.weight
    assert m.lm_head.weight.data_ptr() == m.transformer.wte.weight.data_ptr()
    n_vocab = m.config.vocab_size
    assert m.num_params(non_embedding=False) == sum(p.numel() for p in m.parameters())
    untied = sum(p.numel() for p in m.state_dict().values())
    assert untied - m.num_params(non_embedding=False) == n_vocab * m.config.n_embd


class _Killed(BaseException):
    """Stands for SIGKILL: nothing in the trainer may catch it."""


def test_kill_before_manifest_keeps_best_verifiable(tmp_path, tiny_text_file, monkeypatch):
    """A process killed after writing a new best's weights but before the manifest: `sample` still works."""
    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4, eval_interval=2)), **QUIET)
    real = ckpt.atomic_write

    def dies_before_manifest(path, data):
        if path.name == "manifest.json":
            raise _Killed
        real(path, data)

    monkeypatch.setattr(ckpt, "atomic_write", dies_before_manifest)
    with pytest.raises(_Killed):
        train(tiny_config(run, tiny_text_file, train=dict(resume=True, max_iters=6, eval_interval=2)), **QUIET)
    monkeypatch.undo()
    assert json.loads((run / "checkpoints" / "manifest.json").read_text())["best"]["step"] == 4
    model, _ = load_run(run)  # the best the manifest names, verified


def test_kill_between_new_best_and_its_manifest_entry_keeps_best_loadable(tmp_path, tiny_text_file, monkeypatch):
    import depthlab.checkpoint as ckpt
    from depthlab.sample import load_run

    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=4, eval_interval=2)), **QUIET)
    real, writes = ckpt.atomic_write, []

    def dies_at_second_manifest_of_a_save(path, data):
        writes.append(path.name)
        if path.name == "manifest.json" and writes.count("manifest.json") == 2:
            raise KeyboardInterrupt  # the second manifest write of step 6's save: best.safetensors is new
        real(path, data)

    monkeypatch.setattr(ckpt, "atomic_write", dies_at_second_manifest_of_a_save)
    with pytest.raises(KeyboardInterrupt):
        train(tiny_config(run, tiny_text_file, train=dict(resume=True, max_iters=6, eval_interval=2)), **QUIET)
    monkeypatch.undo()
    assert writes[-2:] == ["best.safetensors", "manifest.json"]
    m = json.loads((run / "checkpoints" / "manifest.json").read_text())
    assert m["best"]["step"] == 4 and m["checkpoints"][-1]["step"] == 6
    model, _ = load_run(run)  # best.safetensors holds step 6's bytes, vouched for by the step-6 entry
    sd6, _ = ckpt.load_weights_file(run / "checkpoints" / "step-000006.safetensors")
    assert torch.equal(model.lm_head.weight, sd6["transformer.wte.weight"])


def test_the_advised_new_run_command_names_the_runs_own_copy_of_a_model_file_that_is_gone(tmp_path, monkeypatch):
    """A new user's pass: a refused resume of a model.source run whose file was deleted (or is relative to another
    folder) advised `depthlab train -c r1/config.json ...`, which failed on 'model.source m.py:Net: file m.py not
    found'; the command now points --model.source at the run's copy, and leaves it out while the file is there."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "my run"
    (run / "source").mkdir(parents=True)
    (run / "source" / "m.py").write_text("# the run's copy\n")
    (run / "config.json").write_text(json.dumps({"model": {"source": "m.py:Net"}}))
    assert ckpt.new_run_command(run, False, "--model.init '{}'") == (
        f"depthlab train -c '{run}/config.json' --model.source '{run}/source/m.py:Net' --model.init '{{}}' "
        "--train.resume false --train.out_dir NEW_DIR")
    (tmp_path / "m.py").write_text("# the original, still here\n")
    assert ckpt.new_run_command(run, True) == (f"depthlab train -c '{run}/config.json' --init-from '{run}' "
                                          "--train.resume false --train.out_dir NEW_DIR")
