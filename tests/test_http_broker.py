"""The HTTP capability broker against real loopback servers, with an injected resolver.

Every server a test starts is shut down at teardown, its handler threads joined. Names resolve
through :class:`FakeDNS`, so ``api.example.com`` can point at ``127.0.0.1`` (with
``allow_private``) and the number of resolutions per hop is observable.
"""

from __future__ import annotations

import http.client
import ipaddress
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgpack
import pytest

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import HttpCall, HttpResult
from aotui.supervisor.broker.http import (
    _FOREIGN,
    MAX_REQUEST_BODY,
    BrokerPolicy,
    HttpRequest,
    HttpResponse,
    _Deadline,
    _foreign_error,
    _Target,
    fetch,
    host_allowed,
    policy_from_permissions,
)
from aotui.supervisor.broker.net_policy import address_refusal
from aotui.supervisor.manifest import parse_permission

pytestmark = pytest.mark.timeout(5)

# --- loopback servers ---------------------------------------------------------------------------

Route = Callable[["Handler", bytes], None]


@dataclass
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    headers: Message
    body: bytes


class Handler(BaseHTTPRequestHandler):
    """Dispatches on the path to the test's routes and records every request."""

    server: LoopbackServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append(Seen(self.command, self.path, self.headers, body))
        route = self.server.routes.get(self.path.split("?")[0])
        if route is None:
            self.reply(404, b"no route")
        else:
            route(self, body)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = dispatch

    def reply(
        self, status: int, body: bytes = b"", headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class LoopbackServer(ThreadingHTTPServer):
    """An HTTP(S) server on 127.0.0.1 with an ephemeral port, for one test."""

    daemon_threads = False  # so server_close() joins every handler thread

    def __init__(self, routes: dict[str, Route], context: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.routes = routes
        self.seen: list[Seen] = []
        self.errors: list[BaseException] = []
        self.events: dict[str, Any] = {}
        #: Set at teardown: handlers that wait or stream stop at once.
        self.stopping = threading.Event()
        if context is not None:
            self.socket = context.wrap_socket(self.socket, server_side=True)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.errors.append(sys.exc_info()[1])  # type: ignore[arg-type]


@pytest.fixture
def serve() -> Iterator[Callable[..., LoopbackServer]]:
    started: list[tuple[LoopbackServer, threading.Thread]] = []

    def start(routes: dict[str, Route], context: ssl.SSLContext | None = None) -> LoopbackServer:
        server = LoopbackServer(routes, context)
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="loopback-http")
        thread.start()
        started.append((server, thread))
        return server

    yield start
    for server, thread in started:
        server.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=2)
        assert not thread.is_alive()


class FakeDNS:
    """A resolver with getaddrinfo's signature; a list answer is used up one entry per call."""

    def __init__(self, answers: dict[str, str | list[str]]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    def __call__(self, host: str, port: int, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        self.calls.append(host)
        answer = self.answers.get(host)
        if answer is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if isinstance(answer, list):
            answer = answer.pop(0) if len(answer) > 1 else answer[0]
        if ":" in answer:
            return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (answer, port, 0, 0))]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, port))]


def local_policy(*hosts: str, **settings: Any) -> BrokerPolicy:
    """A test policy: loopback allowed, short timeout."""
    settings.setdefault("timeout_s", 1.5)
    return BrokerPolicy(hosts or ("api.example.com",), allow_private=True, **settings)


def refused(call: Callable[[], object], code: ErrorCode) -> AotuiError:
    with pytest.raises(AotuiError) as caught:
        call()
    assert caught.value.code is code, caught.value
    return caught.value


def ok(handler: Handler, body: bytes) -> None:
    handler.reply(200, b"hello", (("Content-Type", "text/plain"), ("X-Dup", "a"), ("X-Dup", "b")))


def echo(handler: Handler, body: bytes) -> None:
    handler.reply(201, body, (("X-Method", handler.command),))


