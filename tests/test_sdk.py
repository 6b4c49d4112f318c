"""The app SDK's own logic: timers, handler registry, view registry."""

from __future__ import annotations

import pytest

from aotui.sandbox.sdk import App, OperationCall, View, operation


class Plain(View):
    def render(self) -> str:
        return '<section view="Plain"></section>'

    @operation("poke")
    def poke(self, call: OperationCall) -> str:
        return f"poked {call.args['n']}"


class Child(Plain):
    @operation("prod")
    def prod(self, call: OperationCall) -> str:
        return "prodded"


class Bare(App):
    def roots(self) -> list[View]:
        return [Plain("plain")]


def test_handlers_are_collected_per_class_and_inherited() -> None:
    assert Plain.handlers == {"poke": "poke"}
    assert Child.handlers == {"poke": "poke", "prod": "prod"}
    assert Child("c").handle(OperationCall("poke", {"n": 1})) == "poked 1"
    with pytest.raises(LookupError, match="no handler"):
        Plain("p").handle(OperationCall("prod", {}))


def test_late_repeating_timer_fires_once_and_skips_missed_intervals() -> None:
    app = Bare()
    fired: list[int] = []
    timer = app.call_every(1.0, lambda: fired.append(1))
    late = timer.when + 5.5  # five and a half intervals late
    for callback in app.due_callbacks(late):
        callback()
    assert fired == [1]
    assert timer.when == pytest.approx(late + 1.0)
    assert app.due_callbacks(late + 0.5) == []
    assert app.next_timer_delay(late) == pytest.approx(1.0)


def test_cancelled_and_one_shot_timers() -> None:
    app = Bare()
    fired: list[str] = []
    once = app.call_later(0.0, lambda: fired.append("once"))
    cancelled = app.call_later(0.0, lambda: fired.append("never"))
    cancelled.cancel()
    for callback in app.due_callbacks(once.when + 1):
        callback()
    assert fired == ["once"]
    assert app.next_timer_delay(once.when + 2) is None
    with pytest.raises(ValueError, match="positive"):
        app.call_every(0, lambda: None)


def test_posted_callbacks_run_on_the_loop() -> None:
    app = Bare()
    woken: list[bool] = []
    app.wakeup = lambda: woken.append(True)
    app.post(lambda: None)
    assert woken == [True]
    assert len(app.due_callbacks(0.0)) == 1
    assert app.due_callbacks(0.0) == []


def test_view_registry_and_links() -> None:
    app = Bare()
    root = app.add_view(Plain("plain"))
    assert app.add_view(Plain("plain")) is root  # idempotent by key
    html = root.link(Plain("child"), "A <child>", "desc")
    assert html == '<a view-link="child" description="desc">A &lt;child&gt;</a>'
    assert app.view("child") is not None
    assert app.view("unknown") is None
    with pytest.raises(RuntimeError, match="not attached"):
        Plain("loose").link_attrs(Plain("x"))
