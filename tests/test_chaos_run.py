"""Chaos plans, ``aotui chaos run`` with a scripted agent, and ``aotui chaos app``.

Real desktops: each run starts a supervisor in its own directory under ``tmp_path`` and stops
it (the run records and kills anything left; the tests assert nothing was).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.chaos.history import (
    ConfirmationEvent,
    ConfirmVerdict,
    FaultEvent,
    FaultPhase,
    Outcome,
    ReplyEvent,
    StateEvent,
    load_history,
)
from aotui.supervisor.chaos.plan import parse_plan, plan_from_flags

TESTS = Path(__file__).parent
APPS = TESTS / "apps"
REPO = TESTS.parent

PLAN = {
    "seed": 11,
    "fault": [
        {"type": "kill_worker", "when": "after_effect", "probability": 0.3},
        {"type": "latency", "ms": 20, "every": 3},
        {"type": "fail", "code": "E_TIMEOUT", "probability": 0.2},
        {"type": "kill_supervisor", "at_s": [2.0, 9.0]},
        {"type": "kill_supervisor", "rate_per_min": 30},
    ],
}


def test_same_seed_same_schedule() -> None:
    one, two, other = parse_plan(PLAN), parse_plan(PLAN), parse_plan({**PLAN, "seed": 12})

    def decisions(plan):  # type: ignore[no-untyped-def]
        return [[spec.fires(plan.seed, n) for n in range(1, 200)] for spec in plan.faults]

    assert decisions(one) == decisions(two)
    assert decisions(one) != decisions(other)
    assert one.schedule(60) == two.schedule(60)
    assert [t for t, _ in one.schedule(60)] != [t for t, _ in other.schedule(60)]
    assert [t for t, s in one.schedule(60) if s.fault_id == "f4"] == [2.0, 9.0]
    # A plan survives its trip to the supervisor as plain data.
    assert parse_plan(one.to_plain()) == one


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"fault": []}, "seed"),
        ({"seed": 1, "speed": 2}, "speed"),
        ({"seed": 1, "fault": [{"type": "earthquake"}]}, "fault[0].type"),
        ({"seed": 1, "fault": [{"type": "latency", "probability": 2}]}, "fault[0].probability"),
        ({"seed": 1, "fault": [{"type": "latency", "every": 0}]}, "fault[0].every"),
        ({"seed": 1, "fault": [{"type": "kill_worker", "at_s": [1]}]}, "fault[0].at_s"),
        ({"seed": 1, "fault": [{"type": "kill_supervisor", "every": 2}]}, "fault[0].every"),
        ({"seed": 1, "fault": [{"type": "fail", "code": "E_NOPE"}]}, "fault[0].code"),
        ({"seed": 1, "fault": [{"type": "freeze", "ms": 5}]}, "fault[0].ms"),
        ({"seed": 1, "fault": [{"type": "drift", "probability": 1, "every": 2}]}, "fault[0]"),
        ({"seed": 1, "fault": [{"type": "lie", "app": 3}]}, "fault[0].app"),
    ],
)
def test_bad_plans_name_the_key(raw: dict[str, object], key: str) -> None:
    with pytest.raises(AotuiError) as caught:
        parse_plan(raw)
    assert caught.value.code is ErrorCode.E_INVALID_CMD
    assert caught.value.data["key"] == key
    assert f"chaos plan: {key}:" in caught.value.message


def test_plan_from_flags() -> None:
    plan = plan_from_flags(5, ["kill_worker:probability=0.5,when=after_effect", "latency:ms=30"])
    assert [(s.type.value, dict(s.detail)) for s in plan.faults] == [
        ("kill_worker", {"when": "after_effect"}),
        ("latency", {"ms": 30}),
    ]
    with pytest.raises(AotuiError, match="is not key=value"):
        plan_from_flags(5, ["latency:ms"])


AGENT = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    aotui = [sys.executable, "-m", "aotui.supervisor"]
    def run(*args):
        done = subprocess.run([*aotui, *args], capture_output=True, text=True)
        return done.returncode, done.stdout
    code, out = run("status", "--json")
    notes = next(a["app"] for a in json.loads(out)["apps"] if a["id"] == "com.aotui.notes")
    run("exec", f"<context>open --application {notes}</context>")
    for i in range(8):
        run("snapshot")
        run("exec", f'<context app_id="{notes}" view_id="view_0">execute add_note '
                    f'--title "n{i}" --text "t{i}"</context>')
    """
)


