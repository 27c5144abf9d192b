"""Read-only training analytics: gradient flow, activation probes, corpus baselines, diagnosis.

Everything here observes a model or a run and never changes the maths: the same seed gives
the same trajectory with or without these observers.
"""

__all__ = ["default_callbacks"]


def default_callbacks(cfg) -> list:
    """The observers every training run gets, from ``cfg.train`` (a :class:`~depthlab.config.RunConfig`).

    Corpus baselines at start, the gradient logger every ``grad_log_interval`` steps (0 = off),
    activation probes every ``probe_interval`` steps (0 = off), and the diagnosis at the end.

    Returns:
        A list of :class:`depthlab.train.Callback`.
    """
    from .activations import ActivationProbe
    from .baselines import BaselinesCallback
    from .diagnose import DiagnosisCallback
    from .gradients import GradientLogger

    t = cfg.train
    cbs: list = [BaselinesCallback()]
    if t.grad_log_interval > 0:
        cbs.append(GradientLogger(t.grad_log_interval))
    if t.probe_interval > 0:
        cbs.append(ActivationProbe(t.probe_interval, histograms=t.tensorboard))
    cbs.append(DiagnosisCallback())
    return cbs
