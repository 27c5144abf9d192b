"""Small concepts every layer shares: the nats → bits constant, reading a number, writing a value.

The lowest layer of the package (imports nothing of depthlab), so a run's records, its reports,
its sweeps and the probe read numbers one way (:func:`number_or_none`, :func:`finite_or_none`,
:func:`finite_or`) and write them one way (:func:`fmt_value`).
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional, TypeVar

__all__ = ["LN2", "number_or_none", "finite_or_none", "finite_values", "finite_or", "fmt_value", "counted", "agree",
           "plus_minus"]

#: ln 2: nats per bit. A loss in nats/token divided by LN2 is bits/token (Shannon 1948).
LN2 = math.log(2.0)

_D = TypeVar("_D")


def number_or_none(v: Any) -> Optional[float]:
    """A metrics value as a float, or None when it is not a number (missing, non-numeric).

    NaN and ±inf (also their strings ``"nan"``, ``"inf"``, as the records write them) are kept:
    for the one reader that must tell "diverged" from "missing" (a sweep's results table).
    Everyone else wants :func:`finite_or_none`.
    """
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def finite_or_none(v: Any) -> Optional[float]:
    """A metrics value as a finite float, or None (missing, non-numeric, NaN/inf or their strings)."""
    f = number_or_none(v)
    return f if f is not None and math.isfinite(f) else None


def finite_values(vs: Any) -> list[float]:
    """The finite floats of a record's list (``rank_measure``, ``token_cosine``, ...), in order; ``[]`` for None."""
    return [f for f in (finite_or_none(v) for v in (vs or [])) if f is not None]


def finite_or(v: Any, default: _D) -> float | _D:
    """:func:`finite_or_none`, with ``default`` in place of None.

    A plot passes ``math.nan`` (a gap in the line), Ray Tune's schedulers ``math.inf`` (ranked last).
    """
    f = finite_or_none(v)
    return default if f is None else f


def counted(n: int, noun: str) -> str:
    """``"1 step"``, ``"2 steps"``, ``"0 steps"``: a count with its noun (plural by an added s)."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def agree(n: int, one: str, many: str) -> str:
    """``one`` when ``n`` is 1, else ``many``: the words after :func:`counted` that agree with its count
    (``agree(n, "is", "are")``)."""
    return one if n == 1 else many


def plus_minus(se: Optional[float], decimals: int = 3) -> str:
    """`` ± 0.012``: a standard error as printed after a value, or "" for None.

    An error that rounds to zero at ``decimals`` places gets more of them (up to 6), so a small error bar reads as
    small, not as none (``± 0.000`` would say the measurement had no sampling error, which is only true of an
    exact 0).
    """
    if se is None:
        return ""
    while 0 < abs(se) < 0.5 * 10.0 ** -decimals and decimals < 6:
        decimals += 1
    return f" ± {se:.{decimals}f}"


def fmt_value(v: Any, spec: Optional[str] = None, *, missing: str = "—") -> str:
    """A value as text: the one formatter of report tables, sweep claims, probe tables and run names.

    Args:
        v: a number, None, or anything else (bool, str, list, dict).
        spec: how floats are written, as a format spec: ``".3f"`` (fixed decimals: sweep claims),
            ``".3e"`` (scientific: the probe table), ``"g"`` (shortest: sweep run names and grid
            values). Only floats use it; every other value is ``str(v)``, so an int or a bool is
            written exactly as Python writes it (``16``, ``1000000``, ``True``).
            None (the default) is the report-table style: floats to 4 significant digits below 100
            (``2.4823``, ``0.9031``), one decimal below 1000 (``198.3``), none from 1000 on with
            thousands separators (``3,099``: a throughput of thousands of tokens/s has no useful
            decimals), scientific notation below 1e-3 and from 1e12 on (``4.500e-05``); ints with
            thousands separators from 10,000 on (``1234``, ``123,456``); bools as JSON
            (``true``); lists and dicts as JSON.
        missing: the text for None (``"—"``; the probe table writes ``"n/a"``).

    Returns:
        The text. NaN and ±inf floats are ``nan``, ``inf``, ``-inf`` in every style.
    """
    if v is None:
        return missing
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if spec is not None:
        return format(v, spec) if isinstance(v, float) else str(v)
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        a = abs(v)
        if v != 0 and (a < 1e-3 or a >= 1e12):
            return f"{v:.3e}"
        if a < 1:
            return f"{v:.4g}"
        if a < 100:
            return f"{v:.4f}".rstrip("0").rstrip(".")
        if a < 1000:
            return f"{v:.1f}".rstrip("0").rstrip(".")
        return f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)
