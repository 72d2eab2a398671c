"""Synthetic update streams: skewed directed graphs and FIFO sliding windows.

Example:
    >>> edges = skewed_graph(6, n_nodes=5, seed=1)
    >>> len(edges), len(set(edges)), all(s != d for s, d in edges)
    (6, 6, True)
    >>> list(fifo_window_stream([(1, 2), (2, 3), (3, 4)], 2))
    [('+', (1, 2)), ('+', (2, 3)), ('+', (3, 4)), ('-', (1, 2))]
"""

from __future__ import annotations

import bisect
import itertools
import random
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal, TextIO

from core.records import csv_line, format_value
from core.schema import Value

__all__ = ["fifo_window_stream", "skewed_graph", "write_update_csv"]

Edge = tuple[int, int]
StreamItem = tuple[str, Sequence[Value]]


def skewed_graph(
    n_edges: int,
    n_nodes: int | None = None,
    *,
    seed: int = 0,
    alpha: float = 1.0,
    model: Literal["zipf", "powerlaw_cluster"] = "zipf",
) -> list[Edge]:
    """A directed edge list of exactly ``n_edges`` distinct edges without self-loops, with
    skewed (power-law) degrees, in a random (seeded, reproducible) order.

    ``model="zipf"``: both endpoints are drawn from a Zipf law with exponent ``alpha`` over
    ``n_nodes`` nodes (default ``max(n_edges // 4, 16)``), whose ids are shuffled, so a few
    hubs have large in- and out-degrees (heavy keys for joins).  ``model="powerlaw_cluster"``:
    networkx's Holme-Kim preferential-attachment graph, each edge oriented at random
    (``alpha`` unused).

    >>> g = skewed_graph(1000, seed=3)
    >>> len(set(g)) == 1000 and g == skewed_graph(1000, seed=3)
    True
    """
    if n_edges < 0:
        msg = f"n_edges must be >= 0, not {n_edges}"
        raise ValueError(msg)
    rng = random.Random(seed)
    if model == "powerlaw_cluster":
        return _powerlaw_cluster(n_edges, n_nodes, rng)
    if model != "zipf":
        msg = f"unknown graph model {model!r} (zipf, powerlaw_cluster)"
        raise ValueError(msg)
    n = n_nodes if n_nodes is not None else max(n_edges // 4, 16)
    if n_edges > n * (n - 1):
        msg = f"{n_edges} distinct directed edges do not fit on {n} nodes"
        raise ValueError(msg)
    cum = list(itertools.accumulate((i + 1) ** -alpha for i in range(n)))
    total = cum[-1]
    labels = list(range(n))
    rng.shuffle(labels)
    edges: list[Edge] = []
    seen: set[Edge] = set()
    budget = 50 * n_edges + 1000
    while len(edges) < n_edges and budget > 0:
        budget -= 1
        s = labels[bisect.bisect(cum, rng.random() * total, hi=n - 1)]
        d = labels[bisect.bisect(cum, rng.random() * total, hi=n - 1)]
        if s != d and (s, d) not in seen:
            seen.add((s, d))
            edges.append((s, d))
    if len(edges) < n_edges:
        # The Zipf law is too concentrated to find new pairs: fill up uniformly.
        while len(edges) < n_edges:
            s, d = rng.randrange(n), rng.randrange(n)
            if s != d and (s, d) not in seen:
                seen.add((s, d))
                edges.append((s, d))
    return edges


def _powerlaw_cluster(n_edges: int, n_nodes: int | None, rng: random.Random) -> list[Edge]:
    import networkx as nx

    m = 3
    n = n_nodes if n_nodes is not None else max(n_edges // m + m + 1, m + 2)
    graph = nx.powerlaw_cluster_graph(n, m, 0.1, seed=rng.randrange(2**31))
    pairs = list(graph.edges())
    if len(pairs) < n_edges:
        msg = f"powerlaw_cluster graph on {n} nodes has only {len(pairs)} edges"
        raise ValueError(msg)
    rng.shuffle(pairs)
    return [(int(a), int(b)) if rng.random() < 0.5 else (int(b), int(a))
            for a, b in pairs[:n_edges]]


def fifo_window_stream(
    items: Iterable[Sequence[Value]], window: int | float
) -> Iterator[StreamItem]:
    """Insert every item in order; once more than ``window`` are live, delete the oldest
    right after each insertion (a FIFO sliding window).  A float ``window`` in (0, 1] is a
    fraction of the number of items.  The stream ends after the last insertion.

    >>> [op for op, _ in fifo_window_stream([(1,), (2,), (3,), (4,)], 0.5)]
    ['+', '+', '+', '-', '+', '-']
    """
    if isinstance(window, float):
        if not 0 < window <= 1:
            msg = f"a fractional window must be in (0, 1], not {window}"
            raise ValueError(msg)
        items = list(items)
        size = max(1, round(window * len(items)))
    else:
        size = window
    if size < 1:
        msg = f"window must hold at least one item, not {size}"
        raise ValueError(msg)
    live: deque[Sequence[Value]] = deque()
    for item in items:
        yield "+", item
        live.append(item)
        if len(live) > size:
            yield "-", live.popleft()


def write_update_csv(
    path: str | Path,
    relation: str,
    stream: Iterable[StreamItem],
    epoch_every: int | None = None,
) -> int:
    """Write ``(op, row)`` items as an update CSV (``"-"``: stdout), with a ``*`` line after
    every ``epoch_every`` updates; returns the number of updates written.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "u.csv"
    >>> write_update_csv(p, "G", [("+", (1, 2)), ("-", (1, 2))], epoch_every=1)
    2
    >>> p.read_text().split()
    ['+,G,1,2', '*', '-,G,1,2', '*']
    """
    if epoch_every is not None and epoch_every < 1:
        msg = f"epoch_every must be >= 1, not {epoch_every}"
        raise ValueError(msg)
    if str(path) == "-":
        return _write_stream(sys.stdout, relation, stream, epoch_every)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        return _write_stream(f, relation, stream, epoch_every)


def _write_stream(
    f: TextIO, relation: str, stream: Iterable[StreamItem], epoch_every: int | None
) -> int:
    write = f.write
    count = 0
    buf: list[str] = []
    for op, row in stream:
        if op not in ("+", "-"):
            msg = f"stream items must have op '+' or '-', not {op!r}"
            raise ValueError(msg)
        fields = [format_value(v) for v in row]
        if any(c in v for v in fields for c in ',"\n\r'):
            buf.append(csv_line([op, relation, *fields]))
        else:
            buf.append(",".join([op, relation, *fields]))
        count += 1
        if epoch_every is not None and count % epoch_every == 0:
            buf.append("*")
        if len(buf) >= 4096:
            write("\n".join(buf) + "\n")
            buf.clear()
    if buf:
        write("\n".join(buf) + "\n")
    return count
