"""Bad input never gets a traceback: hypothesis-generated malformed scenario files, study files,
``--set`` overrides and raw bytes, and untrusted files treated as data only.

Every generated case goes through the console entry point ``abm.cli.main`` in this process (the
same code as the ``abm`` script, without a process start per case). The contract checked on each
case: exit code 2, every stderr line ``error: ...`` (one line per problem, no traceback), the
mutated field named, and for ``abm run`` / ``abm study`` no output folder left behind.

The generator settings are fixed (``derandomize=True``, explicit ``max_examples``, no example
database), so CI fuzzes the same cases every time; ``CASES`` counts them and
docs/RELIABILITY.md reports the figures. Cases that once found a bug are kept as explicit
``@example``s or in ``REGRESSIONS``.
"""

from __future__ import annotations

import copy
import json
import math
import sys
import tempfile
import zipfile
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import call_in_process

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
FAMILY_FILES = {"eutopia": "eutopia.yaml", "credit_score": "lending-credit.yaml",
                "fico": "fico-delayed-impact.yaml", "admissions": "admissions.yaml"}
CASES: Counter = Counter()  # cases fuzzed per test (printed at the end of the module)


def fuzz(n: int):
    """The fixed CI profile: n cases, reproducible, no deadline (the machines are shared)."""
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


call = call_in_process


def assert_user_error(code: int, err: str, *needles: str) -> list[str]:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert "Traceback" not in err and lines, err
    assert all(line.startswith("error: ") for line in lines), err
    for needle in needles:
        assert needle in err, (needle, err)
    return lines


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    yield
    print("\nfuzz cases:", dict(CASES), "total", sum(CASES.values()))


# ---------------------------------------------------------------------------------------------
# Strategies: one mutation of a valid scenario file of each family


def small_base(family: str) -> dict:
    """The family's scenario file, shrunk so that an accidentally valid case runs in a second."""
    doc = yaml.safe_load((SCENARIOS / FAMILY_FILES[family]).read_text())
    doc["episodes"]["count"] = 2
    if family == "eutopia":
        doc["population"].update(n_male=100, n_female=100)
    else:
        doc["population"]["size"] = 100
    return doc


BASES = {f: small_base(f) for f in FAMILY_FILES}


