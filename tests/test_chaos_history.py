"""The chaos history: typed records, appends from many writers, a reader that names bad lines."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.chaos.history import (
    CommandEvent,
    Event,
    EventKind,
    FaultEvent,
    FaultPhase,
    FaultType,
    History,
    HistoryWriter,
    Interface,
    Outcome,
    RefRead,
    ReplyEvent,
    RunEvent,
    RunPhase,
    SampleEvent,
    Source,
    event_to_json,
    load_history,
    parse_event,
    read_history,
)

EPOCH = 1_700_000_000.0


def fixed_clock(*times: float):
    """A clock that returns ``EPOCH + t`` for each of ``times`` in turn."""
    it = iter(times)
    return lambda: EPOCH + next(it)


def write_lines(path: Path, *lines: object, tail: str = "") -> Path:
    text = "".join(
        (json.dumps(line) if not isinstance(line, str) else line) + "\n" for line in lines
    )
    path.write_text(text + tail, encoding="utf-8")
    return path


START = {
    "t": 0.0,
    "kind": "run",
    "src": "runner",
    "phase": "start",
    "seed": 7,
    "desktop": "d",
    "epoch": EPOCH,
    "plan": {"faults": []},
    "agent": ["python", "agent.py"],
}


def test_writer_adds_time_since_epoch_and_source(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path, EPOCH, Source.SUPERVISOR, clock=fixed_clock(1.5, 2.25)) as writer:
        sample = writer.append(EventKind.SAMPLE, rss=10_000_000, fds=12, procs=4)
        fault = writer.append(
            "fault",
            src="runner",
            fault="f1",
            type="freeze",
            phase="inject",
            target={"app": "app_2"},
            detail={"seconds": 2},
        )
    assert sample == SampleEvent(t=1.5, src=Source.SUPERVISOR, rss=10_000_000, fds=12, procs=4)
    assert isinstance(fault, FaultEvent)
    assert (fault.type, fault.phase, fault.target.app, fault.src) == (
        FaultType.FREEZE,
        FaultPhase.INJECT,
        "app_2",
        Source.RUNNER,
    )
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == {
        "t": 1.5,
        "kind": "sample",
        "src": "supervisor",
        "rss": 10_000_000,
        "fds": 12,
        "procs": 4,
    }
    events = read_history(path)
    assert events == [sample, fault]
    assert [e.line for e in events] == [1, 2]


def test_round_trip_of_every_field(tmp_path: Path) -> None:
    command = CommandEvent(
        t=3.0,
        src=Source.AGENT,
        id="c1",
        session="s1",
        interface=Interface.MCP,
        app="app_2",
        operation="delete_note",
        args={"note": "notes[2]"},
        text=None,
        snapshot_id="snap_4",
        refs={"note": RefRead(ref="notes[2]", read="Groceries")},
    )
    reply = ReplyEvent(
        t=3.5,
        src=Source.AGENT,
        id="c1",
        ok=False,
        code=ErrorCode.E_TIMEOUT,
        message="timed out",
        recoverable=True,
        outcome=Outcome.UNKNOWN,
        resolved={},
    )
    path = tmp_path / "h.jsonl"
    write_lines(path, START, event_to_json(command), event_to_json(reply))
    events = read_history(path)
    assert isinstance(events[0], RunEvent)
    assert events[0].phase is RunPhase.START
    assert events[0].agent == ("python", "agent.py")
    assert events[1] == CommandEvent(
        t=3.0,
        src=Source.AGENT,
        id="c1",
        session="s1",
        interface=Interface.MCP,
        app="app_2",
        operation="delete_note",
        args={"note": "notes[2]"},
        text=None,
        snapshot_id="snap_4",
        refs={"note": RefRead(ref="notes[2]", read="Groceries")},
    )
    assert events[2] == reply


def test_writer_refuses_what_the_reader_would_refuse(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path, EPOCH) as writer:
        with pytest.raises(AotuiError) as excinfo:
            writer.append("fault", fault="f1", type="teleport", phase="inject")
        assert excinfo.value.code is ErrorCode.E_INVALID_CMD
        assert "type" in excinfo.value.message
        assert "kill_worker" in excinfo.value.message  # names what is allowed
        with pytest.raises(AotuiError, match="missing field 'outcome'"):
            writer.append("reply", id="c1", ok=True)
        with pytest.raises(AotuiError, match="needs the field 'leftover_pids'"):
            writer.append("run", phase="end", duration=3.0)
        with pytest.raises(AotuiError, match="cannot be written as JSON"):
            writer.append("command", id="c1", interface="cli", args={"blob": b"\x00"})
    assert path.read_bytes() == b""
    with pytest.raises(AotuiError, match="already closed"):
        writer.append("sample", rss=1, fds=1, procs=1)


def _append_many(path: str, who: str, count: int) -> None:
    with HistoryWriter(path, EPOCH) as writer:
        for i in range(count):
            writer.append("signal", reasons=["dom_mutation"], apps=[f"{who}-{i}-" + "x" * 3000])


APPEND_PROGRAM = """
import sys
from aotui.supervisor.chaos.history import HistoryWriter
with HistoryWriter(sys.argv[1], 0.0) as writer:
    for i in range(50):
        writer.append("signal", reasons=["dom_mutation"], apps=[f"{sys.argv[2]}-{i}-" + "x" * 3000])
