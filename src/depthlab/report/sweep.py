"""The comparison report of a sweep: ``SWEEP_DIR/report.html`` plus PNGs in ``SWEEP_DIR/plots/``.

Figures per experiment: best val loss vs depth (one line per variant, mean and spread over seeds,
corpus baselines as horizontal lines: the degradation plot); learning curves as small multiples
(one panel per depth); gradient norm per block at init and at the end, per variant; the rank
measure (Dong et al. 2021) per block at init and at the end, per variant. The text (findings,
the "claim - setting - our numbers - reproduced?" table of the ``science`` profile) and every
number come from :mod:`depthlab.sweep`, which reads the run directories; this module only draws
and lays out, so ``depthlab report SWEEP_DIR`` rebuilds the same page (and results.csv /
results.md) at any time.

matplotlib is used through :class:`matplotlib.figure.Figure` with the Agg canvas (no pyplot), made and
written by :mod:`depthlab.figures` like every figure.
"""

from __future__ import annotations

import math
import statistics as st
from pathlib import Path
from collections import Counter
from typing import Any, Callable, Optional, Sequence

from ..errors import DepthlabError
from ..rundir import (PLOTS, REPORT, REPORT_SOFTWARE, SWEEP_JSON, read_json, write_generated, written_by_report,
                      written_report_page)
from ..sweep import (CLAIM_HEADER, OK_STATUSES, aggregate, aggregate_table, experiment_axes, field_value, group_name,
                     init_lines, is_sweep_dir, science_claims, short_unit, summary_lines, sweep_baselines, sweep_items,
                     sweep_unit, write_results)
from ..units import LN2, finite_or_none
from ..figures import BASELINE_STYLE, OKABE_ITO, drawable, new_figure, write_png
from .html import Section, esc, html_table, img_tag, render_page

__all__ = ["build_sweep_report", "is_sweep_dir", "plot_vs_x", "plot_curves", "plot_per_block", "figure_html",
           "VARIANT_COLORS"]

VARIANT_COLORS = {"plain": OKABE_ITO["vermillion"], "postnorm": OKABE_ITO["orange"], "prenorm": OKABE_ITO["blue"],
                  "rezero": OKABE_ITO["green"], "deepnorm": OKABE_ITO["purple"], "periln": OKABE_ITO["sky"]}
_EXTRA_COLORS = [OKABE_ITO[k] for k in ("black", "yellow", "grey", "sky")]


def _legend(ax, **kw) -> None:
    """A legend where something is labelled: a sweep with no finished run drew none, and matplotlib's "No artists
    with labels found" came out as a depthlab warning."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)


def _color(name: str, i: int) -> str:
    for v, c in VARIANT_COLORS.items():
        if name == v or (name.startswith(v + ",") and "=" not in name.split(",", 2)[1]):
            return c
    return _EXTRA_COLORS[i % len(_EXTRA_COLORS)]



# ----------------------------------------------------------------------------- figures
def _save(fig, path: Path) -> Path:
    """Lay out ``fig`` (``tight_layout``) and write it as PNG to ``path`` atomically, marked as depthlab's
    (PNG ``Software`` text :data:`~depthlab.rundir.REPORT_SOFTWARE`).

    Raises:
        DepthlabError: a file is at ``path`` that ``depthlab report`` did not write (nothing is written).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    _refuse_foreign(path, written_by_report)
    fig.tight_layout()
    return write_png(fig, path, metadata={"Software": REPORT_SOFTWARE})


def _refuse_foreign(path: Path, ours: Callable[[Path], bool]) -> None:
    """Refuse to replace the file at ``path`` when ``ours(path)`` says depthlab did not write it (a symbolic
    link never is depthlab's): the sweep folder may hold a user's file under a name the report uses."""
    if path.is_symlink() or path.exists() and not ours(path):
        sweep = path.parent if path.name == REPORT else path.parent.parent
        raise DepthlabError(f"report: {path} exists and was not written by depthlab report; refusing to overwrite "
                            f"it (move it out of {path.parent}, then run the same command again: depthlab sweep, or "
                            f"depthlab report {sweep})")


