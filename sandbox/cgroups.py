"""cgroup v1 memory, pids and CPU limits for one worker, and their removal after it ends.

A worker (still root, before it drops its uid) creates ``/sys/fs/cgroup/<controller>/aotui/
<app>-<pid>`` for each controller, writes its limits and moves itself in. The name is derivable
from what the launcher knows (app and worker pid), so whoever reaps the worker — the zygote —
calls :func:`remove_cgroups` with the same two values; :func:`sweep_cgroups` removes what a
crashed zygote left behind. Standard library only, on purpose: the
zygote may use it without importing anything else of the sandbox.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import time
from collections.abc import Mapping

__all__ = [
    "CGROUP_ROOT",
    "CONTROLLERS",
    "CPU_BACKSTOP",
    "MEMORY_BACKSTOP",
    "cgroup_name",
    "cgroup_paths",
    "cpu_cgroup",
    "join_cgroups",
    "oom_killed",
    "remove_cgroups",
    "sweep_cgroups",
    "throttle_cpu",
]

CGROUP_ROOT = "/sys/fs/cgroup"
#: The v1 controllers a worker is limited by.
CONTROLLERS = ("memory", "pids", "cpu")
#: The directory under each controller that holds every worker's cgroup.
PARENT = "aotui"
#: CFS period; the quota is a share of it (more than 100 % means more than one core). Short: a
#: group may spend a period's quota on every core at once and then wait, so with the kernel's
#: default 100 ms a browser (many processes) ran on both cores for 50 ms at a time and its
#: neighbours waited that long (bench_hostile W5: a neighbour's execute p99 5 -> 42-49 ms; with
#: 10 ms, 7 -> 11 ms).
CPU_PERIOD_US = 10_000
#: The cgroup limits are backstops behind the supervisor's watchdog, which kills a worker over
#: its ``memory_mb`` or ``cpu_percent`` and says why. Set exactly at the limit, the kernel would
#: throttle a spinning worker to its share (so the watchdog never sees it over) and OOM-kill a
#: growing one before the watchdog could name the reason; set this far above, it still caps the
#: peak (the cgroup at +7 % keeps private memory within limit + 10 %, measured) and the CPU a
#: runaway takes if the watchdog is late.
MEMORY_BACKSTOP = 1.07
CPU_BACKSTOP = 2


def cgroup_name(app: str, pid: int) -> str:
    """``<app>-<pid>`` with anything but ``[A-Za-z0-9._-]`` replaced, so it is one path part."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", app).lstrip(".") or "app"
    return f"{safe[:64]}-{pid}"


def cgroup_paths(app: str, pid: int, root: str = CGROUP_ROOT) -> dict[str, str]:
    """The worker's cgroup directory per controller."""
    name = cgroup_name(app, pid)
    return {c: os.path.join(root, c, PARENT, name) for c in CONTROLLERS}


def _write(directory: str, name: str, value: int | str) -> None:
    with open(os.path.join(directory, name), "w") as handle:
        handle.write(str(value))


