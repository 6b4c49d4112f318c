"""The messages inside the desktop: supervisor ↔ worker and supervisor ↔ zygote.

:mod:`protocol.messages` holds the client's few and re-exports these, loading this module on first
use: ``aotui snapshot|exec|status`` never sends or reads one of them, and defining their classes
(frozen, slotted dataclasses) cost such a command ~15 ms of its start-up. The codec asks
:func:`protocol.messages.message_type` for a kind, which imports this module for a kind of its own.
Import the names from :mod:`protocol.messages`; the directions are listed there.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aotui.protocol.messages import ErrorReply, Message, Reply, Request, Signal

__all__ = [
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
]


class LogLevel(enum.StrEnum):
    """How serious a worker's :class:`LogRecord` is."""

    #: Something the agent may like to know.
    INFO = "info"
    #: Something went wrong but the app carries on.
    WARNING = "warning"
    #: An app's own code failed (a hook, a timer, its start).
    ERROR = "error"


class SandboxLayer(enum.StrEnum):
    """One confinement layer a worker reports in force (``sandbox/confine.py`` applies them)."""

    #: Descriptors the worker did not need are closed.
    FD_CLOSE = "fd-close"
    #: Only a minimal environment is left.
    MINIMAL_ENV = "minimal-env"
    #: No core dumps (they would write the app's memory out).
    NO_CORE_DUMPS = "no-core-dumps"
    #: The per-app memory, CPU and pids cgroups.
    CGROUP = "cgroup"
    #: A user namespace (unprivileged workers).
    USERNS = "userns"
    #: A network namespace with no interfaces.
    NETNS = "netns"
    #: An IPC namespace of its own.
    IPCNS = "ipcns"
    #: A mount namespace whose root holds only the granted trees, each at its own path.
    MNTNS = "mntns"
    #: The per-app uid (root workers).
    UID_DROP = "uid-drop"
    #: No capabilities left.
    NO_CAPS = "no-caps"
    #: Resource limits (files, processes, sizes).
    RLIMITS = "rlimits"
    #: It dies with its zygote.
    PDEATHSIG = "pdeathsig"
    #: No privileges gained through exec.
    NO_NEW_PRIVS = "no-new-privs"
    #: Landlock's filesystem rules.
    LANDLOCK = "landlock"
    #: Landlock's scopes (no signals or abstract sockets outside its domain).
    LANDLOCK_SCOPE = "landlock-scope"
    #: The seccomp allow-list of system calls.
    SECCOMP = "seccomp"
    #: A web app's headless browser runs with Chromium's own sandbox on, inside the worker's
    #: (absent: it runs with ``--no-sandbox`` inside it; ``docs/web-apps.md``).
    CHROMIUM_SANDBOX = "chromium-sandbox"


# --- nested records (not messages themselves) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerPolicy:
    """What one worker is confined to; the worker checks it again (``sandbox/policy.py``)."""

    #: The desktop-assigned ``app_N``, the name of its cgroups.
    app: str
    #: The app directory, granted read-only (as root, rarely, a copy the per-app uid can read).
    app_dir: str
    #: Trees the app may read (its ``fs:read:`` grants; ``*`` is ``/``).
    fs_read: list[str] = field(default_factory=list)
    #: Trees the app may read and write (its ``fs:write:`` grants).
    fs_write: list[str] = field(default_factory=list)
    #: ``memory_mb``, ``cpu_percent``, ``pids``, ``open_files``, ``file_size_mb``.
    limits: dict[str, int] = field(default_factory=dict)
    #: The per-app uid a root worker drops to; ``None`` when the supervisor is not root.
    uid: int | None = None
    #: Refuse to run the app when a required layer is missing.
    strict: bool = False
    #: The app's private temporary directory (``TMPDIR``), granted read-write.
    tmp_dir: str | None = None
    #: ``[uid, gid]`` of the app directory's owner, shown as the per-app ids through an idmapped
    #: mount (root; an app whose files its per-app uid could not read).
    app_owner: list[int] | None = None
    #: A web app's worker, which runs a headless browser (``sandbox/policy.py`` says what
    #: that adds to its confinement).
    browser: bool = False


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """An app's HTTP request, as it travels from the worker to the supervisor's broker."""

    #: An HTTP method (the broker allows ``supervisor.broker.http.METHODS``).
    method: str
    #: An absolute ``http://`` or ``https://`` URL.
    url: str
    #: Request headers; ``Host``, ``Content-Length`` and ``Connection`` are the broker's.
    headers: dict[str, str] = field(default_factory=dict)
    #: At most ``supervisor.broker.http.MAX_REQUEST_BODY`` bytes.
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """What the server answered to the last hop of a brokered fetch."""

    #: The HTTP status code.
    status: int
    #: The reason phrase, as the server sent it.
    reason: str
    #: Header names lower-cased; a repeated header's values joined with ``", "``.
    headers: dict[str, str]
    #: The body, at most the policy's ``max_response_bytes``.
    body: bytes
    #: The URL that answered, after redirects.
    url: str


