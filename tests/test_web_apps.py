"""Web apps on a real desktop (issue 22): a page in a headless browser inside the app's worker.

Every test runs a real supervisor, real confined workers and a real Chromium; the agent's side
is the desktop's own commands. ``apps/tasks`` is the bundled web app, ``tests/apps/tasks_twin``
its Python twin, ``tests/apps/webpulse`` a page that changes by itself, refuses and never settles.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.sandbox import browser, cgroups
from aotui.supervisor.manifest import MIN_BROWSER_TASKS, load_manifest
from tests.conftest import RunningDesktop, wait_for
from tests.rpc_peer import RpcPeer
from tests.test_mcp import aotui, mcp_session, where
from tests.test_web_generic import FRAMEWORKS, item_ref, todomvc  # noqa: F401 - a fixture

pytestmark = [
    pytest.mark.skipif(
        browser.find_browser() is None,
        reason=f"no headless browser installed ({browser.INSTALL_HINT})",
    ),
    pytest.mark.timeout(120),
]

Start = Callable[..., RunningDesktop]
VIEW = re.compile(r'<view id="(view_\d+)" name="([^"]*)">\n(.*?)</view>', re.S)


def blocks(snapshot: str) -> dict[str, dict[str, tuple[str, str]]]:
    """app id → view name → (view id, the view's Markdown)."""
    found: dict[str, dict[str, tuple[str, str]]] = {}
    for match in re.finditer(
        r'<application id="(app_\d+)"[^>]*>(.*?)</application>', snapshot, re.S
    ):
        views = {m.group(2): (m.group(1), m.group(3)) for m in VIEW.finditer(match.group(2))}
        found[match.group(1)] = views
    return found


def run(desktop: RunningDesktop, app: str, view: str, command: str) -> Any:
    context = f'<context app_id="{app}" view_id="{view}">execute {command}</context>'
    return desktop.client.execute(context)["results"][0]


def worker(desktop: RunningDesktop, app: str) -> psutil.Process:
    row = next(r for r in desktop.client.status()["apps"] if r["app"] == app)
    assert row["state"] == "running", row
    return psutil.Process(row["pid"])


def opened(desktop: RunningDesktop, *apps: str) -> dict[str, dict[str, tuple[str, str]]]:
    for app in apps:
        desktop.client.execute(f"<context>open --application {app}</context>")
    return blocks(desktop.client.snapshot())


def test_the_web_app_and_its_python_twin_read_byte_identical(start_desktop: Start) -> None:
    """One renderer: the same markup from a page and from a template gives the same Markdown,
    after every operation (each read right after its ack: read-your-writes)."""
    desktop = start_desktop(["tasks", "tasks_twin"])
    views = opened(desktop, "app_0", "app_1")
    web, py = views["app_0"]["Tasks"], views["app_1"]["Tasks"]
    assert web[1] == py[1]
    assert "No tasks yet." in web[1]
    assert "0 open, 0 done." in web[1]
    commands = [
        'add_task --title "Buy  milk"',
        "add_task --title 'Walk <b>the</b> dog'",
        "add_task --title Write",
        "complete --task tasks[1]",
        "delete_task --task tasks[0]",
        "reopen --task tasks[0]",
        "complete --task tasks[1]",
    ]
    for command in commands:
        results = [run(desktop, app, views[app]["Tasks"][0], command) for app in ("app_0", "app_1")]
        assert results[0] == results[1], command
        now = blocks(desktop.client.snapshot())
        assert now["app_0"]["Tasks"][1] == now["app_1"]["Tasks"][1], command
    final = now["app_0"]["Tasks"][1]
    assert "- [Walk <b>the</b> dog](task:tasks[0])\n    - Done: no" in final
    assert "- [Write](task:tasks[1])\n    - Done: yes" in final
    assert "1 open, 1 done." in final


def test_a_page_s_refusal_is_an_app_error_and_its_text_is_sanitized(start_desktop: Start) -> None:
    desktop = start_desktop(["webpulse"])
    view = opened(desktop, "app_0")["app_0"]["Pulse"][0]
    with pytest.raises(AotuiError) as caught:
        run(desktop, "app_0", view, "refuse")
    assert caught.value.code is ErrorCode.E_APP_ERROR
    assert "the page refused refuse: refused on purpose" in caught.value.message
    assert "</application>" not in caught.value.message


def test_a_change_the_page_makes_by_itself_reaches_the_snapshot(start_desktop: Start) -> None:
    desktop = start_desktop(["webpulse"])
    view = opened(desktop, "app_0")["app_0"]["Pulse"][0]
    assert run(desktop, "app_0", view, "beat_later --ms 300") == "scheduled"
    assert "Beats: 0" in desktop.client.snapshot()
    wait_for(lambda: "Beats: 1" in desktop.client.snapshot(), 10, "the page's own change")


def test_an_async_answer_is_awaited_and_its_changes_are_in_the_ack(start_desktop: Start) -> None:
    desktop = start_desktop(["webpulse"])
    view = opened(desktop, "app_0")["app_0"]["Pulse"][0]
    assert run(desktop, "app_0", view, "slow_answer --ms 200") == "late"
    assert "Note: answered late" in desktop.client.snapshot()


def test_a_page_that_never_settles_gets_a_timeout_naming_it(start_desktop: Start) -> None:
    desktop = start_desktop(["webpulse"])
    view = opened(desktop, "app_0")["app_0"]["Pulse"][0]
    with pytest.raises(AotuiError) as caught:
        run(desktop, "app_0", view, "spin")
    assert caught.value.code is ErrorCode.E_TIMEOUT
    assert "never settled after spin" in caught.value.message
    # An error means no effect (CONTRACT §6): the page, changed but never acknowledged, is
    # restarted from its last acknowledged state, and comes back.
    assert "took no effect" in caught.value.message
    wait_for(lambda: "Beats: 0" in desktop.client.snapshot(), 30, "the page back, unchanged")


def test_page_data_local_storage_and_indexed_db_survive_kill_9_of_the_worker(
    start_desktop: Start,
) -> None:
    desktop = start_desktop(["tasks", "webpulse"], restart_backoff_s=0.001)
    views = opened(desktop, "app_0", "app_1")
    tasks, pulse = views["app_0"]["Tasks"][0], views["app_1"]["Pulse"][0]
    run(desktop, "app_0", tasks, "add_task --title Kept")
    run(desktop, "app_1", pulse, "set_note --text remembered")
    run(desktop, "app_1", pulse, "keep --text 'in IndexedDB'")
    for app in ("app_0", "app_1"):
        old = worker(desktop, app).pid
        os.kill(old, signal.SIGKILL)

        def back(app: str = app, old: int = old) -> bool:
            return _running_pid(desktop, app) not in (None, old)

        wait_for(back, 30, app)
    snapshot = desktop.client.snapshot()
    assert "- [Kept](task:tasks[0])" in snapshot
    assert "Note: remembered" in snapshot
    assert "Kept: in IndexedDB" in snapshot


def test_a_restart_restores_the_acknowledged_storage_not_later_writes(
    start_desktop: Start,
) -> None:
    """The browser's profile outlives the worker, so a page's own later writes are on disk at
    the restart: the acknowledged localStorage and IndexedDB replace them."""
    desktop = start_desktop(["webpulse"], restart_backoff_s=0.001)
    pulse = opened(desktop, "app_0")["app_0"]["Pulse"][0]
    run(desktop, "app_0", pulse, "set_note --text acknowledged")
    run(desktop, "app_0", pulse, "keep --text acknowledged")
    run(desktop, "app_0", pulse, "keep_later --text unacknowledged --ms 50")
    wait_for(lambda: "Kept: unacknowledged" in desktop.client.snapshot(), 10, "the late write")
    old = worker(desktop, "app_0").pid
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: _running_pid(desktop, "app_0") not in (None, old), 30, "the restart")
    snapshot = desktop.client.snapshot()
    assert "Kept: acknowledged" in snapshot
    assert "Note: acknowledged" in snapshot


