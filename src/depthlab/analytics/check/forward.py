"""The rules that need no training: shape, vocab, causal_leak, init_loss, no_gradient.

Each rule takes the :class:`~depthlab.analytics.check.subject.Subject` and returns a
:class:`~depthlab.analytics.check.subject.CheckResult`; ``shape`` also sets the sizes the other
rules use (the asked ones, or the ones the forward turned out to accept).
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...units import agree, counted
from ...usermodel import call_fault
from .finite import first_nonfinite, nonfinite_result
from .outputs import BOUNDED, LOG_PROBABILITIES, LOG_PROBS_TEXT, output_kind
from .subject import CheckResult, ModelFault, Subject, call_user

__all__ = ["shape_rule", "vocab_rule", "causal_leak_rule", "init_loss_rule", "no_gradient_rule",
           "INIT_EXCESS", "SHAPE_TRIES"]

SHAPE_TRIES = 60
"""At most this many (B, T) pairs are tried when the asked sizes fail."""
MAX_TOKENS = 1 << 16
"""No size tried holds more than this many tokens (B x T)."""
INIT_EXCESS = 1.0
"""init_loss fails when the loss at initialisation exceeds ln V by more than this (nats)."""
LEAK_REL_TOL = 1e-6
"""causal_leak's tolerance, relative to the largest |logit| (float32 rounding is ~1e-7 of it)."""
BATCH_REL_TOL = 1e-4
"""A sequence's logits alone vs within a batch may differ by this much of the largest |logit| (kernels chosen
by batch size round differently); more means the sequences of a batch mix."""
NOGRAD_STEPS = 3
"""Optimizer steps after which an all-zero gradient still counts (a zero-initialised gate is not a bug)."""
_NAMES_SHOWN = 12


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    return shown + (f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else "")


# ------------------------------------------------------------------------- shape
class _Problem(str):
    """A failed attempt's one line, and whether it is :attr:`ModelFault.size_free`."""

    size_free = False
    nonfinite = False


def _attempt(subject: Subject, model: nn.Module, B: int, T: int, cap: Optional[int] = None,
             finite: bool = False) -> Optional[str]:
    """None when the forward accepts (B, T) and returns (B, T, V) logits, else the problem in one line (a
    :class:`_Problem`).

    ``cap``: use token ids below it only (when the corpus's ids fail, to tell a vocabulary problem apart).
    ``finite``: NaN/inf logits are a problem too (the sizes around a working one: the ``finite`` rule reads that).
    """
    x, _ = subject.batch(B, T, subject.rng(1))
    if cap is not None:
        x = x % cap
    try:
        with torch.no_grad():
            logits = subject.logits(model, x)
    except ModelFault as e:
        problem = _Problem(str(e))
        problem.size_free = e.size_free
        return problem
    subject.model_vocab = int(logits.shape[-1])
    if finite and not bool(torch.isfinite(logits).all()):
        problem = _Problem("the logits hold NaN/inf")
        problem.nonfinite = True
        return problem
    return None


_SIZES = tuple(2 ** k for k in range(11))
"""Batch sizes and lengths tried when the asked ones fail (1 .. 1024: the sizes people write)."""


class _SizeSearch:
    """Tries (B, T) pairs on the forward, at most :data:`SHAPE_TRIES` of them, and remembers each outcome.

    Only whether a size works is used, never the text of the error: a message's numbers (a line of the
    user's file, a tensor's size) say nothing reliable about the context length.
    """

    def __init__(self, subject: Subject, model: nn.Module, max_T: int):
        self.subject, self.model, self.max_T = subject, model, max_T
        self.tried: dict[tuple[int, int], bool] = {}
        self.said: set[str] = set()  # the failures' lines, whole: one line at every size is no size's fault

    def works(self, b: int, t: int) -> bool:
        """Whether forward(idx) of (b, t) returns (b, t, V) logits (False when out of range or out of tries).

        Raises:
            ModelFault: (size_free) the forward runs at (b, t) but returns the wrong kind of thing (e.g. 2-D
                logits): no size will work, and that, not the asked size's error, is the problem to name.
        """
        if (b, t) not in self.tried:
            if not (1 <= b and 2 <= t <= self.max_T and b * t <= MAX_TOKENS) or len(self.tried) >= SHAPE_TRIES:
                return False
            problem = _attempt(self.subject, self.model, b, t)
            if getattr(problem, "size_free", False):
                raise ModelFault(str(problem), size_free=True)
            self.tried[(b, t)] = problem is None
            if problem is not None:
                self.said.add(str(problem))
        return self.tried[(b, t)]

    def longest_below(self, B: int, T: int) -> Optional[int]:
        """The longest length under T that works at batch B, by bisection above the longest round one that works.

        Returns None when no length tried works. The result t has t + 1 tried and failing (or t + 1 == T),
        so "at most t" holds for a forward whose failures start at one length (a position table, a mask).
        """
        failing = T
        for t in sorted({T - 1} | {s for s in _SIZES if s < T}, reverse=True):
            if self.works(B, t):
                lo, hi = t, failing  # lo works, hi fails
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    lo, hi = (mid, hi) if self.works(B, mid) else (lo, mid)
                return lo
            failing = t
        return None

    def find(self, B: int, T: int) -> tuple[Optional[tuple[int, int]], Optional[int]]:
        """((B0, T0) that works or None, the longest length when T0 came from :meth:`longest_below`).

        Order: shorter lengths at batch B (a context shorter than asked), other batch sizes at length T
        (a hard-coded batch), longer lengths at batch B (a hard-coded longer length), then both changed.
        """
        longest = self.longest_below(B, T)  # first: at most 11 + 10 tries, within SHAPE_TRIES
        if longest is not None:
            return (B, longest), longest
        others = [b for b in _SIZES if b != B]
        longer = [t for t in _SIZES if t > T]
        shorter = [t for t in _SIZES if t < T]
        for b, t in [(b, T) for b in others] + [(B, t) for t in longer] + [(b, t) for b in others
                                                                             for t in longer + shorter]:
            if self.works(b, t):
                return (b, t), None
        return None, None


