"""Crash-safe checkpoints: weights in safetensors, trainer state as tensors + plain containers.

Layout inside a run directory::

    checkpoints/
      manifest.json               format, list of step checkpoints (oldest first), best; sha256 of each file
      step-000500.safetensors     model weights; metadata holds config, vocabulary, step
      step-000500.state.pt        optimizer, RNG states, step, best val loss (torch.load weights_only=True)
      best.safetensors            weights at the best validation loss

Every file is written to a temporary name in the same folder, fsynced, then renamed, so a
crash leaves either the old or the new file, never half of one. Loading verifies sha256 against
the manifest and falls back to the previous good checkpoint with a warning naming the bad file.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import random
import re
import shlex
import warnings
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from .config import DEFAULT_CACHE, ModelConfig, predating_model
from .data import BPETokenizer, CharTokenizer, Tokenizer, sha256_file
from .errors import DepthlabError
from .rundir import CHECKPOINTS, CONFIG, TOKENIZER, RunDir, atomic_write, read_json
from .usermodel import source_copy

FORMAT_VERSION = 1
CKPT_DIR = CHECKPOINTS

__all__ = ["atomic_write", "save_checkpoint", "checkpoint_bytes", "write_checkpoint", "latest_checkpoint",
           "NoIntactCheckpoint",
           "verified_best", "load_weights_file", "load_into", "misfit", "load_state", "read_metadata", "read_manifest",
           "model_config_from_meta", "capture_rng_state",
           "restore_rng_state", "payload_sha256", "sha256_file", "weights_bytes", "clean_state_dict"]


def clean_state_dict(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Strip ``_orig_mod.`` (torch.compile) and ``module.`` (DDP) prefixes from every key."""
    out = {}
    for k, v in sd.items():
        k = k.replace("_orig_mod.", "")
        while k.startswith("module."):
            k = k[len("module."):]
        out[k] = v
    return out


def weights_bytes(model: torch.nn.Module, metadata: dict[str, str]) -> bytes:
    """Serialise ``model``'s weights to safetensors bytes; tied tensors are stored once.

    Raises:
        DepthlabError: if any weight is NaN or infinite (a checkpoint is never written then).
    """
    sd = clean_state_dict(model.state_dict())
    seen: dict[int, str] = {}
    out = {}
    for k, v in sd.items():
        ptr = v.data_ptr()
        if ptr in seen and v.numel() > 0:
            continue  # tied weight (lm_head.weight is transformer.wte.weight)
        seen[ptr] = k
        if v.is_floating_point() and not torch.isfinite(v).all():
            raise DepthlabError(f"refusing to write a checkpoint: weight {k} is not finite")
        out[k] = v.detach().to("cpu").contiguous()
    return st_save(out, metadata=metadata)


def nonfinite_weight(sd: dict[str, torch.Tensor]) -> Optional[str]:
    """The name of the first floating-point tensor of ``sd`` holding NaN or inf, or None when all are finite."""
    return next((k for k, v in sd.items() if v.is_floating_point() and not torch.isfinite(v).all()), None)


def finite_best(run_dir: Path) -> Optional[Path]:
    """``best.safetensors`` of a run when it passes its sha256 check and every weight in it is finite, else None."""
    try:
        path = verified_best(Path(run_dir))
        sd, _ = load_weights_file(path)
    except DepthlabError:
        return None
    return path if nonfinite_weight(sd) is None else None


def payload_sha256(path: Path) -> str:
    """SHA-256 over a safetensors file's tensors (sorted names, dtype, shape, bytes), ignoring metadata.

    Two runs with identical weights but different run directories (stored in the metadata)
    hash the same.
    """
    sd, _ = load_weights_file(path)
    h = hashlib.sha256()
    for k in sorted(sd):
        v = sd[k].contiguous()
        h.update(f"{k}|{v.dtype}|{tuple(v.shape)}|".encode())
        h.update(v.view(torch.uint8).numpy().tobytes() if v.numel() else b"")
    return h.hexdigest()


def new_run_command(run_dir: Path, init_from: bool, flags: str = "") -> str:
    """The command that starts a new run from ``run_dir``'s config.json (its corpus, tokenizer and model), from its
    best weights when ``init_from``, with ``flags`` (changed fields) on top: ``--train.resume false``, since the
    config.json of a run that was resumed says ``resume: true``, and a new folder, NEW_DIR."""
    src = f"--init-from {shlex.quote(str(run_dir))} " if init_from else ""  # pasted into a shell: quoted paths
    more = f"{flags} " if flags else ""
    return (f"depthlab train -c {shlex.quote(str(Path(run_dir) / CONFIG))} {_own_copy(Path(run_dir))}{src}{more}"
            "--train.resume false --train.out_dir NEW_DIR")


def _own_copy(run_dir: Path) -> str:
    """``--model.source RUN/source/FILE.py:NAME `` when the model file config.json names is not there from this folder
    (deleted, moved, or a relative path from another folder) but the run keeps its copy; else ``""``: without it the
    advised ``-c RUN/config.json`` command fails on 'file not found'."""
    src = ((read_json(run_dir / CONFIG) or {}).get("model") or {}).get("source")
    if not isinstance(src, str) or not src:
        return ""
    path, sep, name = src.rpartition(":")
    if not sep:
        path, name = src, ""
    copy = source_copy(run_dir, f"{path}:{name}")
    if Path(path).is_file() or not copy.is_file():
        return ""
    return f"--model.source {shlex.quote(f'{copy}:{name}' if name else str(copy))} "


