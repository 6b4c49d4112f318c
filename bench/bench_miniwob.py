"""MiniWoB++ solved by a scripted agent that reads only our Markdown and acts only by commands.

Issue 23's last figure: a real desktop with the bundled Browser (a copy granted
``net:http:localhost``, the desktop's ``allow_private_http`` on, as tests/test_browser_app.py
starts it) opens the task pages of pip ``miniwob`` (served unmodified on loopback, HTML as UTF-8)
in its tab. For each scripted task type and each episode the agent:

1. reads the tab (``snapshot --app --view``) and clicks the ``START`` cover by its ref (the page
   then generates its problem with its own randomness: no seed is set);
2. reads the instruction (the first line of the page's Markdown) and acts with the tab's
   operations (``click``, ``type``, ``check``, ``select`` …, by ``page[N]`` refs read from the
   same Markdown), reading the page again after each step that changes it;
3. reads the reward where a person would: the page's ``Last reward: X`` and ``Episodes done: N``
   lines (``wait_for --text`` the next episode count first).

Nothing is evaluated in the page: the agent's decisions come only from the snapshot text and the
commands' replies. The reward is MiniWoB's own (time-discounted: ``1 - elapsed / 10 s`` on
success for most tasks, -1 on a wrong answer or a timeout). An episode whose script fails (an
element it looked for is not in the Markdown) counts -1 and the page is loaded again.

Run: ``python bench/bench_miniwob.py [--quick] [--episodes N] [--only a,b] [--verbose]``
(``--quick``: 3 episodes per task type instead of 10). Goal: at least 25 task types with a mean
reward of at least 0.9.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aotui.protocol.errors import AotuiError  # noqa: E402
from aotui.sandbox import browser  # noqa: E402
from aotui.supervisor.manifest import BUNDLED_APPS_DIR  # noqa: E402
from bench.bench_desktop import Desktop  # noqa: E402
from bench.loopback import Quiet, serve  # noqa: E402

GOAL_TYPES = 25
GOAL_REWARD = 0.9
EPISODES = 10
QUICK_EPISODES = 3
_REF = re.compile(r"\[((?:[^\[\]]|\[[^\]]*\])*)\]\(control:(page\[\d+\])\)")
_QUOTED = re.compile(r'"([^"]*)"')


class Failed(Exception):
    """The script found no way on: what it looked for and did not find in the Markdown."""


# --- the page, on loopback -----------------------------------------------------------------------


class _Site(Quiet):
    def guess_type(self, path: str | os.PathLike[str]) -> str:
        # The pages declare no charset: served as UTF-8, which they are.
        kind = super().guess_type(path)
        return f"{kind}; charset=utf-8" if kind == "text/html" else kind


@contextlib.contextmanager
def _serve(directory: Path) -> Iterator[str]:
    with serve(directory, _Site) as port:
        yield f"http://localhost:{port}"  # the grant is net:http:localhost


# --- the agent -----------------------------------------------------------------------------------


class Agent:
    """One Browser tab, read as Markdown and driven by ``execute`` of its operations."""

    def __init__(self, tmp: Path) -> None:
        app = Path(shutil.copytree(BUNDLED_APPS_DIR / "browser", tmp / "browser"))
        manifest = json.loads((app / "aoapp.json").read_text())
        manifest["permissions"] = ["net:http:localhost"]
        (app / "aoapp.json").write_text(json.dumps(manifest))
        self.desktop = Desktop([app], allow_private_http=True)
        self.client = self.desktop.client
        self.client.execute("<context>open --application app_0</context>")
        shown = self.client.snapshot(include_instructions=False)
        views = re.findall(r'<view id="(view_\d+)" name="([^"]*)">', shown)
        self.view = next(view for view, name in views if name != "Tabs")
        self.commands = 0
        self.restarts = 0
        self.text = ""

    def close(self) -> None:
        self.desktop.close()

    def run(self, command: str) -> Any:
        self.commands += 1
        context = f'<context app_id="app_0" view_id="{self.view}">execute {command}</context>'
        return self.client.execute(context)["results"][0]

    def recover(self, url: str) -> None:
        """Load the task page again; open the Browser again first if it has failed."""
        try:
            self.run(f"navigate --url {url}")
        except AotuiError as exc:
            print(f"   the Browser failed ({exc.code}); opening it again")
            self.restarts += 1
            self.client.execute("<context>open --application app_0</context>")
            shown = self.client.snapshot(include_instructions=False)
            views = re.findall(r'<view id="(view_\d+)" name="([^"]*)">', shown)
            self.view = next(view for view, name in views if name != "Tabs")
            self.run(f"navigate --url {url}")

    def read(self) -> str:
        """The tab's page: its Markdown without the URL line and the operations list."""
        shown = self.client.snapshot(app="app_0", view=self.view)
        body = shown.split("#### Operations")[0]
        lines = [line for line in body.splitlines() if line.strip()]
        lines = [line for line in lines if not line.startswith(("<", "URL: "))]
        self.text = "\n".join(lines)
        return self.text

    # What an agent does with the Markdown it read.

    def refs(self) -> list[tuple[str, str]]:
        return [(label, ref) for label, ref in _REF.findall(self.text)]

    def ref(self, label: str, nth: int = 0) -> str:
        found = [ref for shown, ref in self.refs() if shown == label]
        if len(found) <= nth:
            raise Failed(f"no control labelled {label!r}")
        return found[nth]

    def ref_like(self, pattern: str, nth: int = 0) -> str:
        found = [ref for shown, ref in self.refs() if re.fullmatch(pattern, shown)]
        if len(found) <= nth:
            raise Failed(f"no control like {pattern!r}")
        return found[nth]

    def fields(self) -> list[str]:
        return [ref for label, ref in self.refs() if label.startswith("[input")]

    def click(self, label: str, nth: int = 0) -> None:
        self.run(f"click --target {self.ref(label, nth)}")

    def type(self, ref: str, text: str) -> None:
        self.run(f"type --target {ref} --text {json.dumps(text)}")

    def instruction(self) -> str:
        return self.text.splitlines()[0] if self.text else ""

    def read_until(self, found: Callable[[str], bool], tries: int = 8) -> bool:
        """Read again (0.1 s apart) until ``found`` holds for the text: a page that animates."""
        for _ in range(tries):
            if found(self.read()):
                return True
            time.sleep(0.1)
        return False

    def quoted(self) -> list[str]:
        return _QUOTED.findall(self.instruction())

    def line_value(self, prefix: str) -> str | None:
        for line in self.text.splitlines():
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        return None


