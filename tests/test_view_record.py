"""One record type for a rendered view on the supervisor's side: :class:`ViewRecord`.

The wire's ``ViewFragment`` is converted once, by the view tree, and everything after it (snapshot
parts, ref tables, waits, chaos faults) reads that one record: its Markdown sanitized with links
resolved, the bytes it is charged, its refs and operations. The unit tests drive a real
:class:`ViewTree`; one reads the supervisor's source so no other module handles fragments again.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from aotui.protocol.errors import AotuiError
from aotui.protocol.messages import ChildLink, FragmentUpdate, OperationSpec, ViewFragment
from aotui.supervisor.desktop.view_tree import DIALOG_LINE, MAX_FRAGMENTS, ViewRecord, ViewTree

SUPERVISOR = Path(__file__).resolve().parent.parent / "supervisor"

pytestmark = pytest.mark.timeout(30)


def _fragment(
    key: str, parent: str | None, markdown: str, links: list[str], modal: bool = False
) -> ViewFragment:
    return ViewFragment(
        key,
        f"{key}\x07name",
        parent,
        True,
        markdown,
        {"items[0]": {"id": 1}},
        {"items[0]": "k1"},
        {"items[0]": "item"},
        [OperationSpec("pick", "Pick", "", {"item": "item"})],
        [ChildLink(k, k.title(), "") for k in links],
        modal,
    )


def test_an_update_becomes_records_with_resolved_markdown_and_their_size() -> None:
    tree = ViewTree()
    tree.apply(FragmentUpdate([_fragment("root", None, "see [c](view:@child)", ["child"])]), 900)
    view = tree.rendered["root"]
    assert isinstance(view, ViewRecord)
    assert view.markdown == "see [c](view:view_1)"  # links resolved once, on arrival
    assert "\x07" not in view.name  # sanitized
    assert view.size == 900  # charged its frame (at least its Markdown)
    assert (view.refs, view.keys, view.ref_types) == (
        {"items[0]": {"id": 1}},
        {"items[0]": "k1"},
        {"items[0]": "item"},
    )
    assert [op.op_id for op in view.operations] == ["pick"]
    assert tree.shown() == [("view_0", view)]  # what a snapshot shows is the record itself
    assert tree.mounted_view("view_0") is view
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.markdown = "changed in place"  # type: ignore[misc]


def test_an_open_dialog_is_shown_under_its_line_and_alone() -> None:
    tree = ViewTree()
    tree.apply(FragmentUpdate([_fragment("root", None, "[d](view:@dialog)", ["dialog"])]))
    tree.apply(FragmentUpdate([_fragment("dialog", "root", "Sure?", [], modal=True)]))
    [(view_id, view)] = tree.shown()
    assert view_id == "view_1"
    assert view.markdown == DIALOG_LINE.format("view_1") + "Sure?"
    assert tree.rendered["dialog"].markdown == "Sure?"  # the cached record is left as it came


def test_an_update_past_a_budget_is_refused_whole() -> None:
    tree = ViewTree()
    tree.apply(FragmentUpdate([_fragment("root", None, "before", [])]))
    kept = dict(tree.rendered)
    too_many = [_fragment("root", None, "after", [])] + [
        _fragment(f"k{i}", None, "x", []) for i in range(MAX_FRAGMENTS)
    ]
    with pytest.raises(AotuiError, match="fragments, over"):
        tree.apply(FragmentUpdate(too_many))
    assert tree.rendered == kept


def test_a_substituted_view_is_shown_until_the_worker_renders_it_again() -> None:
    tree = ViewTree()
    tree.apply(FragmentUpdate([_fragment("root", None, "true", [])]))
    lie = dataclasses.replace(tree.rendered["root"], markdown="a lie")
    tree.substitute(lie)
    assert tree.shown() == [("view_0", lie)]
    tree.apply(FragmentUpdate([_fragment("root", None, "true again", [])]))
    assert tree.shown()[0][1].markdown == "true again"


def test_only_the_view_tree_handles_wire_fragments() -> None:
    handling = sorted(
        str(path.relative_to(SUPERVISOR.parent))
        for path in SUPERVISOR.rglob("*.py")
        if re.search(r"\bViewFragment\b", path.read_text())
    )
    assert handling == ["supervisor/desktop/view_tree.py"]
