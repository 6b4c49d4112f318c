"""One declared client API (protocol/api.py): every face checks a call the same way, every
answer is what its declaration says, and the Python client's answers are typed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from aotui.protocol import api
from aotui.protocol.api import AppStatus, Face, ParamError
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.interface.jsonrpc import INVALID_PARAMS, RpcFailure, parse_line
from tests.conftest import RunningDesktop
from tests.rpc_peer import RpcPeer
from tests.test_jsonrpc import rpc_path

pytestmark = pytest.mark.timeout(60)

Start = Callable[..., RunningDesktop]


@pytest.fixture
def desktop(start_desktop: Start) -> RunningDesktop:
    return start_desktop(["echo", "lister"])


@pytest.fixture
def peer(desktop: RunningDesktop) -> Iterator[RpcPeer]:
    with RpcPeer(rpc_path(desktop)) as connected:
        yield connected


#: Calls that break their declaration, each in another way, on both sockets.
BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("snapshot", {"max_tokens": True}, "parameter 'max_tokens' of snapshot must be an integer"),
    ("snapshot", {"max_tokens": 10}, "must be an integer ≥ 200"),
    ("snapshot", {"format": "xml"}, "must be one of markdown, json"),
    ("snapshot", {"colour": "red"}, "snapshot has no parameter 'colour' (it takes: app, view"),
    ("exec", {}, "exec needs the parameter 'text'"),
    ("exec", {"text": 5}, "parameter 'text' of exec must be a string"),
    ("wait_for", {"reason": "tuesday"}, "must be one of dom_mutation, app_opened"),
    ("wait_for", {"quiet_ms": -1}, "must be an integer ≥ 0"),
    ("confirmation", {"confirmation": ""}, "must be a non-empty string"),
]


@pytest.mark.parametrize(("method", "params", "says"), BAD_CALLS)
def test_both_sockets_refuse_a_bad_call_with_the_same_words(
    desktop: RunningDesktop, peer: RpcPeer, method: str, params: dict[str, Any], says: str
) -> None:
    with pytest.raises(AotuiError) as over_control:
        desktop.client.call(method, **params)
    assert over_control.value.code is ErrorCode.E_INVALID_CMD
    assert says in over_control.value.message
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    failure = parse_line(line.encode())
    assert isinstance(failure, RpcFailure)
    assert failure.code == INVALID_PARAMS
    # The same words; only the names a face offers differ (JSON-RPC's as_control, ...).
    assert failure.message.split("(it takes")[0] == over_control.value.message.split("(it takes")[0]
    answer = peer.request(method, **params)  # the desktop's own answer on rpc.sock
    assert answer["error"]["code"] == INVALID_PARAMS
    assert says in answer["error"]["message"]


def test_a_method_a_face_is_not_offered_is_unknown_there(
    desktop: RunningDesktop, peer: RpcPeer
) -> None:
    with pytest.raises(AotuiError) as control:  # JSON-RPC's alone
        desktop.client.call("subscribe_events")
    assert "unknown method 'subscribe_events'" in control.value.message
    assert peer.request("install", path="/tmp")["error"]["code"] == -32601  # the control's alone


def test_every_answer_is_its_declared_result(desktop: RunningDesktop, peer: RpcPeer) -> None:
    # strict: an answer with a field its declaration lacks, or lacking one it declares, fails.
    client = desktop.client
    answers: list[tuple[str, dict[str, Any]]] = [
        ("ping", client.call("ping")),
        ("status", client.call("status")),
        ("snapshot", client.call("snapshot", include_meta=True)),
        ("snapshot", client.call("snapshot", format="json")),
        ("exec", client.call("exec", text="<context>open --application app_0</context>")),
        ("execute", client.call("execute", app="app_0", view="view_0", operation="bump")),
        ("wait_for", client.call("wait_for", quiet_ms=0)),
        ("confirmations", client.call("confirmations")),
        ("status", peer.call("status")),
        (
            "snapshot",
            peer.call("snapshot", format="json", since=peer.call("snapshot")["snapshot_id"]),
        ),
    ]
    lease = desktop.new_client(owner="typed")
    grant = lease.call("acquire", owner="typed")
    answers.append(("acquire", grant))
    answers.append(("heartbeat", lease.call("heartbeat", token=grant["token"])))
    for method, answer in answers:
        declared = api.METHODS[method].result
        assert declared is not None, method
        typed = declared.from_wire(answer, strict=True)
        assert typed == answer, method


def test_the_client_answers_with_typed_records(desktop: RunningDesktop) -> None:
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    status = client.status()
    assert isinstance(status, api.StatusResult)
    echo = next(app for app in status.apps if app.app == "app_0")
    assert isinstance(echo, api.AppStatusRecord)
    assert echo.state is AppStatus.RUNNING
    assert echo["state"] == "running"  # read by key as the wire's dict, and JSON as it
    assert json.loads(json.dumps(status))["apps"][0]["state"] in {s.value for s in AppStatus}
    ran = client.execute({"app": "app_0", "view": "view_0", "operation": "bump"})
    assert isinstance(ran, api.ExecResult)
    assert ran.ran == 1
    assert client.ping().pid == desktop.process.pid
    waited = client.wait(quiet_ms=0)
    assert (waited.until, type(waited.waited_ms)) == ("quiet_ms", int)


def test_a_record_refuses_what_its_declaration_does_not_have() -> None:
    with pytest.raises(ParamError, match="snapshot has no parameter 'release'"):
        api.SnapshotParams.parse({"release": "T1"}, Face.JSONRPC)  # the control socket's alone
    assert api.SnapshotParams.parse({"release": "T1"}).release == "T1"
    with pytest.raises(ParamError, match="execute needs the parameter 'app'"):
        api.ExecuteParams.parse({"operation": "x", "view": "view_0"}, Face.MCP)
    api.ExecuteParams.parse({"action": "open_application", "app": "app_0"}, Face.JSONRPC)
    with pytest.raises(TypeError):
        api.ExecParams(txt="typo")
