"""The report's header of a model.source run describes that model, not depthlab's GPT defaults."""
import re

import pytest

from conftest import QUIET
from depthlab.report.html import build_report
from depthlab.trainer import Trainer
from test_usermodel import MODEL, _cfg


def _subtitle(page: str) -> str:
    return re.search(r'<p class="subtitle">([^<]*)<', page).group(1)


@pytest.mark.slow
def test_a_source_runs_report_header_names_its_model_and_parameter_count(tmp_path, tiny_text_file):
    model_file = tmp_path / "mine.py"
    model_file.write_text(MODEL)
    t = Trainer(_cfg(tmp_path / "r", tiny_text_file, f"{model_file}:MyGPT", max_iters=4), **QUIET)
    t.fit()
    n = sum(p.numel() for p in t.model.parameters())
    vocab = t.cfg.model.vocab_size
    page = build_report(tmp_path / "r").read_text()
    assert _subtitle(page) == f"model.source {model_file}:MyGPT, {n:,} parameters, block_size 16, vocab_size {vocab}"
    assert "variant prenorm" not in page.split("<section")[0] and "n_embd 128" not in page.split("<section")[0]


@pytest.mark.slow  # over a second: the fast tier stays under 3 min
def test_a_source_runs_configuration_table_leaves_out_depthlabs_gpt_defaults(tmp_path, tiny_text_file):
    """A new user's pass: the Configuration section of such a run listed n_layer 4, n_embd 128, variant prenorm,
    init gpt2 (config.json's untouched defaults), none of them the model that ran."""
    from depthlab.report.html import config_rows
    from depthlab.report.plots import RunData

    model_file = tmp_path / "mine.py"
    model_file.write_text(MODEL)
    Trainer(_cfg(tmp_path / "r", tiny_text_file, f"{model_file}:MyGPT", max_iters=2, eval_interval=2), **QUIET).fit()
    rows = dict(config_rows(RunData(tmp_path / "r"), "model"))
    assert rows == {"vocab_size": rows["vocab_size"], "block_size": 16, "init.n_layer": 2,
                    "source": f"{model_file}:MyGPT"}
    page = build_report(tmp_path / "r").read_text()
    assert "n_embd" not in page and "prenorm" not in page


def test_a_source_runs_parameter_count_is_its_parameters_not_its_buffers(tmp_path):
    """A new user's pass: a model with a causal mask buffer (register_buffer, 2 blocks x 32 x 32) trained with
    30,721 parameters (summary.json, the training line), and its report's header said 32,769 parameters: the
    weights file's every number, buffers included."""
    import json

    import torch
    from safetensors.torch import save_file

    from depthlab.report.plots import RunData

    run = tmp_path / "r"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"model": {"source": "m.py:Net", "block_size": 3, "vocab_size": 5}}))
    save_file({"w": torch.zeros(2, 5), "mask": torch.ones(3, 3)}, str(run / "checkpoints" / "best.safetensors"))
    assert RunData(run).model_line() == ("model.source m.py:Net, 19 numbers in its weights file (parameters and "
                                         "buffers), block_size 3, vocab_size 5")  # a running run: no summary yet
    (run / "summary.json").write_text(json.dumps({"params": 10}))
    assert RunData(run).model_line() == "model.source m.py:Net, 10 parameters, block_size 3, vocab_size 5"