# --- host matching ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "grants", "allowed"),
    [
        ("example.com", ["example.com"], True),
        ("EXAMPLE.Com", ["example.com"], True),
        ("example.com.", ["example.com"], True),
        ("example.com", ["Example.com."], True),
        ("www.example.com", ["example.com"], False),
        ("example.com.evil.net", ["example.com"], False),
        ("a.example.com", ["*.example.com"], True),
        ("a.b.example.com", ["*.example.com"], True),
        ("A.Example.COM.", ["*.example.com"], True),
        ("example.com", ["*.example.com"], False),
        ("badexample.com", ["*.example.com"], False),
        ("a.example.com.evil.net", ["*.example.com"], False),
        ("example.com", ["*.com"], True),
        ("bücher.example", ["xn--bcher-kva.example"], True),
        ("BÜCHER.example", ["xn--bcher-kva.example"], True),
        ("xn--bcher-kva.example", ["bücher.example"], True),
        ("shop.bücher.example", ["*.xn--bcher-kva.example"], True),
        ("bucher.example", ["bücher.example"], False),
        ("anything.net", ["*"], True),
        ("example.com", [], False),
        ("example.com", ["other.org", "example.com"], True),
        ("127.0.0.1", ["*"], True),
        ("::1", ["*"], True),
        ("[::1]", ["*"], True),
        ("１２７.０.０.１", ["*"], True),  # fullwidth digits map to an address, not a name
        ("127.0.0.1", ["127.0.0.1"], False),  # an address is never matched by name
        ("1.2.3.4", ["*.3.4"], False),
        ("１２７.０.０.１", ["*.0.1"], False),
        ("127.1", ["*"], False),  # getaddrinfo reads it as 127.0.0.1: refused as garbage
        ("0x7f000001", ["*"], False),
        ("example.com", ["*.", "*..com", "a b"], False),
    ],
)
def test_host_matching(host: str, grants: list[str], allowed: bool) -> None:
    assert host_allowed(host, grants) is allowed


@pytest.mark.parametrize(
    "host",
    [
        "",
        ".",
        "..",
        "a..example.com",
        "-a.example.com",
        "a-.example.com",
        "a_b.example.com",
        "exa mple.com",
        "example.com/",
        "example.com:80",
        "user@example.com",
        "a" * 64 + ".example.com",
        "a\x00.example.com",
        "example.com..",
        "[example.com]",
    ],
)
def test_garbage_hosts_match_nothing(host: str) -> None:
    assert host_allowed(host, ["*"]) is False


# --- addresses ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.1.1", "private"),
        ("172.16.0.1", "private"),
        ("169.254.169.254", "link-local"),
        ("100.64.0.1", "CGNAT"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
    ],
)
def test_private_addresses_refused(address: str, kind: str) -> None:
    dns = FakeDNS({"api.example.com": address})
    policy = BrokerPolicy(("api.example.com",))
    error = refused(
        lambda: fetch(HttpRequest("GET", "http://api.example.com/"), policy, dns),
        ErrorCode.E_PERMISSION,
    )
    assert error.data["address"] == str(ipaddress.ip_address(address))
    assert kind in error.message
    assert "api.example.com" in error.message
    assert dns.calls == ["api.example.com"]


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "2606:4700:4700::1111", "::ffff:93.184.216.34", "2002:5db8:d822::"]
)
def test_public_addresses_pass_the_address_check(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address)) is None


def test_ip_literal_urls_skip_dns_and_still_face_the_address_check(
    serve: Callable[..., LoopbackServer],
) -> None:
    dns = FakeDNS({})
    literal = HttpRequest("GET", "http://127.0.0.1/")
    refused(lambda: fetch(literal, BrokerPolicy(("*",)), dns), ErrorCode.E_PERMISSION)
    refused(lambda: fetch(literal, BrokerPolicy(("api.example.com",)), dns), ErrorCode.E_PERMISSION)
    server = serve({"/": ok})
    request = HttpRequest("GET", f"http://127.0.0.1:{server.port}/")
    assert fetch(request, local_policy("*"), dns).status == 200
    assert dns.calls == []


