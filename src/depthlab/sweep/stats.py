"""Seed statistics: a cell's mean ± sd (n) and 95 % interval, the tests the claims are judged by, seeds needed.

A *cell* is one grid point of an experiment without its seed (e.g. pre-LN, 8 blocks): its runs
differ only in ``train.seed``, so their spread is the seed noise. A claim of
:mod:`depthlab.sweep.science` is a tree of one-sided comparisons of cells (:class:`Leaf`),
joined by :class:`All` (every comparison must hold) or :class:`Any` (some must). Each node has
two p-values: ``p_yes`` for the claim and ``p_no`` for its negation, so the verdict is

- ``yes`` when ``p_yes < alpha``, ``no`` when ``p_no < alpha``, else ``undecided`` with the seeds
  per cell a Welch test would need (:func:`seeds_needed`);
- at a leaf: Welch's one-sided t-test on the losses (``p_no = 1 - p_yes``), or Fisher's exact test on
  the count of runs that did not finish ``ok`` when either cell has one (a diverged run has no loss);
- ``All``: ``p_yes`` = the largest child ``p_yes`` (the intersection-union test, Berger 1982: no
  correction is needed when every part must hold), ``p_no`` = Bonferroni, k x the smallest child
  ``p_no`` (one failing part of k refutes the claim); ``Any`` is the dual (Bonferroni for ``yes``,
  the largest ``p_no`` for ``no``).

``yes`` and ``no`` cannot both hold: a leaf's two p-values sum to at least 1. The level is
:data:`ALPHA` = 0.05 and the power of the seed estimate :data:`POWER` = 0.8, fixed here, before any run.
"""

from __future__ import annotations

import dataclasses
import math
import statistics as st
from typing import Optional, Sequence, Union

__all__ = ["ALPHA", "POWER", "MAX_ESTIMATE", "CellStats", "cell_stats", "floored_variance", "welch_greater",
           "welch_two_sided", "fisher_fewer", "seeds_needed", "Leaf", "All", "Any", "greater", "fewer_failures",
           "p_yes", "p_no", "needed",
           "verdict", "fmt_p", "leaves"]

#: Significance level of every claim (one-sided tests).
ALPHA = 0.05
#: Power at which :func:`seeds_needed` sizes an undecided claim.
POWER = 0.8
#: Seeds per cell beyond which the estimate is reported as "more than" this.
MAX_ESTIMATE = 1000


# --------------------------------------------------------------------------- one cell
@dataclasses.dataclass(frozen=True)
class CellStats:
    """Mean, sample standard deviation, count and 95 % t-interval of one cell's values.

    Attributes:
        mean: the mean (the values' unit, e.g. nats/char).
        sd: sample standard deviation (n - 1 in the denominator); 0 for one value.
        n: number of values (seeds).
        lo, hi: the 95 % t-interval mean ± t(0.975, n - 1) sd / sqrt(n) (Student 1908); None for n = 1.
    """

    mean: float
    sd: float
    n: int
    lo: Optional[float]
    hi: Optional[float]

    def text(self, spec: str = ".3f") -> str:
        """``2.006 ± 0.053 (n = 2, CI 1.530 to 2.482)`` (CI: the 95 % t-interval), or ``2.006 (n = 1)``."""
        if self.n < 2:
            return f"{self.mean:{spec}} (n = 1)"
        return f"{self.mean:{spec}} ± {self.sd:{spec}} (n = {self.n}, CI {self.lo:{spec}} to {self.hi:{spec}})"

    def short(self, spec: str = ".3f") -> str:
        """``2.006 ± 0.053`` (``2.006`` for one value)."""
        return f"{self.mean:{spec}}" + (f" ± {self.sd:{spec}}" if self.n > 1 else "")


def cell_stats(values: Sequence[float]) -> Optional[CellStats]:
    """The :class:`CellStats` of some values (None values are skipped).

    Args:
        values: one number per run (seed).

    Returns:
        The statistics, or None when there is no value.
    """
    from scipy import stats

    xs = [float(x) for x in values if x is not None]
    if not xs:
        return None
    m = st.mean(xs)
    if len(xs) < 2:
        return CellStats(m, 0.0, 1, None, None)
    sd = st.stdev(xs)
    half = float(stats.t.ppf(0.975, len(xs) - 1)) * sd / math.sqrt(len(xs))
    return CellStats(m, sd, len(xs), m - half, m + half)


# --------------------------------------------------------------------------- the tests
def floored_variance(xs: Sequence[float], resolution: float = 0.0) -> float:
    """The sample variance of xs, never below resolution²/12 (needs two or more values).

    A value read on a grid of spacing ``resolution`` (a step count seen only at every evaluation)
    carries a rounding error of variance h²/12 (Sheppard 1898); two seeds landing on the same grid
    point show a spread of 0 that the measurement cannot resolve, and a test taking that 0 at face
    value calls any difference exact (p = 0).
    """
    return max(st.variance(xs), resolution ** 2 / 12.0)


