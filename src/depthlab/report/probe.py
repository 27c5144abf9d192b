"""The figure of ``depthlab probe``: per-block gradient norm, activation RMS and rank measure at init.

The measurements come from :func:`depthlab.analytics.probe.probe_at_init`; this module only draws
them, through :mod:`depthlab.report.figures` like every figure (a bare ``Figure`` on the Agg
canvas: matplotlib's global state is left as the caller had it).
"""

from __future__ import annotations

import math
from pathlib import Path

from .figures import new_figure, write_png

__all__ = ["plot_probe"]

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
    wiring = "rezero (no norm)" if cfg.get("variant") == "rezero" else f"{cfg.get('variant')} + {cfg.get('norm')}"
    fig.suptitle(f"depthlab probe at init: {wiring}, {cfg.get('n_layer')} blocks x {cfg.get('n_embd')} wide")
    return write_png(fig, path, dpi=100)