def _damaged_manifest(m: Path, fault: str) -> DepthlabError:
    """The error for a checkpoint manifest ``m`` that is there but damaged (``fault``): the weights beside it may be
    intact, but their sha256 cannot be checked; what the user can do (its best weights "unchecked" unless the
    manifest's entry of best.safetensors is intact and the file matches it)."""
    try:
        unchecked = unchecked_best(m.parent.parent) is not None
    except (DepthlabError, OSError):  # best fails its sha256, is missing, or the manifest is newer
        unchecked = True
    best = ("its best weights, unchecked" if unchecked else
            "its best weights (best.safetensors matches its sha256 in the manifest)")
    return DepthlabError(
        f"{m} {fault}: the sha256 of the run's checkpoints cannot be checked, so depthlab neither reads nor replaces "
        f"them; restore {m.name} from a copy of the run, or start a new run from {best}: "
        f"{new_run_command(m.parent.parent, True)}")


def read_manifest(ckdir: Path, strict: bool = True) -> dict:
    """The manifest (an empty one when the run has none yet).

    Raises:
        DepthlabError: unreadable, not a manifest, newer than this depthlab; with ``strict``, missing while the
            folder holds weights that only a manifest's existence explains (best.safetensors, which is written
            after the manifest lists its step, or two step checkpoints): a deleted manifest, not a new run.
    """
    m = ckdir / "manifest.json"
    if not m.exists():
        listed = sorted(p.name for p in ckdir.glob("*.safetensors")) if ckdir.is_dir() else []
        if strict and ("best.safetensors" in listed or len(listed) >= 2):
            raise DepthlabError(f"{m} is missing (deleted?) though {ckdir} holds the weights it listed "
                                f"({', '.join(listed[:3])}{', ...' if len(listed) > 3 else ''}): their sha256 cannot "
                                "be checked, so depthlab neither reads nor replaces them; restore manifest.json from "
                                "a copy, or train into a new train.out_dir")
        return {"format": FORMAT_VERSION, "checkpoints": [], "best": None}
    try:
        data = json.loads(m.read_text())
    except (OSError, ValueError) as e:
        raise _damaged_manifest(m, f"is unreadable ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("checkpoints", []), list):
        raise _damaged_manifest(m, "is not a depthlab checkpoint manifest")
    data.setdefault("checkpoints", [])
    data.setdefault("best", None)
    _refuse_newer_format(m, data)
    labelled = [*((c, f"the checkpoint of step {c.get('step')}" if isinstance(c, dict) else "a checkpoint")
                  for c in data["checkpoints"]), *([(data["best"], "best.safetensors")] if data["best"] else []),
                *((k, "a best kept aside") for k in data.get("kept") or [])]
    fault = next((f for f in (_unverifiable(e, what) for e, what in labelled) if f is not None), None)
    if fault is not None:
        raise _damaged_manifest(m, fault)
    return data


def _refuse_newer_format(m: Path, data: dict, head: str = "") -> None:
    """The refusal of a manifest ``m`` (``data``) written by a newer depthlab (``head`` starts the line)."""
    if int(data.get("format", 0)) > FORMAT_VERSION:
        raise DepthlabError(f"{head}{m} has checkpoint format {data.get('format')}, newer than this depthlab "
                            f"understands ({FORMAT_VERSION}); upgrade depthlab")


def _unverifiable(entry: Any, what: str) -> Optional[str]:
    """Why the manifest entry ``entry`` (of ``what``) cannot be checked: ``holds no sha256 of X`` (it lists no files,
    not the file ``what`` names, or a file whose recorded sha256 is empty or not one), or None. The one test of "is
    this entry verifiable" (:func:`read_manifest`, :func:`unchecked_best`): a file without a sha256 is neither
    intact nor damaged."""
    files = entry.get("files") if isinstance(entry, dict) else None
    if not isinstance(files, dict) or not files or (what.endswith(".safetensors") and what not in files):
        return f"holds no sha256 of {what}"
    bad = next((f for f, h in files.items() if not (isinstance(h, str) and len(h) == 64
                                                     and all(c in "0123456789abcdef" for c in h))), None)
    if bad is not None:
        return f"holds no sha256 of {bad}"
    val = entry.get("val_loss")  # a best's loss is a measured, finite number: nan or inf is damage (or forgery)
    if val is not None and not (isinstance(val, (int, float)) and not isinstance(val, bool) and math.isfinite(val)):
        return f"records val_loss {val} for {what}, not a measured loss"
    return None


def save_checkpoint(run_dir: Path, step: int, model: torch.nn.Module, state: dict[str, Any],
                    meta: dict[str, str], keep_last: int = 2, is_best: bool = False,
                    val_loss: Optional[float] = None) -> None:
    """Write step checkpoint (weights + trainer state), optionally ``best``, then the manifest.

    Args:
        run_dir: the run directory.
        step: optimizer steps done.
        model: the (possibly compiled/DDP) model.
        state: trainer state of tensors and plain containers only.
        meta: string metadata (``config``, ``vocab`` as JSON) stored in the safetensors header.
        keep_last: step checkpoints to keep (oldest are deleted after the manifest is updated).
        is_best: also write ``best.safetensors``.
        val_loss: validation loss in nats recorded for ``best``.
    """
    write_checkpoint(run_dir, checkpoint_bytes(step, model, state, meta), keep_last, is_best, val_loss)


def checkpoint_bytes(step: int, model: torch.nn.Module, state: dict[str, Any], meta: dict[str, str]) -> tuple:
    """``(step, weights bytes, state bytes)``: a step checkpoint's files as they will be written.

    A snapshot: training may go on changing the model and optimizer while :func:`write_checkpoint`
    writes these bytes (the trainer's background writes on CUDA).
    """
    meta = dict(meta, format=str(FORMAT_VERSION), step=str(step))
    buf = io.BytesIO()
    torch.save(state, buf)
    return step, weights_bytes(model, meta), buf.getvalue()


def write_checkpoint(run_dir: Path, files: tuple, keep_last: int = 2, is_best: bool = False,
                     val_loss: Optional[float] = None) -> None:
    """Write :func:`checkpoint_bytes`'s files, optionally as ``best`` too, then the manifest (see
    :func:`save_checkpoint` for the arguments).

    Raises:
        OSError: a file could not be written (what was written before stays consistent).
    """
    step, wbytes, sbytes = files
    ckdir = Path(run_dir) / CKPT_DIR
    ckdir.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:06d}"
    atomic_write(ckdir / f"{name}.safetensors", wbytes)
    atomic_write(ckdir / f"{name}.state.pt", sbytes)
    manifest = read_manifest(ckdir, strict=False)  # resume and the readers refuse a deleted manifest first
    entry = {"name": name, "step": step, "files": {
        f"{name}.safetensors": hashlib.sha256(wbytes).hexdigest(),
        f"{name}.state.pt": hashlib.sha256(sbytes).hexdigest()},
        "evaluated": val_loss is not None}  # an evaluation's checkpoint: its record is written before it
    ckpts = [c for c in manifest["checkpoints"] if c["step"] != step]
    # after a fallback resume the manifest lists the damaged checkpoints it skipped, later than this step: they
    # stay untouched and uncounted (marked "skipped"), so rotation never deletes an intact checkpoint to keep a
    # damaged one; once the run has passed the step of one that is still damaged, the manifest stops listing it and
    # its files stay on disk (one of them may be intact: a state.pt beside damaged weights); Checkpointer.save
    # says so first (passed_damaged)
    aside = [dict(c, skipped=True) for c in ckpts if c["step"] > step and _verified(ckdir, c["files"]) is not None]
    passed = [c for c in ckpts if c.get("skipped") and c["step"] < step and _verified(ckdir, c["files"]) is not None]
    apart = {c["step"] for c in aside + passed}
    ckpts = [{k: v for k, v in c.items() if k != "skipped"} for c in ckpts if c["step"] not in apart] + [entry]
    drop, ckpts = ckpts[:-keep_last], ckpts[-keep_last:]
    manifest["checkpoints"] = sorted(ckpts + aside, key=lambda c: c["step"])
    manifest["format"] = FORMAT_VERSION
    # The manifest first lists the new step checkpoint with the old best; only then is best replaced,
    # then named. A kill between the two leaves best.safetensors holding the bytes of a listed step
    # checkpoint, which verified_best accepts; no moment leaves a best that nothing vouches for.
    atomic_write(ckdir / "manifest.json", json.dumps(manifest, indent=1).encode())
    if is_best:
        atomic_write(ckdir / "best.safetensors", wbytes)
        manifest["best"] = {"step": step, "val_loss": val_loss,
                            "files": {"best.safetensors": entry["files"][f"{name}.safetensors"]}}
        atomic_write(ckdir / "manifest.json", json.dumps(manifest, indent=1).encode())
    for c in drop:  # only after the manifest no longer names them
        for f in c["files"]:
            try:
                (ckdir / f).unlink()
            except FileNotFoundError:
                pass