# --- the scripts: one per task type, from the instruction and the Markdown only ------------------


def _click_quoted(agent: Agent) -> None:
    agent.click(agent.quoted()[0])


def click_button_sequence(agent: Agent) -> None:
    agent.click("ONE")
    agent.read()
    agent.click("TWO")


def click_test_2(agent: Agent) -> None:
    agent.click(re.search(r"Click button (\w+)", agent.instruction()).group(1))  # type: ignore[union-attr]


def click_test(agent: Agent) -> None:
    agent.click("Click Me!")


def _select_listed(agent: Agent, box: str) -> None:
    wanted = re.match(r"Select (.*) and click Submit\.", agent.instruction())
    if wanted is None:
        raise Failed("no 'Select … and click Submit.' instruction")
    names = [] if wanted.group(1) == "nothing" else re.split(r", | and ", wanted.group(1))
    for name in names:
        agent.run(f"check --target {agent.ref(f'{box} {name}')}")
    agent.click("Submit")


def click_checkboxes(agent: Agent) -> None:
    _select_listed(agent, "[ ]")


def click_option(agent: Agent) -> None:
    _select_listed(agent, "( )")


def click_tab(agent: Agent) -> None:
    agent.click(re.search(r"Click on (Tab #\d+)", agent.instruction()).group(1))  # type: ignore[union-attr]


def click_tab_2(agent: Agent) -> None:
    link = agent.quoted()[0]
    tabs = [label for label, _ in agent.refs() if re.fullmatch(r"(Tab #)?\d+", label)]
    for tab in ["", *tabs]:  # the tab shown first
        if tab:
            agent.click(tab)
            agent.read()
        if "[START](control:" in agent.text:
            return  # the tab's click ended the episode
        if link in [label for label, _ in agent.refs()]:
            agent.click(link)
            return
    raise Failed(f"link {link!r} on no tab")


def click_dialog(agent: Agent) -> None:
    agent.click("Close")


def click_dialog_2(agent: Agent) -> None:
    wanted = agent.quoted()[0]
    agent.click("Close" if wanted == "x" else wanted)


def click_widget(agent: Agent) -> None:
    kind = agent.quoted()[0]
    patterns = {
        "checkbox": r"\[[ x]\] .*",
        "radio": r"\([ x*]\) .*",
        "text": r"\[input[^\]]*\]",
        "textarea": r"\[textarea[^\]]*\]",
        "button": r"[^\[(].*",
    }
    if kind not in patterns:
        raise Failed(f"widget kind {kind!r}")
    agent.run(f"click --target {agent.ref_like(patterns[kind])}")


def click_collapsible(agent: Agent) -> None:
    section = agent.ref_like(r"Section #\d+")
    agent.run(f"click --target {section}")
    agent.read()
    agent.click("Submit")


def _type_and_submit(agent: Agent, text: str) -> None:
    agent.type(agent.fields()[0], text)
    agent.click("Submit")


def enter_text(agent: Agent) -> None:
    _type_and_submit(agent, agent.quoted()[0])


def enter_text_2(agent: Agent) -> None:
    text = agent.quoted()[0]
    lower = "lower case" in agent.instruction()
    _type_and_submit(agent, text.lower() if lower else text.upper())


def enter_password(agent: Agent) -> None:
    password = agent.quoted()[0]
    for field in agent.fields():
        agent.type(field, password)
    agent.click("Submit")


def focus_text(agent: Agent) -> None:
    agent.run(f"click --target {agent.fields()[0]}")


def focus_text_2(agent: Agent) -> None:
    nth = int(re.search(r"(\d+)(?:st|nd|rd|th) input", agent.instruction()).group(1))  # type: ignore[union-attr]
    agent.run(f"click --target {agent.fields()[nth - 1]}")


def _dismiss(agent: Agent) -> bool:
    """A popup the page opens on a field's focus ("Exit to home page?"): its Cancel."""
    agent.read()
    if "Exit to home page?" not in agent.text:
        return False
    agent.click("Cancel")
    agent.read()
    return True


def login_user(agent: Agent) -> None:
    user, password = agent.quoted()[:2]
    username, secret = agent.fields()[:2]
    for field, text in ((username, user), (secret, password)):
        agent.type(field, text)
        if _dismiss(agent):  # the popup disabled the form while it was shown: type again
            agent.type(field, text)
    agent.read()
    button = next(label for label, _ in agent.refs() if label in ("Login", "OK", "Submit"))
    agent.click(button)


