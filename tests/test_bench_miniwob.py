"""Issue 23's MiniWoB figure, a few task types of it (slow: a real desktop, Browser and Chromium).

The whole figure is ``python bench/bench_miniwob.py``; this runs five of its task types, three
episodes each, through the same agent: it reads only the Browser tab's Markdown and acts only by
the tab's operations, and MiniWoB's own reward is read from the page's text.
"""

from __future__ import annotations

import argparse

import pytest

from aotui.sandbox import browser
from bench import bench_miniwob

pytest.importorskip("miniwob")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(browser.find_browser() is None, reason="no headless browser installed"),
    pytest.mark.timeout(300),
]
TYPES = ("click-button", "click-checkboxes", "enter-password", "choose-list", "enter-date")


def test_a_markdown_only_agent_solves_miniwob_task_types() -> None:
    means: dict[str, float] = {}
    args = argparse.Namespace(quick=True, episodes=3, only=",".join(TYPES), verbose=True)
    figures = bench_miniwob.run(args, means)
    assert set(means) == set(TYPES)
    assert all(mean >= bench_miniwob.GOAL_REWARD for mean in means.values()), means
    assert figures["miniwob_types_solved"] == len(TYPES)
