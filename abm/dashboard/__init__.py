"""``abm dashboard``: a local web app over run and study folders, or a live simulation.

``serve_folder`` checks the folder first (a bad one is a ``UserError``: exit 2 before any
server starts), then serves ``abm.dashboard.app``; ``serve_live`` checks the scenario and
serves ``abm.dashboard.live``. Both run Solara's own server (uvicorn) in this process.
Solara's page assets come from the ``solara-assets`` wheel, so the page works offline.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

from abm.errors import UserError

DEFAULT_PORT = 8765


def check_port(host: str, port: int) -> None:
    if not (0 < port < 65536):
        raise UserError(f"--port: must be 1..65535, got {port}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            reason = "already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise UserError(f"--port {port}: cannot listen on {host}:{port} ({reason}); "
                            "choose another --port") from None


def serve_folder(folder: str | Path, port: int = DEFAULT_PORT, host: str = "127.0.0.1") -> None:
    from abm.dashboard.data import open_folder

    folder = Path(folder)
    open_folder(folder)  # a bad folder fails here, in one line, before the web stack loads
    check_port(host, port)
    _offline()
    from abm.dashboard.app import TARGET_ENV, warm

    warm(folder)
    _serve("abm.dashboard.app", {TARGET_ENV: str(folder.resolve())}, port, host)


def serve_live(scenario: str | Path, port: int = DEFAULT_PORT, host: str = "127.0.0.1", *,
               policy: str | None = None, seed: int | None = None, overrides: list[str] | tuple = ()) -> None:
    import json

    from abm.config import load_scenario

    resolved = load_scenario(scenario, list(overrides), policy=policy, seed=seed)  # a bad scenario fails here
    check_port(host, port)
    _offline()
    from abm.dashboard.live import OPTIONS_ENV, SCENARIO_ENV

    options = {"policy": policy, "overrides": list(overrides), "seed": resolved.seed}
    _serve("abm.dashboard.live", {SCENARIO_ENV: str(Path(scenario).resolve()), OPTIONS_ENV: json.dumps(options)},
           port, host)


def _offline() -> None:
    """No usage telemetry (nor, in ``_serve``, a version check): it must work on a closed network.
    Solara reads this setting when first imported, so this runs before any import of it."""
    os.environ.setdefault("SOLARA_TELEMETRY_MIXPANEL_ENABLE", "False")


def _serve(module: str, env: dict[str, str], port: int, host: str) -> None:
    os.environ.update(env)
    from solara.__main__ import run as solara_run

    print(f"abm dashboard: http://{host}:{port}/  (Ctrl+C stops it)", flush=True)
    solara_run.main(args=[module, "--port", str(port), "--host", host, "--production", "--no-open",
                          "--no-check-version", "--log-level", "warning"],
                    prog_name="abm dashboard", standalone_mode=False)
