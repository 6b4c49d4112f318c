"""The HTTP capability broker: the supervisor performs an app's HTTP request after checking it.

Workers have no network (an empty network namespace; seccomp denies ``AF_INET`` sockets). An app
granted ``net:http:<host>`` (CONTRACT §2) hands an :class:`HttpRequest` to the supervisor, and
:func:`fetch` performs it. On every hop of a redirect chain it checks, in order: the URL's shape,
the host against the grants, the port, one DNS resolution, the address class; then it connects to
*that* address (a rebound second answer is never asked for), sends the host name as ``Host`` and
SNI, verifies the certificate for it, and caps the response's size and the whole fetch's time.
``docs/http.md`` lists every check and the error each one gives. :class:`HttpRequest` and
:class:`HttpResponse` are wire records (``protocol.messages``, re-exported here): the codec checks
every field's type on receipt, so a malformed request is a protocol violation before it gets here.

Requests run on the broker's own bounded thread pool (:func:`broker_pool`), never on the event
loop's default executor that the store's writes use: eight slow servers must not delay another
app's acknowledged execute.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import HttpRequest, HttpResponse
from aotui.supervisor.broker.net_policy import (
    IPAddress,
    address_refusal,
    host_allowed,
    normalise_host,
)
from aotui.supervisor.broker.sizes import BROKER_THREADS, BROKER_THREADS_PER_APP
from aotui.supervisor.manifest import Permission

__all__ = [
    "BROKER_THREADS",
    "BROKER_THREADS_PER_APP",
    "MAX_REQUEST_BODY",
    "METHODS",
    "BrokerPolicy",
    "HttpRequest",
    "HttpResponse",
    "Resolver",
    "broker_pool",
    "fetch",
    "host_allowed",
    "policy_from_permissions",
]

#: The methods an app may use.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: The largest request body an app may send.
MAX_REQUEST_BODY = 1024 * 1024

#: ``socket.getaddrinfo`` or a stand-in with its signature and answers (tests inject one).
Resolver = Callable[..., Sequence[tuple[Any, ...]]]


# The broker owns the connection: these headers frame or steer it, so an app may not set them.
_RESERVED_HEADERS = frozenset(
    {"host", "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te"}
    | {"proxy-connection", "trailer", "transfer-encoding", "upgrade", "content-length", "expect"}
)
# Dropped when a redirect turns the request into a bodiless GET (the Fetch standard's list).
_BODY_HEADERS = frozenset(
    {"content-type", "content-encoding", "content-language", "content-location"}
)
# Credentials meant for one origin must not follow a redirect to another.
_CREDENTIAL_HEADERS = frozenset({"authorization", "cookie"})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS = {"http": 80, "https": 443}
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
_URL_FORBIDDEN = re.compile(r"[\x00-\x20\x7f]")
# Only non-ASCII is escaped in a request target; what the app escaped stays as it wrote it.
_PRINTABLE_ASCII = "".join(chr(c) for c in range(0x21, 0x7F))
_READ_CHUNK = 64 * 1024
# Everything the network, ssl and http.client raise: SSLError and TimeoutError are OSErrors,
# UnicodeError is a ValueError.
_FOREIGN = (OSError, http.client.HTTPException, ValueError)


@dataclass(frozen=True)
class BrokerPolicy:
    """What one app may reach over HTTP, and the caps on each fetch."""

    #: Host patterns from the manifest's ``net:http:`` grants.
    allowed_hosts: tuple[str, ...]
    #: Desktop config ``allow_private_http``, for tests only: reach any address and any port.
    allow_private: bool = False
    #: The largest response body; one byte more fails the fetch.
    max_response_bytes: int = 4 * 1024 * 1024
    #: Seconds for the whole fetch, every redirect included.
    timeout_s: float = 10.0
    #: Redirects followed; one more fails the fetch.
    max_redirects: int = 5
    #: Ports a URL may name; not checked with ``allow_private`` (test servers use any port).
    allowed_ports: tuple[int, ...] = (80, 443)
    #: The desktop config's narrowing of the grants (``policy."<id>".net``) and its rule's name.
    narrowed_to: tuple[str, ...] | None = None
    narrowed_by: str = ""


def broker_pool() -> ThreadPoolExecutor:
    """The broker's own bounded pool (shut it down with the desktop)."""
    return ThreadPoolExecutor(max_workers=BROKER_THREADS, thread_name_prefix="aotui-http")


