"""The worker: one process per running app, serving its channel to the supervisor.

Start path (forked by :mod:`sandbox.zygote`): the zygote's child closes every inherited descriptor
and calls :func:`run_worker`, which applies confinement (:func:`sandbox.confine.confine`) **before**
the app's entry module is imported, then creates its own ZeroMQ context and binds its channel on
the listening descriptor the supervisor passed down (the supervisor connects).

Protocol on the channel (a PAIR socket, one per worker incarnation): the supervisor sends
:class:`~protocol.messages.Start`; the worker loads the app, restores state, mounts its root views
and answers :class:`~protocol.messages.Hello` followed by the first
:class:`~protocol.messages.FragmentUpdate`. Every request after that is answered by changed
fragments (if any) and then exactly one :class:`~protocol.messages.Ack` or
:class:`~protocol.messages.ErrorReply`, in that order, which is what makes read-your-writes hold.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.util
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

import zmq

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError, ErrorCode, Outcome
from aotui.protocol.messages import (
    Ack,
    AppState,
    ChildLink,
    Dismount,
    ErrorReply,
    FragmentUpdate,
    Hello,
    HttpCall,
    HttpRequest,
    HttpResponse,
    HttpResult,
    LogLevel,
    LogRecord,
    Message,
    Mount,
    Operation,
    Ping,
    Pong,
    RestoreChunk,
    SandboxLayer,
    Serialize,
    Shutdown,
    Start,
    ViewFragment,
)
from aotui.sandbox import fsview
from aotui.sandbox.confine import confine
from aotui.sandbox.render import ItemCache, render_view
from aotui.sandbox.sdk import App, ConfirmationRequired, OperationCall, View

__all__ = ["WorkerLoop", "run_worker"]

#: How long a new worker waits for its :class:`Start` before giving up.
START_TIMEOUT_S = 30.0

# Equal to nothing an app returns: "no inputs recorded yet".
_UNKNOWN: Any = object()
# The acknowledged state of a keyed app: what was sent whole and changed since is stored.
_KEYED: Any = object()


def _denial(exc: BaseException) -> str:
    """Why ``exc`` is the sandbox saying no (``""`` when it is not).

    Besides ``PermissionError``: a path outside every granted tree is not in the worker's
    filesystem view at all (``ENOENT``), its read-only trees refuse writes (``EROFS``), a link
    or rename across its mounts or Landlock's rules is ``EXDEV``, and name resolution fails
    because a worker has no network at all.
    """
    if isinstance(exc, PermissionError):
        return str(exc)
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        names = [n for n in (exc.filename, exc.filename2) if isinstance(n, str | bytes)]
        if any(fsview.outside_view(name) for name in names):
            return f"{exc} (not granted to the app: outside its filesystem view)"
    if isinstance(exc, OSError) and exc.errno == errno.EROFS:
        return f"{exc} (granted read-only: the app directory and fs:read grants)"
    if isinstance(exc, OSError) and exc.errno == errno.EXDEV:
        return f"{exc} (link or rename out of the app's grants)"
    if isinstance(exc, socket.gaierror):
        return f"{exc} (apps have no network; use App.http() with a net:http permission)"
    return ""


def load_app(app_dir: str, entry: str, app_id: str) -> App:
    """Import the app's entry module and return its module-level ``app`` (an :class:`App`);
    an ``.html`` entry is a web app's page (:mod:`sandbox.webapp`)."""
    if entry.endswith(".html"):
        from aotui.sandbox.webapp import WebApp  # only web apps' workers need it

        return WebApp(app_dir, entry, app_id)
    path = Path(app_dir, entry)
    sys.path.insert(0, app_dir)
    spec = importlib.util.spec_from_file_location(f"aotui_app_{app_id}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load entry {entry!r} from {app_dir}")
    module: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    app = getattr(module, "app", None)
    if not isinstance(app, App):
        raise TypeError(f"{entry} must define `app = YourApp()` (an aotui App instance)")
    return app