def chaos_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", "chaos", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def faults_of(history: Path) -> list[tuple[str, str]]:
    return [
        (e.fault, e.type.value)
        for e in load_history(history).events
        if isinstance(e, FaultEvent) and e.phase is FaultPhase.INJECT
    ]


@pytest.mark.timeout(240)
def test_chaos_run_of_a_scripted_agent_is_recorded_and_repeatable(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'seed = 4\n[[fault]]\ntype = "kill_worker"\nwhen = "after_effect"\nevery = 3\n'
        'app = "com.aotui.notes"\n[[fault]]\ntype = "latency"\nms = 10\nprobability = 0.4\n'
    )
    histories = []
    for run in ("a", "b"):
        done = chaos_cli(
            "run",
            str(plan),
            "--duration",
            "90",
            "--workdir",
            str(tmp_path / run),
            "--json",
            "--",
            sys.executable,
            str(agent),
        )
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary["agent_exit"] == 0
        assert summary["leftover_pids"] == []
        assert summary["command"] == 9  # open + 8 add_note, each through `aotui exec`
        histories.append(Path(summary["history"]))
    events = load_history(histories[0]).events
    commands = [e for e in events if e.KIND.value == "command"]
    assert {c.interface.value for c in commands} == {"cli"}  # type: ignore[attr-defined]
    assert faults_of(histories[0]) == faults_of(histories[1])  # same seed, same commands
    assert ("f1.1", "kill_worker") in faults_of(histories[0])
    check = chaos_cli("check", str(histories[0]))
    assert check.returncode == 0, check.stdout


