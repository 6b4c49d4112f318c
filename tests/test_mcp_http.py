"""``aotui mcp --http`` serves the desktop's own user alone: a bearer token, Host/Origin checks.

Driven by the MCP SDK's own client (httpx underneath); the refused requests are raw HTTP, sent
with a live session's id, so each would have run its command had it been let through.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from aotui.supervisor.interface.operation_tools import TOOL_NAME
from tests.conftest import RunningDesktop
from tests.test_mcp import collector, exercise, payload, where

Start = Callable[..., RunningDesktop]
OPEN = "<context>open --application {}</context>"
SERVING = re.compile(r"serving (http://\S+/mcp)(?: on unix:(\S+))?; token file (\S+) ")
BUMP = {"app": "app_0", "view": "view_0", "operation": "bump"}
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]


@dataclass
class Served:
    """A running ``aotui mcp --http``: its URL, token file and process."""

    url: str
    token_file: Path
    process: subprocess.Popen[str]
    unix: Path | None

    @property
    def token(self) -> str:
        return self.token_file.read_text().strip()

    def client(self, token: str | None = None) -> httpx.AsyncClient:
        """An httpx client for the SDK's transport, sending ``token`` (default: the real one)."""
        headers = {"Authorization": f"Bearer {token or self.token}"}
        if self.unix is None:
            return create_mcp_http_client(headers=headers)
        transport = httpx.AsyncHTTPTransport(uds=str(self.unix))
        return httpx.AsyncClient(transport=transport, headers=headers, timeout=30)


@contextlib.contextmanager
def serving(desktop: RunningDesktop, address: str, *extra: str) -> Iterator[Served]:
    """Start ``aotui mcp --http ADDRESS`` on ``desktop``; terminate it when done."""
    command = [sys.executable, "-m", "aotui.supervisor", "mcp", "--http", address]
    process = subprocess.Popen(
        [*command, *where(desktop), *extra],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        found = SERVING.search(line)
        assert found, line
        unix = Path(found.group(2)) if found.group(2) else None
        yield Served(found.group(1), Path(found.group(3)), process, unix)
    finally:
        process.terminate()
        process.wait(timeout=15)
        if process.stderr is not None:
            process.stderr.close()


def raw_call(
    served: Served, session_id: str, version: str, headers: dict[str, str], arguments: Any
) -> httpx.Response:
    """A ``tools/call`` of ``call_operation`` in the live session ``session_id``, as raw HTTP."""
    body = {
        "jsonrpc": "2.0",
        "id": 99,
        "method": "tools/call",
        "params": {"name": "call_operation", "arguments": arguments},
    }
    sent = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "mcp-session-id": session_id,
        "mcp-protocol-version": version,
        **headers,
    }
    transport = httpx.HTTPTransport(uds=str(served.unix)) if served.unix else None
    with httpx.Client(transport=transport, timeout=10) as client:
        return client.post(served.url, json=body, headers=sent)


def calls(desktop: RunningDesktop) -> int:
    """How many times the echo app's ``bump`` ran, as its view says."""
    found = re.search(r"Calls: (\d+)", desktop.client.snapshot(app="app_0"))
    assert found
    return int(found.group(1))


