"""Parse rate of the command language: a typical one-line execute and a multi-block message.

Run with ``.venv/bin/python bench/bench_parse.py``; :func:`run` returns the figures in messages
(or calls) per second, best of several repeats on one core.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aotui.protocol.args import coerce_args, parse_arg_schema
from aotui.protocol.grammar import parse_commands

REPEATS = 7
#: What a typical agent message must parse at (CONTRACT §5 performance goal).
TARGET_PER_S = 20_000

TYPICAL = (
    '<context app_id="app_0" view_id="view_3">execute reply_message '
    '--message_to_be_replied message_history[0] --content "Hi, Johnny"</context>'
)
MULTI = """I'll open the notes app, look at the chat and answer Johnny.
<context>open --application com.example.notes</context>
<context app_id="app_0">
  mount --view view_3; mount --view view_4
  hide --view view_1
</context>
Then the reply, with a longer text:
<context app_id="app_0" view_id="view_3">
  execute reply_message --message_to_be_replied message_history[0]
      --content "Sounds good — I'll send the \\"final\\" numbers tonight.\\nThanks!"
  execute operation --id mark_read --conversation=conversation_title --all
</context>"""


def per_second(action: Callable[[], object], loops: int) -> float:
    """Best of :data:`REPEATS` runs of ``loops`` calls, in calls per second, after a warm-up."""
    for _ in range(loops // 10):
        action()
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(loops):
            action()
        best = min(best, time.perf_counter() - start)
    return loops / best


def run() -> dict[str, float]:
    """Measure each figure, print one line per figure, and return them by name."""
    schema = parse_arg_schema('{"message_to_be_replied": "message", "content": "string"}')
    command = parse_commands(TYPICAL)[0]
    figures = {
        "parse_execute_per_s": per_second(lambda: parse_commands(TYPICAL), 20_000),
        "parse_multi_block_per_s": per_second(lambda: parse_commands(MULTI), 4_000),
        "coerce_args_per_s": per_second(lambda: coerce_args(schema, command.args), 20_000),
    }
    verdict = "PASS" if figures["parse_execute_per_s"] >= TARGET_PER_S else "MISS"
    print(
        f"{'parse_execute_per_s':<26} {figures['parse_execute_per_s']:11,.0f} /s   "
        f"(one-line execute, {len(TYPICAL)} chars; target ≥ {TARGET_PER_S:,}/s: {verdict})"
    )
    print(
        f"{'parse_multi_block_per_s':<26} {figures['parse_multi_block_per_s']:11,.0f} /s   "
        f"({len(parse_commands(MULTI))} commands in 3 blocks with prose, {len(MULTI)} chars)"
    )
    print(
        f"{'coerce_args_per_s':<26} {figures['coerce_args_per_s']:11,.0f} /s   "
        "(message ref + string, no resolver)"
    )
    return figures


if __name__ == "__main__":
    run()
