"""Seed 000's report forms (Figure 3, Tables 2-3) on a hand-made study frame."""

from __future__ import annotations

import pandas as pd

from abm.reports.seed000 import final_rows, learner_cells, seed_tables, with_social_welfare, write

# (policy, objective) -> final-episode (wealth gap, inequality ratio, cumulative profit, SW_M, SW_F), per seed
FINAL = {
    ("rl(pretrain_episodes=100)", "outcome:rawlsian"): [(1.0, 1.2, 50.0, 0.02, 0.02), (3.0, 1.4, 70.0, 0.02, 0.02)],
    ("rl(pretrain_episodes=100)", "outcome:lagrangian:0.5"): [(5.0, 0.9, 100.0, 0.04, 0.04), (5.0, 1.1, 120.0, 0.04, 0.06)],
    ("rl(pretrain_episodes=100)", "dm:utilitarian"): [(10.0, 2.0, 200.0, 0.01, 0.01), (12.0, 2.0, 220.0, 0.01, 0.01)],
    ("perl(pretrain_episodes=100)", "outcome:rawlsian"): [(-0.5, 1.0, 10.0, 0.03, 0.03), (0.5, 1.0, 10.0, 0.03, 0.03)],
    ("perl(pretrain_episodes=100)", "dm:utilitarian"): [(4.0, 3.0, 300.0, 0.0, 0.0), (4.0, 3.0, 310.0, 0.0, 0.0)],
}


def study_frame(extra=()) -> pd.DataFrame:
    rows = []
    for (policy, objective), seeds in [*FINAL.items(), *extra]:
        for r, (gap, ratio, profit, swm, swf) in enumerate(seeds):
            run = f"{policy}-{objective}-r{r}"
            for episode in (0, 1):  # episode 0 is noise the tables must ignore
                scale = 1.0 if episode == 1 else 99.0
                rows.append({"run_id": run, "config": f"{policy}, {objective}", "policy": policy,
                             "objective": objective, "episode": episode, "wealth_gap": gap * scale,
                             "inequality_ratio": ratio * scale, "cumulative_profit": profit * scale,
                             "social_welfare_M": swm, "social_welfare_F": swf})
    return pd.DataFrame(rows)


def test_cells_use_final_episode_mean_and_std():
    cells = learner_cells(final_rows(with_social_welfare(study_frame())))
    rl_rmm = cells[(cells.agent == "RL") & (cells.reward == "RMM")].iloc[0]
    assert rl_rmm.perspective == "outcome" and rl_rmm.runs == 2
    assert rl_rmm.wealth_gap_mean == 2.0 and abs(rl_rmm.wealth_gap_std - 1.4142135) < 1e-6
    assert rl_rmm.social_welfare_mean == 0.02


