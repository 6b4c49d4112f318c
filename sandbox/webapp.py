"""Web apps: an app whose manifest ``entry`` is an ``.html`` page, run in a headless browser.

The worker builds a :class:`WebApp` instead of importing a module (``sandbox/worker.py``
``load_app``); everything it does for Python apps — the one renderer, acknowledgements, stored
data, signals, restarts — then applies unchanged. The browser (:mod:`sandbox.browser`) runs
inside the worker's own confinement and is driven over its debugging pipe (:mod:`sandbox.cdp`).

**Origin.** The page is loaded from ``https://<app>.aotui.invalid/<entry>``: an origin of the
app's own (its storage is its own), a secure context, and a name no resolver answers. Every
request the page makes is paused with CDP's ``Fetch`` domain before any socket exists: requests to
the app's origin are answered from the app directory (a file inside it, by extension's MIME
type, else 404); ``/.aotui/aotui.js`` is the helper of :file:`assets/aotui.js`; every other
``http``/``https`` request is performed by the supervisor's broker under the manifest's
``net:http`` grants (:meth:`App.http`), and a refused one fails in the page as
``net::ERR_ACCESS_DENIED``. Nothing else leaves: the worker's network namespace is empty.

**Views.** Each top-level element with a ``view`` attribute is a root view, keyed by its ``key``
attribute, else its ``view`` name. A view renders as its root's HTML read from the page by
:file:`assets/web_runtime.js` (in an isolated world the page's scripts cannot reach) with form
controls' current values written as attributes and what is not shown left out, then goes through
the same renderer as a Python app's template. A page with no ``view`` at all is read generically
(:mod:`sandbox.web_generic`). WebMCP tools of the page appear as operations of their view
(:mod:`sandbox.webmcp`).

**Operations.** An operation is ``CustomEvent('aotui:operation', {detail: {operation, args,
stable_keys, respond, fail, waitUntil}, bubbles: true})`` dispatched on the view's root. The
page answers with ``respond(result)`` or ``fail(message)`` (``E_APP_ERROR``), or a promise given
to ``waitUntil`` (its value, or its rejection); with none of them, by settling. Then the
operation waits for the page to settle (:data:`ANSWERED_TURNS` task turns without a DOM change
after an answer; :data:`QUIET_MS` more for a page that gave none), at most
:data:`OPERATION_TIMEOUT_S`, and only then are the views rendered and the ack sent: the agent
reads its own writes. A page that never settles gets ``E_TIMEOUT``.

**Changes.** The runtime counts DOM changes (and ``input``/``change`` events) and calls a
binding at most every 50 ms; the worker then renders the mounted views at most 10 times a second
and sends those that changed (a ``dom_mutation`` signal).

**Durability.** The page's data is ``aotui.serialize()`` (when the page defines it) and its
``localStorage``, stored after each acknowledged operation like a Python app's. After a restart
``localStorage`` is written back before the page's scripts run, then ``aotui.restore(data)``.

A browser or renderer that exits or crashes ends the worker (:class:`BrowserGone`): the
supervisor restarts the app with its acknowledged state, by its restart policy.
"""

from __future__ import annotations

import base64
import json
import mimetypes
import os
import re
import time
from importlib import resources
from typing import Any, NoReturn
from urllib.parse import unquote, urlsplit

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.structure import sanitize
from aotui.sandbox import browser
from aotui.sandbox.cdp import CDPClosed, CDPCrashed, CDPError, CDPFailure, CDPTimeout, Pipe
from aotui.sandbox.sdk import App, OperationCall, View
from aotui.sandbox.web_generic import QUIET_MS, GenericPage
from aotui.sandbox.webmcp import PageTools

__all__ = [
    "DOMAIN",
    "GENERIC_VIEW",
    "OPERATION_TIMEOUT_S",
    "BrowserGone",
    "WebApp",
    "WebView",
    "origin_of",
]

