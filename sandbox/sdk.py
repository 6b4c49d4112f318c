"""The app SDK: what a third-party app author imports.

An app is a module that defines an :class:`App` subclass and binds an instance to the module-level
name ``app``. Its views are :class:`View` subclasses, typed by their app (``View[NotesApp]``), whose
``template`` (Jinja2, autoescaped; :mod:`sandbox.templates`) renders HTML marked as CONTRACT §3
describes. Operations are view methods decorated with :func:`operation`: the method's name,
docstring and typed signature declare the operation once, and :meth:`View.button` writes its
markup (:mod:`sandbox.operations`). What must survive a restart goes in :attr:`App.stored`
(:mod:`sandbox.stored_data`), which records its own writes: the worker stores the keys an
operation wrote with its acknowledgement, and re-renders a mounted view only when what it read of
them changed (a view that read none of it, or whose :meth:`View.inputs` says ``None``, after every
operation, timer and callback); it sends the supervisor only the views that changed, so handlers
just change state — there is nothing to "refresh" or to save. :meth:`View.cached` reuses one item
of a list (its HTML kept while its inputs are the same).

See ``docs/apps.md`` for a tutorial.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar, final

from markupsafe import Markup, escape

from aotui.protocol.messages import HttpRequest, HttpResponse
from aotui.sandbox.operations import (
    OperationDef,
    Ref,
    declared_operations,
    marked_handlers,
    operation,
)
from aotui.sandbox.stored_data import StoredData
from aotui.sandbox.templates import attributes, json_value, render_template

__all__ = [
    "App",
    "ConfirmationRequired",
    "HttpReply",
    "Markup",
    "OperationCall",
    "Ref",
    "StoredData",
    "Timer",
    "View",
    "operation",
]

AppT = TypeVar("AppT", bound="App")
ViewT = TypeVar("ViewT", bound="View[Any]")
# Tells "no data-value" apart from a data-value of None (JSON null).
_ABSENT: Any = object()
# A view class's operation markup never changes: it is derived from the class's methods.
_BUTTONS: dict[type, dict[tuple[str, str | None], Markup]] = {}


@dataclass(frozen=True)
class OperationCall:
    """What the worker hands a view (CONTRACT §5): the operation, its args and stable keys."""

    #: The operation id (``reply_message``).
    operation: str
    #: Arguments coerced to their declared types; refs are resolved to their ``data-value``.
    args: Mapping[str, Any]
    #: For each argument given as a ref, the referenced item's stable ``key``.
    stable_keys: Mapping[str, Any] = field(default_factory=dict)
    #: The user confirmed this call: the handler asked with :class:`ConfirmationRequired` and
    #: the desktop runs it again once the user agrees.
    confirmed: bool = False


class ConfirmationRequired(Exception):
    """Raised by a handler before it changes anything: the desktop asks the user, as for an
    operation marked ``confirm`` (CONTRACT §6), and runs the call again with
    :attr:`OperationCall.confirmed` once they agree. ``reason`` (one line, at most 200
    characters shown) tells the user why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class HttpReply:
    """What :meth:`App.http` returns."""

    status: int
    reason: str
    #: Header names in lower case; repeated headers joined with ``, ``.
    headers: Mapping[str, str]
    body: bytes
    #: The final URL, after redirects.
    url: str

    def text(self, encoding: str = "utf-8") -> str:
        """The body decoded (undecodable bytes replaced)."""
        return self.body.decode(encoding, errors="replace")


