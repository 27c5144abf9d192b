"""The coordinate check along an axis (depth, width): activation scale at init and over the first steps.

Library code behind ``depthlab coordcheck`` (the command itself lives in :mod:`depthlab.cli`). For
each grid point and each value of the axis (e.g. ``model.n_layer`` = 2, 4, 8, 16) the model is built
as the trainer builds it (``torch.manual_seed(seed)``), measured, trained one step with the run's
own optimizer and learning-rate schedule, measured again, and so on for ``steps`` measurements:
step 1 is the model at initialisation, before any update. Three root-mean-square values are
recorded at each step (:func:`measure`):

* ``resid_rms``: the residual stream after the last block (the last block's output, before any final
  norm: ``hook_resid_post`` of depthlab's GPT). At step 1 it is exactly the init probe's ``act_rms``
  of the last block (:func:`depthlab.analytics.probe.probe_at_init`): same seed, same batches, same
  attention path, same :func:`~depthlab.analytics.activations.rms`.
* ``attn_logits_rms``: the attention logits q.k / sqrt(hs) before the softmax (Vaswani et al. 2017),
  over the causally visible query-key pairs; the **maximum over blocks** (``attn_logits_block`` says
  which block), because growth starts wherever it starts. Measured where a block has a fused
  ``attn.c_attn`` projection (C -> 3C) and ``attn.n_head`` (depthlab's GPT, nanoGPT); None elsewhere.
* ``logits_rms``: the output logits (B, T, V).

Each is the mean over the init probe's batches (``PROBE_BATCHES`` x ``PROBE_BATCH_SIZE`` windows of
the train split, generator seeded with (seed, 3)), then the mean over ``seeds`` seeds
(``train.seed``, ``train.seed + 1``, ...) with the population standard deviation as the spread.

The log-log slope of each quantity against the axis value (least squares of ln RMS on ln value) says
how it scales: slope 0 = independent of the axis, -1 = inversely proportional. The verdict per
variant is read from the slope of ``resid_rms``, the natural coordinate of a coordinate check (what
every block reads and writes; microsoft/mup's coord check, Yang et al. 2022 "Tensor Programs V",
plots the same thing against width): ``stable`` when |slope| < :data:`STABLE_SLOPE` at every step,
else ``grows`` when the largest excursion is a slope >= +STABLE_SLOPE, ``vanishes`` when it is
<= -STABLE_SLOPE; an RMS that reaches exactly 0 at some axis value is ``vanishes``, a non-finite one
``grows``; ``unchanged`` when every axis value measured the same numbers at every step (the field changes
nothing in these steps, so the check has nothing to say about it).

Numbers are float32 on CPU, in eval mode for the measurements and train mode for the updates.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn

from ..errors import DepthlabError
from ..model import apply_rotary, require_float32_default, rotary_table
from ..units import fmt_value
from ..training.subnormals import subnormals_flushed
from ..usermodel import first_tensor
from .activations import record_activations, rms
from .probe import PROBE_BATCH_SIZE, PROBE_BATCHES

__all__ = ["STABLE_SLOPE", "QUANTITIES", "COORDCHECK_HELP", "numeric_fields", "parse_axis", "attention_logits_rms",
           "measure", "loglog_slope", "slope_verdict", "run_point", "coordcheck", "format_coordcheck", "needs_blocks"]

#: |log-log slope| of the residual-stream RMS below which a variant is ``stable``: over n_layer 2 -> 16 (x8)
#: it allows the RMS to change by 8^0.25 = 1.7x. Measured at the default width 128, steps 1-3: pre-LN with no
#: norm -0.00, pre-LN with residual_scale depth -0.08 (stable, far inside), plain with no norm -39 (vanishes).
STABLE_SLOPE = 0.25
#: The verdict of a grid point whose every axis value measured the same numbers at every step: the field is
#: read by training but changes nothing in these steps (``train.min_lr`` inside the warmup; ``train.muon_lr``
#: under AdamW).
UNCHANGED = "unchanged"
#: The RMS values recorded per step, in the order they are printed.
QUANTITIES = ("resid_rms", "attn_logits_rms", "logits_rms")
#: Where a model may keep its blocks as depthlab's GPT does; other models are searched (find_blocks).
_GPT_BLOCKS = "transformer.h"
#: What a block must return, the end of the error when it returns something else (usermodel.first_tensor).
_BLOCK_RETURNS = "it must return the residual stream (B, T, C), or a tuple starting with it"

#: ``depthlab coordcheck --help``'s description (the command's parser lives in :mod:`depthlab.cli`).
COORDCHECK_HELP = (
    "Coordinate check: for each --grid point and each value of --axis (e.g. model.n_layer=2,4,8,16), build the "
    "model as train does, then at steps 1..--steps (step 1 = init, before any update; the updates use the run's "
    f"optimizer, learning-rate schedule (train.warmup_iters) and grad clip, on batches of {PROBE_BATCH_SIZE} train "
    "windows) print the RMS of the residual stream after the last block, of the attention logits q.k/sqrt(hs) "
    f"before the softmax (the max over blocks) and of the output logits, averaged over the init probe's "
    f"{PROBE_BATCHES} x {PROBE_BATCH_SIZE} windows and over --seeds seeds (train.seed, +1, ...; spread = std). Then "
    "the log-log slope of each against the axis and a verdict per variant from the residual stream's slope: "
    f"|slope| < {STABLE_SLOPE:g} at every step = stable, else the larger excursion: >= +{STABLE_SLOPE:g} = grows, "
    f"<= -{STABLE_SLOPE:g} = vanishes (an RMS of exactly 0 = vanishes, inf/NaN = grows; the same numbers at "
    "every value = unchanged). Step 1 equals depthlab probe's act_rms of the last block for the same seed. "
    "float32 on CPU. Works on a model.source model that "
    "keeps its blocks in a ModuleList (vary its own argument: --axis model.init.n_layer=2,4,8).")


# --------------------------------------------------------------------------- the axis
def numeric_fields() -> list[str]:
    """The dotted config fields an axis may vary: the integer and float fields of ``model`` and ``train``."""
    from ..config import ModelConfig, TrainConfig

    out = []
    for sec, klass in (("model", ModelConfig), ("train", TrainConfig)):
        hints = typing.get_type_hints(klass)
        out += [f"{sec}.{f.name}" for f in dataclasses.fields(klass) if hints[f.name] in (int, float)]
    return [k for k in out if k not in UNUSED_FIELDS]


#: Numeric fields the coordinate check never reads, each with why: an axis of one measured the same model at
#: every value, printed identical rows and called them "stable".
UNUSED_FIELDS = {
    "model.vocab_size": "the vocabulary is set from the corpus's tokenizer",
    **{f"train.{k}": "the coordinate check does not read it (each step trains on its own batch of "
       f"{PROBE_BATCH_SIZE} windows; it neither evaluates, logs, checkpoints, samples nor stops early)"
       for k in ("batch_size", "grad_accum", "eval_interval", "eval_iters", "log_interval", "threads", "keep_last",
                 "grad_log_interval", "probe_interval", "target_val_loss", "patience", "min_delta",
                 "sample_interval", "sample_tokens")},
    "train.max_time": "the coordinate check takes exactly --steps steps: no clock stops it or plans its learning-rate "
                      "schedule (train.fit_to_time)"}


def _field_type(key: str) -> type:
    from ..config import ModelConfig, TrainConfig

    sec, _, name = key.partition(".")
    return typing.get_type_hints({"model": ModelConfig, "train": TrainConfig}[sec])[name]


def parse_axis(text: Optional[str], option: str = "--axis") -> tuple[str, list]:
    """Parse ``FIELD=V1,V2,...``: a numeric config field and at least two distinct positive values.

    ``model.init.NAME`` varies a keyword argument of a ``model.source`` model (its own ``n_layer``).

    Args:
        text: e.g. ``model.n_layer=2,4,8,16`` (None: the option was not given).
        option: the option's name, for messages.

    Returns:
        (dotted field, values typed as the field: int or float), in the order given.

    Raises:
        DepthlabError: no axis, no ``=``, an unknown or non-numeric field, a value that is not a number or not
            > 0 (the slope is taken on a log scale), fewer than two distinct values.
    """
    example = f"e.g. {option} model.n_layer=2,4,8,16"
    if text is None:
        raise DepthlabError(f"coordcheck needs {option} FIELD=V1,V2,... the field to vary and its values ({example})")
    key, eq, vals = str(text).partition("=")
    key = key.strip()
    if not eq or not key:
        words = str(text).split()  # "model.n_layer 1,2": the = left out
        meant = f"did you mean {option} {words[0]}={words[1]}? " if len(words) == 2 else ""
        raise DepthlabError(f"{option} {text!r}: expected FIELD=V1,V2,... ({meant}{example})")
    fields = numeric_fields()
    if key in UNUSED_FIELDS:  # was: measured the same model at every value and called it "stable"
        raise DepthlabError(f"{option} {key}: {UNUSED_FIELDS[key]}, so every value would measure the same model; "
                            f"vary another field, {example}")
    if key.startswith("data."):  # was: "not a numeric config field" of data.val_fraction, which is numeric
        raise DepthlabError(f"{option} {key}: the coordinate check varies the model and its training on one corpus, "
                            f"not the data; set {key} itself (--{key} VALUE) and vary a model.* or train.* field, "
                            f"{example}")
    if key.startswith("model.init.") and key[len("model.init."):].isidentifier():
        kind: type = float
    elif key in fields:
        kind = _field_type(key)
    else:
        close = ([f for f in fields if f.partition(".")[2] == key][:1]  # n_layer without its section
                 or difflib.get_close_matches(key, fields, n=1, cutoff=0.75))
        hint = f"did you mean {close[0]}? " if close else ""
        raise DepthlabError(f"{option} {key}: not a numeric config field (the slope is taken against its log; vary "
                            f"other fields with --grid); {hint}choose one of {', '.join(fields)} (or model.init.NAME "
                            f"for a model.source model), {example}")
    values = []
    for item in vals.split(","):
        try:
            v = kind(float(item)) if kind is float else int(item)
        except ValueError:
            what = "a number" if kind is float else "an integer"
            raise DepthlabError(f"{option} {text!r}: {item.strip()!r} is not {what} ({key} takes "
                                f"{'numbers' if kind is float else 'integers'}), {example}") from None
        if not (math.isfinite(v) and v > 0):  # inf is > 0: "must be > 0" of it was false
            what = "must be > 0" if math.isfinite(v) else "is not a finite number > 0"
            raise DepthlabError(f"{option} {text!r}: {item.strip()!r} {what} (the slope is taken against "
                                f"ln {key}), {example}")
        if v in values:  # as the sweep's --grid refuses it: a value given twice is a typo more often than meant
            raise DepthlabError(f"{option} {text!r}: {item.strip()!r} is given twice; list each value of {key} once, "
                                f"{example}")
        values.append(v)
    if len(values) < 2:
        raise DepthlabError(f"{option} {text!r}: a slope needs at least two different values of {key}, {example}")
    if key.startswith("model.init."):
        values = [int(v) if float(v).is_integer() else v for v in values]
    return key, values


def _with(base: dict, key: str, value: Any) -> dict:
    """A copy of the nested config ``base`` with dotted ``key`` (``model.init.NAME`` too) set to ``value``."""
    d = {s: dict(v) if isinstance(v, dict) else v for s, v in base.items()}
    sec, _, name = key.partition(".")
    if key.startswith("model.init."):
        init = d["model"].get("init")
        d["model"]["init"] = {**(init if isinstance(init, dict) else {}), name[len("init."):]: value}
    else:
        d[sec][name] = value
    return d


def _points(base, axis: tuple[str, list], grid: dict[str, list]) -> list[tuple[dict, list]]:
    """[(grid point {field: value}, [RunConfig per axis value])], every config validated up front."""
    from ..config import RunConfig

    key, values = axis
    if key in grid:
        raise DepthlabError(f"{key} is both the --axis and a --grid field; vary it in one of them")
    unused = next((k for k in grid if k in UNUSED_FIELDS), None)
    if unused:  # as on the axis: its grid points measured the same model, in identical tables
        raise DepthlabError(f"--grid {unused}: {UNUSED_FIELDS[unused]}, so every value would measure the same model; "
                            "drop it from --grid")
    if key.startswith("model.init.") and not base.model.source:
        arg = key[len("model.init."):]
        if f"model.{arg}" in numeric_fields():
            raise DepthlabError(f"--axis {key} varies a keyword argument of a model.source model; depthlab's GPT "
                                f"takes {arg} as a model field: --axis model.{arg}=...")
        raise DepthlabError(f"--axis {key} varies a keyword argument of a model.source model, and no --model.source "
                            f"is given; depthlab's GPT has no numeric field {arg} (its numeric fields: "
                            f"{', '.join(f for f in numeric_fields() if f.startswith('model.'))})")
    if base.model.source and key.startswith("model.") and not key.startswith("model.init.") \
            and key != "model.block_size":
        name = key[len("model."):]
        raise DepthlabError(f"--axis {key} describes depthlab's GPT, not model.source {base.model.source}; vary "
                            f"your model's own argument instead: --axis model.init.{name}=...")
    combos: list[dict] = [{}]
    for k, vs in grid.items():
        combos = [{**c, k: v} for c in combos for v in vs]
    out = []
    for point in combos:
        d = base.to_dict()
        for k, v in point.items():
            d = _with(d, k, v)
        out.append((point, [RunConfig.from_dict(_with(d, key, v)) for v in values]))
    return out


# --------------------------------------------------------------------------- one measurement
def needs_blocks(model: nn.Module) -> tuple[str, list[str]]:
    """(container name, module name of each block) of ``model``'s stack of blocks.

    depthlab's GPT keeps them in ``transformer.h``; another model's are found as ``depthlab check``
    finds them (:func:`depthlab.analytics.check.flow.find_blocks`).

    Raises:
        DepthlabError: no stack of blocks (what coordcheck needs, in one line).
    """
    from .check.flow import find_blocks

    name, blocks = find_blocks(model, _GPT_BLOCKS if hasattr(model, "transformer") and
                               hasattr(model.transformer, "h") else None)
    if not blocks:
        raise DepthlabError(f"coordcheck needs the model's blocks: {type(model).__name__} has no ModuleList, "
                            "Sequential or ModuleDict of blocks of one class (like transformer.h), so there is no "
                            "residual stream after the last block to measure; keep the blocks in an nn.ModuleList")
    names = {id(m): n for n, m in model.named_modules()}
    return name, [names[id(b)] for b in blocks]


def _attention_of(model: nn.Module, block_names: Sequence[str]) -> list[Optional[tuple[str, int, bool]]]:
    """Per block: (name of its fused q/k/v projection, n_head, whether it rotates q and k: depthlab's
    ``model.position rope``) when it has ``attn.c_attn`` (C -> 3C) and ``attn.n_head``; else None."""
    mods = dict(model.named_modules())
    out: list[Optional[tuple[str, int, bool]]] = []
    for b in block_names:
        attn = mods.get(f"{b}.attn")
        lin, nh = getattr(attn, "c_attn", None), getattr(attn, "n_head", None)
        ok = (isinstance(lin, nn.Linear) and isinstance(nh, int) and nh > 0 and lin.out_features == 3 * lin.in_features
              and lin.in_features % nh == 0)
        out.append((f"{b}.attn.c_attn", nh, getattr(attn, "rope", False) is True) if ok else None)
    return out


def attention_logits_rms(qkv: torch.Tensor, n_head: int, rope: bool = False) -> float:
    """RMS of the attention logits q.k / sqrt(hs) over the causally visible pairs (key j <= query i).

    Args:
        qkv: the fused projection's output (B, T, 3C), queries | keys | values side by side.
        n_head: nh; hs = C // nh.
        rope: rotate q and k at their positions first (:func:`depthlab.model.apply_rotary`), as attention does
            with ``model.position rope``.

    Returns:
        The RMS (dimensionless: logits before the softmax, Vaswani et al. 2017's scaled dot product).
    """
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    q, k, _ = qkv.detach().float().split(C, dim=2)
    q = q.view(B, T, n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
    k = k.view(B, T, n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
    if rope:
        cos, sin = rotary_table(T, hs, q.dtype, q.device)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, nh, T, T)
    visible = torch.ones(T, T, dtype=torch.bool).tril()
    return rms(att[..., visible])


def measure(model: nn.Module, block_names: Sequence[str], batches: Sequence[tuple[torch.Tensor, torch.Tensor]]
            ) -> dict:
    """The three RMS values of one model, means over ``batches``, in eval mode without gradients.

    depthlab's GPT runs its explicit attention path here (the one the init probe's hooks select), so
    ``resid_rms`` is bit-identical to the probe's ``act_rms`` of the last block.

    Args:
        model: the model; block_names: its blocks' module names (:func:`needs_blocks`).
        batches: (x, y) token ids, each (B, T).

    Returns:
        ``{"resid_rms", "attn_logits_rms" (max over blocks, None when not measurable),
        "attn_logits_block" (the block of that max), "logits_rms"}``.
    """
    from ..training.protocol import ModelPort

    port = ModelPort(model)
    attn = _attention_of(model, block_names)
    names = [block_names[-1]] + [a[0] for a in attn if a is not None]
    n = len(batches)
    resid, logits_acc, att_acc = 0.0, 0.0, [0.0] * len(attn)
    was_training = model.training
    model.eval()
    port.set_attention(True)
    try:
        with torch.no_grad(), record_activations(model, names) as acts:
            for x, y in batches:
                logits = _user_call(port, lambda: port.logits(model, x, y), x)
                resid += rms(first_tensor(acts[block_names[-1]], "coordcheck: a block", _BLOCK_RETURNS)) / n
                logits_acc += rms(logits) / n
                for i, a in enumerate(attn):
                    if a is not None:
                        att_acc[i] += attention_logits_rms(acts[a[0]], a[1], a[2]) / n
    finally:
        port.set_attention(False)
        model.train(was_training)
    measured = [(v, i) for i, v in enumerate(att_acc) if attn[i] is not None]
    top = max(measured, key=lambda vi: vi[0] if math.isfinite(vi[0]) else math.inf) if measured else (None, None)
    return {"resid_rms": resid, "attn_logits_rms": top[0], "attn_logits_block": top[1], "logits_rms": logits_acc}


def _user_call(port, fn: Callable[[], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``fn()``; an exception of a model the user wrote becomes one line with its first line."""
    if port.native:
        return fn()
    from ..usermodel import first_line

    try:
        return fn()
    except DepthlabError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's forward: its error is theirs, in one line
        raise DepthlabError(f"coordcheck: the model's forward failed on idx of shape {tuple(x.shape)}: "
                            f"{first_line(e)}") from None


