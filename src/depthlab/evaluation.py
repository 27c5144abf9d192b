"""Loss over a whole split: every target token of the val text once (``train.final_validation``).

The evaluations during training average ``eval_iters`` batches of windows drawn at fixed random
offsets: cheap, and the same windows every time, so two evaluations compare fairly, but a sample.
On Tiny Shakespeare's val split the same weights (the default recipe after 2,000 steps) read
1.538 nats on its 20 x 16 windows (41k of 111k tokens), 1.511 on 50 x 16 and 1.503 on the whole
split (measured), so the figure a run ends on should come from the whole split. This is litgpt's
``eval.final_validation`` and what Lightning's validation loop does by default.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from .units import LN2

__all__ = ["MAX_TOKENS", "SplitLoss", "Stopped", "describe", "forward_batches", "split_loss", "split_windows"]


class Stopped(Exception):
    """:func:`split_loss` was asked to stop (its ``stop`` said so between two batches): no loss."""

#: Most target tokens one whole-split evaluation reads: past this, windows evenly spaced over the
#: split stand in for it (a 100 MB corpus's val split would otherwise take minutes on a CPU).
MAX_TOKENS = 1 << 20


@dataclass
class SplitLoss:
    """Result of :func:`split_loss`.

    Attributes:
        loss: mean cross-entropy per target token, nats.
        bpc: bits per character of the text those tokens decode to (loss x tokens / characters / ln 2).
        tokens: target tokens read. of_tokens: target tokens in the split (``len(split) - 1``).
    """

    loss: float
    bpc: float
    tokens: int
    of_tokens: int


def split_windows(n_tokens: int, block_size: int, max_tokens: int = MAX_TOKENS) -> list[int]:
    """Start offsets of the windows that read a split of ``n_tokens`` tokens.

    Consecutive non-overlapping windows of ``block_size`` inputs (the targets are the inputs
    shifted by one), the last one shorter when ``n_tokens - 1`` is not a multiple; so every target
    token is read once. When that is more than ``max_tokens`` targets, ``max_tokens // block_size``
    of the full windows evenly spaced over the split instead.

    Raises:
        ValueError: if the split has fewer than 2 tokens or block_size < 1.
    """
    if n_tokens < 2 or block_size < 1:
        raise ValueError(f"a split of {n_tokens} tokens has nothing to predict (block_size {block_size})")
    n_windows = math.ceil((n_tokens - 1) / block_size)
    if (n_tokens - 1) <= max_tokens:
        return [i * block_size for i in range(n_windows)]
    full = (n_tokens - 1) // block_size
    keep = max(1, max_tokens // block_size)
    return [int(i) * block_size for i in np.linspace(0, full - 1, keep).round().astype(np.int64)]


def _batches(starts: list[int], n_targets: int, block_size: int, batch_size: int) -> list[tuple[list[int], int]]:
    """(window starts, window length) of each forward: full windows ``batch_size`` at a time, then
    the short last window alone (only the last can be short), so every batch is rectangular."""
    full = [s for s in starts if s + block_size <= n_targets]
    out = [(full[i:i + batch_size], block_size) for i in range(0, len(full), batch_size)]
    if starts[-1] + block_size > n_targets:
        out.append(([starts[-1]], n_targets - starts[-1]))
    return out


def forward_batches(n_tokens: int, block_size: int, batch_size: int, max_tokens: int = MAX_TOKENS) -> int:
    """Forward passes :func:`split_loss` makes over a split of ``n_tokens`` tokens (what
    ``train.fit_to_time`` leaves time for).

    Raises:
        ValueError: as :func:`split_windows`.
    """
    return len(_batches(split_windows(n_tokens, block_size, max_tokens), n_tokens - 1, block_size, batch_size))


@torch.no_grad()
def split_loss(model: torch.nn.Module, tokens: np.ndarray, block_size: int, batch_size: int,
               token_chars: np.ndarray, device: torch.device, ctx=None,
               max_tokens: int = MAX_TOKENS, loss_fn=None, stop=None) -> SplitLoss:
    """Mean loss of ``model`` over the windows of :func:`split_windows`, in eval mode.

    Args:
        model: a GPT: ``model(x, y)`` with x, y (B, T) int64 returns ``(logits, loss)``, loss the
            mean cross-entropy over B x T targets in nats. Its train/eval mode is restored after.
        tokens: (N,) token ids of the split.
        block_size: window length T. batch_size: windows per forward (the training micro-batch fits memory).
        token_chars: (V,) characters each token id decodes to (1 for every char token).
        device: where the model is. ctx: autocast context for the forward, or None.
        max_tokens: see :func:`split_windows`.
        loss_fn: ``loss_fn(model, x, y)`` -> the mean loss (0-d) for a model that does not take
            targets (``depthlab.training.protocol.ModelPort.loss``); None = ``model(x, y)[1]``.
        stop: ``stop()`` -> True to give up between two batches (a Ctrl-C caught by the trainer), or None.

    Returns:
        :class:`SplitLoss`, the loss weighted by target tokens (a short last window counts for its length).

    Raises:
        ValueError: as :func:`split_windows`. Stopped: ``stop()`` said so.
    """
    starts = split_windows(len(tokens), block_size, max_tokens)
    was_training = model.training
    model.eval()
    total, count, chars = 0.0, 0, 0
    data = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
    n_targets = len(tokens) - 1
    try:
        for batch, length in _batches(starts, n_targets, block_size, batch_size):
            if stop is not None and stop():
                raise Stopped
            x = torch.stack([data[s:s + length] for s in batch]).to(device)
            y = torch.stack([data[s + 1:s + 1 + length] for s in batch])
            with ctx if ctx is not None else nullcontext():
                loss = model(x, y.to(device))[1] if loss_fn is None else loss_fn(model, x, y.to(device))
            total += float(loss.float().item()) * y.numel()
            count += y.numel()
            chars += int(token_chars[y.numpy()].sum())
    finally:
        model.train(was_training)
    loss = total / count
    return SplitLoss(loss=loss, bpc=total / max(chars, 1) / LN2, tokens=count, of_tokens=n_targets)


def describe(result: SplitLoss, block_size: int) -> str:
    """One log line's worth, e.g. ``1.5031 nats (2.168 bits/char) over all 111,488 val tokens``."""
    part = ("all" if result.tokens == result.of_tokens
            else f"{result.tokens:,} (evenly spaced {block_size}-token windows) of")
    return f"{result.loss:.4f} nats ({result.bpc:.3f} bits/char) over {part} {result.of_tokens:,} val tokens"
