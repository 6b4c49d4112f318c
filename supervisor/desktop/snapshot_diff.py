"""Snapshot diffs: what changed in a block since the agent's base snapshot, and what it saw.

A pull ``since`` a snapshot id sends only the blocks whose text changed; a changed block whose
lines mostly stayed is sent with its unchanged runs folded into one line each
(``… 147 lines (message_history[1]–[49] in T12 are [0]–[48] now) …``), so a new message
in a 100-message chat costs its own lines, not the conversation's.

A folded block is exact: :func:`apply_fold` rebuilds the block's text, byte for byte, from the
base and the folded text, and the agent reads it by the same rules (docs/snapshots.md):

- ``… N lines …`` stands for the base's next N lines, byte-identical;
- ``… N lines (L[a]–[b] in T12 are [c]–[d] now; …) …`` for the base's next N lines with every ref
  ``(kind:L[i])`` of each named list moved by ``c − a``, and a line's leading item number
  (``12. ``) moved as its first ref's list moved (not at all without one);
- ``… N lines gone …`` for the base's next N lines, which are gone;
- every other line is new, taken as it is; a new line that itself reads as a fold line (any line
  that starts with ``… `` and ends with `` …``) comes after ``… the next line is the view's own
  text …``.

Lines are aligned with their list indices and item numbers left out (so an item that only moved
lines up with itself), and then a line is folded only if the rule above gives it back exactly:
``10. Paris`` that became ``9000. Paris``, or a price ``eur[10]`` that became ``eur[9000]``, is a
changed line, sent. A block is sent whole only when folding would not shorten it and none of its
lines reads as a fold line, so a block without fold lines is always the text itself.

:class:`SeenBlocks` remembers, per snapshot id, the text of each block as the agent has it after
reading that pull (a diff's base plus what it changed), sharing unchanged texts between ids.
"""

from __future__ import annotations

import difflib
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

__all__ = ["VERBATIM", "FoldBudget", "SeenBlocks", "apply_fold", "fold_unchanged"]

#: ``list_id[12]`` anywhere (lines are aligned without them); ``12. `` opening an item.
_REF = re.compile(r"([A-Za-z_][\w-]*)\[(\d+)\]")
_NUMBER = re.compile(r"^(\s*)(\d+)\. ")
#: A ref in a link's target, ``(message:history[12])``: the refs a fold may say moved.
_LINK_REF = re.compile(r"(?<=:)([A-Za-z_][\w-]*)\[(\d+)\](?=\))")
_KEPT = re.compile(r"… (\d+) lines?(?: \((.+)\))? …")
_GONE = re.compile(r"… (\d+) lines? gone …")
_MOVED = re.compile(r"([A-Za-z_][\w-]*)\[(\d+)\]–\[(\d+)\] in \S+ are \[(\d+)\]–\[(\d+)\] now")
#: Comes before a new line that would otherwise read as a fold line.
VERBATIM = "… the next line is the view's own text …"
#: Line pairs difflib may compare for one pull: it is quadratic at worst (a hostile view of 4,000
#: near-identical lines took 1 s of the supervisor's loop). Past it, changed blocks go whole.
PULL_DIFF_PAIRS = 1_000_000
#: An unchanged run shorter than this stays in the text (a fold line would not be shorter).
MIN_FOLD = 2


def _plain(line: str) -> str:
    return _REF.sub(r"\1[]", _NUMBER.sub(r"\1#. ", line))


def _reads_as_fold(line: str) -> bool:
    """Whether ``line`` would be taken for a fold line (see the module)."""
    return line.startswith("… ") and line.endswith(" …")


def _lines(count: int) -> str:
    return f"{count} line" if count == 1 else f"{count} lines"


def _shift(line: str, shifts: Mapping[str, int]) -> str:
    """``line`` with the refs of each list in ``shifts`` moved by its shift, and its leading
    item number by the shift of its first ref's list."""
    if not shifts:
        return line
    first = _LINK_REF.search(line)
    moved = _LINK_REF.sub(
        lambda m: f"{m[1]}[{int(m[2]) + shifts[m[1]]}]" if m[1] in shifts else m[0], line
    )
    by = shifts.get(first[1], 0) if first is not None else 0
    if not by:
        return moved
    return _NUMBER.sub(lambda m: f"{m[1]}{int(m[2]) + by}. ", moved, count=1)


def _line_shifts(old: str, new: str) -> dict[str, int] | None:
    """Per list on the line, how far its refs moved, if :func:`_shift` gives ``new`` back from
    ``old`` exactly; ``None`` when the line changed otherwise."""
    before, after = _LINK_REF.findall(old), _LINK_REF.findall(new)
    if [name for name, _ in before] != [name for name, _ in after]:
        return None
    shifts: dict[str, int] = {}
    for (name, was), (_, now) in zip(before, after, strict=True):
        if shifts.setdefault(name, int(now) - int(was)) != int(now) - int(was):
            return None
    if _shift(old, {k: v for k, v in shifts.items() if v}) != new:
        return None
    return shifts