_STEP_FILE = re.compile(r"step-\d+\.(safetensors|state\.pt)")


def set_aside_unlisted(run_dir: Path) -> list[str]:
    """Rename each step checkpoint file in ``checkpoints/`` that manifest.json does not list to ``NAME.unlisted``
    (``NAME.unlisted-2``, ... when taken): a write that a kill cut short between the file's rename and the manifest's,
    or a rotation's delete cut short after the manifest dropped it. No sha256 vouches for such a file, so a resume
    neither uses nor counts it; renamed, the session's own checkpoint of that step cannot silently replace what
    may be the only copy of a later step, and rotation never deletes it.

    Returns:
        The new names (``step-000025.safetensors.unlisted``, ...), sorted; [] when every step file is listed (a run
        with no manifest yet lists none: its first checkpoint's write was cut short).
    """
    ckdir = Path(run_dir) / CKPT_DIR
    if not ckdir.is_dir():
        return []
    listed = {f for c in read_manifest(ckdir, strict=False)["checkpoints"] for f in c.get("files", {})}
    moved = []
    for p in sorted(ckdir.iterdir()):
        if _STEP_FILE.fullmatch(p.name) and p.name not in listed and p.is_file() and not p.is_symlink():
            to, n = p.with_name(f"{p.name}.unlisted"), 1
            while to.exists() or to.is_symlink():
                n += 1
                to = p.with_name(f"{p.name}.unlisted-{n}")
            p.rename(to)
            moved.append(to.name)
    return moved


