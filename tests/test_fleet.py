"""The fleet on a real Ray cluster (a head and two worker nodes on this machine,
ray.cluster_utils) with its state in a private PostgreSQL server (tests/stores.py).

Desktops are real supervisors with real workers, started by their actors; a node is removed the
way a machine dies (its raylet and every process on it killed, no goodbye to the head).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.chaos.check import CheckName, Status, check_history, format_report
from aotui.supervisor.chaos.history import load_history
from tests.conftest import TEST_APPS, wait_for
from tests.stores import PrivatePostgres
from tests.test_durability import BUMP

ray = pytest.importorskip("ray", reason="the fleet's tests need Ray: pip install 'aotui[fleet]'")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from aotui.supervisor.fleet.actors import (  # noqa: E402 -- after the skip without Ray
    DESKTOP_PREFIX,
    NAMESPACE,
    FleetSettings,
    desktop_actor,
    router_actor,
)
from aotui.supervisor.fleet.cli import _niceness_line  # noqa: E402
from aotui.supervisor.fleet.client import FleetClient, FleetDesktop  # noqa: E402
from aotui.supervisor.fleet.registry import Registry  # noqa: E402
from tests.fleet_cluster import (  # noqa: E402
    FleetHistory,
    add_node,
    counts,
    desktop_info,
    ray_cluster,
)

pytestmark = pytest.mark.timeout(120)

ECHO = Path(__file__).parent / "apps" / "echo"
AOTUI = Path(sys.executable).parent / "aotui"
OPEN = "<context>open --application app_0</context>"


@dataclass
class Fleet:
    cluster: Any
    workers: list[Any]
    settings: FleetSettings
    client: FleetClient
    registry: Registry

    def node_of(self, name: str) -> str:
        node: str = self.info(name)["node"]
        return node

    def info(self, name: str) -> dict[str, Any]:
        """What desktop ``name``'s actor says of itself; asked again while it restarts (a drain
        kills it a moment after it returns)."""
        return desktop_info(name)


@pytest.fixture(scope="module")
def fleet(postgres_server: PrivatePostgres) -> Iterator[Fleet]:
    """One cluster and one fleet for this module's tests (each test its own desktop names)."""
    url = postgres_server.create_database(f"fleet{os.getpid()}")
    config = f"apps = [{str(ECHO)!r}]\ndurability = 'ack'\n".replace("'", '"')
    with (
        tempfile.TemporaryDirectory(prefix="fleet-", dir="/tmp") as runtime,
        ray_cluster() as (cluster, workers),
    ):
        # 0.01 CPU each: one worker node (2 CPUs) holds every desktop of the module when the
        # other is lost (at 0.05, 20 + the others did not fit and waited, restarting, for room).
        settings = FleetSettings(url, config, runtime, num_cpus=0.01, memory=64 << 20)
        ray.get(router_actor(settings).get_settings.remote(), timeout=60)
        registry = Registry(url)
        try:
            yield Fleet(cluster, workers, settings, FleetClient(cluster.address), registry)
        finally:
            registry.close()


def _bump(desktop: FleetDesktop) -> int:
    count: int = desktop.execute(BUMP.format(app="app_0"))["results"][0]
    return count


