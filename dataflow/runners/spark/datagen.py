"""The data generator on Spark: edge lists -> FIFO sliding-window update streams in the
update-CSV contract (docs/formats.md), with filters, shuffles and epoch markers.

An edge list (a ``src,dst`` CSV, ``#`` comments allowed, or a generated skewed graph)
is deduplicated, optionally filtered and shuffled, numbered with ``zipWithIndex``, and
expanded into inserts and the deletes of a FIFO window: edge i is inserted at position
(i, 0) and deleted at (i + w, 1), i.e. right after the insertion of edge i + w (the
CROWN paper's protocol). The same order as :func:`connectors.generators.fifo_window_stream`.

This module imports pyspark; ``operators/`` and ``plans/`` never do.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import LongType, StructField, StructType

EDGE_SCHEMA = StructType([StructField("src", LongType()), StructField("dst", LongType())])


def read_edge_list(spark: SparkSession, path: str) -> DataFrame:
    """A ``src,dst`` edge list (header optional, ``#`` comment lines skipped)."""
    raw = spark.read.option("comment", "#").csv(path, schema=EDGE_SCHEMA)
    return raw.where(F.col("src").isNotNull() & F.col("dst").isNotNull())


def window_updates(
    edges: DataFrame,
    window: int | None,
    *,
    relation: str = "G",
    seed: int | None = 0,
    min_dst: int | None = None,
    epoch_every: int | None = None,
) -> DataFrame:
    """One column ``line`` of update-CSV lines, in stream order (column ``pos``)."""
    if "o" not in edges.columns:  # input order, kept through the deduplication
        edges = edges.withColumn("o", F.monotonically_increasing_id())
    edges = (
        edges.where(F.col("src") != F.col("dst"))
        .groupBy("src", "dst")
        .agg(F.min("o").alias("o"))
    )
    if min_dst is not None:
        edges = edges.where(F.col("dst") >= F.lit(min_dst))
    ordered = edges.orderBy(F.rand(seed), "o") if seed is not None else edges.orderBy("o")
    numbered = ordered.rdd.zipWithIndex().map(lambda p: (p[1], p[0]["src"], p[0]["dst"]))
    idx = numbered.toDF(["i", "src", "dst"])
    body = F.concat_ws(",", F.lit(relation), F.col("src").cast("string"),
                       F.col("dst").cast("string"))
    inserts = idx.select(F.col("i").alias("k"), F.lit(0).alias("k2"),
                         F.concat(F.lit("+,"), body).alias("line"))
    stream = inserts
    if window is not None:
        total = idx.count()
        deletes = idx.where(F.col("i") + window < total).select(
            (F.col("i") + window).alias("k"), F.lit(1).alias("k2"),
            F.concat(F.lit("-,"), body).alias("line"),
        )
        stream = inserts.unionByName(deletes)
    ranked = stream.orderBy("k", "k2").rdd.zipWithIndex().map(
        lambda p: (p[1], p[0]["line"])
    ).toDF(["pos", "line"])
    return with_epoch_markers(ranked, epoch_every)


def with_epoch_markers(ranked: DataFrame, epoch_every: int | None) -> DataFrame:
    """A ``*`` line after every ``epoch_every`` updates (positions stay sortable)."""
    if not epoch_every:
        return ranked
    markers = ranked.where((F.col("pos") + 1) % epoch_every == 0).select(
        (F.col("pos") + F.lit(0.5)).alias("pos"), F.lit("*").alias("line")
    )
    return ranked.select(F.col("pos").cast("double"), "line").unionByName(markers)


def write_lines(df: DataFrame, out: str) -> int:
    """Write the ``line`` column in ``pos`` order as one text file; returns the number of
    update lines. Written next to the target and renamed, so a reader never sees half."""
    target = Path(out)
    tmp = Path(tempfile.mkdtemp(prefix=".ivmflow-gen-", dir=target.parent or "."))
    try:
        df.orderBy("pos").select("line").coalesce(1).write.mode("overwrite").text(str(tmp / "t"))
        part = next((tmp / "t").glob("part-*"))
        part.replace(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return int(df.where(F.col("line") != "*").count())


SOCIAL_SCHEMA_SQL = """CREATE TABLE person(id INT, name TEXT);
CREATE TABLE knows(p1 INT, p2 INT);
CREATE TABLE message(id INT, creator INT);
"""
"""The tables of :func:`social_updates`, for query files."""


def social_updates(
    spark: SparkSession,
    persons: int,
    knows: int,
    messages: int,
    *,
    window: float = 0.2,
    seed: int = 0,
    epoch_every: int | None = None,
) -> DataFrame:
    """A social-network style stream (``person``, ``knows``, ``message``): all persons
    first, then ``knows`` and ``message`` insertions in random order, each table under
    its own FIFO window (a tuple is deleted right after the insertion of the
    ``window``-th later tuple of its table). Endpoints and creators are skewed (a few
    persons are very active)."""
    people = spark.range(persons).select(
        F.lit(-1).cast("long").alias("k"), F.col("id").alias("k2"),
        F.concat(F.lit("+,person,"), F.col("id").cast("string"), F.lit(",p"),
                 F.col("id").cast("string")).alias("line"),
    )
    skew = F.floor(F.lit(persons) * F.pow(F.rand(seed + 1), F.lit(2.0))).cast("long")
    skew2 = F.floor(F.lit(persons) * F.pow(F.rand(seed + 2), F.lit(2.0))).cast("long")
    edges = (
        spark.range(knows).select(skew.alias("a"), skew2.alias("b"))
        .where(F.col("a") != F.col("b"))
        .dropDuplicates(["a", "b"])
        .select(F.lit("knows").alias("t"), "a", "b")
    )
    creator = F.floor(F.lit(persons) * F.pow(F.rand(seed + 3), F.lit(3.0))).cast("long")
    posts = spark.range(messages).select(
        F.lit("message").alias("t"), F.col("id").alias("a"), creator.alias("b")
    )
    events = edges.unionByName(posts).orderBy(F.rand(seed + 4), "t", "a", "b")
    numbered = events.rdd.zipWithIndex().map(
        lambda p: (p[1], p[0]["t"], p[0]["a"], p[0]["b"])
    ).toDF(["i", "t", "a", "b"])
    from pyspark.sql.window import Window

    per_table = numbered.withColumn(
        "j", F.row_number().over(Window.partitionBy("t").orderBy("i")) - 1
    )
    body = F.concat_ws(",", F.col("t"), F.col("a").cast("string"), F.col("b").cast("string"))
    inserts = per_table.select(F.col("i").alias("k"), F.lit(0).cast("long").alias("k2"),
                               F.concat(F.lit("+,"), body).alias("line"))
    sizes = {r["t"]: int(r["n"]) for r in per_table.groupBy("t").agg(F.count("*").alias("n"))
             .collect()}
    later = per_table.select(F.col("t").alias("t2"), F.col("j").alias("j2"),
                             F.col("i").alias("i2"))
    deletes = None
    for table, n in sizes.items():
        w = max(1, int(window * n))
        part = (
            per_table.where(F.col("t") == table)
            .join(later.where(F.col("t2") == table),
                  (F.col("j") + F.lit(w)) == F.col("j2"))
            .select(F.col("i2").alias("k"), F.lit(1).cast("long").alias("k2"),
                    F.concat(F.lit("-,"), body).alias("line"))
        )
        deletes = part if deletes is None else deletes.unionByName(part)
    stream = people.unionByName(inserts)
    if deletes is not None:
        stream = stream.unionByName(deletes)
    ranked = stream.orderBy("k", "k2").rdd.zipWithIndex().map(
        lambda p: (p[1], p[0]["line"])
    ).toDF(["pos", "line"])
    return with_epoch_markers(ranked, epoch_every)
