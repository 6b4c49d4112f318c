"""An acknowledged operation survives its worker dying while the supervisor stores it.

The supervisor adopts an operation's data only once the store has it (durability ``ack``). A
worker killed just after it acknowledged was restarted at once, from the data before that write:
the agent had been told the operation took effect, and the next operation counted from the old
value (the 1-hour soak lost 19 acknowledgements among 4,281 kills this way). A worker's start
now waits for the app's writes in flight. The app here stores 3 MB with every bump, so the
write lasts well past the worker's death and its restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from aotui.protocol.errors import AotuiError
from tests.conftest import RunningDesktop

Start = Callable[..., RunningDesktop]

BUMP = '<context app_id="app_0" view_id="view_0">execute bump{args}</context>'


def _pid(desktop: RunningDesktop) -> int | None:
    rows = desktop.client.status()["apps"]
    return rows[0]["pid"] if rows[0]["state"] == "running" else None


@pytest.mark.timeout(120)
def test_a_worker_killed_while_its_ack_is_stored_restarts_from_that_ack(start: Start) -> None:
    desktop = start(["slowstore"], restart_backoff_s=0.001, max_restarts=100)
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    count = client.execute(BUMP.format(args=""))["results"][0]
    acknowledged = 0
    for _ in range(10):
        before = _pid(desktop)
        error: AotuiError | None = None
        try:
            acked = client.execute(BUMP.format(args=" --die true"))["results"][0]
        except AotuiError as exc:  # a loaded machine let it die before its ack left: no effect
            error = exc
            acked = count
        else:
            assert acked == count + 1
            acknowledged += 1
        deadline = time.monotonic() + 30
        while _pid(desktop) in (None, before):  # the worker killed itself: back?
            assert time.monotonic() < deadline, "the app did not come back"
            time.sleep(0.01)
        if error is not None:
            assert error.data.get("last_exit") == "signal 9", error
        count = client.execute(BUMP.format(args=""))["results"][0]
        assert count == acked + 1, f"acknowledged {acked}, then the app counted {count}"
        if acknowledged == 3:
            break
    assert acknowledged >= 2, "the worker died before its acknowledgement nearly every time"


@pytest.fixture
def start(start_desktop: Start) -> Start:
    return start_desktop
