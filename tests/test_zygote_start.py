"""The zygote ``aotui up`` starts before its own imports is taken over once, and only alive."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from aotui.supervisor.workers import zygote_start

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    yield fd
    taken = zygote_start.take_prestarted()  # whatever a failing test left behind
    if taken is not None:
        taken[0].kill()
        taken[0].wait(timeout=10)
        taken[1].close()
    os.close(fd)


def test_a_prestarted_zygote_is_taken_once(log: int) -> None:
    zygote_start.prestart(log)
    zygote_start.prestart(log)  # a second call starts no second zygote
    taken = zygote_start.take_prestarted()
    assert taken is not None
    process, sock = taken
    try:
        assert process.poll() is None
        assert zygote_start.take_prestarted() is None
    finally:
        sock.close()  # EOF: the zygote exits on its own
        assert process.wait(timeout=30) in (0, 1)


def test_a_dead_prestarted_zygote_is_dropped(log: int) -> None:
    zygote_start.prestart(log)
    process = zygote_start._prestarted[0] if zygote_start._prestarted else None
    assert process is not None
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    assert zygote_start.take_prestarted() is None  # the launcher then spawns a fresh one
