"""The chaos history: one JSON object per line, appended by the runner and the supervisor.

Every line carries ``t`` (seconds since the run's epoch), ``kind`` (:class:`EventKind`) and ``src``
(:class:`Source`); the other fields depend on the kind and are declared once, as the fields of that
kind's frozen dataclass. Reading and writing both go through those declarations, so a writer cannot
produce a line the reader refuses. The format is described in ``docs/chaos.md``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import threading
import time
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from aotui.protocol.errors import AotuiError, ErrorCode

__all__ = [
    "CommandEvent",
    "Event",
    "EventKind",
    "FaultEvent",
    "FaultPhase",
    "FaultTarget",
    "FaultType",
    "History",
    "HistoryWriter",
    "Interface",
    "Outcome",
    "RecoveryEvent",
    "RecoveryWhat",
    "RefRead",
    "ReplyEvent",
    "RunEvent",
    "RunPhase",
    "SampleEvent",
    "SignalEvent",
    "Source",
    "StateBasis",
    "StateEvent",
    "VisibleEvent",
    "VisibleWhere",
    "event_to_json",
    "load_history",
    "parse_event",
    "read_history",
]


class EventKind(enum.Enum):
    """What a history line records."""

    #: The run's start (seed, plan, epoch) or end (agent exit, leftover processes).
    RUN = "run"
    #: A command an agent sent.
    COMMAND = "command"
    #: The desktop's reply to a command.
    REPLY = "reply"
    #: A fault injected or cleared.
    FAULT = "fault"
    #: A worker or the supervisor serving again after a fault.
    RECOVERY = "recovery"
    #: Evidence that the agent could see a fault.
    VISIBLE = "visible"
    #: A signal the desktop sent to its clients.
    SIGNAL = "signal"
    #: A digest of what a client sees of one app.
    STATE = "state"
    #: The supervisor's resource use at one moment.
    SAMPLE = "sample"


class Source(enum.Enum):
    """Who wrote a line."""

    #: The chaos runner (plans, faults, the built-in agent).
    RUNNER = "runner"
    #: The supervisor under test.
    SUPERVISOR = "supervisor"
    #: The agent program, through its interface.
    AGENT = "agent"


class RunPhase(enum.Enum):
    """Which end of the run a ``run`` line marks."""

    #: The run started; carries the seed, the plan and the epoch.
    START = "start"
    #: The run ended; carries the agent's exit and what was left running.
    END = "end"


class Interface(enum.Enum):
    """The face a command came through."""

    #: ``aotui exec``.
    CLI = "cli"
    #: The MCP server.
    MCP = "mcp"
    #: JSON-RPC on ``rpc.sock``.
    JSONRPC = "jsonrpc"
    #: The Python client.
    PYTHON = "python"
    #: The built-in random agent of ``aotui chaos app``.
    RANDOM = "random"


class Outcome(enum.Enum):
    """What the desktop says a command did."""

    #: The effect happened (an ok reply).
    APPLIED = "applied"
    #: No effect (a typed error).
    NONE = "none"
    #: Not known (``E_TIMEOUT`` with an unknown outcome).
    UNKNOWN = "unknown"


class FaultType(enum.Enum):
    """The faults a plan can inject."""

    #: ``kill -9`` of a worker, before or after the operation's effect.
    KILL_WORKER = "kill_worker"
    #: SIGSTOP of a worker for a while.
    FREEZE = "freeze"
    #: An operation made slower.
    LATENCY = "latency"
    #: An operation made to fail with a code.
    FAIL = "fail"
    #: A list changed between the agent's snapshot and its command.
    DRIFT = "drift"
    #: A plausible wrong value rendered.
    LIE = "lie"
    #: Memory pressure until the watchdog acts.
    MEMORY_PRESSURE = "memory_pressure"
    #: ``kill -9`` of the supervisor, then ``up`` again.
    KILL_SUPERVISOR = "kill_supervisor"
    #: A brokered HTTP request slowed, failed, truncated or timed out.
    HTTP_FAULT = "http_fault"
    #: No space left for an app's grant or for the store.
    DISK_FULL = "disk_full"
    #: Signals dropped.
    SIGNAL_LOSS = "signal_loss"
    #: Signals sent in a burst.
    SIGNAL_BURST = "signal_burst"


class FaultPhase(enum.Enum):
    """Whether a ``fault`` line starts or ends a fault."""

    #: The fault begins.
    INJECT = "inject"
    #: The fault ends.
    CLEAR = "clear"


class RecoveryWhat(enum.Enum):
    """What came back after a fault."""

    #: One app's worker.
    WORKER = "worker"
    #: The supervisor (the whole desktop).
    SUPERVISOR = "supervisor"


class VisibleWhere(enum.Enum):
    """Where the agent could see a fault."""

    #: In a command's reply.
    REPLY = "reply"
    #: In the System Logs app.
    SYSTEM_LOG = "system_log"
    #: In ``status``.
    STATUS = "status"
    #: In a signal.
    SIGNAL = "signal"


class StateBasis(enum.Enum):
    """Why an app's state digest was taken."""

    #: Right after an acknowledged command.
    ACK = "ack"
    #: Right after a recovery.
    RECOVERED = "recovered"
    #: At the end of the run.
    FINAL = "final"


