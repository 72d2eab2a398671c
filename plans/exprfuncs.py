"""SQL functions and predicates an :class:`plans.expr.ExprCompiler` compiles by
calling out here: ``IN (...)`` lists, ``LIKE`` patterns, ``EXTRACT`` of a date or
timestamp part, ``concat()`` and ``sqrt()``, as DuckDB evaluates them (three-valued:
NULL in, NULL out; ``concat`` reads a NULL as the empty string).

Example:
    >>> import sqlglot
    >>> from plans.expr import ExprCompiler
    >>> env = {}
    >>> code = ExprCompiler(env, lambda node: None).compile(
    ...     sqlglot.parse_one("EXTRACT(YEAR FROM DATE '1995-03-15') IN (1994, 1995)"))
    >>> eval(code.src, env)
    True
"""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING

from sqlglot import exp

from core.errors import EvaluationError
from core.sqlfuncs import attr_or_null, like_test, or_null
from plans.exprtypes import (
    BOOL,
    FLOAT,
    INT,
    TEXT,
    Code,
    ExprError,
    fresh_name,  # (the types, re-exported: this module's API)
    )

if TYPE_CHECKING:
    from plans.expr import ExprCompiler


def in_list(comp: ExprCompiler, node: exp.In) -> Code:
    if node.args.get("query") is not None or node.args.get("unnest") is not None:
        raise ExprError(node, "IN (subquery)")
    a0 = comp.compile(node.this)
    items = [comp.compile(e) for e in node.expressions]
    aligned = [comp._align(e, a0, item, "==") for item, e in zip(items, node.expressions)]
    if all(c.const for _, c in aligned) and len({x.src for x, _ in aligned}) == 1 and \
            "FLOAT" not in {c.type.name for c in (a0, *items)}:
        a = aligned[0][0]
        values = []
        has_null = False
        for _, c in aligned:
            v = eval(c.src, comp.env)  # noqa: S307
            if v is None:
                has_null = True
            else:
                values.append(v)
        name = fresh_name()
        comp.env[name] = frozenset(values)
        if not has_null:
            if not a.nullable:
                return Code(f"({a.src} in {name})", BOOL, False)
            if a.simple:
                return Code(f"(None if {a.src} is None else {a.src} in {name})", BOOL,
                            True)
        return Code(f"_f_in_list({a.src}, {name}, {has_null!r})", BOOL, True)
    out: Code | None = None
    for e in node.expressions:
        c = comp._compare(node, "==", node.this, e)
        out = c if out is None else (
            Code(f"_f_or3({out.src}, {c.src})", BOOL, True)
            if out.nullable or c.nullable else Code(f"({out.src} or {c.src})", BOOL, False))
    assert out is not None
    return out


def like(comp: ExprCompiler, node: exp.Expr) -> Code:
    if node.args.get("escape") is not None:
        raise ExprError(node, "LIKE ... ESCAPE")
    pattern = node.expression
    if isinstance(pattern, exp.Null):
        comp._text(comp.compile(node.this), node)
        return comp.const(None, BOOL)
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise ExprError(node, "LIKE with a pattern that is not a string constant")
    a = comp._text(comp.compile(node.this), node)
    name = fresh_name()
    comp.env[name] = like_test(str(pattern.this), isinstance(node, exp.ILike))
    code = comp._wrap1(a, name + "({})", BOOL, "_f_like_" + name)
    if code.src.startswith("_f_like_"):
        comp.env["_f_like_" + name] = partial(or_null, comp.env[name])
    if node.args.get("negate"):
        code = comp._wrap1(code, "not {}", BOOL, "_f_not3")
    return code


def extract(comp: ExprCompiler, node: exp.Extract) -> Code:
    part = node.this.name.upper()
    a = comp.compile(node.expression)
    if a.type.name not in ("DATE", "TIMESTAMP"):
        raise ExprError(node, f"EXTRACT from {a.type.name}")
    attrs = {"YEAR": "year", "MONTH": "month", "DAY": "day"}
    if a.type.name == "TIMESTAMP":
        attrs.update(HOUR="hour", MINUTE="minute", SECOND="second")
    if part not in attrs:
        raise ExprError(node, f"EXTRACT({part} FROM ...)")
    return comp._wrap1(a, "{}." + attrs[part], INT, "_f_extract_" + attrs[part]) \
        if a.simple or not a.nullable else extract_helper(comp, a, attrs[part])


def extract_helper(comp: ExprCompiler, a: Code, attr: str) -> Code:
    name = fresh_name()
    comp.env[name] = partial(attr_or_null, attr)
    return Code(f"{name}({a.src})", INT, True)


def concat(comp: ExprCompiler, node: exp.Concat) -> Code:
    """DuckDB's ``concat(a, ...)``: the arguments as text (as ``CAST(x AS VARCHAR)``),
    a NULL read as the empty string; never NULL."""
    parts = [comp._as_text(comp.compile(a)) for a in node.expressions]
    fn = comp._bind(concat_texts)
    return Code(f"{fn}({', '.join(p.src for p in parts)})", TEXT, False)


def concat_texts(*parts: str | None) -> str:
    return "".join(p for p in parts if p is not None)


def sqrt(comp: ExprCompiler, node: exp.Sqrt) -> Code:
    """``sqrt(x)`` as a DOUBLE; of a negative number an error, as in DuckDB."""
    a = comp.compile(node.this)
    comp._need_numeric(node, a)
    fn = comp._bind(checked_sqrt)
    return comp._wrap1(comp._as(a, FLOAT), fn + "({})", FLOAT,
                       comp._bind(partial(or_null, checked_sqrt)))


def checked_sqrt(x: float) -> float:
    if x < 0:
        msg = "a number >= 0 for sqrt()"
        raise EvaluationError(msg, repr(x))
    return math.sqrt(x)
