"""Diagnosis: rules that turn a run's recorded numbers into plain findings with evidence and a remedy.

Inputs are what a run directory holds: ``metrics.jsonl`` (eval records with ``train_loss`` /
``val_loss`` / ``tokens_seen``, training records with ``loss``, ``kind: grad`` and ``kind: probe``
records), ``baselines.json`` and ``config.json``. Every rule is a pure function of those records,
so it can be unit-tested on synthetic metrics; thresholds live in :class:`Thresholds`.

Rules (names are a stable contract): ``bigram_stuck``, ``vanishing_gradients``, ``exploding``,
``rank_collapse``, ``uniform_attention``, ``lr_too_high``, ``lr_too_low``, ``overfitting``,
``plateau``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from ..errors import DepthlabError
from ..callbacks import Callback, RunView
from ..rundir import DIAGNOSIS, RunDir, write_json

__all__ = ["Finding", "Thresholds", "diagnose_records", "diagnose_run", "format_findings", "findings_json",
           "write_diagnosis", "DiagnosisCallback", "RULES"]

RULES = ("bigram_stuck", "vanishing_gradients", "exploding", "rank_collapse", "uniform_attention",
         "lr_too_high", "lr_too_low", "overfitting", "plateau")


@dataclass
class Finding:
    """One diagnosis.

    Attributes:
        rule: one of :data:`RULES`.
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
    """

    bigram_margin: float = 0.05
    bigram_min_steps: int = 200
    bigram_min_pairs_seen: float = 2.0
    vanishing_ratio: float = 1e-2
    exploding_growth: float = 0.5
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


def _num(v: Any) -> Optional[float]:
    """A metrics value as a float, keeping inf and NaN (written as strings "inf"/"nan"); None if absent.

    Unlike :func:`depthlab.rundir.finite_or_none` this keeps non-finite numbers: the ``exploding``
    rule must see an infinite or NaN loss, not a missing one. Booleans are not numbers here.
    """
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _evals(records: list[dict]) -> list[dict]:
    return [r for r in records if "val_loss" in r and "train_loss" in r]


# ---------------------------------------------------------------------------------- rules
def rule_bigram_stuck(records: list[dict], baselines: Optional[dict], config: Optional[dict],
                      th: Thresholds) -> Optional[Finding]:
    """Best val loss still >= bigram baseline - margin after enough steps and tokens."""
    if not baselines or "bigram" not in baselines:
        return None
    bigram = float(baselines["bigram"]["nats"])
    V = int(baselines.get("vocab_size") or 0)
    need_tokens = th.bigram_min_pairs_seen * V * V
    ev = [r for r in _evals(records) if _num(r["val_loss"]) is not None]
    judged = [r for r in ev if int(r["step"]) >= th.bigram_min_steps
              and (r.get("tokens_seen") is None or r["tokens_seen"] >= need_tokens)]
    if not judged:
        return None
    vals = [_num(r["val_loss"]) for r in ev]
    finite = [v for v in vals if math.isfinite(v)]
    best = min(finite) if finite else math.inf
    last = judged[-1]
    if best < bigram - th.bigram_margin:
        return None
    tokens = last.get("tokens_seen")
    ev_txt = (f"best val loss {best:.3f} nats is not below the bigram baseline {bigram:.3f} nats "
              f"(margin {th.bigram_margin}) after {last['step']} steps"
              + (f" and {tokens:,} tokens" if tokens is not None else "")
              + f"; unigram {baselines['unigram']['nats']:.3f}, uniform {baselines['uniform']['nats']:.3f}")
    block = (config or {}).get("model", {}).get("block_size")
    if block == 1:
        ev_txt += "; model.block_size is 1, so the model sees one character and cannot use context"
        remedy = ("raise model.block_size (e.g. 64-256) so the model can see context; a one-character "
                  "window is exactly a bigram model")
    else:
        remedy = ("the model uses no context beyond the previous character: check rank collapse / "
                  "attention entropy (depthlab probe), use a residual variant (prenorm), train longer, "
                  "or raise model.block_size")
    return Finding("bigram_stuck", ev_txt, remedy)


def rule_vanishing_gradients(records: list[dict], th: Thresholds) -> Optional[Finding]:
    """Median first/last block grad-norm ratio over the grad records below ``vanishing_ratio``."""
    ratios, steps = [], []
    for r in records:
        if r.get("kind") != "grad":
            continue
        g = [_num(v) for v in r.get("grad_norm_block") or []]
        if len(g) < 2 or g[0] is None or g[-1] is None or not (math.isfinite(g[0]) and math.isfinite(g[-1])):
            continue
        if g[-1] <= 0:
            continue
        ratios.append(g[0] / g[-1])
        steps.append(r["step"])
    if not ratios:
        return None
    med = statistics.median(ratios)
    if med >= th.vanishing_ratio:
        return None
    return Finding(
        "vanishing_gradients",
        f"first/last block gradient-norm ratio median {med:.2e} over {len(ratios)} records "
        f"(steps {steps[0]}-{steps[-1]}; threshold {th.vanishing_ratio:g}): the early blocks barely learn",
        "add residual connections (model.variant prenorm or rezero), normalise (model.norm layernorm), "
        "or use fewer layers")


def rule_exploding(records: list[dict], th: Thresholds) -> Optional[Finding]:
    """A non-finite loss/gradient anywhere, or a train loss that grew far above its minimum."""
    for r in records:
        if r.get("nonfinite_skip"):
            return Finding("exploding", f"non-finite loss or gradient skipped at step {r['step']} "
                           f"({r.get('nonfinite_skips', 1)} skip(s) so far)",
                           "lower train.learning_rate, raise train.warmup_iters, keep train.grad_clip at 1.0")
        for k in ("loss", "train_loss", "val_loss", "grad_2.0_norm_total", "grad_norm"):
            v = _num(r.get(k)) if k in r else None
            if v is not None and not math.isfinite(v):
                return Finding("exploding", f"{k} is {r[k]} at step {r['step']}",
                               "lower train.learning_rate, raise train.warmup_iters, keep train.grad_clip "
                               "at 1.0, or use a normalised variant (prenorm)")
    ev = [(r["step"], _num(r["train_loss"])) for r in _evals(records)]
    ev = [(s, v) for s, v in ev if v is not None]
    if len(ev) >= 3:
        lo_step, lo = min(ev, key=lambda t: t[1])
        last_step, last = ev[-1]
        if last - lo > th.exploding_growth:
            return Finding("exploding", f"train loss rose from its minimum {lo:.3f} (step {lo_step}) to "
                           f"{last:.3f} at step {last_step}",
                           "lower train.learning_rate (try / 3), raise train.warmup_iters, enable "
                           "train.grad_clip 1.0")
    return None


def _last_probe(records: list[dict]) -> Optional[dict]:
    pr = [r for r in records if r.get("kind") == "probe"]
    return pr[-1] if pr else None


def rule_rank_collapse(records: list[dict], th: Thresholds) -> Optional[Finding]:
    """Deepest block's rank measure at the last probe below ``rank_collapse``."""
    p = _last_probe(records)
    if p is None:
        return None
    rm = [(i, _num(v)) for i, v in enumerate(p.get("rank_measure") or [])]
    rm = [(i, v) for i, v in rm if v is not None and math.isfinite(v)]
    if not rm or rm[-1][1] >= th.rank_collapse:
        return None
    first_bad = next(i for i, v in rm if v < th.rank_collapse)
    cos = p.get("token_cosine") or []
    cos_txt = f", token cosine {cos[-1]:.3f}" if cos and cos[-1] is not None else ""
    return Finding(
        "rank_collapse",
        f"at step {p['step']} the rank measure falls from {rm[0][1]:.3f} (block {rm[0][0]}) to "
        f"{rm[-1][1]:.2e} (block {rm[-1][0]}{cos_txt}); below {th.rank_collapse:g} from block {first_bad} on: "
        "all positions carry nearly the same vector",
        "add residual connections (model.variant prenorm, rezero or deepnorm): the shortcut keeps token "
        "identity that stacked attention + normalisation averages away (Dong et al. 2021)")


