"""Who may talk to ``abm dashboard``: an ASGI guard in front of Solara's starlette app.

Every HTTP request and every WebSocket upgrade passes three checks before Solara sees it:

1. **Host** (DNS rebinding): the ``Host`` header must name this server: a loopback name
   (``127.0.0.1``, ``localhost``, ``[::1]``) or the ``--host`` address, with the served port,
   or the host of an ``--allow-origin`` URL. Bound to a wildcard address (``0.0.0.0``, ``::``)
   the server cannot know all its names, so any Host passes and the token (3) protects it.
2. **Origin** (cross-origin WebSocket hijacking, cross-site POSTs): a request that carries an
   ``Origin`` header (browsers send one on every WebSocket and every cross-origin request)
   must come from this server's own origin (``scheme://`` + the checked Host) or from an
   ``--allow-origin`` URL. No Origin (curl, a plain page load) passes this check.
3. **Token** (only when bound beyond loopback, as Jupyter does): a random token, printed in
   the URL the command shows, must come as ``?token=...`` (the response then sets an HttpOnly,
   SameSite=Strict cookie so the page's own requests carry it), as that cookie, or as an
   ``Authorization: token ...`` header.

Allowed HTTP responses carry ``Content-Security-Policy: frame-ancestors 'self'`` (plus the
``--allow-origin`` URLs), so a foreign page cannot frame the dashboard either.

A refused HTTP request gets ``403`` with a one-line reason; a refused WebSocket is closed before
it is accepted (code 1008, which the server sends as an HTTP 403 to the handshake).
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import secrets
import sys
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlsplit

from abm.errors import UserError

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARD_HOSTS = ("0.0.0.0", "::")
TOKEN_PARAM = "token"
_PORT = re.compile(r"[1-9][0-9]{0,4}")  # ASCII digits, no leading zero
MAX_LOGGED_REFUSALS = 20  # refusals printed to stderr; a scanner must not flood the terminal


def is_wildcard(host: str) -> bool:
    return host.strip("[]") in WILDCARD_HOSTS


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (127.0.0.0/8, ::1); names other than
    ``localhost`` count as beyond loopback (they may resolve anywhere)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind_host(host: str) -> str:
    """The ``--host`` value, or a one-line UserError for one that cannot be an address."""
    text = host.strip()
    if not text:
        raise UserError("--host: empty; give an address such as 127.0.0.1, ::1 or 0.0.0.0")
    name = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        pass
    labels = name.rstrip(".").split(".")
    if len(name) > 253 or not all(0 < len(lb) <= 63 and lb.replace("-", "").isalnum() and lb.isascii()
                                  and not lb.startswith("-") and not lb.endswith("-") for lb in labels):
        raise UserError(f"--host {host!r}: not an IP address or host name")
    return name


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``name[:port]`` / ``[v6][:port]`` -> (lower-case name without brackets, port or None);
    None when malformed."""
    value = value.strip().lower()
    if not value or not value.isprintable() or any(c in value for c in " /\\@?#"):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1:]
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return None
        if not rest:
            return name, None
        if not rest.startswith(":"):
            return None
        port_text = rest[1:]
    else:
        name, sep, port_text = value.partition(":")
        if not name or ":" in port_text:
            return None
        if not sep:
            return name, None
    if not _PORT.fullmatch(port_text) or int(port_text) > 65535:
        return None
    return name, int(port_text)


def _fmt_host(name: str) -> str:
    return f"[{name}]" if ":" in name else name


