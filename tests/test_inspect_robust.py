"""``abm inspect`` on corrupted and odd run folders: exit 2, one line naming the file, no traceback.

A small real run is copied and damaged one way per case: truncated and overwritten Parquet
files, a text file named ``events.parquet``, string agent ids, zero-row episodes, no ``group``
column, a directory where a file should be, broken ``summary.json``; ``--limit -1``; a study
folder given where a run folder is expected. Representative cases go through the console script
(the ``cli`` fixture); the byte-level sweep runs ``abm.cli.main`` in-process (same code, faster).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import SCENARIOS

FILES = ("episodes.parquet", "agents.parquet", "events.parquet")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from abm.config import load_scenario
    from abm.runner import run_to_folder

    scenario = load_scenario(SCENARIOS / "eutopia.yaml", ["population.n_male=100", "population.n_female=100",
                                                          "episodes.count=2"])
    folder, _ = run_to_folder(scenario, tmp_path_factory.mktemp("inspect"))
    return folder


@pytest.fixture
def copy(run_dir, tmp_path):
    def make(name: str = "run") -> Path:
        target = tmp_path / name
        shutil.copytree(run_dir, target)
        return target

    return make


def _agent(folder: Path) -> int:
    """An applicant with events."""
    return int(pd.read_parquet(folder / "events.parquet")["agent_id"].iloc[0])


def one_line_error(res, *needles: str) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _write(frame: pd.DataFrame, path: Path) -> None:
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)


# -- through the console script -----------------------------------------------------------
def test_truncated_and_non_parquet_files_name_the_file(cli, copy):
    for name in FILES:
        folder = copy(f"trunc-{name}")
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: len(data) // 2])
        one_line_error(cli("inspect", str(folder), "--agent", str(_agent(copy(f"ok-{name}")))),
                       f"{folder / name}: unreadable run folder: not a Parquet file, or a damaged one")
    folder = copy("text-events")
    agent = _agent(folder)
    (folder / "events.parquet").write_text("time,agent_id\n1,2\n")
    one_line_error(cli("inspect", str(folder), "--agent", str(agent)), f"{folder / 'events.parquet'}: unreadable")
    res = cli("inspect", str(folder), "--group", "F")  # a group summary does not need the event log
    assert res.returncode == 0 and "group F" in res.stdout, res.stderr


def test_string_agent_ids_are_refused(cli, copy):
    folder = copy("str-agents")
    agents = pd.read_parquet(folder / "agents.parquet")
    agents["agent_id"] = "a" + agents["agent_id"].astype(str)
    _write(agents, folder / "agents.parquet")
    one_line_error(cli("inspect", str(folder), "--agent", "1"),
                   f"{folder / 'agents.parquet'}: agent_id is string, expected integers")
    folder = copy("str-events")
    events = pd.read_parquet(folder / "events.parquet")
    events["agent_id"] = events["agent_id"].astype(str)  # was: ArrowNotImplementedError from the filter
    _write(events, folder / "events.parquet")
    one_line_error(cli("inspect", str(folder), "--agent", "1"),
                   f"{folder / 'events.parquet'}: agent_id is string, expected integers")


def test_zero_row_episodes_and_agents_without_group(cli, copy):
    folder = copy("no-episodes")
    episodes = pd.read_parquet(folder / "episodes.parquet")
    _write(episodes.iloc[:0], folder / "episodes.parquet")  # was: IndexError in --group
    for args in (["--group", "F"], ["--agent", "1"]):
        one_line_error(cli("inspect", str(folder), *args), f"{folder / 'episodes.parquet'}: no episodes (0 rows)")
    folder = copy("no-group")
    agents = pd.read_parquet(folder / "agents.parquet")
    _write(agents.drop(columns="group"), folder / "agents.parquet")  # was: KeyError 'group'
    for args in (["--group", "F"], ["--agent", "1"]):
        one_line_error(cli("inspect", str(folder), *args), f"{folder / 'agents.parquet'}: no 'group' column (columns: agent_id, ")


def test_limit_must_not_be_negative(cli, run_dir):
    agent = _agent(run_dir)
    one_line_error(cli("inspect", str(run_dir), "--agent", str(agent), "--limit", "-1"),
                   "--limit: must be 0 or more, got -1")  # was: silently dropped the last event
    n = int((pd.read_parquet(run_dir / "events.parquet")["agent_id"] == agent).sum())
    res = cli("inspect", str(run_dir), "--agent", str(agent), "--limit", "0")
    assert res.returncode == 0 and f"first 0 of {n} events" in res.stdout, res.stderr
    res = cli("inspect", str(run_dir), "--agent", str(agent), "--limit", str(n))
    assert res.returncode == 0 and "use --limit" not in res.stdout and f"{n} events" in res.stdout


def test_a_study_folder_is_named_and_its_runs_listed(cli, run_dir, tmp_path):
    study = tmp_path / "study"
    (study / "runs").mkdir(parents=True)
    shutil.copytree(run_dir, study / "runs" / "approve_all-a-r0")
    (study / "runs" / "random-b-r0").mkdir()  # not finished
    (study / "manifest.json").write_text(json.dumps({"name": "s", "runs": [{"run_id": "approve_all-a-r0"},
                                                                          {"run_id": "random-b-r0"}]}))
    res = cli("inspect", str(study), "--agent", "1")
    line = one_line_error(res, f"{study}: a study folder (1 of 2 runs finished), not a run folder: inspect one of "
                               f"its runs in {study / 'runs'}/, e.g. `abm inspect {study / 'runs' / 'approve_all-a-r0'} "
                               "--agent 0`")
    assert "no summary.json" not in line
    assert res.stdout.splitlines() == [str(study / "runs" / "approve_all-a-r0"),
                                       f"{study / 'runs' / 'random-b-r0'}  (not finished)"]
    (study / "manifest.json").write_text("{broken")  # a damaged manifest: the runs/ folder still tells
    res = cli("inspect", str(study), "--group", "F")
    one_line_error(res, "a study folder (1 of 2 runs finished)")
    res = cli("inspect", str(study / "runs" / "approve_all-a-r0"), "--group", "F")
    assert res.returncode == 0 and "group F" in res.stdout


# -- in-process: many more cases, same entry point -----------------------------------------
def call(*args: str) -> tuple[int, str, str]:
    from abm.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["abm", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exc:
                code = exc.code or 0
    finally:
        sys.argv = argv
    return code, out.getvalue(), err.getvalue()


def test_odd_folders_each_give_one_line_naming_the_file(copy):
    cases = []

    def case(label, damage, needle, *args):
        folder = copy(label)
        agent = _agent(folder)
        damage(folder)
        cases.append((label, folder, needle, args or ("--agent", str(agent))))

    def rewrite(name, fn):
        return lambda f: _write(fn(pd.read_parquet(f / name)), f / name)

    case("summary-not-json", lambda f: (f / "summary.json").write_text("{"), "summary.json: unreadable")
    case("summary-list", lambda f: (f / "summary.json").write_text("[1]"), "summary.json: expected a JSON object, got list")
    case("summary-latin1", lambda f: (f / "summary.json").write_bytes(b'{"a": "\xe9"}'), "summary.json: unreadable")
    case("no-episodes-file", lambda f: (f / "episodes.parquet").unlink(), "episodes.parquet: missing")
    case("agents-is-dir", lambda f: ((f / "agents.parquet").unlink(), (f / "agents.parquet").mkdir()),
         "agents.parquet: not a file")
    case("events-is-dir", lambda f: ((f / "events.parquet").unlink(), (f / "events.parquet").mkdir()),
         "events.parquet: not a file")
    case("empty-events", lambda f: (f / "events.parquet").write_bytes(b""), "events.parquet: unreadable run folder")
    case("no-agents-rows", rewrite("agents.parquet", lambda a: a.iloc[:0]), "agents.parquet: no applicants (0 rows)")
    case("no-agent-id", rewrite("agents.parquet", lambda a: a.drop(columns="agent_id")), "agents.parquet: no 'agent_id'")
    case("shuffled-ids", rewrite("agents.parquet", lambda a: a.iloc[::-1]), "agents.parquet: agent_id must be 0..199 in row order")
    case("float-ids", rewrite("agents.parquet", lambda a: a.assign(agent_id=a["agent_id"] + 0.5)),
         "agents.parquet: agent_id is float64, expected integers")
    case("events-no-kind", rewrite("events.parquet", lambda e: e.drop(columns="kind")), "events.parquet: no column kind")
    case("events-str-time", rewrite("events.parquet", lambda e: e.assign(time=e["time"].astype(str))),
         "events.parquet: time is string, expected numbers")
    case("episodes-no-time", rewrite("episodes.parquet", lambda e: e.drop(columns="time")),
         "episodes.parquet: no numeric 'time' column")
    for label, folder, needle, args in cases:
        code, _, err = call("inspect", str(folder), *args)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (label, err)
        assert str(folder) in err and needle in err, (label, err)
    assert len(cases) == 14


def test_byte_level_damage_never_tracebacks(copy, capsys):
    """Every file truncated at 20 points, overwritten with 32 bytes of 0xA5 and zeroed (16 bytes) at
    20 points each: exit 2 with one line naming that file, or exit 0 where the damage hit only
    values Parquet cannot tell from good ones (no page checksums in the files the runner writes)."""
    folder = copy("bytes")
    agent = _agent(folder)
    tally: Counter = Counter()
    for name in FILES:
        path = folder / name
        good = path.read_bytes()
        for k in range(20):
            at = len(good) * k // 20
            for kind, data in (("truncated", good[:at]), ("overwritten", good[:at] + b"\xa5" * 32 + good[at + 32:]),
                               ("zeroed", good[:at] + bytes(16) + good[at + 16:])):
                path.write_bytes(data[:len(good)])
                code, _, err = call("inspect", str(folder), "--agent", str(agent))
                assert code in (0, 2), (name, kind, at, err)
                if code == 2:
                    assert len(err.strip().splitlines()) == 1 and f"{path}: " in err, (name, kind, at, err)
                tally[(kind, code)] += 1
        path.write_bytes(good)
    assert tally[("truncated", 2)] == 60  # a truncated file is always refused
    assert sum(tally.values()) == 180
    with capsys.disabled():
        print(f"\ninspect byte damage (kind, exit code): {dict(sorted(tally.items()))}")
