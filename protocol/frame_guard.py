"""The frame guard: refuse msgpack bombs before msgpack allocates for them.

msgpack's C unpacker allocates an array's full claimed length before reading it, so a few KB
of nested array headers each claiming 100,000 items cost ~80 MB and ~80 ms per frame.
:func:`claims_fit` is a cheap check (µs per 100 KB) that sends any frame whose array headers
could claim more items than it has bytes to :func:`scan`, a header-only walk that allocates
nothing. Imports nothing but the standard library; :mod:`protocol.codec` turns
:class:`FrameRefused` into its typed error.
"""

from __future__ import annotations

__all__ = ["FrameRefused", "claims_fit", "scan"]


class FrameRefused(Exception):
    """A frame's headers cannot be backed by its bytes (or use a forbidden type)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


# Size, header included, of each fixed-size type by first byte: nil, bools, floats, ints.
_FIXED_SIZES = {0xC0: 1, 0xC2: 1, 0xC3: 1, 0xCA: 5, 0xCB: 9, 0xCC: 2, 0xCD: 3, 0xCE: 5, 0xCF: 9}
_FIXED_SIZES |= {0xD0: 2, 0xD1: 3, 0xD2: 5, 0xD3: 9}
# Width of the length field of bin8/16/32 and str8/16/32.
_LENGTH_WIDTHS = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}
# array16/32, map16/32: width of the count field, and items per counted entry.
_COUNT_WIDTHS = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}
# Past this many array16/32 marker bytes, adding up their claims costs more than a scan.
_MAX_MARKERS = 512


def _fixed_step(byte: int) -> tuple[int, int] | None:
    """Bytes to skip and items opened by a header whose first byte says both, else None."""
    if byte < 0x80 or byte >= 0xE0:  # positive and negative fixint
        return 1, -1
    if byte < 0x90:  # fixmap: two items per entry
        return 1, (byte & 0x0F) * 2
    if byte < 0xA0:  # fixarray
        return 1, byte & 0x0F
    if byte < 0xC0:  # fixstr
        return 1 + (byte & 0x1F), -1
    if byte in _FIXED_SIZES:
        return _FIXED_SIZES[byte], -1
    return None


# By first byte: (bytes to skip, items opened or -1), or None when the header carries a length.
_STEPS = [_fixed_step(byte) for byte in range(256)]


def claims_fit(frame: bytes, cap: int) -> bool:
    """Whether all bytes that could open an array16/32 claim, together, fewer items than bytes."""
    budget, markers = len(frame), 0
    # Marker bytes inside strings count too; that only sends a few more frames to scan.
    for marker, width in ((b"\xdc", 2), (b"\xdd", 4)):
        pos = frame.find(marker)
        while pos != -1:
            markers += 1
            budget -= min(int.from_bytes(frame[pos + 1 : pos + 1 + width], "big"), cap)
            if budget < 0 or markers > _MAX_MARKERS:
                return False
            pos = frame.find(marker, pos + 1)
    return True


def scan(frame: bytes, max_depth: int) -> None:
    """Walk the headers without building anything, refusing claims the frame's bytes cannot back."""
    end, pos = len(frame), 0
    owed = [1]  # items still to read at each open level; the outermost holds the frame itself
    total = 1
    while True:
        while owed and owed[-1] == 0:
            owed.pop()
        if not owed:
            break
        # Each owed item takes a byte at least, which bounds what msgpack will allocate.
        if total > end - pos:
            raise FrameRefused("malformed", "headers claim more items than the frame has bytes")
        byte = frame[pos]
        owed[-1] -= 1
        total -= 1
        step = _STEPS[byte]
        skip, count = step if step is not None else _counted_step(frame, pos, byte)
        pos += skip
        if count >= 0:
            if len(owed) > max_depth:
                raise FrameRefused("too_deep", f"nesting deeper than max_depth {max_depth}")
            owed.append(count)
            total += count
    if pos != end:
        raise FrameRefused("malformed", "the frame's length does not match its contents")


def _counted_step(frame: bytes, pos: int, byte: int) -> tuple[int, int]:
    """Bytes to skip and items opened by a header that carries its length or count after it."""
    if byte in _LENGTH_WIDTHS:
        width = _LENGTH_WIDTHS[byte]
        return 1 + width + int.from_bytes(frame[pos + 1 : pos + 1 + width], "big"), -1
    if byte in _COUNT_WIDTHS:
        width, per_entry = _COUNT_WIDTHS[byte]
        return 1 + width, per_entry * int.from_bytes(frame[pos + 1 : pos + 1 + width], "big")
    raise FrameRefused("ext_type", f"byte 0x{byte:02x} (ext or reserved) is not allowed")
