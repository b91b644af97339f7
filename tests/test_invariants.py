"""End-of-run invariants fail loudly: each one, broken on purpose, raises an InvariantError naming
it, and the CLI exits 1 with that one line and writes no run folder. Positive controls: every
family's small run passes them, and a property test recomputes the ledgers from the files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from abm.config import load_scenario
from abm.errors import InvariantError
from abm.runner import check_run, execute, run_to_folder
from conftest import SMALL_SCORE_FAMILIES
from test_fuzz import CASES, SCENARIOS, call, fuzz

SMALL = {
    "eutopia": ("eutopia.yaml", ["population.n_male=200", "population.n_female=200", "episodes.count=3",
                                 "policy.name=random", "policy.p=0.6"]),
    **SMALL_SCORE_FAMILIES,
}


@pytest.fixture(scope="module")
def runs():
    out = {}
    for family, (file, overrides) in SMALL.items():
        sim, episodes, events = execute(load_scenario(SCENARIOS / file, overrides))
        out[family] = (sim, episodes, events)
    return out


def broken(run, match: str, *, cols=None, episodes=None, events=None, attr=None):
    """check_run on ``run`` with one thing changed (restored afterwards): must name ``match``."""
    sim, ep, ev = run
    saved = {k: v.copy() for k, v in sim.world.cols.items()}
    saved_attr = {k: getattr(sim.world, k) for k in (attr or {})}
    try:
        for (name, index), value in (cols or {}).items():
            sim.world.cols[name][index] = value
        for k, v in (attr or {}).items():
            setattr(sim.world, k, v)
        with pytest.raises(InvariantError, match=match):
            check_run(sim, episodes(ep.copy()) if episodes else ep, events(ev.copy()) if events else ev)
    finally:
        sim.world.cols.update(saved)
        for k, v in saved_attr.items():
            setattr(sim.world, k, v)
    check_run(sim, ep, ev)  # restored: passes again


def drop_first(kind: str):
    def change(ev: pd.DataFrame) -> pd.DataFrame:
        return ev.drop(index=ev.index[ev["kind"].astype(str) == kind][0])
    return change


def test_every_family_passes_its_invariants(runs):
    for family, (sim, ep, ev) in runs.items():
        check_run(sim, ep, ev)
        kinds = set(ev["kind"].astype(str))
        assert "apply" in kinds and len(ep) == int(sim.scenario.episodes.count), family


def test_eutopia_invariants_each_fail_by_name(runs):
    run = runs["eutopia"]
    broken(run, r"wealth = initial \+ gains", cols={("wealth", 0): run[0].world.cols["wealth"][0] + 1.0})
    broken(run, r"approval scores in \[0, 1\]", cols={("approval_score", 3): 1.5})
    broken(run, r"approvals = repayments \+ defaults", cols={("approvals", 0): run[0].world.cols["approvals"][0] + 1})
    broken(run, "profit equals the event ledger", events=drop_first("repay"))
    broken(run, "counts consistent", events=drop_first("apply"))
    broken(run, "decision probabilities in", events=lambda ev: ev.assign(
        decision_prob=ev["decision_prob"].where(ev["decision_prob"].isna(), 1.25)))
    broken(run, "'no NaN in required metrics' broken: mean_wealth_M",
           episodes=lambda ep: ep.assign(mean_wealth_M=[np.nan] + list(ep["mean_wealth_M"].iloc[1:])))
    broken(run, "episode profits sum to the bank profit", episodes=lambda ep: ep.assign(profit=ep["profit"] + 1.0))


def test_score_family_invariants_each_fail_by_name(runs):
    cs = runs["credit_score"]
    broken(cs, r"score in \[", cols={("score", 0): 1e9})
    broken(cs, "loans = repayments", cols={("loans", 0): cs[0].world.cols["loans"][0] + 1})
    broken(cs, "return equals the event ledger", events=drop_first("repay"))
    broken(cs, "one apply event per application", events=drop_first("apply"))
    fico = runs["fico"]
    broken(fico, "return = reward ledger", attr={"profit_total": fico[0].world.profit_total + 1.0})
    adm = runs["admissions"]
    broken(adm, "budgets never negative", cols={("budget", 0): -1.0})
    broken(adm, "manipulation only raises the observed score",
           cols={("observed_score", 0): adm[0].world.cols["score"][0] - 1.0})
    broken(adm, "admission rewards equal the event ledger", events=drop_first("admit"))


def test_cli_exits_1_naming_the_invariant_and_writes_no_folder(tmp_path, monkeypatch):
    from abm.families import eutopia

    original = eutopia.World.end_episode

    def leaky(self, episode):  # a bug that creates wealth from nothing, once
        original(self, episode)
        if episode == 0:
            self.cols["wealth"][7] += 0.5

    monkeypatch.setattr(eutopia.World, "end_episode", leaky)
    file, overrides = SMALL["eutopia"]
    out = tmp_path / "out"
    code, _, err = call("run", str(SCENARIOS / file), *[a for o in overrides for a in ("--set", o)],
                        "--out", str(out), "--quiet")
    assert code == 1, err
    assert err.strip() == "invariant failed: invariant 'wealth = initial + gains' broken for applicant 7"
    assert not out.exists()  # nothing that looks like a result


@fuzz(6)
@given(seed=st.integers(0, 2**32), p=st.floats(0.05, 0.95), excite=st.sampled_from(["approvals", "applications"]))
def test_ledgers_recomputed_from_the_files(tmp_path_factory, seed, p, excite):
    """Independent bookkeeping from the run folder alone: wealth = initial + gains per applicant,
    profit = interest on repaid loans - defaulted principal, probabilities in [0, 1]."""
    CASES["invariant property runs"] += 1
    sc = load_scenario(SCENARIOS / "eutopia.yaml", [
        "population.n_male=150", "population.n_female=150", "episodes.count=2", f"seed={seed}",
        "policy.name=random", f"policy.p={p}", f"arrivals.excite_on={excite}"])
    folder, _ = run_to_folder(sc, tmp_path_factory.mktemp("inv"))
    agents = pd.read_parquet(folder / "agents.parquet")
    events = pd.read_parquet(folder / "events.parquet")
    summary = json.loads((folder / "summary.json").read_text())
    kind = events["kind"].astype(str)
    repaid = events[kind == "repay"].groupby("agent_id").size().reindex(agents["agent_id"], fill_value=0).to_numpy()
    np.testing.assert_allclose(agents["final_wealth"], agents["initial_wealth"] + repaid * agents["gain"],
                               rtol=1e-12, atol=1e-9)
    tau = sc.population.tau_interest
    profit = tau * events.loc[kind == "repay", "amount"].sum() - events.loc[kind == "default", "amount"].sum()
    assert profit == pytest.approx(summary["world"]["profit_total"], rel=1e-12, abs=1e-9)
    decided = events["decision_prob"].dropna()
    assert len(decided) > 0 and decided.between(0, 1).all()
    assert (kind == "apply").sum() == agents["applications"].sum()
    assert summary["invariants"] == "passed"
    assert Path(folder).name.startswith("eutopia-random-seed")
