"""Encode and decode cost of realistic frames: a ~1 KB operation, two ~100 KB fragment updates.

Run with ``.venv/bin/python bench/bench_codec.py``; :func:`run` returns the figures in µs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aotui.protocol.codec import decode, encode
from aotui.protocol.messages import (
    ChildLink,
    FragmentUpdate,
    Message,
    Operation,
    OperationSpec,
    ViewFragment,
)

REPEATS = 7


def operation_1kb() -> Operation:
    """An operation whose arguments carry a message draft and a few coerced values."""
    return Operation(
        request_id=41,
        view="conversation:johnny",
        op_id="send_message",
        args={
            "text": "Hi Johnny, the quarterly numbers are in; see the attached summary. " * 11,
            "attachments": ["report-q3.pdf", "summary.md"],
            "urgent": False,
            "retry": 2,
            "message": {"id": "m-1042", "from": "alice", "at": 1718000000.5},
        },
        stable_keys={"message": "message:m-1042"},
        deadline_ms=5000,
    )


def fragment_update_100kb() -> FragmentUpdate:
    """A chat app's update: 12 views of Markdown with refs, keys, operations and child links."""
    views = []
    for v in range(12):
        lines = [
            f"- [messages[{i}]] **alice** (10:{i % 60:02d}): the build on branch feature-{i} is "
            f"green; merging after review of the last {i % 7} comments."
            for i in range(40)
        ]
        refs: dict[str, Any] = {f"messages[{i}]": f"m-{v}-{i}" for i in range(40)}
        # Some data-values are records rather than ids.
        refs |= {f"contact-{i}": {"id": f"c-{i}", "name": "Johnny", "unread": i} for i in range(8)}
        views.append(
            ViewFragment(
                key=f"conversation:{v}",
                name="conversation",
                parent="contacts" if v else None,
                mounted=v < 4,
                markdown=f"## Conversation {v}\n\n" + "\n".join(lines),
                refs=refs,
                keys={f"messages[{i}]": f"message:m-{v}-{i}" for i in range(40)},
                ref_types={f"messages[{i}]": "message" for i in range(40)},
                operations=[
                    OperationSpec(
                        "send_message", "Send Message", "Send to this contact", {"text": "string"}
                    ),
                    OperationSpec("delete", "Delete", "", {"message": "ref", "confirm?": "bool"}),
                ],
                links=[ChildLink(f"thread:{v}-{i}", f"Thread {i}", "") for i in range(4)],
            )
        )
    return FragmentUpdate(views=views)


def markdown_update_100kb() -> FragmentUpdate:
    """One mounted document view: 100 KB of Markdown and a handful of refs."""
    paragraph = "The supervisor restarts a crashed worker with backoff and replays its state. "
    view = ViewFragment(
        key="document:design",
        name="document",
        parent=None,
        mounted=True,
        markdown="# Design notes\n\n" + (paragraph * 13 + "\n\n") * 100,
        refs={f"sections[{i}]": f"s-{i}" for i in range(10)},
        keys={f"sections[{i}]": f"section:{i}" for i in range(10)},
        ref_types={f"sections[{i}]": "section" for i in range(10)},
        operations=[OperationSpec("edit", "Edit", "Edit a section", {"section": "ref"})],
        links=[],
    )
    return FragmentUpdate(views=[view])


def best_us(action: Callable[[], object], loops: int) -> float:
    """Best of :data:`REPEATS` runs of ``loops`` calls, in µs per call, after a warm-up run."""
    for _ in range(loops):
        action()
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(loops):
            action()
        best = min(best, (time.perf_counter() - start) / loops)
    return best * 1e6


def measure(label: str, message: Message, loops: int) -> dict[str, float]:
    """Encode, decode and round-trip cost of one message, printed one line per figure."""
    frame = encode(message)
    figures = {
        f"{label}_encode_us": best_us(lambda: encode(message), loops),
        f"{label}_decode_us": best_us(lambda: decode(frame), loops),
        f"{label}_roundtrip_us": best_us(lambda: decode(encode(message)), loops),
    }
    for name, value in figures.items():
        print(f"{name:<28} {value:9.1f} µs   ({len(frame):,}-byte frame)")
    return figures


def run() -> dict[str, float]:
    """Measure the three frames and return every figure by name."""
    return (
        measure("op_1kb", operation_1kb(), 2000)
        | measure("markdown_100kb", markdown_update_100kb(), 500)
        | measure("views_100kb", fragment_update_100kb(), 100)
    )


if __name__ == "__main__":
    run()
