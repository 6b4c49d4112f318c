"""The sandbox layers are one closed set: what a Hello may name and what doctor lists."""

from __future__ import annotations

import pytest

from aotui.protocol.messages import SandboxLayer
from aotui.sandbox.confine import required_layers
from aotui.sandbox.probe import LAYERS

pytestmark = pytest.mark.timeout(30)


def test_doctor_lists_every_sandbox_layer_in_the_order_applied() -> None:
    """``aotui doctor``'s layers are the wire's closed set, as plain strings."""
    assert LAYERS[0] == "fd-close"
    # The last a worker applies; then a web app's browser starts, with its own sandbox or not.
    assert LAYERS[-2:] == ("seccomp", "chromium-sandbox")
    assert all(type(name) is str for name in LAYERS)
    assert list(LAYERS) == [layer.value for layer in SandboxLayer]
    for root in (True, False):
        assert required_layers(root) <= set(LAYERS)