class WorkerLoop:
    """Serves one app on one channel: renders views, runs handlers, answers the supervisor."""

    def __init__(self, app: App, sock: zmq.Socket[bytes], wake_fd: int) -> None:
        self.app = app
        self.sock = sock
        self.wake_fd = wake_fd
        self.mounted: dict[str, View[Any]] = {}
        self.parents: dict[str, str | None] = {}
        self.sent: dict[str, ViewFragment] = {}
        #: ``View.inputs()`` of each mounted view at its last render (only views that give any).
        self.inputs: dict[str, Any] = {}
        #: Each mounted view's rendered list items, reused while their markup is unchanged.
        self.item_caches: dict[str, ItemCache] = {}
        #: ``App.state_inputs()`` at the last acknowledged operation; the data is sent again
        #: only when it differs (``_UNKNOWN`` after a start: the first operation sends it).
        self.acked_state: Any = _UNKNOWN
        self.running = True
        #: Set once an effect could not be acknowledged: this process's memory holds an effect
        #: that must not survive, so it runs nothing more until the supervisor restarts it.
        self.discarded = False
        #: A :meth:`data_mark` around the operation being run could not be taken (a hook
        #: failed, a page too busy to answer).
        self.mark_unknown = False
        #: Restored from keyed data: the desktop holds its parts (see :meth:`parts_ack`).
        self.restored_keyed = False
        #: Messages that arrived while the app waited on a brokered call.
        self.backlog: list[Message] = []
        self.call_ids = 0

    # --- sending --------------------------------------------------------------------------------

    def send(self, message: Message) -> None:
        """Encode and send one message on the channel."""
        self.sock.send(codec.encode(message), copy=False)

    def log(self, message: str, level: LogLevel = LogLevel.INFO) -> None:
        """A line for the desktop's System Logs."""
        self.send(LogRecord(level=level, message=message[:2000]))

    # --- views ----------------------------------------------------------------------------------

    def mount(self, key: str, *, root: bool = False) -> None:
        """Mount the view with ``key``; raises ``E_NOT_FOUND`` for a view the app cannot resolve."""
        view = self.app.view(key)
        if view is None:
            raise AotuiError(ErrorCode.E_NOT_FOUND, f"the app has no view with key {key!r}")
        if root:
            self.parents[key] = None
        if key not in self.mounted:
            view.on_mount()  # first: a hook that raises leaves the view unmounted
            self.mounted[key] = view

    def dismount(self, key: str) -> None:
        """Dismount ``key`` and, like a component tree, every view mounted beneath it."""
        doomed = {key}
        changed = True
        while changed:
            changed = False
            for child, parent in self.parents.items():
                if parent in doomed and child not in doomed and child in self.mounted:
                    doomed.add(child)
                    changed = True
        for victim in doomed:
            self.inputs.pop(victim, None)  # mounted again, it renders afresh
            self.item_caches.pop(victim, None)
            gone = self.mounted.pop(victim, None)
            if gone is not None:
                gone.on_dismount()

    def render_one(self, key: str, view: View[Any] | None) -> ViewFragment:
        """Render one view into a fragment; a failing view shows its error instead of crashing."""
        parent = self.parents.get(key)
        if view is None:
            old = self.sent.get(key)
            name = old.name if old else key
            return ViewFragment(key, name, parent, False, "", {}, {}, {}, [], [])
        try:
            cache = self.item_caches.get(key)
            if cache is None:
                cache = self.item_caches[key] = ItemCache()
            rendered = render_view(view.render(), cache)
        except Exception as exc:  # noqa: BLE001 - an app bug must not take the worker down
            message = exc.message if isinstance(exc, AotuiError) else f"{type(exc).__name__}: {exc}"
            old = self.sent.get(key)
            return ViewFragment(
                key,
                old.name if old else type(view).__name__,
                parent,
                True,
                f"**This view failed to render:** {message}\n",
                {},
                {},
                {},
                [],
                [],
            )
        links = [ChildLink(link.key, link.label, link.description) for link in rendered.links]
        for link in links:
            self.parents.setdefault(link.key, key)
        return ViewFragment(
            key=key,
            name=rendered.name,
            parent=parent,
            mounted=True,
            markdown=rendered.markdown,
            refs=dict(rendered.refs),
            keys=dict(rendered.keys),
            ref_types=dict(rendered.ref_types),
            operations=list(rendered.operations),
            links=links,
            modal=rendered.modal or bool(getattr(type(view), "modal", False)),
        )

    def flush(self, force: bool = False) -> None:
        """Re-render every mounted view and send the ones that changed as one update."""
        update = self.collect(force)
        if update is not None:
            self.send(update)

    def collect(self, force: bool = False) -> FragmentUpdate | None:
        """Re-render the views whose inputs changed; the update to send for those that differ.

        A mounted view whose :meth:`View.inputs` equal those of its last render is not rendered
        at all; an unmounted one is rendered (as unmounted) once, when it is dismounted.
        """
        changed: list[ViewFragment] = []
        for key in list(self.sent) + [k for k in self.mounted if k not in self.sent]:
            view = self.mounted.get(key)
            old = self.sent.get(key)
            if view is None:
                if old is not None and not old.mounted:
                    continue  # already sent as unmounted
                fragment = self.render_one(key, None)
            else:
                inputs = self.view_inputs(key, view)
                same = inputs is not None and self.inputs.get(key, _UNKNOWN) == inputs
                if same and old is not None and old.mounted:
                    continue
                fragment = self.render_one(key, view)
                if inputs is None or fragment.markdown.startswith("**This view failed"):
                    self.inputs.pop(key, None)
                else:
                    self.inputs[key] = inputs
            if old != fragment:
                self.sent[key] = fragment
                changed.append(fragment)
        if changed or force:
            return FragmentUpdate(views=changed)
        return None

    def view_inputs(self, key: str, view: View[Any]) -> Any:
        """``view.inputs()``; ``None`` (render it) when the hook fails, which is logged."""
        try:
            return view.inputs()
        except Exception as exc:  # noqa: BLE001 - app code may raise anything
            self.log(f"{key}: inputs() failed: {type(exc).__name__}: {exc}", LogLevel.ERROR)
            return None

    # --- requests -------------------------------------------------------------------------------

    def changed_state(self) -> tuple[Any, dict[str, Any] | None, Any]:
        """``(data, changes, inputs)`` after an operation; ``None`` for what did not change.

        Keyed data (:meth:`App.serialize_part`) is sent whole after a start, then as the parts
        :meth:`App.changed` named; other data whole, unless :meth:`App.state_inputs` says it is
        as it was at the last acknowledged operation.
        """
        if self.app.keyed() and self.acked_state is _KEYED:
            parts = self.app.changed_parts()
            if not parts:
                return None, None, _KEYED
            try:
                return None, {part: self.app.serialize_part(part) for part in parts}, _KEYED
            except Exception as exc:  # noqa: BLE001 - app code may raise anything
                self.log(f"serialize_part() failed: {type(exc).__name__}: {exc}", LogLevel.ERROR)
                return self.state(), None, None  # whole, then; parts again from the next one
        try:
            inputs = self.app.state_inputs()
        except Exception as exc:  # noqa: BLE001 - app code may raise anything
            self.log(f"state_inputs() failed: {type(exc).__name__}: {exc}", LogLevel.ERROR)
            inputs = None
        if inputs is not None and inputs == self.acked_state:
            return None, None, inputs
        data = self.state()
        if self.app.keyed() and isinstance(data, dict):
            inputs = _KEYED
        return data, None, inputs

    def state(self) -> Any:
        """The app's serialized data, or ``None`` when its hook fails (logged)."""
        try:
            return self.app.serialize()
        except Exception as exc:  # noqa: BLE001 - app code may raise anything
            self.log(f"serialize() failed: {type(exc).__name__}: {exc}", LogLevel.ERROR)
            return None

    def reply_error(self, request_id: int, exc: BaseException) -> None:
        """Answer a request with the error ``exc`` maps to."""
        denied = _denial(exc)
        if isinstance(exc, ConfirmationRequired):
            # Nothing ran: the desktop asks the user and sends the call again, confirmed.
            reason = str(exc.reason)[:200]
            message = f"the app asks the user to confirm: {reason}"
            self.send(
                ErrorReply(request_id, ErrorCode.E_PERMISSION.value, message, {"confirm": reason})
            )
            return
        if isinstance(exc, AotuiError):
            code, message = exc.code, exc.message
        elif denied:
            # The supervisor logs every E_PERMISSION answer itself (naming the app).
            code, message = ErrorCode.E_PERMISSION, f"permission denied: {denied}"
        else:
            code, message = ErrorCode.E_APP_ERROR, f"{type(exc).__name__}: {exc}"
        self.send(ErrorReply(request_id=request_id, code=code.value, message=message))

    def handle(self, message: Message) -> None:
        """Serve one message from the supervisor."""
        if isinstance(message, Ping):
            self.send(Pong(seq=message.seq))
        elif self.discarded and isinstance(message, Operation | Mount | Dismount):
            refusal = AotuiError(ErrorCode.E_APP_ERROR, "the app is restarting; nothing was run")
            self.reply_error(message.request_id, refusal)
        elif isinstance(message, Operation):
            self.run_operation(message)
        elif isinstance(message, Mount | Dismount):
            try:
                if isinstance(message, Mount):
                    self.mount(message.view)
                else:
                    self.dismount(message.view)
            except Exception as exc:  # noqa: BLE001 - app code may raise anything
                self.reply_error(message.request_id, exc)
                return
            self.flush()
            self.send(Ack(request_id=message.request_id))
        elif isinstance(message, Serialize):
            self.send(AppState(request_id=message.request_id, data=self.state()))
        elif isinstance(message, Shutdown):
            self.running = False

    def run_operation(self, message: Operation) -> None:
        """Run one handler, then send the changed fragments and the ack (or error)."""
        call = OperationCall(message.op_id, message.args, message.stable_keys, message.confirmed)
        if message.view == "":  # an event for the app itself, e.g. the user's side of a chat
            target = self.app.handle_event
        else:
            view = self.mounted.get(message.view)
            if view is None:
                self.reply_error(
                    message.request_id,
                    AotuiError(ErrorCode.E_NOT_FOUND, f"view {message.view!r} is not mounted"),
                )
                return
            if message.op_id not in view.handlers:
                self.reply_error(
                    message.request_id,
                    AotuiError(
                        ErrorCode.E_APP_ERROR,
                        f"the app declares operation {message.op_id!r} but has no handler for it",
                    ),
                )
                return
            target = view.handle
        self.mark_unknown = False
        before = self.data_mark()
        try:
            result = target(call)
        except Exception as exc:  # noqa: BLE001 - app code may raise anything
            # CONTRACT §6: an error means no effect. A handler that changed the app's data and
            # then raised leaves that change in this process alone: it is discarded with it.
            if self.data_mark() != before:
                self.discard_failure(message.request_id, exc)
                return
            self.flush()
            self.reply_error(message.request_id, exc)
            return
        # The ack is encoded before the views go out: an effect that cannot be acknowledged
        # must never be shown, nor kept.
        update = self.collect()
        data, changes, inputs = self.changed_state()
        ack = Ack(message.request_id, result, data, changes)
        try:
            frame = codec.encode(ack)
        except AotuiError as exc:
            parts = self.parts_ack(message.request_id, result, data)
            if parts is None:
                self.discard_effect(message.request_id, exc)
                return
            frame, inputs = parts, _KEYED
        if update is not None:
            self.send(update)
        self.sock.send(frame, copy=False)
        # A None input never matches: an app that does not say is serialized every time.
        self.acked_state = _UNKNOWN if inputs is None else inputs
        if inputs is _KEYED:
            self.app.changed_parts().clear()

    def parts_ack(self, request_id: int, result: Any, data: Any) -> bytes | None:
        """An ack whose data whole is too large for a frame, with only the changed parts instead.

        Only after a restore from keyed data: the desktop holds those parts already (what it sent
        may itself have taken several frames). ``None`` when that is no sendable ack either.
        """
        if not (self.restored_keyed and data is not None):
            return None
        try:
            parts = {part: self.app.serialize_part(part) for part in self.app.changed_parts()}
            return codec.encode(Ack(request_id, result, None, parts or None))
        except Exception:  # noqa: BLE001 - app code may raise anything
            return None

    def data_mark(self) -> Any:
        """A value that differs once the app's data has changed (compared around a handler).

        Keyed data: the parts recorded by :meth:`App.changed` and every write to
        :attr:`App.stored`; otherwise :meth:`App.state_inputs`, or (an app that does not say) a
        digest of its serialized data. A hook that fails gives a mark equal to nothing, so the
        data counts as changed.
        """
        try:
            inputs = self.app.state_inputs()
            if self.app.keyed():
                return inputs, frozenset(self.app.changed_parts()), self.app.stored.writes
            if inputs is not None:
                return inputs
            frame = codec.encode(AppState(request_id=0, data=self.app.serialize()))
            return hashlib.blake2b(frame, digest_size=16).digest()
        except Exception:  # noqa: BLE001 - app code may raise anything
            self.mark_unknown = True
            return object()

    def discard_failure(self, request_id: int, exc: BaseException) -> None:
        """The handler changed the app's data, then raised: the change must not survive.

        Like :meth:`discard_effect`: nothing is shown or sent, the supervisor restarts the app
        from its last acknowledged data, and the error reply says the operation took no effect.
        """
        self.discarded = True
        cause = exc.message if isinstance(exc, AotuiError) else f"{type(exc).__name__}: {exc}"
        changed = (
            "whether it changed the app's data could not be told"
            if self.mark_unknown
            else "the operation failed after changing the app's data"
        )
        message = (
            f"{cause} ({changed}; it took no effect: the app restarts from its last "
            f"acknowledged state)"
        )
        # A time-out stays one (the desktop then stops the worker as for its own time-out); any
        # other failure is the app's.
        timed_out = isinstance(exc, AotuiError) and exc.code is ErrorCode.E_TIMEOUT
        code = (ErrorCode.E_TIMEOUT if timed_out else ErrorCode.E_APP_ERROR).value
        self.send(ErrorReply(request_id, code, message, {"outcome": Outcome.NOT_APPLIED.value}))

    def discard_effect(self, request_id: int, exc: AotuiError) -> None:
        """The handler ran but its ack cannot be sent: ask to be restarted, run nothing more.

        Its effect lives only in this process's memory; the supervisor restarts the app from
        its last acknowledged state, so the error reply is true: the operation took no effect.
        """
        self.discarded = True
        message = (
            f"the operation's result or the app's state is too large to send ({exc.message}); "
            f"it took no effect: the app restarts from its last acknowledged state"
        )
        code = ErrorCode.E_APP_ERROR.value
        self.send(ErrorReply(request_id, code, message, {"outcome": Outcome.NOT_APPLIED.value}))

    def run_callbacks(self) -> None:
        """Run due timers and posted callbacks, then send what changed."""
        if self.discarded:
            return  # its views would show the effect being discarded before the restart
        due = self.app.due_callbacks(time.monotonic())
        for callback in due:
            try:
                callback()
            except Exception as exc:  # noqa: BLE001 - app code may raise anything
                self.log(f"timer callback failed: {type(exc).__name__}: {exc}", LogLevel.ERROR)
        if due:
            self.flush()

    def broker_call(self, request: HttpRequest) -> HttpResponse:
        """Ask the supervisor to perform an HTTP request; blocks until its answer.

        Messages that arrive meanwhile are kept, in order, for the loop to serve afterwards.
        """
        self.call_ids += 1
        call_id = self.call_ids
        self.send(HttpCall(call_id=call_id, request=request))
        while True:
            message = codec.decode(self.sock.recv())
            if isinstance(message, HttpResult) and message.call_id == call_id:
                break
            self.backlog.append(message)
        if message.response is not None:
            return message.response
        error = message.error or {}
        text = str(error.get("message", "the HTTP request failed"))
        code = ErrorCode.parse(error.get("code"))
        if code is ErrorCode.E_PERMISSION:
            raise PermissionError(text)
        if code is ErrorCode.E_TIMEOUT:
            raise TimeoutError(text)
        raise ConnectionError(text)

    def serve(self) -> None:
        """The loop: wait for a message, a timer or a wake-up; never blocks on anything else."""
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.wake_fd, zmq.POLLIN)
        watched = None
        while self.running:
            if watched is None and (watched := self.app._aotui_watch()) is not None:
                poller.register(watched[0], zmq.POLLIN)  # a web app's page: see sandbox.webapp
            while self.backlog and self.running:
                self.handle(self.backlog.pop(0))
            delay = self.app.next_timer_delay(time.monotonic())
            timeout = None if delay is None else max(0, int(delay * 1000) + 1)
            events = dict(poller.poll(timeout))
            if self.wake_fd in events:
                os.read(self.wake_fd, 4096)
            if watched is not None and watched[0] in events:
                watched[1]()
            if self.sock in events:
                while self.running:
                    try:
                        frame = self.sock.recv(zmq.NOBLOCK, copy=True)
                    except zmq.Again:
                        break
                    self.handle(codec.decode(frame))
            self.run_callbacks()


