"""ml-fairness-gym's own lending experiment beside ours (``dynamics.model: mass_shift``), same steps,
burn-in, seeds, bins and repayment table: recall per group, mean final bin, return, Welch p.

    python benchmarks/mfg_side_by_side.py MFG DEPS [--steps 1000,5000,10000,20000] [--seeds 5]

MFG: a checkout of google/ml-fairness-gym, a work tree or a bare git directory (the files its
lending experiment needs are then exported with ``git show`` into a temporary folder). DEPS: a
folder for its dependencies (gym 0.26.2, gin-config, simplejson, absl-py, more-itertools, attrs,
six), installed there with pip when absent, numpy left out (ours is used). Nothing of it enters
this repository; it runs in a subprocess with four run-time shims (docs/results/mfg-lending.md):
gym's ``seeding.np_random`` returns a ``RandomState``, its observation-space check passes,
``collections.Sequence`` exists, absl flags parsed with ``--use_tqdm=false``, and a stub
``recsim`` module. Its agent is frozen after the burn-in (``freeze_classifier_after_burnin``,
its own option): retraining every step costs ~0.2 s and, the repayment table being fixed, finds
the same threshold (``--retrain`` checks it: the thresholds seen are printed).

One run per seed gives every step count: a history cut at N steps is an N-step run (the
processes are causal). Ours: ``scenarios/lending-credit.yaml`` with ``dynamics.model=mass_shift``,
the same repayment table, episodes of gcd(steps) decisions, cumulative recall and return read
after N decisions; mean bins are counted 1..7 on both sides (its bins 0..6, plus one).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from oneline import OneLineParser, fail, positive

ROOT = Path(__file__).resolve().parents[1]
MFG_PROBS = (0.1, 0.2, 0.45, 0.6, 0.65, 0.7, 0.7)  # lending_params.DELAYED_IMPACT_SUCCESS_PROBS
TABLE3_PROBS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # seed 002 Table 3
NEEDED = ("core.py", "distributions.py", "params.py", "rewards.py", "run_util.py", "file_util.py",
          "test_util.py", "experiments/lending.py", "spaces/multinomial.py")
NEEDED_DIRS = ("environments", "metrics", "agents")
PACKAGES = ("gym==0.26.2", "gin-config", "simplejson", "absl-py", "more-itertools", "attrs", "six")

# runs inside ml-fairness-gym's import path; prints one line "MFG-RESULT <json>"
DRIVER = r'''
import collections, collections.abc, gc, json, sys
gc.disable()  # its history deep-copies every state: with the collector on, 20,000 steps cost ~10x more
for _n in ("Sequence", "Mapping", "MutableMapping", "Iterable", "Callable"):
    setattr(collections, _n, getattr(collections.abc, _n))
import numpy as np
from gym.utils import seeding
seeding.np_random = lambda seed=None: (np.random.RandomState(seed), seed)
from absl import flags
import run_util
flags.FLAGS(["mfg", "--use_tqdm=false"])
from environments import lending, lending_params
from experiments import lending as lending_exp
from metrics import error_metrics
_init = lending.DelayedImpactEnv.__init__
def _init_accepting(self, *a, **k):
    _init(self, *a, **k)
    self.observation_space.contains = lambda x: True  # gym 0.26 refuses its observations; only an assert reads it
lending.DelayedImpactEnv.__init__ = _init_accepting
args = json.loads(sys.argv[1])
defaults = list(lending_params.two_group_credit_clusters.__defaults__)
defaults[2] = tuple(args["success"])
lending_params.two_group_credit_clusters.__defaults__ = tuple(defaults)
out = []
for seed in args["seeds"]:
    exp = lending_exp.Experiment(seed=seed, num_steps=max(args["steps"]), burnin=args["burnin"],
                                 cluster_shift_increment=args["shift"], return_json=False)
    env, agent = exp.scenario_builder()
    agent.params.freeze_classifier_after_burnin = not args["retrain"]
    run_util.run_simulation(env, agent, {}, exp.num_steps, exp.seed)
    full = list(env.history)  # (state before the step, action)
    for n in args["steps"]:
        after = full[n].state if n < len(full) else env.state
        env.history = full[:n]
        recall = error_metrics.RecallMetric(env, prediction_fn=lambda x: x.action,
                                            ground_truth_fn=lambda x: not x.state.will_default,
                                            stratify_fn=lambda x: str(x.state.group_id)).measure(env)
        weights = [np.asarray(c.weights, float) for c in after.params.applicant_distribution.components]
        out.append({"seed": seed, "steps": n, "recall": [recall["0"], recall["1"]],
                    "mean_bin": [float(w @ np.arange(1, len(w) + 1)) for w in weights],
                    "return": float(after.bank_cash - full[0].state.bank_cash),
                    "thresholds_seen": sorted(set(map(float, agent.global_threshold_history[args["burnin"] + 1:n])))})
    del env, agent, full
    gc.collect()  # once per seed: the run's states hold reference cycles
print("MFG-RESULT " + json.dumps(out))
'''



def checkout(path: Path, tmp: Path) -> Path:
    """The folder to import ml-fairness-gym from: ``path`` itself if it is a work tree, else the
    needed files exported from ``path`` as a git directory."""
    if (path / "environments" / "lending.py").is_file():
        return path
    git = ["git", "--git-dir", str(path)]
    if subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True).returncode != 0:
        fail(f"MFG: {path} is neither an ml-fairness-gym work tree (no environments/lending.py) nor a git directory")
    out = tmp / "mfg"
    listed = subprocess.run(git + ["ls-tree", "-r", "--name-only", "HEAD", *NEEDED_DIRS], capture_output=True, text=True)
    names = [*NEEDED, *(n for n in listed.stdout.split() if n.endswith(".py"))]
    for name in names:
        blob = subprocess.run(git + ["show", f"HEAD:{name}"], capture_output=True)
        if blob.returncode != 0:
            fail(f"MFG: {path} has no {name} at HEAD: not an ml-fairness-gym checkout")
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(blob.stdout)
    (out / "spaces" / "__init__.py").touch()
    return out


def dependencies(deps: Path) -> None:
    """gym 0.26.2 and the rest in ``deps`` (pip, once), without the numpy pip brings along."""
    if not (deps / "gym" / "__init__.py").is_file():
        print(f"installing {' '.join(PACKAGES)} into {deps}", file=sys.stderr)
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(deps), *PACKAGES])
        if done.returncode != 0:
            fail(f"DEPS: pip could not install {' '.join(PACKAGES)} into {deps}")
    for extra in deps.glob("numpy*"):
        shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
    (deps / "gym" / "utils" / "json_utils.py").touch()  # core.py imports it; gym 0.26 has none


def stub(tmp: Path) -> Path:
    """``recsim.simulator.recsim_gym.RecSimGymEnv``: core.py names it in an isinstance check only."""
    folder = tmp / "stub" / "recsim" / "simulator"
    folder.mkdir(parents=True)
    for init in (tmp / "stub" / "recsim", folder):
        (init / "__init__.py").touch()
    (folder / "recsim_gym.py").write_text("class RecSimGymEnv:\n    pass\n")
    return tmp / "stub"


def run_mfg(code: Path, deps: Path, stubs: Path, seeds, steps, args) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, (code, deps, stubs))))
    payload = json.dumps({"seeds": list(seeds), "steps": list(steps), "burnin": args.burn_in, "shift": args.shift,
                          "success": list(args.probs), "retrain": args.retrain})
    done = subprocess.run([sys.executable, "-c", DRIVER, payload], cwd=code, env=env, capture_output=True, text=True)
    line = next((l for l in done.stdout.splitlines() if l.startswith("MFG-RESULT ")), None)
    if done.returncode != 0 or line is None:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        fail(f"ml-fairness-gym's lending experiment failed (seeds {list(seeds)}): {tail}")
    return json.loads(line[len("MFG-RESULT "):])


#: our other readings of "Max-util" on the same dynamics: (label, policy, its --set overrides)
READINGS = (("max_util (known curve)", "max_util", ()),
            ("max_util_learned, group-aware", "max_util_learned", ()),
            ("max_util_learned, pooled", "max_util_learned", ("policy.pooled=true",)),
            ("classifier (logistic, group one-hot, retrained)", "classifier", ("policy.mode=retrain",)))


def run_ours(seed: int, steps, args, policy: str = "max_util", extra=()) -> list[dict]:
    from abm import api

    every = math.gcd(*steps)
    overrides = ["dynamics.model=mass_shift", f"dynamics.shift_increment={args.shift}",
                 f"population.repay_probs={json.dumps(list(args.probs))}", f"episodes.horizon={every}",
                 f"episodes.count={max(steps) // every}", f"policy.burn_in={args.burn_in}", "outputs.events=false",
                 *extra]
    episodes = api.run(ROOT / "scenarios" / "lending-credit.yaml", policy=policy, seed=seed,
                       overrides=overrides).episodes
    rows = []
    for n in steps:
        row = episodes.iloc[n // every - 1]
        rows.append({"seed": seed, "steps": n, "recall": [row["recall_G1"], row["recall_G2"]],
                     "mean_bin": [row["mean_score_G1"], row["mean_score_G2"]],
                     "return": float(row["cumulative_return"])})
    return rows


def restated(seed: int, steps, args) -> list[dict]:
    """ml-fairness-gym's lending process restated in a few lines of numpy, the arbiter when the two
    sides differ: each step a group (0.5 / 0.5), a bin from its distribution, the outcome; approve
    during the burn-in or at bins 3..6 of 0..6 (p > 0.5); an approved loan moves min(shift, mass)
    of the group's mass one bin up (repaid) or down (default), none past the ends."""
    rng = np.random.default_rng(seed)
    probs = np.asarray(args.probs)
    mass = np.array([[0, .1, .1, .2, .3, .3, 0], [.1, .1, .2, .3, .3, 0, 0]])
    tp, fn, cash, rows = np.zeros(2), np.zeros(2), 0.0, []
    for t in range(max(steps)):
        g = int(rng.random() < 0.5)
        b = int(rng.choice(7, p=mass[g] / mass[g].sum()))
        good = rng.random() < probs[b]
        lend = t < args.burn_in or probs[b] > 0.5
        if good:
            tp[g], fn[g] = tp[g] + lend, fn[g] + (not lend)
        if lend:
            cash += 1 if good else -1
            moved = min(args.shift, mass[g, b])
            mass[g, b] -= moved
            mass[g, min(b + 1, 6) if good else max(b - 1, 0)] += moved
        if t + 1 in steps:
            rows.append({"seed": seed, "steps": t + 1, "recall": (tp / (tp + fn)).tolist(),
                         "mean_bin": (mass @ np.arange(1, 8)).tolist(), "return": cash})
    return rows


