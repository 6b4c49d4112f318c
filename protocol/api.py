"""The client API, declared once: every method a client calls, its parameters and its result.

Each method is a :class:`Params` record naming itself (``class SnapshotParams(Params,
method="snapshot")``) and the :class:`Result` record it answers with; declaring it registers it
in :data:`METHODS` (as circus's commands register themselves). Everything else is derived from
here, never written again beside it:

- the control socket's dispatch (``supervisor/server/process.py``): a request's params become
  the method's record, checked once, before its handler runs;
- the JSON-RPC methods and their ``-32602`` checks (``supervisor/interface/jsonrpc.py``);
- the MCP tools' input schemas, every property described (``supervisor/interface/mcp_tools.py``);
- the CLI's flags and their help (``supervisor/interface/cli.py``);
- the Python :class:`~aotui.supervisor.interface.client.Client`'s typed results;
- the reference tables in ``docs/reference.md`` (``tests/test_reference.py`` compares them).

A parameter is ``name: type = param("what it means", ...)``; its type (``str``, ``int``,
``float``, ``bool``, ``dict``, ``list[str]``, ``bytes``, an enum, ``| None`` when optional) is
read from the annotation. ``faces`` says where it is offered: ``session`` and ``token`` are not
offered to MCP (the server holds them), ``as_control`` only on JSON-RPC.

This module is imported by every CLI call: it imports ``enum`` and nothing else.
"""

from __future__ import annotations

import enum

from aotui.protocol.errors import AotuiError, ErrorCode

TYPE_CHECKING = False  # typing's, without importing typing (~2 ms of every CLI call)
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from typing import Any, ClassVar, Self


__all__ = [
    "METHODS",
    "AppStatus",
    "Face",
    "Method",
    "Param",
    "ParamError",
    "Params",
    "Record",
    "Result",
    "SignalReason",
    "param",
]


class Face(enum.Flag):
    """Where a method or a parameter is offered."""

    #: The control socket (ZeroMQ + msgpack): the Python ``Client``.
    CONTROL = enum.auto()
    #: ``rpc.sock``, JSON-RPC 2.0.
    JSONRPC = enum.auto()
    #: ``aotui mcp``'s tools.
    MCP = enum.auto()
    #: The ``aotui`` command line.
    CLI = enum.auto()

    @classmethod
    def every(cls) -> Face:
        """All of them."""
        return cls.CONTROL | cls.JSONRPC | cls.MCP | cls.CLI


_EVERY = Face.CONTROL | Face.JSONRPC | Face.MCP | Face.CLI
_CLIENTS = Face.CONTROL | Face.JSONRPC | Face.CLI  # not MCP: its server holds session and lease


class SignalReason(enum.StrEnum):
    """Why the desktop changed, as a signal and a change event say (reference §6)."""

    #: A view's content changed (or an app moved in a way with no reason of its own).
    DOM_MUTATION = "dom_mutation"
    #: An app started serving.
    APP_OPENED = "app_opened"
    #: An app was closed.
    APP_CLOSED = "app_closed"
    #: An app's worker ended unasked (it is restarting or failed).
    APP_CRASHED = "app_crashed"
    #: A crashed app serves again.
    APP_RESTARTED = "app_restarted"


class AppStatus(enum.StrEnum):
    """The state of an installed app, in the words ``status`` and the Applications view use."""

    #: Installed, no worker.
    NOT_RUNNING = "not running"
    #: A worker is being launched and has not shown its first views yet.
    STARTING = "starting"
    #: The worker serves and its views are in the snapshot.
    RUNNING = "running"
    #: The worker serves but the app shows no block in the snapshot.
    COLLAPSED = "collapsed"
    #: The worker died unexpectedly and a new one is being started.
    RESTARTING = "restarting"
    #: The app crashed too often; ``open`` clears it.
    FAILED = "failed"
    #: The worker was asked to exit.
    STOPPING = "stopping"


class ClientKind(enum.StrEnum):
    """What kind of client holds the input lease (its ``E_LOCKED`` names it)."""

    PYTHON = "python"
    CLI = "cli"
    JSONRPC = "json-rpc"
    MCP = "mcp"


class SnapshotFormat(enum.StrEnum):
    """How ``snapshot`` answers on JSON-RPC."""

    #: ``{snapshot_id, markdown}``.
    MARKDOWN = "markdown"
    #: The structure: apps, views, operations with their args, refs.
    JSON = "json"
    #: AWI-TTY (seed 002): the Browser's active tab as a terminal shows it, ``{width, height,
    #: lines, meta?}`` (``docs/web-apps.md``, *AWI-TTY*).
    TEXT = "text"


