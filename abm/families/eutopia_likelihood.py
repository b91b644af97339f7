"""The score of Eutopia's application process w.r.t. the published approval model (for PERL).

Applicant i of group g applies at rate ``nu_i(t) = lambda_g(t) w_i(t) / N_g`` with the
self-selection weight ``w_i = 1 + lambda_sel sigma(h_i)``, ``h_i = theta . phi_i`` and
``phi_i = (g_i, (wealth_i - m) / s, 1)`` (the approval model's own standardisation). Given the
history, ``lambda_g(t)`` does not depend on theta, so the log-likelihood of the episode's
applications ``sum_k log nu_{i_k}(t_k) - sum_i integral nu_i dt`` has the theta-gradient

    score = sum_k grad log w_{i_k}  -  sum_g integral lambda_g(t) (1/N_g) sum_{i in g} grad w_i(t) dt,
    grad w_i = lambda_sel sigma_i (1 - sigma_i) phi_i.

Between state changes lambda_g(t) = B_g + E_g exp(-beta (t - t0)) and the weights are
constant, so the integral is exact piecewise: the world calls ``advance()`` before every change
of the base rate, the excitation or the weights, ``weights_changed()`` after the weights change,
and ``applied(i)`` for each application. Derivation: docs/MODEL.md, "Learning lenders".
"""

from __future__ import annotations

import numpy as np

from abm.hawkes import integrated_excitation


class ApplicationScore:
    """Accumulates grad_theta log p(applications of this episode | theta) for one world."""

    def __init__(self, world):
        self.world = world
        self.t_last = world.env.now
        self.arrival_term = np.zeros(3)
        self.compensator = np.zeros(3)
        self._row_grad = np.zeros((len(world.cols["wealth"]), 3))  # grad w_i, kept current
        self._mean_grad_w = np.zeros((2, 3))  # (1/N_g) sum_{i in g} grad w_i
        self.weights_changed(np.arange(len(world.cols["wealth"])))

    def _grad_w(self, idx: np.ndarray) -> np.ndarray:
        w, c = self.world, self.world.cols
        sig = c["approval_score"][idx]
        k = w.pop.selection_strength * sig * (1.0 - sig)
        out = np.empty((len(idx), 3))
        out[:, 0] = k * c["group"][idx]
        out[:, 1] = k * (c["wealth"][idx] - w.approval.wealth_mean) / w.approval.wealth_std
        out[:, 2] = k
        return out

    def weights_changed(self, idx: np.ndarray) -> None:
        """Rows ``idx`` got new scores (call ``advance()`` before changing them)."""
        w = self.world
        if len(idx) == len(self._row_grad):  # a new published model: recompute every row
            self._row_grad = self._grad_w(np.arange(len(idx)))
            for g, (start, stop) in enumerate(w.group_slices):
                self._mean_grad_w[g] = self._row_grad[start:stop].sum(axis=0) / w.sizes[g]
            return
        if len(idx) > 1:
            idx = np.unique(idx)  # a row repaid twice in one batch changes once
        new = self._grad_w(idx)
        delta = new - self._row_grad[idx]
        self._row_grad[idx] = new
        groups = w.cols["group"][idx]
        np.add.at(self._mean_grad_w, groups, delta / w.sizes[groups][:, None])

    def advance(self) -> None:
        """Integrate the compensator term from the last change up to now (state still unchanged)."""
        w = self.world
        now = w.env.now
        dt = now - self.t_last
        if dt <= 0.0:
            return
        beta = w.arr.decay
        for g in range(2):
            integral = w.base_rate(g) * dt + integrated_excitation(w.excitation_now(g, self.t_last), dt, beta)
            self.compensator += integral * self._mean_grad_w[g]
        self.t_last = now

    def applied(self, i: int) -> None:
        w, c = self.world, self.world.cols
        sig = c["approval_score"][i]
        k = w.pop.selection_strength * sig * (1.0 - sig) / c["weight"][i]
        self.arrival_term[0] += k * c["group"][i]
        self.arrival_term[1] += k * (c["wealth"][i] - w.approval.wealth_mean) / w.approval.wealth_std
        self.arrival_term[2] += k

    def episode_score(self) -> np.ndarray:
        """grad_theta log p(applications since the last reset), as (d/d theta_g, d/d theta_x, d/d b)."""
        self.advance()
        return self.arrival_term - self.compensator

    def reset(self) -> None:
        self.advance()
        self.arrival_term = np.zeros(3)
        self.compensator = np.zeros(3)
