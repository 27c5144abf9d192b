"""Published claims and their verdicts, one function per experiment of the ``science`` profile.

Each function judges the experiment of the same name in ``profiles/science.yaml`` (the YAML
comment above each entry names its judge here) and returns one table row: claim, setting, our
numbers, reproduced? The verdicts are ``yes``, ``no``, ``partly`` or ``not run``; the thresholds
are stated in the setting column. Losses are validation cross-entropy in nats per character.
Measured, never forced: a "no" means this small CPU setting did not show the effect in its budget.

Every judge takes ``(items, extra)``: the experiment's per-run dicts (``config``, ``row``,
``details``, see :func:`depthlab.sweep.results.sweep_items`) and its extra settings from the
profile (``target_val_loss``).
"""

from __future__ import annotations

import statistics as st
from typing import Any, Callable, Optional, Sequence

from ..rundir import finite_or_none
from .results import OK_STATUSES, aggregate, field_value, mean_metric

__all__ = ["CLAIMS", "science_claims", "rank_init", "degradation", "postln_warmup", "rezero_speed",
           "deepnorm_depth", "init_last_rank", "steps_to"]

Row = list  # [claim, setting, our numbers, verdict], all text


# --------------------------------------------------------------------------- helpers
def _by(items: Sequence[dict], **want: Any) -> list[dict]:
    """Runs whose config has every ``section__field=value`` of ``want``."""
    return [it for it in items
            if all(field_value(it["config"], k.replace("__", ".")) == v for k, v in want.items())]


def _ok(it: dict) -> bool:
    return it["row"]["status"] in OK_STATUSES


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


def _vals(items: Sequence[dict], key: str) -> str:
    vs = sorted({field_value(it["config"], key) for it in items}, key=lambda v: (str(type(v)), v))
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in vs)


def _fmt(v: Optional[float], nd: int = 3) -> str:
    return "—" if v is None else f"{v:.{nd}f}"


def _sorted_values(items: Sequence[dict], key: str) -> list:
    return sorted({field_value(it["config"], key) for it in items})


# --------------------------------------------------------------------------- the claims
def rank_init(items: Sequence[dict], extra: dict) -> Row:
    """Rank collapse without skips at init (Dong et al. 2021, "Attention is not all you need").

    yes = the plain stack's last-block rank measure falls monotonically with depth to < half of
    its shallowest value, and every residual variant at the deepest depth is >= 5x plain.

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``).
        extra: its extra settings from the profile.

    Returns:
        [claim, setting, our numbers, verdict] as text.
    """
    depths = _sorted_values(items, "model.n_layer")
    variants = _sorted_values(items, "model.variant")
    tab = {}
    for v in variants:
        for L in depths:
            rs = [r for r in (init_last_rank(it) for it in _by(items, model__variant=v, model__n_layer=L))
                  if r is not None]
            tab[(v, L)] = st.mean(rs) if rs else None
    nums = "; ".join(f"{v}: " + ", ".join(f"L{L} {_fmt(tab[(v, L)], 3)}" for L in depths) for v in variants)
    verdict = "not run"
    if "plain" in variants:
        pl = [tab[("plain", L)] for L in depths]
        others = [tab[(v, depths[-1])] for v in variants if v != "plain" and tab[(v, depths[-1])] is not None]
        if all(p is not None for p in pl):
            falls = all(a >= b for a, b in zip(pl, pl[1:])) and pl[-1] < 0.5 * pl[0]
            above = bool(others) and min(others) >= 5 * max(pl[-1], 1e-6)
            verdict = "yes" if falls and above else ("partly" if falls or above else "no")
    return ["Rank collapse without skips (Dong et al. 2021): at init the last-block rank measure of a "
            "plain stack falls towards 0 with depth; residual variants stay well above",
            f"depths {', '.join(map(str, depths))}, init, mean over seeds; yes = plain falls "
            "monotonically to < half and residual variants at the deepest depth are >= 5x plain",
            nums, verdict]


