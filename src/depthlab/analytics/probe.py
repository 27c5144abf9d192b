"""The probe at initialisation: gradient flow, activation scale and rank per block, no training.

Library code behind ``depthlab probe`` (the command itself lives in :mod:`depthlab.cli`):
:func:`probe_at_init` measures, :func:`summarise_probe` says what the numbers mean in plain
words, :func:`format_probe_table` shows them as a table and :func:`plot_probe` as a figure
(drawn through :mod:`depthlab.figures`, like every figure).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..config import wiring_label
from ..errors import DepthlabError
from ..figures import new_figure, png_text, write_png
from ..model import DYT_ALPHA0, FINAL_NORM_VARIANTS, require_float32_default
from ..training.subnormals import subnormals_flushed
from ..units import counted, fmt_value
from ..usermodel import check_command
from .rules.evidence import unit_of

__all__ = ["probe_at_init", "probe_model", "probe_verdicts", "summarise_probe", "format_probe_table", "plot_probe",
           "written_by_probe", "check_replaceable", "wiring_label", "PROBE_BATCHES", "PROBE_BATCH_SIZE",
           "PROBE_SOFTWARE"]

PROBE_BATCHES = 3
PROBE_BATCH_SIZE = 4


def probe_at_init(cfg, n_batches: int = PROBE_BATCHES, batch_size: int = PROBE_BATCH_SIZE,
                  corpus=None, command_line: bool = False) -> dict:
    """Build the configured model at initialisation and measure one backward pass per layer.

    The model is built with ``torch.manual_seed(cfg.train.seed)`` (as the trainer does), the
    ``n_batches`` train batches come from a generator seeded with (seed, 3); gradients are those of
    the mean loss over the batches (accumulated, each divided by ``n_batches``), activations are
    averaged over the batches. Runs on CPU in float32, in eval mode (no dropout).

    Args:
        cfg: a :class:`~depthlab.config.RunConfig` (``model`` and ``data`` sections are used).
        n_batches: batches of real text (>= 1).
        batch_size: sequences per batch (>= 1).
        corpus: an already loaded :class:`~depthlab.data.Corpus` (else ``cfg.data`` is loaded).
        command_line: the caller is ``depthlab probe``: errors name its flags (``--probe_batch_size``); else this
            function's arguments (:func:`~depthlab.errors.api_words`).

    Returns:
        ``{"config": {...model fields...}, "loss": initial loss (nats), "uniform_nats": ln V, "unit": a token
        in words (:func:`~depthlab.analytics.rules.evidence.unit_of`: ``character`` or ``token``),
        "norm_eps": the norm's eps (None without a norm), "layers": [{"block", "grad_norm",
        "mean_abs_grad", "weight_norm", "act_rms", "attn_out_rms", "mlp_out_rms", "rank_measure",
        "token_cosine", "attn_entropy", "attn_entropy_uniform"}, ...]}``; ``grad_norm`` is the L2
        norm over all of the block's parameter gradients, ``mean_abs_grad`` the mean |grad| over
        their elements, ``weight_norm`` the L2 norm of the block's weights, ``act_rms`` the RMS of
        the block's output (``hook_resid_post``), ``attn_out_rms`` / ``mlp_out_rms`` those of the
        sublayer outputs before any norm or shortcut (``hook_attn_out`` / ``hook_mlp_out``) and
        ``rank_measure`` Dong et al.'s relative residual of the block output (None where undefined).

    Raises:
        DepthlabError: bad sizes or an unreadable corpus; ``model.source`` (the probe builds
            depthlab's GPT from the model fields: for your own model, ``depthlab check``'s
            ``gradient_flow`` is this probe on its blocks).
    """
    import contextlib

    from ..errors import api_errors

    with contextlib.nullcontext() if command_line else api_errors():
        return _probe_at_init(cfg, n_batches, batch_size, corpus)


def _probe_at_init(cfg, n_batches: int, batch_size: int, corpus) -> dict:
    """:func:`probe_at_init`, its errors in the command line's words."""
    require_float32_default("probe")
    if getattr(cfg.model, "source", None):
        raise DepthlabError(f"probe builds depthlab's GPT from the model fields, not model.source {cfg.model.source}; "
                            f"for your model run `{check_command(cfg.model.source)}` (its gradient_flow rule is this "
                            "probe on your model's blocks)")
    import dataclasses

    from ..data import get_batch, load_corpus
    from ..model import GPT

    for flag, v in (("--batches", n_batches), ("--probe_batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise DepthlabError(f"probe: {flag} must be a whole number >= 1, got {v!r}")
    if corpus is not None and not hasattr(corpus, "check_block_size"):
        raise DepthlabError(f"probe needs corpus from depthlab.data.load_corpus (or None), got {type(corpus).__name__}")
    corpus = corpus if corpus is not None else load_corpus(cfg.data)
    corpus.check_block_size(cfg.model.block_size)
    mcfg = dataclasses.replace(cfg.model, vocab_size=len(corpus.tokenizer.vocab))
    _check_memory(dataclasses.replace(cfg, model=mcfg), batch_size)
    torch.manual_seed(cfg.train.seed)
    model = GPT(mcfg)
    model.eval()
    rng = np.random.default_rng([cfg.train.seed, 3])
    batches = [get_batch(corpus.train, mcfg.block_size, batch_size, rng) for _ in range(n_batches)]
    # A bare stack (plain + none) drives activations through the subnormal range (< 1.2e-38), where x86
    # arithmetic is ~100x slower; flushing them to 0 keeps the probe in seconds and shows the same
    # underflow, one or two blocks earlier at most. The caller's handling is restored afterwards. A block whose
    # stream is that small has no rank measure to trust either way (flushed or not: 0.245 and 0.049 for one
    # block), so the verdicts judge the rank on the blocks above FLOAT_RMS (_rank_check).
    with subnormals_flushed():
        measured = probe_model(model, batches)
    return {"config": {k: getattr(mcfg, k) for k in ("variant", "norm", "n_layer", "n_embd", "n_head",
                                                        "block_size", "activation", "init", "residual_scale",
                                                        "norm_scale")}
            | {"embed_scale": mcfg.built_embed_scale},
            "loss": measured["loss"], "uniform_nats": math.log(mcfg.vocab_size), "norm_eps": _norm_eps(model),
            "unit": unit_of({"data": {"tokenizer": cfg.data.tokenizer}}),
            "grad_norm_total": measured["grad_norm_total"], "layers": measured["layers"]}


def _check_memory(cfg, batch_size: int) -> None:
    """Refuse a probe batch whose forward and backward cannot fit in this machine's RAM, before anything is
    allocated (was: "unexpected RuntimeError: ... can't allocate memory ... please report it"). The estimate is
    the trainer's (:func:`~depthlab.training.runtime.training_memory_bytes`, a step of ``batch_size`` sequences).

    Raises:
        DepthlabError: names the batch, the estimate, the RAM and what to lower.
    """
    import dataclasses
    import os

    from ..training.runtime import training_memory_bytes

    def need_at(b: int) -> float:
        return training_memory_bytes(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, batch_size=b)),
                                     cfg.model.vocab_size)

    need = need_at(batch_size)
    try:
        have = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return  # unknown machine size: let the allocator decide
    if need > 0.9 * have:
        m = cfg.model
        raise DepthlabError(f"probe: a batch of --probe_batch_size {batch_size} sequences of model.block_size "
                            f"{m.block_size} tokens (model.n_embd {m.n_embd}, model.n_layer {m.n_layer}) needs about "
                            f"{need / 2**30:,.0f} GiB for its forward and backward, more than this machine's "
                            f"{have / 2**30:,.0f} GiB of RAM; " + (
                                "lower --probe_batch_size (--batches averages over more batches, one at a time)"
                                if batch_size > 1 and need_at(1) <= 0.9 * have else "even one sequence does not fit: "
                                "lower model.block_size (attention's memory grows with its square), model.n_embd or "
                                "model.n_layer"))