def test_a_crashed_renderer_restarts_the_app_with_its_data(start_desktop: Start) -> None:
    desktop = start_desktop(["tasks"], restart_backoff_s=0.001)
    view = opened(desktop, "app_0")["app_0"]["Tasks"][0]
    run(desktop, "app_0", view, "add_task --title Survivor")
    process = worker(desktop, "app_0")
    renderers = [
        p for p in process.children(recursive=True) if "--type=renderer" in " ".join(p.cmdline())
    ]
    assert renderers, [p.cmdline()[:2] for p in process.children(recursive=True)]
    for renderer in renderers:
        renderer.send_signal(signal.SIGKILL)
    wait_for(lambda: _running_pid(desktop, "app_0") not in (None, process.pid), 30, "restart")
    assert "- [Survivor](task:tasks[0])" in desktop.client.snapshot()
    assert not process.is_running() or process.status() == psutil.STATUS_ZOMBIE


def _running_pid(desktop: RunningDesktop, app: str) -> int | None:
    row = next(r for r in desktop.client.status()["apps"] if r["app"] == app)
    return row["pid"] if row["state"] == "running" else None


class _Answer(http.server.BaseHTTPRequestHandler):
    served = 0

    def do_GET(self) -> None:
        type(self).served += 1
        body = b"served on loopback"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def loopback() -> Iterator[int]:
    _Answer.served = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


