"""Diagnosis rules with one interface: each :class:`Rule` declares the data it needs and judges one
:class:`Evidence` (built once per run) into a :class:`Finding`, :class:`NotJudged` or None.

:data:`RULE_SET` is every rule in the order findings are said; :mod:`depthlab.analytics.diagnose`
runs it.
"""

from .advice import SHORTCUT_VARIANTS
from .evidence import Evidence, Finding, Thresholds
from .losses import bigram_stuck, exploding, loss_level, no_context, overfitting, plateau
from .rule import (BASELINES, GRAD, LATE_EVAL, LR_RECORDS, NEEDS, OVERFIT_EVALS, PLATEAU_EVALS, PROBE, Need, NotJudged,
                   Rule, Verdict, rule, who_needs)
from .training import learning_rate, rank_collapse, uniform_attention, vanishing_gradients

__all__ = ["Evidence", "Finding", "Thresholds", "Need", "NotJudged", "Rule", "Verdict", "rule", "who_needs", "NEEDS",
           "GRAD", "LR_RECORDS", "PROBE", "LATE_EVAL", "BASELINES", "PLATEAU_EVALS", "OVERFIT_EVALS", "RULE_SET",
           "SHORTCUT_VARIANTS", "loss_level"]

RULE_SET: tuple[Rule, ...] = (no_context, bigram_stuck, vanishing_gradients, exploding, rank_collapse,
                              uniform_attention, learning_rate, overfitting, plateau)
"""Every rule, in the order of their findings. Two rules may give the same name (``no_context``
and ``bigram_stuck`` both say ``bigram_stuck``): the first that finds something gives it, and
the later ones are not asked."""
