"""Keep app text from forging the snapshot's structural tags (CONTRACT §4).

The snapshot draws its boundaries with a handful of XML-like tags (``<desktop>``, ``<application>``,
``<application_info>``, ``<view>``, ``<context>``). Text that an app produces must never read as
one of them, or one app could close its own block and draw into another's, into the system views, or
into a command. :func:`escape_structural` turns the ``<`` of anything that could read as such a tag
into ``&lt;``.

It must run on the *final* text of a fragment, never per text node: ``&lt;<span></span>view>``
is harmless node by node and becomes ``<view>`` once the nodes are joined. The renderer applies it
in the worker; the supervisor applies it again to every fragment a (possibly compromised) worker
sends, which is why it lives here in ``protocol``.
"""

from __future__ import annotations

import re

__all__ = ["STRUCTURAL_TAGS", "contains_structural", "escape_structural"]

#: The tag names the snapshot uses for its own structure.
STRUCTURAL_TAGS: tuple[str, ...] = ("desktop", "application", "application_info", "view", "context")

# Between "<" and the name we accept more than a strict parser would: whitespace, any number of
# slashes, and invisible format characters (zero-width space/joiners, word joiner, BOM, soft
# hyphen), because the reader is a language model that may well read "< /view>" or "<\u200bview>"
# as the tag. Longest names first so "application_info" is not cut short at "application".
_NAMES = "|".join(sorted(STRUCTURAL_TAGS, key=len, reverse=True))
_STRUCTURAL = re.compile(
    r"<(?=[\s/\u00ad\u180e\u200b-\u200f\u2060-\u2064\ufeff]*(?:" + _NAMES + r")\b)",
    re.IGNORECASE,
)


def escape_structural(text: str) -> str:
    """Replace the ``<`` of anything that could read as a structural tag with ``&lt;``."""
    if "<" not in text:
        return text
    return _STRUCTURAL.sub("&lt;", text)


def contains_structural(text: str) -> bool:
    """Whether ``text`` holds anything that could read as a structural tag."""
    return "<" in text and _STRUCTURAL.search(text) is not None
