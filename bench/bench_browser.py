"""The Browser app (issue 23) beside Playwright MCP, on offline corpora, in one run.

Ours: a real desktop with the bundled Browser (a copy granted ``net:http:localhost``, the desktop's
``allow_private_http`` on, as tests/test_browser_app.py starts it), driven as an agent drives it:
``execute`` of a tab's operations, ``snapshot`` of the tab's view. The peer: Playwright MCP
(npm ``@playwright/mcp``) on the same Debian Chromium (``--headless --isolated``, stdio), driven by
the official MCP Python SDK client. Both read the same pages from one loopback ``http.server`` of
the bench, page by page, interleaved (ours, then the peer's).

Corpora, all offline:

- **MiniWoB++** (pip ``miniwob``): its task pages, each served with one added script that seeds
  its random generator and starts the episode on load (the page otherwise shows only a START
  cover), so that both sides read the same generated task.
- **TodoMVC** (npm ``todomvc@0.1.1``, the tarball ``make test`` leaves in ``.venv``): five
  frameworks; two states each: empty, and after add 3, complete 1, filter Active. The task then
  clears the completed todo and each side's page is checked (the two open todos, under All too).
- **Large documents**: Debian ``python3-doc``'s biggest HTML pages.

Figures (medians and p50s of this run):

1. **tokens of the first observation** (cl100k, ``bpe-openai``): ours is the tab's view as
   ``snapshot --app --view`` returns it to the agent, counted with the tab's operations list and
   without it (the list is the same on every page: an agent that keeps it from an earlier pull
   does not need it again); the peer's is ``browser_snapshot``'s text (``browser_navigate``
   answers with a link to a file, not the snapshot). Over MiniWoB pages and TodoMVC states.
   And what an agent in a session reads after each navigate: the pull ``since`` its previous
   one (CONTRACT §4), where the tab's unchanged lines, its operations among them, fold to one
   line each run — as the peer's tool list is sent once per session, not in every snapshot.
2. **large documents**: the same, with the Browser's default budget (a long page folds what is
   far from its viewport to its headings); and whether every visible heading of the document
   (``h1``-``h6`` the peer's browser finds visible) is a heading line of ours (matched by text).
3. **coverage**: of the elements the peer gives a ref (``[ref=eN]``) on the MiniWoB pages, the
   share that have a ref in ours, matched by role and name (see :func:`match`); for all of them
   and for the actionable ones only (an interactive role, or ``[cursor=pointer]``); and the text
   the peer shows that ours shows nowhere.
4. **navigate + first observation**: ours ``navigate`` + the pull since the last; the peer's
   ``browser_navigate`` + ``browser_snapshot``.
5. **an action + its reply**: on TodoMVC, type (with Enter), check and click; ours is the
   ``execute`` (its answer is what changed), and, beside it, the ``execute`` plus the pull of
   the tab's diff (what the agent reads next); the peer's ``browser_type`` / ``browser_click``
   (whose answer carries what changed of its snapshot), and beside it the action plus a whole
   ``browser_snapshot``. Also: an operation that changes nothing, and navigate's execute alone.

Beside them, where it is installed (npm ``agent-browser`` in ``.venv/agentb``, or on ``PATH``),
Vercel's ``agent-browser`` CLI on the same Chromium: the tokens of ``open`` + ``snapshot`` (and
of ``snapshot -i``, interactive elements only) and the time of the two commands, on every
other MiniWoB page, the empty TodoMVC apps and the documents; its actions are not timed (each
command is a process of its CLI).

Run: ``python bench/bench_browser.py [--quick] [--verbose] [--dump DIR]`` (~3 min; ``--quick``:
30 MiniWoB pages, 2 TodoMVC frameworks, 2 documents; ``--verbose``: every element missed;
``--dump``: every observation, ours and the peer's, written to ``DIR``).
"""

from __future__ import annotations

import argparse
import contextlib
import html.parser
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aotui.protocol.errors import AotuiError  # noqa: E402
from aotui.sandbox import browser  # noqa: E402
from aotui.supervisor.manifest import BUNDLED_APPS_DIR  # noqa: E402
from bench.bench_desktop import Desktop, _pct  # noqa: E402
from bench.loopback import Quiet, serve  # noqa: E402

GOALS = {"tokens": 0.5, "docs": 0.25, "coverage": 1.0, "navigate": 0.5, "action": 30.0}
TODOMVC_TARBALL = ROOT / ".venv" / "todomvc-0.1.1.tgz"
FRAMEWORKS = ("vanillajs", "react", "backbone", "angularjs", "emberjs")
PYDOC = Path("/usr/share/doc/python3-doc/html")
DOCUMENTS = (
    "library/os.html",
    "library/stdtypes.html",
    "howto/logging-cookbook.html",
    "reference/datamodel.html",
    "library/typing.html",
)
QUICK_MINIWOB = 30
#: agent-browser reads every n-th MiniWoB page (and every TodoMVC app and document).
AGENT_BROWSER_EVERY = 2
TODOS = ("buy milk", "walk the dog", "write code")
#: Added to each MiniWoB task page: the same task on both sides, started, and never timing out.
MINIWOB_START = (
    "<script>Math.seedrandom('aotui-bench'); core.EPISODE_MAX_TIME = 3600000;"
    "window.addEventListener('load', () => core.startEpisodeReal());</script></body>"
)
#: Playwright's interactive roles: what an agent acts on.
ACTIONABLE = {
    "button", "link", "checkbox", "radio", "switch", "tab", "menuitem", "menuitemcheckbox",
    "menuitemradio", "option", "textbox", "searchbox", "combobox", "slider", "spinbutton",
    "treeitem", "listbox",
}  # fmt: skip
#: What a page that fails on one side raises: it is listed under "not measured", the run goes on.
_FAILURES = (AotuiError, RuntimeError, OSError, TimeoutError)
_TEXT_ROLES = {"textbox", "searchbox", "spinbutton", "combobox"}
_BOX_ROLES = {"checkbox", "radio", "switch", "menuitemcheckbox", "menuitemradio"}
_OUR_REF = re.compile(r"\[((?:[^\[\]]|\[[^\]]*\])*)\]\(control:(page\[\d+\])\)")
_PEER_LINE = re.compile(
    r"^\s*-\s*'?(?P<role>[a-z]+)(?: \"(?P<name>(?:[^\"\\]|\\.)*)\")?(?P<rest>[^\n]*?)"
    r"\[ref=(?P<ref>[a-z0-9]+)\](?P<tail>[^\n]*)$"
)


