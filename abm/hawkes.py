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


# -- marked and network excitation (abm.families.network; docs/MODEL.md "Social ties") -------
def decayed_sums(jump_times, marks, beta: float, times, strict: bool = True) -> np.ndarray:
    """``sum_{t_j < t} m_j exp(-beta (t - t_j))`` at each of ``times`` (``t_j <= t`` when not
    ``strict``), vectorised: within stretches where ``beta (t - t0) <= 500`` the sum is
    ``exp(-beta (t - t0)) (S(t0) + sum m_j exp(beta (t_j - t0)))``, all terms positive (no
    cancellation), carried from stretch to stretch with ``decay``. ``jump_times`` sorted."""
    jt = np.asarray(jump_times, dtype=float)
    m = np.broadcast_to(np.asarray(marks, dtype=float), jt.shape)
    t = np.asarray(times, dtype=float)
    out = np.zeros(t.shape)
    if len(jt) == 0 or t.size == 0:
        return out
    span = 500.0 / beta
    # stretch boundaries: the first jump of each stretch
    starts = [0]
    while True:
        nxt = int(np.searchsorted(jt, jt[starts[-1]] + span, side="right"))
        if nxt >= len(jt):
            break
        starts.append(nxt)
    bounds = starts + [len(jt)]
    level, t_level = 0.0, jt[0]  # the sum just after the previous stretch, at its last jump time
    after = np.empty(len(jt))  # the sum just after each jump
    for a, b in zip(bounds[:-1], bounds[1:]):
        t0 = jt[a]
        partial = np.cumsum(m[a:b] * np.exp(beta * (jt[a:b] - t0)))
        carried = decay(level, t0 - t_level, beta)
        after[a:b] = decay(carried + partial, jt[a:b] - t0, beta)
        level, t_level = after[b - 1], jt[b - 1]
    idx = np.searchsorted(jt, t, side="left" if strict else "right") - 1
    has = idx >= 0
    out[has] = decay(after[idx[has]], t[has] - jt[idx[has]], beta)
    return out


def marked_compensator(event_times, excite_times, marks, base: float, beta: float, start: float = 0.0) -> np.ndarray:
    """Lambda(t_k) - Lambda(start) for ``lambda(t) = base + sum_{t_j < t} m_j exp(-beta (t - t_j))``:
    ``base (t - start) + (sum_{t_j < t} m_j - sum_{t_j < t} m_j exp(-beta (t - t_j))) / beta``.
    The jump sizes ``m_j`` carry everything that multiplies the kernel (alpha, self-selection
    weights, tie weights): a class of applicants' compensator under network excitation is a sum of
    these (one per decay rate). Excitations at an event's own time do not count for it."""
    events = np.sort(np.asarray(event_times, dtype=float))
    order = np.argsort(np.asarray(excite_times, dtype=float), kind="stable")
    ex = np.asarray(excite_times, dtype=float)[order]
    mk = np.broadcast_to(np.asarray(marks, dtype=float), np.shape(excite_times))[order]
    total = np.concatenate([[0.0], np.cumsum(mk)])[np.searchsorted(ex, events, side="left")]
    return base * (events - start) + (total - decayed_sums(ex, mk, beta, events)) / beta


def marked_time_rescaling_ks(event_times, parts, base: float, start: float = 0.0):
    """KS test against Exp(1) of the increments of ``base t + sum of marked compensators``;
    ``parts``: (excite_times, marks, beta) per kernel. scipy's KstestResult."""
    from scipy import stats

    lam = marked_compensator(event_times, [], [], base, 1.0, start)
    for ex, mk, beta in parts:
        lam = lam + marked_compensator(event_times, ex, mk, 0.0, beta, start)
    return stats.kstest(np.diff(np.concatenate([[0.0], lam])), "expon")


