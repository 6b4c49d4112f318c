"""Snapshot diffs: what changed in a block since the agent's base snapshot, and what it saw.

A pull ``since`` a snapshot id sends only the blocks whose text changed; a changed block whose
lines mostly stayed is sent with its unchanged runs folded into one line each
(``… 147 lines (message_history[1]–[49] in T12 are [0]–[48] now) …``), so a new message
in a 100-message chat costs its own lines, not the conversation's. Lines are compared with their
list indices and item numbers left out, so items that only moved (a page that scrolled by one)
still count as unchanged, and the fold says where their refs are now.

:class:`SeenBlocks` remembers, per snapshot id, the text of each block as the agent has it after
reading that pull (a diff's base plus what it changed), sharing unchanged texts between ids.
"""

from __future__ import annotations

import difflib
import re
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["FoldBudget", "SeenBlocks", "fold_unchanged"]

#: ``list_id[12]`` inside a ref link; ``12. `` opening an ordered-list item.
_REF = re.compile(r"([A-Za-z_][\w-]*)\[(\d+)\]")
_NUMBER = re.compile(r"^(\s*)\d+\. ")
#: Line pairs difflib may compare for one pull: it is quadratic at worst (a hostile view of 4,000
#: near-identical lines took 1 s of the supervisor's loop). Past it, changed blocks go whole.
PULL_DIFF_PAIRS = 1_000_000
#: An unchanged run shorter than this stays in the text (a fold line would not be shorter).
MIN_FOLD = 2


def _plain(line: str) -> str:
    return _REF.sub(r"\1[]", _NUMBER.sub(r"\1#. ", line))


def _span(lines: list[str]) -> dict[str, tuple[int, int]]:
    """Per list id, the first and last index its refs have in ``lines``."""
    spans: dict[str, tuple[int, int]] = {}
    for line in lines:
        for name, index in _REF.findall(line):
            first, _last = spans.get(name, (int(index), int(index)))
            spans[name] = (first, int(index))
    return spans


def _moved(before: list[str], after: list[str], base_id: str) -> str:
    """`` (message_history[1]–[49] in T12 are [0]–[48] now)`` when the run's refs moved."""
    was, now = _span(before), _span(after)
    notes = []
    for name, (first, last) in now.items():
        old = was.get(name)
        if old is not None and old != (first, last):
            notes.append(f"{name}[{old[0]}]–[{old[1]}] in {base_id} are [{first}]–[{last}] now")
    return f" ({'; '.join(notes)})" if notes else ""


class FoldBudget:
    """What is left of one pull's :data:`PULL_DIFF_PAIRS` (shared by the blocks it folds)."""

    def __init__(self, pairs: int = PULL_DIFF_PAIRS) -> None:
        self.pairs = pairs


def _opcodes(
    a: list[str], b: list[str], budget: FoldBudget
) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes, the common head and tail matched first (linear: an append or a scroll
    leaves little between them); ``[]`` when the rest would cost more than ``budget``."""
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    mid_a, mid_b = a[head : len(a) - tail], b[head : len(b) - tail]
    cost = len(mid_a) * len(mid_b)
    if cost > budget.pairs:
        return []
    budget.pairs -= cost
    codes = [("equal", 0, head, 0, head)] if head else []
    matcher = difflib.SequenceMatcher(None, mid_a, mid_b, False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        codes.append((op, i1 + head, i2 + head, j1 + head, j2 + head))
    if tail:
        codes.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return codes


def fold_unchanged(
    base: str, text: str, base_id: str, budget: FoldBudget | None = None
) -> str | None:
    """``text`` with the runs it shares with ``base`` folded; ``None`` when that saves nothing
    (or would cost more than the pull's ``budget``: the block is then sent whole)."""
    old, new = base.split("\n"), text.split("\n")
    codes = _opcodes([_plain(x) for x in old], [_plain(x) for x in new], budget or FoldBudget())
    if not codes:
        return None
    out: list[str] = []
    for op, i1, i2, j1, j2 in codes:
        if op == "equal" and j2 - j1 >= MIN_FOLD:
            # The desktop tag names the base (since="T12"): a fold need not repeat it.
            moved = _moved(old[i1:i2], new[j1:j2], base_id)
            out.append(f"… {j2 - j1} lines{moved} …")
        elif op == "delete":
            out.append(f"… {i2 - i1} lines gone …")
        else:
            if op == "replace" and i2 - i1 > j2 - j1:
                out.append(f"… {i2 - i1 - (j2 - j1)} lines gone …")
            out.extend(new[j1:j2])
    folded = "\n".join(out)
    return folded if len(folded) < len(text) else None


#: Text the diff bases may hold together (each distinct text once): past it the oldest go.
SEEN_BYTES = 24 << 20


class SeenBlocks:
    """Snapshot id → {block id: text as the agent has it}: the newest ``capacity`` pulls, each
    for ``ttl_s``, within ``max_bytes`` of distinct text (a base outlives its id's refcount: a
    diff needs its text, not its refs). Equal texts are one object across ids, and a text is
    counted once however many bases hold it, so bases cost what changed between them."""

    def __init__(
        self,
        capacity: int,
        ttl_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = SEEN_BYTES,
    ) -> None:
        self.capacity = max(capacity, 1)
        self.ttl_s = ttl_s
        self.clock = clock
        self.max_bytes = max_bytes
        self._seen: OrderedDict[str, tuple[float, dict[str, str]]] = OrderedDict()
        #: The newest text of each block, so equal texts are one object across ids.
        self._latest: dict[str, str] = {}
        #: id(text) → [bases holding it, its size]; the text itself is held by those bases.
        self._held: dict[int, list[int]] = {}
        #: Bytes of the distinct texts held.
        self.held_bytes = 0

    def record(self, snapshot_id: str, blocks: dict[str, str]) -> None:
        """Remember what the agent has after reading ``snapshot_id``."""
        shared = {}
        for block_id, text in blocks.items():
            known = self._latest.get(block_id)
            shared[block_id] = known if known == text and known is not None else text
        self._latest = {**self._latest, **shared}
        if len(self._latest) > 4 * len(shared) + 64:  # forget blocks long gone
            self._latest = dict(shared)
        self._drop(snapshot_id)
        for text in shared.values():
            held = self._held.get(id(text))
            if held is None:
                held = self._held[id(text)] = [0, len(text.encode("utf-8", "surrogatepass"))]
                self.held_bytes += held[1]
            held[0] += 1
        self._seen[snapshot_id] = (self.clock(), shared)
        while len(self._seen) > 1 and (
            len(self._seen) > self.capacity or self.held_bytes > self.max_bytes
        ):
            self._drop(next(iter(self._seen)))

    def _drop(self, snapshot_id: str) -> None:
        entry = self._seen.pop(snapshot_id, None)
        if entry is None:
            return
        for text in entry[1].values():
            held = self._held[id(text)]
            held[0] -= 1
            if held[0] == 0:
                self.held_bytes -= held[1]
                del self._held[id(text)]

    def get(self, snapshot_id: str) -> dict[str, str] | None:
        """What the agent had after ``snapshot_id``, if it is still remembered."""
        entry = self._seen.get(snapshot_id)
        if entry is None or self.clock() - entry[0] > self.ttl_s:
            return None
        return entry[1]
