"""The `aotui` command line against real desktops: every command, exit codes, no leftovers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.conftest import TEST_APPS, RunningDesktop, wait_for
from tests.processes import started_by_this_test

Start = Callable[..., RunningDesktop]

#: The suffixes of SQLite's files beside a store (moved aside with it).
WAL = ("-wal", "-shm")


def aotui(
    *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def on(desktop: RunningDesktop) -> list[str]:
    return ["--desktop", desktop.name, "--socket", str(desktop.runtime)]


def test_no_desktop_is_exit_69(tmp_path: Path) -> None:
    for command in (
        ["status"],
        ["snapshot"],
        ["exec", "<context>open --application app_0</context>"],
        ["down"],
    ):
        result = aotui(*command, "--socket", str(tmp_path))
        assert result.returncode == 69, (command, result.stderr)
        assert "no desktop is running" in result.stderr
    result = aotui("status", "--json", "--socket", str(tmp_path))
    error = json.loads(result.stdout)["error"]
    assert (error["code"], error["recoverable"]) == ("E_UNAVAILABLE", True)  # CONTRACT §7


def test_help_lists_every_command() -> None:
    result = aotui("--help")
    assert result.returncode == 0
    for command in (
        "up",
        "down",
        "install",
        "uninstall",
        "status",
        "snapshot",
        "exec",
        "watch",
        "demo",
        "say",
    ):
        assert command in result.stdout
    assert "exit codes" in result.stdout


def test_commands_on_a_running_desktop(start_desktop: Start) -> None:
    desktop = start_desktop(["system/chat", "echo"])
    where = on(desktop)
    status = aotui("status", *where)
    assert status.returncode == 0
    assert "APP" in status.stdout
    assert "system.chat" in status.stdout
    assert "not running" in status.stdout
    rows = json.loads(aotui("status", "--json", *where).stdout)
    assert rows["pid"] == desktop.process.pid
    chat = rows["apps"][0]
    assert {
        "app",
        "id",
        "state",
        "pid",
        "rss_bytes",
        "cpu_percent",
        "restarts",
        "last_exit",
    } <= set(chat)
    assert chat["state"] == "running"
    assert chat["pid"]
    assert chat["rss_bytes"] > 0

    plain = aotui("snapshot", "--plain", "--quiet", *where)
    assert plain.stdout.startswith("<desktop>")
    assert plain.stderr == ""
    as_json = json.loads(aotui("snapshot", "--json", *where).stdout)
    assert as_json["snapshot_id"].startswith("T")
    assert as_json["markdown"].startswith("<desktop>")

    opened = aotui("exec", "<context>open --application app_1</context>", *where)
    assert opened.returncode == 0
    assert "1 command(s) ran" in opened.stdout
    bumped = aotui(
        "exec",
        "--json",
        *where,
        stdin='<context app_id="app_1" view_id="view_0">execute bump</context>',
    )
    assert json.loads(bumped.stdout)["results"] == [1]

    bad = aotui("exec", "<context>launch --application app_1</context>", *where)
    assert bad.returncode == 64
    assert "E_INVALID_CMD" in bad.stderr
    missing = aotui("exec", "<context>open --application app_9</context>", *where)
    assert missing.returncode == 65
    stale = aotui(
        "exec",
        "--snapshot",
        "T999",
        '<context app_id="app_1" view_id="view_0">execute bump</context>',
        *where,
    )
    assert stale.returncode == 75
    assert "E_STALE_STATE" in stale.stderr

    assert aotui("say", "hi from the CLI", *where).returncode == 0
    installed = aotui("install", str(TEST_APPS / "crashy"), *where)
    assert installed.returncode == 0
    assert installed.stdout.strip() == "app_2"
    assert aotui("install", str(TEST_APPS / "nope"), *where).returncode == 65
    assert aotui("uninstall", "test.crashy", *where).returncode == 0

    watched = aotui("watch", "--max-updates", "2", *where)
    assert watched.returncode == 0
    assert watched.stdout.count("aotui watch") == 2


def test_up_detach_and_down_leave_nothing(tmp_path: Path) -> None:
    config = tmp_path / "d.toml"
    config.write_text(f'apps = ["{TEST_APPS / "echo"}", "system/chat"]\n')
    where = ["--socket", str(tmp_path / "run"), "--desktop", "cli"]
    up = aotui("up", "--detach", "--config", str(config), *where)
    assert up.returncode == 0, up.stderr
    pid = json.loads(aotui("status", "--json", *where).stdout)["pid"]
    family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    assert len(family) >= 3  # supervisor, zygote, the chat worker
    again = aotui("up", "--detach", "--config", str(config), *where)
    assert again.returncode == 0  # up twice is up once (tests/test_cli_faces.py)
    assert "already running" in again.stdout
    down = aotui("down", *where)
    assert down.returncode == 0
    _, alive = psutil.wait_procs(family, timeout=10)
    assert not alive
    assert aotui("status", *where).returncode == 69


def test_workers_die_with_a_killed_supervisor(start_desktop: Start) -> None:
    desktop = start_desktop(["system/chat", "echo"])
    desktop.client.execute("<context>open --application app_1</context>")
    family = desktop.descendants()
    assert len(family) >= 3  # zygote and two workers
    os.kill(desktop.process.pid, signal.SIGKILL)
    desktop.process.wait(timeout=10)
    _, alive = psutil.wait_procs(family, timeout=10)
    assert not alive, "workers outlived their supervisor"


def test_demo_runs_and_cleans_up() -> None:
    result = aotui("demo", timeout=120)
    assert result.returncode == 0, result.stderr
    for expected in ("snapshot T1", "agent", "reply_message", "Me.", "demo finished"):
        assert expected in result.stdout

    # Only what this demo started: other desktops may run on the machine meanwhile.
    wait_for(lambda: not started_by_this_test(), 10, "the demo's processes to exit")


@pytest.mark.parametrize("flag", ["--plain", "--json"])
def test_snapshot_flags_without_desktop(flag: str, tmp_path: Path) -> None:
    assert aotui("snapshot", flag, "--socket", str(tmp_path)).returncode == 69


def test_doctor_reports_every_layer() -> None:
    result = aotui("doctor")
    assert result.returncode in (0, 1), result.stderr  # 1 only when strict mode could not run
    for layer in ("landlock", "seccomp", "netns", "rlimits", "no-new-privs"):
        assert layer in result.stdout
    assert "Layers for this user" in result.stdout
    report = json.loads(aotui("doctor", "--json").stdout)
    assert report["landlock_abi"] >= 1
    assert "layers" in report["this_user"]


def test_up_fresh_keeps_the_old_store(tmp_path: Path, private_home: Path) -> None:
    config = tmp_path / "d.toml"
    config.write_text(f'apps = ["{TEST_APPS / "echo"}"]\n')
    where = ["--socket", str(tmp_path / "run"), "--desktop", "fresh"]
    assert aotui("up", "--detach", "--config", str(config), *where).returncode == 0
    assert aotui("exec", "<context>open --application app_0</context>", *where).returncode == 0
    assert aotui("down", *where).returncode == 0
    store = private_home / "desktops" / "fresh.db"
    assert store.exists()
    up = aotui("up", "--detach", "--fresh", "--config", str(config), *where)
    assert up.returncode == 0, up.stderr
    assert "kept the old store" in up.stderr
    # A healthy store set aside on request is `.replaced-…`; only a damaged one is `.corrupt-…`.
    kept = [p for p in store.parent.glob("fresh.db.replaced-*") if p.suffix[-4:] not in WAL]
    assert len(kept) == 1
    assert not list(store.parent.glob("fresh.db.corrupt-*"))
    assert kept[0].with_name(kept[0].name.replace(".db.", ".identity.")).exists()
    status = json.loads(aotui("status", "--json", *where).stdout)
    assert status["apps"][0]["state"] == "not running"  # started empty, not restored
    assert aotui("down", *where).returncode == 0


def test_up_in_a_shared_socket_directory_keeps_its_mode(tmp_path: Path) -> None:
    # A 1777 directory like /tmp: `--socket` there must not make it 0700 (as root, `--socket
    # /tmp` would lock every user out of /tmp); the desktop gets a 0700 directory of its own.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    config = tmp_path / "d.toml"
    config.write_text(f'apps = ["{TEST_APPS / "echo"}"]\n')
    where = ["--socket", str(shared), "--desktop", "mine"]
    up = aotui("up", "--detach", "--config", str(config), *where)
    try:
        assert up.returncode == 0, up.stderr
        assert aotui("exec", "<context>open --application app_0</context>", *where).returncode == 0
        assert json.loads(aotui("status", "--json", *where).stdout)["apps"][0]["state"] == "running"
        assert oct(shared.stat().st_mode & 0o7777) == oct(0o1777)
        own = shared / "mine"
        assert (own.stat().st_uid, oct(own.stat().st_mode & 0o7777)) == (os.getuid(), oct(0o700))
    finally:
        assert aotui("down", *where).returncode in (0, 69)
    assert oct(shared.stat().st_mode & 0o7777) == oct(0o1777)


def test_up_refuses_a_socket_directory_others_could_swap(tmp_path: Path) -> None:
    # Writable by others without the sticky bit: they could rename the desktop's directory away
    # and put their own in its place. Refused, and its mode is left alone.
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    up = aotui("up", "--detach", "--socket", str(open_dir), "--desktop", "mine")
    assert up.returncode == 77, up.stderr
    assert f"{open_dir} is writable by others and not sticky" in up.stderr
    assert oct(open_dir.stat().st_mode & 0o7777) == oct(0o777)
    assert not (open_dir / "mine").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a directory to another uid")
def test_up_refuses_a_desktop_directory_of_another_uid(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    planted = shared / "mine"
    planted.mkdir()
    planted.chmod(0o777)
    os.chown(planted, 65534, 65534)  # nobody got there first
    up = aotui("up", "--detach", "--socket", str(shared), "--desktop", "mine")
    assert up.returncode == 77, up.stderr
    assert f"{planted} belongs to uid 65534, not to this user" in up.stderr
    assert (planted.stat().st_uid, oct(planted.stat().st_mode & 0o777)) == (65534, oct(0o777))
    assert not list(planted.iterdir())
