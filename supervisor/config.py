"""Desktop configuration: frozen data, parsed and validated once from TOML.

The documented default is ``configs/desktop.toml``; every key is optional and falls back to the
values of :class:`DesktopConfig`. Code that touches the OS receives a ``DesktopConfig``; nothing
else parses config.
"""

from __future__ import annotations

import dataclasses
import enum
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.desktop.controls import AppPolicy, parse_policy
from aotui.supervisor.desktop.snapshot import SnapshotBudget
from aotui.supervisor.manifest import BUNDLED_APPS_DIR, MIN_BROWSER_TASKS, LimitCeilings, Manifest
from aotui.supervisor.workers.restart import RestartPolicy

__all__ = [
    "BUNDLED_APPS_DIR",
    "DesktopConfig",
    "Durability",
    "LimitCeilings",
    "Limits",
    "load_config",
]


@dataclass(frozen=True)
class Limits:
    """Per-app resource limits; an app's manifest may lower or raise them (CONTRACT §2)."""

    memory_mb: int = 256
    cpu_percent: int = 50
    pids: int = 32
    open_files: int = 256
    file_size_mb: int = 256


#: Default limits of a web app (CONTRACT §10: a page in a headless browser), whose worker runs
#: Chromium: about 8 processes and 60 threads for one page, 50–100 MB besides the worker.
WEB_LIMITS = Limits(memory_mb=512, pids=256, open_files=1024)


class Durability(enum.StrEnum):
    """When an acknowledged operation's effect is committed to the store (config ``durability``)."""

    #: Committed (fsync) before the ack.
    ACK = "ack"
    #: Acknowledged at once, committed every ``durability_batch_ms`` (a crash may lose that much).
    BATCH = "batch"
    #: Nothing is stored: a crashed desktop starts empty.
    OFF = "off"


