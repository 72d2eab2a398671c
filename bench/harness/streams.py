"""The bench's streams: each generator one workload's, kept as its benchmark measured it.

- :func:`zipf_stream`: a FIFO window over a Zipf-skewed graph, in memory (crossover,
  instructions, the Flink SQL peer).
- :func:`window_files`: a FIFO window over a uniform graph, as update and query files for
  ``ivmflow run`` (runner state, write-back, Spark).
- :func:`hub_stream`: load, FIFO tail and hot phases over a hub-heavy graph (triangles,
  triangles with free variables, the dumbbell).

The CROWN workload of ``run_bench`` is :mod:`bench.workloads`.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from connectors.generators import fifo_window_stream, skewed_graph, write_update_csv
from core.records import Update

Edge = tuple[int, int]

NODES_PER_EDGE = 3000 / 8000
"""Nodes per live edge (3000 nodes at window 8k)."""
ZIPF = 0.75
"""Exponent of the node weights (skew of in- and out-degrees)."""


@dataclass
class ZipfStream:
    """Warm-up inserts (untimed) and the timed FIFO updates over a skewed graph."""

    window: int
    nodes: int
    threshold: int
    warm: list[Update]
    timed: list[Update]


def zipf_stream(window: int, updates: int, seed: int = 0) -> ZipfStream:
    """The crossover benchmark's stream: a skewed directed graph (Zipf-like out- and
    in-degree weights, shuffled ids, ``NODES_PER_EDGE`` nodes per live edge), ``window``
    warm-up inserts, then ``updates`` timed updates alternating the insert of the next
    edge and the delete of the edge inserted ``window`` inserts earlier."""
    nodes = max(20, round(window * NODES_PER_EDGE))
    n_edges = window + (updates + 1) // 2
    if n_edges > nodes * (nodes - 1) // 4:
        raise ValueError(f"{n_edges} edges do not fit sparsely on {nodes} nodes")
    rng = random.Random(seed)
    ids = list(range(nodes))
    rng.shuffle(ids)
    weights = [1.0 / (i + 1) ** ZIPF for i in range(nodes)]
    seen: set[tuple[int, int]] = set()
    edges: list[tuple[int, int]] = []
    while len(edges) < n_edges:
        srcs = rng.choices(ids, weights, k=n_edges)
        dsts = rng.choices(ids[::-1], weights, k=n_edges)
        for e in zip(srcs, dsts):
            if e[0] != e[1] and e not in seen:
                seen.add(e)
                edges.append(e)
                if len(edges) == n_edges:
                    break
    dst_sorted = sorted(d for _, d in edges)
    threshold = dst_sorted[int(0.9 * len(dst_sorted))]
    stream = [Update(op, "G", e) for op, e in fifo_window_stream(edges, window)]
    return ZipfStream(window, nodes, threshold, stream[:window], stream[window:window + updates])


def window_files(window: int, steady_edges: int, directory: Path, sql: str, epoch: int
                 ) -> tuple[Path, Path, int]:
    """The runner-state benchmark's stream as files: the update file for window W (FIFO,
    ``steady_edges`` steady inserts each with a delete), ``sql`` as its query file, and the
    number of warm-up epochs of ``epoch`` updates."""
    # Uniform endpoints at a fixed density (W / 2 nodes): the degree distribution, and so
    # the change an update makes, is the same at every W; only the state grows.
    edges = skewed_graph(window + steady_edges, max(1000, window // 2), seed=7, alpha=0.0)
    updates = directory / f"w{window}.csv"
    write_update_csv(updates, "G", fifo_window_stream(edges, window))
    query = directory / "q.sql"
    query.write_text(sql)
    return updates, query, window // epoch


@dataclass(frozen=True)
class GraphSpec:
    """Parameters of :func:`hub_graph`: ``hubs`` hubs whose in- and out-degree in the
    live graph is about ``hub_scale * |D|^hub_exp``; background BA with ``attach``."""

    hubs: int = 2
    hub_exp: float = 1.0
    hub_scale: float = 0.1
    attach: int = 1

    def describe(self) -> str:
        return (
            f"hub-heavy: {self.hubs} hubs with in- and out-degree ~{self.hub_scale:g} * "
            f"|D|^{self.hub_exp:g} on a Barabasi-Albert background (m={self.attach}, random "
            "orientation); hubs point into one random half A of the background and are "
            "pointed at from the other half B (degree-biased), all hub->hub edges present; "
            "no self-loops or duplicate edges; node ids shuffled"
        )


def hub_degree(n_edges: int, spec: GraphSpec, n_live: int | None = None) -> int:
    """Hub in-/out-degree in a graph of ``n_edges`` edges whose live window holds
    ``n_live``: ``hub_scale * n_live^hub_exp * n_edges / n_live``, capped on tiny graphs
    so that each background half keeps about twice as many vertices as a hub has
    neighbours there."""
    k, m = spec.hubs, spec.attach
    live = n_live or n_edges
    cap = (n_edges - k * (k - 1)) // (4 * m + 2 * k)
    want = spec.hub_scale * live**spec.hub_exp * n_edges / live
    return max(1, min(cap, round(want)))


def hub_graph(n_edges: int, seed: int = 0, spec: GraphSpec | None = None,
              n_live: int | None = None) -> tuple[list[Edge], list[Edge]]:
    """``n_edges`` distinct directed edges (no self-loops) of a hub-heavy graph in a
    seeded random order (see bench/triangle_bench.py), and the hub -> hub edges."""
    spec = spec or GraphSpec()
    rng = random.Random(seed)
    k = spec.hubs
    d = hub_degree(n_edges, spec, n_live)
    n_bg = n_edges - k * (k - 1) - 2 * k * d
    m = spec.attach
    if n_bg < 4 * m:
        msg = f"{n_edges} edges: too few for {k} hubs; use more edges or fewer hubs"
        raise ValueError(msg)
    n = n_bg // m + m + 1
    und = sorted(nx.barabasi_albert_graph(n, m, seed=seed).edges())
    rng.shuffle(und)
    edges = [(u, v) if rng.random() < 0.5 else (v, u) for u, v in und[:n_bg]]
    in_a = [rng.random() < 0.5 for _ in range(n)]
    # Each vertex once per incident edge: a degree-biased choice.
    pools = ([x for e in edges for x in e if in_a[x]], [x for e in edges for x in e
                                                         if not in_a[x]])
    sides = ([v for v in range(n) if in_a[v]], [v for v in range(n) if not in_a[v]])

    def neighbours(side: int) -> list[int]:
        pool, everyone = pools[side], sides[side]
        want = min(d, len(everyone))
        chosen: set[int] = set()
        tries = 0
        while pool and len(chosen) < want and tries < 20 * want:
            chosen.add(rng.choice(pool))
            tries += 1
        while len(chosen) < want:  # rare: fill uniformly
            chosen.add(rng.choice(everyone))
        return sorted(chosen)

    hubs = list(range(n, n + k))
    for h in hubs:
        edges += [(h, u) for u in neighbours(0)]
        edges += [(u, h) for u in neighbours(1)]
    hub_edges = [(h, g) for h in hubs for g in hubs if h != g]
    edges += hub_edges
    perm = list(range(n + k))
    rng.shuffle(perm)
    out = [(perm[u], perm[v]) for u, v in edges]
    rng.shuffle(out)
    assert len(set(out)) == len(out)
    return out, [(perm[u], perm[v]) for u, v in hub_edges]


@dataclass
class HubStream:
    """Load ``n_live`` inserts, then ``tail`` FIFO steps (insert newest, delete oldest),
    then ``hot`` updates toggling hub -> hub edges (delete + re-insert)."""

    updates: list[tuple[str, Edge]]
    n_live: int
    phases: dict[str, tuple[int, int]]
    """Phase name -> (start, end) update index: ``load``, ``tail``, ``hot``."""
    hub_degree: int


def hub_stream(n_live: int, seed: int, tail: float, spec: GraphSpec, hot: int = 200
               ) -> HubStream:
    w = max(1, round(tail * n_live))
    order, hub_edges = hub_graph(n_live + w, seed=seed, spec=spec, n_live=n_live)
    n_edges = len(order)
    ups: list[tuple[str, Edge]] = [("+", e) for e in order[:n_live]]
    for j in range(w):
        ups.append(("+", order[n_live + j]))
        ups.append(("-", order[j]))
    n_tail = len(ups)
    live = set(order[w:])
    for r in range(hot // 2 if hub_edges else 0):
        e = hub_edges[r % len(hub_edges)]
        ups += [("-", e), ("+", e)] if e in live else [("+", e), ("-", e)]
    phases = {"load": (0, n_live), "tail": (n_live, n_tail), "hot": (n_tail, len(ups))}
    d = hub_degree(n_edges, spec, n_live)
    return HubStream(ups, n_live, phases, round(d * n_live / n_edges))


def degree_stats(edges: Sequence[Edge]) -> dict[str, int]:
    outd: Counter[int] = Counter(s for s, _ in edges)
    ind: Counter[int] = Counter(d for _, d in edges)
    return {
        "vertices": len(set(outd) | set(ind)),
        "max_out_degree": max(outd.values()),
        "max_in_degree": max(ind.values()),
    }


# -- systems -------------------------------------------------------------------------
