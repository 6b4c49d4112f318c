"""Snapshots an agent can afford (issue 14): diffs, focus, token budgets and the fixed costs.

The end-to-end tests drive the bundled chat on a real desktop through the Python client,
JSON-RPC, the CLI and MCP; the unit tests pin the pieces (folding, shortening, the estimate).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from aotui.protocol.api import SnapshotParams
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.desktop.snapshot import Block, Snapshot, compose
from aotui.supervisor.desktop.snapshot_budget import fit_budget, shorten_lists
from aotui.supervisor.desktop.snapshot_diff import (
    FoldBudget,
    SeenBlocks,
    apply_fold,
    fold_unchanged,
)
from aotui.supervisor.desktop.snapshot_pull import PullOptions, select
from aotui.supervisor.desktop.tokens import estimate_tokens
from aotui.supervisor.interface.client import Client
from aotui.supervisor.interface.demo import import_demo_chat
from tests.conftest import RunningDesktop
from tests.rpc_peer import RpcPeer

Start = Callable[..., RunningDesktop]
CHAT = "app_0"
TAG = re.compile(r"^</?(desktop|application|application_info|view)\b[^>]*>$")


# --- helpers ------------------------------------------------------------------------------------


def view_id(text: str, label: str) -> str:
    """The view id a snapshot links ``label`` to (``[User](view:view_3)``)."""
    match = re.search(rf"\[{re.escape(label)}\]\(view:(view_\d+)", text)
    assert match is not None, f"no link to {label!r} in:\n{text}"
    return match[1]


def open_conversation(client: Client, title: str) -> str:
    """Mount Conversations and then conversation ``title``; returns its view id."""
    client.execute(f'<context app_id="{CHAT}">mount --view view_1</context>')
    conversation = view_id(client.snapshot(), title)
    client.execute(f'<context app_id="{CHAT}">mount --view {conversation}</context>')
    return conversation


def view_block(text: str, view: str) -> str | None:
    """The body of ``<view id="view">`` in ``text`` (the chat's block), if shown."""
    match = re.search(rf'<view id="{view}" name="[^"]*">\n(.*?)\n</view>', text, re.S)
    return None if match is None else match[1]


def balanced(text: str) -> bool:
    """Every structural tag is closed in order: shortening never cuts structure."""
    stack: list[str] = []
    for line in text.splitlines():
        match = TAG.match(line)
        if match is None:
            continue
        if line.startswith("</"):
            if not stack or stack.pop() != match[1]:
                return False
        else:
            stack.append(match[1])
    return not stack


@pytest.fixture
def chat(start_desktop: Start) -> RunningDesktop:
    """A desktop with the bundled chat (a system app: open from the start), given the
    conversations ``aotui demo`` gives it (a new chat has only the user's)."""
    desktop = start_desktop(["system/chat"])
    import_demo_chat(desktop.client)
    return desktop


def cl100k() -> object:
    bpe_openai = pytest.importorskip("bpe_openai", reason="the bench extra (bpe-openai)")
    return bpe_openai.get_encoding("cl100k_base")


# --- diffs, end to end ----------------------------------------------------------------------


def test_a_diff_sends_what_changed_and_its_refs_resolve_everywhere(chat: RunningDesktop) -> None:
    client = chat.client
    user = open_conversation(client, "User")
    johnny = open_conversation(client, "Johnny")
    for i in range(100):
        client.say(f"Message number {i} about the project")
    full = client.snapshot()
    base = client.snapshot_id
    assert base is not None
    client.say("one more message")
    diff = client.snapshot(since=base)
    assert client.snapshot_id != base

    assert diff.startswith(f'<desktop since="{base}">\n')
    assert "System Instructions" not in diff  # unchanged blocks are left out…
    assert view_block(diff, johnny) is None
    changed = view_block(diff, user)
    assert changed is not None  # …a changed one is sent with its unchanged runs folded
    assert "[one more message](message:message_history[49])" in changed
    # The page scrolled by one: its items fold, saying where their refs are now.
    assert f"message_history[1]–[49] in {base} are [0]–[48] now" in changed
    assert "Message number 60" not in changed
    # Exact: the view as it is now is its base plus the diff, byte for byte.
    base_view, now_view = view_block(full, user), view_block(chat.new_client().snapshot(), user)
    assert base_view is not None
    assert apply_fold(base_view, changed) == now_view
    assert len(diff) * 10 <= len(full), (len(diff), len(full))  # ≤ 10 % at 100 messages
    enc = cl100k()
    tokens = len(enc.encode(diff)) / len(enc.encode(full))  # type: ignore[attr-defined]
    assert tokens <= 0.10, tokens

    # The diff's id resolves refs of a view it left out (Johnny's did not change)…
    reply = f'<context app_id="{CHAT}" view_id="{johnny}">execute reply_message '
    client.execute(reply + '--message_to_be_replied message_history[0] --content "hi"</context>')
    # …and of the view it folded, at the index the diff says the item has now: the base's [1]
    # ("Message number 51", msg_55: the demo's messages are msg_1 to msg_3) is [0].
    reply = f'<context app_id="{CHAT}" view_id="{user}">execute reply_message '
    client.execute(reply + '--message_to_be_replied message_history[0] --content "ok"</context>')
    after = client.snapshot()
    assert "Reply To: msg_1" in (view_block(after, johnny) or "")
    assert "Reply To: msg_55" in (view_block(after, user) or "")


def test_a_diff_lists_what_is_gone_and_an_unknown_base_is_recoverable(
    chat: RunningDesktop,
) -> None:
    client = chat.client
    johnny = open_conversation(client, "Johnny")
    client.snapshot()
    base = client.snapshot_id
    client.execute(f'<context app_id="{CHAT}">dismount --view {johnny}</context>')
    diff = client.snapshot(since=base)
    first = diff.splitlines()[0]
    assert first == f'<desktop since="{base}" removed="{CHAT}/{johnny}">'
    previous = client.snapshot_id
    nothing = client.snapshot(since=previous)
    assert nothing == f'<desktop since="{previous}">\n</desktop>\n'  # nothing changed

    with pytest.raises(AotuiError) as stale:
        client.snapshot(since="T999999")
    assert stale.value.code is ErrorCode.E_STALE_STATE
    assert stale.value.recoverable
    assert "pull a full snapshot (without since)" in stale.value.message


# --- focus, budgets and the fixed costs over JSON-RPC -----------------------------------------


def test_focus_budget_and_instructions_over_json_rpc(chat: RunningDesktop) -> None:
    client = chat.client
    user = open_conversation(client, "User")
    for i in range(100):
        client.say(f"Message number {i} about the project")
    # Johnny touched last: the budget shortens the User conversation first.
    johnny = open_conversation(client, "Johnny")
    send = f'<context app_id="{CHAT}" view_id="{johnny}">execute send_message --content '
    for i in range(5):
        client.execute(send + f'"note {i}"</context>')

    with RpcPeer(chat.runtime / chat.name / "rpc.sock") as peer:
        whole = peer.call("snapshot")["markdown"]
        bare = peer.call("snapshot", include_instructions=False)["markdown"]
        assert "# System Instructions" in whole
        assert "# System Instructions" not in bare
        assert bare.startswith('<desktop>\n<view id="view_1" name="Applications">')

        # Cutting the 100-message conversation's list saves ~1,000 tokens: that alone fits.
        budget = estimate_tokens(bare) - 600
        short = peer.call("snapshot", max_tokens=budget, include_instructions=False)
        text = short["markdown"]
        assert estimate_tokens(text) <= budget
        enc = cl100k()
        assert len(enc.encode(text)) <= budget  # type: ignore[attr-defined]
        assert balanced(text)
        shortened = view_block(text, user) or ""
        assert "not shown to keep within the token budget" in shortened
        assert f"pull view {user} of app {CHAT} alone" in shortened
        assert "[note 4](message:message_history[5])" in (view_block(text, johnny) or "")
        assert "budget" not in (view_block(text, johnny) or "")
        # The shortened view's first and last items are there, whole; refs to the rest resolve.
        assert "(message:message_history[0])" in shortened
        assert "(message:message_history[49])" in shortened
        reply = {
            "app": CHAT,
            "view": user,
            "operation": "reply_message",
            "args": {"message_to_be_replied": "message_history[20]", "content": "seen"},
        }
        assert "error" not in peer.request("execute", **reply)

        focused = peer.call("snapshot", app="system.chat", view=johnny)["markdown"]
        assert focused.count("<view ") == 1
        assert f'<view id="{johnny}"' in focused
        assert "<application_info>" not in focused
        missing = peer.request("snapshot", app=CHAT, view="view_999")["error"]
        assert missing["data"]["code"] == "E_NOT_FOUND"
        assert "view_999" in missing["message"]
        bad = peer.request("snapshot", max_tokens=5)["error"]
        assert bad["data"]["code"] == "E_INVALID_CMD"
        assert "max_tokens" in bad["message"]
        lone = peer.request("snapshot", view=johnny)["error"]
        assert "view needs app" in lone["message"]

        diff = peer.call("snapshot", since=short["snapshot_id"], format="json")
        assert diff["since"] == short["snapshot_id"]
        assert diff["removed"] == []
        # A diff over JSON-RPC: the connection's refs resolve in a view it left out.
        client.say("one more")
        since = peer.call("snapshot", since=diff["snapshot_id"])["markdown"]
        assert view_block(since, johnny) is None
        answer = {
            "app": CHAT,
            "view": johnny,
            "operation": "reply_message",
            "args": {"message_to_be_replied": "message_history[0]", "content": "rpc"},
        }
        assert "error" not in peer.request("execute", **answer)
    assert "Reply To: msg_1" in (view_block(client.snapshot(), johnny) or "")


def test_system_logs_and_chat_say_each_thing_once(chat: RunningDesktop) -> None:
    client = chat.client
    user = open_conversation(client, "User")
    client.say("only once please")
    text = client.snapshot()
    assert "ChatWithUser opened (sandboxed)." in text
    assert "confinement:" not in text
    assert (view_block(text, user) or "").count("only once please") == 1
    layers = client.status()["apps"][0]["layers"]
    assert "seccomp" in layers  # the layer list is status's


# --- the CLI and MCP -----------------------------------------------------------------------------


def aotui(desktop: RunningDesktop, *args: str) -> subprocess.CompletedProcess[str]:
    where = ["--desktop", desktop.name, "--socket", str(desktop.runtime)]
    return subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", *args, *where],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.timeout(90)
def test_cli_since_focus_budget_and_no_instructions(chat: RunningDesktop) -> None:
    client = chat.client
    johnny = open_conversation(client, "Johnny")
    first = aotui(chat, "snapshot", "--json", "--session", "cli", "--no-instructions")
    assert first.returncode == 0, first.stderr
    pulled = json.loads(first.stdout)
    assert "System Instructions" not in pulled["markdown"]
    client.say("from the user")
    since = ("--since", pulled["snapshot_id"], "--no-instructions")
    diff = aotui(chat, "snapshot", "--plain", "--session", "cli", *since)
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.startswith(f'<desktop since="{pulled["snapshot_id"]}">')
    assert "Last Message: from the user" in diff.stdout
    assert "System Instructions" not in diff.stdout
    assert view_block(diff.stdout, johnny) is None
    # Refs of the left-out view resolve in the session's diff.
    reply = (
        f'<context app_id="{CHAT}" view_id="{johnny}">execute reply_message '
        f'--message_to_be_replied message_history[0] --content "yes"</context>'
    )
    done = aotui(chat, "exec", "--session", "cli", reply)
    assert done.returncode == 0, done.stderr

    focused = aotui(chat, "snapshot", "--plain", "--app", "system.chat", "--view", johnny)
    assert focused.returncode == 0, focused.stderr
    assert "Reply To: msg_1" in focused.stdout
    small = aotui(chat, "snapshot", "--plain", "--max-tokens", "300")
    assert small.returncode == 0, small.stderr
    assert estimate_tokens(small.stdout) <= 300 or "over max_tokens 300" in small.stdout
    assert balanced(small.stdout)
    stale = aotui(chat, "snapshot", "--since", "T999999")
    assert stale.returncode == 75
    assert "pull a full snapshot" in stale.stderr


@pytest.mark.timeout(90)
def test_mcp_sends_instructions_once_and_diffs_since_last(
    chat: RunningDesktop, tmp_path: Path
) -> None:
    anyio = pytest.importorskip("anyio")
    from mcp import ClientSession, StdioServerParameters, types
    from mcp.client.stdio import stdio_client

    johnny = open_conversation(chat.client, "Johnny")
    server = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "aotui.supervisor",
            "mcp",
            "--desktop",
            chat.name,
            "--socket",
            str(chat.runtime),
        ],
    )

    def text(result: types.CallToolResult) -> str:
        block = result.content[0]
        assert isinstance(block, types.TextContent)
        return block.text

    async def main() -> None:
        with (tmp_path / "mcp.err").open("w") as errlog:
            async with (
                stdio_client(server, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                init = await session.initialize()
                assert "# System Instructions" in (init.instructions or "")
                first = text(await session.call_tool("snapshot", {}))
                assert "# System Instructions" not in first
                assert f'<view id="{johnny}"' in first
                chat.client.say("hello over mcp")
                diff = text(await session.call_tool("snapshot", {"since": "last"}))
                assert diff.startswith('<desktop since="T')
                assert "Last Message: hello over mcp" in diff
                assert view_block(diff, johnny) is None
                reply = {
                    "app": CHAT,
                    "view": johnny,
                    "operation": "reply_message",
                    "args": {"message_to_be_replied": "message_history[0]", "content": "hey"},
                }
                replied = await session.call_tool("call_operation", reply)
                assert not replied.isError, text(replied)
                short = text(await session.call_tool("snapshot", {"max_tokens": 400}))
                assert balanced(short)
                stale = await session.call_tool("snapshot", {"since": "T999999"})
                assert stale.isError
                assert json.loads(text(stale))["code"] == "E_STALE_STATE"

    anyio.run(main)
    assert "Reply To: msg_1" in (view_block(chat.client.snapshot(), johnny) or "")


# --- units ----------------------------------------------------------------------------------


def test_folding_maps_moved_refs_and_keeps_changed_lines() -> None:
    items = [
        f"{i + 1}. [m{n}](message:history[{i}])\n    - At: {n}" for i, n in enumerate(range(5))
    ]
    moved = [
        f"{i + 1}. [m{n}](message:history[{i}])\n    - At: {n}" for i, n in enumerate(range(1, 6))
    ]
    base = "## Chat\n" + "\n".join(items) + "\n#### Operations"
    now = "## Chat\n" + "\n".join(moved) + "\n#### Operations"
    folded = fold_unchanged(base, now, "T3")
    assert folded is not None
    assert "… 3 lines gone …\n## Chat" in folded  # a 1-line run is sent, after what it replaces
    assert "history[1]–[4] in T3 are [0]–[3] now" in folded
    assert "5. [m5](message:history[4])" in folded
    assert apply_fold(base, folded) == now
    assert fold_unchanged("a\nb", "c\nd", "T3") is None  # nothing to fold: sent whole


def test_folding_costs_at_most_the_pulls_budget() -> None:
    """difflib is quadratic: a hostile view's worst case is sent whole, not compared."""
    rows = [f"- {'abc'[i % 3]}" for i in range(3000)]
    base, text = "\n".join(rows), "\n".join(reversed(rows))
    budget = FoldBudget(pairs=1_000_000)
    assert fold_unchanged(base, text, "T1", budget) is None  # 3,000² pairs: over, not tried
    assert budget.pairs == 1_000_000
    # An append costs its own lines only: head and tail are matched in linear time.
    grown = base + "\n- d"
    assert fold_unchanged(base, grown, "T1", budget) == "… 3000 lines …\n- d"
    assert budget.pairs == 1_000_000


def test_shortening_keeps_first_and_last_items_whole() -> None:
    body = "\n".join(
        ["# Notes", *(f"- [n{i}](note:notes[{i}])\n    - Text: t{i}" for i in range(10)), "end"]
    )
    short = shorten_lists(body, "pull view view_1 of app app_0 alone")
    lines = short.splitlines()
    assert lines[:3] == ["# Notes", "- [n0](note:notes[0])", "    - Text: t0"]
    assert lines[3].startswith("- … 8 more note items (notes[1]–[8]) not shown")
    assert lines[4:] == ["- [n9](note:notes[9])", "    - Text: t9", "end"]
    assert shorten_lists("- [a](x:l[0])\n- [b](x:l[1])", "w") == "- [a](x:l[0])\n- [b](x:l[1])"


def _snapshot(*bodies: str) -> Snapshot:
    blocks = [Block("view_0", '<view id="view_0" name="System Instructions">', "rules", "</view>")]
    for i, body in enumerate(bodies, start=1):
        tag = f'<view id="view_{i}" name="V{i}">'
        blocks.append(Block(f"app_0/view_{i}", tag, body, "</view>", "app_0", f"view_{i}"))
    tags = {"app_0": '<application id="app_0" name="A">'}
    return Snapshot(compose(blocks, tags), {}, (), tuple(blocks), tags)


def test_the_budget_shortens_the_least_recently_touched_first() -> None:
    body = "\n".join(f"- [item {i} text here](x:items[{i}])" for i in range(60))
    snap = _snapshot(body, body)
    touched = {"app_0/view_1": 1.0, "app_0/view_2": 2.0}
    total = estimate_tokens(snap.markdown)
    pulled = select(snap, PullOptions(max_tokens=total - 100), None, touched)
    old, recent = view_block(pulled.markdown, "view_1"), view_block(pulled.markdown, "view_2")
    assert old is not None
    assert "not shown to keep within the token budget" in old
    assert recent == body
    assert pulled.seen["app_0/view_1"] == old  # a later diff resends what was shortened
    tight, fits = fit_budget(list(snap.blocks), 60, touched, lambda b: compose(b, snap.app_tags))
    assert not fits
    assert balanced(compose(tight, snap.app_tags))
    assert tight[0].body == "rules"  # the instructions are never shortened


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"since": 12}, "since"),
        ({"view": "view_1"}, "view needs app"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": 10}, "max_tokens"),
        ({"include_instructions": "no"}, "include_instructions"),
    ],
)
def test_bad_pull_options_are_typed_errors(params: dict[str, object], says: str) -> None:
    with pytest.raises(AotuiError) as bad:
        PullOptions.of(SnapshotParams.parse(params))
    assert bad.value.code is ErrorCode.E_INVALID_CMD
    assert says in bad.value.message


