"""``aotui demo`` brings its own conversations: a new desktop's chat has none (issue 21 fault 9)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.timeout(120)
def test_the_demo_imports_its_conversations_and_the_agent_reads_them(tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "AOTUI_HOME": str(tmp_path / "home"), "XDG_RUNTIME_DIR": str(runtime)}
    demo = subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", "demo", "--json"],
        capture_output=True, text=True, timeout=100, check=False, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    events = json.loads(demo.stdout)
    # Imported before the agent's first look, as any state reaches a desktop.
    assert events[0] == {
        "kind": "demo data (aotui import)",
        "text": "the chat is given the conversations Johnny, TUI Tech Group",
    }
    first = events[1]
    assert first["kind"] == "snapshot T1"
    assert "Unread Messages: 3" in first["text"]
    assert "Imported the data of 1 app(s)." in first["text"]  # System Logs say so
    shown = "\n".join(event["text"] for event in events)
    for conversation in ("[User](view:view_3)", "[Johnny](view:view_4)", "[TUI Tech Group]"):
        assert conversation in shown
    assert '<view id="view_5" name="TUI Tech Group">' in shown
    assert "2. [Who own this project?](message:message_history[1])" in shown
    assert "3. [Me.](message:message_history[2])" in shown  # the agent's answer to Jane
    assert "    - Reply To: msg_3" in shown
