"""What a ``depthlab`` command line means, checked in depthlab's own words before the parser sees it.

The parser (jsonargparse, built in :mod:`depthlab.cli`) is the grammar; this module reads the same
command line first and refuses what the parser would refuse, in messages that name the option as
the user typed it and quote the value as typed (``1e3``, not the ``1000.0`` a parser makes of it).
Nothing here reads the text of another library's message: types come from the config dataclasses'
hints (:func:`field_types`) and from the types the CLI gave its own options, one converter per
type (:func:`convert`), and the command line's shape comes from the parser's actions (which
options exist, which take a value). What this module does not model, the parser still refuses in
its own words, passed through unchanged.
"""

from __future__ import annotations

import difflib
import json
import math
import typing
from pathlib import Path
from typing import Any, Iterable, Literal, Optional, Sequence, Union

from .config import key_twice
from .errors import DepthlabError

#: The config sections a command line addresses with dotted flags (``--model.n_layer``).
SECTIONS = ("data", "model", "train")


# ------------------------------------------------------------------------- names
def flag(key: str) -> str:
    """The command-line flag of a config field or option: ``train.max_iters`` -> ``--train.max_iters``.

    The one place the CLI turns a field name into a flag; library messages name fields only.
    """
    return f"--{key}"


def field_of(option: str) -> str:
    """The field or option name of a flag as typed: ``--train.max_iters=5`` -> ``train.max_iters``."""
    return option.split("=", 1)[0].lstrip("-")


def as_flag(msg: str, key: str) -> str:
    """``msg`` with config field ``key`` named as its flag wherever it names the field (``model.n_head (3)`` ->
    ``--model.n_head (3)``; a ``--model.n_head`` already there, or ``model.n_head_x``, untouched)."""
    out, i = [], 0
    while (j := msg.find(key, i)) >= 0:
        before, after = msg[j - 1:j], msg[j + len(key):j + len(key) + 1]
        whole = not (before.isalnum() or before in ("_", ".", "-")) and not (after.isalnum() or after == "_")
        out += [msg[i:j], flag(key) if whole else key]
        i = j + len(key)
    return "".join(out) + msg[i:]


def typed_flags(msg: str, typed: Sequence[str]) -> str:
    """``msg`` (a library's, naming config fields: ``lower train.learning_rate``) with each field whose flag the
    command line ``typed`` gives named as that flag (``lower --train.learning_rate``), the words the user knows."""
    for key in field_types():
        if occurrences(typed, [flag(key)]):
            msg = as_flag(msg, key)
    return msg


def spelled_as_typed(msg: str, parser, typed: Sequence[str]) -> str:
    """``msg`` (depthlab's own, naming an option one way: ``--max_tokens must be >= 0``) with each option of
    ``parser`` that has two spellings (``--max_tokens``, ``--max-tokens``) named as the command line ``typed`` spells
    it, the last typed where both are; an option not typed keeps the message's spelling."""
    def whole(text: str, word: str, by: str) -> str:  # ``word`` where no name character touches it (not --x_y_z)
        out, i = [], 0
        while (j := text.find(word, i)) >= 0:
            before, after = text[j - 1:j], text[j + len(word):j + len(word) + 1]
            touches = any(c and (c.isalnum() or c in "_-") for c in (before, after))
            out += [text[i:j], word if touches else by]
            i = j + len(word)
        return "".join(out) + text[i:]

    for act in parser._actions:
        names = [o for o in act.option_strings if o.startswith("--")]
        used = [name for _, name, _ in occurrences(typed, names)] if len(names) > 1 else []
        for other in (n for n in names if used and n != used[-1]):
            msg = whole(msg, other, used[-1])
    return msg


def one_line(msg: str) -> str:
    """``msg`` with every run of whitespace (newlines included) made one space."""
    return " ".join(msg.split())


def occurrences(argv: Sequence[str], names: Iterable[str]) -> list[tuple[int, str, Optional[str]]]:
    """(position, option as typed, its value) of every ``--name VALUE`` / ``--name=VALUE`` in ``argv``
    whose name is one of ``names``; the value is None for a ``--name`` with nothing after it."""
    names = set(names)
    out = []
    for i, a in enumerate(argv):
        name, eq, value = a.partition("=")
        if name in names:
            out.append((i, name, value if eq else (argv[i + 1] if i + 1 < len(argv) else None)))
    return out


def flag_value(argv: Sequence[str], option: str) -> Optional[str]:
    """The value of the first ``option`` in ``argv`` (``--flag VALUE`` or ``--flag=VALUE``), or None."""
    found = [v for _, _, v in occurrences(argv, [option]) if v is not None]
    return found[0] if found else None


# ------------------------------------------------------------------------- one converter per type
class BadValue(ValueError):
    """A value its type does not take (what it takes: :func:`expected`)."""


#: YAML's spellings of null, true and false: what the parser reads as None / True / False.
_NULL = ("null", "Null", "NULL", "~")
_TRUE = tuple(s for w in ("true", "yes", "on") for s in (w, w.capitalize(), w.upper()))
_FALSE = tuple(s for w in ("false", "no", "off") for s in (w, w.capitalize(), w.upper()))


def _to_bool(text: str) -> bool:
    word = text.strip()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise BadValue(text)


def _to_int(text: str) -> int:
    """Decimal (``3``, ``+3``, ``1_000``), or hexadecimal / binary as YAML writes them (``0x1F``, ``0b101``).
    YAML 1.1's base 60 (``1:30`` = 90), which the parser would take, is refused: it is never meant."""
    try:
        return int(text)
    except ValueError:
        pass
    if text.strip().lstrip("+-")[:2].lower() in ("0x", "0b"):
        try:
            return int(text.strip(), 0)
        except ValueError:
            pass
    raise BadValue(text)


def _to_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float(_to_int(text))  # 0x10 is 16.0
    if not math.isfinite(v):  # nan, inf, and 1e400 (which overflows to inf)
        raise BadValue(text)
    return v


