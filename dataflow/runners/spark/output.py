"""Where a Spark micro-batch's output goes: Kafka topics are written from an executor,
files by the driver.

Each partition task emits one bundle per (kind, epoch): its consolidated changes,
pickled. With a Kafka sink, the bundles of a batch go to one task (a shuffle to a
single partition: a batch's epochs must be written in order, each in its own
transaction; a run with one partition writes from that partition's task, whose output
is already merged), which sums the partitions' bundles per epoch
(:func:`~dataflow.distributed.partitions.merge_bundles`) and then

- for a kind whose sink is a Kafka topic, writes each epoch in one producer transaction
  from the executor (:class:`~connectors.kafka.KafkaDeltaSink`), and returns only
  ``(kind, epoch, rows written)`` to the driver;
- for a kind whose sink is a file, returns the merged rows to the driver, which writes
  them (the file is the driver's).

So with Kafka sinks no delta row reaches the driver. Without one, the driver collects
the bundles and merges them itself (:func:`merge_on_driver`): no extra stage.

Exactly once: a Python worker keeps its sink open between batches (opening one costs
three broker round trips). Opening fences every older producer with the run's
transactional id and then reads the topic's last epoch, and epochs up to it are skipped.
So a retried task or a replayed batch writes nothing twice, and a worker whose producer
a newer one fenced (another worker took a batch in between) commits nothing: it opens
its sink again, which reads the epochs the other wrote, and goes on.

Example (a batch whose output goes to files only: the rows come back merged)::

    >>> import pickle
    >>> import pandas as pd
    >>> w = BatchWriter({})
    >>> frame = pd.DataFrame({"kind": ["delta", "delta"], "epoch": [1, 1],
    ...                       "rows": [pickle.dumps([(1, (2,))]), pickle.dumps([(1, (3,))])]})
    >>> out = next(w([frame]))
    >>> list(out["n"]), pickle.loads(out["rows"][0])
    ([2], [(1, (2,)), (1, (3,))])
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from core.records import EpochDelta
from dataflow.distributed.partitions import merge_bundles

if TYPE_CHECKING:
    from connectors.kafka import KafkaDeltaSink, KafkaEndpoint

WRITTEN_SCHEMA = "kind STRING, epoch INT, n LONG, rows BINARY"
"""What the writing task returns per (kind, epoch): the number of rows, and the merged
rows themselves (pickled) only for a kind the driver writes (``rows`` is null for one
written to Kafka)."""

OUTPUT_COLUMNS = ["kind", "epoch", "n", "rows"]
"""The pandas columns of :data:`WRITTEN_SCHEMA`."""


@dataclass(frozen=True)
class KafkaTopicSink:
    """What an executor needs to open a run's Kafka delta (or snapshot) sink: the topic,
    the output columns and the run's transactional id; for Debezium change events
    (``format=debezium-json``) the output's key, which pairs ``u`` events."""

    endpoint: KafkaEndpoint
    columns: tuple[str, ...]
    transactional_id: str
    kind: Literal["epoch", "snapshot"]
    debezium_key: tuple[int, ...] | None = None

    @classmethod
    def of(cls, sink: KafkaDeltaSink) -> KafkaTopicSink:
        return cls(sink.endpoint, tuple(sink.columns), sink.transactional_id, sink.kind,
                   getattr(sink, "key", None))

    def open(self) -> KafkaDeltaSink:
        from connectors.kafka import KafkaDeltaSink

        if self.endpoint.format == "debezium-json" and self.kind == "epoch":
            from connectors.kafka.debezium_sink import DebeziumDeltaSink

            return DebeziumDeltaSink(self.endpoint, self.columns, key=self.debezium_key,
                                     transactional_id=self.transactional_id, kind=self.kind)
        return KafkaDeltaSink(self.endpoint, self.columns,
                              transactional_id=self.transactional_id, kind=self.kind)


_OPEN_SINKS: dict[tuple[str, str, str], KafkaDeltaSink] = {}
"""The sinks this Python worker holds open between batches."""


