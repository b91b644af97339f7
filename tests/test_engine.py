"""The Eutopia engine: determinism, accounting, run folders, agents, review modes."""

import hashlib
import json

import numpy as np
import pandas as pd
import pytest

from abm.agents import Applicant
from abm.build import simulation
from abm.families.eutopia import ledger_profit
from abm.runner import execute, run_to_folder


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_seed_byte_identical_events(tmp_path, eutopia_small):
    sc = eutopia_small("policy.name=random", "policy.p=0.7")
    a, _ = run_to_folder(sc, tmp_path / "a")
    b, _ = run_to_folder(sc, tmp_path / "b")
    for name in ("events.parquet", "episodes.parquet", "agents.parquet", "scenario.yaml"):
        assert digest(a / name) == digest(b / name)
    c, _ = run_to_folder(eutopia_small("policy.name=random", "policy.p=0.7", "seed=1"), tmp_path / "c")
    assert digest(a / "events.parquet") != digest(c / "events.parquet")


def test_accounting_invariants(eutopia_small):
    sim, ep, ev = execute(eutopia_small("policy.name=random", "policy.p=0.6"))
    cols = sim.world.cols
    # profit equals the ledger and the episode sums
    assert ledger_profit(ev, 0.15) == pytest.approx(sim.world.profit_total, abs=1e-6)
    assert ep["profit"].sum() == pytest.approx(sim.world.profit_total, abs=1e-6)
    assert ep["cumulative_profit"].iloc[-1] == pytest.approx(sim.world.profit_total, abs=1e-6)
    # each applicant's final wealth equals initial plus gains from its repay events
    repays = ev[ev["kind"] == "repay"].groupby("agent_id").size()
    gains = np.zeros(len(cols["wealth"]))
    gains[repays.index.to_numpy()] = repays.to_numpy() * cols["gain"][repays.index.to_numpy()]
    assert np.allclose(cols["wealth"], cols["initial_wealth"] + gains)
    # counts in episodes.parquet equal event counts
    for g in ("M", "F"):
        e = ev[ev["group"] == g]
        for kind, col in (("apply", "applications"), ("approve", "approvals"), ("default", "defaults"),
                          ("repay", "repayments")):
            assert ep[f"{col}_{g}"].sum() == (e["kind"] == kind).sum()
    # every decision is logged with its probability; every approval resolves (loan term 0)
    decided = ev[ev["kind"].isin(["approve", "reject"])]
    assert (decided["decision_prob"] == 0.6).all()
    assert (ev["kind"] == "apply").sum() == len(decided)
    assert (ev["kind"] == "approve").sum() == (ev["kind"].isin(["repay", "default"])).sum()


def test_wealth_after_matches_replay(eutopia_small):
    sim, ep, ev = execute(eutopia_small())
    agent = int(ev.loc[ev["kind"] == "repay", "agent_id"].iloc[0])
    hist = ev[ev["agent_id"] == agent]
    w0 = sim.world.cols["initial_wealth"][agent]
    gain = sim.world.cols["gain"][agent]
    repaid_so_far = (hist["kind"] == "repay").cumsum()
    assert np.allclose(hist["wealth_after"], w0 + gain * repaid_so_far)


def test_episode_metrics_definitions(eutopia_small):
    sim, ep, ev = execute(eutopia_small("episodes.count=4"))
    mu0 = sim.world.mu0
    last = ep.iloc[-1]
    assert last["wealth_gap"] == pytest.approx(last["mean_wealth_M"] - last["mean_wealth_F"])
    grow = np.array([last["mean_wealth_M"], last["mean_wealth_F"]]) - mu0
    assert last["inequality_ratio"] == pytest.approx(grow[0] / grow[1])
    assert last["social_welfare_M"] == pytest.approx(grow[0] / 4)
    # reach: unique recipients in the episode / N_g
    e3 = ev[(ev["episode"] == 3) & (ev["kind"] == "approve") & (ev["group"] == "F")]
    assert last["reach_F"] == pytest.approx(e3["agent_id"].nunique() / 300)


def test_inequality_ratio_nan_not_crash(eutopia_small):
    sim, ep, ev = execute(eutopia_small("policy.name=reject_all"))
    assert ep["inequality_ratio"].isna().all()
    assert (ep["profit"] == 0).all()
    assert not ev["kind"].isin(["approve", "repay", "default"]).any()
    assert (ep["wealth_gap"] == ep["wealth_gap"].iloc[0]).all()


def test_clock_and_agents(eutopia_small):
    sc = eutopia_small("episodes.count=2")
    sim = simulation(sc)
    assert sim.time == 0.0 and sim.env.now == 0.0
    row = sim.run_episode()
    assert row["episode"] == 0 and sim.time == pytest.approx(sc.episodes.horizon)
    sim.run_episode()
    assert sim.time == pytest.approx(2 * sc.episodes.horizon)
    applicants = sim.agents_by_type[Applicant]
    applied = np.nonzero(sim.world.cols["applications"])[0]
    assert len(applicants) == len(applied)
    a = sim.applicant(int(applied[0]))
    assert a.wealth == sim.world.cols["wealth"][applied[0]]
    assert a.group_name in ("M", "F") and len(a.history()) >= 1
    assert len(sim.groups) == 2 and sim.groups[0].size == 300 and sim.bank.profit == sim.world.profit_total


