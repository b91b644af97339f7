"""The policy protocol: ``decide(obs, info) -> approval probabilities in [0, 1]``.

``obs`` holds one row per applicant, the family's ``context.obs_fields`` as columns (read one with
``self.column(obs, "wealth")``; docs/metrics.md lists each family's fields). ``info`` is an
``abm.engine.Batch``, readable by attribute or by name as a read-only mapping: ``info["group"]``
(group indices), ``info["group_name"]`` (group names), ``info["group_names"]``, ``info["agent_id"]``,
``info["time"]``, ``info["episode"]``, ``info["privileged"]`` (the declared privileged columns);
``info.get``, ``in`` and ``list(info)`` work, and an unknown name is a one-line error naming the
known ones.

``decide`` validates shapes and ranges and delegates to ``_decide`` (the Stable-Baselines3
habit). The engine calls the hooks from one place each: ``prepare(sim)`` once before the clock
starts (training, pretraining, loading), ``on_decisions`` after each decided batch,
``on_outcomes`` when approved loans resolve, ``on_episode_end`` at each episode end. A policy
that publishes its own approval model (the scoring head applicants self-select on) returns
``(theta_g, theta_x, bias)`` from ``approval_model()``.

What a policy needs from a scenario family is declared, not discovered: ``requires`` names
capabilities (``abm.world``) checked against the family's when a scenario is validated;
``privileged`` names the privileged columns it reads; ``saves`` says whether the run folder
keeps its trained state (``save(folder)``).

This protocol sits in the bottom layer (docs/ARCHITECTURE.md), beside ``abm.world``: the registry
checks a plugin against ``Policy`` with an ordinary import.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

from abm.errors import InvariantError
from abm.strict import refuse_loose_scalars
from abm.world import PolicyContext


class NoParams(BaseModel):
    """Base of every policy's parameters: frozen, unknown keys refused, numbers and flags as written."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _as_written(cls, data: Any) -> Any:
        return refuse_loose_scalars(cls, data)


class Policy(abc.ABC):
    """Base class of every decision module."""

    name: ClassVar[str] = ""
    Params: ClassVar[type[BaseModel]] = NoParams
    #: privileged per-applicant columns the policy reads from ``info.privileged`` (e.g. the
    #: oracle's latent default). Empty for policies that see only the observation.
    privileged: ClassVar[tuple[str, ...]] = ()
    #: capabilities the policy needs from the scenario family (``abm.world``; empty: any family)
    requires: ClassVar[frozenset[str]] = frozenset()
    #: the registered policy to suggest where this one does not fit (e.g. a seed-002 counterpart)
    twin: ClassVar[str | None] = None
    #: whether the world must accumulate grad_theta log p(applications) for it (PERL)
    needs_application_score: ClassVar[bool] = False
    #: whether the run folder keeps the policy's trained state (``save(folder / "policy")``)
    saves: ClassVar[bool] = False

    def __init__(self, params: BaseModel, context: PolicyContext, rng: np.random.Generator):
        self.params = params
        self.context = context
        self.rng = rng
        self.obs_index = {f: i for i, f in enumerate(context.obs_fields)}

    def column(self, obs: np.ndarray, field: str) -> np.ndarray:
        """The observation column named ``field`` (names come from the family's obs_fields)."""
        try:
            return obs[:, self.obs_index[field]]
        except KeyError:
            raise InvariantError(f"policy {self.name!r} needs observation field {field!r}, "
                                 f"which this scenario family does not provide") from None

    def decide(self, obs: np.ndarray, info: Any = None) -> np.ndarray:
        obs = np.asarray(obs, dtype=float)
        if obs.ndim != 2:
            raise InvariantError(f"policy {self.name!r}: observation batch must be 2-D, got shape {obs.shape}")
        probs = np.asarray(self._decide(obs, info), dtype=float).reshape(-1)
        if probs.shape != (obs.shape[0],):
            raise InvariantError(f"policy {self.name!r} returned {probs.shape[0]} probabilities for {obs.shape[0]} rows")
        if not np.all((probs >= 0.0) & (probs <= 1.0)):
            raise InvariantError(f"invariant 'decision probabilities in [0, 1]' broken by policy {self.name!r}")
        return probs

    @abc.abstractmethod
    def _decide(self, obs: np.ndarray, info: Any) -> np.ndarray:
        """Approval probabilities for the rows of ``obs`` (validated by ``decide``)."""

    # hooks ----------------------------------------------------------------------------------
    def prepare(self, sim: Any) -> None:
        """Called once by the engine before its clock starts (train, pretrain or load here)."""

    def on_decisions(self, obs: np.ndarray, info: Any, probs: np.ndarray, approved: np.ndarray) -> None:
        """Called after each batch is decided."""

    def on_outcomes(self, outcomes: Any) -> None:
        """Called when approved loans resolve (repay/default)."""

    def on_episode_end(self, stats: dict[str, Any]) -> None:
        """Called at each episode end with the family's per-group statistics."""

    def approval_model(self) -> tuple[float, float, float] | None:
        return None

    def state(self) -> dict[str, Any]:
        """Small JSON-able facts about the policy for summary.json."""
        return {}

    def save(self, path: Any) -> Any:
        """Write the trained state into the folder ``path`` (policies with ``saves = True``)."""
        raise NotImplementedError(f"policy {self.name!r} keeps no trained state")
