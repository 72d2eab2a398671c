"""A partition's engine state in Spark's state store, one entry per map entry.

Binding (docs/runners.md): every named map of the State protocol is one
``transformWithStateInPandas`` MapState under the partition key (RocksDB provider),
whose user key is :func:`~operators.writeback.encode_key` of the entry's key and whose value
is :func:`~operators.writeback.encode_entry`'s (the pickled value, or ``(key, value)``
pair where the key's text does not read back). The engine works on a
:class:`~operators.writeback.WriteBackState` cache; at the end of each micro-batch only the
entries it touched are written back.

Two things make this affordable in PySpark 4.0, where every state call is a synchronous
request/response to the JVM over a local socket (measured here: 45-120 us per
``updateValue``):

* **Pipelined writes.** The batch's puts and removals are sent as one stream of state
  requests and their responses read afterwards (12-21 us per entry instead of 45-120).
  This speaks the state server's wire format (a version int, a length, a
  ``StateRequest`` protobuf), which :class:`Wire` checks once per process; where the
  client's internals differ (another pyspark version) it falls back to the public
  ``updateValue``/``removeKey`` calls, slower but the same state.
* **A cache that outlives the batch.** A Python worker process keeps each partition's
  cache between batches (:data:`_CACHES`). Spark hands a partition to whichever worker is
  idle, so a cache may be current, behind by a few batches, or ahead (its batch failed
  after it ran and Spark rolled the store back). A stamp ``(version, token, extra)`` in
  a ValueState says which state the store holds (``extra``: what the runner keeps
  outside the maps, the open epoch's delta); a short journal MapState keeps the last
  :data:`JOURNAL` batches' changes, so a cache behind by a few batches catches up by
  replaying them (O(their changes)). Anything else rebuilds the cache from the MapStates
  (O(state), only after a restart or a long absence).
"""

from __future__ import annotations

import itertools
import pickle
import struct
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dataflow.distributed.partitions import check_layout
from operators.writeback import WriteBackState, decode_entry, encode_entry, encode_key

STATE_STORE_CONF = {
    # transformWithState needs RocksDB; changelog checkpointing makes a batch's commit
    # write its changes only (snapshots are uploaded in the background).
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}
"""The state-store settings of every ivmflow Spark job (also in the SparkApplication)."""

JOURNAL = 16
"""Batches of changes kept for stale worker caches to catch up on."""

PIPELINE = 2000
"""State requests sent before their responses are read (bounded by socket buffers)."""


def _schemas() -> dict[str, Any]:
    # StructType objects, not DDL strings: the client parses a DDL string with a JVM round
    # trip per state variable, at every task's init.
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    def struct(*fields: tuple[str, Any]) -> Any:
        return StructType([StructField(n, t) for n, t in fields])

    return {
        "key": struct(("k", BinaryType())),
        "value": struct(("v", BinaryType())),
        "stamp": struct(("version", LongType()), ("token", StringType()),
                        ("extra", BinaryType())),
        "journal_key": struct(("version", LongType())),
        "journal_value": struct(("prev", StringType()), ("token", StringType()),
                                ("changes", BinaryType())),
    }


Changes = list[tuple[str, dict[Any, Any], list[Any]]]
_GONE = object()


@dataclass
class CachedPartition:
    """One partition's cache in this worker process, and the stamp it corresponds to."""

    version: int
    token: str
    payload: Any
    """What the runner built over the cache (its task), reused while current."""
    state: WriteBackState


_CACHES: dict[tuple[Any, int], CachedPartition] = {}
"""Per worker process, by (query, partition): module state survives between the batches
a reused Python worker runs, and one worker may serve several queries (tests, notebooks)."""


