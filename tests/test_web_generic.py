"""The generic rendering of a page with no aotui marks (issue 22; the Browser app of issue 23).

A real headless browser reads pages a loopback server of the test serves; the agent's side is the
desktop's own: each command is parsed by the command grammar, its refs resolved by the registry's
resolver against the view as last rendered, and the call handed to ``GenericPage.handle``.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import re
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aotui.protocol.args import coerce_args, parse_arg_schema
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.grammar import parse_commands
from aotui.protocol.structure import sanitize
from aotui.sandbox import browser, web_generic
from aotui.sandbox.render import RenderedView, render_view
from aotui.sandbox.sdk import OperationCall
from aotui.sandbox.web_generic import GenericPage
from aotui.supervisor.desktop.desktop import _resolver

pytestmark = pytest.mark.skipif(
    browser.find_browser() is None,
    reason=f"no headless browser installed ({browser.INSTALL_HINT})",
)

#: The npm package of the TodoMVC apps, and where `make test` (and CI) leave its tarball.
TODOMVC = "todomvc@0.1.1"
TODOMVC_TARBALL = Path(__file__).resolve().parents[1] / ".venv" / "todomvc-0.1.1.tgz"
REF = re.compile(r"\(control:(page\[[0-9]+\])\)")
FRAMEWORKS = ("vanillajs", "react", "backbone", "angularjs", "emberjs")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def served(directory: Path) -> Iterator[str]:
    """``directory`` served on a loopback port the kernel picks; its base URL."""
    handler = functools.partial(_Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[browser.Browser]:
    """A browser of this test's own (unconfined: the sandbox has suites of its own)."""
    profile = tmp_path / "profile"
    profile.mkdir()
    b = browser.launch(str(profile))
    try:
        yield b
    finally:
        b.close()


class Agent:
    """Reads a page as the desktop shows it and acts on it through desktop commands only."""

    def __init__(self, b: browser.Browser, url: str) -> None:
        self.pipe = b.pipe
        target = b.pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        reply = b.pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        self.session: str = reply["sessionId"]
        self.pipe.call("Page.enable", session=self.session)
        self.page = GenericPage(b.pipe, self.session)
        self.seen: RenderedView | None = None
        self.navigate(url)

    def navigate(self, url: str) -> None:
        self.pipe.call("Page.navigate", {"url": url}, session=self.session)
        self.pipe.wait_event("Page.loadEventFired", session=self.session, timeout_s=30)
        self.page._settle("loading")

    def pull(self) -> str:
        """The page's Markdown; its refs are what the next command resolves against."""
        self.seen = render_view(self.page.render())
        return self.seen.markdown

    def run(self, text: str) -> Any:
        """``text`` (one execute command, no context) as the desktop would run it."""
        assert self.seen is not None, "pull before acting, as an agent does"
        (command,) = parse_commands(
            f'<context app_id="app_0" view_id="view_0">execute {text}</context>'
        )
        spec = next(op for op in self.seen.operations if op.op_id == command.target)
        coerced = coerce_args(
            # The registry's resolver reads refs, keys and ref_types: a rendered view has them.
            parse_arg_schema(spec.args),
            command.args,
            _resolver(self.seen, "view_0"),  # type: ignore[arg-type]
        )
        call = OperationCall(command.target, coerced.args, coerced.stable_keys)
        return self.page.handle(call)

    def ref(self, role: str, name: str = "") -> str:
        """The ref of the control the agent sees with ``role`` (and ``name``)."""
        assert self.seen is not None
        for ref, value in self.seen.refs.items():
            if value and value["role"] == role and (not name or value["name"] == name):
                return ref
        raise AssertionError(f"no {role} {name!r} in:\n{self.seen.markdown}")

    def evaluate(self, expression: str) -> Any:
        reply = self.pipe.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=self.session,
        )
        return reply["result"].get("value")


def item_ref(markdown: str, text: str) -> str:
    """The ref on the line of ``text``, or on the item line just above it (a nested block)."""
    lines = markdown.splitlines()
    for at, line in enumerate(lines):
        if text in line:
            found = REF.findall(line) or REF.findall(lines[at - 1])
            assert found, f"no ref by {text!r} in:\n{markdown}"
            return str(found[-1])
    raise AssertionError(f"no {text!r} in:\n{markdown}")


