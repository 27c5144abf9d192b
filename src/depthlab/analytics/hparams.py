"""TensorBoard HParams: each run's hyperparameters and final metrics, for comparing runs.

``tensorboard --logdir SWEEP_DIR/runs`` (or ``--logdir runs``) then shows the HParams table and
its parallel-coordinates view with one row per run. The values go into the run's own event files
(``run_dir/tb``) through :meth:`depthlab.rundir.MetricsWriter.hparams`.
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional, Sequence, get_type_hints

from ..callbacks import Callback

__all__ = ["HParamsCallback", "field_kinds", "hparam_values", "HPARAM_METRICS", "BOOKKEEPING_FIELDS"]

#: TensorBoard tag -> summary.json key of the metrics written with the hyperparameters
#: (losses in nats per token, bits per character, training tokens per second).
HPARAM_METRICS = {"hparams/best_val_loss": "best_val_loss", "hparams/final_val_loss": "final_val_loss",
                  "hparams/best_val_bpc": "best_val_bpc", "hparams/tokens_per_sec": "tokens_per_sec"}

#: Scalar config fields that say where or how a run is kept, not how it trains: never hyperparameters.
BOOKKEEPING_FIELDS = ("train.out_dir", "train.resume", "train.progress", "data.cache_dir")


def _kind(tp: Any) -> str:
    """``bool``, ``number`` or ``string``: the one TensorBoard type of a field of declared type ``tp``."""
    if tp is bool:
        return "bool"
    if tp in (int, float):
        return "number"
    return "string"  # str, Literal, Optional[...] (None has no number), Union such as bool | 'auto', dict


def field_kinds() -> dict[str, str]:
    """``{"section.field": kind}`` for every config field, from the dataclasses' declared types."""
    from ..config import SECTIONS

    return {f"{sec}.{name}": _kind(tp) for sec, klass in SECTIONS for name, tp in get_type_hints(klass).items()}


def _typed(v: Any, kind: str) -> Any:
    if kind == "bool":
        return bool(v)
    if kind == "number":
        return float(v)
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True)
    return str(v)


def hparam_values(config: dict, fields: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """The hyperparameters of a run as ``{"section.field": value}``, each field with one type in every run.

    A field's TensorBoard type comes from its declared type (:func:`field_kinds`), not from the
    value: ``bool`` fields are booleans, ``int`` / ``float`` fields numbers, every other field a
    string (``train.compile`` is ``"auto"``, ``"true"`` or ``"false"``; ``data.vocab_size`` is
    ``"none"`` or ``"512"``). TensorBoard's HParams table cannot sort or filter a column of mixed
    types (tensorboard #2942), nor show a column some runs lack (#5596): every run names every field.

    Args:
        config: nested run config (``RunConfig.to_dict()`` form: sections data / model / train).
            A field the config lacks (a run older than the field) takes its default.
        fields: dotted names to keep (e.g. the fields a sweep varies); None = every config field
            except :data:`BOOKKEEPING_FIELDS`.

    Returns:
        Name -> bool, float or str.
    """
    from ..config import RunConfig

    kinds = field_kinds()
    defaults = RunConfig().to_dict()
    names = list(fields) if fields is not None else [k for k in kinds if k not in BOOKKEEPING_FIELDS]
    out = {}
    for name in names:
        sec, _, key = name.partition(".")
        if name not in kinds:
            continue
        section = config.get(sec) or {}
        out[name] = _typed(section[key] if key in section else defaults[sec][key], kinds[name])
    return out


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
