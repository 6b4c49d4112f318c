"""Resource limits a worker sets on itself: kernel backstops behind the supervisor's watchdog.

``RLIMIT_AS`` limits *virtual* memory, which a Python worker reserves far more of than it uses
(each thread's stack, glibc's 64 MiB malloc arenas, lxml and ZeroMQ mappings); see
:func:`address_space_bytes`. It is a backstop against a single runaway allocation, not the
memory limit itself: that is the cgroup (when root) and the supervisor's RSS watchdog.
"""

from __future__ import annotations

import resource
from collections.abc import Mapping

from aotui.sandbox.linux import libc

__all__ = [
    "ADDRESS_SPACE_BASE_MB",
    "MALLOC_ARENA_MAX",
    "address_space_bytes",
    "apply_limits",
    "lower",
]

MIB = 1024 * 1024

#: Virtual memory an idle worker maps at its peak (interpreter, lxml, pyzmq, a context with its
#: two threads: ≈ 180 MiB measured) plus the one extra malloc arena :func:`apply_limits` allows.
ADDRESS_SPACE_BASE_MB = 384
#: What each thread the ``pids`` limit allows reserves for its stack when ``RLIMIT_STACK`` is
#: unlimited (glibc then uses a fixed default); otherwise the stack limit is used.
DEFAULT_THREAD_STACK_MB = 8
#: glibc's malloc arenas a worker may create. Each one reserves 64 MiB of address space, and
#: glibc would create up to 8 per core; the GIL serialises Python's allocations anyway.
MALLOC_ARENA_MAX = 2
_M_ARENA_MAX = -8


def address_space_bytes(memory_mb: int, pids: int) -> int:
    """The ``RLIMIT_AS`` backstop for a worker with ``memory_mb`` of memory and ``pids`` tasks."""
    stack, _hard = resource.getrlimit(resource.RLIMIT_STACK)
    stack_mb = DEFAULT_THREAD_STACK_MB if stack == resource.RLIM_INFINITY else -(-stack // MIB)
    return (memory_mb + ADDRESS_SPACE_BASE_MB + stack_mb * pids) * MIB


def lower(which: int, value: int) -> None:
    """Set soft and hard limit to ``value`` (capped at the current hard limit), for good."""
    _soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def apply_limits(limits: Mapping[str, int], *, nproc: bool, address_space: bool = True) -> None:
    """Apply the limits; ``nproc`` only when the task count is the worker's own (uid or userns);
    ``address_space`` false leaves ``RLIMIT_AS`` off (a browser reserves terabytes of address
    space it never touches; its memory limit is the cgroup as root, the watchdog otherwise)."""
    # RLIMIT_NPROC counts every task of the real uid in the user namespace: with a shared uid
    # it would count the user's other processes too.
    lower(resource.RLIMIT_CORE, 0)
    # Before any thread exists: threads would otherwise each get an arena of their own.
    libc.mallopt(_M_ARENA_MAX, MALLOC_ARENA_MAX)
    if address_space:
        lower(resource.RLIMIT_AS, address_space_bytes(limits["memory_mb"], limits["pids"]))
    lower(resource.RLIMIT_NOFILE, limits["open_files"])
    lower(resource.RLIMIT_FSIZE, limits["file_size_mb"] * MIB)
    if nproc:
        lower(resource.RLIMIT_NPROC, limits["pids"])
