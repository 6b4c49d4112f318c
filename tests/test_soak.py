"""The soak: a scripted agent on several apps for minutes while workers are killed at random.

``pytest tests/test_soak.py`` runs it for 2 minutes (the CI default); ``--soak-seconds 3600``
runs it for an hour.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import RunningDesktop
from tests.soak import SOAK_APPS, SOAK_SETTINGS, run_soak

Start = Callable[..., RunningDesktop]


@pytest.mark.slow
def test_soak(start_desktop: Start, request: pytest.FixtureRequest) -> None:
    seconds = float(request.config.getoption("--soak-seconds"))
    desktop = start_desktop(SOAK_APPS, **SOAK_SETTINGS)
    report = run_soak(desktop.client, desktop.process.pid, seconds)
    print(f"soak {seconds:.0f} s: {report.commands} commands, {report.kills} kills")
    print(f"errors {report.errors}, first messages {report.messages}")
    print(report.rss_table())
    print(f"RSS after warm-up {report.rss['warm'] / 2**20:.1f} MB, end {report.growth():+.1f} %")
    assert report.commands > 100, report
    assert report.kills > 0, "the soak never killed a worker"
    assert report.lost == [], report.lost
    assert report.unanswered == [], report.unanswered
    # E_INTERNAL is a bug of ours (CONTRACT §7): a killed worker is E_APP_ERROR or E_TIMEOUT.
    assert "E_INTERNAL" not in report.errors, report.messages["E_INTERNAL"]
    # The supervisor's memory follows what it holds (server/memory.py), not how long it ran.
    assert report.growth() <= 10.0, report.rss_table()
    assert report.fds["end"] <= report.fds["warm"] * 1.10, report.fds
