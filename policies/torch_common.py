"""The learning lenders' network and checkpoints (torch lives only under ``policies/``).

``a = sigma(h_theta(x, g) + u_phi(obs))``: ``h_theta = theta_g g + theta_x (wealth - m) / s + b``
is the linear scoring head the world publishes as its approval model (``m``, ``s``: the world's
approval-model standardisation of wealth, so the published ``(theta_g, theta_x, b)`` mean the
same function in the world and in the policy); ``u_phi`` is a small tanh MLP on the
12-dimensional observation whose last layer starts at zero, so the initial policy is the head.
The observation columns that are functions of theta (``approval_score = sigma(h_theta)``,
``theta_g``, ``theta_x``) are recomputed from the parameters inside the forward pass, so
``grad log pi`` is the exact total derivative (the published model always equals the head during
an episode). Deciding uses a numpy mirror of the same function (no torch call per batch).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from abm.errors import UserError

CHECKPOINT_FORMAT = "abm-lender-v1"
CHECKPOINT_FILE = "checkpoint.pt"
NEEDED_FIELDS = ("wealth", "group", "intensity_M", "intensity_F", "approval_score", "theta_g", "theta_x")


def set_torch_threads() -> None:
    """One thread: the machines have two cores shared by everything else running."""
    torch.set_num_threads(1)


class ObsLayout:
    """Column indices of the fields the network reads, from the family's ``obs_fields``."""

    def __init__(self, obs_fields: tuple[str, ...]):
        missing = [f for f in NEEDED_FIELDS if f not in obs_fields]
        if missing:
            raise UserError(f"policy: the learning lenders need the Eutopia observation; this scenario lacks "
                            f"{', '.join(missing)}")
        self.fields = tuple(obs_fields)
        self.index = {f: obs_fields.index(f) for f in obs_fields}
        self.intensity = [self.index["intensity_M"], self.index["intensity_F"]]


