"""SQL errors in the user's words: the file, line and column, the user's own line with a
caret under the place, and what was expected there. sqlglot's errors (a tokenizer that
stops at an unterminated string, a parser that names its expression classes, the
optimizer's unknown columns) are turned into that shape here; no parser class name,
token dump or traceback reaches the user.

Example:
    >>> import sqlglot
    >>> sql = "CREATE TABLE R(a INT);\\nSELECT a + FROM R"
    >>> try:
    ...     sqlglot.parse(sql, read="duckdb")
    ... except sqlglot.errors.ParseError as err:
    ...     print(syntax_error(err, sql, "q.sql"))
    q.sql: line 2, column 12: SQL syntax error: expected an expression after '+', found 'FROM'
        SELECT a + FROM R
                   ^
"""

from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError, TokenError

from core.errors import QueryError

_INDENT = "    "


def caret_lines(sql: str, offset: int) -> tuple[int, int, str]:
    """(line, column, the user's line and a caret under ``offset``), 1-based; tabs in
    the line are kept under the caret so that it lines up."""
    offset = max(0, min(offset, len(sql)))
    line_no = sql.count("\n", 0, offset) + 1
    start = sql.rfind("\n", 0, offset) + 1
    end = sql.find("\n", offset)
    text = sql[start:] if end < 0 else sql[start:end]
    col = offset - start + 1
    pad = "".join("\t" if ch == "\t" else " " for ch in text[: col - 1])
    return line_no, col, f"{_INDENT}{text}\n{_INDENT}{pad}^"


def at(sql: str, source: str, offset: int | None, message: str) -> str:
    """``source: line L, column C: message`` and the user's line with a caret (only
    ``source: message`` when the place is not known)."""
    if offset is None:
        return f"{source}: {message}"
    line_no, col, shown = caret_lines(sql, offset)
    return f"{source}: line {line_no}, column {col}: {message}\n{shown}"


def node_offset(node: exp.Expr | None) -> int | None:
    """Where the leftmost token under ``node`` that sqlglot placed starts."""
    if node is None:
        return None
    starts = [n.meta["start"] for n in node.walk() if n.meta and "start" in n.meta]
    return min(starts) if starts else None


def _node_end(node: exp.Expr) -> int | None:
    ends = [n.meta["end"] for n in node.walk() if n.meta and "end" in n.meta]
    return max(ends) if ends else None


# -- what lies around a place: blanks, comments, the next token -------------------------

_BLANK = re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/)*", re.S)


def _skip_blank(sql: str, offset: int) -> int:
    match = _BLANK.match(sql, offset)
    return match.end() if match else offset


def _token_at(sql: str, offset: int) -> str:
    """The token that starts at ``offset`` as the user wrote it, in words."""
    if offset >= len(sql):
        return "the end of the file"
    if sql[offset] == ";":
        return "the end of the statement"
    match = re.match(r"\w+|'[^'\n]*'?|\"[^\"\n]*\"?|<>|!=|<=|>=|::|\|\||\S", sql[offset:])
    assert match is not None
    return f"'{match.group(0)}'" if match.group(0)[0] not in "'\"" else match.group(0)


# -- the tokenizer: an unterminated string, quoted name or comment ----------------------

_OPENERS = (
    ("'", "'", "unterminated string literal: the quote ' that starts here is never closed"),
    ('"', '"', 'unterminated quoted name: the quote " that starts here is never closed'),
    ("$$", "$$", "unterminated $$ string: the $$ that starts here is never closed"),
    ("/*", "*/", "unterminated comment: the /* that starts here has no */"),
)


def _unterminated(sql: str) -> tuple[int, str] | None:
    """(offset, what) of the first string, quoted name or comment that never ends."""
    i, n = 0, len(sql)
    while i < n:
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        for opener, closer, what in _OPENERS:
            if not sql.startswith(opener, i):
                continue
            j = i + len(opener)
            while True:
                end = sql.find(closer, j)
                if end < 0:
                    return i, what
                if closer in "'\"" and sql.startswith(closer * 2, end):
                    j = end + 2  # (a doubled quote stands for itself)
                    continue
                break
            i = end + len(closer)
            break
        else:
            i += 1
    return None


