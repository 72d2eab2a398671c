"""The generated code of a join-tree node (:class:`operators.joinnode.JoinNode`): its
``apply`` specialized to the node (children unrolled, keys inlined, integer payloads or
supports inlined), the semi-join updates of a top node, its liveness walks and support
changes, and the expressions other generated code reads a node's multiplicities with.
Each does the same steps and state changes as the node's generic methods, which stay
the reference (tests/test_engine_paths.py runs both and compares); the functions take
the node and return source text or bind the compiled functions into it.

Example:
    >>> from operators.joinnode import JoinNode
    >>> from operators.ring import IntRing
    >>> from operators.state import DictState
    >>> leaf = JoinNode("S", ("b",), False, 1, True, "bag", IntRing(), DictState())
    >>> leaf.finish()
    >>> print(apply_source(leaf)[0].splitlines()[0])
    def apply(t, dm):
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core.codegen import define, set_add, set_discard
from operators.nodemaps import NO_MAP, KeyedBase, key_expr
from operators.state import read_only_get

if TYPE_CHECKING:
    from operators.joinnode import JoinNode

__all__ = ["apply_source", "compile_apply", "compile_key_leaf_apply", "compile_sj",
           "count_expr", "mult_expr", "walk_source"]


def mult_expr(node: JoinNode, var: str, env: dict[str, Any], name: str) -> str:
    """Generated code for the multiplicity of this node's tuple ``var`` (present),
    binding what it reads in ``env`` under ``name``: two C-level lookups where the
    multiplicities live in the first index's buckets or in the groups, one
    otherwise."""
    if node.base_in_index:
        env[name] = node.index_read[0]
        k = key_expr(var, node.attrs, node.scalar, node.children[0].key_attrs)
        return f"{name}({k})[{var}]"
    if node.base_in_proj:
        env[name] = node.proj_read
        return f"{name}({key_expr(var, node.attrs, node.scalar, node.key_attrs)})[{var}]"
    env[name] = node.base
    return f"{name}[{var}]"


def count_expr(node: JoinNode, var: str, env: dict[str, Any], name: str) -> str:
    """Generated code for the stored multiplicity of this node's tuple ``var``, 0
    when it is absent (what :attr:`base` ``.get(var, 0)`` reads), binding what it
    reads in ``env`` under names starting with ``name``: C-level lookups, no
    Python-level call (a view's delete check runs it per delete)."""
    if node.base_in_index or node.base_in_proj:
        env[name] = node.index_read[0] if node.base_in_index else node.proj_read
        env[f"{name}_none"] = NO_MAP
        keys = node.children[0].key_attrs if node.base_in_index else node.key_attrs
        k = key_expr(var, node.attrs, node.scalar, keys)
        return f"({name}({k}) or {name}_none).get({var}, 0)"
    if isinstance(node.base, KeyedBase):
        env[name] = node.proj_read
        return f"{name}({key_expr(var, node.attrs, node.scalar, node.key_attrs)}, 0)"
    env[name] = read_only_get(node.base)
    return f"{name}({var}, 0)"


def compile_key_leaf_apply(node: JoinNode) -> Callable[[Any, int], None]:
    """:meth:`apply` of a key leaf: the multiplicity is kept in ``proj`` under the
    key, and a change is passed to the parent as a payload (bag) or support (set)
    change; the same notifications as the generic path."""
    env: dict[str, Any] = {
        "proj": node.proj, "proj_get": node.proj.get,
        "notify": parent_change_hook(node),
    }
    pos = node.pos_in_parent
    k = key_expr("t", node.attrs, node.scalar, node.key_attrs)
    gone = "True" if node.counting else "p"
    lines = [
        "def apply(t, dm):",
        f"    k = {k}",
        "    p = proj_get(k)",
        "    if p is None:",
        "        proj[k] = dm",
        f"        notify({pos}, k, None, {'True' if node.counting else 'dm'})",
        "        return",
        "    q = p + dm",
        "    if q:",
        "        proj[k] = q",
    ]
    if not node.counting:
        lines.append(f"        notify({pos}, k, p, q)")
    lines += ["    else:", "        del proj[k]", f"        notify({pos}, k, {gone}, None)"]
    fn: Callable[[Any, int], None]
    define("\n".join(lines), f"<apply {node.name}>", env)
    fn = env["apply"]
    node._code_envs.append(env)
    return fn


def parent_change_hook(node: JoinNode) -> Callable[[int, Any, Any, Any], None]:
    """What :meth:`_notify` calls for a lower node, bound once for generated code:
    the parent's boundary handler (top parent) or its lower-child handler."""
    parent = node.parent
    assert parent is not None, "a lower node always has a parent"
    return parent._boundary_change if parent.top else parent._lower_child_change


def live_test(node: JoinNode, env: dict[str, Any], key: str) -> str:
    """:meth:`key_live` as generated code on the key expression ``key``: ``True`` at
    the root, else a lookup in the parent's live index (bound in ``env`` as
    ``plive``)."""
    if node.parent is None:
        return "True"
    env["plive"] = node.parent.live_index[node.pos_in_parent]
    return f"{key} in plive"


def compile_sj(node: JoinNode) -> None:
    """``_sj_insert(t)`` / ``_sj_delete(t)`` of this top node, generated (key inlined,
    parent bound; the only implementation). Insert: t entered V_s, so the S-update
    (t joins its group under its key; a new group is a support appearing at the
    parent), then t turns live if its key is. Delete, the reverse: dead first (if
    its key is live), then the S-update. Called from finish(), after the tree is
    wired."""
    env: dict[str, Any] = {}
    k = key_expr("t", node.attrs, node.scalar, node.key_attrs)
    # t enters (leaves) V_s here, so it turns live (dead) exactly when its key is.
    live_key = live_test(node, env, "k")
    group_add, group_remove = group_lines(node, env, "    ")
    ins = ["def sj_insert(t):", f"    k = {k}", *group_add]
    # A leaf's tuples index nothing when they turn live or dead: no call then.
    if node.children:
        ins += [f"    if {live_key}:", "        make_live(t)"]
    dele = ["def sj_delete(t):", f"    k = {k}"]
    if node.children:
        dele += [f"    if {live_key}:", "        make_dead(t)"]
    dele += group_remove
    define("\n".join(ins + dele), f"<sj {node.name}>", env)
    node._sj_insert = env["sj_insert"]
    node._sj_delete = env["sj_delete"]
    node._code_envs.append(env)


def group_lines(node: JoinNode, env: dict[str, Any], indent: str) -> tuple[list[str], list[str]]:
    """Generated code (at ``indent``) that adds tuple ``t`` to / removes it from its
    semi-join group under key ``k`` (the S-update), telling the parent when the
    group appears or goes; binds what it calls in ``env``."""
    env["proj"] = node.proj
    env["make_live"] = node._make_live
    env["make_dead"] = node._make_dead
    appear: list[str] = []
    gone: list[str] = []
    if node.parent is not None:
        env["support"] = node.parent._child_support
        appear = [f"support({node.pos_in_parent}, k, True)"]
        gone = [f"support({node.pos_in_parent}, k, False)"]
    return (set_add(indent, "proj", "k", "group", on_new=appear),
            set_discard(indent, "proj", "k", "group", on_empty=gone))


def walk_source(node: JoinNode, env: dict[str, Any], name: Callable[[str, JoinNode], str]) -> str:
    """Python source of :meth:`_make_live`, :meth:`_make_dead` and
    :meth:`_child_support` specialized to this top node (children unrolled, keys
    inlined), named ``name(kind, node)`` with kind ``live``, ``dead``, ``support``;
    the functions of other nodes are called by those names, so the sources of all
    top nodes are compiled into one shared ``env`` (see :meth:`bind_walks`)."""
    me = node.id
    live, dead, support = (name(kind, node) for kind in ("live", "dead", "support"))
    ins, dels = name("sj_insert", node), name("sj_delete", node)
    env[ins], env[dels] = node._sj_insert, node._sj_delete
    lines = [f"def {live}(t):"]
    dead_lines = [f"def {dead}(t):"]
    for i, child in enumerate(node.children):
        env[f"L{me}_{i}"] = node.live_index[i]
        k = key_expr("t", node.attrs, node.scalar, child.key_attrs)
        walk_live: list[str] = []
        walk_dead: list[str] = []
        if child.top:
            # (the walks below change live indexes only, never the group they read)
            env[f"P{me}_{i}"] = child.proj_read
            walk_live, walk_dead = ([f"g = P{me}_{i}(k)", "if g:", "    for u in g:",
                                     f"        {name(kind, child)}(u)"]
                                    for kind in ("live", "dead"))
        lines += [f"    k = {k}", *set_add("    ", f"L{me}_{i}", "k", "b",
                                             on_new=walk_live)]
        dead_lines += [f"    k = {k}", *set_discard("    ", f"L{me}_{i}", "k", "b",
                                                    on_empty=walk_dead)]
    if not node.children:
        lines.append("    pass")
        dead_lines.append("    pass")
    n = node.nchildren
    sup = [f"def {support}(i, k, appear):"]
    if not node.children:
        sup.append("    pass")
    elif not node.keeps_counter:  # one child: every tuple with the key turns over
        if node.generalized:
            sup += ["    if appear:", f"        {ins}(k)", "    else:", f"        {dels}(k)"]
        else:
            env[f"X{me}"] = node.index_read[0]
            # (two loops, not one over a chosen function: each call stays direct)
            sup += [f"    bucket = X{me}(k)", "    if bucket:", "        if appear:",
                    "            for u in list(bucket):", f"                {ins}(u)",
                    "        else:", "            for u in list(bucket):",
                    f"                {dels}(u)"]
    elif node.generalized:
        env[f"C{me}"] = node.counter
        sup += [f"    c = C{me}.get(k, 0)", "    if appear:", "        c += 1",
                f"        C{me}[k] = c", f"        if c == {n}:", f"            {ins}(k)",
                "    else:", f"        if c == {n}:", f"            {dels}(k)",
                "        c -= 1", "        if c:", f"            C{me}[k] = c",
                "        else:", f"            del C{me}[k]"]
    else:
        env[f"C{me}"] = node.counter
        env[f"X{me}"] = node.index_read
        sup += [f"    bucket = X{me}[i](k)", "    if not bucket:", "        return",
                f"    counter = C{me}", "    for u in list(bucket):", "        c = counter[u]",
                "        if appear:", "            c += 1", "            counter[u] = c",
                f"            if c == {n}:", f"                {ins}(u)", "        else:",
                f"            if c == {n}:", f"                {dels}(u)",
                "            counter[u] = c - 1"]
    return "\n".join(lines + dead_lines + sup)


def apply_source(node: JoinNode) -> tuple[str, dict[str, Any]]:
    """Python source of :meth:`apply` specialized to this node: children unrolled,
    keys inlined, integer payloads (bag) or supports (set) inlined. Same steps and
    state changes as the generic method."""
    env: dict[str, Any] = {
        "emit": node._emit_via_hook, "base": node.base, "base_get": node.base.get,
        "counter": node.counter,
        "lower_change": node._lower_base_change,
    }
    if node.base_in_proj:
        return proj_leaf_source(node, env), env
    n = len(node.children)
    keys = []
    for i, child in enumerate(node.children):
        env[f"index{i}"] = node.index[i]
        env[f"cproj{i}"] = child.proj
        keys.append(key_expr("t", node.attrs, node.scalar, child.key_attrs))
    if n:
        # The multiplicity is kept in the first child index's bucket (tuple -> count).
        lines = [
            "def apply(t, dm):",
            f"    k0 = {keys[0]}",
            "    b0 = index0.get(k0)",
            "    old = 0 if b0 is None else b0.get(t, 0)",
            "    new = old + dm",
            "    if old == 0:",
            "        c = 0",
            "        if b0 is None:",
            "            index0[k0] = {t: new}",
            "        else:",
            "            b0[t] = new",
            "        if k0 in cproj0:",
            "            c += 1",
        ]
    else:
        # A leaf's counter would always be 0: it keeps none.
        lines = [
            "def apply(t, dm):",
            "    old = base_get(t, 0)",
            "    new = old + dm",
            "    if old == 0:",
        ]
    for i, k in enumerate(keys[1:], 1):
        lines += [f"        k = {k}", *set_add("        ", f"index{i}", "k", "b"),
                  f"        if k in cproj{i}:", "            c += 1"]
    if n == 1:
        # One child: the count is whether the child's projection holds the key
        # (derived, not stored: one map less to write per tuple).
        lines += [
            "    else:",
            "        c = 1 if k0 in cproj0 else 0",
            "        if new:",
            "            b0[t] = new",
            "    if c == 1:",
        ]
    elif n:
        lines += [
            "        counter[t] = c",
            "    else:",
            "        c = counter[t]",
            "        if new:",
            "            b0[t] = new",
            f"    if c == {n}:",
        ]
    else:
        lines += [
            "        base[t] = new",
            "    elif new:",
            "        base[t] = new",
            "    if True:",
        ]
    if node.top:
        lines += top_change_lines(node, env)
    else:
        lines += lower_change_lines(node, env, keys)
    lines += ["    if new == 0:"]
    if not n:
        lines.append("        del base[t]")
    if n > 1:
        lines.append("        del counter[t]")
    if n:
        # (old > 0 here, so b0 is the bucket that holds t)
        lines += ["        del b0[t]", "        if not b0:", "            del index0[k0]"]
    for i, k in enumerate(keys[1:], 1):
        lines += [f"        k = {k}", *set_discard("        ", f"index{i}", "k", "b")]
    return "\n".join(lines), env


def proj_leaf_source(node: JoinNode, env: dict[str, Any]) -> str:
    """:meth:`apply` of a top leaf that keeps its multiplicities in its groups: the
    same steps as the generic path (group and parent support first, then the live
    change; a delete is enumerated before the tuple leaves its group), on one group
    lookup. A leaf's tuples are all in V_s, so the group holds every tuple."""
    env["proj"] = node.proj
    live = live_test(node, env, "k")
    k = key_expr("t", node.attrs, node.scalar, node.key_attrs)
    one, minus_one = ("1", "-1") if node.counting else ("new", "-old")
    appear = disappear = ""
    if node.parent is not None:
        env["support"] = node.parent._child_support
        appear = f"        support({node.pos_in_parent}, k, True)"
        disappear = f"            support({node.pos_in_parent}, k, False)"
    lines = [
        "def apply(t, dm):",
        f"    k = {k}",
        "    group = proj.get(k)",
        "    if group is None:",
        "        new = dm",  # (a delete of an absent tuple was refused before)
        "        proj[k] = {t: new}",
        *([appear] if appear else []),
        f"        if {live}:",
        f"            emit(t, {one})",
        "        return",
        "    old = group.get(t, 0)",
        "    new = old + dm",
        "    if old == 0:",
        "        group[t] = new",
        f"        if {live}:",
        f"            emit(t, {one})",
        "    elif new == 0:",
        f"        if {live}:",
        f"            emit(t, {minus_one})",
        "        del group[t]",
        "        if not group:",
        "            del proj[k]",
        *([disappear] if disappear else []),
        "    else:",
        "        group[t] = new",
    ]
    if not node.counting:
        lines += [f"        if {live}:", "            emit(t, new - old)"]
    return "\n".join(lines)


def top_change_lines(node: JoinNode, env: dict[str, Any]) -> list[str]:
    """Inlined :meth:`_top_base_change` with the semi-join code (:meth:`_compile_sj`):
    t is in V_s here (all children support it), so it is live
    exactly when its key is; the key is computed and tested once."""
    live = live_test(node, env, "k")
    k = key_expr("t", node.attrs, node.scalar, node.key_attrs)
    group_add, tail = group_lines(node, env, "            ")
    lines = [f"        k = {k}", "        if old == 0:", *group_add, f"            if {live}:"]
    if node.children:
        lines.append("                make_live(t)")
    lines += [f"                emit(t, {'1' if node.counting else 'new'})",
              "        elif new == 0:", f"            if {live}:",
              f"                emit(t, {'-1' if node.counting else '-old'})"]
    if node.children:
        lines.append("                make_dead(t)")
    lines += tail
    if not node.counting:
        lines += [f"        elif {live}:", "            emit(t, new - old)"]
    return lines


def lower_change_lines(node: JoinNode, env: dict[str, Any], keys: list[str]) -> list[str]:
    """Inlined :meth:`_lower_base_change` with :meth:`_count_add` (set) or
    :meth:`_payload_add` over integers (bag), ending in :meth:`_notify`."""
    env["proj"] = node.proj
    env["proj_get"] = node.proj.get
    env["notify"] = parent_change_hook(node)
    pos = node.pos_in_parent
    k = key_expr("t", node.attrs, node.scalar, node.key_attrs)
    if node.counting:
        return [
            "        if old == 0 or new == 0:",
            f"            k = {k}",
            "            p = proj_get(k, 0)",
            "            if old == 0:",
            "                proj[k] = p + 1",
            "                if p == 0:",
            f"                    notify({pos}, k, None, True)",
            "            elif p == 1:",
            "                del proj[k]",
            f"                notify({pos}, k, True, None)",
            "            else:",
            "                proj[k] = p - 1",
        ]
    d = "dm" + "".join(f" * cproj{i}[{ck}]" for i, ck in enumerate(keys))
    return [
        f"        k = {k}",
        f"        d = {d}",
        "        p = proj_get(k)",
        "        if p is None:",
        "            if d:",
        "                proj[k] = d",
        f"                notify({pos}, k, None, d)",
        "        else:",
        "            q = p + d",
        "            if q:",
        "                proj[k] = q",
        f"                notify({pos}, k, p, q)",
        "            else:",
        "                del proj[k]",
        f"                notify({pos}, k, p, None)",
    ]


def compile_apply(node: JoinNode) -> Callable[[Any, int], None]:
    text, env = apply_source(node)
    define(text, f"<apply {node.name}>", env)
    fn: Callable[[Any, int], None] = env["apply"]
    node._code_envs.append(env)
    return fn
