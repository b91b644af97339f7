"""The Figure-1 table of seed 001 from a finished `scenarios/studies/fig1.yaml` study.

    abm report outputs/studies/fig1              # report/seed001_tables.md (with the study report)

For each setting (named group and/or gamma; ``settings``) and constraint (DP, EO): the exact
reward <Lambda, R>, the paper-scale return (+2 per decision) and constraint value
|gap| of race-blind, optimistic, Algorithm 2, Algorithm 1 and conservative (final episode of
each run: the exact values of the policy used), the simulated counterparts pooled over the
run's cohorts (+- 1.96 standard errors), and which of the seed's orderings hold
(`policies.fair_mdp.figure1.orderings`). ``abm report`` writes them for every study whose runs
are the fair-MDP planners on the beta-belief family (``applies``); ``figures`` gives
``seed001_figure1.png``:
Figure 1's panels (a) DP reward, (b) DP constraint value, (c) EO reward, (d) EO constraint value,
one bar per planner and gamma (exact values), the simulated estimate with its +- 1.96 SE whisker
drawn on each bar.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

ROWS = (("race-blind", "race_blind", None), ("optimistic (LP)", "optimistic", "{c}"),
        ("Algorithm 2 (CCE)", "fair_cce", "{c}"), ("Algorithm 1 (LP)", "fair_lp", "{c}"),
        ("conservative (one q)", "conservative", "{c}"))


def _label(name: str, constraint: str | None) -> str:
    return name if constraint is None else f"{name}(constraint={constraint})"


# the episode columns the table reads (the beta_belief family's exact and simulated values)
COLUMNS = ("policy", "episode", "exact_reward", "exact_discounted_return", "sim_reward", "sim_reward_se",
           *(f"{kind}_{c}_gap" for c in ("dp", "eo") for kind in ("exact", "sim")), "sim_dp_gap_se", "sim_eo_gap_se")


def final_rows(folder: str | Path) -> pd.DataFrame:
    """One row per run: its last episode (exact values and pooled simulated estimates)."""
    study = pd.read_parquet(Path(folder) / "study.parquet")
    return study.loc[study.groupby("run_id")["episode"].idxmax()].reset_index(drop=True)


# Figure 1 of the seed (its text; reward on the public code's +2-per-step scale, constraint value
# on its undiscounted offers / 50): (reward, constraint value) per planner; Algorithm 1 has none.
SEED_FIGURE1 = {"dp": {"race-blind": (10.43, 0.42), "optimistic (LP)": (10.41, 0.14),
                       "Algorithm 2 (CCE)": (10.40, 0.10), "conservative (one q)": (10.00, 0.0)},
                "eo": {"race-blind": (10.43, 0.37), "optimistic (LP)": (10.43, 0.11),
                       "Algorithm 2 (CCE)": (10.43, 0.10), "conservative (one q)": (10.00, 0.0)}}


def settings(final: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The study's settings, each (label, its runs): one per named group (when there are several)
    and per ``bank.gamma`` grid value (when the grid has one)."""
    keys = [k for k in ("study_group", "bank.gamma") if k in final.columns and
            (k != "study_group" or final[k].nunique() > 1)]
    if not keys:
        return [("", final)]
    out = []
    for values, part in final.groupby(keys, sort=True):
        values = values if isinstance(values, tuple) else (values,)
        label = ", ".join(f"group {v}" if k == "study_group" else f"gamma = {v}" for k, v in zip(keys, values))
        out.append((label, part))
    return out


def _cell(value, fmt: str) -> str:
    return "n/a" if value is None or pd.isna(value) else format(float(value), fmt)


def tables(folder: str | Path, epsilon: float = 0.1) -> str:
    """Markdown tables, one per setting and constraint: exact reward, the paper-scale return (the
    discounted return on the public code's +2-per-decision scale: the scale of the seed's numbers),
    the simulated reward, exact and simulated constraint values, and the seed's Figure-1 numbers."""
    from policies.fair_mdp.figure1 import orderings  # heavy (the LP and CCE solvers); only this table needs it

    final = final_rows(folder)
    out = []
    for label, part in settings(final):
        for constraint in ("dp", "eo"):
            gap, se = f"exact_{constraint}_gap", f"sim_{constraint}_gap"
            name = "demographic parity" if constraint == "dp" else "equal opportunity"
            out.append(f"**{label + ', ' if label else ''}{name}**\n")
            out.append("| policy | reward <Lambda,R> (exact) | paper-scale return (exact) | simulated reward "
                       "| constraint value (exact) | simulated abs(gap) | seed Fig. 1: reward / value |")
            out.append("|---|---:|---:|---:|---:|---:|---:|")
            rows = {}
            for title, policy, params in ROWS:
                match = part[part["policy"] == _label(policy, None if params is None else constraint)]
                if match.empty:
                    continue
                r = match.iloc[0]
                rows[title] = (float(r["exact_reward"]), float(r["exact_discounted_return"]), abs(float(r[gap])))
                seed = SEED_FIGURE1[constraint].get(title)
                out.append(f"| {title} | {r['exact_reward']:.6f} | {_cell(r.get('exact_paper_scale_return'), '.4f')} "
                           f"| {r['sim_reward']:.4f} ± {1.96 * r['sim_reward_se']:.4f} | {abs(r[gap]):.4f} "
                           f"| {abs(r[se]):.3f} ± {1.96 * r[se + '_se']:.3f} "
                           f"| {'-' if seed is None else f'{seed[0]:.2f} / {seed[1]:.2f}'} |")
            out.append("")
            if len(rows) == len(ROWS):
                out += [f"- {line}" for line in orderings(rows, epsilon)]
                out.append("")
    return "\n".join(out)


