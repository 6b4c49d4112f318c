"""Seed 004's controls on the desktop: dialogs, confirmation, the in-flight limit and policies.

End to end through the ``aotui`` CLI (real supervisor, real workers) and through ``aotui mcp``
driven by the MCP SDK's client; the markup, SDK and config parts also directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.sandbox.render import render_view
from aotui.sandbox.sdk import App, View, operation
from aotui.supervisor.config import load_config
from aotui.supervisor.desktop.controls import AppPolicy

# --- markup and SDK ---------------------------------------------------------------------------


def test_markup_marks_a_dialog_and_an_operation_that_asks_first() -> None:
    rendered = render_view(
        '<section view="Delete?" modal><p>Sure?</p>'
        '<button operation="delete" confirm>Delete</button>'
        '<button operation="keep">Keep</button></section>'
    )
    assert rendered.modal
    confirm = {op.op_id: op.confirm for op in rendered.operations}
    assert confirm == {"delete": True, "keep": False}
    assert "Asks the user first" in rendered.markdown.split("[Keep]")[0]
    plain = render_view('<section view="Plain"><button operation="go">Go</button></section>')
    assert not plain.modal
    assert not plain.operations[0].confirm


def test_a_flag_written_false_is_refused_not_read_as_true() -> None:
    with pytest.raises(AotuiError) as refused:
        render_view(
            '<section view="V"><button operation="go" confirm="false">Go</button></section>'
        )
    assert refused.value.code is ErrorCode.E_APP_ERROR
    assert 'confirm="false"' in refused.value.message
    with pytest.raises(AotuiError):
        render_view('<section view="V" modal="no"><p>x</p></section>')


class _Asks(View["_AsksApp"]):
    template = '<section view="Asks">{{ view.buttons() }}</section>'

    @operation(confirm=True)
    def wipe(self) -> None:
        """Wipe it."""

    @operation
    def look(self) -> None:
        """Look at it."""


class _AsksApp(App):
    def roots(self) -> list[View[Any]]:
        return []


def test_the_sdk_derives_confirm_into_the_markup() -> None:
    view = _Asks("asks")
    view.attach(_AsksApp())
    rendered = render_view(view.render())
    assert {op.op_id: op.confirm for op in rendered.operations} == {"wipe": True, "look": False}
    assert 'confirm="confirm"' in str(view.button("wipe"))


# --- config -----------------------------------------------------------------------------------


def test_policy_config_is_parsed_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "desktop.toml"
    path.write_text(
        'max_in_flight = 3\n[policy."com.example.notes"]\ndeny = ["delete_*"]\n'
        'confirm = ["edit_note"]\n[policy."*"]\nallow = ["read"]\n'
    )
    config = load_config(path)
    assert config.max_in_flight == 3
    assert config.policy == (
        AppPolicy("com.example.notes", None, ("delete_*",), ("edit_note",)),
        AppPolicy("*", ("read",), (), ()),
    )
    assert load_config().max_in_flight == 2  # seed 004's default
    for bad, named in (
        ('[policy."a.b"]\nforbid = ["x"]\n', "forbid"),
        ('[policy."a.b"]\ndeny = "x"\n', 'policy."a.b".deny'),
        ("policy = 3\n", "policy"),
        ("max_in_flight = 0\n", "max_in_flight"),
    ):
        path.write_text(bad)
        with pytest.raises(AotuiError) as refused:
            load_config(path)
        assert refused.value.code is ErrorCode.E_INVALID_CMD
        assert named in refused.value.message