def welch_greater(a: Sequence[float], b: Sequence[float], margin: float = 0.0,
                  resolution: float = 0.0) -> Optional[tuple[float, float, float]]:
    """Welch's one-sided t-test of H1: mean(a) > mean(b) + margin (Welch 1947).

    t = (mean(a) - mean(b) - margin) / sqrt(s_a²/n_a + s_b²/n_b), with the Welch–Satterthwaite
    degrees of freedom df = (v_a + v_b)² / (v_a²/(n_a - 1) + v_b²/(n_b - 1)), v = s²/n, and
    p = P(T_df >= t); each s² is floored at resolution²/12 (:func:`floored_variance`). When both
    spreads are 0 (resolution 0) the difference is exact: p = 0 if it exceeds the margin, 1 if it
    falls short, 0.5 at the margin.

    Args:
        a, b: the two cells' values (e.g. best val loss in nats/char per seed).
        margin: the difference H1 must exceed, in the values' unit.
        resolution: the grid the values were read on (0: continuous values).

    Returns:
        (t, df, p), or None when a cell has fewer than two values (no spread to test against).
    """
    from scipy import stats

    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = floored_variance(a, resolution) / len(a), floored_variance(b, resolution) / len(b)
    diff = st.mean(a) - st.mean(b) - margin
    if va + vb == 0.0:
        return (math.copysign(math.inf, diff) if diff else 0.0), math.inf, (0.0 if diff > 0 else 1.0 if diff < 0
                                                                             else 0.5)
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return t, df, float(stats.t.sf(t, df))


def welch_two_sided(a: tuple[float, float, int], b: tuple[float, float, int]) -> Optional[float]:
    """Welch's two-sided p of mean(a) != mean(b) from two cells' ``(mean, sd, n)`` (Welch 1947; scipy's
    ``ttest_ind_from_stats``, the same t and degrees of freedom as :func:`welch_greater`): for words on a difference
    the claims do not judge. None when a cell has fewer than two values or neither has a spread.
    """
    from scipy import stats

    (ma, sa, na), (mb, sb, nb) = a, b
    if na < 2 or nb < 2 or not (sa > 0 or sb > 0):
        return None
    return float(stats.ttest_ind_from_stats(ma, sa, na, mb, sb, nb, equal_var=False).pvalue)


def fisher_fewer(fail_a: int, n_a: int, fail_b: int, n_b: int) -> float:
    """Fisher's exact one-sided p-value of H1: cell a fails (does not finish ok) less often than cell b.

    Args:
        fail_a, n_a: failed runs and runs of cell a.
        fail_b, n_b: the same for cell b.

    Returns:
        p (hypergeometric tail of the 2x2 table, Fisher 1935).
    """
    from scipy import stats

    table = [[fail_a, n_a - fail_a], [fail_b, n_b - fail_b]]
    return float(stats.fisher_exact(table, alternative="less").pvalue)


def _welch_power(delta: float, sd_a: float, sd_b: float, n: int, alpha: float) -> float:
    """Power of the one-sided Welch test at level alpha with n per cell when the true difference is delta."""
    from scipy import stats

    var = sd_a ** 2 + sd_b ** 2
    df = (n - 1) * var ** 2 / (sd_a ** 4 + sd_b ** 4)
    ncp = delta / math.sqrt(var / n)
    return float(stats.nct.sf(stats.t.ppf(1 - alpha, df), df, ncp))