def rule_uniform_attention(records: list[dict], th: Thresholds) -> Optional[Finding]:
    """Mean attention entropy over heads and blocks >= ``uniform_attention_frac`` of ln t, late in training."""
    p = _last_probe(records)
    if p is None or int(p["step"]) < th.uniform_attention_min_step:
        return None
    u = _num(p.get("attn_entropy_uniform"))
    ent = [h for blk in (p.get("attn_entropy") or []) for h in blk if _num(h) is not None]
    if u is None or u < th.uniform_attention_min_nats or not ent:
        return None
    mean = sum(ent) / len(ent)
    if mean < th.uniform_attention_frac * u:
        return None
    return Finding(
        "uniform_attention",
        f"at step {p['step']} mean attention entropy {mean:.3f} nats = {mean / u:.0%} of uniform "
        f"({u:.3f} nats = mean ln t): the heads average over the context instead of selecting",
        "train longer or with a higher train.learning_rate; check rank collapse and the variant "
        "(prenorm learns sharp attention quickly)")


def _update_ratios(records: list[dict]) -> tuple[list[float], list[int]]:
    vals, steps = [], []
    for r in records:
        if r.get("kind") != "grad" or not r.get("update_ratio_block"):
            continue
        u = [_num(v) for v in r["update_ratio_block"]]
        u = [v for v in u if v is not None and math.isfinite(v) and v > 0]
        if u:
            vals.append(statistics.median(u))
            steps.append(r["step"])
    return vals, steps


