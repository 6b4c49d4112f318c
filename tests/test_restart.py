"""Restart policies with an injected clock: modes, intensity, back-off, parsing."""

from __future__ import annotations

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.config import DesktopConfig
from aotui.supervisor.workers.restart import RestartMode, RestartPolicy, RestartTracker
from tests.test_supervisor_units import FakeClock


def tracker(clock: FakeClock, **policy: object) -> RestartTracker:
    return RestartTracker(RestartPolicy.from_dict(policy), clock)


def test_permanent_restarts_until_the_intensity_is_exceeded() -> None:
    clock = FakeClock()
    t = tracker(clock, mode="permanent", max_restarts=3, period_s=60, backoff_s=0.1)
    delays = []
    for _ in range(3):
        decision = t.decide(abnormal=True)
        assert decision.restart
        assert not decision.failed
        delays.append(decision.delay_s)
        clock.advance(1)
    assert delays == [0.0, 0.1, 0.2]  # the first restart is immediate, then exponential
    failed = t.decide(abnormal=True)
    assert failed.failed
    assert not failed.restart
    assert "more than 3 restarts in 60 s" in failed.reason


def test_the_window_slides() -> None:
    clock = FakeClock()
    t = tracker(clock, max_restarts=2, period_s=10)
    assert t.decide(True).restart
    clock.advance(6)
    assert t.decide(True).restart
    clock.advance(6)  # the first restart left the window
    assert t.decide(True).restart
    assert t.decide(True).failed
    t.reset()
    assert t.decide(True).restart


def test_backoff_is_capped() -> None:
    clock = FakeClock()
    t = tracker(clock, max_restarts=20, backoff_s=1, backoff_max_s=5)
    delays = [t.decide(True).delay_s for _ in range(6)]
    assert delays == [0, 1, 2, 4, 5, 5]


def test_transient_and_temporary() -> None:
    clock = FakeClock()
    transient = tracker(clock, mode="transient")
    assert not transient.decide(abnormal=False).restart
    assert transient.decide(abnormal=True).restart
    temporary = tracker(clock, mode="temporary")
    decision = temporary.decide(abnormal=True)
    assert not decision.restart
    assert not decision.failed


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"mode": "sometimes"}, "restart.mode"),
        ({"max_restarts": -1}, "restart.max_restarts"),
        ({"period_s": "long"}, "restart.period_s"),
        ({"retries": 3}, "restart.retries"),
    ],
)
def test_bad_policies_name_the_key(raw: dict[str, object], field: str) -> None:
    with pytest.raises(AotuiError) as refused:
        RestartPolicy.from_dict(raw)
    assert refused.value.code is ErrorCode.E_INVALID_CMD
    assert refused.value.data["field"] == field


def test_config_and_manifest_compose() -> None:
    config = DesktopConfig(restart_mode="transient", max_restarts=7)
    policy = config.restart_policy({"max_restarts": 2})
    assert policy.mode is RestartMode.TRANSIENT
    assert policy.max_restarts == 2
