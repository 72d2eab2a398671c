"""Constant-delay delta and full enumeration over the top part of the join tree.

Every output row holds exactly one tuple per top node. The rows *through* a tuple t of
node S are found by walking the top tree from S: downwards into a child's semi-join
tuples grouped by key (never dangling: V_s tuples join their whole subtree), upwards
into the parent's *live* tuples with the key (never a dead end: V_l tuples occur in the
result). So each step yields at least one row: constant delay.

For speed the walk is compiled to nested Python loops, once per start (node, kind):
``tuple`` (a top tuple changed; its own payload is replaced by the change),
``key i`` (boundary child i's payload changed at a key), ``full`` (from the root).

Example (the generated source for a 2-node path, bag semantics):
    >>> from operators.joinnode import JoinNode
    >>> from operators.ring import IntRing
    >>> from operators.state import DictState
    >>> st = DictState()
    >>> r = JoinNode("R", ("a", "b"), False, 0, True, "bag", IntRing(), st)
    >>> s = JoinNode("S", ("b", "c"), False, 1, True, "bag", IntRing(), st)
    >>> r.attach_child(s, ("b",)); r.finish(); s.finish()
    >>> e = Enumerator([r, s], ("a", "b", "c"), "bag", IntRing())
    >>> print(e.source(s, "tuple"))  # doctest: +NORMALIZE_WHITESPACE
    def enum(cands, f0, acc):
        get = acc.get
        for t0 in cands:
            k1 = t0[0]
            M1 = I1(k1)
            for t1 in members(N1_live0(k1, EMPTY)):
                f2 = f0 * bucket_count(M1, t1)
                row = (t1[0], t0[0], t0[1],)
                acc[row] = get(row, 0) + f2
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from core.codegen import define
from operators.joinnode import JoinNode
from operators.nodemaps import EMPTY, NO_MAP, count_in, counted, key_expr, members

EnumFn = Callable[[Any, Any, dict[Any, Any]], None]


class Enumerator:
    """Compiles and runs the row walks of one partition's top part."""

    def __init__(
        self, top_nodes: Sequence[JoinNode], out_vars: Sequence[str], mode: str, ring: Any
    ) -> None:
        self.nodes = list(top_nodes)
        self.out_vars = tuple(out_vars)
        self.mode = mode
        self.ring = ring
        self._cache: dict[tuple[int, str], EnumFn] = {}
        self.root = next(n for n in self.nodes if n.parent is None)

    # -- plan of a walk --------------------------------------------------------------
    def _steps(self, start: JoinNode) -> list[tuple[JoinNode, int, str, int]]:
        """(node, source step, 'down'|'up', child index) in walk order; step 0 is start."""
        steps: list[tuple[JoinNode, int, str, int]] = [(start, -1, "start", -1)]

        def expand(node: JoinNode, me: int, came_from: JoinNode | None) -> None:
            for i, child in enumerate(node.children):
                if child.top and child is not came_from:
                    steps.append((child, me, "down", i))
                    expand(child, len(steps) - 1, node)
            parent = node.parent
            if parent is not None and parent is not came_from:
                steps.append((parent, me, "up", node.pos_in_parent))
                expand(parent, len(steps) - 1, node)

        expand(start, 0, None)
        return steps

    def source(self, start: JoinNode, kind: str, *, delta: bool = False) -> str:
        return self._compile(start, kind, delta)[0]

    def _compile(self, start: JoinNode, kind: str,
                 delta: bool = False) -> tuple[str, dict[str, Any]]:
        steps = self._steps(start)
        env: dict[str, Any] = {"EMPTY": EMPTY, "mul": self.ring.mul, "add": self.ring.add,
                               "zero": self.ring.zero}
        # A delta walk adds into the global ``acc`` (rebound per epoch by the engine) and
        # starts from one tuple (``tuple``) or a set of them (``key i``).
        single = delta and kind == "tuple"
        head = "t0, f0" if single else "k, cands, f0" if delta else "cands, f0"
        lines = ([f"def enum({head}):", "    get = acc.get"] if delta
                 else ["def enum(cands, f0, acc):", "    get = acc.get"])
        indent = "    "
        counting = self.mode == "set"
        ring = self.mode == "ring"
        excluded_child = int(kind.split()[1]) if kind.startswith("key") else -1
        factor = "f0"  # the variable holding the product so far
        for j, (node, src, how, ci) in enumerate(steps):
            hoisted = False
            paired = False  # (the loop yields each tuple with its multiplicity)
            if how == "start":
                # A delta key walk's tuples share key k for the changed child: when that
                # child's index holds the multiplicities, their bucket is looked up once.
                hoisted = (delta and excluded_child == 0 and node.base_in_index
                           and not counting)
                if hoisted:
                    env["I0"] = node.index_read[0]
                    lines.append(f"{indent}M0 = I0(k)")
                if not single:
                    lines.append(f"{indent}for t0 in cands:")
            elif how == "up" and node.generalized and node.attrs == steps[src][0].key_attrs:
                # The parent's tuple with a key is the key itself: its live set there is
                # {key} or nothing, so test membership instead of looping over it.
                env[f"N{j}_livemap"] = node.live_index[ci]
                src_node = steps[src][0]
                k = key_expr(f"t{src}", src_node.attrs, src_node.scalar, src_node.key_attrs)
                lines += [f"{indent}t{j} = {k}", f"{indent}if t{j} in N{j}_livemap:"]
            else:
                src_node = steps[src][0]
                if how == "down":
                    name = f"N{j}_proj"
                    env[name] = node.proj_read
                    k = key_expr(f"t{src}", src_node.attrs, src_node.scalar, node.key_attrs)
                else:
                    name = f"N{j}_live{ci}"
                    env[name] = node.live_read[ci]
                    k = key_expr(f"t{src}", src_node.attrs, src_node.scalar, src_node.key_attrs)
                hoisted = (how == "up" and ci == 0 and node.base_in_index and not counting
                           and not (j == 0 and kind == "tuple"))
                if hoisted:
                    # Up from child 0 of a node that keeps its multiplicities in its
                    # first index: every tuple of this loop sits in one bucket of it,
                    # under the loop's own key, so that bucket is looked up once.
                    env[f"I{j}"] = node.index_read[0]
                    lines += [f"{indent}k{j} = {k}", f"{indent}M{j} = I{j}(k{j})"]
                    k = f"k{j}"
                if how == "down" and node.base_in_proj and not counting:
                    # A top leaf's group maps each tuple to its multiplicity: read both
                    # in the loop, no lookup per tuple.
                    paired = True
                    env["NO_ITEMS"], env["counted"] = NO_MAP, counted
                    lines.append(f"{indent}for t{j}, m{j} in counted({name}({k}, NO_ITEMS)):")
                else:
                    env["members"] = members
                    lines.append(f"{indent}for t{j} in members({name}({k}, EMPTY)):")
            if not (single and how == "start"):
                indent += "    "
            if counting:
                continue
            factors: list[str] = []
            own = not node.generalized and not (j == 0 and kind == "tuple")
            if own:
                if hoisted:
                    env["bucket_count"] = count_in
                mult = (f"m{j}" if paired else f"bucket_count(M{j}, t{j})" if hoisted
                        else node.mult_expr(f"t{j}", env, f"B{j}"))
                if ring:
                    env[f"P{j}"] = node.base_payload
                    factors.append(f"P{j}(t{j}, {mult})")
                else:
                    factors.append(mult)
            for i, child in enumerate(node.children):
                if child.top or (j == 0 and i == excluded_child):
                    continue
                env[f"L{j}_{i}"] = child.proj
                k = key_expr(f"t{j}", node.attrs, node.scalar, child.key_attrs)
                factors.append(f"L{j}_{i}[{k}]")
            if not factors:  # (the factor so far carries over)
                continue
            expr = factor
            for fac in factors:
                expr = f"mul({expr}, {fac})" if ring else f"{expr} * {fac}"
            factor = f"f{j + 1}"
            lines.append(f"{indent}{factor} = {expr}")
        last = factor
        cols = []
        for v in self.out_vars:
            for j, (node, _src, _how, _ci) in enumerate(steps):
                if v in node.attrs:
                    cols.append(f"t{j}" if node.scalar else f"t{j}[{node.attrs.index(v)}]")
                    break
            else:  # pragma: no cover - plans guarantee output variables are on top
                msg = f"output variable {v!r} is not in the top part"
                raise AssertionError(msg)
        lines.append(f"{indent}row = ({''.join(c + ', ' for c in cols).rstrip()})")
        if ring:
            lines.append(f"{indent}acc[row] = add(get(row, zero), {last})")
        else:
            lines.append(f"{indent}acc[row] = get(row, 0) + {last}")
        src_text = "\n".join(lines)
        src_text = src_text.replace(", )", ",)")
        return src_text, env

    def compiled(self, start: JoinNode, kind: str) -> EnumFn:
        """The compiled walk for a start (node, kind), cached."""
        return self._fn(start, kind)

    def delta_walk(self, start: JoinNode, kind: str) -> tuple[Callable[..., None],
                                                              dict[str, Any]]:
        """A fresh delta walk for a start: ``walk(t, factor)`` for ``tuple``,
        ``walk(key, cands, factor)`` for ``key i`` (cands: the live tuples with that key
        for child i), adding into the global ``acc`` of the
        returned globals, which the caller binds (and rebinds per epoch).

        >>> from operators.ring import IntRing
        >>> from operators.state import DictState
        >>> st = DictState()
        >>> r = JoinNode("R", ("a", "b"), False, 0, True, "bag", IntRing(), st)
        >>> s = JoinNode("S", ("b", "c"), False, 1, True, "bag", IntRing(), st)
        >>> r.attach_child(s, ("b",)); r.finish(); s.finish()
        >>> r.apply((1, 2), 1); s.apply((2, 3), 1)
        >>> walk, env = Enumerator([r, s], ("a", "b", "c"), "bag", IntRing()).delta_walk(
        ...     s, "tuple")
        >>> env["acc"] = {}; walk((2, 3), -1); env["acc"]
        {(1, 2, 3): -1}
        """
        text, env = self._compile(start, kind, delta=True)
        define(text, f"<delta {start.name} {kind}>", env)
        fn: Callable[..., None] = env["enum"]
        return fn, env

    def _fn(self, start: JoinNode, kind: str) -> EnumFn:
        cache_key = (start.id, kind)
        fn = self._cache.get(cache_key)
        if fn is None:
            text, env = self._compile(start, kind)
            define(text, f"<enumerate {start.name} {kind}>", env)
            fn = env["enum"]
            self._cache[cache_key] = fn
        return fn

    # -- entry points -----------------------------------------------------------------
    def full(self, acc: dict[Any, Any]) -> None:
        """All rows of the result, with their payloads (full enumeration)."""
        cands = members(self.root.proj.get((), EMPTY))
        one = 1 if self.mode == "set" else self.ring.one
        self._fn(self.root, "full")(list(cands), one, acc)
