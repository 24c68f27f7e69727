"""Split vs replicas on the two namespace nodes, through the product's own path: the head here and
one network-namespace box over real SSH, SmolLM2-135M, and
``splitserve bench sweep -c SPEC --set topology=split,replicas --concurrency 1,4,16``, which
restarts the cluster through `up` at each point (split: the head's llama-server with the box as
its RPC worker; replicas: a llama-server on each node behind the gateway) and runs the speed bench
through the gateway.

    .venv/bin/python benchmarks/bench_topology_netns.py [--concurrency 1,4,16] [--gen 32]
        [--prompt 128] [--repeat 2] [--out benchmarks/results/topology_netns.json]

Needs root, iproute2 and openssh-server (tests/multihost/netns_hosts.py). Both nodes are on this
2-core machine: the namespace separates the network, not the CPUs, so each node's engine gets
one thread (``threads = 1``) and the two nodes share the two cores with the gateway and the client.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "multihost")]

from helpers import free_ports  # noqa: E402
from splitserve._assets import smollm2_path  # noqa: E402

CLI = [sys.executable, "-m", "splitserve"]


def write_spec(path: Path, model: Path, hosts: object, state: Path) -> Path:
    box = hosts.boxes[0]  # type: ignore[attr-defined]
    head_port, gw_port, port = free_ports(3)
    path.write_text(
        f'name = "topo"\nmodel = "{model}"\nstate_dir = "{state}"\ntopology = "split"\n'
        f'[ssh]\nconfig = "{hosts.ssh_config}"\nconnect_timeout = 5\n'  # type: ignore[attr-defined]
        f'[[workers]]\nname = "w1"\nhost = "{box.name}"\nbind = "{box.address}"\nport = {port}\n'
        f'workdir = "{box.workdir}"\nthreads = 1\n'
        f"[server]\nport = {head_port}\nctx_size = 8192\nparallel = 16\nthreads = 1\n"
        f"[gateway]\nport = {gw_port}\n"
    )
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "topology_netns.json")
    args = ap.parse_args()
    from netns_hosts import make_hosts, unavailable

    why = unavailable()
    if why:
        raise SystemExit(f"namespace hosts unavailable ({why})")
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "hosts").mkdir()
        gen = make_hosts(tmp / "hosts", 1)
        hosts = next(gen)
        spec = write_spec(tmp / "topo.toml", smollm2_path(), hosts, tmp / "st")
        load = os.getloadavg()[0]
        cmd = [*CLI, "bench", "sweep", "-c", str(spec), "--set", "topology=split,replicas",
               "--concurrency", args.concurrency, "--prompt-tokens", str(args.prompt),
               "--gen-tokens", str(args.gen), "--ignore-eos", "--repeat", str(args.repeat),
               "--label", "topology", "-o", str(args.out), "--report"]  # fmt: skip
        print("$", " ".join(cmd[2:]), flush=True)
        try:
            res = subprocess.run(cmd, text=True, timeout=3600)
        finally:
            subprocess.run([*CLI, "down", "-c", str(spec)], capture_output=True, text=True, timeout=300)
            gen.close()
        print(f"load average (1 min) before {load:.1f}, after {os.getloadavg()[0]:.1f}", flush=True)
        if res.returncode != 0:
            raise SystemExit(f"bench sweep exited {res.returncode}")
    data = json.loads(args.out.read_text())
    data["setup"] = (
        "head here + 1 network-namespace box over SSH (veth), SmolLM2-135M, threads = 1 per node, "
        "ctx 8192, parallel 16; both nodes share this machine's 2 cores with the gateway and client"
    )
    args.out.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
