"""Seed 000's result forms from a finished study: Figure 3 and Tables 2-3 (mean ± std over seeds; the
figure's bands are 95% Student-t intervals of the mean, like every figure of ``abm.reports.figures``).

Figure 3 compares lenders (oracle, one-step predictor, RL, PERL) per episode on the four macro
metrics; Table 2 gives, for each learning agent and fairness perspective, the best reward function
per metric; Table 3, for each agent and reward function, the best perspective per metric. A run
contributes its final-episode values. "Best" means the smallest mean over runs of |wealth gap|
(so gaps of opposite signs in different seeds do not cancel), of |inequality ratio - 1|
(parity), of -cumulative profit and of -social welfare. Candidates whose runs are identical
seed for seed (UP and SW when the groups have equal sizes, the seed's setting) are a tie, shown
as ``UP = SW``. Social welfare is the
mean over groups of the seed's R_g(t) = (mu_g(t) - mu_g(0)) / t (the episode rows'
``social_welfare_<g>``). ``abm report`` writes them (``write``) for every study they ``apply`` to.

A best entry is marked ``*`` when it is better than *every* other candidate of its row by a
two-sided t-test at p < 0.05 on the per-run badness (|gap|, |ratio - 1|, -profit, -welfare):
paired over seeds when the candidates' runs share their seeds (a study with
``common_seeds: true``), Welch's otherwise; no correction for the several comparisons. With
five seeds an unmarked "best" is a ranking of means, not a finding. Where configurations share
seeds, ``seed000_paired.csv`` lists the paired difference of every pair of configurations on
every metric at the 10%, 50% and last episodes, with its paired t-test p.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from abm.errors import UserError
from abm.objectives import CustomObjective, parse
from abm.reports.run import to_markdown

FAMILY_ABBR = {"utilitarian": "UP", "social_welfare": "SW", "rawlsian": "RMM", "lagrangian": "FL"}
METRICS = (  # column, header, how to pick the best
    ("wealth_gap", "Wealth gap", "abs_min"),
    ("inequality_ratio", "Inequality ratio", "near_one"),
    ("cumulative_profit", "Cumulative profit", "max"),
    ("social_welfare", "Social welfare", "max"),
)
FIGURE_POLICIES = ("oracle", "one_step", "rl", "perl")
LEARNERS = ("rl", "perl")
AGENT_NAMES = {"oracle": "Oracle", "one_step": "One-step", "rl": "RL", "perl": "PERL"}


def with_social_welfare(frame: pd.DataFrame) -> pd.DataFrame:
    """Add ``social_welfare``: the mean over groups of ``social_welfare_<g>``; ``agent``: the bare policy name."""
    groups = [c for c in frame.columns if c.startswith("social_welfare_")]
    out = frame.copy()
    out["social_welfare"] = out[groups].mean(axis=1) if groups else np.nan
    out["agent"] = out["policy"].astype(str).str.split("(").str[0]
    return out


def final_rows(study: pd.DataFrame) -> pd.DataFrame:
    """Each run's last episode."""
    last = study.groupby("run_id", sort=False)["episode"].transform("max")
    return study[study["episode"] == last].reset_index(drop=True)


def _pm(values: pd.Series) -> tuple[float, float, str]:
    x = values.astype(float).dropna()
    if x.empty:
        return np.nan, np.nan, "n/a"
    std = float(x.std(ddof=1)) if len(x) > 1 else np.nan
    text = f"{x.mean():.4g} ± {std:.3g}" if np.isfinite(std) else f"{x.mean():.4g}"
    return float(x.mean()), std, text


def _badness(rule: str, values: pd.Series) -> float:
    """A candidate's rank score: the mean over its runs of the per-run badness."""
    bad = _run_badness(rule, values)
    return float(bad.mean()) if len(bad) else np.inf


def _run_badness(rule: str, values: pd.Series) -> pd.Series:
    x = values.astype(float).dropna()
    return {"abs_min": x.abs(), "near_one": (x - 1.0).abs(), "max": -x}[rule]


SIGNIFICANCE = 0.05


def _pairs(a: pd.Series, b: pd.Series) -> bool:
    """Per-run values indexed by the same seeds, one run per seed: comparable seed for seed."""
    return len(a) == len(b) and a.index.is_unique and set(a.index) == set(b.index)