def _confine(policy: dict[str, Any] | None) -> tuple[tuple[str, ...], str]:
    """The confinement layers in force, or none and why the sandbox refused to start the app."""
    try:
        return confine(policy or {}), ""
    except Exception as exc:  # noqa: BLE001 - fail closed: no app runs half-confined
        return (), f"the sandbox refused to start the app: {exc}"


def _restored_data(sock: zmq.Socket[bytes], start: Start) -> Any:
    """The data to restore: ``start.restore``, or the parts of the chunks that follow it
    (``_UNKNOWN`` when they do not come in time or are not chunks)."""
    if not start.chunks:
        return start.restore
    data: dict[str, Any] = {}
    for _ in range(start.chunks):
        if not sock.poll(int(START_TIMEOUT_S * 1000)):
            return _UNKNOWN
        chunk = codec.decode(sock.recv())
        if not isinstance(chunk, RestoreChunk):
            return _UNKNOWN
        data.update(chunk.parts)
    return data


def _open_channel(
    context: zmq.Context[zmq.Socket[bytes]], endpoint: str, channel_fd: int | None
) -> zmq.Socket[bytes]:
    """The worker's end of its channel: bound on the passed-down socket, or connected (tests)."""
    sock = context.socket(zmq.PAIR)
    sock.setsockopt(zmq.LINGER, 2000)
    if channel_fd is not None:
        sock.setsockopt(zmq.USE_FD, channel_fd)
        sock.bind(endpoint)
    else:
        sock.connect(endpoint)
    return sock


