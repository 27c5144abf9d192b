"""Command line: ``depthlab train | sample | presets | ...``. Thin: parse, build configs, call the library.

Bad input ends as one line ``depthlab: error: ...`` on stderr and exit status 2 (3 for a
non-finite loss); ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from importlib import resources
from pathlib import Path
from typing import Callable, Optional, Sequence

from .errors import DepthlabError, NonFiniteError

PROG = "depthlab"


class _Parser(argparse.ArgumentParser):
    """argparse that raises DepthlabError instead of printing usage and exiting."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise DepthlabError(f"{self.prog}: {message}")


# ------------------------------------------------------------------------- presets
def preset_dir() -> Path:
    """Folder of the YAML presets shipped inside the package."""
    return Path(str(resources.files("depthlab") / "presets"))


def list_presets() -> dict[str, str]:
    """Preset name -> first comment line of its YAML file."""
    out = {}
    for p in sorted(preset_dir().glob("*.yaml")):
        first = p.read_text().splitlines()[0] if p.read_text() else ""
        out[p.stem] = first.lstrip("# ").strip()
    return out


def preset_path(name: str) -> Path:
    """Path of preset ``name``.

    Raises:
        DepthlabError: unknown preset (lists the known ones).
    """
    p = preset_dir() / f"{name}.yaml"
    if not p.exists():
        raise DepthlabError(f"unknown preset {name!r}; known presets: {', '.join(list_presets()) or 'none'}")
    return p


# ------------------------------------------------------------------------- train
def build_train_parser():
    """The jsonargparse parser of ``depthlab train`` (sections data / model / train)."""
    from jsonargparse import ActionConfigFile, ArgumentParser

    from .config import DataConfig, ModelConfig, TrainConfig

    p = ArgumentParser(prog=f"{PROG} train", exit_on_error=False,
                       description="Train a char-level GPT. Defaults: the CPU recipe on the embedded "
                                   "Tiny Shakespeare corpus. Losses are in nats per character.")
    p.add_argument("-c", "--config", action=ActionConfigFile, help="YAML file with sections data/model/train")
    p.add_argument("--preset", type=Optional[str], default=None,
                   help="load a preset shipped with depthlab (see `depthlab presets`); later flags override it")
    p.add_argument("--resume", type=Optional[str], default=None,
                   help="continue the run in RUN_DIR from its latest good checkpoint")
    p.add_argument("--init-from", type=Optional[str], default=None,
                   help="start a new run from the best weights of RUN_DIR (same model shape)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run directory (only a depthlab run)")
    p.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    p.add_class_arguments(DataConfig, "data", instantiate=False)
    p.add_class_arguments(ModelConfig, "model", instantiate=False)
    p.add_class_arguments(TrainConfig, "train", instantiate=False)
    return p


