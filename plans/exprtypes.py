"""The SQL types of expressions and DuckDB's rules for them: :class:`SqlType` (a column
type with its scale and width), :class:`Code` (an expression's Python source, type and
nullability), and the result types of arithmetic, comparisons and CASE/COALESCE
branches as DuckDB binds them (:func:`numeric_type`, :func:`unify`, :func:`promote`).
:mod:`plans.expr` compiles expressions with them.

Example:
    >>> a, b = Code("x", SqlType("DECIMAL", 2, 15), False), Code("y", SqlType("INT", 0, 32), False)
    >>> numeric_type({}, None, "*", a, b)
    (SqlType(name='DECIMAL', scale=2, width=18), True)
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from core.errors import QueryError
from core.schema import DECIMAL_DIGITS, INT_NAMES, INT_RANGES, Column


@dataclass(frozen=True)
class SqlType:
    """A static SQL type: INT, DECIMAL (with its scale), FLOAT (DOUBLE), TEXT, BOOL,
    DATE, TIMESTAMP, INTERVAL, or NULL (the type of a bare NULL). ``width`` is an
    INT's bits (8 TINYINT ... 128 HUGEINT; 0: BIGINT) or a DECIMAL's precision (0: 38),
    as DuckDB types the result of each operation (its overflow checks follow them)."""

    name: str
    scale: int = 0
    width: int = 0

    @staticmethod
    def of_column(col: Column) -> SqlType:
        if col.type == "DECIMAL":
            return SqlType("DECIMAL", col.scale, col.precision)
        if col.type == "INT":
            # (UBIGINT computes as a HUGEINT)
            return SqlType("INT", 0, 128 if col.width < 0 else col.width or 64)
        return SqlType(col.type)

    @property
    def numeric(self) -> bool:
        return self.name in ("INT", "DECIMAL", "FLOAT", "NULL")

    @property
    def bits(self) -> int:
        """An INT's width in bits."""
        return self.width or 64

    @property
    def digits(self) -> int:
        """A DECIMAL's precision (an INT's: the digits DuckDB gives it as a DECIMAL)."""
        if self.name == "INT":
            return DECIMAL_DIGITS[self.bits]
        return self.width or 38

    @property
    def sql_name(self) -> str:
        """DuckDB's name of the type (``INTEGER``, ``DECIMAL(18,4)``, ``DOUBLE``)."""
        if self.name == "INT":
            return INT_NAMES[self.bits]
        if self.name == "DECIMAL":
            return f"DECIMAL({self.digits},{self.scale})"
        return {"FLOAT": "DOUBLE", "TEXT": "VARCHAR", "BOOL": "BOOLEAN"}.get(self.name,
                                                                               self.name)

    def column(self, name: str) -> Column:
        """A column of this type (derived relations, output)."""
        kind = {"NULL": "INT", "INTERVAL": "TEXT"}.get(self.name, self.name)
        width = self.bits if self.name == "INT" else self.digits \
            if self.name == "DECIMAL" else 0
        return Column(name, kind, self.scale, width)  # type: ignore[arg-type]


INT, FLOAT, TEXT, BOOL = SqlType("INT"), SqlType("FLOAT"), SqlType("TEXT"), SqlType("BOOL")
BIGINT = SqlType("INT", 0, 64)
DATE, TIMESTAMP, NULL = SqlType("DATE"), SqlType("TIMESTAMP"), SqlType("NULL")


@dataclass(frozen=True)
class Code:
    """Python source of an expression, its type, whether it can be NULL, and whether
    it is cheap to evaluate twice (a column read or a constant)."""

    src: str
    type: SqlType
    nullable: bool
    simple: bool = False
    const: bool = False
    literal: bool = False
    """An integer literal (``7``, ``-1``): DuckDB gives it the type of the other operand
    of an arithmetic or a CASE when its value fits that type. A string literal
    (``'12'``): DuckDB reads it as the type it is compared with or mixed with."""


@dataclass(frozen=True)
class Interval:
    months: int = 0
    days: int = 0
    micros: int = 0


class ExprError(QueryError):
    """An expression the compiler cannot translate (the node is attached)."""

    def __init__(self, node: exp.Expr, message: str) -> None:
        super().__init__(message)
        self.node = node


def promote(a: SqlType, b: SqlType) -> SqlType:
    names = {a.name, b.name} - {"NULL"}
    if "FLOAT" in names:
        return FLOAT
    if "DECIMAL" in names:
        return SqlType("DECIMAL", max(a.scale, b.scale))
    return INT


def decimal_of(code: Code) -> tuple[int, int]:
    """(precision, scale) of a DECIMAL or INT operand of DECIMAL arithmetic."""
    if code.type.name == "INT":
        return DECIMAL_DIGITS[code.type.bits], 0
    return code.type.digits, code.type.scale


