"""Per-app stdout/stderr, captured from a pipe into size-rotated files.

Each worker's fds 1 and 2 are the write end of a pipe the supervisor created; the supervisor reads
the other end on its loop and appends to ``AOTUI_HOME/logs/<desktop>/<app_N>.log``, rotating at
``max_bytes`` into ``.1`` … ``.<backups>``. An app that prints without end therefore costs at
most ``(max_bytes + 64 KiB) × (backups + 1)`` of disk (a file rotates after the read that
crossed the size), and the worker itself never holds a file descriptor of
the log (it could not be trusted to rotate it).

Output costs the supervisor a bounded amount, charged to the app: a token bucket admits
``rate_bytes`` a second (:data:`OUTPUT_BYTES_PER_S`) with bursts of up to ``burst_bytes``
(:data:`OUTPUT_BURST_BYTES`). Past that, the rest of the chunk that crossed the budget is dropped
and counted, and the pipe is not read again for a second — so a flooding app blocks in its own
``write`` (its time, not the supervisor's), and a line in the log says how many bytes were
dropped. Lines are stamped with one ``bytes.replace``, so a flood of empty lines costs no more
than any other bytes. A traceback the worker reports on its channel is written here too
(:meth:`AppLog.note`), charged to the same budget and rotated with the rest: the channel's frames
are up to 4 MiB, and a file opened and appended per line was neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "OUTPUT_BURST_BYTES",
    "OUTPUT_BYTES_PER_S",
    "AppLog",
    "last_output",
    "log_files",
    "log_size",
]

#: Bytes of stdout/stderr per second an app may make the supervisor read and write…
OUTPUT_BYTES_PER_S = 64 << 10
#: …and in one burst.
OUTPUT_BURST_BYTES = 256 << 10
#: Seconds the pipe is left unread once an app is over its budget.
_PAUSE_S = 1.0
#: Reads of what is left in the pipe when the worker has ended (the pipe holds 64 KiB).
_DRAIN_READS = 4


class AppLog:
    """The supervisor's end of one app's output pipe, written to a rotating file."""

    def __init__(
        self,
        path: Path,
        max_bytes: int = 1 << 20,
        backups: int = 3,
        rate_bytes: int = OUTPUT_BYTES_PER_S,
        on_over: Callable[[], None] | None = None,
        burst_bytes: int = OUTPUT_BURST_BYTES,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.rate_bytes = rate_bytes
        self.burst_bytes = max(burst_bytes, rate_bytes)
        #: Called once, the first time the app prints past its budget.
        self.on_over = on_over
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(self.read_fd, False)
        self._file = open(path, "ab")  # noqa: SIM115 -- lives as long as the worker
        self._partial = b""
        self._loop = asyncio.get_running_loop()
        self._tokens = float(self.burst_bytes)
        self._stamp = self._loop.time()
        #: Bytes dropped in the current window, and in all.
        self.dropped = 0
        self.dropped_total = 0
        self._resume: asyncio.TimerHandle | None = None
        self._loop.add_reader(self.read_fd, self._readable)

    def handed_over(self) -> None:
        """The worker has its copy of the write end; drop ours so EOF means it ended."""
        with contextlib.suppress(OSError):
            os.close(self.write_fd)
        self.write_fd = -1

    def _refill(self) -> None:
        now = self._loop.time()
        self._tokens = min(self.burst_bytes, self._tokens + (now - self._stamp) * self.rate_bytes)
        self._stamp = now

    def note(self, text: str) -> bool:
        """Append ``text`` (a traceback the worker reported) as whole lines, charged to the same
        budget as the app's output: a note past it is dropped, counted, and said so later.
        ``False`` when this log is closed (the note is not taken)."""
        if self.read_fd < 0:
            return False
        data = text.rstrip("\n").encode(errors="replace") + b"\n"
        self._refill()
        if len(data) > self._tokens:
            self._over(len(data))
            return True
        self._tokens -= len(data)
        self._write(b"\n" if self._partial else b"")  # not inside a line the app is printing
        self._write(data)
        return True

    def _readable(self) -> None:
        self._refill()
        try:
            data = os.read(self.read_fd, 65536)
        except BlockingIOError:
            return
        if not data:
            self.close()
            return
        room = int(self._tokens)
        if len(data) > room:
            self._over(len(data) - room)
            data = data[:room]
            # Not read again for a while: the app blocks in its own write until then.
            self._loop.remove_reader(self.read_fd)
            self._resume = self._loop.call_later(_PAUSE_S, self._resume_reading)
        self._tokens -= len(data)
        if data:
            self._write(data)

    def _over(self, count: int) -> None:
        if not self.dropped_total and self.on_over is not None:
            self.on_over()
        self.dropped += count
        self.dropped_total += count

    def _report_dropped(self) -> None:
        if self.dropped:
            self._write(b"\n" if self._partial else b"")
            self._write(
                f"[aotui: {self.dropped} bytes of output dropped: over "
                f"{self.rate_bytes} bytes a second]\n".encode()
            )
            self.dropped = 0

    def _resume_reading(self) -> None:
        self._resume = None
        if self.read_fd >= 0:
            self._report_dropped()
            self._loop.add_reader(self.read_fd, self._readable)

    def _write(self, data: bytes) -> None:
        chunk = self._partial + data
        cut = chunk.rfind(b"\n")
        if cut < 0:
            self._partial = chunk[-4096:]  # an endless line cannot grow without bound
            return
        self._partial = chunk[cut + 1 :][-4096:]
        stamp = time.strftime("%Y-%m-%d %H:%M:%S ").encode()
        self._file.write(stamp + chunk[:cut].replace(b"\n", b"\n" + stamp) + b"\n")
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
        if self._resume is not None:
            self._resume.cancel()
        with contextlib.suppress(ValueError, RuntimeError):
            self._loop.remove_reader(self.read_fd)
        self._report_dropped()
        with contextlib.suppress(OSError):  # what the worker wrote just before it ended
            for _ in range(_DRAIN_READS):
                data = os.read(self.read_fd, 65536)
                if not data:
                    break
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
