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

import json
import mimetypes
import os
import re
from typing import Any
from urllib.parse import urlsplit

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.structure import sanitize
from aotui.sandbox.sdk import App, OperationCall, View
from aotui.sandbox.web_generic import QUIET_MS, GenericPage
from aotui.sandbox.web_page import (
    LOAD_TIMEOUT_S,
    OPERATION_TIMEOUT_S,
    BrowserGone,
    Page,
    PageHost,
    asset,
)

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
#: The largest file of the app directory served to the page.
MAX_FILE_BYTES = 32 * 1024 * 1024
_HELPER_PATH = "/.aotui/aotui.js"
_BLANK_PATH = "/.aotui/blank"
_TYPES = {
    ".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css",
    ".html": "text/html", ".htm": "text/html", ".json": "application/json",
    ".svg": "image/svg+xml", ".wasm": "application/wasm", ".map": "application/json",
}  # fmt: skip

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
_SERIALIZE = """(async () => {
  const a = window.aotui;
  const page = a && typeof a.serialize === "function" ? await a.serialize() : null;
  const stored = {};
  for (let i = 0; i < localStorage.length; i++) {
    const k = localStorage.key(i);
    stored[k] = localStorage.getItem(k);
  }
  const done = (request) => new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
  const databases = [];
  for (const info of await indexedDB.databases()) {
    const db = await done(indexedDB.open(info.name));
    const stores = [];
    for (const name of db.objectStoreNames) {
      const store = db.transaction(name).objectStore(name);
      const [keys, values] = await Promise.all([done(store.getAllKeys()), done(store.getAll())]);
      const indexes = [...store.indexNames].map((n) => {
        const index = store.index(n);
        return {name: n, keyPath: index.keyPath, unique: index.unique,
          multiEntry: index.multiEntry};
      });
      stores.push({name, keyPath: store.keyPath, autoIncrement: store.autoIncrement, indexes,
        records: keys.map((key, i) => [key, values[i]])});
    }
    databases.push({name: db.name, version: db.version, stores});
    db.close();
  }
  return JSON.stringify({page: page === undefined ? null : page, local_storage: stored,
    indexed_db: databases});
})()"""
_LOAD_STORAGE = """async (items, databases) => {
  localStorage.clear();
  for (const [k, v] of Object.entries(items)) localStorage.setItem(k, v);
  const done = (request) => new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
    request.onblocked = () => reject(new Error("blocked"));
  });
  for (const info of await indexedDB.databases()) await done(indexedDB.deleteDatabase(info.name));
  for (const saved of databases) {
    const opening = indexedDB.open(saved.name, saved.version);
    opening.onupgradeneeded = () => {
      for (const s of saved.stores) {
        const store = opening.result.createObjectStore(s.name,
          {keyPath: s.keyPath, autoIncrement: s.autoIncrement});
        for (const i of s.indexes) {
          store.createIndex(i.name, i.keyPath, {unique: i.unique, multiEntry: i.multiEntry});
        }
      }
    };
    const db = await done(opening);
    for (const s of saved.stores) {
      if (!s.records.length) continue;
      const tx = db.transaction(s.name, "readwrite");
      const store = tx.objectStore(s.name);
      for (const [key, value] of s.records) {
        if (s.keyPath === null) store.put(value, key); else store.put(value);
      }
      await new Promise((resolve, reject) => {
        tx.oncomplete = resolve;
        tx.onerror = () => reject(tx.error);
      });
    }
    db.close();
  }
  return localStorage.length;
}"""
_RESTORE = """async (text) => {
  const a = window.aotui;
  if (!a || typeof a.restore !== "function") return false;
  await a.restore(JSON.parse(text));
  return true;
}"""


def origin_of(app_id: str) -> str:
    """The app's own origin, ``https://app-3.aotui.invalid``."""
    label = re.sub(r"[^a-z0-9-]+", "-", app_id.lower()).strip("-")[:40] or "app"
    return f"https://{label}.{DOMAIN}"


class WebView(View["WebApp"]):
    """A view of a web app: a view root of its page, or the page read generically."""

    def inputs(self) -> Any:
        """The page's change count (and its tools'): nothing to render while they hold."""
        return self.app.page.state()

    def render(self) -> str:
        """The root's HTML as the page shows it now."""
        return self.app.view_html(self.key)

    def handle(self, call: OperationCall) -> Any:
        """Deliver the operation to the page; its answer once the page has settled."""
        return self.app.operate(self.key, call)


class EveryOperation(dict[str, str]):
    """A web view handles whatever its markup declares (the supervisor checked that)."""

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str)


# After the class statement: View.__init_subclass__ sets handlers from the methods.
WebView.handlers = EveryOperation()


class AppFiles:
    """The app directory, served on the app's own origin."""

    def __init__(self, app_dir: str, origin: str) -> None:
        self.app_dir = os.path.realpath(app_dir)
        self.host = urlsplit(origin).netloc

    def __call__(self, path: str) -> tuple[int, dict[str, str], bytes]:
        """A file of the app directory (or the runtime's own), by its path on the origin."""
        plain = {"Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-store"}
        if path == _HELPER_PATH:
            return 200, {**plain, "Content-Type": "text/javascript"}, asset("aotui.js").encode()
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


