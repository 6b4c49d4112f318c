"""Web apps (issue 22): what a page in the worker's browser costs, beside Playwright and Python.

One run, one desktop (``apps/tasks``, its Python twin ``tests/apps/tasks_twin``, a second copy of
Tasks, a page that fetches and a page of ~200 KB), and, where ``playwright`` is installed (the
``bench`` extra; it drives Debian's own browser through ``executable_path``, offline: no
``playwright install``), one Playwright session beside it. Pages go to Playwright from a loopback
``http.server`` of the bench (the app's files and ``/.aotui/aotui.js``). Peers are measured in
the same rounds, interleaved. Figures, each a p50:

1. **open → first fragment**: ``open --application`` of Tasks, which returns once its first
   fragment arrived (a fresh worker and browser each time: the app is closed between samples);
   beside it Playwright's ``launch`` + ``new_page`` + ``goto`` of the same page, the twin's
   open (a zygote fork), and the same page opened by a :class:`WebApp` of the bench itself (no
   worker, no confinement: what the sandbox adds is the difference).
2. **execute**: ``complete`` / ``reopen`` of a task through the desktop (the event, the DOM
   change, the settling, the render, the ack); the twin's beside it.
3. **snapshot of a 200 KB page, render only**: in process (a :class:`WebApp` in the bench, its
   browser unconfined), after an operation that changes one item, what the worker does to render
   the view: ``view.render()`` (the view's marked HTML read from the page) then ``render_view``
   with the view's item cache; beside it Playwright's ``locator("body").aria_snapshot()`` of the
   same page. The same page's operation through the desktop (render included) is printed too.
4. **memory per web app**: as root, the worker's cgroup v1 memory charge
   (``memory.usage_in_bytes``, with its ``memory.stat`` rss and cache), with one web app running
   and then with a second, and the twin's; unprivileged, the sum of PSS over the worker's
   process tree (the table says which).
5. **proxy cost per request**: a page fetches a loopback URL granted to it (``net:http:localhost``,
   ``allow_private_http``) N times, each timed in the page with ``performance.now()``; beside it
   the same function in Playwright's page (unconfined, straight to the server). The cost is our
   p50 minus that one's (minus a Python ``urllib`` fetch's without Playwright). The broker's own
   fetch (``supervisor.broker.http.fetch``, in the bench's process) is printed too.

Run: ``python bench/bench_web.py`` (or ``python -m bench.bench_web``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aotui.protocol.messages import HttpRequest  # noqa: E402
from aotui.sandbox import browser  # noqa: E402
from aotui.sandbox.render import ItemCache, render_view  # noqa: E402
from aotui.sandbox.sdk import OperationCall  # noqa: E402
from aotui.sandbox.webapp import WebApp  # noqa: E402
from aotui.supervisor.broker.http import BrokerPolicy, fetch  # noqa: E402
from bench.bench_desktop import TEST_APPS, Desktop, _pct  # noqa: E402
from bench.bench_render import list_view_html  # noqa: E402
from bench.loopback import Quiet, serve  # noqa: E402

TASKS = ROOT / "apps" / "tasks"
HELPER = ROOT / "sandbox" / "assets" / "aotui.js"
OPEN_ROUNDS = 15
EXEC_ROUNDS = 200
RENDER_ROUNDS = 30
PROXY_BURSTS = 6
PROXY_FETCHES = 40
PAGE_BYTES = 200_000
GOALS = {"open": 500.0, "execute": 15.0, "render": 40.0, "memory": 150.0, "proxy": 3.0}
#: Desktop apps, in order: app_0 ... app_4.
WEB, TWIN, WEB2, FETCHER, BIG = (f"app_{i}" for i in range(5))

_BURST_JS = """async (url, n) => {
  const times = [];
  for (let i = 0; i < n; i++) {
    const began = performance.now();
    const reply = await fetch(url, {cache: "no-store"});
    await reply.text();
    times.push(performance.now() - began);
  }
  return times;
}"""
#: Playwright's ``evaluate`` hands the function one argument.
_PEER_BURST = f"([url, n]) => ({_BURST_JS})(url, n)"
_FETCHER = f"""<!doctype html><html><head><meta charset="utf-8"><title>Fetcher</title>
<script src="/.aotui/aotui.js"></script></head><body>
<section view="Fetcher"><p id="out">idle</p>
<button operation="burst" args='{{"url": "string", "n": "number"}}'>Burst</button></section>
<script>
const burst = {_BURST_JS};
let bursts = 0;
aotui.operation("burst", async ({{ url, n }}) => {{
  const times = await burst(url, n);
  document.getElementById("out").textContent = "bursts: " + (++bursts);
  return times;
}});
</script></body></html>"""
_TOUCH = """<script>
let touched = 0;
aotui.operation("touch", ({ n }) => {
  const item = document.querySelectorAll("[list] > li")[n];
  item.firstChild.textContent = `Message number ${n} touched ${++touched} times`;
  return touched;
});
</script>"""


def _big_page(target: int = PAGE_BYTES) -> str:
    """A page of about ``target`` bytes, nearly all one view's marked HTML: a long list."""
    per_item = len(list_view_html(100)) / 100
    view = list_view_html(round(target / per_item)).replace(
        "</section>", '<button operation="touch" args=\'{"n": "number"}\'>Touch</button></section>'
    )
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>Long list</title>'
        '<script src="/.aotui/aotui.js"></script></head><body>'
        f"{view}{_TOUCH}</body></html>"
    )


