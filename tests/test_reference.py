"""The scenario reference (docs/scenario-reference.md), JSON Schema (docs/scenario.schema.json),
gym page and metric glossary (docs/metrics.md) are what ``abm.reference`` generates from the code
now; every top-level field is documented; the schema accepts every shipped scenario and refuses an
unknown key; every column a small run of each family writes to episodes.parquet has a definition
(and every definition is a column some run writes)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from abm import reference, registry
from abm.config import read_yaml, validate_scenario_dict
from abm.errors import UserError
from conftest import ROOT, SCENARIOS

SHIPPED = sorted(SCENARIOS.glob("*.yaml"))


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    try:
        return reference.generated()
    except UserError as exc:  # a core install: the learning lenders' modules need the [rl] extra
        pytest.skip(f"cannot describe every policy here: {exc}")


@pytest.fixture(scope="module")
def schema(generated) -> dict:
    return json.loads(generated[reference.SCHEMA_FILE])


def test_the_committed_files_are_what_the_code_generates(generated):
    for name, text in generated.items():
        path = ROOT / "docs" / name
        committed = path.read_text(encoding="utf-8") if path.is_file() else None
        assert committed == text, (f"docs/{name} is stale (a scenario model, a description or a policy's "
                                   f"parameters changed): run `{reference.COMMAND}` and commit the result")


def test_check_exits_1_with_one_line_when_stale(tmp_path, generated):
    for name, text in generated.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert reference.main(["--check", "--dir", str(tmp_path)]) == 0
    (tmp_path / reference.SCHEMA_FILE).write_text("{}\n")
    res = subprocess.run([sys.executable, "-m", "abm.reference", "--check", "--dir", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and reference.SCHEMA_FILE in lines[0] and reference.COMMAND in lines[0], res.stderr
    assert reference.MARKDOWN_FILE not in lines[0]
    assert (tmp_path / reference.SCHEMA_FILE).read_text() == "{}\n"  # --check writes nothing


def test_every_top_level_field_and_block_is_documented(generated):
    md = generated[reference.MARKDOWN_FILE]
    for family in reference.families():
        cls = registry.family_module(family).Scenario
        assert f"## Family `{family}`" in md
        for name, info in cls.model_fields.items():
            assert f"| `{info.alias or name}` |" in md, f"{family}: top-level field {name} is not in the reference"
            if reference._models_in(info.annotation):  # a block: its own table
                assert f"### `{info.alias or name}`" in md, f"{family}: block {name} has no section"
    for name in registry.POLICIES:
        assert f"### `{name}`" in md
        for field in registry.get(name).Params.model_fields:
            assert f"| `{field}` |" in md


def test_descriptions_defaults_and_ranges_come_from_the_models(generated):
    md = generated[reference.MARKDOWN_FILE]
    assert "| `seed` | int | `0` | [0, 9223372036854775807] | Root seed; every random stream" in md
    assert "| `review` | string | `batch` | `batch`, `immediate` |" in md
    assert "| `horizon` | number | `10` | (0, 1e6] |" in md
    # a family's own episode defaults, not EpisodesConfig's
    assert "Episode defaults in this family: `count` `10`, `horizon` `1000`" in md
    # a policy's parameters, as `abm policies NAME` shows them
    assert "| `p` | number | `0.5` | [0, 1] |" in md.split("### `random`")[1].split("### ")[0]


def _check_keys(schema: dict, node: dict, data, path: str = "") -> list[str]:
    """Unknown keys of ``data`` against ``node`` (refs, unions and items followed): the check the
    tests fall back to where the jsonschema package is not installed."""
    if "$ref" in node:
        node = {**schema["$defs"][node["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in node.items() if k != "$ref"}}
    for key in ("oneOf", "anyOf"):
        if key in node:
            options = [_check_keys(schema, option, data, path) for option in node[key]]
            return [] if any(not o for o in options) else min(options, key=len)
    if isinstance(data, dict) and node.get("type", "object") == "object" and "properties" in node:
        problems = []
        if "const" in node.get("properties", {}).get("family", {}) and "family" in data:
            if data["family"] != node["properties"]["family"]["const"]:
                return [f"{path}family: not {node['properties']['family']['const']}"]
        for k in node.get("required", ()):
            if k not in data:
                problems.append(f"{path}{k}: required")
        for k, v in data.items():
            if k in node["properties"]:
                problems += _check_keys(schema, node["properties"][k], v, f"{path}{k}.")
            elif node.get("additionalProperties", True) is False:
                problems.append(f"{path}{k}: unknown key")
        return problems
    if isinstance(data, list) and isinstance(node.get("items"), dict):
        return [p for item in data for p in _check_keys(schema, node["items"], item, f"{path}[].")]
    return []


def _validator(schema: dict):
    """(data -> problems), jsonschema's when installed, else the key check above."""
    try:
        import jsonschema
    except ImportError:
        return lambda data: _check_keys(schema, schema, data)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    return lambda data: [e.message for e in validator.iter_errors(data)]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_the_schema_accepts_every_shipped_scenario(schema, path):
    data = read_yaml(path)
    validate_scenario_dict(copy.deepcopy(data), str(path))  # abm accepts it too
    assert _validator(schema)(data) == []
    assert _check_keys(schema, schema, data) == []  # the fallback agrees


