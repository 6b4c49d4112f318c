"""Back-off punishes a crash loop, not an app whose earlier restarts took (issue 11 item 12).

Under load, an app killed now and then waited out a back-off built from kills long survived
(worker kill → running p50 0.69 s, 0.19 s of it the restart). Only crashes that come soon after
their restart (the worker served less than ``STABLE_S``) grow the back-off now.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from aotui.supervisor.workers.restart import STABLE_S, RestartPolicy, RestartTracker
from tests.conftest import RunningDesktop, wait_for
from tests.test_supervisor_units import FakeClock

Start = Callable[..., RunningDesktop]

pytestmark = pytest.mark.timeout(60)


def _tracker(clock: FakeClock, **policy: object) -> RestartTracker:
    return RestartTracker(RestartPolicy.from_dict(policy), clock)


def test_a_crash_after_the_worker_served_awhile_restarts_at_once() -> None:
    clock = FakeClock()
    tracker = _tracker(clock, max_restarts=20, period_s=60, backoff_s=1, backoff_max_s=30)
    delays = []
    for _ in range(6):
        clock.advance(2)
        delays.append(tracker.decide(True, served_s=2).delay_s)
    assert delays == [0, 0, 0, 0, 0, 0]


def test_quick_crashes_still_back_off_and_a_stable_run_ends_the_loop() -> None:
    clock = FakeClock()
    tracker = _tracker(clock, max_restarts=20, period_s=60, backoff_s=1, backoff_max_s=30)
    quick = STABLE_S / 2
    assert [tracker.decide(True, served_s=quick).delay_s for _ in range(4)] == [0, 1, 2, 4]
    assert tracker.decide(True, served_s=STABLE_S).delay_s == 0  # that restart took
    assert [tracker.decide(True, served_s=quick).delay_s for _ in range(2)] == [1, 2]


def test_the_intensity_limit_holds_whatever_the_workers_served() -> None:
    clock = FakeClock()
    tracker = _tracker(clock, max_restarts=3, period_s=60)
    for _ in range(3):
        assert tracker.decide(True, served_s=10).restart
    assert tracker.decide(True, served_s=10).failed


def _pid(desktop: RunningDesktop) -> int | None:
    row = desktop.client.status()["apps"][0]
    return row["pid"] if row["state"] == "running" else None


def test_a_worker_killed_again_after_serving_is_back_without_its_back_off(
    start_desktop: Start,
) -> None:
    # A 20 s first back-off: were the second kill counted as a crash loop, the app would stay
    # down far past the deadline below.
    desktop = start_desktop(["echo"], max_restarts=10, restart_backoff_s=20.0)
    desktop.client.execute("<context>open --application app_0</context>")
    for kill in range(3):
        pid = wait_for(lambda: _pid(desktop), 15, "app_0 running")
        time.sleep(STABLE_S + 0.2)  # it serves a while: the restart took
        assert isinstance(pid, int)
        os.kill(pid, signal.SIGKILL)
        began = time.monotonic()

        def restarted(old: int = pid) -> bool:
            return _pid(desktop) not in (None, old)

        wait_for(restarted, 15, f"restart {kill}")
        assert time.monotonic() - began < 10
    row = desktop.client.status()["apps"][0]
    assert row["restarts"] == 3
    assert desktop.client.execute(
        '<context app_id="app_0" view_id="view_0">execute bump</context>'
    )["results"] == [1]