class ParamError(AotuiError):
    """A call's parameters do not match its declaration: ``E_INVALID_CMD`` (JSON-RPC ``-32602``)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.E_INVALID_CMD, message)


_MISSING: Any = object()

#: A type name in an annotation → the JSON type it is on the wire and how a value is checked.
_SCALARS = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
_JSON_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "object": "an object",
    "array": "an array",
    "bytes": "bytes",
}


class Param:
    """One declared parameter (or result field): its meaning, type and where it is offered."""

    __slots__ = (
        "_owner",
        "annotation",
        "default",
        "description",
        "faces",
        "flag",
        "kind",
        "max_length",
        "maximum",
        "mcp_default",
        "minimum",
        "name",
        "optional",
        "required",
    )

    def __init__(
        self,
        description: str,
        default: Any,
        minimum: float | None,
        maximum: float | None,
        max_length: int | None,
        faces: Face,
        flag: str | None,
        required: bool | Face,
        mcp_default: Any = None,
    ) -> None:
        self.name = ""
        self.description = description
        self.default = default
        self.minimum, self.maximum, self.max_length = minimum, maximum, max_length
        self.faces = faces
        #: The CLI flag (``--max-tokens``); ``""`` when the command line does not offer it.
        self.flag = flag
        self.required = required
        #: What the MCP tool takes when the param is absent (its server fills it in).
        self.mcp_default = mcp_default
        self.annotation = ""
        self.optional = False
        #: The annotation's type without ``None``: ``str``, ``int``, ``list[str]``, an enum's name.
        self.kind = ""
        self._owner: type[Declared] | None = None

    def __repr__(self) -> str:
        return f"<Param {self.name}: {self.annotation}>"

    def required_on(self, face: Face) -> bool:
        """Whether a call on ``face`` must give it."""
        if isinstance(self.required, Face):
            return face in self.required
        return self.required and face in self.faces

    # --- what the type is ------------------------------------------------------------------------

    @property
    def enum(self) -> type[enum.Enum] | None:
        """The enum the value is one of, or ``None``."""
        found = globals().get(self.kind)
        return found if isinstance(found, type) and issubclass(found, enum.Enum) else None

    @property
    def record(self) -> type[Declared] | None:
        """The record type of the value (or of each item of a list), or ``None``."""
        inner = self.kind[5:-1] if self.kind.startswith("list[") else self.kind
        found = globals().get(inner)
        return found if isinstance(found, type) and issubclass(found, Declared) else None

    def json_type(self) -> str:
        """The value's JSON Schema type."""
        if self.kind in _SCALARS:
            return _SCALARS[self.kind]
        if self.enum is not None:
            return "string"
        if self.kind.startswith("list"):
            return "array"
        if self.kind == "bytes":
            return "bytes"
        return "object"

    def schema(self, face: Face = Face.MCP) -> dict[str, Any]:
        """Its JSON Schema on ``face``, with its description."""
        out: dict[str, Any] = {"type": self.json_type()}
        choices = self.enum
        if choices is not None:
            out["enum"] = [member.value for member in choices]
        if self.kind == "list[str]":
            out["items"] = {"type": "string"}
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        default = self.mcp_default if face is Face.MCP and self.mcp_default else self.default
        if default is not None and default is not _MISSING:
            out["default"] = default.value if isinstance(default, enum.Enum) else default
        out["description"] = self.description
        return out

    def type_text(self) -> str:
        """The type as the reference writes it: ``integer ≥ 200``, ``one of a, b``."""
        choices = self.enum
        if choices is not None:
            text = "one of " + ", ".join(str(member.value) for member in choices)
        elif self.record is not None:
            text = self.kind
        else:
            text = self.json_type()
        if self.minimum is not None:
            text += f" ≥ {self.minimum:g}"
        if self.maximum is not None:
            text += f" ≤ {self.maximum:g}"
        return text

    # --- checking a value ------------------------------------------------------------------------

    def check(self, value: Any, method: str) -> Any:  # noqa: C901 - one branch a JSON type
        """``value`` as this parameter's type; :class:`ParamError` naming what is wrong."""
        kind = self.json_type()
        problem: str | None = None
        if kind == "string":
            choices = self.enum
            if not isinstance(value, str):
                problem = "a string"
            elif choices is not None:
                try:
                    return choices(value)
                except ValueError:
                    known = ", ".join(str(member.value) for member in choices)
                    raise ParamError(
                        f"parameter {self.name!r} of {method} must be one of {known}, "
                        f"not {value[:60]!r}"
                    ) from None
            elif not value:
                problem = "a non-empty string"
            elif self.max_length is not None and len(value) > self.max_length:
                problem = f"a string of at most {self.max_length} characters"
        elif kind == "integer":
            if type(value) is not int:
                problem = "an integer"
        elif kind == "number":
            if isinstance(value, bool) or not isinstance(value, int | float):
                problem = "a number"
        elif kind == "boolean":
            if not isinstance(value, bool):
                problem = "true or false"
        elif kind == "array":
            if not isinstance(value, list):
                problem = "an array"
            elif self.kind == "list[str]" and not all(isinstance(item, str) for item in value):
                problem = "an array of strings"
        elif kind == "bytes":
            if not isinstance(value, bytes):
                problem = "bytes"
        elif not isinstance(value, dict):
            problem = "an object"
        if problem is None and kind in ("integer", "number"):
            if self.minimum is not None and value < self.minimum:
                problem = f"{_JSON_NAMES[kind]} ≥ {self.minimum:g}"
            elif self.maximum is not None and value > self.maximum:
                problem = f"{_JSON_NAMES[kind]} ≤ {self.maximum:g}"
        if problem is not None:
            raise ParamError(
                f"parameter {self.name!r} of {method} must be {problem}, not {_shown(value)}"
            )
        return value