def _encoder() -> Any:
    try:
        import bpe_openai
    except ImportError:
        sys.exit("bench_browser needs bpe-openai (the bench extra): pip install -e '.[bench]'")
    return bpe_openai.get_encoding("cl100k_base")


# --- the corpora, on loopback ---------------------------------------------------------------------


def _miniwob_dir() -> Path | None:
    try:
        import miniwob
    except ImportError:
        return None
    return Path(miniwob.__file__).parent / "html"


def _unpack_todomvc(into: Path) -> Path | None:
    if not TODOMVC_TARBALL.is_file():
        return None
    with tarfile.open(TODOMVC_TARBALL) as archive:
        members = [
            m
            for m in archive.getmembers()
            if (m.isfile() or m.isdir())
            and not m.name.startswith("/")
            and ".." not in Path(m.name).parts
        ]
        archive.extractall(into, members=members)
    return into / "package" / "examples"


class _Site(Quiet):
    """The corpora under one root; MiniWoB task pages with :data:`MINIWOB_START` added."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path.startswith("/miniwob/miniwob/") and path.endswith(".html"):
            local = Path(self.translate_path(path))
            if local.is_file():
                body = local.read_text().replace("</body>", MINIWOB_START, 1).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
        super().do_GET()


@contextlib.contextmanager
def _serve(directory: Path) -> Iterator[str]:
    with serve(directory, _Site) as port:
        yield f"http://localhost:{port}"  # by name: the Browser's grant is net:http:localhost


# --- ours -----------------------------------------------------------------------------------------


class Ours:
    """A desktop with the Browser, one tab, read and driven through the desktop's commands."""

    def __init__(self, tmp: Path) -> None:
        app = Path(shutil.copytree(BUNDLED_APPS_DIR / "browser", tmp / "browser"))
        manifest = json.loads((app / "aoapp.json").read_text())
        manifest["permissions"] = ["net:http:localhost"]
        (app / "aoapp.json").write_text(json.dumps(manifest))
        self.desktop = Desktop([app], allow_private_http=True)
        self.client = self.desktop.client
        self.client.execute("<context>open --application app_0</context>")
        shown = self.client.snapshot(include_instructions=False)
        block = shown[shown.index('<application id="app_0"') :]
        views = re.findall(r'<view id="(view_\d+)" name="([^"]*)">', block)
        self.view = next(view for view, name in views if name != "Tabs")
        self.last = ""
        #: The last navigate's execute alone, in ms (without the pull that follows it).
        self.navigated = 0.0
        #: What the agent read after the last navigate in its session: a pull since its last
        #: one, where the tab's unchanged lines (its operations) fold to one line.
        self.session_text = ""

    def close(self) -> None:
        self.desktop.close()

    def run(self, command: str) -> Any:
        context = f'<context app_id="app_0" view_id="{self.view}">execute {command}</context>'
        return self.client.execute(context)["results"][0]

    def pull(self) -> str:
        self.last = self.client.snapshot(app="app_0", view=self.view)
        return self.last

    def diff(self, since: str) -> str:
        return self.client.snapshot(since=since, app="app_0", view=self.view)

    def navigate(self, url: str) -> tuple[float, str]:
        """Navigate and read the page as an agent in a session does (a pull since its last);
        the time of both, and the whole view (read untimed: refs and coverage need it)."""
        since = self.client.snapshot_id
        began = time.perf_counter()
        self.run(f"navigate --url {url}")
        self.navigated = (time.perf_counter() - began) * 1000
        self.session_text = self.diff(since) if since else self.pull()
        took = (time.perf_counter() - began) * 1000
        return took, self.pull()

    def refs(self) -> list[OurRef]:
        """Every ref the last pull shows."""
        return [our_ref(label, ref) for label, ref in _OUR_REF.findall(self.last)]


def without_operations(text: str) -> str:
    """A tab's view without its operations list (the same on every page)."""
    head, sep, tail = text.partition("\n#### Operations\n")
    if not sep:
        return text
    return head + "\n" + tail[tail.index("</view>") :]


@dataclass
class OurRef:
    """A ref of ours as the agent reads it: its kind (text, box, select or click), its name."""

    kind: str
    name: str
    ref: str
    options: tuple[str, ...] = ()


def our_ref(label: str, ref: str) -> OurRef:
    """A ref's label as our Markdown shows it (sandbox/controls.py): ``[input …]``,
    ``[textarea …]``, ``[select name="…": a | b (selected)]``, ``[ ]``/``[x]``/``( )``/``(x)``
    and a name, else the text of what is clicked."""
    inner = label.strip()
    if inner.startswith("[select"):
        head, _, listed = inner[1:-1].partition(": ")
        options = tuple(o.removesuffix(" (selected)").strip() for o in listed.split(" | "))
        quoted = re.findall(r'"((?:[^"\\]|\\.)*)"', head)
        return OurRef("select", " ".join(quoted), ref, options if listed else ())
    if inner.startswith(("[input", "[textarea")):
        quoted = re.findall(r'"((?:[^"\\]|\\.)*)"', inner)
        return OurRef("text", " ".join(q for q in quoted if q), ref)
    box = re.match(r"^(?:\[[ xX]\]|\([ xX]\))\s*(.*)$", inner)
    if box:
        return OurRef("box", _bare(box.group(1)), ref)
    return OurRef("click", _bare(re.sub(r"\\([\\\[\]])", r"\1", inner)), ref)


#: What our label adds to a control's name (sandbox/assets/generic.js): its icon's picture
#: before it; its state (disabled, a closed or open menu or folder) or, for an SVG shape, its
#: size and colour after it.
_ICON = re.compile(r"^(?:\[image: [^\]]*\]\s*)+")
_STATE = re.compile(r"(?: \(disabled\)| [▸▾]| \((?:(?:small|large) )?[a-z]+\))+$")