class View(Generic[AppT]):
    """One view instance of an ``AppT``; ``key`` is the app's stable id for it."""

    #: The view's Jinja2 source (autoescaped), rendered with ``view``, ``app`` and :meth:`context`.
    template: ClassVar[str] = ""
    #: ``op_id → method name`` of the operations this class handles.
    handlers: ClassVar[dict[str, str]] = {}
    #: A dialog (as ``modal`` on the root): while it is mounted, the rest of the app waits.
    modal: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.handlers = marked_handlers(cls)

    def __init__(self, key: str) -> None:
        self.key = key
        self._app: AppT | None = None
        # view.cached(): the blocks the last render used, and those this render has so far.
        self._aotui_blocks: dict[Hashable, tuple[Hashable, Markup]] = {}
        self._aotui_fresh: dict[Hashable, tuple[Hashable, Markup]] | None = None
        # What the last render read of App.stored: the keys, and whether it iterated them.
        self._aotui_read: tuple[frozenset[str], bool] | None = None

    @property
    def app(self) -> AppT:
        """The app this view is registered with (by :meth:`App.add_view`)."""
        if self._app is None:
            raise RuntimeError(f"view {self.key!r} is not attached to an app")
        return self._app

    def attach(self, app: AppT) -> None:
        """Register with ``app``; :meth:`App.add_view` calls it."""
        self._app = app

    # --- rendering ------------------------------------------------------------------------------

    def context(self) -> Mapping[str, Any]:
        """Names the template uses besides ``view`` and ``app``; computed once per render."""
        return {}

    def inputs(self) -> Hashable:
        """A cheap value that changes whenever what this view shows changes.

        The worker re-renders a mounted view only when its inputs differ from those of its last
        render (compared with ``==``). By default they are what the last render read of
        :attr:`App.stored` (each key's version; the keys' count if it iterated them), so a view
        showing stored data only needs nothing here. ``None`` means "unknown": the view is
        re-rendered after every operation, timer and callback — the default for a view that read
        nothing stored. Override it for a view that shows state kept elsewhere, or to say it
        more cheaply; return something small, never the data itself.
        """
        read = self._aotui_read
        if read is None or not (read[0] or read[1]):
            return None
        return self.app.stored.versions(*read)

    def render(self) -> str:
        """This view's HTML; the root element carries ``view="Name"``. Must not change state."""
        if not self.template:
            raise NotImplementedError(
                f"{type(self).__name__} needs a template (or its own render())"
            )
        fresh: dict[Hashable, tuple[Hashable, Markup]] = {}
        self._aotui_fresh = fresh
        stored = self.app.stored
        stored.begin_reads()
        try:
            html = render_template(self.template, {**self.context(), "view": self, "app": self.app})
        finally:
            self._aotui_fresh = None
            self._aotui_read = stored.end_reads()
        # Keep what this render used: the blocks of items no longer shown are forgotten.
        self._aotui_blocks = fresh
        return html

    def cached(self, key: Hashable, inputs: Hashable, caller: Callable[[], str]) -> Markup:
        """``{% call view.cached(key, inputs) %}…{% endcall %}``: the block, rendered once.

        The block's HTML is rendered again only when ``inputs`` differ (``!=``) from those it
        had under ``key`` at the last render; otherwise the HTML from then is reused, and the
        block's calls (``view.link`` registering a child) do not run again — what they registered
        stays registered. Wrap each item of a long list, keyed by its id, with inputs that
        change whenever what the item shows changes (``None``: render it every time).
        """
        fresh = self._aotui_fresh
        found = fresh.get(key) if fresh is not None else None
        if found is None:
            found = self._aotui_blocks.get(key)
        if found is None or inputs is None or found[0] != inputs:
            found = (inputs, Markup(caller()))
        if fresh is not None:
            fresh[key] = found
        return found[1]

    def item(self, key: str, value: Any = _ABSENT) -> Markup:
        """``key="…" data-value="…"`` for a list item: its stable key and what a ref to it gives."""
        if value is _ABSENT:
            return Markup(f'key="{escape(key)}"')
        return Markup(f'key="{escape(key)}" data-value="{escape(json_value(value))}"')

    def entity(self, entity_type: str, entity_id: str, value: Any = _ABSENT) -> Markup:
        """``entity="type:id" data-value="…"`` for an addressable single thing."""
        data = None if value is _ABSENT else json_value(value)
        return attributes((("entity", f"{entity_type}:{entity_id}"), ("data-value", data)))

    def link(self, child: View[Any] | str, label: str, description: str = "") -> Markup:
        """Register ``child`` (a view or its key) as mountable from here; the HTML of its link."""
        return Markup(f"<a{self.link_attrs(child, description)}>{escape(label)}</a>")

    def link_attrs(self, child: View[Any] | str, description: str = "") -> Markup:
        """Register ``child`` and return `` view-link="…"`` attributes for your own element.

        Put them on a list item to make the whole item the link, with its nested list as the
        link's details: ``<li{{ view.link_attrs(child) }}>Johnny<ul><li>…</li></ul></li>``.
        """
        if isinstance(child, str):
            found = self.app.view(child)
            if found is None:
                raise LookupError(f"view {self.key!r} links to {child!r}, which does not resolve")
            child = found
        key = escape(self.app.add_view(child).key)
        if description:
            return Markup(f' view-link="{key}" description="{escape(description)}"')
        return Markup(f' view-link="{key}"')

    def button(self, op_id: str, label: str | None = None) -> Markup:
        """The markup of operation ``op_id``: id, description, label and ``args``, all derived."""
        cache = _BUTTONS.setdefault(type(self), {})
        cached = cache.get((op_id, label))
        if cached is None:
            cached = cache[op_id, label] = self._button(op_id, label)
        return cached

    def _button(self, op_id: str, label: str | None) -> Markup:
        found = self.operations_declared().get(op_id)
        if found is None:
            known = ", ".join(self.operations_declared()) or "none"
            raise LookupError(f"{type(self).__name__} has no typed operation {op_id!r} ({known})")
        pairs = (
            ("operation", op_id),
            ("description", found.description or None),
            ("args", found.args_json or None),
            ("confirm", "confirm" if found.confirm else None),
        )
        return Markup(f"<button {attributes(pairs)}>{escape(label or found.label)}</button>")

    def buttons(self) -> Markup:
        """The markup of every typed operation of this view, in declaration order."""
        cache = _BUTTONS.setdefault(type(self), {})
        cached = cache.get(("", None))
        if cached is None:
            ops = self.operations_declared().values()
            cached = Markup("\n").join(self.button(op.op_id) for op in ops)
            cache["", None] = cached
        return cached

    @classmethod
    def operations_declared(cls) -> Mapping[str, OperationDef]:
        """The operations this class declares, read from their methods."""
        return declared_operations(cls)

    # --- dispatch -------------------------------------------------------------------------------

    def handle(self, call: OperationCall) -> Any:
        """Run the handler of ``call.operation`` with its typed arguments."""
        attr = self.handlers.get(call.operation)
        if attr is None:
            raise LookupError(f"view {self.key!r} has no handler for operation {call.operation!r}")
        handler = getattr(self, attr)
        definition = self.operations_declared()[call.operation]
        return handler(**definition.arguments(call.args, call.stable_keys))

    # --- lifecycle ------------------------------------------------------------------------------

    def on_mount(self) -> None:
        """Called when the agent (or the app's opening) mounts this view."""

    def on_dismount(self) -> None:
        """Called when this view is dismounted."""


