"""The wire messages: every frame between client, supervisor and worker is one of these.

Each message is a frozen dataclass with a ``KIND`` tag; :mod:`protocol.codec` turns them into
frames and back, validating every field against the annotations here. Nothing else in aotui
handles raw frames.

Directions:

- supervisor → worker: :class:`Start` (and its :class:`RestoreChunk`), :class:`Operation`,
  :class:`Mount`, :class:`Dismount`, :class:`Serialize`, :class:`Ping`, :class:`Shutdown`.
- worker → supervisor: :class:`Hello`, :class:`FragmentUpdate`, :class:`Ack`, :class:`ErrorReply`,
  :class:`AppState`, :class:`Pong`, :class:`LogRecord`, :class:`HttpCall` (answered by
  :class:`HttpResult`).
- client ↔ supervisor: :class:`Request` → :class:`Reply` or :class:`ErrorReply`.
- supervisor → subscribers (PUB): :class:`Signal`.
- supervisor ↔ zygote: :class:`Launch` → :class:`Launched`; :class:`Exited` when a worker ends.

Request ids are chosen by the sender of the request and echoed by the single reply.

The client ↔ supervisor messages are defined here; the others live in
:mod:`protocol.worker_messages` and load on first use (``aotui status`` never needs them), but are
imported from here all the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from aotui.protocol.api import SignalReason
from aotui.protocol.lazy import lazy_exports

if TYPE_CHECKING:
    from aotui.protocol.worker_messages import (
        MESSAGE_TYPES,
        Ack,
        AppState,
        ChildLink,
        Dismount,
        Exited,
        FragmentUpdate,
        Hello,
        HttpCall,
        HttpRequest,
        HttpResponse,
        HttpResult,
        Launch,
        Launched,
        LogLevel,
        LogRecord,
        Mount,
        Operation,
        OperationSpec,
        Ping,
        Pong,
        RestoreChunk,
        SandboxLayer,
        Serialize,
        Shutdown,
        Start,
        ViewFragment,
        WorkerPolicy,
    )

__all__ = [
    "MESSAGE_TYPES",
    "Ack",
    "AppState",
    "ChildLink",
    "Dismount",
    "ErrorReply",
    "Exited",
    "FragmentUpdate",
    "Hello",
    "HttpCall",
    "HttpRequest",
    "HttpResponse",
    "HttpResult",
    "Launch",
    "Launched",
    "LogLevel",
    "LogRecord",
    "Message",
    "Mount",
    "Operation",
    "OperationSpec",
    "Ping",
    "Pong",
    "Reply",
    "Request",
    "RestoreChunk",
    "SandboxLayer",
    "Serialize",
    "Shutdown",
    "Signal",
    "SignalReason",
    "Start",
    "ViewFragment",
    "WorkerPolicy",
    "message_type",
]


@dataclass(frozen=True, slots=True)
class Message:
    """Base of every wire message; subclasses set ``KIND``, the tag written into the frame."""

    KIND: ClassVar[str] = ""


# --- both directions / client ↔ supervisor ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorReply(Message):
    """A request failed; the fields are those of :meth:`protocol.errors.AotuiError.to_dict`."""

    KIND: ClassVar[str] = "error"
    request_id: int
    code: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Request(Message):
    """A client call on the supervisor (``snapshot``, ``execute``, ``acquire``, …)."""

    KIND: ClassVar[str] = "request"
    request_id: int
    method: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reply(Message):
    """A successful answer to a :class:`Request`."""

    KIND: ClassVar[str] = "reply"
    request_id: int
    result: Any = None


@dataclass(frozen=True, slots=True)
class Signal(Message):
    """Published when the desktop changed; carries no snapshot (CONTRACT §6)."""

    KIND: ClassVar[str] = "signal"
    desktop_id: str
    timestamp: float
    #: The latest change.
    reason: SignalReason
    #: Every distinct reason since the previous signal, first-seen order (none lost to the
    #: throttle); empty from a sender that predates the field.
    reasons: list[SignalReason] = field(default_factory=list)
    #: The app ids the changes since the previous signal concern, first-seen order, where the
    #: desktop knows them (a change of its own, System Logs say, adds none).
    apps: list[str] = field(default_factory=list)


#: The client ↔ supervisor kinds, all a client reads or sends.
_CLIENT_TYPES: dict[str, type[Message]] = {
    cls.KIND: cls for cls in (ErrorReply, Request, Reply, Signal)
}


def message_type(kind: str) -> type[Message] | None:
    """The message class tagged ``kind``, or ``None``: the codec's registry of kinds."""
    found = _CLIENT_TYPES.get(kind)
    if found is None:
        # The desktop's inner kinds: imported on the first frame that names one (or none).
        from aotui.protocol.worker_messages import MESSAGE_TYPES

        found = MESSAGE_TYPES.get(kind)
    return found


# Only the loader: dir() lists what is defined here, and a lazy name once it is loaded.
__getattr__ = lazy_exports(
    __name__,
    {
        "aotui.protocol.worker_messages": (
            "MESSAGE_TYPES",
            "Ack",
            "AppState",
            "ChildLink",
            "Dismount",
            "Exited",
            "FragmentUpdate",
            "Hello",
            "HttpCall",
            "HttpRequest",
            "HttpResponse",
            "HttpResult",
            "Launch",
            "Launched",
            "LogLevel",
            "LogRecord",
            "Mount",
            "Operation",
            "OperationSpec",
            "Ping",
            "Pong",
            "RestoreChunk",
            "SandboxLayer",
            "Serialize",
            "Shutdown",
            "Start",
            "ViewFragment",
            "WorkerPolicy",
        )
    },
)[0]
