"""The supervisor's allocator policy: few malloc arenas, large buffers mapped, free pages returned.

A desktop runs for days, so its RSS must follow what it holds, not what it once held. Soaks
showed the supervisor's RSS creeping while Python's own objects stayed flat (tracemalloc); much
of the growth was memory glibc's malloc had been given back by the program but kept:

- one arena per thread that ever allocated (the ZeroMQ I/O threads, the executor threads that
  write the store), each holding its own free chunks;
- the mmap threshold, which glibc raises each time a large mapped block is freed, so later
  snapshots, frames and store rows come from the heap and fragment it;
- free pages in the middle of a heap, which glibc returns only from the heap's top.

:func:`configure_allocator` fixes the first two before any thread starts; :func:`trim_when_idle`
returns the free pages (``malloc_trim``) every :data:`TRIM_EVERY_S` while no request is served.
Off glibc (no ``mallopt``/``malloc_trim``) both do nothing. See ``docs/architecture.md``
("Supervisor memory").
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import time
from collections.abc import Callable

__all__ = ["ARENA_MAX", "MMAP_THRESHOLD", "TRIM_EVERY_S", "configure_allocator", "trim"]

log = logging.getLogger("aotui.supervisor")

#: mallopt parameter numbers (glibc's malloc.h).
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

#: malloc arenas: the main one and one the threads share. The GIL serialises Python's own
#: allocations, so more arenas buy no speed, only memory each keeps (the workers use 2 too).
ARENA_MAX = 2
#: Blocks from this size up are mapped and unmapped on free. It is glibc's starting value; setting
#: it stops glibc raising it (up to 32 MiB) after each large free.
MMAP_THRESHOLD = 128 * 1024
#: Seconds between returns of free pages to the kernel.
TRIM_EVERY_S = 30.0
#: Seconds between looks for an idle moment once a trim is due.
IDLE_POLL_S = 0.5

_libc = ctypes.CDLL(None)
_mallopt = getattr(_libc, "mallopt", None)
_malloc_trim = getattr(_libc, "malloc_trim", None)
if _mallopt is not None:
    _mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    _mallopt.restype = ctypes.c_int
if _malloc_trim is not None:
    _malloc_trim.argtypes = [ctypes.c_size_t]
    _malloc_trim.restype = ctypes.c_int


def configure_allocator() -> bool:
    """Limit malloc arenas and fix the mmap threshold; call before any thread starts."""
    if _mallopt is None:
        return False
    # glibc fixes its arena limit when a thread first needs an arena of its own: set it first.
    arenas = _mallopt(_M_ARENA_MAX, ARENA_MAX)
    mapped = _mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    return bool(arenas and mapped)


def trim() -> bool:
    """Return every free page of every arena to the kernel; True if any was returned."""
    return bool(_malloc_trim(0)) if _malloc_trim is not None else False


async def trim_when_idle(busy: Callable[[], bool]) -> None:
    """Trim every :data:`TRIM_EVERY_S`, at a moment no request is served (or a period late)."""
    if _malloc_trim is None:
        return
    while True:
        await asyncio.sleep(TRIM_EVERY_S)
        overdue = time.monotonic() + TRIM_EVERY_S
        # A trim holds each arena's lock while it walks the free chunks (0.2 ms in a soak):
        # taken between requests, it delays none.
        while busy() and time.monotonic() < overdue:
            await asyncio.sleep(IDLE_POLL_S)
        started = time.perf_counter()
        returned = trim()
        took_ms = (time.perf_counter() - started) * 1e3
        log.debug("malloc_trim: returned=%s in %.1f ms", returned, took_ms)
