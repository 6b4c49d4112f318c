"""Per-app uids that no two live apps on this machine share, whichever desktop runs them.

As root every worker drops to a uid of its own: ``RLIMIT_NPROC`` counts the tasks of a uid, and
file permissions and signals tell uids apart, so two apps sharing one would reach each other (a
pids hog in one would keep the other from starting). Desktops do not know of each other — two
``default`` desktops may run under different ``AOTUI_HOME`` or ``--socket`` — so uids are leased
from one registry per machine, :data:`REGISTRY`, a text file of ``uid pid start label`` lines
changed only under an exclusive ``flock`` of the file.

A lease names the supervisor process holding it (pid and its start time, so a recycled pid does
not count); a lease whose holder is gone is reclaimed by the next allocation. An app asks for the
uid its key hashes to (so an app keeps its uid from run to run while nothing contends for it, and
the files it wrote stay its own) and takes the next free one otherwise. Uids with a passwd entry
are never handed out.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aotui.protocol.errors import AotuiError, ErrorCode

__all__ = ["REGISTRY", "UID_BASE", "UID_COUNT", "Lease", "UidAllocator", "process_start"]

#: The machine's registry of leased uids (root only; ``/run`` is emptied at boot, as are leases).
REGISTRY = Path("/run/aotui/uids")
#: The first per-app uid, far above the uids and ids that distributions hand out.
UID_BASE = 200_000
#: How many per-app uids there are.
UID_COUNT = 100_000


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


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


class UidAllocator:
    """Leases uids from the registry at ``path`` on behalf of this process."""

    def __init__(self, path: Path = REGISTRY, base: int = UID_BASE, count: int = UID_COUNT) -> None:
        self.path = path
        self.base = base
        self.count = count
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
        self.path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "r+") as registry:
            # flock, not lockf: it belongs to this open file, so two allocators in one process
            # exclude each other too.
            fcntl.flock(registry, fcntl.LOCK_EX)
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
                    leases.append(Lease(uid, self.pid, self.start, name or key))
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
