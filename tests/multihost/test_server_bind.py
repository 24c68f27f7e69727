"""The bind rule for the head, in a network namespace: llama-server on a non-loopback address
(this side of a box's veth link) is refused without server.api_key (by `up` and `preflight`),
and accepted with one, where the box then gets 401 without the key and 200 with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from netns_hosts import Hosts

from helpers import two_worker_spec, wait_dead
from splitserve.cluster import cluster_state_dir, down, load_spec, up

pytestmark = [pytest.mark.engine, pytest.mark.multihost]

PROBE = """
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]} if sys.argv[2] else {})
try:
    print(urllib.request.urlopen(req, timeout=10).status)
except urllib.error.HTTPError as exc:
    print(exc.code)
"""


def test_head_beyond_loopback_needs_a_key(engine, smollm2, state_home, hosts: Hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    box = hosts.boxes[0]
    addr = box.head_address  # an address of this machine on the link to box1, not loopback
    open_file = two_worker_spec(tmp_path, smollm2, name="headopen", host=addr)
    res = subprocess.run(
        [sys.executable, "-m", "splitserve", "up", "-c", str(open_file), "--skip-preflight"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"server.host = '{addr}' is beyond loopback" in lines[0]
    assert "server.api_key" in lines[0] and "Traceback" not in res.stderr
    assert not (cluster_state_dir(load_spec(open_file)) / "state.json").exists()  # nothing started
    pf = subprocess.run(
        [sys.executable, "-m", "splitserve", "preflight", "-c", str(open_file), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pf.returncode == 1
    head = next(r for r in json.loads(pf.stdout) if (r["check"], r["node"]) == ("bind", "head"))
    assert head["status"] == "fail" and "server.api_key" in head["fix"]

    keyed = load_spec(two_worker_spec(tmp_path, smollm2, name="headkeyed", host=addr, api_key="s3cret-head"))
    state = up(keyed, engine=engine)
    try:
        assert state.engine_url.startswith(f"http://{addr}:")
        url = f"{state.engine_url}/v1/models"
        probe = [sys.executable, "-c", PROBE, url]
        assert box.exec(*probe, "").stdout.strip() == "401"  # from the other host: no key, no entry
        assert box.exec(*probe, "s3cret-head").stdout.strip() == "200"
    finally:
        down(keyed)
    assert wait_dead([p.pid for p in state.processes]) == []
