"""Which hosts and addresses an app's ``net:http`` grants reach (CONTRACT §2).

Host names are compared in canonical ASCII form (lower case, no trailing dot, IDNA): ``example.com``
matches itself, ``*.example.com`` matches names below it at a dot boundary (never the apex, never
``badexample.com``), ``*`` matches anything. An IP literal is never a name: only ``*`` reaches it,
and the address rules still apply. Addresses that are loopback, private, link-local, multicast,
reserved, unspecified or CGNAT — also when wrapped in IPv6 — are refused unless the desktop allows
them for tests.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

__all__ = ["IPAddress", "address_refusal", "host_allowed", "normalise_host"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# WHATWG URL: a host whose last label is a number is an IPv4 address ("127.1", "0x7f.1"),
# which getaddrinfo would happily resolve; it is never a name a grant could match.
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# In this order, so an error names the most telling class (0.0.0.0 and 240/4 are also private).
_ADDRESS_CLASSES = ("unspecified", "loopback", "link_local", "multicast", "reserved", "private")


def host_allowed(host: str, allowed: Sequence[str]) -> bool:
    """Whether ``host`` matches a grant: ``example.com``, ``*.example.com`` or ``*``."""
    try:
        name, is_ip = normalise_host(host)
    except ValueError:
        return False
    for pattern in allowed:
        if pattern == "*":
            return True
        if is_ip:
            continue  # an address is not a name: only "*" reaches it
        wildcard = pattern.startswith("*.")
        try:
            base, base_is_ip = normalise_host(pattern[2:] if wildcard else pattern)
        except ValueError:
            continue
        if base_is_ip:
            continue
        if name.endswith("." + base) if wildcard else name == base:
            return True
    return False


def normalise_host(host: str) -> tuple[str, bool]:
    """The canonical ASCII form of a host and whether it is an IP address; ValueError if bad."""
    if host.startswith("[") and host.endswith("]"):
        try:
            return str(ipaddress.IPv6Address(host[1:-1])), True
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address") from None
    text = host.removesuffix(".")
    try:
        text = text.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise ValueError(f"{host!r} is not a host name ({exc})") from None
    try:
        return str(ipaddress.ip_address(text)), True
    except ValueError:
        pass
    labels = text.split(".")
    if len(text) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"{host!r} is not a host name")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        raise ValueError(f"{host!r} is an IP address in a non-canonical form")
    return text, False


def address_refusal(address: IPAddress) -> str | None:
    """Why apps may not reach ``address``, or ``None`` for a public one."""
    if isinstance(address, ipaddress.IPv6Address):
        # An IPv4 address inside IPv6 is where the packets really go: judge that one.
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return address_refusal(embedded)
    for name in _ADDRESS_CLASSES:
        if getattr(address, f"is_{name}"):
            return name.replace("_", "-")
    if address in _CGNAT:
        return "shared (CGNAT)"
    return None if address.is_global else "non-global"
