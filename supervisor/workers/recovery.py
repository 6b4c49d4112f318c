"""How a worker's end is handled: its ``last_exit``, its restart policy, a dead zygote's revival.

A worker that ends without being asked to is handled by its app's
:class:`~supervisor.workers.restart.RestartPolicy`; the reason it ended (``exit 1``, ``signal 9``,
``memory limit``, ``cpu limit``, ``timeout``, ``protocol violation``) becomes the app's
``last_exit``. An operation in flight when a worker dies is answered ``E_APP_ERROR``, never left
without a reply. A dead zygote takes its workers with it: it is started again (at once, then
backing off to 5 s while it keeps dying) and its apps reopened with their state; those restarts do
not count against an app's restart intensity.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import Exited
from aotui.supervisor.desktop.app_record import AppRecord, AppStatus
from aotui.supervisor.workers.exits import ExitReason
from aotui.supervisor.workers.handle import describe_exit
from aotui.supervisor.workers.host import RunnerHost
from aotui.supervisor.workers.launcher import ZygoteLauncher
from aotui.supervisor.workers.lifecycle import AppLifecycle
from aotui.supervisor.workers.restart import RestartDecision, RestartPolicy, RestartTracker
from aotui.supervisor.workers.watchdog import Watchdog

__all__ = ["ZYGOTE_POLICY", "Recovery"]

#: The zygote's own restarts: at once, then backing off to 5 s while it keeps dying.
ZYGOTE_POLICY = RestartPolicy(max_restarts=100, period_s=60.0, backoff_s=0.1, backoff_max_s=5.0)


class Recovery:
    """The launcher's :class:`~supervisor.workers.launcher.LauncherEvents`: exits and deaths."""

    def __init__(
        self,
        host: RunnerHost,
        lifecycle: AppLifecycle,
        launcher: ZygoteLauncher,
        watchdog: Watchdog,
    ) -> None:
        self.host = host
        self.lifecycle = lifecycle
        self.launcher = launcher
        self.watchdog = watchdog
        #: Set once the desktop stops: exits are then expected, nothing is restarted.
        self.closing = False
        self._zygote_restarts = RestartTracker(ZYGOTE_POLICY)
        self._revivals: list[asyncio.Task[None]] = []

    async def stop(self) -> None:
        """Restart nothing from now on; call off a zygote revival waiting out its back-off."""
        self.closing = True
        for task in self._revivals:
            task.cancel()
        await asyncio.gather(*self._revivals, return_exceptions=True)

    def worker_exited(self, exited: Exited) -> None:
        """The zygote reaped a worker: record how it ended, fail its requests, restart it."""
        app = self.host.app_with_pid(exited.pid)
        self.watchdog.forget(exited.pid)
        if app is None:
            return
        app.ended(
            app.kill_reason or exited.reason or describe_exit(exited.exit_code, exited.signal)
        )
        if exited.reason and not app.kill_reason:
            self.host.log(
                f"{app.name} over its {exited.reason} (stopped by the kernel's cgroup limit)."
            )
        worker = app.worker
        if worker is not None:
            worker.fail_pending(
                AotuiError(
                    ErrorCode.E_APP_ERROR,
                    f"{app.app_id} ({app.name}) crashed mid-operation ({app.last_exit})",
                    {"last_exit": app.last_exit},
                )
            )
        if app.status in (AppStatus.STOPPING, AppStatus.STARTING) or self.closing:
            return
        # At once, not after the discard: a command queued behind the one that just failed must
        # not find a "running" app without a worker.
        if app.is_live:
            app.transition(AppStatus.RESTARTING)
        abnormal = bool(app.kill_reason or exited.reason) or exited.exit_code != 0
        since = worker.serving_since if worker is not None else None
        served_s = time.monotonic() - since if since is not None else 0.0
        asyncio.get_running_loop().create_task(self._ended(app, abnormal, served_s))

    async def _ended(self, app: AppRecord, abnormal: bool, served_s: float = 0.0) -> None:
        """Apply the restart policy to a worker that ended on its own (after ``served_s``)."""
        # Not the app's doing: the zygote died, or the desktop discarded an effect.
        if app.last_exit in (ExitReason.LAUNCHER_EXITED, ExitReason.UNACKNOWLEDGED_EFFECT):
            decision = RestartDecision(True)  # the zygote died, or an effect was undone
        else:
            decision = app.restart_tracker.decide(abnormal, served_s)
        mounted = app.views.mounted_keys()
        await self.lifecycle.discard(app)
        if app.status in (AppStatus.STOPPING, AppStatus.NOT_RUNNING):
            return  # closed while the worker was being discarded
        if app.status is AppStatus.STARTING or app.is_live:
            return  # an open brought it back while the worker was being discarded: its start
        if decision.failed:
            app.transition(AppStatus.FAILED)
            self.host.log(
                f"{app.name} failed ({app.last_exit}): {decision.reason}; open it to retry."
            )
            return
        if not decision.restart:
            app.transition(AppStatus.RESTARTING)
            app.transition(AppStatus.NOT_RUNNING)
            self.host.log(f"{app.name} ended ({app.last_exit}); {decision.reason}.")
            return
        app.restarting(mounted)
        self.host.log(f"{app.name} crashed ({app.last_exit}); restarting.", app.app_id)
        if decision.delay_s:
            await asyncio.sleep(decision.delay_s)
        if app.status is not AppStatus.RESTARTING:
            return  # closed or uninstalled while we waited
        with contextlib.suppress(AotuiError):
            await self.lifecycle.open(app)  # a start that fails says so itself (the app is failed)

    def zygote_died(self, pids: set[int], how: str) -> None:
        """The zygote died and its workers with it: restart it, reopen its apps with their state."""
        if self.closing:
            return
        decision = self._zygote_restarts.decide(abnormal=True)
        delay = decision.delay_s if decision.restart else ZYGOTE_POLICY.backoff_max_s
        when = f"in {delay:.1f} s" if delay else "now"
        self.host.log(
            f"The worker launcher (zygote) exited ({how}); its {len(pids)} worker(s) died with "
            f"it. It is restarted {when}, and its apps are reopened with their state."
        )
        for app in list(self.host.apps()):
            worker = app.worker
            if worker is not None and worker.pid is not None and worker.pid in pids:
                app.blame(ExitReason.LAUNCHER_EXITED, overrule=True)
                self.worker_exited(Exited(worker.pid, None, signal.SIGKILL))
        task = asyncio.get_running_loop().create_task(self._revive_zygote(delay))
        self._revivals = [*(t for t in self._revivals if not t.done()), task]

    async def _revive_zygote(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        while not self.closing:
            try:
                self.launcher.start()
                return
            except OSError as exc:
                self.host.log(
                    f"The worker launcher could not be restarted ({exc}); retrying in 5 s."
                )
                await asyncio.sleep(ZYGOTE_POLICY.backoff_max_s)
