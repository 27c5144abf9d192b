"""The one figure module of every plot (run report, sweep report, probe): constructor, styles, helpers.

matplotlib is used through :class:`matplotlib.figure.Figure` with the Agg canvas, never through
``pyplot``: :func:`new_figure` is the only place a figure is made, so importing or calling any
plotting code changes no global matplotlib state (backend, rcParams, open figures), and it is
safe inside notebooks and servers. :func:`write_png` is the only place one is written (atomically:
a reader never sees half a PNG).

Colours: the Okabe & Ito (2008) colourblind-safe palette for categorical lines, viridis for
depth (block index) and time, cividis for heatmaps.
"""

from __future__ import annotations

import functools
import io
import math
import textwrap
from pathlib import Path
from typing import Any, Optional, Sequence

from .errors import DepthlabError
from .rundir import PLOTS as PLOT_DIR
from .rundir import REPORT, REPORT_SOFTWARE, RUN_FIGURES, atomic_write, png_text, written_by_report  # noqa: F401 (re-exported)

__all__ = ["DPI", "PAGE_PX", "MAX_W", "WIDE", "TALL", "OKABE_ITO", "C_TRAIN", "C_VAL", "BASELINE_STYLE",
           "new_figure", "panel_grid", "write_png", "save_run_figure", "REPORT_SOFTWARE", "png_text",
           "written_by_report", "check_run_figures", "block_ticks", "depth_colours",
           "depth_key", "time_key", "log_axis", "drawable"]

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
"""Corpus baseline name -> (colour, line style), the same in the run and the sweep report."""


# ----------------------------------------------------------------------------- make and write
def new_figure(size: tuple[float, float] = WIDE, *, dpi: float = DPI, layout: Optional[str] = "constrained"):
    """A bare :class:`~matplotlib.figure.Figure` on its own Agg canvas (no pyplot, no global state).

    Args:
        size: (width, height) in inches; a run-report figure is at most :data:`MAX_W` wide.
        dpi: dots per inch (the report's :data:`DPI`; the probe figure uses 100).
        layout: matplotlib's layout engine (``"constrained"``; None = none: the sweep report lays
            its figures out with ``tight_layout`` when writing them).

    Returns:
        The figure, without axes (:func:`panel_grid` or ``fig.add_subplot`` add them).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=dpi, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def panel_grid(fig, nrows: int = 1, ncols: int = 1):
    """The axes of ``fig`` as a (nrows, ncols) array, with the run report's grid and spine style."""
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat:
        ax.grid(True, which="major", alpha=0.3, linewidth=0.6)
        ax.spines[["top", "right"]].set_visible(False)
    return axes


def write_png(fig, path: str | Path, **savefig: Any) -> Path:
    """Write ``fig`` as a PNG to ``path`` atomically (temp file + rename); ``savefig`` goes to
    :meth:`~matplotlib.figure.Figure.savefig` (``dpi``, ``facecolor``, ...). The folder must exist.

    Raises:
        OSError: the file cannot be written.
    """
    path = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig)
    atomic_write(path, buf.getvalue())
    return path


def _glyphs(family: str) -> frozenset[int]:
    """The code points the font matplotlib picks first for ``family`` ("sans-serif", "monospace") can draw
    (looked up each time: a caller's rcParams may name another font; its character map is read once)."""
    from matplotlib import font_manager

    return _charmap(font_manager.findfont(font_manager.FontProperties(family=[family])))


@functools.lru_cache(maxsize=8)
def _charmap(path: str) -> frozenset[int]:
    from matplotlib.ft2font import FT2Font

    return frozenset(FT2Font(path).get_charmap())


def drawable(text: str, family: str = "sans-serif", brackets: bool = True) -> str:
    """``text`` with each character the ``family`` font lacks (CJK, emoji with the bundled DejaVu fonts) written
    as its code point, ``[U+4E16]`` (``U+4E16`` without ``brackets``, for a one-character tick label).

    matplotlib would draw an empty box for such a character and warn "Glyph ... missing from font(s)" once per
    character; the code point is exact and drawable. Only the first font of the family is asked: a character
    only a fallback font has is written as its code point too (never a box).
    """
    have = _glyphs(family)
    if all(ord(c) in have for c in text):
        return text
    form = "[U+{:04X}]" if brackets else "U+{:04X}"
    return "".join(c if ord(c) in have or c == "\n" else form.format(ord(c)) for c in text)


