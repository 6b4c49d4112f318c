"""Per-app stdout/stderr capture: rotation bounds, and `aotui logs` on a real desktop."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from aotui.supervisor.workers.app_logs import AppLog, log_files
from tests.conftest import RunningDesktop, wait_for

Start = Callable[..., RunningDesktop]


def test_rotation_bounds_the_disk(tmp_path: Path) -> None:
    async def flood() -> None:
        log = AppLog(tmp_path / "app_0.log", max_bytes=10_000, backups=2)
        writer = log.write_fd
        for i in range(2000):
            os.write(writer, f"line {i} {'x' * 40}\n".encode())
            if i % 100 == 0:
                await asyncio.sleep(0)
        log.handed_over()  # closes our write end: EOF after the data
        for _ in range(200):
            await asyncio.sleep(0.005)
            if log.read_fd < 0:
                break
        log.close()

    asyncio.run(flood())
    files = log_files(tmp_path, "app_0")
    assert [f.name for f in files] == ["app_0.log.2", "app_0.log.1", "app_0.log"]
    # each file is at most max_bytes plus one read's worth (timestamped); the rest was dropped
    assert all(f.stat().st_size < 10_000 + 10_000 for f in files)
    assert sum(f.stat().st_size for f in files) < 60_000
    assert files[-1].read_text().rstrip().endswith("line 1999 " + "x" * 40)


def test_endless_line_is_bounded(tmp_path: Path) -> None:
    async def run() -> None:
        log = AppLog(tmp_path / "app_1.log")
        os.write(log.write_fd, b"y" * 60_000)  # no newline at all
        log.handed_over()
        await asyncio.sleep(0.05)
        log.close()

    asyncio.run(run())
    assert len((tmp_path / "app_1.log").read_bytes()) < 5_000


def test_aotui_logs_shows_an_apps_output(start_desktop: Start, private_home: Path) -> None:
    desktop = start_desktop(["crashy"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    client.execute(
        '<context app_id="app_0" view_id="view_0">execute shout --text "hi there"</context>'
    )
    where = ["--desktop", desktop.name, "--socket", str(desktop.runtime)]

    def logged() -> str | None:
        result = subprocess.run(
            [sys.executable, "-m", "aotui.supervisor", "logs", "app_0", *where],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return result.stdout if "err: hi there" in result.stdout else None

    text = wait_for(logged, 10, "the app's output in aotui logs")
    assert isinstance(text, str)
    assert "out: hi there" in text
    by_id = subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", "logs", "test.crashy", *where],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert "out: hi there" in by_id.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", "logs", "app_9", *where],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert missing.returncode == 65