@dataclass(frozen=True)
class DesktopConfig:
    """Everything a desktop is configured with."""

    #: Name of the desktop (also the directory of its endpoints).
    desktop: str = "default"
    #: App directories installed when the desktop is created, in order (``app_0`` first).
    apps: tuple[str, ...] = (
        "system/chat",
        "system/thoughts",
        "notes",
        "files",
        "browser",
    )
    #: Default limits for apps whose manifest does not say.
    limits: Limits = field(default_factory=Limits)
    #: The most a manifest's limits may ask for (lowered to what the machine has); an app
    #: asking more is refused at install.
    max_limits: LimitCeilings = field(default_factory=LimitCeilings)
    #: Default limits for web apps (an ``.html`` entry) whose manifest does not say.
    web_limits: Limits = WEB_LIMITS
    #: Milliseconds an operation handler may run before the agent gets ``E_TIMEOUT``.
    operation_timeout_ms: int = 5000
    #: Milliseconds a worker may take from launch to its first fragment.
    start_timeout_ms: int = 10000
    #: Seconds a snapshot id stays resolvable (hard TTL).
    snapshot_ttl_s: float = 600.0
    #: Most snapshot ids kept at once; the oldest unreferenced ones go first.
    snapshot_max_entries: int = 256
    #: Seconds an input lease lasts without a heartbeat.
    lease_s: float = 30.0
    #: Most signals per second per desktop.
    signal_rate_per_s: float = 10.0
    #: Entries kept in System Logs and in each app's Operation Log.
    log_entries: int = 50
    #: Seconds between heartbeats to each worker.
    heartbeat_s: float = 2.0
    #: A worker silent this long (no heartbeat answer) is killed (``last_exit``: ``timeout``).
    heartbeat_timeout_s: float = 15.0
    #: Seconds between two watchdog samples of every worker's memory.
    watchdog_interval_s: float = 0.05
    #: CPU is measured over windows of this many seconds…
    cpu_window_s: float = 1.0
    #: …and a worker over its ``cpu_percent`` for this many windows in a row is killed.
    cpu_strikes: int = 3
    #: Refuse to start an app when any confinement layer is unavailable.
    strict_sandbox: bool = False
    #: Let the HTTP broker reach loopback/private addresses (for tests only).
    allow_private_http: bool = False
    #: Default restart policy: ``permanent``, ``transient`` or ``temporary``.
    restart_mode: str = "permanent"
    #: At most this many restarts within ``restart_period_s`` before the app is ``failed``.
    max_restarts: int = 3
    restart_period_s: float = 60.0
    #: First back-off between restarts inside the period (doubles, up to 5 s).
    restart_backoff_s: float = 0.1
    #: ``ack``: an execute is acknowledged only after its effect is durably committed (fsync);
    #: ``batch``: acknowledged at once, committed every ``durability_batch_ms`` (a crash may lose
    #: at most that much); ``off``: nothing is stored, a crashed desktop starts empty.
    durability: Durability = Durability.ACK
    durability_batch_ms: int = 50
    #: Where the desktop is stored: ``""`` (the default) its SQLite file under ``AOTUI_HOME``;
    #: ``postgresql://…`` a PostgreSQL database (``aotui up --store URL``; docs/durability.md).
    store: str = ""
    #: Snapshot budgets (CONTRACT §4): bytes of one app's views, of one view, lines of one
    #: app's view tree (and views shown), deepest level listed, bytes of the whole snapshot.
    #: What exceeds them is replaced by a marker naming the app.
    snapshot_app_bytes: int = 256 << 10
    snapshot_view_bytes: int = 64 << 10
    snapshot_app_views: int = 64
    snapshot_view_depth: int = 16
    snapshot_max_bytes: int = 3 << 20
    #: Agent commands (execute requests) in flight at once on this desktop; beyond it a new one
    #: is refused with ``E_RATE_LIMITED`` (seed 004: two).
    max_in_flight: int = 2
    #: Seconds a ``rpc.sock`` connection with no request running (and not subscribed to events)
    #: stays open; then it is told ``E_TIMEOUT`` and closed.
    rpc_idle_timeout_s: float = 60.0
    #: Per-app operation policies (``[policy."<manifest id>"]``: allow, deny, confirm).
    policy: tuple[AppPolicy, ...] = ()
    #: Origins (``https://shop.example``, ``http://127.0.0.1:8000``) whose agent-aware pages'
    #: catalog policy the Browser applies (seed 004: ``requiresUserConfirm`` → the user's
    #: confirmation, ``allowedActions`` → ``E_PERMISSION``); any other page's is ignored.
    trusted_origins: tuple[str, ...] = ()

    def app_limits(self, manifest: Manifest) -> dict[str, int]:
        """The limits ``manifest``'s app runs with: its own, else the desktop's defaults for
        its kind (``web_limits`` for a web app)."""
        defaults = self.web_limits if manifest.uses_browser else self.limits
        return {**vars(defaults), **manifest.limits}

    def restart_policy(self, manifest_restart: Mapping[str, Any] | None = None) -> RestartPolicy:
        """The restart policy of an app: the config's, overridden by its manifest's."""
        base = {
            "mode": self.restart_mode,
            "max_restarts": self.max_restarts,
            "period_s": self.restart_period_s,
            "backoff_s": self.restart_backoff_s,
        }
        return RestartPolicy.from_dict({**base, **(manifest_restart or {})})

    def snapshot_budget(self) -> SnapshotBudget:
        """The snapshot budgets as one record."""
        return SnapshotBudget(
            app_bytes=self.snapshot_app_bytes,
            view_bytes=self.snapshot_view_bytes,
            app_views=self.snapshot_app_views,
            view_depth=self.snapshot_view_depth,
            total_bytes=self.snapshot_max_bytes,
        )

    def resolve_app_dir(self, entry: str) -> Path:
        """An app directory from the config: absolute, or relative to the bundled apps."""
        path = Path(entry).expanduser()
        return path if path.is_absolute() else BUNDLED_APPS_DIR / path

    def system_app_dirs(self) -> frozenset[Path]:
        """The app directories this config lists: the apps that may say ``"system": true``
        besides the bundled system apps (anyone else's is refused)."""
        return frozenset(self.resolve_app_dir(entry).resolve() for entry in self.apps)


def _check(name: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            f"config key {name!r} must be {getattr(kind, '__name__', kind)}, got {value!r}",
        )
    return value


def load_config(path: str | Path | None = None, **overrides: Any) -> DesktopConfig:
    """Read a TOML config (or the defaults), apply ``overrides``, validate every key."""
    raw = _read_toml(path) if path is not None else {}
    raw.update({k: v for k, v in overrides.items() if v is not None})
    known = {f.name: f for f in fields(DesktopConfig)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"unknown config key {key!r}; known keys: {', '.join(sorted(known))}",
            )
        parse = _PARSERS.get(key)
        values[key] = parse(value) if parse else _scalar(key, value, known[key].default)
    if "web_limits" not in values:
        # The web defaults, lowered to ceilings a config lowered (a web app that then has too
        # few tasks is refused when it opens, saying so).
        ceilings = DesktopConfig(**values).max_limits.on_this_machine()
        lowered = {
            f.name: min(getattr(WEB_LIMITS, f.name), ceilings[f.name][0]) for f in fields(Limits)
        }
        values["web_limits"] = Limits(**lowered)
    config = DesktopConfig(**values)
    _check_whole(config)
    return config


def _read_toml(path: str | Path) -> dict[str, Any]:
    """The keys of the config file at ``path``."""
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise AotuiError(ErrorCode.E_NOT_FOUND, f"cannot read config {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise AotuiError(ErrorCode.E_INVALID_CMD, f"config {path} is not TOML: {exc}") from exc


def _positive_ints(key: str, value: Any, names: set[str]) -> dict[str, int]:
    """A table of known names, each a positive integer."""
    _check(key, value, dict)
    for name, number in value.items():
        if name not in names:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"unknown limit {name!r} in [{key}]; known: {', '.join(sorted(names))}",
            )
        if _check(f"{key}.{name}", number, int) <= 0:
            raise AotuiError(ErrorCode.E_INVALID_CMD, f"config key {key}.{name} must be positive")
    return dict(value)


