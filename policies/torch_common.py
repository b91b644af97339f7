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
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from abm.errors import UserError, owned_output

CHECKPOINT_FORMAT = "abm-lender-v1"
CHECKPOINT_FILE = "checkpoint.pt"
NEEDED_FIELDS = ("wealth", "group", "intensity_M", "intensity_F", "approval_score", "theta_g", "theta_x")


DEVICE_ENV = "ABM_TORCH_DEVICE"


def torch_device() -> str:
    """The torch device of the Stable-Baselines3 lenders' networks: ``cpu`` unless the environment
    variable ``ABM_TORCH_DEVICE`` says ``auto`` (CUDA when present, else CPU) or names a device
    (``cuda``, ``cuda:1``). An execution choice like the worker count, so not part of a run's
    configuration; the project never needs a GPU (its networks are small; CPU is the default)."""
    want = os.environ.get(DEVICE_ENV, "").strip() or "cpu"
    if want == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(want)
    except RuntimeError:
        raise UserError(f"{DEVICE_ENV}={want!r}: not a torch device (cpu, cuda, cuda:N or auto)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"{DEVICE_ENV}={want!r}: CUDA is not available on this machine (use cpu or auto)")
    if device.type not in ("cpu", "cuda"):
        raise UserError(f"{DEVICE_ENV}={want!r}: only cpu and cuda devices are supported")
    return str(device)


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
    def _parts(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(head logits h, correction-net input z) for observation rows, differentiable in theta."""
        L, th = self.layout.index, self.theta
        x = (obs[:, L["wealth"]] * self.wealth_scale - self.wealth_mean) / self.wealth_std
        h = th[0] * obs[:, L["group"]] + th[1] * x + th[2]
        cols = []
        for f, j in L.items():
            if f == "approval_score":
                cols.append(torch.sigmoid(h))
            elif f in ("theta_g", "theta_x"):
                t = th[0] if f == "theta_g" else th[1]
                cols.append((t / (1.0 + t.abs())) * torch.ones_like(h))  # softsign: a bounded input
            elif j in self.layout.intensity:
                cols.append(torch.log1p(obs[:, j]))  # intensities are ~1-20 applications per time unit
            else:
                cols.append(obs[:, j])
        return h, torch.stack(cols, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Logits of the approval probability, differentiable in theta and phi."""
        h, z = self._parts(obs)
        u = torch.tanh(z @ self.w1.T + self.b1) @ self.w2.T + self.b2
        return h + u[:, 0]

    def logits_numpy(self, obs: np.ndarray) -> np.ndarray:
        """The same function as ``forward`` for deciding: column edits in place, no per-field loop."""
        L, th, p = self.layout.index, self._np["theta"], self._np
        z = np.array(obs, dtype=np.float64)
        x = (z[:, L["wealth"]] * self.wealth_scale - self.wealth_mean) / self.wealth_std
        h = th[0] * z[:, L["group"]] + th[1] * x + th[2]
        z[:, L["approval_score"]] = 1.0 / (1.0 + np.exp(-h))
        z[:, L["theta_g"]] = th[0] / (1.0 + abs(th[0]))
        z[:, L["theta_x"]] = th[1] / (1.0 + abs(th[1]))
        z[:, self.layout.intensity] = np.log1p(z[:, self.layout.intensity])
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
    """(file, config, blob) of a checkpoint, loaded with ``weights_only=True``; UserError if malformed.

    ``write_checkpoint`` always writes torch's zip format, so anything else (a bare pickle, torch's
    legacy format) is refused before torch reads it: torch's weights-only unpickler would first
    warn about the pickle protocol on stderr. Inside a zip such warnings are ours to turn into
    the one error line, so they are silenced there too."""
    p = checkpoint_path(path)
    if not zipfile.is_zipfile(p):
        raise UserError(f"checkpoint {p}: not a readable torch checkpoint (not a zip archive, the format abm writes)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "Detected pickle protocol 4 in the checkpoint"
            blob = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises pickle/zip/runtime errors for foreign or damaged files
        raise UserError(f"checkpoint {p}: not a readable torch checkpoint ({type(exc).__name__})") from None
    if not isinstance(blob, dict) or blob.get("format") != CHECKPOINT_FORMAT:
        raise UserError(f"checkpoint {p}: not an abm lender checkpoint (format {CHECKPOINT_FORMAT!r} expected)")
    try:
        config = json.loads(blob["config"])
    except (KeyError, TypeError, json.JSONDecodeError):
        raise UserError(f"checkpoint {p}: config is missing or not JSON") from None
    if not isinstance(config, dict):
        raise UserError(f"checkpoint {p}: config is a JSON {type(config).__name__}, not an object")
    for key in ("weights", "optimizer", "extra"):
        if not isinstance(blob.get(key), dict):
            raise UserError(f"checkpoint {p}: {key} missing")
    return p, config, blob


def attach_checkpoint(scenario, path: str | Path):
    """``abm run --load``: the scenario with its policy starting from ``path`` (rl/perl: the file
    and its SHA-256, so the run's identity follows the checkpoint's content; deep lenders: their
    ``model_path`` folder)."""
    from abm.config import scenario_to_dict, validate_scenario_dict
    from abm import registry

    fields = registry.get(scenario.policy.name).Params.model_fields
    data = scenario_to_dict(scenario)
    policy = dict(data["policy"])
    if "load" in fields:
        file = checkpoint_path(path).resolve()
        policy.update(load=str(file), load_sha256=file_sha256(file))
    elif "model_path" in fields:
        folder = Path(path)
        policy["model_path"] = str((folder / "policy" if (folder / "policy").is_dir() else folder).resolve())
    else:
        raise UserError(f"--load: policy {scenario.policy.name!r} does not load checkpoints "
                        "(learning lenders such as rl, perl, ppo do)")
    data["policy"] = policy
    return validate_scenario_dict(data, "--load")


def save_target(dest: str | Path) -> Path:
    """``--save DEST`` checked (before the run, and again before the copy): a ``.pt`` path where
    nothing but a regular file stands (``owned_output``: never through a symlink, onto a FIFO or a
    device), or a folder that is not a file."""
    dest = Path(dest)
    if dest.suffix == ".pt":
        return owned_output(dest, "--save")
    if dest.exists() and not dest.is_dir():
        raise UserError(f"--save {dest}: is not a folder; give a folder (or a .pt file path)")
    return dest


def export_checkpoint(run_folder: str | Path, dest: str | Path) -> Path:
    """``abm run --save``: copy the run folder's saved policy to ``dest`` (a .pt file for rl/perl,
    otherwise a folder)."""
    import shutil

    src = Path(run_folder) / "policy"
    if not src.is_dir():
        raise UserError(f"--save: the run saved no policy (only learning lenders are saved): {run_folder}")
    dest = save_target(dest)
    try:
        if dest.suffix == ".pt":
            if not (src / CHECKPOINT_FILE).is_file():
                raise UserError(f"--save: {src} has no {CHECKPOINT_FILE}; give a folder instead of a .pt file")
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".tmp-{dest.name}-{os.getpid()}")
            try:
                shutil.copyfile(src / CHECKPOINT_FILE, tmp)
                os.replace(tmp, dest)
            finally:
                tmp.unlink(missing_ok=True)
        else:
            for file in src.rglob("*"):  # what the copy replaces must be a regular file, or nothing
                if not file.is_dir():
                    owned_output(dest / file.relative_to(src), "--save")
            shutil.copytree(src, dest, dirs_exist_ok=True)
    except OSError as exc:
        raise UserError(f"--save: cannot write {dest} ({exc.strerror or exc})") from None
    return dest