def leaves(node, path=()):
    """(path, value) of every scalar or list-of-scalars leaf; lists of mappings are walked."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, path + (k,))
    elif isinstance(node, list) and node and all(isinstance(v, dict) for v in node):
        for i, v in enumerate(node):
            yield from leaves(v, path + (i,))
    else:
        yield path, node


def sections(node, path=()):
    """Paths of every mapping in the document (the top level included)."""
    if isinstance(node, dict):
        yield path
        for k, v in node.items():
            yield from sections(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from sections(v, path + (i,))


def set_at(doc: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(doc)
    node = out
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return out


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# words no field coerces: not numbers, not YAML/pydantic booleans, not a policy/regime/etc. name
BOOLISH = {"y", "n", "t", "f", "yes", "no", "on", "off", "true", "false", "inf", "nan", "infinity"}
words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12).map(lambda w: "zq" + w) \
    .filter(lambda w: w.lower() not in BOOLISH)
non_finite = st.sampled_from([math.nan, math.inf, -math.inf])
huge = st.sampled_from([1e300, 1.7e308, 10**30, 2**64, 10**400])
containers = st.one_of(st.lists(st.integers(0, 9), min_size=1, max_size=3).map(lambda x: [x]),
                       st.dictionaries(words, st.integers(), min_size=1, max_size=2))


@st.composite
def scenario_mutation(draw):
    """(family, mutated document, text the error must contain)."""
    family = draw(st.sampled_from(sorted(BASES)))
    base = BASES[family]
    kind = draw(st.sampled_from(["wrong_type", "non_finite", "huge", "unknown_key", "empty_group",
                                 "unknown_policy", "bad_policy_param", "unknown_objective", "wrong_family",
                                 "section_type"]))
    all_leaves = [(p, v) for p, v in leaves(base) if p[0] not in ("family", "policy")]
    numeric = [(p, v) for p, v in all_leaves if is_number(v)]
    numeric_lists = [(p, v) for p, v in all_leaves if isinstance(v, list) and v and all(map(is_number, v))]
    if kind == "wrong_type":
        path, value = draw(st.sampled_from(all_leaves))
        if is_number(value) or isinstance(value, bool):
            bad = draw(st.one_of(words, containers))
        elif isinstance(value, str):
            bad = draw(st.one_of(containers, st.integers(-5, 5)))
        elif value is None:  # nullable lists and paths: only a mapping is wrong for both
            bad = draw(st.dictionaries(words, st.integers(), min_size=1, max_size=2))
        else:  # lists
            bad = draw(st.one_of(words, st.dictionaries(words, st.integers(), min_size=1, max_size=2)))
        return family, set_at(base, path, bad), str(path[-1])
    if kind in ("non_finite", "huge"):
        value = draw(non_finite if kind == "non_finite" else huge)
        if numeric_lists and draw(st.booleans()):
            path, items = draw(st.sampled_from(numeric_lists))
            i = draw(st.integers(0, len(items) - 1))
            return family, set_at(base, path, items[:i] + [value] + items[i + 1:]), str(path[-1])
        path, _ = draw(st.sampled_from(numeric))
        return family, set_at(base, path, value), str(path[-1])
    if kind == "unknown_key":
        where = draw(st.sampled_from(list(sections(base))))
        key = draw(words)
        return family, set_at(base, where + (key,), draw(st.integers())), key
    if kind == "empty_group":
        if family == "eutopia":
            field = draw(st.sampled_from(["n_male", "n_female"]))
            return family, set_at(base, ("population", field), 0), field
        if family == "fico":
            return family, set_at(base, ("population", "groups"), []), "groups"
        return family, set_at(base, ("population", "groups"), draw(st.sampled_from([[], [{}]]))), "groups"
    if kind == "unknown_policy":
        name = draw(words)
        return family, set_at(base, ("policy",), {"name": name}), f"unknown policy {name!r}"
    if kind == "bad_policy_param":
        bad = draw(st.one_of(non_finite, huge, words, st.floats(-1e6, -1e-6), st.floats(1.0001, 1e6)))
        return family, set_at(base, ("policy",), {"name": "random", "p": bad}), "policy.p"
    if kind == "unknown_objective":
        text = draw(st.one_of(words.map(lambda w: f"outcome:{w}"), words.map(lambda w: f"{w}:utilitarian"),
                              st.text(max_size=20).filter(lambda t: ":" not in t and t.strip())))
        return family, set_at(base, ("objective",), text), "objective"
    if kind == "wrong_family":
        other = draw(st.one_of(st.sampled_from([f for f in BASES if f != family]), words,
                               st.integers(), st.lists(st.integers(), max_size=2), st.none()))
        return family, set_at(base, ("family",), other), ""
    section = draw(st.sampled_from([k for k, v in base.items() if isinstance(v, dict)]))
    return family, set_at(base, (section,), draw(st.one_of(words, st.integers(), st.lists(st.integers())))), section


@fuzz(400)
@given(case=scenario_mutation())
@example(case=("eutopia", set_at(BASES["eutopia"], ("population", "regime"), []), "regime"))  # was TypeError
@example(case=("eutopia", set_at(BASES["eutopia"], ("population", "regime"), {"a": 1}), "regime"))
def test_malformed_scenarios_exit_2_naming_the_field_and_leave_no_folder(case):
    CASES["scenario mutations (abm run)"] += 1
    family, doc, needle = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bad.yaml"
        path.write_text(yaml.safe_dump(doc, allow_unicode=True))
        out = Path(tmp) / "out"
        code, _, err = call("run", str(path), "--out", str(out), "--quiet")
        lines = assert_user_error(code, err, needle)
        assert all(str(path) in line for line in lines), err
        assert not out.exists()


# ---------------------------------------------------------------------------------------------
# Raw text and bytes: broken YAML, tags, aliases, non-UTF-8

FRAGMENTS = ["[", "]", "{", "}", ": ", ":", "- ", "\t", "\n", "  ", "&a ", "*a", "*b", "? ", "|", ">", "'", '"',
             "---\n", "...\n", "%YAML 1.1\n", "!!binary ", "!!str ", "!!int ", "!!float ", "!!set ", "<<: *a\n",
             "population", "n_male", "episodes", "count", "policy", "name", "family", "eutopia", "1e400", ".nan",
             "-.inf", "0x1F", "~", "null", "study", "grid", "base", "#", ",", "\\", "\x00", "\ufeff", "é"]
EXEC_TAG = "!!python/object/apply:os.system ['touch {mark}']"


@st.composite
def yaml_text(draw):
    parts = draw(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=25))
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), "\n" + EXEC_TAG + "\n")
    return "".join(parts)


def alias_bomb(levels: int, width: int) -> str:
    lines = [f"a0: &a0 [{','.join(['1'] * width)}]"]
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@fuzz(300)
@given(text=yaml_text())
@example(text=alias_bomb(9, 9))  # ~400 million values once expanded: hung `abm validate`
@example(text="zz: &a [*a]\n")  # a list containing itself
@example(text="population: &a {n_male: 5, x: *a}\n")
def test_arbitrary_text_never_tracebacks_and_tags_never_execute(text):
    CASES["YAML-ish text (abm validate)"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        mark = Path(tmp) / "executed"
        path = Path(tmp) / "any.yaml"
        path.write_text(text.replace("{mark}", str(mark)), encoding="utf-8", errors="surrogatepass")
        code, out, err = call("validate", str(path))
        assert code in (0, 2), err
        if code == 0:
            assert out.strip() == f"{path}: ok" and not err
        else:
            assert_user_error(code, err, str(path))
        assert not mark.exists(), "a YAML tag executed code"


@fuzz(150)
@given(data=st.binary(min_size=1, max_size=64), cut=st.integers(0, 400))
def test_non_utf8_bytes_are_refused_with_the_byte_offset(data, cut):
    CASES["non-UTF-8 files (abm validate, abm study)"] += 1
    text = (SCENARIOS / "eutopia.yaml").read_bytes()
    blob = text[:cut] + b"\xff" + data + text[cut:]  # 0xff is never valid UTF-8
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bytes.yaml"
        path.write_bytes(blob)
        code, _, err = call("validate", str(path))
        assert_user_error(code, err, "not UTF-8", str(path))
        code, _, err = call("study", str(path), "--out", str(Path(tmp) / "out"), "--workers", "0")
        assert_user_error(code, err, "not UTF-8")
        assert not (Path(tmp) / "out").exists()


# ---------------------------------------------------------------------------------------------
# --set overrides

KNOWN_KEYS = sorted({".".join(map(str, p)) for doc in BASES.values() for p, _ in leaves(doc)
                     if not any(isinstance(k, int) for k in p)})
override_value = st.one_of(st.text(max_size=15), st.sampled_from(["[", "{a: [}", ".nan", "-.inf", "1e400", "~",
                                                                    "[1, 2]", "{}", "!!binary x", "*a", "&a [*a]"]))


@fuzz(250)
@given(key=st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=20)), sep=st.sampled_from(["=", "", "=="]),
       value=override_value)
@example(key="population", sep="=", value="5")
@example(key="x", sep="=", value="[&a [1,1,1,1,1,1,1,1,1,1],&b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a],"
                                 "&c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b],&d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c],"
                                 "&e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d],[*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]]")
def test_bad_overrides_exit_2_in_one_line_each(key, sep, value):
    CASES["--set overrides (abm validate)"] += 1
    code, out, err = call("validate", str(SCENARIOS / "eutopia.yaml"), "--set", f"{key}{sep}{value}")
    assert code in (0, 2), err
    if code == 2:
        assert_user_error(code, err)
    else:
        assert out.strip().endswith(": ok") and not err


# ---------------------------------------------------------------------------------------------
# Study files


def tiny_study() -> dict:
    return {"study": {"name": "fz", "seed": 3, "episodes": 2, "seeds": 1},
            "base": str(SCENARIOS / "eutopia.yaml"),
            "overrides": {"population.n_male": 100, "population.n_female": 100},
            "grid": {"arrivals.base_slope": [0.01, 0.02]},
            "policies": [{"name": "approve_all"}, {"name": "random", "p": 0.5}],
            "objectives": [None],
            "groups": {"g": {"policies": [{"name": "random", "p": 0.2}]}}}


@st.composite
def study_mutation(draw):
    """(mutated study document, text the error must contain)."""
    doc = tiny_study()
    kind = draw(st.sampled_from(["header", "unknown_key", "grid", "policies", "objectives", "groups", "base",
                                 "overrides", "section_type"]))
    if kind == "header":
        field, bad = draw(st.sampled_from([
            ("name", st.one_of(st.sampled_from(["", ".", "..", "a/b", "../x", "a b"]), st.integers())),
            ("seed", st.one_of(non_finite, huge, st.integers(max_value=-1), words)),
            ("episodes", st.one_of(non_finite, huge, st.integers(max_value=0), words)),
            ("seeds", st.one_of(st.integers(max_value=0), st.integers(min_value=10_001), st.just([]),
                                st.just([1, 1]), st.just([-1]), words)),
            ("description", st.one_of(st.integers(), st.text(min_size=2001, max_size=2001))),
        ]).map(lambda fs: (fs[0], draw(fs[1]))))
        return set_at(doc, ("study", field), bad), f"study.{field}"
    if kind == "unknown_key":
        where = draw(st.sampled_from([(), ("study",), ("groups", "g")]))
        key = draw(words)
        return set_at(doc, where + (key,), 1), key
    if kind == "grid":
        bad = draw(st.sampled_from([
            ({"arrivals.base_slope": []}, "grid"), ({"arrivals.base_slope": 0.1}, "grid"),
            ({"arrivals.base_slope": [0.1, 0.1]}, "listed twice"), ({"seed": [1, 2]}, "seed"),
            ({"arrivals.base_slope": [math.nan]}, "arrivals.base_slope"),
            ({"arrivals.base_slope": [1e300]}, "arrivals.base_slope"),
            ({"arrivals.zq_missing": [1]}, "zq_missing"), ({"bad key!": [1]}, "bad key!"),
            ({"population.n_male": [0]}, "population.n_male")]))
        return set_at(doc, ("grid",), bad[0]), bad[1]
    if kind == "policies":
        bad = draw(st.one_of(
            st.just(([], "policies")), words.map(lambda w: ([{"name": w}], "policies")),
            st.one_of(non_finite, huge, words).map(lambda v: ([{"name": "random", "p": v}], "policies")),
            st.just(([{"name": "approve_all"}, {"name": "approve_all"}], "listed twice")),
            st.just(([5], "policies")), st.just(([{"p": 0.3}], "policies"))))
        return set_at(doc, ("policies",), bad[0]), bad[1]
    if kind == "objectives":
        bad = draw(st.one_of(st.just([]), words.map(lambda w: [f"outcome:{w}"]), st.just([None, None]),
                             st.just([5])))
        return set_at(doc, ("objectives",), bad), "objectives"
    if kind == "groups":
        bad = draw(st.sampled_from([({"a b": {}}, "a b"), ({"g": 5}, "groups.g"),
                                    ({"g": {"policies": []}}, "policies"),
                                    ({"g": {"grid": {"arrivals.decay": [-1.0]}}}, "arrivals.decay")]))
        return set_at(doc, ("groups",), bad[0]), bad[1]
    if kind == "base":
        bad = draw(st.sampled_from([("zq-missing.yaml", "no such file"), ("/", "not a file"),
                                    (5, "base"), ([1], "base"), ({"family": "zq"}, "family"),
                                    ({"population": {"loan_mean": "many"}}, "population.loan_mean")]))
        return set_at(doc, ("base",), bad[0]), bad[1]
    if kind == "overrides":
        bad = draw(st.sampled_from([({"seed": 1}, "seed"), ({"episodes.horizon": math.inf}, "episodes.horizon"),
                                    ({"population.n_male": 10**30}, "population.n_male"),
                                    ({"policy.name": "random"}, "overrides")]))
        return set_at(doc, ("overrides",), bad[0]), bad[1]
    section = draw(st.sampled_from(["study", "overrides", "grid", "groups"]))
    return set_at(doc, (section,), draw(st.one_of(words, st.integers(), st.lists(st.integers(), min_size=1)))), section


@fuzz(200)
@given(case=study_mutation())
@example(case=(set_at(tiny_study(), ("study", "name"), ".."), "study.name"))  # outputs/studies/.. = outputs/
def test_malformed_studies_exit_2_naming_the_field_and_leave_no_folder(case):
    CASES["study mutations (abm study)"] += 1
    doc, needle = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "study.yaml"
        path.write_text(yaml.safe_dump(doc, allow_unicode=True))
        out = Path(tmp) / "out"
        code, _, err = call("study", str(path), "--out", str(out), "--workers", "0", "--quiet")
        lines = assert_user_error(code, err, needle)
        assert all(line.startswith(f"error: {path}") for line in lines), err
        assert not out.exists()


# ---------------------------------------------------------------------------------------------
# Regressions found by the fuzzers and by hand, kept as plain cases

REGRESSIONS = [
    # (file text, text the error must contain)
    ("population:\n  regime: [pretraining]\n", "population.regime"),  # was TypeError: unhashable type
    ("population:\n  regime: {a: 1}\n", "population.regime"),
    ("population:\n  default_range: 5\n", "population.default_range"),  # was TypeError: not iterable
    (alias_bomb(9, 9), "expands to more than"),  # hung for minutes (exponential repr/validation)
    ("zz: &a [*a]\n", "expands to more than"),
]


@pytest.mark.parametrize("text,needle", REGRESSIONS)
def test_regressions(tmp_path, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, _, err = call("run", str(path), "--out", str(tmp_path / "out"))
    assert_user_error(code, err, needle, str(path))
    assert not (tmp_path / "out").exists()


def test_a_run_that_fails_after_validation_leaves_no_output_folder(tmp_path):
    # valid schema, refused when the population is drawn (more men than UCI Adult holds)
    out = tmp_path / "new" / "deeper"
    code, _, err = call("run", str(SCENARIOS / "eutopia.yaml"), "--set", "population.n_male=40000",
                        "--out", str(out), "--quiet")
    assert_user_error(code, err, "sample_with_replacement")
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"  # an output root that existed before the run is left as it was
    (kept / "other").mkdir(parents=True)
    code, _, err = call("run", str(SCENARIOS / "eutopia.yaml"), "--set", "population.n_male=40000",
                        "--out", str(kept / "sub"), "--quiet")
    assert code == 2 and sorted(p.name for p in kept.iterdir()) == ["other"]


# ---------------------------------------------------------------------------------------------
# Untrusted files are data only


def test_yaml_python_tags_are_refused_not_executed(tmp_path):
    mark = tmp_path / "executed"
    for tag in ("!!python/object/apply:os.system", "!!python/object/new:os.system", "!!python/name:os.system"):
        path = tmp_path / "evil.yaml"
        path.write_text(f"name: {tag} ['touch {mark}']\n")
        code, _, err = call("validate", str(path))
        assert_user_error(code, err, "is not allowed (standard tags only)", "python/")
        assert not mark.exists()


def test_output_paths_cannot_escape_the_output_root(tmp_path):
    from abm.errors import UserError
    from abm.runner import safe_child

    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "link").symlink_to(outside)
    assert safe_child(root, "run-a") == root / "run-a"
    for name in ("../escape", "link", "link/run", "/etc", "a/../../b"):
        with pytest.raises(UserError, match="escapes the output root"):
            safe_child(root, name)
    # names that reach the file system are never path steps: scenario and study names are patterns
    code, _, err = call("validate", str(SCENARIOS / "eutopia.yaml"), "--set", "name=../x")
    assert_user_error(code, err, "name")


def test_policies_only_from_the_registry(tmp_path):
    for name in ("os.system", "policies.heuristics.ApproveAll", "__import__", "abm.cli:main"):
        code, _, err = call("validate", str(SCENARIOS / "eutopia.yaml"), "--set", f"policy.name={name}")
        assert_user_error(code, err, f"unknown policy {name!r}")


class Boom:
    """Unpickling this creates a file: proof that a loader ran code from the file."""

    def __init__(self, mark: str):
        self.mark = mark

    def __reduce__(self):
        return (Path.touch, (Path(self.mark),))


def test_lender_checkpoints_load_weights_only_and_validate_their_config(tmp_path):
    import torch

    from abm.errors import UserError
    from policies.torch_common import CHECKPOINT_FORMAT, read_checkpoint

    mark = tmp_path / "executed"
    evil = tmp_path / "evil.pt"
    torch.save({"format": CHECKPOINT_FORMAT, "config": "{}", "weights": {}, "optimizer": {}, "extra": Boom(str(mark))},
               evil)
    with pytest.raises(UserError, match="not a readable torch checkpoint"):
        read_checkpoint(evil)
    assert not mark.exists()
    bad_config = tmp_path / "bad.pt"
    torch.save({"format": CHECKPOINT_FORMAT, "config": "{not json", "weights": {}, "optimizer": {}, "extra": {}},
               bad_config)
    with pytest.raises(UserError, match="config is missing or not JSON"):
        read_checkpoint(bad_config)
    foreign = tmp_path / "foreign.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, foreign)
    with pytest.raises(UserError, match="not an abm lender checkpoint"):
        read_checkpoint(foreign)
    (tmp_path / "junk.pt").write_bytes(b"\x80\x04not a zip")
    with pytest.raises(UserError, match="not a readable"):
        read_checkpoint(tmp_path / "junk.pt")


def test_deep_lender_model_zip_is_never_unpickled(tmp_path):
    """SB3's ``Algorithm.load`` cloudpickles the zip's class parameters; the deep lenders load
    only the weights, so a scenario's ``policy.model_path`` cannot run code."""
    import base64

    import cloudpickle

    from abm.config import load_scenario
    from abm.errors import UserError
    from abm.gym import AbmEnv
    from abm.runner import execute

    mark = tmp_path / "executed"
    folder = tmp_path / "policy"
    folder.mkdir()
    payload = base64.b64encode(cloudpickle.dumps(Boom(str(mark)))).decode()
    data = {"policy_class": {":type:": "<class 'type'>", ":serialized:": payload},
            "observation_space": {":type:": "<class 'x'>", ":serialized:": payload}, "num_timesteps": 7}
    with zipfile.ZipFile(folder / "model.zip", "w") as archive:
        archive.writestr("data", json.dumps(data))
    sc = load_scenario(SCENARIOS / "lending-credit.yaml", ["population.size=50", "episodes.count=1",
                                                            "policy.name=ppo", f"policy.model_path={folder}"])
    fields = list(AbmEnv(sc).obs_fields)  # a config that passes every check: the zip itself is reached
    (folder / "config.json").write_text(json.dumps({"policy": "ppo", "obs_fields": fields, "extra": {}}))
    with pytest.raises(UserError, match="weights do not fit"):
        execute(sc)
    assert not mark.exists(), "the model's pickled class parameters were executed"
