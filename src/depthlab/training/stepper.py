"""One optimisation step: micro-batches, forward/backward, clip, the non-finite check, ``optimizer.step``.

The non-finite check runs on the host (the loss and gradient norm are read every step) or, on CUDA
with a fused optimizer, on the device (:meth:`Stepper.device_step`): no host read per step, the
flags are read in one transfer at log, evaluation and last steps and before a checkpoint.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Callable, Optional

import torch

from ..callbacks import StepInfo
from ..data import get_batch, to_device
from ..errors import NonFiniteError
from ..usermodel import check_command

__all__ = ["Stepper", "clip_on_host"]


def clip_on_host(params: list[torch.nn.Parameter], max_norm: float) -> float:
    """``torch.nn.utils.clip_grad_norm_`` for a step that reads the norm on the host: the same gradients bit
    for bit, without its pass over every gradient when nothing is clipped.

    torch multiplies every gradient by min(1, max_norm / (norm + 1e-6)) even when that factor is 1, so that an
    accelerator never waits for the norm; a step checked on the host reads the norm anyway, and multiplying by
    exactly 1.0 changes nothing. With the default train.grad_clip 1.0 the norm stays below it for most of a
    run (0.5-0.7 after the first hundred steps of the default recipe), and the skipped pass was ~0.6 of
    clip_grad_norm_'s ~0.8 ms per step at nanoGPT's CPU shape (27 gradients, 2-core Zen 4).

    Args:
        params: the parameters (those without a gradient are left out, as torch does).
        max_norm: the largest total 2-norm kept (``inf``: never clip).

    Returns:
        The total 2-norm of the gradients before clipping (inf or nan when one is not finite; 0.0 with none).
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    norm = torch.nn.utils.get_total_norm(grads)
    factor = torch.clamp(max_norm / (norm + 1e-6), max=1.0)  # torch.nn.utils.clip_grads_with_norm_'s factor
    norm_val, factor_val = torch.stack([norm.float(), factor.float()]).tolist()  # one host read
    if factor_val != 1.0:  # also nan, as torch multiplies then
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    return norm_val


