"""Heartbeats: every live worker is pinged, and one silent past its timeout is killed.

Silence is measured on the supervisor's :class:`~supervisor.server.stall.LoopClock`: time the
supervisor's own loop did not run (paused, suspended, starved) is nobody's silence.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import zmq

from aotui.protocol.errors import AotuiError
from aotui.protocol.messages import Ping
from aotui.supervisor.server.stall import LoopClock
from aotui.supervisor.workers.exits import ExitReason
from aotui.supervisor.workers.host import RunnerHost
from aotui.supervisor.workers.kill import kill_worker

__all__ = ["Heartbeat"]


class Heartbeat:
    """Pings live workers every ``heartbeat_s``; kills one silent over ``heartbeat_timeout_s``."""

    def __init__(self, host: RunnerHost) -> None:
        self.host = host
        #: Time the supervisor's own loop did not run is nobody's silence (server/stall.py).
        self.loop_clock = LoopClock(on_stall=self._stalled)

    def _stalled(self, lost_s: float) -> None:
        if lost_s >= 2.0:  # shorter stalls are load; longer ones deserve a line
            self.host.log(
                f"The supervisor itself did not run for {lost_s:.1f} s (paused, suspended or "
                f"starved); heartbeats and leases do not count that time."
            )

    async def run(self) -> None:
        """Ping every live worker each period, killing the ones that stopped answering."""
        config = self.host.config
        seq = 0
        while True:
            await asyncio.sleep(config.heartbeat_s)
            seq += 1
            for app in self.host.apps():
                worker = app.worker
                if worker is None or not app.is_live:
                    continue
                # Answers that waited in the socket while we were stopped are not silence.
                lost = self.loop_clock.lost_since(worker.last_pong)
                silent = time.monotonic() - worker.last_pong - lost
                if silent > config.heartbeat_timeout_s:
                    self.host.log(
                        f"{app.name} stopped answering heartbeats for {silent:.0f} s; killing it."
                    )
                    kill_worker(app, ExitReason.TIMEOUT)
                    continue
                with contextlib.suppress(zmq.ZMQError, AotuiError):
                    await worker.send(Ping(seq))