def page(tmp_path: Path, body: str, head: str = "") -> Path:
    """A directory holding ``index.html`` with ``body``."""
    root = tmp_path / "site"
    root.mkdir(exist_ok=True)
    html = f"<!doctype html><html><head><title>Shop</title>{head}</head><body>{body}</body></html>"
    (root / "index.html").write_text(html)
    return root


# --- the renderer's one extension -----------------------------------------------------------------


def test_an_indexed_entity_is_a_ref_like_an_item_and_cannot_share_a_lists_name() -> None:
    view = render_view(
        '<section view="P"><p>Hi <button entity="control:page[12]" data-value=\'{"n": 1}\'>'
        "Sign in</button></p></section>"
    )
    assert view.markdown == "Hi [Sign in](control:page[12])\n"
    assert (view.refs, view.keys, view.ref_types) == (
        {"page[12]": {"n": 1}},
        {"page[12]": "page[12]"},
        {"page[12]": "control"},
    )
    for html in (
        '<b entity="c:x[1]">a</b><ul list="t[]:x"><li key="k">a</li></ul>',
        '<ul list="t[]:x"><li key="k">a</li></ul><b entity="c:x[0]">a</b>',
    ):
        html = f'<section view="P">{html}</section>'
        with pytest.raises(AotuiError, match='"x'):
            render_view(html)
    with pytest.raises(AotuiError, match="is not valid"):
        render_view('<section view="P"><b entity="c:x[01]">a</b></section>')


# --- reading --------------------------------------------------------------------------------------

SHOP = """
<h1>Shop</h1>
<p>Welcome <strong>back</strong>. <a href="/help">Help</a></p>
<div style="display:none"><button>Hidden by display</button></div>
<div aria-hidden="true"><button>Hidden from readers</button></div>
<p style="visibility:hidden">Invisible text</p>
<button style="width:0;height:0;padding:0;border:0;overflow:hidden">Zero</button>
<div style="height:0;overflow:hidden"><p>Clipped away</p></div>
<form>
  <label for="q">Search</label><input id="q" name="q">
  <label><input type="checkbox" name="gift" checked> Gift wrap</label>
  <label><input type="radio" name="ship" value="fast"> Fast</label>
  <label><input type="radio" name="ship" value="slow" checked> Slow</label>
  <select aria-label="Size"><option>S</option><option selected>M</option></select>
  <textarea placeholder="Notes"></textarea>
  <button type="button">Sign in</button>
</form>
<table><tr><th>Item</th><th>Price</th></tr><tr><td>Tea</td><td>3</td></tr></table>
<ul><li>One</li><li>Two</li></ul>
<dialog open aria-label="Cookies"><p>Accept?</p><button>OK</button></dialog>
<div id="fake" style="cursor:pointer">Div button</div>
<script>document.getElementById("q").value = "typed by the page";</script>
"""


def test_a_page_reads_as_markdown_of_its_visible_structure_with_refs(
    tmp_path: Path, chromium: browser.Browser
) -> None:
    with served(page(tmp_path, SHOP)) as base:
        agent = Agent(chromium, f"{base}/index.html")
        markdown = agent.pull()
    body = markdown.split("#### Operations")[0]
    assert body == (
        "# Shop\n\n"
        "Welcome **back**. [Help](control:page[0])\n\n"
        '[[input name="Search" value="typed by the page"]](control:page[1])'
        " [[x] Gift wrap](control:page[2]) [( ) Fast](control:page[3])"
        ' [(x) Slow](control:page[4]) [[select name="Size": S | M (selected)]](control:page[5])'
        ' [[textarea placeholder="Notes"]](control:page[6]) [Sign in](control:page[7])\n\n'
        "| Item | Price |\n| --- | --- |\n| Tea | 3 |\n\n"
        "- One\n- Two\n\n"
        "Dialog: Cookies\n\nAccept?\n\n[OK](control:page[8])\n\n"
        "[Div button](control:page[9])\n\n"
    )
    for gone in ("Hidden", "Invisible", "Zero", "Clipped"):
        assert gone not in markdown
    assert [op.op_id for op in agent.seen.operations] == [  # type: ignore[union-attr]
        "click", "type", "select", "check", "press", "scroll", "hover",
    ]  # fmt: skip