class Wire:
    """Pipelined MapState writes through the state server's socket protocol, or the
    public one-call-per-entry API where this pyspark's client is not the one checked."""

    def __init__(self, map_state: Any) -> None:
        self.client: Any = getattr(getattr(map_state, "_mapStateClient", None),
                                   "_stateful_processor_api_client", None)
        self.sockfile: Any = getattr(self.client, "sockfile", None)
        self.pipelined = False
        self.fast: bool | None = None
        """Whether frames are encoded by hand (:meth:`_fast_frames_match`), known at the
        first write."""
        try:
            import pyspark.sql.streaming.proto.StateMessage_pb2 as pb

            self.pb = pb
            self.pipelined = (
                self.sockfile is not None
                and hasattr(self.client, "_receive_proto_message")
                and hasattr(pb.MapStateCall, "DESCRIPTOR")
                and {"updateValue", "removeKey"} <= set(pb.MapStateCall.DESCRIPTOR.fields_by_name)
            )
        except ImportError:  # pragma: no cover - protobuf module moved
            self.pipelined = False

    def _frame(self, name: str, call: dict[str, Any]) -> bytes:
        pb = self.pb
        msg = pb.StateRequest(stateVariableRequest=pb.StateVariableRequest(
            mapStateCall=pb.MapStateCall(stateName=name, **call))).SerializeToString()
        return struct.pack("!ii", 0, len(msg)) + msg  # version 0, length, message

    def _fast_frames_match(self) -> bool:
        """Whether :func:`_map_call_frame` writes, byte for byte, what this pyspark's
        protobuf classes write (checked once per process on sample calls)."""
        pb, dumps, top = self.pb, pickle.dumps, pickle.HIGHEST_PROTOCOL
        for name, k, v in (("map:a", b"(1,)", b"x" * 3), ("map:" + "n" * 200, b"k" * 300,
                                                          b"v" * 70_000)):
            key, value = dumps((k,), top), dumps((v,), top)
            if _map_call_frame(name.encode(), 5, _fields(key, value)) != self._frame(
                    name, {"updateValue": pb.UpdateValue(userKey=key, value=value)}):
                return False
            if _map_call_frame(name.encode(), 9, _fields(key)) != self._frame(
                    name, {"removeKey": pb.RemoveKey(userKey=key)}):
                return False
        return True

    def write(self, ops: Iterable[tuple[str, Any, bytes, bytes | None]]) -> int:
        """Apply ``(state name, map state, key, value or None to remove)`` operations (keys
        and values already encoded); returns their number."""
        if not self.pipelined:
            n = 0
            for _name, ms, k, v in ops:
                if v is None:
                    ms.removeKey((k,))
                else:
                    ms.updateValue((k,), (v,))
                n += 1
            return n
        if self.fast is None:
            self.fast = self._fast_frames_match()
        pb = self.pb
        dumps, top = pickle.dumps, pickle.HIGHEST_PROTOCOL
        names: dict[str, bytes] = {}

        def frame(op: tuple[str, Any, bytes, bytes | None]) -> bytes:
            name, _ms, k, v = op
            # A row of one BINARY field, pickled as the client's own serializer does.
            if self.fast:
                prefix = names.get(name)
                if prefix is None:
                    prefix = names[name] = name.encode()
                if v is None:
                    return _map_call_frame(prefix, 9, _fields(dumps((k,), top)))
                return _map_call_frame(prefix, 5, _fields(dumps((k,), top), dumps((v,), top)))
            if v is None:
                call = {"removeKey": pb.RemoveKey(userKey=dumps((k,), top))}
            else:
                call = {"updateValue": pb.UpdateValue(userKey=dumps((k,), top),
                                                      value=dumps((v,), top))}
            return self._frame(name, call)

        # One chunk in flight while the next is built: the JVM applies chunk i while
        # Python encodes chunk i + 1. At most two chunks of (small) responses wait in the
        # socket buffers, so neither side blocks the other.
        it = iter(ops)
        outstanding = total = 0
        failures: list[str] = []
        while True:
            chunk = [frame(op) for op in itertools.islice(it, PIPELINE)]
            if chunk:
                self.sockfile.write(b"".join(chunk))
                self.sockfile.flush()
            failures.extend(self._responses(outstanding))
            outstanding = len(chunk)
            total += len(chunk)
            if not chunk:
                break
        if failures:
            msg = f"writing back {len(failures)} state entries failed: {failures[0]}"
            raise RuntimeError(msg)
        return total

    def _responses(self, n: int) -> list[str]:
        """Read ``n`` responses (every one is read: the stream stays in step); the error
        messages of those that failed. A success is an empty message (status 0 is
        protobuf's default), so ``n`` successes are ``n`` zero lengths, read at once."""
        if not n:
            return []
        data = self.sockfile.read(4 * n)
        if data == bytes(4 * n):
            return []
        failures: list[str] = []
        pos = 0
        for _ in range(n):
            if len(data) < pos + 4:
                data += self.sockfile.read(pos + 4 - len(data))
            (length,) = struct.unpack_from("!i", data, pos)
            pos += 4
            if length:
                if len(data) < pos + length:
                    data += self.sockfile.read(pos + length - len(data))
                message = self.pb.StateResponse()
                message.ParseFromString(data[pos:pos + length])
                pos += length
                if message.statusCode != 0:
                    failures.append(message.errorMessage)
        return failures


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field: tag (field number, wire type 2), length,
    payload."""
    n = len(payload)
    return bytes(((number << 3) | 2,)) + (bytes((n,)) if n < 0x80 else _varint(n)) + payload


def _fields(key: bytes, value: bytes | None = None) -> bytes:
    # UpdateValue{userKey = 1, value = 2} or RemoveKey{userKey = 1}
    return _field(1, key) if value is None else _field(1, key) + _field(2, value)


def _map_call_frame(name: bytes, call: int, body: bytes) -> bytes:
    """A framed ``StateRequest{stateVariableRequest(3){mapStateCall(3){stateName(1),
    <call>}}}``, encoded by hand: the protobuf classes cost ~4 us per entry, more than
    the rest of the write-back's Python side."""
    msg = _field(3, _field(3, _field(1, name) + _field(call, body)))
    return struct.pack("!ii", 0, len(msg)) + msg


