"""The Browser app (issue 23): the web through the desktop, on a real desktop and a real Chromium.

Pages are served on loopback by the test; the Browser reaches them only through the broker, with
the test's grant (``net:http:localhost`` and the desktop's ``allow_private_http``, as the HTTP
tests do). The agent's side is the desktop's own commands.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.sandbox import browser
from aotui.supervisor.manifest import BUNDLED_APPS_DIR
from tests.conftest import RunningDesktop, wait_for
from tests.rpc_peer import RpcPeer

pytestmark = [
    pytest.mark.skipif(
        browser.find_browser() is None,
        reason=f"no headless browser installed ({browser.INSTALL_HINT})",
    ),
    pytest.mark.timeout(120),
]

Start = Callable[..., RunningDesktop]
HOME = """<!doctype html><html><head><title>Home</title></head><body>
<h1>Welcome</h1><p>Go to <a href="/two.html">page two</a>.</p>
<input placeholder="Name" oninput="document.getElementById('echo').textContent = this.value">
<p id="echo"></p>
<button onclick="setTimeout(() => document.querySelector('h1').textContent = 'Clicked', 5)">
Press me</button></body></html>"""
TWO = """<!doctype html><html><head><title>Two</title></head><body><h1>Second page</h1>
<a href="#part">A hash link</a></body></html>"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def site(tmp_path: Path) -> Iterator[str]:
    """Two pages on a loopback port; the base URL (by name: the grant is net:http:localhost)."""
    root = tmp_path / "site"
    root.mkdir()
    (root / "index.html").write_text(HOME)
    (root / "two.html").write_text(TWO)
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def desktop(start_desktop: Start, tmp_path: Path) -> RunningDesktop:
    """A desktop with the bundled Browser, granted localhost only, open."""
    app = Path(shutil.copytree(BUNDLED_APPS_DIR / "browser", tmp_path / "browser"))
    manifest = json.loads((app / "aoapp.json").read_text())
    manifest["permissions"] = ["net:http:localhost"]
    (app / "aoapp.json").write_text(json.dumps(manifest))
    running = start_desktop([str(app)], allow_private_http=True, restart_backoff_s=0.001)
    running.client.execute("<context>open --application app_0</context>")
    return running


def views(desktop: RunningDesktop) -> dict[str, tuple[str, str]]:
    """The Browser's views: name → (view id, Markdown)."""
    snapshot = desktop.client.snapshot()
    block = snapshot[snapshot.index('<application id="app_0"') :]
    found = re.finditer(r'<view id="(view_\d+)" name="([^"]*)">\n(.*?)</view>', block, re.S)
    return {m.group(2): (m.group(1), m.group(3)) for m in found}


def tab(desktop: RunningDesktop, name: str | None = None) -> tuple[str, str]:
    """The view id and Markdown of the tab named ``name`` (its title), else the first tab."""
    shown = views(desktop)
    for found, (view, markdown) in shown.items():
        if found != "Tabs" and (name is None or found == name):
            return view, markdown
    raise AssertionError(f"no tab {name!r} in {list(shown)}")


def run(desktop: RunningDesktop, view: str, command: str) -> Any:
    context = f'<context app_id="app_0" view_id="{view}">execute {command}</context>'
    return desktop.client.execute(context)["results"][0]


def ref(markdown: str, label: str) -> str:
    found = re.search(rf"\[{re.escape(label)}[^\]]*\]+\(control:(page\[[0-9]+\])\)", markdown)
    assert found, markdown
    return found.group(1)


def test_navigate_read_click_type_and_go_back_and_forward(
    desktop: RunningDesktop, site: str
) -> None:
    view, _ = tab(desktop)
    changed = run(desktop, view, f"navigate --url {site}/index.html")
    assert changed == {"url": f"{site}/index.html", "title": "Home"}
    view, page = tab(desktop, "Home")
    assert page.startswith(f"URL: {site}/index.html\n\n# Welcome\n")
    # The click's change comes 5 ms later: the answer waits for the page to settle.
    assert run(desktop, view, f"click --target {ref(page, 'Press me')}") is None
    view, page = tab(desktop, "Home")
    assert "# Clicked" in page
    run(desktop, view, f"type --target {ref(page, '[input')} --text 'Ada Lovelace'")
    _, page = tab(desktop, "Home")
    assert "Ada Lovelace" in page
    changed = run(desktop, view, f"click --target {ref(page, 'page two')}")
    assert changed == {"url": f"{site}/two.html", "title": "Two"}
    view, page = tab(desktop, "Two")
    assert "# Second page" in page
    run(desktop, view, f"click --target {ref(page, 'A hash link')}")  # same document
    assert run(desktop, view, "back") == {"url": f"{site}/two.html"}
    assert run(desktop, view, "back") == {"url": f"{site}/index.html", "title": "Home"}
    assert run(desktop, view, "forward") == {"url": f"{site}/two.html", "title": "Two"}
    assert run(desktop, view, "forward") == {"url": f"{site}/two.html#part"}
    with pytest.raises(AotuiError) as nowhere:
        run(desktop, view, "forward")
    assert "no page to go forward to" in nowhere.value.message
    assert run(desktop, view, "reload") is None