def _bare(name: str) -> str:
    return _STATE.sub("", _ICON.sub("", name)) or name


# --- the peer -------------------------------------------------------------------------------------


def _peer_command() -> list[str] | None:
    for place in (ROOT / ".venv" / "pwmcp", ROOT / ".venv"):
        found = place / "node_modules" / ".bin" / "playwright-mcp"
        if found.is_file():
            return [str(found)]
    found_on_path = shutil.which("playwright-mcp")
    return [found_on_path] if found_on_path else None


class Peer:
    """Playwright MCP over stdio, through the MCP SDK's client (async)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.last = ""

    async def call(self, tool: str, **args: Any) -> str:
        from mcp import types

        result = await self.session.call_tool(tool, args)
        text = "".join(b.text for b in result.content if isinstance(b, types.TextContent))
        if result.isError or text.startswith("### Error"):
            raise RuntimeError(f"{tool}: {text[:500]}")
        return text

    async def navigate(self, url: str) -> tuple[float, str]:
        began = time.perf_counter()
        said = await self.call("browser_navigate", url=url)
        if "```yaml" not in said:
            said = await self.call("browser_snapshot")
        self.last = said
        return (time.perf_counter() - began) * 1000, said

    def elements(self) -> list[PeerElement]:
        return peer_elements(self.last)


class AgentBrowser:
    """Vercel's ``agent-browser`` CLI (npm), one session of its own on the same Chromium; each
    command is a process of its CLI talking to the session's daemon, as an agent runs it."""

    def __init__(self, command: str, executable: str) -> None:
        self.command = command
        self.env = {
            **os.environ,
            "AGENT_BROWSER_SESSION": f"aotui-bench-{os.getpid()}",
            "AGENT_BROWSER_EXECUTABLE_PATH": executable,
        }
        if os.geteuid() == 0:
            self.env["AGENT_BROWSER_ARGS"] = "--no-sandbox"

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [self.command, *args], capture_output=True, text=True, env=self.env, timeout=60,
            check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"agent-browser {args[0]}: {(done.stderr or done.stdout)[:300]}")
        return done.stdout

    def navigate(self, url: str) -> tuple[float, str]:
        began = time.perf_counter()
        opened = self.run("open", url)
        shown = self.run("snapshot")
        return (time.perf_counter() - began) * 1000, opened + shown

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.run("close")


def _agent_browser_command() -> str | None:
    found = ROOT / ".venv" / "agentb" / "node_modules" / ".bin" / "agent-browser"
    return str(found) if found.is_file() else shutil.which("agent-browser")


@dataclass
class PeerElement:
    role: str
    name: str
    ref: str
    pointer: bool
    content: str = ""

    @property
    def actionable(self) -> bool:
        return self.role in ACTIONABLE or self.pointer

    @property
    def kind(self) -> str:
        if self.role in _TEXT_ROLES:
            return "text"
        return "box" if self.role in _BOX_ROLES else "click"


def peer_elements(text: str) -> list[PeerElement]:
    """Every element of a Playwright snapshot with a ref, with the text it holds."""
    found: list[tuple[int, PeerElement]] = []
    lines = text.splitlines()
    for at, line in enumerate(lines):
        m = _PEER_LINE.match(line)
        if m is None:
            continue
        name = (m["name"] or "").replace('\\"', '"')
        tail = m["tail"]
        if not name and ":" in tail:
            name = tail.split(":", 1)[1].strip().strip("'\"")
        depth = len(line) - len(line.lstrip())
        inside = []
        for below in lines[at + 1 :]:
            if len(below) - len(below.lstrip()) <= depth or below.strip().startswith("```"):
                break
            inside.append(_line_text(below))
        element = PeerElement(m["role"], name, m["ref"], "[cursor=pointer]" in tail)
        element.content = " ".join(t for t in inside if t)
        found.append((depth, element))
    return [element for _depth, element in found]


def _line_text(line: str) -> str:
    """The text a snapshot line shows: its quoted name, or what follows its colon."""
    body = line.strip().removeprefix("- ").strip("'")
    if body.startswith("/"):  # - /url: …, - /placeholder: …
        return ""
    named = re.match(r'^[a-z]+ "((?:[^"\\]|\\.)*)"', body)
    if named:
        return named.group(1)
    if ":" in body:
        return body.split(":", 1)[1].strip().strip("'\"")
    return ""


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("¶", "")).strip().lower()


def _names_match(ours: str, theirs: str) -> bool:
    a, b = _norm(ours), _norm(theirs)
    if not a or not b:
        return False
    if a == b:
        return True
    # A label that starts with the other (an input's placeholder beside its value, a link's
    # text cut at MAX_NAME), and not a word of a long sentence.
    short, long = sorted((a, b), key=len)
    return len(short) >= 3 and long.startswith(short) and len(short) >= len(long) / 2


@dataclass
class Matched:
    """The peer's elements that have a ref in ours, and those that have none."""

    covered: list[PeerElement] = field(default_factory=list)
    through_select: list[PeerElement] = field(default_factory=list)
    #: Nameless elements around a control ours has a ref for (a ``tab`` or ``listitem`` around
    #: its link): one click target to an agent, two refs to the peer.
    wrappers: list[PeerElement] = field(default_factory=list)
    missing: list[PeerElement] = field(default_factory=list)


