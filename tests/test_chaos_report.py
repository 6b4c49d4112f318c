"""``aotui chaos report``: the summary's numbers and the timeline SVG, hostile strings included."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

import pytest
from lxml import etree

from aotui.protocol.errors import ErrorCode
from aotui.supervisor.chaos import report
from aotui.supervisor.chaos.history import load_history
from aotui.supervisor.chaos.report import percentile, summarize
from aotui.supervisor.chaos.timeline import timeline_svg

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '</title><script>alert("x")</script>&amp;\x01\x1b[2J'


def line(t: float, kind: str, **fields: object) -> str:
    return json.dumps({"t": t, "kind": kind, "src": "runner", **fields})


def sample_history(path: Path, hostile: str = "plain") -> Path:
    """Three faults (one overlapping, one never cleared), five commands, three recoveries."""
    lines = [
        line(0.0, "run", phase="start", seed=3, desktop="d", epoch=1.7e9, plan={}),
        line(1.0, "fault", fault="f1", type="kill_worker", phase="inject", target={"app": hostile}),
        line(1.0, "command", id="c1", interface="cli", app="app_2", operation=hostile),
        line(1.2, "reply", id="c1", ok=False, code="E_APP_ERROR", message=hostile, outcome="none"),
        line(1.4, "recovery", fault="f1", app="app_2", what="worker", seconds=0.4, ok=True),
        line(1.5, "fault", fault="f1", type="kill_worker", phase="clear"),
        line(2.0, "fault", fault="f2", type="freeze", phase="inject", detail={"seconds": 3}),
        line(2.5, "fault", fault="f3", type="latency", phase="inject", detail={"ms": 200}),
        line(3.0, "command", id=hostile, interface="mcp", text=hostile),
        line(3.1, "reply", id=hostile, ok=True, outcome="applied"),
        line(3.5, "command", id="c3", interface="cli", app="app_2", operation="add_note"),
        line(5.0, "fault", fault="f2", type="freeze", phase="clear"),
        line(5.1, "reply", id="c3", ok=False, code="E_TIMEOUT", outcome="unknown"),
        line(5.2, "recovery", fault="f2", app="app_2", what="worker", seconds=3.2, ok=True),
        line(6.0, "command", id="c4", interface="cli", app="app_2", operation="add_note"),
        line(6.1, "reply", id="c4", ok=True, outcome="applied"),
        line(7.0, "command", id="c5", interface="cli", app="app_2", operation="add_note"),
        line(8.0, "recovery", fault=None, app=None, what="supervisor", seconds=2.0, ok=False),
        *(line(t, "sample", rss=int((40 + t) * 2**20), fds=9, procs=4) for t in (0.5, 4.0, 8.5)),
        line(9.0, "run", phase="end", agent_exit=0, leftover_pids=[], duration=9.0),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def parse(svg: str) -> etree._Element:
    return etree.fromstring(svg.encode("utf-8"))


def test_timeline_is_svg_with_one_mark_per_fault_command_and_recovery(tmp_path: Path) -> None:
    history = load_history(sample_history(tmp_path / "h.jsonl"))
    root = parse(timeline_svg(history.events))
    assert root.tag == f"{SVG}svg"

    def marks(cls: str) -> list[etree._Element]:
        return [e for e in root.iter() if cls in str(e.get("class", "")).split()]

    assert len(marks("fault")) == 3
    assert len(marks("command")) == 5
    assert len(marks("error")) == 3  # two error replies and one command without a reply
    assert len(marks("recovery")) == 3
    assert len(marks("rss")) == 1
    # The overlapping freeze and latency sit on two rows; the uncleared latency runs to the end.
    faults = {str(r.findtext(f"{SVG}title")).split()[0]: r for r in marks("fault")}
    assert faults["f2"].get("y") != faults["f3"].get("y")
    right = float(faults["f3"].get("x", "")) + float(faults["f3"].get("width", ""))
    assert right == pytest.approx(960 - 20, abs=0.5)
    assert "not cleared" in str(faults["f3"].findtext(f"{SVG}title"))
    # SVG's presentation attributes are hyphenated (text-anchor, not text_anchor).
    names = {name for e in root.iter() for name in e.attrib}
    assert {"text-anchor", "font-size", "stroke-width", "fill-opacity"} <= names
    assert not [name for name in names if "_" in name]
    # A time axis: ticks from 0 to the run's end.
    labels = [t.text for t in root.iter(f"{SVG}text")]
    assert "0" in labels
    assert "8" in labels


def test_timeline_escapes_hostile_strings(tmp_path: Path) -> None:
    history = load_history(sample_history(tmp_path / "h.jsonl", HOSTILE))
    svg = timeline_svg(history.events, title=HOSTILE)
    root = parse(svg)  # parses: nothing broke out of its element
    assert "<script" not in svg
    assert not list(root.iter(f"{SVG}script"))
    titles = [t.text or "" for t in root.iter(f"{SVG}title")]
    shown = '</title><script>alert("x")</script>&amp;\ufffd\ufffd[2J'
    assert titles[0] == shown
    assert any(t.startswith(f"{shown} ") for t in titles)  # the command id
    assert any(f"E_APP_ERROR: {shown}" in t for t in titles)
    assert any(f"app={shown}" in t for t in titles)


def test_an_empty_history_still_draws(tmp_path: Path) -> None:
    root = parse(timeline_svg([]))
    assert root.tag == f"{SVG}svg"


def test_percentile_is_nearest_rank() -> None:
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert percentile([float(i) for i in range(1, 101)], 50) == 50.0
    assert percentile([5.0], 99) == 5.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_summary_counts(tmp_path: Path) -> None:
    summary = summarize(load_history(sample_history(tmp_path / "h.jsonl")))
    assert summary.faults == {"freeze": 1, "kill_worker": 1, "latency": 1}
    assert summary.commands == 5
    assert summary.replies == {"ok": 2, "E_APP_ERROR": 1, "E_TIMEOUT": 1, "missing": 1}
    worker = summary.recoveries["worker"]
    assert (worker.count, worker.failed, worker.p50, worker.p99) == (2, 0, 0.4, 3.2)
    supervisor = summary.recoveries["supervisor"]
    assert (supervisor.count, supervisor.failed) == (1, 1)
    assert not summary.check.ok
    assert summary.duration == 9.0


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    code = report.main(parser.parse_args(list(argv)))
    out, err = capsys.readouterr()
    return code, out, err


def test_main_prints_the_table_and_writes_the_picture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = sample_history(tmp_path / "h.jsonl")
    out_svg = tmp_path / "timeline.svg"
    code, out, _ = run_main(capsys, str(history), "--out", str(out_svg))
    assert code == 0
    assert "faults injected   3" in out
    assert "  kill_worker          1" in out
    assert "commands               5" in out
    assert "  E_TIMEOUT            1" in out
    assert "  missing              1" in out
    assert "  worker               2      0    0.40    3.20" in out
    assert "verdict           FAIL: one_reply_per_command" in out
    assert parse(out_svg.read_text(encoding="utf-8")).tag == f"{SVG}svg"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    code, out, _ = run_main(capsys, str(history), "--json")
    data = json.loads(out)
    assert data["recoveries"]["supervisor"] == {"count": 1, "failed": 1, "p50": None, "p99": None}
    assert data["recoveries"]["worker"]["p99"] == 3.2
    assert data["verdict"]["ok"] is False
    assert "one_reply_per_command" in data["verdict"]["failed"]
    assert data["timeline"] is None


def test_main_errors_are_typed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(capsys, str(tmp_path / "none.jsonl"))
    assert code == ErrorCode.E_NOT_FOUND.exit_code
    assert "none.jsonl" in err
    history = sample_history(tmp_path / "h.jsonl")
    code, out, _ = run_main(
        capsys, str(history), "--out", str(tmp_path / "no-such-dir" / "t.svg"), "--json"
    )
    assert code == ErrorCode.E_IO.exit_code
    error = json.loads(out)["error"]
    assert error["code"] == "E_IO"
    assert "choose another --out" in error["message"]


REPO = Path(__file__).resolve().parent.parent


def documented_report_command() -> list[str]:
    """The ``aotui chaos report`` line of docs/chaos.md, as arguments."""
    text = (REPO / "docs" / "chaos.md").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.startswith("aotui chaos report docs/")]
    assert len(lines) == 1, "docs/chaos.md shows how its picture is made, once"
    words = shlex.split(lines[0])
    assert words[:3] == ["aotui", "chaos", "report"]
    return words[3:]


def test_the_docs_picture_is_what_the_documented_command_draws(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = documented_report_command()
    out_at = args.index("--out") + 1
    committed = REPO / args[out_at]
    args[0] = str(REPO / args[0])
    args[out_at] = str(tmp_path / "timeline.svg")
    code, out, _ = run_main(capsys, *args)
    assert code == 0
    assert "verdict           all checks hold" in out  # as docs/chaos.md says
    drawn = (tmp_path / "timeline.svg").read_text(encoding="utf-8")
    assert drawn == committed.read_text(encoding="utf-8"), (
        f"{committed.relative_to(REPO)} is stale: run `{' '.join(documented_report_command())}`"
        " from the repository root"
    )


def test_a_fault_never_cleared_ends_at_its_recovery(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    lines = [
        line(0.0, "fault", fault="k1", type="kill_worker", phase="inject", target={"app": "a"}),
        line(2.0, "recovery", fault="k1", app="a", what="worker", seconds=2.0, ok=True),
        line(10.0, "run", phase="end", agent_exit=0, leftover_pids=[], duration=10.0),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    root = parse(timeline_svg(load_history(path).events))
    (fault,) = [e for e in root.iter(f"{SVG}rect") if e.get("class") == "fault"]
    assert float(fault.get("width", "")) == pytest.approx((960 - 120 - 20) * 2 / 10, abs=0.5)
    assert "0.00-2.00s (until its recovery)" in str(fault.findtext(f"{SVG}title"))
