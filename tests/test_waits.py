"""Wait-for on the client, JSON-RPC and CLI; and the CLI's ping, capabilities, acquire, release."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from tests.conftest import RunningDesktop
from tests.rpc_peer import RpcPeer

Start = Callable[..., RunningDesktop]

BUMP = '<context app_id="app_0" view_id="view_0">execute bump</context>'


def later(desktop: RunningDesktop, text: str, delay_s: float = 0.3) -> threading.Thread:
    """Execute ``text`` on another client after ``delay_s``."""
    client = desktop.new_client()

    def run() -> None:
        time.sleep(delay_s)
        client.execute(text)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def aotui(desktop: RunningDesktop, *args: str, env: dict[str, str] | None = None):
    where = ["--desktop", desktop.name, "--socket", str(desktop.runtime)]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AOTUI_LEASE")}
    return subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", *args, *where],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**environment, **(env or {})},
    )


@pytest.fixture
def desktop(start_desktop: Start) -> RunningDesktop:
    running = start_desktop(["echo"])
    running.client.execute("<context>open --application app_0</context>")
    return running


@pytest.mark.timeout(60)
def test_until_a_signal_a_text_and_quiet(desktop: RunningDesktop) -> None:
    client = desktop.client
    later(desktop, BUMP)
    assert client.wait(reason="dom_mutation", timeout_ms=5000)["reason"] == "dom_mutation"

    later(desktop, BUMP)
    shown = client.wait(text="Calls: 2", app="app_0", timeout_ms=5000)
    assert (shown["until"], shown["app"]) == ("text", "app_0")
    assert shown["waited_ms"] >= 100  # it waited for the bump, it did not just answer

    later(desktop, BUMP)
    assert client.wait(text="Calls: 2", app="app_0", gone=True, timeout_ms=5000)["gone"]
    assert client.wait(text="Calls: 3", app="app_0", view="view_0", timeout_ms=100)

    started = time.monotonic()
    quiet = client.wait(quiet_ms=300, timeout_ms=5000)
    assert quiet["quiet_ms"] >= 300
    assert time.monotonic() - started < 3


@pytest.mark.timeout(60)
def test_a_wait_that_passes_its_timeout_is_e_timeout(desktop: RunningDesktop) -> None:
    started = time.monotonic()
    with pytest.raises(AotuiError) as caught:
        desktop.client.wait(reason="app_crashed", timeout_ms=300)
    assert caught.value.code is ErrorCode.E_TIMEOUT
    assert "app_crashed" in caught.value.message
    assert 0.25 < time.monotonic() - started < 5
    for bad in ({}, {"reason": "dom_mutation", "quiet_ms": 5}, {"text": "x"}, {"quiet_ms": -1}):
        with pytest.raises(AotuiError) as refused:
            desktop.client.wait(timeout_ms=100, **bad)
        assert refused.value.code is ErrorCode.E_INVALID_CMD, bad
    with pytest.raises(AotuiError) as unknown:
        desktop.client.wait(text="x", app="app_9", timeout_ms=100)
    assert unknown.value.code is ErrorCode.E_NOT_FOUND


@pytest.mark.timeout(60)
def test_wait_for_over_json_rpc(desktop: RunningDesktop) -> None:
    with RpcPeer(desktop.runtime / desktop.name / "rpc.sock") as peer:
        later(desktop, BUMP)
        result = peer.call("wait_for", text="Calls: 1", app="app_0", timeout_ms=5000)
        assert result["until"] == "text"
        error = peer.request("wait_for", reason="app_crashed", timeout_ms=100)["error"]
        assert (error["code"], error["data"]["code"]) == (-32010, "E_TIMEOUT")


@pytest.mark.timeout(90)
def test_cli_parity(desktop: RunningDesktop) -> None:
    pinged = aotui(desktop, "ping")
    assert pinged.returncode == 0
    assert str(desktop.process.pid) in pinged.stdout
    capabilities = json.loads(aotui(desktop, "capabilities", "--json").stdout)
    assert "wait_for" in capabilities["methods"]
    assert capabilities["formats"] == ["markdown", "json", "text"]

    later(desktop, BUMP)
    waited = aotui(desktop, "wait", "--text", "Calls: 1", "--app", "app_0", "--timeout-ms", "5000")
    assert waited.returncode == 0, waited.stderr
    timed_out = aotui(desktop, "wait", "--reason", "app_crashed", "--timeout-ms", "200")
    assert timed_out.returncode == 75
    assert "E_TIMEOUT" in timed_out.stderr

    token = aotui(desktop, "acquire", "shell-agent", "--quiet").stdout.strip()
    assert token
    assert desktop.client.status()["lease_owner"] == "shell-agent"
    locked = aotui(desktop, "exec", BUMP)
    assert locked.returncode == 75
    assert "E_LOCKED" in locked.stderr
    held = {"AOTUI_LEASE_TOKEN": token}
    assert aotui(desktop, "exec", "--quiet", BUMP, env=held).stdout == ""
    assert aotui(desktop, "acquire", "shell-agent", "--token", token).returncode == 0  # renews
    assert aotui(desktop, "release").returncode == 64  # which lease? it needs the token
    assert aotui(desktop, "release", env=held).returncode == 0
    assert desktop.client.status()["lease_owner"] is None
