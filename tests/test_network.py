"""Social ties (our extension, docs/MODEL.md "Social ties (our extension)"): the graph, network
excitation sampled exactly, peer information, metrics and outputs, refusals.

Feedback is frozen where the statistics need it (approve-all, base slope 0, frozen approval model,
tau_inv = tau_interest: wealth and the self-selection weights never change), so the arrivals are
exactly the multivariate Hawkes process of the model and its compensator is known in closed form.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from abm.config import config_hash, load_scenario, scenario_to_dict
from abm.engine import STREAMS
from abm.families.network import (NetworkConfig, assortativity, build_graph, child_seed, receiver_weights,
                                  spectral_radius)
from abm.hawkes import (NetworkHawkesData, compensator, fit_network_hawkes, marked_compensator,
                        marked_time_rescaling_ks, time_rescaling_ks)
from abm.runner import execute, run_to_folder
from conftest import SCENARIOS

FROZEN = ["policy.name=approve_all", "arrivals.base_slope=0", "dynamics.approval_model=frozen",
          "population.tau_inv=0.15"]
SMALL = ["population.n_male=300", "population.n_female=300", "arrivals.base_intercept=10.0"]
TIES = ["network.generator=sbm", "network.homophily=0.8", "network.mean_degree=10", "network.excitation=0.07"]
EUTOPIA = SCENARIOS / "eutopia.yaml"


def events_of(ev, kind):
    e = ev[ev["kind"].astype(str) == kind]
    return e["time"].to_numpy(), e["agent_id"].to_numpy()


@pytest.fixture(scope="module")
def frozen_ties():
    """2 x 300 applicants, SBM (k = 10, homophily 0.8), alpha_net = 0.07, 30 frozen episodes."""
    sc = load_scenario(EUTOPIA, FROZEN + SMALL + TIES + ["episodes.count=30"])
    sim, _, ev = execute(sc)
    return sc, sim, ev


# -- seeds, dumps and byte identity -------------------------------------------------------------
def test_streams_append_safe_and_network_seed_is_a_child():
    """Spawning one more stream changes none of the others, and the network's seeds are children
    (spawn key (k, NETWORK_KEY)) that no stream draws from."""
    a = np.random.SeedSequence(7).spawn(len(STREAMS))
    b = np.random.SeedSequence(7).spawn(len(STREAMS) + 3)
    for x, y in zip(a, b):
        assert np.array_equal(x.generate_state(4), y.generate_state(4))
    pop = a[STREAMS.index("population")]
    child = child_seed(7, "population")
    assert child.spawn_key[:1] == pop.spawn_key and child.entropy == pop.entropy
    assert not np.array_equal(child.generate_state(4), pop.generate_state(4))


def test_no_network_leaves_the_dump_and_hash_alone():
    plain = load_scenario(EUTOPIA)
    none = load_scenario(EUTOPIA, ["network.generator=none"])
    assert "network" not in scenario_to_dict(plain)
    assert scenario_to_dict(plain) == scenario_to_dict(none) and config_hash(plain) == config_hash(none)
    ties = load_scenario(EUTOPIA, TIES)
    assert scenario_to_dict(ties)["network"]["generator"] == "sbm" and config_hash(ties) != config_hash(plain)


def test_zero_excitation_reproduces_the_group_level_run_byte_for_byte(tmp_path):
    """alpha_net = 0 (a passive graph) and generator none: the events, episodes and agents files of
    the group-level run, byte for byte; only summary.json gains the network's metrics."""
    base = ["population.n_male=150", "population.n_female=150", "episodes.count=3"]
    runs = {}
    for name, extra in (("plain", []), ("none", ["network.generator=none"]),
                        ("passive", ["network.generator=sbm", "network.homophily=0.9"]),
                        ("passive_ba", ["network.generator=barabasi_albert", "network.mean_degree=4"])):
        folder, _ = run_to_folder(load_scenario(EUTOPIA, base + extra), tmp_path / name)
        runs[name] = folder
    for f in ("events.parquet", "episodes.parquet", "agents.parquet"):
        plain = (runs["plain"] / f).read_bytes()
        for name in ("none", "passive", "passive_ba"):
            assert (runs[name] / f).read_bytes() == plain, (name, f)
    assert (runs["none"] / "scenario.yaml").read_bytes() == (runs["plain"] / "scenario.yaml").read_bytes()
    summary = json.loads((runs["passive"] / "summary.json").read_text())
    assert summary["world"]["network"]["excitation"] == 0 and summary["world"]["network"]["ties"] > 0
    assert "network" not in json.loads((runs["none"] / "summary.json").read_text())["world"]


