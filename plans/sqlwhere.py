"""The WHERE clause as the query builder (:class:`plans.sql.Builder`) takes it apart:
each conjunct becomes a filter on one FROM item (a column against constants, applied
before anything is stored), a join equality (two columns, unified into one variable; a
cast join where their types differ), or a condition over one item or above the join,
compiled as an expression. Functions of the builder, which keeps the FROM items and
variables.

Example:
    >>> from plans.sql import parse_query
    >>> cq = parse_query("CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT, c INT); "
    ...                  "SELECT R.a, S.c FROM R, S WHERE R.b = S.b AND R.a > 3")
    >>> [(a.relation.name, [(f.column_name, f.op, f.values) for f in a.filters])
    ...  for a in cq.atoms], sorted(cq.join_vars)
    ([('R', [('a', '>', (3,))]), ('S', [])], ['r.b'])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from core.schema import Value
from plans.cq import (
    CompareOp,
    Filter,
    Predicate,
)
from plans.expr import ExprError, SqlType
from plans.sqlparse import (
    COMPARISONS,
    FLIPPED,
    join_cast,
)

if TYPE_CHECKING:
    from plans.sql import Builder


def literal(b: Builder, node: exp.Expr) -> Value:
    if isinstance(node, exp.Paren):
        return literal(b, node.this)
    if isinstance(node, exp.Neg):
        inner = literal(b, node.this)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return str(node.this)
        text = str(node.this)
        try:
            return int(text)
        except ValueError:
            return float(text)
    raise b.reject(node, "expression", "filters compare a column with a constant")


def add_filter(b: Builder, col: exp.Column, op: CompareOp, values: tuple[Value, ...]) -> None:
    alias, idx = b._resolve(col)
    rel = dict(b.aliases)[alias]
    b.filters.setdefault(alias, []).append(
        Filter(idx, rel.columns[idx].name, op, values)
    )


def try_filter(b: Builder, col: exp.Column, op: CompareOp, literals: list[exp.Expr]) -> bool:
    """``col op constant(s)`` as a plain filter, when Python's comparison of the
    column's values with the constants is DuckDB's: an integer constant with an
    integer column (whatever its width), a string with a string column, a boolean
    with a boolean one, a number with a DOUBLE column except by ``>``/``>=`` (a NaN
    is greater than everything to DuckDB, to Python nothing); a string constant
    with another type is read as that type (DuckDB casts it). False: the expression
    compiler takes it (DuckDB's casts across types; a string that does not convert
    is an error for each row compared)."""
    alias, idx = b._resolve(col)
    column = dict(b.aliases)[alias].columns[idx]
    typed: list[Value] = []
    for node in literals:
        value = literal(b, node)
        if isinstance(value, str) and column.type != "TEXT":
            try:
                value = column.coerce(value)
            except ValueError:  # (DuckDB's error for each row: the compiler's cast)
                return False
        if column.type == "INT":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif column.type == "FLOAT":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and \
                op not in (">", ">=")
            value = float(value) if ok else value  # type: ignore[arg-type]
        elif column.type == "TEXT":
            ok = isinstance(value, str)
        else:
            ok = column.type == "BOOL" and isinstance(value, bool)
        if not ok:
            return False
        typed.append(value)
    add_filter(b, col, op, tuple(typed))
    return True


def simple_condition(b: Builder, cond: exp.Expr) -> bool:  # noqa: C901
    """The plain forms (joins, column op constant): True when ``cond`` was one."""
    if isinstance(cond, exp.Not) and isinstance(cond.this, exp.Is):
        inner = cond.this
        if plain_column(b, inner.this) and isinstance(inner.expression, exp.Null):
            add_filter(b, inner.this, "is not null", ())
            return True
    if isinstance(cond, exp.Is):
        target = cond.expression
        negated = isinstance(target, exp.Not)
        if negated:
            target = target.this
        if plain_column(b, cond.this) and isinstance(target, exp.Null):
            add_filter(b, cond.this, "is not null" if negated else "is null", ())
            return True
    if isinstance(cond, exp.In) and plain_column(b, cond.this):
        if not cond.expressions or not all(plain_literal(v)
                                           for v in cond.expressions):
            return False
        return try_filter(b, cond.this, "in", cond.expressions)
    op = COMPARISONS.get(type(cond))
    if op is not None:
        left, right = cond.this, cond.expression
        if isinstance(left, exp.Column) and isinstance(right, exp.Column):
            if op != "=":
                return False
            return join_equality(b, cond, left, right)
        if op == "=" and isinstance(left, exp.Column) != isinstance(right, exp.Column):
            col, other = (left, right) if isinstance(left, exp.Column) else (right, left)
            if expression_join(b, cond, col, other):
                return True
        if plain_column(b, left) and plain_literal(right):
            return try_filter(b, left, op, [right])
        if plain_column(b, right) and plain_literal(left):
            return try_filter(b, right, FLIPPED[op], [left])
    return False


def join_equality(b: Builder, cond: exp.Expr, left: exp.Column, right: exp.Column) -> bool:
    """``a.x = b.y``: one variable for both columns when Python's equality of their
    values is DuckDB's (same types, integers with DECIMALs or BOOLEANs). Across
    types DuckDB casts one side (a VARCHAR to the other's type, failing on a string
    that does not convert; a DATE to TIMESTAMP; an integer or DECIMAL to DOUBLE):
    that side's cast is a derived variable of its FROM item, joined with the other
    column (:meth:`_cast_joins`); within one FROM item, a predicate (False). Types
    DuckDB cannot cast into each other are refused."""
    la, li = b._resolve(left)
    ra, ri = b._resolve(right)
    rels = dict(b.aliases)
    lc, rc = rels[la].columns[li], rels[ra].columns[ri]
    if (la, li) == (ra, ri):  # (x = x: true where x is not NULL)
        add_filter(b, left, "is not null", ())
        return True
    cast = join_cast(lc.type, rc.type)
    if cast is None:
        b.uf.union(b._key(la, lc.name), b._key(ra, rc.name))
        return True
    if cast == "refuse":
        lt, rt = SqlType.of_column(lc).sql_name, SqlType.of_column(rc).sql_name
        raise ExprError(cond, f"comparison of {lt} with {rt} in {cond.sql('duckdb')!r} "
                              "(DuckDB cannot cast one to the other)")
    if la == ra:
        return False
    node, (alias, idx), other = (left, (la, li), (ra, ri)) if cast == "left" else \
        (right, (ra, ri), (la, li))
    target = SqlType.of_column(rels[other[0]].columns[other[1]])
    b.join_casts.append((node, alias, target, other, cond))
    # (a NULL joins nothing; its cast is NULL)
    add_filter(b, node, "is not null", ())
    return True


def expression_join(b: Builder, cond: exp.Expr, col: exp.Column, expr: exp.Expr) -> bool:
    """``a.x = f(b.y, ...)``, an integer column equal to an integer expression over one
    other FROM item (TPC-DS Q47's and Q57's ``v1.rn = v1_lag.rn + 1``): a join, the
    expression a derived variable of its FROM item named as the column's variable (as
    a cross-type join's cast, :func:`cast_joins`), not a condition over the join's
    groups (every pair of rows with the other keys compared). A NULL result joins
    nothing: the expression's FROM item keeps only rows where it is not NULL. Other
    types stay conditions (Python's equality across them is not always DuckDB's)."""
    ca, ci = b._resolve(col)
    aliases = b._aliases_in(expr)
    if len(aliases) != 1 or ca in aliases:
        return False
    alias = next(iter(aliases))
    target = SqlType.of_column(dict(b.aliases)[ca].columns[ci])
    try:
        expr_type = b._atom_compiler(alias).value(expr).type
    except ExprError:
        return False
    if target.name != "INT" or expr_type.name != "INT":
        return False
    # (cast to the widest INT: an exact no-op, where the column's own width could fail
    # on a value DuckDB compares without error)
    b.join_casts.append((expr, alias, SqlType("INT", 0, 128), (ca, ci), cond))
    condition(b, exp.Not(this=exp.Is(this=expr.copy(), expression=exp.Null())))
    return True


def cast_joins(b: Builder) -> None:
    """The derived variables of the cross-type join equalities
    (:meth:`_join_equality`), each named as the other column's variable; where the
    FROM item has that variable already, the equality is a predicate of it."""
    for node, alias, target, (oa, oi), cond in b.join_casts:
        var = b.var_of(oa, oi)
        cast = exp.Cast(this=node.copy(), to=exp.DataType.build(target.sql_name))
        cast.meta["ivmflow_text"] = cond.sql("duckdb")  # (what a failed cast names)
        rel = dict(b.aliases)[alias]
        has: list[exp.Expr] = [exp.column(c.name, table=alias)
                               for i, c in enumerate(rel.columns)
                               if b.var_of(alias, i) == var]
        has += [b.derived_nodes[(alias, d.var)].copy() for d in
                b.derived.get(alias, []) if d.var == var]
        if has:
            condition(b, exp.EQ(this=cast, expression=has[0]))
            continue
        b._derive(cast, var, force=True)
        b.join_derived.append((alias, var))


def plain_column(b: Builder, node: exp.Expr) -> bool:
    """A column whose type the plain filters compare with constants as they are."""
    if not isinstance(node, exp.Column):
        return False
    alias, idx = b._resolve(node)
    return dict(b.aliases)[alias].columns[idx].type in ("INT", "FLOAT", "TEXT", "BOOL")


def plain_literal(node: exp.Expr) -> bool:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Neg):
        node = node.this
        return isinstance(node, exp.Literal) and not node.is_string
    return isinstance(node, (exp.Literal, exp.Boolean))


def condition(b: Builder, cond: exp.Expr) -> None:
    if simple_condition(b, cond):
        return
    aliases = b._aliases_in(cond)
    if len(aliases) > 1:
        # (applied to the join block's groups: see _glue_compiler)
        b.multi_conditions.append(cond)
        return
    alias = next(iter(aliases)) if aliases else b.aliases[0][0]
    compiler = b._atom_compiler(alias)
    src = compiler.predicate(cond)
    b.predicates.setdefault(alias, []).append(Predicate(src, cond.sql("duckdb")))