def interval(values) -> str:
    from scipy import stats

    x = np.asarray(values, float)
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)) if len(x) > 1 else float("nan")
    return f"{x.mean():.3f} ± {half:.3f}" if abs(x.mean()) < 100 else f"{x.mean():,.0f} ± {half:,.0f}"


def welch(a, b) -> str:
    from scipy import stats

    a, b = np.asarray(a, float), np.asarray(b, float)
    if np.array_equal(a, b) or (a.std() == 0 and b.std() == 0):
        return "1" if a.mean() == b.mean() else "0"
    p = stats.ttest_ind(a, b, equal_var=False).pvalue
    return "< 0.001" if p < 0.001 else f"{p:.3f}" if p < 0.01 else f"{p:.2f}"


def table(mfg: list[dict], ours: list[dict], steps, restatement: list[dict] = ()) -> str:
    columns = (("recall G1", lambda r: r["recall"][0]), ("recall G2", lambda r: r["recall"][1]),
               ("mean bin G1", lambda r: r["mean_bin"][0]), ("mean bin G2", lambda r: r["mean_bin"][1]),
               ("return", lambda r: r["return"]))
    lines = ["| steps | side | " + " | ".join(name for name, _ in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for n in steps:
        theirs = [r for r in mfg if r["steps"] == n]
        mine = [r for r in ours if r["steps"] == n]
        lines.append(f"| {n:,} | ml-fairness-gym | " + " | ".join(interval([f(r) for r in theirs]) for _, f in columns) + " |")
        lines.append("| | ours (mass_shift) | " + " | ".join(interval([f(r) for r in mine]) for _, f in columns) + " |")
        lines.append("| | Welch p | " + " | ".join(welch([f(r) for r in theirs], [f(r) for r in mine])
                                                   for _, f in columns) + " |")
        third = [r for r in restatement if r["steps"] == n]
        if third:
            lines.append(f"| | restated ({len(third)} seeds) | " + " | ".join(interval([f(r) for r in third])
                                                                         for _, f in columns) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mfg", type=Path, help="ml-fairness-gym checkout (work tree or git directory)")
    parser.add_argument("deps", type=Path, help="folder for its dependencies (pip --target)")
    parser.add_argument("--steps", default="1000,5000,10000,20000", help="step counts, comma-separated")
    parser.add_argument("--seeds", type=positive, default=5, help="seeds 0..N-1 on each side")
    parser.add_argument("--burn-in", type=int, default=50, help="decisions approved unconditionally first")
    parser.add_argument("--shift", type=float, default=0.01, help="mass moved per loan outcome")
    parser.add_argument("--probs", choices=("mfg", "table3"), default="mfg",
                        help="repayment table: ml-fairness-gym's (default) or seed 002's Table 3")
    parser.add_argument("--workers", type=positive, default=2, help="processes for ml-fairness-gym's runs")
    parser.add_argument("--retrain", action="store_true", help="retrain its agent every step (slow; its default)")
    parser.add_argument("--restated", type=int, default=160, help="seeds of the numpy restatement (0: none)")
    parser.add_argument("--json", type=Path, help="also write every run's numbers here")
    args = parser.parse_args(argv)
    try:
        steps = sorted({int(s) for s in args.steps.split(",")})
    except ValueError:
        parser.error(f"--steps: comma-separated whole numbers, got {args.steps!r}")
    if steps[0] < 1:
        parser.error(f"--steps: every count must be at least 1, got {steps[0]}")
    if args.burn_in < 0:
        parser.error(f"--burn-in: must be at least 0, got {args.burn_in}")
    if args.restated < 0:
        parser.error(f"--restated: must be at least 0, got {args.restated}")
    if not 0 < args.shift <= 1:
        parser.error(f"--shift: must be in (0, 1], got {args.shift}")
    if not args.mfg.exists():
        parser.error(f"MFG: {args.mfg} does not exist")
    args.probs = MFG_PROBS if args.probs == "mfg" else TABLE3_PROBS
    args.deps.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        code, stubs = checkout(args.mfg.resolve(), Path(tmp)), stub(Path(tmp))
        dependencies(args.deps.resolve())
        chunks = [list(range(args.seeds))[w::args.workers] for w in range(min(args.workers, args.seeds))]
        with ThreadPoolExecutor(len(chunks)) as pool:
            parts = list(pool.map(lambda c: run_mfg(code, args.deps.resolve(), stubs, c, steps, args), chunks))
    mfg = [r for part in parts for r in part]
    ours = [r for seed in range(args.seeds) for r in run_ours(seed, steps, args)]
    print(f"repayment table {list(args.probs)}, burn-in {args.burn_in}, shift {args.shift}, seeds 0-{args.seeds - 1}; "
          f"its thresholds seen after the burn-in: {sorted({t for r in mfg for t in r['thresholds_seen']})}")
    third = [r for seed in range(1000, 1000 + args.restated) for r in restated(seed, steps, args)]
    print(table(mfg, ours, steps, third))
    n = 10_000 if 10_000 in steps else max(steps)  # seed 002's horizon
    readings = {label: [r for seed in range(args.seeds) for r in run_ours(seed, steps, args, policy, extra) if r["steps"] == n]
                for label, policy, extra in READINGS}
    print(f"\nOur readings of Max-util on the same dynamics, {n:,} steps, seeds 0-{args.seeds - 1} "
          f"(Welch p against ml-fairness-gym's):\n")
    theirs = [r for r in mfg if r["steps"] == n]
    print("| reading | recall G1 | recall G2 | return | p (G1 / G2 / return) |\n|---|---|---|---|---|")
    for label, rows in readings.items():
        cells = [[r["recall"][0] for r in rows], [r["recall"][1] for r in rows], [r["return"] for r in rows]]
        ref = [[r["recall"][0] for r in theirs], [r["recall"][1] for r in theirs], [r["return"] for r in theirs]]
        print(f"| {label} | " + " | ".join(interval(c) for c in cells) + " | "
              + " / ".join(welch(a, b) for a, b in zip(ref, cells)) + " |")
    if args.json:
        args.json.write_text(json.dumps({"mfg": mfg, "ours": ours, "restated": third, "readings": readings}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