def choose_list(agent: Agent) -> None:
    wanted = re.match(r"Select (.*) from the list", agent.instruction())
    if wanted is None:
        raise Failed("no 'Select … from the list' instruction")
    field = agent.ref_like(r"\[select: .*")
    agent.run(f"select --target {field} --value {json.dumps(wanted.group(1))}")
    agent.click("Submit")


def enter_date(agent: Agent) -> None:
    date = re.search(r"Enter (\S+) as the date", agent.instruction()).group(1)  # type: ignore[union-attr]
    month, day, year = date.split("/")
    _type_and_submit_field(agent, agent.ref_like(r"\[input type=\"date\".*"), f"{month}{day}{year}")


def enter_time(agent: Agent) -> None:
    when = re.search(r"Enter (.*) as the time", agent.instruction()).group(1)  # type: ignore[union-attr]
    hours, rest = when.split(":")
    minutes, half = rest.split(" ")
    hours = hours.zfill(2)  # "1" then the minutes' "0" would make 10
    _type_and_submit_field(
        agent, agent.ref_like(r"\[input type=\"time\".*"), f"{hours}{minutes}{half[0]}"
    )


def _type_and_submit_field(agent: Agent, ref: str, keys: str) -> None:
    # `type` inserts text, which a date or time field ignores; a click focuses the segment under
    # the pointer (the field's centre): arrows move to the first segment, then keys fill each.
    agent.run(f"click --target {ref}")
    for key in ("ArrowLeft", "ArrowLeft", *keys):
        agent.run(f"press --key {key}")
    agent.click("Submit")


def use_spinner(agent: Agent) -> None:
    number = re.search(r"Select (-?\d+) with the spinner", agent.instruction()).group(1)  # type: ignore[union-attr]
    field = agent.refs()[0][1]
    agent.type(field, number)
    agent.click("Submit")


def read_table(agent: Agent) -> None:
    key = re.search(r"Enter the value of (.*) into the text field", agent.instruction())
    if key is None:
        raise Failed("no 'Enter the value of …' instruction")
    row = re.search(rf"^\| {re.escape(key.group(1))} \| (.*?) \|$", agent.text, re.M)
    if row is None:
        raise Failed(f"no table row {key.group(1)!r}")
    _type_and_submit(agent, row.group(1))


def find_word(agent: Agent) -> None:
    nth = int(re.search(r"Find the (\d+)", agent.instruction()).group(1))  # type: ignore[union-attr]
    paragraph = agent.text.splitlines()[1]
    words = re.findall(r"[A-Za-z0-9]+", paragraph)
    _type_and_submit(agent, words[nth - 1])


def simple_arithmetic(agent: Agent) -> None:
    found = re.search(r"^(-?\d+) ([+x-]) (-?\d+) =", agent.text, re.M)
    if found is None:
        raise Failed("no 'a op b =' line")
    a, op, b = int(found.group(1)), found.group(2), int(found.group(3))
    _type_and_submit(agent, str({"+": a + b, "-": a - b, "x": a * b}[op]))


def simple_algebra(agent: Agent) -> None:
    found = re.search(r"^(.*) = (-?\d+)$", agent.text, re.M)
    if found is None:
        raise Failed("no equation line")
    left, right = found.group(1).replace(" ", ""), int(found.group(2))
    # x+a, a+x, x-a, a-x
    if m := re.fullmatch(r"x([+-])(\d+)", left):
        x = right - int(m.group(2)) if m.group(1) == "+" else right + int(m.group(2))
    elif m := re.fullmatch(r"(\d+)([+-])x", left):
        x = right - int(m.group(1)) if m.group(2) == "+" else int(m.group(1)) - right
    else:
        raise Failed(f"equation {left!r}")
    _type_and_submit(agent, str(x))


def guess_number(agent: Agent) -> None:
    low, high = 0, 9
    field = agent.fields()[0]
    for _ in range(6):
        guess = (low + high) // 2
        agent.type(field, str(guess))
        agent.click("Submit")
        agent.read()
        if "higher" in agent.text:
            low = guess + 1
        elif "lower" in agent.text:
            high = guess - 1
        else:
            return


def text_transform(agent: Agent) -> None:
    _type_and_submit(agent, agent.text.splitlines()[1].strip())


def odd_or_even(agent: Agent) -> None:
    number: int | None = None
    clicks: list[str] = []
    pending: str | None = None
    for line in agent.text.splitlines():
        found = _REF.fullmatch(line.strip())
        if found and found.group(1) == "Odd":
            pending = found.group(2)
        elif found and found.group(1) == "Even" and number is not None and pending:
            clicks.append(pending if number % 2 else found.group(2))
            number, pending = None, None
        elif re.fullmatch(r"-?\d+", line.strip()):
            number = int(line.strip())
    for ref in clicks:
        agent.run(f"click --target {ref}")
    agent.click("Submit")


def multi_orderings(agent: Agent) -> None:
    wanted = re.findall(r"\*\*(.*?)\*\*", agent.instruction())
    genre, director, year = wanted
    values = {"Genre": genre, "Director": director, "Year": year}
    for key, value in values.items():
        row = re.search(
            rf"^\| {key} \| \[\[input\]\]\(control:(page\[\d+\])\) \|$", agent.text, re.M
        )
        if row is None:
            raise Failed(f"no {key} row")
        agent.type(row.group(1), value)
    agent.click("Submit")


