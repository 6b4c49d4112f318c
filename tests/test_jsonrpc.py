"""The JSON-RPC 2.0 socket (CONTRACT §9): framing, methods, errors, sessions, bounds, socat."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from aotui.protocol.api import ExecParams
from aotui.protocol.errors import ErrorCode
from aotui.supervisor.interface.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RpcCall,
    RpcFailure,
    parse_line,
)
from aotui.supervisor.interface.rpc_server import RpcLimits
from aotui.supervisor.paths import unix_address
from tests.conftest import RunningDesktop, wait_for
from tests.rpc_peer import RpcPeer

Start = Callable[..., RunningDesktop]

ECHO = '<context app_id="app_0" view_id="view_0">{}</context>'
LISTER = '<context app_id="app_1" view_id="view_0">{}</context>'


def rpc_path(desktop: RunningDesktop) -> Path:
    return desktop.runtime / desktop.name / "rpc.sock"


@pytest.fixture
def desktop(start_desktop: Start) -> RunningDesktop:
    """A desktop with the echo and lister apps open."""
    running = start_desktop(["echo", "lister"])
    running.client.execute(
        "<context>open --application app_0</context><context>open --application app_1</context>"
    )
    return running


@pytest.fixture
def peer(desktop: RunningDesktop) -> Iterator[RpcPeer]:
    with RpcPeer(rpc_path(desktop)) as connected:
        yield connected


# --- framing (no desktop) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"{not json", PARSE_ERROR),
        (b"\xff\xfe", PARSE_ERROR),
        (b"[" + b",".join([b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'] * 33) + b"]", -32600),
        (b"[]", INVALID_REQUEST),
        (b"42", INVALID_REQUEST),
        (b'{"id": 1, "method": "ping"}', INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": 1, "method": 7}', INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "x": 1}', INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "launch"}', METHOD_NOT_FOUND),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "exec", "params": ["x"]}', INVALID_PARAMS),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "exec", "params": {}}', INVALID_PARAMS),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "exec", "params": {"text": 1}}', INVALID_PARAMS),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"a": 1}}', INVALID_PARAMS),
        (b'{"jsonrpc":"2.0","id":1,"method":"wait_for","params":{"quiet_ms":1.5}}', INVALID_PARAMS),
    ],
)
def test_what_is_not_a_call_gets_its_standard_code(line: bytes, code: int) -> None:
    parsed = parse_line(line)
    assert isinstance(parsed, RpcFailure)
    assert parsed.code == code, parsed.message


def test_a_call_and_a_notification() -> None:
    call = parse_line(b'{"jsonrpc": "2.0", "id": "a", "method": "exec", "params": {"text": "x"}}')
    assert call == RpcCall("a", "exec", {"text": "x"}, False, ExecParams(text="x"))
    note = parse_line(b'{"jsonrpc": "2.0", "method": "ping"}')
    assert isinstance(note, RpcCall)
    assert note.notification


# --- methods on a real desktop ------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_methods(desktop: RunningDesktop, peer: RpcPeer) -> None:
    assert peer.call("ping")["pid"] == desktop.process.pid
    capabilities = peer.call("get_capabilities")
    assert set(capabilities["methods"]) >= {
        "snapshot", "exec", "execute", "acquire", "release", "heartbeat", "status",
        "get_capabilities", "ping", "wait_for", "subscribe_events",
    }  # fmt: skip
    assert capabilities["formats"] == ["markdown", "json", "text"]
    assert capabilities["limits"]["in_flight"] > 0

    pulled = peer.call("snapshot", include_meta=True)
    assert pulled["markdown"].startswith("<desktop>")
    assert pulled["meta"]["session"].startswith("#rpc-")
    assert {app["app"]: app["state"] for app in pulled["meta"]["apps"]} == {
        "app_0": "running",
        "app_1": "running",
    }
    structured = peer.call("snapshot", format="json")
    echo = structured["apps"][0]
    assert (echo["app"], echo["name"]) == ("app_0", "Echo")
    assert [op["id"] for op in echo["views"][0]["operations"]] == ["noop", "bump"]
    lister = structured["apps"][1]["views"][0]
    assert lister["refs"]["items[0]"] == {"type": "item", "value": {"id": "k0"}}
    assert [v["name"] for v in structured["system_views"]][:2] == [
        "System Instructions",
        "Applications",
    ]

    assert peer.call("exec", text=ECHO.format("execute bump"))["results"] == [1]
    command = {"app": "app_0", "view": "view_0", "operation": "bump"}
    assert peer.call("execute", **command)["results"] == [2]
    assert peer.call("status")["apps"][0]["state"] == "running"

    bad_format = peer.request("snapshot", format="html")["error"]
    assert bad_format["code"] == INVALID_PARAMS


@pytest.mark.timeout(60)
def test_errors_carry_the_contract_codes(peer: RpcPeer) -> None:
    cases = [
        ("exec", {"text": "<context>launch --application app_0</context>"}, "E_INVALID_CMD"),
        ("exec", {"text": "<context>open --application app_9</context>"}, "E_NOT_FOUND"),
        ("exec", {"text": ECHO.format("execute bump"), "snapshot_id": "T999999"}, "E_STALE_STATE"),
        ("execute", {"app": "app_0", "view": "view_0", "operation": "nope"}, "E_NOT_FOUND"),
        ("execute", {"app": "app_0", "operation": "bump"}, "E_INVALID_CMD"),
    ]
    for method, params, name in cases:
        error = peer.request(method, **params)["error"]
        code = ErrorCode[name]
        assert error["code"] == code.jsonrpc_code, (method, params, error)
        assert error["data"]["code"] == name
        assert error["data"]["recoverable"] is code.recoverable
        assert error["message"]


@pytest.mark.timeout(60)
def test_each_connection_is_a_session(desktop: RunningDesktop, peer: RpcPeer) -> None:
    """The reader saw items[1] = k1; another connection removed k0 and pulled."""
    peer.call("snapshot")
    with RpcPeer(rpc_path(desktop)) as other:
        other.call("snapshot")
        other.call("exec", text=LISTER.format("execute remove_first"))
        assert "[Item k2](item:items[1])" in other.call("snapshot")["markdown"]
        picked = peer.call("exec", text=LISTER.format("execute pick --item items[1]"))
        assert picked["results"][0]["key"] == "k1"
        # A named session is shared across connections; it resolves against its own pull.
        other.call("snapshot", session="shared")
        named = peer.call(
            "exec", text=LISTER.format("execute pick --item items[1]"), session="shared"
        )
        assert named["results"][0]["key"] == "k2"


@pytest.mark.timeout(60)
def test_the_lease_belongs_to_the_connection(desktop: RunningDesktop, peer: RpcPeer) -> None:
    granted = peer.call("acquire", owner="rpc-agent")
    assert granted["owner"] == "rpc-agent"
    assert peer.call("heartbeat")["lease_s"] > 0
    with RpcPeer(rpc_path(desktop)) as other:
        locked = other.request("exec", text=ECHO.format("execute bump"))["error"]
        assert locked["data"]["code"] == "E_LOCKED"
        assert locked["code"] == -32013
        assert peer.call("exec", text=ECHO.format("execute bump"))["ran"] == 1
        peer.close()  # a closed connection gives its lease up
        wait_for(lambda: desktop.client.status()["lease_owner"] is None, 10, "the lease freed")
        assert other.call("exec", text=ECHO.format("execute bump"))["ran"] == 1


@pytest.mark.timeout(60)
def test_events_arrive_on_the_same_connection(desktop: RunningDesktop, peer: RpcPeer) -> None:
    assert peer.call("subscribe_events", reasons=["dom_mutation"]) == {
        "subscribed": ["dom_mutation"]
    }
    desktop.client.execute(ECHO.format("execute bump"))
    event = peer.line()
    assert event["method"] == "event"
    # A signal carries its latest reason and every reason of its burst (an app_opened may share it).
    assert "dom_mutation" in [event["params"]["reason"], *event["params"]["reasons"]]
    assert event["params"]["desktop_id"] == desktop.name
    assert "id" not in event
    unknown = peer.request("subscribe_events", reasons=["everything"])["error"]
    assert unknown["code"] == INVALID_PARAMS


@pytest.mark.timeout(60)
def test_a_notification_gets_no_answer(peer: RpcPeer) -> None:
    peer.send_raw(b'{"jsonrpc": "2.0", "method": "ping"}\n')
    peer.send_raw(b'{"jsonrpc": "2.0", "method": "nope"}\n')
    assert peer.request("ping")["id"] == 1  # the next line is this answer, nothing before it


@pytest.mark.timeout(60)
def test_a_peer_that_closes_its_sending_side_still_gets_its_answers(peer: RpcPeer) -> None:
    """As `echo REQUEST | socat - UNIX-CONNECT:…` does: the answer came, or was cancelled."""
    peer.send_raw(
        b'{"jsonrpc": "2.0", "id": 7, "method": "wait_for", "params": {"quiet_ms": 300}}\n'
    )
    peer.sock.shutdown(socket.SHUT_WR)
    answer = peer.line()
    assert answer["id"] == 7
    assert answer["result"]["until"] == "quiet_ms"
    with pytest.raises(ConnectionError):
        peer.line()  # then the desktop closes the connection


# --- hostile peers ------------------------------------------------------------------------------


def _rss(desktop: RunningDesktop) -> int:
    return psutil.Process(desktop.process.pid).memory_info().rss


@pytest.mark.timeout(90)
def test_garbage_leaves_the_desktop_up(desktop: RunningDesktop) -> None:
    path = rpc_path(desktop)
    with RpcPeer(path) as peer:
        peer.send_raw(b"\x00\xff garbage\n")
        assert peer.line()["error"]["code"] == PARSE_ERROR
        peer.send_raw(b"\n\n   \n")  # blank lines are skipped
        peer.send_raw(b'{"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}\n')
        assert peer.line()["error"]["code"] == INVALID_REQUEST
        peer.send_raw(b'{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": ' + b"[" * 100_000)
        peer.send_raw(b"\n")
        assert peer.line()["error"]["code"] == PARSE_ERROR  # deep nesting is a parse error
    with RpcPeer(path) as peer:
        with contextlib.suppress(BrokenPipeError):  # it stops reading past the limit
            peer.send_raw(b"x" * (2 << 20))  # longer than a line may be, without a newline
        assert peer.line()["error"]["code"] == PARSE_ERROR
        with pytest.raises(ConnectionError):
            peer.line()  # then the connection is closed
    with RpcPeer(path) as peer:
        assert peer.call("ping")["pid"] == desktop.process.pid


@pytest.mark.timeout(90)
def test_a_peer_that_sends_faster_than_it_reads_is_bounded(desktop: RunningDesktop) -> None:
    before = _rss(desktop)
    flood = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    flood.connect(unix_address(rpc_path(desktop)))
    flood.setblocking(False)
    request = b'{"jsonrpc":"2.0","id":1,"method":"snapshot","params":{"format":"json"}}\n'
    sent = 0
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # until the desktop stops reading us
        try:
            sent += flood.send(request * 64)
        except BlockingIOError:
            time.sleep(0.05)
            try:
                sent += flood.send(request)
            except BlockingIOError:
                break
    assert sent < 64 << 20, "the desktop kept reading a peer that never reads its answers"
    with RpcPeer(rpc_path(desktop)) as other:  # everyone else is still served
        assert other.call("ping")["pid"] == desktop.process.pid
    assert _rss(desktop) - before < 64 << 20
    # A peer that leaves its answers unread past the write timeout is disconnected: what it
    # reads then ends (EOF) before the answers to everything it sent.
    time.sleep(RpcLimits().write_timeout_s + 1)
    flood.setblocking(True)
    flood.settimeout(30)
    answers = 0
    with contextlib.suppress(ConnectionResetError):  # dropped with our requests unread
        while chunk := flood.recv(1 << 20):
            answers += chunk.count(b"\n")
    flood.close()
    assert answers < sent // len(request)


@pytest.mark.timeout(90)
def test_a_process_past_its_connections_is_refused(desktop: RunningDesktop) -> None:
    # One process holds at most per_process connections (tests/test_rpc_budgets.py: the rest).
    budget = RpcLimits().per_process
    fds_before = psutil.Process(desktop.process.pid).num_fds()
    peers = [RpcPeer(rpc_path(desktop)) for _ in range(budget)]
    try:
        for peer in peers:
            peer.send_raw(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n')
        for peer in peers:
            assert peer.line()["result"]["pid"] == desktop.process.pid
        more = [RpcPeer(rpc_path(desktop)) for _ in range(4)]
        peers += more
        # Past its budget a new one is told why, unasked, and closed.
        refused = [peer.line()["error"] for peer in more]
        assert {error["data"]["code"] for error in refused} == {"E_RATE_LIMITED"}
        assert f"at most {budget} per process" in refused[0]["message"]
    finally:
        for peer in peers:
            peer.close()
    wait_for(
        lambda: psutil.Process(desktop.process.pid).num_fds() <= fds_before + 2,
        15,
        "the connections' descriptors to be closed",
    )
    assert desktop.client.ping()["pid"] == desktop.process.pid


# --- socat, and the socket's life --------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.skipif(shutil.which("socat") is None, reason="socat is not installed")
def test_socat_speaks_to_it(desktop: RunningDesktop) -> None:
    lines = (
        '{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n'
        '{"jsonrpc": "2.0", "id": 2, "method": "exec", "params": {"text": '
        + json.dumps(ECHO.format("execute bump"))
        + "}}\n"
    )
    result = subprocess.run(
        ["socat", "-t", "5", "-", f"UNIX-CONNECT:{rpc_path(desktop)}"],
        input=lines,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # Requests of one connection run concurrently: answers come in any order, matched by id.
    answers = sorted(
        (json.loads(line) for line in result.stdout.splitlines()), key=lambda a: a["id"]
    )
    assert [a["id"] for a in answers] == [1, 2], answers
    assert answers[1]["result"] == {"ran": 1, "results": [1]}


@pytest.mark.timeout(60)
def test_the_socket_is_private_and_removed_at_exit(desktop: RunningDesktop) -> None:
    path = rpc_path(desktop)
    info = path.lstat()
    assert info.st_uid == os.getuid()
    assert info.st_mode & 0o077 == 0
    desktop.client.shutdown()
    desktop.process.wait(timeout=30)
    assert not path.exists()
