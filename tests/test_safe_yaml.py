"""``abm.safe_yaml``: one bounded, data-only YAML loader; every refusal one line naming the file.

Hand-written cases per class of bad input (size, depth, duplicate keys, huge integers, NUL,
non-standard tags, anchors/aliases, empty documents, bad values), the ``--set`` value loader,
and Hypothesis fuzzing: for arbitrary text (raw and assembled from YAML fragments) and bytes,
``load`` returns a value or raises ``UserError`` with a one-line message naming the source,
never another exception.
"""

from __future__ import annotations

import datetime
import os
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings, strategies as st

from abm import safe_yaml
from abm.config import read_yaml
from abm.errors import UserError
from abm.safe_yaml import MAX_BYTES, MAX_DEPTH, MAX_INT_DIGITS, MAX_VALUES, load, load_override_value

ROOT = Path(__file__).resolve().parents[1]
TRIED: Counter = Counter()  # inputs per class, printed at the end (pytest -s)
REFUSED: Counter = Counter()


def refused(text, needle: str, *, source: str = "s.yaml", cls: str, **kw) -> str:
    """``load(text)`` must raise one UserError line that starts with ``source: `` and contains ``needle``."""
    TRIED[cls] += 1
    with pytest.raises(UserError) as info:
        load(text, source=source, **kw)
    message = str(info.value)
    assert len(message.splitlines()) == 1, message
    assert message.startswith(f"{source}: "), message
    assert needle in message, message
    REFUSED[cls] += 1
    return message


def accepted(text, expected, *, cls: str, **kw):
    TRIED[cls] += 1
    assert load(text, source="s.yaml", **kw) == expected


# -- the project's own files load exactly as yaml.safe_load reads them ----------------------
def test_every_scenario_and_study_file_loads_as_before():
    files = sorted((ROOT / "scenarios").rglob("*.yaml"))
    assert len(files) >= 10
    for path in files:
        TRIED["project files (same as yaml.safe_load)"] += 1
        # as abm.config.read_yaml reads them: aliases allowed within the value bound
        assert read_yaml(path) == yaml.safe_load(path.read_text()), path


# -- size -----------------------------------------------------------------------------------
def refused_file(path, needle: str, cls: str) -> str:
    """``read_yaml(path)``, how every file is read, must raise one UserError line naming the file."""
    TRIED[cls] += 1
    with pytest.raises(UserError) as info:
        read_yaml(path)
    message = str(info.value)
    assert len(message.splitlines()) == 1 and message.startswith(f"{path}: ") and needle in message, message
    REFUSED[cls] += 1
    return message


