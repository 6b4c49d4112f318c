"""A one-call JSON-RPC client of a desktop's ``rpc.sock``: the CLI's fast path.

``aotui snapshot|exec|status`` pay their imports on every call; the ZeroMQ client's pyzmq,
msgpack and message classes were a third of that. This client is a socket and ``json``: one
newline-delimited JSON-RPC 2.0 request, one response line. It asks with ``as_control`` so the
desktop answers as on its control socket (no session of the connection's own, error messages as
raised), and it reports a desktop that is gone or silent with the ZeroMQ client's own words.

When ``rpc.sock`` is absent or refuses while the control socket listens (a desktop older than
the JSON-RPC face, or one still starting), or the desktop refuses ``as_control`` unread (older
than it), or a request is longer than ``rpc.sock`` reads, or ``rpc.sock`` closes the connection
unread with ``E_RATE_LIMITED`` (its connections all busy: the request did not run), :func:`call`
raises :class:`RpcUnreachable` and the caller uses the ZeroMQ client.
"""

from __future__ import annotations

import contextlib  # loaded at start-up already (site imports it)
import json
import os
import time

# The C module, not `socket`: socket.py builds its enums at import (~2.5 ms a call) and a client
# of one Unix stream needs none of them.
from _socket import AF_UNIX, SOCK_STREAM
from _socket import socket as unix_socket

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.paths import DesktopPaths, is_listening, unix_address

TYPE_CHECKING = False  # typing's, without importing typing (~2 ms of every CLI call)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["RpcUnreachable", "call"]

#: Bytes read at a time from the socket.
CHUNK = 1 << 16
#: The longest line rpc.sock reads (``RpcLimits.line_bytes``; rpc_server.py imports asyncio).
LINE_BYTES = 1 << 20
#: JSON-RPC's "invalid params" (supervisor/interface/jsonrpc.py; not imported: its dataclasses).
INVALID_PARAMS = -32602
#: ``E_RATE_LIMITED``'s JSON-RPC code (protocol/errors.py).
RATE_LIMITED = -32029


class RpcUnreachable(Exception):
    """``rpc.sock`` does not take connections, but a desktop may listen on its control socket."""


def call(paths: DesktopPaths, method: str, params: dict[str, Any], timeout_s: float) -> Any:
    """``method`` with ``params`` on the desktop at ``paths``: its result, or its AotuiError.

    ``method`` has the same name and params on both sockets (protocol/api.py declares them),
    so errors name what the ZeroMQ client names.
    """
    line = _request_line(method, params)
    if len(line) > LINE_BYTES:  # the control socket takes frames of up to 4 MiB
        raise RpcUnreachable(f"a request of {len(line)} bytes is longer than rpc.sock reads")
    sock = unix_socket(AF_UNIX, SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)  # a frozen desktop's full backlog would block the connect
        try:
            sock.connect(unix_address(paths.rpc_file))
        except OSError:
            if is_listening(paths.control_file):
                raise RpcUnreachable(str(paths.rpc_file)) from None
            no_desktop = (
                f"no desktop is running at {paths.root} (start one with `{paths.command('up')}`)"
            )
            raise _unavailable(no_desktop) from None
        deadline = time.monotonic() + timeout_s
        try:
            # Closed before our line was read: the reason is on the stream (a refusal).
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(line)
            reply = _read_line(sock, deadline)
        except (TimeoutError, OSError):
            reply = None
    finally:
        sock.close()
    if reply is None:  # silent past the deadline, or gone mid-call
        if not _alive(paths):
            raise _unavailable(f"the desktop at {paths.root} does not answer (is it running?)")
        raise AotuiError(ErrorCode.E_TIMEOUT, f"the desktop did not answer {method} in time")
    answer = json.loads(reply)
    error = answer.get("error")
    if error is None:
        return answer["result"]
    if error.get("code") == INVALID_PARAMS and "'as_control'" in str(error.get("message")):
        # A desktop from before as_control refused the call unread: the control socket answers.
        raise RpcUnreachable(f"{paths.rpc_file} does not take as_control")
    if answer.get("id") is None and error.get("code") == RATE_LIMITED:
        # Refused before our line was read (every connection busy): it ran nothing.
        raise RpcUnreachable(f"{paths.rpc_file} refused the connection: {error.get('message')}")
    raise AotuiError.from_jsonrpc(error)


def _request_line(method: str, params: dict[str, Any]) -> bytes:
    """The request of ``method`` as a line, answered as the control socket would."""
    asked = {**params, "as_control": True} if method in ("snapshot", "exec") else params
    request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": asked}
    return json.dumps(request, separators=(",", ":")).encode() + b"\n"


def _read_line(sock: unix_socket, deadline: float) -> bytes | None:
    """The first response line, or ``None`` when the peer closes first; raises TimeoutError."""
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(CHUNK)
        if not chunk:
            return None
        end = chunk.find(b"\n")
        if end >= 0:
            chunks.append(chunk[:end])
            return b"".join(chunks)
        chunks.append(chunk)


def _alive(paths: DesktopPaths) -> bool:
    """Whether the process of the desktop's pidfile exists (as the ZeroMQ client asks it)."""
    try:
        os.kill(int(paths.pidfile.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def _unavailable(message: str) -> AotuiError:
    """``E_UNAVAILABLE`` (exit 69), as the ZeroMQ client's ``DesktopUnavailable`` says it."""
    return AotuiError(ErrorCode.E_UNAVAILABLE, message)
