"""The watchdog: samples every worker with psutil and names the ones to kill.

- Memory: the worker's private memory (USS: pages only it uses — not shared libraries, not the
  zygote's copy-on-write pages, which is also what its memory cgroup is charged) plus that of
  every other process in its process group, over ``memory_mb`` → kill at once (``memory
  limit``). Sampled every ``interval_s``
  (50 ms by default, so a runaway is killed well within 200 ms of crossing); the kernel limits
  (cgroup memory at +10 %, RLIMIT_AS) are the backstop between two samples. USS costs ~10× RSS
  to read, so RSS is the cheap pre-filter: only a worker whose RSS passed 80 % of its limit has
  its USS measured.
- CPU: over ``cpu_percent`` for ``cpu_strikes`` consecutive CPU windows (``cpu_window_s`` each)
  → a worker that answered requests meanwhile is busy, not runaway: it is throttled (``cpu
  throttled``: :func:`sandbox.cgroups.throttle_cpu` lowers its cgroup quota to its share, or its
  priority to ``SCHED_IDLE``) and keeps serving; one that answered none spins without serving →
  kill (``cpu limit``). One busy burst is allowed; a spinning loop is not.
- Heartbeats are the supervisor's (see :mod:`supervisor.desktop.desktop`); this module only samples.

The family of a worker is its process group, not its parent chain: a double-forked child is
re-parented away from the worker but cannot leave the group (seccomp denies ``setsid`` and
``setpgid``), so an orphan holding memory or spinning is charged to the app and dies with it
(the supervisor kills the whole group). That matters most for an unprivileged desktop, which has
no cgroup to fall back on.

Sampling is cheap (a read of ``/proc/<pid>/statm`` per group member per tick); the groups are
swept once per CPU window, in one pass over ``/proc`` for every worker. :meth:`Watchdog.usage`
hands what was measured (processes, summed RSS and CPU) to ``status``, which shows the group.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from aotui.supervisor.server.registry import Clock

__all__ = [
    "PRECISE_ABOVE",
    "GroupUsage",
    "Limit",
    "Violation",
    "Watchdog",
    "WatchedWorker",
    "process_groups",
]

#: Past this share of its limit (by RSS), a worker's private memory is measured exactly.
PRECISE_ABOVE = 0.8
#: How long an exact measure stands while the group's summed RSS has not grown by more than the
#: headroom it left (a browser's processes share most pages: summed RSS reads ~6x its private
#: memory, and reading every process's smaps each tick cost the supervisor ~17 % CPU).
PRECISE_FOR_S = 1.0
#: A throttled worker counts as over its CPU share from this much of it.
NEAR_SHARE = 0.9


@dataclass
class WatchedWorker:
    """One worker under watch, with its limits and sampling state."""

    app_id: str
    pid: int
    memory_bytes: int
    cpu_percent: float
    process: psutil.Process | None = None
    children: list[psutil.Process] = field(default_factory=list)
    cpu_strikes: int = 0
    last_cpu_time: float | None = None
    last_cpu_at: float = 0.0
    peak_rss: int = 0
    #: How the worker is held to its CPU share (``cgroup quota``, ``idle priority``), or ``""``.
    throttled: str = ""
    #: The group's summed RSS at the last tick and CPU % over the last window (``status``).
    rss: int = 0
    cpu_percent_now: float | None = None
    #: The last exact measure: private memory, the summed RSS then, and when.
    private: int = 0
    private_rss: int = 0
    private_at: float = float("-inf")


@dataclass(frozen=True)
class GroupUsage:
    """What an app's whole process group used when the watchdog last measured it."""

    processes: int
    rss_bytes: int
    #: Over the last CPU window; ``None`` until the first window is over.
    cpu_percent: float | None


class Limit(enum.StrEnum):
    """The limit a worker is past; the values of the two that kill are ``last_exit`` words."""

    #: Its process group's memory: killed (``ExitReason.MEMORY_LIMIT``).
    MEMORY_LIMIT = "memory limit"
    #: Its CPU share, spinning without serving: killed (``ExitReason.CPU_LIMIT``).
    CPU_LIMIT = "cpu limit"
    #: Its CPU share while answering requests: held to it by the kernel, not killed.
    CPU_THROTTLED = "cpu throttled"


@dataclass(frozen=True)
class Violation:
    """A worker past a limit."""

    app_id: str
    pid: int
    reason: Limit
    detail: str


