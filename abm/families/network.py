"""Social ties between Eutopia's applicants (our extension): docs/MODEL.md, "Social ties (our extension)".

A graph over the applicants (node = ``agent_id``: group M's rows first, then F's) is built with
networkx from a named generator or read from an edge list, seeded from a *child* of the run's
population stream (``SeedSequence(seed, spawn_key=(STREAMS.index("population"), NETWORK_KEY))``),
so no existing stream draws a number more or less. On the graph:

* network excitation: each approval of applicant j at t_j adds ``alpha_net a_ij exp(-beta_net
  (t - t_j))`` to the application intensity of each neighbour i (``a_ij`` = the tie's weight, or
  that divided by i's total tie weight under ``weighting: degree``), on top of the seed's group
  term, and i applies at ``w_i (lambda_g(t) / N_g + E_i(t))``: a multivariate Hawkes process on
  the graph. The network term is its own SimPy process superposed on the group processes (a sum
  of intensities is a superposition of point processes). It is sampled exactly by thinning
  against ``alpha_net w_max Z(t)``, ``Z(t) = sum_m s_{j_m} exp(-beta_net (t - t_m))`` over past
  approvals m (``s_j`` = j's total outgoing excitation weight): Z only decays between approvals,
  so its value now bounds it until the next approval. A candidate at tau picks an approval m with
  probability proportional to its term in Z(tau) (the terms' ratios do not change as they decay
  together: an append-only cumulative sum of keys ``s_j exp(beta (t_m - t_ref))``), a neighbour i
  of j_m proportionally to ``a_ij``, and is kept with probability ``Z(tau) w_i / (Z(now) w_max)``:
  applicant i then applies at exactly ``w_i alpha_net sum_m a_{i j_m} exp(-beta (tau - t_m))``.
* peer information: applicant i's perceived approval probability is ``(1 - w) sigma(h_i) + w r_i``
  with ``r_i`` the approval rate of i's neighbours' decided applications so far (tie-weighted;
  sigma(h_i) while they have none), and its self-selection weight ``1 + lambda r``-style:
  ``1 + lambda_sel ((1 - w) sigma_i + w r_i)``.
* metrics (``summary()["network"]``): reach and approval rates by community and degree decile,
  credit contagion, wealth assortativity along ties, within- vs between-group tie wealth gaps.

``generator: none`` (the default) builds nothing and changes nothing. A graph with
``excitation: 0`` and ``peer_weight: 0`` is *passive*: the run is the group-level run draw for
draw (the same events, episodes and agents files), and only ``summary.json`` gains the network's
metrics (its contagion share is then the chance level of the same graph).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import pandas as pd
import simpy
from pydantic import Field, model_validator

from abm.config import Section
from abm.errors import UserError
from abm.engine import STREAMS
from abm.hawkes import decay

GENERATORS = ("none", "sbm", "watts_strogatz", "barabasi_albert", "configuration", "edge_list")
#: spawn key of the network's child seeds under the population (graph) and arrivals (sampler) streams
NETWORK_KEY = 0x6E6574  # "net"
RENORMALISE = 50.0  # rescale the selection keys when beta (now - t_ref) exceeds this (exp(50) ~ 5e21)
BLOCK_MARGIN, BLOCK_MIN, EVENT_BLOCK = 1.5, 8, 16  # candidates per block (as eutopia_arrivals)
MAX_LISTED_COMMUNITIES = 20


class NetworkConfig(Section):
    """The ``network`` section of a Eutopia scenario (our extension; docs/MODEL.md)."""

    generator: Literal["none", "sbm", "watts_strogatz", "barabasi_albert", "configuration", "edge_list"] = Field(
        "none", description=(
            "none: no ties (the seed's model, nothing changes); sbm: stochastic block model over the two "
            "groups with `homophily`; watts_strogatz; barabasi_albert; configuration: a configuration model "
            "on `degrees`; edge_list: the ties in the file `path`."))
    mean_degree: float = Field(10.0, gt=0, le=1e6, description=(
        "k: expected ties per applicant (sbm; watts_strogatz: its ring degree k, barabasi_albert: 2m - both "
        "even whole numbers)."))
    homophily: float = Field(0.5, ge=0, le=1, description=(
        "sbm: expected share of an applicant's ties within its own group (exact for equal groups): 0.5 mixes "
        "two equal groups at random, 1 cuts every tie between them."))
    rewiring: float = Field(0.1, ge=0, le=1, description="watts_strogatz: probability p of rewiring each ring tie.")
    degrees: tuple[Annotated[int, Field(ge=0)], ...] | None = Field(None, description=(
        "configuration: the degree of each applicant (N values), or a shorter list repeated to length N; "
        "self-loops and repeated ties of the multigraph are dropped."))
    path: str | None = Field(None, description=(
        "edge_list: a .csv or .parquet file with integer columns source, target (applicant ids 0..N-1) and an "
        "optional positive weight; ties are undirected."))
    weighting: Literal["unit", "degree"] = Field("unit", description=(
        "unit: a neighbour's approval excites with the tie's weight (1 for generated graphs); degree: with the "
        "weight divided by the receiver's total tie weight (an average over neighbours)."))
    excitation: float = Field(0.0, ge=0, le=1e3, description=(
        "alpha_net: intensity jump, per unit tie weight, of each neighbour of an approved applicant (0: ties "
        "do not excite)."))
    decay: float | None = Field(None, gt=0, le=1e3, description="beta_net: decay of the network excitation (default: arrivals.decay).")
    peer_weight: float = Field(0.0, ge=0, le=1, description=(
        "w: perceived approval probability (1 - w) sigma(h) + w * (approval rate seen among the neighbours)."))
    communities: Literal["auto", "groups", "louvain"] = Field("auto", description=(
        "Communities for the metrics: groups (M, F), louvain (networkx, seeded), auto: groups for sbm, "
        "louvain otherwise."))
    contagion_window: float | None = Field(None, gt=0, le=1e6, description=(
        "An application follows a neighbour's approval when it comes within this time of one (default 3/beta_net)."))

    @model_validator(mode="after")
    def _fits_generator(self) -> "NetworkConfig":
        defaults = type(self).model_fields
        own = {"sbm": {"mean_degree", "homophily"}, "watts_strogatz": {"mean_degree", "rewiring"},
               "barabasi_albert": {"mean_degree"}, "configuration": {"degrees"}, "edge_list": {"path"}}
        shared = {"weighting", "excitation", "decay", "peer_weight", "communities", "contagion_window"}
        allowed = own.get(self.generator, set()) | (shared if self.generator != "none" else set())
        for name in ("mean_degree", "homophily", "rewiring", "degrees", "path", *sorted(shared)):
            if name not in allowed and getattr(self, name) != defaults[name].default:
                where = "generator is 'none' (choose a generator)" if self.generator == "none" else \
                    f"it does not apply to generator {self.generator!r}"
                raise ValueError(f"{name} is set but {where}")
        if self.generator == "configuration" and not self.degrees:
            raise ValueError("degrees: generator 'configuration' needs a degree sequence")
        if self.generator == "edge_list" and not self.path:
            raise ValueError("path: generator 'edge_list' needs an edge-list file")
        if self.generator in ("watts_strogatz", "barabasi_albert"):
            k = self.mean_degree
            if k != int(k) or int(k) % 2 or k < 2:
                raise ValueError(f"mean_degree: {self.generator} needs an even whole number >= 2, got {k:g}")
        return self

    @property
    def on(self) -> bool:
        """A graph exists."""
        return self.generator != "none"

    @property
    def active(self) -> bool:
        """The ties change the dynamics (network excitation or peer information)."""
        return self.on and (self.excitation > 0 or self.peer_weight > 0)


def dump(scenario, data: dict[str, Any]) -> dict[str, Any]:
    """A scenario's dump without ``network`` while it is off, so every run without ties keeps its
    config hash, folder name and ``scenario.yaml`` byte for byte."""
    if not scenario.network.on:
        data.pop("network", None)
    return data


# -- seeds ---------------------------------------------------------------------------------
def child_seed(seed: int, stream: str) -> np.random.SeedSequence:
    """A child of the run's ``stream`` seed: ``SeedSequence(seed).spawn(len(STREAMS))`` gives
    stream k the spawn key (k,), whatever the number of streams (so appending a stream changes no
    other), and this is its child (k, NETWORK_KEY): the stream's own draws are untouched."""
    return np.random.SeedSequence(seed, spawn_key=(STREAMS.index(stream), NETWORK_KEY))