def int_type(env: dict[str, Any], a: Code, b: Code) -> SqlType:
    """The INT type of an integer operation on ``a`` and ``b`` (DuckDB): the wider
    of the two; a literal takes the other side's type when its value fits it."""
    if a.type.name == "NULL":
        return b.type if b.type.name == "INT" else BIGINT
    if b.type.name == "NULL":
        return a.type
    if a.literal and not b.literal:
        a, b = b, a
    if b.literal and not a.literal:
        value = eval(b.src, env)  # noqa: S307
        lo, hi = INT_RANGES[a.type.bits]
        bits = a.type.bits if lo <= value <= hi else max(a.type.bits, b.type.bits)
        return SqlType("INT", 0, bits)
    return SqlType("INT", 0, max(a.type.bits, b.type.bits))


def numeric_type(env: dict[str, Any], node: exp.Expr, op: str, a: Code, b: Code
                  ) -> tuple[SqlType, bool]:
    """The result type of ``a op b`` (``op`` one of ``+ - * %``) as DuckDB binds it,
    and whether the result needs a range check (DuckDB's overflow check: every
    integer operation; a DECIMAL one whose precision was capped at 18 or 38)."""
    names = {a.type.name, b.type.name}
    if "FLOAT" in names:
        return FLOAT, False
    if names <= {"INT", "NULL"}:
        return int_type(env, a, b), op != "%" and "NULL" not in names
    if "NULL" in names:
        return (b.type if a.type.name == "NULL" else a.type), False
    (wa, sa), (wb, sb) = decimal_of(a), decimal_of(b)
    if op == "*":
        width, scale = wa + wb, sa + sb
        if scale > 38:
            raise ExprError(node, f"a DECIMAL product needs scale {scale} "
                                  f"(DuckDB's maximum is 38) in {node.sql()!r}; "
                                  "CAST an operand to DOUBLE or a smaller scale")
        check = False
        if width > 18 and wa <= 18 and wb <= 18 and scale < 18:
            width, check = 18, True
        if width > 38:
            width, check = 38, True
        return SqlType("DECIMAL", scale, width), check
    scale = max(sa, sb)
    need = max(scale + max(wa - sa, wb - sb), wa, wb)
    if op == "%":
        return SqlType("DECIMAL", scale, min(need, 38)), False
    need += 1
    check = False
    if need > 18 and max(wa, wb) <= 18:
        need, check = 18, True
    if need > 38:
        need, check = 38, True
    return SqlType("DECIMAL", scale, need), check


def unify(env: dict[str, Any], node: exp.Expr, codes: list[Code]) -> SqlType:
    """The type of CASE branches or COALESCE arguments (DuckDB's): numbers by the
    widest (a literal fitting another branch's type takes it; DECIMALs keep every
    branch's digits), DATE with TIMESTAMP a TIMESTAMP."""
    real = [c for c in codes if c.type.name != "NULL"]
    typed = [c for c in real if not (c.type.name == "TEXT" and c.literal)]
    if typed:  # (a string constant takes the other branches' type)
        real = typed
    if not real:
        return NULL
    names = {c.type.name for c in real}
    if "BOOL" in names and len(names) > 1 and names <= {"INT", "DECIMAL", "FLOAT",
                                                          "BOOL"}:
        # (a BOOLEAN among numbers is 1 or 0: DuckDB casts it to the numbers' type)
        real = [c if c.type.name != "BOOL" else Code("0", SqlType("INT", 0, 32), False)
                for c in real]
        names = {c.type.name for c in real}
    if names <= {"INT", "DECIMAL", "FLOAT"}:
        if "FLOAT" in names:
            return FLOAT
        if names == {"INT"}:
            ints = [c for c in real if not c.literal] or real
            bits = max(c.type.bits for c in ints)
            lo, hi = INT_RANGES[bits]
            for c in real:
                if c.literal and not lo <= eval(c.src, env) <= hi:  # noqa: S307
                    bits = max(bits, c.type.bits)
            return SqlType("INT", 0, bits)
        props = [decimal_of(c) for c in real]
        scale = max(sc for _w, sc in props)
        width = min(scale + max(w - sc for w, sc in props), 38)
        return SqlType("DECIMAL", scale, width)
    if names == {"DATE", "TIMESTAMP"}:
        return TIMESTAMP
    if len(names) > 1:
        found = ", ".join(sorted(SqlType(n).sql_name for n in names))
        raise ExprError(node, f"branches of different types ({found}): DuckDB cannot "
                              "mix them (write a CAST)")
    return real[0].type


_NAMES = itertools.count()


def fresh_name() -> str:
    """A name no other generated binding has (``_k<n>``), for a value the compiled
    expression reads from its namespace."""
    return f"_k{next(_NAMES)}"


def map_args(node: exp.Expr, fn: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
    """``node`` with each of its child expressions replaced by ``fn`` of it (in place;
    returned): one step of a rewrite that recurses where ``fn`` does."""
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expr):
            node.set(key, fn(value))
        elif isinstance(value, list):
            node.set(key, [fn(v) if isinstance(v, exp.Expr) else v for v in value])
    return node