# --------------------------------------------------------------------------- one configuration, a few steps
def _build(cfg, corpus, seed: int) -> nn.Module:
    """The model a run of ``cfg`` trains, built with ``torch.manual_seed(seed)`` as the trainer and the probe do."""
    from ..usermodel import make_model

    mcfg = dataclasses.replace(cfg.model, vocab_size=len(corpus.tokenizer.vocab))
    torch.manual_seed(seed)
    return make_model(mcfg)


def run_point(cfg, corpus, steps: int, seed: int) -> list[dict]:
    """Measure one configuration at steps 1..``steps`` (step 1 = init), training one step in between.

    The updates are the run's: ``train.optimizer`` (auto = Muon + AdamW on CPU), its learning rate
    at optimizer step 0, 1, ... of the warmup + cosine schedule (``train.warmup_iters``: 0 gives the
    peak rate from the first update), ``train.grad_clip``; each on a fresh batch of
    ``PROBE_BATCH_SIZE`` train windows (generator seeded with (seed, 4)).

    Args:
        cfg: a :class:`~depthlab.config.RunConfig`; corpus: its loaded :class:`~depthlab.data.Corpus`.
        steps: measurements (>= 1). seed: seeds the model and both batch streams.

    Returns:
        One dict per step: ``{"step", "resid_rms", "attn_logits_rms", "attn_logits_block", "logits_rms"}``.
    """
    from ..budget import TimeBudget
    from ..data import get_batch
    from ..training.optimization import LRSchedule, make_optimizer
    from ..training.protocol import ModelPort

    T = cfg.model.block_size
    corpus.check_block_size(T)
    model = _build(cfg, corpus, seed)
    _, block_names = needs_blocks(model)
    rng = np.random.default_rng([seed, 3])  # the init probe's batches (probe_at_init)
    batches = [get_batch(corpus.train, T, PROBE_BATCH_SIZE, rng) for _ in range(PROBE_BATCHES)]
    rows = [{"step": 1, **measure(model, block_names, batches)}]
    if steps == 1:
        return rows  # init only: no optimizer (Muon's first import alone takes seconds)
    train_rng = np.random.default_rng([seed, 4])
    port = ModelPort(model)
    optimizer = make_optimizer(model, cfg.train, torch.device("cpu"))
    schedule = LRSchedule(cfg.train, TimeBudget(cfg.train))
    clip = cfg.train.grad_clip if cfg.train.grad_clip > 0 else math.inf
    for step in range(2, steps + 1):
        model.train()
        schedule.apply(optimizer, step - 2)  # optimizer step 0 leads from measurement 1 to measurement 2
        x, y = get_batch(corpus.train, T, PROBE_BATCH_SIZE, train_rng)
        port.loss(model, x, y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        rows.append({"step": step, **measure(model, block_names, batches)})
    return rows


# --------------------------------------------------------------------------- slopes and verdicts
def loglog_slope(xs: Sequence[float], ys: Sequence[Optional[float]]) -> Optional[float]:
    """Least-squares slope of ln y against ln x (the exponent p of y ~ x^p).

    Returns:
        The slope, or None when fewer than two points have a finite y > 0 (a y of 0 has no logarithm).
    """
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if y is not None and math.isfinite(y) and y > 0]
    if len(pts) < 2 or len({p[0] for p in pts}) < 2:
        return None
    lx = np.array([p[0] for p in pts])
    ly = np.array([p[1] for p in pts])
    dx = lx - lx.mean()
    return float((dx * (ly - ly.mean())).sum() / (dx * dx).sum())


