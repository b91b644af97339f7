"""Hawkes processes with an exponential kernel: the one home of their maths (pure numpy).

Intensity of group g (Eutopia, docs/MODEL.md "Eutopia"):

    lambda_g(t) = f(mu_g(t)) + E_g(t),   E_g(t) = alpha * sum_{t_j in H_g, t_j <= t} exp(-beta (t - t_j))

where H_g holds the excitation times (the group's approvals, or its applications). E_g is
kept incrementally as a *state* (level, time of the level): between excitations it only
decays, ``E(t + dt) = E(t) exp(-beta dt)`` (``decay``); at an excitation time it decays to
that time and jumps by alpha per event there, ``E <- E exp(-beta dt) + alpha * count``
(``excite``). ``excitation_path`` evaluates E at many sorted times from the excitation times
(the dashboard's trace), ``integrated_excitation`` integrates E between excitations (PERL's
likelihood), ``compensator`` integrates lambda (the time-rescaling test).

Bit-for-bit contract: every user computes the decay as ``state * np.exp(-beta * dt)``, in this
operation order (``dt`` computed by the caller as ``t - t_state``), scalar where the caller is
scalar and vectorised where it is vectorised, so results are identical to the formulas these
functions replaced. Keep it that way: ``exp(-beta * dt) * state`` or ``exp(-beta * t) /
exp(-beta * t_state)`` round differently and would change every Eutopia run.
``benchmarks/reference_eutopia.py`` keeps its own copy on purpose (the independent reference).

Compensator: for ``lambda(t) = scale * (base + alpha * sum_{t_j < t} exp(-beta (t - t_j)))``,
``Lambda(t) = scale * (base * t + alpha/beta * sum_{t_j < t} (1 - exp(-beta (t - t_j))))``;
under the model the increments of Lambda between consecutive events are i.i.d. Exp(1)
(time-rescaling theorem), so a KS test of them against Exp(1) is a goodness-of-fit test.
The excitation times may differ from the event times (Eutopia excites on approvals).
"""

from __future__ import annotations

import numpy as np


def decay(state, dt, beta: float):
    """The excitation ``dt`` after a state of level ``state``, no excitation in between.

    ``state * exp(-beta * dt)``; scalars or numpy arrays (broadcast). The world's intensity,
    its block sampler and every function below use this.
    """
    return state * np.exp(-beta * dt)


def excite(state, dt, beta: float, jump):
    """The new state at an excitation time ``dt`` after ``state``: decay there, then ``+ jump``.

    ``jump`` is alpha times the number of excitations at that time (1.0 for the unit-alpha
    sum of ``compensator``). The formula is ``decay(...) + jump`` written out: the world calls
    this once per excitation (once per application with ``excite_on: applications``), so it
    saves the nested call.
    """
    return state * np.exp(-beta * dt) + jump


def excitation_path(times: np.ndarray, jump_times: np.ndarray, alpha: float, beta: float,
                    start: float = 0.0, initial: float = 0.0) -> np.ndarray:
    """E(t) = alpha sum_{t_j <= t} exp(-beta (t - t_j)) + initial exp(-beta (t - start)) at ``times``.

    ``times`` sorted, all >= ``start``; ``jump_times`` (any order, ties allowed) after
    ``start``; the value at a jump time includes the jump. A linear recurrence over the
    distinct jump times (``excite``), then one vectorised ``decay`` from the last state
    before each time.
    """
    at, count = np.unique(jump_times, return_counts=True)
    after = np.empty(len(at))  # excitation just after each jump time
    level, last = initial, start
    for k, (t, c) in enumerate(zip(at, count)):  # one step per distinct jump time
        level = excite(level, t - last, beta, alpha * c)
        last = t
        after[k] = level
    idx = np.searchsorted(at, times, side="right") - 1
    ref_level = np.where(idx >= 0, after[np.maximum(idx, 0)] if len(at) else initial, initial)
    ref_time = np.where(idx >= 0, at[np.maximum(idx, 0)] if len(at) else start, start)
    return decay(ref_level, times - ref_time, beta)


def integrated_excitation(state, dt, beta: float):
    """The integral of the excitation over ``dt`` after a state of level ``state``, no
    excitation in between: ``state * (1 - exp(-beta dt)) / beta``, written
    ``state * (-expm1(-beta * dt)) / beta`` (accurate for small ``beta dt``). PERL's
    application likelihood integrates the compensator with it."""
    return state * (-np.expm1(-beta * dt)) / beta


def compensator(event_times, excite_times, base: float, alpha: float, beta: float, scale: float = 1.0,
                start: float = 0.0) -> np.ndarray:
    """Lambda(t_k) - Lambda(start) at each event time (events and excitations sorted inside).

    Here an excitation at the same time as an event does not count for it (t_j < t).
    """
    events = np.sort(np.asarray(event_times, dtype=float))
    excites = np.sort(np.asarray(excite_times, dtype=float))
    out = np.empty(len(events))
    decayed, count, last, j = 0.0, 0, start, 0  # decayed = sum_{t_j < last} exp(-beta (last - t_j))
    for k, t in enumerate(events):
        while j < len(excites) and excites[j] < t:
            decayed = excite(decayed, excites[j] - last, beta, 1.0)
            last = excites[j]
            count += 1
            j += 1
        decayed_now = decay(decayed, t - last, beta)
        out[k] = scale * (base * (t - start) + alpha / beta * (count - decayed_now))
    return out


def rescaled_intervals(event_times, excite_times, base, alpha, beta, scale=1.0, start=0.0) -> np.ndarray:
    """Compensator increments between consecutive events: i.i.d. Exp(1) under the model."""
    lam = compensator(event_times, excite_times, base, alpha, beta, scale, start)
    return np.diff(np.concatenate([[0.0], lam]))


def time_rescaling_ks(event_times, excite_times, base, alpha, beta, scale=1.0, start=0.0):
    """KS test of the rescaled intervals against Exp(1): scipy's KstestResult."""
    from scipy import stats  # the tests' dependency only: the world imports this module too

    return stats.kstest(rescaled_intervals(event_times, excite_times, base, alpha, beta, scale, start), "expon")
