"""The comparison report of a sweep: ``SWEEP_DIR/report.html`` plus PNGs in ``SWEEP_DIR/plots/``.

Figures per experiment: best val loss vs depth (one line per variant, mean and spread over seeds,
corpus baselines as horizontal lines: the degradation plot); learning curves as small multiples
(one panel per depth); gradient norm per block at init and at the end, per variant; the rank
measure (Dong et al. 2021) per block at init and at the end, per variant. A short text summary is
computed from the numbers, and the ``science`` profile adds a "claim - setting - our numbers -
reproduced?" table. Everything is read back from the run directories, so ``depthlab report
SWEEP_DIR`` rebuilds the same page (and results.csv / results.md) at any time.

matplotlib is used through :class:`matplotlib.figure.Figure` with the Agg canvas (no pyplot).
"""

from __future__ import annotations

import json
import math
import os
import statistics as st
from pathlib import Path
from typing import Any, Optional, Sequence

from ..errors import DepthlabError
from ..rundir import finite_or_none
from .html import Section, esc, html_table, img_tag, render_page
from .plots import BASELINE_STYLE, DPI, LN2, OKABE_ITO

__all__ = ["build_sweep_report", "is_sweep_dir", "aggregate", "summary_lines", "science_claims",
           "VARIANT_COLORS"]

PLOT_DIR = "plots"
VARIANT_COLORS = {"plain": OKABE_ITO["vermillion"], "postnorm": OKABE_ITO["orange"], "prenorm": OKABE_ITO["blue"],
                  "rezero": OKABE_ITO["green"], "deepnorm": OKABE_ITO["purple"]}
_EXTRA_COLORS = [OKABE_ITO[k] for k in ("sky", "black", "yellow", "grey")]
OK = ("ok",)


def is_sweep_dir(path: str | Path) -> bool:
    """True when ``path`` holds a sweep (``sweep.json``), so ``depthlab report`` should build this report."""
    return (Path(path) / "sweep.json").is_file()


# ----------------------------------------------------------------------------- data
_finite = finite_or_none


def _mean_sd(xs: Sequence[float]) -> tuple[float, float, int]:
    xs = [x for x in xs if x is not None]
    if not xs:
        return math.nan, math.nan, 0
    return st.mean(xs), (st.stdev(xs) if len(xs) > 1 else 0.0), len(xs)


def _label(key: str, v: Any) -> str:
    return str(v) if key == "model.variant" else f"{key.split('.')[-1]}={v}"


def _exp_axes(meta: dict, exp: dict) -> tuple[Optional[str], list[str]]:
    """(x field, group fields) of an experiment: x = n_layer when it varies, else the first numeric axis."""
    grid = {k: v for k, v in exp["grid"].items() if len(v) > 1}
    keys = [k for k in grid if k != "train.seed"]
    x = None
    if "model.n_layer" in keys:
        x = "model.n_layer"
    else:
        for k in keys:
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in grid[k]):
                x = k
                break
    groups = [k for k in keys if k != x]
    return x, groups


def _value(cfg: dict, key: str) -> Any:
    sec, name = key.split(".")
    return cfg.get(sec, {}).get(name)


def _group_name(cfg: dict, groups: list[str]) -> str:
    return ", ".join(_label(k, _value(cfg, k)) for k in groups) or "all"


def aggregate(items: list[dict], x: Optional[str], groups: list[str], metric: str = "best_val_loss",
              ok_only: bool = True) -> dict[str, dict[Any, tuple[float, float, int]]]:
    """Mean, sample standard deviation and count of ``metric`` per group and x value (over seeds).

    Args:
        items: per-run dicts with ``config``, ``row`` (a results row).
        x: dotted x field (None = a single point per group).
        groups: dotted fields that define the lines.
        metric: results column to average.
        ok_only: use only runs whose status is ``ok``.

    Returns:
        ``{group name: {x value: (mean, sd, n)}}`` with x values sorted.
    """
    acc: dict[str, dict[Any, list[float]]] = {}
    for it in items:
        if ok_only and it["row"]["status"] not in OK:
            continue
        v = _finite(it["row"].get(metric))
        if v is None:
            continue
        g = _group_name(it["config"], groups)
        xv = _value(it["config"], x) if x else 0
        acc.setdefault(g, {}).setdefault(xv, []).append(v)
    return {g: {xv: _mean_sd(vs) for xv, vs in sorted(d.items(), key=lambda kv: kv[0])} for g, d in acc.items()}


