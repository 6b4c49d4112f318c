"""Chaos plans, ``aotui chaos run`` with a scripted agent, and ``aotui chaos app``.

Real desktops: each run starts a supervisor in its own directory under ``tmp_path`` and stops
it (the run records and kills anything left; the tests assert nothing was).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.chaos.history import FaultEvent, FaultPhase, load_history
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
            "run", str(plan), "--duration", "90", "--workdir", str(tmp_path / run), "--json",
            "--", sys.executable, str(agent),
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
        "app", str(APPS / "forgetful"), "--steps", "40", "--duration", "40",
        "--workdir", str(tmp_path / "w"),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no_acknowledged_effect_lost  FAIL" in done.stdout


@pytest.mark.timeout(240)
def test_chaos_app_passes_on_notes(tmp_path: Path) -> None:
    done = chaos_cli(
        "app", str(REPO / "apps" / "notes"), "--steps", "40", "--duration", "40",
        "--workdir", str(tmp_path / "w"),
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
