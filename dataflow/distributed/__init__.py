"""Distributed execution, shared by the Spark and Flink runners and independent of both:
:mod:`~dataflow.distributed.partitions` (the partitioned protocol: tagged rows, a
partition's task, the worker plan and the layout stamp of its checkpointed state) and
:mod:`~dataflow.distributed.stages` (a circuit as keyed stages, one or two per vertex,
their channels from its edges).

It imports the circuit runtime (:mod:`dataflow.circuit`) and the API, never the runners
or the command line (``tests/test_layers.py``).
"""
