"""Stored data is never lost or invented: damaged rows, damaged files, repair, two supervisors.

Each test damages, locks or races a real store driven by a real supervisor (issue 10).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.interface.launch import AOTUI, DesktopLaunch
from aotui.supervisor.server.registry import SnapshotRegistry
from aotui.supervisor.store.faults import StoreCorrupt, StoreHeld, StoreIOError, from_sqlite
from aotui.supervisor.store.store import SCHEMA_VERSION, DesktopStore
from tests.conftest import (
    TEST_APPS,
    RunningDesktop,
    run_desktop,
    stop_desktops,
    wait_for,
    write_config,
)
from tests.stores import StoreBackend

Start = Callable[..., RunningDesktop]
BUMP = '<context app_id="{app}" view_id="view_0">execute bump</context>'


def store_of(home: Path, name: str) -> Path:
    return home / "desktops" / f"{name}.db"


def bump(desktop: RunningDesktop, app: str, times: int) -> int:
    result = 0
    for _ in range(times):
        result = desktop.client.execute(BUMP.format(app=app))["results"][0]
    return result


def stop(desktop: RunningDesktop) -> None:
    """Shut the supervisor down cleanly and wait for it."""
    desktop.client.shutdown()
    desktop.process.wait(timeout=20)


def stored_data(path: Path, app: str, column: str = "data") -> bytes:
    """An app row's ``data`` blob or ``entry`` text, as stored."""
    db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        value = db.execute(f"SELECT {column} FROM apps WHERE app = ?", (app,)).fetchone()[0]
        return value.encode() if isinstance(value, str) else bytes(value)
    finally:
        db.close()


def flip_in_file(path: Path, needle: bytes, count: int = 8) -> int:
    """Flip up to ``count`` bytes in the middle of every copy of ``needle`` in ``path``."""
    raw = bytearray(path.read_bytes())
    found = 0
    start = raw.find(needle)
    while start >= 0:
        middle = start + max(0, (len(needle) - count) // 2)
        for i in range(middle, min(middle + count, start + len(needle))):
            raw[i] ^= 0x5A
        found += 1
        start = raw.find(needle, start + len(needle))
    path.write_bytes(bytes(raw))
    return found


def digest(path: Path) -> str:
    parts = [Path(f"{path}{s}") for s in ("", "-wal")]
    return hashlib.sha256(b"".join(p.read_bytes() for p in parts if p.exists())).hexdigest()


def cli(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "AOTUI_HOME": str(home)},
        check=False,
    )


def system_logs(desktop: RunningDesktop) -> str:
    text = desktop.client.snapshot()
    return text.split('name="System Logs">', 1)[1].split("</view>", 1)[0]


# --- item 1: a damaged row quarantines one app; a failed start writes nothing -----------------


