"""A Ray cluster on this machine for the fleet's tests and benchmark (ray.cluster_utils): a head
without CPUs (desktops go to the workers) and worker nodes, each told a small share of the
machine; everything it started is gone when the block ends, failed tests included.

:class:`FleetHistory` keeps a chaos history (docs/chaos.md) of desktops under a command load
while nodes are lost, for the chaos checker: the node-loss test and bench/soak_fleet.py."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import math
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import ray
from ray import cluster_utils

from aotui.protocol.errors import AotuiError
from aotui.supervisor.chaos.check import CheckName, CheckReport, check_history
from aotui.supervisor.chaos.history import EventKind, HistoryWriter, Source, load_history
from aotui.supervisor.fleet.actors import DESKTOP_PREFIX, NAMESPACE

__all__ = [
    "BUMP",
    "HEALTH",
    "NODE",
    "OPEN",
    "FleetHistory",
    "add_node",
    "counts",
    "desktop_info",
    "fleet_processes",
    "kill_node",
    "percentile",
    "ray_cluster",
]

#: The command of the load: one more call of the echo app (tests/apps/echo), which shows its count.
BUMP = '<context app_id="app_0" view_id="view_0">execute bump</context>'
OPEN = "<context>open --application app_0</context>"
_CALLS = re.compile(r"Calls: (\d+)")

#: Each worker node's share of the machine, as Ray is told. Its CPUs are the machine's 2: Ray
#: starts at most that many worker processes at once on a node (its maximum startup
#: concurrency), and a node lost under many desktops restarts their actors that many at a time.
NODE: dict[str, Any] = {"num_cpus": 2, "object_store_memory": 80 << 20, "memory": 4 << 30}
#: Ray notices a node that stopped answering after 3 missed health checks 0.3 s apart (its
#: defaults: 5 missed, 3 s apart); its workers run at niceness 0, as ``aotui fleet up --local``
#: starts them (its default is 15).
HEALTH = {"health_check_period_ms": 300, "health_check_failure_threshold": 3, "worker_niceness": 0}


def _ray_processes(temp_dir: str) -> list[psutil.Process]:
    """Every process of the cluster whose session lives in ``temp_dir``."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(temp_dir in part for part in process.info["cmdline"] or []):
                found.append(process)
    return found


@contextlib.contextmanager
def ray_cluster(
    workers: int = 2, system_config: dict[str, Any] | None = None
) -> Iterator[tuple[Any, list[Any]]]:
    """A head and ``workers`` worker nodes; this process connected to it (namespace aotui).
    ``system_config``: Ray settings of the head (for every node) over :data:`HEALTH`."""
    # Short: Ray's sockets go under it (107-byte socket paths). Ray's default directory (where
    # cluster_utils writes the cluster's address, and fails if it is missing) is in it too, not
    # the machine's shared /tmp/ray.
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    os.mkdir(os.path.join(temp_dir, "ray"))
    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = temp_dir
    head = {
        "num_cpus": 0,
        "include_dashboard": False,
        "object_store_memory": 80 << 20,
        "temp_dir": os.path.join(temp_dir, "ray"),
        "_system_config": HEALTH | (system_config or {}),
    }
    cluster = None
    try:
        cluster = cluster_utils.Cluster(initialize_head=True, head_node_args=head)
        nodes = [add_node(cluster) for _ in range(workers)]
        ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False)
        yield cluster, nodes
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        left = _ray_processes(temp_dir)
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(left, timeout=5)
        shutil.rmtree(temp_dir, ignore_errors=True)
        if before is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = before


def kill_node(cluster: Any, node: Any) -> None:
    """Lose ``node`` as a machine is lost: every process on it killed at once (its raylet, the
    actors' workers, their supervisors and apps), nothing said to the head."""
    raylets = [info.process.pid for info in node.all_processes.get("raylet", [])]
    doomed: list[psutil.Process] = []
    for pid in raylets:
        with contextlib.suppress(psutil.Error):
            raylet = psutil.Process(pid)
            doomed += [raylet, *raylet.children(recursive=True)]
    for process in doomed:
        with contextlib.suppress(psutil.Error):
            process.suspend()  # none of them acts after the first is killed
    for process in doomed:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(doomed, timeout=10)
    cluster.remove_node(node, allow_graceful=False)


def add_node(cluster: Any) -> Any:
    """A new worker node. It outlives the test that adds it (the cluster is the module's), so
    its processes do not carry that test's tag (tests/conftest.py kills what a test leaves)."""
    tag = os.environ.pop("AOTUI_TEST_TAG", None)
    try:
        return cluster.add_node(**NODE)
    finally:
        if tag is not None:
            os.environ["AOTUI_TEST_TAG"] = tag


