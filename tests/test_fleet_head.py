"""The fleet's head node (docs/fleet.md, *The head node*): a Ray head whose control store (the GCS)
is backed by a private Redis survives the GCS's kill -9, and the desktops' detached actors answer
by the same name with their state; without Redis a head loss ends the cluster, and a new
cluster's fleet resumes the desktops from PostgreSQL by name.

Each test starts its own cluster (a head and one worker node, ray.cluster_utils), so they are
slow-marked. Redis is Debian's ``redis-server`` (CI installs it), on a free loopback port with its
files in ``tmp_path``, killed when the test ends.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from tests.stores import PrivatePostgres
from tests.test_durability import BUMP

ray = pytest.importorskip("ray", reason="the fleet's tests need Ray: pip install 'aotui[fleet]'")

from aotui.supervisor.fleet.actors import (  # noqa: E402 -- after the skip without Ray
    DESKTOP_PREFIX,
    NAMESPACE,
    FleetSettings,
    router_actor,
)
from aotui.supervisor.fleet.cli import LOCAL_SYSTEM_CONFIG  # noqa: E402
from aotui.supervisor.fleet.client import FleetClient, FleetDesktop  # noqa: E402
from tests.fleet_cluster import ray_cluster  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ECHO = Path(__file__).parent / "apps" / "echo"
OPEN = "<context>open --application app_0</context>"
BUMP_0 = BUMP.format(app="app_0")
AOTUI = Path(sys.executable).parent / "aotui"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def private_redis(directory: Path) -> Iterator[str]:
    """Debian's redis-server on a free loopback port, its files in ``directory``; its address."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("Debian's redis-server is not installed: apt-get install redis-server")
    port = _free_port()
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
         "--save", "", "--appendonly", "no", "--protected-mode", "yes"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail(f"redis-server did not listen on port {port}")
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait(10)


def _settings(postgres: PrivatePostgres, name: str, runtime: str) -> FleetSettings:
    url = postgres.create_database(f"{name}{os.getpid()}")
    config = f"apps = [{str(ECHO)!r}]\ndurability = 'ack'\n".replace("'", '"')
    return FleetSettings(url, config, runtime, num_cpus=0.01, memory=64 << 20)


def _bump(desktop: FleetDesktop) -> int:
    count: int = desktop.execute(BUMP.format(app="app_0"))["results"][0]
    return count


def _gcs(cluster: Any) -> psutil.Process:
    (info,) = cluster.head_node.all_processes["gcs_server"]
    return psutil.Process(info.process.pid)


def test_a_redis_backed_head_loses_its_gcs_and_the_desktops_answer_by_name(
    postgres_server: PrivatePostgres, tmp_path: Path
) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="fleet-", dir="/tmp") as runtime,
        private_redis(tmp_path) as redis,
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setenv("RAY_REDIS_ADDRESS", redis)  # the head's GCS keeps its tables there
        with ray_cluster(workers=1) as (cluster, _workers):
            settings = _settings(postgres_server, "head", runtime)
            ray.get(router_actor(settings).get_settings.remote(), timeout=60)
            desktop = FleetClient(cluster.address).desktop("kappa")
            desktop.execute(OPEN)
            assert [_bump(desktop) for _ in range(3)] == [1, 2, 3]
            actor = ray.get_actor(DESKTOP_PREFIX + "kappa", namespace=NAMESPACE)
            before = ray.get(actor.info.remote(), timeout=30)

            gcs = _gcs(cluster)
            gcs.kill()  # kill -9: the cluster's control store, mid-run
            gcs.wait(10)
            outage = time.monotonic()
            # Sent while the GCS is down: through the handle this client already has ...
            during: dict[str, Any] = {}

            def send() -> None:
                try:
                    during["count"] = _bump(desktop)
                except AotuiError as exc:
                    during["error"] = f"{exc.code.value}: {exc.message}"
                during["took_s"] = time.monotonic() - outage

            sender = threading.Thread(target=send)
            sender.start()
            # ... and by a new client (a new Ray driver: it must reach the GCS to join and to
            # find the desktop by name).
            words = ["exec", "--fleet", cluster.address, "--desktop", "kappa", BUMP_0]
            newcomer = subprocess.Popen(
                [str(AOTUI), *words], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            try:
                time.sleep(3)  # the outage
                cluster.head_node.kill_gcs_server(check_alive=False)  # Ray's bookkeeping of it
                cluster.head_node.start_gcs_server()
                restarted = time.monotonic()
                sender.join(120)
                assert not sender.is_alive(), "the command sent during the outage never answered"
                assert "error" not in during, during
                _out, err = newcomer.communicate(timeout=120)
            finally:
                newcomer.kill()  # gone already unless something failed
            answered = time.monotonic() - restarted
            assert newcomer.returncode == 0, err[-2000:]
            print(
                f"during a 3 s GCS outage: a call on a known handle answered in "
                f"{during['took_s']:.2f} s; a new client's exec {answered:.2f} s after the GCS "
                "was back"
            )
            # Each ran once: 3 before, the two sent during the outage, then this one.
            assert _bump(desktop) == 6
            # The same detached actor (not a restarted one) answers by name, with its state.
            again = ray.get_actor(DESKTOP_PREFIX + "kappa", namespace=NAMESPACE)
            after = ray.get(again.info.remote(), timeout=30)
            kept = ("node", "actor_pid", "pid")
            assert [after[k] for k in kept] == [before[k] for k in kept], (before, after)


def test_without_redis_a_head_loss_ends_the_cluster_and_a_new_one_resumes_by_name(
    postgres_server: PrivatePostgres,
) -> None:
    with tempfile.TemporaryDirectory(prefix="fleet-", dir="/tmp") as runtime:
        settings = _settings(postgres_server, "nohead", runtime)
        with ray_cluster(workers=1) as (cluster, _workers):
            ray.get(router_actor(settings).get_settings.remote(), timeout=60)
            desktop = FleetClient(cluster.address).desktop("lambda")
            desktop.execute(OPEN)
            assert [_bump(desktop) for _ in range(3)] == [1, 2, 3]
            ray.shutdown()  # this driver first: Ray exits a driver that loses its GCS for 60 s
            head = [info.process.pid for infos in cluster.head_node.all_processes.values()
                    for info in infos]  # fmt: skip
            for pid in head:  # the head machine lost: the cluster's control store with it
                with contextlib.suppress(psutil.Error):
                    psutil.Process(pid).kill()
        # A new cluster, the same PostgreSQL: its fleet resumes the desktop by name.
        with ray_cluster(workers=1) as (cluster, _workers):
            ray.get(router_actor(settings).get_settings.remote(), timeout=60)
            assert _bump(FleetClient(cluster.address).desktop("lambda")) == 4


def _aotui(env: dict[str, str], *words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(AOTUI), *words], capture_output=True, text=True, timeout=120, check=False, env=env
    )


