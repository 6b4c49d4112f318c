"""``aotui mcp`` driven by the MCP SDK's own client over stdio (HTTP: tests/test_mcp_http.py)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from pydantic import AnyUrl

from tests.conftest import RunningDesktop

Start = Callable[..., RunningDesktop]
OPEN = "<context>open --application {}</context>"


def where(desktop: RunningDesktop) -> list[str]:
    return ["--desktop", desktop.name, "--socket", str(desktop.runtime)]


def payload(result: types.CallToolResult) -> Any:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def exercise(session: ClientSession, desktop: RunningDesktop, updates: list[str]) -> None:
    """Every tool and resource, as a model would use them."""
    await session.initialize()
    names = {tool.name for tool in (await session.list_tools()).tools}
    assert names == {"snapshot", "exec", "execute", "wait", "status"}

    snapshot = await session.call_tool("snapshot", {})
    assert not snapshot.isError
    assert payload(snapshot).startswith("<desktop>")
    opened = await session.call_tool(
        "exec", {"text": "<context>open --application app_0</context>"}
    )
    assert not opened.isError, payload(opened)
    # The MCP session holds the input lease now.
    assert desktop.client.status()["lease_owner"].startswith("mcp-")
    bumped = await session.call_tool(
        "execute", {"app": "app_0", "view": "view_0", "operation": "bump"}
    )
    assert bumped.structuredContent == {"ran": 1, "results": [1]}
    focused = payload(await session.call_tool("snapshot", {"app": "app_0", "view": "view_0"}))
    assert focused.startswith('<desktop>\n<application id="app_0"')  # one app, one view
    assert '<view id="view_0" name="Echo">' in focused
    assert "<application_info>" not in focused
    assert "Calls: 1" in focused

    failed = await session.call_tool(
        "exec", {"text": "<context>open --application app_9</context>"}
    )
    assert failed.isError
    error = json.loads(payload(failed))
    assert (error["code"], error["recoverable"]) == ("E_NOT_FOUND", True)
    assert "app_9" in error["message"]
    timed_out = await session.call_tool("wait", {"reason": "app_crashed", "timeout_ms": 100})
    assert timed_out.isError
    assert json.loads(payload(timed_out))["code"] == "E_TIMEOUT"
    quiet = await session.call_tool("wait", {"quiet_ms": 50})
    assert quiet.structuredContent is not None
    assert quiet.structuredContent["until"] == "quiet_ms"
    status = json.loads(payload(await session.call_tool("status", {})))
    assert status["apps"][0]["state"] == "running"

    uris = {str(r.uri) for r in (await session.list_resources()).resources}
    status_uri = f"aotui://{desktop.name}/status"
    assert uris == {f"aotui://{desktop.name}/snapshot", status_uri}
    read = await session.read_resource(AnyUrl(f"aotui://{desktop.name}/snapshot"))
    content = read.contents[0]
    assert isinstance(content, types.TextResourceContents)
    assert content.text.startswith("<desktop>")
    await session.subscribe_resource(AnyUrl(status_uri))
    await session.call_tool("execute", {"app": "app_0", "view": "view_0", "operation": "bump"})
    with anyio.fail_after(10):
        while status_uri not in updates:
            await anyio.sleep(0.02)


def collector(updates: list[str]) -> Any:
    async def handle(message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ResourceUpdatedNotification
        ):
            updates.append(str(message.root.params.uri))

    return handle


@pytest.mark.timeout(90)
def test_over_stdio(start_desktop: Start, tmp_path: Path) -> None:
    desktop = start_desktop(["echo"])
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "aotui.supervisor", "mcp", *where(desktop)],
        env=dict(os.environ),
    )
    updates: list[str] = []
    errors = tmp_path / "mcp.err"

    async def main() -> None:
        with errors.open("w") as errlog:
            await session_over(server, errlog)

    async def session_over(server: StdioServerParameters, errlog: Any) -> None:
        async with (
            stdio_client(server, errlog=errlog) as (read, write),
            ClientSession(read, write, message_handler=collector(updates)) as session,
        ):
            await exercise(session, desktop, updates)

    anyio.run(main)
    assert "Traceback" not in errors.read_text()  # it ended cleanly with its client
    # The session ended: its lease went with it.
    assert desktop.client.status()["lease_owner"] is None


@pytest.mark.timeout(90)
def test_per_operation_tools_follow_the_snapshot(start_desktop: Start, tmp_path: Path) -> None:
    desktop = start_desktop(["echo", "lister"])
    desktop.client.execute(OPEN.format("app_0") + OPEN.format("app_1"))
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "aotui.supervisor", "mcp", "--tools", "per-operation", *where(desktop)],
        env=dict(os.environ),
    )
    changed: list[str] = []

    async def handle(message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            changed.append("tools")

    async def main() -> None:
        async with (
            stdio_client(server) as (read, write),
            ClientSession(read, write, message_handler=handle) as session,
        ):
            await session.initialize()
            assert len((await session.list_tools()).tools) == 5  # nothing read yet
            await session.call_tool("snapshot", {})
            with anyio.fail_after(10):
                while not changed:
                    await anyio.sleep(0.02)
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            pick = tools["app_1__view_0__pick"]
            item = pick.inputSchema["properties"]["item"]
            assert (item["type"], item["pattern"]) == ("string", r"^(items\[\d+\])$")
            assert pick.inputSchema["required"] == ["item"]
            assert tools["app_0__view_0__noop"].inputSchema["required"] == []
            # Another reader removes the first item: items[1] still means what this session read.
            other = desktop.new_client()
            other.execute('<context app_id="app_1" view_id="view_0">execute remove_first</context>')
            other.snapshot()
            picked = await session.call_tool("app_1__view_0__pick", {"item": "items[1]"})
            assert not picked.isError, payload(picked)
            assert picked.structuredContent == {
                "ran": 1,
                "results": [{"value": {"id": "k1"}, "key": "k1"}],
            }
            refused = await session.call_tool("app_1__view_0__pick", {"item": "notes[0]"})
            assert refused.isError  # the schema's pattern: only refs of that item type

    anyio.run(main)
