"""What a fresh user broke (session 8): sizes that cannot fit, sample's lines, resume's log clock."""

import json

import pytest
from conftest import QUIET, tiny_cli_args, tiny_config

from depthlab.cli import main
from depthlab.config import RunConfig
from depthlab.trainer import Trainer, check_memory, training_memory_bytes


def test_sizes_that_cannot_fit_are_refused_before_anything_is_written(tmp_path, tiny_text_file, capsys):
    out = tmp_path / "huge"
    rc = main(["train", *tiny_cli_args(tiny_text_file, out, train__batch_size=1000000, model__n_layer=1)])
    err = capsys.readouterr().err
    assert rc == 2 and "GiB" in err and "train.batch_size" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_memory_estimate_follows_korthikanti():
    cfg = RunConfig()
    m, t = cfg.model, cfg.train
    B, T, C, L, nh, V = t.batch_size, m.block_size, m.n_embd, m.n_layer, m.n_head, 65
    acts = 2 * L * T * B * C * (34 + 5 * nh * T / C)
    params = L * C * C * (4 + 2 * m.ff_mult) + (V + T) * C
    assert training_memory_bytes(cfg, V) == pytest.approx(acts + 12 * B * T * V + 16 * params)
    import torch

    check_memory(cfg, V, torch.device("cpu"))  # the default recipe fits


def test_sample_error_is_one_line_and_info_line_only_when_text_starts(tmp_path, tiny_text_file, capsys):
    out = tmp_path / "r"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=5, train__eval_interval=5)]) == 0
    capsys.readouterr()
    assert main(["sample", str(out), "--prompt", "東京"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "vocabulary" in err
    assert main(["sample", str(out), "--device", "cuda:7"]) == 2
    assert "----device" not in capsys.readouterr().err


def test_resumed_log_lines_show_total_training_time(tmp_path, tiny_text_file):
    cfg = dict(max_iters=10, eval_interval=5, log_interval=5)
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=cfg), **QUIET)
    t.fit()
    lines = []
    r = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, max_iters=20, resume=True)),
                log=lines.append)
    r.wall_before += 1000.0  # as if the first session had trained for 1000 s
    r.fit()
    step_lines = [x for x in lines if x.startswith("step 15/20")]
    assert step_lines and float(step_lines[0].rsplit("|", 1)[1].strip().rstrip("s")) >= 1000.0
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["wall_time_s"] >= 1000.0


def test_config_file_errors_name_the_file(tmp_path, capsys):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("model:\n  n_layer: 2 # \xe9\n".encode("latin-1"))
    assert main(["train", "-c", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "not UTF-8" in err
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert main(["train", "-c", str(empty)]) == 2
    assert f"config file {empty} is empty" in capsys.readouterr().err


def test_resume_repairs_a_corrupt_best_from_its_step_checkpoint(tmp_path, tiny_text_file):
    from depthlab.sample import load_run

    cfg = dict(max_iters=10, eval_interval=5, keep_last=5)
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=cfg), **QUIET)
    t.fit()
    ck = tmp_path / "r" / "checkpoints"
    best_step = json.loads((ck / "manifest.json").read_text())["best"]["step"]
    (ck / "best.safetensors").write_bytes(b"x")
    lines = []
    Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(cfg, max_iters=15, resume=True)),
            log=lines.append).fit()
    assert any("best.safetensors was corrupt; restored from" in x for x in lines)
    load_run(tmp_path / "r")  # verifies again
    assert (ck / "best.safetensors").stat().st_size > 100 and best_step in (5, 10, 15)


def test_metrics_lines_are_strict_json_with_nested_non_finite_values(tmp_path):
    from depthlab.rundir import MetricsWriter, read_metrics

    w = MetricsWriter(tmp_path, tensorboard=False)
    w.log("probe", {"step": 1, "rank_measure": [0.5, float("nan")], "deep": {"x": [float("inf")]}})
    w.close()
    line = (tmp_path / "metrics.jsonl").read_text()
    json.loads(line, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    r = read_metrics(tmp_path, "probe")[0]
    assert r["rank_measure"] == [0.5, "nan"] and r["deep"] == {"x": ["inf"]}