def _limits(value: Any) -> Limits:
    """The ``limits`` table: known names only, each a positive integer."""
    return Limits(**_positive_ints("limits", value, {f.name for f in fields(Limits)}))


def _web_limits(value: Any) -> Limits:
    """The ``web_limits`` table: like ``limits``, over the web defaults."""
    names = {f.name for f in fields(Limits)}
    return dataclasses.replace(WEB_LIMITS, **_positive_ints("web_limits", value, names))


def _max_limits(value: Any) -> LimitCeilings:
    """The ``max_limits`` table: known names only, each a positive integer."""
    names = {f.name for f in fields(LimitCeilings)}
    return LimitCeilings(**_positive_ints("max_limits", value, names))


def _apps(value: Any) -> tuple[str, ...]:
    """The ``apps`` list: app directories as strings."""
    _check("apps", value, (list, tuple))
    return tuple(_check("apps[]", item, str) for item in value)


#: Keys whose value is a structure, each with its own parser; the rest are scalars.
def _durability(value: Any) -> Durability:
    """The ``durability`` key: one of the :class:`Durability` modes."""
    try:
        return Durability(_check("durability", value, str))
    except ValueError:
        modes = ", ".join(mode.value for mode in Durability)
        raise AotuiError(
            ErrorCode.E_INVALID_CMD, f"config key 'durability' must be {modes}, got {value!r}"
        ) from None


def _store(value: Any) -> str:
    """The ``store`` key: empty (SQLite) or a ``postgresql://`` URL."""
    if _check("store", value, str) and not value.startswith(("postgresql://", "postgres://")):
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            f"config key 'store' is empty (the SQLite file under AOTUI_HOME) or a "
            f"postgresql://… URL, got {value[:60]!r}",
        )
    return str(value)


def _origins(value: Any) -> tuple[str, ...]:
    """``trusted_origins``: ``scheme://host[:port]``, http or https, nothing after."""
    _check("trusted_origins", value, (list, tuple))
    origins = []
    for item in value:
        text = _check("trusted_origins[]", item, str)
        parts = urlsplit(text)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or port == -1
            or parts.path
            or parts.query
            or parts.fragment
            or parts.username is not None
        ):
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"config key 'trusted_origins' lists {text[:100]!r}, which is not an origin: "
                f"write scheme://host[:port], http or https, with nothing after it "
                f"(https://shop.example, http://127.0.0.1:8000)",
            )
        origins.append(f"{parts.scheme}://{parts.netloc.lower()}")
    return tuple(origins)


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "durability": _durability,
    "store": _store,
    "limits": _limits,
    "max_limits": _max_limits,
    "web_limits": _web_limits,
    "policy": parse_policy,
    "apps": _apps,
    "trusted_origins": _origins,
}


def _scalar(key: str, value: Any, default: Any) -> Any:
    """A scalar key, of its default's type; numbers must be positive (but max_restarts)."""
    if isinstance(default, bool | str):
        return _check(key, value, type(default))
    kind: type | tuple[type, ...] = (int, float) if isinstance(default, float) else int
    if _check(key, value, kind) <= 0 and key != "max_restarts":
        raise AotuiError(ErrorCode.E_INVALID_CMD, f"config key {key!r} must be positive")
    return float(value) if isinstance(default, float) else value


def _check_whole(config: DesktopConfig) -> None:
    """Refuse what only the whole config shows to be wrong."""
    config.restart_policy()  # refuse a bad restart_mode now, not at the first crash
    ceilings = config.max_limits.on_this_machine()
    for table in ("limits", "web_limits"):
        for limit in fields(Limits):
            value = getattr(getattr(config, table), limit.name)
            most, why = ceilings[limit.name]
            if value > most:
                raise AotuiError(
                    ErrorCode.E_INVALID_CMD,
                    f"config key '{table}.{limit.name}' is {value}, over its ceiling {most} "
                    f"({why})",
                )
    if config.web_limits.pids < MIN_BROWSER_TASKS and config.web_limits.pids < ceilings["pids"][0]:
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            f"config key 'web_limits.pids' is {config.web_limits.pids}; a web app's browser "
            f"needs at least {MIN_BROWSER_TASKS} tasks",
        )
    if config.snapshot_max_bytes > 3 << 20:
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            f"config key 'snapshot_max_bytes' must be at most {3 << 20} (a snapshot must fit "
            f"one 4 MiB frame), got {config.snapshot_max_bytes}",
        )
    _durability(config.durability)  # also when built without load_config
