"""The model under check: a pristine copy, the corpus, the sizes its forward accepts, and the calls.

Every rule of :mod:`depthlab.analytics.check` talks to the user's model through a :class:`Subject`,
so the protocol (``forward(idx) -> logits``, or a tuple starting with them), the loss
(:class:`depthlab.training.protocol.ModelPort`), the batches of real text and the handling of a
hard-coded batch size live in one place. An exception raised by the user's code becomes a
:class:`ModelFault` carrying its first line and the line of the user's file it came from.
"""

from __future__ import annotations

import copy
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...data import Corpus, get_batch
from ...errors import DepthlabError
from ...training.protocol import ModelPort
from ...usermodel import first_line, flat_logits_hint

__all__ = ["CheckResult", "ModelFault", "Subject", "where"]

_LIBRARY_DIRS = tuple(str(Path(m.__file__).resolve().parent) for m in (torch, np)) + (
    str(Path(__file__).resolve().parents[2]),)


@dataclass
class CheckResult:
    """One rule's verdict.

    Attributes:
        rule: the rule's fixed name (``shape``, ``vocab``, ...).
        ok: True = no problem found, False = a problem found, None = the rule could not run (the
            evidence says why).
        evidence: what was measured: ``summary`` (one sentence with the numbers) and the numbers,
            parameter names and positions themselves.
        remedy: what to change, in plain words, naming the knob ("" when nothing is wrong).
        seconds: wall time of the rule (not part of :meth:`to_dict`: output stays reproducible).
    """

    rule: str
    ok: Optional[bool]
    evidence: dict = field(default_factory=dict)
    remedy: str = ""
    seconds: float = 0.0

    @property
    def summary(self) -> str:
        """The one-sentence reading of the evidence."""
        return str(self.evidence.get("summary", ""))

    @property
    def status(self) -> str:
        """``ok``, ``PROBLEM``, ``undecided`` (it ran, and its measurement cannot tell: ``evidence["undecided"]``)
        or ``not run``."""
        if self.ok is None:
            return "undecided" if self.evidence.get("undecided") else "not run"
        return "ok" if self.ok else "PROBLEM"

    def to_dict(self) -> dict:
        """``{"rule", "ok", "evidence", "remedy"}`` (JSON-ready)."""
        return {"rule": self.rule, "ok": self.ok, "evidence": self.evidence, "remedy": self.remedy}


class ModelFault(Exception):
    """The user's code raised (or returned something unusable) during a check.

    Args:
        message: the problem's first line (``Type: text``), with where it happened.
        size_free: the forward returned the wrong kind of thing (not a tensor, not floats, not three
            dimensions), or cannot be called with the token ids alone: no batch size or length changes that, so
            no other size is worth trying.
        remedy: the fix, where the fault knows it better than "return (B, T, V) logits".
    """

    def __init__(self, message: str, size_free: bool = False, remedy: Optional[str] = None):
        super().__init__(message)
        self.size_free, self.remedy = size_free, remedy


def where(e: BaseException) -> Optional[str]:
    """``file.py:LINE: code`` of the deepest frame of ``e``'s traceback outside torch, numpy and depthlab."""
    for fr in reversed(traceback.extract_tb(e.__traceback__)):
        fn = str(Path(fr.filename).resolve()) if fr.filename and not fr.filename.startswith("<") else ""
        if fn and not fn.startswith(_LIBRARY_DIRS):
            return f"{Path(fn).name}:{fr.lineno}: {(fr.line or '').strip()}"
    return None


def fault_text(e: BaseException) -> str:
    """The first line of a user's exception, with the line of their file it came from when known."""
    at = where(e)
    return f"{first_line(e)} (at {at})" if at else first_line(e)