def _app(where: Path, name: str, manifest: dict[str, Any], page: str | None = None) -> Path:
    app = where / name
    if page is None:
        shutil.copytree(TASKS, app)
    else:
        app.mkdir()
        (app / "index.html").write_text(page)
    base = {"version": "1.0.0", "entry": "index.html", "description": "", "permissions": []}
    (app / "aoapp.json").write_text(json.dumps({**base, **manifest}))
    return app


class _Site(Quiet):
    """The bench's loopback server: the apps' files for Playwright, and ``/ping`` to fetch."""

    protocol_version = "HTTP/1.1"  # keep-alive, as a server usually offers it
    # Headers and body leave in two writes: without TCP_NODELAY, a kept-alive connection waits
    # for the client's delayed ACK (40 ms) before the body.
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        if self.path in ("/ping", "/.aotui/aotui.js"):
            body = b"pong" if self.path == "/ping" else HELPER.read_bytes()
            kind = "text/plain" if self.path == "/ping" else "text/javascript"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Access-Control-Allow-Origin", "*")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


def _serve(directory: Path) -> contextlib.AbstractContextManager[int]:
    return serve(directory, _Site)


class _Peer:
    """Playwright driving Debian's browser, or nothing (``None`` figures) when not installed."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self.browser_path = (browser.find_browser() or ("",))[0]
        self.why_not = ""
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            self.why_not = "playwright is not installed (pip install 'aotui[bench]'): peer skipped"
            self.playwright: Any = None
            return
        self.playwright = stack.enter_context(sync_playwright())

    def launch(self) -> Any:
        return self.playwright.chromium.launch(executable_path=self.browser_path, headless=True)

    def open_ms(self, url: str) -> float:
        began = time.perf_counter()
        launched = self.launch()
        launched.new_page().goto(url)
        took = (time.perf_counter() - began) * 1000
        launched.close()
        return took


def _ms(work: Callable[[], Any]) -> float:
    began = time.perf_counter()
    work()
    return (time.perf_counter() - began) * 1000


class _Bench:
    """The desktop, the peer and the loopback site of one run."""

    def __init__(self, desktop: Desktop, peer: _Peer, port: int) -> None:
        self.desktop, self.client, self.peer, self.port = desktop, desktop.client, peer, port
        self.views: dict[str, str] = {}

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def open(self, app: str) -> float:
        """Open ``app`` (the command returns once its first fragment arrived); its ms."""
        took = _ms(lambda: self.client.execute(f"<context>open --application {app}</context>"))
        snapshot = self.client.snapshot()
        head = snapshot.index(f'<application id="{app}"')
        start = snapshot.index('<view id="', head) + len('<view id="')
        self.views[app] = snapshot[start : snapshot.index('"', start)]
        return took

    def close(self, app: str) -> None:
        self.client.execute(f"<context>close --application {app}</context>")

    def run(self, app: str, command: str) -> Any:
        context = f'<context app_id="{app}" view_id="{self.views[app]}">execute {command}</context>'
        return self.client.execute(context)["results"][0]

    def opens(self, site: Path) -> dict[str, list[float]]:
        """Open and close Tasks, its twin and Playwright's page, round after round; the same
        page in a :class:`WebApp` of this process too."""
        samples: dict[str, list[float]] = {"ours": [], "twin": [], "peer": [], "unconfined": []}
        for round_ in range(OPEN_ROUNDS + 1):  # the first round warms up
            if round_ % 2:
                samples["unconfined"].append(_unconfined_open(site))
            for name, app in (("ours", WEB), ("twin", TWIN)):
                took = self.open(app)
                self.close(app)
                if round_:
                    samples[name].append(took)
            if self.peer.playwright is not None:
                took = self.peer.open_ms(self.url("tasks2/index.html"))
                if round_:
                    samples["peer"].append(took)
        return samples

    def executes(self) -> dict[str, list[float]]:
        """``complete`` then ``reopen`` a task, in Tasks and in its twin, in turn."""
        samples: dict[str, list[float]] = {"ours": [], "twin": []}
        for app in (WEB, TWIN):
            self.open(app)
            self.run(app, "add_task --title 'Answer Jane'")
            self.client.snapshot()  # the agent reads tasks[0]
        for i in range(EXEC_ROUNDS + 20):
            command = "reopen --task tasks[0]" if i % 2 else "complete --task tasks[0]"
            for name, app in (("ours", WEB), ("twin", TWIN)):
                took = _ms(functools.partial(self.run, app, command))
                if i >= 20:
                    samples[name].append(took)
        return samples

    def memory(self) -> dict[str, tuple[float, str]]:
        """The charge of Tasks alone, then of a second web app beside it, and of the twin."""
        time.sleep(1)  # the page's first timers and the worker's first renders are over
        found = {"web app 1": _charge(self._pid(WEB))}
        self.open(WEB2)
        time.sleep(1)
        found["web app 2"] = _charge(self._pid(WEB2))
        found["web app 1 beside it"] = _charge(self._pid(WEB))
        found["Python twin"] = _charge(self._pid(TWIN))
        self.close(WEB2)
        return found

    def _pid(self, app: str) -> int:
        row = next(r for r in self.client.status()["apps"] if r["app"] == app)
        return int(row["pid"])

    def proxy(self) -> dict[str, list[float]]:
        """N fetches timed in the page, in bursts: ours through the broker, Playwright's page
        straight to the server; the broker's own fetch and urllib's, in this process."""
        samples: dict[str, list[float]] = {"ours": [], "peer": [], "broker": [], "urllib": []}
        target = f"http://localhost:{self.port}/ping"
        policy = BrokerPolicy(allowed_hosts=("localhost",), allow_private=True)
        request = HttpRequest("GET", target)
        self.open(FETCHER)
        page = None
        if self.peer.playwright is not None:
            page = self.peer.launch().new_page()
            page.goto(self.url("fetcher/index.html"))
        for burst in range(PROXY_BURSTS + 1):  # the first burst warms up
            found = {
                "ours": self.run(FETCHER, f"burst --url {target} --n {PROXY_FETCHES}"),
                "peer": page.evaluate(_PEER_BURST, [target, PROXY_FETCHES]) if page else [],
                "broker": [_ms(lambda: fetch(request, policy)) for _ in range(PROXY_FETCHES)],
                "urllib": [_ms(lambda: _fetch(target)) for _ in range(PROXY_FETCHES)],
            }
            for name, times in found.items():
                if burst:
                    samples[name] += times
        if page is not None:
            page.context.browser.close()
        return samples

    def big_page_executes(self) -> list[float]:
        """The 200 KB page's ``touch`` through the desktop: event, change, render, ack."""
        self.open(BIG)
        samples = [_ms(functools.partial(self.run, BIG, f"touch --n {i}")) for i in range(40)]
        self.close(BIG)
        return samples[10:]


