"""The generic rendering of a page with no aotui marks, and the operations that act on it.

A web app whose page marks no ``view`` (and, in issue 23, every page the Browser app shows) is
read through :class:`GenericPage`: ``sandbox/assets/generic.js``, evaluated in an isolated world
of the page, walks the visible DOM and writes marked HTML that the one renderer
(:func:`sandbox.render.render_view`) turns into Markdown. Every element an agent can act on is an
indexed entity, ``[Sign in](control:page[12])``: the registry records it like a list item, its
index is the element's id for its life in the document, and its ``data-value`` names the
document and the element as the agent read it. An operation whose target is gone (removed,
hidden, or of a document since replaced) is ``E_STALE_STATE`` naming it, never another element.

Clicks, keys and text go in through CDP's ``Input`` domain, so the page sees trusted events.
Each operation answers once the page has settled: no DOM change for two task turns and
:data:`INPUT_QUIET_MS`, within the settle bound, else ``E_TIMEOUT`` saying the page kept changing.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.sandbox.cdp import CDPError, CDPTimeout, Pipe
from aotui.sandbox.sdk import OperationCall

__all__ = ["KEYS", "OPERATIONS", "QUIET_MS", "GenericOperation", "GenericPage"]

#: How long the DOM must stay unchanged (after two task turns) for the page to be settled.
QUIET_MS = 30
#: The same after an input the runtime sent (a click, keys): what it caused is most often in
#: the DOM within the event's own task; this catches what a page defers by a timer.
INPUT_QUIET_MS = 12
#: The name of the collection every control's ref belongs to: ``control:page[12]``.
REF_NAME = "page"
_WORLD = "aotui-generic"
_REF = re.compile(rf"{REF_NAME}\[([0-9]{{1,9}})\]")


@dataclass(frozen=True, slots=True)
class GenericOperation:
    """One operation every generically rendered page offers."""

    #: ``{name: type}``, as an ``args`` attribute declares it (CONTRACT §3).
    args: dict[str, str]
    #: One line for the agent.
    description: str


#: The operations of a generically rendered page, in the order the view lists them.
OPERATIONS: dict[str, GenericOperation] = {
    "click": GenericOperation({"target": "control"}, ""),
    "type": GenericOperation(
        {"target": "control", "text": "string", "submit?": "boolean"},
        "Replace the text; --submit presses Enter",
    ),
    "select": GenericOperation(
        {"target": "control", "value": "string"}, "Label or value; several: a, b"
    ),
    "check": GenericOperation({"target": "control", "checked?": "boolean"}, ""),
    "press": GenericOperation(
        {"key": "string", "target?": "control"}, "Enter, Tab, Escape, ArrowDown, a, Control+a"
    ),
    "scroll": GenericOperation(
        {"direction?": "string", "target?": "control"},
        "down, up, top, bottom (in --target), or to --target",
    ),
    "hover": GenericOperation({"target": "control"}, ""),
}
#: Listener types that make an element a control (sandbox/assets/generic.js ``bound``).
_CLICKS = frozenset({"click", "mousedown", "mouseup", "pointerdown", "pointerup", "dblclick"})
#: Elements with a click listener marked at most, per read (a page listening on thousands of
#: elements is read without the rest: each costs a CDP call).
MAX_LISTENED = 400
#: Times a click aims again at an element the pointer's move hid or moved away.
_AIMS = 3
_LISTEN = "function(...els) { __aotuiGeneric.listen(...els); }"

#: Named keys: ``key`` → (``code``, Windows virtual key code, the text it types).
KEYS: dict[str, tuple[str, int, str]] = {
    "Enter": ("Enter", 13, "\r"),
    "Tab": ("Tab", 9, ""),
    "Escape": ("Escape", 27, ""),
    "Backspace": ("Backspace", 8, ""),
    "Delete": ("Delete", 46, ""),
    "ArrowLeft": ("ArrowLeft", 37, ""),
    "ArrowUp": ("ArrowUp", 38, ""),
    "ArrowRight": ("ArrowRight", 39, ""),
    "ArrowDown": ("ArrowDown", 40, ""),
    "Home": ("Home", 36, ""),
    "End": ("End", 35, ""),
    "PageUp": ("PageUp", 33, ""),
    "PageDown": ("PageDown", 34, ""),
    " ": ("Space", 32, " "),
}
_ALIASES = {"Esc": "Escape", "Space": " ", "Return": "Enter", "Up": "ArrowUp", "Down": "ArrowDown"}
_ALIASES |= {"Left": "ArrowLeft", "Right": "ArrowRight", "Del": "Delete"}
#: CDP's modifier bits.
_MODIFIERS = {"Alt": 1, "Control": 2, "Ctrl": 2, "Meta": 4, "Shift": 8}
_DIRECTIONS = ("down", "up", "top", "bottom")


def _script() -> str:
    return resources.files("aotui.sandbox").joinpath("assets/generic.js").read_text("utf-8")


class GenericPage:
    """One page target read and driven generically, through its CDP session."""

    def __init__(
        self,
        pipe: Pipe,
        session: str,
        *,
        settle_timeout_s: float = 5.0,
        call_timeout_s: float = 5.0,
    ) -> None:
        self.pipe, self.session = pipe, session
        #: The bound on one operation's wait for the page to settle.
        self.settle_timeout_s = settle_timeout_s
        #: The bound on each CDP call the page must answer (a read, an event delivered).
        self.call_timeout_s = call_timeout_s
        self._world: int | None = None
        self._source = _script()
        #: The backend node ids of elements already marked as listened to, in this world.
        self._listened: set[int] = set()
        #: The ``data-value`` of the target named last: the element as the agent read it.
        self._seen: dict[str, Any] = {}

    # --- reading -----------------------------------------------------------------------------

    def render(
        self,
        operations_html: str = "",
        operations: dict[str, GenericOperation] | None = None,
        header: str = "",
        budget: int = 0,
    ) -> str:
        """The page as one view document (marked HTML) for :func:`sandbox.render.render_view`.

        ``operations_html`` adds the page's own operations (its WebMCP tools, ``sandbox.webmcp``)
        after the generic ones; ``operations`` replaces the generic ones' declarations (the
        Browser's take a field too); ``header`` (marked HTML) goes before the page's content;
        ``budget`` (characters of HTML, 0: none) folds a longer page's blocks far from the
        viewport to their headings.
        """
        self._mark_listened()
        page = self._call(f"__aotuiGeneric.render({int(budget)})")
        title = html.escape(str(page.get("title") or "Page"))
        declared = "".join(
            f'<button operation="{op_id}" args="{html.escape(json.dumps(op.args))}" '
            f'description="{html.escape(op.description)}">{op_id}</button>'
            for op_id, op in (operations or OPERATIONS).items()
        )
        body = page.get("body", "")
        return f'<section view="{title}">{header}{body}{declared}{operations_html}</section>'

    def _mark_listened(self) -> None:
        """Tell the reader which elements the page listens to clicks on.

        Its isolated world cannot see the page's listeners; CDP can: one call lists those of the
        page's own world (``backendNodeId``, asked of the main world's ``document``: CDP lists
        the listeners of the object's world), and each element not marked yet is resolved into
        the reader's world and marked (``__aotuiGeneric.listen``). Nodes gone since are skipped.
        Not into shadow roots: ``pierce`` made Chromium 150's renderer crash at the next
        navigation after a few edits of a textarea (MiniWoB copy-paste, then any page).
        """
        self._call("0")  # the world, made again if the document was replaced
        group = {"objectGroup": _WORLD}
        try:
            # ``document`` is unforgeable: a page cannot hand another object for it.
            main = self._cdp("Runtime.evaluate", {"expression": "document", **group})
            found = self._cdp(
                "DOMDebugger.getEventListeners",
                {"objectId": main["result"]["objectId"], "depth": -1, "pierce": False},
            )["listeners"]
            fresh = {
                listener["backendNodeId"]
                for listener in found
                if listener.get("type") in _CLICKS and listener.get("backendNodeId")
            } - self._listened
            handles = []
            for node in sorted(fresh)[:MAX_LISTENED]:  # the rest at the next read
                self._listened.add(node)
                where = {"backendNodeId": node, "executionContextId": self._world, **group}
                try:
                    resolved = self._cdp("DOM.resolveNode", where)
                except CDPError:
                    continue  # gone since
                handles.append({"objectId": resolved["object"]["objectId"]})
            if handles:
                ours = self._cdp(
                    "Runtime.evaluate",
                    {"expression": "document", "contextId": self._world, **group},
                )
                call = {"functionDeclaration": _LISTEN, "arguments": handles}
                self._cdp(
                    "Runtime.callFunctionOn", {"objectId": ours["result"]["objectId"], **call}
                )
        except CDPError:
            return  # read without: a page whose listeners cannot be listed reads as before
        finally:
            with contextlib.suppress(CDPError):
                self._cdp("Runtime.releaseObjectGroup", group)

    def evaluate(self, expression: str, *, await_promise: bool = False) -> Any:
        """``expression``'s JSON value in the reader's isolated world (``__aotuiGeneric`` there)."""
        return self._call(expression, await_promise=await_promise)

    # --- acting ------------------------------------------------------------------------------

    def handle(self, call: OperationCall) -> Any:
        """Run one generic operation; its answer says what changed (URL, title), or ``None``."""
        op = call.operation
        if op not in OPERATIONS:
            raise AotuiError(
                ErrorCode.E_NOT_FOUND,
                f"a page offers no operation {op!r} (it offers: {', '.join(OPERATIONS)})",
            )
        before = self._call("({url: location.href, title: document.title})")
        getattr(self, f"_{op}")(call.args, call.stable_keys)
        self._settle(op)
        after = self._call("({url: location.href, title: document.title})")
        changed = {name: after[name] for name in ("url", "title") if after[name] != before[name]}
        return changed or None

    def _click(self, args: dict[str, Any] | Any, keys: Any) -> None:
        self._click_at(self._target(args, keys))

    def _type(self, args: Any, keys: Any) -> None:
        ident = self._target(args, keys)
        self._on(ident, "g.clear(el)")
        text = str(args["text"])
        if text:
            self._cdp("Input.insertText", {"text": text})
        else:
            self._key("Delete")
        if args.get("submit"):
            self._key("Enter")

    def _select(self, args: Any, keys: Any) -> None:
        ident = self._target(args, keys)
        found = self._on(ident, f"g.choose(el, {json.dumps(str(args['value']))})")
        if found is None:
            raise self._refused(args, "is not a select; click it or type into it instead")
        if "chosen" not in found:
            options = ", ".join(found.get("options", [])) or "none"
            missing = found.get("missing") or [args["value"]]
            wanted = " nor ".join(repr(str(m)) for m in missing)
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"{_ref(ident)} has no option {wanted} (its options: {options}); nothing "
                "was selected",
                {"arg": "value"},
            )

    def _check(self, args: Any, keys: Any) -> None:
        ident = self._target(args, keys)
        # A click that a page answers by drawing the control anew is still the click: what it
        # did shows in the next snapshot, not in an element that is gone.
        if self._on(ident, "g.checked(el)") != bool(args.get("checked", True)):
            self._click_at(ident)

    def _hover(self, args: Any, keys: Any) -> None:
        """The mouse moved onto the element's centre (where it is hit): what a hover opens."""
        ident = self._target(args, keys)
        point = self._on(ident, "g.point(el)")
        if not point:
            raise self._refused(args, "has no area to move the mouse onto")
        self._mouse("mouseMoved", {"x": point["x"], "y": point["y"]})

    def _press(self, args: Any, keys: Any) -> None:
        if "target" in args:
            self._on(self._target(args, keys), "el.focus()")
        self._key(str(args["key"]))

    def _scroll(self, args: Any, keys: Any) -> None:
        direction = str(args.get("direction", "down")).strip().lower()
        if direction not in _DIRECTIONS:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"--direction {direction!r} is not one of {', '.join(_DIRECTIONS)}",
                {"arg": "direction"},
            )
        if "target" in args:
            ident = self._target(args, keys)
            if "direction" not in args:
                self._on(ident, "el.scrollIntoView({block: 'center'})")
            elif not self._on(ident, f"g.scrollIn(el, {json.dumps(direction)})"):
                raise self._refused(args, "does not scroll, nor does anything around it")
            return
        step = {
            "down": "scrollBy(0, innerHeight * 0.8)",
            "up": "scrollBy(0, -innerHeight * 0.8)",
            "top": "scrollTo(0, 0)",
            "bottom": "scrollTo(0, document.documentElement.scrollHeight)",
        }[direction]
        self._call(f"void window.{step}")

    # --- the parts ---------------------------------------------------------------------------

    def _target(self, args: Any, keys: Any) -> int:
        """The element id of the ``target`` ref; checked to be live in :meth:`_on`."""
        key = keys.get("target") if hasattr(keys, "get") else None
        found = _REF.fullmatch(str(key or ""))
        if found is None:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"--target {key!r} is not a control of this page; give a ref like "
                f"{REF_NAME}[3] from the snapshot",
                {"arg": "target"},
            )
        seen = args.get("target")
        self._seen = seen if isinstance(seen, dict) else {}
        return int(found.group(1))

    def _on(self, ident: int, body: str) -> Any:
        """Run ``body`` with ``el`` the live element ``ident``; a gone one is ``E_STALE_STATE``."""
        doc = json.dumps(self._seen.get("doc"))
        outcome = self._call(
            f"(() => {{ const g = __aotuiGeneric; const el = g.element({ident}, {doc}); "
            f"if (!el) return {{gone: true}}; return {{value: ({body})}}; }})()"
        )
        if outcome.get("gone"):
            what = self._seen.get("role") or "element"
            name = self._seen.get("name")
            named = f" {json.dumps(name, ensure_ascii=False)}" if name else ""
            raise AotuiError(
                ErrorCode.E_STALE_STATE,
                f"{_ref(ident)} (the {what}{named} you read) is no longer on the page; "
                "nothing was done. Pull a new snapshot and use its refs",
                {"ref": _ref(ident)},
            )
        return outcome.get("value")

    def _refused(self, args: Any, why: str) -> AotuiError:
        what = self._seen.get("role") or "element"
        return AotuiError(ErrorCode.E_INVALID_CMD, f"the {what} you named {why}")

    def _click_at(self, ident: int) -> None:
        """A trusted click at the element's centre; the DOM's own click where it is covered."""
        point = self._on(ident, "g.point(el)")
        if point and point.get("reaches"):
            self._mouse("mouseMoved", {"x": point["x"], "y": point["y"]})
            # The pointer over it may move or hide it (a hover effect, a :hover picture not
            # loaded yet): the click aims again, after the page settles while it is not hit.
            moved = self._on(ident, "g.point(el)")
            for _ in range(_AIMS):
                if moved and moved.get("reaches"):
                    break
                self._settle("the pointer's move")
                moved = self._on(ident, "g.point(el)")
            point = moved
        if not point or not point.get("reaches"):
            self._on(ident, "el.click()")
            return
        where = {"x": point["x"], "y": point["y"]}
        self._mouse("mousePressed", {**where, "button": "left", "clickCount": 1})
        self._mouse("mouseReleased", {**where, "button": "left", "clickCount": 1})

    def _mouse(self, kind: str, params: dict[str, Any]) -> None:
        self._cdp("Input.dispatchMouseEvent", {"type": kind, **params})

    def _key(self, spec: str) -> None:
        """Press ``spec`` (``Enter``, ``a``, ``Control+a``, ``Shift+Tab``) as trusted events."""
        *mods, key = spec.split("+") if spec not in ("+",) and len(spec) > 1 else [spec]
        bits = 0
        for mod in mods:
            if mod not in _MODIFIERS:
                raise _bad_key(spec, f"{mod!r} is not a modifier (Alt, Control, Meta, Shift)")
            bits |= _MODIFIERS[mod]
        key = _ALIASES.get(key, key)
        if key in KEYS:
            code, vk, text = KEYS[key]
        elif len(key) == 1:
            upper = key.upper()
            code = f"Key{upper}" if upper.isalpha() else f"Digit{key}" if key.isdigit() else ""
            vk, text = ord(upper) if upper.isalnum() and upper.isascii() else 0, key
        else:
            raise _bad_key(spec, "name one key: Enter, Tab, Escape, an arrow, or one character")
        if bits & ~8:  # with Alt, Control or Meta a key is a shortcut, not text
            text = ""
        down: dict[str, Any] = {"key": key, "code": code, "windowsVirtualKeyCode": vk}
        down["modifiers"] = bits
        if text:
            down |= {"text": text, "unmodifiedText": text}
        self._cdp("Input.dispatchKeyEvent", {"type": "keyDown" if text else "rawKeyDown", **down})
        up = {"type": "keyUp", "key": key, "code": code, "windowsVirtualKeyCode": vk}
        self._cdp("Input.dispatchKeyEvent", {**up, "modifiers": bits})

    def _settle(self, what: str) -> None:
        timeout_ms = int(self.settle_timeout_s * 1000)
        settled = self._call(
            f"__aotuiGeneric.settle({INPUT_QUIET_MS}, {timeout_ms})",
            await_promise=True,
            timeout_s=self.settle_timeout_s + self.call_timeout_s,
        )
        if settled is not True:
            raise AotuiError(
                ErrorCode.E_TIMEOUT,
                f"the page never settled after {what}: its DOM kept changing for "
                f"{self.settle_timeout_s:g} s. The {what} was delivered; pull to see the page",
            )

    def _call(
        self, expression: str, *, await_promise: bool = False, timeout_s: float | None = None
    ) -> Any:
        """``expression``'s JSON value in the isolated world (made again after a navigation)."""
        for attempt in (0, 1):
            world = self._world if self._world is not None else self._make_world()
            try:
                reply = self._cdp(
                    "Runtime.evaluate",
                    {
                        "expression": expression,
                        "contextId": world,
                        "returnByValue": True,
                        "awaitPromise": await_promise,
                    },
                    timeout_s,
                )
            except CDPError as exc:
                # The document was replaced: its world went with it. One new world, one retry.
                self._world = None
                if attempt:
                    raise AotuiError(
                        ErrorCode.E_APP_ERROR, f"the page could not be read: {exc.message}"
                    ) from None
                continue
            details = reply.get("exceptionDetails")
            if details:
                text = details.get("exception", {}).get("description") or details.get("text")
                if attempt == 0 and "__aotuiGeneric" in str(text):
                    self._world = None
                    continue
                raise AotuiError(ErrorCode.E_APP_ERROR, f"the page could not be read: {text}")
            return reply.get("result", {}).get("value")
        return None  # pragma: no cover - the loop returns or raises

    def _cdp(
        self, method: str, params: dict[str, Any], timeout_s: float | None = None
    ) -> dict[str, Any]:
        """One call in the page's session; a page too busy to answer is ``E_TIMEOUT``.

        A closed pipe or a crashed target stays a :class:`~sandbox.cdp.CDPFailure`: the
        worker ends on it and the supervisor restarts the app.
        """
        timeout_s = self.call_timeout_s if timeout_s is None else timeout_s
        try:
            return self.pipe.call(method, params, session=self.session, timeout_s=timeout_s)
        except CDPTimeout:
            raise AotuiError(
                ErrorCode.E_TIMEOUT,
                f"the page did not answer {method} within {timeout_s:g} s: its scripts keep it "
                "busy. What was asked may have been delivered; pull to see the page",
            ) from None

    def _make_world(self) -> int:
        """An isolated world in the page's main frame with generic.js evaluated in it."""
        tree = self._cdp("Page.getFrameTree", {})
        frame = tree["frameTree"]["frame"]["id"]
        made = self._cdp("Page.createIsolatedWorld", {"frameId": frame, "worldName": _WORLD})
        world = int(made["executionContextId"])
        self._cdp("Runtime.evaluate", {"expression": self._source, "contextId": world})
        self._world = world
        self._listened = set()
        return world


def _ref(ident: int) -> str:
    return f"{REF_NAME}[{ident}]"


def _bad_key(spec: str, why: str) -> AotuiError:
    return AotuiError(ErrorCode.E_INVALID_CMD, f"--key {spec!r}: {why}", {"arg": "key"})