class LenderNet(nn.Module):
    """Scoring head theta plus correction network u_phi (float64, tiny)."""

    def __init__(self, layout: ObsLayout, hidden: int, wealth_mean: float, wealth_std: float,
                 wealth_scale: float, rng: np.random.Generator, theta0: tuple[float, float, float]):
        super().__init__()
        self.layout = layout
        self.wealth_mean, self.wealth_std, self.wealth_scale = float(wealth_mean), float(wealth_std), float(wealth_scale)
        d = len(layout.fields)
        self.theta = nn.Parameter(torch.tensor(theta0, dtype=torch.float64))  # (theta_g, theta_x, b)
        bound = 1.0 / np.sqrt(d)  # PyTorch's default Linear init range, drawn from the run's stream
        self.w1 = nn.Parameter(torch.from_numpy(rng.uniform(-bound, bound, (hidden, d))))
        self.b1 = nn.Parameter(torch.from_numpy(rng.uniform(-bound, bound, hidden)))
        self.w2 = nn.Parameter(torch.zeros(1, hidden, dtype=torch.float64))  # u_phi = 0 at start
        self.b2 = nn.Parameter(torch.zeros(1, dtype=torch.float64))
        # numpy views share memory with the parameters: in-place optimiser steps and loads show up
        self._np = {k: getattr(self, k).detach().numpy() for k in ("theta", "w1", "b1", "w2", "b2")}

    # -- the function, in torch (training) and numpy (deciding) -----------------------------
    def _parts(self, obs, lib):
        """(head logits h, correction-net input) for observation rows; ``lib`` is torch or numpy."""
        L = self.layout.index
        th = self.theta if lib is torch else self._np["theta"]
        x = (obs[:, L["wealth"]] * self.wealth_scale - self.wealth_mean) / self.wealth_std
        h = th[0] * obs[:, L["group"]] + th[1] * x + th[2]
        cols = []
        for f, j in L.items():
            if f == "approval_score":
                cols.append(1.0 / (1.0 + lib.exp(-h)))
            elif f in ("theta_g", "theta_x"):
                t = th[0] if f == "theta_g" else th[1]
                cols.append((t / (1.0 + abs(t))) * lib.ones_like(h))  # softsign: bounded input
            elif j in self.layout.intensity:
                cols.append(lib.log1p(obs[:, j]))
            else:
                cols.append(obs[:, j])
        return h, lib.stack(cols, 1) if lib is torch else np.stack(cols, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Logits of the approval probability, differentiable in theta and phi."""
        h, z = self._parts(obs, torch)
        u = torch.tanh(z @ self.w1.T + self.b1) @ self.w2.T + self.b2
        return h + u[:, 0]

    def logits_numpy(self, obs: np.ndarray) -> np.ndarray:
        h, z = self._parts(np.asarray(obs, dtype=np.float64), np)
        p = self._np
        u = np.tanh(z @ p["w1"].T + p["b1"]) @ p["w2"].T + p["b2"]
        return h + u[:, 0]

    def head(self) -> tuple[float, float, float]:
        t = self.theta.detach().numpy()
        return float(t[0]), float(t[1]), float(t[2])

    def rebase(self, wealth_mean: float, wealth_std: float) -> None:
        """Re-express theta_x, b for another wealth standardisation, keeping h(wealth, g) unchanged."""
        with torch.no_grad():
            tx = float(self.theta[1])
            self.theta[1] = tx * wealth_std / self.wealth_std
            self.theta[2] += tx * (wealth_mean - self.wealth_mean) / self.wealth_std
        self.wealth_mean, self.wealth_std = float(wealth_mean), float(wealth_std)


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checkpoint_path(path: str | Path) -> Path:
    """The checkpoint file for ``path``: the file itself, ``path/checkpoint.pt`` or a run folder's
    ``policy/checkpoint.pt``."""
    p = Path(path)
    for candidate in (p, p / CHECKPOINT_FILE, p / "policy" / CHECKPOINT_FILE):
        if candidate.is_file():
            return candidate
    raise UserError(f"checkpoint {p}: not found (give a {CHECKPOINT_FILE}, its folder or a run folder)")


def write_checkpoint(path: str | Path, config: dict[str, Any], weights: dict, optimizer: dict,
                     extra: dict[str, float]) -> Path:
    """torch.save of weights + config JSON, atomically; a folder path gets checkpoint.pt + config.json."""
    p = Path(path)
    if p.suffix != ".pt":
        p.mkdir(parents=True, exist_ok=True)
        (p / "config.json").write_text(json.dumps(config, indent=2))
        p = p / CHECKPOINT_FILE
    else:
        p.parent.mkdir(parents=True, exist_ok=True)
    blob = {"format": CHECKPOINT_FORMAT, "config": json.dumps(config), "weights": weights,
            "optimizer": optimizer, "extra": extra}
    tmp = p.with_name(f".tmp-{p.name}")
    torch.save(blob, tmp)
    os.replace(tmp, p)
    return p


def read_checkpoint(path: str | Path) -> tuple[Path, dict[str, Any], dict]:
    """(file, config, blob) of a checkpoint, loaded with ``weights_only=True``; UserError if malformed."""
    p = checkpoint_path(path)
    try:
        blob = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises pickle/zip/runtime errors for foreign or damaged files
        raise UserError(f"checkpoint {p}: not a readable torch checkpoint ({type(exc).__name__})") from None
    if not isinstance(blob, dict) or blob.get("format") != CHECKPOINT_FORMAT:
        raise UserError(f"checkpoint {p}: not an abm lender checkpoint (format {CHECKPOINT_FORMAT!r} expected)")
    try:
        config = json.loads(blob["config"])
    except (KeyError, TypeError, json.JSONDecodeError):
        raise UserError(f"checkpoint {p}: config is missing or not JSON") from None
    for key in ("weights", "optimizer", "extra"):
        if not isinstance(blob.get(key), dict):
            raise UserError(f"checkpoint {p}: {key} missing")
    return p, config, blob