def test_ungranted_host_names_host_and_grants() -> None:
    dns = FakeDNS({"evil.test": "93.184.216.34"})
    policy = BrokerPolicy(("api.example.com", "*.cdn.example.com"))
    error = refused(
        lambda: fetch(HttpRequest("GET", "https://evil.test/x"), policy, dns),
        ErrorCode.E_PERMISSION,
    )
    assert "evil.test" in error.message
    assert "net:http:api.example.com, net:http:*.cdn.example.com" in error.message
    assert dns.calls == []  # the grant is checked before anything is resolved


def test_ports_outside_the_policy_are_refused_before_resolving() -> None:
    dns = FakeDNS({"api.example.com": "93.184.216.34"})
    request = HttpRequest("GET", "http://api.example.com:8080/")
    error = refused(
        lambda: fetch(request, BrokerPolicy(("api.example.com",)), dns), ErrorCode.E_PERMISSION
    )
    assert "8080" in error.message
    assert dns.calls == []


# --- requests and responses ---------------------------------------------------------------------


def test_get_reaches_a_loopback_server(serve: Callable[..., LoopbackServer]) -> None:
    server = serve({"/hello": ok})
    dns = FakeDNS({"api.example.com": "127.0.0.1"})
    url = f"http://api.example.com:{server.port}/hello?q=1"
    response = fetch(HttpRequest("GET", url, {"Accept": "text/plain"}), local_policy(), dns)
    assert (response.status, response.reason, response.body, response.url) == (
        200,
        "OK",
        b"hello",
        url,
    )
    assert response.headers["content-type"] == "text/plain"
    assert response.headers["x-dup"] == "a, b"
    assert all(name == name.lower() for name in response.headers)
    [seen] = server.seen
    assert seen.path == "/hello?q=1"
    assert seen.headers.get_all("Host") == [f"api.example.com:{server.port}"]
    assert seen.headers["Accept"] == "text/plain"
    assert dns.calls == ["api.example.com"]


def test_post_put_and_head(serve: Callable[..., LoopbackServer]) -> None:
    server = serve({"/echo": echo})
    dns = FakeDNS({"api.example.com": "127.0.0.1"})
    url = f"http://api.example.com:{server.port}/echo"
    headers = {"Content-Type": "application/json"}
    posted = fetch(HttpRequest("POST", url, headers, b'{"a": 1}'), local_policy(), dns)
    assert (posted.status, posted.body, posted.headers["x-method"]) == (201, b'{"a": 1}', "POST")
    assert server.seen[0].headers["Content-Type"] == "application/json"
    assert fetch(HttpRequest("put", url, {}, b"x"), local_policy(), dns).body == b"x"
    head = fetch(HttpRequest("HEAD", url), local_policy(), dns)
    assert (head.status, head.body, head.headers["content-length"]) == (201, b"", "0")


def test_non_ascii_paths_are_percent_encoded(serve: Callable[..., LoopbackServer]) -> None:
    server = serve({})
    dns = FakeDNS({"api.example.com": "127.0.0.1"})
    url = f"http://api.example.com:{server.port}/bücher?q=ä&r=%20"
    assert fetch(HttpRequest("GET", url), local_policy(), dns).status == 404
    assert server.seen[0].path == "/b%C3%BCcher?q=%C3%A4&r=%20"


def test_resolves_once_and_connects_to_that_address(serve: Callable[..., LoopbackServer]) -> None:
    """DNS rebinding: a second, different answer is never asked for, let alone used."""
    server = serve({"/": ok})
    dns = FakeDNS({"api.example.com": ["127.0.0.1", "127.0.0.2"]})
    response = fetch(
        HttpRequest("GET", f"http://api.example.com:{server.port}/"), local_policy(), dns
    )
    assert response.body == b"hello"
    assert dns.calls == ["api.example.com"]