def _shown(value: Any) -> str:
    """A wrong value as an error quotes it: its JSON kind, and short values themselves."""
    if value is None:
        return "null"
    for kind, name in (
        (bool, "true or false"),
        (str, "a string"),
        (int, "an integer"),
        (float, "a number"),
        (list, "an array"),
        (dict, "an object"),
    ):
        if isinstance(value, kind):
            if kind in (str, int, float) and len(repr(value)) <= 40:
                return f"{name} ({value!r})"
            return name
    return type(value).__name__


def param(
    description: str,
    *,
    default: Any = None,
    minimum: float | None = None,
    maximum: float | None = None,
    max_length: int | None = 200,
    faces: Face = _EVERY,
    flag: str | None = None,
    required: bool | Face = False,
    mcp_default: Any = None,
) -> Any:
    """Declare a parameter (or result field): ``since: str | None = param("…")``.

    ``flag`` is its CLI flag (default ``--name-with-dashes``; ``""``: none); ``required`` is
    for a parameter whose annotation has no ``None`` and no default, or the faces it is required
    on (``call_operation`` needs an operation; ``execute`` may be an open).
    """
    return Param(
        description, default, minimum, maximum, max_length, faces, flag, required, mcp_default
    )


class Declared:
    """Declared fields, built by keyword, read as attributes (:class:`Record`, :class:`Result`)."""

    #: The fields in declaration order: its own first, then those of its bases.
    FIELDS: ClassVar[dict[str, Param]] = {}
    #: Whether a string field is bounded by its ``max_length`` (a call's params are).
    BOUNDED: ClassVar[bool] = True

    def __init_subclass__(cls, **options: Any) -> None:
        super().__init_subclass__(**options)
        fields: dict[str, Param] = {}
        # Not inspect.get_annotations: importing inspect costs every CLI call ~5 ms.
        annotations = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
        for name, annotation in annotations.items():
            found = cls.__dict__.get(name, _MISSING)
            if not isinstance(found, Param):
                continue
            found.name = name
            found._owner = cls
            found.annotation = str(annotation)
            parts = [part.strip() for part in found.annotation.split("|")]
            found.optional = "None" in parts
            found.kind = next(part for part in parts if part != "None")
            if found.flag is None:
                found.flag = "--" + name.replace("_", "-")
            if not cls.BOUNDED:  # an answer's text is as long as it is
                found.max_length = None
            fields[name] = found
            delattr(cls, name)  # each instance holds its own value
        # Its own fields first, then those of its bases (shared ones: session, token, ...).
        for base in cls.__mro__[1:]:
            for name, found in base.__dict__.get("FIELDS", {}).items():
                fields.setdefault(name, found)
        cls.FIELDS = fields

    # --- the wire ------------------------------------------------------------------------------

    def wire(self) -> dict[str, Any]:
        """The plain form: enum members as their values, records as dicts, absent options left
        out."""
        return {name: _plain(getattr(self, name)) for name in self._present_names()}

    def _present_names(self) -> list[str]:
        raise NotImplementedError

    @classmethod
    def from_wire(cls, data: Mapping[str, Any], *, strict: bool = False) -> Self:
        """The record of a wire dict: nested records and enums typed; extra keys ignored (a
        newer desktop may say more) unless ``strict``; a field the dict lacks keeps its
        default."""
        if strict:
            extra = set(data) - set(cls.FIELDS)
            if extra:
                raise ParamError(f"{cls.__name__} has no field {', '.join(sorted(extra))}")
        values = {}
        for name, field in cls.FIELDS.items():
            if name not in data:
                if strict and not field.optional:
                    raise ParamError(f"{cls.__name__} lacks its field {name!r}")
                continue
            values[name] = _typed(field, data[name], strict)
        return cls(**values)