def plot_vs_x(items: list[dict], x: Optional[str], groups: list[str], baselines: Optional[dict],
              path: Path, title: str, name: Optional[Callable[[dict], str]] = None) -> Optional[Path]:
    """Best val loss vs the x field (log2 axis for depth), one line per group, mean +- sd over seeds.

    Args:
        items: per-run dicts (``config``, ``row``).
        x: dotted x field.
        groups: dotted fields that define the lines.
        baselines: ``{"uniform", "unigram", "bigram"}`` in nats, or None.
        path: PNG to write.
        title: axes title.
        name: run config -> its line's name (default :func:`group_name` of ``groups``).

    Returns:
        The PNG path, or None without data.
    """
    name = name or (lambda cfg: group_name(cfg, groups))
    agg = aggregate(items, x, groups, name=name)
    if not agg or x is None:
        return None
    fig = new_figure((7.5, 4.6), layout=None)
    ax = fig.add_subplot(111)
    for i, (g, d) in enumerate(sorted(agg.items())):
        xs = list(d)
        m = [d[k][0] for k in xs]
        sd = [d[k][1] for k in xs]
        c = _color(g, i)
        # a line named by a grid value in CJK or emoji (a corpus path, say): code points, not empty boxes
        ax.errorbar(xs, m, yerr=sd, color=c, marker="o", capsize=3, lw=2, label=drawable(g))
        for it in items:  # individual seeds as small dots
            if it["row"]["status"] in OK_STATUSES and name(it["config"]) == g:
                v = finite_or_none(it["row"].get("best_val_loss"))
                if v is not None:
                    ax.plot([field_value(it["config"], x)], [v], ".", color=c, alpha=0.45, ms=5)
    for it in items:  # failed runs: a cross at the top
        if it["row"]["status"] not in OK_STATUSES:
            # clip: a failed run's x may lie far outside the axis (e.g. lr 1e3), which would
            # otherwise ask the rasteriser to draw text at an overflowing pixel position
            ax.annotate("x", (field_value(it["config"], x), 0.98), xycoords=("data", "axes fraction"),
                        color=_color(name(it["config"]), 0), ha="center",
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
    u = short_unit(sweep_unit(items))
    ax.set_ylabel(f"best validation loss (nats/{u})")
    sec = ax.secondary_yaxis("right", functions=(lambda v: v / LN2, lambda v: v * LN2))
    sec.set_ylabel(f"bits/{u}")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    _legend(ax, fontsize=8, loc="best")
    return _save(fig, path)


def plot_curves(items: list[dict], x: Optional[str], groups: list[str], baselines: Optional[dict],
                path: Path) -> Optional[Path]:
    """Validation loss vs step, one panel per x value, one colour per group, one line per seed.

    Args:
        items: per-run dicts (``config``, ``details`` with ``evals``).
        x: dotted field with one panel per value (None = one panel).
        groups: dotted fields that define the colours.
        baselines: ``{"uniform", "unigram", "bigram"}`` in nats per token (unigram and bigram drawn), or None.
        path: PNG to write.

    Returns:
        The PNG path, or None without evaluation records.
    """
    xs = sorted({field_value(it["config"], x) if x else 0 for it in items})
    if not any(len(it["details"]["evals"]) > 1 for it in items):
        return None
    n = len(xs)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig = new_figure((3.1 * cols + 0.6, 2.6 * rows + 0.4), layout=None)
    gnames = sorted({group_name(it["config"], groups) for it in items})
    ymax, every = None, []
    for it in items:
        vs = [e[2] for e in it["details"]["evals"] if finite_or_none(e[2]) is not None]
        if vs:
            ymax = max(ymax or vs[0], vs[0])
            every += vs
    ax0 = None
    for j, xv in enumerate(xs):
        ax = fig.add_subplot(rows, cols, j + 1, sharey=ax0)
        ax0 = ax0 or ax
        for it in items:
            if (x and field_value(it["config"], x) != xv):
                continue
            ev = [(s, v) for s, _, v in it["details"]["evals"] if finite_or_none(v) is not None]
            if not ev:
                continue
            g = group_name(it["config"], groups)
            ax.plot([e[0] for e in ev], [e[1] for e in ev], color=_color(g, gnames.index(g)), lw=1.4,
                    alpha=0.85, label=drawable(g))
        for name in ("unigram", "bigram"):
            b = (baselines or {}).get(name)
            if b is not None:
                c, ls = BASELINE_STYLE[name]
                ax.axhline(b, color=c, ls=ls, lw=1)
        ax.set_title(f"{x.split('.')[-1]} = {xv}" if x else "runs", fontsize=10)
        ax.grid(alpha=0.3)
        ax.set_xlabel("step", fontsize=8)
        if j % cols == 0:
            ax.set_ylabel(f"val loss (nats/{short_unit(sweep_unit(items))})", fontsize=8)
        ax.tick_params(labelsize=8)
        if j == 0:
            h, lab = ax.get_legend_handles_labels()
            uniq = dict(zip(lab, h))
            ax.legend(uniq.values(), uniq.keys(), fontsize=7)
    if ymax is not None and baselines and baselines.get("unigram"):
        top = min(ymax, baselines.get("uniform", ymax)) + 0.1
        # the bottom too: a diverged run's 2.9e7 left it autoscaled to -1.45e6, every curve a flat line at 0
        low = min([v for v in every if v <= top] or [top - 1.0])
        ax0.set_ylim(bottom=max(0.0, low - 0.1), top=top)
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
        g = group_name(it["config"], groups)
        xv = field_value(it["config"], x) if x else 0
        slot = acc.setdefault(g, {}).setdefault(xv, ([], []))
        for k, vec in ((0, init), (1, end)):
            if isinstance(vec, list) and vec:
                slot[k].append([finite_or_none(v) for v in vec])
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

    Args:
        items: per-run dicts (``config``, ``details`` with ``init_probe``, ``grad``, ``probe``).
        x: dotted field with one colour per value (usually ``model.n_layer``).
        groups: dotted fields with one panel per line.
        which: ``grad`` (gradient L2 norm per block, log axis) or ``rank`` (rank measure, 0..1).
        path: PNG to write.

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
    fig = new_figure((4.0 * cols + 0.6, 3.0 * rows + 0.4), layout=None)
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
                    pts = [(i, v) for i, v in enumerate(vec) if v is not None and (which != "grad" or v > 0)]
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], ls=ls, color=c, marker=".", lw=1.3,
                                label=(lab + suffix) if lab else suffix.strip())
        ax.set_title(drawable(g), fontsize=10)
        ax.set_xlabel("block (0 = first)", fontsize=8)
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
            _legend(ax, fontsize=6, ncol=2)
    if which == "rank":  # shared axis: fix the limits once, after every panel has its data
        top = max([v for d in data.values() for a, b in d.values() for vec in (a, b) if vec
                   for v in vec if v is not None] + [1.0])
        ax0.set_ylim(0, top * 1.05)
    return _save(fig, path)