#: The domain under which every web app has its origin (``.invalid`` never resolves).
DOMAIN = "aotui.invalid"
#: The key of the one view of a page that marks none.
GENERIC_VIEW = "page"
#: The bound on one operation: the page's answer, then its settling (under the desktop's
#: default operation timeout of 5 s, so that the agent reads why).
OPERATION_TIMEOUT_S = 4.0
#: The bound on loading the page and its first settling.
LOAD_TIMEOUT_S = 20.0
#: Task turns without a DOM change that settle a page after it answered.
ANSWERED_TURNS = 2
#: The largest file of the app directory served to the page.
MAX_FILE_BYTES = 32 * 1024 * 1024
#: Console lines of the page sent to System Logs per second (the desktop budgets them again).
CONSOLE_LINES_PER_S = 10
#: The fewest seconds between two renders that a DOM change starts (the contract's 10 Hz).
CHANGE_INTERVAL_S = 0.1
_WORLD = "aotui-web"
_BINDING = "__aotuiSignal"
_HELPER_PATH = "/.aotui/aotui.js"
_BLANK_PATH = "/.aotui/blank"
_TYPES = {
    ".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css",
    ".html": "text/html", ".htm": "text/html", ".json": "application/json",
    ".svg": "image/svg+xml", ".wasm": "application/wasm", ".map": "application/json",
}  # fmt: skip
_DROPPED_HEADERS = {"content-encoding", "content-length", "transfer-encoding", "connection"}
_STATE = re.compile(r"([a-z0-9]{1,16}):([0-9]{1,15})")

# Runs in the page's main world (its listeners see the event); depends on nothing the page
# defines. Resolves with {status, result | message}.
_DISPATCH = """async (key, operation, args, stableKeys, timeoutMs) => {
  let root = null;
  for (const el of document.querySelectorAll("[view]")) {
    if ((el.getAttribute("key") || el.getAttribute("view")) === key) { root = el; break; }
  }
  if (root === null) return {status: "gone"};
  let answer = null;
  const waits = [];
  const detail = {
    operation, args, stable_keys: stableKeys,
    respond(result) { if (answer === null) answer = {status: "ok", result: result ?? null}; },
    fail(message) { if (answer === null) answer = {status: "error", message: String(message)}; },
    waitUntil(promise) { waits.push(Promise.resolve(promise)); },
  };
  const thrown = (e) => { detail.fail(e.error && e.error.message || e.message); };
  window.addEventListener("error", thrown);
  const event = new CustomEvent("aotui:operation", {detail, bubbles: true, cancelable: true});
  try { root.dispatchEvent(event); } finally { window.removeEventListener("error", thrown); }
  if (waits.length) {
    let timer;
    const late = new Promise((resolve) => { timer = setTimeout(resolve, timeoutMs, "late"); });
    try {
      const values = await Promise.race([Promise.all(waits), late]);
      if (values === "late" && answer === null) return {status: "late"};
      detail.respond(values[values.length - 1]);
    } catch (e) {
      detail.fail(e && e.message || String(e));
    } finally { clearTimeout(timer); }
  }
  if (answer !== null) {
    try { JSON.stringify(answer); } catch (e) {
      return {status: "error", message: "the result is not JSON: " + e.message};
    }
    return answer;
  }
  return {status: event.defaultPrevented ? "ok" : "none", result: null};
}"""
_SERIALIZE = """(() => {
  const a = window.aotui;
  const page = a && typeof a.serialize === "function" ? a.serialize() : null;
  const stored = {};
  for (let i = 0; i < localStorage.length; i++) {
    const k = localStorage.key(i);
    stored[k] = localStorage.getItem(k);
  }
  return JSON.stringify({page: page === undefined ? null : page, local_storage: stored});
})()"""
_LOAD_STORAGE = """(items) => {
  localStorage.clear();
  for (const [k, v] of Object.entries(items)) localStorage.setItem(k, v);
  return localStorage.length;
}"""
_RESTORE = """async (text) => {
  const a = window.aotui;
  if (!a || typeof a.restore !== "function") return false;
  await a.restore(JSON.parse(text));
  return true;
}"""


