"""depthlab coordcheck: the step-1 identity with the init probe, slopes, verdicts, the command line."""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import assert_clean_error, run_cli, tiny_config
from depthlab.analytics.coordcheck import (STABLE_SLOPE, attention_logits_rms, coordcheck, loglog_slope,
                                           parse_axis, slope_verdict)
from depthlab.analytics.probe import probe_at_init
from depthlab.config import RunConfig
from depthlab.errors import DepthlabError

TINY = {"n_layer": 2, "n_head": 2, "n_embd": 16, "block_size": 16}


def _cfg(tmp_path, path, seed=1337, **model):
    return tiny_config(tmp_path / "unused", path, model={**TINY, **model}, train={"seed": seed})


@pytest.mark.parametrize("variant", ["prenorm", "plain"])
def test_step1_is_the_init_probes_last_block_rms(tmp_path, tiny_text_file, variant):
    cfg = _cfg(tmp_path, tiny_text_file, variant=variant)
    res = coordcheck(cfg, ("model.n_layer", [1, 2]), steps=1, seeds=2)
    for L in (1, 2):
        per_seed = []
        for k in range(2):
            c = _cfg(tmp_path, tiny_text_file, seed=cfg.train.seed + k, variant=variant, n_layer=L)
            per_seed.append(probe_at_init(c)["layers"][-1]["act_rms"])
        row = next(r for r in res["rows"] if r["axis_value"] == L)
        assert row["step"] == 1
        assert row["resid_rms"] == pytest.approx(sum(per_seed) / 2, rel=1e-12, abs=0)
        assert row["resid_rms_std"] == pytest.approx(abs(per_seed[0] - per_seed[1]) / 2, rel=1e-9, abs=1e-15)


def test_steps_after_the_first_train_the_model(tmp_path, tiny_text_file):
    cfg = tiny_config(tmp_path / "unused", tiny_text_file, model=TINY,
                      train={"warmup_iters": 0, "learning_rate": 1e-1, "optimizer": "adamw"})
    rows = coordcheck(cfg, ("model.n_layer", [1, 2]), steps=2)["rows"]
    for L in (1, 2):
        s1, s2 = (next(r for r in rows if r["axis_value"] == L and r["step"] == s) for s in (1, 2))
        assert s2["logits_rms"] != s1["logits_rms"]  # an update happened between the measurements


def test_attention_logits_rms_of_known_queries_and_keys():
    # q = 1 everywhere, key j = (j + 1) everywhere: logit(i, j) = hs (j + 1) / sqrt(hs) = sqrt(hs) (j + 1),
    # and only j <= i is visible: over T = 3 the squares (j + 1)^2 are 1; 1, 4; 1, 4, 9 (mean 20 / 6)
    B, T, nh, hs = 2, 3, 2, 4
    C = nh * hs
    q = torch.ones(B, T, C)
    k = torch.arange(1, T + 1, dtype=torch.float32).view(1, T, 1).expand(B, T, C)
    v = torch.full((B, T, C), 123.0)
    got = attention_logits_rms(torch.cat([q, k, v], dim=2), nh)
    assert got == pytest.approx(math.sqrt(hs) * math.sqrt(20 / 6), rel=1e-6)


def test_loglog_slope_of_a_known_power_law():
    xs = [2, 4, 8, 16]
    assert loglog_slope(xs, [3.0 * x ** -1.5 for x in xs]) == pytest.approx(-1.5, abs=1e-12)
    assert loglog_slope(xs, [0.7] * 4) == pytest.approx(0.0, abs=1e-12)
    assert loglog_slope(xs, [2.0 * x ** 0.5 for x in xs]) == pytest.approx(0.5, abs=1e-12)
    # a zero (underflow) has no logarithm: it is left out, and one point left gives no slope
    assert loglog_slope(xs, [1.0, 0.5, 0.0, 0.0]) == pytest.approx(-1.0, abs=1e-12)
    assert loglog_slope(xs, [1.0, 0.0, 0.0, None]) is None


def test_verdict_thresholds():
    t = STABLE_SLOPE
    assert t == 0.25
    assert slope_verdict([0.24, -0.24, 0.0]) == "stable"
    assert slope_verdict([0.1, t]) == "grows"
    assert slope_verdict([-0.1, -t]) == "vanishes"
    assert slope_verdict([0.3, -0.5]) == "vanishes"  # the larger excursion decides
    assert slope_verdict([0.6, -0.5]) == "grows"
    assert slope_verdict([None, 0.1]) == "stable"
    assert slope_verdict([0.0], zero=True) == "vanishes"
    assert slope_verdict([0.0], zero=True, nonfinite=True) == "grows"
    assert slope_verdict([0.5], threshold=1.0) == "stable"


