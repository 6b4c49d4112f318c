"""An error's ``outcome`` is the :class:`Outcome` enum, never a string matched by hand.

It travels as the plain string it names on every face (JSON-RPC, the control socket's msgpack),
and no module of the desktop spells it out again (issue 21: ``"not applied"`` was written in 17
places, each a chance to misspell what a client matches on).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError, ErrorCode, Outcome
from aotui.protocol.messages import ErrorReply

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[1]


def test_an_outcome_is_its_plain_string_on_every_face() -> None:
    error = AotuiError(ErrorCode.E_RATE_LIMITED, "busy", {"outcome": Outcome.NOT_APPLIED})
    assert json.loads(json.dumps(error.to_jsonrpc()))["data"]["outcome"] == "not applied"
    reply = ErrorReply(7, error.code.value, error.message, error.data)
    decoded = codec.decode(codec.encode(reply))
    assert isinstance(decoded, ErrorReply)
    assert decoded.data["outcome"] == "not applied"
    assert decoded.data["outcome"] == Outcome.NOT_APPLIED  # a client may compare with the enum


def test_no_module_spells_an_outcome_out() -> None:
    literal = re.compile(r"""["']outcome["']\s*:\s*["']""")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for room in ("protocol", "sandbox", "supervisor")
        for path in sorted((ROOT / room).rglob("*.py"))
        if "chaos" not in path.parts  # the chaos history's own outcome words (events.Outcome)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert found == [], f"use protocol.errors.Outcome: {found}"
