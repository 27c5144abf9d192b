"""Plain-language findings of one experiment of a sweep, computed from its numbers.

Text and tables only (the report renders them): the trend of best validation loss with depth
per line, how far the deepest plain model is from the best shallower one, whether it sits at a
corpus baseline, which runs failed, and for init-only experiments the rank measure at init.
Losses are in nats per token (:func:`sweep_unit`: a character on character runs); bits = nats / ln 2.
"""

from __future__ import annotations

import math
import statistics as st
from typing import Any, Optional, Sequence

from ..analytics.rules.evidence import Thresholds, unit_of
from ..units import LN2, counted
from .results import CAPPED, OK_STATUSES, aggregate, field_value, group_name
from .claim_common import BUDGET_FIX, run_names, short_of_budget
from .science import init_last_rank
from .stats import ALPHA, welch_two_sided

__all__ = ["summary_lines", "init_lines", "aggregate_table", "sweep_unit", "short_unit"]


def sweep_unit(items: Sequence[dict]) -> str:
    """What one token of the runs of ``items`` (each with ``config``) is, in words: ``character`` when every run
    is on characters (:func:`~depthlab.analytics.rules.evidence.unit_of`), else ``token`` (true of either)."""
    return "character" if all(unit_of(it.get("config")) == "character" for it in items) else "token"


def _vocabulary(config: Optional[dict]) -> str:
    """A run's tokenizer in words (``char``, ``bpe 512``): runs with different ones have losses per token in
    different units."""
    data = (config or {}).get("data") or {}
    tok = data.get("tokenizer") or "char"
    size = data.get("vocab_size")
    return f"{tok} {size}" if tok != "char" and size else tok


def short_unit(unit: str) -> str:
    """The label form of :func:`sweep_unit`'s word: ``char`` or ``token`` (``nats/char``, ``bits/token``)."""
    return "char" if unit == "character" else "token"


def _blocks(n: Any) -> str:
    return f"{n} block" if n == 1 else f"{n} blocks"


DEPTH = "model.n_layer"


def _at(x: Optional[str], v: Any) -> str:
    """A point of the x axis in words: ``4 blocks`` for depth, ``learning_rate 0.01`` for any other field."""
    return _blocks(v) if x == DEPTH else f"{(x or '').split('.')[-1]} {v}"


def _trend(d: dict[Any, tuple[float, float, int]], x: Optional[str] = DEPTH) -> tuple[Any, str]:
    """(best x, verdict) for one line of mean losses keyed by the values of the x field ``x`` (depth: "with depth",
    "blocks"; another field: "as learning_rate grows")."""
    xs = [k for k in d if not math.isnan(d[k][0])]
    if not xs:
        return None, "no finished runs"
    best = min(xs, key=lambda k: d[k][0])
    lo, hi = min(xs), max(xs)
    if len(xs) < 2:
        return best, f"one {'depth' if x == DEPTH else 'value'} only"
    first, last, bestv = d[lo][0], d[hi][0], d[best][0]
    along = "with depth" if x == DEPTH else f"as {(x or '').split('.')[-1]} grows"
    if last >= bestv + 0.1:
        verdict = (f"gets worse {along}: {_at(x, hi)} ends {last - bestv:.3f} nats above the best "
                   f"({_at(x, best)}, {bestv:.3f})")
    elif last <= first - 0.02 and last <= bestv + 0.02:
        verdict = f"improves {along}: {first:.3f} nats at {_at(x, lo)} -> {last:.3f} at {_at(x, hi)}"
    elif last <= bestv + 0.02:
        verdict = f"about flat {along} ({first:.3f} nats at {_at(x, lo)} -> {last:.3f} at {_at(x, hi)})"
    elif best == lo:  # the best is the first value: the line never improves
        verdict = f"worsens a little {along}: best {bestv:.3f} at {_at(x, best)}, {last:.3f} at {_at(x, hi)}"
    else:
        verdict = (f"improves then worsens a little: best {bestv:.3f} at {_at(x, best)}, "
                   f"{last:.3f} at {_at(x, hi)}")
    if not verdict.startswith("about flat"):  # "improves with depth" compares its ends, the others best and last
        verdict += _unclear(d[lo] if verdict.startswith(f"improves {along}") else d[best], d[hi])
    return best, verdict


def _unclear(a: tuple[float, float, int], b: tuple[float, float, int]) -> str:
    """``; within the seeds' spread (...)`` when the change from cell ``a`` to cell ``b`` (mean, sd, n) is no clear
    change at these seeds (:func:`~depthlab.sweep.stats.welch_two_sided` above :data:`~depthlab.sweep.stats.ALPHA`);
    "" when it is, or a cell has one run. The words' cuts (0.1, 0.02 nats) are on the means alone: "improves with
    depth: 2.684 -> 2.661" stood beside sds of 0.041 and 0.049 (Welch p = 0.29)."""
    p = welch_two_sided(a, b)
    return f"; within the seeds' spread: not a clear change at these seeds (Welch p = {p:.2g})" \
        if p is not None and p > ALPHA else ""


