"""The supervisor's allocator policy (supervisor/server/memory.py), on the real glibc allocator.

Each allocator check runs in a fresh interpreter: glibc fixes its arena limit once, and the
pytest process has long had threads of its own.
"""

from __future__ import annotations

import asyncio
import ctypes
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from aotui.supervisor.server import memory
from tests.conftest import RunningDesktop

Start = Callable[..., RunningDesktop]

MIB = 1 << 20
ARENA_SPAN = 64 * MIB  # what glibc reserves for each heap of an arena other than the main one

if memory._mallopt is None or memory._malloc_trim is None:  # musl and others: nothing to check
    pytest.skip("not glibc: the allocator policy does nothing here", allow_module_level=True)


def _run(code: str, *argv: str) -> str:
    """Run ``code`` in a fresh interpreter with ``argv``; its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *argv],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


#: What each allocator check starts with: libc, and malloc_info's report as text.
PRELUDE = """
    import ctypes, os, re, sys, tempfile, threading
    from aotui.supervisor.server import memory
    if sys.argv[1:] == ["policy"]:
        assert memory.configure_allocator()
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.fdopen.restype = ctypes.c_void_p
    libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    def malloc_info():
        with tempfile.TemporaryFile() as report:
            out = libc.fdopen(os.dup(report.fileno()), b"w")
            libc.malloc_info(0, out)
            libc.fclose(out)
            report.seek(0)
            return report.read().decode()
"""

ARENAS_AFTER_THREADS = """
    together = threading.Barrier(8)
    def allocate():
        libc.malloc(4096)  # from this thread's arena, kept
        together.wait()  # all alive at once: none can hand its arena to the next
    threads = [threading.Thread(target=allocate) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(len(re.findall("<heap nr=", malloc_info())))
"""


def _arenas(*argv: str) -> int:
    return int(_run(PRELUDE + ARENAS_AFTER_THREADS, *argv))


def test_threads_share_the_arenas_the_policy_allows() -> None:
    # Without the policy, glibc gives each of the eight threads an arena (the measure sees them).
    assert _arenas() > memory.ARENA_MAX
    assert _arenas("policy") <= memory.ARENA_MAX


MAPPED_AFTER_A_LARGE_FREE = """
    libc.free(libc.malloc(4 << 20))  # a large frame, mapped, then freed
    kept = [libc.malloc(512 << 10) for _ in range(4)]  # snapshots of half a MiB
    print(re.findall('<total type="mmap" count="(\\d+)"', malloc_info())[-1])
"""


def _mapped(*argv: str) -> int:
    return int(_run(PRELUDE + MAPPED_AFTER_A_LARGE_FREE, *argv))


def test_large_blocks_stay_mapped_after_a_larger_one_was_freed() -> None:
    # Without the policy, glibc raises its mmap threshold to 4 MiB at the free: the half-MiB
    # blocks come from the heap, where their pages stay after they are freed.
    assert _mapped() < 4
    assert _mapped("policy") >= 4


class FragmentedHeap:
    """About 100 MiB of freed blocks in the middle of this process's heap, held by glibc."""

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None)
        self.libc.malloc.restype = ctypes.c_void_p
        self.libc.malloc.argtypes = [ctypes.c_size_t]
        self.libc.free.argtypes = [ctypes.c_void_p]
        self.base = psutil.Process().memory_info().rss
        blocks = [self.libc.malloc(1000) for _ in range(100_000)]
        for block in blocks:
            ctypes.memset(block, 1, 1000)
        for block in blocks[:-1]:
            self.libc.free(block)
        self.pin = blocks[-1]  # at the heap's top: glibc cannot give the heap back by shrinking it
        # What the blocks added: less than 100 MiB when they reused free memory the process
        # already held (earlier tests in this process), so the checks are relative to it.
        self.grown = self.held()
        assert self.grown > 50 * MIB, self.grown / MIB

    def held(self) -> int:
        """Bytes of RSS above what the process had before."""
        return psutil.Process().memory_info().rss - self.base

    def kept(self) -> bool:
        """Whether the freed blocks are still resident (nobody trimmed)."""
        return self.held() > 0.8 * self.grown

    def returned(self) -> bool:
        """Whether most of the freed blocks went back to the system."""
        return self.held() < 0.4 * self.grown

    def close(self) -> None:
        self.libc.free(self.pin)


def test_trim_returns_free_pages_from_the_middle_of_the_heap() -> None:
    heap = FragmentedHeap()
    try:
        assert heap.kept()
        assert memory.trim()
        assert heap.returned(), heap.held() / MIB
    finally:
        heap.close()


async def _until(predicate: Callable[[], bool], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def test_the_periodic_trim_waits_for_an_idle_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "TRIM_EVERY_S", 1.0)
    monkeypatch.setattr(memory, "IDLE_POLL_S", 0.02)
    heap = FragmentedHeap()
    busy = True

    async def scenario() -> None:
        nonlocal busy
        task = asyncio.create_task(memory.trim_when_idle(lambda: busy))
        try:
            assert heap.kept()
            await asyncio.sleep(1.3)  # a trim is due, but a request is being served
            assert heap.kept()
            busy = False
            assert await _until(heap.returned, 5.0), heap.held() / MIB
        finally:
            task.cancel()

    try:
        asyncio.run(scenario())
    finally:
        heap.close()


def test_a_desktop_never_idle_is_trimmed_a_period_late(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "TRIM_EVERY_S", 0.5)
    monkeypatch.setattr(memory, "IDLE_POLL_S", 0.02)
    heap = FragmentedHeap()

    async def scenario() -> None:
        task = asyncio.create_task(memory.trim_when_idle(lambda: True))
        try:
            assert await _until(heap.returned, 5.0), heap.held() / MIB
        finally:
            task.cancel()

    try:
        asyncio.run(scenario())
    finally:
        heap.close()


def _arena_heaps(pid: int) -> int:
    """Heaps of non-main arenas in a process: 64 MiB-aligned anonymous reservations."""
    regions = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        regions.append((start, end, fields[1], len(fields) > 5))
    heaps = 0
    for index, (start, end, perms, named) in enumerate(regions):
        if named or start % ARENA_SPAN or not perms.startswith("rw"):
            continue
        # A heap is its used part (read-write) and, while it is smaller, the reserved rest.
        reserved = end
        if index + 1 < len(regions):
            after = regions[index + 1]
            if after[0] == end and after[2].startswith("---") and not after[3]:
                reserved = after[1]
        heaps += reserved - start == ARENA_SPAN
    return heaps


def test_a_running_supervisor_keeps_to_the_arena_limit(start_desktop: Start) -> None:
    desktop = start_desktop(["echo", "lister"])
    client = desktop.client
    client.execute("<context>open --application app_0; open --application app_1</context>")
    for _ in range(50):  # store writes on the executor's threads, frames on ZeroMQ's
        client.execute('<context app_id="app_0" view_id="view_0">execute bump</context>')
        client.snapshot()
    # The main arena is the brk heap; every other arena is one 64 MiB-aligned heap here.
    assert _arena_heaps(desktop.process.pid) <= memory.ARENA_MAX - 1
