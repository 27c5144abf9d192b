"""Remedy words that read the run's own config, so a remedy never advises what the run already has."""

from __future__ import annotations

from typing import Optional

from ...units import finite_or_none, finite_values
from .evidence import Evidence, names_list
from .signals import adamw_low, divergence, lr_verdict, update_ratio_median, vanishing, zero_grad_params

__all__ = ["SHORTCUT_VARIANTS", "wiring_advice", "wiring_has", "DEPTH_ARGS", "depth_setting", "source_wiring_advice",
           "lr_advice", "lr_knob", "lr_knobs", "MUON_RATIO", "HIGH_DROPOUT", "dropout_advice", "no_grad_words",
           "bounded_output_words", "LONGER_KNOBS"]

#: The knobs of "train longer": the step budget, and the time limit a train.fit_to_time plan fits it into.
LONGER_KNOBS = "train.max_iters, or train.max_time where it set the end"

SHORTCUT_VARIANTS = ("prenorm", "postnorm", "rezero", "deepnorm", "periln")
"""Variants with a residual (shortcut) connection; ``plain`` has none."""


def wiring_advice(ev: Evidence) -> Optional[str]:
    """What to change in the block wiring, read from the run's ``model.variant`` and ``model.norm``.

    Never recommends what the run already has: a ``prenorm`` or ``deepnorm`` run with a norm (and
    ``rezero``, which has a shortcut and no norm by design) gets ``None``, meaning "the wiring is not
    what is missing". Without a config the advice is conditional ("if the model has no ...").
    """
    m = ev.section("model")
    v, norm = m.get("variant"), m.get("norm")
    if m.get("source"):
        return None  # model.variant / model.norm describe depthlab's GPT, not the user's model
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


DEPTH_ARGS = ("n_layer", "n_layers", "num_layers", "num_hidden_layers", "n_blocks", "num_blocks", "depth", "layers")
"""Keyword arguments of a ``model.source`` model read as its number of blocks when ``--model.init`` sets one."""


def depth_setting(model: dict) -> tuple[str, object]:
    """What sets the number of blocks of the run's model, and its value in the run (None when unknown):
    ``("model.n_layer", 6)`` for depthlab's GPT; for a ``model.source`` model (where ``model.n_layer`` is refused)
    the ``--model.init`` argument that gives its depth, ``("n_layer in --model.init", 8)``, else its own code."""
    src = model.get("source")
    if not src:
        return "model.n_layer", model.get("n_layer")
    init = model.get("init")
    key = next((k for k in DEPTH_ARGS if isinstance(init, dict) and k in init), None)
    if key is not None:
        return f"{key} in --model.init", init[key]
    name = str(src).rpartition(":")[2] or "the model"
    return f"{name}'s code (or an argument of it, given with --model.init)", None


def source_wiring_advice() -> str:
    """The shortcut advice for a ``model.source`` model, whose wiring no config field describes (said as a
    condition: whether it has shortcuts is in its code)."""
    return ("if the model has no shortcut around its blocks, add one (x = x + block(x); pre-norm: x = x + "
            "attn(norm(x)); x = x + mlp(norm(x))): the gradient then reaches the first blocks through a path that "
            "does not shrink with depth")


def wiring_has(ev: Evidence) -> str:
    """"model.variant prenorm + layernorm already has a shortcut and normalisation" (or "" if unknown)."""
    m = ev.section("model")
    v, norm = m.get("variant"), m.get("norm")
    if m.get("source") or v not in SHORTCUT_VARIANTS:
        return ""
    if v == "rezero":
        return "model.variant rezero already has residual connections (gated by alpha, no norm by design)"
    if norm == "none":
        return f"model.variant {v} already has residual connections"
    return f"model.variant {v} + {norm} already has residual connections and normalisation"


MUON_RATIO = ("Muon sets the size of every block-matrix update from train.muon_lr (about 0.2 x muon_lr per "
              "element, whatever the gradient), so Adam's ~1e-3 rule of thumb does not apply to these ratios")
"""Why a Muon run's block update/weight ratios are not read against AdamW's ~1e-3."""


def warmup_words(ev: Evidence) -> Optional[str]:
    """The run's warmup when it reaches its last step or past (the peak learning rate never reached, so the update
    ratios, the lr rules' evidence, all come from the ramp), in words with the knob; None otherwise.

    The warmup is the one the run followed (its ``train.fit_to_time`` plan's, else ``train.warmup_iters``); the last
    step is :attr:`Evidence.end_step`'s."""
    warm = ev.planned_warmup if ev.planned_warmup is not None else ev.section("train").get("warmup_iters")
    end = ev.end_step[0]
    if not isinstance(warm, int) or isinstance(warm, bool) or not end or warm < end:
        return None
    return (f"the warmup, train.warmup_iters {warm}, reaches past step {end}, where the run ended: the peak learning "
            f"rate was never reached (lower train.warmup_iters below the run's length)")


def lr_knob(ev: Evidence) -> str:
    """The learning rate that sets the blocks' update/weight ratios, with its value: ``train.muon_lr``
    on a Muon run (it trains the blocks' matrices), else ``train.learning_rate``."""
    if ev.muon and not (adamw_low(ev) and lr_verdict(ev) != "low"):  # the blocks' rate, unless AdamW's is the low one
        return f"train.muon_lr{ev.now('train.muon_lr')}"
    return f"train.learning_rate{ev.now('train.learning_rate')}"


