"""Each fault kind injected on a real desktop, recorded in the history with its visible evidence.

One chaos run on Notes fires every command-triggered fault once (``every = k`` with ``max = 1``:
the k-th command fires it), one run on a fetching app fires each brokered HTTP fault, and one run
kills the supervisor. The history is then judged by the real checker as well.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aotui.protocol.errors import AotuiError
from aotui.supervisor.chaos.check import check_history, format_report
from aotui.supervisor.chaos.history import (
    FaultEvent,
    FaultPhase,
    RecoveryEvent,
    ReplyEvent,
    SignalEvent,
    StateEvent,
    VisibleEvent,
    load_history,
)
from aotui.supervisor.chaos.plan import parse_plan
from aotui.supervisor.chaos.run import DESKTOP, ChaosRun
from aotui.supervisor.interface.client import Client, DesktopUnavailable

APPS = Path(__file__).parent / "apps"

#: The k-th command on Notes fires the fault (the agent's first command, the open, is the 1st).
NOTES_FAULTS: list[dict[str, Any]] = [
    {"type": "latency", "ms": 150},
    {"type": "fail", "code": "E_APP_ERROR"},
    {"type": "fail", "code": "E_TIMEOUT"},
    {"type": "kill_worker", "when": "before_effect"},
    {"type": "kill_worker", "when": "after_effect"},
    {"type": "freeze", "seconds": 0.5},
    {"type": "memory_pressure"},
    {"type": "signal_burst", "count": 5},  # before the loss: its window would swallow the burst
    {"type": "signal_loss", "seconds": 0.5},
    {"type": "disk_full", "where": "store", "seconds": 0.5},
    {"type": "drift", "change": "reorder"},
    {"type": "lie"},
]


def _notes_plan() -> dict[str, Any]:
    faults = [
        {**fault, "app": "com.aotui.notes", "every": k, "max": 1}
        for k, fault in enumerate(NOTES_FAULTS, start=2)
    ]
    return {"seed": 1, "fault": faults}


def _notes_agent(env: dict[str, str]) -> int:
    """Open Notes, then add notes (every third command edits the first one by ref)."""
    with Client(DESKTOP, env["AOTUI_SOCKET"], timeout_s=20.0) as client:
        notes = next(a["app"] for a in client.status()["apps"] if a["id"] == "com.aotui.notes")
        client.call("exec", text=f"<context>open --application {notes}</context>")
        for step in range(len(NOTES_FAULTS) + 4):
            time.sleep(0.1)
            pulled = client.call("snapshot", format="json", session="agent")
            block = next((a for a in pulled["apps"] if a["app"] == notes), None)
            shown = block is not None and any(
                block_view.get("refs") for block_view in block["views"]
            )
            if step % 3 == 2 and shown:
                command = {
                    "app": notes,
                    "view": "view_0",
                    "operation": "edit_note",
                    "args": {"note": "notes[0]", "text": f"edited {step}"},
                }
            else:
                command = {
                    "app": notes,
                    "view": "view_0",
                    "operation": "add_note",
                    "args": {"title": f"note {step}", "text": f"text {step}"},
                }
            with contextlib.suppress(AotuiError):  # an error is an answer: the history has it
                client.call(
                    "execute", **command, session="agent", snapshot_id=pulled["snapshot_id"]
                )
        time.sleep(1.0)  # the timed clears (signal loss, full disk) happen before the stop
    return 0


def _faults(events: list[Any]) -> dict[str, FaultEvent]:
    return {
        e.type.value + (f":{e.detail.get('when') or e.detail.get('code') or ''}"): e
        for e in events
        if isinstance(e, FaultEvent) and e.phase is FaultPhase.INJECT
    }


@pytest.fixture(scope="module")
def notes_history(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    workdir = tmp_path_factory.mktemp("chaos-notes")
    result = ChaosRun(parse_plan(_notes_plan()), _notes_agent, 120, workdir=workdir).run()
    assert result.agent_exit == 0
    assert result.leftover_pids == ()
    return list(load_history(result.history).events)


def _after(events: list[Any], fault: FaultEvent, kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind) and e.t >= fault.t]


def _visible(events: list[Any], fault: FaultEvent) -> list[str]:
    return [e.text for e in events if isinstance(e, VisibleEvent) and e.fault == fault.fault]


def _reply_of_fault(events: list[Any], fault: FaultEvent) -> ReplyEvent:
    reply: ReplyEvent = next(e for e in _after(events, fault, ReplyEvent))
    return reply


def _code(events: list[Any], fault: FaultEvent) -> str | None:
    code = _reply_of_fault(events, fault).code
    return code.value if code is not None else None


@pytest.mark.timeout(180)
def test_every_command_fault_is_injected_and_visible(notes_history: list[Any]) -> None:
    faults = _faults(notes_history)
    expected = {
        "latency:",
        "fail:E_APP_ERROR",
        "fail:E_TIMEOUT",
        "kill_worker:before_effect",
        "kill_worker:after_effect",
        "freeze:",
        "memory_pressure:",
        "signal_loss:",
        "signal_burst:",
        "drift:",
        "lie:",
    }
    if os.geteuid() == 0:  # the store's tmpfs is mounted only by root
        expected.add("disk_full:")
    assert expected <= set(faults), sorted(faults)
    for name, fault in faults.items():
        reply = _reply_of_fault(notes_history, fault)
        assert _visible(notes_history, fault) or not reply.ok, name
    # Signal lines name the apps their changes concern (they said "apps": [] always).
    states = {e.app for e in notes_history if isinstance(e, StateEvent)}
    named = {app for e in notes_history if isinstance(e, SignalEvent) for app in e.apps}
    assert named, named
    assert named <= states, (named, states)


@pytest.mark.timeout(180)
def test_fault_evidence(notes_history: list[Any]) -> None:
    events, faults = notes_history, _faults(notes_history)
    assert _code(events, faults["fail:E_APP_ERROR"]) == "E_APP_ERROR"
    assert _code(events, faults["fail:E_TIMEOUT"]) == "E_TIMEOUT"
    # Killed before its effect, the command fails, or (when the desktop saw the exit first) it
    # waits for the restart and runs on the new worker: never on the dead one.
    before = faults["kill_worker:before_effect"]
    reply = _reply_of_fault(events, before)
    came_back = next(e for e in events if isinstance(e, RecoveryEvent) and e.fault == before.fault)
    assert not reply.ok or reply.t >= came_back.t
    for name in ("kill_worker:before_effect", "kill_worker:after_effect", "memory_pressure:"):
        recovery = next(
            e for e in events if isinstance(e, RecoveryEvent) and e.fault == faults[name].fault
        )
        assert recovery.ok, name
        assert recovery.what.value == "worker", name
    memory = _visible(events, faults["memory_pressure:"])
    assert any("memory limit" in text for text in memory), memory
    clears = {e.fault for e in events if isinstance(e, FaultEvent) and e.phase is FaultPhase.CLEAR}
    assert faults["freeze:"].fault in clears
    assert faults["signal_loss:"].fault in clears
    burst_fault = faults["signal_burst:"]
    burst = [e for e in _after(events, burst_fault, SignalEvent) if e.t - burst_fault.t < 0.05]
    assert len(burst) >= 5, burst  # all five at once, past the throttle: the fault is the burst
    assert _visible(events, burst_fault) == ["5 signals in a burst"]
    drift = faults["drift:"]
    assert drift.detail["change"] == "reorder"
    assert drift.detail["list"] == "notes"
    lie = faults["lie:"].detail
    assert lie["true"] != lie["shown"]
    assert lie["item"].startswith("notes[")
    if "disk_full:" in faults:
        assert _code(events, faults["disk_full:"]) == "E_IO"
    # Every acknowledged state came back after each kill, and the checker agrees on all of it.
    recovered = [e for e in events if isinstance(e, StateEvent) and e.basis.value == "recovered"]
    assert len(recovered) >= 3
    report = check_history(load_history_from(events))
    assert report.ok, format_report(report)


def load_history_from(events: list[Any]) -> Any:
    from aotui.supervisor.chaos.history import History

    return History(Path("notes"), tuple(events))


class _Pages(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"0123456789" * 10
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def web() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}/page"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.timeout(120)
def test_http_faults(tmp_path: Path, web: str) -> None:
    modes = ["5xx", "truncate", "timeout", "latency"]
    plan = parse_plan(
        {
            "seed": 2,
            "fault": [
                {
                    "type": "http_fault",
                    "operation": "get",
                    "mode": mode,
                    "ms": 100,
                    "every": k,
                    "max": 1,
                }
                for k, mode in enumerate(modes, start=1)
            ],
        }
    )
    results: list[Any] = []

    def agent(env: dict[str, str]) -> int:
        with Client(DESKTOP, env["AOTUI_SOCKET"], timeout_s=20.0) as client:
            app = next(a["app"] for a in client.status()["apps"] if a["id"] == "test.fetcher")
            client.call("exec", text=f"<context>open --application {app}</context>")
            for _ in modes:
                command = {"app": app, "view": "view_0", "operation": "get", "args": {"url": web}}
                try:
                    results.append(client.call("execute", **command)["results"][0])
                except AotuiError as exc:
                    results.append(exc.code.value)
        return 0

    run = ChaosRun(
        plan,
        agent,
        60,
        workdir=tmp_path,
        apps=[str(APPS / "fetcher")],
        config_extra="allow_private_http = true\n",
    )
    result = run.run()
    assert result.leftover_pids == ()
    assert results[0]["status"] == 503
    assert results[1] == {"status": 200, "body": "0123456789" * 5}
    assert results[2] == "E_APP_ERROR"  # the app's own HTTP call timed out, and it said so
    assert results[3] == {"status": 200, "body": "0123456789" * 10}
    events = list(load_history(result.history).events)
    injected = [e for e in events if isinstance(e, FaultEvent) and e.phase is FaultPhase.INJECT]
    assert [e.detail["mode"] for e in injected] == modes
    for fault in injected:
        assert _visible(events, fault), fault.detail


@pytest.mark.timeout(120)
def test_kill_supervisor_then_up(tmp_path: Path) -> None:
    plan = parse_plan({"seed": 3, "fault": [{"type": "kill_supervisor", "at_s": [2.0]}]})
    added: list[int] = []

    def agent(env: dict[str, str]) -> int:
        deadline = time.monotonic() + 6.0
        step = 0
        while time.monotonic() < deadline:
            try:
                with Client(DESKTOP, env["AOTUI_SOCKET"], timeout_s=3.0) as client:
                    apps = client.status()["apps"]
                    notes = next(a["app"] for a in apps if a["id"] == "com.aotui.notes")
                    client.call("exec", text=f"<context>open --application {notes}</context>")
                    client.call(
                        "execute",
                        app=notes,
                        view="view_0",
                        operation="add_note",
                        args={"title": f"n{step}", "text": "t"},
                    )
                    added.append(step)
            except (AotuiError, DesktopUnavailable):
                time.sleep(0.2)
            step += 1
            time.sleep(0.1)
        return 0

    result = ChaosRun(plan, agent, 60, workdir=tmp_path).run()
    assert result.leftover_pids == ()
    events = list(load_history(result.history).events)
    recovery = next(e for e in events if isinstance(e, RecoveryEvent))
    assert recovery.what.value == "supervisor"
    assert recovery.ok
    assert recovery.fault == "f1.1"
    assert any(e.where.value == "status" for e in events if isinstance(e, VisibleEvent))
    # The new supervisor recorded what each app showed when it came back, from its store.
    recovered = [e for e in events if isinstance(e, StateEvent) and e.fault == "f1.1"]
    assert recovered
    assert max(added, default=0) > 0
    report = check_history(load_history(result.history))
    assert report.ok, format_report(report)


SAVER = """
from aotui.sandbox.sdk import App, View, operation


