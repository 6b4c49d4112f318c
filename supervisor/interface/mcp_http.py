"""``aotui mcp --http``: the MCP server over streamable HTTP, for the desktop's own user alone.

A loopback TCP port answers every local user, and a web page reaches it by DNS rebinding, so
every request must pass two checks before the SDK sees it:

- **a bearer token**: 32 random bytes made at start, written to ``mcp-PID.token`` in the
  desktop's runtime directory (0600 in that 0700 directory: only its user reads it), its path
  printed on stderr with the URL. A request without ``Authorization: Bearer TOKEN`` is answered
  401, naming the file; the token is compared in constant time.
- **Host and Origin** (the SDK's ``TransportSecuritySettings``): ``Host`` must name the bound
  address (``127.0.0.1:PORT``, ``localhost:PORT``), and an ``Origin``, when sent, the same as an
  ``http://`` origin: else 421 or 403. Checked before the token, so a page learns nothing.

``--http unix:PATH`` serves the same over a Unix socket made 0600 (token still required): the URL
is ``http://localhost/mcp``, reached through the socket (httpx ``AsyncHTTPTransport(uds=PATH)``).
The token file and the socket are removed when the server stops.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import socket
import stat
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.interface.mcp_server import DesktopMcp, running
from aotui.supervisor.paths import DesktopPaths, is_listening, secure_dir, unix_address

__all__ = ["HttpAddress", "parse_address", "serve_http"]

#: The hosts ``--http`` may bind: loopback only, the desktop is not served beyond this machine.
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class HttpAddress:
    """Where ``aotui mcp --http`` listens: a loopback host and port, or a Unix socket."""

    #: ``127.0.0.1``, ``localhost`` or ``::1``; empty for a Unix socket.
    host: str = ""
    #: The TCP port (0: a free one, chosen at bind).
    port: int = 0
    #: The Unix socket's path, or ``None`` for TCP.
    unix: Path | None = None


def parse_address(text: str) -> HttpAddress:
    """``--http``'s value: ``HOST:PORT`` on loopback or ``unix:PATH``; else ``E_INVALID_CMD``."""
    if text.startswith("unix:") and len(text) > len("unix:"):
        return HttpAddress(unix=Path(text.removeprefix("unix:")).absolute())
    host, _, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if host not in LOOPBACK or not port.isdigit() or int(port) > 65535:
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            f"--http takes a loopback address and port (127.0.0.1:PORT; 0 picks a free port) "
            f"or unix:PATH, not {text!r}: the desktop is not served beyond this machine",
        )
    return HttpAddress(host=host, port=int(port))


def write_token(directory: Path) -> tuple[str, Path]:
    """A new random token, written to ``directory/mcp-PID.token`` (0600; the directory is
    checked to be this user's own, not a symlink, and made 0700)."""
    secure_dir(directory)
    token = secrets.token_urlsafe(32)
    path = directory / f"mcp-{os.getpid()}.token"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # left by a killed process that had this pid
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token, path


def _listen(address: HttpAddress) -> socket.socket:
    """The listening socket, bound before serving, so the port is known to the Host check."""
    if address.unix is None:
        host = "127.0.0.1" if address.host == "localhost" else address.host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            return socket.create_server((host, address.port), family=family)
        except OSError as exc:
            raise AotuiError(
                ErrorCode.E_INTERNAL, f"cannot listen on {address.host}:{address.port}: {exc}"
            ) from exc
    path = address.unix
    if path.is_socket() and not is_listening(path):
        path.unlink()  # a killed server's
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)  # made 0600: no moment at which another user may connect
    try:
        listener.bind(unix_address(path))
    except OSError as exc:
        listener.close()
        raise AotuiError(
            ErrorCode.E_INTERNAL,
            f"cannot listen on unix:{path}: {exc}; remove it or choose another path",
        ) from exc
    finally:
        os.umask(umask)
    listener.listen(128)
    return listener


def allowed_peers(address: HttpAddress, port: int) -> tuple[list[str], list[str]]:
    """The ``Host`` values and ``Origin`` values a request may carry for ``address``."""
    if address.unix is not None:
        return ["localhost"], ["http://localhost"]
    literal = f"[{address.host}]" if ":" in address.host else address.host
    names = dict.fromkeys([literal, "localhost"])
    hosts = [f"{name}:{port}" for name in names] + (list(names) if port == 80 else [])
    return hosts, [f"http://{host}" for host in hosts]


class BearerGate:
    """ASGI: the SDK's Host/Origin check, then the bearer token, before anything else runs."""

    def __init__(self, app: Any, token: str, token_file: Path, security: Any) -> None:
        from mcp.server.transport_security import TransportSecurityMiddleware

        self.app = app
        self.expected = token.encode()
        self.token_file = token_file
        self.security = TransportSecurityMiddleware(security)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from starlette.requests import HTTPConnection
        from starlette.responses import Response

        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)  # lifespan
            return
        refused = await self.security.validate_request(HTTPConnection(scope), is_post=False)
        if refused is None and not self._authorized(scope["headers"]):
            message = (
                "this MCP server needs 'Authorization: Bearer TOKEN'; the token is in "
                f"{self.token_file} (readable by the desktop's user only)"
            )
            refused = Response(
                json.dumps({"error": "unauthorized", "message": message}),
                status_code=401,
                media_type="application/json",
                headers={"WWW-Authenticate": 'Bearer realm="aotui"'},
            )
        if refused is not None:
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, headers: list[tuple[bytes, bytes]]) -> bool:
        given = [value for name, value in headers if name.lower() == b"authorization"]
        if len(given) != 1:
            return False
        scheme, _, credential = given[0].strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(
            credential.strip(), self.expected
        )


async def serve_http(
    desktop: str, socket_dir: str | None, address: HttpAddress, per_operation: bool = False
) -> None:
    """Serve MCP over streamable HTTP at ``/mcp`` until stopped, to holders of the token."""
    import uvicorn
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Route

    token, token_file = write_token(DesktopPaths.for_desktop(desktop, socket_dir).root)
    try:
        listener = _listen(address)
    except BaseException:
        token_file.unlink(missing_ok=True)
        raise
    port = listener.getsockname()[1] if address.unix is None else 0
    hosts, origins = allowed_peers(address, port)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )
    face = DesktopMcp(desktop, socket_dir, per_operation)
    manager = StreamableHTTPSessionManager(app=face.server, security_settings=security)

    def remove_files() -> None:
        token_file.unlink(missing_ok=True)
        if address.unix is not None:
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(address.unix.lstat().st_mode):
                    address.unix.unlink()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            async with running(face), manager.run():
                yield
        finally:
            # Here, not after serve(): uvicorn raises a SIGTERM again once it has shut down.
            remove_files()

    class Endpoint:
        """The session manager as a plain ASGI endpoint at ``/mcp`` (no redirect to ``/mcp/``)."""

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

    app = Starlette(routes=[Route("/mcp", endpoint=Endpoint())], lifespan=lifespan)
    gate = BearerGate(app, token, token_file, security)
    config = uvicorn.Config(gate, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    url = f"http://{hosts[0]}/mcp"
    where = f"{url} on unix:{address.unix}" if address.unix is not None else url

    async def announce() -> None:
        while not server.started:
            await anyio.sleep(0.02)
        print(
            f"aotui mcp: serving {where}; token file {token_file} "
            "(send 'Authorization: Bearer <its content>')",
            file=sys.stderr,
            flush=True,
        )

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(announce)
            await server.serve(sockets=[listener])
            tasks.cancel_scope.cancel()
    finally:
        listener.close()
        remove_files()
