"""The fleet's soak, short (bench/soak_fleet.py: its full length is 30 minutes): desktops under a
command load on a Ray cluster on this machine while worker nodes are added and lost, judged by
the chaos checker at the end."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the fleet's soak needs Ray: pip install 'aotui[fleet]'")

SOAK = Path(__file__).resolve().parent.parent / "bench" / "soak_fleet.py"


@pytest.mark.slow
@pytest.mark.timeout(720)
def test_three_minutes_of_nodes_lost_and_added_under_load(tmp_path: Path) -> None:
    history = tmp_path / "soak.jsonl"
    command = [sys.executable, str(SOAK), "--minutes", "3", "--every", "50", "--desktops", "8"]
    process = subprocess.Popen(
        [*command, "--history", str(history)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = process.communicate(timeout=660)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    verdicts = [line for line in out.splitlines() if line.startswith("VERDICT ")]
    assert len(verdicts) == 1, out[-4000:]
    assert process.returncode == 0, out[-4000:]
    figures = dict(re.findall(r"(\w+)=(\S+)", verdicts[0]))
    assert verdicts[0].startswith("VERDICT PASS ")
    assert (figures["lost"], figures["twice"], figures["unanswered"]) == ("0", "0", "0")
    assert int(figures["node_losses"]) >= 2
    assert int(figures["recoveries"]) >= 1
    assert int(figures["replies"]) >= int(figures["commands"]) > 100
    assert figures["supervisors"] == figures["actors"] == "8->8"
    assert history.exists()
