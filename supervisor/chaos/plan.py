"""Chaos plans: which faults, aimed where, how often, from one seed (TOML or CLI flags).

A plan is frozen data parsed once. Its schedule is a pure function of the seed: a fault triggered
by commands decides on the n-th command that matches its target from ``Random(seed, fault, n)``,
and a fault triggered by time gets its instants from ``Random(seed, fault)`` — so the same seed
and the same agent commands give the same faults, whatever the timing of the run.

Plan file (``docs/chaos.md``, "Running")::

    seed = 7
    duration_s = 60
    [[fault]]
    type = "kill_worker"
    app = "com.aotui.notes"       # app_N or manifest id; any app when left out
    operation = "add_note"        # any operation when left out
    when = "after_effect"
    probability = 0.3             # or every = 4, or at_s = [5.0, 20.0], or rate_per_min = 2
    max = 3
"""

from __future__ import annotations

import enum
import math
import random
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.chaos.history import FaultType

__all__ = [
    "DEFAULT_APP_PLAN",
    "FaultSpec",
    "Plan",
    "Trigger",
    "load_plan",
    "parse_plan",
    "plan_from_flags",
]


class Trigger(enum.Enum):
    """What makes a fault fire."""

    #: Each matching command fires it with ``probability``.
    PROBABILITY = "probability"
    #: Every ``every``-th matching command fires it.
    EVERY = "every"
    #: At the listed seconds since the run started.
    SCHEDULE = "at_s"
    #: At random instants, ``rate_per_min`` on average (drawn from the seed).
    RATE = "rate_per_min"


#: Faults fired by time (they need no command); the others fire on a matching command.
TIMED = frozenset({FaultType.KILL_SUPERVISOR})
#: Faults the runner injects from outside the supervisor; the supervisor injects the others.
FROM_RUNNER = frozenset({FaultType.KILL_SUPERVISOR})

#: Each type's own keys, with their defaults (checked for type and range in ``_detail``).
DETAIL_DEFAULTS: Mapping[FaultType, Mapping[str, Any]] = {
    FaultType.KILL_WORKER: {"when": "before_effect"},
    FaultType.FREEZE: {"seconds": 1.0},
    FaultType.LATENCY: {"ms": 200},
    FaultType.FAIL: {"code": "E_APP_ERROR"},
    FaultType.DRIFT: {"change": "reorder"},
    FaultType.LIE: {},
    FaultType.MEMORY_PRESSURE: {},
    FaultType.KILL_SUPERVISOR: {},
    FaultType.HTTP_FAULT: {"mode": "5xx", "ms": 500},
    FaultType.DISK_FULL: {"where": "store", "seconds": 1.0},
    FaultType.SIGNAL_LOSS: {"seconds": 1.0},
    FaultType.SIGNAL_BURST: {"count": 20},
}
_CHOICES: Mapping[str, tuple[str, ...]] = {
    "when": ("before_effect", "after_effect"),
    "code": ("E_APP_ERROR", "E_TIMEOUT"),
    "change": ("reorder", "insert", "remove"),
    "mode": ("latency", "5xx", "truncate", "timeout"),
    "where": ("grant", "store"),
}
_TARGET_KEYS = ("app", "operation", "view")
_TRIGGER_KEYS = tuple(t.value for t in Trigger)
_TOP_KEYS = ("seed", "duration_s", "lies_must_not_be_acted_on", "fault")


