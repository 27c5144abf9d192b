"""The optimizer (AdamW, or Muon + AdamW) and the learning-rate schedule of a run.

The schedule is warmup + cosine (nanoGPT's), read from the config the user asked for or, under
``train.fit_to_time``, from the time plan (:class:`depthlab.budget.Plan`); an extended or re-planned
run continues its cosine from the learning rate it had (an anchor), so the rate never jumps.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch

from ..budget import DECAY_STEPS, Plan, TimeBudget
from ..config import TrainConfig
from ..errors import DepthlabError
from .protocol import ModelPort

__all__ = ["LRSchedule", "apply_hyperparameters", "get_lr", "get_lr_from", "make_optimizer", "param_groups",
           "resolve_optimizer", "set_update_precision"]


def get_lr(it: int, learning_rate: float, min_lr: float, warmup_iters: int, decay_iters: int) -> float:
    """Learning rate at optimizer step ``it`` (0-based): linear warmup, then cosine to ``min_lr``.

    Warmup gives lr * (it + 1) / (warmup + 1), so step 0 is > 0; then
    min_lr + 0.5 (1 + cos(pi r)) (lr - min_lr) with r = (it - warmup) / (decay - warmup)
    (Loshchilov & Hutter 2017, SGDR; the nanoGPT schedule); after ``decay_iters``: min_lr.
    """
    if it < warmup_iters:
        lr = learning_rate * (it + 1)
        # a finite lr near float's limit (1e308) overflowed here to inf, and the non-finite stop then reported
        # "lr inf" for a value the user gave; the other order only when it must, so every other run's
        # schedule stays bit for bit what it was
        return lr / (warmup_iters + 1) if math.isfinite(lr) else learning_rate * ((it + 1) / (warmup_iters + 1))
    if it >= decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / max(1, decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


def get_lr_from(it: int, start: int, start_lr: float, min_lr: float, decay_iters: int) -> float:
    """Learning rate at step ``it`` of a cosine that starts at ``start_lr`` at step ``start`` and reaches
    ``min_lr`` at ``decay_iters`` (then stays there): the schedule of an extended run.

    When ``--resume`` changes where the decay ends (a larger ``max_iters`` with ``lr_decay_iters`` 0),
    recomputing the original warmup + cosine for the new length would make the learning rate jump
    (e.g. from ``min_lr`` at the end of a finished run back up to near the peak, with no warmup).
    Instead the run continues from the learning rate it had and decays from there (SGDR-style
    cosine, Loshchilov & Hutter 2017).
    """
    if it >= decay_iters or decay_iters <= start:
        return min_lr
    ratio = (it - start) / (decay_iters - start)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (start_lr - min_lr)


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: decay on tensors with >= 2 dims (matmuls, embeddings), none on gains/biases.

    Each parameter appears in exactly one group; tied weights once (``named_parameters`` dedups).
    """
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def resolve_optimizer(name: str, device: torch.device, model: Optional[torch.nn.Module] = None) -> str:
    """``adamw`` or ``muon`` for ``train.optimizer``; ``auto`` is Muon on CPU, AdamW elsewhere (and AdamW
    for a ``model`` with no matrices for Muon, :meth:`ModelPort.hidden_matrices`, such as a bigram table).

    On CPU (2-core AMD EPYC, fp32) Muon reached val 1.536 nats in the default recipe's 270 s against
    AdamW's 1.616, and fast-cpu's val 1.88 in 300 steps instead of 700. On CUDA it is unmeasured,
    and fused AdamW lets the trainer check for non-finite steps on the device without a host sync.
    """
    if name != "auto":
        return name
    return "muon" if device.type == "cpu" and (model is None or ModelPort(model).hidden_matrices()) else "adamw"


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, device: torch.device, name: Optional[str] = None):
    """The optimizer ``name`` (default: ``cfg.optimizer`` resolved, see :func:`resolve_optimizer`) over ``model``.

    ``adamw``: AdamW (Loshchilov & Hutter 2019) over :func:`param_groups`; fused kernel on CUDA
    and CPU (measured ~7 % faster per step than foreach at nanoGPT's CPU shape), foreach elsewhere.
    ``muon``: :class:`~depthlab.optim.Muon` (peak lr ``cfg.muon_lr``) for the 2-D weights inside the
    transformer blocks (:meth:`ModelPort.hidden_matrices`), AdamW for the embeddings, the head, gains
    and biases (:class:`~depthlab.optim.MuonAdamW`).
    """
    kw = {"fused": True} if device.type in ("cuda", "cpu") else {"foreach": True}
    if (name or resolve_optimizer(cfg.optimizer, device)) == "adamw":
        return torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.learning_rate,
                                 betas=(cfg.beta1, cfg.beta2), **kw)
    from ..optim import Muon, MuonAdamW

    hidden = ModelPort(model).hidden_matrices()
    if not hidden:
        raise DepthlabError("train.optimizer muon updates the 2-D weights inside the model's blocks and this model "
                            "has none (only embeddings and the output layer): use --train.optimizer adamw (or auto)")
    ids = {id(p) for p in hidden}
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in ids]
    groups = [{"params": [p for p in rest if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in rest if p.dim() < 2], "weight_decay": 0.0}]
    return MuonAdamW(Muon(hidden, lr=cfg.muon_lr, weight_decay=cfg.weight_decay),
                     torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), **kw))


