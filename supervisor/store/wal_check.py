"""Damage at the tail of a SQLite write-ahead log, found before SQLite silently drops it.

When SQLite recovers a WAL it keeps the frames up to the first one whose checksum or salt is
wrong and ignores the rest without a word — so a damaged frame of an acknowledged commit loses
that commit (and every later one) while ``PRAGMA integrity_check`` still says ``ok``. Frames
left over from an older WAL generation carry other salts and are ignored rightly; frames that
carry the current salts but lie past a checksum break were written in this generation and are
lost. :func:`tail_damage` reads the file the way SQLite does (https://sqlite.org/fileformat.html,
"WAL file format") and describes such a break.

A power cut that tears the very last commit can look the same; that commit was never
acknowledged in ``ack`` mode (the fsync had not returned), so the report says "may".
"""

from __future__ import annotations

import struct
from pathlib import Path

__all__ = ["tail_damage"]

_MAGIC = (0x377F0682, 0x377F0683)
_HEADER = 32
_FRAME_HEADER = 24


def _checksum(data: bytes, big_endian: bool, s0: int, s1: int) -> tuple[int, int]:
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def tail_damage(wal: Path) -> str | None:
    """What a checksum break in ``wal`` would lose, or ``None`` when SQLite will keep it all."""
    try:
        data = wal.read_bytes()
    except FileNotFoundError:
        return None
    if len(data) < _HEADER:
        return None  # an empty or unwritten WAL holds no commit
    magic, _version, page_size, _seq, salt1, salt2, c0, c1 = struct.unpack(">8I", data[:_HEADER])
    if magic not in _MAGIC:
        return f"the WAL header is damaged (magic {magic:#x}); every commit in it is lost"
    big_endian = magic & 1 == 1
    if _checksum(data[:24], big_endian, 0, 0) != (c0, c1):
        return "the WAL header fails its checksum; every commit in it is lost"
    size = _FRAME_HEADER + page_size
    s0, s1 = c0, c1
    kept = 0
    broken_at: int | None = None
    lost_frames = lost_commits = 0
    for index, offset in enumerate(range(_HEADER, len(data) - size + 1, size)):
        header = data[offset : offset + _FRAME_HEADER]
        _page, commit, f_salt1, f_salt2, f0, f1 = struct.unpack(">6I", header)
        ours = (f_salt1, f_salt2) == (salt1, salt2)
        if broken_at is None:
            if ours:
                t0, t1 = _checksum(header[:8], big_endian, s0, s1)
                t0, t1 = _checksum(data[offset + _FRAME_HEADER : offset + size], big_endian, t0, t1)
                if (t0, t1) == (f0, f1):
                    s0, s1 = t0, t1
                    kept += 1
                    continue
            broken_at = index
            if not ours:
                continue  # an older generation starts here: SQLite stops rightly
        if ours:
            lost_frames += 1
            lost_commits += commit != 0
    if not lost_frames:
        return None
    return (
        f"the WAL has {lost_frames} frame(s) of its current generation past a checksum break "
        f"at frame {broken_at} (after {kept} good frame(s)); SQLite drops them, so up to "
        f"{max(lost_commits, 1)} committed write(s) may be lost"
    )
