"""An ``open`` that races a crashed worker's restart gets the app back, never E_INTERNAL.

Found by the soak: ``open`` arriving while the restart path discarded the dead worker started the
app itself; the restart path then marked the starting app ``restarting`` and the open's own
start ended in "illegal transition restarting → running" (E_INTERNAL).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from tests.conftest import RunningDesktop, wait_for

Start = Callable[..., RunningDesktop]


def _pid(desktop: RunningDesktop) -> int | None:
    row = next(r for r in desktop.client.status()["apps"] if r["app"] == "app_0")
    return row["pid"] if row["state"] == "running" else None


@pytest.mark.timeout(120)
def test_open_racing_a_restart_never_answers_e_internal(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"], restart_backoff_s=0.01, max_restarts=1_000_000)
    desktop.client.execute("<context>open --application app_0</context>")
    codes: list[str] = []
    started = time.monotonic()
    for _ in range(40):
        pid = wait_for(lambda: _pid(desktop), 20, "app_0 running")
        assert isinstance(pid, int)
        with contextlib.suppress(ProcessLookupError):  # status may lag a death just now
            os.kill(pid, signal.SIGKILL)
        for _ in range(3):  # opens landing before, during and after the restart's discard
            try:
                desktop.client.execute("<context>open --application app_0</context>")
            except AotuiError as exc:  # recoverable errors of a racing open are fine
                codes.append(f"{exc.code.value}: {exc.message}")
    internal = [code for code in codes if code.startswith(ErrorCode.E_INTERNAL.value)]
    assert not internal, internal
    wait_for(lambda: _pid(desktop), 20, "app_0 running at the end")
    assert time.monotonic() - started < 110, codes
