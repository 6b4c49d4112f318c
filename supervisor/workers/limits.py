"""The watchdog's verdicts carried out: a worker over its memory or CPU limit is killed, and a
busy one over its CPU share while serving is held to it by the kernel instead."""

from __future__ import annotations

import asyncio

from aotui.sandbox.cgroups import throttle_cpu
from aotui.supervisor.desktop.app_record import AppRecord
from aotui.supervisor.workers.exits import ExitReason
from aotui.supervisor.workers.host import RunnerHost
from aotui.supervisor.workers.kill import kill_worker
from aotui.supervisor.workers.watchdog import Limit, Violation, Watchdog

__all__ = ["LimitEnforcer"]


class LimitEnforcer:
    """Samples the :class:`Watchdog` every interval and acts on each violation."""

    def __init__(self, host: RunnerHost, watchdog: Watchdog) -> None:
        self.host = host
        self.watchdog = watchdog

    async def run(self) -> None:
        """Sample forever: kill what is over a limit, throttle what serves over its share."""
        answered: dict[int, int] = {}  # pid → requests answered at its last CPU window

        def serving(pid: int) -> bool:
            """Whether the worker answered a request since its last CPU window."""
            app = self.host.app_with_pid(pid)
            worker = app.worker if app is not None else None
            if worker is None:
                return False
            before, answered[pid] = answered.get(pid, 0), worker.answered
            return worker.answered > before

        while True:
            await asyncio.sleep(self.watchdog.interval_s)
            # Off the event loop: an exact measure reads every process's smaps (a browser tree:
            # thousands of mappings, 10-40 ms), which stalled every client's answer meanwhile.
            # The watchdog's state is a dict of records the loop only reads (``status``) and
            # drops from (``forget``, atomic); what it decides is carried out here, on the loop.
            for violation in await asyncio.to_thread(self.watchdog.sample, serving):
                app = next((a for a in self.host.apps() if a.app_id == violation.app_id), None)
                if app is None or app.worker is None or app.worker.pid != violation.pid:
                    continue
                if violation.reason is Limit.CPU_THROTTLED:
                    self._throttle(app, violation)
                    continue
                answered.pop(violation.pid, None)
                self.host.log(f"{app.name} over its {violation.reason} ({violation.detail}).")
                kill_worker(app, ExitReason(violation.reason.value))

    def _throttle(self, app: AppRecord, violation: Violation) -> None:
        """A busy worker over its CPU share keeps serving, held to its share by the kernel."""
        watched = self.watchdog.workers.get(violation.pid)
        if watched is None or watched.throttled:
            return
        watched.throttled = throttle_cpu(self.watchdog.family(violation.pid), watched.cpu_percent)
        how = watched.throttled or "nothing could lower its share"
        self.host.log(
            f"{app.name} is busy serving requests over its CPU share ({violation.detail}): "
            f"throttled ({how}), not killed."
        )