def _limit(controller: str, directory: str, limits: Mapping[str, int]) -> None:
    if controller == "memory":
        limit = int(limits["memory_mb"] * 1024 * 1024 * MEMORY_BACKSTOP)
        _write(directory, "memory.limit_in_bytes", limit)
        # Swap counts too, or a runaway would page out instead of being stopped.
        if os.path.exists(os.path.join(directory, "memory.memsw.limit_in_bytes")):
            _write(directory, "memory.memsw.limit_in_bytes", limit)
    elif controller == "pids":
        _write(directory, "pids.max", limits["pids"])
    else:
        _write(directory, "cpu.cfs_period_us", CPU_PERIOD_US)
        quota = max(1000, CPU_BACKSTOP * limits["cpu_percent"] * CPU_PERIOD_US // 100)
        _write(directory, "cpu.cfs_quota_us", quota)


def join_cgroups(app: str, limits: Mapping[str, int], root: str = CGROUP_ROOT) -> None:
    """Create this process's cgroups with ``limits`` and move into them; raises ``OSError``."""
    pid = os.getpid()
    for controller, directory in cgroup_paths(app, pid, root).items():
        if not os.path.isdir(os.path.join(root, controller)):
            raise FileNotFoundError(errno.ENOENT, f"no cgroup v1 {controller} controller", root)
        os.makedirs(directory, mode=0o755, exist_ok=True)
        _limit(controller, directory, limits)
        _write(directory, "cgroup.procs", pid)


def cpu_cgroup(pid: int, root: str = CGROUP_ROOT) -> str | None:
    """The directory of ``pid``'s cgroup v1 CPU controller, if it is in one of aotui's."""
    try:
        with open(f"/proc/{pid}/cgroup") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(",") and path.startswith(f"/{PARENT}/"):
            directory = os.path.join(root, "cpu", path.lstrip("/"))
            return directory if os.path.isdir(directory) else None
    return None


def throttle_cpu(pids: list[int], cpu_percent: float, root: str = CGROUP_ROOT) -> str:
    """Hold a busy worker (its first pid) and its family to ``cpu_percent``; how it was done.

    With a cgroup, the kernel's CFS quota is lowered from its backstop to the share itself
    (``cgroup quota``); otherwise each process gets the lowest priority, ``SCHED_IDLE``
    (``idle priority``), so it runs only when nothing else wants the CPU. ``""``: neither took.
    """
    directory = cpu_cgroup(pids[0], root) if pids else None
    if directory is not None:
        try:
            _write(directory, "cpu.cfs_quota_us", max(1000, int(cpu_percent * CPU_PERIOD_US / 100)))
            return "cgroup quota"
        except OSError:
            pass
    done = ""
    for pid in pids:
        try:
            os.setpriority(os.PRIO_PROCESS, pid, 19)
            done = "idle priority"
            os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
        except OSError:
            continue
    return done


def oom_killed(app: str, pid: int, root: str = CGROUP_ROOT) -> bool:
    """Whether the kernel OOM-killed inside the worker's memory cgroup (read before removal)."""
    directory = cgroup_paths(app, pid, root)["memory"]
    try:
        with open(os.path.join(directory, "memory.oom_control")) as handle:
            for line in handle:
                name, _, value = line.partition(" ")
                if name == "oom_kill" and int(value) > 0:
                    return True
        with open(os.path.join(directory, "memory.failcnt")) as handle:
            return int(handle.read().strip() or 0) > 0
    except (OSError, ValueError):
        return False


def remove_cgroups(app: str, pid: int, root: str = CGROUP_ROOT) -> list[str]:
    """Kill whatever is left in the worker's cgroups and remove them; returns what failed."""
    failures: list[str] = []
    for directory in cgroup_paths(app, pid, root).values():
        if not os.path.isdir(directory):
            continue
        # A worker's children outlive it; they would keep the directory busy.
        for _attempt in range(50):
            try:
                os.rmdir(directory)
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    failures.append(f"{directory}: {exc.strerror}")
                    break
                _kill_members(directory)
        else:
            failures.append(f"{directory}: still busy")
    return failures


def sweep_cgroups(root: str = CGROUP_ROOT) -> list[str]:
    """Remove the cgroups of workers that are gone (a zygote that died could not); returns them."""
    removed = []
    for controller in CONTROLLERS:
        parent = os.path.join(root, controller, PARENT)
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(parent):
                pid = name.rpartition("-")[2]
                directory = os.path.join(parent, name)
                # Only a dead worker's: a live one may not have moved itself in yet.
                if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
                    continue
                with contextlib.suppress(OSError):  # busy: its leftovers are still running
                    os.rmdir(directory)
                    removed.append(directory)
    return removed


def _kill_members(directory: str) -> None:
    try:
        with open(os.path.join(directory, "cgroup.procs")) as handle:
            members = [int(line) for line in handle if line.strip()]
    except OSError:
        return
    for member in members:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)
    # SIGKILLed tasks leave the cgroup as they exit, a moment later.
    time.sleep(0.002)
