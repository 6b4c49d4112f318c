"""The timeline picture of a chaos history: faults, commands, recoveries and memory on one axis.

SVG built with ElementTree, so every text and attribute is escaped by construction; characters
XML cannot carry at all (control characters a hostile history may hold) become U+FFFD first.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

from aotui.supervisor.chaos.history import (
    CommandEvent,
    Event,
    FaultEvent,
    FaultPhase,
    FaultType,
    RecoveryEvent,
    ReplyEvent,
    RunEvent,
    RunPhase,
    SampleEvent,
)

__all__ = ["FAULT_COLOURS", "Lane", "timeline_svg"]

#: One colour per fault type, readable on white.
FAULT_COLOURS: dict[FaultType, str] = {
    FaultType.KILL_WORKER: "#d62728",
    FaultType.FREEZE: "#1f77b4",
    FaultType.LATENCY: "#ff7f0e",
    FaultType.FAIL: "#8c564b",
    FaultType.DRIFT: "#9467bd",
    FaultType.LIE: "#e377c2",
    FaultType.MEMORY_PRESSURE: "#7f7f7f",
    FaultType.KILL_SUPERVISOR: "#000000",
    FaultType.HTTP_FAULT: "#bcbd22",
    FaultType.DISK_FULL: "#17becf",
    FaultType.SIGNAL_LOSS: "#2ca02c",
    FaultType.SIGNAL_BURST: "#98df8a",
}
COMMAND_OK = "#4c72b0"
COMMAND_ERROR = "#d62728"
COMMAND_UNANSWERED = "#ff9f1c"
RECOVERY_OK = "#2ca02c"
RECOVERY_FAILED = "#d62728"

WIDTH = 960
LEFT = 120  # room for the lane labels
RIGHT = 20
TOP = 30
FAULT_ROW = 14
LANE_GAP = 14
TICK_LANE = 34
MEMORY_LANE = 90
AXIS = 54

# Characters XML 1.0 cannot hold, even escaped.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True)
class Lane:
    """A horizontal band of the picture."""

    #: Its label at the left.
    label: str
    #: Its top edge in pixels.
    top: float
    #: Its height in pixels.
    height: float


def _clean(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _el(parent: ET.Element, tag: str, text: str | None = None, /, **attrs: object) -> ET.Element:
    """A child element; ``class_`` becomes ``class``, ``font_size`` ``font-size``; XML-safe."""
    names = {k: k.rstrip("_").replace("_", "-") for k in attrs}
    element = ET.SubElement(parent, tag, {names[k]: _clean(str(v)) for k, v in attrs.items()})
    if text is not None:
        element.text = _clean(text)
    return element


def _titled(parent: ET.Element, tag: str, title: str, **attrs: object) -> ET.Element:
    """A mark with a tooltip (its ``<title>``)."""
    mark = _el(parent, tag, **attrs)
    _el(mark, "title", title)
    return mark


def _nice_step(span: float, ticks: int = 8) -> float:
    """A round tick interval (1, 2 or 5 × 10ⁿ) giving about ``ticks`` ticks over ``span``."""
    raw = max(span, 1e-9) / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _fault_rows(spans: Sequence[tuple[float, float]]) -> list[int]:
    """A row for each span so that no two overlapping spans share one (first fit)."""
    ends: list[float] = []
    rows = []
    for start, end in spans:
        row = next((i for i, last in enumerate(ends) if last < start), len(ends))
        if row == len(ends):
            ends.append(end)
        else:
            ends[row] = end
        rows.append(row)
    return rows


@dataclass(frozen=True)
class _Frame:
    """Where everything goes: the time scale and the lanes, from the history's length."""

    end_t: float
    scale: float
    faults: Lane
    commands: Lane
    recoveries: Lane
    memory: Lane

    @property
    def axis_y(self) -> float:
        return self.memory.top + self.memory.height + 6

    @property
    def legend_y(self) -> float:
        return self.axis_y + AXIS

    @property
    def height(self) -> int:
        return int(self.legend_y + 20 * (1 + (len(FAULT_COLOURS) + 3) // 4))

    def x(self, t: float) -> float:
        """The horizontal position of time ``t`` (clamped to the run)."""
        return round(LEFT + max(0.0, min(t, self.end_t)) * self.scale, 2)


@dataclass(frozen=True)
class _FaultSpans:
    """Each injected fault with its span and row."""

    injects: list[FaultEvent]
    spans: list[tuple[float, float]]
    rows: list[int]
    cleared: set[str]
    recovered: set[str]


def _fault_spans(events: Sequence[Event], end_t: float) -> _FaultSpans:
    clears = {
        e.fault: e for e in events if isinstance(e, FaultEvent) and e.phase is FaultPhase.CLEAR
    }
    injects = [e for e in events if isinstance(e, FaultEvent) and e.phase is FaultPhase.INJECT]
    # An instant fault (a kill) is never cleared: its span ends when the desktop served again.
    recovered = {e.fault: e.t for e in events if isinstance(e, RecoveryEvent) and e.fault}
    ends = {**recovered, **{fault: clear.t for fault, clear in clears.items()}}
    spans = [(f.t, max(f.t, ends.get(f.fault, end_t))) for f in injects]
    return _FaultSpans(injects, spans, _fault_rows(spans), set(clears), set(recovered))


def _frame(events: Sequence[Event], fault_rows: int, end_t: float) -> _Frame:
    faults = Lane("faults", TOP, fault_rows * FAULT_ROW)
    commands = Lane("commands", faults.top + faults.height + LANE_GAP, TICK_LANE)
    recoveries = Lane("recoveries", commands.top + commands.height + LANE_GAP, TICK_LANE)
    memory = Lane("supervisor RSS", recoveries.top + recoveries.height + LANE_GAP, MEMORY_LANE)
    scale = (WIDTH - LEFT - RIGHT) / end_t
    return _Frame(end_t, scale, faults, commands, recoveries, memory)


def _end_time(events: Sequence[Event]) -> float:
    end_t = max((e.t for e in events), default=1.0)
    for event in events:
        if isinstance(event, RunEvent) and event.phase is RunPhase.END and event.duration:
            end_t = max(end_t, event.duration)
    return max(end_t, 1e-3)


def timeline_svg(events: Sequence[Event], title: str = "chaos run") -> str:
    """The SVG picture of ``events``: one mark per fault, command and recovery, and the RSS line."""
    events = sorted(events, key=lambda e: (e.t, e.line))
    end_t = _end_time(events)
    faults = _fault_spans(events, end_t)
    frame = _frame(events, max(faults.rows, default=0) + 1, end_t)
    svg = ET.Element(
        "svg",
        {
            "xmlns": "http://www.w3.org/2000/svg",
            "width": str(WIDTH),
            "height": str(frame.height),
            "viewBox": f"0 0 {WIDTH} {frame.height}",
            "font-family": "sans-serif",
            "font-size": "11",
        },
    )
    _el(svg, "title", title)
    _el(svg, "rect", x=0, y=0, width=WIDTH, height=frame.height, fill="white")
    _el(svg, "text", title, x=LEFT, y=18, font_size=13, font_weight="bold")
    for lane in (frame.faults, frame.commands, frame.recoveries, frame.memory):
        _el(
            svg,
            "rect",
            x=LEFT,
            y=lane.top,
            width=WIDTH - LEFT - RIGHT,
            height=lane.height,
            fill="#f4f4f4",
        )
        _el(
            svg, "text", lane.label, x=LEFT - 8, y=lane.top + lane.height / 2 + 4, text_anchor="end"
        )
    _draw_faults(svg, frame, faults)
    _draw_commands(svg, frame, events)
    _draw_recoveries(svg, frame, events)
    _draw_memory(svg, frame, [e for e in events if isinstance(e, SampleEvent)])
    _draw_axis(svg, frame)
    _draw_legend(svg, frame)
    ET.indent(svg)
    return ET.tostring(svg, encoding="unicode", xml_declaration=False) + "\n"


def _draw_faults(svg: ET.Element, frame: _Frame, faults: _FaultSpans) -> None:
    group = _el(svg, "g", class_="faults")
    top = frame.faults.top
    for fault, (start, stop), row in zip(faults.injects, faults.spans, faults.rows, strict=True):
        clear = (
            ""
            if fault.fault in faults.cleared
            else " (until its recovery)"
            if fault.fault in faults.recovered
            else " (not cleared)"
        )
        target = ", ".join(f"{k}={v}" for k, v in vars(fault.target).items() if v is not None)
        _titled(
            group,
            "rect",
            f"{fault.fault} {fault.type.value} {target} {start:.2f}-{stop:.2f}s{clear} "
            f"(line {fault.line})",
            class_="fault",
            x=frame.x(start),
            y=top + row * FAULT_ROW + 2,
            width=max(2.0, round((stop - start) * frame.scale, 2)),
            height=FAULT_ROW - 4,
            fill=FAULT_COLOURS[fault.type],
            fill_opacity=0.8,
        )
        if (stop - start) * frame.scale >= 24:  # room for its id
            _el(
                group,
                "text",
                fault.fault,
                x=frame.x(start) + 3,
                y=top + row * FAULT_ROW + 10,
                fill="white",
                font_size=9,
            )


def _command_look(reply: ReplyEvent | None) -> tuple[str, str, bool]:
    """A command's colour, outcome text and whether its tick is tall (an error or no reply)."""
    if reply is None:
        return COMMAND_UNANSWERED, "no reply", True
    if reply.ok:
        return COMMAND_OK, "ok", False
    return (
        COMMAND_ERROR,
        f"{reply.code.value if reply.code else 'error'}: {reply.message or ''}",
        True,
    )


def _draw_commands(svg: ET.Element, frame: _Frame, events: Sequence[Event]) -> None:
    replies: dict[str, ReplyEvent] = {}
    for event in events:
        if isinstance(event, ReplyEvent):
            replies.setdefault(event.id, event)
    group = _el(svg, "g", class_="commands")
    lane = frame.commands
    for command in (e for e in events if isinstance(e, CommandEvent)):
        colour, outcome, tall = _command_look(replies.get(command.id))
        what = " ".join(p for p in (command.app, command.operation) if p) or command.text or ""
        top = lane.top + (2 if tall else lane.height / 3)
        _titled(
            group,
            "line",
            f"{command.id} {what} at {command.t:.2f}s: {outcome} (line {command.line})",
            class_="command" + (" error" if tall else ""),
            x1=frame.x(command.t),
            x2=frame.x(command.t),
            y1=top,
            y2=lane.top + lane.height - 2,
            stroke=colour,
            stroke_width=2 if tall else 1,
        )


def _draw_recoveries(svg: ET.Element, frame: _Frame, events: Sequence[Event]) -> None:
    group = _el(svg, "g", class_="recoveries")
    middle = frame.recoveries.top + frame.recoveries.height / 2
    for recovery in (e for e in events if isinstance(e, RecoveryEvent)):
        colour = RECOVERY_OK if recovery.ok else RECOVERY_FAILED
        mark = _titled(
            group,
            "g",
            f"{recovery.what.value} {recovery.app or 'desktop'} after {recovery.fault or '?'}: "
            f"{recovery.seconds:.2f}s{'' if recovery.ok else ' FAILED'} (line {recovery.line})",
            class_="recovery",
        )
        # The span from the fault's inject to serving again, ending in a dot.
        _el(
            mark,
            "line",
            x1=frame.x(recovery.t - recovery.seconds),
            x2=frame.x(recovery.t),
            y1=middle,
            y2=middle,
            stroke=colour,
            stroke_width=3,
        )
        _el(mark, "circle", cx=frame.x(recovery.t), cy=middle, r=4, fill=colour)


def _draw_memory(svg: ET.Element, frame: _Frame, samples: Sequence[SampleEvent]) -> None:
    if not samples:
        return
    lane = frame.memory
    top_rss = max(s.rss for s in samples) * 1.1
    rss_scale = (lane.height - 4) / max(top_rss, 1)
    points = " ".join(
        f"{frame.x(s.t)},{round(lane.top + lane.height - s.rss * rss_scale, 2)}" for s in samples
    )
    _el(svg, "polyline", class_="rss", points=points, fill="none", stroke="#333", stroke_width=1.5)
    for fraction in (0.5, 1.0):
        mib = top_rss * fraction / 1024 / 1024
        y = lane.top + lane.height - top_rss * fraction * rss_scale
        _el(svg, "text", f"{mib:.0f} MiB", x=LEFT + 4, y=round(y + 11, 2), fill="#666")


def _draw_axis(svg: ET.Element, frame: _Frame) -> None:
    step = _nice_step(frame.end_t)
    axis_y = frame.axis_y
    _el(svg, "line", x1=LEFT, x2=WIDTH - RIGHT, y1=axis_y, y2=axis_y, stroke="#333")
    tick = 0.0
    while tick <= frame.end_t + 1e-9:
        _el(
            svg, "line", x1=frame.x(tick), x2=frame.x(tick), y1=axis_y, y2=axis_y + 5, stroke="#333"
        )
        _el(svg, "text", f"{tick:g}", x=frame.x(tick), y=axis_y + 17, text_anchor="middle")
        tick = round(tick + step, 9)
    _el(
        svg,
        "text",
        "seconds since the run's start",
        x=(LEFT + WIDTH) / 2,
        y=axis_y + 32,
        text_anchor="middle",
        fill="#666",
    )


def _draw_legend(svg: ET.Element, frame: _Frame) -> None:
    legend = [
        *((kind.value, colour) for kind, colour in FAULT_COLOURS.items()),
        ("command ok", COMMAND_OK),
        ("command error", COMMAND_ERROR),
        ("no reply", COMMAND_UNANSWERED),
    ]
    group = _el(svg, "g", class_="legend")
    for i, (label, colour) in enumerate(legend):
        lx, ly = LEFT + (i % 4) * 200, frame.legend_y + (i // 4) * 20
        _el(group, "rect", x=lx, y=ly - 9, width=10, height=10, fill=colour)
        _el(group, "text", label, x=lx + 14, y=ly)
