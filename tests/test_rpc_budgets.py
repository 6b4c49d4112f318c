"""Budgets of ``rpc.sock`` and ``wait_for`` per client (issue 20, D13), on real desktops.

A client on ``rpc.sock`` is the process that connected (``SO_PEERCRED``); on the control socket,
a connection (its ZeroMQ identity). One of them must not lock the owner's ``aotui`` out, however
many idle connections or waits it opens. The CLI runs as a process of its own (a different pid
from the test's), with the control socket moved out of its reach where the test must prove that
``rpc.sock`` itself served it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zmq

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import ErrorReply, Reply, Request
from aotui.supervisor.interface import rpc_client
from aotui.supervisor.interface.cli import main
from aotui.supervisor.interface.jsonrpc import error_line
from aotui.supervisor.interface.rpc_server import RpcLimits
from aotui.supervisor.interface.waits import MAX_WAITS, WAITS_PER_CLIENT
from aotui.supervisor.paths import DesktopPaths, unix_address
from tests.conftest import RunningDesktop, spare_descriptors
from tests.rpc_peer import RpcPeer

Start = Callable[..., RunningDesktop]

ECHO = '<context app_id="app_0" view_id="view_0">execute bump</context>'
#: A wait that nothing on these desktops answers before its timeout.
NEVER = {"reason": "app_crashed", "timeout_ms": 30_000}

#: A process of its own that opens N connections to rpc.sock, says so, and holds them until its
#: stdin closes.
HOLDER = """
import socket, sys
from aotui.supervisor.paths import unix_address
held = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(unix_address(sys.argv[1]))
    held.append(s)
print("ready", flush=True)
sys.stdin.read()
"""


def paths_of(desktop: RunningDesktop) -> DesktopPaths:
    return DesktopPaths.for_desktop(desktop.name, str(desktop.runtime))


@pytest.fixture
def desktop(start_desktop: Start) -> RunningDesktop:
    running = start_desktop(["echo"])
    running.client.execute("<context>open --application app_0</context>")
    return running


def cli(desktop: RunningDesktop, *words: str) -> subprocess.CompletedProcess[str]:
    """``aotui WORDS`` on the desktop, as a process of its own."""
    where = ["--desktop", desktop.name, "--socket", str(desktop.runtime)]
    return subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", *words, *where],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@contextlib.contextmanager
def control_socket_hidden(desktop: RunningDesktop) -> Iterator[None]:
    """The control socket's file moved aside: only ``rpc.sock`` can answer the CLI."""
    path = paths_of(desktop).control_file
    aside = path.with_name("control.sock.aside")
    os.rename(path, aside)
    try:
        yield
    finally:
        os.rename(aside, path)


def the_cli_works(desktop: RunningDesktop) -> None:
    for words in (["status"], ["snapshot", "--plain", "--quiet"], ["exec", "-q", ECHO]):
        done = cli(desktop, *words)
        assert done.returncode == 0, (words, done.returncode, done.stderr)
    assert "(operation:bump)" in cli(desktop, "snapshot", "--plain", "--quiet").stdout