"""


def test_writers_in_threads_and_processes_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    threads = [
        threading.Thread(target=_append_many, args=(str(path), f"t{n}", 50)) for n in range(3)
    ]
    procs = [
        subprocess.Popen([sys.executable, "-c", APPEND_PROGRAM, str(path), f"p{n}"])
        for n in range(2)
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        for proc in procs:
            assert proc.wait(timeout=30) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    events = read_history(path)
    assert len(events) == 250
    assert len({e.apps for e in events if hasattr(e, "apps")}) == 250


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("not json", "not a JSON object"),
        ("[1, 2]", "expected a JSON object"),
        ('{"t": 1, "src": "runner"}', "missing field 'kind'"),
        ('{"t": 1, "kind": "gossip", "src": "runner"}', "'gossip' is not one of run, command"),
        (
            '{"t": "soon", "kind": "sample", "src": "runner", "rss": 1, "fds": 1, "procs": 1}',
            "t: expected a number",
        ),
        (
            '{"t": 1, "kind": "sample", "src": "runner", "rss": true, "fds": 1, "procs": 1}',
            "rss: expected an integer",
        ),
        (
            '{"t": 1, "kind": "reply", "src": "agent", "id": "c", "ok": true, "outcome": "applied",'
            ' "code": "E_OOPS"}',
            "code: 'E_OOPS' is not one of",
        ),
        (
            '{"t": 1, "kind": "command", "src": "agent", "id": "c", "interface": "cli",'
            ' "refs": {"note": {"read": 1}}}',
            "missing field 'refs.note.ref'",
        ),
        (
            '{"t": NaN, "kind": "sample", "src": "runner", "rss": 1, "fds": 1, "procs": 1}',
            "not a JSON object",
        ),
        (
            b'{"t": 1, "kind": "visible", "src": "runner", "fault": "f", "where": "reply",'
            b' "text": "\xff"}',
            "not a JSON object",
        ),
    ],
)
def test_malformed_line_is_a_typed_error_naming_the_line(
    tmp_path: Path, line: str | bytes, words: str
) -> None:
    path = tmp_path / "h.jsonl"
    data = line if isinstance(line, bytes) else line.encode()
    path.write_bytes(
        json.dumps(START).encode() + b"\n" + data + b"\n" + json.dumps(START).encode() + b"\n"
    )
    with pytest.raises(AotuiError) as excinfo:
        read_history(path)
    assert excinfo.value.code is ErrorCode.E_INVALID_CMD
    assert f"{path} line 2" in excinfo.value.message
    assert words in excinfo.value.message
    assert excinfo.value.data["line"] == 2


def test_truncated_last_line_is_tolerated_and_reported(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "h.jsonl", START, tail='{"t": 2.0, "kind": "sam')
    history = load_history(path)
    assert [e.line for e in history.events] == [1]
    assert history.truncated_line == 2
    assert read_history(path) == list(history.events)


def test_last_line_without_newline_that_parses_is_kept(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "h.jsonl", tail=json.dumps(START))
    history = load_history(path)
    assert len(history.events) == 1
    assert history.truncated_line is None


def test_truncation_in_the_middle_is_not_tolerated(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "h.jsonl", START, '{"t": 2.0, "kind": "sam', START)
    with pytest.raises(AotuiError, match="line 2"):
        load_history(path)


def test_missing_and_unreadable_history(tmp_path: Path) -> None:
    with pytest.raises(AotuiError) as excinfo:
        load_history(tmp_path / "nope.jsonl")
    assert excinfo.value.code is ErrorCode.E_NOT_FOUND
    assert "nope.jsonl" in excinfo.value.message
    with pytest.raises(AotuiError) as excinfo:
        load_history(tmp_path)  # a directory
    assert excinfo.value.code is ErrorCode.E_IO


def test_blank_lines_and_unknown_fields_are_ignored(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "h.jsonl", {**START, "from_the_future": 1}, "", "  ")
    assert len(read_history(path)) == 1


def test_deeply_nested_plan_is_a_typed_error(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "h.jsonl", '{"plan": ' + "[" * 100_000 + "]" * 100_000 + "}", START
    )
    with pytest.raises(AotuiError, match="line 1"):
        load_history(path)


# Fuzz: whatever a history holds, reading gives events or a typed error naming the line.

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
#: Objects that look like history lines: a real kind, real-looking field names, any values.
FIELDS = [
    "t",
    "src",
    "phase",
    "id",
    "ok",
    "outcome",
    "type",
    "fault",
    "target",
    "refs",
    "rss",
    "fds",
    "procs",
    "app",
    "digest",
    "basis",
    "what",
    "seconds",
    "where",
    "text",
    "reasons",
    "interface",
    "seed",
    "desktop",
    "epoch",
    "leftover_pids",
    "duration",
    "code",
]
LINES = st.builds(
    lambda kind, fields: {**fields, "kind": kind},
    st.sampled_from([k.value for k in EventKind] + ["nope"]),
    st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=10),
)


@FUZZ
@given(raw=LINES | JSON)
def test_any_decoded_line_gives_a_record_or_a_typed_error(raw: object) -> None:
    try:
        event: object = parse_event(raw, 3)
    except AotuiError as exc:
        event = exc
    if isinstance(event, AotuiError):
        assert event.code is ErrorCode.E_INVALID_CMD
        assert event.message.startswith("line 3: ")
    else:
        assert isinstance(event, Event)
        assert event.line == 3
        assert parse_event(event_to_json(event)) == event  # and it writes back as it read


@FUZZ
@given(
    data=st.binary(max_size=300)
    | st.lists(LINES, max_size=4).map(
        lambda lines: "".join(json.dumps(line) + "\n" for line in lines).encode()
    )
)
def test_any_file_gives_events_or_a_typed_error(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "h.jsonl"
    path.write_bytes(data)
    try:
        result: object = load_history(path)
    except AotuiError as exc:
        result = exc
    if isinstance(result, AotuiError):
        assert result.code is ErrorCode.E_INVALID_CMD
        assert isinstance(result.data["line"], int)
        assert f"line {result.data['line']}" in result.message
    else:
        assert isinstance(result, History)
        assert all(e.line >= 1 for e in result.events)
