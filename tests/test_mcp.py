"""``aotui mcp`` driven by the MCP SDK's own client over stdio (HTTP: tests/test_mcp_http.py)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from pydantic import AnyUrl

from aotui.protocol.messages import SignalReason
from aotui.supervisor.desktop.instructions import SYSTEM_INSTRUCTIONS
from aotui.supervisor.interface.mcp_tools import IDLE_S
from tests.conftest import RunningDesktop

Start = Callable[..., RunningDesktop]
OPEN = "<context>open --application {}</context>"
BUMP = {"app": "app_0", "view": "view_0", "operation": "bump"}


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
    assert names == {"snapshot", "run_commands", "call_operation", "wait", "status"}

    snapshot = await session.call_tool("snapshot", {})
    assert not snapshot.isError
    assert payload(snapshot).startswith("<desktop>")
    opened = await session.call_tool(
        "run_commands", {"text": "<context>open --application app_0</context>"}
    )
    assert not opened.isError, payload(opened)
    # The MCP session holds the input lease now.
    assert desktop.client.status()["lease_owner"].startswith("mcp-")
    bumped = await session.call_tool(
        "call_operation", {"app": "app_0", "view": "view_0", "operation": "bump"}
    )
    assert bumped.structuredContent == {"ran": 1, "results": [1]}
    focused = payload(await session.call_tool("snapshot", {"app": "app_0", "view": "view_0"}))
    assert focused.startswith('<desktop>\n<application id="app_0"')  # one app, one view
    assert '<view id="view_0" name="Echo">' in focused
    assert "<application_info>" not in focused
    assert "Calls: 1" in focused

    failed = await session.call_tool(
        "run_commands", {"text": "<context>open --application app_9</context>"}
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
    base = f"aotui://{desktop.name}"
    assert uris == {f"{base}/snapshot", status_uri, f"{base}/instructions"}
    read = await session.read_resource(AnyUrl(f"aotui://{desktop.name}/snapshot"))
    content = read.contents[0]
    assert isinstance(content, types.TextResourceContents)
    assert content.text.startswith("<desktop>")
    await session.subscribe_resource(AnyUrl(status_uri))
    await session.call_tool(
        "call_operation", {"app": "app_0", "view": "view_0", "operation": "bump"}
    )
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


# --- issue 21: what the server advertises, the lease, a desktop not up, tools a model reads ---


@contextlib.asynccontextmanager
async def mcp_session(
    args: list[str], handler: Any = None
) -> AsyncIterator[tuple[ClientSession, types.InitializeResult]]:
    """An initialized SDK client session with ``aotui mcp ARGS`` over stdio."""
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "aotui.supervisor", "mcp", *args], env=dict(os.environ)
    )
    async with (
        stdio_client(server) as (read, write),
        ClientSession(read, write, message_handler=handler) as session,
    ):
        yield session, await session.initialize()


def aotui(desktop: RunningDesktop, *words: str) -> subprocess.CompletedProcess[str]:
    """The real ``aotui`` command on ``desktop``."""
    command = [sys.executable, "-m", "aotui.supervisor", *words, *where(desktop)]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)


def error_of(result: types.CallToolResult) -> dict[str, Any]:
    assert result.isError, payload(result)
    error: dict[str, Any] = json.loads(payload(result))
    return error


@pytest.mark.timeout(60)
def test_what_the_server_advertises_is_what_it_does(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    desktop.client.execute(OPEN.format("app_0"))
    base = f"aotui://{desktop.name}"

    async def main() -> None:
        async with mcp_session(where(desktop)) as (session, init):
            resources = init.capabilities.resources
            assert resources is not None
            assert resources.subscribe is True  # it sends resource updates (test_over_stdio)
            assert init.serverInfo.version == importlib.metadata.version("aotui")
            listed = {str(r.uri): r.mimeType for r in (await session.list_resources()).resources}
            for uri, mime in listed.items():
                read = (await session.read_resource(AnyUrl(uri))).contents[0]
                assert read.mimeType == mime, uri
            assert listed[f"{base}/status"] == "application/json"
            assert listed[f"{base}/snapshot"] == "text/markdown"
            templates = (await session.list_resource_templates()).resourceTemplates
            assert [t.uriTemplate for t in templates] == [f"{base}/snapshot/{{app}}"]
            one = (await session.read_resource(AnyUrl(f"{base}/snapshot/app_0"))).contents[0]
            assert isinstance(one, types.TextResourceContents)
            assert one.mimeType == "text/markdown"
            assert one.text.startswith('<desktop>\n<application id="app_0"')
            # The System Instructions without the server's instructions: a resource, an option.
            told = (await session.read_resource(AnyUrl(f"{base}/instructions"))).contents[0]
            assert isinstance(told, types.TextResourceContents)
            assert told.text == SYSTEM_INSTRUCTIONS
            plain = payload(await session.call_tool("snapshot", {}))
            assert "# System Instructions" not in plain
            full = payload(await session.call_tool("snapshot", {"include_instructions": True}))
            assert "# System Instructions" in full

    anyio.run(main)


def undescribed(tools: list[types.Tool]) -> list[str]:
    return [
        f"{tool.name}.{name}"
        for tool in tools
        for name, schema in tool.inputSchema.get("properties", {}).items()
        if not schema.get("description")
    ]


@pytest.mark.timeout(60)
def test_tools_a_model_cannot_take_for_a_shell(start_desktop: Start) -> None:
    desktop = start_desktop(["echo", "lister", "vault"])
    desktop.client.execute(OPEN.format("app_0") + OPEN.format("app_1") + OPEN.format("app_2"))

    async def main() -> None:
        async with mcp_session([*where(desktop), "--tools", "per-operation"]) as (session, _):
            fixed = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert not {"exec", "execute"} & fixed.keys()
            assert undescribed(list(fixed.values())) == []
            args = fixed["call_operation"].inputSchema["properties"]["args"]["description"]
            assert '"notes[1]"' in args
            reason = fixed["wait"].inputSchema["properties"]["reason"]
            assert set(reason["enum"]) == {r.value for r in SignalReason}
            assert reason["default"] == "dom_mutation"
            # With no condition, wait waits for that default: a change wakes it.
            waiting = desktop.new_client()

            async def bump_soon() -> None:
                await anyio.sleep(0.3)
                await anyio.to_thread.run_sync(
                    lambda: waiting.execute(
                        '<context app_id="app_0" view_id="view_0">execute bump</context>'
                    )
                )

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(bump_soon)
                woke = await session.call_tool("wait", {"timeout_ms": 10_000})
            assert woke.structuredContent is not None
            assert woke.structuredContent["reason"] == "dom_mutation", woke

            await session.call_tool("snapshot", {})
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert len(tools) > len(fixed)
            assert undescribed(list(tools.values())) == []  # the per-operation tools as well
            wipe = tools["app_2__view_0__wipe"]
            assert wipe.annotations is not None
            assert wipe.annotations.destructiveHint is True
            assert wipe.description is not None
            assert "Asks the user first" in wipe.description
            deposit = tools["app_2__view_0__deposit"]
            assert deposit.annotations is None or not deposit.annotations.destructiveHint

    anyio.run(main)


@pytest.mark.timeout(60)
def test_the_tool_list_fits_700_tokens() -> None:
    bpe_openai = pytest.importorskip("bpe_openai")
    from aotui.supervisor.interface.mcp_server import TOOLS

    text = types.ListToolsResult(tools=TOOLS).model_dump_json(by_alias=True, exclude_none=True)
    assert len(bpe_openai.get_encoding("cl100k_base").encode(text)) <= 700
    assert undescribed(TOOLS) == []


@pytest.mark.timeout(90)
def test_an_idle_session_keeps_nobody_out(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    bump = '<context app_id="app_0" view_id="view_0">execute bump</context>'

    async def main() -> None:
        async with mcp_session(where(desktop)) as (a, _):
            opened = await a.call_tool("run_commands", {"text": OPEN.format("app_0")})
            assert not opened.isError, payload(opened)
            done = time.monotonic()
            # Right after A's command: refused, naming A, its kind and when input frees.
            refused = await anyio.to_thread.run_sync(lambda: aotui(desktop, "exec", bump))
            assert refused.returncode == 75, refused.stderr
            assert "mcp-" in refused.stderr
            assert "(an MCP session), idle; input frees in" in refused.stderr
            # A stays connected, idle: within its idle time input is free for the CLI ...
            while (ran := aotui(desktop, "exec", bump)).returncode != 0:
                assert ran.returncode == 75, ran.stderr
                assert time.monotonic() - done < IDLE_S + 1, ran.stderr
                await anyio.sleep(0.2)
            # ... and for a second MCP session, at once now.
            async with mcp_session(where(desktop)) as (b, _):
                bumped = await b.call_tool("call_operation", BUMP)
                assert bumped.structuredContent == {"ran": 1, "results": [2]}, payload(bumped)
                assert desktop.client.status()["lease_owner"].startswith("mcp-")
            # B has gone: its lease went with it.
            assert desktop.client.status()["lease_owner"] is None

    anyio.run(main)


@pytest.mark.timeout(120)
def test_a_session_mid_command_is_named_with_when_input_frees(start_desktop: Start) -> None:
    desktop = start_desktop(["slow", "echo"], operation_timeout_ms=20_000)
    desktop.client.execute(OPEN.format("app_0") + OPEN.format("app_1"))
    hang = {"app": "app_0", "view": "view_0", "operation": "hang", "args": {"seconds": 7}}
    bump = BUMP | {"app": "app_1"}

    async def main() -> None:
        async with mcp_session(where(desktop)) as (a, _), mcp_session(where(desktop)) as (b, _):
            results: list[types.CallToolResult] = []

            async def hang_a() -> None:
                results.append(await a.call_tool("call_operation", hang))

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(hang_a)
                with anyio.fail_after(10):
                    while desktop.client.status()["lease_owner"] is None:
                        await anyio.sleep(0.05)
                await anyio.sleep(IDLE_S + 0.5)  # past the idle time: still held, A works
                refused = error_of(await b.call_tool("call_operation", bump))
                assert refused["code"] == "E_LOCKED"
                assert "(an MCP session), running a command now" in refused["message"]
                bound = re.search(r"within (\d+) s at most", refused["message"])
                assert bound is not None, refused["message"]
                assert IDLE_S <= int(bound.group(1)) <= 20 + IDLE_S + 1
            assert not results[0].isError, payload(results[0])
            answered = time.monotonic()
            # A answered and is idle: B takes its turn within the idle time.
            while (turn := await b.call_tool("call_operation", bump)).isError:
                assert error_of(turn)["code"] == "E_LOCKED"
                assert "idle; input frees in" in error_of(turn)["message"]
                assert time.monotonic() - answered < IDLE_S + 1
                await anyio.sleep(0.2)
            assert turn.structuredContent == {"ran": 1, "results": [1]}

    anyio.run(main)


@pytest.mark.timeout(90)
def test_serves_before_the_desktop_is_up_and_uses_it_once_up(
    start_desktop: Start, tmp_path: Path
) -> None:
    where_late = ["--desktop", "late", "--socket", str(tmp_path / "run")]

    async def main() -> None:
        async with mcp_session(where_late) as (session, _):
            assert {t.name for t in (await session.list_tools()).tools} >= {"snapshot", "status"}
            for name, arguments in (
                ("snapshot", {}),
                ("run_commands", {"text": OPEN.format("app_0")}),
            ):
                error = error_of(await session.call_tool(name, arguments))
                assert error["code"] == "E_UNAVAILABLE"
                assert "aotui up --desktop late --socket" in error["message"]
            await anyio.to_thread.run_sync(lambda: start_desktop(["echo"], name="late"))
            read = await session.call_tool("snapshot", {})
            assert not read.isError, payload(read)
            assert payload(read).startswith("<desktop>")
            opened = await session.call_tool("run_commands", {"text": OPEN.format("app_0")})
            assert not opened.isError, payload(opened)

    anyio.run(main)


def inspector() -> list[str]:
    """The MCP Inspector's CLI through npx, or skip when npx or the package is not there."""
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("npx is not installed")
    command = [npx, "-y", "@modelcontextprotocol/inspector", "--cli"]
    try:
        probe = subprocess.run(
            [*command[:-1], "--help"], capture_output=True, text=True, timeout=120, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.skip("npx could not fetch @modelcontextprotocol/inspector in 120 s")
    if probe.returncode != 0:
        pytest.skip(f"@modelcontextprotocol/inspector is not available: {probe.stderr[-300:]}")
    return command


@pytest.mark.timeout(300)
def test_the_mcp_inspector_lists_and_calls_the_tools(start_desktop: Start) -> None:
    command = inspector()
    desktop = start_desktop(["echo"])
    desktop.client.execute(OPEN.format("app_0"))
    server = [sys.executable, "-m", "aotui.supervisor", "mcp", *where(desktop)]

    def ask(*method: str) -> Any:
        done = subprocess.run(
            [*command, *server, *method], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    tools = ask("--method", "tools/list")["tools"]
    assert {tool["name"] for tool in tools} == {
        "snapshot",
        "run_commands",
        "call_operation",
        "wait",
        "status",
    }
    called = ask(
        "--method", "tools/call", "--tool-name", "call_operation",
        "--tool-arg", "app=app_0", "--tool-arg", "view=view_0", "--tool-arg", "operation=bump",
    )  # fmt: skip
    assert not called.get("isError"), called
    assert called["structuredContent"] == {"ran": 1, "results": [1]}
    templates = ask("--method", "resources/templates/list")["resourceTemplates"]
    assert templates[0]["uriTemplate"] == f"aotui://{desktop.name}/snapshot/{{app}}"
    read = ask("--method", "resources/read", "--uri", f"aotui://{desktop.name}/status")
    assert read["contents"][0]["mimeType"] == "application/json"


@pytest.mark.timeout(120)
def test_start_starts_the_desktop_first(tmp_path: Path) -> None:
    run = tmp_path / "run"
    place = ["--desktop", "started", "--socket", str(run)]
    env = {**os.environ, "AOTUI_HOME": str(tmp_path / "home")}
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "aotui.supervisor", "mcp", "--start", *place],
        env=env,
    )

    async def main() -> None:
        async with (
            stdio_client(server) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            read_it = await session.call_tool("snapshot", {})
            assert not read_it.isError, payload(read_it)
            assert "# Installed Applications" in payload(read_it)
            status = await session.call_tool("status", {})
            assert status.structuredContent is not None
            pids.append(status.structuredContent["pid"])

    pids: list[int] = []
    try:
        anyio.run(main)
    finally:
        down = [sys.executable, "-m", "aotui.supervisor", "down", *place]
        subprocess.run(down, env=env, capture_output=True, timeout=60, check=False)
    assert pids
    with contextlib.suppress(psutil.NoSuchProcess):
        _gone, alive = psutil.wait_procs([psutil.Process(pids[0])], timeout=10)
        for leftover in alive:
            leftover.kill()
        assert not alive, "aotui down left the started supervisor running"