def test_seen_blocks_share_unchanged_text_and_stay_bounded() -> None:
    seen = SeenBlocks(2)
    text = "x" * 1000
    seen.record("T1", {"a": text})
    seen.record("T2", {"a": "".join(["x"] * 1000)})  # equal, another object
    t1, t2 = seen.get("T1"), seen.get("T2")
    assert t1 is not None
    assert t2 is not None
    assert t1["a"] is t2["a"]
    seen.record("T3", {"a": "y"})
    assert seen.get("T1") is None
    assert seen.held_bytes == 1001  # T2's text (shared with T1, counted once) and T3's


def test_a_base_expires_with_the_snapshot_ttl() -> None:
    now = [100.0]
    seen = SeenBlocks(8, ttl_s=600.0, clock=lambda: now[0])
    seen.record("T1", {"view_1": "apps"})
    now[0] += 599.0
    assert seen.get("T1") == {"view_1": "apps"}
    now[0] += 2.0
    assert seen.get("T1") is None  # the desktop answers E_STALE_STATE: pull a full snapshot


def test_seen_blocks_hold_at_most_their_bytes() -> None:
    """A view that changes on every pull cannot make the diff bases grow the supervisor."""
    seen = SeenBlocks(256, max_bytes=10_000)
    for i in range(20):
        seen.record(f"T{i}", {"app_0/view_0": str(i) * 3000, "view_1": "same"})
    assert seen.held_bytes <= 10_000
    assert seen.get("T19") is not None
    assert seen.get("T0") is None
    seen.record("T20", {"app_0/view_0": "x" * 50_000})  # the newest stays, even over the bound
    assert seen.get("T20") is not None
    assert seen.get("T19") is None


def test_the_estimate_is_never_below_real_tokens() -> None:
    enc = cl100k()
    samples = [
        (Path(__file__).parent / "golden" / "chat_group.md").read_text(),
        "- [2026-11-23 12:11:22] Notes restarted (sandboxed).\n" * 40,
        "你好，世界。这是一个测试消息。" * 30,
        "émojis 😀🎉 ñ and {json: [1, 2, 3]} <tags> `code` ~!@#$%^&*()" * 20,
        "".join(chr(i) for i in range(33, 127)) * 10,
    ]
    for sample in samples:
        real = len(enc.encode(sample))  # type: ignore[attr-defined]
        assert estimate_tokens(sample) >= real, sample[:40]
