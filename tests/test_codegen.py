"""Generated code shows in tracebacks: :func:`core.codegen.define` registers every
generated source with :mod:`linecache` under a filename of its own, so a frame in
generated code names the definition and shows the generated line."""

from __future__ import annotations

import traceback

import pytest

from core.codegen import define
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