def test_a_desktop_answers_by_name_with_client_s_typed_methods(fleet: Fleet) -> None:
    desktop = fleet.client.desktop("alpha")
    assert desktop.ping()["desktop"] == "alpha"
    desktop.execute(OPEN)
    assert [_bump(desktop) for _ in range(3)] == [1, 2, 3]
    text = desktop.snapshot()
    assert "app_0" in text
    status = desktop.status()
    assert status["apps"][0]["app"] == "app_0"
    with pytest.raises(AttributeError, match="no method 'paths'"):
        desktop.paths  # noqa: B018 -- a local socket's: not offered (tests/test_fleet_faces.py)
    # An error of the desktop comes back typed, as from a local Client.
    with pytest.raises(AotuiError) as raised:
        desktop.execute("<context>open --application app_99</context>")
    assert raised.value.code is not ErrorCode.E_INTERNAL
    # Another client, by name, reaches the same desktop and its state.
    other = FleetClient(fleet.cluster.address).desktop("alpha")
    assert _bump(other) == 4
    # A session that waits holds up no other session (nor status), as on one machine.
    waited: list[str] = []

    def wait() -> None:
        with pytest.raises(AotuiError) as timed_out:
            desktop.wait(text="never shown", app="app_0", timeout_ms=2500)
        waited.append(timed_out.value.code.value)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)
    began = time.monotonic()
    assert "app_0" in other.snapshot()
    assert time.monotonic() - began < 1.5
    waiter.join(30)
    assert waited == ["E_TIMEOUT"]
    rows = {row["desktop"]: row for row in fleet.client.status()}
    assert rows["alpha"]["state"] == "running"
    assert rows["alpha"]["node"] in {node.node_id for node in fleet.workers}
    assert rows["alpha"]["memory"] > 0


def test_a_name_never_runs_twice(fleet: Fleet) -> None:
    """Routers and clients asking for one name at once all get the one actor."""
    handles: list[Any] = []

    def ask() -> None:
        router = router_actor(fleet.settings)
        handles.append(ray.get(router.desktop.remote("beta"), timeout=60))

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for thread in threads:
        thread.start()
    handles.append(desktop_actor("beta", fleet.settings))
    for thread in threads:
        thread.join(60)
    pids = {ray.get(handle.info.remote(), timeout=60)["pid"] for handle in handles}
    assert len(handles) == 4
    assert len(pids) == 1
    # This fleet's supervisors only (their --socket is under its runtime directory): another
    # suite on the machine (CI's unprivileged step) may run a "beta" of its own.
    ours = fleet.settings.runtime_base
    supervisors = [
        p
        for p in psutil.process_iter(["cmdline"])
        if (line := p.info["cmdline"] or [])
        and "beta" in line
        and "up" in line
        and any(arg.startswith(ours) for arg in line)
    ]
    assert len(supervisors) == 1


def test_a_command_retried_with_its_id_runs_at_most_once(fleet: Fleet) -> None:
    desktop = fleet.client.desktop("gamma")
    desktop.execute(OPEN)
    bump = BUMP.format(app="app_0")
    first = desktop.invoke("execute", (bump,), command_id="cmd-1")
    again = desktop.invoke("execute", (bump,), command_id="cmd-1")
    assert first["results"] == again["results"] == [1]
    assert _bump(desktop) == 2  # the retry did not run
    # Every change's id goes to the supervisor, which answers a retry from its store: an
    # install retried is not refused as already installed.
    crashy = str(TEST_APPS / "crashy")
    installed = desktop.invoke("install", (crashy,), command_id="cmd-i")
    assert desktop.invoke("install", (crashy,), command_id="cmd-i") == installed
    # Its supervisor killed -9 alone: the actor starts it again at the next call, and an
    # execute's id is answered by the new supervisor from the store, with its first reply.
    third = desktop.invoke("execute", (bump,), command_id="cmd-3")
    assert third["results"] == [3]
    supervisor = fleet.info("gamma")["pid"]
    family = psutil.Process(supervisor).children(recursive=True)
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: _dead(supervisor), what="the supervisor's death")  # its actor reaps it
    # Its zygote and app die with it (a moment later): as after `kill -9` on one machine, the
    # desktop is started again once they are gone.
    psutil.wait_procs(family, timeout=10)
    assert desktop.invoke("execute", (bump,), command_id="cmd-3") == third
    assert fleet.info("gamma")["pid"] != supervisor
    assert _bump(desktop) == 4
    # An import retried with its id is answered, not run: the count bumped since stays.
    state = desktop.export_state()  # the count is 4
    imported = desktop.invoke("import_state", (state,), command_id="cmd-s")
    assert _bump(desktop) == 5
    assert desktop.invoke("import_state", (state,), command_id="cmd-s") == imported
    assert _bump(desktop) == 6


