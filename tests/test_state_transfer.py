"""Export and import of a desktop's state, through the client and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from tests.conftest import RunningDesktop

Start = Callable[..., RunningDesktop]

BUMP = '<context app_id="app_0" view_id="view_0">execute bump</context>'


def aotui(desktop: RunningDesktop, *args: str, stdin: str | None = None):
    return subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", *args, "--socket", str(desktop.runtime)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def echo_desktop(start_desktop: Start, bumps: int) -> RunningDesktop:
    desktop = start_desktop(["echo"])
    desktop.client.execute("<context>open --application app_0</context>")
    for _ in range(bumps):
        desktop.client.execute(BUMP)
    return desktop


@pytest.mark.timeout(90)
def test_export_then_import_through_the_client(start_desktop: Start) -> None:
    desktop = echo_desktop(start_desktop, 3)
    state = desktop.client.export_state()
    assert state["format"] == "aotui.desktop"
    assert state["apps"][0]["data"] == {"count": 3}
    desktop.client.execute(BUMP)
    assert "Calls: 4" in desktop.client.snapshot()

    result = desktop.client.import_state(state)
    assert result == {"imported": ["app_0"], "skipped": []}
    assert "Calls: 3" in desktop.client.snapshot()  # restarted from the imported data
    assert desktop.client.execute(BUMP)["results"] == [4]

    foreign = {**state, "apps": [{**state["apps"][0], "manifest_id": "com.example.absent"}]}
    assert desktop.client.import_state(foreign) == {
        "imported": [],
        "skipped": ["com.example.absent"],
    }
    with pytest.raises(AotuiError) as caught:
        desktop.client.import_state({"apps": []})
    assert caught.value.code is ErrorCode.E_INVALID_CMD

    holder = desktop.new_client()
    holder.acquire("holder", heartbeat=False)
    with pytest.raises(AotuiError) as locked:
        desktop.client.import_state(state)
    assert locked.value.code is ErrorCode.E_LOCKED


@pytest.mark.timeout(120)
def test_export_and_import_through_the_cli(start_desktop: Start, tmp_path: Path) -> None:
    source = echo_desktop(start_desktop, 2)
    target = echo_desktop(start_desktop, 0)
    exported = aotui(source, "export", source.name)
    assert exported.returncode == 0, exported.stderr
    state_file = tmp_path / "state.json"
    state_file.write_text(exported.stdout)
    assert json.loads(exported.stdout)["id"] == source.name

    imported = aotui(target, "import", target.name, stdin=exported.stdout)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == "imported app_0"
    assert "Calls: 2" in target.client.snapshot()
    again = aotui(target, "import", target.name, "--file", str(state_file), "--json")
    assert json.loads(again.stdout)["imported"] == ["app_0"]

    garbage = aotui(target, "import", target.name, stdin="not json")
    assert garbage.returncode == 64
    assert "not JSON" in garbage.stderr


PUT = '<context app_id="app_0" view_id="view_0">execute put --name {name} --kb {kb}</context>'


def parts_desktop(start_desktop: Start, parts: int) -> tuple[RunningDesktop, str]:
    desktop = start_desktop(["parts"])
    desktop.client.execute("<context>open --application app_0</context>")
    digest = ""
    for i in range(parts):
        digest = desktop.client.execute(PUT.format(name=f"p{i}", kb=500))["results"][0]
    return desktop, digest


@pytest.mark.timeout(180)
def test_export_and_import_of_more_than_a_frame(start_desktop: Start, tmp_path: Path) -> None:
    source, digest = parts_desktop(start_desktop, 12)  # ~6 MB: past the 4 MiB frame
    state = source.client.export_state()
    assert state["format"] == "aotui.desktop"
    assert len(state["apps"][0]["data"]) == 12
    with pytest.raises(AotuiError) as whole:
        source.client.call("export")  # the one-reply form says to ask in chunks
    assert whole.value.code is ErrorCode.E_INVALID_CMD
    assert "chunked" in whole.value.message

    target, _ = parts_desktop(start_desktop, 0)
    assert target.client.import_state(state) == {"imported": ["app_0"], "skipped": []}
    assert f"Digest: {digest}" in target.client.snapshot()
    assert target.client.export_state()["apps"][0]["data"] == state["apps"][0]["data"]

    exported = aotui(source, "export", source.name)
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["apps"][0]["data"] == state["apps"][0]["data"]
    target.client.execute(PUT.format(name="extra", kb=1))
    state_file = tmp_path / "state.json"
    state_file.write_text(exported.stdout)
    imported = aotui(target, "import", target.name, "--file", str(state_file))
    assert imported.returncode == 0, imported.stderr
    assert f"Digest: {digest}" in target.client.snapshot()


def test_transfer_cache_bounds_per_client_bytes_and_age() -> None:
    from aotui.supervisor.interface.transfer_cache import (
        TransferCache,
        TransferKind,
        TransferLimits,
    )

    now = [0.0]
    cache = TransferCache(TransferLimits(total_bytes=100, ttl_s=10), clock=lambda: now[0])
    first = cache.open(TransferKind.EXPORT, "a", 60)
    cache.open(TransferKind.IMPORT, "a", 10)
    with pytest.raises(AotuiError) as per_client:
        cache.open(TransferKind.EXPORT, "a", 1)
    assert per_client.value.code is ErrorCode.E_RATE_LIMITED
    with pytest.raises(AotuiError) as too_many_bytes:
        cache.open(TransferKind.EXPORT, "b", 40)
    assert too_many_bytes.value.code is ErrorCode.E_RATE_LIMITED
    now[0] = 11.0
    with pytest.raises(AotuiError) as expired:
        cache.get(TransferKind.EXPORT, first)
    assert expired.value.code is ErrorCode.E_NOT_FOUND
    assert cache.open(TransferKind.EXPORT, "b", 500)  # alone, any size goes