def test_bare_stack_vanishes_and_prenorm_is_stable_along_depth(tmp_path, tiny_text_file):
    cfg = _cfg(tmp_path, tiny_text_file, norm="none", n_embd=32)
    res = coordcheck(cfg, ("model.n_layer", [1, 2, 4]), {"model.variant": ["plain", "prenorm"]}, steps=1)
    assert res["verdicts"] == {"plain": "vanishes", "prenorm": "stable"}
    plain = [r["resid_rms"] for r in res["rows"] if r["label"] == "plain"]
    assert plain[0] > plain[1] > plain[2]  # x = S(x): every block multiplies the scale by its small gain


def test_cli_json_keys(capsys, tiny_text_file):
    rc, out, err = run_cli(capsys, "coordcheck", "--axis", "model.n_layer=1,2", "--grid", "model.variant=plain,prenorm",
                           "--data.path", str(tiny_text_file), "--model.n_embd", "16", "--model.n_head", "2",
                           "--model.block_size", "16", "--steps", "2", "--train.optimizer", "adamw", "--json")
    assert rc == 0, err
    res = json.loads(out)
    assert set(res) >= {"rows", "verdicts", "slopes", "axis"}
    assert len(res["rows"]) == 2 * 2 * 2  # variants x axis values x steps
    assert set(res["verdicts"]) == {"plain", "prenorm"}
    assert set(res["verdicts"].values()) <= {"stable", "grows", "vanishes"}
    for r in res["rows"]:
        assert all(r[q] > 0 for q in ("resid_rms", "attn_logits_rms", "logits_rms"))
        assert 0 <= r["attn_logits_block"] < r["axis_value"]


@pytest.mark.parametrize("axis, needles", [
    ("model.n_layers=2,4", ["--axis model.n_layers", "not a numeric config field", "model.n_layer"]),
    ("model.variant=plain,prenorm", ["not a numeric config field", "--grid"]),
    ("model.n_layer=4", ["at least two different values", "e.g. --axis model.n_layer=2,4,8,16"]),
    ("model.n_layer=4", ["at least two different values"]),
    ("model.n_layer=2,x", ["'x' is not an integer", "e.g. --axis"]),
    ("model.n_layer=0,2", ["must be > 0"]),
    ("model.n_layer", ["expected FIELD=V1,V2,..."]),
])
def test_bad_axis_is_one_line_naming_the_fix(capsys, axis, needles):
    rc, _, err = run_cli(capsys, "coordcheck", "--axis", axis)
    assert_clean_error(rc, err, *needles)


def test_missing_axis_and_bad_steps(capsys, tiny_text_file):
    rc, _, err = run_cli(capsys, "coordcheck")
    assert_clean_error(rc, err, "coordcheck needs --axis FIELD=V1,V2")
    rc, _, err = run_cli(capsys, "coordcheck", "--axis", "model.n_layer=1,2", "--steps", "0",
                         "--data.path", str(tiny_text_file))
    assert_clean_error(rc, err, "--steps must be an integer from 1")


def test_parse_axis_types_values():
    assert parse_axis("model.n_layer=2,4,8") == ("model.n_layer", [2, 4, 8])
    assert parse_axis("train.learning_rate=1e-3,3e-3") == ("train.learning_rate", [1e-3, 3e-3])
    assert parse_axis("model.init.depth=1,2") == ("model.init.depth", [1, 2])
    with pytest.raises(DepthlabError, match=r"no --model.source is given; depthlab's GPT has no numeric field depth"):
        coordcheck(tiny_config("unused", None, model=TINY), ("model.init.depth", [1, 2]))


USER_MODEL = '''
import torch, torch.nn as nn

class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc = nn.Linear(c, c)
    def forward(self, x):
        return x + self.fc(x)

class Stack(nn.Module):
    def __init__(self, vocab_size, depth=2, c=16):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, c)
        self.blocks = nn.ModuleList([Block(c) for _ in range(depth)])
        self.head = nn.Linear(c, vocab_size)
    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(x)

class Broken(Stack):
    def forward(self, idx):
        raise ValueError("boom")

class NoBlocks(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, 8)
        self.head = nn.Linear(8, vocab_size)
    def forward(self, idx):
        return self.head(self.emb(idx))
'''


