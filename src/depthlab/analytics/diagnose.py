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
from typing import Any, Optional, Sequence

from ..errors import DepthlabError
from ..callbacks import Callback, RunView
from ..rundir import DIAGNOSIS, RunDir, write_json

__all__ = ["Finding", "Thresholds", "diagnose_records", "diagnose_run", "diagnose_run_full", "format_findings",
           "findings_json", "rules_without_data",
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


# ---------------------------------------------------------------------------------- the run's own config
SHORTCUT_VARIANTS = ("prenorm", "postnorm", "rezero", "deepnorm")
"""Variants with a residual (shortcut) connection; ``plain`` has none."""


def _section(config: Optional[dict], name: str) -> dict:
    sec = (config or {}).get(name)
    return sec if isinstance(sec, dict) else {}


def _now(config: Optional[dict], dotted: str) -> str:
    """`` (now V)`` with the run's value of ``section.field``, or "" when the config does not say."""
    sec, field = dotted.split(".")
    v = _section(config, sec).get(field)
    return f" (now {v:g})" if isinstance(v, (int, float)) and not isinstance(v, bool) else ""


def _wiring_advice(config: Optional[dict]) -> Optional[str]:
    """What to change in the block wiring, read from the run's ``model.variant`` and ``model.norm``.

    Never recommends what the run already has: a ``prenorm`` or ``deepnorm`` run with a norm (and
    ``rezero``, which has a shortcut and no norm by design) gets ``None``, meaning "the wiring is not
    what is missing". Without a config the advice is conditional ("if the model has no ...").
    """
    m = _section(config, "model")
    v, norm = m.get("variant"), m.get("norm")
    if v is None:
        return ("if the model has no residual connections, add them (model.variant prenorm, rezero or deepnorm); "
                "if it has no normalisation, add it (model.norm layernorm)")
    out = []
    if v == "plain":
        out.append("add residual connections (model.variant is plain, without a shortcut: use prenorm, rezero or "
                   "deepnorm)")
    elif v == "postnorm":
        out.append("model.variant postnorm already has residual connections and normalisation, but its norm sits on "
                   "the shortcut path, so at depth pre-LN (model.variant prenorm) or DeepNorm (model.variant "
                   "deepnorm) keep the shortcut an identity (Xiong et al. 2020, Wang et al. 2022)")
    if norm == "none" and v != "rezero":
        out.append("normalise (model.norm is none: use layernorm or rmsnorm)")
    return "; ".join(out) or None


def _wiring_has(config: Optional[dict]) -> str:
    """"model.variant prenorm + layernorm already has a shortcut and normalisation" (or "" if unknown)."""
    m = _section(config, "model")
    v, norm = m.get("variant"), m.get("norm")
    if v not in SHORTCUT_VARIANTS:
        return ""
    if v == "rezero":
        return "model.variant rezero already has residual connections (gated by alpha, no norm by design)"
    if norm == "none":
        return f"model.variant {v} already has residual connections"
    return f"model.variant {v} + {norm} already has residual connections and normalisation"


def _lr_direction(records: list[dict], config: Optional[dict], th: "Thresholds") -> Optional[str]:
    """"lower" / "raise" when the run's update/weight ratios say its learning rate is off, else None.

    Median over the grad records after warmup of the median over blocks, against the ~1e-3 of a
    healthy AdamW run (the same numbers as the ``lr_*`` rules, with a tenfold tighter band, so
    that a remedy never points the wrong way; None means "no evidence either way").
    """
    warm = int(_section(config, "train").get("warmup_iters", 0) or 0)
    vals, _ = _update_ratios([r for r in records if int(r.get("step", 0)) > warm])
    if not vals:
        return None
    med = statistics.median(vals)
    if med > th.lr_high / 10:
        return "lower"
    if med < th.lr_low * 3:
        return "raise"
    return None


# ---------------------------------------------------------------------------------- rules
def loss_level(best: float, baselines: dict, margin: float) -> tuple[str, str]:
    """Where a validation loss sits among the corpus baselines, in words.

    Args:
        best: a validation loss (nats/char).
        baselines: ``baselines.json`` content (``uniform``, ``unigram``, ``bigram`` with ``nats``).
        margin: nats; a loss within this of a baseline counts as at that level.

    Returns:
        ``(short, long)``: ``short`` is one of ``"at uniform"``, ``"at unigram"``,
        ``"above bigram"``, ``"within margin of bigram"``, ``"below bigram"``; ``long`` says what
        the level means, with the numbers.
    """
    uni, ug, bg = (float(baselines[k]["nats"]) for k in ("uniform", "unigram", "bigram"))
    if best >= uni - margin:
        return "at uniform", (f"best val loss {best:.3f} nats is at the uniform level ln V = {uni:.3f} (within "
                              f"{margin:g}): the model has not even learned the character frequencies")
    if best >= ug - margin:
        return "at unigram", (f"best val loss {best:.3f} nats is at the unigram level {ug:.3f} (within {margin:g}): "
                              "the model predicts character frequencies and uses no context at all, not even the "
                              f"previous character (bigram baseline {bg:.3f})")
    if best >= bg:
        return "above bigram", (f"best val loss {best:.3f} nats is {best - bg:.3f} above the bigram baseline "
                                f"{bg:.3f} (unigram {ug:.3f}), so the model uses less than what the previous "
                                "character tells")
    if best >= bg - margin:
        return "within margin of bigram", (f"best val loss {best:.3f} nats is within {margin:g} of the bigram baseline "
                                           f"{bg:.3f} ({bg - best:.3f} below it; unigram {ug:.3f}): the model uses "
                                           "little context beyond the previous character")
    return "below bigram", f"best val loss {best:.3f} nats is {bg - best:.3f} below the bigram baseline {bg:.3f}"


def _no_context_finding(records: list[dict], baselines: Optional[dict]) -> Finding:
    """``bigram_stuck`` for ``model.block_size 1``, judged from the config alone (no steps needed)."""
    ev = [(r["step"], v) for r, v in ((r, _num(r["val_loss"])) for r in _evals(records))
          if v is not None and math.isfinite(v)]
    txt = ("model.block_size is 1: every prediction sees only the current character, so no amount of training "
           "takes this model past a bigram table")
    if baselines and "bigram" in baselines:
        txt += f" (bigram baseline {float(baselines['bigram']['nats']):.3f} nats is its floor)"
    if ev:
        txt += f"; best val loss {min(v for _, v in ev):.3f} nats after {ev[-1][0]} steps"
    return Finding("bigram_stuck", txt, "raise model.block_size (e.g. 64-256) so the model can see context; a "
                   "one-character window is exactly a bigram model")


def rule_bigram_stuck(records: list[dict], baselines: Optional[dict], config: Optional[dict],
                      th: Thresholds, lr_hint: Optional[str] = None) -> Optional[Finding]:
    """Best val loss not below bigram baseline - margin after enough steps and tokens; or a model
    that cannot see context (``model.block_size`` 1), flagged from its config at once."""
    m = _section(config, "model")
    if m.get("block_size") == 1:
        return _no_context_finding(records, baselines)
    if not baselines or "bigram" not in baselines:
        return None
    V = int(baselines.get("vocab_size") or 0)
    need_tokens = th.bigram_min_pairs_seen * V * V
    ev = [r for r in _evals(records) if _num(r["val_loss"]) is not None]
    judged = [r for r in ev if int(r["step"]) >= th.bigram_min_steps
              and (r.get("tokens_seen") is None or r["tokens_seen"] >= need_tokens)]
    if not judged:
        return None
    finite = [v for v in (_num(r["val_loss"]) for r in ev) if math.isfinite(v)]
    best = min(finite) if finite else math.inf
    if best < float(baselines["bigram"]["nats"]) - th.bigram_margin:
        return None
    last = judged[-1]
    tokens = last.get("tokens_seen")
    when = f"after {last['step']} steps" + (f" and {tokens:,} tokens" if tokens is not None else "")
    ev_txt = f"{when}: " + (loss_level(best, baselines, th.bigram_margin)[1] if math.isfinite(best)
                            else "no finite validation loss")
    return Finding("bigram_stuck", ev_txt, _bigram_remedy(records, config, th, last, lr_hint))


def _bigram_remedy(records: list[dict], config: Optional[dict], th: Thresholds, last: dict,
                   lr_hint: Optional[str]) -> str:
    """Remedies for ``bigram_stuck`` that the run does not already have."""
    parts = []
    wiring = _wiring_advice(config)
    if wiring:
        parts.append(wiring)
    lr = lr_hint if lr_hint is not None else _lr_direction(records, config, th)
    if lr:
        parts.append(f"{lr} train.learning_rate{_now(config, 'train.learning_rate')}: the update/weight ratios "
                     f"say it is too {'high' if lr == 'lower' else 'low'}")
    block = _section(config, "model").get("block_size")
    if isinstance(block, int) and block < 16:
        parts.append(f"raise model.block_size (now {block}; a short window holds little context)")
    parts.append(f"train longer ({last['step']} steps so far)")
    parts.append("check rank collapse and attention entropy (depthlab probe; the report's activation figures)")
    has = _wiring_has(config)
    return "; ".join(parts) + (f"; not the wiring: {has}" if has and not wiring else "")


def rule_vanishing_gradients(records: list[dict], th: Thresholds, config: Optional[dict] = None
                             ) -> Optional[Finding]:
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
    parts = [w for w in (_wiring_advice(config),) if w]
    n_layer = _section(config, "model").get("n_layer")
    parts.append(f"use fewer layers{f' (model.n_layer is {n_layer})' if n_layer else ''}")
    if not _wiring_advice(config) and _wiring_has(config):
        parts.append(f"{_wiring_has(config)}, so look at the initialisation (model.init) and the learning rate "
                     "instead of the wiring")
    return Finding(
        "vanishing_gradients",
        f"first/last block gradient-norm ratio median {med:.2e} over {len(ratios)} records "
        f"(steps {steps[0]}-{steps[-1]}; threshold {th.vanishing_ratio:g}): the early blocks barely learn",
        "; ".join(parts))


def _nonfinite_skips(records: list[dict], summary: Optional[dict]) -> Optional[str]:
    """"N optimizer steps skipped ..." from the skip events and ``summary.json``, or None if none."""
    skips = [r for r in records if r.get("nonfinite_skip")]
    counts = [int(c) for c in (_num(r.get("nonfinite_skips")) for r in skips) if c is not None and math.isfinite(c)]
    total = max(counts + [len(skips), int(_num((summary or {}).get("nonfinite_skips")) or 0)])
    if total == 0:
        return None
    steps = [r["step"] for r in skips if "step" in r]
    where = f", first at step {steps[0]}, last at step {steps[-1]}" if steps else ""
    return (f"{total} optimizer step(s) skipped for a non-finite loss or gradient "
            f"(train.on_nonfinite skip{where})")


def rule_exploding(records: list[dict], th: Thresholds, config: Optional[dict] = None,
                   summary: Optional[dict] = None) -> Optional[Finding]:
    """Non-finite losses or gradients (skipped steps counted over the whole run), or a train loss
    that grew far above its minimum; the evidence lists every sign found."""
    ev_parts = []
    skipped = _nonfinite_skips(records, summary)
    if skipped:
        ev_parts.append(skipped)
    for r in records:
        bad = [k for k in ("loss", "train_loss", "val_loss", "grad_2.0_norm_total", "grad_norm")
               if k in r and _num(r.get(k)) is not None and not math.isfinite(_num(r[k]))]
        if bad:
            ev_parts.append(f"{bad[0]} is {r[bad[0]]} at step {r['step']}")
            break
    v_size = _section(config, "model").get("vocab_size")
    if isinstance(v_size, int) and v_size > 1:  # worse than guessing uniformly: the run blew up at some point
        worst = max(((r["step"], _num(r.get("val_loss"))) for r in _evals(records) if r.get("step", 0) > 0),
                    key=lambda sv: sv[1] if sv[1] is not None and math.isfinite(sv[1]) else -1.0, default=None)
        if worst is not None and worst[1] is not None and worst[1] > math.log(v_size) + th.exploding_growth:
            ev_parts.append(f"val loss {worst[1]:.3f} at step {worst[0]} is above the uniform baseline "
                            f"ln V = {math.log(v_size):.3f}: the model was worse than guessing")
    ev = [(s, v) for s, v in ((r["step"], _num(r["train_loss"])) for r in _evals(records))
          if v is not None and math.isfinite(v)]
    if len(ev) >= 3:
        lo_step, lo = min(ev, key=lambda t: t[1])
        last_step, last = ev[-1]
        if last - lo > th.exploding_growth:
            shown = f"{last:.3f}" if last < 1e4 else f"{last:.3g}"
            ev_parts.append(f"train loss rose from its minimum {lo:.3f} (step {lo_step}) to {shown} at step "
                            f"{last_step}")
    if not ev_parts:
        return None
    t = _section(config, "train")
    lr = t.get("learning_rate")
    parts = [f"lower train.learning_rate{_now(config, 'train.learning_rate')}"
             + (f", e.g. to {lr / 3:.2g}" if isinstance(lr, (int, float)) and lr > 0 else " (try / 3)"),
             f"raise train.warmup_iters{_now(config, 'train.warmup_iters')}"]
    clip = t.get("grad_clip")
    if clip is None or clip == 0 or clip > 1.0:
        parts.append(f"clip gradients at train.grad_clip 1.0{_now(config, 'train.grad_clip')}")
    wiring = _wiring_advice(config)
    if wiring:
        parts.append(wiring)
    return Finding("exploding", "; ".join(ev_parts), "; ".join(parts))


def _last_probe(records: list[dict]) -> Optional[dict]:
    pr = [r for r in records if r.get("kind") == "probe"]
    return pr[-1] if pr else None


def rule_rank_collapse(records: list[dict], th: Thresholds, config: Optional[dict] = None) -> Optional[Finding]:
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
    wiring = _wiring_advice(config)
    if _section(config, "model").get("variant") == "plain" or not _section(config, "model"):
        remedy = (wiring + "; a shortcut keeps the token identity that stacked attention + normalisation averages "
                  "away (Dong et al. 2021)")
    else:
        remedy = (f"{_wiring_has(config)}, so this collapse was learned, not built in: lower train.learning_rate"
                  f"{_now(config, 'train.learning_rate')} or raise train.warmup_iters"
                  f"{_now(config, 'train.warmup_iters')}, and compare the probes over steps (the report's "
                  "activation figure) to see when it happened")
        if _section(config, "model").get("norm") == "none" and _section(config, "model").get("variant") != "rezero":
            remedy += "; normalise (model.norm is none: use layernorm or rmsnorm)"
        if _section(config, "model").get("variant") == "postnorm":
            remedy += ("; at depth, pre-LN (model.variant prenorm) or DeepNorm (model.variant deepnorm) keep the "
                       "shortcut an identity, which post-LN's norm does not")
    return Finding(
        "rank_collapse",
        f"at step {p['step']} the rank measure falls from {rm[0][1]:.3f} (block {rm[0][0]}) to "
        f"{rm[-1][1]:.2e} (block {rm[-1][0]}{cos_txt}); below {th.rank_collapse:g} from block {first_bad} on: "
        "all positions carry nearly the same vector", remedy)


def rule_uniform_attention(records: list[dict], th: Thresholds, config: Optional[dict] = None,
                           lr_hint: Optional[str] = None) -> Optional[Finding]:
    """Mean attention entropy over heads and blocks >= ``uniform_attention_frac`` of ln t, late in training.

    The remedy follows the run's own update/weight ratios: "lower the learning rate" when they are
    high (the usual reason attention never sharpens is a step size that keeps rewriting the
    weights), "raise" only when they are low, and neither without evidence. ``lr_hint``
    overrides the ratios: ``"lower"`` for a run that exploded, ``""`` (no advice) when vanishing
    gradients explain the small updates.
    """
    p = _last_probe(records)
    if p is None or int(p["step"]) < th.uniform_attention_min_step:
        return None
    u = _num(p.get("attn_entropy_uniform"))
    ent = [v for blk in (p.get("attn_entropy") or []) for v in (_num(h) for h in blk)
           if v is not None and math.isfinite(v)]
    if u is None or not math.isfinite(u) or u < th.uniform_attention_min_nats or not ent:
        return None
    mean = sum(ent) / len(ent)
    if mean < th.uniform_attention_frac * u:
        return None
    parts = []
    lr = lr_hint if lr_hint is not None else _lr_direction(records, config, th)
    if lr == "lower":
        parts.append(f"lower train.learning_rate{_now(config, 'train.learning_rate')}: the update/weight ratios "
                     "are high, and attention that is rewritten every few steps never sharpens")
    elif lr == "raise":
        parts.append(f"raise train.learning_rate{_now(config, 'train.learning_rate')}: the update/weight ratios "
                     "are low, the attention weights hardly move")
    else:
        parts.append(f"train longer ({p['step']} steps so far)")
    wiring = _wiring_advice(config)
    if wiring:
        parts.append(wiring)
    parts.append("check rank collapse (uniform attention averages the tokens into one vector)")
    return Finding(
        "uniform_attention",
        f"at step {p['step']} mean attention entropy {mean:.3f} nats = {mean / u:.0%} of uniform "
        f"({u:.3f} nats = mean ln t): the heads average over the context instead of selecting",
        "; ".join(parts))


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
                       f"lower train.learning_rate{_now(config, 'train.learning_rate')} (try / 3 to / 10) or "
                       f"raise train.warmup_iters{_now(config, 'train.warmup_iters')}")
    if med < th.lr_low:
        return Finding("lr_too_low", f"median update/weight ratio {med:.2e} per step ({span}){lr_txt}; "
                       f"healthy is about 1e-3, below {th.lr_low:g} the weights hardly move",
                       f"raise train.learning_rate{_now(config, 'train.learning_rate')} (try x 3 to x 10)")
    return None