class NetworkHawkesData:
    """The arrivals of a run with social ties, ready for the likelihood of ``fit_network_hawkes``.

    Model (frozen self-selection weights w_i): applicant i of group g applies at
    ``w_i ((a + alpha G_g(t)) / N_g + alpha_net E_i(t))``, ``G_g(t) = sum_{approvals m of g, t_m < t}
    exp(-beta (t - t_m))``, ``E_i(t) = sum_{approvals m of i's neighbours, t_m < t} a_{i j_m}
    exp(-beta (t - t_m))`` (one decay beta for both kernels). The neighbour terms of each
    application are gathered once as pairs (application, approval) within ``40 / beta_min`` before
    it (older terms are below exp(-40) of their initial size).
    ``indptr, indices, recv_in``: the graph in CSR form with ``recv_in[e]`` the weight with which an
    approval of ``indices[e]`` excites row e's applicant.
    """

    def __init__(self, app_t, app_i, appr_t, appr_j, group, weight, indptr, indices, recv_in, horizon: float,
                 beta_bounds: tuple[float, float] = (0.25, 16.0)):
        order = np.argsort(np.asarray(app_t, dtype=float), kind="stable")
        self.app_t = np.asarray(app_t, dtype=float)[order]
        self.app_i = np.asarray(app_i, dtype=np.int64)[order]
        order = np.argsort(np.asarray(appr_t, dtype=float), kind="stable")
        self.appr_t = np.asarray(appr_t, dtype=float)[order]
        self.appr_j = np.asarray(appr_j, dtype=np.int64)[order]
        self.group = np.asarray(group, dtype=np.int64)
        self.weight = np.asarray(weight, dtype=float)
        self.horizon = float(horizon)
        self.beta_bounds = beta_bounds
        n_groups = int(self.group.max()) + 1
        self.sizes = np.bincount(self.group, minlength=n_groups).astype(float)
        self.weight_sums = np.bincount(self.group, weights=self.weight, minlength=n_groups)
        self.app_g = self.group[self.app_i]
        indptr, indices = np.asarray(indptr, dtype=np.int64), np.asarray(indices, dtype=np.int64)
        recv_in = np.asarray(recv_in, dtype=float)
        rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        # c_j = sum_i w_i a_ij: the self-selection-weighted excitation one approval of j spreads
        self.spread = np.bincount(indices, weights=self.weight[rows] * recv_in, minlength=len(indptr) - 1)
        # (application, neighbour approval) pairs within the window
        window = 40.0 / beta_bounds[0]
        by_j = np.lexsort((self.appr_t, self.appr_j))
        t_sorted, j_sorted = self.appr_t[by_j], self.appr_j[by_j]
        stride = self.horizon + window + 1.0
        key = j_sorted * stride + t_sorted
        starts, lens = indptr[self.app_i], np.diff(indptr)[self.app_i]
        k_of = np.repeat(np.arange(len(self.app_i)), lens)
        e = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
        base = indices[e] * stride
        lo = np.searchsorted(key, base + self.app_t[k_of] - window, side="left")
        hi = np.searchsorted(key, base + self.app_t[k_of], side="left")
        count = hi - lo
        self.pair_k = np.repeat(k_of, count)
        m = np.repeat(lo - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
        self.pair_dt = self.app_t[self.pair_k] - t_sorted[m]
        self.pair_a = np.repeat(recv_in[e], count)
        self.log_w = float(np.log(self.weight[self.app_i]).sum())

    def features(self, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """X (events x 3) with lambda_k / w_k = X_k . (a, alpha, alpha_net), and the compensator
        coefficients C with Lambda(horizon) = C . (a, alpha, alpha_net)."""
        X = np.empty((len(self.app_t), 3))
        X[:, 0] = 1.0 / self.sizes[self.app_g]
        G = np.zeros(len(self.app_t))
        for g in range(len(self.sizes)):
            mine = self.app_g == g
            ex = self.appr_t[self.group[self.appr_j] == g]
            G[mine] = decayed_sums(ex, 1.0, beta, self.app_t[mine])
        X[:, 1] = G / self.sizes[self.app_g]
        X[:, 2] = np.bincount(self.pair_k, weights=self.pair_a * np.exp(-beta * self.pair_dt), minlength=len(self.app_t))
        tail = -np.expm1(-beta * (self.horizon - self.appr_t)) / beta  # integral of each kernel up to the horizon
        per_group = np.bincount(self.group[self.appr_j], weights=tail, minlength=len(self.sizes))
        C = np.array([np.sum(self.weight_sums / self.sizes) * self.horizon,
                      np.sum(self.weight_sums / self.sizes * per_group),
                      np.sum(self.spread[self.appr_j] * tail)])
        return X, C

    def negloglik(self, params) -> float:
        a, alpha, alpha_net, beta = params
        X, C = self.features(beta)
        lam = X @ np.array([a, alpha, alpha_net])
        if np.any(lam <= 0):
            return np.inf
        return float(C @ np.array([a, alpha, alpha_net]) - np.log(lam).sum() - self.log_w)


def fit_network_hawkes(data: NetworkHawkesData) -> dict[str, float]:
    """Maximum likelihood (a, alpha, alpha_net, beta) of ``NetworkHawkesData``'s model: for each
    beta the log-likelihood is concave in the linear parameters (L-BFGS-B with the exact
    gradient), and beta is profiled out (bounded scalar search on log beta). Standard errors from
    a central-difference Hessian of the negative log-likelihood at the optimum."""
    from scipy import optimize

    def inner(beta: float, start=None):
        X, C = data.features(beta)

        def f(theta):
            lam = X @ theta
            if np.any(lam <= 0):
                return np.inf, np.zeros(3)
            return float(C @ theta - np.log(lam).sum()), C - (X / lam[:, None]).sum(axis=0)

        x0 = np.array([1.0, 0.1, 0.01]) if start is None else start
        res = optimize.minimize(f, x0, jac=True, method="L-BFGS-B", bounds=[(1e-9, None)] * 3)
        return res.fun - data.log_w, res.x

    lo, hi = data.beta_bounds
    prof = optimize.minimize_scalar(lambda lb: inner(float(np.exp(lb)))[0], bounds=(np.log(lo), np.log(hi)),
                                    method="bounded", options={"xatol": 1e-5})
    beta = float(np.exp(prof.x))
    nll, theta = inner(beta)
    x = np.array([*theta, beta])
    step = 1e-4 * np.maximum(np.abs(x), 1e-3)
    hess = np.empty((4, 4))
    for i in range(4):
        for j in range(i, 4):
            def at(di, dj):
                y = x.copy()
                y[i] += di * step[i]
                y[j] += dj * step[j]
                return data.negloglik(y)
            hess[i, j] = hess[j, i] = (at(1, 1) - at(1, -1) - at(-1, 1) + at(-1, -1)) / (4 * step[i] * step[j])
    try:
        se = np.sqrt(np.diag(np.linalg.inv(hess)))
    except np.linalg.LinAlgError:
        se = np.full(4, np.nan)
    names = ("base", "alpha", "alpha_net", "beta")
    return {**dict(zip(names, map(float, x))), **{f"se_{k}": float(s) for k, s in zip(names, se)},
            "negloglik": float(nll)}