# -- the graph -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Graph:
    """An undirected graph on applicants 0..n-1 in CSR form (each tie stored both ways)."""

    n: int
    indptr: np.ndarray  # int64, n + 1
    indices: np.ndarray  # int64 neighbour ids, sorted within each row
    weight: np.ndarray  # float64 tie weight per CSR entry (symmetric)
    community: np.ndarray  # int32 per applicant
    group_sizes: tuple[int, int]
    #: spectral radii already computed, by weighting (validation and the world share them)
    radii: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    @property
    def n_edges(self) -> int:
        return len(self.indices) // 2

    @property
    def rows(self) -> np.ndarray:
        """The source applicant of each CSR entry."""
        return np.repeat(np.arange(self.n, dtype=np.int64), self.degree)

    def strength(self) -> np.ndarray:
        return np.bincount(self.rows, weights=self.weight, minlength=self.n)

    def entries(self, idx: np.ndarray) -> np.ndarray:
        """CSR positions of the rows ``idx`` (repeats allowed), concatenated."""
        starts = self.indptr[idx]
        lens = self.indptr[np.asarray(idx) + 1] - starts
        total = int(lens.sum())
        if total == 0:
            return np.zeros(0, np.int64)
        return np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(total)

    def neighbours(self, i: int) -> np.ndarray:
        return self.indices[self.indptr[i]:self.indptr[i + 1]]

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each tie once, source < target."""
        rows = self.rows
        once = rows < self.indices
        return rows[once], self.indices[once], self.weight[once]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.indptr, self.indices, self.weight, self.community))


def _csr(n: int, src: np.ndarray, dst: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a, b = np.concatenate([src, dst]).astype(np.int64), np.concatenate([dst, src]).astype(np.int64)
    ww = np.concatenate([w, w]).astype(np.float64)
    order = np.lexsort((b, a))
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(a, minlength=n), out=indptr[1:])
    return indptr, b[order], ww[order]


def _nx_edges(G) -> np.ndarray:
    edges = np.fromiter((v for e in G.edges() for v in e), dtype=np.int64, count=2 * G.number_of_edges())
    return edges.reshape(-1, 2)


def _seeds(rng: np.random.Generator, k: int) -> list[int]:
    return [int(s) for s in rng.integers(2**31 - 1, size=k)]


def _generate(cfg: NetworkConfig, sizes: tuple[int, int], rng: np.random.Generator):
    """(edges (m, 2), weights (m,) or None, networkx graph or None) for a generator."""
    import networkx as nx

    n_m, n_f = sizes
    n = n_m + n_f
    if cfg.generator == "sbm":
        # a stochastic block model over the groups, block by block with networkx's O(n + m)
        # generators (nx.stochastic_block_model visits every within-block pair: O(n^2))
        h, k = cfg.homophily, cfg.mean_degree
        s_in_m, s_in_f, s_out = _seeds(rng, 3)
        p_m = h * k / (n_m - 1) if n_m > 1 else 0.0
        p_f = h * k / (n_f - 1) if n_f > 1 else 0.0
        p_out = (1.0 - h) * k / (n / 2.0)
        parts = [_nx_edges(nx.fast_gnp_random_graph(n_m, p_m, seed=s_in_m)),
                 _nx_edges(nx.fast_gnp_random_graph(n_f, p_f, seed=s_in_f)) + n_m,
                 _nx_edges(nx.bipartite.random_graph(n_m, n_f, p_out, seed=s_out))]
        return np.concatenate(parts), None, None
    if cfg.generator in ("watts_strogatz", "barabasi_albert"):
        k = int(cfg.mean_degree)
        s_graph, s_perm = _seeds(rng, 2)
        G = nx.watts_strogatz_graph(n, k, cfg.rewiring, seed=s_graph) if cfg.generator == "watts_strogatz" \
            else nx.barabasi_albert_graph(n, k // 2, seed=s_graph)
        # ring / arrival positions -> applicants at random: the generator knows nothing of the groups
        perm = np.random.default_rng(s_perm).permutation(n)
        return perm[_nx_edges(G)], None, None
    if cfg.generator == "configuration":
        seq = _degree_sequence(cfg.degrees, n)
        (s_graph,) = _seeds(rng, 1)
        G = nx.Graph(nx.configuration_model(seq.tolist(), seed=s_graph))
        G.remove_edges_from(list(nx.selfloop_edges(G)))
        G.add_nodes_from(range(n))
        return _nx_edges(G), None, G
    edges, weights = read_edge_list(cfg.path, n)
    return edges, weights, None


def _degree_sequence(degrees: tuple[int, ...], n: int) -> np.ndarray:
    seq = np.asarray(degrees, dtype=np.int64)
    return seq if len(seq) == n else np.resize(seq, n)


@functools.lru_cache(maxsize=8)
def _read_edge_file(path: str, stamp: tuple[int, int]) -> pd.DataFrame:
    del stamp  # part of the cache key only: a rewritten file is read again
    p = Path(path)
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            return pd.read_parquet(p)
        return pd.read_csv(p)
    except Exception as exc:  # noqa: BLE001  pandas/pyarrow raise many kinds for a bad file
        reason = " ".join(str(exc).split())[:120]
        raise ValueError(f"path: cannot read edge list {path} ({reason})") from None


def read_edge_list(path: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Edges (m, 2) and weights of an edge-list file, checked against a population of n."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"path: no edge-list file {path}")
    stat = p.stat()
    frame = _read_edge_file(str(p.resolve()), (stat.st_mtime_ns, stat.st_size))
    missing = [c for c in ("source", "target") if c not in frame.columns]
    if missing:
        raise ValueError(f"path: {path} has no column {', '.join(missing)} (columns: {', '.join(map(str, frame.columns))})")
    for col in ("source", "target"):
        if not pd.api.types.is_integer_dtype(frame[col]):
            raise ValueError(f"path: {path}: column {col} must hold integer applicant ids, got {frame[col].dtype}")
    src, dst = frame["source"].to_numpy(np.int64), frame["target"].to_numpy(np.int64)
    bad = (src < 0) | (src >= n) | (dst < 0) | (dst >= n)
    if bad.any():
        k = int(np.argmax(bad))
        who = int(src[k]) if not 0 <= src[k] < n else int(dst[k])
        raise ValueError(f"path: {path} row {k + 1} names applicant {who}, but the population has {n} "
                         f"(ids 0..{n - 1})")
    if (src == dst).any():
        k = int(np.argmax(src == dst))
        raise ValueError(f"path: {path} row {k + 1} ties applicant {int(src[k])} to itself")
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    key = lo * n + hi
    uniq, first, counts = np.unique(key, return_index=True, return_counts=True)
    if (counts > 1).any():
        dup = int(uniq[np.argmax(counts > 1)])
        raise ValueError(f"path: {path} lists the tie ({dup // n}, {dup % n}) more than once")
    if "weight" in frame.columns:
        w = pd.to_numeric(frame["weight"], errors="coerce").to_numpy(np.float64)
        if not np.all(np.isfinite(w) & (w > 0)):
            k = int(np.argmax(~(np.isfinite(w) & (w > 0))))
            raise ValueError(f"path: {path} row {k + 1}: weight must be a positive number, got {frame['weight'].iloc[k]!r}")
    else:
        w = np.ones(len(src))
    return np.stack([lo, hi], axis=1), w


def _communities(cfg: NetworkConfig, n: int, sizes: tuple[int, int], edges: np.ndarray, weights, G,
                 rng: np.random.Generator) -> np.ndarray:
    mode = cfg.communities if cfg.communities != "auto" else ("groups" if cfg.generator == "sbm" else "louvain")
    if mode == "groups":
        return np.repeat(np.array([0, 1], np.int32), sizes)
    import networkx as nx

    if G is None:  # from the final edges (generated graphs whose nodes were relabelled, edge lists)
        G = nx.Graph()
        G.add_nodes_from(range(n))
        w = np.ones(len(edges)) if weights is None else weights
        G.add_weighted_edges_from((int(a), int(b), float(x)) for (a, b), x in zip(edges, w))
    (s,) = _seeds(rng, 1)
    parts = nx.community.louvain_communities(G, seed=s)
    parts = sorted(parts, key=lambda c: (-len(c), min(c)))  # community 0 = the largest
    out = np.zeros(n, np.int32)
    for k, members in enumerate(parts):
        out[np.fromiter(members, np.int64, len(members))] = k
    return out


def build_graph(cfg: NetworkConfig, sizes: tuple[int, int], seed: int) -> Graph:
    """The scenario's graph (cached per configuration, population sizes and seed: validating a
    scenario and building its world in one process generate it once)."""
    stamp = ()
    if cfg.generator == "edge_list" and cfg.path and Path(cfg.path).is_file():
        st = Path(cfg.path).stat()
        stamp = (st.st_mtime_ns, st.st_size)
    return _build_graph(cfg, (int(sizes[0]), int(sizes[1])), int(seed), stamp)


@functools.lru_cache(maxsize=2)
def _build_graph(cfg: NetworkConfig, sizes: tuple[int, int], seed: int, stamp: tuple) -> Graph:
    del stamp
    n = sizes[0] + sizes[1]
    rng = np.random.default_rng(child_seed(seed, "population"))
    edges, weights, G = _generate(cfg, sizes, rng)
    if weights is None and len(edges):  # generated: unit weights; (u, v) and (v, u) are one tie
        lo, hi = np.minimum(edges[:, 0], edges[:, 1]), np.maximum(edges[:, 0], edges[:, 1])
        edges = np.unique(np.stack([lo, hi], axis=1)[lo != hi], axis=0)
    w = np.ones(len(edges)) if weights is None else weights
    community = _communities(cfg, n, sizes, edges, weights, G, rng)
    indptr, indices, weight = _csr(n, edges[:, 0] if len(edges) else np.zeros(0, np.int64),
                                   edges[:, 1] if len(edges) else np.zeros(0, np.int64), w)
    for a in (indptr, indices, weight, community):
        a.flags.writeable = False
    return Graph(n, indptr, indices, weight, community, sizes)


def receiver_weights(graph: Graph, weighting: str) -> np.ndarray:
    """a_ij per CSR entry (row j = the approved applicant, entry -> the excited neighbour i)."""
    if weighting == "unit":
        return graph.weight
    strength = graph.strength()
    with np.errstate(divide="ignore", invalid="ignore"):
        return graph.weight / strength[graph.indices]


def spectral_radius(graph: Graph, weighting: str) -> float:
    """rho of the excitation matrix A (A_ij = a_ij): symmetric for unit weights; under degree
    weighting D^-1 W, similar to the symmetric D^-1/2 W D^-1/2 (the same eigenvalues)."""
    if weighting not in graph.radii:
        graph.radii[weighting] = _spectral_radius(graph, weighting)
    return graph.radii[weighting]


def _spectral_radius(graph: Graph, weighting: str) -> float:
    if len(graph.indices) == 0:
        return 0.0
    from scipy.sparse import csr_array
    from scipy.sparse.linalg import ArpackNoConvergence, eigsh

    w = graph.weight
    if weighting == "degree":
        s = graph.strength()
        inv = np.divide(1.0, np.sqrt(s), out=np.zeros_like(s), where=s > 0)
        w = w * inv[graph.rows] * inv[graph.indices]
    m = csr_array((w, graph.indices, graph.indptr), shape=(graph.n, graph.n))
    if graph.n <= 500:
        return float(np.max(np.abs(np.linalg.eigvalsh(m.toarray()))))
    v0 = np.sqrt(np.bincount(graph.rows, weights=w, minlength=graph.n)) + 1.0  # deterministic start
    try:
        return float(eigsh(m, k=1, which="LA", v0=v0, tol=1e-8, return_eigenvectors=False)[0])
    except ArpackNoConvergence:  # the Collatz-Wielandt upper bound of a power iteration
        x = v0
        for _ in range(500):
            y = m @ x
            x = y / np.linalg.norm(y) + 1e-300
        y = m @ x
        return float(np.max(np.divide(y, x, out=np.zeros_like(x), where=x > 0)))


# -- scenario checks -------------------------------------------------------------------------
def check_scenario(cfg: NetworkConfig, data: dict[str, Any]) -> NetworkConfig:
    """Checks of the network against the rest of the scenario (``data``: the sections validated
    before it): sizes, degrees, the edge list's ids, and the stability of the excitation. Raises
    ValueError (one line: the offending field and why)."""
    if not cfg.on:
        return cfg
    pop, arr = data.get("population"), data.get("arrivals")
    if pop is None or arr is None:  # their own errors are reported
        return cfg
    sizes = (pop.n_male, pop.n_female)
    n = sum(sizes)
    if cfg.generator == "sbm":
        h, k = cfg.homophily, cfg.mean_degree
        for name, size in zip(("M", "F"), sizes):
            if size > 1 and h * k / (size - 1) > 1:
                raise ValueError(f"mean_degree: {k:g} with homophily {h:g} asks group {name} ({size} applicants) for "
                                 f"{h * k:g} ties within it per applicant, more than the {size - 1} others")
        if (1 - h) * k / (n / 2) > 1:
            raise ValueError(f"mean_degree: {k:g} with homophily {h:g} asks for more ties between the groups than "
                             f"there are pairs")
    elif cfg.generator in ("watts_strogatz", "barabasi_albert"):
        k = int(cfg.mean_degree)
        if (k if cfg.generator == "watts_strogatz" else k // 2) >= n:
            raise ValueError(f"mean_degree: {k} is impossible with {n} applicants")
    elif cfg.generator == "configuration":
        if len(cfg.degrees) > n:
            raise ValueError(f"degrees: {len(cfg.degrees)} values for {n} applicants")
        seq = _degree_sequence(cfg.degrees, n)
        if seq.max() >= n:
            raise ValueError(f"degrees: a degree of {int(seq.max())} is impossible with {n} applicants (at most {n - 1})")
        if int(seq.sum()) % 2:
            raise ValueError(f"degrees: they sum to {int(seq.sum())}, an odd number: no graph has that degree sequence")
    elif cfg.generator == "edge_list":
        read_edge_list(cfg.path, n)
    if cfg.excitation > 0:
        problem = instability(cfg, build_graph(cfg, sizes, data.get("seed", 0)), pop, arr)
        if problem:
            raise ValueError(problem)
    return cfg


def instability(cfg: NetworkConfig, graph: Graph, pop, arr) -> str | None:
    """Why this graph's network excitation explodes (``stability_bound`` >= 1), or None."""
    rho = spectral_radius(graph, cfg.weighting)
    w_max = 1.0 + pop.selection_strength
    bound = stability_bound(cfg, rho, w_max, arr.excitation, arr.decay)
    if bound < 1:
        return None
    beta = cfg.decay if cfg.decay is not None else arr.decay
    limit = (1.0 / w_max - arr.excitation / arr.decay) * beta / rho
    return (f"excitation: unstable: w_max (alpha/beta + alpha_net rho(A)/beta_net) = {w_max:g} x ({arr.excitation:g}/"
            f"{arr.decay:g} + {cfg.excitation:g} x {rho:.4g}/{beta:g}) = {bound:.4g} >= 1 (rho(A) = {rho:.4g}, the "
            f"spectral radius of this graph's excitation matrix); network.excitation must stay below {max(limit, 0):.4g}")