def test_unresolvable_and_refused_connections_are_app_errors() -> None:
    dns = FakeDNS({"api.example.com": "127.0.0.1"})
    missing = HttpRequest("GET", "http://nowhere.example.com/")
    error = refused(lambda: fetch(missing, local_policy("*"), dns), ErrorCode.E_APP_ERROR)
    assert "cannot resolve nowhere.example.com" in error.message
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        url = f"http://api.example.com:{closed.getsockname()[1]}/"
        error = refused(
            lambda: fetch(HttpRequest("GET", url), local_policy(), dns), ErrorCode.E_APP_ERROR
        )
    assert "connection failed" in error.message
    assert "127.0.0.1" in error.message


def test_a_malformed_response_is_an_app_error(serve: Callable[..., LoopbackServer]) -> None:
    server = serve({"/": lambda handler, body: handler.wfile.write(b"NOT HTTP\r\n\r\n")})
    dns = FakeDNS({"api.example.com": "127.0.0.1"})
    url = f"http://api.example.com:{server.port}/"
    error = refused(
        lambda: fetch(HttpRequest("GET", url), local_policy(), dns), ErrorCode.E_APP_ERROR
    )
    assert "malformed HTTP response" in error.message


# --- malformed requests -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://api.example.com/",
        "javascript:alert(1)",
        "/relative/path",
        "http:///no-host",
        "http://user:secret@api.example.com/",
        "http://@api.example.com/",
        "http://api.example.com\\@evil.test/",
        "http://api.example.com:99999/",
        "http://api.example.com:http/",
        "http://api .example.com/",
        "http://api.example.com/\r\nX-Injected: 1",
        "http://[::1/",
        "http://a..example.com/",
        "http://api_x.example.com/",
        "http://127.1/",
        "http://0x7f000001/",
    ],
)
def test_bad_urls_are_invalid_commands(url: str) -> None:
    dns = FakeDNS({"api.example.com": "93.184.216.34"})
    error = refused(
        lambda: fetch(HttpRequest("GET", url), BrokerPolicy(("*",)), dns), ErrorCode.E_INVALID_CMD
    )
    assert "secret" not in error.message
    assert dns.calls == []


@pytest.mark.parametrize(
    ("method", "headers", "body"),
    [
        ("TRACE", {}, b""),
        ("CONNECT", {}, b""),
        ("GET", {"X-A": "b\r\nInjected: 1"}, b""),
        ("GET", {"X-A": "b\nc"}, b""),
        ("GET", {"X-A\r\n": "b"}, b""),
        ("GET", {"X A": "b"}, b""),
        ("GET", {"X-A": "b\x00"}, b""),
        ("GET", {"Host": "evil.test"}, b""),
        ("GET", {"transfer-encoding": "chunked"}, b""),
        ("POST", {"Content-Length": "1"}, b"xy"),
        ("GET", {"Connection": "keep-alive"}, b""),
        ("POST", {}, b"x" * (MAX_REQUEST_BODY + 1)),
    ],
)
def test_malformed_requests_are_invalid_commands(
    method: str, headers: dict[str, str], body: bytes
) -> None:
    dns = FakeDNS({"api.example.com": "93.184.216.34"})
    request = HttpRequest(method, "http://api.example.com/", headers, body)
    refused(lambda: fetch(request, BrokerPolicy(("*",)), dns), ErrorCode.E_INVALID_CMD)
    assert dns.calls == []


# --- redirects ----------------------------------------------------------------------------------


def redirect(status: int, location: str) -> Route:
    return lambda handler, body: handler.reply(status, b"moved", (("Location", location),))


def test_redirect_to_an_ungranted_host_is_refused(serve: Callable[..., LoopbackServer]) -> None:
    server = serve({"/go": redirect(302, "http://evil.test/steal")})
    dns = FakeDNS({"api.example.com": "127.0.0.1", "evil.test": "127.0.0.1"})
    url = f"http://api.example.com:{server.port}/go"
    error = refused(
        lambda: fetch(HttpRequest("GET", url), local_policy(), dns), ErrorCode.E_PERMISSION
    )
    assert "redirect" in error.message
    assert "evil.test" in error.message
    assert dns.calls == ["api.example.com"]
    assert [seen.path for seen in server.seen] == ["/go"]


