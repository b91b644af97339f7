"""``abm dashboard``: a local web app over run and study folders, or a live simulation.

``serve_folder`` checks the folder first (a bad one is a ``UserError``: exit 2 before any
server starts), then serves ``abm.dashboard.app``; ``serve_live`` checks the scenario and
serves ``abm.dashboard.live``. Both run Solara's starlette app on uvicorn in this process,
behind ``abm.dashboard.security.Guard``: Host and Origin are checked on every request and
WebSocket upgrade (loopback names only unless ``--host``/``--allow-origin`` say otherwise), and a
random token is required when the server is bound beyond loopback. Solara's page assets come
from the ``solara-assets`` wheel, so the page works offline.
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
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise UserError(f"--host {host}: cannot listen there ({reason})") from None
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            reason = "already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise UserError(f"--port {port}: cannot listen on {host}:{port} ({reason}); "
                            "choose another --port") from None


def serve_folder(folder: str | Path, port: int = DEFAULT_PORT, host: str = "127.0.0.1", *,
                 allow_origins: list[str] | tuple = ()) -> None:
    from abm.dashboard.data import open_folder

    folder = Path(folder)
    host, policy = _policy(host, port, allow_origins)  # bad flags fail first, in one line
    open_folder(folder)  # a bad folder fails here, in one line, before the web stack loads
    check_port(host, port)
    _offline()
    from abm.dashboard.app import TARGET_ENV, warm

    warm(folder)
    _serve("abm.dashboard.app", {TARGET_ENV: str(folder.resolve())}, policy, host)


def serve_live(scenario: str | Path, port: int = DEFAULT_PORT, host: str = "127.0.0.1", *,
               policy: str | None = None, seed: int | None = None, overrides: list[str] | tuple = (),
               allow_origins: list[str] | tuple = ()) -> None:
    import json

    from abm.config import load_scenario

    host, guard = _policy(host, port, allow_origins)
    resolved = load_scenario(scenario, list(overrides), policy=policy, seed=seed)  # a bad scenario fails here
    check_port(host, port)
    _offline()
    from abm.dashboard.live import OPTIONS_ENV, SCENARIO_ENV

    options = {"policy": policy, "overrides": list(overrides), "seed": resolved.seed}
    _serve("abm.dashboard.live", {SCENARIO_ENV: str(Path(scenario).resolve()), OPTIONS_ENV: json.dumps(options)},
           guard, host)


def _offline() -> None:
    """No usage telemetry (nor, in ``_serve``, a version check): it must work on a closed network.
    Solara reads this setting when first imported, so this runs before any import of it."""
    os.environ.setdefault("SOLARA_TELEMETRY_MIXPANEL_ENABLE", "False")


def _policy(host: str, port: int, allow_origins):
    """(the bind address without brackets, the guard's policy), or a one-line UserError."""
    from abm.dashboard.security import check_bind_host, make_policy

    if not (0 < port < 65536):
        raise UserError(f"--port: must be 1..65535, got {port}")
    host = check_bind_host(host)
    return host, make_policy(host, port, list(allow_origins))


def guarded_app(module: str, policy):
    """Solara's starlette app serving ``module``, wrapped in the Host/Origin/token guard.
    Solara reads ``SOLARA_APP`` when its server modules are first imported, so this sets it first."""
    os.environ["SOLARA_APP"] = module
    os.environ["SERVER_PORT"] = str(policy.port)
    from solara.server import settings

    settings.main.mode = "production"
    settings.ssg.enabled = False
    settings.search.enabled = False
    import solara.server.starlette as solara_starlette

    from abm.dashboard.security import Guard

    return Guard(solara_starlette.app, policy)


def _serve(module: str, env: dict[str, str], policy, host: str) -> None:
    """What ``solara run MODULE --production`` does, with the app wrapped in the guard (Solara's
    command builds its app from a fixed import string, leaving no place for a middleware)."""
    import copy

    os.environ.update(env)
    os.environ["SERVER_NAME"] = host
    app = guarded_app(module, policy)
    import uvicorn
    from solara.__main__ import LOGGING_CONFIG

    from abm.dashboard.security import urls

    log_config = copy.deepcopy(LOGGING_CONFIG)
    log_config["loggers"]["solara"]["level"] = "WARNING"
    shown = urls(policy, host)
    print(f"abm dashboard: {shown[0]}  (Ctrl+C stops it)", flush=True)
    for url in shown[1:]:
        print(f"               {url}", flush=True)
    if policy.token:
        print("abm dashboard: bound beyond loopback: every request needs the token in that URL", flush=True)
    config = uvicorn.Config(app, host=host, port=policy.port, log_config=log_config, log_level="error",
                            access_log=False, loop="auto")
    uvicorn.Server(config).run()