class BrowserGone(BaseException):
    """The page's browser or renderer is gone. Not an :class:`Exception`: nothing of the
    worker's catches it, so the worker ends and the supervisor restarts the app."""


def origin_of(app_id: str) -> str:
    """The app's own origin, ``https://app-3.aotui.invalid``."""
    label = re.sub(r"[^a-z0-9-]+", "-", app_id.lower()).strip("-")[:40] or "app"
    return f"https://{label}.{DOMAIN}"


def _asset(name: str) -> str:
    return resources.files("aotui.sandbox").joinpath(f"assets/{name}").read_text("utf-8")


class WebView(View["WebApp"]):
    """A view of a web app: a view root of its page, or the page read generically."""

    def inputs(self) -> Any:
        """The page's change count (and its tools'): nothing to render while they hold."""
        return self.app.page_state()

    def render(self) -> str:
        """The root's HTML as the page shows it now."""
        return self.app.view_html(self.key)

    def handle(self, call: OperationCall) -> Any:
        """Deliver the operation to the page; its answer once the page has settled."""
        return self.app.operate(self.key, call)


class _EveryOperation(dict[str, str]):
    """A web view handles whatever its markup declares (the supervisor checked that)."""

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str)


# After the class statement: View.__init_subclass__ sets handlers from the methods.
WebView.handlers = _EveryOperation()


