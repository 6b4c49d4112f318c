"""Per-app uids: two allocators in two processes never share one; a dead holder's are reclaimed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.workers.uids import Lease, UidAllocator, process_start

#: A range no account and no real desktop uses (the real one starts at 200000).
BASE = 3_100_000

#: A child that leases ``count`` uids, prints them, and holds them until its stdin closes.
HOLDER = """
import sys
from pathlib import Path
from aotui.supervisor.workers.uids import UidAllocator
allocator = UidAllocator(Path(sys.argv[1]), base=int(sys.argv[2]), count=int(sys.argv[3]))
print(" ".join(str(allocator.allocate(f"app {i}")) for i in range(int(sys.argv[4]))), flush=True)
sys.stdin.read()
"""


def holder(registry: Path, count: int, leases: int) -> subprocess.Popen[str]:
    """Start a process that leases ``leases`` uids out of ``count`` and keeps them."""
    args = [str(registry), str(BASE), str(count), str(leases)]
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_two_processes_never_lease_the_same_uid(tmp_path: Path) -> None:
    registry = tmp_path / "uids"
    # Every child asks for the same keys, so each one's preferred uids are the other's too.
    children = [holder(registry, 40, 20), holder(registry, 40, 20)]
    try:
        leased = [set(map(int, child.stdout.readline().split())) for child in children]  # type: ignore[union-attr]
        assert len(leased[0]) == len(leased[1]) == 20
        assert not leased[0] & leased[1]
        assert leased[0] | leased[1] == set(range(BASE, BASE + 40))
        # The range is used up while both live: a third allocator is refused, clearly.
        with pytest.raises(AotuiError) as refused:
            UidAllocator(registry, base=BASE, count=40).allocate("one more")
        assert refused.value.code is ErrorCode.E_INTERNAL
        assert f"all 40 per-app uids from {BASE} are leased" in refused.value.message
    finally:
        for child in children:
            child.communicate(timeout=10)


def test_the_leases_of_a_dead_holder_are_reclaimed(tmp_path: Path) -> None:
    registry = tmp_path / "uids"
    child = holder(registry, 40, 3)
    try:
        theirs = set(map(int, child.stdout.readline().split()))  # type: ignore[union-attr]
        mine = UidAllocator(registry, base=BASE, count=40)
        assert {lease.uid for lease in mine.leases()} == theirs
    finally:
        child.communicate(timeout=10)
    assert mine.leases() == []
    # The same keys hash to the same uids: free again, they are handed out again.
    assert {mine.allocate(f"app {i}") for i in range(3)} == theirs


def test_a_recycled_pid_does_not_keep_a_lease(tmp_path: Path) -> None:
    registry = tmp_path / "uids"
    start = process_start(os.getpid())
    assert start is not None
    # This very pid, but a process that started at another time: the holder is gone.
    registry.write_text(Lease(BASE, os.getpid(), start - 1, "old").line())
    allocator = UidAllocator(registry, base=BASE, count=5)
    assert allocator.leases() == []
    assert allocator.allocate("new") in range(BASE, BASE + 5)


def test_release_gives_back_only_this_process_s_lease(tmp_path: Path) -> None:
    registry = tmp_path / "uids"
    first = UidAllocator(registry, base=BASE, count=10)
    second = UidAllocator(registry, base=BASE, count=10)
    a, b = first.allocate("a"), second.allocate("b")
    assert a != b
    first.release(a)
    assert {lease.uid for lease in second.leases()} == {b}
    registry.write_text(registry.read_text() + "damaged line\n")
    assert [lease.uid for lease in first.leases()] == [b]  # a damaged line is dropped
