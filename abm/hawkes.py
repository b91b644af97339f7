"""Hawkes-process diagnostics: the exponential-kernel compensator and the time-rescaling test.

For ``lambda(t) = scale * (base + alpha * sum_{t_j < t} exp(-beta (t - t_j)))`` the compensator
is ``Lambda(t) = scale * (base * t + alpha/beta * sum_{t_j < t} (1 - exp(-beta (t - t_j))))``;
under the model the increments of Lambda between consecutive events are i.i.d. Exp(1)
(time-rescaling theorem), so a KS test of them against Exp(1) is a goodness-of-fit test.
The excitation times may differ from the event times (Eutopia excites on approvals).
"""

from __future__ import annotations

import numpy as np
from scipy import stats


def compensator(event_times, excite_times, base: float, alpha: float, beta: float, scale: float = 1.0,
                start: float = 0.0) -> np.ndarray:
    """Lambda(t_k) - Lambda(start) at each event time (events and excitations sorted inside)."""
    events = np.sort(np.asarray(event_times, dtype=float))
    excites = np.sort(np.asarray(excite_times, dtype=float))
    out = np.empty(len(events))
    decayed, count, last, j = 0.0, 0, start, 0  # decayed = sum_{t_j < last} exp(-beta (last - t_j))
    for k, t in enumerate(events):
        while j < len(excites) and excites[j] < t:
            decayed = decayed * np.exp(-beta * (excites[j] - last)) + 1.0
            last = excites[j]
            count += 1
            j += 1
        decayed_now = decayed * np.exp(-beta * (t - last))
        out[k] = scale * (base * (t - start) + alpha / beta * (count - decayed_now))
    return out


def rescaled_intervals(event_times, excite_times, base, alpha, beta, scale=1.0, start=0.0) -> np.ndarray:
    """Compensator increments between consecutive events: i.i.d. Exp(1) under the model."""
    lam = compensator(event_times, excite_times, base, alpha, beta, scale, start)
    return np.diff(np.concatenate([[0.0], lam]))


def time_rescaling_ks(event_times, excite_times, base, alpha, beta, scale=1.0, start=0.0):
    """KS test of the rescaled intervals against Exp(1): scipy's KstestResult."""
    return stats.kstest(rescaled_intervals(event_times, excite_times, base, alpha, beta, scale, start), "expon")
