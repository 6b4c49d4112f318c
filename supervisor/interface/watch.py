"""``aotui watch``: a live inspector that redraws on every signal."""

from __future__ import annotations

import json
import sys
import time

from aotui.supervisor.interface.client import Client

__all__ = ["watch"]

_CLEAR = "\x1b[H\x1b[2J"


def watch(client: Client, max_updates: int | None = None, json_output: bool = False) -> int:
    """Redraw snapshot + status on each signal (and every 2 s); ``max_updates`` bounds it."""
    from aotui.supervisor.interface.reports import format_status

    updates = 0
    last_reason = "start"
    signals = client.signals(timeout_s=2.0)
    while max_updates is None or updates < max_updates:
        markdown = client.snapshot()
        status = client.status()
        if json_output:
            print(json.dumps({"reason": last_reason, "time": time.time(), "status": status}))
        else:
            sys.stdout.write(_CLEAR if sys.stdout.isatty() else "\n" + "=" * 80 + "\n")
            print(f"aotui watch — last signal: {last_reason} at {time.strftime('%H:%M:%S')}")
            print(format_status(status))
            print()
            sys.stdout.write(markdown)
        sys.stdout.flush()
        updates += 1
        signal = next(signals, None)
        if signal is None:
            signals = client.signals(timeout_s=2.0)
            last_reason = "refresh"
        else:
            last_reason = signal.reason
    return 0
