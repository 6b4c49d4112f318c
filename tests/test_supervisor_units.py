"""Registry, lease, throttle, manifest and config: pure logic, with an injected clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.config import DesktopConfig, Limits, load_config
from aotui.supervisor.manifest import load_manifest, parse_permission
from aotui.supervisor.server.lease import InputLease
from aotui.supervisor.server.registry import SnapshotRegistry
from aotui.supervisor.server.throttle import SignalThrottle


class FakeClock:
    """Time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# --- registry -----------------------------------------------------------------------------------


def test_registry_ttl_is_hard(clock: FakeClock) -> None:
    registry: SnapshotRegistry[str] = SnapshotRegistry(ttl_s=600, clock=clock)
    first = registry.add("table-1")
    registry.retain(first)
    assert registry.get(first) == "table-1"
    clock.advance(599)
    assert registry.get(first) == "table-1"
    clock.advance(2)
    with pytest.raises(AotuiError) as stale:
        registry.get(first)
    assert stale.value.code is ErrorCode.E_STALE_STATE
    assert first in stale.value.message


def test_registry_refcount_and_bound(clock: FakeClock) -> None:
    registry: SnapshotRegistry[int] = SnapshotRegistry(max_entries=3, clock=clock)
    ids = [registry.add(i) for i in range(3)]
    assert ids == ["T1", "T2", "T3"]
    registry.release(ids[0])  # unreferenced and not the latest: gone at once
    with pytest.raises(AotuiError):
        registry.get(ids[0])
    registry.retain(ids[1])
    more = [registry.add(i) for i in range(3, 6)]
    assert len(registry) == 3
    # the bound evicts unreferenced entries first, then the oldest
    assert registry.get(more[-1]) == 5
    assert registry.latest == more[-1]
    with pytest.raises(AotuiError) as unknown:
        registry.release("T404")  # releasing an unknown id is an error, like using one
    assert unknown.value.code is ErrorCode.E_STALE_STATE


def test_registry_unknown_id(clock: FakeClock) -> None:
    registry: SnapshotRegistry[int] = SnapshotRegistry(clock=clock)
    with pytest.raises(AotuiError) as stale:
        registry.get("T1")
    assert stale.value.code is ErrorCode.E_STALE_STATE
    assert stale.value.recoverable


# --- lease --------------------------------------------------------------------------------------


def test_lease_single_writer_and_expiry(clock: FakeClock) -> None:
    lease = InputLease(lease_s=30, clock=clock)
    lease.check(None)  # free: anyone may execute
    alice = lease.acquire("alice").token
    with pytest.raises(AotuiError) as locked:
        lease.acquire("bob")
    assert locked.value.code is ErrorCode.E_LOCKED
    for token in (None, "guessed", ""):
        with pytest.raises(AotuiError):
            lease.check(token)
    lease.check(alice)
    clock.advance(20)
    assert lease.heartbeat(alice) == 30
    clock.advance(20)
    assert lease.owner == "alice"  # the heartbeat renewed it
    clock.advance(11)
    assert lease.owner is None  # alice stopped heartbeating
    with pytest.raises(AotuiError) as lost:
        lease.heartbeat(alice)
    assert lost.value.code is ErrorCode.E_LOCKED
    bob = lease.acquire("bob").token
    assert bob != alice
    with pytest.raises(AotuiError):
        lease.release(alice)
    lease.release(bob)
    assert lease.owner is None
    with pytest.raises(AotuiError) as empty:
        lease.acquire("")
    assert empty.value.code is ErrorCode.E_INVALID_CMD


def test_a_lease_is_held_by_its_token_not_by_a_name(clock: FakeClock) -> None:
    lease = InputLease(lease_s=30, clock=clock)
    token = lease.acquire("A").token
    for call in (
        lambda: lease.acquire("A"),  # the holder's name without its token
        lambda: lease.acquire("A", "wrong"),
        lambda: lease.heartbeat(None),
        lambda: lease.heartbeat("wrong"),
        lambda: lease.release(None),
        lambda: lease.check(None),
    ):
        with pytest.raises(AotuiError) as refused:
            call()
        assert refused.value.code is ErrorCode.E_LOCKED
        assert lease.owner == "A"
    assert lease.acquire("A", token).token == token  # renewed with its token, same token
    lease.release(token)
    assert lease.owner is None


