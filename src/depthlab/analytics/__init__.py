"""Read-only training analytics: gradient flow, activation probes, corpus baselines, diagnosis.

Everything here observes a model or a run and never changes the maths: the same seed gives
the same trajectory with or without these observers.
"""

from .activations import ActivationProbe, probe_stats, rank_measure, record_activations
from .baselines import BaselinesCallback, corpus_baselines
from .diagnose import DiagnosisCallback, Finding, diagnose_records, diagnose_run
from .gradients import GradientLogger, GradientMonitor, GradStats, format_table

__all__ = ["default_callbacks", "GradientMonitor", "GradStats", "GradientLogger", "format_table",
           "record_activations", "probe_stats", "rank_measure", "ActivationProbe", "corpus_baselines",
           "BaselinesCallback", "diagnose_run", "diagnose_records", "Finding", "DiagnosisCallback"]


def default_callbacks(cfg) -> list:
    """The observers every training run gets, from ``cfg.train`` (a :class:`~depthlab.config.RunConfig`).

    Corpus baselines at start, the gradient logger every ``grad_log_interval`` steps (0 = off),
    activation probes every ``probe_interval`` steps (0 = off), and the diagnosis at the end.

    Returns:
        A list of :class:`depthlab.train.Callback`.
    """
    t = cfg.train
    cbs: list = [BaselinesCallback()]
    if t.grad_log_interval > 0:
        cbs.append(GradientLogger(t.grad_log_interval))
    if t.probe_interval > 0:
        cbs.append(ActivationProbe(t.probe_interval, histograms=t.tensorboard))
    cbs.append(DiagnosisCallback())
    return cbs