def _write_kafka(spec: KafkaTopicSink, kind: str, n: int, rows: list[tuple[int, Any]]) -> None:
    """Write one epoch (snapshot) through this worker's open sink for ``spec``; a sink
    fenced by a newer producer of the same run is opened again, once."""
    from connectors.kafka import KafkaFencedError

    key = (spec.endpoint.url, spec.transactional_id, spec.kind)
    for attempt in (1, 2):
        sink = _OPEN_SINKS.get(key)
        if sink is None:
            sink = _OPEN_SINKS[key] = spec.open()
        try:
            if kind == "delta":
                sink.write_epoch(EpochDelta(n, tuple(rows)))
            else:
                sink.write_snapshot(n, rows)
            return
        except BaseException as exc:
            # Whatever failed, the next write starts from a fresh sink (which reads
            # what the topic holds); only a fencing is retried here.
            del _OPEN_SINKS[key]
            sink.close()
            if attempt == 2 or not isinstance(exc, KafkaFencedError):
                raise


def _merge(bundles: Iterable[tuple[str, int, bytes]]
           ) -> dict[tuple[str, int], list[tuple[int, Any]]]:
    """Per (kind, epoch), the partitions' pickled bundles summed into one."""
    parts: dict[tuple[str, int], list[list[tuple[int, Any]]]] = {}
    loads = pickle.loads
    for kind, epoch, rows in bundles:
        parts.setdefault((kind, int(epoch)), []).append(loads(rows))
    return merge_bundles(parts)


Written = list[tuple[str, int, int, list[tuple[int, Any]] | None]]
"""Per (kind, epoch) in epoch order: the number of rows, and the rows themselves unless
an executor wrote them to Kafka."""


def merge_on_driver(collected: Iterable[Any]) -> Written:
    """The partitions' bundles of a batch, collected to the driver (no Kafka sink),
    merged per (kind, epoch)."""
    grouped = _merge((r["kind"], r["epoch"], r["rows"]) for r in collected)
    return [(kind, n, len(grouped[kind, n]), grouped[kind, n])
            for kind, n in sorted(grouped, key=lambda k: (k[1], k[0]))]


def written_by_executor(collected: Iterable[Any]) -> Written:
    """What :class:`BatchWriter`'s task returned, collected: rows unpickled where the
    driver writes them."""
    loads = pickle.loads
    return [(r["kind"], int(r["epoch"]), int(r["n"]),
             None if r["rows"] is None else loads(r["rows"])) for r in collected]


class BatchWriter:
    """The ``mapInPandas`` function of the one task that writes a batch's output:
    merges the partitions' bundles per (kind, epoch), writes the kinds in ``kafka``
    (``"delta"`` / ``"snapshot"`` -> its topic) in epoch order, and yields one
    :data:`WRITTEN_SCHEMA` row per (kind, epoch)."""

    def __init__(self, kafka: Mapping[str, KafkaTopicSink]) -> None:
        self.kafka = dict(kafka)

    def __call__(self, frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        grouped = _merge(row for pdf in frames for row in zip(
            pdf["kind"].tolist(), pdf["epoch"].tolist(), pdf["rows"].tolist()))
        out = write_bundles(grouped, self.kafka)
        if out:
            yield pd.DataFrame(out, columns=OUTPUT_COLUMNS)


def write_bundles(grouped: Mapping[tuple[str, int], list[tuple[int, Any]]],
                  kafka: Mapping[str, KafkaTopicSink]
                  ) -> list[tuple[str, int, int, bytes | None]]:
    """Write the merged rows of each (kind, epoch) whose kind has a Kafka sink, in epoch
    order; per (kind, epoch) a :data:`WRITTEN_SCHEMA` row (pickled rows only for the
    kinds left to the driver)."""
    out: list[tuple[str, int, int, bytes | None]] = []
    for kind, n in sorted(grouped, key=lambda k: (k[1], k[0])):
        rows = grouped[kind, n]
        spec = kafka.get(kind)
        if spec is None:
            out.append((kind, n, len(rows), pickle.dumps(rows, pickle.HIGHEST_PROTOCOL)))
        else:
            _write_kafka(spec, kind, n, rows)
            out.append((kind, n, len(rows), None))
    return out
