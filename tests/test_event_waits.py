"""Waits that used to poll with sleeps are woken by the event itself (issue 12).

A status wait wakes at the app's next transition, a wait for a worker's exit at the launcher's
exit report, ``aotui down`` at the supervisor's exit (its pidfd). Each test checks the waiter is
done within a few turns of the event loop after the event, which a 10 ms poll is not, and that
the timeouts still answer with their typed errors.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq.asyncio

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import Exited
from aotui.supervisor.config import DesktopConfig
from aotui.supervisor.desktop.app_record import AppRecord, AppStatus
from aotui.supervisor.interface.cli import _wait_exit
from aotui.supervisor.manifest import load_manifest
from aotui.supervisor.paths import DesktopPaths
from aotui.supervisor.workers.launcher import ZygoteLauncher
from aotui.supervisor.workers.runner import AppRunner

TEST_APPS = Path(__file__).parent / "apps"
#: Loop turns a woken waiter may take to finish; a 10 ms sleep between checks takes far more.
TURNS = 5

pytestmark = pytest.mark.timeout(30)


def _record(status: AppStatus = AppStatus.STARTING) -> AppRecord:
    app = AppRecord("app_1", load_manifest(TEST_APPS / "blinder"))
    if status is not AppStatus.NOT_RUNNING:
        app.transition(AppStatus.STARTING)
    if status not in (AppStatus.NOT_RUNNING, AppStatus.STARTING):
        app.transition(status)
    return app


async def _done_within_turns(task: asyncio.Task[Any]) -> bool:
    for _ in range(TURNS):
        if task.done():
            return True
        await asyncio.sleep(0)
    return task.done()


async def _waiting(waiter: Awaitable[Any]) -> asyncio.Task[Any]:
    """``waiter`` as a task that has started waiting (and has not finished)."""
    task = asyncio.ensure_future(waiter)
    for _ in range(TURNS):
        await asyncio.sleep(0)
    assert not task.done(), "the waiter returned before the event it waits for"
    return task


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[AppRunner]:
    paths = DesktopPaths(tmp_path / "runtime").create()
    context = zmq.asyncio.Context()
    config = DesktopConfig(start_timeout_ms=300)
    apps: list[AppRecord] = []
    built = AppRunner(config, paths, context, lambda: apps, lambda *a, **k: None, lambda _: None)
    yield built
    if isinstance(built.launcher.log, int):
        os.close(built.launcher.log)
    built.http_pool.shutdown(wait=False)
    context.term()


def test_a_status_wait_wakes_at_the_transition() -> None:
    async def scenario() -> None:
        app = _record(AppStatus.STARTING)
        await app.wait_while(AppStatus.RESTARTING)  # not in it: returns at once
        task = await _waiting(app.wait_while(AppStatus.STARTING, AppStatus.RESTARTING))
        app.transition(AppStatus.RESTARTING)  # still a status it waits through
        assert not await _done_within_turns(task)
        app.transition(AppStatus.STARTING)
        app.transition(AppStatus.RUNNING)
        assert await _done_within_turns(task)
        changed = await _waiting(app.changed())
        app.transition(AppStatus.COLLAPSED)
        assert await _done_within_turns(changed)

    asyncio.run(scenario())


def test_open_waits_for_a_start_in_progress_and_wakes_when_it_ends(runner: AppRunner) -> None:
    async def scenario() -> None:
        app = _record(AppStatus.STARTING)
        task = await _waiting(runner.open(app))
        app.transition(AppStatus.RUNNING)  # the other start succeeded
        assert await _done_within_turns(task)
        assert task.result() is None

    asyncio.run(scenario())


def test_open_still_times_out_on_a_start_that_never_ends(runner: AppRunner) -> None:
    async def scenario() -> None:
        app = _record(AppStatus.STARTING)
        began = time.monotonic()
        with pytest.raises(AotuiError) as caught:
            await runner.open(app)
        assert caught.value.code is ErrorCode.E_TIMEOUT
        assert caught.value.message == "app_1 is still starting"
        assert time.monotonic() - began >= 0.3

    asyncio.run(scenario())


def test_close_waits_for_a_start_and_times_out_naming_the_status(runner: AppRunner) -> None:
    async def scenario() -> None:
        app = _record(AppStatus.STARTING)
        task = await _waiting(runner.close(app))
        app.transition(AppStatus.FAILED)  # the start failed: nothing left to close
        assert await _done_within_turns(task)
        assert task.result() is None
        assert app.status is AppStatus.FAILED

        stuck = _record(AppStatus.STARTING)
        with pytest.raises(AotuiError) as caught:
            await runner.close(stuck)  # start_timeout_ms (300) + 2 s
        assert caught.value.code is ErrorCode.E_TIMEOUT
        assert caught.value.message == "app_1 is still starting; try again"

    asyncio.run(scenario())


class _Exits(list[Exited]):
    """The exits a launcher reported (its ``LauncherEvents``)."""

    def worker_exited(self, exited: Exited) -> None:
        self.append(exited)

    def zygote_died(self, pids: set[int], how: str) -> None:
        raise AssertionError(f"the zygote died ({how})")


def test_a_wait_for_a_worker_exit_wakes_at_its_exit_report() -> None:
    async def scenario() -> None:
        exits = _Exits()
        launcher = ZygoteLauncher()
        launcher.listen(exits)
        launcher.pids |= {101, 102}
        await launcher.wait_gone({103})  # not a live worker: returns at once
        task = await _waiting(launcher.wait_gone({101, 102}))
        launcher._dispatch(Exited(101, 0, None))
        assert not await _done_within_turns(task)  # 102 still runs
        launcher._dispatch(Exited(102, None, 9))
        assert await _done_within_turns(task)
        assert [e.pid for e in exits] == [101, 102]
        launcher.pids.add(104)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(launcher.wait_gone({104}), 0.05)

    asyncio.run(scenario())


def test_down_sees_the_process_exit_through_its_pidfd() -> None:
    # A child that exits and is not reaped stays a zombie: kill(pid, 0) still finds it, so the
    # old poll waited out its whole deadline; the pidfd reads ready at the exit itself.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    try:
        began = time.monotonic()
        _wait_exit(child.pid, 20.0)
        assert time.monotonic() - began < 10.0
        assert child.poll() is not None
    finally:
        child.kill()
        child.wait()
    _wait_exit(child.pid, 20.0)  # reaped, gone: returns at once


def test_down_gives_up_after_its_timeout() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        began = time.monotonic()
        _wait_exit(child.pid, 0.2)
        assert 0.2 <= time.monotonic() - began < 10.0
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()
