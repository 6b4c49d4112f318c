"""A headless browser in a worker and its pages: what a web app and the Browser app share.

:class:`PageHost` starts the browser inside the worker's confinement (:mod:`sandbox.browser`),
routes every CDP event of the debugging pipe to the :class:`Page` it belongs to — also while a
call waits for its reply (:attr:`sandbox.cdp.Pipe.hook`): a paused request must be answered before
the page goes on — and ends the worker when the browser or a renderer is gone
(:class:`BrowserGone`). A :class:`Page` is one target and its session: requests paused with CDP's
``Fetch`` domain and answered by the host (its own origin, else the supervisor's broker), the
runtime of :file:`assets/web_runtime.js` in an isolated world (the page's change count, its
settling), and the page's WebMCP tools.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from importlib import resources
from typing import Any, NoReturn, Protocol
from urllib.parse import unquote, urlsplit

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.structure import sanitize
from aotui.sandbox import browser
from aotui.sandbox.cdp import CDPClosed, CDPCrashed, CDPError, CDPFailure, CDPTimeout, Pipe
from aotui.sandbox.sdk import App
from aotui.sandbox.webmcp import PageTools

__all__ = [
    "ANSWERED_TURNS",
    "CHANGE_INTERVAL_S",
    "LOAD_TIMEOUT_S",
    "OPERATION_TIMEOUT_S",
    "BrowserGone",
    "OwnFiles",
    "Page",
    "PageHost",
    "asset",
]

#: The bound on one operation: the page's answer, then its settling (under the desktop's
#: default operation timeout of 5 s, so that the agent reads why).
OPERATION_TIMEOUT_S = 4.0
#: The bound on loading a page and its first settling.
LOAD_TIMEOUT_S = 20.0
#: Task turns without a DOM change that settle a page after it answered.
ANSWERED_TURNS = 2
#: Console lines of the pages sent to System Logs per second (the desktop budgets them again).
CONSOLE_LINES_PER_S = 10
#: The fewest seconds between two renders that a DOM change starts (the contract's 10 Hz).
CHANGE_INTERVAL_S = 0.1
WORLD = "aotui-web"
_BINDING = "__aotuiSignal"
_DROPPED_HEADERS = {"content-encoding", "content-length", "transfer-encoding", "connection"}
_CRASHES = ("Inspector.targetCrashed", "Target.targetCrashed", "Inspector.detached")
#: Events kept for a waiter rather than handled: a document loaded (or parsed), a
#: same-document navigation.
_WAITED = ("Page.loadEventFired", "Page.domContentEventFired", "Page.navigatedWithinDocument")
#: How long a document's runtime world may take to appear before it is made directly.
WORLD_LATE_S = 0.5
#: Dialogs told in one operation's answer (a page may open them in a loop).
MAX_DIALOGS = 8
#: A document parsed and its deferred scripts run (not yet its images or async scripts).
PARSED = "Page.domContentEventFired"
LOADED = "Page.loadEventFired"


class BrowserGone(BaseException):
    """The browser or a page's renderer is gone. Not an :class:`Exception`: nothing of the
    worker's catches it, so the worker ends and the supervisor restarts the app."""


class OwnFiles(Protocol):
    """Answers the requests of an origin of the app's own (a web app's directory)."""

    host: str

    def __call__(self, path: str) -> tuple[int, dict[str, str], bytes]: ...


def asset(name: str) -> str:
    """A file of ``sandbox/assets``."""
    return resources.files("aotui.sandbox").joinpath(f"assets/{name}").read_text("utf-8")


