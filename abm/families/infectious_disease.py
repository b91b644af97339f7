"""Infectious disease on a contact graph (ml-fairness-gym's ``infectious_disease`` environment, in
the setting of A-PPO's and ELBERT-PO's experiments): a budget of vaccines (or treatments) per
day, communities of the graph as groups. See docs/MODEL.md, "Infectious disease".

Each person is susceptible (S), infected (I) or recovered/immune (R). Every day (one unit of
the clock, at t = k + 0.5) the health authority is shown the day's *candidates*: everyone in the
treatment's target state (``treatment.target``: susceptible people to vaccinate, A-PPO's
setting; or infected people to treat), in a random order, as one batch with one binary
decision each. The first ``treatment.budget`` approved candidates, in the order shown, are
moved to R; further approvals have no effect and unspent doses are lost. Then the disease
moves one step, every transition from the same (post-treatment) state: a susceptible person
with n infected neighbours is infected with probability ``1 - (1 - beta)^n``, an infected one
recovers with probability ``gamma``, a recovered one becomes susceptible again with probability
``delta`` (ELBERT-PO's harder environment; 0 in A-PPO's). The day's reward is the share of the
population not infected after the step (A-PPO's r(s_t) with zeta_0 = 1, zeta_1 = 0). Each
episode is one outbreak of ``episodes.horizon`` days from the initial state after ``burn_in``
untreated days (``outbreak.restart``), as A-PPO's 20-step episodes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from abm.config import Section
from abm.errors import InvariantError
from abm.eventlog import kind_code
from abm.families import steps
from abm.families.network import child_seed, read_edge_list
from abm.world import Lever, PolicyContext

S, I, R = 0, 1, 2
STATE_NAMES = ("susceptible", "infected", "recovered")
OBS_FIELDS = ("infected_neighbours", "degree", "group")
DEFAULT_EPISODES = {"count": 200, "horizon": 20.0, "decision_interval": 1.0, "review": "immediate"}
KARATE_SIZE = 34  # nx.karate_club_graph()
DENSE_MAX = 1024  # graphs up to this many people also keep a dense adjacency matrix (4 MiB at most)


class ContactGraph(Section):
    generator: Literal["karate", "sbm", "edge_list"] = Field("karate", description=(
        "karate: Zachary's karate club (34 people; ml-fairness-gym's default, A-PPO's and ELBERT-PO's graph); "
        "sbm: a stochastic block model, one block per community; edge_list: the ties in the file `path`."))
    sizes: tuple[int, ...] = Field((50, 50), min_length=1, max_length=100, description=(
        "sbm: the people in each block (each block is a community)."))
    p_in: float = Field(0.1, ge=0, le=1, description="sbm: probability of a tie within a block.")
    p_out: float = Field(0.01, ge=0, le=1, description="sbm: probability of a tie between blocks.")
    path: str | None = Field(None, description=(
        "edge_list: a .csv or .parquet file with integer columns source, target (people 0..size-1); ties are "
        "undirected, self-ties and repeated ties are refused, a weight column is ignored."))
    size: int | None = Field(None, ge=2, le=1_000_000, description=(
        "edge_list: the number of people (ids 0..size-1; people in no tie are isolated)."))
    communities: Literal["auto", "girvan_newman", "louvain"] = Field("auto", description=(
        "The groups: girvan_newman (the first split of networkx's Girvan-Newman, as A-PPO and ELBERT-PO), "
        "louvain (networkx, seeded); auto: the blocks for sbm, girvan_newman for karate, louvain for an edge list."))

    @model_validator(mode="after")
    def _fits_generator(self) -> "ContactGraph":
        defaults = type(self).model_fields
        own = {"karate": set(), "sbm": {"sizes", "p_in", "p_out"}, "edge_list": {"path", "size"}}[self.generator]
        for name in ("sizes", "p_in", "p_out", "path", "size"):
            if name not in own and getattr(self, name) != defaults[name].default:
                raise ValueError(f"{name} is set but it does not apply to generator {self.generator!r}")
        if self.generator == "sbm" and any(s < 1 for s in self.sizes):
            raise ValueError(f"sizes: every block needs at least one person, got {list(self.sizes)}")
        if self.generator == "sbm" and sum(self.sizes) > 1_000_000:
            raise ValueError(f"sizes: at most 1,000,000 people in all, got {sum(self.sizes):,}")
        if self.generator == "edge_list" and (not self.path or self.size is None):
            raise ValueError("path and size: generator 'edge_list' needs an edge-list file and the number of people")
        return self

    @property
    def n(self) -> int:
        return {"karate": KARATE_SIZE, "sbm": sum(self.sizes), "edge_list": self.size or 0}[self.generator]


class Outbreak(Section):
    initial_infected: tuple[int, ...] = Field((0,), max_length=1_000_000, description=(
        "People (graph node ids) infected when an outbreak starts (A-PPO, ELBERT-PO: node 0)."))
    initial_infected_share: float = Field(0.0, ge=0, le=1, description=(
        "Each other person is also infected at the start with this probability (ml-fairness-gym's random "
        "initial state: 0.1)."))
    burn_in: int = Field(1, ge=0, le=10_000, description=(
        "Untreated days of spread before the first decisions of an outbreak (A-PPO's BURNIN = 1)."))
    restart: bool = Field(True, description=(
        "Each episode is a new outbreak from the initial state (A-PPO's episodes); false: one epidemic runs on "
        "through every episode."))


class DiseaseDynamics(Section):
    infection_probability: float = Field(0.5, ge=0, le=1, description=(
        "beta: chance that one infected neighbour infects a susceptible person in a day (A-PPO: 0.5)."))
    recovery_probability: float = Field(0.005, ge=0, le=1, description=(
        "gamma: chance an infected person recovers in a day (A-PPO's infected_exit_probability: 0.005)."))
    immunity_loss: float = Field(0.0, ge=0, le=1, description=(
        "delta: chance a recovered or vaccinated person becomes susceptible again in a day (ELBERT-PO's harder "
        "environment: 0.2)."))


class Treatment(Section):
    budget: int = Field(1, ge=0, le=1_000_000, description="Doses per day (A-PPO's NUM_TREATMENTS = 1).")
    target: Literal["susceptible", "infected"] = Field("susceptible", description=(
        "susceptible: vaccinate, S -> R (A-PPO's treatment matrix); infected: treat, I -> R (ml-fairness-gym's SIR "
        "default for the infected). The candidates each day are everyone in this state."))


class InfectionObservation(Section):
    infection_weight: tuple[float, ...] | None = Field(None, description=(
        "Per community: the factor on infected_neighbours in the agent's view (the Bisimulator's lever; "
        "null: 1, what is true). The dynamics never change."))


class Scenario(steps.StepScenario):
    default_episodes: ClassVar[dict[str, Any]] = DEFAULT_EPISODES
    # (reward, fairness gap) across environments: the mean over the run's outbreaks (each episode is one)
    benchmark: ClassVar[tuple[str, str]] = ("average_return", "average_benefit_gap")
    capabilities: ClassVar[frozenset[str]] = frozenset({"decision_env", "treatment_budget"})
    units: ClassVar[dict[str, str]] = {"wealth": "healthy share", "wealth_unit": "share", "money": "healthy-share days",
                                       "score": "infected neighbours"}
    event_kinds: ClassVar[tuple[str, ...]] = ("treat", "infect", "recover", "wane")
    live_parameters: ClassVar[tuple] = (
        ("dynamics.infection_probability", "infection probability beta", 0.0, 1.0, 0.05),
        ("dynamics.recovery_probability", "recovery probability gamma", 0.0, 0.5, 0.005),
        ("treatment.budget", "doses per day", 0, 10, 1))  # whole numbers: an integer slider
    live_plots: ClassVar[tuple[str, ...]] = ("infection_rate", "benefit_gap", "healthy_share", "cumulative_profit")
    observation_definitions: ClassVar[dict[str, str]] = {
        "infected_neighbours": "The candidate's infected neighbours today (times observation.infection_weight).",
        "degree": "The candidate's number of ties.",
        "group": "The candidate's community index (info[\"group_name\"] has its name).",
    }
    metric_definitions: ClassVar[dict[str, tuple[str, str]]] = {
        "return": ("{money}", "Sum over the episode's days of the share of the population not infected after the day."),
        "profit": ("{money}", "Same as return (the profit column every family has)."),
        "cumulative_profit": ("{money}", "Sum of profit over episodes 0..episode."),
        "healthy_share": ("share (0-1)", "Share of the population not infected at the episode's end."),
        "new_infections": ("people", "Infections in the episode (after the burn-in), all communities."),
        "treatments": ("doses", "Doses given in the episode, all communities."),
        "infection_gap": ("share (0-1)", "Largest minus smallest infection_rate_{g} over communities."),
        "benefit_gap": ("doses per infection", "Largest minus smallest benefit_rate_{g} (A-PPO's Delta)."),
        "average_return": ("{money} per episode", "cumulative_profit / (episode + 1): the mean return of the "
                                                  "outbreaks so far."),
        "average_benefit_gap": ("doses per infection", "Mean benefit_gap over episodes 0..episode (A-PPO's Delta "
                                                       "averaged over evaluation outbreaks)."),
        "infection_rate_{g}": ("share (0-1)", "Community g's infections in the episode per member."),
        "infected_{g}": ("share (0-1)", "Share of community g infected at the episode's end."),
        "benefit_rate_{g}": ("doses per infection", "Community g's doses / (its infections + 1) over the episode "
                                                    "(A-PPO's and ELBERT-PO's per-community rate)."),
        "recall_{g}": ("share (0-1)", "Of community g's at-risk candidates (a susceptible with an infected "
                                      "neighbour; every infected one under target infected), the share approved "
                                      "in the episode (the fair learners' TPR); empty when it had none."),
        "recall_gap": ("share (0-1)", "Largest minus smallest recall_{g}; empty while any recall is."),
        "new_infections_{g}": ("people", "Community g's infections in the episode."),
        "treatments_{g}": ("doses", "Doses given to community g in the episode."),
        "applications_{g}": ("candidates", "Community g's candidates shown in the episode."),
        "approvals_{g}": ("approvals", "Community g's candidates approved in the episode (doses or not)."),
    }
    family: Literal["infectious_disease"] = "infectious_disease"
    graph: ContactGraph = Field(default_factory=ContactGraph)
    outbreak: Outbreak = Field(default_factory=Outbreak)
    dynamics: DiseaseDynamics = Field(default_factory=DiseaseDynamics)
    treatment: Treatment = Field(default_factory=Treatment)
    observation: InfectionObservation = Field(default_factory=InfectionObservation)

    @model_validator(mode="after")
    def _consistent(self) -> "Scenario":
        n = self.graph.n
        if self.treatment.budget > n:
            raise ValueError(f"treatment.budget: {self.treatment.budget} doses a day for a population of {n}")
        bad = [i for i in self.outbreak.initial_infected if not 0 <= i < n]
        if bad:
            raise ValueError(f"outbreak.initial_infected: node {bad[0]} is not in the graph (nodes 0..{n - 1})")
        if self.episodes.review != "immediate":
            raise ValueError("episodes.review must be 'immediate' for infectious_disease (each day's candidates are "
                             "decided that day)")
        h = self.episodes.horizon
        if h != int(h):
            raise ValueError(f"episodes.horizon: a whole number of days, got {h:g}")
        if self.episodes.decision_interval != 1.0:
            raise ValueError("episodes.decision_interval must be 1 for infectious_disease (one decision day per unit)")
        self.contact_graph()  # an unreadable or bad edge list is refused here, naming the field
        weights = self.observation.infection_weight
        if weights is not None:
            groups = len(self.contact_graph().names)
            if len(weights) != groups or any(not 0 < w <= 1e6 for w in weights):
                raise ValueError(f"observation.infection_weight needs one positive value per community ({groups}), "
                                 f"got {list(weights)}")
        return self

    def contact_graph(self) -> "Contacts":
        cfg = self.graph
        stamp = ()
        if cfg.generator == "edge_list" and Path(cfg.path).is_file():
            st = Path(cfg.path).stat()
            stamp = (st.st_mtime_ns, st.st_size)
        seeded = cfg.generator == "sbm" or cfg.communities == "louvain" or \
            (cfg.communities == "auto" and cfg.generator == "edge_list")
        try:  # a graph that draws no random number is one cache entry whatever the seed (gym resets)
            return build_contacts(cfg, self.seed if seeded else 0, stamp)
        except ValueError as exc:
            raise ValueError(f"graph.{exc}") from None


# -- the graph -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Contacts:
    """The contact graph with rows ordered by community (row r <-> graph node ``node[r]``)."""

    node: np.ndarray  # graph node id of each row
    row_of: np.ndarray  # row of each graph node id
    group: np.ndarray  # int16 community of each row
    names: tuple[str, ...]
    adjacency: Any  # scipy.sparse csr_array over rows, 0/1
    dense: np.ndarray | None  # the same as an int32 matrix for small graphs (faster products), else None
    degree: np.ndarray
    centrality: np.ndarray  # eigenvector centrality per row (ml-fairness-gym's CentralityAgent)

    @property
    def n(self) -> int:
        return len(self.node)

    def count_in(self, mask: np.ndarray) -> np.ndarray:
        """Per row, how many of its neighbours ``mask`` marks (int)."""
        if self.dense is not None:
            return self.dense @ mask.astype(np.int32)
        return (self.adjacency @ mask.astype(np.int64)).astype(np.int64)


def _edges(cfg: ContactGraph, seed: int):
    """(networkx graph on nodes 0..n-1, block of each node or None)."""
    import networkx as nx

    if cfg.generator == "karate":
        return nx.Graph(nx.karate_club_graph().edges()), None
    if cfg.generator == "sbm":
        k = len(cfg.sizes)
        p = [[cfg.p_in if a == b else cfg.p_out for b in range(k)] for a in range(k)]
        (s,) = np.random.default_rng(child_seed(seed, "population")).integers(2**31 - 1, size=1)
        G = nx.stochastic_block_model(list(cfg.sizes), p, seed=int(s))
        return nx.Graph(G.edges()), np.repeat(np.arange(k), cfg.sizes)
    edges, _ = read_edge_list(cfg.path, cfg.size)
    G = nx.Graph()
    G.add_edges_from(map(tuple, edges.tolist()))
    return G, None


def _eigenvector_centrality(adj) -> np.ndarray:
    """The leading eigenvector of the adjacency matrix, non-negative with unit norm (networkx's
    ``eigenvector_centrality``), computed deterministically: numpy's ``eigh`` for a small graph,
    ARPACK from a fixed start vector for a large one (networkx's ARPACK start is random)."""
    n = adj.shape[0]
    if adj.nnz == 0:
        return np.zeros(n)
    if n <= DENSE_MAX:
        vector = np.linalg.eigh(adj.toarray())[1][:, -1]
    else:
        from scipy.sparse.linalg import eigsh

        vector = eigsh(adj.astype(float), k=1, which="LA", v0=np.ones(n), tol=1e-10)[1][:, 0]
    vector = np.abs(vector)
    return vector / np.linalg.norm(vector)


@functools.lru_cache(maxsize=4)
def build_contacts(cfg: ContactGraph, seed: int, stamp: tuple = ()) -> Contacts:
    """The scenario's graph and communities (cached: validating and building a world read it once)."""
    del stamp  # part of the cache key only: a rewritten edge list is read again
    import networkx as nx
    from scipy.sparse import csr_array

    G, blocks = _edges(cfg, seed)
    n = cfg.n
    G.add_nodes_from(range(n))
    mode = cfg.communities
    if mode == "auto":
        mode = {"sbm": "blocks", "karate": "girvan_newman", "edge_list": "louvain"}[cfg.generator]
    if mode == "blocks":
        community = blocks
    else:
        if mode == "girvan_newman":
            parts = next(nx.community.girvan_newman(G)) if G.number_of_edges() else [set(range(n))]
        else:
            s = int(np.random.default_rng(child_seed(seed, "population")).integers(2**31 - 1, size=2)[1])
            parts = nx.community.louvain_communities(G, seed=s)
        parts = sorted(parts, key=min)  # community 0 holds node 0
        community = np.zeros(n, np.int64)
        for k, members in enumerate(parts):
            community[sorted(members)] = k
    node = np.argsort(community, kind="stable")  # rows grouped by community, node order within
    row_of = np.empty(n, np.int64)
    row_of[node] = np.arange(n)
    edges = np.array(list(G.edges()), dtype=np.int64).reshape(-1, 2)
    a, b = row_of[edges[:, 0]], row_of[edges[:, 1]]
    adj = csr_array((np.ones(2 * len(a)), (np.concatenate([a, b]), np.concatenate([b, a]))), shape=(n, n))
    degree = np.diff(adj.indptr).astype(np.int64)
    centrality = _eigenvector_centrality(adj)
    group = community[node].astype(np.int16)
    names = tuple(f"C{k}" for k in range(int(community.max()) + 1))
    dense = adj.toarray().astype(np.int32) if n <= DENSE_MAX else None
    for arr in (node, row_of, group, degree, centrality) + (() if dense is None else (dense,)):
        arr.flags.writeable = False
    return Contacts(node, row_of, group, names, adj, dense, degree, centrality)


# -- what the allocation baselines read ------------------------------------------------------------
@dataclass(frozen=True)
class TreatmentContext(PolicyContext):
    """The day's dose budget and, per person (agent id), graph node id, degree and eigenvector
    centrality: what ml-fairness-gym's and A-PPO's infectious-disease agents rank by."""

    budget: int
    node: np.ndarray
    degree: np.ndarray
    centrality: np.ndarray


TREAT, INFECT, RECOVER, WANE = kind_code("treat"), kind_code("infect"), kind_code("recover"), kind_code("wane")
NEXT_STATE = np.array([I, R, S], np.int8)  # where each state moves: S -> I, I -> R, R -> S
EVENT_OF_STATE = np.array([INFECT, RECOVER, WANE], np.int8)  # the event of leaving each state


class World:
    """Infectious-disease state and seams (see ``abm.families``)."""

    obs_fields = OBS_FIELDS
    family = "infectious_disease"

    def __init__(self, model):
        self.model, self.env = model, model.env
        sc = model.scenario
        self.sc = sc
        g = self.graph = sc.contact_graph()
        n = g.n
        self.group_names = list(g.names)
        G = self.n_groups = len(self.group_names)
        sizes = np.bincount(g.group, minlength=G)
        self.sizes = sizes.astype(float)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        self.group_slices = [(int(bounds[k]), int(bounds[k + 1])) for k in range(G)]
        self.budget = sc.treatment.budget
        self.target = I if sc.treatment.target == "infected" else S
        self.cols: dict[str, np.ndarray] = {
            "group": g.group,
            "state": np.zeros(n, np.int8),
            "at_risk": np.zeros(n, bool),  # at the last presentation (the true outcome of the gym adapter)
            "infections": np.zeros(n, np.int32),
            "treatments": np.zeros(n, np.int32),
            "candidacies": np.zeros(n, np.int32),
        }
        self.init_rng = model.rngs["population"]
        self.order_rng, self.spread_rng = model.rngs["arrivals"], model.rngs["outcomes"]
        self.set_infection_weight(sc.observation.infection_weight)
        keys = ("candidates", "approvals", "treatments", "infections", "at_risk", "at_risk_approved")
        self.ep = {k: np.zeros(G) for k in keys}
        self.cum = {k: np.zeros(G) for k in keys}
        self.profit_total = 0.0
        self.cumulative_return = 0.0
        self.benefit_gap_total = 0.0
        self.days = 0
        # P(leaving state s today | k infected neighbours), row s * (max degree + 1) + k: S -> I with
        # 1 - (1 - beta)^k, I -> R with gamma, R -> S with delta
        d, k = sc.dynamics, np.arange(int(g.degree.max(initial=0)) + 1, dtype=float)
        self._row_start = np.arange(3, dtype=np.int64) * len(k)  # by state (int64: no int8 overflow)
        self._p_move = np.concatenate([1.0 - (1.0 - d.infection_probability) ** k,
                                       np.full(len(k), d.recovery_probability), np.full(len(k), d.immunity_loss)])
        self._infected_nb, self._n_infected = np.zeros(n, np.int64), 0
        self._start_outbreak()

    # -- the Bisimulator seam ----------------------------------------------------------------------
    def set_infection_weight(self, weights=None) -> None:
        w = np.ones(self.n_groups) if weights is None else np.asarray(weights, dtype=float)
        if w.shape != (self.n_groups,) or np.any(w <= 0):
            raise InvariantError(f"infection weights need one positive value per community ({self.n_groups})")
        self.weight, self._row_weight = w, w[self.cols["group"]]

    def observation_lever(self, scale: float) -> Lever:
        """omega = the factor on each community's infected_neighbours in the agent's view, searched
        within [1 / (10 scale), scale] (``abm.world.ObservationLever``)."""
        ones = np.ones(self.n_groups)
        return Lever(self.weight.copy(), ones / (10.0 * scale), ones * scale, self.set_infection_weight,
                     lambda om: {"observation": {"infection_weight": tuple(float(x) for x in om)}})

    def copy_state_from(self, other: "World") -> None:
        """Take over the health states of ``other`` (a world of the same scenario): the
        Bisimulator's probes start from the training state."""
        if not np.array_equal(other.cols["group"], self.cols["group"]):
            raise InvariantError("copy_state_from: the worlds have different graphs")
        for key in ("state", "at_risk"):
            self.cols[key] = other.cols[key].copy()
        self._refresh()

    # -- the disease ---------------------------------------------------------------------------------
    def _refresh(self) -> None:
        infected = self.cols["state"] == I
        self._n_infected = int(np.count_nonzero(infected))
        self._infected_nb = self.graph.count_in(infected)

    def _start_outbreak(self) -> None:
        o, g = self.sc.outbreak, self.graph
        state = np.full(g.n, S, np.int8)
        if o.initial_infected_share > 0:
            state[self.init_rng.random(g.n) < o.initial_infected_share] = I
        state[g.row_of[list(o.initial_infected)]] = I
        self.cols["state"] = state
        self._refresh()
        for _ in range(o.burn_in):
            self._spread(count=False)

    def _spread(self, count: bool = True, time: float | None = None) -> None:
        """One day of the disease, every transition from the same state (ml-fairness-gym): one
        uniform per person against its state's chance of moving on (S -> I: 1 - (1 - beta)^k,
        I -> R: gamma, R -> S: delta)."""
        state = self.cols["state"]
        u = self.spread_rng.random(len(state))
        move = u < self._p_move[self._row_start[state] + self._infected_nb]
        moved = np.flatnonzero(move)
        before = state[moved]
        if len(moved):
            state[moved] = NEXT_STATE[before]
            self._refresh()
        if not count:
            return
        self.profit_total += 1.0 - self._n_infected / len(state)  # the day's healthy share
        self.model.bank.profit = self.profit_total
        infect = moved[before == S]
        if len(infect):
            grp = self.cols["group"]
            self.cols["infections"][infect] += 1
            self.ep["infections"] += np.bincount(grp[infect], minlength=self.n_groups)
        log = self.model.log
        if log.enabled:
            log.extend(self.env.now if time is None else time, self.model.episode, moved, self.cols["group"][moved], EVENT_OF_STATE[before],
                       np.nan, np.nan)
        else:
            log.skip(len(moved))

    def start(self) -> None:
        self.env.process(self._days())

    def _days(self):
        model, env = self.model, self.env
        horizon = int(self.sc.episodes.horizon)
        yield env.timeout(0.5)
        while True:
            day = self.days
            if day and day % horizon == 0 and self.sc.outbreak.restart:
                self._start_outbreak()
            cand = np.flatnonzero(self.cols["state"] == self.target) if self.budget > 0 else ()
            if len(cand):
                cand = cand[self.order_rng.permutation(len(cand))]
                self._present(cand)
                model.submit_many(np.full(len(cand), env.now), cand)
                yield from model.review()
            elif self._no_candidates_can_come():  # the episode's other days in one go: the same days
                last = (day // horizon + 1) * horizon
                for d in range(day, last):
                    self._spread(time=d + 0.5)
                self.days = last
                yield env.timeout(last - day)
                continue
            self._spread()
            self.days += 1
            yield env.timeout(1.0)

    def _no_candidates_can_come(self) -> bool:
        """No candidate today, and none can appear before the outbreak restarts: none is ever dosed,
        or the target state cannot be entered (S only by waning immunity, I only from an infected
        neighbour)."""
        if self.budget == 0:
            return True
        if self.target == S:
            return self.sc.dynamics.immunity_loss == 0
        return self._n_infected == 0

    def _present(self, cand: np.ndarray) -> None:
        at_risk = self._infected_nb[cand] > 0 if self.target == S else np.ones(len(cand), bool)
        self.cols["at_risk"][cand] = at_risk
        self.cols["candidacies"][cand] += 1
        grp, ep = self.cols["group"][cand], self.ep
        ep["candidates"] += np.bincount(grp, minlength=self.n_groups)
        ep["at_risk"] += np.bincount(grp[at_risk], minlength=self.n_groups)

    # -- observations ----------------------------------------------------------------------------------
    def observe(self, idx: np.ndarray) -> np.ndarray:
        out = np.empty((len(idx), 3))
        out[:, 0] = self._infected_nb[idx] * self._row_weight[idx]
        out[:, 1] = self.graph.degree[idx]
        out[:, 2] = self.cols["group"][idx]
        return out

    @property
    def obs_bounds(self):
        top = float(self.graph.degree.max(initial=0))
        return (np.zeros(3), np.array([max(top * float(self.weight.max()), 1.0), max(top, 1.0),
                                       self.n_groups - 1.0]))

    def true_outcome(self, idx) -> np.ndarray:
        """Whether each candidate needs the dose: at risk (the fair learners' "qualified")."""
        return self.cols["at_risk"][idx]

    def true_outcome_one(self, i: int) -> bool:
        return bool(self.cols["at_risk"].item(i))

    def privileged(self, idx, names):
        return {name: self.cols[c][idx] for name, c in (("at_risk", "at_risk"), ("state", "state")) if name in names}

    def amount(self, idx):
        return self.graph.degree[idx]

    def wealth_of(self, idx):
        return (self.cols["state"][idx] != I).astype(float)

    @property
    def bank_reward_total(self) -> float:
        return self.profit_total

    def policy_context(self) -> TreatmentContext:
        g = self.graph
        return TreatmentContext(OBS_FIELDS, tuple(self.group_names), family=self.family, budget=self.budget,
                                node=g.node, degree=g.degree, centrality=g.centrality)

    # -- decisions -------------------------------------------------------------------------------------
    def apply_decisions(self, idx, approved, probs, obs) -> None:
        chosen = np.asarray(idx)[np.asarray(approved, bool)]
        if not len(chosen):
            return  # nobody approved: no count, dose or event changes
        c, G, ep = self.cols, self.n_groups, self.ep
        grp = c["group"]
        treated = chosen[: self.budget]  # the first approvals in the order shown
        ep["approvals"] += np.bincount(grp[chosen], minlength=G)
        ep["at_risk_approved"] += np.bincount(grp[chosen[c["at_risk"][chosen]]], minlength=G)
        ep["treatments"] += np.bincount(grp[treated], minlength=G)
        c["state"][treated] = R
        c["treatments"][treated] += 1
        if self.target == I:
            self._refresh()
        log = self.model.log
        if log.enabled:
            log.extend(self.env.now, self.model.episode, treated, grp[treated], TREAT, np.nan, np.ones(len(treated)))
        else:
            log.skip(len(treated))

    # -- episodes --------------------------------------------------------------------------------------
    def episode_metrics(self, episode: int) -> dict[str, Any]:
        ep, sizes = self.ep, self.sizes
        state, grp = self.cols["state"], self.cols["group"]
        infected = np.bincount(grp[state == I], minlength=self.n_groups) / sizes
        rate = ep["infections"] / sizes
        benefit = ep["treatments"] / (ep["infections"] + 1.0)
        coverage = np.divide(ep["at_risk_approved"], ep["at_risk"], out=np.full(self.n_groups, np.nan),
                             where=ep["at_risk"] > 0)
        ret = self.profit_total - self.cumulative_return
        self.cumulative_return = self.profit_total
        gap = steps.spread(benefit)
        self.benefit_gap_total += gap
        row: dict[str, Any] = {"return": ret, "profit": ret, "cumulative_profit": self.profit_total,
                               "average_return": self.profit_total / (episode + 1),
                               "healthy_share": float(np.mean(state != I)),
                               "new_infections": int(ep["infections"].sum()), "treatments": int(ep["treatments"].sum()),
                               "infection_gap": steps.spread(rate), "benefit_gap": gap,
                               "average_benefit_gap": self.benefit_gap_total / (episode + 1),
                               "recall_gap": steps.spread(coverage)}
        for g, name in enumerate(self.group_names):
            row[f"infection_rate_{name}"] = float(rate[g])
            row[f"infected_{name}"] = float(infected[g])
            row[f"benefit_rate_{name}"] = float(benefit[g])
            row[f"recall_{name}"] = float(coverage[g])
            row[f"new_infections_{name}"] = int(ep["infections"][g])
            row[f"treatments_{name}"] = int(ep["treatments"][g])
            row[f"applications_{name}"] = int(ep["candidates"][g])
            row[f"approvals_{name}"] = int(ep["approvals"][g])
        return row

    @property
    def nullable_metrics(self) -> tuple[str, ...]:
        return ("recall_gap", *(f"recall_{g}" for g in self.group_names))

    def episode_stats(self) -> dict[str, Any]:
        state, grp = self.cols["state"], self.cols["group"]
        healthy = np.bincount(grp[state != I], minlength=self.n_groups) / self.sizes
        return {"groups": tuple(self.group_names), "sizes": self.sizes.copy(), "mean_wealth": healthy,
                "mean_wealth_change": -self.ep["infections"] / self.sizes, "profit": healthy * self.sizes,
                "applications": self.ep["candidates"].copy(), "approvals": self.ep["approvals"].copy(),
                "recall": np.divide(self.ep["at_risk_approved"], self.ep["at_risk"],
                                    out=np.full(self.n_groups, np.nan), where=self.ep["at_risk"] > 0),
                "episode": self.model.episode}

    def end_episode(self, episode: int) -> None:
        for key, v in self.ep.items():  # the run's totals are the finished episodes' sums
            self.cum[key] += v
            v[:] = 0

    # -- end of run ------------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        c, cum = self.cols, self.cum
        if not np.all(np.isin(c["state"], (S, I, R))):
            raise InvariantError("invariant 'everyone susceptible, infected or recovered' broken")
        if cum["treatments"].sum() > self.budget * self.days:
            raise InvariantError("invariant 'at most treatment.budget doses a day' broken")
        if np.any(cum["treatments"] > cum["approvals"]) or np.any(cum["approvals"] > cum["candidates"]):
            raise InvariantError("invariant 'doses <= approvals <= candidates' broken")
        if int(c["treatments"].sum()) != int(cum["treatments"].sum()) or \
                int(c["infections"].sum()) != int(cum["infections"].sum()):
            raise InvariantError("invariant 'per-person and per-community counts agree' broken")
        if not 0.0 <= self.profit_total <= self.days + 1e-9:
            raise InvariantError("invariant 'return = sum of daily healthy shares' broken")

    def ledger_check(self, events: pd.DataFrame, episodes: pd.DataFrame) -> None:
        """From the log alone: every dose went to an approved candidate, doses and infections add up."""
        kind = events["kind"].astype(str)
        treats, approves = events[kind == "treat"], events[kind == "approve"]
        if len(treats) != int(self.cum["treatments"].sum()):
            raise InvariantError("invariant 'one treat event per dose' broken")
        if int((kind == "infect").sum()) != int(self.cum["infections"].sum()):
            raise InvariantError("invariant 'one infect event per infection' broken")
        key = ["agent_id", "time"]
        matched = treats[key].merge(approves[key].drop_duplicates(), on=key, how="left", indicator=True)
        if (matched["_merge"] != "both").any():
            raise InvariantError("invariant 'a dose only to a candidate approved that day' broken")
        per_day = treats.groupby("time").size()
        if len(per_day) and int(per_day.max()) > self.budget:
            raise InvariantError("invariant 'at most treatment.budget doses a day' broken (event log)")

    def agents_table(self) -> pd.DataFrame:
        c, g = self.cols, self.graph
        healthy = (c["state"] != I).astype(float)
        return pd.DataFrame({
            "agent_id": np.arange(g.n, dtype=np.int64), "node": g.node,
            "group": pd.Categorical.from_codes(c["group"], categories=self.group_names),
            "degree": g.degree, "centrality": g.centrality,
            "final_state": pd.Categorical.from_codes(c["state"], categories=list(STATE_NAMES)),
            "infections": c["infections"], "treatments": c["treatments"], "candidacies": c["candidacies"],
            "initial_wealth": np.ones(g.n), "final_wealth": healthy,
        })

    def summary(self) -> dict[str, Any]:
        names = self.group_names
        return {"return": self.profit_total, "days": self.days,
                "sizes": {n: int(s) for n, s in zip(names, self.sizes)},
                "infections": {n: int(self.cum["infections"][g]) for g, n in enumerate(names)},
                "treatments": {n: int(self.cum["treatments"][g]) for g, n in enumerate(names)},
                "edges": int(self.graph.adjacency.nnz // 2)}


def population_table(scenario, rng: np.random.Generator) -> pd.DataFrame:
    """The people of the contact graph (``abm population``), one row each."""
    g = scenario.contact_graph()
    return pd.DataFrame({"agent_id": np.arange(g.n, dtype=np.int64), "node": g.node,
                         "group": pd.Categorical.from_codes(g.group, categories=list(g.names)),
                         "degree": g.degree, "centrality": g.centrality})