@dataclass(frozen=True, kw_only=True)
class RefRead:
    """A ref the agent used, and the value its snapshot showed for it."""

    #: The ref as written (``notes[2]``).
    ref: str
    #: The value the agent's snapshot showed for that ref.
    read: Any = None


@dataclass(frozen=True, kw_only=True)
class FaultTarget:
    """Where a fault aims; ``None`` means any."""

    #: The app (``app_2``).
    app: str | None = None
    #: The operation's id.
    operation: str | None = None
    #: The view's id.
    view: str | None = None


@dataclass(frozen=True, kw_only=True)
class Event:
    """The fields every line has."""

    KIND: ClassVar[EventKind]

    #: Seconds since the run's epoch.
    t: float
    #: Who wrote the line.
    src: Source
    #: The line number in the file it was read from (1-based; 0 when not read from a file).
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, kw_only=True)
class RunEvent(Event):
    """The run's start or end."""

    KIND = EventKind.RUN
    #: Start or end.
    phase: RunPhase
    #: Start: the seed of the fault schedule.
    seed: int | None = None
    #: Start: the parsed plan as plain data.
    plan: dict[str, Any] = field(default_factory=dict)
    #: Start: the desktop's name.
    desktop: str | None = None
    #: Start: the agent's argv (empty for the built-in random agent).
    agent: tuple[str, ...] = ()
    #: Start: the wall-clock time that ``t`` counts from.
    epoch: float | None = None
    #: End: the agent's exit status (``None``: none, or still running when stopped).
    agent_exit: int | None = None
    #: End: processes of the run still alive after stop.
    leftover_pids: tuple[int, ...] | None = None
    #: End: the run's length in seconds.
    duration: float | None = None


@dataclass(frozen=True, kw_only=True)
class CommandEvent(Event):
    """A command an agent sent."""

    KIND = EventKind.COMMAND
    #: Unique in the run; the reply carries it.
    id: str
    #: The agent's session.
    session: str | None = None
    #: The face it came through.
    interface: Interface
    #: The target app.
    app: str | None = None
    #: The operation's id.
    operation: str | None = None
    #: The arguments as sent.
    args: dict[str, Any] = field(default_factory=dict)
    #: The ``<context>`` text, when the command was given as text.
    text: str | None = None
    #: The snapshot the agent acted on.
    snapshot_id: str | None = None
    #: Per argument name, the ref used and the value the agent read for it.
    refs: dict[str, RefRead] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ReplyEvent(Event):
    """The desktop's reply to a command."""

    KIND = EventKind.REPLY
    #: The command's id.
    id: str
    #: Whether the command succeeded.
    ok: bool
    #: The error's code (CONTRACT §7) when not ok.
    code: ErrorCode | None = None
    #: The error's message.
    message: str | None = None
    #: Whether a retry can help.
    recoverable: bool | None = None
    #: What the desktop says happened.
    outcome: Outcome
    #: Per argument name, the value its ref resolved to when executed.
    resolved: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class FaultEvent(Event):
    """A fault injected or cleared."""

    KIND = EventKind.FAULT
    #: The fault's id in the run (``f7``).
    fault: str
    #: What kind of fault.
    type: FaultType
    #: Inject or clear.
    phase: FaultPhase
    #: Where it aims.
    target: FaultTarget = field(default_factory=FaultTarget)
    #: Kind-specific detail (``{"seconds": 2}`` for a freeze, the shown value of a lie, ...).
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RecoveryEvent(Event):
    """A worker or the supervisor serving again after a fault."""

    KIND = EventKind.RECOVERY
    #: The fault that caused it, if known.
    fault: str | None = None
    #: The app (``None``: the whole desktop).
    app: str | None = None
    #: What came back.
    what: RecoveryWhat
    #: Seconds from the fault's inject to serving again.
    seconds: float
    #: Whether it came back at all.
    ok: bool