class Record(Declared):
    """A record of declared fields (a method's params): read as attributes, and by key like the
    wire's dicts; :meth:`wire` is the plain form sent."""

    def __init__(self, **values: Any) -> None:
        unknown = set(values) - set(self.FIELDS)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        for name, field in self.FIELDS.items():
            value = values.get(name, _MISSING)
            if value is _MISSING:
                if field.required is True:
                    raise TypeError(f"{type(self).__name__} needs {name}")
                value = field.default
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, dict):  # as its wire form
            return self.wire() == other
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.FIELDS)

    def __hash__(self) -> int:
        return hash((type(self), *(repr(getattr(self, n)) for n in self.FIELDS)))

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{name}={getattr(self, name)!r}"
            for name, field in self.FIELDS.items()
            if getattr(self, name) != field.default
        )
        return f"{type(self).__name__}({shown})"

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes``."""
        values = {name: getattr(self, name) for name in self.FIELDS}
        values.update(changes)
        return type(self)(**values)

    # --- read by key, as the wire's dicts ------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        if key not in self.FIELDS or not self._present(key):
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self.FIELDS and self._present(key)

    def __iter__(self) -> Iterator[str]:
        return (name for name in self.FIELDS if self._present(name))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def get(self, key: str, default: Any = None) -> Any:
        """The field ``key`` as the wire had it, else ``default``."""
        try:
            return self[key]
        except KeyError:
            return default

    def keys(self) -> list[str]:
        """The fields the wire form has."""
        return list(self)

    def items(self) -> list[tuple[str, Any]]:
        """``(name, value)`` of the fields the wire form has."""
        return [(name, getattr(self, name)) for name in self]

    def _present_names(self) -> list[str]:
        return list(self)

    def _present(self, name: str) -> bool:
        field = self.FIELDS[name]
        value = getattr(self, name)
        return value is not None or not field.optional or field.default is _MISSING


def _plain(value: Any) -> Any:
    if isinstance(value, Declared):
        return value.wire()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _typed(field: Param, value: Any, strict: bool) -> Any:
    if value is None:
        return None
    record = field.record
    if record is not None:
        if isinstance(value, list):
            return [record.from_wire(item, strict=strict) for item in value]
        return record.from_wire(value, strict=strict)
    choices = field.enum
    if choices is not None and isinstance(value, str):
        try:
            return choices(value)
        except ValueError:
            if strict:
                raise
            return value
    if strict:
        field.check(value, field._owner.__name__ if field._owner else "result")
    return value


if TYPE_CHECKING:
    _Dict = dict[str, Any]
else:
    _Dict = dict  # no typing at run time (its import costs each CLI call)


class Result(Declared, _Dict):
    """What a method answers with: its declared fields as attributes, and a ``dict`` of its wire
    form (JSON-serializable, compared and read by key as the plain answers it types)."""

    BOUNDED = False

    def __init__(self, **values: Any) -> None:
        dict.__init__(self)
        for name, value in values.items():
            if name not in self.FIELDS:
                raise TypeError(f"{type(self).__name__} has no field {name}")
            field = self.FIELDS[name]
            # An optional field is left out when None, unless it is always said (nullable).
            if value is not None or not field.optional or field.default is _MISSING:
                dict.__setitem__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        field = type(self).FIELDS.get(name)
        if field is None:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}")
        found = self.get(name, _MISSING)
        if found is not _MISSING:
            return found
        return None if field.default is _MISSING else field.default

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def _present_names(self) -> list[str]:
        return list(self)


class Method:
    """One declared method: its name, parameters, result and the faces that offer it."""

    __slots__ = ("cli_command", "faces", "mcp_tool", "name", "params", "result", "summary")

    def __init__(
        self,
        name: str,
        params: type[Params],
        result: type[Result] | None,
        faces: Face,
        mcp_tool: str,
        cli_command: str,
    ) -> None:
        self.name, self.params, self.result, self.faces = name, params, result, faces
        self.summary = " ".join((params.__doc__ or "").strip().split("\n\n")[0].split())
        self.mcp_tool, self.cli_command = mcp_tool, cli_command

    def __repr__(self) -> str:
        return f"<Method {self.name}>"

    def parse(self, params: Mapping[str, Any] | None, face: Face = Face.CONTROL) -> Params:
        """The typed record of ``params`` as ``face`` offers the method; :class:`ParamError`."""
        return self.params.parse(params or {}, face)

    def offered(self, face: Face) -> dict[str, Param]:
        """Its parameters that ``face`` offers, by name."""
        return {n: p for n, p in self.params.FIELDS.items() if face in p.faces}

    def input_schema(self, face: Face = Face.MCP) -> dict[str, Any]:
        """The JSON Schema of its parameters on ``face`` (MCP's ``inputSchema``)."""
        offered = self.offered(face)
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {name: p.schema(face) for name, p in offered.items()},
            "additionalProperties": False,
        }
        required = [name for name, p in offered.items() if p.required_on(face)]
        if required:
            schema["required"] = required
        return schema


#: Every declared method, by name, in declaration order.
METHODS: dict[str, Method] = {}


class Params(Record):
    """A method's parameters. ``class XParams(Params, method="x", result=XResult)`` declares
    method ``x``; its docstring's first paragraph is the method's summary everywhere."""

    #: The method these are the parameters of.
    METHOD: ClassVar[Method]

    def __init_subclass__(
        cls,
        method: str = "",
        result: type[Result] | None = None,
        faces: Face = _EVERY,
        mcp_tool: str = "",
        cli_command: str = "",
        **options: Any,
    ) -> None:
        super().__init_subclass__(**options)
        if method:
            if method in METHODS:
                raise TypeError(f"method {method!r} is declared twice")
            if mcp_tool:
                faces |= Face.MCP
            else:
                faces &= ~Face.MCP
            if cli_command:
                faces |= Face.CLI
            else:
                faces &= ~Face.CLI
            cls.METHOD = METHODS[method] = Method(method, cls, result, faces, mcp_tool, cli_command)

    @classmethod
    def parse(cls, params: Mapping[str, Any], face: Face = Face.CONTROL) -> Self:
        """Check every value of ``params`` against its declaration (unknown names refused,
        ``null`` taken as absent, ``bool`` never an integer) and build the record."""
        method = cls.METHOD.name
        values = {}
        for name, value in params.items():
            field = cls.FIELDS.get(name) if isinstance(name, str) else None
            if field is None or face not in field.faces:
                known = ", ".join(n for n, p in cls.FIELDS.items() if face in p.faces) or "none"
                raise ParamError(
                    f"{method} has no parameter {str(name)[:80]!r} (it takes: {known})"
                )
            if value is None:
                continue
            values[name] = field.check(value, method)
        for name, field in cls.FIELDS.items():
            if field.required_on(face) and name not in values:
                raise ParamError(f"{method} needs the parameter {name!r}")
        return cls(**values)


# --- shared parameters ----------------------------------------------------------------------------


