"""ml-fairness-gym's lending reading (docs/results/mfg-lending.md): Max-util's burn-in, the learned
(group-aware) Max-util, the side-by-side script's bad input, and metric sums that no processor's
BLAS kernel can reorder (one episodes digest on every processor)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import numpy as np
import pytest

from abm.config import load_scenario
from abm.errors import UserError
from abm.families.steps import Outcomes
from abm.runner import execute
from conftest import ROOT, SCENARIOS
from test_baselines import make

SCORES = np.arange(1, 8, dtype=float)


def obs(scores, group):
    scores = np.asarray(scores, float)
    return np.column_stack([scores, np.full(len(scores), group), np.zeros(len(scores)), np.zeros(len(scores))])


def decide(policy, rows):
    probs = policy.decide(rows)
    policy.on_decisions(rows, None, probs, probs > 0)
    return probs.tolist()


def resolve(policy, score, group, repaid):
    row = obs([score], group)
    policy.on_outcomes(Outcomes(np.array([0]), np.array([group]), row, np.array([repaid]), np.array([0.0])))


def test_max_util_burn_in_approves_everyone_then_the_known_rule():
    policy = make("max_util", burn_in=3)
    assert decide(policy, obs([1, 2], 0)) == [1.0, 1.0]
    assert decide(policy, obs([1], 1)) == [1.0]  # the third decision: still the burn-in
    assert decide(policy, obs(SCORES, 0)) == [0, 0, 0, 1, 1, 1, 1]  # as without a burn-in (test_baselines)


def test_learned_max_util_learns_a_threshold_per_group_from_its_own_loans():
    policy = make("max_util_learned", burn_in=0)
    assert decide(policy, obs([1, 7], 0)) == [1.0, 1.0]  # no loan resolved yet: everyone
    for score, repaid in ((3, False), (3, False), (4, True), (4, True), (4, False), (6, False), (7, True), (7, True)):
        resolve(policy, score, 0, repaid)
    # G1's realised gain per score: 3: -2, 4: +1, 6: -1, 7: +2; tails from 3: 0, 4: 2, 6: 1, 7: 2 -> cut at 7
    # (ties: the higher cut, as single_threshold)
    assert policy.thresholds[0] == 7.0 and decide(policy, obs([4, 6, 7], 0)) == [0.0, 0.0, 1.0]
    assert decide(policy, obs([1], 1)) == [1.0]  # G2 has no loan resolved: its own threshold is still open
    resolve(policy, 2, 1, False)
    assert decide(policy, obs([2, 5], 1)) == [0.0, 0.0]  # nothing G2 has seen paid: nobody
    assert policy.state()["thresholds"] == {"G1": 7.0, "G2": None}


def test_learned_max_util_pooled_is_one_threshold_for_all_groups():
    policy = make("max_util_learned", burn_in=0, pooled=True)
    for score, group, repaid in ((3, 0, False), (4, 1, True), (5, 0, True)):
        resolve(policy, score, group, repaid)
    assert decide(policy, obs([3, 4], 0)) == decide(policy, obs([3, 4], 1)) == [0.0, 1.0]
    assert policy.state()["thresholds"] == {"all": 4.0}


def test_learned_max_util_burn_in_counts_decisions():
    policy = make("max_util_learned", burn_in=2)
    resolve(policy, 4, 0, False)
    assert decide(policy, obs([4, 4], 0)) == [1.0, 1.0]  # the burn-in ignores what was learned
    assert decide(policy, obs([4], 0)) == [0.0]


@pytest.mark.parametrize("name, setting, message", [
    ("max_util", "policy.burn_in=-1", "burn_in"),
    ("max_util_learned", "policy.burn_in=-5", "burn_in"),
    ("max_util_learned", "policy.pooled=maybe", "pooled"),
    ("max_util", "policy.pooled=true", "pooled"),
])
def test_bad_parameters_are_refused_naming_the_field(name, setting, message):
    with pytest.raises(UserError, match=message):
        load_scenario(SCENARIOS / "lending-credit.yaml", [setting], policy=name)


def test_the_learned_max_util_runs_under_ml_fairness_gyms_dynamics():
    """On the mass-shift reading with ml-fairness-gym's repayment table: the learned Max-util's
    recall is a probability per group, and its burn-in (everyone approved) shows in the loans."""
    sc = load_scenario(SCENARIOS / "lending-credit.yaml",
                       ["dynamics.model=mass_shift", "population.repay_probs=[0.1,0.2,0.45,0.6,0.65,0.7,0.7]",
                        "episodes.count=1", "episodes.horizon=400", "outputs.events=false", "policy.burn_in=400"],
                       policy="max_util_learned")
    row = execute(sc)[1].iloc[-1]
    assert row["approvals_G1"] + row["approvals_G2"] == 400  # the whole episode is the burn-in
    assert row["recall_G1"] == row["recall_G2"] == 1.0


def script(*args):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mfg_side_by_side.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("extra, message", [
    (["--steps", "10,x"], "--steps: comma-separated whole numbers"),
    (["--steps", "0,10"], "--steps: every count must be at least 1"),
    (["--burn-in", "-1"], "--burn-in: must be at least 0"),
    (["--shift", "0"], "--shift: must be in (0, 1]"),
    (["--seeds", "0"], "--seeds"),
    (["--probs", "other"], "--probs"),
    (["--restated", "-1"], "--restated: must be at least 0"),
])
def test_the_side_by_side_script_refuses_bad_input_in_one_line(tmp_path, extra, message):
    done = script(tmp_path, tmp_path / "deps", *extra)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_the_side_by_side_script_names_a_missing_or_foreign_checkout(tmp_path):
    done = script(tmp_path / "nowhere", tmp_path / "deps")
    assert done.returncode == 2 and "does not exist" in done.stderr and "Traceback" not in done.stderr
    done = script(tmp_path, tmp_path / "deps")  # an empty folder: no work tree, no git directory
    assert done.returncode == 2 and "neither an ml-fairness-gym work tree" in done.stderr


def test_the_restatement_follows_ml_fairness_gyms_rules():
    """The script's numpy restatement: everyone approved in the burn-in (recall 1); without one,
    some repayers are rejected (recall below 1) and the loans move the mass; the return is a sum of
    +1 / -1 per loan; one run gives every step count asked for."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import mfg_side_by_side as side

    args = type("Args", (), {"shift": 0.01, "burn_in": 200, "probs": side.MFG_PROBS})()
    early = side.restated(3, [200], args)[0]
    assert early["recall"] == [1.0, 1.0]
    args.burn_in = 0
    rows = side.restated(3, [100, 2000], args)
    assert rows[0]["steps"] == 100 and rows[1]["steps"] == 2000
    assert all(0 < r < 1 for r in rows[1]["recall"]) and rows[1]["mean_bin"][0] != rows[0]["mean_bin"][0]
    assert abs(rows[1]["return"]) <= 2000 and rows[1]["return"] == int(rows[1]["return"])