def set_update_precision(optimizer, bf16: bool) -> None:
    """Run Muon's Newton-Schulz iteration in bfloat16 when the run trains in bf16, else in float32.

    The run's dtype is bf16 only where bf16 matmuls were measured (or ruled) faster than fp32: a CPU
    with native bf16 or a GPU. There the iteration, ~60 % of the model's own arithmetic at nanoGPT's CPU
    shape, runs at the faster rate, as in Jordan et al.'s and torch's Muon; elsewhere it stays in fp32,
    which a CPU without native bf16 computes ~100x faster than emulated bf16. AdamW: nothing to set.

    Args:
        optimizer: from :func:`make_optimizer`.
        bf16: whether the run's forward runs under bf16 autocast.
    """
    from ..optim import MuonAdamW

    if isinstance(optimizer, MuonAdamW):
        optimizer.muon.ns_dtype = torch.bfloat16 if bf16 else torch.float32


def lr_words(lr: float, train: TrainConfig, optimizer: str) -> str:
    """The step line's learning rate: ``lr 1.00e-03``, AdamW's (every parameter's on an AdamW run); on a Muon run
    Muon's rate beside it, ``lr 1.00e-03 (Muon 1.00e-02)``, the same schedule at train.muon_lr's peak
    (:meth:`LRSchedule.apply`), which the blocks' matrices train with."""
    if optimizer != "muon":
        return f"lr {lr:.2e}"
    return f"lr {lr:.2e} (Muon {lr * train.muon_lr / train.learning_rate:.2e})"


def apply_hyperparameters(optimizer, cfg: TrainConfig) -> None:
    """Set the config's weight decay and AdamW betas on every param group of ``optimizer``.

    ``load_state_dict`` restores the hyperparameters a checkpoint was saved with, so a resume that
    changes ``train.weight_decay`` / ``beta1`` / ``beta2`` (allowed, with a line: RESUME_NOTED) must
    set them again, or the run goes on with the old ones. AdamW's groups are, in order, the ones with
    decay and the ones without (gains, biases) (:func:`param_groups`, :func:`make_optimizer`); Muon's
    groups are marked ``muon``. The learning rate is set every step by :class:`LRSchedule`.
    """
    adamw = [g for g in optimizer.param_groups if not g.get("muon")]
    for g in optimizer.param_groups:
        if g.get("muon"):
            g["weight_decay"] = cfg.weight_decay
    for i, g in enumerate(adamw):
        g["betas"] = (cfg.beta1, cfg.beta2)
        g["weight_decay"] = cfg.weight_decay if i == 0 else 0.0