def test_a_command_cut_off_by_its_supervisor_s_death_is_told_what_took_effect(
    fleet: Fleet,
) -> None:
    """A bump, then a hang: the supervisor is killed -9 during the hang. The actor's client sees
    the death at once, the actor starts the supervisor again and sends the command again with
    its id, and the new supervisor answers from the store: 1 of 2 took effect, nothing runs
    again."""
    slow = str(Path(__file__).parent / "apps" / "slow")
    config = fleet.settings.config.replace("]", f", {slow!r}]".replace("'", '"'), 1)
    desktop_actor("kappa", replace(fleet.settings, config=config))
    desktop = fleet.client.desktop("kappa")
    desktop.execute(OPEN + "<context>open --application app_1</context>")
    hang = '<context app_id="app_1" view_id="view_0">execute hang --seconds 20</context>'
    outcome: list[BaseException] = []

    def send() -> None:
        try:
            desktop.invoke("execute", (BUMP.format(app="app_0") + hang,), command_id="cut-1")
        except BaseException as exc:
            outcome.append(exc)

    reader = fleet.client.desktop("kappa")  # another session: reads while the hang runs
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    wait_for(lambda: "Calls: 1" in reader.snapshot(), what="the bump before the hang")
    time.sleep(0.3)
    os.kill(fleet.info("kappa")["pid"], signal.SIGKILL)
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert len(outcome) == 1
    told = outcome[0]
    assert isinstance(told, AotuiError), told
    assert told.code is ErrorCode.E_UNAVAILABLE
    assert (told.data["took_effect"], told.data["ran"], told.data["total"]) == ("partly", 1, 2)
    assert _bump(desktop) == 2  # the first bump stood, and ran once


def _dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_hibernate_kill_9_resume_keeps_the_state(fleet: Fleet) -> None:
    """Idle, the desktop's processes stop (its state is rows); its actor is killed -9; the
    next call resumes it, from PostgreSQL, wherever Ray restarted it."""
    settings = replace(fleet.settings, idle_s=0.5)
    desktop_actor("delta", settings)
    desktop = fleet.client.desktop("delta")
    desktop.execute(OPEN)
    assert [_bump(desktop) for _ in range(2)] == [1, 2]
    supervisor = fleet.info("delta")["pid"]
    deadline = time.monotonic() + 20
    while fleet.info("delta")["state"] != "hibernated":
        assert time.monotonic() < deadline, "not hibernated 20 s after its last use"
        time.sleep(0.2)
    assert not psutil.pid_exists(supervisor)
    row = fleet.registry.desktop("delta")
    assert row is not None
    assert row.state == "hibernated"
    os.kill(fleet.info("delta")["actor_pid"], signal.SIGKILL)
    started = time.monotonic()
    text = desktop.snapshot()  # resumes it (the actor first restarts)
    resumed_s = time.monotonic() - started
    assert "app_0" in text
    assert _bump(desktop) == 3
    assert resumed_s < 30
    # Killed -9 while running: its supervisor dies with it, and it comes back with its state.
    info = fleet.info("delta")
    os.kill(info["actor_pid"], signal.SIGKILL)
    psutil.wait_procs([psutil.Process(info["pid"])], timeout=10)
    assert not psutil.pid_exists(info["pid"])
    assert _bump(desktop) == 4


def test_a_released_desktop_is_only_rows_until_its_next_call(fleet: Fleet) -> None:
    """Hibernated past release_s, the actor exits too: nothing of the desktop runs; the next
    call makes a new actor, which resumes it from PostgreSQL."""
    desktop_actor("theta", replace(fleet.settings, idle_s=0.5, release_s=0.5))
    desktop = fleet.client.desktop("theta")
    desktop.execute(OPEN)
    assert _bump(desktop) == 1
    info = fleet.info("theta")
    gone = psutil.wait_procs(
        [psutil.Process(info["pid"]), psutil.Process(info["actor_pid"])], timeout=20
    )[0]
    assert len(gone) == 2, "the supervisor and the actor still run 20 s after the last use"
    with pytest.raises(ValueError, match="theta"):
        ray.get_actor(DESKTOP_PREFIX + "theta", namespace=NAMESPACE)
    row = fleet.registry.desktop("theta")
    assert row is not None
    assert row.state == "hibernated"
    rows = {row["desktop"]: row for row in fleet.client.status()}
    assert rows["theta"]["state"] == "hibernated"
    assert _bump(desktop) == 2
    assert fleet.info("theta")["actor_pid"] != info["actor_pid"]


