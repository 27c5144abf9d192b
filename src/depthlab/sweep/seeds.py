"""Which cells get more seeds: what ``depthlab sweep --seeds auto[:MAX]`` asks after each round.

The science claims (:mod:`depthlab.sweep.science`) are judged on the sweep so far; for each
undecided claim, the cells of its comparisons that are not yet decided get more seeds, towards
the estimate of :func:`depthlab.sweep.stats.needed` (power 0.8 at alpha 0.05, Bonferroni-split where the
verdict's rule splits it), at most doubling per round. :func:`depthlab.sweep.run.run_sweep` adds them and runs
the next round.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import DepthlabError
from .common import cell_key
from .results import sweep_items
from .science import CLAIMS, ClaimRow, science_claims
from .spec import SweepSpec
from .stats import ALPHA, leaves, needed

__all__ = ["seeds_wanted", "check_auto_seeds"]


def _claim_target(row: ClaimRow, n_now: int, max_seeds: int) -> int:
    """Seeds per cell the next round gives an undecided claim: towards the estimate of
    :func:`depthlab.sweep.stats.needed`, at most doubling per round (the spread is re-measured),
    at least one more, at most ``max_seeds``."""
    est = [needed(row.test, route) for route in ("yes", "no")]
    if None in est:  # a cell with one run: no spread yet
        return min(max_seeds, n_now + 1)
    k = min(est)
    k = max_seeds if math.isinf(k) else int(k)
    return min(max_seeds, max(n_now + 1, min(k, 2 * n_now)))


def seeds_wanted(sweep_dir: str | Path, max_seeds: int) -> dict[str, int]:
    """The cells of the undecided claims of a sweep and the seeds each should have next (``--seeds auto``).

    Args:
        sweep_dir: a sweep directory.
        max_seeds: the most seeds a cell may get.

    Returns:
        Cell key (:func:`depthlab.sweep.common.cell_key`) -> seeds it should have; only the cells of
        the comparisons not yet decided (p >= alpha both ways, Bonferroni over the claim's comparisons
        for the negation) of claims that are undecided, below ``max_seeds``.

    Raises:
        DepthlabError: not a sweep directory.
    """
    meta, _, _, items = sweep_items(sweep_dir)
    points = {r["name"]: r["point"] for r in meta["runs"]}
    exps = meta["spec"]["experiments"]
    by_exp = {e["name"]: [it for it in items if it["experiment"] == e["name"]] for e in exps}
    want: dict[str, int] = {}
    for row in science_claims(by_exp, {e["name"]: e.get("extra") or {} for e in exps}):
        if row.test is None or not row[-1].startswith("undecided"):
            continue
        cells: dict[str, set] = {}
        lvs = leaves(row.test)
        for lf in lvs:
            if lf.p_yes is not None and (lf.p_yes < ALPHA or lf.p_no < ALPHA / len(lvs)):
                continue  # this comparison is decided already: its cells need no more seeds
            for it in (x for side in lf.items for x in side if x.get("name") in points):
                cells.setdefault(cell_key(it["experiment"], points[it["name"]]), set()).add(it["name"])
        n_now = min((len(v) for v in cells.values()), default=max_seeds)
        if n_now >= max_seeds:
            continue
        target = _claim_target(row, n_now, max_seeds)
        for k in cells:
            want[k] = max(want.get(k, 0), target)
    return want


def check_auto_seeds(spec: SweepSpec) -> None:
    """Refuse ``--seeds auto`` for a sweep none of whose experiments has a science claim to judge.

    Raises:
        DepthlabError: no experiment of ``spec`` is named in :data:`depthlab.sweep.science.CLAIMS`.
    """
    if not any(e.name in CLAIMS for e in spec.experiments):
        names = ", ".join(sorted({e.name for e in spec.experiments if e.name}))
        what = f"this sweep's experiments ({names})" if names else "a command-line grid"
        raise DepthlabError(f"--seeds auto adds seeds where a science claim is undecided, and {what} has no claim "
                            "to judge (the science profile's experiments do: --profile science); give --seeds N for "
                            "seeds 1..N in every cell")