def phone_book(agent: Agent) -> None:
    name = re.search(r"Find (.*) in the contact book and click on their (\w+)", agent.instruction())
    if name is None:
        raise Failed("no 'Find … in the contact book' instruction")
    person, what = name.group(1), name.group(2)
    for _ in range(12):
        if f"## {person}" in agent.text:
            part = agent.text.split(f"## {person}", 1)[1]
            label = {"phone": "Phone", "email": "Email", "address": "Address"}[what]
            found = re.search(rf"{label}: \[[^\]]*\]\(control:(page\[\d+\])\)", part)
            if found is None:
                raise Failed(f"no {label} of {person}")
            agent.run(f"click --target {found.group(1)}")
            return
        agent.click(">")
        agent.read()
    raise Failed(f"{person} on no page")


def search_engine(agent: Agent) -> None:
    found = re.search(
        r'enter "(.*)" and press "Search", then find and click the (\d+)', agent.instruction()
    )
    if found is None:
        raise Failed("no search instruction")
    term, nth = found.group(1), int(found.group(2))
    agent.type(agent.fields()[0], term)
    agent.click("Search")
    agent.read()
    per_page = 3
    page = (nth - 1) // per_page + 1
    if page > 1:
        agent.click(str(page))
        agent.read()
    results = [
        ref
        for label, ref in agent.refs()
        if label not in ("Search", "<", ">") and not label.isdigit() and not label.startswith("[")
    ]
    agent.run(f"click --target {results[(nth - 1) % per_page]}")


def _textarea(agent: Agent, nth: int = 0) -> str:
    found = re.findall(r'\[\[textarea value="((?:[^"\\]|\\.)*)"[^\]]*\]\]', agent.text)
    if len(found) <= nth:
        raise Failed("no textarea with a value")
    # The value as it is (sandbox/controls.py): \" \\ \n \t escaped, its spaces kept.
    escapes = {"n": "\n", "t": "\t"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), found[nth])


def copy_paste(agent: Agent) -> None:
    _type_and_submit(agent, _textarea(agent))


def scroll_text(agent: Agent) -> None:
    _type_and_submit(agent, re.findall(r"[A-Za-z0-9]+", _textarea(agent))[-1])


def click_scroll_list(agent: Agent) -> None:
    wanted = re.match(r"Select (.*) from the scroll list", agent.instruction())
    if wanted is None:
        raise Failed("no 'Select … from the scroll list' instruction")
    names = re.split(r", | and ", wanted.group(1))
    field = agent.ref_like(r"\[select: .*")
    # A multiple select takes its options comma-separated.
    agent.run(f"select --target {field} --value {json.dumps(', '.join(names))}")
    agent.click("Submit")


def use_autocomplete(agent: Agent) -> None:
    found = re.search(r'starts with "(.*?)"(?: and ends with "(.*?)")?', agent.instruction())
    if found is None:
        raise Failed("no 'starts with' instruction")
    start, end = found.group(1), found.group(2) or ""
    field = agent.fields()[0]
    agent.type(field, start)
    suggestions: list[str] = []
    for _ in range(10):  # the suggestions come after the page's own delay: read again
        agent.read()
        suggestions = re.findall(r"^- (.*)$", agent.text, re.M)
        if suggestions:
            break
        time.sleep(0.1)
    # The suggestions are list items without refs: the arrows and Enter choose one.
    for index, label in enumerate(suggestions):
        if label.startswith(start) and label.endswith(end):
            for _ in range(index + 1):
                agent.run(f"press --key ArrowDown --target {field}")
            agent.run(f"press --key Enter --target {field}")
            agent.read()
            agent.click("Submit")
            return
    raise Failed(f"no suggestion {start}…{end}")


_MONTHS = "January February March April May June July August September October November December"


def choose_date(agent: Agent) -> None:
    date = re.search(r"Select (\S+) as the date", agent.instruction()).group(1)  # type: ignore[union-attr]
    month, day, year = (int(part) for part in date.split("/"))
    field = agent.fields()[0]
    heading = re.compile(rf"^({_MONTHS.replace(' ', '|')}) (\d{{4}})$", re.M)
    # The calendar opens on the field's focus; one left open by the last episode shows that
    # episode's month: Escape closes it, Control+Home (the calendar's key) opens it afresh.
    agent.run(f"click --target {field}")
    agent.run(f"press --key Escape --target {field}")
    agent.run(f"press --key Control+Home --target {field}")
    agent.read_until(lambda text: bool(heading.search(text)))
    shown = heading.search(agent.text)
    if shown is None:
        raise Failed("no calendar month shown")
    months = (int(shown.group(2)) - year) * 12 + _MONTHS.split().index(shown.group(1)) + 1 - month
    # Prev and Next are links without href nor a pointer cursor: no refs; PageUp/PageDown are
    # the calendar's own keys for them.
    for _ in range(abs(months)):
        agent.run(f"press --key {'PageUp' if months > 0 else 'PageDown'} --target {field}")
    agent.read()
    agent.click(str(day))
    agent.read()
    agent.click("Submit")


def click_collapsible_2(agent: Agent) -> None:
    link = agent.quoted()[0]
    sections = [label for label, _ in agent.refs() if re.fullmatch(r"Section #\d+", label)]
    for section in ["", *sections]:  # the section open first
        if section:
            agent.click(section)
            # The section opens with an animation: read again until its links show.
            agent.read_until(lambda text: link in [label for label, _ in _REF.findall(text)], 4)
        if link in [label for label, _ in agent.refs()]:
            agent.click(link)
            return
    raise Failed(f"link {link!r} in no section")


