"""The per-app data budget and the chunks a large restore is sent in (no processes)."""

from __future__ import annotations

import pytest

from aotui.protocol import codec
from aotui.protocol.codec import MAX_FRAME_BYTES
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import RestoreChunk, Start
from aotui.supervisor.store.budget import DataBudget
from aotui.supervisor.workers.restore import restore_messages


def test_budget_refuses_growth_past_it_and_admits_what_does_not_grow() -> None:
    budget = DataBudget(limit=10_000)
    stored = {"a": "x" * 4000, "b": "y" * 4000}
    assert 8000 < budget.admit("app_0", "Parts", stored, {}) < 8100
    with pytest.raises(AotuiError) as over:
        budget.admit("app_0", "Parts", stored, {"c": "z" * 3000})
    assert over.value.code is ErrorCode.E_APP_ERROR
    assert over.value.data["outcome"] == "not applied"
    assert "app_0 (Parts)" in over.value.message
    assert budget.admit("app_0", "Parts", stored, {"a": None, "c": "z" * 3000}) < 8000
    stored = {"a": "x" * 6000, "b": "y" * 6000}  # over already (a smaller budget, say)
    budget.admit("app_0", "Parts", stored, {"b": "y" * 5000})  # shrinking always goes


def test_budget_measures_what_changed_not_what_is_stored(monkeypatch: pytest.MonkeyPatch) -> None:
    from aotui.supervisor.store import budget as budget_module
    from aotui.supervisor.workers.restore import part_bytes

    measured: list[str] = []

    def counting(part: str, value: object) -> int:
        measured.append(part)
        return part_bytes(part, value)

    monkeypatch.setattr(budget_module, "part_bytes", counting)
    budget = DataBudget()
    stored: dict[str, object] = {f"n{i}": f"note {i}" for i in range(10_000)}
    budget.admit("app_0", "Notes", stored, {})
    assert len(measured) == 10_000  # first sight of the data: measured in full, once
    for step in range(50):  # what the desktop does: admit, then adopt the new dict
        changes: dict[str, object | None] = {f"new{step}": "x" * step, f"n{step}": None}
        measured.clear()
        total = budget.admit("app_0", "Notes", stored, changes)
        assert sorted(measured) == sorted(p for p, v in changes.items() if v is not None)
        stored = {k: v for k, v in {**stored, **changes}.items() if v is not None}
        budget.adopted("app_0", stored)
    assert total == sum(part_bytes(p, v) for p, v in stored.items())
    # Data replaced some other way (an import, a restore) is a new dict: measured anew.
    measured.clear()
    replaced = dict(list(stored.items())[:10])
    assert budget.admit("app_0", "Notes", replaced, {}) == sum(
        part_bytes(p, v) for p, v in replaced.items()
    )
    assert len(measured) == 10
    # A change admitted but never adopted (its write failed) leaves the total as it was.
    before = budget.admit("app_0", "Notes", replaced, {})
    budget.admit("app_0", "Notes", replaced, {"big": "y" * 5000})
    assert budget.admit("app_0", "Notes", replaced, {}) == before


def test_large_keyed_data_is_sent_in_chunks_that_fit_a_frame() -> None:
    data = {f"p{i}": "v" * (500 << 10) for i in range(12)}
    messages = restore_messages("app_0", data, ["view"])
    start, chunks = messages[0], messages[1:]
    assert isinstance(start, Start)
    assert start.restore is None
    assert start.chunks == len(chunks) > 1
    assert all(isinstance(chunk, RestoreChunk) for chunk in chunks)
    assert all(len(codec.encode(message)) <= MAX_FRAME_BYTES for message in messages)
    joined: dict[str, str] = {}
    for chunk in chunks:
        assert isinstance(chunk, RestoreChunk)
        joined.update(chunk.parts)
    assert joined == data
    small = restore_messages("app_0", {"a": 1}, [])
    assert small == [Start("app_0", {"a": 1}, [])]
    assert restore_messages("app_0", [1, 2], []) == [Start("app_0", [1, 2], [])]
