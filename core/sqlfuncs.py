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
import operator
import re
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from functools import partial
from typing import Any

from core.errors import EvaluationError
from core.schema import NAN, Column, ValueParseError

decimal.getcontext().prec = 76
decimal.DefaultContext.prec = 76  # (threads started later: Flink and Spark workers)


def add(a: Any, b: Any) -> Any:
    return None if a is None or b is None else a + b


def sub(a: Any, b: Any) -> Any:
    return None if a is None or b is None else a - b


def mul(a: Any, b: Any) -> Any:
    return None if a is None or b is None else a * b


def div(a: Any, b: Any) -> Any:
    """SQL ``/``: a DOUBLE, IEEE's quotient, as DuckDB 1.5: a division by zero is
    ``inf`` or ``-inf`` (by the signs of the dividend and of the zero: an integer or
    DECIMAL zero is ``+0.0``), ``NaN`` for ``0 / 0``.

    >>> div(1, 0), div(-1.5, 0), div(-1.5, -0.0), div(0, 0) is NAN, div(None, 0)
    (inf, -inf, inf, True, None)
    """
    if a is None or b is None:
        return None
    x, y = float(a), float(b)
    if y == 0.0:
        if x != x or x == 0.0:
            return NAN
        return _INF if (x > 0) == (math.copysign(1.0, y) > 0) else -_INF
    q = x / y
    return NAN if q != q else q


def div_or_null(a: Any, b: Any) -> Any:
    """SQL ``//`` of non-integers: a DOUBLE quotient (not rounded: DuckDB 1.5's ``//``
    of DECIMALs and DOUBLEs divides), NULL for a division by zero."""
    if a is None or b is None or not b:
        return None
    q = float(a) / float(b)
    return NAN if q != q else q


def intdiv(a: Any, b: Any) -> Any:
    """SQL ``//`` of integers: the quotient truncated toward zero, NULL for ``// 0``.

    >>> intdiv(7, 2), intdiv(-7, 2), intdiv(7, 0)
    (3, -3, None)
    """
    if a is None or b is None or not b:
        return None
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def mod(a: Any, b: Any) -> Any:
    """SQL ``%``: the sign of the dividend (truncated division); NULL for an integer or
    DECIMAL ``% 0``; of DOUBLEs ``fmod``, NaN for ``% 0`` and for an infinite dividend.

    >>> mod(-7, 2), mod(7, 0), mod(-5.0, 3.0), mod(1.5, 0.0) is NAN
    (-1, None, -2.0, True)
    """
    if a is None or b is None:
        return None
    if isinstance(a, float) or isinstance(b, float):
        try:
            r = math.fmod(a, b)
        except ValueError:  # (x % 0, inf % x)
            return NAN
        return NAN if r != r else r
    if not b:
        return None
    if isinstance(a, int) and isinstance(b, int):
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    return a % b  # (Decimal's % keeps the dividend's sign)


def imod(a: Any, b: Any, k: Any) -> Any:
    """SQL ``%`` of integers of range ``k`` (:func:`check`'s): the lowest value % -1
    overflows, as its quotient does (DuckDB)."""
    if b == -1 and a == k[0]:
        raise_overflow(a, k, f"{a} % {b}")
    return mod(a, b)


def neg(a: Any) -> Any:
    return None if a is None else -a


_INF = math.inf


def check(v: Any, k: Any) -> Any:
    """``v`` if it lies within ``k`` = (low, high, type name, expression text): the
    range check of an integer or DECIMAL result, else DuckDB's Out of Range Error.

    >>> check(5, (-128, 127, "TINYINT", "a + b"))
    5
    >>> try:
    ...     check(200, (-128, 127, "TINYINT", "a + b"))
    ... except EvaluationError as err:
    ...     print(err)
    cannot evaluate: expected `a + b` within TINYINT (-128 to 127), found 200 (out of range)
    """
    if v is None or k[0] <= v <= k[1]:
        return v
    raise_overflow(v, k)


