"""Per-app stdout/stderr, captured from a pipe into size-rotated files.

Each worker's fds 1 and 2 are the write end of a pipe the supervisor created; the supervisor reads
the other end on its loop and appends to ``AOTUI_HOME/logs/<desktop>/<app_N>.log``, rotating at
``max_bytes`` into ``.1`` … ``.<backups>``. An app that prints without end therefore costs at
most ``(max_bytes + 64 KiB) × (backups + 1)`` of disk (a file rotates after the read that
crossed the size), and the worker itself never holds a file descriptor of
the log (it could not be trusted to rotate it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

__all__ = ["AppLog", "last_output", "log_files", "log_size"]


class AppLog:
    """The supervisor's end of one app's output pipe, written to a rotating file."""

    def __init__(self, path: Path, max_bytes: int = 1 << 20, backups: int = 3) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(self.read_fd, False)
        self._file = open(path, "ab")  # noqa: SIM115 -- lives as long as the worker
        self._partial = b""
        asyncio.get_running_loop().add_reader(self.read_fd, self._readable)

    def handed_over(self) -> None:
        """The worker has its copy of the write end; drop ours so EOF means it ended."""
        with contextlib.suppress(OSError):
            os.close(self.write_fd)
        self.write_fd = -1

    def _readable(self) -> None:
        try:
            data = os.read(self.read_fd, 65536)
        except BlockingIOError:
            return
        if not data:
            self.close()
            return
        self._write(data)

    def _write(self, data: bytes) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S ").encode()
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()[-4096:]  # an endless line cannot grow without bound
        if lines:
            self._file.write(b"".join(stamp + line + b"\n" for line in lines))
            self._file.flush()
        if self._file.tell() >= self.max_bytes:
            self._rotate()

    def _rotate(self) -> None:
        self._file.close()
        for index in range(self.backups, 0, -1):
            source = (
                self.path if index == 1 else self.path.with_name(f"{self.path.name}.{index - 1}")
            )
            if source.exists():
                os.replace(source, self.path.with_name(f"{self.path.name}.{index}"))
        self._file = open(self.path, "ab")  # noqa: SIM115

    def close(self) -> None:
        """Stop reading; flush what is left."""
        if self.read_fd < 0:
            return
        with contextlib.suppress(ValueError, RuntimeError):
            asyncio.get_running_loop().remove_reader(self.read_fd)
        with contextlib.suppress(OSError):  # what the worker wrote just before it ended
            while data := os.read(self.read_fd, 65536):
                self._write(data)
        if self._partial:
            self._write(b"\n")
        os.close(self.read_fd)
        self.read_fd = -1
        if self.write_fd >= 0:
            self.handed_over()
        self._file.close()


def log_files(folder: Path, app: str) -> list[Path]:
    """An app's log files, oldest first."""
    current = folder / f"{app}.log"
    rotated = sorted(
        folder.glob(f"{app}.log.*"),
        key=lambda p: int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0,
    )
    return [*reversed(rotated), *([current] if current.exists() else [])]


def log_size(folder: Path, app: str) -> int:
    """How many bytes an app's current log holds (0 when it has none)."""
    try:
        return (folder / f"{app}.log").stat().st_size
    except OSError:
        return 0


def last_output(folder: Path, app: str, since: int = 0, limit: int = 300) -> str:
    """The last line an app printed after byte ``since`` (often why it failed to start)."""
    path = folder / f"{app}.log"
    try:
        with open(path, "rb") as handle:
            size = path.stat().st_size
            handle.seek(max(0, size - 8192, since if since <= size else 0))
            tail = handle.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line for line in tail.splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1]
    if len(line) > 20 and line[4] == "-" and line[19] == " ":  # "2026-11-23 09:10:18 "
        line = line[20:]
    return line.strip()[:limit]
