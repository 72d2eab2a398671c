"""Ring payloads: integer multiplicities (bag semantics, COUNT) and, for SUM/AVG/
COUNT(col), vectors ``(count, c1, ..., ck)`` multiplied as degree-1 polynomials:
``(a0, a) * (b0, b) = (a0*b0, a0*b + a*b0)``. Float sums use exact fractions so that
deletes cancel inserts exactly.

Example:
    >>> r = VectorRing(2)
    >>> r.mul((2, 0, 0), (3, 3, 12))
    (6, 6, 24)
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any


class IntRing:
    """Integers: multiplicities and COUNT(*)."""

    one: Any = 1
    zero: Any = 0
    add: Callable[[Any, Any], Any] = staticmethod(operator.add)
    sub: Callable[[Any, Any], Any] = staticmethod(operator.sub)
    mul: Callable[[Any, Any], Any] = staticmethod(operator.mul)

    @staticmethod
    def neg(a: Any) -> Any:
        return -a

    @staticmethod
    def is_zero(a: Any) -> bool:
        return bool(a == 0)

    @staticmethod
    def count(a: Any) -> int:
        return int(a)


class VectorRing:
    """(count, v1..vk) with the product of degree-1 polynomials."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.one: Any = (1,) + (0,) * k
        self.zero: Any = (0,) * (k + 1)

    @staticmethod
    def add(a: Any, b: Any) -> Any:
        return tuple(map(operator.add, a, b))

    @staticmethod
    def sub(a: Any, b: Any) -> Any:
        return tuple(map(operator.sub, a, b))

    @staticmethod
    def mul(a: Any, b: Any) -> Any:
        a0 = a[0]
        b0 = b[0]
        return (a0 * b0,) + tuple(a0 * y + x * b0 for x, y in zip(a[1:], b[1:]))

    @staticmethod
    def neg(a: Any) -> Any:
        return tuple(-x for x in a)

    @staticmethod
    def is_zero(a: Any) -> bool:
        return not any(a)

    @staticmethod
    def count(a: Any) -> int:
        return int(a[0])
