"""The gymnasium adapter: API conformance on every scenario, registration, determinism, rewards,
and an ``info`` without the label unless asked for."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from abm.config import read_yaml
from abm.errors import UserError
from abm.gym import ENV_IDS, env_id, make_env
from conftest import ROOT, SCENARIOS

# keep each scenario small: the checker resets several times
SMALL = {
    "eutopia": ["population.n_male=200", "population.n_female=200", "episodes.horizon=2.0",
                "arrivals.base_intercept=20.0"],
    "credit_score": ["episodes.horizon=50"],
    "fico": ["episodes.horizon=50"],
    "admissions": ["episodes.horizon=50"],
}
SCENARIO_FILES = sorted(SCENARIOS.glob("*.yaml"))


def small_env(path, *extra, sim_episodes=1, privileged=False):
    family = read_yaml(path).get("family", "eutopia")
    return make_env(path, *SMALL.get(family, []), *extra, sim_episodes=sim_episodes, privileged=privileged)


def no_warnings(check, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = check(*args, **kwargs)
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []
    return out


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: p.stem)
def test_check_env_passes_without_a_warning_for_every_scenario(path):
    env = small_env(path)
    assert env.spec.id == env_id(path.stem) and ENV_IDS[env.spec.id] == path  # the shipped file's id
    no_warnings(check_env, env)  # render and close checks included: they remake the env from its spec
    assert env.action_space == gymnasium.spaces.Discrete(2)
    assert env.observation_space.shape == (len(env.obs_fields),)
    assert np.all(np.isfinite(env.observation_space.low)) and np.all(np.isfinite(env.observation_space.high))


def rollout(env, seed, actions):
    obs, info = env.reset(seed=seed)
    trace = [obs.tolist(), info["agent_id"]]
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        trace += [obs.tolist(), r, trunc]
        if trunc:
            obs, info = env.reset()
            trace.append(obs.tolist())
    return trace


def test_reset_with_a_seed_is_deterministic_and_seeds_differ():
    path = SCENARIOS / "lending-credit.yaml"
    actions = np.random.default_rng(0).integers(0, 2, 300)
    a = rollout(small_env(path), 7, actions)
    b = rollout(small_env(path), 7, actions)
    c = rollout(small_env(path), 8, actions)
    assert a == b
    assert a != c
    # an unseeded env replays the scenario's own seed
    env1, env2 = small_env(path), small_env(path)
    assert env1.reset()[0].tolist() == env2.reset(seed=env2.scenario.seed)[0].tolist()


def test_one_step_is_one_decision_with_its_reward_and_true_outcome():
    env = small_env(SCENARIOS / "lending-credit.yaml", sim_episodes=2, privileged=True)
    obs, info = env.reset(seed=3)
    rewards, steps = [], 0
    while True:
        pending = info
        a = steps % 2
        obs, r, term, trunc, info = env.step(a)
        d = info["decided"]
        assert (d["agent_id"], d["group"], d["action"]) == (pending["agent_id"], pending["group"], a)
        assert d["outcome"] == pending["outcome"]
        # seed 002 lending: r+ = 1 for a repaid loan, -1 for a default, 0 for a rejection
        assert r == (0.0 if a == 0 else (1.0 if d["outcome"] else -1.0))
        assert term is False
        rewards.append(r)
        steps += 1
        if trunc:
            break
    assert steps == 100  # two episodes of 50 unit steps: one applicant per step
    assert info["episode_metrics"]["cumulative_return"] == pytest.approx(sum(rewards))
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step(1)


def test_next_obs_shows_the_decided_applicant_after_the_outcome():
    env = small_env(SCENARIOS / "lending-credit.yaml", privileged=True)
    obs, info = env.reset(seed=5)
    col = env.obs_fields.index("credit_score")
    for _ in range(40):
        obs, r, _, trunc, info = env.step(1)
        d = info["decided"]
        delta = d["next_obs"][col] - d["obs"][col]
        expected = 1.0 if d["outcome"] else -1.0
        assert delta == expected or d["next_obs"][col] in (1.0, 7.0)  # clipped at the ends
        if trunc:
            break


def test_sync_vector_env_runs_and_autoresets():
    path = SCENARIOS / "lending-credit.yaml"
    vec = gymnasium.vector.SyncVectorEnv([lambda: small_env(path), lambda: small_env(path)])
    obs, info = vec.reset(seed=[1, 2])
    assert obs.shape == (2, 4)
    truncations = 0
    for _ in range(120):
        obs, r, term, trunc, info = vec.step(np.array([1, 0]))
        truncations += int(trunc.sum())
        assert r[1] == 0.0  # the second env always rejects
    assert truncations == 4  # 50-step episodes, next-step autoreset: 2 per env in 120 steps
    vec.close()


def test_eutopia_batch_review_decides_every_application():
    env = small_env(SCENARIOS / "eutopia.yaml")
    obs, info = env.reset(seed=0)
    n = 0
    while True:
        obs, r, _, trunc, info = env.step(1)
        n += 1
        if trunc:
            break
    row = info["episode_metrics"]
    assert n == row["applications_M"] + row["applications_F"]
    assert n == row["approvals_M"] + row["approvals_F"]


def trajectory_digest(path, steps, seed, *overrides, sim_episodes=1):
    """sha256 over every observation, reward, flag, info and decided record of a rollout."""
    env = make_env(path, *overrides, sim_episodes=sim_episodes, privileged=True)
    actions = np.random.default_rng(seed).integers(0, 2, steps)
    h = hashlib.sha256()
    obs, info = env.reset(seed=seed)
    h.update(obs.tobytes() + repr(sorted(info.items())).encode())
    for a in actions:
        obs, r, term, trunc, info = env.step(int(a))
        d = info.pop("decided")
        h.update(obs.tobytes() + repr((r, term, trunc, sorted(info.items()))).encode())
        h.update(d.pop("obs").tobytes() + d.pop("next_obs").tobytes() + repr(sorted(d.items())).encode())
        if trunc:
            obs, info = env.reset()
            h.update(obs.tobytes() + repr(sorted(info.items())).encode())
    return h.hexdigest()


@pytest.mark.parametrize("path, steps, seed, overrides, sim_episodes, digest", [
    ("lending-credit.yaml", 3000, 7, (), 1,
     "0d6a4179aaa5b283198252b9829b860257584a364e6871c72b62d6afc79d2fcf"),
    ("lending-conscientiousness.yaml", 1500, 3, ("episodes.horizon=400", "observation.score_change_repay=[1.0,1.5]"), 2,
     "edd532700e02eabc7f86e17f402d3b0b72ddc00f7307d1223204a91595c24a5d"),
])
def test_trajectories_match_the_adapter_before_its_speed_up(path, steps, seed, overrides, sim_episodes, digest):
    # digests recorded with the adapter and engine of commit e6c32d5 (before the hot-path work
    # of benchmarks/RESULTS.md): the faster step loop must replay the same trajectories
    assert trajectory_digest(SCENARIOS / path, steps, seed, *overrides, sim_episodes=sim_episodes) == digest


def test_true_outcome_reader_takes_the_scalar_seam_only_beside_its_own_array_form():
    """The adapter reads ``true_outcome_one(i)`` where the class that defines it also defines
    ``true_outcome`` (the lending worlds: the same value as the array form, for every
    applicant); a subclass that redefines ``true_outcome`` alone is read through it."""
    from abm.gym import _outcome_reader

    env = make_env(SCENARIOS / "lending-credit.yaml", "population.size=300")
    world = env.sim.world
    world.cols["outcome"][:] = np.random.default_rng(2).random(300) < 0.5
    read = _outcome_reader(world)
    assert read == world.true_outcome_one
    assert [read(i) for i in range(300)] == world.true_outcome(np.arange(300)).tolist()

    class Flipped(type(world)):
        def true_outcome(self, idx):
            return ~self.cols["outcome"][idx]

    world.__class__ = Flipped
    read = _outcome_reader(world)
    assert [read(i) for i in range(300)] == (~world.cols["outcome"]).tolist()


# -- registration, spec, and the label only where asked for ---------------------------------------
def test_every_shipped_scenario_is_registered_and_gym_make_builds_it():
    assert sorted(ENV_IDS.values()) == SCENARIO_FILES
    assert {"abm/LendingCredit-v0", "abm/Eutopia-v0", "abm/Admissions-v0", "abm/FicoDelayedImpact-v0"} <= set(ENV_IDS)
    env = gymnasium.make("abm/LendingCredit-v0", overrides=["episodes.horizon=50"], sim_episodes=2)
    assert type(env).__name__ == "AbmEnv" and env.obs_fields[0] == "credit_score"  # no wrappers to look through
    assert env.spec.id == "abm/LendingCredit-v0" and env.spec.max_episode_steps is None
    no_warnings(check_env, env)
    obs, info = env.reset(seed=1)
    steps = 1
    while not env.step(1)[3]:
        steps += 1
    assert steps == 100  # sim_episodes x horizon: one applicant per unit step
    # the spec remakes the same env: gymnasium.make(env.spec), and make_env's own spec
    again = gymnasium.make(env.spec)
    assert rollout(again, 4, [1, 0] * 60) == rollout(env, 4, [1, 0] * 60)
    mine = make_env(SCENARIOS / "lending-credit.yaml", "episodes.horizon=50", sim_episodes=2)
    assert mine.spec.kwargs["overrides"] == ("episodes.horizon=50",)
    assert rollout(gymnasium.make(mine.spec), 4, [1] * 120) == rollout(env, 4, [1] * 120)


def test_bad_ids_and_keywords_are_refused_in_one_line():
    with pytest.raises(gymnasium.error.NameNotFound, match="LendingCredit"):
        gymnasium.make("abm/LendingCredt-v0")  # gymnasium's own did-you-mean
    for bad in ("yes", 1, None):
        with pytest.raises(UserError, match="privileged must be True or False") as exc:
            make_env(SCENARIOS / "lending-credit.yaml", privileged=bad)
        assert "\n" not in str(exc.value)
    for bad in (0, 1.5, True):
        with pytest.raises(UserError, match="sim_episodes"):
            gymnasium.make("abm/LendingCredit-v0", sim_episodes=bad)
    with pytest.raises(UserError, match="overrides"):
        make_env(make_env(SCENARIOS / "lending-credit.yaml").scenario, "seed=1")
    for bad in ([3], ["noequals"]):
        with pytest.raises(UserError, match="overrides|expected dotted.path=value"):
            gymnasium.make("abm/LendingCredit-v0", overrides=bad)


def test_info_carries_no_true_outcome_unless_asked_for():
    """Issue 39: the pending applicant's true repayment predicted every approval's reward sign.
    A default env's info has no label, before or after a decision; ``privileged=True`` asks."""
    env = gymnasium.make("abm/LendingCredit-v0")
    obs, info = env.reset(seed=0)
    assert set(info) == {"agent_id", "group", "time", "sim_episode"}
    for _ in range(200):
        obs, r, term, trunc, info = env.step(1)
        assert "outcome" not in info and "outcome" not in info["decided"]
        assert set(info["decided"]) == {"agent_id", "group", "action", "reward", "obs", "next_obs"}
    env = gymnasium.make("abm/LendingCredit-v0", privileged=True)
    obs, info = env.reset(seed=0)
    for _ in range(200):
        pending = info["outcome"]
        obs, r, term, trunc, info = env.step(1)
        assert info["decided"]["outcome"] == pending and (r > 0) == pending  # the label it is


def test_a_core_install_gets_one_line_naming_the_extra():
    code = ("import sys; sys.modules['gymnasium'] = None\n"
            "try:\n    import abm.gym\nexcept ImportError as exc:\n    print(type(exc).__name__, exc.name, exc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    import abm

    assert out.stdout.strip() == f"ModuleNotFoundError gymnasium abm.gym needs the [rl] extra (gymnasium): " \
                                 f"{abm.pip_install('rl')}", out.stderr


def test_the_gym_page_runs_as_written(monkeypatch):
    """docs/gym.md's Python blocks, in order, in one namespace (its generated part is checked by
    tests/test_reference.py)."""
    text = (ROOT / "docs" / "gym.md").read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    assert len(blocks) >= 4 and any("PPO(" in b for b in blocks)
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/gym.md", "exec"), namespace)
    assert namespace["model"].num_timesteps == 256 and namespace["action"] in (0, 1)