@pytest.mark.timeout(240)
def test_chaos_app_finds_the_planted_bug(tmp_path: Path) -> None:
    done = chaos_cli(
        "app",
        str(APPS / "forgetful"),
        "--steps",
        "40",
        "--duration",
        "40",
        "--workdir",
        str(tmp_path / "w"),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no_acknowledged_effect_lost  FAIL" in done.stdout


@pytest.mark.timeout(240)
def test_chaos_app_passes_on_notes(tmp_path: Path) -> None:
    done = chaos_cli(
        "app",
        str(REPO / "apps" / "notes"),
        "--steps",
        "40",
        "--duration",
        "40",
        "--workdir",
        str(tmp_path / "w"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verdict: all checks hold" in done.stdout


def test_chaos_run_refuses_a_bad_plan_with_its_key(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text('seed = 1\n[[fault]]\ntype = "latency"\nprobability = 7\n')
    done = chaos_cli("run", str(plan), "--", "true")
    assert done.returncode == ErrorCode.E_INVALID_CMD.exit_code
    assert "fault[0].probability" in done.stderr
    done = chaos_cli("run", str(plan))
    assert done.returncode == ErrorCode.E_INVALID_CMD.exit_code
    assert "after --" in done.stderr


RPC_AGENT = textwrap.dedent(
    """
    import json, os, socket
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(os.environ["AOTUI_RPC_SOCKET"])
    stream = sock.makefile("rwb")
    def call(n, method, **params):
        line = {"jsonrpc": "2.0", "id": n, "method": method, "params": params}
        stream.write(json.dumps(line).encode() + b"\\n")
        stream.flush()
        return json.loads(stream.readline())
    apps = call(1, "status")["result"]["apps"]
    notes = next(a["app"] for a in apps if a["id"] == "com.aotui.notes")
    call(2, "exec", text=f"<context>open --application {notes}</context>")
    call(3, "execute", app=notes, view="view_0", operation="add_note",
         args={"title": "first", "text": "one"})
    call(4, "snapshot")
    reply = call(5, "execute", app=notes, view="view_0", operation="edit_note",
                 args={"note": "notes[0]", "text": "two"})
    assert "result" in reply, reply
    """
)


@pytest.mark.timeout(120)
def test_json_rpc_commands_are_recorded_with_what_their_refs_read(tmp_path: Path) -> None:
    from aotui.supervisor.chaos.history import CommandEvent, ReplyEvent
    from aotui.supervisor.chaos.run import ChaosRun

    agent = tmp_path / "agent.py"
    agent.write_text(RPC_AGENT)
    plan = parse_plan({"seed": 1, "fault": [{"type": "drift", "change": "insert", "every": 3}]})
    result = ChaosRun(plan, [sys.executable, str(agent)], 60, workdir=tmp_path / "w").run()
    assert result.agent_exit == 0
    assert result.leftover_pids == ()
    events = load_history(result.history).events
    commands = [e for e in events if isinstance(e, CommandEvent)]
    assert [c.interface.value for c in commands] == ["jsonrpc"] * 3
    edit = commands[-1]
    assert edit.refs["note"].ref == "notes[0]"
    assert edit.refs["note"].read == {"id": "note_1", "title": "first", "preview": "one"}
    # The list changed under the agent (an item inserted before it); the ref still resolved
    # to the note it read.
    assert faults_of(result.history) == [("f1.1", "drift")]
    reply = next(e for e in events if isinstance(e, ReplyEvent) and e.id == edit.id)
    assert reply.ok
    assert reply.resolved["note"] == edit.refs["note"].read


#: Every fault kind, at rates that keep the demo agent busy for ten minutes.
SOAK_PLAN = {
    "seed": 15,
    "fault": [
        {"type": "kill_worker", "when": "before_effect", "probability": 0.03},
        {"type": "kill_worker", "when": "after_effect", "probability": 0.05},
        {"type": "freeze", "seconds": 1.0, "probability": 0.02},
        {"type": "latency", "ms": 100, "probability": 0.1},
        {"type": "fail", "code": "E_APP_ERROR", "probability": 0.03},
        {"type": "fail", "code": "E_TIMEOUT", "probability": 0.02},
        {"type": "drift", "change": "reorder", "probability": 0.03},
        {"type": "drift", "change": "insert", "probability": 0.02},
        {"type": "lie", "probability": 0.03},
        {"type": "memory_pressure", "probability": 0.02},
        {"type": "kill_supervisor", "rate_per_min": 1.0},
        {"type": "http_fault", "mode": "5xx", "probability": 0.05},
        {"type": "disk_full", "where": "store", "seconds": 1.0, "probability": 0.02},
        {"type": "signal_loss", "seconds": 1.0, "probability": 0.03},
        {"type": "signal_burst", "count": 10, "probability": 0.03},
    ],
}


def demo_agent(env: dict[str, str]) -> int:
    """``aotui demo``'s scripted session, again and again, on the run's desktop."""
    import contextlib
    import io
    import time

    from aotui.supervisor.chaos.run import DESKTOP
    from aotui.supervisor.interface.client import Client, DesktopUnavailable
    from aotui.supervisor.interface.demo import Transcript, _script

    stop = time.monotonic() + float(env.get("CHAOS_SOAK_S", "600"))
    while time.monotonic() < stop:
        try:
            with Client(DESKTOP, env["AOTUI_SOCKET"], timeout_s=10.0) as client:
                chat = next(a["app"] for a in client.status()["apps"] if a["id"] == "system.chat")
                with contextlib.suppress(AotuiError):
                    client.execute(f"<context>show --application {chat}</context>")
                with contextlib.redirect_stdout(io.StringIO()):
                    _script(Transcript(client, json_output=True))
        except (AotuiError, DesktopUnavailable, StopIteration):
            time.sleep(0.2)  # an injected fault, or the desktop coming back: go on
    return 0


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_ten_minutes_of_the_demo_agent_under_every_fault(tmp_path: Path) -> None:
    import os
    import statistics

    from aotui.supervisor.chaos.check import check_history, format_report
    from aotui.supervisor.chaos.history import RecoveryEvent, ReplyEvent
    from aotui.supervisor.chaos.run import ChaosRun

    seconds = float(os.environ.get("CHAOS_SOAK_S", "600"))
    result = ChaosRun(parse_plan(SOAK_PLAN), demo_agent, seconds + 60, workdir=tmp_path).run()
    history = load_history(result.history)
    events = history.events
    injected: dict[str, int] = {}
    for fault in events:
        if isinstance(fault, FaultEvent) and fault.phase is FaultPhase.INJECT:
            injected[fault.type.value] = injected.get(fault.type.value, 0) + 1
    recoveries = sorted(e.seconds for e in events if isinstance(e, RecoveryEvent) and e.ok)
    errors = sum(1 for e in events if isinstance(e, ReplyEvent) and not e.ok)
    report = check_history(history)
    p99 = recoveries[min(len(recoveries) - 1, int(len(recoveries) * 0.99))] if recoveries else 0
    print(
        f"\nsoak: {result.counts.get('command', 0)} commands, {errors} error replies, "
        f"faults {sum(injected.values())} {injected}, recoveries {len(recoveries)} "
        f"p50 {statistics.median(recoveries) if recoveries else 0:.3f} s p99 {p99:.3f} s\n"
        f"{format_report(report)}\nhistory {result.history}"
    )
    assert result.leftover_pids == ()
    assert result.counts.get("command", 0) > 100
    # Every kind but http_fault (the demo's apps make no HTTP request) was injected.
    faults: list[dict[str, object]] = SOAK_PLAN["fault"]  # type: ignore[assignment]
    kinds = {str(f["type"]) for f in faults} - {"http_fault"}
    if os.geteuid() != 0:
        kinds.discard("disk_full")
    assert kinds <= set(injected), injected
    assert report.ok, format_report(report)


#: An agent that leaves a daemon behind: a double fork into a session of its own (``setsid``),
#: with none of the run's environment, its pid written where the test can find it.
DAEMONIZING_AGENT = textwrap.dedent(
    """
    import subprocess, sys
    inner = f"echo $$ > {sys.argv[1]}; exec sleep 300"
    subprocess.run(["sh", "-c", f"env -i setsid sh -c '{inner}' >/dev/null 2>&1 &"], check=True)
    """
)


@pytest.mark.timeout(60)
def test_a_setsid_grandchild_of_the_agent_is_found_and_killed(tmp_path: Path) -> None:
    import psutil

    from aotui.supervisor.chaos.history import RunEvent
    from aotui.supervisor.chaos.run import ChaosRun

    agent, pid_file = tmp_path / "agent.py", tmp_path / "daemon.pid"
    agent.write_text(DAEMONIZING_AGENT)
    run = ChaosRun(
        parse_plan({"seed": 1}),
        [sys.executable, str(agent), str(pid_file)],
        30,
        workdir=tmp_path / "w",
        apps=[],
    )
    daemon: psutil.Process | None = None
    try:
        result = run.run()
        pid = int(pid_file.read_text())
        with contextlib.suppress(psutil.NoSuchProcess):
            daemon = psutil.Process(pid)
        assert result.agent_exit == 0
        assert pid in result.leftover_pids  # it left the agent's session and environment
        assert [(x.pid, x.cmdline) for x in result.leftovers] == [(pid, "sleep 300")]
        assert daemon is None or daemon.status() == psutil.STATUS_ZOMBIE or not daemon.is_running()
        end = [e for e in load_history(result.history).events if isinstance(e, RunEvent)][-1]
        assert end.leftover_pids == (pid,)
        assert [x.cmdline for x in end.leftovers] == ["sleep 300"]
    finally:
        if daemon is not None:
            with contextlib.suppress(psutil.Error):
                daemon.kill()


@pytest.mark.timeout(120)
def test_a_run_in_a_directory_of_its_own_leaves_only_its_history(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text('seed = 1\n[[fault]]\ntype = "latency"\nms = 5\nprobability = 0.5\n')
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    left: dict[bool, set[str]] = {}
    for keep in (False, True):
        args = [str(plan), *(["--keep"] if keep else []), "--json", "--", "true"]
        done = subprocess.run(
            [sys.executable, "-m", "aotui.supervisor", "chaos", "run", *args],
            capture_output=True,
            text=True,
            timeout=90,
            cwd=REPO,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        workdir = Path(summary["workdir"])
        assert workdir.parent == tmp_path  # where it said, made for the run
        assert summary["cleaned"] is not keep
        left[keep] = {entry.name for entry in workdir.iterdir()}
        assert Path(summary["history"]).exists()
    assert left[False] == {"history.jsonl"}  # the desktop, store and logs are gone
    assert {"history.jsonl", "run", "home", "desktop.toml"} <= left[True]


@pytest.mark.timeout(180)
def test_the_random_agent_answers_confirmations_and_the_history_says_what_came_of_them(
    tmp_path: Path,
) -> None:
    # Issue 24: a command that only got "waiting for the user" was recorded applied, and the
    # random agent never answered, so confirm-marked operations were never exercised.
    done = chaos_cli(
        "app",
        str(APPS / "vault"),
        "--steps",
        "60",
        "--duration",
        "40",
        "--seed",
        "2",
        "--workdir",
        str(tmp_path / "w"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    events = load_history(tmp_path / "w" / "history.jsonl").events
    waiting = [e for e in events if isinstance(e, ReplyEvent) and e.outcome is Outcome.WAITING]
    assert waiting
    assert all(e.confirmation for e in waiting)
    answered = [e for e in events if isinstance(e, ConfirmationEvent)]
    assert {e.verdict for e in answered} >= {ConfirmVerdict.RAN, ConfirmVerdict.REFUSED}
    assert {e.command for e in answered} <= {e.id for e in waiting}
    ran = {e.command for e in answered if e.verdict is ConfirmVerdict.RAN}
    acked = {e.command for e in events if isinstance(e, StateEvent) and e.command in ran}
    assert acked == ran  # each confirmed run has its acknowledged state