# -- exact sampling: time rescaling, the mean-field limit ----------------------------------------
def class_ks(sc, sim, ev, members, alpha_net=None, beta_net=None, with_group=True):
    """KS of the rescaled arrivals of the applicants ``members`` (a mask) under the network
    intensity: base + group term of each group + network term (marks: c_j = sum_{i in class} w_i a_ij)."""
    w, c = sim.world, sim.world.cols
    g = w.ties.graph
    a, net = sc.arrivals, sc.network
    alpha_net = net.excitation if alpha_net is None else alpha_net
    beta_net = w.ties.beta if beta_net is None else beta_net
    at, ai = events_of(ev, "apply")
    pt, pj = events_of(ev, "approve")
    weight_in = np.array([c["weight"][members & (c["group"] == k)].sum() for k in (0, 1)])
    base = float(np.sum(a.base_intercept * weight_in / w.sizes))
    parts = [(pt[c["group"][pj] == k], a.excitation * weight_in[k] / w.sizes[k], a.decay)
             for k in (0, 1) if with_group]
    spread = np.bincount(g.rows, weights=receiver_weights(g, net.weighting) * c["weight"][g.indices] * members[g.indices],
                         minlength=g.n)
    if alpha_net:
        parts.append((pt, alpha_net * spread[pj], beta_net))
    return marked_time_rescaling_ks(at[members[ai]], parts, base)


def test_marked_compensator_matches_the_group_compensator_and_a_direct_sum():
    rng = np.random.default_rng(1)
    ev, ex = np.sort(rng.uniform(0, 900, 400)), np.sort(rng.uniform(0, 900, 300))
    marks = rng.uniform(0.2, 2.0, 300)
    direct = [0.7 * t + np.sum(marks[ex < t] * (1 - np.exp(-2.0 * (t - ex[ex < t])))) / 2.0 for t in ev]
    assert np.allclose(marked_compensator(ev, ex, marks, 0.7, 2.0), direct, rtol=1e-12)
    assert np.allclose(marked_compensator(ev, ex, 0.3 * 1.3, 0.7 * 1.3, 2.0), compensator(ev, ex, 0.7, 0.3, 2.0, 1.3),
                       rtol=1e-12)


def test_time_rescaling_under_the_network_intensity(frozen_ties):
    """Each class's arrivals (groups M and F, degree above / below the median) rescale to Exp(1)
    under the network intensity (KS p > 0.01); the wrong kernels are rejected (p < 1e-6): the
    group-level intensity alone, and the network term with beta_net = 6 instead of 2."""
    sc, sim, ev = frozen_ties
    c, g = sim.world.cols, sim.world.ties.graph
    assert sim.world.ties.network_applications > 0.3 * int(c["applications"].sum())  # the ties matter
    median = np.median(g.degree)
    classes = {"M": c["group"] == 0, "F": c["group"] == 1, "high degree": g.degree >= median,
               "low degree": g.degree < median}
    for name, members in classes.items():
        assert class_ks(sc, sim, ev, members).pvalue > 0.01, name
        assert class_ks(sc, sim, ev, members, alpha_net=0.0).pvalue < 1e-6, name
        assert class_ks(sc, sim, ev, members, beta_net=6.0).pvalue < 1e-6, name