def parse_origin(text: str) -> str:
    """An ``--allow-origin`` value normalised to ``scheme://host[:port]`` (lower case, default
    port dropped), or a one-line UserError."""
    raw = text.strip()
    hint = "expected an origin such as https://example.org or http://192.168.1.5:8765 (scheme, host, optional port)"
    if raw == "*":
        raise UserError("--allow-origin '*': allowing every origin would undo the check; name each origin, "
                        "e.g. https://example.org")
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        raise UserError(f"--allow-origin {text!r}: {hint}") from None
    if (parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password
            or parts.path not in ("", "/") or parts.query or parts.fragment or raw.endswith("?") or raw.endswith("#")):
        raise UserError(f"--allow-origin {text!r}: {hint}")
    netloc = parts.netloc.rsplit("@", 1)[-1]
    if _split_host(netloc) is None:
        raise UserError(f"--allow-origin {text!r}: {hint}")
    return _origin(parts.scheme, parts.hostname, port)


def _origin(scheme: str, name: str, port: int | None) -> str:
    default = {"http": 80, "https": 443, "ws": 80, "wss": 443}.get(scheme)
    scheme = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    suffix = "" if port is None or port == default else f":{port}"
    return f"{scheme}://{_fmt_host(name.lower())}{suffix}"


@dataclass(frozen=True)
class Policy:
    """What the guard lets through; built by :func:`make_policy`."""

    port: int
    host_names: frozenset[str]  # names accepted with the served port
    origin_host_names: frozenset[str]  # names of --allow-origin URLs (any port: a proxy may rewrite it)
    any_host: bool  # wildcard bind: every Host passes (the token protects)
    origins: frozenset[str]  # normalised --allow-origin values
    token: str | None = field(default=None, repr=False)

    @property
    def cookie_name(self) -> str:
        return f"abm-dashboard-token-{self.port}"  # cookies ignore ports: one name per served port

    def host_ok(self, host_header: str | None) -> bool:
        if host_header is None:
            return False
        parsed = _split_host(host_header)
        if parsed is None:
            return False
        name, port = parsed
        if self.any_host or name in self.origin_host_names:
            return True
        return name in self.host_names and (port == self.port or (port is None and self.port == 80))

    def origin_ok(self, origin: str | None, host_header: str, scheme: str) -> bool:
        """Browsers serialise an origin canonically (lower-case ``scheme://host[:port]``, no
        default port, no path), so an exact comparison is the check; ``null`` never passes."""
        if origin is None:
            return True
        normal = origin.strip().lower()
        if normal in self.origins:
            return True
        parsed = _split_host(host_header)
        return parsed is not None and normal == _origin(scheme, *parsed)

    def token_ok(self, candidate: str | None) -> bool:
        return self.token is None or (candidate is not None and hmac.compare_digest(
            candidate.encode("utf-8", "replace"), self.token.encode()))


def make_policy(bind_host: str, port: int, allow_origins: list[str] | tuple[str, ...] = (),
                token: str | None = None) -> Policy:
    """The policy for ``abm dashboard --host H --port P --allow-origin ...``. A token is drawn
    at random when ``bind_host`` is beyond loopback and none is given."""
    name = check_bind_host(bind_host).lower()
    origins = [parse_origin(o) for o in allow_origins]
    names = set(LOOPBACK_NAMES)
    if not is_wildcard(name):
        names.add(name)
    origin_names = {_split_host(urlsplit(o).netloc)[0] for o in origins}
    if token is None and not is_loopback(name):
        token = secrets.token_urlsafe(32)
    return Policy(port=port, host_names=frozenset(names), origin_host_names=frozenset(origin_names),
                  any_host=is_wildcard(name), origins=frozenset(origins), token=token)


def urls(policy: Policy, bind_host: str) -> list[str]:
    """The URLs to print: with the token when there is one."""
    query = f"?{TOKEN_PARAM}={policy.token}" if policy.token else ""
    if is_wildcard(bind_host):
        import socket

        hosts = [socket.gethostname(), "127.0.0.1"]
    else:
        hosts = [bind_host.strip("[]")]
    return [f"http://{_fmt_host(h)}:{policy.port}/{query}" for h in dict.fromkeys(hosts)]


