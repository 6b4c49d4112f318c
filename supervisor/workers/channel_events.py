"""What a worker says on its channel, and what the runner does with it.

A :class:`~supervisor.workers.handle.WorkerHandle` checks every frame and reports what passed to
a :class:`WorkerEvents`: a fragment update, a log line or an HTTP call (``message``), a frame it
refused (``violation``: the worker is killed), or a bug of ours met reading it (``fault``: the app
is restarted from its acknowledged state rather than left unread until a request times out).
"""

from __future__ import annotations

import contextlib
import time
from typing import Protocol

from aotui.protocol.errors import AotuiError
from aotui.protocol.messages import FragmentUpdate, HttpCall, LogRecord, Message, SignalReason
from aotui.supervisor.desktop.app_record import AppRecord, AppStatus
from aotui.supervisor.desktop.system_log import dropped_by, said_by
from aotui.supervisor.paths import app_log_dir
from aotui.supervisor.workers.exits import ExitReason
from aotui.supervisor.workers.handle import LOG_LINES_PER_S, WorkerHandle, describe_fault
from aotui.supervisor.workers.host import RunnerHost
from aotui.supervisor.workers.http_calls import HttpCalls
from aotui.supervisor.workers.kill import kill_worker

__all__ = ["ChannelEvents", "WorkerEvents", "brief_traceback"]

_TRACEBACK = "Traceback (most recent call last)"
#: Characters of a log line read at all (the SDK sends at most 2,000; a frame holds 4 MiB).
_LOG_CHARS = 1 << 16


class WorkerEvents(Protocol):
    """What a worker's handle reports, once a frame is checked."""

    def message(self, worker: WorkerHandle, message: Message) -> None:
        """A fragment update, log record or HTTP call the worker may send."""

    def violation(self, worker: WorkerHandle, error: AotuiError) -> None:
        """The worker broke the channel protocol (``error`` says how)."""

    def fault(self, worker: WorkerHandle, exc: Exception) -> None:
        """A bug of ours met reading the worker's channel (already logged)."""


class ChannelEvents:
    """The runner's :class:`WorkerEvents`: views to the app's tree, lines to System Logs."""

    def __init__(self, host: RunnerHost, http: HttpCalls) -> None:
        self.host = host
        self.http = http

    def message(self, worker: WorkerHandle, message: Message) -> None:
        """Route one checked message of ``worker`` to where it belongs."""
        app = self.host.app_of(worker)
        if app is None:
            return
        if isinstance(message, FragmentUpdate):
            app.views.apply(message, worker.last_frame_bytes)
            if not worker.first_update.done():
                worker.first_update.set_result(None)
            elif app.status is AppStatus.RUNNING:
                self.host.changed(SignalReason.DOM_MUTATION, app.app_id)
        elif isinstance(message, LogRecord):
            self._log_line(app, worker, message)
        elif isinstance(message, HttpCall):
            self.http.submit(app, worker, message)

    def _log_line(self, app: AppRecord, worker: WorkerHandle, record: LogRecord) -> None:
        """A line the app logged, to System Logs within its rate (a traceback briefly)."""
        admitted, dropped = worker.admit_log()
        if dropped:
            self.host.log(
                f"{app.name}: {dropped} log line(s) dropped (over {LOG_LINES_PER_S}/s)",
                dropped_by(app.app_id),  # one entry: the flood it reports cannot evict it
            )
        if admitted:
            text = record.message[:_LOG_CHARS]
            if _TRACEBACK in text:  # the exception line first: a long trace is cut at the end
                self._keep_traceback(app, worker, text)
                logs = self.host.paths.command(f"logs {app.app_id}")
                text = brief_traceback(text, str(app.manifest.app_dir), logs)
            self.host.log(f"{app.name}: {text}", said_by(app.app_id))

    def _keep_traceback(self, app: AppRecord, worker: WorkerHandle, text: str) -> None:
        """Append a traceback the worker reported to the app's log (``aotui logs``)."""
        if worker.output is not None and worker.output.note(text):
            return  # charged to the app's output budget, rotated with its log
        stamp = time.strftime("%Y-%m-%d %H:%M:%S ")
        lines = "".join(f"{stamp}{line}\n" for line in text.splitlines())
        with (
            contextlib.suppress(OSError),
            open(app_log_dir(self.host.config.desktop) / f"{app.app_id}.log", "a") as log,
        ):
            log.write(lines)

    def violation(self, worker: WorkerHandle, error: AotuiError) -> None:
        """Kill a worker that broke the channel protocol, saying how."""
        app = self.host.app_of(worker)
        if app is None:
            return
        what = f"{app.name} broke the channel protocol ({error.message}); killing it."
        self.host.log(what, app.app_id)
        kill_worker(app, ExitReason.PROTOCOL_VIOLATION)

    def fault(self, worker: WorkerHandle, exc: Exception) -> None:
        """A bug of ours reading ``worker``'s channel: say so and restart the app from its
        acknowledged state, rather than leave it unread until a request times out."""
        app = self.host.app_of(worker)
        if app is None:
            return
        self.host.log(f"{app.name}: {describe_fault(app.app_id, exc)}; killing it.", app.app_id)
        kill_worker(app, ExitReason.SUPERVISOR_ERROR)


def brief_traceback(text: str, app_dir: str, logs: str) -> str:
    """A traceback as one System Logs line: the exception, where the app raised it, where the
    rest is (the deepest frame in the app's own files, else the deepest; ``logs`` is the
    ``aotui logs app_N`` command that prints it, for this desktop)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    exception = lines[-1] if lines else text
    frames = [line for line in lines if line.startswith('File "')]
    own = [line for line in frames if line.startswith(f'File "{app_dir}')]
    where = (own or frames or [""])[-1]
    at = f" ({where})" if where else ""
    return f"{exception}{at}; the whole traceback: {logs}"