def seeds_needed(delta: float, sd_a: float, sd_b: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Seeds per cell (the same in both) for a one-sided Welch test to reach ``power`` at ``alpha``.

    The measured difference and spreads are taken as the truth; the power is that of the
    noncentral t: P(T'(df, λ) > t(1 - alpha, df)) with λ = delta / sqrt((s_a² + s_b²)/n) and the
    Welch df for equal n, (n - 1)(s_a² + s_b²)² / (s_a⁴ + s_b⁴) (Cohen 1988, ch. 2).

    Args:
        delta: the measured difference beyond the margin, in the claimed direction (> 0 to be reachable).
        sd_a, sd_b: the cells' sample standard deviations.
        alpha: the level the test must reach (Bonferroni-divided where the claim needs it).
        power: the wanted power.

    Returns:
        The smallest n >= 2, or ``math.inf`` when delta <= 0 or more than :data:`MAX_ESTIMATE` are needed.
    """
    if delta <= 0:
        return math.inf
    if sd_a == 0 and sd_b == 0:
        return 2
    lo, hi = 2, MAX_ESTIMATE
    if _welch_power(delta, sd_a, sd_b, hi, alpha) < power:
        return math.inf
    while lo < hi:  # power grows with n: bisect for the smallest n that reaches it
        mid = (lo + hi) // 2
        if _welch_power(delta, sd_a, sd_b, mid, alpha) >= power:
            hi = mid
        else:
            lo = mid + 1
    return lo


# --------------------------------------------------------------------------- claims as trees of tests
@dataclasses.dataclass
class Leaf:
    """One one-sided comparison of two cells: H1 "a > b + margin" (losses) or "a fails less often".

    Attributes:
        label: what it claims, in words (``pre-LN L8 < L1``).
        kind: ``welch`` or ``fisher``.
        p_yes: p-value of the claim (None: a cell has fewer than two runs).
        p_no: p-value of its negation.
        delta: measured mean(a) - mean(b) - margin (welch; > 0 points to the claim).
        sds: the two cells' sample sds (welch).
        counts: (fail_a, n_a, fail_b, n_b) (fisher).
        n: runs per cell, (a, b).
        items: the per-run dicts behind each side, (a, b) (for ``--seeds auto``).
        values: the values compared, (a, b) (welch).
        names: the two cells in words, (a, b).
    """

    label: str
    kind: str
    p_yes: Optional[float]
    p_no: Optional[float]
    n: tuple[int, int]
    delta: float = 0.0
    sds: tuple[float, float] = (0.0, 0.0)
    counts: tuple[int, int, int, int] = (0, 0, 0, 0)
    items: tuple = ((), ())
    values: tuple = ((), ())
    names: tuple = ("a", "b")


@dataclasses.dataclass
class All:
    """Every child must hold (intersection-union test)."""

    children: list


@dataclasses.dataclass
class Any:
    """Some child must hold (Bonferroni over the children)."""

    children: list


Node = Union[Leaf, All, Any]


def greater(label: str, a: Sequence[float], b: Sequence[float], margin: float = 0.0,
            items: tuple = ((), ()), names: tuple = ("a", "b"), resolution: float = 0.0) -> Leaf:
    """The leaf "mean(a) > mean(b) + margin" by :func:`welch_greater` (a "less" claim swaps a and b).

    Args:
        label: the comparison in words.
        a, b: the cells' values (finished runs only).
        margin: the difference to exceed, in the values' unit.
        items: the per-run dicts of each side.
        names: the two cells in words.
        resolution: the grid the values were read on (0: continuous); the sds are floored as the test's are.

    Returns:
        The :class:`Leaf` (p-values None when a side has fewer than two values).
    """
    a, b = [float(x) for x in a], [float(x) for x in b]
    r = welch_greater(a, b, margin, resolution)
    sds = tuple(math.sqrt(floored_variance(x, resolution)) if len(x) > 1 else 0.0 for x in (a, b))
    delta = (st.mean(a) - st.mean(b) - margin) if a and b else 0.0
    return Leaf(label, "welch", None if r is None else r[2], None if r is None else 1.0 - r[2], (len(a), len(b)),
                delta=delta, sds=sds, items=items, values=(a, b), names=names)


def fewer_failures(label: str, fail_a: int, n_a: int, fail_b: int, n_b: int, items: tuple = ((), ()),
                   names: tuple = ("a", "b")) -> Leaf:
    """The leaf "cell a fails less often than cell b" by Fisher's exact test (:func:`fisher_fewer`)."""
    counts = (fail_a, n_a, fail_b, n_b)
    if n_a < 1 or n_b < 1:
        return Leaf(label, "fisher", None, None, (n_a, n_b), counts=counts, items=items, names=names)
    return Leaf(label, "fisher", fisher_fewer(fail_a, n_a, fail_b, n_b), fisher_fewer(fail_b, n_b, fail_a, n_a),
                (n_a, n_b), counts=counts, items=items, names=names)


def _kids(node: Node) -> list:
    return node.children if node.children else [Leaf("nothing to compare", "welch", None, None, (0, 0))]


def _combine(ps: list, every: bool) -> Optional[float]:
    """One p-value from the children's: of "every part holds" or of "some part holds".

    Args:
        ps: the children's p-values (None: that child cannot be tested yet).
        every: True: every part must hold, the intersection-union test (Berger 1982): the largest p,
            None while any is unknown. False: some part must hold, Bonferroni: min(1, k x the
            smallest known p) for k children, given while some are unknown only if it is already
            below :data:`ALPHA` with the unknown ones counted in k.

    Returns:
        The combined p-value, or None (not testable yet).
    """
    if every:
        return None if None in ps else max(ps)
    known = [p for p in ps if p is not None]
    return min(1.0, len(ps) * min(known)) if known and (None not in ps or min(known) * len(ps) < ALPHA) else None


def p_yes(node: Node) -> Optional[float]:
    """The claim's p-value (None when some comparison cannot be tested yet)."""
    if isinstance(node, Leaf):
        return node.p_yes
    return _combine([p_yes(c) for c in _kids(node)], every=isinstance(node, All))


def p_no(node: Node) -> Optional[float]:
    """The negation's p-value (None when it cannot be tested yet): the negation of Any is every part failing."""
    if isinstance(node, Leaf):
        return node.p_no
    return _combine([p_no(c) for c in _kids(node)], every=isinstance(node, Any))


def _leaf_needed(leaf: Leaf, route: str, alpha: float) -> Optional[float]:
    """Seeds per cell for this leaf to be significant on ``route`` (None: unknown, a side has < 2 runs)."""
    if leaf.p_yes is None:
        return None
    if leaf.kind == "fisher":
        fa, na, fb, nb = leaf.counts
        ra, rb = (fa / na, fb / nb) if route == "yes" else (fb / nb, fa / na)

        def significant(n: int) -> bool:  # the measured failure rates, kept at a larger n
            return fisher_fewer(round(ra * n), n, round(rb * n), n) < alpha

        lo, hi = max(na, nb), MAX_ESTIMATE  # as far as Welch's estimate looks (it said "more than 1000" at 200)
        if ra >= rb or not significant(hi):  # equal rates (2 of 2 vs 2 of 2), or the other way: no n decides
            return math.inf
        if significant(lo):
            return lo
        while hi - lo > 1:  # bisection: the p-value falls as n grows at fixed rates
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if significant(mid) else (mid, hi)
        return hi
    delta = leaf.delta if route == "yes" else -leaf.delta
    return seeds_needed(delta, *leaf.sds, alpha=alpha)


def needed(node: Node, route: str = "yes", alpha: float = ALPHA) -> Optional[float]:
    """Seeds per cell for ``route`` (``yes`` or ``no``) to reach ``alpha`` at the measured effects and spreads.

    ``All`` on ``yes`` needs every child (the largest need), on ``no`` one child at alpha / k (the
    smallest); ``Any`` is the dual.

    Returns:
        Seeds per cell, ``math.inf`` when the measured effect points the other way, or None when a
        cell has fewer than two runs (no spread measured yet).
    """
    if isinstance(node, Leaf):
        return _leaf_needed(node, route, alpha)
    kids = _kids(node)
    every = isinstance(node, All) == (route == "yes")
    ns = [needed(c, route, alpha if every else alpha / len(kids)) for c in kids]
    if None in ns:
        return None
    return max(ns) if every else min(ns)


def leaves(node: Node) -> list[Leaf]:
    """Every comparison of a claim, in order."""
    return [node] if isinstance(node, Leaf) else [lf for c in node.children for lf in leaves(c)]


def fmt_p(p: float) -> str:
    """``p = 0.003``, ``p = 0.21``, ``p < 0.001`` (two significant digits)."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def _n_text(node: Node) -> str:
    ns = [n for lf in leaves(node) for n in lf.n]
    if not ns:
        return "0"
    return str(min(ns)) if min(ns) == max(ns) else f"{min(ns)}-{max(ns)}"


def verdict(node: Optional[Node]) -> str:
    """``yes (p = 0.003, n = 4)``, ``no (p = ..., n = ...)``, ``undecided (p = 0.21, n = 2): add seeds, ...``.

    n is the seeds per compared cell (``2-4`` when cells differ). An undecided verdict names the seeds per
    cell the faster of the two routes (yes or no) would need by :func:`needed` (power 0.8 at alpha 0.05, split
    by Bonferroni where the route's rule splits it); ``not run`` without any comparison.
    """
    if node is None or not leaves(node):
        return "not run"
    n = _n_text(node)
    py, pn = p_yes(node), p_no(node)
    if py is not None and py < ALPHA:
        return f"yes ({fmt_p(py)}, n = {n})"
    if pn is not None and pn < ALPHA:
        return f"no ({fmt_p(pn)}, n = {n})"
    head = f"undecided ({fmt_p(py)}, n = {n})" if py is not None else f"undecided (n = {n})"
    ny, nn = needed(node, "yes"), needed(node, "no")
    if ny is None or nn is None:
        return head + ": add seeds (a cell has one run: at least 2 per cell to measure the spread)"
    k = min(ny, nn)
    if math.isinf(k):  # an effect of 0 (2 of 2 runs not ok against 2 of 2), or too small: seeds will not decide it
        return head + (f": more seeds are unlikely to decide it (at the measured effects not even {MAX_ESTIMATE} per "
                       "cell would)")
    # the test is each comparison's own (Welch's, or Fisher's exact on runs not ok), at its share of alpha: "Welch
    # power 0.8 at alpha 0.05" was said of 325 seeds computed at 0.025, where 256 reach it at 0.05
    return head + (f": add seeds, about {int(k)} per cell (power {POWER:g} at alpha {ALPHA:g}, Bonferroni-split "
                   "where the verdict's rule splits it)")
