"""A conservative token estimate without a tokenizer (budgets must not need one at runtime).

BPE tokenizers (cl100k, o200k) spend about one token on four letters of English, but one on every
one to three digits and on most punctuation; outside ASCII a character costs at most its UTF-8
bytes (byte-level BPE), and rare ones cost that much. The estimate charges each ASCII class at or
above its worst rate in UI text, and each other character its UTF-8 bytes, so a snapshot kept
under ``max_tokens`` by it stays under in real tokens (``bench/bench_tokens.py`` and
``tests/test_snapshot_budget.py`` check it against cl100k and o200k). Random strings (hashes,
base64) cost more per letter than text does and are the known exception.
"""

from __future__ import annotations

__all__ = ["estimate_tokens"]

#: Tokens charged per character, by class (measured worst cases, rounded up).
_LETTER = 0.25
_DIGIT = 0.7
_SPACE = 0.05
_OTHER = 0.9


_LETTERS = bytes(range(ord("A"), ord("Z") + 1)) + bytes(range(ord("a"), ord("z") + 1))
_DIGITS = b"0123456789"
_WIDE = bytes(range(0x80, 0x100))


def estimate_tokens(text: str) -> int:
    """An upper estimate of ``text``'s BPE tokens (counted at C speed: snapshots are MBs)."""
    data = text.encode("utf-8", "surrogatepass")
    size = len(data)
    letters = size - len(data.translate(None, _LETTERS))
    digits = size - len(data.translate(None, _DIGITS))
    spaces = data.count(b" ")
    # Outside ASCII: a token per UTF-8 byte at most.
    wide = size - len(data.translate(None, _WIDE))
    other = size - letters - digits - spaces - wide
    total = letters * _LETTER + digits * _DIGIT + spaces * _SPACE + other * _OTHER
    return int(total + wide) + 1
