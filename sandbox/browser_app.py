"""The Browser app's runtime: the web itself, as views an agent reads and commands it writes.

``apps/browser`` (``com.aotui.browser``) is a Python app whose manifest says ``"browser": true``:
its worker gets a web app's confinement (:mod:`sandbox.browser`) and runs one headless Chromium,
whose pages are its tabs. Every request a page makes is paused and performed by the supervisor's
broker under the manifest's ``net:http`` grants — the allow-list — so a navigation outside them is
``E_PERMISSION`` naming the request and the grant that would allow it (:mod:`sandbox.web_page`).

Views: ``Tabs`` (the open tabs, each a link to its view, and ``new_tab``) and one view per tab
(key ``tab:N``), the page read generically (:mod:`sandbox.web_generic`: visible structure as
Markdown, a ref on everything an agent can act on) with its URL on top, its WebMCP tools, and the
tab's operations: ``navigate``, ``back``, ``forward``, ``reload``, ``click``, ``type``,
``select``, ``check``, ``press``, ``scroll``, ``hover``, ``wait_for``, ``find``, ``set_viewport``,
``new_tab`` and ``close_tab``. Each answers once the page has settled, with what changed (URL,
title), never a whole page. The open tabs and their URLs are the app's stored data: after a
restart the same tabs open at the same URLs.
"""

from __future__ import annotations

import html
import json
import re
import time
from typing import Any
from urllib.parse import urlsplit

from markupsafe import Markup

from aotui.protocol.api import AWI_VERSION
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.structure import sanitize
from aotui.sandbox.assist_policy import CATALOG_SCRIPT, action_of, origin_of, parse_catalog
from aotui.sandbox.cdp import CDPError
from aotui.sandbox.render import render_view
from aotui.sandbox.sdk import App, ConfirmationRequired, OperationCall, View, operation
from aotui.sandbox.web_generic import (
    INPUT_QUIET_MS,
    OPERATIONS,
    QUIET_MS,
    GenericOperation,
    GenericPage,
)
from aotui.sandbox.web_page import LOAD_TIMEOUT_S, OPERATION_TIMEOUT_S, PARSED, Page, PageHost
from aotui.sandbox.webapp import EveryOperation, dispatch

__all__ = ["AWI_METHODS", "MAX_TABS", "TAB_OPERATIONS", "BrowserApp", "TabView", "TabsView"]

#: Tabs open at once; a ``new_tab`` past it is refused.
MAX_TABS = 8
#: The longest wait ``wait_for`` takes (under the desktop's operation timeout).
MAX_WAIT_MS = 3500
#: The HTML a tab's page is read as before the parts far from its viewport fold to their
#: headings (about 4,000 tokens of Markdown).
PAGE_BUDGET = 16_000
#: Lines ``find`` answers with, at most.
MAX_FOUND = 20
#: The operations of a tab besides the generic ones, as (args, description).
TAB_OPERATIONS: dict[str, tuple[dict[str, str], str]] = {
    "navigate": (
        {"url?": "string", "route?": "string"},
        "Open a URL (http or https), or go to a route of an agent-aware page",
    ),
    "back": ({}, "Go back in this tab's history"),
    "forward": ({}, "Go forward in this tab's history"),
    "reload": ({}, "Load this page again"),
    "wait_for": (
        {
            "text?": "string",
            "gone?": "string",
            "target?": "control",
            "modal?": "string",
            "visible?": "boolean",
            "navigation?": "boolean",
            "network_idle?": "boolean",
            "timeout_ms?": "integer",
        },
        f"Wait until a text shows (--text) or is gone (--gone), a ref or modal is (not) "
        f"--visible, a --navigation, or --network_idle; at most {MAX_WAIT_MS} ms",
    ),
    "find": (
        {"text?": "string", "role?": "string"},
        "The lines of this page with a text, or with a control of a role (button, link, "
        "textbox, checkbox…), and their refs",
    ),
    "set_viewport": ({"width": "integer", "height": "integer"}, "Resize the page, in CSS px"),
    "focus": ({"field?": "string", "modal?": "string"}, "Focus a field, or a modal's first field"),
    "modal_open": ({"modal": "string"}, "Open a modal of an agent-aware page"),
    "modal_close": ({"modal?": "string"}, "Close the active modal (or the one named)"),
    "capabilities": ({}, "The routes, views, panels, modals and fields this page declares"),
    "dialog": (
        {"accept": "boolean", "text?": "string"},
        "Answer the page's next confirm or prompt (--text for a prompt); unarmed, they are "
        "dismissed and the answer says so",
    ),
    "new_tab": ({"url?": "string"}, "Open a new tab (at a URL, else empty)"),
    "close_tab": ({}, "Close this tab"),
}
_REF = re.compile(r"\(control:(page\[[0-9]+\])\)")
#: AWI-TTY's methods (seed 002), on the active tab; the desktop sends them as the app's event.
AWI_METHODS = (
    "navigate", "send_key", "scroll", "snapshot", "get_title", "get_url", "get_nav_state",
    "set_viewport", "get_capabilities", "type_text", "wait_for_frame_quiescence",
    "wait_for_title_contains",
)  # fmt: skip
#: The AWI-TTY methods that may change what the tab shows (the others only read it).
_AWI_MOVES = frozenset({"navigate", "send_key", "scroll", "set_viewport", "type_text"})
#: The AWI-TTY methods a page's catalog policy governs, as the Browser operations they are.
_AWI_ACTIONS = {
    "navigate": "navigate", "send_key": "press", "scroll": "scroll", "type_text": "type",
}  # fmt: skip
#: Between a tab's key and the hex of a view root's key of its page: ``tab:1@496e626f78``
#: (a view key is letters, digits and ``_ . : @ -``; a page's root key may be any text).
MARK = "@"
#: The longest root key a tab lists, in UTF-8 bytes.
MAX_MARK_KEY = 100
#: The marked views a tab lists (a page may mark any number).
MAX_MARKED = 32
#: How long a refused navigation's error page may take to commit (then it is left).
ERROR_PAGE_S = 2.0
#: wait_for --network_idle: no request of the page answered for this long.
NETWORK_IDLE_MS = 500
#: A terminal cell of the text snapshot, in CSS px: 140 × 45 cells are a 1120 × 720 viewport.
CELL_PX = (8, 16)
#: seed 002's key names → ours (``Char`` is the ``char`` given).
_AWI_KEYS = {"Tab": "Tab", "Enter": "Enter", "Up": "ArrowUp", "Down": "ArrowDown",
             "Left": "ArrowLeft", "Right": "ArrowRight", "Space": " ", "Escape": "Escape",
             "Backspace": "Backspace"}  # fmt: skip