class WebApp(App):
    """A page in a headless browser, served as an app."""

    def __init__(self, app_dir: str, entry: str, app_id: str) -> None:
        super().__init__()
        self.entry = entry
        self.origin = origin_of(app_id)
        self.host = PageHost(self, AppFiles(app_dir, self.origin))
        self._restored: dict[str, Any] | None = None
        self._page: Page | None = None
        self.generic: GenericPage | None = None

    @property
    def page(self) -> Page:
        if self._page is None:
            raise RuntimeError("the page is not loaded yet")
        return self._page

    @property
    def chromium_sandbox(self) -> bool:
        """Whether Chromium's own sandbox runs inside ours (``aotui status`` says it)."""
        return self.host.chromium_sandbox

    # --- the page's life ----------------------------------------------------------------------

    def restore(self, data: Any) -> None:
        """Keep the stored data; :meth:`on_start` loads the page with it."""
        self._restored = data if isinstance(data, dict) else None

    def on_start(self) -> None:
        """Start the browser and load the page (with the restored data, if any)."""
        self.host.launch()
        mode = self.host.sandbox_line()
        self.log(f"web app: {self.origin}/{self.entry}; Chromium's own sandbox {mode}")
        page = self._page = self.host.open_page()
        restored = self._restored or {}
        storage = restored.get("local_storage")
        storage = storage if isinstance(storage, dict) else {}
        databases = restored.get("indexed_db")
        databases = databases if isinstance(databases, list) else []
        if storage or databases:
            # Written on a blank page of the app's origin, before the app's own scripts run.
            self._load(f"{self.origin}{_BLANK_PATH}")
            items = {str(k): str(v) for k, v in storage.items()}
            page.main(_LOAD_STORAGE, items, databases, await_promise=True, timeout_s=LOAD_TIMEOUT_S)
        self._load(f"{self.origin}/{self.entry}")
        data = restored.get("page")
        if data is not None:
            page.main(_RESTORE, json.dumps(data), await_promise=True)
        page.settle("loading the page", QUIET_MS, LOAD_TIMEOUT_S)

    def _load(self, url: str) -> None:
        error = self.page.navigate(url)
        if error:
            raise AotuiError(ErrorCode.E_APP_ERROR, f"the page {url} did not load: {error}")

    def roots(self) -> list[View[Any]]:
        """The page's top-level view roots; one generic view for a page that marks none."""
        keys = self.page.world("__aotuiWeb.roots()")
        if not keys:
            self.generic = GenericPage(
                self.host.pipe, self.page.session, settle_timeout_s=OPERATION_TIMEOUT_S
            )
            return [WebView(GENERIC_VIEW)]
        return [WebView(str(key)) for key in dict.fromkeys(keys)]

    def resolve_view(self, key: str) -> View[Any] | None:
        """A view the page has (e.g. the target of a ``view-link``)."""
        if self.generic is None and self.page.world(f"__aotuiWeb.root({json.dumps(key)}) !== null"):
            return WebView(key)
        return None

    def _aotui_watch(self) -> Any:
        """The pipe's descriptor for the worker's loop, and what to call when it is readable."""
        return self.host.watch()

    # --- reading ------------------------------------------------------------------------------

    def view_html(self, key: str) -> str:
        """View ``key`` as marked HTML for the one renderer."""
        tools = self.page.tools
        if self.generic is not None:
            return self.generic.render(str(tools.operations_html(None)))
        found = self.page.world(f"__aotuiWeb.html({json.dumps(key)})")
        if not isinstance(found, str):
            raise AotuiError(ErrorCode.E_NOT_FOUND, f"the page no longer has view {key!r}")
        return tools.decorate(found, key)

    # --- acting -------------------------------------------------------------------------------

    def operate(self, key: str, call: OperationCall) -> Any:
        """Run one operation of view ``key`` and wait for the page to settle."""
        op, page = call.operation, self.page
        if page.tools.offers(None if self.generic else key, op):
            result = page.tools.invoke(op, call.args, timeout_s=OPERATION_TIMEOUT_S)
            page.settle(op, 0)
            return result
        if self.generic is not None:
            result = self.generic.handle(call)  # it waits for the page to settle itself
            page.note_state(page.world("__aotuiWeb.state()"))
            return result
        return dispatch(page, key, call)

    # --- stored data --------------------------------------------------------------------------

    def serialize(self) -> Any:
        """The page's ``aotui.serialize()`` and its ``localStorage``."""
        if self._page is None:
            return self._restored
        text = self.page.evaluate(
            {"expression": _SERIALIZE, "awaitPromise": True}, "to serialize its data"
        )
        return json.loads(text) if isinstance(text, str) else None


def dispatch(page: Page, key: str, call: OperationCall) -> Any:
    """Deliver an operation of the marked view root ``key`` to the page (CONTRACT §10: the
    ``aotui:operation`` event) and wait for its answer and the page to settle."""
    op = call.operation
    page.refused.clear()
    # A reference reaches the page as the item it named: its key and its data-value.
    args = dict(call.args)
    for name, stable in call.stable_keys.items():
        args[name] = {"key": str(stable), "value": args.get(name)}
    answer = page.main(
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
    page.settle(op, 0 if status in ("ok", "error") else QUIET_MS)
    if status == "error":
        message = sanitize(str(answer.get("message") or "no reason given"), limit=300)
        if page.refused:
            refused = sanitize(page.refused[0], limit=300)
            raise AotuiError(
                ErrorCode.E_PERMISSION,
                f"{op} failed ({message}): the page's request to {refused}",
            )
        raise AotuiError(ErrorCode.E_APP_ERROR, f"the page refused {op}: {message}")
    return answer.get("result") if isinstance(answer, dict) else None