@dataclass(frozen=True, slots=True)
class OperationSpec:
    """One operation a view offers, as the agent sees it."""

    #: Developer-chosen id, unique within the app (``send_message``).
    op_id: str
    #: The element's text (``Send Message``).
    label: str
    #: The ``description`` attribute, or ``""``.
    description: str
    #: Declared arguments ``{name: type}``; a name ending in ``?`` is optional.
    args: dict[str, str]
    #: Marked ``confirm``: the desktop asks the user before running it (CONTRACT §6).
    confirm: bool = False


@dataclass(frozen=True, slots=True)
class ChildLink:
    """A child view a view links to (``view-link``), as its parent shows it."""

    #: The app's stable key of the child view instance.
    key: str
    #: The link text, used as the child's label in the view tree.
    label: str
    #: The link's ``description`` attribute, or ``""``.
    description: str


@dataclass(frozen=True, slots=True)
class ViewFragment:
    """One rendered view of an app, keyed by the app's stable instance key."""

    #: The app's stable key for this view instance (``conversation:johnny``).
    key: str
    #: The ``view="…"`` name of the root element.
    name: str
    #: Key of the view that links to this one, or ``None`` for a root view.
    parent: str | None
    #: Whether the view is mounted (shown with its content) or only listed in the tree.
    mounted: bool
    #: The view body as Markdown, with child-view links written ``(view:@<key>)``.
    markdown: str
    #: ``list_id[i]`` and entity ids → the recorded ``data-value``.
    refs: dict[str, Any]
    #: ``list_id[i]`` and entity ids → the app's stable key of the item.
    keys: dict[str, str]
    #: ``list_id[i]`` and entity ids → the item or entity type (``message``).
    ref_types: dict[str, str]
    #: The operations the view offers.
    operations: list[OperationSpec]
    #: The child views this view links to, in document order.
    links: list[ChildLink]
    #: Marked ``modal``: a dialog; while mounted, the rest of its app waits (CONTRACT §3).
    modal: bool = False


# --- supervisor → worker ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start(Message):
    """First message to a new worker: who it is and the state to restore, if any."""

    KIND: ClassVar[str] = "start"
    #: The desktop-assigned ``app_N``.
    app: str
    #: The app's serialized data from its last acknowledged operation, or ``None``.
    restore: Any = None
    #: View keys mounted before the restart.
    mounted: list[str] = field(default_factory=list)
    #: Keyed data too large for one frame: ``restore`` is ``None`` and this many
    #: :class:`RestoreChunk` messages follow, whose parts together are the data.
    chunks: int = 0
    #: Origins the desktop's config trusts (``trusted_origins``): the Browser applies an
    #: agent-aware page's catalog policy only on them (seed 004).
    trusted_origins: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RestoreChunk(Message):
    """Some parts of the keyed data a new worker restores (after a :class:`Start` with chunks)."""

    KIND: ClassVar[str] = "restore_chunk"
    parts: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Operation(Message):
    """Run an operation handler of one view."""

    KIND: ClassVar[str] = "op"
    request_id: int
    #: Key of the view whose operation it is.
    view: str
    op_id: str
    #: Arguments after coercion and ref resolution.
    args: dict[str, Any]
    #: For each argument that was a ref, the item's stable ``key``.
    stable_keys: dict[str, Any]
    #: Milliseconds the handler may take before the supervisor answers ``E_TIMEOUT``.
    deadline_ms: int
    #: The user confirmed this call after the app asked (``ConfirmationRequired``).
    confirmed: bool = False


@dataclass(frozen=True, slots=True)
class Mount(Message):
    """Mount a view (render it with content)."""

    KIND: ClassVar[str] = "mount"
    request_id: int
    view: str


@dataclass(frozen=True, slots=True)
class Dismount(Message):
    """Dismount a view (keep it in the tree, drop its content)."""

    KIND: ClassVar[str] = "dismount"
    request_id: int
    view: str


@dataclass(frozen=True, slots=True)
class Serialize(Message):
    """Ask the app for its serialized state (answered by :class:`AppState`)."""

    KIND: ClassVar[str] = "serialize"
    request_id: int


