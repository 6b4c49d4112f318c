"""The sanitizer's ASCII path for view Markdown: the same text as the regex path, far cheaper.

A hostile app's 900 KB views (issue 9, attack A3) used to cost the supervisor's event loop
~11 ms each in ``sanitize(..., lines=True)``, which the victim app's requests waited behind.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from aotui.protocol import structure
from aotui.protocol.structure import sanitize


def _by_regex(value: str) -> str:
    """The general (regex) path of ``sanitize(lines=True)`` before the cut and the escape."""
    strip = structure._classes(value.isascii()).strip
    value = structure._LINE_BREAKS.sub("\n", value)
    return strip.sub(lambda m: m.group() if m.group() in structure._KEEP_IN_TEXT else "", value)


def test_the_ascii_path_gives_what_the_regexes_give() -> None:
    rng = random.Random(9)
    # Every ASCII character, and runs of CR, LF and tabs where CRLF pairs form and break.
    alphabet = [chr(c) for c in range(0x80)] + ["\r", "\n", "\r\n", "\t", " ", "a", "<view"] * 8
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(40)))
        assert structure._ascii_lines(text) == _by_regex(text), repr(text)
    every = "".join(chr(c) for c in range(0x80)) + "\r\n\r\r\n"
    assert sanitize(every, lines=True, limit=None) == structure.escape_structural(_by_regex(every))


def _best_of(action: Callable[[], object], runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        began = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - began)
    return best


def test_a_large_ascii_view_is_sanitized_without_the_regexes_cost() -> None:
    view = ("<p>" + "w" * 895 + "</p>\n") * 1000  # 900 KB of ordinary ASCII Markdown
    fast = _best_of(lambda: sanitize(view, lines=True, limit=None))
    regex = _best_of(lambda: structure.escape_structural(_by_regex(view)))
    assert sanitize(view, lines=True, limit=None) == structure.escape_structural(_by_regex(view))
    # A ratio measured in one process, so a loaded machine slows both sides alike.
    assert fast < regex / 3, (fast, regex)