def policy_from_permissions(
    permissions: Iterable[Permission], allow_private: bool = False
) -> BrokerPolicy:
    """The policy of an app from its manifest's permissions and the desktop config."""
    hosts = (p.scope for p in permissions if (p.resource, p.action) == ("net", "http"))
    return BrokerPolicy(allowed_hosts=tuple(dict.fromkeys(hosts)), allow_private=allow_private)


def fetch(
    request: HttpRequest, policy: BrokerPolicy, resolver: Resolver = socket.getaddrinfo
) -> HttpResponse:
    """Perform an app's request under its policy; every failure is an :class:`AotuiError`."""
    method = _check_request(request)
    deadline = _Deadline(policy.timeout_s)
    url, headers, body = request.url, dict(request.headers), request.body
    previous: _Target | None = None
    for hop in range(policy.max_redirects + 1):
        if previous is None:
            target = _check_target(url, policy, resolver, ErrorCode.E_INVALID_CMD)
        else:
            try:
                # A bad Location is the server's fault, not the app's: not E_INVALID_CMD.
                target = _check_target(url, policy, resolver, ErrorCode.E_APP_ERROR)
            except AotuiError as exc:
                message = f"redirect from {previous.url} refused: {exc.message}"
                raise AotuiError(exc.code, message, {**exc.data, "hop": hop}) from None
            if previous.origin != target.origin:
                headers = _without(headers, _CREDENTIAL_HEADERS)
        response = _exchange(target, method, headers, body, policy, deadline)
        location = response.headers.get("location")
        if response.status not in _REDIRECTS or not location:
            return response
        # Like browsers: 303 (but for HEAD), and 301/302 after a POST, go on as a bodiless GET.
        if (response.status == 303 and method != "HEAD") or (
            response.status in (301, 302) and method == "POST"
        ):
            method, body, headers = "GET", b"", _without(headers, _BODY_HEADERS)
        try:
            url = urljoin(target.url, location)
        except ValueError:
            url = location  # the next _check_target names what is wrong with it
        previous = target
    raise AotuiError(
        ErrorCode.E_APP_ERROR,
        f"too many redirects: more than {policy.max_redirects} starting at {request.url}",
        {"url": request.url, "max_redirects": policy.max_redirects},
    )


@dataclass(frozen=True)
class _Target:
    """One hop's URL after every check: the only address it may connect to, and what to ask."""

    url: str
    scheme: str
    host: str
    port: int
    address: str
    path: str

    @property
    def origin(self) -> tuple[str, str, int]:
        return self.scheme, self.host, self.port


class _Deadline:
    """The one time budget of a fetch; shuts down a socket that outlives it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._at = time.monotonic() + seconds
        self._timer: threading.Timer | None = None

    def remaining(self) -> float:
        """Seconds left; ``E_TIMEOUT`` once none are."""
        left = self._at - time.monotonic()
        if left <= 0:
            self.expired = True
            raise self.error()
        return left

    def error(self) -> AotuiError:
        """The timeout error of this fetch."""
        message = f"HTTP request took longer than {self.seconds:g} s"
        return AotuiError(ErrorCode.E_TIMEOUT, message, {"timeout_s": self.seconds})

    def arm(self, sock: socket.socket) -> None:
        """Watch ``sock``: a socket timeout bounds each read, not a server dripping bytes."""
        self.disarm()
        delay = max(self._at - time.monotonic(), 0.0)
        self._timer = threading.Timer(delay, self._expire, (sock,))
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        """Stop watching."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self, sock: socket.socket) -> None:
        self.expired = True
        # The plain socket's shutdown even under TLS: it wakes the reader without touching the
        # TLS state the reading thread owns. OSError: already closed, nothing left to wake.
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _PinnedConnection(http.client.HTTPConnection):
    """HTTP to one checked address, whatever the host name would resolve to now."""

    def __init__(self, target: _Target, deadline: _Deadline) -> None:
        super().__init__(target.host, target.port, timeout=deadline.remaining())
        self._address = target.address
        self._deadline = deadline

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)
        self._deadline.arm(self.sock)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedTLSConnection(_PinnedConnection):
    """HTTPS to one checked address; SNI and certificate verification use the host name."""

    default_port = http.client.HTTPS_PORT

    def connect(self) -> None:
        super().connect()
        tls = ssl.create_default_context().wrap_socket(
            self.sock, server_hostname=self.host, do_handshake_on_connect=False
        )
        self.sock = tls
        # Wrapping detached the plain socket: watch the TLS one before the handshake can stall.
        self._deadline.arm(tls)
        tls.do_handshake()