def degradation(items: Sequence[dict], extra: dict) -> Row:
    """Degradation with depth at an equal step budget (He et al. 2016, shown there for CNNs).

    yes = the deepest plain model's best val loss is >= the best shallower plain + 0.1 nats, and
    every residual variant's deepest is <= its best shallower + 0.02 nats.

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``).
        extra: its extra settings from the profile.

    Returns:
        [claim, setting, our numbers, verdict] as text.
    """
    agg = aggregate(items, "model.n_layer", ["model.variant"])
    parts, ok_plain, ok_res = [], None, []
    for v, d in sorted(agg.items()):
        parts.append(f"{v}: " + ", ".join(f"L{k} {m:.3f}" for k, (m, _, _) in d.items()))
        if len(d) > 1:
            deep = max(d)
            best_sh = min(m for k, (m, _, _) in d.items() if k < deep)
            if v == "plain":
                ok_plain = d[deep][0] >= best_sh + 0.1
            else:
                ok_res.append(d[deep][0] <= best_sh + 0.02)
    verdict = "not run" if ok_plain is None else (
        "yes" if ok_plain and ok_res and all(ok_res) else ("partly" if ok_plain or any(ok_res) else "no"))
    return ["Degradation (He et al. 2016, CNNs): plain gets worse with depth at an equal step budget, "
            "residual variants do not",
            "best val loss (nats/char) vs depth, equal steps; yes = deepest plain >= best shallower + 0.1 "
            "and every residual variant's deepest <= its best shallower + 0.02", "; ".join(parts), verdict]


def postln_warmup(items: Sequence[dict], extra: dict) -> Row:
    """Post-LN needs learning-rate warmup (Xiong et al. 2020, "On layer normalization in the Transformer").

    yes = post-LN with PyTorch init and no warmup is >= 0.1 nats worse than with warmup, or
    diverges while the warmed-up run does not; "(also with GPT-2 init)" when GPT-2 init shows it too.

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``).
        extra: its extra settings from the profile.

    Returns:
        [claim, setting, our numbers, verdict] as text.
    """
    def cell(v: str, init: str, w: int) -> tuple[str, Optional[float], bool]:
        sel = _by(items, model__variant=v, model__init=init, train__warmup_iters=w)
        bad = [it for it in sel if not _ok(it)]
        m = mean_metric(sel)
        return "diverged" if bad and m is None else _fmt(m), m, bool(bad)

    parts, verdict = [], "not run"
    warms = _sorted_values(items, "train.warmup_iters")
    for v in ("postnorm", "prenorm"):
        for init in ("torch", "gpt2"):
            parts.append(f"{v}/{init}: " + ", ".join(f"warmup {w} {cell(v, init, w)[0]}" for w in warms))
    if len(warms) > 1:
        _, m0, b0 = cell("postnorm", "torch", warms[0])
        _, m1, b1 = cell("postnorm", "torch", warms[-1])
        hurt = b0 and not b1 or (m0 is not None and m1 is not None and m0 >= m1 + 0.1)
        verdict = "yes" if hurt else "no"
        g0, g1 = cell("postnorm", "gpt2", warms[0])[1], cell("postnorm", "gpt2", warms[-1])[1]
        if hurt and g0 is not None and g1 is not None and g0 >= g1 + 0.1:
            verdict = "yes (also with GPT-2 init)"
    return ["Post-LN needs warmup (Xiong et al. 2020): without warmup at a high lr, post-LN trains "
            "badly or diverges (PyTorch init); pre-LN does not need it",
            f"{_vals(items, 'model.n_layer')} blocks, lr {_vals(items, 'train.learning_rate')}, "
            f"{_vals(items, 'train.max_iters')} steps, best val loss (nats/char); "
            "yes = post-LN/torch without warmup is >= 0.1 "
            "worse than with warmup (or diverges)", "; ".join(parts), verdict]


