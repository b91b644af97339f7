"""benchmarks/seed002_budget_stats.py: Welch tests between methods of a study, with --pool joining
another study's runs; a folder without study.parquet is refused in one line."""

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
                rows.append({"run_id": f"{policy.split('(')[0]}-abc-r{r}", "episode": episode, "group": name,
                             "policy": policy, "seed": r, "cumulative_return": value if episode else 0.0,
                             "recall_gap": 0.1 * r})
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(folder / "study.parquet")
    return folder


def stats(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


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


@pytest.mark.parametrize("where", ["first", "pool"])
def test_a_folder_without_study_parquet_exits_with_one_line(tmp_path, where):
    good = study(tmp_path / "good", "g", {"ppo(backend=lean)": [1.0, 2.0]})
    missing = tmp_path / "nothing"
    args = [str(missing), "ppo,dqn"] if where == "first" else [str(good), "ppo,dqn", "--pool", str(missing)]
    done = stats(*args)
    assert done.returncode == 2
    assert done.stderr.strip() == f"{missing}: no study.parquet (render it with: abm report {missing})"
