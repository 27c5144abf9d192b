"""Corpus baselines: published Tiny Shakespeare figures, a naive recount, sparse == dense."""

import math
from collections import Counter

import numpy as np
import pytest

from depthlab.analytics.baselines import (bigram_nats, corpus_baselines, format_baselines, unigram_nats,
                                          uniform_nats, write_baselines)
from depthlab.config import DataConfig
from depthlab.data import CharTokenizer, load_corpus
from depthlab.errors import DepthlabError


def test_tiny_shakespeare_default_split():
    c = load_corpus(DataConfig())
    b = corpus_baselines(c.train, c.val, len(c.tokenizer.vocab))
    assert round(b["uniform"]["nats"], 3) == 4.174
    assert round(b["unigram"]["nats"], 3) == 3.347
    assert round(b["bigram"]["nats"], 3) == 2.482
    assert b["vocab_size"] == 65
    assert b["bigram"]["bits_per_char"] == pytest.approx(b["bigram"]["nats"] / math.log(2))


def naive(train_text: str, val_text: str, vocab: list[str]):
    V = len(vocab)
    uni = Counter(train_text)
    n = len(train_text)
    unigram = -sum(math.log((uni[ch] + 1) / (n + V)) for ch in val_text) / len(val_text)
    pairs = Counter(zip(train_text, train_text[1:]))
    first = Counter(train_text[:-1])
    bi = [math.log((pairs[(a, b)] + 1) / (first[a] + V)) for a, b in zip(val_text, val_text[1:])]
    return math.log(V), unigram, -sum(bi) / len(bi)


def test_matches_naive_dict_recount():
    text = "the cat sat on the mat; the dog ate the hat. zebra!" * 3
    train_text, val_text = text[:120], text[120:]
    tok = CharTokenizer.from_text(text)
    tr, va = np.array(tok.encode(train_text)), np.array(tok.encode(val_text))
    b = corpus_baselines(tr, va, tok.vocab_size)
    u, un, bi = naive(train_text, val_text, tok.vocab)
    assert b["uniform"]["nats"] == pytest.approx(u, rel=1e-12)
    assert b["unigram"]["nats"] == pytest.approx(un, rel=1e-12)
    assert b["bigram"]["nats"] == pytest.approx(bi, rel=1e-12)
    assert un < u and bi < un  # more context, lower cross-entropy on this repetitive text


def test_sparse_path_equals_dense_and_handles_large_vocab():
    rng = np.random.default_rng(0)
    V = 300_000  # V^2 = 9e10 cells: a dense table would be 720 GB
    tr = rng.integers(0, V, size=5000)
    va = np.concatenate([tr[:50], rng.integers(0, V, size=50)])  # seen and unseen pairs
    sparse = bigram_nats(tr, va, V)
    small_tr, small_va = tr % 97, va % 97
    assert bigram_nats(small_tr, small_va, 97, dense_limit=0) == pytest.approx(
        bigram_nats(small_tr, small_va, 97), rel=1e-12)
    pairs = Counter(zip(tr[:-1].tolist(), tr[1:].tolist()))
    first = Counter(tr[:-1].tolist())
    want = -np.mean([math.log((pairs[(a, b)] + 1) / (first[a] + V)) for a, b in zip(va[:-1].tolist(), va[1:].tolist())])
    assert sparse == pytest.approx(want, rel=1e-12)
    assert unigram_nats(tr, va, V) > 0


def test_errors_and_files(tmp_path):
    with pytest.raises(DepthlabError):
        uniform_nats(0)
    with pytest.raises(DepthlabError, match="at least 2"):
        bigram_nats(np.array([1]), np.array([0, 1]), 3)
    with pytest.raises(DepthlabError, match=r"\[0, 3\)"):
        unigram_nats(np.array([0, 5]), np.array([0, 1]), 3)
    b = corpus_baselines(np.array([0, 1, 2, 1]), np.array([1, 2]), 3)
    p = write_baselines(tmp_path, b)
    import json

    assert json.loads(p.read_text())["bigram"]["nats"] == b["bigram"]["nats"]
    assert format_baselines(b).startswith("baselines (val, nats | bits/char): uniform 1.099")


def test_the_one_char_floor_is_the_val_splits_own_conditional_entropy():
    """No function of the current token scores val below it; the smoothed train bigram is above it."""
    import numpy as np

    from depthlab.analytics.baselines import bigram_nats, one_char_floor_nats

    val = np.array([0, 1, 0, 1, 0, 2], dtype=np.int64)  # 0 -> 1 twice, 0 -> 2 once; 1 -> 0 twice
    h = -(2 / 5 * np.log(2 / 3) + 1 / 5 * np.log(1 / 3))  # only the token after 0 is uncertain
    assert one_char_floor_nats(val, 3) == pytest.approx(h)
    assert one_char_floor_nats(np.array([0, 1] * 10, dtype=np.int64), 2) == pytest.approx(0.0)
    assert bigram_nats(val, val, 3) > one_char_floor_nats(val, 3)  # add-one smoothing costs even in-sample
