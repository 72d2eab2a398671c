"""The top part's operations of a join tree, as lines of its generated code
(:mod:`operators.nodecode` compiles them with the rest of the tree): the S-update of a
top node (``sj_insert_n`` / ``sj_delete_n``), its liveness walks (``live_n`` /
``dead_n``), its P-update (``support_n``) and the change of a lower child's projection
(``boundary_n``).

V_l, the live tuples, is stored nowhere: a tuple is live when it is in V_s and its key
is in the parent's live index (``L_parent_pos``), so a walk only maintains the live
indexes, ``L_n_i``: child ``i``'s key -> the live tuples of node ``n`` with it.

Example (a root over (a, b), no parent: its tuples are live as they enter V_s):
    >>> from operators.joinnode import JoinNode
    >>> from operators.ring import IntRing
    >>> from operators.state import DictState
    >>> root = JoinNode("R", ("a", "b"), False, 0, True, "set", IntRing(), DictState())
    >>> root.finish()
    >>> print("\\n".join(sj_lines(root)))
    def sj_insert_0(t):
        k = ()
        group = proj_0.get(k)
        if group is None:
            proj_0[k] = t if t is not None else {t}
        elif isinstance(group, list):
            if t not in group:
                if len(group) < 64:
                    proj_0[k] = group + [t]
                else:
                    proj_0[k] = {*group, t}
        elif isinstance(group, set):
            group.add(t)
        elif group != t:
            proj_0[k] = [group, t]
    def sj_delete_0(t):
        k = ()
        group = proj_0[k]
        if isinstance(group, list):
            if t in group:
                group.remove(t)
                if len(group) == 1:
                    group_one = group[0]
                    proj_0[k] = group_one if group_one is not None else {group_one}
        elif isinstance(group, set) and len(group) > 1:
            group.discard(t)
            if len(group) == 1:
                group_one = next(iter(group))
                if group_one is not None:
                    proj_0[k] = group_one
            elif len(group) <= 32:
                proj_0[k] = list(group)
        else:
            del proj_0[k]

Buckets are compact (:mod:`operators.nodemaps`): one tuple is stored bare, 2-8 in a list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.codegen import set_add, set_discard
from operators.nodemaps import key_expr, stored_key_expr

if TYPE_CHECKING:
    from operators.joinnode import JoinNode
    from operators.nodecode import Payloads

__all__ = ["boundary_lines", "group_lines", "live_test", "sj_lines", "walk_lines"]


def live_test(node: JoinNode, key: str) -> str:
    """Whether this top node's tuples with key ``key`` (an expression) are live: always
    at the root, else their key is in the parent's live index."""
    if node.parent is None:
        return "True"
    return f"{key} in L_{node.parent.num}_{node.pos_in_parent}"


def group_lines(node: JoinNode, indent: str) -> tuple[list[str], list[str]]:
    """Lines (at ``indent``) adding tuple ``t`` to / removing it from its semi-join
    group under key ``k`` (the S-update), telling the parent when the group appears or
    goes."""
    appear: list[str] = []
    gone: list[str] = []
    parent = node.parent
    if parent is not None:
        appear = [f"support_{parent.num}({node.pos_in_parent}, k, True)"]
        gone = [f"support_{parent.num}({node.pos_in_parent}, k, False)"]
    stored = stored_key_expr("t", node.attrs, node.scalar, node.key_attrs, "k")
    return (set_add(indent, f"proj_{node.num}", "k", "group", on_new=appear,
                    stored_key=stored),
            set_discard(indent, f"proj_{node.num}", "k", "group", on_empty=gone))


def sj_lines(node: JoinNode) -> list[str]:
    """``sj_insert_n(t)`` / ``sj_delete_n(t)``: t entered (left) V_s. Insert: the
    S-update (:func:`group_lines`), then t turns live if its key is. Delete, the
    reverse: dead first (if its key is live), then the S-update."""
    n = node.num
    live_key = live_test(node, "k")
    group_add, group_remove = group_lines(node, "    ")
    k = f"    k = {key_expr('t', node.attrs, node.scalar, node.key_attrs)}"
    ins = [f"def sj_insert_{n}(t):", k, *group_add]
    dele = [f"def sj_delete_{n}(t):", k]
    # A leaf's tuples index nothing when they turn live or dead: no call then.
    if node.children:
        ins += [f"    if {live_key}:", f"        live_{n}(t)"]
        dele += [f"    if {live_key}:", f"        dead_{n}(t)"]
    return ins + dele + group_remove


