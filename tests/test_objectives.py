"""Learning objectives: parsing, values on hand-made statistics, the seed's reductions, CLI errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from abm.errors import UserError
from abm.objectives import FAMILIES, FORMS, Objective, parse


def stats(sizes=(100, 100), end=(60.0, 40.0), change=(2.0, 1.0), profit=(30.0, 10.0)):
    return {"sizes": np.array(sizes, float), "mean_wealth": np.array(end, float),
            "mean_wealth_change": np.array(change, float), "profit": np.array(profit, float)}


def random_stats(rng, sizes=(100, 100)):
    end = rng.uniform(20, 120, 2)
    return stats(sizes, end, rng.normal(0, 3, 2), rng.normal(0, 50, 2))


@pytest.mark.parametrize("text, expected", [
    ("outcome:social_welfare", Objective("outcome", "social_welfare")),
    ("dm:utilitarian", Objective("dm", "utilitarian")),
    ("outcome:lagrangian:1.0", Objective("outcome", "lagrangian", lam=1.0)),
    ("dm:lagrangian", Objective("dm", "lagrangian", lam=1.0)),
    (" two_sided : rawlsian ", Objective("two_sided", "rawlsian", alpha=0.5)),
    ("two_sided(0.3):social_welfare", Objective("two_sided", "social_welfare", alpha=0.3)),
    ("two_sided:social_welfare:0.3", Objective("two_sided", "social_welfare", alpha=0.3)),
    ("two_sided(0.2):lagrangian:2", Objective("two_sided", "lagrangian", alpha=0.2, lam=2.0)),
])
def test_parse_forms_and_round_trip(text, expected):
    got = parse(text)
    assert got == expected
    assert parse(str(got)) == got


@pytest.mark.parametrize("text, fragment", [
    ("outcome", "cannot parse"),
    ("welfare:social_welfare", "unknown perspective 'welfare'"),
    ("outcome:maxmin", "unknown family 'maxmin'"),
    ("outcome:lagrangian:-1", "lagrangian lambda must be in [0, 1e+06]"),
    ("outcome:lagrangian:nan", "lagrangian lambda must be in"),
    ("two_sided(1.5):rawlsian", "two_sided alpha must be in [0, 1]"),
    ("two_sided(x):rawlsian", "two_sided alpha must be a number"),
    ("dm(0.5):rawlsian", "only two_sided takes (alpha)"),
    ("dm:rawlsian:0.5", "dm:rawlsian takes no parameter"),
    ("outcome:lagrangian:1:2", "cannot parse"),
])
def test_bad_strings_name_the_allowed_forms(text, fragment):
    with pytest.raises(UserError) as err:
        parse(text)
    assert fragment in str(err.value)
    assert FORMS in str(err.value)


def test_values_on_hand_made_statistics():
    s = stats()  # mu: 58 -> 60 (M), 39 -> 40 (F); profit per member 0.3 (M), 0.1 (F)
    expected = {
        "outcome:utilitarian": 3.0, "outcome:social_welfare": 3.0,
        "outcome:rawlsian": 1.0,  # min level 39 -> 40
        "outcome:lagrangian:0.5": (100 - 0.5 * 20) - (97 - 0.5 * 19),
        "dm:utilitarian": 0.4, "dm:social_welfare": 0.4, "dm:rawlsian": 0.1,
        "dm:lagrangian:0.5": 0.4 - 0.5 * 0.2,
        "two_sided(0.25):rawlsian": 0.25 * 1.0 + 0.75 * 0.1,
        "two_sided:lagrangian:0.5": 0.5 * 2.5 + 0.5 * 0.3,
    }
    for text, value in expected.items():
        assert parse(text).value(s) == pytest.approx(value, abs=1e-12), text
    # unequal groups: utilitarian weighs by size (total wealth/profit over the mean size), SW does not
    u = stats(sizes=(300, 100), profit=(90.0, 10.0))
    assert parse("dm:utilitarian").value(u) == pytest.approx((90 + 10) / 200)
    assert parse("dm:social_welfare").value(u) == pytest.approx(0.3 + 0.1)
    assert parse("outcome:utilitarian").value(u) == pytest.approx((300 * 2 + 100 * 1) / 200)


def test_reductions():
    rng = np.random.default_rng(7)
    for _ in range(50):
        s = random_stats(rng)
        for p in ("outcome", "dm", "two_sided(0.3)"):
            # lagrangian(0) = social welfare (= utilitarian for equal groups), in every perspective
            assert parse(f"{p}:lagrangian:0").value(s) == pytest.approx(parse(f"{p}:social_welfare").value(s))
            # two groups, lambda = 1: sum - |gap| = 2 min
            assert parse(f"{p}:lagrangian:1").value(s) == pytest.approx(2 * parse(f"{p}:rawlsian").value(s))
        # outcome: UP has no separate meaning (= SW); DM: SW has no separate meaning (= UP) -- equal sizes
        assert parse("outcome:utilitarian").value(s) == pytest.approx(parse("outcome:social_welfare").value(s))
        assert parse("dm:social_welfare").value(s) == pytest.approx(parse("dm:utilitarian").value(s))
        for fam in ("utilitarian", "social_welfare", "rawlsian", "lagrangian:0.7"):
            out, dm = parse(f"outcome:{fam}").value(s), parse(f"dm:{fam}").value(s)
            assert parse(f"two_sided(0):{fam}").value(s) == pytest.approx(dm)
            assert parse(f"two_sided(1):{fam}").value(s) == pytest.approx(out)
            assert parse(f"two_sided(0.4):{fam}").value(s) == pytest.approx(0.4 * out + 0.6 * dm)
        # outcome rewards telescope: F(mu_end) - F(mu_start)
        end = s["mean_wealth"]
        start = end - s["mean_wealth_change"]
        assert parse("outcome:rawlsian").value(s) == pytest.approx(end.min() - start.min())


def test_every_combination_selectable_from_a_scenario(tmp_path):
    from abm.config import load_scenario

    path = tmp_path / "s.yaml"
    for perspective, family in itertools.product(("outcome", "dm", "two_sided(0.5)"), FAMILIES):
        text = f"{perspective}:{family}" + (":0.5" if family == "lagrangian" else "")
        path.write_text(f"family: eutopia\nobjective: '{text}'\npolicy: {{name: random}}\n")
        assert parse(load_scenario(path).objective) == parse(text)
        assert load_scenario(path, objective="dm:rawlsian").objective == "dm:rawlsian"  # the --objective flag


def test_bad_objective_exits_2_naming_the_forms(cli):
    done = cli("run", "scenarios/eutopia.yaml", "--policy", "random", "--objective", "outcome:fairness", "--episodes", "1")
    assert done.returncode == 2
    assert "unknown family 'fairness'" in done.stderr and "lagrangian[:lambda]" in done.stderr
    assert "Traceback" not in done.stderr
