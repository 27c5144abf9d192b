"""Figures of a run directory: loss vs baselines, gradient flow, attention, activations, update ratio.

Every ``plot_*`` function reads what the run recorded (``metrics.jsonl``, ``baselines.json``,
the best checkpoint), writes one PNG into ``run_dir/plots/`` and returns its path, or returns
``None`` when the run holds no data for that figure (an old run, analytics switched off, a run
that failed early). Nothing here raises for missing data; only an unreadable run directory does.
The run directory is read only through :class:`depthlab.rundir.RunDir` and PNGs are written with
:func:`depthlab.rundir.atomic_write`.

matplotlib is used through :class:`matplotlib.figure.Figure` with the Agg canvas, never through
``pyplot``: importing or calling this module changes no global matplotlib state (backend,
rcParams, open figures), so it is safe inside notebooks and servers.

Colours: the Okabe & Ito (2008) colourblind-safe palette for categorical lines, viridis for
depth (block index) and time, cividis for heatmaps. Losses are in nats per character with a
bits-per-character axis on the right (1 bit = ln 2 nats).
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from ..errors import DepthlabError
from ..rundir import CONFIG, METRICS, RunDir, atomic_write, finite_or_none
from ..rundir import PLOTS as PLOT_DIR

__all__ = ["RunData", "load_run_data", "plot_loss", "plot_grad_flow", "plot_grad_layers",
           "plot_attention", "plot_activations", "plot_attn_entropy", "plot_update_ratio",
           "plot_rezero_alpha", "make_all_plots", "PLOTS", "OKABE_ITO"]

LN2 = math.log(2.0)
DPI = 110
PAGE_PX = 1280
"""The narrowest page width a report must fit without horizontal scrolling (CSS pixels)."""
MAX_W = 10.6
"""Widest figure, inches: 10.6 x 110 dpi = 1166 px, inside the report's 1184-px content column
(1240-px column minus 2 x 28 px padding), so every figure shows at 1:1 on a 1280-px page."""
WIDE = (MAX_W, 4.2)   # two panels side by side, inches
TALL = (MAX_W, 7.6)   # 2 x 2 panels

# Okabe & Ito (2008), "Color Universal Design": distinguishable with every common colour-vision deficiency.
OKABE_ITO = {"orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73", "yellow": "#F0E442",
             "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7", "black": "#000000",
             "grey": "#7F7F7F"}
C_TRAIN, C_VAL = OKABE_ITO["blue"], OKABE_ITO["vermillion"]
BASELINE_STYLE = {"uniform": (OKABE_ITO["grey"], ":"), "unigram": (OKABE_ITO["purple"], "--"),
                  "bigram": (OKABE_ITO["green"], "-.")}


# ----------------------------------------------------------------------------- data
def _num(v: Any) -> float:
    """A metrics value as a float for plotting: :func:`~depthlab.rundir.finite_or_none`, None -> NaN.

    Missing, non-numeric and non-finite values (written as "nan"/"inf" strings) all become NaN,
    so a plot shows a gap there; the diagnosis, not the figure, reports the non-finite number.
    """
    f = finite_or_none(v)
    return math.nan if f is None else f


def _dict_or_none(v: Any) -> Optional[dict]:
    return v if isinstance(v, dict) else None


def _by_step(recs: Iterable[dict]) -> list[dict]:
    """The records that have a ``step``, sorted by it."""
    return sorted((r for r in recs if "step" in r), key=lambda r: _num(r["step"]))


class RunData:
    """What a run directory recorded, split by record kind (read once, shared by all plots).

    Everything is read through :class:`depthlab.rundir.RunDir`, so old run directories (records
    without ``kind``) load the same way here as everywhere else.

    Attributes:
        run_dir: the run directory.
        dir: its :class:`~depthlab.rundir.RunDir` reader.
        evals: evaluation records (``step``, ``train_loss``, ``val_loss`` in nats, ``tokens_seen``).
        train: training-step records (``step``, ``loss`` in nats, ``lr``, ``grad_norm``).
        grads: gradient-monitor records (``kind == "grad"``).
        probes: activation-probe records (``kind == "probe"``).
        samples: training-time samples (``kind == "sample"``: ``step``, ``text``), from
            ``train.sample_interval``.
        config: the run's config (nested data/model/train dict) or ``None``.
        summary: the end-of-run summary or ``None``.
        baselines: the corpus baselines or ``None``.
        diagnosis: the diagnosis findings or ``None``.
        All record lists are sorted by ``step``.
    """

    def __init__(self, run_dir: str | Path):
        self.dir = RunDir(run_dir)
        self.run_dir = self.dir.path
        self.evals = _by_step(self.dir.evals)
        self.train = _by_step(r for r in self.dir.metrics("train") if "loss" in r)
        self.grads = _by_step(self.dir.metrics("grad"))
        self.probes = _by_step(self.dir.metrics("probe"))
        self.samples = _by_step(r for r in self.dir.metrics("sample") if isinstance(r.get("text"), str))
        self.config = _dict_or_none(self.dir.config)
        self.summary = _dict_or_none(self.dir.summary)
        self.baselines = _dict_or_none(self.dir.baselines)
        self.diagnosis = _dict_or_none(self.dir.diagnosis)

    @property
    def unit(self) -> str:
        """What one token is: ``char`` for character runs, ``token`` for sub-word (BPE) runs."""
        return "token" if ((self.config or {}).get("data") or {}).get("tokenizer", "char") != "char" else "char"

    def bits_per_char(self, nats: float) -> float:
        """Bits per character of a loss in nats per token: nats / ln 2 for characters; for BPE
        the run's own ratio ``val_bpc / val_loss`` (its characters per token), as the eval records hold."""
        if self.unit == "char":
            return nats / LN2
        ratios = [_num(r.get("val_bpc")) / _num(r.get("val_loss")) for r in self.evals
                  if math.isfinite(_num(r.get("val_bpc"))) and math.isfinite(_num(r.get("val_loss")))
                  and _num(r.get("val_loss")) > 0]
        return nats * ratios[-1] if ratios else math.nan

    def tokens_per_step(self) -> Optional[float]:
        """Tokens consumed per optimizer step (from eval records, else config), or ``None``."""
        for r in reversed(self.evals):
            s, t = _num(r.get("step")), _num(r.get("tokens_seen"))
            if s > 0 and t > 0:
                return t / s
        if self.config:
            m, t = self.config.get("model", {}), self.config.get("train", {})
            try:
                return float(t["batch_size"] * t.get("grad_accum", 1) * m["block_size"])
            except (KeyError, TypeError):
                return None
        return None

    def title(self) -> str:
        """A short run label for figure titles: ``<dir name>: <n_layer> x <variant>``."""
        m = (self.config or {}).get("model", {})
        if m.get("n_layer") is not None and m.get("variant"):
            return f"{self.run_dir.name}: {m['n_layer']} × {m['variant']}"
        return self.run_dir.name


