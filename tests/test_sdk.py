"""The app SDK's own logic: typed operations, templates, timers, handler and view registries."""

from __future__ import annotations

import re
from typing import Any, Literal

import jinja2
import pytest

from aotui.protocol.args import parse_arg_schema
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.sandbox.render import render_view
from aotui.sandbox.sdk import App, OperationCall, Ref, View, operation
from aotui.sandbox.worker import WorkerLoop


class Plain(View[Any]):
    def render(self) -> str:
        return '<section view="Plain"></section>'

    @operation
    def poke(self, n: int) -> str:
        """Poke."""
        return f"poked {n}"


class Child(Plain):
    @operation
    def prod(self) -> str:
        """Prod."""
        return "prodded"


class Bare(App):
    def roots(self) -> list[View[Any]]:
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
    app.call_soon(lambda: None)
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


# --- operations declared once, by a typed method ------------------------------------------------


class Board(App):
    def __init__(self) -> None:
        super().__init__()
        self.cards: dict[str, str] = {"c1": "Plan <it> & do it"}
        self.calls: list[tuple[Any, ...]] = []

    def roots(self) -> list[View[Any]]:
        return [BoardView("board")]


class BoardView(View[Board]):
    """Typed by its app: ``self.app`` is a Board, with no isinstance check."""

    template = """
<section view="Board">
  <ul list="card[]:cards">
  {%- for key, text in app.cards.items() %}<li {{ view.item(key, {"text": text}) }}>{{ text }}</li>
  {%- endfor %}</ul>
  <p><b {{ view.entity("title", "board_title", {"v": 1}) }}>{{ app.cards["c1"] }}</b></p>
  {{ view.buttons() }}
</section>"""

    @operation
    def move_card(
        self, card: Ref[Literal["card"]], column: int, weight: float = 1.0, urgent: bool = False
    ) -> dict[str, Any]:
        """Move a card to another column.

        The second paragraph is not part of the description.
        """
        self.app.calls.append((card, column, weight, urgent))
        return {"moved": card.key}

    @operation(label="Rename!")
    def rename(self, text: str, note: str | None = None) -> None:
        """Rename the board"""
        self.app.calls.append((text, note))


def board() -> tuple[Board, BoardView]:
    app = Board()
    view = app.add_view(BoardView("board"))
    return app, view


def test_an_operation_is_declared_once_by_its_typed_method() -> None:
    _, view = board()
    rendered = render_view(view.render())
    move, rename = rendered.operations
    assert (move.op_id, move.label, move.description) == (
        "move_card",
        "Move Card",
        "Move a card to another column",
    )
    assert move.args == {
        "card": "card",
        "column": "integer",
        "weight?": "number",
        "urgent?": "boolean",
    }
    assert (rename.op_id, rename.label, rename.description) == (
        "rename",
        "Rename!",
        "Rename the board",
    )
    assert rename.args == {"text": "string", "note?": "string"}
    # The schema the markup declares is one the supervisor's own validator accepts as it is.
    assert parse_arg_schema(move.args).to_dict() == move.args
    assert BoardView.handlers == {"move_card": "move_card", "rename": "rename"}


def test_the_handler_receives_typed_arguments_and_refs() -> None:
    app, view = board()
    rendered = render_view(view.render())
    card = rendered.refs["cards[0]"]
    result = view.handle(
        OperationCall("move_card", {"card": card, "column": 2, "weight": 3}, {"card": "c1"})
    )
    assert result == {"moved": "c1"}
    assert app.calls == [(Ref("c1", {"text": "Plan <it> & do it"}), 2, 3.0, False)]
    assert isinstance(app.calls[0][2], float)  # a number given as 3 arrives as a float
    view.handle(OperationCall("rename", {"text": "New"}))
    assert app.calls[-1] == ("New", None)


@pytest.mark.parametrize(
    ("args", "keys", "message"),
    [
        ({"column": 1}, {}, "missing required argument --card"),
        ({"card": {}, "column": 1}, {}, "--card must reference a card"),
        ({"column": "2"}, {"card": "c1"}, "--column expects integer, got str"),
        ({"column": True}, {"card": "c1"}, "--column expects integer, got bool"),
    ],
)
def test_bad_calls_are_typed_errors(
    args: dict[str, Any], keys: dict[str, Any], message: str
) -> None:
    _, view = board()
    with pytest.raises(AotuiError) as info:
        view.handle(OperationCall("move_card", args, keys))
    assert info.value.code is ErrorCode.E_INVALID_CMD
    assert message in info.value.message