def test_a_host_outside_the_grants_is_e_permission_naming_the_grant(
    desktop: RunningDesktop, site: str
) -> None:
    view, _ = tab(desktop)
    address = site.replace("localhost", "127.0.0.1")  # an address is matched only by "*"
    with pytest.raises(AotuiError) as refused:
        run(desktop, view, f"navigate --url {address}/index.html")
    assert refused.value.code is ErrorCode.E_PERMISSION
    assert "net:http:127.0.0.1 grant" in refused.value.message
    for url in ("file:///etc/passwd", "javascript:alert(1)", "chrome://version"):
        with pytest.raises(AotuiError) as bad:
            run(desktop, view, f"navigate --url '{url}'")
        assert bad.value.code is ErrorCode.E_INVALID_CMD


def test_find_and_wait_for(desktop: RunningDesktop, site: str) -> None:
    view, _ = tab(desktop)
    run(desktop, view, f"navigate --url {site}/index.html")
    view, _ = tab(desktop, "Home")
    found = run(desktop, view, "find --text 'page two'")
    assert found == {
        "found": [{"line": "Go to [page two](control:page[0]).", "refs": ["page[0]"]}],
        "more": 0,
    }
    links = run(desktop, view, "find --role link")
    assert links == {
        "found": [{"line": "Go to [page two](control:page[0]).", "refs": ["page[0]"]}],
        "more": 0,
    }
    buttons = run(desktop, view, "find --role button")["found"]
    assert [found["line"] for found in buttons] == ["[Press me](control:page[2])"]
    assert run(desktop, view, "find --role button --text nothing-like-it")["found"] == []
    assert run(desktop, view, "wait_for --text Welcome") == {"met": True}
    # A wait that ends unmet is an answer (the Browser keeps running), not E_TIMEOUT, which
    # would have the desktop stop the worker as if it had not answered.
    pid = desktop.client.status()["apps"][0]["pid"]
    unmet = run(desktop, view, "wait_for --text Never --timeout_ms 200")
    assert unmet == {"met": False, "why": "waited 200 ms for 'Never' to show; it did not"}
    assert desktop.client.status()["apps"][0]["pid"] == pid


def test_tabs_open_close_and_come_back_after_kill_9(desktop: RunningDesktop, site: str) -> None:
    view, _ = tab(desktop)
    run(desktop, view, f"navigate --url {site}/index.html")
    opened = run(desktop, view, f"new_tab --url {site}/two.html")
    assert opened == {"tab": "tab:2", "url": f"{site}/two.html", "title": "Two"}
    tabs = views(desktop)["Tabs"][1]
    assert f"{site}/index.html" in tabs
    assert f"{site}/two.html" in tabs
    row = desktop.client.status()["apps"][0]
    os.kill(row["pid"], signal.SIGKILL)

    def back() -> bool:
        again = desktop.client.status()["apps"][0]
        return again["state"] == "running" and again["pid"] != row["pid"]

    wait_for(back, 30, "the Browser back")
    tabs = views(desktop)["Tabs"][1]
    assert f"{site}/index.html" in tabs
    assert f"{site}/two.html" in tabs
    view, page = tab(desktop, "Home")
    assert "# Welcome" in page
    assert run(desktop, view, "close_tab") == {"closed": "tab:1"}
    assert f"{site}/index.html" not in views(desktop)["Tabs"][1]
    assert not psutil.pid_exists(row["pid"]) or psutil.Process(row["pid"]).status() == "zombie"


# --- seed 004: agent-aware pages ------------------------------------------------------------------