class _Reader(Params):
    """Who reads: the session refs resolve for, and the input lease's token."""

    session: str | None = param(
        "the reader whose last snapshot refs resolve against (default: the connection's, or "
        "the lease holder's)",
        max_length=64,
        faces=_CLIENTS,
        flag="",
    )
    token: str | None = param(
        "the input lease's token (from acquire)", faces=_CLIENTS, flag="", max_length=None
    )


class _AsControl(Params):
    as_control: bool | None = param(
        "answer as the control socket does (the CLI's fast path): no session of the "
        "connection's own, error messages as raised",
        faces=Face.JSONRPC,
        flag="",
    )


class _Peer(Params):
    peer: str | None = param(
        "whose budget this call is charged to (set by the face that received it)",
        faces=Face.CONTROL,
        flag="",
    )


# --- results --------------------------------------------------------------------------------------


class PingResult(Result):
    pid: int = param("the supervisor's process id")
    desktop: str = param("the desktop's name")


class AppStatusRecord(Result):
    """One app in ``status``."""

    app: str = param("its id on this desktop (app_N)")
    id: str = param("its manifest id")
    name: str = param("its manifest name")
    state: AppStatus = param("running, not running, collapsed, restarting, failed, …")
    system: bool = param("a system app (installed with the desktop; cannot be closed)")
    web: bool = param("a web app: a page in a headless browser (docs/web-apps.md)")
    pid: int | None = param("its worker's pid", default=_MISSING)
    processes: int | None = param("processes in its worker's group", default=_MISSING)
    rss_bytes: int | None = param("memory of its worker's group", default=_MISSING)
    cpu_percent: float | None = param("CPU of its worker's group", default=_MISSING)
    cpu_throttled: str | None = param(
        "how a worker over its CPU share is held to it", default=_MISSING
    )
    restarts: int = param("restarts since it was opened")
    last_exit: str | None = param(
        "why its last worker ended (exit 1, signal 9, memory limit, …)", default=_MISSING
    )
    layers: list[str] = param(
        "the sandbox layers its worker runs under (a web app's: chromium-sandbox when "
        "Chromium's own sandbox is on inside the worker's)"
    )


class StatusResult(Result):
    pid: int = param("the supervisor's process id")
    desktop: str = param("the desktop's name")
    uptime_s: float = param("seconds since the supervisor started")
    created: float = param("when the desktop was created (Unix time)")
    rss_bytes: int = param("the supervisor's memory")
    open_fds: int = param("the supervisor's open descriptors")
    snapshots: int = param("snapshot ids held in the registry")
    lease_owner: str | None = param("who holds the input lease", default=_MISSING)
    in_flight: int = param("agent commands being served")
    confirmations: list[dict[str, Any]] = param("operations waiting for the user")
    store: dict[str, Any] = param("the store's state: durability, size, errors")
    apps: list[AppStatusRecord] = param("every installed app")


class SnapshotResult(Result):
    snapshot_id: str = param("the id refs of this pull resolve against")
    markdown: str | None = param("the snapshot as Markdown")
    meta: dict[str, Any] | None = param(
        "with include_meta: id, time, session, lease holder, per-app state"
    )
    apps: list[dict[str, Any]] | None = param("format json: apps, views, operations, refs")
    system_views: list[dict[str, Any]] | None = param("format json: the desktop's own views")
    since: str | None = param("format json, a diff: the snapshot id it is since")
    removed: list[str] | None = param("format json, a diff: the ids of what is gone")


class ExecResult(Result):
    ran: int = param("how many commands ran")
    results: list[Any] = param("each command's result, in order")
    waiting: dict[str, Any] | None = param(
        "a command waiting for the user: its confirmation id and message; those after it did "
        "not run"
    )


class LeaseResult(Result):
    lease_s: float = param("seconds the lease lasts without a heartbeat")
    token: str = param("present it with exec, execute, heartbeat and release")
    owner: str = param("the name the lease is held under")


class HeartbeatResult(Result):
    lease_s: float = param("seconds the lease lasts from now")


class WaitResult(Result):
    until: str = param("the condition that held: reason, text or quiet_ms")
    waited_ms: int = param("how long the wait took")
    reason: str | None = param("the signal reason seen")
    text: str | None = param("the text that appeared (or disappeared)")
    app: str | None = param("the app it was looked for in")
    gone: bool | None = param("the text disappeared")
    quiet_ms: int | None = param("how long nothing changed")


class ConfirmationRecord(Result):
    """An operation waiting for the user."""

    confirmation: str = param("its id (C1…): aotui confirm C1, or --deny")
    app: str = param("the app (app_N)")
    app_name: str = param("the app's name")
    view: str = param("the view (view_N)")
    operation: str = param("the operation")
    args: dict[str, Any] = param("its arguments as the agent gave them")
    reason: str = param("why the user is asked (markup confirm, or the desktop's policy)")
    asked: float = param("when it was asked (Unix time)")


class ConfirmationsResult(Result):
    pending: list[ConfirmationRecord] = param("the operations waiting for the user, oldest first")


class VerdictResult(Result):
    confirmation: str = param("the confirmation's id")
    verdict: str = param("ran, refused or failed")
    result: Any | None = param("the operation's result, once it ran")


class SubscribeResult(Result):
    subscribed: list[str] | bool = param("the reasons now delivered as event notifications")


class InstallResult(Result):
    app: str = param("its id on this desktop (app_N)")
    id: str = param("its manifest id")
    name: str | None = param("its manifest name")


# --- methods --------------------------------------------------------------------------------------


