"""Small network facts shared by the layers (kept free of heavy imports)."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether binding to ``host`` serves this machine only."""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
