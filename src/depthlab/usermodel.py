"""A model the learner wrote: ``PATH.py:NAME`` loaded, built and checked to speak the protocol.

The protocol (DESIGN.md, "The user's own model"): any ``torch.nn.Module`` whose ``forward(idx)``
takes token ids ``(B, T)`` int64 and returns logits ``(B, T, V)``, or a tuple whose first element is
the logits (nanoGPT's ``(logits, loss)`` with no targets). ``NAME`` is a class, built with the
keyword arguments of ``model.init`` (a JSON object, or none), or a function returning a module (for
models built from a config object, e.g. nanoGPT's ``GPT(GPTConfig(...))``).

The file is the user's code and runs as Python, with its own folder importable first (as
``python PATH.py`` would have it), under the module name ``depthlab_user_<stem>``: an
``if __name__ == "__main__":`` block does not run. It runs only because the user named it.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib.util
import inspect
import json
import os
import signal
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

import torch

from .errors import DepthlabError, note_sigint, sigint_count
from .data import sha256_file
from .model import GPT
from .rundir import CONFIG, ORIGIN, SOURCE, atomic_write, export_origin, read_json
from .units import counted

__all__ = ["Source", "build_model", "check_command", "check_forward", "first_line", "first_tensor", "float32_weights",
           "forward_fault",
           "full_logits", "init_source_model", "keep_source", "load_factory", "logits_of", "make_model",
           "new_source_model", "parse_init", "parse_source", "resume_source", "run_source", "sibling_modules",
           "source_copy", "source_drift", "source_run_model", "takes_targets"]


@dataclass(frozen=True)
class Source:
    """``PATH.py:NAME``: the file and the name of the class or function in it.

    Attributes:
        origin: for a run's copy of the file, the folder the original lay in (its sibling modules
            are imported from there), else None.
    """

    path: Path
    name: str
    origin: Optional[Path] = None

    def __str__(self) -> str:
        return f"{self.path}:{self.name}" if self.name else str(self.path)  # "": a bare PATH.py, its class unknown

    @property
    def sha256(self) -> str:
        """sha256 of the file's bytes (hex)."""
        return sha256_file(self.path)


def parse_source(text: str, option: str = "model.source") -> Source:
    """``PATH.py:NAME`` -> :class:`Source` (the file must exist); a bare ``PATH.py`` -> a Source whose ``name`` is
    ``""``, the file's one ``nn.Module`` class once the file is imported (:func:`load_factory`).

    Raises:
        DepthlabError: neither PATH.py:NAME nor PATH.py, or the file is missing.
    """
    path, sep, name = str(text).rpartition(":")
    if not sep and Path(str(text)).is_dir():  # a folder given alone: said as one, not as a malformed PATH.py:NAME
        path, sep, name = str(text), ":", ""
    elif not sep and str(text).endswith(".py"):
        path, sep, name = str(text), ":", ""  # the name is found when the file is imported
    elif not sep or not path or not name.isidentifier():
        raise DepthlabError(f"{option} {text!r} must be PATH.py:NAME, the file and the class or function "
                            "in it that makes the model (e.g. mymodel.py:GPT)")
    p = Path(path)
    if p.is_dir() and (run := _run_folder_words(p)):
        raise DepthlabError(f"{option} {text}: {path} is {run}")
    if p.is_dir():
        files = sorted(q.name for q in p.glob("*.py"))
        held = f" (it holds {', '.join(files[:6])}{' ...' if len(files) > 6 else ''})" if files else ""
        raise DepthlabError(f"{option} {text}: {path} is a folder{held}; give the .py file in it that defines "
                            f"{name or 'the model'} (e.g. {Path(path) / (files[0] if files else 'model.py')}"
                            f"{':' + name if name else ''})")
    if p.exists() and not p.is_file():  # was: "file f.py not found in DIR ... (DIR holds f.py)" for a fifo
        raise DepthlabError(f"{option} {text}: {path} is not a regular file (a device, pipe or socket); give the "
                            "model's .py file")
    first, _, rest = str(text).partition(":")
    if not p.is_file() and Path(first).is_file():  # m.py:GPT:x was "file m.py:GPT not found"
        raise DepthlabError(f"{option} {text!r}: the NAME after {first}: must be one class or function name, got "
                            f"{rest!r} (e.g. {first}:{rest.split(':')[0] or 'GPT'})")
    if not p.is_file():
        # the fix: where a relative path was looked for, and the .py files there, since a typo is the usual cause
        near = sorted(q.name for q in p.parent.glob("*.py")) if p.parent.is_dir() else []
        there = f" ({p.parent.resolve()} holds {', '.join(near[:6])}{' ...' if len(near) > 6 else ''})" if near else ""
        raise DepthlabError(f"{option} {text}: file {path} not found in {p.parent.resolve()}; give the path of the "
                            f"model's .py file, relative to this folder or absolute{there}")
    return Source(p, name)


def _run_folder_words(folder: Path) -> Optional[str]:
    """What a run folder (or a depthlab export) given as the model is, and what to give instead: for a
    ``--model.source`` run its copy of the model file, ``RUN/source/FILE.py:NAME``, with the ``--init`` it was built
    with (from its config.json); None for any other folder."""
    if export_origin(folder) is not None:
        return ("a Hugging Face export written by depthlab export, not a model file; give a model file you wrote, "
                "PATH.py:NAME")
    cfg = read_json(folder / CONFIG)
    model = cfg.get("model") if isinstance(cfg, dict) else None
    if not isinstance(model, dict):
        return None
    spec = model.get("source")
    if not isinstance(spec, str) or not spec:
        return "a run of depthlab's own GPT (it has no model file of yours); give a model file you wrote, PATH.py:NAME"
    file, _, name = spec.rpartition(":") if not spec.endswith(".py") else (spec, "", "")
    copy = folder / SOURCE / Path(file).name
    if not copy.is_file():
        return None
    init = model.get("init")
    given = f" --init {shlex.quote(json.dumps(init))}" if isinstance(init, dict) and init else ""
    return (f"a run folder; give the model file it trained with, e.g. its copy "
            f"{shlex.quote(str(copy) + (':' + name if name else ''))}{given}")


def parse_init(init: Union[None, str, dict], option: str = "model.init") -> dict:
    """Keyword arguments for the model: a dict, a JSON object text, or None (no arguments).

    Raises:
        DepthlabError: not a JSON object.
    """
    if init is None:
        return {}
    if isinstance(init, dict):
        return dict(init)
    try:
        value = json.loads(init)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise DepthlabError(f"{option} must be a JSON object of keyword arguments, e.g. '{{\"n_layer\": 2}}'; "
                            f"got {init!r}")
    return value


