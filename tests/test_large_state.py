"""Apps whose stored data is larger than one frame restart with all of it (issues 9 and 10)."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from tests.conftest import RunningDesktop, wait_for

Start = Callable[..., RunningDesktop]
PUT = '<context app_id="app_0" view_id="view_0">execute put --name {name} --kb {kb}</context>'
DROP = '<context app_id="app_0" view_id="view_0">execute drop --name {name}</context>'


def digest_shown(desktop: RunningDesktop) -> str | None:
    """The parts app's digest in a snapshot, or ``None`` when its block is not shown."""
    found = re.search(r"Digest: (\S+)", desktop.client.snapshot())
    return found.group(1) if found else None


def restarted(desktop: RunningDesktop, old_pid: int | None) -> Callable[[], bool]:
    def back() -> bool:
        row = desktop.client.status()["apps"][0]
        return row["state"] == "running" and row["pid"] not in (None, old_pid)

    return back


def showing(desktop: RunningDesktop, digest: str) -> Callable[[], bool]:
    return lambda: digest_shown(desktop) == digest


def fill(desktop: RunningDesktop, parts: int, kb: int) -> str:
    """Store ``parts`` parts of ``kb`` KiB; the digest of the last acknowledged state."""
    digest = ""
    for i in range(parts):
        digest = desktop.client.execute(PUT.format(name=f"p{i}", kb=kb))["results"][0]
    return digest


@pytest.mark.timeout(120)
def test_worker_kill_restores_keyed_data_larger_than_a_frame(start_desktop: Start) -> None:
    desktop = start_desktop(["parts"])
    desktop.client.execute("<context>open --application app_0</context>")
    digest = fill(desktop, 12, 500)  # ~6 MB: past the 4 MiB frame
    assert digest.startswith("12:")
    assert digest_shown(desktop) == digest
    pid = desktop.app_pid("app_0")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(restarted(desktop, pid), 30, "the app to restart with its data")
    assert digest_shown(desktop) == digest
    # It goes on storing parts after the restart (not its whole data in one ack again).
    after = desktop.client.execute(PUT.format(name="p12", kb=10))["results"][0]
    assert after.startswith("13:")
    after = desktop.client.execute(DROP.format(name="p0"))["results"][0]
    assert after.startswith("12:")
    pid = desktop.app_pid("app_0")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(restarted(desktop, pid), 30, "the app to restart again")
    assert digest_shown(desktop) == after


@pytest.mark.timeout(120)
def test_supervisor_kill_and_clean_restart_keep_keyed_data_larger_than_a_frame(
    start_desktop: Start,
) -> None:
    desktop = start_desktop(["parts"])
    desktop.client.execute("<context>open --application app_0</context>")
    digest = fill(desktop, 12, 500)
    os.kill(desktop.process.pid, signal.SIGKILL)
    desktop.process.wait(timeout=10)
    again = start_desktop(["parts"], name=desktop.name)
    wait_for(lambda: digest_shown(again) == digest, 30, "the app back with all its parts")
    # A clean stop writes the whole desktop: the app's row, too large for one frame, as parts.
    again.client.shutdown()
    again.process.wait(timeout=30)
    assert again.process.returncode == 0
    third = start_desktop(["parts"], name=desktop.name)
    wait_for(lambda: digest_shown(third) == digest, 30, "the app back after a clean stop")
    assert third.client.execute(PUT.format(name="p3", kb=1))["results"][0].startswith("12:")


@pytest.mark.timeout(120)
def test_a_part_larger_than_a_frame_is_refused_before_its_effect(start_desktop: Start) -> None:
    desktop = start_desktop(["parts"])
    desktop.client.execute("<context>open --application app_0</context>")
    digest = fill(desktop, 2, 100)
    pid = desktop.app_pid("app_0")
    with pytest.raises(AotuiError) as refused:
        desktop.client.execute(PUT.format(name="huge", kb=4200))
    assert refused.value.code is ErrorCode.E_APP_ERROR
    assert "took no effect" in refused.value.message
    assert refused.value.data.get("outcome") == "not applied"
    assert digest_shown(desktop) in (None, digest)  # never shown
    wait_for(restarted(desktop, pid), 30, "the app to restart from its acknowledged data")
    assert digest_shown(desktop) == digest


@pytest.mark.timeout(180)
def test_an_app_is_held_to_its_data_budget(start_desktop: Start) -> None:
    desktop = start_desktop(["parts"])
    desktop.client.execute("<context>open --application app_0</context>")
    digest = fill(desktop, 21, 3000)  # 61.5 MiB, under the 64 MiB an app may keep
    pid = desktop.app_pid("app_0")
    with pytest.raises(AotuiError) as refused:
        desktop.client.execute(PUT.format(name="p21", kb=3000))
    assert refused.value.code is ErrorCode.E_APP_ERROR
    assert "64 MiB" in refused.value.message
    assert "took no effect" in refused.value.message
    assert refused.value.data.get("outcome") == "not applied"
    wait_for(restarted(desktop, pid), 60, "the app to restart from its acknowledged data")
    assert digest_shown(desktop) == digest
    # Over the budget or not, what does not grow the data goes through: a part replaced smaller.
    assert desktop.client.execute(PUT.format(name="p0", kb=1))["results"][0].startswith("21:")
    assert desktop.client.execute(PUT.format(name="p21", kb=1))["results"][0].startswith("22:")


def stored_parts(home: Path, name: str) -> int:
    """How many part rows the store of desktop ``name`` holds (its supervisor must be gone)."""
    with sqlite3.connect(home / "desktops" / f"{name}.db") as db:
        (count,) = db.execute("SELECT count(*) FROM app_parts").fetchone()
    db.close()
    return int(count)


@pytest.mark.timeout(120)
def test_after_a_restore_the_first_ack_sends_small_data_whole_and_large_data_as_parts(
    start_desktop: Start, private_home: Path
) -> None:
    """Small keyed data is stored whole again by the first ack of a run, as before (an app that
    migrated its data in restore() stores the migrated form); data past a frame cannot be, and
    its changed parts go instead."""
    for name, count, kb in (("small", 3, 10), ("large", 12, 500)):
        desktop = start_desktop(["parts"], name=name)
        desktop.client.execute("<context>open --application app_0</context>")
        fill(desktop, count, kb)
        pid = desktop.app_pid("app_0")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_for(restarted(desktop, pid), 30, "the app to restart with its data")
        digest = desktop.client.execute(PUT.format(name="after", kb=1))["results"][0]
        os.kill(desktop.process.pid, signal.SIGKILL)  # no shutdown write: the store as acked
        desktop.process.wait(timeout=10)
        if name == "small":
            assert stored_parts(private_home, name) == 0  # the row was written whole
        else:  # p1…p11 acked as parts in the first run, and the new part: no whole write
            assert stored_parts(private_home, name) == count
        again = start_desktop(["parts"], name=name)
        wait_for(showing(again, digest), 30, "the app back with all its parts")
