"""What the worker side needs of its desktop, handed to each part of the runner as one record."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import zmq.asyncio

from aotui.supervisor.config import DesktopConfig
from aotui.supervisor.desktop.app_record import AppRecord
from aotui.supervisor.paths import DesktopPaths
from aotui.supervisor.workers.handle import WorkerHandle

__all__ = ["RunnerHost"]


@dataclass(frozen=True)
class RunnerHost:
    """The desktop as its workers' parts see it: config, paths, apps, System Logs, signals."""

    config: DesktopConfig
    paths: DesktopPaths
    #: The ZeroMQ context the worker channels are made in.
    context: zmq.asyncio.Context
    #: The installed apps, as they are now.
    apps: Callable[[], Sequence[AppRecord]]
    #: Adds a line to System Logs (``text``, ``owner``).
    log: Callable[..., None]
    #: Tells the desktop's clients something changed (a throttled signal): ``reason``, and the
    #: ``app`` id it concerns.
    changed: Callable[..., None]

    def app_of(self, worker: WorkerHandle) -> AppRecord | None:
        """The app ``worker`` serves, or ``None`` once it no longer does."""
        return next((a for a in self.apps() if a.worker is worker), None)

    def app_with_pid(self, pid: int) -> AppRecord | None:
        """The app whose current worker is process ``pid``."""
        return next((a for a in self.apps() if a.worker and a.worker.pid == pid), None)