def test_templates_escape_every_value() -> None:
    app, view = board()
    app.cards["c2"] = '</li></ul><b operation="x">"quoted" & \'single\''
    rendered = render_view(view.render())
    assert rendered.refs["cards[1]"] == {"text": app.cards["c2"]}
    assert rendered.keys == {"cards[0]": "c1", "cards[1]": "c2", "board_title": "board_title"}
    assert '[</li></ul><b operation="x">"quoted" & \'single\'](card:cards[1])' in rendered.markdown
    assert rendered.refs["board_title"] == {"v": 1}
    assert [op.op_id for op in rendered.operations] == ["move_card", "rename"]


def test_a_misspelt_template_name_is_an_error_not_empty_text() -> None:
    class Typo(View[Board]):
        template = '<section view="Typo">{{ app.cardz }}</section>'

    view = Board().add_view(Typo("typo"))
    with pytest.raises(jinja2.UndefinedError, match="cardz"):
        view.render()


@pytest.mark.parametrize(
    ("signature", "message"),
    [
        ("def op(self, x: list[str]) -> None: ...", "parameter x has list[str]"),
        ("def op(self, x) -> None: ...", "parameter x has no annotation"),
        ("def op(self, x: str | None) -> None: ...", "give it a default"),
        ('def op(self, x: Ref["card"]) -> None: ...', "cannot read its parameter types"),
        ("def op(self, x: Ref[str]) -> None: ...", "parameter x has"),
        ("def op(self, *x: str) -> None: ...", "*x cannot be"),
    ],
)
def test_an_unsupported_parameter_type_is_named(signature: str, message: str) -> None:
    namespace: dict[str, Any] = {}
    source = f"from __future__ import annotations\nfrom aotui.sandbox.sdk import Ref\n{signature}"
    exec(compile(source, "<op>", "exec"), namespace)
    handler = operation(namespace["op"])
    bad = type(
        "Bad",
        (View,),
        {"op": handler, "template": '<section view="B">{{ view.buttons() }}</section>'},
    )
    with pytest.raises(TypeError, match=re.escape(message)):
        Board().add_view(bad("bad")).render()


def test_the_first_sdks_operation_form_is_refused_with_what_to_write() -> None:
    assert Plain("p").handle(OperationCall("poke", {"n": 2})) == "poked 2"
    with pytest.raises(TypeError, match=r"@operation\('poke'\) is the first SDK's form"):
        operation("poke")  # type: ignore[call-overload]  # the form issue 24 removed
    with pytest.raises(LookupError, match="no typed operation 'prod'"):
        Plain("p").button("prod")


def test_an_apps_own_operations_receive_events_typed() -> None:
    heard: list[str] = []

    class Told(App):
        def roots(self) -> list[View[Any]]:
            return [Plain("plain")]

        @operation
        def user_message(self, text: str) -> int:
            """What the user said."""
            heard.append(text)
            return len(heard)

    app = Told()
    assert app.handle_event(OperationCall("user_message", {"text": "hi"})) == 1
    assert heard == ["hi"]
    with pytest.raises(AotuiError, match="--text expects string"):
        app.handle_event(OperationCall("user_message", {"text": 3}))
    with pytest.raises(LookupError, match="does not accept event 'other'"):
        app.handle_event(OperationCall("other", {}))


def test_mount_hooks_run_when_the_worker_mounts_and_dismounts() -> None:
    seen: list[str] = []

    class Hooked(Plain):
        def on_mount(self) -> None:
            seen.append(f"mount {self.key}")

        def on_dismount(self) -> None:
            seen.append(f"dismount {self.key}")

    class HookedApp(App):
        def roots(self) -> list[View[Any]]:
            return [Hooked("root")]

        def resolve_view(self, key: str) -> View[Any] | None:
            return Hooked(key)

    app = HookedApp()
    loop = WorkerLoop(app, None, -1)  # type: ignore[arg-type]  # no channel: only views here
    for root in app.roots():
        app.add_view(root)
        loop.mount(root.key, root=True)
    loop.mount("child")
    loop.parents["child"] = "root"
    loop.mount("child")  # already mounted: no second hook
    loop.dismount("root")
    assert seen[:2] == ["mount root", "mount child"]
    assert sorted(seen[2:]) == ["dismount child", "dismount root"]  # the subtree, in any order


def test_app_services_are_final() -> None:
    # The chat app once overrode App.post with another signature, breaking it for every thread.
    for name in ("call_soon", "call_later", "call_every", "http", "view", "add_view"):
        assert getattr(getattr(App, name), "__final__", False), name
