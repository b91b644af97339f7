"""The seed-002 helper scripts of benchmarks/: seed002_budget_stats.py (Welch tests between methods
of a study, --pool joining another study's runs), training_curve_blocks.py (a training curve in
blocks) and bisim_cost_blocks.py (a full Bisimulator's CPU time per block); bad input is refused
in one line."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "seed002_budget_stats.py"


def study(folder: Path, name: str, methods: dict[str, list[float]]) -> Path:
    """A study.parquet with two episodes per run; the last one carries ``cumulative_return``."""
    rows = []
    for policy, values in methods.items():
        for r, value in enumerate(values):
            for episode in (0, 1):
                rows.append({"run_id": f"{policy}-r{r}", "episode": episode, "group": name,
                             "policy": policy, "seed": r, "cumulative_return": value if episode else 0.0,
                             "recall_gap": 0.1 * r})
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(folder / "study.parquet")
    return folder


def script(path: Path, *args: str) -> subprocess.CompletedProcess:
    """``python PATH ARGS`` in this process (no interpreter start-up: these scripts parse their
    arguments and read tables; the ones that train run in a subprocess below): exit code and
    output as the command would give them."""
    import contextlib
    import io
    import runpy

    out, err, code = io.StringIO(), io.StringIO(), 0
    argv, path_before = sys.argv, list(sys.path)
    sys.argv, sys.path = [str(path), *args], [str(path.parent), *sys.path]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            err.write(exc.code + "\n")
    finally:
        sys.argv, sys.path[:] = argv, path_before
    return subprocess.CompletedProcess(sys.argv, code, out.getvalue(), err.getvalue())


def stats(*args: str) -> subprocess.CompletedProcess:
    return script(SCRIPT, *args)


def test_pool_joins_another_studys_runs_to_the_first_folders(tmp_path):
    a = study(tmp_path / "a", "table1-a", {"ppo(backend=lean)": [10.0, 11.0, 12.0]})
    b = study(tmp_path / "b", "table1-b", {"bisim_dqn(variant=full)": [20.0, 21.0, 23.0],
                                          "bisim_dqn(variant=reward_only)": [5.0, 6.0, 7.0]})
    alone = stats(str(a), "ppo,bisim_dqn_full", "--metrics", "cumulative_return")
    assert alone.returncode == 0, alone.stderr
    assert "Welch" not in alone.stdout  # the other method is not in the first study
    done = stats(str(a), "ppo,bisim_dqn_full", "bisim_dqn_full,bisim_dqn", "--metrics", "cumulative_return",
                 "--pool", str(b))
    assert done.returncode == 0, done.stderr
    assert "## table1-a" in done.stdout and "table1-b" not in done.stdout  # pooled under the first group
    first, second = [line for line in done.stdout.splitlines() if "Welch" in line]
    assert "ppo 11 (n=3) - bisim_dqn_full 21.33 (n=3) = -10.33" in first
    assert "bisim_dqn_full 21.33 (n=3) - bisim_dqn 6 (n=3) = +15.33" in second
    p = float(first.split("Welch p = ")[1].split(";")[0])
    assert 0 < p < 0.01


def ledger(path: Path, runs: dict[str, tuple[str, float, str]]) -> Path:
    """A ledger CSV as study_ledger.py writes it: run_id -> (policy, cumulative_return, digest)."""
    rows = [{"run_id": run_id, "config_id": run_id.split("-")[1], "config": policy,
             "group": "t", "groups": "t", "policy": policy, "objective": "none", "replicate": r, "seed": r,
             "episode": 9, "eval_episodes": 1, "cumulative_return": value, "recall_gap": 0.0, "wall_s": 1.0,
             "cpu_s": 1.0, "load_1m": 0.0, "started": "2026-12-05T00:00:00Z", "host": "h", "backend": "b",
             "machine": "m", "code": "c", "episodes_sha256": digest}
            for r, (run_id, (policy, value, digest)) in enumerate(runs.items())]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_a_run_in_the_first_source_and_a_pool_counts_once(tmp_path):
    """A ledger that copied another's rows (table5-elbert-alpha.csv holds table5.csv's alpha = 2e5
    runs) pooled with it: each run is one seed, not two."""
    base = {f"ppo-aa-r{r}": ("ppo(backend=lean)", v, f"d{r}") for r, v in enumerate([10.0, 12.0, 14.0])}
    other = {f"dqn-bb-r{r}": ("dqn(backend=lean)", v, f"e{r}") for r, v in enumerate([1.0, 2.0, 4.0])}
    first = ledger(tmp_path / "first.csv", {**base, **other})
    pool = ledger(tmp_path / "pool.csv", base)
    done = stats(str(first), "ppo,dqn", "--metrics", "cumulative_return", "--pool", str(pool))
    assert done.returncode == 0, done.stderr
    assert "ppo 12 (n=3) - dqn 2.333 (n=3)" in done.stdout
    assert "per seed ppo [10.0, 12.0, 14.0]," in done.stdout


def test_two_computations_of_one_run_are_refused_in_one_line(tmp_path):
    first = ledger(tmp_path / "first.csv", {"ppo-aa-r0": ("ppo(backend=lean)", 10.0, "d0"),
                                            "ppo-aa-r1": ("ppo(backend=lean)", 11.0, "d1")})
    pool = ledger(tmp_path / "pool.csv", {"ppo-aa-r1": ("ppo(backend=lean)", 11.5, "OTHER")})
    done = stats(str(first), "ppo,ppo", "--metrics", "cumulative_return", "--pool", str(pool))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("--pool: run ppo-aa-r1 is in more than one source with different episodes digests")


def test_recall_mean_and_sd_over_many_groups_are_table_5s_columns(tmp_path):
    """With more than two groups, recall_mean / recall_sd are the mean and population SD (ddof 0)
    of the groups' recalls, as report/seed_tables.md's Recall Mean / Recall SD."""
    rows = []
    for policy, recalls in {"ppo": [[1.0, 0.5, 0.0], [1.0, 1.0, 0.4]], "elbert_po": [[1.0] * 3, [1.0, 1.0, 0.7]]}.items():
        for r, values in enumerate(recalls):
            rows.append({"run_id": f"{policy}-abc-r{r}", "episode": 0, "group": "table5", "policy": policy,
                         "seed": r, **{f"recall_G{k + 1}": v for k, v in enumerate(values)}})
    folder = tmp_path / "s"
    folder.mkdir()
    pd.DataFrame(rows).to_parquet(folder / "study.parquet")
    done = stats(str(folder), "ppo,elbert_po", "--metrics", "recall_mean,recall_sd")
    assert done.returncode == 0, done.stderr
    mean, sd = [line for line in done.stdout.splitlines() if "Welch" in line]
    assert "recall_mean: ppo 0.65 (n=2) - elbert_po 0.95 (n=2)" in mean
    assert "per seed ppo [0.5, 0.8]" in mean
    assert "per seed ppo [0.408, 0.283], elbert_po [0.0, 0.141]" in sd


def test_label_tells_apart_configurations_of_one_method_by_a_policy_parameter(tmp_path):
    folder = study(tmp_path / "s", "table5", {"elbert_po(backend=lean)": [1.0, 2.0, 3.0],
                                             "elbert_po(alpha=20000,backend=lean)": [5.0, 6.0, 7.0],
                                             "elbert_po(alpha=2000.0,backend=lean)": [9.0, 9.5, 10.0]})
    done = stats(str(folder), "elbert_po[alpha=20000],elbert_po", "elbert_po[alpha=2000.0],elbert_po[alpha=20000]",
                 "--metrics", "cumulative_return", "--label", "alpha")
    assert done.returncode == 0, done.stderr
    assert "methods ['elbert_po', 'elbert_po[alpha=2000.0]', 'elbert_po[alpha=20000]']" in done.stdout
    first, second = [line for line in done.stdout.splitlines() if "Welch" in line]
    assert "elbert_po[alpha=20000] 6 (n=3) - elbert_po 2 (n=3) = +4" in first
    assert "elbert_po[alpha=2000.0] 9.5 (n=3) - elbert_po[alpha=20000] 6 (n=3) = +3.5" in second
    unlabelled = stats(str(folder), "elbert_po,elbert_po", "--metrics", "cumulative_return")
    assert "methods ['elbert_po']" in unlabelled.stdout  # without --label the three are one method


@pytest.mark.parametrize("value, message", [
    ("Alpha!", "error: argument --label: 'Alpha!' is not a policy parameter name"),
    ("beta_smooth", "--label beta_smooth: no run's policy sets beta_smooth (policies: ppo(backend=lean))")])
def test_a_bad_label_is_refused_in_one_line(tmp_path, value, message):
    folder = study(tmp_path / "s", "t", {"ppo(backend=lean)": [1.0, 2.0]})
    done = stats(str(folder), "ppo,ppo", "--label", value)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.strip().startswith(message), done.stderr


@pytest.mark.parametrize("where", ["first", "pool"])
def test_a_folder_without_study_parquet_exits_with_one_line(tmp_path, where):
    good = study(tmp_path / "good", "g", {"ppo(backend=lean)": [1.0, 2.0]})
    missing = tmp_path / "nothing"
    args = [str(missing), "ppo,dqn"] if where == "first" else [str(good), "ppo,dqn", "--pool", str(missing)]
    done = stats(*args)
    assert done.returncode == 2
    assert done.stderr.strip() == f"{missing}: no study.parquet (render it with: abm report {missing})"


# -- benchmarks/training_curve_blocks.py ---------------------------------------------------------
CURVE = SCRIPT.parent / "training_curve_blocks.py"


def curve_run(folder: Path, n: int = 100) -> Path:
    """A run folder whose policy/training.csv has ``n`` episodes: G1 approved in the first half
    (5 of 10 applications), nobody in the second; returns 1.0 then -1.0."""
    rows = [{"world": 0, "gym_episode": 0, "episode": e, "return": 1.0 if e < n // 2 else -1.0,
             "applications_G1": 10, "approvals_G1": 5 if e < n // 2 else 0, "applications_G2": 4, "approvals_G2": 4}
            for e in range(n)]
    (folder / "policy").mkdir(parents=True)
    pd.DataFrame(rows).to_csv(folder / "policy" / "training.csv", index=False)
    return folder


def test_training_curve_blocks_split_by_share_of_training(tmp_path):
    run = curve_run(tmp_path / "run")
    done = script(CURVE, str(run), "--edges", "0,0.5,0.75,1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["block", "episodes", "return", "approve_G1", "approve_G2"]
    assert lines[2].split() == ["0%-50%", "50", "1.000", "0.500", "1.000"]
    assert lines[3].split() == ["50%-75%", "25", "-1.000", "0.000", "1.000"]


@pytest.mark.parametrize("args, message", [
    (["--edges", "0,x"], "--edges: comma-separated numbers"),
    (["--edges", "0.5,0.2"], "--edges: at least two increasing numbers"),
    (["--edges", "1"], "--edges: at least two increasing numbers"),
])
def test_training_curve_blocks_refuse_bad_edges_in_one_line(tmp_path, args, message):
    run = curve_run(tmp_path / "run")
    done = script(CURVE, str(run), *args)
    assert done.returncode == 2 and done.stderr.startswith(message) and len(done.stderr.strip().splitlines()) == 1


def test_training_curve_blocks_name_a_folder_without_a_curve(tmp_path):
    done = script(CURVE, str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip() == f"{tmp_path / 'policy' / 'training.csv'}: no training curve to read (FileNotFoundError)"


# -- benchmarks/bisim_cost_blocks.py -------------------------------------------------------------
COST = SCRIPT.parent / "bisim_cost_blocks.py"


def test_bisim_cost_blocks_print_one_line_per_block():
    done = subprocess.run([sys.executable, str(COST), "--decisions", "2048", "--block", "512", "--stop-after", "1024",
                           "--set", "policy.dynamics_iterations=2", "--set", "population.size=200"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(" decisions:")[0].strip() for line in lines] == ["512", "1024"]  # stopped after 1,024
    assert all("CPU-s, gradient steps" in line and "distinct observations" in line for line in lines)


@pytest.mark.parametrize("args, message", [
    (["--block", "0"], "--block: must be a positive whole number, got 0"),
    (["--stop-after", "-5"], "--stop-after: must be a positive whole number, got -5"),
    (["--set", "policy.dynamics_iterations=0"], "error: "),
])
def test_bisim_cost_blocks_refuse_bad_values_in_one_line(args, message):
    done = subprocess.run([sys.executable, str(COST), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.startswith(message) and len(done.stderr.strip().splitlines()) == 1


# -- benchmarks/engine_decision_cost.py ---------------------------------------------------------
ENGINE = SCRIPT.parent / "engine_decision_cost.py"


def test_engine_decision_cost_prints_one_json_line():
    done = subprocess.run([sys.executable, str(ENGINE), "--scenarios", "lending-credit,admissions", "--worlds", "4",
                           "--decisions", "200", "--repeats", "1", "--resets", "3"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    import json
    out = json.loads(done.stdout)
    assert set(out) == {"lending-credit_decision_us", "admissions_decision_us", "lending-credit_reset_ms"}
    assert all(value > 0 for value in out.values())


@pytest.mark.parametrize("args, message", [
    (["--worlds", "0"], "error: argument --worlds: must be at least 1, got 0"),
    (["--worlds", "300"], "--worlds: must be a whole number from 1 to 256, got 300"),
    (["--decisions", "many"], "error: argument --decisions: a whole number is needed, got 'many'"),
    (["--scenarios", "no-such"], "--scenarios: no scenario file "),
    (["--scenarios", ","], "--scenarios: no scenario file (none given)"),
])
def test_engine_decision_cost_refuses_bad_values_in_one_line(args, message):
    done = subprocess.run([sys.executable, str(ENGINE), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.startswith(message) and len(done.stderr.strip().splitlines()) == 1, \
        done.stderr


# -- every script of benchmarks/ with a command line: one line for bad arguments ----------------
@pytest.mark.parametrize("name", ["bisim_cost_blocks.py", "engine_decision_cost.py", "figure3_credit_stats.py",
                                    "golden.py", "seed002_budget_stats.py",
                                    "training_curve_blocks.py"])
def test_an_unknown_argument_is_refused_in_one_line(name):
    done = script(SCRIPT.parent / name, "x", "y", "--no-such-flag")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: ")  # a required argument missing, or the unknown flag


@pytest.mark.parametrize("args, message", [(["--decisions", "abc"], "error: argument --decisions: invalid int value"),
                                           ([], "error: the following arguments are required")])
def test_a_bad_or_missing_argument_is_one_line(args, message):
    done = script(COST if args else SCRIPT, *args)
    assert done.returncode == 2 and done.stderr.startswith(message) and len(done.stderr.strip().splitlines()) == 1


def test_figure3_credit_stats_names_a_folder_without_a_study(tmp_path):
    done = script(SCRIPT.parent / "figure3_credit_stats.py", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr == f"{tmp_path / 'study.parquet'}: no such file (run abm study " \
                          "scenarios/studies/figure3-credit.yaml first)\n"