FETCHER = """<!doctype html><html><head><script src="/.aotui/aotui.js"></script></head><body>
<section view="Fetcher"><p id="out">nothing yet</p>
<button operation="get" args='{"url": "string"}'>Get</button>
<button operation="get_or_fail" args='{"url": "string"}'>Get or fail</button></section>
<script>
aotui.operation("get_or_fail", async ({ url }) => {
  const reply = await fetch(url);
  document.getElementById("out").textContent = "got: " + await reply.text();
});
aotui.operation("get", async ({ url }) => {
  try {
    const reply = await fetch(url);
    document.getElementById("out").textContent = "got: " + await reply.text();
  } catch (e) {
    document.getElementById("out").textContent = "failed: " + e.name;
  }
});
</script></body></html>"""


def test_the_page_reaches_the_network_only_through_the_broker_s_grants(
    start_desktop: Start, tmp_path: Path, loopback: int
) -> None:
    app = tmp_path / "fetcher"
    app.mkdir()
    (app / "index.html").write_text(FETCHER)
    manifest = {"id": "test.fetcher", "name": "Fetcher", "version": "1.0.0",
                "entry": "index.html", "description": "Fetches what it is told.",
                "permissions": ["net:http:localhost"]}  # fmt: skip
    (app / "aoapp.json").write_text(json.dumps(manifest))
    desktop = start_desktop([str(app)], allow_private_http=True)
    view = opened(desktop, "app_0")["app_0"]["Fetcher"][0]
    run(desktop, "app_0", view, f"get --url http://localhost:{loopback}/hello")
    assert "got: served on loopback" in desktop.client.snapshot()
    assert _Answer.served == 1
    # Not granted (an address is matched only by a * grant): the page sees a failed fetch,
    # nothing reaches the server, and System Logs say why.
    run(desktop, "app_0", view, f"get --url http://127.0.0.1:{loopback}/x")
    snapshot = desktop.client.snapshot()
    assert "failed: TypeError" in snapshot
    assert "was refused" in snapshot
    assert _Answer.served == 1
    # An operation that fails because a request was refused answers E_PERMISSION (CONTRACT §10).
    with pytest.raises(AotuiError) as refused:
        run(desktop, "app_0", view, f"get_or_fail --url http://127.0.0.1:{loopback}/y")
    assert refused.value.code is ErrorCode.E_PERMISSION
    assert f"the page's request to http://127.0.0.1:{loopback}/y" in refused.value.message
    assert _Answer.served == 1


