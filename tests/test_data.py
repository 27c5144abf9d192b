import numpy as np
import pytest

from depthlab import data as D
from depthlab.config import DataConfig
from depthlab.errors import DepthlabError


def test_tokenizer_round_trip_cjk_emoji():
    text = "Hello, 世界! 🙂🚀 naïve café\n\tend"
    tok = D.CharTokenizer.from_text(text)
    assert tok.decode(tok.encode(text)) == text
    assert tok.vocab == sorted(set(text))
    assert tok.encode("🙂")[0] == tok.vocab.index("🙂")


def test_tokenizer_unknown_chars_named_with_positions():
    tok = D.CharTokenizer.from_text("abc ")
    with pytest.raises(DepthlabError) as e:
        tok.encode("ab é x☕")
    assert "'é' at position 3" in str(e.value) and "'x' at position 5" in str(e.value)
    assert "'☕' at position 6" in str(e.value)


@pytest.mark.parametrize("v,dt", [(1, np.uint8), (256, np.uint8), (257, np.uint16), (65535, np.uint16),
                                  (65536, np.uint32)])
def test_token_dtype(v, dt):
    assert D.token_dtype(v) == np.dtype(dt)


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
