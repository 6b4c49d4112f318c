"""What an exported desktop state may hold, checked by a walk that never recurses.

Export and import move apps' data that was never in a frame of its own: an import's state is
decoded from chunks, a client's comes from JSON or from its own code. Before anything else
touches it (``msgpack``, ``dataclasses.asdict``, ``str()``, the codec), :func:`state_fault` walks
it with an explicit stack and names the path of the first value the desktop could not take —
``apps[2].data.items[3]`` — with the limit it breaks:

- plain data only: nil, bool, int, float, str, bin, lists, str-keyed maps (the codec's ``Any``);
- integers within msgpack's range, -2**63 to 2**64-1;
- an app's data nested at most :data:`DATA_MAX_DEPTH` levels (its own root is level 1): it goes
  to the app's worker as a field of a frame, and the codec counts the frame array and its fields
  map as levels 1 and 2 of its ``max_depth``;
- the desktop's own fields beside the data at most :data:`STATE_MAX_DEPTH` levels.

Sizes (items per container, bytes per string, bytes per frame) are the codec's to check: the
walk has made the data shallow enough for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from aotui.protocol.codec import Codec

__all__ = [
    "DATA_MAX_DEPTH",
    "INT_MAX",
    "INT_MIN",
    "STATE_MAX_DEPTH",
    "data_fault",
    "plain_fault",
    "state_fault",
]

#: msgpack's integers: what the wire and the store carry.
INT_MIN, INT_MAX = -(1 << 63), (1 << 64) - 1
#: Levels an app's data may nest: the codec's ``max_depth`` less the frame array and fields map.
DATA_MAX_DEPTH = Codec().max_depth - 2
#: Levels of the state around the apps' data: state map, apps list, app entry, its lists.
STATE_MAX_DEPTH = 4

_SCALARS = frozenset({type(None), bool, float, str, bytes})
_SCALARS_AND_INT = _SCALARS | {int}
_DATA_DEPTH_WHY = (
    f", the most an app's data may nest (it travels as a field of a frame, whose codec allows "
    f"{DATA_MAX_DEPTH + 2} levels, 2 of them the frame's own)"
)
_SHOWN_KEY = 40
_SHOWN_PATH = 240


def _step(key: object) -> str:
    if isinstance(key, str) and key.isascii() and key.isidentifier():
        return f".{key}"
    return f"[{key!r:.{_SHOWN_KEY}}]"


def _where(path: list[str]) -> str:
    text = "".join(path).lstrip(".") or "the state"
    return text if len(text) <= _SHOWN_PATH else f"{text[:_SHOWN_PATH]}…"


def plain_fault(value: Any, path: str, max_depth: int, why: str = "") -> str | None:
    """What is wrong with ``value`` (found at ``path``), naming where; ``None`` if nothing.

    ``why`` follows the depth limit in a refusal: where ``max_depth`` comes from.
    """
    steps = [path]  # the path to ``element``: one step per open container
    # One iterator of (step, element) per open container: the walk's stack, never Python's.
    stack: list[Iterator[tuple[object, Any]]] = []
    element = value
    while True:
        fault = _fault(element, len(stack) + 1, max_depth, why)
        if fault is not None:
            return f"{_where(steps)} {fault}"
        if (type(element) is dict or type(element) is list) and not _flat_and_fine(element):
            stack.append(iter(element.items()) if type(element) is dict else enumerate(element))
            steps.append("")
        while stack:
            following = next(stack[-1], None)
            if following is not None:
                steps[-1] = _step(following[0])
                element = following[1]
                break
            stack.pop()
            steps.pop()
        else:
            return None


def _flat_and_fine(container: dict[str, Any] | list[Any]) -> bool:
    """Whether ``container`` holds only scalars within range: checked in C, not per element."""
    values = container.values() if type(container) is dict else container
    kinds = set(map(type, values))
    if kinds <= _SCALARS:
        return True
    if kinds <= _SCALARS_AND_INT:
        return all(INT_MIN <= v <= INT_MAX for v in values if type(v) is int)
    return False


def _fault(element: Any, level: int, max_depth: int, why: str) -> str | None:
    """What is wrong with ``element`` itself (not its contents), at nesting ``level``."""
    kind = type(element)
    if kind in _SCALARS:
        return None
    if kind is int:
        if INT_MIN <= element <= INT_MAX:
            return None
        # Not str(element): a big enough int refuses to become a string.
        return (
            f"is an integer of {element.bit_length()} bits, outside the range the desktop "
            f"stores (-2**63 to 2**64-1)"
        )
    if kind is not list and kind is not dict:
        return (
            f"is a {kind.__name__}, not plain data (null, booleans, numbers, strings, bytes, "
            f"lists and string-keyed maps)"
        )
    if level > max_depth:
        return f"is nested deeper than {max_depth} levels{why}"
    if kind is dict:
        odd = next((key for key in element if type(key) is not str), None)
        if odd is not None:
            return f"has a key of type {type(odd).__name__}; map keys are strings"
    return None


def data_fault(data: Any, path: str) -> str | None:
    """What is wrong with one app's ``data`` (found at ``path``); ``None`` if nothing."""
    return plain_fault(data, path, DATA_MAX_DEPTH, _DATA_DEPTH_WHY)


def state_fault(state: Any) -> str | None:
    """What is wrong with an exported ``state`` (``None``: nothing), naming the path.

    Each app's data is held to :data:`DATA_MAX_DEPTH`, the rest of the state to
    :data:`STATE_MAX_DEPTH`; every value to plain data within msgpack's integers.
    """
    if type(state) is not dict:
        return f"the state is a {type(state).__name__}, not a map; import an `aotui export`"
    apps = state.get("apps")
    entries = apps if type(apps) is list else []
    for i, entry in enumerate(entries):
        if type(entry) is dict and "data" in entry:
            fault = data_fault(entry["data"], f"apps[{i}].data")
            if fault is not None:
                return fault
    # The rest, with each app's data (checked above) left out rather than walked twice.
    rest = {
        **state,
        "apps": [{**entry, "data": None} if type(entry) is dict else entry for entry in entries]
        if type(apps) is list
        else apps,
    }
    return plain_fault(rest, "", STATE_MAX_DEPTH, ", the most a desktop state's own fields nest")