class PageHost:
    """The browser of one worker and its pages, on behalf of ``app``."""

    def __init__(self, app: App, own: OwnFiles | None = None) -> None:
        self.app = app
        self.own = own
        self.browser: browser.Browser | None = None
        #: Session id → its page.
        self.pages: dict[str, Page] = {}
        self._render_due = False
        self._last_change_render = 0.0
        self._console: tuple[int, int] = (0, 0)
        #: Console lines over the rate not sent yet; reported once, a second after the first.
        self._console_dropped = 0

    @property
    def pipe(self) -> Pipe:
        if self.browser is None:
            raise RuntimeError("the browser is not started yet")
        return self.browser.pipe

    @property
    def chromium_sandbox(self) -> bool:
        """Whether Chromium's own sandbox runs inside ours (``aotui status`` says it)."""
        return self.browser is not None and self.browser.chromium_sandbox

    def launch(self) -> None:
        """Start the browser; a machine without one is ``E_APP_ERROR`` saying what to install."""
        try:
            self.browser = browser.launch()
        except browser.BrowserError as exc:
            raise AotuiError(ErrorCode.E_APP_ERROR, str(exc)) from None
        self.browser.pipe.hook = self.on_event

    def sandbox_line(self) -> str:
        """Whether Chromium's own sandbox is on, and why not, for System Logs."""
        assert self.browser is not None
        return "on" if self.chromium_sandbox else f"off ({self.browser.sandbox_reason})"

    def open_page(self, url: str = "about:blank") -> Page:
        """A page target with the runtime in it, at ``url``: the browser's first page (started
        with it: its renderer already runs), else a new one."""
        taken = {page.frame for page in self.pages.values()}
        targets = self.cdp("Target.getTargets", {}).get("targetInfos") or []
        spare = [
            t["targetId"]
            for t in targets
            if t.get("type") == "page"
            and t.get("url") == "about:blank"
            and not t.get("attached")
            and t["targetId"] not in taken
        ]
        target = spare[0] if spare and not self.pages else None
        if target is None:
            target = str(self.cdp("Target.createTarget", {"url": "about:blank"})["targetId"])
        attached = self.cdp("Target.attachToTarget", {"targetId": target, "flatten": True})
        page = Page(self, str(attached["sessionId"]), target)
        self.pages[page.session] = page
        page.start()
        if url != "about:blank":
            page.navigate(url)
        return page

    def close_page(self, page: Page) -> None:
        """Close ``page``'s target."""
        self.pages.pop(page.session, None)
        self.cdp("Target.closeTarget", {"targetId": page.frame})

    def watch(self) -> tuple[int, Callable[[], None]] | None:
        """The pipe's descriptor for the worker's loop, and what to call when it is readable."""
        return None if self.browser is None else (self.pipe.receive_fd, self.pump)

    def pump(self, timeout_s: float = 0) -> None:
        """Read the pipe (events go to their pages)."""
        try:
            self.pipe.pump(timeout_s)
        except CDPFailure as exc:
            self.gone(exc)

    # --- events -------------------------------------------------------------------------------

    def on_event(self, message: dict[str, Any]) -> bool:
        """One CDP event, as it is read; ``False`` keeps it for a waiter (a load event)."""
        method = str(message["method"])
        if method in _CRASHES:
            self.gone(CDPCrashed(f"{method}: a page's renderer is gone"))
        page = self.pages.get(str(message.get("sessionId")))
        if page is None:
            return method not in _WAITED
        return page.on_event(method, message)

    def changed(self) -> None:
        """A page changed: the worker renders the mounted views, at most 10 times a second."""
        if self._render_due:
            return
        self._render_due = True
        delay = self._last_change_render + CHANGE_INTERVAL_S - time.monotonic()
        self.app.call_later(max(0.0, delay), self._change_rendered)

    def _change_rendered(self) -> None:
        # The worker renders the mounted views after every callback it runs: this one is it.
        self._render_due = False
        self._last_change_render = time.monotonic()

    def console_line(self, params: dict[str, Any]) -> None:
        second = int(time.monotonic())
        sent_second, sent = self._console
        sent = sent + 1 if sent_second == second else 1
        self._console = (second, sent)
        if sent > CONSOLE_LINES_PER_S:
            if not self._console_dropped:
                self.app.call_later(1.0, self._console_report)
            self._console_dropped += 1
            return
        args = params.get("args") or []
        text = " ".join(str(a.get("value", a.get("description", ""))) for a in args[:8])
        self.app.log(f"console.{params.get('type', 'log')}: {text[:1000]}")

    def _console_report(self) -> None:
        dropped, self._console_dropped = self._console_dropped, 0
        self.app.log(f"console: {dropped} line(s) dropped (over {CONSOLE_LINES_PER_S} a second)")

    # --- requests -----------------------------------------------------------------------------

    def serve(self, page: Page, params: dict[str, Any]) -> None:
        """Answer one paused request: from the app's own origin, or through the broker."""
        request_id = params.get("requestId")
        request = params.get("request") or {}
        url = str(request.get("url", ""))
        parts = urlsplit(url)
        try:
            if self.own is not None and parts.scheme == "https" and parts.netloc == self.own.host:
                status, headers, body = self.own(unquote(parts.path))
            elif parts.scheme in ("http", "https"):
                status, headers, body = self._brokered(request)
            else:
                page.fail_request(request_id, "AccessDenied")
                return
        except PermissionError as exc:
            self.app.log(f"the page's request to {url[:200]} was refused: {exc}")
            page.refused.append(f"{url[:200]}: {exc}")
            page.fail_request(request_id, "AccessDenied")
            return
        except TimeoutError:
            page.fail_request(request_id, "TimedOut")
            return
        except (ConnectionError, OSError, AotuiError):
            page.fail_request(request_id, "ConnectionFailed")
            return
        page.cdp(
            "Fetch.fulfillRequest",
            {
                "requestId": request_id,
                "responseCode": status,
                "responseHeaders": [{"name": k, "value": v} for k, v in headers.items()],
                "body": base64.b64encode(body).decode(),
            },
        )

    def _brokered(self, request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        """A request performed by the supervisor under the app's grants."""
        body = b""
        for entry in request.get("postDataEntries") or []:
            body += base64.b64decode(entry.get("bytes", ""))
        headers = {str(k): str(v) for k, v in (request.get("headers") or {}).items()}
        reply = self.app.http(str(request.get("method", "GET")), str(request["url"]), headers, body)
        kept = {k: v for k, v in reply.headers.items() if k.lower() not in _DROPPED_HEADERS}
        return reply.status, kept, reply.body

    # --- calls --------------------------------------------------------------------------------

    def cdp(
        self,
        method: str,
        params: dict[str, Any],
        session: str | None = None,
        timeout_s: float = OPERATION_TIMEOUT_S,
    ) -> dict[str, Any]:
        """One call; a page too busy to answer is ``E_TIMEOUT``, a gone browser ends the worker."""
        try:
            return self.pipe.call(method, params, session=session, timeout_s=timeout_s)
        except CDPTimeout:
            raise AotuiError(
                ErrorCode.E_TIMEOUT,
                f"the page did not answer {method} within {timeout_s:g} s: its scripts keep it "
                "busy. What was asked may have been delivered; pull to see the page",
            ) from None
        except (CDPClosed, CDPCrashed) as exc:
            self.gone(exc)

    def gone(self, exc: BaseException) -> NoReturn:
        """The browser or a renderer is gone: end the worker (the app restarts)."""
        self.app.log(f"the browser ended ({exc}); the app restarts from its acknowledged state")
        if self.browser is not None:
            self.browser.process.kill()
        raise BrowserGone(str(exc))


class Page:
    """One page target of a :class:`PageHost`, and its CDP session."""

    def __init__(self, host: PageHost, session: str, frame: str) -> None:
        self.host, self.session, self.frame = host, session, frame
        #: The runtime's execution context in the current document (``None``: being replaced).
        self.context: int | None = None
        #: The page's change state, ``(token, count)`` (see web_runtime.js).
        self.dom: tuple[str, int] = ("", 0)
        self.tools_version = 0
        self.tools = PageTools(host.pipe, session, log=host.app.log)
        #: The page's requests refused since the current operation began (CONTRACT §10: an
        #: operation that fails that way answers E_PERMISSION).
        self.refused: list[str] = []
        #: Requests of this page answered so far (a settle that saw one may not be the last).
        self.served = 0
        #: The JavaScript dialogs (alert, confirm, prompt, beforeunload) answered since the
        #: current operation began, as the agent reads them; at most :data:`MAX_DIALOGS`.
        self.dialogs: list[dict[str, str]] = []
        #: The answer armed for the next confirm or prompt: (accept, prompt text).
        self.next_answer: tuple[bool, str] | None = None

    def start(self) -> None:
        """Turn on what the runtime uses, in this target: part of loading it, so each step is
        bounded as a load is (a browser just started answers its first target's first commands
        late on a busy machine)."""
        for method, params in (
            ("Page.enable", {}),
            ("Runtime.enable", {}),
            ("Runtime.addBinding", {"name": _BINDING, "executionContextName": WORLD}),
            (
                "Page.addScriptToEvaluateOnNewDocument",
                {"source": asset("web_runtime.js"), "worldName": WORLD, "runImmediately": True},
            ),
            ("Fetch.enable", {"patterns": [{"urlPattern": "*", "requestStage": "Request"}]}),
        ):
            self.cdp(method, params, timeout_s=LOAD_TIMEOUT_S)
        self.tools.enable()

    def state(self) -> Any:
        """What the page shows changes only when this does."""
        return self.dom, self.tools_version

    def cdp(
        self, method: str, params: dict[str, Any], timeout_s: float = OPERATION_TIMEOUT_S
    ) -> dict[str, Any]:
        return self.host.cdp(method, params, self.session, timeout_s)

    def fail_request(self, request_id: Any, reason: str) -> None:
        self.cdp("Fetch.failRequest", {"requestId": request_id, "errorReason": reason})

    # --- events -------------------------------------------------------------------------------

    def on_event(self, method: str, message: dict[str, Any]) -> bool:
        """One CDP event of this page; ``False`` keeps it for a waiter (a load event)."""
        params = message.get("params") or {}
        if method == "Fetch.requestPaused":
            self.served += 1
            self.host.serve(self, params)
        elif method == "Page.javascriptDialogOpening":
            self.answer_dialog(params)
        elif method == "Runtime.bindingCalled" and params.get("name") == _BINDING:
            self.note_state(params.get("payload"))
        elif method.startswith("Runtime.executionContext"):
            self._track_context(method, params)
        elif method == "Runtime.consoleAPICalled":
            self.host.console_line(params)
        elif self.tools.on_event(message):
            self.tools_version += 1  # WebMCP tools came or went
            self.host.changed()
        return method not in _WAITED

    def _make_world(self) -> None:
        """The runtime's world, made now: a document the browser gave none (one reached back
        from an error page, seen under load) would otherwise never be read."""
        try:
            made = self.cdp("Page.createIsolatedWorld", {"frameId": self.frame, "worldName": WORLD})
            context = int(made["executionContextId"])
            self.cdp(
                "Runtime.evaluate",
                {"expression": asset("web_runtime.js"), "contextId": context},
            )
        except (CDPError, KeyError, ValueError):
            return  # the document is going away: the next one brings its own
        self.context = context

    def _track_context(self, method: str, params: dict[str, Any]) -> None:
        """Follow the runtime's isolated world from document to document."""
        if method == "Runtime.executionContextCreated":
            context = params.get("context") or {}
            aux = context.get("auxData") or {}
            if context.get("name") == WORLD and aux.get("frameId") == self.frame:
                self.context = int(context["id"])
        elif params.get("executionContextId") in (None, self.context):
            self.context = None  # destroyed, or every context cleared

    def note_state(self, state: Any) -> None:
        """Take the page's change state (``token:count``); a newer one schedules a render."""
        token, _, count = state.partition(":") if isinstance(state, str) else ("", "", "")
        if not (token.isalnum() and len(token) <= 16 and count.isdigit() and len(count) <= 15):
            return
        if token == self.dom[0] and int(count) <= self.dom[1]:
            return
        self.dom = (token, int(count))
        self.host.changed()

    # --- loading and waiting ------------------------------------------------------------------

    def navigate(self, url: str, timeout_s: float = LOAD_TIMEOUT_S, ready: str = LOADED) -> str:
        """Load ``url`` and wait for its ``ready`` event, :data:`LOADED` or :data:`PARSED` (a
        same-document navigation has none); the browser's error text, or ``""``."""
        self.forget_navigations()
        reply = self.cdp("Page.navigate", {"url": url}, timeout_s)
        if reply.get("errorText"):
            return str(reply["errorText"])
        if reply.get("loaderId"):  # a new document (its runtime's world replaces the old one's
            self.wait_load(timeout_s, url, ready)  # by Runtime events: see _track_context)
        return ""

    def answer_dialog(self, params: dict[str, Any]) -> None:
        """Answer a JavaScript dialog at once: while one is open the page runs nothing, and
        no call into it would ever answer. An alert is acknowledged and a ``beforeunload``
        accepted (the agent asked to leave); a confirm or prompt gets the answer armed for it
        (:attr:`next_answer`), else is dismissed: nothing a page asks is agreed to unasked."""
        kind = str(params.get("type", "alert"))
        armed = self.next_answer if kind in ("confirm", "prompt") else None
        if kind in ("alert", "beforeunload"):
            accept, text = True, ""
        elif armed is not None:
            accept, text = armed
            self.next_answer = None
        else:
            accept, text = False, ""
        reply: dict[str, Any] = {"accept": accept}
        if kind == "prompt" and accept:
            reply["promptText"] = text
        try:
            self.cdp("Page.handleJavaScriptDialog", reply)
        except (AotuiError, CDPError):
            return  # already closed (the page went away): nothing to tell
        answered = "ok" if kind == "alert" else "accepted" if accept else "dismissed"
        if kind == "prompt" and accept:
            answered += f" with {text!r}"
        if len(self.dialogs) < MAX_DIALOGS:
            message = sanitize(str(params.get("message", "")), limit=300)
            self.dialogs.append({"type": kind, "message": message, "answered": answered})

    def forget_navigations(self) -> None:
        """Drop load and same-document events already read (before starting a navigation):
        the only events the host keeps queued (:meth:`PageHost.on_event` takes the rest)."""
        for _event in self.host.pipe.events():
            pass

    def wait_navigation(self, timeout_s: float, what: str, ready: str = LOADED) -> bool:
        """Wait for a document's ``ready`` event or a same-document navigation; whether a new
        document came."""
        waited = (ready, "Page.navigatedWithinDocument")
        try:
            event = self.host.pipe.wait_any(waited, session=self.session, timeout_s=timeout_s)
        except CDPTimeout:
            raise AotuiError(
                ErrorCode.E_TIMEOUT, f"{what} did not finish loading in {timeout_s:g} s"
            ) from None
        except CDPFailure as exc:
            self.host.gone(exc)
        return bool(event["method"] == ready)

    def wait_load(self, timeout_s: float, what: str, ready: str = LOADED) -> None:
        try:
            self.host.pipe.wait_event(ready, session=self.session, timeout_s=timeout_s)
        except CDPTimeout:
            raise AotuiError(
                ErrorCode.E_TIMEOUT, f"{what} did not finish loading in {timeout_s:g} s"
            ) from None
        except CDPFailure as exc:
            self.host.gone(exc)

    def settle(self, what: str, quiet_ms: int, timeout_s: float = OPERATION_TIMEOUT_S) -> None:
        """Wait until the page has settled: :data:`ANSWERED_TURNS` task turns without a DOM
        change, and ``quiet_ms`` since the last one; ``E_TIMEOUT`` if it never does."""
        expression = (
            f"__aotuiWeb.settle({ANSWERED_TURNS}, {quiet_ms}, {int(timeout_s * 1000)})"
            ".then((ok) => [ok, __aotuiWeb.state()])"
        )
        ok, state = self.world(expression, await_promise=True, timeout_s=timeout_s + 2)
        self.note_state(state)
        if ok is not True:
            raise AotuiError(
                ErrorCode.E_TIMEOUT,
                f"the page never settled after {what}: its DOM kept changing for "
                f"{timeout_s:g} s. Pull to see the page",
            )

    # --- evaluating ---------------------------------------------------------------------------

    def evaluate(
        self, params: dict[str, Any], what: str, timeout_s: float = OPERATION_TIMEOUT_S
    ) -> Any:
        """``Runtime.evaluate``'s JSON value; an exception of the page is ``E_APP_ERROR``."""
        reply = self.cdp("Runtime.evaluate", {**params, "returnByValue": True}, timeout_s)
        details = reply.get("exceptionDetails")
        if details:
            exception = details.get("exception") or {}
            text = exception.get("description") or details.get("text") or "an exception"
            first = str(text).strip().splitlines() or ["an exception"]
            raise AotuiError(
                ErrorCode.E_APP_ERROR, f"the page failed {what}: {sanitize(first[0], limit=300)}"
            )
        return (reply.get("result") or {}).get("value")

    def world(
        self,
        expression: str,
        *,
        await_promise: bool = False,
        timeout_s: float = OPERATION_TIMEOUT_S,
    ) -> Any:
        """``expression``'s value in the runtime's isolated world of the current document."""
        deadline = time.monotonic() + timeout_s
        late = time.monotonic() + WORLD_LATE_S
        while True:
            while self.context is None:
                if time.monotonic() >= deadline:
                    raise AotuiError(
                        ErrorCode.E_TIMEOUT, "the page's document did not start in time"
                    )
                if time.monotonic() >= late:
                    self._make_world()
                    late = deadline
                    continue
                self.host.pump(0.05)
            params = {"expression": expression, "contextId": self.context}
            try:
                return self.evaluate(
                    {**params, "awaitPromise": await_promise}, "to be read", timeout_s
                )
            except AotuiError as exc:
                if "__aotuiWeb" not in exc.message or time.monotonic() >= deadline:
                    raise
                self.context = None  # a document whose runtime has not run yet
            except CDPError:
                self.context = None  # its document was replaced

    def main(
        self,
        function: str,
        *args: Any,
        await_promise: bool = False,
        timeout_s: float = OPERATION_TIMEOUT_S,
    ) -> Any:
        """``function(*args)`` in the page's main world (its listeners' world)."""
        expression = f"({function})(...{json.dumps(list(args))})"
        try:
            return self.evaluate(
                {"expression": expression, "awaitPromise": await_promise}, "an operation", timeout_s
            )
        except CDPError as exc:
            raise AotuiError(
                ErrorCode.E_APP_ERROR, f"the page could not be reached: {exc}"
            ) from None
