"""The delete check (DESIGN.md section 2): a delete of copies that are not there is
refused with its record before anything changes, without keeping the rows.

Per relation the query reads, the check keeps one of:

* nothing more, where an engine map already keeps each row's multiplicity (*held*: an
  atom node's ``base`` when a FROM item takes the relation's rows whole): a delete is
  checked against that map;
* **row digests** (the default): a multiset ``digest -> multiplicity`` of 64-bit
  digests of the rows (:class:`RowDigest`), about 90 bytes a distinct row in a Python
  dict, where the whole row cost 300-900; in the compiled build 8 bytes an entry of
  one copy (10-15 with the table's free slots; a count above 1 in a dict beside it)
  of native memory (:func:`digest_maps`: ``DigestCounts`` of ``core/native_maps.pyx``);
* **whole rows** ``row -> multiplicity``, only for a consumer that needs the rows back
  (:meth:`DeleteCheck.items`: the local runner's state checkpoint over Kafka).

A relation the query file declares but the query does not read keeps nothing: its
records are checked for shape and type only (by the view). ``validate=False``
(``ivmflow run --trust-deletes``) keeps nothing and checks no delete: for sources
consistent by construction, such as a database's change stream.

**Digests.** A row's digest is a 64-bit hash of its values in a canonical form:
integers, strings, booleans and NULL as they are; a FLOAT plus ``0.0`` (``-0.0`` is
``0.0``; NaN is one value, as DuckDB's ``NaN = NaN``); a DATE its day number; a
TIMESTAMP its text; a DECIMAL its text at the column's scale (``1.5`` and ``1.50`` in a
DECIMAL(15,2) column, ``-0.00`` and ``0.00``, are one value as in SQL: the canonical
form is a function of the value, so a valid delete is never refused), and its own
exact digits when it has more than the scale. The hash: interpreted, blake2b (64-bit
output) of the values' ``marshal`` bytes (format version 2: no back-references, so
equal rows give equal bytes whatever objects they share); in the compiled build
(:mod:`core.native`), ``row_digest64`` of ``core/native_sort.pyx``: a tag and length
per value and its bits through xxHash64's word step and avalanche, in C. A view
digests every row with the one hash its build binds (its rows are never compared
across builds). Both are stable: the same in every process and run (no salted
``hash()``).

**False accepts.** A delete is wrongly accepted only when the row it names has fewer
copies than it deletes and its digest equals the digest of rows present with enough
copies. With ``n`` distinct rows present in the relation, a bad delete is accepted with
probability at most ``n / 2**64`` (the hash's output taken as uniform, as blake2b's is;
the compiled build's is not cryptographic: rows crafted to collide could pass, rows
that occur do not): 4.7e-14 for the 866,602 rows of TPC-H SF 0.1, 5.4e-12 at 10^8
rows. Such a delete would then reach the engine as
if valid (a wrong answer from there on); a valid stream is never affected (equal rows,
equal digests). :data:`DIGEST_BITS` sets the width (tests force a few bits to show a
collision accepted as documented here).

Example:
    >>> from core.schema import Column, Relation
    >>> g = Relation("G", (Column("src", "INT"), Column("w", "DECIMAL", 2, 15)))
    >>> from decimal import Decimal as D
    >>> check = DeleteCheck({"G": g})
    >>> check.update("G", (1, D("2.50")), 2, "in.csv:1")
    >>> check.update("G", (1, D("2.5")), -1, "in.csv:2")   # the same value: fine
    >>> try:
    ...     check.update("G", (1, D("2.51")), -1, "in.csv:3")
    ... except InputError as err:
    ...     print(err.source, err.record, err.expected)
    in.csv:3 -,G,1,2.51 a delete of at most 0 copies present
    >>> check.describe()
    'row digests (64-bit)'
"""

from __future__ import annotations

import datetime
import hashlib
import marshal
import math
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from core.codegen import define
from core.errors import InputError, UsageError
from core.native import NativeBuildError, native_available, native_maps
from core.schema import Relation, Row

__all__ = ["DIGEST_BITS", "CheckMode", "DeleteCheck", "RowDigest", "digest_maps"]