def _mount_views(loop: WorkerLoop, app: App, mounted: list[str]) -> None:
    """Mount the app's roots, then again the views the desktop had mounted."""
    for root in app.roots():
        app.add_view(root)
        loop.mount(root.key, root=True)
    # Restored views come in mount order, so each parent renders (and records its links)
    # before its children are mounted again.
    for key in mounted:
        for mounted_key, view in list(loop.mounted.items()):
            if mounted_key not in loop.sent:
                loop.sent[mounted_key] = loop.render_one(mounted_key, view)
        if key not in loop.mounted and app.view(key) is not None:
            loop.mount(key)
    loop.sent.clear()


def run_worker(
    app_id: str,
    app_dir: str,
    entry: str,
    endpoint: str,
    policy: dict[str, Any] | None = None,
    channel_fd: int | None = None,
) -> int:
    """The worker process's main: confine, open the channel, load the app, serve.

    With ``channel_fd`` (the normal path) the channel is the listening socket the supervisor
    created and passed down: ZeroMQ binds on it (``ZMQ_USE_FD``) and the supervisor connects, so
    a confined worker never needs to ``connect()`` anywhere. Without it (tests), it connects.
    """
    layers, refusal = _confine(policy)
    context = zmq.Context(1)
    sock = _open_channel(context, endpoint, channel_fd)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not sock.poll(int(START_TIMEOUT_S * 1000)):
            return 3
        start = codec.decode(sock.recv())
        if not isinstance(start, Start):
            return 3
        restore = _restored_data(sock, start)
        if restore is _UNKNOWN:
            return 3
        if refusal:
            sock.send(codec.encode(LogRecord(level=LogLevel.ERROR, message=refusal)))
            sock.send(
                codec.encode(
                    ErrorReply(request_id=0, code=ErrorCode.E_PERMISSION.value, message=refusal)
                )
            )
            return 1
        try:
            app = load_app(app_dir, entry, app_id)
            loop = WorkerLoop(app, sock, wake_r)
            app.log = loop.log
            app.broker = loop.broker_call

            def wake() -> None:
                # A full pipe means the loop is already due to wake.
                with contextlib.suppress(BlockingIOError):
                    os.write(wake_w, b"\0")

            app.wakeup = wake
            app.trusted_origins = tuple(str(origin) for origin in start.trusted_origins)
            if restore is not None:
                app.restore(restore)
                # The first ack still sends the data whole (an app that migrated its data in
                # restore() stores it anew), unless it is too large for a frame.
                loop.restored_keyed = app.keyed() and isinstance(restore, dict)
                if loop.restored_keyed and app.stores_data():
                    # App.stored is the desktop's copy as loaded: only what is written goes.
                    loop.acked_state = _KEYED
            app.on_start()
            _mount_views(loop, app, start.mounted)
        except Exception as exc:  # noqa: BLE001 - app code may raise anything
            detail = "".join(traceback.format_exception(exc)).strip()
            sock.send(codec.encode(LogRecord(level=LogLevel.ERROR, message=detail[-2000:])))
            sock.send(
                codec.encode(
                    ErrorReply(
                        request_id=0,
                        code=ErrorCode.E_APP_ERROR.value,
                        message=f"the app failed to start: {type(exc).__name__}: {exc}",
                    )
                )
            )
            return 1
        if getattr(app, "chromium_sandbox", False):  # a web app's browser, sandbox.webapp
            layers = (*layers, SandboxLayer.CHROMIUM_SANDBOX.value)
        loop.send(Hello(pid=os.getpid(), layers=[SandboxLayer(name) for name in layers]))
        loop.flush(force=True)
        loop.serve()
        return 0
    finally:
        sock.close(linger=2000)
        context.term()