SHOP = """<!doctype html><html><head><title>Shop</title></head><body>
<main data-assist-route="route:product" data-assist-title="Product Detail">
  <section data-assist-view="view:productDetails"><h1>Tea</h1>
    <aside data-assist-panel="panel:filters"><p>Filters</p></aside>
    <aside data-assist-panel="panel:hidden" hidden><p>Never shown</p></aside>
    <button data-assist-field="f:openLogin" onclick="openLogin()">Sign in</button>
    <div id="host"></div>
  </section>
</main>
<main data-assist-route="route:cart" data-assist-title="Cart" hidden><h1>Cart</h1></main>
<div role="dialog" data-assist-modal="modal:login" aria-modal="true" hidden style="z-index: 5">
  <h2>Sign in</h2><input data-assist-field="f:email" aria-label="Email">
  <button data-assist-field="f:submit" onclick="signIn()">Go</button>
</div>
<div role="dialog" data-assist-modal="modal:cookies" aria-modal="true" style="z-index: 1">
  <p>Cookies?</p></div>
<p id="who"></p>
<script>
  const $ = (s) => document.querySelector(s);
  // A field inside a shadow root: seed 004 counts it.
  $("#host").attachShadow({mode: "open"}).innerHTML =
    '<input data-assist-field="f:coupon" aria-label="Coupon">';
  function openLogin() { $('[data-assist-modal="modal:login"]').hidden = false;
    $('[data-assist-field="f:email"]').focus(); }
  function signIn() {
    $("#who").textContent = "Signed in as " + $('[data-assist-field="f:email"]').value;
    $('[data-assist-modal="modal:login"]').hidden = true;
  }
  function route(id) {
    for (const m of document.querySelectorAll("main")) m.hidden = m.dataset.assistRoute !== id;
  }
  window.addEventListener("assist:command", ({detail: {cmd, params}}) => {
    if (cmd === "modal.open" && params.modalId === "modal:login") openLogin();
    if (cmd === "modal.close") $(`[data-assist-modal="${params.modalId}"]`).hidden = true;
    if (cmd === "navigate") route(params.routeId);
  });
</script></body></html>"""


def test_an_agent_aware_page_shows_its_context_and_takes_seed_004_commands(
    desktop: RunningDesktop, site: str, tmp_path: Path
) -> None:
    (tmp_path / "site" / "shop.html").write_text(SHOP)
    view, _ = tab(desktop)
    run(desktop, view, f"navigate --url {site}/shop.html")
    view, page = tab(desktop, "Shop")
    # Two modals shown: the cookie banner is the only aria-modal one visible; the login one is
    # hidden. Route, views and panels by visibility (panel:hidden and route:cart left out).
    assert (
        "Modal: modal:cookies · Views: view:productDetails · Panels: panel:filters"
        " · Route: route:product (Product Detail)"
    ) in page
    caps = run(desktop, view, "capabilities")
    assert caps["routes"] == ["route:product", "route:cart"]
    assert "f:coupon" in caps["fields"]  # inside a shadow root
    run(desktop, view, "modal_close --modal modal:cookies")
    run(desktop, view, "modal_open --modal modal:login")
    _, page = tab(desktop, "Shop")
    # The login modal is on top (z-index 5) and the email field has the focus.
    assert "Modal: modal:login · Focus: f:email" in page
    run(desktop, view, "type --field f:email --text ada@example.com")
    # Only fields of the active modal: the page's own button is behind it.
    with pytest.raises(AotuiError) as behind:
        run(desktop, view, "click --field f:openLogin")
    assert behind.value.code is ErrorCode.E_NOT_FOUND
    run(desktop, view, "click --field f:submit")
    assert run(desktop, view, "wait_for --modal modal:login --visible false") == {"met": True}
    _, page = tab(desktop, "Shop")
    assert "Signed in as ada@example.com" in page
    assert "Modal:" not in page
    run(desktop, view, "navigate --route route:cart")
    _, page = tab(desktop, "Shop")
    assert "Route: route:cart (Cart)" in page
    with pytest.raises(AotuiError) as nowhere:
        run(desktop, view, "navigate --route route:nowhere")
    assert "its routes: route:product, route:cart" in nowhere.value.message


# --- seed 002: AWI-TTY on rpc.sock ----------------------------------------------------------------

WIDE = """<!doctype html><html><head><meta charset="utf-8"><title>Grid</title>
<style>body { margin: 0; font: 16px monospace; } p { margin: 0; height: 16px; }</style></head>
<body><p>Hello grid</p><p>日本 wide</p><p><input value="typed"></p>
<p style="margin-top: 64px">Below</p><a href="/two.html">Next</a>
<div style="height: 400px"></div></body></html>"""


