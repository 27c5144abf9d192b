"""depthlab.data: corpora (encodings, line ends, sizes, the embedded one), the token cache, splits
(``data.split lines``: a seeded shuffle of whole lines), BPE corpora, batches."""

import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from depthlab import data as D, train
from depthlab.config import DataConfig
from depthlab.errors import DepthlabError

from conftest import QUIET, tiny_config


def test_embedded_corpus():
    c = D.load_corpus(DataConfig())
    assert c.tokenizer.vocab_size == 65
    assert len(c.tokens) == 1115394 and c.tokens.dtype == np.uint8
    assert c.n_train == 1115394 - 111539
    assert c.tokenizer.decode(c.tokens[:14]) == "First Citizen:"


def _write(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_crlf_cr_bom_normalised(tmp_path):
    base = "one\ntwo\n\nthree\n" * 50
    ref = D.load_corpus(DataConfig(path=str(_write(tmp_path, "lf.txt", base.encode()))))
    crlf = D.load_corpus(DataConfig(path=str(_write(tmp_path, "crlf.txt",
                                                    b"\xef\xbb\xbf" + base.replace("\n", "\r\n").encode()))))
    cr = D.load_corpus(DataConfig(path=str(_write(tmp_path, "cr.txt", base.replace("\n", "\r").encode()))))
    for c in (crlf, cr):
        assert c.tokenizer.vocab == ref.tokenizer.vocab
        assert np.array_equal(np.asarray(c.tokens), np.asarray(ref.tokens))
    assert crlf.crlf_fixed == base.count("\n") and crlf.cr_fixed == 0 and crlf.bom_dropped
    assert cr.cr_fixed == base.count("\n") and cr.crlf_fixed == 0


def test_crlf_and_cr_shakespeare_keep_65_symbols(tmp_path):
    from depthlab.config import DataConfig
    from depthlab.data import embedded_corpus_path, load_corpus

    text = embedded_corpus_path().read_text()
    for name, nl in (("crlf", "\r\n"), ("cr", "\r")):
        p = tmp_path / f"{name}.txt"
        p.write_bytes(text.replace("\n", nl).encode())
        c = load_corpus(DataConfig(path=str(p)))
        assert c.tokenizer.vocab_size == 65 and "\r" not in c.tokenizer.vocab
        assert c.tokenizer.decode(c.tokens[:200]).count("\n") == text[:200].count("\n")


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_chunked_encoding_matches_whole(tmp_path, monkeypatch):
    text = ("ab\r\ncé世🙂\r" * 300)
    p = _write(tmp_path, "mixed.txt", text.encode("utf-8"))
    whole = D.load_corpus(DataConfig(path=str(p), cache_dir=str(tmp_path / "c1")))
    monkeypatch.setattr(D, "CHUNK_BYTES", 7)  # splits multi-byte characters and CRLF pairs
    chunked = D.load_corpus(DataConfig(path=str(p), cache_dir=str(tmp_path / "c2")))
    assert chunked.tokenizer.vocab == whole.tokenizer.vocab
    assert np.array_equal(np.asarray(chunked.tokens), np.asarray(whole.tokens))
    expect = text.replace("\r\n", "\n").replace("\r", "\n")
    assert chunked.tokenizer.decode(chunked.tokens) == expect


def test_cp1252_error_and_fix(tmp_path):
    p = _write(tmp_path, "w.txt", b"It" + b"\x92" + b"s fine, it" + b"\x92" + b"s fine\n" * 20)
    with pytest.raises(DepthlabError) as e:
        D.load_corpus(DataConfig(path=str(p)))
    msg = str(e.value)
    assert "byte 0x92 at byte offset 2" in msg and "data.encoding" in msg and str(p) in msg
    c = D.load_corpus(DataConfig(path=str(p), encoding="cp1252"))
    assert "\u2019" in c.tokenizer.vocab


def test_cp1252_trains_with_encoding(tmp_path):
    p = tmp_path / "w.txt"
    p.write_bytes(b"It\x92s a fine day, isn\x92t it?\n" * 30)
    run = train(tiny_config(tmp_path / "r", p, train=dict(max_iters=3)).__class__.from_dict(
        {**tiny_config(tmp_path / "r", p, train=dict(max_iters=3)).to_dict(),
         "data": {"path": str(p), "encoding": "cp1252"}}), **QUIET)
    vocab = json.loads((run / "vocab.json").read_text())
    assert "\u2019" in vocab and "\x92" not in vocab


def test_utf16_file_gets_the_right_fix(tmp_path):
    from depthlab.config import DataConfig
    from depthlab.data import load_corpus

    p = tmp_path / "u16.txt"
    p.write_text("hello world\n" * 20, encoding="utf-16")
    with pytest.raises(DepthlabError, match="utf-16"):
        load_corpus(DataConfig(path=str(p)))
    assert load_corpus(DataConfig(path=str(p), encoding="utf-16")).tokenizer.vocab_size == 9


def test_error_offset_in_later_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(D, "CHUNK_BYTES", 5)
    p = _write(tmp_path, "late.txt", "aé".encode() * 10 + b"\xff")
    with pytest.raises(DepthlabError, match="byte offset 30"):
        D.load_corpus(DataConfig(path=str(p)))


@pytest.mark.parametrize("kind,needle", [("missing", "not found"), ("empty", "empty"), ("dir", "directory")])
def test_bad_paths(tmp_path, kind, needle):
    p = tmp_path / "x.txt"
    if kind == "empty":
        p.write_bytes(b"")
    elif kind == "dir":
        p.mkdir()
    with pytest.raises(DepthlabError, match=needle):
        D.load_corpus(DataConfig(path=str(p)))


def test_short_corpus_names_both_numbers(tmp_path):
    c = D.load_corpus(DataConfig(path=str(_write(tmp_path, "s.txt", b"x" * 30))))
    with pytest.raises(DepthlabError) as e:
        c.check_block_size(64)
    assert "30" in str(e.value) and "65" in str(e.value)
    big = D.load_corpus(DataConfig(path=str(_write(tmp_path, "s2.txt", b"to be or not to be " * 10))))
    big.check_block_size(8)  # 190 chars: both splits are long enough
    said = []
    big.check_block_size(40, log=said.append)  # the 10 % val split (19 chars) is shorter than 41: enlarged
    assert len(big.val) == 41 and len(big.train) == 190 - 41
    assert said == ["warning: the validation split was shorter than model.block_size + 1 = 41 tokens; the last 41 "
                    "tokens are the validation split instead (a larger data.val_fraction or a longer text gives more)"]


def test_tiny_corpora(tmp_path):
    p = tmp_path / "30.txt"
    p.write_text("abcdefghij" * 3)
    with pytest.raises(DepthlabError) as e:
        train(tiny_config(tmp_path / "a", p, model=dict(block_size=64)), **QUIET)
    assert "30" in str(e.value) and "65" in str(e.value)
    run = train(tiny_config(tmp_path / "b", p, model=dict(block_size=8), train=dict(max_iters=5)), **QUIET)
    assert json.loads((run / "summary.json").read_text())["final_step"] == 5
    one = tmp_path / "one.txt"
    one.write_text("a" * 200)
    logs = []
    train(tiny_config(tmp_path / "c", one, model=dict(block_size=8), train=dict(max_iters=5)), log=logs.append)
    assert any("single distinct character" in line for line in logs)


@pytest.mark.slow
def test_500mb_file_streams_with_bounded_memory(tmp_path):
    from depthlab.data import embedded_corpus_path

    base = embedded_corpus_path().read_bytes()
    p = tmp_path / "big.txt"
    size = 500_000_000
    with open(p, "wb") as f:
        for _ in range(size // len(base)):
            f.write(base)
        f.write(base[: size % len(base)])
    child = ("import sys; from depthlab.config import DataConfig; from depthlab.data import load_corpus\n"
             "c = load_corpus(DataConfig(path=sys.argv[1], cache_dir=sys.argv[2]))\n"
             "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
             "print(len(c.tokens), c.tokens.dtype, c.tokenizer.vocab_size, int(hwm) * 1024)")
    r = subprocess.run([sys.executable, "-c", child, str(p), str(tmp_path / "cache")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-1000:]
    n, dtype, v, rss = r.stdout.split()
    assert int(n) == size and dtype == "uint8" and int(v) == 65
    assert int(rss) <= 3 * size
    assert int(rss) < 400_000_000  # streaming: memory does not grow with the file
    tok = next((tmp_path / "cache").glob("*/tokens.bin"))
    assert tok.stat().st_size == size  # one byte per character


def test_get_batch_shapes_and_shift():
    data = np.arange(100, dtype=np.uint8)
    rng = np.random.default_rng(0)
    x, y = D.get_batch(data, 8, 5, rng)
    assert x.shape == (5, 8) and y.shape == (5, 8) and x.dtype.is_floating_point is False
    assert (y[:, :-1] == x[:, 1:]).all() and (y[:, -1] == x[:, -1] + 1).all()
    assert int(x.max()) <= 99 - 1
    # the generator state fully determines the batch
    s = np.random.default_rng(3)
    s2 = np.random.default_rng(3)
    assert (D.get_batch(data, 8, 5, s)[0] == D.get_batch(data, 8, 5, s2)[0]).all()


# -------------------------------------------- line-structured corpora: the sorted-lines warning and data.split lines
def _load(path, seed=7, **kw):
    logs = []
    c = D.load_corpus(DataConfig(path=str(path), **kw), log=logs.append, seed=seed)
    return c, [x for x in logs if x.startswith("warning")]


def test_line_order_counts_do_not_depend_on_where_the_chunks_end():
    """The sorted-lines count casefolds and splits a chunk at once: a line cut by a chunk's end is whole next time."""
    text = "b\na\nB\n\n  \nc\nc"  # non-empty lines casefolded: b a b c c
    for cut in range(len(text) + 1):
        for cut2 in range(cut, len(text) + 1):
            order = D._LineOrder()
            for piece in (text[:cut], text[cut:cut2], text[cut2:]):
                order.feed(piece)
            order.feed("", final=True)
            assert order.stats() == {"n": 5, "pairs": 4, "up": 3, "down": 2}, (cut, cut2)


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


# ----------------------- byte-level BPE corpora: trained on the train split only, cached, chunk-independent encoding
def _split_text(text, vf=0.1):
    cut = len(text) - int(len(text) * vf)
    return text[:cut], text[cut:]


def test_bpe_learns_from_the_train_split_only_and_encodes_each_split_alone(bpe_file, monkeypatch):
    monkeypatch.setattr(D, "PIECE_CHARS", 37)  # many cuts: the safe cut must not change a single token
    c = D.load_corpus(DataConfig(path=str(bpe_file), tokenizer="bpe", vocab_size=400))
    text = bpe_file.read_text(encoding="utf-8")
    tr, va = _split_text(text)
    assert c.n_chars == len(text) and c.n_train_chars == len(tr)
    assert np.array_equal(np.asarray(c.train), c.tokenizer.encode(tr))
    assert np.array_equal(np.asarray(c.val), c.tokenizer.encode(va))
    assert not any("Xylo" in t or "quartz" in t for t in c.tokenizer.vocab)  # val text taught nothing
    assert c.tokenizer.vocab[0] == D.EOT and c.tokenizer.vocab_size <= 400
    assert c.tokens.dtype == np.uint16


def test_bpe_is_trained_once_per_corpus_and_settings(bpe_file, monkeypatch):
    a = D.load_corpus(DataConfig(path=str(bpe_file), tokenizer="bpe", vocab_size=300))

    def boom(*a, **k):
        raise AssertionError("retrained")

    monkeypatch.setattr(D, "train_bpe", boom)
    b = D.load_corpus(DataConfig(path=str(bpe_file), tokenizer="bpe", vocab_size=300))
    assert a.tokenizer.sha256 == b.tokenizer.sha256
    with pytest.raises(AssertionError, match="retrained"):  # other settings: another tokenizer
        D.load_corpus(DataConfig(path=str(bpe_file), tokenizer="bpe", vocab_size=301))
    # a given tokenizer (a resumed run's) is used as it is, never retrained
    c = D.load_corpus(DataConfig(path=str(bpe_file), tokenizer="bpe", vocab_size=301), tokenizer_json=a.tokenizer.json)
    assert c.tokenizer.sha256 == a.tokenizer.sha256


def test_large_train_split_teaches_bpe_from_evenly_spaced_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr(D, "BPE_TRAIN_CHARS", 400)
    monkeypatch.setattr(D, "PIECE_CHARS", 100)
    text = "".join(f"{i:04d}|" for i in range(2000))  # 10,000 characters, each position recognisable
    path = tmp_path / "numbers.txt"
    path.write_text(text, encoding="utf-8")
    pieces, real = [], D.train_bpe

    def taught(texts, vocab_size):  # what the tokenizer is trained on
        pieces.extend(texts)
        return real(pieces, vocab_size)

    monkeypatch.setattr(D, "train_bpe", taught)
    c = D.load_corpus(DataConfig(path=str(path), tokenizer="bpe", vocab_size=300, val_fraction=0.2))
    assert c.n_train_chars == 8000
    assert len(pieces) == 4 and all(len(p) == 100 for p in pieces)
    assert [p[:5] for p in pieces] == ["0000|", "0400|", "0800|", "1200|"]  # spread over the train split only


# ------------------------------------------------------------------ issue 23 case 2: the characters behind bits/char
def test_a_corpus_of_documents_joined_by_endoftext_counts_every_character(tmp_path):
    """Paragraphs joined by "\\n<|endoftext|>\\n": the val split's characters per token count all of them."""
    from depthlab import evaluation
    from conftest import TINY_TEXT

    text = "\n<|endoftext|>\n".join(TINY_TEXT.split("\n\n")) + "\ncafé 世界\n"
    p = tmp_path / "docs.txt"
    p.write_text(text, encoding="utf-8")
    c = D.load_corpus(DataConfig(path=str(p), tokenizer="bpe", vocab_size=300))
    val_text = text[c.n_train_chars:]
    assert "<|endoftext|>" in val_text and 0 not in np.asarray(c.tokens)  # typed text never becomes id 0
    tc = c.tokenizer.token_chars
    assert tc[np.asarray(c.val)].sum() == len(val_text) and tc[np.asarray(c.train)].sum() == c.n_train_chars
    assert c.val_chars_per_token == pytest.approx(len(val_text) / len(c.val))  # what the baselines divide by
    # the whole-split evaluation: nats x tokens / (bits/char x ln 2) = the characters of its targets
    import torch

    from conftest import tiny_gpt

    res = evaluation.split_loss(tiny_gpt(vocab_size=c.tokenizer.vocab_size, block_size=16), np.asarray(c.val), 16, 4,
                                tc, torch.device("cpu"))
    first = int(tc[int(c.val[0])])  # the first token is an input only
    assert res.loss * res.tokens / (res.bpc * np.log(2)) == pytest.approx(len(val_text) - first, rel=1e-9)


def test_a_file_where_the_cache_folder_goes_is_one_line(tmp_path, tiny_text_file, capsys):
    from depthlab.cli import main

    f = tmp_path / "afile"
    f.write_text("mine")
    for cache in (f, f / "sub"):
        rc = main(["train", "--data.path", str(tiny_text_file), "--data.cache_dir", str(cache), "--train.max_iters",
                   "1", "--train.out_dir", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and "--data.cache_dir" in err and "FileExistsError" not in err, err
    assert f.read_text() == "mine" and not (tmp_path / "o").exists()
