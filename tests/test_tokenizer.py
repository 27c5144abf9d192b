"""depthlab.tokenizer: character and byte-level BPE tokenizers: round trips, unknown characters named,
id dtypes, characters per token, streaming decode."""


import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from depthlab import data as D
from depthlab.data import CharTokenizer
from depthlab.errors import DepthlabError

from conftest import TINY_TEXT


def test_tokenizer_round_trip_cjk_emoji():
    text = "Hello, 世界! 🙂🚀 naïve café\n\tend"
    tok = D.CharTokenizer.from_text(text)
    assert tok.decode(tok.encode(text)) == text
    assert tok.vocab == sorted(set(text))
    assert tok.encode("🙂")[0] == tok.vocab.index("🙂")


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1))
def test_fuzz_tokenizer_round_trip(text):
    tok = CharTokenizer.from_text(text)
    assert tok.decode(tok.encode(text)) == text


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


def test_token_chars_count_each_character_once():
    tok = D.train_bpe(["café 世界 naïve 🙂 " * 20 + TINY_TEXT[:500]], 300)
    for text in ("café 世界 naïve 🙂", "🙂🙂x世", TINY_TEXT[:300], "\u00e9\u4e16"):
        ids = tok.encode(text)
        assert tok.token_chars[ids].sum() == len(text)
    assert tok.token_chars[0] == 0  # <|endoftext|>


def test_streaming_decode_never_prints_a_broken_character():
    tok = D.train_bpe([TINY_TEXT], 300)  # ASCII only: "世" and "🙂" are several byte tokens each
    text = "ab 世界🙂 c"
    ids = tok.encode(text)
    assert len(ids) > len(text)  # some character is split across tokens
    piece = tok.stream_decoder(prefix=ids[:2])
    out = [piece(i) for i in ids[2:]]
    assert "".join(out) == tok.decode(ids[2:]) and all("\ufffd" not in p for p in out)
    assert "" in out  # the first bytes of a character print nothing; its last byte prints it whole
