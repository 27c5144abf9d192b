"""finite: the logits, the loss and every gradient at initialisation, before any training step.

A NaN defeats every comparison the other rules make (``nan > tol`` and ``nan < target`` are both
False), so a model whose logits are NaN would pass causal_leak and no_gradient and be given advice
about its output layer or its learning rate. This rule runs before them; when it finds non-finite
numbers the rules that read them are not run, and it names where the first non-finite value is made:
the first module (in the order the forward runs them) whose inputs are finite and whose output is
not, or the code between two modules. The other rules use :func:`nonfinite_result` when they meet a
non-finite number this rule's batch did not show.
"""

from __future__ import annotations

import math
from typing import Iterator, Optional

import torch
import torch.nn as nn

from .subject import CheckResult, Subject, call_user

__all__ = ["finite_rule", "nonfinite_result", "first_nonfinite", "FINITE_REMEDY"]

FINITE_REMEDY = ("find the operation that makes NaN or inf there: 0/0 or x/0 (add an epsilon to the denominator), "
                 "log() or sqrt() of a value <= 0, exp() of large scores (subtract the max first, or use "
                 "torch.softmax), a mask filled with -inf on a whole row, or a parameter left uninitialised "
                 "(torch.empty: initialise it with nn.init)")
_SHOWN = 8


def _tensors(obj) -> Iterator[torch.Tensor]:
    """The floating-point tensors in a module's inputs or output (tuples, lists and dicts looked into)."""
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point():
            yield obj
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


def _finite(obj) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in _tensors(obj))


def first_nonfinite(model: nn.Module, run) -> Optional[str]:
    """Where the first non-finite value of ``run()`` (a forward of ``model``) is made, in words; None if nowhere.

    Forward hooks on every submodule record, in the order the modules finish, whether their inputs
    and output are finite (hooks removed afterwards).

    Args:
        model: the model ``run`` calls. run: a zero-argument function running one forward.

    Raises:
        ModelFault: the forward raised.
    """
    seen: list[tuple[str, str, bool, bool]] = []  # (name, class, inputs finite, output finite)

    def hook(name: str):
        return lambda m, inp, out: seen.append((name, type(m).__name__, _finite(inp), _finite(out)))

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if n]
    try:
        with torch.no_grad():
            call_user(run)
    finally:
        for h in handles:
            h.remove()
    bad = next((i for i, s in enumerate(seen) if not s[3]), None)
    top = f"{type(model).__name__}.forward"
    if bad is None:
        last = f"after {seen[-1][0]} ({seen[-1][1]}), the last module to run, whose output is finite" if seen else ""
        return f"in {top}'s own code" + (f", {last}" if last else "")
    name, cls, inputs_ok, _ = seen[bad]
    if inputs_ok:
        params = [f"{name}.{p}" for p, t in model.get_submodule(name).named_parameters()
                  if not bool(torch.isfinite(t).all())]
        inner = " (its parameters " + ", ".join(params[:_SHOWN]) + " are not finite)" if params else ""
        return f"inside {name} ({cls}): its inputs are finite, its output is not{inner}"
    before = next((s for s in reversed(seen[:bad]) if s[3]), None)
    parent = name.rpartition(".")[0]
    where = f"{type(model.get_submodule(parent)).__name__}.forward ({parent})" if parent else top
    after = f" after {before[0]} ({before[1]}, finite output)" if before else ""
    return f"in {where}'s own code{after}, before {name} ({cls}), whose inputs already are not"


def _kind(t: torch.Tensor) -> tuple[str, str]:
    """("NaN" | "inf" | "NaN or inf", "N NaN [and M inf] of K values (B x T x V)") of a non-finite tensor."""
    n_nan, n_inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
    kinds = [f"{n:,} NaN" for n in (n_nan,) if n] + [f"{n:,} inf" for n in (n_inf,) if n]
    word = "NaN or inf" if n_nan and n_inf else "NaN" if n_nan else "inf"
    return word, f"{' and '.join(kinds)} of {t.numel():,} values ({' x '.join(map(str, t.shape))})"


def nonfinite_result(rule: str, what: str, ev: Optional[dict] = None, where: Optional[str] = None) -> CheckResult:
    """A rule's finding when it meets a non-finite number: a problem, with no judgement of the rule's own.

    Args:
        rule: the rule's name. what: what was non-finite, when and how many (a sentence fragment).
        ev: the rule's evidence so far. where: :func:`first_nonfinite`'s answer, when known.
    """
    text = f"{what}: a comparison with NaN is never true, so this check cannot judge the model"
    if where:
        text += f"; the first non-finite value is made {where}"
    return CheckResult(rule, False, {"summary": text, **(ev or {}), "nonfinite": True, "nonfinite_at": where},
                       FINITE_REMEDY)


def finite_rule(subject: Subject) -> CheckResult:
    """The logits (eval mode), the loss and every gradient (train mode) of one batch at initialisation.

    Sets ``subject.unusable`` when the logits are not finite, ``subject.untrainable`` when only the
    loss or a gradient is not.
    """
    model = subject.fresh().eval()
    bad_params = [n for n, p in model.named_parameters() if not bool(torch.isfinite(p.detach()).all())]
    x, y = subject.batch(subject.B, subject.T, subject.rng(9))
    with torch.no_grad():  # detached: logits that are a view of a parameter (a learned bias expanded to (B, T, V))
        logits = subject.logits(model, x).detach()  # keep requires_grad under no_grad, and float() of them warned
    ev: dict = {"nonfinite_parameters": bad_params}
    if not bool(torch.isfinite(logits).all()):
        where = first_nonfinite(model, lambda: subject.logits(model, x))
        subject.unusable = "the logits are not finite at initialisation (finite)"
        word, counts = _kind(logits)
        text = f"the logits are {word} at initialisation, before any training step: {counts}"
        if bad_params:
            text += f"; parameters not finite at init: {', '.join(bad_params[:_SHOWN])}"
        return CheckResult("finite", False, {"summary": f"{text}; the first non-finite value is made {where}",
                                             "nonfinite_at": where, **ev}, FINITE_REMEDY)
    torch.manual_seed(subject.seed)
    model.train()
    loss = subject.loss(model, x, y)
    if loss.requires_grad:
        call_user(loss.backward)
    grads = [n for n, p in model.named_parameters() if p.grad is not None and not bool(torch.isfinite(p.grad).all())]
    ev.update({"loss": float(loss.detach()), "nonfinite_gradients": grads})
    if math.isfinite(ev["loss"]) and not grads:
        return CheckResult("finite", True, {"summary": f"at initialisation the logits of ({subject.B}, {subject.T}) "
                                                       f"are finite (max |logit| {float(logits.abs().max()):.3g}), "
                                                       f"and so are the loss ({ev['loss']:.3f} nats, train mode) and "
                                                       "every gradient", **ev})
    subject.untrainable = "the loss or a gradient is not finite at initialisation (finite)"
    if not math.isfinite(ev["loss"]):
        text = (f"the logits are finite in eval mode but the loss in train mode is {ev['loss']} at initialisation, "
                "before any training step (dropout or another train-only path?)")
    else:
        text = (f"the loss at initialisation is finite ({ev['loss']:.3f} nats) but the gradient of "
                f"{len(grads)} parameters is not: {', '.join(grads[:_SHOWN])}; the backward of some operation "
                "overflows (sqrt() or norm() at 0, pow() with a fractional exponent of 0, a division by a tiny "
                "number)")
    return CheckResult("finite", False, {"summary": text, **ev}, FINITE_REMEDY)