@dataclass(frozen=True)
class FaultSpec:
    """One fault of a plan: its type, target, trigger and type-specific detail."""

    #: Its id in the run (``f1``, ``f2``… in plan order).
    fault_id: str
    #: What kind of fault.
    type: FaultType
    #: The app aimed at (``app_N`` or manifest id), or any.
    app: str | None = None
    #: The operation aimed at, or any.
    operation: str | None = None
    #: The view aimed at (``view_N``), or any.
    view: str | None = None
    #: What fires it.
    trigger: Trigger = Trigger.PROBABILITY
    #: The trigger's value: a probability, a period, a rate, or the schedule's instants.
    value: float | tuple[float, ...] = 1.0
    #: At most this many injections in a run.
    max: int | None = None
    #: Type-specific settings (see ``DETAIL_DEFAULTS``).
    detail: Mapping[str, Any] = field(default_factory=dict)

    def matches(
        self, app: str | None, manifest_id: str | None, operation: str | None, view: str | None
    ) -> bool:
        """Whether a command on ``app``/``operation``/``view`` is in this fault's target."""
        if self.app is not None and self.app not in (app, manifest_id):
            return False
        if self.operation is not None and self.operation != operation:
            return False
        return self.view is None or self.view == view

    def fires(self, seed: int, matched: int) -> bool:
        """Whether the ``matched``-th matching command (1-based) fires this fault."""
        if self.trigger is Trigger.EVERY:
            return matched % int(self.value) == 0  # type: ignore[arg-type]
        if self.trigger is Trigger.PROBABILITY:
            draw = random.Random(f"{seed}:{self.fault_id}:{matched}").random()
            return draw < float(self.value)  # type: ignore[arg-type]
        return False

    def instants(self, seed: int, duration_s: float) -> list[float]:
        """Seconds since the start at which a time-triggered fault fires, within the run."""
        if self.trigger is Trigger.SCHEDULE:
            assert isinstance(self.value, tuple)
            times = [t for t in self.value if t < duration_s]
        elif self.trigger is Trigger.RATE:
            rng = random.Random(f"{seed}:{self.fault_id}:times")
            rate_per_s = float(self.value) / 60  # type: ignore[arg-type]
            times, now = [], rng.expovariate(rate_per_s)
            while now < duration_s:
                times.append(round(now, 3))
                now += rng.expovariate(rate_per_s)
        else:
            return []
        return times[: self.max] if self.max is not None else times

    def to_plain(self) -> dict[str, Any]:
        """The fault as plain data (the history's ``plan``)."""
        plain = {
            "id": self.fault_id,
            "type": self.type.value,
            **{key: getattr(self, key) for key in _TARGET_KEYS if getattr(self, key)},
            self.trigger.value: _plain_value(self.trigger, self.value),
            **dict(self.detail),
        }
        if self.max is not None:
            plain["max"] = self.max
        return plain


@dataclass(frozen=True)
class Plan:
    """A seed and its faults."""

    #: The seed of every random choice of the run.
    seed: int
    #: The faults, in plan order.
    faults: tuple[FaultSpec, ...] = ()
    #: How long a run lasts when ``--duration`` is not given (seconds).
    duration_s: float = 60.0
    #: Whether the checker fails a run whose agent acted on a lie.
    lies_must_not_be_acted_on: bool = False

    def to_plain(self) -> dict[str, Any]:
        """The plan as plain data (for the history and for the supervisor's environment)."""
        return {
            "seed": self.seed,
            "duration_s": self.duration_s,
            "lies_must_not_be_acted_on": self.lies_must_not_be_acted_on,
            "fault": [spec.to_plain() for spec in self.faults],
        }

    def schedule(self, duration_s: float | None = None) -> list[tuple[float, FaultSpec]]:
        """The time-triggered faults of a run, as (seconds since start, fault), in time order."""
        length = self.duration_s if duration_s is None else duration_s
        fired = [(t, spec) for spec in self.faults for t in spec.instants(self.seed, length)]
        return sorted(fired, key=lambda item: (item[0], item[1].fault_id))

    def of_types(self, *types: FaultType) -> list[FaultSpec]:
        """The faults of these types."""
        return [spec for spec in self.faults if spec.type in types]


def _plain_value(trigger: Trigger, value: float | tuple[float, ...]) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return int(value) if trigger is Trigger.EVERY else value


def _bad(where: str, problem: str, fix: str) -> AotuiError:
    return AotuiError(
        ErrorCode.E_INVALID_CMD, f"chaos plan: {where}: {problem}; {fix}", {"key": where}
    )


