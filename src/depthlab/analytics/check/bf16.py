"""bf16: one forward and backward under the bf16 autocast that training computes in.

The other rules run in float32, but ``depthlab train`` with ``train.dtype auto`` runs every forward under
``torch.autocast(dtype=torch.bfloat16)`` on CUDA, and on a CPU with native bf16 where bf16 steps time faster at
the run's shape (:mod:`depthlab.training.autotune`). There a matmul's output is bf16, and a user's float32 tensor
(``torch.ones(..., dtype=torch.float32)``, a mask, a buffer) met by an operation autocast does not cast
raises a dtype mismatch; a difference of nearly equal numbers can round to 0 in bf16 and make inf. This rule
runs one small batch under CPU bf16 autocast (on every CPU: emulated where the CPU lacks native bf16, slower
but the same numbers), so such a model fails here and not in its first training step.
"""

from __future__ import annotations

import math

import torch

from ...training.runtime import use_bf16
from .finite import first_nonfinite
from .subject import CheckResult, ModelFault, Subject, call_user

__all__ = ["bf16_rule", "BF16_BATCH", "BF16_NONFINITE_REMEDY", "BF16_REMEDY"]

BF16_BATCH = 2
"""Sequences in the bf16 batch (a fixed batch size is used as it is): one forward is enough to find a fault."""
BF16_REMEDY = ("fix the line named so that it works in bf16: make the tensor it builds follow the activations "
               "(dtype=x.dtype, or .to(x.dtype)), or use an operation autocast casts (torch.matmul, F.linear); "
               "or train in float32 with --train.dtype float32 (slower where auto picks bf16)")

BF16_NONFINITE_REMEDY = ("find the operation that loses the value in bf16, which keeps 8 significant bits (x + 1 - x "
                         "is 0 once |x| >= 256): a difference of nearly equal numbers used as a divisor, or a sum of "
                         "many small terms; compute it in float32 (.float() before, .to(x.dtype) after), or train in "
                         "float32 with --train.dtype float32 (slower where auto picks bf16)")


def _where_trained() -> str:
    """Where ``train.dtype auto`` computes in bf16, and whether this machine's CPU can be one of them: on a CPU
    ``auto`` times both dtypes at the run's shape (:mod:`depthlab.training.autotune`), so native bf16 makes it
    possible, not certain."""
    here = ("this machine's CPU has native bf16" if use_bf16(torch.device("cpu"), "auto") else
            "this machine's CPU has no native bf16, so here it trains in float32")
    return (f"train.dtype auto trains under bf16 autocast on CUDA, and on a CPU with native bf16 when bf16 steps "
            f"time faster at the run's shape ({here})")


def bf16_rule(subject: Subject) -> CheckResult:
    """The logits, the loss and every gradient of one batch of :data:`BF16_BATCH` sequences under CPU bf16
    autocast, at initialisation (train mode, as the trainer's step).

    Returns:
        ok True when they are all finite; False, naming the user's line (forward or backward raised) or where the
        first non-finite value is made, and ``--train.dtype float32``.
    """
    torch.manual_seed(subject.seed)
    model = subject.fresh().train()
    x, y = subject.batch(subject.free_batch(BF16_BATCH), subject.T, subject.rng(11))
    ev: dict = {"batch": list(x.shape), "cpu_native_bf16": use_bf16(torch.device("cpu"), "auto")}
    step = "forward"
    try:
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            loss = subject.loss(model, x, y)
        step = "backward"
        if loss.requires_grad:
            call_user(loss.backward)
    except ModelFault as e:
        return CheckResult("bf16", False, {"summary": f"the {step} fails under bf16 autocast, though it runs in "
                                                      f"float32: {e}; {_where_trained()}", "failed": step, **ev},
                           BF16_REMEDY)
    grads = [n for n, p in model.named_parameters() if p.grad is not None and not bool(torch.isfinite(p.grad).all())]
    ev.update({"loss": float(loss.detach().float()), "nonfinite_gradients": grads})
    if math.isfinite(ev["loss"]) and not grads:
        return CheckResult("bf16", True, {"summary": f"one batch of ({x.shape[0]}, {x.shape[1]}) under bf16 autocast: "
                                                     f"the loss ({ev['loss']:.3f} nats) and every gradient are finite; "
                                                     f"{_where_trained()}", **ev})
    what = f"the loss is {ev['loss']:.4g}" if not math.isfinite(ev["loss"]) else (
        f"the gradient of {len(grads)} parameters is not finite ({', '.join(grads[:8])})")
    text = f"under bf16 autocast {what}, though it is finite in float32 (the finite check)"
    if not math.isfinite(ev["loss"]):
        def run():
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                subject.logits(model, x)
        text += f"; the first non-finite value is made {first_nonfinite(model, run)}"
    return CheckResult("bf16", False, {"summary": f"{text}; {_where_trained()}", "nonfinite": True, **ev},
                       BF16_NONFINITE_REMEDY)