@pytest.mark.parametrize("part", ["data", "entry"])
def test_damaged_app_row_quarantines_that_app_alone(
    start_desktop: Start, private_home: Path, part: str
) -> None:
    desktop = start_desktop(["echo", "crashy"])
    desktop.client.execute("<context>open --application app_0; open --application app_1</context>")
    assert bump(desktop, "app_0", 3) == 3
    assert bump(desktop, "app_1", 5) == 5
    stop(desktop)
    path = store_of(private_home, desktop.name)
    blob = stored_data(path, "app_1", part)
    assert flip_in_file(path, blob) >= 1

    again = start_desktop(["echo", "crashy"], name=desktop.name)
    apps = {row["app"]: row for row in again.client.status()["apps"]}
    assert "app_1" not in apps, "a damaged row must not load (nor be invented afresh)"
    assert apps["app_0"]["state"] == "running"
    assert bump(again, "app_0", 1) == 4  # the undamaged app kept its data
    logs = system_logs(again)
    assert "app_1 (test.crashy) is quarantined" in logs or (
        part == "entry" and "app_1 (unknown app) is quarantined" in logs
    )
    assert again.client.status()["store"]["quarantined"] == ["app_1"]
    # its app_N is never handed out again, and its damaged row stays exactly as it was
    installed = again.client.install(str(TEST_APPS / "slow"))
    assert installed["app"] == "app_2"
    stop(again)
    damaged = bytearray(blob)
    middle = max(0, (len(blob) - 8) // 2)
    for i in range(middle, min(middle + 8, len(blob))):
        damaged[i] ^= 0x5A
    assert stored_data(path, "app_1", part) == bytes(damaged)


def test_failed_start_writes_nothing_to_the_store(
    start_desktop: Start, private_home: Path, tmp_path: Path
) -> None:
    desktop = start_desktop(["echo", "crashy"])
    desktop.client.execute("<context>open --application app_0; open --application app_1</context>")
    bump(desktop, "app_0", 2)
    bump(desktop, "app_1", 2)
    stop(desktop)
    path = store_of(private_home, desktop.name)
    db = sqlite3.connect(path)
    created = db.execute("SELECT value FROM meta WHERE key = 'created'").fetchone()[0]
    db.close()
    assert flip_in_file(path, created.encode(), count=len(created)) >= 1
    before = digest(path)
    config = write_config(tmp_path / "again.toml", [str(TEST_APPS / "echo")])
    up = cli(
        private_home,
        "up",
        "--desktop",
        desktop.name,
        "--config",
        str(config),
        "--socket",
        str(tmp_path / "run2"),
    )
    assert up.returncode == 70, up.stderr
    assert "damaged" in up.stderr
    assert digest(path) == before, "a desktop that did not load wrote to its store"
    db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    assert db.execute("SELECT count(*) FROM apps").fetchone()[0] == 2
    db.close()


# --- a small real disk: a tmpfs in a private mount namespace ----------------------------------

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None,
    reason="a full disk is made with a tmpfs in a private mount namespace: needs root, "
    "unshare and nsenter",
)


