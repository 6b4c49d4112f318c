"""Keep app text from forging the snapshot's structure (CONTRACT §4): one escape, one sanitizer.

The snapshot draws its boundaries with a handful of XML-like tags (``<desktop>``, ``<application>``,
``<application_info>``, ``<view>``, ``<context>``). Text that an app produces must never read as
one of them, or one app could close its own block and draw into another's, into the system views, or
into a command. :func:`escape_structural` turns the ``<`` of anything that could read as such a tag
into ``&lt;``.

What "could read as" means is decided by Unicode properties, not by a list of known tricks: the
reader is a language model, which reads ``<\\u202eview>``, ``＜ｖｉｅｗ＞`` or ``<\\U000e0041view>``
as the tag. Between ``<`` and the name (and between the name's letters) we skip every character
that is invisible or carries no letter of its own: general categories Cc, Cf, Zs, Zl, Zp, Mn, Me
and the Default_Ignorable_Code_Point property; ``<``, ``/`` and the letters match every character
whose NFKC form (case-folded) is that character, so compatibility forms count too.

It must run on the *final* text of a fragment, never per text node: ``&lt;<span></span>view>``
is harmless node by node and becomes ``<view>`` once the nodes are joined. The renderer applies it
in the worker; the supervisor applies :func:`sanitize` — the one sanitizer every app-originated
string passes before a snapshot or a reply — because a (possibly compromised) worker can send
anything. That is why this lives in ``protocol``.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Any

__all__ = [
    "DESKTOP_HINT",
    "STRUCTURAL_TAGS",
    "contains_structural",
    "escape_structural",
    "is_invisible",
    "sanitize",
    "sanitize_data",
]

#: The tag names the snapshot uses for its own structure.
STRUCTURAL_TAGS: tuple[str, ...] = ("desktop", "application", "application_info", "view", "context")

#: Default_Ignorable_Code_Point, from Unicode's DerivedCoreProperties.txt (15.1). Python's
#: unicodedata has no property lookup, so the ranges are written out; they have been stable since
#: Unicode 6 (only the reserved parts of the ranges grow into assigned characters).
DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),  # soft hyphen
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x061C, 0x061C),  # Arabic letter mark
    (0x115F, 0x1160),  # Hangul choseong/jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian free variation selectors, vowel separator
    (0x200B, 0x200F),  # zero-width space, joiners, LRM, RLM
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x206F),  # word joiner, invisible operators, bidi isolates, deprecated formats
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors
    (0xFEFF, 0xFEFF),  # zero-width no-break space (BOM)
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF0, 0xFFF8),  # reserved specials
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol format controls
    (0xE0000, 0xE0FFF),  # tag characters, variation selectors supplement, reserved
)

#: General categories of characters that show nothing a reader could take for a letter.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp", "Mn", "Me"})
#: …of those, the ones stripped from app text (spaces, line breaks and accents are text).
_STRIPPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})

# Compatibility forms live in the BMP and the SMP (fullwidth, small forms, mathematical
# alphanumerics, enclosed letters); the tables cover those planes plus DEFAULT_IGNORABLE.
_SCAN_LIMIT = 0x20000
#: Longest run of name characters looked at after a ``<`` (the longest tag name is 16).
_NAME_RUN = 64


def is_invisible(char: str) -> bool:
    """Whether ``char`` is a control, format, space, combining or default-ignorable character."""
    code = ord(char)
    return unicodedata.category(char) in _INVISIBLE_CATEGORIES or any(
        low <= code <= high for low, high in DEFAULT_IGNORABLE
    )


def _ranges(codes: list[int]) -> str:
    """A regex character class body for code points."""
    codes = sorted(set(codes))
    parts: list[str] = []
    index = 0
    while index < len(codes):
        start = end = codes[index]
        while index + 1 < len(codes) and codes[index + 1] == end + 1:
            index += 1
            end = codes[index]
        parts.append(re.escape(chr(start)) + ("" if start == end else "-" + re.escape(chr(end))))
        index += 1
    return "".join(parts)


#: The regex sources of the classes: ``<``, an opening that may name a tag, what is stripped.
_Patterns = tuple[str, str, str]


def _patterns(limit: int) -> _Patterns:
    """Derive the classes from Unicode properties, for code points below ``limit``."""
    letters = set("</" + "".join(STRUCTURAL_TAGS))
    ignorable = {code for low, high in DEFAULT_IGNORABLE for code in range(low, high + 1)}
    if limit <= 0x80:
        ignorable.clear()
    joiners: list[int] = []  # invisible, and not a space: may sit inside a name
    spaces: list[int] = []
    strip: list[int] = []
    folds: dict[str, list[int]] = {char: [] for char in letters}
    category, decomposition, normalize = (
        unicodedata.category,
        unicodedata.decomposition,
        unicodedata.normalize,
    )
    for code in range(limit):
        char = chr(code)
        kind = category(char)
        if kind in _INVISIBLE_CATEGORIES or code in ignorable:
            (spaces if char.isspace() else joiners).append(code)
            if kind in _STRIPPED_CATEGORIES or code in ignorable:
                strip.append(code)
            continue
        # A character without a decomposition is its own NFKC form.
        folded = (normalize("NFKC", char) if decomposition(char) else char).casefold()
        if folded in letters:
            folds[folded].append(code)
    beyond = [code for code in ignorable if code >= limit]
    joiners += beyond
    strip += beyond
    joiner = f"[{_ranges(joiners)}]"
    skip = f"(?:{joiner}|[{_ranges(spaces)}{_ranges(folds['/'])}])"
    letter = f"[{_ranges([c for ch in letters - set('</') for c in folds[ch]])}]"
    lt = f"[{_ranges(folds['<'])}]"
    # "<", anything invisible or a slash, then a run of name characters (letters may hide
    # invisible joiners between them): whether the run names a tag is decided by _is_tag.
    opening = f"{lt}{skip}*((?:\\w|{letter}|{joiner}){{1,{_NAME_RUN}}})"
    return lt, opening, f"[{_ranges(strip)}]"


class _Classes:
    """The character classes of the escape and the sanitizer, for one repertoire, compiled."""

    def __init__(self, patterns: _Patterns) -> None:
        self.less_than, self.opening, self.strip = map(re.compile, patterns)


@functools.cache
def _classes(ascii_only: bool) -> _Classes:
    if ascii_only:
        return _Classes(_patterns(0x80))
    # Deriving the full repertoire walks 128 K code points (~35-65 ms, in every worker that first
    # meets non-ASCII text); the result is shipped precomputed for this Python's Unicode version.
    from aotui.protocol import _unicode_classes as shipped

    if unicodedata.unidata_version == shipped.UNIDATA_VERSION:
        return _Classes((shipped.LESS_THAN, shipped.OPENING, shipped.STRIP))
    return _Classes(_patterns(_SCAN_LIMIT))


def shipped_classes_source() -> str:
    """The text of ``protocol/_unicode_classes.py`` for this Python's Unicode version."""
    less_than, opening, strip = _patterns(_SCAN_LIMIT)
    return (
        '"""Generated by ``structure.shipped_classes_source()``: the full-repertoire classes of\n'
        "protocol/structure.py, precomputed (tests/test_unicode_classes.py checks and rewrites it\n"
        'with AOTUI_UPDATE_GOLDEN=1)."""\n\n'
        f"UNIDATA_VERSION = {unicodedata.unidata_version!a}\n"
        f"LESS_THAN = {less_than!a}\n"
        f"OPENING = {opening!a}\n"
        f"STRIP = {strip!a}\n"
    )


