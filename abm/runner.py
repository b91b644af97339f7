"""Run one scenario into a self-describing run folder, atomically.

The folder is written under a temporary name beside its final name and renamed only once
every file is complete, so a crash never leaves a folder that looks finished. A run whose
final folder already exists (same config hash) is not recomputed: nothing computed is lost.
A complete folder computed by other code (``abm.provenance``) is set aside, not overwritten.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from abm import __version__
from abm.config import config_hash, scenario_to_dict
from abm.errors import InvariantError, UserError
from abm.provenance import code_fingerprint, differs, recorded_fingerprint, set_aside

COMPLETE_MARKER = "summary.json"  # written last: its presence means the folder is complete


def run_name(scenario) -> str:
    return f"{scenario.name}-{scenario.policy.name}-seed{scenario.seed}-{config_hash(scenario)}"


def is_complete(folder: Path) -> bool:
    return (folder / COMPLETE_MARKER).is_file() and not folder.name.startswith(".tmp-")


def safe_child(root: Path, name: str) -> Path:
    """``root/name``, refused if it would escape ``root`` (via '..' or symlinks)."""
    root_resolved = root.resolve()
    target = (root / name).resolve()
    if root_resolved != target and root_resolved not in target.parents:
        raise UserError(f"output path {root / name} escapes the output root {root}")
    return root / name


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    pq.write_table(table, path, compression="zstd")


def ledger_profit(events: pd.DataFrame, tau_interest: float) -> float:
    """Bank profit recomputed from the event log alone."""
    kind = events["kind"].astype(str)
    repaid = events.loc[kind == "repay", "amount"].sum()
    defaulted = events.loc[kind == "default", "amount"].sum()
    return float(tau_interest * repaid - defaulted)


def check_run(sim, episodes: pd.DataFrame, events: pd.DataFrame | None) -> None:
    """End-of-run invariants: the world's own, the event ledger and the metric table."""
    sim.world.check_invariants()
    optional = ("inequality_ratio", *getattr(sim.world, "nullable_metrics", ()))  # e.g. recall before any repayer
    required = [c for c in episodes.columns if c not in optional]
    if episodes[required].isna().any().any():
        bad = [c for c in required if episodes[c].isna().any()]
        raise InvariantError(f"invariant 'no NaN in required metrics' broken: {', '.join(bad)}")
    if "profit" in episodes.columns and not np.isclose(float(episodes["profit"].sum()), sim.world.profit_total,
                                                       rtol=1e-9, atol=1e-6):
        raise InvariantError(f"invariant 'episode profits sum to the bank profit' broken: "
                             f"{float(episodes['profit'].sum()):.6f} vs {sim.world.profit_total:.6f}")
    if events is not None and "decision_prob" in events.columns:
        probs = events["decision_prob"].to_numpy(dtype=float)
        probs = probs[~np.isnan(probs)]  # events other than decisions carry none
        if np.any((probs < 0) | (probs > 1)):
            raise InvariantError(f"invariant 'decision probabilities in [0, 1]' broken: "
                                 f"{probs[(probs < 0) | (probs > 1)][:3].tolist()}")
    tau = getattr(getattr(sim.scenario, "population", None), "tau_interest", None)
    ledger_check = getattr(sim.world, "ledger_check", None)  # a family's own ledger (score families)
    if events is not None and callable(ledger_check):
        ledger_check(events)
    elif events is not None and tau is not None:
        ledger = ledger_profit(events, tau)
        if not np.isclose(ledger, sim.world.profit_total, rtol=1e-9, atol=1e-6):
            raise InvariantError(f"invariant 'profit equals the event ledger' broken: "
                                 f"ledger {ledger:.6f}, bank {sim.world.profit_total:.6f}")
        for g in sim.world.group_names:
            col = f"applications_{g}"
            if col in episodes.columns:
                n_events = int(((events["kind"].astype(str) == "apply") & (events["group"].astype(str) == g)).sum())
                if n_events != int(episodes[col].sum()):
                    raise InvariantError(f"invariant 'counts consistent' broken: {col} {int(episodes[col].sum())} "
                                         f"vs {n_events} apply events")


def execute(scenario, *, on_episode: Callable[[dict], None] | None = None, policy=None):
    """Simulate ``scenario``; return (sim, episodes frame, events frame or None)."""
    from abm.engine import Simulation

    sim = Simulation(scenario, policy=policy)
    sim.run(on_episode=on_episode)
    episodes = pd.DataFrame(sim.episode_rows)
    events = sim.log.to_frame() if sim.log.enabled else None
    check_run(sim, episodes, events)
    return sim, episodes, events