def damaged_at(run_dir: Path, step: int) -> Optional[str]:
    """The first damaged file (missing, or not its sha256) of the manifest's step checkpoint of ``step``, which a
    checkpoint of that step replaces (one a fallback resume skipped), or None: no such entry, or it is intact."""
    ckdir = Path(run_dir) / CKPT_DIR
    try:
        entry = next((c for c in read_manifest(ckdir, strict=False)["checkpoints"] if c["step"] == step), None)
    except DepthlabError:
        return None
    return None if entry is None else _verified(ckdir, entry.get("files") or {})


def passed_damaged(run_dir: Path, step: int) -> list[tuple[int, str]]:
    """``(step, first damaged file)`` of each checkpoint a fallback resume skipped (manifest ``skipped``) that is
    still damaged and older than ``step``: the next checkpoint, of ``step``, stops listing them in manifest.json and
    leaves their files on disk (:func:`write_checkpoint`)."""
    ckdir = Path(run_dir) / CKPT_DIR
    try:
        ckpts = read_manifest(ckdir, strict=False)["checkpoints"]
    except DepthlabError:
        return []
    out = []
    for c in ckpts:
        if c.get("skipped") and c["step"] < step:
            bad = _verified(ckdir, c.get("files") or {})
            if bad is not None:
                out.append((c["step"], bad))
    return out


def _verified(ckdir: Path, files: dict[str, str]) -> Optional[str]:
    """None if every file exists with its recorded sha256, else the first bad file's name."""
    for f, digest in files.items():
        p = ckdir / f
        if not p.exists() or sha256_file(p) != digest:
            return f
    return None


def damaged_weights(run_dir: Path) -> list[str]:
    """The ``.safetensors`` files manifest.json lists (step checkpoints and best) that are missing or do not
    match their sha256, sorted; [] when every one is intact, or the run has no manifest yet.

    Raises:
        DepthlabError: manifest.json unreadable, not a manifest, or deleted (:func:`read_manifest`).
    """
    ckdir = Path(run_dir) / CKPT_DIR
    manifest = read_manifest(ckdir)
    listed = {f: h for c in [*manifest["checkpoints"], manifest.get("best") or {}]
              for f, h in (c.get("files") or {}).items() if f.endswith(".safetensors")}
    return sorted(f for f, h in listed.items() if not (ckdir / f).is_file() or sha256_file(ckdir / f) != h)


def verified_best(run_dir: Path) -> Path:
    """Path of ``best.safetensors`` after checking its sha256 against the manifest.

    Accepted when the hash is the manifest's ``best`` entry, or (after a kill between writing a new
    best and recording it) the hash of a step checkpoint the manifest lists.

    Raises:
        DepthlabError: missing, or its hash differs (names the file and suggests ``--checkpoint last``).
    """
    ckdir = Path(run_dir) / CKPT_DIR
    manifest = read_manifest(ckdir)
    best = manifest.get("best") or {}
    if best and _verified(ckdir, best.get("files", {})) is None:
        return ckdir / "best.safetensors"
    path = ckdir / "best.safetensors"
    if path.exists():  # a kill between writing a new (or the first) best and naming it: its bytes are a step's
        digest = sha256_file(path)
        listed = {h for c in manifest["checkpoints"] for f, h in c["files"].items() if f.endswith(".safetensors")}
        if digest in listed:
            return path
    last = any(_verified(ckdir, c.get("files", {})) is None for c in manifest.get("checkpoints", []))
    if not best and path.exists():  # nothing to check it against: neither intact nor damaged
        raise DepthlabError(f"{ckdir / 'manifest.json'} holds no sha256 of best.safetensors, so {path} cannot be "
                            "checked and depthlab does not read it; " + ("try --checkpoint last, " if last else "")
                            + "restore manifest.json from a copy of the run, or start a new run from its best "
                            f"weights, unchecked: {new_run_command(Path(run_dir), True)}")
    fix = ("try --checkpoint last" if last else "no step checkpoint is intact either: restore the run's checkpoints "
           "from a copy or train it again")
    raise DepthlabError(f"{path} is missing or does not match its sha256 in manifest.json (corrupt or "
                        f"replaced); {fix}")


def repair_best(run_dir: Path) -> Optional[str]:
    """On resume: if ``best.safetensors`` fails its check, restore it from the step checkpoint of the
    best step when that one is intact, else drop the manifest's ``best`` so the next improvement
    writes a new one.

    Returns:
        None when best is fine (or there is none), else one sentence saying what was done.
    """
    ckdir = Path(run_dir) / CKPT_DIR
    manifest = read_manifest(ckdir)
    best = manifest.get("best")
    if not best:
        return None
    try:
        verified_best(Path(run_dir))
        return None
    except DepthlabError:
        pass
    fault = ("was missing (deleted?)" if not (ckdir / "best.safetensors").exists() else
             "did not match its sha256 in manifest.json (corrupt or replaced)")
    twin = next((c for c in manifest["checkpoints"] if c["step"] == best.get("step")), None)
    if twin is not None and _verified(ckdir, twin["files"]) is None:
        name = f"{twin['name']}.safetensors"
        atomic_write(ckdir / "best.safetensors", (ckdir / name).read_bytes())
        best["files"] = {"best.safetensors": twin["files"][name]}
        atomic_write(ckdir / "manifest.json", json.dumps(manifest, indent=1).encode())
        return f"best.safetensors {fault}; restored from {name} (the same step)"
    manifest["best"] = None
    atomic_write(ckdir / "manifest.json", json.dumps(manifest, indent=1).encode())
    return (f"best.safetensors {fault} and no intact checkpoint of its step is left; the next evaluation "
            "writes a new best")