class LRSchedule:
    """Warmup + cosine of the schedule asked for, or of the time plan when there is one.

    Args:
        train: the run's train section (read only).
        budget: the run's :class:`~depthlab.budget.TimeBudget`; its ``plan``, when set, replaces
            ``max_iters``, ``lr_decay_iters`` and ``warmup_iters``.

    Attributes:
        anchor: ``(step, lr, decay_iters)`` of a cosine continued from ``lr`` at ``step`` (an extended
            or re-planned run), or None.
    """

    def __init__(self, train: TrainConfig, budget: TimeBudget):
        self.train, self.budget = train, budget
        self.anchor: Optional[tuple[int, float, int]] = None

    @property
    def plan(self) -> Optional[Plan]:
        """The time plan the schedule follows (the budget's), or None."""
        return self.budget.plan

    @property
    def max_iters(self) -> int:
        """The step the run ends at."""
        return self.budget.max_iters

    @property
    def warmup_iters(self) -> int:
        """Steps of linear warmup: the plan's, else ``train.warmup_iters``."""
        return self.plan.warmup_iters if self.plan is not None else self.train.warmup_iters

    @property
    def decay_iters(self) -> int:
        """The step the cosine reaches min_lr."""
        if self.plan is not None:
            return self.plan.lr_decay_iters or self.plan.max_iters
        return self.train.lr_decay_iters or self.train.max_iters

    def at_floor(self, it: int) -> bool:
        """Whether the rate of step ``it`` is ``train.min_lr`` (to float rounding): a decay that has ended, or a
        constant rate (a warmup's first steps are low too: callers that need it exclude them)."""
        return self.lr_at(it) <= self.train.min_lr * (1 + 1e-6)

    def lr_at(self, it: int) -> float:
        """Learning rate of optimizer step ``it``: :func:`get_lr`, or :func:`get_lr_from` after an anchor, or the
        plan's continued warmup (:attr:`~depthlab.budget.Plan.warmup_from`)."""
        t, a = self.train, self.anchor
        if a is not None and it >= a[0]:
            return get_lr_from(it, a[0], a[1], t.min_lr, self.decay_iters)
        w = self.plan.warmup_from if self.plan is not None else None
        if w is not None and w[0] <= it < self.warmup_iters:  # straight on from the rate it had to the peak
            return w[1] + (t.learning_rate - w[1]) * (it - w[0]) / (self.warmup_iters - w[0])
        return get_lr(it, t.learning_rate, t.min_lr, self.warmup_iters, self.decay_iters)

    def apply(self, optimizer, it: int) -> float:
        """Set every param group's rate for step ``it`` (Muon's scaled to its peak); returns the AdamW rate."""
        t = self.train
        lr = self.lr_at(it)
        muon_lr = lr * t.muon_lr / t.learning_rate  # the same schedule, scaled to Muon's peak
        for g in optimizer.param_groups:
            g["lr"] = muon_lr if g.get("muon") else lr
        return lr

    def replanned(self, step: int, lr_before: float, warmup_before: int) -> None:
        """After a new plan at ``step``: mid-decay, continue from ``lr_before`` (no jump), as an extension does;
        inside a warmup the plan shortened, go on from ``lr_before`` to the peak at the new warmup's end; a plan
        whose warmup ends here (it ends a few steps later) decays from ``lr_before`` too, never up to the peak."""
        if step > self.warmup_iters or 0 < step == self.warmup_iters:
            self.anchor = (step, lr_before, self.decay_iters)
        elif self.warmup_iters != warmup_before and 0 < step < self.warmup_iters:
            self.budget.plan = dataclasses.replace(self.plan, warmup_from=[step, lr_before])

    def resume(self, step: int, stored: Optional[list], old_train: dict, old_plan: Optional[Plan], log,
               muon: bool = False) -> None:
        """On resume at ``step``: keep a stored anchor, or make one when the decay's end moved; a new
        ``train.learning_rate`` scales what continues, a new ``train.min_lr`` is the new floor. Says in one line
        what the rate does from here, compared with what the run's old settings gave at this step (and Muon's
        rate, which follows ``learning_rate``), and nothing when nothing will train (the trainer says that).

        Args:
            stored: the checkpoint's ``lr_anchor`` or None. old_train: the ``train`` section the checkpoint was saved
                with (:attr:`~depthlab.training.checkpointer.ResumePoint.schedule_train`).
            old_plan: the plan the run followed until now (None: it followed ``old_train``).
            log: console lines. muon: the run trains its matrices with Muon.
        """
        t = self.train
        stored = (int(stored[0]), float(stored[1]), int(stored[2])) if stored is not None else None
        old = _OldSchedule(old_train, t)
        if stored is not None and stored[2] == self.decay_iters:
            self.anchor = stored  # this schedule was already extended to the same end
        if step >= self.max_iters:
            return  # nothing will train: no schedule to continue, nothing to announce
        if old.muon_lr != t.muon_lr and not muon:
            log(f"resume: train.muon_lr {old.muon_lr:g} -> {t.muon_lr:g} changes nothing: this run trains every "
                "parameter with AdamW (train.optimizer)")
        if step == 0:
            new = [f"train.{k} {a:g} -> {b:g}" for k, a, b in (("learning_rate", old.peak, t.learning_rate),
                                                             ("warmup_iters", old.warmup_asked, t.warmup_iters))
                   if a != b]
            if new:
                log(f"resume: {'; '.join(new)}: the run starts again from step 0, on the new schedule")
            return
        case = _ResumeCase.of(self, step, stored, old, old_plan)
        # a new train.warmup_iters that an anchor (or a plan's own warmup) overrides: said, as doing nothing
        idle_warmup = (f"train.warmup_iters {old.warmup_asked} -> {t.warmup_iters} changes nothing from step {step + 1}"
                       if old.warmup_asked != t.warmup_iters and not case.warmup_moved else "")
        if ((case.old_decay, old.peak, old.min_lr) == (self.decay_iters, t.learning_rate, t.min_lr)
                and not case.warmup_moved and (old.muon_lr == t.muon_lr or not muon)):
            if idle_warmup:
                log(f"resume: {idle_warmup}: the learning rate continues from {self.lr_at(step):.3g} as before")
            return  # the run continues exactly as it was
        if (case.old_decay != self.decay_iters or case.anchored or case.ended) and not case.inside:
            self.anchor = (step, max(t.min_lr, case.lr_now), self.decay_iters)
        words = self._resume_words(step, old, case.old_decay, case.lr_old, case.ended, muon,
                                   case.old_warmup if case.warmup_moved else None, case.ended_by,
                                   never_decayed=case.old_warmup >= case.old_decay)
        log(words + (f"; {idle_warmup}" if idle_warmup else ""))

    def _resume_words(self, step: int, old: "_OldSchedule", old_decay: int, lr_old: float, ended: bool,
                      muon: bool, old_warmup: Optional[int] = None, ended_by: Optional[int] = None,
                      never_decayed: bool = False) -> str:
        """The one ``resume:`` line: the settings that changed, then the rate at ``step`` against the old one
        (``old_warmup``: where the warmup used to end, when a new one reshapes the rate from here; ``ended_by``:
        a step by which an ended decay had reached the floor, when ``old_decay`` is a later end that kept it)."""
        t, lr_now = self.train, self.lr_at(step)
        changed = [f"train.{k} {a:g} -> {b:g}" for k, a, b in (("learning_rate", old.peak, t.learning_rate),
                                                               ("min_lr", old.min_lr, t.min_lr),
                                                               ("muon_lr", old.muon_lr, t.muon_lr if muon else
                                                                old.muon_lr),
                                                               ("warmup_iters", old.warmup_asked, t.warmup_iters
                                                                if old_warmup is not None else old.warmup_asked),
                                                               ("lr_decay_iters", old.decay_asked, t.lr_decay_iters
                                                                if old_decay != self.decay_iters else old.decay_asked))
                   if a != b]
        head = "resume: " + (f"{'; '.join(changed)}: " if changed else "")
        same = f"{lr_now:.3g}" == f"{lr_old:.3g}"  # as printed: two equal numbers are no change to show
        if ended:
            peak = (f"; the new train.learning_rate {t.learning_rate:g} does not "
                    f"{'raise' if t.learning_rate > old.peak else 'lower'} it" if old.peak != t.learning_rate else "")
            moves = "stays at" if same else f"goes from {lr_old:.3g} to the new"
            end = (f"at step {old_decay}" if ended_by is None or ended_by >= old_decay else
                   f"by step {ended_by}; the schedule's later end at step {old_decay} kept it there")
            what = (f"the learning rate {moves} train.min_lr {t.min_lr:g} (the decay ended {end}{peak}); "
                    "no jump back to the peak")
        else:
            was = "" if same else f" (the run's old settings: {lr_old:.3g})"
            moved = ("" if old_decay == self.decay_iters else
                     f" (the run used to end at step {old_decay}, with no decay: its warmup reached that far)"
                     if never_decayed else f" (the decay used to end at {old_decay})")
            if old_warmup is not None:
                moved += f" (the warmup now ends at step {self.warmup_iters + 1}, was {old_warmup + 1})"
            # steps as the console and metrics.jsonl number them: update ``it`` is logged as step it + 1
            warm = (f", warms up to train.learning_rate {t.learning_rate:g} at step {self.warmup_iters + 1}"
                    if self.anchor is None and step < self.warmup_iters else "")
            what = (f"the learning rate continues from {lr_now:.3g} at step {step + 1}{was}{warm}, and "
                    f"{self._floor_words()}{moved}"
                    + ("" if warm or old_warmup is not None else "; no jump back to the peak"))
            if warm and self.warmup_iters >= self.max_iters:  # the run ends inside its warmup: no decay to speak of
                what = (f"the learning rate continues from {lr_now:.3g} at step {step + 1}{was} and warms up until the "
                        f"run ends at step {self.max_iters} (train.warmup_iters {self.warmup_iters} reaches past it: "
                        "no decay)")
            tb = self.budget.train
            if tb.fit_to_time and tb.max_time > 0 and self.plan is None:  # the session's plan may end it sooner
                what += " (unless train.fit_to_time plans an earlier end for this session's train.max_time)"
        if muon:  # Muon's rate is the same schedule scaled by muon_lr / learning_rate (apply)
            m_old, m_now = lr_old * old.muon_lr / old.peak, lr_now * t.muon_lr / t.learning_rate
            if not math.isclose(m_old, m_now, rel_tol=1e-3):  # not a rounding of the same rate (3e-7 apart)
                what += f"; Muon's rate {m_old:.3g} -> {m_now:.3g}"
                if m_now > m_old and t.learning_rate < old.peak:  # the knob turned down moved Muon's rate up
                    what += (" (Muon's rate is the AdamW rate x train.muon_lr / train.learning_rate, so a lower "
                             "train.learning_rate raises it where the AdamW rate stays; lower train.muon_lr to "
                             "lower Muon's)")
        return head + what

    def _floor_words(self) -> str:
        """Where the rate first equals train.min_lr, as the console and metrics.jsonl number steps (update ``it``
        is logged as step ``it + 1``, and ``lr_at(decay_iters)`` is the first at the floor), or that the run ends
        before it gets there."""
        t, first = self.train, self.decay_iters + 1
        if first <= self.max_iters:
            return f"decays to train.min_lr {t.min_lr:g} at step {first}"
        return (f"decays toward train.min_lr {t.min_lr:g}, which it would first reach at step {first}, after the run's "
                f"last step {self.max_iters}")

    def state_dict(self) -> dict:
        """``lr_anchor``: ``[step, lr, decay_iters]`` of a continued cosine, or None."""
        return {"lr_anchor": list(self.anchor) if self.anchor is not None else None}


