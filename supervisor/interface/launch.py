"""Start a desktop's supervisor as a child process and wait until it answers.

The one way everything that starts a desktop of its own does it: ``aotui up --detach``,
``aotui demo``, the chaos runner, the benchmarks and the tests' desktops. Each says what differs
in a :class:`DesktopLaunch` (its config, runtime directory, environment, log, a wrapper around the
command); :func:`launch_desktop` starts it and returns a :class:`LaunchedDesktop` once the
supervisor answers a ping as itself, or raises :class:`DesktopExited` (it died first: its exit
code and the end of its output) or :class:`DesktopUnavailable` (silent past the deadline; it is
killed then). A started desktop is stopped with :meth:`LaunchedDesktop.stop`.

The wait: a ping answers at once when nothing listens yet (the client checks the socket before
sending), and waits for the reply once something does; between two probes the caller waits on the
child's pidfd, so its death is seen when it happens, not at the next probe.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from aotui.protocol.errors import AotuiError
from aotui.supervisor.interface.client import Client, DesktopUnavailable
from aotui.supervisor.paths import DesktopPaths

__all__ = [
    "AOTUI",
    "START_S",
    "DesktopExited",
    "DesktopLaunch",
    "LaunchedDesktop",
    "launch_desktop",
]

#: Seconds a started supervisor gets to answer its first ping (a loaded 2-core machine needs
#: several; a healthy start takes well under one).
START_S = 30.0
#: Seconds a supervisor gets to exit after ``shutdown`` before it is killed.
STOP_S = 15.0
#: The longest a single ping may wait for its reply while the supervisor starts.
PING_S = 0.5
#: The longest wait on the child between two probes while nothing listens yet.
RETRY_S = 0.01
#: Characters of a dead supervisor's output quoted in :class:`DesktopExited`.
TAIL_CHARS = 2000
#: The program that takes ``up ...``: this interpreter's ``aotui``.
AOTUI = (sys.executable, "-m", "aotui.supervisor")


class DesktopExited(DesktopUnavailable):
    """The supervisor exited before it answered: its exit code and the end of its output."""

    def __init__(self, desktop: str, returncode: int, tail: str, log: Path | None) -> None:
        if returncode < 0:
            try:
                how = f"was killed by {signal.Signals(-returncode).name}"
            except ValueError:  # a real-time signal has no name
                how = f"was killed by signal {-returncode}"
        else:
            how = f"exited with code {returncode}"
        where = f" (all of it in {log})" if log is not None else ""
        quoted = tail.strip() or "(it printed nothing)"
        super().__init__(
            f"the desktop {desktop!r} {how} before it answered; its last output{where}:\n"
            f"{quoted}\nFix what it says and start it again (`aotui doctor` checks what this "
            "machine can run)."
        )
        self.returncode = returncode
        self.tail = tail
        self.data.update(exit_code=returncode, log=str(log) if log else None)


@dataclass(frozen=True)
class DesktopLaunch:
    """How to start one desktop: what ``aotui up`` is given and the process it runs in."""

    #: The desktop's name (``--desktop``).
    desktop: str = "default"
    #: Its config file (``--config``); ``None``: the bundled default.
    config: Path | None = None
    #: Its base runtime directory (``--socket``); ``None``: ``AOTUI_SOCKET``, XDG or /tmp.
    socket: Path | None = None
    #: The child's whole environment; ``None``: this process's.
    env: Mapping[str, str] | None = None
    #: Where its stdout and stderr are appended; ``None``: a private temporary file.
    log: Path | None = None
    #: The command that takes ``up ...`` (a wrapper such as ``nsenter`` goes in front). It must
    #: exec the supervisor, not fork it: the answer is checked to come from the child's pid.
    program: tuple[str, ...] = AOTUI
    #: The child's working directory; ``None``: this process's.
    cwd: Path | None = None
    #: In a session of its own: it outlives this process and its terminal (``up --detach``).
    new_session: bool = False
    #: Run as this (uid, gid), without supplementary groups; ``None``: as this process.
    credentials: tuple[int, int] | None = None
    #: Its store (``--store``, a ``postgresql://`` URL); ``None``: the config's.
    store: str | None = None

    def command(self) -> list[str]:
        """The child's command line."""
        command = [*self.program, "up", "--desktop", self.desktop]
        if self.config is not None:
            command += ["--config", str(self.config)]
        if self.socket is not None:
            command += ["--socket", str(self.socket)]
        if self.store is not None:
            command += ["--store", self.store]
        return command

    def socket_dir(self) -> str | None:
        """The base runtime directory the child uses, as a :class:`Client` takes it."""
        if self.socket is not None:
            return str(self.socket)
        # Else the child's ``AOTUI_SOCKET``; give ``socket`` when its environment differs more.
        return (self.env if self.env is not None else os.environ).get("AOTUI_SOCKET")


