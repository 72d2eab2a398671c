"""Percentiles and log-log slopes, as the bench scripts report them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal

Rank = Literal["floor", "nearest", "round"]


def percentile(values: Sequence[float], q: float, rule: Rank = "floor",
               empty: float = math.nan) -> float:
    """The ``q``-quantile (0 <= q <= 1) of ``values``, one of them: ``floor`` takes index
    ``int(q * n)``, ``nearest`` the nearest rank ``ceil(q * n) - 1``, ``round`` index
    ``round(q * (n - 1))``; ``empty`` when there are none."""
    s = sorted(values)
    n = len(s)
    if not n:
        return empty
    if rule == "floor":
        i = int(q * n)
    elif rule == "nearest":
        i = math.ceil(q * n) - 1
    else:
        i = int(round(q * (n - 1)))
    return float(s[min(n - 1, max(0, i))])


def loglog_slope(points: Iterable[tuple[float, float]]) -> float:
    """Least-squares slope of log y against log x over the points with x, y > 0; NaN with
    fewer than two such points or a single x."""
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(pts) < 2:
        return math.nan
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else math.nan


def finite_or_none(x: float) -> float | None:
    """``x``, or None where it is NaN or infinite (JSON has no NaN)."""
    return x if math.isfinite(x) else None
