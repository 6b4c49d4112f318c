"""Seed 002's soak, short (issue 23): the scripted AWI-TTY session of ``bench/soak_awi.py``.

The same session as the hour-long bench (``nice .venv/bin/python bench/soak_awi.py --minutes 60``),
for ``AOTUI_AWI_SOAK_MINUTES`` (2 by default), on a real desktop with the bundled Browser and a
loopback site: every reply checked, the Browser worker's restarts read from ``status``, the
supervisor's and the Browser tree's RSS, descriptors and threads sampled; it fails on a crash, a
wrong answer or an error, or growth over the second half past the bench's thresholds. A run this
short judges the Browser tree's RSS only against ``TREE_FLOOR_MB`` (a gross leak): its renderer can
grow for a whole minute before V8 collects, so the tree's slope is judged by the hour's run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from aotui.sandbox import browser
from bench.soak_awi import AwiSession, browser_copy, serve_site
from tests.conftest import RunningDesktop

MINUTES = float(os.environ.get("AOTUI_AWI_SOAK_MINUTES", "2"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        browser.find_browser() is None,
        reason=f"no headless browser installed ({browser.INSTALL_HINT})",
    ),
    pytest.mark.timeout(int(MINUTES * 60) + 240),
]


def test_an_awi_tty_session_runs_without_crash_failure_or_leak(
    start_desktop: Callable[..., RunningDesktop], tmp_path: Path
) -> None:
    with serve_site(tmp_path / "site") as base:
        desktop = start_desktop([str(browser_copy(tmp_path))], allow_private_http=True)
        desktop.client.execute("<context>open --application app_0</context>")
        session = AwiSession(
            desktop.runtime / desktop.name / "rpc.sock", desktop.process.pid, base, rate=6.0
        )
        try:
            report = session.run(MINUTES, sample_s=max(5.0, MINUTES * 60 / 12))
        finally:
            session.close()
    print(report.table())
    assert report.rounds >= 2, report.table()
    assert not report.crashes, report.table()
    assert not report.failures, report.table()
    assert not report.leaks(), report.table()
