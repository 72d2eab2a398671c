"""Run-time helpers of compiled SQL row expressions (:mod:`plans.expr` generates code
that calls them where an inline Python expression would be wrong or evaluate an
operand twice). Each follows DuckDB's semantics, NULL in -> NULL out.

Decimal arithmetic runs in a context of 76 significant digits (DuckDB's widest
DECIMAL has 38; a product of two has 76): sums under inserts and deletes stay exact.

Example:
    >>> from decimal import Decimal
    >>> mul(Decimal("901.00"), sub(1, Decimal("0.05")))
    Decimal('855.9500')
    >>> substring("abcdef", 0, 3), substring("abcdef", -2, 2), like_test("PROMO%")("PROMOX")
    ('ab', 'ef', True)
"""

from __future__ import annotations

import calendar
import datetime
import decimal
import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

decimal.getcontext().prec = 76
decimal.DefaultContext.prec = 76  # (threads started later: Flink and Spark workers)


def add(a: Any, b: Any) -> Any:
    return None if a is None or b is None else a + b


def sub(a: Any, b: Any) -> Any:
    return None if a is None or b is None else a - b


def mul(a: Any, b: Any) -> Any:
    return None if a is None or b is None else a * b


def div(a: Any, b: Any) -> Any:
    """SQL ``/``: a DOUBLE; a division by zero is NULL (DuckDB 1.x)."""
    if a is None or b is None or not b:
        return None
    return float(a) / float(b)


def mod(a: Any, b: Any) -> Any:
    """SQL ``%``: the sign of the dividend (truncated division), NULL for ``% 0``."""
    if a is None or b is None or not b:
        return None
    if isinstance(a, float) or isinstance(b, float):
        return math.fmod(a, b)
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def neg(a: Any) -> Any:
    return None if a is None else -a


def to_float(a: Any) -> Any:
    return None if a is None else float(a)


def and3(a: Any, b: Any) -> Any:
    """Three-valued AND."""
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def or3(a: Any, b: Any) -> Any:
    """Three-valued OR."""
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def not3(a: Any) -> Any:
    return None if a is None else not a


def compare(op: str) -> Callable[[Any, Any], Any]:
    """A three-valued comparison ``a op b`` (NULL if either side is)."""
    fn = _COMPARE[op]

    def test(a: Any, b: Any) -> Any:
        return None if a is None or b is None else fn(a, b)

    return test


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


def in_list(a: Any, values: frozenset[Any], has_null: bool) -> Any:
    """``a IN (...)`` with SQL's NULL rules: NULL when no match and the list has NULL."""
    if a is None:
        return None
    if a in values:
        return True
    return None if has_null else False


def coalesce(*values: Any) -> Any:
    for v in values:
        if v is not None:
            return v
    return None


def nullif(a: Any, b: Any) -> Any:
    return None if a is None or (b is not None and a == b) else a


def substring(s: Any, start: Any, length: Any = None) -> Any:
    """DuckDB's SUBSTRING: 1-based; 0 and negative starts count as DuckDB does."""
    if s is None or start is None:
        return None
    if start > 0:
        begin = start - 1
    elif start == 0:
        begin = -1
    else:
        begin = len(s) + start
    if length is None:
        return s[max(begin, 0):]
    end = begin + length
    return s[max(begin, 0):max(end, 0)]


def like_test(pattern: str, ignore_case: bool = False) -> Callable[[str], bool]:
    """A test for ``s LIKE pattern`` (``%`` any run, ``_`` one character; no escape)."""
    body = pattern.lower() if ignore_case else pattern
    inner = body.strip("%")
    if "_" not in body and "%" not in inner:
        starts, ends = body.startswith("%"), body.endswith("%")
        if starts and ends:
            test: Callable[[str], bool] = lambda s: inner in s  # noqa: E731
        elif ends:
            test = lambda s: s.startswith(inner)  # noqa: E731
        elif starts:
            test = lambda s: s.endswith(inner)  # noqa: E731
        else:
            test = lambda s: s == inner  # noqa: E731
    else:
        regex = "".join(
            ".*" if c == "%" else "." if c == "_" else re.escape(c) for c in body
        )
        match = re.compile(regex, re.DOTALL).fullmatch
        test = lambda s: match(s) is not None  # noqa: E731
    if ignore_case:
        return lambda s: test(s.lower())
    return test


def round_half_away(x: Any, digits: int = 0) -> Any:
    """DuckDB's ROUND: half away from zero (floats and decimals)."""
    if x is None:
        return None
    if isinstance(x, Decimal):
        return x.quantize(Decimal(1).scaleb(-digits), rounding=decimal.ROUND_HALF_UP)
    if isinstance(x, int):
        return x
    q = Decimal(repr(x)).quantize(Decimal(1).scaleb(-digits), rounding=decimal.ROUND_HALF_UP)
    return float(q)


def add_interval(d: Any, months: int, days: int, micros: int) -> Any:
    """DATE or TIMESTAMP + INTERVAL: a TIMESTAMP; months clamp the day (Jan 31 + 1 month
    is Feb 28/29)."""
    if d is None:
        return None
    ts = d if isinstance(d, datetime.datetime) else datetime.datetime(d.year, d.month, d.day)
    if months:
        total = ts.year * 12 + ts.month - 1 + months
        year, month = divmod(total, 12)
        month += 1
        day = min(ts.day, calendar.monthrange(year, month)[1])
        ts = ts.replace(year=year, month=month, day=day)
    return ts + datetime.timedelta(days=days, microseconds=micros)


def to_timestamp(d: Any) -> Any:
    if d is None or isinstance(d, datetime.datetime):
        return d
    return datetime.datetime(d.year, d.month, d.day)


def upper(s: Any) -> Any:
    return None if s is None else s.upper()


def lower(s: Any) -> Any:
    return None if s is None else s.lower()


def length(s: Any) -> Any:
    return None if s is None else len(s)


def trim(s: Any) -> Any:
    return None if s is None else s.strip(" ")


def concat(a: Any, b: Any) -> Any:
    return None if a is None or b is None else a + b


def sql_abs(a: Any) -> Any:
    return None if a is None else abs(a)


def quantize(a: Any, quantum: Decimal) -> Any:
    """A DECIMAL value at its static scale (how DuckDB prints it)."""
    return None if a is None else Decimal(a).quantize(quantum)


HELPERS: dict[str, Any] = {
    f"_f_{name}": fn for name, fn in {
        "add": add, "sub": sub, "mul": mul, "div": div, "mod": mod, "neg": neg,
        "to_float": to_float, "and3": and3, "or3": or3, "not3": not3, "in_list": in_list,
        "coalesce": coalesce, "nullif": nullif, "substring": substring,
        "round": round_half_away, "add_interval": add_interval,
        "to_timestamp": to_timestamp, "upper": upper, "lower": lower, "length": length,
        "trim": trim, "concat": concat, "abs": sql_abs, "quantize": quantize,
    }.items()
}
"""What generated expression code may call, by the names it uses."""
