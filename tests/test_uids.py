"""Per-app uids: two allocators in two processes never share one; a dead holder's are reclaimed;
the registry is the owner's alone and a lock held by someone else fails an allocation in bounded
time."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.workers.uids import (
    LOCK_WAIT_S,
    REGISTRY,
    Lease,
    UidAllocator,
    process_start,
)

#: A range no account and no real desktop uses (the real one starts at 200000).
BASE = 3_100_000
#: The uid of ``nobody``: another local user.
NOBODY = 65534
ROOT = os.geteuid() == 0

#: A child that holds a shared flock on the file ``argv[1]`` until its stdin closes.
LOCKER = """
import fcntl, sys
registry = open(sys.argv[1])
fcntl.flock(registry, fcntl.LOCK_SH)
print("held", flush=True)
sys.stdin.read()
"""

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


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def opened_as_nobody(directory: Path, name: str) -> str:
    """What ``nobody`` gets opening ``directory/name`` for reading: "opened" or the errno name.

    The child is given ``directory`` open already, so pytest's private 0700 temp directories
    above it do not stop it: only the modes of ``directory`` and the file do."""
    dir_fd = os.open(directory, os.O_PATH | os.O_DIRECTORY)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        result = b"opened"
        try:
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            os.open(name, os.O_RDONLY, dir_fd=dir_fd)
        except OSError as exc:
            result = os.strerror(exc.errno or 0).encode()
        os.write(write, result)
        os._exit(0)
    os.close(write)
    os.close(dir_fd)
    try:
        return os.read(read, 100).decode()
    finally:
        os.close(read)
        os.waitpid(pid, 0)


@pytest.mark.skipif(not ROOT, reason="another uid is only reachable as root")
def test_another_uid_cannot_open_the_registry(tmp_path: Path) -> None:
    registry = tmp_path / "run" / "uids"
    UidAllocator(registry, base=BASE, count=5).allocate("a")
    assert (mode(registry.parent), mode(registry)) == (0o700, 0o600)
    assert opened_as_nobody(registry.parent, "uids") == os.strerror(13)  # EACCES


@pytest.mark.skipif(not ROOT, reason="the real registry is root's")
def test_the_real_registry_is_root_s_alone() -> None:
    UidAllocator().leases()
    assert (REGISTRY.parent.stat().st_uid, REGISTRY.stat().st_uid) == (0, 0)
    assert (mode(REGISTRY.parent), mode(REGISTRY)) == (0o700, 0o600)
    assert opened_as_nobody(REGISTRY.parent, REGISTRY.name) == os.strerror(13)


def test_an_old_world_readable_registry_is_made_private(tmp_path: Path) -> None:
    registry = tmp_path / "run" / "uids"
    registry.parent.mkdir(mode=0o755)
    registry.parent.chmod(0o755)
    start = process_start(os.getpid())
    registry.write_text(Lease(BASE, os.getpid(), start or 0, "mine").line())
    registry.chmod(0o644)
    allocator = UidAllocator(registry, base=BASE, count=5)
    assert [lease.uid for lease in allocator.leases()] == [BASE]  # kept, not recreated
    assert (mode(registry.parent), mode(registry)) == (0o700, 0o600)
    if ROOT:
        assert opened_as_nobody(registry.parent, "uids") == os.strerror(13)


@pytest.mark.timeout(20)
def test_a_lock_held_by_another_process_fails_in_bounded_time(tmp_path: Path) -> None:
    registry = tmp_path / "run" / "uids"
    allocator = UidAllocator(registry, base=BASE, count=5)
    allocator.allocate("a")
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(registry)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert locker.stdout is not None
        assert locker.stdout.readline() == "held\n"
        began = time.monotonic()
        with pytest.raises(AotuiError) as refused:
            allocator.allocate("b")
        took = time.monotonic() - began
        assert LOCK_WAIT_S <= took < LOCK_WAIT_S + 1
        assert refused.value.code is ErrorCode.E_LOCKED
        assert str(registry) in refused.value.message
        assert f"locked by process {locker.pid} " in refused.value.message
        with pytest.raises(AotuiError):
            UidAllocator(registry, base=BASE, count=5, lock_wait=0.1).release(BASE)
    finally:
        locker.kill()
        locker.communicate(timeout=10)
    # Once it lets go, allocation works again.
    assert allocator.allocate("b") in range(BASE, BASE + 5)


def test_a_symlinked_registry_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("precious\n")
    (tmp_path / "run").mkdir(mode=0o700)
    registry = tmp_path / "run" / "uids"
    registry.symlink_to(elsewhere)
    with pytest.raises(AotuiError) as refused:
        UidAllocator(registry, base=BASE, count=5).allocate("a")
    assert refused.value.code is ErrorCode.E_PERMISSION
    assert f"{registry} is a symlink" in refused.value.message
    assert f"Remove {registry}" in refused.value.message
    assert elsewhere.read_text() == "precious\n"
    # A symlinked directory too.
    (tmp_path / "linked").symlink_to(tmp_path / "run")
    with pytest.raises(AotuiError) as refused:
        UidAllocator(tmp_path / "linked" / "uids", base=BASE, count=5).allocate("a")
    assert refused.value.code is ErrorCode.E_PERMISSION
    assert f"is in {tmp_path / 'linked'}, a symlink" in refused.value.message


@pytest.mark.skipif(not ROOT, reason="only root can give a file to another uid")
def test_a_registry_or_directory_of_another_uid_is_refused(tmp_path: Path) -> None:
    registry = tmp_path / "run" / "uids"
    UidAllocator(registry, base=BASE, count=5).allocate("a")
    os.chown(registry, NOBODY, NOBODY)
    with pytest.raises(AotuiError) as refused:
        UidAllocator(registry, base=BASE, count=5).allocate("b")
    assert refused.value.code is ErrorCode.E_PERMISSION
    assert f"{registry} is owned by uid {NOBODY}" in refused.value.message
    os.chown(registry, 0, 0)
    os.chown(registry.parent, NOBODY, NOBODY)
    with pytest.raises(AotuiError) as refused:
        UidAllocator(registry, base=BASE, count=5).allocate("b")
    assert f"is in {registry.parent}, owned by uid {NOBODY}" in refused.value.message


def test_a_lease_names_no_runtime_directory_or_app(tmp_path: Path) -> None:
    registry = tmp_path / "uids"
    UidAllocator(registry, base=BASE, count=5).allocate("/run/user/0/aotui/default notes_app")
    text = registry.read_text()
    assert "notes_app" not in text
    assert "aotui" not in text