_TAGS = frozenset(STRUCTURAL_TAGS)


def _is_tag(run: str) -> bool:
    """Whether a run of name characters reads as a tag name: all of it with the invisible
    characters dropped (``v\u200biew``), or any part that ends at one (``view\u200bx``)."""
    if run.isascii() and run.isprintable():
        return run.lower() in _TAGS
    visible: list[str] = []
    for char in run:
        if not is_invisible(char):
            visible.append(char)
        elif _folded(visible) in _TAGS:
            return True
    return _folded(visible) in _TAGS


def _folded(chars: list[str]) -> str:
    return unicodedata.normalize("NFKC", "".join(chars)).casefold()


def _escape_opening(match: re.Match[str]) -> str:
    return "&lt;" + match.group()[1:] if _is_tag(match.group(1)) else match.group()


#: A command the desktop itself suggests, written whole: ``<context>open --application app_0
#: --fresh</context>`` (words, ``--options`` and plain values; nothing that could nest a tag).
DESKTOP_HINT = re.compile(r"<context>[a-z_]+(?: -{1,2}[a-z_]+(?: [A-Za-z0-9_.@-]+)?)*</context>")


def escape_structural(text: str, *, hints: bool = False) -> str:
    """Replace the ``<`` (or its compatibility form) of anything that could read as a structural
    tag with ``&lt;``.

    ``hints=True`` keeps the :data:`DESKTOP_HINT` commands as written: for text the desktop
    composed, whose app-originated parts were sanitized when it was composed (so no app's text
    can still hold a ``<``-tag of any kind, hint-shaped or not).
    """
    if hints and "<context>" in text:
        kept, start = [], 0
        for match in DESKTOP_HINT.finditer(text):
            kept += [escape_structural(text[start : match.start()]), match.group()]
            start = match.end()
        return "".join([*kept, escape_structural(text[start:])])
    classes = _classes(text.isascii())
    if classes.less_than.search(text) is None:
        return text
    return classes.opening.sub(_escape_opening, text)


