"""Read-only training analytics: gradient flow, activation probes, corpus baselines, diagnosis.

Everything here observes a model or a run and never changes the maths: the same seed gives
the same trajectory with or without these observers.
"""

from pathlib import Path
from typing import Iterable, Optional, Sequence

from ..callbacks import Callback
from ..trainer import console
from ..trainer import train as _train_bare
from .activations import ActivationProbe, block_stats, probe_stats, rank_measure, record_activations
from .baselines import BaselinesCallback, corpus_baselines
from .context import ContextCallback
from .diagnose import DiagnosisCallback, Finding, diagnose_records, diagnose_run
from .hparams import HParamsCallback, hparam_values
from .samples import SampleCallback
from .gradients import GradientLogger, GradientMonitor, GradStats, format_table

__all__ = ["train", "default_callbacks", "GradientMonitor", "GradStats", "GradientLogger", "format_table",
           "record_activations", "block_stats", "probe_stats", "rank_measure", "ActivationProbe", "corpus_baselines",
           "BaselinesCallback", "diagnose_run", "diagnose_records", "Finding", "DiagnosisCallback", "SampleCallback",
           "HParamsCallback", "hparam_values"]


def default_callbacks(cfg, hparam_fields: Optional[Sequence[str]] = None) -> list:
    """The observers every training run gets, from ``cfg.train`` (a :class:`~depthlab.config.RunConfig`).

    Corpus baselines at start, ``depthlab check``'s causal leak test of a ``model.source`` model at start, the
    gradient logger every ``grad_log_interval`` steps (0 = off),
    activation probes every ``probe_interval`` steps (0 = off; depthlab's GPT only: not for a
    ``model.source`` model), samples every ``sample_interval`` steps (0 = off), the loss by position of
    the final weights and the diagnosis at the end, and the TensorBoard HParams of the run
    (:class:`HParamsCallback`) with ``train.tensorboard`` or in a sweep (``hparam_fields`` given).

    Args:
        cfg: the run config.
        hparam_fields: the config fields HParams records (a sweep passes the ones it varies);
            None = every scalar field.

    Returns:
        A list of :class:`depthlab.callbacks.Callback`.
    """
    t = cfg.train
    cbs: list = [BaselinesCallback()]
    if cfg.model.source:  # a model you wrote: depthlab check's causal_leak test before the first step
        from .check import LeakCheckCallback

        cbs.append(LeakCheckCallback())
    if t.grad_log_interval > 0:
        cbs.append(GradientLogger(t.grad_log_interval))
    if t.probe_interval > 0 and not cfg.model.source:  # the probe hooks depthlab's GPT's blocks
        cbs.append(ActivationProbe(t.probe_interval, histograms=t.tensorboard))
    if t.sample_interval > 0:
        cbs.append(SampleCallback(t.sample_interval, t.sample_tokens))
    cbs.append(ContextCallback())  # before the diagnosis: context_unused reads its record
    cbs.append(DiagnosisCallback())
    if t.tensorboard or hparam_fields is not None:  # a sweep's runs always: TensorBoard compares them
        cbs.append(HParamsCallback(hparam_fields))
    return cbs


def train(cfg, callbacks: Iterable[Callback] = (), overwrite: bool = False, log=console,
          hparam_fields: Optional[Sequence[str]] = None) -> Path:
    """Train a GPT with the default analytics observers (and ``callbacks`` after them).

    This is ``depthlab.train``: :func:`depthlab.trainer.train` plus :func:`default_callbacks`.

    Args:
        cfg: a :class:`~depthlab.config.RunConfig`.
        callbacks: extra read-only observers.
        overwrite: replace an existing run directory (only a depthlab run).
        log: ``callable(str)`` for console lines.
        hparam_fields: config fields for TensorBoard HParams (None = every scalar field).

    Returns:
        The run directory.

    Raises:
        DepthlabError: bad input; NonFiniteError; Interrupted (see :mod:`depthlab.trainer`).
    """
    from ..callbacks import checked_callbacks
    from ..config import RunConfig
    from ..errors import api_errors

    with api_errors():  # a config refused here is said in the API's words too (model.init, not --model.init)
        cbs = default_callbacks(RunConfig.require(cfg, "train").checked(), hparam_fields) + checked_callbacks(callbacks)
    return _train_bare(cfg, callbacks=cbs, overwrite=overwrite, log=log)
