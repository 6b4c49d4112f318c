"""Per-operation tool names: valid for every LLM API, distinct, and each back to its operation.

The operation ids are an app's, so a compromised worker picks them; whatever it sends, the tool
list must stay usable (one bad name fails an agent's whole toolset) and a call must reach the
operation its tool was made for, never a namesake.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aotui.protocol.commands import ID_PATTERN
from aotui.supervisor.interface.operation_tools import (
    TOOL_NAME,
    OperationTool,
    operation_tools,
    tool_name,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Pieces of hostile ids: what tool names refuse, what the command language takes, lookalikes.
PIECES = st.sampled_from(
    [
        "a", "send", "_", "-", ".", ":", "/", " ", "x" * 63, "ｓｅｎｄ", "ﷺ", "é", "\u200b",
        "\x00", "..", "app_0__view_0__", "__", "mail_send_e069fd26", "🎉", "\U0001d5ba",
    ]
)  # fmt: skip
IDS = st.one_of(st.lists(PIECES, min_size=1, max_size=6).map("".join), st.text(max_size=80))


def structured(ops: list[list[str]]) -> dict[str, Any]:
    """A structured snapshot of one app whose view ``view_N`` offers ``ops[N]``."""
    views = [
        {
            "view": f"view_{n}",
            "name": f"View {n}",
            "operations": [
                {"id": op, "label": "L", "description": "", "args": {}} for op in view_ops
            ],
        }
        for n, view_ops in enumerate(ops)
    ]
    return {"apps": [{"app": "app_0", "name": "Hostile", "views": views}]}


def check(tools: list[OperationTool], ops: list[list[str]]) -> None:
    names = [tool.name for tool in tools]
    assert all(TOOL_NAME.fullmatch(name) for name in names), names
    assert len(set(names)) == len(names), names
    targets = [(tool.app, tool.view, tool.operation) for tool in tools]
    wanted = {
        ("app_0", f"view_{n}", op)
        for n, view_ops in enumerate(ops)
        for op in view_ops
        if ID_PATTERN.fullmatch(op)
    }
    assert sorted(targets) == sorted(wanted)  # every runnable operation once, nothing else


@FUZZ
@given(st.lists(st.lists(IDS, max_size=8), min_size=1, max_size=3))
def test_any_ids_give_valid_distinct_names_each_back_to_its_operation(
    ops: list[list[str]],
) -> None:
    tools = operation_tools(structured(ops))
    check(tools, ops)
    # The same snapshot names its tools the same way again.
    assert [t.name for t in operation_tools(structured(ops))] == [t.name for t in tools]


@FUZZ
@given(IDS)
def test_any_id_gives_a_valid_name(op: str) -> None:
    name = tool_name("app_12", "view_345", op)
    assert TOOL_NAME.fullmatch(name), name
    assert name == tool_name("app_12", "view_345", op)  # stable


def test_ids_equal_in_their_first_64_characters_stay_two_tools() -> None:
    ops = [["x" * 70 + "1", "x" * 70 + "2", "y" * 64, "y" * 65]]
    tools = operation_tools(structured(ops))
    check(tools, ops)
    assert len(tools) == 4


def test_mapped_ids_do_not_take_another_operation_s_name() -> None:
    # mail.send and mail:send both map to mail_send; the app also has mail_send itself, and an
    # operation named as mail.send's hashed form would be.
    hashed = tool_name("app_0", "view_0", "mail.send").removeprefix("app_0__view_0__")
    ops = [["mail.send", "mail:send", "mail_send", hashed, "mail.send"]]
    tools = operation_tools(structured(ops))
    check(tools, ops)
    by_name = {tool.name: tool.operation for tool in tools}
    assert by_name["app_0__view_0__mail_send"] == "mail_send"  # a valid id keeps its name
    assert len(by_name) == 4
    assert "operation mail.send" in next(t for t in tools if t.operation == "mail.send").description


def test_unnameable_ids_get_no_tool() -> None:
    ops = [["send message", "ｓｅｎｄ", "../etc/passwd", "", "ok"]]
    tools = operation_tools(structured(ops))
    assert [tool.name for tool in tools] == ["app_0__view_0__ok"]