def _fetch(url: str) -> None:
    with urllib.request.urlopen(url, timeout=10) as reply:
        reply.read()


def _charge(pid: int) -> tuple[float, str]:
    """MB charged to the worker's memory cgroup (as root) and of what; else its tree's PSS."""
    with open(f"/proc/{pid}/cgroup") as lines:
        for line in lines:
            _, controllers, path = line.strip().split(":", 2)
            group = Path("/sys/fs/cgroup/memory", path.lstrip("/"))
            usage = group / "memory.usage_in_bytes"
            if "memory" in controllers.split(",") and "/aotui/" in path and usage.exists():
                stat = dict(
                    (k, int(v) / 2**20)
                    for k, v in (
                        row.split() for row in (group / "memory.stat").read_text().splitlines()
                    )
                )
                what = (
                    f"cgroup charge: rss {stat['total_rss']:.0f} + cache {stat['total_cache']:.0f}"
                    f" (shmem {stat['total_shmem']:.0f})"
                )
                return int(usage.read_text()) / 2**20, what
    tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    pss = sum(p.memory_full_info().pss for p in tree)
    return pss / 2**20, f"PSS of {len(tree)} processes (no cgroup: unprivileged)"


@contextlib.contextmanager
def _in_process(where: Path) -> Iterator[None]:
    """Web apps in this process keep their browser's profile in ``where`` (``TMPDIR``)."""
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(where)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old