def unrecorded_best(run_dir: Path, best_step: int, best_val: float) -> Optional[str]:
    """On resume: a ``best.safetensors`` that manifest.json has no ``best`` entry for (an older run, or one edited by
    hand) would be replaced unseen by the next improvement. It is adopted when its bytes are the listed step
    checkpoint of ``best_step`` (the resumed state's best, val ``best_val`` nats: a kill between writing the first
    best and naming it); else its provenance is unknown and it moves aside, never deleted.

    Returns:
        None when there is nothing to do or it was adopted (manifest ``best`` written), else one sentence naming
        the copy (it ends "the next evaluation writes a new best").
    """
    ckdir = Path(run_dir) / CKPT_DIR
    path = ckdir / "best.safetensors"
    manifest = read_manifest(ckdir)
    if manifest.get("best") or not path.is_file():
        return None
    digest = sha256_file(path)
    twin = next((c for c in manifest["checkpoints"] if c.get("step") == best_step
                 and digest in (c.get("files") or {}).values()), None)
    if twin is not None and math.isfinite(best_val):
        manifest["best"] = {"step": best_step, "val_loss": best_val, "files": {"best.safetensors": digest}}
        atomic_write(ckdir / "manifest.json", json.dumps(manifest, indent=1).encode())
        return None
    aside = ckdir / f"best-unrecorded-{digest[:12]}.safetensors"  # the sha256 in the name: never one over another
    path.replace(aside)
    return (f"{path} is not in manifest.json (no sha256, step or val loss recorded for it, and not the weights of "
            f"the run's best step), so its provenance is unknown; kept as {aside} and the next evaluation writes a "
            "new best")


def later_best(run_dir: Path, step: int) -> Optional[dict]:
    """The manifest's intact ``best`` when it is of a step after ``step`` (a resume that fell back past a damaged
    newer checkpoint), else None."""
    ckdir = Path(run_dir) / CKPT_DIR
    best = read_manifest(ckdir).get("best")
    if not best or int(best.get("step", -1)) <= step or _verified(ckdir, best.get("files") or {}) is not None:
        return None
    return best


def keep_later_best(run_dir: Path, step: int) -> Optional[tuple[Path, dict]]:
    """Before a session resumed at ``step`` can replace a :func:`later_best`: copy it to
    ``best-step-NNNNNN.safetensors``, listed in manifest.json's ``kept`` (never rotated away).

    Returns:
        (the copy, the best's manifest entry), or None when there is no later best.
    """
    best = later_best(run_dir, step)
    if best is None:
        return None
    ckdir = Path(run_dir) / CKPT_DIR
    name = f"best-step-{int(best['step']):06d}.safetensors"
    digest = best["files"]["best.safetensors"]
    manifest = read_manifest(ckdir)
    kept = manifest.setdefault("kept", [])
    if not any((k.get("files") or {}).get(name) == digest for k in kept) or _verified(ckdir, {name: digest}):
        atomic_write(ckdir / name, (ckdir / "best.safetensors").read_bytes())
        kept[:] = [k for k in kept if name not in (k.get("files") or {})]
        kept.append({"step": best["step"], "val_loss": best.get("val_loss"), "files": {name: digest}})
        atomic_write(ckdir / "manifest.json", json.dumps(manifest, indent=1).encode())
    return ckdir / name, best


def better_kept(run_dir: Path, val_loss: Optional[float]) -> Optional[tuple[str, dict]]:
    """The intact best kept aside by a fallback resume (manifest.json's ``kept``, :func:`keep_later_best`) with the
    lowest val loss, when that is below ``val_loss`` (the run's best now; None: it has none): (file name, entry);
    else None, also when the manifest is missing or damaged (the commands that read it say so)."""
    ckdir = Path(run_dir) / CKPT_DIR
    try:
        kept = read_manifest(ckdir, strict=False).get("kept") or []
    except DepthlabError:
        return None
    better = [k for k in kept if isinstance(k, dict) and isinstance(k.get("val_loss"), (int, float))
              and (val_loss is None or not math.isfinite(val_loss) or k["val_loss"] < val_loss)
              and len(k.get("files") or {}) == 1 and _verified(ckdir, k["files"]) is None]
    best = min(better, key=lambda k: k["val_loss"], default=None)
    return None if best is None else (next(iter(best["files"])), best)


def kept_clause(run_dir: Path, val_loss: Optional[float]) -> str:
    """``; a better best is kept aside: checkpoints/best-step-N.safetensors (val X at step N)`` when
    :func:`better_kept` finds one, else ""."""
    kept = better_kept(run_dir, val_loss)
    if kept is None:
        return ""
    name, k = kept
    return f"; a better best is kept aside: {CKPT_DIR}/{name} (val {float(k['val_loss']):.4f} at step {k['step']})"


class NoIntactCheckpoint(DepthlabError):
    """Step checkpoints are listed but none verifies (what to do depends on the command: resume, sample)."""


