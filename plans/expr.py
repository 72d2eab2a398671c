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
    (Decimal('9.5000'), SqlType(name='DECIMAL', scale=4))
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlglot import exp

from core.errors import QueryError
from core.schema import Column
from core.sqlfuncs import HELPERS, like_test

_NAMES = itertools.count()


@dataclass(frozen=True)
class SqlType:
    """A static SQL type: INT, DECIMAL (with its scale), FLOAT (DOUBLE), TEXT, BOOL,
    DATE, TIMESTAMP, INTERVAL, or NULL (the type of a bare NULL)."""

    name: str
    scale: int = 0

    @staticmethod
    def of_column(col: Column) -> SqlType:
        return SqlType(col.type, col.scale if col.type == "DECIMAL" else 0)

    @property
    def numeric(self) -> bool:
        return self.name in ("INT", "DECIMAL", "FLOAT", "NULL")

    def column(self, name: str) -> Column:
        """A column of this type (derived relations, output)."""
        kind = {"NULL": "INT", "INTERVAL": "TEXT"}.get(self.name, self.name)
        return Column(name, kind, self.scale)  # type: ignore[arg-type]


INT, FLOAT, TEXT, BOOL = SqlType("INT"), SqlType("FLOAT"), SqlType("TEXT"), SqlType("BOOL")
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


Resolver = Callable[[exp.Expr], "Code | None"]

