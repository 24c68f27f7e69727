"""The ``hosts`` fixture: network-namespace boxes with a real sshd each (see netns_hosts.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from netns_hosts import Hosts, make_hosts, unavailable


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "multihost: needs root, iproute2 and openssh-server (network namespaces)")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    """Two boxes (``box1``, ``box2``) reachable over real SSH."""
    why = unavailable()
    if why:
        pytest.skip(f"multi-host tests: {why}")
    yield from make_hosts(tmp_path_factory.mktemp("hosts"), 2)