def test_redirect_to_another_scheme_is_refused(serve: Callable[..., LoopbackServer]) -> None:
    server = serve({"/go": redirect(301, "file:///etc/passwd")})
    dns = FakeDNS({"api.example.com": "127.0.0.1"})
    url = f"http://api.example.com:{server.port}/go"
    error = refused(
        lambda: fetch(HttpRequest("GET", url), local_policy(), dns), ErrorCode.E_APP_ERROR
    )
    assert "redirect" in error.message


def test_redirect_chain_within_grants(serve: Callable[..., LoopbackServer]) -> None:
    server = serve({})
    server.routes.update(
        {
            "/a": redirect(301, "b/../c"),
            "/c": redirect(307, f"http://cdn.example.com:{server.port}/d"),
            "/d": ok,
        }
    )
    dns = FakeDNS({"api.example.com": "127.0.0.1", "cdn.example.com": "127.0.0.1"})
    url = f"http://api.example.com:{server.port}/a"
    policy = local_policy("api.example.com", "*.example.com")
    response = fetch(HttpRequest("GET", url), policy, dns)
    assert (response.status, response.body) == (200, b"hello")
    assert response.url == f"http://cdn.example.com:{server.port}/d"
    assert [seen.path for seen in server.seen] == ["/a", "/c", "/d"]
    assert server.seen[-1].headers["Host"] == f"cdn.example.com:{server.port}"
    assert dns.calls == ["api.example.com", "api.example.com", "cdn.example.com"]


def test_redirect_loop_stops(serve: Callable[..., LoopbackServer]) -> None:
    server = serve({"/loop": redirect(302, "/loop")})
    dns = FakeDNS({"api.example.com": "127.0.0.1"})
    url = f"http://api.example.com:{server.port}/loop"
    error = refused(
        lambda: fetch(HttpRequest("GET", url), local_policy(max_redirects=3), dns),
        ErrorCode.E_APP_ERROR,
    )
    assert "too many redirects" in error.message
    assert len(server.seen) == 4


@pytest.mark.parametrize(
    ("status", "method", "then"),
    [
        (303, "POST", "GET"),
        (303, "PUT", "GET"),
        (303, "HEAD", "HEAD"),
        (302, "POST", "GET"),
        (301, "POST", "GET"),
        (302, "PUT", "PUT"),
        (307, "POST", "POST"),
        (308, "POST", "POST"),
    ],
)
def test_redirect_methods(
    serve: Callable[..., LoopbackServer], status: int, method: str, then: str
) -> None:
    server = serve({"/form": redirect(status, "/done"), "/done": echo})
    dns = FakeDNS({"api.example.com": "127.0.0.1"})
    url = f"http://api.example.com:{server.port}/form"
    request = HttpRequest(method, url, {"Content-Type": "text/plain", "X-Keep": "1"}, b"data")
    response = fetch(request, local_policy(), dns)
    assert response.status == 201
    second = server.seen[1]
    assert (second.method, second.headers["X-Keep"]) == (then, "1")
    kept = then == method
    assert second.body == (b"data" if kept else b"")
    assert (second.headers["Content-Type"] is not None) == kept


def test_credentials_do_not_follow_a_redirect_to_another_origin(
    serve: Callable[..., LoopbackServer],
) -> None:
    server = serve({})
    server.routes.update(
        {
            "/a": redirect(302, "/b"),
            "/b": redirect(302, f"http://cdn.example.com:{server.port}/c"),
            "/c": ok,
        }
    )
    dns = FakeDNS({"api.example.com": "127.0.0.1", "cdn.example.com": "127.0.0.1"})
    headers = {"Authorization": "Bearer t", "Cookie": "s=1", "Accept": "*/*"}
    url = f"http://api.example.com:{server.port}/a"
    fetch(HttpRequest("GET", url, headers), local_policy("*.example.com", "api.example.com"), dns)
    same, other = server.seen[1], server.seen[2]
    assert (same.headers["Authorization"], same.headers["Cookie"]) == ("Bearer t", "s=1")
    assert (other.headers["Authorization"], other.headers["Cookie"]) == (None, None)
    assert other.headers["Accept"] == "*/*"


