"""LOANLY: ranges, exact relations, group sizes, seeding and the documented disparity."""

import numpy as np
import pytest

from abm.config import load_scenario
from abm.errors import UserError
from abm.population import generate_population

SCEN = "scenarios/eutopia.yaml"


@pytest.fixture(scope="module")
def pop():
    return generate_population(load_scenario(SCEN))


def test_sizes_and_groups(pop):
    assert len(pop) == 6000
    assert (pop["group_name"] == "M").sum() == 3000 and (pop["group_name"] == "F").sum() == 3000
    # sampled without replacement: no Adult row twice
    assert pop["adult_row"].is_unique


def test_exact_relations(pop):
    assert np.allclose(pop["wealth"], 10 + 190 * pop["score"])
    assert ((pop["wealth"] >= 10) & (pop["wealth"] <= 200)).all()
    assert (pop["label"] == (pop["score"] >= 0.5)).all()
    assert np.allclose(pop["gain"], 0.20 * pop["loan_amount"])
    assert pop["loan_amount"].between(10, 100).all()
    # clipping happens: N(30, 10^2) puts ~2.3% below 10 -> exactly 10
    share_at_floor = (pop["loan_amount"] == 10).mean()
    assert 0.01 < share_at_floor < 0.04
    assert np.allclose(pop["application_weight"], 1 + 0.5 * pop["approval_score"])


def test_default_rate_regimes(pop):
    # p_def = (0.02 + 0.15) / 2 = 0.085; 6000 draws: sd = 0.0036, allow 4 sd
    assert abs(pop["default"].mean() - 0.085) < 4 * np.sqrt(0.085 * 0.915 / 6000)
    ev = generate_population(load_scenario("scenarios/eutopia-eval.yaml"))
    assert abs(ev["default"].mean() - 0.15) < 4 * np.sqrt(0.15 * 0.85 / 6000)


def test_male_wealth_above_female(pop):
    means = pop.groupby("group_name", observed=True)["wealth"].mean()
    assert means["M"] > means["F"] + 5  # the Adult income disparity, in $K


def test_approval_model_prefers_wealth(pop):
    # the fitted approval model (label ~ wealth, group) rises with wealth
    order = np.argsort(pop["wealth"].to_numpy())
    s = pop["approval_score"].to_numpy()[order]
    assert s[-100:].mean() > s[:100].mean() + 0.5


def test_seeded(pop):
    again = generate_population(load_scenario(SCEN))
    assert again.equals(pop)
    other = generate_population(load_scenario(SCEN, ["seed=1"]))
    assert not np.array_equal(other["wealth"].to_numpy(), pop["wealth"].to_numpy())


def test_too_many_without_replacement():
    with pytest.raises(UserError, match="population.n_female"):
        generate_population(load_scenario(SCEN, ["population.n_female=20000"]))
    big = generate_population(load_scenario(SCEN, ["population.n_female=20000", "population.n_male=10",
                                                   "population.sample_with_replacement=true"]))
    assert (big["group_name"] == "F").sum() == 20000
