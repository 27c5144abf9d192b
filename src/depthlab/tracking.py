"""Where numbers go: ``metrics.jsonl`` (always), TensorBoard (optional), the console.

Only the main process (rank 0) writes; other ranks get a tracker whose methods do nothing.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Optional


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # JSON has no NaN/inf; keep them readable instead of invalid
    return v


class Tracker:
    """Appends metric records to ``run_dir/metrics.jsonl`` and mirrors scalars to TensorBoard.

    Args:
        run_dir: the run directory.
        tensorboard: also write TensorBoard event files (``torch.utils.tensorboard``).
        enabled: False on non-zero ranks: every method becomes a no-op.
    """

    def __init__(self, run_dir: Path, tensorboard: bool = True, enabled: bool = True):
        self.enabled = enabled
        self.run_dir = Path(run_dir)
        self._f = open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8") if enabled else None
        self.tb = None
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(log_dir=str(self.run_dir / "tb"))
            except ImportError:  # tensorboard not installed: metrics.jsonl is the record
                self.tb = None

    def log(self, record: dict[str, Any], tb_scalars: Optional[dict[str, float]] = None) -> None:
        """Write one JSON line (must hold ``step``) and optional TensorBoard scalars at that step."""
        if not self.enabled:
            return
        self._f.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
        self._f.flush()
        if self.tb is not None and tb_scalars:
            for k, v in tb_scalars.items():
                if v is not None and math.isfinite(v):
                    self.tb.add_scalar(k, v, record["step"])

    def histogram(self, tag: str, values, step: int) -> None:
        """TensorBoard histogram of a tensor/array at ``step`` (no-op without TensorBoard)."""
        if self.enabled and self.tb is not None:
            self.tb.add_histogram(tag, values, step)

    def close(self) -> None:
        """Flush and close the files."""
        if self._f is not None:
            self._f.close()
            self._f = None
        if self.tb is not None:
            self.tb.close()
            self.tb = None


def finite_or_none(v: Any) -> Optional[float]:
    """A metrics value as a finite float, or None (missing, non-numeric, NaN/inf or their strings)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def read_metrics(run_dir: Path) -> list[dict]:
    """All parseable records of ``run_dir/metrics.jsonl`` (a torn last line is skipped)."""
    out = []
    p = Path(run_dir) / "metrics.jsonl"
    if not p.exists():
        return out
    for line in p.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def truncate_metrics(run_dir: Path, step: int) -> None:
    """Keep only records with ``step <= step`` (resume continues after a checkpoint at ``step``)."""
    p = Path(run_dir) / "metrics.jsonl"
    keep = [r for r in read_metrics(run_dir) if int(r.get("step", 0)) <= step]
    from .checkpoint import atomic_write

    atomic_write(p, "".join(json.dumps(r) + "\n" for r in keep).encode())


def console(msg: str) -> None:
    """Print one log line to stdout, safely around a tqdm progress bar.

    If stdout is a pipe whose reader has gone (``depthlab train | head``), the rest of the log
    is discarded instead of killing the run: training and its files matter more than the log.
    """
    try:
        try:
            from tqdm import tqdm

            tqdm.write(msg, file=sys.stdout)
        except ImportError:
            print(msg)
        sys.stdout.flush()
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