def slope_verdict(slopes: Sequence[Optional[float]], zero: bool = False, nonfinite: bool = False,
                  threshold: float = STABLE_SLOPE) -> str:
    """``stable``, ``grows`` or ``vanishes`` from the residual-stream slopes of every step.

    Args:
        slopes: one log-log slope per step (None where undefined).
        zero: the RMS was exactly 0 at some axis value and step (underflow): ``vanishes``.
        nonfinite: it was inf or NaN somewhere (overflow): ``grows``.
        threshold: |slope| below it at every step is ``stable`` (:data:`STABLE_SLOPE`); otherwise the
            larger excursion decides: a slope >= +threshold ``grows``, <= -threshold ``vanishes``.
    """
    if nonfinite:
        return "grows"
    if zero:
        return "vanishes"
    s = [v for v in slopes if v is not None]
    hi, lo = max(s, default=0.0), min(s, default=0.0)
    if hi < threshold and lo > -threshold:
        return "stable"
    return "grows" if hi >= -lo else "vanishes"


def _label(cfg, point: dict) -> str:
    """The name a verdict goes under: the variant (or the model.source), plus any other grid field."""
    name = str(cfg.model.source) if cfg.model.source else cfg.model.variant
    rest = [f"{k}={v}" for k, v in point.items() if k != "model.variant"]
    return " ".join([name] + rest)