DIGEST_BITS = 64
"""Width of a row digest in bits (read when a :class:`RowDigest` is made). The false
accept bound above is ``n / 2**DIGEST_BITS``; tests lower it to force collisions."""

CheckMode = Literal["digests", "rows", "off"]
"""What the check keeps per relation the query reads: row digests (default), whole rows
(for a consumer that reads them back), or nothing (``--trust-deletes``)."""

_NAN = math.nan


class RowDigest:
    """The digest of one relation's rows: :meth:`digest` for any row of the relation
    (values of its column types or NULL), :meth:`fast_lines` the same inline for
    generated code over rows of exact types without NULL.

    >>> from core.schema import Column, Relation
    >>> import datetime
    >>> r = Relation("R", (Column("d", "DATE"), Column("x", "FLOAT"), Column("s", "TEXT")))
    >>> dg = RowDigest(r)
    >>> dg.digest((datetime.date(1995, 3, 15), -0.0, "a")) == \\
    ...     dg.digest((datetime.date(1995, 3, 15), 0.0, "a"))
    True
    >>> dg.digest((None, 1.0, "a")) != dg.digest((None, 1.0, "b"))
    True
    """

    def __init__(self, relation: Relation, bits: int | None = None) -> None:
        self.relation = relation
        self.bits = DIGEST_BITS if bits is None else bits
        if self.bits < 1:
            msg = f"a digest needs at least 1 bit, got {self.bits}"
            raise ValueError(msg)
        self.hash: Callable[[tuple[Any, ...]], int] = blake2b_hash(self.bits)
        """The hash of a row's canonical values (:func:`blake2b_hash`; a compiled
        build's own, :meth:`bind_hash`)."""
        self._env: dict[str, Any] = {"HASH_dg": self.hash}
        general: list[str] = []
        for i, col in enumerate(relation.columns):
            v = f"row[{i}]"
            if col.type in ("INT", "TEXT", "BOOL"):
                general.append(v)
            elif col.type == "FLOAT":
                general.append(f"(None if {v} is None else NAN_dg if {v} != {v} "
                               f"else {v} + 0.0)")
                self._env["NAN_dg"] = _NAN
            elif col.type == "DATE":
                general.append(f"(None if {v} is None else {v}.toordinal())")
            elif col.type == "TIMESTAMP":
                general.append(f"(None if {v} is None else str({v}))")
            elif col.type == "DECIMAL":
                self._env[f"DEC{i}_dg"] = decimal_canon(col.scale)
                general.append(f"DEC{i}_dg({v})")
            else:
                self._env["CANON_dg"] = canonical
                general.append(f"CANON_dg({v})")
        source = ("def digest(row):\n"
                  f"    return HASH_dg(({''.join(g + ', ' for g in general)}))\n")
        define(source, f"<digest {relation.name}>", self._env)
        self.digest: Callable[[Row], int] = self._env["digest"]
        """The digest of a row of the relation (its values typed, NULL allowed)."""

    def fast_lines(self, row: str, out: str, tag: str,
                   ) -> tuple[list[str], dict[str, Any]]:
        """Statements (unindented) that set ``out`` to the digest of ``row``, a row of
        exactly the column types and no NULL, or ``return False`` first when a value's
        canonical form needs :meth:`digest` (a DECIMAL not at its column's scale, a
        negative zero, a NaN that is not the one ivmflow parses); and what they bind
        (names ending in ``tag``). Equal to :meth:`digest` on every row they digest."""
        env = {f"{k[:-3]}{tag}": v for k, v in self._env.items() if k.endswith("_dg")}
        lines: list[str] = []
        guards: list[str] = []
        parts: list[str] = []
        for i, col in enumerate(self.relation.columns):
            v = f"{row}[{i}]"
            if col.type in ("INT", "TEXT", "BOOL"):
                parts.append(v)
            elif col.type == "FLOAT":
                env[f"NAN{tag}"] = _NAN
                guards.append(f"({v} != {v} and {v} is not NAN{tag})")
                parts.append(f"{v} + 0.0")
            elif col.type == "DATE":
                parts.append(f"{v}.toordinal()")
            elif col.type == "TIMESTAMP":
                parts.append(f"str({v})")
            elif col.type == "DECIMAL":
                s = col.scale
                text = f"dec{i}{tag}"
                lines.append(f"{text} = str({v})")
                if s == 0:
                    guards += [f"'.' in {text}", f"'E' in {text}", f"{text} == '-0'"]
                else:
                    # (the point s places from the end: plain notation at the scale,
                    # from 4 places on a scientific text could put it there too)
                    guards.append(f"{text}[{-s - 1}:{-s}] != '.'")
                    if s >= 4:
                        guards.append(f"'E' in {text}")
                    env[f"NEGZ{i}{tag}"] = "-0." + "0" * s
                    guards.append(f"{text} == NEGZ{i}{tag}")
                parts.append(text)
            else:
                parts.append(f"CANON{tag}({v})")
        if guards:
            lines += [f"if {' or '.join(guards)}:", "    return False"]
        lines.append(f"{out} = HASH{tag}(({''.join(p + ', ' for p in parts)}))")
        return lines, env

    def bind_hash(self, row_hash: Callable[[tuple[Any, ...]], int]) -> None:
        """Digest with ``row_hash`` (64-bit, of the canonical values) from now on, masked
        to :attr:`bits`: a compiled build's C hash (``row_digest64`` of
        ``core/native_sort.pyx``), bound where it also binds the generated code's
        ``HASH`` global (:meth:`fast_lines`), before any row is digested."""
        if self.bits < 64:
            mask = (1 << self.bits) - 1

            def masked(t: tuple[Any, ...]) -> int:
                return row_hash(t) & mask

            row_hash = masked
        self.hash = row_hash
        self._env["HASH_dg"] = row_hash