# ----------------------------------------------------------------------------- the page
_PLOT_NOTES = {
    "loss": ("Best validation loss vs {x}", "loss vs {x}",
             "Mean over seeds with ±1 sd error bars; dots are single seeds; horizontal lines are corpus baselines "
             "(unigram: {unit} frequencies, no context at all; bigram: the current {unit} alone, none of the context "
             "before it).{depth_note}"),
    "curves": ("Learning curves", "learning curves",
               "Validation loss vs step, {curve_panels}, one line per run (seeds share a colour)."),
    "grad": ("Gradient flow per block", "gradient norm per block",
             "L2 norm of each block's parameter gradients (dashed: at initialisation, solid: last gradient "
             "record); {block_panels}, blocks are numbered from 0. A line falling towards block 0 is "
             "vanishing gradient flow to the early blocks."),
    "rank": ("Rank measure per block", "rank measure per block",
             "Dong et al. (2021) relative residual of the block output from rank one (0 = every token has the "
             "same vector); dashed: at initialisation, solid: at the end; {block_panels}."),
}


def figure_html(kind: str, path: Optional[Path], x: Optional[str], unit: str = "character",
                groups: Sequence[str] = ()) -> str:
    """Title, figure and caption, worded for the experiment's x axis (depth or any other field; None: one panel),
    its ``groups`` (the fields of the colours, or of the per-block figures' panels) and its runs' token (``unit``:
    ``character`` or ``token``, :func:`~depthlab.sweep.sweep_unit`), as :func:`plot_curves` and
    :func:`plot_per_block` draw them."""
    if not path:
        return ""
    xname = (x or "setting").split(".")[-1]
    gname = ", ".join(g.split(".")[-1] for g in groups)
    curve_panels = (f"one panel per value of {xname}" if x else "one panel") + (f", one colour per {gname}" if gname
                                                                                else "")
    block_panels = ((f"one panel per {gname}" if gname else "one panel")
                    + (f", colours are values of {xname}" if x else ""))
    depth_note = " A curve that rises with depth is the degradation problem." if x == "model.n_layer" else ""
    title, alt, caption = (t.format(x=xname, depth_note=depth_note, unit=unit, curve_panels=curve_panels,
                                    block_panels=block_panels) for t in _PLOT_NOTES[kind])
    return f"<h3>{title}</h3>" + img_tag(path, alt=alt, caption=caption)