def test_decisions_happen_on_epochs(eutopia_small):
    _, _, ev = execute(eutopia_small("episodes.count=2"))
    decided = ev[ev["kind"].isin(["approve", "reject"])]
    epochs = decided["time"].to_numpy() / 0.1
    assert np.allclose(epochs, np.round(epochs), atol=1e-6)
    applied = ev[ev["kind"] == "apply"]["time"].to_numpy()
    assert not np.allclose(applied / 0.1, np.round(applied / 0.1), atol=1e-6)


def test_immediate_review_and_loan_term(eutopia_small):
    _, _, ev = execute(eutopia_small("episodes.review=immediate"))
    apply_t = ev.loc[ev["kind"] == "apply", "time"].to_numpy()
    decide_t = ev.loc[ev["kind"].isin(["approve", "reject"]), "time"].to_numpy()
    assert np.array_equal(apply_t, decide_t)
    sim, ep, ev = execute(eutopia_small("dynamics.loan_term=2.5"))
    appr = ev[ev["kind"] == "approve"].groupby("agent_id")["time"].min()
    out = ev[ev["kind"].isin(["repay", "default"])].groupby("agent_id")["time"].min()
    both = appr.index.intersection(out.index)
    assert np.allclose(out[both] - appr[both], 2.5)
    assert sim.world.outstanding > 0  # loans approved in the last 2.5 time units are still out


def test_run_folder_contract(tmp_path, eutopia_small):
    folder, computed = run_to_folder(eutopia_small(), tmp_path)
    assert computed
    names = {p.name for p in folder.iterdir()}
    assert {"scenario.yaml", "episodes.parquet", "events.parquet", "agents.parquet", "summary.json"} <= names
    ep = pd.read_parquet(folder / "episodes.parquet")
    for col in ("episode", "time", "mean_wealth_M", "mean_wealth_F", "wealth_gap", "inequality_ratio",
                "social_welfare_M", "profit", "cumulative_profit", "reach_F", "approvals_M",
                "applications_F", "defaults_M"):
        assert col in ep.columns
    ev = pd.read_parquet(folder / "events.parquet")
    assert list(ev.columns) == ["time", "episode", "agent_id", "group", "kind", "amount", "wealth_after",
                                "decision_prob"]
    assert set(ev["kind"].astype(str).unique()) <= {"apply", "approve", "reject", "repay", "default"}
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["invariants"] == "passed" and summary["episodes"] == 5
    # rerunning the identical configuration reuses the folder; no temporary folders remain
    again, computed = run_to_folder(eutopia_small(), tmp_path)
    assert again == folder and not computed
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_a_run_computed_by_other_code_is_set_aside_not_reused(tmp_path, eutopia_small):
    from abm.provenance import code_fingerprint

    folder, computed = run_to_folder(eutopia_small(), tmp_path)
    summary = json.loads((folder / "summary.json").read_text())
    assert computed and summary["code_fingerprint"] == code_fingerprint()
    summary["code_fingerprint"] = "0123456789ab"  # as if an older version of the code had computed it
    (folder / "summary.json").write_text(json.dumps(summary))
    lines = []
    kept, computed = run_to_folder(eutopia_small(), tmp_path, stale="reuse", notify=lines.append)
    assert kept == folder and not computed and "other code" in lines[-1]  # a study's choice: keep it
    again, computed = run_to_folder(eutopia_small(), tmp_path, notify=lines.append)
    assert again == folder and computed and "stale-0123456789ab" in lines[-1]
    aside = tmp_path / f"{folder.name}.stale-0123456789ab"
    assert json.loads((aside / "summary.json").read_text())["code_fingerprint"] == "0123456789ab"  # nothing lost
    assert json.loads((folder / "summary.json").read_text())["code_fingerprint"] == code_fingerprint()
    pd.testing.assert_frame_equal(pd.read_parquet(aside / "episodes.parquet"), pd.read_parquet(folder / "episodes.parquet"))
    # --recompute: runs again even with the same code, and keeps the old folder too
    again, computed = run_to_folder(eutopia_small(), tmp_path, reuse=False, notify=lines.append)
    assert computed and "on request" in lines[-1]
    assert len([p for p in tmp_path.iterdir() if ".stale-" in p.name]) == 2


def test_a_finished_simulation_is_freed(eutopia_small):
    """Mesa 3.3 keeps every model in ``Agent._ids``; the engine lends it a model's id counter only
    while it creates agents, so many runs in one process (a Dask worker) do not accumulate
    simulations, and each model still numbers its agents 1, 2, ..."""
    import gc
    import weakref

    import mesa

    from abm.build import simulation

    refs = []
    for seed in range(5):
        sim = simulation(eutopia_small("episodes.count=1", f"seed={seed}"))
        sim.run()
        ids = sorted(agent.unique_id for agent in sim.agents)  # Mesa agents were registered
        assert ids == list(range(1, len(ids) + 1)) and len(ids) > 3, ids[:5]  # numbered per model
        refs.append(weakref.ref(sim))
        del sim
    gc.collect()
    assert [r() for r in refs] == [None] * 5
    assert len(mesa.Agent._ids) == 0