@pytest.mark.timeout(90)
def test_over_streamable_http_with_the_token(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    with serving(desktop, "127.0.0.1:0") as served:
        assert served.url.startswith("http://127.0.0.1:")
        updates: list[str] = []

        async def main() -> None:
            async with (
                served.client() as http,
                streamable_http_client(served.url, http_client=http) as (read, write, _),
                ClientSession(read, write, message_handler=collector(updates)) as session,
            ):
                await exercise(session, desktop, updates)

        anyio.run(main)
    assert not served.token_file.exists()  # removed when the server stopped


@pytest.mark.timeout(90)
def test_a_request_without_the_right_token_is_refused_and_runs_nothing(
    start_desktop: Start,
) -> None:
    desktop = start_desktop(["echo"])
    desktop.client.execute(OPEN.format("app_0"))
    with serving(desktop, "127.0.0.1:0") as served:

        async def main() -> None:
            async with (
                served.client() as http,
                streamable_http_client(served.url, http_client=http) as (read, write, ids),
                ClientSession(read, write) as session,
            ):
                version = str((await session.initialize()).protocolVersion)
                bumped = await session.call_tool("call_operation", BUMP)
                assert bumped.structuredContent == {"ran": 1, "results": [1]}, payload(bumped)
                session_id = ids()
                assert session_id is not None

                def attempt(headers: dict[str, str]) -> httpx.Response:
                    return raw_call(served, session_id, version, headers, BUMP)

                for headers in (
                    {},
                    {"Authorization": "Bearer wrong-" + served.token},
                    {"Authorization": "Bearer " + served.token[:-1]},
                    {"Authorization": "Basic " + served.token},
                    {"Authorization": served.token},
                ):
                    refused = await anyio.to_thread.run_sync(attempt, headers)
                    assert refused.status_code == 401, (headers, refused.text)
                    assert str(served.token_file) in refused.json()["message"]
                    assert served.token not in refused.text
                assert calls(desktop) == 1  # none of them ran
                # The same request with the token runs: the refusals above were the token's.
                let_in = {"Authorization": "Bearer " + served.token}
                allowed = await anyio.to_thread.run_sync(attempt, let_in)
                assert allowed.status_code == 200, allowed.text
                assert calls(desktop) == 2

        anyio.run(main)


@pytest.mark.timeout(90)
def test_a_foreign_host_or_origin_is_refused_and_runs_nothing(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    desktop.client.execute(OPEN.format("app_0"))
    with serving(desktop, "127.0.0.1:0") as served:
        port = served.url.split(":")[2].split("/")[0]

        async def main() -> None:
            async with (
                served.client() as http,
                streamable_http_client(served.url, http_client=http) as (read, write, ids),
                ClientSession(read, write) as session,
            ):
                version = str((await session.initialize()).protocolVersion)
                session_id = ids()
                assert session_id is not None
                token = {"Authorization": "Bearer " + served.token}

                def attempt(headers: dict[str, str]) -> httpx.Response:
                    return raw_call(served, session_id, version, token | headers, BUMP)

                for headers, status in (
                    # A page of evil.example whose name now resolves to 127.0.0.1.
                    ({"Host": f"evil.example:{port}"}, 421),
                    ({"Host": f"evil.example:{port}", "Origin": "http://evil.example"}, 421),
                    ({"Host": "127.0.0.1"}, 421),  # not the bound port
                    ({"Origin": "http://evil.example"}, 403),
                    ({"Origin": f"http://evil.example:{port}"}, 403),
                    ({"Origin": "null"}, 403),
                ):
                    refused = await anyio.to_thread.run_sync(attempt, headers)
                    assert refused.status_code == status, (headers, refused.text)
                    assert calls(desktop) == 0, headers
                    # No token at all: still refused on the Host or Origin, which come first.
                    bare = raw_call(served, session_id, version, headers, BUMP)
                    assert bare.status_code == status, headers
                # The names of the bound address are accepted, with or without an Origin.
                for headers in (
                    {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"},
                    {"Origin": f"http://127.0.0.1:{port}"},
                ):
                    allowed = await anyio.to_thread.run_sync(attempt, headers)
                    assert allowed.status_code == 200, (headers, allowed.text)
                assert calls(desktop) == 2

        anyio.run(main)


@pytest.mark.timeout(90)
def test_the_token_file_is_the_desktop_users_alone(start_desktop: Start, tmp_path: Path) -> None:
    desktop = start_desktop(["echo"])
    with serving(desktop, "127.0.0.1:0") as served:
        token_file = served.token_file
        assert token_file.parent == desktop.runtime / desktop.name
        info = token_file.lstat()
        assert stat.S_ISREG(info.st_mode)
        assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o600, os.getuid())
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        assert len(served.token) >= 43  # 32 random bytes, URL-safe base64
        if os.getuid() == 0 and shutil.which("setpriv"):
            # nobody, handed the file itself (an O_PATH descriptor: the directories above it do
            # not stand in the way), cannot open it; a 0644 file handed the same way it reads.
            control = tmp_path / "control"
            control.write_text("readable\n")
            control.chmod(0o644)
            for path, readable in ((token_file, False), (control, True)):
                fd = os.open(path, os.O_PATH)
                try:
                    opened = subprocess.run(
                        [*NOBODY, "cat", f"/proc/self/fd/{fd}"],
                        capture_output=True,
                        text=True,
                        timeout=10,
                        check=False,
                        pass_fds=(fd,),
                    )
                finally:
                    os.close(fd)
                assert (opened.returncode == 0) is readable, opened.stderr
                if not readable:
                    assert "Permission denied" in opened.stderr
                    assert served.token not in opened.stdout


@pytest.mark.timeout(90)
def test_over_a_unix_socket_with_the_token(start_desktop: Start, tmp_path: Path) -> None:
    desktop = start_desktop(["echo"])
    desktop.client.execute(OPEN.format("app_0"))
    path = tmp_path / "mcp.sock"
    with serving(desktop, f"unix:{path}") as served:
        assert (served.url, served.unix) == ("http://localhost/mcp", path)
        info = path.lstat()
        assert stat.S_ISSOCK(info.st_mode)
        assert stat.S_IMODE(info.st_mode) == 0o600

        async def main() -> None:
            async with (
                served.client() as http,
                streamable_http_client(served.url, http_client=http) as (read, write, ids),
                ClientSession(read, write) as session,
            ):
                version = str((await session.initialize()).protocolVersion)
                bumped = await session.call_tool("call_operation", BUMP)
                assert bumped.structuredContent == {"ran": 1, "results": [1]}, payload(bumped)
                session_id = ids()
                assert session_id is not None
                refused = raw_call(served, session_id, version, {}, BUMP)
                assert refused.status_code == 401, refused.text
                assert calls(desktop) == 1

        anyio.run(main)
    assert not path.exists()
    assert not served.token_file.exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("address", ["0.0.0.0:8080", "192.168.1.1:80", "127.0.0.1:x", "unix:"])
def test_http_only_on_loopback_or_a_unix_socket(start_desktop: Start, address: str) -> None:
    desktop = start_desktop(["echo"])
    refused = subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", "mcp", "--http", address, *where(desktop)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert refused.returncode == 64
    assert "loopback" in refused.stderr


@pytest.mark.timeout(90)
def test_operation_ids_no_tool_may_be_named_get_valid_distinct_names(
    start_desktop: Start,
) -> None:
    desktop = start_desktop(["misnamer"])
    desktop.client.execute(OPEN.format("app_0"))
    armed = desktop.client.execute('<context app_id="app_0" view_id="view_0">execute arm</context>')
    assert armed["results"] == ["armed"]
    with serving(desktop, "127.0.0.1:0", "--tools", "per-operation") as served:

        async def main() -> None:
            async with (
                served.client() as http,
                streamable_http_client(served.url, http_client=http) as (read, write, _),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                await session.call_tool("snapshot", {})
                tools = (await session.list_tools()).tools
                names = [tool.name for tool in tools]
                assert all(TOOL_NAME.fullmatch(name) for name in names), names
                assert len(set(names)) == len(names), names
                ours = {t.name: t for t in tools if t.name.startswith("app_0__view_0__")}
                # Every operation the command language can name has a tool, each once; the
                # others (a space, '/', fullwidth letters) could never run and have none.
                runnable = ["arm", "mail.send", "mail:send", "mail_send", "x" * 70 + "1"]
                runnable.append("x" * 70 + "2")
                assert len(ours) == len(runnable), sorted(ours)
                assert "app_0__view_0__mail_send" in ours
                assert "app_0__view_0__arm" in ours
                reached = {}
                for name in ours:
                    result = await session.call_tool(name, {})
                    assert not result.isError, (name, payload(result))
                    assert result.structuredContent is not None
                    reached[name] = result.structuredContent["results"][0]
                # Each tool reached its own operation: every runnable id once.
                assert sorted(reached.values()) == sorted(["armed", *runnable[1:]])
                for name, op_id in reached.items():
                    if op_id != "armed" and name != f"app_0__view_0__{op_id}":
                        assert f"operation {op_id}" in str(ours[name].description)  # says which

        anyio.run(main)


def test_the_errors_say_where_the_token_is() -> None:
    """The 401 body's shape, as a client would parse it (no desktop needed)."""
    from aotui.supervisor.interface.mcp_http import BearerGate

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("reached the app without a token")

    async def main() -> tuple[int, dict[str, Any]]:
        gate = BearerGate(app, "secret", Path("/run/x/mcp-1.token"), None)
        transport = httpx.ASGITransport(app=gate)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            response = await client.post("/mcp", json={})
            return response.status_code, json.loads(response.text)

    status, body = anyio.run(main)
    assert status == 401
    assert body["error"] == "unauthorized"
    assert "/run/x/mcp-1.token" in body["message"]
