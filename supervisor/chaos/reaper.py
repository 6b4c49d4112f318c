"""Every process a chaos run started, found and ended: the runner as the run's child subreaper.

An agent's command may start processes that leave its process group and session (``setsid``,
a double fork): they outlive the agent's ``killpg``, their parent exits, and the kernel hands
them to init, where a walk of the runner's children never finds them. While a run lasts, the
runner is a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): orphans of anything below it
are handed to it instead, so the run's processes all stay below the runner, whatever they do to
their session, group or environment.

At the end, :meth:`Subreaper.end_all` stops (``SIGSTOP``) every process below the runner that
was not there when the run began, again until no new one appears (a process cannot fork while
stopped), records each one's pid and command line, kills them and reaps them. Orphans that die
during the run are reaped as :meth:`Subreaper.reap` is called, so none lingers as a zombie
under the runner; the runner's own ``Popen`` children are left to their ``Popen``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Collection

import psutil

from aotui.protocol.structure import sanitize
from aotui.sandbox.linux import check, libc, prctl
from aotui.supervisor.chaos.events import Leftover

__all__ = ["Subreaper"]

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
#: Rounds of stopping newly found processes before the rest are killed regardless.
_STOP_ROUNDS = 20
#: Seconds the killed leftovers get to be gone (SIGKILL: milliseconds; a D-state wait: longer).
_GONE_S = 5.0
#: Characters of a leftover's command line kept in the history.
_CMDLINE_CHARS = 300


class Subreaper:
    """While entered, the calling process adopts the orphans of every process it starts."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        #: Processes below the runner before the run: not the run's (pytest's other children).
        self.before: set[int] = set()
        self._was_subreaper = 0
        self.active = False

    def __enter__(self) -> Subreaper:
        flag = ctypes.c_int(0)
        with contextlib.suppress(OSError):
            check(
                int(libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.addressof(flag), 0, 0, 0)),
                "prctl(PR_GET_CHILD_SUBREAPER)",
            )
        self._was_subreaper = flag.value
        self.before = {p.pid for p in self._below()}
        try:
            prctl(_PR_SET_CHILD_SUBREAPER, 1)
            self.active = True
        except OSError:
            # Not Linux 3.4+, or refused by a seccomp profile: orphans still reach init, and the
            # run falls back on what it saw and what carries its environment.
            self.active = False
        return self

    def __exit__(self, *exc: object) -> None:
        if self.active:
            with contextlib.suppress(OSError):
                prctl(_PR_SET_CHILD_SUBREAPER, self._was_subreaper)
            self.active = False

    def _below(self) -> list[psutil.Process]:
        try:
            return self.me.children(recursive=True)
        except psutil.Error:
            return []

    def reap(self, keep: Collection[int]) -> None:
        """Collect the exit of adopted children that died; ``keep``: pids ``Popen`` waits for."""
        try:
            children = self.me.children()
        except psutil.Error:
            return
        for child in children:
            if child.pid in keep or child.pid in self.before:
                continue
            with contextlib.suppress(psutil.Error, ChildProcessError):
                if child.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(child.pid, os.WNOHANG)

    def end_all(self, keep: Collection[int], also: Collection[int] = ()) -> list[Leftover]:
        """Stop, record, kill and reap every process of the run still alive below the runner,
        and those of ``also`` (pids known some other way); ``keep``: pids ``Popen`` reaps."""
        stopped: dict[int, psutil.Process] = {}
        for _round in range(_STOP_ROUNDS):
            found = [p for p in self._below() if p.pid not in self.before]
            for pid in also:
                with contextlib.suppress(psutil.Error):
                    found.append(psutil.Process(pid))
            new = [p for p in found if p.pid not in stopped and p.pid != self.me.pid]
            if not new:
                break
            for process in new:
                with contextlib.suppress(psutil.Error):
                    if process.status() == psutil.STATUS_ZOMBIE:
                        continue
                    process.send_signal(signal.SIGSTOP)
                    stopped[process.pid] = process
        leftovers = []
        for pid, process in sorted(stopped.items()):
            try:
                words = process.cmdline()
            except psutil.Error:
                continue  # gone meanwhile: it did not outlive the run
            leftovers.append(Leftover(pid, sanitize(" ".join(words), limit=_CMDLINE_CHARS)))
        for process in stopped.values():
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(list(stopped.values()), timeout=_GONE_S)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and any(
            _is_zombie_child(p, self.me.pid) for p in stopped.values()
        ):
            self.reap(keep)
            time.sleep(0.01)
        self.reap(keep)
        return leftovers


def _is_zombie_child(process: psutil.Process, parent: int) -> bool:
    try:
        return process.ppid() == parent and process.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
