"""Tokenizers: characters (:class:`CharTokenizer`) and byte-level BPE (:class:`BPETokenizer`).

A tokenizer maps text to ids and back, and knows how many characters each id stands for
(``token_chars``: bits per character = nats per token / characters per token / ln 2). The corpus
pipeline that trains, caches and applies them is :mod:`depthlab.data` (which re-exports every
name here). Named ``tokenizer`` (singular): ``tokenizers`` is the Hugging Face package the BPE is
built on.
"""

from __future__ import annotations

import codecs
import hashlib
import re
from typing import Callable, Iterable, Iterator, Optional, Sequence, Union

import numpy as np

from .errors import DepthlabError

__all__ = ["CharTokenizer", "BPETokenizer", "Tokenizer", "EOT", "StreamDecoder", "control_ids", "token_dtype",
           "train_bpe"]



def _check_decodable(ids: Sequence[int], vocab_size: int) -> None:
    """Refuse (DepthlabError) an id outside [0, ``vocab_size``): it stands for no symbol of the vocabulary."""
    bad = next((i for i in ids if not 0 <= i < vocab_size), None)
    if bad is not None:
        raise DepthlabError(f"decode: token id {bad} is outside the vocabulary's ids 0..{vocab_size - 1}")

class StreamDecoder:
    """Decode ids one at a time for streaming: ``piece(i)`` -> the text id ``i`` completes, ``flush()`` -> the rest.

    The pieces of every call, then :meth:`flush`, join to exactly ``tokenizer.decode(ids)`` of the
    same ids (the prefix excluded), whatever the ids, so what is printed is what is returned.

    Args:
        piece: id -> the bytes (BPE) or the text (char) it adds.
        prefix: ids already shown (the prompt): they set the decoder's context and print nothing.
        utf8: pieces are bytes, decoded as UTF-8 with U+FFFD for invalid sequences (what
            ``tokenizers``' byte-level decoder does; the same text, checked by a test).
    """

    def __init__(self, piece: Callable[[int], Union[bytes, str]], prefix: Sequence[int] = (), utf8: bool = False):
        self._piece = piece
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace") if utf8 else None
        for i in prefix:
            self(i)

    def __call__(self, i: int) -> str:
        """The text id ``i`` completes: "" while a character split across tokens waits for its last byte."""
        p = self._piece(int(i))
        return self._dec.decode(p) if self._dec is not None else p

    def flush(self) -> str:
        """What is still held back after the last id: one U+FFFD per incomplete character ("" if none)."""
        return self._dec.decode(b"", final=True) if self._dec is not None else ""


def token_dtype(vocab_size: int) -> np.dtype:
    """Smallest unsigned dtype holding ids < vocab_size: uint8 (<= 256), uint16 (<= 65,535), else uint32."""
    if vocab_size <= 256:
        return np.dtype(np.uint8)
    if vocab_size <= 65535:
        return np.dtype(np.uint16)
    return np.dtype(np.uint32)


