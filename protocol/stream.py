"""Length-prefixed codec frames over a byte stream (the supervisor ↔ zygote socketpair)."""

from __future__ import annotations

import socket
import struct

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import Message

__all__ = ["MAX_STREAM_FRAME", "FrameReader", "write_frame"]

_HEADER = struct.Struct("!I")
#: Largest frame either side accepts on a stream: the one frame limit (the codec's).
MAX_STREAM_FRAME = codec.MAX_FRAME_BYTES


def write_frame(sock: socket.socket, message: Message, fds: list[int] | None = None) -> None:
    """Send one ``<u32 length><codec frame>`` on a blocking stream socket, maybe with fds.

    Descriptors travel as ``SCM_RIGHTS`` on the frame's first byte, so the receiver gets them
    with (or before) the frame they belong to.
    """
    encoded = codec.encode(message)
    frame = _HEADER.pack(len(encoded)) + encoded
    if fds:
        sent = socket.send_fds(sock, [frame], fds)
        frame = frame[sent:]
    if frame:
        sock.sendall(frame)


class FrameReader:
    """Splits a byte stream into messages."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[Message]:
        """Add received bytes; return every complete message (bad frames raise AotuiError)."""
        self.buffer += data
        messages: list[Message] = []
        while len(self.buffer) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self.buffer)
            if length > MAX_STREAM_FRAME:
                raise AotuiError(
                    ErrorCode.E_INVALID_CMD, f"stream frame of {length} bytes is too big"
                )
            if len(self.buffer) < _HEADER.size + length:
                break
            frame = bytes(self.buffer[_HEADER.size : _HEADER.size + length])
            del self.buffer[: _HEADER.size + length]
            messages.append(codec.decode(frame))
        return messages