def test_a_lease_token_can_be_given_on_a_command_line(clock: FakeClock) -> None:
    """``aotui acquire OWNER --token TOKEN`` reads a word beginning with ``-`` as an option: no
    token may begin so (one in 64 random tokens did; CI's run of test_waits.py met one). Without
    the rule, 2,000 tokens hold one with probability 1 - (63/64)**2000, all but certainly."""
    lease = InputLease(lease_s=30, clock=clock)
    tokens = []
    for _ in range(2000):
        token = lease.acquire("A").token
        lease.release(token)
        tokens.append(token)
    assert not [token for token in tokens if token.startswith("-")]
    assert len(set(tokens)) == len(tokens)


def test_an_idle_lease_holds_while_its_holder_works(clock: FakeClock) -> None:
    lease = InputLease(lease_s=30, clock=clock)
    token = lease.acquire("mcp-1", kind="mcp", idle_s=5).token
    clock.advance(4)
    with pytest.raises(AotuiError) as idle:
        lease.check(None)
    assert "'mcp-1' (an MCP session), idle; input frees in 1.0 s" in idle.value.message
    assert idle.value.data == {"owner": "mcp-1", "kind": "mcp", "frees_in_s": 1.0}
    working = lease.begin(token, deadline_s=20)
    clock.advance(15)  # far past the idle time: a running command keeps it
    with pytest.raises(AotuiError) as busy:
        lease.acquire("other", kind="cli")
    assert "(an MCP session), running a command now" in busy.value.message
    assert "within 10 s at most" in busy.value.message  # 5 s of its deadline left, plus 5
    lease.end(working)
    clock.advance(4.9)
    assert lease.owner == "mcp-1"
    clock.advance(0.2)
    assert lease.owner is None  # 5 s after its command ended, with no release or heartbeat
    lease.check(None)
    assert lease.begin(token, 20) is None  # an old token starts nothing
    held = lease.acquire("cli-user", kind="cli").token
    with pytest.raises(AotuiError) as heartbeat:
        lease.check(None)
    assert "(an aotui CLI user) until it releases it" in heartbeat.value.message
    lease.release(held)
    for bad in ({"kind": "robot"}, {"idle_s": 0}, {"idle_s": 31}):
        with pytest.raises(AotuiError) as refused:
            lease.acquire("x", **bad)  # type: ignore[arg-type]
        assert refused.value.code is ErrorCode.E_INVALID_CMD


# --- throttle -----------------------------------------------------------------------------------


def test_throttle_leading_and_trailing_edges(clock: FakeClock) -> None:
    throttle = SignalThrottle(rate_per_s=10, clock=clock)
    assert throttle.offer("app_opened") == ("app_opened", ("app_opened",))  # quiet: at once
    published = []
    for i in range(100):  # a 1 s burst of changes every 10 ms
        clock.advance(0.01)
        now = throttle.offer("dom_mutation" if i < 99 else "app_crashed")
        if now:
            published.append(now)
        due = throttle.due()
        if due:
            published.append(due)
    assert 9 <= len(published) <= 10  # at most 10 per second
    assert throttle.next_due_in() is not None
    clock.advance(0.1)
    # the last change in a burst always signals, with every reason it stands for
    assert throttle.due() == ("app_crashed", ("app_crashed",))
    assert throttle.due() is None
    assert throttle.next_due_in() is None


def test_throttle_keeps_every_distinct_reason_of_a_burst(clock: FakeClock) -> None:
    # A crash followed by its restart inside one window used to publish only app_restarted.
    throttle = SignalThrottle(rate_per_s=10, clock=clock)
    assert throttle.offer("dom_mutation") is not None
    clock.advance(0.01)
    for reason in ("app_crashed", "dom_mutation", "app_restarted", "dom_mutation"):
        assert throttle.offer(reason) is None
    clock.advance(0.1)
    assert throttle.due() == ("dom_mutation", ("app_crashed", "dom_mutation", "app_restarted"))