@dataclass(frozen=True, kw_only=True)
class VisibleEvent(Event):
    """Evidence that the agent could see a fault."""

    KIND = EventKind.VISIBLE
    #: The fault seen.
    fault: str
    #: Where it was seen.
    where: VisibleWhere
    #: What the agent saw.
    text: str


@dataclass(frozen=True, kw_only=True)
class SignalEvent(Event):
    """A signal the desktop sent."""

    KIND = EventKind.SIGNAL
    #: Its reasons (CONTRACT §6).
    reasons: tuple[str, ...]
    #: The apps it names.
    apps: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class StateEvent(Event):
    """A digest of what a client sees of one app."""

    KIND = EventKind.STATE
    #: The app.
    app: str
    #: sha256 of the app's rendered views, in a stable order.
    digest: str
    #: Why it was taken.
    basis: StateBasis
    #: Basis ack: the acknowledged command it follows.
    command: str | None = None
    #: Basis recovered: the fault recovered from.
    fault: str | None = None


@dataclass(frozen=True, kw_only=True)
class SampleEvent(Event):
    """The supervisor's resource use at one moment."""

    KIND = EventKind.SAMPLE
    #: The supervisor's resident memory in bytes.
    rss: int
    #: The supervisor's open file descriptors.
    fds: int
    #: Processes of the desktop.
    procs: int


#: The record class of each kind.
EVENT_CLASSES: Mapping[EventKind, type[Event]] = {
    cls.KIND: cls
    for cls in (
        RunEvent,
        CommandEvent,
        ReplyEvent,
        FaultEvent,
        RecoveryEvent,
        VisibleEvent,
        SignalEvent,
        StateEvent,
        SampleEvent,
    )
}

#: Fields a ``run`` line must carry in each phase (beyond the declared required ones).
_RUN_PHASE_FIELDS: Mapping[RunPhase, tuple[str, ...]] = {
    RunPhase.START: ("seed", "desktop", "epoch"),
    RunPhase.END: ("leftover_pids", "duration"),
}


class _FieldError(ValueError):
    """One field of a line is wrong; the message says which and why."""


def _convert(value: Any, tp: Any, where: str) -> Any:
    """``value`` checked against the declared type ``tp`` (JSON lists become tuples)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is types.UnionType or origin is typing.Union:
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(value, option, where)
            except _FieldError as exc:
                errors.append(str(exc))
        raise _FieldError(errors[0] if len(errors) == 1 else f"{where}: {value!r:.80} is not valid")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if isinstance(value, tp):
            return value
        choices = ", ".join(str(member.value) for member in tp)
        try:
            return tp(value)
        except (ValueError, TypeError):
            raise _FieldError(f"{where}: {value!r:.80} is not one of {choices}") from None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise _FieldError(f"{where}: expected an object, got {type(value).__name__}")
        return _build(tp, value, where + ".")
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise _FieldError(f"{where}: expected a list, got {type(value).__name__}")
        (item,) = typing.get_args(tp)[:1]
        return tuple(_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise _FieldError(f"{where}: expected an object, got {type(value).__name__}")
        _, item = typing.get_args(tp)
        return {str(k): _convert(v, item, f"{where}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise _FieldError(f"{where}: expected true or false, got {value!r:.80}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _FieldError(f"{where}: expected an integer, got {value!r:.80}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _FieldError(f"{where}: expected a number, got {value!r:.80}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _FieldError(f"{where}: expected a string, got {value!r:.80}")
        return value
    raise TypeError(f"no conversion for the declared type {tp!r}")  # a bug in this module


def _build(cls: type[Any], raw: Mapping[str, Any], prefix: str = "", line: int = 0) -> Any:
    """The dataclass ``cls`` built from ``raw``; unknown keys are ignored (newer writers)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name == "line":
            continue
        if f.name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise _FieldError(f"missing field '{prefix}{f.name}'")
            continue
        values[f.name] = _convert(raw[f.name], hints[f.name], prefix + f.name)
    if issubclass(cls, Event):
        values["line"] = line
    return cls(**values)


def parse_event(raw: object, line: int = 0) -> Event:
    """The typed record for one decoded line; ``AotuiError(E_INVALID_CMD)`` saying what is wrong."""
    where = f"line {line}: " if line else ""
    try:
        if not isinstance(raw, Mapping):
            raise _FieldError(f"expected a JSON object, got {type(raw).__name__}")
        if "kind" not in raw:
            raise _FieldError("missing field 'kind'")
        kind = _convert(raw["kind"], EventKind, "kind")
        event = _build(EVENT_CLASSES[kind], raw, line=line)
        if isinstance(event, RunEvent):
            for name in _RUN_PHASE_FIELDS[event.phase]:
                if name not in raw:
                    raise _FieldError(f"a run {event.phase.value} needs the field {name!r}")
    except _FieldError as exc:
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            f"{where}{exc}; each line must follow the history format in docs/chaos.md",
            {"line": line},
        ) from None
    return typing.cast(Event, event)