#: The last trained rate of a cosine of budget.DECAY_STEPS steps lies this fraction of (peak - min_lr) above min_lr
#: (1/2 (1 + cos(pi (k-1)/k)), 2.4 % at k = 10); a run whose last rate was further above had no room to decay.
_UNDECAYED = 0.5 * (1 + math.cos(math.pi * (DECAY_STEPS - 1) / DECAY_STEPS)) * 1.001


@dataclasses.dataclass(frozen=True)
class _ResumeCase:
    """Where a resumed run stands against its old schedule (:meth:`LRSchedule.resume`).

    Attributes:
        anchored: it was extended before and is past that anchor: the old schedule is the anchored cosine.
        ended: its old decay had reached the old min_lr: nothing is left to decay, the new floor holds.
        inside: stopped inside its old warmup (not anchored, not ended): the warmup goes on to the peak,
            wherever the decay now ends.
        warmup_moved: a new warmup reshapes the rate from here (no anchor carries it: the decay's end did
            not move, or the run is inside its warmup).
        old_decay: where the old decay ended. old_warmup: where the old warmup ended.
        ended_by: a step by which an ended decay had reached the floor: ``old_decay``, or the start of an anchor
            that continued from the floor to a later end (an extension of a finished run).
        lr_old: the old settings' rate at the step. lr_now: the new settings' rate on the old shape.
    """

    anchored: bool
    ended: bool
    inside: bool
    warmup_moved: bool
    old_decay: int
    old_warmup: int
    lr_old: float
    lr_now: float
    ended_by: int

    @classmethod
    def of(cls, schedule: "LRSchedule", step: int, stored: Optional[tuple[int, float, int]], old: "_OldSchedule",
           old_plan: Optional[Plan]) -> "_ResumeCase":
        t = schedule.train
        anchored = stored is not None and step >= stored[0]
        old_decay, lr_old, lr_now = old.rates(step, stored if anchored else None, old_plan, t, schedule.decay_iters)
        if step > 0 and lr_old <= old.min_lr:  # at the floor by the old schedule; but did the run train down to it?
            _, lr_last, lr_last_now = old.rates(step - 1, stored if stored is not None and step - 1 >= stored[0]
                                                else None, old_plan, t, schedule.decay_iters)
            if lr_last - old.min_lr > _UNDECAYED * (old.peak - old.min_lr):
                # a plan that ended a step or two after its warmup (or its last re-plan): the weights last trained
                # near the peak, so an extension goes on from that rate, not from a floor they never reached
                lr_old, lr_now = lr_last, lr_last_now
        ended = step > 0 and lr_old <= old.min_lr
        if ended:
            lr_now = t.min_lr  # nothing left to decay: the new floor, never back up to a peak
        old_warmup = old.warmup(old_plan, t)
        inside = not anchored and not ended and step < old_warmup
        warmup_moved = (old_warmup != schedule.warmup_iters and not anchored and not ended
                        and (old_decay == schedule.decay_iters or inside))
        ended_by = stored[0] if anchored and stored is not None and old_decay > step else old_decay
        return cls(anchored, ended, inside, warmup_moved, old_decay, old_warmup, lr_old, lr_now, ended_by)