def rule_lr(records: list[dict], config: Optional[dict], th: Thresholds) -> Optional[Finding]:
    """Median (over records after warmup, of the median over blocks) update/weight ratio far from ~1e-3."""
    warm = int((config or {}).get("train", {}).get("warmup_iters", 0) or 0)
    vals, steps = _update_ratios([r for r in records if int(r.get("step", 0)) > warm])
    if len(vals) < th.lr_min_records:
        return None
    med = statistics.median(vals)
    lr = (config or {}).get("train", {}).get("learning_rate")
    lr_txt = f" with train.learning_rate {lr:g}" if lr is not None else ""
    span = f"steps {steps[0]}-{steps[-1]}, {len(vals)} records"
    if med > th.lr_high:
        return Finding("lr_too_high", f"median update/weight ratio {med:.2e} per step ({span}){lr_txt}; "
                       f"healthy is about 1e-3, above {th.lr_high:g} the weights are rewritten every few steps",
                       "lower train.learning_rate (try / 3 to / 10) or raise train.warmup_iters")
    if med < th.lr_low:
        return Finding("lr_too_low", f"median update/weight ratio {med:.2e} per step ({span}){lr_txt}; "
                       f"healthy is about 1e-3, below {th.lr_low:g} the weights hardly move",
                       "raise train.learning_rate (try x 3 to x 10)")
    return None


def rule_overfitting(records: list[dict], th: Thresholds) -> Optional[Finding]:
    """val - train gap above ``overfit_gap``, grown by ``overfit_growth`` over the last evals,
    while val loss no longer improves (the last val is not below the window's earlier best).

    A gap that grows while val still falls is the usual train/val shift of a small corpus, not
    harm: stopping then would give a worse model.
    """
    ev = [(r["step"], _num(r["val_loss"]), _num(r["train_loss"])) for r in _evals(records)]
    ev = [(s, v, v - t) for s, v, t in ev if v is not None and t is not None and math.isfinite(v - t)]
    w = th.overfit_window
    if len(ev) < w:
        return None
    recent = ev[-w:]
    gaps = [g for _, _, g in recent]
    growing = all(b >= a for a, b in zip(gaps, gaps[1:])) and gaps[-1] - gaps[0] >= th.overfit_growth
    still_improving = recent[-1][1] < min(v for _, v, _ in recent[:-1]) - 1e-3
    if gaps[-1] <= th.overfit_gap or not growing or still_improving:
        return None
    return Finding("overfitting", f"val - train gap grew from {gaps[0]:.3f} (step {recent[0][0]}) to "
                   f"{gaps[-1]:.3f} nats (step {recent[-1][0]})",
                   "stop earlier (train.patience 3 stops after 3 evaluations without improvement; "
                   "sample uses the best checkpoint), add model.dropout 0.1-0.2, raise train.weight_decay, "
                   "use a smaller model or more data")


def rule_plateau(records: list[dict], th: Thresholds) -> Optional[Finding]:
    """The last ``plateau_evals`` evals did not beat the best val loss before them by ``plateau_tol``."""
    ev = [(r["step"], _num(r["val_loss"])) for r in _evals(records)]
    ev = [(s, v) for s, v in ev if v is not None and math.isfinite(v)]
    n = th.plateau_evals
    if len(ev) < n + 1:
        return None
    before = min(v for _, v in ev[:-n])
    recent = min(v for _, v in ev[-n:])
    if recent < before - th.plateau_tol:
        return None
    return Finding("plateau", f"no val improvement over the last {n} evals (steps {ev[-n][0]}-{ev[-1][0]}): "
                   f"best recent {recent:.4f} vs {before:.4f} before",
                   "the model has converged for this size/LR: stop, decay the LR (train.min_lr), or grow the "
                   "model or context")


