"""Stored data is never lost or invented: damaged rows, damaged files, repair, two supervisors.

Each test damages, locks or races a real store driven by a real supervisor (issue 10).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.conftest import TEST_APPS, RunningDesktop, write_config

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


def stored_data(path: Path, app: str) -> bytes:
    db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return bytes(db.execute("SELECT data FROM apps WHERE app = ?", (app,)).fetchone()[0])
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


def test_damaged_app_row_quarantines_that_app_alone(
    start_desktop: Start, private_home: Path
) -> None:
    desktop = start_desktop(["echo", "crashy"])
    desktop.client.execute("<context>open --application app_0; open --application app_1</context>")
    assert bump(desktop, "app_0", 3) == 3
    assert bump(desktop, "app_1", 5) == 5
    stop(desktop)
    path = store_of(private_home, desktop.name)
    blob = stored_data(path, "app_1")
    assert flip_in_file(path, blob) >= 1

    again = start_desktop(["echo", "crashy"], name=desktop.name)
    apps = {row["app"]: row for row in again.client.status()["apps"]}
    assert "app_1" not in apps, "a damaged row must not load (nor be invented afresh)"
    assert apps["app_0"]["state"] == "running"
    assert bump(again, "app_0", 1) == 4  # the undamaged app kept its data
    logs = system_logs(again)
    assert "app_1 (test.crashy) is quarantined" in logs
    assert again.client.status()["store"]["quarantined"] == ["app_1"]
    # its app_N is never handed out again, and its damaged row stays exactly as it was
    installed = again.client.install(str(TEST_APPS / "slow"))
    assert installed["app"] == "app_2"
    stop(again)
    damaged = bytearray(blob)
    middle = max(0, (len(blob) - 8) // 2)
    for i in range(middle, min(middle + 8, len(blob))):
        damaged[i] ^= 0x5A
    assert stored_data(path, "app_1") == bytes(damaged)


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