@dataclass(order=True)
class Timer:
    """A scheduled callback; cancel it with :meth:`cancel`."""

    when: float
    seq: int
    callback: Callable[[], Any] = field(compare=False)
    interval: float | None = field(default=None, compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        """Stop the timer; a repeating timer stops repeating."""
        self.cancelled = True


class App:
    """Base class of an app: owns its views, timers and serialized state."""

    def __init__(self) -> None:
        self._views: dict[str, View[Any]] = {}
        self._timers: list[Timer] = []
        self._seq = itertools.count()
        self._posted: list[Callable[[], Any]] = []
        self._posted_lock = threading.Lock()
        self._aotui_changed: set[str] = set()
        #: The app's data that survives restarts: write it, and it is stored (see
        #: :mod:`sandbox.stored_data`). The desktop's copy is loaded before :meth:`on_start`.
        self.stored = StoredData(self._aotui_changed)
        #: Set by the worker: called (from any thread) to wake its loop after :meth:`call_soon`.
        self.wakeup: Callable[[], None] = lambda: None
        #: Set by the worker: sends a line to the desktop's System Logs.
        self.log: Callable[[str], None] = lambda message: None
        #: Set by the worker: performs a brokered HTTP request (see :meth:`http`).
        self.broker: Callable[[HttpRequest], HttpResponse] | None = None
        #: Set by the worker: the origins the desktop's config trusts (``trusted_origins``).
        self.trusted_origins: tuple[str, ...] = ()

    # --- hooks an app overrides -----------------------------------------------------------------

    def roots(self) -> Iterable[View[Any]]:
        """The root views, mounted when the app opens."""
        raise NotImplementedError(f"{type(self).__name__}.roots() must return the root views")

    def serialize(self) -> Any:
        """The app's data as plain msgpack-able values; restored by :meth:`restore`.

        Low level: by default it is :attr:`stored`, which needs none of these hooks.
        """
        return self.stored.whole() if self.stored.used else None

    def serialize_part(self, part: str) -> Any:
        """For keyed data: the value of one part of :meth:`serialize`'s dict (``None``: gone).

        Low level (by default, a key of :attr:`stored`). An app that defines it and its own
        :meth:`serialize` returns a dict of parts and calls :meth:`changed` with the parts an
        operation changes: after the first operation of a run, only those are sent and stored.
        """
        return self.stored.part(part)

    def state_inputs(self) -> Hashable:
        """A cheap value that changes whenever what :meth:`serialize` returns changes.

        Low level, for an app with its own :meth:`serialize` (:attr:`stored` needs none). After
        an operation the worker serializes (and the desktop stores) the app's data only
        when this differs from its value at the last acknowledged operation. ``None`` (the
        default) means "unknown": the data is serialized after every operation.
        """
        return None

    def restore(self, data: Any) -> None:
        """Rebuild state from what :meth:`serialize` returned before a restart.

        Low level: by default the stored data is loaded into :attr:`stored`.
        """
        if self.stores_data() and isinstance(data, dict):
            self.stored.load(data)

    def resolve_view(self, key: str) -> View[Any] | None:
        """Create the view for ``key`` on demand (e.g. after a restart); ``None`` if unknown."""
        return None

    def on_start(self) -> None:
        """Called once after restore, before the first render; start timers here."""

    @final
    def handle_event(self, call: OperationCall) -> Any:
        """An event from outside the agent's view: the app's own ``@operation`` of that name.

        The desktop posts them, never an agent (``aotui say`` posts ``user_message`` with its
        ``text``); an app method declared with :func:`operation` receives one typed, as a view's
        operation does.
        """
        attr = marked_handlers(type(self)).get(call.operation)
        definition = declared_operations(type(self)).get(call.operation)
        if attr is None or definition is None:
            raise LookupError(f"{type(self).__name__} does not accept event {call.operation!r}")
        return getattr(self, attr)(**definition.arguments(call.args, call.stable_keys))

    def _aotui_watch(self) -> tuple[int, Callable[[], None]] | None:
        """A descriptor the worker's loop also waits on, and what to call when it is readable
        (a web app's browser pipe, :mod:`sandbox.webapp`); ``None`` for a Python app."""
        return None

    # --- services for the app (final: an override would break the worker's use of them) ---------

    @final
    def changed(self, *parts: str) -> None:
        """Record parts of an app's own keyed data (see :meth:`serialize_part`) that changed.

        Low level: a write to :attr:`stored` records itself.
        """
        self._aotui_changed.update(parts)

    @final
    def keyed(self) -> bool:
        """Whether the app's data is keyed: :attr:`stored`, or its own :meth:`serialize_part`."""
        return self.stores_data() or type(self).serialize_part is not App.serialize_part

    @final
    def stores_data(self) -> bool:
        """Whether the app's data is :attr:`stored` (it does not serialize its own)."""
        return type(self).serialize is App.serialize

    @final
    def changed_parts(self) -> set[str]:
        """The parts recorded by :meth:`changed` since the worker last cleared them."""
        return self._aotui_changed

    @final
    def add_view(self, view: ViewT) -> ViewT:
        """Register ``view`` (idempotent by key) and return the registered instance."""
        existing = self._views.get(view.key)
        if existing is not None:
            return existing  # type: ignore[return-value]  # one key, one view class
        view.attach(self)
        self._views[view.key] = view
        return view

    @final
    def view(self, key: str) -> View[Any] | None:
        """The registered view with ``key``, asking :meth:`resolve_view` when it is unknown."""
        found = self._views.get(key)
        if found is None:
            created = self.resolve_view(key)
            if created is not None:
                found = self.add_view(created)
        return found

    @final
    def http(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
    ) -> HttpReply:
        """An HTTP request performed by the supervisor under the manifest's ``net:http`` grants.

        A host the manifest does not grant (or a private address) raises ``PermissionError``;
        a timeout raises ``TimeoutError``; any other failure ``ConnectionError``. Blocks the app's
        loop until the answer comes (at most the desktop's HTTP timeout).
        """
        if self.broker is None:
            raise RuntimeError("http() is only available inside a running worker")
        for name, value in (headers or {}).items():
            if type(name) is not str or type(value) is not str:
                raise TypeError(f"HTTP header {name!r} must map a str to a str, got {value!r:.80}")
        if type(method) is not str or type(url) is not str:
            raise TypeError("http() takes the method and the URL as str")
        answer = self.broker(HttpRequest(method, url, dict(headers or {}), bytes(body)))
        return HttpReply(answer.status, answer.reason, answer.headers, answer.body, answer.url)

    @final
    def call_later(self, delay: float, callback: Callable[[], Any]) -> Timer:
        """Run ``callback`` on the app's loop after ``delay`` seconds."""
        timer = Timer(time.monotonic() + max(0.0, delay), next(self._seq), callback)
        heapq.heappush(self._timers, timer)
        return timer

    @final
    def call_every(self, interval: float, callback: Callable[[], Any]) -> Timer:
        """Run ``callback`` every ``interval`` seconds until the timer is cancelled."""
        if interval <= 0:
            raise ValueError("interval must be positive")
        timer = Timer(time.monotonic() + interval, next(self._seq), callback, interval)
        heapq.heappush(self._timers, timer)
        return timer

    @final
    def call_soon(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` on the app's loop; safe to call from any thread (e.g. a reader)."""
        with self._posted_lock:
            self._posted.append(callback)
        self.wakeup()

    # --- used by the worker loop ----------------------------------------------------------------

    @final
    def next_timer_delay(self, now: float) -> float | None:
        """Seconds until the next live timer, or ``None``."""
        while self._timers and self._timers[0].cancelled:
            heapq.heappop(self._timers)
        if not self._timers:
            return None
        return max(0.0, self._timers[0].when - now)

    @final
    def due_callbacks(self, now: float) -> list[Callable[[], Any]]:
        """Pop every due timer and posted callback, rescheduling repeating timers."""
        due: list[Callable[[], Any]] = []
        with self._posted_lock:
            due.extend(self._posted)
            self._posted.clear()
        while self._timers and self._timers[0].when <= now:
            timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            due.append(timer.callback)
            if timer.interval is not None:
                # A timer late by whole intervals skips them rather than firing in a burst.
                timer.when += timer.interval
                if timer.when <= now:
                    timer.when = now + timer.interval
                timer.seq = next(self._seq)
                heapq.heappush(self._timers, timer)
        return due