def _check_request(request: HttpRequest) -> str:
    """Refuse a malformed request before anything touches the network; its method."""
    method = request.method.upper()
    if method not in METHODS:
        raise _invalid(f"method {request.method!r} is not one of {', '.join(sorted(METHODS))}")
    if len(request.body) > MAX_REQUEST_BODY:
        raise _invalid(f"request body is {len(request.body)} bytes; at most {MAX_REQUEST_BODY}")
    for name, value in request.headers.items():
        if not _TOKEN.fullmatch(name):
            raise _invalid(f"header name {name!r} is not an HTTP token")
        if not _HEADER_VALUE.fullmatch(value):
            raise _invalid(f"header {name!r} has CR, LF or another control character")
        if name.lower() in _RESERVED_HEADERS:
            raise _invalid(f"header {name!r} is set by the broker, not by the app")
    return method


def _check_target(url: str, policy: BrokerPolicy, resolver: Resolver, code: ErrorCode) -> _Target:
    """Run every check on one URL, in order; ``code`` is for a URL that is malformed."""
    if _URL_FORBIDDEN.search(url):
        raise AotuiError(code, f"URL {url!r} has a space or a control character", {"url": url})
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise AotuiError(code, f"URL {url!r} is malformed: {exc}", {"url": url}) from None
    if parts.scheme not in _DEFAULT_PORTS:
        raise AotuiError(code, f"URL {url!r}: only http and https can be fetched", {"url": url})
    if "@" in parts.netloc:
        # Not echoed: the user info may be a password, and this message reaches logs.
        raise AotuiError(code, "URL has user info (user:password@); send credentials in a header")
    try:
        host, is_ip = normalise_host(parts.hostname or "")
    except ValueError as exc:
        raise AotuiError(code, f"URL {url!r} has no valid host: {exc}", {"url": url}) from None
    if not host_allowed(host, policy.allowed_hosts):
        grants = ", ".join(f"net:http:{h}" for h in policy.allowed_hosts) or "none"
        raise AotuiError(
            ErrorCode.E_PERMISSION,
            f"host {host} is not granted to this app (its grants: {grants})",
            {"host": host, "allowed_hosts": list(policy.allowed_hosts)},
        )
    if policy.narrowed_to is not None and not host_allowed(host, policy.narrowed_to):
        listed = ", ".join(policy.narrowed_to) or "nothing"
        raise AotuiError(
            ErrorCode.E_PERMISSION,
            f"host {host} is granted to this app, but this desktop's config narrows its grants "
            f"to {listed} ({policy.narrowed_by})",
            {"host": host, "rule": policy.narrowed_by},
        )
    port = port if port is not None else _DEFAULT_PORTS[parts.scheme]
    if not policy.allow_private and port not in policy.allowed_ports:
        allowed = ", ".join(map(str, policy.allowed_ports))
        raise AotuiError(
            ErrorCode.E_PERMISSION,
            f"port {port} of {host} may not be reached (allowed ports: {allowed})",
            {"host": host, "port": port},
        )
    address = ipaddress.ip_address(host) if is_ip else _resolve(host, port, resolver)
    reason = None if policy.allow_private else address_refusal(address)
    if reason is not None:
        raise AotuiError(
            ErrorCode.E_PERMISSION,
            f"{host} is at {address}, a {reason} address, which apps may not reach",
            {"host": host, "address": str(address)},
        )
    path = quote(parts.path or "/", safe=_PRINTABLE_ASCII)
    if parts.query:
        path += "?" + quote(parts.query, safe=_PRINTABLE_ASCII)
    return _Target(url, parts.scheme, host, port, str(address), path)


