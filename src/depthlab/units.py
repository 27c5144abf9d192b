"""Small numeric concepts every layer shares: the nats → bits constant and the finite-number reader.

The lowest layer of the package (imports nothing of depthlab), so a run's records, its reports and
its sweeps read numbers one way.
"""

from __future__ import annotations

import math
from typing import Any, Optional

__all__ = ["LN2", "finite_or_none"]

#: ln 2: nats per bit. A loss in nats/token divided by LN2 is bits/token (Shannon 1948).
LN2 = math.log(2.0)


def finite_or_none(v: Any) -> Optional[float]:
    """A metrics value as a finite float, or None (missing, non-numeric, NaN/inf or their strings)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