def latest_checkpoint(run_dir: Path) -> Optional[dict]:
    """Manifest entry of the newest step checkpoint whose files verify, or None if there is none.

    Warns (``UserWarning``) naming each newer checkpoint file that failed verification.

    Raises:
        NoIntactCheckpoint: if checkpoints exist but none verifies.
    """
    ckdir = Path(run_dir) / CKPT_DIR
    manifest = read_manifest(ckdir)
    damaged = []  # (file name, missing?) of each newer checkpoint that failed
    for entry in reversed(manifest["checkpoints"]):
        bad = _verified(ckdir, entry["files"])
        if bad is None:
            for name, missing in damaged:
                fault = ("is missing (deleted?)" if missing else
                         "does not match its sha256 in manifest.json (damaged or replaced)")
                warnings.warn(f"checkpoint file {ckdir / name} {fault}; falling back to the previous checkpoint")
            return entry
        damaged.append((bad, not (ckdir / bad).exists()))
    if manifest["checkpoints"]:
        which = ", ".join(f"{name} {'missing' if missing else 'fails its sha256'}" for name, missing in damaged)
        raise NoIntactCheckpoint(f"no intact step checkpoint in {ckdir}: each one listed in manifest.json has a file "
                                 f"that is missing or fails its sha256 check ({which})")
    return None


