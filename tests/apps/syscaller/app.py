"""Makes raw syscalls, and does the ordinary work apps do, inside a real worker (seccomp tests).

``call --number N`` makes syscall ``N`` with zero arguments and answers ``ok`` or the errno's
name; ``work`` runs threads, a forked child, asyncio, sqlite, mmap, polling and the C extensions
apps import, and answers what each gave.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import importlib
import mmap
import os
import selectors
import signal
import socket
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable

from aotui.sandbox.sdk import App, View, operation

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def raw_syscall(number: int) -> str:
    """Syscall ``number`` with zero arguments: ``ok`` or the errno's name."""
    zero = ctypes.c_long(0)
    if _libc.syscall(ctypes.c_long(number), zero, zero, zero, zero, zero, zero) != -1:
        return "ok"
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def _threads() -> object:
    results: list[int] = []
    workers = [threading.Thread(target=results.append, args=(n,)) for n in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sorted(results) == list(range(8))


def _fork() -> object:
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _asyncio() -> object:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        left, right = socket.socketpair()
        reader, writer = await asyncio.open_unix_connection(sock=left)
        right.sendall(b"hi")
        received = await reader.readexactly(2)
        writer.close()
        right.close()
        slept = await asyncio.sleep(0.01, result=1)
        threaded = await loop.run_in_executor(None, sum, [1, 2])
        return len(received) + slept + threaded

    return asyncio.run(main())


def _sqlite() -> object:
    # In memory: as root a file under TMPDIR (a /proc/self/fd/N path) is one SQLite cannot open.
    db = sqlite3.connect(":memory:")
    with db:
        db.execute("create table t (x)")
        db.executemany("insert into t values (?)", [(n,) for n in range(100)])
    (total,) = db.execute("select sum(x) from t").fetchone()
    db.close()
    return total


def _temp_file() -> object:
    with tempfile.NamedTemporaryFile("w+") as handle:
        handle.write("scratch")
        handle.flush()
        handle.seek(0)
        return handle.read()


def _mmap_and_memfd() -> object:
    fd = os.memfd_create("scratch")
    os.write(fd, b"x" * 4096)
    with mmap.mmap(fd, 4096) as mapped:
        first = mapped[:1]
    os.close(fd)
    anonymous = mmap.mmap(-1, 1 << 20)
    anonymous[-1:] = b"y"
    anonymous.close()
    return first.decode()


def _polling() -> object:
    left, right = socket.socketpair()
    right.send(b"ping")
    with selectors.DefaultSelector() as selector:  # epoll
        selector.register(left, selectors.EVENT_READ)
        ready = len(selector.select(timeout=1))
    return ready + len(left.recv(4))


def _timers() -> object:
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    signal.setitimer(signal.ITIMER_REAL, 0.01)
    deadline = time.monotonic() + 5
    while not fired and time.monotonic() < deadline:
        time.sleep(0.005)
    signal.signal(signal.SIGALRM, previous)
    return fired == [signal.SIGALRM]


def _extensions() -> object:
    for name in ("_decimal", "zoneinfo", "lxml.etree", "psutil", "email.mime.text", "uuid"):
        importlib.import_module(name)
    import lxml.etree
    import psutil

    root = lxml.etree.fromstring("<a><b>1</b></a>")
    return [root.findtext("b"), (psutil.cpu_count() or 0) >= 1]


WORK: dict[str, Callable[[], object]] = {
    "threads": _threads,
    "fork": _fork,
    "asyncio": _asyncio,
    "sqlite": _sqlite,
    "tempfile": _temp_file,
    "mmap": _mmap_and_memfd,
    "polling": _polling,
    "timers": _timers,
    "extensions": _extensions,
    "random": lambda: len(os.urandom(16)),
}


class SyscallerView(View):
    def render(self) -> str:
        return """<section view="Syscaller"><p>Ready.</p>
<button operation="call" args='{"number": "string"}'>Call</button>
<button operation="work">Work</button></section>"""

    @operation
    def call(self, number: str) -> str:
        return raw_syscall(int(str(number)))

    @operation
    def work(self) -> dict[str, object]:
        results: dict[str, object] = {}
        for name, job in WORK.items():
            try:
                results[name] = job()
            except Exception as exc:  # reported, so one failure does not hide the others
                results[name] = f"{type(exc).__name__}: {exc}"
        return results


class SyscallerApp(App):
    def roots(self) -> list[View]:
        return [SyscallerView("syscaller")]


app = SyscallerApp()
