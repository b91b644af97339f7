"""Observations of the `beta_belief` ABM family <-> states of the enumerated loan MDP.

The family (abm/families/beta_belief.py) shows the bank one row per applicant with the
columns `OBS_FIELDS`; a state of `build_loan_mdp` is keyed by the integers
(z, y, repayments, defaults, rejections), pre-simulation included, so an observation row
names exactly one state.  `StateIndex` maps rows to state indices (policies look their accept
probability up there); `state_observations` builds the row every live state would show (the
world evaluates the policy actually used on all of them, exactly).
"""
from __future__ import annotations

import numpy as np

from .mdp import LoanMDP

OBS_FIELDS = ("group", "qualified", "step", "repayments", "defaults", "rejections",
              "alpha", "beta", "repay_belief")
"""Observation columns: z (0 minority, 1 majority), y (qualified at entry), decision epoch t,
integer counts (pre-simulation included), the Beta belief and its mean."""


def _codes(z, y, repays, defaults, rejections, base: int) -> np.ndarray:
    z, y, a, d, j = (np.asarray(v).astype(np.int64) for v in (z, y, repays, defaults, rejections))
    return (((z * 2 + y) * base + a) * base + d) * base + j


def state_observations(mdp: LoanMDP) -> np.ndarray:
    """One observation row (OBS_FIELDS order) per state; terminal rows are never decided."""
    if mdp.counts is None:
        raise ValueError("the MDP carries no state counts (build it with build_loan_mdp)")
    out = np.empty((mdp.n_states, len(OBS_FIELDS)))
    out[:, 0] = mdp.group
    out[:, 1] = mdp.qualified
    out[:, 2] = mdp.depth
    out[:, 3:6] = mdp.counts
    out[:, 6] = mdp.alpha
    out[:, 7] = mdp.beta
    out[:, 8] = mdp.repay_probability
    return out


class StateIndex:
    """Observation rows -> indices of live MDP states (exact integer match, else an error)."""

    def __init__(self, mdp: LoanMDP):
        if mdp.counts is None:
            raise ValueError("the MDP carries no state counts (build it with build_loan_mdp)")
        live = np.flatnonzero(~mdp.terminal)
        self.base = int(mdp.counts.max()) + 2
        codes = _codes(mdp.group[live], mdp.qualified[live], *mdp.counts[live].T, self.base)
        order = np.argsort(codes)
        self.codes, self.states = codes[order], live[order]

    def __call__(self, z, y, repays, defaults, rejections) -> np.ndarray:
        values = [np.asarray(v, dtype=float) for v in (z, y, repays, defaults, rejections)]
        if any(np.any(v != np.round(v)) or np.any(v < 0) for v in values):
            raise ValueError("observation counts are not non-negative whole numbers")
        if any(np.any(v >= self.base - 1) for v in values[2:]):
            raise ValueError("observation counts exceed the MDP's horizon")
        codes = _codes(*values, self.base)
        pos = np.minimum(np.searchsorted(self.codes, codes), len(self.codes) - 1)
        if np.any(self.codes[pos] != codes):
            raise ValueError("an observation names no state of the MDP (other priors, horizon or "
                             "pre-simulation steps than the policy was solved for?)")
        return self.states[pos]

    def from_obs(self, obs: np.ndarray) -> np.ndarray:
        """Indices for rows in OBS_FIELDS order."""
        return self(obs[:, 0], obs[:, 1], obs[:, 3], obs[:, 4], obs[:, 5])