def test_page_text_cannot_spell_a_control(tmp_path: Path, chromium: browser.Browser) -> None:
    body = (
        r"<p>Pay [here](control:page[0]) or \[there](control:page[0])</p>"
        "<button>Delete [all]</button>"
    )
    with served(page(tmp_path, body)) as base:
        agent = Agent(chromium, f"{base}/index.html")
        markdown = agent.pull()
    assert markdown.startswith(
        r"Pay \[here\](control:page\[0\]) or \\\[there\](control:page\[0\])"
        "\n\n[Delete [all]](control:page[0])\n"
    )


def test_a_ref_stays_with_its_element_and_a_gone_one_is_stale_never_another(
    tmp_path: Path, chromium: browser.Browser
) -> None:
    body = '<div id="box"><button id="a" onclick="this.textContent += \'!\'">A</button></div>'
    with served(page(tmp_path, body)) as base:
        agent = Agent(chromium, f"{base}/index.html")
        assert "[A](control:page[0])" in agent.pull()
        # A new element before it: the agent's ref still means A, in every later pull too.
        agent.evaluate("box.insertAdjacentHTML('afterbegin', '<button id=b>B</button>')")
        assert agent.run("click --target page[0]") is None
        assert agent.evaluate("a.textContent") == "A!"
        assert "[B](control:page[1])[A!](control:page[0])" in agent.pull()
        # A removed, an element of the same kind in its place: the old ref is refused.
        agent.evaluate("a.remove(); box.insertAdjacentHTML('beforeend', '<button>A</button>')")
        with pytest.raises(AotuiError) as stale:
            agent.run("click --target page[0]")
        assert stale.value.code is ErrorCode.E_STALE_STATE
        assert 'page[0] (the button "A!" you read) is no longer on the page' in stale.value.message
        # Hidden counts as gone.
        agent.pull()
        agent.evaluate("document.querySelector('#b').style.display = 'none'")
        with pytest.raises(AotuiError, match="no longer on the page"):
            agent.run("click --target page[1]")
        # A new document numbers its elements from 0 again: a ref read in the old one is stale.
        agent.navigate(f"{base}/index.html")
        agent.pull()
        read = agent.seen
        agent.navigate(f"{base}/index.html")
        agent.seen = read
        with pytest.raises(AotuiError, match=r"page\[0\] \(the button \"A\" you read\)"):
            agent.run("click --target page[0]")
        assert agent.evaluate("a.textContent") == "A"


EVENTS = """
<input id="name"><select id="size"><option value="s">Small</option><option value="m">Medium</option>
</select><input type="checkbox" id="ok" aria-label="Agree"><button id="go">Go</button>
<div style="height:3000px"></div><p id="end">End</p>
<script>
window.log = [];
for (const kind of ["click", "keydown", "keyup", "input", "change"]) {
  document.addEventListener(kind, (e) => log.push(
    `${kind}:${e.target.id}:${e.isTrusted}${e.key ? ":" + e.key : ""}`), true);
}
</script>
"""