class SaverView(View):
    def render(self) -> str:
        return ('<section view="Saver"><button operation="save" args=\\'{"name": "string"}\\'>'
                'Save</button></section>')

    @operation
    def save(self, name: str) -> str:
        with open(GRANT + "/" + name, "w") as handle:
            handle.write("x" * 4096)
        return "saved"


class SaverApp(App):
    def roots(self) -> list[View]:
        return [SaverView("saver")]


app = SaverApp()
"""


@pytest.fixture
def small_grant() -> Iterator[Path]:
    """A 1 MiB tmpfs granted to a test app (root only: mounting needs it); unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting the small filesystem of a disk_full grant needs root")
    base = Path(tempfile.mkdtemp(prefix="aotui-chaos-grant-", dir="/tmp"))
    base.chmod(0o755)  # the per-app uid reaches the app and the grant through it
    grant = base / "grant"
    grant.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0777", "tmpfs", str(grant)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        shutil.rmtree(base)
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    app = base / "saver"
    app.mkdir()
    (app / "aoapp.json").write_text(
        json.dumps(
            {
                "id": "test.saver",
                "name": "Saver",
                "version": "1.0.0",
                "entry": "app.py",
                "description": "Saves files in its grant.",
                "permissions": [f"fs:read:{grant}", f"fs:write:{grant}"],
            }
        )
    )
    (app / "app.py").write_text(f"GRANT = {str(grant)!r}\n{SAVER}")
    try:
        yield grant
    finally:
        subprocess.run(["umount", "-l", str(grant)], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.timeout(120)
def test_disk_full_in_an_apps_grant(tmp_path: Path, small_grant: Path) -> None:
    plan = parse_plan(
        {
            "seed": 5,
            "fault": [
                {"type": "disk_full", "where": "grant", "seconds": 1.0, "every": 3, "max": 1},
            ],
        }
    )
    results: list[str] = []

    def agent(env: dict[str, str]) -> int:
        with Client(DESKTOP, env["AOTUI_SOCKET"], timeout_s=20.0) as client:
            app = next(a["app"] for a in client.status()["apps"] if a["id"] == "test.saver")
            client.call("exec", text=f"<context>open --application {app}</context>")
            for name in ("a", "b", "c"):
                if name == "c":
                    time.sleep(2.0)  # the filler is gone after its second
                command = {
                    "app": app,
                    "view": "view_0",
                    "operation": "save",
                    "args": {"name": name},
                }
                try:
                    results.append(client.call("execute", **command)["results"][0])
                except AotuiError as exc:
                    results.append(exc.code.value)
        return 0

    app_dir = small_grant.parent / "saver"
    result = ChaosRun(plan, agent, 60, workdir=tmp_path, apps=[str(app_dir)]).run()
    assert result.leftover_pids == ()
    assert results[0] == "saved"
    assert results[1] != "saved"  # the grant's filesystem was full
    assert results[2] == "saved"  # and is not any more
    events = list(load_history(result.history).events)
    fault = next(e for e in events if isinstance(e, FaultEvent) and e.phase is FaultPhase.INJECT)
    assert fault.detail["where"] == "grant"
    assert fault.detail["bytes"] > 0
    assert not _reply_of_fault(events, fault).ok
    assert not (small_grant / ".aotui-chaos-filler").exists()


@pytest.mark.timeout(120)
def test_a_worker_fault_never_stalls_the_open_of_a_closed_app(tmp_path: Path) -> None:
    # Issue 24: with kill_worker firing on every command, opening a closed app took 5 s (the
    # fault waited for a worker nobody was starting) and injected nothing.
    plan = parse_plan(
        {
            "seed": 3,
            "fault": [
                {"type": "kill_worker", "when": "before_effect", "probability": 1.0},
            ],
        }
    )
    took: list[float] = []

    def agent(env: dict[str, str]) -> int:
        with Client(DESKTOP, env["AOTUI_SOCKET"], timeout_s=20.0) as client:
            notes = next(a["app"] for a in client.status()["apps"] if a["id"] == "com.aotui.notes")
            started = time.monotonic()
            client.call("exec", text=f"<context>open --application {notes}</context>")
            took.append(time.monotonic() - started)
            with contextlib.suppress(AotuiError):  # killed before its effect: an error, or a rerun
                client.call(
                    "execute",
                    app=notes,
                    view="view_0",
                    operation="add_note",
                    args={"title": "t", "text": "x"},
                )
        return 0

    result = ChaosRun(plan, agent, 60, workdir=tmp_path).run()
    assert result.leftover_pids == ()
    assert took[0] < 2.0, took  # 5.09 s before
    events = list(load_history(result.history).events)
    injected = [e for e in events if isinstance(e, FaultEvent) and e.phase is FaultPhase.INJECT]
    assert len(injected) == 1  # on the execute, whose worker was there to kill
