"""``ivmflow generate``: synthetic update streams for examples and benchmarks, built in
process (:mod:`connectors.generators`), with PySpark (the data generator,
:mod:`dataflow.runners.spark.datagen`), or from DuckDB's TPC-H dbgen
(:mod:`connectors.tpch`).

Each function writes the stream and returns a one-line report for the user.

Example:
    >>> import tempfile, pathlib
    >>> out = str(pathlib.Path(tempfile.mkdtemp()) / "u.csv")
    >>> graph(GraphSpec(edges=5, seed=1, window=3), out)  # doctest: +ELLIPSIS
    'wrote 7 updates (5 edges of G) to ...u.csv'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from connectors import generators
from core.errors import UnavailableError, UsageError

__all__ = ["GraphSpec", "graph", "social", "tpcds", "tpch"]


@dataclass(frozen=True)
class GraphSpec:
    """A skewed directed graph, optionally as a FIFO sliding-window stream."""

    edges: int
    nodes: int | None = None
    alpha: float = 1.0
    model: Literal["zipf", "powerlaw_cluster"] = "zipf"
    window: int | float | None = None
    """Live edges: a count, or a fraction of ``edges``."""
    seed: int = 0
    relation: str = "G"
    epoch_every: int | None = None
    """Write a ``*`` line after every N updates."""


def graph(spec: GraphSpec, out: str, *, engine: str = "python",
          edge_list: str | None = None, min_dst: int | None = None) -> str:
    """Write ``spec``'s stream to ``out`` (``-``: stdout). ``engine="spark"`` builds it
    with PySpark, from a generated graph or an ``edge_list`` file, optionally keeping
    edges with ``dst >= min_dst`` only."""
    if engine == "spark":
        return _graph_on_spark(spec, out, edge_list, min_dst)
    if edge_list or min_dst is not None:
        msg = "--edge-list and --min-dst need --engine spark"
        raise UsageError(msg)
    try:
        edges = generators.skewed_graph(
            spec.edges, spec.nodes, seed=spec.seed, alpha=spec.alpha, model=spec.model
        )
        stream: Iterable[tuple[str, Sequence[Any]]]
        if spec.window is not None:
            stream = generators.fifo_window_stream(edges, spec.window)
        else:
            stream = (("+", e) for e in edges)
        n = generators.write_update_csv(out, spec.relation, stream, spec.epoch_every)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return f"wrote {n} updates ({len(edges)} edges of {spec.relation}) to {out}"


def _spark() -> Any:
    try:
        from dataflow.runners.spark.job import spark_session
    except ImportError as err:  # pragma: no cover - depends on the installation
        msg = f"the Spark data pipeline needs pyspark: pip install -e '.[spark]' ({err})"
        raise UnavailableError(msg) from None
    return spark_session(None, 2)


def social(out: str, persons: int, knows: int, messages: int, *, window: float = 0.2,
           seed: int = 0, epoch_every: int | None = None) -> str:
    """person/knows/message tables, each under its own FIFO window (PySpark)."""
    spark = _spark()
    from dataflow.runners.spark.datagen import SOCIAL_SCHEMA_SQL, social_updates, write_lines

    df = social_updates(spark, persons, knows, messages, window=window, seed=seed,
                        epoch_every=epoch_every)
    n = write_lines(df, out)
    tables = " ".join(SOCIAL_SCHEMA_SQL.split())
    return f"wrote {n} updates to {out} (spark); tables: {tables}"


def _graph_on_spark(spec: GraphSpec, out: str, edge_list: str | None,
                    min_dst: int | None) -> str:
    """The same streams built with PySpark: a generated graph (kept in its generated
    order, so the output equals the in-process generator's) or an edge-list file
    (shuffled with the seed), FIFO windows, a ``min_dst`` filter, epoch markers."""
    if out == "-":
        msg = "--engine spark writes a file: give --out"
        raise UsageError(msg)
    spark = _spark()
    from dataflow.runners.spark.datagen import read_edge_list, window_updates, write_lines

    if edge_list:
        edges = read_edge_list(spark, edge_list)
        seed: int | None = spec.seed
    else:
        pairs = generators.skewed_graph(
            spec.edges, spec.nodes, seed=spec.seed, alpha=spec.alpha, model=spec.model
        )
        edges = spark.createDataFrame(
            [(s, d, i) for i, (s, d) in enumerate(pairs)], "src LONG, dst LONG, o LONG"
        )
        seed = None
    window = spec.window
    if isinstance(window, float):
        window = max(1, int(window * (spec.edges if not edge_list else edges.count())))
    df = window_updates(edges, window, relation=spec.relation, seed=seed,
                        min_dst=min_dst, epoch_every=spec.epoch_every)
    n = write_lines(df, out)
    return f"wrote {n} updates of {spec.relation} to {out} (spark)"


def tpch(out_dir: str, sf: float, *, refresh_pairs: int = 2, seed: int = 0,
         other_updates: int | None = None) -> str:
    """TPC-H at scale factor ``sf`` into ``out_dir``: ``schema.sql``, ``updates.csv``
    (the initial load, then ``refresh_pairs`` x RF1, RF2 and UPD epochs),
    ``queries/q01.sql`` ... ``q22.sql``, ``manifest.json`` (:mod:`connectors.tpch`)."""
    from connectors import tpch as tpch_data

    spec = tpch_data.TpchSpec(sf, refresh_pairs, seed, other_updates)
    return _report("TPC-H", sf, out_dir, tpch_data.write_tpch(spec, out_dir), 22)


def _report(name: str, sf: float, out_dir: str, manifest: dict[str, Any], queries: int
            ) -> str:
    load = sum(manifest["epochs"][0]["inserts"].values())
    rest = manifest["lines"] - load - len(manifest["epochs"])
    return (f"wrote {name} SF {sf} to {out_dir}: {load} rows in the initial load, "
            f"{rest} updates in {len(manifest['epochs']) - 1} refresh epochs, {queries} "
            f"queries ({manifest['seconds']['total']:.1f} s)")


def tpcds(out_dir: str, sf: float, *, refresh_rounds: int = 2, seed: int = 0,
          sales_per_refresh: int | None = None, delete_days: int = 7,
          dimension_updates: int | None = None) -> str:
    """TPC-DS at scale factor ``sf`` into ``out_dir``: ``schema.sql``, ``updates.csv``
    (the initial load, then ``refresh_rounds`` x INS, DEL and UPD epochs),
    ``queries/q01.sql`` ... ``q99.sql``, ``manifest.json`` (:mod:`connectors.tpcds`)."""
    from connectors import tpcds as tpcds_data

    spec = tpcds_data.TpcdsSpec(sf, refresh_rounds, seed, sales_per_refresh, delete_days,
                                dimension_updates)
    return _report("TPC-DS", sf, out_dir, tpcds_data.write_tpcds(spec, out_dir), 99)