def _color(name: str, i: int) -> str:
    for v, c in VARIANT_COLORS.items():
        if name == v or name.startswith(v + ","):
            return c
    return _EXTRA_COLORS[i % len(_EXTRA_COLORS)]


# ----------------------------------------------------------------------------- figures
def _fig(w: float, h: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, format="png")
    tmp.replace(path)
    return path


def plot_vs_x(items: list[dict], x: Optional[str], groups: list[str], baselines: Optional[dict],
              path: Path, title: str) -> Optional[Path]:
    """Best val loss vs the x field (log2 axis for depth), one line per group, mean +- sd over seeds.

    Args:
        items: per-run dicts (``config``, ``row``).
        x: dotted x field.
        groups: dotted fields that define the lines.
        baselines: ``{"uniform", "unigram", "bigram"}`` in nats, or None.
        path: PNG to write.
        title: axes title.

    Returns:
        The PNG path, or None without data.
    """
    agg = aggregate(items, x, groups)
    if not agg or x is None:
        return None
    fig = _fig(7.5, 4.6)
    ax = fig.add_subplot(111)
    for i, (g, d) in enumerate(sorted(agg.items())):
        xs = list(d)
        m = [d[k][0] for k in xs]
        sd = [d[k][1] for k in xs]
        c = _color(g, i)
        ax.errorbar(xs, m, yerr=sd, color=c, marker="o", capsize=3, lw=2, label=g)
        for it in items:  # individual seeds as small dots
            if it["row"]["status"] in OK and _group_name(it["config"], groups) == g:
                v = _finite(it["row"].get("best_val_loss"))
                if v is not None:
                    ax.plot([_value(it["config"], x)], [v], ".", color=c, alpha=0.45, ms=5)
    for it in items:  # failed runs: a cross at the top
        if it["row"]["status"] not in OK:
            # clip: a failed run's x may lie far outside the axis (e.g. lr 1e3), which would
            # otherwise ask the rasteriser to draw text at an overflowing pixel position
            ax.annotate("x", (_value(it["config"], x), 0.98), xycoords=("data", "axes fraction"),
                        color=_color(_group_name(it["config"], groups), 0), ha="center",
                        annotation_clip=True)
    lo, hi = ax.get_ylim()
    for name, (c, ls) in BASELINE_STYLE.items():
        b = (baselines or {}).get(name)
        if b is not None and (name != "uniform" or b < hi + 0.3):
            ax.axhline(b, color=c, ls=ls, lw=1.2, label=f"{name} baseline {b:.2f}")
    if x == "model.n_layer" or (x and all(v > 0 for d in agg.values() for v in d)):
        vals = sorted({v for d in agg.values() for v in d})
        if len(vals) > 2 and vals[-1] / max(vals[0], 1e-12) >= 8:
            ax.set_xscale("log", base=2)
            ax.set_xticks(vals)
            ax.set_xticklabels([str(v) for v in vals])
    ax.set_xlabel(x.split(".")[-1] + (" (blocks)" if x == "model.n_layer" else ""))
    ax.set_ylabel("best validation loss (nats/char)")
    sec = ax.secondary_yaxis("right", functions=(lambda v: v / LN2, lambda v: v * LN2))
    sec.set_ylabel("bits/char")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _save(fig, path)


def plot_curves(items: list[dict], x: Optional[str], groups: list[str], baselines: Optional[dict],
                path: Path) -> Optional[Path]:
    """Validation loss vs step, one panel per x value, one colour per group, one line per seed.

    Returns:
        The PNG path, or None without evaluation records.
    """
    xs = sorted({_value(it["config"], x) if x else 0 for it in items})
    if not any(len(it["details"]["evals"]) > 1 for it in items):
        return None
    n = len(xs)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig = _fig(3.1 * cols + 0.6, 2.6 * rows + 0.4)
    gnames = sorted({_group_name(it["config"], groups) for it in items})
    ymax = None
    for it in items:
        vs = [e[2] for e in it["details"]["evals"] if _finite(e[2]) is not None]
        if vs:
            ymax = max(ymax or vs[0], vs[0])
    ax0 = None
    for j, xv in enumerate(xs):
        ax = fig.add_subplot(rows, cols, j + 1, sharey=ax0)
        ax0 = ax0 or ax
        for it in items:
            if (x and _value(it["config"], x) != xv):
                continue
            ev = [(s, v) for s, _, v in it["details"]["evals"] if _finite(v) is not None]
            if not ev:
                continue
            g = _group_name(it["config"], groups)
            ax.plot([e[0] for e in ev], [e[1] for e in ev], color=_color(g, gnames.index(g)), lw=1.4,
                    alpha=0.85, label=g)
        for name in ("unigram", "bigram"):
            b = (baselines or {}).get(name)
            if b is not None:
                c, ls = BASELINE_STYLE[name]
                ax.axhline(b, color=c, ls=ls, lw=1)
        ax.set_title(f"{x.split('.')[-1]} = {xv}" if x else "runs", fontsize=10)
        ax.grid(alpha=0.3)
        ax.set_xlabel("step", fontsize=8)
        if j % cols == 0:
            ax.set_ylabel("val loss (nats/char)", fontsize=8)
        ax.tick_params(labelsize=8)
        if j == 0:
            h, lab = ax.get_legend_handles_labels()
            uniq = dict(zip(lab, h))
            ax.legend(uniq.values(), uniq.keys(), fontsize=7)
    if ymax is not None and baselines and baselines.get("unigram"):
        ax0.set_ylim(top=min(ymax, baselines.get("uniform", ymax)) + 0.1)
    return _save(fig, path)


