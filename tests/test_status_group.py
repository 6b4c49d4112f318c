"""``aotui status`` charges an app with its whole process group, double-forked orphans included.

The watchdog already sweeps each worker's process group to enforce its limits; status shows what
that sweep measured: the number of processes, their summed RSS and CPU.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import psutil
import pytest

from aotui.supervisor.interface.reports import format_status
from aotui.supervisor.workers.watchdog import GroupUsage, Watchdog
from tests.conftest import RunningDesktop, wait_for
from tests.test_hostile import _group_with_orphan

MIB = 2**20


def test_the_watchdog_measures_the_whole_group_of_a_worker() -> None:
    leader = _group_with_orphan(40, spin=True)
    try:
        wait_for(lambda: not psutil.Process(leader).children(), 5, "the middle child to go")
        # Limits far above what the group uses: this test measures, it does not kill.
        watchdog = Watchdog(interval_s=0.02, cpu_window_s=0.25, cpu_strikes=1000)
        watchdog.watch("app_9", leader, memory_mb=4096, cpu_percent=10_000)
        assert watchdog.usage(leader) is None  # not sampled yet
        usage: GroupUsage | None = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert watchdog.sample() == []
            usage = watchdog.usage(leader)
            if usage is not None and usage.cpu_percent is not None and usage.processes == 2:
                break
            time.sleep(0.02)
        assert usage is not None, "never sampled"
        assert usage.processes == 2, usage
        assert usage.rss_bytes > psutil.Process(leader).memory_info().rss + 35 * MIB, usage
        assert usage.cpu_percent is not None, usage
        assert usage.cpu_percent > 20, usage  # the spinner
    finally:
        os.killpg(leader, signal.SIGKILL)
        os.waitpid(leader, 0)


def _row(desktop: RunningDesktop, app: str) -> dict[str, Any]:
    return next(r for r in desktop.client.status()["apps"] if r["app"] == app)


@pytest.mark.timeout(90)
def test_status_shows_an_orphan_in_its_app_processes_memory_and_table(
    start_desktop: Callable[..., RunningDesktop],
) -> None:
    desktop = start_desktop(["orphaner"])
    desktop.client.execute("<context>open --application app_0</context>")
    worker = _row(desktop, "app_0")["pid"]
    alone = wait_for(lambda: (row := _row(desktop, "app_0"))["processes"] == 1 and row, 10)
    command = {"app": "app_0", "view": "view_0", "operation": "orphan", "args": {"mb": 24}}
    orphan = desktop.client.execute(command)["results"][0]
    assert psutil.Process(orphan).ppid() != worker  # re-parented away from the worker
    # The group is swept once per CPU window; its CPU % needs a second window.
    grown = wait_for(
        lambda: (
            (row := _row(desktop, "app_0"))["processes"] == 2
            and row["cpu_percent"] is not None
            and row
        ),
        15,
        "the orphan counted",
    )
    assert isinstance(alone, dict)
    assert isinstance(grown, dict)
    assert grown["pid"] == worker
    assert grown["rss_bytes"] > alone["rss_bytes"] + 20 * MIB, (alone, grown)
    assert isinstance(grown["cpu_percent"], float)
    table = format_status(desktop.client.status())
    header, row = (
        line.split() for line in table.splitlines() if line.startswith(("APP ", "app_0 "))
    )
    assert header[:7] == ["APP", "ID", "STATE", "PID", "PROCS", "RSS", "CPU%"], table
    assert row[3:5] == [str(worker), "2"], table
    os.kill(orphan, signal.SIGKILL)
    wait_for(lambda: _row(desktop, "app_0")["processes"] == 1, 15, "the orphan gone")
