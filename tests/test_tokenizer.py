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


# ------------------------------------------------------------------ issue 23: text is text; the stream is the text
@pytest.fixture(scope="module")
def ascii_bpe():
    """A BPE learned from ASCII text with "<|endoftext|>" in it: other characters are several byte tokens each."""
    return D.train_bpe([(TINY_TEXT[:400] + "\n<|endoftext|>\n") * 5], 300)


def test_a_typed_endoftext_is_text_not_the_control_token(ascii_bpe):
    ids = ascii_bpe.encode("a <|endoftext|> b")
    assert 0 not in ids and ascii_bpe.decode(ids) == "a <|endoftext|> b"
    assert ascii_bpe.token_chars[ids].sum() == len("a <|endoftext|> b")
    assert ascii_bpe.tok.token_to_id(D.EOT) == 0 and ascii_bpe.decode([0]) == D.EOT  # the token itself is kept


@settings(max_examples=200, deadline=None)
@given(text=st.lists(st.sampled_from(["<|endoftext|>", "<|", "endoftext", "|>", "\n", " ", "a", "é", "世", "🙂", "\r"]),
                     max_size=30).map("".join) | st.text())
def test_fuzz_characters_behind_bits_per_char_are_len_text(text, ascii_bpe):
    ids = ascii_bpe.encode(text)
    assert ascii_bpe.token_chars[ids].sum() == len(text) and ascii_bpe.decode(ids) == text and 0 not in ids


def test_a_prompt_that_is_not_unicode_text_is_named():
    tok = D.train_bpe([TINY_TEXT], 300)
    with pytest.raises(DepthlabError, match=r"not valid Unicode text: '\\udcff' at position 1"):
        tok.encode("a\udcffb")  # what Python makes of the byte 0xff in a command-line argument


def _byte_ids(tok):
    """The id of each single byte 0..255 (GPT-2's byte alphabet)."""
    from depthlab.tokenizer import _byte_level_decoder

    char_of = {b: c for c, b in _byte_level_decoder().items()}
    return [tok.tok.token_to_id(char_of[b]) for b in range(256)]


@settings(max_examples=300, deadline=None)
@given(byte_seq=st.lists(st.sampled_from([0x41, 0x20, 0x80, 0xBF, 0xC2, 0xC3, 0xA9, 0xE4, 0xB8, 0x96, 0xED, 0xA0,
                                 0xF0, 0x9F, 0x99, 0x82, 0xF4, 0x90, 0xFF]), max_size=24),
       any_ids=st.lists(st.integers(0, 299), max_size=8))
@pytest.mark.slow  # over a second: the fast tier stays under 3 min
def test_fuzz_streamed_pieces_join_to_the_decoded_text(ascii_bpe, byte_seq, any_ids):
    """Whatever the ids (cut characters, invalid bytes, the special token): pieces, then flush, = decode(ids)."""
    byte_ids = _byte_ids(ascii_bpe)
    for ids in ([byte_ids[b] for b in byte_seq], any_ids, [byte_ids[b] for b in byte_seq] + any_ids):
        piece = ascii_bpe.stream_decoder(prefix=ascii_bpe.encode("café "))
        out = [piece(i) for i in ids] + [piece.flush()]
        assert "".join(out) == ascii_bpe.decode(ids)


def test_stream_flush_gives_what_the_last_token_left_incomplete(ascii_bpe):
    ids = ascii_bpe.encode("ab 世")
    piece = ascii_bpe.stream_decoder()
    shown = "".join(piece(i) for i in ids[:-1])  # "世" is three byte tokens: its last one is missing
    assert shown == "ab " and piece.flush() == "\ufffd" == ascii_bpe.decode(ids[:-1])[len(shown):]
    char = CharTokenizer.from_text("ab")
    piece = char.stream_decoder()
    assert [piece(i) for i in (0, 1)] == ["a", "b"] and piece.flush() == ""
