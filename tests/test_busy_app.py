"""A busy app is served, not killed: over its CPU share while answering, it is throttled."""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BUNDLED_APPS, RunningDesktop, wait_for

Start = Callable[..., RunningDesktop]

pytestmark = pytest.mark.timeout(60)


def row(desktop: RunningDesktop) -> dict[str, Any]:
    return next(r for r in desktop.client.status()["apps"] if r["app"] == "app_0")


def stingy_notes(tmp_path: Path) -> Path:
    """The bundled Notes with a CPU share small enough that a stream of operations exceeds it."""
    app_dir = tmp_path / "notes"
    shutil.copytree(BUNDLED_APPS / "notes", app_dir)
    manifest = json.loads((app_dir / "aoapp.json").read_text())
    manifest["limits"] = {"cpu_percent": 5}
    (app_dir / "aoapp.json").write_text(json.dumps(manifest))
    return app_dir


def test_notes_driven_hard_is_throttled_not_killed(start_desktop: Start, tmp_path: Path) -> None:
    # The issue: one add_note after another crossed cpu_percent for three windows and Notes was
    # killed at the 68th note ("cpu limit").
    desktop = start_desktop([str(stingy_notes(tmp_path))], cpu_window_s=0.3, cpu_strikes=2)
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    block = client.snapshot()
    match = re.search(r'<view id="(view_\d+)" name="Notes">', block)
    assert match
    run = f'<context app_id="app_0" view_id="{match.group(1)}">execute {{}}</context>'
    pid = row(desktop)["pid"]
    added = 0
    end = time.monotonic() + 4.0
    while time.monotonic() < end or added < 150:
        client.execute(run.format(f"add_note --title N{added} --text t{added}"))
        added += 1
    status = row(desktop)
    assert (status["pid"], status["restarts"], status["last_exit"]) == (pid, 0, None)
    assert status["cpu_throttled"] in ("cgroup quota", "idle priority")
    assert "throttled" in client.snapshot()  # the System Logs say so
    wait_for(lambda: f"N{added - 1}" in client.snapshot(), 5, "the last note")
