"""A JSON-RPC peer for tests: a plain Unix socket speaking newline-delimited JSON."""

from __future__ import annotations

import itertools
import json
import socket
from pathlib import Path
from typing import Any

from aotui.supervisor.paths import unix_address


class RpcPeer:
    """One connection to a desktop's ``rpc.sock``."""

    def __init__(self, path: Path, timeout_s: float = 20.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        self.sock.connect(unix_address(path))
        self.buffer = b""
        self.ids = itertools.count(1)
        #: Notifications received while waiting for a response.
        self.events: list[dict[str, Any]] = []

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are."""
        self.sock.sendall(data)

    def line(self) -> dict[str, Any]:
        """The next line from the desktop, parsed."""
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError(f"closed by the desktop (left: {self.buffer[:200]!r})")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def request(self, method: str, **params: Any) -> dict[str, Any]:
        """Send a request; returns its whole response (events that come first are kept)."""
        request_id = next(self.ids)
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        self.send_raw(json.dumps(message).encode() + b"\n")
        while True:
            response = self.line()
            if "id" not in response:
                self.events.append(response)
                continue
            assert response["id"] == request_id, response
            return response

    def call(self, method: str, **params: Any) -> Any:
        """A request that must succeed; returns its result."""
        response = self.request(method, **params)
        assert "error" not in response, response
        return response["result"]

    def close(self) -> None:
        """Close the connection."""
        self.sock.close()

    def __enter__(self) -> RpcPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