# --- caps ---------------------------------------------------------------------------------------


def stream_forever(handler: Handler, body: bytes) -> None:
    """100 MB without a Content-Length, so only the reader's cap can stop it."""
    handler.send_response(200)
    handler.end_headers()
    chunk, sent = b"x" * 65536, 0
    try:
        while sent < 100 * 2**20 and not handler.server.stopping.is_set():
            handler.wfile.write(chunk)
            sent += len(chunk)
    except OSError:
        handler.server.events["closed_early"] = sent
    else:
        handler.server.events["finished"] = sent


def test_response_over_the_cap_is_cut_off(serve: Callable[..., LoopbackServer]) -> None:
    server = serve({"/big": stream_forever})
    dns = FakeDNS({"api.example.com": "127.0.0.1"})
    url = f"http://api.example.com:{server.port}/big"
    policy = local_policy(max_response_bytes=256 * 1024)
    error = refused(lambda: fetch(HttpRequest("GET", url), policy, dns), ErrorCode.E_APP_ERROR)
    assert error.message.startswith("response larger than 262144 bytes")
    deadline = time.monotonic() + 2
    while not server.events and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "closed_early" in server.events, server.events
    assert server.events["closed_early"] < 32 * 2**20


def test_declared_length_over_the_cap_is_refused_unread(
    serve: Callable[..., LoopbackServer],
) -> None:
    server = serve({"/": lambda handler, body: handler.reply(200, b"y" * 2048)})
    dns = FakeDNS({"api.example.com": "127.0.0.1"})
    url = f"http://api.example.com:{server.port}/"
    policy = local_policy(max_response_bytes=1024)
    refused(lambda: fetch(HttpRequest("GET", url), policy, dns), ErrorCode.E_APP_ERROR)
    exact = local_policy(max_response_bytes=2048)
    assert len(fetch(HttpRequest("GET", url), exact, dns).body) == 2048
    head = fetch(HttpRequest("HEAD", url), policy, dns)  # declares 2048, carries nothing
    assert (head.headers["content-length"], head.body) == ("2048", b"")


def test_a_slow_server_times_out_quickly(serve: Callable[..., LoopbackServer]) -> None:
    def slow(handler: Handler, body: bytes) -> None:
        handler.server.stopping.wait(3)
        handler.reply(200, b"late")

    server = serve({"/": slow})
    dns = FakeDNS({"api.example.com": "127.0.0.1"})
    url = f"http://api.example.com:{server.port}/"
    started = time.monotonic()
    refused(
        lambda: fetch(HttpRequest("GET", url), local_policy(timeout_s=0.5), dns),
        ErrorCode.E_TIMEOUT,
    )
    # The 0.5 s deadline, with room for a loaded machine; the wait it replaced took 3 s or more.
    assert time.monotonic() - started < 2.5


def test_a_dripping_server_is_cut_at_the_total_deadline(
    serve: Callable[..., LoopbackServer],
) -> None:
    """Each byte comes well within a socket timeout; only the total deadline stops it."""

    def drip(handler: Handler, body: bytes) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "1000")
        handler.end_headers()
        for _ in range(1000):
            if handler.server.stopping.wait(0.05):
                return
            handler.wfile.write(b".")

    server = serve({"/": drip})
    dns = FakeDNS({"api.example.com": "127.0.0.1"})
    url = f"http://api.example.com:{server.port}/"
    started = time.monotonic()
    refused(
        lambda: fetch(HttpRequest("GET", url), local_policy(timeout_s=0.5), dns),
        ErrorCode.E_TIMEOUT,
    )
    # The 0.5 s deadline, with room for a loaded machine; the wait it replaced took 3 s or more.
    assert time.monotonic() - started < 2.5


