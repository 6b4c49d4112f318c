"""Starting the zygote process, importable before the rest of the supervisor.

``aotui up`` calls :func:`prestart` first thing: the zygote's own start (a fresh interpreter
importing pyzmq, lxml and the SDK, ~125 ms of CPU) then overlaps the supervisor's imports, config,
checks and store opening instead of following them. This module imports nothing heavier than
``subprocess`` so that calling it early costs nothing; :mod:`~supervisor.workers.launcher` takes
the process over and hands it its log (:func:`hand_log`), which is known only later.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import IO

__all__ = ["LOG_HANDOVER", "hand_log", "prestart", "serves_here", "spawn", "take_prestarted"]

#: The first byte on a zygote's socket: it carries the log's descriptor (``SCM_RIGHTS``), and the
#: zygote serves no launch before it (``sandbox/zygote.py``).
LOG_HANDOVER = b"L"

#: A zygote started before the supervisor's own imports (see :func:`prestart`).
_prestarted: tuple[subprocess.Popen[bytes], socket.socket] | None = None


def spawn(log: IO[bytes] | int | None = None) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """Start a zygote; returns it and the supervisor's end of its socketpair.

    It writes to ``log`` (None: where we write) until :func:`hand_log` names its log.
    """
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


def hand_log(sock: socket.socket, log: IO[bytes] | int | None) -> None:
    """Send the zygote on ``sock`` its log (its stdout and stderr from then on; None: keep them).

    Call once per zygote, before its first launch: it waits for this before serving.
    """
    fds = [] if log is None else [log if isinstance(log, int) else log.fileno()]
    socket.send_fds(sock, [LOG_HANDOVER], fds)


def serves_here(argv: list[str]) -> bool:
    """Whether the ``aotui`` arguments ``argv`` run a desktop in this process: ``up`` without
    ``--detach`` (or an abbreviation of it, as argparse takes one), whose zygote may start now."""
    return argv[:1] == ["up"] and not any(arg.startswith("--det") for arg in argv[1:])


def prestart() -> None:
    """Start the zygote now (from the main thread), so its imports overlap the supervisor's."""
    global _prestarted
    if _prestarted is None:
        _prestarted = spawn()


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
