"""A fleet desktop's other faces: its signals (``FleetDesktop.signals``) and the MCP server over
it (``aotui mcp --fleet ADDRESS --desktop NAME``), driven by the official MCP SDK's client.

One Ray cluster (a head and two worker nodes on this machine, tests/fleet_cluster.py) and one
fleet on a private PostgreSQL (tests/stores.py) for the module; each test its own desktop names.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from aotui.protocol.messages import Signal
from tests.conftest import wait_for
from tests.stores import PrivatePostgres
from tests.test_durability import BUMP

ray = pytest.importorskip("ray", reason="the fleet's tests need Ray: pip install 'aotui[fleet]'")
mcp = pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters, types  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from pydantic import AnyUrl  # noqa: E402

from aotui.supervisor.fleet.actors import (  # noqa: E402 -- after the skip without Ray
    DESKTOP_PREFIX,
    NAMESPACE,
    FleetSettings,
    router_actor,
)
from aotui.supervisor.fleet.client import FleetClient, FleetDesktop  # noqa: E402
from tests.fleet_cluster import desktop_info, ray_cluster  # noqa: E402

pytestmark = pytest.mark.timeout(120)

ECHO = Path(__file__).parent / "apps" / "echo"
OPEN = "<context>open --application app_0</context>"


@dataclass
class Fleet:
    address: str
    client: FleetClient


@pytest.fixture(scope="module")
def fleet(postgres_server: PrivatePostgres) -> Iterator[Fleet]:
    """One cluster and one fleet for this module's tests."""
    url = postgres_server.create_database(f"faces{os.getpid()}")
    config = f"apps = [{str(ECHO)!r}]\ndurability = 'ack'\n".replace("'", '"')
    with (
        tempfile.TemporaryDirectory(prefix="faces-", dir="/tmp") as runtime,
        ray_cluster() as (cluster, _workers),
    ):
        settings = FleetSettings(url, config, runtime, num_cpus=0.01, memory=64 << 20)
        ray.get(router_actor(settings).get_settings.remote(), timeout=60)
        yield Fleet(cluster.address, FleetClient(cluster.address))


def _bump(desktop: FleetDesktop) -> int:
    count: int = desktop.execute(BUMP.format(app="app_0"))["results"][0]
    return count


def test_signals_come_after_a_change_by_another_session(fleet: Fleet) -> None:
    desktop = fleet.client.desktop("faces-signals")
    other = FleetClient(fleet.address).desktop("faces-signals")
    try:
        desktop.execute(OPEN)
        signals = desktop.signals(timeout_s=15)  # subscribed when this returns
        assert _bump(other) == 1
        signal = next(signals)
        assert isinstance(signal, Signal)
        assert signal.desktop_id == "faces-signals"
        # Silence ends the iterator after timeout_s, as Client.signals does.
        began = time.monotonic()
        assert list(desktop.signals(timeout_s=0.5)) == []
        assert time.monotonic() - began < 10
    finally:
        desktop.close()
        other.close()


def test_a_stream_its_caller_ends_frees_the_actor_s_thread(fleet: Fleet) -> None:
    """Each stream holds one of the actor's 16 call threads while it runs: more streams than
    that, each ended by its caller (a timeout), leave the desktop answering."""
    desktop = fleet.client.desktop("faces-streams")
    try:
        desktop.ping()
        for _ in range(20):
            assert list(desktop.signals(timeout_s=0.1)) == []
        # A stream left running would hold a thread each: the 17th on would wait here.
        actor = ray.get_actor(DESKTOP_PREFIX + "faces-streams", namespace=NAMESPACE)
        assert ray.get(actor.info.remote(), timeout=10)["desktop"] == "faces-streams"
    finally:
        desktop.close()


def test_streams_held_open_never_take_the_threads_calls_need(fleet: Fleet) -> None:
    """16 streams opened at once (the actor's call threads are 16): 8 run, in their own
    group, the others wait for it; the actor's calls still answer."""
    name = "faces-many"
    sessions = [fleet.client.desktop(name) for _ in range(16)]
    caller = fleet.client.desktop(name)
    caller.ping()
    subscribed: list[float] = []

    def hold(session: FleetDesktop) -> None:
        with contextlib.suppress(Exception):  # closed under it at the end
            stream = session.signals(timeout_s=6)
            subscribed.append(time.monotonic())
            list(stream)

    holders = [threading.Thread(target=hold, args=(s,), daemon=True) for s in sessions]
    try:
        for holder in holders:
            holder.start()
        wait_for(lambda: len(subscribed) >= 8, timeout_s=30, what="8 streams subscribed")
        time.sleep(1.0)  # time for more to subscribe, if the actor let them
        assert len(subscribed) == 8, "streams past the group's 8 ran"
        answered: list[str] = []
        call = threading.Thread(target=lambda: answered.append(caller.snapshot()), daemon=True)
        call.start()
        call.join(timeout=3.0)  # the streams last 6 s of silence: a starved call waits longer
        assert answered, "a call waited behind the signal streams"
    finally:
        for session in [*sessions, caller]:
            session.close()
        for holder in holders:
            holder.join(timeout=30)


