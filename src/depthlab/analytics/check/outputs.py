"""What a forward's floating-point output is: logits, probabilities (softmax) or log-probabilities
(log_softmax) over the vocabulary, sigmoid outputs, or a softmax over the time axis. Cross-entropy applies
log-softmax itself, so any output squeezed into [0, 1] is a bug (the loss sees log-softmax of values at
most 1 apart: almost uniform, and it barely learns) while log-probabilities are harmless (log-softmax of a
log-softmax is the same)."""

from __future__ import annotations

import math
from typing import Optional

import torch

__all__ = ["output_kind", "probs_floor", "PROBABILITIES", "LOG_PROBABILITIES", "SIGMOID", "TIME_SOFTMAX",
           "BOUNDED", "PROBS_TEXT", "PROBS_FIX", "LOG_PROBS_TEXT"]

PROBABILITIES = "probabilities"
LOG_PROBABILITIES = "log-probabilities"
SIGMOID = "sigmoid"
TIME_SOFTMAX = "softmax over time"
SUM_TOL = 1e-3
"""How far from 1 a row's sum (probabilities) or its sum of exp (log-probabilities) may be."""

PROBS_TEXT = ("the forward returns probabilities (softmax over the vocabulary), not logits: cross-entropy applies "
              "log-softmax itself")
PROBS_FIX = "return the values before softmax (drop the F.softmax / .softmax at the end of forward)"
SIGMOID_TEXT = ("the forward returns sigmoid outputs (every value between 0 and 1), not logits: cross-entropy "
                "applies log-softmax over the vocabulary itself")
SIGMOID_FIX = "return the values before the sigmoid (drop the torch.sigmoid / .sigmoid() at the end of forward)"
TIME_SOFTMAX_TEXT = ("the forward returns a softmax over the time axis (dim=1: each vocabulary entry sums to 1 "
                     "along the sequence), not logits: cross-entropy applies log-softmax over the vocabulary "
                     "itself, and a softmax along time also mixes in the later positions")
TIME_SOFTMAX_FIX = ("return the values before softmax (drop the softmax(dim=1) at the end of forward); a softmax "
                    "over the vocabulary is dim=-1")
BOUNDED = {PROBABILITIES: (PROBS_TEXT, PROBS_FIX, "every output row is >= 0 and sums to 1"),
           SIGMOID: (SIGMOID_TEXT, SIGMOID_FIX, "every output is strictly between 0 and 1"),
           TIME_SOFTMAX: (TIME_SOFTMAX_TEXT, TIME_SOFTMAX_FIX,
                          "every output is >= 0 and each (sequence, vocabulary entry) sums to 1 over time")}
"""Output kinds whose values all lie in [0, 1], so the loss is floored (:func:`probs_floor`): the kind's
(what is wrong, what to change, the evidence seen)."""
LOG_PROBS_TEXT = ("the forward returns log-probabilities (log_softmax over the vocabulary): harmless, cross-entropy "
                  "of log-softmax values is the same as of the logits")


def output_kind(out: torch.Tensor) -> Optional[str]:
    """What the (B, T, V) output is, tested in this order:

    :data:`PROBABILITIES` when every row over the last axis is non-negative and sums to 1 (within
    :data:`SUM_TOL`), :data:`LOG_PROBABILITIES` when every value is <= 0 and every row's exp sums to 1,
    :data:`TIME_SOFTMAX` when every value is non-negative and sums to 1 over axis 1 (T >= 2),
    :data:`SIGMOID` when every value is strictly between 0 and 1, else None (logits). Needs at least two
    entries per row (one entry is trivially a probability)."""
    if out.dim() < 1 or out.size(-1) < 2 or not out.is_floating_point() or out.numel() == 0:
        return None
    x = out.detach().double()
    if not bool(torch.isfinite(x).all()):
        return None
    if bool((x >= 0).all()) and float((x.sum(-1) - 1).abs().max()) < SUM_TOL:
        return PROBABILITIES
    if bool((x <= 0).all()) and float((x.logsumexp(-1)).abs().max()) < SUM_TOL:
        return LOG_PROBABILITIES
    if x.dim() == 3 and x.size(1) >= 2 and bool((x >= 0).all()) and float((x.sum(1) - 1).abs().max()) < SUM_TOL:
        return TIME_SOFTMAX
    # strict bounds: an all-zero output (a zero-initialised head) is logits, not a sigmoid
    if bool((x > 0).all()) and bool((x < 1).all()):
        return SIGMOID
    return None


def probs_floor(V: int) -> float:
    """The lowest cross-entropy a forward whose outputs lie in [0, 1] (any :data:`BOUNDED` kind) can reach:
    log-softmax of a one-hot row, -log(e / (e + V - 1)) = ln(1 + (V-1)/e) nats (3.20 for 65
    characters); derived here, not cited."""
    return math.log(1 + (V - 1) / math.e)