def test_fitted_network_excitation_recovers_alpha_net_and_beta(frozen_ties):
    """Our likelihood (abm.hawkes.NetworkHawkesData, profile MLE): alpha_net and beta within 10%
    of the truth and within 3 standard errors; the group terms within 15%."""
    sc, sim, ev = frozen_ties
    c, g = sim.world.cols, sim.world.ties.graph
    at, ai = events_of(ev, "apply")
    pt, pj = events_of(ev, "approve")
    # recv_in[e]: the weight with which an approval of indices[e] excites row e (unit: symmetric)
    data = NetworkHawkesData(at, ai, pt, pj, c["group"], c["weight"], g.indptr, g.indices,
                             receiver_weights(g, "unit"), sc.episodes.count * sc.episodes.horizon,
                             beta_bounds=(0.5, 8.0))
    fit = fit_network_hawkes(data)
    truth = {"alpha_net": sc.network.excitation, "beta": sc.arrivals.decay}
    for name, value in truth.items():
        assert abs(fit[name] / value - 1) < 0.10, (name, fit)
        assert abs(fit[name] - value) < 3 * fit[f"se_{name}"], (name, fit)
    assert abs(fit["base"] / sc.arrivals.base_intercept - 1) < 0.15, fit
    assert abs(fit["alpha"] / sc.arrivals.excitation - 1) < 0.3, fit
    # the likelihood at the truth is within chi2 reach of the optimum (4 parameters)
    at_truth = data.negloglik([sc.arrivals.base_intercept, sc.arrivals.excitation, sc.network.excitation,
                               sc.arrivals.decay])
    assert 0 <= at_truth - fit["negloglik"] < stats.chi2.ppf(0.999, 4) / 2


def test_complete_graph_within_groups_is_the_mean_field_limit():
    """The complete graph within each group, each tie weighted 1/(N_g - 1) (weighting: degree),
    alpha_net = alpha and no group term is the seed's group-level model up to an applicant's own
    approval (a 1/N_g share). Statistics: the network run's arrivals pass the *group-level*
    time-rescaling KS (p > 0.01), and its per-episode application counts agree with a group-level
    run's (two-sample KS p > 0.01, means within 5%)."""
    n_g = 200
    size = [f"population.n_male={n_g}", f"population.n_female={n_g}", "arrivals.base_intercept=10.0",
            "episodes.count=40"]
    group = load_scenario(EUTOPIA, FROZEN + size)
    mean_field = load_scenario(EUTOPIA, FROZEN + size + [
        "arrivals.excitation=0.0", "network.generator=sbm", "network.homophily=1.0",
        f"network.mean_degree={n_g - 1}", "network.weighting=degree", "network.excitation=0.3"])
    sim_g, ep_g, _ = execute(group)
    sim_n, ep_n, ev_n = execute(mean_field)
    assert sim_n.world.ties.graph.n_edges == 2 * n_g * (n_g - 1) // 2
    a = group.arrivals
    for k, name in enumerate(("M", "F")):
        e = ev_n[ev_n["group"].astype(str) == name]
        apply_t = e.loc[e["kind"].astype(str) == "apply", "time"].to_numpy()
        approve_t = e.loc[e["kind"].astype(str) == "approve", "time"].to_numpy()
        wbar = sim_n.world.weight_sum[k] / sim_n.world.sizes[k]
        assert time_rescaling_ks(apply_t, approve_t, a.base_intercept, a.excitation, a.decay, wbar).pvalue > 0.01
        counts_g, counts_n = ep_g[f"applications_{name}"].to_numpy(), ep_n[f"applications_{name}"].to_numpy()
        assert stats.ks_2samp(counts_g, counts_n).pvalue > 0.01
        assert abs(counts_n.mean() / counts_g.mean() - 1) < 0.05


def test_immediate_review_and_excitation_on_applications_run_event_by_event():
    """The network term without the block sampler (review: immediate; excite_on: applications):
    the run completes its invariants and the arrivals rescale (per group, p > 0.01)."""
    sc = load_scenario(EUTOPIA, FROZEN + SMALL + TIES + ["episodes.count=6", "episodes.review=immediate"])
    sim, _, ev = execute(sc)
    assert sim.world.blocks is None and not sim.world.ties.lazy and sim.world.ties.network_applications > 100
    c = sim.world.cols
    for k in (0, 1):
        assert class_ks(sc, sim, ev, c["group"] == k).pvalue > 0.01
    sc = load_scenario(EUTOPIA, FROZEN + SMALL + TIES + ["episodes.count=3", "arrivals.excite_on=applications"])
    sim, _, _ = execute(sc)
    assert sim.world.ties.network_applications > 50