def baseline_words(loss: float, baselines: dict, unit: str, margin: float = 0.05) -> Optional[str]:
    """Where a loss (nats per token) sits against the corpus baselines, in words, or None below the bigram line:
    at the unigram line (within ``margin``), above it, at the bigram line, or between the two. Both sides are
    judged (a loss 0.48 nats above the unigram line was called "at the unigram baseline")."""
    u, b = baselines["unigram"], baselines.get("bigram")
    if loss > u + margin:
        return (f"above the unigram baseline ({u:.3f}) by {loss - u:.3f}: it has not learned even how common each "
                f"{unit} is (too few steps, or nothing of the input reaches the output)")
    if loss >= u - margin:
        return (f"at the unigram baseline ({u:.3f}): it predicts {unit} frequencies and uses no context at all, not "
                f"even the current {unit}")
    if b is None or b >= u:  # i.i.d. text: no bigram line below the unigram one to compare with
        return None
    if loss > b + margin:
        return (f"between the unigram ({u:.3f}) and bigram ({b:.3f}) baselines: it has learned part of what the "
                f"current {unit} says")
    if loss >= b - margin:
        return (f"no better than the bigram baseline ({b:.3f}): it predicts from the current {unit} alone and uses "
                "almost none of the context before it")
    return None


def _plain_lines(d: dict, baselines: Optional[dict], unit: str = "character",
                 steps: Optional[int] = None) -> list[str]:
    """The deepest plain model vs the best shallower one, and vs the corpus baselines (a depth axis only);
    ``steps``: the fewest steps its runs trained (below ``Thresholds.bigram_min_steps``, where diagnose does not
    judge a loss at a baseline yet, the sentence says so)."""
    deep = max(d)
    shallow = {k: v for k, v in d.items() if k < deep}
    bk = min(shallow, key=lambda k: shallow[k][0])
    diff = d[deep][0] - d[bk][0]
    out = [f"The deepest plain model ({_blocks(deep)}) is {diff:+.3f} nats/{short_unit(unit)} "
           f"({diff / d[bk][0] * 100:+.1f} %) vs the best shallower plain model ({_blocks(bk)})."]
    if baselines and baselines.get("unigram") is not None:
        where = baseline_words(d[deep][0], baselines, unit)
        early = Thresholds.bigram_min_steps
        if where and steps is not None and steps < early:  # diagnose calls no run stuck this early: nor do we
            where += (f", after only {counted(steps, 'step')} (diagnose judges a loss at a baseline from step {early} "
                      "on: a longer run tells whether it stays there)")
        if where:
            out.append(f"At {_blocks(deep)} plain is {where}.")
    return out


def _steps_trained(it: dict) -> Optional[int]:
    """The steps a run trained: its summary's final_step, else its config's train.max_iters (None: neither)."""
    end = ((it.get("details") or {}).get("summary") or {}).get("final_step")
    end = end if isinstance(end, int) else field_value(it["config"], "train.max_iters")
    return end if isinstance(end, int) else None


