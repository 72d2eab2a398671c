"""Benchmark workloads: a skewed directed graph, the CROWN FIFO sliding-window stream,
and the four benchmark queries as SQL text.

Graph: a Barabási–Albert preferential-attachment graph (``networkx``, seeded), each
undirected edge oriented at random, so there are ``n_edges`` distinct directed edges
``(src, dst)`` with ``src != dst`` and no pair of opposite edges. Degrees are skewed
(power law; the oldest BA nodes are the hubs). Node ids are a random permutation of
``0..n-1``, so id order is independent of degree and the ``G3.dst > T`` filter keeps
about 10% of the edges without preferring (or avoiding) hubs.

Stream (CROWN §3.3, count-based FIFO window): edges are inserted in a random order
``e_0, e_1, ...``; ``e_i`` is deleted right after the insertion of ``e_{i+w}``, i.e.
after ``w`` later insertions, with ``w = 0.2 * n_edges``. The last ``w`` edges are never
deleted, so the stream has ``2 * n_edges - w`` updates and the live graph never holds
more than ``w + 1`` edges.

Example:
    >>> wl = make_workload("hop3_full", n_edges=50, seed=1)
    >>> len(wl.updates) == 2 * 50 - wl.window
    True
    >>> wl.updates[0].op, wl.updates[0].relation
    ('+', 'G')
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import networkx as nx

from connectors.generators import fifo_window_stream
from core.records import Update

QUERY_NAMES: tuple[str, ...] = ("hop3_full", "hop4_project", "star_count", "comb2")
"""The benchmark queries, in report order."""

WINDOW_FACTOR = 0.2
"""Window size as a fraction of the edges (the CROWN artifact's ``window.factor``)."""

VERTEX_FRACTION = 0.2
"""Fraction of the vertices inserted into each of V1 and V2 for the 2-comb."""

FILTER_KEEP = 0.10
"""Fraction of the edges whose ``dst`` passes the ``G3.dst > T`` filter."""

Edge = tuple[int, int]

_G_DDL = "CREATE TABLE G(src INT, dst INT);\n"
_V_DDL = "CREATE TABLE V1(v INT);\nCREATE TABLE V2(v INT);\n"


@dataclass(frozen=True)
class Graph:
    """A directed graph: distinct edges, the node count and the filter threshold."""

    edges: tuple[Edge, ...]
    n_nodes: int
    threshold: int
    """``T`` of ``G3.dst > T``: the 90th percentile of the ``dst`` column."""


def make_graph(
    n_edges: int, seed: int = 0, attach: int = 4, model: str = "scale_free"
) -> Graph:
    """A skewed directed graph with exactly ``n_edges`` distinct edges (see module doc).

    ``model="ba"``: Barabási–Albert with ``attach`` edges per new node, each edge
    oriented at random. ``model="scale_free"``: networkx's directed scale-free graph
    (Bollobás et al.; power-law in- and out-degrees, much heavier hubs), self-loops and
    parallel edges dropped.
    """
    if n_edges < 1:
        raise ValueError("n_edges must be positive")
    rng = random.Random(seed)
    if model == "ba":
        m = max(1, min(attach, n_edges))
        n = n_edges // m + m + 1
        g = nx.barabasi_albert_graph(n, m, seed=seed)
        und = sorted(g.edges())
        rng.shuffle(und)
        pairs = [(u, v) if rng.random() < 0.5 else (v, u) for u, v in und[:n_edges]]
    elif model == "scale_free":
        n = max(8, int(n_edges / 1.5))
        while True:
            sf = nx.scale_free_graph(n, seed=seed)
            distinct = sorted({(u, v) for u, v in sf.edges() if u != v})
            if len(distinct) >= n_edges:
                break
            n = int(n * 1.2) + 1
        rng.shuffle(distinct)
        pairs = distinct[:n_edges]
    else:
        raise ValueError(f"unknown graph model {model!r}; expected 'ba' or 'scale_free'")
    perm = list(range(n))
    rng.shuffle(perm)
    edges = [(perm[u], perm[v]) for u, v in pairs]
    dsts = sorted(d for _, d in edges)
    idx = min(len(dsts) - 1, max(0, math.ceil((1.0 - FILTER_KEEP) * len(dsts)) - 1))
    return Graph(tuple(edges), n, dsts[idx])


def fifo_stream(edges: tuple[Edge, ...] | list[Edge], window: int, seed: int = 0,
                relation: str = "G") -> list[Update]:
    """The FIFO sliding-window stream: insert in a random order, delete each edge right
    after ``window`` later insertions (the last ``window`` edges stay):
    :func:`connectors.generators.fifo_window_stream` over the shuffled edges."""
    order = list(edges)
    random.Random(seed + 1).shuffle(order)
    return [Update(op, relation, e) for op, e in fifo_window_stream(order, window)]


def vertex_updates(n_nodes: int, seed: int = 0) -> list[Update]:
    """Inserts of ``VERTEX_FRACTION`` of the vertices into V1 and (independently) V2."""
    rng = random.Random(seed + 2)
    k = max(1, round(VERTEX_FRACTION * n_nodes))
    out = [Update("+", "V1", (v,)) for v in sorted(rng.sample(range(n_nodes), k))]
    out += [Update("+", "V2", (v,)) for v in sorted(rng.sample(range(n_nodes), k))]
    return out


def query_sql(name: str, threshold: int) -> str:
    """The SQL text (``CREATE TABLE`` statements + one ``SELECT``) of a benchmark query.

    ``threshold`` is ``T`` of the ``G3.dst > T`` filter (used by ``hop3_full``).
    """
    if name == "hop3_full":
        return _G_DDL + (
            "SELECT G1.src AS A, G2.src AS B, G3.src AS C, G3.dst AS D\n"
            "FROM G G1, G G2, G G3\n"
            "WHERE G1.dst = G2.src AND G2.dst = G3.src AND G3.dst > "
            f"{threshold};\n"
        )
    if name == "hop4_project":
        return _G_DDL + (
            "SELECT DISTINCT G2.src AS B, G3.src AS C, G3.dst AS D\n"
            "FROM G G1, G G2, G G3, G G4\n"
            "WHERE G1.dst = G2.src AND G2.dst = G3.src AND G3.dst = G4.src;\n"
        )
    if name == "star_count":
        # A 3-star (the paper's star has 4 arms): COUNT(*) = outdeg^3 stays printable
        # and the per-update delta is one retraction plus one insertion either way.
        return _G_DDL + (
            "SELECT G1.src, COUNT(*)\n"
            "FROM G G1, G G2, G G3\n"
            "WHERE G1.src = G2.src AND G1.src = G3.src\n"
            "GROUP BY G1.src;\n"
        )
    if name == "comb2":
        return _G_DDL + _V_DDL + (
            "SELECT G1.src AS A, G2.src AS B, G3.src AS C, G3.dst AS D\n"
            "FROM G G1, G G2, G G3, V1, V2\n"
            "WHERE G1.dst = G2.src AND G2.dst = G3.src AND V1.v = G1.src "
            "AND V2.v = G3.dst;\n"
        )
    raise ValueError(f"unknown benchmark query {name!r}; expected one of {QUERY_NAMES}")


@dataclass
class Workload:
    """One benchmark input: query text, the update stream and how it was made."""

    query: str
    sql: str
    updates: list[Update]
    n_edges: int
    n_nodes: int
    window: int
    threshold: int
    seed: int
    meta: dict[str, object] = field(default_factory=dict)

    def epochs(self, size: int) -> list[list[Update]]:
        """The stream cut into epochs of ``size`` updates (the last may be shorter)."""
        return [self.updates[i:i + size] for i in range(0, len(self.updates), size)]


def make_workload(query: str, n_edges: int, seed: int = 0, attach: int = 4,
                  window_factor: float = WINDOW_FACTOR,
                  model: str = "scale_free") -> Workload:
    """Graph + FIFO stream (+ V1/V2 inserts at the start for ``comb2``) for ``query``."""
    graph = make_graph(n_edges, seed=seed, attach=attach, model=model)
    window = max(1, int(window_factor * len(graph.edges)))
    updates = fifo_stream(graph.edges, window, seed=seed)
    if query == "comb2":
        updates = vertex_updates(graph.n_nodes, seed=seed) + updates
    sql = query_sql(query, graph.threshold)
    return Workload(query, sql, updates, len(graph.edges), graph.n_nodes, window,
                    graph.threshold, seed)

