"""Runaway apps end to end: memory, CPU, crash loops, silence — killed, reported, restarted."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from tests.conftest import RunningDesktop, wait_for

Start = Callable[..., RunningDesktop]


def row(desktop: RunningDesktop, app: str = "app_0") -> dict[str, object]:
    return next(r for r in desktop.client.status()["apps"] if r["app"] == app)


def test_runaway_memory_is_killed_and_restarted(start_desktop: Start) -> None:
    desktop = start_desktop(["hog"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    first = row(desktop)["pid"]
    began = time.monotonic()
    with pytest.raises(AotuiError) as killed:
        client.execute(
            '<context app_id="app_0" view_id="view_0">'
            "execute eat --mb_per_step 8 --steps 200</context>"
        )
    assert time.monotonic() - began < 5
    assert killed.value.code is ErrorCode.E_APP_ERROR
    assert "memory limit" in killed.value.message
    wait_for(lambda: row(desktop)["state"] == "running" and row(desktop)["pid"] != first, 10)
    assert row(desktop)["last_exit"] == "memory limit"
    assert row(desktop)["restarts"] == 1
    assert "Hog over its memory limit" in client.snapshot()


def test_cpu_spin_is_killed(start_desktop: Start) -> None:
    desktop = start_desktop(["spinner"], cpu_window_s=0.3, cpu_strikes=2)
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    client.execute('<context app_id="app_0" view_id="view_0">execute spin</context>')
    # Judged by the CPU it uses, so a machine loaded past its cores (CI's steps run beside each
    # other and a soak) gives it its strikes later: the wait is long, the claim the same.
    wait_for(lambda: row(desktop)["last_exit"] == "cpu limit", 40, "the spinner to be killed")
    assert "Spinner over its cpu limit" in client.snapshot()


def test_crash_loop_becomes_failed_and_open_clears_it(start_desktop: Start) -> None:
    desktop = start_desktop(["crashloop"], max_restarts=2, restart_backoff_s=0.01)
    client = desktop.client
    with pytest.raises(AotuiError) as crashed:
        client.execute("<context>open --application app_0</context>")
    assert crashed.value.code is ErrorCode.E_APP_ERROR
    assert row(desktop)["state"] == "failed"  # every start failure ends failed, with its reason
    assert row(desktop)["last_exit"] == "exit 5"


def test_restart_loop_marks_failed(start_desktop: Start) -> None:
    desktop = start_desktop(["crashy"], max_restarts=2, restart_backoff_s=0.01)
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    for _ in range(3):
        wait_for(lambda: row(desktop)["state"] == "running", 10)
        with pytest.raises(AotuiError):
            client.execute(
                '<context app_id="app_0" view_id="view_0">execute die --code 9</context>'
            )
    wait_for(lambda: row(desktop)["state"] == "failed", 10, "the app to be marked failed")
    text = client.snapshot()
    assert "State: failed (exit 9; open it to retry)" in text
    client.execute("<context>open --application app_0</context>")
    assert row(desktop)["state"] == "running"


def test_temporary_app_is_not_restarted(start_desktop: Start, tmp_path: object) -> None:
    desktop = start_desktop(["crashy"], restart_mode="temporary")
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    with pytest.raises(AotuiError):
        client.execute('<context app_id="app_0" view_id="view_0">execute die --code 1</context>')
    wait_for(lambda: row(desktop)["state"] == "not running", 10)
    assert row(desktop)["restarts"] == 0


def test_silent_worker_is_killed_by_heartbeat(start_desktop: Start) -> None:
    desktop = start_desktop(
        ["mute", "echo"], heartbeat_s=0.1, heartbeat_timeout_s=0.6, operation_timeout_ms=300
    )
    client = desktop.client
    client.execute("<context>open --application app_0; open --application app_1</context>")
    with pytest.raises(AotuiError) as frozen:
        client.execute('<context app_id="app_0" view_id="view_0">execute freeze</context>')
    assert frozen.value.code is ErrorCode.E_TIMEOUT
    wait_for(lambda: row(desktop)["last_exit"] == "timeout", 10, "the heartbeat kill")
    wait_for(lambda: row(desktop)["state"] == "running", 10)
    # the other app never noticed
    client.execute('<context app_id="app_1" view_id="view_0">execute bump</context>')