def summary_lines(items: Sequence[dict], x: Optional[str], groups: Sequence[str],
                  baselines: Optional[dict]) -> list[str]:
    """Plain-language findings computed from the numbers of one experiment.

    Args:
        items: per-run dicts (``config``, ``row``), see :func:`depthlab.sweep.results.sweep_items`.
        x: dotted x field (usually ``model.n_layer``).
        groups: dotted fields that define the lines (usually ``model.variant``).
        baselines: corpus baselines in nats per token (``unigram``, ``bigram``), or None.

    Returns:
        Sentences (plain text); a line "gets worse with depth" means its deepest model is >= 0.1
        nats above its best.
    """
    agg = aggregate(items, x, groups)
    out = []
    seeds = {it["config"]["train"]["seed"] for it in items}
    per_cell = sorted({n for d in agg.values() for _, _, n in d.values()})  # --seeds auto adds to some cells only
    if len(seeds) > 1:
        many = f"{len(seeds)} seeds" if per_cell in ([], [len(seeds)]) else \
            f"{per_cell[0]} to {per_cell[-1]} seeds per cell"
        out.append(f"Numbers are means over {many} ({', '.join(map(str, sorted(seeds)))}); "
                   "the spread is the sample standard deviation.")
    short = [it for it in items if short_of_budget(it)]
    capped = [it for it in short if it["row"]["status"] == CAPPED]
    planned = [it for it in short if it["row"]["status"] != CAPPED]
    if planned:  # a fit_to_time plan ended them early: they are in the means, whose trends compare unequal budgets
        # "fewer steps than the others'" was said where there were no others, or the others had died sooner
        out.append(f"{counted(len(planned), 'run')} stopped by train.max_time before train.max_iters "
                   f"({run_names(planned, 6)}): their losses are at fewer steps than the run asked for, so the "
                   f"comparisons below are not at an equal step budget ({BUDGET_FIX}).")
    if capped:  # a finding, not a failure; the means below are over the ok runs only
        out.append(f"{counted(len(capped), 'run')} stopped by train.max_time before train.max_iters "
                   f"(status {CAPPED}: {run_names(capped, 6)}): left out of the means "
                   f"below, which are over the runs with status ok ({BUDGET_FIX}).")
    xname = x.split(".")[-1] if x else ""
    unit = sweep_unit(items)
    u = short_unit(unit)
    vocabularies = {_vocabulary(it.get("config")) for it in items}
    if len(vocabularies) > 1:  # a char x BPE grid: char's nats/token looked far better where BPE was per character
        out.append(f"These runs split the text into different tokens ({', '.join(sorted(vocabularies))}): their "
                   f"losses per {unit} below do not compare across tokenizers; bits per character do (results.csv's "
                   "best_val_bpc, the all-runs table's column of that name).")
    for g, d in sorted(agg.items()):
        best, verdict = _trend(d, x)
        if best is None:
            out.append(f"{g}: {verdict}.")
            continue
        m, sd, n = d[best]
        spread = f" ± {sd:.3f}" if n > 1 else ""
        if not x:  # no x axis (a grid over model.init, say): no "best = 0", no depth trend to tell
            out.append(f"{g}: best val loss {m:.3f}{spread} nats/{u} ({m / LN2:.3f} bits/{u}).")
            continue
        out.append(f"{g}: best {xname} = {best} ({m:.3f}{spread} nats/{u}, {m / LN2:.3f} bits/{u}); {verdict}.")
    if x == DEPTH and "plain" in agg and len(agg["plain"]) > 1:
        depth = max(agg["plain"])
        deepest = [it for it in items if it["config"]["model"].get("variant") == "plain"
                   and field_value(it["config"], x) == depth and it["row"]["status"] in OK_STATUSES]
        ran = [_steps_trained(it) for it in deepest]
        out += _plain_lines(agg["plain"], baselines, unit, min(ran) if ran and None not in ran else None)
    failed = [it for it in items if it["row"]["status"] not in (*OK_STATUSES, CAPPED)]  # the capped: said above
    if failed:
        out.append(f"{counted(len(failed), 'run')} did not finish normally: " + "; ".join(
            f"{it['row']['run']} ({it['row']['status']})" for it in failed[:8]) + ".")
    return out


def init_lines(items: Sequence[dict], x: Optional[str], groups: Sequence[str]) -> list[str]:
    """Summary of an experiment whose runs take at most one step: only the init measurements count.

    Args:
        items: per-run dicts (``config``, ``details``).
        x: dotted x field.
        groups: dotted fields that define the lines.

    Returns:
        Sentences: the mean last-block rank measure at init (Dong et al. 2021) per line and x.
    """
    out = ["These runs take at most one optimizer step: only the measurements at initialisation are "
           "meaningful (their losses are not)."]
    acc: dict = {}
    for it in items:
        r = init_last_rank(it)
        if r is not None:
            acc.setdefault(group_name(it["config"], groups), {}).setdefault(
                field_value(it["config"], x) if x else 0, []).append(r)
    for g, d in sorted(acc.items()):
        # no x axis (a grid over model.norm, say): the line is the setting; "x 0" was no value of the sweep
        out.append(f"{g}: last-block rank measure at init " + ", ".join(
            (f"{x.split('.')[-1]} {k}: " if x else "") + f"{st.mean(v):.3g}" for k, v in sorted(d.items())) + ".")
    return out


def aggregate_table(items: Sequence[dict], x: Optional[str], groups: Sequence[str]) -> tuple[list[str], list[list]]:
    """(header, rows) of the per-line, per-x table of an experiment, means over seeds.

    Args:
        items: per-run dicts (``config``, ``row``).
        x: dotted x field (None = one row per line).
        groups: dotted fields that define the lines.

    Returns:
        (header, rows). Columns: line, x (left out when ``x`` is None), best val loss mean (nats per token),
        sample sd (None for one seed), seeds, bits per token (``bits/char`` on character runs), grad-norm
        ratio first/last block, last-block rank measure,
        tokens/s (each a mean over the ok runs, None when no run recorded it). No rows when no
        run finished.
    """
    agg = aggregate(items, x, groups)
    extra = [aggregate(items, x, groups, metric=m) for m in ("grad_ratio_first_last", "last_block_rank",
                                                             "tokens_per_sec")]
    rows = []
    for g, d in sorted(agg.items()):
        for xv, (m, sd, n) in d.items():
            cells = []
            for a in extra:
                v = a.get(g, {}).get(xv)
                cells.append(None if v is None or math.isnan(v[0]) else v[0])
            # no x axis: the line (norm=rmsnorm) labels the row; an "x" column held 0, no value of the sweep
            # the sd to 4 significant digits: 4 decimals made 1.944e-04 read "2.000e-04"
            rows.append([g, *([xv] if x else []), round(m, 4), float(f"{sd:.4g}") if n > 1 else None, n,
                         round(m / LN2, 4), *cells])
    header = ["line", *([x.split(".")[-1]] if x else []), "best val loss (mean)", "sd", "seeds",
              f"bits/{short_unit(sweep_unit(items))}",
              "grad ratio first/last block", "last-block rank", "tokens/s"]
    return header, rows
