"""Who may talk to ``abm dashboard``: an ASGI guard in front of Solara's starlette app.

The threats are a foreign web page driving the dashboard from the user's own browser, and, when
bound beyond loopback, anyone on the network. Every HTTP request and WebSocket upgrade passes:

1. **Host** (DNS rebinding: a foreign name that resolves to this machine): a loopback name
   (``127.0.0.1``, ``localhost``, ``[::1]``) or the ``--host`` address with the served port, or
   the host of an ``--allow-origin`` URL (any port: a proxy may rewrite it). Bound to a wildcard
   address (``0.0.0.0``, ``::``) the server cannot know its names, so any Host passes and the
   token (3) protects it.
2. **Origin** (a foreign page opening the kernel's WebSocket, or posting): when sent, it must be
   the page's own (``scheme://`` + Host) or an ``--allow-origin`` URL. Browsers serialise an
   origin canonically, so the comparison is exact; ``null`` never passes; no Origin (curl, a
   plain page load) passes.
3. **Token** (only beyond loopback, as Jupyter does): a random token printed in the URL, as
   ``?token=...`` (the response then sets an HttpOnly, SameSite=Strict cookie), that cookie, or an
   ``Authorization: token ...`` header.

A refusal is an HTTP 403 with a one-line reason, or a WebSocket closed before it is accepted
(code 1008, which the server answers with HTTP 403). Allowed responses carry
``Content-Security-Policy: frame-ancestors 'self'`` (and the ``--allow-origin`` URLs): no framing.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import secrets
import sys
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection
from starlette.responses import PlainTextResponse
from starlette.websockets import WebSocketClose

from abm.errors import UserError

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
TOKEN_PARAM = "token"
MAX_LOGGED_REFUSALS = 20  # refusals printed to stderr; a scanner must not flood the terminal
_HOSTNAME = re.compile(r"(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?",
                       re.ASCII | re.IGNORECASE)
_ORIGIN_HINT = "expected an origin such as https://example.org or http://192.168.1.5:8765 (scheme, host, optional port)"


def is_wildcard(host: str) -> bool:
    return host.strip("[]") in ("0.0.0.0", "::")


def is_loopback(host: str) -> bool:
    """``localhost`` and loopback addresses (127.0.0.0/8, ::1); other names may resolve anywhere."""
    name = host.strip("[]").lower()
    try:
        return name == "localhost" or ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _valid_name(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return bool(_HOSTNAME.fullmatch(name))


def _bracketed(name: str) -> str:
    return f"[{name}]" if ":" in name else name


def check_bind_host(host: str) -> str:
    """The ``--host`` value without brackets, or a one-line UserError for one that cannot be an address."""
    text = host.strip()
    if not text:
        raise UserError("--host: empty; give an address such as 127.0.0.1, ::1 or 0.0.0.0")
    name = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if not _valid_name(name):
        raise UserError(f"--host {host!r}: not an IP address or host name")
    return name


def parse_origin(text: str) -> str:
    """An ``--allow-origin`` value as a browser writes an origin (``scheme://host[:port]``, lower
    case, no default port), or a one-line UserError."""
    raw = text.strip()
    if raw == "*":
        raise UserError("--allow-origin '*': allowing every origin would undo the check; name each origin, "
                        "e.g. https://example.org")
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        port = parts = None
    if (parts is None or parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc
            or port == 0 or parts.path not in ("", "/") or raw.endswith(("?", "#")) or parts.query
            or parts.fragment or not _valid_name(parts.hostname)):
        raise UserError(f"--allow-origin {text!r}: {_ORIGIN_HINT}")
    default = {"http": 80, "https": 443}[parts.scheme]
    return f"{parts.scheme}://{_bracketed(parts.hostname)}{'' if port in (None, default) else f':{port}'}"


@dataclass(frozen=True)
class Policy:
    """What the guard lets through; built by :func:`make_policy`."""

    port: int
    hosts: frozenset[str]  # Host header values accepted (lower case)
    proxy_host: re.Pattern | None  # --allow-origin hosts, with any port
    any_host: bool  # wildcard bind: every Host passes (the token protects)
    origins: frozenset[str]  # --allow-origin values, normalised
    token: str | None = field(default=None, repr=False)

    @property
    def cookie_name(self) -> str:
        return f"abm-dashboard-token-{self.port}"  # cookies ignore ports: one name per served port

    def host_ok(self, host: str) -> bool:
        return (self.any_host or host in self.hosts
                or (self.proxy_host is not None and self.proxy_host.fullmatch(host) is not None))

    def origin_ok(self, origin: str, host: str, scheme: str) -> bool:
        secure = scheme in ("https", "wss")
        own = ("https://" if secure else "http://") + host.removesuffix(":443" if secure else ":80")
        return origin in self.origins or origin == own

    def token_ok(self, candidate: str | None) -> bool:
        return self.token is None or (candidate is not None and hmac.compare_digest(
            candidate.encode("utf-8", "replace"), self.token.encode()))


def make_policy(bind_host: str, port: int, allow_origins: list[str] | tuple[str, ...] = (),
                token: str | None = None) -> Policy:
    """The policy for ``abm dashboard --host H --port P --allow-origin ...``. A token is drawn
    at random when ``bind_host`` is beyond loopback and none is given."""
    name = check_bind_host(bind_host).lower()
    origins = frozenset(parse_origin(o) for o in allow_origins)
    names = set(LOOPBACK_NAMES) | (set() if is_wildcard(name) else {_bracketed(name)})
    hosts = {f"{n}:{port}" for n in names} | (names if port == 80 else set())
    proxies = sorted(re.escape(_bracketed(urlsplit(o).hostname)) for o in origins)
    if token is None and not is_loopback(name):
        token = secrets.token_urlsafe(32)
    return Policy(port=port, hosts=frozenset(hosts), any_host=is_wildcard(name), origins=origins, token=token,
                  proxy_host=re.compile(f"(?:{'|'.join(proxies)})(?::[0-9]{{1,5}})?") if proxies else None)


def urls(policy: Policy, bind_host: str) -> list[str]:
    """The URLs to print: with the token when there is one."""
    query = f"?{TOKEN_PARAM}={policy.token}" if policy.token else ""
    if is_wildcard(bind_host):
        import socket

        hosts = [socket.gethostname(), "127.0.0.1"]
    else:
        hosts = [bind_host.strip("[]")]
    return [f"http://{_bracketed(h)}:{policy.port}/{query}" for h in dict.fromkeys(hosts)]


class Guard:
    """ASGI middleware: applies a :class:`Policy` to every HTTP request and WebSocket upgrade."""

    def __init__(self, app, policy: Policy, *, log=None):
        self.app, self.policy, self.refused = app, policy, 0
        self.frame_policy = " ".join(["frame-ancestors 'self'", *sorted(policy.origins)])
        self.log = log if log is not None else (lambda line: print(line, file=sys.stderr, flush=True))

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)  # lifespan
        conn = HTTPConnection(scope)
        reason = self.refusal(conn)
        if reason is not None:
            self.note(scope, reason)
            refuse = (WebSocketClose(1008) if scope["type"] == "websocket"
                      else PlainTextResponse(f"403 Forbidden: {reason}\n", status_code=403))
            return await refuse(scope, receive, send)
        if scope["type"] == "websocket":
            return await self.app(scope, receive, send)
        cookie = None
        if self.policy.token and self.policy.token_ok(conn.query_params.get(TOKEN_PARAM)):
            secure = "; Secure" if scope.get("scheme") == "https" else ""
            cookie = f"{self.policy.cookie_name}={self.policy.token}; Path=/; HttpOnly; SameSite=Strict{secure}"

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                headers = MutableHeaders(scope=message)
                headers.setdefault("content-security-policy", self.frame_policy)  # no framing by foreign pages
                if cookie:
                    headers.append("set-cookie", cookie)
            await send(message)

        return await self.app(scope, receive, send_with_headers)

    def refusal(self, conn) -> str | None:
        """Why ``conn`` is refused, or None."""
        headers, policy = conn.headers, self.policy
        for name in ("Host", "Origin"):
            if len(headers.getlist(name)) > 1:  # which one counts is up to each reader: refuse
                return f"more than one {name} header"
        host, origin = headers.get("host"), headers.get("origin")
        if host is None or not policy.host_ok(host.strip().lower()):
            return f"Host {host!r} is not this dashboard's address"
        if origin is not None and not policy.origin_ok(origin.strip().lower(), host.strip().lower(),
                                                       conn.scope.get("scheme", "http")):
            return f"Origin {origin!r} is not allowed (start with --allow-origin to allow it)"
        auth = headers.get("authorization", "")
        if (policy.token is None or policy.token_ok(conn.query_params.get(TOKEN_PARAM))
                or policy.token_ok(conn.cookies.get(policy.cookie_name))
                or (auth[:6].lower() == "token " and policy.token_ok(auth[6:].strip()))):
            return None
        return "missing or wrong token (open the URL with ?token=... that `abm dashboard` printed)"

    def note(self, scope, reason: str) -> None:
        self.refused += 1
        if self.refused <= MAX_LOGGED_REFUSALS:
            kind = "WebSocket" if scope["type"] == "websocket" else scope.get("method", "GET")
            self.log(f"abm dashboard: refused {kind} {scope.get('path', '')}: {reason}")
            if self.refused == MAX_LOGGED_REFUSALS:
                self.log("abm dashboard: further refusals are not shown")