#: The figure of every trained experiment whose x axis is depth (:func:`_depth_overview`).
_ALL_DEPTH_PNG = "all_loss_vs_n_layer.png"


def _figure_paths(exp: dict, plots: Path) -> dict[str, Path]:
    """Where experiment ``exp``'s figures go in ``plots``: ``loss``, ``curves``, ``grad``, ``rank``."""
    tag, xname = exp["name"] or "sweep", (experiment_axes(exp)[0] or "x").split(".")[-1]
    return {"loss": plots / f"{tag}_loss_vs_{xname}.png", "curves": plots / f"{tag}_curves.png",
            **{which: plots / f"{tag}_{which}_per_block.png" for which in ("grad", "rank")}}


def refuse_foreign_outputs(sweep_dir: Path) -> None:
    """Refuse (DepthlabError, one line) a file at report.html or at a figure's place in plots/ that depthlab report
    did not write, before anything is written: ``depthlab sweep`` asks before its runs, the report before its
    results files (a refusal found at the first figure came after results.md had been rewritten)."""
    sweep_dir = Path(sweep_dir)
    meta = read_json(sweep_dir / SWEEP_JSON)
    exps = ((meta or {}).get("spec") or {}).get("experiments") or [] if isinstance(meta, dict) else []
    _refuse_foreign(sweep_dir / REPORT, written_report_page)
    for path in [sweep_dir / PLOTS / _ALL_DEPTH_PNG, *(q for e in exps for q in _figure_paths(e, sweep_dir / PLOTS)
                                                          .values())]:
        _refuse_foreign(path, written_by_report)


def _experiment_section(exp: dict, its: list[dict], baselines: Optional[dict], plots: Path) -> Section:
    """Findings, figures and the mean-over-seeds table of one experiment."""
    x, groups = experiment_axes(exp)
    tag = exp["name"] or "sweep"
    xname = (x or "x").split(".")[-1]
    trained = any(it["config"]["train"]["max_iters"] > 1 for it in its)
    lines = summary_lines(its, x, groups, baselines) if trained else init_lines(its, x, groups)
    body = []
    if lines:
        body.append("<h3>Summary</h3><ul>" + "".join(f"<li>{esc(s)}</li>" for s in lines) + "</ul>")
    fig = _figure_paths(exp, plots)
    if trained:
        body.append(figure_html("loss", plot_vs_x(its, x, groups, baselines, fig["loss"],
                                                   f"best validation loss vs {xname}"), x, sweep_unit(its)))
        body.append(figure_html("curves", plot_curves(its, x, groups, baselines, fig["curves"]), x, groups=groups))
    for which in ("grad", "rank"):
        body.append(figure_html(which, plot_per_block(its, x, groups, which, fig[which]), x, groups=groups))
    header, rows = aggregate_table(its, x, groups)
    table = html_table(rows, header=header) if rows else f'<p class="muted">{esc(_no_ok_runs(its))}</p>'
    body.append("<h3>Table (mean over seeds)</h3>" + table)
    title = f"Experiment {exp['name']}" if exp["name"] else "Results"
    return Section(title, "".join(body), anchor=f"exp-{tag}")


