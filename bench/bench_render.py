"""How fast views render: a 1,000-item semantic list, and a ~200 KB ordinary page against peers.

Run ``.venv/bin/python bench/bench_render.py``. Each figure is the best of N runs after a warm-up,
timed with ``time.perf_counter``. Targets: the list view in ≤ 20 ms; the ordinary page at least 3×
faster than markdownify on the same HTML (html2text is shown for reference).
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import html2text
import markdownify

from aotui.sandbox.render import render_view

__all__ = ["list_view_html", "ordinary_page_html", "run"]

LIST_TARGET_MS = 20.0
RATIO_TARGET = 3.0

_WORDS = [
    *("agent", "desktop", "view", "render", "snapshot", "operation", "message", "list", "entity"),
    *("worker", "supervisor", "sandbox", "markdown", "protocol", "registry", "signal", "reply"),
    *("context", "command", "argument", "value", "key", "item", "stable", "process", "memory"),
    *("limit", "restart", "policy", "socket", "client", "lock", "lease", "token", "latency"),
]


def list_view_html(items: int = 1000) -> str:
    """A chat view whose message list has ``items`` items, each with two sub-bullet lines."""
    rows = []
    for i in range(items):
        value = json.dumps({"id": f"msg_{i}", "sender": f"user_{i % 7}", "ts": 1700000000 + i})
        rows.append(
            f"<li key='msg_{i}' data-value='{value}'>Message number {i} about the project"
            f"<ul><li>Sender: user_{i % 7}</li><li>Time Stamp: 2025-12-14 16:{i % 60:02d}</li>"
            "</ul></li>"
        )
    return (
        '<section view="Conversation" description="A long chat"><h2>Private Chat Detail</h2>'
        '<ol list="message[]:message_history" title="Message History">'
        + "".join(rows)
        + '</ol><button operation="send_message" args=\'{"content": "string"}\'>Send</button>'
        "</section>"
    )


def ordinary_page_html(target_bytes: int = 200_000, seed: int = 3) -> str:
    """A realistic documentation-style page of about ``target_bytes``."""
    rng = random.Random(seed)

    def sentence() -> str:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 18))]
        for _ in range(rng.randint(0, 2)):
            at = rng.randrange(len(words))
            kind = rng.choice(("a", "em", "strong", "code"))
            if kind == "a":
                words[at] = f'<a href="https://example.com/{words[at]}/{at}">{words[at]}</a>'
            else:
                words[at] = f"<{kind}>{words[at]}</{kind}>"
        return " ".join(words).capitalize() + "."

    def paragraph() -> str:
        return "<p>" + " ".join(sentence() for _ in range(rng.randint(2, 5))) + "</p>\n"

    def nested_list(depth: int = 0) -> str:
        tag = rng.choice(("ul", "ol"))
        items = []
        for _ in range(rng.randint(2, 5)):
            inner = nested_list(depth + 1) if depth < 2 and rng.random() < 0.3 else ""
            items.append(f"<li>{sentence()}{inner}</li>")
        return f"<{tag}>" + "".join(items) + f"</{tag}>\n"

    def table() -> str:
        head = "".join(f"<th>{rng.choice(_WORDS).title()}</th>" for _ in range(4))
        body = "".join(
            "<tr>"
            + "".join(f"<td>{rng.choice(_WORDS)} {rng.randint(1, 999)}</td>" for _ in range(4))
            + "</tr>"
            for _ in range(rng.randint(3, 8))
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n"

    def code() -> str:
        lines = [f"def {rng.choice(_WORDS)}_{i}(x):\n    return x + {i}" for i in range(4)]
        return '<pre><code class="language-python">' + "\n".join(lines) + "</code></pre>\n"

    parts = ['<main view="Documentation"><h1>Documentation</h1>\n']
    size = 0
    section = 0
    while size < target_bytes:
        section += 1
        chunk = [f"<section><h2>Section {section}</h2>\n", paragraph()]
        for sub in range(rng.randint(1, 3)):
            chunk.append(f"<h3>Part {section}.{sub}</h3>\n")
            chunk.append(paragraph())
            chunk.append(rng.choice((nested_list, table, code, paragraph))())
        chunk.append("</section>\n")
        text = "".join(chunk)
        parts.append(text)
        size += len(text.encode())
    parts.append("</main>")
    return "".join(parts)


def _best_ms(fn: Callable[[], object], repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def run() -> dict[str, float]:
    """Run every figure, print one line each, and return them by name."""
    figures: dict[str, float] = {}
    list_html = list_view_html()
    figures["list_1000_ms"] = _best_ms(lambda: render_view(list_html), repeat=30)
    verdict = "PASS" if figures["list_1000_ms"] <= LIST_TARGET_MS else "MISS"
    print(
        f"render 1,000-item list view ({len(list_html) / 1024:.0f} KB): "
        f"{figures['list_1000_ms']:.2f} ms (target <= {LIST_TARGET_MS:.0f} ms) {verdict}"
    )

    page = ordinary_page_html()
    converter = html2text.HTML2Text()
    converter.body_width = 0
    figures["page_kb"] = len(page.encode()) / 1024
    figures["page_aotui_ms"] = _best_ms(lambda: render_view(page), repeat=10)
    figures["page_markdownify_ms"] = _best_ms(lambda: markdownify.markdownify(page), repeat=5)
    figures["page_html2text_ms"] = _best_ms(lambda: converter.handle(page), repeat=5)
    figures["ratio_markdownify"] = figures["page_markdownify_ms"] / figures["page_aotui_ms"]
    figures["ratio_html2text"] = figures["page_html2text_ms"] / figures["page_aotui_ms"]
    print(
        f"render {figures['page_kb']:.0f} KB ordinary page with aotui:        "
        f"{figures['page_aotui_ms']:.2f} ms"
    )
    print(
        f"render {figures['page_kb']:.0f} KB ordinary page with markdownify:  "
        f"{figures['page_markdownify_ms']:.2f} ms"
    )
    print(
        f"render {figures['page_kb']:.0f} KB ordinary page with html2text:    "
        f"{figures['page_html2text_ms']:.2f} ms"
    )
    verdict = "PASS" if figures["ratio_markdownify"] >= RATIO_TARGET else "MISS"
    print(
        f"aotui vs markdownify: {figures['ratio_markdownify']:.1f}x faster "
        f"(target >= {RATIO_TARGET:.0f}x) {verdict}"
    )
    print(f"aotui vs html2text:   {figures['ratio_html2text']:.1f}x faster")
    return figures


if __name__ == "__main__":
    run()
