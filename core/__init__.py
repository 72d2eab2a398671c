"""The bottom layer every package may import, and which imports none of them: errors
(:mod:`core.errors`), schemas and row types (:mod:`core.schema`), update and delta
records and their text form (:mod:`core.records`), the frozen operator graph
(:mod:`core.graph`), epoch numbering (:mod:`core.epochs`) and consolidation
(:mod:`core.consolidate`).

Layers, bottom up: ``core`` <- ``plans`` <- ``operators`` <- ``connectors`` (core only)
<- ``dataflow`` (composes them all). ``tests/test_layers.py`` checks it.
"""
