"""The supervisor survives its own faults: a pause, a dead zygote, lease tokens, restarts.

Real supervisors, zygotes and workers, stopped and killed for real (SIGSTOP/SIGCONT, SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import ErrorReply, Reply, Request
from aotui.supervisor.interface.client import Client
from aotui.supervisor.paths import unix_address
from aotui.supervisor.server.conn_guard import connection_bound
from aotui.supervisor.server.stall import LoopClock
from tests.conftest import TEST_APPS, RunningDesktop, spare_descriptors, wait_for
from tests.test_supervisor_units import FakeClock

Start = Callable[..., RunningDesktop]


def view_of(markdown: str, app_id: str, name: str = "Echo") -> str:
    block = markdown[markdown.index(f'<application id="{app_id}"') :]
    match = re.search(rf'<view id="(view_\d+)" name="{name}">', block)
    assert match, block
    return match.group(1)


def bump(client: Client, app_id: str, markdown: str | None = None, name: str = "Echo") -> Any:
    view = view_of(markdown or client.snapshot(), app_id, name)
    return client.execute(f'<context app_id="{app_id}" view_id="{view}">execute bump</context>')


def operation(app_id: str, view: str, text: str) -> str:
    return f'<context app_id="{app_id}" view_id="{view}">execute {text}</context>'


def rows(client: Client) -> dict[str, dict[str, Any]]:
    return {row["app"]: row for row in client.status()["apps"]}


def system_logs(client: Client) -> str:
    text = client.snapshot()
    start = text.index('name="System Logs">')
    return text[start : text.index("</view>", start)]


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """SIGSTOP ``pid`` for the block; SIGCONT even when the block fails."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


# --- the loop clock (injected time) ---------------------------------------------------------------


def test_loop_clock_counts_only_time_the_loop_ran() -> None:
    clock = FakeClock()
    loop = LoopClock(tick_s=0.1, tolerance_s=1.0, clock=clock)
    start = loop()
    for _ in range(10):
        clock.advance(0.1)
        assert loop.tick() == 0.0
    clock.advance(0.5)  # jitter: not a stall
    assert loop.tick() == 0.0
    before_pause = clock()
    clock.advance(20.1)  # stopped for 20 s
    assert loop.tick() == pytest.approx(20.0)
    assert loop() - start == pytest.approx(1.6)
    assert loop.lost_since(before_pause) == pytest.approx(20.0)
    assert loop.lost_since(clock()) == 0.0  # a stamp after the stall owes it nothing


# --- item 1: a paused supervisor ------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_a_paused_supervisor_keeps_its_healthy_workers(start_desktop: Start) -> None:
    desktop = start_desktop(["echo", "lister"], heartbeat_s=0.2, heartbeat_timeout_s=2.0)
    client = desktop.client
    client.execute("<context>open --application app_0; open --application app_1</context>")
    text = client.snapshot()
    before = rows(client)
    assert {row["state"] for row in before.values()} == {"running"}
    # A deadline for a loaded machine: CI's unprivileged suite, beside the root one, saw the
    # answer take over 15 s after the resume once (20 s deadline); it must come, not come fast.
    late = desktop.new_client(timeout_s=45)
    answers: list[Any] = []

    def execute_while_paused() -> None:
        try:
            answers.append(bump(late, "app_0", text))
        except Exception as exc:  # reported by the assertion below
            answers.append(exc)

    with stopped(desktop.process.pid):
        sender = threading.Thread(target=execute_while_paused)
        sender.start()
        time.sleep(5.0)  # two and a half heartbeat timeouts
    sender.join(45)
    assert answers == [{"ran": 1, "results": [1]}], system_logs(client)
    time.sleep(1.0)  # five heartbeat rounds after the resume
    after = rows(client)
    for app_id, row in before.items():
        assert after[app_id]["pid"] == row["pid"], after[app_id]
        assert after[app_id]["restarts"] == 0
        assert after[app_id]["last_exit"] is None
        assert psutil.pid_exists(row["pid"])
    logs = system_logs(client)
    assert "stopped answering heartbeats" not in logs
    assert "did not run for" in logs


# --- item 2: a killed zygote ----------------------------------------------------------------------