def test_the_operations_reach_the_page_as_trusted_events(
    tmp_path: Path, chromium: browser.Browser
) -> None:
    with served(page(tmp_path, EVENTS)) as base:
        agent = Agent(chromium, f"{base}/index.html")
        agent.pull()
        name, size = agent.ref("textbox"), agent.ref("combobox")
        ok, go = agent.ref("checkbox", "Agree"), agent.ref("button", "Go")
        agent.run(f"type --target {name} --text 'Ada' --submit")
        agent.run(f"type --target {name} --text 'Ada Lovelace'")
        agent.run(f"select --target {size} --value Medium")
        agent.run(f"check --target {ok}")
        agent.run(f"check --target {ok}")  # already checked: nothing happens
        agent.run(f"click --target {go}")
        agent.run(f"press --key Tab --target {go}")
        assert agent.evaluate(
            "['name', 'size', 'ok'].map((i) => document.getElementById(i))"
            ".map((e) => e.type === 'checkbox' ? e.checked : e.value)"
        ) == ["Ada Lovelace", "m", True]
        log = agent.evaluate("log")
        assert "input:name:true" in log
        assert "keydown:name:true:Enter" in log
        assert log.count("click:ok:true") == 1
        assert "click:go:true" in log
        assert "keydown:go:true:Tab" in log
        assert "change:size:false" in log  # a select's list is drawn by the browser, not the page
        agent.run("scroll --direction bottom")
        assert agent.evaluate("scrollY") > 1000
        agent.pull()
        with pytest.raises(AotuiError, match="has no option 'Large'") as bad:
            agent.run(f"select --target {size} --value Large")
        assert bad.value.code is ErrorCode.E_INVALID_CMD
        with pytest.raises(AotuiError, match="not one of down, up, top, bottom"):
            agent.run("scroll --direction sideways")
        with pytest.raises(AotuiError, match="'Hyper' is not a modifier"):
            agent.run("press --key Hyper+a")


def test_a_page_that_never_settles_is_a_timeout_naming_it(
    tmp_path: Path, chromium: browser.Browser
) -> None:
    # The page changes its DOM in every task turn (for 5 s), not on a timer: a 5 ms interval
    # left a 12 ms quiet gap whenever a loaded machine ran the renderer late, and the page
    # "settled". A posted message queues behind settle's own, so no two of its turns are quiet.
    spin = """
        function spin() {
          const channel = new MessageChannel(), end = performance.now() + 5000;
          channel.port1.onmessage = () => {
            document.body.dataset.n = Math.random();
            if (performance.now() < end) channel.port2.postMessage(0);
          };
          channel.port2.postMessage(0);
        }"""
    body = f'<script>{spin}</script><button onclick="spin()">Spin</button>'
    with served(page(tmp_path, body)) as base:
        agent = Agent(chromium, f"{base}/index.html")
        agent.page.settle_timeout_s = 0.5
        agent.pull()
        with pytest.raises(AotuiError, match="the page never settled after click") as late:
            agent.run("click --target page[0]")
        assert late.value.code is ErrorCode.E_TIMEOUT


@pytest.mark.timeout(60)
def test_a_page_too_busy_to_answer_is_a_timeout_not_a_hang(
    tmp_path: Path, chromium: browser.Browser
) -> None:
    body = '<button onclick="setTimeout(() => { for (;;) {} }, 0)">Freeze</button>'
    with served(page(tmp_path, body)) as base:
        agent = Agent(chromium, f"{base}/index.html")
        agent.page.settle_timeout_s = agent.page.call_timeout_s = 0.5
        agent.pull()
        with pytest.raises(AotuiError, match=r"did not answer .* its scripts keep it busy") as busy:
            agent.run("click --target page[0]")
        assert busy.value.code is ErrorCode.E_TIMEOUT
        with pytest.raises(AotuiError) as again:
            agent.pull()
        assert again.value.code is ErrorCode.E_TIMEOUT


# --- what Playwright MCP gives a ref, and MiniWoB's task types need --------------------------

#: Clicks, with whether they were trusted, logged on the page's ``log``.
LOG = (
    "<script>window.log = []; const note = (w) => (e) => log.push(`${w}:${e.isTrusted}`);</script>"
)

FIGURE = """
<svg width="200" height="120" onclick="log.push('figure')">
  <circle id="c" cx="20" cy="20" r="16" fill="red" style="cursor:pointer"/>
  <rect id="r" x="50" y="12" width="8" height="8" fill="#0000f0" style="cursor:pointer"/>
  <text id="t" x="80" y="30" fill="green" font-size="24" style="cursor:pointer">q</text>
  <circle id="ring" cx="150" cy="60" r="40" fill="none" stroke="black" stroke-width="8"
          pointer-events="stroke" style="cursor:pointer"/>
  <text x="10" y="110">Axis</text>
</svg>
<script>
for (const id of ["c", "r", "t", "ring"]) document.getElementById(id).addEventListener("click",
  (e) => { log.push(`${id}:${e.isTrusted}`); e.stopPropagation(); });
</script>
"""


