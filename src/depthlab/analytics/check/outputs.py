"""What a forward's floating-point output is: logits, probabilities (softmax) or log-probabilities
(log_softmax) over the vocabulary. Cross-entropy applies log-softmax itself, so probabilities are a bug
(the loss sees log-softmax of values in [0, 1]: almost uniform, and it barely learns) while
log-probabilities are harmless (log-softmax of a log-softmax is the same)."""

from __future__ import annotations

import math
from typing import Optional

import torch

__all__ = ["output_kind", "probs_floor", "PROBABILITIES", "LOG_PROBABILITIES", "PROBS_TEXT", "PROBS_FIX",
           "LOG_PROBS_TEXT"]

PROBABILITIES = "probabilities"
LOG_PROBABILITIES = "log-probabilities"
SUM_TOL = 1e-3
"""How far from 1 a row's sum (probabilities) or its sum of exp (log-probabilities) may be."""

PROBS_TEXT = ("the forward returns probabilities (softmax over the vocabulary), not logits: cross-entropy applies "
              "log-softmax itself")
PROBS_FIX = "return the values before softmax (drop the F.softmax / .softmax at the end of forward)"
LOG_PROBS_TEXT = ("the forward returns log-probabilities (log_softmax over the vocabulary): harmless, cross-entropy "
                  "of log-softmax values is the same as of the logits")


def output_kind(out: torch.Tensor) -> Optional[str]:
    """:data:`PROBABILITIES` when every row over the last axis is non-negative and sums to 1 (within
    :data:`SUM_TOL`), :data:`LOG_PROBABILITIES` when every value is <= 0 and every row's exp sums to 1, else
    None (logits). Needs at least two entries per row (one entry is trivially both)."""
    if out.dim() < 1 or out.size(-1) < 2 or not out.is_floating_point() or out.numel() == 0:
        return None
    x = out.detach().double()
    if not bool(torch.isfinite(x).all()):
        return None
    if bool((x >= 0).all()) and float((x.sum(-1) - 1).abs().max()) < SUM_TOL:
        return PROBABILITIES
    if bool((x <= 0).all()) and float((x.logsumexp(-1)).abs().max()) < SUM_TOL:
        return LOG_PROBABILITIES
    return None


def probs_floor(V: int) -> float:
    """The lowest cross-entropy a forward returning probabilities can reach: log-softmax of a one-hot row,
    -log(e / (e + V - 1)) = ln(1 + (V-1)/e) nats (3.20 for 65 characters); derived here, not cited."""
    return math.log(1 + (V - 1) / math.e)
