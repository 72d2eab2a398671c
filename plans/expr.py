"""SQL row expressions -> Python source (typed, three-valued), for the generated code
paths: per-relation maps and filters, and the maps and HAVING after an aggregate.

The compiler is given a *resolver* that turns a leaf (a column, or at the aggregate
stage a whole aggregate or GROUP BY expression) into the source that reads it
(``row[3]``, ``key[0]``, ``v[1]``) with its type. Subtrees without columns are
evaluated once at compile time (``DATE '1998-12-01' - INTERVAL '90' DAY``). A NULL
operand makes an operator NULL; conditions keep a row only when TRUE.

Example:
    >>> import sqlglot
    >>> from core.schema import Column
    >>> col = {"p": (Column("p", "DECIMAL", 2), 0), "d": (Column("d", "DECIMAL", 2), 1)}
    >>> def resolve(node):
    ...     if isinstance(node, exp.Column):
    ...         c, i = col[node.name]
    ...         return Code(f"row[{i}]", SqlType.of_column(c), True, simple=True)
    ...     return None
    >>> env = {}
    >>> code = ExprCompiler(env, resolve).compile(sqlglot.parse_one("p * (1 - d)"))
    >>> from decimal import Decimal
    >>> eval(code.src, env, {"row": (Decimal("10.00"), Decimal("0.05"))}), code.type
    (Decimal('9.5000'), SqlType(name='DECIMAL', scale=4, width=18))
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from decimal import Decimal
from functools import partial
from typing import Any

from sqlglot import exp

from core.errors import EvaluationError
from core.schema import INT_BITS, INT_RANGES, Column
from core.sqlfuncs import HELPERS, caster, date_of, days_between, float_compare, or_null
from plans import exprfuncs
from plans.exprtypes import (
    BIGINT,
    BOOL,
    DATE,
    FLOAT,
    INT,
    NULL,
    TEXT,
    TIMESTAMP,
    Code,
    ExprError,
    Interval,
    SqlType,
    fresh_name,  # (the types, re-exported: this module's API)
    int_type,
    numeric_type,
    unify,
)

Resolver = Callable[[exp.Expr], "Code | None"]

_CMP: dict[type[exp.Expr], str] = {exp.EQ: "==", exp.NEQ: "!=", exp.LT: "<",
                                   exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_ARITH: dict[type[exp.Expr], str] = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*"}
_HELPER_OF = {"+": "_f_add", "-": "_f_sub", "*": "_f_mul"}
_UNITS = {"YEAR": (12, 0, 0), "YEARS": (12, 0, 0), "MONTH": (1, 0, 0),
          "MONTHS": (1, 0, 0), "DAY": (0, 1, 0), "DAYS": (0, 1, 0),
          "HOUR": (0, 0, 3_600_000_000), "MINUTE": (0, 0, 60_000_000),
          "SECOND": (0, 0, 1_000_000), "WEEK": (0, 7, 0), "QUARTER": (3, 0, 0)}


def literal_bits(value: int) -> int:
    """The integer type DuckDB gives an integer literal: INTEGER, BIGINT or HUGEINT by
    its size (0: too large for any, a DOUBLE)."""
    for bits in (32, 64, 128):
        lo, hi = INT_RANGES[bits]
        if lo <= value <= hi:
            return bits
    return 0


def column_refs(node: exp.Expr) -> list[exp.Column]:
    return [c for c in node.find_all(exp.Column) if not isinstance(c.this, exp.Star)]


def conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """The conjuncts of a condition, parentheses around it and its parts dropped (TPC-DS
    Q51 writes ``ON (a = b AND c = d)``).

    >>> import sqlglot
    >>> [c.sql() for c in conjuncts(sqlglot.parse_one("(a = 1 AND (b = 2 AND c)) AND d"))]
    ['a = 1', 'b = 2', 'c', 'd']
    """
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


class ExprCompiler:
    """Compiles sqlglot expressions into Python source over the resolver's leaves;
    constants and helpers are bound in ``env`` (names unique across a query)."""

    def __init__(self, env: dict[str, Any], resolve: Resolver) -> None:
        self.env = env
        self.resolve = resolve
        self.last_type = NULL
        """The type of the last :meth:`output` (the column a view over this one reads)."""
        self._raising: set[str] = set()
        """Names of the bound casts (they raise on a value that does not convert)."""
        env.update(HELPERS)
        env.setdefault("_timedelta", datetime.timedelta)

    # -- constants -------------------------------------------------------------------
    def const(self, value: Any, typ: SqlType, literal: bool = False) -> Code:
        if value is None:
            return Code("None", typ if typ.name != "NULL" else NULL, True, True, True)
        if isinstance(value, bool) or (isinstance(value, int) and abs(value) < 2**62):
            return Code(repr(value), typ, False, True, True, literal)
        return Code(self._bind(value), typ, False, True, True, literal)

    def _as_name(self, src: str) -> str:
        """``src``, a number or string literal bound to a name (Python warns of ``is``
        with a literal)."""
        if src[:1].isdigit() or src[:1] in "-'\"":
            try:
                return self._bind(eval(src, self.env))  # noqa: S307
            except Exception:  # noqa: BLE001 - (not a literal after all)
                return src
        return src

    def _bind(self, value: Any) -> str:
        """A name in ``env`` for ``value`` (unique across a query)."""
        name = fresh_name()
        self.env[name] = value
        return name

    def _fold(self, code: Code, node: exp.Expr) -> Code:
        """Evaluate a column-free expression now (once), keeping its type."""
        if code.const or isinstance(code.type, SqlType) and code.type.name == "INTERVAL":
            return code
        try:
            value = eval(code.src, self.env)  # noqa: S307 - our own generated source
        except EvaluationError:
            # (DuckDB raises it for each row that reaches it, not for the query: an
            # empty table, or a CASE branch never taken, raises nothing; a NULL
            # operand beside it does not spare it: evaluated, not short-cut)
            return Code(code.src, code.type, True)
        except (ArithmeticError, ValueError, OverflowError) as err:
            raise ExprError(node, f"cannot evaluate {node.sql()!r}: {err}") from None
        return self.const(value, code.type)

    # -- entry points ----------------------------------------------------------------
    def compile(self, node: exp.Expr) -> Code:
        code = self._compile(node)
        if not code.const and not column_refs(node) and not self._has_resolved(node):
            code = self._fold(code, node)
        return code

    def _has_resolved(self, node: exp.Expr) -> bool:
        return any(self.resolve(n) is not None for n in node.walk()
                   if isinstance(n, exp.AggFunc))

    def value(self, node: exp.Expr) -> Code:
        """:meth:`compile` for a value that is kept (a derived variable, an output
        column): a computed DOUBLE's NaN made the one NaN object, so rows holding it
        are equal (a delete retracts its insert; GROUP BY puts NaNs together)."""
        code = self.compile(node)
        if code.type.name == "FLOAT" and not code.simple and not code.const:
            code = Code(f"_f_canon({code.src})", code.type, code.nullable)
        return code

    def output(self, node: exp.Expr) -> str:
        """Source of an output column's value: a DECIMAL at its static scale (how
        DuckDB prints it, whatever scale the operands' values carried)."""
        code = self.value(node)
        self.last_type = code.type
        if code.type.name != "DECIMAL":
            return code.src
        quantum = f"_q{code.type.scale}"
        self.env[quantum] = Decimal(1).scaleb(-code.type.scale)
        return f"_f_quantize({code.src}, {quantum})"

    def predicate(self, node: exp.Expr) -> str:
        """Source that is True exactly when the condition is TRUE (WHERE, HAVING)."""
        code = self.compile(node)
        if code.type.name not in ("BOOL", "NULL"):
            raise ExprError(node, f"a condition must be a boolean, found {code.type.name}")
        return f"({code.src})" if not code.nullable else f"({code.src}) is True"

    # -- the translation -------------------------------------------------------------
    def _compile(self, node: exp.Expr) -> Code:
        hit = self.resolve(node)
        if hit is not None:
            return hit
        if isinstance(node, exp.Paren):
            return self.compile(node.this)
        if isinstance(node, exp.Alias):
            return self.compile(node.this)
        if isinstance(node, exp.Literal):
            return self._literal(node)
        if isinstance(node, exp.Boolean):
            return self.const(bool(node.this), BOOL)
        if isinstance(node, exp.Null):
            return self.const(None, NULL)
        if isinstance(node, exp.Interval):
            return self._interval(node)
        if isinstance(node, exp.Cast):
            return self._cast(node)
        if isinstance(node, exp.Neg):
            inner = node.this
            while isinstance(inner, exp.Paren):
                inner = inner.this
            if isinstance(inner, exp.Literal) and not inner.is_string:
                # (a negative literal is one constant to DuckDB, typed as a literal)
                lit = self._literal(inner)
                value = eval(lit.src, self.env)  # noqa: S307
                return self._literal_int(-value, lit.type.bits) if lit.literal else \
                    self.const(-value, lit.type)
            a = self.compile(node.this)
            self._need_numeric(node, a)
            return self._checked(self._wrap1(a, "-{}", a.type, "_f_neg"), node)
        if isinstance(node, tuple(_ARITH)):
            return self._arith(node, _ARITH[type(node)])
        if isinstance(node, exp.Div):
            a, b = self.compile(node.this), self.compile(node.expression)
            self._need_numeric(node, a, b)
            return Code(f"_f_div({a.src}, {b.src})", FLOAT, True)
        if isinstance(node, exp.IntDiv):
            a, b = self.compile(node.this), self.compile(node.expression)
            self._need_numeric(node, a, b)
            if {a.type.name, b.type.name} <= {"INT", "NULL"}:
                t = int_type(self.env, a, b)
                return self._checked(Code(f"_f_intdiv({a.src}, {b.src})", t, True), node)
            # (DuckDB 1.5: // of DECIMALs or DOUBLEs divides, NULL for a zero divisor)
            return Code(f"_f_div_or_null({a.src}, {b.src})", FLOAT, True)
        if isinstance(node, exp.Mod):
            a, b = self.compile(node.this), self.compile(node.expression)
            self._need_numeric(node, a, b)
            t, _check = numeric_type(self.env, node, "%", a, b)
            if t.name == "INT":
                k = self._bind(self._range(t, node))
                return Code(f"_f_imod({a.src}, {b.src}, {k})", t, True)
            return Code(f"_f_mod({self._as(a, t).src}, {self._as(b, t).src})", t, True)
        if isinstance(node, tuple(_CMP)):
            return self._compare(node, _CMP[type(node)], node.this, node.expression)
        if isinstance(node, exp.And):
            return self._logic(node, "and")
        if isinstance(node, exp.Or):
            return self._logic(node, "or")
        if isinstance(node, exp.Not):
            a = self.compile(node.this)
            self._need_bool(node, a)
            return self._wrap1(a, "not {}", BOOL, "_f_not3")
        if isinstance(node, exp.Is):
            return self._is(node)
        if isinstance(node, exp.Between):
            lo = self._compare(node, ">=", node.this, node.args["low"])
            hi = self._compare(node, "<=", node.this, node.args["high"])
            return self._and_codes(lo, hi)
        if isinstance(node, exp.In):
            return exprfuncs.in_list(self, node)
        if isinstance(node, (exp.Like, exp.ILike)):
            return exprfuncs.like(self, node)
        if isinstance(node, exp.Case):
            return self._case(node)
        if isinstance(node, exp.If):
            return self._case(exp.Case(ifs=[node.copy()], default=node.args.get("false")))
        if isinstance(node, exp.Coalesce):
            parts = [self.compile(node.this)] + [self.compile(e) for e in node.expressions]
            t = unify(self.env, node, parts)
            values = [self._branch_value(p, t, node).src for p in parts]
            nullable = all(p.nullable for p in parts)
            if any(self._may_raise(Code(v, t, True)) for v in values[1:]):
                # (an argument that may raise only where those before it are NULL)
                src = values[-1]
                for v in reversed(values[:-1]):
                    v = self._as_name(v)
                    src = f"({v} if {v} is not None else {src})"
                return Code(src, t, nullable)
            return Code(f"_f_coalesce({', '.join(values)})", t, nullable)
        if isinstance(node, exp.Nullif):
            a, b = self.compile(node.this), self.compile(node.expression)
            return Code(f"_f_nullif({a.src}, {b.src})", a.type, True)
        if isinstance(node, exp.Extract):
            return exprfuncs.extract(self, node)
        if isinstance(node, exp.Substring):
            s = self.compile(node.this)
            start = self.compile(node.args["start"]) if node.args.get("start") else None
            ln = self.compile(node.args["length"]) if node.args.get("length") else None
            args = [s.src, start.src if start else "1"] + ([ln.src] if ln else [])
            return Code(f"_f_substring({', '.join(args)})", TEXT, True)
        if isinstance(node, exp.Concat):
            return exprfuncs.concat(self, node)
        if isinstance(node, exp.Sqrt):
            return exprfuncs.sqrt(self, node)
        if isinstance(node, exp.DPipe):
            a, b = self.compile(node.this), self.compile(node.expression)
            # (DuckDB's || casts a value of another type to VARCHAR)
            sa, sb = self._as_text(a), self._as_text(b)
            return self._wrap2(sa, sb, "({} + {})", TEXT, "_f_concat")
        simple_fns: dict[type[exp.Expr], tuple[str, str, SqlType | None]] = {
            exp.Upper: ("{}.upper()", "_f_upper", TEXT),
            exp.Lower: ("{}.lower()", "_f_lower", TEXT),
            exp.Length: ("len({})", "_f_length", BIGINT),
            exp.Trim: ("{}.strip(' ')", "_f_trim", TEXT),
            exp.Abs: ("abs({})", "_f_abs", None),
        }
        if type(node) in simple_fns:
            if isinstance(node, exp.Trim) and (node.args.get("expression") is not None
                                               or node.args.get("position")):
                raise ExprError(node, "TRIM with characters or LEADING/TRAILING")
            fmt, helper, rt = simple_fns[type(node)]
            a = self.compile(node.this)
            if isinstance(node, exp.Abs):
                self._need_numeric(node, a)
                return self._checked(self._wrap1(a, fmt, a.type, helper), node)
            if rt is TEXT or isinstance(node, exp.Length):
                self._text(a, node)
            return self._wrap1(a, fmt, rt or a.type, helper)
        if isinstance(node, exp.Round):
            a = self.compile(node.this)
            self._need_numeric(node, a)
            d = node.args.get("decimals")
            sign = 1
            if isinstance(d, exp.Neg):
                d, sign = d.this, -1
            if d is not None and not (isinstance(d, exp.Literal) and not d.is_string
                                      and d.name.isdigit()):
                raise ExprError(node, "ROUND's digits must be an integer constant")
            digits = sign * int(d.name) if d is not None else 0
            t = SqlType("DECIMAL", max(digits, 0), a.type.width) \
                if a.type.name == "DECIMAL" else a.type
            return self._checked(Code(f"_f_round({a.src}, {digits})", t, a.nullable), node)
        if isinstance(node, exp.Column):
            raise ExprError(node, f"unknown column {node.sql()!r}")
        raise ExprError(node, f"unsupported expression {type(node).__name__.upper()}")

    # -- pieces ----------------------------------------------------------------------
    def _literal(self, node: exp.Literal) -> Code:
        """A constant typed as DuckDB types it: an integer INTEGER, BIGINT or HUGEINT
        by its size (a literal, see :attr:`Code.literal`; larger: DOUBLE), ``1.50``
        DECIMAL(3,2), ``1e5`` DOUBLE."""
        text = str(node.this)
        if node.is_string:
            return self.const(text, TEXT, literal=True)
        if any(c in text for c in "eE"):
            return self.const(float(text), FLOAT)
        if "." in text:
            d = Decimal(text)
            scale = max(-int(d.as_tuple().exponent), 0)
            whole = text.split(".")[0].lstrip("+-").lstrip("0") or "0"
            width = len(whole) + scale
            if width > 38:
                return self.const(float(text), FLOAT)
            return self.const(d, SqlType("DECIMAL", scale, width))
        return self._literal_int(int(text))

    def _literal_int(self, value: int, bits: int | None = None) -> Code:
        """An integer literal; ``bits`` given for a negated one (DuckDB types ``-x`` by
        ``x``: ``-2147483648`` is a BIGINT)."""
        bits = literal_bits(value) if bits is None else bits
        if bits == 0:
            return self.const(float(value), FLOAT)
        return self.const(value, SqlType("INT", 0, bits), literal=True)

    def _interval(self, node: exp.Interval) -> Code:
        unit = node.args.get("unit")
        unit_name = (unit.name if unit is not None else "").upper()
        value = node.this
        text = value.name if isinstance(value, exp.Literal) else None
        if unit_name not in _UNITS or text is None:
            raise ExprError(node, "INTERVAL 'n' YEAR|MONTH|DAY|HOUR|MINUTE|SECOND")
        try:
            n = int(text.strip())
        except ValueError:
            raise ExprError(node, f"INTERVAL count {text!r} is not an integer") from None
        m, d, us = _UNITS[unit_name]
        name = fresh_name()
        self.env[name] = Interval(m * n, d * n, us * n)
        return Code(name, SqlType("INTERVAL"), False, True, True)

    def _cast(self, node: exp.Cast) -> Code:
        to: exp.DataType = node.args["to"]
        type_name = to.this.name.upper()
        from core.schema import SQL_TYPE_NAMES

        kind = SQL_TYPE_NAMES.get(type_name)
        if kind is None:
            raise ExprError(node, f"CAST to {type_name}")
        scale = width = 0
        if kind == "DECIMAL":
            params = [p.this.name for p in to.expressions if isinstance(p.this, exp.Literal)]
            width = int(params[0]) if params else 18
            scale = int(params[1]) if len(params) > 1 else (0 if params else 3)
        elif kind == "INT":
            width = INT_BITS.get(type_name, 64)
        col = Column("cast", kind, scale, width)
        target = SqlType.of_column(col)
        a = self.compile(node.this)
        if a.type == target:
            return a
        temporal = {"DATE", "TIMESTAMP"}
        if (a.type.name in temporal) != (kind in temporal) and \
                "TEXT" not in (a.type.name, kind) and a.type.name != "NULL":
            raise ExprError(node, f"CAST of {a.type.sql_name} to {target.sql_name} "
                                  "(DuckDB has no such cast)")
        if kind == "TEXT":
            from core.records import format_value

            fn: Any = partial(or_null, format_value)
        elif kind == "TIMESTAMP" and a.type.name == "DATE":
            fn = HELPERS["_f_to_timestamp"]
        elif kind == "DATE" and a.type.name == "TIMESTAMP":
            fn = date_of
        elif kind == "FLOAT" and a.type.numeric:
            fn = HELPERS["_f_to_float"]
        elif kind == "INT" and a.type.name == "INT" and a.type.bits <= target.bits:
            return Code(a.src, target, a.nullable, a.simple, a.const)  # (widening)
        else:
            # (DuckDB's run-time CAST: rounding, range and conversion errors)
            fn = caster(col, node.meta.get("ivmflow_text") or node.sql("duckdb"))
            name = self._bind(fn)
            self._raising.add(name)
            return Code(f"{name}({a.src})", target, a.nullable)
        return Code(f"{self._bind(fn)}({a.src})", target, a.nullable)

    def _need_numeric(self, node: exp.Expr, *codes: Code) -> None:
        for c in codes:
            if not c.type.numeric:
                raise ExprError(node, f"arithmetic on {c.type.name} in {node.sql()!r}")

    def _need_bool(self, node: exp.Expr, *codes: Code) -> None:
        for c in codes:
            if c.type.name not in ("BOOL", "NULL"):
                raise ExprError(node, f"{c.type.name} where a boolean is needed")

    def _range(self, t: SqlType, node: exp.Expr) -> tuple[Any, Any, str, str]:
        """(low, high, type name, expression text): what :func:`core.sqlfuncs.check`
        tests a result of type ``t`` against."""
        text = node.sql("duckdb")
        if t.name == "INT":
            lo, hi = INT_RANGES[t.bits]
            return lo, hi, t.sql_name, text
        top = Decimal(10) ** (t.digits - t.scale) - Decimal(1).scaleb(-t.scale)
        return -top, top, t.sql_name, text

    def _checked(self, code: Code, node: exp.Expr) -> Code:
        """``code`` with DuckDB's overflow check of an INT result (a value outside its
        type is an :class:`~core.errors.EvaluationError`)."""
        if code.type.name != "INT":
            return code
        return self._check(code, node)

    def _check(self, code: Code, node: exp.Expr) -> Code:
        k = self._bind(self._range(code.type, node))
        return Code(f"_f_check({code.src}, {k})", code.type, code.nullable)

    def _as(self, code: Code, target: SqlType) -> Code:
        """``code`` converted for an operation in ``target`` (DECIMAL with FLOAT: float)."""
        if target.name == "FLOAT" and code.type.name in ("DECIMAL", "INT") and \
                code.src != "None":
            if code.const:
                return self.const(float(eval(code.src, self.env)), FLOAT)  # noqa: S307
            return self._wrap1(code, "float({})", FLOAT, "_f_to_float")
        return code

    def _wrap1(self, a: Code, fmt: str, t: SqlType, helper: str) -> Code:
        if not a.nullable:
            return Code("(" + fmt.format(a.src) + ")", t, False)
        if a.simple:
            return Code(f"(None if {a.src} is None else {fmt.format(a.src)})", t, True)
        return Code(f"{helper}({a.src})", t, True)

    def _wrap2(self, a: Code, b: Code, fmt: str, t: SqlType, helper: str) -> Code:
        if not a.nullable and not b.nullable:
            return Code(fmt.format(a.src, b.src), t, False)
        if (a.simple or not a.nullable) and (b.simple or not b.nullable):
            tests = " or ".join(f"{c.src} is None" for c in (a, b) if c.nullable)
            return Code(f"(None if {tests} else {fmt.format(a.src, b.src)})", t, True)
        return Code(f"{helper}({a.src}, {b.src})", t, True)

    def _arith(self, node: exp.Expr, op: str) -> Code:
        a, b = self.compile(node.this), self.compile(node.expression)
        if "INTERVAL" in (a.type.name, b.type.name):
            return self._date_arith(node, op, a, b)
        if a.type.name == "DATE" and b.type.name == "INT" and op in "+-":
            days = b if op == "+" else self._wrap1(b, "-{}", INT, "_f_neg")
            k = self._bind(node.sql("duckdb"))
            return Code(f"_f_add_days({a.src}, {days.src}, {k})", DATE, True)
        if a.type.name in ("DATE", "TIMESTAMP") and a.type == b.type and op == "-":
            self.env["_f_days"] = days_between
            return Code(f"_f_days({a.src}, {b.src})", BIGINT, True)
        self._need_numeric(node, a, b)
        t, check = numeric_type(self.env, node, op, a, b)
        code = self._wrap2(self._as(a, t), self._as(b, t), "({} " + op + " {})", t,
                           _HELPER_OF[op])
        return self._check(code, node) if check else code

    def _date_arith(self, node: exp.Expr, op: str, a: Code, b: Code) -> Code:
        if a.type.name == "INTERVAL" and op == "+":
            a, b = b, a
        if b.type.name != "INTERVAL" or a.type.name not in ("DATE", "TIMESTAMP"):
            raise ExprError(node, f"{a.type.name} {op} {b.type.name}")
        iv: Interval = self.env[b.src]
        sign = -1 if op == "-" else 1
        return Code(f"_f_add_interval({a.src}, {sign * iv.months}, {sign * iv.days}, "
                    f"{sign * iv.micros})", TIMESTAMP, a.nullable)

    def _align(self, node: exp.Expr, a: Code, b: Code, op: str = "==") -> tuple[Code, Code]:
        """Operands of a comparison in one domain, as DuckDB casts them: a string
        constant read as the other side's type (now: a bad one is a compile-time
        error); a string value compared with ``=`` or ``<>`` to a value of another type
        cast to that type when the row is read (a string that does not convert is an
        :class:`~core.errors.EvaluationError`), any other comparison of a string with
        another type refused (DuckDB's binder refuses it too); DATE against TIMESTAMP
        as TIMESTAMP; DECIMAL or integer against DOUBLE as DOUBLE; BOOLEAN against a
        number as 1/0."""
        for x, y, swap in ((a, b, False), (b, a, True)):
            if x.type.name == "TEXT" and x.literal and y.type.name not in ("TEXT", "NULL"):
                value = eval(x.src, self.env)  # noqa: S307
                fn = caster(y.type.column("literal"), node.sql("duckdb"))
                try:
                    x2 = self.const(fn(value), y.type)
                except EvaluationError:  # (DuckDB's error, for each row compared)
                    name = self._bind(fn)
                    self._raising.add(name)
                    x2 = Code(f"{name}({x.src})", y.type, True)
                return (y, x2) if swap else (x2, y)
        names = {a.type.name, b.type.name}
        if names == {"DATE", "TIMESTAMP"}:
            a = a if a.type.name == "TIMESTAMP" else self._to_ts(a)
            b = b if b.type.name == "TIMESTAMP" else self._to_ts(b)
            return a, b
        if names <= {"INT", "DECIMAL", "FLOAT", "BOOL", "NULL"} and \
                (a.type.name != "BOOL" or b.type.name != "BOOL"):
            if "FLOAT" in names:
                # DuckDB compares a DECIMAL or an integer with a DOUBLE as DOUBLEs
                # (Python would compare Decimal('1.47') and 1.47 exactly: not equal)
                return self._as(a, FLOAT), self._as(b, FLOAT)
            return a, b  # (int and Decimal compare exactly, as DuckDB's DECIMALs do)
        if "TEXT" in names and "NULL" not in names and len(names) == 2:
            x, y = (a, b) if a.type.name == "TEXT" else (b, a)
            if op not in ("==", "!="):
                shown = {"==": "=", "!=": "<>"}.get(op, op)
                raise ExprError(node, f"comparison {shown} of VARCHAR with "
                                      f"{y.type.sql_name} in {node.sql('duckdb')!r}: DuckDB "
                                      "compares a string with another type only by = or "
                                      "<> (write a CAST)")
            fn = caster(y.type.column("cast"), node.sql("duckdb"))
            name = self._bind(fn)
            self._raising.add(name)
            x2 = Code(f"{name}({x.src})", y.type, x.nullable)
            return (x2, y) if x is a else (y, x2)
        if a.type.name != b.type.name and "NULL" not in names:
            raise ExprError(node, f"comparison of {a.type.sql_name} with {b.type.sql_name} "
                                  f"in {node.sql('duckdb')!r} (DuckDB cannot cast one to "
                                  "the other)")
        return a, b

    def _to_ts(self, a: Code) -> Code:
        if a.const:
            v = eval(a.src, self.env)  # noqa: S307
            return self.const(HELPERS["_f_to_timestamp"](v), TIMESTAMP)
        return Code(f"_f_to_timestamp({a.src})", TIMESTAMP, a.nullable)

    def _compare(self, node: exp.Expr, op: str, left: exp.Expr, right: exp.Expr) -> Code:
        a, b = self._align(node, self.compile(left), self.compile(right), op)
        if "FLOAT" in (a.type.name, b.type.name):
            # (DuckDB's order of DOUBLEs: NaN = NaN, and NaN above everything)
            name = self._bind(float_compare(op))
            return Code(f"{name}({a.src}, {b.src})", BOOL, a.nullable or b.nullable)
        # A DATE column against a midnight TIMESTAMP constant compares as dates (exact,
        # and no conversion per row).
        if a.src.startswith("_f_to_timestamp(") and b.const:
            bv = eval(b.src, self.env)  # noqa: S307
            if bv is not None and bv.time() == datetime.time(0):
                a = Code(a.src[len("_f_to_timestamp("):-1], DATE, a.nullable, True)
                b = self.const(bv.date(), DATE)
        if b.src.startswith("_f_to_timestamp(") and a.const:
            av = eval(a.src, self.env)  # noqa: S307
            if av is not None and av.time() == datetime.time(0):
                b = Code(b.src[len("_f_to_timestamp("):-1], DATE, b.nullable, True)
                a = self.const(av.date(), DATE)
        if not a.nullable and not b.nullable:
            return Code(f"({a.src} {op} {b.src})", BOOL, False)
        if (a.simple or not a.nullable) and (b.simple or not b.nullable):
            tests = " or ".join(f"{c.src} is None" for c in (a, b) if c.nullable)
            return Code(f"(None if {tests} else {a.src} {op} {b.src})", BOOL, True)
        from core.sqlfuncs import compare

        return Code(f"{self._bind(compare(op))}({a.src}, {b.src})", BOOL, True)

    def _logic(self, node: exp.Expr, op: str) -> Code:
        a, b = self.compile(node.this), self.compile(node.expression)
        self._need_bool(node, a, b)
        if op == "and":
            return self._and_codes(a, b)
        if not a.nullable and not b.nullable:
            return Code(f"({a.src} or {b.src})", BOOL, False)
        if self._may_raise(b):  # (b only where a does not decide, as DuckDB)
            return Code(f"(True if {a.src} is True else _f_or3({a.src}, {b.src}))", BOOL,
                        True)
        return Code(f"_f_or3({a.src}, {b.src})", BOOL, True)

    def _and_codes(self, a: Code, b: Code) -> Code:
        if not a.nullable and not b.nullable:
            return Code(f"({a.src} and {b.src})", BOOL, False)
        if self._may_raise(b):
            return Code(f"(False if {a.src} is False else _f_and3({a.src}, {b.src}))",
                        BOOL, True)
        return Code(f"_f_and3({a.src}, {b.src})", BOOL, True)

    def _may_raise(self, code: Code) -> bool:
        """Whether evaluating ``code`` can raise DuckDB's run-time errors (an overflow
        check, a cast): such an operand of AND, OR or COALESCE is evaluated only where
        the operands before it do not decide the value, as DuckDB does."""
        return "_f_check(" in code.src or "_f_imod(" in code.src or any(
            f"{name}(" in code.src for name in self._raising)

    def _is(self, node: exp.Is) -> Code:
        target = node.expression
        if isinstance(target, exp.Null):
            a = self.compile(node.this)
            return Code(f"({self._as_name(a.src)} is None)", BOOL, False)
        if isinstance(target, exp.Boolean):
            a = self.compile(node.this)
            return Code(f"({self._as_name(a.src)} is {bool(target.this)!r})", BOOL, False)
        raise ExprError(node, "IS with something other than NULL, TRUE or FALSE")

    def _as_text(self, code: Code) -> Code:
        """``code`` as a VARCHAR (CAST's text of another type)."""
        if code.type.name in ("TEXT", "NULL"):
            return code
        from core.records import format_value

        fn = self._bind(partial(or_null, format_value))
        return Code(f"{fn}({code.src})", TEXT, code.nullable)

    def _text(self, code: Code, node: exp.Expr | None = None) -> Code:
        if code.type.name not in ("TEXT", "NULL"):
            where = f" in {node.sql('duckdb')!r}" if node is not None else ""
            raise ExprError(node if node is not None else exp.Null(),
                            f"a string operation on {code.type.sql_name}{where} (DuckDB "
                            "has no such function for it; write a CAST)")
        return code

    def _case(self, node: exp.Case) -> Code:
        operand = node.this
        branches: list[tuple[str, Code]] = []
        for clause in node.args.get("ifs") or []:
            cond = clause.this
            if operand is not None:
                cond = exp.EQ(this=operand.copy(), expression=cond.copy())
            test = self.compile(cond)
            self._need_bool(clause, test)
            src = test.src if not test.nullable else f"({test.src}) is True"
            branches.append((src, self.compile(clause.args["true"])))
        default = node.args.get("default")
        other = self.compile(default) if default is not None else self.const(None, NULL)
        t = unify(self.env, node, [c for _, c in branches] + [other])
        src = self._branch_value(other, t, node).src
        for test_src, value in reversed(branches):
            src = f"({self._branch_value(value, t, node).src} if {test_src} else {src})"
        nullable = other.nullable or any(v.nullable for _, v in branches)
        return Code(src, t, nullable)

    def _branch_value(self, code: Code, t: SqlType, node: exp.Expr | None = None) -> Code:
        """A CASE branch or COALESCE argument as a value of their type ``t``: a string
        constant or a BOOLEAN among numbers cast to it (DuckDB's implicit casts)."""
        if code.src == "None":
            return code
        if code.type.name in ("TEXT", "BOOL") and t.name not in ("TEXT", "BOOL", "NULL"):
            fn = caster(t.column("cast"), node.sql("duckdb") if node is not None else "")
            if code.const:
                try:
                    return self.const(fn(eval(code.src, self.env)), t)  # noqa: S307
                except EvaluationError:
                    pass  # (raised for each row that reaches it)
            name = self._bind(fn)
            self._raising.add(name)
            return Code(f"{name}({code.src})", t, code.nullable)
        if t.name == "DECIMAL" and code.const:
            v = eval(code.src, self.env)  # noqa: S307
            return self.const(Decimal(v).quantize(Decimal(1).scaleb(-t.scale)), t)
        if t.name == "TIMESTAMP" and code.type.name == "DATE":
            return self._to_ts(code)
        return self._as(code, t)