class Stepper:
    """The step counter, the tokens seen and the non-finite handling of one run.

    Args:
        run: the trainer (its ``cfg``, ``runtime``, ``port``, ``model``, ``raw_model``, ``optimizer``,
            ``schedule``, ``corpus``, ``batch_rng``, ``metrics``, ``run_dir``; read when a step runs).
        before_clip: called with the step's :class:`StepInfo` after backward, before clipping.

    Attributes:
        step: optimizer steps done. tokens_seen: training tokens consumed (all processes).
        nonfinite_skips: steps skipped for a non-finite loss or gradient (``on_nonfinite: skip``).
        train_seconds: wall seconds spent in optimisation steps (earlier sessions included): the
            steps' own time, without evaluations, checkpoints or the observers' hooks; training
            throughput (tokens/s) is measured against it.
        on_device: whether the non-finite check stays on the device (set by the trainer at ``fit``).
    """

    def __init__(self, run, before_clip: Callable[[StepInfo], None]):
        self.run = run
        self.before_clip = before_clip
        self.step = 0
        self.tokens_seen = 0
        self.nonfinite_skips = 0
        self.train_seconds = 0.0
        self._observer_s = 0.0
        self.on_device = False
        self._pending: list[tuple] = []  # device-checked steps not yet read: (step, lr, tokens, loss, gnorm, bad)
        self._halted: Optional[torch.Tensor] = None  # on_nonfinite stop, device check: sticky 0-d skip flag

    def state_dict(self) -> dict:
        """``step``, ``tokens_seen``, ``nonfinite_skips``, ``train_seconds`` (s) for the checkpoint's resume state."""
        return {"step": self.step, "tokens_seen": self.tokens_seen, "nonfinite_skips": self.nonfinite_skips,
                "train_seconds": self.train_seconds}

    def load_state_dict(self, st: dict) -> None:
        """Restore :meth:`state_dict`'s keys from a checkpoint's resume state (older ones: defaults)."""
        self.step = int(st["step"])
        self.tokens_seen = int(st["tokens_seen"])
        self.nonfinite_skips = int(st.get("nonfinite_skips", 0))
        # a checkpoint from before train_seconds existed: its wall time (an overestimate) stands in
        self.train_seconds = float(st.get("train_seconds", st.get("wall_time_s", 0.0)))

    def micro_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's slice (B, T) of the next global micro-batch (B * world_size windows)."""
        r = self.run
        rt, B, T = r.runtime, r.cfg.train.batch_size, r.cfg.model.block_size
        x, y = get_batch(r.corpus.train, T, B * rt.world_size, r.batch_rng)
        sl = slice(rt.rank * B, (rt.rank + 1) * B)
        return to_device(x[sl], y[sl], rt.device)

    def forward_backward(self) -> torch.Tensor:
        """Forward + backward over this step's micro-batches; returns the summed loss (a 0-d tensor)."""
        r = self.run
        rt = r.runtime
        loss_sum = torch.zeros((), device=rt.device)
        for micro in range(rt.accum):
            x, y = self.micro_batch()
            sync = contextlib.nullcontext()
            if rt.world_size > 1 and micro < rt.accum - 1:
                sync = r.model.no_sync()  # all-reduce once, on the last micro-batch
            with sync:
                with rt.ctx:
                    loss = r.port.loss(r.model, x, y)
                (loss / rt.accum).backward()
            loss_sum += loss.detach().float()
        return loss_sum

    def train_step(self, params: list[torch.nn.Parameter], tokens_per_step: int) -> Optional[StepInfo]:
        """One optimisation step: LR, forward/backward, clip, non-finite check, ``optimizer.step``.

        Its wall time, less the ``before_clip`` observers', is added to :attr:`train_seconds`.

        Returns:
            The step's :class:`StepInfo`, or None when a non-finite step was skipped.

        Raises:
            NonFiniteError: non-finite loss/gradient with ``on_nonfinite: stop``.
        """
        t0, self._observer_s = time.perf_counter(), 0.0
        try:
            return self._step(params, tokens_per_step)
        finally:
            self.train_seconds += time.perf_counter() - t0 - self._observer_s

    def _step(self, params: list[torch.nn.Parameter], tokens_per_step: int) -> Optional[StepInfo]:
        r = self.run
        t, rt = r.cfg.train, r.runtime
        lr = r.schedule.apply(r.optimizer, self.step)
        loss_sum = self.forward_backward()
        t_obs = time.perf_counter()
        self.before_clip(StepInfo(step=self.step, lr=lr, tokens_seen=self.tokens_seen))
        self._observer_s += time.perf_counter() - t_obs
        max_norm = t.grad_clip if t.grad_clip > 0 else float("inf")
        if rt.world_size > 1 and (self.step + 1) % t.log_interval == 0:
            rt.mean_(loss_sum)  # logged loss = mean over all ranks' micro-batches
        if self.on_device:
            return self.device_step(loss_sum, torch.nn.utils.clip_grad_norm_(params, max_norm), lr, tokens_per_step)
        gnorm_val = clip_on_host(params, max_norm)
        loss_val = loss_sum.item() / rt.accum
        if rt.agree(bad=not (math.isfinite(loss_val) and math.isfinite(gnorm_val)))["bad"]:
            self.nonfinite(loss_val, gnorm_val, lr)
            return None
        r.optimizer.step()
        r.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.tokens_seen += tokens_per_step
        return StepInfo(step=self.step, loss=loss_val, lr=lr, grad_norm=gnorm_val, tokens_seen=self.tokens_seen)

    def device_step(self, loss_sum: torch.Tensor, gnorm: torch.Tensor, lr: float,
                    tokens_per_step: int) -> Optional[StepInfo]:
        """The end of :meth:`train_step` with the non-finite check on the device: no host read per step.

        A 0-d float flag ``bad`` = 1 when the summed loss or the total gradient norm is not finite
        (max-reduced over the ranks on the device under DDP, so every rank skips or stops at the same
        step) is handed to fused AdamW as ``found_inf``, the mechanism of ``torch.amp.GradScaler``:
        its kernel then leaves weights, moments and step count untouched. With ``on_nonfinite: stop``
        the flag is sticky, so no later update lands either. Flags, losses and grad norms are read
        in one transfer (:meth:`read_pending`) at log, eval and last steps and before a time-up or
        signal checkpoint, where skips are counted and logged and a stop raises: a non-finite step
        never reaches the weights or a checkpoint.

        Unlike the host check, the step's StepInfo is returned for a skipped step when it is not a
        read step, and its loss / grad_norm are None except at read steps.

        Returns:
            The step's StepInfo, or None when this step was read and found skipped.
        """
        r = self.run
        t = r.cfg.train
        bad = r.runtime.max_((~(torch.isfinite(loss_sum) & torch.isfinite(gnorm))).float())  # 0-d, 1.0 = non-finite
        skip = bad
        if t.on_nonfinite == "stop":
            skip = self._halted = bad if self._halted is None else torch.maximum(self._halted, bad)
        r.optimizer.found_inf = skip
        try:
            r.optimizer.step()
        finally:
            del r.optimizer.found_inf
        r.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.tokens_seen += tokens_per_step  # provisional: a skipped step's tokens come off when read
        self._pending.append((self.step, lr, tokens_per_step, loss_sum, gnorm, bad))
        if self.step % t.log_interval == 0 or self.step % t.eval_interval == 0 or self.step >= r.schedule.max_iters:
            return self.read_pending()
        return StepInfo(step=self.step, lr=lr, tokens_seen=self.tokens_seen)

    def read_pending(self) -> Optional[StepInfo]:
        """Read the pending device-checked steps (one host transfer); count, log or raise their non-finite ones.

        Returns:
            The last pending step's StepInfo with its loss and grad norm; None if nothing was
            pending or that step was skipped.

        Raises:
            NonFiniteError: a pending step was non-finite and ``on_nonfinite`` is ``stop``.
        """
        rows, self._pending = self._pending, []
        if not rows:
            return None
        accum = self.run.runtime.accum
        vals = torch.stack([x.float() for r in rows for x in r[3:]]).view(-1, 3).tolist()  # the one sync
        for (step, lr, tokens, *_), (loss_sum, gnorm, bad) in zip(rows, vals):
            if bad:
                self.tokens_seen -= tokens
                self.nonfinite(loss_sum / accum, gnorm, lr, step=step)
        (step, lr, *_), (loss_sum, gnorm, bad) = rows[-1], vals[-1]
        if bad:
            return None
        return StepInfo(step=step, loss=loss_sum / accum, lr=lr, grad_norm=gnorm, tokens_seen=self.tokens_seen)

    def _first_nonfinite_param(self) -> Optional[str]:
        """The first parameter whose gradient holds a NaN/inf; None when every gradient is finite."""
        for name, p in self.run.raw_model.named_parameters():
            if p.grad is not None and not torch.isfinite(p.grad).all():
                return name
        return None

    def nonfinite(self, loss_val: float, gnorm: float, lr: float, step: Optional[int] = None) -> None:
        """Skip the step (``on_nonfinite: skip``) or raise :class:`NonFiniteError`; nothing reaches the weights.

        Args:
            loss_val: the step's mean loss (nats/token); gnorm: its total gradient norm; lr: its rate.
            step: None = the step being taken now (host check: its gradients are dropped and the step
                counter advances here); a number = a step already taken whose update the device-side
                check skipped, read later (:meth:`read_pending`): only counted and logged.

        Raises:
            NonFiniteError: with ``on_nonfinite: stop``.
        """
        r = self.run
        t = r.cfg.train
        deferred = step is not None
        step = self.step + 1 if step is None else step
        if t.on_nonfinite == "skip":
            if not deferred:
                r.optimizer.zero_grad(set_to_none=True)
                self.step += 1
            self.nonfinite_skips += 1
            r.metrics.log("event", {"step": step, "nonfinite_skip": True, "nonfinite_skips": self.nonfinite_skips})
            return
        r.metrics.log("event", {"step": step, "nonfinite": True, "loss": loss_val, "grad_norm": gnorm, "lr": lr})
        where = ("not recorded (checked on the device; this and every later update were skipped)"
                 if deferred else self._first_nonfinite_param())
        what = "loss" if not math.isfinite(loss_val) else "gradient"
        headline = f"non-finite {what} at step {step} (loss {loss_val}, first non-finite gradient: {where}, "
        if where is None:  # every gradient finite: only their float32 total norm (or the loss) is not
            headline = (f"non-finite loss at step {step} (loss {loss_val}, every gradient is finite, "
                        if what == "loss" else
                        f"the gradient norm overflowed float32 at step {step} (every gradient is finite; "
                        f"loss {loss_val}, ")
        overflow = where is None and what == "gradient"
        made = "a gradient norm past float32's range" if overflow else f"a non-finite {what}"
        if step - 1 == self.nonfinite_skips:  # no update has reached the weights: the learning rate played no part
            advice = (f"this is before any optimizer update, so not the learning rate: the weights the run started "
                      f"with already give {made}"
                      + (f" ({check_command(r.cfg.model.source, r.run_dir)} names where the first NaN/inf is made)"
                         if r.cfg.model.source else ""))
        else:
            advice = _rate_advice(t, r.optimizer_name == "muon")
        muon = f" (Muon {lr * t.muon_lr / t.learning_rate:.3g})" if r.optimizer_name == "muon" else ""
        raise NonFiniteError(f"{headline}lr {lr:.3g}{muon}, dtype "
                             f"{r.runtime.dtype_name}); {advice}; {r.checkpointer.kept_note(back=r.replacing)}")


def _rate_advice(t, muon: bool) -> str:
    """The knobs of an update that made a NaN/inf: a weight decay above 1 whose decoupled factor 1 - rate x decay is
    no longer in (0, 1) first (each step flips the weights' sign and scales them up), else the rates, Muon's beside
    AdamW's on a Muon run (its blocks' matrices train with train.muon_lr: a large one was called train.learning_rate's
    fault)."""
    peak = max(t.learning_rate, t.muon_lr) if muon else t.learning_rate
    if t.weight_decay > 1 and t.weight_decay * peak >= 1:  # (a huge rate with a usual decay: the rate's fault)
        return (f"lower train.weight_decay (now {t.weight_decay:g}): times the peak rate {peak:g} it is >= 1, so each "
                "update multiplies the weights by 1 - rate x decay <= 0 (keep their product well below 1, e.g. "
                "weight_decay 0.1)")
    if muon:
        return (f"lower train.learning_rate (AdamW: embeddings, head, gains; now {t.learning_rate:g}) or "
                f"train.muon_lr (Muon: the blocks' matrices; now {t.muon_lr:g}), or raise train.warmup_iters")
    return "lower train.learning_rate or raise train.warmup_iters"