def _aggregate(per_seed: list[list[dict]], step: int) -> dict:
    """Mean and population std over seeds of each quantity at ``step`` (None where unmeasured)."""
    rows = [runs[step] for runs in per_seed]
    out: dict = {}
    for q in QUANTITIES:
        vals = [r[q] for r in rows]
        if any(v is None for v in vals):
            out[q], out[f"{q}_std"] = None, None
            continue
        arr = np.array(vals, dtype=np.float64)
        out[q], out[f"{q}_std"] = float(arr.mean()), float(arr.std())
    out["attn_logits_block"] = rows[0]["attn_logits_block"]
    return out


def _judge(rows: list[dict], values: list, steps: int) -> tuple[list[dict], str]:
    """(slopes per step, verdict) of one grid point's rows."""
    slopes = []
    for step in range(1, steps + 1):
        at = [next(r for r in rows if r["step"] == step and r["axis_value"] == v) for v in values]
        slopes.append({"step": step, **{q: loglog_slope(values, [r[q] for r in at]) for q in QUANTITIES}})
    if all(len({repr(r[q]) for r in rows if r["step"] == step}) == 1
           for step in range(1, steps + 1) for q in QUANTITIES):
        return slopes, UNCHANGED  # a flat line would read "stable": the axis changed nothing the check measures
    resid = [r["resid_rms"] for r in rows]
    verdict = slope_verdict([s["resid_rms"] for s in slopes], zero=any(v == 0 for v in resid),
                            nonfinite=any(not math.isfinite(v) for v in resid))
    return slopes, verdict


