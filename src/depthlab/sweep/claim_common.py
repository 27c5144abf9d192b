"""What every science claim judge uses: the row type, cells of runs, their tests and texts."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ..units import finite_or_none, fmt_value
from .results import CAPPED, OK_STATUSES, field_value
from .stats import (Leaf, Node, cell_stats, fewer_failures, fmt_p, greater, leaves,
                    verdict)


#: Column names of a claims row (the Markdown table and the HTML report use them).
CLAIM_HEADER = ["claim", "source", "setting", "our numbers", "verdict"]
#: The Markdown science table, written into the sweep directory.
SCIENCE_MD = "science.md"


# --------------------------------------------------------------------------- helpers
def select(items: Sequence[dict], **want: Any) -> list[dict]:
    """Runs whose config has every ``section__field=value`` of ``want``."""
    return [it for it in items
            if all(field_value(it["config"], k.replace("__", ".")) == v for k, v in want.items())]


def run_ok(it: dict) -> bool:
    return it["row"]["status"] in OK_STATUSES


def short_of_budget(it: dict) -> bool:
    """Whether the run stopped by ``train.max_time`` before ``train.max_iters`` (status ``time_capped``, or the end
    ``train.fit_to_time`` planned): it trained fewer steps than the claims' equal budget, so its loss is not the
    budget's and its cut is no failure (Fisher's test on "runs not ok" refuted a claim on such runs alone)."""
    if it["row"]["status"] == CAPPED:
        return True
    s = (it.get("details") or {}).get("summary") or {}
    end, budget = s.get("final_step"), field_value(it.get("config") or {}, "train.max_iters")
    return s.get("stopped_by") == "max_time" and isinstance(end, int) and isinstance(budget, int) and end < budget


BUDGET_FIX = "raise train.max_time or lower train.max_iters"
"""What gives every run of a sweep its step budget (the words after a run :func:`short_of_budget` names)."""


def run_names(items: Sequence[dict], limit: int) -> str:
    """``runs/a, runs/b, ...``: the run folders of ``items``, the first ``limit`` of them."""
    return ", ".join(str(it["row"].get("run", "?")) for it in items[:limit]) + (", ..." if len(items) > limit else "")


def init_last_rank(it: dict) -> Optional[float]:
    """Rank measure (Dong et al. 2021) of the last block at initialisation.

    Args:
        it: a per-run dict with ``details`` (``init_probe``, ``probe``).

    Returns:
        The relative residual from rank one (0 = collapsed, dimensionless), from the init probe or
        else the step-0 activation probe; None when neither recorded it.
    """
    d = it["details"]
    p0 = [p for p in d["probe"] if p.get("step") == 0]
    vec = (d.get("init_probe") or {}).get("rank_measure") or (p0[0]["rank_measure"] if p0 else None)
    return finite_or_none(vec[-1]) if vec else None


def init_grad_blocks(it: dict) -> Optional[list[float]]:
    """Gradient L2 norm per block at initialisation (the sweep's init probe, same as ``depthlab probe``).

    Args:
        it: a per-run dict with ``details["init_probe"]``.

    Returns:
        One norm per block (first block first), or None when it was not recorded.
    """
    vec = (it["details"].get("init_probe") or {}).get("grad_norm_block")
    vals = [finite_or_none(v) for v in vec] if vec else []
    return vals if vals and all(v is not None for v in vals) else None


def steps_to(it: dict, target: float) -> Optional[int]:
    """Steps a run needed to reach a validation loss.

    Args:
        it: a per-run dict with ``details["evals"]`` (step, train loss, val loss).
        target: val loss to reach, in nats/char.

    Returns:
        The first evaluated step whose val loss is <= ``target``, or None if none was.
    """
    for s, _, v in it["details"]["evals"]:
        if finite_or_none(v) is not None and v <= target:
            return int(s)
    return None


def vals_of(items: Sequence[dict], key: str) -> str:
    vs = sorted({field_value(it["config"], key) for it in items}, key=lambda v: (str(type(v)), v))
    return ", ".join(fmt_value(v, "g", missing="None") for v in vs)


def lr_of(items: Sequence[dict]) -> str:
    """The learning rates that trained the runs, in words: ``lr 0.005`` when AdamW trained them all, else
    ``Muon lr 0.01 (blocks' matrices), AdamW lr 0.005 (the rest)`` (config.json's ``resolved.optimizer``: a Muon
    run's blocks train at train.muon_lr, which the claim's setting said nothing of)."""
    from ..config import ran_optimizer

    if any(ran_optimizer(it.get("config")) == "muon" for it in items):
        return (f"Muon lr {vals_of(items, 'train.muon_lr')} (blocks' matrices), AdamW lr "
                f"{vals_of(items, 'train.learning_rate')} (the rest)")
    return f"lr {vals_of(items, 'train.learning_rate')}"


def sorted_values(items: Sequence[dict], key: str) -> list:
    return sorted({field_value(it["config"], key) for it in items if field_value(it["config"], key) is not None})


def seeds_of(items: Sequence[dict]) -> str:
    """``seeds 1, 2`` (or ``seed 1``) of the runs."""
    s = sorted_values(items, "train.seed")
    return ("seed " if len(s) == 1 else "seeds ") + ", ".join(map(str, s))


# --------------------------------------------------------------------------- cells and their tests
#: How every verdict is reached, as the setting column says it (the rules are in :mod:`.stats`).
TESTS_NOTE = ("one-sided Welch t-test per comparison (Fisher's exact test on runs not ok where a cell has one), "
              "alpha 0.05; CI = 95% t-interval")


class ClaimRow(list):
    """A claims row ``[claim, source, setting, our numbers, verdict]`` (text) that also carries its test.

    Attributes:
        test: the comparisons behind the verdict (:mod:`depthlab.sweep.stats` nodes), None when not run.
    """

    test: Optional[Node] = None


def claim_row(texts: Sequence[str], test: Optional[Node], verdict_text: Optional[str] = None) -> ClaimRow:
    row = ClaimRow([*texts, verdict_text or verdict(test)])
    row.test = test
    return row


def final_losses(items: Sequence[dict]) -> list[float]:
    """Best val losses (nats/char) of the runs that finished ok."""
    return [v for v in (finite_or_none(it["row"].get("best_val_loss")) for it in items if run_ok(it)) if v is not None]


def short_list(values: Sequence[float], spec: str = ".3f") -> str:
    cs = cell_stats(values)
    return cs.short(spec) if cs else "—"


def cell_short(items: Sequence[dict]) -> str:
    """``2.006 ± 0.053`` of a cell's best val losses, ``diverged`` when no run finished ok."""
    bad = sum(not run_ok(it) for it in items)
    if bad and bad == len(items):
        return "diverged" if any(it["row"]["status"] == "nonfinite" for it in items) else "not ok"
    return short_list(final_losses(items)) + (f" ({bad} of {len(items)} not ok)" if bad else "")


def loss_leaf(label: str, a: Sequence[dict], b: Sequence[dict], margin: float = 0.0,
               names: tuple = ("a", "b")) -> Leaf:
    """The leaf "best val loss of cell a > cell b + margin" (Welch); when a run of either cell did not
    finish ok (a diverged run has no loss), Fisher's exact test that cell b fails less often than a."""
    fa, fb = (sum(not run_ok(it) for it in x) for x in (a, b))
    if fa or fb:
        return fewer_failures(f"{label} (by runs not ok)", fb, len(b), fa, len(a), items=(b, a),
                              names=names[::-1])
    return greater(label, final_losses(a), final_losses(b), margin, items=(a, b), names=names)


def _side(lf: Leaf, i: int) -> str:
    if lf.kind == "fisher":
        fail, n = lf.counts[2 * i], lf.counts[2 * i + 1]
        return f"{lf.names[i]} {fail} of {n} not ok"
    cs = cell_stats(lf.values[i])
    return f"{lf.names[i]} {cs.text() if cs else '—'}"


def compared_text(node: Node) -> str:
    """``compared: <label>: <cell a> vs <cell b>, p = 0.03; ...`` for every comparison of a claim."""
    parts = [f"{lf.label}: {_side(lf, 0)} vs {_side(lf, 1)}, "
             + (fmt_p(lf.p_yes) if lf.p_yes is not None else "untested (a cell has one run)")
             for lf in leaves(node)]
    return "compared: " + "; ".join(parts)


def grid_text(items: Sequence[dict], value) -> str:
    """``plain: L1 2.386 ± 0.115, L2 ...; prenorm: ...`` (mean ± sd over seeds of ``value(cell items)``)."""
    depths = sorted_values(items, "model.n_layer")
    return "; ".join(f"{v}: " + ", ".join(f"L{L} {value(select(items, model__variant=v, model__n_layer=L))}"
                                         for L in depths if select(items, model__variant=v, model__n_layer=L))
                     for v in sorted_values(items, "model.variant"))