def fleet_processes(runtime_base: str) -> dict[str, int]:
    """How many desktop supervisors (``up`` with their runtime under ``runtime_base``) and
    desktop actors (Ray workers of ``DesktopActor`` started by a raylet of the cluster that
    :func:`ray_cluster` runs: other clusters on the machine are not counted) run here."""
    cluster = os.environ.get("RAY_TMPDIR", "")
    counts = {"supervisors": 0, "actors": 0}
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmdline = process.info["cmdline"] or []
            if cmdline and cmdline[0].startswith("ray::DesktopActor"):
                parent = process.parent()
                if parent is not None and any(cluster in part for part in parent.cmdline()):
                    counts["actors"] += 1
            elif "up" in cmdline and any(runtime_base in part for part in cmdline):
                counts["supervisors"] += 1
    return counts


def _digest(name: str, count: int) -> str:
    """What a client sees of desktop ``name``'s echo app: its count of calls."""
    return hashlib.sha256(f"{name}/app_0 Calls: {count}".encode()).hexdigest()


def desktop_info(name: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """What desktop ``name``'s actor says of itself (its node, its supervisor's pid, ...); asked
    again while Ray says it is restarting (``RayActorError``: a drain or a node loss restarts
    it, and a handle this process held may learn of the new process only from a call that
    fails, ``ActorUnavailableError``, as CI saw just after a restart)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            actor = ray.get_actor(DESKTOP_PREFIX + name, namespace=NAMESPACE)
            asked: Any = actor.info.remote()
            info: dict[str, Any] = ray.get(asked, timeout=30)
            return info
        except ray.exceptions.RayActorError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class FleetHistory:
    """A chaos history of fleet desktops under a load of bumps, for ``check_history``.

    Each bump is a ``command`` (its history id is the command id the desktop is given), its
    ``state`` (``ack``: the count its reply shows) and its ``reply``; a reply whose outcome is
    unknown (``E_UNAVAILABLE`` ``took_effect`` unknown) is followed by the same command sent
    again with its id (``retry_of``). A lost node is a ``fault`` (``kill_supervisor``, detail
    ``node_loss``); each of its desktops, once it answers again, a ``recovery`` and a
    ``recovered`` state read from a snapshot before its load sends anything new (the command in
    flight at the loss may land before or after: the checker allows both, once). The end
    reads every desktop's ``final`` state from a snapshot. Every app is a desktop's name.
    """

    def __init__(self, path: str | os.PathLike[str], plan: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.epoch = time.time()
        self.writer = HistoryWriter(self.path, self.epoch)
        self._ids = itertools.count(1)
        self._counting = threading.Lock()  # the load's threads count together
        self._faults = itertools.count(1)
        self._gates: dict[str, threading.Event] = {}
        self.commands = 0
        self.replies = 0
        self.errors: list[str] = []
        #: Seconds from each node loss to each of its desktops answering again.
        self.recoveries: list[float] = []
        self.writer.append(
            EventKind.RUN, phase="start", seed=0, plan=plan or {}, desktop="fleet", epoch=self.epoch
        )

    def _gate(self, name: str) -> threading.Event:
        return self._gates.setdefault(name, _opened())

    def bump(self, name: str, desktop: Any) -> int | None:
        """One bump of ``desktop`` (its name ``name``), recorded; its count, ``None`` if none."""
        cid = f"{name}.{next(self._ids)}"
        retry_of = None
        for _ in range(5):
            sent = cid if retry_of is None else f"{cid}~{next(self._ids)}"
            with self._counting:
                self.commands += 1
            self.writer.append(
                EventKind.COMMAND,
                src=Source.AGENT,
                id=sent,
                session=desktop.session,
                interface="python",
                app=name,
                operation="bump",
                text=BUMP,
                retry_of=retry_of,
            )
            try:
                reply = desktop.invoke("execute", (BUMP,), command_id=cid)
            except AotuiError as exc:
                unknown = exc.data.get("took_effect") in ("unknown", "partly")
                with self._counting:
                    self.replies += 1
                self.errors.append(f"{name}: {exc.code.value}: {exc.message}")
                self.writer.append(
                    EventKind.REPLY,
                    src=Source.AGENT,
                    id=sent,
                    ok=False,
                    code=exc.code,
                    message=exc.message[:200],
                    recoverable=exc.recoverable,
                    outcome="unknown" if unknown else "none",
                )
                if not unknown:
                    return None
                retry_of = sent  # sent again with the same command id
                continue
            count: int = reply["results"][0]
            self.writer.append(
                EventKind.STATE, app=name, digest=_digest(name, count), basis="ack", command=sent
            )
            with self._counting:
                self.replies += 1
            self.writer.append(
                EventKind.REPLY, src=Source.AGENT, id=sent, ok=True, outcome="applied"
            )
            return count
        return None

    def load(self, name: str, desktop: Any, stop: threading.Event) -> None:
        """Bump ``desktop`` until ``stop``; waits while its node's loss is being observed."""
        gate = self._gate(name)
        while not stop.is_set():
            gate.wait()
            if not stop.is_set():
                self.bump(name, desktop)

    def _read(self, name: str, desktop: Any, basis: str, fault: str | None = None) -> int:
        found = _CALLS.search(desktop.snapshot())
        count = int(found.group(1)) if found else 0
        digest = _digest(name, count)
        self.writer.append(EventKind.STATE, app=name, digest=digest, basis=basis, fault=fault)
        return count

    def lose_node(
        self,
        cluster: Any,
        node: Any,
        desktops: dict[str, Any],
        fleet: Any,
        timeout: float = 120,
    ) -> list[int]:
        """Lose ``node`` (:func:`kill_node`) under the load; ``desktops``: the FleetDesktops
        placed on it, by name. Each is recorded answering again; returns the pids of their
        supervisors before the loss (none may run after it)."""
        fault = f"node-{next(self._faults)}"
        old = {}
        for name in desktops:
            with contextlib.suppress(Exception):
                old[name] = desktop_info(name)
        self.writer.append(
            EventKind.FAULT,
            fault=fault,
            type="kill_supervisor",
            phase="inject",
            detail={"node_loss": node.node_id, "desktops": len(desktops)},
        )
        for name in desktops:
            self._gate(name).clear()  # its load sends nothing new until its state is read
        began = time.monotonic()
        kill_node(cluster, node)
        failed: list[str] = []

        def observe(name: str) -> None:
            reader = fleet.desktop(name)  # a session of its own
            ok = True
            try:
                while True:
                    try:
                        reader.ping()
                        break
                    except AotuiError:
                        if time.monotonic() - began > timeout:
                            ok = False
                            break
                seconds = time.monotonic() - began
                self.writer.append(
                    EventKind.RECOVERY,
                    fault=fault,
                    app=name,
                    what="supervisor",
                    seconds=seconds,
                    ok=ok,
                )
                if not ok:
                    failed.append(name)
                    return
                self.recoveries.append(seconds)
                self._read(name, reader, "recovered", fault)
                now = desktop_info(name)
                self.writer.append(
                    EventKind.VISIBLE,
                    fault=fault,
                    where="status",
                    text=f"desktop {name} answers on node {now['node'][:12]} "
                    f"(was {old.get(name, {}).get('node', '?')[:12]})",
                )
            finally:
                reader.close()
                self._gate(name).set()

        observers = [threading.Thread(target=observe, args=(name,)) for name in desktops]
        for thread in observers:
            thread.start()
        for thread in observers:
            thread.join(timeout + 60)
        self.writer.append(
            EventKind.FAULT,
            fault=fault,
            type="kill_supervisor",
            phase="clear",
            detail={"node_loss": node.node_id, "not_back": failed},
        )
        return [info["pid"] for info in old.values() if info.get("pid")]

    def finish(self, desktops: dict[str, Any], lost_pids: list[int], began: float) -> CheckReport:
        """Read every desktop's final state, write the run's end (a supervisor of a lost node
        still running is left over) and judge the history."""
        for name, desktop in desktops.items():
            self._read(name, desktop, "final")
        left = [pid for pid in lost_pids if _alive(pid)]
        self.writer.append(
            EventKind.RUN,
            phase="end",
            agent_exit=0,
            leftover_pids=left,
            duration=time.monotonic() - began,
        )
        self.writer.close()
        return check_history(load_history(self.path))


def counts(report: CheckReport) -> dict[str, int]:
    """What the node-loss figures need of a checker's report: findings per check."""
    found = {verdict.check: verdict.count for verdict in report.verdicts}
    return {
        "lost": found[CheckName.NO_ACKNOWLEDGED_EFFECT_LOST],
        "twice": found[CheckName.APPLIED_AT_MOST_ONCE],
        "unanswered": found[CheckName.ONE_REPLY_PER_COMMAND],
    }


def _opened() -> threading.Event:
    gate = threading.Event()
    gate.set()
    return gate


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q ≤ 100) of ``values``; 0 when there are none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered), math.ceil(q / 100 * len(ordered))) - 1)]