def paired_p(a: pd.Series, b: pd.Series) -> float:
    """Two-sided paired t-test p of ``a - b`` (aligned). A difference without variance decides by
    itself: p = 1 when it is zero on every seed, 0 when it is the same nonzero value on every seed."""
    from scipy import stats

    diff = a.to_numpy(float) - b.to_numpy(float)
    if np.allclose(diff, diff[0], rtol=1e-12, atol=0):
        return 1.0 if diff[0] == 0 else 0.0
    with warnings.catch_warnings():  # scipy warns on near-constant samples; the test stays valid
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_rel(a.to_numpy(float), b.to_numpy(float)).pvalue)


def beats_all(win: pd.Series, others: list[pd.Series], rule: str) -> bool:
    """True when the per-run badness ``win`` is lower than each of ``others`` at p < 0.05 (two-sided
    t-test; paired when both are indexed by the same seeds, Welch otherwise)."""
    from scipy import stats

    a = _run_badness(rule, win)
    if len(a) < 2 or not others:
        return False
    for values in others:
        b = _run_badness(rule, values)
        if len(b) < 2 or not a.mean() < b.mean():
            return False
        if _pairs(a, b):
            p = paired_p(a, b.reindex(a.index))
        elif np.ptp(a) == 0 and np.ptp(b) == 0:  # two constant samples, different means
            p = 0.0
        else:
            with warnings.catch_warnings():  # scipy warns on near-constant samples; the test stays valid
                warnings.simplefilter("ignore", RuntimeWarning)
                p = stats.ttest_ind(a, b, equal_var=False).pvalue
        if not p < SIGNIFICANCE:
            return False
    return True


def learner_cells(final: pd.DataFrame) -> pd.DataFrame:
    """One row per (agent, perspective, family): mean, std and text of every metric, and n runs."""
    rows = final[final["agent"].isin(LEARNERS) & (final["objective"].astype(str) != "none")]
    records = []
    for (agent, objective), runs in rows.groupby(["agent", "objective"], sort=False):
        obj = parse(str(objective))
        if isinstance(obj, CustomObjective):  # a plugin objective: a row of its own, named as written
            perspective, family = "plugin", str(objective)
        else:
            perspective = f"two-sided({obj.alpha:g})" if obj.perspective == "two_sided" else \
                {"outcome": "outcome", "dm": "DM"}[obj.perspective]
            family = FAMILY_ABBR[obj.family] + (f"({obj.lam:g})" if obj.family == "lagrangian" else "")
        rec = {"agent": AGENT_NAMES[agent], "perspective": perspective, "reward": family, "runs": len(runs)}
        key = runs["seed"].to_numpy() if "seed" in runs.columns else np.asarray(runs["run_id"])  # pairs runs
        for col, _, _ in METRICS:
            rec[f"{col}_mean"], rec[f"{col}_std"], rec[col] = _pm(runs[col])
            rec[f"{col}_values"] = pd.Series(runs[col].to_numpy(float), index=key)
        rec["mean abs gap"] = f"{_badness('abs_min', rec['wealth_gap_values']):.4g}"  # what the ranking uses
        rec["mean abs(ratio - 1)"] = f"{_badness('near_one', rec['inequality_ratio_values']):.3g}"
        records.append(rec)
    return pd.DataFrame(records)


def _same_runs(a: pd.Series, b: pd.Series) -> bool:
    """Two candidates whose runs gave the same values seed for seed (e.g. UP and SW for equal groups)."""
    return _pairs(a, b) and \
        np.allclose(a.to_numpy(float), b.reindex(a.index).to_numpy(float), rtol=1e-12, atol=0, equal_nan=True)


def _best(cells: pd.DataFrame, by: list[str], choose: str) -> pd.DataFrame:
    out = []
    for key, block in cells.groupby(by, sort=False):
        row = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        for col, header, rule in METRICS:
            values = block[f"{col}_values"]
            scores = values.map(lambda v, r=rule: _badness(r, v))
            if np.isinf(scores).all():
                row[header] = "n/a"
                continue
            best = scores.idxmin()
            twins = [i for i in block.index if i != best and _same_runs(values[i], values[best])]
            others = [v for i, v in values.items() if i != best and i not in twins]
            mark = " *" if beats_all(values[best], others, rule) else ""
            names = " = ".join(str(block.at[i, choose]) for i in (best, *twins))  # identical runs: a tie
            row[header] = f"{names}: {block.at[best, col]}{mark}"
        out.append(row)
    return pd.DataFrame(out)