def test_a_web_manifest_with_too_few_tasks_is_refused_at_install(tmp_path: Path) -> None:
    app = tmp_path / "tiny"
    app.mkdir()
    (app / "index.html").write_text("<!doctype html><p view=Tiny>tiny</p>")
    manifest = {"id": "test.tiny", "name": "Tiny", "version": "1.0.0", "entry": "index.html",
                "description": "", "permissions": [], "limits": {"pids": 32}}  # fmt: skip
    (app / "aoapp.json").write_text(json.dumps(manifest))
    with pytest.raises(AotuiError) as caught:
        load_manifest(app)
    assert caught.value.data["field"] == "limits.pids"
    assert f"at least {MIN_BROWSER_TASKS} tasks" in caught.value.message
    assert MIN_BROWSER_TASKS == browser.MIN_TASKS


def test_a_web_app_runs_with_the_web_limits(start_desktop: Start) -> None:
    desktop = start_desktop(["tasks"])
    opened(desktop, "app_0")
    process = worker(desktop, "app_0")
    assert os.path.exists(f"/proc/{process.pid}")
    with open(f"/proc/{process.pid}/limits") as limits:
        files = next(line for line in limits if line.startswith("Max open files"))
    assert files.split()[3] == "1024", files
    assert process.children(recursive=True), "the browser runs inside the worker's tree"
    if os.geteuid() == 0:  # its cgroup quota: twice its share (half a core), one core
        directory = cgroups.cpu_cgroup(process.pid)
        assert directory is not None
        with open(os.path.join(directory, "cpu.cfs_quota_us")) as quota:
            assert int(quota.read()) == cgroups.CPU_PERIOD_US


DOCS = Path(__file__).resolve().parents[1] / "docs" / "web-apps.md"
TASKS = Path(__file__).resolve().parents[1] / "apps" / "tasks"


def test_the_tutorial_shows_the_bundled_app_verbatim_and_what_the_agent_reads(
    start_desktop: Start,
) -> None:
    """docs/web-apps.md, *A web app: Tasks*: each excerpt is in apps/tasks as shown, and the
    Markdown it shows is what the desktop renders after the commands it names."""
    text = DOCS.read_text()
    section = text[text.index("## A web app: Tasks") : text.index("## How the runtime")]
    sources = "\n".join(p.read_text() for p in sorted(TASKS.iterdir()))
    excerpts = re.findall(r"```(?:json|html|js)\n(.*?)```", section, re.S)
    assert len(excerpts) == 5
    for excerpt in excerpts:
        assert excerpt in sources, excerpt
    shown = re.search(r"```markdown\n(.*?)```", section, re.S)
    assert shown is not None
    desktop = start_desktop(["tasks"])
    view = opened(desktop, "app_0")["app_0"]["Tasks"][0]
    for command in re.findall(r"`((?:add_task|complete) [^`]*)`", section.replace("\n", " ")):
        run(desktop, "app_0", view, command)
        desktop.client.snapshot()  # refs resolve against what the agent read
    assert blocks(desktop.client.snapshot())["app_0"]["Tasks"][1].startswith(shown.group(1))


def page(desktop: RunningDesktop) -> str:
    """The Markdown of app_0's one view (a page without marks: named by its title)."""
    ((_view, markdown),) = blocks(desktop.client.snapshot())["app_0"].values()
    return markdown


# --- third-party apps, unchanged ------------------------------------------------------------------

FIELD = re.compile(r"\[\[input[^\]]*\]\]\(control:(page\[[0-9]+\])\)")