class CharTokenizer:
    """Character-level tokenizer: id i <-> the i-th symbol of a sorted code-point vocabulary.

    Args:
        vocab: the symbols (single-character strings), sorted by code point, no duplicates.

    Raises:
        DepthlabError: if ``vocab`` is empty, unsorted, or holds non-single-character entries.
    """

    def __init__(self, vocab: Sequence[str]):
        vocab = list(vocab)
        if not vocab:
            raise DepthlabError("the vocabulary is empty (the corpus has no characters)")
        if any(not isinstance(c, str) or len(c) != 1 for c in vocab) or vocab != sorted(set(vocab)):
            raise DepthlabError("a vocabulary must be sorted unique single characters")
        self.vocab = vocab
        self.stoi = {c: i for i, c in enumerate(vocab)}

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        """Tokenizer whose vocabulary is the sorted unique characters of ``text``."""
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        """V, the number of symbols."""
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` (one per character).

        Raises:
            DepthlabError: naming every character outside the vocabulary and its 0-based position.
        """
        bad = [(i, c) for i, c in enumerate(text) if c not in self.stoi]
        if bad:
            shown = ", ".join(f"{c!r} at position {i}" for i, c in bad[:10])
            more = f" (and {len(bad) - 10} more)" if len(bad) > 10 else ""
            raise DepthlabError(f"the prompt has characters the model's vocabulary lacks: {shown}{more}; "
                                "remove them or train on a corpus that contains them")
        return [self.stoi[c] for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of a sequence of ids in [0, V).

        Raises:
            DepthlabError: an id outside [0, V) (-1 read the last symbol, V an IndexError).
        """
        ids = [int(i) for i in ids]
        _check_decodable(ids, self.vocab_size)
        return "".join(self.vocab[i] for i in ids)


    def stream_decoder(self, prefix: Sequence[int] = ()) -> StreamDecoder:
        """A :class:`StreamDecoder`: each id prints its character at once; ``flush()`` adds nothing."""
        return StreamDecoder(lambda i: self.vocab[i], prefix)

    @property
    def token_chars(self) -> np.ndarray:
        """Characters per token id, shape (V,), float64: all ones (bits/char = nats/token / ln 2)."""
        return np.ones(self.vocab_size)


#: The special token a BPE vocabulary starts with (id 0): GPT-2's end of text, the export's bos/eos.
#: Text never encodes to it: the 13 characters ``<|endoftext|>`` typed in a corpus or a prompt are text
#: (see :class:`BPETokenizer`).
EOT = "<|endoftext|>"


def control_ids(tok) -> tuple[int, ...]:
    """The ids of ``tok`` that are no text: a BPE tokenizer's ``<|endoftext|>`` (no corpus is encoded to it, and an
    export's ``generate`` stops at it); none for a char vocabulary, whose every id is a character."""
    if isinstance(tok, BPETokenizer):
        i = tok.tok.token_to_id(EOT)
        return (i,) if i is not None else ()
    return ()


class BPETokenizer:
    """Byte-level BPE (Sennrich et al. 2016; GPT-2's byte-level variant) on Hugging Face ``tokenizers``.

    Text is text: :meth:`encode` (and the corpus encoding, which goes through :attr:`tok`) never
    turns characters of the input into the special token :data:`EOT`; a ``<|endoftext|>`` written in
    the text is encoded as its 13 characters (``tokenizers``' ``encode_special_tokens``, set on
    :attr:`tok`; it is not part of the JSON), so ``decode(encode(text)) == text`` and the characters
    behind bits/char are ``len(text)``. Id 0 appears only where a caller puts it.

    Args:
        tok: a ``tokenizers.Tokenizer`` (ByteLevel pre-tokenizer and decoder, BPE model).
        source: where it came from (for messages).

    Attributes:
        json: the tokenizer serialised (what ``tokenizer.json`` holds; its sha256 identifies it).
    """

    def __init__(self, tok, source: str = "tokenizer.json"):
        self.json = tok.to_str()  # before the runtime flag below (it is not serialised anyway)
        tok.encode_special_tokens = True  # a literal "<|endoftext|>" in the text is text, not the control token
        self.tok = tok
        self.source = source
        self._vocab: Optional[list[str]] = None
        self._bytes: Optional[list[bytes]] = None

    @classmethod
    def from_str(cls, text: str, source: str = "tokenizer.json") -> "BPETokenizer":
        """Load from the JSON text of a ``tokenizer.json``.

        Raises:
            DepthlabError: the text is not a ``tokenizers`` tokenizer.
        """
        from tokenizers import Tokenizer

        try:
            return cls(Tokenizer.from_str(text), source)
        except Exception as e:  # tokenizers raises plain Exceptions for bad JSON
            raise DepthlabError(f"{source} is not a valid tokenizer ({str(e).splitlines()[0][:120]})") from None

    @property
    def sha256(self) -> str:
        """Hex SHA-256 of :attr:`json` (UTF-8)."""
        return hashlib.sha256(self.json.encode("utf-8")).hexdigest()

    @property
    def vocab_size(self) -> int:
        """V, special tokens included."""
        return self.tok.get_vocab_size(with_added_tokens=True)

    @property
    def vocab(self) -> list[str]:
        """Each id decoded alone (a token holding part of a UTF-8 character shows U+FFFD)."""
        if self._vocab is None:
            self._vocab = [self.tok.decode([i], skip_special_tokens=False) for i in range(self.vocab_size)]
        return self._vocab

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` (byte-level: every Unicode string is encodable; ``<|endoftext|>`` in it is text).

        Raises:
            DepthlabError: naming the lone surrogates (not characters: what Python makes of bytes that
                are not UTF-8, e.g. in a command-line argument) and their 0-based positions.
        """
        if _SURROGATE.search(text):
            bad = [(m.start(), m.group()) for m in _SURROGATE.finditer(text)]
            shown = ", ".join(f"{c!r} at position {i}" for i, c in bad[:10])
            more = f" (and {len(bad) - 10} more)" if len(bad) > 10 else ""
            raise DepthlabError(f"the prompt is not valid Unicode text: {shown}{more} (a byte that is not UTF-8, "
                                "e.g. from a terminal in another encoding); type it as UTF-8")
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (invalid UTF-8 from a cut multi-byte character shows as U+FFFD).

        Raises:
            DepthlabError: an id outside [0, V) (one past V decoded to nothing, -1 raised OverflowError).
        """
        ids = [int(i) for i in ids]
        _check_decodable(ids, self.vocab_size)
        return self.tok.decode(ids, skip_special_tokens=False)

    def token_bytes(self, i: int) -> bytes:
        """The bytes id ``i`` stands for (what the byte-level decoder joins before decoding UTF-8)."""
        if self._bytes is None:
            byte_of = _byte_level_decoder()
            out = []
            for j in range(self.vocab_size):
                piece = self.tok.id_to_token(j) or ""
                # tokenizers' ByteLevel decoder: every character through the byte alphabet, else the UTF-8 of the token
                out.append(bytes(byte_of[c] for c in piece) if all(c in byte_of for c in piece)
                           else piece.encode("utf-8"))
            self._bytes = out
        return self._bytes[int(i)]

    def stream_decoder(self, prefix: Sequence[int] = ()) -> StreamDecoder:
        """A :class:`StreamDecoder` over the ids' bytes.

        A character split across tokens comes out whole with its last byte (earlier calls return
        ""); bytes that can no longer form a character come out as U+FFFD at once; :meth:`StreamDecoder.flush`
        gives the U+FFFD of a character the last token left incomplete. Joined: ``decode(ids)``.

        Args:
            prefix: ids already shown (the prompt): they set the decoder's context and print nothing.
        """
        return StreamDecoder(self.token_bytes, prefix, utf8=True)

    @property
    def token_chars(self) -> np.ndarray:
        """Characters per token id, shape (V,), float64: its UTF-8 lead bytes (bytes not 10xxxxxx).

        Summed over a token sequence this counts each character once, at the token holding its first
        byte, so total nats / sum = nats per character of the text, and the sum over ``encode(text)``
        is ``len(text)`` for every text. Special tokens count 0: no text encodes to them (a
        ``<|endoftext|>`` written in the text is its 13 characters' tokens).
        """
        byte_of = _byte_level_decoder()
        special = set(self.tok.get_added_tokens_decoder())
        out = np.zeros(self.vocab_size)
        for piece, i in self.tok.get_vocab(with_added_tokens=False).items():
            if i not in special:
                out[i] = sum(1 for c in piece if (byte_of[c] & 0xC0) != 0x80)
        return out