def diagnose_records(records: list[dict], baselines: Optional[dict] = None, config: Optional[dict] = None,
                     thresholds: Optional[Thresholds] = None) -> list[Finding]:
    """Apply every rule to a run's records.

    Args:
        records: the parsed lines of ``metrics.jsonl``.
        baselines: ``baselines.json`` content (needed by ``bigram_stuck``).
        config: ``config.json`` content (block size, warmup, learning rate; optional).
        thresholds: rule thresholds (defaults: :class:`Thresholds`).

    Returns:
        Findings in :data:`RULES` order (empty = nothing wrong found).
    """
    th = thresholds or Thresholds()
    out = [rule_bigram_stuck(records, baselines, config, th), rule_vanishing_gradients(records, th),
           rule_exploding(records, th), rule_rank_collapse(records, th), rule_uniform_attention(records, th),
           rule_lr(records, config, th), rule_overfitting(records, th), rule_plateau(records, th)]
    found = [f for f in out if f is not None]
    rules = {f.rule: f for f in found}
    if "vanishing_gradients" in rules and "lr_too_low" in rules:
        # tiny updates are the consequence of the vanishing gradients; "raise the LR" would be bad advice
        low = rules["lr_too_low"]
        rules["vanishing_gradients"].evidence += ("; the update/weight ratios are tiny too (" +
                                                  low.evidence.split(" per step")[0] +
                                                  "), because the gradients vanish, not because the learning rate "
                                                  "is low")
        found.remove(low)
    return found


def diagnose_run(run_dir: Path | str, thresholds: Optional[Thresholds] = None) -> list[Finding]:
    """Diagnose a run directory (metrics.jsonl, baselines.json, config.json).

    Baselines are recomputed from the run's corpus when ``baselines.json`` is absent (runs made
    before analytics existed) and the corpus can be loaded.

    Raises:
        DepthlabError: the folder does not exist, or lacks its config or metrics file.
    """
    rd = RunDir(run_dir).require("metrics")
    config, baselines = rd.config, rd.baselines
    if baselines is None and config is not None:
        baselines = _recompute_baselines(config)
    return diagnose_records(rd.metrics(), baselines, config, thresholds)


def _recompute_baselines(config: dict) -> Optional[dict]:
    try:
        from ..config import DataConfig
        from ..data import load_corpus
        from .baselines import corpus_baselines

        c = load_corpus(DataConfig(**config.get("data", {})))
        return corpus_baselines(c.train, c.val, len(c.tokenizer.vocab))
    except Exception:  # noqa: BLE001 - corpus moved/deleted: diagnose without the bigram rule
        return None


def format_findings(findings: list[Finding]) -> str:
    """Plain-words block for the console: one paragraph per finding, or a one-line all-clear."""
    if not findings:
        return "diagnosis: no problems found (rules: " + ", ".join(RULES) + ")"
    lines = [f"diagnosis: {len(findings)} finding(s)"]
    for f in findings:
        lines.append(f"  [{f.rule}] {f.evidence}")
        lines.append(f"      remedy: {f.remedy}")
    return "\n".join(lines)


def findings_json(findings: list[Finding]) -> dict:
    """``{"findings": [{"rule", "evidence", "remedy"}, ...]}`` (the diagnosis.json format)."""
    return {"findings": [asdict(f) for f in findings]}


def write_diagnosis(run_dir: Path, findings: list[Finding]) -> Path:
    """Write ``run_dir/diagnosis.json`` atomically; returns its path."""
    p = Path(run_dir) / DIAGNOSIS
    write_json(p, findings_json(findings))
    return p


class DiagnosisCallback(Callback):
    """At train end (main rank): diagnose the run, print the findings, write diagnosis.json."""

    def on_train_end(self, run: RunView, summary: dict) -> None:
        """Run every rule over the run's metrics so far (the writer flushes every record)."""
        if not run.is_main:
            return
        try:
            findings = diagnose_run(run.run_dir)
        except DepthlabError as e:  # never fail a finished training run over its diagnosis
            run.log(f"diagnosis skipped: {e}")
            return
        write_diagnosis(run.run_dir, findings)
        run.log(format_findings(findings))