def _per_block(items: list[dict], groups: list[str], x: Optional[str], which: str
               ) -> dict[str, dict[Any, tuple[Optional[list], Optional[list]]]]:
    """{group: {x: (init per block, end per block)}} averaged over seeds; which = grad | rank."""
    acc: dict = {}
    for it in items:
        d = it["details"]
        init = end = None
        ip = d.get("init_probe") or {}
        if which == "grad":
            init = ip.get("grad_norm_block")
            if d["grad"]:
                end = d["grad"][-1].get("grad_norm_block")
        else:
            probes = d["probe"]
            p0 = [p for p in probes if p.get("step") == 0]
            init = ip.get("rank_measure") or (p0[0]["rank_measure"] if p0 else None)
            if probes and probes[-1].get("step", 0) > 0:
                end = probes[-1]["rank_measure"]
        g = _group_name(it["config"], groups)
        xv = _value(it["config"], x) if x else 0
        slot = acc.setdefault(g, {}).setdefault(xv, ([], []))
        for k, vec in ((0, init), (1, end)):
            if isinstance(vec, list) and vec:
                slot[k].append([_finite(v) for v in vec])
    out: dict = {}
    for g, d in acc.items():
        for xv, (a, b) in d.items():
            def mean(vs):
                if not vs:
                    return None
                L = len(vs[0])
                cols = [[v[i] for v in vs if len(v) == L and v[i] is not None] for i in range(L)]
                return [st.mean(c) if c else None for c in cols]
            out.setdefault(g, {})[xv] = (mean(a), mean(b))
    return out