def zygote_of(desktop: RunningDesktop) -> psutil.Process:
    for child in psutil.Process(desktop.process.pid).children():
        with contextlib.suppress(psutil.Error):
            if "aotui.sandbox.zygote" in " ".join(child.cmdline()):
                return child
    raise AssertionError("no zygote below the supervisor")


def alive(pid: int | None) -> bool:
    try:
        return pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_killed_zygote_is_restarted_and_its_apps_reopened(start_desktop: Start) -> None:
    desktop = start_desktop(["echo", "lister"])
    client = desktop.client
    client.execute("<context>open --application app_0; open --application app_1</context>")
    bump(client, "app_0")
    assert bump(client, "app_0") == {"ran": 1, "results": [2]}
    before = rows(client)
    zygote = zygote_of(desktop)
    zygote.kill()
    zygote.wait(5)

    def back() -> bool:
        now = rows(client)
        for app_id, row in now.items():
            if row["state"] == "running":
                # A running app never shows a dead pid.
                assert alive(row["pid"]), row
                assert row["pid"] != before[app_id]["pid"], row
        return all(row["state"] == "running" for row in now.values())

    wait_for(back, 10, "both apps running again")
    assert zygote_of(desktop).pid != zygote.pid
    after = rows(client)
    for row in after.values():
        assert row["last_exit"] == "launcher exited"
        assert row["restarts"] == 1
    assert bump(client, "app_0") == {"ran": 1, "results": [3]}  # reopened with its state
    logs = system_logs(client)
    assert "The worker launcher (zygote) exited (signal 9)" in logs
    assert "stopped answering heartbeats" not in logs
    # A second kill is survived too (with back-off, and not counted against the apps).
    zygote_of(desktop).kill()
    wait_for(lambda: all(r["restarts"] == 2 for r in rows(client).values()), 10, "restarted")
    wait_for(lambda: all(r["state"] == "running" for r in rows(client).values()), 10, "running")
    assert bump(client, "app_0") == {"ran": 1, "results": [4]}


# --- item 9: the input lease is a token, not a name -----------------------------------------------


def test_the_lease_owner_name_proves_nothing(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    alice = desktop.new_client(owner="A")
    alice.acquire("A")
    assert alice.lease_token
    impostor = desktop.new_client(owner="A")
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("exec", {"owner": "A", "text": "<context>open --application app_0</context>"}),
        ("exec", {"token": "guessed", "text": "<context>open --application app_0</context>"}),
        ("execute", {"owner": "A", "action": "open_application", "app": "app_0"}),
        ("acquire", {"owner": "A"}),
        ("heartbeat", {}),
        ("release", {}),
        ("release", {"token": "guessed"}),
    ]
    for method, params in attempts:
        with pytest.raises(AotuiError) as refused:
            impostor.call(method, **params)  # type: ignore[arg-type]  # params hold no timeout
        assert refused.value.code is ErrorCode.E_LOCKED, (method, params)
    with pytest.raises(AotuiError) as named:  # the lease's calls take no name at all
        impostor.call("heartbeat", owner="A")
    assert named.value.code is ErrorCode.E_INVALID_CMD
    with pytest.raises(AotuiError) as typed:
        impostor.call("exec", owner=7, text="<context>open --application app_0</context>")
    assert typed.value.code is ErrorCode.E_INVALID_CMD
    assert "'owner' of exec must be a string" in typed.value.message
    with pytest.raises(AotuiError) as typed:
        alice.call(
            "exec",
            token=alice.lease_token,
            snapshot_id=17,
            text="<context>open --application app_0</context>",
        )
    assert typed.value.code is ErrorCode.E_INVALID_CMD
    assert desktop.client.status()["lease_owner"] == "A"
    alice.execute("<context>open --application app_0</context>")  # the holder, by its token
    alice.release()
    assert desktop.client.status()["lease_owner"] is None


