"""The words on the wire; imports nothing else of aotui.

- :mod:`protocol.errors` — ``ErrorCode`` (recoverable / JSON-RPC / exit codes), ``AotuiError``.
- :mod:`protocol.messages` — the frozen dataclass messages between client, supervisor and worker.
"""

from protocol.errors import EXIT_NO_DESKTOP, AotuiError, ErrorCode

__all__ = ["EXIT_NO_DESKTOP", "AotuiError", "ErrorCode"]