def plot_per_block(items: list[dict], x: Optional[str], groups: list[str], which: str,
                   path: Path) -> Optional[Path]:
    """Per-block gradient norm (``which='grad'``) or rank measure (``'rank'``): one panel per group,
    one colour per depth (viridis), dashed = at init, solid = at the end; mean over seeds.

    Returns:
        The PNG path, or None when no run recorded it.
    """
    from matplotlib import colormaps

    data = _per_block(items, groups, x, which)
    data = {g: d for g, d in data.items() if any(a or b for a, b in d.values())}
    if not data:
        return None
    gnames = sorted(data)
    n = len(gnames)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = _fig(4.0 * cols + 0.6, 3.0 * rows + 0.4)
    xs_all = sorted({xv for d in data.values() for xv in d})
    cmap = colormaps["viridis"]
    ax0 = None
    for j, g in enumerate(gnames):
        ax = fig.add_subplot(rows, cols, j + 1, sharey=ax0)
        ax0 = ax0 or ax
        for xv in xs_all:
            if xv not in data[g]:
                continue
            a, b = data[g][xv]
            c = cmap(xs_all.index(xv) / max(1, len(xs_all) - 1) * 0.9)
            lab = f"{x.split('.')[-1]}={xv}" if x else None
            for vec, ls, suffix in ((a, "--", " init"), (b, "-", " end")):
                if vec:
                    pts = [(i + 1, v) for i, v in enumerate(vec) if v is not None and (which != "grad" or v > 0)]
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], ls=ls, color=c, marker=".", lw=1.3,
                                label=(lab + suffix) if lab else suffix.strip())
        ax.set_title(g, fontsize=10)
        ax.set_xlabel("block", fontsize=8)
        if which == "grad":
            ax.set_yscale("log")
            if j % cols == 0:
                ax.set_ylabel("grad L2 norm per block", fontsize=8)
        else:
            if j % cols == 0:
                ax.set_ylabel("rank measure (0 = collapsed)", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        if j == 0:
            ax.legend(fontsize=6, ncol=2)
    if which == "rank":  # shared axis: fix the limits once, after every panel has its data
        top = max([v for d in data.values() for a, b in d.values() for vec in (a, b) if vec
                   for v in vec if v is not None] + [1.0])
        ax0.set_ylim(0, top * 1.05)
    return _save(fig, path)


# ----------------------------------------------------------------------------- text
def _blocks(n: Any) -> str:
    return f"{n} block" if n == 1 else f"{n} blocks"


def _trend(d: dict[Any, tuple[float, float, int]]) -> tuple[Any, str]:
    """(best x, verdict) for one line of mean losses keyed by depth."""
    xs = [k for k in d if not math.isnan(d[k][0])]
    if not xs:
        return None, "no finished runs"
    best = min(xs, key=lambda k: d[k][0])
    lo, hi = min(xs), max(xs)
    if len(xs) < 2:
        return best, "one depth only"
    first, last, bestv = d[lo][0], d[hi][0], d[best][0]
    if last >= bestv + 0.1:
        verdict = (f"gets worse with depth: {_blocks(hi)} end {last - bestv:.3f} nats above the best "
                   f"({_blocks(best)}, {bestv:.3f})")
    elif last <= first - 0.02 and last <= bestv + 0.02:
        verdict = f"improves with depth: {first:.3f} nats at {_blocks(lo)} -> {last:.3f} at {_blocks(hi)}"
    elif last <= bestv + 0.02:
        verdict = f"about flat with depth ({first:.3f} at {lo} -> {last:.3f} at {hi} nats)"
    else:
        verdict = (f"improves then worsens a little: best {bestv:.3f} at {_blocks(best)}, "
                   f"{last:.3f} at {_blocks(hi)}")
    return best, verdict


def summary_lines(items: list[dict], x: Optional[str], groups: list[str], baselines: Optional[dict]) -> list[str]:
    """Plain-language findings computed from the numbers of one experiment.

    Args:
        items: per-run dicts (``config``, ``row``).
        x: dotted x field (usually ``model.n_layer``).
        groups: dotted fields that define the lines (usually ``model.variant``).
        baselines: corpus baselines in nats, or None.

    Returns:
        Sentences (plain text).
    """
    agg = aggregate(items, x, groups)
    out = []
    seeds = {it["config"]["train"]["seed"] for it in items}
    if len(seeds) > 1:
        out.append(f"Numbers are means over {len(seeds)} seeds ({', '.join(map(str, sorted(seeds)))}); "
                   "the spread is the sample standard deviation.")
    xname = x.split(".")[-1] if x else ""
    for g, d in sorted(agg.items()):
        best, verdict = _trend(d)
        if best is None:
            out.append(f"{g}: {verdict}.")
            continue
        m, sd, n = d[best]
        spread = f" ± {sd:.3f}" if n > 1 else ""
        out.append(f"{g}: best {xname} = {best} ({m:.3f}{spread} nats/char, {m / LN2:.3f} bits/char); {verdict}.")
    plain = {g: d for g, d in agg.items() if g == "plain"}
    if "plain" in plain and len(plain["plain"]) > 1:
        d = plain["plain"]
        deep = max(d)
        shallow = {k: v for k, v in d.items() if k < deep}
        bk = min(shallow, key=lambda k: shallow[k][0])
        diff = d[deep][0] - d[bk][0]
        out.append(f"The deepest plain model ({_blocks(deep)}) is {diff:+.3f} nats/char "
                   f"({diff / d[bk][0] * 100:+.1f} %) vs the best shallower plain model ({_blocks(bk)}).")
        if baselines and baselines.get("unigram") is not None:
            u, b = baselines["unigram"], baselines.get("bigram")
            if d[deep][0] >= u - 0.05:
                out.append(f"At {_blocks(deep)} plain is at the unigram baseline ({u:.3f}): it predicts character "
                           "frequencies and uses no context at all.")
            elif b is not None and d[deep][0] >= b - 0.05:
                out.append(f"At {_blocks(deep)} plain is no better than the bigram baseline ({b:.3f}): it barely "
                           "uses context beyond the current character.")
    failed = [it for it in items if it["row"]["status"] not in OK]
    if failed:
        out.append(f"{len(failed)} run(s) did not finish normally: " + "; ".join(
            f"{it['row']['run']} ({it['row']['status']})" for it in failed[:8]) + ".")
    return out


def _init_lines(items: list[dict], x: Optional[str], groups: list[str]) -> list[str]:
    """Summary of an experiment whose runs take at most one step: only the init measurements count."""
    out = ["These runs take at most one optimizer step: only the measurements at initialisation are "
           "meaningful (their losses are not)."]
    acc: dict = {}
    for it in items:
        r = _init_last_rank(it)
        if r is not None:
            acc.setdefault(_group_name(it["config"], groups), {}).setdefault(
                _value(it["config"], x) if x else 0, []).append(r)
    for g, d in sorted(acc.items()):
        out.append(f"{g}: last-block rank measure at init " + ", ".join(
            f"{(x or 'x').split('.')[-1]} {k}: {st.mean(v):.3g}" for k, v in sorted(d.items())) + ".")
    return out


def _agg_table(items: list[dict], x: Optional[str], groups: list[str]) -> str:
    agg = aggregate(items, x, groups)
    tok = aggregate(items, x, groups, metric="tokens_per_sec")
    rank = aggregate(items, x, groups, metric="last_block_rank")
    ratio = aggregate(items, x, groups, metric="grad_ratio_first_last")
    rows = []
    for g, d in sorted(agg.items()):
        for xv, (m, sd, n) in d.items():
            def get(a):
                v = a.get(g, {}).get(xv)
                return None if v is None or math.isnan(v[0]) else v[0]
            rows.append([g, xv, round(m, 4), round(sd, 4) if n > 1 else None, n, round(m / LN2, 4),
                         get(ratio), get(rank), get(tok)])
    if not rows:
        return '<p class="muted">No finished runs yet.</p>'
    return html_table(rows, header=["line", x.split(".")[-1] if x else "x", "best val loss (mean)", "sd",
                                    "seeds", "bits/char", "grad ratio first/last block", "last-block rank",
                                    "tokens/s"])


# ----------------------------------------------------------------------------- science claims
def _by(items: list[dict], **want) -> list[dict]:
    out = []
    for it in items:
        if all(_value(it["config"], k.replace("__", ".")) == v for k, v in want.items()):
            out.append(it)
    return out


def _mean_metric(items: list[dict], metric: str = "best_val_loss", ok_only: bool = True) -> Optional[float]:
    vs = [_finite(it["row"].get(metric)) for it in items if (not ok_only or it["row"]["status"] in OK)]
    vs = [v for v in vs if v is not None]
    return st.mean(vs) if vs else None


def _init_last_rank(it: dict) -> Optional[float]:
    d = it["details"]
    p0 = [p for p in d["probe"] if p.get("step") == 0]
    vec = (d.get("init_probe") or {}).get("rank_measure") or (p0[0]["rank_measure"] if p0 else None)
    return _finite(vec[-1]) if vec else None


def _steps_to(it: dict, target: float) -> Optional[int]:
    for s, _, v in it["details"]["evals"]:
        if _finite(v) is not None and v <= target:
            return int(s)
    return None


def _vals(items: list[dict], key: str) -> str:
    vs = sorted({_value(it["config"], key) for it in items}, key=lambda v: (str(type(v)), v))
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in vs)