def click_menu_2(agent: Agent) -> None:
    quoted = agent.quoted()
    icon = re.search(r"the item with the (\[image: [^\]]*\]) icon", agent.instruction())
    if len(quoted) < 2 and icon is None:
        raise Failed("the item is named neither by a label nor by an icon")

    def wanted(label: str) -> bool:  # "[image: disk]Save": the icon, then the label
        if icon is not None:
            return label.startswith(icon.group(1))
        return re.sub(r"^\[image: [^\]]*\]", "", label).removesuffix(" ▸") == quoted[1]

    agent.click("Menu")
    agent.read()
    tried: set[str] = set()
    for _ in range(4):
        found = [ref for label, ref in agent.refs() if wanted(label)]
        if found:
            agent.run(f"click --target {found[0]}")
            return
        # Not shown: in a submenu, which opens on hover (after the menu's own delay).
        opens = [ref for label, ref in agent.refs() if label.endswith(" ▸") and ref not in tried]
        if not opens:
            break
        tried.add(opens[0])
        agent.run(f"hover --target {opens[0]}")
        agent.read_until(lambda text: any(wanted(label) for label, _ in _REF.findall(text)), 10)
    raise Failed("no such item in the menu or its submenus")


def button_delay(agent: Agent) -> None:
    seconds = re.search(r"wait (\d+) seconds?", agent.instruction())
    agent.click("ONE")
    time.sleep(int(seconds.group(1)) if seconds else 0)  # the agent waits as it is told
    agent.read()
    agent.click("TWO")


def terminal(agent: Agent) -> None:
    extension = re.search(r"extension (\.[\w.]+)", agent.instruction())
    field = agent.fields()[0]
    # The terminal reads key presses (keydown), not the field's text: one press a character.
    _keys(agent, field, "ls")
    agent.read()
    listing = agent.text.split("user$ ls", 1)[-1].split("user$")[0].split()
    for name in listing:
        if (extension and name.endswith(extension.group(1))) or (
            extension is None and "." not in name
        ):
            _keys(agent, field, f"rm {name}")
            return
    raise Failed("no such file in the listing")


def _keys(agent: Agent, field: str, text: str) -> None:
    for char in text:
        key = "Space" if char == " " else char
        agent.run(f"press --key {json.dumps(key)} --target {field}")
    agent.run(f"press --key Enter --target {field}")


def navigate_tree(agent: Agent) -> None:
    wanted = agent.quoted()[0]
    for _ in range(20):
        names = [
            (label.removesuffix(" ▸").removesuffix(" ▾"), label, ref) for label, ref in agent.refs()
        ]
        hit = next((ref for name, _, ref in names if name == wanted), None)
        if hit is not None:
            agent.run(f"click --target {hit}")
            return
        # A closed folder reads "Name ▸": open the first.
        closed = [ref for _, label, ref in names if label.endswith(" ▸")]
        if not closed:
            break
        agent.run(f"click --target {closed[0]}")
        agent.read()
    raise Failed(f"{wanted!r} not found")


def social_media(agent: Agent) -> None:
    found = re.search(r'For the user (@\w+), click on the "(.*)" button', agent.instruction())
    if found is None:
        raise Failed("no 'For the user' instruction")
    user, action = found.group(1), found.group(2)
    lines = agent.text.splitlines()
    # The user's post: its line "Name @user 3h ago", its text, then its icons' refs
    # (named by their classes: reply, retweet, like, more).
    start = next((i for i, line in enumerate(lines) if f"{user} " in f"{line} "), None)
    if start is None:
        raise Failed(f"no post of {user}")
    icons = next((line for line in lines[start + 1 :] if "](control:" in line), "")
    refs = dict(_REF.findall(icons))
    if action.lower() in refs:
        agent.run(f"click --target {refs[action.lower()]}")
        return
    if "more" not in refs:
        raise Failed(f"no 'more' icon in {user}'s post")
    # The other actions are in the post's menu, opened by "more".
    agent.run(f"click --target {refs['more']}")
    agent.read()
    item = next(
        (ref for label, ref in agent.refs() if label == action or label.startswith(f"{action} @")),
        None,
    )
    if item is None:
        raise Failed(f"no menu item {action!r}")
    agent.run(f"click --target {item}")


_ORDINAL = r"(\d+)(?:st|nd|rd|th)"


def read_table_2(agent: Agent) -> None:
    for label, ref in re.findall(
        r"^(.*): \[\[input[^\]]*\]\]\(control:(page\[\d+\])\)", agent.text, re.M
    ):
        row = re.search(rf"^\| {re.escape(label)} \| (.*?) \|$", agent.text, re.M)
        if row is None:
            raise Failed(f"no table row {label!r}")
        agent.type(ref, row.group(1))
    agent.click("Submit")


def form_sequence_2(agent: Agent) -> None:
    found = re.search(
        rf'Check the {_ORDINAL} radio button and enter the number "(.*)" '
        rf"into the {_ORDINAL} textbox",
        agent.instruction(),
    )
    if found is None:
        raise Failed("no 'Check the … radio button' instruction")
    radios = [ref for label, ref in agent.refs() if re.fullmatch(r"\([ x*]\)", label)]
    agent.run(f"check --target {radios[int(found.group(1)) - 1]}")
    agent.type(agent.fields()[int(found.group(3)) - 1], found.group(2))
    agent.click("Submit")