def token_error(err: TokenError, sql: str, source: str) -> QueryError:
    """The tokenizer's error as the place the text cannot be read."""
    found = _unterminated(sql)
    if found is not None:
        return QueryError(at(sql, source, found[0], f"SQL syntax error: {found[1]}"))
    cause = str(err.__cause__ or "")
    match = re.search(r"from \d+:(\d+)", cause)
    if match:
        offset = int(match.group(1))
    elif err.start is not None:
        offset = min(err.start + 50, len(sql))  # (sqlglot quotes 50 characters each side)
    else:
        offset = None
    return QueryError(at(sql, source, offset, "SQL syntax error: the text cannot be read "
                                              "as SQL here (an unclosed quote or a stray "
                                              "character?)"))


# -- the parser: what was expected, in words --------------------------------------------

_CONSTRUCTS: dict[str, str] = {
    "EQ": "'='", "NEQ": "'<>'", "LT": "'<'", "LTE": "'<='", "GT": "'>'", "GTE": "'>='",
    "NullSafeEQ": "'<=>'", "Add": "'+'", "Sub": "'-'", "Mul": "'*'", "Div": "'/'",
    "IntDiv": "'//'", "Mod": "'%'", "DPipe": "'||'", "Neg": "'-'", "And": "AND",
    "Or": "OR", "Not": "NOT", "Like": "LIKE", "ILike": "ILIKE", "Between": "BETWEEN",
    "In": "IN", "Is": "IS", "Where": "WHERE", "Having": "HAVING", "Limit": "LIMIT",
    "Offset": "OFFSET", "Group": "GROUP BY", "Order": "ORDER BY", "Cast": "CAST",
    "TryCast": "TRY_CAST", "Case": "CASE", "If": "IF", "Alias": "AS", "Join": "JOIN",
    "Exists": "EXISTS", "Interval": "INTERVAL", "Extract": "EXTRACT",
}
_REQUIRED = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>")
_GOT = re.compile(r"^(Expected .*?) but got <Token .*")
_CLASS = re.compile(r"<class '[\w.]*?(\w+)'>")
_TOKEN = re.compile(r"<Token token_type: [\w.]+, text: (.*?), line: .*?>")


def _highlight_start(sql: str, line: int, col: int, highlight: str) -> int:
    """The offset of the token sqlglot highlights: it ends at (line, col), 1-based."""
    line_start = 0
    for _ in range(line - 1):
        nxt = sql.find("\n", line_start)
        if nxt < 0:
            break
        line_start = nxt + 1
    end = line_start + col  # (one past the token's last character)
    start = end - len(highlight)
    if highlight and sql[start:end] != highlight:
        found = sql.rfind(highlight, 0, end + 1)
        start = found if found >= 0 else start
    return max(0, min(start, len(sql)))


def _described(desc: str) -> tuple[str, bool, str | None]:
    """(what was expected, in words; whether the highlighted token is the culprit; the
    construct's own token when the highlight may be it)."""
    required = _REQUIRED.search(desc)
    if required:
        key, cls = required.groups()
        name = _CONSTRUCTS.get(cls, cls.upper())
        if cls == "Between":
            return "expected BETWEEN low AND high", False, name
        if key in ("this", "expression", "expressions"):
            return f"expected an expression after {name}", False, name
        return f"incomplete {name}: its {key} is missing", False, name
    if desc.startswith("Invalid expression / Unexpected token"):
        return "unexpected", True, None
    got = _GOT.match(desc)
    if got:
        return got.group(1).replace("Expected table name", "expected a table name") \
            .replace("Expected database name", "expected a schema name"), True, None
    if desc.startswith(("Expecting ", "Expected ")):
        words = desc.split(" ", 1)[1]
        words = re.sub(r"^\)", "')'", words)
        words = re.sub(r"^([\](}>])", r"'\1'", words)
        words = words.replace("TYPE after CAST", "a type after CAST(... AS")
        return f"expected {words}", False, None
    text = _TOKEN.sub(r"\1", _CLASS.sub(lambda m: _CONSTRUCTS.get(m.group(1),
                                                                  m.group(1).upper()), desc))
    return text[:1].lower() + text[1:], True, None


def syntax_error(err: ParseError, sql: str, source: str) -> QueryError:
    """The parser's first error as one place in the user's text and what was expected
    there."""
    first = err.errors[0] if err.errors else {}
    desc = str(first.get("description") or "")
    line, col = first.get("line"), first.get("col")
    highlight = str(first.get("highlight") or "")
    expected, culprit, construct = _described(desc)
    if not isinstance(line, int) or not isinstance(col, int):
        return QueryError(at(sql, source, None, f"SQL syntax error: {expected}"))
    start = _highlight_start(sql, line, col, highlight)
    after = _skip_blank(sql, start + len(highlight))
    at_end = after >= len(sql) or sql[after] == ";"
    this_token = construct is not None and highlight.upper() == construct.strip("'").upper()
    sqlglot_prev = desc.startswith(("Expected END after CASE", "Expected FROM or comma"))
    if culprit and expected == "unexpected":
        offset, message = start, f"unexpected {_token_at(sql, start)}"
    elif not culprit and (at_end or this_token or sqlglot_prev):
        offset = after
        message = f"{expected}, found {_token_at(sql, after)}"
    else:
        offset, message = start, f"{expected}, found {_token_at(sql, start)}"
    return QueryError(at(sql, source, offset, f"SQL syntax error: {message}"))