class Guard:
    """ASGI middleware: applies a :class:`Policy` to every HTTP request and WebSocket upgrade."""

    def __init__(self, app, policy: Policy, *, log=None):
        self.app = app
        self.policy = policy
        self.refused = 0
        self._frame_policy = " ".join(["frame-ancestors 'self'", *sorted(policy.origins)]).encode("latin-1")
        self._log = log if log is not None else (lambda line: print(line, file=sys.stderr, flush=True))

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)  # lifespan
        headers = _headers(scope)
        reason, set_cookie = self._check(scope, headers)
        if reason is not None:
            self._note(scope, reason)
            if scope["type"] == "websocket":
                return await _refuse_websocket(receive, send)
            return await _refuse_http(send, reason)
        if scope["type"] == "websocket":
            return await self.app(scope, receive, send)
        extra = [(b"content-security-policy", self._frame_policy)]  # no framing by foreign pages (clickjacking)
        if set_cookie is not None:
            extra.append((b"set-cookie", set_cookie))

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                message = {**message, "headers": [*message.get("headers", []),
                                                  *[(k, v) for k, v in extra if k == b"set-cookie" or k not in present]]}
            await send(message)

        return await self.app(scope, receive, send_with_headers)

    def _check(self, scope, headers: dict[str, str]) -> tuple[str | None, bytes | None]:
        """(refusal reason or None, a Set-Cookie value to add or None)."""
        policy = self.policy
        host = headers.get("host")
        if not policy.host_ok(host):
            return f"Host {host!r} is not this dashboard's address", None
        scheme = scope.get("scheme", "http")
        if not policy.origin_ok(headers.get("origin"), host, scheme):
            return f"Origin {headers.get('origin')!r} is not allowed (start with --allow-origin to allow it)", None
        if policy.token is None:
            return None, None
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = query.get(TOKEN_PARAM, [None])[-1]
        if given is not None and policy.token_ok(given):
            return None, self._cookie(scheme).encode("latin-1") if scope["type"] == "http" else None
        auth = headers.get("authorization", "")
        if auth.lower().startswith("token ") and policy.token_ok(auth[6:].strip()):
            return None, None
        if policy.token_ok(_cookie_value(headers.get("cookie"), policy.cookie_name)):
            return None, None
        return "missing or wrong token (open the URL with ?token=... that `abm dashboard` printed)", None

    def _cookie(self, scheme: str) -> str:
        secure = "; Secure" if scheme in ("https", "wss") else ""
        return f"{self.policy.cookie_name}={self.policy.token}; Path=/; HttpOnly; SameSite=Strict{secure}"

    def _note(self, scope, reason: str) -> None:
        self.refused += 1
        if self.refused <= MAX_LOGGED_REFUSALS:
            kind = "WebSocket" if scope["type"] == "websocket" else scope.get("method", "GET")
            self._log(f"abm dashboard: refused {kind} {scope.get('path', '')}: {reason}")
            if self.refused == MAX_LOGGED_REFUSALS:
                self._log("abm dashboard: further refusals are not shown")


def _headers(scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in scope.get("headers", []):
        name = key.decode("latin-1").lower()
        if name in ("host", "origin") and name in out:
            out[name] = "\x00duplicate"  # two Host or Origin headers: refuse rather than guess which counts
            continue
        text = value.decode("latin-1")
        out[name] = f"{out[name]}; {text}" if name == "cookie" and name in out else text
    return out


def _cookie_value(header: str | None, name: str) -> str | None:
    if not header:
        return None
    jar = SimpleCookie()
    try:
        jar.load(header)
    except Exception:  # a malformed Cookie header is treated as no cookie
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None


async def _refuse_http(send, reason: str) -> None:
    body = f"403 Forbidden: {reason}\n".encode("utf-8", "replace")
    await send({"type": "http.response.start", "status": 403,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _refuse_websocket(receive, send) -> None:
    message = await receive()  # websocket.connect
    if message.get("type") == "websocket.connect":
        await send({"type": "websocket.close", "code": 1008})  # before accept: the handshake gets HTTP 403