def form_sequence(agent: Agent) -> None:
    found = re.search(
        rf"Select (-?\d+) with the slider, click the {_ORDINAL} checkbox", agent.instruction()
    )
    shown = re.search(r"^\[button\]\(control:(page\[\d+\])\) (-?\d+)$", agent.text, re.M)
    if found is None or shown is None:
        raise Failed("no slider instruction or no slider handle with its value")
    handle, steps = shown.group(1), int(found.group(1)) - int(shown.group(2))
    # The slider's handle is a ref; its keys move it one step (no drag operation).
    for _ in range(abs(steps)):
        agent.run(f"press --key {'ArrowRight' if steps > 0 else 'ArrowLeft'} --target {handle}")
    boxes = [ref for label, ref in agent.refs() if re.fullmatch(r"\[[ x]\]", label)]
    agent.run(f"check --target {boxes[int(found.group(2)) - 1]}")
    agent.click("Submit")


def copy_paste_2(agent: Agent) -> None:
    nth = re.search(rf"Copy the text from the {_ORDINAL} text area", agent.instruction())
    if nth is None:
        raise Failed("no 'Copy the text from the Nth text area' instruction")
    _type_and_submit(agent, _textarea(agent, int(nth.group(1)) - 1))


def generate_number(agent: Agent) -> None:
    wanted = agent.instruction()
    tests: dict[str, Callable[[int], bool]] = {
        "less than": lambda n: n < int(re.search(r"less than (\d+)", wanted).group(1)),  # type: ignore[union-attr]
        "greater than": lambda n: n > int(re.search(r"greater than (\d+)", wanted).group(1)),  # type: ignore[union-attr]
        "odd": lambda n: n % 2 == 1,
        "even": lambda n: n % 2 == 0,
    }
    test = next(check for words, check in tests.items() if words in wanted)
    for _ in range(30):
        agent.click("Generate")
        agent.read()
        number = re.search(r"^(-?\d+)$", agent.text, re.M)
        if number and test(int(number.group(1))):
            agent.click("Submit")
            return
    raise Failed("no number generated that fits")


def buy_ticket(agent: Agent) -> None:
    found = re.search(r"Buy the ticket with the (.*)\.", agent.instruction())
    flights = re.findall(
        r"Duration:\n(\d+)h (\d+)m\n\[Book for \$(\d+)\]\(control:(page\[\d+\])\)", agent.text
    )
    if found is None or not flights:
        raise Failed("no flights with duration and price")
    keys: dict[str, Callable[[tuple[str, ...]], int]] = {
        "cheapest cost": lambda f: int(f[2]),
        "most expensive cost": lambda f: -int(f[2]),
        "shortest duration": lambda f: int(f[0]) * 60 + int(f[1]),
        "longest duration": lambda f: -(int(f[0]) * 60 + int(f[1])),
    }
    best = min(flights, key=keys[found.group(1)])
    agent.run(f"click --target {best[3]}")


def multi_layouts(agent: Agent) -> None:
    genre, director, year = re.findall(r"\*\*(.*?)\*\*", agent.instruction())
    values = {"genre": genre, "director": director, "year": year, "date": year}
    lines = agent.text.splitlines()[1:]
    # Each field's label: on its line (a table row, "Label: [field]"), else the line above it,
    # else (the fields come first, as in one of the layouts) the line below it.
    fields = [i for i, line in enumerate(lines) if "[[input" in line]
    above = bool(fields) and fields[0] > 0
    for i in fields:
        own = lines[i].split("[[input")[0]
        label = own if own.strip(" |:") else lines[i - 1] if above else lines[i + 1]
        key = next((k for k in values if k in label.lower()), None)
        if key is None:
            raise Failed(f"no label for the field on line {lines[i]!r}")
        agent.type(_REF.search(lines[i]).group(2), values[key])  # type: ignore[union-attr]
    submit = [ref for label, ref in agent.refs() if not label.startswith("[")]
    agent.run(f"click --target {submit[-1]}")


def sign_agreement(agent: Agent) -> None:
    found = re.search(r'enter the name "(.*)" then press "(\w+)"', agent.instruction())
    if found is None:
        agent.click("Cancel")
        return
    area = agent.ref_like(r"\[textarea.*")
    # The name field and the buttons are disabled until the textarea is scrolled to its end.
    agent.run(f"scroll --direction bottom --target {area}")
    agent.read()
    agent.type(agent.ref_like(r"\[input.*"), found.group(1))
    agent.click(found.group(2))


def order_food(agent: Agent) -> None:
    lines = agent.text.splitlines()
    # Each dish: its name, its diet images ("[image: vegan]"), then its "-" and "+" refs.
    dishes: list[tuple[str, str, str]] = []  # (name, images, ref of +)
    for i, line in enumerate(lines):
        plus = re.search(r"\[\+\]\(control:(page\[\d+\])\)", line)
        if plus and i >= 2:
            dishes.append((lines[i - 2].strip(), lines[i - 1], plus.group(1)))
    by_name = re.match(r"Order one of each item: (.*)", agent.instruction())
    by_type = re.match(r"Order (\d+) items that are (.*)", agent.instruction())
    if by_name:
        wanted = [name.strip() for name in by_name.group(1).split(",")]
        chosen = [ref for name, _, ref in dishes if name in wanted]
        if len(chosen) != len(wanted):
            raise Failed(f"not every dish of {wanted} shown")
    elif by_type:
        count, kind = int(by_type.group(1)), by_type.group(2).strip()
        fitting = [ref for _, images, ref in dishes if f"[image: {kind}]" in images]
        if not fitting:
            raise Failed(f"no {kind} dish")
        chosen = [fitting[i % len(fitting)] for i in range(count)]  # one dish twice if need be
    else:
        raise Failed("no 'Order …' instruction")
    for ref in chosen:
        agent.run(f"click --target {ref}")
    agent.read()
    agent.click("Order!")