def _number(where: str, value: Any, low: float, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise _bad(where, f"{value!r} is not a number from {low:g} to {high:g}", "give one")
    return float(value)


def _fault(index: int, raw: Any) -> FaultSpec:
    where = f"fault[{index}]"
    if not isinstance(raw, Mapping):
        raise _bad(where, "is not a table", 'write it as [[fault]] with type = "..."')
    kind = _fault_type(where, raw)
    defaults = DETAIL_DEFAULTS[kind]
    known = {"type", "id", "max", *_TARGET_KEYS, *_TRIGGER_KEYS, *defaults}
    for key in raw:
        if key not in known:
            raise _bad(
                f"{where}.{key}",
                f"is not a key of a {kind.value} fault",
                f"its keys are {', '.join(sorted(known))}",
            )
    target = _target(where, raw)
    trigger = _trigger(where, raw, kind)
    limit = raw.get("max")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise _bad(f"{where}.max", f"{limit!r} is not a whole number >= 1", "give one or drop it")
    return FaultSpec(
        f"f{index + 1}",
        kind,
        target["app"],
        target["operation"],
        target["view"],
        trigger,
        _trigger_value(where, raw, trigger),
        limit,
        {key: _detail(where, key, raw.get(key, default)) for key, default in defaults.items()},
    )


def _fault_type(where: str, raw: Mapping[str, Any]) -> FaultType:
    try:
        return FaultType(raw.get("type"))
    except ValueError:
        types = ", ".join(t.value for t in FaultType)
        raise _bad(
            f"{where}.type", f"{raw.get('type')!r} is not a fault type", f"use one of {types}"
        ) from None


def _target(where: str, raw: Mapping[str, Any]) -> dict[str, str | None]:
    target: dict[str, str | None] = {}
    for key in _TARGET_KEYS:
        aim = raw.get(key)
        if aim is not None and (not isinstance(aim, str) or not aim):
            raise _bad(f"{where}.{key}", f"{aim!r} is not a non-empty string", "name one")
        target[key] = aim
    return target


def _trigger(where: str, raw: Mapping[str, Any], kind: FaultType) -> Trigger:
    """What fires the fault: timed kinds by the clock, the others by a command."""
    given = [key for key in _TRIGGER_KEYS if key in raw]
    if len(given) > 1:
        raise _bad(where, f"has both {given[0]} and {given[1]}", "keep one trigger")
    timed = kind in TIMED
    trigger = Trigger(given[0]) if given else (Trigger.SCHEDULE if timed else Trigger.PROBABILITY)
    if timed and trigger not in (Trigger.SCHEDULE, Trigger.RATE):
        raise _bad(
            f"{where}.{trigger.value}",
            f"a {kind.value} fault is not caused by a command",
            "give at_s = [seconds, ...] or rate_per_min",
        )
    if not timed and trigger in (Trigger.SCHEDULE, Trigger.RATE):
        raise _bad(
            f"{where}.{trigger.value}",
            f"a {kind.value} fault fires on a command",
            "give probability = 0..1 or every = N",
        )
    return trigger


def _trigger_value(
    where: str, raw: Mapping[str, Any], trigger: Trigger
) -> float | tuple[float, ...]:
    raw_value = raw.get(trigger.value, [] if trigger is Trigger.SCHEDULE else 1.0)
    if trigger is Trigger.SCHEDULE:
        if not isinstance(raw_value, list) or not raw_value:
            raise _bad(
                f"{where}.at_s",
                f"{raw_value!r} is not a list of seconds",
                "give at_s = [5.0, 20.0]",
            )
        return tuple(sorted(_number(f"{where}.at_s", t, 0) for t in raw_value))
    if trigger is Trigger.PROBABILITY:
        return _number(f"{where}.probability", raw_value, 0, 1)
    if trigger is Trigger.EVERY:
        if isinstance(raw_value, bool) or not isinstance(raw_value, int) or raw_value < 1:
            raise _bad(f"{where}.every", f"{raw_value!r} is not a whole number >= 1", "give one")
        return float(raw_value)
    return _number(f"{where}.rate_per_min", raw_value, 0.001, 6000)


def _detail(where: str, key: str, chosen: Any) -> Any:
    """One detail of a fault (its mode, its seconds, its ms or count), checked."""
    if key in _CHOICES:
        if chosen not in _CHOICES[key]:
            raise _bad(
                f"{where}.{key}",
                f"{chosen!r} is not allowed",
                f"use one of {', '.join(_CHOICES[key])}",
            )
        return chosen
    if key == "seconds":
        return _number(f"{where}.{key}", chosen, 0.01, 600)
    return int(_number(f"{where}.{key}", chosen, 1, 600_000))  # ms, count


def parse_plan(raw: Mapping[str, Any]) -> Plan:
    """A plan from its TOML data; ``E_INVALID_CMD`` naming the key and what to do."""
    for key in raw:
        if key not in _TOP_KEYS:
            raise _bad(key, "is not a plan key", f"the keys are {', '.join(_TOP_KEYS)}")
    seed = raw.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise _bad("seed", f"{seed!r} is not a whole number >= 0", "give seed = 1 (any integer)")
    duration = _number("duration_s", raw.get("duration_s", 60.0), 0.1, 86_400)
    lies = raw.get("lies_must_not_be_acted_on", False)
    if not isinstance(lies, bool):
        raise _bad("lies_must_not_be_acted_on", f"{lies!r} is not true or false", "give one")
    faults = raw.get("fault", [])
    if not isinstance(faults, list):
        raise _bad("fault", "is not an array of tables", "write each fault as [[fault]]")
    return Plan(seed, tuple(_fault(i, f) for i, f in enumerate(faults)), duration, lies)


def load_plan(path: str | Path) -> Plan:
    """Read and check a TOML plan file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise AotuiError(
            ErrorCode.E_NOT_FOUND,
            f"chaos plan {path}: cannot read it ({exc.strerror}); give a "
            "TOML file (docs/chaos.md, Running)",
            {"path": str(path)},
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _bad(str(path), f"is not TOML ({exc})", "fix the syntax") from None
    return parse_plan(data)


def plan_from_flags(seed: int, faults: list[str], duration_s: float | None = None) -> Plan:
    """A plan from ``--seed`` and ``--fault TYPE[:key=value,...]`` flags."""
    tables: list[dict[str, Any]] = []
    for text in faults:
        kind, _, rest = text.partition(":")
        table: dict[str, Any] = {"type": kind}
        for pair in filter(None, rest.split(",")):
            key, sep, value = pair.partition("=")
            if not sep:
                raise _bad(
                    f"--fault {text}",
                    f"{pair!r} is not key=value",
                    "write --fault kill_worker:probability=0.2,when=after_effect",
                )
            table[key] = _flag_value(key, value)
        tables.append(table)
    raw: dict[str, Any] = {"seed": seed, "fault": tables}
    if duration_s is not None:
        raw["duration_s"] = duration_s
    return parse_plan(raw)


def _flag_value(key: str, value: str) -> Any:
    if key == "at_s":
        try:
            return [float(v) for v in value.split("/")]
        except ValueError:
            return value
    if key in ("every", "max", "ms", "count"):
        try:
            return int(value)
        except ValueError:
            return value
    if key in ("probability", "rate_per_min", "seconds"):
        try:
            return float(value)
        except ValueError:
            return value
    return value


#: What ``aotui chaos app`` runs when no plan is given: kills around the effect, and failures.
DEFAULT_APP_PLAN: Mapping[str, Any] = {
    "seed": 1,
    "duration_s": 20.0,
    "fault": [
        {"type": "kill_worker", "when": "after_effect", "probability": 0.25},
        {"type": "kill_worker", "when": "before_effect", "probability": 0.1},
        {"type": "fail", "code": "E_APP_ERROR", "probability": 0.1},
        {"type": "latency", "ms": 50, "probability": 0.1},
    ],
}