# -- set operations and other statements ------------------------------------------------

def set_operation(node: exp.SetOperation, sql: str) -> tuple[str, int | None]:
    """(the set operation as the user wrote it, where its keyword stands)."""
    kind = type(node).__name__.upper()
    name = kind if node.args.get("distinct", True) else f"{kind} ALL"
    end = _node_end(node.this)
    pattern = re.compile(rf"\b{kind}\b", re.I)
    match = pattern.search(sql, end + 1 if end is not None else 0)
    if match is None:
        return name, node_offset(node)
    return name, match.start()


SET_OPERATIONS = "set operations (UNION, INTERSECT, EXCEPT) are not supported yet"


def statement_start(sql: str, node: exp.Expr) -> int | None:
    """Where the statement holding ``node`` starts (after the ``;`` before it)."""
    offset = node_offset(node)
    if offset is None:
        return None
    return _skip_blank(sql, sql.rfind(";", 0, offset) + 1)


# -- the optimizer (qualify): unknown and ambiguous columns -----------------------------

_UNRESOLVED = re.compile(r"Column '(.+?)' could not be resolved(?: for table: '(.+?)')?"
                         r"\.(?: Line: (\d+), Col: (\d+))?")
_UNKNOWN = re.compile(r"Unknown column: (\S+)")
_AMBIGUOUS = re.compile(r"Ambiguous column '(.+?)'(?: \(Line: (\d+), Col: (\d+)\))?")


def _written(node: exp.Expr, sql: str) -> str:
    """``node``'s text as the user wrote it (sqlglot's optimizer renames)."""
    start, end = node_offset(node), _node_end(node)
    if start is None or end is None:
        return node.sql()
    return sql[start:end + 1]


def _column(select: exp.Expr, name: str, table: str | None = None,
            line: str | None = None, col: str | None = None) -> exp.Column | None:
    """The column reference the optimizer names: at (line, col) when it says so, else
    the first (qualified ones first when ``table`` is a hint)."""
    found = [c for c in select.find_all(exp.Column) if c.name.lower() == name.lower()
             and node_offset(c) is not None]
    if line is not None and col is not None:
        placed = [c for c in found if c.this.meta.get("line") == int(line)
                  and c.this.meta.get("col") == int(col)]
        if placed:
            return placed[0]
    if table:
        tabled = [c for c in found if c.table.lower() == table.lower()]
        found = tabled or found
    found.sort(key=lambda c: (not c.table, node_offset(c) or 0))
    return found[0] if found else None


def optimize_error(err: OptimizeError | ValueError, select: exp.Expr, sql: str,
                   source: str) -> QueryError:
    """sqlglot's optimizer error (it qualifies every column against the tables) as the
    column's place and what is wrong with it."""
    text = str(err).split("\n")[0]
    unresolved = _UNRESOLVED.search(text)
    if unresolved:
        name, table, line, col = unresolved.groups()
        node = _column(select, name, table, line, col)
        shown = _written(node, sql) if node is not None else name
        return QueryError(at(sql, source, node_offset(node),
                             f"unknown column '{shown}': no FROM item has such a column"))
    unknown = _UNKNOWN.search(text)
    if unknown:
        node = _column(select, unknown.group(1))
        if node is not None and node.table:
            table, _, name = _written(node, sql).rpartition(".")
            message = f"unknown column '{table}.{name}': {table} has no column {name}"
        else:
            message = f"unknown column '{unknown.group(1)}': no FROM item has such a column"
        return QueryError(at(sql, source, node_offset(node), message))
    ambiguous = _AMBIGUOUS.search(text)
    if ambiguous:
        name, line, col = ambiguous.groups()
        node = _column(select, name, None, line, col)
        return QueryError(at(sql, source, node_offset(node), f"ambiguous column '{name}': "
                             "qualify it with its table alias"))
    cleaned = _TOKEN.sub(r"\1", _CLASS.sub(lambda m: m.group(1).upper(), text))
    return QueryError(at(sql, source, None, cleaned))
