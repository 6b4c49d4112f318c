"""The records of a chaos history: one frozen dataclass per kind of line, and the enums they use.

Each class's fields are the line's fields (besides ``t``, ``kind`` and ``src``); the reader and
the writer in :mod:`~supervisor.chaos.history` derive their checks from these declarations.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aotui.protocol.errors import ErrorCode

__all__ = [
    "EVENT_CLASSES",
    "CommandEvent",
    "ConfirmVerdict",
    "ConfirmationEvent",
    "Event",
    "EventKind",
    "FaultEvent",
    "FaultPhase",
    "FaultTarget",
    "FaultType",
    "Interface",
    "Leftover",
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
    #: The user's answer to a command that waited for it, and what came of it.
    CONFIRMATION = "confirmation"
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
    #: Nothing ran yet: it waits for the user (its ``confirmation`` line says what came of it).
    WAITING = "waiting"


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


@dataclass(frozen=True)
class Leftover:
    """A process of the run still alive at its end (then killed)."""

    #: Its pid.
    pid: int
    #: Its command line, arguments joined by spaces, sanitized and cut short.
    cmdline: str


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
    #: End: processes of the run still alive after stop (then killed).
    leftover_pids: tuple[int, ...] | None = None
    #: End: the same processes with their command lines (histories before these: none).
    leftovers: tuple[Leftover, ...] = ()
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
    #: The id of a command this one sends again with the same command id (after a reply whose
    #: outcome was unknown); the desktop must answer it with the first one's reply.
    retry_of: str | None = None


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
    #: Outcome waiting: the confirmation the command waits on (``C1``).
    confirmation: str | None = None


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


class ConfirmVerdict(enum.Enum):
    """What the user's answer did to a command that waited for it."""

    #: Confirmed, and it ran: its effect is in the app's state from here on.
    RAN = "ran"
    #: Confirmed, and it failed: no effect.
    FAILED = "failed"
    #: Refused: it never runs.
    REFUSED = "refused"


@dataclass(frozen=True, kw_only=True)
class ConfirmationEvent(Event):
    """The user's answer to a command that waited for it."""

    KIND = EventKind.CONFIRMATION
    #: The confirmation's id (``C1``).
    confirmation: str
    #: The command that waited (its ``command`` line's id).
    command: str
    #: The app it concerns.
    app: str
    #: What came of the answer.
    verdict: ConfirmVerdict


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
        ConfirmationEvent,
    )
}