def test_the_deadline_spans_every_redirect(serve: Callable[..., LoopbackServer]) -> None:
    def slow_redirect(handler: Handler, body: bytes) -> None:
        handler.server.stopping.wait(0.2)
        handler.reply(302, b"", (("Location", "/"),))

    server = serve({"/": slow_redirect})
    dns = FakeDNS({"api.example.com": "127.0.0.1"})
    url = f"http://api.example.com:{server.port}/"
    started = time.monotonic()
    refused(
        lambda: fetch(HttpRequest("GET", url), local_policy(timeout_s=0.5), dns),
        ErrorCode.E_TIMEOUT,
    )
    # The 0.5 s deadline, with room for a loaded machine; the wait it replaced took 3 s or more.
    assert time.monotonic() - started < 2.5
    assert len(server.seen) <= 3


# --- TLS ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for api.example.com."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "2",
            "-subj",
            "/CN=api.example.com",
            "-addext",
            "subjectAltName=DNS:api.example.com",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture
def tls_server(
    serve: Callable[..., LoopbackServer], certificate: tuple[Path, Path]
) -> tuple[LoopbackServer, list[str | None]]:
    names: list[str | None] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)

    def record_sni(sock: ssl.SSLObject, name: str | None, ctx: ssl.SSLContext) -> None:
        names.append(name)

    context.sni_callback = record_sni
    return serve({"/": ok}, context), names


def test_https_verifies_the_host_name_and_sends_it_as_sni(
    tls_server: tuple[LoopbackServer, list[str | None]],
    certificate: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, names = tls_server
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    dns = FakeDNS({"api.example.com": "127.0.0.1", "other.example.com": "127.0.0.1"})
    url = f"https://api.example.com:{server.port}/"
    response = fetch(HttpRequest("GET", url), local_policy("*.example.com", "api.example.com"), dns)
    assert (response.status, response.body) == (200, b"hello")
    assert server.seen[0].headers["Host"] == f"api.example.com:{server.port}"
    assert names == ["api.example.com"]
    mismatch = HttpRequest("GET", f"https://other.example.com:{server.port}/")
    error = refused(
        lambda: fetch(mismatch, local_policy("*.example.com"), dns), ErrorCode.E_APP_ERROR
    )
    assert "certificate not valid for other.example.com" in error.message
    assert names == ["api.example.com", "other.example.com"]


def test_https_refuses_an_untrusted_certificate(
    tls_server: tuple[LoopbackServer, list[str | None]],
) -> None:
    server, _ = tls_server
    dns = FakeDNS({"api.example.com": "127.0.0.1"})
    url = f"https://api.example.com:{server.port}/"
    error = refused(
        lambda: fetch(HttpRequest("GET", url), local_policy(), dns), ErrorCode.E_APP_ERROR
    )
    assert "certificate" in error.message
    assert server.seen == []


def test_https_to_a_plain_http_server_is_an_app_error(serve: Callable[..., LoopbackServer]) -> None:
    server = serve({"/": ok})
    dns = FakeDNS({"api.example.com": "127.0.0.1"})
    url = f"https://api.example.com:{server.port}/"
    error = refused(
        lambda: fetch(HttpRequest("GET", url), local_policy(), dns), ErrorCode.E_APP_ERROR
    )
    assert "TLS failed" in error.message


# --- the error mapping --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (OSError(5, "I/O error"), ErrorCode.E_APP_ERROR),
        (ConnectionRefusedError(111, "Connection refused"), ErrorCode.E_APP_ERROR),
        (ConnectionResetError(104, "Connection reset by peer"), ErrorCode.E_APP_ERROR),
        (socket.gaierror(-2, "Name or service not known"), ErrorCode.E_APP_ERROR),
        (TimeoutError("timed out"), ErrorCode.E_TIMEOUT),
        (ssl.SSLError(1, "bad record"), ErrorCode.E_APP_ERROR),
        (ssl.SSLCertVerificationError(1, "verify failed"), ErrorCode.E_APP_ERROR),
        (http.client.RemoteDisconnected("closed"), ErrorCode.E_APP_ERROR),
        (http.client.IncompleteRead(b"x", 10), ErrorCode.E_APP_ERROR),
        (http.client.BadStatusLine("garbage"), ErrorCode.E_APP_ERROR),
        (http.client.LineTooLong("header line"), ErrorCode.E_APP_ERROR),
        (UnicodeDecodeError("ascii", b"\xff", 0, 1, "bad"), ErrorCode.E_APP_ERROR),
        (ValueError("bad"), ErrorCode.E_APP_ERROR),
    ],
)
def test_every_foreign_exception_maps_to_an_aotui_error(exc: Exception, code: ErrorCode) -> None:
    assert isinstance(exc, _FOREIGN)
    target = _Target("http://api.example.com/", "http", "api.example.com", 80, "127.0.0.1", "/")
    error = _foreign_error(exc, target, _Deadline(10))
    assert error.code is code
    assert "api.example.com" in error.message or code is ErrorCode.E_TIMEOUT