def load_run_data(run_dir: str | Path) -> RunData:
    """Read a run directory for plotting.

    Args:
        run_dir: a directory written by ``depthlab train``.

    Returns:
        A :class:`RunData`.

    Raises:
        DepthlabError: the folder does not exist, or holds neither a config nor a metrics file.
    """
    rd = RunDir(run_dir)
    if not rd.path.exists():
        raise DepthlabError(f"run directory {rd.path} not found; give the out_dir of a depthlab train run")
    if not rd.path.is_dir() or not (rd.file(CONFIG).is_file() or rd.file(METRICS).is_file()):
        raise DepthlabError(f"{rd.path} is not a depthlab run directory (no {CONFIG} or {METRICS}); "
                            "give the out_dir of a depthlab train run")
    return RunData(rd.path)


def _data(run: str | Path | RunData) -> RunData:
    return run if isinstance(run, RunData) else load_run_data(run)


# ----------------------------------------------------------------------------- figure helpers
def _figure(size=WIDE, ncols: int = 2, nrows: int = 1):
    """A bare :class:`~matplotlib.figure.Figure` on its own Agg canvas (no pyplot, no global state)
    and its axes as a (nrows, ncols) array, with the common grid and spine style."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat:
        ax.grid(True, which="major", alpha=0.3, linewidth=0.6)
        ax.spines[["top", "right"]].set_visible(False)
    return fig, axes


def _save(fig, run: RunData, name: str, title: str, subtitle: Optional[str] = None) -> Path:
    import textwrap

    width_chars = int(fig.get_figwidth() * 11)  # ~11 characters per inch at 10 pt
    lines = [title] + (textwrap.wrap(subtitle, width_chars) if subtitle else [])
    fig.suptitle("\n".join(lines), fontsize=10.5, x=0.01, ha="left", linespacing=1.4)
    out = run.run_dir / PLOT_DIR
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, facecolor="white", metadata={"Software": None})
    atomic_write(path, buf.getvalue())  # a reader never sees half a PNG
    return path


def _depth_colours(n: int) -> list:
    """n colours along viridis (dark = first block, yellow = last); stops short of pale yellow."""
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(0.05 + 0.85 * (i / max(1, n - 1))) for i in range(n)]


def _depth_key(fig, ax, n: int, label: str = "block") -> None:
    """Legend for <= 6 depth-coloured lines, a colour bar (block index) for more."""
    if n <= 6:
        ax.legend(fontsize=8, frameon=False, ncols=1 if n <= 3 else 2)
        return
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    sm = ScalarMappable(norm=Normalize(-0.5 / 0.85 * 0.05, n - 1), cmap=colormaps["viridis"])
    cb = fig.colorbar(sm, ax=ax, pad=0.01, fraction=0.05)
    cb.set_label(f"{label} index (0 = nearest the input)", fontsize=8)


def _time_key(fig, ax, steps: Sequence[float]):
    """Colours for one line per logged step (viridis over time) and a colour bar 'step'."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    lo, hi = min(steps), max(steps)
    norm = Normalize(lo, hi if hi > lo else lo + 1)
    cmap = colormaps["viridis"]
    sm = ScalarMappable(norm=norm, cmap=cmap)
    cb = fig.colorbar(sm, ax=ax, pad=0.01, fraction=0.05)
    cb.set_label("training step", fontsize=8)
    return [cmap(norm(s)) for s in steps]


