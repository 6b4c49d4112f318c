"""The app SDK: what a third-party app author imports.

An app is a module that defines an :class:`App` subclass and binds an instance to the module-level
name ``app``. Its views are :class:`View` subclasses whose :meth:`View.render` returns HTML marked
as CONTRACT §3 describes; operations are view methods decorated with :func:`operation`. After every
operation, timer or posted callback the worker re-renders the mounted views and sends the supervisor
only those that changed, so handlers just change state — there is nothing to "refresh".

See ``docs/apps.md`` for a tutorial.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from html import escape
from typing import Any, ClassVar, TypeVar

__all__ = ["App", "HttpReply", "OperationCall", "Timer", "View", "operation"]

HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])


@dataclass(frozen=True)
class OperationCall:
    """What an operation handler receives (CONTRACT §5): the operation, its args and stable keys."""

    #: The operation id (``reply_message``).
    operation: str
    #: Arguments coerced to their declared types; refs are resolved to their ``data-value``.
    args: Mapping[str, Any]
    #: For each argument given as a ref, the referenced item's stable ``key``.
    stable_keys: Mapping[str, Any] = field(default_factory=dict)


def operation(op_id: str) -> Callable[[HandlerT], HandlerT]:
    """Mark a :class:`View` method as the handler of ``op_id`` (declared in the view's HTML)."""

    def mark(handler: HandlerT) -> HandlerT:
        handler.__aotui_operation__ = op_id  # type: ignore[attr-defined]
        return handler

    return mark


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


class View:
    """One view instance; ``key`` is the app's stable id for it (``conversation:johnny``)."""

    handlers: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found: dict[str, str] = {}
        for base in reversed(cls.__mro__):
            for attr, value in vars(base).items():
                op_id = getattr(value, "__aotui_operation__", None)
                if isinstance(op_id, str):
                    found[op_id] = attr
        cls.handlers = found

    def __init__(self, key: str) -> None:
        self.key = key
        self.app: App | None = None

    def render(self) -> str:
        """Return this view's HTML; the root element carries ``view="Name"``."""
        raise NotImplementedError(f"{type(self).__name__}.render() must return the view's HTML")

    def link(self, child: View, label: str, description: str = "") -> str:
        """Register ``child`` as mountable from this view and return the HTML of its link."""
        return f"<a{self.link_attrs(child, description)}>{escape(label)}</a>"

    def link_attrs(self, child: View, description: str = "") -> str:
        """Register ``child`` and return `` view-link="…"`` attributes for your own element.

        Put them on a list item to make the whole item the link, with its nested list as the
        link's details: ``<li{self.link_attrs(v)}>Johnny<ul><li>Last: Hi</li></ul></li>``.
        """
        if self.app is None:
            raise RuntimeError(f"view {self.key!r} is not attached to an app")
        self.app.add_view(child)
        desc = f' description="{escape(description)}"' if description else ""
        return f' view-link="{escape(child.key)}"{desc}'

    def handle(self, call: OperationCall) -> Any:
        """Dispatch ``call`` to the method decorated with ``@operation(call.operation)``."""
        attr = self.handlers.get(call.operation)
        if attr is None:
            raise LookupError(f"view {self.key!r} has no handler for operation {call.operation!r}")
        return getattr(self, attr)(call)


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
        self._views: dict[str, View] = {}
        self._timers: list[Timer] = []
        self._seq = itertools.count()
        self._posted: list[Callable[[], Any]] = []
        self._posted_lock = threading.Lock()
        #: Set by the worker: called (from any thread) to wake its loop after :meth:`post`.
        self.wakeup: Callable[[], None] = lambda: None
        #: Set by the worker: sends a line to the desktop's System Logs.
        self.log: Callable[[str], None] = lambda message: None
        #: Set by the worker: performs a brokered HTTP request (see :meth:`http`).
        self.broker: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    # --- hooks an app overrides -----------------------------------------------------------------

    def roots(self) -> Iterable[View]:
        """The root views, mounted when the app opens."""
        raise NotImplementedError(f"{type(self).__name__}.roots() must return the root views")

    def serialize(self) -> Any:
        """The app's data as plain msgpack-able values; restored by :meth:`restore`."""
        return None

    def restore(self, data: Any) -> None:
        """Rebuild state from what :meth:`serialize` returned before a restart."""

    def resolve_view(self, key: str) -> View | None:
        """Create the view for ``key`` on demand (e.g. after a restart); ``None`` if unknown."""
        return None

    def on_start(self) -> None:
        """Called once after restore, before the first render; start timers here."""

    def handle_event(self, call: OperationCall) -> Any:
        """An event from outside the agent's view (``aotui say`` posts ``user_message``)."""
        raise LookupError(f"{type(self).__name__} does not accept event {call.operation!r}")

    # --- services for the app -------------------------------------------------------------------

    def add_view(self, view: View) -> View:
        """Register ``view`` (idempotent by key) and return the registered instance."""
        existing = self._views.get(view.key)
        if existing is not None:
            return existing
        view.app = self
        self._views[view.key] = view
        return view

    def view(self, key: str) -> View | None:
        """The registered view with ``key``, asking :meth:`resolve_view` when it is unknown."""
        found = self._views.get(key)
        if found is None:
            created = self.resolve_view(key)
            if created is not None:
                found = self.add_view(created)
        return found

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
        answer = self.broker(
            {"method": method, "url": url, "headers": dict(headers or {}), "body": bytes(body)}
        )
        return HttpReply(
            status=int(answer["status"]),
            reason=str(answer["reason"]),
            headers=dict(answer["headers"]),
            body=bytes(answer["body"]),
            url=str(answer["url"]),
        )

    def call_later(self, delay: float, callback: Callable[[], Any]) -> Timer:
        """Run ``callback`` on the app's loop after ``delay`` seconds."""
        timer = Timer(time.monotonic() + max(0.0, delay), next(self._seq), callback)
        heapq.heappush(self._timers, timer)
        return timer

    def call_every(self, interval: float, callback: Callable[[], Any]) -> Timer:
        """Run ``callback`` every ``interval`` seconds until the timer is cancelled."""
        if interval <= 0:
            raise ValueError("interval must be positive")
        timer = Timer(time.monotonic() + interval, next(self._seq), callback, interval)
        heapq.heappush(self._timers, timer)
        return timer

    def post(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` on the app's loop; safe to call from any thread (e.g. a reader)."""
        with self._posted_lock:
            self._posted.append(callback)
        self.wakeup()

    # --- used by the worker loop ----------------------------------------------------------------

    def next_timer_delay(self, now: float) -> float | None:
        """Seconds until the next live timer, or ``None``."""
        while self._timers and self._timers[0].cancelled:
            heapq.heappop(self._timers)
        if not self._timers:
            return None
        return max(0.0, self._timers[0].when - now)

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