def first_line(e: BaseException) -> str:
    """``Type: first line`` of an exception raised by the user's code (shown, never parsed)."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


def user_line(e: BaseException, path: Path) -> Optional[str]:
    """``file.py:LINE: code`` of the deepest frame of ``e``'s traceback in the user's file ``path``, or None."""
    import traceback

    target = Path(path).resolve()
    for fr in reversed(traceback.extract_tb(e.__traceback__)):
        if fr.filename and not fr.filename.startswith("<") and Path(fr.filename).resolve() == target:
            return f"{Path(fr.filename).name}:{fr.lineno}: {(fr.line or '').strip()}"
    return None


def _with_line(e: BaseException, path: Path) -> str:
    """:func:`first_line` of the user's exception, with the line of their file it came from when known."""
    at = user_line(e, path)
    return f"{first_line(e)} (at {at})" if at else first_line(e)


def _import_fix(e: BaseException, path: Path) -> str:
    """What to do about ``e``, raised while the user's file ``path`` was imported (said after :func:`_with_line`)."""
    if isinstance(e, SyntaxError) and e.lineno:
        other = e.filename and Path(e.filename).resolve() != Path(path).resolve()
        return f"fix line {e.lineno} of {e.filename if other else path}" + (f" (imported by {path})" if other else "")
    if isinstance(e, ModuleNotFoundError) and e.name:
        return f"install the module {e.name} in the Python that runs depthlab ({sys.executable}), or drop the import"
    if isinstance(e, PermissionError) and e.filename and Path(e.filename).resolve() == Path(path).resolve():
        return "the file itself cannot be read: give the user running depthlab read permission (chmod u+r)"
    at = user_line(e, path)  # file.py:LINE: code
    return f"fix {at.split(': ', 1)[0]}, or what it calls" if at else "fix the code it runs when imported"


class _InputAtImport(Exception):
    """``input()`` called while the user's file was imported (its message: the call, with its prompt)."""


class _OsExit(SystemExit):
    """``os._exit(code)`` called while the user's file was imported."""


def _exit_at_import(code: int = 0) -> None:
    raise _OsExit(code)


def _input_at_import(prompt: object = "") -> str:
    raise _InputAtImport(f"input({str(prompt)!r})")


def _factory(src: Source) -> tuple[str, Callable[..., Any]]:
    """Import the file (a ``SystemExit``, ``input()`` or error at import is one line) and take ``src.name`` from it
    (a bare PATH.py: :func:`_model_class`); returns the name and the class or function."""
    for folder in [str(p) for p in (src.origin, src.path.resolve().parent) if p is not None]:
        if folder not in sys.path:
            sys.path.insert(0, folder)  # the file's own imports (helpers beside it) work as under `python PATH.py`
    mod_name = f"depthlab_user_{src.path.stem}"
    spec = importlib.util.spec_from_file_location(mod_name, src.path)
    if spec is None or spec.loader is None:
        raise DepthlabError(f"{src}: {src.path} cannot be loaded as Python; give a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    argv = list(sys.argv)
    guard = "put that code under `if __name__ == \"__main__\":` so that importing the file only defines the model"
    saved = os._exit, builtins.input
    # a Ctrl-C while the file imports, told apart from a KeyboardInterrupt the file raises; noted where the command
    # line reads it too (errors.sigint_seen), so that it says "interrupted" rather than blaming the file
    pressed = sigint_count()
    sigint = note_sigint()
    try:
        # a script's argparse at import sees the file run bare (its defaults), not depthlab's own arguments,
        # and its messages name the file, not depthlab
        sys.argv[:] = [str(src.path)]
        # os._exit would end depthlab with no word, input() would wait on (or fail to read) the terminal: while
        # the file is imported they raise instead, so that the one line below can say what the file did
        os._exit, builtins.input = _exit_at_import, _input_at_import
        spec.loader.exec_module(module)
    except _InputAtImport as e:
        raise DepthlabError(f"{src}: importing {src.path} asks for input ({e}): the file runs a script when "
                            f"imported; {guard}") from None
    except Exception as e:  # noqa: BLE001 - the user's file: any error is theirs to fix, in one line
        raise DepthlabError(f"{src}: importing {src.path} failed: {_with_line(e, src.path)}; "
                            f"{_import_fix(e, src.path)}") from None
    except KeyboardInterrupt:
        if sigint_count() > pressed or sigint is None:
            raise  # the user's own Ctrl-C (or no way to tell): depthlab stops as interrupted
        raise DepthlabError(f"{src}: importing {src.path} raised KeyboardInterrupt itself (no Ctrl-C was pressed): "
                            f"the file runs code when imported; {guard}") from None
    except SystemExit as e:  # a script's argparse or sys.exit at module level: depthlab only imports the file
        how = f"os._exit({e.code!r})" if isinstance(e, _OsExit) else f"SystemExit({e.code!r})"
        raise DepthlabError(f"{src}: importing {src.path} exited ({how}, any lines just above are "
                            "its own): the file runs a script when imported (argparse, sys.exit, os._exit, a "
                            f"training loop); {guard}") from None
    finally:
        os._exit, builtins.input = saved
        sys.argv[:] = argv
        if sigint is not None:
            signal.signal(signal.SIGINT, sigint)
    name = src.name or _model_class(module, mod_name, src)
    made = getattr(module, name, None)
    if made is None:
        names = sorted(n for n, v in vars(module).items() if not n.startswith("_") and callable(v)
                       and getattr(v, "__module__", None) == mod_name)
        raise DepthlabError(f"{src}: {src.path} defines no {src.name!r}"
                            + (f" (it defines {', '.join(names)})" if names else " (nor any class or function)")
                            + "; give PATH.py:NAME with NAME the model's class (an nn.Module subclass) or a function "
                              "that returns the model")
    if not callable(made):
        raise DepthlabError(f"{src}: {src.name} is not a class or a function (its type is {type(made).__name__}); "
                            "name the model's class or a function that returns the model")
    return name, made


def _model_class(module, mod_name: str, src: Source) -> str:
    """The name of the model class of a bare ``PATH.py``: the one ``nn.Module`` class the file defines (imported ones
    do not count), or of several the only one that can be the model (:func:`_model_candidates`: GPT beside its parts
    Block and Head, or beside a base class without a forward).

    Raises:
        DepthlabError: it defines none, or several of which none or more than one can be the model: one line
            listing them and the model as PATH.py:NAME (each candidate as a choice).
    """
    classes = _module_classes(module)
    if len(classes) == 1:
        return classes[0]
    if not classes:
        funcs = [n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == mod_name]
        it = f" (it defines {', '.join(funcs)})" if funcs else ""
        # a file that only imports the model (from model import GPT) is named by that class, not by a function
        imported = [n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, torch.nn.Module)
                    and not n.startswith("_") and not v.__module__.startswith("torch")]
        if imported:
            it += f" (it imports {', '.join(imported)})"
        also = " or the class it imports" if imported else ""
        raise DepthlabError(f"{src.path} defines no nn.Module class{it}; name the model as {src.path}:NAME, with NAME "
                            f"the function in it that returns the model{also}")
    top = _model_candidates(module, classes, src.path)
    if len(top) == 1 and getattr(module, top[0]).forward is not torch.nn.Module.forward:
        return top[0]  # the only class with a forward that no other uses: the model (said by load_factory)
    # two classes no other uses (a model beside an unrelated one) cannot be told apart: offer both, not a guess
    choice = " or ".join(f"{src.path}:{n}" for n in top)
    raise DepthlabError(f"{src.path.name} defines {', '.join(classes)}: name the model as {choice}")