def _flag_value(argv: list[str], flag: str) -> Optional[str]:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def _expand_train_argv(argv: list[str]) -> list[str]:
    """Turn ``--preset NAME`` into ``--config <file>`` in place and put a resumed run's config first."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--preset" or a.startswith("--preset="):
            name = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else None)
            if name is None:
                raise DepthlabError("--preset needs a name; see `depthlab presets`")
            out += ["--config", str(preset_path(name))]
            i += 1 if "=" in a else 2
            continue
        out.append(a)
        i += 1
    resume = _flag_value(argv, "--resume")
    if resume is not None:
        rd = Path(resume)
        if not (rd / "config.json").is_file():
            raise DepthlabError(f"cannot resume: {rd} is not a depthlab run directory (no config.json)")
        other = _flag_value(argv, "--train.out_dir")
        if other is not None and Path(other).resolve() != rd.resolve():
            raise DepthlabError(f"--resume {rd} continues that run in place; drop --train.out_dir {other} "
                                f"(or use --init-from {rd} --train.out_dir {other} for a new run)")
        if _flag_value(argv, "--init-from") is not None:
            raise DepthlabError("--resume and --init-from exclude each other: resume continues a run, "
                                "init-from starts a new one from its weights")
        out = ["--config", str(rd / "config.json")] + out + ["--train.resume", "true",
                                                               "--train.out_dir", str(rd)]
    return out


def _one_line(msg: str) -> str:
    return re.sub(r"\s+", " ", msg).strip()


def cmd_train(argv: list[str]) -> int:
    """``depthlab train``: parse, validate, train; prints the diagnosis at the end."""
    from argparse import ArgumentError

    from .config import RunConfig

    parser = build_train_parser()
    argv = _expand_train_argv(argv)
    try:
        ns = parser.parse_args(argv)
    except ArgumentError as e:
        raise DepthlabError(f"train: {_one_line(str(e))}") from None
    d = ns.as_dict()
    cfg = RunConfig.from_dict({k: d[k] for k in ("data", "model", "train")})
    from .analytics import default_callbacks
    from .trainer import Trainer

    trainer = Trainer(cfg, callbacks=default_callbacks(cfg), overwrite=bool(d.get("overwrite")))
    if d.get("init_from"):
        try:
            init_from(trainer, d["init_from"])
        except BaseException:
            if trainer.created_run_dir:  # nothing half-made may block the corrected command
                trainer.metrics.close()
                import shutil

                shutil.rmtree(trainer.run_dir, ignore_errors=True)
            raise
    trainer.fit()
    return 0


def init_from(trainer, run_dir: str) -> None:
    """Load the best weights of ``run_dir`` into a fresh trainer's model (new run, new optimizer).

    Raises:
        DepthlabError: not a run, or weights that do not fit the configured model.
    """
    from . import checkpoint as ckpt

    rd = Path(run_dir)
    path = rd / ckpt.CKPT_DIR / "best.safetensors"
    if not path.exists():
        raise DepthlabError(f"--init-from {rd}: no checkpoints/best.safetensors there")
    sd, meta = ckpt.load_weights_file(path)
    if json.loads(meta.get("vocab", "[]")) != trainer.corpus.tokenizer.vocab:
        raise DepthlabError(f"--init-from {rd}: its vocabulary differs from this corpus's")
    ckpt.load_into(trainer.raw_model, sd, path)


# ------------------------------------------------------------------------- sample
def cmd_sample(argv: list[str]) -> int:
    """``depthlab sample RUN_DIR``: stream generated text (prompt included) to stdout."""
    from .sample import sample_text

    p = _Parser(prog=f"{PROG} sample", description="Generate text from a trained run.")
    p.add_argument("run_dir", help="a run directory written by depthlab train")
    p.add_argument("--prompt", default="", help="text to continue (default: a newline)")
    p.add_argument("--max-new-tokens", type=int, default=500, help="characters to generate")
    p.add_argument("--temperature", type=float, default=0.8, help="0 = greedy (argmax)")
    p.add_argument("--top-k", type=int, default=200, help="keep the k most likely tokens (0 = off)")
    p.add_argument("--top-p", type=float, default=None, help="nucleus sampling mass in (0, 1]")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--num-samples", type=int, default=1)
    p.add_argument("--checkpoint", choices=["best", "last"], default="best")
    p.add_argument("--device", default="cpu")
    p.add_argument("--debug", action="store_true")
    a = p.parse_args(argv)

    def stream(s: str) -> None:
        sys.stdout.write(s)
        sys.stdout.flush()

    sample_text(a.run_dir, a.prompt, a.max_new_tokens, a.temperature, a.top_k or None, a.top_p,
                a.seed, a.num_samples, a.checkpoint, a.device, stream=stream)
    stream("\n")
    return 0


def cmd_probe(argv: list[str]) -> int:
    """gradient flow, activation scale and rank per block at initialisation (no training)"""
    from argparse import ArgumentError

    import torch

    from .analytics.probe import PROBE_BATCH_SIZE, PROBE_BATCHES, format_probe_table, plot_probe, probe_at_init, summarise_probe
    from .config import RunConfig

    own = _Parser(prog="depthlab probe", add_help=False)
    own.add_argument("--json", action="store_true")
    own.add_argument("--out", default=None)
    own.add_argument("--batches", type=int, default=PROBE_BATCHES)
    own.add_argument("--probe-batch-size", type=int, default=PROBE_BATCH_SIZE)
    own.add_argument("-h", "--help", action="store_true")
    a, rest = own.parse_known_args(argv)
    if a.help:
        print("usage: depthlab probe [--json] [--out PNG] [--batches N] [--probe-batch-size B] "
              "[model/data flags of depthlab train, e.g. --model.variant plain --model.n_layer 16]\n\n"
              "Build the model at initialisation, run forward/backward on a few seeded batches of the corpus\n"
              "and print per block: gradient L2 norm, mean |grad|, activation RMS, rank measure\n"
              "(Dong et al. 2021), plus a plain-words summary and a PNG (default probe-<variant>-<n_layer>.png).")
        return 0
    parser = build_train_parser()
    try:
        ns = parser.parse_args(_expand_train_argv(rest))
    except ArgumentError as e:
        raise DepthlabError(f"probe: {_one_line(str(e))}") from None
    d = ns.as_dict()
    cfg = RunConfig.from_dict({k: d[k] for k in ("data", "model", "train")})
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 4)))
    result = probe_at_init(cfg, n_batches=a.batches, batch_size=a.probe_batch_size)
    summary = summarise_probe(result)
    out = Path(a.out) if a.out else Path(f"probe-{cfg.model.variant}-{cfg.model.n_layer}.png")
    if out.suffix.lower() not in (".png", ""):
        raise DepthlabError(f"probe: --out {out} must be a .png file name")
    if out.suffix == "":
        out = out.with_suffix(".png")  # say the name that is actually written
    try:
        plot_probe(result, out)
    except OSError as e:
        raise DepthlabError(f"probe: cannot write the plot {out}: {e}") from None
    if a.json:
        print(json.dumps({**result, "summary": summary, "plot": str(out)}))
        return 0
    c = result["config"]
    print(f"probe at init: {c['variant']} + {c['norm']}, {c['n_layer']} blocks x {c['n_embd']} wide, "
          f"{a.batches} batches of {a.probe_batch_size} x {c['block_size']} tokens; loss {result['loss']:.3f} nats "
          f"(uniform ln V = {result['uniform_nats']:.3f})")
    print(format_probe_table(result))
    for s in summary:
        print("- " + s)
    print(f"plot: {out}")
    return 0


def cmd_diagnose(argv: list[str]) -> int:
    """findings in plain words (evidence + remedy) for a run directory"""
    from .analytics.diagnose import diagnose_run, findings_json, format_findings

    p = _Parser(prog="depthlab diagnose",
                description="Apply the diagnosis rules (bigram_stuck, vanishing_gradients, exploding, "
                            "rank_collapse, uniform_attention, lr_too_high, lr_too_low, overfitting, plateau) "
                            "to a run directory's metrics.")
    p.add_argument("run_dir", help="a run directory written by depthlab train")
    p.add_argument("--json", action="store_true", help='print {"findings": [{"rule", "evidence", "remedy"}]}')
    a = p.parse_args(argv)
    findings = diagnose_run(a.run_dir)
    if a.json:
        print(json.dumps(findings_json(findings)))
    else:
        print(format_findings(findings))
    return 0


def cmd_presets(argv: list[str]) -> int:
    """``depthlab presets``: list the shipped presets."""
    for name, desc in list_presets().items():
        print(f"{name:12s} {desc}")
    return 0


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "train": cmd_train,
    "sample": cmd_sample,
    "presets": cmd_presets,
    "probe": cmd_probe,
    "diagnose": cmd_diagnose,
}


def register(name: str, fn: Callable[[list[str]], int]) -> None:
    """Add a subcommand (used by optional modules)."""
    COMMANDS[name] = fn


USAGE = """usage: depthlab <command> [options]