def test_inline_svg_shapes_get_refs_named_by_kind_size_colour_and_text(
    tmp_path: Path, chromium: browser.Browser
) -> None:
    with served(page(tmp_path, LOG + FIGURE)) as base:
        agent = Agent(chromium, f"{base}/index.html")
        markdown = agent.pull()
        # Kind (or its text), then size among the figure's shapes and the colour's name.
        for label in (
            "[circle (large red)](control:page[",
            "[rectangle (small blue)](control:page[",
            "[q (large green)](control:page[",
            "[circle (large black)](control:page[",
        ):
            assert label in markdown, markdown
        assert "Axis" in markdown  # a figure's words read as text
        # A click lands on the shape, where it is hit: a ring's centre is not on it.
        for name in ("circle (large red)", "q (large green)", "circle (large black)"):
            agent.run(f"click --target {agent.ref('button', name)}")
        assert agent.evaluate("log") == ["c:true", "t:true", "ring:true"]


CSS_ICONS = """
<style>
  .icon { display: inline-block; width: 14px; height: 14px; background: #888; }
  .menu:hover { cursor: pointer; }
</style>
<div class="post">Ada @ada
  <span class="icon reply"></span><span class="icon" title="Retweet"></span>
  <span class="menu"><span class="icon more"></span></span>
  <p>Saved <span class="icon ui-icon ui-icon-disk"></span></p>
  <div><span class="icon ui-icon ui-icon-gripsmall"></span></div>
  <div class="row"><span class="minus">-</span> 1 <span class="plus">+</span></div>
</div>
<script>
for (const el of document.querySelectorAll(".reply, [title], .more, .minus, .plus")) {
  el.addEventListener("click", note(el.className || el.title));
}
document.querySelector(".row").addEventListener("click", () => log.push("row"));
</script>
"""


def test_elements_the_page_listens_to_get_refs_named_by_text_title_or_class(
    tmp_path: Path, chromium: browser.Browser
) -> None:
    with served(page(tmp_path, LOG + CSS_ICONS)) as base:
        agent = Agent(chromium, f"{base}/index.html")
        markdown = agent.pull()
        for label in ("[reply]", "[Retweet]", "[more]", "[-]", "[+]"):
            assert f"{label}(control:page[" in markdown, markdown
        # The row listens too, but holds controls of its own: it is their container.
        assert "[- 1 +]" not in markdown
        # An icon without a listener in a line of text reads as a picture named by its
        # classes; alone (a resize handle), it is left out.
        assert "Saved [image: disk]" in markdown
        assert "gripsmall" not in markdown
        agent.run(f"click --target {agent.ref('button', 'reply')}")
        agent.run(f"click --target {agent.ref('button', '+')}")
        assert agent.evaluate("log") == ["icon reply:true", "plus:true", "row"]


def test_listened_elements_past_the_per_read_bound_are_marked_at_the_next_read(
    tmp_path: Path, chromium: browser.Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_generic, "MAX_LISTENED", 2)
    body = (
        "<span>a</span> <span>b</span> <span>c</span><script>for (const s of"
        " document.querySelectorAll('span')) s.addEventListener('click', () => {});</script>"
    )
    with served(page(tmp_path, body)) as base:
        agent = Agent(chromium, f"{base}/index.html")
        assert len(REF.findall(agent.pull())) == 2  # two resolved in this read
        assert len(REF.findall(agent.pull())) == 3  # and the third in the next


CONTROLS = """
<textarea id="t" disabled>Terms</textarea><input placeholder="Name" disabled>
<button disabled>Agree</button><div role="button" aria-disabled="true">Go</div>
<fieldset disabled><label><input type="checkbox"> Keep</label></fieldset>
<label for="s">Count</label><input id="s" role="spinbutton" value="3"><button>Submit</button>
"""


def test_disabled_controls_say_so_and_an_input_reads_by_its_type(
    tmp_path: Path, chromium: browser.Browser
) -> None:
    with served(page(tmp_path, CONTROLS)) as base:
        agent = Agent(chromium, f"{base}/index.html")
        markdown = agent.pull()
    assert '[[textarea value="Terms" disabled]](control:page[0])' in markdown
    assert '[[input placeholder="Name" disabled]](control:page[1])' in markdown
    assert "[Agree (disabled)](control:page[2])[Go (disabled)](control:page[3])" in markdown
    assert "[[ ] Keep (disabled)](control:page[4])" in markdown
    # A spinner's field (role spinbutton) is still a field with its value, named by its label.
    assert '[[input name="Count" value="3"]](control:page[5])' in markdown