def test_size_limit_is_checked_before_reading(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as handle:  # sparse: 10 GB that take no disk and must not be read
        handle.truncate(10_000_000_000)
    message = refused_file(big, "", cls="size")
    assert message == f"{big}: 10,000,000,000 bytes, more than the 5,000,000 allowed"
    refused("a: " + "x" * MAX_BYTES, "more than the 5,000,000 allowed", cls="size")
    refused(("a: " + "é" * (MAX_BYTES // 2)).encode(), "more than the 5,000,000 allowed", cls="size")
    edge = tmp_path / "edge.yaml"
    edge.write_bytes(b"a: " + b"x" * (MAX_BYTES - 3))  # exactly the limit: read
    TRIED["size"] += 1
    assert len(read_yaml(edge)["a"]) == MAX_BYTES - 3


def test_files_that_cannot_be_read(tmp_path):
    refused_file(tmp_path / "missing.yaml", "no such file", cls="unreadable files")
    refused_file(tmp_path, "is a folder, not a file", cls="unreadable files")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    refused_file(fifo, "is a FIFO, not a file", cls="unreadable files")  # never blocks on open()
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: caf\xe9\n".encode("latin-1"))
    refused_file(bad, "not UTF-8 text (byte 9)", cls="unreadable files")
    refused(42, "expected text or bytes, got int", cls="unreadable files")
    refused(bad, "expected text or bytes, got PosixPath", cls="unreadable files")  # a file is read_yaml's


# -- depth ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
    "[" * 1_000_000,  # unbalanced and far beyond the C stack: refused at level 51, no RecursionError
    "{a: " * 100_000,
    "".join(" " * i + f"k{i}:\n" for i in range(200)),  # block mappings, indented
    "".join(" " * i + "- \n" for i in range(0, 400, 2)) + " " * 400 + "- 1\n",
    "a: " + "[{b: " * 40 + "1" + "}]" * 40,
])
def test_nesting_deeper_than_the_limit_is_refused_without_recursion(text):
    refused(text, f"nested more than {MAX_DEPTH} levels deep", cls="depth")


def test_nesting_at_the_limit_is_read():
    value = load("[" * MAX_DEPTH + "]" * MAX_DEPTH, source="s")
    for _ in range(MAX_DEPTH - 1):
        value = value[0]
    TRIED["depth"] += 1
    assert value == []
    message = refused("a:\n  b:\n    " + "[" * MAX_DEPTH + "]" * MAX_DEPTH, "nested more", cls="depth")
    assert message == "s.yaml: a.b[0].…[0][0][0]: nested more than 50 levels deep (line 3)"


# -- duplicate keys -------------------------------------------------------------------------
@pytest.mark.parametrize("text,message", [
    ("seed: 1\nseed: 2\n", "s.yaml: seed: duplicate key (line 2; first at line 1)"),
    ("population:\n  n_male: 100\n  n_female: 5\n  n_male: 200\n",
     "s.yaml: population.n_male: duplicate key (line 4; first at line 2)"),
    ("grid:\n  - {a: 1, a: 2}\n", "s.yaml: grid[0].a: duplicate key (line 2; first at line 2)"),
    ("1: a\ntrue: b\n", "s.yaml: true: duplicate key (line 2; first at line 1)"),  # 1 == True in Python
    ("'x': 1\nx: 2\n", "s.yaml: x: duplicate key (line 2; first at line 1)"),
    ("0x10: a\n16: b\n", "s.yaml: 16: duplicate key (line 2; first at line 1)"),
    ("!!set {a, b, a}\n", "s.yaml: a: duplicate key (line 1; first at line 1)"),
    ('"a\\nb": 1\n"a\\nb": 2\n', "s.yaml: a\\nb: duplicate key (line 2; first at line 1)"),
])
def test_duplicate_keys_are_refused_with_key_and_lines(text, message):
    assert refused(text, "duplicate key", cls="duplicate keys") == message


def test_keys_that_are_collections_and_merge_keys():
    refused("? [a, b]\n: 1\n", "a mapping key must be a plain value", cls="duplicate keys")
    refused("? {a: 1}\n: 1\n", "a mapping key must be a plain value", cls="duplicate keys")
    accepted("<<: {a: 1, b: 2}\nb: 3\n", {"a": 1, "b": 3}, cls="duplicate keys")  # a merge overridden: not a duplicate
    accepted("a: <<\n", {"a": "<<"}, cls="duplicate keys")  # was ConstructorError (no constructor for merge)


# -- huge integers --------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "seed: " + "9" * (MAX_INT_DIGITS + 1),
    "seed: " + "9" * 5_000,  # int() alone raises ValueError (Python's 4,300-digit limit)
    "seed: -" + "1" * 100_000,
    "seed: 0x" + "f" * 2_000,
    "seed: 0b" + "1" * 5_000,
    "seed: 0" + "7" * 5_000,  # octal (YAML 1.1)
    "seed: 1_" + "0" * 5_000,
    "seed: !!int " + "1" * 5_000,
    "seed: 1" + ":30" * 1_000,  # sexagesimal (YAML 1.1)
    "[" + "9" * 5_000 + "]",
])
def test_integers_with_too_many_digits_are_refused(text):
    message = refused(text, f"more than the {MAX_INT_DIGITS:,} allowed", cls="huge integers")
    assert "integer of " in message and "(line 1)" in message


def test_integers_within_the_limit_and_long_floats_are_read():
    accepted("seed: " + "9" * MAX_INT_DIGITS, {"seed": int("9" * MAX_INT_DIGITS)}, cls="huge integers")
    accepted("x: 1." + "5" * 5_000, {"x": float("1." + "5" * 5_000)}, cls="huge integers")
    accepted("x: 1.0e+99999", {"x": float("inf")}, cls="huge integers")  # the schema refuses inf, not the loader


# -- NUL ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,where", [
    ('name: "a\\0b"\n', "s.yaml: name: text contains a NUL character (line 1)"),
    ('name: "a\\x00b"\n', "s.yaml: name: text contains a NUL character (line 1)"),
    ('name: "\\u0000"\n', "s.yaml: name: text contains a NUL character (line 1)"),
    ('"a\\0": 1\n', "s.yaml: text contains a NUL character (line 1)"),  # in a key
    ('l: ["ok", "b\\0"]\n', "s.yaml: l[1]: text contains a NUL character (line 1)"),
    ("name: a\x00b\n", "s.yaml: text contains a NUL character (line 1)"),  # a raw NUL byte in the file
    ("a: 1\nb: |\n  x\x00\n", "s.yaml: text contains a NUL character (line 3)"),
])
def test_nul_in_strings_is_refused(text, where):
    assert refused(text, "NUL", cls="NUL") == where


