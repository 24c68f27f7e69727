"""The link check's measured rate against the shaping of the link.

    sudo .venv/bin/python benchmarks/bench_link_check.py [--shapings 1,10] [--seconds 3] [--repeat 3]
        [--mtu 1500] [--out benchmarks/results/link_check.json]

One network-namespace box with a real sshd (tests/multihost/netns_hosts.py), reached from this
namespace over its own veth pair; `tc` tbf on the head's end of that veth shapes what the head
sends. For each shaping (and unshaped, the path's capacity on this machine), preflight's own
:func:`~splitserve.cluster._link.check_link` runs ``--repeat`` times with each tool (the built-in
Python transfer over an SSH-started receiver, and iperf3), ``--seconds`` each. Prints a Markdown
table (median, min, max Gb/s, median / shaping, the link-rate row's status) and writes JSON.
Nothing is sent beyond the box's namespace.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "multihost")]

from netns_hosts import make_hosts, unavailable  # noqa: E402

from splitserve._ssh import SshNode  # noqa: E402
from splitserve.cluster._link import LinkTarget, check_link  # noqa: E402
from splitserve.cluster._nodes import node_for  # noqa: E402


def shape(dev: str, gbit: float | None) -> None:
    subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"], capture_output=True)
    if gbit is not None:
        # 20 ms of the rate: a sender the busy CPUs hold back for a few ms catches up
        burst = max(256 * 1024, int(gbit * 1e9 / 8 * 0.020))
        subprocess.run(
            [
                "tc",
                "qdisc",
                "add",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                f"{gbit:g}gbit",
                "burst",
                str(burst),
                "latency",
                "50ms",
            ],
            check=True,
            capture_output=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapings", default="1,10", help="Gbit/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mtu", type=int, default=1500, help="MTU of both ends of the veth")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "link_check.json")
    args = ap.parse_args()
    why = unavailable("tc")
    if why:
        sys.exit(f"bench_link_check: {why}")
    tools = ["builtin"] + (["iperf3"] if shutil.which("iperf3") else [])
    shapings: list[float | None] = [None] + [float(x) for x in args.shapings.split(",")]
    base = Path(tempfile.mkdtemp(prefix="linkbench-"))
    gen = make_hosts(base, 1)
    hosts = next(gen)
    results: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    try:
        box = hosts.boxes[0]
        dev = json.loads(
            subprocess.run(["ip", "-j", "route", "get", box.address], capture_output=True, text=True, check=True).stdout
        )[0]["dev"]
        box_dev = next(
            i["ifname"]
            for i in json.loads(
                subprocess.run(["ip", "-n", box.netns, "-j", "addr"], capture_output=True, text=True).stdout
            )
            if any(a.get("local") == box.address for a in i.get("addr_info", []))
        )
        subprocess.run(["ip", "link", "set", "dev", dev, "mtu", str(args.mtu)], check=True)
        subprocess.run(["ip", "-n", box.netns, "link", "set", "dev", box_dev, "mtu", str(args.mtu)], check=True)
        worker = SshNode(box.name, config=hosts.ssh_config, connect_timeout=5)
        target = LinkTarget("w1", worker, box.address, 50052, box.workdir / "link.log")
        for gbit in shapings:
            shape(dev, gbit)
            for tool in tools:
                rates, statuses, rtts = [], [], []
                for _ in range(args.repeat):
                    rows, transfer = check_link(node_for("local"), target, seconds=args.seconds, tool=tool)  # type: ignore[arg-type]
                    rate = next(r for r in rows if r.check == "link-rate")
                    if transfer is None:
                        raise SystemExit(f"no transfer: {rate.message}")
                    rates.append(transfer.gbps)
                    statuses.append(rate.status)
                    rtts.append(transfer.min_rtt_ms)
                med = statistics.median(rates)
                results.append(
                    {
                        "shaping_gbit": gbit,
                        "tool": tool,
                        "seconds": args.seconds,
                        "gbps": rates,
                        "median_gbps": med,
                        "ratio": med / gbit if gbit else None,
                        "link_rate_status": statuses,
                        "rtt_ms": rtts,
                        "last_row": rate.message,
                    }
                )
                print(f"  {gbit or 'none'} Gbit/s, {tool}: {', '.join(f'{r:.2f}' for r in rates)} Gb/s", flush=True)
    finally:
        try:
            shape(dev, None)
        except NameError:
            pass
        try:
            next(gen)
        except StopIteration:
            pass
    load_after = os.getloadavg()
    print()
    print("| shaping | tool | median Gb/s | min-max | median / shaping | link-rate row |")
    print("|---|---|---|---|---|---|")
    for r in results:
        shaping = f"{r['shaping_gbit']:g} Gbit/s" if r["shaping_gbit"] else "none (capacity)"
        ratio = f"{r['ratio']:.3f}" if r["ratio"] else "-"
        print(
            f"| {shaping} | {r['tool']} | {r['median_gbps']:.2f} | {min(r['gbps']):.2f}-{max(r['gbps']):.2f} "
            f"| {ratio} | {'/'.join(sorted(set(r['link_rate_status'])))} |"
        )
    print(
        f"\nMTU {args.mtu} on both ends; load average before {load_before[0]:.1f}, after {load_after[0]:.1f} on {os.cpu_count()} CPUs"
    )
    doc = {
        "what": "preflight link check (check_link) measured rate vs tc tbf shaping of the head's veth end",
        "machine": {
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "loadavg_before": load_before,
            "loadavg_after": load_after,
        },
        "repeat": args.repeat,
        "mtu": args.mtu,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
