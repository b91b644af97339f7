"""Name -> policy class. Scenario files and ``--policy`` refer to these names only; nothing
is ever imported from a name a user wrote (policies come from this table, not from files)."""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import BaseModel, ValidationError

from abm.errors import UserError

# name -> "module:Class"; modules are imported lazily (torch only for learning policies)
POLICIES: dict[str, str] = {
    "approve_all": "policies.heuristics:ApproveAll",
    "reject_all": "policies.heuristics:RejectAll",
    "random": "policies.heuristics:RandomApproval",
    "wealth_threshold": "policies.heuristics:WealthThreshold",
    "score_threshold": "policies.heuristics:ScoreThreshold",
    "demographic_parity": "policies.heuristics:DemographicParityQuota",
    "equal_opportunity": "policies.heuristics:EqualOpportunityThresholds",
    "oracle": "policies.oracle:Oracle",
    "one_step": "policies.one_step:OneStepPredictor",
    "rl": "policies.rl:RLLender",
    "perl": "policies.perl:PERLLender",
    # seed-002 / Liu et al. baselines for the score families (credit_score, fico, admissions)
    "max_util": "policies.baselines:MaxUtil",
    "eo_threshold": "policies.baselines:EqualOpportunity",
    "dp_threshold": "policies.baselines:DemographicParity",
    "single_threshold": "policies.baselines:SingleThreshold",
    "classifier": "policies.baselines:Classifier",
    "ppo": "policies.deep.ppo:PPOLender",
    "dqn": "policies.deep.dqn:DQNLender",
    "lag_ppo": "policies.deep.lag_ppo:LagPPOLender",
    "a_ppo": "policies.deep.a_ppo:APPOLender",
    "elbert_po": "policies.deep.elbert_po:ELBERTLender",
    "bisim_ppo": "policies.deep.bisimulator:BisimPPOLender",
    "bisim_dqn": "policies.deep.bisimulator:BisimDQNLender",
    # seed 001 planners on the beta_belief family's exact MDP (policies/fair_mdp/policies.py)
    "fair_lp": "policies.fair_mdp.policies:FairLP",
    "fair_cce": "policies.fair_mdp.policies:FairCCE",
    "optimistic": "policies.fair_mdp.policies:Optimistic",
    "conservative": "policies.fair_mdp.policies:Conservative",
    "race_blind": "policies.fair_mdp.policies:RaceBlind",
    "unconstrained": "policies.fair_mdp.policies:Unconstrained",
    "explore_then_commit": "policies.fair_mdp.policies:ExploreThenCommit",
}


def names() -> list[str]:
    return sorted(POLICIES)


def get(name: str) -> type:
    if name not in POLICIES:
        raise UserError(f"policy.name: unknown policy {name!r} (registered: {', '.join(names())})")
    module, cls = POLICIES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def validate_params(name: str, params: dict[str, Any]) -> BaseModel:
    cls = get(name)
    try:
        return cls.Params(**params)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            loc = ".".join(str(x) for x in err.get("loc", ())) or "(params)"
            msg = err.get("msg", "invalid").removeprefix("Value error, ")
            got = "" if err.get("type") == "missing" else f" (got {err.get('input')!r})"
            problems.append(f"policy.{loc}: {msg}{got}")
        raise UserError("; ".join(problems)) from None


def build(policy_config, context: Any, rng):
    """Instantiate the configured policy for a world's ``context``."""
    cls = get(policy_config.name)
    return cls(validate_params(policy_config.name, policy_config.params), context, rng)


def describe() -> list[dict[str, Any]]:
    """Every registered policy with its documented parameters (for ``abm policies``)."""
    rows = []
    for name in names():
        cls = get(name)
        doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        params = []
        for field, info in cls.Params.model_fields.items():
            params.append({"name": field, "default": info.default, "description": info.description or ""})
        rows.append({"name": name, "doc": doc, "params": params, "privileged": list(cls.privileged)})
    return rows