def rule_overfitting(records: list[dict], th: Thresholds, config: Optional[dict] = None,
                     baselines: Optional[dict] = None) -> Optional[Finding]:
    """val - train gap above ``overfit_gap``, grown by ``overfit_growth`` over the last evals,
    while val loss no longer improves (the last val is not below the window's earlier best).

    A gap that grows while val still falls is the usual train/val shift of a small corpus, not
    harm: stopping then would give a worse model. A train loss above the uniform baseline ln V
    (a diverged run) has fitted nothing, so it is never called overfitting.
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
    uniform = _num(((baselines or {}).get("uniform") or {}).get("nats"))
    if uniform is not None and recent[-1][1] - recent[-1][2] > uniform:
        return None  # train loss above ln V: diverged, not overfitted
    return Finding("overfitting", f"val - train gap grew from {gaps[0]:.3f} (step {recent[0][0]}) to "
                   f"{gaps[-1]:.3f} nats (step {recent[-1][0]})", _overfit_remedy(config))


def _overfit_remedy(config: Optional[dict]) -> str:
    """Regularisation the run does not have yet (patience, dropout, weight decay), then size/data."""
    t, m = _section(config, "train"), _section(config, "model")
    parts = []
    if t.get("patience"):
        parts.append(f"train.patience is {t['patience']}, so training stops after that many evaluations without "
                     "improvement and sample uses the best checkpoint")
    else:
        parts.append("stop earlier (train.patience 3 stops after 3 evaluations without improvement; sample uses "
                     "the best checkpoint)")
    drop = m.get("dropout")
    parts.append("add model.dropout 0.1-0.2" if not drop else f"raise model.dropout (now {drop:g})")
    parts.append(f"raise train.weight_decay{_now(config, 'train.weight_decay')}")
    parts.append("use a smaller model or more data")
    return "; ".join(parts)


def rule_plateau(records: list[dict], th: Thresholds, config: Optional[dict] = None) -> Optional[Finding]:
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
                   f"the model has converged for this size/LR: stop, decay the LR further (train.min_lr"
                   f"{_now(config, 'train.min_lr')}), or grow the model (model.n_layer, model.n_embd) or its "
                   "context (model.block_size)")


def diagnose_records(records: list[dict], baselines: Optional[dict] = None, config: Optional[dict] = None,
                     thresholds: Optional[Thresholds] = None, summary: Optional[dict] = None) -> list[Finding]:
    """Apply every rule to a run's records; remedies read ``config`` and never advise what it has.

    Args:
        records: the parsed lines of ``metrics.jsonl``.
        baselines: ``baselines.json`` content (needed by ``bigram_stuck``).
        config: ``config.json`` content (variant, norm, block size, learning rate, warmup, ...;
            optional: without it remedies are conditional).
        thresholds: rule thresholds (defaults: :class:`Thresholds`).
        summary: ``summary.json`` content (its ``nonfinite_skips`` count; optional).

    Returns:
        Findings in :data:`RULES` order (empty = nothing wrong found). A run that exploded is not
        also called ``overfitting`` or ``plateau``; vanishing gradients absorb ``lr_too_low``.
    """
    th = thresholds or Thresholds()
    exploding = rule_exploding(records, th, config, summary)
    lr = rule_lr(records, config, th)
    vanishing = rule_vanishing_gradients(records, th, config)
    hint = "lower" if exploding is not None or (lr is not None and lr.rule == "lr_too_high") else None
    if hint is None and vanishing is not None:
        hint = ""  # tiny updates come from the vanishing gradients: no learning-rate advice either way
    out = [rule_bigram_stuck(records, baselines, config, th, hint), vanishing, exploding,
           rule_rank_collapse(records, th, config), rule_uniform_attention(records, th, config, hint), lr]
    if exploding is None:  # a diverged run's val-train gap and flat val loss are the divergence
        out += [rule_overfitting(records, th, config, baselines), rule_plateau(records, th, config)]
    found = [f for f in out if f is not None]
    if vanishing is not None and lr is not None and lr.rule == "lr_too_low":
        # tiny updates are the consequence of the vanishing gradients; "raise the LR" would be bad advice
        vanishing.evidence += ("; the update/weight ratios are tiny too (" + lr.evidence.split(" per step")[0] +
                               "), because the gradients vanish, not because the learning rate is low")
        found.remove(lr)
    return found


def diagnose_run(run_dir: Path | str, thresholds: Optional[Thresholds] = None) -> list[Finding]:
    """Diagnose a run directory (metrics.jsonl, baselines.json, config.json): its findings only.

    Raises:
        DepthlabError: the folder does not exist, or lacks its config or metrics file.
    """
    return diagnose_run_full(run_dir, thresholds)[0]


def diagnose_run_full(run_dir: Path | str, thresholds: Optional[Thresholds] = None
                      ) -> tuple[list[Finding], list[str]]:
    """Diagnose a run directory, reading it once: (findings, :func:`rules_without_data` lines).

    Baselines are recomputed from the run's corpus when ``baselines.json`` is absent (runs made
    before analytics existed) and the corpus can be loaded.

    Raises:
        DepthlabError: the folder does not exist, or lacks its config or metrics file.
    """
    rd = RunDir(run_dir).require("metrics")
    config, baselines, records = rd.config, rd.baselines, rd.metrics()
    if baselines is None and config is not None:
        baselines = _recompute_baselines(config)
    return (diagnose_records(records, baselines, config, thresholds, summary=rd.summary),
            rules_without_data(records, config, thresholds))


def _recompute_baselines(config: dict) -> Optional[dict]:
    try:
        from ..config import DataConfig
        from ..data import load_corpus
        from .baselines import corpus_baselines

        c = load_corpus(DataConfig(**config.get("data", {})), seed=(config.get("train") or {}).get("seed", 1337))
        return corpus_baselines(c.train, c.val, len(c.tokenizer.vocab), c.val_chars_per_token)
    except Exception:  # noqa: BLE001 - corpus moved/deleted: diagnose without the bigram rule
        return None


def rules_without_data(records: list[dict], config: Optional[dict] = None,
                       thresholds: Optional[Thresholds] = None) -> list[str]:
    """The rules that had too little data to judge this run, each with what was missing.

    A rule that could not run must not read as "no problem found": ``lr_too_high``/``lr_too_low``
    need ``lr_min_records`` gradient records after the warmup, ``vanishing_gradients`` one,
    ``rank_collapse``/``uniform_attention`` an activation probe, ``bigram_stuck`` an evaluation
    after ``bigram_min_steps`` (and enough tokens), ``plateau`` ``plateau_evals + 1`` evaluations
    and ``overfitting`` ``overfit_window`` of them with a train loss.
    """
    th = thresholds or Thresholds()
    out = []
    t = _section(config, "train")
    if not any(r.get("kind") == "grad" for r in records):
        out.append(f"vanishing_gradients, lr_too_high, lr_too_low (no gradient records: train.grad_log_interval "
                   f"is {t.get('grad_log_interval', '?')} and the run is {_last_step(records)} steps)")
    else:
        warm = int(t.get("warmup_iters", 0) or 0)
        n = len(_update_ratios([r for r in records if int(r.get("step", 0)) > warm])[0])
        if n < th.lr_min_records:
            out.append(f"lr_too_high, lr_too_low (they need {th.lr_min_records} gradient records after the warmup, "
                       f"the run has {n}; lower train.grad_log_interval or train longer)")
    if _last_probe(records) is None:
        out.append(f"rank_collapse, uniform_attention (no activation probe: train.probe_interval is "
                   f"{t.get('probe_interval', '?')})")
    return out + _eval_rules_without_data(records, config, th)


def _eval_rules_without_data(records: list[dict], config: Optional[dict], th: Thresholds) -> list[str]:
    """bigram_stuck, plateau and overfitting when the run has too few (or too early) evaluations for them."""
    out = []
    ev = [r for r in _evals(records) if _num(r.get("val_loss")) is not None and math.isfinite(_num(r["val_loss"]))]
    V = int(_section(config, "model").get("vocab_size") or 0)
    need_tokens = th.bigram_min_pairs_seen * V * V
    if _section(config, "model").get("block_size") != 1 and not any(
            int(r["step"]) >= th.bigram_min_steps and (r.get("tokens_seen") is None or r["tokens_seen"] >= need_tokens)
            for r in ev):
        out.append(f"bigram_stuck (it needs an evaluation at step {th.bigram_min_steps} or later, with "
                   f"{int(need_tokens):,} tokens seen by then; the run is {_last_step(records)} steps)")
    if len(ev) < th.plateau_evals + 1:
        out.append(f"plateau ({len(ev)} of the {th.plateau_evals + 1} evaluations it needs)")
    pairs = sum(1 for r in ev if _num(r.get("train_loss")) is not None and math.isfinite(_num(r["train_loss"])))
    if pairs < th.overfit_window:
        out.append(f"overfitting ({pairs} of the {th.overfit_window} evaluations with train and val loss it needs)")
    return out


def _last_step(records: list[dict]) -> int:
    return max((int(r.get("step", 0)) for r in records), default=0)


def format_findings(findings: list[Finding], without_data: Sequence[str] = ()) -> str:
    """Plain-words block for the console: one paragraph per finding, or a one-line all-clear.

    ``without_data``: :func:`rules_without_data`'s lines, said after the findings (or instead of
    an unqualified all-clear).
    """
    if not findings:
        if not without_data:
            return "diagnosis: no problems found (rules: " + ", ".join(RULES) + ")"
        lines = ["diagnosis: no problems found by the rules that had data"]
    else:
        lines = [f"diagnosis: {len(findings)} finding(s)"]
    for f in findings:
        lines.append(f"  [{f.rule}] {f.evidence}")
        lines.append(f"      remedy: {f.remedy}")
    for w in without_data:
        lines.append(f"  not judged, too little data: {w}")
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
            findings, without_data = diagnose_run_full(run.run_dir)
        except DepthlabError as e:  # never fail a finished training run over its diagnosis
            run.log(f"diagnosis skipped: {e}")
            return
        write_diagnosis(run.run_dir, findings)
        run.log(format_findings(findings, without_data))
