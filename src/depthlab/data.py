"""Text corpus -> tokens (numpy memmap) -> training batches.

Characters first: encoding is streamed in chunks and vectorised (code points via
``str.encode('utf-32-le')``, vocabulary via ``np.bincount``, ids via a lookup table), so memory
stays bounded whatever the file size, and the result is cached on disk under the file's SHA-256
(with the counts of sorted adjacent lines, for the sorted-list warning). On top of it, cached in
the same entry: ``split: lines`` (the lines shuffled with the run seed) and ``tokenizer: bpe`` (a
byte-level BPE trained once per corpus and settings on the train split, then both splits encoded
in pieces that cannot change a token). The tokenizers themselves are :mod:`depthlab.tokenizer`
(re-exported here).
"""

from __future__ import annotations

import codecs
import hashlib
import json
import operator
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import numpy as np

from .config import DataConfig
from .errors import DepthlabError, no_space
from .units import counted
from .tokenizer import EOT, BPETokenizer, CharTokenizer, Tokenizer, token_dtype, train_bpe

if TYPE_CHECKING:  # torch is imported lazily: encoding a corpus needs only numpy
    import torch

__all__ = ["Corpus", "load_corpus", "sha256_file", "embedded_corpus_path", "sorted_lines_warning",
           "get_batch", "windows_at", "to_device",
           # the tokenizers (defined in depthlab.tokenizer), re-exported: importers of depthlab.data keep working
           "CharTokenizer", "BPETokenizer", "Tokenizer", "EOT", "token_dtype", "train_bpe"]

CACHE_FORMAT = 2  # 2: meta.json holds the line-order counts
CHUNK_BYTES = 4 << 20  # 4 MiB of input per chunk keeps peak memory bounded for any file size
MAX_CODEPOINT = 0x110000


def embedded_corpus_path() -> Path:
    """Path of the packaged Tiny Shakespeare corpus (1,115,394 bytes, 65 symbols)."""
    return Path(str(resources.files("depthlab") / "data" / "tinyshakespeare.txt"))


@dataclass
class Corpus:
    """An encoded corpus with its contiguous train/val split.

    Attributes:
        path: source file.
        sha256: hex digest of the file's bytes.
        tokenizer: the character tokenizer built from the whole file, or the BPE tokenizer trained on
            the train split.
        tokens: all token ids, shape (N,), dtype from :func:`token_dtype` (a read-only memmap); with
            ``split: lines`` the lines in shuffled order.
        n_train: tokens[:n_train] is the train split, the rest validation.
        crlf_fixed: CRLF pairs normalised to ``\\n``.
        cr_fixed: lone CRs normalised to ``\\n``.
        bom_dropped: whether a leading byte-order mark was removed.
        split: ``tail`` or ``lines`` (see :class:`~depthlab.config.DataConfig`).
        n_chars: characters of the text the tokens encode.
        n_train_chars: characters of its train split.
    """

    path: str
    sha256: str
    tokenizer: "Tokenizer"
    tokens: np.ndarray
    n_train: int
    crlf_fixed: int = 0
    cr_fixed: int = 0
    bom_dropped: bool = False
    split: str = "tail"
    n_chars: int = 0
    n_train_chars: int = 0

    @property
    def train(self) -> np.ndarray:
        """Train token ids, shape (n_train,)."""
        return self.tokens[: self.n_train]

    @property
    def val(self) -> np.ndarray:
        """Validation token ids, shape (N - n_train,)."""
        return self.tokens[self.n_train:]

    def one_symbol_words(self) -> Optional[str]:
        """Why a corpus of one distinct symbol (V = 1) has nothing to learn, naming it; None for any other corpus.
        Softmax over one class is 1 whatever the logits: every loss and every gradient is exactly 0."""
        vocab = self.tokenizer.vocab
        if len(vocab) != 1:
            return None
        unit = "character" if isinstance(self.tokenizer, CharTokenizer) else "token"
        return (f"{self.path} holds a single distinct {unit} ({vocab[0]!r}): every loss and every gradient is 0 "
                "whatever the weights, and there is nothing to learn")

    @property
    def val_chars_per_token(self) -> float:
        """Characters per token of the validation split (1.0 for chars): bits/char = nats/token / this / ln 2."""
        tc = self.tokenizer.token_chars
        counts = np.bincount(np.asarray(self.val), minlength=len(tc))
        return float(counts @ tc) / max(1, len(self.val))

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
            bpe = isinstance(self.tokenizer, BPETokenizer) and self.n_chars > n
            # a BPE count alone puzzled: "6 tokens" for a file of 5,000 characters (one repeated)
            of = f" (BPE tokens of its {counted(self.n_chars, 'character')})" if bpe else ""
            char = (f", or --data.tokenizer char (one token per character: {self.n_chars:,})"
                    if bpe and self.n_chars >= 2 * need else "")
            raise DepthlabError(
                f"the corpus {self.path} has {counted(n, 'token')}{of} but model.block_size {block_size} needs "
                f"at least {need} in each of the train and validation splits ({2 * need} in all); "
                f"use a smaller model.block_size or a longer text{char}")
        if n - self.n_train < need or self.n_train < need:
            self.n_train = n - need
            if log:
                log(f"warning: the validation split was shorter than model.block_size + 1 = {need} tokens; the "
                    f"last {need} tokens are the validation split instead (a larger data.val_fraction or a "
                    "longer text gives more)")


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
    if p.is_symlink() and not p.exists():  # `ls` shows it: "not found" read as false
        raise DepthlabError(f"data.path {cfg.path} is a symbolic link to {os.readlink(p)}, which does not exist; "
                            "point it at the text file, or give the file itself")
    if not p.exists():
        raise DepthlabError(f"data.path {cfg.path} not found; give an existing text file "
                            "(or leave data.path unset for the embedded Tiny Shakespeare)")
    if p.is_dir():
        raise DepthlabError(f"data.path {cfg.path} is a directory; give a text file inside it")
    if not p.is_file():  # a device or pipe reports size 0: "is empty" was false for /dev/zero or a fifo
        raise DepthlabError(f"data.path {cfg.path} is not a regular file (a device, pipe or socket); give a text "
                            "file (a pipe's text can be saved to one first)")
    if p.stat().st_size == 0:
        raise DepthlabError(f"data.path {cfg.path} is empty; give a file with some text")
    return p