_CMP: dict[type[exp.Expr], str] = {exp.EQ: "==", exp.NEQ: "!=", exp.LT: "<",
                                   exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_ARITH: dict[type[exp.Expr], str] = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*"}
_HELPER_OF = {"+": "_f_add", "-": "_f_sub", "*": "_f_mul"}
_UNITS = {"YEAR": (12, 0, 0), "YEARS": (12, 0, 0), "MONTH": (1, 0, 0),
          "MONTHS": (1, 0, 0), "DAY": (0, 1, 0), "DAYS": (0, 1, 0),
          "HOUR": (0, 0, 3_600_000_000), "MINUTE": (0, 0, 60_000_000),
          "SECOND": (0, 0, 1_000_000), "WEEK": (0, 7, 0), "QUARTER": (3, 0, 0)}


def column_refs(node: exp.Expr) -> list[exp.Column]:
    return [c for c in node.find_all(exp.Column) if not isinstance(c.this, exp.Star)]


class ExprCompiler:
    """Compiles sqlglot expressions into Python source over the resolver's leaves;
    constants and helpers are bound in ``env`` (names unique across a query)."""

    def __init__(self, env: dict[str, Any], resolve: Resolver) -> None:
        self.env = env
        self.resolve = resolve
        self.last_type = NULL
        """The type of the last :meth:`output` (the column a view over this one reads)."""
        env.update(HELPERS)
        env.setdefault("_timedelta", datetime.timedelta)

    # -- constants -------------------------------------------------------------------
    def const(self, value: Any, typ: SqlType) -> Code:
        if value is None:
            return Code("None", typ if typ.name != "NULL" else NULL, True, True, True)
        if isinstance(value, bool) or (isinstance(value, int) and abs(value) < 2**62):
            return Code(repr(value), typ, False, True, True)
        name = f"_k{next(_NAMES)}"
        self.env[name] = value
        return Code(name, typ, False, True, True)

    def _fold(self, code: Code, node: exp.Expr) -> Code:
        """Evaluate a column-free expression now (once), keeping its type."""
        if code.const or isinstance(code.type, SqlType) and code.type.name == "INTERVAL":
            return code
        try:
            value = eval(code.src, self.env)  # noqa: S307 - our own generated source
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

    def output(self, node: exp.Expr) -> str:
        """Source of an output column's value: a DECIMAL at its static scale (how
        DuckDB prints it, whatever scale the operands' values carried)."""
        code = self.compile(node)
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
            a = self.compile(node.this)
            self._need_numeric(node, a)
            return self._wrap1(a, "-{}", a.type, "_f_neg")
        if isinstance(node, tuple(_ARITH)):
            return self._arith(node, _ARITH[type(node)])
        if isinstance(node, exp.Div):
            a, b = self.compile(node.this), self.compile(node.expression)
            self._need_numeric(node, a, b)
            return Code(f"_f_div({a.src}, {b.src})", FLOAT, True)
        if isinstance(node, exp.Mod):
            a, b = self.compile(node.this), self.compile(node.expression)
            self._need_numeric(node, a, b)
            t = self._promote(a.type, b.type)
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
            return self._in(node)
        if isinstance(node, (exp.Like, exp.ILike)):
            return self._like(node)
        if isinstance(node, exp.Case):
            return self._case(node)
        if isinstance(node, exp.If):
            return self._case(exp.Case(ifs=[node.copy()], default=node.args.get("false")))
        if isinstance(node, exp.Coalesce):
            parts = [self.compile(node.this)] + [self.compile(e) for e in node.expressions]
            t = self._unify(node, [p.type for p in parts])
            srcs = ", ".join(self._as(p, t).src for p in parts)
            return Code(f"_f_coalesce({srcs})", t, all(p.nullable for p in parts))
        if isinstance(node, exp.Nullif):
            a, b = self.compile(node.this), self.compile(node.expression)
            return Code(f"_f_nullif({a.src}, {b.src})", a.type, True)
        if isinstance(node, exp.Extract):
            return self._extract(node)
        if isinstance(node, exp.Substring):
            s = self.compile(node.this)
            start = self.compile(node.args["start"]) if node.args.get("start") else None
            ln = self.compile(node.args["length"]) if node.args.get("length") else None
            args = [s.src, start.src if start else "1"] + ([ln.src] if ln else [])
            return Code(f"_f_substring({', '.join(args)})", TEXT, True)
        if isinstance(node, exp.DPipe):
            a, b = self.compile(node.this), self.compile(node.expression)
            sa, sb = self._text(a), self._text(b)
            return self._wrap2(sa, sb, "({} + {})", TEXT, "_f_concat")
        simple_fns: dict[type[exp.Expr], tuple[str, str, SqlType | None]] = {
            exp.Upper: ("{}.upper()", "_f_upper", TEXT),
            exp.Lower: ("{}.lower()", "_f_lower", TEXT),
            exp.Length: ("len({})", "_f_length", INT),
            exp.Trim: ("{}.strip(' ')", "_f_trim", TEXT),
            exp.Abs: ("abs({})", "_f_abs", None),
        }
        if type(node) in simple_fns:
            if isinstance(node, exp.Trim) and (node.args.get("expression") is not None
                                               or node.args.get("position")):
                raise ExprError(node, "TRIM with characters or LEADING/TRAILING")
            fmt, helper, rt = simple_fns[type(node)]
            a = self.compile(node.this)
            return self._wrap1(a, fmt, rt or a.type, helper)
        if isinstance(node, exp.Round):
            a = self.compile(node.this)
            self._need_numeric(node, a)
            d = node.args.get("decimals")
            digits = int(d.name) if isinstance(d, exp.Literal) and not d.is_string else 0
            if d is not None and not (isinstance(d, exp.Literal) and not d.is_string):
                raise ExprError(node, "ROUND's digits must be an integer constant")
            t = SqlType("DECIMAL", max(digits, 0)) if a.type.name == "DECIMAL" else a.type
            return Code(f"_f_round({a.src}, {digits})", t, a.nullable)
        if isinstance(node, exp.Column):
            raise ExprError(node, f"unknown column {node.sql()!r}")
        raise ExprError(node, f"unsupported expression {type(node).__name__.upper()}")

    # -- pieces ----------------------------------------------------------------------
    def _literal(self, node: exp.Literal) -> Code:
        text = str(node.this)
        if node.is_string:
            return self.const(text, TEXT)
        if any(c in text for c in "eE"):
            return self.const(float(text), FLOAT)
        if "." in text:
            d = Decimal(text)
            return self.const(d, SqlType("DECIMAL", max(-int(d.as_tuple().exponent), 0)))
        return self.const(int(text), INT)

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
        name = f"_k{next(_NAMES)}"
        self.env[name] = Interval(m * n, d * n, us * n)
        return Code(name, SqlType("INTERVAL"), False, True, True)

    def _cast(self, node: exp.Cast) -> Code:
        to: exp.DataType = node.args["to"]
        type_name = to.this.name.upper()
        from core.schema import SQL_TYPE_NAMES

        kind = SQL_TYPE_NAMES.get(type_name)
        if kind is None:
            raise ExprError(node, f"CAST to {type_name}")
        scale = 0
        if kind == "DECIMAL":
            params = [p.this.name for p in to.expressions if isinstance(p.this, exp.Literal)]
            scale = int(params[1]) if len(params) > 1 else (0 if params else 3)
        col = Column("cast", kind, scale)
        target = SqlType(kind, scale)
        a = self.compile(node.this)
        if a.type == target:
            return a
        name = f"_k{next(_NAMES)}"
        if kind == "INT" and a.type.name in ("DECIMAL", "FLOAT"):
            self.env[name] = lambda v: None if v is None else int(HELPERS["_f_round"](v, 0))
        elif kind == "TEXT":
            from core.records import format_value

            self.env[name] = lambda v: None if v is None else format_value(v)
        elif kind == "TIMESTAMP" and a.type.name == "DATE":
            self.env[name] = HELPERS["_f_to_timestamp"]
        elif kind == "DATE" and a.type.name == "TIMESTAMP":
            self.env[name] = lambda v: None if v is None else v.date()
        elif kind == "FLOAT" and a.type.numeric:
            self.env[name] = HELPERS["_f_to_float"]
        else:
            def cast(v: Any, _col: Column = col) -> Any:
                return None if v is None else _col.coerce(v if not isinstance(v, bool)
                                                          else str(v).lower())

            self.env[name] = cast
        return Code(f"{name}({a.src})", target, a.nullable)

    def _need_numeric(self, node: exp.Expr, *codes: Code) -> None:
        for c in codes:
            if not c.type.numeric:
                raise ExprError(node, f"arithmetic on {c.type.name} in {node.sql()!r}")

    def _need_bool(self, node: exp.Expr, *codes: Code) -> None:
        for c in codes:
            if c.type.name not in ("BOOL", "NULL"):
                raise ExprError(node, f"{c.type.name} where a boolean is needed")

    @staticmethod
    def _promote(a: SqlType, b: SqlType) -> SqlType:
        names = {a.name, b.name} - {"NULL"}
        if "FLOAT" in names:
            return FLOAT
        if "DECIMAL" in names:
            return SqlType("DECIMAL", max(a.scale, b.scale))
        return INT

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
            return Code(f"(None if {a.src} is None or {days.src} is None else "
                        f"{a.src} + _timedelta(days={days.src}))", DATE, True)
        if a.type.name in ("DATE", "TIMESTAMP") and a.type == b.type and op == "-":
            self.env["_f_days"] = lambda x, y: None if x is None or y is None else (x - y).days
            return Code(f"_f_days({a.src}, {b.src})", INT, True)
        self._need_numeric(node, a, b)
        t = self._promote(a.type, b.type)
        if t.name == "DECIMAL" and op == "*":
            t = SqlType("DECIMAL", a.type.scale + b.type.scale)
        return self._wrap2(self._as(a, t), self._as(b, t), "({} " + op + " {})", t,
                           _HELPER_OF[op])

    def _date_arith(self, node: exp.Expr, op: str, a: Code, b: Code) -> Code:
        if a.type.name == "INTERVAL" and op == "+":
            a, b = b, a
        if b.type.name != "INTERVAL" or a.type.name not in ("DATE", "TIMESTAMP"):
            raise ExprError(node, f"{a.type.name} {op} {b.type.name}")
        iv: Interval = self.env[b.src]
        sign = -1 if op == "-" else 1
        return Code(f"_f_add_interval({a.src}, {sign * iv.months}, {sign * iv.days}, "
                    f"{sign * iv.micros})", TIMESTAMP, a.nullable)

    def _align(self, node: exp.Expr, a: Code, b: Code) -> tuple[Code, Code]:
        """Operands of a comparison in one domain (a string constant read as the other
        side's type; DATE against TIMESTAMP as TIMESTAMP; DECIMAL against DOUBLE)."""
        for x, y, swap in ((a, b, False), (b, a, True)):
            if x.type.name == "TEXT" and x.const and y.type.name not in ("TEXT", "NULL"):
                value = eval(x.src, self.env)  # noqa: S307
                try:
                    typed = SqlType.column(y.type, "literal").coerce(value)
                except ValueError as err:
                    raise ExprError(node, f"{value!r} is not a {y.type.name}: {err}") \
                        from None
                x2 = self.const(typed, y.type)
                return (y, x2) if swap else (x2, y)
        if {a.type.name, b.type.name} == {"DATE", "TIMESTAMP"}:
            a = a if a.type.name == "TIMESTAMP" else self._to_ts(a)
            b = b if b.type.name == "TIMESTAMP" else self._to_ts(b)
            return a, b
        if a.type.numeric and b.type.numeric:
            if "FLOAT" in (a.type.name, b.type.name):
                # DuckDB compares a DECIMAL or an integer with a DOUBLE as DOUBLEs
                # (Python would compare Decimal('1.47') and 1.47 exactly: not equal)
                return self._as(a, FLOAT), self._as(b, FLOAT)
            return a, b  # (int and Decimal compare exactly, as DuckDB's DECIMALs do)
        if a.type.name != b.type.name and "NULL" not in (a.type.name, b.type.name):
            raise ExprError(node, f"comparison of {a.type.name} with {b.type.name} in "
                                  f"{node.sql()!r}")
        return a, b

    def _to_ts(self, a: Code) -> Code:
        if a.const:
            v = eval(a.src, self.env)  # noqa: S307
            return self.const(HELPERS["_f_to_timestamp"](v), TIMESTAMP)
        return Code(f"_f_to_timestamp({a.src})", TIMESTAMP, a.nullable)

    def _compare(self, node: exp.Expr, op: str, left: exp.Expr, right: exp.Expr) -> Code:
        a, b = self._align(node, self.compile(left), self.compile(right))
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
        name = f"_k{next(_NAMES)}"
        from core.sqlfuncs import compare

        self.env[name] = compare(op)
        return Code(f"{name}({a.src}, {b.src})", BOOL, True)

    def _logic(self, node: exp.Expr, op: str) -> Code:
        a, b = self.compile(node.this), self.compile(node.expression)
        self._need_bool(node, a, b)
        if op == "and":
            return self._and_codes(a, b)
        if not a.nullable and not b.nullable:
            return Code(f"({a.src} or {b.src})", BOOL, False)
        return Code(f"_f_or3({a.src}, {b.src})", BOOL, True)

    def _and_codes(self, a: Code, b: Code) -> Code:
        if not a.nullable and not b.nullable:
            return Code(f"({a.src} and {b.src})", BOOL, False)
        return Code(f"_f_and3({a.src}, {b.src})", BOOL, True)

    def _is(self, node: exp.Is) -> Code:
        target = node.expression
        if isinstance(target, exp.Null):
            a = self.compile(node.this)
            return Code(f"({a.src} is None)", BOOL, False)
        if isinstance(target, exp.Boolean):
            a = self.compile(node.this)
            return Code(f"({a.src} is {bool(target.this)!r})", BOOL, False)
        raise ExprError(node, "IS with something other than NULL, TRUE or FALSE")

    def _in(self, node: exp.In) -> Code:
        if node.args.get("query") is not None or node.args.get("unnest") is not None:
            raise ExprError(node, "IN (subquery)")
        a = self.compile(node.this)
        items = [self.compile(e) for e in node.expressions]
        if all(i.const for i in items):
            values = []
            has_null = False
            for item, e in zip(items, node.expressions):
                _, c = self._align(e, a, item)
                v = eval(c.src, self.env)  # noqa: S307
                if v is None:
                    has_null = True
                else:
                    values.append(v)
            name = f"_k{next(_NAMES)}"
            self.env[name] = frozenset(values)
            if not has_null:
                if not a.nullable:
                    return Code(f"({a.src} in {name})", BOOL, False)
                if a.simple:
                    return Code(f"(None if {a.src} is None else {a.src} in {name})", BOOL,
                                True)
            return Code(f"_f_in_list({a.src}, {name}, {has_null!r})", BOOL, True)
        out: Code | None = None
        for e in node.expressions:
            c = self._compare(node, "==", node.this, e)
            out = c if out is None else (
                Code(f"_f_or3({out.src}, {c.src})", BOOL, True)
                if out.nullable or c.nullable else Code(f"({out.src} or {c.src})", BOOL, False))
        assert out is not None
        return out

    def _like(self, node: exp.Expr) -> Code:
        if node.args.get("escape") is not None:
            raise ExprError(node, "LIKE ... ESCAPE")
        pattern = node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            raise ExprError(node, "LIKE with a pattern that is not a string constant")
        a = self._text(self.compile(node.this))
        name = f"_k{next(_NAMES)}"
        self.env[name] = like_test(str(pattern.this), isinstance(node, exp.ILike))
        code = self._wrap1(a, name + "({})", BOOL, "_f_like_" + name)
        if code.src.startswith("_f_like_"):
            fn = self.env[name]
            self.env["_f_like_" + name] = lambda s: None if s is None else fn(s)
        if node.args.get("negate"):
            code = self._wrap1(code, "not {}", BOOL, "_f_not3")
        return code

    def _text(self, code: Code) -> Code:
        if code.type.name not in ("TEXT", "NULL"):
            raise ExprError(exp.Null(), f"a string operation on {code.type.name}")
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
        t = self._unify(node, [c.type for _, c in branches] + [other.type])
        src = self._branch_value(other, t).src
        for test_src, value in reversed(branches):
            src = f"({self._branch_value(value, t).src} if {test_src} else {src})"
        nullable = other.nullable or any(v.nullable for _, v in branches)
        return Code(src, t, nullable)

    def _branch_value(self, code: Code, t: SqlType) -> Code:
        if t.name == "DECIMAL" and code.const and code.src != "None":
            v = eval(code.src, self.env)  # noqa: S307
            return self.const(Decimal(v).quantize(Decimal(1).scaleb(-t.scale)), t)
        return self._as(code, t)

    def _unify(self, node: exp.Expr, types: list[SqlType]) -> SqlType:
        real = [t for t in types if t.name != "NULL"]
        if not real:
            return NULL
        if all(t.numeric for t in real):
            out = real[0]
            for t in real[1:]:
                out = self._promote(out, t)
            return out
        if {t.name for t in real} <= {"DATE", "TIMESTAMP"} and len(
                {t.name for t in real}) == 2:
            raise ExprError(node, "branches of DATE and TIMESTAMP")
        if len({t.name for t in real}) > 1:
            found = ", ".join(sorted({t.name for t in real}))
            raise ExprError(node, f"branches of different types ({found})")
        return real[0]

    def _extract(self, node: exp.Extract) -> Code:
        part = node.this.name.upper()
        a = self.compile(node.expression)
        if a.type.name not in ("DATE", "TIMESTAMP"):
            raise ExprError(node, f"EXTRACT from {a.type.name}")
        attrs = {"YEAR": "year", "MONTH": "month", "DAY": "day"}
        if a.type.name == "TIMESTAMP":
            attrs.update(HOUR="hour", MINUTE="minute", SECOND="second")
        if part not in attrs:
            raise ExprError(node, f"EXTRACT({part} FROM ...)")
        return self._wrap1(a, "{}." + attrs[part], INT, "_f_extract_" + attrs[part]) \
            if a.simple or not a.nullable else self._extract_helper(a, attrs[part])

    def _extract_helper(self, a: Code, attr: str) -> Code:
        name = f"_k{next(_NAMES)}"
        self.env[name] = lambda v: None if v is None else getattr(v, attr)
        return Code(f"{name}({a.src})", INT, True)