# -- tags -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text,tag", [
    ("a: !!python/object/apply:os.system ['touch /tmp/x']", "'!!python/object/apply:os.system'"),
    ("a: !!python/name:os.system", "'!!python/name:os.system'"),
    ("a: !!python/object/new:dict {}", "'!!python/object/new:dict'"),
    ("a: !!python/tuple [1, 2]", "'!!python/tuple'"),
    ("a: !foo 1", "'!foo'"),
    ("a: !foo [1]", "'!foo'"),
    ("a: !<tag:evil.example,2024:x> 1", "'tag:evil.example,2024:x'"),
    ("%TAG ! tag:evil.example,2000:\n--- !foo 1", "'tag:evil.example,2000:foo'"),
    ("a: !!int [1]", "'!!int'"),  # a standard scalar tag on a collection
    ("a: !!value =", "'!!value'"),
    ("a: !!merge x", "'!!merge'"),
])
def test_non_standard_tags_are_refused_and_never_run(text, tag):
    message = refused(text, f"YAML tag {tag} is not allowed (standard tags only)", cls="tags")
    assert message.startswith(("s.yaml: a: YAML tag ", "s.yaml: YAML tag "))


def test_standard_tags_are_read():
    for text, value in (("a: !!str 1", {"a": "1"}), ("a: !!int '7'", {"a": 7}), ("a: !!float 1", {"a": 1.0}),
                        ("a: !!bool yes", {"a": True}), ("a: !!null ''", {"a": None}),
                        ("a: !!binary aGk=", {"a": b"hi"}), ("a: 2001-12-14", {"a": datetime.date(2001, 12, 14)}),
                        ("a: !!set {x, y}", {"a": {"x", "y"}}), ("a: !!omap [{x: 1}]", {"a": [("x", 1)]}),
                        ("a: !<tag:yaml.org,2002:str> 1", {"a": "1"}), ("a: =", {"a": "="}), ("a: ! x", {"a": "x"})):
        accepted(text, value, cls="tags")


@pytest.mark.parametrize("text,needle", [
    ("a: !!bool maybe", "s.yaml: a: not a valid bool: 'maybe' (line 1)"),  # was KeyError
    ("a: !!int x", "s.yaml: a: not a valid int: 'x'"),  # was ValueError
    ("a: !!float x", "s.yaml: a: not a valid float: 'x'"),
    ("a: 2001-13-45", "s.yaml: a: not a valid timestamp: '2001-13-45' (month must be in 1..12) (line 1)"),  # was ValueError
    ("a: !!timestamp x", "s.yaml: a: not a valid timestamp: 'x'"),  # was AttributeError
    ("a: !!binary zz", "s.yaml: a: not a valid binary: 'zz' (failed to decode base64 data"),
    ("a: !!set [1]", "s.yaml: invalid YAML at line 1, column 4: expected a mapping node, but found sequence"),
    ("a: !!omap {x: 1}", "s.yaml: invalid YAML at line 1, column 4: expected a sequence, but found mapping"),
    ("<<: 1", "s.yaml: invalid YAML at line 1, column 5: expected a mapping or list of mappings for merging"),
])
def test_bad_values_of_standard_tags_are_one_line_user_errors(text, needle):
    refused(text, needle, cls="bad values")


# -- anchors and aliases --------------------------------------------------------------------
def alias_bomb(levels: int, width: int) -> str:
    lines = [f"a0: &a0 [{','.join(['1'] * width)}]"]
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text,message", [
    ("a: &x 1\nb: *x\n", "s.yaml: a: YAML anchor &x refused: anchors and aliases are not supported (a few lines "
                         "can expand to billions of values); write the value out (line 1)"),
    ("b: *x\n", "s.yaml: b: YAML alias *x refused: anchors and aliases are not supported"),
    ("zz: &a [*a]\n", "s.yaml: zz: YAML anchor &a refused"),
    (alias_bomb(9, 9), "s.yaml: a0: YAML anchor &a0 refused"),
    ("base: &b {x: 1}\nother:\n  <<: *b\n", "s.yaml: base: YAML anchor &b refused"),
    ("- &a\n- 1\n", "s.yaml: [0]: YAML anchor &a refused"),
])
def test_anchors_and_aliases_are_refused(text, message):
    assert refused(text, "refused", cls="anchors and aliases").startswith(message)