def _flat_keys(d: dict, prefix: str = "") -> list[str]:
    """Dotted keys of a nested config section (``{"model": {"norm": ..}}`` -> ``["model.norm"]``)."""
    return [k2 for k, v in d.items() for k2 in (_flat_keys(v, f"{prefix}{k}.") if isinstance(v, dict)
                                                else [f"{prefix}{k}"])]


def depth_lines(exps: list[dict], items: list[dict]) -> Callable[[dict], str]:
    """Line names for runs of several experiments along depth: the fields the experiments set or vary
    (grid and base, except depth and seed) where a run differs from the most common value.

    ``prenorm``, ``prenorm, norm=dyt``, ``prenorm, norm_scale=depth`` for the full profile's three
    experiments (the variant always named, other fields only where they are not the usual value).

    Args:
        exps: the experiments (``sweep.json``'s ``spec.experiments``). items: their runs.

    Returns:
        run config -> line name.
    """
    keys = []
    for e in exps:
        for k in [*e["grid"], *_flat_keys(e.get("base") or {})]:
            wanted = k.startswith("model.") or k in e["grid"]  # a base's train fields are its recipe, not a line
            if k not in keys and k not in ("model.n_layer", "train.seed") and wanted:
                keys.append(k)
    keys.sort(key=lambda k: k != "model.variant")
    usual = {k: Counter(str(field_value(it["config"], k)) for it in items).most_common(1)[0][0] for k in keys}
    varied = [k for k in keys if len({str(field_value(it["config"], k)) for it in items}) > 1]

    def name(cfg: dict) -> str:
        parts = [str(field_value(cfg, k)) if k == "model.variant" else f"{k.split('.')[-1]}={field_value(cfg, k)}"
                 for k in varied if k == "model.variant" or str(field_value(cfg, k)) != usual[k]]
        return ", ".join(parts) or "all"

    return name


def _depth_overview(exps: list[dict], by_exp: dict, baselines: Optional[dict], plots: Path) -> Optional[Section]:
    """One figure of every trained experiment whose x axis is depth, when there are two or more (the full
    profile: the six variants, pre-LN with DyT, pre-LN with LayerNorm Scaling)."""
    deep = [e for e in exps if by_exp[e["name"]] and experiment_axes(e)[0] == "model.n_layer"
            and any(it["config"]["train"]["max_iters"] > 1 for it in by_exp[e["name"]])]
    if len(deep) < 2:
        return None
    items = [it for e in deep for it in by_exp[e["name"]]]
    path = plot_vs_x(items, "model.n_layer", [], baselines, plots / _ALL_DEPTH_PNG,
                     "best validation loss vs depth, every experiment", name=depth_lines(deep, items))
    if path is None:
        return None
    names = ", ".join(e["name"] for e in deep)
    return Section("All experiments along depth", f"<p>Experiments {esc(names)} on one axis (their recipes must "
                   "match for the lines to compare: the profile gives them one base).</p>"
                   + figure_html("loss", path, "model.n_layer", sweep_unit(items)), anchor="all-depth")


def _claims_section(by_exp: dict, extras: dict) -> Optional[Section]:
    claims = science_claims(by_exp, extras)
    if not claims:
        return None
    return Section("Published claims", html_table(claims, header=CLAIM_HEADER)
                   + '<p class="muted">Measured, never forced: each verdict is a one-sided test over the seeds '
                   "(Welch's t; Fisher's exact test on runs not ok) at alpha 0.05, fixed in code before the runs: "
                   '"no" means this small CPU setting showed the opposite, "undecided" that its seeds cannot tell '
                   "(<code>depthlab sweep --seeds auto</code> adds them). Cells are mean ± sd (n) with the 95% "
                   "t-interval; aggregates.csv has every cell.</p>", anchor="claims")