def _aotui(*words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(AOTUI), *words], capture_output=True, text=True, timeout=90, check=False
    )


def test_the_command_line_reaches_the_fleet(fleet: Fleet) -> None:
    address = fleet.cluster.address
    # The router runs (the fixture started it): `fleet up` with another store is refused.
    other = _aotui("fleet", "up", "--ray", address, "--store", fleet.settings.store + "x")
    assert other.returncode == ErrorCode.E_INVALID_CMD.exit_code
    assert "another store" in other.stderr
    ran = _aotui("exec", "--fleet", address, "--desktop", "zeta", OPEN)
    assert ran.returncode == 0, ran.stderr
    shown = _aotui("snapshot", "--fleet", address, "--desktop", "zeta", "--plain")
    assert shown.returncode == 0, shown.stderr
    assert "app_0" in shown.stdout
    status = _aotui("fleet", "status", "--ray", address)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0].split() == ["DESKTOP", "NODE", "STATE", "MEMORY", "LAST", "USE"]
    (zeta,) = [line.split() for line in lines if line.startswith("zeta ")]
    assert zeta[2] == "running"
    assert zeta[1] == fleet.node_of("zeta")[:12]
    # Its supervisor, on a worker node, runs at niceness 0: the head's worker_niceness (set as
    # `fleet up --local` sets it) reached that node's raylet, and status says so.
    assert psutil.Process(fleet.info("zeta")["pid"]).nice() == 0
    assert "desktops' niceness: 0" in status.stdout


def test_a_cluster_at_ray_s_default_niceness_is_told_the_setting() -> None:
    """What `fleet up` and `fleet status` print for a cluster started by hand with Ray's
    default worker niceness (15): the setting to change and where it is explained."""
    told = _niceness_line(15)
    assert told.startswith("desktops' niceness: 15")
    assert """--system-config='{"worker_niceness": 0}'""" in told
    assert "docs/fleet.md" in told
    assert "worker_niceness" in (Path(__file__).parent.parent / "docs" / "fleet.md").read_text()
    assert _niceness_line(0) == "desktops' niceness: 0"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_drain_moves_a_node_s_desktops_with_their_state(fleet: Fleet) -> None:
    desktop = fleet.client.desktop("eta")
    desktop.execute(OPEN)
    assert _bump(desktop) == 1
    node = fleet.node_of("eta")
    moved = fleet.client.drain(node)
    assert "eta" in moved
    assert _bump(desktop) == 2
    for name in moved:
        assert fleet.node_of(name) != node
        assert fleet.info(name)["state"] == "running"