_SURROGATE = re.compile("[\ud800-\udfff]")


def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the printable character standing for each byte -> the byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


Tokenizer = Union[CharTokenizer, BPETokenizer]


#: The longest run of non-whitespace characters handed to BPE training as one item. The trainer's cost grows with
#: the square of a word's length (measured: 50,000 characters 1 s, 250,000 26 s), and a text without spaces (DNA,
#: base64, one long repeated line) is one word per piece: its runs are cut into items of this length. Natural text
#: has no word this long, so its merges are unchanged.
BPE_WORD_CHARS = 4096


def _short_words(pieces: Iterable[str]) -> Iterator[str]:
    """``pieces`` with every run of more than :data:`BPE_WORD_CHARS` non-whitespace characters cut into items of at
    most that length (each its own item: within one item the pre-tokenizer would join them again)."""
    long_run = re.compile(rf"\S{{{BPE_WORD_CHARS + 1},}}")
    for piece in pieces:
        start = 0
        for m in long_run.finditer(piece):
            if m.start() > start:
                yield piece[start:m.start()]
            yield from (piece[i:min(i + BPE_WORD_CHARS, m.end())] for i in range(m.start(), m.end(), BPE_WORD_CHARS))
            start = m.end()
        if start < len(piece):
            yield piece[start:] if start else piece


def train_bpe(pieces: Iterable[str], vocab_size: int) -> BPETokenizer:
    """Train a byte-level BPE (GPT-2's pre-tokenizer and alphabet, ``<|endoftext|>`` as id 0).

    Args:
        pieces: the training text, in pieces.
        vocab_size: V wanted; fewer when the text has fewer pairs to merge.

    Returns:
        The trained tokenizer.
    """
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    t = HFTokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    t.train_from_iterator(_short_words(pieces), trainer)
    return BPETokenizer(t, "trained tokenizer")
