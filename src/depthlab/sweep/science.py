"""Published claims and their verdicts, one function per experiment of the ``science`` profile.

Each function judges the experiment of the same name in ``profiles/science.yaml`` (the YAML
comment above each entry names its judge here) and returns one table row: claim, source,
setting, our numbers, verdict (a :class:`ClaimRow`, which also carries the comparisons behind
the verdict). A claim is a set of one-sided comparisons of *cells* (a grid point without its
seed: its runs differ only in ``train.seed``), each a Welch t-test over the seeds (Fisher's exact
test on the runs that did not finish ok where a cell has one), joined as :mod:`depthlab.sweep.stats`
says. The verdict is ``yes (p = 0.003, n = 4)``, ``no (p = ..., n = ...)``, ``undecided (p = 0.21,
n = 2): add seeds, about 6 per cell (...)`` or ``not run``; the rule behind each is in the judge's
docstring and, shortened, in the setting column, and was written before the runs it judges.
Each compared cell is shown as mean ± sd (n) with its 95 % t-interval. Losses are validation
cross-entropy in nats per character. Measured, never forced: a "no" means this small CPU setting
showed the opposite at alpha 0.05, "undecided" that its seeds cannot tell.

Every judge takes ``(items, extra)``: the experiment's per-run dicts (``config``, ``row``,
``details``, see :func:`depthlab.sweep.results.sweep_items`) and its extra settings from the
profile (``target_val_loss``). :func:`write_science_table` writes the table as Markdown
(``SWEEP_DIR/science.md``), which is what README's science table is pasted from;
:func:`depthlab.sweep.seeds.seeds_wanted` reads the same rows for ``depthlab sweep --seeds auto``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence

from ..rundir import write_generated
from .results import UNFINISHED_STATUSES, sweep_items
from .claim_common import (BUDGET_FIX, CLAIM_HEADER, SCIENCE_MD, init_last_rank, init_grad_blocks, run_names,
                           short_of_budget, steps_to, ClaimRow)
from .claims_depth import (rank_init, degradation, depth_helps, postln_warmup, rezero_speed)
from .claims_norms import (LAYERS_TOKENS, ablation_deltas, deepnorm_depth, dyt_lr_window, dyt_matches, lns_depth,
                           periln_stability)

__all__ = ["CLAIMS", "CLAIM_HEADER", "SCIENCE_MD", "ClaimRow", "science_claims", "claims_markdown",
           "write_science_table", "rank_init", "degradation", "depth_helps", "postln_warmup",
           "rezero_speed", "deepnorm_depth", "dyt_matches", "dyt_lr_window", "periln_stability", "lns_depth",
           "ablation_deltas", "LAYERS_TOKENS", "init_last_rank", "init_grad_blocks", "steps_to"]


CLAIMS: dict[str, tuple[Callable[[Sequence[dict], dict], ClaimRow], ...]] = {
    "rank_init": (rank_init,), "depth": (degradation, depth_helps), "postln_warmup": (postln_warmup,),
    "rezero_speed": (rezero_speed,), "deepnorm_depth": (deepnorm_depth,),
    "dyt_lr": (dyt_matches, dyt_lr_window), "periln_stability": (periln_stability,), "lns_depth": (lns_depth,),
}


def science_claims(by_exp: dict[str, list[dict]], extras: dict[str, dict]) -> list[list[str]]:
    """Rows "claim, source, setting, our numbers, verdict" for the experiments that have a judge in :data:`CLAIMS`.

    Only experiments present (with runs) in ``by_exp`` give a row, in :data:`CLAIMS` order.

    Args:
        by_exp: experiment name -> per-run dicts (``config``, ``row``, ``details``).
        extras: experiment name -> its extra settings (e.g. ``target_val_loss`` in nats).

    Returns:
        Table rows of strings (columns :data:`CLAIM_HEADER`).
    """
    rows = []
    for name, judges in CLAIMS.items():
        items = by_exp.get(name) or []
        waiting = [it for it in items if it["row"]["status"] in UNFINISHED_STATUSES]
        if waiting:  # not failures: judged as such, they refuted or left claims "undecided: add seeds"
            rows += [_unfinished_row(judge, items, waiting, extras.get(name) or {}) for judge in judges]
            continue
        short = [it for it in items if short_of_budget(it)]
        kept = [it for it in items if not short_of_budget(it)]
        for judge in judges if items else ():
            row = judge(kept, extras.get(name) or {})
            if short:  # a run cut by the clock is neither a failure nor a loss at the claim's budget
                row[3] = (row[3] + " " if kept else "") + (
                    f"({len(short)} of {len(items)} runs left out: train.max_time stopped them before train.max_iters "
                    f"({run_names(short, 4)}), so they did not train the claim's step budget; {BUDGET_FIX})")
                if not kept:
                    row[-1] = "not judged: every run stopped before its step budget"
            rows.append(row)
    return rows


def _unfinished_row(judge: Callable[[Sequence[dict], dict], ClaimRow], items: Sequence[dict],
                    waiting: Sequence[dict], extra: dict) -> ClaimRow:
    """The row of a claim some of whose runs have not finished (pending, interrupted): its numbers so far, and no
    verdict (no test either: ``--seeds auto`` adds no seeds for it)."""
    done = [it for it in items if it not in waiting and not short_of_budget(it)]
    row = judge(done, extra)
    statuses = ", ".join(sorted({it["row"]["status"] for it in waiting}))
    row[3] = (f"({len(waiting)} of {len(items)} runs not finished ({statuses}): {run_names(list(waiting), 4)}) "
              + (row[3] if done else ""))
    row[-1] = "not judged: some of its runs have not finished; run the same sweep command again to finish them"
    row.test = None
    return row


def claims_markdown(rows: Sequence[Sequence[str]]) -> str:
    """The claims as a Markdown table (columns :data:`CLAIM_HEADER`; ``|`` in a cell becomes ``/``).

    Args:
        rows: from :func:`science_claims`.

    Returns:
        The table text, ending with a newline; empty when there are no rows.
    """
    if not rows:
        return ""
    lines = ["| " + " | ".join(CLAIM_HEADER) + " |", "|" + "|".join("---" for _ in CLAIM_HEADER) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "/").replace("\n", " ") for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_science_table(sweep_dir: str | Path) -> Optional[str]:
    """Judge every experiment of a sweep that has a judge and write ``SWEEP_DIR/science.md``.

    Read from the run directories (:func:`depthlab.sweep.results.sweep_items`), so it works on a
    finished, a partial or a resumed sweep; README's science table is this file's table.

    Args:
        sweep_dir: a sweep directory.

    Returns:
        The Markdown table, or None when no experiment of the sweep has a judge (nothing written).

    Raises:
        DepthlabError: not a sweep directory.
        OSError: the sweep directory is not writable.
    """
    meta, _, _, items = sweep_items(sweep_dir)
    exps = meta["spec"]["experiments"]
    by_exp = {e["name"]: [it for it in items if it["experiment"] == e["name"]] for e in exps}
    table = claims_markdown(science_claims(by_exp, {e["name"]: e.get("extra") or {} for e in exps}))
    if not table:
        return None
    n = sum(len(v) for k, v in by_exp.items() if k in CLAIMS)  # runs behind the table
    text = (f"{table}\nLosses are validation cross-entropy in nats/char; {n} runs in {Path(sweep_dir)}.\n")
    write_generated(Path(sweep_dir) / SCIENCE_MD, text.encode("utf-8"))
    return text