def coordcheck(base, axis: tuple[str, list], grid: Optional[dict[str, list]] = None, steps: int = 3,
               seeds: int = 1, log: Optional[Callable[[str], None]] = None) -> dict:
    """The coordinate check: RMS of the residual stream, attention logits and output logits against the axis.

    Args:
        base: the :class:`~depthlab.config.RunConfig` every point starts from.
        axis: (dotted field, values) from :func:`parse_axis`.
        grid: dotted field -> typed values (``depthlab sweep``'s ``--grid``), crossed; None = one point.
        steps: measurements per configuration, >= 1 (step 1 = init, then one update before each next one).
        seeds: seeds averaged (``train.seed`` + 0 .. seeds - 1), >= 1.
        log: progress lines (None = silent).

    Returns:
        ``{"axis": {"field", "values"}, "grid", "steps", "seeds", "threshold", "verdict_on": "resid_rms",
        "attn_logits": "max over blocks", "rows": [{"label", "point", "axis_value", "step", "resid_rms",
        "resid_rms_std", "attn_logits_rms", "attn_logits_rms_std", "attn_logits_block", "logits_rms",
        "logits_rms_std"}], "slopes": [{"label", "step", "resid_rms", "attn_logits_rms", "logits_rms"}],
        "verdicts": {label: verdict}}``; a label is the variant (or the model.source), plus any other
        grid field's value.

    Raises:
        DepthlabError: steps or seeds < 1, a config the fields refuse, a model without blocks, an
            unreadable corpus.
    """
    require_float32_default("coordcheck")
    from ..data import load_corpus

    for name, v, cap in (("--steps", steps, 1000), ("--seeds", seeds, 100)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= cap:
            raise DepthlabError(f"coordcheck: {name} must be an integer from 1 to {cap}, got {v!r}")
    key, values = axis
    points = _points(base, axis, dict(grid or {}))
    corpora: dict = {}
    rows, slopes, verdicts = [], [], {}
    with subnormals_flushed():  # a bare deep stack runs through subnormals (see probe_at_init)
        for point, cfgs in points:
            label = _label(cfgs[0], point)
            mine = []
            for v, cfg in zip(values, cfgs):
                if log:
                    log(f"coordcheck: {label}, {key} = {v}")
                dk = repr(cfg.data)
                corpus = corpora[dk] = corpora.get(dk) or load_corpus(cfg.data)
                per_seed = [run_point(cfg, corpus, steps, cfg.train.seed + k) for k in range(seeds)]
                mine += [{"label": label, "point": point, "axis_value": v, "step": s + 1, **_aggregate(per_seed, s)}
                         for s in range(steps)]
            point_slopes, verdicts[label] = _judge(mine, values, steps)
            rows += mine
            slopes += [{"label": label, **s} for s in point_slopes]
    return {"axis": {"field": key, "values": list(values)}, "grid": dict(grid or {}), "steps": steps,
            "seeds": seeds, "threshold": STABLE_SLOPE, "verdict_on": "resid_rms", "attn_logits": "max over blocks",
            "rows": rows, "slopes": slopes, "verdicts": verdicts}


def _slope_text(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:+.2f}"


def format_coordcheck(result: dict) -> str:
    """The table (one line per label, axis value and step), then the slopes and the verdict per label."""
    key = result["axis"]["field"]
    short = key.rpartition(".")[2]
    seeds = result["seeds"]
    spread = " (mean over %d seeds, +- std)" % seeds if seeds > 1 else ""
    w = max([16] + [len(r["label"]) for r in result["rows"]])
    when = f"steps 1..{result['steps']} (step 1 = init)" if result["steps"] > 1 else "step 1 (init)"
    lines = [f"coordcheck along {key}: RMS at {when}{spread}; attention "
             "logits q.k/sqrt(hs): the max over blocks",
             f"{'variant':<{w}} {short:>8} {'step':>4}  {'resid_rms':>18}  {'attn_logits(max)':>22}  "
             f"{'logits_rms':>18}"]
    for r in result["rows"]:
        cells = []
        for q in QUANTITIES:
            v, sd = r[q], r[f"{q}_std"]
            txt = fmt_value(v, ".3e", missing="n/a")
            if seeds > 1 and sd is not None:
                txt += f" +-{sd:.1e}"
            if q == "attn_logits_rms" and r["attn_logits_block"] is not None:
                txt += f" (b{r['attn_logits_block']})"
            cells.append(txt)
        lines.append(f"{r['label']:<{w}} {r['axis_value']!s:>8} {r['step']:>4}  {cells[0]:>18}  {cells[1]:>22}  "
                     f"{cells[2]:>18}")
    t = result["threshold"]
    lines.append(f"log-log slope against {key} per step (resid / attn logits / logits); verdict on the residual "
                 f"stream: |slope| < {t:g} at every step = stable, else >= +{t:g} = grows, <= -{t:g} = vanishes")
    for label, verdict in result["verdicts"].items():
        per = [s for s in result["slopes"] if s["label"] == label]
        txt = ", ".join(f"step {s['step']} {_slope_text(s['resid_rms'])} / {_slope_text(s['attn_logits_rms'])} / "
                        f"{_slope_text(s['logits_rms'])}" for s in per)
        lines.append(f"{label}: {txt} -> {verdict}")
    same = [label for label, verdict in result["verdicts"].items() if verdict == UNCHANGED]
    if same:  # named: other grid points may have changed (train.muon_lr under adamw and muon)
        where = "" if len(same) == len(result["verdicts"]) else f" at {', '.join(same)}"
        hint = ("vary another field, or take more --steps if it acts only later (past train.warmup_iters, or once "
                "the gradient norm reaches train.grad_clip)")
        if key == "train.muon_lr":  # a rate Muon uses moves step 2: unchanged means Muon does not run there
            hint = "it is Muon's learning rate, and Muon does not train these runs (train.optimizer)"
        lines.append(f"unchanged{where}: every value of {key} measured the same numbers at every step, so this check "
                     f"says nothing about it: {key} changes nothing it measures in {result['steps']} step(s) there; "
                     + hint)
    return "\n".join(lines)
