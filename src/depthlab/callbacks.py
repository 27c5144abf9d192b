"""Observers of a training run: the :class:`Callback` hooks and the :class:`StepInfo` they receive.

Callbacks are read-only: they look at the model and the numbers, write records, and never
change the maths (the same seed gives the same trajectory with or without them). This module
imports nothing of the trainer; a hook sees the trainer through the small :class:`RunView`
protocol below, so analytics depends on this contract and not on the trainer's internals.

Order of hooks in one optimisation step::

    forward/backward (all micro-batches) -> on_before_clip -> clip -> optimizer.step
        -> on_step_end -> (every eval_interval) on_eval
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

import torch

from .errors import DepthlabError


@dataclass(frozen=True)
class StepInfo:
    """The numbers of one optimisation step, as hooks see them.

    Attributes:
        step: optimizer steps done. In ``on_before_clip`` the step being taken is ``step + 1``;
            in ``on_step_end`` and ``on_eval`` it is the step just finished.
        loss: mean training loss over the step's micro-batches (nats/token); None before any step,
            in ``on_before_clip`` (the loss is read once the step is done), and in ``on_step_end`` of a
            device-checked run (CUDA) except at log / eval / last steps, where the values are read from the
            device (see ``Trainer._device_checked_step``).
        lr: learning rate used by the step; None before any step.
        grad_norm: total L2 norm of the gradients before clipping; None before clipping, and as
            ``loss`` on a device-checked run.
        tokens_seen: training tokens consumed so far (all processes).
    """

    step: int
    loss: Optional[float] = None
    lr: Optional[float] = None
    grad_norm: Optional[float] = None
    tokens_seen: int = 0


class MetricsSink(Protocol):
    """Where callbacks write records (implemented by :class:`depthlab.rundir.MetricsWriter`)."""

    tb: Any

    def log(self, kind: str, record: dict, tb_scalars: Optional[dict[str, float]] = None) -> None: ...
    def histogram(self, tag: str, values: Any, step: int) -> None: ...
    def text(self, tag: str, text: str, step: int) -> None: ...
    def hparams(self, hparams: dict, metrics: dict, step: int) -> None: ...


class RunView(Protocol):
    """What a callback may read of the run (the trainer provides these attributes).

    Attributes:
        cfg: the :class:`~depthlab.config.RunConfig` actually running.
        run_dir: the run directory.
        raw_model: the GPT, unwrapped from DDP / torch.compile.
        corpus: the :class:`~depthlab.data.Corpus` (train / val token ids, tokenizer).
        device: where the model lives.
        is_main: True on the process that writes files (rank 0).
        metrics: the run's metrics writer.
        log: prints one console line (rank 0 only).
        eval_batch: windows per evaluation batch (:func:`~depthlab.training.evaluator.eval_batch`).
    """

    cfg: Any
    run_dir: Path
    raw_model: torch.nn.Module
    corpus: Any
    device: torch.device
    is_main: bool
    metrics: MetricsSink
    log: Callable[[str], None]
    eval_batch: int


class Callback:
    """Base class of read-only training observers; override the hooks you need (each is a no-op)."""

    def on_train_start(self, run: RunView, info: StepInfo) -> None:
        """Called once before the first step (``info.step`` > 0 on resume)."""

    def on_before_clip(self, run: RunView, info: StepInfo) -> None:
        """Called after backward of the step's micro-batches: gradients are averaged, not yet clipped."""

    def on_step_end(self, run: RunView, info: StepInfo) -> None:
        """Called after ``optimizer.step`` with the step counter advanced."""

    def on_eval(self, run: RunView, info: StepInfo, record: dict) -> None:
        """Called after each evaluation with its metrics record (``train_loss``, ``val_loss`` in nats)."""

    def on_train_end(self, run: RunView, summary: dict) -> None:
        """Called once at the end with the summary, as ``summary.json`` (written just before) has it."""


#: The hooks an observer has (:class:`Callback`'s methods).
HOOKS = ("on_train_start", "on_before_clip", "on_step_end", "on_eval", "on_train_end")


def checked_callbacks(callbacks: object) -> list:
    """``callbacks`` as a list, each an observer with every :class:`Callback` hook (None: none); refused before the
    run starts (an object without the hooks failed with an AttributeError once the corpus baselines were computed).

    Raises:
        DepthlabError: not an iterable of callbacks, naming the first one that is not.
    """
    if callbacks is None:
        return []
    if isinstance(callbacks, (str, bytes)) or not hasattr(callbacks, "__iter__"):
        raise DepthlabError(f"callbacks must be a list of depthlab.Callback objects, got {callbacks!r}")
    out = list(callbacks)
    for i, cb in enumerate(out):
        if isinstance(cb, type):  # its methods are callable, unbound: the first hook failed with a TypeError
            raise DepthlabError(f"callbacks[{i}] is the class {cb.__name__}; pass an instance: {cb.__name__}()")
        missing = [h for h in HOOKS if not callable(getattr(cb, h, None))]
        if missing:
            raise DepthlabError(f"callbacks[{i}] ({type(cb).__name__}) has no {missing[0]}: subclass "
                                "depthlab.Callback (every hook does nothing until overridden)")
    return out
