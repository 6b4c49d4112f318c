"""The full-repertoire classes ship precomputed: the same as deriving them, without the cost.

Deriving them walks 128 K code points (35-65 ms); every worker paid it the first time it met
non-ASCII text (an ellipsis in a Notes preview), on its first render after a restart.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from aotui.protocol import _unicode_classes as shipped
from aotui.protocol import structure

SHIPPED = Path(structure.__file__).with_name("_unicode_classes.py")


@pytest.fixture
def fresh_classes() -> Iterator[None]:
    structure._classes.cache_clear()
    yield
    structure._classes.cache_clear()


def test_the_shipped_classes_are_what_this_python_derives() -> None:
    if unicodedata.unidata_version != shipped.UNIDATA_VERSION:
        pytest.skip(f"Unicode {unicodedata.unidata_version}: this Python derives its own")
    expected = structure.shipped_classes_source()
    if os.environ.get("AOTUI_UPDATE_GOLDEN") == "1":
        SHIPPED.write_text(expected)
    assert SHIPPED.read_text() == expected, (
        "protocol/_unicode_classes.py is stale: rerun with AOTUI_UPDATE_GOLDEN=1"
    )


def test_the_full_repertoire_uses_the_shipped_patterns(fresh_classes: None) -> None:
    classes = structure._classes(False)
    if unicodedata.unidata_version == shipped.UNIDATA_VERSION:
        assert classes.opening.pattern == shipped.OPENING
        assert classes.strip.pattern == shipped.STRIP
    assert structure.escape_structural("\uff1c\uff56\uff49\uff45\uff57\uff1e") == (
        "&lt;\uff56\uff49\uff45\uff57\uff1e"  # fullwidth <view>: still a tag to the escape
    )
    assert structure.sanitize("a\u202eb\u2026", limit=None) == "ab\u2026"


def test_another_unicode_version_derives_its_own(
    fresh_classes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shipped, "UNIDATA_VERSION", "0.0.0")
    monkeypatch.setattr(shipped, "OPENING", "never used")
    classes = structure._classes(False)
    assert classes.opening.pattern == structure._patterns(structure._SCAN_LIMIT)[1]
    assert structure.escape_structural("<\u200bview>") == "&lt;\u200bview>"
