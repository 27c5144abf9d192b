"""TensorBoard HParams: each run's hyperparameters and final metrics, for comparing runs.

``tensorboard --logdir SWEEP_DIR/runs`` (or ``--logdir runs``) then shows the HParams table and
its parallel-coordinates view with one row per run. The values go into the run's own event files
(``run_dir/tb``) through :meth:`depthlab.rundir.MetricsWriter.hparams`.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from ..callbacks import Callback

__all__ = ["HParamsCallback", "hparam_values", "HPARAM_METRICS", "BOOKKEEPING_FIELDS"]

#: TensorBoard tag -> summary.json key of the metrics written with the hyperparameters
#: (losses in nats per token, bits per character, training tokens per second).
HPARAM_METRICS = {"hparams/best_val_loss": "best_val_loss", "hparams/final_val_loss": "final_val_loss",
                  "hparams/best_val_bpc": "best_val_bpc", "hparams/tokens_per_sec": "tokens_per_sec"}

#: Scalar config fields that say where or how a run is kept, not how it trains: never hyperparameters.
BOOKKEEPING_FIELDS = ("train.out_dir", "train.resume", "train.progress", "data.cache_dir")


def hparam_values(config: dict, fields: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """The hyperparameters of a run as ``{"section.field": value}``.

    Args:
        config: nested run config (``RunConfig.to_dict()`` form: sections data / model / train).
        fields: dotted names to keep (e.g. the fields a sweep varies); None = every scalar field
            (int, float, str, bool) except :data:`BOOKKEEPING_FIELDS`.

    Returns:
        Name -> value; fields that are missing, None or not scalar are left out.
    """
    flat = {f"{sec}.{k}": v for sec, vals in config.items() if isinstance(vals, dict) for k, v in vals.items()}
    names = list(fields) if fields is not None else [k for k in flat if k not in BOOKKEEPING_FIELDS]
    return {k: flat[k] for k in names if isinstance(flat.get(k), (int, float, str, bool))}


class HParamsCallback(Callback):
    """At the end of training, write the run's hyperparameters and final metrics to TensorBoard.

    Args:
        fields: the config fields to record (a sweep passes the fields it varies); None = every
            scalar config field (see :func:`hparam_values`).
    """

    def __init__(self, fields: Optional[Sequence[str]] = None):
        self.fields = list(fields) if fields is not None else None

    def on_train_end(self, run, summary: dict) -> None:
        """Write ``hparams`` plus :data:`HPARAM_METRICS` from ``summary`` at the final step (rank 0 only)."""
        if not run.is_main:
            return
        metrics = {}
        for tag, key in HPARAM_METRICS.items():
            v = summary.get(key)
            metrics[tag] = float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None
        run.metrics.hparams(hparam_values(run.cfg.to_dict(), self.fields), metrics, int(summary.get("final_step", 0)))