class WebApp(App):
    """A page in a headless browser, served as an app."""

    def __init__(self, app_dir: str, entry: str, app_id: str) -> None:
        super().__init__()
        self.app_dir = os.path.realpath(app_dir)
        self.entry = entry
        self.origin = origin_of(app_id)
        self.host = urlsplit(self.origin).netloc
        self._restored: dict[str, Any] | None = None
        self._browser: browser.Browser | None = None
        self.session = ""
        self._frame = ""
        #: The runtime's execution context in the current document (``None``: being replaced).
        self._context: int | None = None
        #: The page's change state, ``token:count`` (see web_runtime.js), and the tools'.
        self._dom: tuple[str, int] = ("", 0)
        self._tools_version = 0
        self.tools: PageTools | None = None
        self.generic: GenericPage | None = None
        self._render_due = False
        self._last_change_render = 0.0
        self._console: tuple[int, int] = (0, 0)
        #: The page's requests refused since the current operation began (CONTRACT §10: an
        #: operation that fails that way answers E_PERMISSION).
        self._refused: list[str] = []
        #: Whether Chromium's own sandbox runs inside ours (``aotui status`` says it).
        self.chromium_sandbox = False

    # --- the page's life ----------------------------------------------------------------------

    @property
    def pipe(self) -> Pipe:
        if self._browser is None:
            raise RuntimeError("the page is not loaded yet")
        return self._browser.pipe

    def restore(self, data: Any) -> None:
        """Keep the stored data; :meth:`on_start` loads the page with it."""
        self._restored = data if isinstance(data, dict) else None

    def on_start(self) -> None:
        """Start the browser and load the page (with the restored data, if any)."""
        try:
            self._browser = browser.launch()
        except browser.BrowserError as exc:
            raise AotuiError(ErrorCode.E_APP_ERROR, str(exc)) from None
        self.chromium_sandbox = self._browser.chromium_sandbox
        mode = "on" if self.chromium_sandbox else f"off ({self._browser.sandbox_reason})"
        self.log(f"web app: {self.origin}/{self.entry}; Chromium's own sandbox {mode}")
        pipe = self.pipe
        target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        self.session, self._frame = str(attached["sessionId"]), str(target)
        pipe.hook = self._on_event
        for method, params in (
            ("Page.enable", {}),
            ("Runtime.enable", {}),
            ("Runtime.addBinding", {"name": _BINDING, "executionContextName": _WORLD}),
            (
                "Page.addScriptToEvaluateOnNewDocument",
                {"source": _asset("web_runtime.js"), "worldName": _WORLD, "runImmediately": True},
            ),
            ("Fetch.enable", {"patterns": [{"urlPattern": "*", "requestStage": "Request"}]}),
        ):
            self._cdp(method, params)
        self.tools = PageTools(pipe, self.session, log=self.log)
        self.tools.enable()
        restored = self._restored or {}
        storage = restored.get("local_storage")
        if isinstance(storage, dict) and storage:
            self._navigate(f"{self.origin}{_BLANK_PATH}")
            items = {str(k): str(v) for k, v in storage.items()}
            self._main(_LOAD_STORAGE, items)
        self._navigate(f"{self.origin}/{self.entry}")
        page = restored.get("page")
        if page is not None:
            self._main(_RESTORE, json.dumps(page), await_promise=True)
        self._settle("loading the page", QUIET_MS, LOAD_TIMEOUT_S)

    def _navigate(self, url: str) -> None:
        self._context = None
        reply = self._cdp("Page.navigate", {"url": url}, LOAD_TIMEOUT_S)
        if reply.get("errorText"):
            raise AotuiError(
                ErrorCode.E_APP_ERROR, f"the page {url} did not load: {reply['errorText']}"
            )
        try:
            self.pipe.wait_event(
                "Page.loadEventFired", session=self.session, timeout_s=LOAD_TIMEOUT_S
            )
        except CDPTimeout:
            raise AotuiError(
                ErrorCode.E_TIMEOUT,
                f"the page {url} did not finish loading in {LOAD_TIMEOUT_S:g} s",
            ) from None
        except CDPFailure as exc:
            self._gone(exc)

    def roots(self) -> list[View[Any]]:
        """The page's top-level view roots; one generic view for a page that marks none."""
        keys = self._world("__aotuiWeb.roots()")
        if not keys:
            self.generic = GenericPage(
                self.pipe, self.session, settle_timeout_s=OPERATION_TIMEOUT_S
            )
            return [WebView(GENERIC_VIEW)]
        return [WebView(str(key)) for key in dict.fromkeys(keys)]

    def resolve_view(self, key: str) -> View[Any] | None:
        """A view the page has (e.g. the target of a ``view-link``)."""
        if self.generic is None and self._world(f"__aotuiWeb.root({json.dumps(key)}) !== null"):
            return WebView(key)
        return None

    def _aotui_watch(self) -> tuple[int, Any] | None:
        """The pipe's descriptor for the worker's loop, and what to call when it is readable."""
        if self._browser is None:
            return None
        return self.pipe.receive_fd, self._pump

    def _pump(self) -> None:
        try:
            self.pipe.pump(0)
        except CDPFailure as exc:
            self._gone(exc)

    # --- reading ------------------------------------------------------------------------------

    def page_state(self) -> Any:
        """What the views show changes only when this does."""
        return self._dom, self._tools_version

    def view_html(self, key: str) -> str:
        """View ``key`` as marked HTML for the one renderer."""
        tools = self.tools
        if self.generic is not None:
            extra = str(tools.operations_html(None)) if tools is not None else ""
            return self.generic.render(extra)
        found = self._world(f"__aotuiWeb.html({json.dumps(key)})")
        if not isinstance(found, str):
            raise AotuiError(ErrorCode.E_NOT_FOUND, f"the page no longer has view {key!r}")
        return tools.decorate(found, key) if tools is not None else found

    # --- acting -------------------------------------------------------------------------------

    def operate(self, key: str, call: OperationCall) -> Any:
        """Run one operation of view ``key`` and wait for the page to settle."""
        op = call.operation
        if self.tools is not None and self.tools.offers(None if self.generic else key, op):
            result = self.tools.invoke(op, call.args, timeout_s=OPERATION_TIMEOUT_S)
            self._settle(op, 0, OPERATION_TIMEOUT_S)
            return result
        if self.generic is not None:
            result = self.generic.handle(call)  # it waits for the page to settle itself
            self._note_state(self._world("__aotuiWeb.state()"))
            return result
        self._refused.clear()
        # A reference reaches the page as the item it named: its key and its data-value.
        args = dict(call.args)
        for name, stable in call.stable_keys.items():
            args[name] = {"key": str(stable), "value": args.get(name)}
        answer = self._main(
            _DISPATCH,
            key,
            op,
            args,
            dict(call.stable_keys),
            int(OPERATION_TIMEOUT_S * 1000),
            await_promise=True,
            timeout_s=OPERATION_TIMEOUT_S + 2,
        )
        status = answer.get("status") if isinstance(answer, dict) else None
        if status == "gone":
            raise AotuiError(
                ErrorCode.E_STALE_STATE, f"view {key!r} is no longer in the page; pull again"
            )
        if status == "late":
            raise AotuiError(
                ErrorCode.E_TIMEOUT,
                f"the page's handler of {op} did not answer within {OPERATION_TIMEOUT_S:g} s; "
                "it may still take effect: pull to see the page",
            )
        self._settle(op, 0 if status in ("ok", "error") else QUIET_MS, OPERATION_TIMEOUT_S)
        if status == "error":
            message = sanitize(str(answer.get("message") or "no reason given"), limit=300)
            if self._refused:
                refused = sanitize(self._refused[0], limit=300)
                raise AotuiError(
                    ErrorCode.E_PERMISSION,
                    f"{op} failed ({message}): the page's request to {refused}",
                )
            raise AotuiError(ErrorCode.E_APP_ERROR, f"the page refused {op}: {message}")
        return answer.get("result") if isinstance(answer, dict) else None

    def _settle(self, what: str, quiet_ms: int, timeout_s: float) -> None:
        """Wait for the page to settle (see the module's docstring); ``E_TIMEOUT`` if never."""
        expression = (
            f"__aotuiWeb.settle({ANSWERED_TURNS}, {quiet_ms}, {int(timeout_s * 1000)})"
            ".then((ok) => [ok, __aotuiWeb.state()])"
        )
        ok, state = self._world(expression, await_promise=True, timeout_s=timeout_s + 2)
        self._note_state(state)
        if ok is not True:
            raise AotuiError(
                ErrorCode.E_TIMEOUT,
                f"the page never settled after {what}: its DOM kept changing for "
                f"{timeout_s:g} s. Pull to see the page",
            )

    # --- stored data --------------------------------------------------------------------------

    def serialize(self) -> Any:
        """The page's ``aotui.serialize()`` and its ``localStorage``."""
        if self._browser is None:
            return self._restored
        text = self._main_expression(_SERIALIZE)
        return json.loads(text) if isinstance(text, str) else None

    # --- events -------------------------------------------------------------------------------

    def _on_event(self, message: dict[str, Any]) -> bool:
        """One CDP event, as it is read (see :attr:`sandbox.cdp.Pipe.hook`); ``False`` keeps
        it for a waiter (a load event)."""
        method = str(message["method"])
        if method in ("Inspector.targetCrashed", "Target.targetCrashed", "Inspector.detached"):
            self._gone(CDPCrashed(f"{method}: the page's renderer is gone"))
        if message.get("sessionId") != self.session:
            return False
        params = message.get("params") or {}
        if method == "Fetch.requestPaused":
            self._serve(params)
        elif method == "Runtime.bindingCalled" and params.get("name") == _BINDING:
            self._note_state(params.get("payload"))
        elif method.startswith("Runtime.executionContext"):
            self._track_context(method, params)
        elif method == "Runtime.consoleAPICalled":
            self._console_line(params)
        elif self.tools is not None and self.tools.on_event(message):
            self._tools_version += 1  # WebMCP tools came or went
            self._changed()
        return method != "Page.loadEventFired"

    def _track_context(self, method: str, params: dict[str, Any]) -> None:
        """Follow the runtime's isolated world from document to document."""
        if method == "Runtime.executionContextCreated":
            context = params.get("context") or {}
            aux = context.get("auxData") or {}
            if context.get("name") == _WORLD and aux.get("frameId") == self._frame:
                self._context = int(context["id"])
        elif params.get("executionContextId") in (None, self._context):
            self._context = None  # destroyed, or every context cleared

    def _note_state(self, state: Any) -> None:
        """Take the page's change state; a newer one schedules a render."""
        match = _STATE.fullmatch(state) if isinstance(state, str) else None
        if match is None:
            return
        token, count = match.group(1), int(match.group(2))
        if token == self._dom[0] and count <= self._dom[1]:
            return
        self._dom = (token, count)
        self._changed()

    def _changed(self) -> None:
        if self._render_due:
            return
        self._render_due = True
        delay = self._last_change_render + CHANGE_INTERVAL_S - time.monotonic()
        self.call_later(max(0.0, delay), self._change_rendered)

    def _change_rendered(self) -> None:
        # The worker renders the mounted views after every callback it runs: this one is it.
        self._render_due = False
        self._last_change_render = time.monotonic()

    def _console_line(self, params: dict[str, Any]) -> None:
        second = int(time.monotonic())
        sent_second, sent = self._console
        sent = sent + 1 if sent_second == second else 1
        self._console = (second, sent)
        if sent > CONSOLE_LINES_PER_S:
            return
        args = params.get("args") or []
        text = " ".join(str(a.get("value", a.get("description", ""))) for a in args[:8])
        self.log(f"console.{params.get('type', 'log')}: {text[:1000]}")

    def _serve(self, params: dict[str, Any]) -> None:
        """Answer one paused request: from the app directory, or through the broker."""
        request_id = params.get("requestId")
        request = params.get("request") or {}
        url = str(request.get("url", ""))
        parts = urlsplit(url)
        try:
            if parts.scheme == "https" and parts.netloc == self.host:
                status, headers, body = self._own(unquote(parts.path))
            elif parts.scheme in ("http", "https"):
                status, headers, body = self._brokered(request)
            else:
                self._fail(request_id, "AccessDenied")
                return
        except PermissionError as exc:
            self.log(f"the page's request to {url[:200]} was refused: {exc}")
            self._refused.append(f"{url[:200]}: {exc}")
            self._fail(request_id, "AccessDenied")
            return
        except TimeoutError:
            self._fail(request_id, "TimedOut")
            return
        except (ConnectionError, OSError, AotuiError):
            self._fail(request_id, "ConnectionFailed")
            return
        self._cdp(
            "Fetch.fulfillRequest",
            {
                "requestId": request_id,
                "responseCode": status,
                "responseHeaders": [{"name": k, "value": v} for k, v in headers.items()],
                "body": base64.b64encode(body).decode(),
            },
        )

    def _own(self, path: str) -> tuple[int, dict[str, str], bytes]:
        """A file of the app directory (or the runtime's own), by its path on the origin."""
        plain = {"Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-store"}
        if path == _HELPER_PATH:
            return 200, {**plain, "Content-Type": "text/javascript"}, _asset("aotui.js").encode()
        if path == _BLANK_PATH:
            return 200, {**plain, "Content-Type": "text/html"}, b"<!doctype html><title></title>"
        name = os.path.realpath(os.path.join(self.app_dir, path.lstrip("/")))
        inside = name.startswith(self.app_dir + os.sep)
        if not inside or path.startswith("/.aotui/") or not os.path.isfile(name):
            return 404, plain, f"not found: {path[:200]}".encode()
        with open(name, "rb") as file:
            body = file.read(MAX_FILE_BYTES + 1)
        if len(body) > MAX_FILE_BYTES:
            return 413, plain, b"file too large to serve"
        kind = _TYPES.get(os.path.splitext(name)[1].lower()) or (
            mimetypes.guess_type(name)[0] or "application/octet-stream"
        )
        return 200, {"Content-Type": kind, "Cache-Control": "no-store"}, body

    def _brokered(self, request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        """A request to anywhere else, performed by the supervisor under the app's grants."""
        body = b""
        for entry in request.get("postDataEntries") or []:
            body += base64.b64decode(entry.get("bytes", ""))
        headers = {str(k): str(v) for k, v in (request.get("headers") or {}).items()}
        reply = self.http(str(request.get("method", "GET")), str(request["url"]), headers, body)
        kept = {k: v for k, v in reply.headers.items() if k.lower() not in _DROPPED_HEADERS}
        return reply.status, kept, reply.body

    def _fail(self, request_id: Any, reason: str) -> None:
        self._cdp("Fetch.failRequest", {"requestId": request_id, "errorReason": reason})

    # --- talking to the page ------------------------------------------------------------------

    def _cdp(
        self, method: str, params: dict[str, Any], timeout_s: float = OPERATION_TIMEOUT_S
    ) -> dict[str, Any]:
        try:
            return self.pipe.call(method, params, session=self.session or None, timeout_s=timeout_s)
        except CDPTimeout:
            raise AotuiError(
                ErrorCode.E_TIMEOUT,
                f"the page did not answer {method} within {timeout_s:g} s: its scripts keep it "
                "busy. What was asked may have been delivered; pull to see the page",
            ) from None
        except (CDPClosed, CDPCrashed) as exc:
            self._gone(exc)

    def _gone(self, exc: BaseException) -> NoReturn:
        self.log(f"the page's browser ended ({exc}); the app restarts from its acknowledged state")
        if self._browser is not None:
            self._browser.process.kill()
        raise BrowserGone(str(exc))

    def _evaluate(
        self, params: dict[str, Any], what: str, timeout_s: float = OPERATION_TIMEOUT_S
    ) -> Any:
        params = {**params, "returnByValue": True}
        reply = self._cdp("Runtime.evaluate", params, timeout_s)
        details = reply.get("exceptionDetails")
        if details:
            exception = details.get("exception") or {}
            text = exception.get("description") or details.get("text") or "an exception"
            first = str(text).strip().splitlines() or ["an exception"]
            raise AotuiError(
                ErrorCode.E_APP_ERROR, f"the page failed {what}: {sanitize(first[0], limit=300)}"
            )
        return (reply.get("result") or {}).get("value")

    def _world(
        self,
        expression: str,
        *,
        await_promise: bool = False,
        timeout_s: float = OPERATION_TIMEOUT_S,
    ) -> Any:
        """``expression``'s value in the runtime's isolated world of the current document."""
        deadline = time.monotonic() + timeout_s
        while True:
            while self._context is None:
                if time.monotonic() >= deadline:
                    raise AotuiError(
                        ErrorCode.E_TIMEOUT, "the page's document did not start in time"
                    )
                self._pump_for(0.05)
            params = {"expression": expression, "contextId": self._context}
            try:
                return self._evaluate(
                    {**params, "awaitPromise": await_promise}, "to be read", timeout_s
                )
            except AotuiError as exc:
                if "__aotuiWeb" not in exc.message or time.monotonic() >= deadline:
                    raise
                self._context = None  # a document whose runtime has not run yet
            except CDPError:
                self._context = None  # its document was replaced

    def _pump_for(self, timeout_s: float) -> None:
        try:
            self.pipe.pump(timeout_s)
        except CDPFailure as exc:
            self._gone(exc)

    def _main(
        self,
        function: str,
        *args: Any,
        await_promise: bool = False,
        timeout_s: float = OPERATION_TIMEOUT_S,
    ) -> Any:
        """``function(*args)`` in the page's main world (its listeners' world)."""
        expression = f"({function})(...{json.dumps(list(args))})"
        try:
            return self._evaluate(
                {"expression": expression, "awaitPromise": await_promise}, "an operation", timeout_s
            )
        except CDPError as exc:
            raise AotuiError(
                ErrorCode.E_APP_ERROR, f"the page could not be reached: {exc}"
            ) from None

    def _main_expression(self, expression: str) -> Any:
        return self._evaluate({"expression": expression}, "to serialize its data")