def test_the_client_keeps_its_lease_across_a_supervisor_pause(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"], lease_s=3.0)
    alice = desktop.new_client(owner="alice", timeout_s=20)
    alice.acquire("alice")  # heartbeats every second
    with stopped(desktop.process.pid):
        time.sleep(6.0)  # twice the lease; the heartbeats in the meantime time out
    time.sleep(2.5)  # two heartbeats after the resume
    assert alice._heartbeat is not None
    assert alice._heartbeat.is_alive()
    assert alice.lease_error is None
    bob = desktop.new_client(owner="bob")
    with pytest.raises(AotuiError) as locked:
        bob.acquire("bob")
    assert locked.value.code is ErrorCode.E_LOCKED
    alice.execute("<context>open --application app_0</context>")
    time.sleep(4.0)  # longer than the lease: only the heartbeat keeps it
    assert desktop.client.status()["lease_owner"] == "alice"


def test_a_lost_lease_is_taken_again_or_reported(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"], lease_s=1.5)
    alice = desktop.new_client(owner="alice", timeout_s=20)
    bob = desktop.new_client(owner="bob")

    def heartbeat_until_it_stops(seconds: float) -> threading.Thread:
        alice._heartbeat_stop.clear()
        beat = threading.Thread(target=alice._beat, args=(0.2,))
        beat.start()
        beat.join(seconds)
        alice._heartbeat_stop.set()
        beat.join(5)
        return beat

    alice.acquire("alice", heartbeat=False)
    first = alice.lease_token
    time.sleep(2.0)  # expired: nobody holds it
    assert desktop.client.status()["lease_owner"] is None
    heartbeat_until_it_stops(1.0)  # finds it lost and takes it again, with a new token
    assert alice.lease_token != first
    assert alice.lease_error is None
    assert desktop.client.status()["lease_owner"] == "alice"
    time.sleep(2.0)  # expired again, and this time bob takes it
    bob.acquire("bob")
    beat = heartbeat_until_it_stops(10.0)
    assert not beat.is_alive()
    assert alice.lease_error is not None
    with pytest.raises(AotuiError) as lost:
        alice.execute("<context>open --application app_0</context>")
    assert lost.value.code is ErrorCode.E_LOCKED
    assert "lost the input lease" in lost.value.message
    assert "bob" in lost.value.message
    bob.release()
    alice.acquire("alice")  # acquiring again clears it
    alice.execute("<context>open --application app_0</context>")


# --- item 6: dispatch around restarts -------------------------------------------------------------


def in_threads(calls: list[Callable[[], Any]], stagger_s: float = 0.1) -> list[Any]:
    """Run each call on its own thread, started ``stagger_s`` apart; results or exceptions."""
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except Exception as exc:
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
        time.sleep(stagger_s)
    for thread in threads:
        thread.join(30)
    return results


def test_commands_queued_behind_a_dying_operation_wait_for_the_restart(
    start_desktop: Start,
) -> None:
    # Four commands in flight at once: over the default limit of two (seed 004).
    desktop = start_desktop(["faulty"], operation_timeout_ms=4000, max_in_flight=4)
    desktop.client.execute("<context>open --application app_0</context>")
    view = view_of(desktop.client.snapshot(), "app_0", "Faulty")
    clients = [desktop.new_client(timeout_s=20) for _ in range(4)]
    calls: list[Callable[[], Any]] = [
        lambda: clients[0].execute(operation("app_0", view, "die_after --seconds 0.5"))
    ]
    calls += [
        lambda c=c: c.execute(operation("app_0", view, "bump"))  # type: ignore[misc]
        for c in clients[1:]
    ]
    results = in_threads(calls, stagger_s=0.05)
    assert isinstance(results[0], AotuiError)
    assert results[0].code is ErrorCode.E_APP_ERROR, results[0]
    assert "crashed mid-operation" in results[0].message
    # Queued behind it, the bumps ran once the app was back (from its stored state).
    assert sorted(r["results"][0] for r in results[1:]) == [1, 2, 3], results
    row = rows(desktop.client)["app_0"]
    assert row["state"] == "running"
    assert row["restarts"] == 1


def test_queued_commands_are_held_to_their_deadline(start_desktop: Start) -> None:
    desktop = start_desktop(["slow"], operation_timeout_ms=1000, max_in_flight=4)
    desktop.client.execute("<context>open --application app_0</context>")
    view = view_of(desktop.client.snapshot(), "app_0", "Slow")
    clients = [desktop.new_client(timeout_s=20) for _ in range(4)]

    def timed(client: Client) -> tuple[float, Any]:
        started = time.monotonic()
        try:
            answer: Any = client.execute(operation("app_0", view, "hang --seconds 0.7"))
        except AotuiError as exc:
            answer = exc
        return time.monotonic() - started, answer

    results = in_threads([lambda c=c: timed(c) for c in clients], stagger_s=0.02)  # type: ignore[misc]
    assert results[0][1] == {"ran": 1, "results": [None]}
    for took, _answer in results:
        assert took < 1.0 + 0.6, results  # each within its 1 s deadline (and a kill's grace)
    for _took, answer in results[1:]:
        assert isinstance(answer, AotuiError), results
        assert answer.code is ErrorCode.E_TIMEOUT
        assert answer.recoverable


def test_a_command_for_an_app_that_cannot_come_back_in_time_is_told_to_retry(
    start_desktop: Start,
) -> None:
    desktop = start_desktop(["faulty"], operation_timeout_ms=1000, start_timeout_ms=3000)
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    view = view_of(client.snapshot(), "app_0", "Faulty")
    client.execute(operation("app_0", view, "poison"))  # stored; hangs the next start
    results = in_threads(
        [
            lambda: client.execute(operation("app_0", view, "die_after --seconds 0")),
            lambda: desktop.new_client().execute(operation("app_0", view, "bump")),
        ],
        stagger_s=0.3,
    )
    assert isinstance(results[1], AotuiError), results
    assert results[1].code is ErrorCode.E_TIMEOUT, results[1]
    assert results[1].recoverable
    assert "did not come back" in results[1].message
    assert "Retry" in results[1].message


# --- items 7 and 8: start failures end in `failed`, with their reason and a way back -----------


def test_a_log_file_that_cannot_be_opened_fails_the_start_with_its_reason(
    start_desktop: Start, private_home: Path
) -> None:
    desktop = start_desktop(["echo"])
    client = desktop.client
    log = private_home / "logs" / desktop.name / "app_0.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        log.unlink()
    log.mkdir()  # open(…, "ab") fails: IsADirectoryError
    with pytest.raises(AotuiError) as refused:
        client.execute("<context>open --application app_0</context>")
    assert refused.value.code is ErrorCode.E_IO
    assert "app_0.log" in refused.value.message
    assert "open it to retry" in refused.value.message
    row = rows(client)["app_0"]
    assert row["state"] == "failed"
    assert "Is a directory" in row["last_exit"]
    assert "Echo could not start (start failed: [Errno 21] Is a directory" in system_logs(client)
    client.execute("<context>close --application app_0</context>")  # answers; stays failed
    assert rows(client)["app_0"]["state"] == "failed"
    log.rmdir()
    client.execute("<context>open --application app_0</context>")
    assert rows(client)["app_0"]["state"] == "running"


def test_a_saved_state_that_hangs_render_has_a_way_back(start_desktop: Start) -> None:
    desktop = start_desktop(["faulty"], start_timeout_ms=1500)
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    view = view_of(client.snapshot(), "app_0", "Faulty")
    client.execute(operation("app_0", view, "bump"))
    client.execute(operation("app_0", view, "poison"))
    client.execute("<context>close --application app_0</context>")
    for _attempt in range(2):  # the same way every time, and never stuck in "starting"
        with pytest.raises(AotuiError) as refused:
            client.execute("<context>open --application app_0</context>")
        assert refused.value.code is ErrorCode.E_TIMEOUT
        assert "did not show its views within 1500 ms" in refused.value.message
        assert "open --application app_0 --fresh" in refused.value.message
        row = rows(client)["app_0"]
        assert row["state"] == "failed"
        assert row["last_exit"] == "start timeout (1500 ms)"
    assert "Faulty could not start (start timeout (1500 ms))" in system_logs(client)
    client.execute("<context>open --application app_0 --fresh</context>")
    assert rows(client)["app_0"]["state"] == "running"
    view = view_of(client.snapshot(), "app_0", "Faulty")
    assert client.execute(operation("app_0", view, "bump")) == {"ran": 1, "results": [1]}


def test_a_crash_in_a_private_directory_names_the_apps_real_file(
    start_desktop: Start, tmp_path: Path
) -> None:
    # As root, an app in a 0700 directory is reached through /proc/self/fd/N; its traceback
    # still names the file where the user keeps it.
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    app = private / "brokenimport"
    app.mkdir()
    for name in ("aoapp.json", "app.py"):
        (app / name).write_text((TEST_APPS / "brokenimport" / name).read_text())
    desktop = start_desktop([str(app)], name="private-crash")
    with pytest.raises(AotuiError):
        desktop.client.execute("<context>open --application app_0</context>")
    logs = system_logs(desktop.client)
    assert f'File "{app}/app.py", line 7' in logs
    assert "/proc/self/fd/" not in logs


def test_a_crash_report_read_after_the_exit_is_heard_is_still_logged(start_desktop: Start) -> None:
    """The worker's exit is heard while its report is unread (a burst of log lines before it holds
    its channel for the rest of the second): the channel is read to the end before it is closed."""
    desktop = start_desktop(["lastwords"])
    client = desktop.client
    with pytest.raises(AotuiError) as refused:
        client.execute("<context>open --application app_0</context>")
    assert refused.value.code is ErrorCode.E_APP_ERROR
    assert rows(client)["app_0"]["state"] == "failed"
    logs = system_logs(client)
    assert "LastWords: ValueError: the settings are corrupt" in logs
    assert "broke the channel protocol" not in logs  # its start error reply, read late, is not


def test_a_crash_at_import_is_reported_and_stays_failed(start_desktop: Start) -> None:
    desktop = start_desktop(["brokenimport"], name="crashy-import")
    client = desktop.client
    with pytest.raises(AotuiError) as refused:
        client.execute("<context>open --application app_0</context>")
    assert refused.value.code is ErrorCode.E_APP_ERROR
    row = rows(client)["app_0"]
    assert row["state"] == "failed"
    # Its own report, or (when its exit is heard first) how it ended: never nothing.
    reported = row["last_exit"]
    assert reported == "exit 1" or reported.startswith("start failed: JSONDecodeError: Expecting")
    logs = system_logs(client)
    assert "BrokenImport: json.decoder.JSONDecodeError: Expecting property name" in logs
    assert "brokenimport/app.py" in logs  # where the app raised it
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "aotui.supervisor",
            "logs",
            "app_0",
            "--desktop",
            desktop.name,
            "--socket",
            str(desktop.runtime),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert printed.returncode == 0, printed.stderr
    assert "Traceback (most recent call last)" in printed.stdout
    assert "json.decoder.JSONDecodeError" in printed.stdout
    # `failed` survives down/up, with its reason.
    client.shutdown()
    desktop.process.wait(15)
    again = start_desktop(["brokenimport"], name="crashy-import")
    row = rows(again.client)["app_0"]
    assert row["state"] == "failed"
    assert row["last_exit"] == reported


# --- item 3: a flood of connections -------------------------------------------------------------


def reads_eof(peer: socket.socket) -> bool:
    """Whether the supervisor ended this raw connection (after its greeting, if any)."""
    try:
        while True:
            if not peer.recv(4096):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_a_connection_flood_is_refused_and_the_supervisor_stays_up(start_desktop: Start) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Started with a user's default soft limit, which the supervisor lifts for itself.
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(600, hard), hard))
    try:
        desktop = start_desktop(["echo"])
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    worker = rows(client)["app_0"]["pid"]
    address = unix_address(client.paths.control_file)
    # The flood goes 476 past the bound the supervisor's limit gives, as far as this process's
    # descriptors allow (a Debian login's hard limit, 524,288, allows it; a soft 1,024 did not).
    bound = connection_bound(psutil.Process(desktop.process.pid).rlimit(psutil.RLIMIT_NOFILE)[0])
    size = min(bound + 476, spare_descriptors())
    if size - bound < 64:
        pytest.skip(f"{size} spare descriptors here (limit {soft}), too few to flood {bound} + 64")
    flood: list[socket.socket] = []
    try:
        for _ in range(size):  # never a ZeroMQ handshake
            peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            flood.append(peer)
            peer.connect(address)
            peer.setblocking(False)
        refused = wait_for(
            lambda: sum(reads_eof(peer) for peer in flood) >= size - bound or None,
            30,
            "the connections beyond the bound to be refused",
        )
        assert refused
        assert desktop.process.poll() is None
    finally:
        for peer in flood:
            peer.close()
    assert client.ping()["pid"] == desktop.process.pid
    assert rows(client)["app_0"]["pid"] == worker  # the workers never noticed
    assert bump(client, "app_0") == {"ran": 1, "results": [1]}
    wait_for(lambda: "client connection(s) beyond the bound" in system_logs(client), 15, "a log")