def check_run_figures(paths: Sequence[str | Path]) -> None:
    """Refuse to replace any file at ``paths``, run figures' places in one ``plots/`` folder, that
    ``depthlab report`` did not write (:func:`written_by_report`); nothing is written.

    Raises:
        DepthlabError: one line naming every such file and the fix.
    """
    refused = [Path(p) for p in paths if (Path(p).exists() or Path(p).is_symlink()) and not written_by_report(p)]
    if not refused:
        return
    one = len(refused) == 1
    files = ", ".join(str(p) for p in refused)
    raise DepthlabError(f"report: {files} {'exists and was' if one else 'exist and were'} not written by depthlab "
                        f"report; refusing to overwrite {'it' if one else 'them'} (move {'it' if one else 'them'} "
                        f"out of {refused[0].parent}, or leave {'that figure' if one else 'those figures'} out with "
                        f"--skip {' '.join(p.stem for p in refused)})")


def save_run_figure(fig, run_dir: Path, name: str, title: str, subtitle: Optional[str] = None) -> Path:
    """Title ``fig`` (the subtitle wrapped to its width) and write it as ``run_dir/plots/<name>.png``.

    ``name`` must be one of :data:`rundir.RUN_FIGURES`, the names ``--overwrite`` knows as depthlab's.

    Raises:
        DepthlabError: a file is at that place that ``depthlab report`` did not write (:func:`check_run_figures`).
    """
    if name not in RUN_FIGURES:
        raise ValueError(f"save_run_figure: {name!r} is not in rundir.RUN_FIGURES")
    width_chars = int(fig.get_figwidth() * 11)  # ~11 characters per inch at 10 pt
    # a run or a corpus written in CJK or emoji: code points, not boxes (before wrapping: they are longer)
    lines = [drawable(title)] + (textwrap.wrap(drawable(subtitle), width_chars) if subtitle else [])
    fig.suptitle("\n".join(lines), fontsize=10.5, x=0.01, ha="left", linespacing=1.4)
    out = Path(run_dir) / PLOT_DIR
    out.mkdir(parents=True, exist_ok=True)
    check_run_figures([out / f"{name}.png"])
    return write_png(fig, out / f"{name}.png", dpi=DPI, facecolor="white", metadata={"Software": REPORT_SOFTWARE})


# ----------------------------------------------------------------------------- axes helpers
def block_ticks(n: int) -> range:
    """Tick positions for ``n`` blocks (or heads): every one up to 24, else about 12 evenly spaced."""
    return range(n) if n <= 24 else range(0, n, max(1, n // 12))


def depth_colours(n: int) -> list:
    """n colours along viridis (dark = first block, yellow = last); stops short of pale yellow."""
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(0.05 + 0.85 * (i / max(1, n - 1))) for i in range(n)]


def depth_key(fig, ax, n: int, label: str = "block") -> None:
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


def time_key(fig, ax, steps: Sequence[float]) -> list:
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


def log_axis(ax, which: str = "y", values: Sequence[float] = ()) -> None:
    """Log scale with plain tick labels (0.001, 2, 50) instead of 10^x; labels 2 and 5 between
    decades when the data span less than ~1.5 decades, and evenly spaced ticks when they span less than a factor
    of 3 (update ratios from 0.0177 to 0.0195 crossed no decade, 2 or 5: the axis had no label)."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

    axis = ax.yaxis if which == "y" else ax.xaxis
    getattr(ax, f"set_{which}scale")("log")
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    pos = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    if pos and max(pos) / min(pos) < 3:
        axis.set_major_locator(MaxNLocator(nbins=4))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}" if v > 0 else ""))
        axis.set_minor_formatter(NullFormatter())
    elif pos and math.log10(max(pos) / min(pos)) < 1.5:
        def minor(v, _):
            m = v / 10 ** math.floor(math.log10(v) + 1e-9)
            return f"{v:g}" if int(round(m)) in (2, 5) and abs(m - round(m)) < 1e-6 else ""
        axis.set_minor_formatter(FuncFormatter(minor))
    else:
        axis.set_minor_formatter(NullFormatter())
