"""Reports say bits per character for every tokenizer (nats/ln 2 only when a token is a character)."""

import json
import math

from conftest import QUIET, TINY_TEXT, tiny_config

from depthlab import train
from depthlab.report.html import build_report
from depthlab.report.plots import RunData


def test_bpe_report_shows_bits_per_character_not_per_token(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text(TINY_TEXT * 3, encoding="utf-8")
    cfg = tiny_config(tmp_path / "bpe", text, train=dict(max_iters=10, eval_interval=5))
    cfg.data.tokenizer, cfg.data.vocab_size = "bpe", 300
    run = train(cfg, **QUIET)
    s = json.loads((run / "summary.json").read_text())
    rd = RunData(run)
    assert rd.unit == "token"
    assert abs(rd.bits_per_char(s["best_val_loss"]) - s["best_val_bpc"]) < 1e-9
    assert abs(s["best_val_bpc"] - s["best_val_loss"] / math.log(2)) > 0.05  # a token is more than a character
    page = build_report(run).read_text()
    assert f"nats/token = {s['best_val_bpc']:.3f} bits/char" in page


def test_char_report_keeps_nats_over_ln2(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "c", tiny_text_file, train=dict(max_iters=5, eval_interval=5)), **QUIET)
    s = json.loads((run / "summary.json").read_text())
    rd = RunData(run)
    assert rd.unit == "char" and rd.bits_per_char(s["best_val_loss"]) == s["best_val_loss"] / math.log(2)
    assert f"nats/char = {s['best_val_loss'] / math.log(2):.3f} bits/char" in build_report(run).read_text()
