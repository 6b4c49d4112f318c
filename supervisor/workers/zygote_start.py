"""Starting the zygote process, importable before the rest of the supervisor.

``aotui up`` calls :func:`prestart` as early as it can: the zygote's own start (a fresh interpreter
importing pyzmq, lxml and the SDK, ~140 ms) then overlaps the supervisor's imports, checks and
store opening instead of following them. This module imports nothing heavier than ``subprocess``
so that calling it early costs nothing; :mod:`~supervisor.workers.launcher` takes the process over.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import IO

__all__ = ["prestart", "spawn", "take_prestarted"]

#: A zygote started before the supervisor's own imports (see :func:`prestart`).
_prestarted: tuple[subprocess.Popen[bytes], socket.socket] | None = None


def spawn(log: IO[bytes] | int | None) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """Start a zygote; returns it and the supervisor's end of its socketpair."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    process = subprocess.Popen(
        [sys.executable, "-m", "aotui.sandbox.zygote", str(theirs.fileno()), str(os.getpid())],
        pass_fds=(theirs.fileno(),),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    theirs.close()
    return process, ours


def prestart(log: IO[bytes] | int | None = None) -> None:
    """Start the zygote now (from the main thread), so its imports overlap the supervisor's."""
    global _prestarted
    if _prestarted is None:
        _prestarted = spawn(log)


def take_prestarted() -> tuple[subprocess.Popen[bytes], socket.socket] | None:
    """The prestarted zygote if it is still alive (once); a dead one is reaped and dropped."""
    global _prestarted
    taken, _prestarted = _prestarted, None
    if taken is None:
        return None
    if taken[0].poll() is not None:
        taken[1].close()
        return None
    return taken
