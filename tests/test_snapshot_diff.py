"""A folded diff is exact: the block's text is rebuilt byte for byte from its base and the diff.

Property tests over blocks made of the lines that tempt a diff to hide a change: numbered items
with refs that move, item numbers and ``eur[10]``-like text that change, lines that read as fold
lines. The real desktop's case is in tests/test_snapshot_budget.py.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aotui.supervisor.desktop.snapshot_diff import VERBATIM, apply_fold, fold_unchanged

#: Lines a block is made of; ``{n}`` an item number, ``{i}`` a ref index, ``{w}`` a word.
TEMPLATES = (
    "{n}. [m{w}](message:history[{i}])",
    "{n}. [n{w}](note:notes[{i}]) and [x](item:other[{i}])",
    "    - At: {w}",
    "{n}. price eur[{i}]",
    "- [{w} earlier messages](view:view_6)",
    "## Chat {w}",
    "",
    "… {n} lines …",
    "… {n} lines gone …",
    "… {n} lines (history[{i}]–[{n}] in T1 are [{i}]–[{n}] now) …",
    VERBATIM,
    "…{w}…",
)

line = st.builds(
    lambda template, n, i, w: template.format(n=n, i=i, w=w),
    st.sampled_from(TEMPLATES),
    st.integers(0, 12),
    st.integers(0, 12),
    st.sampled_from(["a", "b", "10", "9000"]),
)


def rebuilt(base: str, text: str) -> str:
    """What a reader of the diff gets: the fold if one is sent, else the text whole."""
    sent = fold_unchanged(base, text, "T1")
    if sent is None:
        assert not any(x.startswith("… ") and x.endswith(" …") for x in text.split("\n"))
        return apply_fold(base, text)
    return apply_fold(base, sent)


@st.composite
def edited(draw: st.DrawFn) -> tuple[str, str]:
    """A block and a later version of it: lines moved by a scroll, renumbered, edited, added
    and removed."""
    old = draw(st.lists(line, min_size=0, max_size=40))
    new = list(old)
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["scroll", "renumber", "edit", "insert", "delete"]))
        at = draw(st.integers(0, max(len(new) - 1, 0)))
        if kind == "scroll" and new:
            by = draw(st.integers(-3, 3))
            new = [_moved(x, by) for x in new]
        elif kind == "renumber" and new:
            new[at] = _moved(new[at], draw(st.integers(-2, 9000)))
        elif kind == "edit" and new:
            new[at] = draw(line)
        elif kind == "insert":
            new.insert(at, draw(line))
        elif kind == "delete" and new:
            del new[at]
    return "\n".join(old), "\n".join(new)


def _moved(text: str, by: int) -> str:
    """Every number in brackets and every leading item number of ``text`` moved by ``by``."""
    text = re.sub(r"\[(\d+)\]", lambda m: f"[{max(int(m[1]) + by, 0)}]", text)
    return re.sub(r"^(\s*)(\d+)\. ", lambda m: f"{m[1]}{max(int(m[2]) + by, 0)}. ", text)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edited())
def test_a_block_is_rebuilt_exactly_from_its_base_and_the_diff(pair: tuple[str, str]) -> None:
    base, text = pair
    assert rebuilt(base, text) == text


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(line, max_size=25), st.lists(line, max_size=25))
def test_any_two_blocks_rebuild_exactly(old: list[str], new: list[str]) -> None:
    base, text = "\n".join(old), "\n".join(new)
    assert rebuilt(base, text) == text


def test_a_changed_number_or_price_is_never_folded_away() -> None:
    """Reproduced: ``10.`` → ``9000.`` and ``eur[10]`` → ``eur[9000]`` in a 33-line view were
    folded into ``… 33 lines …``, the change hidden."""
    rows = [f"{i}. item {i} costs eur[{i}]" for i in range(1, 34)]
    changed = list(rows)
    changed[9] = "9000. item 10 costs eur[9000]"
    base, text = "\n".join(rows), "\n".join(changed)
    folded = fold_unchanged(base, text, "T12")
    assert folded is not None
    assert "9000. item 10 costs eur[9000]" in folded.split("\n")
    assert "… 33 lines" not in folded
    assert apply_fold(base, folded) == text


def test_a_scrolled_page_folds_saying_where_its_refs_are_now() -> None:
    items = [f"{i + 1}. [m{i}](message:history[{i}])\n    - At: {i}" for i in range(50)]
    scrolled = [f"{i}. [m{i}](message:history[{i - 1}])\n    - At: {i}" for i in range(1, 51)]
    base = "## Chat\n" + "\n".join(items) + "\n- [0 earlier messages](view:view_6)"
    text = "## Chat\n" + "\n".join(scrolled) + "\n- [1 earlier messages](view:view_6)"
    folded = fold_unchanged(base, text, "T3")
    assert folded is not None
    assert "… 98 lines (history[1]–[49] in T3 are [0]–[48] now) …" in folded
    assert "50. [m50](message:history[49])" in folded
    assert apply_fold(base, folded) == text
    assert len(folded) * 5 < len(text)


def test_a_line_that_reads_as_a_fold_line_is_marked_and_never_sent_whole() -> None:
    base = "a\nb\nc"
    text = "a\nb\nc\n… 2 lines …"
    folded = fold_unchanged(base, text, "T1")
    assert folded == f"… 3 lines …\n{VERBATIM}\n… 2 lines …"
    assert apply_fold(base, folded) == text
    # Not shorter, but sent folded: whole, its last line would read as a fold line.
    assert (
        fold_unchanged("x", "… 1 line gone …", "T1")
        == f"… 1 line gone …\n{VERBATIM}\n… 1 line gone …"
    )


@pytest.mark.parametrize(
    "sent", ["… 5 lines …", "… 1 line …\n… 1 line gone …\n… 2 lines …", f"… 3 lines …\n{VERBATIM}"]
)
def test_a_fold_that_does_not_cover_its_base_is_refused(sent: str) -> None:
    with pytest.raises(ValueError, match="fold"):
        apply_fold("a\nb\nc", sent)