def rezero_speed(items: Sequence[dict], extra: dict) -> Row:
    """ReZero converges in fewer steps (Bachlechner et al. 2020, "ReZero is all you need").

    Steps to reach val loss <= ``extra["target_val_loss"]`` (nats, default 2.6), best over the
    swept learning rates per variant. yes = ReZero's best is strictly the fewest; "partly (ties)"
    when it ties; no otherwise (or when ReZero never reaches the target).

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``).
        extra: its extra settings from the profile (``target_val_loss`` in nats/char).

    Returns:
        [claim, setting, our numbers, verdict] as text.
    """
    target = float((extra or {}).get("target_val_loss", 2.6))
    best_steps, parts = {}, []
    for v in _sorted_values(items, "model.variant"):
        per_lr = sorted((it["config"]["train"]["learning_rate"], steps_to(it, target))
                        for it in _by(items, model__variant=v))
        reached = [s for _, s in per_lr if s is not None]
        best_steps[v] = min(reached) if reached else None
        parts.append(f"{v}: " + ", ".join(f"lr {lr:g} {'—' if s is None else s}" for lr, s in per_lr))
    rz = best_steps.get("rezero")
    others = [s for v, s in best_steps.items() if v != "rezero"]
    if rz is None:
        verdict = "no"
    elif all(s is None or rz < s for s in others):
        verdict = "yes"
    elif all(s is None or rz <= s for s in others):
        verdict = "partly (ties)"
    else:
        verdict = "no"
    return ["ReZero trains fast without LayerNorm (Bachlechner et al. 2020): fewer steps to a target loss",
            f"{_vals(items, 'model.n_layer')} blocks, lr {_vals(items, 'train.learning_rate')} for each "
            f"variant; steps to reach val loss <= {target:g} nats/char (evaluated every "
            f"{_vals(items, 'train.eval_interval')} steps; — = not reached); yes = ReZero's best is the fewest",
            "; ".join(parts), verdict]


def deepnorm_depth(items: Sequence[dict], extra: dict) -> Row:
    """DeepNorm keeps post-LN stable at depth (Wang et al. 2022, "DeepNet").

    yes = DeepNorm never diverges and, at every depth and learning rate, is within 0.02 nats of
    post-LN or better (or post-LN diverged); partly = that holds somewhere.

    Args:
        items: the experiment's per-run dicts (``config``, ``row``, ``details``).
        extra: its extra settings from the profile.

    Returns:
        [claim, setting, our numbers, verdict] as text.
    """
    parts, wins, fails = [], [], []
    for L in _sorted_values(items, "model.n_layer"):
        for lr in _sorted_values(items, "train.learning_rate"):
            pn = _by(items, model__variant="postnorm", model__n_layer=L, train__learning_rate=lr)
            dn = _by(items, model__variant="deepnorm", model__n_layer=L, train__learning_rate=lr)
            mp, md = mean_metric(pn), mean_metric(dn)
            bad_p = any(not _ok(it) for it in pn)
            bad_d = any(not _ok(it) for it in dn)
            parts.append(f"L{L} lr {lr:g}: post-LN {'diverged' if bad_p else _fmt(mp)}, "
                         f"DeepNorm {'diverged' if bad_d else _fmt(md)}")
            fails.append(bad_d)
            wins.append(md is not None and (bad_p or mp is None or md <= mp + 0.02))
    verdict = "yes" if wins and all(wins) and not any(fails) else ("partly" if any(wins) else "no")
    return ["DeepNorm keeps post-LN stable at depth (Wang et al. 2022)",
            f"{_vals(items, 'model.n_layer')} blocks, lr {_vals(items, 'train.learning_rate')}, "
            f"{_vals(items, 'train.max_iters')} steps, best val loss (nats/char); yes = DeepNorm never "
            "diverges and is within 0.02 of post-LN or better everywhere", "; ".join(parts), verdict]


#: Experiment name (in ``profiles/science.yaml``) -> its judge, in table order.
CLAIMS: dict[str, Callable[[Sequence[dict], dict], Row]] = {
    "rank_init": rank_init, "degradation": degradation, "postln_warmup": postln_warmup,
    "rezero_speed": rezero_speed, "deepnorm_depth": deepnorm_depth,
}


def science_claims(by_exp: dict[str, list[dict]], extras: dict[str, dict]) -> list[list[str]]:
    """Rows "claim, setting, our numbers, reproduced?" for the experiments that have a judge in :data:`CLAIMS`.

    Only experiments present (with runs) in ``by_exp`` give a row, in :data:`CLAIMS` order.

    Args:
        by_exp: experiment name -> per-run dicts (``config``, ``row``, ``details``).
        extras: experiment name -> its extra settings (e.g. ``target_val_loss`` in nats).

    Returns:
        Table rows of strings.
    """
    return [judge(by_exp[name], extras.get(name) or {}) for name, judge in CLAIMS.items() if by_exp.get(name)]