def _runs_section(rows: list[dict], columns: list[str]) -> Section:
    shown = [c for c in columns if c != "message"]
    body = html_table([[r.get(c) for c in shown] for r in rows], header=shown)
    msgs = [r for r in rows if r.get("message")]
    if msgs:
        body += "<ul>" + "".join(f"<li><code>{esc(r['run'])}</code> {esc(r['status'])}: {esc(r['message'])}</li>"
                                 for r in msgs) + "</ul>"
    return Section("All runs", body + '<p class="muted">Also in results.csv and results.md; each run directory '
                   "works with <code>depthlab sample</code>, <code>diagnose</code> and <code>report</code>.</p>",
                   anchor="runs")


def _no_ok_runs(its: list[dict]) -> str:
    """The table's place when no run of an experiment ended ok: what they did end with ("No finished runs yet." was
    said of a finished sweep whose runs were all stopped by train.max_time)."""
    if not its:
        return "No runs yet."
    statuses = sorted({str(it["row"].get("status")) for it in its})
    return (f"No run ended with status ok (status {', '.join(statuses)}): the table averages the ok runs; every run "
            "is in All runs below.")


def _cards(rows: list[dict], baselines: Optional[dict], unit: str = "character") -> list[tuple[str, str, str]]:
    """The header cards; ``unit`` a token of the runs in words (:func:`~depthlab.sweep.sweep_unit`)."""
    n_ok = sum(1 for r in rows if r["status"] in OK_STATUSES)
    capped = sum(1 for r in rows if r["status"] == "time_capped")
    # "runs finished 0/2" was said of two runs that finished, stopped by train.max_time
    cards = [("runs ok", f"{n_ok}/{len(rows)}",
              "status ok" + (f"; {capped} stopped by train.max_time" if capped else ""))]
    u = short_unit(unit)
    if baselines:
        cards.append(("bigram baseline", f"{baselines['bigram']:.3f}", f"nats/{u} (the current {unit} alone)"))
        cards.append(("unigram baseline", f"{baselines['unigram']:.3f}", f"nats/{u} ({unit} frequencies, no "
                      "context at all)"))
    return cards


def build_sweep_report(sweep_dir: str | Path) -> Path:
    """Rewrite results.csv / results.md and write ``report.html`` (+ PNGs in ``plots/``) for a sweep.

    Args:
        sweep_dir: a directory written by ``depthlab sweep`` (holds ``sweep.json``).

    Returns:
        The path of ``report.html``.

    Raises:
        DepthlabError: not a sweep directory; a file at ``report.html`` or at a figure's place in ``plots/``
            that depthlab report did not write (never replaced).
        OSError: the sweep directory is not writable.
    """
    sweep_dir = Path(sweep_dir)
    if not is_sweep_dir(sweep_dir):
        raise DepthlabError(f"{sweep_dir} is not a sweep directory (no sweep.json)")
    refuse_foreign_outputs(sweep_dir)  # before anything is written
    write_results(sweep_dir)
    meta, rows, columns, items = sweep_items(sweep_dir)
    baselines = sweep_baselines(items)
    exps = meta["spec"]["experiments"]
    by_exp = {e["name"]: [it for it in items if it["experiment"] == e["name"]] for e in exps}
    sections = [s for s in [_claims_section(by_exp, {e["name"]: e.get("extra") or {} for e in exps})] if s]
    sections += [s for s in [_depth_overview(exps, by_exp, baselines, sweep_dir / PLOTS)] if s]
    sections += [_experiment_section(e, by_exp[e["name"]], baselines, sweep_dir / PLOTS) for e in exps
                 if by_exp[e["name"]]]
    sections.append(_runs_section(rows, columns))
    spec = meta["spec"]
    unit = sweep_unit(items)
    sub = (f"profile {spec['profile']}, " if spec.get("profile") else "") + f"{len(rows)} runs; losses in " \
        f"nats/{short_unit(unit)}"
    page = render_page(f"depthlab sweep {sweep_dir.name}", sections, subtitle=sub, cards=_cards(rows, baselines, unit))
    dest = sweep_dir / REPORT
    write_generated(dest, page.encode("utf-8"))  # a page annotated by hand is kept aside, not replaced
    return dest