def _end(app: WebApp) -> None:
    """Close the browser of a web app of this process (in a worker, the worker's end does)."""
    if app.host.browser is not None:
        app.host.browser.close()


def _unconfined_open(site: Path) -> float:
    """Tasks opened by a :class:`WebApp` of this process (no worker, no confinement): start,
    load, settle, one render; for reference beside the desktop's open."""
    with _in_process(site):
        app = WebApp(str(TASKS), "index.html", "app_8")
        try:
            began = time.perf_counter()
            app.on_start()
            for root in app.roots():
                render_view(app.add_view(root).render(), ItemCache())
            return (time.perf_counter() - began) * 1000
        finally:
            _end(app)


def _renders(site: Path, peer: _Peer, url: str) -> dict[str, list[float]]:
    """The 200 KB page's view rendered in process, as the worker does; Playwright's
    ``aria_snapshot`` of the same page, round after round."""
    samples: dict[str, list[float]] = {"ours": [], "read": [], "markdown": [], "peer": []}
    app = WebApp(str(site / "big"), "index.html", "app_9")
    page = None
    with _in_process(site):
        try:
            app.on_start()
            (view,) = [app.add_view(root) for root in app.roots()]
            cache = ItemCache()  # one per view, kept between its renders, as in the worker
            render_view(view.render(), cache)
            if peer.playwright is not None:
                page = peer.launch().new_page()
                page.goto(url)
            for i in range(RENDER_ROUNDS + 5):  # the first 5 warm up
                app.operate(view.key, OperationCall("touch", {"n": i}))
                began = time.perf_counter()
                html = view.render()
                read = time.perf_counter()
                render_view(html, cache)
                done = time.perf_counter()
                theirs = _ms(lambda: page.locator("body").aria_snapshot()) if page else None
                if i >= 5:
                    samples["ours"].append((done - began) * 1000)
                    samples["read"].append((read - began) * 1000)
                    samples["markdown"].append((done - read) * 1000)
                    if theirs is not None:
                        samples["peer"].append(theirs)
            samples["read bytes"] = [float(len(html.encode()))]
        finally:
            if page is not None:
                page.context.browser.close()
            _end(app)
    return samples