class LaunchedDesktop:
    """A supervisor started by :func:`launch_desktop`: its process, its address, its output."""

    def __init__(self, launch: DesktopLaunch, process: subprocess.Popen[bytes], output: Output):
        self.launch = launch
        self.process = process
        self.output = output
        #: Where it answers (its runtime directory).
        self.paths = DesktopPaths.for_desktop(launch.desktop, launch.socket_dir())

    @property
    def pid(self) -> int:
        """The supervisor's pid."""
        return self.process.pid

    def client(self, timeout_s: float = 30.0) -> Client:
        """A new client of this desktop (the caller closes it)."""
        return Client(self.launch.desktop, self.launch.socket_dir(), timeout_s=timeout_s)

    def wait_answering(
        self, timeout_s: float = START_S, retry_s: float = RETRY_S
    ) -> dict[str, Any]:
        """Its ``ping`` answer once it answers as itself; raises if it dies or stays silent.

        An answer from another pid (a supervisor still serving this address) is not ours: ours
        is still deciding whether it may start. ``retry_s`` is the longest pause between two
        probes while nothing listens; the child's death ends any pause at once.
        """
        deadline = time.monotonic() + timeout_s
        pidfd = os.pidfd_open(self.process.pid)  # a zombie still has one: never misses an exit
        try:
            with self.client(timeout_s=PING_S) as client:
                while (remaining := deadline - time.monotonic()) > 0:
                    with contextlib.suppress(AotuiError):  # not answering yet, or busy starting
                        info: dict[str, Any] = client.ping(timeout_s=min(PING_S, remaining))
                        if info["pid"] == self.process.pid:
                            return info
                    died, _, _ = select.select([pidfd], [], [], min(retry_s, remaining))
                    if died:
                        raise self.exited()
        finally:
            os.close(pidfd)
        self.kill()
        tail = self.output.tail().strip() or "(it printed nothing)"
        self.output.close()
        raise DesktopUnavailable(
            f"the desktop {self.launch.desktop!r} did not answer within {timeout_s:g} s of its "
            f"start, so it was stopped; its last output{self._where()}:\n{tail}\n"
            "If the machine is only busy, start it again; otherwise fix what it says."
        )

    def exited(self) -> DesktopExited:
        """The error of a supervisor that exited before answering (reaps it, closes its output)."""
        returncode = self.process.wait()
        error = DesktopExited(self.launch.desktop, returncode, self.output.tail(), self.launch.log)
        self.output.close()
        return error

    def stop(self, timeout_s: float = STOP_S) -> int:
        """Ask it to shut down; kill it past ``timeout_s`` (or when it cannot be asked)."""
        if self.process.poll() is None:
            try:
                with self.client(timeout_s=5.0) as client:
                    client.shutdown()
            except AotuiError:
                self.kill()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        self.output.close()
        return self.process.returncode

    def kill(self) -> None:
        """kill -9 the supervisor (its whole session when it has one) and reap it."""
        with contextlib.suppress(ProcessLookupError):
            if self.launch.new_session:
                os.killpg(self.process.pid, signal.SIGKILL)
            else:
                self.process.kill()
        self.process.wait()

    def _where(self) -> str:
        return f" (all of it in {self.launch.log})" if self.launch.log is not None else ""


class Output:
    """Where a supervisor's stdout and stderr go, and the end of what it wrote there."""

    def __init__(self, log: Path | None) -> None:
        self._private: IO[bytes] | None = None
        if log is None:
            self._private = tempfile.TemporaryFile()  # noqa: SIM115 -- closed by close()
            self.fd, self.start = self._private.fileno(), 0
        else:
            # Appended to (a desktop started again adds to its log): its tail starts here.
            self.fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            self.start = os.fstat(self.fd).st_size
        self._log = log

    def tail(self, chars: int = TAIL_CHARS) -> str:
        """The last ``chars`` characters this supervisor wrote, from a whole line on."""
        if self._log is not None:
            with open(self._log, "rb") as handle:
                handle.seek(self.start)
                text = handle.read().decode(errors="replace")
        elif self._private is not None:
            text = os.pread(self.fd, os.fstat(self.fd).st_size, 0).decode(errors="replace")
        else:
            return ""
        if len(text) > chars:
            text = text[-chars:]
            text = text.split("\n", 1)[1] if "\n" in text else text
        return text

    def release(self) -> None:
        """Close this process's copy of a log file (the child keeps its own)."""
        if self._log is not None and self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def close(self) -> None:
        """Close everything; a private temporary file is gone then."""
        self.release()
        if self._private is not None:
            self._private.close()
            self._private = None


def launch_desktop(launch: DesktopLaunch, timeout_s: float = START_S) -> LaunchedDesktop:
    """Start the supervisor and return it once it answers (see :meth:`wait_answering`)."""
    desktop = spawn_desktop(launch)
    try:
        desktop.wait_answering(timeout_s)
    except BaseException:  # interrupted too: a start that failed leaves nothing running
        if desktop.process.poll() is None:
            desktop.kill()
        desktop.output.close()
        raise
    return desktop


def spawn_desktop(launch: DesktopLaunch) -> LaunchedDesktop:
    """Start the supervisor without waiting; :meth:`LaunchedDesktop.wait_answering` waits."""
    DesktopPaths.for_desktop(launch.desktop, launch.socket_dir())  # a bad name: refused here
    output = Output(launch.log)
    uid, gid = launch.credentials or (None, None)
    try:
        process = subprocess.Popen(
            launch.command(),
            stdin=subprocess.DEVNULL,
            stdout=output.fd,
            stderr=output.fd,
            env=dict(launch.env) if launch.env is not None else None,
            cwd=launch.cwd,
            start_new_session=launch.new_session,
            user=uid,
            group=gid,
            extra_groups=[] if launch.credentials is not None else None,
        )
    except BaseException:
        output.close()
        raise
    output.release()
    return LaunchedDesktop(launch, process, output)
