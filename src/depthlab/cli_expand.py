"""What a ``depthlab train`` command line means before it is parsed: presets, ``--resume``, ``--init-from``.

``--preset NAME`` becomes ``--config <the preset's file>``; ``--resume RUN`` puts the run's own
config.json first; ``--init-from RUN`` puts the source run's model section first (the weights fix
the shape). Flags the user typed come after and win.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from .cli_args import flag_value
from .errors import DepthlabError

__all__ = ["expand_presets", "expand_train_argv", "list_presets", "preset_dir", "preset_path"]


def preset_dir() -> Path:
    """Folder of the YAML presets shipped inside the package."""
    return Path(str(resources.files("depthlab") / "presets"))


def list_presets() -> dict[str, str]:
    """Preset name -> first comment line of its YAML file."""
    out = {}
    for p in sorted(preset_dir().glob("*.yaml")):
        text = p.read_text()
        out[p.stem] = text.splitlines()[0].lstrip("# ").strip() if text else ""
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


def expand_presets(argv: list[str]) -> list[str]:
    """Turn ``--preset NAME`` into ``--config <the preset's file>`` in place.

    Raises:
        DepthlabError: ``--preset`` without a name, or an unknown preset.
    """
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
    return out


def expand_train_argv(argv: list[str]) -> list[str]:
    """Presets, then ``--resume RUN``: the run's own config.json first, resume and out_dir last.

    Raises:
        DepthlabError: not a run directory, or ``--resume`` combined with another out_dir or
            with ``--init-from``.
    """
    from .rundir import CONFIG, RunDir

    out = expand_presets(argv)
    resume = flag_value(argv, "--resume")
    if resume is None:
        init = flag_value(argv, "--init-from") or flag_value(argv, "--init_from")
        return _init_from_model_flags(init) + out if init else out
    rd = Path(resume)
    try:
        RunDir(rd).require("config")
    except DepthlabError as e:
        raise DepthlabError(f"cannot resume: {e}") from None
    other = flag_value(argv, "--train.out_dir")
    if other is not None and Path(other).resolve() != rd.resolve():
        raise DepthlabError(f"--resume {rd} continues that run in place; drop --train.out_dir {other} "
                            f"(or use --init-from {rd} --train.out_dir {other} for a new run)")
    if flag_value(argv, "--init-from") is not None or flag_value(argv, "--init_from") is not None:
        raise DepthlabError("--resume and --init-from exclude each other: resume continues a run, "
                            "init-from starts a new one from its weights")
    return ["--config", str(rd / CONFIG)] + out + ["--train.resume", "true", "--train.out_dir", str(rd)]


def _init_from_model_flags(init: str) -> list[str]:
    """``--init-from RUN``: the source run's model section as flags, before the user's own (which win).

    The weights fix the shape, so the new run takes it from the run they come from instead of
    the defaults; a ``depthlab export`` folder (no config.json) keeps today's behaviour.
    """
    import json

    from .rundir import RunDir

    model = ((RunDir(init).config or {}).get("model") or {}) if Path(init).is_dir() else {}
    out: list[str] = []
    for key, value in model.items():
        if key == "vocab_size" or value is None:
            continue  # the vocabulary comes from the tokenizer; None is a field's unset default
        text = json.dumps(value) if isinstance(value, dict) else str(value).lower() if isinstance(value, bool) \
            else str(value)
        out += [f"--model.{key}={text}"]
    return out