#: The generic operations, as a tab declares them: click and type also take a field of an
#: agent-aware page (seed 004) instead of a ref.
TAB_GENERIC = {
    **OPERATIONS,
    "click": GenericOperation({"target?": "control", "field?": "string"}, "A ref, or --field"),
    "type": GenericOperation(
        {"target?": "control", "field?": "string", "text": "string", "submit?": "boolean"},
        "Replace the text (a ref, or --field); --submit presses Enter",
    ),
}
#: Sent to an agent-aware page as ``CustomEvent("assist:command", {detail: {cmd, params}})`` on
#: ``window``; the page's router or modal code acts on it.
_COMMAND = """(cmd, params) => {
  window.dispatchEvent(new CustomEvent("assist:command", {detail: {cmd, params}}));
  return true;
}"""
_WAIT = """new Promise((resolve) => {
  const [text, want, until] = %s;
  const end = performance.now() + until;
  const tick = () => {
    const has = (document.body ? document.body.innerText : "").includes(text);
    if (has === want) resolve(true);
    else if (performance.now() >= end) resolve(false);
    else setTimeout(tick, 25);
  };
  tick();
})"""


def _buttons(operations: dict[str, tuple[dict[str, str], str]]) -> str:
    return "".join(
        f'<button operation="{op}"'
        + (f' args="{html.escape(json.dumps(args))}"' if args else "")
        + f' description="{html.escape(text)}">{op}</button>'
        for op, (args, text) in operations.items()
    )


class TabsView(View["BrowserApp"]):
    """The open tabs, each a link to its view."""

    def inputs(self) -> Any:
        return tuple((key, tab.url, tab.title) for key, tab in self.app.tabs.items())

    def render(self) -> str:
        items = Markup("").join(
            Markup('<li key="{}">{} {}</li>').format(
                key, self.link(key, tab.title or tab.url or "New tab"), tab.url
            )
            for key, tab in self.app.tabs.items()
        )
        body = Markup('<ul list="tab[]:tabs">{}</ul>').format(items) if items else "<p>No tabs.</p>"
        new = _buttons({"new_tab": TAB_OPERATIONS["new_tab"]})
        return f'<section view="Tabs" description="The open tabs">{body}{new}</section>'

    def handle(self, call: OperationCall) -> Any:
        if call.operation != "new_tab":
            raise AotuiError(ErrorCode.E_NOT_FOUND, f"Tabs has no operation {call.operation!r}")
        return self.app.new_tab(call.args.get("url"))


TabsView.handlers = EveryOperation()


class Tab:
    """One open tab: its page, read and driven generically."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.generic = GenericPage(
            page.host.pipe, page.session, settle_timeout_s=OPERATION_TIMEOUT_S
        )
        self.url = "about:blank"
        self.title = ""
        #: Operations run on this tab: any may have scrolled it, which changes what a long
        #: page shows unfolded without changing its DOM.
        self.moves = 0


class TabView(View["BrowserApp"]):
    """One tab: its page as Markdown with refs, and the tab's operations."""

    def inputs(self) -> Any:
        tab = self.app.tabs.get(self.key)
        return None if tab is None else (tab.page.state(), tab.url, tab.moves)

    def render(self) -> str:
        tab = self.app.tabs.get(self.key)
        if tab is None:
            return (
                '<section view="Closed tab"><p>This tab is closed; dismount this view.</p>'
                "</section>"
            )
        extra = _buttons(TAB_OPERATIONS) + str(tab.page.tools.operations_html(None))
        header = Markup("<p>URL: {}</p>").format(tab.url)
        # Asked in the reader's own world first: the runtime's world may not exist for every
        # document (an error page), and most pages mark nothing.
        has_marks = tab.generic.evaluate('document.querySelector("[view]") !== null') is True
        marked = tab.page.world("__aotuiWeb.roots()") if has_marks else None
        if isinstance(marked, list) and marked:
            # A page marked for agents (CONTRACT §3) reads as an app: its views, each a view of
            # this tab the agent mounts, operations delivered as the page's own events.
            roots = [r for r in dict.fromkeys(map(str, marked)) if len(r.encode()) <= MAX_MARK_KEY]
            links = Markup("").join(
                Markup("<li{}>{}</li>").format(
                    self.link_attrs(MarkedView(_marked_key(self.key, root))),
                    sanitize(root, limit=100),
                )
                for root in roots[:MAX_MARKED]
            )
            return (
                f'<section view="{html.escape(tab.title or "Page", quote=True)}">{header}'
                f"<p>This page marks views for agents; mount them:</p><ul>{links}</ul>"
                f"{extra}</section>"
            )
        state = tab.generic.evaluate("__aotuiGeneric.assist()")
        if isinstance(state, dict):
            header += _assist_line(state)
        return tab.generic.render(extra, TAB_GENERIC, str(header), PAGE_BUDGET)

    def handle(self, call: OperationCall) -> Any:
        return self.app.operate(self.key, call)


