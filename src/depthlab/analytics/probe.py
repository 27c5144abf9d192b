"""The probe at initialisation: gradient flow, activation scale and rank per block, no training.

Library code behind ``depthlab probe`` (the command itself lives in :mod:`depthlab.cli`):
:func:`probe_at_init` measures, :func:`summarise_probe` says what the numbers mean in plain
words, :func:`format_probe_table` and :func:`plot_probe` show them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..errors import DepthlabError

__all__ = ["probe_at_init", "probe_model", "summarise_probe", "plot_probe", "format_probe_table", "PROBE_BATCHES",
           "PROBE_BATCH_SIZE"]

PROBE_BATCHES = 3
PROBE_BATCH_SIZE = 4


def probe_at_init(cfg, n_batches: int = PROBE_BATCHES, batch_size: int = PROBE_BATCH_SIZE,
                  corpus=None) -> dict:
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

    Returns:
        ``{"config": {...model fields...}, "loss": initial loss (nats), "uniform_nats": ln V,
        "layers": [{"block", "grad_norm", "mean_abs_grad", "act_rms", "rank_measure",
        "token_cosine", "attn_entropy", "attn_entropy_uniform"}, ...]}``; ``grad_norm`` is the L2
        norm over all of the block's parameter gradients, ``mean_abs_grad`` the mean |grad| over
        their elements, ``act_rms`` the RMS of the block's output (``hook_resid_post``) and
        ``rank_measure`` Dong et al.'s relative residual of that output (None where undefined).

    Raises:
        DepthlabError: bad sizes or an unreadable corpus.
    """
    import dataclasses

    from ..data import get_batch, load_corpus
    from ..model import GPT

    if n_batches < 1 or batch_size < 1:
        raise DepthlabError("probe needs at least one batch of at least one sequence")
    corpus = corpus if corpus is not None else load_corpus(cfg.data)
    corpus.check_block_size(cfg.model.block_size)
    mcfg = dataclasses.replace(cfg.model, vocab_size=len(corpus.tokenizer.vocab))
    torch.manual_seed(cfg.train.seed)
    model = GPT(mcfg)
    model.eval()
    rng = np.random.default_rng([cfg.train.seed, 3])
    batches = [get_batch(corpus.train, mcfg.block_size, batch_size, rng) for _ in range(n_batches)]
    # A bare stack (plain + none) drives activations through the subnormal range (< 1.2e-38), where x86
    # arithmetic is ~100x slower; flushing them to 0 keeps the probe in seconds and shows the same
    # underflow, one or two blocks earlier at most. Restored to torch's default (off) afterwards.
    flushed = torch.set_flush_denormal(True)
    try:
        measured = probe_model(model, batches)
    finally:
        if flushed:
            torch.set_flush_denormal(False)
    return {"config": {k: getattr(mcfg, k) for k in ("variant", "norm", "n_layer", "n_embd", "n_head",
                                                        "block_size", "activation", "init")},
            "loss": measured["loss"], "uniform_nats": math.log(mcfg.vocab_size),
            "grad_norm_total": measured["grad_norm_total"], "layers": measured["layers"]}


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
    acc = {k: [0.0] * L for k in ("act_rms", "rank_measure", "token_cosine", "attn_entropy")}
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
            acc["rank_measure"][i] += (rm if rm is not None else 0.0) / n
            acc["token_cosine"][i] += (tc if tc is not None else 0.0) / n
            heads = torch.tensor(st["attn_entropy"][i], dtype=torch.float32)
            acc["attn_entropy"][i] += float(heads.mean()) / n
    stats = GradientMonitor(model).grad_stats()
    layers = [{"block": i, "grad_norm": stats.grad_norm_block[i], "mean_abs_grad": stats.mean_abs_grad_block[i],
               "act_rms": acc["act_rms"][i], "rank_measure": None if undefined[i] else acc["rank_measure"][i],
               "token_cosine": None if undefined[i] else acc["token_cosine"][i],
               "attn_entropy": acc["attn_entropy"][i], "attn_entropy_uniform": u} for i in range(L)]
    return {"loss": loss_sum / n, "grad_norm_total": stats.total_norm, "layers": layers}