#: Desktops under load in the node-loss test.
DESKTOPS = int(os.environ.get("AOTUI_FLEET_DESKTOPS", "20"))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_desktops_answer_again_by_name_after_their_node_is_lost(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Desktops under a command load; the node holding some is killed; each answers again by
    name on another node. The chaos checker, on the run's history, finds no acknowledged bump
    lost, none applied twice and every command answered; and it fails the same history
    doctored to lose one or to apply one twice."""
    fleet.workers.append(add_node(fleet.cluster))  # nodes come as well as go
    names = [f"n{i}" for i in range(DESKTOPS)]
    desktops = {name: fleet.client.desktop(name) for name in names}
    openers = [
        threading.Thread(target=desktop.execute, args=(OPEN,)) for desktop in desktops.values()
    ]
    for opener in openers:
        opener.start()
    for opener in openers:
        opener.join(120)
    placed = {name: fleet.node_of(name) for name in names}
    history = FleetHistory(tmp_path / "fleet.jsonl", {"desktops": DESKTOPS})
    began = time.monotonic()
    stop = threading.Event()
    loads = [
        threading.Thread(target=history.load, args=(name, desktops[name], stop)) for name in names
    ]
    for thread in loads:
        thread.start()
    time.sleep(2)
    victim = max(fleet.workers, key=lambda node: list(placed.values()).count(node.node_id))
    moved = {name: desktops[name] for name in names if placed[name] == victim.node_id}
    assert moved, placed
    lost_pids = history.lose_node(fleet.cluster, victim, moved, fleet.client)
    fleet.workers.remove(victim)
    time.sleep(3)
    stop.set()
    for thread in loads:
        thread.join(120)
    assert not [thread for thread in loads if thread.is_alive()], "a desktop never answered"
    for name in names:
        assert fleet.node_of(name) != victim.node_id  # answered again, by name, elsewhere
    report = history.finish(desktops, lost_pids, began)
    assert report.ok, format_report(report)
    assert counts(report) == {"lost": 0, "twice": 0, "unanswered": 0}
    assert len(history.recoveries) == len(moved)
    judged = {v.check: v.summary for v in report.verdicts}
    assert int(judged[CheckName.NO_ACKNOWLEDGED_EFFECT_LOST].split()[0]) >= len(moved)
    assert history.replies >= history.commands > 10 * DESKTOPS
    # The checker fails the same history with one recovered bump lost, or one applied twice.
    lines = [json.loads(line) for line in history.path.read_text().splitlines()]
    for how, check in (("lost", CheckName.NO_ACKNOWLEDGED_EFFECT_LOST),
                       ("twice", CheckName.APPLIED_AT_MOST_ONCE)):  # fmt: skip
        doctored = tmp_path / f"{how}.jsonl"
        doctored.write_text("".join(json.dumps(line) + "\n" for line in _doctor(lines, how)))
        verdicts = {v.check: v for v in check_history(load_history(doctored)).verdicts}
        assert verdicts[check].status is Status.FAIL, (how, verdicts[check])
        assert counts(check_history(load_history(doctored)))[how] == 1


def _doctor(lines: list[dict[str, Any]], how: str) -> list[dict[str, Any]]:
    """``lines`` of a fleet history with its first recovered desktop showing one bump fewer
    than it acknowledged (``lost``), or with a bump in flight at the loss that came back with
    the desktop and was then applied again (``twice``)."""
    lines = [dict(line) for line in lines]
    at = next(i for i, line in enumerate(lines) if line["kind"] == "recovery")
    app = lines[at]["app"]
    recovered = next(
        line
        for line in lines[at:]
        if line["kind"] == "state" and line["app"] == app and line["basis"] == "recovered"
    )
    acks = [
        line
        for line in lines[:at]
        if line["kind"] == "state" and line["app"] == app and line["basis"] == "ack"
    ]
    assert acks
    # The count the last acknowledged bump showed (before the loss).
    count = next(n for n in range(100_000) if _calls(app, n) == acks[-1]["digest"])
    assert count >= 2
    if how == "lost":
        recovered["digest"] = _calls(app, count - 1)
        return lines
    t = lines[at]["t"]
    doctored = {"src": "agent", "interface": "python", "app": app, "operation": "bump"}
    # A bump in flight at the loss whose effect came back with the desktop (a state never
    # acknowledged before), then answered with a state it ran again to.
    recovered["digest"] = _calls(app, count + 1000)
    lines.append({**doctored, "t": t - 1e-6, "kind": "command", "id": "doctored"})
    ack = {"kind": "state", "app": app, "basis": "ack", "command": "doctored"}
    lines.append({**ack, "src": "runner", "t": recovered["t"] + 1e-6,
                  "digest": _calls(app, count + 1001)})  # fmt: skip
    lines.append({"src": "agent", "t": recovered["t"] + 2e-6, "kind": "reply",
                  "id": "doctored", "ok": True, "outcome": "applied"})  # fmt: skip
    return lines


def _calls(app: str, count: int) -> str:
    return hashlib.sha256(f"{app}/app_0 Calls: {count}".encode()).hexdigest()
