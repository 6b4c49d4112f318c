"""Ending a worker on the supervisor's word: the one way every part of the runner kills.

The reason is recorded on the app first (:meth:`AppRecord.blame`); the zygote's exit report picks
it up as the app's ``last_exit`` (:mod:`~supervisor.workers.recovery`).
"""

from __future__ import annotations

import contextlib
import os
import signal

from aotui.supervisor.desktop.app_record import AppRecord
from aotui.supervisor.workers.exits import ExitReason

__all__ = ["kill_group", "kill_worker"]


def kill_worker(app: AppRecord, reason: ExitReason) -> None:
    """SIGKILL ``app``'s worker, recording why (the exit report picks the reason up)."""
    worker = app.worker
    if worker is None or worker.pid is None:
        return
    app.blame(reason)
    kill_group(worker.pid)


def kill_group(pid: int) -> None:
    """SIGKILL a worker and every process it started (they cannot leave its process group)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
