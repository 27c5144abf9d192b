"""Typed, validated configuration dataclasses (litgpt-style).

Every field is documented with its unit; ``__post_init__`` validates each value and raises
:class:`ConfigError` (a :class:`~depthlab.errors.DepthlabError`) naming the field (``model.n_embd``) and the
allowed range, so the CLI, YAML files and notebooks all share one set of checks; the CLI adds where the value
came from (the flag typed, the config file).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Optional, Union

from .errors import DepthlabError

VARIANTS = ("prenorm", "postnorm", "plain", "rezero", "deepnorm", "periln")
#: ModelConfig fields that describe depthlab's GPT only (refused at other values with ``model.source``).
GPT_ONLY = ("n_layer", "n_head", "n_embd", "dropout", "bias", "ff_mult", "activation", "variant", "norm",
            "tie_weights", "residual_scale", "norm_scale", "position", "embed_scale")
NORMS = ("layernorm", "rmsnorm", "dyt", "none")
RESIDUAL_SCALES = (1, "depth")
EMBED_SCALES = ("auto", "none", "learned")


def model_record(model: dict) -> dict:
    """A model section (``RunConfig.to_dict()``'s, a config.json's) as it describes the model that ran: for a
    ``model.source`` run, without the GPT_ONLY fields (they stay at depthlab's GPT's defaults, n_layer 4, ...,
    and none of them is the user's model) and without an ``init`` that is no mapping (``gpt2``: no keyword
    arguments). Read back, :meth:`RunConfig.from_dict` gives the omitted fields those same defaults."""
    if not model.get("source"):
        return model
    return {k: v for k, v in model.items() if k not in GPT_ONLY and not (k == "init" and not isinstance(v, dict))}


def gpt_only_error(given: list[tuple[str, Any]], source: str) -> "ConfigError":
    """The refusal of :data:`GPT_ONLY` fields ``given`` as ``(name, value)`` beside ``model.source`` ``source``: they
    describe depthlab's GPT, and the user's model is built from its own keyword arguments (``model.init``)."""
    changed = [f"model.{name} {value!r}" for name, value in given]
    these, do, it = ("these describe", "do", "them") if len(changed) > 1 else ("this describes", "does", "it")
    return ConfigError(f"{', '.join(changed)}: {these} depthlab's GPT and {do} not apply to model.source {source}; "
                       f"your model's code decides {it}: set its own keyword arguments (its sizes, say) with "
                       "--model.init JSON", *[f"model.{name}" for name, _ in given], "model.source")


def corpus_file(path: Any) -> Optional[Path]:
    """The corpus file a ``data.path`` names, absolute (``~`` expanded, links and ``..`` resolved): the one way a
    path written by a user, a config.json or a resume is compared or recorded. None for the embedded corpus
    (None or "") and for a value that is no path (a hand-edited config.json)."""
    return Path(path).expanduser().resolve() if isinstance(path, str) and path else None


class ConfigError(DepthlabError):
    """A config value its field does not take (or two fields' values that do not go together).

    Args:
        message: the sentence, naming the fields as ``section.field`` (``model.n_embd``), the value and the fix.
        fields: the dotted fields whose values the message is about, the one at fault first: a command line
            turns them into where each value came from (the flag typed, the config file), which the config
            itself does not know (:func:`depthlab.cli_expand.attribute_config_error`).
    """

    #: Set by the command line that built the config from its own values (:func:`depthlab.cli_parser.config_from`):
    #: only then are its fields' values the flags' and files' it names.
    command_line = False

    def __init__(self, message: str, *fields: str):
        super().__init__(message)
        self.fields = fields

    def reworded(self, message: str) -> "ConfigError":
        """The same error (fields, origin) said in ``message``."""
        out = ConfigError(message, *self.fields)
        out.command_line = self.command_line
        return out


def _positive(section: str, obj: Any, *names: str) -> None:
    for n in names:
        v = getattr(obj, n)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ConfigError(f"{section}.{n} must be a positive integer, got {v!r}", f"{section}.{n}")


def _choice(section: str, name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(f"{section}.{name} must be one of {', '.join(map(str, allowed))}; got {value!r}",
                          f"{section}.{name}")


def _switches(section: str, obj: Any, *names: str) -> None:
    """Each of ``names`` is true or false (a None, 0 or "no" would read as false, or true, unsaid)."""
    for n in names:
        v = getattr(obj, n)
        if not isinstance(v, bool):
            raise ConfigError(f"{section}.{n} must be true or false, got {v!r}", f"{section}.{n}")


def _fraction(section: str, name: str, value: Any, low_open: bool) -> None:
    """``value`` is a number in [0, 1) (``low_open``: (0, 0.5], a validation fraction)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan  # None, "x": refused below, naming the field (was: "bad value in model: float() argument ...")
    ok = 0.0 < v <= 0.5 if low_open else 0.0 <= v < 1.0
    if not ok:
        raise ConfigError(f"{section}.{name} must be in {'(0, 0.5]' if low_open else '[0, 1)'}, got {value!r}",
                          f"{section}.{name}")


#: Where the encoded-token (and BPE tokenizer) cache lives when ``data.cache_dir`` is not given, in words
#: (:func:`depthlab.data._cache_root` decides it).
DEFAULT_CACHE = "$DEPTHLAB_CACHE, else $XDG_CACHE_HOME/depthlab or ~/.cache/depthlab"


@dataclass
class DataConfig:
    """Where the text comes from and how it is split.

    Attributes:
        path: UTF-8 (or ``encoding``) text file; ``None`` = the embedded Tiny Shakespeare corpus.
        encoding: text encoding of ``path`` (e.g. ``utf-8``, ``cp1252``, ``latin-1``).
        val_fraction: fraction of the text held out for validation, in (0, 0.5]: of the characters
            (the last ones) with ``split: tail``, of the lines with ``split: lines``.
        cache_dir: folder for the encoded-token cache; ``None`` = ``$DEPTHLAB_CACHE``, else
            ``$XDG_CACHE_HOME/depthlab``, else ``~/.cache/depthlab``.
        tokenizer: ``char`` (one token per character, the corpus's characters as vocabulary) or ``bpe``
            (byte-level BPE trained with Hugging Face ``tokenizers`` on the train split, at most 16 M
            characters of it; cached per corpus and settings, saved as the run's ``tokenizer.json``).
        vocab_size: BPE vocabulary size in tokens, 257 (the 256 bytes + ``<|endoftext|>``) to 1,048,576;
            ``None`` = 512. Only for ``tokenizer: bpe``.
        split: ``tail`` (the last ``val_fraction`` of the text is validation) or ``lines`` (the lines are
            shuffled with ``train.seed`` and ``val_fraction`` of them held out; both splits are lines in
            shuffled order, for files of one item per line such as a list of names).
    """

    path: Optional[str] = None
    encoding: str = "utf-8"
    val_fraction: float = 0.1
    cache_dir: Optional[str] = None
    tokenizer: Literal["char", "bpe"] = "char"
    vocab_size: Optional[int] = None
    split: Literal["tail", "lines"] = "tail"

    def __post_init__(self) -> None:
        if isinstance(self.path, os.PathLike):  # a pathlib.Path from Python, as train.out_dir takes one
            self.path = os.fspath(self.path)  # (still validating: the one assignment, before anyone reads it)
        if self.path is not None and not isinstance(self.path, str):  # a config.json edited to "path": 5
            raise ConfigError(f"data.path must be a path (a string), got {self.path!r}", "data.path")
        if self.cache_dir == "":  # silently the default cache from a file; the command line refuses it
            raise ConfigError(f"data.cache_dir is empty; give a folder, or leave data.cache_dir out for the default "
                              f"cache ({DEFAULT_CACHE})", "data.cache_dir")
        if self.path == "":  # read as ".", the current folder ("data.path is a directory"), from a file or Python
            raise ConfigError("data.path is empty; give a text file, or leave data.path out for the embedded Tiny "
                              "Shakespeare", "data.path")
        _fraction("data", "val_fraction", self.val_fraction, low_open=True)
        import codecs

        try:
            info = codecs.lookup(self.encoding)
        except (LookupError, TypeError):
            raise ConfigError(f"data.encoding {self.encoding!r} is not a known text encoding "
                              "(try utf-8, cp1252 or latin-1)", "data.encoding") from None
        if not getattr(info, "_is_text_encoding", True):  # rot13, base64, zlib: an "unexpected TypeError" when read
            raise ConfigError(f"data.encoding {self.encoding!r} is a bytes-to-bytes or text-to-text transform, not a "
                              "text encoding (try utf-8, cp1252 or latin-1)", "data.encoding")
        if self.path is None and info.name != "utf-8":  # it decoded the embedded corpus: EBCDIC Shakespeare trained
            raise ConfigError(f"data.encoding {self.encoding!r} is the encoding of a file given with data.path; the "
                              "embedded Tiny Shakespeare is UTF-8: drop data.encoding, or give data.path",
                              "data.encoding", "data.path")
        _choice("data", "tokenizer", self.tokenizer, ("char", "bpe"))
        _choice("data", "split", self.split, ("tail", "lines"))
        v = self.vocab_size
        if v is not None:
            if self.tokenizer != "bpe":
                raise ConfigError(f"data.vocab_size {v!r} applies to data.tokenizer bpe only (the char "
                                  "vocabulary is the corpus's characters); set --data.vocab_size null or "
                                  "--data.tokenizer bpe",
                                  "data.vocab_size", "data.tokenizer")
            if isinstance(v, bool) or not isinstance(v, int) or not (257 <= v <= 1 << 20):
                raise ConfigError(f"data.vocab_size must be an integer in [257, 1048576] (256 bytes + "
                                  f"<|endoftext|> at least), got {v!r}", "data.vocab_size")

    @property
    def bpe_vocab_size(self) -> int:
        """The BPE vocabulary size asked for (``vocab_size`` or 512)."""
        return self.vocab_size if self.vocab_size is not None else 512


@dataclass
class ModelConfig:
    """Shape and wiring of the GPT (decoder-only transformer).

    Attributes:
        vocab_size: V, number of token ids; set from the corpus's tokenizer by ``train`` (0 = not yet known), so
            the command line refuses it.
        block_size: T_max, context length in tokens.
        n_layer: number of transformer blocks.
        n_head: attention heads per block; must divide ``n_embd``.
        n_embd: C, width of the residual stream.
        dropout: dropout probability on attention weights and sublayer outputs, in [0, 1).
        bias: biases in Linear layers and LayerNorm.
        ff_mult: feed-forward expansion; hidden width = ff_mult * n_embd (the "magic 4").
        activation: ``gelu`` or ``relu`` in the feed-forward layer.
        variant: residual/norm wiring, see :class:`depthlab.model.Block`.
        norm: ``layernorm`` | ``rmsnorm`` | ``dyt`` (Dynamic Tanh, gamma*tanh(alpha*x) + beta, no
            statistics; Zhu et al. 2025) | ``none`` (identity); ignored by ``rezero``.
        tie_weights: share the token embedding and the output head (GPT-2 default).
        init: ``gpt2`` (N(0, 0.02), residual projections / sqrt(2 n_layer)) or ``torch``
            (PyTorch module defaults, U(+-1/sqrt(fan_in))). ``deepnorm`` always applies its
            own Xavier-normal init with gain beta = (8 n_layer)^-1/4 (Wang et al. 2022). With
            ``source``: the keyword arguments the model is built with, a JSON object such as
            ``{"n_layer": 2}`` (``gpt2``, the default, = none).
        source: ``PATH.py:NAME``, a model you wrote instead of depthlab's GPT: a class (built with
            ``init``'s keyword arguments, and ``vocab_size`` = the corpus's when it takes one and
            ``init`` does not set it) or a function returning a ``torch.nn.Module`` whose
            ``forward(idx)`` maps (B, T) token ids to logits (B, T, V) (or a tuple starting with
            them). The file is your code and runs as Python (:mod:`depthlab.usermodel`). The fields
            that describe depthlab's GPT (``n_layer``, ``variant``, ...) do not apply and must stay at
            their defaults; ``block_size`` is the length of the training windows and of the sampling
            context. A bare ``PATH.py`` is the one ``nn.Module`` class the file defines, which the trainer
            writes back here as ``PATH.py:NAME`` once it has imported the file (several: refused, listing them).
        residual_scale: ``1`` or ``depth``: the factor each branch (the attention or MLP output, after
            dropout) is multiplied by before it joins the residual stream; ``depth`` = 1/sqrt(2 n_layer),
            the depth-muP branch scaling (see :class:`depthlab.model.Block`), ``1`` = none.
        norm_scale: ``1`` or ``depth``: ``depth`` multiplies the output of block l's norms by 1/sqrt(l)
            (l = 1..n_layer), LayerNorm Scaling (Sun et al. 2025); pre-LN only (``variant prenorm`` with
            a norm), since it is defined on pre-LN's norms; ``1`` = none.
        position: how the model knows where a token is: ``rope`` (the default: rotary position embedding,
            Su et al. 2021, as in GPT-NeoX and Llama: each head's queries and keys are rotated by an angle
            proportional to their position, so q.k depends on the distance between them; no parameters) or
            ``learned`` (GPT-2's and nanoGPT's table of ``block_size`` position vectors added to the token
            embeddings, ``transformer.wpe``; runs and checkpoints from before this field have it). The default
            recipe at a fixed 2,077 steps: the whole val split 1.4851-1.4853 with rope (seeds 1337, 1338) against
            1.4943-1.5059 with the learned table (seeds 1337-1339), at the same step time (README, issue 24).
            Export writes a rope model as GPT-NeoX, a learned one as GPT-2.
        embed_scale: ``learned``: the embedding output (token vectors, plus position vectors with
            ``position learned``) times one learnable scalar, ``emb_scale.scale``, initialised to 1 / the RMS
            of the initial token embeddings, so the residual stream starts at RMS ~1 (~50 with ``init gpt2``'s
            std 0.02). The DyT authors' LLaMA code does the same: token embeddings drawn at std
            n_embd^-1/2 times a learnable scalar initialised to sqrt(n_embd) (jiachenzhu/DyT,
            other_tasks/LLaMA/fms_fsdp/models/llama.py, ``shared_scale``). ``none``: no scalar (GPT-2).
            ``auto`` (the default): ``learned`` with ``norm dyt``, ``none`` otherwise. DyT has no statistics:
            at GPT-2's RMS 0.02 tanh(alpha x) is linear and passes the signal on small, and a stream that
            then grows saturates it. Runs from before this field had none.
    """

    vocab_size: int = 0
    block_size: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = False
    ff_mult: int = 4
    activation: Literal["gelu", "relu"] = "gelu"
    variant: Literal["prenorm", "postnorm", "plain", "rezero", "deepnorm", "periln"] = "prenorm"
    norm: Literal["layernorm", "rmsnorm", "dyt", "none"] = "layernorm"
    tie_weights: bool = True
    init: Union[Literal["gpt2", "torch"], dict] = "gpt2"
    source: Optional[str] = None
    residual_scale: Literal[1, "depth"] = 1
    norm_scale: Literal[1, "depth"] = 1
    position: Literal["learned", "rope"] = "rope"
    embed_scale: Literal["auto", "none", "learned"] = "auto"

    def __post_init__(self) -> None:
        self._check_source()
        _positive("model", self, "block_size", "n_layer", "n_head", "n_embd", "ff_mult")
        if isinstance(self.vocab_size, bool) or not isinstance(self.vocab_size, int) or self.vocab_size < 0:
            raise ConfigError(f"model.vocab_size must be a non-negative integer, got {self.vocab_size!r}",
                              "model.vocab_size")
        self._check_caps()
        if self.n_embd % self.n_head != 0:
            raise ConfigError(f"model.n_embd ({self.n_embd}) must be divisible by model.n_head ({self.n_head}); "
                              f"{self._heads_that_fit()}", "model.n_embd", "model.n_head")
        _fraction("model", "dropout", self.dropout, low_open=False)
        _switches("model", self, "bias", "tie_weights")
        _choice("model", "variant", self.variant, VARIANTS)
        _choice("model", "norm", self.norm, NORMS)
        _choice("model", "activation", self.activation, ("gelu", "relu"))
        if not isinstance(self.init, dict):
            _choice("model", "init", self.init, ("gpt2", "torch"))
        if type(self.residual_scale) not in (int, str) or self.residual_scale not in RESIDUAL_SCALES:
            # exact types: True == 1 and 1.0 == 1 would otherwise pass as 1
            raise ConfigError(f"model.residual_scale must be 1 (no branch scaling) or depth (each branch "
                              f"times 1/sqrt(2 n_layer)); got {self.residual_scale!r}", "model.residual_scale")
        self._check_norm_scale()
        _choice("model", "position", self.position, ("learned", "rope"))
        _choice("model", "embed_scale", self.embed_scale, EMBED_SCALES)
        if self.position == "rope" and self.head_size % 2:
            raise ConfigError(f"model.position rope rotates each head's vector in pairs of coordinates, so the head "
                              f"size n_embd / n_head must be even (it is {self.head_size}); change model.n_embd or "
                              "model.n_head, or use --model.position learned", "model.n_embd", "model.n_head",
                              "model.position")

    def _heads_that_fit(self) -> str:
        """The fix of an ``n_embd`` that ``n_head`` does not divide: the largest head count up to ``n_head`` that
        divides it, with an even head size under rotary positions (which rotate coordinate pairs)."""
        rope = self.position == "rope"
        fits = [d for d in range(1, self.n_head + 1) if self.n_embd % d == 0 and not (rope and self.n_embd // d % 2)]
        if fits:
            return f"try n_head {max(fits)}"
        step = 2 * self.n_head  # n_head heads of an even size
        learned = max(d for d in range(1, self.n_head + 1) if self.n_embd % d == 0)  # any head size without rope
        return (f"no head count gives the even head size rotary positions (model.position rope) need with an odd "
                f"n_embd: try n_embd {max(step, round(self.n_embd / step) * step)}, or --model.position learned "
                f"--model.n_head {learned}")

    def _check_caps(self) -> None:
        """Sizes no machine holds are refused before anything is allocated."""
        for n, cap in (("n_layer", 4096), ("n_embd", 65536), ("block_size", 1 << 20), ("n_head", 4096),
                       ("ff_mult", 64)):
            if getattr(self, n) > cap:
                raise ConfigError(f"model.{n} = {getattr(self, n)} is beyond any machine; use at most {cap}",
                                  f"model.{n}")

    def _check_norm_scale(self) -> None:
        """``norm_scale`` is 1 or depth, and depth only where LayerNorm Scaling is defined (pre-LN's norms)."""
        if type(self.norm_scale) not in (int, str) or self.norm_scale not in RESIDUAL_SCALES:
            raise ConfigError(f"model.norm_scale must be 1 (no scaling) or depth (block l's norm outputs times "
                              f"1/sqrt(l)); got {self.norm_scale!r}", "model.norm_scale")
        if self.norm_scale == "depth" and (self.variant != "prenorm" or self.norm == "none"):
            what = f"model.variant {self.variant}" if self.variant != "prenorm" else "model.norm none (no norm)"
            raise ConfigError(f"model.norm_scale depth (LayerNorm Scaling, Sun et al. 2025) scales the outputs of "
                              f"pre-LN's norms and is not defined for {what}; use --model.variant prenorm with "
                              "--model.norm layernorm, rmsnorm or dyt, or --model.norm_scale 1", "model.norm_scale",
                              "model.variant" if self.variant != "prenorm" else "model.norm")

    def _check_source(self) -> None:
        """``source`` is PATH.py:NAME and the GPT-only fields stay at their defaults; ``init`` as a
        mapping needs ``source``."""
        if self.source is None:
            if isinstance(self.init, dict):
                raise ConfigError("model.init as keyword arguments applies to model.source only (depthlab's GPT "
                                  "takes gpt2 or torch); add --model.source PATH.py:NAME or drop them", "model.init")
            return
        path, sep, name = str(self.source).rpartition(":")
        bare = isinstance(self.source, str) and not sep and name.endswith(".py")  # its one nn.Module class, found later
        # a folder: its reader (usermodel.parse_source) names the .py files in it
        folder = isinstance(self.source, str) and bool(path if sep else name) and (not sep or name.isidentifier()) \
            and Path(path if sep else name).is_dir()
        if not (bare or folder) and (not isinstance(self.source, str) or not sep or not path.endswith(".py")
                                     or not name.isidentifier()):
            raise ConfigError(f"model.source {self.source!r} must be PATH.py:NAME, the file and the class or "
                              "function in it that makes the model (e.g. mymodel.py:GPT)", "model.source")
        if isinstance(self.init, str) and self.init.lstrip().startswith("{"):
            import json

            try:
                self.init = json.loads(self.init)  # (still validating: the one assignment, before anyone reads it)
            except ValueError:
                pass
        if isinstance(self.init, str) and self.init != "gpt2" or not isinstance(self.init, (str, dict)):
            raise ConfigError(f"model.init {self.init!r} with model.source must be a JSON object of keyword "
                              "arguments, e.g. '{\"n_layer\": 2}'", "model.init", "model.source")
        changed = [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)
                   if f.name in GPT_ONLY and getattr(self, f.name) != f.default]
        if changed:
            raise gpt_only_error(changed, self.source)

    @property
    def head_size(self) -> int:
        """hs = n_embd // n_head."""
        return self.n_embd // self.n_head

    @property
    def built_embed_scale(self) -> str:
        """``embed_scale`` as the GPT is built: ``learned`` or ``none`` (``auto`` resolved by :func:`built_model`)."""
        return built_model({"norm": self.norm, "embed_scale": self.embed_scale})["embed_scale"]

    @property
    def embed_scaled(self) -> bool:
        """Whether the embeddings are multiplied by a learnable scalar (:attr:`built_embed_scale` ``learned``)."""
        return self.built_embed_scale == "learned"


class _KeyTwice(Exception):
    """Raised by :func:`_unique_key_loader`'s loader: (dotted key, line of its first place, line of the second)."""


_MERGE = "tag:yaml.org,2002:merge"


@lru_cache(maxsize=None)
def _unique_key_loader():
    """PyYAML's safe loader, refusing a mapping that gives one key twice (PyYAML itself keeps the last silently:
    ``learning_rate:`` twice under ``train:`` trained with the second). Keys are named dotted from the top
    (``train.learning_rate``); a ``<<: *anchor`` merge's keys may be overridden, as YAML means."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def __init__(self, stream):
            super().__init__(stream)
            # a nested mapping node -> its dotted path as said (``train.``) and as kept apart (``experiments[1].``)
            self.key_paths: dict[Any, tuple[str, str]] = {}
            # every dotted field seen -> its line: ``model.n_layer: 2`` at the top is model: {n_layer: ...} again
            self.names: dict[str, int] = {}

        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                (prefix, unique), seen = self.key_paths.get(node, ("", "")), {}
                for key_node, value_node in node.value:
                    if key_node.tag == _MERGE:
                        continue
                    key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
                    name = f"{prefix}{key}"
                    try:
                        if key in seen:
                            raise _KeyTwice(name, seen[key], line)
                        seen[key] = line
                    except TypeError:  # an unhashable key: PyYAML's own error says so
                        continue
                    here = f"{unique}{key}"
                    if here in self.names and not isinstance(value_node, yaml.MappingNode):
                        first, second = sorted((self.names[here], line))
                        raise _KeyTwice(name, first, second)
                    self.names.setdefault(here, line)
                    if isinstance(value_node, yaml.MappingNode):
                        self.key_paths[value_node] = (f"{name}.", f"{here}.")
                    elif isinstance(value_node, yaml.SequenceNode):
                        for i, v in enumerate(value_node.value):
                            if isinstance(v, yaml.MappingNode):
                                self.key_paths[v] = (f"{name}.", f"{here}[{i}].")
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def key_twice(text: str) -> Optional[tuple[str, int, int]]:
    """(dotted key, line of its first place, line of its second) of the first key that YAML ``text`` gives twice
    in one mapping, or None (none, or ``text`` is not valid YAML: its reader says that)."""
    import yaml

    try:
        yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 - a SafeLoader subclass
    except _KeyTwice as e:
        return e.args
    except (yaml.YAMLError, ValueError, TypeError):
        return None
    return None


def read_yaml(path: str | Path, what: str, fix: str) -> Any:
    """Parse a YAML file, or raise one line that says where and what is wrong.

    Args:
        path: the file. what: how the message names it (``config file``, ``sweep file``).
        fix: what to do, appended to a syntax error.

    Raises:
        DepthlabError: not UTF-8 (the byte and its position), or not valid YAML (line, column, problem).
        OSError: the file cannot be read (callers word a missing file themselves).
    """
    import yaml

    p = Path(path)
    if p.exists() and not p.is_file() and not p.is_dir():  # was: /dev/zero read until memory ran out
        raise DepthlabError(f"{what} {path} is not a regular file (a device, pipe or socket); give a YAML file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DepthlabError(f"{what} {path} is not UTF-8 text (byte {e.object[e.start]:#x} at position "
                            f"{e.start}); save it as UTF-8") from None
    found = key_twice(text)
    if found:
        key, first, second = found
        raise DepthlabError(f"{what} {path} line {second}: key {key!r} appears twice (lines {first} and {second}); "
                            "keep one")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark, opened = getattr(e, "problem_mark", None), getattr(e, "context_mark", None)
        where = f" {_yaml_where(text, mark)}" if mark is not None else ""
        since = ""  # where what the end of the file left open starts
        if mark is not None and opened is not None and _past_end(text, mark) and not _past_end(text, opened):
            since = f" (the unfinished part starts {_yaml_where(text, opened)})"
        raise DepthlabError(f"{what} {path} is not valid YAML{where}: {getattr(e, 'problem', None) or e}{since}; "
                            f"{fix}") from None


def _yaml_lines(text: str) -> list[str]:
    """The lines of ``text`` as YAML counts them (a break is \\r\\n, \\r, \\n, NEL, LS or PS)."""
    import re

    lines = re.split("\r\n|[\r\n\x85\u2028\u2029]", text)
    return lines[:-1] if len(lines) > 1 and lines[-1] == "" else lines  # a final break ends a line, opens none


def _past_end(text: str, mark: Any) -> bool:
    """Whether a YAML error mark points past the last line of ``text`` (the end of the stream)."""
    return mark.line >= len(_yaml_lines(text))


def _yaml_where(text: str, mark: Any) -> str:
    """Where a YAML error mark points, on a line the file has: PyYAML puts the end of a file that ends in a
    line break on the line after the last, which the file does not have; that is the end of its last line."""
    lines = _yaml_lines(text)
    if not _past_end(text, mark):
        return f"at line {mark.line + 1}, column {mark.column + 1}"
    return f"at the end of the file (line {len(lines)}, column {len(lines[-1]) + 1})"


#: What 0 means for the train fields where an infinite value would (said when one is given).
_NO_LIMIT = {"max_time": " (0 = no time limit)", "grad_clip": " (0 = no clipping)",
             "target_val_loss": " (0 = no target)", "min_delta": " (0 = any improvement resets patience)"}

#: Most torch CPU threads a command accepts (torch overflows on absurd counts).
MAX_THREADS = 4096
#: Most tokens one ``depthlab sample`` (or a training-time sample, train.sample_tokens) generates per sample: the
#: output (B, T + n) is allocated up front (int64), so an absurd request failed with an allocation error.
MAX_NEW_TOKENS = 10_000_000
#: The largest step count a config accepts: far beyond any run, and exact as a JSON number or an int64.
MAX_STEPS = 10**12
#: What ``depthlab sample`` generates with when no flag says otherwise (top_k 200 of the vocabulary; top_p
#: None = off). ``depthlab export`` writes the same values to generation_config.json, so ``generate()``
#: of the exported model samples as depthlab does.
SAMPLE_DEFAULTS = {"max_new_tokens": 500, "temperature": 0.8, "top_k": 200, "top_p": None}


def run_path(value: object, argument: str) -> Path:
    """``value`` as a run folder's path, for a Python caller (``None`` or a config object ended in ``TypeError:
    expected str, bytes or os.PathLike object``).

    Raises:
        DepthlabError: not a ``str`` or ``os.PathLike``, naming ``argument``.
    """
    if not isinstance(value, (str, os.PathLike)):
        raise DepthlabError(f"{argument} must be a run folder's path (str or pathlib.Path), got {value!r}")
    return Path(value)


def check_threads(n: object, option: str) -> None:
    """Check a command's ``--threads``: an integer in [0, MAX_THREADS] (0 = torch's default).

    Raises:
        DepthlabError: naming ``option`` and the value.
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_THREADS:
        raise DepthlabError(f"{option} must be between 0 and {MAX_THREADS}, got {n!r}")