def _series(recs: list[dict], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in recs:
        if key in r:
            xs.append(_num(r["step"]))
            ys.append(_num(r[key]))
    return xs, ys


def _matrix(recs: list[dict], key: str) -> tuple[list[float], list[list[float]]]:
    """Steps and per-block lists of ``key`` (records lacking it or holding null are dropped)."""
    steps, rows = [], []
    for r in recs:
        v = r.get(key)
        if isinstance(v, list) and v:
            steps.append(_num(r["step"]))
            rows.append([_num(x) for x in v])
    return steps, rows


def _log_axis(ax, which: str = "y", values: Sequence[float] = ()) -> None:
    """Log scale with plain tick labels (0.001, 2, 50) instead of 10^x; labels 2 and 5 between
    decades when the data span less than ~1.5 decades."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis = ax.yaxis if which == "y" else ax.xaxis
    getattr(ax, f"set_{which}scale")("log")
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    pos = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    if pos and math.log10(max(pos) / min(pos)) < 1.5:
        def minor(v, _):
            m = v / 10 ** math.floor(math.log10(v) + 1e-9)
            return f"{v:g}" if int(round(m)) in (2, 5) and abs(m - round(m)) < 1e-6 else ""
        axis.set_minor_formatter(FuncFormatter(minor))
    else:
        axis.set_minor_formatter(NullFormatter())


def rank_for_display(v: float) -> float:
    """A recorded rank measure as shown: at most 1.

    :func:`depthlab.analytics.activations.rank_measure` lies in [0, 1]; runs recorded before it
    took the better of the token mean and 0 as the rank-one fit hold the authors' mean-only ratio,
    which can exceed 1 (1.01 for a post-LN stream at init). Their value 1 means the same thing
    the current measure says: the token mean explains nothing, no collapse.
    """
    return min(v, 1.0) if math.isfinite(v) else v


def _positive(vals) -> bool:
    return any(isinstance(v, float) and math.isfinite(v) and v > 0 for v in vals)


def _pick_steps(steps: Sequence[float]) -> list[int]:
    """Indices of the first, middle and last entries (deduplicated, in order)."""
    n = len(steps)
    return sorted({0, n // 2, n - 1}) if n else []


# ----------------------------------------------------------------------------- loss
def _baselines(run: RunData) -> list[tuple[str, float]]:
    out = []
    for name in ("uniform", "unigram", "bigram"):
        b = (run.baselines or {}).get(name)
        v = _num(b.get("nats")) if isinstance(b, dict) else math.nan
        if math.isfinite(v):
            out.append((name, v))
    return out


def plot_loss(run: str | Path | RunData) -> Optional[Path]:
    """Train and validation loss vs optimizer step and vs tokens seen, with the corpus baselines.

    The baselines (uniform ln V, unigram, bigram cross-entropy on val) are labelled horizontal
    lines: a model above the bigram line has not learned to use context yet.

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/loss.png``, or ``None`` when the run logged no losses.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    run = _data(run)
    if not run.evals and not run.train:
        return None
    tps = run.tokens_per_step()
    fig, axes = _figure()
    ax_s, ax_t = axes[0]
    base = _baselines(run)
    finite = []
    for ax, scale, xlabel in ((ax_s, 1.0, "optimizer step"),
                              (ax_t, tps, "tokens seen (characters)")):
        if scale is None:
            ax.text(0.5, 0.5, "tokens per step unknown", transform=ax.transAxes, ha="center")
            continue
        xs, ys = _series(run.train, "loss")
        if xs:
            ax.plot([x * scale for x in xs], ys, color=C_TRAIN, alpha=0.35, lw=1.0,
                    label="train (batch loss)")
            finite += ys
        xs, ys = _series(run.evals, "train_loss")
        if xs:
            ax.plot([x * scale for x in xs], ys, "o-", color=C_TRAIN, ms=3.5, lw=1.6, label="train (eval)")
            finite += ys
        xs, ys = _series(run.evals, "val_loss")
        if xs:
            ax.plot([x * scale for x in xs], ys, "s-", color=C_VAL, ms=3.5, lw=1.8, label="validation")
            finite += ys
        for name, v in base:
            col, ls = BASELINE_STYLE[name]
            ax.axhline(v, color=col, ls=ls, lw=1.3, zorder=1,
                       label=f"{name} baseline {v:.2f} nats ({run.bits_per_char(v):.2f} bits/char)")
            ax.annotate(f"{name} {v:.2f}", xy=(1.0, v), xycoords=("axes fraction", "data"),
                        xytext=(-3, 2), textcoords="offset points", ha="right", va="bottom",
                        fontsize=8, color=col, fontweight="bold", zorder=1)  # curves draw over it
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"cross-entropy (nats/{run.unit})")
        k = run.bits_per_char(1.0)  # bits/char per nat/token: 1/ln 2 for characters
        if math.isfinite(k) and k > 0:
            sec = ax.secondary_yaxis("right", functions=(lambda y, k=k: y * k, lambda y, k=k: y / k))
            sec.set_ylabel("bits/char")
        if scale != 1.0:
            ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 3))
    vals = [v for v in finite if math.isfinite(v)] + [v for _, v in base]
    if vals:
        lo, hi = min(vals), max(vals)
        pad = 0.06 * (hi - lo or 1.0)
        for ax in (ax_s, ax_t):
            ax.set_ylim(lo - pad, hi + pad)
    handles, labels = ax_s.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(handles), 3), fontsize=9,
                   frameon=False)
    best = _num((run.summary or {}).get("best_val_loss"))
    sub = "lower is better; dashed/dotted lines = corpus baselines (a model must beat bigram to use context)"
    if math.isfinite(best):
        sub = f"best validation {best:.3f} nats/{run.unit} = {run.bits_per_char(best):.3f} bits/char; " + sub
    return _save(fig, run, "loss", f"Loss — {run.title()}", sub)