class Watchdog:
    """Decides which workers are over their limits."""

    def __init__(
        self,
        interval_s: float = 0.05,
        cpu_window_s: float = 1.0,
        cpu_strikes: int = 3,
        clock: Clock = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self.cpu_window_s = cpu_window_s
        self.cpu_strikes = cpu_strikes
        self.clock = clock
        self.workers: dict[int, WatchedWorker] = {}

    def watch(self, app_id: str, pid: int, memory_mb: int, cpu_percent: float) -> None:
        """Start watching a worker."""
        try:
            process = psutil.Process(pid)
        except psutil.Error:
            return
        self.workers[pid] = WatchedWorker(
            app_id, pid, memory_mb * 1024 * 1024, cpu_percent, process, last_cpu_at=self.clock()
        )

    def forget(self, pid: int) -> None:
        """Stop watching a worker (it ended)."""
        self.workers.pop(pid, None)

    def sample(self, serving: Callable[[int], bool] = lambda pid: False) -> list[Violation]:
        """One tick: every worker's memory, and CPU when its window is over.

        ``serving(pid)`` says whether the worker answered a request since it was last asked:
        a worker over its CPU share that did is to be throttled, not killed.
        """
        violations: list[Violation] = []
        now = self.clock()
        groups: dict[int, list[int]] | None = None
        for worker in list(self.workers.values()):
            if now - worker.last_cpu_at >= self.cpu_window_s:
                if groups is None:  # one sweep of /proc per tick, for every worker
                    groups = process_groups()
                self._regroup(worker, groups.get(worker.pid, []))
            try:
                violation = self._sample_one(worker, now, serving)
            except psutil.Error:
                self.forget(worker.pid)
                continue
            if violation is not None:
                violations.append(violation)
                if violation.reason is not Limit.CPU_THROTTLED:
                    self.forget(worker.pid)
        return violations

    def family(self, pid: int) -> list[int]:
        """The worker's pid and those of its process group's other members."""
        worker = self.workers.get(pid)
        return [] if worker is None else [pid, *(child.pid for child in worker.children)]

    def usage(self, pid: int | None) -> GroupUsage | None:
        """The worker's process group as last measured, or ``None`` (not watched or sampled)."""
        worker = self.workers.get(pid) if pid is not None else None
        if worker is None or not worker.rss:
            return None
        return GroupUsage(1 + len(worker.children), worker.rss, worker.cpu_percent_now)

    def throttled(self, pid: int | None) -> str:
        """How the worker is held to its CPU share, or ``""`` (not throttled or not watched)."""
        worker = self.workers.get(pid) if pid is not None else None
        return worker.throttled if worker is not None else ""

    def _sample_one(
        self, worker: WatchedWorker, now: float, serving: Callable[[int], bool]
    ) -> Violation | None:
        assert worker.process is not None
        family = [worker.process, *worker.children]
        rss = 0
        for member in family:
            try:
                rss += member.memory_info().rss
            except psutil.Error:
                if member is worker.process:
                    raise
                worker.children.remove(member)
        worker.peak_rss = max(worker.peak_rss, rss)
        worker.rss = rss
        # Private memory grows at most as the summed RSS does (but for shared pages a write
        # makes private, which the measure's expiry bounds): while that growth fits the
        # headroom the last measure left, it stands.
        grown = max(0, rss - worker.private_rss)
        stands = (
            now - worker.private_at < PRECISE_FOR_S
            and worker.private + grown <= worker.memory_bytes
        )
        if rss > PRECISE_ABOVE * worker.memory_bytes and not stands:
            used = sum(_uss(member) for member in family)
            worker.private, worker.private_rss, worker.private_at = used, rss, now
            if used > worker.memory_bytes:
                return Violation(
                    worker.app_id,
                    worker.pid,
                    Limit.MEMORY_LIMIT,
                    f"{used / 2**20:.0f} MB private memory, limit "
                    f"{worker.memory_bytes / 2**20:.0f} MB",
                )
        if now - worker.last_cpu_at < self.cpu_window_s:
            return None
        times = worker.process.cpu_times()
        cpu_time = times.user + times.system + sum(_cpu(c) for c in worker.children)
        if worker.last_cpu_time is not None:
            percent = 100.0 * (cpu_time - worker.last_cpu_time) / (now - worker.last_cpu_at)
            worker.cpu_percent_now = percent
            # Throttled to its share by a cgroup quota, a worker cannot go over it: near it is.
            over = percent > worker.cpu_percent * (NEAR_SHARE if worker.throttled else 1.0)
            served = serving(worker.pid)  # asked every window: answers since the last one
            if over and served:  # busy answering requests: throttle, never kill
                worker.cpu_strikes = 0
                worker.last_cpu_time, worker.last_cpu_at = cpu_time, now
                if worker.throttled:
                    return None
                return Violation(
                    worker.app_id,
                    worker.pid,
                    Limit.CPU_THROTTLED,
                    f"{percent:.0f}% CPU in {self.cpu_window_s:g} s while answering requests, "
                    f"share {worker.cpu_percent:g}%",
                )
            worker.cpu_strikes = worker.cpu_strikes + 1 if over else 0
            if worker.cpu_strikes >= self.cpu_strikes:
                return Violation(
                    worker.app_id,
                    worker.pid,
                    Limit.CPU_LIMIT,
                    f"{percent:.0f}% CPU for {self.cpu_strikes} windows of "
                    f"{self.cpu_window_s:g} s, limit {worker.cpu_percent:g}%",
                )
        worker.last_cpu_time, worker.last_cpu_at = cpu_time, now
        return None

    def _regroup(self, worker: WatchedWorker, members: list[int]) -> None:
        """Take the worker's process group as its family (keeping known ``Process`` objects)."""
        known = {child.pid: child for child in worker.children}
        family: list[psutil.Process] = []
        for pid in members:
            if pid == worker.pid:
                continue
            child = known.get(pid)
            if child is None:
                try:
                    child = psutil.Process(pid)
                except psutil.Error:
                    continue
            family.append(child)
        worker.children = family


def process_groups() -> dict[int, list[int]]:
    """Every live process's pid by its process group id, from one pass over ``/proc``."""
    groups: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return groups
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue  # ended meanwhile
        # "pid (comm) state ppid pgrp …": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and fields[0] != b"Z":
            groups.setdefault(int(fields[2]), []).append(int(name))
    return groups


def _uss(process: psutil.Process) -> int:
    try:
        return int(process.memory_full_info().uss)
    except psutil.Error:
        return 0


def _cpu(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)
