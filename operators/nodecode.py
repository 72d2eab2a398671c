"""Every operation of a join tree's nodes (:class:`operators.joinnode.JoinNode`), as
generated code: the one definition, run as Python (interpreted) or translated by
:mod:`core.native` (compiled).

A tree's code is one namespace, compiled once when its last node is finished
(:func:`compile_tree`); node ``n``'s functions and maps are named with the suffix
``_n``, and a node calls another's functions by name, so a binding replaced later
(``bind_emit``, ``bind_keyhook``) is seen by every caller:

* ``apply_n(t, dm)``: the R-update of an atom node (children unrolled, keys inlined):
  its multiplicity, index buckets and counter, then, when every child supports the
  tuple, the change of its semi-join group (top) or of its projection (lower);
* ``sj_insert_n(t)`` / ``sj_delete_n(t)``: the S-update of a top node (t enters or
  leaves V_s); ``live_n(t)`` / ``dead_n(t)``: the liveness walks; ``support_n(i, k,
  appear)``: the P-update of a top node whose child ``i`` gained or lost key ``k``
  (:mod:`operators.nodewalks`);
* ``boundary_n(i, k, old, new)``: a lower child's projection changed at ``k`` (a top
  node): the support change, then the enumeration hook; ``lower_n_i(i, k, old, new)``:
  the same for a lower node, whose tuples with that key change their payload or count.

Payloads are inlined as integers (multiplicities, supports) or called through the
node's ring (aggregate vectors); ``base_payload(t, m)`` must be linear in ``m``, so a
change of ``dm`` copies adds ``base_payload(t, dm)``. The expressions that other
generated code reads a node's multiplicities with are :func:`mult_expr` and
:func:`count_expr`.

Example:
    >>> from operators.joinnode import JoinNode
    >>> from operators.ring import IntRing
    >>> from operators.state import DictState
    >>> leaf = JoinNode("S", ("b",), False, 1, True, "bag", IntRing(), DictState())
    >>> leaf.finish()
    >>> print(tree_source(leaf)[0].splitlines()[0])
    def sj_insert_0(t):
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core.codegen import SMALL_BUCKET, define, set_add, set_discard
from operators.nodemaps import KeyedBase, count_in, counted, key_expr, members, stored_key_expr
from operators.nodewalks import boundary_lines, group_lines, live_test, sj_lines, walk_lines
from operators.ring import IntRing
from operators.state import read_only_get

if TYPE_CHECKING:
    from operators.joinnode import JoinNode

__all__ = ["Payloads", "compile_tree", "count_expr", "mult_expr", "pack_payloads",
           "tree_nodes", "tree_source"]


class Payloads:
    """Source of a node's payload arithmetic: integers inlined (``a * b``), other rings
    called (``rmul(a, b)``, bound in the namespace); a node's ``base_payload(t, m)``
    is ``m`` by default, else a call of ``P_n``.

    >>> from operators.joinnode import JoinNode
    >>> from operators.ring import VectorRing
    >>> from operators.state import DictState
    >>> env = {}
    >>> ring = Payloads(JoinNode("S", ("b",), False, 1, True, "ring", VectorRing(1),
    ...                          DictState(), lambda t, m: (m, m * t[0])), env)
    >>> ring.mul("d", "x"), ring.base("t", "dm"), sorted(env)[:2]
    ('rmul(d, x)', 'P_0(t, dm)', ['P_0', 'radd'])
    """

    def __init__(self, node: JoinNode, env: dict[str, Any]) -> None:
        self.ints = isinstance(node.ring, IntRing)
        self.node = node
        if not self.ints:
            ring = node.ring
            env.update(radd=ring.add, rsub=ring.sub, rmul=ring.mul, rneg=ring.neg,
                       rcount=ring.count, rzero=ring.zero, rone=ring.one)
            env.setdefault("rpack", unpacked)
        if not node.base_payload_default:
            env[f"P_{node.num}"] = node.base_payload
        self.zero = "0" if self.ints else "rzero"
        self.one = "1" if self.ints else "rone"

    def base(self, t: str, m: str) -> str:
        """The payload of ``m`` copies of tuple ``t`` of this node."""
        return m if self.node.base_payload_default else f"P_{self.node.num}({t}, {m})"

    def add(self, a: str, b: str) -> str:
        return f"{a} + {b}" if self.ints else f"radd({a}, {b})"

    def sub(self, a: str, b: str) -> str:
        return f"{a} - {b}" if self.ints else f"rsub({a}, {b})"

    def mul(self, a: str, b: str) -> str:
        return f"{a} * {b}" if self.ints else f"rmul({a}, {b})"

    def neg(self, a: str) -> str:
        return f"-{a}" if self.ints else f"rneg({a})"

    def store(self, a: str) -> str:
        """Payload ``a`` as a projection stores it: a ring's through ``rpack`` (as it
        is, unless a native build's row packer is bound there: :func:`pack_payloads`),
        an integer as it is. (Keys go through ``kpack``:
        :func:`~operators.nodemaps.stored_key_expr`.)"""
        return a if self.ints else f"rpack({a})"

    def nonzero(self, a: str) -> str:
        """True when a payload has derivations (is kept in a projection)."""
        return a if self.ints else f"rcount({a})"

    def product(self, factors: list[str]) -> str:
        """``factors`` multiplied left to right (the ring's one when there are none)."""
        if not factors:
            return self.one
        expr = factors[0]
        for f in factors[1:]:
            expr = self.mul(expr, f)
        return expr


def mult_expr(node: JoinNode, var: str, env: dict[str, Any], name: str) -> str:
    """Generated code for the multiplicity of this node's tuple ``var`` (present),
    binding what it reads in ``env`` under ``name``: a lookup and a bucket read
    (:func:`operators.nodemaps.count_in`) where the multiplicities live in the first
    index's buckets or in the groups, one lookup otherwise."""
    if node.base_in_index or node.base_in_proj:  # (a compact dict bucket)
        env[name] = node.index_read[0] if node.base_in_index else node.proj_read
        env["bucket_count"] = count_in
        keys = node.children[0].key_attrs if node.base_in_index else node.key_attrs
        k = key_expr(var, node.attrs, node.scalar, keys)
        return f"bucket_count({name}({k}), {var})"
    env[name] = node.base
    return f"{name}[{var}]"


def count_expr(node: JoinNode, var: str, env: dict[str, Any], name: str) -> str:
    """Generated code for the stored multiplicity of this node's tuple ``var``, 0
    when it is absent (what :attr:`base` ``.get(var, 0)`` reads), binding what it
    reads in ``env`` under names starting with ``name``: C-level lookups, and where
    the multiplicities live in buckets one call of
    :func:`operators.nodemaps.count_in` (a bare tuple is compared, not looked up)."""
    if node.base_in_index or node.base_in_proj:
        return mult_expr(node, var, env, name)  # (bucket_count reads 0 when absent)
    if isinstance(node.base, KeyedBase):
        env[name] = node.proj_read
        return f"{name}({key_expr(var, node.attrs, node.scalar, node.key_attrs)}, 0)"
    env[name] = read_only_get(node.base)
    return f"{name}({var}, 0)"


# -- the tree ------------------------------------------------------------------------
def tree_nodes(root: JoinNode) -> list[JoinNode]:
    """The nodes of ``root``'s tree, parents before children."""
    out = [root]
    for node in out:
        out.extend(node.children)
    return out


def bind_maps(node: JoinNode, env: dict[str, Any]) -> None:
    """Bind node ``n``'s maps in the tree's namespace: ``proj_n`` (``projget_n``: its
    ``get``), ``base_n``, ``index_n_i`` and ``L_n_i`` (the live index for
    child ``i``), and the read-only lookups ``projread_n``, ``indexread_n_i`` (all of
    them: ``indexreads_n``; see :func:`operators.state.read_only_get`)."""
    n = node.num
    env[f"proj_{n}"], env[f"projget_{n}"] = node.proj, node.proj.get
    env[f"projread_{n}"] = node.proj_read
    env[f"base_{n}"], env[f"baseget_{n}"] = node.base, node.base.get
    env[f"indexreads_{n}"] = node.index_read
    for i in range(len(node.children)):
        env[f"index_{n}_{i}"] = node.index[i]
        env[f"indexread_{n}_{i}"] = node.index_read[i]
        env[f"L_{n}_{i}"] = node.live_index[i]
    if node.unit_group is not None:
        env[f"ugroup_{n}"], env[f"ugroupget_{n}"] = node.unit_group, node.unit_group.get
    env[f"emit_{n}"] = node._emit_via_hook
    env[f"keyhook_{n}"] = node._key_via_hook


def tree_source(root: JoinNode) -> tuple[str, dict[str, Any]]:
    """The source of every operation of ``root``'s tree (see the module doc) and the
    namespace it runs in."""
    # (the readers of compact buckets, operators.nodemaps)
    env: dict[str, Any] = {"members": members, "counted": counted, "bucket_count": count_in,
                           "kpack": unpacked}  # (pack_payloads binds a packer)
    lines: list[str] = []
    nodes = tree_nodes(root)
    for num, node in enumerate(nodes):
        node.num = num
    for node in nodes:
        bind_maps(node, env)
        pay = Payloads(node, env)
        if node.top:
            lines += sj_lines(node) + walk_lines(node)
            if any(not c.top for c in node.children):
                lines += boundary_lines(node, pay)
        else:
            for i in range(len(node.children)):
                lines += lower_child_lines(node, i, pay)
        if not node.generalized:
            lines += apply_lines(node, pay)
        if len(node.children) > 1:
            lines += supported_lines(node)
    return "\n".join(lines), env


def unpacked(payload: Any) -> Any:
    """``rpack`` and ``kpack`` where nothing packs: the payload or key as it is."""
    return payload


def pack_payloads(root: JoinNode, pack: Callable[[Any], Any]) -> bool:
    """Bind ``pack`` as ``rpack`` in the namespace of ``root``'s tree (compiled:
    :func:`compile_tree`), so its projections store ring payloads packed (a native
    build's :mod:`core.native_rows`: the vector ``(count, count, DECIMAL)`` in 64 bytes
    where the tuple with its values takes 168); and as ``kpack``, so every map of the
    tree stores a new key of several values packed (:func:`~operators.nodemaps.
    stored_key_expr`), whatever its payloads. Packed rows read as the tuples they hold
    (indexing, iteration, equality, hash), so the ring's arithmetic and every reader
    stay as they are. False (no ``rpack`` bound) where the payloads are integers."""
    env = root.env
    env["kpack"] = pack
    if "rpack" not in env:
        return False
    env["rpack"] = pack
    return True


def supported_lines(node: JoinNode) -> list[str]:
    """``supported_n(t)``: how many children's projections hold ``t``'s key (CROWN's
    counter, read where a node with two or more children would store it; a
    generalized node's ``t`` is its key)."""
    n = node.num
    lines = [f"def supported_{n}(t):", "    c = 0"]
    for child in node.children:
        k = key_expr("t", node.attrs, node.scalar, child.key_attrs)
        lines += [f"    if {k} in proj_{child.num}:", "        c += 1"]
    return lines + ["    return c"]


def compile_tree(root: JoinNode) -> None:
    """Compile :func:`tree_source` and bind it: each node's ``apply`` and namespace,
    and each lower node's ``notify_n`` (its parent's handler)."""
    text, env = tree_source(root)
    define(text, f"<nodes {root.name}>", env)
    for node in tree_nodes(root):
        n = node.num
        node.env = env
        if not node.generalized:
            node.apply = env[f"apply_{n}"]
        parent = node.parent
        if not node.top and parent is not None:
            env[f"notify_{n}"] = env[f"boundary_{parent.num}" if parent.top
                                     else f"lower_{parent.num}_{node.pos_in_parent}"]


# -- compact dict buckets (operators.nodemaps: a bare tuple is one of multiplicity 1) --
def bucket_old_lines(indent: str, b: str) -> list[str]:
    """``old``: the multiplicity of ``t`` in dict bucket ``b`` (None: absent; a list
    holds its tuples once each)."""
    i2 = indent + "    "
    return [f"{indent}if {b} is None:", f"{i2}old = 0", f"{indent}elif isinstance({b}, dict):",
            f"{i2}old = {b}.get(t, 0)", f"{indent}elif isinstance({b}, list):",
            f"{i2}old = 1 if t in {b} else 0",
            f"{indent}else:", f"{i2}old = 1 if {b} == t else 0"]


def bucket_put_lines(indent: str, table: str, key: str, b: str,
                     stored_key: str | None = None) -> list[str]:
    """Store multiplicity ``new`` (not 0, not ``old``) of ``t`` in ``table[key]``, whose
    bucket was ``b`` (read before, holding ``t`` ``old`` times); a new bucket under
    ``stored_key`` (:func:`operators.nodemaps.stored_key_expr`), when given. Tuples of
    multiplicity 1 stay a list up to :data:`~core.codegen.SMALL_BUCKET` of them (a
    dict of 2 to 5 costs 184-232 bytes, a list of 4 96); a multiplicity above 1, or
    one tuple more, makes the bucket a dict.

    >>> print("\\n".join(bucket_put_lines("", "index", "k", "b")))
    if isinstance(b, dict):
        b[t] = new
    elif b is None:
        index[k] = t if new == 1 and t is not None else {t: new}
    elif isinstance(b, list):
        if new == 1 and len(b) < 64:
            index[k] = b + [t]
        else:
            index[k] = {**dict.fromkeys(b, 1), t: new}
    elif old:
        index[k] = {t: new}
    elif new == 1:
        index[k] = [b, t]
    else:
        index[k] = {b: 1, t: new}
    """
    i2 = indent + "    "
    return [f"{indent}if isinstance({b}, dict):", f"{i2}{b}[t] = new",
            f"{indent}elif {b} is None:",
            f"{i2}{table}[{stored_key or key}] = t if new == 1 and t is not None "
            "else {t: new}",
            f"{indent}elif isinstance({b}, list):",
            f"{i2}if new == 1 and len({b}) < {SMALL_BUCKET}:",
            f"{i2}    {table}[{key}] = {b} + [t]",
            f"{i2}else:", f"{i2}    {table}[{key}] = {{**dict.fromkeys({b}, 1), t: new}}",
            f"{indent}elif old:", f"{i2}{table}[{key}] = {{t: new}}",
            f"{indent}elif new == 1:", f"{i2}{table}[{key}] = [{b}, t]",
            f"{indent}else:", f"{i2}{table}[{key}] = {{{b}: 1, t: new}}"]


def bucket_remove_lines(indent: str, table: str, key: str, b: str,
                        on_empty: list[str] | None = None) -> list[str]:
    """Remove ``t`` (present) from the dict bucket ``b`` = ``table[key]``: one of one
    multiplicity left (not None) is stored bare again; the last one deletes the key and
    runs ``on_empty`` (relative)."""
    i2 = indent + "    "
    return [f"{indent}if isinstance({b}, dict) and len({b}) > 1:", f"{i2}del {b}[t]",
            f"{i2}if len({b}) == 1:", f"{i2}    for {b}_one, {b}_m in {b}.items():",
            f"{i2}        if {b}_m == 1 and {b}_one is not None:",
            f"{i2}            {table}[{key}] = {b}_one",
            f"{indent}elif isinstance({b}, list):", f"{i2}{b}.remove(t)",
            f"{i2}if len({b}) == 1:", f"{i2}    {b}_one = {b}[0]",
            f"{i2}    {table}[{key}] = {b}_one if {b}_one is not None else {{{b}_one: 1}}",
            f"{indent}else:", f"{i2}del {table}[{key}]",
            *(i2 + ln for ln in on_empty or [])]


# -- R-updates -----------------------------------------------------------------------
def apply_lines(node: JoinNode, pay: Payloads) -> list[str]:
    """``apply_n(t, dm)``: add ``dm`` (signed) copies of ``t``; the caller has validated
    deletes. The tuple's multiplicity is kept in its first child index's bucket (an
    atom with children), in ``base`` (a leaf), in its group (a top leaf over integers:
    :func:`proj_leaf_lines`), under its key (a key leaf: its projection is its base)
    or not at all (a sum leaf: only the payload sum per key)."""
    n = node.num
    key = key_expr("t", node.attrs, node.scalar, node.key_attrs)
    if node.sum_leaf:  # (the payload of dm copies, added at the key)
        return [f"def apply_{n}(t, dm):", f"    k = {key}", f"    d = {pay.base('t', 'dm')}",
                *proj_add_lines(node, pay, "    ", "k", "d", support=False)]
    if isinstance(node.base, KeyedBase):  # (a key leaf's payload is its multiplicity)
        return [f"def apply_{n}(t, dm):", f"    k = {key}",
                *proj_add_lines(node, pay, "    ", "k", "dm", node.counting, nonzero=True)]
    if node.base_in_proj:
        return proj_leaf_lines(node)
    keys = [key_expr("t", node.attrs, node.scalar, c.key_attrs) for c in node.children]
    nc = len(keys)
    if nc:
        # The multiplicity is kept in the first child index's bucket (tuple -> count).
        c0 = node.children[0].num
        put = bucket_put_lines("            ", f"index_{n}_0", "k0", "b0", stored_key_expr(
            "t", node.attrs, node.scalar, node.children[0].key_attrs, "k0"))
        lines = [f"def apply_{n}(t, dm):", f"    k0 = {keys[0]}",
                 f"    b0 = index_{n}_0.get(k0)", *bucket_old_lines("    ", "b0"),
                 "    new = old + dm", "    if old == 0:", "        c = 0",
                 *(ln[4:] for ln in put), f"        if k0 in proj_{c0}:",
                 "            c += 1"]
    else:
        # A leaf's counter would always be 0: it keeps none.
        lines = [f"def apply_{n}(t, dm):", f"    old = baseget_{n}(t, 0)", "    new = old + dm",
                 "    if old == 0 or new:", f"        base_{n}[t] = new"]
    for i, k in enumerate(keys[1:], 1):
        lines.append(f"        k = {k}")
        if node.index_shared[i] is None and not node.index_whole[i]:
            # (else the earlier child's index holds it, or the first one does)
            lines += set_add("        ", f"index_{n}_{i}", "k", "b", stored_key=stored_key_expr(
                "t", node.attrs, node.scalar, node.children[i].key_attrs, "k"))
        lines += [f"        if k in proj_{node.children[i].num}:", "            c += 1"]
    if nc == 1:
        # One child: the count is whether the child's projection holds the key
        # (derived, not stored: one map less to write per tuple).
        lines += ["    else:", f"        c = 1 if k0 in proj_{c0} else 0", "        if new:",
                  *put, "    if c == 1:"]
    elif nc:
        # (how many children support t is read from their projections, not stored: a
        # counter would hold an entry per tuple of the node)
        lines += ["    else:", f"        c = supported_{n}(t)", "        if new:", *put,
                  f"    if c == {nc}:"]
    else:
        lines.append("    if True:")
    if node.top:
        lines += top_change_lines(node, pay)
    elif node.counting:  # (the tuple's key counts it while every child supports it)
        lines += ["        if old == 0 or new == 0:", f"            k = {key}",
                  "            d = 1 if old == 0 else -1",
                  *proj_add_lines(node, pay, "            ", "k", "d", support=True)]
    else:
        factors = [pay.base("t", "dm")]
        factors += [f"proj_{c.num}[{k}]" for c, k in zip(node.children, keys)]
        lines += [f"        k = {key}", f"        d = {pay.product(factors)}",
                  *proj_add_lines(node, pay, "        ", "k", "d", support=False)]
    lines += ["    if new == 0:"]
    if not nc:
        lines.append(f"        del base_{n}[t]")
    if nc:
        # (old > 0 here, so b0 is the bucket that holds t)
        lines += bucket_remove_lines("        ", f"index_{n}_0", "k0", "b0")
    for i, k in enumerate(keys[1:], 1):
        if node.index_shared[i] is None and not node.index_whole[i]:
            lines += [f"        k = {k}", *set_discard("        ", f"index_{n}_{i}", "k", "b")]
    return lines


def top_change_lines(node: JoinNode, pay: Payloads) -> list[str]:
    """A top tuple that every child supports changed multiplicity (``old`` -> ``new``):
    it entered or left V_s (the S-update, inlined) or changed payload. It is live
    exactly when its key is, so it is passed to the enumeration (``emit_n``) then:
    an insertion after the state absorbed it, a deletion before (CROWN, 5.2)."""
    n = node.num
    live = live_test(node, "k")
    k = key_expr("t", node.attrs, node.scalar, node.key_attrs)
    group_add, group_remove = group_lines(node, "            ")
    # (a change of dm copies has payload base(t, dm), base being linear in m)
    up, down, change = (("1", "-1", "") if node.counting else
                        (pay.base("t", "dm"),) * 3)
    lines = [f"        k = {k}", "        if old == 0:", *group_add, f"            if {live}:"]
    if node.children:
        lines.append(f"                live_{n}(t)")
    lines += [f"                emit_{n}(t, {up})", "        elif new == 0:",
              f"            if {live}:", f"                emit_{n}(t, {down})"]
    if node.children:
        lines.append(f"                dead_{n}(t)")
    lines += group_remove
    if change:
        lines += [f"        elif {live}:", f"            emit_{n}(t, {change})"]
    return lines


def proj_leaf_lines(node: JoinNode) -> list[str]:
    """``apply_n`` of a top leaf over integers, which keeps its multiplicities in its
    groups (tuple -> multiplicity): the same steps as :func:`top_change_lines` (group
    and parent support first, then the live change; a delete is enumerated before the
    tuple leaves its group), on one group lookup. A leaf's tuples are all in V_s."""
    n = node.num
    live = live_test(node, "k")
    k = key_expr("t", node.attrs, node.scalar, node.key_attrs)
    one, minus_one = ("1", "-1") if node.counting else ("new", "-old")
    appear: list[str] = []
    disappear: list[str] = []
    if node.parent is not None:
        call = f"support_{node.parent.num}({node.pos_in_parent}, k, "
        appear, disappear = [f"        {call}True)"], [f"            {call}False)"]
    if node.unit_group is not None:
        return unit_group_lines(node, live, one, minus_one, appear, disappear)
    stored = stored_key_expr("t", node.attrs, node.scalar, node.key_attrs, "k")
    put = bucket_put_lines("        ", f"proj_{n}", "k", "group", stored)
    lines = [f"def apply_{n}(t, dm):", f"    k = {k}", f"    group = proj_{n}.get(k)",
             "    if group is None:",
             "        new = dm",  # (a delete of an absent tuple was refused before)
             f"        proj_{n}[{stored}] = t if new == 1 and t is not None else {{t: new}}",
             *appear, f"        if {live}:",
             f"            emit_{n}(t, {one})", "        return",
             *bucket_old_lines("    ", "group"), "    new = old + dm", "    if old == 0:",
             *put, f"        if {live}:", f"            emit_{n}(t, {one})",
             "    elif new == 0:", f"        if {live}:", f"            emit_{n}(t, {minus_one})",
             *bucket_remove_lines("        ", f"proj_{n}", "k", "group",
                                  [ln.strip() for ln in disappear]),
             "    else:", *put]
    if not node.counting:
        lines += [f"        if {live}:", f"            emit_{n}(t, new - old)"]
    return lines


def unit_group_lines(node: JoinNode, live: str, one: str, minus_one: str,
                     appear: list[str], disappear: list[str]) -> list[str]:
    """:func:`proj_leaf_lines` for a top leaf whose one group (key ``()``) is a field
    map, ``ugroup_n`` (:attr:`~operators.joinnode.JoinNode.unit_group`): the same
    steps, the group stored as ``proj_n[()]`` from its first tuple to its last, and
    the multiplicity written there (never a bare tuple: the map holds each tuple's
    fields in its slot)."""
    n = node.num
    return [f"def apply_{n}(t, dm):", "    k = ()", f"    old = ugroupget_{n}(t, 0)",
            "    new = old + dm", "    if old == 0:", f"        ugroup_{n}[t] = new",
            f"        if len(ugroup_{n}) == 1:", f"            proj_{n}[k] = ugroup_{n}",
            *("    " + ln for ln in appear), f"        if {live}:",
            f"            emit_{n}(t, {one})", "    elif new == 0:", f"        if {live}:",
            f"            emit_{n}(t, {minus_one})", f"        del ugroup_{n}[t]",
            f"        if len(ugroup_{n}) == 0:", f"            del proj_{n}[k]",
            *disappear, "    else:", f"        ugroup_{n}[t] = new",
            *([f"        if {live}:", f"            emit_{n}(t, new - old)"]
              if not node.counting else [])]


# -- projections of the lower part ---------------------------------------------------
def proj_add_lines(node: JoinNode, pay: Payloads, indent: str, key: str, d: str,
                   support: bool, nonzero: bool = False, tuple_var: str = "t") -> list[str]:
    """Lines (at ``indent``) adding payload ``d`` (a name) to this lower node's
    projection at ``key``, then telling the parent (``notify_n(pos, key, old, new)``,
    None for an absent key): every change of the payload, or with ``support`` only its
    appearing and going (``True``/``None``: a count or a multiplicity, set mode and key
    leaves). ``nonzero``: ``d`` is never zero (not tested). ``tuple_var``: the node's
    tuple the key was projected from (a new key is stored as
    :func:`~operators.nodemaps.stored_key_expr` says)."""
    n = node.num
    i2 = indent + "    "

    def tell(old: str, new: str) -> list[str]:
        if node.parent is None:  # (a lower root has no one to tell)
            return []
        return [f"notify_{n}({node.pos_in_parent}, {key}, {old}, {new})"]

    # (a new key of several values is stored packed too; an existing key's entry keeps
    # the key object it was stored with)
    stored_key = stored_key_expr(tuple_var, node.attrs, node.scalar, node.key_attrs, key)
    first = [f"proj_{n}[{stored_key}] = {pay.store(d)}",
             *tell("None", "True" if support else d)]
    if not (support or nonzero):  # (a zero payload is no derivation: not stored)
        first = [f"if {pay.nonzero(d)}:", *("    " + ln for ln in first)]
    return [f"{indent}p = projget_{n}({key})", f"{indent}if p is None:",
            *(i2 + ln for ln in first), f"{indent}else:", f"{i2}q = {pay.add('p', d)}",
            f"{i2}if {pay.nonzero('q')}:", f"{i2}    proj_{n}[{key}] = {pay.store('q')}",
            *([] if support else [f"{i2}    " + ln for ln in tell("p", "q")]),
            f"{i2}else:", f"{i2}    del proj_{n}[{key}]",
            *(f"{i2}    " + ln for ln in tell("True" if support else "p", "None"))]


def lower_child_lines(node: JoinNode, i: int, pay: Payloads) -> list[str]:
    """``lower_n_i(pos, k, old, new)``: child ``i``'s projection changed at key ``k``
    (None: absent) under lower node ``n``. Each tuple with that key whose children all
    support it, before or after, changes its payload by the child's change times the
    other factors (or, counting, turns full or not: its key's count changes); with two
    or more children the tuples' counters follow the support change first."""
    n = node.num
    nc = len(node.children)
    gen = node.generalized
    lines = [f"def lower_{n}_{i}(pos, k, old, new):"]
    if node.counting:  # (a counting child reports only appearances and removals)
        lines.append("    step = 1 if old is None else -1")
    else:
        z = pay.zero
        d0 = pay.sub(f"({z} if new is None else new)", f"({z} if old is None else old)")
        lines.append(f"    d0 = {d0}")
        if nc > 1:
            lines.append("    step = 0 if (old is None) == (new is None) "
                         "else 1 if old is None else -1")
    u = "k" if gen else "u"  # (a generalized node's one tuple with the key is the key)
    indent = "    "
    if not gen:
        lines += [f"    bucket = indexread_{n}_{i}(k)", "    if bucket is None:", "        return"]
        # (the loop changes projections above this node, never its index)
        lines.append("    for u, m in counted(bucket):" if i == 0 and not node.counting
                     else "    for u in members(bucket):")
        indent = "        "
    if nc > 1:
        # (child i's projection already holds its change: c is the count after it)
        lines += [f"{indent}c = supported_{n}({u})", f"{indent}was = c - step == {nc}",
                  f"{indent}if was or c == {nc}:"]
        indent += "    "
    if node.counting:
        d = "step"
    else:
        factors = []
        if not gen:
            m = "m" if i == 0 else (
                "bucket_count(indexread_{n}_0({k}), u)".format(
                    n=n, k=key_expr('u', node.attrs, False, node.children[0].key_attrs)))
            factors.append(pay.base("u", m))
        factors += [f"proj_{c.num}[{key_expr(u, node.attrs, node.scalar, c.key_attrs)}]"
                    for j, c in enumerate(node.children) if j != i]
        d = "d0" if not factors else pay.mul("d0", pay.product(factors))
        lines.append(f"{indent}d = {d}")
        d = "d"
    lines.append(f"{indent}pk = {key_expr(u, node.attrs, node.scalar, node.key_attrs)}")
    return lines + proj_add_lines(node, pay, indent, "pk", d, support=node.counting,
                                  tuple_var=u)
