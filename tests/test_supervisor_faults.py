"""The supervisor survives its own faults: a pause, a dead zygote, lease tokens, restarts.

Real supervisors, zygotes and workers, stopped and killed for real (SIGSTOP/SIGCONT, SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.client import Client
from aotui.supervisor.stall import LoopClock
from tests.conftest import RunningDesktop, wait_for
from tests.test_supervisor_units import FakeClock

Start = Callable[..., RunningDesktop]


def echo_view(markdown: str, app_id: str) -> str:
    block = markdown[markdown.index(f'<application id="{app_id}"') :]
    match = re.search(r'<view id="(view_\d+)" name="Echo">', block)
    assert match, block
    return match.group(1)


def bump(client: Client, app_id: str, markdown: str | None = None) -> Any:
    view = echo_view(markdown or client.snapshot(), app_id)
    return client.execute(f'<context app_id="{app_id}" view_id="{view}">execute bump</context>')


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


def test_a_paused_supervisor_keeps_its_healthy_workers(start_desktop: Start) -> None:
    desktop = start_desktop(["echo", "lister"], heartbeat_s=0.2, heartbeat_timeout_s=2.0)
    client = desktop.client
    client.execute("<context>open --application app_0; open --application app_1</context>")
    text = client.snapshot()
    before = rows(client)
    assert {row["state"] for row in before.values()} == {"running"}
    late = desktop.new_client(timeout_s=20)
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
    sender.join(15)
    assert answers == [{"ran": 1, "results": [1]}]
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
    for method, params in (
        ("execute", {"owner": "A", "text": "<context>open --application app_0</context>"}),
        ("execute", {"token": "guessed", "text": "<context>open --application app_0</context>"}),
        ("acquire", {"owner": "A"}),
        ("heartbeat", {"owner": "A"}),
        ("release", {"owner": "A"}),
        ("release", {"token": "guessed"}),
    ):
        with pytest.raises(AotuiError) as refused:
            impostor.call(method, **params)
        assert refused.value.code is ErrorCode.E_LOCKED, (method, params)
    with pytest.raises(AotuiError) as typed:
        impostor.call("execute", owner=7, text="<context>open --application app_0</context>")
    assert typed.value.code is ErrorCode.E_INVALID_CMD
    assert "'owner' must be a string" in typed.value.message
    with pytest.raises(AotuiError) as typed:
        alice.call(
            "execute",
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