def test_table2_best_reward_per_metric_and_table3_best_perspective():
    text = seed_tables(study_frame())
    table2 = text.split("## Table 2")[1].split("## Table 3")[0]
    row = next(line for line in table2.splitlines() if line.startswith("| RL | outcome"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2].startswith("RMM: 2 ")  # smallest |gap|
    assert cells[3].startswith("FL(0.5): 1 ")  # ratio 1.0 is parity
    assert cells[4].startswith("FL(0.5): 110 ")  # largest profit
    assert cells[5].startswith("FL(0.5): 0.045")  # largest social welfare
    table3 = text.split("## Table 3")[1].split("## Every")[0]
    perl_rmm = next(line for line in table3.splitlines() if line.startswith("| PERL | RMM"))
    assert "outcome: 0 ± 0.707" in perl_rmm  # the only perspective measured for PERL RMM
    assert seed_tables(study_frame()[lambda f: f.policy == "oracle"]) == ""


def test_figure3_written_when_baselines_and_learners_present(tmp_path):
    oracle = [(("oracle", "none"), [(0.5, 1.0, 400.0, 0.05, 0.05), (0.7, 1.0, 420.0, 0.05, 0.05)])]
    frame = study_frame(oracle)
    frame.to_parquet(tmp_path / "study.parquet")
    written = write(tmp_path, tmp_path)
    names = sorted(p.name for p in written)
    assert names == ["seed000_figure3.md", "seed000_figure3.png", "seed000_tables.md"]
    assert (tmp_path / "seed000_figure3.png").stat().st_size > 10_000
    fig = (tmp_path / "seed000_figure3.md").read_text()
    assert "| Oracle | oracle, none | 2 | 2 | 0.6 ± 0.141" in fig


def test_a_best_entry_is_marked_only_when_it_beats_every_other_candidate():
    from abm.reports.seed000 import beats_all

    seeds = [11, 12, 13, 14, 15]
    s = lambda values, idx=seeds: pd.Series(values, index=idx)  # noqa: E731
    world = pd.Series([0.0, 2.0, -1.0, 3.0, 1.0], index=seeds)  # a common-seed effect shared by both
    # paired: a small, consistent advantage under a large common-seed spread is found...
    assert beats_all(s(10 + world + 0.1 * pd.Series([0.9, 1.1, 1.0, 0.95, 1.05], index=seeds)),
                     [s(10 + world + 0.5)], "abs_min")
    # ...which the unpaired test (different seeds) cannot see
    assert not beats_all(s(10 + world.to_numpy() + 0.1), [s(10 + world.to_numpy() + 0.5, [1, 2, 3, 4, 5])], "abs_min")
    assert not beats_all(s([1.0, 3.0, 0.5, 2.0, 1.5]), [s([1.2, 2.0, 1.5, 1.8, 2.2])], "abs_min")  # noise
    assert beats_all(s([0.98, 1.01, 1.0, 0.99, 1.02]), [s([1.5, 1.6, 1.4, 1.55, 1.45])], "near_one")
    two = [1, 2]
    assert not beats_all(s([5.0, 5.0], two), [s([6.0, 6.0], two), s([5.1, 4.0], two)], "abs_min")  # beat every one
    assert beats_all(s([5.0, 5.1], two), [s([6.0, 6.1], two), s([7.0, 7.1], two)], "abs_min")
    assert beats_all(s([300.0, 310.0], [1, 2]), [s([10.0, 10.0], [3, 4])], "max")


def test_tables_mark_significant_bests_with_a_star():
    paired = {("perl(pretrain_episodes=100)", f"two_sided(0.5):{fam}"): [
        (gap + d, 1.0, 100.0 + 10 * d, 0.03, 0.03) for d in (0.0, 1.0, -1.0, 2.0, 0.5)]
        for fam, gap in (("utilitarian", 3.0), ("rawlsian", 6.0))}
    frame = study_frame(paired.items())
    frame["seed"] = frame["run_id"].str[-1].astype(int) + 100  # replicate r has seed 100 + r in every config
    text = seed_tables(frame)
    row = next(line for line in text.split("## Table 3")[0].splitlines() if line.startswith("| PERL | two-sided"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2].startswith("UP: 3.5 ") and cells[2].endswith(" *")  # gap lower by 3 on every seed
    assert not cells[4].endswith("*")  # profits are identical across the two rewards: a tie, not a win
    assert cells[4].startswith("UP = RMM: 105 ") and cells[3].startswith("UP = RMM: 1 ")


def test_gaps_of_opposite_signs_do_not_cancel_in_the_ranking():
    swing = {("rl(pretrain_episodes=100)", "dm:rawlsian"): [(-10.0, 1.0, 0.0, 0.0, 0.0), (10.0, 1.0, 0.0, 0.0, 0.0)],
             ("rl(pretrain_episodes=100)", "dm:lagrangian:0.5"): [(2.0, 1.0, 0.0, 0.0, 0.0), (2.5, 1.0, 0.0, 0.0, 0.0)]}
    text = seed_tables(study_frame(swing.items()))
    row = next(line for line in text.split("## Table 3")[0].splitlines() if line.startswith("| RL | DM"))
    assert [c.strip() for c in row.strip("|").split("|")][2].startswith("FL(0.5): 2.25 ")  # not RMM's signed mean 0
    assert "* = better than every other candidate" in text


def test_paired_differences_over_common_seeds(tmp_path):
    from scipy import stats

    from abm.reports.seed000 import paired_differences

    gaps = {"utilitarian": [3.0, 4.0, 2.0, 5.0, 3.5], "rawlsian": [6.0, 6.5, 5.5, 8.0, 6.0]}
    runs = {("perl(pretrain_episodes=100)", f"two_sided(0.5):{fam}"): [(g, 1.0, 100.0, 0.03, 0.03) for g in gap]
            for fam, gap in gaps.items()}
    frame = study_frame(runs.items())
    frame["seed"] = frame["run_id"].str[-1].astype(int) + 100
    out = paired_differences(frame[frame["objective"].str.startswith("two_sided")], episodes=[1])
    gap = out[out["metric"] == "wealth_gap"].iloc[0]
    assert gap["a"].endswith("two_sided(0.5):rawlsian") and gap["b"].endswith("two_sided(0.5):utilitarian")
    assert gap["episode"] == 2 and gap["seeds"] == 5 and gap["a_greater"] == 5
    assert abs(gap["mean_diff"] - 2.9) < 1e-9
    assert abs(gap["p_value"] - stats.ttest_rel(gaps["rawlsian"], gaps["utilitarian"]).pvalue) < 1e-12
    profit = out[out["metric"] == "cumulative_profit"].iloc[0]
    assert profit["mean_diff"] == 0 and profit["p_value"] == 1.0  # identical on every seed
    frame.to_parquet(tmp_path / "study.parquet")  # the report writes it where runs carry their seeds
    assert "seed000_paired.csv" in {p.name for p in write(tmp_path, tmp_path)}
    assert len(pd.read_csv(tmp_path / "seed000_paired.csv")) > 0
    unseeded = tmp_path / "unseeded"
    unseeded.mkdir()
    study_frame().to_parquet(unseeded / "study.parquet")
    assert "seed000_paired.csv" not in {p.name for p in write(unseeded, unseeded)}