def _to_mapping(text: str) -> dict:
    import yaml

    try:
        d = yaml.safe_load(text)
    except yaml.YAMLError:
        raise BadValue(text) from None
    if not isinstance(d, dict):
        raise BadValue(text)
    return d


_CONVERT = {bool: _to_bool, int: _to_int, float: _to_float, str: str, dict: _to_mapping}
_WORDS = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string",
          dict: "a mapping ({key: value, ...})"}


def checkable(hint: Any) -> bool:
    """Whether :func:`convert` models ``hint`` (bool, int, float, str, dict, Literal, Optional/Union of them)."""
    if typing.get_origin(hint) is Literal:
        return True
    if typing.get_origin(hint) is Union:
        return all(a is type(None) or checkable(a) for a in typing.get_args(hint))
    return hint in _CONVERT


def convert(text: str, hint: Any) -> Any:
    """The value of command-line ``text`` for type ``hint``, as the parser reads it.

    Raises:
        BadValue: ``hint`` does not take ``text``.
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union:
        if type(None) in args and text.strip() in _NULL:
            return None
        for a in args:
            if a is not type(None):
                try:
                    return convert(text, a)
                except BadValue:
                    pass
        raise BadValue(text)
    if origin is Literal:
        for a in args:
            if text == str(a):
                return a
        raise BadValue(text)
    return _CONVERT[hint](text)


def convert_value(value: Any, hint: Any) -> Any:
    """:func:`convert` for a value a YAML/JSON file already typed (text goes through :func:`convert`).

    ``None`` passes (the config's own checks name a field that needs a value).

    Raises:
        BadValue: ``hint`` does not take ``value``.
    """
    if value is None or isinstance(value, str):
        return value if value is None else convert(value, hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union:
        for a in args:
            try:
                return convert_value(value, a)
            except BadValue:
                pass
        raise BadValue(value)
    if origin is Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        raise BadValue(value)
    if hint is bool and isinstance(value, bool) or hint is int and type(value) is int or hint is dict and \
            isinstance(value, dict):
        return value
    if hint is float and type(value) in (int, float) and math.isfinite(value):
        return float(value)
    raise BadValue(value)


def expected(hint: Any, in_union: bool = False) -> str:
    """What ``hint`` takes, in words: ``true or false``, ``one of gelu, relu``, ``an integer or null``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union:
        words = [expected(a, True) for a in args if a is not type(None)]
        return " or ".join(words + (["null"] if type(None) in args else []))
    if origin is Literal:
        return " or ".join(map(str, args)) if in_union else "one of " + ", ".join(map(str, args))
    return _WORDS.get(hint, getattr(hint, "__name__", str(hint)))


def field_types() -> dict[str, Any]:
    """Dotted config field -> its type hint, from the config dataclasses (``model.n_layer`` -> int)."""
    from .config import SECTIONS as CLASSES

    return {f"{sec}.{name}": hint for sec, klass in CLASSES for name, hint in typing.get_type_hints(klass).items()}


# ------------------------------------------------------------------------- the command line's shape
def _argparse_number(tok: str) -> bool:
    """``-3``, ``-.5``, ``-2.5``: what argparse takes for a negative number (a value) rather than an
    option; ``-1e-3`` and ``-3.`` it takes for options."""
    if not tok.startswith("-"):
        return False
    whole, dot, frac = tok[1:].partition(".")
    if not dot:
        return whole.isdecimal()
    return (whole == "" or whole.isdecimal()) and frac.isdecimal()


class Grammar:
    """The parser's options, as argparse reads a command line: which exist, which take values.

    Args:
        parser: the command's parser (its ``_actions``: option strings, ``nargs``, ``dest``).
        types: ``dest`` -> type hint of the options whose values depthlab checks itself.
    """

    def __init__(self, parser, types: dict[str, Any]):
        self.options = {o: a for a in parser._actions for o in a.option_strings}
        self.slots = [a for a in parser._actions if not a.option_strings]
        self.types = types
        self.source = False  # whether the command names a model.source (then model.init takes keyword arguments)

    def option(self, tok: str) -> Optional[tuple[str, Optional[str]]]:
        """(option as typed, its ``=`` value or None) when argparse reads ``tok`` as an option, else None
        (a value or positional argument). An option it does not know comes back too."""
        if not tok.startswith("-") or tok == "-":
            return None
        name, eq, value = tok.partition("=")
        if tok in self.options or eq and name in self.options:
            return (name, value if eq else None)
        if not tok.startswith("--") and tok[:2] in self.options:  # -cFILE: a short option and its value
            return (tok[:2], tok[2:])
        if _argparse_number(tok) or " " in tok:
            return None
        return (name, value if eq else None)

    def hint(self, action) -> Any:
        return self.types.get(action.dest)


#: Short names other tools take (PyTorch's and most trainers' lr, a step count) that no spelling distance leads to.
_KNOWN_AS = {"--lr": "--train.learning_rate", "--steps": "--train.max_iters"}


def _closest(name: str, options: Iterable[str], command: str) -> str:
    options = sorted(options)
    known = _KNOWN_AS.get(name)
    starts = [o for o in options if o.startswith(name)] if len(name) > 3 else []  # --temp: --temperature
    close = [known] if known in options else starts if len(starts) == 1 else \
        difflib.get_close_matches(name, options, n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else f"; see `depthlab {command} --help`"


def _missing_value(g: Grammar, name: str, hint: Any, nxt: Optional[str]) -> str:
    """An option without its value: at the end, before another option, or before a word such as
    ``-1e-3`` that argparse reads as an option (then: write it with ``=``)."""
    what = expected(hint) if checkable(hint) else "a value"
    if nxt is None:
        return f"{name}: expected {what} after it, got nothing"
    if nxt.startswith("--") or nxt.split("=", 1)[0] in g.options:
        return f"{name}: expected {what} after it, got the option {nxt}"
    return f"{name}: the value {nxt} was read as an option; write {name}={nxt}"


#: What ``model.init`` takes for a model.source run: gpt2 and torch are depthlab's GPT's init schemes, not its.
SOURCE_INIT = ("a JSON object of the keyword arguments your model (model.source) is built with, "
               "e.g. '{\"n_layer\": 2}'")


def _expected(key: str, hint: Any, source: bool) -> str:
    """What ``key`` takes: its type's words, or for ``model.init`` with a model.source (``source``) the one thing
    the user's model takes (gpt2 and torch would be refused)."""
    return SOURCE_INIT if source and key == "model.init" else expected(hint)


def _check_value(name: str, action, hint: Any, value: str, source: bool = False, example: str = "") -> None:
    if action.dest == "config":
        check_config_file(name, value, example or _C_EXAMPLES[0][1])
    elif checkable(hint):
        try:
            convert(value, hint)
        except BadValue:
            raise DepthlabError(f"{name}: expected {_expected(action.dest, hint, source)}, got {value!r}") from None


#: The flags ``--print_config=FLAG,...`` takes (jsonargparse's, in its help); skip_null is its older skip_unset.
PRINT_CONFIG_FLAGS = ("skip_default", "skip_unset", "skip_null", "comments")


def check_print_config(value: str) -> None:
    """``--print_config=VALUE``: empty, or comma-separated :data:`PRINT_CONFIG_FLAGS` (``comments`` needs
    ruamel.yaml, as jsonargparse's own help says).

    Raises:
        DepthlabError: a flag that is not one of them, or ``comments`` without ruamel.yaml installed.
    """
    from importlib.util import find_spec

    for word in (w for w in value.split(",") if w):
        if word not in PRINT_CONFIG_FLAGS:
            raise DepthlabError(f"--print_config={value}: unknown flag {word!r}; choose from "
                                f"{', '.join(PRINT_CONFIG_FLAGS)} (comma-separated, e.g. --print_config=skip_default), "
                                "or write --print_config alone")
        if word == "comments" and not (find_spec("ruamel") and find_spec("ruamel.yaml")):
            raise DepthlabError("--print_config=comments needs the ruamel.yaml package: pip install ruamel.yaml, "
                                "or leave comments out")


def _take(g: Grammar, argv: Sequence[str], i: int, name: str, value: Optional[str]) -> int:
    """Check the option at ``argv[i]`` (``name``, its ``=`` value) and its values; return the next position."""
    action = g.options[name]
    if action.nargs == 0:
        if value is not None:
            raise DepthlabError(f"{name} is a switch and takes no value (got {value!r}); write {name} alone, "
                                "or leave it out")
        return i + 1
    if name == "--print_config":  # its value is optional, and only ever given with =
        check_print_config(value or "")
        return i + 1
    if value is not None:
        _check_value(name, action, g.hint(action), value, g.source, config_example(g.options))
        return i + 1
    if action.nargs in ("+", "*", "?"):  # as many values as follow, up to the next option
        j = i + 1
        while j < len(argv) and g.option(argv[j]) is None and (action.nargs != "?" or j == i + 1):
            _check_value(name, action, g.hint(action), argv[j], g.source, config_example(g.options))
            j += 1
        if j == i + 1 and action.nargs == "+":
            raise DepthlabError(f"{name}: expected at least one value after it")
        return j
    nxt = argv[i + 1] if i + 1 < len(argv) else None
    if nxt is None or g.option(nxt) is not None:
        raise DepthlabError(_missing_value(g, name, g.hint(action), nxt))
    _check_value(name, action, g.hint(action), nxt, g.source, config_example(g.options))
    return i + 2


def _check_positionals(command: str, g: Grammar, words: list[tuple[str, Optional[str], Optional[tuple]]],
                       files: bool) -> None:
    """``words``: (argument, the switch it follows or None). Too many is refused, too few unless a
    config file (``files``) may give them."""
    if any(a.nargs is not None for a in g.slots):
        return  # only single-value positional arguments are modelled here
    n = len(g.slots)
    takes = f"{n} argument{'s' if n > 1 else ''} ({', '.join(a.dest for a in g.slots)})" if n else \
        "no positional arguments"
    if len(words) > len(g.slots):
        after_switch = [(w, s) for w, s, _ in words if s is not None]
        if after_switch:
            w, s = after_switch[0]
            raise DepthlabError(f"{s} is a switch and takes no value, so {w!r} was left over; write {s} alone, "
                                "or leave it out")
        w, _, after = words[len(g.slots)]
        raise DepthlabError(f"unexpected argument {w!r}: {command} takes {takes}; {_stray_fix(command, g, w, after)}")
    if len(words) < len(g.slots) and not files:
        a = g.slots[len(words)]
        raise DepthlabError(f"missing {a.dest}: {a.help}")


def check_argv(command: str, parser, argv: Sequence[str], types: dict[str, Any]) -> None:
    """Refuse a command line the parser would refuse, in depthlab's words, before it parses.

    Checked: unknown options (with the closest known one), a switch given a value, an option
    without its value (a negative number such as ``-1e-3`` that argparse reads as an option: write
    ``--opt=-1e-3``), each value against its option's type, ``-c`` files that do not exist, and the
    number of positional arguments. ``--help`` anywhere skips the check (help wins).

    Args:
        command: the command's name, prefixed to every message.
        parser: its parser (only its actions are read). types: ``dest`` -> type hint.

    Raises:
        DepthlabError: ``command: <the first problem, left to right>``.
    """
    g = Grammar(parser, types)
    g.source = _names_source(list(argv))
    if any(a in ("-h", "--help") for a in argv[:argv.index("--") if "--" in argv else len(argv)]):
        return
    words: list[tuple[str, Optional[str], Optional[tuple]]] = []  # (word, the switch / (option, value) it follows)
    files, switch, valued, i = False, None, None, 0
    try:
        while i < len(argv):
            if argv[i] == "--":
                words += [(w, None, None) for w in argv[i + 1:]]
                break
            opt = g.option(argv[i])
            if opt is None:
                words.append((argv[i], switch, valued))
                switch, valued, i = None, None, i + 1
                continue
            name, value = opt
            if name not in g.options:
                raise DepthlabError(f"unknown option {name}{_closest(name, g.options, command)}")
            files = files or g.options[name].dest == "config"
            switch = name if g.options[name].nargs == 0 and value is None else None
            i = _take(g, argv, i, name, value)
            valued = (name, argv[i - 1]) if g.options[name].nargs is None and value is None else None  # then extra
        _check_positionals(command, g, words, files)
    except DepthlabError as e:
        raise DepthlabError(f"{command}: {e}") from None


def _stray_fix(command: str, g: Grammar, word: str, after: Optional[tuple]) -> str:
    """What to do about ``word``, an argument too many: quote it with the text value before it, or the option
    that takes it (a YAML file for ``-c`` or a sweep's ``--file``, a text file for ``--data.path``, a profile name
    for ``--profile``), else delete it. ``after``: (option, value) when it follows a one-value option."""
    from .sweep.spec import PROFILE_NAMES

    p, q = Path(word), json.dumps(word) if any(c.isspace() for c in word) else word
    if after is not None:  # `--prompt hello world`: a value with a space in it, left unquoted
        name, value = after
        hint = g.hint(g.options[name])
        text = hint is str or str in typing.get_args(hint)
        return f"{name} takes one value: " + (f"quote a value with spaces ({name} {json.dumps(f'{value} {word}')}), "
                                              f"or delete {word!r}" if text else f"delete {word!r}")
    if p.suffix in (".yaml", ".yml") and "-c" in g.options:
        return (f"give a sweep file as --file {q} (a run's config file as -c {q})" if "--file" in g.options else
                f"give a config file as -c {q}")
    if word in PROFILE_NAMES and "--profile" in g.options:
        return f"give a built-in sweep as --profile {word}"
    if p.is_file() and "--data.path" in g.options and not g.slots:
        return f"give a text file to train on as --data.path {q}"
    return f"delete {word!r}"


#: An inline ``-c`` mapping a command takes, by the first of these options it has (sample, layers, diagnose, ...
#: take no train section: their keys are their own options).
_C_EXAMPLES = (("--model.n_layer", "{model: {n_layer: 4}}"), ("--train.max_iters", "{train: {max_iters: 100}}"),
               ("--max_new_tokens", "{max_new_tokens: 200}"), ("--max_tokens", "{max_tokens: 10000}"),
               ("--threads", "{threads: 2}"), ("--checkpoint", "{checkpoint: best}"))


def config_example(options: Iterable[str]) -> str:
    """An inline ``-c`` mapping the command whose ``options`` these are takes, e.g. ``{threads: 2}`` for diagnose."""
    options = set(options)
    return next((ex for opt, ex in _C_EXAMPLES if opt in options), _C_EXAMPLES[0][1])


def check_config_file(name: str, value: str, example: str = _C_EXAMPLES[0][1]) -> None:
    """``-c FILE``: the file exists (a YAML mapping given inline, ``-c '{train: {seed: 1}}'``, is taken too);
    ``example``: an inline mapping the command takes (:func:`config_example`), named in the errors.

    Raises:
        DepthlabError: ``-c x.yaml: file not found`` / ``... is a folder``.
    """
    p = Path(value)
    if p.is_dir():
        raise DepthlabError(f"{name} {value}: is a folder; give a YAML file")
    if p.exists():
        return
    import yaml

    try:
        inline = yaml.safe_load(value)
    except yaml.YAMLError:
        inline = None
    example = f"{name} '{example}'"
    if not isinstance(inline, dict) and value.lstrip().startswith(("{", "[")):  # meant inline, not a file name
        what = "does not parse (check its braces, brackets and colons)" if inline is None else \
            f"is a {type(inline).__name__}, not a mapping"
        raise DepthlabError(f"{name} {value}: inline YAML {what}; give a mapping such as {example} "
                            "(or the path of a YAML config file)")
    if not isinstance(inline, dict):
        raise DepthlabError(f"{name} {value}: file not found; give the path of an existing YAML config file (or "
                            f"inline YAML such as {example})")
    twice = key_twice(value)
    if twice:
        raise DepthlabError(f"{name} {value}: key {twice[0]!r} appears twice; keep one")


# ------------------------------------------------------------------------- config files and keys
#: Fields a command cannot take from the command line: what it would do with them instead.
_NOT_USED = {
    "model.vocab_size": "is set from the corpus's tokenizer (for BPE choose data.vocab_size)",
}
#: ``depthlab probe`` builds the model at initialisation: of the train section it uses only the seed.
_PROBE_TRAIN_FIELDS = {"train.seed"}


def hide_train_options(parser, keep: Iterable[str] = _PROBE_TRAIN_FIELDS) -> None:
    """Leave out of ``--help`` the ``train.*`` flags a command refuses (probe uses only ``train.seed``).

    They stay parsed, so :func:`check_keys` can say why one is refused instead of "unknown key".
    """
    from argparse import SUPPRESS

    keep = set(keep)
    for action in parser._actions:
        if action.dest == "train" or (action.dest.startswith("train.") and action.dest not in keep):
            action.help = SUPPRESS


def files_first(argv: list[str]) -> list[str]:
    """Config files (``-c/--config FILE``, presets already turned into them) first, ``--print_config`` last.

    Files are base layers and flags override them whatever their order on the line, so
    ``--train.max_iters 50 --preset fast-cpu`` and ``--preset fast-cpu --train.max_iters 50`` mean
    the same; ``--print_config`` then shows the result of every flag.
    """
    files, rest, last, i = [], [], [], 0
    while i < len(argv):
        a = argv[i]
        if a in ("-c", "--config") and i + 1 < len(argv):
            files += argv[i:i + 2]
            i += 2
            continue
        if joined_config(a) is not None:  # -cFILE: a file too, spelled as the other files are
            files += ["-c", joined_config(a)]
            i += 1
            continue
        (files if a.startswith("--config=") else last if a.split("=")[0] == "--print_config" else rest).append(a)
        i += 1
    return files + rest + last


def _flat_keys(d: Any, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for k, v in (d.items() if isinstance(d, dict) else []):
        key = f"{prefix}{k}"
        out.add(key)
        if isinstance(v, dict) and k in SECTIONS:
            out |= _flat_keys(v, key + ".")
    return out


#: Other tools' names for our fields (nanoGPT/litgpt habits), checked before spelling similarity.
_ALIASES = {"lr": "learning_rate", "n_layers": "n_layer", "n_heads": "n_head", "d_model": "n_embd",
            "context_length": "block_size", "max_steps": "max_iters", "epochs": "max_iters"}


def _nested_in_field(key: str, known: set[str], name=str) -> Optional[str]:
    """``key`` as SECTION.FIELD.MORE (``model.foo.bar``) under a known section, said against that section's fields
    only (its own spelling, not the whole dotted key, is compared: ``model.foo.bar`` is not close to
    ``model.norm``); None for any other key."""
    top, _, rest = key.partition(".")
    head = rest.split(".")[0]
    if "." not in rest or key.rpartition(".")[0] in {k.rpartition(".")[0] for k in known}:
        return None
    fields = sorted(k.partition(".")[2] for k in known if k.partition(".")[0] == top and "." in k)
    if not fields:
        return None
    if head in fields:
        return f"{name(key)} ({name(f'{top}.{head}')} is a field, not a section: give it a value)"
    close = difflib.get_close_matches(head, fields, n=1, cutoff=0.6)
    return f"{name(key)} (did you mean {name(top + '.' + close[0])}?)" if close else \
        f"{name(key)} ({top} has no field {head})"


def _in_other_section(key: str, known: set[str]) -> list[str]:
    """For SECTION.FIELD whose section is unknown: ``[the known key it most likely means]`` or ``[]``. The section and
    the field are compared apart (the whole dotted key once made modle.foo "close" to model.dropout): the closest
    section when the field is close to one of its fields (modle.n_layer), else the one section that has the field
    itself (x.seed: train.seed)."""
    top, _, field = key.partition(".")
    by: dict[str, list[str]] = {}
    for k in known:
        sec, _, name = k.partition(".")
        if name:
            by.setdefault(sec, []).append(name)
    for sec in difflib.get_close_matches(top, sorted(by), n=1, cutoff=0.6) if field else []:
        near = difflib.get_close_matches(field, sorted(by[sec]), n=1, cutoff=0.6)
        if near:
            return [f"{sec}.{near[0]}"]
    homes = [sec for sec in sorted(by) if field and field in by[sec]]
    return [f"{homes[0]}.{field}"] if len(homes) == 1 else []


def _suggest(key: str, known: set[str], name=str, section: bool = False) -> str:
    """``key`` with the closest known key, both written by ``name`` (:func:`flag` for the command line); with
    no close key and a section before it that is none (or ``section``: ``key`` names one), the sections."""
    sec, _, field = key.rpartition(".")
    deep = _nested_in_field(key, known, name)
    if deep:
        return deep
    alias = f"{sec}.{_ALIASES[field]}" if sec and field in _ALIASES else None
    # within its section, the field's name alone is compared (train.bogus_key is not "close" to train.out_dir)
    fields = sorted(k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == sec)
    near = [f"{sec}.{f}" if sec else f  # a top-level key (a section) has no section before it
            for f in difflib.get_close_matches(field, fields, n=1, cutoff=0.6)] if fields else []
    # the field itself in another section (train.n_layer: model.n_layer) before a near spelling in its own (min_lr)
    moved = [k for k in sorted(known) if sec and fields and k.count(".") == 1 and k.endswith(f".{field}")]
    close = [alias] if alias in known else moved[:1] if len(moved) == 1 else \
        near or ([] if fields else _in_other_section(key, known))
    if close:
        return f"{name(key)} (did you mean {name(close[0])}?)"
    top, sections = key.split(".")[0], sorted({k.split(".")[0] for k in known if "." in k})
    if ("." in key or section) and sections and top not in sections:  # a typo in the section, not the field: list them
        return f"{name(key)} (there is no section {top}; the sections are {', '.join(sections)})"
    return name(key)


# ------------------------------------------------------------------------- a key given twice
def yaml_fix(path: str, fix: str) -> str:
    """``fix`` (what to do about a file that is not valid YAML) for file ``path``, opened by what the parse stopped at
    when that is one a new user meets: a tab (YAML indents with spaces, and takes none after a colon), or a second
    document (a ``---`` line). Read from where the error points, not from its words; ``fix`` alone otherwise."""
    import yaml

    if not Path(path).is_file():  # a device is not read here (/dev/zero would never end): its reader says so
        return fix
    try:
        text = Path(path).read_text(encoding="utf-8")
        yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        if mark is None:
            return fix
        lines = text.splitlines()
        line = lines[mark.line] if mark.line < len(lines) else ""
        if line[mark.column:mark.column + 1] == "\t":
            return f"replace the tab on line {mark.line + 1} with spaces (YAML indents with spaces, and a tab after " \
                   f"a colon is refused too); {fix}"
        if mark.line > 0 and line.startswith(("---", "...")):
            return f"a config file is one YAML document: delete the `{line[:3]}` line on line {mark.line + 1} and " \
                   f"keep every section in the one document; {fix}"
    except (OSError, UnicodeDecodeError, ValueError):  # said by its reader
        pass
    return fix


def _inline_config(value: str) -> Optional[dict]:
    """The mapping a ``-c`` value gives inline (``-c '{model: {n_layer: 3}}'``): the value parsed as YAML when no file
    is there and it is a mapping, else None (a file, or no mapping: :func:`check_config_file` says so)."""
    import yaml

    if Path(value).exists():
        return None
    try:
        d = yaml.safe_load(value)
    except yaml.YAMLError:
        return None
    return d if isinstance(d, dict) else None


def config_label(value: str) -> str:
    """A ``-c`` value as the messages about its keys name it: a file's path, or ``-c VALUE`` for inline YAML."""
    return f"-c {value}" if _inline_config(value) is not None else value


def _read_config(path: str, options: Iterable[str] = ("--model.n_layer",)) -> Optional[dict]:
    """The mapping in config file ``path``, or given inline (``-c '{train: {seed: 1}}'``: checked as a file's keys
    and values are, by :func:`check_keys`, not left to the parser's own words); None when it cannot be read
    (:func:`check_config_file` says so). ``options``: the command's, whose file layout the errors describe
    (sections for train, probe, sweep, ...; the command's own keys for sample, layers, diagnose, ...).

    Raises:
        DepthlabError: the file is empty, not a mapping, or a section that is not a mapping; a key given twice.
    """
    from .config import read_yaml

    inline = _inline_config(path)
    if inline is not None:
        for k, v in inline.items():
            if k in SECTIONS and not isinstance(v, dict):
                raise DepthlabError(f"-c {path}: section {k}: must hold fields ({{{k}: {{FIELD: VALUE}}}}), got "
                                    f"{'nothing' if v is None else repr(v)}")
        return inline
    options = set(options)
    sections = "--model.n_layer" in options or "--train.max_iters" in options
    pair = config_example(options).strip("{}")  # the command's own key and a value, e.g. max_new_tokens: 200
    layout = ("keys and values as `section:` then indented `field: value` lines (e.g. `model:`, then `n_layer: 4` "
              "indented below it)" if sections else
              f"one `option: value` line per option of the command (e.g. `{pair}`)")
    what = "sections data:, model:, train:" if sections else f"the command's options (e.g. {pair.split(':')[0]}:)"
    try:
        d = read_yaml(path, "config file", yaml_fix(path, f"fix the file ({layout})"))
    except OSError as e:
        if not Path(path).is_file():  # not found: check_config_file says so (or it is inline YAML)
            return None
        raise DepthlabError(f"config file {path} cannot be read ({e.strerror or e}); make it readable (chmod u+r "
                            f"{path}) or give another file") from None
    if d is None:
        raise DepthlabError(f"config file {path} is empty; give it {what} (or drop -c)")
    if not isinstance(d, dict):
        raise DepthlabError(f"config file {path} must be a mapping with {what}, got a {type(d).__name__}; write "
                            f"{layout}")
    for k, v in d.items():
        if k in SECTIONS and not isinstance(v, dict):
            raise DepthlabError(f"config file {path}: section {k}: must hold fields (`{k}:` then an indented "
                                f"`field: value` per line), got {'nothing' if v is None else repr(v)}")
    return d


def _file_entries(d: dict) -> list[tuple[str, Any]]:
    """(dotted key, value) of every entry of a config file, sections flattened (``model.n_layer``)."""
    out = []
    for k, v in d.items():
        k = str(k)
        out += [(f"{k}.{kk}", vv) for kk, vv in v.items()] if k in SECTIONS else [(k, v)]
    return out


def _file_key_problems(path: str, d: dict, known: set[str]) -> Optional[str]:
    """The unknown keys of config file ``path`` (mapping ``d``) in one clause that opens with the file, or None:
    ``runs/x/config.json: unknown key(s) train.bogus_key: edit or remove it``."""
    out = []
    for key, value in _file_entries(d):
        if key in known:
            continue
        home = [s for s in SECTIONS if f"{s}.{key}" in known]
        out.append(f"{key} (belongs under {home[0]}:)" if home else
                   _suggest(key, known, section=isinstance(value, dict)))
    if not out:
        return None
    return f"{path}: unknown key(s) {', '.join(out)}: edit or remove {'it' if len(out) == 1 else 'them'}"


def _refuse_init_from(command: str, argv: list[str], files: list[tuple[str, Optional[dict]]]) -> None:
    """``--init_from RUN`` (on the line, or a config file's ``init_from: RUN``) given to a command other than train,
    whose parser takes the key only so that train's printed ``init_from: null`` reads (it asks nothing).

    Raises:
        DepthlabError: a flag, or a file's value that is not null.
    """
    for a in argv:
        if a.split("=", 1)[0] in ("--init_from", "--init-from"):
            raise DepthlabError(f"{command}: --init_from is depthlab train's (a new run from a run's weights); "
                                f"{command} does not take it: drop it")
    for path, d in files:
        if isinstance(d, dict) and d.get("init_from") is not None:
            raise DepthlabError(f"{path}: init_from: {d['init_from']}: depthlab train's --init-from (a new run from a "
                                f"run's weights), which {command} does not take: delete the line (or set it null)")


def _command_line_only(path: str, d: dict, known: set[str], inline: Optional[str] = None) -> Optional[str]:
    """Why config file ``path`` (mapping ``d``) may not hold a command-line option it names with a value that asks
    for something (``debug: true``, ``preset: NAME``, ``resume: RUN``, ``overwrite: true``, ``config: FILE``,
    ``print_config``), or None.
    The parser took them, and nothing read them: a file's ``preset:`` trained the defaults, its ``resume:`` a new
    run, its ``debug: true`` showed no traceback, its ``config:`` read another file unchecked. The values a config
    printed by an older ``--print_config`` holds (``debug: false``, ``preset: null``, ``resume: null``) ask nothing
    and pass. ``inline``: the ``-c`` value of a mapping given inline (``path`` is then ``-c VALUE``): a key of it, not
    a line, is deleted."""
    line = "the key" if inline is not None else "the line"
    for key, value in d.items():
        if value is None or value is False or key not in known and key != "print_config":
            continue
        value = str(value).lower() if isinstance(value, bool) else value  # as YAML writes it
        if key == "debug":
            return (f"{path}: debug: {value}: --debug is a command-line switch, which a config file does not set; "
                    f"delete {line} and give --debug on the command line")
        if key == "preset":
            return (f"{path}: preset: {value}: a preset is chosen on the command line, not in a config file (which "
                    f"would train without it); delete {line} and give --preset {value} (or -c the preset's own "
                    "file first)")
        if key == "resume":
            run = "RUN_DIR" if value in ("true", "false") or not isinstance(value, str) else value  # not a folder
            return (f"{path}: resume: {value}: --resume is given on the command line (depthlab train --resume "
                    f"{run}), not in a config file (which would start a new run); delete {line}, or write "
                    f"resume: true and out_dir: {run} under train:")
        if key == "overwrite":
            return (f"{path}: overwrite: {value}: --overwrite deletes what the folder holds, so it is given on the "
                    f"command line each time, not kept in a config file (reused, it would delete the run every time); "
                    f"delete {line} and give --overwrite on the command line")
        if key == "config":
            return (f"{path}: config: {value}: a config file does not name another (its keys would go unchecked); "
                    + (f"delete the line and give each file with -c, in order: -c {value} -c {path}" if inline is None
                       else f"delete the key and give -c {value} before this -c"))
        if key == "print_config":
            return f"{path}: print_config: --print_config is a command-line flag; delete {line} and give it there"
    return None


def _takes_null(hint: Any) -> bool:
    """Whether a field of type ``hint`` takes null (None: ``Optional[...]``)."""
    return typing.get_origin(hint) is Union and type(None) in typing.get_args(hint)


def _default(key: str, defaults: Optional[dict] = None) -> Any:
    """The default value of config field ``key`` (``model.position`` -> ``rope``; ``model.bias`` -> ``false``), or of
    a command's own option from its parser's ``defaults`` (sample's ``max_new_tokens`` -> 500; it raised
    StopIteration: a ``-c`` file's ``max_new_tokens:`` with no value was an "unexpected" error)."""
    import dataclasses

    from .config import SECTIONS as CLASSES

    sec, _, name = key.partition(".")
    value = next((f.default for s, klass in CLASSES if s == sec for f in dataclasses.fields(klass) if f.name == name),
                 (defaults or {}).get(key))
    if value == "":
        return '""'
    return str(value).lower() if isinstance(value, bool) else value  # as YAML writes it: false, not False


def _check_file_values(path: str, d: dict, types: dict[str, Any], source: bool,
                       defaults: Optional[dict] = None, line: str = "the line") -> None:
    for key, value in _file_entries(d):
        hint = types.get(key)
        if hint is not None and checkable(hint):
            if value is None and not _takes_null(hint):  # `position:` or `position: null`: no value at all
                fix = "put back the value the run was trained with" if Path(path).name == "config.json" else \
                    f"give one, or delete {line} for the default ({_default(key, defaults)})"  # (a run's: as it ran)
                raise DepthlabError(f"{path}: {key}: expected {_expected(key, hint, source)}, got null (no value); "
                                    f"{fix}")
            try:
                convert_value(value, hint)
            except BadValue:
                raise DepthlabError(f"{path}: {key}: expected {_expected(key, hint, source)}, got {value!r}") from None


def check_section_file(path: str, section: str, d: dict) -> None:
    """The fields of a ``--model FILE`` (``--data``, ``--train``), mapping ``d``, checked as a config file's are,
    naming the file: they become ``--model.FIELD=VALUE`` flags the user never typed, which the checks of the
    command line would name instead.

    Raises:
        DepthlabError: an unknown key, or a value its field's type does not take.
    """
    types = field_types()
    problem = _file_key_problems(path, {section: d}, set(types) | set(SECTIONS))
    if problem:
        raise DepthlabError(problem)
    _check_file_values(path, {section: d}, types, source=section == "model" and bool(d.get("source")))


def _names_source(argv: list[str]) -> bool:
    """Whether the command line or one of its config files gives ``model.source``."""
    if flag_value(argv, "--model.source"):
        return True
    for path in config_files(argv):
        try:
            d = _read_config(path)
        except DepthlabError:  # said by check_keys
            continue
        if d and isinstance(d.get("model"), dict) and d["model"].get("source"):
            return True
    return False


#: Options that name a file or folder: an empty value would silently mean "." or the default.
_PATH_OPTIONS = ("--train.out_dir", "--data.path", "--data.cache_dir", "--resume", "--init-from", "--init_from",
                 "--out", "--out_dir", "--out-dir", "--file", "-f", "-c", "--config")


def check_no_empty_paths(command: str, argv: list[str]) -> None:
    """Refuse an empty path (``--train.out_dir ''``, ``--out=``, ``sample ''``): the shell's empty
    variable would otherwise train into a default folder or read ``.``.

    Raises:
        DepthlabError: naming the option (or the position) and what to do.
    """
    for _, name, value in occurrences(argv, _PATH_OPTIONS):
        if value == "":
            # no config file, run to resume or model to start from has a default
            default = "" if name in ("-c", "--config", "--resume", "--init-from", "--init_from") else " for the default"
            raise DepthlabError(f"{command}: {name}: the path is empty; give a path, or drop {name}{default}")
    for i, a in enumerate(argv):
        prev = argv[i - 1] if i else ""
        if a == "" and not (prev.startswith("-") and "=" not in prev):
            what = _EMPTY_POSITIONAL.get(command, "a run directory or path")
            raise DepthlabError(f"{command}: argument {i + 1} is empty; give {what} (an unset shell variable?)")


#: What a command's positional arguments are, in words (for an empty one); others take a run directory or path.
_EMPTY_POSITIONAL = {"check": "the model's file and name, PATH.py:NAME",
                     "export": "the run directory, then the folder to write (RUN_DIR OUT_DIR)"}


def joined_config(a: str) -> Optional[str]:
    """The file of ``-cFILE`` / ``-c=FILE`` (one word, as argparse reads a short option's value), else None."""
    if a.startswith("-c") and len(a) > 2:
        return a[3:] if a[2] == "=" else a[2:]
    return None


def config_files(argv: list[str]) -> list[str]:
    """The paths of the ``-c/--config`` files ``argv`` names, in order (``-cFILE`` too: its file was read by the
    parser alone, unchecked)."""
    out = []
    for i, a in enumerate(argv):
        if a in ("-c", "--config") and i + 1 < len(argv) or a.startswith("--config="):
            out.append(a.split("=", 1)[1] if "=" in a else argv[i + 1])
        elif joined_config(a) is not None:
            out.append(joined_config(a))
    return out


def _check_takes_no_config_field(key: str, known: set[str], argv: list[str]) -> None:
    """``depthlab check`` given a train field (``--model.n_layer 3``): say what check takes instead.

    Raises:
        DepthlabError: ``key`` is a ``model.`` or ``train.`` field that check has no flag for.
    """
    sec, _, name = key.partition(".")
    if key in known or sec not in ("model", "train"):
        return
    if sec == "model":
        value = flag_value(argv, flag(key))
        example = json.dumps({name: _json_value(value)}) if value is not None else f'{{"{name}": ...}}'
        length = " (and --block_size N, the length checked)" if name == "block_size" else ""
        raise DepthlabError(f"check: {flag(key)}: check takes no --model.* fields (they configure depthlab's GPT "
                            "in depthlab train); it builds your model from PATH.py:NAME, so give it its arguments "
                            f"with --init '{example}'{length}")
    own = {"batch_size": "--batch_size", "block_size": "--block_size", "seed": "--seed", "threads": "--threads"}
    raise DepthlabError(f"check: {flag(key)}: check takes no --train.* options (it trains no run)"
                        + (f"; check's own is {own[name]}" if name in own else
                           "; its options: --batch_size, --block_size, --seed, --init (see depthlab check --help)"))


def _json_value(text: str) -> Any:
    """``text`` as the JSON value it spells (3, 0.1, true), else the string itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


#: What a positional argument is, in words, by its name.
_POSITIONAL_WORDS = {"run_dir": "run folder", "out_dir": "output folder", "source": "model (PATH.py:NAME)"}


def _refuse_positional_as_flag(command: str, parser, name: str) -> None:
    """Refuse ``--out_dir X`` where OUT_DIR is a positional argument (it was once answered "did you mean
    --out_dir?", itself), saying where on the line it goes.

    Raises:
        DepthlabError: ``name`` spells a positional argument of ``command``.
    """
    positional = [act.dest for act in parser._actions if not act.option_strings]
    dest = field_of(name).replace("-", "_")
    if dest not in positional:
        return
    nth = ["first", "second", "third", "fourth"][positional.index(dest)]
    raise DepthlabError(f"{command} takes the {_POSITIONAL_WORDS.get(dest, dest.upper())} as its {nth} argument, "
                        f"not as {name}: depthlab {command} {' '.join(d.upper() for d in positional)}")


def check_keys(command: str, parser, argv: list[str], types: dict[str, Any]) -> None:
    """Refuse unknown keys (all of them at once, each with a suggestion), fields the command ignores,
    and values of config files that their field's type does not take.

    Checks dotted flags on the line and the keys and values of every config file given with ``-c/--config``.

    Raises:
        DepthlabError: one line listing every unknown key, e.g. ``--model.n_layers (did you mean
            --model.n_layer?)``, ``--foo.bar (there is no section foo; the sections are data, model, train)``
            (the command line's end with where to find the keys: ``depthlab COMMAND --help``), or
            ``c.yaml: unknown key(s) n_layer (belongs under model:): edit or remove it``;
            or the first bad file value.
    """
    defaults = parser.get_defaults().as_dict()
    known = _flat_keys(defaults)
    flags = [field_of(a) for a in argv if a.startswith("--") and "." in a.split("=", 1)[0]]
    if command == "check":
        for k in flags:
            _check_takes_no_config_field(k, known, argv)
    problems = [_suggest(k, known, flag) for k in flags if k not in known]  # the command line's
    options = {o for act in parser._actions for o in act.option_strings}
    bare: list[str] = []  # unknown options that are no config field's name
    for a in argv:  # a config field without its section: --n_layer 3 means --model.n_layer 3
        name = a.split("=", 1)[0]
        if name.startswith("--") and "." not in name and name not in options:
            _refuse_positional_as_flag(command, parser, name)
            homes = sorted(k for k in known if k.split(".")[-1] == field_of(name).replace("-", "_"))
            if homes:
                problems.append(f"{name} (did you mean {' or '.join(map(flag, homes))}?)")
            else:
                close = _closest(name, options, command)
                bare.append(name + (close if close.startswith(" (") else ""))
    if problems:  # listed with the others (alone, check_argv says "unknown option" with its suggestion)
        problems += bare
    raw = {config_label(path): path for path in config_files(argv)}  # a label -c VALUE: a mapping given inline
    files = [(label, _read_config(path, options)) for label, path in raw.items()]
    for path, d in files:
        inline = raw[path] if path != raw[path] else None
        said = _command_line_only(path, d, known, inline) if d is not None else None
        if said:
            raise DepthlabError(said)
    if command != "train":
        _refuse_init_from(command, argv, files)
    in_files = [p for p in (_file_key_problems(path, d, known) for path, d in files if d is not None) if p]
    if problems or in_files:
        raise DepthlabError("; ".join(([f"{command}: unknown key(s) {', '.join(problems)}; see `depthlab {command} "
                                        "--help` for the keys"] if problems else [])
                                      + in_files))
    ignored = [f"{flag(k)} {_NOT_USED[k]}" for k in flags if k in _NOT_USED]
    if command == "probe":
        ignored += [f"{flag(k)} has no effect (probe measures the model at initialisation; of train.* it uses "
                    "only train.seed)" for k in flags if k.startswith("train.") and k not in _PROBE_TRAIN_FIELDS]
    if ignored:
        raise DepthlabError(f"{command}: {'; '.join(ignored)}; drop it")
    source = _names_source(argv) if any(d is not None for _, d in files) else False  # read once, not per file
    for path, d in files:
        if d is not None:
            _check_file_values(path, d, types, source, defaults, "the key" if path != raw[path] else "the line")