LIST = """
<select id="m" multiple aria-label="Pick" size="4">
  <option>Alpha</option><option selected>Beta</option><option>Gamma</option>
  <option value="dj">Doe, Jane</option>
</select>
"""


def test_a_multiple_select_takes_several_values_comma_separated(
    tmp_path: Path, chromium: browser.Browser
) -> None:
    chosen = "[...document.getElementById('m').selectedOptions].map((o) => o.text)"
    with served(page(tmp_path, LIST)) as base:
        agent = Agent(chromium, f"{base}/index.html")
        agent.pull()
        pick = agent.ref("combobox", "Pick")
        agent.run(f"select --target {pick} --value 'Alpha, gamma'")
        assert agent.evaluate(chosen) == ["Alpha", "Gamma"]  # exactly those: Beta is off
        assert "Alpha (selected) | Beta | Gamma (selected)" in agent.pull()
        agent.run(f"select --target {pick} --value 'Doe, Jane'")  # an option's own comma
        assert agent.evaluate(chosen) == ["Doe, Jane"]
        with pytest.raises(AotuiError, match="has no option 'Delta' nor 'Zeta'") as bad:
            agent.run(f"select --target {pick} --value 'Beta, Delta, Zeta'")
        assert bad.value.code is ErrorCode.E_INVALID_CMD
        assert agent.evaluate(chosen) == ["Doe, Jane"]  # nothing was selected


def test_a_fields_value_keeps_the_spaces_at_its_ends(
    tmp_path: Path, chromium: browser.Browser
) -> None:
    body = (
        '<input id="i"><textarea id="t"></textarea><script>i.value = "foo ";'
        ' t.value = " a  b\\nc \\u202e";</script>'
    )
    with served(page(tmp_path, body)) as base:
        agent = Agent(chromium, f"{base}/index.html")
        markdown = agent.pull()
    shown = sanitize(markdown, lines=True, limit=None)  # what the desktop shows the agent
    assert '[[input value="foo "]](control:page[0])' in shown
    # Inner runs are one space, as all text; the override (U+202E) is gone, the ends are not.
    assert '[[textarea value=" a b c "]](control:page[1])' in shown


MENUS = """
<style>
  #tree li { cursor: pointer; }
  #sub { display: none; }
</style>
<ul id="tree"><li>Docs<ul style="display: none"><li>a.txt</li></ul></li><li>b.txt</li></ul>
<div role="menu"><div role="menuitem" id="play" aria-haspopup="true">Playback</div>
<div id="sub" role="menu"><div role="menuitem">Stop</div></div></div>
<script>
play.addEventListener("mouseenter", () => { sub.style.display = "block"; });
document.querySelector("#tree li").addEventListener("click", (e) => {
  e.currentTarget.querySelector("ul").style.display = "block";
});
</script>
"""


def test_hover_opens_a_hover_menu_and_folders_read_closed_or_open(
    tmp_path: Path, chromium: browser.Browser
) -> None:
    with served(page(tmp_path, MENUS)) as base:
        agent = Agent(chromium, f"{base}/index.html")
        markdown = agent.pull()
        assert "- [Docs ▸](control:page[0])\n- [b.txt](control:page[1])" in markdown
        assert "[Playback ▸](control:page[2])" in markdown
        assert "Stop" not in markdown
        assert agent.run("hover --target page[2]") is None
        assert "[Stop](control:page[" in agent.pull()
        agent.run("click --target page[0]")
        assert "- [Docs ▾](control:page[0])\n    - [a.txt](control:page[" in agent.pull()


AGREEMENT = """
<textarea id="t" style="height: 40px">%s</textarea><input id="n" disabled>
<script>t.addEventListener("scroll", () => {
  if (t.scrollTop + t.clientHeight >= t.scrollHeight - 2) n.disabled = false;
});</script>
""" % ("word " * 300)


