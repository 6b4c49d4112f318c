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


def timeline_svg(events: Sequence[Event], title: str = "chaos run") -> str:
    """The SVG picture of ``events``: one mark per fault, command and recovery, and the RSS line."""
    events = sorted(events, key=lambda e: (e.t, e.line))
    end_t = max((e.t for e in events), default=1.0)
    for event in events:
        if isinstance(event, RunEvent) and event.phase is RunPhase.END and event.duration:
            end_t = max(end_t, event.duration)
    end_t = max(end_t, 1e-3)
    scale = (WIDTH - LEFT - RIGHT) / end_t

    def x(t: float) -> float:
        return round(LEFT + max(0.0, min(t, end_t)) * scale, 2)

    clears = {
        e.fault: e for e in events if isinstance(e, FaultEvent) and e.phase is FaultPhase.CLEAR
    }
    injects = [e for e in events if isinstance(e, FaultEvent) and e.phase is FaultPhase.INJECT]
    # An instant fault (a kill) is never cleared: its span ends when the desktop served again.
    recovered = {e.fault: e.t for e in events if isinstance(e, RecoveryEvent) and e.fault}
    ends = {**recovered, **{fault: clear.t for fault, clear in clears.items()}}
    spans = [(f.t, max(f.t, ends.get(f.fault, end_t))) for f in injects]
    rows = _fault_rows(spans)
    fault_rows = max(rows, default=0) + 1

    faults = Lane("faults", TOP, fault_rows * FAULT_ROW)
    commands = Lane("commands", faults.top + faults.height + LANE_GAP, TICK_LANE)
    recoveries = Lane("recoveries", commands.top + commands.height + LANE_GAP, TICK_LANE)
    memory = Lane("supervisor RSS", recoveries.top + recoveries.height + LANE_GAP, MEMORY_LANE)
    axis_y = memory.top + memory.height + 6
    legend_y = axis_y + AXIS
    height = legend_y + 20 * (1 + (len(FAULT_COLOURS) + 3) // 4)

    svg = ET.Element(
        "svg",
        {
            "xmlns": "http://www.w3.org/2000/svg",
            "width": str(WIDTH),
            "height": str(int(height)),
            "viewBox": f"0 0 {WIDTH} {int(height)}",
            "font-family": "sans-serif",
            "font-size": "11",
        },
    )
    _el(svg, "title", title)
    _el(svg, "rect", x=0, y=0, width=WIDTH, height=int(height), fill="white")
    _el(svg, "text", title, x=LEFT, y=18, font_size=13, font_weight="bold")
    for lane in (faults, commands, recoveries, memory):
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

    group = _el(svg, "g", class_="faults")
    for fault, (start, stop), row in zip(injects, spans, rows, strict=True):
        clear = (
            ""
            if fault.fault in clears
            else " (until its recovery)"
            if fault.fault in recovered
            else " (not cleared)"
        )
        target = ", ".join(f"{k}={v}" for k, v in vars(fault.target).items() if v is not None)
        _titled(
            group,
            "rect",
            f"{fault.fault} {fault.type.value} {target} {start:.2f}-{stop:.2f}s{clear} "
            f"(line {fault.line})",
            class_="fault",
            x=x(start),
            y=faults.top + row * FAULT_ROW + 2,
            width=max(2.0, round((stop - start) * scale, 2)),
            height=FAULT_ROW - 4,
            fill=FAULT_COLOURS[fault.type],
            fill_opacity=0.8,
        )
        if (stop - start) * scale >= 24:  # room for its id
            _el(
                group,
                "text",
                fault.fault,
                x=x(start) + 3,
                y=faults.top + row * FAULT_ROW + 10,
                fill="white",
                font_size=9,
            )

    replies: dict[str, ReplyEvent] = {}
    for event in events:
        if isinstance(event, ReplyEvent):
            replies.setdefault(event.id, event)
    group = _el(svg, "g", class_="commands")
    for command in (e for e in events if isinstance(e, CommandEvent)):
        reply = replies.get(command.id)
        if reply is None:
            colour, outcome, tall = COMMAND_UNANSWERED, "no reply", True
        elif reply.ok:
            colour, outcome, tall = COMMAND_OK, "ok", False
        else:
            colour, tall = COMMAND_ERROR, True
            outcome = f"{reply.code.value if reply.code else 'error'}: {reply.message or ''}"
        what = " ".join(p for p in (command.app, command.operation) if p) or command.text or ""
        top = commands.top + (2 if tall else commands.height / 3)
        _titled(
            group,
            "line",
            f"{command.id} {what} at {command.t:.2f}s: {outcome} (line {command.line})",
            class_="command" + (" error" if tall else ""),
            x1=x(command.t),
            x2=x(command.t),
            y1=top,
            y2=commands.top + commands.height - 2,
            stroke=colour,
            stroke_width=2 if tall else 1,
        )

    group = _el(svg, "g", class_="recoveries")
    middle = recoveries.top + recoveries.height / 2
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
            x1=x(recovery.t - recovery.seconds),
            x2=x(recovery.t),
            y1=middle,
            y2=middle,
            stroke=colour,
            stroke_width=3,
        )
        _el(mark, "circle", cx=x(recovery.t), cy=middle, r=4, fill=colour)

    samples = [e for e in events if isinstance(e, SampleEvent)]
    if samples:
        top_rss = max(s.rss for s in samples) * 1.1
        rss_scale = (memory.height - 4) / max(top_rss, 1)
        points = " ".join(
            f"{x(s.t)},{round(memory.top + memory.height - s.rss * rss_scale, 2)}" for s in samples
        )
        _el(
            svg,
            "polyline",
            class_="rss",
            points=points,
            fill="none",
            stroke="#333",
            stroke_width=1.5,
        )
        for fraction in (0.5, 1.0):
            mib = top_rss * fraction / 1024 / 1024
            y = memory.top + memory.height - top_rss * fraction * rss_scale
            _el(svg, "text", f"{mib:.0f} MiB", x=LEFT + 4, y=round(y + 11, 2), fill="#666")

    step = _nice_step(end_t)
    _el(svg, "line", x1=LEFT, x2=WIDTH - RIGHT, y1=axis_y, y2=axis_y, stroke="#333")
    tick = 0.0
    while tick <= end_t + 1e-9:
        _el(svg, "line", x1=x(tick), x2=x(tick), y1=axis_y, y2=axis_y + 5, stroke="#333")
        _el(svg, "text", f"{tick:g}", x=x(tick), y=axis_y + 17, text_anchor="middle")
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

    legend = [
        *((kind.value, colour) for kind, colour in FAULT_COLOURS.items()),
        ("command ok", COMMAND_OK),
        ("command error", COMMAND_ERROR),
        ("no reply", COMMAND_UNANSWERED),
    ]
    group = _el(svg, "g", class_="legend")
    for i, (label, colour) in enumerate(legend):
        lx, ly = LEFT + (i % 4) * 200, legend_y + (i // 4) * 20
        _el(group, "rect", x=lx, y=ly - 9, width=10, height=10, fill=colour)
        _el(group, "text", label, x=lx + 14, y=ly)
    ET.indent(svg)
    return ET.tostring(svg, encoding="unicode", xml_declaration=False) + "\n"