# --- figures (inline SVG): refs named "q (small red)", "circle (large blue)" ---------------------

_FIGURE = re.compile(r"^(.+?) \(((?:small|large) )?([a-z]+)\)$")


def _figures(agent: Agent) -> list[tuple[str, str, str, str]]:
    """The shapes of the figure: (name, size, colour, ref); a name is a shape or a character."""
    found = []
    for label, ref in agent.refs():
        m = _FIGURE.match(label)
        if m:
            found.append((m.group(1), (m.group(2) or "").strip(), m.group(3), ref))
    return found


def _kind(name: str) -> str:
    if name in ("circle", "rectangle", "triangle"):
        return "shape"
    return "digit" if name.isdigit() else "letter"


def _described(desc: str) -> Callable[[tuple[str, str, str, str]], bool]:
    """MiniWoB's shape description ("small red letter", "large 7", "blue item") as a test."""
    words = desc.split()
    size = words.pop(0) if words and words[0] in ("small", "large") else ""
    what = words.pop() if words else "item"
    colour = words[0] if words else ""

    def test(figure: tuple[str, str, str, str]) -> bool:
        name, shown_size, shown_colour, _ = figure
        return (
            (not size or shown_size == size)
            and (not colour or shown_colour == colour)
            and (what in ("item", name, _kind(name)))
        )

    return test


def click_shape(agent: Agent) -> None:
    found = re.match(r"Click on an? (.*)", agent.instruction())
    if found is None:
        raise Failed("no 'Click on a …' instruction")
    figures = _figures(agent)
    desc = found.group(1)
    if not any(size for _, size, _, _ in figures):  # one size for all: "small"/"large" unsaid
        desc = re.sub(r"^(small|large) ", "", desc)
    matching = [f for f in figures if _described(desc)(f)]
    if not matching:
        raise Failed(f"no figure is a {found.group(1)}")
    agent.run(f"click --target {matching[0][3]}")


def count_shape(agent: Agent) -> None:
    found = re.match(r"How many (.*)s are there\?", agent.instruction())
    if found is None:
        raise Failed("no 'How many …s are there?' instruction")
    figures = _figures(agent)
    desc = found.group(1)
    if not any(size for _, size, _, _ in figures):  # one size for all: "small"/"large" unsaid
        desc = re.sub(r"^(small|large) ", "", desc)
    count = len([f for f in figures if _described(desc)(f)])
    agent.click(str(count))


def identify_shape(agent: Agent) -> None:
    figures = _figures(agent)
    if not figures:
        raise Failed("no figure")
    name = figures[0][0]
    kind = _kind(name)
    agent.click(
        name.capitalize() if kind == "shape" else "Letter" if kind == "letter" else "Number"
    )


def click_pie(agent: Agent) -> None:
    wanted = agent.quoted()[0]
    # The menu opens by its "+" (the spreader), animated: read until its items are large.
    spreader = agent.ref_like(r"\+ \(.*\)")
    agent.run(f"click --target {spreader}")
    time.sleep(0.3)  # the wheel's opening animation
    agent.read()
    item = agent.ref_like(re.escape(wanted) + r" \(.*\)")
    agent.run(f"click --target {item}")


SCRIPTS: dict[str, Callable[[Agent], None]] = {
    "click-button": _click_quoted,
    "click-link": _click_quoted,
    "unicode-test": _click_quoted,
    "click-button-sequence": click_button_sequence,
    "click-test": click_test,
    "click-test-2": click_test_2,
    "click-test-transfer": click_test_2,
    "click-checkboxes": click_checkboxes,
    "click-checkboxes-large": click_checkboxes,
    "click-checkboxes-transfer": click_checkboxes,
    "click-option": click_option,
    "click-tab": click_tab,
    "click-tab-2": click_tab_2,
    "click-tab-2-easy": click_tab_2,
    "click-tab-2-medium": click_tab_2,
    "click-tab-2-hard": click_tab_2,
    "click-dialog": click_dialog,
    "click-dialog-2": click_dialog_2,
    "click-widget": click_widget,
    "click-collapsible": click_collapsible,
    "click-collapsible-nodelay": click_collapsible,
    "enter-text": enter_text,
    "enter-text-dynamic": enter_text,
    "enter-text-2": enter_text_2,
    "enter-password": enter_password,
    "focus-text": focus_text,
    "focus-text-2": focus_text_2,
    "login-user": login_user,
    "login-user-popup": login_user,
    "choose-list": choose_list,
    "enter-date": enter_date,
    "enter-time": enter_time,
    "use-spinner": use_spinner,
    "read-table": read_table,
    "find-word": find_word,
    "simple-arithmetic": simple_arithmetic,
    "simple-algebra": simple_algebra,
    "guess-number": guess_number,
    "text-transform": text_transform,
    "odd-or-even": odd_or_even,
    "multi-orderings": multi_orderings,
    "phone-book": phone_book,
    "search-engine": search_engine,
    "copy-paste": copy_paste,
    "scroll-text": scroll_text,
    "click-scroll-list": click_scroll_list,
    "use-autocomplete": use_autocomplete,
    "choose-date": choose_date,
    "click-collapsible-2": click_collapsible_2,
    "click-menu-2": click_menu_2,
    "button-delay": button_delay,
    "terminal": terminal,
    "navigate-tree": navigate_tree,
    "social-media": social_media,
    "read-table-2": read_table_2,
    "form-sequence": form_sequence,
    "form-sequence-2": form_sequence_2,
    "copy-paste-2": copy_paste_2,
    "generate-number": generate_number,
    "buy-ticket": buy_ticket,
    "multi-layouts": multi_layouts,
    "sign-agreement": sign_agreement,
    "order-food": order_food,
    "click-shape": click_shape,
    "count-shape": count_shape,
    "identify-shape": identify_shape,
    "click-pie": click_pie,
    "click-pie-nodelay": click_pie,
}