def test_awi_tty_drives_the_active_tab_over_json_rpc(
    desktop: RunningDesktop, site: str, tmp_path: Path
) -> None:
    (tmp_path / "site" / "grid.html").write_text(WIDE)
    with RpcPeer(desktop.runtime / desktop.name / "rpc.sock") as peer:
        assert peer.call("navigate", url=f"{site}/grid.html") == {"ok": True}
        assert peer.call("get_title") == {"title": "Grid"}
        assert peer.call("get_url") == {"url": f"{site}/grid.html"}
        assert peer.call("set_viewport", cols=40, rows=10) == {"ok": True}
        text = peer.call("snapshot", format="text", include_meta=True)
        assert (text["width"], text["height"]) == (40, 10)
        lines = text["lines"]
        assert lines[0] == "Hello grid"
        assert lines[1] == "日本 wide"  # two cells each: "wide" starts at column 5
        assert lines[2].startswith("[typed]")
        assert lines[7].startswith("Below")
        assert text["meta"]["url"] == f"{site}/grid.html"
        # The tab's first entry, its empty start, is not a page to go back to.
        assert text["meta"]["nav"] == {"can_go_back": False, "can_go_forward": False}
        # Tab to the input (the first focusable: its text selected, as a browser does), type
        # over it, read it back in the grid.
        assert peer.call("send_key", key="Tab") == {"ok": True}
        assert peer.call("send_key", key="Char", char="!") == {"ok": True}
        assert peer.call("type_text", text="?") == {"ok": True}
        assert peer.call("snapshot", format="text")["lines"][2].startswith("[!?]")
        assert peer.call("wait_for_frame_quiescence", idle_ms=20) == {"ok": True}
        assert peer.call("scroll", delta=2) == {"ok": True}
        assert peer.call("snapshot", format="text")["lines"][5].startswith("Below")
        bad = peer.request("send_key", key="F13")
        assert bad["error"]["code"] == ErrorCode.E_INVALID_CMD.jsonrpc_code
        assert "unknown key 'F13'" in bad["error"]["message"]
        bad = peer.request("set_viewport", cols=2, rows=10)
        assert bad["error"]["code"] == -32602  # the declared minimum: a standard error
        peer.call("navigate", url=f"{site}/two.html")
        assert peer.call("wait_for_title_contains", substring="Tw") == {"ok": True, "title": "Two"}
        assert peer.call("get_nav_state") == {"can_go_back": True, "can_go_forward": False}
        refused = peer.request("navigate", url=f"{site.replace('localhost', '127.0.0.1')}/")
        assert refused["error"]["code"] == ErrorCode.E_PERMISSION.jsonrpc_code
    # The agent's snapshot shows the same tab, moved on.
    assert "# Second page" in tab(desktop, "Two")[1]


def test_a_key_that_scrolls_has_scrolled_when_send_key_answers(
    desktop: RunningDesktop, site: str, tmp_path: Path
) -> None:
    """bench/soak_awi.py's hour failed 3 checks: Chromium scrolled for an arrow key smoothly, after
    send_key had answered, so the grid read next showed the page mid-way (or blank) and a scroll
    given meanwhile was undone by the animation's end. The browser runs without smooth scrolling:
    the grid after the answer is the grid for good."""
    lines = "".join(f"<p>Line {i:03d}</p>" for i in range(300))
    (tmp_path / "site" / "lines.html").write_text(
        "<!doctype html><html><head><title>Lines</title><style>body { margin: 0; font: 16px "
        f"monospace; }} p {{ margin: 0; height: 16px; }}</style></head><body>{lines}</body></html>"
    )
    with RpcPeer(desktop.runtime / desktop.name / "rpc.sock") as peer:
        peer.call("navigate", url=f"{site}/lines.html")
        for key in ("Down", "Down", "Up", "Space"):
            assert peer.call("send_key", key=key) == {"ok": True}
            answered = peer.call("snapshot", format="text")["lines"]
            assert peer.call("wait_for_frame_quiescence", idle_ms=300) == {"ok": True}
            assert peer.call("snapshot", format="text")["lines"] == answered, key