class SnapshotParams(
    _Reader,
    _AsControl,
    _Peer,
    method="snapshot",
    result=SnapshotResult,
    mcp_tool="snapshot",
    cli_command="snapshot",
):
    """Read the desktop as Markdown: what you act on."""

    app: str | None = param("only this app's block (app_0 or manifest id)")
    view: str | None = param("only this view of app (view_0)")
    since: str | None = param('only what changed since this snapshot id ("last": your last pull)')
    max_tokens: int | None = param(
        "shorten to this many tokens (least recently touched first)", minimum=200
    )
    include_instructions: bool | None = param(
        "include the System Instructions (how commands work)",
        default=True,
        flag="--no-instructions",
    )
    include_meta: bool | None = param(
        "add meta: id, time, session, lease holder, per-app state (the CLI prints it as "
        "stdout's last line: '[meta] ' and one line of JSON)",
        faces=_CLIENTS,
    )
    format: SnapshotFormat | None = param(
        "markdown, or json: the structure (apps, views, operations, refs), or text: the "
        "Browser's active tab as a terminal grid (AWI-TTY)",
        default=SnapshotFormat.MARKDOWN,
        faces=Face.CONTROL | Face.JSONRPC,
    )
    release: str | None = param("a previous snapshot id to release", faces=Face.CONTROL, flag="")


def _command_id() -> Any:
    """The ``command_id`` of a call that changes the desktop (supervisor/desktop/command_ids.py)."""
    return param(
        "an id of the caller's for this command, unique per desktop (1-200 characters): sent "
        "again with the same id it runs at most once and gets its first reply",
        faces=_CLIENTS,
        flag="--command-id",
    )


class ExecParams(
    _Reader,
    _AsControl,
    _Peer,
    method="exec",
    result=ExecResult,
    mcp_tool="run_commands",
    cli_command="exec",
):
    """Run desktop commands (not a shell) written as <context> blocks, in order; the first
    failure stops the rest."""

    text: str = param(
        'the commands: <context app_id="app_0" view_id="view_0">execute add_note --title T'
        "</context>",
        required=True,
        max_length=None,
        flag="",
    )
    owner: str | None = param("who sends it (a name for logs; proves nothing)", faces=Face.CONTROL)
    snapshot_id: str | None = param(
        "the snapshot refs resolve against (default: the session's last pull)",
        faces=_CLIENTS,
        flag="--snapshot",
    )
    command_id: str | None = _command_id()


class ExecuteParams(_Reader, _Peer, method="execute", result=ExecResult, mcp_tool="call_operation"):
    """Run one operation of a view (not a shell), given by its fields; or an open, close,
    mount or dismount (action)."""

    action: str | None = param(
        "open_application, close_application, mount_view, dismount_view or execute "
        "(default: execute)",
        faces=_CLIENTS,
    )
    app: str | None = param("app id (app_0) or manifest id", required=Face.MCP)
    view: str | None = param("view id (view_0) of that app", required=Face.MCP)
    operation: str | None = param("operation id shown in the view", required=Face.MCP)
    args: dict[str, Any] | None = param(
        'its parameters by name; a list item is its ref as a string: "notes[1]"'
    )
    fresh: bool | None = param("open: a fresh instance (its stored data cleared)", faces=_CLIENTS)
    snapshot_id: str | None = param(
        "the snapshot refs resolve against (default: the session's last pull)", faces=_CLIENTS
    )
    owner: str | None = param("who sends it (a name for logs; proves nothing)", faces=Face.CONTROL)
    command_id: str | None = _command_id()

    def command(self) -> dict[str, Any]:
        """The structured command these fields make (``Command.from_structured`` reads it)."""
        names = ("action", "app", "view", "operation", "args", "fresh", "snapshot_id")
        found = {name: getattr(self, name) for name in names}
        return {name: value for name, value in found.items() if value is not None}


# --- AWI-TTY (seed 002): the Browser's active tab ----------------------------------------------

_AWI = Face.CONTROL | Face.JSONRPC
#: The AWI-TTY version this desktop speaks (seed 002's get_capabilities says it).
AWI_VERSION = "0.0.3"


class _Tab(_Reader, _Peer):
    """An AWI-TTY call: on the active tab of a Browser app (opened when it is not running)."""

    browser: str | None = param(
        "the Browser app (app id or manifest id)", default="com.aotui.browser", faces=_AWI
    )


class NavigateParams(_Tab, method="navigate", faces=_AWI):
    """Load a URL in the Browser's active tab (AWI-TTY)."""

    url: str = param("an http:// or https:// URL the Browser's grants allow", required=True)


class SendKeyParams(_Tab, method="send_key", faces=_AWI):
    """Press a key in the Browser's active tab (AWI-TTY)."""

    key: str = param(
        "Tab, Enter, Up, Down, Left, Right, Space, Escape, Backspace or Char", required=True
    )
    char: str | None = param("with key Char: the one character", max_length=4)
    alt: bool | None = param("hold Alt")
    ctrl: bool | None = param("hold Control")
    shift: bool | None = param("hold Shift")
    meta: bool | None = param("hold Meta")


class ScrollParams(_Tab, method="scroll", faces=_AWI):
    """Scroll the Browser's active tab by lines (AWI-TTY)."""

    delta: int = param(
        "lines to scroll; negative is up", required=True, minimum=-10000, maximum=10000
    )


