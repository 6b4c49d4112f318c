"""Ray's token authentication for a fleet (docs/fleet.md, *Who can reach the fleet*).

A Ray cluster runs what its clients send, so a fleet's head is started with Ray's token
authentication on (``RAY_AUTH_MODE=token``, Ray 2.52 and later): ``aotui fleet up --local`` makes
a token in :func:`token_path` (``0600``, in a ``0700`` directory of this user) and gives it to
``ray start --head``; every node and client then needs it. Every fleet client of aotui
(:class:`~aotui.supervisor.fleet.client.FleetClient`, ``--fleet``, ``aotui mcp --fleet``) calls
:func:`use_token` before it joins the cluster: Ray's own settings (``RAY_AUTH_MODE``,
``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``) are kept when given, else the fleet's token file is
used when there is one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.paths import data_home, secure_dir

__all__ = [
    "cluster_uses_token",
    "make_token",
    "ray_env",
    "refused_by_token",
    "token_path",
    "token_refused",
    "use_token",
]

#: Ray's settings for its token (read by every Ray process at start).
MODE, TOKEN, TOKEN_PATH = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"


def token_path() -> Path:
    """The fleet's token file: ``fleet/auth_token`` under aotui's data directory."""
    return data_home() / "fleet" / "auth_token"


def make_token() -> Path:
    """The fleet's token file, made (256 random bits, hex, as Ray's own) if there is none; one
    that exists must be this user's regular file that no one else can read."""
    path = token_path()
    secure_dir(path.parent)  # 0700, this user's, not a symlink
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        _check_private(path)
        return path
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(32))
    return path


def _check_private(path: Path) -> None:
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise AotuiError(
            ErrorCode.E_PERMISSION,
            f"the fleet's token file {path} is not a file of this user's that only they can "
            f"read (mode {stat.filemode(info.st_mode)}, uid {info.st_uid}): remove it (a new "
            "token is made) or chmod 600 it",
        )


def ray_env(path: Path) -> dict[str, str]:
    """The environment that turns Ray's token authentication on with the token at ``path``."""
    return {MODE: "token", TOKEN_PATH: str(path)}


def use_token() -> str | None:
    """Make this process's Ray send a token when it joins a cluster (call before ``ray.init``).

    Ray's own settings win: ``RAY_AUTH_MODE`` given is kept as it is, and a ``RAY_AUTH_TOKEN``
    or ``RAY_AUTH_TOKEN_PATH`` without it turns token mode on. Otherwise the fleet's token file
    (:func:`token_path`), when there is one, is used. Returns where the token comes from, or
    ``None`` when this client sends none.
    """
    env = os.environ
    if env.get(MODE) is None:
        if not (env.get(TOKEN) or env.get(TOKEN_PATH)):
            if not token_path().exists():
                return None
            _check_private(token_path())
            env[TOKEN_PATH] = str(token_path())
        env[MODE] = "token"
    _refresh()
    if env[MODE].lower() != "token":
        return None
    if env.get(TOKEN):
        return TOKEN
    return env.get(TOKEN_PATH) or str(Path.home() / ".ray" / "auth_token")


def refused_by_token(exc: BaseException) -> bool:
    """Whether ``ray.init``'s ``exc`` is the cluster refusing this client's token (Ray 2.60
    raises a ``ConnectionError`` caused by a ``RuntimeError`` whose text holds its
    ``AuthenticationError``'s, ``InvalidAuthToken``)."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if type(seen).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def token_refused(address: str, source: str | None) -> AotuiError:
    """What a client is told when the cluster at ``address`` refuses its token (or its lack of
    one); ``source``: :func:`use_token`'s answer."""
    sent = f"the token from {source}" if source else "no token"
    return AotuiError(
        ErrorCode.E_PERMISSION,
        f"the Ray cluster at {address} requires Ray's authentication token and refused this "
        f"client ({sent}): run as the fleet's user, whose `aotui fleet up --local` keeps it in "
        f"{token_path()}, or give this client the fleet's token (RAY_AUTH_TOKEN_PATH=FILE, "
        "a copy only you can read)",
        {"address": address, "token": source},
    )


def _refresh() -> None:
    """Ray reads its settings once per process: read them again (Ray < 2.52 has none)."""
    with contextlib.suppress(ImportError, AttributeError):
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def _uses_token(_actor: Any) -> bool:
    """In a cluster's process: whether its Ray requires a token."""
    try:
        from ray._raylet import (  # type: ignore[attr-defined]
            AuthenticationMode,
            get_authentication_mode,
        )
    except ImportError:  # Ray < 2.52: no token authentication at all
        return False
    return bool(get_authentication_mode() == AuthenticationMode.TOKEN)


def cluster_uses_token(router: Any) -> bool:
    """Whether the cluster of the fleet's ``router`` actor runs with token authentication (what
    the router's own Ray process was started with)."""
    import ray

    return bool(ray.get(router.__ray_call__.remote(_uses_token), timeout=60))