def _model_candidates(module, classes: list[str], path: Path) -> list[str]:
    """Of a file's nn.Module ``classes``, those that can be the model: not a part another class's body uses (Block
    in GPT's ``__init__``) and with a forward of their own or inherited (not nn.Module's); all of them when that
    leaves none.

    A base class is not a part: ``class GPT(Base)`` names Base among its bases, and a base's name in its subclass's
    body (``Base.__init__(self)``) is the subclass extending it, not using it as a part; Base is still offered
    beside GPT (both are models) unless it has no forward of its own (a base holding shared code).
    """
    used: set[str] = set()
    for c in ast.walk(ast.parse(path.read_bytes())):
        if not isinstance(c, ast.ClassDef):
            continue
        bases = {b.id for b in c.bases if isinstance(b, ast.Name)}
        body = c.body + c.decorator_list
        used |= {x.id for n in body for x in ast.walk(n) if isinstance(x, ast.Name)} - bases - {c.name}
    unused = [n for n in classes if n not in used] or classes
    runs = [n for n in unused if getattr(module, n).forward is not torch.nn.Module.forward]
    return runs or unused


def load_factory(src: Source, log: Optional[Callable[[str], None]] = None) -> tuple[Source, Callable[..., Any]]:
    """Import the file (once) and take the class or function that makes the model.

    Args:
        src: the file and name; a bare ``PATH.py`` (``name`` ``""``) takes the one ``nn.Module`` class the file
            defines, said in one ``log`` line. log: console lines (None = none).

    Returns:
        The Source naming the class or function (``PATH.py:NAME``), and it.

    Raises:
        DepthlabError: as :func:`build_model`; for a bare PATH.py, it defines no nn.Module class or several.
    """
    name, made = _factory(src)
    if not src.name:
        src = Source(src.path, name, src.origin)
        if log is not None:
            log(_picked_line(src, made))
    return src, made


def _picked_line(src: Source, made: Callable[..., Any]) -> str:
    """The console line naming the class a bare ``PATH.py`` was taken as: its one nn.Module class, or the one of
    several that can be the model (the others its parts, or bases without a forward)."""
    module = sys.modules.get(getattr(made, "__module__", ""))
    classes = _module_classes(module) if module is not None else [src.name]
    if len(classes) <= 1:
        return f"{src.path.name} defines one nn.Module class, {src.name}: it is the model ({src})"
    return (f"{src.path.name} defines {', '.join(classes)}; {src.name} is the only one with a forward that no other "
            f"uses as a part: it is the model ({src})")


def _module_classes(module) -> list[str]:
    """The nn.Module classes a file defines itself (imported ones do not count), in the file's order."""
    return [n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, torch.nn.Module)
            and v.__module__ == module.__name__ and v.__name__ == n]


def build_model(src: Source, init: Optional[dict] = None, vocab_size: Optional[int] = None,
                made: Optional[Callable[..., Any]] = None) -> torch.nn.Module:
    """Run the file and build the model: ``NAME(**init)``.

    Args:
        src: the file and name. init: keyword arguments (None = none).
        vocab_size: the corpus vocabulary size; passed as ``vocab_size`` when ``NAME`` takes a
            parameter of that name and ``init`` does not set it.
        made: ``NAME`` itself, from :func:`load_factory` (the file is then not imported again); None = import it.

    Raises:
        DepthlabError: the file does not import, the name is missing, the call fails (or calls sys.exit) or does
            not return an ``nn.Module``; one line naming the file, the name and the problem.
    """
    if made is None:
        src, made = load_factory(src)
    kw = dict(init or {})
    if vocab_size is not None and "vocab_size" not in kw:
        try:
            takes = "vocab_size" in inspect.signature(made).parameters
        except (TypeError, ValueError):
            takes = False
        if takes:
            kw["vocab_size"] = vocab_size
    try:
        model = made(**kw)
    except Exception as e:  # noqa: BLE001 - the user's constructor
        args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
        hint = _init_hint(made, kw, src.path)
        if not hint and _fits(made, kw):  # its own code raised, on the values given or by itself
            given = list(init or {})
            hint = (f"; the arguments fit its signature, so its own code raised this: check the value"
                    f"{'s' if len(given) > 1 else ''} given in model.init ({', '.join(given)}; depthlab check: --init) "
                    "against what that line needs" if given else
                    "; the arguments fit its signature, so its own code raised this: fix that line")
        raise DepthlabError(f"{src}: {src.name}({args}) failed: {_with_line(e, src.path)}{hint}") from None
    except SystemExit as e:  # sys.exit("bad sizes") in a constructor would end depthlab with its status, unexplained
        args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
        raise DepthlabError(f"{src}: {src.name}({args}) exited (SystemExit({e.code!r}), any lines just above are its "
                            "own): raise an exception (e.g. ValueError) instead of calling sys.exit, so that the "
                            "caller can say what was wrong") from None
    if not isinstance(model, torch.nn.Module):
        raise DepthlabError(f"{src}: {src.name}(...) returned an object of type {type(model).__name__}, not a "
                            "torch.nn.Module; "
                            "give a class or a function that returns the model")
    if type(model).forward is torch.nn.Module.forward:
        raise DepthlabError(f"{src}: {src.name}(...) has no forward method; define forward(self, idx) returning the "
                            "logits (B, T, V)")
    hidden = unregistered_modules(model)
    if hidden:
        where, kind, n = hidden[0]
        box = {"list": "nn.ModuleList([...])", "tuple": "nn.ModuleList([...])", "dict": "nn.ModuleDict({...})"}[kind]
        raise DepthlabError(f"{src}: {where} is a Python {kind} of {counted(n, 'module')}: PyTorch registers no module "
                            f"kept in a plain {kind}, so their weights never train, are not saved in a checkpoint "
                            f"(every reload draws new random ones) and move to no device; make it {box}")
    if next(model.parameters(), None) is None:
        raise DepthlabError(f"{src}: {src.name}(...) has no parameters, so training has nothing to change: make its "
                            "weights nn.Parameter or submodules (nn.Embedding, nn.Linear) assigned as attributes in "
                            "__init__, not plain tensors")
    return model