def seed_tables(study: pd.DataFrame) -> str:
    """Markdown for Tables 2 and 3 (and every configuration), or '' without learning runs."""
    cells = learner_cells(final_rows(with_social_welfare(study)))
    if cells.empty:
        return ""
    runs = int(cells["runs"].min()), int(cells["runs"].max())
    episodes = int(study["episode"].max()) + 1
    lines = ["# Seed 000 Tables 2-3 (RL and PERL)", "",
             f"Final episode ({episodes} episodes) of each run; mean ± std over "
             f"{runs[0] if runs[0] == runs[1] else f'{runs[0]}-{runs[1]}'} seeded runs. "
             "Best = smallest mean over runs of |wealth gap| and of |inequality ratio - 1|, largest cumulative "
             "profit, largest social welfare (mean over groups of (mu_g(t) - mu_g(0)) / t); the cell shows the "
             "signed mean ± std. A = B: runs identical seed for seed (UP and SW coincide for equal groups). "
             "* = better than every other candidate of its row, two-sided t-test p < 0.05 on the per-run values "
             "(paired over seeds when the runs share seeds, Welch otherwise; uncorrected); unmarked = a ranking "
             "of means only.", "",
             "## Table 2: best reward function per metric", "",
             to_markdown(_best(cells, ["agent", "perspective"], "reward")), "",
             "## Table 3: best fairness perspective per reward function", "",
             to_markdown(_best(cells, ["agent", "reward"], "perspective")), "",
             "## Every configuration", "",
             to_markdown(cells[["agent", "perspective", "reward", "runs", *[c for c, _, _ in METRICS],
                                "mean abs gap", "mean abs(ratio - 1)"]]), ""]
    return "\n".join(lines)