def test_anything_after_the_deadline_is_a_timeout() -> None:
    target = _Target("http://api.example.com/", "http", "api.example.com", 80, "127.0.0.1", "/")
    deadline = _Deadline(0)
    deadline.expired = True
    assert _foreign_error(ConnectionResetError(), target, deadline).code is ErrorCode.E_TIMEOUT


# --- wire form and policy -----------------------------------------------------------------------


def test_request_and_response_travel_as_wire_records() -> None:
    """The broker's records are the codec's: they cross the wall field for field."""
    request = HttpRequest("POST", "https://api.example.com/x", {"Accept": "*/*"}, b"\x00body")
    call = codec.decode(codec.encode(HttpCall(7, request)))
    assert isinstance(call, HttpCall)
    assert call.request == request
    response = HttpResponse(200, "OK", {"content-type": "text/plain"}, b"hi", "https://x.org/")
    result = codec.decode(codec.encode(HttpResult(7, response=response)))
    assert isinstance(result, HttpResult)
    assert result.response == response


def _http_frame(kind: str, fields: dict[str, Any]) -> bytes:
    return msgpack.packb([codec.PROTOCOL_VERSION, kind, fields], use_bin_type=True)


@pytest.mark.parametrize(
    "wire",
    [
        {},
        {"method": 1, "url": "http://a.example.com/", "headers": {}, "body": b""},
        {"method": "GET", "url": "http://a.example.com/", "headers": {"a": 1}, "body": b""},
        {"method": "GET", "url": "http://a.example.com/", "headers": [], "body": b""},
        {"method": "GET", "url": "http://a.example.com/", "headers": {}, "body": "text"},
        ["not", "a", "mapping"],
    ],
)
def test_malformed_wire_requests_are_protocol_violations(wire: Any) -> None:
    """Refused as the frame is decoded, so the worker that sent it is killed (E_INVALID_CMD)."""
    frame = _http_frame("http", {"call_id": 1, "request": wire})
    refused(lambda: codec.decode(frame), ErrorCode.E_INVALID_CMD)


def test_malformed_wire_responses_are_refused_too() -> None:
    wire = {"status": 200, "reason": "OK", "headers": {}, "body": b"", "url": "http://a.example/"}
    for bad in ({**wire, "status": True}, {**wire, "url": None}):
        frame = _http_frame("http_result", {"call_id": 1, "response": bad})
        refused(lambda frame=frame: codec.decode(frame), ErrorCode.E_INVALID_CMD)  # type: ignore[misc]


def test_policy_from_permissions() -> None:
    permissions = [
        parse_permission(text)
        for text in (
            "fs:read:/srv",
            "net:http:*.Example.com.",
            "net:http:api.x.org",
            "net:http:api.x.org",
        )
    ]
    policy = policy_from_permissions(permissions, allow_private=True)
    assert policy.allowed_hosts == ("*.example.com", "api.x.org")
    assert policy.allow_private is True
    assert policy_from_permissions([], allow_private=False) == BrokerPolicy(())


def test_frozen_policy_defaults() -> None:
    policy = BrokerPolicy(("api.example.com",))
    assert (policy.allow_private, policy.max_response_bytes, policy.timeout_s) == (
        False,
        4 * 2**20,
        10.0,
    )
    assert (policy.max_redirects, policy.allowed_ports) == (5, (80, 443))
    with pytest.raises(AttributeError):
        policy.timeout_s = 1  # type: ignore[misc]