def run() -> dict[str, float]:
    """Measure, print the table, return the figures."""
    if browser.find_browser() is None:
        print(f"no headless browser: {browser.INSTALL_HINT}; nothing measured")
        return {}
    load = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        site = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="aotui-bench-web-")))
        site.chmod(0o755)  # as root, workers run as per-app uids that must read the apps
        _app(site, "tasks2", {"id": "bench.tasks2", "name": "Tasks 2"})
        fetcher = {"id": "bench.fetcher", "name": "Fetcher", "permissions": ["net:http:localhost"]}
        _app(site, "fetcher", fetcher, _FETCHER)
        _app(site, "big", {"id": "bench.big", "name": "Long list"}, _big_page())
        port = stack.enter_context(_serve(site))
        peer = _Peer(stack)
        if peer.why_not:
            print(peer.why_not)
        apps = [TASKS, TEST_APPS / "tasks_twin", *(site / n for n in ("tasks2", "fetcher", "big"))]
        desktop = Desktop(apps, allow_private_http=True)
        stack.callback(desktop.close)
        bench = _Bench(desktop, peer, port)
        found = {
            "open": bench.opens(site),
            "execute": bench.executes(),
            "proxy": bench.proxy(),
            "big page execute": {"ours": bench.big_page_executes()},
        }
        memory = bench.memory()
        found["render"] = _renders(site, peer, bench.url("big/index.html"))
        page_bytes = (site / "big" / "index.html").stat().st_size
    print(f"load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    return _report(found, memory, page_bytes)


def _row(name: str, ours: float, goal: float | None, peer: float | None, note: str) -> None:
    verdict = "" if goal is None else "ok" if ours <= goal else "MISSED"
    bound = "" if goal is None else f"≤ {goal:g}"
    theirs = f"{peer:9.1f}{ours / peer:7.2f}" if peer else f"{'-':>9}{'-':>7}"
    print(f"{name:<38}{ours:8.1f}  {bound:<8}{verdict:<7}{theirs}  {note}")


def _or_dash(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _report(
    found: dict[str, dict[str, list[float]]], memory: dict[str, tuple[float, str]], page: int
) -> dict[str, float]:
    """The table (figure, ours, goal, peer, ratio, notes) and the figures."""
    p = {f"{k} {n}": _pct(v, 0.5) for k, d in found.items() for n, v in d.items() if v}
    peer = {k: p.get(f"{k} peer") for k in found}
    print(f"{'figure (p50; ms, memory MB)':<38}{'ours':>8}  {'goal':<8}{'':<7}{'peer':>9}"
          f"{'ratio':>7}  (peer: Playwright on Debian's browser)")  # fmt: skip
    _row("open → first fragment", p["open ours"], GOALS["open"], peer["open"],
         f"peer: launch + goto; Python twin {p['open twin']:.1f}; the same page opened by a "
         f"WebApp in this process, unconfined {p['open unconfined']:.1f}")  # fmt: skip
    _row("execute (event → DOM change → ack)", p["execute ours"], GOALS["execute"], None,
         f"Python twin {p['execute twin']:.1f}")  # fmt: skip
    read = p["render read bytes"] / 1024
    _row(f"snapshot of a {page / 1000:.0f} KB page (render)", p["render ours"], GOALS["render"],
         peer["render"], f"peer: aria_snapshot; ours: read the view ({read:.0f} KiB of HTML) "
         f"{p['render read']:.1f} + Markdown {p['render markdown']:.1f}, in process; through "
         f"the desktop, its operation's ack {p['big page execute ours']:.1f}")  # fmt: skip
    for name, (mb, what) in memory.items():
        _row(f"memory, {name}", mb, None if "twin" in name else GOALS["memory"], None, what)
    direct = peer["proxy"]
    over = "over a fetch from Playwright's page"
    if direct is None:
        direct, over = p["proxy urllib"], "over Python's urllib (no Playwright)"
    cost = p["proxy ours"] - direct
    _row("proxy cost per request", cost, GOALS["proxy"], None,
         f"{over}; fetch p50 in the page {p['proxy ours']:.2f}, from Playwright's page "
         f"{_or_dash(peer['proxy'])}; in this process: the broker's fetch "
         f"{p['proxy broker']:.2f}, urllib {p['proxy urllib']:.2f}")  # fmt: skip
    figures = {f"web {k} p50 ms": v for k, v in p.items() if not k.endswith("bytes")}
    figures.update({f"web memory {name} mb": mb for name, (mb, _) in memory.items()})
    figures["web proxy cost ms"] = cost
    return figures


if __name__ == "__main__":
    run()
