"""The circuit runtime: what a compiled query runs as, in one process.

* :mod:`~dataflow.circuit.graph`: the circuit (its vertices and edges) built from a
  compiled query, read by every runner;
* :mod:`~dataflow.circuit.kinds`: the query kinds (CROWN, triangle, GHD, view trees)
  behind one interface, each making its engine (:mod:`dataflow.engines`);
* :mod:`~dataflow.circuit.view`: the live view of a compiled query, its generated hot
  path and native build; :mod:`~dataflow.circuit.hypercube`: the partitioner;
* :mod:`~dataflow.circuit.views`: a DAG of views run as one live view;
  :mod:`~dataflow.circuit.setops`, :mod:`~dataflow.circuit.windows`: the set operation
  and window nodes; :mod:`~dataflow.circuit.stagenodes`: the stage layouts and tasks of
  the nodes that are not compiled queries (keyed and threshold views);
* :mod:`~dataflow.circuit.drive`: a live view driven by a record stream, cut into epochs.

Nothing here imports the API (:mod:`dataflow.api`), the distributed execution
(:mod:`dataflow.distributed`), the runners or the command line
(``tests/test_layers.py``).
"""
