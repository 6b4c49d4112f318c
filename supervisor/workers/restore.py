"""The messages that hand a new worker its app's data: one :class:`Start`, or chunks after it.

Keyed data (a dict of parts) may be stored beyond one frame (``MAX_FRAME_BYTES``): its parts are
acknowledged a few at a time. Such data goes to the worker as a :class:`Start` that says how many
:class:`RestoreChunk` messages follow, each under the frame limit; the worker assembles them
before it restores. A single part always fits: an ack that carried it was a frame itself.
"""

from __future__ import annotations

from typing import Any

import msgpack

from aotui.protocol.codec import MAX_FRAME_BYTES
from aotui.protocol.messages import Message, RestoreChunk, Start

__all__ = ["CHUNK_BYTES", "restore_messages", "split_parts"]

#: Parts per chunk are packed up to this many bytes: the frame limit less room for the envelope.
CHUNK_BYTES = MAX_FRAME_BYTES - (64 << 10)


def part_bytes(part: str, value: Any) -> int:
    """About the bytes ``part`` and its ``value`` take in a frame."""
    return len(msgpack.packb([part, value], use_bin_type=True))


def split_parts(data: dict[str, Any], limit: int = CHUNK_BYTES) -> list[dict[str, Any]]:
    """``data``'s parts in groups of at most ``limit`` bytes (a bigger part alone in its group)."""
    chunks: list[dict[str, Any]] = [{}]
    used = 0
    for part, value in data.items():
        size = part_bytes(part, value)
        if chunks[-1] and used + size > limit:
            chunks.append({})
            used = 0
        chunks[-1][part] = value
        used += size
    return chunks


def restore_messages(
    app: str, data: Any, mounted: list[str], trusted_origins: tuple[str, ...] = ()
) -> list[Message]:
    """What to send a new worker of ``app``: its Start, then the chunks of large keyed data."""
    trusted = list(trusted_origins)
    if not isinstance(data, dict) or not all(isinstance(key, str) for key in data):
        return [Start(app, data, mounted, trusted_origins=trusted)]
    chunks = split_parts(data)
    if len(chunks) == 1:
        return [Start(app, data, mounted, trusted_origins=trusted)]
    return [Start(app, None, mounted, chunks=len(chunks), trusted_origins=trusted)] + [
        RestoreChunk(parts=chunk) for chunk in chunks
    ]
