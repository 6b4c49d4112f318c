"""WebMCP tools of a page as operations: a real browser (``sandbox/browser.py``) on pages each
test serves through the CDP ``Fetch`` domain, listed, rendered and run by ``sandbox/webmcp.py``."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.sandbox import browser
from aotui.sandbox.cdp import CDPTimeout, Pipe
from aotui.sandbox.render import render_view
from aotui.sandbox.web_generic import OPERATIONS, GenericPage
from aotui.sandbox.webmcp import MAX_TOOLS, PageTools
from aotui.sandbox.webmcp_schema import ToolRefused, check_input, map_tool

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(
        browser.find_browser() is None,
        reason=f"no headless browser installed ({browser.INSTALL_HINT})",
    ),
]

ORIGIN = "https://webmcp.aotui.invalid"

#: A page written for WebMCP alone: one imperative tool, one form the agent fills and the user
#: submits, one that submits itself; two view roots so each tool finds its own.
PAGE = """<!doctype html><html><body>
<main view="Board" key="board"><h1>Board</h1><ul id="notes"></ul></main>
<section view="Editor" key="editor">
  <form toolname="add_note" tooldescription="Add a note to the board" id="add">
    <input name="title" required toolparamdescription="The note's title">
    <input name="count" type="number" min="1">
    <select name="color"><option>red</option><option>blue</option></select>
    <button>Add</button>
  </form>
  <form toolname="clear-board" tooldescription="Remove every note" toolautosubmit id="clear">
    <button>Clear</button>
  </form>
</section>
<script>
window.calls = [];
const notes = document.getElementById('notes');
const add = (text) => { const li = document.createElement('li'); li.textContent = text;
                        notes.append(li); return notes.children.length; };
document.modelContext.registerTool({
  name: 'tag_notes', description: 'Tag every note',
  inputSchema: {type: 'object', required: ['tags'], properties: {
    tags: {type: 'array', items: {type: 'string'}, description: 'Tags to add'},
    level: {type: 'integer', minimum: 1, maximum: 3}, mode: {enum: ['append', 'replace']}}},
  execute: async (input) => {
    window.calls.push(input);
    if (input.tags.includes('boom')) throw new Error('no boom tags\\nsecond line');
    if (input.tags.includes('hang')) return new Promise(() => {});
    for (const li of notes.children) li.textContent += ' #' + input.tags.join(' #');
    return {content: [{type: 'text', text: 'tagged ' + notes.children.length}]};
  }}, {signal: (window.tagging = new AbortController()).signal});
