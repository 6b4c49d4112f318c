"""A Ray cluster on this machine for the fleet's tests and benchmark (ray.cluster_utils): a head
without CPUs (desktops go to the workers) and worker nodes, each told a small share of the
machine; everything it started is gone when the block ends, failed tests included."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import psutil
import ray
from ray import cluster_utils

from aotui.supervisor.fleet.actors import NAMESPACE

__all__ = ["HEALTH", "NODE", "add_node", "kill_node", "ray_cluster"]

#: Each worker node's share of the machine, as Ray is told. Its CPUs are the machine's 2: Ray
#: starts at most that many worker processes at once on a node (its maximum startup
#: concurrency), and a node lost under many desktops restarts their actors that many at a time.
NODE: dict[str, Any] = {"num_cpus": 2, "object_store_memory": 80 << 20, "memory": 4 << 30}
#: Ray notices a node that stopped answering after 3 missed health checks 0.3 s apart (its
#: defaults: 5 missed, 3 s apart).
HEALTH = {"health_check_period_ms": 300, "health_check_failure_threshold": 3}


def _ray_processes(temp_dir: str) -> list[psutil.Process]:
    """Every process of the cluster whose session lives in ``temp_dir``."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(temp_dir in part for part in process.info["cmdline"] or []):
                found.append(process)
    return found


@contextlib.contextmanager
def ray_cluster(workers: int = 2) -> Iterator[tuple[Any, list[Any]]]:
    """A head and ``workers`` worker nodes; this process connected to it (namespace aotui)."""
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
        "_system_config": HEALTH,
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
