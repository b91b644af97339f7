"""Plugins (abm.registry): a user's policy as module:Class and a family as a module path, from a
module outside the package, through the CLI, a study on 2 Dask workers and the API; an edit of
the plugin recomputes; broken plugins exit 2 with one line; entry points of installed packages;
``abm policies``; and the top-level ``policies`` package is not shadowed by a user's folder."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from abm import plugins, registry
from abm.errors import UserError
from conftest import ROOT, SCENARIOS, abm_cli, one_error_line, run_folder

SMALL = ["--set", "population.n_male=150", "--set", "population.n_female=150", "--episodes", "2", "--quiet"]

PLUGIN = '''
import numpy as np
from pydantic import Field

from policies.base import NoParams, Policy


class Params(NoParams):
    p: float = Field({p}, ge=0, le=1, description="Approval probability.")


class CoinLender(Policy):
    """Approve each application with probability p (a plugin)."""

    Params = Params

    def _decide(self, obs, info):
        return np.full(len(obs), self.params.p)


NotAPolicy = 42


class Abstract(Policy):
    pass
'''


def write_plugin(folder: Path, name: str, p: float = 0.7) -> Path:
    path = folder / f"{name}.py"
    path.write_text(PLUGIN.format(p=p))
    return path



def test_plugin_policy_through_the_cli_and_an_edit_recomputes(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    path = write_plugin(plugins, "coin_cli")
    args = ("run", str(SCENARIOS / "eutopia.yaml"), "--policy", "coin_cli:CoinLender", "--out", str(tmp_path / "out"),
            *SMALL)
    res = abm_cli(*args, pythonpath=plugins)
    assert res.returncode == 0, res.stderr
    folder = run_folder(res.stdout)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["policy"] == "coin_cli:CoinLender" and "+coin_cli=" in summary["code_fingerprint"]
    res = abm_cli(*args, pythonpath=plugins)
    assert res.returncode == 0 and "reused, nothing recomputed" in res.stdout

    path.write_text(PLUGIN.format(p=0.4))  # the user edits the plugin: the old results are not reused
    res = abm_cli(*args, pythonpath=plugins)
    assert res.returncode == 0, res.stderr
    assert "computed by other code" in res.stderr and "reused" not in res.stdout
    fresh = json.loads((folder / "summary.json").read_text())
    assert fresh["code_fingerprint"] != summary["code_fingerprint"]
    assert [p.name for p in folder.parent.iterdir() if ".stale-" in p.name] == \
        [f"{folder.name}.stale-{summary['code_fingerprint']}"]
    assert fresh["final"] != summary["final"]  # p changed: so did the run


def test_a_plugin_in_the_working_directory_needs_no_pythonpath(tmp_path):
    write_plugin(tmp_path, "coin_cwd")
    res = abm_cli("run", str(SCENARIOS / "eutopia.yaml"), "--policy", "coin_cwd:CoinLender", "--out",
                  str(tmp_path / "out"), *SMALL, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    res = abm_cli("validate", str(SCENARIOS / "eutopia.yaml"), "--set", "policy.name=coin_cwd:CoinLender",
                  "--set", "policy.p=2", cwd=tmp_path)
    assert "policy.p: Input should be less than or equal to 1" in one_error_line(res)


@pytest.mark.parametrize("name, message", [
    ("coin_bad:NotAPolicy", "unknown policy 'coin_bad:NotAPolicy': coin_bad:NotAPolicy is not a policies.base.Policy "
                            "subclass (got int)"),
    ("coin_bad:Abstract", "is abstract"),
    ("coin_bad:Missing", "module 'coin_bad' has no 'Missing'"),
    ("broken_mod:Lender", "cannot import module 'broken_mod' (ModuleNotFoundError: No module named 'no_such_dep_xyz')"),
    ("syntax_mod:Lender", "cannot import module 'syntax_mod' (SyntaxError"),
    ("no_such_module_xyz:Lender", "cannot import module 'no_such_module_xyz'"),
    ("coin_bad:", "expected module:Class"),
    ("not a module:X", "is not a module path"),
])
def test_a_broken_plugin_exits_2_with_one_line(tmp_path, name, message):
    write_plugin(tmp_path, "coin_bad")
    (tmp_path / "broken_mod.py").write_text("import no_such_dep_xyz\n")
    (tmp_path / "syntax_mod.py").write_text("def broken(:\n")
    res = abm_cli("run", str(SCENARIOS / "eutopia.yaml"), "--policy", name, "--out", str(tmp_path / "out"), *SMALL,
                  pythonpath=tmp_path)
    line = one_error_line(res)
    assert message in line and name.split(":")[0].split()[0] in line
    assert not (tmp_path / "out").exists()


def test_plugin_policy_in_a_study_on_two_dask_workers(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    path = write_plugin(plugins, "coin_study")
    study = tmp_path / "plugin-study.yaml"
    study.write_text(textwrap.dedent(f"""\
        study: {{name: plugin-study, seed: 11, episodes: 2, seeds: 1}}
        base: {SCENARIOS / 'eutopia.yaml'}
        overrides: {{population.n_male: 120, population.n_female: 120}}
        policies:
          - {{name: "coin_study:CoinLender", p: 0.6}}
          - {{name: approve_all}}
        """))
    out = tmp_path / "st"
    res = abm_cli("study", str(study), "--workers", "2", "--out", str(out), "--quiet", pythonpath=plugins)
    assert res.returncode == 0, res.stderr
    assert "2 succeeded, 0 skipped, 0 failed" in res.stdout and "2 workers" in res.stdout
    status = {row.split(",")[0]: row for row in (out / "runs.csv").read_text().splitlines()[1:]}
    plugin_run = next(k for k in status if k.startswith("coin_study.CoinLender"))  # no colon in run ids
    assert ",ok," in status[plugin_run] and "+coin_study=" in status[plugin_run]
    assert json.loads((out / "runs" / plugin_run / "summary.json").read_text())["policy"] == "coin_study:CoinLender"

    before = json.loads((out / "runs" / plugin_run / "summary.json").read_text())["code_fingerprint"]
    path.write_text(PLUGIN.format(p=0.3))  # an edited plugin: its run is stale (a study keeps it, and says so)
    res = abm_cli("study", str(study), "--workers", "0", "--out", str(out), "--quiet", pythonpath=plugins)
    assert res.returncode == 0, res.stderr
    assert "2 skipped" in res.stdout and "of the skipped were computed by other code" in res.stdout
    status = {row.split(",")[0]: row for row in (out / "runs.csv").read_text().splitlines()[1:]}
    assert ",stale," in status[plugin_run]
    res = abm_cli("study", str(study), "--workers", "0", "--out", str(out), "--quiet", "--recompute-stale",
                  pythonpath=plugins)
    assert res.returncode == 0 and "0 failed" in res.stdout, res.stdout + res.stderr
    after = json.loads((out / "runs" / plugin_run / "summary.json").read_text())["code_fingerprint"]
    assert after.split("+coin_study=")[1] != before.split("+coin_study=")[1]


def test_plugin_policy_and_family_through_the_api(tmp_path, monkeypatch):
    import abm

    write_plugin(tmp_path, "coin_api")
    package = tmp_path / "fam_api"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "lending.py").write_text(textwrap.dedent('''\
        from typing import Literal

        import numpy as np

        from abm.families import credit_score


        class Scenario(credit_score.Scenario):
            family: Literal["fam_api.lending"] = "fam_api.lending"


        class World(credit_score.World):
            """Credit-score lending where everyone repays a little more often."""

            family = "fam_api.lending"

            def repay_prob(self, idx):
                return np.clip(super().repay_prob(idx) + 0.2, 0.0, 1.0)
        '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    run = abm.run(SCENARIOS / "eutopia.yaml", policy="coin_api:CoinLender",
                  overrides=["population.n_male=150", "population.n_female=150", "policy.p=0.5"], episodes=2)
    assert run.summary["policy"] == "coin_api:CoinLender" and run.scenario.policy.params == {"p": 0.5}
    assert "+coin_api=" in run.summary["code_fingerprint"]
    small = ["population.size=200", "episodes.horizon=200"]
    base = abm.run(SCENARIOS / "lending-credit.yaml", policy="approve_all", episodes=2, overrides=small)
    plugin = abm.run(SCENARIOS / "lending-credit.yaml", policy="approve_all", episodes=2,
                     overrides=[*small, "family=fam_api.lending"])
    assert plugin.summary["family"] == "fam_api.lending" and "+fam_api.lending=" in plugin.summary["code_fingerprint"]
    assert plugin.events["kind"].astype(str).eq("repay").sum() > base.events["kind"].astype(str).eq("repay").sum()
    with pytest.raises(UserError, match="does not apply to family 'fam_api.lending'"):
        abm.run(SCENARIOS / "lending-credit.yaml", policy="oracle", overrides=["family=fam_api.lending"])
    with pytest.raises(UserError, match="unknown family 'fam_api.nothing': cannot import module 'fam_api.nothing'"):
        abm.run(SCENARIOS / "lending-credit.yaml", overrides=["family=fam_api.nothing"])


def test_a_family_plugin_through_the_cli(tmp_path):
    package = tmp_path / "fam_cli"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "wrong.py").write_text("from abm.families.credit_score import Scenario, World\n")
    (package / "lending.py").write_text(textwrap.dedent('''\
        from typing import Literal

        from abm.families import credit_score


        class Scenario(credit_score.Scenario):
            family: Literal["fam_cli.lending"] = "fam_cli.lending"


        World = credit_score.World
        '''))
    small = ["--set", "population.size=200", "--set", "episodes.horizon=100", "--episodes", "2", "--quiet"]
    res = abm_cli("run", str(SCENARIOS / "lending-credit.yaml"), "--set", "family=fam_cli.lending", "--out",
                  str(tmp_path / "out"), *small, pythonpath=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads((run_folder(res.stdout) / "summary.json").read_text())["family"] == "fam_cli.lending"
    res = abm_cli("validate", str(SCENARIOS / "lending-credit.yaml"), "--set", "family=fam_cli.wrong",
                  pythonpath=tmp_path)
    assert "unknown family 'fam_cli.wrong': fam_cli.wrong.Scenario must declare family: Literal['fam_cli.wrong']" \
        in one_error_line(res)
    res = abm_cli("validate", str(SCENARIOS / "lending-credit.yaml"), "--set", "family=fam_nowhere.lending",
                  pythonpath=tmp_path)
    assert "unknown family 'fam_nowhere.lending': cannot import module" in one_error_line(res)


def fake_installed_package(site: Path) -> Path:
    """The example plugin package as pip would leave it (its dist-info with the entry point),
    without installing anything into the environment."""
    dist = site / "abm_example_plugin-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: abm-example-plugin\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[abm.policies]\nquota = abm_example_plugin:QuotaLender\n")
    (site / "abm_example_plugin").symlink_to(ROOT / "examples" / "plugin_policy" / "abm_example_plugin")
    return site


def test_entry_point_plugins_of_installed_packages(tmp_path):
    site = fake_installed_package(tmp_path / "site")
    res = abm_cli("policies", pythonpath=site)
    assert res.returncode == 0, res.stderr
    row = next(line for line in res.stdout.splitlines() if "quota" in line)
    assert "abm_example_plugin:QuotaLender" in row and "(plugin: abm-example-plugin)" in row
    res = abm_cli("policies", "quota", pythonpath=site)
    assert res.returncode == 0 and "At most this many approvals per decision batch" in res.stdout, res.stderr
    res = abm_cli("run", str(SCENARIOS / "eutopia.yaml"), "--policy", "quota", "--set", "policy.quota=2",
                  "--out", str(tmp_path / "out"), *SMALL, pythonpath=site)
    assert res.returncode == 0, res.stderr
    summary = json.loads((run_folder(res.stdout) / "summary.json").read_text())
    assert summary["policy"] == "quota" and "+abm_example_plugin=" in summary["code_fingerprint"]
    assert 0 < summary["policy_state"]["approved"] <= 2 * 2 * 100  # at most 2 per decision epoch


def test_abm_policies_lists_fast_and_describes_one():
    started = time.perf_counter()
    res = abm_cli("policies")
    elapsed = time.perf_counter() - started
    assert res.returncode == 0, res.stderr
    rows = {line.split("│")[1].strip(): line for line in res.stdout.splitlines() if line.startswith("│")}
    assert set(registry.POLICIES) <= set(rows)
    assert "any" in rows["approve_all"] and "beta_belief" in rows["fair_lp"] and "eutopia" in rows["oracle"]
    assert rows["max_util"].split("│")[2].strip() == "admissions, credit_score, fico"
    assert elapsed < 10  # well under 2 s on an idle machine (docs/guide.md); generous on a busy one
    res = abm_cli("policies", "oracle")
    assert res.returncode == 0 and "latent_default" in res.stdout and "privileged columns read: default" in res.stdout
    res = abm_cli("policies", "random")
    assert res.returncode == 0 and "Approval probability for every applicant" in res.stdout and ">= 0" in res.stdout
    assert "unknown policy 'no_such_policy'" in one_error_line(abm_cli("policies", "no_such_policy"))


def test_listing_needs_no_policy_module():
    code = ("import sys; from abm import registry; rows = registry.listing(); print(len(rows), [m for m in "
            "('policies.heuristics', 'torch', 'pandas', 'pydantic', 'abm.families.eutopia') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == f"{len(registry.POLICIES)} []"


def test_the_declarations_read_from_source_are_the_classes():
    """What ``abm policies`` lists from without importing (each built-in policy's ``requires`` and
    each family's ``Scenario.capabilities``, read from their source) is what the classes hold;
    every module of abm/families/ that defines Scenario is a family, named by its module."""
    for name, target in registry.POLICIES.items():
        module, cls = target.split(":")
        if importlib.util.find_spec("torch") is None and module.startswith(("policies.deep", "policies.rl",
                                                                             "policies.perl")):
            continue  # without the [rl] extra the class cannot be imported to compare
        assert registry._declared(module, cls, "requires") == registry.get(name).requires, name
    assert list(registry.FAMILY_NAMES) == sorted(p.stem for p in (ROOT / "abm" / "families").glob("*.py")
                                                 if "\nclass Scenario(" in p.read_text())
    for family in registry.FAMILY_NAMES:  # the built-ins (plugins loaded by other tests are not in it)
        module = registry.FAMILIES[family]
        assert module == f"abm.families.{family}"
        assert registry._declared(module, "Scenario", "capabilities") == \
            registry.family_module(family).Scenario.capabilities, family
    with pytest.raises(LookupError):  # not a literal: the caller imports the class instead
        registry._declared("abm.families.eutopia", "World", "obs_fields")


def test_a_family_whose_scenario_is_no_scenario_base_is_refused(tmp_path, monkeypatch):
    package = tmp_path / "fam_base"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "lending.py").write_text(textwrap.dedent('''\
        from typing import Literal

        from pydantic import BaseModel


        class Scenario(BaseModel):
            family: Literal["fam_base.lending"] = "fam_base.lending"


        class World:
            pass
        '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    from abm.config import validate_scenario_dict

    try:
        with pytest.raises(UserError, match="unknown family 'fam_base.lending': module 'fam_base.lending' is not a "
                                            "family module .its Scenario must be an abm.config.ScenarioBase subclass"):
            validate_scenario_dict({"family": "fam_base.lending"}, "s.yaml")
    finally:
        registry._PLUGIN_FAMILIES.pop("fam_base.lending", None)
        registry.FAMILIES.pop("fam_base.lending", None)
        registry.scenario_union.cache_clear()


def test_a_missing_extra_is_named(tmp_path, monkeypatch):
    (tmp_path / "needs_torch_fake.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserError, match=r"needs the \[rl\] extra: pip install 'abm-lending\[rl\]'"):
        plugins.import_builtin("needs_torch_fake", "policy 'ppo'")


def test_a_policies_folder_in_the_working_directory_does_not_shadow_abms(tmp_path):
    own = tmp_path / "policies"
    own.mkdir()
    (own / "__init__.py").write_text("MINE = True\n")
    (own / "registry.py").write_text("raise RuntimeError('the user policies package was imported')\n")
    code = ("import sys; sys.argv = ['abm', 'run', sys.argv[1], '--episodes', '1', '--set', 'population.size=100', "
            "'--set', 'episodes.horizon=50', '--policy', 'eo_threshold', '--out', sys.argv[2], '--quiet']\n"
            "from abm.cli import main\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
            "import policies; print('policies from', policies.__file__)")
    res = subprocess.run([sys.executable, "-c", code, str(SCENARIOS / "lending-credit.yaml"), str(tmp_path / "out")],
                         capture_output=True, text=True, cwd=tmp_path)  # `python -c`: the cwd is first on sys.path
    assert res.returncode == 0, res.stderr
    assert f"policies from {ROOT / 'policies' / '__init__.py'}" in res.stdout
    res = subprocess.run([sys.executable, "-c", "import policies, abm"], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0 and "another top-level package 'policies'" in res.stderr  # theirs first: a warning
