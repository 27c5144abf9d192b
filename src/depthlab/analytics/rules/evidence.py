"""What every diagnosis rule reads: one :class:`Evidence` per run, built once, and the rules' vocabulary.

A run directory holds ``metrics.jsonl`` (eval records with ``train_loss`` / ``val_loss`` /
``tokens_seen``, training records with ``loss``, ``kind: grad`` and ``kind: probe`` records,
non-finite skip events), ``baselines.json``, ``config.json`` and ``summary.json``. An
:class:`Evidence` holds them with the views several rules share (evaluations, the last probe,
update/weight ratios after the warmup), so each view is computed in one place.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Optional, Sequence

from ...config import ran_optimizer
from ..baselines import run_baselines
from ...errors import DepthlabError
from ...rundir import RunDir, torn_last_line
from ...units import finite_or_none, finite_values
from ...usermodel import check_command

__all__ = ["CONTEXT_EVENT", "Finding", "Thresholds", "Evidence", "written_number", "names_list", "unit_of"]


@dataclass
class Finding:
    """One diagnosis.

    Attributes:
        rule: one of :data:`depthlab.analytics.diagnose.RULES`.
        evidence: the numbers (and steps) that triggered it, in words.
        remedy: what to change.
    """

    rule: str
    evidence: str
    remedy: str


@dataclass
class Thresholds:
    """Where each rule fires. Defaults are set for char-level models on the CPU recipe.

    Attributes:
        bigram_margin: nats; stuck if best val loss >= bigram - margin.
        bigram_min_steps: optimizer steps before "stuck" can be judged.
        bigram_min_pairs_seen: tokens seen must be >= this times V^2 (each bigram seen a few
            times on average: the least a model needs to even learn the bigram table).
        vanishing_ratio: first/last block gradient-norm ratio below this = vanishing.
        exploding_growth: nats; a last-eval train loss this far above its minimum counts as a
            growing loss.
        init_excess: nats; a first evaluation (step 0) this far above ln V is the initialisation's
            output scale, not the learning rate (``init_loss``).
        rank_collapse: rank measure of the deepest block below this (Dong et al. 2021 measure).
        uniform_attention_frac: mean head entropy >= this fraction of ln t (uniform) ...
        uniform_attention_min_step: ... at a probe this late or later (at init all attention is
            near-uniform, which is no finding).
        uniform_attention_min_nats: skip when uniform entropy is below this (tiny contexts).
        lr_high, lr_low: median update/weight ratio per step above / below these (healthy ~1e-3).
        lr_min_records: grad records needed for the lr rules.
        overfit_gap: nats; val - train gap at the last eval above this ...
        overfit_growth: ... and grown by at least this over the last ``overfit_window`` evals.
        overfit_window: evals.
        plateau_evals: no improvement (by more than ``plateau_tol`` nats) over this many evals.
        plateau_tol: nats.
        context_min_gain: nats; ``context_unused`` when the loss at position 0 minus the mean over the
            last quarter of the positions is below this (and the last quarter is not below bigram - margin).
    """

    bigram_margin: float = 0.05
    bigram_min_steps: int = 200
    bigram_min_pairs_seen: float = 2.0
    vanishing_ratio: float = 1e-2
    exploding_growth: float = 0.5
    init_excess: float = 1.0
    rank_collapse: float = 0.05
    uniform_attention_frac: float = 0.9
    uniform_attention_min_step: int = 200
    uniform_attention_min_nats: float = 0.5
    lr_high: float = 3e-2
    lr_low: float = 1e-4
    lr_min_records: int = 3
    overfit_gap: float = 0.1
    overfit_growth: float = 0.05
    overfit_window: int = 3
    plateau_evals: int = 5
    plateau_tol: float = 1e-3
    context_min_gain: float = 0.1


CONTEXT_EVENT = "context"
"""The ``event`` of the loss-by-position record in ``metrics.jsonl``."""
LEAK_CHECK_EVENT = "causal_leak_check"
"""The ``event`` of the record of the causal leak test at the start of a ``model.source`` run
(:class:`depthlab.analytics.check.LeakCheckCallback`)."""

LR_JUDGED_FRACTION = 0.5
"""A gradient record's update/weight ratio is judged by ``lr_too_high`` / ``lr_too_low`` when its learning rate is
at least this fraction of the run's highest (the cosine's first half), so the rules judge the rate asked for."""

NAMES_SHOWN = 12
"""Parameter names a finding lists before "and N more" (as ``depthlab check`` does)."""


def unit_of(config: Optional[dict]) -> str:
    """What one token of the run with ``config`` (config.json's content) is, in words: ``character`` for a run on
    characters (``data.tokenizer`` char, the default), else ``token``."""
    data = (config or {}).get("data")
    return "character" if (data if isinstance(data, dict) else {}).get("tokenizer", "char") == "char" else "token"


def names_list(names: Sequence[str]) -> str:
    """``a, b, c`` (the first :data:`NAMES_SHOWN`, then "and N more")."""
    shown = ", ".join(names[:NAMES_SHOWN])
    return shown + (f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else "")


def written_number(v: Any) -> bool:
    """True when a number was written: finite, NaN or infinite (also the strings "nan", "inf").

    :func:`depthlab.units.finite_or_none` reads NaN and inf as None, like a missing value; the
    rules that must tell "the loss was NaN" from "no loss was recorded" ask this as well.
    Booleans are not numbers here.
    """
    if isinstance(v, bool) or v is None:
        return False
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True


def _checkpoint_step(run_dir: Path) -> Optional[int]:
    """The step of the newest checkpoint ``run_dir``'s manifest lists, or None (none, or a manifest that does not
    read: the records alone then say how long the run was)."""
    from ...checkpoint import CKPT_DIR, read_manifest

    try:
        entries = read_manifest(Path(run_dir) / CKPT_DIR, strict=False).get("checkpoints") or []
        steps = [e["step"] for e in entries if isinstance(e, dict) and isinstance(e.get("step"), int)]
    except (DepthlabError, OSError, ValueError, TypeError):
        return None
    return max(steps, default=None)


@dataclass(frozen=True)
class Evidence:
    """A run's records and files, as every rule reads them (built once per diagnosis).

    Attributes:
        records: the parsed lines of ``metrics.jsonl``.
        config: ``config.json`` content (optional: without it remedies are conditional).
        baselines: ``baselines.json`` content (``uniform``, ``unigram``, ``bigram``, ``vocab_size``).
        summary: ``summary.json`` content (its ``nonfinite_skips`` count).
        thresholds: where the rules fire.
        torn: the last line of a finished run's ``metrics.jsonl`` is cut mid-record (its last record is lost).
        checkpoint_step: the step of the run's newest listed checkpoint (an interrupted run has no summary.json,
            and its records may end before it), or None.
    """

    records: Sequence[dict] = ()
    config: Optional[dict] = None
    baselines: Optional[dict] = None
    summary: Optional[dict] = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    torn: bool = False
    run_dir: Optional[Path] = None
    checkpoint_step: Optional[int] = None

    @classmethod
    def from_run(cls, run_dir: Path | str, thresholds: Optional[Thresholds] = None) -> "Evidence":
        """Read a run directory once. Baselines are recomputed from the run's corpus when
        ``baselines.json`` is absent (runs made before analytics existed) and the corpus loads.

        Raises:
            DepthlabError: the folder does not exist, or lacks its config or metrics file.
        """
        rd = RunDir(run_dir).require("metrics")
        config, baselines = rd.config, rd.baselines
        if baselines is None and config is not None:
            baselines = run_baselines(config)
        torn = rd.summary is not None and torn_last_line(rd.path)
        return cls(rd.metrics(), config, baselines, rd.summary, thresholds or Thresholds(), torn, Path(run_dir),
                   _checkpoint_step(rd.path))

    # ------------------------------------------------------------------ the run's config
    @cached_property  # read by several rules; it hashes the model file and the run's copy
    def check_command(self) -> Optional[str]:
        """``depthlab check PATH:NAME`` for a model.source run, with a path that works from any folder
        (:func:`depthlab.usermodel.check_command`); None for depthlab's GPT."""
        src = self.section("model").get("source")
        if not isinstance(src, str) or not src:
            return None
        return check_command(src, self.run_dir) if self.run_dir is not None else f"depthlab check {src}"

    def section(self, name: str) -> dict:
        """``config[name]`` when it is a dict, else ``{}``."""
        sec = (self.config or {}).get(name)
        return sec if isinstance(sec, dict) else {}

    def now(self, dotted: str) -> str:
        """`` (now V)`` with the run's value of ``section.field``, or "" when the config does not say; for
        ``train.warmup_iters`` shortened by a fit_to_time plan, the warmup the run followed too."""
        sec, name = dotted.split(".")
        v = self.section(sec).get(name)
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return ""
        planned = self.planned_warmup
        if dotted == "train.warmup_iters" and planned is not None and planned != v:
            return f" (now {v:g}; train.fit_to_time shortened it to {planned} to fit train.max_time)"
        return f" (now {v:g})"

    @cached_property
    def planned_warmup(self) -> Optional[int]:
        """The warmup of the run's train.fit_to_time plan (config.json ``resolved.plan``), or None without one."""
        from ...budget import Plan

        try:
            plan = Plan.from_record(self.section("resolved"), self.section("train"))
        except (TypeError, KeyError, ValueError):  # a hand-edited record: the warmup asked for
            plan = None
        return plan.warmup_iters if plan is not None and isinstance(plan.warmup_iters, int) else None

    @cached_property
    def warmup_iters(self) -> int:
        """Steps of warmup the run followed: its train.fit_to_time plan's (:attr:`planned_warmup`), else
        ``train.warmup_iters`` (0 when the config does not say), or the first logged step at the highest learning
        rate when that comes earlier: a session resumed with a new ``train.max_iters`` follows no plan, or plans
        anew, and config.json no longer holds the one whose shortened warmup the run trained with."""
        asked = self.section("train").get("warmup_iters")
        asked = asked if isinstance(asked, int) and not isinstance(asked, bool) else 0  # "x" by hand: none
        if self.planned_warmup is not None:  # a later session's plan may say more than the run followed (44 -> 50)
            asked = self.planned_warmup
        lrs = [(int(finite_or_none(r.get("step"))), finite_or_none(r.get("lr"))) for r in self.records
               if r.get("kind") == "train" and finite_or_none(r.get("lr")) is not None
               and finite_or_none(r.get("step")) is not None]
        top = max((lr for _, lr in lrs), default=None)
        peak = min((s for s, lr in lrs if lr >= top), default=asked) if top is not None else asked
        return min(asked, peak)

    @cached_property
    def peak_lr(self) -> Optional[float]:
        """The highest positive learning rate any training or gradient record carries (None: none does)."""
        lrs = [v for v in (finite_or_none(r.get("lr")) for r in self.records if r.get("kind") in ("train", "grad"))
               if v is not None and v > 0]
        return max(lrs, default=None)

    @property
    def optimizer(self) -> Optional[str]:
        """What trained the run (:func:`depthlab.config.ran_optimizer`; None without a config)."""
        return ran_optimizer(self.config)

    @property
    def muon(self) -> bool:
        """True when Muon trained the blocks' matrices (their update/weight ratios are set by ``train.muon_lr``)."""
        return self.optimizer == "muon"

    @property
    def vocab_size(self) -> int:
        """V from ``baselines.json``, else from ``config.json`` (0 when neither says)."""
        for v in ((self.baselines or {}).get("vocab_size"), self.section("model").get("vocab_size")):
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return 0

    @property
    def unit(self) -> str:
        """``character`` for a run on characters (``data.tokenizer`` char, the default), else ``token``."""
        return unit_of({"data": self.section("data")})

    # ------------------------------------------------------------------ views of the records
    @cached_property
    def evals(self) -> list[dict]:
        """Evaluation records (they have both ``val_loss`` and ``train_loss``), in file order."""
        return [r for r in self.records if "val_loss" in r and "train_loss" in r]

    @cached_property
    def val_losses(self) -> list[tuple[int, float]]:
        """``(step, val_loss)`` of the evaluations with a finite val loss."""
        return [(r["step"], v) for r, v in ((r, finite_or_none(r["val_loss"])) for r in self.evals) if v is not None]

    @cached_property
    def loss_pairs(self) -> list[tuple[int, float, float]]:
        """``(step, val_loss, train_loss)`` of the evaluations where both are finite."""
        out = []
        for r in self.evals:
            v, t = finite_or_none(r["val_loss"]), finite_or_none(r["train_loss"])
            if v is not None and t is not None:
                out.append((r["step"], v, t))
        return out

    @cached_property
    def grads(self) -> list[dict]:
        """``kind: grad`` records."""
        return [r for r in self.records if r.get("kind") == "grad"]

    @cached_property
    def last_probe(self) -> Optional[dict]:
        """The last ``kind: probe`` record, or None."""
        pr = [r for r in self.records if r.get("kind") == "probe"]
        return pr[-1] if pr else None

    @cached_property
    def context(self) -> Optional[dict]:
        """The last loss-by-position record (``kind: event``, ``event: context``, written at the end of
        training by :class:`depthlab.analytics.context.ContextCallback`), or None."""
        pr = [r for r in self.records if r.get("kind") == "event" and r.get("event") == CONTEXT_EVENT
              and isinstance(r.get("loss_by_position"), list)]
        return pr[-1] if pr else None

    @cached_property
    def leak_check(self) -> Optional[dict]:
        """The last record of the causal leak test run when a ``model.source`` model started training (``kind:
        event``, ``event: causal_leak_check``, with ``ok`` True, False or None and its ``summary``), or None."""
        pr = [r for r in self.records if r.get("kind") == "event" and r.get("event") == LEAK_CHECK_EVENT]
        return pr[-1] if pr else None

    @cached_property
    def bounded_output(self) -> Optional[dict]:
        """The test before training's finding that the model's outputs lie in [0, 1] (a forward ending in softmax or
        sigmoid): the :attr:`leak_check` record's ``output_kind``, ``output_summary``, ``output_remedy`` and
        ``output_floor`` (nats, the lowest loss such outputs reach), or None when it found logits or did not run."""
        rec = self.leak_check
        if rec is None or not rec.get("output_kind") or finite_or_none(rec.get("output_floor")) is None:
            return None
        return {k: rec.get(k) for k in ("output_kind", "output_summary", "output_remedy", "output_floor")}

    @cached_property
    def judged_at_start(self) -> frozenset[str]:
        """Finding names a test at the start of training judged and found nothing for: ``causal_leak`` when the
        leak test of a ``model.source`` model ran clean (:attr:`leak_check`); a rule that cannot judge them from
        the records does not list them as not judged."""
        rec = self.leak_check
        return frozenset({"causal_leak"} if rec is not None and rec.get("ok") is True else ())

    @cached_property
    def last_step(self) -> int:
        """The largest step any record has (0 for none)."""
        return max((int(r.get("step", 0)) for r in self.records), default=0)

    @cached_property
    def end_step(self) -> tuple[int, str]:
        """``(step, source)``: where the run ended, and what says so: summary.json's ``final_step`` (``"summary"``)
        when it says more than the records, else an interrupted run's last checkpoint (``"checkpoint"``, no
        summary.json) when its records end before it, else the records' last step (``"records"``)."""
        final = (self.summary or {}).get("final_step")
        if isinstance(final, int) and not isinstance(final, bool) and final > self.last_step:
            return final, "summary"
        if self.summary is None and self.checkpoint_step is not None and self.checkpoint_step > self.last_step:
            return self.checkpoint_step, "checkpoint"
        return self.last_step, "records"

    @cached_property
    def grads_after_warmup(self) -> list[dict]:
        """The ``kind: grad`` records after :attr:`warmup_iters` (the gradients and updates of the training proper:
        the warmup's are near initialisation, at a rate still rising)."""
        warm = self.warmup_iters
        return [r for r in self.grads if int(r.get("step", 0)) > warm]

    @cached_property
    def lr_judged_grads(self) -> list[dict]:
        """The ``kind: grad`` records the lr rules judge: after the warmup, at :data:`LR_JUDGED_FRACTION` or more
        of the run's highest learning rate.

        An update/weight ratio scales with the rate that made it, and the question is whether the *peak* rate
        is too high or too low: a record near the end of the cosine (seen: 1e-4 at 1.1x train.min_lr, after
        0.048 and 0.021 at the peak) would pull the median under ``lr_high``. A record without its rate (written
        before grad records carried ``lr``) is judged as it is."""
        top = self.peak_lr
        return [r for r in self.grads_after_warmup if (lr := finite_or_none(r.get("lr"))) is None or top is None
                or lr >= LR_JUDGED_FRACTION * top]

    @cached_property
    def update_ratios(self) -> tuple[list[float], list[int]]:
        """Per record of :attr:`lr_judged_grads`: the median over blocks of the positive finite update/weight
        ratios, and the record's step."""
        return self._median_ratios("update_ratio_block")

    @cached_property
    def matrix_ratios(self) -> bool:
        """Whether :attr:`low_ratios` are the blocks' matrices' alone: a Muon run with ``lr_min_records`` or more
        records that hold them (written since the gradient monitor records them; a run resumed across that change
        has fewer, and is judged on the pooled ratios, which it has enough of, rather than not at all)."""
        n = sum(1 for r in self.lr_judged_grads if r.get("update_ratio_matrix_block"))
        return self.muon and n >= self.thresholds.lr_min_records

    @cached_property
    def low_ratios(self) -> tuple[list[float], list[int]]:
        """The ratios ``lr_too_low`` judges: :attr:`update_ratios`, but on a Muon run the blocks' matrices' alone
        (``update_ratio_matrix_block``): the norms' gains, AdamW's, held the blocks' pooled ratio near 1e-3 at
        train.muon_lr 1e-6, where the matrices moved ~1e-6 of their norm per step. (``lr_too_high`` keeps the pooled
        ratio, whose threshold was set on it: the matrices' alone read 0.054 at step 50 of the default recipe.)"""
        return self._median_ratios("update_ratio_matrix_block") if self.matrix_ratios else self.update_ratios

    def _median_ratios(self, key: str) -> tuple[list[float], list[int]]:
        vals, steps = [], []
        for r in self.lr_judged_grads:
            if not r.get(key):
                continue
            u = [v for v in finite_values(r[key]) if v > 0]
            if u:
                vals.append(statistics.median(u))
                steps.append(r["step"])
        return vals, steps

    def late_evals(self) -> list[dict]:
        """Evaluations ``bigram_stuck`` may judge: a val loss written (NaN and inf count: the run
        did evaluate), at ``bigram_min_steps`` or later, with ``bigram_min_pairs_seen * V^2``
        tokens seen by then (when the record says)."""
        th = self.thresholds
        need = self.bigram_tokens()
        return [r for r in self.evals if written_number(r["val_loss"]) and int(r["step"]) >= th.bigram_min_steps
                and (r.get("tokens_seen") is None or r["tokens_seen"] >= need)]

    def bigram_tokens(self) -> float:
        """Tokens a run must have seen before ``bigram_stuck`` judges it: ``bigram_min_pairs_seen * V^2``."""
        return self.thresholds.bigram_min_pairs_seen * self.vocab_size ** 2