class GetTitleParams(_Tab, method="get_title", faces=_AWI):
    """The title of the Browser's active tab (AWI-TTY)."""


class GetUrlParams(_Tab, method="get_url", faces=_AWI):
    """The URL of the Browser's active tab (AWI-TTY)."""


class GetNavStateParams(_Tab, method="get_nav_state", faces=_AWI):
    """Whether the Browser's active tab can go back and forward (AWI-TTY)."""


class SetViewportParams(_Tab, method="set_viewport", faces=_AWI):
    """Size the text snapshot (and the page) in terminal cells (AWI-TTY)."""

    cols: int = param("columns, 20 to 500 (default 140)", required=True, minimum=20, maximum=500)
    rows: int = param("rows, 5 to 200 (default 45)", required=True, minimum=5, maximum=200)


class TypeTextParams(_Tab, method="type_text", faces=_AWI):
    """Type text into what has the focus in the Browser's active tab (AWI-TTY)."""

    text: str = param("the text", required=True, max_length=10000)


class WaitForFrameQuiescenceParams(_Tab, method="wait_for_frame_quiescence", faces=_AWI):
    """Wait until the Browser's active tab has not changed for idle_ms (AWI-TTY)."""

    idle_ms: int | None = param("quiet milliseconds", default=100, minimum=0, maximum=3500)


class WaitForTitleContainsParams(_Tab, method="wait_for_title_contains", faces=_AWI):
    """Wait until the active tab's title contains a text (AWI-TTY)."""

    substring: str = param("the text", required=True)
    timeout_ms: int | None = param("the longest wait", default=3500, minimum=0, maximum=3500)


class AcquireParams(
    _Peer,
    method="acquire",
    result=LeaseResult,
    cli_command="acquire",
    faces=Face.CONTROL | Face.JSONRPC,
):
    """Take the input lease (or renew it, presenting its token); returns the token."""

    owner: str = param("a name for people (status, errors)", required=True, flag="")
    token: str | None = param("the lease's token, to renew it", flag="", max_length=None)
    kind: ClientKind | None = param(
        "what kind of client holds it (named by E_LOCKED)", faces=Face.CONTROL, flag=""
    )
    idle_s: float | None = param(
        "held only while its holder works: released this many seconds after its last command",
        minimum=0,
        faces=Face.CONTROL,
        flag="",
    )


class HeartbeatParams(
    Params, method="heartbeat", result=HeartbeatResult, faces=Face.CONTROL | Face.JSONRPC
):
    """Renew the input lease whose token is presented."""

    token: str | None = param("the lease's token", max_length=None)


class ReleaseParams(
    Params, method="release", cli_command="release", faces=Face.CONTROL | Face.JSONRPC
):
    """Give the input lease up (presenting its token)."""

    token: str | None = param("the lease's token", flag="", max_length=None)


class RetainSnapshotParams(Params, method="retain_snapshot", faces=Face.CONTROL):
    """Take one more reference on a snapshot id (it lives until released, or its TTL)."""

    snapshot_id: str = param("the snapshot id", required=True)


class ReleaseSnapshotParams(Params, method="release_snapshot", faces=Face.CONTROL):
    """Drop one reference on a snapshot id."""

    snapshot_id: str = param("the snapshot id", required=True)


class WaitParams(_Peer, method="wait_for", result=WaitResult, mcp_tool="wait", cli_command="wait"):
    """Block until one condition holds: a signal reason, a text in an app's views (or its
    disappearance), or quiet."""

    reason: SignalReason | None = param(
        "a change of this kind", mcp_default=SignalReason.DOM_MUTATION
    )
    text: str | None = param("this text appears in app's views", max_length=4000)
    app: str | None = param("the app text looks in")
    view: str | None = param("the view text looks in")
    gone: bool | None = param("text disappears instead")
    quiet_ms: int | None = param("no change for this many ms", minimum=0)
    timeout_ms: int | None = param(
        "give up after this many ms (E_TIMEOUT)", minimum=0, maximum=600_000, default=10_000
    )
    confirmation: str | None = param(
        "C1: the outcome of an operation waiting for the user", faces=Face.MCP | Face.CLI
    )


class SubscribeParams(
    Params, method="subscribe_events", result=SubscribeResult, faces=Face.JSONRPC
):
    """Deliver the desktop's change events on this connection as ``event`` notifications."""

    reasons: list[str] | None = param("only these reasons (default: every reason)")


class UnsubscribeParams(
    Params, method="unsubscribe_events", result=SubscribeResult, faces=Face.JSONRPC
):
    """Stop delivering change events on this connection."""


class ConfirmationsParams(
    Params, method="confirmations", result=ConfirmationsResult, faces=Face.CONTROL | Face.JSONRPC
):
    """The operations waiting for the user, oldest first."""


class ConfirmationParams(
    Params, method="confirmation", result=VerdictResult, faces=Face.CONTROL | Face.JSONRPC
):
    """What became of a confirmation, waiting while it is pending."""

    confirmation: str = param("the confirmation's id (C1…)", required=True)
    timeout_ms: int | None = param(
        "wait this long while it is pending", minimum=0, maximum=600_000, default=0
    )


