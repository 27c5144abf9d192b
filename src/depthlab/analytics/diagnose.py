"""Diagnosis: rules that turn a run's recorded numbers into plain findings with evidence and a remedy.

Inputs are what a run directory holds: ``metrics.jsonl`` (eval records with ``train_loss`` /
``val_loss`` / ``tokens_seen``, training records with ``loss``, ``kind: grad`` and ``kind: probe``
records), ``baselines.json``, ``config.json`` and ``summary.json``, read once into an
:class:`~depthlab.analytics.rules.Evidence`. Every rule (:mod:`depthlab.analytics.rules`) has one
interface: it declares what it needs and judges that evidence into a finding, "not judged"
(naming what was missing) or nothing, so it can be unit-tested on synthetic metrics; thresholds
live in :class:`Thresholds`.

Rules (names are a stable contract): ``bigram_stuck`` (the current character alone: the context
before it does not reach the loss), ``unigram_stuck`` (no context at all, not even the current
character; runs diagnosed before it existed said ``bigram_stuck``), ``context_unused`` (the later
positions of the final weights' loss by position do not beat position 0), ``no_gradient``,
``vanishing_gradients``, ``exploding``, ``rank_collapse``, ``uniform_attention``, ``lr_too_high``,
``lr_too_low``, ``overfitting``, ``plateau``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

from ..units import counted
from ..callbacks import Callback, RunView
from ..errors import DepthlabError
from ..rundir import DIAGNOSIS, write_json
from .rules import (NEEDS, RULE_SET, SHORTCUT_VARIANTS, Evidence, Finding, Need, NotJudged, Rule, Thresholds,
                    loss_level, who_needs)

__all__ = ["Finding", "Thresholds", "Evidence", "Diagnosis", "diagnose", "diagnose_records", "diagnose_run",
           "diagnose_run_full", "format_findings", "findings_json", "rules_without_data", "write_diagnosis",
           "DiagnosisCallback", "no_rule_judged", "RULES", "RULE_SET", "SHORTCUT_VARIANTS", "loss_level"]

RULES = tuple(dict.fromkeys(name for r in RULE_SET for name in r.names))
"""Every finding name, in the order findings are said."""


@dataclass(frozen=True)
class Diagnosis:
    """What the rules said about one run.

    Attributes:
        findings: in :data:`RULES` order (empty = nothing wrong found).
        not_judged: the rules whose needs the run does not meet.
        evidence: what they read.
    """

    findings: tuple[Finding, ...]
    not_judged: tuple[NotJudged, ...]
    evidence: Evidence

    def without_data(self) -> list[str]:
        """One line per missing need, naming the rules that lack it and what is missing, in
        :data:`~depthlab.analytics.rules.NEEDS` order (e.g. ``"plateau (3 of the 6 evaluations it needs)"``)."""
        groups: dict[Need, list[str]] = {}
        for nj in self.not_judged:
            have = groups.setdefault(nj.needs[0], [])
            have.extend(n for n in nj.rules if n not in have)  # two rules may give one name (bigram_stuck)
        order = {n: i for i, n in enumerate(NEEDS)}
        return [f"{', '.join(names)} ({need.shortfall(self.evidence, who_needs(len(names)))})"
                for need, names in sorted(groups.items(), key=lambda kv: order.get(kv[0], len(order)))]


def diagnose(ev: Evidence, rules: Sequence[Rule] = RULE_SET) -> Diagnosis:
    """Ask every rule about ``ev``; a name that an earlier rule already found is not asked again, and a name a test
    at the start of training judged (:attr:`Evidence.judged_at_start`) or another rule found is not listed as not
    judged."""
    findings: list[Finding] = []
    not_judged: list[NotJudged] = []
    for r in rules:
        if any(f.rule in r.names for f in findings):
            continue
        verdict = r(ev)
        if isinstance(verdict, NotJudged):
            left = tuple(n for n in verdict.rules if n not in ev.judged_at_start)
            if left:
                not_judged.append(replace(verdict, rules=left))
        elif verdict is not None:
            findings.append(verdict)
    found = {f.rule for f in findings}  # a later rule found what an earlier one could not judge
    not_judged = [replace(nj, rules=left) for nj in not_judged
                  if (left := tuple(n for n in nj.rules if n not in found))]
    return Diagnosis(tuple(findings), tuple(not_judged), ev)


def diagnose_records(records: list[dict], baselines: Optional[dict] = None, config: Optional[dict] = None,
                     thresholds: Optional[Thresholds] = None, summary: Optional[dict] = None) -> list[Finding]:
    """Apply every rule to a run's records; remedies read ``config`` and never advise what it has.

    Args:
        records: the parsed lines of ``metrics.jsonl``.
        baselines: ``baselines.json`` content (needed by ``bigram_stuck`` / ``unigram_stuck``).
        config: ``config.json`` content (variant, norm, block size, learning rate, warmup, ...;
            optional: without it remedies are conditional).
        thresholds: rule thresholds (defaults: :class:`Thresholds`).
        summary: ``summary.json`` content (its ``nonfinite_skips`` count; optional).

    Returns:
        Findings in :data:`RULES` order (empty = nothing wrong found). A run that exploded is not
        also called ``overfitting`` or ``plateau``; vanishing gradients absorb ``lr_too_low``.
    """
    ev = Evidence(records, config, baselines, summary, thresholds or Thresholds())
    return list(diagnose(ev).findings)


def rules_without_data(records: list[dict], config: Optional[dict] = None, thresholds: Optional[Thresholds] = None,
                       baselines: Optional[dict] = None) -> list[str]:
    """The rules that had too little data to judge this run, each with what was missing.

    A rule that could not run must not read as "no problem found": ``lr_too_high``/``lr_too_low``
    need ``lr_min_records`` gradient records after the warmup, ``vanishing_gradients`` one,
    ``rank_collapse``/``uniform_attention`` an activation probe, ``bigram_stuck``/``unigram_stuck`` an evaluation
    after ``bigram_min_steps`` (and enough tokens) and the corpus baselines, ``plateau``
    ``plateau_evals + 1`` evaluations and ``overfitting`` ``overfit_window`` of them with a
    train loss. The needs are each rule's own declaration (:attr:`Rule.needs`).
    """
    return diagnose(Evidence(records, config, baselines, None, thresholds or Thresholds())).without_data()


def diagnose_run(run_dir: Path | str, thresholds: Optional[Thresholds] = None) -> list[Finding]:
    """Diagnose a run directory (metrics.jsonl, baselines.json, config.json): its findings only.

    Raises:
        DepthlabError: the folder does not exist, or lacks its config or metrics file.
    """
    return diagnose_run_full(run_dir, thresholds)[0]


def diagnose_run_full(run_dir: Path | str, thresholds: Optional[Thresholds] = None,
                      summary: Optional[dict] = None) -> tuple[list[Finding], list[str]]:
    """Diagnose a run directory, reading it once: (findings, :func:`rules_without_data` lines).

    Baselines are recomputed from the run's corpus when ``baselines.json`` is absent (runs made
    before analytics existed) and the corpus can be loaded.

    Raises:
        DepthlabError: the folder does not exist, or lacks its config or metrics file.

    ``summary``: the finishing run's summary, in place of a summary.json not written yet.
    """
    ev = Evidence.from_run(run_dir, thresholds)
    d = diagnose(ev if summary is None else replace(ev, summary=summary))
    return list(d.findings), d.without_data()


def not_judged_names(without_data: Sequence[object]) -> set[str]:
    """The rule names :meth:`Diagnosis.without_data`'s lines (each ``"a, b (why)"``, as diagnosis.json's
    ``not_judged`` keeps them) say could not judge; a line of another shape names none."""
    heads = (w.split(" (", 1)[0] for w in without_data if isinstance(w, str))
    return {n.strip() for head in heads for n in head.split(",")} & set(RULES)


def no_rule_judged(without_data: Sequence[str]) -> bool:
    """True when :meth:`Diagnosis.without_data`'s lines name every rule in :data:`RULES`."""
    return not_judged_names(without_data) >= set(RULES)