def _span(sizes) -> str:
    s = sorted(set(sizes))
    return f"{s[0]}..{s[-1]}" if len(s) > 1 else (str(s[0]) if s else "none")


def _other_batches(B: int) -> list[int]:
    """The batch sizes tried around a working ``B``."""
    return sorted({1, B + 1} - {B})


def _shorter(T: int) -> list[int]:
    """The shorter lengths tried below a working ``T`` (none below T = 1)."""
    return sorted({T // 2, T - 1} - {T, 0})


def _neighbours(subject: Subject, model: nn.Module, B: int, T: int, cap: Optional[int]) -> tuple[dict, dict]:
    """{other batch: problem} and {shorter length: problem} for the sizes around a working (B, T); NaN/inf logits
    there are a problem only where (B, T)'s own are finite (else the ``finite`` rule names them, at every size)."""
    finite = _attempt(subject, model, B, T, cap, finite=True) is None
    bad_b = {b: e for b in _other_batches(B) if (e := _attempt(subject, model, b, T, cap, finite=finite))}
    bad_t = {t: e for t in _shorter(T) if (e := _attempt(subject, model, B, t, cap, finite=finite))}
    return bad_b, bad_t


def shape_rule(subject: Subject, B: int, T: int, length_asked: bool = True) -> CheckResult:
    """The forward accepts (B, T) and other sizes; a hard-coded batch size or length is named.

    Sets ``subject.B``, ``subject.T`` (the sizes the other rules use) and ``subject.batch_fixed``.

    Raises:
        ModelFault: no size tried works (the forward cannot be used at all).
    """
    model = subject.fresh().eval()
    fault = call_fault(model)
    if fault:  # no size changes how it is called: sixty sizes were tried, then batch and length were blamed
        raise ModelFault(fault[0], size_free=True, remedy=fault[1])
    max_T = min(len(subject.corpus.train), len(subject.corpus.val)) - 1
    asked_err = _attempt(subject, model, B, T)
    cap = None
    if asked_err is not None and _attempt(subject, model, B, T, cap=2) is None:
        cap, asked_err = 2, None  # the size is fine, some token ids are not: the vocab rule says which
    if getattr(asked_err, "size_free", False):  # what came back is wrong at every size: say that alone
        raise ModelFault(f"{asked_err} (at the asked size B={B}, T={T}; no other size changes what the forward "
                         "returns)", size_free=True)
    search = _SizeSearch(subject, model, max_T)
    try:
        found, longest = ((B, T), None) if asked_err is None else search.find(B, T)
    except ModelFault as e:  # a smaller size runs and shows what is wrong at every size: name that, not the IndexError
        raise ModelFault(f"{e} (the asked size B={B}, T={T} fails first: {asked_err}; no other size changes what "
                         "the forward returns)", size_free=True) from None
    if found is None:
        tried = sorted(search.tried)
        if search.said == {str(asked_err)}:  # word for word the same at every size: sizes are not the cause
            raise ModelFault(f"forward(idx) fails the same way at the asked size B={B}, T={T} and at the {len(tried)} "
                             f"other sizes tried, so no size is the cause: {asked_err}", size_free=True,
                             remedy="change that line so it runs at every size (a tensor made on another device or of "
                                    "another dtype than idx is a usual cause: make it with device=idx.device)")
        raise ModelFault(f"forward(idx) fails at the asked size B={B}, T={T} and at the {len(tried)} other sizes "
                         f"tried (B {_span(b for b, _ in tried)}, T {_span(t for _, t in tried)}): {asked_err}; "
                         "give the sizes it is built for with --batch_size and --block_size")
    B0, T0 = found
    bad_b, bad_t = _neighbours(subject, model, B0, T0, cap)
    subject.B, subject.T = B0, T0
    nan = [e for e in [*bad_b.values(), *bad_t.values()] if getattr(e, "nonfinite", False)]
    subject.batch_fixed = len(bad_b) == len(_other_batches(B0)) and not nan
    ev: dict = {"asked": {"batch_size": B, "block_size": T}, "works_at": {"batch_size": B0, "block_size": T0},
                "logits": [B0, T0, subject.model_vocab]}
    if asked_err:
        ev["asked_error"] = asked_err
    if longest is not None:
        ev["longest_length"] = longest  # T0 works at B, T0 + 1 does not
    if bad_b:
        ev["failing_batch_sizes"] = {str(b): e for b, e in bad_b.items()}
    if bad_t:
        ev["failing_lengths"] = {str(t): e for t, e in bad_t.items()}
    fixed_b = B0 if subject.batch_fixed else None
    fixed_t = T0 if bad_t and len(bad_t) == len(_shorter(T0)) and not nan else None
    ev["nonfinite_at_other_sizes"] = len(nan)
    ev["hard_coded_batch_size"], ev["hard_coded_length"] = fixed_b, fixed_t
    res = _shape_verdict(ev, asked_err, bad_b, bad_t, fixed_b, fixed_t, length_asked)
    seq_first = _sequence_first_attention(subject.pristine)
    if res.ok is False and seq_first:  # it runs only where B equals T: no size is hard-coded in it
        return CheckResult("shape", False, res.evidence,
                           f"build nn.MultiheadAttention with batch_first=True ({', '.join(seq_first[:3])}): without "
                           "it the module reads (B, T, C) as (T, B, C), so a mask of size T fits only where B equals "
                           "T; or " + (res.remedy or ""))
    return res


def _shape_verdict(ev: dict, asked_err: Optional[str], bad_b: dict, bad_t: dict, fixed_b: Optional[int],
                   fixed_t: Optional[int], length_asked: bool) -> CheckResult:
    B, T = ev["asked"]["batch_size"], ev["asked"]["block_size"]
    B0, T0 = ev["works_at"]["batch_size"], ev["works_at"]["block_size"]
    parts = []
    if asked_err:
        parts.append(f"the asked size B={B}, T={T} fails ({asked_err}); the forward works at B={B0}, T={T0}")
    else:
        parts.append(f"forward(idx) of ({B}, {T}) returns logits {tuple(ev['logits'])}")
    fail_b, fail_t = agree(len(bad_b), "fails", "fail"), agree(len(bad_t), "fails", "fail")
    if fixed_b:
        parts.append(f"batch size {B0} is hard-coded: B={', '.join(map(str, bad_b))} {fail_b} "
                     f"({next(iter(bad_b.values()))})")
    elif bad_b:
        parts.append(f"B={', '.join(map(str, bad_b))} {fail_b} ({next(iter(bad_b.values()))})")
    if fixed_t:
        parts.append(f"length {T0} is hard-coded: T={', '.join(map(str, bad_t))} {fail_t} "
                     f"({next(iter(bad_t.values()))})")
    elif bad_t:
        parts.append(f"T={', '.join(map(str, bad_t))} {fail_t} ({next(iter(bad_t.values()))})")
    only_longer = asked_err and ev.get("longest_length") == T0 and not bad_b and not bad_t
    if not (asked_err or bad_b or bad_t):
        tried = [f"{k}={', '.join(map(str, v))}" for k, v in (("B", _other_batches(B)), ("T", _shorter(T))) if v]
        parts.append(f"other sizes ({'; '.join(tried)}) work too" + ("" if _shorter(T) else
                                                                       f" (no length shorter than T={T} to try)"))
        return CheckResult("shape", True, {"summary": "; ".join(parts), **ev})
    if only_longer and not length_asked:
        parts.append(f"the checks run at T={T0}, the longest length that works (T={T0 + 1} fails)")
        return CheckResult("shape", True, {"summary": "; ".join(parts), **ev})
    remedy = []
    sized = len(bad_b) + len(bad_t) > ev["nonfinite_at_other_sizes"]  # a size fails, not only NaN/inf
    if fixed_b or fixed_t or sized or (asked_err and not only_longer):
        remedy.append("take the sizes from the input instead of writing numbers: B, T = idx.shape in forward "
                      "(and B, T, C = x.shape where x is reshaped), then view(B, T, n_head, C // n_head), "
                      "view(B, T, C), torch.arange(T); slice a mask built for the longest length: mask[:T, :T]; a "
                      "view that puts another size where T belongs (view(B, n_head, T, C // n_head) for view(B, T, "
                      "n_head, C // n_head).transpose(1, 2)) works only where T equals it")
    if ev["nonfinite_at_other_sizes"]:
        remedy.append("find what makes NaN/inf only at those sizes (a mask or table made for one length, a division "
                      "by a count of positions): the final validation and sampling feed shorter inputs")
    if only_longer:
        remedy.append(f"the model accepts at most T={T0}: run with --block_size {T0} or build it with a longer "
                      "context (its position table and mask)")
    if T0 != T or B0 != B:
        parts.append(f"the other checks run at B={B0}, T={T0}")
    return CheckResult("shape", False, {"summary": "; ".join(parts), **ev}, "; ".join(remedy))


# ------------------------------------------------------------------------- vocab
def vocab_rule(subject: Subject) -> CheckResult:
    """The logits' last dimension against the corpus vocabulary; every token id goes through the forward."""
    V, Vm = subject.vocab_size, subject.model_vocab
    ev = {"corpus_vocab_size": V, "logits_vocab_size": Vm}
    if Vm is not None and Vm < V:
        subject.unusable = f"the logits have {Vm} entries but the corpus has {V} tokens (vocab)"
        return CheckResult("vocab", False, {"summary": f"the logits have {Vm} entries per position but the corpus has "
                                                       f"{V} tokens: ids {Vm}..{V - 1} can never be predicted "
                                                       "(cross-entropy fails on them)", **ev},
                           f"give the output layer {V} outputs and the token embedding {V} rows (the corpus's "
                           "vocabulary): take both sizes from a vocab_size argument of the constructor (depthlab "
                           f"passes the corpus's {V} to one), not from a number written in the code")
    T = subject.T
    ids = torch.arange(V, dtype=torch.int64)
    rows = -(-V // T)
    seqs = ids.repeat(-(-rows * T // V))[:rows * T].view(rows, T)
    model = subject.fresh().eval()
    try:
        with torch.no_grad():
            subject.logits_many(model, seqs)
    except ModelFault as e:
        subject.unusable = "the forward fails on some token ids of the corpus (vocab)"
        return CheckResult("vocab", False, {"summary": f"the forward fails on the corpus's token ids 0..{V - 1}: {e}",
                                            **ev},
                           f"the token embedding needs {V} rows, one per token of the corpus: "
                           f"nn.Embedding({V}, n_embd), or build the model with vocab_size={V}")
    extra = (f" ({Vm - V} more than the corpus uses: never targets, harmless, e.g. a padded vocabulary)"
             if Vm > V else "")
    return CheckResult("vocab", True, {"summary": f"the logits have {Vm} entries for the corpus's {V} tokens{extra}; "
                                                  f"every id 0..{V - 1} goes through the forward", **ev})


# ------------------------------------------------------------------------- causal_leak
def _perturbed(subject: Subject, base: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """[base, base with token j changed for j = 1..T-1, base again] as one (T + 1, T) tensor."""
    T, V = base.numel(), subject.vocab_size
    seqs = base.repeat(T + 1, 1)
    shift = torch.randint(1, max(2, V), (T - 1,), generator=gen)
    j = torch.arange(1, T)
    seqs[j, j] = (base[j] + shift) % V
    return seqs


def _window_logits(subject: Subject, model: nn.Module, seqs: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """(logits of ``seqs``, how far rows 0, 1 and the middle one computed alone differ from themselves within the
    batch, how far row 0 alone differs from itself computed alone again).

    When the rows depend on each other (a mean, softmax or norm over dim 0), the logits come back computed one
    sequence per forward, so that the perturbation test sees only what each sequence does to itself. Not row 0
    alone: attention over the batch axis under a causal mask (``nn.MultiheadAttention`` without ``batch_first=True``
    given (B, T, C)) leaves the first row of a batch alone and mixes the ones before it into every later row.
    """
    L = subject.logits_many(model, seqs)
    if not bool(torch.isfinite(L).all()):
        return L, 0.0, 0.0
    first = subject.logits_many(model, seqs[:1], alone=True)[0]
    scale = max(1.0, float(L[0].abs().max()))
    mixed = float((L[0] - first).abs().max())
    rows = [1, len(seqs) // 2]  # not a first row of a forward's batch (logits_many batches 16 or more at a time)
    alone = subject.logits_many(model, seqs[rows], alone=True)
    mixed = max(mixed, float((L[rows] - alone).abs().max()))
    if not math.isfinite(mixed) or mixed <= BATCH_REL_TOL * scale:
        return L, mixed, 0.0
    again = float((subject.logits_many(model, seqs[:1], alone=True)[0] - first).abs().max())
    if not math.isfinite(again) or again > 1e-3 * scale:  # randomness: the same sequence alone differs too
        return L, mixed, again
    return subject.logits_many(model, seqs, alone=True), mixed, again


RANDOM_EVAL_FIX = ("draw randomness only in training: nn.Dropout, or F.dropout(x, p, training=self.training) (its "
                   "training argument is True by default), and torch.rand / randn in forward only when self.training")


SHIFTED_FIX = ("return the logits of position t at index t, computed from tokens 0..t: no shift inside the model "
               "(the targets are already the tokens one step ahead), and let each position attend to itself "
               "(torch.tril(torch.ones(T, T)), diagonal 0, not -1)")


def causal_leak_rule(subject: Subject, windows: int = 2) -> CheckResult:
    """Change the token at position j, see whether the logits at positions t < j move (perturbation test);
    and whether a sequence's logits depend on the other sequences of its batch. In eval mode; a model with
    batch-statistics norms (BatchNorm) again in train mode, where they normalise with statistics over the batch
    and every position, later ones included (eval mode uses running averages and hides that leak)."""
    T = subject.T
    if T < 2:
        return CheckResult("causal_leak", None, {"summary": f"not run: needs sequences of at least 2 tokens (T={T})"})
    res = _leak_pass(subject, subject.fresh().eval(), windows)
    if res.ok is not True or not _batch_norms(subject.pristine):
        return res
    model = subject.fresh().train()
    for m in model.modules():  # dropout's random masks would read as changes; the norms' statistics are the test
        if isinstance(m, nn.modules.dropout._DropoutNd):
            m.eval()
    subject.leaks = False
    trained = _leak_pass(subject, model, windows)
    if trained.ok is not False:
        return res
    names = _batch_norms(subject.pristine)
    norms = f"{', '.join(names[:3])}{', ...' if len(names) > 3 else ''} {agree(len(names), 'normalises', 'normalise')}"
    return CheckResult("causal_leak", False, {
        **trained.evidence, "mode": "train",
        "summary": f"in train mode, as it trains ({norms} with statistics over the batch and its positions, "
                   f"later ones included; eval mode hides it): {trained.summary}"},
        "normalise each position on its own: LayerNorm (or RMSNorm) over the features, not BatchNorm, whose "
        "training statistics mix every sequence and position of the batch")


def _batch_norms(model: nn.Module) -> list[str]:
    """Names of ``model``'s modules that normalise with batch statistics in train mode (BatchNorm1d/2d/3d, ...)."""
    return [name or type(m).__name__ for name, m in model.named_modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def _leak_pass(subject: Subject, model: nn.Module, windows: int) -> CheckResult:
    """:func:`causal_leak_rule` on ``model`` as it is (its mode set by the caller)."""
    T = subject.T
    gen = torch.Generator().manual_seed(subject.seed)
    x, _ = subject.batch(windows, T, subject.rng(2), split="val")
    leak = torch.zeros(T, T)  # leak[j, t]: max |change| of the logits at t when token j changes
    noise, scale, own, mixed, spread = 0.0, 0.0, 0.0, 0.0, 0.0
    for w in range(windows):
        seqs = _perturbed(subject, x[w], gen)
        with torch.no_grad():
            L, mix, again = _window_logits(subject, model, seqs)
        rows = ~torch.isfinite(L).flatten(1).all(dim=1)  # (T + 1,) sequences with a non-finite logit
        if bool(rows.any()):
            where = first_nonfinite(model, lambda: subject.logits_many(model, seqs[rows]))
            return nonfinite_result("causal_leak", f"the logits are not finite at initialisation on {int(rows.sum())} "
                                                   f"of the {len(seqs)} windows of validation text compared (window "
                                                   f"{w})", where=where)
        base = L[0]
        spread = max(spread, float((base - base[:1]).abs().max()))  # how far the positions' logits differ
        noise = max(noise, float((L[-1] - base).abs().max()), again)
        scale = max(scale, float(base.abs().max()))
        mixed = max(mixed, mix)
        d = (L[1:-1] - base).abs().amax(dim=-1)  # (T - 1, T): row j - 1, column t
        own = max(own, float(d.diagonal(offset=1).max()))
        leak[1:] = torch.maximum(leak[1:], d)
    tol = LEAK_REL_TOL * max(1.0, scale) + 10 * noise
    ev = {"tolerance": tol, "logit_scale": scale, "pairs_tested": T * (T - 1) // 2, "windows": windows,
          "change_at_changed_position": own, "batch_dependence": mixed}
    if not math.isfinite(noise):
        why = (f"not run: the same sequence, computed twice, gives logits differing by {noise:.3g} in eval "
               "mode (randomness in the forward?)")
        return CheckResult("causal_leak", None, {"summary": why, **ev})
    if noise > 1e-3 * max(1.0, scale):  # a bug of its own: every val loss and sample is noisy, and no leak testable
        why = (f"the same sequence, computed twice in eval mode, gives logits differing by {noise:.3g}: the forward "
               "is random at evaluation (dropout drawn without training=self.training?), so every val loss and "
               "sample is noisy, and whether later tokens leak cannot be tested")
        return CheckResult("causal_leak", False, {"summary": why, "random_in_eval": True, **ev}, RANDOM_EVAL_FIX)
    past = torch.ones(T, T, dtype=torch.bool).tril(diagonal=-1)  # [j, t] with t < j
    bad = (leak > tol) & past
    ev["max_change_before_changed_position"] = float(leak[past].max())
    batch_leak = mixed > BATCH_REL_TOL * max(1.0, scale)
    ev["batch_leak"] = batch_leak
    ev["spread_across_positions"] = spread
    if spread <= tol and not batch_leak:  # every position's logits alike: one position's state given to all?
        moved = _first_token_moves(subject, model, x[:windows], gen)
        verdict = _one_state_verdict(ev, leak, bad, moved, tol)
        if verdict is not None:
            subject.leaks = bool(bad.any())
            return verdict
    if batch_leak:
        subject.leaks = True
        return _batch_leak_verdict(ev, _leak_verdict(ev, leak, bad) if bool(bad.any()) else None,
                                   _sequence_first_attention(subject.pristine))
    if bool(bad.any()):
        subject.leaks = True
        return _leak_verdict(ev, leak, bad)
    return _no_leak_verdict(ev, leak, own, tol, windows)


def _first_token_moves(subject: Subject, model: nn.Module, x: torch.Tensor, gen: torch.Generator) -> float:
    """How far the logits (any position) move when the token at position 0 of each window of ``x`` changes (the
    perturbation test changes positions 1..T-1 only: every position may read position 0)."""
    other = x.clone()
    other[:, 0] = (x[:, 0] + torch.randint(1, max(2, subject.vocab_size), (len(x),), generator=gen)) \
        % subject.vocab_size
    with torch.no_grad():
        a, b = subject.logits_many(model, x), subject.logits_many(model, other)
    return float((a - b).abs().max())


ONE_STATE_FIX = ("apply the output layer to every position's own state, logits = self.lm_head(x) on the whole "
                 "(B, T, C) x, not to x[:, 0] or x[:, -1] broadcast (expand/repeat) to every position; the last "
                 "position alone is what generation reads, after the forward")


def _one_state_verdict(ev: dict, leak: torch.Tensor, bad: torch.Tensor, moved_by_first: float,
                       tol: float) -> Optional[CheckResult]:
    """The PROBLEM of a forward that gives every position the same logits, read from one position's state (the
    last's: a leak; the first's: no position predicts from its own context), or None where no token moves them (a
    stack that forgets its tokens: not judged by :func:`_no_leak_verdict`)."""
    T = leak.shape[0]
    same = (f"every position gets the same logits (the {T} positions' differ by at most "
            f"{ev['spread_across_positions']:.2g})")
    if bool(bad.any()):
        js = sorted(set(bad.nonzero(as_tuple=True)[0].tolist()))
        if js == [T - 1]:
            return None  # the token itself is read everywhere (idx[:, -1]): _leak_verdict names it
        ev["leaking_from"] = js
        j, t = divmod(int(torch.where(bad, leak, torch.zeros_like(leak)).argmax()), T)
        text = (f"{same}, and later tokens move them (the logits at position {t} move by {float(leak[j, t]):.3g} "
                f"when the token at position {j} changes): the forward gives every position the state of a later "
                "one (x[:, -1] broadcast to every position?), so each position sees the future")
        return CheckResult("causal_leak", False, {"summary": text, "one_state": "later", **ev}, ONE_STATE_FIX)
    # a position's own token moves nothing where the state read is position 0's alone (identical windows, a run of
    # spaces, give alike logits too, and there it does: no such verdict)
    if moved_by_first > tol and ev["change_at_changed_position"] <= tol:
        ev["change_from_first_token"] = moved_by_first
        text = (f"{same}, and only the token at position 0 moves them (by up to {moved_by_first:.3g}; the tokens at "
                "positions 1.. move none): the forward gives every position the state of the first (x[:, 0] "
                "broadcast to every position?), so no position predicts from its own context")
        return CheckResult("causal_leak", False, {"summary": text, "one_state": "first", **ev}, ONE_STATE_FIX)
    return None


def _no_leak_verdict(ev: dict, leak: torch.Tensor, own: float, tol: float, windows: int) -> CheckResult:
    """The verdict where no earlier position moved beyond ``tol``: ok, not judged (nothing moves at all), or the
    PROBLEM of a position that ignores its own token."""
    T = leak.shape[0]
    later = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)  # [j, t] with t > j
    moved_later = float(leak[later].max()) if T > 1 else 0.0
    if max(own, moved_later) <= tol:  # nothing moves: a leak would not show either
        return CheckResult("causal_leak", None, {
            "summary": f"not judged: changing a token moves no logits beyond the tolerance {tol:.1g}, not even its "
                       f"own position's (by up to {own:.2g}) or later ones' (by up to {moved_later:.2g}): at "
                       "initialisation the logits barely depend on the tokens (a deep stack without shortcuts "
                       "forgets them?), so a leak of later tokens could not show either", "no_power": True, **ev})
    if own <= tol < moved_later:  # no leak, but position t ignores token t
        return CheckResult("causal_leak", False, {
            "summary": f"changing the token at position t never moves the logits at position t itself (max change "
                       f"{own:.2g}), while it moves the later positions' by up to {moved_later:.3g}: position t "
                       "predicts without its own token, so the logits are one position late (shifted inside the "
                       "model) or each position's own token is masked out", "own_token_ignored": True, **ev},
            SHIFTED_FIX)
    return CheckResult("causal_leak", True, {
        "summary": f"changing the token at position j never moved the logits at any position before j: max change "
                   f"{ev['max_change_before_changed_position']:.2g} over {T * (T - 1) // 2} pairs x {windows} "
                   f"windows (tolerance {tol:.1g}; the changed position itself moves by up to {own:.3g})", **ev})


def _sequence_first_attention(model: nn.Module) -> list[str]:
    """Names of ``model``'s ``nn.MultiheadAttention`` modules built without ``batch_first=True``: they take (T, B, C),
    so a (B, T, C) input makes them attend over the batch axis."""
    return [name or type(m).__name__ for name, m in model.named_modules()
            if isinstance(m, nn.MultiheadAttention) and not m.batch_first]


def _batch_leak_verdict(ev: dict, future: Optional[CheckResult], seq_first: Sequence[str] = ()) -> CheckResult:
    """The PROBLEM of logits depending on the batch's other sequences, with the future leak (per sequence) if any;
    ``seq_first``: the model's ``nn.MultiheadAttention`` modules without ``batch_first=True``, the likely cause."""
    text = (f"the logits of one sequence depend on the other sequences in the batch (a mean/softmax/norm over dim "
            f"0?): the same sequence computed alone and within a batch gives logits differing by up to "
            f"{ev['batch_dependence']:.3g} -- at training time each prediction sees the other sequences, "
            "including their later tokens")
    remedy = ("compute each sequence on its own: reduce over the positions or features of one sequence, never "
              "over dim 0 (the batch): softmax/mean/norm over dim=-1 (or the time axis with a causal mask), "
              "LayerNorm rather than BatchNorm")
    if seq_first:
        text = text.replace(" (a mean/softmax/norm over dim 0?)", "")
        shown = ", ".join(seq_first[:3]) + (", ..." if len(seq_first) > 3 else "")
        remedy = (f"build nn.MultiheadAttention with batch_first=True ({shown} {agree(len(seq_first), 'has', 'have')} "
                  "not): without it the module takes (T, B, C), so a (B, T, C) input attends over the batch axis, "
                  "and its attn_mask of size T must be built from x.size(1); or " + remedy)
    if future is not None:
        text += "; and computed one sequence at a time, " + future.summary
        remedy += "; and " + future.remedy
    else:
        text += ("; computed one sequence at a time, changing the token at position j never moved the logits "
                 "before j")
    return CheckResult("causal_leak", False, {**future.evidence, "summary": text} if future else
                       {"summary": text, **ev}, remedy)


def _leak_verdict(ev: dict, leak: torch.Tensor, bad: torch.Tensor) -> CheckResult:
    js, ts = bad.nonzero(as_tuple=True)
    offsets = sorted(set((js - ts).tolist()))
    first = offsets[0]
    at = (js - ts) == first
    k = int(leak[js[at], ts[at]].argmax())
    j, t = int(js[at][k]), int(ts[at][k])
    T = leak.shape[0]
    later = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)  # [j, t] with t > j: the legitimate dependence
    future, past = float(leak[bad].mean()), float(leak[later].mean()) if T > 2 else 0.0
    ev.update({"first_leaking_offset": first, "leaking_offsets": offsets, "leaking_pairs": int(bad.sum()),
               "example": {"position": t, "changed_position": j, "change": float(leak[j, t])},
               "mean_change_from_later_token": future, "mean_change_from_earlier_token": past,
               "first_leaking_position": int(ts.min())})
    span = f"{offsets[0]}" if len(offsets) == 1 else f"{offsets[0]}..{offsets[-1]}"
    text = (f"the logits at position t depend on later tokens: first leaking offset +{first} (the logits at position "
            f"{t} move by {float(leak[j, t]):.3g} when the token at position {j} changes); {int(bad.sum())} of "
            f"{ev['pairs_tested']} (position, later position) pairs leak, offsets {span}")
    remedy = ("position t must see only tokens 0..t: mask the attention scores before the softmax, "
              "att = att.masked_fill(torch.tril(torch.ones(T, T)) == 0, float('-inf')) (masked_fill returns a new "
              "tensor: assign it, or use masked_fill_), softmax over the last (key) "
              "axis, or F.scaled_dot_product_attention(q, k, v, is_causal=True)")
    sources = sorted(set(js.tolist()))  # the changed positions that moved an earlier one
    ev["leaking_from"] = sources
    if sources == [T - 1] and T >= 4:  # no mask leaks from the last position alone: something reads it everywhere
        text += (f"; only the token at the window's last position ({T - 1}) moves earlier positions' logits: the "
                 "forward reads the last token (idx[:, -1], or x[:, -1]) at every position, not the attention mask")
        remedy = ("position t may read only idx[:, :t + 1]: take each position's own token (idx, the whole "
                  "(B, T) tensor) where the last one (idx[:, -1]) is broadcast to every position; the last "
                  "position alone is what generation reads, after the forward")
    elif offsets == list(range(1, len(offsets) + 1)) and len(offsets) <= min(8, T // 2):
        verb = agree(len(offsets), "leaks", "leak")
        text += (f"; only the nearest {counted(len(offsets), 'later token')} {verb}: the mask lets each position "
                 "see the next token, and each layer passes that on one position further")
        remedy = ("build the mask with torch.tril(torch.ones(T, T)) "
                  "(diagonal=0), not tril(..., diagonal=1) or triu(..., diagonal=2)")
    elif past > 0 and future < 0.1 * past:
        text += (f"; a later token moves the logits {future / past:.1e} x as much as an earlier one (mean "
                 f"{future:.2g} vs {past:.2g}): the future reaches them only a little (a small weight, or the later "
                 "scores left in the softmax's denominator)")
        remedy = ("the future must get exactly zero weight: mask the scores before the softmax with float('-inf') "
                  "(att = att.masked_fill(mask == 0, float('-inf')), after any scaling of the scores), not a finite "
                  "bias that "
                  "the softmax turns into a small weight, and not the softmax's output (zeroing the weights after it "
                  "leaves the later scores in its denominator); and take the softmax over the keys (dim=-1): over "
                  "the queries (dim=-2) each weight is normalised by the scores of later positions")
    elif past > 0:
        ratio = future / past
        about = 0.5 <= ratio <= 2
        how = "about as much as" if about else f"{ratio:.2g} x as much as"
        text += f"; a later token moves the logits {how} an earlier one (mean {future:.2g} vs {past:.2g})"
        if about and int(bad.sum()) == ev["pairs_tested"]:
            text += ": nothing hides the future"
        else:  # some pairs hide it, or unevenly: a mask is there, something after it mixes the positions
            remedy += ("; if the mask is there already, the heads' split and merge must keep the positions apart: "
                       "q.view(B, T, n_head, C // n_head).transpose(1, 2), and y.transpose(1, 2).contiguous()"
                       ".view(B, T, C) after the attention (a view without its transpose mixes positions)")
    return CheckResult("causal_leak", False, {"summary": text, **ev}, remedy)


# ------------------------------------------------------------------------- init_loss
def _output_layer(model: nn.Module, V: int) -> tuple[Optional[str], Optional[torch.Tensor]]:
    """(name, weight) of the last Linear with V outputs (or Embedding with V rows, a tied head)."""
    found: tuple[Optional[str], Optional[torch.Tensor]] = (None, None)
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear) and m.out_features == V:
            found = (name, m.weight)
    if found[0] is None:
        for name, m in model.named_modules():
            if isinstance(m, nn.Embedding) and m.num_embeddings == V:
                found = (name, m.weight)
    return found


def init_loss_rule(subject: Subject, batches: int = 2) -> CheckResult:
    """The loss at initialisation against ln V (uniform guessing), with the logits' scale."""
    model = subject.fresh().eval()
    Vm = subject.model_vocab or subject.vocab_size
    rng = subject.rng(3)
    losses, stds, peak, kinds = [], [], 0.0, set()
    with torch.no_grad():
        for i in range(batches):
            x, y = subject.batch(subject.B, subject.T, rng)
            logits = subject.logits(model, x)
            if not bool(torch.isfinite(logits).all()):
                where = first_nonfinite(model, lambda: subject.logits(model, x))
                return nonfinite_result("init_loss", f"the logits are not finite at initialisation on batch {i + 1} "
                                                     f"of {batches} ({int((~torch.isfinite(logits)).sum()):,} of "
                                                     f"{logits.numel():,} values)", where=where)
            losses.append(float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))))
            stds.append(float(logits.std(dim=-1).mean()))
            kinds.add(output_kind(logits))
            peak = max(peak, float(logits.abs().max()))
    loss, std, ref = sum(losses) / len(losses), sum(stds) / len(stds), math.log(Vm)
    ev = {"loss": loss, "ln_V": ref, "excess_nats": loss - ref, "logit_std": std, "max_abs_logit": peak,
          "vocab_size": Vm}
    txt = (f"loss at init {loss:.3f} nats vs ln {Vm} = {ref:.3f} (uniform guessing), {loss - ref:+.2f} nats; "
           f"the logits' std across the vocabulary is {std:.3g} (max |logit| {peak:.3g})")
    kind = kinds.pop() if len(kinds) == 1 else None
    ev["output_kind"] = kind or "logits"
    if kind in BOUNDED:  # the loss is near ln V whatever the model does: say so instead of "ok"
        what, fix, seen = BOUNDED[kind]
        return CheckResult("init_loss", False, {"summary": f"{what} ({seen}; loss at init {loss:.3f} nats vs "
                                                           f"ln {Vm} = {ref:.3f})", **ev}, fix)
    if math.isfinite(loss) and loss <= ref + INIT_EXCESS:
        return CheckResult("init_loss", True, {"summary": txt + (f"; {LOG_PROBS_TEXT}" if kind == LOG_PROBABILITIES
                                                                 else ""), **ev})
    name, w = _output_layer(model, Vm)
    if w is not None:
        ev["output_layer"], ev["output_weight_std"] = name, float(w.detach().float().std())
        txt += f"; the output layer {name} starts with weight std {ev['output_weight_std']:.3g}"
    where = f"{name}.weight" if name else "the output layer's weight"
    return CheckResult("init_loss", False, {"summary": txt + " -- the model starts out confidently wrong", **ev},
                       f"start the output layer small so the first guesses are near uniform (loss ~ ln V): "
                       f"nn.init.normal_({where}, std=0.02) or zeros, and no large scale on the logits")


# ------------------------------------------------------------------------- no_gradient
def no_gradient_rule(subject: Subject) -> CheckResult:
    """Every parameter gets a gradient: none that is None, all-zero (after a few steps) or frozen."""
    torch.manual_seed(subject.seed)
    model = subject.fresh().train()
    named = list(model.named_parameters())
    frozen = [n for n, p in named if not p.requires_grad]
    live = [(n, p) for n, p in named if p.requires_grad]
    ev: dict = {"parameters": len(named), "trainable": len(live)}
    if not live:
        none_of = ("the model's 1 parameter does not require grad" if len(named) == 1 else
                   f"none of the {len(named)} parameters requires grad")
        return CheckResult("no_gradient", False, {"summary": none_of,
                                                  "frozen": frozen, **ev},
                           "set requires_grad=True on the parameters (do not freeze the whole model)")
    rng = subject.rng(4)
    opt: Optional[torch.optim.Optimizer] = None  # built only when a step is needed (most models need none)
    zero: list[str] = []
    none: list[str] = []
    called: set[int] = set()  # the modules whose forward ran at step 0, and the parameters any op read
    for step in range(NOGRAD_STEPS + 1):
        x, y = subject.batch(subject.free_batch(4), subject.T, rng)
        with _calls_seen(model, called if step == 0 else None):
            loss = subject.loss(model, x, y)
        for _, p in live:
            p.grad = None
        if loss.requires_grad:
            call_user(loss.backward)
        bad = [n for n, p in live if p.grad is not None and not bool(torch.isfinite(p.grad).all())]
        if bad or not math.isfinite(float(loss.detach())):
            when = "at initialisation" if step == 0 else f"after {counted(step, 'AdamW step')} (lr 1e-3)"
            grads = (f" and the gradient of {counted(len(bad), 'parameter')} is not finite ({_names(bad)})"
                     if bad else "")
            return nonfinite_result("no_gradient", f"{when} the loss is {float(loss.detach()):.4g}{grads}: a NaN "
                                                   "gradient hides whether it would be zero", ev)
        if step == 0:
            none = [n for n, p in live if p.grad is None]
            zero = [n for n, p in live if p.grad is not None and not bool(p.grad.any())]
        else:
            grads = dict(live)
            zero = [n for n in zero if grads[n].grad is None or not bool(grads[n].grad.any())]
        if not zero or not loss.requires_grad:
            break
        opt = opt or torch.optim.AdamW([p for _, p in live], lr=1e-3)
        opt.step()
    owner = {f"{mn}.{pn}" if mn else pn: m for mn, m in model.named_modules()
             for pn, _ in m.named_parameters(recurse=False)}
    params = dict(named)
    uncalled = [n for n in none if n in owner and id(owner[n]) not in called and id(params.get(n)) not in called]
    none = [n for n in none if n not in uncalled]
    ev.update({"no_grad": none, "never_called": uncalled, "zero_grad": zero, "frozen": frozen})
    if not (none or uncalled or zero or frozen):
        every = "the 1 parameter gets" if len(live) == 1 else f"all {len(live)} parameters get"
        return CheckResult("no_gradient", True, {"summary": f"{every} a non-zero gradient", **ev})
    return _no_gradient_verdict(ev, none, zero, frozen, len(named))


@contextlib.contextmanager
def _calls_seen(model: nn.Module, called: Optional[set]) -> Iterator[None]:
    """Inside, every module of ``model`` whose forward runs adds its id to ``called``, and so does every parameter
    that an op reads (None: nothing is watched). A module may be used without its forward being called:
    ``nn.MultiheadAttention`` passes ``out_proj``'s weight to its attention function and never calls ``out_proj``,
    which was called a module "forward never calls" (with a detached block, whose gradients were None anyway)."""
    if called is None:
        yield
        return
    from torch.overrides import TorchFunctionMode

    ids = {id(p) for p in model.parameters()}

    class ParamsRead(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if getattr(func, "__name__", None) == "__get__":  # an attribute read (weight.device, .shape): no use
                return func(*args, **kwargs)
            for a in (*args, *kwargs.values()):
                for t in (a if isinstance(a, (list, tuple)) else (a,)):
                    if id(t) in ids:
                        called.add(id(t))
            return func(*args, **kwargs)

    hooks = [m.register_forward_hook(lambda mod, i, o: called.add(id(mod))) for m in model.modules()]
    try:
        with ParamsRead():
            yield
    finally:
        for h in hooks:
            h.remove()


def _no_gradient_verdict(ev: dict, none: list[str], zero: list[str], frozen: list[str], total: int) -> CheckResult:
    parts, remedy = [], []
    uncalled = ev.get("never_called", [])
    if uncalled:
        parts.append(f"{len(uncalled)} of {counted(total, 'parameter')} {agree(len(uncalled), 'belongs', 'belong')} "
                     f"to modules that forward never calls: {_names(uncalled)}")
        remedy.append("call each module where it belongs in forward (e.g. x = x + attn(ln1(x)) uses ln1), or delete "
                      "the ones you do not mean to use: their parameters never train")
    if none:
        parts.append(f"{len(none)} of {counted(total, 'parameter')} {agree(len(none), 'gets', 'get')} no gradient at "
                     f"all (grad None: {agree(len(none), 'it never reaches', 'they never reach')} the loss): "
                     f"{_names(none)}")
        embedding = all(any(w in n.lower() for w in ("emb", "pos", "wpe", "wte", "tok")) for n in none)
        example = ("x = tok(idx) + pos(torch.arange(T)): an embedding table is used only when its output is added "
                   "into the stream" if embedding else "x = x + out_proj(attention) into the stream")
        remedy.append(f"a part that is computed but never reaches the loss: use its output (e.g. {example}), and do "
                      "not .detach() it or run it under torch.no_grad()")
    if zero:
        parts.append(f"{len(zero)} {agree(len(zero), 'gets', 'get')} an all-zero gradient even after {NOGRAD_STEPS} "
                     f"optimizer steps: {_names(zero)}")
        remedy.append("an all-zero gradient means the output does not depend on them (multiplied by 0, or a "
                      "constant path): check how their result is used")
    if frozen:
        parts.append(f"{len(frozen)} {agree(len(frozen), 'is', 'are')} frozen (requires_grad=False): {_names(frozen)}")
        remedy.append("set requires_grad=True on the frozen ones (or register_buffer them if they are meant to stay "
                      "fixed)")
    return CheckResult("no_gradient", False, {"summary": "; ".join(parts), **ev}, "; ".join(remedy))