class ConfirmParams(
    Params, method="confirm", result=VerdictResult, cli_command="confirm", faces=Face.CONTROL
):
    """The user's answer to an operation waiting for them: run it (once), or deny it."""

    confirmation: str = param("the confirmation's id (C1…)", required=True, flag="")
    deny: bool | None = param("refuse it: it never runs")
    reason: str | None = param("why (shown to the agent with the refusal)", max_length=2000)


class InstallParams(
    Params, method="install", result=InstallResult, cli_command="install", faces=Face.CONTROL
):
    """Install the app directory at path."""

    path: str = param("the directory holding aoapp.json", required=True, max_length=4096, flag="")
    command_id: str | None = _command_id()


class UninstallParams(
    Params, method="uninstall", result=InstallResult, cli_command="uninstall", faces=Face.CONTROL
):
    """Stop and remove an app."""

    app: str = param("app_N or manifest id", required=True, flag="")
    command_id: str | None = _command_id()


class SayParams(Params, method="say", result=ExecResult, cli_command="say", faces=Face.CONTROL):
    """The user's side of the chat: post text into an app (system.chat)."""

    text: str = param("the user's message", required=True, max_length=None, flag="")
    app: str | None = param("the app that takes it", default="system.chat")
    command_id: str | None = _command_id()


class ShutdownParams(Params, method="shutdown", result=PingResult, faces=Face.CONTROL):
    """Stop the desktop after answering."""


class ExportParams(_Peer, method="export", faces=Face.CONTROL):
    """The desktop's state: whole (if it fits a frame) or its first or next chunk."""

    chunked: bool | None = param("answer in chunks (an export_id to ask for the next)")
    export_id: str | None = param("the export whose next chunk to send")
    offset: int | None = param("the byte offset of that chunk", minimum=0)
    client: str | None = param("names the client's transfers (bounded per client)", max_length=64)


class ImportParams(_Peer, method="import", faces=Face.CONTROL):
    """Take a state whole, or collect it by chunks; on the last, give the apps their data."""

    state: dict[str, Any] | None = param("the state, whole")
    chunk: bytes | None = param("a slice of the encoded state")
    import_id: str | None = param("the import this chunk continues")
    offset: int | None = param("the chunk's byte offset", minimum=0)
    total_bytes: int | None = param("the encoded state's size (first chunk)", minimum=1)
    client: str | None = param("names the client's transfers (bounded per client)", max_length=64)
    token: str | None = param("the input lease's token", max_length=None)
    command_id: str | None = _command_id()  # taken with the whole state, or the last chunk


class PingParams(Params, method="ping", result=PingResult, cli_command="ping"):
    """Whether the desktop answers: its pid and name."""


class StatusParams(
    Params, method="status", result=StatusResult, mcp_tool="status", cli_command="status"
):
    """The apps (state, pid, memory, restarts) and confirmations waiting for the user."""


class CapabilitiesParams(
    Params, method="get_capabilities", cli_command="capabilities", faces=Face.CONTROL | Face.JSONRPC
):
    """What this desktop offers: version, methods and their params, formats, limits."""


# --- the reference --------------------------------------------------------------------------------

_FACE_NAMES = {Face.CONTROL: "control", Face.JSONRPC: "JSON-RPC", Face.MCP: "MCP", Face.CLI: "CLI"}


def _faces_text(faces: Face) -> str:
    if faces == _EVERY:
        return "all"
    return ", ".join(name for face, name in _FACE_NAMES.items() if face in faces)


def _cell(text: str) -> str:
    """``text`` as a table cell says it: angle brackets shown, not taken for HTML."""
    return text.replace("<", "&lt;").replace("|", "\\|")


def reference_markdown() -> str:
    """The client methods as ``docs/reference.md`` §10 lists them (``tests/test_reference.py``
    compares the two; ``python -m aotui.protocol.api`` prints it)."""
    out: list[str] = []
    for method in METHODS.values():
        faces = []
        for face, name in _FACE_NAMES.items():
            if face not in method.faces:
                continue
            if face is Face.MCP:
                name += f" (tool `{method.mcp_tool}`)"
            elif face is Face.CLI:
                name += f" (`aotui {method.cli_command}`)"
            faces.append(name)
        out += [f"### `{method.name}`", "", f"{method.summary} Offered on: {', '.join(faces)}.", ""]
        fields = method.params.FIELDS
        if fields:
            out += ["| param | type | on | meaning |", "|---|---|---|---|"]
            for name, field in fields.items():
                kind = field.type_text()
                if isinstance(field.required, Face):
                    kind += f", required on {_faces_text(field.required)}"
                elif not field.optional:
                    kind += ", required"
                offered = field.flag and Face.CLI in field.faces & method.faces
                flag = f" (`{field.flag}`)" if offered else ""
                faces_text = _faces_text(field.faces & method.faces)
                meaning = _cell(field.description)
                out.append(f"| `{name}`{flag} | {kind} | {faces_text} | {meaning} |")
            out.append("")
        if method.result is not None:
            out += [
                f"Answers `{method.result.__name__}`:",
                "",
                "| field | type | meaning |",
                "|---|---|---|",
            ]
            for name, field in method.result.FIELDS.items():
                kind = field.type_text() + (" or null" if field.optional else "")
                out.append(f"| `{name}` | {kind} | {_cell(field.description)} |")
            out.append("")
    return "\n".join(out).rstrip("\n")


if __name__ == "__main__":
    print(reference_markdown())