class PartitionStore:
    """The MapStates, stamp and journal of the partitions one Spark task handles."""

    def __init__(self, handle: Any, names: list[str], layout: str = "") -> None:
        self.layout = layout
        """The plan's layout stamp (:meth:`WorkerPlan.layout_stamp`): every token this
        store writes starts with it, and a store whose tokens do not fails loud."""
        sc = _schemas()
        self.maps = {name: handle.getMapState(f"map:{name}", sc["key"], sc["value"])
                     for name in names}
        self.stamp = handle.getValueState("stamp", sc["stamp"])
        self.journal = handle.getMapState("journal", sc["journal_key"], sc["journal_value"])
        self.wire: Wire | None = None
        self.rebuilds = 0
        self.catchups = 0
        self.written = 0
        """Entries written back by this store (diagnostics)."""
        self.times: dict[str, float] = {}
        """Where the last :meth:`commit` spent its time (diagnostics)."""

    def current(self) -> tuple[int, str, bytes | None]:
        """The store's stamp: version, token and the runner's extra bytes."""
        got = self.stamp.get()
        if got is None:
            return 0, "", None
        return int(got[0]), str(got[1]), None if got[2] is None else bytes(got[2])

    def cache(self, partition: int, query: Any, make: Any,
              restore: Any = None) -> CachedPartition:
        """This partition's cache, brought to the store's stamp: reused, caught up from
        the journal, or rebuilt from the MapStates. ``make(state)`` builds the payload
        over a fresh cache; ``restore(payload, extra)`` gives a cache that was not
        current the extra bytes of the last :meth:`commit` (what the runner keeps
        outside the maps). The cache is taken out of :data:`_CACHES` until
        :meth:`commit`: a batch that fails midway leaves no half-applied cache behind."""
        version, token, extra = self.current()
        if self.layout:
            check_layout(token.partition("#")[0] if "#" in token else None, self.layout,
                         version > 0, f"spark partition {partition}")
        hit = _CACHES.pop((query, partition), None)
        if hit is not None and (hit.version, hit.token) == (version, token):
            return hit
        if hit is not None:
            hit = self._catch_up(hit, version, token)
            if hit is not None:
                # Operators may keep derived in-memory structures beside their maps
                # (the triangle engine does): build the payload again over the maps.
                hit.payload = make(hit.state)
        if hit is None:
            self.rebuilds += 1
            state = WriteBackState()
            for name, ms in self.maps.items():
                state.load(name, (decode_entry(bytes(k[0]).decode(), pickle.loads(bytes(v[0])))
                                  for k, v in ms.iterator()))
            hit = CachedPartition(version, token, make(state), state)
        if restore is not None:
            restore(hit.payload, extra)
        return hit

    def _catch_up(self, hit: CachedPartition, version: int, token: str) -> CachedPartition | None:
        if not hit.version < version <= hit.version + JOURNAL:
            return None  # ahead of the store (a rolled-back batch), or too far behind
        entries = []
        prev = hit.token
        for n in range(hit.version + 1, version + 1):
            got = self.journal.getValue((n,))
            if got is None or got[0] != prev:
                return None  # the journal does not continue this cache's history
            entries.append(got)
            prev = got[1]
        if prev != token:
            return None
        for _prev, _token, blob in entries:
            for name, puts, gone in pickle.loads(bytes(blob)):
                hit.state.apply_stored(name, puts, gone)
        self.catchups += 1
        hit.version, hit.token = version, token
        return hit

    def commit(self, partition: int, query: Any, hit: CachedPartition,
               extra: bytes | None = None) -> None:
        """Write back the entries changed since the last commit, the journal entry and
        the new stamp (with ``extra``); the cache becomes this worker's current one for
        ``partition``."""
        changes: Changes = hit.state.changes()
        first = next(iter(self.maps.values()), None)
        if self.wire is None and first is not None:
            self.wire = Wire(first)
        ops = ((f"map:{name}", self.maps[name], encode_key(k).encode(),
                encode_entry(k, v) if v is not _GONE else None)
               for name, puts, gone in changes
               for k, v in itertools.chain(puts.items(), ((k, _GONE) for k in gone)))
        t0 = time.perf_counter()
        if self.wire is not None:
            self.written += self.wire.write(ops)
        t1 = time.perf_counter()
        version, token = hit.version + 1, f"{self.layout}#{uuid.uuid4().hex}"
        self.journal.updateValue(
            (version,), (hit.token, token, pickle.dumps(changes, pickle.HIGHEST_PROTOCOL)))
        if version > JOURNAL:
            self.journal.removeKey((version - JOURNAL,))
        self.stamp.update((version, token, extra))
        self.times = {"entries_s": t1 - t0, "journal_s": time.perf_counter() - t1}
        hit.version, hit.token = version, token
        _CACHES[query, partition] = hit

