"""WebMCP tools of a web app's page, offered as operations of the view they belong to.

A page registers tools with ``document.modelContext.registerTool({name, description,
inputSchema, execute})``, or declares them with ``<form toolname tooldescription>`` (the browser
derives the form's JSON Schema from its inputs). Chromium implements both behind
``--enable-features=WebMCP`` (measured in Debian's 150 and 156) and reports them through the
CDP ``WebMCP`` domain: ``toolsAdded`` / ``toolsRemoved`` events, ``invokeTool`` and a
``toolResponded`` event with the tool's output. :class:`PageTools` keeps that list for one page
session and runs tools through the same domain, so a page written for WebMCP is an aotui app with
no aotui-specific code. The schema mapping lives in :mod:`sandbox.webmcp_schema`.

Where a tool belongs: a declarative form to the view root (``[view]``) around it; an imperative
tool, which has no element, to the page's first view root; on a page with no view roots, to the
page's generic view (``key=None`` in :meth:`PageTools.operations_html`).

Running a tool: the arguments are checked against its schema (the browser does not check them),
then ``WebMCP.invokeTool``; a form without ``toolautosubmit`` is filled by the browser and then
submitted by the runtime (the agent's execute is the submit; the operation is marked ``confirm``
so the desktop's user approves it first, as WebMCP intends for such forms). The tool's output is
the operation's result; an error, a cancel or no answer in time is a typed :class:`AotuiError`.

Wiring it into a web app's runtime (one :class:`PageTools` per page session): :meth:`enable`
after ``Page.enable``; every CDP event of the session to :meth:`on_event` (``True``: re-render);
each view rendered as ``decorate(root.outerHTML, key)``, the generic view as
``decorate(generic.render(), None)``; a call that :meth:`offers` says is a tool of its view to
:meth:`invoke` (the view's handlers must list those ids), then the same wait for the page to
settle as any operation's.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from markupsafe import Markup

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.structure import sanitize
from aotui.sandbox.cdp import CDPError, CDPTimeout, Pipe
from aotui.sandbox.webmcp_schema import ToolRefused, WebTool, check_input, map_tool

__all__ = ["ENABLE_FLAG", "MAX_TOOLS", "PageTools"]

#: The Chromium flag that turns WebMCP on (``document.modelContext`` and the CDP domain).
ENABLE_FLAG = "--enable-features=WebMCP"
#: Tools kept per page; a page registering more is told so in its log, the rest are not offered.
MAX_TOOLS = 64
#: Answers kept for invocations no one waits for any more (timed out, then answered).
_MAX_ANSWERS = 32
#: How long one wait for an event lasts before the deadline is checked again.
_SLICE_S = 0.05
#: The view key of every declarative form, and of the page's first view root (``""`` for an
#: element outside any view root, ``null`` when the page has no view root at all).
_VIEW_OF = """function () {
  const key = (root) => root ? (root.getAttribute('key') || root.getAttribute('view')) : null;
  const first = document.querySelector('[view]');
  const forms = {};
  for (const form of document.querySelectorAll('form[toolname]')) {
    const name = form.getAttribute('toolname');
    if (!(name in forms)) forms[name] = key(form.closest('[view]')) ?? '';
  }
  return {first: key(first), forms};
}"""
_WORLD = "aotui-webmcp"
#: An operation the view's markup declares itself (``operation="send"``, any quoting).
_DECLARED = re.compile(r"""\soperation\s*=\s*["']?([A-Za-z_][A-Za-z0-9_]*)""")
_SUBMIT = """function () {
  if (!this.checkValidity()) {
    const bad = [...this.elements].find((el) => el.willValidate && !el.checkValidity());
    if (!bad) return 'invalid';
    return (bad.name || bad.id || bad.tagName) + ': ' + bad.validationMessage;
  }
  this.requestSubmit();
  return '';
}"""