# ----------------------------------------------------------------------------- gradients
def plot_grad_flow(run: str | Path | RunData) -> Optional[Path]:
    """Gradient-flow heatmap: gradient L2 norm of each block (rows) at each logged step (columns).

    Log colour scale, so a gradient that vanishes towards the input shows as a dark band at the
    bottom rows whatever its absolute size.

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/grad_flow.png``, or ``None`` without gradient-monitor records.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    import numpy as np
    from matplotlib.colors import LogNorm

    run = _data(run)
    steps, rows = _matrix(run.grads, "grad_norm_block")
    if not steps:
        return None
    nb = max(len(r) for r in rows)
    M = np.full((nb, len(steps)), np.nan)
    for j, r in enumerate(rows):
        M[: len(r), j] = r
    M[~(np.isfinite(M) & (M > 0))] = np.nan  # log scale: zeros / non-finite become gaps
    if not np.isfinite(M).any():
        return None
    fig, axes = _figure(size=(MAX_W, max(3.2, 1.6 + 0.28 * nb)), ncols=1)
    ax = axes[0, 0]
    ax.grid(False)
    s = np.asarray(steps, dtype=float)
    if len(s) > 1:
        mids = (s[1:] + s[:-1]) / 2
        edges = np.concatenate([[s[0] - (mids[0] - s[0])], mids, [s[-1] + (s[-1] - mids[-1])]])
    else:
        edges = np.array([s[0] - 0.5, s[0] + 0.5])
    lo, hi = np.nanmin(M), np.nanmax(M)
    mesh = ax.pcolormesh(edges, np.arange(nb + 1) - 0.5, np.ma.masked_invalid(M), cmap="cividis",
                         norm=LogNorm(vmin=lo, vmax=hi if hi > lo else lo * 10), shading="flat")
    cb = fig.colorbar(mesh, ax=ax, pad=0.01)
    cb.set_label("gradient L2 norm (log scale)")
    _log_axis(cb.ax, "y", [lo, hi])
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("block (0 = nearest the input)")
    ax.set_yticks(range(nb) if nb <= 24 else range(0, nb, max(1, nb // 12)))
    ratio = M[0, -1] / M[-1, -1] if nb > 1 and np.isfinite(M[0, -1]) and np.isfinite(M[-1, -1]) else None
    sub = "dark rows = little gradient reaches that block"
    if ratio is not None:
        sub = f"at the last step block 0 gets {ratio:.2g}× the gradient norm of block {nb - 1}; " + sub
    return _save(fig, run, "grad_flow", f"Gradient flow per block — {run.title()}", sub)


def plot_grad_layers(run: str | Path | RunData) -> Optional[Path]:
    """Gradient L2 norm per block at the first, middle and last logged steps (log scale), and,
    when recorded, per component (attention, MLP, norms, embeddings, head) at the last step.

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/grad_layers.png``, or ``None`` without gradient-monitor records.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    run = _data(run)
    steps, rows = _matrix(run.grads, "grad_norm_block")
    if not steps or not _positive([v for r in rows for v in r]):
        return None
    comp = None
    for r in reversed(run.grads):
        if isinstance(r.get("grad_norm_component"), dict) and r["grad_norm_component"]:
            comp = (r["step"], r["grad_norm_component"])
            break
    fig, axes = _figure(ncols=2 if comp else 1, size=WIDE if comp else (8.0, 4.2))
    ax = axes[0, 0]
    cols = [OKABE_ITO["sky"], OKABE_ITO["orange"], OKABE_ITO["blue"]]
    picked = _pick_steps(steps)
    for k, i in enumerate(picked):
        r = rows[i]
        ax.plot(range(len(r)), [v if v > 0 else math.nan for v in r], "o-", ms=4, lw=1.6,
                color=cols[k % 3] if len(picked) > 1 else cols[2], label=f"step {steps[i]:g}")
    _log_axis(ax, "y", [rows[i][b] for i in picked for b in range(len(rows[i]))])
    ax.set_xlabel("block (0 = nearest the input)")
    ax.set_ylabel("gradient L2 norm (log scale)")
    nb = max(len(r) for r in rows)
    ax.set_xticks(range(nb) if nb <= 24 else range(0, nb, max(1, nb // 12)))
    ax.legend(fontsize=8, frameon=False)
    ax.set_title("per block, first / middle / last logged step", fontsize=10)
    if comp:
        ax2 = axes[0, 1]
        names = list(comp[1])
        vals = [_num(comp[1][n]) for n in names]
        ax2.barh(range(len(names)), [v if v > 0 else math.nan for v in vals], color=OKABE_ITO["blue"])
        ax2.set_yticks(range(len(names)), names, fontsize=8)
        ax2.invert_yaxis()
        _log_axis(ax2, "x", vals)
        ax2.set_xlabel("gradient L2 norm (log scale)")
        ax2.set_title(f"per component, step {_num(comp[0]):g}", fontsize=10)
    return _save(fig, run, "grad_layers", f"Gradient norm by layer — {run.title()}",
                 "a curve falling steeply towards block 0 = vanishing gradients; rising = exploding")


def plot_update_ratio(run: str | Path | RunData) -> Optional[Path]:
    """Update/weight ratio ‖Δθ‖/‖θ‖ of each block over training, with the ~1e-3 reference line.

    Ratios far above 1e-3 mean the learning rate is high for that layer (weights change fast),
    far below mean it barely learns.

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/update_ratio.png``, or ``None`` without update-ratio records.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    run = _data(run)
    steps, rows = _matrix(run.grads, "update_ratio_block")
    if not steps or not _positive([v for r in rows for v in r]):
        return None
    nb = max(len(r) for r in rows)
    fig, axes = _figure(size=(9.0, 4.2), ncols=1)
    ax = axes[0, 0]
    ax.axhspan(1e-4, 1e-2, color=OKABE_ITO["green"], alpha=0.08, lw=0)
    ax.axhline(1e-3, color=OKABE_ITO["black"], ls="--", lw=1.2)
    ax.annotate("~1e-3 reference", xy=(0.0, 1e-3), xycoords=("axes fraction", "data"), xytext=(3, 3),
                textcoords="offset points", fontsize=8)
    for b, col in enumerate(_depth_colours(nb)):
        ys = [r[b] if b < len(r) and r[b] > 0 else math.nan for r in rows]
        ax.plot(steps, ys, lw=1.5, color=col, label=f"block {b}", marker="o" if len(steps) < 3 else None, ms=3)
    _log_axis(ax, "y", [v for r in rows for v in r] + [1e-4, 1e-2])
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("‖Δθ‖ / ‖θ‖ per step (log scale)")
    _depth_key(fig, ax, nb)
    return _save(fig, run, "update_ratio", f"Update / weight ratio per block — {run.title()}",
                 "shaded band 1e-4 … 1e-2; far above = learning rate too high, far below = too low")


# ----------------------------------------------------------------------------- probes
def plot_activations(run: str | Path | RunData) -> Optional[Path]:
    """Activation statistics per block: residual-stream RMS, sublayer output RMS, rank measure,
    and mean pairwise token cosine, one line per probe step (colour = training step).

    The rank measure ‖X − 1·x̄ᵀ‖ / ‖X‖ (Dong et al. 2021) near 0 means every token's vector has
    collapsed onto the mean: the block can no longer tell positions apart.

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/activations.png``, or ``None`` without probe records.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    run = _data(run)
    panels = [("resid_rms", "residual-stream RMS after the block", True),
              ("rank_measure", "rank measure ‖X − 1x̄ᵀ‖/‖X‖, 0 … 1 (0 = collapsed)", True),
              ("token_cosine", "mean pairwise token cosine (1 = identical)", False)]
    have = [p for p in panels if _matrix(run.probes, p[0])[0]]
    if not have:
        return None
    fig, axes = _figure(size=TALL, ncols=2, nrows=2)
    flat = list(axes.flat)
    for (key, label, logy), ax in zip(panels, [flat[0], flat[2], flat[3]]):
        _per_block_panel(fig, ax, run.probes, key, label, logy)
    _sublayer_panel(flat[1], run.probes[-1])
    return _save(fig, run, "activations", f"Activations per block — {run.title()}",
                 "exploding RMS = no normalisation; rank measure → 0 or cosine → 1 = tokens collapse to one vector")


def _per_block_panel(fig, ax, probes: list[dict], key: str, label: str, logy: bool) -> None:
    """One line per probe step (colour = step) of the per-block list ``key`` against block index."""
    steps, rows = _matrix(probes, key)
    if key == "rank_measure":
        rows = [[rank_for_display(v) for v in r] for r in rows]
    if not steps:
        ax.text(0.5, 0.5, f"no {key} recorded", transform=ax.transAxes, ha="center", color="grey")
        ax.set_axis_off()
        return
    cols = _time_key(fig, ax, steps)
    for s, r, c in zip(steps, rows, cols):
        ax.plot(range(len(r)), r, "o-", ms=3, lw=1.3, color=c)
    if logy and _positive([v for r in rows for v in r]):
        _log_axis(ax, "y", [v for r in rows for v in r])
    if key == "token_cosine":
        fin = [v for r in rows for v in r if math.isfinite(v)]
        ax.set_ylim(min(0.0, min(fin, default=0.0)) - 0.02, max(1.0, max(fin, default=1.0)) + 0.02)
    ax.set_ylabel(label, fontsize=9)
    ax.set_xlabel("block (0 = nearest the input)")
    nb = max(len(r) for r in rows)
    ax.set_xticks(range(nb) if nb <= 24 else range(0, nb, max(1, nb // 12)))


def _sublayer_panel(ax, last: dict) -> None:
    """Attention and MLP output RMS (and the residual stream's) per block, from the last probe record."""
    a, m = last.get("attn_out_rms"), last.get("mlp_out_rms")
    if isinstance(a, list) or isinstance(m, list):
        if isinstance(a, list):
            ax.plot(range(len(a)), [_num(v) for v in a], "o-", color=OKABE_ITO["blue"], label="attention output")
        if isinstance(m, list):
            ax.plot(range(len(m)), [_num(v) for v in m], "s--", color=OKABE_ITO["orange"], label="MLP output")
        if isinstance(last.get("resid_rms"), list):
            r = last["resid_rms"]
            ax.plot(range(len(r)), [_num(v) for v in r], ":", color=OKABE_ITO["grey"], label="residual stream")
        vals = [_num(v) for v in (a or []) + (m or []) + (last.get("resid_rms") or [])]
        if _positive(vals):
            _log_axis(ax, "y", vals)
        ax.set_xticks(range(max(len(a or []), len(m or [])) if max(len(a or []), len(m or [])) <= 24
                      else range(0, len(a or m), max(1, len(a or m) // 12))))
        ax.set_ylabel("RMS", fontsize=9)
        ax.set_xlabel("block (0 = nearest the input)")
        ax.set_title(f"sublayer outputs at step {_num(last['step']):g}", fontsize=10)
        ax.legend(fontsize=8, frameon=False)
    else:
        ax.text(0.5, 0.5, "no sublayer RMS recorded", transform=ax.transAxes, ha="center", color="grey")
        ax.set_axis_off()


def plot_attn_entropy(run: str | Path | RunData) -> Optional[Path]:
    """Attention entropy per head (nats) against ln t, the entropy of uniform attention.

    Left: mean over heads for each block across training. Right: every head of every block at
    the last probe step, as a fraction of the uniform entropy (1.0 = attends to everything
    equally, i.e. uses position/content not at all).

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/attn_entropy.png``, or ``None`` without attention-entropy records.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    run = _data(run)
    recs = [r for r in run.probes if isinstance(r.get("attn_entropy"), list) and r["attn_entropy"]
            and all(isinstance(b, list) for b in r["attn_entropy"])]
    if not recs:
        return None
    steps = [_num(r["step"]) for r in recs]
    ent = [[[_num(h) for h in b] for b in r["attn_entropy"]] for r in recs]
    uni = [_num(r.get("attn_entropy_uniform")) for r in recs]
    fig, axes = _figure(ncols=2)
    _entropy_over_training(fig, axes[0, 0], steps, ent, uni)
    _entropy_per_head(fig, axes[0, 1], ent[-1], uni[-1], steps[-1])
    u = uni[-1]
    sub = "near the dashed line / near 1.0 = attention almost uniform over the visible tokens"
    if math.isfinite(u):
        sub = f"uniform attention over t visible tokens has entropy ln t (mean {u:.2f} nats here); " + sub
    return _save(fig, run, "attn_entropy", f"Attention entropy per head — {run.title()}", sub)


def _entropy_over_training(fig, ax, steps: list[float], ent: list[list[list[float]]], uni: list[float]) -> None:
    """Mean-over-heads entropy (nats) of each block against step, with the uniform mean ln t dashed.

    Args:
        fig, ax: where to draw.
        steps: probe steps.
        ent: per step, per block, per head entropies (nats).
        uni: per step, the mean ln t of uniform causal attention (nats).
    """
    import numpy as np

    nb = max(len(e) for e in ent)
    for b, col in enumerate(_depth_colours(nb)):
        ys = [float(np.nanmean(e[b])) if b < len(e) and e[b] else math.nan for e in ent]
        ax.plot(steps, ys, "o-" if len(steps) < 20 else "-", ms=3, lw=1.5, color=col, label=f"block {b}")
    if any(math.isfinite(u) for u in uni):
        ax.plot(steps, uni, color=OKABE_ITO["black"], ls="--", lw=1.2, label="uniform (mean ln t)")
    ax.set_xlabel("training step")
    ax.set_ylabel("attention entropy (nats), mean over heads")
    top = max([v for e in ent for b in e for v in b if math.isfinite(v)] + [u for u in uni if math.isfinite(u)],
              default=1.0)
    ax.set_ylim(0, top * 1.1 if top > 0 else 1.0)
    if nb <= 6:
        ax.legend(fontsize=8, frameon=False)
    else:
        _depth_key(fig, ax, nb)
        ax.legend(handles=[ax.lines[-1]], fontsize=8, frameon=False)
    ax.set_title("mean entropy per block over training", fontsize=10)


def _entropy_per_head(fig, ax, last: list[list[float]], u: float, step: float) -> None:
    """Heatmap (block x head) of one probe's entropies as a fraction of ln t (nats printed in cells).

    Args:
        fig, ax: where to draw.
        last: per block, per head entropies (nats) at ``step``.
        u: mean ln t of uniform causal attention (nats); NaN shows raw nats instead of the fraction.
        step: the probe step (for the title).
    """
    import numpy as np

    ax.grid(False)
    nh = max(len(b) for b in last)
    M = np.full((len(last), nh), np.nan)
    for b, hs in enumerate(last):
        M[b, : len(hs)] = hs
    frac = M / u if math.isfinite(u) and u > 0 else M
    im = ax.imshow(frac, cmap="cividis", vmin=0, vmax=1 if math.isfinite(u) and u > 0 else None,
                   aspect="auto", origin="lower")
    cb = fig.colorbar(im, ax=ax, pad=0.01)
    cb.set_label("entropy / ln t (1 = uniform)" if math.isfinite(u) and u > 0 else "entropy (nats)")
    if M.size <= 96:
        for (b, h), v in np.ndenumerate(M):
            if math.isfinite(v):
                ax.text(h, b, f"{v:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if frac[b, h] < 0.6 else "black")
    ax.set_xticks(range(nh))
    ax.set_yticks(range(len(last)) if len(last) <= 24 else range(0, len(last), max(1, len(last) // 12)))
    ax.set_xlabel("head")
    ax.set_ylabel("block")
    ax.set_title(f"per head at step {step:g} (numbers in nats)", fontsize=10)


def plot_rezero_alpha(run: str | Path | RunData) -> Optional[Path]:
    """The ReZero gates α (attention and MLP, per block) over training (``rezero`` runs only).

    Args:
        run: a run directory or its :class:`RunData`.

    Returns:
        ``run_dir/plots/rezero_alpha.png``, or ``None`` when no α was recorded.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    run = _data(run)
    recs = [r for r in run.probes if isinstance(r.get("rezero_alpha"), list) and r["rezero_alpha"]]
    if not recs:
        return None
    steps = [_num(r["step"]) for r in recs]
    nb = max(len(r["rezero_alpha"]) for r in recs)
    fig, axes = _figure(ncols=2)
    for k, (ax, name) in enumerate(zip(axes[0], ("attention α", "MLP α"))):
        for b, col in enumerate(_depth_colours(nb)):
            ys = []
            for r in recs:
                a = r["rezero_alpha"]
                ys.append(_num(a[b][k]) if b < len(a) and isinstance(a[b], list) and len(a[b]) > k else math.nan)
            ax.plot(steps, ys, lw=1.5, color=col, label=f"block {b}")
        ax.axhline(0, color=OKABE_ITO["grey"], lw=0.8)
        ax.set_xlabel("training step")
        ax.set_ylabel(name)
        ax.set_title(f"{name} per block", fontsize=10)
        _depth_key(fig, ax, nb)
    return _save(fig, run, "rezero_alpha", f"ReZero gates α over training — {run.title()}",
                 "α starts at 0 (every block the identity); |α| then shows how much each sublayer adds to the "
                 "residual stream")


# ----------------------------------------------------------------------------- attention patterns
def _show_char(c: str) -> str:
    return {"\n": "↵", " ": "␣", "\t": "⇥"}.get(c, c if c.isprintable() else "·")


def _val_snippet(run: RunData, tok, length: int) -> Optional[str]:
    """``length`` characters of the validation split, starting after its first line break."""
    from ..config import RunConfig
    from ..data import load_corpus

    try:
        cfg = RunConfig.from_dict(run.config)
        corpus = load_corpus(cfg.data, seed=cfg.train.seed)
    except Exception:  # noqa: BLE001 - corpus moved or config from another version: no snippet
        return None
    val = corpus.val
    head = corpus.tokenizer.decode([int(i) for i in val[: 400 + length]])
    start = head.find("\n") + 1 if "\n" in head[:200] else 0
    text = head[start: start + length]
    if len(text) < 2 or any(c not in tok.stoi for c in text):
        return None
    return text


def plot_attention(run: str | Path | RunData, snippet: Optional[str] = None,
                   max_len: int = 24) -> Optional[Path]:
    """Attention weights, one heatmap per head, of the first and the last block on a short text.

    Loads the best checkpoint, registers forward hooks on ``transformer.h[i].attn.hook_pattern``
    (removed afterwards) and runs one forward pass; rows are query positions, columns the keys
    they attend to, both labelled with the snippet's characters (↵ newline, ␣ space).

    Args:
        run: a run directory or its :class:`RunData`.
        snippet: text to look at; default: up to ``max_len`` characters of the validation split.
        max_len: longest snippet, in characters (also capped by the model's block_size).

    Returns:
        ``run_dir/plots/attention.png``, or ``None`` without a checkpoint, or when no snippet
        can be encoded with the run's vocabulary.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    import torch

    from ..sample import load_run

    run = _data(run)
    try:
        model, tok = load_run(run.run_dir, "best")
    except DepthlabError:
        return None
    if not hasattr(tok, "stoi"):  # the labels are characters: a BPE run gets no attention figure (yet)
        return None
    T = min(max_len, model.config.block_size)
    text = snippet[:T] if snippet else (_val_snippet(run, tok, T) if run.config else None)
    if text is None or len(text) < 1 or any(c not in tok.stoi for c in text):
        return None
    blocks = sorted({0, model.config.n_layer - 1})
    pats: dict[int, torch.Tensor] = {}
    handles = []
    try:
        for b in blocks:
            def hook(_m, _inp, out, b=b):
                pats[b] = out.detach().float().cpu()
            handles.append(model.transformer.h[b].attn.hook_pattern.register_forward_hook(hook))
        with torch.no_grad():
            model(torch.tensor([tok.encode(text)], dtype=torch.long))
    finally:
        for h in handles:
            h.remove()
    if not pats:
        return None
    fig = _attention_grid(pats, blocks, model.config.n_head, text)
    shown = text.replace("\n", "↵")
    return _save(fig, run, "attention", f"Attention patterns, first and last block — {run.title()}",
                 f"best checkpoint on the validation text “{shown}”; causal: no weight above the diagonal")


HEADS_PER_ROW = 4
"""Attention heads side by side; more heads wrap onto further rows, so the figure fits ``MAX_W``."""


def _attention_grid(pats: dict, blocks: list[int], nh: int, text: str):
    """A figure of one heatmap per (block, head), at most :data:`HEADS_PER_ROW` heads per row.

    Args:
        pats: block index -> attention weights (1, nh, T, T).
        blocks: the blocks to show, in order.
        nh: heads per block.
        text: the snippet (T characters) labelling both axes.

    Returns:
        The figure, at most :data:`MAX_W` inches wide.
    """
    per_row = min(nh, HEADS_PER_ROW)
    rows_per_block = math.ceil(nh / per_row)
    cell = min(0.11 * len(text) + 0.7, (MAX_W - 1.3) / per_row)  # inches per heatmap
    font = 7 if cell >= 0.1 * len(text) + 0.4 else 6
    labels = [_show_char(c) for c in text]
    nrows = len(blocks) * rows_per_block
    fig, axes = _figure(size=(min(1.3 + cell * per_row, MAX_W), 0.9 + (cell + 0.25) * nrows),
                        ncols=per_row, nrows=nrows)
    im = None
    for k, b in enumerate(blocks):
        P = pats[b][0]  # (nh, T, T)
        for h in range(nh):
            r, c = k * rows_per_block + h // per_row, h % per_row
            ax = axes[r, c]
            ax.grid(False)
            im = ax.imshow(P[h].numpy(), cmap="cividis", vmin=0, vmax=1, interpolation="nearest")
            ax.set_xticks(range(len(text)), labels, fontsize=font, family="monospace")
            ax.set_yticks(range(len(text)), labels, fontsize=font, family="monospace")
            ax.tick_params(length=0, pad=1)
            ax.set_title(f"block {b}, head {h}", fontsize=9)
            if c == 0:
                ax.set_ylabel("query (predicting after this char)", fontsize=8)
            if r == nrows - 1 or (h // per_row == rows_per_block - 1 and k == len(blocks) - 1):
                ax.set_xlabel("key (attended-to char)", fontsize=8)
        for h in range(nh, rows_per_block * per_row):  # empty slots of the last row
            axes[k * rows_per_block + h // per_row, h % per_row].set_axis_off()
    cb = fig.colorbar(im, ax=axes, pad=0.01, fraction=0.03, shrink=0.8)
    cb.set_label("attention weight (rows sum to 1)")
    return fig


# ----------------------------------------------------------------------------- all
PLOTS: dict[str, tuple[Callable[[RunData], Optional[Path]], str]] = {
    "loss": (plot_loss, "Training and validation loss against the corpus baselines"),
    "grad_flow": (plot_grad_flow, "Gradient flow: gradient norm per block over training"),
    "grad_layers": (plot_grad_layers, "Gradient norm per block and per component"),
    "update_ratio": (plot_update_ratio, "Update / weight ratio per block"),
    "activations": (plot_activations, "Activation statistics per block"),
    "attn_entropy": (plot_attn_entropy, "Attention entropy per head"),
    "attention": (plot_attention, "Attention patterns on a validation snippet"),
    "rezero_alpha": (plot_rezero_alpha, "ReZero gates over training"),
}
"""Figure name -> (function, one-line caption), in report order."""


def make_all_plots(run_dir: str | Path, skip: Sequence[str] = ()) -> dict[str, Path]:
    """Draw every figure the run has data for.

    Args:
        run_dir: a run directory.
        skip: figure names (keys of :data:`PLOTS`) not to draw, e.g. ``("attention",)`` to avoid
            loading the model.

    Returns:
        Figure name -> PNG path, for the figures that were drawn (report order).

    Raises:
        DepthlabError: ``run_dir`` is not a run directory.
    """
    run = load_run_data(run_dir)
    out = {}
    for name, (fn, _caption) in PLOTS.items():
        if name in skip:
            continue
        p = fn(run)
        if p is not None:
            out[name] = p
    return out
