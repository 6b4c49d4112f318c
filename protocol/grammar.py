"""The command language an agent types (CONTRACT §5): ``<context>`` blocks of shell-like commands.

A message holds one or more blocks, with any prose around and between them::

    <context>open --application app_1</context>
    <context app_id="app_0">mount --view view_3; mount --view view_4</context>
    <context app_id="app_0" view_id="view_3">
      execute reply_message --message_to_be_replied message_history[0] --content "Hi, Johnny"
    </context>

:func:`parse_commands` returns every command of every block, in order. The whole message is parsed
before anything runs: one malformed command rejects the message, so a half-run message cannot happen
because of a typo. Every malformed input is an ``E_INVALID_CMD`` whose message says where (block,
command, line and column) and shows the correct form; ``.data`` carries the same facts.

Words follow the shell: ``;`` or a newline ends a command; whitespace separates words; ``"…"`` takes
``\\" \\\\ \\n \\t \\'`` escapes (any other backslash stays as written); ``'…'`` takes ``\\'`` and
``\\\\``; outside quotes a backslash escapes the next character; adjacent parts join (``"x"'y'`` is
``xy``). A line starting with ``--`` continues the previous command, as does a backslash at the end
of a line. A quoted word is always a value, even ``"--x"``. Block tags are found before quotes are
considered, so a value cannot contain ``<context`` or ``</context>`` unescaped.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from aotui.protocol.commands import ID_PATTERN, Action, ArgValues, Command
from aotui.protocol.errors import AotuiError, invalid_cmd

__all__ = ["COMMAND_FORMS", "parse_commands"]

#: The correct form of each command, as error messages show it.
COMMAND_FORMS = {
    "open": "<context>open --application app_1</context>",
    "close": "<context>close --application app_1</context>",
    "collapse": "<context>collapse --application app_1</context>",
    "show": '<context>show --application app_1</context> or <context app_id="app_0">'
    "show --view view_3</context>",
    "mount": '<context app_id="app_0">mount --view view_3</context>',
    "dismount": '<context app_id="app_0">dismount --view view_3</context>',
    "hide": '<context app_id="app_0">hide --view view_3</context>',
    "execute": '<context app_id="app_0" view_id="view_3">execute send_message --content "Hi"'
    "</context>",
}
_ALL_FORMS = (
    "open|close|collapse|show --application <app_id>; mount|dismount|hide|show --view <view_id> "
    '(in <context app_id="...">); execute <operation_id> [--arg value ...] '
    '(in <context app_id="..." view_id="...">)'
)
_ACTIONS: dict[tuple[str, str], Action] = {
    ("open", "application"): Action.OPEN_APPLICATION,
    ("close", "application"): Action.CLOSE_APPLICATION,
    ("collapse", "application"): Action.COLLAPSE_APPLICATION,
    ("show", "application"): Action.SHOW_APPLICATION,
    ("mount", "view"): Action.MOUNT_VIEW,
    ("dismount", "view"): Action.DISMOUNT_VIEW,
    ("hide", "view"): Action.HIDE_VIEW,
    ("show", "view"): Action.SHOW_VIEW,
}
_NOUNS = {"open": ("application",), "close": ("application",), "collapse": ("application",),
          "show": ("application", "view"), "mount": ("view",), "dismount": ("view",),
          "hide": ("view",), "execute": ()}  # fmt: skip
_ARTICLE = {"application": "an", "view": "a"}

# Outside blocks only the tags matter; prose may hold anything else, quotes included.
_TAG = re.compile(r"<context(?![\w-])|</context(?![\w-])")
_OPEN_TAG = re.compile(r"""<context([^<>"']*(?:(?:"[^"<>\n]*"|'[^'<>\n]*')[^<>"']*)*)>""")
_ATTR = re.compile(r"""\s*([^\s=>"'/]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>/]+)))?""")
# The body tokenizer covers every character, so finditer never skips one. Tags are recognized
# before quotes: a missing quote is reported where it is instead of swallowing the next block.
# Loops are unrolled (``a*(?:b a*)*`` with ``a`` and ``b`` disjoint): linear on any input, and about
# three times faster than a per-character alternation. No possessive quantifiers or atomic groups:
# CPython 3.11.0–3.11.4 match them wrongly next to a lookahead (``app_2</context`` for ``app_2``),
# and with disjoint classes and nothing after each branch they would save no backtracking anyway.
_NOT_TAG = r"<(?!/?context(?![\w-]))"
_PLAIN = r"""[^\s;"'\\<]"""
_BARE_ESC = rf"(?:\\[^\n]|{_NOT_TAG})"
_SPACE = r"[^\S\n]"
_CONTINUE = r"(?:\\\n|\n(?=[^\S\n]*--))"  # backslash-newline, or a newline before a -- line
_QUOTE_ESC = rf"(?:\\.|{_NOT_TAG})"
_TOKEN = re.compile(
    rf"""
      (?P<bare>(?:{_PLAIN}+|{_BARE_ESC}){_PLAIN}*(?:{_BARE_ESC}{_PLAIN}*)*)
    | (?P<ws>(?:{_SPACE}+|{_CONTINUE}){_SPACE}*(?:{_CONTINUE}{_SPACE}*)*)
    | (?P<sep>[;\n])
    | (?P<dq>"[^"\\<]*(?:{_QUOTE_ESC}[^"\\<]*)*")
    | (?P<sq>'[^'\\<]*(?:{_QUOTE_ESC}[^'\\<]*)*')
    | (?P<close></context\s*>)
    | (?P<open><context)
    | (?P<bad>.)
    """,
    re.VERBOSE | re.DOTALL,
)
# The tag as agents almost always write it; anything else takes the general attribute loop.
_PLAIN_ATTRS = re.compile(r'(?:\s+app_id="([\w.:-]+)"(?:\s+view_id="([\w.:-]+)")?)?\s*', re.ASCII)
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_DQ_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "'": "'", "\n": ""}
_SQ_ESCAPES = {"'": "'", "\\": "\\"}
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)\??")


