"""``aotui chaos run``: a desktop of its own, an agent against it, the plan injected, a history.

The runner starts a supervisor (``aotui up`` in the foreground, as a child) whose environment
names the run's setup (``AOTUI_CHAOS``), so the supervisor's nemesis records and injects from
inside; the runner injects the faults that need the supervisor gone (kill_supervisor, followed by
``up`` again) and records the run's start and end. Everything lives under one directory (a fresh
temporary one unless given): ``AOTUI_SOCKET`` and ``AOTUI_HOME`` point there, so the agent's
``aotui exec``, Python client, ``aotui mcp`` and ``rpc.sock`` reach this desktop and no other.
At the end every process of the run is stopped; any still alive is recorded as
``leftover_pids``, with its command line in ``leftovers``, and then killed. The runner is the
run's child subreaper while it lasts (:mod:`~supervisor.chaos.reaper`): what an agent starts in a
session of its own (``setsid``, a double fork) is found below the runner all the same.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from aotui.protocol.errors import AotuiError
from aotui.supervisor.chaos.events import Leftover
from aotui.supervisor.chaos.history import (
    CommandEvent,
    EventKind,
    FaultEvent,
    FaultPhase,
    FaultType,
    HistoryWriter,
    ReplyEvent,
    Source,
    load_history,
)
from aotui.supervisor.chaos.nemesis import CHAOS_ENV, ChaosSetup
from aotui.supervisor.chaos.plan import TIMED, FaultSpec, Plan
from aotui.supervisor.chaos.reaper import Subreaper
from aotui.supervisor.interface.launch import DesktopLaunch, LaunchedDesktop, spawn_desktop

__all__ = ["DESKTOP", "ChaosRun", "RunResult"]

#: The desktop's name inside the run's own runtime directory.
DESKTOP = "default"
#: Seconds a supervisor may take to answer after it is started.
START_S = 60.0
#: Seconds an agent gets to exit after SIGTERM, and a supervisor after shutdown.
STOP_S = 10.0
#: Size of the tmpfs a run mounts for the store when a plan fills it (root only).
STORE_TMPFS = "16m"

#: Run-level settings a chaos desktop adds to its config: a fault every few seconds must not mark
#: an app failed (the default allows 3 restarts a minute).
RUN_CONFIG = "max_restarts = 100\nrestart_period_s = 1.0\nrestart_backoff_s = 0.1\n"


@dataclass(frozen=True)
class RunResult:
    """What a run did: where its history is, and its one-line summary figures."""

    #: The history file.
    history: Path
    #: The run's directory (runtime, store, logs).
    workdir: Path
    #: The agent's exit status (None: none, or stopped while running).
    agent_exit: int | None
    #: Processes of the run alive after stop (then killed), with their command lines.
    leftovers: tuple[Leftover, ...]
    #: Counts by history kind (``command``, ``fault``…).
    counts: dict[str, int] = field(default_factory=dict)
    #: The run's own files (runtime, store, logs) were removed: only the history is left.
    cleaned: bool = False

    @property
    def leftover_pids(self) -> tuple[int, ...]:
        """The pids of :attr:`leftovers`."""
        return tuple(leftover.pid for leftover in self.leftovers)

    def summary(self) -> str:
        """One line: commands, faults injected, recoveries, errors, leftovers."""
        c = self.counts
        return (
            f"chaos run: {c.get('command', 0)} commands, {c.get('fault', 0)} faults injected, "
            f"{c.get('recovery', 0)} recoveries, {c.get('errors', 0)} error replies, "
            f"agent exit {self.agent_exit}, {len(self.leftover_pids)} processes left; "
            f"history {self.history}"
            + (
                f"; the run's desktop and logs were removed from {self.workdir} (--keep keeps them)"
                if self.cleaned
                else f"; the run's desktop and logs are in {self.workdir}"
            )
        )


class ChaosRun:
    """One chaos run: desktop up, agent started, plan injected, everything stopped."""

    def __init__(
        self,
        plan: Plan,
        agent: list[str] | Callable[[dict[str, str]], int | None],
        duration_s: float | None = None,
        history: Path | None = None,
        workdir: Path | None = None,
        apps: list[str] | None = None,
        config_extra: str = "",
        keep: bool = True,
    ) -> None:
        self.plan = plan
        self.agent = agent
        #: Keep the run's own files in a directory made for it (else only its history stays).
        self.keep = keep or workdir is not None
        self.duration_s = plan.duration_s if duration_s is None else duration_s
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="aotui-chaos-")).resolve()
        self.history = Path(history or self.workdir / "history.jsonl").resolve()
        self.apps = apps
        self.config_extra = config_extra
        self.runtime = self.workdir / "run"
        self.home = self.workdir / "home"
        self.supervisors: list[LaunchedDesktop] = []
        self.seen: set[int] = set()  # every pid of the run we ever saw
        self.mounted: Path | None = None
        self.reaper = Subreaper()
        self._agent: subprocess.Popen[bytes] | None = None
        self._reaped_at = 0.0

    # --- the environment ------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The environment of the agent (and of the supervisor, less the chaos setup)."""
        env = dict(os.environ)
        env.pop(CHAOS_ENV, None)
        env.update(
            AOTUI_SOCKET=str(self.runtime),
            AOTUI_HOME=str(self.home),
            AOTUI_SESSION=env.get("AOTUI_SESSION", "chaos-agent"),
            AOTUI_RPC_SOCKET=str(self.runtime / DESKTOP / "rpc.sock"),
        )
        return env

    def _config(self) -> Path:
        path = self.workdir / "desktop.toml"
        lines = [RUN_CONFIG, self.config_extra]
        if self.apps is not None:
            listed = ", ".join(f'"{a}"' for a in ["system/chat", *self.apps])
            lines.append(f"apps = [{listed}]\n")
        path.write_text("".join(lines))
        return path

    def _prepare(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.runtime.mkdir(mode=0o700, exist_ok=True)
        (self.home / "desktops").mkdir(mode=0o700, parents=True, exist_ok=True)
        if any(
            s.detail.get("where") == "store" for s in self.plan.of_types(FaultType.DISK_FULL)
        ) and (os.geteuid() == 0):
            # A small filesystem of its own, so disk_full can fill it for real (never a real disk).
            target = self.home / "desktops"
            done = subprocess.run(
                [
                    "mount",
                    "-t",
                    "tmpfs",
                    "-o",
                    f"size={STORE_TMPFS},mode=0700",
                    "tmpfs",
                    str(target),
                ],
                capture_output=True,
            )
            if done.returncode == 0:
                self.mounted = target

    # --- the supervisor -------------------------------------------------------------------------

    def _start_supervisor(
        self, writer: HistoryWriter, recovering: str | None = None, killed_at: float | None = None
    ) -> int:
        setup = self.workdir / f"chaos-{len(self.supervisors)}.json"
        ChaosSetup(
            self.plan.to_plain(),
            str(self.history),
            writer.epoch,
            recovering,
            killed_at,
            generation=len(self.supervisors),
        ).write(setup)
        launch = DesktopLaunch(
            DESKTOP,
            self._config(),
            env={**self.env(), CHAOS_ENV: str(setup)},  # its AOTUI_SOCKET is the run's runtime
            log=self.workdir / "supervisor.log",
            new_session=True,
        )
        supervisor = spawn_desktop(launch)
        self.supervisors.append(supervisor)
        self.seen.add(supervisor.pid)
        supervisor.wait_answering(START_S)
        return supervisor.pid

    def _kill_supervisor(self, writer: HistoryWriter, fid: str, spec: FaultSpec) -> None:
        """kill -9 the supervisor, then ``up`` again (the new one records its recovery)."""
        process = self.supervisors[-1].process
        self._remember_pids()
        writer.append(
            EventKind.FAULT,
            fault=fid,
            type=spec.type.value,
            phase="inject",
            target={},
            detail={"pid": process.pid},
        )
        killed_at = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait()
        self._unanswered(writer, fid)
        try:
            pid = self._start_supervisor(writer, recovering=fid, killed_at=killed_at)
        except AotuiError as exc:
            seconds = round(time.time() - killed_at, 4)
            writer.append(
                EventKind.RECOVERY,
                fault=fid,
                app=None,
                what="supervisor",
                seconds=seconds,
                ok=False,
            )
            writer.append(EventKind.VISIBLE, fault=fid, where="status", text=exc.message)
            raise
        writer.append(
            EventKind.VISIBLE,
            fault=fid,
            where="status",
            text=f"supervisor pid {process.pid} gone; pid {pid} serves",
        )

    def _unanswered(self, writer: HistoryWriter, fid: str) -> None:
        """The commands the killed supervisor never answered: what their agent got instead."""
        try:
            events = load_history(self.history).events
        except AotuiError:
            return
        replied = {e.id for e in events if isinstance(e, ReplyEvent)}
        for command in events:
            if isinstance(command, CommandEvent) and command.id not in replied:
                # It may or may not have taken effect before the kill: the outcome is unknown.
                writer.append(
                    EventKind.REPLY,
                    id=command.id,
                    ok=False,
                    code="E_UNAVAILABLE",
                    message=f"the desktop was killed (chaos fault {fid}) before it answered",
                    recoverable=True,
                    outcome="unknown",
                    src="runner",
                )

    def _stop_supervisor(self) -> None:
        if self.supervisors:
            self.supervisors[-1].stop(STOP_S)

    # --- processes ------------------------------------------------------------------------------

    def _remember_pids(self) -> None:
        for supervisor in self.supervisors:
            with contextlib.suppress(psutil.Error):
                self.seen.update(
                    c.pid for c in psutil.Process(supervisor.pid).children(recursive=True)
                )

    def _alive(self) -> list[int]:
        """Processes of the run still alive that the subreaper may not hold: those we saw, and
        any whose environment is ours (without a subreaper, orphans went to init)."""
        alive = {pid for pid in self.seen if _running(pid)}
        marker = str(self.runtime)
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if process.pid != os.getpid() and process.environ().get("AOTUI_SOCKET") == marker:
                    alive.add(process.pid)
        return sorted(alive)

    def _popen_pids(self) -> set[int]:
        """Children a ``Popen`` of ours waits for: the subreaper leaves their exits alone."""
        pids = {supervisor.pid for supervisor in self.supervisors}
        if self._agent is not None:
            pids.add(self._agent.pid)
        return pids

    def _reap(self) -> None:
        """Now and then, collect the exits of orphans the run handed to the runner."""
        if time.monotonic() - self._reaped_at >= 0.5:
            self._reaped_at = time.monotonic()
            self.reaper.reap(self._popen_pids())

    # --- the run --------------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Run the plan with the agent; returns once every process of the run is stopped."""
        self._prepare()
        epoch = time.time()
        writer = HistoryWriter(self.history, epoch, Source.RUNNER)
        agent_argv = list(self.agent) if isinstance(self.agent, list) else []
        writer.append(
            EventKind.RUN,
            phase="start",
            seed=self.plan.seed,
            plan=self.plan.to_plain(),
            desktop=DESKTOP,
            agent=agent_argv,
            epoch=epoch,
        )
        agent_exit: int | None = None
        started = time.monotonic()
        with self.reaper:
            try:
                self._start_supervisor(writer)
                self._remember_pids()
                agent_exit = self._drive(writer, started)
            finally:
                self._remember_pids()
                self._stop_supervisor()
                time.sleep(0.2)  # what the supervisor killed last is reaped by now
                # Recorded first, then stopped: a run leaves nothing behind.
                leftovers = self.reaper.end_all(self._popen_pids(), also=self._alive())
                writer.append(
                    EventKind.RUN,
                    phase="end",
                    agent_exit=agent_exit,
                    leftover_pids=[leftover.pid for leftover in leftovers],
                    leftovers=leftovers,
                    duration=round(time.monotonic() - started, 3),
                )
                writer.close()
                if self.mounted is not None:
                    subprocess.run(["umount", "-l", str(self.mounted)], capture_output=True)
        cleaned = not self.keep and self._clean()
        return RunResult(
            self.history,
            self.workdir,
            agent_exit,
            tuple(leftovers),
            _counts(self.history),
            cleaned,
        )

    def _clean(self) -> bool:
        """Remove the run's own files from the directory made for it, all but its history."""
        if self.mounted is not None:
            return False  # a lazily unmounted store may still be busy: leave it, say where
        for entry in self.workdir.iterdir():
            if entry == self.history:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        return True

    def _drive(self, writer: HistoryWriter, started: float) -> int | None:
        """Run the agent until it exits or the duration ends, firing the timed faults."""
        timed = [(t, s) for t, s in self.plan.schedule(self.duration_s) if s.type in TIMED]
        fired: dict[str, int] = {}
        exit_box: list[int | None] = []
        process: subprocess.Popen[bytes] | None = None
        thread: threading.Thread | None = None
        if isinstance(self.agent, list):
            process = subprocess.Popen(
                self.agent, env=self.env(), start_new_session=True, stdin=subprocess.DEVNULL
            )
            self._agent = process
            self.seen.add(process.pid)
        else:
            agent = self.agent
            thread = threading.Thread(
                target=lambda: exit_box.append(agent(self.env())), daemon=True
            )
            thread.start()
        deadline = started + self.duration_s
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                return process.returncode
            if thread is not None and not thread.is_alive():
                return exit_box[0] if exit_box else None
            if timed and time.monotonic() - started >= timed[0][0]:
                _at, spec = timed.pop(0)
                count = fired[spec.fault_id] = fired.get(spec.fault_id, 0) + 1
                try:
                    self._kill_supervisor(writer, f"{spec.fault_id}.{count}", spec)
                except AotuiError:
                    break  # the desktop did not come back (recorded): the run ends here
            self._reap()
            time.sleep(0.05)
        if process is not None:  # the duration is over: the agent is stopped
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if thread is not None:
            self._stop_supervisor()  # the built-in agent's next call fails, and it returns
            thread.join(STOP_S)
        return None


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _counts(history: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    with contextlib.suppress(AotuiError):
        for event in load_history(history).events:
            if isinstance(event, FaultEvent) and event.phase is not FaultPhase.INJECT:
                continue
            kind = event.KIND.value
            counts[kind] = counts.get(kind, 0) + 1
            if isinstance(event, ReplyEvent) and not event.ok:
                counts["errors"] = counts.get("errors", 0) + 1
    return counts