@pytest.mark.parametrize(
    "framework",
    # One in the default suite; the other four, each a fresh desktop and browser, in CI's slow
    # step (tests/test_web_generic.py drives all five in the default suite without a desktop).
    [f if f == "vanillajs" else pytest.param(f, marks=pytest.mark.slow) for f in FRAMEWORKS],
)
def test_todomvc_runs_unchanged_as_a_web_app_driven_by_desktop_commands(
    framework: str,
    todomvc: Path,  # noqa: F811 - the fixture of tests/test_web_generic.py
    start_desktop: Start,
    tmp_path: Path,
) -> None:
    """npm's TodoMVC, its files as published plus a manifest: three todos, one completed, the
    Active filter, through `<context>` commands on a real desktop only."""
    app = Path(shutil.copytree(todomvc / framework, tmp_path / framework))
    manifest = {"id": f"test.todomvc.{framework}", "name": f"TodoMVC {framework}",
                "version": "1.0.0", "entry": "index.html", "permissions": []}  # fmt: skip
    (app / "aoapp.json").write_text(json.dumps(manifest))
    desktop = start_desktop([str(app)])
    ((view, markdown),) = opened(desktop, "app_0")["app_0"].values()
    assert "# todos" in markdown
    for todo in ("buy milk", "walk the dog", "write code"):
        field = FIELD.search(markdown)
        assert field, markdown
        run(desktop, "app_0", view, f"type --target {field.group(1)} --text '{todo}' --submit")
        markdown = page(desktop)
    assert "**3** items left" in markdown
    run(desktop, "app_0", view, f"check --target {item_ref(markdown, 'walk the dog')}")
    markdown = page(desktop)
    assert "**2** items left" in markdown
    active = re.search(r"\[Active\]\(control:(page\[[0-9]+\])\)", markdown)
    assert active, markdown
    changed = run(desktop, "app_0", view, f"click --target {active.group(1)}")
    assert changed == {"url": "https://app-0.aotui.invalid/index.html#/active"}
    markdown = page(desktop)
    assert "buy milk" in markdown
    assert "write code" in markdown
    assert "walk the dog" not in markdown


# --- a page written for WebMCP alone --------------------------------------------------------------


def test_a_webmcp_page_is_driven_by_commands_mcp_and_json_rpc(start_desktop: Start) -> None:
    """tests/apps/webmcp_page has no aotui marks and no aotui.js: its WebMCP tools are its
    operations on every face. The MCP client is the official SDK's; JSON-RPC is rpc.sock."""
    desktop = start_desktop(["webmcp_page"])
    ((view, markdown),) = opened(desktop, "app_0")["app_0"].values()
    assert "[Add Item](operation:add_item)" in markdown
    answer = run(desktop, "app_0", view, "add_item --name Eggs --quantity 2")
    assert answer == {"content": [{"type": "text", "text": "Eggs: 2"}]}
    with pytest.raises(AotuiError) as refused:
        run(desktop, "app_0", view, "add_item --name Eggs --quantity 0")
    assert refused.value.code is ErrorCode.E_INVALID_CMD
    assert "--quantity must be at least 1" in refused.value.message

    async def over_mcp() -> Any:
        async with mcp_session(where(desktop)) as (session, _init):
            await session.call_tool("snapshot", {})
            return await session.call_tool(
                "call_operation",
                {
                    "app": "app_0",
                    "view": view,
                    "operation": "add_item",
                    "args": {"name": "Tea"},
                },
            )

    called = anyio.run(over_mcp)
    assert not called.isError, called
    assert "Tea: 1" in json.dumps(called.structuredContent)
    with RpcPeer(desktop.runtime / desktop.name / "rpc.sock") as peer:
        peer.call("snapshot")
        result = peer.call(
            "execute", app="app_0", view=view, operation="add_item", args={"name": "Jam"}
        )
    assert "Jam: 1" in json.dumps(result)
    listed = page(desktop)
    for line in ("Eggs × 2", "Tea × 1", "Jam × 1"):
        assert line in listed


def test_status_says_which_app_is_web_and_whether_chromium_s_sandbox_is_on(
    start_desktop: Start,
) -> None:
    desktop = start_desktop(["tasks", "tasks_twin"])
    opened(desktop, "app_0", "app_1")
    rows = {row["app"]: row for row in desktop.client.status()["apps"]}
    assert (rows["app_0"]["web"], rows["app_1"]["web"]) == (True, False)
    shown = aotui(desktop, "status")
    assert shown.returncode == 0, shown.stderr
    own = "chromium-sandbox" in rows["app_0"]["layers"]
    assert ("on, inside" if own else "off (--no-sandbox inside") in shown.stdout
    assert "app_1 is a web app" not in shown.stdout
    # The worker says why in System Logs, in its own words.
    assert "Chromium's own sandbox " + ("on" if own else "off (") in desktop.client.snapshot()