def contains_structural(text: str) -> bool:
    """Whether ``text`` holds anything that could read as a structural tag."""
    classes = _classes(text.isascii())
    return any(_is_tag(match.group(1)) for match in classes.opening.finditer(text))


#: Kept in multi-line text: line breaks and tabs (C0 controls otherwise), the zero-width joiner
#: and the emoji variation selectors that emoji sequences need.
_KEEP_IN_TEXT = frozenset("\n\t\u200d\ufe0e\ufe0f")
_LINE_BREAKS = re.compile(r"\r\n|[\r\v\f\x1c-\x1e\x85\u2028\u2029]")


@functools.cache
def _ascii_line_tables() -> tuple[bytes, bytes]:
    """``bytes.translate`` arguments: line breaks to ``\\n``, what the strip class drops deleted."""
    breaks = bytes(b for b in range(0x80) if b != 0x0D and _LINE_BREAKS.fullmatch(chr(b)))
    strip = _classes(True).strip
    drop = bytes(
        b
        for b in range(0x80)
        if strip.fullmatch(chr(b)) and chr(b) not in _KEEP_IN_TEXT and b not in breaks
    )
    return bytes.maketrans(breaks, b"\n" * len(breaks)), drop


def _ascii_lines(value: str) -> str:
    """What ``sanitize(..., lines=True)`` makes of ASCII text before the cut and the escape."""
    if "\r" in value:  # CRLF first, as the line-break pattern takes it
        value = value.replace("\r\n", "\n").replace("\r", "\n")
    table, drop = _ascii_line_tables()
    return value.encode("ascii").translate(table, drop).decode("ascii")


def sanitize(
    text: object, *, lines: bool = False, limit: int | None = 500, hints: bool = False
) -> str:
    """App-originated text made safe to show the agent, anywhere in a snapshot or a reply.

    Controls, format characters (bidi overrides, tag characters, zero-width characters) and
    default-ignorables are dropped; with ``lines=False`` every line break and run of whitespace
    becomes one space (an app cannot draw lines of its own into a list, a log, a tree); the text
    is cut to ``limit`` characters (``…`` marks the cut); structural tags are escaped last
    (``hints=True``: but for the desktop's own command hints, see :func:`escape_structural`).
    """
    value = text if isinstance(text, str) else str(text)
    strip = _classes(value.isascii()).strip
    if lines and value.isascii():  # as the branch below, in C: a 900 KB view in 1 ms, not 11
        value = _ascii_lines(value)
    elif lines:
        value = _LINE_BREAKS.sub("\n", value)
        if strip.search(value) is not None:
            value = strip.sub(lambda m: m.group() if m.group() in _KEEP_IN_TEXT else "", value)
    else:
        if strip.search(value) is not None:
            value = strip.sub(lambda m: " " if m.group() in "\t\n" else "", value)
        value = " ".join(value.split())
    if limit is not None and len(value) > limit:
        value = value[: max(limit - 1, 0)] + "…"
    return escape_structural(value, hints=hints)


def sanitize_data(value: Any) -> Any:
    """App-originated data (an operation's result, a recorded ``data-value``) with every string
    in it, keys included, passed through :func:`sanitize` (line breaks kept in values); other
    values as they are.

    Copied with an explicit stack: the app chose the nesting (the codec bounds it anyway).
    """
    if isinstance(value, str):
        return sanitize(value, lines=True, limit=None)
    if not isinstance(value, dict | list):
        return value
    root: Any = [] if isinstance(value, list) else {}
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        source, target = stack.pop()
        items = enumerate(source) if isinstance(source, list) else source.items()
        for key, item in items:
            if isinstance(key, str):
                key = sanitize(key, limit=200)
            if isinstance(item, str):
                item = sanitize(item, lines=True, limit=None)
            elif isinstance(item, dict | list):
                child: Any = [] if isinstance(item, list) else {}
                stack.append((item, child))  # filled in place, later
                item = child
            if isinstance(target, list):
                target.append(item)
            else:
                target[key] = item
    return root
