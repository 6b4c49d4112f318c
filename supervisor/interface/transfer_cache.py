"""``TransferCache``: the exports and imports under way, held between their chunks, bounded.

A desktop's data may be far larger than one frame (each app may keep up to 64 MiB), so export and
import move it in chunks; between two chunks the supervisor holds the whole encoded state. What
it holds is bounded: at most :attr:`TransferLimits.per_client` transfers per client and
:attr:`TransferLimits.total_bytes` in all (a lone transfer is always admitted, so no desktop is
too big to export), each dropped once finished or :attr:`TransferLimits.ttl_s` after its last
chunk. Past a bound a new transfer is ``E_RATE_LIMITED``.
"""

from __future__ import annotations

import enum
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from aotui.protocol.errors import AotuiError, ErrorCode

__all__ = ["Transfer", "TransferCache", "TransferKind", "TransferLimits"]


class TransferKind(enum.StrEnum):
    """Which way the data goes."""

    EXPORT = "export"
    IMPORT = "import"


@dataclass(frozen=True)
class TransferLimits:
    """The bounds of a :class:`TransferCache`."""

    #: Bytes of one chunk: well under the 4 MiB frame and the codec's 3.5 MiB per bin.
    chunk_bytes: int = 2 << 20
    #: Transfers one client may have under way at once.
    per_client: int = 2
    #: Bytes held for all transfers together (each counted at its whole size).
    total_bytes: int = 256 << 20
    #: Seconds a transfer is kept after its last chunk.
    ttl_s: float = 120.0


@dataclass
class Transfer:
    """One export or import under way (mutable: an import grows chunk by chunk)."""

    kind: TransferKind
    client: str
    #: The whole size: of the encoded export, or declared by the importer.
    total: int
    data: bytearray
    touched: float


class TransferCache:
    """The transfers under way on one desktop."""

    def __init__(
        self, limits: TransferLimits | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits or TransferLimits()
        self._clock = clock
        self._transfers: dict[str, Transfer] = {}

    def open(self, kind: TransferKind, client: str, total: int, data: bytes = b"") -> str:
        """Hold a new transfer of ``total`` bytes; its id, or ``E_RATE_LIMITED`` past a bound."""
        self._expire()
        mine = sum(1 for t in self._transfers.values() if t.client == client)
        if mine >= self.limits.per_client:
            raise AotuiError(
                ErrorCode.E_RATE_LIMITED,
                f"this client already has {mine} exports/imports under way (at most "
                f"{self.limits.per_client}); finish them, or wait {self.limits.ttl_s:.0f} s for "
                f"abandoned ones to expire",
            )
        held = self.held_bytes()
        if held and held + total > self.limits.total_bytes:
            raise AotuiError(
                ErrorCode.E_RATE_LIMITED,
                f"the desktop already holds {held >> 20} MiB of exports/imports under way; with "
                f"this one's {total >> 20} MiB that is over {self.limits.total_bytes >> 20} MiB: "
                f"wait for them to finish and try again",
            )
        transfer_id = secrets.token_hex(8)
        self._transfers[transfer_id] = Transfer(kind, client, total, bytearray(data), self._clock())
        return transfer_id

    def get(self, kind: TransferKind, transfer_id: object) -> Transfer:
        """The transfer ``transfer_id`` of ``kind``, touched; ``E_NOT_FOUND`` if unknown/expired."""
        self._expire()
        transfer = self._transfers.get(transfer_id) if isinstance(transfer_id, str) else None
        if transfer is None or transfer.kind is not kind:
            raise AotuiError(
                ErrorCode.E_NOT_FOUND,
                f"no {kind.value} {str(transfer_id)[:40]!r} is under way here (finished, expired "
                f"after {self.limits.ttl_s:.0f} s without a chunk, or never started); "
                f"{kind.value} again from the start",
            )
        transfer.touched = self._clock()
        return transfer

    def drop(self, transfer_id: str) -> None:
        """Forget a transfer (finished or failed)."""
        self._transfers.pop(transfer_id, None)

    def held_bytes(self) -> int:
        """Bytes held for the transfers under way (each at its whole size)."""
        return sum(t.total for t in self._transfers.values())

    def __len__(self) -> int:
        self._expire()
        return len(self._transfers)

    def _expire(self) -> None:
        deadline = self._clock() - self.limits.ttl_s
        for transfer_id, transfer in list(self._transfers.items()):
            if transfer.touched < deadline:
                del self._transfers[transfer_id]
