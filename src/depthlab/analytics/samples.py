"""Samples during training: watch the text get better as the loss falls.

Every ``train.sample_interval`` steps the model continues a fixed prompt for
``train.sample_tokens`` tokens (temperature 0.8, top-k 200, a generator seeded with the run's
seed, so two samples differ only because the weights did). The training RNG, the model's mode
and the trajectory are untouched. Each sample is printed, written to ``metrics.jsonl``
(``kind: sample``, ``step``, ``text``) and to TensorBoard as text.
"""

from __future__ import annotations

import torch

from ..callbacks import Callback, RunView, StepInfo
from ..errors import DepthlabError

TEMPERATURE = 0.8
TOP_K = 200


def sample_prompt(vocab: list[str]) -> str:
    """The fixed prompt: a newline when the vocabulary has one, else its first symbol."""
    return "\n" if "\n" in vocab else vocab[0]


class SampleCallback(Callback):
    """Print and record a short sample every ``interval`` steps (main process only).

    Args:
        interval: steps between samples (> 0).
        tokens: tokens per sample (> 0).
    """

    def __init__(self, interval: int, tokens: int = 100):
        self.interval = int(interval)
        self.tokens = int(tokens)
        self.failed = False  # a model.source model that cannot sample (its batch size written into its code)

    def on_step_end(self, run: RunView, info: StepInfo) -> None:
        """Sample when the step is a multiple of ``interval``; a model whose forward fails on the sample's batch of 1
        is said once and trains on without samples (the samples are a view of the run, not part of it)."""
        if run.is_main and info.step % self.interval == 0 and not self.failed:
            try:
                self.sample(run, info.step)
            except DepthlabError as e:
                self.failed = True
                run.log(f"warning: samples skipped from step {info.step} on, training goes on: {e} "
                        "(--train.sample_interval 0 turns the samples off)")

    def sample(self, run: RunView, step: int) -> str:
        """Generate, print and record one sample; returns its text (prompt included)."""
        from ..sample import generate

        tok = run.corpus.tokenizer
        prompt = sample_prompt(tok.vocab)
        g = torch.Generator(device=run.device).manual_seed(run.cfg.train.seed)
        idx = torch.tensor([tok.encode(prompt)], dtype=torch.long, device=run.device)
        out = generate(run.raw_model, idx, self.tokens, TEMPERATURE, TOP_K, generator=g,
                           block_size=run.cfg.model.block_size, vocab_size=tok.vocab_size)
        text = tok.decode(out[0].tolist())
        run.metrics.log("sample", {"step": step, "text": text})
        run.metrics.text("sample", text, step)
        run.log(f"--- sample at step {step} ---\n{text}\n---")
        return text