def _fmt(v: Optional[float], nd: int = 3) -> str:
    return "—" if v is None else f"{v:.{nd}f}"


def science_claims(by_exp: dict[str, list[dict]], extras: dict[str, dict]) -> list[list[str]]:
    """Rows "claim, setting, our numbers, reproduced?" for the experiments of the science profile.

    Only experiments present in ``by_exp`` give a row. Verdicts are ``yes``, ``no``, ``partly`` or
    ``not run``; thresholds are stated in the numbers column.

    Args:
        by_exp: experiment name -> per-run dicts (``config``, ``row``, ``details``).
        extras: experiment name -> its extra settings (e.g. ``target_val_loss``).

    Returns:
        Table rows of strings.
    """
    rows = []
    items = by_exp.get("rank_init")
    if items:
        depths = sorted({it["config"]["model"]["n_layer"] for it in items})
        variants = sorted({it["config"]["model"]["variant"] for it in items})
        tab = {}
        for v in variants:
            for L in depths:
                rs = [r for r in (_init_last_rank(it) for it in _by(items, model__variant=v, model__n_layer=L))
                      if r is not None]
                tab[(v, L)] = st.mean(rs) if rs else None
        nums = "; ".join(f"{v}: " + ", ".join(f"L{L} {_fmt(tab[(v, L)], 3)}" for L in depths) for v in variants)
        verdict = "not run"
        if "plain" in variants:
            pl = [tab[("plain", L)] for L in depths]
            others = [tab[(v, depths[-1])] for v in variants if v != "plain" and tab[(v, depths[-1])] is not None]
            if all(p is not None for p in pl):
                falls = all(a >= b for a, b in zip(pl, pl[1:])) and pl[-1] < 0.5 * pl[0]
                above = bool(others) and min(others) >= 5 * max(pl[-1], 1e-6)
                verdict = "yes" if falls and above else ("partly" if falls or above else "no")
        rows.append(["Rank collapse without skips (Dong et al. 2021): at init the last-block rank measure of a "
                     "plain stack falls towards 0 with depth; residual variants stay well above",
                     f"depths {', '.join(map(str, depths))}, init, mean over seeds; yes = plain falls "
                     "monotonically to < half and residual variants at the deepest depth are >= 5x plain",
                     nums, verdict])
    items = by_exp.get("degradation")
    if items:
        agg = aggregate(items, "model.n_layer", ["model.variant"])
        parts, ok_plain, ok_res = [], None, []
        for v, d in sorted(agg.items()):
            parts.append(f"{v}: " + ", ".join(f"L{k} {m:.3f}" for k, (m, _, _) in d.items()))
            if len(d) > 1:
                deep = max(d)
                best_sh = min(m for k, (m, _, _) in d.items() if k < deep)
                if v == "plain":
                    ok_plain = d[deep][0] >= best_sh + 0.1
                else:
                    ok_res.append(d[deep][0] <= best_sh + 0.02)
        verdict = "not run" if ok_plain is None else (
            "yes" if ok_plain and ok_res and all(ok_res) else ("partly" if ok_plain or any(ok_res) else "no"))
        rows.append(["Degradation (He et al. 2016, CNNs): plain gets worse with depth at an equal step budget, "
                     "residual variants do not",
                     "best val loss (nats/char) vs depth, equal steps; yes = deepest plain >= best shallower + 0.1 "
                     "and every residual variant's deepest <= its best shallower + 0.02", "; ".join(parts), verdict])
    items = by_exp.get("postln_warmup")
    if items:
        def cell(v, init, w):
            sel = _by(items, model__variant=v, model__init=init, train__warmup_iters=w)
            bad = [it for it in sel if it["row"]["status"] not in OK]
            m = _mean_metric(sel)
            return "diverged" if bad and m is None else _fmt(m), m, bool(bad)
        parts, verdict = [], "not run"
        warms = sorted({it["config"]["train"]["warmup_iters"] for it in items})
        for v in ("postnorm", "prenorm"):
            for init in ("torch", "gpt2"):
                parts.append(f"{v}/{init}: " + ", ".join(f"warmup {w} {cell(v, init, w)[0]}" for w in warms))
        if len(warms) > 1:
            s0, m0, b0 = cell("postnorm", "torch", warms[0])
            s1, m1, b1 = cell("postnorm", "torch", warms[-1])
            hurt = b0 and not b1 or (m0 is not None and m1 is not None and m0 >= m1 + 0.1)
            verdict = "yes" if hurt else "no"
            g0, g1 = cell("postnorm", "gpt2", warms[0])[1], cell("postnorm", "gpt2", warms[-1])[1]
            if hurt and g0 is not None and g1 is not None and g0 >= g1 + 0.1:
                verdict = "yes (also with GPT-2 init)"
        rows.append(["Post-LN needs warmup (Xiong et al. 2020): without warmup at a high lr, post-LN trains "
                     "badly or diverges (PyTorch init); pre-LN does not need it",
                     f"{_vals(items, 'model.n_layer')} blocks, lr {_vals(items, 'train.learning_rate')}, "
                     f"{_vals(items, 'train.max_iters')} steps, best val loss (nats/char); "
                     "yes = post-LN/torch without warmup is >= 0.1 "
                     "worse than with warmup (or diverges)", "; ".join(parts), verdict])
    items = by_exp.get("rezero_speed")
    if items:
        target = float((extras.get("rezero_speed") or {}).get("target_val_loss", 2.6))
        best_steps, parts = {}, []
        for v in sorted({it["config"]["model"]["variant"] for it in items}):
            per_lr = []
            for it in _by(items, model__variant=v):
                s = _steps_to(it, target)
                per_lr.append((it["config"]["train"]["learning_rate"], s))
            per_lr.sort()
            reached = [s for _, s in per_lr if s is not None]
            best_steps[v] = min(reached) if reached else None
            parts.append(f"{v}: " + ", ".join(f"lr {lr:g} {'—' if s is None else s}" for lr, s in per_lr))
        rz = best_steps.get("rezero")
        others = [s for v, s in best_steps.items() if v != "rezero"]
        if rz is None:
            verdict = "no"
        elif all(s is None or rz < s for s in others):
            verdict = "yes"
        elif all(s is None or rz <= s for s in others):
            verdict = "partly (ties)"
        else:
            verdict = "no"
        rows.append(["ReZero trains fast without LayerNorm (Bachlechner et al. 2020): fewer steps to a target loss",
                     f"{_vals(items, 'model.n_layer')} blocks, lr {_vals(items, 'train.learning_rate')} for each "
                     f"variant; steps to reach val loss <= {target:g} nats/char (evaluated every "
                     f"{_vals(items, 'train.eval_interval')} steps; — = not reached); yes = ReZero's best is the fewest",
                     "; ".join(parts), verdict])
    items = by_exp.get("deepnorm_depth")
    if items:
        parts, wins, fails = [], [], []
        for L in sorted({it["config"]["model"]["n_layer"] for it in items}):
            for lr in sorted({it["config"]["train"]["learning_rate"] for it in items}):
                pn = _by(items, model__variant="postnorm", model__n_layer=L, train__learning_rate=lr)
                dn = _by(items, model__variant="deepnorm", model__n_layer=L, train__learning_rate=lr)
                mp, md = _mean_metric(pn), _mean_metric(dn)
                bad_p = any(it["row"]["status"] not in OK for it in pn)
                bad_d = any(it["row"]["status"] not in OK for it in dn)
                parts.append(f"L{L} lr {lr:g}: post-LN {'diverged' if bad_p else _fmt(mp)}, "
                             f"DeepNorm {'diverged' if bad_d else _fmt(md)}")
                fails.append(bad_d)
                if md is not None and (bad_p or mp is None or md <= mp + 0.02):
                    wins.append(True)
                else:
                    wins.append(False)
        verdict = "yes" if wins and all(wins) and not any(fails) else ("partly" if any(wins) else "no")
        rows.append(["DeepNorm keeps post-LN stable at depth (Wang et al. 2022)",
                     f"{_vals(items, 'model.n_layer')} blocks, lr {_vals(items, 'train.learning_rate')}, "
                     f"{_vals(items, 'train.max_iters')} steps, best val loss (nats/char); yes = DeepNorm never "
                     "diverges and is within 0.02 of post-LN or better everywhere", "; ".join(parts), verdict])
    return rows