# --- item 4 and 11: a client that never reads, malformed multipart messages -------------------


def _burst_and_pings(client: Client, other: Client) -> tuple[list[float], int]:
    """Pings from ``other`` while a client that never reads sends 10,000 snapshot requests:
    their waits, sorted, and the supervisor's RSS at the end of the burst."""
    context = zmq.Context()
    flood = context.socket(zmq.DEALER)
    flood.setsockopt(zmq.LINGER, 0)
    flood.setsockopt(zmq.SNDHWM, 0)
    flood.setsockopt(zmq.RCVHWM, 1)  # and never reads
    flood.connect(client.paths.control)
    waits: list[float] = []

    def pings() -> None:
        for _ in range(50):
            started = time.monotonic()
            other.ping(timeout_s=5)
            waits.append(time.monotonic() - started)
            time.sleep(0.02)

    pinger = threading.Thread(target=pings)
    try:
        pinger.start()  # pings from the first request of the burst on
        for request_id in range(10_000):
            flood.send(codec.encode(Request(request_id + 1, "snapshot", {})))
        pinger.join(timeout=30)
        assert len(waits) == 50, waits
        peak = int(client.status()["rss_bytes"])
    finally:
        pinger.join(timeout=30)
        flood.close(linger=0)
        context.term()
    return sorted(waits), peak


