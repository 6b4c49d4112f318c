"""A supervisor restarted after a crash serves sooner for what it does not import or wait for.

Its start is on the path of every recovery (``bench/bench_recovery.py``): modules only some apps
or some requests need are imported when first needed, and a client reaches a restarted desktop
within ``RECONNECT_MS`` rather than ZeroMQ's default 100 ms.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest
import zmq

from aotui.supervisor.interface.client import RECONNECT_MS
from tests.conftest import RunningDesktop

Start = Callable[..., RunningDesktop]

#: What the supervisor's start must not import, with what needs it.
NOT_AT_START = {
    "http.client": "brokered HTTP (supervisor/broker/http.py), at an app's first request",
    "email": "http.client's header parsing",
    "aotui.supervisor.broker.http": "brokered HTTP, at an app's first request",
    "aotui.sandbox.confine": "the workers, which confine themselves (the supervisor names layers)",
    "aotui.sandbox.seccomp": "the workers",
    "aotui.sandbox.landlock": "the workers",
}


@pytest.mark.timeout(60)
def test_the_supervisor_imports_neither_the_broker_nor_the_confinement() -> None:
    code = (
        "import json, sys\n"
        "import aotui.supervisor.interface.cli, aotui.supervisor.config\n"
        "import aotui.supervisor.interface.serve\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=50
        ).stdout
    )
    # tests/test_http_e2e.py makes brokered requests through a desktop started this way.
    wrong = {name: why for name, why in NOT_AT_START.items() if name in loaded}
    assert not wrong, f"imported at the supervisor's start, though only needed for: {wrong}"


@pytest.mark.timeout(60)
def test_a_client_tries_a_gone_desktop_again_within_its_reconnect_pause(
    start_desktop: Start,
) -> None:
    desktop = start_desktop(["echo"])
    sock = desktop.client._socket()
    assert sock.getsockopt(zmq.RECONNECT_IVL) == RECONNECT_MS
    assert RECONNECT_MS <= 20
