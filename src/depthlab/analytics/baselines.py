"""Corpus baselines: what a model that uses no (or one character of) context can reach.

Three count models, fitted on the train split and scored on the validation split:

* uniform:  p(x) = 1 / V                       -> cross-entropy ln V
* unigram:  p(x) = (c(x) + 1) / (N + V)         add-one (Laplace) smoothing
* bigram:   p(b | a) = (c(a, b) + 1) / (c(a) + V)  add-one smoothing, c(a) = pairs starting with a

A language model whose validation loss is not below the bigram figure uses no context beyond
the previous character (Jurafsky & Martin, *Speech and Language Processing*, ch. 3, for the
n-gram and add-one definitions). Everything is vectorised with numpy; bigram counts use a dense
V x V table only when it is small and sparse pair codes ``a * V + b`` otherwise, so a large
vocabulary costs memory proportional to the number of *distinct* pairs, not V squared.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ..errors import DepthlabError
from ..callbacks import Callback, RunView, StepInfo
from ..rundir import BASELINES, RunDir, write_json
from ..units import LN2

DENSE_PAIR_LIMIT = 1 << 22  # 4M cells = 32 MB of int64 counts; above this use sparse pair codes

__all__ = ["uniform_nats", "unigram_nats", "bigram_nats", "one_token_line", "one_char_floor_nats", "corpus_baselines",
           "run_baselines",
           "write_baselines", "format_baselines", "BaselinesCallback"]


def _check(tokens: np.ndarray, vocab_size: int, name: str) -> np.ndarray:
    a = np.asarray(tokens)
    if a.ndim != 1:
        raise DepthlabError(f"{name} token ids must be one-dimensional, got shape {a.shape}")
    if vocab_size <= 0:
        raise DepthlabError(f"vocab_size must be positive, got {vocab_size}")
    if a.size and (int(a.max()) >= vocab_size or int(a.min()) < 0):
        raise DepthlabError(f"{name} token ids must lie in [0, {vocab_size}); got {int(a.min())}..{int(a.max())}")
    return a.astype(np.int64, copy=False)


def uniform_nats(vocab_size: int) -> float:
    """Cross-entropy of the uniform distribution over V symbols: ln V nats per token.

    Args:
        vocab_size: V > 0.

    Returns:
        ln V (nats per token).

    Raises:
        DepthlabError: if V <= 0.
    """
    if vocab_size <= 0:
        raise DepthlabError(f"vocab_size must be positive, got {vocab_size}")
    return math.log(vocab_size)


def unigram_nats(train: np.ndarray, val: np.ndarray, vocab_size: int) -> float:
    """Add-one-smoothed unigram cross-entropy: fitted on ``train``, scored on ``val``.

    p(x) = (c(x) + 1) / (N + V); result = -mean over val tokens of ln p(x).

    Args:
        train: token ids, shape (N,), integer in [0, V).
        val: token ids, shape (M,), M >= 1.
        vocab_size: V.

    Returns:
        Nats per token.

    Raises:
        DepthlabError: empty val split or ids outside [0, V).
    """
    tr, va = _check(train, vocab_size, "train"), _check(val, vocab_size, "val")
    if va.size == 0:
        raise DepthlabError("the validation split is empty; cannot score a unigram baseline")
    counts = np.bincount(tr, minlength=vocab_size).astype(np.float64)
    logp = np.log(counts + 1.0) - math.log(tr.size + vocab_size)
    return float(-logp[va].mean()) + 0.0  # + 0.0: a one-symbol corpus gives 0, not -0.0 (printed -0.000)


def bigram_nats(train: np.ndarray, val: np.ndarray, vocab_size: int,
                dense_limit: int = DENSE_PAIR_LIMIT) -> float:
    """Add-one-smoothed bigram cross-entropy: fitted on ``train`` pairs, scored on ``val`` pairs.

    p(b | a) = (c(a, b) + 1) / (c(a) + V), with c(a, b) the count of the consecutive pair (a, b)
    in train and c(a) the number of train pairs whose first token is a. The result is
    -mean over the M - 1 consecutive val pairs of ln p(b | a).

    Args:
        train: token ids, shape (N,), N >= 2.
        val: token ids, shape (M,), M >= 2.
        vocab_size: V.
        dense_limit: use a dense V*V count table when V*V <= this, else sorted sparse pair codes
            (same result; the sparse path needs memory O(distinct pairs)).

    Returns:
        Nats per token.

    Raises:
        DepthlabError: a split shorter than 2 tokens or ids outside [0, V).
    """
    tr, va = _check(train, vocab_size, "train"), _check(val, vocab_size, "val")
    if tr.size < 2 or va.size < 2:
        raise DepthlabError("both splits need at least 2 tokens to score a bigram baseline")
    V = vocab_size
    row = np.bincount(tr[:-1], minlength=V).astype(np.float64)  # c(a)
    tr_codes = tr[:-1] * V + tr[1:]
    va_codes = va[:-1] * V + va[1:]
    if V * V <= dense_limit:
        pair = np.bincount(tr_codes, minlength=V * V)
        c_ab = pair[va_codes].astype(np.float64)
    else:
        uniq, cnt = np.unique(tr_codes, return_counts=True)  # sorted distinct codes
        pos = np.searchsorted(uniq, va_codes)
        pos_c = np.minimum(pos, uniq.size - 1)
        found = uniq[pos_c] == va_codes
        c_ab = np.where(found, cnt[pos_c], 0).astype(np.float64)
    logp = np.log(c_ab + 1.0) - np.log(row[va[:-1]] + V)
    return float(-logp.mean()) + 0.0  # -0.0 -> 0.0


def one_token_line(bigram: float, unigram: Optional[float]) -> float:
    """What the current token alone is known to give (nats per token): the lower of the bigram and unigram
    baselines. Add-one smoothing over a large vocabulary can put the bigram estimate above the unigram's (i.i.d.
    text over 700 characters: 4.780 against 4.544), and no model needs the current token to reach the unigram."""
    return bigram if unigram is None else min(bigram, unigram)


def one_char_floor_nats(val: np.ndarray, vocab_size: int) -> float:
    """The lowest cross-entropy (nats per token) any predictor that sees only the current token can reach on
    ``val`` (token ids, shape (M,), in [0, V)): the conditional entropy of val's own pair counts over its
    N = M - 1 pairs, H(b | a) = -sum c(a,b)/N log(c(a,b)/c(a)).

    No function of the current token scores ``val`` lower (Gibbs' inequality, per current token), so a model's
    loss at position 0 below it, beyond sampling error, means the model sees more than that token. Unlike
    :func:`bigram_nats` (counted on train, add-one smoothed: a neural model can beat that estimate, above all
    with a large BPE vocabulary) it is a bound.

    Raises:
        DepthlabError: fewer than 2 tokens or ids outside [0, V).
    """
    va = _check(val, vocab_size, "val")
    if va.size < 2:
        raise DepthlabError("the val split needs at least 2 tokens to score a one-token floor")
    _, pair = np.unique(va[:-1].astype(np.int64) * vocab_size + va[1:], return_counts=True)
    _, row = np.unique(va[:-1], return_counts=True)
    n = va.size - 1
    return float((-(pair * np.log(pair)).sum() + (row * np.log(row)).sum()) / n) + 0.0  # -0.0 -> 0.0


def corpus_baselines(train: np.ndarray, val: np.ndarray, vocab_size: int,
                     chars_per_token: float = 1.0) -> dict[str, Any]:
    """Uniform, unigram and bigram cross-entropies in nats per token and bits per character.

    ``nats`` are per token, like the model's loss (``bigram_stuck`` compares like with like);
    ``bits_per_char`` divides by the validation text's characters per token (1 for chars, more for BPE).

    Args:
        train: train token ids, shape (N,).
        val: validation token ids, shape (M,).
        vocab_size: V.
        chars_per_token: characters per token of the validation text (:attr:`Corpus.val_chars_per_token`).

    Returns:
        ``{"uniform": {"nats": x, "bits_per_char": x / chars_per_token / ln 2}, "unigram": {...},
        "bigram": {...}, "vocab_size": V, "chars_per_token": c}`` (the format of ``baselines.json``).

    Raises:
        DepthlabError: splits too short or ids out of range.
    """
    out: dict[str, Any] = {}
    for name, nats in (("uniform", uniform_nats(vocab_size)),
                       ("unigram", unigram_nats(train, val, vocab_size)),
                       ("bigram", bigram_nats(train, val, vocab_size))):
        out[name] = {"nats": nats, "bits_per_char": nats / chars_per_token / LN2}
    out["vocab_size"] = int(vocab_size)
    out["chars_per_token"] = float(chars_per_token)
    out["one_char_floor"] = {"nats": one_char_floor_nats(val, vocab_size)}  # a bound, not a baseline model
    return out


def run_baselines(config: dict) -> Optional[dict]:
    """A run's corpus baselines recomputed from its config.json (its baselines.json deleted or damaged), or None
    when the corpus cannot be read or is not the text the run trained on (``resolved.corpus_sha256``): another
    text's lines would judge the run against the wrong levels."""
    from ..config import DataConfig
    from ..data import load_corpus
    from ..rundir import RunDir

    try:
        c = load_corpus(DataConfig(**config.get("data", {})), seed=(config.get("train") or {}).get("seed", 1337))
        block_size = (config.get("model") or {}).get("block_size")
        if block_size:  # the val split training used (a short one is enlarged)
            c.check_block_size(int(block_size))
    except Exception:  # noqa: BLE001 - corpus moved, deleted or unreadable: the callers judge without baselines
        return None
    if RunDir.corpus_changed_in(config, c.sha256):
        return None
    return corpus_baselines(c.train, c.val, len(c.tokenizer.vocab), c.val_chars_per_token)


def format_baselines(b: dict[str, Any]) -> str:
    """One console line: ``baselines (val, nats | bits/char): uniform 4.174 | 6.022, ...``."""
    parts = [f"{k} {b[k]['nats']:.3f} | {b[k]['bits_per_char']:.3f}" for k in ("uniform", "unigram", "bigram")]
    return "baselines (val, nats | bits/char): " + ", ".join(parts) + f"  (V={b['vocab_size']})"


def write_baselines(run_dir: Path, b: dict[str, Any]) -> Path:
    """Write ``run_dir/baselines.json`` atomically and return its path."""
    p = Path(run_dir) / BASELINES
    write_json(p, b)
    return p


class BaselinesCallback(Callback):
    """At train start (main rank): compute the corpus baselines, write baselines.json, print one line.

    The result is cached on the instance per corpus SHA-256, so a sweep that reuses the callback
    pays for the counts once.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple, dict] = {}

    def on_train_start(self, run: RunView, info: StepInfo) -> None:
        """Compute (or reuse), write and print the baselines."""
        if not run.is_main:
            return
        c = run.corpus
        key = (getattr(c, "sha256", None), getattr(c, "n_train", None), len(c.tokens))
        if key not in self._cache:
            self._cache[key] = corpus_baselines(c.train, c.val, len(c.tokenizer.vocab),
                                                getattr(c, "val_chars_per_token", 1.0))
        b = self._cache[key]
        rd = RunDir(run.run_dir)  # a resume writes them again, the same numbers of the same corpus: say why
        fault = ("not the JSON depthlab wrote (damaged or edited by hand)" if rd.damaged(BASELINES) else
                 "missing (deleted, or the run's earlier sessions had no BaselinesCallback)"
                 if info.step > 0 and not rd.file(BASELINES).exists() else "")
        write_baselines(run.run_dir, b)
        if fault:  # a Trainer given its own callbacks writes none: "deleted?" was said of a file never written
            run.log(f"warning: {rd.file(BASELINES)} was {fault}: written now from the run's corpus")
        run.log(format_baselines(b))