def test_the_awi_tty_cli_and_aotui_browser_speak_the_same_methods(
    desktop: RunningDesktop, site: str
) -> None:
    """seed 002's CLI façade: ``awi-tty`` (AWI_SOCK) and ``aotui browser``, JSON or --plain,
    reference §7's exit codes."""
    sock = str(desktop.runtime / desktop.name / "rpc.sock")
    awi = [str(Path(sys.executable).parent / "awi-tty")]
    env = {**os.environ, "AWI_SOCK": sock}

    def tty(*words: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*awi, *words], capture_output=True, text=True, env=env, timeout=60, check=False
        )

    assert json.loads(tty("navigate", f"{site}/index.html").stdout) == {"ok": True}
    assert tty("--plain", "get-title").stdout == "Home\n"
    shown = [line for line in tty("--plain", "snapshot").stdout.splitlines() if line]
    assert shown[0].startswith("Welcome")
    assert json.loads(tty("get-nav-state").stdout) == {
        "can_go_back": False,
        "can_go_forward": False,
    }
    refused = tty("navigate", site.replace("localhost", "127.0.0.1"))
    assert refused.returncode == ErrorCode.E_PERMISSION.exit_code, refused.stderr
    assert refused.stderr.startswith("E_PERMISSION: ")
    usage = tty("send-key")
    assert usage.returncode == ErrorCode.E_INVALID_CMD.exit_code
    gone = subprocess.run(
        [*awi, "--socket", str(desktop.runtime / "nowhere.sock"), "get-url"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert gone.returncode == ErrorCode.E_UNAVAILABLE.exit_code
    aotui = [sys.executable, "-m", "aotui.supervisor", "browser", "--desktop", desktop.name]
    aotui += ["--socket", str(desktop.runtime)]
    url = subprocess.run(
        [*aotui, "--plain", "get-url"], capture_output=True, text=True, timeout=60, check=False
    )
    assert url.stdout == f"{site}/index.html\n", url.stderr


def test_a_long_page_folds_what_is_far_from_the_viewport_and_find_reaches_it(
    desktop: RunningDesktop, site: str, tmp_path: Path
) -> None:
    sections = "".join(
        f"<section><h2>Part {n}</h2>"
        + f"<p>Paragraph {n} says something long. " * 20
        + f'</p><a href="#p{n}">link {n}</a></section>'
        for n in range(1, 121)
    )
    (tmp_path / "site" / "long.html").write_text(
        f"<!doctype html><html><head><title>Long</title></head><body>{sections}</body></html>"
    )
    view, _ = tab(desktop)
    run(desktop, view, f"navigate --url {site}/long.html")
    view, page = tab(desktop, "Long")
    assert page.startswith(f"URL: {site}/long.html\n\n(A long page:")
    for n in range(1, 121):  # every heading reachable
        assert f"## Part {n}\n" in page
    assert "Paragraph 1 says" in page  # the viewport, in full
    assert "Paragraph 100 says" not in page  # far below it, folded
    assert len(page) < 40_000
    found = run(desktop, view, "find --text 'link 100'")
    assert found["found"][0]["line"].startswith("[link 100](control:page[")
    _, page = tab(desktop, "Long")
    assert "Paragraph 100 says" in page  # find scrolled it into view
    assert "Paragraph 1 says" not in page


def test_at_most_two_commands_are_in_flight_per_tab(
    start_desktop: Start, tmp_path: Path, site: str
) -> None:
    # The desktop would take 4 at once (max_in_flight); the Browser's manifest says 2 per view,
    # seed 004's bound per tab. A third on the same tab is refused untried; another tab's runs.
    app = Path(shutil.copytree(BUNDLED_APPS_DIR / "browser", tmp_path / "browser"))
    manifest = json.loads((app / "aoapp.json").read_text())
    assert manifest["view_in_flight"] == 2
    manifest["permissions"] = ["net:http:localhost"]
    (app / "aoapp.json").write_text(json.dumps(manifest))
    desktop = start_desktop([str(app)], allow_private_http=True, max_in_flight=4)
    desktop.client.execute("<context>open --application app_0</context>")
    view, _ = tab(desktop)
    run(desktop, view, f"navigate --url {site}/index.html")
    other = run(desktop, view, f"new_tab --url {site}/two.html")["tab"]
    assert other == "tab:2"
    listed = re.search(r"\[Two\]\(view:(view_\d+)\)", views(desktop)["Tabs"][1])
    assert listed, views(desktop)["Tabs"]
    desktop.client.execute(f'<context app_id="app_0">mount --view {listed.group(1)}</context>')
    first, _ = tab(desktop, "Home")
    second, _ = tab(desktop, "Two")
    clients = [desktop.new_client(timeout_s=20) for _ in range(4)]
    wait = "wait_for --text Never --timeout_ms 1500"
    targets = [first, first, first, second]
    commands = [wait, wait, "wait_for --text Welcome", "wait_for --text Second"]
    answers: list[Any] = [None] * 4

    def send(index: int) -> None:
        context = (
            f'<context app_id="app_0" view_id="{targets[index]}">execute {commands[index]}'
            f"</context>"
        )
        try:
            answers[index] = clients[index].execute(context)["results"][0]
        except AotuiError as exc:
            answers[index] = exc

    threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
        time.sleep(0.15)  # in this order; the first wait holds the tab for 1.5 s
    for thread in threads:
        thread.join(30)
    unmet = {"met": False, "why": "waited 1500 ms for 'Never' to show; it did not"}
    assert answers[:2] == [unmet, unmet], answers
    refused = answers[2]
    assert isinstance(refused, AotuiError), answers
    assert refused.code is ErrorCode.E_RATE_LIMITED
    assert f"2 operations of {first} of app_0 (Browser) are already queued" in refused.message
    assert refused.data["outcome"] == "not applied"
    assert answers[3] == {"met": True}, answers
    # Once they answered, the tab takes commands again.
    assert run(desktop, first, "wait_for --text Welcome") == {"met": True}


CHECKOUT = """<!doctype html><html><head><title>Account</title>
<script type="application/json" data-assist-catalog>
{"modals": [{"modalId": "modal:deleteAccount",
             "policy": {"requiresUserConfirm": true,
                        "allowedActions": ["modal.open", "modal.close"]}}],
 "routes": [{"routeId": "route:checkout", "allowedActions": ["navigate"]}]}
</script></head><body>
<main data-assist-route="route:account"><h1>Account</h1>
  <button onclick="document.querySelector('#n').textContent++">Count</button><p id="n">0</p>
</main>
<main data-assist-route="route:checkout" hidden><h1>Checkout</h1>
  <button onclick="document.querySelector('#paid').textContent = 'paid'">Pay</button>
  <p id="paid"></p></main>
<div role="dialog" aria-modal="true" data-assist-modal="modal:deleteAccount" hidden>
  <h2>Delete your account?</h2><button data-assist-field="f:yes">Yes</button></div>
<script>
  window.addEventListener("assist:command", ({detail: {cmd, params}}) => {
    const modal = document.querySelector('[data-assist-modal="modal:deleteAccount"]');
    if (cmd === "modal.open") modal.hidden = false;
    if (cmd === "modal.close") modal.hidden = true;
    if (cmd === "navigate") for (const m of document.querySelectorAll("main"))
      m.hidden = m.dataset.assistRoute !== params.routeId;
  });
</script></body></html>"""


@pytest.mark.parametrize("trusted", [True, False])
def test_a_trusted_pages_catalog_asks_the_user_and_refuses_what_it_does_not_allow(
    start_desktop: Start, tmp_path: Path, site: str, trusted: bool
) -> None:
    (tmp_path / "site" / "account.html").write_text(CHECKOUT)
    app = Path(shutil.copytree(BUNDLED_APPS_DIR / "browser", tmp_path / "browser"))
    manifest = json.loads((app / "aoapp.json").read_text())
    manifest["permissions"] = ["net:http:localhost"]
    (app / "aoapp.json").write_text(json.dumps(manifest))
    origins = [site] if trusted else ["http://localhost:1"]  # the same host, another origin
    desktop = start_desktop([str(app)], allow_private_http=True, trusted_origins=origins)
    desktop.client.execute("<context>open --application app_0</context>")
    view, _ = tab(desktop)
    run(desktop, view, f"navigate --url {site}/account.html")
    view, page = tab(desktop, "Account")
    run(desktop, view, f"click --target {ref(page, 'Count')}")  # no entry governs the route
    opening = "execute modal_open --modal modal:deleteAccount"
    context = f'<context app_id="app_0" view_id="{view}">{opening}</context>'
    asked = desktop.client.execute(context)
    if not trusted:  # an untrusted page's catalog is its own text, nothing more
        assert asked["results"] == [None]
        _, page = tab(desktop, "Account")
        assert "Modal: modal:deleteAccount" in page
        run(desktop, view, "navigate --route route:checkout")
        _, page = tab(desktop, "Account")
        run(desktop, view, f"click --target {ref(page, 'Pay')}")
        assert "paid" in tab(desktop, "Account")[1]
        return
    waiting = asked["waiting"]
    assert waiting["confirmation"] == "C1"
    _, page = tab(desktop, "Account")
    assert "Modal:" not in page  # asked, not run
    pending = desktop.client.call("confirmations")["pending"]
    assert pending[0]["reason"] == (
        f"Browser asks: the page's catalog (trusted origin {site}) says "
        "modals[modal:deleteAccount] requires the user's confirmation for modal.open"
    )
    assert desktop.client.call("confirm", confirmation="C1")["verdict"] == "ran"
    _, page = tab(desktop, "Account")
    assert "Modal: modal:deleteAccount" in page
    # Inside the modal only modal.open and modal.close are allowed: a click is refused.
    with pytest.raises(AotuiError) as refused:
        run(desktop, view, "click --field f:yes")
    assert refused.value.code is ErrorCode.E_PERMISSION
    assert (
        f"click is not allowed by the page's catalog (trusted origin {site}): "
        "modals[modal:deleteAccount] allows only modal.open, modal.close; it did not run"
    ) in refused.value.message
    # The way out never waits for the user.
    assert run(desktop, view, "modal_close --modal modal:deleteAccount") is None
    # route:checkout allows only navigate: going there is fine, paying there is not.
    run(desktop, view, "navigate --route route:checkout")
    _, page = tab(desktop, "Account")
    with pytest.raises(AotuiError) as paying:
        run(desktop, view, f"click --target {ref(page, 'Pay')}")
    assert "routes[route:checkout] allows only navigate" in paying.value.message
    assert "paid" not in tab(desktop, "Account")[1]
    assert run(desktop, view, "find --text Checkout")["found"]  # reading is never governed


def test_the_desktop_config_narrows_the_browsers_grants(
    start_desktop: Start, tmp_path: Path, site: str
) -> None:
    app = Path(shutil.copytree(BUNDLED_APPS_DIR / "browser", tmp_path / "browser"))
    manifest = json.loads((app / "aoapp.json").read_text())
    manifest["permissions"] = ["net:http:localhost", "net:http:*.example.invalid"]
    (app / "aoapp.json").write_text(json.dumps(manifest))
    policy = {"com.aotui.browser": {"net": ["docs.example.invalid"]}}
    desktop = start_desktop([str(app)], allow_private_http=True, policy=policy)
    desktop.client.execute("<context>open --application app_0</context>")
    view, _ = tab(desktop)
    with pytest.raises(AotuiError) as refused:
        run(desktop, view, f"navigate --url {site}/index.html")
    assert refused.value.code is ErrorCode.E_PERMISSION
    assert (
        "host localhost is granted to this app, but this desktop's config narrows its grants to "
        'docs.example.invalid (policy."com.aotui.browser".net)'
    ) in refused.value.message
    assert "the desktop config's policy for the Browser would have to list it" in (
        refused.value.message
    )
    assert tab(desktop)[1].startswith("URL: about:blank")  # it stayed where it was


LATE = """<!doctype html><html><head><title>Late</title></head><body><h1>Orders</h1>
<ul id="list"></ul><script>
  const show = (orders) => { for (const o of orders) document.querySelector("#list").append(
      Object.assign(document.createElement("li"), {textContent: o})); };
  setTimeout(() => fetch("/slow/orders").then((r) => r.json()).then((orders) => {
    setTimeout(() => show(orders), 8);  // drawn a little after the answer, as frameworks do
  }), 5);
</script></body></html>"""


class _Slow(_Quiet):
    """The test's pages, and /slow/orders answered 300 ms late."""

    def do_GET(self) -> None:
        if self.path != "/slow/orders":
            super().do_GET()
            return
        time.sleep(0.3)
        body = json.dumps(["Tea", "Cake"]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_navigate_answers_once_what_the_page_fetched_after_loading_is_in(
    desktop: RunningDesktop, tmp_path: Path
) -> None:
    # A page is read once it is parsed and has stopped changing; a request it makes meanwhile
    # (5 ms after it is parsed, answered 300 ms late, longer than the quiet window) holds the
    # answer until its change is in, so the next pull shows the orders.
    root = tmp_path / "late"
    root.mkdir()
    (root / "index.html").write_text(LATE)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Slow, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        view, _ = tab(desktop)
        base = f"http://localhost:{server.server_address[1]}"
        assert run(desktop, view, f"navigate --url {base}/index.html")["title"] == "Late"
        _, page = tab(desktop, "Late")
        assert "- Tea\n- Cake" in page, page
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


WAITS = """<!doctype html><html><head><title>Waits</title></head><body>
<button onclick="setTimeout(() => document.querySelector('#note').remove(), 300)">Dismiss</button>
<p id="note"><a href="#x">Notice</a></p>
<button onclick="setTimeout(() => location.href = '/two.html', 300)">Later</button>
<button onclick="for (let i = 0; i < 8; i++) setTimeout(() => fetch('/two.html'), i * 150)">
Poll</button></body></html>"""


def test_wait_for_a_ref_to_go_a_navigation_and_the_network_to_idle(
    desktop: RunningDesktop, site: str, tmp_path: Path
) -> None:
    (tmp_path / "site" / "waits.html").write_text(WAITS)
    view, _ = tab(desktop)
    run(desktop, view, f"navigate --url {site}/waits.html")
    view, page = tab(desktop, "Waits")
    notice = ref(page, "Notice")
    assert run(desktop, view, f"wait_for --target {notice}") == {"met": True}
    run(desktop, view, f"click --target {ref(page, 'Dismiss')}")
    short = run(desktop, view, f"wait_for --target {notice} --visible false --timeout_ms 50")
    assert short == {"met": False, "why": f"waited 50 ms for {notice} to be gone"}
    gone = run(desktop, view, f"wait_for --target {notice} --visible false")
    assert gone == {"met": True}
    # Requests for 1 s, then none: idle only after the last (500 ms without one).
    run(desktop, view, f"click --target {ref(page, 'Poll')}")
    busy = run(desktop, view, "wait_for --network_idle true --timeout_ms 300")
    assert busy == {"met": False, "why": "waited 300 ms; the page kept making requests"}
    assert run(desktop, view, "wait_for --network_idle true") == {"met": True}
    run(desktop, view, f"click --target {ref(page, 'Later')}")
    moved = run(desktop, view, "wait_for --navigation true")
    assert moved == {"met": True, "url": f"{site}/two.html", "title": "Two"}
    _, page = tab(desktop, "Two")
    assert "# Second page" in page
    none = run(desktop, view, "wait_for --navigation true --timeout_ms 100")
    assert none == {"met": False, "why": "waited 100 ms; the tab did not navigate"}
    with pytest.raises(AotuiError) as two:
        run(desktop, view, "wait_for --text a --navigation true")
    assert "wait_for takes one of --text" in two.value.message
    assert "(got --text, --navigation)" in two.value.message


DIALOGS = """<!doctype html><html><head><title>Dialogs</title></head><body>
<button onclick="alert('Saved')">Save</button>
<button onclick="out(confirm('Delete it?') ? 'deleted' : 'kept')">Delete</button>
<button onclick="out('hello ' + prompt('Name?'))">Ask</button>
<p id="out">-</p>
<script>function out(text) { document.querySelector("#out").textContent = text; }</script>
</body></html>"""


def test_javascript_dialogs_never_hang_a_tab_and_the_agent_answers_them(
    desktop: RunningDesktop, site: str, tmp_path: Path
) -> None:
    # A page waiting in alert() or confirm() runs nothing (no call into it would answer): the
    # Browser answers at once, tells the operation's answer, and dismisses what it was not
    # told to accept.
    (tmp_path / "site" / "dialogs.html").write_text(DIALOGS)
    view, _ = tab(desktop)
    run(desktop, view, f"navigate --url {site}/dialogs.html")
    view, page = tab(desktop, "Dialogs")
    saved = run(desktop, view, f"click --target {ref(page, 'Save')}")
    assert saved == {"dialogs": [{"type": "alert", "message": "Saved", "answered": "ok"}]}
    asked = run(desktop, view, f"click --target {ref(page, 'Delete')}")
    assert asked == {
        "dialogs": [{"type": "confirm", "message": "Delete it?", "answered": "dismissed"}]
    }
    assert "kept" in tab(desktop, "Dialogs")[1]
    assert run(desktop, view, "dialog --accept true") == {"next_dialog": "accepted"}
    run(desktop, view, f"click --target {ref(page, 'Delete')}")
    assert "deleted" in tab(desktop, "Dialogs")[1]
    run(desktop, view, "dialog --accept true --text Ada")
    named = run(desktop, view, f"click --target {ref(page, 'Ask')}")
    assert named["dialogs"][0]["answered"] == "accepted with 'Ada'"
    assert "hello Ada" in tab(desktop, "Dialogs")[1]


MARKED = """<!doctype html><html><head><title>Mail</title></head><body>
<section view="Inbox" description="Mail to read">
  <ul list="mail[]:inbox" id="inbox">
    <li key="m1" data-value='"m1"'>Hello from Ada</li>
    <li key="m2" data-value='"m2"'>Lunch?</li>
  </ul>
  <button operation="archive" description="Archive a mail" args='{"mail": "mail"}'>Archive</button>
</section>
<script>
  document.querySelector('[view="Inbox"]').addEventListener("aotui:operation", (event) => {
    const {operation, args} = event.detail;
    if (operation !== "archive") return event.detail.fail("no such operation");
    document.querySelector(`[key="${args.mail.key}"]`).remove();
    event.detail.respond("archived " + args.mail.value);
  });
</script></body></html>"""


def test_a_page_marked_for_agents_reads_as_an_app_in_its_tab(
    desktop: RunningDesktop, site: str, tmp_path: Path
) -> None:
    (tmp_path / "site" / "mail.html").write_text(MARKED)
    view, _ = tab(desktop)
    run(desktop, view, f"navigate --url {site}/mail.html")
    view, page = tab(desktop, "Mail")
    assert "This page marks views for agents; mount them:\n\n- [Inbox](view:view_2)\n" in page
    inbox = re.search(r"\[Inbox\]\(view:(view_\d+)\)", page)
    assert inbox, page
    desktop.client.execute(f'<context app_id="app_0">mount --view {inbox.group(1)}</context>')
    shown = views(desktop)["Inbox"][1]
    assert "[Hello from Ada](mail:inbox[0])" in shown
    assert "[Archive](operation:archive)" in shown
    archived = run(desktop, inbox.group(1), "archive --mail inbox[0]")
    assert archived == "archived m1"
    shown = views(desktop)["Inbox"][1]
    assert "Hello from Ada" not in shown
    assert "[Lunch?](mail:inbox[0])" in shown
