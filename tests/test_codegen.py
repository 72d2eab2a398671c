"""Generated code shows in tracebacks: :func:`core.codegen.define` registers every
generated source with :mod:`linecache` under a filename of its own, so a frame in
generated code names the definition and shows the generated line. A build swaps
generated code in only through :class:`core.codegen.Bindings` (each entry registered
once, with its setter)."""

from __future__ import annotations

import traceback
from functools import partial

import pytest

from core.codegen import Bindings, define
from dataflow.api import compile_query
from operators.input import RelationInput


def test_each_definition_has_its_own_filename() -> None:
    a = define("def f():\n    return 1", "<same>", {})["f"]
    b = define("def f():\n    return 2", "<same>", {})["f"]
    assert a.__code__.co_filename != b.__code__.co_filename
    assert a.__code__.co_filename.startswith("<ivmflow-gen:same#")


def test_a_bad_value_in_a_generated_filter_shows_the_generated_line() -> None:
    query = compile_query("CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT, c INT); "
                          "SELECT R.a, S.c FROM R, S WHERE R.b = S.b AND R.a > 5")
    atom = next(a for a in query.plan.cq.atoms if a.relation.name == "R")
    project = RelationInput(atom, query.plan.cq.join_vars).project
    assert project((7, 1)) is not None
    with pytest.raises(TypeError) as info:
        project(("seven", 1))  # (a value the typed paths would have refused)
    (frame,) = [f for f in traceback.extract_tb(info.tb)
                if f.filename.startswith("<ivmflow-gen:input ")]
    assert frame.name == "project"
    assert frame.line == "if row[1] is None or not p0(row[0]):"
    text = "".join(traceback.format_exception(info.value))
    assert frame.line in text


class _FakeBuild:
    def __init__(self, entries: list[object], namespaces: dict[int, dict[str, object]]) -> None:
        self.entries = entries
        self._namespaces = namespaces

    def namespace(self, env: object) -> dict[str, object] | None:
        return self._namespaces.get(id(env))


def test_bindings_swap_each_registered_entry_through_its_setter() -> None:
    bound: dict[str, object] = {}
    env = define("def f():\n    return sort()", "<f>", {"sort": sorted})
    g = define("def g():\n    return 2", "<g>", {})["g"]
    b = Bindings()
    b.entry("f", env["f"], partial(bound.__setitem__, "f"))
    b.entry("g", g, partial(bound.__setitem__, "g"))
    assert bound == {"f": env["f"], "g": g} and b.entries() == [env["f"], g]
    b.value("sort", partial(bound.__setitem__, "sort"), lambda build: "C sort")
    stand_in: dict[str, object] = {}
    b.global_("f sort", env, "sort", lambda build: "C sort")
    with pytest.raises(ValueError, match="registered twice"):
        b.value("sort", print, lambda build: None)
    with pytest.raises(ValueError, match="1 entries for 2"):
        b.rebind(_FakeBuild(["f'"], {}))
    b.rebind(_FakeBuild(["f'", "g'"], {id(env): stand_in}))
    assert bound == {"f": "f'", "g": "g'", "sort": "C sort"}
    assert stand_in == {"sort": "C sort"}