# -- peer information -----------------------------------------------------------------------------
def test_peer_information_sets_the_weights():
    """weight_i = 1 + lambda ((1 - w) sigma_i + w r_i), r_i = the approval rate of i's neighbours'
    decided applications so far (sigma_i while they have none), recomputed from the event log."""
    sc = load_scenario(EUTOPIA, ["population.n_male=200", "population.n_female=200", "episodes.count=3",
                                 "policy.name=random", "network.generator=watts_strogatz", "network.mean_degree=6",
                                 "network.peer_weight=0.6"])
    sim, _, ev = execute(sc)
    w, c = sim.world, sim.world.cols
    g = w.ties.graph
    kind = ev["kind"].astype(str)
    decided = np.bincount(ev.loc[kind.isin(["approve", "reject"]), "agent_id"], minlength=g.n).astype(float)
    approved = np.bincount(ev.loc[kind == "approve", "agent_id"], minlength=g.n).astype(float)
    nb_dec = np.bincount(g.rows, weights=decided[g.indices], minlength=g.n)
    nb_app = np.bincount(g.rows, weights=approved[g.indices], minlength=g.n)
    sigma = c["approval_score"]
    rate = np.divide(nb_app, nb_dec, out=sigma.copy(), where=nb_dec > 0)
    expected = 1 + sc.population.selection_strength * (0.4 * sigma + 0.6 * rate)
    assert (nb_dec > 0).mean() > 0.5
    assert np.allclose(c["weight"], expected, rtol=0, atol=1e-12)
    assert np.allclose(w.weight_sum, np.bincount(c["group"], weights=c["weight"]), rtol=1e-9)


# -- graphs, metrics, outputs ---------------------------------------------------------------------
def test_generators_seeded_and_shaped():
    sizes = (400, 400)
    sbm = NetworkConfig(generator="sbm", homophily=0.9, mean_degree=8)
    g = build_graph(sbm, sizes, 3)
    assert build_graph(sbm, sizes, 3) is g  # cached: validation and the world build it once
    again = build_graph(sbm, sizes, 4)
    assert not np.array_equal(again.indices, g.indices)
    rows = g.rows
    same = (rows < 400) == (g.indices < 400)
    assert abs(same.mean() - 0.9) < 0.03 and abs(g.degree.mean() - 8) < 0.5
    assert np.array_equal(g.community, np.repeat([0, 1], 400))
    ws = build_graph(NetworkConfig(generator="watts_strogatz", mean_degree=6, rewiring=0.2), sizes, 0)
    assert ws.n_edges == 800 * 3 and ws.community.max() > 1  # louvain communities
    ba = build_graph(NetworkConfig(generator="barabasi_albert", mean_degree=4), sizes, 0)
    assert ba.degree.max() > 20 * ba.degree.min() / 2
    conf = build_graph(NetworkConfig(generator="configuration", degrees=(3, 5)), sizes, 0)
    assert conf.degree.mean() <= 4 and conf.degree.mean() > 3.5
    assert abs(spectral_radius(g, "degree") - 1.0) < 1e-6


def test_assortativity_is_networkx_numeric_assortativity():
    nx = pytest.importorskip("networkx")
    G = nx.barabasi_albert_graph(300, 3, seed=2)
    rng = np.random.default_rng(0)
    values = rng.integers(0, 6, 300)
    nx.set_node_attributes(G, {i: int(v) for i, v in enumerate(values)}, "x")
    edges = np.array(G.edges())
    rows, cols = np.concatenate([edges[:, 0], edges[:, 1]]), np.concatenate([edges[:, 1], edges[:, 0]])
    assert assortativity(values.astype(float), rows, cols) == pytest.approx(
        nx.numeric_assortativity_coefficient(G, "x"), abs=1e-10)