def _fmt(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:.3e}"


def format_probe_table(result: dict) -> str:
    """Per-block table: block, grad_norm, mean_abs_grad, act_rms, rank_measure, token_cosine."""
    head = (f"{'block':>5}  {'grad_norm':>10}  {'mean_abs_grad':>13}  {'act_rms':>10}  {'rank_measure':>12}  "
            f"{'tok_cos':>8}")
    rows = [head]
    for r in result["layers"]:
        tc = "n/a" if r["token_cosine"] is None else f"{r['token_cosine']:.3f}"
        rows.append(f"{r['block']:>5}  {_fmt(r['grad_norm']):>10}  {_fmt(r['mean_abs_grad']):>13}  "
                    f"{_fmt(r['act_rms']):>10}  {_fmt(r['rank_measure']):>12}  {tc:>8}")
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


def _gradient_check(result: dict, vanish: float, explode: float) -> tuple[Optional[str], Optional[str]]:
    """(finding, all-clear) about gradient magnitude across depth: block 0 vs the last block."""
    g = [r["grad_norm"] for r in result["layers"]]
    L = len(g)
    gr = _ratio(g[0], g[-1]) if L > 1 else 1.0
    zero_g = [i for i, v in enumerate(g) if v == 0.0]
    if len(zero_g) == L:
        return (f"no gradient at all: every block's gradient is exactly 0 (loss {result.get('loss', math.nan):.3f} "
                "nats), so nothing can learn.", None)
    if zero_g:
        return f"gradients are exactly 0 in blocks {_spans(zero_g)}: those blocks cannot learn.", None
    if L > 1 and gr < vanish:
        return (f"vanishing gradients: block 0 receives {gr:.1e} x the gradient of block {L - 1} "
                f"({g[0]:.2e} vs {g[-1]:.2e}); the early blocks will barely learn.", None)
    if L > 1 and gr > explode:
        return (f"exploding gradients toward the input: block 0 receives {gr:.1e} x the gradient of block "
                f"{L - 1} ({g[0]:.2e} vs {g[-1]:.2e}).", None)
    return None, f"gradient magnitude (block 0 / block {L - 1} ratio {gr:.2g})"


def _activation_check(layers: list[dict], act_change: float) -> tuple[Optional[str], Optional[str]]:
    """(finding, all-clear) about the residual-stream RMS across depth: underflow to 0, growth, shrinkage."""
    a = [r["act_rms"] for r in layers]
    L = len(a)
    zero = [i for i, v in enumerate(a) if v == 0.0]
    ar = _ratio(a[-1], a[0]) if L > 1 else 1.0
    if zero:
        return (f"activations underflow: the residual stream is exactly 0 from block {zero[0]} on "
                f"(block 0 RMS {a[0]:.2e}); every later block and the gradient reaching the lower blocks "
                "see nothing -- there is no normalisation and no shortcut to keep the signal alive.", None)
    if L > 1 and (ar > act_change or ar < 1 / act_change):
        word = "grow" if ar > 1 else "shrink"
        return (f"activations {word} by {ar:.1e} x across depth (RMS {a[0]:.2e} at block 0 -> "
                f"{a[-1]:.2e} at block {L - 1}).", None)
    return None, f"activation scale (RMS {a[0]:.2g} -> {a[-1]:.2g})"


def _rank_check(layers: list[dict], collapse: float, underflow: bool) -> tuple[Optional[str], Optional[str]]:
    """(finding, all-clear) about the rank measure of the deepest block (Dong et al. 2021)."""
    defined = [(i, r["rank_measure"]) for i, r in enumerate(layers) if r["rank_measure"] is not None]
    if defined and defined[-1][1] < collapse:
        first_bad = next(i for i, v in defined if v < collapse)
        tc = layers[defined[-1][0]].get("token_cosine")
        tc_txt = f", token cosine {tc:.3f}" if tc is not None else ""
        return (f"rank collapse: the rank measure falls from {defined[0][1]:.3f} at block 0 to "
                f"{defined[-1][1]:.1e} at block {defined[-1][0]}{tc_txt} (below {collapse} from block "
                f"{first_bad}); all positions carry nearly the same vector, so the output cannot depend on "
                "context -- expect a loss stuck near the bigram/unigram level.", None)
    if defined and not underflow:
        return None, f"token diversity (rank measure {defined[0][1]:.2f} -> {defined[-1][1]:.2f})"
    return None, None  # the rank of an all-zero stream is undefined; the underflow sentence says it all