def test_signals_go_on_after_the_desktop_s_actor_restarts(fleet: Fleet) -> None:
    name = "faces-restart"
    desktop = fleet.client.desktop(name, failover_s=60)
    other = fleet.client.desktop(name, failover_s=60)
    seen: list[tuple[float, Signal]] = []
    failed: list[BaseException] = []

    def follow() -> None:  # an agent waiting on the desktop's signals throughout
        try:
            for signal in desktop.signals(timeout_s=60):
                seen.append((time.monotonic(), signal))
        except BaseException as exc:  # reported by the test below
            failed.append(exc)

    reader = threading.Thread(target=follow, daemon=True)
    try:
        desktop.execute(OPEN)
        reader.start()
        assert _bump(other) == 1
        wait_for(lambda: seen, timeout_s=20)
        actor = ray.get_actor(DESKTOP_PREFIX + name, namespace=NAMESPACE)
        old = ray.get(actor.info.remote(), timeout=30)
        ray.kill(actor, no_restart=False)  # Ray starts it again: a new process, same name
        # The desktop answers again (its state from PostgreSQL) ...
        assert _bump(other) == 2
        assert desktop_info(name)["actor_pid"] != old["actor_pid"]
        # ... and the stream, subscribed again on the new actor, carries its changes.
        back = time.monotonic()
        deadline = back + 30
        while not any(at > back for at, _ in seen):
            assert not failed, failed
            assert time.monotonic() < deadline, "no signal after the actor's restart"
            _bump(other)
            time.sleep(1.0)
        assert all(signal.desktop_id == name for _, signal in seen)
        assert not failed, failed
    finally:
        desktop.close()  # its signal iterator ends too
        other.close()
        if reader.is_alive():
            reader.join(10)
    assert not reader.is_alive()


def _payload(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def test_the_mcp_server_serves_a_fleet_desktop(fleet: Fleet, tmp_path: Path) -> None:
    name = "faces-mcp"
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "aotui.supervisor", "mcp", "--fleet", fleet.address, "--desktop", name],
        env=dict(os.environ),
    )
    updates: list[str] = []
    status_uri = f"aotui://{name}/status"

    async def collect(message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ResourceUpdatedNotification
        ):
            updates.append(str(message.root.params.uri))

    async def main() -> None:
        with (tmp_path / "mcp.err").open("w") as errlog:
            async with (
                stdio_client(server, errlog=errlog) as (read, write),
                ClientSession(read, write, message_handler=collect) as session,
            ):
                await session.initialize()
                names = {tool.name for tool in (await session.list_tools()).tools}
                assert names == {"snapshot", "run_commands", "call_operation", "wait", "status"}
                opened = await session.call_tool("run_commands", {"text": OPEN})
                assert not opened.isError, _payload(opened)
                bumped = await session.call_tool(
                    "call_operation", {"app": "app_0", "view": "view_0", "operation": "bump"}
                )
                assert bumped.structuredContent == {"ran": 1, "results": [1]}, _payload(bumped)
                # Refs resolve against what this session read: a pull, then a ref into it.
                assert "Calls: 1" in _payload(await session.call_tool("snapshot", {}))
                read_back = await session.read_resource(AnyUrl(f"aotui://{name}/snapshot"))
                content = read_back.contents[0]
                assert isinstance(content, types.TextResourceContents)
                assert content.text.startswith("<desktop>")
                assert "Calls: 1" in content.text
                uris = {str(r.uri) for r in (await session.list_resources()).resources}
                assert status_uri in uris
                failed = await session.call_tool(
                    "run_commands", {"text": "<context>open --application app_9</context>"}
                )
                assert failed.isError
                # A change reaches a subscriber as a resource update (a signal of the desktop).
                await session.subscribe_resource(AnyUrl(status_uri))
                await session.call_tool(
                    "call_operation", {"app": "app_0", "view": "view_0", "operation": "bump"}
                )
                with anyio.fail_after(20):
                    while status_uri not in updates:
                        await anyio.sleep(0.05)

    anyio.run(main)
    assert "Traceback" not in (tmp_path / "mcp.err").read_text()


def test_aotui_mcp_without_fleet_imports_no_ray(tmp_path: Path) -> None:
    """``aotui mcp`` on one machine (served until its client goes: here stdin is empty) pays
    nothing for the fleet: Ray is imported with ``--fleet`` only."""
    words = ["mcp", "--desktop", "solo", "--socket", str(tmp_path)]
    served = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "aotui.supervisor", *words],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert served.returncode == 0, served.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in served.stderr.splitlines()]
    assert "mcp.server.lowlevel" in imported  # it served
    assert not [name for name in imported if name.split(".")[0] == "ray"]
    assert not [name for name in imported if name.startswith("aotui.supervisor.fleet")]