def _resolve(host: str, port: int, resolver: Resolver) -> IPAddress:
    """Resolve once and keep the first address: the fetch connects to it and to nothing else."""
    try:
        answers = resolver(host, port, type=socket.SOCK_STREAM)
        return ipaddress.ip_address(str(answers[0][4][0]))
    except (*_FOREIGN, IndexError, TypeError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else "no usable address"
        raise AotuiError(
            ErrorCode.E_APP_ERROR, f"cannot resolve {host}: {detail}", {"host": host}
        ) from None


def _exchange(
    target: _Target,
    method: str,
    headers: dict[str, str],
    body: bytes,
    policy: BrokerPolicy,
    deadline: _Deadline,
) -> HttpResponse:
    """One request and its response; a redirect's body is left unread."""
    kind = _PinnedTLSConnection if target.scheme == "https" else _PinnedConnection
    connection: _PinnedConnection | None = None
    response: http.client.HTTPResponse | None = None
    try:
        connection = kind(target, deadline)
        connection.request(method, target.path, body or None, {**headers, "Connection": "close"})
        response = connection.getresponse()
        return _read(response, target, policy, deadline)
    except _FOREIGN as exc:
        raise _foreign_error(exc, target, deadline) from exc
    finally:
        deadline.disarm()
        if response is not None:
            response.close()
        if connection is not None:
            connection.close()


def _read(
    response: http.client.HTTPResponse, target: _Target, policy: BrokerPolicy, deadline: _Deadline
) -> HttpResponse:
    """Headers and a size-capped body: reads at most one byte past the cap, never the rest."""
    headers: dict[str, str] = {}
    for name, value in response.getheaders():
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    limit = policy.max_response_bytes
    too_large = AotuiError(
        ErrorCode.E_APP_ERROR,
        f"response larger than {limit} bytes from {target.url}",
        {"url": target.url, "max_response_bytes": limit},
    )
    chunks: list[bytes] = []
    if response.status not in _REDIRECTS or "location" not in headers:
        # http.client's length: the declared body, already 0 for HEAD, 204 and 304.
        if response.length is not None and response.length > limit:
            raise too_large
        size = 0
        while chunk := response.read(min(_READ_CHUNK, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise too_large
    if deadline.expired:
        raise deadline.error()  # the watchdog cut the body short
    return HttpResponse(response.status, response.reason, headers, b"".join(chunks), target.url)


def _foreign_error(exc: BaseException, target: _Target, deadline: _Deadline) -> AotuiError:
    """The one mapping from what sockets, ssl and http.client raise to our errors."""
    if deadline.expired or isinstance(exc, TimeoutError):
        return deadline.error()
    where = f"{target.url} ({target.address})"
    # ssl sets reason and verify_message only on the errors it raises itself.
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = getattr(exc, "verify_message", None) or exc
        problem = f"certificate not valid for {target.host}: {detail}"
    elif isinstance(exc, ssl.SSLError):
        problem = f"TLS failed: {getattr(exc, 'reason', None) or exc}"
    elif isinstance(exc, OSError):
        problem = f"connection failed: {exc.strerror or exc}"
    elif isinstance(exc, http.client.HTTPException):
        problem = f"malformed HTTP response: {type(exc).__name__} {exc}".rstrip()
    else:
        problem = f"unusable data: {exc}"
    return AotuiError(
        ErrorCode.E_APP_ERROR, f"{where}: {problem}", {"url": target.url, "address": target.address}
    )


def _without(headers: dict[str, str], names: frozenset[str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in names}


def _invalid(message: str) -> AotuiError:
    return AotuiError(ErrorCode.E_INVALID_CMD, message)
