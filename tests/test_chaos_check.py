"""``aotui chaos check``: each invariant holding and broken, on hand-made histories."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pytest

from aotui.protocol.errors import ErrorCode
from aotui.supervisor.chaos import check
from aotui.supervisor.chaos.check import CheckName, Status, check_history
from aotui.supervisor.chaos.history import load_history

MIB = 1024 * 1024


class Recorder:
    """Builds a history line by line, each a little later than the one before."""

    def __init__(self, **plan: Any) -> None:
        self.t = 0.0
        self.lines: list[dict[str, Any]] = []
        self.add("run", phase="start", seed=1, desktop="chaos", epoch=1.7e9, plan=plan)

    def add(self, kind: str, src: str = "runner", **fields: Any) -> Recorder:
        self.t += 0.5
        self.lines.append({"t": round(self.t, 3), "kind": kind, "src": src, **fields})
        return self

    def command(self, cid: str, app: str | None = "app_2", **fields: Any) -> Recorder:
        fields.setdefault("operation", "add_note")
        return self.add("command", "agent", id=cid, interface="cli", app=app, **fields)

    def reply(self, cid: str, ok: bool = True, **fields: Any) -> Recorder:
        if not ok:
            fields = {"code": "E_APP_ERROR", "message": "boom", "recoverable": False, **fields}
        fields.setdefault("outcome", "applied" if ok else "none")
        return self.add("reply", "agent", id=cid, ok=ok, **fields)

    def state(self, digest: str, basis: str = "ack", app: str = "app_2", **fields: Any) -> Recorder:
        return self.add("state", app=app, digest=digest, basis=basis, **fields)

    def fault(self, fid: str, ftype: str, phase: str = "inject", **fields: Any) -> Recorder:
        fields.setdefault("target", {"app": "app_2"})
        return self.add("fault", fault=fid, type=ftype, phase=phase, **fields)

    def end(self, leftover: list[int] | None = None) -> Recorder:
        return self.add(
            "run", phase="end", agent_exit=0, leftover_pids=leftover or [], duration=self.t
        )

    def write(self, path: Path) -> Path:
        path.write_text("".join(json.dumps(line) + "\n" for line in self.lines), encoding="utf-8")
        return path


def verdict(recorder: Recorder, tmp_path: Path, name: CheckName) -> check.Verdict:
    report = check_history(load_history(recorder.write(tmp_path / "h.jsonl")))
    return next(v for v in report.verdicts if v.check is name)


def healthy() -> Recorder:
    """A small run where every invariant holds: a kill, a recovery, an error, a drift, a lie."""
    r = Recorder()
    r.command("c1", args={"title": "a"}).reply("c1").state("d1", command="c1")
    r.fault("f1", "kill_worker", detail={"when": "after_effect"})
    r.command("c2", args={"title": "b"}).reply("c2", ok=False)
    r.add("visible", fault="f1", where="reply", text="E_APP_ERROR: app_2 crashed")
    r.add("recovery", fault="f1", app="app_2", what="worker", seconds=0.4, ok=True)
    r.state("d1", basis="recovered", fault="f1")
    r.command("c3", operation="delete_note", refs={"note": {"ref": "notes[0]", "read": "a"}})
    r.reply("c3", resolved={"note": "a"}).state("d2", command="c3")
    r.command("c4", args={"title": "c"}).reply("c4", ok=False).state("d2", basis="final")
    r.fault("f2", "lie", detail={"view": "list", "item": 0, "true": "b", "shown": "bee"})
    r.add("visible", fault="f2", where="status", text="list shows bee")
    for i in range(4):
        r.add("sample", "supervisor", rss=(50 + i) * MIB, fds=20, procs=5)
    r.t += 10
    for i in range(3):
        r.add("sample", "supervisor", rss=(60 + i) * MIB, fds=20, procs=5)
    return r.end()


def test_a_healthy_history_passes_every_check(tmp_path: Path) -> None:
    report = check_history(load_history(healthy().write(tmp_path / "h.jsonl")))
    assert [v.check for v in report.verdicts] == list(CheckName)
    assert {v.check: v.status for v in report.verdicts} == dict.fromkeys(CheckName, Status.PASS)
    assert report.ok


# 1. exactly one reply per command


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda r: r.command("c9"), "command c9 has no reply"),
        (lambda r: r.reply("c1"), "second reply to command c1 (first at line 3)"),
        (lambda r: r.reply("ghost"), "reply to 'ghost', which no command has"),
        (lambda r: r.command("c1"), "command id 'c1' used twice"),
    ],
)
def test_one_reply_per_command_fails(tmp_path: Path, build: Any, words: str) -> None:
    r = healthy()
    build(r)
    v = verdict(r, tmp_path, CheckName.ONE_REPLY_PER_COMMAND)
    assert v.status is Status.FAIL
    assert v.count == 1
    assert words in v.evidence[0].text
    assert v.evidence[0].line == len(r.lines)
    assert v.evidence[0].t == r.lines[-1]["t"]


def test_one_reply_per_command_quotes_only_the_first_few(tmp_path: Path) -> None:
    r = healthy()
    for i in range(8):
        r.command(f"lost{i}")
    v = verdict(r, tmp_path, CheckName.ONE_REPLY_PER_COMMAND)
    assert (v.status, v.count, len(v.evidence)) == (Status.FAIL, 8, check.EVIDENCE_LIMIT)
    assert [e.line for e in v.evidence] == sorted(e.line for e in v.evidence)


# 2. no acknowledged effect lost


def lost_effect_run(recovered: str = "d0", ok: bool = True) -> Recorder:
    r = Recorder()
    r.command("c1").reply("c1").state("d1", command="c1")
    r.fault("f1", "kill_worker")
    r.add("visible", fault="f1", where="system_log", text="app_2 restarted")
    r.add("recovery", fault="f1", app="app_2", what="worker", seconds=0.3, ok=ok)
    return r.state(recovered, basis="recovered", fault="f1").end()


def test_effect_lost_after_a_recovery_fails(tmp_path: Path) -> None:
    v = verdict(lost_effect_run("d0"), tmp_path, CheckName.NO_ACKNOWLEDGED_EFFECT_LOST)
    assert v.status is Status.FAIL
    assert "lost acknowledged effects" in v.evidence[0].text
    assert "acknowledged at line 4" in v.evidence[0].text
    assert v.evidence[0].line == 8
    assert (
        verdict(lost_effect_run("d1"), tmp_path, CheckName.NO_ACKNOWLEDGED_EFFECT_LOST).status
        is Status.PASS
    )


def test_a_failed_recovery_and_a_missing_recovered_state_fail(tmp_path: Path) -> None:
    v = verdict(lost_effect_run("d1", ok=False), tmp_path, CheckName.NO_ACKNOWLEDGED_EFFECT_LOST)
    assert v.status is Status.FAIL
    assert "did not come back after fault f1" in v.evidence[0].text
    r = lost_effect_run("d1")
    del r.lines[-2]  # the recovered state
    v = verdict(r, tmp_path, CheckName.NO_ACKNOWLEDGED_EFFECT_LOST)
    assert v.status is Status.FAIL
    assert "no recovered state recorded" in v.evidence[0].text


def test_a_desktop_recovery_is_judged_for_every_app(tmp_path: Path) -> None:
    r = Recorder()
    r.command("c1").reply("c1").state("d1", command="c1")
    r.command("c2", app="app_3").reply("c2").state("e1", app="app_3", command="c2")
    r.fault("f1", "kill_supervisor", target={})
    r.add("recovery", fault="f1", app=None, what="supervisor", seconds=2.5, ok=True)
    r.state("d1", basis="recovered", fault="f1").state("e0", app="app_3", basis="recovered")
    v = verdict(r.end(), tmp_path, CheckName.NO_ACKNOWLEDGED_EFFECT_LOST)
    assert v.status is Status.FAIL
    assert [e.text.split(" ")[1] for e in v.evidence] == ["app_3"]


def test_final_state_must_match_the_last_acknowledged_when_nothing_ran_since(
    tmp_path: Path,
) -> None:
    r = Recorder().command("c1").reply("c1").state("d1", command="c1").state("dX", basis="final")
    v = verdict(r.end(), tmp_path, CheckName.NO_ACKNOWLEDGED_EFFECT_LOST)
    assert v.status is Status.FAIL
    assert "final state dX differs from its last acknowledged d1" in v.evidence[0].text
    # A command after the last acknowledged state may explain the difference: not judged.
    r = Recorder().command("c1").reply("c1").state("d1", command="c1").command("c2")
    r.reply("c2", ok=False, outcome="unknown").state("dX", basis="final")
    v = verdict(r.end(), tmp_path, CheckName.NO_ACKNOWLEDGED_EFFECT_LOST)
    assert v.status is Status.SKIP


# 3. an error means no effect


def error_run(after: str, between: Any = None) -> Recorder:
    r = Recorder().command("c1").reply("c1").state("d1", command="c1")
    r.command("c2").reply("c2", ok=False)
    if between is not None:
        between(r)
    return r.state(after, basis="final").end()


def test_an_error_reply_that_changed_the_app_fails(tmp_path: Path) -> None:
    v = verdict(error_run("d2"), tmp_path, CheckName.ERROR_MEANS_NO_EFFECT)
    assert v.status is Status.FAIL
    assert "command c2 on app_2 failed (E_APP_ERROR) but the app changed" in v.evidence[0].text
    assert v.evidence[0].line == 6
    assert verdict(error_run("d1"), tmp_path, CheckName.ERROR_MEANS_NO_EFFECT).status is Status.PASS


def test_error_replies_are_judged_only_with_states_around_them(tmp_path: Path) -> None:
    r = Recorder().command("c1").reply("c1", ok=False).end()
    assert verdict(r, tmp_path, CheckName.ERROR_MEANS_NO_EFFECT).status is Status.SKIP
    # Another command applied in between explains the change.
    run = error_run("d2", lambda r: r.command("c3").reply("c3"))
    assert verdict(run, tmp_path, CheckName.ERROR_MEANS_NO_EFFECT).status is Status.SKIP
    # So does a drift fault on the app.
    run = error_run("d2", lambda r: r.fault("f1", "drift", detail={"change": "insert"}))
    assert verdict(run, tmp_path, CheckName.ERROR_MEANS_NO_EFFECT).status is Status.SKIP


# 4. drift: refs resolved to the value read


def drift_run(resolved: Any, ok: bool = True) -> Recorder:
    r = Recorder().command("c1", refs={"note": {"ref": "notes[2]", "read": "Groceries"}})
    return r.reply("c1", ok=ok, resolved={"note": resolved}).end()


def test_a_ref_that_resolved_to_another_value_fails(tmp_path: Path) -> None:
    v = verdict(drift_run("Taxes"), tmp_path, CheckName.REFS_RESOLVED_AS_READ)
    assert v.status is Status.FAIL
    assert v.evidence[0].text == 'command c1: note=notes[2] read "Groceries" but acted on "Taxes"'
    assert (
        verdict(drift_run("Groceries"), tmp_path, CheckName.REFS_RESOLVED_AS_READ).status
        is Status.PASS
    )
    # A command refused (for example with E_STALE_STATE) acted on nothing.
    assert (
        verdict(drift_run("Taxes", ok=False), tmp_path, CheckName.REFS_RESOLVED_AS_READ).status
        is Status.PASS
    )


def test_drift_compares_json_values_strictly(tmp_path: Path) -> None:
    r = Recorder().command("c1", refs={"n": {"ref": "n[0]", "read": 1}})
    r.reply("c1", resolved={"n": True}).end()
    assert verdict(r, tmp_path, CheckName.REFS_RESOLVED_AS_READ).status is Status.FAIL


# 5. lies


def lie_run(value: str, **plan: Any) -> Recorder:
    r = Recorder(**plan)
    r.fault("f1", "lie", detail={"view": "notes", "item": 1, "true": "Taxes", "shown": "Texas"})
    r.add("visible", fault="f1", where="status", text="notes shows Texas")
    return r.command("c1", args={"title": value}).reply("c1").end()


def test_acting_on_a_lie_is_a_note_unless_the_plan_forbids_it(tmp_path: Path) -> None:
    v = verdict(lie_run("Texas"), tmp_path, CheckName.NOT_ACTED_ON_LIES)
    assert v.status is Status.NOTE
    assert 'command c1 used "Texas", shown by lie f1 (true value "Taxes")' in v.evidence[0].text
    strict = lie_run("Texas", lies_must_not_be_acted_on=True)
    assert verdict(strict, tmp_path, CheckName.NOT_ACTED_ON_LIES).status is Status.FAIL
    report = check_history(load_history(strict.write(tmp_path / "h.jsonl")))
    assert not report.ok
    clean = lie_run("Taxes", lies_must_not_be_acted_on=True)
    assert verdict(clean, tmp_path, CheckName.NOT_ACTED_ON_LIES).status is Status.PASS


def test_a_lie_is_found_in_refs_nested_args_and_text(tmp_path: Path) -> None:
    r = Recorder(lies_must_not_be_acted_on=True)
    r.fault("f1", "lie", detail={"true": "Taxes", "shown": "Texas"})
    r.command("c1", args={"tags": [["Texas"]]}).reply("c1")
    r.command("c2", refs={"n": {"ref": "notes[1]", "read": "Texas"}}).reply("c2")
    r.command("c3", text='<context>execute rename --title "Texas"</context>').reply("c3")
    v = verdict(r.end(), tmp_path, CheckName.NOT_ACTED_ON_LIES)
    assert [e.text.split()[1] for e in v.evidence] == ["c1", "c2", "c3"]


# 6. faults visible


def test_a_fault_nobody_could_see_fails(tmp_path: Path) -> None:
    r = Recorder().fault("f1", "freeze", detail={"seconds": 2}).fault("f1", "freeze", "clear")
    r.command("c1").reply("c1").end()
    v = verdict(r, tmp_path, CheckName.FAULTS_VISIBLE)
    assert v.status is Status.FAIL
    assert v.evidence[0].text.startswith("fault f1 (freeze) was never visible")
    assert v.evidence[0].line == 2


def test_a_fault_is_visible_through_an_event_or_an_error_reply(tmp_path: Path) -> None:
    r = Recorder().fault("f1", "latency", detail={"ms": 500})
    r.add("visible", fault="f1", where="signal", text="slow").end()
    assert verdict(r, tmp_path, CheckName.FAULTS_VISIBLE).status is Status.PASS
    r = Recorder().fault("f1", "fail", detail={"code": "E_TIMEOUT"})
    r.command("c1").reply("c1", ok=False, code="E_TIMEOUT", outcome="unknown").end()
    assert verdict(r, tmp_path, CheckName.FAULTS_VISIBLE).status is Status.PASS


def test_a_visible_event_before_the_fault_or_an_error_elsewhere_does_not_count(
    tmp_path: Path,
) -> None:
    r = Recorder().add("visible", fault="f1", where="reply", text="early")
    r.fault("f1", "kill_worker").command("c1", app="app_3").reply("c1", ok=False)
    r.t += 10  # the run went on: the agent had time to see it
    assert verdict(r.end(), tmp_path, CheckName.FAULTS_VISIBLE).status is Status.FAIL
    r = Recorder().fault("f1", "freeze").fault("f1", "freeze", "clear")
    r.command("c1").reply("c1", ok=False).end()  # sent after the clear: not caused by it
    assert verdict(r, tmp_path, CheckName.FAULTS_VISIBLE).status is Status.FAIL


def test_a_fault_the_run_ended_before_clearing_in_its_last_seconds_is_not_judged(
    tmp_path: Path,
) -> None:
    # A 1 s signal_loss injected 0.5 s before a run's end is told when it clears, which never
    # comes: the agent had no time to see it. 10 s before the end, it is judged.
    r = Recorder().fault("f1", "signal_loss", detail={"seconds": 1.0}).end()
    found = verdict(r, tmp_path, CheckName.FAULTS_VISIBLE)
    assert found.status is Status.PASS
    assert "(1 in the last 3 s, never cleared: not judged)" in found.summary
    r = Recorder().fault("f1", "signal_loss", detail={"seconds": 1.0})
    r.t += 10
    assert verdict(r.end(), tmp_path, CheckName.FAULTS_VISIBLE).status is Status.FAIL


# 7. memory bounded


def memory_run(first: int, last: int, warm_up_samples: int = 0) -> Recorder:
    r = Recorder()
    for _ in range(warm_up_samples):
        r.add("sample", "supervisor", rss=10 * MIB, fds=10, procs=3)
    r.t = 10.0
    r.add("sample", "supervisor", rss=first, fds=10, procs=3)
    r.add("sample", "supervisor", rss=(first + last) // 2, fds=10, procs=3)
    return r.add("sample", "supervisor", rss=last, fds=10, procs=3).end()


def test_memory_rule_is_baseline_times_1_1_plus_16_mib(tmp_path: Path) -> None:
    limit = int(100 * MIB * 1.1 + 16 * MIB)
    ok = verdict(
        memory_run(100 * MIB, limit, warm_up_samples=3), tmp_path, CheckName.MEMORY_BOUNDED
    )
    assert ok.status is Status.PASS
    assert ok.summary == "RSS 100.0 MiB -> 126.0 MiB (limit 126.0 MiB)"
    bad = verdict(memory_run(100 * MIB, limit + 1, 3), tmp_path, CheckName.MEMORY_BOUNDED)
    assert bad.status is Status.FAIL
    assert [e.text for e in bad.evidence] == [
        "baseline after warm-up 100.0 MiB",
        "last sample 126.0 MiB > limit 126.0 MiB",
    ]


def test_memory_is_not_judged_without_samples_after_warm_up(tmp_path: Path) -> None:
    r = Recorder()
    for _ in range(5):
        r.add("sample", "supervisor", rss=10 * MIB, fds=10, procs=3)  # all within 5 s
    assert verdict(r.end(), tmp_path, CheckName.MEMORY_BOUNDED).status is Status.SKIP


# 8. nothing left running


def test_leftover_processes_and_a_missing_end_fail(tmp_path: Path) -> None:
    assert verdict(Recorder().end(), tmp_path, CheckName.NOTHING_LEFT_RUNNING).status is Status.PASS
    v = verdict(Recorder().end([4242, 4243]), tmp_path, CheckName.NOTHING_LEFT_RUNNING)
    assert v.status is Status.FAIL
    assert v.evidence[0].text == "still running after stop: pids 4242, 4243"
    named = Recorder().end([4242])
    named.lines[-1]["leftovers"] = [{"pid": 4242, "cmdline": "sleep 300"}]
    v = verdict(named, tmp_path, CheckName.NOTHING_LEFT_RUNNING)
    assert v.evidence[0].text == "still running after stop: pids 4242 (sleep 300)"
    v = verdict(Recorder().command("c1"), tmp_path, CheckName.NOTHING_LEFT_RUNNING)
    assert v.status is Status.FAIL
    assert "no run end" in v.evidence[0].text


# The command: table, JSON, exit codes.


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    check.add_arguments(parser)
    code = check.main(parser.parse_args(list(argv)))
    out, err = capsys.readouterr()
    return code, out, err


def test_main_prints_a_table_and_exits_0_when_all_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_main(capsys, str(healthy().write(tmp_path / "h.jsonl")))
    assert code == 0
    rows = out.splitlines()
    assert rows[0].split() == ["check", "verdict", "summary"]
    assert [row.split()[:2] for row in rows[1:10]] == [[n.value, "PASS"] for n in CheckName]
    assert rows[-1] == "verdict: all checks hold"


def test_main_exits_1_and_shows_evidence_when_a_check_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = healthy().command("c9\x1b]0;pwned\x07").write(tmp_path / "h.jsonl")
    code, out, _ = run_main(capsys, str(path))
    assert code == check.EXIT_CHECK_FAILED == 1
    assert "one_reply_per_command        FAIL" in out
    assert f"line {len(healthy().lines) + 1} t=" in out
    assert "command c9\\x1b]0;pwned\\x07 has no reply" in out  # no terminal control reaches it
    assert "\x1b" not in out
    assert "verdict: FAIL (one_reply_per_command)" in out
    code, out, _ = run_main(capsys, str(path), "--json")
    data = json.loads(out)
    assert (code, data["ok"]) == (1, False)
    first = data["checks"][0]
    assert (first["check"], first["status"], first["count"]) == ("one_reply_per_command", "fail", 1)
    assert first["evidence"][0]["text"] == "command c9\x1b]0;pwned\x07 has no reply"


def test_main_reports_a_truncated_last_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = healthy().write(tmp_path / "h.jsonl")
    with path.open("a") as f:
        f.write('{"t": 99, "kind": "sam')
    code, out, _ = run_main(capsys, str(path))
    assert code == 0
    assert f"note: line {len(healthy().lines) + 1} was cut short" in out
    _, out, _ = run_main(capsys, str(path), "--json")
    assert json.loads(out)["truncated_line"] == len(healthy().lines) + 1


def test_main_unreadable_history_exits_with_its_error_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_main(capsys, str(tmp_path / "missing.jsonl"))
    assert code == ErrorCode.E_NOT_FOUND.exit_code == 65
    assert "E_NOT_FOUND" in err
    assert "missing.jsonl" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"t": 0}\n{"t": 1, "kind": "run", "src": "x\\u001b[2J"}\n{}\n')
    code, out, err = run_main(capsys, str(bad), "--json")
    assert code == ErrorCode.E_INVALID_CMD.exit_code == 64
    error = json.loads(out)["error"]
    assert error["code"] == "E_INVALID_CMD"
    assert "line 1: missing field 'kind'" in error["message"]
    code, _, err = run_main(capsys, str(bad))
    assert code == 64
    assert "\x1b" not in err


def test_an_injected_failure_between_the_states_is_still_judged(tmp_path: Path) -> None:
    # The fault that caused the error is what the rule is about: it must not excuse a change.
    run = error_run("d2", lambda r: r.fault("f1", "fail", detail={"code": "E_TIMEOUT"}))
    assert verdict(run, tmp_path, CheckName.ERROR_MEANS_NO_EFFECT).status is Status.FAIL
    run = error_run("d1", lambda r: r.fault("f1", "kill_worker"))
    assert verdict(run, tmp_path, CheckName.ERROR_MEANS_NO_EFFECT).status is Status.PASS


def test_a_ref_read_from_a_lie_is_the_lie_checks_business(tmp_path: Path) -> None:
    def run(resolved: str) -> Recorder:
        r = Recorder().fault("f1", "lie", detail={"true": "Taxes", "shown": "Texas"})
        r.command("c1", refs={"note": {"ref": "notes[1]", "read": "Texas"}})
        return r.reply("c1", resolved={"note": resolved}).end()

    assert verdict(run("Taxes"), tmp_path, CheckName.REFS_RESOLVED_AS_READ).status is Status.PASS
    assert verdict(run("Taxes"), tmp_path, CheckName.NOT_ACTED_ON_LIES).status is Status.NOTE
    # Resolving to a third value is drift, lie or not.
    assert verdict(run("Other"), tmp_path, CheckName.REFS_RESOLVED_AS_READ).status is Status.FAIL


def test_a_long_run_is_judged_in_near_linear_time(tmp_path: Path) -> None:
    # 10,000 commands on four apps with states, errors and recoveries: the quadratic rules took
    # 4 s of CPU here (and 46 s for 20,000); the indexed ones take under 0.1 s.
    r = Recorder()
    for i in range(10_000):
        app = f"app_{i % 4}"
        ok = i % 5 != 0
        r.command(f"c{i}", app=app).reply(f"c{i}", ok=ok)
        r.state(f"d{i if ok else i - 1}", app=app)
        if i % 100 == 0:
            r.fault(f"f{i}", "kill_worker", target={"app": app})
            r.add("recovery", fault=f"f{i}", app=app, what="worker", seconds=0.3, ok=True)
    history = load_history(r.end().write(tmp_path / "h.jsonl"))
    started = time.process_time()
    report = check_history(history)
    assert time.process_time() - started < 1.0
    assert report.verdicts[0].summary == "10000 commands, 10000 replies"


@pytest.mark.parametrize(("after", "status"), [("d1", Status.PASS), ("d2", Status.FAIL)])
def test_error_judged_when_the_supervisor_writes_the_ack_state_before_its_reply(
    tmp_path: Path, after: str, status: Status
) -> None:
    # The supervisor's order: the acknowledged command's state, then its reply. That reply is
    # not a change after the state (its effect is in it), so the error after it is judged.
    r = Recorder().command("c1").state("d1", command="c1").reply("c1")
    r.command("c2").reply("c2", ok=False).state(after, basis="recovered").end()
    v = verdict(r, tmp_path, CheckName.ERROR_MEANS_NO_EFFECT)
    assert (v.status, v.summary) == (status, "1 error replies with states on both sides")


def in_flight_at_a_recovery(retried_ack: str, recovered: str, unknown: bool = False) -> Recorder:
    """c1 acknowledged d1; c2 sent, its node lost before it was answered; the desktop recovers
    showing ``recovered``; c2 is answered (or, told ``unknown``, sent again as c2r with its id)
    and its ack state is ``retried_ack``."""
    r = Recorder()
    r.command("c0").reply("c0").state("d0", command="c0")
    r.command("c1").reply("c1").state("d1", command="c1")
    r.command("c2")
    answered = "c2"
    if unknown:
        r.reply("c2", ok=False, code="E_UNAVAILABLE", outcome="unknown", recoverable=True)
        answered = "c2r"
    r.add("recovery", fault="node-1", app="app_2", what="supervisor", seconds=2.0, ok=True)
    r.state(recovered, basis="recovered", fault="node-1")
    if unknown:
        r.command("c2r", retry_of="c2")
    r.reply(answered).state(retried_ack, command=answered)
    return r.state(retried_ack, basis="final").end()


@pytest.mark.parametrize("unknown", [False, True], ids=["pending", "told-unknown-then-retried"])
def test_a_command_in_flight_at_a_recovery_may_have_taken_effect_once(
    tmp_path: Path, unknown: bool
) -> None:
    """Its effect stored before the node was lost (recovered d2, answered d2 from its first
    reply) or not (recovered d1, run by the retry: d2): neither is a lost effect."""
    for recovered in ("d2", "d1"):
        history = in_flight_at_a_recovery("d2", recovered, unknown)
        report = check_history(load_history(history.write(tmp_path / "h.jsonl")))
        assert report.ok, format_verdicts(report)
        twice = next(v for v in report.verdicts if v.check is CheckName.APPLIED_AT_MOST_ONCE)
        assert twice.status is Status.PASS
        assert twice.summary == f"{1 + unknown} commands in flight at a recovery"


def format_verdicts(report: check.CheckReport) -> str:
    return check.format_report(report)


@pytest.mark.parametrize("unknown", [False, True], ids=["pending", "told-unknown-then-retried"])
def test_a_command_in_flight_applied_again_after_the_recovery_fails(
    tmp_path: Path, unknown: bool
) -> None:
    """Its effect came back with the desktop (d2) and the retry ran it again (d3)."""
    history = in_flight_at_a_recovery("d3", "d2", unknown)
    twice = verdict(history, tmp_path, CheckName.APPLIED_AT_MOST_ONCE)
    assert twice.status is Status.FAIL
    assert "took effect before the recovery" in twice.evidence[0].text
    assert "applied again" in twice.evidence[0].text
    assert verdict(history, tmp_path, CheckName.NO_ACKNOWLEDGED_EFFECT_LOST).status is Status.PASS


def test_an_older_state_after_a_recovery_is_lost_even_with_a_command_in_flight(
    tmp_path: Path,
) -> None:
    history = in_flight_at_a_recovery("d1", "d0")
    lost = verdict(history, tmp_path, CheckName.NO_ACKNOWLEDGED_EFFECT_LOST)
    assert lost.status is Status.FAIL
    assert "lost acknowledged effects" in lost.evidence[0].text
    assert verdict(history, tmp_path, CheckName.APPLIED_AT_MOST_ONCE).status is Status.PASS


def test_a_command_held_for_a_worker_s_recovery_does_not_excuse_a_lost_effect(
    tmp_path: Path,
) -> None:
    """A command waiting for its app's worker to restart runs on the recovered state, and its
    ack shows it: that is no effect stored before the fault (a forgetful app's loss)."""
    r = Recorder()
    r.command("c1").reply("c1").state("d1", command="c1")
    r.command("c2")
    r.add("recovery", fault="f1", app="app_2", what="worker", seconds=0.3, ok=True)
    r.state("d0", basis="recovered", fault="f1")
    r.reply("c2").state("d0", command="c2").end()
    lost = verdict(r, tmp_path, CheckName.NO_ACKNOWLEDGED_EFFECT_LOST)
    assert lost.status is Status.FAIL
    assert "lost acknowledged effects" in lost.evidence[0].text
    assert verdict(r, tmp_path, CheckName.APPLIED_AT_MOST_ONCE).summary.startswith("0 commands")


def cut_off_told_unknown(recovered: str) -> Recorder:
    """c1 acknowledged d1; c2 sent, told ``unknown`` (the supervisor killed before its reply),
    never sent again; the desktop recovers showing ``recovered``."""
    r = Recorder()
    r.command("c0").reply("c0").state("d0", command="c0")
    r.command("c1").reply("c1").state("d1", command="c1")
    r.command("c2")
    r.reply("c2", ok=False, code="E_UNAVAILABLE", outcome="unknown", recoverable=True)
    r.add("recovery", fault="f1", app="app_2", what="supervisor", seconds=0.5, ok=True)
    return r.state(recovered, basis="recovered", fault="f1")


@pytest.mark.parametrize("recovered", ["d2", "d1"], ids=["stored", "not-stored"])
def test_a_command_cut_off_told_unknown_and_never_sent_again_may_have_taken_effect(
    tmp_path: Path, recovered: str
) -> None:
    """The supervisor committed c2 (d2) and was killed before its reply; the agent, told
    ``unknown``, went on to other work. CI saw this judged a lost effect (the allowance asked
    for an ack of c2 that never came). An older state still is one (the next case)."""
    r = cut_off_told_unknown(recovered)
    r.command("c3").reply("c3").state(f"{recovered}+3", command="c3").end()
    report = check_history(load_history(r.write(tmp_path / "h.jsonl")))
    assert report.ok, format_verdicts(report)
    lost = verdict(r, tmp_path, CheckName.NO_ACKNOWLEDGED_EFFECT_LOST)
    assert lost.summary == "1 recoveries and final states compared"


def test_an_older_state_is_lost_even_with_a_command_told_unknown(tmp_path: Path) -> None:
    r = cut_off_told_unknown("d0").end()
    lost = verdict(r, tmp_path, CheckName.NO_ACKNOWLEDGED_EFFECT_LOST)
    assert lost.status is Status.FAIL
    assert "lost acknowledged effects" in lost.evidence[0].text