def corpus_path(cfg: DataConfig) -> Path:
    """The corpus file ``cfg`` names (the embedded one when ``data.path`` is unset), checked as :func:`load_corpus`
    checks it first, with the same message; nothing is read or written.

    Raises:
        DepthlabError: ``data.path`` missing, a directory, or empty.
    """
    return _resolve_path(cfg)


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks (the one home of a file's digest: corpus, checkpoints,
    a model's source)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            h.update(chunk)
    return h.hexdigest()


def _decoded_chunks(path: Path, encoding: str, stats: dict) -> Iterator[np.ndarray]:
    """Code points (uint32 arrays) of :func:`_decoded_texts`."""
    for text in _decoded_texts(path, encoding, stats):
        yield np.frombuffer(text.encode("utf-32-le"), dtype="<u4")


def _decoded_texts(path: Path, encoding: str, stats: dict) -> Iterator[str]:
    """Yield the file's text in chunks of about CHUNK_BYTES, newline-normalised, BOM dropped.

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
                if b"\x00" in raw:  # an executable, an image, UTF-16 without a BOM: latin-1 would "decode" them
                    raise _nul_refusal(path, encoding) from None
                fix = ("it reads as UTF-8, the default: set --data.encoding utf-8 (or leave it out)"
                       if codecs.lookup(encoding).name != "utf-8" and _reads_as(path, "utf-8") else
                       "set data.encoding (e.g. --data.encoding cp1252 or latin-1) to the file's encoding")
                raise DepthlabError(f"{path} is not valid {encoding}: byte 0x{bad.hex()} at byte offset {pos}; "
                                    f"{fix}") from None
            except UnicodeError as e:  # "UTF-16 stream does not start with BOM": an "unexpected" error, exit 1
                raise _no_bom_refusal(path, encoding, e) from None
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
                yield text
            if final:
                return


def _utf16_order(head: bytes) -> Optional[str]:
    """``utf-16-le`` / ``utf-16-be`` when one byte in two of ``head`` is 0 (ASCII-range text in UTF-16 without a
    byte-order mark), else None. Under 16 bytes the pattern says nothing (``00 01 02`` is no text in any encoding)."""
    if len(head) < 16:
        return None
    even, odd = head[0::2], head[1::2]
    if odd and odd.count(0) > 0.3 * len(odd) and even.count(0) < 0.02 * len(even):
        return "utf-16-le"
    if even and even.count(0) > 0.3 * len(even) and odd.count(0) < 0.02 * len(odd):
        return "utf-16-be"
    return None


def _no_bom_refusal(path: Path, encoding: str, e: UnicodeError) -> DepthlabError:
    """The refusal of a file that ``encoding`` (utf-16, utf-32: byte order from a byte-order mark) cannot start
    reading: the order the bytes suggest, or that the file is not UTF-16 at all."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    order = _utf16_order(head)
    name = codecs.lookup(encoding).name
    if order:
        fix = f"its bytes read as {order.upper()}: set --data.encoding {order}"
    elif name == "utf-16":
        fix = ("it does not look like UTF-16 either (no byte in two is 0); set --data.encoding to the file's "
               "encoding (utf-8, the default, for most text)")
    elif name == "utf-32":
        fix = "set --data.encoding to the file's encoding (utf-8, the default, for most text; utf-32-le or -be)"
    else:
        fix = "set --data.encoding to the file's encoding (utf-8, the default, for most text)"
    why = ("it does not start with the byte-order mark that says its byte order" if "BOM" in str(e)
           else str(e).splitlines()[0])
    return DepthlabError(f"{path} cannot be read as {encoding}: {why}; {fix}")


def _misread_words(path: Path, encoding: str, vocab: list[str]) -> Optional[str]:
    """The warning of a text read as latin-1 (``encoding``, codecs' name) that holds C1 control characters
    (U+0080-U+009F, which text rarely holds): the bytes of a UTF-8 file's accents and emoji, or of cp1252's curly
    quotes, read one by one; None otherwise."""
    c1 = [c for c in vocab if "\x80" <= c <= "\x9f"]
    if encoding != "iso8859-1" or not c1:
        return None
    utf8 = _reads_as(path, "utf-8")
    return (f"warning: data.encoding latin-1 read {counted(len(c1), 'distinct C1 control character')} (U+0080-U+009F) "
            f"from "
            f"{path}, which text rarely holds: " + ("the file is valid UTF-8, whose characters latin-1 splits into "
                                                    "bytes (use --data.encoding utf-8)" if utf8 else
                                                    "a cp1252 file's quotes and dashes read so (--data.encoding "
                                                    "cp1252)"))


def _reads_as(path: Path, encoding: str) -> bool:
    """Whether the whole of ``path`` decodes in ``encoding`` (read in chunks): an error's fix names it then (latin-1,
    the usual advice, reads any bytes, so it would garble a UTF-8 file without a word)."""
    dec = codecs.getincrementaldecoder(encoding)(errors="strict")
    try:
        with open(path, "rb") as f:
            while raw := f.read(CHUNK_BYTES):
                dec.decode(raw)
        dec.decode(b"", final=True)
    except (UnicodeError, OSError):
        return False
    return True


def _nul_refusal(path: Path, encoding: str) -> DepthlabError:
    """The refusal of a file that holds NUL (U+0000): no text has one, and a binary file (or UTF-16 without a
    byte-order mark, read as an 8-bit encoding) trained on silently as characters, NULs and all.

    Names UTF-16 when every other byte of the file's start is 0 (or it starts with a UTF-16 byte-order mark),
    else the byte offset of the first NUL."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    if "\x00".encode(encoding) != b"\x00":  # a UTF-16/32 read: its NUL bytes are no clue, the character is
        return DepthlabError(f"{path} read as {encoding} holds NUL characters (U+0000), which no text has: it is a "
                             "binary file or in another encoding; give a text file, or set --data.encoding to its "
                             "encoding")
    guess = "utf-16" if head[:2] in (b"\xff\xfe", b"\xfe\xff") else _utf16_order(head)
    if guess:
        return DepthlabError(f"{path} is not {encoding} text: it looks like UTF-16 (one byte in two is 0); set "
                             f"--data.encoding {guess}")
    offset, pos = -1, 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            if (k := chunk.find(b"\x00")) >= 0:
                offset = pos + k
                break
            pos += len(chunk)
    return DepthlabError(f"{path} holds NUL bytes (the first at byte offset {offset}), which no text has: it looks "
                         "like a binary file, not text; give a text file")


def load_corpus(cfg: DataConfig, log=None, seed: int = 1337, tokenizer_json: Optional[str] = None) -> Corpus:
    """Encode (or load from cache) the corpus named by ``cfg`` and split it.

    Args:
        cfg: data settings; ``cfg.path`` None means the embedded Tiny Shakespeare.
        log: optional ``callable(str)`` for one-line notices (newline fixes, sorted lines, BPE size).
        seed: the run's ``train.seed``: ``split: lines`` shuffles the lines with it.
        tokenizer_json: for ``tokenizer: bpe``, the JSON of a trained tokenizer to use (a resumed run's
            own ``tokenizer.json``) instead of the cached one for these settings.

    Returns:
        A :class:`Corpus` whose tokens are a read-only memmap in the cache folder.

    Raises:
        DepthlabError: missing/empty/directory path, undecodable bytes, no characters, or a
            ``split: lines`` file without lines.
    """
    path = _resolve_path(cfg)
    try:
        digest = sha256_file(path)
    except PermissionError as e:  # was the generic OSError line, naming neither data.path nor a fix
        raise DepthlabError(f"data.path {path} cannot be read ({e.strerror or e}): give the user running depthlab "
                            "read permission (chmod u+r), or copy the file somewhere it can be read") from None
    enc_name = codecs.lookup(cfg.encoding).name
    entry = _cache_root(cfg) / f"{digest[:32]}-{enc_name}-v{CACHE_FORMAT}"
    meta, chars = _cached(entry, lambda: _encode_to_cache(path, cfg.encoding, entry))
    n = len(chars)
    if n == 0:
        raise DepthlabError(f"data.path {path} is empty after decoding; give a file with some text")
    vocab = meta["vocab"]
    if "\x00" in vocab:  # checked on the cached vocabulary too: a file cached before this check is refused alike
        raise _nul_refusal(path, cfg.encoding)
    if log and (said := _misread_words(path, enc_name, vocab)):
        log(said)
    if cfg.split == "lines":
        split_key = f"lines-s{seed}-f{cfg.val_fraction!r}"
        chars, n_train_chars = _lines_split(entry / split_key, chars, vocab, cfg.val_fraction, seed, path)
    else:
        split_key = f"tail-f{cfg.val_fraction!r}"
        n_train_chars = n - max(1, int(n * cfg.val_fraction))
        warning = sorted_lines_warning(meta["lines"], cfg.val_fraction)
        if log and warning:
            log(f"warning: {path}: {warning}")
    common = dict(path=str(path), sha256=digest, crlf_fixed=meta["crlf"], cr_fixed=meta["cr"],
                  bom_dropped=meta["bom"], split=cfg.split, n_chars=len(chars), n_train_chars=n_train_chars)
    if cfg.tokenizer == "char":
        corpus = Corpus(tokenizer=CharTokenizer(vocab), tokens=chars, n_train=n_train_chars, **common)
    else:
        tok, tokens, n_train = _bpe_corpus(entry, split_key, chars, vocab, n_train_chars, cfg.bpe_vocab_size,
                                           tokenizer_json, log)
        corpus = Corpus(tokenizer=tok, tokens=tokens, n_train=n_train, **common)
    if log and (corpus.crlf_fixed or corpus.cr_fixed):
        log(f"normalised line endings in {path}: {corpus.crlf_fixed} CRLF and {corpus.cr_fixed} lone CR -> \\n")
    if log and corpus.bom_dropped:
        log(f"dropped a leading byte-order mark from {path}")
    return corpus


def _cached(entry: Path, build: Callable[[], None], dtype: Optional[np.dtype] = None) -> tuple[dict, np.ndarray]:
    """``(meta.json, tokens.bin)`` of the cache folder ``entry``, ``build()`` first when it has no meta.json.

    The tokens are a read-only memmap of ``meta["n_tokens"]`` ids of ``dtype`` (else ``meta["dtype"]``). An entry
    whose files do not read as written (a truncated tokens.bin, an edited or emptied meta.json: the cache is
    derived data) is deleted and built again, once; the second failure is one line naming the folder.

    Raises:
        DepthlabError: the entry still does not read after it was built again.
    """
    for attempt in (0, 1):
        try:
            built = (entry / "meta.json").exists()
        except PermissionError as e:  # another user's cache (HOME's, run as someone else): was a bare PermissionError
            raise DepthlabError(f"the data cache folder {entry} cannot be read ({e.strerror or e}); point "
                                "--data.cache_dir (or DEPTHLAB_CACHE) at a folder you can write") from None
        if not built:
            build()
        try:
            meta = json.loads((entry / "meta.json").read_text(encoding="utf-8"))
            n, dt = int(meta["n_tokens"]), np.dtype(dtype if dtype is not None else meta["dtype"])
            if (entry / "tokens.bin").stat().st_size != n * dt.itemsize:
                raise ValueError(f"tokens.bin is not {n} ids of {dt.itemsize} bytes")
            return meta, np.memmap(entry / "tokens.bin", dtype=dt, mode="r", shape=(n,)) if n else np.zeros(0, dt)
        except (OSError, ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
            if attempt:
                raise DepthlabError(f"the data cache folder {entry} does not read even after it was built again "
                                    f"({type(e).__name__}: {e}); delete it, or point --data.cache_dir (or "
                                    "DEPTHLAB_CACHE) at another folder") from None
            shutil.rmtree(entry, ignore_errors=True)
    raise AssertionError("unreachable")


def _publish(entry: Path, write: Callable[[Path], None]) -> None:
    """Fill cache folder ``entry`` atomically: ``write(tmp)`` into a temporary folder, then rename.

    When another process published the same entry first, its copy wins and ours is dropped, so
    every process (ranks, sweep workers) reads one and the same entry.
    """
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=entry.parent, prefix=".tmp-"))
    except (FileExistsError, NotADirectoryError):  # a file where the cache folder (or one above it) goes
        raise DepthlabError(f"the data cache folder {entry.parent} cannot be made: a file stands in its path; "
                            "point --data.cache_dir (or DEPTHLAB_CACHE) at a folder") from None
    except OSError as e:  # no permission, a read-only place (HOME unwritable): was "PermissionError: ... '/sys/x'"
        if no_space(e):
            raise
        raise DepthlabError(f"the data cache folder {entry.parent} cannot be written ({e.strerror or e}); point "
                            "--data.cache_dir (or DEPTHLAB_CACHE) at a folder you can write") from None
    try:
        write(tmp)
        try:
            os.rename(tmp, entry)
        except OSError:  # another process filled the same cache entry first: use theirs
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class _LineOrder:
    """Streamed count of adjacent non-empty lines in non-decreasing / non-increasing order (casefolded)."""

    MAX_LINE = 1 << 16  # a longer line is cut for comparing: such a file is not a list of items anyway

    def __init__(self):
        self.carry, self.prev = "", None
        self.n = self.pairs = self.up = self.down = 0

    def feed(self, text: str, final: bool = False) -> None:
        """Count the complete lines of ``text`` (the rest waits for the next chunk unless ``final``)."""
        whole = self.carry + text
        cut = len(whole) if final else whole.rfind("\n")  # the lines before it are complete
        self.carry = "" if final else whole[cut + 1:][: self.MAX_LINE]
        # one casefold and one C-level filter per chunk, not a Python call per line: that was half the load
        # time of a large file
        lines = list(filter(str.strip, whole[:max(cut, 0)].casefold().split("\n")))
        if not lines:
            return
        seq = lines if self.prev is None else [self.prev] + lines
        self.up += sum(map(operator.le, seq, seq[1:]))
        self.down += sum(map(operator.ge, seq, seq[1:]))
        self.pairs += len(seq) - 1
        self.n += len(lines)
        self.prev = lines[-1]

    def stats(self) -> dict[str, int]:
        """``{"n": non-empty lines, "pairs", "up": non-decreasing pairs, "down": non-increasing pairs}``."""
        return {"n": self.n, "pairs": self.pairs, "up": self.up, "down": self.down}


#: A file with at least this many non-empty lines, this fraction of adjacent ones in order, counts as sorted.
SORTED_MIN_LINES, SORTED_FRACTION = 1000, 0.9
#: ... and at least this fraction of its adjacent non-empty lines differ (a file of one line repeated is in no order).
SORTED_MIN_CHANGES = 0.01


def sorted_lines_warning(lines: dict, val_fraction: float) -> Optional[str]:
    """The warning for a line-structured file whose lines are mostly sorted (None if they are not).

    Args:
        lines: the :meth:`_LineOrder.stats` of the file.
        val_fraction: the validation fraction (for the message).
    """
    if lines["n"] < SORTED_MIN_LINES or not lines["pairs"]:
        return None
    # a pair of equal lines counts both ways (up + down = pairs + equal): a file of one line repeated (or nearly)
    # read as "100% in ascending order", validation "the last 0.1 of the sorted list (a different distribution)"
    changes = 2 * lines["pairs"] - lines["up"] - lines["down"]
    if changes < SORTED_MIN_CHANGES * lines["pairs"]:
        return None
    frac = max(lines["up"], lines["down"]) / lines["pairs"]
    if frac < SORTED_FRACTION:
        return None
    order = "ascending" if lines["up"] >= lines["down"] else "descending"
    return (f"{frac:.0%} of its {lines['n']:,} lines are in {order} order, so the tail split makes validation "
            f"the last {val_fraction:g} of the sorted list (a different distribution from train) and the model "
            "can learn the ordering itself; use --data.split lines to hold out shuffled lines")


def _encode_to_cache(path: Path, encoding: str, entry: Path) -> None:
    """Two streamed passes: count code points (vocabulary) and line order, then write ids to ``entry/tokens.bin``."""
    counts = np.zeros(MAX_CODEPOINT, dtype=np.int64)
    stats: dict = {}
    order = _LineOrder()
    for text in _decoded_texts(path, encoding, stats):
        order.feed(text)
        counts += np.bincount(np.frombuffer(text.encode("utf-32-le"), dtype="<u4"), minlength=MAX_CODEPOINT)
    order.feed("", final=True)
    vocab_cps = np.flatnonzero(counts)
    n = int(counts.sum())
    dtype = token_dtype(max(1, len(vocab_cps)))
    lut = np.zeros(MAX_CODEPOINT, dtype=dtype)
    lut[vocab_cps] = np.arange(len(vocab_cps), dtype=dtype)

    def write(tmp: Path) -> None:
        with open(tmp / "tokens.bin", "wb") as out:
            for cps in _decoded_chunks(path, encoding, {}):
                out.write(lut[cps].tobytes())
        meta = {"format": CACHE_FORMAT, "source": str(path), "n_tokens": n, "dtype": dtype.name,
                "vocab": [chr(c) for c in vocab_cps], "crlf": stats["crlf"], "cr": stats["cr"],
                "bom": stats["bom"], "lines": order.stats()}
        (tmp / "meta.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")

    _publish(entry, write)


def _lines_split(entry: Path, chars: np.ndarray, vocab: list[str], val_fraction: float, seed: int,
                 path: Path) -> tuple[np.ndarray, int]:
    """The characters with the file's lines shuffled (seeded), train lines first; cached in ``entry``.

    Every line keeps its newline (one is added to a last line without it), so both splits are whole
    lines. ``max(1, int(lines * val_fraction))`` lines are validation.

    Returns:
        (character ids, shape (N,) or (N + 1,); characters in the train lines).

    Raises:
        DepthlabError: the file has fewer than two lines.
    """
    def build() -> None:
        if "\n" not in vocab:
            raise DepthlabError(f"data.split lines needs a file of several lines, but {path} has no newline; "
                                "use --data.split tail")
        nl = vocab.index("\n")
        data = np.asarray(chars)
        ends = np.flatnonzero(data == nl) + 1  # exclusive end of each line, its newline included
        if ends[-1] != len(data):
            ends = np.append(ends, len(data))  # a last line without a newline
        starts = np.concatenate([[0], ends[:-1]])
        if len(starts) < 2:
            raise DepthlabError(f"data.split lines needs at least two lines; {path} has one; use --data.split tail")
        perm = np.random.default_rng([seed, 2]).permutation(len(starts))
        n_val = max(1, int(len(starts) * val_fraction))
        _publish(entry, lambda tmp: _write_lines(tmp, data, starts, ends, perm, len(starts) - n_val, nl))

    meta, tokens = _cached(entry, build, chars.dtype)
    return tokens, int(meta["n_train"])


def _write_lines(tmp: Path, data: np.ndarray, starts: np.ndarray, ends: np.ndarray, perm: np.ndarray,
                 n_train_lines: int, nl: int) -> None:
    """Write the lines of ``data`` in the order ``perm`` to ``tmp/tokens.bin`` (+ meta.json)."""
    n_tokens = n_train = 0
    newline = np.array([nl], dtype=data.dtype)
    with open(tmp / "tokens.bin", "wb") as out:
        for b in range(0, len(perm), 1 << 16):
            idx = perm[b: b + (1 << 16)]
            parts = []
            for k, i in enumerate(idx):
                parts.append(data[starts[i]:ends[i]])
                if data[ends[i] - 1] != nl:
                    parts.append(newline)
                if b + k + 1 == n_train_lines:
                    n_train = n_tokens + sum(len(x) for x in parts)
            chunk = np.concatenate(parts)
            out.write(chunk.tobytes())
            n_tokens += len(chunk)
    meta = {"n_tokens": n_tokens, "n_train": n_train, "n_lines": len(perm), "n_train_lines": n_train_lines}
    (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")


# ------------------------------------------------------------------------- byte-level BPE
BPE_FORMAT = 1  # the trained tokenizer's cache folder
#: The encoded ids' cache folder. 2: a literal ``<|endoftext|>`` in the corpus is encoded as text (format 1
#: made it id 0, the special token, which counts no characters: bits/char read too high).
IDS_FORMAT = 2
PIECE_CHARS = 1 << 18  # text handed to the tokenizer per item: bounded memory, and parallel batches of it
PIECES_PER_BATCH = 8


def _safe_cut(text: str) -> int:
    """An index where the text can be cut without changing its byte-level BPE encoding.

    GPT-2's pre-tokenizer regex never joins a non-space character to the whitespace after it and
    has no look-behind, so a cut between the two leaves every pre-token (and so every token) as
    it was. Searched in the last 64 K characters; without such a place, the end (a text with no
    whitespace at all may then encode differently across the cut).
    """
    for i in range(len(text) - 1, max(0, len(text) - 65536), -1):
        if text[i].isspace() and not text[i - 1].isspace():
            return i
    return len(text)


def _text_pieces(chars: np.ndarray, codepoints: np.ndarray, start: int, stop: int) -> Iterator[str]:
    """The text of ``chars[start:stop]`` (character ids) in pieces of about PIECE_CHARS cut by :func:`_safe_cut`."""
    carry = ""
    pos = start
    while pos < stop:
        end = min(stop, pos + PIECE_CHARS)
        text = carry + codepoints[np.asarray(chars[pos:end])].tobytes().decode("utf-32-le")
        pos = end
        cut = _safe_cut(text) if pos < stop else len(text)
        text, carry = text[:cut], text[cut:]
        if text:
            yield text
    if carry:
        yield carry


#: At most this many characters of the train split teach the BPE merges (evenly spaced pieces of it): pair
#: statistics settle long before, and it bounds the training time of a large corpus (~40 % of the BPE time).
BPE_TRAIN_CHARS = 1 << 24


def _train_sample(chars: np.ndarray, codepoints: np.ndarray, n_train_chars: int) -> Iterator[str]:
    """The train split's text for BPE training: all of it, or :data:`BPE_TRAIN_CHARS` of it in evenly spaced pieces."""
    if n_train_chars <= BPE_TRAIN_CHARS:
        yield from _text_pieces(chars, codepoints, 0, n_train_chars)
        return
    n_pieces = BPE_TRAIN_CHARS // PIECE_CHARS
    stride = n_train_chars // n_pieces
    for k in range(n_pieces):
        s = k * stride
        yield codepoints[np.asarray(chars[s: s + PIECE_CHARS])].tobytes().decode("utf-32-le")


def _bpe_corpus(entry: Path, split_key: str, chars: np.ndarray, vocab: list[str], n_train_chars: int,
                vocab_size: int, tokenizer_json: Optional[str], log) -> tuple[BPETokenizer, np.ndarray, int]:
    """Train (once per corpus and settings: cached) or take a BPE tokenizer, and encode both splits with it.

    Returns:
        (tokenizer, token ids (N,) as a read-only memmap, train tokens).
    """
    codepoints = np.array([ord(c) for c in vocab], dtype="<u4")
    if tokenizer_json is None:
        tdir = entry / f"bpe{vocab_size}-{split_key}-v{BPE_FORMAT}"
        if not (tdir / "tokenizer.json").exists():
            tok = train_bpe(_train_sample(chars, codepoints, n_train_chars), vocab_size)
            _publish(tdir, lambda tmp: (tmp / "tokenizer.json").write_text(tok.json, encoding="utf-8"))
        tokenizer_json = (tdir / "tokenizer.json").read_text(encoding="utf-8")
        tok = BPETokenizer.from_str(tokenizer_json, str(tdir / "tokenizer.json"))
        if log and tok.vocab_size < vocab_size:
            log(f"BPE: data.vocab_size {vocab_size} asked, {tok.vocab_size} learned (the train text has no "
                "more pairs to merge)")
    else:
        tok = BPETokenizer.from_str(tokenizer_json)
    edir = entry / f"ids-{tok.sha256[:16]}-{split_key}-v{IDS_FORMAT}"
    meta, tokens = _cached(edir, lambda: _publish(edir, lambda tmp: _encode_bpe(tmp, tok, chars, codepoints,
                                                                            n_train_chars)))
    return tok, tokens, int(meta["n_train"])


def _encode_bpe(tmp: Path, tok: BPETokenizer, chars: np.ndarray, codepoints: np.ndarray, n_train_chars: int) -> None:
    """Stream the train then the validation text through ``tok`` into ``tmp/tokens.bin`` (+ meta.json).

    Each split is encoded on its own (no token straddles them); pieces go to ``encode_batch_fast``
    in batches, which the Rust side encodes in parallel. Text is text: ``tok.tok`` encodes a literal
    ``<|endoftext|>`` as its characters (see :class:`~depthlab.tokenizer.BPETokenizer`).
    """
    dtype = token_dtype(tok.vocab_size)
    encode = getattr(tok.tok, "encode_batch_fast", tok.tok.encode_batch)
    counts = []
    with open(tmp / "tokens.bin", "wb") as out:
        for start, stop in ((0, n_train_chars), (n_train_chars, len(chars))):
            n = 0
            batch: list[str] = []
            for piece in _text_pieces(chars, codepoints, start, stop):
                batch.append(piece)
                if len(batch) == PIECES_PER_BATCH:
                    n += _write_ids(out, encode(batch, add_special_tokens=False), dtype)
                    batch = []
            n += _write_ids(out, encode(batch, add_special_tokens=False), dtype) if batch else 0
            counts.append(n)
    meta = {"format": IDS_FORMAT, "n_tokens": sum(counts), "n_train": counts[0], "dtype": dtype.name,
            "tokenizer_sha256": tok.sha256}
    (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")


def _write_ids(out, encodings, dtype: np.dtype) -> int:
    n = 0
    for e in encodings:
        ids = np.asarray(e.ids, dtype=dtype)
        out.write(ids.tobytes())
        n += len(ids)
    return n


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
        (x, y): contiguous int64 tensors of shape (B, T); y is x shifted left by one token.
    """
    return windows_at(data, rng.integers(0, len(data) - block_size, size=batch_size), block_size, device)


def windows_at(data: np.ndarray, ix: np.ndarray, block_size: int, device: Optional["torch.device"] = None
               ) -> tuple["torch.Tensor", "torch.Tensor"]:
    """The windows of ``block_size + 1`` tokens starting at ``ix`` (B,), each in ``[0, N - block_size)``, as (x, y)
    of shape (B, T): y is x shifted left by one token (:func:`get_batch`'s layout)."""
    import torch

    w = torch.from_numpy(np.asarray(data[ix[:, None] + np.arange(block_size + 1)]).astype(np.int64))
    # contiguous copies, not views of w: a model's own idx.view(-1) (or targets.view) fails on a view whose rows
    # skip w's last column, though it works on every tensor the model's check and a user's own loop give it
    return to_device(w[:, :-1].contiguous(), w[:, 1:].contiguous(), device)


def to_device(x: "torch.Tensor", y: "torch.Tensor", device: Optional["torch.device"]
              ) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Move a batch (x, y), each (B, T), to ``device``: pinned + non-blocking on CUDA, as-is on CPU."""
    if device is not None and device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    if device is not None and device.type != "cpu":
        return x.to(device), y.to(device)
    return x, y
