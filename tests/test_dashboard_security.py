"""``abm dashboard`` refuses foreign pages: Host and Origin checks and the token beyond loopback.

Three layers: the ASGI guard alone (``abm.dashboard.security.Guard`` around a tiny app, driven
in-process, with a matrix of Host/Origin/token cases and a Hypothesis fuzz of the headers); the
real server (``abm dashboard RUN --port P`` in a subprocess, spoken to over raw sockets so the
test sets Host and Origin itself, as a hostile page or a DNS-rebinding one would); and the
flags' error contract (exit 2, one line, no traceback). The browser version is in
``tests/test_dashboard_browser.py``.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import os
import re
import socket
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings, strategies as st

from abm.dashboard.security import Guard, make_policy, parse_origin
from abm.errors import UserError
from conftest import ROOT, SCENARIOS

P = 18765  # the port the in-process policies believe they serve


# -- the guard alone ----------------------------------------------------------------------
async def _inner(scope, receive, send):
    """Stands in for Solara: 200 'ok' for HTTP; a WebSocket is accepted and sent one message."""
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})
    elif scope["type"] == "websocket":
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": "run data"})
        await send({"type": "websocket.close", "code": 1000})
    else:
        await send({"type": "lifespan.startup.complete"})


def call(guard: Guard, kind: str, host: str | None = f"127.0.0.1:{P}", origin: str | None = None,
         query: str = "", extra: tuple = ()) -> tuple[str, list[dict]]:
    """One request through ``guard``: ('allowed' | 'refused', the messages sent back)."""
    headers = ([("host", host)] if host is not None else []) + ([("origin", origin)] if origin is not None else [])
    headers += list(extra)
    scope = {"type": kind, "scheme": "http" if kind == "http" else "ws", "path": "/jupyter/api/kernels/k/channels",
             "query_string": query.encode(), "method": "GET",
             "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]}
    inbox = [{"type": "websocket.connect"} if kind == "websocket" else {"type": "http.request", "body": b""}]
    sent: list[dict] = []

    async def receive():
        if inbox:
            return inbox.pop(0)
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    asyncio.run(asyncio.wait_for(guard(scope, receive, send), 10))
    if kind == "http":
        return ("allowed" if sent[0]["status"] == 200 else "refused"), sent
    if sent[0]["type"] == "websocket.accept":
        return "allowed", sent
    assert [(m["type"], m["code"]) for m in sent] == [("websocket.close", 1008)]  # before accept: the handshake gets 403
    return "refused", sent


def guard(host: str = "127.0.0.1", allow=(), token=None) -> Guard:
    return Guard(_inner, make_policy(host, P, list(allow), token=token), log=lambda line: None)


LOOPBACK_CASES = [  # (Host, Origin, allowed?)
    (f"127.0.0.1:{P}", None, True),
    (f"127.0.0.1:{P}", f"http://127.0.0.1:{P}", True),
    (f"localhost:{P}", f"http://localhost:{P}", True),
    (f"LOCALHOST:{P}", f"http://localhost:{P}", True),
    (f"[::1]:{P}", f"http://[::1]:{P}", True),
    (f"127.0.0.1:{P}", "http://evil.example", False),  # the reported attack
    (f"127.0.0.1:{P}", f"http://evil.example:{P}", False),
    (f"127.0.0.1:{P}", f"http://127.0.0.1:{P + 1}", False),  # another local port (same site, other origin)
    (f"127.0.0.1:{P}", f"https://127.0.0.1:{P}", False),
    (f"127.0.0.1:{P}", f"http://localhost:{P}", False),  # an origin is not the page's own host
    (f"127.0.0.1:{P}", "null", False),  # sandboxed frames, file:// pages
    (f"127.0.0.1:{P}", "", False),
    (f"127.0.0.1:{P}", f"http://127.0.0.1:{P}/path", False),
    (f"127.0.0.1:{P}", "not a url", False),
    (f"evil.example:{P}", None, False),  # DNS rebinding: the browser sends the attacker's name
    (f"evil.example:{P}", f"http://evil.example:{P}", False),
    ("evil.example", None, False),
    (f"127.0.0.1:{P + 1}", None, False),
    ("127.0.0.1", None, False),  # port 80 implied
    (f"127.0.0.2:{P}", None, False),  # not the bound address
    (f"127.0.0.1.evil.example:{P}", None, False),
    (f"127.0.0.1:{P}:1", None, False),
    ("[::1", None, False),
    (f"a b:{P}", None, False),
    (f"127.0.0.1:{P}\x00", None, False),
    ("127.0.0.1:99999", None, False),
    ("", None, False),
    (None, None, False),  # no Host header (HTTP/1.0)
]


@pytest.mark.parametrize("kind", ["http", "websocket"])
def test_loopback_policy_refuses_foreign_hosts_and_origins(kind):
    g = guard()
    outcomes = [(h, o, call(g, kind, h, o)[0]) for h, o, _ in LOOPBACK_CASES]
    assert outcomes == [(h, o, "allowed" if ok else "refused") for h, o, ok in LOOPBACK_CASES]
    refused = sum(not ok for *_, ok in LOOPBACK_CASES)
    assert g.refused == refused and (refused, len(LOOPBACK_CASES)) == (23, 28)


def test_a_refused_request_never_reaches_the_app_and_gets_403_with_a_reason():
    reached = []

    async def app(scope, receive, send):
        reached.append(scope["type"])
        await _inner(scope, receive, send)

    g = Guard(app, make_policy("127.0.0.1", P), log=reached.append)
    outcome, sent = call(g, "websocket", origin="http://evil.example")
    assert outcome == "refused" and not any(m["type"] == "websocket.send" for m in sent)
    outcome, sent = call(g, "http", host="evil.example")
    assert outcome == "refused" and sent[0]["status"] == 403
    assert sent[1]["body"] == b"403 Forbidden: Host 'evil.example' is not this dashboard's address\n"
    assert reached == ["abm dashboard: refused WebSocket /jupyter/api/kernels/k/channels: Origin 'http://evil.example' "
                       "is not allowed (start with --allow-origin to allow it)",
                       "abm dashboard: refused GET /jupyter/api/kernels/k/channels: Host 'evil.example' is not "
                       "this dashboard's address"]
    outcome, sent = call(g, "http")
    assert outcome == "allowed" and reached[-1] == "http"
    assert dict(sent[0]["headers"])[b"content-security-policy"] == b"frame-ancestors 'self'"  # no foreign framing
    # lifespan (startup/shutdown) passes through untouched
    asyncio.run(g({"type": "lifespan"}, None, lambda m: asyncio.sleep(0)))
    assert reached[-1] == "lifespan"


def test_duplicate_host_or_origin_headers_are_refused():
    g = guard()
    assert call(g, "http", extra=(("host", f"127.0.0.1:{P}"),))[0] == "refused"
    assert call(g, "websocket", origin=f"http://127.0.0.1:{P}", extra=(("origin", "http://evil.example"),))[0] == "refused"


def test_allow_origin_admits_that_origin_and_its_host_only():
    g = guard(allow=["https://Dash.Example.org/", "http://192.168.1.5:8000"])
    assert call(g, "websocket", origin="https://dash.example.org")[0] == "allowed"
    assert call(g, "websocket", origin="https://dash.example.org:443")[0] == "refused"  # browsers omit default ports
    assert call(g, "websocket", origin="http://192.168.1.5:8000")[0] == "allowed"
    assert call(g, "websocket", origin="http://dash.example.org")[0] == "refused"  # other scheme
    assert call(g, "websocket", origin="https://evil.example")[0] == "refused"
    # behind a proxy the Host is the public name (any port the proxy keeps)
    assert call(g, "http", host="dash.example.org")[0] == "allowed"
    assert call(g, "websocket", host="dash.example.org", origin="https://dash.example.org")[0] == "allowed"
    assert call(g, "http", host="evil.example")[0] == "refused"
    csp = dict(call(g, "http")[1][0]["headers"])[b"content-security-policy"]
    assert csp == b"frame-ancestors 'self' http://192.168.1.5:8000 https://dash.example.org"


def test_token_is_required_beyond_loopback_and_sets_a_strict_cookie():
    g = guard("0.0.0.0")
    token = g.policy.token
    assert token and len(token) >= 40 and guard("0.0.0.0").policy.token != token  # random per start
    assert guard("127.0.0.1").policy.token is None and guard("::1").policy.token is None
    assert guard("192.168.1.5").policy.token and guard("myhost.lan").policy.token
    # wildcard: any Host (the machine's names are unknown), but never without the token
    for host in (f"127.0.0.1:{P}", f"10.1.2.3:{P}", f"evil.example:{P}"):
        assert call(g, "http", host)[0] == "refused"
        assert call(g, "http", host, query="token=wrong")[0] == "refused"
        assert call(g, "websocket", host, origin=f"http://{host}")[0] == "refused"  # DNS rebinding: no token
    outcome, sent = call(g, "http", f"10.1.2.3:{P}", query=f"token={token}")
    cookie = dict(sent[0]["headers"])[b"set-cookie"].decode()
    assert outcome == "allowed"
    assert cookie == f"abm-dashboard-token-{P}={token}; Path=/; HttpOnly; SameSite=Strict"
    with_cookie = (("cookie", f"other=1; abm-dashboard-token-{P}={token}"),)
    assert call(g, "http", f"10.1.2.3:{P}", extra=with_cookie)[0] == "allowed"
    assert call(g, "websocket", f"10.1.2.3:{P}", origin=f"http://10.1.2.3:{P}", extra=with_cookie)[0] == "allowed"
    assert call(g, "http", extra=(("authorization", f"token {token}"),))[0] == "allowed"
    assert call(g, "http", extra=(("cookie", f"abm-dashboard-token-{P + 1}={token}"),))[0] == "refused"  # other port
    assert call(g, "http", extra=(("cookie", "garbage;;=\x7f"),))[0] == "refused"
    # the token does not excuse a foreign origin
    assert call(g, "websocket", origin="http://evil.example", query=f"token={token}")[0] == "refused"


@settings(max_examples=300, deadline=None)
@given(host=st.one_of(st.none(), st.text(max_size=40), st.sampled_from(
           [f"127.0.0.1:{P}", f"localhost:{P}", f"[::1]:{P}", "evil.example", f"127.0.0.1:{P + 1}"])),
       origin=st.one_of(st.none(), st.text(max_size=40), st.sampled_from(
           [f"http://127.0.0.1:{P}", "http://evil.example", "null", f"http://localhost:{P}"])),
       kind=st.sampled_from(["http", "websocket"]))
def test_fuzzed_headers_are_forwarded_only_when_host_and_origin_are_this_server(host, origin, kind):
    if host is not None:
        host = host.encode("latin-1", "replace").decode("latin-1")
    if origin is not None:
        origin = origin.encode("latin-1", "replace").decode("latin-1")
    outcome, _ = call(guard(), kind, host, origin)  # never raises
    good_hosts = {f"127.0.0.1:{P}", f"localhost:{P}", f"[::1]:{P}"}
    own = host is not None and host.strip().lower() in good_hosts
    same = origin is None or (own and origin.strip().lower() == f"http://{host.strip().lower()}")
    assert outcome == ("allowed" if own and same else "refused"), (host, origin)


def test_parse_origin_and_bind_host_refuse_bad_values_in_one_line():
    assert parse_origin("HTTPS://Example.ORG:443/") == "https://example.org"
    assert parse_origin("http://[::1]:8080") == "http://[::1]:8080"
    for bad in ("*", "example.org", "ftp://example.org", "http://", "http://x/path", "http://x?q", "http://x#f",
                "http://u:p@x", "http://x:99999", "http://x:port", "javascript:alert(1)", ""):
        with pytest.raises(UserError) as info:
            parse_origin(bad)
        assert str(info.value).startswith("--allow-origin ") and "\n" not in str(info.value)
    for bad in ("", "  ", "bad host", "a..b", "-x.org", "x" * 300, "http://x", "ünï.example"):
        with pytest.raises(UserError) as info:
            make_policy(bad, P)
        assert str(info.value).startswith("--host") and "\n" not in str(info.value)


def test_check_port_handles_ipv6_and_unresolvable_hosts():
    from abm.dashboard import check_port

    if socket.has_ipv6:
        try:
            with socket.socket(socket.AF_INET6) as s:
                s.bind(("::1", 0))
                free = s.getsockname()[1]
        except OSError:
            free = None
        if free:
            check_port("::1", free)  # was: AF_INET only, so --host ::1 could never start
    with pytest.raises(UserError, match="^--host 999.1.1.1: cannot listen there"):
        check_port("999.1.1.1", 8765)


# -- the flags through the console script -------------------------------------------------
FLAG_CASES = [
    (["--allow-origin", "*"], "--allow-origin '*': allowing every origin would undo the check; name each origin, "
                              "e.g. https://example.org"),
    (["--allow-origin", "ftp://example.org"], "--allow-origin 'ftp://example.org': expected an origin"),
    (["--allow-origin", "http://example.org/app"], "--allow-origin 'http://example.org/app': expected an origin"),
    (["--allow-origin", "http://example.org:70000"], "--allow-origin 'http://example.org:70000': expected"),
    (["--allow-origin", "example.org"], "--allow-origin 'example.org': expected an origin"),
    (["--host", ""], "--host: empty; give an address such as 127.0.0.1, ::1 or 0.0.0.0"),
    (["--host", "bad host"], "--host 'bad host': not an IP address or host name"),
    (["--port", "0"], "--port: must be 1..65535, got 0"),
    (["--port", "70000"], "--port: must be 1..65535, got 70000"),
    (["--port", "many"], "Invalid value for '--port'"),
]


def test_bad_flag_values_exit_2_with_one_line(tmp_path, monkeypatch, capsys):
    """In-process through ``abm.cli.main`` (the console script's code): fast, and the same path."""
    from abm.cli import main

    for args, start in FLAG_CASES:
        monkeypatch.setattr("sys.argv", ["abm", "dashboard", str(tmp_path), *args])
        with pytest.raises(SystemExit) as info:
            main()
        err = capsys.readouterr().err
        assert info.value.code == 2, (args, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith(f"error: {start}"), (args, err)


def test_bad_flag_values_through_the_console_script(cli, tmp_path):
    for args in (["--allow-origin", "*"], ["--host", "bad host"]):
        res = cli("dashboard", str(tmp_path), *args, timeout=60)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("error: --"), res.stderr
    res = cli("dashboard", "--live", str(tmp_path / "x.yaml"), "--allow-origin", "nope", timeout=60)
    assert res.returncode == 2 and res.stderr.startswith("error: --allow-origin 'nope'"), res.stderr


# -- the real server ----------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from abm.config import load_scenario
    from abm.runner import run_to_folder

    scenario = load_scenario(SCENARIOS / "eutopia.yaml", ["population.n_male=100", "population.n_female=100",
                                                          "episodes.count=2"])
    folder, _ = run_to_folder(scenario, tmp_path_factory.mktemp("security"))
    return folder


class Server:
    def __init__(self, *args: str):
        self.port = _free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "abm.cli", "dashboard", *args, "--port", str(self.port)],
                                     cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.first_line = self.proc.stdout.readline()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"dashboard exited {self.proc.returncode}: {self.first_line}{self.proc.stdout.read()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("dashboard did not listen")

    def get(self, path: str = "/", host: str | None = None, headers: dict | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host or f"127.0.0.1:{self.port}")
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        conn.endheaders()
        response = conn.getresponse()
        body = response.read()
        conn.close()
        return response.status, response.headers, body

    def websocket(self, host: str | None = None, origin: str | None = None, query: str = "",
                  cookie: str | None = None) -> tuple[int, bytes]:
        """Open Solara's kernel channel by hand: (HTTP status of the handshake, first bytes after it)."""
        kernel = base64.b16encode(os.urandom(8)).decode().lower()
        lines = [f"GET /jupyter/api/kernels/{kernel}/channels?session_id={kernel}{query} HTTP/1.1",
                 f"Host: {host or f'127.0.0.1:{self.port}'}", "Upgrade: websocket", "Connection: Upgrade",
                 f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}", "Sec-WebSocket-Version: 13"]
        lines += [f"Origin: {origin}"] * (origin is not None) + [f"Cookie: {cookie}"] * (cookie is not None)
        with socket.create_connection(("127.0.0.1", self.port), timeout=60) as s:
            s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            status = int(data.split(b" ", 2)[1])
            return status, data.split(b"\r\n\r\n", 1)[-1]

    def stop(self) -> str:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.first_line + self.proc.stdout.read()  # read(), not communicate(): readline() buffered the rest


@pytest.fixture(scope="module")
def server(run_dir):
    srv = Server(str(run_dir))
    yield srv
    srv.stop()


def test_real_server_refuses_foreign_origin_and_host_and_serves_its_own(server):
    port = server.port
    assert server.first_line.strip() == f"abm dashboard: http://127.0.0.1:{port}/  (Ctrl+C stops it)"
    status, headers, body = server.get("/")
    assert status == 200 and b"<html" in body.lower()
    assert headers["content-security-policy"] == "frame-ancestors 'self'"
    assert server.get("/", host=f"localhost:{port}")[0] == 200
    status, _, body = server.get("/", host=f"evil.example:{port}")
    assert status == 403 and body == f"403 Forbidden: Host 'evil.example:{port}' is not this dashboard's address\n".encode()
    assert server.get("/", headers={"Origin": "http://evil.example"})[0] == 403
    assert server.get("/static/assets/favicon.png", host="evil.example")[0] == 403
    # the reported attack: a kernel channel from a foreign origin, no cookie
    assert server.websocket(origin="http://evil.example") == (403, b"")
    assert server.websocket(origin=f"http://127.0.0.1:{_free_port()}") == (403, b"")
    assert server.websocket(host=f"evil.example:{port}", origin=f"http://evil.example:{port}") == (403, b"")
    # the page's own origin still opens it
    assert server.websocket(origin=f"http://127.0.0.1:{port}")[0] == 101
    assert server.websocket(host=f"localhost:{port}", origin=f"http://localhost:{port}")[0] == 101


def test_bound_beyond_loopback_every_request_needs_the_printed_token(run_dir):
    srv = Server(str(run_dir), "--host", "0.0.0.0")
    try:
        port = srv.port
        urls = re.findall(r"http://\S+", srv.first_line)
        assert len(urls) == 1 and urls[0].startswith("http://") and f":{port}/?token=" in urls[0]
        token = urls[0].split("?token=", 1)[1]
        assert len(token) >= 40
        assert srv.get("/")[0] == 403
        assert srv.get("/?token=nope")[0] == 403
        assert srv.websocket(origin=f"http://127.0.0.1:{port}")[0] == 403
        status, headers, _ = srv.get(f"/?token={token}")
        assert status == 200
        cookie = next(c for c in headers.get_all("set-cookie") if c.startswith("abm-dashboard-token-"))
        assert cookie.startswith(f"abm-dashboard-token-{port}={token};") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        jar = f"abm-dashboard-token-{port}={token}"
        assert srv.get("/", headers={"Cookie": jar})[0] == 200
        assert srv.websocket(origin=f"http://127.0.0.1:{port}", cookie=jar)[0] == 101
        assert srv.websocket(origin="http://evil.example", cookie=jar)[0] == 403  # the token does not excuse it
    finally:
        out = srv.stop()
    assert "every request needs the token" in out, out
