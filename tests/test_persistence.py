"""The desktop's store, one strategy per durability mode (supervisor/desktop/persistence.py):
``ack`` stores before the ack, ``batch`` within its batch time, ``off`` stores nothing at all."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from aotui.supervisor.config import Durability, load_config
from aotui.supervisor.desktop.persistence import (
    Acknowledged,
    Batched,
    Unstored,
    persistence_for,
)
from aotui.supervisor.paths import store_path
from tests.conftest import RunningDesktop
from tests.test_durability import BUMP, kill_supervisor

pytestmark = pytest.mark.timeout(90)

Start = Callable[..., RunningDesktop]


class _Desktop:
    desktop_id, created, next_app, apps = "d", 0.0, 0, []  # type: ignore[var-annotated]

    def log(self, text: str, owner: str | None = None) -> None:
        pass


@pytest.mark.parametrize(
    ("mode", "kind"),
    [(Durability.ACK, Acknowledged), (Durability.BATCH, Batched), (Durability.OFF, Unstored)],
)
def test_each_mode_is_its_own_strategy(mode: Durability, kind: type) -> None:
    config = load_config(durability=mode.value)
    assert config.durability is mode
    chosen = persistence_for(_Desktop(), config)
    assert type(chosen) is kind
    assert chosen.mode is mode


def test_an_unknown_mode_is_refused_naming_the_modes() -> None:
    with pytest.raises(Exception, match="must be ack, batch, off, got 'fsync'"):
        load_config(durability="fsync")


def _bump_then_kill(start_desktop: Start, mode: str, pause_s: float) -> tuple[int, RunningDesktop]:
    desktop = start_desktop(["echo"], name=f"d-{mode}", durability=mode)
    desktop.client.execute("<context>open --application app_0</context>")
    count = 0
    for _ in range(3):
        count = desktop.client.execute(BUMP.format(app="app_0"))["results"][0]
    time.sleep(pause_s)
    kill_supervisor(desktop)
    return count, start_desktop(["echo"], name=f"d-{mode}", durability=mode)


def test_ack_keeps_every_acknowledged_effect_through_a_kill(start_desktop: Start) -> None:
    count, again = _bump_then_kill(start_desktop, "ack", 0.0)
    assert again.client.execute(BUMP.format(app="app_0"))["results"][0] == count + 1


def test_batch_keeps_what_its_batch_time_wrote(start_desktop: Start) -> None:
    # durability_batch_ms is 50: a second after the acks, they are written.
    count, again = _bump_then_kill(start_desktop, "batch", 1.0)
    assert again.client.execute(BUMP.format(app="app_0"))["results"][0] == count + 1
    assert again.client.status()["store"]["state"] == "ok"


def test_off_writes_no_store_and_starts_empty(start_desktop: Start, private_home: Path) -> None:
    count, again = _bump_then_kill(start_desktop, "off", 0.2)
    assert count == 3
    assert not store_path("d-off").exists()
    assert not any(private_home.rglob("*.db"))
    assert again.client.status()["store"] == {"state": "off"}
    again.client.execute("<context>open --application app_0</context>")
    assert again.client.execute(BUMP.format(app="app_0"))["results"][0] == 1