def figure1_spec(folder: str | Path, epsilon: float = 0.1):
    """Figure 1 as a figure spec (``abm.reports.fig.Panels``), from the runs' final episodes."""
    import numpy as np

    from abm.reports import figures as fig

    final = final_rows(folder)
    style = fig.Style.of(final)
    # one series per setting (named group and/or gamma, as in the tables): a study with the seed's
    # and the public code's settings side by side must not pool their runs into one bar
    parts = settings(final)
    panels = []
    for constraint, name in (("dp", "demographic parity"), ("eo", "equal opportunity")):
        for what in ("reward", "constraint"):
            series, cats = [], [title for title, _, _ in ROWS]
            for setting, part in parts:
                exact, sim, se, colours = [], [], [], []
                for _, label, params in ROWS:
                    full = _label(label, None if params is None else constraint)
                    match = part[part["policy"] == full]
                    colours.append(style.colour(full))
                    if match.empty:
                        exact.append(np.nan), sim.append(np.nan), se.append(np.nan)
                        continue
                    r = match.iloc[0]
                    if what == "reward":
                        exact.append(float(r["exact_reward"])), sim.append(float(r["sim_reward"]))
                        se.append(float(r["sim_reward_se"]))
                    else:
                        exact.append(abs(float(r[f"exact_{constraint}_gap"])))
                        sim.append(abs(float(r[f"sim_{constraint}_gap"])))
                        se.append(float(r[f"sim_{constraint}_gap_se"]))
                sim, se = np.array(sim), np.array(se)
                series.append(fig.Series(label=setting or "exact",
                                             x=np.arange(len(cats), dtype=float), y=np.array(exact), estimate=sim,
                                             low=sim - 1.96 * se, high=sim + 1.96 * se, colors=colours,
                                             color=colours[0], setting=setting or "exact"))
            ylabel = "bank reward <Lambda, R> (principal units)" if what == "reward" else \
                "constraint value |gap| (smallest feasible epsilon)"
            letter = "abcd"[len(panels)]
            panels.append(fig.FigureSpec(f"{constraint}_{what}", f"({letter}) {name}: "
                                             f"{'reward' if what == 'reward' else 'constraint value'}",
                                             "planner", ylabel, series, kind="bar", categories=cats,
                                             reference=epsilon if what == "constraint" else None,
                                             legend_title="bars: exact; hatch: setting"))
    caption = ("Bars: exact values of the policy each run used (hatch: setting, a named group and/or gamma); black diamonds: simulated estimate "
               f"pooled over the run's applicants, whiskers +- 1.96 SE; grey line: epsilon = {epsilon:g}.")
    return fig.Panels("seed001_figure1", "Seed 001 Figure 1 form", panels, ncols=2, caption=caption)


def applies(folder: str | Path) -> bool:
    """Whether the study has runs of the Figure-1 planners with the columns the table reads."""
    path = Path(folder) / "study.parquet"
    if not path.is_file():
        return False
    study = pd.read_parquet(path)
    if study.empty or not set(COLUMNS) <= set(study.columns):
        return False
    labels = {_label(name, None if params is None else c) for _, name, params in ROWS for c in ("dp", "eo")}
    return bool(labels & set(study["policy"].astype(str)))


def write(folder: str | Path, out: str | Path) -> list[Path]:
    """Write ``seed001_tables.md`` beside a study report when the study has the Figure-1 runs."""
    if not applies(folder):
        return []
    target = Path(out) / "seed001_tables.md"
    target.write_text("# Seed 001 Figure 1 tables\n\n" + tables(folder))
    return [target]


def figures(folder: str | Path) -> list:
    """The paper's figures as specs (``abm report`` draws them beside the tables as PNG)."""
    return [figure1_spec(folder)] if applies(folder) else []