def _own(path, source):
    return RunConfig.from_dict({"data": {"path": str(path)}, "model": {"source": source, "block_size": 16},
                                "train": {"optimizer": "adamw", "dtype": "float32"}})


def test_own_model_with_blocks_and_refusal_without(tmp_path, tiny_text_file):
    f = tmp_path / "mine.py"
    f.write_text(USER_MODEL, encoding="utf-8")
    cfg = _own(tiny_text_file, f"{f}:Stack")
    res = coordcheck(cfg, ("model.init.depth", [1, 2]), steps=1)
    rows = res["rows"]
    assert [r["axis_value"] for r in rows] == [1, 2]
    assert all(r["attn_logits_rms"] is None and r["resid_rms"] > 0 for r in rows)  # no attn.c_attn to read
    assert list(res["verdicts"]) == [f"{f}:Stack"]
    bare = _own(tiny_text_file, f"{f}:NoBlocks")
    with pytest.raises(DepthlabError, match="coordcheck needs the model's blocks"):
        coordcheck(bare, ("train.learning_rate", [1e-3, 1e-2]), steps=1)
    with pytest.raises(DepthlabError, match="the model's forward failed on idx of shape .*ValueError: boom"):
        coordcheck(_own(tiny_text_file, f"{f}:Broken"), ("model.init.depth", [1, 2]), steps=1)
    with pytest.raises(DepthlabError, match="--axis model.init.n_layer"):
        coordcheck(cfg, ("model.n_layer", [1, 2]), steps=1)


def test_slopes_spread_and_verdicts_of_fake_measurements(tmp_path, tiny_text_file, monkeypatch):
    import depthlab.analytics.coordcheck as cc

    def fake(cfg, corpus, steps, seed):  # resid ~ L^0.5 (prenorm), plain: 0 from L = 4 on; seeds differ by 10 %
        L, k = cfg.model.n_layer, 1.0 + 0.1 * (seed - 1337)
        resid = 2.0 * L ** 0.5 * k if cfg.model.variant == "prenorm" else (0.0 if L >= 4 else 1.0)
        return [{"step": s, "resid_rms": resid * s, "attn_logits_rms": None, "attn_logits_block": None,
                 "logits_rms": 3.0 / L} for s in range(1, steps + 1)]

    monkeypatch.setattr(cc, "run_point", fake)
    res = cc.coordcheck(_cfg(tmp_path, tiny_text_file), ("model.n_layer", [1, 2, 4]),
                        {"model.variant": ["prenorm", "plain"]}, steps=2, seeds=2)
    assert res["verdicts"] == {"prenorm": "grows", "plain": "vanishes"}
    pre = [s for s in res["slopes"] if s["label"] == "prenorm"]
    assert [s["step"] for s in pre] == [1, 2]
    assert all(s["resid_rms"] == pytest.approx(0.5, abs=1e-12) and s["logits_rms"] == pytest.approx(-1.0, abs=1e-12)
               and s["attn_logits_rms"] is None for s in pre)
    row = next(r for r in res["rows"] if r["label"] == "prenorm" and r["axis_value"] == 4 and r["step"] == 2)
    assert row["resid_rms"] == pytest.approx(2 * 2 * 2 * 1.05)  # mean of the two seeds (k = 1.0, 1.1)
    assert row["resid_rms_std"] == pytest.approx(2 * 2 * 2 * 0.05)  # population std of the two


def test_an_axis_that_changes_nothing_is_unchanged_not_stable(capsys, tiny_text_file):
    # train.min_lr is read (the cosine decays to it) but moves nothing inside the warmup: the rows are identical,
    # which used to be reported as a flat slope and "stable"
    rc, out, err = run_cli(capsys, "coordcheck", "--axis", "train.min_lr=0.0001,0.001", "--data.path",
                           str(tiny_text_file), "--model.n_layer", "2", "--model.n_embd", "16", "--model.n_head", "2",
                           "--model.block_size", "16", "--steps", "2", "--train.optimizer", "adamw")
    assert rc == 0, err
    lines = out.splitlines()
    assert any(ln.startswith("prenorm: ") and ln.endswith("-> unchanged") for ln in lines), out
    assert "every value of train.min_lr measured the same numbers" in out and "-> stable" not in out
    assert lines[-1].endswith("take more --steps if it acts only later (past train.warmup_iters, or once the gradient "
                              "norm reaches train.grad_clip)")
    # train.max_time is never read here (no clock, no time plan): refused up front, not "unchanged" with advice to
    # take more steps that could not change it
    rc, _, err = run_cli(capsys, "coordcheck", "--axis", "train.max_time=10,20")
    assert_clean_error(rc, err, "train.max_time", "takes exactly --steps steps")
    rc, out, err = run_cli(capsys, "coordcheck", "--axis", "train.learning_rate=0.001,0.01",
                           "--data.path", str(tiny_text_file), "--model.n_layer", "2", "--model.n_embd", "16",
                           "--model.n_head", "2", "--model.block_size", "16", "--steps", "2",
                           "--train.optimizer", "adamw", "--train.warmup_iters", "0")
    assert rc == 0, err
    assert "unchanged" not in out  # a rate the run uses moves step 2


