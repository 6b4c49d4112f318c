"""Why the supervisor ended a worker: the words ``last_exit`` shows (CONTRACT §8, ``status``).

A worker that ended on its own is described by its exit status instead (``exit 1``, ``signal 9``,
:func:`~aotui.supervisor.workers.handle.describe_exit`), and a start that failed by what failed.
"""

from __future__ import annotations

import enum

__all__ = ["ExitReason"]


class ExitReason(enum.StrEnum):
    """Why the supervisor killed a worker; the value is what the agent reads in ``last_exit``."""

    #: It sent what workers may not send (a malformed frame, a forged reply, a flood).
    PROTOCOL_VIOLATION = "protocol violation"
    #: It did not answer a request or the heartbeat in time.
    TIMEOUT = "timeout"
    #: Its process group used more memory than its limit.
    MEMORY_LIMIT = "memory limit"
    #: It spun over its CPU share without serving.
    CPU_LIMIT = "cpu limit"
    #: The supervisor itself failed reading its channel (a bug of ours, logged).
    SUPERVISOR_ERROR = "supervisor error"
    #: The zygote that forked it died (not the app's fault).
    LAUNCHER_EXITED = "launcher exited"
    #: Stopped to discard an operation's effect that could not be acknowledged.
    UNACKNOWLEDGED_EFFECT = "unacknowledged effect"
    #: Stopped because the store could not record an acknowledged effect.
    STORE_WRITE_FAILED = "store write failed"