def check_device_name(name: object, option: str) -> None:
    """Check a device name: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.

    Raises:
        DepthlabError: naming ``option`` and the value.
    """
    if not isinstance(name, str) or not (name in ("auto", "cpu", "cuda", "mps") or re.fullmatch(r"cuda:\d+", name)):
        raise DepthlabError(f"{option} must be auto, cpu, cuda, cuda:N or mps; got {name!r}")


@dataclass
class TrainConfig:
    """Optimisation, evaluation, logging and run-directory settings.

    The defaults (with ModelConfig's) are the CPU recipe of ``depthlab train``: 4 layers x 128
    wide, context 128, batch 16, ``optimizer: auto`` (on CPU Muon at peak lr 1e-2 for the blocks'
    matrices and AdamW at 3e-3 for the rest; AdamW on CUDA), warmup 50, cosine to 1e-4, bf16 autocast
    where the CPU has native bf16, and a 270 s budget: ``fit_to_time`` plans as many of the 5000
    steps as fit (about 2,000 on a 2-core AVX2 CPU in fp32), so the decay ends inside the budget.

    Attributes:
        out_dir: run directory; ``None`` = ``runs/<timestamp>`` under the current folder.
        batch_size: micro-batch size in sequences.
        grad_accum: micro-batches per optimizer step (global batch = batch_size * grad_accum).
        max_iters: total optimizer steps (a resumed run counts the steps already done).
        max_time: wall-clock budget in seconds for the training loop of one session (0 = none); when
            it runs out, the run evaluates, checkpoints and ends as if max_iters were reached. A
            ``--resume`` gets the whole budget again (summary.json's ``wall_time_s`` counts every session).
        fit_to_time: with ``max_time`` > 0, time the first evaluation and the first 20 training
            steps, then lower ``max_iters`` (never above the value asked for; planned again, better
            measured, at step 200 and then halfway through what is left while 100 steps lie on each
            side, the decay then continuing from the current learning rate) so that the run, evaluations included,
            ends inside 98 % of ``max_time`` with its learning-rate decay finished, instead of being
            cut mid-decay; a warmup that would end later than a fifth of the way from the step it plans at
            (step 20) to the planned end is shortened to end there. The plan is logged and written to
            config.json's ``resolved.plan`` (its ``train``
            section keeps the values asked for), so a resume continues that schedule (a run stopped before
            its plan is planned when resumed); the summary says
            ``stopped_by: max_time`` (the budget ended the run); runs that fit are untouched. A
            schedule that ends with the budget: Li et al. 2020, "Budgeted Training" (ICLR). Off:
            ``max_time`` only cuts the run.
        optimizer: ``adamw`` (every parameter), ``muon``: Muon (Jordan et al. 2024; Newton-Schulz
            orthogonalised momentum, in float32) for the 2-D weights inside the blocks and AdamW for
            the embeddings, head, gains and biases (:mod:`depthlab.optim`), or ``auto``: muon on
            CPU, where it measured val 1.536 vs AdamW's 1.616 in the default 270 s, adamw elsewhere.
        learning_rate: peak learning rate after warmup (AdamW's).
        muon_lr: peak learning rate of the Muon-updated weights (``optimizer: muon``); it follows the
            same warmup and cosine, scaled by muon_lr / learning_rate.
        min_lr: learning rate at the end of the cosine decay.
        warmup_iters: steps of linear warmup (lr(0) = lr / (warmup + 1) > 0).
        lr_decay_iters: step where the cosine reaches ``min_lr``; 0 = ``max_iters``.
        weight_decay: decoupled weight decay (times the learning rate) of AdamW and Muon on tensors with >= 2
            dims. 0.3 in the default recipe: at ~4,800 steps (10 passes over Tiny Shakespeare) its 0.1 left
            train 1.14 against val 1.51 nats; 0.3 measured whole-split val 1.467 against 1.483 (issue 24,
            README). The nanoGPT presets keep nanoGPT's 0.1; fast-cpu and the sweep profiles keep the 0.1 they
            were measured with.
        beta1: AdamW's decay rate of its running mean of the gradient (the first moment), in [0, 1).
        beta2: AdamW's decay rate of its running mean of the squared gradient (the second moment), in [0, 1).
        grad_clip: clip the global gradient L2 norm to this (0 = off).
        eval_interval: steps between evaluations (also at step 0 and the last step).
        eval_iters: batches per split in one evaluation (the same fixed windows every time: an
            estimate, fair between evaluations), each of the global batch's ``batch_size x grad_accum``
            windows (read in micro-batches of ``batch_size``), the same under torchrun and kept by a resume
            (config.json ``resolved.eval_batch``).
        eval_windows: where those ``eval_iters x batch_size x grad_accum`` windows of each split start: ``spaced`` =
            evenly spaced over the split, the same for every seed (a systematic sample: each batch spans
            the whole split), or ``random`` = drawn with ``seed`` (what runs before this field read).
            Measured with one run's weights on Tiny Shakespeare (default shape): random windows read the
            whole val split to +- 0.016 nats (sd over 10 seeds), evenly spaced ones to +- 0.007 (over 10
            starts), at the same cost (:mod:`depthlab.training.evaluator`).
        final_validation: when the run ends (not when interrupted), evaluate the best weights on the
            whole val split (up to 2^20 target tokens, :mod:`depthlab.evaluation`), log it and write
            it to summary.json (``final_validation``). The eval_iters windows are a sample: on the
            default recipe's weights after 2,000 steps they read 1.538 nats, 50 batches 1.511 and
            the whole split 1.503. litgpt's ``eval.final_validation``.
        log_interval: steps between training log lines.
        seed: seeds model init, batch sampling and dropout.
        device: ``auto`` (cuda > mps > cpu), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        dtype: ``float32`` | ``bfloat16`` (autocast) | ``auto``: bf16 on CUDA; on a CPU the faster of the
            two, timed at the run's shape (:mod:`depthlab.training.autotune`; bf16 is timed only where the CPU
            has native bf16 instructions: elsewhere it is emulated, several times slower).
        compile: wrap the model in ``torch.compile`` (falls back to eager with one warning): ``true``,
            ``false`` or ``auto`` = on CUDA, where it pays, off elsewhere (on CPU the compile time,
            10-20 s, is not won back by a few-minute run; benchmarks/vs_reference.py).
        compile_mode: ``torch.compile``'s ``mode`` when the model is compiled: ``default``,
            ``reduce-overhead`` (CUDA graphs: one launch replays a step's kernels, for models too
            small to keep a GPU busy between launches), ``max-autotune`` (CUDA graphs and
            benchmarked kernel choices: longer compiles), ``max-autotune-no-cudagraphs``, or ``auto`` =
            ``reduce-overhead`` on one CUDA device (measured on an H200 at nanoGPT's GPU shape: the
            training steps 1.45 M -> 3.04 M tokens/s on the same loss curve; README), ``default``
            elsewhere (CUDA graphs do nothing on a CPU, and are unmeasured under DDP).
        attention: ``sdpa`` (``F.scaled_dot_product_attention``), ``explicit`` (matmul + masked
            softmax) or ``auto``: on a CPU the faster of the two, timed (under bf16 autocast explicit
            measured 1.6-1.7x faster than SDPA's CPU flash kernel; in fp32 SDPA 8-10 % faster;
            benchmarks/train_speed.py); SDPA elsewhere.
        threads: torch intra-op threads on CPU; 0 = timed at the run's shape (1 or every core, with
            OpenMP's idle threads spinning or sleeping unless ``OMP_WAIT_POLICY`` is set).
        flush_denormal: on a CPU, compute subnormal floats (|x| < 1.2e-38 in float32) as zero while
            training. A collapsed deep stack (``plain``) fills its activations and gradients with them,
            and many CPUs take a slow path for each (issue 24: a 16-block plain run 3,531 -> 16,240
            tokens/s on a Xeon); values that small are 1e-31 of the unit-scale values they are summed
            with, below float32's resolution (1.2e-7), so the loss is unchanged.
        keep_last: how many step checkpoints to keep besides ``best``.
        on_nonfinite: ``stop`` (exit 3) or ``skip`` the step on a non-finite loss/gradient.
        resume: continue the run in ``out_dir`` from its latest good checkpoint.
        progress: show a progress bar when stderr is a terminal.
        grad_log_interval: steps between gradient-monitor records (0 = off).
        probe_interval: steps between activation probes (0 = off).
        tensorboard: also write TensorBoard event files in the run directory.
        target_val_loss: stop at the first evaluation with val loss <= this (nats; 0 = off);
            the summary then records ``target_reached_step`` and ``target_reached_s``.
        patience: early stopping: stop after this many evaluations in a row without lowering the
            best val loss by at least ``min_delta`` (0 = off); ``stopped_by: patience``. The best
            checkpoint (what ``sample`` uses) is the lowest val loss seen.
        min_delta: the improvement of the best val loss (nats) that resets ``patience``. The reference is the best
            val loss so far, lowered by every improvement, as small as it is (Lightning's and Keras' EarlyStopping
            move theirs only on an improvement of ``min_delta``): gains each below ``min_delta`` use up the patience
            even where together they exceed it.
        sample_interval: every this many steps, print a short sample from the model (seeded, fixed
            prompt, the training RNG untouched) and record it (``kind: sample``, TensorBoard text);
            0 = off.
        sample_tokens: tokens per training-time sample.
    """

    out_dir: Optional[str] = None
    batch_size: int = 16
    grad_accum: int = 1
    max_iters: int = 5000
    max_time: float = 270.0
    fit_to_time: bool = True
    optimizer: Literal["auto", "adamw", "muon"] = "auto"
    learning_rate: float = 3e-3
    muon_lr: float = 1e-2
    min_lr: float = 1e-4
    warmup_iters: int = 50
    lr_decay_iters: int = 0
    weight_decay: float = 0.3
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0
    eval_interval: int = 500
    eval_iters: int = 20
    eval_windows: Literal["spaced", "random"] = "spaced"
    final_validation: bool = True
    log_interval: int = 100
    seed: int = 1337
    device: str = "auto"
    dtype: Literal["float32", "bfloat16", "auto"] = "auto"
    compile: Union[bool, Literal["auto"]] = "auto"
    compile_mode: Literal["auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = "auto"
    attention: Literal["auto", "sdpa", "explicit"] = "auto"
    threads: int = 0
    flush_denormal: bool = True
    keep_last: int = 2
    on_nonfinite: Literal["stop", "skip"] = "stop"
    resume: bool = False
    progress: bool = True
    grad_log_interval: int = 50
    probe_interval: int = 250
    tensorboard: bool = True
    target_val_loss: float = 0.0
    patience: int = 0
    min_delta: float = 0.0
    sample_interval: int = 0
    sample_tokens: int = 100

    def _check_caps(self) -> None:
        """Counts no run reaches are refused before anything is allocated."""
        for n in ("max_iters", "warmup_iters", "lr_decay_iters", "eval_interval", "log_interval", "grad_log_interval",
                  "probe_interval", "sample_interval", "patience"):
            if getattr(self, n) > MAX_STEPS:  # a number of steps no run reaches (1e12: ~30 years at 1,000/s)
                raise ConfigError(f"train.{n} must be at most {MAX_STEPS:,} steps, got {getattr(self, n):,}",
                                  f"train.{n}")
        if self.eval_iters > 1_000_000:  # its losses are one tensor: 10^17 crashed allocating it
            raise ConfigError(f"train.eval_iters must be at most 1,000,000 batches per evaluation, got "
                              f"{self.eval_iters:,}", "train.eval_iters")
        if self.batch_size * self.grad_accum > 1_000_000:
            raise ConfigError(f"train.batch_size x train.grad_accum = {self.batch_size * self.grad_accum} "
                              "sequences per step is beyond any machine; use at most 1,000,000", "train.batch_size",
                              "train.grad_accum")
        if self.sample_tokens > MAX_NEW_TOKENS:  # was: a warning at the first sample naming depthlab sample's flags
            raise ConfigError(f"train.sample_tokens must be at most {MAX_NEW_TOKENS:,} (each sample is held in "
                              f"memory), got {self.sample_tokens:,}", "train.sample_tokens")

    def __post_init__(self) -> None:
        if self.out_dir == "":  # a file's `out_dir: ""` trained into runs/<time> without a word
            raise ConfigError("train.out_dir is empty; give a folder, or leave train.out_dir out for runs/<time>",
                              "train.out_dir")
        _positive("train", self, "batch_size", "grad_accum", "max_iters", "eval_interval",
                  "eval_iters", "log_interval", "keep_last", "sample_tokens")
        for n in ("max_time", "learning_rate", "muon_lr", "min_lr", "weight_decay", "grad_clip", "target_val_loss",
                  "min_delta"):
            v = getattr(self, n)
            rate = n in ("learning_rate", "muon_lr")  # 0: the weights it moves never train (Muon's: every block's)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != v or (rate and v == 0):
                shown = f"{v:g}" if isinstance(v, float) else repr(v)  # -3, as typed, not -3.0
                what = "a number > 0" if rate else "a non-negative number"
                raise ConfigError(f"train.{n} must be {what}, got {shown}", f"train.{n}")
            if not math.isfinite(v):  # inf: the command line and files refuse it; Python (a notebook, a sweep) too
                raise ConfigError(f"train.{n} must be a finite number, got {v}" + _NO_LIMIT.get(n, ""), f"train.{n}")
        if self.min_lr > self.learning_rate:
            raise ConfigError(f"train.min_lr ({self.min_lr}) must not exceed train.learning_rate "
                              f"({self.learning_rate}): lower train.min_lr too (e.g. to {self.learning_rate / 30:.3g}, "
                              "a thirtieth, as the default recipe's ratio)", "train.min_lr", "train.learning_rate")
        for n in ("warmup_iters", "lr_decay_iters", "threads", "grad_log_interval", "probe_interval", "patience",
                  "sample_interval"):
            v = getattr(self, n)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(f"train.{n} must be a non-negative integer, got {v!r}", f"train.{n}")
        for n in ("beta1", "beta2"):
            _fraction("train", n, getattr(self, n), low_open=False)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not (0 <= self.seed < 2**63):
            raise ConfigError(f"train.seed must be an integer in [0, 2^63), got {self.seed!r}", "train.seed")
        _switches("train", self, "fit_to_time", "final_validation", "flush_denormal", "resume", "progress",
                  "tensorboard")
        self._check_caps()
        if 0 < self.lr_decay_iters < self.warmup_iters:
            raise ConfigError(f"train.lr_decay_iters ({self.lr_decay_iters}) is before the end of "
                              f"train.warmup_iters ({self.warmup_iters}): the learning rate would jump from "
                              "the warmup straight to train.min_lr; make lr_decay_iters >= warmup_iters "
                              "(or 0 = max_iters)", "train.lr_decay_iters", "train.warmup_iters")
        _choice("train", "dtype", self.dtype, ("float32", "bfloat16", "auto"))
        _choice("train", "optimizer", self.optimizer, ("auto", "adamw", "muon"))
        _choice("train", "on_nonfinite", self.on_nonfinite, ("stop", "skip"))
        _choice("train", "eval_windows", self.eval_windows, ("spaced", "random"))
        _choice("train", "attention", self.attention, ("auto", "sdpa", "explicit"))
        _choice("train", "compile_mode", self.compile_mode,
                ("auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"))
        if not (isinstance(self.compile, bool) or self.compile == "auto"):
            raise ConfigError(f"train.compile must be true, false or auto; got {self.compile!r}", "train.compile")
        try:
            check_device_name(self.device, "train.device")
        except DepthlabError as e:
            raise ConfigError(str(e), "train.device") from None
        if self.threads > MAX_THREADS:  # >= 0 is checked with the other counts above
            raise ConfigError(f"train.threads must be at most {MAX_THREADS}, got {self.threads}", "train.threads")


@dataclass
class RunConfig:
    """A whole run: the three sections of a config file (``data:``, ``model:``, ``train:``)."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        """Each section is its class (a dict there failed later with AttributeError); ``train.attention`` chooses
        depthlab's GPT's attention code: with ``model.source`` only ``auto``."""
        for name, klass in (("data", DataConfig), ("model", ModelConfig), ("train", TrainConfig)):
            got = getattr(self, name)
            if not isinstance(got, klass):
                raise ConfigError(f"RunConfig({name}=...) takes a {klass.__name__}, got {type(got).__name__}: "
                                  f"RunConfig({name}={klass.__name__}(...)), or RunConfig.from_dict for nested dicts")
        if self.model.source is not None and self.train.attention != "auto":
            raise ConfigError(f"train.attention {self.train.attention!r}: this chooses depthlab's GPT's attention "
                              f"code and does not apply to model.source {self.model.source} (its forward computes "
                              "its own attention); leave train.attention at auto", "train.attention", "model.source")

    def checked(self) -> "RunConfig":
        """A copy of this config validated again, section by section: a field set after construction (``cfg.model.
        n_layer = -5``, a notebook habit) is refused as a constructor would refuse it.

        Raises:
            ConfigError: a field outside its allowed range.
        """
        self.__post_init__()  # a section set to a dict after construction: said as the constructor says it
        return dataclasses.replace(self, **{f.name: dataclasses.replace(getattr(self, f.name))
                                            for f in dataclasses.fields(self)})

    @staticmethod
    def require(cfg: Any, who: str) -> "RunConfig":
        """``cfg`` when it is a RunConfig (``who``: the caller named in the error, e.g. ``train``).

        Raises:
            ConfigError: any other object (``train({...})`` failed with AttributeError: 'dict' object has no
                attribute 'train').
        """
        if not isinstance(cfg, RunConfig):
            raise ConfigError(f"{who} takes a RunConfig, got {type(cfg).__name__}: RunConfig(...), or "
                              "RunConfig.from_dict for a nested dict")
        return cfg

    def to_dict(self) -> dict:
        """Plain nested dict of every resolved field (what ``config.json`` holds)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_run(cls, run_dir: Union[str, Path], resume: bool = True) -> "RunConfig":
        """The config the run in ``run_dir`` trained with (its config.json's data/model/train sections), set to
        resume it in place (``resume``; False: the same settings for a new run, ``train.out_dir`` to set): what
        ``depthlab train --resume RUN`` reads first. A ``RunConfig()`` of defaults with ``resume`` true is refused
        for every field the run set otherwise.

        Raises:
            DepthlabError: no readable config.json in ``run_dir``, or one whose values are refused.
        """
        import json

        given = run_path(run_dir, "RunConfig.from_run's run_dir")
        if given.is_file():  # RUN/config.json itself: "RUN/config.json/config.json cannot be read" said nothing
            inside = (f"; its run is {given.parent}: RunConfig.from_run({str(given.parent)!r})"
                      if given.name == "config.json" and (given.parent / "checkpoints").is_dir() else "")
            raise DepthlabError(f"{given} is a file, not a run directory; give the out_dir of a depthlab train "
                                f"run{inside}")
        path = given / "config.json"
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise DepthlabError(f"{path} cannot be read ({getattr(e, 'strerror', None) or e}); give the out_dir of a "
                                "depthlab train run") from None
        if not isinstance(d, dict):
            raise DepthlabError(f"{path} is not the JSON object depthlab writes; give the out_dir of a depthlab "
                                "train run")
        cfg = cls.from_dict({k: v for k, v in d.items() if k in ("data", "model", "train")})
        cfg.train.resume = resume
        cfg.train.out_dir = str(run_dir) if resume else None
        return cfg

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        """Build and validate from a nested dict; unknown sections or keys raise DepthlabError.

        Raises:
            DepthlabError: unknown section/key, or a value outside its allowed range.
        """
        if not isinstance(d, dict):
            raise DepthlabError(f"a config must be a mapping with sections data/model/train, got {type(d).__name__}")
        d = {k: v for k, v in d.items() if k != "resolved"}  # config.json's record of what "auto" became
        unknown = set(d) - {"data", "model", "train"}
        if unknown:
            raise DepthlabError(f"unknown config section(s): {', '.join(sorted(map(str, unknown)))} "
                                "(allowed: data, model, train)")
        parts = {}
        for name, klass in (("data", DataConfig), ("model", ModelConfig), ("train", TrainConfig)):
            sec = {} if d.get(name) is None else d[name]  # [] is no mapping either (it had read as {}: defaults)
            if not isinstance(sec, dict):
                raise DepthlabError(f"config section {name!r} must be a mapping, got {type(sec).__name__}")
            known = {f.name for f in dataclasses.fields(klass)}
            bad = [str(k) for k in sec if k not in known]
            if bad:
                raise DepthlabError(f"unknown key(s) in {name}: {', '.join(sorted(bad))}")
            try:
                parts[name] = klass(**sec)
            except DepthlabError:
                raise
            except (TypeError, ValueError) as e:
                raise DepthlabError(f"bad value in {name}: {e}") from None
        return cls(**parts)


#: The config sections, in order, with their dataclasses.
SECTIONS = (("data", DataConfig), ("model", ModelConfig), ("train", TrainConfig))

#: What a run made before a field existed used, where that is not the field's default:
#: runs without ``train.optimizer`` trained with AdamW (the default is now ``auto``); runs without
#: ``train.eval_windows`` evaluated on windows drawn with their seed (the default is now ``spaced``); runs
#: (and checkpoints, and exports) of depthlab's GPT without ``model.position`` had GPT-2's learned table
#: (the default is now ``rope``) and no embedding scale (the default is now ``auto``: one with DyT).
PREDATING = {"train": {"optimizer": "adamw", "eval_windows": "random"},
             "model": {"position": "learned", "embed_scale": "none"}}


def predating_model(model: Any) -> Any:
    """A model section (config.json's, a checkpoint's, an export's) with ``position`` and ``embed_scale``
    filled in from :data:`PREDATING` where it predates the field and describes depthlab's GPT (a ``model.source``
    model has no such field); anything else as it is."""
    if not isinstance(model, dict) or not model or model.get("source"):
        return model  # {}: nothing is known of the model
    missing = {k: v for k, v in PREDATING["model"].items() if k not in model}
    return {**model, **missing} if missing else model


def built_model(model: Any) -> Any:
    """A model section with ``embed_scale auto`` as the GPT it builds has it (``learned`` with ``norm dyt``, else
    ``none``), so that two sections building the same model compare equal (a run from before the field, read as
    ``none``, and a LayerNorm run asked for with ``auto``); anything else as it is."""
    if not isinstance(model, dict) or model.get("embed_scale") != "auto":
        return model
    return {**model, "embed_scale": "learned" if model.get("norm", ModelConfig.norm) == "dyt" else "none"}


def wiring_label(model: dict) -> str:
    """A model's residual/norm wiring in a few words: ``prenorm + layernorm``, ``rezero (no norm)``,
    ``periln + layernorm + residual_scale depth``, ``prenorm + dyt + embed_scale learned``.

    The embedding scale is named when it is on, and when it is off under DyT (whose default turns it on), as
    built (``auto`` resolved by :func:`built_model`).

    Args:
        model: a model section as a dict (``variant``, ``norm``; ``residual_scale``, ``norm_scale`` and
            ``embed_scale`` where set).
    """
    base = "rezero (no norm)" if model.get("variant") == "rezero" else f"{model.get('variant')} + {model.get('norm')}"
    parts = [base] + [f"{k} depth" for k in ("residual_scale", "norm_scale") if model.get(k) == "depth"]
    emb = built_model(model).get("embed_scale")
    if emb == "learned" or (emb == "none" and model.get("norm") == "dyt"):
        parts.append(f"embed_scale {emb}")
    return " + ".join(parts)


def as_ran(config: Any) -> Any:
    """A run's ``config.json`` (data/model/train) with the fields newer than the run filled in as the run had
    them (:data:`PREDATING`: ``train.eval_windows`` random, ``model.position`` learned), so that it is read,
    resumed and measured as it trained (a copy; other keys as they are). The optimizer is not filled in:
    :func:`ran_optimizer` reads what trained it."""
    if not isinstance(config, dict):
        return config
    out = dict(config)
    train = config.get("train")
    if isinstance(train, dict) and "eval_windows" not in train:
        out["train"] = {**train, "eval_windows": PREDATING["train"]["eval_windows"]}
    if isinstance(config.get("model"), dict):
        out["model"] = predating_model(config["model"])
    return out


def ran_optimizer(config: Optional[dict]) -> Optional[str]:
    """The optimizer a run's ``config.json`` says trained it: ``resolved.optimizer`` (what ``auto``
    became), else ``train.optimizer`` when it names one, else (a run from before the field, with
    ``auto``) :data:`PREDATING`'s AdamW; None without a config."""
    if not isinstance(config, dict):
        return None
    resolved, train = config.get("resolved"), config.get("train")
    ran = resolved.get("optimizer") if isinstance(resolved, dict) else None
    asked = train.get("optimizer") if isinstance(train, dict) else None
    if ran:
        return str(ran)
    if asked and asked != "auto":
        return str(asked)
    return PREDATING["train"]["optimizer"]


def add_config_arguments(parser) -> None:
    """Add every config field to a ``jsonargparse.ArgumentParser`` as a dotted flag (``--model.n_layer``).

    The one definition of the config grammar: ``train``, ``probe`` and ``sweep`` (whose grid values
    are typed and validated as these same flags) all build their parsers with it. Types and help
    text come from the dataclasses' annotations and docstrings.

    Args:
        parser: a ``jsonargparse.ArgumentParser``.
    """
    for name, klass in SECTIONS:
        parser.add_class_arguments(klass, name, instantiate=False)


#: Training steps ``train.fit_to_time`` times before its first plan (:mod:`depthlab.budget`): a session with no more
#: steps than these to go is never planned, so its schedule is the one asked for.
FIT_STEPS = 20


def schedule_warnings(t: TrainConfig, plannable: Optional[bool] = None, continued: bool = False) -> list[str]:
    """Warnings about a learning-rate schedule that is legal but probably not what was meant.

    Args:
        t: the train section.
        plannable: whether ``train.fit_to_time`` may still plan this session (the trainer's
            :class:`~depthlab.budget.TimeBudget` knows); None: judged from ``t`` alone (fit_to_time on, a
            max_time, and enough steps for a plan to end the run earlier: :func:`fit_can_shorten`).
        continued: a resumed session whose rate goes on from its checkpoint's (an anchored decay): it does not warm
            up again, so ``warmup_iters`` says nothing of it (the run may have reached its peak under a plan).

    Returns:
        One sentence per problem, naming the fields (empty when the schedule is coherent).
    """
    out = []
    if t.warmup_iters >= t.max_iters and not continued:
        # on a resume the schedule may continue from the checkpoint's learning rate and decay from there
        # (the "resume: the learning rate continues from ..." line): only the peak is surely never reached
        # Muon's rate too where it may run (optimizer auto on a CPU, muon): it was left out, as if AdamW's were all
        muon = f", nor train.muon_lr {t.muon_lr:g} (where Muon updates the blocks' matrices)" \
            if t.optimizer != "adamw" else ""
        out.append(f"train.warmup_iters ({t.warmup_iters}) >= train.max_iters ({t.max_iters}): the peak "
                   f"train.learning_rate {t.learning_rate:g} is never reached{muon}"
                   + ("" if t.resume else " and the cosine decay never starts")
                   + (" - unless train.fit_to_time shortens the run to fit train.max_time: its plan then ends the "
                      "warmup within the first fifth of the steps left when it plans, and says so"
                      if _plannable(t, plannable) else ""))
    if t.optimizer == "adamw" and t.muon_lr != TrainConfig.__dataclass_fields__["muon_lr"].default:
        out.append(f"train.muon_lr {t.muon_lr:g} changes nothing: train.optimizer adamw trains every parameter with "
                   "AdamW at train.learning_rate (Muon's rate applies with train.optimizer muon, or auto on a CPU)")
    decay = t.lr_decay_iters or t.max_iters
    if t.lr_decay_iters and decay > t.max_iters:
        out.append(f"train.lr_decay_iters ({t.lr_decay_iters}) > train.max_iters ({t.max_iters}): training ends "
                   "before the learning rate reaches train.min_lr")
    return out


def fit_can_shorten(start: int, max_iters: int) -> bool:
    """Whether a ``train.fit_to_time`` plan of a session starting at step ``start`` can end it before ``max_iters``:
    its first plan comes at ``start + FIT_STEPS`` and ends a step later at the earliest, and an end within
    ``max(2, max_iters // 100)`` steps of the current one is no change (:meth:`depthlab.budget.TimeBudget.propose`)."""
    return max_iters - (start + FIT_STEPS + 1) > max(2, max_iters // 100)


def _plannable(t: TrainConfig, plannable: Optional[bool]) -> bool:
    if plannable is not None:
        return plannable
    return t.fit_to_time and t.max_time > 0 and fit_can_shorten(0, t.max_iters)