def _norm_eps(model) -> Optional[float]:
    """The eps of the model's LayerNorm / RMSNorm (RMSNorm's ``None`` is float32's machine eps), or None."""
    for m in model.modules():
        if isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm)):
            return float(m.eps) if m.eps is not None else float(torch.finfo(torch.float32).eps)
    return None


def probe_model(model, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> dict:
    """Gradient and activation statistics per block of ``model`` on ``batches``, without an update.

    The activation statistics come from :func:`depthlab.analytics.activations.block_stats` (the
    function the training probe uses), averaged over the batches; the gradients are those of the
    mean loss over the batches (each batch's loss divided by ``len(batches)`` and backpropagated),
    left in the parameters' ``.grad``.

    Args:
        model: a :class:`depthlab.model.GPT` with no gradients accumulated yet.
        batches: ``(x, y)`` pairs of token ids, each (B, T).

    Returns:
        ``{"loss": mean loss (nats), "grad_norm_total", "layers": [...]}``, ``layers`` as in
        :func:`probe_at_init`; ``rank_measure`` and ``token_cosine`` are None for a block where
        the rank measure was undefined on any batch; ``attn_entropy`` is the mean over heads.
    """
    from .activations import block_stats
    from .gradients import GradientMonitor

    n = len(batches)
    L = len(model.transformer.h)
    acc = {k: [0.0] * L for k in ("act_rms", "attn_out_rms", "mlp_out_rms", "rank_measure", "token_cosine",
                                  "attn_entropy")}
    undefined = [False] * L
    loss_sum = 0.0
    u = math.nan
    for x, y in batches:
        st = block_stats(model, x, y)
        (st["_loss"] / n).backward()
        loss_sum += float(st["_loss"].detach())
        u = st["attn_entropy_uniform"]
        for i in range(L):
            rm, tc = st["rank_measure"][i], st["token_cosine"][i]
            undefined[i] |= rm is None
            acc["act_rms"][i] += st["resid_rms"][i] / n
            acc["attn_out_rms"][i] += st["attn_out_rms"][i] / n
            acc["mlp_out_rms"][i] += st["mlp_out_rms"][i] / n
            acc["rank_measure"][i] += (rm if rm is not None else 0.0) / n
            acc["token_cosine"][i] += (tc if tc is not None else 0.0) / n
            heads = torch.tensor(st["attn_entropy"][i], dtype=torch.float32)
            acc["attn_entropy"][i] += float(heads.mean()) / n
    stats = GradientMonitor(model).grad_stats()
    layers = [{"block": i, "grad_norm": stats.grad_norm_block[i], "mean_abs_grad": stats.mean_abs_grad_block[i],
               "weight_norm": stats.weight_norm_block[i], "act_rms": acc["act_rms"][i],
               "attn_out_rms": acc["attn_out_rms"][i], "mlp_out_rms": acc["mlp_out_rms"][i],
               "rank_measure": None if undefined[i] else acc["rank_measure"][i],
               "token_cosine": None if undefined[i] else acc["token_cosine"][i],
               "attn_entropy": acc["attn_entropy"][i], "attn_entropy_uniform": u} for i in range(L)]
    return {"loss": loss_sum / n, "grad_norm_total": stats.total_norm, "layers": layers}


def format_probe_table(result: dict) -> str:
    """Per-block table: block, grad_norm, mean_abs_grad, act_rms, rank_measure, token_cosine."""
    head = (f"{'block':>5}  {'grad_norm':>10}  {'mean_abs_grad':>13}  {'act_rms':>10}  {'rank_measure':>12}  "
            f"{'tok_cos':>8}")
    rows = [head]
    for r in result["layers"]:
        sci = [fmt_value(r[k], ".3e", missing="n/a") for k in ("grad_norm", "mean_abs_grad", "act_rms", "rank_measure")]
        tc = fmt_value(r["token_cosine"], ".3f", missing="n/a")
        rows.append(f"{r['block']:>5}  {sci[0]:>10}  {sci[1]:>13}  {sci[2]:>10}  {sci[3]:>12}  {tc:>8}")
    return "\n".join(rows)


def _spans(idx: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    parts, start = [], idx[0]
    for a, b in zip(idx, idx[1:] + [None]):
        if b != a + 1:
            parts.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(parts)


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return math.inf if a > 0 else 1.0
    return a / b


ADAMW_EPS = 1e-8
"""torch.optim.AdamW's default eps, which the trainer uses: per-element gradients near it get damped steps."""


def _relative_grads(result: dict) -> Optional[list[float]]:
    """Per block ||grad|| / ||weights|| (dimensionless), or None when weight norms were not recorded."""
    lay = result["layers"]
    if not all((r.get("weight_norm") or 0) > 0 for r in lay):
        return None
    return [r["grad_norm"] / r["weight_norm"] for r in lay]


def _gradient_check(result: dict, vanish: float, explode: float, tiny: float) -> tuple[Optional[str], Optional[str]]:
    """(finding, all-clear) about gradient magnitude: across depth (block 0 vs the last block) and
    absolutely (||grad|| / ||weights|| of every block below ``tiny``; ReZero is exempt, its blocks
    are the identity at init by design)."""
    lay = result["layers"]
    g = [r["grad_norm"] for r in lay]
    L = len(g)
    gr = _ratio(g[0], g[-1]) if L > 1 else 1.0
    zero_g = [i for i, v in enumerate(g) if v == 0.0]
    if len(zero_g) == L:
        return (f"no gradient at all: every block's gradient is exactly 0 (loss {result.get('loss', math.nan):.3f} "
                "nats), so nothing can learn.", None)
    if zero_g:
        return f"gradients are exactly 0 in blocks {_spans(zero_g)}: those blocks cannot learn.", None
    rel = _relative_grads(result)
    tiny_all = rel is not None and max(rel) < tiny and result.get("config", {}).get("variant") != "rezero"
    if L > 1 and gr < vanish:
        return (f"vanishing gradients: block 0 receives {gr:.1e} x the gradient of block {L - 1} "
                f"({g[0]:.2e} vs {g[-1]:.2e}); the early blocks will barely learn.", None)
    if L > 1 and gr > explode:
        return (f"exploding gradients toward the input: block 0 receives {gr:.1e} x the gradient of block "
                f"{L - 1} ({g[0]:.2e} vs {g[-1]:.2e}).", None)
    if tiny_all:
        m = [r["mean_abs_grad"] for r in lay]
        txt = (f"tiny gradients in every block: gradient norms {min(g):.1e} to {max(g):.1e}, only {min(rel):.1e} to "
               f"{max(rel):.1e} of the blocks' weight norms (a healthy init gives well above {tiny:g}); they do not "
               f"vanish with depth (block 0 / block {L - 1} ratio {gr:.2g}), they are small everywhere: the loss "
               "hardly depends on the blocks' weights.")
        if min(m) < 10 * ADAMW_EPS:
            where = "near" if max(m) >= ADAMW_EPS / 10 else "below"  # 1e-19 is not "near" 1e-8
            txt += (f" Mean |grad| per element is {min(m):.1e} to {max(m):.1e}, {where} AdamW's eps {ADAMW_EPS:g}, "
                    "which shrinks the optimizer's steps as well.")
        return txt, None
    rel_txt = f"||grad|| / ||weights|| {_range(rel, '.1e')}, " if rel is not None else ""
    if rel is not None and max(rel) < tiny:  # ReZero: its blocks are the identity at init, by design
        rel_txt = rel_txt.replace(", ", " (only the alpha gates get gradient at init), ")
    ratio = f"block 0 / block {L - 1} ratio {gr:.2g}" if L > 1 else "one block: no ratio along depth"
    return None, f"gradient magnitude ({rel_txt}{ratio})"


def _activation_check(layers: list[dict], act_change: float, norm: Optional[str] = None
                      ) -> tuple[Optional[str], Optional[str]]:
    """(finding, all-clear) about the residual-stream RMS across depth: underflow to 0, growth, shrinkage."""
    a = [r["act_rms"] for r in layers]
    L = len(a)
    zero = [i for i, v in enumerate(a) if v == 0.0]
    ar = _ratio(a[-1], a[0]) if L > 1 else 1.0
    if zero:
        why = ("DyT (model.norm dyt) does not rescale a small signal and there is no shortcut to keep it alive"
               if norm == "dyt" else "there is no normalisation and no shortcut to keep the signal alive")
        return (f"activations underflow: the residual stream is exactly 0 from block {zero[0]} on "
                f"(block 0 RMS {a[0]:.2e}); every later block and the gradient reaching the lower blocks "
                f"see nothing -- {why}.", None)
    if L > 1 and (ar > act_change or ar < 1 / act_change):
        word, fold = ("grow", ar) if ar > 1 else ("shrink", 1 / ar)
        return (f"activations {word} {fold:.1e}-fold across depth (RMS {a[0]:.2e} at block 0 -> "
                f"{a[-1]:.2e} at block {L - 1}).", None)
    return None, f"activation scale (RMS {a[0]:.2g}" + (f" -> {a[-1]:.2g})" if len(a) > 1 else ")")


def _eps_check(result: dict) -> Optional[str]:
    """The mechanism when a norm cannot normalise: its input is smaller than sqrt(eps).

    LayerNorm / RMSNorm compute y / sqrt(var(y) + eps) (weights 1 at init), so their output has
    RMS ~1 unless var(y) < eps; then they divide by the constant sqrt(eps) and pass a small signal
    on as a small signal. Checked for the variants whose block output is a norm's output (plain,
    postnorm, deepnorm); the last block's RMS below 0.5 is the sign.
    """
    cfg, lay = result.get("config", {}), result["layers"]
    a = [r["act_rms"] for r in lay]
    if cfg.get("variant") not in ("plain", "postnorm", "deepnorm") or cfg.get("norm") in (None, "none", "dyt"):
        return None  # DyT has no eps: _dyt_check says what a small signal does to it
    if not a or not (0 < a[-1] < 0.5) or not all(math.isfinite(v) for v in a):
        return None
    name = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}.get(cfg["norm"], cfg["norm"])
    low = [i for i, v in enumerate(a) if v < 0.5]
    eps = result.get("norm_eps")
    txt = (f"mechanism: {name}'s eps dominates. A norm's output should have RMS ~1, but "
           + (f"blocks {_spans(low)} give " if len(low) > 1 else f"block {low[0]} gives ")
           + _range([a[i] for i in low], ".1e"))
    if eps:
        txt += f": what the norm receives is smaller than sqrt(eps) = {math.sqrt(eps):.1e}"
    s0 = [lay[0].get(k) for k in ("attn_out_rms", "mlp_out_rms")]
    if cfg["variant"] == "plain" and all(v is not None for v in s0):
        txt += f" (block 0's sublayer outputs: attention RMS {s0[0]:.1e}, MLP {s0[1]:.1e})"
    txt += ", so norm(y) = y / sqrt(var(y) + eps) ~ y / sqrt(eps) scales by a constant instead of normalising"
    if len(a) > 1:
        gain = (a[-1] / a[0]) ** (1 / (len(a) - 1))
        txt += (f"; each block passes on ~{gain:.2g} x the scale it receives, so the signal fades geometrically"
                if gain < 0.9 else "; the stream stays at that small scale" if gain <= 1.1 else
                f"; each block passes on ~{gain:.2g} x the scale it receives, so the stream grows, yet its last block "
                f"is still at {a[-1]:.1e}, below RMS 0.5")
    return (txt + f". The initial weights (model.init {cfg.get('init', '?')}) at width {cfg.get('n_embd', '?')} "
            "make the sublayer outputs this small; a wider model gets outputs above sqrt(eps), its norm restores "
            "RMS ~1, and then only the rank can collapse -- a different mechanism. A shortcut (model.variant "
            "prenorm) or larger initial weights (model.init torch) avoid this one.")


def _dyt_check(result: dict) -> Optional[str]:
    """The mechanism when DyT is the norm and the stream is small: DyT has no statistics.

    DyT(x) = weight * tanh(alpha * x) + bias (weight 1, bias 0, alpha = 0.5 at init; Zhu et al. 2025)
    is ~alpha * x where |x| is well below 1/alpha, so unlike LayerNorm / RMSNorm it does not bring a
    small signal back to RMS ~1. Where a block's output is a DyT's (plain, postnorm, deepnorm) each of
    its two DyTs multiplies the stream by ~alpha; in pre-LN and Peri-LN the final DyT hands the head
    ~alpha x the stream. Said when the last block's RMS is below 0.5 (tanh's linear range at alpha 0.5).
    """
    cfg, lay = result.get("config", {}), result["layers"]
    a = [r["act_rms"] for r in lay]
    if cfg.get("norm") != "dyt" or cfg.get("variant") == "rezero" or not a or not all(math.isfinite(v) for v in a):
        return None
    if not 0 < a[-1] < 0.5:
        return None
    txt = (f"mechanism: DyT does not normalise. tanh(alpha*x) ~ alpha*x for |x| well below 1/alpha, and the "
           f"stream's RMS is {min(a):.1e} to {max(a):.1e}, so each DyT (alpha = {DYT_ALPHA0:g} at init) passes a "
           f"small signal on at ~alpha times its size instead of restoring RMS ~1 as LayerNorm does")
    if cfg.get("variant") in FINAL_NORM_VARIANTS:
        return txt + (f"; the final DyT (ln_f) hands the head RMS ~{DYT_ALPHA0 * a[-1]:.1e}: near-uniform logits and "
                      "small gradients. "
                      + ("The stream is this small because model.init gpt2 draws the embeddings at std 0.02"
                         + (" and model.embed_scale is none. " if cfg.get("embed_scale") == "none" else ". ")
                         if cfg.get("init") == "gpt2" else "")
                      + ("model.embed_scale learned (auto's choice with DyT: the embeddings times a learnable scalar "
                         "that starts the stream at RMS ~1) removes the small signal at init"
                         if cfg.get("embed_scale") == "none" else "The embeddings are small at init")
                      + "; model.norm layernorm normalises it. AdamW's step does not shrink with the gradient's "
                      "size while the gradient stays above its eps 1e-8, so small gradients alone do not stop "
                      "training.")
    if len(a) > 1:
        gain = (a[-1] / a[0]) ** (1 / (len(a) - 1))
        txt += f"; each block passes on ~{gain:.2g} x the scale it receives"
        txt += ", so the signal fades geometrically" if gain < 0.9 else ""
    return txt + (". DyT was designed for pre-LN, where it sits on the branch input and the shortcut carries the "
                  "stream: model.variant prenorm or periln keep it there; model.norm layernorm normalises.")


RANK_DROP = 2.0
"""A rank measure that falls by this factor from the first block to the last ..."""
RANK_LOW = 0.2
"""... and ends below this is a collapse too: each block averages the positions further together (a stack without
shortcuts: plain 6 x 64 falls 0.49 -> 0.14 and trains to the unigram line), though above the absolute line."""


def relative_collapse(layers: list[dict]) -> Optional[str]:
    """The sentence for a rank measure that falls by :data:`RANK_DROP` or more across the blocks and ends below
    :data:`RANK_LOW` (the absolute collapse line, 0.05, is crossed only by deep stacks), else None. ``depthlab
    probe`` and ``depthlab check``'s gradient_flow both judge by it (probe called plain 6 x 64 "in range")."""
    first, last = layers[0]["rank_measure"], layers[-1]["rank_measure"]
    if len(layers) < 2 or first is None or last is None or last >= RANK_LOW or last * RANK_DROP > first:
        return None
    return (f"token diversity collapses across the blocks: the rank measure falls from {first:.2f} (block 0) to "
            f"{last:.2f} (block {len(layers) - 1}), {first / max(last, 1e-12):.1f}x: each block averages the "
            "positions further together, so the input hardly reaches the output")


FLOAT_RMS = 1e-30
"""A stream RMS under which a block's rank measure is not judged: its elements reach float32's subnormal range
(< 1.2e-38), where they keep few digits or are flushed to 0, and the measure of a plain + none 8 x 64's last block
(RMS 7.4e-38) read 0.245 flushed and 0.049 not."""


def _rank_check(layers: list[dict], collapse: float, underflow: bool,
                unit: str = "character") -> tuple[Optional[str], Optional[str]]:
    """(finding, all-clear) about the rank measure of the deepest block (Dong et al. 2021) whose stream RMS is
    :data:`FLOAT_RMS` or more, absolute (below ``collapse``) or relative (:func:`relative_collapse`); ``unit`` a
    token in words (``character`` or ``token``)."""
    judged = len(layers)
    while judged > 1 and layers[judged - 1].get("act_rms") is not None and layers[judged - 1]["act_rms"] < FLOAT_RMS:
        judged -= 1  # the deepest blocks, underflowing: their rank measure is rounding
    layers = layers[:judged]
    defined = [(i, r["rank_measure"]) for i, r in enumerate(layers) if r["rank_measure"] is not None]
    if defined and defined[-1][1] < collapse:
        first_bad = next(i for i, v in defined if v < collapse)
        tc = layers[defined[-1][0]].get("token_cosine")
        tc_txt = f", token cosine {tc:.3f}" if tc is not None else ""
        return (f"rank collapse: the rank measure falls from {defined[0][1]:.3f} at block 0 to "
                f"{defined[-1][1]:.1e} at block {defined[-1][0]} (below {collapse} from block {first_bad}){tc_txt}"
                f"; all positions carry nearly the same vector, so the output cannot depend on "
                f"context, not even on the current {unit} -- expect a loss stuck at the unigram level ({unit} "
                "frequencies).", None)
    relative = None if underflow else relative_collapse(layers)
    if relative:
        return f"{relative}.", None
    if defined and not underflow:
        return None, f"token diversity (rank measure {defined[0][1]:.2f}" + (
            f" -> {defined[-1][1]:.2f})" if len(defined) > 1 else ")")
    return None, None  # the rank of an all-zero stream is undefined; the underflow sentence says it all


def probe_verdicts(result: dict, vanish: float = 1e-2, explode: float = 1e2, act_change: float = 1e2,
                   collapse: float = 0.05, tiny_grad: float = 1e-4) -> tuple[list[str], list[str]]:
    """The probe's verdicts on a :func:`probe_at_init`-shaped result: (problems, all-clears).

    Each check is measured, not assumed: gradient ratio first/last block (vanishing below
    ``vanish``, exploding above ``explode``) and absolute gradient size (every block's
    ||grad|| / ||weights|| below ``tiny_grad``; healthy inits at depth 16 measured ~1e-3 for
    post-LN and DeepNorm, ~3e-2 for pre-LN, ~0.5 for plain at width 192), activation
    RMS change across depth (beyond ``act_change`` either way, or reaching exactly 0 = underflow),
    a norm whose input is below sqrt(eps) (it then cannot normalise), and the rank measure of
    the deepest block (below ``collapse`` = token representations collapse, Dong et al. 2021).
    ``result`` needs ``layers`` (``grad_norm``, ``mean_abs_grad``, ``weight_norm``, ``act_rms``,
    ``rank_measure``, ``token_cosine`` per block) and may have ``loss``, ``config`` and ``norm_eps``:
    :func:`depthlab.analytics.check` builds one for a model depthlab did not write.

    Returns:
        (sentences naming a problem, the cause before its consequence; short phrases naming what
        was measured and found in range).
    """
    lay = result["layers"]
    problems: list[str] = []
    nonfinite = [i for i, r in enumerate(lay) if not all(math.isfinite(v) for v in (r["grad_norm"], r["act_rms"]))]
    if nonfinite or not math.isfinite(result.get("loss", 0.0)):
        problems.append(f"non-finite numbers at initialisation (blocks {nonfinite[:5]}): the forward pass overflows.")
    underflow = any(r["act_rms"] == 0.0 for r in lay)
    eps = _eps_check(result) or _dyt_check(result)
    act = _activation_check(lay, act_change, result.get("config", {}).get("norm"))
    if eps and act[1]:  # the scale is the problem the mechanism names: not also "not the problem here"
        act = (None, None)
    checks = [_gradient_check(result, vanish, explode, tiny_grad), act, (eps, None),
              _rank_check(lay, collapse, underflow, result.get("unit", "character"))]
    problems += [bad for bad, _ in checks if bad]
    # the cause before its consequence: an underflowing stream explains the zero gradients
    problems.sort(key=lambda sent: 0 if sent.startswith("activations underflow") else 1)
    return problems, [fine for _, fine in checks if fine]


def _range(values, spec: str) -> str:
    """``lo to hi`` of ``values`` in format ``spec``, or the one value when they agree as printed."""
    lo, hi = format(min(values), spec), format(max(values), spec)
    return lo if lo == hi else f"{lo} to {hi}"


def summarise_probe(result: dict, vanish: float = 1e-2, explode: float = 1e2, act_change: float = 1e2,
                    collapse: float = 0.05, tiny_grad: float = 1e-4) -> list[str]:
    """Plain-words reading of a :func:`probe_at_init` result: what breaks, where, and by which mechanism.

    The verdicts are :func:`probe_verdicts`' (same thresholds), followed by what was not the problem
    and the notes that explain a variant (ReZero) or rule out the textbook explanation.

    Returns:
        Sentences, most important first; the last one says which failure modes were *not* found.
    """
    lay = result["layers"]
    cfg = result.get("config", {})
    out, ok = probe_verdicts(result, vanish, explode, act_change, collapse, tiny_grad)
    if out and ok:
        out.append("not the problem here: " + "; ".join(ok) + ".")
    elif not out:
        which = " + ".join([str(cfg.get("variant", "?"))] + _scales(cfg))
        out.append(f"healthy at initialisation ({which}, {counted(len(lay), 'block')}): " + "; ".join(ok)
                   + " all stay in range.")
    if cfg.get("variant") == "rezero":
        out.append("ReZero starts as the identity (every alpha = 0), so at init only the alpha gains get a "
                   "gradient; the sublayer weights start learning once the alphas move.")
    if (any(s.startswith("rank collapse") for s in out) and _eps_check(result) is None and _dyt_check(result) is None
            and not any(s.startswith(("vanishing", "tiny gradients")) for s in out)):
        out.append("note: at initialisation, before any update, the textbook 'vanishing gradients' explanation "
                   "does not fit these numbers; the failure is in the token representations. Once training starts "
                   "the gradients of such a stack can vanish too (depthlab diagnose reads the gradients recorded "
                   "during training): both hold, at different moments.")
    return out


_PANELS = (("grad_norm", "gradient L2 norm"), ("act_rms", "activation RMS (block output)"),
           ("rank_measure", "rank measure (Dong et al. 2021)"))


def plot_probe(result: dict, path: str | Path) -> Path:
    """Three panels (log y axes): per-block grad norm, activation RMS and rank measure; PNG at ``path``.

    Args:
        result: the dict of :func:`depthlab.analytics.probe.probe_at_init`.
        path: the PNG file to write (its folder must exist).

    Returns:
        ``path``.

    Raises:
        OSError: the file cannot be written.
    """
    import matplotlib.ticker

    lay = result["layers"]
    x = [r["block"] for r in lay]
    cfg = result.get("config", {})
    fig = new_figure((12, 3.6), dpi=100)
    axes = fig.subplots(1, 3)
    for ax, (key, title) in zip(axes, _PANELS):
        ys = [r[key] if r[key] is not None and r[key] > 0 and math.isfinite(r[key]) else math.nan for r in lay]
        ax.plot(x, ys, marker="o")
        fin = [v for v in ys if math.isfinite(v)]
        if fin:
            ax.set_yscale("log")
            lo, hi = min(fin), max(fin)
            if hi / lo < 100:  # at least two decades, so a flat profile looks flat and not like a cliff
                mid = math.sqrt(lo * hi)
                ax.set_ylim(mid / 10, mid * 10)
        elif all(r[key] == 0 for r in lay):
            ax.text(0.5, 0.5, "all exactly 0", transform=ax.transAxes, ha="center", va="center", color="crimson")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_title(title)
        ax.set_xlabel("block")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"depthlab probe at init: {wiring_label(cfg)}, {cfg.get('n_layer')} blocks x {cfg.get('n_embd')} wide")
    return write_png(fig, path, dpi=100, metadata={"Software": PROBE_SOFTWARE})


#: The PNG ``Software`` text of :func:`plot_probe`: how ``depthlab probe`` knows a file at ``--out`` is its own.
PROBE_SOFTWARE = "depthlab probe"


def _scales(cfg: dict) -> list[str]:
    """``["residual_scale depth", ...]``: the depth scalings a model config turns on."""
    return [f"{k} depth" for k in ("residual_scale", "norm_scale") if cfg.get(k) == "depth"]


def written_by_probe(path: str | Path) -> bool:
    """True when ``path`` is a PNG :func:`plot_probe` wrote: its ``Software`` text (:func:`rundir.png_text`)
    says :data:`PROBE_SOFTWARE`. A symbolic link is never depthlab's."""
    return not Path(path).is_symlink() and png_text(path, "Software") == PROBE_SOFTWARE


def check_replaceable(path: str | Path) -> None:
    """Refuse a ``--out`` that exists and is not a PNG :func:`plot_probe` wrote (or is a symbolic link).

    Raises:
        DepthlabError: names the file and the fix (another ``--out``).
    """
    path = Path(path)
    if path.is_symlink() or path.exists() and not written_by_probe(path):
        raise DepthlabError(f"probe: {path} exists and was not written by depthlab probe; refusing to replace "
                            "it: choose another --out")