def run_to_folder(scenario, out_root: str | Path | None = None, *, on_episode=None,
                  reuse: bool = True, policy=None, name: str | None = None, stale: str = "recompute",
                  notify: Callable[[str], None] | None = None) -> tuple[Path, bool]:
    """Run ``scenario`` into ``out_root/<run name>``. Returns (folder, computed_now).

    A complete folder of the same name is reused when ``reuse`` and it was computed by this code
    (or by code of unknown fingerprint). One computed by other code is set aside and recomputed
    (``stale="recompute"``) or reused (``stale="reuse"``). ``reuse=False`` sets any complete
    folder aside and recomputes. ``notify`` receives a line whenever a folder is set aside or a
    stale one reused."""
    if stale not in ("recompute", "reuse"):
        raise ValueError(f"stale must be 'recompute' or 'reuse', got {stale!r}")
    root = Path(out_root or scenario.outputs.root)
    created = _first_missing(root)  # removed again if the run fails: a failed run leaves no folder
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{root}: cannot create output folder ({exc.strerror})") from None
    try:
        return _run_into(root, scenario, on_episode, reuse, policy, name, stale, notify or (lambda line: None))
    except BaseException:
        if created is not None:
            _remove_empty_tree(created, root)
        raise


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (None if ``path`` exists)."""
    missing = None
    for p in (path, *path.parents):
        if p.exists():
            break
        missing = p
    return missing


def _remove_empty_tree(top: Path, leaf: Path) -> None:
    """rmdir ``leaf`` and its parents up to ``top`` while they are empty (nothing else's is lost)."""
    for p in (leaf, *leaf.parents):
        try:
            p.rmdir()
        except OSError:
            return
        if p == top:
            return


def _run_into(root: Path, scenario, on_episode, reuse: bool, policy, name: str | None, stale: str,
              notify: Callable[[str], None]) -> tuple[Path, bool]:
    final = safe_child(root, name or run_name(scenario))
    if is_complete(final):
        old = recorded_fingerprint(final)
        if reuse and not differs(old):
            return final, False
        if reuse and stale == "reuse":
            notify(f"{final}: computed by other code (fingerprint {old}, now {code_fingerprint()}); reused")
            return final, False
        why = "computed by other code" if reuse else "recomputing on request"
        notify(f"{final}: {why} (fingerprint {old or 'unknown'}, now {code_fingerprint()}); "
               f"the old folder is kept as {set_aside(final).name}")
    if final.exists() and not is_complete(final):
        raise UserError(f"{final} exists but is not a complete run folder; move it away first")
    tmp = safe_child(root, f".tmp-{final.name}-{uuid.uuid4().hex[:8]}")
    started = time.perf_counter()
    sim, episodes, events = execute(scenario, on_episode=on_episode, policy=policy)
    wall = time.perf_counter() - started
    try:
        tmp.mkdir()
        write_folder(tmp, scenario, sim, episodes, events, wall)
        os.replace(tmp, final) if not final.exists() else None
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        reason = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        error = UserError(f"{root}: cannot write run folder ({reason})")
        error.errno = exc.errno  # a study stops on a full or read-only output folder (abm.study_exec)
        raise error from None
    if tmp.exists():  # another process finished the same run first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return final, True


def write_folder(folder: Path, scenario, sim, episodes: pd.DataFrame, events: pd.DataFrame | None, wall: float) -> None:
    resolved = scenario_to_dict(scenario)
    resolved["abm_version"] = __version__
    (folder / "scenario.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    write_parquet(episodes, folder / "episodes.parquet")
    if events is not None:
        write_parquet(events, folder / "events.parquet")
    write_parquet(sim.world.agents_table(), folder / "agents.parquet")
    if callable(getattr(sim.policy, "prepare", None)):  # a trained policy: its weights + config (policies/deep)
        sim.policy.save(folder / "policy")
    final = episodes.iloc[-1].to_dict() if len(episodes) else {}
    summary: dict[str, Any] = {
        "abm_version": __version__,
        "family": scenario.family,
        "policy": scenario.policy.name,
        "objective": scenario.objective,
        "seed": scenario.seed,
        "config_hash": config_hash(scenario),
        "code_fingerprint": code_fingerprint(),
        "episodes": int(len(episodes)),
        "events": int(sim.log.count),
        "final": {k: _jsonable(v) for k, v in final.items()},
        "world": sim.world.summary(),
        "policy_state": sim.policy.state() if sim.policy is not None else {},
        "wall_seconds": round(wall, 3),
        "invariants": "passed",
    }
    headline = getattr(sim.world, "headline_summary", None)  # a family's headline numbers (beta_belief:
    if callable(headline):                                   # exact vs simulated), never over the above
        summary.update({k: v for k, v in headline().items() if k not in summary})
    path = folder / COMPLETE_MARKER
    path.write_text(json.dumps(summary, indent=2, default=_jsonable))


def _jsonable(v: Any) -> Any:
    if isinstance(v, (np.floating, float)):
        return None if not np.isfinite(v) else float(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, np.ndarray):
        return [_jsonable(x) for x in v.tolist()]
    return v
