"""The trainer of parts: the config it is given is never changed, and the parts it is wired from."""

import copy
import json
import time
import types

import pytest
import torch
from conftest import QUIET, tiny_config
from depthlab.budget import FIT_STEPS
from depthlab.callbacks import Callback
from depthlab.config import RunConfig
from depthlab.trainer import Interrupted, Trainer, train
from depthlab.training.protocol import ModelPort


@pytest.fixture
def fake_clock(monkeypatch):
    """The trainer's clock advances 10 ms per reading: fit_to_time plans deterministically."""
    import depthlab.trainer as tr

    now = [1000.0]

    def tick():
        now[0] += 0.01
        return now[0]

    monkeypatch.setattr(tr, "time", types.SimpleNamespace(time=tick, perf_counter=time.perf_counter))
    return now


class _StopAfter(Callback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, run, info):
        if info.step == self.step:
            run.request_stop()


@pytest.mark.parametrize("fit_to_time", [True, False])
def test_the_config_given_is_unchanged_by_a_run_and_its_resume(tmp_path, tiny_text_file, fake_clock, fit_to_time):
    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=100_000, max_time=6.0, eval_interval=50,
                                                                 fit_to_time=fit_to_time, warmup_iters=50_000))
    asked = copy.deepcopy(cfg)
    t = Trainer(cfg, callbacks=[_StopAfter(FIT_STEPS + 30)], **QUIET)
    with pytest.raises(Interrupted):
        t.fit()
    assert cfg == asked and t.cfg.train.max_iters == 100_000 == t.cfg.train.warmup_iters * 2
    if fit_to_time:  # the plan is beside the config: a lower end and a shortened warmup
        assert FIT_STEPS < t.schedule.max_iters < 100_000 and t.schedule.warmup_iters < 50_000
    else:
        assert t.budget.plan is None and t.schedule.max_iters == 100_000
    again = RunConfig.from_dict(json.loads((tmp_path / "r" / "config.json").read_text()))
    assert again.train.max_iters == 100_000 and again.train.warmup_iters == 50_000  # config.json: as asked
    again.train.resume = True  # (building the resume config, before any run sees it)
    asked_again = copy.deepcopy(again)
    r = Trainer(again, **QUIET)
    assert (r.schedule.max_iters == t.schedule.max_iters) and r.step == FIT_STEPS + 30
    r.fit()
    assert again == asked_again and cfg == asked
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["stopped_by"] == "max_time"


def test_run_config_is_a_copy_with_the_corpus_vocabulary_and_the_run_directory(tmp_path, tiny_text_file):
    cfg = tiny_config(None, tiny_text_file)
    cfg.train.out_dir = str(tmp_path / "x")
    t = Trainer(cfg, **QUIET)
    assert cfg.model.vocab_size != t.cfg.model.vocab_size == len(t.corpus.tokenizer.vocab)
    assert t.cfg.train.out_dir == str(tmp_path / "x") and t.cfg is not cfg


def test_resume_state_is_the_union_of_the_parts_state(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "s", tiny_text_file), **QUIET)
    st = torch.load(run / "checkpoints" / "step-000020.state.pt", weights_only=True)
    assert {"step", "tokens_seen", "nonfinite_skips", "best_val_loss", "best_step", "evals_without_improvement",
            "lr_anchor", "optimizer", "rng", "wall_time_s", "corpus_sha256"} <= set(st)
    assert st["step"] == 20 and st["tokens_seen"] == 20 * 4 * 16 and st["lr_anchor"] is None


class _Tiny(torch.nn.Module):
    """A model that is not depthlab's GPT: forward(idx) -> logits only."""

    def __init__(self, vocab=11, dim=8):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.mix = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, idx):
        return self.head(torch.relu(self.mix(self.emb(idx))))


def test_model_port_speaks_the_protocol_to_any_module():
    torch.manual_seed(0)
    m = _Tiny()
    port = ModelPort(m)
    x = torch.randint(0, 11, (2, 5))
    loss = port.loss(m, x, x)
    want = torch.nn.functional.cross_entropy(m(x).reshape(-1, 11), x.reshape(-1))
    assert not port.native and torch.allclose(loss, want)
    assert port.hidden_matrices() == [m.mix.weight]  # not the embedding, not the head
    assert port.num_params() == sum(p.numel() for p in m.parameters())
    port.set_attention(True)  # an extra only depthlab's GPT has: a no-op here
