"""The worker side of a desktop, assembled: each role a part of its own, wired once here.

- :class:`~supervisor.workers.lifecycle.AppLifecycle` opens, closes and kills apps' workers;
- :class:`~supervisor.workers.recovery.Recovery` hears how they end and restarts them (and the
  zygote);
- :class:`~supervisor.workers.channel_events.ChannelEvents` handles what they say (views, log
  lines, HTTP calls through :class:`~supervisor.workers.http_calls.HttpCalls`);
- :class:`~supervisor.workers.heartbeat.Heartbeat` and
  :class:`~supervisor.workers.limits.LimitEnforcer` kill the silent and the greedy;
- :class:`~supervisor.workers.leases.WorkerLeases` holds each worker's uid, temp dir and copy.

The parts reach each other through the typed references they are built with; the handle and the
launcher report to the :class:`~supervisor.workers.channel_events.WorkerEvents` and
:class:`~supervisor.workers.launcher.LauncherEvents` they were given.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import zmq.asyncio

from aotui.supervisor.config import DesktopConfig
from aotui.supervisor.desktop.app_record import AppRecord
from aotui.supervisor.paths import DesktopPaths
from aotui.supervisor.server.stall import LoopClock
from aotui.supervisor.workers.channel_events import ChannelEvents
from aotui.supervisor.workers.exits import ExitReason
from aotui.supervisor.workers.heartbeat import Heartbeat
from aotui.supervisor.workers.host import RunnerHost
from aotui.supervisor.workers.http_calls import HttpCalls
from aotui.supervisor.workers.launcher import ZygoteLauncher
from aotui.supervisor.workers.leases import WorkerLeases
from aotui.supervisor.workers.lifecycle import AppLifecycle
from aotui.supervisor.workers.limits import LimitEnforcer
from aotui.supervisor.workers.recovery import Recovery
from aotui.supervisor.workers.watchdog import Watchdog

__all__ = ["AppRunner"]


class AppRunner:
    """The worker side of a desktop: launch, heartbeat, watchdog, restart, stop."""

    def __init__(
        self,
        config: DesktopConfig,
        paths: DesktopPaths,
        context: zmq.asyncio.Context,
        apps: Callable[[], Sequence[AppRecord]],
        log: Callable[..., None],
        on_change: Callable[..., None],
    ) -> None:
        host = RunnerHost(config, paths, context, apps, log, on_change)
        self.host = host
        self.watchdog = Watchdog(
            config.watchdog_interval_s, config.cpu_window_s, config.cpu_strikes
        )
        self.launcher = ZygoteLauncher(self._log_fd())
        self.leases = WorkerLeases(config, paths, log)
        self.http = HttpCalls(host)
        self.lifecycle = AppLifecycle(
            host, self.launcher, self.leases, self.watchdog, ChannelEvents(host, self.http)
        )
        self.recovery = Recovery(host, self.lifecycle, self.launcher, self.watchdog)
        self.launcher.listen(self.recovery)
        self.heartbeat = Heartbeat(host)
        self.limits = LimitEnforcer(host, self.watchdog)
        self._tasks: list[asyncio.Task[None]] = []

    def _log_fd(self) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        return os.open(self.host.paths.log, flags, 0o600)

    @property
    def closing(self) -> bool:
        """Whether the desktop is stopping (exits are expected; nothing is restarted)."""
        return self.recovery.closing

    @property
    def loop_clock(self) -> LoopClock:
        """The supervisor loop's own clock: time it did not run is nobody's silence."""
        return self.heartbeat.loop_clock

    @property
    def http_pool(self) -> ThreadPoolExecutor:
        """The brokered HTTP threads."""
        return self.http.pool

    def start(self) -> None:
        """Start the zygote and the background loops."""
        self.leases.prepare()
        self.launcher.start()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self.limits.run(), name="watchdog"),
            loop.create_task(self.heartbeat.run(), name="heartbeat"),
            loop.create_task(self.loop_clock.run(), name="loop clock"),
        ]

    async def stop(self) -> None:
        """Stop every worker and the zygote; leaves no process behind."""
        for task in self._tasks:
            task.cancel()
        await self.recovery.stop()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.lifecycle.stop_all()
        self.launcher.stop()
        self.http.shutdown()
        self.leases.clear()

    async def open(self, app: AppRecord, fresh: bool = False) -> None:
        """Start a worker for ``app`` and wait for its first views (see ``AppLifecycle.open``)."""
        await self.lifecycle.open(app, fresh)

    async def close(self, app: AppRecord) -> None:
        """Stop ``app``'s worker and forget its views; its data stays."""
        await self.lifecycle.close(app)

    def kill(self, app: AppRecord, reason: ExitReason) -> None:
        """SIGKILL ``app``'s worker, recording why (the exit report picks the reason up)."""
        self.lifecycle.kill(app, reason)