def test_the_schema_refuses_an_unknown_key_as_the_models_do(schema):
    data = read_yaml(SCENARIOS / "lending-credit.yaml")
    for bad in ({**data, "colour": "blue"},  # top level
                {**data, "population": {**data["population"], "sise": 10}}):  # inside a block
        with pytest.raises(UserError):
            validate_scenario_dict(copy.deepcopy(bad), "bad.yaml")
        assert _validator(schema)(bad)
        assert _check_keys(schema, schema, bad)
    # a file without `family` is the default family's, as abm reads it
    assert _validator(schema)({"name": "x", "population": {"n_male": 10}}) == []
    assert _validator(schema)({"name": "x", "population": {"size": 10}})  # a credit_score key, no family


def test_plugins_loaded_in_the_process_do_not_change_the_reference(generated, tmp_path, monkeypatch):
    package = tmp_path / "fam_ref"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "lending.py").write_text(
        "from typing import Literal\nfrom abm.families import credit_score\n\n\n"
        "class Scenario(credit_score.Scenario):\n    family: Literal['fam_ref.lending'] = 'fam_ref.lending'\n\n\n"
        "World = credit_score.World\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.family_module("fam_ref.lending")
    try:
        assert reference.json_text() == generated[reference.SCHEMA_FILE]
        assert reference.families() == list(tuple.__iter__(registry.FAMILY_NAMES))
    finally:
        registry._PLUGIN_FAMILIES.pop("fam_ref.lending", None)
        registry.FAMILIES.pop("fam_ref.lending", None)
        registry.scenario_union.cache_clear()


def test_abm_schema_prints_what_the_docs_hold(generated):
    from conftest import call_in_process

    code, out, err = call_in_process("schema")
    assert code == 0, err
    assert json.loads(out) == json.loads((ROOT / "docs" / "scenario.schema.json").read_text())
    code, out, _ = call_in_process("schema", "--markdown")
    assert code == 0 and out == (ROOT / "docs" / "scenario-reference.md").read_text()
    code, _, err = call_in_process("schema", "--bogus")
    assert code == 2 and "Traceback" not in err and "--bogus" in err


def test_the_gym_page_keeps_its_generated_part_between_its_markers(tmp_path, generated):
    page = generated[reference.GYM_FILE]
    assert page.count(reference.GYM_BEGIN) == 1 and page.count(reference.GYM_END) == 1
    from abm.gym import ENV_IDS

    assert all(f"| `{id_}` | [`scenarios/{path.name}`]" in page for id_, path in ENV_IDS.items())
    assert "| 0 | `credit_score` | 1 | 7 |" in page  # lending-credit's first column and its bounds
    (tmp_path / reference.GYM_FILE).write_text(page.replace(reference.GYM_END, ""))
    with pytest.raises(UserError, match="generated part"):
        reference.gym_page(tmp_path / reference.GYM_FILE)


# small runs of every built-in family, with the options that add columns (credit_gap_w2)
METRIC_RUNS = {
    "credit_score": ("lending-credit.yaml", ["population.size=200", "episodes.count=2", "episodes.horizon=200",
                                             "metrics.credit_gap_w2=true"]),
    "fico": ("fico-delayed-impact.yaml", ["population.size=300", "episodes.count=2", "episodes.horizon=300"]),
    "admissions": ("admissions.yaml", ["population.size=200", "episodes.count=2", "episodes.horizon=60",
                                       "policy.burn_in=20"]),
    "eutopia": ("eutopia.yaml", ["population.n_male=150", "population.n_female=150", "episodes.count=2"]),
    "beta_belief": ("beta-belief-loans.yaml", ["population.size=100", "episodes.count=2", "episodes.horizon=10"]),
    "infectious_disease": ("infectious-disease.yaml", ["episodes.count=2"]),
    "attention_allocation": ("attention-allocation-harder.yaml", ["episodes.count=2"]),
}


def test_every_family_is_run_for_its_metric_columns():
    assert sorted(METRIC_RUNS) == sorted(reference.families())


@pytest.mark.parametrize("family", sorted(METRIC_RUNS))
def test_every_metric_column_a_run_writes_has_a_definition(family, generated):
    from abm.config import load_scenario
    from abm.runner import execute

    path, overrides = METRIC_RUNS[family]
    sc = load_scenario(SCENARIOS / path, overrides)
    assert sc.family == family
    sim, episodes, _ = execute(sc)
    definitions = reference.metric_definitions(family)
    names = list(sim.world.group_names)
    missing = reference.undefined_columns(episodes.columns, names, definitions)
    assert not missing, (f"{family}: episodes.parquet columns without a definition: {missing}; declare them in "
                         f"the family's Scenario.metric_definitions and run `{reference.COMMAND}`")
    written = set(map(str, episodes.columns))
    unused = [d for d in definitions if not written & {d.replace("{g}", g) for g in names}]
    assert not unused, f"{family}: definitions of columns no run writes: {unused}"
    assert all(unit is not None and text.strip() for unit, text in definitions.values())
    assert all(f in reference.scenario_class(family).observation_definitions for f in sim.world.obs_fields)
    page = generated[reference.METRICS_FILE]
    section = page.split(f"## Family `{family}`")[1].split("## Family ")[0]
    assert all(f"| `{d}` |" in section for d in definitions)
    assert all(f"| `{f}` |" in section for f in sim.world.obs_fields)


def test_undefined_columns_expands_group_patterns():
    defs = {"episode": ("", "x"), "mean_wealth_{g}": ("$K", "y")}
    assert reference.undefined_columns(["episode", "mean_wealth_M", "mean_wealth_F", "gap"], ["M", "F"], defs) == \
        ["gap"]
    assert reference.undefined_columns(["mean_wealth_X"], ["M"], defs) == ["mean_wealth_X"]