def figure_table(study: pd.DataFrame, episodes: list[int] | None = None) -> pd.DataFrame:
    """Figure 3's numbers: mean ± std over seeds of the four metrics at chosen episodes, per agent."""
    frame = with_social_welfare(study)
    frame = frame[frame["agent"].isin(FIGURE_POLICIES)]
    last = int(frame["episode"].max())
    episodes = episodes or sorted({0, (last + 1) // 10 - 1, (last + 1) // 2 - 1, last} - {-1})
    rows = []
    for (agent, config), runs in frame.groupby(["agent", "config"], sort=False):
        for e in episodes:
            at = runs[runs["episode"] == e]
            rec = {"agent": AGENT_NAMES[agent], "configuration": config, "episode": e + 1, "runs": len(at)}
            for col, header, _ in METRICS:
                rec[header] = _pm(at[col])[2]
            rows.append(rec)
    return pd.DataFrame(rows)


def paired_differences(study: pd.DataFrame, episodes: list[int] | None = None) -> pd.DataFrame:
    """Every pair of configurations that share at least two seeds, on the four metrics: the mean and
    sd of the per-seed difference a - b, a two-sided paired t-test p, and on how many seeds a > b.
    Episodes (0-based): by default the figure's checkpoints after the first (10%, 50%, last)."""
    frame = with_social_welfare(study)
    columns = ["episode", "metric", "a", "b", "seeds", "mean_diff", "sd_diff", "p_value", "a_greater"]
    if frame.empty or "seed" not in frame.columns:
        return pd.DataFrame(columns=columns)
    last = int(frame["episode"].max())
    episodes = episodes or sorted({(last + 1) // 10 - 1, (last + 1) // 2 - 1, last} - {-1})
    rows = []
    for e in episodes:
        at = frame[frame["episode"] == e]
        for col, _, _ in METRICS:
            table = at.pivot_table(index="seed", columns="config", values=col, aggfunc="first")
            names = list(table.columns)
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    both = table[[a, b]].dropna()
                    if len(both) < 2:
                        continue
                    diff = both[a] - both[b]
                    rows.append({"episode": e + 1, "metric": col, "a": a, "b": b, "seeds": len(both),
                                 "mean_diff": float(diff.mean()), "sd_diff": float(diff.std(ddof=1)),
                                 "p_value": paired_p(both[a], both[b]), "a_greater": int((diff > 0).sum())})
    return pd.DataFrame(rows, columns=columns)


def figure3_spec(study: pd.DataFrame):
    """Figure 3 as a figure spec: the four macro metrics over episodes (2 x 2 panels), one line per
    lender configuration, mean and 95% Student-t interval over its seeded runs."""
    from abm.reports import figures as fig

    frame = with_social_welfare(study)
    style = fig.Style.of(frame, fig.groups_in(frame.columns))
    frame = frame[frame["agent"].isin(FIGURE_POLICIES)]
    table = fig.settings_of(frame).set_index("config")
    per_agent = frame.groupby("agent")["config"].nunique()
    panels = []
    for col, header, _ in METRICS:
        series = []
        for (agent, config), runs in frame.groupby(["agent", "config"], sort=False):
            stats = runs.groupby("episode")[col].agg(["mean", "std", "count"])
            mean = stats["mean"].to_numpy(float)
            half = fig.t_half_width(stats["std"].to_numpy(float), stats["count"].to_numpy(float))
            n = int(stats["count"].max())
            name = AGENT_NAMES[agent] + (f": {config}" if per_agent[agent] > 1 else "")
            policy, setting = table.at[config, "policy"], table.at[config, "setting"]
            series.append(fig.Series(label=f"{name} (n={n})", x=stats.index.to_numpy(float), y=mean,
                                         low=mean - half, high=mean + half, n=n, config=str(config), policy=policy,
                                         setting=setting, color=style.colour(policy), dash=style.dash(setting)))
        ylim = None
        if col == "inequality_ratio":  # early ratios of tiny growths are huge: show the bulk
            lo, hi = np.nanpercentile(frame[col].astype(float), [2, 98])
            ylim = (lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
        metric = fig.METRIC_BY_STEM.get(col)
        ylabel = fig.axis_label(metric, fig.groups_in(frame.columns), "eutopia") if metric else \
            "mean over groups of (mu_g(t) - mu_g(0)) / t ($K per time unit)"
        panels.append(fig.FigureSpec(col, header, "episode", ylabel, series, caption=fig.CI_CAPTION,
                                         ylim=ylim, reference=1.0 if col == "inequality_ratio" else None,
                                         legend_title="lender"))
    return fig.Panels("seed000_figure3", "Seed 000 Figure 3 form: mean and 95% CI over seeds", panels, ncols=2,
                          caption=fig.CI_CAPTION)


def plot_figure3(study: pd.DataFrame, path: Path) -> Path:
    from abm.reports import figures as fig

    return fig.save(figure3_spec(study), Path(path).parent, Path(path).stem)


def _study(folder: str | Path) -> pd.DataFrame | None:
    """The study's ``study.parquet`` when it has lender runs with a wealth gap (a Eutopia study)."""
    path = Path(folder) / "study.parquet"
    if not path.is_file():
        return None
    study = pd.read_parquet(path)
    if study.empty or "policy" not in study.columns or "wealth_gap" not in study.columns:
        return None
    return study


def applies(folder: str | Path) -> bool:
    """Whether the study has runs seed 000's forms can use (each form then checks its own agents)."""
    return _study(folder) is not None


def write(folder: str | Path, out: str | Path) -> list[Path]:
    """Write seed 000's forms beside a study report when the study has the runs they need."""
    study = _study(folder)
    if study is None:
        return []
    out = Path(out)
    written = []
    text = seed_tables(study)
    if text:
        (out / "seed000_tables.md").write_text(text)
        written.append(out / "seed000_tables.md")
    paired = paired_differences(study) if {"seed", "config"} <= set(study.columns) else pd.DataFrame()
    if not paired.empty:  # only where configurations share seeds (study.common_seeds)
        paired.to_csv(out / "seed000_paired.csv", index=False)
        written.append(out / "seed000_paired.csv")
    agents = set(study["policy"].astype(str).str.split("(").str[0])
    if len(agents & set(FIGURE_POLICIES)) >= 2 and agents & set(LEARNERS):
        written.append(plot_figure3(study, out / "seed000_figure3.png"))
        table = figure_table(study)
        (out / "seed000_figure3.md").write_text("# Seed 000 Figure 3: numbers\n\nMean ± std over seeds at selected "
                                                "episodes.\n\n" + to_markdown(table) + "\n")
        written.append(out / "seed000_figure3.md")
    return written


def figures(folder: str | Path) -> list:
    """The paper's figures as specs (``write`` draws Figure 3 itself, as ``seed000_figure3.png``)."""
    study = _study(folder)
    if study is None:
        return []
    agents = set(study["policy"].astype(str).str.split("(").str[0])
    return [figure3_spec(study)] if len(agents & set(FIGURE_POLICIES)) >= 2 and agents & set(LEARNERS) else []


def main(folder: str | Path) -> list[Path]:
    """Render into ``folder/report`` (for use without the full study report)."""
    out = Path(folder) / "report"
    out.mkdir(exist_ok=True)
    written = write(folder, out)
    if not written:
        raise UserError(f"{folder}: no seed-000 learning or Figure 3 runs in study.parquet")
    return written
