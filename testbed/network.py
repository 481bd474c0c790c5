"""This machine's address on its network: what a node reports and pods reach it at."""

from __future__ import annotations

import socket


def host_ip() -> str:
    """The address this machine reaches others from (the node's InternalIP)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        # A UDP connect sends nothing: it only asks the kernel for a route.
        probe.connect(("198.51.100.1", 9))
        address: str = probe.getsockname()[0]
    if address.startswith("127."):
        raise RuntimeError("this machine has no non-loopback IPv4 address for a node")
    return address