class PageTools:
    """The WebMCP tools of one page session: listed from CDP events, rendered, invoked."""

    def __init__(
        self, pipe: Pipe, session: str, *, log: Callable[[str], None] | None = None
    ) -> None:
        self.pipe, self.session = pipe, session
        self._log = log or (lambda line: None)
        #: (frame id, tool name) → the tool, in registration order.
        self._tools: OrderedDict[tuple[str, str], WebTool] = OrderedDict()
        self._answers: OrderedDict[str, dict[str, Any]] = OrderedDict()
        #: op id → view key (``None``: the page has no view root); recomputed after a change.
        self._placement: dict[str, str | None] | None = None
        #: This runtime's isolated world in the current document (``None``: not made yet).
        self._world: int | None = None
        #: view key → the tools its last render showed.
        self._offered: dict[str | None, frozenset[str]] = {}
        #: Whether the browser has the WebMCP domain (``False``: an older or unflagged browser).
        self.available = False

    # --- the list -------------------------------------------------------------------------

    def enable(self) -> bool:
        """Turn the domain on (the browser then reports the tools already registered)."""
        try:
            self.pipe.call("WebMCP.enable", session=self.session)
        except CDPError:
            self.available = False
        else:
            self.available = True
        return self.available

    def on_event(self, message: Mapping[str, Any]) -> bool:
        """Take one CDP event of this session; whether the tools may have changed (the views
        that show them then need a new render)."""
        if message.get("sessionId") not in (None, self.session):
            return False
        method, params = message.get("method"), message.get("params")
        params = params if isinstance(params, Mapping) else {}
        if method == "WebMCP.toolsAdded":
            for raw in _objects(params.get("tools")):
                self._add(raw)
        elif method == "WebMCP.toolsRemoved":
            for raw in _objects(params.get("tools")):
                self._tools.pop((str(raw.get("frameId")), str(raw.get("name"))), None)
        elif method == "WebMCP.toolResponded":
            self._answers[str(params.get("invocationId"))] = dict(params)
            while len(self._answers) > _MAX_ANSWERS:
                self._answers.popitem(last=False)
            return False
        elif method == "Page.frameNavigated":
            # A new document has none of the old one's tools (Chromium sends no toolsRemoved).
            frame = params.get("frame")
            frame = frame if isinstance(frame, Mapping) else {}
            main = "parentId" not in frame
            self._world = None if main else self._world
            for ident in [i for i in self._tools if main or i[0] == frame.get("id")]:
                del self._tools[ident]
        else:
            return False
        self._placement = None
        return True

    def _add(self, raw: Mapping[str, Any]) -> None:
        ident = (str(raw.get("frameId")), str(raw.get("name")))
        self._tools.pop(ident, None)
        try:
            tool = map_tool(raw)
            if len(self._tools) >= MAX_TOOLS:
                raise ToolRefused(f"the page already offers {MAX_TOOLS} tools")
            taken = next((t for t in self._tools.values() if t.op_id == tool.op_id), None)
            if taken is not None:
                raise ToolRefused(
                    f"its operation id {tool.op_id} is already tool {sanitize(taken.name)!r}'s"
                )
        except ToolRefused as refused:
            self._log(
                f"WebMCP tool {sanitize(raw.get('name'), limit=80)!r} is not offered: {refused}"
            )
            return
        self._tools[ident] = tool

    def tools(self) -> tuple[WebTool, ...]:
        """The tools the page offers now, in registration order (events read so far)."""
        return tuple(self._tools.values())

    def tool(self, op_id: str) -> WebTool | None:
        """The tool offered as operation ``op_id``."""
        return next((t for t in self._tools.values() if t.op_id == op_id), None)

    # --- rendering ------------------------------------------------------------------------

    def placement(self) -> dict[str, str | None]:
        """op id → the key of the view it belongs to (``None``: the page has no view root)."""
        if self._placement is None:
            found = self._evaluate_view_of() if self._tools else {"first": None, "forms": {}}
            first, forms = found.get("first"), found.get("forms") or {}
            place: dict[str, str | None] = {}
            for tool in self._tools.values():
                key = forms.get(tool.name) if tool.node is not None else None
                place[tool.op_id] = key if isinstance(key, str) and key else first
            self._placement = place
        return self._placement

    def _evaluate_view_of(self) -> dict[str, Any]:
        value = self._in_world(
            lambda world: self.pipe.call(
                "Runtime.evaluate",
                {"expression": f"({_VIEW_OF})()", "returnByValue": True, "contextId": world},
                session=self.session,
            )
        )
        return value if isinstance(value, dict) else {}

    def _in_world(self, call: Callable[[int], dict[str, Any]]) -> Any:
        """``call(context id)`` in this runtime's isolated world of the page (made once per
        document): the page's own scripts cannot patch the DOM methods it uses there. The
        returned value, or ``None`` when the page threw."""
        for attempt in (0, 1):
            if self._world is None:
                tree = self.pipe.call("Page.getFrameTree", session=self.session)
                made = self.pipe.call(
                    "Page.createIsolatedWorld",
                    {"frameId": tree["frameTree"]["frame"]["id"], "worldName": _WORLD},
                    session=self.session,
                )
                self._world = int(made["executionContextId"])
            try:
                reply = call(self._world)
            except CDPError:
                if attempt:
                    raise
                self._world = None  # the document it was made in is gone: make another
                continue
            if "exceptionDetails" in reply:
                return None
            return reply.get("result", {}).get("value")
        return None  # pragma: no cover - the loop returns or raises

    def operations_html(self, key: str | None, taken: Iterable[str] = ()) -> Markup:
        """The operation elements of the tools of view ``key`` (``None``: the page's generic
        view) but those whose id is in ``taken``, for the one renderer; every value is escaped
        by :class:`Markup`. Remembered as what :meth:`offers` answers for ``key``."""
        place, skip = self.placement(), set(taken)
        offered: set[str] = set()
        out = Markup()
        for tool in self._tools.values():
            if place.get(tool.op_id, None) != key or tool.op_id in skip:
                continue
            offered.add(tool.op_id)
            out += Markup('<button operation="{}" description="{}"{}{}>{}</button>').format(
                tool.op_id,
                tool.description,
                Markup(' args="{}"').format(tool.args_json) if tool.args else "",
                Markup(" confirm") if tool.confirm else "",
                tool.label,
            )
        self._offered[key] = frozenset(offered)
        return out

    def decorate(self, html: str, key: str | None) -> str:
        """A view root's ``outerHTML`` with its tools' operations added inside the root; an
        operation the markup already declares is the page's own and hides a tool of its id."""
        taken = {m.group(1) for m in _DECLARED.finditer(html)}
        extra = str(self.operations_html(key, taken))  # str: Markup + str would escape the HTML
        if not extra:
            return html
        end = html.rfind("</")
        return html + extra if end < 0 else html[:end] + extra + html[end:]

    def offers(self, key: str | None, op_id: str) -> bool:
        """Whether view ``key``, as last rendered, shows tool ``op_id`` (not a page's own)."""
        return op_id in self._offered.get(key, ())

    # --- running --------------------------------------------------------------------------

    def invoke(self, op_id: str, args: Mapping[str, Any], *, timeout_s: float = 10.0) -> Any:
        """Run the tool offered as ``op_id`` with the operation's (coerced) ``args``; its
        output. Raises :class:`AotuiError`: a bad argument ``E_INVALID_CMD``, a tool gone
        ``E_NOT_FOUND``, its error or cancel ``E_APP_ERROR``, no answer ``E_TIMEOUT``."""
        deadline = time.monotonic() + timeout_s
        tool = self.tool(op_id)
        if tool is None:
            raise AotuiError(
                ErrorCode.E_NOT_FOUND,
                f"the page no longer offers operation {op_id}; pull a new snapshot",
                {"operation": op_id},
            )
        payload = check_input(tool, args)
        try:
            started = self.pipe.call(
                "WebMCP.invokeTool",
                {"frameId": tool.frame_id, "toolName": tool.name, "input": payload},
                session=self.session,
                timeout_s=max(deadline - time.monotonic(), 0.1),
            )
        except CDPError as exc:
            raise AotuiError(
                ErrorCode.E_NOT_FOUND,
                f"the page no longer offers tool {tool.op_id} ({exc.message}); pull again",
                {"operation": op_id},
            ) from None
        invocation = str(started.get("invocationId"))
        if tool.node is not None and not tool.autosubmit:
            self._submit(tool, invocation)
        answer = self._answer(tool, invocation, deadline, timeout_s)
        status = answer.get("status")
        if status == "Completed":
            return answer.get("output")
        if status == "Canceled":
            raise AotuiError(ErrorCode.E_APP_ERROR, f"the page canceled tool {tool.op_id}")
        exception = answer.get("exception")
        text = answer.get("errorText") or (
            exception.get("description") if isinstance(exception, Mapping) else None
        )
        first_line = str(text or "no reason given").strip().splitlines() or ["no reason given"]
        raise AotuiError(
            ErrorCode.E_APP_ERROR,
            f"tool {tool.op_id} failed: {sanitize(first_line[0], limit=300)}",
            {"operation": op_id},
        )

    def _submit(self, tool: WebTool, invocation: str) -> None:
        """Submit the form the browser has just filled (the agent's click on its button)."""

        def submit(world: int) -> dict[str, Any]:
            node = self.pipe.call(
                "DOM.resolveNode",
                {"backendNodeId": tool.node, "executionContextId": world},
                session=self.session,
            )
            return self.pipe.call(
                "Runtime.callFunctionOn",
                {
                    "objectId": node["object"]["objectId"],
                    "functionDeclaration": _SUBMIT,
                    "returnByValue": True,
                },
                session=self.session,
            )

        try:
            invalid = self._in_world(submit)
        except (CDPError, KeyError, TypeError):
            self._cancel(invocation)
            raise AotuiError(
                ErrorCode.E_NOT_FOUND,
                f"the form of tool {tool.op_id} is gone; pull a new snapshot",
                {"operation": tool.op_id},
            ) from None
        if invalid is None:  # it threw: the form cannot be submitted
            self._cancel(invocation)
            raise AotuiError(
                ErrorCode.E_APP_ERROR,
                f"the form of tool {tool.op_id} could not be submitted",
                {"operation": tool.op_id},
            )
        if invalid:
            self._cancel(invocation)
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"the form of {tool.op_id} refused the values: {sanitize(invalid, limit=300)}",
                {"operation": tool.op_id},
            )

    def _answer(
        self, tool: WebTool, invocation: str, deadline: float, timeout_s: float
    ) -> dict[str, Any]:
        """Wait for the tool's ``toolResponded`` (read here, or fed by :meth:`on_event`)."""
        while invocation not in self._answers:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._cancel(invocation)
                raise AotuiError(
                    ErrorCode.E_TIMEOUT,
                    f"tool {tool.op_id} gave no answer within {timeout_s:g} s (canceled)",
                    {"operation": tool.op_id},
                )
            try:
                params = self.pipe.wait_event(
                    "WebMCP.toolResponded",
                    session=self.session,
                    timeout_s=min(_SLICE_S, remaining),
                )
            except CDPTimeout:
                continue
            self.on_event({"method": "WebMCP.toolResponded", "params": params})
        return self._answers.pop(invocation)

    def _cancel(self, invocation: str) -> None:
        # It may have ended meanwhile, or the browser be going: nothing left to cancel then.
        with contextlib.suppress(CDPError, CDPTimeout):
            self.pipe.call(
                "WebMCP.cancelInvocation", {"invocationId": invocation}, session=self.session
            )


def _objects(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []
