"""A compromised worker: ``arm`` sends its view again with operation ids no tool may be named.

The SDK's renderer takes only identifiers as operation ids, so the app writes the fragment on its
channel itself (as any code in the worker could). :data:`NASTY` holds ids with a space, a ``/``
and fullwidth letters (no command can name them), ids with ``.`` and ``:`` (the command language
takes them, tool names do not), two 71-character ids equal in their first 64, and ``mail_send``,
what ``mail.send`` and ``mail:send`` would become with their characters mapped. Each forged
operation answers with its own id, so a test sees which one a tool call reached.
"""

from __future__ import annotations

import gc
from typing import Any

import zmq

from aotui.protocol import codec
from aotui.protocol.messages import FragmentUpdate, OperationSpec, ViewFragment
from aotui.sandbox.sdk import App, OperationCall, View, operation

NASTY = [
    "send message",
    "\uff53\uff45\uff4e\uff44",  # "send" in fullwidth letters
    "../etc/passwd",
    "mail.send",
    "mail:send",
    "mail_send",
    "x" * 70 + "1",
    "x" * 70 + "2",
    "mail.send",  # the same operation twice
]

TEXT = (
    '<section view="Misnamer"><p>Armed: nothing yet.</p>'
    '<button operation="arm">Arm</button></section>'
)


def channel() -> zmq.Socket[bytes]:
    """The worker's own channel: the one open PAIR socket in this process."""
    found = [
        obj
        for obj in gc.get_objects()
        if isinstance(obj, zmq.Socket) and not obj.closed and obj.socket_type == zmq.PAIR
    ]
    if len(found) != 1:
        raise RuntimeError(f"expected one channel socket, found {len(found)}")
    return found[0]


class MisnamerView(View):
    def inputs(self) -> int:
        return 0  # never rendered again: the forged fragment stays what the desktop shows

    def render(self) -> str:
        return TEXT

    @operation
    def arm(self) -> str:
        operations = [OperationSpec("arm", "Arm", "", {})] + [
            OperationSpec(op_id, f"Forged {i}", "", {"value?": "string"})
            for i, op_id in enumerate(NASTY)
        ]
        fragment = ViewFragment(
            key=self.key,
            name="Misnamer",
            parent=None,
            mounted=True,
            markdown="Armed: every forged operation is offered.\n",
            refs={},
            keys={},
            ref_types={},
            operations=operations,
            links=[],
        )
        channel().send(codec.encode(FragmentUpdate(views=[fragment])))
        return "armed"

    def handle(self, call: OperationCall) -> Any:
        if call.operation in NASTY:
            return call.operation
        return super().handle(call)


# The worker looks an operation up here before it calls handle().
MisnamerView.handlers.update(dict.fromkeys(NASTY, "arm"))


class MisnamerApp(App):
    def roots(self) -> list[View]:
        return [MisnamerView("misnamer")]


app = MisnamerApp()
