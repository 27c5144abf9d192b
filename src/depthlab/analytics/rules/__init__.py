"""Diagnosis rules with one interface: each :class:`Rule` declares the data it needs and judges one
:class:`Evidence` (built once per run) into a :class:`Finding`, :class:`NotJudged` or None.

:data:`RULE_SET` is every rule in the order findings are said; :mod:`depthlab.analytics.diagnose`
runs it.
"""

from .advice import SHORTCUT_VARIANTS
from .context import context_unused, fixed_shape, leak_at_start, random_eval, shifted_logits
from .evidence import Evidence, Finding, Thresholds
from .losses import (bigram_stuck, exploding, loss_level, no_context, one_char_window, overfitting, plateau,
                     stuck_at_baseline, stuck_name)
from .rule import (BASELINES, DISTINCT, GRAD, GRAD_LATE, LATE_EVAL, LATE_PROBE, LEARNABLE, LR_RECORDS, NEEDS,
                   OVERFIT_EVALS, PLATEAU_EVALS, PROBE, Need, NotJudged, Rule, Verdict, rule, who_needs)
from .training import (NO_GRADIENT_CAUSE, learning_rate, no_gradient, rank_collapse, uniform_attention,
                       vanishing_gradients)

__all__ = ["Evidence", "Finding", "Thresholds", "Need", "NotJudged", "Rule", "Verdict", "rule", "who_needs", "NEEDS",
           "LEARNABLE", "GRAD", "GRAD_LATE", "LR_RECORDS", "PROBE", "DISTINCT", "LATE_PROBE", "LATE_EVAL", "BASELINES",
           "PLATEAU_EVALS", "OVERFIT_EVALS", "RULE_SET", "SHORTCUT_VARIANTS", "loss_level", "stuck_name",
           "NO_GRADIENT_CAUSE", "bigram_stuck", "no_context"]

RULE_SET: tuple[Rule, ...] = (one_char_window, stuck_at_baseline, context_unused, leak_at_start, no_gradient,
                              vanishing_gradients, exploding, rank_collapse, uniform_attention, learning_rate,
                              overfitting, plateau, fixed_shape, random_eval, shifted_logits)
"""Every rule, in the order of their findings. Two rules may give the same name (``one_char_window``
and ``stuck_at_baseline`` both say ``bigram_stuck``): the first that finds something gives it, and
the later ones are not asked (``context_unused``, the loss by position at the end of training, and
``leak_at_start``, the test of a ``model.source`` model as its training started, both say ``causal_leak``; a name
one rule finds is not listed as not judged by another).

``bigram_stuck`` and ``unigram_stuck`` are two different findings: at the unigram line the model
uses no context at all (not even the current character), at the bigram line it predicts from the
current character alone (the context before it does not reach the loss). Runs diagnosed before
``unigram_stuck`` existed said ``bigram_stuck`` for both."""
