"""What a run directory recorded, read once for its figures: :class:`RunData` and its series.

The run directory is read only through :class:`depthlab.rundir.RunDir`, so old run directories
(records without ``kind``) load the same way here as everywhere else. Every metrics value goes
through :func:`depthlab.units.finite_or` with NaN for a missing or non-finite number, so a figure
shows a gap there; the diagnosis, not the figure, reports the non-finite number.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Optional

from ..config import ran_optimizer, wiring_label
from ..errors import DepthlabError
from ..rundir import CHECKPOINTS, CONFIG, METRICS, RunDir, damaged_config_error, missing_run_error, not_a_run_error
from ..units import LN2, finite_or, finite_or_none

__all__ = ["RunData", "load_run_data", "as_run_data", "series", "matrix"]


def _dict_or_none(v: Any) -> Optional[dict]:
    return v if isinstance(v, dict) else None


def _by_step(recs: Iterable[dict]) -> list[dict]:
    """The records that have a ``step``, sorted by it."""
    return sorted((r for r in recs if "step" in r), key=lambda r: finite_or(r["step"], math.nan))


class RunData:
    """What a run directory recorded, split by record kind (read once, shared by all plots).

    Everything is read through :class:`depthlab.rundir.RunDir`, so old run directories (records
    without ``kind``) load the same way here as everywhere else.

    Attributes:
        run_dir: the run directory.
        dir: its :class:`~depthlab.rundir.RunDir` reader.
        evals: evaluation records (``step``, ``train_loss``, ``val_loss`` in nats, ``tokens_seen``).
        train: training-step records (``step``, ``loss`` in nats, ``lr``, ``grad_norm``).
        grads: gradient-monitor records (``kind == "grad"``).
        probes: activation-probe records (``kind == "probe"``).
        samples: training-time samples (``kind == "sample"``: ``step``, ``text``), from
            ``train.sample_interval``.
        config: the run's config (nested data/model/train dict) or ``None``.
        summary: the end-of-run summary or ``None``.
        baselines: the corpus baselines or ``None``; recomputed from the run's corpus when baselines.json is
            missing or damaged and the corpus is still the one the run trained on (``baselines_recomputed``).
        diagnosis: the diagnosis findings or ``None``.
        All record lists are sorted by ``step``.
    """

    def __init__(self, run_dir: str | Path):
        self.dir = RunDir(run_dir)
        self.run_dir = self.dir.path
        self.evals = _by_step(self.dir.evals)
        self.train = _by_step(r for r in self.dir.metrics("train") if "loss" in r)
        self.grads = _by_step(self.dir.metrics("grad"))
        self.probes = _by_step(self.dir.metrics("probe"))
        self.samples = _by_step(r for r in self.dir.metrics("sample") if isinstance(r.get("text"), str))
        self.config = _dict_or_none(self.dir.config)
        self.summary = _dict_or_none(self.dir.summary)
        self.baselines = _dict_or_none(self.dir.baselines)
        self.baselines_recomputed = False
        if self.baselines is None and self.config is not None:  # deleted or damaged: as diagnose does
            from ..analytics.baselines import run_baselines

            self.baselines = run_baselines(self.config)
            self.baselines_recomputed = self.baselines is not None
        self.diagnosis = _dict_or_none(self.dir.diagnosis)

    @property
    def unit(self) -> str:
        """What one token is: ``char`` for character runs, ``token`` for sub-word (BPE) runs."""
        return "token" if ((self.config or {}).get("data") or {}).get("tokenizer", "char") != "char" else "char"

    @property
    def unit_word(self) -> str:
        """:attr:`unit` in words: ``character`` or ``token`` (the diagnosis's own :func:`unit_of`)."""
        from ..analytics.rules.evidence import unit_of

        return unit_of(self.config)

    @property
    def optimizer(self) -> Optional[str]:
        """What trained the run: config.json ``resolved.optimizer`` (:func:`depthlab.config.ran_optimizer`)."""
        return ran_optimizer(self.config)

    def bits_per_char(self, nats: float) -> float:
        """Bits per character of a loss in nats per token: nats / ln 2 for characters; for BPE
        the run's own ratio ``val_bpc / val_loss`` (its characters per token), as the eval records hold."""
        if self.unit == "char":
            return nats / LN2
        pairs = [(finite_or_none(r.get("val_bpc")), finite_or_none(r.get("val_loss"))) for r in self.evals]
        ratios = [b / n for b, n in pairs if b is not None and n is not None and n > 0]
        return nats * ratios[-1] if ratios else math.nan

    def tokens_per_step(self) -> Optional[float]:
        """Tokens consumed per optimizer step (from eval records, else config), or ``None``."""
        for r in reversed(self.evals):
            s, t = finite_or(r.get("step"), math.nan), finite_or(r.get("tokens_seen"), math.nan)
            if s > 0 and t > 0:
                return t / s
        if self.config:
            m, t = self.config.get("model", {}), self.config.get("train", {})
            try:
                return float(t["batch_size"] * t.get("grad_accum", 1) * m["block_size"])
            except (KeyError, TypeError):
                return None
        return None

    def model_line(self) -> Optional[str]:
        """What the run trained, for the report's header: for a ``model.source`` run its source, parameter count
        (summary.json; else its weights file's count) and block_size/vocab (depthlab's GPT fields do not apply to
        it); else the GPT's variant, norm and sizes. None when the config does not say."""
        m = (self.config or {}).get("model", {})
        if not isinstance(m, dict):
            return None
        if m.get("source"):
            # summary.json counts the parameters (tied ones once); the weights file, all a running run has, also
            # holds the model's persistent buffers (a causal mask), so its count is said as what it is
            n = finite_or_none((self.summary or {}).get("params"))
            said = f"{int(n):,} parameters" if n is not None else None
            if said is None and (n := weights_parameters(self.run_dir)) is not None:
                said = f"{n:,} numbers in its weights file (parameters and buffers)"
            return ", ".join([f"model.source {m['source']}", *([said] if said else []),
                              *(f"{k} {m[k]}" for k in ("block_size", "vocab_size") if m.get(k) is not None)])
        # the wiring as the trainer says it: a ReZero run's header read "norm layernorm" of a model without a norm
        wiring = [wiring_label(m)] if "variant" in m else []
        return ", ".join(wiring + [f"{k} {m[k]}" for k in ("n_layer", "n_head", "n_embd", "block_size") if k in m]) \
            or None

    def title(self) -> str:
        """A short run label for figure titles: ``<dir name>: <n_layer> x <variant>`` (a model.source run:
        ``<dir name>: <its NAME>``)."""
        m = (self.config or {}).get("model", {})
        if isinstance(m, dict) and m.get("source"):
            return f"{self.run_dir.name}: {str(m['source']).rpartition(':')[2]}"
        if m.get("n_layer") is not None and m.get("variant"):
            return f"{self.run_dir.name}: {m['n_layer']} × {m['variant']}"
        return self.run_dir.name


def weights_parameters(run_dir: Path) -> Optional[int]:
    """The numbers in a run's best weights (else its latest step's), from the safetensors header alone; None
    without a readable weights file."""
    ck = Path(run_dir) / CHECKPOINTS
    files = [ck / "best.safetensors", *sorted(ck.glob("step-*.safetensors"), reverse=True)]
    for f in files:
        try:
            from safetensors import safe_open

            with safe_open(str(f), framework="pt") as st:
                return sum(math.prod(st.get_slice(k).get_shape()) for k in st.keys())
        except Exception:  # missing or damaged: the next one (safetensors raises its own error types)
            continue
    return None


def load_run_data(run_dir: str | Path) -> RunData:
    """Read a run directory for plotting.

    Args:
        run_dir: a directory written by ``depthlab train``.

    Returns:
        A :class:`RunData`.

    Raises:
        DepthlabError: the folder does not exist, holds neither a config nor a metrics file, holds a
            folder in the place of either, or its config.json is damaged.
    """
    rd = RunDir(run_dir)
    if not rd.path.exists():
        raise missing_run_error(rd.path)
    if rd.path.is_file():
        raise DepthlabError(f"{rd.path} is a file, not a run directory; give the out_dir of a depthlab train run")
    rd.refuse_non_files(CONFIG, METRICS)  # a folder in a file's place is not "no config" (its report would say so)
    rd.refuse_foreign()
    if not rd.path.is_dir() or not (rd.file(CONFIG).is_file() or rd.file(METRICS).is_file()):
        raise not_a_run_error(rd.path)
    if rd.damaged(CONFIG):  # a report would say the run has no config and judge it by the wrong rules
        raise damaged_config_error(rd.file(CONFIG))
    return RunData(rd.path)


def as_run_data(run: str | Path | RunData) -> RunData:
    """``run`` itself when it is a :class:`RunData`, else :func:`load_run_data` of it."""
    return run if isinstance(run, RunData) else load_run_data(run)


def series(recs: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(steps, values of ``key``) of the records holding ``key``; missing / non-finite values are NaN."""
    xs, ys = [], []
    for r in recs:
        if key in r:
            xs.append(finite_or(r["step"], math.nan))
            ys.append(finite_or(r[key], math.nan))
    return xs, ys


def matrix(recs: list[dict], key: str) -> tuple[list[float], list[list[float]]]:
    """Steps and per-block lists of ``key`` (records lacking it or holding null are dropped; NaN gaps)."""
    steps, rows = [], []
    for r in recs:
        v = r.get(key)
        if isinstance(v, list) and v:
            steps.append(finite_or(r["step"], math.nan))
            rows.append([finite_or(x, math.nan) for x in v])
    return steps, rows
