"""``aotui snapshot|exec|status`` ask on ``rpc.sock`` and print what the ZeroMQ client printed.

A desktop without ``rpc.sock`` (one older than the JSON-RPC face) is made for real by moving the
socket file aside: the server still listens on it, but the CLI finds no file and falls back to
the control socket. The outputs of both paths are compared, errors and exit codes included.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from aotui.protocol.api import Face
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.interface import rpc_client
from aotui.supervisor.interface.cli import main
from aotui.supervisor.interface.client import Client
from aotui.supervisor.interface.jsonrpc import (
    INVALID_PARAMS,
    METHODS,
    RpcCall,
    RpcFailure,
    error_line,
    parse_line,
)
from aotui.supervisor.paths import DesktopPaths
from tests.conftest import RunningDesktop

Start = Callable[..., RunningDesktop]

OPEN = "<context>open --application app_0</context>"


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``aotui argv``, snapshot ids and times made alike."""
    code = main(argv)
    out, err = capsys.readouterr()
    return code, alike(out), alike(err)


def alike(text: str) -> str:
    """``text`` with the snapshot ids and times that differ between two calls made equal."""
    return re.sub(r'"time": [\d.e+-]+', '"time": 0', re.sub(r"\bT\d+\b", "T#", text))


@contextmanager
def without_rpc_socket(desktop: RunningDesktop) -> Iterator[None]:
    """The desktop as an older one: no ``rpc.sock`` file (its server still listens, unseen)."""
    path = DesktopPaths.for_desktop(desktop.name, str(desktop.runtime)).rpc_file
    aside = path.with_name("rpc.sock.aside")
    os.rename(path, aside)
    try:
        yield
    finally:
        os.rename(aside, path)