def raise_overflow(v: Any, k: Any, what: str = "") -> Any:
    low, high, name, text = k
    if isinstance(low, Decimal):
        digits = len(str(int(high)))
        within = f"{name} (at most {digits} digit{'s' if digits != 1 else ''} before the " \
                 "point)"
    else:
        within = f"{name} ({low} to {high})"
    expected = f"`{text}` within {within}"
    raise EvaluationError(expected, f"{what or v} (out of range)")


def canon(x: Any) -> Any:
    """A DOUBLE result with its NaN made the one NaN object (rows holding it compare
    equal, as DuckDB's NaN = NaN)."""
    return NAN if x != x else x


def _nan_key(x: Any) -> Any:
    # DuckDB orders NaN above every other DOUBLE (and equal to itself)
    return (1, 0.0) if x != x else (0, x)


def float_compare(op: str) -> Callable[[Any, Any], Any]:
    """A three-valued comparison of DOUBLEs in DuckDB's order: NaN equals NaN and is
    greater than every other value (``inf`` too).

    >>> lt, eq = float_compare("<"), float_compare("==")
    >>> lt(1.0, NAN), lt(NAN, _INF), eq(NAN, NAN), eq(NAN, None)
    (True, False, True, None)
    """
    return partial(_float_compare3, _COMPARE[op])


