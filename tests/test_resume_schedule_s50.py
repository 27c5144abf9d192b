"""A resume continues the learning-rate schedule its checkpoint was trained on, whatever config.json says; and a
process that may restart for another OpenMP policy says its lines once."""
import json
import shutil

import pytest
from conftest import run_cli, tiny_cli_args

from depthlab.checkpoint import read_metadata


def _lrs(run) -> dict[int, float]:
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["step"]: r["lr"] for r in map(json.loads, lines) if "lr" in r}


def _edit(run, **train):
    cfg = json.loads((run / "config.json").read_text())
    cfg["train"].update(train)
    (run / "config.json").write_text(json.dumps(cfg))


@pytest.mark.slow
@pytest.mark.parametrize("edited", [40, 1_000_000_000])
def test_a_config_json_schedule_the_checkpoint_never_had_does_not_move_the_rate(tmp_path, tiny_text_file, capsys,
                                                                                edited):
    # 40: what a resume with --train.max_iters 40 writes to config.json before its first checkpoint (a session killed
    # then leaves it); 1e9: a hand edit. Either way the weights at step 20 were trained on a decay ending at 20.
    run = tmp_path / "run"
    args = tiny_cli_args(tiny_text_file, run, train__warmup_iters=2, train__log_interval=1)
    assert run_cli(capsys, "train", *args)[0] == 0
    same = tmp_path / "same"
    shutil.copytree(run, same)
    _edit(run, max_iters=edited)
    rc, out, err = run_cli(capsys, "train", "--resume", str(run), "--train.max_iters", "40")
    assert rc == 0, err
    assert (f"resume: {run / 'config.json'} holds a schedule the checkpoint step-000020 was not trained with "
            f"(train.max_iters 20 -> {edited}; checkpoint -> config.json") in err
    assert "the learning rate stays at train.min_lr 0.0001 (the decay ended at step 20)" in err
    assert run_cli(capsys, "train", "--resume", str(same), "--train.max_iters", "40")[0] == 0
    lrs = _lrs(run)
    assert all(lrs[s] == pytest.approx(1e-4) for s in range(21, 41))  # was 3e-3 (edited 1e9) / 1.1e-3 (40) at 21
    assert lrs == _lrs(same)


@pytest.mark.slow
def test_every_checkpoint_header_holds_the_time_plan_it_was_trained_on(tmp_path, tiny_text_file, capsys):
    run = tmp_path / "run"
    args = tiny_cli_args(tiny_text_file, run, train__max_iters=100000, train__max_time=3, train__eval_interval=50)
    assert run_cli(capsys, "train", *args)[0] == 0
    plan = json.loads((run / "config.json").read_text())["resolved"]["plan"]
    assert plan["max_iters"] < 100000  # the time limit planned an earlier end
    newest = json.loads((run / "checkpoints" / "manifest.json").read_text())["checkpoints"][-1]["name"]
    assert json.loads(read_metadata(run / "checkpoints" / f"{newest}.safetensors")["plan"]) == plan
    rc, out, err = run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, tmp_path / "plain"))
    assert rc == 0
    assert read_metadata(tmp_path / "plain" / "checkpoints" / "step-000020.safetensors")["plan"] == "null"


def test_lines_before_an_openmp_restart_are_left_to_the_restarted_process(tmp_path, tiny_text_file, monkeypatch):
    from depthlab import trainer as trainer_mod
    from depthlab.config import RunConfig
    from depthlab.training.autotune import Restart

    run = tmp_path / "run"
    cfg = RunConfig.from_dict({"data": {"path": str(tiny_text_file)},
                               "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16},
                               "train": {"max_iters": 2, "out_dir": str(run), "threads": 1}})

    def restart(*a, log, **k):
        log("auto settings: measured")
        raise Restart({"OMP_WAIT_POLICY": "ACTIVE"}, None)

    monkeypatch.setattr(trainer_mod, "tune", restart)
    said: list[str] = []
    with pytest.raises(Restart):
        trainer_mod.Trainer(cfg, log=said.append, restart_ok=True)
    assert said == []  # the restarted process says them
    with pytest.raises(Restart):
        trainer_mod.Trainer(cfg, log=said.append, restart_ok=False)  # a Python caller: said as they come
    assert "auto settings: measured" in said