def test_a_data_field_as_axis_is_refused_as_data_not_as_non_numeric(capsys):
    rc, _, err = run_cli(capsys, "coordcheck", "--axis", "data.val_fraction=0.1,0.2")
    assert_clean_error(rc, err, "--axis data.val_fraction", "varies the model and its training",
                       "--data.val_fraction VALUE")
    assert "not a numeric" not in err


def test_unchanged_names_the_grid_points_it_holds_for_and_unused_grid_fields_are_refused(capsys, tiny_text_file):
    # was: "unchanged: ... train.muon_lr changes nothing" printed for a grid whose muon point did change; and
    # --grid train.eval_interval=10,20 printed two identical tables, each "stable"
    tiny = ["--data.path", str(tiny_text_file), "--model.n_layer", "2", "--model.n_embd", "16", "--model.n_head", "2",
            "--model.block_size", "16", "--steps", "2", "--train.warmup_iters", "0"]
    rc, out, err = run_cli(capsys, "coordcheck", "--axis", "train.muon_lr=0.01,0.1", "--grid",
                           "train.optimizer=adamw,muon", *tiny)
    assert rc == 0, err
    verdicts = {ln.split(":")[0]: ln.rsplit("-> ", 1)[1] for ln in out.splitlines() if "-> " in ln}
    assert verdicts["prenorm train.optimizer=adamw"] == "unchanged"
    assert verdicts["prenorm train.optimizer=muon"] != "unchanged"
    assert out.splitlines()[-1].startswith("unchanged at prenorm train.optimizer=adamw: every value of train.muon_lr "
                                           "measured the same numbers at every step")
    assert out.splitlines()[-1].endswith("it is Muon's learning rate, and Muon does not train these runs "
                                         "(train.optimizer)")
    rc, _, err = run_cli(capsys, "coordcheck", "--axis", "model.ff_mult=1,2", "--grid", "train.eval_interval=10,20",
                         *tiny)
    assert_clean_error(rc, err, "--grid train.eval_interval: the coordinate check does not read it",
                       "drop it from --grid")


@pytest.mark.parametrize("args, said", [
    (["--axis", "model.n_layer=1,2", "--model.n_layer", "5"],
     "coordcheck: model.n_layer is given both in --axis and as a flag (--model.n_layer); the --axis values replace "
     "the flag's at every point"),
    (["--axis", "model.n_layer=1,2", "--grid", "model.variant=plain,prenorm", "--model.variant=plain"],
     "coordcheck: model.variant is given both in --grid and as a flag (--model.variant)"),
    (["--axis", "model.n_layr=1,2"], "--axis model.n_layr: not a numeric config field (the slope is taken against "
                                     "its log; vary other fields with --grid); did you mean model.n_layer? choose"),
    (["--axis", "model.n_layer=1,2,2"], "--axis 'model.n_layer=1,2,2': '2' is given twice; list each value of "
                                        "model.n_layer once"),
    (["--axis", "model.n_layer=1,2", "--axis", "model.n_embd=16,32"],
     "coordcheck: --axis given 2 times (model.n_layer=1,2, model.n_embd=16,32); the check varies one field"),
    (["--axis", "model.n_layer 1,2"], "expected FIELD=V1,V2,... (did you mean --axis model.n_layer=1,2?"),
    (["--axis", "n_layer=1,2"], "did you mean model.n_layer? choose"),
])
def test_coordcheck_refuses_what_the_sweep_refuses(capsys, args, said):
    """A new user's pass: the flag was ignored silently, a typo got no suggestion, a repeated value was dropped."""
    from conftest import assert_clean_error, run_cli

    rc, out, err = run_cli(capsys, "coordcheck", *args)
    assert_clean_error(rc, err, said)
    assert out == ""