def match(theirs: list[PeerElement], ours: list[OurRef]) -> Matched:
    """Which of the peer's elements a ref of ours stands for; one of ours stands for one of theirs.

    The peer's actionable elements are matched first, in four passes: the same kind (a text
    field; a check box or radio; a select; anything else, clicked) and the same name (case and
    spaces aside, equal, or one the start of the other and at least half its length); the same
    name, another kind (Playwright calls a clickable ``<div>`` ``generic``, we call it a button);
    our name inside the text the peer's element holds (a clickable row whose name is empty to the
    peer, and ours is its first text); and a nameless one of the same kind. Then the rest by name
    only. A ``listbox``/``combobox`` and its ``option`` elements are one select of ours: the
    options are counted apart (``through_select``): ours reach them by the select's ref
    (``select --target``), not each by a ref of its own."""
    result = Matched()
    free = list(ours)
    pending = []
    for element in theirs:
        select = next(
            (o for o in ours if o.kind == "select" and element.role == "option"
             and any(_names_match(x, element.name) for x in o.options)),
            None,
        )  # fmt: skip
        if select is not None:
            result.through_select.append(element)
        else:
            pending.append(element)

    def same(o: OurRef, e: PeerElement) -> bool:
        if o.kind == "select":
            return e.role in ("listbox", "combobox")
        return o.kind == e.kind

    passes = (
        lambda o, e: same(o, e) and _names_match(o.name, e.name),
        lambda o, e: _names_match(o.name, e.name),
        lambda o, e: not e.name and bool(_norm(o.name)) and _norm(o.name) in _norm(e.content),
        lambda o, e: not _norm(e.name) and same(o, e),
    )
    for acting in (True, False):
        group = [e for e in pending if e.actionable == acting]
        for test in passes if acting else passes[:2]:
            left = []
            for element in group:
                hit = next((o for o in free if test(o, element)), None)
                if hit is None:
                    left.append(element)
                else:
                    free.remove(hit)
                    result.covered.append(element)
            group = left
        result.missing += group
    inner = [_norm(e.name) for e in result.covered if _norm(e.name)]
    for element in list(result.missing):
        content = _norm(element.content)
        if element.actionable and not _norm(element.name) and content in inner:
            result.missing.remove(element)
            result.wrappers.append(element)
    return result


_VISIBLE_HEADINGS = (
    "() => [...document.querySelectorAll('h1, h2, h3, h4, h5, h6')]"
    ".filter((h) => h.checkVisibility({visibilityProperty: true}))"
    ".map((h) => h.textContent)"
)


def _json_list(text: str) -> set[str] | None:
    """The first JSON list of strings in a tool's answer (``browser_evaluate``'s result)."""
    at = text.find("[")
    while at >= 0:
        try:
            found, _ = json.JSONDecoder().raw_decode(text[at:])
        except ValueError:
            at = text.find("[", at + 1)
            continue
        if isinstance(found, list) and all(isinstance(x, str) for x in found):
            return {_norm(x) for x in found}
        at = text.find("[", at + 1)
    return None


class _Headings(html.parser.HTMLParser):
    """The text of every ``h1``-``h6`` of a document (what "every heading reachable" counts)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self.depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if re.fullmatch(r"h[1-6]", tag):
            self.depth += 1
            if self.depth == 1:
                self.found.append("")

    def handle_endtag(self, tag: str) -> None:
        if re.fullmatch(r"h[1-6]", tag) and self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.found[-1] += data


def document_headings(path: Path) -> list[str]:
    parser = _Headings()
    parser.feed(path.read_text(errors="replace"))
    return [h for h in (_norm(x) for x in parser.found) if h]


def our_headings(text: str) -> set[str]:
    """Our Markdown's heading lines, links and escapes taken out."""
    lines = re.findall(r"^#{1,6} (.+)$", text, re.M)
    plain = (re.sub(r"\[(.*?)\]\(control:page\[\d+\]\)", r"\1", h) for h in lines)
    return {_norm(re.sub(r"\\([\\\[\]*_`])", r"\1", h).replace("`", "")) for h in plain}


class _Skipped(Exception):
    """A peer or the browser is not installed: nothing to measure against."""


# --- the run --------------------------------------------------------------------------------------


