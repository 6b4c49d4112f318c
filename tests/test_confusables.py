"""The TR 39 skeleton behind app-name uniqueness, and the table it is generated from."""

from __future__ import annotations

import unicodedata

import pytest

from aotui.supervisor import _confusables
from aotui.supervisor.confusables import skeleton, table_source

SAMPLE = """\ufeff# confusables.txt
# Version: 99.0.0
#
0421 ;\t0043 ;\tMA\t# ( С → C ) CYRILLIC CAPITAL LETTER ES → LATIN CAPITAL LETTER C\t#

006D ;\t0072 006E ;\tMA\t# ( m → rn ) LATIN SMALL LETTER M → LATIN SMALL LETTER R, N\t#
2028 ;\t0020 ;\tMA\t#* (  →   ) LINE SEPARATOR → SPACE\t#
"""


def test_the_table_is_generated_from_a_confusables_file() -> None:
    source = table_source(SAMPLE)
    namespace: dict[str, object] = {}
    exec(source, namespace)
    assert namespace["UNICODE_VERSION"] == "99.0.0"
    # Characters a name may not hold (here a line separator) are left out.
    assert namespace["TABLE"] == {0x0421: "C", 0x006D: "rn"}
    with pytest.raises(ValueError, match=r"confusables\.txt"):
        table_source("# nothing here\n")


def test_the_shipped_table_is_unicodes_current_data() -> None:
    assert _confusables.UNICODE_VERSION == "17.0.0"
    assert len(_confusables.SOURCE_SHA256) == 64
    assert len(_confusables.TABLE) > 6000
    table = _confusables.TABLE
    assert (table[0x0421], table[0x0456], table[0x13DF], table[0x006D]) == ("C", "i", "C", "rn")
    # Prototypes are never mapped again: one pass of the table is the whole mapping.
    assert not {ord(c) for target in table.values() for c in target} & table.keys()
    assert all(unicodedata.category(chr(code)) not in ("Cc", "Cf", "Zl", "Zp") for code in table)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ChatWithUser", "ChatWithUser"),
        ("\u0421hatW\u0456thUser", "ChatWithUser"),
        ("\u13dfhatWithUser", "ChatWithUser"),
        ("I", "l"),
        ("mail", "rnail"),
        ("\u00e9", "e\u0301"),  # NFD: the accent stays a mark of its own
    ],
)
def test_skeletons(text: str, expected: str) -> None:
    assert skeleton(text) == expected
    assert skeleton(skeleton(text)) == skeleton(text)
