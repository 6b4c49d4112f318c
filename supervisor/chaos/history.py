"""The chaos history: one JSON object per line, appended by the runner and the supervisor.

Every line carries ``t`` (seconds since the run's epoch), ``kind`` (:class:`EventKind`) and ``src``
(:class:`Source`); the other fields depend on the kind and are declared once, as the fields of that
kind's frozen dataclass. Reading and writing both go through those declarations, so a writer cannot
produce a line the reader refuses. The records live in :mod:`~supervisor.chaos.events` and are
exported here too. The format is described in ``docs/chaos.md``.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.chaos.events import (
    EVENT_CLASSES,
    CommandEvent,
    ConfirmationEvent,
    ConfirmVerdict,
    Event,
    EventKind,
    FaultEvent,
    FaultPhase,
    FaultTarget,
    FaultType,
    Interface,
    Outcome,
    RecoveryEvent,
    RecoveryWhat,
    RefRead,
    ReplyEvent,
    RunEvent,
    RunPhase,
    SampleEvent,
    SignalEvent,
    Source,
    StateBasis,
    StateEvent,
    VisibleEvent,
    VisibleWhere,
)

__all__ = [
    "CommandEvent",
    "ConfirmVerdict",
    "ConfirmationEvent",
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


#: Fields a ``run`` line must carry in each phase (beyond the declared required ones).
_RUN_PHASE_FIELDS: Mapping[RunPhase, tuple[str, ...]] = {
    RunPhase.START: ("seed", "desktop", "epoch"),
    RunPhase.END: ("leftover_pids", "duration"),
}


class _FieldError(ValueError):
    """One field of a line is wrong; the message says which and why."""


def _convert(value: Any, tp: Any, where: str) -> Any:
    """``value`` checked against the declared type ``tp`` (JSON lists become tuples)."""
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    if origin is types.UnionType or origin is typing.Union:
        return _convert_union(value, typing.get_args(tp), where)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _convert_enum(value, tp, where)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        return _build(tp, _mapping(value, where), where + ".")
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise _FieldError(f"{where}: expected a list, got {type(value).__name__}")
        (item,) = typing.get_args(tp)[:1]
        return tuple(_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        _, item = typing.get_args(tp)
        items = _mapping(value, where).items()
        return {str(k): _convert(v, item, f"{where}.{k}") for k, v in items}
    scalar = _SCALARS.get(tp)
    if scalar is None:
        raise TypeError(f"no conversion for the declared type {tp!r}")  # a bug in this module
    accepts, expected = scalar
    if not accepts(value):
        raise _FieldError(f"{where}: expected {expected}, got {value!r:.80}")
    return float(value) if tp is float else value


def _convert_union(value: Any, options: tuple[Any, ...], where: str) -> Any:
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


def _convert_enum(value: Any, tp: type[enum.Enum], where: str) -> Any:
    if isinstance(value, tp):
        return value
    try:
        return tp(value)
    except (ValueError, TypeError):
        choices = ", ".join(str(member.value) for member in tp)
        raise _FieldError(f"{where}: {value!r:.80} is not one of {choices}") from None


def _mapping(value: Any, where: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise _FieldError(f"{where}: expected an object, got {type(value).__name__}")
    return value


#: The scalar types a record declares: what each accepts and how a refusal names it. A bool is
#: never an integer or a number here, though Python's bool is an int.
_SCALARS: dict[Any, tuple[Callable[[Any], bool], str]] = {
    bool: (lambda v: isinstance(v, bool), "true or false"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    float: (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
    str: (lambda v: isinstance(v, str), "a string"),
}


@dataclass(frozen=True)
class _Field:
    """One declared field of a record: its name, its type, and whether a line must carry it."""

    name: str
    type: Any
    required: bool


#: Per record class, its declared fields: resolving type hints per line would cost 20× the parse.
_DECLARED: dict[type[Any], tuple[_Field, ...]] = {}


def _declared(cls: type[Any]) -> tuple[_Field, ...]:
    """The fields of the dataclass ``cls`` that a line carries (resolved once per class)."""
    if cls in _DECLARED:
        return _DECLARED[cls]
    hints = typing.get_type_hints(cls)
    _DECLARED[cls] = tuple(
        _Field(
            f.name,
            hints[f.name],
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
        if f.name != "line"
    )
    return _DECLARED[cls]


def _build(cls: type[Any], raw: Mapping[str, Any], prefix: str = "", line: int = 0) -> Any:
    """The dataclass ``cls`` built from ``raw``; unknown keys are ignored (newer writers)."""
    values: dict[str, Any] = {}
    for f in _declared(cls):
        if f.name not in raw:
            if f.required:
                raise _FieldError(f"missing field '{prefix}{f.name}'")
            continue
        values[f.name] = _convert(raw[f.name], f.type, prefix + f.name)
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