PROBE = r'''
import json, numpy as np
from scipy.stats import wasserstein_distance
from abm.families import steps
rng = np.random.default_rng(7)
out = []
for _ in range(20):
    a, b = rng.normal(size=500), rng.normal(0.3, 1.2, size=400)
    w = rng.random(400)
    out.append([wasserstein_distance(a, b).hex(), steps.wasserstein1(a, b).hex(), steps.wasserstein1(a, b, None, w).hex(),
                steps.wasserstein2_squared(a, b, None, w).hex()])
print(json.dumps(out))
'''


def probe(kernel: str) -> list[list[str]]:
    import os

    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, OPENBLAS_CORETYPE=kernel))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="OpenBLAS kernel names are x86's")
def test_the_credit_gap_is_the_same_with_every_blas_kernel():
    """OpenBLAS picks its kernel by processor; OPENBLAS_CORETYPE forces one, standing in for
    another processor. scipy's W1 (a BLAS dot) changes in its last bits between kernels; ours,
    summed with math.fsum, does not, and stays within one rounding of scipy's."""
    from threadpoolctl import threadpool_info

    if not any(i.get("internal_api") == "openblas" for i in threadpool_info()):
        pytest.skip("numpy's BLAS here is not OpenBLAS")
    sse, avx2 = probe("Prescott"), probe("Haswell")
    if all(x[0] == y[0] for x, y in zip(sse, avx2)):
        pytest.skip("these two kernels sum scipy's dot in one order here: nothing to tell apart")
    assert [x[1:] for x in sse] == [x[1:] for x in avx2]
    for row in sse:
        scipy_w1, ours = float.fromhex(row[0]), float.fromhex(row[1])
        assert abs(scipy_w1 - ours) <= 4 * np.spacing(ours)