def lr_knobs(ev: Evidence) -> str:
    """Every learning rate of the run, for a remedy that lowers all of them (a diverged run): on Muon
    both ``train.muon_lr`` (block matrices) and ``train.learning_rate`` (AdamW: embeddings, head,
    norms, biases)."""
    if ev.muon:
        return (f"train.muon_lr{ev.now('train.muon_lr')} (Muon: the block matrices) and train.learning_rate"
                f"{ev.now('train.learning_rate')} (AdamW: embeddings, head, norms, biases)")
    return f"train.learning_rate{ev.now('train.learning_rate')}"


def lr_advice(ev: Evidence) -> Optional[str]:
    """Which way a remedy may move the learning rate: "lower", "raise", or None (no advice).

    "lower" only for a run that diverged or whose update/weight ratios are above ``lr_high`` (what
    ``lr_too_high`` finds): the default AdamW recipe's healthy ratios are 6e-3 to 1e-2 (issue 24's shapes),
    and a tighter line (3e-3 it was) told its stuck runs to lower a rate that was not the cause. None when
    the gradients vanish (the tiny updates come from them, not from the step size); "raise" for ratios after
    warmup under 3 x ``lr_low`` (a third of the ~1e-3 of a healthy AdamW run). On a Muon run that band is not
    applied (:data:`MUON_RATIO`): only the ``lr_*`` rules' own limits count. The knob to name is
    :func:`lr_knob`.
    """
    if divergence(ev) or lr_verdict(ev) == "high":
        return "lower"
    if vanishing(ev):
        return None
    if ev.muon:
        return "raise" if lr_verdict(ev) == "low" or adamw_low(ev) else None
    med = update_ratio_median(ev)
    if med is None:
        return None
    if med < ev.thresholds.lr_low * 3:
        return "raise"
    return None


HIGH_DROPOUT = 0.5
"""A ``model.dropout`` at or above this is named in the remedies of a model that does not learn."""


def dropout_advice(ev: Evidence) -> Optional[str]:
    """"lower model.dropout ..." for depthlab's GPT with a dropout of :data:`HIGH_DROPOUT` or more, else None (a
    run of the user's own model has no model.dropout)."""
    p = finite_or_none(ev.section("model").get("dropout"))
    if ev.section("model").get("source") or p is None or p < HIGH_DROPOUT:
        return None
    return (f"lower model.dropout (now {p:g}: while training, each activation it applies to is zeroed with "
            f"probability {p:g}, so {1 - p:.0%} of the signal gets through; 0-0.2 is usual)")


HIGH_WEIGHT_DECAY = 1.0
"""A ``train.weight_decay`` at or above this is named in the remedies of a model that does not learn (0.1 to 0.3 is
usual: decoupled decay shrinks the matrices by learning_rate x weight_decay per step)."""


def weight_decay_advice(ev: Evidence) -> Optional[str]:
    """"lower train.weight_decay ..." for a run with a decay of :data:`HIGH_WEIGHT_DECAY` or more (``--train.
    weight_decay 10`` stalled at 2.72 nats against 2.19, told "train longer"), else None."""
    t = ev.section("train")
    wd, lr = finite_or_none(t.get("weight_decay")), finite_or_none(t.get("learning_rate"))
    if wd is None or wd < HIGH_WEIGHT_DECAY:
        return None
    shrink = f" ({lr * wd:.1%} per step at train.learning_rate {lr:g})" if lr is not None and not ev.muon else ""
    return (f"lower train.weight_decay (now {wd:g}: decoupled decay shrinks the weight matrices by learning rate x "
            f"weight_decay every step{shrink}, toward 0 faster than the gradients build them; 0.1-0.3 is usual)")


def no_grad_words(ev: Evidence) -> Optional[str]:
    """"N of M parameters never get a gradient (names; see no_gradient): their branch does not reach the loss" when
    the gradient records show some (not all), else None."""
    zero, total, _ = zero_grad_params(ev)
    if not zero or len(zero) == total:
        return None
    return (f"{len(zero)} of {total} parameters never get a gradient ({names_list(zero)}; see no_gradient): their "
            "branch does not reach the loss")


def bounded_output_words(ev: Evidence) -> Optional[str]:
    """What the test before training found when the model's outputs lie in [0, 1] (``Evidence.bounded_output``): the
    output, its loss floor and the fix in one clause; None otherwise."""
    out = ev.bounded_output
    if out is None:
        return None
    return (f"{out['output_summary']}, seen by the test before training: the loss cannot fall below "
            f"ln(1 + (V-1)/e) = {float(out['output_floor']):.3f} nats whatever the training; {out['output_remedy']}")


CLEAR_RANK, CLEAR_COSINE = 0.2, 0.9
"""A last block's rank measure at least this, and a token cosine below that, is well clear of rank collapse: 0.08
with a cosine of 0.99 (a plain 4-block stack) is above the ``rank_collapse`` line of 0.05 and yet nearly one vector."""


def clear_of_collapse(probe: Optional[dict]) -> bool:
    """Whether ``probe`` (a probe record, or None) measures its last block well clear of rank collapse
    (:data:`CLEAR_RANK`, :data:`CLEAR_COSINE`): a remedy then does not send the learner to check it."""
    rm, cos = finite_values((probe or {}).get("rank_measure")), finite_values((probe or {}).get("token_cosine"))
    return bool(rm) and rm[-1] >= CLEAR_RANK and (not cos or cos[-1] < CLEAR_COSINE)
