"""Text corpus -> character vocabulary -> token ids (numpy memmap) -> training batches.

Encoding is streamed in chunks and vectorised (code points via ``str.encode('utf-32-le')``,
vocabulary via ``np.bincount``, ids via a lookup table), so memory stays bounded whatever the
file size, and the result is cached on disk under the file's SHA-256.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence, Union

import numpy as np

from .config import DataConfig

if TYPE_CHECKING:  # torch is imported lazily: encoding a corpus needs only numpy
    import torch
from .errors import DepthlabError

CACHE_FORMAT = 1
CHUNK_BYTES = 4 << 20  # 4 MiB of input per chunk keeps peak memory bounded for any file size
MAX_CODEPOINT = 0x110000


def embedded_corpus_path() -> Path:
    """Path of the packaged Tiny Shakespeare corpus (1,115,394 bytes, 65 symbols)."""
    return Path(str(resources.files("depthlab") / "data" / "tinyshakespeare.txt"))


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
        """Text of a sequence of ids in [0, V)."""
        return "".join(self.vocab[int(i)] for i in ids)


    def stream_decoder(self) -> Callable[[int], str]:
        """A function id -> the text it adds (one character each; kept for parity with BPE)."""
        return lambda i: self.vocab[int(i)]

    @property
    def token_chars(self) -> np.ndarray:
        """Characters per token id, shape (V,), float64: all ones (bits/char = nats/token / ln 2)."""
        return np.ones(self.vocab_size)


#: The special token a BPE vocabulary starts with (id 0): GPT-2's end of text, the export's bos/eos.
EOT = "<|endoftext|>"


class BPETokenizer:
    """Byte-level BPE (Sennrich et al. 2016; GPT-2's byte-level variant) on Hugging Face ``tokenizers``.

    Args:
        tok: a ``tokenizers.Tokenizer`` (ByteLevel pre-tokenizer and decoder, BPE model).
        source: where it came from (for messages).

    Attributes:
        json: the tokenizer serialised (what ``tokenizer.json`` holds; its sha256 identifies it).
    """

    def __init__(self, tok, source: str = "tokenizer.json"):
        self.tok = tok
        self.source = source
        self.json = tok.to_str()
        self._vocab: Optional[list[str]] = None

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
        """Ids of ``text`` (byte-level: every string is encodable)."""
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (invalid UTF-8 from a cut multi-byte character shows as U+FFFD)."""
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def stream_decoder(self) -> Callable[[int], str]:
        """A function id -> the new text it completes (``tokenizers.decoders.DecodeStream``).

        A character split across tokens comes out whole with its last byte (earlier calls return "").
        """
        from tokenizers.decoders import DecodeStream

        ds = DecodeStream(skip_special_tokens=False)
        return lambda i: ds.step(self.tok, int(i)) or ""

    @property
    def token_chars(self) -> np.ndarray:
        """Characters per token id, shape (V,), float64: its UTF-8 lead bytes (bytes not 10xxxxxx).

        Summed over a token sequence this counts each character once, at the token holding its first
        byte, so total nats / sum = nats per character of the text. Special tokens count 0.
        """
        byte_of = _byte_level_decoder()
        special = set(self.tok.get_added_tokens_decoder())
        out = np.zeros(self.vocab_size)
        for piece, i in self.tok.get_vocab(with_added_tokens=False).items():
            if i not in special:
                out[i] = sum(1 for c in piece if (byte_of[c] & 0xC0) != 0x80)
        return out


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


@dataclass
class Corpus:
    """An encoded corpus with its contiguous train/val split.

    Attributes:
        path: source file.
        sha256: hex digest of the file's bytes.
        tokenizer: the character tokenizer built from the whole file.
        tokens: all token ids, shape (N,), dtype from :func:`token_dtype` (a read-only memmap).
        n_train: tokens[:n_train] is the train split, the rest validation.
        crlf_fixed: CRLF pairs normalised to ``\\n``.
        cr_fixed: lone CRs normalised to ``\\n``.
        bom_dropped: whether a leading byte-order mark was removed.
    """

    path: str
    sha256: str
    tokenizer: CharTokenizer
    tokens: np.ndarray
    n_train: int
    crlf_fixed: int = 0
    cr_fixed: int = 0
    bom_dropped: bool = False

    @property
    def train(self) -> np.ndarray:
        """Train token ids, shape (n_train,)."""
        return self.tokens[: self.n_train]

    @property
    def val(self) -> np.ndarray:
        """Validation token ids, shape (N - n_train,)."""
        return self.tokens[self.n_train:]

    def check_block_size(self, block_size: int, log=None) -> None:
        """Make sure both splits hold at least ``block_size + 1`` tokens.

        A validation split shorter than that (tiny corpora) is enlarged to ``block_size + 1``
        tokens taken from the end of the train split, when the corpus is long enough for both.

        Args:
            block_size: the model's context length T.
            log: optional ``callable(str)`` told when the split is adjusted.

        Raises:
            DepthlabError: giving the corpus length, block_size + 1 and the fix.
        """
        need = block_size + 1
        n = len(self.tokens)
        if n < 2 * need:
            raise DepthlabError(
                f"the corpus {self.path} has {n} characters but model.block_size {block_size} needs "
                f"at least {need} in each of the train and validation splits ({2 * need} in all); "
                "use a smaller model.block_size or a longer text")
        if n - self.n_train < need or self.n_train < need:
            self.n_train = n - need
            if log:
                log(f"the validation split was shorter than block_size + 1 = {need}; using the last "
                    f"{need} characters for validation")


def _cache_root(cfg: DataConfig) -> Path:
    if cfg.cache_dir:
        return Path(cfg.cache_dir)
    env = os.environ.get("DEPTHLAB_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "depthlab"


def _resolve_path(cfg: DataConfig) -> Path:
    if cfg.path is None:
        return embedded_corpus_path()
    p = Path(cfg.path).expanduser()
    if not p.exists():
        raise DepthlabError(f"data.path {cfg.path} not found; give an existing text file "
                            "(or leave data.path unset for the embedded Tiny Shakespeare)")
    if p.is_dir():
        raise DepthlabError(f"data.path {cfg.path} is a directory; give a text file inside it")
    if p.stat().st_size == 0:
        raise DepthlabError(f"data.path {cfg.path} is empty; give a file with some text")
    return p


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            h.update(chunk)
    return h.hexdigest()


def _decoded_chunks(path: Path, encoding: str, stats: dict) -> Iterator[np.ndarray]:
    """Yield code points (uint32 arrays) of the file, newline-normalised, BOM dropped.

    ``stats`` receives ``crlf``, ``cr`` and ``bom`` counts.

    Raises:
        DepthlabError: on bytes that are invalid in ``encoding`` (file, byte offset, byte, fix).
    """
    dec = codecs.getincrementaldecoder(encoding)(errors="strict")
    stats.update(crlf=0, cr=0, bom=False)
    offset = 0
    carry = ""
    first = True
    with open(path, "rb") as f:
        while True:
            raw = f.read(CHUNK_BYTES)
            final = not raw
            pending = len(dec.getstate()[0])
            try:
                text = dec.decode(raw, final=final)
            except UnicodeDecodeError as e:
                pos = offset - pending + e.start
                bad = e.object[e.start:e.start + 1]
                with open(path, "rb") as fh:
                    head = fh.read(4)
                if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
                    raise DepthlabError(f"{path} is UTF-16 (it starts with a UTF-16 byte-order mark), not "
                                        f"{encoding}; set --data.encoding utf-16") from None
                raise DepthlabError(
                    f"{path} is not valid {encoding}: byte 0x{bad.hex()} at byte offset {pos}; "
                    f"set data.encoding (e.g. --data.encoding cp1252 or latin-1) to the file's encoding"
                ) from None
            offset += len(raw)
            if first and text:
                if text[0] == "\ufeff":
                    text = text[1:]
                    stats["bom"] = True
                first = False
            text = carry + text
            carry = ""
            if not final and text.endswith("\r"):
                carry, text = "\r", text[:-1]  # its LF may start the next chunk
            if "\r" in text:
                n_crlf = text.count("\r\n")
                stats["crlf"] += n_crlf
                stats["cr"] += text.count("\r") - n_crlf
                text = text.replace("\r\n", "\n").replace("\r", "\n")
            if text:
                yield np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
            if final:
                return


def load_corpus(cfg: DataConfig, log=None) -> Corpus:
    """Encode (or load from cache) the corpus named by ``cfg`` and split it.

    Args:
        cfg: data settings; ``cfg.path`` None means the embedded Tiny Shakespeare.
        log: optional ``callable(str)`` for one-line notices (newline fixes, cache use).

    Returns:
        A :class:`Corpus` whose tokens are a read-only memmap in the cache folder.

    Raises:
        DepthlabError: missing/empty/directory path, undecodable bytes, or no characters.
    """
    path = _resolve_path(cfg)
    digest = _sha256(path)
    enc_name = codecs.lookup(cfg.encoding).name
    entry = _cache_root(cfg) / f"{digest[:32]}-{enc_name}-v{CACHE_FORMAT}"
    meta_file = entry / "meta.json"
    if not meta_file.exists():
        _encode_to_cache(path, cfg.encoding, entry)
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    n = int(meta["n_tokens"])
    if n == 0:
        raise DepthlabError(f"data.path {path} is empty after decoding; give a file with some text")
    tokens = np.memmap(entry / "tokens.bin", dtype=np.dtype(meta["dtype"]), mode="r", shape=(n,))
    n_val = max(1, int(n * cfg.val_fraction))
    corpus = Corpus(path=str(path), sha256=digest, tokenizer=CharTokenizer(meta["vocab"]), tokens=tokens,
                    n_train=n - n_val, crlf_fixed=meta["crlf"], cr_fixed=meta["cr"], bom_dropped=meta["bom"])
    if log and (corpus.crlf_fixed or corpus.cr_fixed):
        log(f"normalised line endings in {path}: {corpus.crlf_fixed} CRLF and {corpus.cr_fixed} lone CR -> \\n")
    if log and corpus.bom_dropped:
        log(f"dropped a leading byte-order mark from {path}")
    return corpus


def _encode_to_cache(path: Path, encoding: str, entry: Path) -> None:
    """Two streamed passes: count code points (vocabulary), then write ids to ``entry/tokens.bin``."""
    counts = np.zeros(MAX_CODEPOINT, dtype=np.int64)
    stats: dict = {}
    for cps in _decoded_chunks(path, encoding, stats):
        counts += np.bincount(cps, minlength=MAX_CODEPOINT)
    vocab_cps = np.flatnonzero(counts)
    n = int(counts.sum())
    dtype = token_dtype(max(1, len(vocab_cps)))
    lut = np.zeros(MAX_CODEPOINT, dtype=dtype)
    lut[vocab_cps] = np.arange(len(vocab_cps), dtype=dtype)
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=entry.parent, prefix=".tmp-"))
    try:
        with open(tmp / "tokens.bin", "wb") as out:
            for cps in _decoded_chunks(path, encoding, {}):
                out.write(lut[cps].tobytes())
        meta = {"format": CACHE_FORMAT, "source": str(path), "n_tokens": n, "dtype": dtype.name,
                "vocab": [chr(c) for c in vocab_cps], "crlf": stats["crlf"], "cr": stats["cr"],
                "bom": stats["bom"]}
        (tmp / "meta.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
        try:
            os.rename(tmp, entry)
        except OSError:  # another process filled the same cache entry first: theirs is identical
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def get_batch(data: np.ndarray, block_size: int, batch_size: int, rng: np.random.Generator,
              device: Optional["torch.device"] = None) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Random contiguous windows of ``block_size + 1`` tokens.

    Args:
        data: token ids, shape (N,), N >= block_size + 1.
        block_size: T.
        batch_size: B.
        rng: the seeded generator whose state the trainer checkpoints.
        device: where to put the result (pinned, non-blocking copy on CUDA).

    Returns:
        (x, y): int64 tensors of shape (B, T); y is x shifted left by one token.
    """
    import torch

    ix = rng.integers(0, len(data) - block_size, size=batch_size)
    w = torch.from_numpy(np.asarray(data[ix[:, None] + np.arange(block_size + 1)]).astype(np.int64))
    return to_device(w[:, :-1], w[:, 1:], device)


def to_device(x: "torch.Tensor", y: "torch.Tensor", device: Optional["torch.device"]
              ) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Move a batch (x, y), each (B, T), to ``device``: pinned + non-blocking on CUDA, as-is on CPU."""
    if device is not None and device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    if device is not None and device.type != "cpu":
        return x.to(device), y.to(device)
    return x, y