def unregistered_modules(model: torch.nn.Module) -> list[tuple[str, str, int]]:
    """``(attribute path, "list" | "tuple" | "dict", modules in it)`` for every attribute of ``model`` or its submodules
    that keeps ``nn.Module`` objects in a plain Python container (``self.blocks = [Block() ...]``): their parameters
    are not the model's (``parameters()``, ``state_dict()`` and ``.to()`` skip them)."""
    found, registered = [], {id(p) for p in model.parameters()}
    for prefix, m in model.named_modules():
        for name, v in vars(m).items():
            if name.startswith("_") or not isinstance(v, (list, tuple, dict)):
                continue
            items = list(v.values()) if isinstance(v, dict) else list(v)
            # a module also registered elsewhere (a list of references), or one without weights, loses nothing
            n = sum(isinstance(x, torch.nn.Module) and any(id(p) not in registered for p in x.parameters())
                    for x in items)
            if n:
                where = f"{type(model).__name__}.{prefix + '.' if prefix else ''}{name}"
                found.append((where, "dict" if isinstance(v, dict) else "tuple" if isinstance(v, tuple) else "list", n))
    return found


def _fits(made: Callable[..., Any], kw: dict) -> bool:
    """Whether keyword arguments ``kw`` bind to ``made``'s signature (False where it cannot be read: a builtin)."""
    try:
        inspect.signature(made).bind(**kw)
        return True
    except (TypeError, ValueError):
        return False