def test_a_client_that_never_reads_cannot_starve_the_others(start_desktop: Start) -> None:
    desktop = start_desktop(["lister", "echo", "crashy"])
    client = desktop.client
    client.execute(
        "<context>open --application app_0; open --application app_1; "
        "open --application app_2</context>"
    )
    for _ in range(20):  # warm up: the allocator's arenas for ordinary work
        client.snapshot()
    before = client.status()["rss_bytes"]
    other = desktop.new_client(timeout_s=5)
    other.ping()
    # The worst of 50 pings while 10,000 requests wait: 0.9 s when receiving the burst kept the
    # loop from serving the ping received among it, 0.01-0.15 s since (2 busy cores). A machine
    # loaded far past its cores can stall one ping on its own, so a second burst is measured
    # before calling it starvation: the fault made every burst's worst ping wait.
    worst, peak = [], 0
    for _ in range(2):
        ping_waits, peak = _burst_and_pings(client, other)
        worst.append(ping_waits[-1])
        if worst[-1] < 0.45:
            break
    assert min(worst) < 0.45, worst
    time.sleep(1.0)
    after = client.status()["rss_bytes"]
    # Bounded while it lasted and given back after: not 100 MB kept for replies nobody reads.
    assert peak - before < 8 << 20, (before, peak, after)
    assert after - before < 8 << 20, (before, peak, after)