def load_weights_file(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Read a safetensors file: (state dict with prefixes stripped, metadata).

    Raises:
        DepthlabError: if the file is missing, truncated or not safetensors.
    """
    try:
        data = Path(path).read_bytes()
        sd = st_load(data)
        from safetensors import safe_open  # header only, for metadata

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except FileNotFoundError:
        raise DepthlabError(f"checkpoint {path} not found") from None
    except Exception as e:  # safetensors raises its own error types for bad headers
        raise DepthlabError(f"checkpoint {path} is corrupt or truncated ({type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else ''})") from None
    if int(meta.get("format", FORMAT_VERSION)) > FORMAT_VERSION:
        raise DepthlabError(f"checkpoint {path} has format {meta['format']}, newer than this depthlab "
                            f"understands ({FORMAT_VERSION}); upgrade depthlab")
    return clean_state_dict(sd), meta


def read_metadata(path: Path) -> dict[str, str]:
    """The string metadata in a safetensors file's header (``config``, ``vocab``, ``step``), without its tensors;
    {} when the file cannot be read (its sha256 check names a damaged one)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except Exception:  # safetensors raises its own error types for bad headers
        return {}


def misfit(model: torch.nn.Module, sd: dict[str, torch.Tensor]) -> str:
    """Why the (prefix-stripped) state dict ``sd`` does not load into ``model``: its missing and unexpected names and
    the weights whose shapes differ (saved vs in this model), at most a few of each; "" when it loads (tied weights
    may be absent)."""
    own = clean_state_dict(model.state_dict())
    tied = set()
    ptrs: dict[int, str] = {}
    for k, v in own.items():
        if v.data_ptr() in ptrs:
            tied.add(k)
        ptrs.setdefault(v.data_ptr(), k)
    missing = [k for k in own if k not in sd and k not in tied]
    unexpected = [k for k in sd if k not in own]
    shapes = [k for k in own if k in sd and tuple(sd[k].shape) != tuple(own[k].shape)]  # in the model's order
    parts = []
    if missing:
        parts.append(f"missing {', '.join(missing[:5])}")
    if unexpected:
        parts.append(f"unexpected {', '.join(unexpected[:5])}")
    if shapes:
        parts.append("shape mismatch " + ", ".join(
            f"{k} {tuple(sd[k].shape)} saved vs {tuple(own[k].shape)} in this model" for k in shapes[:3]))
    return "; ".join(parts)


def load_into(model: torch.nn.Module, sd: dict[str, torch.Tensor], path: Path) -> None:
    """Load a (prefix-stripped) state dict into ``model``; tied weights may be absent.

    Raises:
        DepthlabError: on missing or unexpected keys or shape mismatches, naming them (:func:`misfit`).
    """
    why = misfit(model, sd)
    if why:
        raise DepthlabError(f"checkpoint {path} does not fit this model: {why}")
    target = model
    while hasattr(target, "module") or hasattr(target, "_orig_mod"):
        target = getattr(target, "module", None) or getattr(target, "_orig_mod")
    target.load_state_dict(sd, strict=False)


def load_state(path: Path) -> dict:
    """Trainer state via ``torch.load(weights_only=True)`` (no arbitrary unpickling).

    Raises:
        DepthlabError: if the file is missing or unreadable.
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise DepthlabError(f"trainer state {path} not found") from None
    except Exception as e:
        raise DepthlabError(f"trainer state {path} is corrupt ({type(e).__name__})") from None


def model_config_from_meta(meta: dict[str, str], path: Path) -> ModelConfig:
    """Rebuild the ModelConfig stored in a checkpoint's metadata.

    Raises:
        DepthlabError: if the metadata lacks a config.
    """
    if "config" not in meta:
        raise DepthlabError(f"checkpoint {path} has no depthlab config in its metadata")
    # a checkpoint from before model.position: a learned table
    return ModelConfig(**predating_model(json.loads(meta["config"])["model"]))


# ------------------------------------------------------------------------- resume state
def capture_rng_state(batch_rng: np.random.Generator, device: torch.device) -> dict:
    """Every random-number state a run depends on, as tensors and JSON strings (weights_only-safe).

    Args:
        batch_rng: the trainer's batch-sampling generator.
        device: the training device (its CUDA generator is saved too).

    Returns:
        ``{"torch", "python", "numpy_global", "batch"[, "cuda"]}`` for :func:`restore_rng_state`.
    """
    st = {"torch": torch.get_rng_state(), "python": json.dumps(random.getstate()),
          "numpy_global": json.dumps([x.tolist() if isinstance(x, np.ndarray) else x
                                      for x in np.random.get_state()]),
          "batch": json.dumps(batch_rng.bit_generator.state)}
    if device.type == "cuda":
        st["cuda"] = torch.cuda.get_rng_state(device)
    return st


def restore_rng_state(st: dict, batch_rng: np.random.Generator, device: torch.device) -> None:
    """Put back the states saved by :func:`capture_rng_state` (torch, Python, NumPy, batches, CUDA)."""
    torch.set_rng_state(st["torch"])
    py = json.loads(st["python"])
    random.setstate((py[0], tuple(py[1]), py[2]))
    ng = json.loads(st["numpy_global"])
    np.random.set_state((ng[0], np.array(ng[1], dtype=np.uint32), ng[2], ng[3], ng[4]))
    batch_rng.bit_generator.state = json.loads(st["batch"])
    if device.type == "cuda" and "cuda" in st:
        torch.cuda.set_rng_state(st["cuda"], device)


# ------------------------------------------------------------------------- reading a run's model back
def select_weights(run_dir: Path, which: str = "best") -> Path:
    """The weights file of a run: ``best`` (sha256-checked) or ``last`` (newest intact step checkpoint).

    ``best`` falls back to ``last`` when the run has no best checkpoint yet. A newer checkpoint that
    fails its sha256 check is skipped with a ``UserWarning`` naming it (see :func:`latest_checkpoint`).

    Raises:
        DepthlabError: ``which`` not best/last, no checkpoint, or a corrupt ``best``.
    """
    ckdir = Path(run_dir) / CKPT_DIR
    if which not in ("best", "last"):
        raise DepthlabError(f"--checkpoint must be best or last, got {which!r}")
    if which == "best" and (ckdir / "best.safetensors").exists():
        return verified_best(Path(run_dir))
    try:
        entry = latest_checkpoint(Path(run_dir))
    except NoIntactCheckpoint as e:  # the way forward, as a resume says its own
        best = "--checkpoint best reads the run's best.safetensors; or " \
            if which == "last" and _best_intact(Path(run_dir)) else ""
        raise DepthlabError(f"{e}; {best}restore {ckdir} from a copy of the run, or train the run again") from None
    if entry is None:
        raise RunDir(run_dir).no_checkpoint_error()
    return ckdir / f"{entry['name']}.safetensors"


def _best_intact(run_dir: Path) -> bool:
    """Whether the run's best.safetensors is there and passes its sha256 check (:func:`verified_best`)."""
    if not (run_dir / CKPT_DIR / "best.safetensors").is_file():
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            verified_best(run_dir)
    except (DepthlabError, OSError):
        return False
    return True


class WeightsFallback(UserWarning):
    """The warning of :func:`best_fallback`: ``best`` read from a step checkpoint (a report, which says what it drew
    from its own checkpoints, leaves it out)."""


def best_fallback(run_dir: Path, path: Path) -> Optional[str]:
    """What reading ``best`` from a run without ``best.safetensors`` does: the newest step checkpoint ``path``, which
    :func:`select_weights` gave (the notice names the file, but nothing said whether those are the best weights: for
    a deleted best they may not be). None when ``path`` is best.safetensors, or the run was not yet evaluated (it
    has no best: its newest weights are what ``best`` can mean)."""
    ckdir = Path(run_dir) / CKPT_DIR
    if Path(path).name == "best.safetensors":
        return None
    best = read_manifest(ckdir, strict=False).get("best") or {}
    step = int(read_metadata(path).get("step", -1))
    head = f"{ckdir} has no best.safetensors (deleted?)"
    if not isinstance(best.get("step"), int):
        return None
    if best["step"] == step:
        return (f"{head}; {Path(path).name} is used instead, the step manifest.json records as best ({step}): the "
                "same weights")
    return (f"{head}; manifest.json records the best weights at step {best['step']}, but the newest step checkpoint, "
            f"{Path(path).name} (step {step}), is used instead: not the best weights")


def describe_weights(run_dir: Path, path: Path) -> str:
    """One line saying which weights a command loaded: file, step and the val loss measured there.

    Args:
        run_dir: the run directory.
        path: a weights file of it (from :func:`select_weights`).

    Returns:
        e.g. ``best.safetensors (step 1700, val loss 1.5590 nats)``; the loss is left out when the
        run recorded none at that step.
    """
    step = int(read_metadata(path).get("step", -1))
    losses = {r["step"]: r.get("val_loss") for r in RunDir(run_dir).evals}
    val = losses.get(step)
    loss = f", val loss {float(val):.4f} nats" if isinstance(val, (int, float)) else ""
    return f"{Path(path).name} (step {step}{loss})"


def load_run_tokenizer(run_dir: Path, meta: dict[str, str], path: Path) -> Tokenizer:
    """The tokenizer a checkpoint was trained with.

    Char runs keep their vocabulary in the checkpoint metadata (``vocab``); BPE runs keep
    ``run_dir/tokenizer.json``, whose sha256 the metadata records (``tokenizer_sha256``).

    Args:
        run_dir: the run directory.
        meta: the checkpoint's metadata.
        path: the checkpoint file (for messages).

    Raises:
        DepthlabError: missing ``tokenizer.json`` or one that is not the file the weights were trained with.
    """
    if meta.get("tokenizer", "char") == "char":
        return CharTokenizer(json.loads(meta["vocab"]))
    tfile = Path(run_dir) / TOKENIZER
    try:
        text = tfile.read_text(encoding="utf-8")
    except OSError:
        sha = meta.get("tokenizer_sha256")
        which = f" (the checkpoint records its sha256, {sha[:12]}...)" if sha else ""
        raise DepthlabError(f"{tfile} is missing; the BPE checkpoint {path} cannot be decoded without it: put the "
                            f"run's tokenizer.json back{which}; an export of this run holds the same file, and so does "
                            f"the BPE cache of its corpus where it is kept (data.cache_dir, else {DEFAULT_CACHE})") \
            from None
    tok = BPETokenizer.from_str(text, str(tfile))
    if meta.get("tokenizer_sha256") and tok.sha256 != meta["tokenizer_sha256"]:
        raise DepthlabError(f"{tfile} is not the tokenizer {path} was trained with (sha256 "
                            f"{tok.sha256[:12]}... vs {meta['tokenizer_sha256'][:12]}... in the checkpoint): put the "
                            "run's own tokenizer.json back (an export of this run holds the same file)")
    return tok


def check_run_tokenizer(run_dir: Path, path: Path) -> None:
    """Refuse a BPE run whose ``tokenizer.json`` is not the one the weights file ``path`` records (its header's
    ``tokenizer_sha256``); nothing for a character run or a header without the record.

    Raises:
        DepthlabError: as :func:`load_run_tokenizer` (another file, or none).
    """
    meta = read_metadata(path)
    if meta.get("tokenizer_sha256"):
        load_run_tokenizer(run_dir, meta, path)


# ------------------------------------------------------------------------- the best weights of a run, checked
def best_copy(run_dir: Path) -> Optional[Path]:
    """The intact step checkpoint whose bytes are the manifest's ``best.safetensors`` (best is written as a copy of
    its step's file), or None: no best recorded, no such step checkpoint kept, or it fails its sha256 too."""
    ckdir = Path(run_dir) / CKPT_DIR
    try:
        manifest = read_manifest(ckdir, strict=False)
    except DepthlabError:
        return None
    want = ((manifest.get("best") or {}).get("files") or {}).get("best.safetensors")
    for c in manifest["checkpoints"]:
        files = c.get("files") or {}
        name = next((f for f, h in files.items() if f.endswith(".safetensors") and h == want), None)
        if want and name and _verified(ckdir, files) is None:
            return ckdir / name
    return None


def best_fix(run_dir: Path) -> str:
    """What restores a run's damaged ``best.safetensors``: its step's own intact checkpoint when kept, else a copy."""
    twin = best_copy(run_dir)
    best = Path(run_dir) / CKPT_DIR / "best.safetensors"
    if twin is not None:
        return (f"{twin.name} is the same weights, intact (the manifest's sha256 of best): copy it over the broken "
                f"file (cp {twin} {best}) and run the command again")
    return ("no intact step checkpoint holds the same weights: restore best.safetensors from a copy of the run, or "
            "train the source run again")


def unchecked_best(run_dir: Path, actual: Optional[str] = None) -> Optional[str]:
    """Why ``run_dir``'s ``best.safetensors`` cannot be checked against manifest.json (``--init-from`` then loads it
    unchecked, as a damaged manifest's refusal offers), or None when it matches its sha256 there. ``actual``: the
    file's sha256 when the caller has it (hashed here when None).

    Raises:
        DepthlabError: the file does not match the manifest's sha256 of best (nor of a step checkpoint's weights),
            or the manifest has a format newer than this depthlab (as :func:`read_manifest`).
    """
    ckdir = Path(run_dir) / CKPT_DIR
    m = ckdir / "manifest.json"
    try:
        data = json.loads(m.read_text())
    except (OSError, ValueError) as e:
        return f"{m} is {'missing' if not m.exists() else f'unreadable ({e})'}"
    entries = data.get("checkpoints", []) if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(isinstance(c, dict) for c in entries):
        return f"{m} is not a depthlab checkpoint manifest"
    _refuse_newer_format(m, data, f"--init-from {run_dir}: ")
    best = data.get("best")
    path = ckdir / "best.safetensors"
    actual = actual or sha256_file(path)
    steps = [c for c in entries if isinstance(c.get("files"), dict)]
    listed = {h for c in steps for f, h in c["files"].items() if f.endswith(".safetensors")}
    fault = _unverifiable(best, "best.safetensors")
    if fault is not None and (best or actual not in listed):  # no best named yet: a listed step's bytes are vouched
        return f"{m} {fault}"
    if actual in listed or actual == best["files"]["best.safetensors"]:
        return None  # a step's bytes: a kill between writing a new (or the first) best and naming it (as verified_best)
    raise DepthlabError(f"--init-from {run_dir}: {path} does not match its sha256 in manifest.json (corrupt or "
                        f"replaced); {best_fix(run_dir)}")
