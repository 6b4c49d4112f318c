"""Durable desktops: acknowledged effects survive kill -9 of workers and of the supervisor."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.store.faults import StoreCorrupt
from aotui.supervisor.store.repair import repair
from aotui.supervisor.store.state import FORMAT, VERSION, AppEntry, DesktopState
from aotui.supervisor.store.store import DesktopStore
from tests.conftest import RunningDesktop, wait_for
from tests.stores import StoreBackend

Start = Callable[..., RunningDesktop]
BUMP = '<context app_id="{app}" view_id="view_0">execute bump</context>'


def kill_supervisor(desktop: RunningDesktop) -> list[psutil.Process]:
    """SIGKILL the supervisor; returns its former descendants (which must die with it)."""
    family = desktop.descendants()
    os.kill(desktop.process.pid, signal.SIGKILL)
    desktop.process.wait(timeout=10)
    return family


def test_supervisor_kill_mid_stream_loses_no_acknowledged_effect(start_desktop: Start) -> None:
    desktop = start_desktop(["echo", "crashy"])
    client = desktop.client
    client.execute("<context>open --application app_0; open --application app_1</context>")
    acked = {"app_0": 0, "app_1": 0}
    stop = threading.Event()

    def stream() -> None:
        other = desktop.new_client(timeout_s=5)
        rng = random.Random(7)
        while not stop.is_set():
            app = rng.choice(["app_0", "app_1"])
            try:
                result = other.execute(BUMP.format(app=app))
            except AotuiError:
                return  # the supervisor is gone: this command was never acknowledged
            acked[app] = result["results"][0]

    thread = threading.Thread(target=stream)
    thread.start()
    wait_for(lambda: min(acked.values()) >= 5, 20, "a stream of acknowledged commands")
    family = kill_supervisor(desktop)
    stop.set()
    thread.join(timeout=10)
    _, alive = psutil.wait_procs(family, timeout=10)
    assert not alive, "a worker outlived its supervisor"

    again = start_desktop(["echo", "crashy"], name=desktop.name)
    status = {row["app"]: row for row in again.client.status()["apps"]}
    assert status["app_0"]["state"] == "running"
    assert status["app_1"]["state"] == "running"
    for app, count in acked.items():
        # every acknowledged bump is there: the next one continues from it
        result = again.client.execute(BUMP.format(app=app))["results"][0]
        assert result >= count + 1, (app, result, count)


def test_restored_desktop_has_the_same_ids_views_and_data(start_desktop: Start) -> None:
    desktop = start_desktop(["system/chat", "echo"])
    client = desktop.client
    text = client.snapshot()
    block = text[text.index('<application id="app_0"') :]
    conversations = block.split("[Conversations](view:")[1].split(")")[0]
    client.execute(f'<context app_id="app_0">mount --view {conversations}</context>')
    client.execute("<context>open --application app_1</context>")
    client.execute(BUMP.format(app="app_1"))
    client.execute("<context>collapse --application app_1</context>")
    client.say("remember me")
    client.snapshot()
    old_snapshot = client.snapshot_id
    before = client.snapshot()
    kill_supervisor(desktop)

    again = start_desktop(["system/chat", "echo"], name=desktop.name)
    after = again.client.snapshot()
    chat_before = before[before.index('<application id="app_0"') :].split("</application>")[0]
    chat_after = after[after.index('<application id="app_0"') :].split("</application>")[0]
    # same app ids, same view ids, same mounted views, same data (the user's message included)
    assert f'<view id="{conversations}" name="Conversations">' in chat_after
    tree = "## Application View Tree"
    assert (
        chat_before.split(tree)[1].split("</application_info>")[0]
        == chat_after.split(tree)[1].split("</application_info>")[0]
    )
    assert "Last Message: remember me" in chat_after
    echo = next(r for r in again.client.status()["apps"] if r["app"] == "app_1")
    assert echo["state"] == "collapsed"
    again.client.execute("<context>show --application app_1</context>")
    assert "Calls: 1" in again.client.snapshot()
    # snapshot ids from before the crash are stale, never reused
    with pytest.raises(AotuiError) as stale:
        again.client.execute(BUMP.format(app="app_1"), snapshot_id=old_snapshot)
    assert stale.value.code is ErrorCode.E_STALE_STATE
    assert again.client.snapshot_id != old_snapshot


def test_worker_kill_keeps_acknowledged_state(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    for _ in range(3):
        client.execute(BUMP.format(app="app_0"))
    pid = desktop.app_pid("app_0")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)

    def restarted() -> bool:
        row = client.status()["apps"][0]
        return row["state"] == "running" and row["pid"] != pid

    wait_for(restarted, 10, "the restart")
    assert client.execute(BUMP.format(app="app_0"))["results"] == [4]


def test_damaged_store_is_reported_never_reset(tmp_path: Path, private_home: Path) -> None:
    store_file = private_home / "desktops" / "broken.db"
    store_file.parent.mkdir(parents=True)
    store_file.write_bytes(b"SQLite format 3\x00" + os.urandom(4096))
    env = {**os.environ, "AOTUI_HOME": str(private_home)}
    up = subprocess.run(
        [
            sys.executable,
            "-m",
            "aotui.supervisor",
            "up",
            "--desktop",
            "broken",
            "--socket",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert up.returncode == 70
    assert "cannot be read" in up.stderr
    assert "--repair broken" in up.stderr
    assert "--fresh" in up.stderr
    assert store_file.read_bytes().startswith(b"SQLite format 3")  # untouched
    listed = subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", "desktops"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert "broken" in listed.stdout
    assert "DAMAGED" in listed.stdout
    result = repair(store_file)
    assert result["repaired"]
    assert Path(result["kept"]).exists()
    DesktopStore(store_file).close()  # readable again


def test_corrupt_store_class_and_fresh_start(private_home: Path) -> None:
    path = private_home / "desktops" / "x.db"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(StoreCorrupt) as corrupt:
        DesktopStore(path)
    assert corrupt.value.code is ErrorCode.E_INTERNAL
    assert str(path) in corrupt.value.message


def test_state_round_trip_and_versions(store_backend: StoreBackend) -> None:
    state = DesktopState(
        "d",
        1.5,
        2.5,
        3,
        [
            AppEntry(
                "app_0",
                "com.x.y",
                "/apps/y",
                "running",
                ["root"],
                [],
                {"root": "view_0"},
                {"notes": [b"\x00bytes", 1, None]},
            )
        ],
    )
    raw = state.to_dict()
    assert raw["format"] == FORMAT
    assert raw["version"] == VERSION
    assert DesktopState.from_dict(raw) == state
    store = store_backend.open()
    store.save_desktop(state)
    loaded = store.load()
    store.close()
    assert loaded is not None
    assert loaded.apps == state.apps
    assert loaded.next_app == 3
    for bad, words in [
        ({**raw, "version": VERSION + 1}, "newer than this aotui"),
        ({**raw, "format": "other"}, "not a serialized aotui desktop"),
        ({**raw, "version": 0}, "not a version number"),
        ({**raw, "apps": [{"nope": 1}]}, "malformed"),
    ]:
        with pytest.raises(AotuiError, match=words):
            DesktopState.from_dict(bad)


def test_snapshot_ids_are_never_reused_across_boots(store_backend: StoreBackend) -> None:
    first = store_backend.open("ids")
    a = first.reserve_snapshot_ids()
    first.close()
    second = store_backend.open("ids")
    b = second.reserve_snapshot_ids()
    second.close()
    assert b > a
    if store_backend.kind == "sqlite":
        assert store_backend.sql("PRAGMA journal_mode", desktop="ids") == [("wal",)]


def test_an_apps_children_die_with_a_killed_supervisor(start_desktop: Start) -> None:
    desktop = start_desktop(["crashy"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    child = client.execute('<context app_id="app_0" view_id="view_0">execute spawn</context>')[
        "results"
    ][0]
    assert psutil.pid_exists(child)
    kill_supervisor(desktop)
    # The zygote's parent-death signal kills every worker's process group, children included.
    gone = wait_for(lambda: not psutil.pid_exists(child) or _zombie(child), 10, "the child to die")
    assert gone


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