def test_run_outputs_metrics_inspect_and_dashboard_panel(tmp_path, cli):
    sc = load_scenario(EUTOPIA, SMALL + TIES + ["episodes.count=3", "network.peer_weight=0.5"])
    folder, _ = run_to_folder(sc, tmp_path)
    import pandas as pd

    agents = pd.read_parquet(folder / "agents.parquet")
    assert {"degree", "community", "neighbors"} <= set(agents.columns)
    assert sum(len(n) for n in agents["neighbors"]) == int(agents["degree"].sum())
    net = json.loads((folder / "summary.json").read_text())["world"]["network"]
    assert len(net["by_degree_decile"]) == 10 and len(net["by_community"]) == 2
    assert 0 < net["contagion_share"] < 1 and -1 <= net["wealth_assortativity"] <= 1
    assert net["tie_wealth_gap_within_group"] > 0 and net["tie_wealth_gap_between_groups"] > 0
    # the applicant with the most neighbours: its neighbours' approvals on its timeline
    busy = int(agents["degree"].idxmax())
    done = cli("inspect", str(folder), "--agent", str(busy), "--limit", "1000")
    assert done.returncode == 0, done.stderr
    assert "neighbour approvals" in done.stdout and "approved" in done.stdout
    plain = cli("inspect", str(folder), "--agent", str(busy), "--no-neighbours")
    assert plain.returncode == 0 and "neighbour" not in plain.stdout
    pytest.importorskip("solara")
    from abm.dashboard.network import figure, neighbourhood, png

    shown, ties = neighbourhood(agents, busy, max_nodes=30)
    assert shown[0] == busy and len(shown) <= 30 and all(a in set(shown) and b in set(shown) for a, b in ties)
    assert png(figure(agents, busy)).startswith(b"\x89PNG")


def test_population_writes_the_edges(tmp_path, cli):
    out = tmp_path / "pop.parquet"
    done = cli("population", str(EUTOPIA), "--out", str(out), "--set", "population.n_male=100",
               "--set", "population.n_female=100", "--set", "network.generator=sbm", "--set", "network.mean_degree=6")
    assert done.returncode == 0, done.stderr
    import pandas as pd

    edges = pd.read_parquet(tmp_path / "pop.edges.parquet")
    sc = load_scenario(EUTOPIA, ["population.n_male=100", "population.n_female=100", "network.generator=sbm",
                                 "network.mean_degree=6"])
    g = build_graph(sc.network, (100, 100), sc.seed)
    src, dst, _ = g.edges()
    assert np.array_equal(edges["source"], src) and np.array_equal(edges["target"], dst)
    assert f"network: {len(edges)} ties" in done.stdout


# -- refusals -------------------------------------------------------------------------------------
def _edge_file(tmp_path, rows):
    path = tmp_path / "edges.csv"
    path.write_text("source,target\n" + "".join(f"{a},{b}\n" for a, b in rows))
    return str(path)


@pytest.mark.parametrize("case", ["generator", "negative_degree", "odd_degrees", "degree_too_large", "sbm_degree",
                                  "unknown_applicant", "unstable", "unstable_with_group", "needs_generator"])
def test_bad_network_input_is_refused_in_one_line(case, tmp_path):
    """Through the console entry point's ``main`` in this process (same exit code and stderr)."""
    from conftest import call_in_process

    sets = {
        "generator": (["network.generator=small_world"], "network.generator"),
        "negative_degree": (["network.generator=configuration", "network.degrees=[3, -1, 2]"], "network.degrees"),
        "odd_degrees": (["network.generator=configuration", "network.degrees=[1]", "population.n_male=3",
                         "population.n_female=2"], "odd"),
        "degree_too_large": (["network.generator=configuration", "network.degrees=[600000]"], "degrees"),
        "sbm_degree": (["network.generator=sbm", "network.mean_degree=5000", "network.homophily=0.9"], "mean_degree"),
        "unknown_applicant": (["network.generator=edge_list", f"network.path={_edge_file(tmp_path, [(0, 1), (2, 6000)])}"],
                              "applicant 6000"),
        "unstable": (["network.generator=sbm", "network.excitation=0.5"], "excitation"),
        "unstable_with_group": (["network.generator=sbm", "network.excitation=0.08", "arrivals.excitation=0.6"],
                                "excitation"),
        "needs_generator": (["network.excitation=0.1"], "generator is 'none'"),
    }[case]
    args = ["validate", str(EUTOPIA)] + [x for s in sets[0] for x in ("--set", s)]
    code, out, err = call_in_process(*args)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, lines
    assert "network" in lines[0] and sets[1] in lines[0], lines[0]