def _plain(value: Any) -> Any:
    """``value`` as plain JSON data (enums by value, records as objects, tuples as lists)."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def event_to_json(event: Event) -> dict[str, Any]:
    """One line's object: ``t``, ``kind``, ``src`` and the kind's fields (not ``line``)."""
    data: dict[str, Any] = {"t": event.t, "kind": event.KIND.value}
    for f in dataclasses.fields(event):
        if f.name not in ("t", "line"):
            data[f.name] = _plain(getattr(event, f.name))
    return data


class HistoryWriter:
    """Appends typed lines to a history file; safe to share between threads and processes."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        epoch: float,
        src: Source = Source.RUNNER,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.epoch = epoch
        self.src = src
        self._clock = clock
        self._lock = threading.Lock()
        # O_APPEND and one write() per line: lines from several writers never interleave.
        self._fd: int | None = os.open(
            self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
        )

    def append(self, kind: EventKind | str, **fields: Any) -> Event:
        """Validate and append one line of ``kind``; adds ``t`` (and ``src`` if not given)."""
        with self._lock:
            if self._fd is None:
                raise AotuiError(ErrorCode.E_INTERNAL, f"history {self.path} is already closed")
            raw = {"src": self.src, **fields, "kind": kind, "t": self._clock() - self.epoch}
            event = parse_event(_plain(raw))
            try:
                data = json.dumps(
                    event_to_json(event), ensure_ascii=False, separators=(",", ":"), allow_nan=False
                )
            except (TypeError, ValueError) as exc:
                raise AotuiError(
                    ErrorCode.E_INVALID_CMD,
                    f"a {event.KIND.value} line cannot be written as JSON ({exc}); pass plain"
                    " data (str, numbers, bool, None, lists, dicts) with finite numbers",
                ) from None
            encoded = (data + "\n").encode("utf-8")
            try:
                written = os.write(self._fd, encoded)
            except OSError as exc:
                raise AotuiError(
                    ErrorCode.E_IO, f"cannot append to the history {self.path}: {exc.strerror}"
                ) from exc
            if written != len(encoded):
                raise AotuiError(
                    ErrorCode.E_IO,
                    f"short write to the history {self.path} ({written} of {len(encoded)} bytes);"
                    " free disk space",
                )
            return event

    def close(self) -> None:
        """Close the file; later appends fail."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass(frozen=True)
class History:
    """A history as read: its events in file order, and whether its last line was cut short."""

    #: The file read.
    path: Path
    #: Every complete line's record, in file order.
    events: tuple[Event, ...]
    #: The number of a last line cut mid-write (a writer killed), ignored; ``None`` if whole.
    truncated_line: int | None = None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_history(path: str | os.PathLike[str]) -> History:
    """Read and check a history file; a malformed line is an ``AotuiError`` naming its number."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise AotuiError(
            ErrorCode.E_NOT_FOUND,
            f"no history at {path}; give the file `aotui chaos run` wrote",
            {"path": str(path)},
        ) from None
    except OSError as exc:
        raise AotuiError(
            ErrorCode.E_IO,
            f"cannot read the history {path}: {exc.strerror}; check the path and its permissions",
            {"path": str(path)},
        ) from exc
    lines = data.split(b"\n")
    # A file written whole ends with a newline, leaving an empty last piece.
    last_whole = data.endswith(b"\n") or not data
    if last_whole:
        lines.pop()
    events: list[Event] = []
    truncated: int | None = None
    for number, chunk in enumerate(lines, start=1):
        if not chunk.strip():
            continue
        try:
            raw = json.loads(chunk.decode("utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            if number == len(lines) and not last_whole:
                truncated = number  # a writer killed mid-line: tolerated, reported by the caller
                break
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"{path} line {number}: not a JSON object ({exc}); each line must be one JSON"
                " object as in docs/chaos.md",
                {"path": str(path), "line": number},
            ) from None
        try:
            events.append(parse_event(raw, number))
        except AotuiError as exc:
            context = {**exc.data, "path": str(path)}
            raise AotuiError(exc.code, f"{path} {exc.message}", context) from None
    return History(path, tuple(events), truncated)


def read_history(path: str | os.PathLike[str]) -> list[Event]:
    """The events of a history file (see :func:`load_history` for the truncated last line)."""
    return list(load_history(path).events)
