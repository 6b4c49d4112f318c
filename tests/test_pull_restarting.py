"""A pull of one app that shows no block says why, by the app's state (issue 24: it said "not
running, collapsed, or no such app" while the app was restarting)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from tests.conftest import RunningDesktop

pytestmark = pytest.mark.timeout(60)

Start = Callable[..., RunningDesktop]


def test_a_pull_of_a_restarting_app_says_it_is_restarting(start_desktop: Start) -> None:
    desktop = start_desktop(["slowstart"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    client.execute('<context app_id="app_0" view_id="view_0">execute bump</context>')
    os.kill(desktop.app_pid("app_0") or 0, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while client.status()["apps"][0]["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.01)  # until the desktop has seen the exit (its restore takes 1.5 s)
    with pytest.raises(AotuiError) as restarting:
        client.snapshot(app="app_0")
    assert restarting.value.code is ErrorCode.E_NOT_FOUND
    said = restarting.value.message
    assert "app_0 (Slowstart) is restarting: its worker ended (signal 9)" in said, said
    assert "pull again in a moment" in said
    client.execute("<context>close --application app_0</context>")
    with pytest.raises(AotuiError, match=r"is not running and shows no block; open it first"):
        client.snapshot(app="app_0")