@dataclass
class TinyDisk:
    """A tmpfs of ``size`` mounted at ``mount`` in a private mount namespace held by ``holder``.

    Processes run inside it through ``nsenter``; the test reaches its files through
    ``/proc/<holder>/root``. The namespace (and the tmpfs) ends with the holder.
    """

    holder: subprocess.Popen[bytes]
    mount: Path

    def outside(self, path: Path) -> Path:
        return Path(f"/proc/{self.holder.pid}/root{path}")

    def command(self, *args: str) -> list[str]:
        return ["nsenter", "-t", str(self.holder.pid), "-m", "--", *args]

    def fill(self, leave: int = 0) -> None:
        """Write a filler file until the disk is full, then give ``leave`` bytes back."""
        fd = os.open(self.outside(self.mount / "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
        finally:
            os.close(fd)

    def free(self) -> None:
        self.outside(self.mount / "filler").unlink()


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[TinyDisk]:
    mount = tmp_path / "disk"
    mount.mkdir()
    holder = subprocess.Popen(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            f"mount -t tmpfs -o size=4m,mode=0700 tmpfs '{mount}' && echo ready && exec sleep 600",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == b"ready\n"
        yield TinyDisk(holder, mount)
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def ns_desktop(
    disk: TinyDisk, tmp_path: Path, name: str, apps: list[str], started: list[RunningDesktop]
) -> RunningDesktop:
    """A supervisor whose AOTUI_HOME is on the tiny disk (its sockets are not), answering."""
    config = write_config(tmp_path / f"{name}.toml", [str(TEST_APPS / a) for a in apps])
    launch = DesktopLaunch(
        name,
        config,
        tmp_path / "run",
        env={**os.environ, "AOTUI_HOME": str(disk.mount / "home")},
        log=tmp_path / f"{name}.out",
        program=tuple(disk.command(*AOTUI)),
    )
    desktop = run_desktop(launch)
    started.append(desktop)
    return desktop


@pytest.fixture
def ns_started() -> Iterator[list[RunningDesktop]]:
    """Supervisors a test started in a namespace: all gone at teardown, whatever happened."""
    started: list[RunningDesktop] = []
    yield started
    stop_desktops(started)


# --- item 2: an I/O or space error is never damage; repair never moves a healthy store --------


@needs_root
def test_full_disk_is_an_io_error_never_damage(
    tiny_disk: TinyDisk, tmp_path: Path, ns_started: list[RunningDesktop]
) -> None:
    desktop = ns_desktop(tiny_disk, tmp_path, "full", ["echo"], ns_started)
    desktop.client.execute("<context>open --application app_0</context>")
    assert bump(desktop, "app_0", 10) == 10
    stop(desktop)
    home = tiny_disk.mount / "home"
    path = tiny_disk.outside(store_of(home, "full"))
    before = digest(path)
    tiny_disk.fill()

    env = {**os.environ, "AOTUI_HOME": str(home)}
    config = write_config(tmp_path / "full2.toml", [str(TEST_APPS / "echo")])
    up = subprocess.run(
        tiny_disk.command(
            sys.executable, "-m", "aotui.supervisor", "up", "--desktop", "full",
            "--config", str(config), "--socket", str(tmp_path / "run"),
        ),
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert up.returncode == ErrorCode.E_IO.exit_code, up.stderr
    assert "E_IO" in up.stderr
    assert "it is damaged" not in up.stderr
    assert "the file is not damaged" in up.stderr
    assert "--repair" not in up.stderr
    listed = subprocess.run(
        tiny_disk.command(sys.executable, "-m", "aotui.supervisor", "desktops", "--json"),
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    row = json.loads(listed.stdout)[0]
    assert row["health"] in ("ok", "io error"), row
    repaired = subprocess.run(
        tiny_disk.command(
            sys.executable, "-m", "aotui.supervisor", "desktops", "--repair", "full", "--json"
        ),
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert '"repaired": true' not in repaired.stdout, repaired.stdout
    assert not list(path.parent.glob("*.corrupt-*")), "repair moved a store that is not damaged"
    assert digest(path) == before

    tiny_disk.free()
    again = ns_desktop(tiny_disk, tmp_path, "full", ["echo"], ns_started)
    assert bump(again, "app_0", 1) == 11  # all 10 acknowledged bumps are there


def test_empty_or_missing_store_of_an_existing_desktop_is_damage(
    start_desktop: Start, private_home: Path, tmp_path: Path
) -> None:
    desktop = start_desktop(["echo"])
    desktop.client.execute("<context>open --application app_0</context>")
    bump(desktop, "app_0", 3)
    stop(desktop)
    path = store_of(private_home, desktop.name)
    config = write_config(tmp_path / "again.toml", [str(TEST_APPS / "echo")])
    up_args = ["up", "--desktop", desktop.name, "--config", str(config)]
    up_args += ["--socket", str(tmp_path / "run2")]
    path.write_bytes(b"")
    up = cli(private_home, *up_args)
    assert up.returncode == 70, up.stderr
    assert "the file is empty, but this desktop existed" in up.stderr
    assert path.read_bytes() == b""  # not turned into a new desktop
    listed = cli(private_home, "desktops")
    assert "DAMAGED: the file is empty" in listed.stdout
    path.unlink()
    up = cli(private_home, *up_args)
    assert up.returncode == 70, up.stderr
    assert "the file is missing, but this desktop existed" in up.stderr
    assert not path.exists()
    assert "DAMAGED: the file is missing" in cli(private_home, "desktops").stdout
    fresh = cli(private_home, *up_args, "--detach", "--fresh")
    assert fresh.returncode == 0, fresh.stderr  # the way out still works
    cli(private_home, "down", "--desktop", desktop.name, "--socket", str(tmp_path / "run2"))


# --- item 3: a repaired store keeps its identity and its salvaged apps -----------------------


def test_repair_keeps_identity_and_salvaged_apps(start_desktop: Start, private_home: Path) -> None:
    desktop = start_desktop(["echo", "crashy"])
    desktop.client.execute("<context>open --application app_0; open --application app_1</context>")
    bump(desktop, "app_0", 4)
    bump(desktop, "app_1", 6)
    stop(desktop)
    path = store_of(private_home, desktop.name)
    db = sqlite3.connect(path)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    meta_page = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'meta'").fetchone()[0]
    db.close()
    with open(path, "r+b") as handle:  # the meta table's page is overwritten with garbage
        handle.seek((meta_page - 1) * page_size)
        handle.write(b"\xa5" * page_size)
    listed = cli(private_home, "desktops")
    assert "DAMAGED" in listed.stdout, listed.stdout

    repaired = cli(private_home, "desktops", "--repair", desktop.name, "--json")
    assert repaired.returncode == 0, repaired.stderr
    result = json.loads(repaired.stdout)
    assert result["repaired"]
    assert result["salvaged_apps"] == 2
    assert Path(result["kept"]).exists()

    again = start_desktop(["echo", "crashy"], name=desktop.name)
    apps = {row["app"]: row for row in again.client.status()["apps"]}
    assert sorted(apps) == ["app_0", "app_1"], apps  # the same apps, not a new desktop
    assert bump(again, "app_0", 1) == 5
    assert bump(again, "app_1", 1) == 7
    assert "Desktop restored." in system_logs(again)


# --- item 4: one store, one supervisor -------------------------------------------------------


def supervisors_of(tmp_path: Path) -> list[psutil.Process]:
    """Every supervisor process started with a config under this test's ``tmp_path``."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = process.info["cmdline"] or []
        if "aotui.supervisor" in line and "up" in line and any(str(tmp_path) in a for a in line):
            found.append(process)
    return found


@pytest.fixture
def reaper(tmp_path: Path) -> Iterator[None]:
    """Kill every supervisor this test left (detached ones are not our children)."""
    yield
    for process in supervisors_of(tmp_path):
        family = [process, *process.children(recursive=True)]
        for member in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.kill()
        psutil.wait_procs(family, timeout=10)


@pytest.mark.usefixtures("reaper")
def test_two_concurrent_detached_ups_start_one_supervisor(
    private_home: Path, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "race.toml", [str(TEST_APPS / "echo")])
    command = [sys.executable, "-m", "aotui.supervisor", "up", "--detach", "--json"]
    command += ["--desktop", "race", "--config", str(config), "--socket", str(tmp_path / "run")]
    env = {**os.environ, "AOTUI_HOME": str(private_home)}
    racers = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        for _ in range(2)
    ]
    outcomes = [(r.communicate(timeout=60), r.returncode)[::-1] for r in racers]
    codes = sorted(code for code, _ in outcomes)
    assert codes[0] == 0, outcomes
    assert codes[1] != 0, f"both `up`s said they started the desktop: {outcomes}"
    winner = json.loads(next(out for code, (out, _) in outcomes if code == 0))["pid"]
    loser = b"".join(next(out for code, out in outcomes if code != 0)).decode()
    assert "E_LOCKED" in loser, loser
    assert f"pid {winner}" in loser, loser
    wait_for(lambda: len(supervisors_of(tmp_path)) == 1, 10, "the loser's supervisor to exit")
    assert [p.pid for p in supervisors_of(tmp_path)] == [winner]


@pytest.mark.usefixtures("reaper")
def test_same_desktop_under_another_socket_or_frozen_is_refused(
    start_desktop: Start, private_home: Path, tmp_path: Path
) -> None:
    desktop = start_desktop(["echo"])
    pid = desktop.process.pid
    config = write_config(tmp_path / "second.toml", [str(TEST_APPS / "echo")])
    second = ["up", "--desktop", desktop.name, "--config", str(config)]
    up = cli(private_home, *second, "--socket", str(tmp_path / "elsewhere"))
    assert up.returncode == ErrorCode.E_LOCKED.exit_code, up.stderr
    assert f"already served by pid {pid}" in up.stderr
    listed = cli(private_home, "desktops", "--socket", str(desktop.runtime))
    assert f"running (pid {pid})" in listed.stdout

    os.kill(pid, signal.SIGSTOP)  # a frozen supervisor answers nothing, and still holds it
    try:
        up = cli(private_home, *second, "--socket", str(desktop.runtime), "--detach")
        listed = cli(private_home, "desktops", "--socket", str(desktop.runtime))
    finally:
        os.kill(pid, signal.SIGCONT)
    assert up.returncode == ErrorCode.E_LOCKED.exit_code, up.stderr
    assert f"pid {pid}" in up.stderr
    assert f"held by pid {pid} (not answering)" in listed.stdout
    assert [p.pid for p in supervisors_of(tmp_path)] == [pid]
    desktop.client.execute("<context>open --application app_0</context>")
    assert bump(desktop, "app_0", 1) == 1  # the one supervisor serves on


# --- item 7: snapshot ids never repeat; a retained id outlives the cap; unknown ids are errors --


def test_snapshot_ids_never_repeat_past_a_reserved_block(store_backend: StoreBackend) -> None:
    handed_out: list[str] = []
    for _life in range(3):  # each life ends as a crash would: the registry is simply gone
        store = store_backend.open("ids")
        registry: SnapshotRegistry[int] = SnapshotRegistry(
            reserve=store.reserve_snapshot_ids, block=10
        )
        registry.reserve_ids()
        handed_out += [registry.add(i) for i in range(25)]  # 2.5 blocks in one life
        store.close()
    assert len(set(handed_out)) == len(handed_out), "a snapshot id was handed out twice"


def test_retained_snapshot_outlives_the_cap_and_unknown_release_is_an_error(
    start_desktop: Start,
) -> None:
    desktop = start_desktop(["echo"], snapshot_max_entries=8)
    keeper = desktop.new_client()
    keeper.execute("<context>open --application app_0</context>")
    keeper.snapshot()
    kept = keeper.snapshot_id
    assert kept is not None
    keeper.call("retain_snapshot", snapshot_id=kept)
    puller = desktop.new_client()
    for _ in range(30):  # another reader pulls far past the cap
        puller.call("snapshot")
    # the retained id still resolves (its refs are the ones the keeper saw)
    assert keeper.execute(BUMP.format(app="app_0"), snapshot_id=kept)["results"] == [1]
    with pytest.raises(AotuiError) as unknown:
        keeper.call("release_snapshot", snapshot_id="T999999999")
    assert unknown.value.code is ErrorCode.E_STALE_STATE
    # pinning is bounded: past half the cap a retain is refused, never an eviction
    for _ in range(3):
        keeper.call("retain_snapshot", snapshot_id=puller.call("snapshot")["snapshot_id"])
    with pytest.raises(AotuiError) as refused:
        keeper.call("retain_snapshot", snapshot_id=puller.call("snapshot")["snapshot_id"])
    assert refused.value.code is ErrorCode.E_RATE_LIMITED
    assert "retained already" in refused.value.message
    assert keeper.execute(BUMP.format(app="app_0"), snapshot_id=kept)["results"] == [2]


# --- item 5: a store that cannot write refuses state changes before their effect --------------

ADD = '<context app_id="app_0" view_id="view_0">execute add --text "{text}"</context>'


def items_in(text: str) -> int | None:
    """The hoarder's item count in a snapshot, or ``None`` when its block is not shown."""
    if "Items: " not in text:
        return None
    return int(text.split("Items: ", 1)[1].split("\n", 1)[0].split("<", 1)[0].strip())


def items_shown(desktop: RunningDesktop) -> int | None:
    return items_in(desktop.client.snapshot())


@needs_root
def test_unwritable_store_refuses_changes_and_recovers(
    tiny_disk: TinyDisk, tmp_path: Path, ns_started: list[RunningDesktop]
) -> None:
    desktop = ns_desktop(tiny_disk, tmp_path, "sick", ["hoarder"], ns_started)
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    for i in range(3):
        client.execute(ADD.format(text=f"note {i}"))
    grow = '<context app_id="app_0" view_id="view_0">execute grow --kb 400</context>'
    acked = client.execute(grow)["results"][0]  # 400 KB of state: each commit needs that much
    path = tiny_disk.outside(store_of(tiny_disk.mount / "home", "sick"))
    assert not Path(f"{path}-shm").exists()  # exclusive locking: no shared memory to SIGBUS on

    # 1. Room for the free-space check, not for the commit: the write fails after the effect,
    # and the effect is undone before the reply.
    tiny_disk.fill(leave=300 << 10)
    with pytest.raises(AotuiError) as undone:
        client.execute(ADD.format(text="undone"))
    assert undone.value.code is ErrorCode.E_IO, undone.value.message
    assert "was undone" in undone.value.message
    assert undone.value.data.get("outcome") == "not applied"
    assert items_shown(desktop) in (None, acked)  # None: restarting from its stored state
    wait_for(lambda: items_shown(desktop) is not None, 10, "the app to be back")
    assert items_shown(desktop) == acked
    assert client.status()["store"]["state"] == "failing"
    assert "The desktop store cannot be written" in system_logs(desktop)
    pid = desktop.app_pid("app_0")
    with pytest.raises(AotuiError) as refused:  # refused before any effect now
        client.execute(ADD.format(text="refused"))
    assert refused.value.code is ErrorCode.E_IO
    assert "nothing was changed" in refused.value.message
    assert items_shown(desktop) == acked
    assert desktop.app_pid("app_0") == pid  # not even restarted: it never ran
    tiny_disk.free()
    wait_for(lambda: client.status()["store"]["state"] == "ok", 10, "the store to recover")
    assert "can be written again" in system_logs(desktop)

    # 2. A full disk is seen before the effect: the command is refused without running.
    tiny_disk.fill()
    with pytest.raises(AotuiError) as full:
        client.execute(ADD.format(text="full"))
    assert full.value.code is ErrorCode.E_IO
    assert "nothing was changed" in full.value.message
    assert "full" in full.value.message
    assert desktop.app_pid("app_0") == pid
    assert items_shown(desktop) == acked
    tiny_disk.free()
    wait_for(lambda: client.status()["store"]["state"] == "ok", 10, "the store to recover")

    acked = client.execute(ADD.format(text="after"))["results"][0]
    os.kill(desktop.process.pid, signal.SIGKILL)
    desktop.process.wait(timeout=10)
    again = ns_desktop(tiny_disk, tmp_path, "sick", ["hoarder"], ns_started)
    wait_for(lambda: items_shown(again) is not None, 10, "the app to reopen")
    assert items_shown(again) == acked  # exactly the acknowledged writes, no refused one


# --- item 6: error replies mean no effect -----------------------------------------------------


def test_timed_out_operation_never_lands(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"], operation_timeout_ms=500)
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    assert bump(desktop, "app_0", 2) == 2
    pid = desktop.app_pid("app_0")
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # frozen: the operation waits in its socket
    try:
        with pytest.raises(AotuiError) as late:
            client.execute(BUMP.format(app="app_0"))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)  # were it still alive, it would run the bump now
    assert late.value.code is ErrorCode.E_TIMEOUT
    assert "took no effect" in late.value.message

    def back() -> bool:
        row = desktop.client.status()["apps"][0]
        return row["state"] == "running" and row["pid"] not in (None, pid)

    wait_for(back, 10, "the app to restart")
    assert "Calls: 2" in client.snapshot()
    assert bump(desktop, "app_0", 1) == 3  # the timed-out bump never happened


def test_unsendable_result_or_state_takes_no_effect(start_desktop: Start) -> None:
    desktop = start_desktop(["hoarder"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    grow = '<context app_id="app_0" view_id="view_0">execute {op} --kb {kb}</context>'
    for count in range(1, 5):  # 3.6 MB of state: it still fits in a 4 MiB frame
        assert client.execute(grow.format(op="grow", kb=900))["results"] == [count]
    for op, kb in (("grow", 900), ("big_result", 1500)):  # state, then a result, too large
        pid = desktop.app_pid("app_0")
        with pytest.raises(AotuiError) as unsendable:
            client.execute(grow.format(op=op, kb=kb))
        assert unsendable.value.code is ErrorCode.E_APP_ERROR
        assert "took no effect" in unsendable.value.message
        # never shown: the old count, or no block while it restarts
        assert items_shown(desktop) in (None, 4)

        def back(old: int | None = pid) -> bool:
            row = client.status()["apps"][0]
            return row["state"] == "running" and row["pid"] not in (None, old)

        wait_for(back, 10, "the app to restart")
        assert items_shown(desktop) == 4
    assert client.execute(ADD.format(text="small"))["results"] == [5]


# --- item 8: damage at the WAL's tail is detected and reported --------------------------------


def test_wal_tail_damage_is_detected_and_reported(
    start_desktop: Start, private_home: Path, tmp_path: Path
) -> None:
    desktop = start_desktop(["echo"])
    desktop.client.execute("<context>open --application app_0</context>")
    assert bump(desktop, "app_0", 50) == 50
    os.kill(desktop.process.pid, signal.SIGKILL)  # the WAL is left as a crash leaves it
    desktop.process.wait(timeout=10)
    path = store_of(private_home, desktop.name)
    wal = Path(f"{path}-wal")
    raw = bytearray(wal.read_bytes())
    for i in range(len(raw) - 200, len(raw) - 192):  # inside the last frame's page
        raw[i] ^= 0xFF
    wal.write_bytes(bytes(raw))
    # SQLite alone drops the damaged commit without a word: its integrity check says ok
    copy = tmp_path / "copy.db"
    shutil.copy(path, copy)
    shutil.copy(wal, f"{copy}-wal")
    with sqlite3.connect(copy) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    listed = cli(private_home, "desktops")
    assert "WAL DAMAGE" in listed.stdout, listed.stdout

    again = start_desktop(["echo"], name=desktop.name)
    logs = system_logs(again)
    assert "The desktop store was damaged after a crash" in logs
    assert "may be lost" in logs
    assert again.client.status()["store"]["wal_damage"]
    assert list(path.parent.glob(f"{path.name}-wal.damaged-*")), "the damaged WAL was not kept"
    # detected and reported, not undone: the damaged last commit is gone (49 of 50 kept)
    assert bump(again, "app_0", 1) == 50


# --- the mapping of SQLite's result codes is complete: only damage is damage ------------------


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (11, StoreCorrupt),  # SQLITE_CORRUPT
        (26, StoreCorrupt),  # SQLITE_NOTADB
        (24, StoreCorrupt),  # SQLITE_FORMAT
        (5, StoreHeld),  # SQLITE_BUSY
        (6, StoreHeld),  # SQLITE_LOCKED
        (10, StoreIOError),  # SQLITE_IOERR
        (778, StoreIOError),  # SQLITE_IOERR_WRITE
        (13, StoreIOError),  # SQLITE_FULL
        (14, StoreIOError),  # SQLITE_CANTOPEN
        (8, StoreIOError),  # SQLITE_READONLY
        (3, StoreIOError),  # SQLITE_PERM
        (7, StoreIOError),  # SQLITE_NOMEM
        (None, StoreIOError),  # no code at all: never called damage
        (1, StoreIOError),  # SQLITE_ERROR, generic
        ((1, "no such table: meta"), StoreCorrupt),  # a file without our tables
    ],
)
def test_sqlite_errors_map_to_damage_only_when_the_content_is_damaged(
    tmp_path: Path, code: int | tuple[int, str] | None, kind: type
) -> None:
    code, text = code if isinstance(code, tuple) else (code, "boom")
    error = sqlite3.OperationalError(text)
    if code is not None:
        error.sqlite_errorcode = code
    mapped = from_sqlite(tmp_path / "d.db", error, "written")
    assert type(mapped) is kind
    expected = {StoreCorrupt: "E_INTERNAL", StoreHeld: "E_LOCKED", StoreIOError: "E_IO"}[kind]
    assert mapped.code.value == expected


def test_timed_out_user_message_never_lands(start_desktop: Start) -> None:
    desktop = start_desktop(["system/chat"], operation_timeout_ms=500)
    client = desktop.client
    client.say("first words")
    before = chat_messages(client.snapshot())
    pid = desktop.app_pid("app_0")
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(AotuiError) as late:
            client.say("lost words")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    assert late.value.code is ErrorCode.E_TIMEOUT
    assert "took no effect" in late.value.message

    def back() -> bool:
        row = client.status()["apps"][0]
        return row["state"] == "running" and row["pid"] not in (None, pid)

    wait_for(back, 10, "the chat to restart")
    assert chat_messages(client.snapshot()) == before  # the late message never arrived
    client.say("next words")
    assert chat_messages(client.snapshot()) == before + 1


def chat_messages(text: str) -> int:
    """The message count the chat's Conversations view shows."""
    return int(text.split("Messages: ", 1)[1].split("\n", 1)[0].strip())


def test_a_schema_1_store_loads_unchanged_and_upgrades_on_its_first_write(
    private_home: Path,
) -> None:
    path = private_home / "desktops" / "old.db"
    path.parent.mkdir(parents=True)
    entry: dict[str, Any] = {"app": "app_0", "manifest_id": "test.echo"}
    entry["app_dir"] = str(TEST_APPS / "echo")
    entry |= {"status": "running", "mounted": [], "hidden": [], "view_ids": {}}
    entry |= {"restarts": 0, "last_exit": ""}
    with contextlib.closing(sqlite3.connect(path)) as db:  # aotui's layout before checksums
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("CREATE TABLE apps (app TEXT PRIMARY KEY, position INTEGER NOT NULL, "
                   "entry TEXT NOT NULL, data BLOB)")  # fmt: skip
        meta = {"schema_version": "1", "id": "old", "created": "1.0", "next_app": "1"}
        db.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
        db.execute("INSERT INTO apps VALUES ('app_0', 0, ?, NULL)", (json.dumps(entry),))
        db.commit()
    before = digest(path)
    store = DesktopStore(path)
    state = store.load()
    store.close()
    assert digest(path) == before, "opening and loading wrote to the store"
    assert state is not None
    assert [a.app for a in state.apps] == ["app_0"]
    store = DesktopStore(path)
    store.save_desktop(state)
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        assert version[0] == str(SCHEMA_VERSION)
        assert db.execute("SELECT checksum FROM apps").fetchone()[0] is not None


def test_repair_salvages_the_keyed_parts_of_app_data(
    start_desktop: Start, private_home: Path
) -> None:
    """Notes keeps a part per note: after repair every acknowledged note is there."""
    desktop = start_desktop(["notes"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    add = '<context app_id="app_0" view_id="view_0">execute add_note --title {t} --text x</context>'
    for title in ("first", "second", "third"):  # the first is stored whole, the rest as parts
        client.execute(add.format(t=title))
    # kill -9, not a clean shutdown: that would write the whole row again and drop the parts
    os.kill(desktop.process.pid, signal.SIGKILL)
    desktop.process.wait(timeout=10)
    path = store_of(private_home, desktop.name)
    db = sqlite3.connect(path)
    assert db.execute("SELECT COUNT(*) FROM app_parts").fetchone()[0] >= 2
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    meta_page = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'meta'").fetchone()[0]
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    with open(path, "r+b") as handle:  # the meta table's page is overwritten with garbage
        handle.seek((meta_page - 1) * page_size)
        handle.write(b"\xa5" * page_size)
    assert "DAMAGED" in cli(private_home, "desktops").stdout

    repaired = cli(private_home, "desktops", "--repair", desktop.name, "--json")
    assert repaired.returncode == 0, repaired.stderr
    result = json.loads(repaired.stdout)
    assert result["salvaged_apps"] == 1
    assert result["salvaged_parts"] >= 2

    again = start_desktop(["notes"], name=desktop.name)
    shown = again.client.snapshot()
    for title in ("first", "second", "third"):
        assert title in shown, title
