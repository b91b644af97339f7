"""The Bisimulator's One-Plus-One search over omega, optionally sped up by speculative helpers.

A (1 + 1) search is sequential: each candidate is a mutation of the best point so far, so the
next one is known only once the current one is scored. But most candidates fail (on the
Bisimulator's phases about five in six), and after a failure the next candidate is fully
determined in advance: the same parent, the step size times 0.84 (nevergrad's one-fifth rule),
and the next Gaussian draws of the search's own random state. ``predict_failures`` computes the
candidates that k failures in a row would lead to, without touching the optimiser.

``one_plus_one`` runs the search exactly as the plain loop ``ask, evaluate, tell`` would: the
optimiser sees the same asks and tells in the same order. With helpers (processes forked from
this one, so they hold the same phase state), while this process scores the current candidate
the helpers score the predicted ones; a helper's score is used only when the optimiser's next
candidate is bit for bit the one predicted. The objective of a phase is a pure function of omega
(common random numbers, docs/MODEL.md), so a score computed in a helper is the score this
process would compute: the search, its result and everything after are the same with any
number of helpers. A wrong prediction (a success, a tie, another nevergrad) costs only the
helper's time; a helper that fails or dies is not asked again.

The number of processes is an execution setting, like torch's device: the environment variable
``ABM_PHASE_WORKERS`` (default 1, no helper), not part of a run's configuration. It pays where
cores are idle (a single run on a workstation); a study that already keeps every core busy with
runs gains nothing from it.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from multiprocessing.connection import Connection, Pipe
from typing import Callable

import numpy as np

from abm.errors import UserError

PHASE_WORKERS_ENV = "ABM_PHASE_WORKERS"
MAX_PHASE_WORKERS = 64
FAILURE_FACTOR = 0.84  # nevergrad's OnePlusOne: sigma *= 0.84 after a candidate that is not better


def phase_workers() -> int:
    """Processes per dynamics phase (this one included) from ``ABM_PHASE_WORKERS``: 1 to 64,
    1 when unset; anything else is a one-line ``UserError``."""
    raw = os.environ.get(PHASE_WORKERS_ENV, "").strip()
    if not raw:
        return 1
    n = int(raw) if re.fullmatch(r"[0-9]{1,6}", raw) else 0
    if not 1 <= n <= MAX_PHASE_WORKERS:
        raise UserError(f"{PHASE_WORKERS_ENV}={raw!r}: must be a whole number from 1 to {MAX_PHASE_WORKERS} "
                        "(processes per Bisimulator dynamics phase)")
    if n > 1 and not hasattr(os, "fork"):
        warnings.warn(f"{PHASE_WORKERS_ENV}={n}: this platform cannot fork; the dynamics phases run in one process",
                      stacklevel=2)
        return 1
    return n


def one_plus_one_optimizer(start: np.ndarray, low: np.ndarray, high: np.ndarray, budget: int, seed: int):
    """The dynamics phase's search: nevergrad's OnePlusOne over the box [low, high] from ``start``,
    its Gaussian step a sixth of the box's narrowest side (3 sigma inside the box), its random
    state seeded by ``seed``."""
    import nevergrad as ng  # here, not at the top: a 4 s import, and `abm policies` imports the Bisimulator

    with warnings.catch_warnings():  # nevergrad warns about its default sigma, replaced just below
        warnings.simplefilter("ignore")
        param = ng.p.Array(init=start).set_bounds(low, high)
    param.set_mutation(sigma=float(np.min(high - low)) / 6.0)
    param.random_state = np.random.RandomState(seed)
    return ng.optimizers.OnePlusOne(parametrization=param, budget=budget)


def _value(candidate) -> np.ndarray:
    return np.asarray(candidate.value, dtype=float)


def predict_failures(opt, k: int) -> list[np.ndarray]:
    """The next ``k`` candidates of nevergrad's OnePlusOne (Gaussian mutation, no noise handling)
    if the candidate being scored and the ``k - 1`` after it all fail: each is the current best
    point mutated by the next Gaussian draws of the optimiser's random state, with the step size
    shrunk by 0.84 per failure. The optimiser is left as it was (its random state is restored).
    An optimiser without these internals gives no predictions."""
    rng = getattr(opt, "_rng", None)
    sigma = getattr(opt, "_sigma", None)
    bests = getattr(opt, "current_bests", None)
    if k < 1 or rng is None or sigma is None or not bests or "pessimistic" not in bests:
        return []
    state = rng.get_state()
    try:
        steps = [rng.normal(0, 1, opt.dimension) for _ in range(k)]
    finally:
        rng.set_state(state)
    parent = bests["pessimistic"].parameter
    out = []
    for step in steps:
        sigma *= FAILURE_FACTOR
        out.append(_value(parent.spawn_child().set_standardized_data(sigma * step)))
    return out


class Helpers:
    """``n`` processes forked from this one, each scoring the omegas sent to it with
    ``evaluate`` (the state it closes over is the fork's copy). A context manager: leaving it
    closes the pipes (a helper exits on end of input) and reaps the processes."""

    def __init__(self, n: int, evaluate: Callable[[np.ndarray], float]):
        self.submitted = 0  # omegas sent (scored whether or not the search then used them)
        self.conns: list[Connection] = []
        self.pids: list[int] = []
        self.alive: list[bool] = []
        for _ in range(n):
            parent, child = Pipe()
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError as exc:  # no process to be had: fewer helpers (the search is the same)
                parent.close()
                child.close()
                warnings.warn(f"{PHASE_WORKERS_ENV}: could not start a helper process ({exc}); "
                              f"the phase runs with {len(self.conns)} helper(s)", stacklevel=2)
                break
            if pid == 0:  # the helper: never returns into the caller's code
                parent.close()
                for conn in self.conns:  # the earlier helpers' pipes: theirs and this process's to close
                    conn.close()
                _serve(child, evaluate)
            child.close()
            self.conns.append(parent)
            self.pids.append(pid)
            self.alive.append(True)

    def __len__(self) -> int:
        return len(self.conns)

    def submit(self, i: int, omega: np.ndarray) -> bool:
        if not self.alive[i]:
            return False
        try:
            self.conns[i].send_bytes(np.ascontiguousarray(omega, dtype=np.float64).tobytes())
            self.submitted += 1
            return True
        except OSError:
            self.alive[i] = False
            return False

    def result(self, i: int) -> float | None:
        """The score of helper ``i``'s last omega, or None when it failed (it is not asked again)."""
        try:
            reply = self.conns[i].recv_bytes()
        except (EOFError, OSError):
            reply = b""
        if len(reply) != 8:
            self.alive[i] = False
            return None
        return float(np.frombuffer(reply, dtype=np.float64)[0])

    def __enter__(self) -> "Helpers":
        return self

    def __exit__(self, *exc) -> None:
        for conn in self.conns:
            conn.close()
        for pid in self.pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _serve(conn: Connection, evaluate: Callable[[np.ndarray], float]) -> None:
    """A helper's loop: an omega in, its score out (8 bytes; an empty reply when scoring failed),
    until the pipe closes. Leaves with ``os._exit``: no atexit handler, buffer flush or
    finaliser of the parent's objects runs twice."""
    code = 0
    try:
        while True:
            try:
                msg = conn.recv_bytes()
            except EOFError:
                break
            try:
                loss = float(evaluate(np.frombuffer(msg, dtype=np.float64).copy()))
                conn.send_bytes(np.float64(loss).tobytes())
            except Exception:  # noqa: BLE001 -- the parent scores this omega itself
                conn.send_bytes(b"")
    except BaseException:  # noqa: BLE001 -- a broken pipe or a signal: just leave
        code = 1
    finally:
        os._exit(code)


def one_plus_one(opt, budget: int, evaluate: Callable[[np.ndarray], float],
                 helpers: Helpers | None = None) -> tuple[list[tuple[np.ndarray, float]], int]:
    """``budget`` rounds of ``ask, evaluate, tell`` on ``opt``; returns every (omega, score) in the
    order told and how many scores came from helpers. With helpers, the same asks and tells in
    the same order (see the module's docstring)."""
    told: list[tuple[np.ndarray, float]] = []
    from_helpers = 0
    n_help = len(helpers) if helpers is not None else 0
    cand = opt.ask()
    while True:
        omega = _value(cand)
        k = min(n_help, budget - len(told) - 1) if opt.num_tell > 0 else 0  # the first tell always improves
        specs = predict_failures(opt, k)
        sent = [helpers.submit(i, s) for i, s in enumerate(specs)] if specs else []
        loss = float(evaluate(omega))
        opt.tell(cand, loss)
        told.append((omega, loss))
        scores = [helpers.result(i) if ok else None for i, ok in enumerate(sent)]  # every reply read: pipes in step
        if len(told) == budget:
            break
        cand = opt.ask()
        for spec, score in zip(specs, scores):
            value = _value(cand)
            if score is None or not np.array_equal(value, spec):
                break
            opt.tell(cand, score)
            told.append((value, score))
            from_helpers += 1
            if len(told) == budget:
                return told, from_helpers
            cand = opt.ask()
    return told, from_helpers
