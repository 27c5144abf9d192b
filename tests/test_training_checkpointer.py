"""training.checkpointer: a new run from another run's weights (``init_from``)."""


import torch

from depthlab import train
from depthlab.sample import load_run
from depthlab.trainer import Trainer

from conftest import QUIET, tiny_config


def test_init_from_starts_new_run_with_old_weights(tmp_path, tiny_text_file):
    old = train(tiny_config(tmp_path / "old", tiny_text_file), **QUIET)
    t = Trainer(tiny_config(tmp_path / "new", tiny_text_file), init_from=str(old), **QUIET)
    m, _ = load_run(old)
    assert torch.equal(t.raw_model.lm_head.weight, m.lm_head.weight) and t.step == 0