def blake2b_hash(bits: int) -> Callable[[tuple[Any, ...]], int]:
    """The interpreted build's hash of a row's canonical values: blake2b, ``bits`` wide,
    of their marshal bytes (format version 2).

    >>> blake2b_hash(64)((1, "a")) == blake2b_hash(64)((1, "a")) < 2**64
    True
    """
    nbytes = min(64, (bits + 7) // 8)
    mask = (1 << bits) - 1
    dumps, blake2b, from_bytes = marshal.dumps, hashlib.blake2b, int.from_bytes

    def row_hash(t: tuple[Any, ...]) -> int:
        return from_bytes(blake2b(dumps(t, 2), digest_size=nbytes).digest(), "little") & mask

    return row_hash


def decimal_canon(scale: int) -> Callable[[Decimal | None], str | None]:
    """The canonical text of a DECIMAL value of a column at ``scale``: its text at the
    scale when it has no more digits (every zero is ``0.00``), else its own exact
    shortest text; equal values give equal texts, different values different ones.

    >>> c = decimal_canon(2)
    >>> [c(Decimal(t)) for t in ("1.5", "1.50", "-0.00", "0", "1.005", "1E+1")]
    ['1.50', '1.50', '0.00', '0.00', '1.005', '10.00']
    """
    quantum = Decimal(1).scaleb(-scale)
    zero = str(Decimal(0).scaleb(-scale))
    negative_zero = "-0." + "0" * scale if scale else "-0"

    def canon(value: Decimal | None) -> str | None:
        if value is None:
            return None
        text = str(value)
        # (as RowDigest.fast_lines tests it: plain notation at the scale, not -0)
        if text != negative_zero and (
                text[-scale - 1:-scale] == "." and (scale < 4 or "E" not in text) if scale
                else "." not in text and "E" not in text):
            return text
        if not value.is_finite():
            return f"x{value}"
        if not value:
            return zero
        try:
            q = value.quantize(quantum)
        except InvalidOperation:
            q = None
        if q is not None and q == value:
            return str(q)
        return str(value.normalize())

    return canon


def canonical(value: Any) -> Any:
    """A value of any column type as :mod:`marshal` takes it, equal values equal
    (the digest of a column with no type of its own: tuples of hidden join keys)."""
    if value is None or type(value) in (int, str, bool):
        return value
    if type(value) is float:
        return _NAN if value != value else value + 0.0
    if isinstance(value, tuple):
        return tuple(canonical(v) for v in value)
    if isinstance(value, Decimal):
        return ("D", decimal_canon(0)(value) if value == value.to_integral_value()
                else str(value.normalize()))
    if isinstance(value, datetime.datetime):
        return ("T", str(value))
    if isinstance(value, datetime.date):
        return ("d", value.toordinal())
    return ("r", repr(value))


def digest_maps(mode: str, on_compile: Callable[[], None] | None = None
                ) -> Callable[[str], MutableMapping[Any, int]] | None:
    """What a view's :class:`DeleteCheck` keeps digests in, by the native build's mode
    (:func:`core.native.native_mode`): ``DigestCounts`` of ``core/native_maps.pyx``
    (8 bytes an entry, native memory) where a build can run, else None (dicts). A
    build that fails gives dicts in mode ``auto`` and raises in mode ``on``.

    >>> digest_maps("off") is None
    True
    """
    if mode == "off" or DIGEST_BITS > 64 or native_available() is not None:
        return None
    try:
        module = native_maps(on_compile)
    except Exception as err:
        # (auto mode: as a failed build of the hot path, dicts and the same results;
        # the hot path's own build says why, once)
        if mode != "on":
            return None
        if isinstance(err, NativeBuildError):
            raise
        msg = f"the native build of core/native_maps.pyx failed: {err}"
        raise NativeBuildError(msg) from err
    make: Callable[[], MutableMapping[Any, int]] = module.DigestCounts
    return lambda _name: make()


class DeleteCheck:
    """The delete check of a view: ``relations`` (name -> relation) are those the query
    reads; ``mode`` what it keeps for them (:data:`CheckMode`); ``maps(name)`` the map
    that keeps a relation's digests or rows (a dict by default; a runner's keyed state
    on Spark and Flink).

    A relation can be *held* (:meth:`hold`): an engine map (an atom node's ``base``)
    already keeps the multiplicity of each of its rows that ``accepts`` (not None);
    those rows are checked against it and not kept here.

    >>> from core.schema import Column, Relation
    >>> g = Relation("G", (Column("src", "INT"), Column("dst", "INT")))
    >>> node_base = {(1, 2): 1}  # what the engine keeps once the insert is applied
    >>> check = DeleteCheck({"G": g})
    >>> check.hold("G", node_base, lambda row: row)
    >>> check.update("G", (1, 2), -1, "in.csv:3")  # present: fine (the engine applies it)
    >>> try:
    ...     check.update("G", (5, 6), -1, "in.csv:4")
    ... except InputError as err:
    ...     print(err.source, err.record, err.expected)
    in.csv:4 -,G,5,6 a delete of at most 0 copies present
    >>> rows = DeleteCheck({"G": g}, "rows")
    >>> rows.update("G", (1, 2), 2, "in.csv:1")
    >>> list(rows.items())
    [('G', (1, 2), 2)]
    """

    def __init__(self, relations: Mapping[str, Relation], mode: CheckMode = "digests",
                 maps: Callable[[str], MutableMapping[Any, int]] | None = None,
                 bits: int | None = None) -> None:
        if mode not in ("digests", "rows", "off"):
            msg = f"a delete check keeps digests, rows or nothing, not {mode!r}"
            raise ValueError(msg)
        self.mode: CheckMode = mode
        self.relations = dict(relations) if mode != "off" else {}
        """The relations checked (none when the check is off)."""
        make = maps if maps is not None else (lambda _name: {})
        self.counts: dict[str, MutableMapping[Any, int]] = {
            name: make(name) for name in self.relations}
        """Per relation, ``digest -> multiplicity`` (``row -> multiplicity`` in rows
        mode) of the rows no held map keeps."""
        self.digests: dict[str, RowDigest] = {
            name: RowDigest(rel, bits) for name, rel in self.relations.items()
        } if mode == "digests" else {}
        self.held: dict[str, tuple[Mapping[Any, int], Callable[[Row], Any]]] = {}
        self.bits = DIGEST_BITS if bits is None else bits

    def hold(self, relation: str, base: Mapping[Any, int],
             accepts: Callable[[Row], Any]) -> None:
        """Check ``relation``'s rows that ``accepts`` (not None) against ``base``, which
        the engine keeps up to date, instead of keeping them here. Call it before the
        first update."""
        if relation in self.relations:
            self.held[relation] = (base, accepts)

    def key(self, relation: str, row: Row) -> Any:
        """What :attr:`counts` keys ``row`` by: its digest, or the row itself."""
        dg = self.digests.get(relation)
        return row if dg is None else dg.digest(row)

    def _holder(self, relation: str, row: Row) -> Mapping[Any, int] | None:
        """The engine map that keeps ``row``'s multiplicity, or None (kept here)."""
        held = self.held.get(relation)
        return held[0] if held is not None and held[1](row) is not None else None

    def have(self, relation: str, row: Row) -> int:
        """Copies of ``row`` in ``relation`` now (of its digest, in digests mode; 0 for
        a relation not checked)."""
        counts = self.counts.get(relation)
        if counts is None:
            return 0
        base = self._holder(relation, row)
        return counts.get(self.key(relation, row), 0) if base is None else base.get(row, 0)

    def items(self) -> Iterator[tuple[str, Row, int]]:
        """``(relation, row, multiplicity)`` per distinct base tuple of the relations
        checked: only a check that keeps whole rows has them."""
        if self.mode != "rows":
            msg = ("the view keeps no base rows (its delete check keeps "
                   f"{self.describe()}); maintain(keep_rows=True) keeps them")
            raise UsageError(msg)
        for rel, counts in self.counts.items():
            for row, m in counts.items():
                yield rel, row, m
        for rel, (base, _accepts) in self.held.items():
            for row, m in base.items():
                yield rel, row, m

    def entries(self) -> int:
        """Entries kept (held maps are the engine's, not counted here)."""
        return sum(len(m) for m in self.counts.values())

    def check(self, relation: str, row: Row, dm: int, source: str,
              have: int | None = None) -> None:
        """Raise the error of a delete of ``-dm`` copies of ``row`` when fewer are
        present (``have``, if known)."""
        if dm >= 0:
            return
        if have is None:
            have = self.have(relation, row)
        if have + dm < 0:
            shown = ",".join("" if v is None else str(v) for v in row)
            raise InputError(
                source or "<updates>",
                f"-{-dm},{relation},{shown}" if dm != -1 else f"-,{relation},{shown}",
                f"a delete of at most {have} cop{'y' if have == 1 else 'ies'} present",
                f"a delete of {-dm}",
                "a delete must remove copies that were inserted before",
            )

    def update(self, relation: str, row: Row, dm: int, source: str) -> None:
        """Check, then count: a refused delete changes nothing. (A held row is only
        checked: the engine's map changes when the update is applied to it; a relation
        not checked is not looked at.)"""
        counts = self.counts.get(relation)
        if counts is None:
            return
        base = self._holder(relation, row)
        if base is not None:
            if dm < 0 and base.get(row, 0) + dm < 0:
                self.check(relation, row, dm, source, base.get(row, 0))
            return
        key = self.key(relation, row)
        have = counts.get(key, 0)
        n = have + dm
        if n > 0:
            counts[key] = n
        elif n == 0:
            del counts[key]
        else:
            self.check(relation, row, dm, source, have)

    def describe(self) -> str:
        """What runs, in a few words (the run's summary line): ``row digests
        (64-bit)``, ``whole rows``, ``off``."""
        if self.mode == "off":
            return "off (--trust-deletes)"
        if self.mode == "rows":
            return "whole rows (kept for the state checkpoint)"
        if self.relations and set(self.held) == set(self.relations):
            return "against the rows the joins keep"
        return f"row digests ({self.bits}-bit)"

    def explain(self, declared: list[str]) -> str:
        """Per relation, what the check keeps (``ivmflow explain``); ``declared``: every
        relation the query file declares."""
        if self.mode == "off":
            return "off (--trust-deletes): deletes are not checked, nothing is kept"
        what = {"digests": f"row digests ({self.bits}-bit)", "rows": "whole rows"}[self.mode]
        kept = [n for n in self.relations if n not in self.held]
        parts = []
        if kept:
            parts.append(f"{what} of {', '.join(kept)}")
        if self.held:
            parts.append(f"{', '.join(self.held)} against the rows the join keeps")
        unread = [n for n in declared if n not in self.relations]
        if unread:
            parts.append(f"{', '.join(unread)} not read: shape and type only")
        return "; ".join(parts) if parts else "no relation"