def test_allow_aliases_keeps_abm_config_bound_and_message():
    accepted("a: &x [1, 2]\nb: *x\n", {"a": [1, 2], "b": [1, 2]}, cls="anchors and aliases", allow_aliases=True)
    for text in (alias_bomb(9, 9), "zz: &a [*a]\n", "zz: &a {x: *a}\n"):
        assert refused(text, "expands", cls="anchors and aliases", allow_aliases=True) == (
            f"s.yaml: expands to more than {MAX_VALUES:,} values (YAML aliases repeating or containing themselves?)")
    refused("a: *nope\n", "found undefined alias", cls="anchors and aliases", allow_aliases=True)


def test_more_values_than_the_limit_are_refused():
    refused("[" + "1," * MAX_VALUES + "1]", f"more than {MAX_VALUES:,} values", cls="too many values")


# -- mappings required ----------------------------------------------------------------------
@pytest.mark.parametrize("text,message", [
    ("", "s.yaml: empty document (nothing but comments or blank lines); expected a mapping of sections"),
    ("\n\n   \n", "s.yaml: empty document"),
    ("# just a comment\n# and another\n", "s.yaml: empty document"),
    ("---\n...\n", "s.yaml: empty document"),
    ("~\n", "s.yaml: empty document"),
    ("{}\n", "s.yaml: empty mapping {}; expected a mapping of sections"),
    ("[1, 2]\n", "s.yaml: the top level must be a mapping of sections, got list"),
    ("just text\n", "s.yaml: the top level must be a mapping of sections, got str"),
    ("3\n", "s.yaml: the top level must be a mapping of sections, got int"),
])
def test_require_mapping_refuses_empty_and_non_mappings(text, message):
    assert refused(text, "", cls="empty or not a mapping", require_mapping=True).startswith(message)
    TRIED["empty or not a mapping"] += 1
    load(text, source="s.yaml")  # without the flag these are values (None, {}, a list, ...)


# -- broken syntax --------------------------------------------------------------------------
@pytest.mark.parametrize("text,message", [
    ("a: [1, 2\n", "s.yaml: invalid YAML at line 2, column 1: expected ',' or ']', but got '<stream end>'"),
    ("a: 1\n b: 2\n", "s.yaml: invalid YAML at line 2, column 3: mapping values are not allowed here"),
    ("a: 1\n---\nb: 2\n", "s.yaml: invalid YAML at line 2, column 1: but found another document"),
    ("a:\tb: c\n", "s.yaml: invalid YAML"),
    ("%YAML 2.0\n--- a\n", "s.yaml: invalid YAML at line 1, column 1: found incompatible YAML document"),
    ("a: \x01\n", "s.yaml: invalid YAML at line 1: unacceptable character #x0001 (special characters are not allowed)"),
    ("a: '\n", "s.yaml: invalid YAML"),
])
def test_broken_syntax_is_one_line(text, message):
    assert refused(text, "invalid YAML", cls="broken syntax").startswith(message)


def test_messages_stay_one_line_whatever_the_source_or_keys():
    TRIED["one line"] += 1
    with pytest.raises(UserError) as info:
        load('"x\\u2028y": {"k\\n": !foo 1}\n', source="we\nird.yaml")
    assert str(info.value) == "we\\nird.yaml: x\\u2028y.k\\n: YAML tag '!foo' is not allowed (standard tags only) (line 1)"
    REFUSED["one line"] += 1


