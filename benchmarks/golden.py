"""Golden digests: SHA-256 of every run file of a fixed matrix of small runs.

A refactor or speed-up must leave these unchanged. Run before and after and compare:

    python benchmarks/golden.py --out /tmp/before.json
    (change the code)
    python benchmarks/golden.py --out /tmp/after.json --compare /tmp/before.json

Covers every scenario file with its own policy and every registered policy on a family it
fits (deep lenders at a tiny training budget), a study with its aggregate and report tables,
and a gym trajectory. ``summary.json`` is compared without its wall time and code
fingerprint (both change by design), a study without its times (``runs.csv``,
``run_times.csv``, the report's Time section) and the study file's path in its manifest.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from oneline import OneLineParser

ROOT = Path(__file__).resolve().parents[1]
S = ROOT / "scenarios"
EUT = ["population.n_male=150", "population.n_female=150", "episodes.count=3"]
CREDIT = ["population.size=200", "episodes.count=2", "episodes.horizon=200"]
FICO = ["population.size=300", "episodes.count=2", "episodes.horizon=300"]
ADM = ["population.size=200", "episodes.count=2", "episodes.horizon=60"]
BETA = ["population.size=100", "episodes.count=2", "episodes.horizon=10", "outputs.events=true"]
DEEP = ["policy.total_timesteps=300"]

CASES: dict[str, tuple[str, list[str]]] = {
    "eutopia": ("eutopia.yaml", EUT),
    "eutopia-eval": ("eutopia-eval.yaml", EUT),
    "eutopia-immediate": ("eutopia.yaml", EUT + ["episodes.review=immediate", "arrivals.excite_on=applications"]),
    "eutopia-term": ("eutopia.yaml", EUT + ["dynamics.loan_term=0.5", "dynamics.approval_model=frozen"]),
    "lending-credit": ("lending-credit.yaml", CREDIT),
    "lending-consc": ("lending-conscientiousness.yaml", CREDIT),
    "lending-10": ("lending-10-groups.yaml", CREDIT),
    "fico": ("fico-delayed-impact.yaml", FICO),
    "admissions": ("admissions.yaml", ADM + ["policy.burn_in=20"]),
    "beta": ("beta-belief-loans.yaml", BETA),
}
for p in ("approve_all", "reject_all", "random", "wealth_threshold", "score_threshold", "demographic_parity",
          "equal_opportunity", "oracle", "one_step"):
    CASES[f"eutopia-{p}"] = ("eutopia.yaml", EUT + [f"policy.name={p}"])
CASES["eutopia-rl"] = ("eutopia.yaml", EUT + ["policy.name=rl", "objective=outcome:social_welfare"])
CASES["eutopia-perl"] = ("eutopia.yaml", EUT + ["policy.name=perl", "objective=two_sided:lagrangian:1.0"])
CASES["eutopia-rl-pre"] = ("eutopia-eval.yaml", EUT + ["policy.name=rl", "policy.pretrain_episodes=2",
                                                       "objective=dm:rawlsian"])
for p in ("max_util", "eo_threshold", "dp_threshold", "single_threshold", "classifier"):
    CASES[f"credit-{p}"] = ("lending-credit.yaml", CREDIT + [f"policy.name={p}"])
    CASES[f"fico-{p}"] = ("fico-delayed-impact.yaml", FICO + [f"policy.name={p}"])
for p in ("ppo", "dqn", "lag_ppo", "a_ppo", "elbert_po", "bisim_ppo", "bisim_dqn"):
    CASES[f"credit-{p}"] = ("lending-credit.yaml", CREDIT + [f"policy.name={p}"] + DEEP)
CASES["admissions-ppo"] = ("admissions.yaml", ADM + ["policy.name=ppo"] + DEEP)
CASES["admissions-bisim"] = ("admissions.yaml", ADM + ["policy.name=bisim_ppo"] + DEEP)
# the deep lenders as they train at full budget, in small: lean learners on several worlds, the
# Bisimulator's outer iterations with dynamics phases (probes from the live world, T_psi fits)
LEAN = ["policy.backend=lean"]
PHASE = ["policy.outer_steps=256", "policy.dynamics_every=2", "policy.dynamics_iterations=4",
         "policy.dynamics_rollout=64", "policy.probe_envs=3"]
CASES["credit-ppo-lean"] = ("lending-credit.yaml", CREDIT + ["policy.name=ppo", "policy.total_timesteps=2048",
                                                             "policy.n_envs=4"] + LEAN)
CASES["consc-dqn-lean"] = ("lending-conscientiousness.yaml", CREDIT + ["policy.name=dqn", "policy.total_timesteps=1500",
                                                                       "policy.learning_starts=200"] + LEAN)
CASES["credit-elbert-lean"] = ("lending-credit.yaml", CREDIT + ["policy.name=elbert_po", "policy.total_timesteps=1024"] + LEAN)
for fam, (file, base) in {"credit": ("lending-credit.yaml", CREDIT), "ten": ("lending-10-groups.yaml", CREDIT),
                          "admissions": ("admissions.yaml", ADM)}.items():
    CASES[f"{fam}-bisim-phase"] = (file, base + ["policy.name=bisim_ppo", "policy.total_timesteps=1024",
                                                 "policy.reward_target=policy"] + LEAN + PHASE)
CASES["credit-bisim_dqn-phase"] = ("lending-credit.yaml", CREDIT + ["policy.name=bisim_dqn", "policy.total_timesteps=1024",
                                                                    "policy.learning_starts=200"] + LEAN + PHASE)
for p in ("fair_lp", "fair_cce", "optimistic", "conservative", "race_blind", "unconstrained",
          "explore_then_commit"):
    CASES[f"beta-{p}"] = ("beta-belief-loans.yaml", BETA + [f"policy.name={p}"])
# attention_allocation: its baselines (the greedy one draws from the policy stream) and a deep learner
ATT = ["episodes.count=2", "episodes.horizon=30"]
CASES["attention"] = ("attention-allocation.yaml", ATT)
CASES["attention-harder-uniform"] = ("attention-allocation-harder.yaml", ATT + ["policy.name=uniform_allocation"])
CASES["attention-elbert-lean"] = ("attention-allocation.yaml", ATT + ["policy.name=elbert_po",
                                                                       "policy.total_timesteps=1024"] + LEAN)
# infectious_disease: the greedy baseline, the uniform one on an SBM, the full Bisimulator (its lever, live probes)
INF = ["episodes.count=3"]
CASES["infectious"] = ("infectious-disease.yaml", INF)
CASES["infectious-sbm-uniform"] = ("infectious-disease.yaml", INF + ["graph.generator=sbm", "graph.sizes=[30, 20]",
                                                                      "policy.name=uniform_treatment"])
CASES["infectious-bisim-phase"] = ("infectious-disease.yaml", INF + ["policy.name=bisim_ppo", "policy.total_timesteps=1024"]
                                   + LEAN + PHASE)

DROP = ("wall_seconds", "code_fingerprint")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def folder_digest(folder: Path) -> dict[str, str]:
    out = {}
    for f in sorted(folder.rglob("*")):
        if not f.is_file():
            continue
        rel = str(f.relative_to(folder))
        if f.name == "summary.json":
            data = json.loads(f.read_text())
            for k in DROP:
                data.pop(k, None)
            out[rel] = sha(json.dumps(data, sort_keys=True).encode())
        elif f.suffix == ".zip":  # SB3 zips: the weights (their "data" member pickles a start
            import zipfile     # time, memory addresses and the source path of a closure)
            with zipfile.ZipFile(f) as z:  # SB3's .pth weights, the lean learners' .npy arrays
                out[rel] = sha(b"".join(z.read(n) for n in sorted(z.namelist()) if n.endswith((".pth", ".npy"))))
        else:
            out[rel] = sha(f.read_bytes())
    return out


def cli(*args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "abm.cli", *args], capture_output=True, text=True, cwd=ROOT)
    if r.returncode:
        raise SystemExit(f"abm {' '.join(args)} failed ({r.returncode}): {r.stderr[-2000:]}")


def run_case(file: str, sets: list[str], out: Path) -> Path:
    """One run in this process (the code under ROOT), as ``abm run FILE --set ...`` would do it;
    ``policy.name=X`` switches the policy like ``--policy X`` (its parameters start fresh)."""
    sys.path.insert(0, str(ROOT))
    from abm.config import load_scenario
    from abm.runner import run_to_folder

    policy = next((s.split("=", 1)[1] for s in sets if s.startswith("policy.name=")), None)
    rest = [s for s in sets if not s.startswith("policy.name=")]
    folder, _ = run_to_folder(load_scenario(S / file, rest, policy=policy), out)
    return folder


def main() -> None:
    ap = OneLineParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--compare")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--resume", action="store_true", help="keep the cases already in --out")
    args = ap.parse_args()
    result: dict[str, dict[str, str]] = {}
    out_file = Path(args.out)
    if args.resume and out_file.exists():
        result = json.loads(out_file.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, (file, sets) in CASES.items():
            if (args.only and name not in args.only) or name in result:
                continue
            run = run_case(file, sets, tmp / name)
            result[name] = {"folder": run.name, **folder_digest(run)}
            out_file.write_text(json.dumps(result, indent=1, sort_keys=True))  # kept if a later case fails
            print(name, "ok", flush=True)
        if (not args.only or "study" in args.only) and "study" not in result:
            study = tmp / "study"
            cli("study", str(S / "studies" / "smoke.yaml"), "--workers", "0", "--out", str(study))
            cli("report", str(study))
            digest = {k: v for k, v in folder_digest(study).items()
                      if not k.startswith("runs/") or k.endswith(("events.parquet", "episodes.parquet"))}
            # runs.csv and run_times.csv hold wall and CPU times, the report's Time section sums
            # them, the manifest names the study file's absolute path: all differ by design
            digest = {k: v for k, v in digest.items() if not k.endswith((".lock", "runs.csv", "run_times.csv"))}
            comparison = (study / "report" / "comparison.md").read_text().split("## Time")[0].rstrip()
            digest["report/comparison.md"] = sha(comparison.encode())
            manifest = json.loads((study / "manifest.json").read_text())
            manifest.pop("source", None)
            digest["manifest.json"] = sha(json.dumps(manifest, sort_keys=True).encode())
            result["study"] = digest
            print("study ok", flush=True)
        if (not args.only or "gym" in args.only) and "gym" not in result:
            sys.path.insert(0, str(ROOT))
            import numpy as np
            from abm.gym import make_env
            traj = []
            for file, sets in (("lending-credit.yaml", CREDIT), ("admissions.yaml", ADM), ("eutopia.yaml", EUT)):
                env = make_env(S / file, *sets)
                rng = np.random.default_rng(0)
                obs, info = env.reset(seed=3)
                for _ in range(400):
                    obs, r, term, trunc, info = env.step(int(rng.integers(2)))
                    traj.append((obs.tobytes(), r, trunc))
                    if trunc:
                        obs, info = env.reset()
            result["gym"] = {"trajectory": sha(repr(traj).encode())}
            print("gym ok", flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True))
    if args.compare:
        old = json.loads(Path(args.compare).read_text())
        bad = []
        for case in sorted(set(old) | set(result)):
            if args.only and case not in result:
                continue
            a, b = old.get(case, {}), result.get(case, {})
            for k in sorted(set(a) | set(b)):
                if a.get(k) != b.get(k):
                    bad.append(f"{case}: {k}: {a.get(k)} -> {b.get(k)}")
        print("\n".join(bad) if bad else f"identical: {len(result)} cases")
        raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
