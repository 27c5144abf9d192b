"""Stateful property test of resume: random kills, resumes and extensions end where one run ends.

Any sequence of "train until killed after k steps", "extend max_iters" and "resume" must finish
with the same weights and the same evaluation lines as one uninterrupted run to the final
``max_iters``. The kill is an exception raised from a callback between steps (the process dies
with whatever was on disk then); kills *during* a checkpoint write are covered by
``test_reliability.py::test_twenty_kills_during_checkpoint_writes_always_resume``. The schedule's
decay length is fixed (``lr_decay_iters``) so that extending ``max_iters`` does not change the
learning rate of steps already planned, and ``max_iters`` stays a multiple of ``eval_interval`` so
that both runs evaluate at the same steps.
"""

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import QUIET, TINY_TEXT, tiny_config
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from depthlab.callbacks import Callback
from depthlab.checkpoint import latest_checkpoint, payload_sha256
from depthlab.trainer import Trainer

EVAL = 5
DECAY = 60


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs."""


class KillAfter(Callback):
    def __init__(self, steps: int):
        self.left = steps

    def on_step_end(self, run, info):
        self.left -= 1
        if self.left == 0:
            raise Killed()


def _cfg(out, text, max_iters, resume):
    return tiny_config(out, text, model=dict(n_layer=1, n_embd=16, block_size=8),
                       train=dict(max_iters=max_iters, eval_interval=EVAL, eval_iters=1, lr_decay_iters=DECAY,
                                  warmup_iters=3, keep_last=1, resume=resume, batch_size=4))


def _evals(run):
    lines = (Path(run) / "metrics.jsonl").read_text().splitlines()
    return [(r["step"], r["train_loss"], r["val_loss"], r["tokens_seen"]) for r in map(json.loads, lines)
            if r.get("kind") == "eval"]


def _final_weights(run):
    entry = latest_checkpoint(run)
    return payload_sha256(Path(run) / "checkpoints" / f"{entry['name']}.safetensors"), entry["step"]


class ResumeMachine(RuleBasedStateMachine):
    @initialize(first=st.integers(1, 4))
    def start(self, first):
        self.tmp = Path(tempfile.mkdtemp(prefix="depthlab-stateful-"))
        self.text = self.tmp / "t.txt"
        self.text.write_text(TINY_TEXT)
        self.run = self.tmp / "run"
        self.max_iters = first * EVAL
        self.started = False

    def _train(self, callbacks):
        t = Trainer(_cfg(self.run, self.text, self.max_iters, resume=self.started), callbacks=callbacks, **QUIET)
        self.started = True
        try:
            t.fit()
        except Killed:
            pass
        finally:
            t.metrics.close()

    @rule(k=st.integers(1, 12))
    def train_until_killed(self, k):
        self._train([KillAfter(k)])

    @precondition(lambda self: self.max_iters + EVAL <= DECAY)
    @rule(more=st.integers(1, 3))
    def extend(self, more):
        self.max_iters += more * EVAL

    def teardown(self):
        """Resume to the end, then compare with one uninterrupted run."""
        try:
            if hasattr(self, "run"):
                self._train([])
                ref = self.tmp / "ref"
                Trainer(_cfg(ref, self.text, self.max_iters, resume=False), **QUIET).fit()
                assert _final_weights(self.run) == _final_weights(ref)
                assert _evals(self.run) == _evals(ref)
        finally:
            if hasattr(self, "tmp"):
                shutil.rmtree(self.tmp, ignore_errors=True)


_COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def test_resume_sequences_fast():
    ResumeMachine.TestCase.settings = settings(max_examples=3, stateful_step_count=4, **_COMMON)
    ResumeMachine.TestCase().runTest()


@pytest.mark.slow
def test_resume_sequences_many():
    ResumeMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=8, **_COMMON)
    ResumeMachine.TestCase().runTest()