def both_paths(
    desktop: RunningDesktop, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """``aotui argv`` on rpc.sock, then on the control socket."""
    where = ["--desktop", desktop.name, "--socket", str(desktop.runtime)]
    over_rpc = run(capsys, [*argv, *where])
    with without_rpc_socket(desktop):
        over_zmq = run(capsys, [*argv, *where])
    return over_rpc, over_zmq


CASES = {
    "snapshot": ["snapshot"],
    "snapshot --json": ["snapshot", "--json", "--include-meta", "--session", "s1"],
    "exec": ["exec", OPEN, "--session", "s1"],
    "exec --json": ["exec", OPEN, "--json"],
    # Its message quotes <context>: the JSON-RPC face escapes structural tags for agents.
    "exec: not a command": ["exec", "garbage"],
    "exec: no such app": ["exec", "<context>open --application app_9</context>"],
    "exec: no such app --json": ["exec", "<context>open --application app_9</context>", "--json"],
    "exec: unknown snapshot": ["exec", OPEN, "--snapshot", "T999999"],
    "snapshot: unknown since": ["snapshot", "--since", "T999999", "--session", "s1"],
    "snapshot: bad session": ["snapshot", "--session", "no spaces please", "--json"],
    # rpc.sock reads lines of at most 1 MiB; the control socket takes it.
    "exec of 1.5 MiB": ["exec", OPEN + " " * (3 << 19), "--session", "s1"],
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_rpc_and_control_socket_print_the_same(
    case: str, start_desktop: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    desktop = start_desktop(["echo"])
    over_rpc, over_zmq = both_paths(desktop, capsys, CASES[case])
    assert over_rpc == over_zmq
    if case.startswith(("exec:", "snapshot:")):
        assert over_rpc[0] not in (0, 69), over_rpc


def test_status_prints_the_same_on_both(
    start_desktop: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    desktop = start_desktop(["echo"])
    (code, text, _), (zmq_code, zmq_text, _) = both_paths(desktop, capsys, ["status"])
    # Uptime, memory and CPU move between two calls; the table's shape and words do not.
    assert (code, re.sub(r"[\d.]+", "N", text)) == (zmq_code, re.sub(r"[\d.]+", "N", zmq_text))
    (_, as_json, _), (_, zmq_json, _) = both_paths(desktop, capsys, ["status", "--json"])
    assert shape(json.loads(as_json)) == shape(json.loads(zmq_json))


def shape(value: object) -> object:
    """``value`` with its numbers replaced by their type: what two status calls share."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value]
    return type(value).__name__ if isinstance(value, int | float) else value


def test_without_a_session_a_pull_outlives_its_call(
    start_desktop: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    # A JSON-RPC connection's own session ends with it, and so would the pull: the CLI's is the
    # control socket's, kept until it expires, so a later exec may name it.
    desktop = start_desktop(["echo"])
    where = ["--desktop", desktop.name, "--socket", str(desktop.runtime)]
    assert main(["snapshot", *where]) == 0
    pulled = re.search(r"\[snapshot (T\d+)\]", capsys.readouterr().err)
    assert pulled is not None
    assert main(["exec", OPEN, "--snapshot", pulled.group(1), *where]) == 0
    assert capsys.readouterr().out == "ok: 1 command(s) ran\n"


def test_the_lease_owner_is_the_session_when_none_is_named(
    start_desktop: Start, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    desktop = start_desktop(["echo"])
    desktop.client.acquire("agent-a")
    assert desktop.client.lease_token is not None
    monkeypatch.delenv("AOTUI_SESSION", raising=False)
    monkeypatch.setenv("AOTUI_LEASE_TOKEN", desktop.client.lease_token)
    (code, out, _), over_zmq = both_paths(desktop, capsys, ["snapshot", "--json", "--include-meta"])
    assert code == 0
    assert json.loads(out)["meta"]["session"] == "~agent-a"
    assert (code, out) == over_zmq[:2]


def test_no_desktop_reads_as_the_zeromq_client_says_it(tmp_path: Path) -> None:
    paths = DesktopPaths.for_desktop("gone", str(tmp_path))
    with pytest.raises(AotuiError) as ours:
        rpc_client.call(paths, "status", {}, timeout_s=5.0)
    with Client("gone", str(tmp_path)) as client, pytest.raises(AotuiError) as theirs:
        client.call("status")
    assert ours.value == theirs.value
    assert ours.value.code is ErrorCode.E_UNAVAILABLE


def test_a_killed_desktop_reads_as_the_zeromq_client_says_it(
    start_desktop: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its socket files and pidfile stay behind; connecting is refused at once.
    desktop = start_desktop(["echo"])
    os.kill(desktop.process.pid, signal.SIGKILL)
    desktop.process.wait(timeout=30)
    over_rpc, over_zmq = both_paths(desktop, capsys, ["status"])
    assert over_rpc == over_zmq
    assert over_rpc[0] == 69
    assert "E_UNAVAILABLE" in over_rpc[2]


def test_a_desktop_older_than_as_control_is_asked_on_the_control_socket(
    start_desktop: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    # Such a desktop refuses the param before running anything (-32602, as parse_line words it):
    # a stand-in listens on rpc.sock and answers so; the control socket is the real desktop's.
    desktop = start_desktop(["echo"])
    paths = DesktopPaths.for_desktop(desktop.name, str(desktop.runtime))
    asked: list[bytes] = []
    with without_rpc_socket(desktop), socket.socket(socket.AF_UNIX) as server:
        server.bind(str(paths.rpc_file))
        server.listen()

        def answer() -> None:
            peer, _ = server.accept()
            with peer, peer.makefile("rb") as lines:
                line = lines.readline()
                asked.append(line)
                call = parse_line(line)
                assert isinstance(call, RpcCall)  # today's desktop takes it; an older one:
                known = ", ".join(
                    p for p in METHODS["snapshot"].offered(Face.JSONRPC) if p != "as_control"
                )
                failure = RpcFailure(
                    call.id,
                    INVALID_PARAMS,
                    f"snapshot has no parameter 'as_control' (it takes: {known})",
                )
                peer.sendall(error_line(failure.id, failure))

        stand_in = threading.Thread(target=answer, daemon=True)
        stand_in.start()
        where = ["--desktop", desktop.name, "--socket", str(desktop.runtime)]
        code, out, err = run(capsys, ["snapshot", "--plain", "--quiet", *where])
        stand_in.join(timeout=10)
        os.unlink(paths.rpc_file)
    assert json.loads(asked[0])["params"] == {"include_meta": False, "as_control": True}
    assert (code, err) == (0, "")
    assert out.startswith("<desktop>")
