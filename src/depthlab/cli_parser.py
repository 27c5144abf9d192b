"""The grammar every ``depthlab`` command shares: one jsonargparse parser class that remembers each
option's type (so :mod:`depthlab.cli_args` checks values in depthlab's words), the options every
command has, and the small builders the commands' parsers are made of (see :mod:`depthlab.cli`).
"""

from __future__ import annotations

import sys
from functools import lru_cache
from typing import Any, Optional

from .cli_args import field_types

PROG = "depthlab"

__all__ = ["NOT_PRINTED", "PROG", "add_device", "add_run_dir", "config_from", "new_parser", "printable", "set_threads",
           "value_types"]


@lru_cache(maxsize=None)
def _parser_class():
    """jsonargparse's ``ArgumentParser``, also keeping the type each option was added with
    (``value_types``: dest -> type), so that :mod:`depthlab.cli_args` checks values in depthlab's words."""
    from jsonargparse import ArgumentParser, Namespace

    class Parser(ArgumentParser):
        def add_argument(self, *args, **kwargs):
            action = super().add_argument(*args, **kwargs)
            if "type" in kwargs:
                vars(self).setdefault("value_types", {})[action.dest] = kwargs["type"]
            return action

        def print_help(self, file=None):
            """argparse's help, written and flushed here: argparse's own writer swallows an ``OSError``, so
            ``depthlab train --help | head -1`` exited 0 where every other command's output into a closed pipe
            exits 141 (``BrokenPipeError`` reaches :func:`depthlab.cli.main` from here)."""
            out = file or sys.stdout or sys.stderr  # argparse's fallback where stdout is closed (None)
            out.write(self.format_help())
            out.flush()

        def dump(self, namespace, *args, **kwargs):
            """--print_config's text: a file that ``-c`` reads back to the same config (:func:`printable`)."""
            if all(isinstance(namespace.get(k), Namespace) for k in ("data", "model", "train")):
                config_from(namespace)  # a config that train would refuse is refused here too, not printed as fine
            return super().dump(printable(namespace), *args, **kwargs)

    return Parser


#: What --print_config leaves out, with why: options whose effect the printed sections already hold, or that a
#: config file does not set (:func:`depthlab.cli_args.check_keys` refuses them in one), and derived fields.
NOT_PRINTED = {
    "debug": "a command-line switch; a config file does not set it",
    "preset": "the preset's fields are printed in the sections; a config file does not choose a preset",
    "resume": "printed as train.resume and train.out_dir; a config file does not give --resume",
    "overwrite": "deletes the run (or a sweep's runs) in the folder; a config file reused would delete it every time",
    "model.vocab_size": "set from the corpus's tokenizer when training starts (a value given is replaced)",
}


def printable(namespace):
    """The namespace ``--print_config`` prints: without :data:`NOT_PRINTED`; a model.source run's model section as
    config.json records it (:func:`~depthlab.config.model_record`), not depthlab's GPT's fields, which do not
    describe it; and for a ``--grid`` sweep (``depthlab sweep``) without ``train.out_dir`` (the sweep sets each
    run's) and without the fields its grid sets (given again with the grid, they were refused as flags that an
    axis replaces). ``depthlab COMMAND -c printed.yaml`` then reads back the config printed."""
    from jsonargparse import Namespace

    from .config import model_record

    namespace = namespace.clone()
    for key in NOT_PRINTED:
        if key in namespace:
            del namespace[key]
    if isinstance(namespace.get("model"), Namespace) and namespace.get("model.source"):
        kept = model_record(namespace["model"].as_dict())
        for key in [k for k in namespace["model"].keys() if k not in kept]:
            del namespace["model"][key]
    if isinstance(namespace.get("grid"), list):  # depthlab sweep's
        axes = [str(g).split("=", 1)[0].strip() for g in namespace["grid"]]
        for key in ["train.out_dir", *axes]:
            if key.count(".") == 1 and key in namespace:
                del namespace[key]
    return namespace


def value_types(parser) -> dict[str, Any]:
    """``dest`` -> type hint of every option of ``parser``: the config fields' from the config
    dataclasses, the command's own from :func:`new_parser`'s record."""
    return {**vars(parser).get("value_types", {}), **field_types()}


def new_parser(command: str, description: str, config_fields: bool = False):
    """A ``jsonargparse.ArgumentParser`` for ``depthlab COMMAND`` with the options every command has.

    Args:
        command: the subcommand name (for ``--help`` and error messages).
        description: one paragraph for ``--help``.
        config_fields: add every run-config field as a dotted flag (``--model.n_layer``), via
            :func:`depthlab.config.add_config_arguments`.

    Returns:
        The parser (``exit_on_error=False``: parse errors raise ``argparse.ArgumentError``).
    """
    from jsonargparse import ActionConfigFile

    p = _parser_class()(prog=f"{PROG} {command}", description=description, exit_on_error=False, allow_abbrev=False)
    p.add_argument("-c", "--config", action=ActionConfigFile,
                   help="YAML file of this command's options" + (" (sections data/model/train)" if config_fields
                                                                 else ""))
    p.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    if config_fields:
        from argparse import SUPPRESS

        from .config import add_config_arguments

        add_config_arguments(p)
        # a run's config.json also records what "auto" resolved to; read back, it is information only
        p.add_argument("--resolved", type=Optional[dict], default=None, help=SUPPRESS)
        if command != "train":  # train --print_config's "init_from: null": its file configures these commands too
            p.add_argument("--init_from", type=Optional[str], default=None, help=SUPPRESS)  # a value: check_keys
    return p


def add_run_dir(p, what: str = "a run directory written by depthlab train") -> None:
    p.add_argument("run_dir", type=str, help=what)


def add_device(p) -> None:
    p.add_argument("--device", type=str, default="auto", help="auto (cuda, else mps, else cpu), cpu, cuda, cuda:N, mps")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")


def config_from(ns) -> Any:
    """The validated :class:`~depthlab.config.RunConfig` of a namespace with data/model/train sections."""
    from .config import ConfigError, RunConfig

    d = ns.as_dict()
    try:
        return RunConfig.from_dict({k: d[k] for k in ("data", "model", "train")})
    except ConfigError as e:
        e.command_line = True  # its values are the command line's: dispatch says where each came from
        raise


def set_threads(n: int, cap: Optional[int] = None) -> None:
    """A command's ``--threads n`` (0: ``OMP_NUM_THREADS`` when it is a thread count, honoured as ``depthlab train``
    honours it, else torch's default, at most ``cap`` when given); an ``OMP_NUM_THREADS`` that is not a thread
    count, and a given count above the cores, get the one warning every command gives (``depthlab train``'s too).

    Raises:
        DepthlabError: ``n`` is not a thread count.
    """
    import torch

    from .config import check_threads
    from .training.machine import env_threads, ignored_env_threads, oversubscribed_threads
    from .training.runtime import console
    from .units import counted

    check_threads(n, "--threads")
    env = env_threads()  # honoured as train honours it
    env = min(env, cap) if cap else env
    given, knob = (n, "--threads") if n else (env, "OMP_NUM_THREADS")
    too_many = oversubscribed_threads(given, knob) if given else None
    if too_many:
        console(f"warning: {too_many}")
    if given:
        torch.set_num_threads(given)
    elif cap:
        torch.set_num_threads(max(1, min(torch.get_num_threads(), cap)))
    warning = ignored_env_threads(f"lets --threads {n} set the thread count" if n else
                                  f"runs with {counted(torch.get_num_threads(), 'thread')}, torch's default"
                                  + (f" (at most {cap})" if cap else ""))
    if warning:
        console(f"warning: {warning}")