def test_throttle_rate_holds_over_time(clock: FakeClock) -> None:
    throttle = SignalThrottle(rate_per_s=10, clock=clock)
    sent = 0
    for _ in range(10_000):  # 10 s of changes every millisecond
        clock.advance(0.001)
        sent += throttle.offer("dom_mutation") is not None
        sent += throttle.due() is not None
    assert sent <= 101


# --- manifest -----------------------------------------------------------------------------------


def write_app(tmp_path: Path, **fields: object) -> Path:
    app = tmp_path / "app"
    app.mkdir(exist_ok=True)
    (app / "app.py").write_text("")
    manifest = {"id": "com.example.notes", "name": "Notes", "version": "1", "entry": "app.py"}
    manifest.update(fields)  # type: ignore[arg-type]
    manifest = {k: v for k, v in manifest.items() if v is not None}
    (app / "aoapp.json").write_text(json.dumps(manifest))
    return app


def test_manifest_valid(tmp_path: Path) -> None:
    manifest = load_manifest(
        write_app(
            tmp_path,
            permissions=["fs:read:/srv/notes", "fs:write:*", "net:http:*.Example.com."],
            limits={"memory_mb": 64},
        )
    )
    assert manifest.id == "com.example.notes"
    assert [str(p) for p in manifest.permissions] == [
        "fs:read:/srv/notes",
        "fs:write:*",
        "net:http:*.example.com",
    ]
    assert manifest.limits == {"memory_mb": 64}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"id": "Notes"}, "id"),
        ({"id": None}, "id"),
        ({"entry": "../evil.py"}, "entry"),
        ({"entry": "/etc/passwd"}, "entry"),
        ({"entry": "missing.py"}, "entry"),
        ({"system": "yes"}, "system"),
        ({"permissions": ["fs:read:relative"]}, "permissions"),
        ({"permissions": ["fs:exec:/bin"]}, "permissions"),
        ({"permissions": ["net:http:"]}, "permissions"),
        ({"permissions": ["gpu:use"]}, "permissions"),
        ({"permissions": "fs:read:*"}, "permissions"),
        ({"limits": {"memory_mb": -1}}, "limits.memory_mb"),
        ({"limits": {"disk_mb": 1}}, "limits"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_manifest_refusals_name_the_field(
    tmp_path: Path, fields: dict[str, object], field: str
) -> None:
    with pytest.raises(AotuiError) as refused:
        load_manifest(write_app(tmp_path, **fields))
    assert refused.value.code is ErrorCode.E_INVALID_CMD
    assert refused.value.data["field"] == field
    assert repr(field) in refused.value.message


def test_manifest_missing_or_broken(tmp_path: Path) -> None:
    with pytest.raises(AotuiError) as missing:
        load_manifest(tmp_path)
    assert missing.value.code is ErrorCode.E_NOT_FOUND
    (tmp_path / "aoapp.json").write_text("{nope")
    with pytest.raises(AotuiError) as broken:
        load_manifest(tmp_path)
    assert broken.value.code is ErrorCode.E_INVALID_CMD


def test_permission_grammar() -> None:
    assert str(parse_permission("net:http:*")) == "net:http:*"
    with pytest.raises(ValueError, match="unknown permission"):
        parse_permission("fs:delete:/x")
    with pytest.raises(ValueError, match="host"):
        parse_permission("net:http:exa mple.com")


# --- config -------------------------------------------------------------------------------------


def test_default_config_file_matches_defaults() -> None:
    shipped = load_config(Path(__file__).parent.parent / "configs" / "desktop.toml")
    assert shipped == DesktopConfig()


def test_config_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("lease_s = 5\n[limits]\nmemory_mb = 64\n")
    config = load_config(path)
    assert config.lease_s == 5.0
    assert config.limits == Limits(memory_mb=64)
    for text, word in [
        ("nope = 1", "unknown config key"),
        ("lease_s = 'x'", "lease_s"),
        ("lease_s = -1", "positive"),
        ("[limits]\ndisk = 1", "unknown limit"),
        ("= broken", "not TOML"),
    ]:
        path.write_text(text)
        with pytest.raises(AotuiError, match=word):
            load_config(path)