class _OldSchedule:
    """The schedule settings a run had before a resume (its config.json ``train``; a field it lacks: as now)."""

    def __init__(self, old_train: dict, t: TrainConfig):
        self.train = old_train
        self.peak = float(old_train.get("learning_rate", t.learning_rate))
        self.min_lr = float(old_train.get("min_lr", t.min_lr))
        self.muon_lr = float(old_train.get("muon_lr", t.muon_lr))
        self.warmup_asked = int(old_train.get("warmup_iters", t.warmup_iters))
        self.decay_asked = int(old_train.get("lr_decay_iters", t.lr_decay_iters))

    def warmup(self, plan: Optional[Plan], t: TrainConfig) -> int:
        """The steps of warmup the run followed: its plan's, else its config's."""
        return plan.warmup_iters if plan is not None else self.warmup_asked

    def rates(self, step: int, anchor: Optional[tuple[int, float, int]], plan: Optional[Plan],
              t: TrainConfig, decay_now: int) -> tuple[int, float, float]:
        """``(where the old decay ended, the old rate at step, the new settings' rate on the old shape)``: from the
        anchor of an earlier extension, else from the old plan or config's warmup + cosine."""
        scale = t.learning_rate / self.peak if self.peak > 0 else 1.0  # a new peak scales what continues
        if anchor is not None:
            return (anchor[2], get_lr_from(step, anchor[0], anchor[1], self.min_lr, anchor[2]),
                    get_lr_from(step, anchor[0], anchor[1] * scale, t.min_lr, anchor[2]))
        warmup = self.warmup(plan, t)
        if plan is not None:
            decay = plan.lr_decay_iters or plan.max_iters
        else:
            decay = int(self.train.get("lr_decay_iters") or self.train.get("max_iters") or decay_now)
        # A run whose end came before its warmup did never decayed: at its end get_lr drops from the warmed-up
        # rate to min_lr in one step. What continues is the warmup (then the peak), not an ended decay.
        shape = max(decay, step + 1) if warmup >= decay else decay
        return (decay, get_lr(step, self.peak, self.min_lr, warmup, shape),
                get_lr(step, t.learning_rate, t.min_lr, warmup, shape))