def walk_lines(node: JoinNode) -> list[str]:
    """``live_n(t)``: t turned live (it entered V_s under a live key, or its key turned
    live): index it in the live indexes of its children, and make the child tuples it
    newly reaches live (one call per transition). ``dead_n(t)``: the reverse.
    ``support_n(i, k, appear)``: key ``k`` entered (left) child ``i``'s projection:
    the counters of the tuples with that key follow, and a tuple that all children
    support now (no longer) enters (leaves) V_s."""
    n = node.num
    lines = [f"def live_{n}(t):"]
    dead = [f"def dead_{n}(t):"]
    for i, child in enumerate(node.children):
        k = key_expr("t", node.attrs, node.scalar, child.key_attrs)
        walk_live: list[str] = []
        walk_dead: list[str] = []
        if child.top:
            # (the walks below change live indexes only, never the group they read)
            walk_live, walk_dead = ([f"g = projread_{child.num}(k)", "if g is not None:",
                                     "    for u in members(g):", f"        {kind}_{child.num}(u)"]
                                    for kind in ("live", "dead"))
        stored = stored_key_expr("t", node.attrs, node.scalar, child.key_attrs, "k")
        lines += [f"    k = {k}", *set_add("    ", f"L_{n}_{i}", "k", "b", on_new=walk_live,
                                          stored_key=stored)]
        dead += [f"    k = {k}", *set_discard("    ", f"L_{n}_{i}", "k", "b",
                                              on_empty=walk_dead)]
    if not node.children:
        lines.append("    pass")
        dead.append("    pass")
    nc = len(node.children)
    ins, dels = f"sj_insert_{n}", f"sj_delete_{n}"
    sup = [f"def support_{n}(i, k, appear):"]
    if not node.children:
        sup.append("    pass")
    elif nc == 1:  # one child: every tuple with the key turns over
        if node.generalized:  # (its one tuple with the key is the key itself)
            sup += ["    if appear:", f"        {ins}(k)", "    else:", f"        {dels}(k)"]
        else:
            # (two loops, not one over a chosen function: each call stays direct)
            sup += [f"    bucket = indexread_{n}_0(k)", "    if bucket is not None:",
                    "        if appear:", "            for u in list(members(bucket)):",
                    f"                {ins}(u)", "        else:",
                    "            for u in list(members(bucket)):", f"                {dels}(u)"]
    elif node.generalized:
        # (its one tuple with the key is the key: how many children hold it is read
        # from their projections, child i's with its change already)
        sup += [f"    c = supported_{n}(k)", "    if appear:", f"        if c == {nc}:",
                f"            {ins}(k)", f"    elif c + 1 == {nc}:", f"        {dels}(k)"]
    else:
        # (indexreads_n: the read-only lookups of the node's indexes, by child)
        sup.append(f"    bucket = indexreads_{n}[i](k)")
        # (child i's projection already holds its change: supported_n counts it)
        sup += ["    if bucket is None:", "        return",
                "    for u in list(members(bucket)):", f"        c = supported_{n}(u)",
                "        if appear:", f"            if c == {nc}:", f"                {ins}(u)",
                f"        elif c + 1 == {nc}:", f"            {dels}(u)"]
    return lines + dead + sup


def boundary_lines(node: JoinNode, pay: Payloads) -> list[str]:
    """``boundary_n(i, k, old, new)``: lower child ``i``'s projection changed at key
    ``k`` (old, new: payloads, or True/None counting; None: absent). A key appearing
    is a support appearing (the P-update), then its change is enumerated; a key going
    is enumerated first (against the state before), then its support goes. The
    enumeration is the node's ``on_key`` hook (``keyhook_n``)."""
    n = node.num
    up, down = ("1", "-1") if node.counting else ("new", pay.neg("old"))
    lines = [f"def boundary_{n}(i, k, old, new):", "    if old is None:",
             f"        support_{n}(i, k, True)", f"        keyhook_{n}(i, k, {up})",
             "    elif new is None:", f"        keyhook_{n}(i, k, {down})",
             f"        support_{n}(i, k, False)"]
    if not node.counting:  # (a counting child reports only appearances and removals)
        lines += ["    else:", f"        keyhook_{n}(i, k, {pay.sub('new', 'old')})"]
    return lines