commands:
  train      train a char-level GPT (default: CPU recipe on embedded Tiny Shakespeare)
  sample     generate text from a run directory
  presets    list the shipped training presets
{extra}
`depthlab <command> --help` documents each command's options."""


def _load_optional_commands() -> None:
    for mod in ("report.commands", "experiments"):
        try:
            __import__(f"depthlab.{mod}")
        except ImportError:
            pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point; returns the exit status (0 ok, 2 bad input, 3 non-finite, 130/143 signals)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    _load_optional_commands()
    if not argv or argv[0] in ("-h", "--help"):
        extra = "".join(f"  {k:10s} {(v.__doc__ or '').strip().splitlines()[0]}\n"
                        for k, v in COMMANDS.items() if k not in ("train", "sample", "presets"))
        print(USAGE.format(extra=extra), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        from . import __version__

        print(f"depthlab {__version__}")
        return 0
    cmd = COMMANDS.get(argv[0])
    if cmd is None:
        print(f"{PROG}: error: unknown command {argv[0]!r}; choose from {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    rest = [a for a in argv[1:] if a != "--debug"] if argv[0] != "train" else argv[1:]
    try:
        return cmd(rest)
    except NonFiniteError as e:
        if debug:
            raise
        print(f"{PROG}: error: {_one_line(str(e))}", file=sys.stderr)
        return 3
    except DepthlabError as e:
        if debug:
            raise
        print(f"{PROG}: error: {_one_line(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `depthlab sample ... | head`: the reader left; not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (OSError, UnicodeDecodeError) as e:  # a path, permission or encoding problem of the user's input
        if debug:
            raise
        print(f"{PROG}: error: {type(e).__name__}: {_one_line(str(e))[:300]} (check the paths given and "
              "their permissions/encoding)", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - the last line of defence: no raw tracebacks for users
        from .trainer import Interrupted

        if isinstance(e, Interrupted):
            print(f"{PROG}: {e}", file=sys.stderr)
            return e.exit_code
        if debug:
            raise
        print(f"{PROG}: error: unexpected {type(e).__name__}: {_one_line(str(e))[:300]} "
              "(run again with --debug for the traceback, and please report it)", file=sys.stderr)
        return 1
