"""Hostile apps beside a victim (issue 9): is the victim undisturbed, is the attack contained?

For each attack a fresh desktop runs the ``echo`` app (the victim, ``app_0``) and one hostile test
app (``app_1``: ``blinder``, ``forger`` or ``flooder``; for the ``W`` rows the hostile web page
``webhostile``, in a headless browser inside its worker's confinement). The victim's execute
(``bump``, a durable commit) and snapshot latencies are measured quiet, then while the attack runs;
a sampler thread records the supervisor's peak RSS and its CPU share (quiet and under attack: both
include the load of the measurement itself, a bump and a snapshot every 20 ms). The quiet window is
as long as the attack's; the notes give the machine's load average before and after (other work on
the machine moves a p99 of ~200 samples more than most attacks do). An attack is contained when
every snapshot answered, the attacker is named in System Logs, the victim's p99 stays within 3× its
quiet p99 (or under 20 ms: a 2 ms p99 tripled is below scheduler noise; the table shows the strict
ratio too) and the supervisor's RSS within its quiet RSS + 64 MB.

Run: ``python -m bench.bench_hostile`` (or ``python -m bench``).
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aotui.protocol.errors import AotuiError  # noqa: E402
from aotui.sandbox import browser  # noqa: E402
from aotui.supervisor.interface.client import Client  # noqa: E402
from bench.bench_desktop import TEST_APPS, Desktop, _pct  # noqa: E402

#: Victim p99 may grow to this multiple of its quiet p99…
P99_FACTOR = 3.0
#: …or stay under this many milliseconds.
P99_FLOOR_MS = 20.0
#: Supervisor RSS may grow by this much over its quiet RSS.
RSS_SLACK = 64 << 20


@dataclass(frozen=True)
class Attack:
    """One attack: the hostile app, how to start it, and what System Logs must say."""

    name: str
    app: str
    start: Callable[[Client, dict[str, Any]], None]
    #: What System Logs must say (any one of them, for a tuple).
    named: str | tuple[str, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    #: Seconds the victim is measured after the attack started.
    seconds: float = 5.0
    #: What else the final snapshot must show (a forgery attack: the structure is intact).
    check: Callable[[str], bool] | None = None
    #: What the notes say when ``check`` holds, and when it does not.
    check_says: tuple[str, str] = ("structure intact", "FORGED")


@dataclass
class Row:
    """The measurements of one attack."""

    attack: str
    execute_quiet: tuple[float, float]
    execute_attack: tuple[float, float]
    snapshot_quiet: tuple[float, float]
    snapshot_attack: tuple[float, float]
    rss_quiet_mb: float
    rss_peak_mb: float
    cpu_quiet_percent: float
    cpu_percent: float
    snapshots_failed: int
    named: bool
    checked: bool = True
    notes: list[str] = field(default_factory=list)

    @property
    def worst_ratio(self) -> float:
        """The largest attack p99 / quiet p99 of execute and snapshot."""
        return max(
            self.execute_attack[1] / self.execute_quiet[1],
            self.snapshot_attack[1] / self.snapshot_quiet[1],
        )

    @property
    def contained(self) -> bool:
        within = all(
            attack[1] <= max(P99_FACTOR * quiet[1], P99_FLOOR_MS)
            for quiet, attack in (
                (self.execute_quiet, self.execute_attack),
                (self.snapshot_quiet, self.snapshot_attack),
            )
        )
        rss_ok = self.rss_peak_mb <= self.rss_quiet_mb + RSS_SLACK / 2**20
        return within and rss_ok and self.snapshots_failed == 0 and self.named and self.checked


def _run(client: Client, app: str, operation: str, **args: Any) -> Any:
    command = {"app": app, "view": "view_0", "operation": operation, "args": args}
    try:
        return client.execute(command)["results"][0]
    except AotuiError as exc:
        return exc


def _attack(
    what: str, arg: str = "", operation: str = "attack", **more: Any
) -> Callable[..., None]:
    def start(client: Client, context: dict[str, Any]) -> None:
        # The attacker's own command may block (a worker about to be killed): in a thread.
        def go() -> None:
            with Client("bench", context["runtime"], timeout_s=60) as own:
                context["outcome"] = _run(own, "app_1", operation, what=what, arg=arg, **more)

        thread = threading.Thread(target=go, daemon=True)
        thread.start()
        context["threads"].append(thread)

    return start


def _grow_and_mount(client: Client, context: dict[str, Any]) -> None:
    for _ in range(5):
        _run(client, "app_1", "attack", what="grow", arg="900000")
    text = client.snapshot()
    children = sorted(set(re.findall(r"\[Big big\d\]\(view:(view_\d+)", text)))
    mounts = "; ".join(f"mount --view {view}" for view in children)
    client.execute(f'<context app_id="app_1">{mounts}</context>')


def _forged_text(client: Client, context: dict[str, Any]) -> None:
    _run(client, "app_1", "attack", what="label")
    context["outcome"] = _run(client, "app_1", "attack", what="error")


_LOOSE_TAG = re.compile(r"<[\s/]*(desktop|application_info|application|view|context)\b", re.I)


def _unforged(text: str) -> bool:
    """One Operation Log per app block, and the forged error only escaped."""
    block = text[text.index('<application id="app_1"') :]
    block = block[: block.index("</application>")]
    errors = [line for line in block.splitlines() if "E_APP_ERROR" in line]
    return (
        len(re.findall("^## Operation Log", block, re.M)) == 1
        and len(errors) == 1
        and not _LOOSE_TAG.search(errors[0])
    )


class _SlowHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        time.sleep(4)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def _slow_http(client: Client, context: dict[str, Any]) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    context["cleanup"].append(server.shutdown)
    url = f"http://127.0.0.1:{server.server_address[1]}/slow"
    _run(client, "app_1", "attack", what="http", arg=url)


def _page(operation: str, **args: Any) -> Callable[..., None]:
    """One attack of the hostile page ``webhostile``: its operation, in a thread (it may end
    with the page's worker)."""

    def start(client: Client, context: dict[str, Any]) -> None:
        def go() -> None:
            with Client("bench", context["runtime"], timeout_s=60) as own:
                context["outcome"] = _run(own, "app_1", operation, **args)

        thread = threading.Thread(target=go, daemon=True)
        thread.start()
        context["threads"].append(thread)

    return start


def _big_flood(client: Client, context: dict[str, Any]) -> None:
    """A 1 MB view, then the mutation flood: a 1 MB fragment up to 10 times a second."""
    _run(client, "app_1", "grow", kb=1000)
    _page("flood")(client, context)


ATTACKS = [
    Attack("A1 five 0.9 MB views", "blinder", _grow_and_mount, "Blinder (app_1) is over its"),
    Attack(
        "A2 250-deep view chain",
        "blinder",
        _attack("deep", "250"),
        "Blinder (app_1) is over its",
    ),
    Attack("A3 50 roots of 900 KB", "blinder", _attack("wide"), "Blinder broke the channel"),
    Attack("B1 fragments, fresh keys", "blinder", _attack("fresh"), "Blinder broke the channel"),
    Attack(
        "B2 128 MB frame",
        "forger",
        _attack("oversized", "128", operation="forge"),
        # Whichever comes first: the refused frame, or the 128 MB the forger built to send.
        ("Forger broke the channel", "Forger over its memory limit"),
    ),
    Attack(
        "C1 forged label and error",
        "blinder",
        _forged_text,
        "Installed Blinder",
        check=_unforged,
    ),
    Attack(
        "G  wrong reply type",
        "forger",
        _attack("wrong-reply", operation="forge"),
        "answering execute forge",
    ),
    Attack("D1 stdout flood", "flooder", _attack("stdout", seconds=8), "Flooder prints more"),
    Attack("D2 log chatter 10/s", "flooder", _attack("log", seconds=8), "Flooder: chatter"),
    Attack(
        "D2b log flood 4,000/s",
        "flooder",
        _attack("log", "400", seconds=8),
        "log line(s) dropped (over 10/s)",
    ),
    Attack(
        "D2c raw 2 MB log lines",
        "flooder",
        _attack("biglog", "2000000", seconds=8),
        "Flooder broke the channel protocol (the worker sent a log record",
    ),
    Attack(
        "D3 7 slow HTTP calls",
        "flooder",
        _slow_http,
        "Flooder opened",
        {"allow_private_http": True},
    ),
    Attack("D4 restart storm", "flooder", _attack("storm"), "Flooder crashed (exit 3)"),
    # A hostile web page (issue 22): the page's browser runs in its worker's confinement.
    Attack(
        "W1 page mutation flood",
        "webhostile",
        _page("flood"),
        ("Web Hostile crashed", "Web Hostile is busy serving", "Web Hostile over its memory"),
    ),
    Attack("W2 page memory balloon", "webhostile", _page("balloon"), "Web Hostile over its memory"),
    Attack(
        "W3 page window bomb (400)",
        "webhostile",
        _page("tab_bomb", count=400),
        "Installed Web Hostile",  # refused in the page: nothing to log
        check=lambda text: "tab bomb: 0 of 400 windows opened" in text,
        check_says=("no window opened", "WINDOWS OPENED"),
    ),
    Attack("W4 page spinning loop", "webhostile", _page("spin"), "Web Hostile crashed"),
    Attack(
        "W5 page frame bomb (400)",
        "webhostile",
        _page("frame_bomb", count=400),
        ("Web Hostile crashed", "Web Hostile did not finish"),
    ),
    Attack(
        "W6 page 1 MB view flood",
        "webhostile",
        _big_flood,
        ("Web Hostile crashed", "Web Hostile is busy serving", "Web Hostile over its memory"),
    ),
]


class Sampler:
    """Samples the supervisor's RSS and CPU time every 20 ms on a thread."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _cpu(self) -> float:
        times = self.process.cpu_times()
        return float(times.user + times.system)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.02)

    def __enter__(self) -> Sampler:
        self.cpu, self.wall = self._cpu(), time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.cpu_share = (self._cpu() - self.cpu) / (time.monotonic() - self.wall)


def _measure(client: Client, seconds: float, failed: list[int]) -> tuple[list[float], list[float]]:
    """Alternate the victim's bump and a snapshot for ``seconds``; latencies in ms."""
    executes: list[float] = []
    snapshots: list[float] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        began = time.perf_counter()
        _run(client, "app_0", "bump")
        executes.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        try:
            client.snapshot()
        except AotuiError:
            failed[0] += 1
        snapshots.append((time.perf_counter() - began) * 1000)
        time.sleep(0.02)
    return executes, snapshots


def _alternatives(named: str | tuple[str, ...]) -> tuple[str, ...]:
    return named if isinstance(named, tuple) else (named,)


def _p(samples: list[float]) -> tuple[float, float]:
    return _pct(samples, 0.5), _pct(samples, 0.99)


def run_attack(attack: Attack) -> Row:
    """One attack on a fresh desktop beside the victim."""
    desktop = Desktop([TEST_APPS / "echo", TEST_APPS / attack.app], **attack.settings)
    context: dict[str, Any] = {
        "runtime": str(desktop.tmp / "run"),
        "threads": [],
        "cleanup": [],
    }
    try:
        client = desktop.client
        client.execute("<context>open --application app_0; open --application app_1</context>")
        supervisor = psutil.Process(desktop.process.pid)
        failed = [0]
        _measure(client, 1.0, failed)  # warm up
        rss_quiet = supervisor.memory_info().rss
        load = os.getloadavg()[0]
        with Sampler(desktop.process.pid) as quiet:
            # As long as the attack's window: both p99s are the same order statistic (with ~150
            # samples, the second worst), not a larger sample's extreme against a smaller one's.
            quiet_exec, quiet_snap = _measure(client, attack.seconds, failed)
        with Sampler(desktop.process.pid) as sampler:
            attack.start(client, context)
            loud_exec, loud_snap = _measure(client, attack.seconds, failed)
        for thread in context["threads"]:
            thread.join(timeout=10)
        time.sleep(0.5)
        text = client.snapshot()
        logs = text[text.index('<view id="view_2" name="System Logs">') :]
        logs = logs[: logs.index("</view>")]
        notes = [f"load {load:.1f}→{os.getloadavg()[0]:.1f}"]
        checked = attack.check is None or attack.check(text)
        if attack.check is not None:
            notes.append(attack.check_says[0] if checked else attack.check_says[1])
        outcome = context.get("outcome")
        if isinstance(outcome, AotuiError):
            notes.append(f"attacker got {outcome.code.value}")
        restarts = next(r for r in client.status()["apps"] if r["app"] == "app_1")["restarts"]
        if restarts:
            notes.append(f"attacker restarts {restarts}")
        return Row(
            attack.name,
            _p(quiet_exec),
            _p(loud_exec),
            _p(quiet_snap),
            _p(loud_snap),
            rss_quiet / 2**20,
            max(sampler.peak, rss_quiet) / 2**20,
            quiet.cpu_share * 100,
            sampler.cpu_share * 100,
            failed[0],
            any(named in logs for named in _alternatives(attack.named)),
            checked,
            notes,
        )
    finally:
        for cleanup in context["cleanup"]:
            cleanup()
        desktop.close()


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| attack | execute p50/p99 quiet → attack (ms) | snapshot p50/p99 quiet → attack (ms) "
        "| worst p99 ratio | supervisor RSS quiet → peak (MB) | supervisor CPU quiet → attack "
        "| snapshot failures | attacker named | contained | notes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.attack} "
            f"| {row.execute_quiet[0]:.1f}/{row.execute_quiet[1]:.1f} → "
            f"{row.execute_attack[0]:.1f}/{row.execute_attack[1]:.1f} "
            f"| {row.snapshot_quiet[0]:.1f}/{row.snapshot_quiet[1]:.1f} → "
            f"{row.snapshot_attack[0]:.1f}/{row.snapshot_attack[1]:.1f} "
            f"| {row.worst_ratio:.1f}× "
            f"| {row.rss_quiet_mb:.0f} → {row.rss_peak_mb:.0f} "
            f"| {row.cpu_quiet_percent:.0f}% → {row.cpu_percent:.0f}% | {row.snapshots_failed} "
            f"| {'yes' if row.named else 'no'} | {'yes' if row.contained else 'no'} "
            f"| {'; '.join(row.notes)} |"
        )
    return "\n".join(lines)


def run(only: str = "") -> dict[str, float]:
    """Run every attack (or those whose name contains ``only``); print the table."""
    web = browser.find_browser() is not None
    chosen = [a for a in ATTACKS if only in a.name and (web or a.app != "webhostile")]
    if not web:
        print(f"no headless browser: the W rows are left out ({browser.INSTALL_HINT})")
    rows = [run_attack(attack) for attack in chosen]
    print(table(rows))
    figures: dict[str, float] = {}
    for row in rows:
        key = row.attack.split()[0]
        figures[f"hostile {key} victim execute p99 ms"] = row.execute_attack[1]
        figures[f"hostile {key} contained"] = float(row.contained)
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description="Each hostile app beside a victim desktop: its latency, the supervisor's "
        "memory, whether the attack was contained.",
    )
    parser.add_argument(
        "only", nargs="?", default="", help="run only the attacks whose name contains this"
    )
    run(parser.parse_args().only)