TabView.handlers = EveryOperation()


class MarkedView(View["BrowserApp"]):
    """A view a page marks for agents (CONTRACT §3), read and driven as a web app's is."""

    def _where(self) -> tuple[Tab | None, str]:
        tab_key, root = _marked_root(self.key)
        return self.app.tabs.get(tab_key), root

    def inputs(self) -> Any:
        tab, _ = self._where()
        return None if tab is None else (tab.page.state(), tab.url)

    def render(self) -> str:
        tab, root = self._where()
        found = None if tab is None else tab.page.world(f"__aotuiWeb.html({json.dumps(root)})")
        if not isinstance(found, str):
            return (
                f'<section view="{html.escape(root[:100], quote=True)}"><p>This page no longer '
                "has this view; dismount it.</p></section>"
            )
        return found

    def handle(self, call: OperationCall) -> Any:
        tab, root = self._where()
        if tab is None:
            raise AotuiError(ErrorCode.E_STALE_STATE, "its tab is closed; pull again")
        reason = self.app.catalog_check(tab, call.operation, call.args)
        if reason is not None and not call.confirmed:
            raise ConfirmationRequired(reason)
        return dispatch(tab.page, root, call)


MarkedView.handlers = EveryOperation()


def _marked_key(tab_key: str, root: str) -> str:
    return f"{tab_key}{MARK}{root.encode().hex()}"


def _marked_root(key: str) -> tuple[str, str]:
    """(tab key, root key) of a marked view's key; the root is ``""`` for any other key."""
    tab_key, mark, encoded = key.partition(MARK)
    try:
        return tab_key, bytes.fromhex(encoded).decode() if mark else ""
    except ValueError:
        return tab_key, ""


def _assist_line(state: dict[str, Any]) -> Markup:
    """Seed 004's active context, by its priority: modal, focus, view, route."""
    parts: list[Markup] = []
    for label, value in (
        ("Modal", state.get("modal")),
        ("Focus", state.get("focus")),
        ("Views", ", ".join(str(v) for v in state.get("views") or [])),
        ("Panels", ", ".join(str(v) for v in state.get("panels") or [])),
        ("Route", state.get("route")),
    ):
        if value:
            parts.append(Markup("{}: {}").format(label, sanitize(str(value), limit=200)))
    title = state.get("title")
    if title and state.get("route"):
        parts[-1] += Markup(" ({})").format(sanitize(str(title), limit=200))
    return Markup("<p>{}</p>").format(Markup(" · ").join(parts)) if parts else Markup("")


