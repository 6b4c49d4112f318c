"""A small synchronous Chrome DevTools Protocol client over ``--remote-debugging-pipe``.

Chromium started with ``--remote-debugging-pipe`` reads commands on its descriptor 3 and writes
replies and events on its descriptor 4, one JSON object per message, each ended by a NUL byte.
No TCP port is opened, so nothing else on the machine (or in the worker) can reach the browser.
No maintained Python CDP library speaks the pipe (they connect to the WebSocket endpoint), and
Node or Playwright would be a second runtime inside the sandbox: this module is all it takes.

:meth:`Pipe.call` sends one command (flat ``sessionId`` for a target's session) and waits for
its reply within a deadline; events read meanwhile are kept for :meth:`Pipe.events`. It never
hangs: a reply that does not come in time raises :class:`CDPTimeout`, a closed pipe
:class:`CDPClosed`, a crashed target (``Inspector.targetCrashed``, ``Target.targetCrashed``)
:class:`CDPCrashed`, and an error reply :class:`CDPError`::

    CDPFailure                 anything the browser's side of the pipe did wrong
    ├── CDPError               an error reply (``code``, ``message``)
    ├── CDPTimeout             no reply within the deadline
    ├── CDPClosed              the pipe closed (the browser exited)
    └── CDPCrashed             the target the call was for crashed
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "MAX_MESSAGE",
    "CDPClosed",
    "CDPCrashed",
    "CDPError",
    "CDPFailure",
    "CDPTimeout",
    "Pipe",
]

#: The longest message read before the pipe is treated as broken (a screenshot of a large page
#: is a few MB of base64; a peer that never sends NUL must not grow this process without end).
MAX_MESSAGE = 64 * 1024 * 1024
#: Events kept unread before the oldest are dropped.
MAX_EVENTS = 10_000
#: How often a wait asks :attr:`Pipe.alive`.
POLL_S = 0.05


class CDPFailure(RuntimeError):
    """The browser did not answer a command as asked."""


class CDPError(CDPFailure):
    """The browser answered a command with an error."""

    def __init__(self, method: str, code: int, message: str) -> None:
        self.method, self.code, self.message = method, code, message
        super().__init__(f"{method}: {message} ({code})")


class CDPTimeout(CDPFailure):
    """No reply within the deadline."""


class CDPClosed(CDPFailure):
    """The pipe closed: the browser exited or closed its end."""


class CDPCrashed(CDPFailure):
    """A target crashed (``Inspector.targetCrashed`` or ``Target.targetCrashed``)."""


class Pipe:
    """The client's ends of the browser's debugging pipe: ``send_fd`` is the browser's fd 3."""

    def __init__(
        self, send_fd: int, receive_fd: int, alive: Callable[[], bool] | None = None
    ) -> None:
        self.send_fd, self.receive_fd = send_fd, receive_fd
        #: Asked at least every :data:`POLL_S` while waiting: ``False`` ends the wait with
        #: :class:`CDPClosed` (the browser died while a child of it still holds the pipe).
        self.alive = alive
        os.set_blocking(send_fd, False)
        os.set_blocking(receive_fd, False)
        self._next_id = 0
        self._buffer = bytearray()
        self._replies: dict[int, dict[str, Any]] = {}
        #: Ids of calls that failed before their reply came.
        self._abandoned: set[int] = set()
        self._events: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS)
        #: Session ids whose target crashed.
        self.crashed: set[str] = set()
        #: Session id → target id, from ``Target.attachedToTarget``.
        self._targets: dict[str, str] = {}
        self.closed = False
        #: Called with each event as it is read, even while a call waits for its reply (a
        #: paused request must be answered before the page can go on); ``True`` takes the
        #: event, ``False`` keeps it for :meth:`wait_event` and :meth:`events`. The hook may
        #: make calls itself: events read meanwhile wait until it returns, in order.
        self.hook: Callable[[dict[str, Any]], bool] | None = None
        self._hooked: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS)
        self._in_hook = False

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: str | None = None,
        timeout_s: float = 10.0,
    ) -> dict[str, Any]:
        """Send ``method`` and return its ``result``; raises a :class:`CDPFailure`."""
        deadline = time.monotonic() + timeout_s
        self._next_id += 1
        ident = self._next_id
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self._write(json.dumps(message).encode() + b"\0", deadline)
        try:
            while ident not in self._replies:
                self._check_crash(session)
                self._read(deadline, f"{method} got no reply within {timeout_s:g} s")
        except CDPFailure:
            self._abandoned.add(ident)  # its late reply is dropped, not kept forever
            raise
        reply = self._replies.pop(ident)
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], dict) else {}
            code = error.get("code")
            raise CDPError(
                method, code if isinstance(code, int) else 0, str(error.get("message", reply))
            )
        result = reply.get("result", {})
        if not isinstance(result, dict):
            raise CDPError(method, 0, f"a reply that is not an object: {result!r:.200}")
        return result

    def wait_event(
        self, method: str, *, session: str | None = None, timeout_s: float = 10.0
    ) -> dict[str, Any]:
        """The first event ``method`` (of ``session`` when given), read or waited for; its
        ``params``. Other events stay queued."""
        deadline = time.monotonic() + timeout_s
        while True:
            for event in list(self._events):
                if event["method"] == method and (
                    session is None or event.get("sessionId") == session
                ):
                    self._events.remove(event)
                    params: dict[str, Any] = event.get("params", {})
                    return params
            self._check_crash(session)
            self._read(deadline, f"no {method} event within {timeout_s:g} s")

    def wait_any(
        self, methods: tuple[str, ...], *, session: str | None = None, timeout_s: float = 10.0
    ) -> dict[str, Any]:
        """The first event of any of ``methods`` (of ``session`` when given), read or waited for:
        the whole message (``method``, ``params``). Other events stay queued."""
        deadline = time.monotonic() + timeout_s
        while True:
            for event in list(self._events):
                if event["method"] in methods and (
                    session is None or event.get("sessionId") == session
                ):
                    self._events.remove(event)
                    return event
            self._check_crash(session)
            self._read(deadline, f"none of {', '.join(methods)} within {timeout_s:g} s")

    def events(self) -> Iterator[dict[str, Any]]:
        """The events read so far (``method``, ``params``, ``sessionId``), oldest first; taken."""
        self._drain()
        while self._events:
            yield self._events.popleft()

    def pump(self, timeout_s: float) -> None:
        """Read what comes within ``timeout_s`` (at least one read) and hand events to
        :attr:`hook`; for a client with nothing to call that waits for events."""
        with contextlib.suppress(CDPTimeout):
            self._read(time.monotonic() + timeout_s, "")

    def close(self) -> None:
        """Close the client's ends (the browser sees end-of-file and exits)."""
        for fd in (self.send_fd, self.receive_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.closed = True

    def _check_crash(self, session: str | None) -> None:
        if (session or "") in self.crashed:
            raise CDPCrashed(f"the target of session {session or 'browser'} crashed")

    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CDPTimeout("the browser does not read its pipe")
            _, writable, _ = select.select([], [self.send_fd], [], remaining)
            if not writable:
                continue
            try:
                view = view[os.write(self.send_fd, view) :]
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError) as exc:
                self.closed = True
                raise CDPClosed(f"the browser's pipe is closed ({exc})") from None

    def _drain(self) -> None:
        """Read what is there without waiting."""
        if not self.closed:
            with contextlib.suppress(CDPTimeout):
                self._read(time.monotonic(), "")

    def _read(self, deadline: float, what: str) -> None:
        """Read at least once (waiting until ``deadline``) and dispatch every whole message."""
        if self.closed:
            raise CDPClosed("the browser's pipe is closed")
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            wait = remaining if self.alive is None else min(remaining, POLL_S)
            readable, _, _ = select.select([self.receive_fd], [], [], wait)
            if readable:
                break
            if self.alive is not None and not self.alive():
                self.closed = True
                raise CDPClosed("the browser exited")
            if wait >= remaining:
                raise CDPTimeout(what)
        try:
            chunk = os.read(self.receive_fd, 1 << 20)
        except BlockingIOError:
            return
        except OSError as exc:
            chunk = b""
            what = str(exc)
        if not chunk:
            self.closed = True
            raise CDPClosed("the browser closed its pipe (it exited)")
        self._buffer += chunk
        while (end := self._buffer.find(b"\0")) >= 0:
            raw = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            self._dispatch(raw)
        if len(self._buffer) > MAX_MESSAGE:
            self.closed = True
            raise CDPClosed(f"a message from the browser is over {MAX_MESSAGE} bytes")
        self._run_hook()

    def _run_hook(self) -> None:
        """Hand the events read so far to :attr:`hook`, oldest first (never re-entered)."""
        if self._in_hook or self.hook is None:
            return
        self._in_hook = True
        try:
            while self._hooked:
                event = self._hooked.popleft()
                if not self.hook(event):
                    self._events.append(event)
        finally:
            self._in_hook = False

    def _dispatch(self, raw: bytes) -> None:
        try:
            message = json.loads(raw)
        except ValueError:
            return  # not JSON: nothing of ours, nothing to answer
        if not isinstance(message, dict):
            return
        ident = message.get("id")
        if isinstance(ident, int):
            if ident in self._abandoned:
                self._abandoned.discard(ident)
            elif 0 < ident <= self._next_id:  # only replies to calls made
                self._replies[ident] = message
            return
        if not isinstance(message.get("method"), str):
            return
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        method = message["method"]
        if method == "Target.attachedToTarget":
            info = params.get("targetInfo")
            target = info.get("targetId") if isinstance(info, dict) else None
            self._targets[str(params.get("sessionId"))] = str(target)
        elif method == "Inspector.targetCrashed":
            self.crashed.add(str(message.get("sessionId") or ""))
        elif method == "Target.targetCrashed":
            target = str(params.get("targetId"))
            self.crashed.update(s for s, t in self._targets.items() if t == target)
        (self._events if self.hook is None else self._hooked).append(message)
