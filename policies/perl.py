"""The PERL lender of seed 000: the RL learner plus the performative gradient.

The applicants self-select on the lender's published scoring head ``h_theta`` (application
weight ``1 + lambda_sel sigma(h_theta)`` times the group's Hawkes intensity), so the episode's
trajectory density is ``p(applications | theta) * prod_k pi(d_k | obs_k) * p(outcomes)`` and

    grad_theta E[R] = E[(R - b) (sum_k grad_theta log pi(d_k | obs_k) + grad_theta log p(applications | theta))].

The simulator knows the application likelihood exactly: the Eutopia world accumulates
``grad_theta log p(applications | theta)`` for the episode (``abm.families.eutopia_likelihood``)
and hands it over in ``stats["application_score"]``; PERL adds it to the passive score of its
head. Derivation and the finite-difference check: docs/MODEL.md, "Learning lenders: RL and PERL".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from abm.errors import InvariantError
from policies.rl import RLLender


class PERLLender(RLLender):
    """RL lender plus the performative (application-likelihood) policy gradient on its head."""

    name = "perl"
    needs_application_score = True

    def application_score(self, stats: dict[str, Any]) -> np.ndarray:
        score = stats.get("application_score")
        if score is None:
            raise InvariantError("policy 'perl' needs stats['application_score'] from the world "
                                 "(a family that publishes the lender's approval model, e.g. eutopia)")
        return np.asarray(score, dtype=float)