def test_scroll_with_a_target_and_a_direction_scrolls_within_it(
    tmp_path: Path, chromium: browser.Browser
) -> None:
    with served(page(tmp_path, AGREEMENT)) as base:
        agent = Agent(chromium, f"{base}/index.html")
        agent.pull()
        area = agent.ref("textbox", "")
        agent.run(f"scroll --target {area} --direction bottom")
        assert agent.evaluate("t.scrollTop") > 100
        assert "[[input]](control:page[1])" in agent.pull()  # enabled by the page


MOVING = """
<style>
  #wrap { width: 400px; height: 40px; }
  #b { display: inline-block; width: 60px; height: 30px; transition: none; }
  #wrap:hover #b { transform: translateX(200px); }
</style>
<div id="wrap"><span id="b">Go</span></div>
<script>b.addEventListener("click", note("b"));
wrap.addEventListener("click", note("wrap"));</script>
"""


def test_a_click_aims_again_when_the_pointer_moved_the_element(
    tmp_path: Path, chromium: browser.Browser
) -> None:
    with served(page(tmp_path, LOG + MOVING)) as base:
        agent = Agent(chromium, f"{base}/index.html")
        agent.pull()
        agent.run(f"click --target {agent.ref('button', 'Go')}")
        assert agent.evaluate("log") == ["b:true", "wrap:true"]


# --- TodoMVC ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def todomvc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The npm package's examples, unpacked; fetched with `npm pack` when not cached."""
    tarball = Path(os.environ.get("AOTUI_TODOMVC_TARBALL", TODOMVC_TARBALL))
    if not tarball.is_file():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip(f"npm is not installed to fetch {TODOMVC} (apt-get install npm)")
        where = tmp_path_factory.mktemp("npm")
        subprocess.run(
            [npm, "pack", TODOMVC, "--pack-destination", str(where), "--silent"],
            check=True,
            timeout=300,
            capture_output=True,
        )
        tarball = next(where.glob("todomvc-*.tgz"))
    root = tmp_path_factory.mktemp("todomvc")
    with tarfile.open(tarball) as archive:
        # Debian's Python 3.11.2 has no extraction filters (3.11.4 added filter="data"): take
        # regular files and directories by hand, each inside root.
        members = [
            m
            for m in archive.getmembers()
            if (m.isfile() or m.isdir())
            and not m.name.startswith("/")
            and ".." not in Path(m.name).parts
        ]
        archive.extractall(root, members=members)
    return root / "package" / "examples"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_todomvc_add_three_complete_one_filter_active(
    framework: str, todomvc: Path, chromium: browser.Browser
) -> None:
    with served(todomvc / framework) as base:
        agent = Agent(chromium, f"{base}/index.html")
        first = agent.pull()
        assert "# todos" in first
        new = agent.ref("textbox")
        for todo in ("buy milk", "walk the dog", "write code"):
            agent.run(f"type --target {new} --text '{todo}' --submit")
            agent.pull()  # some frameworks draw the field anew: read its ref again
            new = agent.ref("textbox")
        listed = agent.pull()
        assert all(todo in listed for todo in ("buy milk", "walk the dog", "write code"))
        assert "**3** items left" in listed
        box = item_ref(listed, "walk the dog")
        agent.run(f"check --target {box}")
        done = agent.pull()
        assert "**2** items left" in done
        assert "Clear completed (1)" in done
        changed = agent.run(f"click --target {agent.ref('link', 'Active')}")
        assert changed == {"url": f"{base}/index.html#/active"}
        active = agent.pull()
        assert "buy milk" in active
        assert "write code" in active
        assert "walk the dog" not in active
        assert "**2** items left" in active
        if framework == "vanillajs":  # docs/web-apps.md shows this very page
            assert active.startswith(DOCS_EXAMPLE), active


#: The TodoMVC page docs/web-apps.md shows under "Pages without marks".
DOCS_EXAMPLE = (
    (Path(__file__).resolve().parents[1] / "docs" / "web-apps.md")
    .read_text()
    .split("## Pages without marks", 1)[1]
    .split("```\n", 2)[1]
)