@dataclass
class Figures:
    ours_tokens: list[int] = field(default_factory=list)
    ours_tokens_bare: list[int] = field(default_factory=list)
    #: The first observation of a page in a session: the pull since the last (CONTRACT §4).
    ours_tokens_session: list[int] = field(default_factory=list)
    peer_tokens: list[int] = field(default_factory=list)
    doc_rows: list[tuple[str, int, int, int, int, int, list[str]]] = field(default_factory=list)
    ours_nav: list[float] = field(default_factory=list)
    ab_tokens: list[int] = field(default_factory=list)
    ab_tokens_interactive: list[int] = field(default_factory=list)
    ab_nav: list[float] = field(default_factory=list)
    ab_doc_tokens: list[int] = field(default_factory=list)
    #: The ours' observations (without operations) beside which agent-browser's were taken.
    ab_ours_tokens: list[int] = field(default_factory=list)
    peer_nav: list[float] = field(default_factory=list)
    ours_act: list[float] = field(default_factory=list)
    ours_act_diff: list[float] = field(default_factory=list)
    peer_act: list[float] = field(default_factory=list)
    peer_act_snapshot: list[float] = field(default_factory=list)
    ours_act_by: dict[str, list[float]] = field(default_factory=dict)
    peer_act_by: dict[str, list[float]] = field(default_factory=dict)
    ours_floor: list[float] = field(default_factory=list)
    ours_nav_exec: list[float] = field(default_factory=list)
    peer_reply_tokens: list[int] = field(default_factory=list)
    ours_diff_tokens: list[int] = field(default_factory=list)
    lost: list[tuple[str, str, str]] = field(default_factory=list)
    #: Where each observation is written (ours and the peer's), if anywhere (--dump).
    dump: Path | None = None
    covered: int = 0
    through_select: int = 0
    wrappers: int = 0
    #: The TodoMVC task's outcome by side: the frameworks it passed in (or "... FAILED").
    todo_task: dict[str, list[str]] = field(default_factory=dict)
    referenced: int = 0
    covered_actionable: int = 0
    actionable: int = 0
    missing: list[tuple[str, str, str, bool]] = field(default_factory=list)
    larger: list[tuple[str, int, int]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def _observe(
    name: str, ours_text: str, peer_text: str, encoder: Any, figures: Figures, session: str = ""
) -> None:
    if figures.dump is not None:
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        (figures.dump / f"{stem}.ours.md").write_text(ours_text)
        (figures.dump / f"{stem}.peer.yml").write_text(peer_text)
    mine, bare = len(encoder.encode(ours_text)), len(encoder.encode(without_operations(ours_text)))
    theirs = len(encoder.encode(peer_text))
    figures.ours_tokens.append(mine)
    figures.ours_tokens_bare.append(bare)
    if session:
        figures.ours_tokens_session.append(len(encoder.encode(session)))
    figures.peer_tokens.append(theirs)
    if bare > theirs * GOALS["tokens"]:
        figures.larger.append((name, bare, theirs))


def _agent_browser(ab: AgentBrowser | None, url: str, ours_text: str, encoder: Any,
                   figures: Figures, document: bool = False) -> None:  # fmt: skip
    """agent-browser's first observation of the page: ``open`` + ``snapshot`` (timed), and its
    ``snapshot -i`` (interactive elements only) beside it."""
    if ab is None:
        return
    try:
        took, text = ab.navigate(url)
        interactive = ab.run("snapshot", "-i")
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        figures.failures.append(f"agent-browser {url}: {exc}"[:400])
        return
    if document:
        figures.ab_doc_tokens.append(len(encoder.encode(text)))
        return
    figures.ab_nav.append(took)
    figures.ab_tokens.append(len(encoder.encode(text)))
    figures.ab_tokens_interactive.append(len(encoder.encode(interactive)))
    figures.ab_ours_tokens.append(len(encoder.encode(without_operations(ours_text))))


async def _miniwob(ours: Ours, peer: Peer, ab: AgentBrowser | None, base: str, pages: list[str],
                   encoder: Any, figures: Figures) -> None:  # fmt: skip
    for at, task in enumerate(pages):
        url = f"{base}/miniwob/miniwob/{task}.html"
        try:
            took, text = ours.navigate(url)
            peer_took, peer_text = await peer.navigate(url)
        except _FAILURES as exc:  # a page that does not open on one side is listed, not fatal
            figures.failures.append(f"miniwob {task}: {exc}")
            continue
        figures.ours_nav.append(took)
        figures.ours_nav_exec.append(ours.navigated)
        figures.peer_nav.append(peer_took)
        _observe(f"miniwob {task}", text, peer_text, encoder, figures, ours.session_text)
        if at % AGENT_BROWSER_EVERY == 0:  # a CLI process per command: ~1.2 s a page
            _agent_browser(ab, url, text, encoder, figures)
        theirs = peer.elements()
        matched = match(theirs, ours.refs())
        missing = matched.missing
        figures.through_select += len(matched.through_select)
        figures.wrappers += len(matched.wrappers)
        figures.referenced += len(theirs)
        figures.covered += len(matched.covered)
        acting = [e for e in theirs if e.actionable]
        figures.actionable += len(acting)
        figures.covered_actionable += len([e for e in matched.covered if e.actionable])
        figures.missing += [(task, e.role, e.name, e.actionable) for e in missing]
        # Text the peer shows that ours shows nowhere (not only without a ref): content lost.
        plain = re.sub(r"\[((?:[^\[\]]|\[[^\]]*\])*)\]\(control:page\[\d+\]\)", r"\1", text)
        seen = _norm(re.sub(r"\\([\\\[\]*_`])", r"\1", plain).replace("**", ""))
        figures.lost += [
            (task, e.role, e.name) for e in missing if _norm(e.name) and _norm(e.name) not in seen
        ]


def _our_ref(ours: Ours, kind: str, name: str = "") -> str:
    for found in ours.refs():
        if found.kind == kind and (not name or _norm(found.name) == _norm(name)):
            return found.ref
    raise RuntimeError(f"no {kind} {name!r} in ours:\n{ours.last}")


def _our_item_box(ours: Ours, text: str) -> str:
    lines = ours.last.splitlines()
    for at, line in enumerate(lines):
        if text in line:
            found = _OUR_REF.findall(line) or _OUR_REF.findall(lines[at - 1])
            if found:
                return str(found[0][1])  # the box, not the item's other controls
    raise RuntimeError(f"no box by {text!r} in ours:\n{ours.last}")


def _peer_ref(
    peer: Peer, roles: set[str], name: str = "", near: str = "", prefix: bool = False
) -> str:
    lines = peer.last.splitlines()
    for at, line in enumerate(lines):
        m = _PEER_LINE.match(line)
        if m is None or m["role"] not in roles:
            continue
        found = _norm((m["name"] or "").replace('\\"', '"'))
        if name and found != _norm(name) and not (prefix and found.startswith(_norm(name))):
            continue
        if near and not any(near in x for x in lines[max(0, at - 3) : at + 4]):
            continue
        return str(m["ref"])
    raise RuntimeError(f"no {roles} {name!r} near {near!r} in the peer's:\n{peer.last}")


async def _timed_ours(ours: Ours, command: str, figures: Figures, encoder: Any) -> None:
    since = ours.client.snapshot_id
    began = time.perf_counter()
    ours.run(command)
    acted = time.perf_counter()
    diff = ours.diff(since) if since else ours.pull()
    done = time.perf_counter()
    figures.ours_act.append((acted - began) * 1000)
    figures.ours_act_by.setdefault(command.split()[0], []).append((acted - began) * 1000)
    figures.ours_act_diff.append((done - began) * 1000)
    figures.ours_diff_tokens.append(len(encoder.encode(diff)))
    ours.pull()


async def _timed_peer(peer: Peer, tool: str, figures: Figures, encoder: Any, **args: Any) -> None:
    began = time.perf_counter()
    reply = await peer.call(tool, **args)
    acted = time.perf_counter()
    # Its reply may carry a snapshot of what changed only: the next ref comes from a whole one.
    peer.last = await peer.call("browser_snapshot")
    done = time.perf_counter()
    figures.peer_act.append((acted - began) * 1000)
    kind = "type" if tool == "browser_type" else "click"
    figures.peer_act_by.setdefault(kind, []).append((acted - began) * 1000)
    figures.peer_act_snapshot.append((done - began) * 1000)
    figures.peer_reply_tokens.append(len(encoder.encode(reply)))


async def _floor(ours: Ours, figures: Figures, rounds: int = 15) -> None:
    """An operation that changes nothing (scroll to the top of a page at its top): what every
    operation costs before the page does anything."""
    for _ in range(rounds):
        began = time.perf_counter()
        ours.run("scroll --direction top")
        figures.ours_floor.append((time.perf_counter() - began) * 1000)


async def _todomvc(ours: Ours, peer: Peer, ab: AgentBrowser | None, base: str,
                   frameworks: tuple[str, ...], encoder: Any,
                   figures: Figures) -> None:  # fmt: skip
    for framework in frameworks:
        url = f"{base}/todomvc/{framework}/index.html"
        try:
            took, text = ours.navigate(url)
            peer_took, peer_text = await peer.navigate(url)
            figures.ours_nav.append(took)
            figures.peer_nav.append(peer_took)
            _observe(f"todomvc {framework} (empty)", text, peer_text, encoder, figures,
                     ours.session_text)  # fmt: skip
            _agent_browser(ab, url, text, encoder, figures)
            for todo in TODOS:
                new = _our_ref(ours, "text")
                await _timed_ours(ours, f"type --target {new} --text '{todo}' --submit",
                                  figures, encoder)  # fmt: skip
                target = _peer_ref(peer, _TEXT_ROLES)
                await _timed_peer(peer, "browser_type", figures, encoder, element="new todo",
                                  target=target, text=todo, submit=True)  # fmt: skip
            for _ in range(2):  # complete "walk the dog", then again, then again: 3 clicks
                box = _our_item_box(ours, "walk the dog")
                await _timed_ours(ours, f"click --target {box}", figures, encoder)
                target = _peer_ref(peer, {"checkbox"}, near="walk the dog")
                await _timed_peer(peer, "browser_click", figures, encoder, element="toggle",
                                  target=target)  # fmt: skip
            box = _our_item_box(ours, "walk the dog")
            await _timed_ours(ours, f"check --target {box}", figures, encoder)
            target = _peer_ref(peer, {"checkbox"}, near="walk the dog")
            await _timed_peer(peer, "browser_click", figures, encoder, element="toggle",
                              target=target)  # fmt: skip
            await _timed_ours(ours, f"click --target {_our_ref(ours, 'click', 'Active')}",
                              figures, encoder)  # fmt: skip
            target = _peer_ref(peer, {"link"}, name="Active")
            await _timed_peer(peer, "browser_click", figures, encoder, element="Active",
                              target=target)  # fmt: skip
            text = ours.pull()
            peer_text = await peer.call("browser_snapshot")
            _observe(f"todomvc {framework} (task done)", text, peer_text, encoder, figures)
            await _floor(ours, figures)
            await _clear_completed(ours, peer, framework, figures, encoder)
        except _FAILURES as exc:
            figures.failures.append(f"todomvc {framework}: {exc}"[:2000])


async def _clear_completed(ours: Ours, peer: Peer, framework: str, figures: Figures,
                           encoder: Any) -> None:  # fmt: skip
    """The task's last step, then whether each side shows what it should: the two open todos,
    under All too, and no "walk the dog" nor "Clear completed"."""
    clear = next(r.ref for r in ours.refs() if r.name.startswith("Clear completed"))
    await _timed_ours(ours, f"click --target {clear}", figures, encoder)
    target = _peer_ref(peer, {"button"}, name="Clear completed", prefix=True)
    await _timed_peer(peer, "browser_click", figures, encoder, element="Clear", target=target)
    ours.run(f"click --target {_our_ref(ours, 'click', 'All')}")
    await peer.call("browser_click", element="All", target=_peer_ref(peer, {"link"}, name="All"))
    for side, text in (("ours", ours.pull()), ("peer", await peer.call("browser_snapshot"))):
        done = (
            all(todo in text for todo in ("buy milk", "write code"))
            and "walk the dog" not in text
            and "Clear completed" not in text
        )
        figures.todo_task.setdefault(side, []).append(framework if done else f"{framework} FAILED")


async def _documents(ours: Ours, peer: Peer, ab: AgentBrowser | None, base: str,
                     documents: tuple[str, ...], encoder: Any,
                     figures: Figures) -> None:  # fmt: skip
    for document in documents:
        url = f"{base}/pydoc/{document}"
        try:
            took, text = ours.navigate(url)
            peer_took, peer_text = await peer.navigate(url)
        except _FAILURES as exc:
            figures.failures.append(f"document {document}: {exc}"[:2000])
            continue
        figures.ours_nav.append(took)
        figures.peer_nav.append(peer_took)
        _agent_browser(ab, url, text, encoder, figures, document=True)
        shown = await peer.call("browser_evaluate", function=_VISIBLE_HEADINGS)
        visible = _json_list(shown)
        theirs = [h for h in document_headings(PYDOC / document) if visible is None or h in visible]
        ours_headings = our_headings(text)
        unreached = [h for h in theirs if h not in ours_headings]
        figures.doc_rows.append((
            document,
            len(encoder.encode(text)),
            len(encoder.encode(without_operations(text))),
            len(encoder.encode(peer_text)),
            len(theirs),
            len(theirs) - len(unreached),
            unreached,
        ))  # fmt: skip


async def _run(args: argparse.Namespace, encoder: Any, figures: Figures) -> dict[str, Any]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    command = _peer_command()
    if command is None:
        raise _Skipped(
            "Playwright MCP is not installed (mkdir -p .venv/pwmcp && cd .venv/pwmcp && "
            "npm install @playwright/mcp)"
        )
    executable = (browser.find_browser() or ("",))[0]
    if not executable:
        raise _Skipped(f"no headless browser installed ({browser.INSTALL_HINT})")
    miniwob = _miniwob_dir()
    tmp = Path(tempfile.mkdtemp(prefix="aotui-bench-browser-"))
    tmp.chmod(0o755)
    site = tmp / "site"
    site.mkdir()
    info: dict[str, Any] = {}
    pages: list[str] = []
    if miniwob is not None:
        (site / "miniwob").symlink_to(miniwob)
        pages = sorted(p.stem for p in (miniwob / "miniwob").glob("*.html"))
        if args.quick:
            pages = pages[:: max(1, len(pages) // QUICK_MINIWOB)][:QUICK_MINIWOB]
    else:
        figures.failures.append("MiniWoB++ skipped: pip install miniwob")
    examples = _unpack_todomvc(tmp / "todomvc")
    frameworks: tuple[str, ...] = FRAMEWORKS[:2] if args.quick else FRAMEWORKS
    if examples is not None:
        (site / "todomvc").symlink_to(examples)
    else:
        frameworks = ()
        figures.failures.append(f"TodoMVC skipped: no {TODOMVC_TARBALL} (make test fetches it)")
    documents: tuple[str, ...] = DOCUMENTS[:2] if args.quick else DOCUMENTS
    if PYDOC.is_dir():
        (site / "pydoc").symlink_to(PYDOC)
    else:
        documents = ()
        figures.failures.append("documents skipped: apt-get install python3-doc")
    peer_args = ["--headless", "--isolated", "--executable-path", executable]
    peer_args += ["--output-dir", str(tmp / "peer-out")]
    if os.geteuid() == 0:  # Chromium refuses its sandbox as root
        peer_args.append("--no-sandbox")
    server = StdioServerParameters(command=command[0], args=[*command[1:], *peer_args], cwd=tmp)
    ab_command = _agent_browser_command()
    ab = AgentBrowser(ab_command, executable) if ab_command else None
    info["agent_browser"] = ab.run("--version").strip() if ab is not None else ""
    ours = Ours(tmp)
    try:
        with _serve(site) as base:
            async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
                init = await session.initialize()
                info["peer"] = f"{init.serverInfo.name} {init.serverInfo.version}"
                peer = Peer(session)
                # Both browsers warm (the first navigation of each starts a renderer).
                ours.navigate(f"{base}/miniwob/miniwob/click-button.html")
                await peer.navigate(f"{base}/miniwob/miniwob/click-button.html")
                if ab is not None:
                    try:
                        ab.navigate(f"{base}/miniwob/miniwob/click-button.html")
                    except (RuntimeError, subprocess.TimeoutExpired) as exc:
                        figures.failures.append(f"agent-browser skipped: {exc}")
                        ab = None
                began = time.perf_counter()
                await _miniwob(ours, peer, ab, base, pages, encoder, figures)
                info["miniwob_s"] = time.perf_counter() - began
                await _todomvc(ours, peer, ab, base, frameworks, encoder, figures)
                await _documents(ours, peer, ab, base, documents, encoder, figures)
    finally:
        ours.close()
        if ab is not None:
            ab.close()
        shutil.rmtree(tmp, ignore_errors=True)
    info["pages"] = len(pages)
    info["frameworks"] = frameworks
    return info


def _median(values: list[float] | list[int]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def run(quick: bool = False, verbose: bool = False, dump: Path | None = None) -> dict[str, float]:
    """Measure and print the table; returns its figures."""
    import anyio

    encoder = _encoder()
    figures = Figures(dump=dump)
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
    args = argparse.Namespace(quick=quick)
    began = time.perf_counter()
    try:
        info = anyio.run(_run, args, encoder, figures)
    except _Skipped as skipped:
        print(f"bench_browser skipped: {skipped}")
        return {}
    rows: list[tuple[str, str, str, str, str, str]] = []

    def row(name: str, ours: float, peer: float | None, goal: str, met: bool, unit: str) -> None:
        ratio = f"{ours / peer:.2f}×" if peer else ""
        form = "{:,.1f}" if unit else "{:,.0f}"
        theirs = "" if peer is None else form.format(peer) + unit
        rows.append((name, form.format(ours) + unit, theirs, ratio, goal, "yes" if met else "NO"))

    tokens, bare = _median(figures.ours_tokens), _median(figures.ours_tokens_bare)
    peer_tokens = _median(figures.peer_tokens)
    row("first observation tokens, with operations", tokens, peer_tokens, "≤ 0.5× peer",
        tokens <= GOALS["tokens"] * peer_tokens, "")  # fmt: skip
    row("first observation tokens, without operations", bare, peer_tokens, "≤ 0.5× peer",
        bare <= GOALS["tokens"] * peer_tokens, "")  # fmt: skip
    session = _median(figures.ours_tokens_session)
    row("first observation tokens in a session (pull since the last)", session, peer_tokens,
        "≤ 0.5× peer", session <= GOALS["tokens"] * peer_tokens, "")  # fmt: skip
    doc_ours = _median([r[1] for r in figures.doc_rows])
    doc_bare = _median([r[2] for r in figures.doc_rows])
    doc_peer = _median([r[3] for r in figures.doc_rows])
    reach = all(not r[6] for r in figures.doc_rows)
    headings = sum(r[4] for r in figures.doc_rows)
    row("large documents, headings reachable", sum(r[5] for r in figures.doc_rows), headings,
        "every one", reach, "")  # fmt: skip
    row("large documents tokens, with operations", doc_ours, doc_peer,
        "≤ 0.25× peer", doc_ours <= GOALS["docs"] * doc_peer, "")  # fmt: skip
    row("large documents tokens, without operations", doc_bare, doc_peer,
        "≤ 0.25× peer", doc_bare <= GOALS["docs"] * doc_peer, "")  # fmt: skip
    coverage = figures.covered / figures.referenced if figures.referenced else float("nan")
    acting = figures.covered_actionable / figures.actionable if figures.actionable else float("nan")
    row("coverage, every element with a peer ref", coverage * 100, None, "100 %",
        coverage >= 1, " %")  # fmt: skip
    row("coverage, actionable elements", acting * 100, None, "100 %", acting >= 1, " %")
    reached = figures.covered_actionable + figures.through_select + figures.wrappers
    with_select = reached / max(1, figures.actionable)
    row("coverage, actionable, + options via their select, + wrappers", with_select * 100, None,
        "100 %", with_select >= 1, " %")  # fmt: skip
    nav, peer_nav = _pct(figures.ours_nav, 0.5), _pct(figures.peer_nav, 0.5)
    row("navigate + first observation p50", nav, peer_nav, "≤ 0.5× peer",
        nav <= GOALS["navigate"] * peer_nav, " ms")  # fmt: skip
    act, act_diff = _pct(figures.ours_act, 0.5), _pct(figures.ours_act_diff, 0.5)
    peer_act = _pct(figures.peer_act, 0.5)
    row("action + its reply p50", act, peer_act, "≤ 30 ms", act <= GOALS["action"], " ms")
    peer_snap = _pct(figures.peer_act_snapshot, 0.5)
    row("action + reply + diff pull p50 (peer: + snapshot)", act_diff, peer_snap, "≤ 30 ms",
        act_diff <= GOALS["action"], " ms")  # fmt: skip
    widths = [max(len(r[i]) for r in [*rows, _HEADER]) for i in range(6)]
    print(f"Browser (issue 23) vs {info.get('peer', 'Playwright MCP')}, same run; "
          f"{info['pages']} MiniWoB pages, TodoMVC {', '.join(info['frameworks']) or 'none'}, "
          f"{len(figures.doc_rows)} documents; {time.perf_counter() - began:.0f} s")  # fmt: skip
    for r in [_HEADER, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)))
    print(
        f"observations: {len(figures.ours_tokens)}; navigations: {len(figures.ours_nav)}; "
        f"actions: {len(figures.ours_act)} ours, {len(figures.peer_act)} peer's; peer refs on "
        f"MiniWoB: {figures.referenced}, {figures.actionable} actionable, "
        f"{figures.through_select} options of a select, {figures.wrappers} wrappers of a "
        "control ours has; "
        f"action replies (tokens, median): ours' diff {_median(figures.ours_diff_tokens):.0f}, "
        f"the peer's {_median(figures.peer_reply_tokens):.0f}; p95 action ours "
        f"{_pct(figures.ours_act, 0.95):.1f} ms, peer {_pct(figures.peer_act, 0.95):.1f} ms"
    )
    for side, outcome in figures.todo_task.items():
        passed = [f for f in outcome if not f.endswith("FAILED")]
        print(
            f"TodoMVC task (add 3, complete 1, filter Active, clear completed), {side}: passes "
            f"in {len(passed)} of {len(outcome)} ({', '.join(outcome)})"
        )
    if figures.ab_tokens:
        ab_tokens, ab_ours = _median(figures.ab_tokens), _median(figures.ab_ours_tokens)
        print(
            f"{info['agent_browser']} (CLI, same Chromium), on the same pages: first observation "
            f"(open + snapshot) median {ab_tokens:,.0f} tokens (snapshot -i, interactive only: "
            f"{_median(figures.ab_tokens_interactive):,.0f}), ours without operations "
            f"{ab_ours:,.0f} = {ab_ours / ab_tokens:.2f}x; large documents "
            f"{_median(figures.ab_doc_tokens):,.0f} tokens "
            f"(ours {doc_bare / _median(figures.ab_doc_tokens):.2f}x); "
            f"open + snapshot p50 {_pct(figures.ab_nav, 0.5):.1f} ms (two CLI processes; "
            f"ours {nav / _pct(figures.ab_nav, 0.5):.2f}x)"
        )
    else:
        print("agent-browser: not installed (npm install agent-browser), not measured")
    _details(figures, verbose)
    return {
        "browser_tokens_ratio": bare / peer_tokens,
        "browser_tokens_ratio_with_ops": tokens / peer_tokens,
        "browser_tokens_ratio_session": session / peer_tokens,
        "browser_docs_ratio": doc_bare / doc_peer,
        "browser_coverage": coverage,
        "browser_coverage_actionable": acting,
        "browser_navigate_ratio": nav / peer_nav,
        "browser_action_p50_ms": act,
        "browser_action_diff_p50_ms": act_diff,
        "browser_headings_all": float(reach),
    }


_HEADER = ("figure", "ours", "peer", "ratio", "goal", "met?")


def _details(figures: Figures, verbose: bool) -> None:
    """What is behind the table: timings by kind, documents, the pages and elements where ours
    is larger or misses what the peer shows."""
    by = ", ".join(
        f"{kind} {_pct(v, 0.5):.1f} ms (n={len(v)})" for kind, v in figures.ours_act_by.items()
    )
    peer_by = ", ".join(
        f"{kind} {_pct(v, 0.5):.1f} ms (n={len(v)})" for kind, v in figures.peer_act_by.items()
    )
    print(f"action p50 by kind: ours {by}; the peer's {peer_by}")
    if figures.ours_floor:
        print(
            f"an operation that changes nothing (scroll --direction top at the top), p50 "
            f"{_pct(figures.ours_floor, 0.5):.1f} ms; navigate's execute alone (MiniWoB) p50 "
            f"{_pct(figures.ours_nav_exec, 0.5):.1f} ms, the pull after it "
            f"{_pct(figures.ours_nav, 0.5) - _pct(figures.ours_nav_exec, 0.5):.1f} ms"
        )
    print("large documents (tokens: ours with operations / without / peer; headings reached):")
    for document, mine, mine_bare, theirs, headings, reached, unreached in figures.doc_rows:
        print(f"  {document:<28} {mine:>7,} {mine_bare:>7,} {theirs:>8,} "
              f"{mine_bare / theirs:5.2f}×  headings {reached}/{headings}"
              + (f"  unreached: {unreached[:5]}" if unreached else ""))  # fmt: skip
    if figures.larger:
        print(f"observations over 0.5× the peer's (without operations): {len(figures.larger)}")
        for name, mine, theirs in sorted(figures.larger, key=lambda x: x[2] / x[1])[:15]:
            print(f"  {name:<44} ours {mine:>6,}  peer {theirs:>6,}  {mine / theirs:.2f}×")
    if figures.missing:
        kinds: dict[str, int] = {}
        for _task, role, _name, _acting in figures.missing:
            kinds[role] = kinds.get(role, 0) + 1
        print(
            "peer refs with no ref in ours, by role: "
            + ", ".join(f"{role} {n}" for role, n in sorted(kinds.items(), key=lambda k: -k[1]))
        )
        missed = [m for m in figures.missing if m[3]]
        print(f"of them actionable (an interactive role or [cursor=pointer]): {len(missed)}")
        for task, role, name, _acting in missed[: 200 if verbose else 40]:
            print(f"  {task:<32} {role:<12} {name[:60]!r}")
    if figures.lost:
        print(f"text the peer shows that ours shows nowhere ({len(figures.lost)}):")
        for task, role, name in figures.lost[: 200 if verbose else 40]:
            print(f"  {task:<32} {role:<12} {name[:60]!r}")
    for failure in figures.failures:
        print(f"not measured: {failure[:400]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smaller sample (~1.5 min)")
    parser.add_argument("--verbose", action="store_true", help="list every element missed")
    parser.add_argument("--dump", type=Path, help="write every observation (ours, the peer's) here")
    args = parser.parse_args()
    run(args.quick, args.verbose, args.dump)
    return 0


if __name__ == "__main__":
    sys.exit(main())