# ----------------------------------------------------------------------------- the page
def _baselines(sweep_dir: Path, items: list[dict]) -> Optional[dict]:
    for it in items:
        p = Path(it["run_dir"]) / "baselines.json"
        if p.exists():
            try:
                b = json.loads(p.read_text())
                return {k: float(b[k]["nats"]) for k in ("uniform", "unigram", "bigram")}
            except (ValueError, KeyError, TypeError):
                pass
    try:
        from ..experiments import corpus_baselines

        cfg = items[0]["config"] if items else {}
        return corpus_baselines(cfg.get("data"))
    except Exception:  # noqa: BLE001 - baselines are decoration; the report works without them
        return None


def build_sweep_report(sweep_dir: str | Path) -> Path:
    """Rewrite results.csv / results.md and write ``report.html`` (+ PNGs in ``plots/``) for a sweep.

    Args:
        sweep_dir: a directory written by ``depthlab sweep`` (holds ``sweep.json``).

    Returns:
        The path of ``report.html``.

    Raises:
        DepthlabError: not a sweep directory.
    """
    from ..experiments import collect_results, load_sweep, run_details, write_results

    sweep_dir = Path(sweep_dir)
    if not is_sweep_dir(sweep_dir):
        raise DepthlabError(f"{sweep_dir} is not a sweep directory (no sweep.json)")
    meta = load_sweep(sweep_dir)
    write_results(sweep_dir)
    rows, columns = collect_results(sweep_dir)
    items = []
    for run, row in zip(meta["runs"], rows):
        rd = sweep_dir / "runs" / run["name"]
        det = run_details(rd)
        items.append({"name": run["name"], "experiment": run["experiment"], "config": det["config"] or run["config"],
                      "row": row, "details": det, "run_dir": str(rd)})
    baselines = _baselines(sweep_dir, items)
    plots = sweep_dir / PLOT_DIR
    exps = meta["spec"]["experiments"]
    by_exp = {e["name"]: [it for it in items if it["experiment"] == e["name"]] for e in exps}
    extras = {e["name"]: e.get("extra") or {} for e in exps}
    sections: list[Section] = []
    cards = []
    n_ok = sum(1 for r in rows if r["status"] in OK)
    cards.append(("runs finished", f"{n_ok}/{len(rows)}", "status ok"))
    if baselines:
        cards.append(("bigram baseline", f"{baselines['bigram']:.3f}", "nats/char (no context)"))
        cards.append(("unigram baseline", f"{baselines['unigram']:.3f}", "nats/char (letter frequencies)"))
    claims = science_claims(by_exp, extras)
    if claims:
        sections.append(Section("Published claims", html_table(claims, header=["claim", "setting", "our numbers",
                                                                               "reproduced?"]) +
                                '<p class="muted">Measured, never forced: a "no" means this small CPU setting did '
                                "not show the effect with these budgets.</p>", anchor="claims"))
    for e in exps:
        its = by_exp[e["name"]]
        if not its:
            continue
        x, groups = _exp_axes(meta, e)
        tag = e["name"] or "sweep"
        title = f"Experiment {e['name']}" if e["name"] else "Results"
        body = []
        trained = any(it["config"]["train"]["max_iters"] > 1 for it in its)
        lines = summary_lines(its, x, groups, baselines) if trained else _init_lines(its, x, groups)
        if lines:
            body.append("<h3>Summary</h3><ul>" + "".join(f"<li>{esc(s)}</li>" for s in lines) + "</ul>")
        p = plot_vs_x(its, x, groups, baselines, plots / f"{tag}_loss_vs_{(x or 'x').split('.')[-1]}.png",
                      f"best validation loss vs {(x or 'x').split('.')[-1]}") if trained else None
        if p:
            body.append("<h3>Best validation loss vs depth</h3>" + img_tag(
                p, alt="loss vs depth", caption="Mean over seeds with ±1 sd error bars; dots are single seeds; "
                "horizontal lines are corpus baselines (unigram: letter frequencies, bigram: previous letter only). "
                "A curve that rises with depth is the degradation problem."))
        p = plot_curves(its, x, groups, baselines, plots / f"{tag}_curves.png") if trained else None
        if p:
            body.append("<h3>Learning curves</h3>" + img_tag(
                p, alt="learning curves", caption="Validation loss vs step, one panel per setting, one line per "
                "run (seeds share a colour)."))
        p = plot_per_block(its, x, groups, "grad", plots / f"{tag}_grad_per_block.png")
        if p:
            body.append("<h3>Gradient flow per block</h3>" + img_tag(
                p, alt="gradient norm per block", caption="L2 norm of each block's parameter gradients "
                "(dashed: at initialisation, solid: last gradient record); colours are depths. A line falling "
                "towards block 1 is vanishing gradient flow to the early blocks."))
        p = plot_per_block(its, x, groups, "rank", plots / f"{tag}_rank_per_block.png")
        if p:
            body.append("<h3>Rank measure per block</h3>" + img_tag(
                p, alt="rank measure per block", caption="Dong et al. (2021) relative residual of the block "
                "output from rank one (0 = every token has the same vector); dashed: at initialisation, "
                "solid: at the end."))
        body.append("<h3>Table (mean over seeds)</h3>" + _agg_table(its, x, groups))
        sections.append(Section(title, "".join(body), anchor=f"exp-{tag}"))
    rows_html = html_table([[r.get(c) for c in columns if c != "message"] for r in rows],
                           header=[c for c in columns if c != "message"])
    msgs = [r for r in rows if r.get("message")]
    if msgs:
        rows_html += "<ul>" + "".join(f"<li><code>{esc(r['run'])}</code> {esc(r['status'])}: {esc(r['message'])}</li>"
                                      for r in msgs) + "</ul>"
    sections.append(Section("All runs", rows_html + '<p class="muted">Also in results.csv and results.md; each run '
                            "directory works with <code>depthlab sample</code>, <code>diagnose</code> and "
                            "<code>report</code>.</p>", anchor="runs"))
    spec = meta["spec"]
    sub = (f"profile {spec['profile']}, " if spec.get("profile") else "") + f"{len(rows)} runs; losses in nats/char"
    page = render_page(f"depthlab sweep {sweep_dir.name}", sections, subtitle=sub, cards=cards)
    dest = sweep_dir / "report.html"
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(dest)
    return dest
