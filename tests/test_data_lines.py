"""Line-structured corpora: the sorted-lines warning and ``data.split lines`` (seeded shuffle of whole lines)."""

import random
from collections import Counter

import numpy as np
import pytest

from depthlab import data as D
from depthlab.trainer import train
from depthlab.config import DataConfig
from depthlab.errors import DepthlabError

from conftest import QUIET, tiny_config


def _names(n=2000, seed=0):
    """n distinct made-up names (letters only), sorted alphabetically."""
    rng = random.Random(seed)
    out = set()
    while len(out) < n:
        out.add("".join(rng.choice("aeioubcdfghklmnprstvz") for _ in range(rng.randint(3, 9))).capitalize())
    return sorted(out)


@pytest.fixture
def names_files(tmp_path):
    names = _names()
    shuffled = names[:]
    random.Random(1).shuffle(shuffled)
    a, b = tmp_path / "sorted.txt", tmp_path / "shuffled.txt"
    a.write_text("\n".join(names) + "\n")
    b.write_text("\n".join(shuffled) + "\n")
    return a, b, names


def _load(path, seed=7, **kw):
    logs = []
    c = D.load_corpus(DataConfig(path=str(path), **kw), log=logs.append, seed=seed)
    return c, [x for x in logs if x.startswith("warning")]


def test_sorted_list_warns_with_tail_split_and_shuffled_copy_does_not(names_files):
    sorted_f, shuffled_f, names = names_files
    _, warn = _load(sorted_f)
    assert len(warn) == 1 and "100% of its 2,000 lines are in ascending order" in warn[0]
    assert "--data.split lines" in warn[0]
    assert _load(shuffled_f)[1] == []
    assert _load(sorted_f, split="lines")[1] == []  # the cure does not warn
    short = sorted_f.with_name("short.txt")
    short.write_text("\n".join(names[:999]) + "\n")
    assert _load(short)[1] == []  # fewer than 1,000 lines: not judged
    rev = sorted_f.with_name("rev.txt")
    rev.write_text("\n".join(reversed(names)) + "\n")
    assert "descending" in _load(rev)[1][0]


def test_lines_split_holds_out_whole_shuffled_lines(names_files):
    sorted_f, _, names = names_files
    c, _ = _load(sorted_f, split="lines", val_fraction=0.1)
    tr = c.tokenizer.decode(c.train).split("\n")
    va = c.tokenizer.decode(c.val).split("\n")
    assert tr[-1] == "" and va[-1] == ""  # both splits end on a line end: no line is cut
    tr, va = tr[:-1], va[:-1]
    assert len(va) == 200 and len(tr) == 1800
    assert Counter(tr + va) == Counter(names)  # every line once, nothing lost or added
    assert tr != sorted(tr) and va != sorted(va)  # the file's order is gone from both splits
    assert sum(n[0] in "STVZ" for n in va) < 100  # validation is not the end of the alphabet (tail: all 200)
    again, _ = _load(sorted_f, split="lines", val_fraction=0.1)
    assert np.array_equal(np.asarray(again.tokens), np.asarray(c.tokens))  # seeded: the same split
    other, _ = _load(sorted_f, seed=8, split="lines", val_fraction=0.1)
    assert not np.array_equal(np.asarray(other.tokens), np.asarray(c.tokens))


def test_lines_split_adds_the_missing_last_newline_and_needs_lines(tmp_path):
    p = tmp_path / "few.txt"
    p.write_text("alpha\nbeta\ngamma")
    c = D.load_corpus(DataConfig(path=str(p), split="lines", val_fraction=0.5), seed=3)
    text = c.tokenizer.decode(c.tokens)
    assert sorted(text.split("\n")[:-1]) == ["alpha", "beta", "gamma"] and text.endswith("\n")
    one = tmp_path / "one.txt"
    one.write_text("no newline at all")
    with pytest.raises(DepthlabError, match="data.split lines needs a file of several lines"):
        D.load_corpus(DataConfig(path=str(one), split="lines"))


def test_lines_split_with_bpe_trains_on_train_lines(names_files):
    sorted_f, _, _ = names_files
    c = D.load_corpus(DataConfig(path=str(sorted_f), split="lines", tokenizer="bpe", vocab_size=300), seed=7)
    chars, _ = _load(sorted_f, split="lines")
    assert c.tokenizer.decode(c.train) == chars.tokenizer.decode(chars.train)
    assert c.tokenizer.decode(c.val) == chars.tokenizer.decode(chars.val)


def test_split_is_recorded_and_resume_refuses_to_change_it(tmp_path, names_files):
    sorted_f = names_files[0]
    cfg = tiny_config(tmp_path / "r", sorted_f, train=dict(max_iters=5))
    cfg.data.split = "lines"
    run = train(cfg, **QUIET)
    assert '"split": "lines"' in (run / "config.json").read_text()
    again = tiny_config(run, sorted_f, train=dict(max_iters=10, resume=True))
    with pytest.raises(DepthlabError, match="data.split 'lines' -> 'tail'"):
        train(again, **QUIET)