def test_a_multipart_request_is_answered_not_ignored(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    context = zmq.Context()
    raw = context.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(desktop.client.paths.control)
    try:
        raw.send_multipart([codec.encode(Request(1, "ping", {})), b"second", b"third"])
        assert raw.poll(5000), "no reply to a three-part message"
        reply = codec.decode(raw.recv())
        assert isinstance(reply, ErrorReply)
        assert reply.code == ErrorCode.E_INVALID_CMD.value
        assert "one frame" in reply.message
    finally:
        raw.close(linger=0)
        context.term()


def test_an_oversized_request_is_answered_naming_the_limit(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    context = zmq.Context()
    raw = context.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(desktop.client.paths.control)
    try:
        big = codec.encode(Request(1, "ping", {})) + b"\0" * (17 << 20)  # 17 MiB
        raw.send(big)
        del big
        assert raw.poll(10_000), "no reply to a 17 MiB frame"
        reply = codec.decode(raw.recv())
        assert isinstance(reply, ErrorReply)
        assert reply.code == ErrorCode.E_INVALID_CMD.value
        assert "at most 4 MiB" in reply.message
        # the connection still serves what fits
        raw.send(codec.encode(Request(2, "ping", {})))
        assert raw.poll(5000)
        pong = codec.decode(raw.recv())
        assert isinstance(pong, Reply)
        assert pong.request_id == 2
    finally:
        raw.close(linger=0)
        context.term()
    assert desktop.process.poll() is None
