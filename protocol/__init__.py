"""The words on the wire; imports nothing else of aotui.

- :mod:`protocol.errors` — ``ErrorCode`` (recoverable / JSON-RPC / exit codes), ``AotuiError``.
- :mod:`protocol.commands` — ``Command`` and ``Action``: one parsed agent command, structured form.
- :mod:`protocol.grammar` — ``parse_commands``: the ``<context>`` command language (CONTRACT §5).
- :mod:`protocol.args` — operation argument schemas, coercion and ref resolution hooks.
- :mod:`protocol.messages` — the frozen dataclass messages between client, supervisor, worker.
- :mod:`protocol.worker_messages` — those inside the desktop, loaded on first use (via messages).
- :mod:`protocol.codec` — the only module that touches msgpack: frames with limits.
- :mod:`protocol.stream` — length-prefixed frames over stream sockets (supervisor ↔ zygote).
- :mod:`protocol.structure` — escaping of the snapshot's structural tags in app text.
- :mod:`protocol.lazy` — ``lazy_exports``: the rooms' exports, imported on first use.
"""

# Exports load on first use (protocol/lazy.py): `aotui status` and every worker import one
# submodule, not the whole room, so a command's start-up pays only for what it runs.
from __future__ import annotations

from aotui.protocol.lazy import lazy_exports

TYPE_CHECKING = False  # typing's, without importing typing (~2 ms of every CLI call)

if TYPE_CHECKING:
    from aotui.protocol.args import (
        ArgSchema,
        CoercedArgs,
        Param,
        RefResolver,
        ResolvedRef,
        coerce_args,
        parse_arg_schema,
        parse_ref,
    )
    from aotui.protocol.codec import PROTOCOL_VERSION, Codec, decode, encode
    from aotui.protocol.commands import Action, ArgValues, Command
    from aotui.protocol.errors import EXIT_NO_DESKTOP, AotuiError, ErrorCode
    from aotui.protocol.grammar import parse_commands
    from aotui.protocol.structure import STRUCTURAL_TAGS, contains_structural, escape_structural

__all__ = [
    "EXIT_NO_DESKTOP",
    "PROTOCOL_VERSION",
    "STRUCTURAL_TAGS",
    "Action",
    "AotuiError",
    "ArgSchema",
    "ArgValues",
    "Codec",
    "CoercedArgs",
    "Command",
    "ErrorCode",
    "Param",
    "RefResolver",
    "ResolvedRef",
    "coerce_args",
    "contains_structural",
    "decode",
    "encode",
    "escape_structural",
    "parse_arg_schema",
    "parse_commands",
    "parse_ref",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "aotui.protocol.args": (
            "ArgSchema",
            "CoercedArgs",
            "Param",
            "RefResolver",
            "ResolvedRef",
            "coerce_args",
            "parse_arg_schema",
            "parse_ref",
        ),
        "aotui.protocol.codec": ("PROTOCOL_VERSION", "Codec", "decode", "encode"),
        "aotui.protocol.commands": ("Action", "ArgValues", "Command"),
        "aotui.protocol.errors": ("EXIT_NO_DESKTOP", "AotuiError", "ErrorCode"),
        "aotui.protocol.grammar": ("parse_commands",),
        "aotui.protocol.structure": (
            "STRUCTURAL_TAGS",
            "contains_structural",
            "escape_structural",
        ),
    },
)