# --- episodes ------------------------------------------------------------------------------------


def episode(agent: Agent, url: str, script: Callable[[Agent], None]) -> tuple[float, str]:
    """One episode: START, the script, the page's ``Last reward``; (reward, why if it failed)."""
    agent.read()
    if "[START](control:" not in agent.text:
        agent.run(f"navigate --url {url}")
        agent.read()
    done = int(agent.line_value("Episodes done:") or 0)
    agent.click("START")
    agent.read()
    try:
        script(agent)
    except (Failed, AotuiError, IndexError, AttributeError, ValueError, StopIteration) as exc:
        agent.recover(url)  # a new page: the episode left unfinished is dropped
        return -1.0, f"{type(exc).__name__}: {exc}"
    # Read again until the page counts the episode (not wait_for: its E_TIMEOUT, when the
    # episode never ends, gets the Browser restarted by the desktop; see the note).
    if not agent.read_until(lambda text: f"Episodes done: {done + 1}\n" in text + "\n", 30):
        agent.recover(url)
        return -1.0, "the episode did not end (the page shows no new reward)"
    reward = agent.line_value("Last reward:")
    if reward is None or reward == "-":
        return -1.0, "no reward shown"
    return float(reward), ""


def run(
    args: argparse.Namespace | None = None, means: dict[str, float] | None = None
) -> dict[str, float]:
    """Every scripted task type, ``--episodes`` episodes each; the figures (and each type's
    mean reward into ``means``)."""
    if args is None:
        args = argparse.Namespace(quick=True, episodes=None, only="", verbose=False)
    episodes = args.episodes or (QUICK_EPISODES if args.quick else EPISODES)
    try:
        import miniwob  # type: ignore[import-untyped]
    except ImportError:
        print("miniwob not installed (pip install miniwob): not measured")
        return {}
    if browser.find_browser() is None:
        print(f"no headless browser ({browser.INSTALL_HINT}): not measured")
        return {}
    tasks = [t for t in SCRIPTS if not args.only or t in args.only.split(",")]
    html = Path(miniwob.__file__).parent / "html"
    solved: list[str] = []
    failed: list[tuple[str, float, str]] = []
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, _serve(html) as base:
        Path(tmp).chmod(0o755)
        agent = Agent(Path(tmp))
        try:
            print(f"{'task type':<28} {'episodes':>8} {'mean':>6} {'min':>6}  failures")
            for task in tasks:
                url = f"{base}/miniwob/{task}.html"
                agent.run(f"navigate --url {url}")
                rewards: list[float] = []
                whys: list[str] = []
                for _ in range(episodes):
                    reward, why = episode(agent, url, SCRIPTS[task])
                    rewards.append(reward)
                    if why or reward < 0:
                        whys.append(why or f"reward {reward}")
                mean = sum(rewards) / len(rewards)
                if means is not None:
                    means[task] = mean
                note = "; ".join(sorted(set(whys)))[:150]
                print(f"{task:<28} {len(rewards):>8} {mean:>6.2f} {min(rewards):>6.2f}  {note}")
                if args.verbose and whys:
                    print("   last page read:\n   " + agent.text.replace("\n", "\n   "))
                if mean >= GOAL_REWARD:
                    solved.append(task)
                else:
                    failed.append((task, mean, note))
        finally:
            agent.close()
    elapsed = time.perf_counter() - began
    verdict = "PASS" if len(solved) >= GOAL_TYPES else "MISS"
    print(
        f"task types with mean reward ≥ {GOAL_REWARD}: {len(solved)} of {len(tasks)} scripted "
        f"(goal ≥ {GOAL_TYPES}) {verdict}; {episodes} episodes each, {agent.commands} commands, "
        f"{elapsed:.0f} s, the Browser opened again {agent.restarts} times"
    )
    print("solved: " + ", ".join(solved))
    for task, mean, note in failed:
        print(f"failed: {task} (mean {mean:.2f}): {note}")
    return {"miniwob_types_solved": float(len(solved))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_EPISODES} episodes a type")
    parser.add_argument("--episodes", type=int, help=f"episodes a type (default {EPISODES})")
    parser.add_argument("--only", default="", help="comma-separated task types")
    parser.add_argument("--verbose", action="store_true", help="the page read after a failure")
    figures = run(parser.parse_args())
    return 0 if figures.get("miniwob_types_solved", 0) >= GOAL_TYPES else 1


if __name__ == "__main__":
    sys.exit(main())