class Subject:
    """The model to check and what the rules share.

    Args:
        model: the model as built (at initialisation); kept pristine, rules work on copies.
        rebuild: a zero-argument function building the model again (used when a copy fails), or None.
        corpus: the corpus (vocabulary and train/validation tokens).
        seed: seeds every rule's torch and numpy generators.
    """

    def __init__(self, model: nn.Module, rebuild: Optional[Callable[[], nn.Module]], corpus: Corpus,
                 seed: int = 1337):
        self.pristine = model
        self.rebuild = rebuild
        self.corpus = corpus
        self.vocab_size = len(corpus.tokenizer.vocab)
        self.seed = int(seed)
        self.B = 0  # the sizes the forward accepts, set by the shape rule
        self.T = 0
        self.batch_fixed = False  # the forward accepts only batch B (a hard-coded batch size)
        self.model_vocab: Optional[int] = None  # the logits' last dimension
        self.unusable: Optional[str] = None  # set when later rules cannot run (e.g. vocabulary too small)
        self.leaks = False  # causal_leak found the logits depending on later tokens
        self.untrainable: Optional[str] = None  # set when the loss or a gradient is not finite at init (finite)

    # ------------------------------------------------------------------ models
    def fresh(self) -> nn.Module:
        """A copy of the model at initialisation (deepcopy, else rebuilt with the same seed)."""
        try:
            return copy.deepcopy(self.pristine)
        except Exception as e:  # noqa: BLE001 - some user modules cannot be deep-copied; build another
            if self.rebuild is None:
                raise DepthlabError(f"the model cannot be copied (copy.deepcopy: {first_line(e)}); "
                                    "give a function that builds it again") from None
            torch.manual_seed(self.seed)
            return self.rebuild()

    def logits(self, model: nn.Module, idx: torch.Tensor, targets: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The logits of every position, as the trainer gets them (:meth:`ModelPort.logits`: a forward that
        takes ``targets`` is given them), checked to be (B, T, V) floats.

        Raises:
            ModelFault: the forward raised, or returned something else.
        """
        try:
            logits = ModelPort(model).logits(model, idx, targets)
        except DepthlabError as e:  # not logits
            raise ModelFault(str(e), size_free=True) from None
        except Exception as e:  # noqa: BLE001 - the user's forward
            raise ModelFault(fault_text(e)) from None
        B, T = idx.shape
        if not logits.is_floating_point():
            raise ModelFault(_not_float(logits, B, T), size_free=True)
        if logits.dim() != 3:
            if _one_value_per_position(logits, B, T, self.vocab_size):
                raise ModelFault(f"forward(idx) of shape ({B}, {T}) returned {str(logits.dtype)[6:]} values of "
                                 f"shape {tuple(logits.shape)}, one per position (token ids, or an .argmax cast to "
                                 f"float?), not logits: expected ({B}, {T}, V), the floating-point scores of every "
                                 "token, before any .argmax / sampling", size_free=True)
            flat = flat_logits_hint(tuple(logits.shape), B, T, ModelPort(model).takes_targets)
            one = ("; (B, V) is one position per sequence: return the logits of every position, not of one"
                   if logits.dim() == 2 and int(logits.shape[0]) == B and T > 1 else f"; {flat}" if flat else "")
            raise ModelFault(f"forward(idx) of shape ({B}, {T}) returned logits of shape {tuple(logits.shape)}, "
                             f"expected ({B}, {T}, V): three dimensions{one}", size_free=True)
        s0, s1, s2 = (int(n) for n in logits.shape)
        swapped = ("(B, V, T)" if (s0, s2) == (B, T) and s1 != T else
                   "(T, B, V)" if (s0, s1) == (T, B) and B != T else None)
        if (s0, s1) != (B, T) and swapped:  # the axes, not the sizes, are wrong
            raise ModelFault(f"forward(idx) of shape ({B}, {T}) returned logits of shape {tuple(logits.shape)}: "
                             f"{swapped}, not ({B}, {T}, V); put the vocabulary last (e.g. .transpose)",
                             size_free=True)
        if tuple(logits.shape[:2]) != (B, T):
            last = logits.dim() == 3 and logits.shape[:2] == (B, 1) and T > 1  # no size changes what comes back
            hint = "; only the last position came back: return the logits of every position" if last else ""
            raise ModelFault(f"forward(idx) of shape ({B}, {T}) returned logits of shape {tuple(logits.shape)}, "
                             f"expected ({B}, {T}, V){hint}", size_free=last)
        return logits

    def logits_many(self, model: nn.Module, seqs: torch.Tensor, alone: bool = False) -> torch.Tensor:
        """Logits of N sequences (N, T), in batches of the accepted size (padded when it is fixed); with
        ``alone``, one sequence per forward (a fixed batch size gets copies of that sequence)."""
        out = []
        step = 1 if alone else self.B if self.batch_fixed else max(self.B, 16)
        for i in range(0, len(seqs), step):
            chunk = seqs[i:i + step]
            n = len(chunk)
            if self.batch_fixed and n < self.B:
                chunk = torch.cat([chunk, chunk[:1].expand(self.B - n, -1)])
            out.append(self.logits(model, chunk)[:n].float())
        return torch.cat(out)

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy (nats/token), as the trainer computes it (:class:`ModelPort`).

        Raises:
            ModelFault: the forward raised or its logits do not fit the targets.
        """
        port = ModelPort(model)
        if not port.native:  # the trainer's loss of a user's model, with the user's line when the forward fails
            logits = self.logits(model, x, y)
            return call_user(lambda: F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1)))
        return call_user(lambda: port.loss(model, x, y))

    # ------------------------------------------------------------------ data
    def rng(self, stream: int) -> np.random.Generator:
        """A numpy generator of its own for each use (stream), seeded with the check's seed."""
        return np.random.default_rng([self.seed, 101, stream])

    def batch(self, B: int, T: int, rng: np.random.Generator, split: str = "train"
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random windows (x, y) of real text, each (B, T) int64."""
        data = self.corpus.train if split == "train" else self.corpus.val
        return get_batch(data, T, B, rng)

    def free_batch(self, wanted: int) -> int:
        """``wanted`` sequences, or the only batch size the forward accepts."""
        return self.B if self.batch_fixed else max(1, int(wanted))


def _one_value_per_position(out: torch.Tensor, B: int, T: int, V: int) -> bool:
    """A 2-D float output (B, T) whose last dimension is the length and not the vocabulary: one value per position
    (token ids or an argmax cast to float), not the (B, V) logits of one position per sequence."""
    return out.dim() == 2 and tuple(int(n) for n in out.shape) == (B, T) and T != V


def _not_float(out: torch.Tensor, B: int, T: int) -> str:
    """What a forward's non-float output is: integers of (B, T) are token ids (an argmax or a sample), not logits."""
    shape, dtype = tuple(out.shape), str(out.dtype).removeprefix("torch.")
    if out.dtype == torch.bool:
        return f"forward(idx) returned booleans of shape {shape}, not logits: return the floating-point (B, T, V)"
    what = ("token ids, one per position (an .argmax(-1) or a sample over the vocabulary)"
            if shape == (B, T) else "integers")
    return (f"forward(idx) of shape ({B}, {T}) returned {dtype} {what} of shape {shape}, not logits: return the "
            "floating-point scores of every token, shape (B, T, V), before any .argmax / sampling")


def call_user(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` (which calls the user's code); its exception becomes a :class:`ModelFault`."""
    try:
        return fn()
    except ModelFault:
        raise
    except Exception as e:  # noqa: BLE001 - the user's code
        raise ModelFault(fault_text(e)) from None
