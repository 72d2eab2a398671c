"""The data pipeline on Spark: edge lists -> FIFO sliding-window update streams in the
update-CSV contract (DESIGN section 3), with filters, shuffles and epoch markers.

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
    if epoch_every:
        markers = ranked.where((F.col("pos") + 1) % epoch_every == 0).select(
            (F.col("pos") + F.lit(0.5)).alias("pos"), F.lit("*").alias("line")
        )
        ranked = ranked.select(F.col("pos").cast("double"), "line").unionByName(markers)
    return ranked


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