def stability_bound(cfg: NetworkConfig, rho: float, w_max: float, alpha: float, beta: float) -> float:
    """An upper bound on the spectral radius of the branching matrix w_max (alpha/beta B +
    alpha_net/beta_net A) (B_ij = 1/N_g within a group): B's is 1, and rho(X + Y) <= rho(X) +
    rho(Y) here (both symmetric under unit weights; under degree weighting both have row sums
    <= 1, the infinity norm). Below 1, each approval brings fewer than one more application on
    average, even when every application is approved."""
    beta_net = cfg.decay if cfg.decay is not None else beta
    return w_max * (alpha / beta + cfg.excitation * rho / beta_net)


def edges_table(graph: Graph) -> pd.DataFrame:
    """Each tie once (``abm population``'s edge file)."""
    src, dst, w = graph.edges()
    return pd.DataFrame({"source": src, "target": dst, "weight": w})


# -- the ties in a running world -------------------------------------------------------------
class SocialTies:
    """A Eutopia world's graph: network excitation (a SimPy process), peer information, metrics."""

    def __init__(self, world, cfg: NetworkConfig):
        self.world, self.cfg = world, cfg
        self.env: simpy.Environment = world.env
        sc = world.model.scenario
        self.graph = build_graph(cfg, tuple(int(s) for s in world.sizes), sc.seed)
        g = self.graph
        if g.n != len(world.cols["wealth"]):
            raise ValueError(f"network: graph of {g.n} applicants for a population of {len(world.cols['wealth'])}")
        if cfg.excitation > 0:  # validation checked the graph of its seed (a study validates seed 0): this one
            problem = instability(cfg, g, world.pop, world.arr)
            if problem:
                raise UserError(f"network: {problem} (seed {sc.seed})")
        self.alpha = cfg.excitation
        self.beta = cfg.decay if cfg.decay is not None else world.arr.decay
        self.peer = cfg.peer_weight
        self.window = cfg.contagion_window if cfg.contagion_window is not None else 3.0 / self.beta
        self.active = cfg.active
        self.recv = receiver_weights(g, cfg.weighting)
        self.cum0 = np.concatenate([[0.0], np.cumsum(self.recv)])
        self.out_strength = self.cum0[g.indptr[1:]] - self.cum0[g.indptr[:-1]]  # s_j = sum_i a_ij
        n = g.n
        self.last_nbr_approval = np.full(n, -np.inf)
        self.contagion_hits = 0
        self.applications_seen = 0
        self.network_applications = 0
        self.nb_decided = np.zeros(n) if self.peer > 0 else None
        self.nb_approved = np.zeros(n) if self.peer > 0 else None
        # approvals as excitation sources: source applicant and cumulative selection key
        self.ev_src = np.zeros(256, np.int64)
        self.ev_cum = np.zeros(256)
        self.n_ev = 0
        self.key_total = 0.0
        self.t_ref = 0.0
        self.rng = np.random.default_rng(child_seed(sc.seed, "arrivals"))
        self.proc: simpy.Process | None = None
        self._wake = False
        self.slot: int | None = None  # our slot in the world's block sampler, when it has one
        self.lazy = False
        self.epoch = sc.episodes.decision_interval

    # -- the process -----------------------------------------------------------------------
    def start(self) -> None:
        if self.alpha <= 0:
            return
        blocks = self.world.blocks
        if blocks is not None:  # batch review + group excitation on approvals: vectorised blocks
            self.lazy = True
            self.slot = blocks.add_source()
        self.proc = self.env.process(self._process())

    def bound(self) -> float:
        """alpha_net w_max Z(now): the network term's application rate now and until the next approval."""
        if self.key_total <= 0.0:
            return 0.0
        return self.alpha * self.world.max_weight * decay(self.key_total, self.env.now - self.t_ref, self.beta)

    def _process(self):
        env, w = self.env, self.world
        while True:
            try:
                bound = self.bound()
                if bound <= 0:
                    yield env.event()  # dormant until an approval
                while True:
                    if self.lazy:
                        k = max(BLOCK_MIN, int(BLOCK_MARGIN * bound * self.epoch) + 1)
                        self._draw(bound, k)
                        yield env.timeout(self._last - env.now)
                    else:
                        times, who = self._draw(bound, EVENT_BLOCK)
                        if len(times):
                            yield env.timeout(times[0] - env.now)
                            i, g = int(who[0]), int(w.cols["group"][who[0]])
                            self.network_applications += 1
                            w._application(g, i)
                            if w.arr.excite_on == "applications":  # group g's term jumped: its process redraws
                                w._interrupt([g])
                        else:
                            yield env.timeout(self._last - env.now)
                    bound = self.bound()
                    if bound <= 0:
                        yield env.event()
            except simpy.Interrupt:
                self._wake = False

    def _draw(self, bound: float, k: int) -> tuple[np.ndarray, np.ndarray]:
        """k candidates at rate ``bound`` from now, thinned and attributed in one vectorised pass;
        the kept ones (time, applicant) are returned (lazy mode: also queued in our block slot)."""
        w, rng, g = self.world, self.rng, self.graph
        now = self.env.now
        times = now + np.cumsum(rng.exponential(1.0 / bound, k))
        self._last = float(times[-1])
        z = decay(self.key_total, times - self.t_ref, self.beta)  # Z(tau) at each candidate
        n = self.n_ev
        ev = np.minimum(np.searchsorted(self.ev_cum[:n], rng.random(k) * self.key_total, side="right"), n - 1)
        src = self.ev_src[ev]
        lo, hi = g.indptr[src], g.indptr[src + 1]
        x = self.cum0[lo] + rng.random(k) * (self.cum0[hi] - self.cum0[lo])
        pos = np.clip(np.searchsorted(self.cum0, x, side="right") - 1, lo, hi - 1)
        who = g.indices[pos]
        kept = rng.random(k) * bound <= self.alpha * z * w.cols["weight"][who]
        times, who = times[kept], who[kept]
        if self.lazy and len(times):
            w.blocks.pending_t[self.slot].append(times)
            w.blocks.pending_i[self.slot].append(who)
            self.network_applications += len(times)
        return times, who

    def interrupt(self) -> None:
        """The state changed now: pending candidates after now are void, the process redraws."""
        if self.slot is not None:  # all pending are after now (the world collected first): void
            self.network_applications -= sum(len(t) for t in self.world.blocks.pending_t[self.slot])
            self.world.blocks.discard(self.slot)
        proc = self.proc
        if proc is not None and proc is not self.env.active_process and proc.is_alive and not self._wake:
            self._wake = True
            proc.interrupt()

    # -- what the world tells us -------------------------------------------------------------
    def applications(self, times, ids) -> None:
        """Applications at ``times`` (contagion: within the window after a neighbour's approval)."""
        dt = np.asarray(times, dtype=float) - self.last_nbr_approval[ids]
        self.contagion_hits += int(np.count_nonzero(dt <= self.window))
        self.applications_seen += int(np.size(ids))

    def decided(self, idx: np.ndarray, approved: np.ndarray) -> bool:
        """A decided batch: excitation sources, contagion clocks, peer counts. True when weights changed."""
        g = self.graph
        won = idx[approved]
        now = self.env.now
        if len(won):
            pos = g.entries(won)
            self.last_nbr_approval[g.indices[pos]] = now
            if self.alpha > 0:
                self._add_sources(won, now)
        if self.peer <= 0:
            return False
        pos = g.entries(idx)
        if len(pos) == 0:
            return False
        per_row = g.indptr[idx + 1] - g.indptr[idx]  # (np.diff(indptr) would be O(N) per batch)
        verdict = np.repeat(approved.astype(float), per_row)
        targets, tie = g.indices[pos], g.weight[pos]
        np.add.at(self.nb_decided, targets, tie)
        np.add.at(self.nb_approved, targets, tie * verdict)
        self.world._reweigh(np.unique(targets))
        return True

    def _add_sources(self, won: np.ndarray, now: float) -> None:
        if self.beta * (now - self.t_ref) > RENORMALISE:  # rescale the keys to t_ref = now
            n = self.n_ev
            self.ev_cum[:n] = decay(self.ev_cum[:n], now - self.t_ref, self.beta)
            self.key_total = float(self.ev_cum[n - 1]) if n else 0.0
            self.t_ref = now
        keys = self.out_strength[won] * math.exp(self.beta * (now - self.t_ref))
        m, n = len(won), self.n_ev
        if n + m > len(self.ev_src):
            size = max(2 * len(self.ev_src), n + m)
            self.ev_src = np.resize(self.ev_src, size)
            self.ev_cum = np.resize(self.ev_cum, size)
        self.ev_src[n:n + m] = won
        self.ev_cum[n:n + m] = self.key_total + np.cumsum(keys)
        self.n_ev = n + m
        self.key_total = float(self.ev_cum[n + m - 1])

    def perceived(self, idx: np.ndarray, sigma: np.ndarray) -> np.ndarray:
        """(1 - w) sigma + w r: r = the neighbours' approval rate (sigma while they have no decision)."""
        if self.nb_decided is None:
            return sigma
        dec = self.nb_decided[idx]
        rate = np.divide(self.nb_approved[idx], dec, out=np.array(sigma, dtype=float, copy=True), where=dec > 0)
        return (1.0 - self.peer) * sigma + self.peer * rate

    # -- outputs -----------------------------------------------------------------------------
    def agent_columns(self) -> dict[str, Any]:
        g = self.graph
        deg = g.degree
        return {"degree": deg.astype(np.int32), "community": g.community,
                "neighbors": pd.Series(np.split(g.indices, g.indptr[1:-1]), dtype=object)}

    def summary(self) -> dict[str, Any]:
        w, g = self.world, self.graph
        c = w.cols
        deg = g.degree
        rows = g.rows
        group = c["group"].astype(np.int64)
        approved = c["approvals"] > 0

        def by(labels: np.ndarray, k: int) -> list[dict[str, Any]]:
            size = np.bincount(labels, minlength=k)
            apps = np.bincount(labels, weights=c["applications"], minlength=k)
            appr = np.bincount(labels, weights=c["approvals"], minlength=k)
            reach = np.bincount(labels, weights=approved, minlength=k)
            wealth = np.bincount(labels, weights=c["wealth"], minlength=k)
            dsum = np.bincount(labels, weights=deg, minlength=k)
            share_m = np.bincount(labels, weights=group == 0, minlength=k)
            return [{"size": int(size[j]), "mean_degree": _f(dsum[j] / size[j]) if size[j] else None,
                     "share_M": _f(share_m[j] / size[j]) if size[j] else None,
                     "reach": _f(reach[j] / size[j]) if size[j] else None,
                     "approval_rate": _f(appr[j] / apps[j]) if apps[j] else None,
                     "applications_per_member": _f(apps[j] / size[j]) if size[j] else None,
                     "mean_wealth": _f(wealth[j] / size[j]) if size[j] else None} for j in range(k)]

        order = np.argsort(deg, kind="stable")
        decile = np.empty(g.n, np.int64)
        decile[order] = np.arange(g.n) * 10 // g.n
        k_comm = int(g.community.max()) + 1 if g.n else 0
        communities = by(g.community.astype(np.int64), k_comm)
        listed = communities[:MAX_LISTED_COMMUNITIES]
        same = group[rows] == group[g.indices]
        gap = np.abs(c["wealth"][rows] - c["wealth"][g.indices])
        mu = np.bincount(group, weights=c["wealth"], minlength=2) / w.sizes
        total_var = float(np.var(c["wealth"]))
        between_var = float(np.sum(w.sizes * (mu - c["wealth"].mean()) ** 2) / g.n)
        out = {
            "generator": self.cfg.generator, "applicants": g.n, "ties": g.n_edges,
            "mean_degree": _f(deg.mean()), "max_degree": int(deg.max()) if g.n else 0,
            "share_ties_within_group": _f(same.mean()) if len(same) else None,
            "excitation": self.alpha, "decay": self.beta, "peer_weight": self.peer,
            "network_applications": int(self.network_applications),
            "contagion_window": self.window,
            "contagion_share": _f(self.contagion_hits / self.applications_seen) if self.applications_seen else None,
            "applications": int(self.applications_seen),
            "wealth_assortativity": assortativity(c["wealth"], rows, g.indices),
            "initial_wealth_assortativity": assortativity(c["initial_wealth"], rows, g.indices),
            "degree_assortativity": assortativity(deg.astype(float), rows, g.indices),
            "tie_wealth_gap_within_group": _f(gap[same].mean()) if same.any() else None,
            "tie_wealth_gap_between_groups": _f(gap[~same].mean()) if (~same).any() else None,
            "group_wealth_gap": _f(mu[0] - mu[1]),
            "between_group_share_of_wealth_variance": _f(between_var / total_var) if total_var > 0 else None,
            "communities": len(communities),
            "by_community": listed,
            "by_degree_decile": by(decile, 10),
        }
        if len(communities) > len(listed):
            out["communities_not_listed"] = len(communities) - len(listed)
        return out


def assortativity(x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> float | None:
    """Newman's numeric assortativity of ``x`` along the ties: the Pearson correlation of x at
    the two ends of each tie, every tie counted both ways (networkx's
    ``numeric_assortativity_coefficient``, without its value-by-value mixing matrix)."""
    if len(rows) < 2:
        return None
    a, b = x[rows], x[cols]
    sa, sb = a.std(), b.std()
    if sa == 0 or sb == 0:
        return None
    return _f(np.mean((a - a.mean()) * (b - b.mean())) / (sa * sb))


def _f(v) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None
