"""Per-app uids that no two live apps on this machine share, whichever desktop runs them.

As root every worker drops to a uid of its own: ``RLIMIT_NPROC`` counts the tasks of a uid, and
file permissions and signals tell uids apart, so two apps sharing one would reach each other (a
pids hog in one would keep the other from starting). Desktops do not know of each other — two
``default`` desktops may run under different ``AOTUI_HOME`` or ``--socket`` — so uids are leased
from one registry per machine, :data:`REGISTRY`, a text file of ``uid pid start label`` lines
changed only under an exclusive ``flock`` of the file.

The registry is the owner's alone (0600, in a 0700 directory): anyone who can open a file can
hold a shared ``flock`` on it, and the supervisor takes this lock on its event loop at every open,
close and restart. It is opened without following symlinks and refused when another uid owns it
or its directory (an older version's 0644 file and 0755 directory of our own are tightened); the
lock is tried without blocking for at most :data:`LOCK_WAIT_S`, then the allocation fails, naming
the holder. Labels are a hash of the key, not the runtime directory and app id.

A lease names the supervisor process holding it (pid and its start time, so a recycled pid does
not count); a lease whose holder is gone is reclaimed by the next allocation. An app asks for the
uid its key hashes to (so an app keeps its uid from run to run while nothing contends for it, and
the files it wrote stay its own) and takes the next free one otherwise. Uids with a passwd entry
are never handed out.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import pwd
import stat
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aotui.protocol.errors import AotuiError, ErrorCode

__all__ = [
    "LOCK_WAIT_S",
    "REGISTRY",
    "UID_BASE",
    "UID_COUNT",
    "Lease",
    "UidAllocator",
    "lock_holders",
    "process_start",
]

#: The machine's registry of leased uids (root only; ``/run`` is emptied at boot, as are leases).
REGISTRY = Path("/run/aotui/uids")
#: The first per-app uid, far above the uids and ids that distributions hand out.
UID_BASE = 200_000
#: How many per-app uids there are.
UID_COUNT = 100_000
#: How long an allocation or release waits for another process's lock on the registry (the
#: supervisor waits on its event loop; a holder keeps it for a millisecond or two).
LOCK_WAIT_S = 2.0
#: The first pause between two tries of the lock; it doubles up to :data:`_LOCK_RETRY_MAX_S`.
_LOCK_RETRY_S = 0.002
_LOCK_RETRY_MAX_S = 0.1


@dataclass(frozen=True)
class Lease:
    """One uid held by one live supervisor process."""

    uid: int
    pid: int
    start: int
    label: str

    def line(self) -> str:
        """The lease as one registry line."""
        return f"{self.uid} {self.pid} {self.start} {self.label}\n"

    @classmethod
    def parse(cls, line: str) -> Lease | None:
        """A lease from a registry line, or ``None`` for a damaged one."""
        parts = line.rstrip("\n").split(" ", 3)
        try:
            return cls(int(parts[0]), int(parts[1]), int(parts[2]), parts[3])
        except (IndexError, ValueError):
            return None


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot), or ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields follow its last ')'.
    fields = data[data.rindex(b")") + 2 :].split()
    return int(fields[19])


def _alive(lease: Lease) -> bool:
    return process_start(lease.pid) == lease.start


def lock_holders(fd: int) -> list[int]:
    """The pids /proc/locks names as holding a lock on the file open at ``fd`` (waiters not
    counted; empty when it cannot tell, e.g. a holder in another pid namespace)."""
    info = os.fstat(fd)
    device = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF"; a waiter has "->" after the "1:".
        if len(fields) >= 6 and fields[1] != "->" and fields[5] == device:
            with contextlib.suppress(ValueError):
                if (pid := int(fields[4])) > 0:
                    pids.append(pid)
    return pids


def _refuse(path: Path, why: str, culprit: Path | None = None) -> AotuiError:
    return AotuiError(
        ErrorCode.E_PERMISSION,
        f"the per-app uid registry {path} {why}; refusing to use it (another user could hold "
        f"or forge its leases). Remove {culprit or path} while no desktop runs, and start again",
    )


def _open_registry(path: Path) -> int:
    """``path`` opened for reading and writing, made 0600 in a 0700 directory if this process
    owns both; refused (symlinked, or owned by another uid) otherwise."""
    directory = path.parent
    me = os.geteuid()
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
            why = f"is in {directory}, a symlink or not a directory"
            raise _refuse(path, why, directory) from exc
        raise AotuiError(ErrorCode.E_IO, f"cannot open the directory of {path}: {exc}") from exc
    try:
        held = os.fstat(dir_fd)
        if held.st_uid != me:
            raise _refuse(path, f"is in {directory}, owned by uid {held.st_uid}", directory)
        if held.st_mode & 0o077:
            os.fchmod(dir_fd, 0o700)  # made 0755 by an older version
        try:
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(path.name, flags, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _refuse(path, "is a symlink") from exc
            raise AotuiError(ErrorCode.E_IO, f"cannot open {path}: {exc}") from exc
    finally:
        os.close(dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(path, "is not a regular file")
        if info.st_uid != me:
            raise _refuse(path, f"is owned by uid {info.st_uid}")
        if info.st_mode & 0o077:
            os.fchmod(fd, 0o600)  # made 0644 by an older version
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lock(fd: int, path: Path, wait: float) -> None:
    """Take the exclusive ``flock`` on ``fd``, trying for at most ``wait`` seconds."""
    deadline = time.monotonic() + wait
    pause = _LOCK_RETRY_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(pause, left))
            pause = min(pause * 2, _LOCK_RETRY_MAX_S)
    holders = sorted(set(lock_holders(fd)))
    by = f"process {', '.join(map(str, holders))}" if holders else "another process"
    raise AotuiError(
        ErrorCode.E_LOCKED,
        f"the per-app uid registry {path} has been locked by {by} for over {wait:g} s; "
        "no uid was leased or given back. Stop whatever holds it and retry",
    )


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


class UidAllocator:
    """Leases uids from the registry at ``path`` on behalf of this process."""

    def __init__(
        self,
        path: Path = REGISTRY,
        base: int = UID_BASE,
        count: int = UID_COUNT,
        lock_wait: float = LOCK_WAIT_S,
    ) -> None:
        self.path = path
        self.base = base
        self.count = count
        self.lock_wait = lock_wait
        self.pid, self.start = self._holder()

    def _holder(self) -> tuple[int, int]:
        """This process as a lease holder: pid and start time (again after a fork)."""
        pid = os.getpid()
        if getattr(self, "pid", None) == pid:
            return self.pid, self.start
        start = process_start(pid)
        if start is None:
            raise OSError(f"cannot read /proc/{pid}/stat to name this process's leases")
        return pid, start

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[Lease]]:
        """The live leases, under the registry's lock; what the body leaves is written back."""
        fd = _open_registry(self.path)
        with os.fdopen(fd, "r+") as registry:
            # flock, not lockf: it belongs to this open file, so two allocators in one process
            # exclude each other too.
            _lock(fd, self.path, self.lock_wait)
            leases = [lease for line in registry if (lease := Lease.parse(line))]
            live = [lease for lease in leases if _alive(lease)]
            yield live
            registry.seek(0)
            registry.writelines(lease.line() for lease in live)
            # Cut after writing, not before: emptying the file first frees its block and writing
            # takes a new one, ~1.5 ms on an ext4 /run for each app a desktop starts.
            registry.truncate()
            registry.flush()

    def allocate(self, key: str, label: str = "") -> int:
        """A uid no live lease holds, preferring the one ``key`` hashes to."""
        self.pid, self.start = self._holder()
        with self._locked() as leases:
            taken = {lease.uid for lease in leases}
            first = zlib.crc32(key.encode()) % self.count
            for step in range(self.count):
                uid = self.base + (first + step) % self.count
                if uid not in taken and not _has_account(uid):
                    name = "".join(c if c.isprintable() and c != "\n" else "?" for c in label)
                    # Not the key: it names a desktop's runtime directory and the app.
                    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
                    leases.append(Lease(uid, self.pid, self.start, name or digest))
                    return uid
        raise AotuiError(
            ErrorCode.E_INTERNAL,
            f"all {self.count} per-app uids from {self.base} are leased (see {self.path}); "
            "stop some desktops",
        )

    def release(self, uid: int) -> None:
        """Give ``uid`` back (a no-op when this process does not hold it)."""
        self.pid, self.start = self._holder()
        with self._locked() as leases:
            leases[:] = [
                lease for lease in leases if not (lease.uid == uid and lease.pid == self.pid)
            ]

    def leases(self) -> list[Lease]:
        """The live leases of every process (stale ones are dropped on the way)."""
        with self._locked() as leases:
            return list(leases)