def _gcs_config(ray_tmp: str) -> dict[str, object]:
    """The system config the GCS server of the cluster under ``ray_tmp`` was started with."""
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            line = process.info["cmdline"] or []
            if line and "gcs_server" in line[0] and any(ray_tmp in part for part in line):
                listed = next(p for p in line if p.startswith("--config_list="))
                found: dict[str, object] = json.loads(base64.b64decode(listed.split("=", 1)[1]))
                return found
    raise AssertionError(f"no gcs_server under {ray_tmp}")


def test_fleet_up_local_turns_ray_s_token_on_and_only_its_user_s_clients_get_through(
    postgres_server: PrivatePostgres, tmp_path: Path
) -> None:
    """`aotui fleet up --local` starts its head with Ray's token authentication on, the token
    in a 0600 file under a 0700 directory of the fleet's user; that user's aotui clients send
    it, and a client without it (aotui's, or Ray's own with a wrong token) is refused."""
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths
    # Nobody's Ray settings or ~/.ray/auth_token: the owner has the fleet's token file only
    # (in AOTUI_HOME, the test's own), the stranger has nothing.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    owner = clean | {"RAY_TMPDIR": ray_tmp, "HOME": str(tmp_path / "owner")}
    stranger = clean | {"HOME": str(tmp_path / "stranger"), "AOTUI_HOME": str(tmp_path / "s")}
    (tmp_path / "owner").mkdir()
    (tmp_path / "stranger").mkdir()
    config = tmp_path / "desktops.toml"
    config.write_text(f"apps = [{str(ECHO)!r}]\ndurability = 'ack'\n".replace("'", '"'))
    url = postgres_server.create_database(f"token{os.getpid()}")
    try:
        up = _aotui(
            owner, "fleet", "up", "--local", "--local-port", str(_free_port()),
            "--local-cpus", "1", "--store", url, "--config", str(config), "--cpus", "0.01",
            "--memory-mb", "64",
        )  # fmt: skip
        assert up.returncode == 0, up.stderr[-3000:]
        assert "Ray token authentication: on" in up.stdout, up.stdout
        address = up.stdout.split("fleet up on Ray at ")[1].split()[0]
        # Its head notices a lost node after 3 missed health checks 1 s apart, and starts its
        # workers at niceness 0 (the GCS's own config, as Ray hands it to the gcs_server
        # process); `fleet up` read the niceness from the router's own process.
        assert _gcs_config(ray_tmp) | LOCAL_SYSTEM_CONFIG == _gcs_config(ray_tmp)
        assert "desktops' niceness: 0" in up.stdout, up.stdout
        token = Path(os.environ["AOTUI_HOME"]) / "fleet" / "auth_token"
        assert token.stat().st_mode & 0o777 == 0o600
        assert token.parent.stat().st_mode & 0o777 == 0o700

        started = time.monotonic()
        refused = _aotui(stranger, "fleet", "status", "--ray", address)
        refused_s = time.monotonic() - started
        assert refused.returncode == ErrorCode.E_PERMISSION.exit_code, refused.stderr[-3000:]
        assert "requires Ray's authentication token" in refused.stderr
        # Ray's own client, as anyone on the machine could run it, with a made-up token.
        guess = stranger | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}
        code = (
            f"import ray; ray.init(address={address!r}, log_to_driver=False); "
            "print(ray.util.list_named_actors(all_namespaces=True))"
        )
        plain = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
            check=False, env=guess,
        )  # fmt: skip
        assert plain.returncode != 0
        assert "AuthenticationError" in plain.stderr, plain.stderr[-3000:]
        assert "aotui-fleet-router" not in plain.stdout

        ran = _aotui(owner, "exec", "--fleet", address, "--desktop", "mu", OPEN)
        assert ran.returncode == 0, ran.stderr[-3000:]
        status = _aotui(owner, "fleet", "status", "--ray", address)
        assert status.returncode == 0, status.stderr[-3000:]
        assert [line.split()[0] for line in status.stdout.splitlines()][1] == "mu"
        assert "Ray token authentication: on" in status.stdout
        print(f"a client without the token was refused after {refused_s:.1f} s")
    finally:
        left = []
        for process in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if any(ray_tmp in part for part in process.info["cmdline"] or []):
                    left.append(process)
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(left, timeout=10)
        shutil.rmtree(ray_tmp, ignore_errors=True)