# -- --set values ---------------------------------------------------------------------------
def test_override_values_parse_like_before_with_the_same_limits():
    from abm.config import parse_override

    for raw in ("0.1", "3", "true", "[a, b]", "{x: 1}", "", "  ", "a: b: c", "[1, 2", "=", "==", "x'y", "null",
                "'quoted'", "1e5", "2001-12-14", "é", "a\tb", "\x01"):
        TRIED["--set values (same as abm.config)"] += 1
        assert load_override_value(raw, field="k") == parse_override(f"k={raw}")[1], raw
    for raw, needle in (("!!python/name:os.system", "--set k: YAML tag '!!python/name:os.system' is not allowed"),
                        ("&a [1]", "--set k: YAML anchor &a refused"),
                        ("1" * 2_000, "--set k: integer of 2,000 digits, more than the 1,000 allowed"),
                        ("[" * 100, "--set k: [0][0][0].…[0][0][0]: nested more than 50 levels deep"),
                        ("{a: 1, a: 2}", "--set k: a: duplicate key (line 1; first at line 1)"),
                        ('"a\\0"', "--set k: text contains a NUL character"),
                        ("a\x00", "--set k: text contains a NUL character"),
                        ("x" * (MAX_BYTES + 1), "--set k: 5,000,001 bytes, more than the 5,000,000 allowed"),
                        ("2001-13-45", "--set k: not a valid timestamp")):
        TRIED["--set values refused"] += 1
        with pytest.raises(UserError) as info:
            load_override_value(raw, field="k")
        assert str(info.value).startswith(needle) and len(str(info.value).splitlines()) == 1, str(info.value)
        REFUSED["--set values refused"] += 1


# -- fuzzing ---------------------------------------------------------------------------------
FRAGMENTS = ["[", "]", "{", "}", ": ", ":", "- ", "-", "\t", "\n", "  ", "    ", "&a ", "*a", "&b ", "*b", "? ",
             "|", ">", "|-", "'", '"', "---\n", "...\n", "%YAML 1.1\n", "%TAG ! tag:x,2000:\n", "!!binary ",
             "!!str ", "!!int ", "!!float ", "!!bool ", "!!set ", "!!omap ", "!!timestamp ", "!!python/name:os.system ",
             "!foo ", "! ", "<<: ", "<<", "=", "~", "null", "yes", "0x1F", "0o17", "0b101", "1:30", "1_000", ".nan",
             "-.inf", "1e400", "2001-12-14", "2001-13-45", "2001-12-14T21:59:43.10-05:00", "9" * 1_200, "[" * 60,
             "]" * 60, "a", "seed", "population", "#", ",", "\\", "\\0", '"\\0"', '"\\x00"', '"\\u2028"', "\x00",
             "\x01", "\ufeff", "\x85", "\u2028", "é", "\ud800", "\U0001f600"]


@st.composite
def yamlish(draw):
    return "".join(draw(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), max_size=30)))


def _loads_or_one_line_error(text, cls: str, **kw) -> None:
    TRIED[cls] += 1
    try:
        load(text, source="fuzz.yaml", **kw)
    except UserError as exc:
        message = str(exc)
        assert len(message.splitlines()) == 1 and message.startswith("fuzz.yaml: "), message
        assert "cannot read as YAML (" not in message, message  # the safety net must stay unused
        REFUSED[cls] += 1


FUZZ = settings(max_examples=400, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(text=yamlish(), require=st.booleans(), aliases=st.booleans())
@example(text=alias_bomb(9, 9), require=True, aliases=True)
@example(text="zz: &a [*a]\n", require=False, aliases=True)
@example(text="[" * 100_000, require=False, aliases=False)
@example(text="a: !!bool maybe\nb: 2001-02-30\n", require=True, aliases=False)
def test_fuzz_yamlish_text_gives_a_value_or_one_user_error_line(text, require, aliases):
    _loads_or_one_line_error(text, "fuzz: YAML-ish text", require_mapping=require, allow_aliases=aliases)


@FUZZ
@given(text=st.text(max_size=200))
def test_fuzz_arbitrary_text(text):
    _loads_or_one_line_error(text, "fuzz: arbitrary text", require_mapping=True)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(data=st.binary(max_size=200))
def test_fuzz_arbitrary_bytes(data):
    _loads_or_one_line_error(data, "fuzz: arbitrary bytes")


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(text=st.one_of(yamlish(), st.text(max_size=100)))
def test_fuzz_override_values(text):
    TRIED["fuzz: --set values"] += 1
    try:
        load_override_value(text, field="a.b")
    except UserError as exc:
        message = str(exc)
        assert len(message.splitlines()) == 1 and message.startswith("--set a.b: "), message
        assert "cannot read as YAML (" not in message, message
        REFUSED["fuzz: --set values"] += 1


def test_zz_print_counts(capsys):
    """Inputs tried and refused per class (run with -s to see them)."""
    with capsys.disabled():
        print("\nsafe_yaml cases (tried / refused):")
        for cls in sorted(TRIED):
            print(f"  {cls}: {TRIED[cls]} / {REFUSED[cls]}")
    assert safe_yaml.MAX_BYTES == 5_000_000 and safe_yaml.MAX_DEPTH == 50