def summarise_probe(result: dict, vanish: float = 1e-2, explode: float = 1e2, act_change: float = 1e2,
                    collapse: float = 0.05) -> list[str]:
    """Plain-words reading of a :func:`probe_at_init` result: what breaks, and where.

    Each check is measured, not assumed: gradient ratio first/last block (vanishing below
    ``vanish``, exploding above ``explode``), activation RMS change across depth (beyond
    ``act_change`` either way, or reaching exactly 0 = underflow), and the rank measure of the
    deepest block (below ``collapse`` = token representations collapse, Dong et al. 2021).

    Returns:
        Sentences, most important first; the last one says which failure modes were *not* found.
    """
    lay = result["layers"]
    cfg = result.get("config", {})
    out: list[str] = []
    nonfinite = [i for i, r in enumerate(lay) if not all(math.isfinite(v) for v in (r["grad_norm"], r["act_rms"]))]
    if nonfinite or not math.isfinite(result.get("loss", 0.0)):
        out.append(f"non-finite numbers at initialisation (blocks {nonfinite[:5]}): the forward pass overflows.")
    underflow = any(r["act_rms"] == 0.0 for r in lay)
    checks = [_gradient_check(result, vanish, explode), _activation_check(lay, act_change),
              _rank_check(lay, collapse, underflow)]
    out += [bad for bad, _ in checks if bad]
    ok = [fine for _, fine in checks if fine]
    if out and ok:
        out.append("not the problem here: " + "; ".join(ok) + ".")
    elif not out:
        out.append(f"healthy at initialisation ({cfg.get('variant', '?')}, {len(lay)} blocks): " + "; ".join(ok)
                   + " all stay in range.")
    # the cause before its consequence: an underflowing stream explains the zero gradients
    out.sort(key=lambda sent: 0 if sent.startswith("activations underflow") else 1)
    if cfg.get("variant") == "rezero":
        out.append("ReZero starts as the identity (every alpha = 0), so at init only the alpha gains get a "
                   "gradient; the sublayer weights start learning once the alphas move.")
    if any(s.startswith("rank collapse") for s in out) and not any(s.startswith("vanishing") for s in out):
        out.append("note: the textbook 'vanishing gradients' explanation does not fit these numbers; the "
                   "failure is in the token representations.")
    return out


def plot_probe(result: dict, path: Path) -> Path:
    """Three panels (log y axes): per-block grad norm, activation RMS and rank measure; PNG at ``path``.

    Uses a bare ``Figure`` with the Agg canvas: matplotlib's global state (backend, pyplot figures)
    is left as the caller had it.

    Args:
        result: the dict of :func:`probe_at_init`.
        path: the PNG file to write.

    Returns:
        ``path``.

    Raises:
        OSError: the file cannot be written.
    """
    import matplotlib.ticker
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    lay = result["layers"]
    x = [r["block"] for r in lay]
    cfg = result.get("config", {})
    fig = Figure(figsize=(12, 3.6), constrained_layout=True)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3)
    panels = (("grad_norm", "gradient L2 norm"), ("act_rms", "activation RMS (block output)"),
              ("rank_measure", "rank measure (Dong et al. 2021)"))
    for ax, (key, title) in zip(axes, panels):
        ys = [r[key] if r[key] is not None and r[key] > 0 and math.isfinite(r[key]) else np.nan for r in lay]
        ax.plot(x, ys, marker="o")
        fin = [v for v in ys if np.isfinite(v)]
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
    fig.suptitle(f"depthlab probe at init: {cfg.get('variant')} + {cfg.get('norm')}, {cfg.get('n_layer')} blocks")
    import io

    from ..rundir import atomic_write

    path = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    atomic_write(path, buf.getvalue())  # temp file + rename: never half a PNG
    return path