class BrowserApp(App):
    """A headless browser whose pages are the app's tabs."""

    def __init__(self) -> None:
        super().__init__()
        self.host = PageHost(self)
        self.tabs: dict[str, Tab] = {}
        #: The tab an AWI-TTY call acts on: the one opened or acted on last.
        self.active = ""
        #: The text snapshot's size, in cells (set_viewport).
        self.cells = (140, 45)

    @property
    def chromium_sandbox(self) -> bool:
        """Whether Chromium's own sandbox runs inside ours (``aotui status`` says it)."""
        return self.host.chromium_sandbox

    # --- life ---------------------------------------------------------------------------------

    def on_start(self) -> None:
        """Start the browser; open the stored tabs again (one empty tab on a first start)."""
        self.host.launch()
        self.log(f"Browser: Chromium's own sandbox {self.host.sandbox_line()}")
        stored = sorted(
            (int(key.removeprefix("tab:")), value)
            for key, value in self.stored.items()
            if key.startswith("tab:") and isinstance(value, dict)
        )
        for number, saved in stored or [(1, {"url": "about:blank"})]:
            self._open(f"tab:{number}", str(saved.get("url", "about:blank")), restoring=True)

    def roots(self) -> list[View[Any]]:
        return [TabsView("tabs"), *(TabView(key) for key in list(self.tabs)[:1])]

    def resolve_view(self, key: str) -> View[Any] | None:
        tab_key, root = _marked_root(key)
        if root and tab_key in self.tabs:
            page = self.tabs[tab_key].page
            has = page.world(f"__aotuiWeb.root({json.dumps(root)}) !== null")
            return MarkedView(key) if has is True else None
        return TabView(key) if key in self.tabs else None

    def _aotui_watch(self) -> Any:
        return self.host.watch()

    # --- tabs ---------------------------------------------------------------------------------

    def new_tab(self, url: str | None) -> dict[str, Any]:
        if len(self.tabs) >= MAX_TABS:
            raise AotuiError(
                ErrorCode.E_RATE_LIMITED,
                f"{MAX_TABS} tabs are open already; close one (close_tab) first",
            )
        number = int(self.stored.get("next_tab", 2))
        self.stored["next_tab"] = number + 1
        key = f"tab:{number}"
        tab = self._open(key, "about:blank", restoring=False)
        if url:
            self._go(tab, url)
        self.stored[key] = {"url": tab.url}
        return {"tab": key, "url": tab.url, "title": tab.title}

    def _open(self, key: str, url: str, *, restoring: bool) -> Tab:
        tab = self.tabs[key] = Tab(self.host.open_page())
        self.active = key
        if url != "about:blank":
            try:
                self._go(tab, url)
            except AotuiError as exc:
                if not restoring:
                    raise
                self.log(f"{key}: {url} did not open again: {exc.message}")
        return tab

    def close_tab(self, key: str) -> dict[str, Any]:
        tab = self.tabs.pop(key)
        self.host.close_page(tab.page)
        del self.stored[key]
        if self.active == key:
            self.active = next(iter(self.tabs), "")
        return {"closed": key}

    # --- operations ---------------------------------------------------------------------------

    def operate(self, key: str, call: OperationCall) -> Any:
        """Run one operation of tab ``key``; what changed (URL, title), or its answer."""
        tab = self.tabs.get(key)
        if tab is None:
            raise AotuiError(ErrorCode.E_STALE_STATE, f"{key} is closed; pull again")
        self.active = key
        op, args = call.operation, call.args
        reason = self.catalog_check(tab, op, args)
        if reason is not None and not call.confirmed:
            raise ConfirmationRequired(reason)
        tab.moves += 1
        if op in ("new_tab", "close_tab"):
            return self.new_tab(args.get("url")) if op == "new_tab" else self.close_tab(key)
        if op in ("wait_for", "find"):
            if op == "find":
                return self._find(key, args)
            return self._wait_for(tab, args, call.stable_keys)
        if op == "dialog":
            tab.page.next_answer = (bool(args["accept"]), str(args.get("text", "")))
            return {"next_dialog": "accepted" if args["accept"] else "dismissed"}
        # A later wait_for --navigation counts the navigations from here on; the answer tells
        # the dialogs this operation met.
        tab.page.forget_navigations()
        tab.page.dialogs.clear()
        before = (tab.url, tab.title)
        result = self._act(tab, call)
        self._note_location(key, tab)
        changed: dict[str, Any] = {
            name: now
            for name, was, now in (("url", before[0], tab.url), ("title", before[1], tab.title))
            if was != now
        }
        if tab.page.dialogs:
            changed["dialogs"] = list(tab.page.dialogs)
        if result is not None:
            return result if not changed else {"result": result, **changed}
        return changed or None

    def catalog_check(self, tab: Tab, op: str, args: Any) -> str | None:
        """Apply the page's catalog policy to ``op`` if the desktop trusts the tab's origin
        (sandbox/assist_policy.py): ``E_PERMISSION`` if not allowed there, or why the user must
        confirm it first."""
        action = action_of(op)
        origin = origin_of(tab.url)
        if action is None or not origin or origin not in self.trusted_origins:
            return None
        text = tab.generic.evaluate(CATALOG_SCRIPT)
        if not isinstance(text, str):
            return None
        named = {"modals": str(args["modal"])} if "modal" in args else {}
        if op == "navigate" and "route" in args:
            named["routes"] = str(args["route"])
        return parse_catalog(text, origin).check(action, self._state(tab), named)

    def _act(self, tab: Tab, call: OperationCall) -> Any:
        """Run an operation that may change the page; its own answer (most have none)."""
        op, args = call.operation, call.args
        if tab.page.tools.offers(None, op):
            result = tab.page.tools.invoke(op, args, timeout_s=OPERATION_TIMEOUT_S)
            tab.page.settle(op, 0)
            return result
        if op in OPERATIONS:
            tab.page.refused.clear()
            field = op in ("click", "type") and "field" in args
            # Its answer is what changed: the caller computes that for every operation.
            tab.generic.handle(self._field_call(tab, call) if field else call)
            tab.page.note_state(tab.page.world("__aotuiWeb.state()"))
        elif op == "navigate" and "route" in args:
            self._route(tab, str(args["route"]))
        elif op in ("navigate", "back", "forward", "reload"):
            if op == "navigate" and "url" not in args:
                raise AotuiError(ErrorCode.E_INVALID_CMD, "navigate takes --url or --route")
            self._go(tab, str(args.get("url", "")), op)
        elif op in ("focus", "modal_open", "modal_close", "capabilities", "set_viewport"):
            return getattr(self, f"_{op}")(tab, args)
        else:
            raise AotuiError(ErrorCode.E_NOT_FOUND, f"a tab has no operation {op!r}")
        return None

    def _go(self, tab: Tab, url: str, how: str = "navigate") -> None:
        """Navigate (or go back, forward, reload) and wait for the page to settle."""
        page = tab.page
        page.refused.clear()
        if how == "navigate":
            scheme = urlsplit(url).scheme
            if scheme not in ("http", "https"):
                raise AotuiError(
                    ErrorCode.E_INVALID_CMD,
                    f"--url must be an http:// or https:// URL, got {sanitize(url, limit=200)!r}",
                    {"arg": "url"},
                )
            was = page.cdp("Page.getNavigationHistory", {})
            error = page.navigate(url, LOAD_TIMEOUT_S, PARSED)
            if error and "ERR_ABORTED" not in error:  # an aborted one commits no error page
                self._leave_error_page(page, was)
        else:
            error = self._history(page, how)
        if error:
            if page.refused:
                host = urlsplit(url).hostname or "the host" if how == "navigate" else "the host"
                why = page.refused[0]
                hint = (
                    "the desktop config's policy for the Browser would have to list it"
                    if "config narrows" in why
                    else f"A net:http:{host} grant in the Browser's manifest would allow it"
                )
                raise AotuiError(
                    ErrorCode.E_PERMISSION,
                    f"{how} refused: the request to {sanitize(why, limit=300)}. {hint}",
                )
            raise AotuiError(
                ErrorCode.E_APP_ERROR, f"{how} to {sanitize(url, limit=200)} failed: {error}"
            )
        self._settle_loaded(page, how)
        self._note_location(None, tab)

    @staticmethod
    def _settle_loaded(page: Page, how: str) -> None:
        """Wait for a document parsed (its DOMContentLoaded) to settle: no DOM change for a
        quiet window, and no request of the page answered during it (a fetch's answer, an
        async script or an image may change the page after it: then the window starts again).
        Not the load event: a page is read once it stops changing, not once its last image is
        in (a remote image would hold every navigate)."""
        deadline = time.monotonic() + OPERATION_TIMEOUT_S
        while True:
            served = page.served
            page.settle(how, INPUT_QUIET_MS, max(0.1, deadline - time.monotonic()))
            if page.served == served or time.monotonic() >= deadline:
                return

    def _leave_error_page(self, page: Page, was: dict[str, Any]) -> None:
        """A failed navigation leaves Chromium's error page in the tab: back to where it was,
        so that a refused navigation changes nothing."""
        # Page.navigate answers with the error before the error page commits (a loaded
        # machine shows it later): wait for its history entry, 2 s at most.
        deadline = time.monotonic() + ERROR_PAGE_S
        while True:
            try:
                now = page.cdp("Page.getNavigationHistory", {})
                if int(now["currentIndex"]) > int(was["currentIndex"]):
                    break
            except CDPError:
                pass
            if time.monotonic() >= deadline:
                return
            page.host.pump(0.05)
        entry = was["entries"][int(was["currentIndex"])]
        page.forget_navigations()
        page.cdp("Page.navigateToHistoryEntry", {"entryId": entry["id"]})
        page.wait_navigation(LOAD_TIMEOUT_S, "going back from the error page", PARSED)

    def _history(self, page: Page, how: str) -> str:
        if how == "reload":
            page.forget_navigations()
            page.cdp("Page.reload", {})
            page.wait_navigation(LOAD_TIMEOUT_S, "reload", PARSED)
            return ""
        history = page.cdp("Page.getNavigationHistory", {})
        at = int(history["currentIndex"]) + (-1 if how == "back" else 1)
        entries = history["entries"]
        if not 0 <= at < len(entries):
            raise AotuiError(
                ErrorCode.E_INVALID_CMD, f"there is no page to go {how} to in this tab's history"
            )
        page.forget_navigations()
        page.cdp("Page.navigateToHistoryEntry", {"entryId": entries[at]["id"]})
        page.wait_navigation(LOAD_TIMEOUT_S, how, PARSED)
        return ""

    def _note_location(self, key: str | None, tab: Tab) -> None:
        where = tab.page.cdp("Runtime.evaluate", {
            "expression": "[location.href, document.title]", "returnByValue": True,
        })  # fmt: skip
        value = (where.get("result") or {}).get("value") or [tab.url, tab.title]
        tab.url, tab.title = str(value[0])[:2000], sanitize(str(value[1]), limit=200)
        for name, known in self.tabs.items():
            if known is tab and self.stored.get(name, {}).get("url") != tab.url:
                self.stored[name] = {"url": tab.url}

    def _wait_for(self, tab: Tab, args: Any, keys: Any = None) -> dict[str, Any]:
        kinds = [k for k in ("text", "gone", "target", "modal", "navigation", "network_idle")
                 if k in args]  # fmt: skip
        if len(kinds) != 1:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                "wait_for takes one of --text, --gone, --target, --modal, --navigation, "
                f"--network_idle (got {', '.join('--' + k for k in kinds) or 'none'})",
            )
        until = min(int(args.get("timeout_ms", MAX_WAIT_MS)), MAX_WAIT_MS)
        if "modal" in args:
            return self._wait_modal(tab, str(args["modal"]), bool(args.get("visible", True)), args)
        if "target" in args:
            return self._wait_target(tab, args, keys or {}, until)
        if "navigation" in args:
            return self._wait_navigation(tab, until)
        if "network_idle" in args:
            return self._wait_network_idle(tab, until)
        text, gone = args.get("text"), args.get("gone")
        wanted = json.dumps([text if text is not None else gone, text is not None, until])
        met = tab.page.world(_WAIT % wanted, await_promise=True, timeout_s=until / 1000 + 2)
        if met is not True:
            # An answer, not E_TIMEOUT: the desktop stops a worker whose request timed out,
            # and this one answered in time (a wait that ended unmet).
            what = f"{text!r} to show" if text is not None else f"{gone!r} to go"
            return {"met": False, "why": f"waited {until} ms for {what}; it did not"}
        tab.page.settle("wait_for", 0)
        return {"met": True}

    def _wait_target(self, tab: Tab, args: Any, keys: Any, until: int) -> dict[str, Any]:
        """Until the ref's element is shown (``--visible``, the default) or gone or hidden."""
        ident = tab.generic._target(args, keys)
        seen = args.get("target")
        doc = json.dumps(seen.get("doc") if isinstance(seen, dict) else None)
        want = bool(args.get("visible", True))
        expression = f"""new Promise((resolve) => {{
          const end = performance.now() + {until};
          const tick = () => {{
            const shown = !!__aotuiGeneric.element({ident}, {doc});
            if (shown === {json.dumps(want)}) resolve(true);
            else if (performance.now() >= end) resolve(false);
            else setTimeout(tick, 25);
          }};
          tick();
        }})"""
        met = tab.generic.evaluate(expression, await_promise=True)
        if met is not True:
            state = "shown" if want else "gone"
            return {"met": False, "why": f"waited {until} ms for page[{ident}] to be {state}"}
        tab.page.settle("wait_for", 0)
        return {"met": True}

    def _wait_navigation(self, tab: Tab, until: int) -> dict[str, Any]:
        """Until the tab navigated (a new document parsed, or a same-document navigation) since
        its last other operation began; then until it settled."""
        try:
            tab.page.wait_navigation(until / 1000, "the navigation", PARSED)
        except AotuiError as exc:
            if exc.code is not ErrorCode.E_TIMEOUT:
                raise
            return {"met": False, "why": f"waited {until} ms; the tab did not navigate"}
        self._settle_loaded(tab.page, "wait_for")
        self._note_location(None, tab)
        return {"met": True, "url": tab.url, "title": tab.title}

    def _wait_network_idle(self, tab: Tab, until: int) -> dict[str, Any]:
        """Until no request of the page was answered for :data:`NETWORK_IDLE_MS`."""
        end = time.monotonic() + until / 1000
        while time.monotonic() < end:
            served = tab.page.served
            quiet_until = time.monotonic() + NETWORK_IDLE_MS / 1000
            while time.monotonic() < quiet_until and tab.page.served == served:
                tab.page.host.pump(max(0.0, quiet_until - time.monotonic()))
            if tab.page.served == served:
                return {"met": True}
        return {"met": False, "why": f"waited {until} ms; the page kept making requests"}

    def _find(self, key: str, args: Any) -> dict[str, Any]:
        """The page's lines (read whole, folded parts too) with a text, and their refs; the
        first is scrolled to the viewport's centre, so the next snapshot shows it unfolded."""
        text, role = str(args.get("text", "")), str(args.get("role", "")).lower()
        if not text and not role:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD, "find takes --text or --role (not empty)", {"arg": "text"}
            )
        tab = self.tabs[key]
        rendered = render_view(tab.generic.render("", TAB_GENERIC))
        roles = {
            ref: str(value.get("role", "")).lower()
            for ref, value in rendered.refs.items()
            if isinstance(value, dict)
        }
        found = []
        for line in rendered.markdown.split("#### Operations")[0].splitlines():
            refs = _REF.findall(line)
            if role:
                refs = [r for r in refs if roles.get(r) == role]
            if (not role or refs) and (not text or text.lower() in line.lower()):
                found.append({"line": line.strip(), "refs": refs})
        if text and found and tab.generic.evaluate(f"__aotuiGeneric.reveal({json.dumps(text)})"):
            tab.page.settle("find", 0)
        return {"found": found[:MAX_FOUND], "more": max(0, len(found) - MAX_FOUND)}

    def _set_viewport(self, tab: Tab, args: Any) -> None:
        width, height = int(args["width"]), int(args["height"])
        if not (100 <= width <= 4000 and 100 <= height <= 4000):
            raise AotuiError(
                ErrorCode.E_INVALID_CMD, "--width and --height are CSS pixels from 100 to 4000"
            )
        tab.page.cdp(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        tab.page.settle("set_viewport", QUIET_MS)

    # --- seed 004: agent-aware pages ------------------------------------------------------------

    def _field(self, tab: Tab, name: str) -> dict[str, Any]:
        found = tab.generic.evaluate(f"__aotuiGeneric.field({json.dumps(name)})")
        if not isinstance(found, dict):
            fields = tab.generic.evaluate("__aotuiGeneric.capabilities()").get("fields") or []
            raise AotuiError(
                ErrorCode.E_NOT_FOUND,
                f"no visible field {sanitize(name, limit=100)!r} on this page (in the active "
                f"modal, if one is open); its fields: {', '.join(map(str, fields[:30])) or 'none'}",
                {"arg": "field"},
            )
        return found

    def _field_call(self, tab: Tab, call: OperationCall) -> OperationCall:
        """``call`` with its ``--field`` turned into the ref of that field's element."""
        found = self._field(tab, str(call.args["field"]))
        args = {k: v for k, v in call.args.items() if k != "field"}
        args["target"] = {"doc": found["doc"]}
        return OperationCall(call.operation, args, {"target": f"page[{int(found['id'])}]"})

    def _state(self, tab: Tab) -> dict[str, Any]:
        state = tab.generic.evaluate("__aotuiGeneric.assist()")
        return state if isinstance(state, dict) else {}

    def _command(self, tab: Tab, cmd: str, params: dict[str, Any]) -> None:
        tab.page.main(_COMMAND, cmd, params)
        tab.page.settle(cmd, QUIET_MS)

    def _route(self, tab: Tab, route: str) -> None:
        self._command(tab, "navigate", {"routeId": route})
        now = self._state(tab).get("route")
        if now != route:
            routes = tab.generic.evaluate("__aotuiGeneric.capabilities()").get("routes") or []
            raise AotuiError(
                ErrorCode.E_APP_ERROR,
                f"the page did not go to {sanitize(route, limit=100)} (it shows {now or 'no route'}"
                f"; its routes: {', '.join(map(str, routes[:30])) or 'none'}). An agent-aware "
                "page changes route on the assist:command event (docs/web-apps.md)",
            )

    def _capabilities(self, tab: Tab, args: Any) -> dict[str, Any]:
        found: dict[str, Any] = tab.generic.evaluate("__aotuiGeneric.capabilities()")
        return found

    def _focus(self, tab: Tab, args: Any) -> None:
        if "field" in args:
            found = self._field(tab, str(args["field"]))
            tab.generic.evaluate(f"__aotuiGeneric.element({int(found['id'])}, null).focus()")
        elif "modal" in args:
            self._command(tab, "focus", {"modalId": str(args["modal"])})
        else:
            raise AotuiError(ErrorCode.E_INVALID_CMD, "focus takes --field or --modal")
        tab.page.settle("focus", 0)

    def _modal_open(self, tab: Tab, args: Any) -> None:
        modal = str(args["modal"])
        self._command(tab, "modal.open", {"modalId": modal})
        if tab.generic.evaluate(f"__aotuiGeneric.modalShown({json.dumps(modal)})") is not True:
            raise AotuiError(
                ErrorCode.E_APP_ERROR,
                f"the page did not open {sanitize(modal, limit=100)}: an agent-aware page opens "
                "its modals on the assist:command event (docs/web-apps.md)",
            )

    def _modal_close(self, tab: Tab, args: Any) -> None:
        modal = str(args.get("modal") or self._state(tab).get("modal") or "")
        if not modal:
            raise AotuiError(ErrorCode.E_INVALID_CMD, "no modal is open; name one with --modal")
        self._command(tab, "modal.close", {"modalId": modal})
        shown = f"__aotuiGeneric.modalShown({json.dumps(modal)})"
        if tab.generic.evaluate(shown) is True:
            tab.generic.handle(OperationCall("press", {"key": "Escape"}, {}))
        if tab.generic.evaluate(shown) is True:
            raise AotuiError(
                ErrorCode.E_APP_ERROR, f"the page did not close {sanitize(modal, limit=100)}"
            )

    def _wait_modal(self, tab: Tab, modal: str, visible: bool, args: Any) -> dict[str, Any]:
        until = min(int(args.get("timeout_ms", MAX_WAIT_MS)), MAX_WAIT_MS)
        wanted = json.dumps([modal, visible, until])
        expression = f"""new Promise((resolve) => {{
          const [modal, want, until] = {wanted};
          const end = performance.now() + until;
          const tick = () => {{
            if (__aotuiGeneric.modalShown(modal) === want) resolve(true);
            else if (performance.now() >= end) resolve(false);
            else setTimeout(tick, 25);
          }};
          tick();
        }})"""
        if tab.generic.evaluate(expression, await_promise=True) is not True:
            state = "visible" if visible else "hidden"
            return {"met": False, "why": f"waited {until} ms for {modal} to be {state}; it was not"}
        return {"met": True}

    # --- seed 002: AWI-TTY ------------------------------------------------------------------------

    @operation
    def awi(self, method: str, params: str = "{}") -> Any:
        """An AWI-TTY call on the active tab (the desktop sends it for rpc.sock, never an agent)."""
        if method not in AWI_METHODS:
            raise AotuiError(ErrorCode.E_NOT_FOUND, f"AWI-TTY has no method {method!r}")
        given = json.loads(params)
        if not isinstance(given, dict):
            raise AotuiError(ErrorCode.E_INVALID_CMD, "AWI-TTY params must be an object")
        if method == "get_capabilities":
            return {
                "version": AWI_VERSION,
                "features": [*AWI_METHODS[:3], "snapshot:text", "snapshot:markdown",
                             *AWI_METHODS[4:]],
                "snapshot_formats": ["text", "markdown"],
                "platform": "unix",
                "viewport": {"cols": self.cells[0], "rows": self.cells[1]},
            }  # fmt: skip
        if not self.tabs:
            self.new_tab(None)
        key = self.active if self.active in self.tabs else next(iter(self.tabs))
        tab = self.tabs[key]
        governed = _AWI_ACTIONS.get(method)
        if governed is not None and self.catalog_check(tab, governed, given) is not None:
            raise AotuiError(
                ErrorCode.E_PERMISSION,
                f"the page's catalog asks the user to confirm {governed} here, which AWI-TTY "
                f"cannot: use the Browser's {governed} operation through the desktop's commands",
            )
        if method in _AWI_MOVES:  # the tab's view is rendered again only after these
            tab.moves += 1
        result = getattr(self, f"_awi_{method}")(key, tab, given)
        if method in _AWI_MOVES:
            self._note_location(key, tab)
        return result

    def _awi_navigate(self, key: str, tab: Tab, params: dict[str, Any]) -> dict[str, Any]:
        self._go(tab, str(params.get("url", "")))
        return {"ok": True}

    def _awi_send_key(self, key: str, tab: Tab, params: dict[str, Any]) -> dict[str, Any]:
        name = str(params.get("key", ""))
        if name == "Char":
            char = str(params.get("char", ""))
            if len(char) != 1:
                raise AotuiError(ErrorCode.E_INVALID_CMD, 'key "Char" needs one character in char')
            spec = char
        elif name in _AWI_KEYS:
            spec = _AWI_KEYS[name]
        else:
            known = ", ".join([*_AWI_KEYS, "Char"])
            raise AotuiError(ErrorCode.E_INVALID_CMD, f"unknown key {name!r}; keys: {known}")
        held = [m for m in ("ctrl", "alt", "shift", "meta") if params.get(m)]
        names = {"ctrl": "Control", "alt": "Alt", "shift": "Shift", "meta": "Meta"}
        spec = "+".join([*(names[m] for m in held), spec]) if held else spec
        tab.generic.handle(OperationCall("press", {"key": spec}, {}))
        return {"ok": True}

    def _awi_scroll(self, key: str, tab: Tab, params: dict[str, Any]) -> dict[str, Any]:
        delta = int(params.get("delta", 1))
        tab.page.world(f"void window.scrollBy(0, {delta * CELL_PX[1]})")
        tab.page.settle("scroll", 0)
        return {"ok": True}

    def _awi_snapshot(self, key: str, tab: Tab, params: dict[str, Any]) -> dict[str, Any]:
        fmt = str(params.get("format", "text"))
        if fmt == "markdown":
            view = self.view(key)
            assert view is not None
            answer: dict[str, Any] = {"markdown": render_view(view.render()).markdown}
        elif fmt == "text":
            cols, rows = self.cells
            grid = tab.generic.evaluate(f"__aotuiGeneric.textGrid({cols}, {rows})")
            lines = [sanitize(line, limit=None) for line in grid["lines"]]
            answer = {"width": cols, "height": rows, "lines": lines}
            if params.get("include_meta"):
                answer["meta"] = {
                    "cursor": grid.get("cursor"),
                    "url": tab.url,
                    "title": tab.title,
                    "scale": {"width": CELL_PX[0], "height": CELL_PX[1]},
                    "nav": self._nav(tab),
                }
        else:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD, f"format {fmt!r}: AWI-TTY snapshots are text or markdown"
            )
        return answer

    def _awi_get_title(self, key: str, tab: Tab, params: dict[str, Any]) -> dict[str, Any]:
        self._note_location(key, tab)
        return {"title": tab.title}

    def _awi_get_url(self, key: str, tab: Tab, params: dict[str, Any]) -> dict[str, Any]:
        self._note_location(key, tab)
        return {"url": tab.url}

    def _awi_get_nav_state(self, key: str, tab: Tab, params: dict[str, Any]) -> dict[str, Any]:
        return self._nav(tab)

    def _nav(self, tab: Tab) -> dict[str, bool]:
        history = tab.page.cdp("Page.getNavigationHistory", {})
        at, count = int(history["currentIndex"]), len(history["entries"])
        # The first entry of every tab is its about:blank start.
        return {"can_go_back": at > 1, "can_go_forward": at < count - 1}

    def _awi_set_viewport(self, key: str, tab: Tab, params: dict[str, Any]) -> dict[str, Any]:
        cols, rows = int(params.get("cols", 0)), int(params.get("rows", 0))
        if not (20 <= cols <= 500 and 5 <= rows <= 200):
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"invalid viewport {cols}x{rows}: cols from 20 to 500, rows from 5 to 200",
                {"reason": "invalid-viewport"},
            )
        self.cells = (cols, rows)
        self._set_viewport(tab, {"width": cols * CELL_PX[0], "height": rows * CELL_PX[1]})
        return {"ok": True}

    def _awi_type_text(self, key: str, tab: Tab, params: dict[str, Any]) -> dict[str, Any]:
        tab.page.cdp("Input.insertText", {"text": str(params.get("text", ""))})
        tab.page.settle("type_text", QUIET_MS)
        return {"ok": True}

    def _awi_wait_for_frame_quiescence(
        self, key: str, tab: Tab, params: dict[str, Any]
    ) -> dict[str, Any]:
        idle = min(max(int(params.get("idle_ms", 100)), 0), MAX_WAIT_MS)
        tab.page.settle("wait_for_frame_quiescence", idle)
        return {"ok": True}

    def _awi_wait_for_title_contains(
        self, key: str, tab: Tab, params: dict[str, Any]
    ) -> dict[str, Any]:
        text = str(params.get("substring", ""))
        until = min(int(params.get("timeout_ms", MAX_WAIT_MS)), MAX_WAIT_MS)
        wanted = json.dumps([text, until])
        met = tab.page.world(
            f"""new Promise((resolve) => {{
              const [text, until] = {wanted};
              const end = performance.now() + until;
              const tick = () => document.title.includes(text) ? resolve(true)
                : performance.now() >= end ? resolve(false) : setTimeout(tick, 25);
              tick();
            }})""",
            await_promise=True,
            timeout_s=until / 1000 + 2,
        )
        title = tab.page.world("document.title")
        if met is not True:  # an answer in time, not E_TIMEOUT (see _wait_for)
            return {"ok": False, "title": title, "why": f"not within {until} ms"}
        return {"ok": True, "title": title}