def connect(path: Path) -> socket.socket:
    """A connection to ``path``, waiting while the listener's backlog is full: a loaded
    supervisor accepts late, and a connect with a timeout then fails at once with EAGAIN."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(20)
    deadline = time.monotonic() + 20
    try:
        while True:
            try:
                sock.connect(unix_address(path))
                return sock
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
    except BaseException:
        sock.close()
        raise


def told(socks: list[socket.socket], count: int, timeout_s: float = 20) -> list[dict[str, object]]:
    """The first line of each of ``count`` sockets the desktop wrote to unasked."""
    lines: dict[socket.socket, bytes] = {}
    deadline = time.monotonic() + timeout_s
    while len(lines) < count and time.monotonic() < deadline:
        readable, _, _ = select.select([s for s in socks if s not in lines], [], [], 0.5)
        for sock in readable:
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
            lines[sock] = data
    assert len(lines) == count, f"{len(lines)} of {count} connections were told something"
    return [json.loads(line) for line in lines.values()]


def lines_of(peers: list[RpcPeer], count: int, timeout_s: float = 20) -> list[dict[str, object]]:
    """``count`` lines from any of ``peers``, as they come."""
    got: list[dict[str, object]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for peer in peers:
            while b"\n" in peer.buffer:
                got.append(peer.line())
        if len(got) >= count:
            break
        readable, _, _ = select.select([peer.sock for peer in peers], [], [], 0.5)
        for peer in peers:
            if peer.sock in readable:
                chunk = peer.sock.recv(1 << 16)
                if not chunk:
                    raise ConnectionError("closed by the desktop")
                peer.buffer += chunk
    assert len(got) == count, f"{len(got)} of {count} lines came"
    return got


def need_descriptors(count: int) -> None:
    if spare_descriptors() < count:
        pytest.skip(f"needs {count} spare descriptors (ulimit -n: raise the hard limit)")


# --- connections -------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_one_process_with_300_idle_connections_leaves_the_cli_working(
    desktop: RunningDesktop,
) -> None:
    need_descriptors(300)
    budget = RpcLimits().per_process
    socks: list[socket.socket] = []
    try:
        for _ in range(300):
            socks.append(connect(paths_of(desktop).rpc_file))
        refusals = told(socks, 300 - budget)
        assert {r["error"]["data"]["budget"] for r in refusals} == {  # type: ignore[index]
            "connections_per_process"
        }
        assert all(r["id"] is None for r in refusals)
        with control_socket_hidden(desktop):
            the_cli_works(desktop)
    finally:
        for sock in socks:
            sock.close()


@pytest.mark.timeout(120)
def test_processes_that_take_every_connection_make_room_for_the_cli(
    desktop: RunningDesktop,
) -> None:
    # Five processes of 60 idle connections each: 300, past the desktop's 256.
    holders: list[subprocess.Popen[str]] = []
    try:
        for _ in range(5):
            holder = subprocess.Popen(
                [sys.executable, "-c", HOLDER, str(paths_of(desktop).rpc_file), "60"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            holders.append(holder)
            assert holder.stdout is not None
            assert holder.stdout.readline() == "ready\n"
        # A newcomer is served on rpc.sock itself: the oldest idle connection of a biggest
        # holder made room for it.
        with RpcPeer(paths_of(desktop).rpc_file) as newcomer:
            assert newcomer.call("ping")["pid"] == desktop.process.pid
        with control_socket_hidden(desktop):
            the_cli_works(desktop)
    finally:
        for holder in holders:
            holder.kill()
            holder.communicate(timeout=10)


@pytest.mark.timeout(60)
def test_idle_connections_are_closed_after_the_idle_timeout(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"], rpc_idle_timeout_s=1.0)
    path = paths_of(desktop).rpc_file
    with RpcPeer(path) as idle, RpcPeer(path) as waiting, RpcPeer(path) as subscribed:
        idle.call("ping")
        subscribed.call("subscribe_events")
        asked = time.monotonic()
        # A wait longer than the idle timeout: its connection is not idle while it runs.
        waited = waiting.request("wait_for", reason="app_crashed", timeout_ms=2500)
        assert waited["error"]["data"]["code"] == "E_TIMEOUT", waited
        assert time.monotonic() - asked >= 2.4
        # The idle one was told why, unasked (id null), then closed.
        notice = idle.line()
        assert notice["id"] is None
        assert notice["error"]["data"]["code"] == "E_TIMEOUT"
        assert "rpc_idle_timeout_s" in notice["error"]["message"]
        with pytest.raises(ConnectionError):
            idle.line()
        # A subscriber waits for events: not idle.
        assert subscribed.call("ping")["pid"] == desktop.process.pid
        # The waiting one is idle once its wait ended, and closed a second later.
        ended = time.monotonic()
        assert waiting.line()["error"]["data"]["code"] == "E_TIMEOUT"
        assert 0.8 <= time.monotonic() - ended <= 5
        with pytest.raises(ConnectionError):
            waiting.line()


def test_a_busy_rpc_sock_sends_the_cli_to_the_control_socket(
    desktop: RunningDesktop, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every connection busy: rpc.sock refuses a newcomer unread (E_RATE_LIMITED, id null). A
    # stand-in answers so on rpc.sock; the control socket is the real desktop's.
    assert ErrorCode.E_RATE_LIMITED.jsonrpc_code == rpc_client.RATE_LIMITED
    busy = error_line(None, AotuiError(ErrorCode.E_RATE_LIMITED, "every connection is busy"))
    path = paths_of(desktop).rpc_file
    aside = path.with_name("rpc.sock.aside")
    os.rename(path, aside)
    stop = threading.Event()
    refused: list[int] = []
    try:
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(unix_address(path))
            server.listen(8)
            server.settimeout(0.05)

            def refuse_all() -> None:
                while not stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        peer, _ = server.accept()
                        with peer:
                            peer.sendall(busy)
                            refused.append(1)

            stand_in = threading.Thread(target=refuse_all, daemon=True)
            stand_in.start()
            try:
                where = ["--desktop", desktop.name, "--socket", str(desktop.runtime)]
                assert main(["status", *where]) == 0, capsys.readouterr().err
                assert main(["exec", "-q", ECHO, *where]) == 0, capsys.readouterr().err
            finally:
                stop.set()
                stand_in.join(timeout=5)
        path.unlink()
    finally:
        os.rename(aside, path)
    assert len(refused) == 2


# --- waits ---------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_one_clients_64_waits_leave_room_for_anothers(desktop: RunningDesktop) -> None:
    path = paths_of(desktop).rpc_file
    peers = [RpcPeer(path) for _ in range(8)]
    try:
        for peer in peers:  # 8 connections of one process, 8 waits each: 64
            for number in range(8):
                request = {"jsonrpc": "2.0", "id": number, "method": "wait_for", "params": NEVER}
                peer.send_raw(json.dumps(request).encode() + b"\n")
        # The process's first 8 run; every other is answered at once, naming the budget.
        answers = lines_of(peers, MAX_WAITS - WAITS_PER_CLIENT)
        assert {a["error"]["data"]["budget"] for a in answers} == {"waits_per_client"}  # type: ignore[index]
        assert f"at most {WAITS_PER_CLIENT} per client" in answers[0]["error"]["message"]  # type: ignore[index]
        # Another client (the control socket's) still gets its wait.
        assert desktop.client.wait(quiet_ms=1, timeout_ms=5000)["until"] == "quiet_ms"
        assert cli(desktop, "wait", "--quiet-ms", "1").returncode == 0
    finally:
        for peer in peers:
            peer.close()


@pytest.mark.timeout(60)
def test_waits_spread_over_connections_make_room_for_another_client(
    desktop: RunningDesktop,
) -> None:
    # Eight control socket connections of eight waits each take the desktop's 64.
    context = zmq.Context()
    address = f"ipc://{unix_address(paths_of(desktop).control_file)}"
    socks = []
    try:
        for _ in range(MAX_WAITS // WAITS_PER_CLIENT):
            sock = context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(address)
            for number in range(WAITS_PER_CLIENT):
                sock.send(codec.encode(Request(number, "wait_for", dict(NEVER))))
            socks.append(sock)
        time.sleep(0.5)  # all 64 running
        assert not any(sock.poll(0) for sock in socks)
        # A ninth client gets its wait: one of the biggest holders' waits made room for it.
        assert desktop.client.wait(quiet_ms=1, timeout_ms=5000)["until"] == "quiet_ms"
        poller = zmq.Poller()
        for sock in socks:
            poller.register(sock, zmq.POLLIN)
        assert poller.poll(5000)
        time.sleep(0.2)  # a second one, were there one
        ended = [codec.decode(sock.recv()) for sock in socks if sock.poll(0)]
        assert len(ended) == 1
        assert isinstance(ended[0], ErrorReply), ended
        assert ended[0].code == "E_RATE_LIMITED"
        assert "to make room" in ended[0].message
        assert not isinstance(ended[0], Reply)
    finally:
        for sock in socks:
            sock.close(linger=0)
        context.term()