def _dq_escape(m: re.Match[str]) -> str:
    return _DQ_ESCAPES.get(m.group(1), m.group())


def _sq_escape(m: re.Match[str]) -> str:
    return _SQ_ESCAPES.get(m.group(1), m.group())


class _Word(NamedTuple):
    """One shell word of a command, decoded."""

    text: str
    #: Offset of its first character in the message.
    pos: int
    #: Starts with an unquoted ``--``: an option.
    option: bool
    #: Starts with an unquoted single ``-``: a value, or a short option where a key belongs.
    dash: bool


class _Where(NamedTuple):
    """Where in the message a command sits, for error messages."""

    text: str
    block: int
    command: int


def _clip(text: str, limit: int = 40) -> str:
    """``text`` cut to ``limit`` characters: agent text echoed in an error stays short."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error(where: _Where, pos: int, message: str, token: str | None = None) -> AotuiError:
    """An ``E_INVALID_CMD`` that says where it went wrong: block, command, line and column."""
    line = where.text.count("\n", 0, pos) + 1
    column = pos - where.text.rfind("\n", 0, pos)
    place = f"context block {where.block}, " if where.block else ""
    place += f"command {where.command}, " if where.command else ""
    data: dict[str, object] = {"line": line, "column": column}
    if where.block:
        data["block"] = where.block
    if where.command:
        data["command"] = where.command
    if token is not None:
        data["token"] = _clip(token, 80)
    return invalid_cmd(f"{place}line {line} column {column}: {message}", **data)


def parse_commands(text: str) -> list[Command]:
    """Every command of every ``<context>`` block in ``text``, in order; or ``E_INVALID_CMD``."""
    if not isinstance(text, str):
        raise invalid_cmd(f"a command message must be text, got {type(text).__name__}")
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    commands: list[Command] = []
    pos = 0
    block = 0
    while (tag := _TAG.search(text, pos)) is not None:
        if tag.group().startswith("</"):
            raise _error(
                _Where(text, 0, 0), tag.start(),
                "</context> without an opening <context> tag", token="</context>",
            )  # fmt: skip
        block += 1
        pos = _parse_block(text, tag.start(), _Where(text, block, 0), commands)
    if block == 0:
        raise invalid_cmd(
            "no <context> block found; commands go inside one, e.g. "
            f"{COMMAND_FORMS['open']} or {COMMAND_FORMS['execute']}"
        )
    return commands


def _close_block(
    kind: str | None, m: re.Match[str], where: _Where, start: int, any_command: bool
) -> int:
    """Where a block ends at its ``close`` token; a nested ``open`` or ``bad`` token is refused."""
    if kind == "close":
        if not any_command:
            raise _error(
                where, start,
                f"the context block has no command; e.g. {COMMAND_FORMS['mount']}",
            )  # fmt: skip
        return m.end()
    if kind == "open":
        raise _error(
            where, m.start(),
            "a <context> cannot open inside another; close the first with </context>",
            token="<context",
        )  # fmt: skip
    raise _bad_token(where, m.group(), m.start())


def _parse_block(text: str, start: int, where: _Where, out: list[Command]) -> int:
    """Parse the block whose tag opens at ``start`` into ``out``; returns where the block ends."""
    tag = _OPEN_TAG.match(text, start)
    if tag is None:
        raise _error(
            where, start,
            'malformed <context> tag (a missing ">" or quote?); write <context app_id="app_0">',
            token="<context",
        )  # fmt: skip
    app_id, view_id = _read_attributes(tag.group(1), where, start)
    found = len(out)
    words: list[_Word] = []
    part: str | None = None  # the word being built, joined from adjacent parts
    part_pos = 0
    option = dash = False
    for m in _TOKEN.finditer(text, tag.end()):
        kind = m.lastgroup
        if kind == "bare" or kind == "dq" or kind == "sq":
            raw = m.group()
            if kind == "bare":
                value = _ESCAPE.sub(r"\1", raw) if "\\" in raw else raw
            elif kind == "dq":
                value = _ESCAPE.sub(_dq_escape, raw[1:-1]) if "\\" in raw else raw[1:-1]
            else:
                value = _ESCAPE.sub(_sq_escape, raw[1:-1]) if "\\" in raw else raw[1:-1]
            if part is None:
                part, part_pos = value, m.start()
                option = kind == "bare" and raw.startswith("--")
                dash = kind == "bare" and not option and raw.startswith("-")
            else:
                part += value
            continue
        if part is not None:
            words.append(_Word(part, part_pos, option, dash))
            part = None
        if kind == "ws":
            continue
        if words and kind != "open" and kind != "bad":
            cmd = _Where(text, where.block, len(out) - found + 1)
            out.append(_build_command(words, app_id, view_id, cmd))
            words = []
        if kind != "sep":
            return _close_block(kind, m, where, start, len(out) > found)
    raise _error(
        where, start,
        "the context block is never closed; end it with </context>", token="<context",
    )  # fmt: skip


def _bad_token(where: _Where, char: str, pos: int) -> AotuiError:
    """The error for a character the tokenizer cannot start a token with."""
    if char == '"':
        hint = 'unterminated " quote; close it, or write \\" for a literal quote'
    elif char == "'":
        hint = (
            "unterminated ' quote; close it, or put the value in double quotes: --content \"it's\""
        )
    elif char == "\\":
        hint = "a backslash at the end of the message escapes nothing"
    else:
        hint = "malformed closing tag; write </context>"
    return _error(where, pos, f"{hint} (a value cannot contain <context or </context>)", char)


def _read_attributes(region: str, where: _Where, start: int) -> tuple[str | None, str | None]:
    """``app_id`` and ``view_id`` from the inside of an opening tag."""
    plain = _PLAIN_ATTRS.fullmatch(region)
    if plain is not None:
        return plain.group(1), plain.group(2)
    found: dict[str, str] = {}
    body = region.rstrip()
    if body.endswith("/"):
        raise _error(where, start, f"<context/> holds no command; e.g. {COMMAND_FORMS['mount']}")
    pos = 0
    while pos < len(body):
        m = _ATTR.match(body, pos)
        if m is None or m.end() == pos:
            bad = body[pos:].strip()[:40]
            raise _error(
                where, start, f"malformed <context> attribute near {_clip(bad)!r}", token=bad
            )
        name, value = m.group(1), m.group(2)
        if value is None:
            value = m.group(3) if m.group(3) is not None else m.group(4)
        if name not in ("app_id", "view_id"):
            raise _error(
                where, start,
                f"unknown <context> attribute {_clip(name)!r}; only app_id and view_id exist: "
                '<context app_id="app_0" view_id="view_3">', token=name,
            )  # fmt: skip
        if name in found:
            raise _error(where, start, f"<context> attribute {name} given twice", token=name)
        if value is None:
            raise _error(where, start, f'attribute {name} needs a value: {name}="..."', name)
        if not ID_PATTERN.fullmatch(value):
            what = (
                "is empty" if not value else f"{_clip(value)!r} is not an id like app_0 or view_3"
            )
            raise _error(where, start, f"<context> attribute {name} {what}", token=value)
        found[name] = value
        pos = m.end()
    return found.get("app_id"), found.get("view_id")


def _read_options(
    words: list[_Word], first: int, verb: str, where: _Where
) -> dict[str, str | bool]:
    """``--key value`` / ``--key=value`` / ``--flag`` words from ``first`` on."""
    args: dict[str, str | bool] = {}
    i, n = first, len(words)
    while i < n:
        word = words[i]
        if not word.option:
            if word.dash:
                hint = f"short options are not supported, write -{_clip(word.text)}"
            else:
                hint = f"write options as --name value ({COMMAND_FORMS[verb]})"
            raise _error(where, word.pos, f"unexpected {_clip(word.text)!r}; {hint}", word.text)
        key, eq, inline = word.text[2:].partition("=")
        name = _KEY.fullmatch(key)
        if name is None:
            shown = _clip(word.text)
            message = f"{shown!r} is not an option name; names look like --content or --message_id"
            raise _error(where, word.pos, message, word.text)
        key = name.group(1)
        if key in args:
            raise _error(where, word.pos, f"--{_clip(key)} is given twice", word.text)
        i += 1
        if eq:
            args[key] = inline
        elif i < n and not words[i].option:
            args[key] = words[i].text
            i += 1
        else:
            args[key] = True
    return args


def _build_command(
    words: list[_Word], app_id: str | None, view_id: str | None, where: _Where
) -> Command:
    """One command from its words, checked against its context."""
    head = words[0]
    verb = head.text
    if head.option or head.dash or verb not in _NOUNS:
        raise _error(
            where, head.pos, f"unknown command {_clip(verb)!r}; expected {_ALL_FORMS}", verb
        )
    positional = None
    first = 1
    if len(words) > 1 and not words[1].option and not words[1].dash:
        positional, first = words[1], 2
    args = _read_options(words, first, verb, where)
    if verb == "execute":
        return _build_execute(head, positional, args, app_id, view_id, where)
    nouns = _NOUNS[verb]
    if positional is not None:
        if positional.text not in ("application", "view"):
            shown = _clip(positional.text)
            message = f"unexpected {shown!r}; write {verb} --{nouns[0]} {shown}"
            raise _error(where, positional.pos, message, positional.text)
        noun, key = positional.text, "id"
    else:
        given = [noun for noun in ("application", "view") if noun in args]
        if len(given) != 1:
            what = (
                "one of --application and --view, not both"
                if given
                else (f"--{' or --'.join(nouns)}")
            )
            raise _error(where, head.pos, f"{verb} takes {what}: {COMMAND_FORMS[verb]}", verb)
        noun = key = given[0]
    if noun not in nouns:
        wanted, got = (f"{_ARTICLE[n]} {n}" for n in (nouns[0], noun))
        raise _error(where, head.pos, f"{verb} takes {wanted}, not {got}: {COMMAND_FORMS[verb]}")
    target = _check_id(args.pop(key, None), f"--{key}", verb, head.pos, where)
    # open --fresh: start without the saved state (the way back for an app whose state breaks it).
    fresh = verb == "open" and noun == "application" and args.pop("fresh", None) is True
    if args:
        extra = next(iter(args))
        raise _error(
            where, head.pos, f"{verb} takes no --{_clip(extra)}; write {COMMAND_FORMS[verb]}", extra
        )
    action = _ACTIONS[verb, noun]
    if noun == "application":
        return Command(action, target, target, None, ArgValues({"fresh": True} if fresh else {}))
    if app_id is None:
        form = f'<context app_id="app_0">{verb} --view {_clip(target)}</context>'
        raise _error(where, head.pos, f"{verb} needs app_id on its context: {form}", verb)
    return Command(action, target, app_id, target, ArgValues())


def _build_execute(
    head: _Word,
    positional: _Word | None,
    args: dict[str, str | bool],
    app_id: str | None,
    view_id: str | None,
    where: _Where,
) -> Command:
    """An ``execute``, in either dialect: ``execute op …`` or ``execute operation --id op …``."""
    if positional is None:
        raise _error(
            where, head.pos, f"execute needs an operation id: {COMMAND_FORMS['execute']}", "execute"
        )
    if positional.text == "operation" and "id" in args:
        op_id = _check_id(args.pop("id"), "--id", "execute", head.pos, where)
    else:
        op_id = _check_id(positional.text, "the operation id", "execute", positional.pos, where)
    if app_id is None or view_id is None:
        missing = " and ".join(n for n, v in (("app_id", app_id), ("view_id", view_id)) if not v)
        form = (
            f'<context app_id="{app_id or "app_0"}" view_id="{view_id or "view_3"}">'
            f"execute {_clip(op_id)} ...</context>"
        )
        raise _error(where, head.pos, f"execute needs {missing} on its context: {form}", "execute")
    return Command(Action.EXECUTE, op_id, app_id, view_id, ArgValues(args))


def _check_id(value: str | bool | None, what: str, verb: str, pos: int, where: _Where) -> str:
    """``value`` if it is an id, else an error showing ``verb``'s correct form."""
    if isinstance(value, str) and ID_PATTERN.fullmatch(value):
        return value
    if value is None or value is True:
        problem = f"{what} needs a value"
    elif not value:
        problem = f"{what} is empty"
    else:
        problem = f"{what} {_clip(value)!r} is not an id (letters, digits, _ . : -)"
    raise _error(where, pos, f"{problem}: {COMMAND_FORMS[verb]}", what)