def _note(lines: list[str], shifts: Mapping[str, int], base_id: str) -> str:
    """`` (message_history[1]–[49] in T12 are [0]–[48] now)`` for the lists that moved."""
    spans: dict[str, tuple[int, int]] = {}
    for line in lines:
        for name, index in _LINK_REF.findall(line):
            if shifts.get(name):
                first, _last = spans.get(name, (int(index), int(index)))
                spans[name] = (first, int(index))
    notes = [
        f"{name}[{a}]–[{b}] in {base_id} are [{a + shifts[name]}]–[{b + shifts[name]}] now"
        for name, (a, b) in spans.items()
    ]
    return f" ({'; '.join(notes)})" if notes else ""


def _parse_note(note: str) -> dict[str, int]:
    shifts = {}
    for part in note.split("; "):
        moved = _MOVED.fullmatch(part)
        if moved is None:
            raise ValueError(f"not a fold's note: {part!r}")
        shifts[moved[1]] = int(moved[4]) - int(moved[2])
    return shifts


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


#: A piece of a folded block: base lines [i1, i2) kept (with their lists' shifts) or replaced
#: by new lines [j1, j2) (``shifts`` ``None``).
_Piece = tuple[int, int, int, int, "dict[str, int] | None"]


def _pieces(
    old: list[str], new: list[str], codes: list[tuple[str, int, int, int, int]]
) -> list[_Piece]:
    """Kept runs that :func:`_shift` gives back exactly, one shift per list in each; the rest
    (and kept runs shorter than :data:`MIN_FOLD`) replaced."""
    pieces: list[_Piece] = []

    def add(i1: int, i2: int, j1: int, j2: int, shifts: dict[str, int] | None) -> None:
        if shifts is not None and i2 - i1 < MIN_FOLD:
            shifts = None
        last = pieces[-1] if pieces else None
        if shifts is None and last is not None and last[4] is None:
            pieces[-1] = (last[0], i2, last[2], j2, None)
        elif i2 > i1 or j2 > j1:
            pieces.append((i1, i2, j1, j2, shifts))

    for op, i1, i2, j1, j2 in codes:
        if op != "equal":
            add(i1, i2, j1, j2, None)
            continue
        start = i1  # the kept run being built: from ``start``, its lists' shifts
        run: dict[str, int] = {}
        for k in range(i2 - i1):
            shifts = _line_shifts(old[i1 + k], new[j1 + k])
            agrees = shifts is not None and all(run.get(n, d) == d for n, d in shifts.items())
            if not agrees:
                add(start, i1 + k, start - i1 + j1, j1 + k, run)
                if shifts is None:
                    add(i1 + k, i1 + k + 1, j1 + k, j1 + k + 1, None)
                start, run = (i1 + k, dict(shifts)) if shifts is not None else (i1 + k + 1, {})
            else:
                run.update(shifts or {})
        add(start, i2, start - i1 + j1, j2, run)
    return pieces


def fold_unchanged(
    base: str, text: str, base_id: str, budget: FoldBudget | None = None
) -> str | None:
    """``text`` with the runs it shares with ``base`` folded, exactly as :func:`apply_fold`
    reads them; ``None`` (the block is sent whole) when that saves nothing or would cost more
    than the pull's ``budget`` — never for a text with a line that reads as a fold line."""
    old, new = base.split("\n"), text.split("\n")
    awkward = any(_reads_as_fold(line) for line in new)
    codes = _opcodes([_plain(x) for x in old], [_plain(x) for x in new], budget or FoldBudget())
    if not codes and not awkward:
        return None
    pieces = _pieces(old, new, codes) if codes else [(0, len(old), 0, len(new), None)]
    out: list[str] = []
    for i1, i2, j1, j2, shifts in pieces:
        if shifts is not None:
            moved = {name: shift for name, shift in shifts.items() if shift}
            # The desktop tag names the base (since="T12"): a plain fold need not repeat it.
            out.append(f"… {_lines(i2 - i1)}{_note(old[i1:i2], moved, base_id)} …")
            continue
        if i2 > i1:
            out.append(f"… {_lines(i2 - i1)} gone …")
        for line in new[j1:j2]:
            if _reads_as_fold(line):
                out.append(VERBATIM)
            out.append(line)
    folded = "\n".join(out)
    return folded if awkward or len(folded) < len(text) else None


def apply_fold(base: str, sent: str) -> str:
    """The block's text from its ``base`` and the ``sent`` text of a diff (folded or whole):
    what the agent is meant to read from them. ``ValueError`` when ``sent`` is not a fold of
    ``base``."""
    lines = sent.split("\n")
    if not any(_reads_as_fold(line) for line in lines):
        return sent  # sent whole
    old = base.split("\n")
    out: list[str] = []
    at = 0
    verbatim = False
    for line in lines:
        if verbatim or not _reads_as_fold(line):
            out.append(line)
            verbatim = False
        elif line == VERBATIM:
            verbatim = True
        elif (gone := _GONE.fullmatch(line)) is not None:
            at += int(gone[1])
        elif (kept := _KEPT.fullmatch(line)) is not None:
            shifts = _parse_note(kept[2]) if kept[2] else {}
            count = int(kept[1])
            out.extend(_shift(x, shifts) for x in old[at : at + count])
            at += count
        else:
            raise ValueError(f"not a fold line: {line[:80]!r}")
    if at != len(old) or verbatim:
        raise ValueError(f"the fold covers {at} of the base's {len(old)} lines")
    return "\n".join(out)


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