def _float_compare3(fn: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    if a != a or b != b:
        return fn(_nan_key(a), _nan_key(b))
    return fn(a, b)


def cast_error(v: Any, target: str, text: str) -> EvaluationError:
    return EvaluationError(f"`{text}` to convert to {target}", repr(v))


def caster(column: Column, text: str) -> Callable[[Any], Any]:
    """CAST to ``column``'s type as DuckDB does it at run time, for the value types a
    compiled expression can hold: a DOUBLE to an integer rounds half to even, a DECIMAL
    half away from zero; a DOUBLE to a DECIMAL scales in DOUBLE arithmetic then rounds
    half away from zero; a string is read as the update CSV reads it; a BOOLEAN is 1 or
    0; a value out of the target's range, a NaN or an infinity is a Conversion Error
    (an :class:`EvaluationError` naming ``text``). A ``functools.partial`` of a module
    function, not a closure: a compiled plan's namespace pickles (the distributed
    runners ship the plan to their workers).

    >>> to_int = caster(Column("c", "INT", width=32), "CAST(x AS INTEGER)")
    >>> to_int(2.5), to_int(3.5), to_int(Decimal("2.5")), to_int(" 12 "), to_int(True)
    (2, 4, 3, 12, 1)
    >>> caster(Column("c", "DECIMAL", 2, 5), "CAST(x AS DECIMAL(5,2))")(1.115)
    Decimal('1.12')
    """
    kind = column.type
    if kind == "INT":
        lo, hi = column.int_range
        return partial(_cast_int, column, text, lo, hi)
    if kind == "DECIMAL":
        quantum = Decimal(1).scaleb(-column.scale)
        bound = Decimal(10) ** (column.precision - column.scale)
        return partial(_cast_decimal, column, text, quantum, bound)
    return partial({"FLOAT": _cast_float, "BOOL": _cast_bool}.get(kind, _cast_other),
                   column, text)


def _cast_fail(column: Column, text: str, v: Any) -> Any:
    raise cast_error(v, column.sql_type, text)


def _cast_parse(column: Column, v: str) -> Any:
    if not v:  # (the empty string is no value of another type; not NULL here)
        raise ValueParseError(v)
    return column.parse(v)


def _cast_int(column: Column, text: str, lo: int, hi: int, v: Any) -> Any:
    if v is None:
        return None
    try:
        if isinstance(v, float):
            n = round(v)  # (half to even; NaN and inf raise)
        elif isinstance(v, Decimal):
            n = int(v.quantize(Decimal(1), rounding=ROUND_HALF_UP))
        elif isinstance(v, str):
            n = _cast_parse(column, v)
        else:
            n = int(v)
    except (ValueError, OverflowError, ValueParseError):
        return _cast_fail(column, text, v)
    return n if lo <= n <= hi else _cast_fail(column, text, v)


def _cast_decimal(column: Column, text: str, quantum: Decimal, bound: Decimal, v: Any
                  ) -> Any:
    if v is None:
        return None
    try:
        if isinstance(v, float):
            if v != v or v in (_INF, -_INF):
                return _cast_fail(column, text, v)
            scaled = v * 10.0 ** column.scale
            n = math.floor(abs(scaled) + 0.5)
            d = Decimal(n if scaled >= 0 else -n).scaleb(-column.scale)
        elif isinstance(v, str):
            d = _cast_parse(column, v)
        else:
            d = Decimal(int(v) if isinstance(v, bool) else v).quantize(
                quantum, rounding=ROUND_HALF_UP)
    except (ValueError, OverflowError, ValueParseError, decimal.InvalidOperation):
        return _cast_fail(column, text, v)
    return d if -bound < d < bound else _cast_fail(column, text, v)


def _cast_text(column: Column, text: str, v: str) -> Any:
    try:
        return _cast_parse(column, v)
    except ValueParseError:
        return _cast_fail(column, text, v)


def _cast_float(column: Column, text: str, v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, str):
        return _cast_text(column, text, v)
    return float(v)


def _cast_bool(column: Column, text: str, v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, str):
        return _cast_text(column, text, v)
    if isinstance(v, (int, float, Decimal)):
        return bool(v)
    return _cast_fail(column, text, v)


def _cast_other(column: Column, text: str, v: Any) -> Any:
    if v is None:
        return None
    try:
        return column.coerce(v)
    except ValueParseError:
        return _cast_fail(column, text, v)


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
    return partial(_compare3, _COMPARE[op])


def _compare3(fn: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    return None if a is None or b is None else fn(a, b)


def or_null(fn: Callable[[Any], Any], v: Any) -> Any:
    """``fn(v)``, NULL for NULL (bound with ``functools.partial``: it pickles)."""
    return None if v is None else fn(v)


def attr_or_null(attr: str, v: Any) -> Any:
    """``v.attr``, NULL for NULL (EXTRACT of a nullable operand)."""
    return None if v is None else getattr(v, attr)


def date_of(v: Any) -> Any:
    """A TIMESTAMP's DATE (CAST), NULL for NULL."""
    return None if v is None else v.date()


def days_between(x: Any, y: Any) -> Any:
    """``x - y`` of two DATEs or TIMESTAMPs in whole days, NULL if either is."""
    return None if x is None or y is None else (x - y).days


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
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
    test: Callable[[str], bool]
    if "_" not in body and "%" not in inner:
        starts, ends = body.startswith("%"), body.endswith("%")
        how = _like_contains if starts and ends else _like_starts if ends else \
            _like_ends if starts else _like_equals
        test = partial(how, inner)
    else:
        regex = "".join(
            ".*" if c == "%" else "." if c == "_" else re.escape(c) for c in body
        )
        test = partial(_like_matches, re.compile(regex, re.DOTALL).fullmatch)
    if ignore_case:
        return partial(_like_lowered, test)
    return test


# (a LIKE test is a functools.partial of one of these: a compiled plan pickles)
def _like_contains(inner: str, s: str) -> bool:
    return inner in s


def _like_starts(inner: str, s: str) -> bool:
    return s.startswith(inner)


def _like_ends(inner: str, s: str) -> bool:
    return s.endswith(inner)


def _like_equals(inner: str, s: str) -> bool:
    return s == inner


def _like_matches(match: Callable[[str], Any], s: str) -> bool:
    return match(s) is not None


def _like_lowered(test: Callable[[str], bool], s: str) -> bool:
    return test(s.lower())


def round_half_away(x: Any, digits: int = 0) -> Any:
    """DuckDB's ROUND: half away from zero. A DOUBLE is scaled by ``10^digits`` in
    DOUBLE arithmetic, rounded, scaled back (C's ``round(x * p) / p``: ``ROUND(1.005,
    2)`` of a DOUBLE is 1.0, as 1.005 is stored a little below); NaN and infinities stay
    (with negative digits they are 0.0, as DuckDB's).

    >>> round_half_away(2.5), round_half_away(-0.4), round_half_away(1.005, 2)
    (3.0, -0.0, 1.0)
    >>> round_half_away(15, -1), round_half_away(Decimal("1.25"), 1)
    (20, Decimal('1.3'))
    """
    if x is None:
        return None
    if isinstance(x, Decimal):
        return x.quantize(Decimal(1).scaleb(-digits), rounding=decimal.ROUND_HALF_UP)
    if isinstance(x, int):
        if digits >= 0:
            return x
        p = 10 ** -digits
        q = (abs(x) + p // 2) // p * p
        return q if x >= 0 else -q
    if digits < 0:  # (DuckDB: by 10^-digits, and 0 where that is not finite)
        m = 10.0 ** -digits
        scaled = x / m
        r = math.copysign(math.floor(abs(scaled) + 0.5), scaled) * m \
            if scaled == scaled and scaled not in (_INF, -_INF) else scaled
        return 0.0 if r != r or r in (_INF, -_INF) else r
    p = 10.0 ** digits
    scaled = x * p
    if scaled != scaled or scaled in (_INF, -_INF):
        return x
    r = math.copysign(math.floor(abs(scaled) + 0.5), scaled) / p
    return x if r != r or r in (_INF, -_INF) else r


def add_days(d: Any, n: Any, text: str) -> Any:
    """DATE + integer: a DATE; past Python's years 1 to 9999 an
    :class:`EvaluationError` naming ``text`` (DuckDB's DATE goes further)."""
    if d is None or n is None:
        return None
    try:
        return d + datetime.timedelta(days=n)
    except OverflowError:
        expected = f"`{text}` within DATE (years 1 to 9999 in ivmflow)"
        raise EvaluationError(expected, f"{d} + {n} days") from None


def add_interval(d: Any, months: int, days: int, micros: int) -> Any:
    """DATE or TIMESTAMP + INTERVAL: a TIMESTAMP; months clamp the day (Jan 31 + 1 month
    is Feb 28/29)."""
    if d is None:
        return None
    ts = d if isinstance(d, datetime.datetime) else datetime.datetime(d.year, d.month, d.day)
    try:
        if months:
            total = ts.year * 12 + ts.month - 1 + months
            year, month = divmod(total, 12)
            month += 1
            day = min(ts.day, calendar.monthrange(year, month)[1])
            ts = ts.replace(year=year, month=month, day=day)
        return ts + datetime.timedelta(days=days, microseconds=micros)
    except (OverflowError, ValueError):
        expected = "a TIMESTAMP within years 1 to 9999 (ivmflow's range)"
        raise EvaluationError(expected,
                              f"{d} + INTERVAL {months} months {days} days") from None


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
        "div_or_null": div_or_null, "intdiv": intdiv, "imod": imod, "check": check,
        "canon": canon, "add_days": add_days,
        "to_float": to_float, "and3": and3, "or3": or3, "not3": not3, "in_list": in_list,
        "coalesce": coalesce, "nullif": nullif, "substring": substring,
        "round": round_half_away, "add_interval": add_interval,
        "to_timestamp": to_timestamp, "upper": upper, "lower": lower, "length": length,
        "trim": trim, "concat": concat, "abs": sql_abs, "quantize": quantize,
    }.items()
}
"""What generated expression code may call, by the names it uses."""