@dataclass(frozen=True, slots=True)
class Ping(Message):
    """Heartbeat probe; the worker answers :class:`Pong` with the same ``seq``."""

    KIND: ClassVar[str] = "ping"
    seq: int


@dataclass(frozen=True, slots=True)
class Shutdown(Message):
    """Ask the worker to exit cleanly."""

    KIND: ClassVar[str] = "shutdown"
    reason: str


# --- worker → supervisor ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hello(Message):
    """First message from a worker once its app module is loaded."""

    KIND: ClassVar[str] = "hello"
    pid: int
    #: The confinement layers active in this worker.
    layers: list[SandboxLayer] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FragmentUpdate(Message):
    """The views that changed since the last update; sent before the ack that caused them.

    Channel order is what makes an ack's effect visible (read-your-writes): no revision numbers.
    """

    KIND: ClassVar[str] = "fragments"
    #: Changed or new views (a dismounted view is sent with ``mounted`` false, never dropped).
    views: list[ViewFragment]


@dataclass(frozen=True, slots=True)
class Ack(Message):
    """A request succeeded; the fragment updates showing its effect were sent before it."""

    KIND: ClassVar[str] = "ack"
    request_id: int
    #: The handler's return value (plain data), or ``None``.
    result: Any = None
    #: The app's serialized state after the operation, when the app provides a hook.
    state: Any = None
    #: For keyed data (a dict of parts), instead of ``state``: the parts that changed since the
    #: last acknowledged operation (``None``: the part is gone).
    state_changes: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class AppState(Message):
    """The app's serialized data, answering :class:`Serialize`."""

    KIND: ClassVar[str] = "state"
    request_id: int
    data: Any


@dataclass(frozen=True, slots=True)
class Pong(Message):
    """Heartbeat answer."""

    KIND: ClassVar[str] = "pong"
    seq: int


@dataclass(frozen=True, slots=True)
class HttpCall(Message):
    """An app asks the supervisor to perform an HTTP request under its ``net:http`` grants."""

    KIND: ClassVar[str] = "http"
    #: Chosen by the worker; echoed by :class:`HttpResult`.
    call_id: int
    #: What to fetch; the broker checks it before anything touches the network.
    request: HttpRequest


@dataclass(frozen=True, slots=True)
class HttpResult(Message):
    """The answer to :class:`HttpCall`: a response, or an error (``AotuiError.to_dict()``)."""

    KIND: ClassVar[str] = "http_result"
    call_id: int
    response: HttpResponse | None = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class LogRecord(Message):
    """A line for the System Logs or the app's operation log."""

    KIND: ClassVar[str] = "log"
    level: LogLevel
    message: str


# --- supervisor ↔ zygote (the pre-loaded process that forks workers) ------------------------------


@dataclass(frozen=True, slots=True)
class Launch(Message):
    """Ask the zygote to fork a worker for one app."""

    KIND: ClassVar[str] = "launch"
    #: Chosen by the supervisor; echoed by :class:`Launched`.
    token: int
    #: The desktop-assigned ``app_N``.
    app: str
    #: Absolute path of the app directory.
    app_dir: str
    #: The entry module, relative to ``app_dir``.
    entry: str
    #: The ZeroMQ endpoint of this worker's own channel.
    endpoint: str
    #: Confinement and limits for the worker.
    policy: WorkerPolicy


@dataclass(frozen=True, slots=True)
class Launched(Message):
    """The zygote forked a worker (``pid``) or failed to (``error``)."""

    KIND: ClassVar[str] = "launched"
    token: int
    pid: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class Exited(Message):
    """A worker forked by the zygote ended; exactly one of ``exit_code`` / ``signal`` is set."""

    KIND: ClassVar[str] = "exited"
    pid: int
    exit_code: int | None
    signal: int | None
    #: What the zygote knows beyond the status: ``memory limit`` after a cgroup OOM kill.
    reason: str = ""

    def __post_init__(self) -> None:
        if (self.exit_code is None) == (self.signal is None):
            raise ValueError("exactly one of exit_code and signal must be set")


#: Every message class by its ``KIND`` tag; the codec refuses any other tag.
MESSAGE_TYPES: dict[str, type[Message]] = {
    cls.KIND: cls
    for cls in (
        Start,
        RestoreChunk,
        Operation,
        Mount,
        Dismount,
        Serialize,
        Ping,
        Shutdown,
        Hello,
        FragmentUpdate,
        Ack,
        AppState,
        Pong,
        LogRecord,
        ErrorReply,
        Request,
        Reply,
        Signal,
        Launch,
        Launched,
        Exited,
        HttpCall,
        HttpResult,
    )
}