def _init_hint(made: Callable[..., Any], kw: dict, path: Any = "PATH.py") -> str:
    """The fix for keyword arguments that do not fit ``made``'s signature, as a suffix ("" when they fit or
    the signature cannot be read): the arguments go in model.init (``depthlab check``: --init) as a JSON object."""
    try:
        sig = inspect.signature(made)
        sig.bind(**kw)
    except TypeError:  # the error the call raised came from the arguments themselves, not from the body
        named = [n for n, p in sig.parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if not named:  # "give ... '{"n_layer": ...}'" was said of a class that takes no argument at all
            return "; it takes no keyword arguments: drop --model.init (depthlab check: --init)"
        # the example names a required argument not given, else one that depthlab does not fill in itself
        missing = [n for n in named if sig.parameters[n].default is inspect.Parameter.empty and n not in kw]
        example = (missing or [n for n in named if n != "vocab_size"] or named or ["n_layer"])[0]
        objects = [n for n in missing if _object_argument(sig.parameters[n])]
        if objects:  # JSON gives numbers, strings, lists and dicts: a config object is built by the user's code
            p = sig.parameters[objects[0]]
            kind = _annotation_name(p.annotation) or "a config object"
            return (f"; it takes ({', '.join(named)}), and {objects[0]} is {kind}, which a JSON --model.init cannot "
                    f"build: add a function to the file that builds the model, e.g. def make(): return "
                    f"{getattr(made, '__name__', 'Model')}({_annotation_name(p.annotation) or 'Config'}(...)), and "
                    f"give {path}:make")
        return (f"; it takes ({', '.join(named)}): give its keyword arguments as a JSON object, --model.init "
                f"'{{\"{example}\": ...}}' (depthlab check: --init)")
    except ValueError:
        return ""
    return ""


_JSON_TYPES = {"int", "float", "str", "bool", "list", "dict", "tuple", "Optional", "Union", "Any", "None"}
_CONFIG_NAMES = ("cfg", "config", "conf", "args", "hparams", "params")


def _annotation_name(annotation: Any) -> Optional[str]:
    """The class name an annotation names (``Config`` for ``Config`` or the string ``"Config"``), else None."""
    if annotation is inspect.Parameter.empty:
        return None
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", None)
    return name if isinstance(name, str) and name.isidentifier() else None


def _object_argument(p: inspect.Parameter) -> bool:
    """Whether a constructor argument takes an object JSON cannot give: annotated with a class of the user's (a
    dataclass config), or not annotated and named like one (``cfg``, ``config``)."""
    name = _annotation_name(p.annotation)
    if name is not None:
        return name not in _JSON_TYPES and not name.startswith(("list", "dict", "tuple"))
    return p.annotation is inspect.Parameter.empty and p.name.lower() in _CONFIG_NAMES


def first_tensor(out: Any, who: str, needs: str) -> torch.Tensor:
    """The tensor a module returned: ``out`` itself, or the first element of the tuple/list it is.

    The one unwrapping of a forward's output (nanoGPT's ``(logits, loss)``, a block's ``(x, cache)``):
    the model's logits (:func:`logits_of`) and a block's residual stream (coordcheck, layers).

    Args:
        out: what the module returned: a tensor, or a non-empty tuple/list whose first element is one.
        who: the error's subject, e.g. ``"coordcheck: a block"``.
        needs: the error's rest, what the module must return, e.g. ``"it must return the residual
            stream (B, T, C), or a tuple starting with it"``.

    Returns:
        The tensor, its shape as the module gave it (logits (B, T, V), a block's stream (B, T, C)).

    Raises:
        DepthlabError: neither a tensor nor a sequence starting with one: ``"{who} returned <type>; {needs}"``.
    """
    if isinstance(out, (tuple, list)) and out:
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise DepthlabError(f"{who} returned {type(out).__name__}; {needs}")
    return out


def logits_of(out: Any) -> torch.Tensor:
    """The logits (B, T, V) of a forward's output: the tensor itself, or the first element of a tuple/list that
    is a tensor of two or more dimensions (``(logits, loss)`` as nanoGPT, or ``(loss, logits)``: a loss is 0-d),
    else its first element.

    Raises:
        DepthlabError: neither (:func:`first_tensor`).
    """
    if isinstance(out, (tuple, list)):
        out = next((o for o in out if isinstance(o, torch.Tensor) and o.dim() >= 2), out)
    return first_tensor(out, "the model's forward(idx)",
                        "it must return the logits (B, T, V), or a tuple holding them (nanoGPT's (logits, loss))")


def source_copy(run_dir: Path, source: Union[str, Source]) -> Path:
    """Where a run directory keeps its copy of the model's file (``PATH.py:NAME`` or a Source):
    ``run_dir/source/<file name>``."""
    path = source.path if isinstance(source, Source) else Path(str(source).rpartition(":")[0])
    return Path(run_dir) / SOURCE / path.name


def sibling_modules(path: Path) -> list[Path]:
    """The ``.py`` files beside ``path`` that it imports (``import layers`` / ``from layers import Block``),
    directly or through each other, sorted; packages (folders) and files that do not parse are not followed."""
    folder, found, todo = path.resolve().parent, set(), [path]
    while todo:
        try:
            tree = ast.parse(todo.pop().read_bytes())
        except (SyntaxError, ValueError, OSError):
            continue
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for n in names:
                f = folder / f"{n.split('.')[0]}.py"
                if f.is_file() and f.resolve() != path.resolve() and f not in found:
                    found.add(f)
                    todo.append(f)
    return sorted(found)


#: config.json ``resolved`` key: the sha256 (hex) of each sibling module copied beside the model's file, by file name.
SIBLINGS_SHA256 = "source_siblings_sha256"


def keep_source(run_dir: Path, src: Source) -> dict:
    """Copy the model's file, and the sibling modules it imports (:func:`sibling_modules`), into the run
    directory (atomically), so that the run loads after the original folder moves.

    Returns:
        config.json's ``resolved`` record of the copies: ``source_sha256`` (the file's sha256, hex) and, when it
        imports siblings, ``source_siblings_sha256`` ({file name: sha256}).
    """
    data = src.path.read_bytes()
    dest = source_copy(run_dir, src)
    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(dest, data)
    siblings = {}
    for f in sibling_modules(src.path):
        kept = f.read_bytes()
        atomic_write(dest.parent / f.name, kept)
        siblings[f.name] = hashlib.sha256(kept).hexdigest()
    # a run's copy (--init-from) records the folder of the original it was copied from, not the other run's
    atomic_write(dest.parent / ORIGIN, str(src.origin or src.path.resolve().parent).encode("utf-8"))
    return {"source_sha256": hashlib.sha256(data).hexdigest(), **({SIBLINGS_SHA256: siblings} if siblings else {})}


def _own_init(mcfg) -> dict:
    """The constructor arguments a ``model.source`` model is built with (``model.init``; a string there is depthlab's
    GPT's init scheme, which a source model does not take)."""
    return parse_init(None if isinstance(mcfg.init, str) else mcfg.init)


def _init_flag(init: Optional[dict]) -> str:
    """`` --init '{...}'``: the model's constructor arguments given with model.init, for a ``depthlab check`` command
    that builds the same model (without them it checked another one, which passed); "" without any."""
    return f" --init {shlex.quote(json.dumps(init))}" if init else ""


def check_command(source: str, run_dir: Optional[Union[str, Path]] = None) -> str:
    """``depthlab check PATH.py:NAME`` for a run's model, with a path that works from any folder: the original
    file (absolute, from the run's ``source/ORIGIN``) while it is there and unchanged, else the run's own copy,
    saying why. Without ``run_dir``: ``source``'s path made absolute from the current folder (where it was
    typed); a run that records neither: ``source`` as config.json names it. The argument is shell-quoted where
    it needs it (a folder "my models"), since the command is pasted into a shell."""
    path, _, name = str(source).rpartition(":")
    if run_dir is None:
        return f"depthlab check {shlex.quote(f'{Path(path).resolve()}:{name}')}"
    copy = source_copy(Path(run_dir), source)
    try:
        original: Optional[Path] = Path((copy.parent / ORIGIN).read_text(encoding="utf-8").strip()) / copy.name
    except OSError:
        original = Path(path) if Path(path).is_absolute() else None
    there = original is not None and original.is_file()
    if there and (not copy.is_file() or sha256_file(original) == sha256_file(copy)):
        return f"depthlab check {shlex.quote(f'{original}:{name}')}"
    if not copy.is_file():
        return f"depthlab check {shlex.quote(str(source))}"
    why = (f"the original {original} has changed since this run" if there else
           f"the original {original} is gone" if original is not None else
           "the run does not record the folder of the original")
    return f"depthlab check {shlex.quote(f'{copy.resolve()}:{name}')} (the run's copy: {why})"


def run_source(run_dir: Path, source: str) -> Source:
    """The run's own copy of ``source`` (``PATH.py:NAME`` as config.json names it).

    Raises:
        DepthlabError: the copy is missing from the run directory, or does not match the sha256 its config.json
            recorded (``resolved.source_sha256``).
    """
    copy = source_copy(run_dir, source)
    name = str(source).rpartition(":")[2]
    try:
        origin: Optional[Path] = Path((copy.parent / ORIGIN).read_text(encoding="utf-8").strip())
    except OSError:
        origin = None
    resolved = (read_json(Path(run_dir) / CONFIG) or {}).get("resolved") or {}
    recorded = resolved.get("source_sha256")
    if not copy.is_file():
        original = Path(str(source).rpartition(":")[0])
        same = (isinstance(recorded, str) and original.is_file()
                and sha256_file(original) == recorded)
        fix = (f"copy {original} there (its sha256 is the one config.json recorded)" if same else
               "the run cannot be rebuilt without it: restore it from a copy of the run")
        raise DepthlabError(f"{run_dir} trained the model {source} but holds no copy of its file ({copy} is "
                            f"missing); {fix}")
    own = Source(copy, name, origin)
    _check_sibling_copies(run_dir, copy.parent, resolved.get(SIBLINGS_SHA256))
    if isinstance(recorded, str) and own.sha256 != recorded:
        raise DepthlabError(f"{copy} does not match the sha256 {Path(run_dir) / CONFIG} recorded for it "
                            f"({recorded[:12]}...): the run's own copy of its model file was changed or damaged; "
                            "restore it from a copy of the run (or from the file it was trained with, if that is "
                            "unchanged), or train a new run")
    return own


def _check_sibling_copies(run_dir: Path, folder: Path, recorded) -> None:
    """The run's copies of the sibling modules its model's file imports (in ``folder``) against the sha256s
    config.json recorded (``recorded``: {file name: sha256}, or None for a run that records none).

    Raises:
        DepthlabError: a copy is missing (the import would fall back to the original folder) or changed.
    """
    for name, sha in sorted(recorded.items() if isinstance(recorded, dict) else ()):
        f = folder / name
        if not f.is_file() or sha256_file(f) != sha:
            what = ("is missing" if not f.is_file() else
                    f"does not match the sha256 {Path(run_dir) / CONFIG} recorded for it ({str(sha)[:12]}...)")
            raise DepthlabError(f"{f} {what}: the run's own copy of {name}, a module its model file imports, was "
                                "removed, changed or damaged; restore it from a copy of the run (or from the file it "
                                "was trained with, if that is unchanged), or train a new run")


def source_drift(source: Any, recorded: Any) -> Optional[tuple[Path, str]]:
    """``(file, its sha256 now)`` when the file of ``source`` (``PATH.py:NAME`` or ``PATH.py``) differs from the
    sha256 a run recorded for it (config.json ``resolved.source_sha256``: ``recorded``); None when they agree, or
    when the file or the record is missing (nothing to compare)."""
    if not isinstance(source, str) or not isinstance(recorded, str):
        return None
    path = Path(source.rpartition(":")[0] or source)
    if not path.is_file():
        return None
    now = sha256_file(path)
    return None if now == recorded else (path, now)


def _since_copied(original: Path, kept: str) -> Optional[str]:
    """``changed`` or ``was deleted`` for a user's file a run copied (sha256 ``kept``), None when it is as copied.

    A deleted original is said as a changed one is: the run's copy, not the file the user knows, is what runs.
    """
    if not original.is_file():
        return "was deleted"
    return "changed" if sha256_file(original) != kept else None


def resume_source(run_dir: Path, source: str, log: Callable[[str], None]) -> dict:
    """The checks of a resume that builds ``source`` from the run's own copy (:func:`run_source`), with one warning
    line for each original that changed since the run copied it: the model's file, and each sibling module copied
    beside it (the original in the folder ``source/ORIGIN`` names).

    Returns:
        config.json's record of the copies, as :func:`keep_source` returns it.

    Raises:
        DepthlabError: as :func:`run_source`.
    """
    own = run_source(run_dir, source)
    original, sha = Path(str(source).rpartition(":")[0]), own.sha256
    how = _since_copied(original, sha)
    if how is not None:
        log(f"warning: {original} {how} since this run copied it; resuming with the run's own copy "
            f"{own.path} (sha256 {sha[:12]}...)")
    siblings = {f.name: sha256_file(f) for f in sorted(own.path.parent.glob("*.py")) if f.name != own.path.name}
    for name, kept in siblings.items():
        theirs = own.origin / name if own.origin is not None else None
        how = None if theirs is None else _since_copied(theirs, kept)
        if how is not None:
            log(f"warning: {theirs} (a module {own.path.name} imports) {how} since this run copied it; resuming "
                f"with the run's own copy {own.path.parent / name} (sha256 {kept[:12]}...)")
    return {"source_sha256": sha, **({SIBLINGS_SHA256: siblings} if siblings else {})}


def make_model(mcfg, run_dir: Optional[Path] = None) -> torch.nn.Module:
    """The model a run trains: depthlab's GPT for ``mcfg``, or, with ``mcfg.source``, the user's model.

    Args:
        mcfg: the run's :class:`~depthlab.config.ModelConfig` (``vocab_size`` known).
        run_dir: a run directory whose copy of the source file to build from (sample, report,
            resume); None = the file ``mcfg.source`` names.

    Raises:
        DepthlabError: as :func:`build_model` / :func:`run_source`.
    """
    source = getattr(mcfg, "source", None)
    if not source:
        return GPT(mcfg)
    src = run_source(run_dir, source) if run_dir is not None else parse_source(source)
    return build_model(src, _own_init(mcfg), mcfg.vocab_size)


def new_source_model(mcfg, log: Callable[[str], None]) -> tuple[Source, torch.nn.Module]:
    """The user's model for a new run, from the file ``mcfg.source`` names (imported once; one line says so once
    it is built).

    Returns:
        The Source naming its class or function (a bare PATH.py: its one nn.Module class, said in one line) and the
        model, built as :func:`make_model` builds it.

    Raises:
        DepthlabError: as :func:`load_factory` / :func:`build_model`.
    """
    picked: list[str] = []
    src, made = load_factory(parse_source(mcfg.source), picked.append)
    model = build_model(src, _own_init(mcfg), mcfg.vocab_size, made)
    # said once the model is built: a source refused (no file, no such name, a failing constructor) is not "the model"
    for line in picked:
        log(line)
    log(f"model: {mcfg.source} (your code, run as Python because model.source names it)")
    return src, model


def init_source_model(init_dir: Path, mcfg, log: Callable[[str], None]) -> tuple[Source, torch.nn.Module]:
    """The user's model for a new run ``--init-from init_dir`` (a model.source run) whose command names no
    model.source: built from that run's own copy of the file (:func:`run_source`), the code its weights were
    trained with, not the file as it is now; one warning when the original changed since, one line once built.

    Args:
        init_dir: the ``--init-from`` run directory. mcfg: the new run's ModelConfig; its ``source`` is the run's.
        log: console lines.

    Returns:
        The copy's Source (``origin``: the original's folder, which the new run's copy records) and the model.

    Raises:
        DepthlabError: ``mcfg.source`` is not the run's, or as :func:`run_source` / :func:`build_model`.
    """
    theirs = ((read_json(Path(init_dir) / CONFIG) or {}).get("model") or {}).get("source")
    if theirs != mcfg.source:
        raise DepthlabError(f"--init-from {init_dir} trained model.source {theirs}, not {mcfg.source}: its copy "
                            f"cannot build {mcfg.source}; name --model.source {mcfg.source} to build that file")
    own = run_source(Path(init_dir), mcfg.source)
    original = own.origin / own.path.name if own.origin is not None else Path(str(mcfg.source).rpartition(":")[0])
    how = _since_copied(original, own.sha256)
    if how is not None:
        log(f"warning: {original} {how} since {init_dir} copied it; the new run starts from that run's own copy "
            f"{own.path} (sha256 {own.sha256[:12]}...), the code its weights were trained with (give --model.source "
            f"{mcfg.source} to build the file as it is now)")
    model = build_model(own, _own_init(mcfg), mcfg.vocab_size)
    log(f"model: {mcfg.source} (your code, run as Python because the --init-from run's model.source names it; "
        f"built from that run's copy {own.path})")
    return own, model


def source_run_model(mcfg, run_dir: Path, resumed: bool, checkpointed: bool, init_dir: Optional[Path],
                     batch_size: int, keep: bool, log: Callable[[str], None]) -> tuple[torch.nn.Module, dict]:
    """The user's model (``mcfg.source``) of a run: from the run's own copy of the file when resuming (a changed
    original is named), from the ``--init-from`` run's copy (``init_dir``, :func:`init_source_model`), else from
    the file, which is then copied into the run (``keep``: this process writes the run's files).

    Args:
        mcfg: the run's ModelConfig (a bare ``PATH.py`` source is written back as ``PATH.py:NAME``).
        run_dir: the run directory. resumed: a resume point was found. checkpointed: it has a checkpoint.
        batch_size: train.batch_size, for the forward checked before training.

    Returns:
        The model and config.json's ``resolved`` record of the run's copies (:func:`keep_source`; {} when not kept).

    Raises:
        DepthlabError: as :func:`run_source`, :func:`new_source_model`, :func:`init_source_model`,
            :func:`check_forward`.
    """
    source = mcfg.source
    if resumed and source_copy(run_dir, source).is_file():
        record = resume_source(run_dir, source, log)  # a changed original is named
        model = make_model(mcfg, run_dir)
        return model, {**record, **_logits_record(check_forward(model, source, batch_size, mcfg.block_size,
                                                                  mcfg.vocab_size, _own_init(mcfg)), mcfg.vocab_size)}
    if checkpointed:
        run_source(run_dir, source)  # a checkpointed run without its copy: refused, as sample does
    if init_dir is not None:  # the --init-from run's model: from the code it trained
        src, model = init_source_model(init_dir, mcfg, log)
    else:
        src, model = new_source_model(mcfg, log)
        mcfg.source = source = str(src)  # a bare PATH.py: config.json and the copy name its class
    logits = check_forward(model, source, batch_size, mcfg.block_size, mcfg.vocab_size, _own_init(mcfg))
    return model, {**keep_source(run_dir, src), **_logits_record(logits, mcfg.vocab_size)} if keep else {}


#: config.json ``resolved`` key: the entries of a model.source model's logits per position, where it has more than
#: the corpus's V tokens (a padded vocabulary): its loss at initialisation starts near ln of this, not ln V.
MODEL_LOGITS = "model_logits"


def _logits_record(logits: int, vocab_size: int) -> dict:
    """config.json's record of a model's logits per position (:data:`MODEL_LOGITS`), when more than V."""
    return {MODEL_LOGITS: logits} if logits > vocab_size else {}


def takes_targets(model: torch.nn.Module) -> bool:
    """Whether ``model.forward`` has a ``targets`` parameter (nanoGPT, minGPT)."""
    try:
        return "targets" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def call_fault(model: torch.nn.Module) -> Optional[tuple[str, str]]:
    """Why ``model.forward`` cannot be called as depthlab calls it, ``forward(idx)`` (``forward(idx, targets)`` when it
    takes targets), and the fix; None when it can (or its signature cannot be read). A forward with more required
    arguments failed at every size, and was told to change its batch size and context."""
    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return None
    with_targets = "targets" in sig.parameters
    name = f"{type(model).__name__}.forward{sig}"
    positional = [n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if with_targets and positional[1:2] != ["targets"]:  # full_logits passes them second: another parameter got them
        return (f"{name} takes targets, but not as its second argument: depthlab calls forward(idx, targets), the "
                f"targets second (as nanoGPT's forward(idx, targets=None))"
                + (f", so {positional[1]} would receive them" if len(positional) > 1 else ""),
                "put targets second: forward(self, idx, targets=None, ...)")
    try:
        sig.bind(0, 0) if with_targets else sig.bind(0)
    except TypeError:
        call = "forward(idx, targets)" if with_targets else "forward(idx)"
        required = [n for n, p in sig.parameters.items() if p.default is inspect.Parameter.empty
                    and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        given = set(positional[:2] if with_targets else positional[:1])  # what depthlab passes, positionally
        extra = [n for n in required if n not in given]
        fix = (f"give {', '.join(extra)} a default (e.g. {extra[0]}=None)" if extra else
               "take the token ids (B, T) as its first argument")
        return (f"{name} cannot be called as {call}, as depthlab calls it (the token ids "
                f"(B, T){' and the targets' if with_targets else ''}, nothing else)", fix)
    return None


def flat_logits_hint(shape: tuple, B: int, T: int, targets: bool = False) -> str:
    """What a 2-D ``(B*T, V)`` logits tensor is (the loss's ``logits.view(-1, V)`` returned instead of the
    logits) and its fix, for a shape error, or ``""`` for any other shape (B, T > 1); a 0-d one from a forward given
    targets is its loss. ``targets``: the forward was
    called with targets (it takes them), which the hint then says: such a forward (the bigram model of "Let's build
    GPT": ``logits = logits.view(B*T, C)`` under ``if targets``) returns (B, T, V) without them, as its author sees."""
    if len(shape) == 0 and targets:  # a loss: what forward(idx, targets) returned, where forward(idx) may be right
        return ("that is one number, a loss: depthlab calls forward(idx, targets) on a forward that takes targets "
                "(as training does) and needs the (B, T, V) logits from it too: return (logits, loss) when targets "
                "are given")
    if len(shape) != 2 or B < 2 or T < 2 or int(shape[0]) != B * T:
        return ""
    if targets:
        return (f"({B * T}, {shape[1]}) is the logits flattened to (B*T, V) ({B} x {T} = {B * T} rows) when the "
                "forward is given targets: depthlab calls forward(idx, targets) on a forward that takes them (nanoGPT "
                "returns the last position alone without them), so return the (B, T, V) logits with targets too: "
                "flatten a copy for the loss, e.g. F.cross_entropy(logits.view(B*T, C), targets.view(B*T)) "
                "(depthlab computes the loss itself)")
    return (f"({B * T}, {shape[1]}) is the logits flattened to (B*T, V) ({B} x {T} = {B * T} rows), as a loss "
            "flattens them: return them before the .view(-1, V) / .reshape (depthlab computes the loss itself)")


def full_logits(model: torch.nn.Module, x: torch.Tensor, y: Optional[torch.Tensor] = None,
                with_targets: Optional[bool] = None) -> torch.Tensor:
    """The logits (B, T, V) of every position: ``forward(idx, targets)`` when the forward takes targets
    (nanoGPT returns the last position only without them), else ``forward(idx)``.

    Args:
        model: the model or a wrapper of it (DDP, torch.compile). x: (B, T) ids.
        y: targets to pass (zeros when None). with_targets: whether to pass them (None = :func:`takes_targets`).
    """
    if with_targets is None:
        with_targets = takes_targets(model)
    if with_targets:
        return logits_of(model(x, torch.zeros_like(x) if y is None else y.contiguous()))  # nanoGPT: targets.view
    return logits_of(model(x))


def _runs_at(model: torch.nn.Module, x: torch.Tensor, t: int) -> bool:
    """Whether the forward of ``x[:, :t]`` runs."""
    try:
        with torch.no_grad():
            full_logits(model, x[:, :t])
        return True
    except Exception:  # noqa: BLE001 - the user's forward failing at this length is the answer
        return False


def _longest_length(model: torch.nn.Module, x: torch.Tensor) -> tuple[Optional[int], list[int]]:
    """(the longest length ``t`` (1 .. x's) at which the forward of ``x[:, :t]`` runs, found by bisection assuming
    that every shorter length runs too, or None when even one position fails; the shorter lengths tried, t - 1 and
    t // 2, that fail all the same: then no context length is the limit, a size written in the code is)."""
    if x.shape[1] < 1 or not _runs_at(model, x, 1):
        return None, []
    lo, hi = 1, x.shape[1] + 1  # it runs at lo, fails at hi (the length asked)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _runs_at(model, x, mid) else (lo, mid)
    return lo, [t for t in sorted({lo // 2, lo - 1} - {0}) if not _runs_at(model, x, t)]


def forward_fault(model: torch.nn.Module, e: BaseException) -> str:
    """:func:`first_line` of an error the model's forward raised, with the line of the file that defines its class
    (as check and a training step name it): an error such as a .view that does not fit says no place otherwise."""
    try:
        path = inspect.getsourcefile(type(model))
    except TypeError:  # a class with no file (built in a notebook cell): the error alone
        path = None
    return _with_line(e, Path(path)) if path else first_line(e)


def float32_weights(model: torch.nn.Module, src) -> None:
    """Refuse (DepthlabError) a model whose trainable floating-point parameters are not float32: a .double() trained
    every step in float64, 12x slower, while the run said float32 (a frozen parameter of its own dtype is its
    business: it never trains)."""
    other = sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()
                    if p.requires_grad and p.is_floating_point() and p.dtype != torch.float32})
    if other:
        raise DepthlabError(f"{src}: the model's parameters are {' and '.join(other)}, and depthlab trains float32 "
                            "weights (train.dtype bfloat16 autocasts the matmuls, the weights stay float32): build it "
                            "in float32, without .double(), .half() or .to(dtype) in its constructor")


def check_forward(model: torch.nn.Module, src: str, batch_size: int, block_size: int, vocab_size: int,
                  init: Optional[dict] = None) -> int:
    """One forward of zeros (``batch_size``, ``block_size``) in eval mode with gradients on: the model runs at
    the sizes the run trains with, returns logits (B, T, V') with V' >= the corpus's V (more: a padded vocabulary,
    whose extra entries are never targets and never drawn), and they depend on a parameter that trains (they have a
    grad_fn). Returns V'. ``init``: the constructor arguments the model was built with (model.init), for the
    ``depthlab check`` command a refusal suggests.

    Raises:
        DepthlabError: the forward cannot be called with the token ids alone (:func:`call_fault`); it raises (e.g.
            a context table shorter than ``block_size``, a
            hard-coded batch size), or returns another shape, naming the sizes and the knob; or its logits
            have no gradient path (a ``.detach()`` or ``torch.no_grad()`` in forward, every parameter frozen).
    """
    fault = call_fault(model)
    if fault:
        raise DepthlabError(f"{src}: {fault[0]}; {fault[1]}")
    float32_weights(model, src)
    was_training = model.training
    model.eval()
    x = torch.zeros((batch_size, block_size), dtype=torch.long, device=next(model.parameters()).device)
    try:
        with torch.enable_grad():  # one forward checks the shape here and the gradient path below
            logits = full_logits(model, x)
    except DepthlabError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's forward: its error is theirs, in one line
        longest, shorter_fail = _longest_length(model, x[:, :-1])
        try:  # its own context argument is the knob that sizes the table (was: "give the model a larger table")
            own = "block_size" in inspect.signature(type(model)).parameters
        except (TypeError, ValueError):
            own = False
        larger = (f"build it with a larger one: --model.init '{{\"block_size\": {block_size}}}' (its own argument, "
                  "beside any other keys you give model.init)"
                  if own else "give the model a larger position table (and mask)")
        if getattr(model, "block_size", None) == block_size:  # built with that size already: a part is not
            larger = (f"its block_size is {block_size} already, so a part of it has a size of its own: a mask or "
                      f"position table made for {longest} positions (build each from the block_size argument)")
        fix = (f"the model accepts at most T={longest} positions (it runs on ({batch_size}, {longest})): run with "
               f"--model.block_size {longest}, or {larger}"
               if longest and not shorter_fail else
               f"it runs at T={longest} but fails at T={', '.join(map(str, shorter_fail))} too, so no context length "
               "is the limit: a size is written where the length belongs, e.g. q.view(B, n_head, T, hs) for "
               "q.view(B, T, n_head, hs).transpose(1, 2); take the sizes from the input (B, T, C = x.shape); "
               f"`{check_command(src)}{_init_flag(init)}` tries more sizes"
               if longest else "if the model has a fixed batch size or a context shorter than model.block_size, make "
               "them match (or run `depthlab check` on it)")
        raise DepthlabError(f"{src}: forward(idx) failed on idx of shape ({batch_size}, {block_size}) "
                            f"(train.batch_size, model.block_size): {forward_fault(model, e)}; {fix}") from None
    finally:
        model.train(was_training)
    # more entries than tokens (a padded vocabulary, a byte-level head) are never targets: trained down, never drawn
    if logits.dim() != 3 or tuple(logits.shape[:2]) != (batch_size, block_size) or logits.size(-1) < vocab_size:
        fix = (f"give the output layer {vocab_size} outputs and the token embedding {vocab_size} rows: take both "
               "sizes from a vocab_size argument of the constructor (depthlab passes the corpus's "
               f"{vocab_size} to one), not from a number written in the code"
               if logits.dim() == 3 and logits.shape[:2] == x.shape else
               flat_logits_hint(tuple(logits.shape), batch_size, block_size, takes_targets(model))
               or "return the logits of every position: (B, T, V)")
        raise DepthlabError(f"{src}: forward(idx) on ({batch_size}, {block_size}) returned logits of shape "
                            f"{tuple(logits.shape)}, not ({batch_size}, {block_size}, {vocab_size}) (B, T, V with the "
                            f"corpus's {vocab_size} tokens); {fix}")
    if not logits.requires_grad:  # the first backward would fail with torch's "does not require grad"
        frozen = not any(p.requires_grad for p in model.parameters())
        why = ("every parameter has requires_grad False" if frozen else
               "forward cuts them off from the parameters with a .detach(), .data or torch.no_grad()")
        raise DepthlabError(f"{src}: the logits do not depend on any parameter that trains ({why}), so no step can "
                            "change them; return logits computed from the model's trainable parameters")
    return int(logits.size(-1))