def format_findings(findings: list[Finding], without_data: Optional[Sequence[str]] = None) -> str:
    """Plain-words block for the console: one paragraph per finding, or a one-line all-clear.

    ``without_data``: :func:`rules_without_data`'s lines, said after the findings (or instead of
    an unqualified all-clear). Without them (the findings of :func:`diagnose_run` alone) the all-clear says no more
    than that: which rules could judge the run is :func:`diagnose_run_full`'s second value.
    """
    if not findings:
        if without_data is None:  # not known: the findings alone
            return ("diagnosis: no problems found (which rules could judge this run: format_findings(*diagnose_run_full"
                    "(RUN)), or depthlab diagnose RUN)")
        if not without_data:  # every rule judged it
            return "diagnosis: no problems found (rules: " + ", ".join(RULES) + ")"
        lines = ["diagnosis: no rule could judge this run" if no_rule_judged(without_data) else
                 "diagnosis: no problems found by the rules that could judge this run"]
    else:
        lines = [f"diagnosis: {counted(len(findings), 'finding')}"]
    for f in findings:
        lines.append(f"  [{f.rule}] {f.evidence}")
        lines.append(f"      remedy: {f.remedy}")
    for w in without_data or ():
        lines.append(f"  not judged: {w}")
    return "\n".join(lines)


def findings_json(findings: list[Finding], not_judged: Optional[Sequence[str]] = None) -> dict:
    """``{"findings": [{"rule", "evidence", "remedy"}, ...], "not_judged": [...]}`` (the diagnosis.json
    format, and ``depthlab diagnose --json``'s); ``not_judged`` (:func:`rules_without_data`'s lines) only
    when given."""
    out: dict = {"findings": [asdict(f) for f in findings]}
    if not_judged is not None:
        out["not_judged"] = list(not_judged)
    return out


def write_diagnosis(run_dir: Path, findings: list[Finding], not_judged: Sequence[str] = ()) -> Path:
    """Write ``run_dir/diagnosis.json`` atomically (the findings and the rules not judged, as
    ``depthlab diagnose --json`` prints them); returns its path."""
    p = Path(run_dir) / DIAGNOSIS
    write_json(p, findings_json(findings, not_judged))
    return p


class DiagnosisCallback(Callback):
    """At train end (main rank): diagnose the run, print the findings, write diagnosis.json."""

    def on_train_end(self, run: RunView, summary: dict) -> None:
        """Run every rule over the run's metrics so far (the writer flushes every record)."""
        if not run.is_main:
            return
        try:
            findings, without_data = diagnose_run_full(run.run_dir, summary=summary)
        except DepthlabError as e:  # never fail a finished training run over its diagnosis
            run.log(f"diagnosis skipped: {e}")
            return
        write_diagnosis(run.run_dir, findings, without_data)
        run.log(format_findings(findings, without_data))