document.getElementById('add').addEventListener('submit', (event) => {
  const data = new FormData(event.target);
  window.calls.push({submitted: data.get('title'), agent: event.agentInvoked});
  event.preventDefault();
  const n = add(data.get('title') + ' x' + (data.get('count') || 1) + ' ' + data.get('color'));
  event.respondWith(Promise.resolve({notes: n}));
});
document.getElementById('clear').addEventListener('submit', (event) => {
  event.preventDefault(); notes.replaceChildren(); event.respondWith(Promise.resolve('cleared'));
});
</script></body></html>"""


class Page:
    """One browser tab on a page served from memory, and its :class:`PageTools`."""

    def __init__(self, pipe: Pipe, session: str, tools: PageTools) -> None:
        self.pipe, self.session, self.tools = pipe, session, tools

    def load(self, html: str, path: str = "/index.html") -> None:
        """Navigate to ``path`` on :data:`ORIGIN` and answer it with ``html``."""
        self.pipe.call(
            "Fetch.enable", {"patterns": [{"urlPattern": f"{ORIGIN}/*"}]}, session=self.session
        )
        # Page.navigate answers once the response is in: send it without waiting for it.
        self.pipe._next_id += 1
        message = {"id": self.pipe._next_id, "method": "Page.navigate", "sessionId": self.session}
        message["params"] = {"url": ORIGIN + path}
        self.pipe._write(json.dumps(message).encode() + b"\0", time.monotonic() + 5)
        paused = self.pipe.wait_event("Fetch.requestPaused", session=self.session)
        self.pipe.call(
            "Fetch.fulfillRequest",
            {
                "requestId": paused["requestId"],
                "responseCode": 200,
                "responseHeaders": [{"name": "Content-Type", "value": "text/html"}],
                "body": base64.b64encode(html.encode()).decode(),
            },
            session=self.session,
        )
        self.pipe.wait_event("Page.loadEventFired", session=self.session)
        self.settle()

    def settle(self, quiet_s: float = 0.2) -> None:
        """Read events for ``quiet_s``, then feed the tools every event, in order."""
        with contextlib.suppress(CDPTimeout):
            self.pipe.wait_event("(none)", session=self.session, timeout_s=quiet_s)
        for event in self.pipe.events():
            self.tools.on_event(event)

    def js(self, expression: str) -> Any:
        reply = self.pipe.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=self.session,
        )
        return reply["result"].get("value")

    def view_html(self, key: str) -> str:
        """The view root's ``outerHTML`` with its tools' operations, as the runtime renders it."""
        html = self.js(f"document.querySelector('[key=\"{key}\"]').outerHTML")
        return self.tools.decorate(html, key)


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    running = browser.launch(str(tmp_path))
    try:
        target = running.pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = running.pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for method in ("Page.enable", "Runtime.enable"):
            running.pipe.call(method, session=session)
        tools = PageTools(running.pipe, session, log=logged.append)
        assert tools.enable()
        yield Page(running.pipe, session, tools)
    finally:
        running.close()


logged: list[str] = []


def test_the_browser_exposes_webmcp_with_the_flag_the_runtime_launches_it_with(page: Page) -> None:
    page.load(PAGE)
    assert page.js("'modelContext' in document && window.isSecureContext") is True
    names = [t.name for t in page.tools.tools()]
    assert sorted(names) == ["add_note", "clear-board", "tag_notes"]


def test_tools_are_operations_of_their_view_with_their_schema_as_args(page: Page) -> None:
    page.load(PAGE)
    # The form belongs to the view around it; the imperative tool to the page's first view.
    assert page.tools.placement() == {
        "add_note": "editor", "clear_board": "editor", "tag_notes": "board"
    }  # fmt: skip
    editor = render_view(page.view_html("editor")).markdown
    assert "- [Add Note](operation:add_note)" in editor
    assert "Add a note to the board — title: The note's title; count: ≥ 1;" in editor
    assert 'color: one of "red", "blue"' in editor
    assert "        - title: string\n        - count?: integer\n        - color?: string" in editor
    # A form the user submits asks the user first; one that submits itself does not.
    add_block = editor.split("(operation:add_note)")[1].split("- [")[0]
    assert "Asks the user first" in add_block
    assert "Asks the user first" not in editor.split("(operation:clear_board)")[1]
    board = render_view(page.view_html("board")).markdown
    assert "- [Tag Notes](operation:tag_notes)" in board
    assert "        - tags: string\n        - level?: integer\n        - mode?: string" in board
    assert "tags: Tags to add, JSON array" in board
    assert "add_note" not in board


def test_an_imperative_tool_runs_in_the_page_and_answers_with_its_output(page: Page) -> None:
    page.load(PAGE)
    page.js("document.getElementById('notes').innerHTML = '<li>a</li><li>b</li>'")
    result = page.tools.invoke("tag_notes", {"tags": '["x", "y"]', "level": 2})
    assert result == {"content": [{"type": "text", "text": "tagged 2"}]}
    assert page.js("[...document.querySelectorAll('#notes li')].map(li => li.textContent)") == [
        "a #x #y", "b #x #y"
    ]  # fmt: skip
    assert page.js("window.calls") == [{"tags": ["x", "y"], "level": 2}]


def test_a_declarative_form_is_filled_and_submitted_and_its_response_is_the_result(
    page: Page,
) -> None:
    page.load(PAGE)
    assert page.tools.invoke("add_note", {"title": "milk", "count": 2, "color": "blue"}) == {
        "notes": 1
    }
    assert page.js("document.getElementById('notes').textContent") == "milk x2 blue"
    # The browser's own submit event, marked as the agent's.
    assert page.js("window.calls") == [{"submitted": "milk", "agent": True}]
    assert page.tools.invoke("clear_board", {}) == "cleared"
    assert page.js("document.getElementById('notes').children.length") == 0


def test_arguments_are_checked_against_the_schema_before_the_tool_runs(page: Page) -> None:
    page.load(PAGE)
    wrong: list[tuple[str, dict[str, Any], str]] = [
        ("tag_notes", {"tags": "x"}, "--tags expects JSON text of an array"),
        ("tag_notes", {"tags": '{"a": 1}'}, "--tags expects JSON text of an array"),
        ("tag_notes", {"tags": "[]", "level": 4}, "--level must be at most 3, got 4"),
        ("tag_notes", {"tags": "[]", "mode": "merge"}, '--mode must be one of "append", "replace"'),
        ("tag_notes", {"level": 1}, "missing required argument --tags (string)"),
        ("tag_notes", {"tags": "[]", "extra": 1}, "unknown argument --extra"),
        ("add_note", {"title": "t", "count": 0}, "--count must be at least 1, got 0"),
        ("add_note", {"title": "t", "color": "green"}, '--color must be one of "red", "blue"'),
    ]
    for op, args, words in wrong:
        with pytest.raises(AotuiError) as caught:
            page.tools.invoke(op, args)
        assert caught.value.code is ErrorCode.E_INVALID_CMD, (op, args)
        assert words in caught.value.message, caught.value.message
    # The page's own validation: a form field it requires, left empty, is refused by the form.
    with pytest.raises(AotuiError) as caught:
        page.tools.invoke("add_note", {"title": ""})
    assert caught.value.code is ErrorCode.E_INVALID_CMD
    assert "the form of add_note refused the values: title:" in caught.value.message
    assert page.js("window.calls") == []


def test_a_tool_that_throws_fails_the_operation_and_one_that_never_answers_times_out(
    page: Page,
) -> None:
    page.load(PAGE)
    with pytest.raises(AotuiError) as caught:
        page.tools.invoke("tag_notes", {"tags": '["boom"]'})
    assert caught.value.code is ErrorCode.E_APP_ERROR
    assert caught.value.message == "tool tag_notes failed: Error: no boom tags"
    started = time.monotonic()
    with pytest.raises(AotuiError) as caught:
        page.tools.invoke("tag_notes", {"tags": '["hang"]'}, timeout_s=0.5)
    assert caught.value.code is ErrorCode.E_TIMEOUT
    assert "tool tag_notes gave no answer within 0.5 s (canceled)" in caught.value.message
    assert time.monotonic() - started < 3
    # The page still answers the next call.
    assert page.tools.invoke("tag_notes", {"tags": '["ok"]'})["content"][0]["text"] == "tagged 0"


def test_the_list_follows_the_page(page: Page) -> None:
    page.load(PAGE)
    page.js("window.tagging.abort(); document.getElementById('clear').remove()")
    page.settle()
    assert [t.op_id for t in page.tools.tools()] == ["add_note"]
    with pytest.raises(AotuiError) as caught:
        page.tools.invoke("tag_notes", {"tags": "[]"})
    assert caught.value.code is ErrorCode.E_NOT_FOUND
    assert "no longer offers operation tag_notes; pull a new snapshot" in caught.value.message
    # A new document has only its own tools (Chromium sends no toolsRemoved for the old one).
    page.load(
        "<html><body><main view='Other'>x</main><script>document.modelContext"
        ".registerTool({name: 'only', description: 'd', execute: () => 1})</script>"
    )
    assert [t.op_id for t in page.tools.tools()] == ["only"]
    assert page.tools.placement() == {"only": "Other"}
    assert page.tools.invoke("only", {}) == 1


def test_a_page_without_view_roots_puts_its_tools_on_the_generic_view(page: Page) -> None:
    page.load(
        "<html><body><form toolname='find' tooldescription='Search' toolautosubmit>"
        "<input name='q'></form><script>document.forms[0].onsubmit = (e) => {"
        "e.preventDefault(); e.respondWith(Promise.resolve('found ' + e.target.q.value))}"
        "</script>"
    )
    assert page.tools.placement() == {"find": None}
    assert 'operation="find"' in page.tools.operations_html(None)
    assert page.tools.operations_html("anything") == ""
    assert page.tools.invoke("find", {"q": "<b>x</b>"}) == "found <b>x</b>"


def test_names_and_schemas_map_onto_the_args_grammar() -> None:
    tool = map_tool({
        "name": "add-todo item", "description": "Add", "frameId": "F",
        "inputSchema": {"type": "object", "required": ["first name"], "properties": {
            "first name": {"type": ["string", "null"]},
            "n": {"type": "number", "multipleOf": 1},
            "ratio": {"type": "number"},
            "done": {"type": "boolean"},
            "size": {"anyOf": [{"const": 1}, {"const": 2}]},
            "meta": {"type": "object"},
            "anything": {},
        }},
        "annotations": {"consequential": True},
    })  # fmt: skip
    assert (tool.op_id, tool.label, tool.confirm, tool.node) == (
        "add_todo_item", "Add Todo Item", True, None
    )  # fmt: skip
    assert json.loads(tool.args_json) == {
        "first_name": "string", "n?": "integer", "ratio?": "number", "done?": "boolean",
        "size?": "integer", "meta?": "string", "anything?": "string",
    }  # fmt: skip
    assert check_input(tool, {"first_name": "Ann", "meta": '{"a": [1]}', "anything": "plain"}) == {
        "first name": "Ann", "meta": {"a": [1]}, "anything": "plain"
    }  # fmt: skip
    assert check_input(tool, {"first_name": "A", "anything": "[1, 2]"})["anything"] == [1, 2]
    with pytest.raises(AotuiError, match=r"--size must be one of 1, 2, got 3"):
        check_input(tool, {"first_name": "A", "size": 3})
    refused: list[dict[str, Any]] = [
        {"name": "", "frameId": "F"},
        {"name": "--", "frameId": "F"},
        {"name": "t" * 65, "frameId": "F"},
        {"name": "t", "inputSchema": {"properties": {"p" * 65: {}}}},
        {"name": "t", "inputSchema": {"properties": {"a b": {}, "a_b": {}}}},
        {"name": "t", "inputSchema": {"properties": {f"p{i}": {} for i in range(40)}}},
        {"name": "t", "inputSchema": {"properties": {"p": {"description": "x" * 20_000}}}},
        {"name": "t", "inputSchema": "nope"},
    ]
    for raw in refused:
        with pytest.raises(ToolRefused):
            map_tool(raw)


def test_an_operation_the_markup_declares_hides_the_tool_of_its_id(page: Page) -> None:
    page.load(
        "<html><body><main view='Board'><button operation='tag'>Mine</button></main>"
        "<script>for (const name of ['tag', 'sort']) document.modelContext.registerTool("
        "{name, description: name, execute: () => name})</script>"
    )
    root = page.js("document.querySelector('[view]').outerHTML")
    board = render_view(page.tools.decorate(root, "Board"))
    assert [op.op_id for op in board.operations] == ["tag", "sort"]
    assert board.operations[0].label == "Mine"  # the page's own, dispatched to the page
    assert not page.tools.offers("Board", "tag")
    assert page.tools.offers("Board", "sort")
    assert not page.tools.offers("Other", "sort")
    assert not page.tools.offers(None, "sort")


def test_a_page_that_patches_the_dom_cannot_misplace_or_block_its_tools(page: Page) -> None:
    hostile = PAGE.replace(
        "<script>",
        "<script>Element.prototype.closest = () => null;"
        "Document.prototype.querySelectorAll = () => [];"
        "HTMLFormElement.prototype.checkValidity = () => { throw new Error('patched'); };"
        "HTMLFormElement.prototype.requestSubmit = () => {};",
        1,
    )
    page.load(hostile)
    assert page.tools.placement()["add_note"] == "editor"
    assert page.tools.invoke("add_note", {"title": "milk"}, timeout_s=3) == {"notes": 1}
    # A new document gets a world of its own.
    page.load(hostile)
    assert page.tools.placement()["add_note"] == "editor"
    assert page.tools.invoke("add_note", {"title": "tea"}, timeout_s=3) == {"notes": 1}


def test_the_webmcp_only_page_offers_its_tools_on_the_generic_view(page: Page) -> None:
    app = Path(__file__).parent / "apps" / "webmcp_page"
    page.load((app / "index.html").read_text())
    tools = page.tools
    assert {t.op_id: t.confirm for t in tools.tools()} == {
        "find_item": False, "clear_list": True, "add_item": False, "remove_item": False
    }  # fmt: skip
    assert set(tools.placement().values()) == {None}  # no view root: the generic view's
    view = render_view(f"<main view='Pantry'>{tools.operations_html(None)}</main>").markdown
    assert "- [Add Item](operation:add_item)\n    - Description: Add an item" in view
    assert "        - name: string\n        - quantity?: integer" in view
    assert tools.invoke("add_item", {"name": "milk"})["content"][0]["text"] == "milk: 1"
    assert tools.invoke("add_item", {"name": "milk", "quantity": 2})["content"][0]["text"] == (
        "milk: 3"
    )
    tools.invoke("add_item", {"name": "oat milk"})
    assert tools.invoke("find_item", {"text": "milk"}) == ["milk", "oat milk"]
    assert page.js("document.getElementById('found').textContent") == "Found: milk, oat milk"
    with pytest.raises(AotuiError, match="tool remove_item failed: Error: tea is not on the list"):
        tools.invoke("remove_item", {"name": "tea"})
    assert tools.invoke("clear_list", {}) == "cleared"
    assert page.js("localStorage.getItem('items')") == "[]"


def test_the_webmcp_only_page_reads_and_runs_through_the_generic_view(page: Page) -> None:
    app = Path(__file__).parent / "apps" / "webmcp_page"
    page.load(
        (app / "index.html")
        .read_text()
        .replace(
            "</script>",
            "document.modelContext.registerTool({name: 'scroll', description: 'mine',"
            " execute: () => 'mine'});</script>",
        )
    )
    generic = GenericPage(page.pipe, page.session)
    tools = page.tools
    assert tools.invoke("add_item", {"name": "milk"})["content"][0]["text"] == "milk: 1"
    view = render_view(tools.decorate(generic.render(), None))
    assert view.markdown.startswith("# Pantry\n- milk × 1\n")
    ids = [op.op_id for op in view.operations]
    assert ids == [*OPERATIONS, "add_item", "remove_item", "find_item", "clear_list"]
    assert "name: What to buy, at least 1 character; quantity:" in view.markdown
    # The generic view's own scroll hides the page's tool of that name; the rest are tools.
    assert not tools.offers(None, "scroll")
    assert all(tools.offers(None, op) for op in ids[len(OPERATIONS) :])
    with pytest.raises(AotuiError, match="--name needs at least 1 character, got 0"):
        tools.invoke("add_item", {"name": ""})


def test_the_docs_example_renders_as_the_docs_say(page: Page) -> None:
    docs = (Path(__file__).parent.parent / "docs" / "web-apps.md").read_text()
    section = docs[docs.index("## WebMCP tools") :]
    html = section.split("```html\n", 1)[1].split("```", 1)[0]
    markdown = section.split("```markdown\n", 1)[1].split("```", 1)[0]
    page.load(f"<html><body>{html}</body></html>")
    root = page.js("document.querySelector('[view]').outerHTML")
    assert render_view(page.tools.decorate(root, "Pantry")).markdown == markdown


def test_events_say_when_the_views_need_a_new_render() -> None:
    read_end, write_end = os.pipe()
    pipe = Pipe(write_end, read_end)
    lines: list[str] = []
    tools = PageTools(pipe, "S", log=lines.append)
    try:
        many = [{"name": f"t{i}", "frameId": "F"} for i in range(MAX_TOOLS + 2)]
        added = {"method": "WebMCP.toolsAdded", "sessionId": "S", "params": {"tools": many}}
        assert tools.on_event(added) is True
        assert len(tools.tools()) == MAX_TOOLS
        assert lines == [
            f"WebMCP tool 't{i}' is not offered: the page already offers {MAX_TOOLS} tools"
            for i in (MAX_TOOLS, MAX_TOOLS + 1)
        ]
        assert tools.on_event({**added, "sessionId": "other"}) is False
        answered = {"invocationId": "1", "status": "Completed"}
        assert tools.on_event({"method": "WebMCP.toolResponded", "params": answered}) is False
        assert tools.on_event({"method": "Page.loadEventFired", "params": {}}) is False
        child = {"frame": {"id": "C", "parentId": "F"}}
        assert tools.on_event({"method": "Page.frameNavigated", "params": child}) is True
        assert len(tools.tools()) == MAX_TOOLS
        main = {"frame": {"id": "F"}}
        assert tools.on_event({"method": "Page.frameNavigated", "params": main}) is True
        assert tools.tools() == ()
    finally:
        pipe.close()
