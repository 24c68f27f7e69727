"""Preflight: every check that can fail a launch, run before anything starts.

One :class:`CheckRow` per check and node, each ``pass``, ``warn`` or ``fail``
with a one-line fix. The facts of a node (free memory, OOM killers, disk,
addresses, root/sudo) come from one small ``sh`` script, run locally for
local nodes and over ssh for remote ones, so both paths are the same code.

Checks: ``model`` (on the head, the only node that reads it: there, whole, a GGUF; see
:mod:`._model_rows`), ``ssh`` (reachable, BatchMode), ``engine`` (present, same build or
protocol), ``memory`` (free memory against the node's share of the weights),
``oom-killer`` (earlyoom / systemd-oomd would SIGTERM the server mid-load),
``link`` (the link RTT: the lowest of 5 TCP handshakes from the head to the worker's bind address;
see :data:`._checks.LINK_RTT_MEANING`),
``link-rate`` / ``link-mtu`` / ``link-route`` (`preflight` only: a short bulk transfer to each
remote worker's bind address and the traps of fast links; see :mod:`._link`),
``gpu-state`` (each NVIDIA GPU's clocks and power state: throttled or held low is a warning),
``rdma`` (a worker whose node has an RDMA device: a GID for its bind address, the engine's RDMA,
memlock, ``GGML_RPC_NO_RDMA`` / ``GGML_RDMA_GID``, the RoCE MTU; see :mod:`._rdma_node`),
``ports`` (free), ``disk`` (room for the RPC tensor cache), ``bind`` (an
address of the node, not public or wildcard unless allowed; llama-server and
the gateway beyond loopback only with a key), ``smoke`` (the
engine computes on the node's CPU: see :mod:`._smoke`), ``drop-caches`` (root
or passwordless sudo when ``drop_caches = true``).

Nothing is started for good or changed, with two exceptions that ``up`` would
make anyway: a remote node without the head's engine gets it copied (so its
smoke test runs the engine it will use), and the smoke test starts short-lived
processes (ggml-rpc-server on the worker's own address and port, a llama-server
on a free loopback port here).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import ClusterError, SplitserveError
from .._net import is_loopback
from ..engine import Engine
from ._checks import LINK_RTT_WARN_MS, CheckRow, link_rtt_status
from ._edges import port_in_use, probe_port
from ._model_rows import model_rows
from ._spec import ClusterSpec, WorkerSpec, is_local_host, server_auth_problem, unsafe_bind

OOM_KILLERS = {
    "earlyoom": "sudo systemctl disable --now earlyoom",
    "systemd-oomd": "sudo systemctl disable --now systemd-oomd systemd-oomd.socket",
    "oomd": "sudo systemctl disable --now oomd",
    "nohang": "sudo systemctl disable --now nohang",
}
RTT_WARN_MS = LINK_RTT_WARN_MS
COPIED = "copied the head's build"
"""In an ``engine`` row: preflight copied the engine there (``up`` reports it as done)."""

FACTS_SCRIPT = r"""
echo "uid $(id -u)"
awk '/^MemAvailable:/ {print "memavail", $2}' /proc/meminfo 2>/dev/null
cat /proc/[0-9]*/comm 2>/dev/null | sort -u | grep -xE 'earlyoom|systemd-oomd|oomd|nohang' | sed 's/^/oom /'
d="${LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llama.cpp}"
while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "cachedir $d"
df -Pk "$d" 2>/dev/null | awk 'NR==2 {print "diskfree", $4}'
if command -v ip >/dev/null 2>&1; then ip -o addr show 2>/dev/null | awk '{print "addr", $4}'; else echo "addr ?"; fi
if [ "$(id -u)" != 0 ] && sudo -n true 2>/dev/null; then echo "sudo yes"; fi
true
"""


@dataclass
class NodeFacts:
    """What the facts script reported about one host."""

    host: str
    uid: int | None = None
    mem_available: int | None = None
    oom_killers: list[str] = field(default_factory=list)
    cache_dir: str | None = None
    disk_free: int | None = None
    addresses: list[str] | None = None
    """None when ``ip`` is missing there."""
    sudo: bool = False


def parse_facts(host: str, text: str) -> NodeFacts:
    facts = NodeFacts(host)
    addrs: list[str] = []
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        value = value.strip()
        if key == "uid" and value.isdigit():
            facts.uid = int(value)
        elif key == "memavail" and value.isdigit():
            facts.mem_available = int(value) * 1024
        elif key == "oom" and value:
            facts.oom_killers.append(value)
        elif key == "cachedir":
            facts.cache_dir = value
        elif key == "diskfree" and value.isdigit():
            facts.disk_free = int(value) * 1024
        elif key == "addr":
            if value == "?":
                facts.addresses = None
                return _rest(facts, text)
            addrs.append(value.split("/")[0])
        elif key == "sudo":
            facts.sudo = True
    facts.addresses = addrs
    return facts


def _rest(facts: NodeFacts, text: str) -> NodeFacts:
    facts.sudo = any(ln.strip() == "sudo yes" for ln in text.splitlines())
    return facts


def node_facts(spec: ClusterSpec, host: str) -> NodeFacts:
    """Run the facts script on ``host`` (``local`` or an ssh destination)."""
    from ._nodes import node_for

    out = node_for(host, spec.ssh).run(FACTS_SCRIPT, check=False, timeout=30)
    return parse_facts(host, out.stdout.decode("utf-8", "replace"))


# -- estimates -------------------------------------------------------------------------------

_SHARD = re.compile(r"^(?P<stem>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")


def model_bytes(model: Path) -> int:
    """Bytes of the model's GGUF, all shards together."""
    m = _SHARD.match(model.name)
    if m:
        n = int(m.group("n"))
        total = 0
        for i in range(1, n + 1):
            shard = model.with_name(f"{m.group('stem')}-{i:05d}-of-{n:05d}.gguf")
            total += shard.stat().st_size if shard.exists() else 0
        return total
    return model.stat().st_size if model.exists() else 0


def weight_shares(spec: ClusterSpec) -> dict[str, float]:
    """Each worker's share of the weights: ``tensor_split`` when given, else equal per device."""
    counts = [len(w.devices) or 1 for w in spec.workers]
    split = spec.server.tensor_split
    if split is None:
        split = [1.0] * (sum(counts) + len(spec.head.devices))
    total = sum(split) or 1.0
    shares: dict[str, float] = {}
    i = 0
    for w, n in zip(spec.workers, counts):
        shares[w.name] = sum(split[i : i + n]) / total
        i += n
    return shares


def _mib(n: float) -> str:
    return f"{n / 1048576:,.0f} MiB" if n < 10 << 30 else f"{n / (1 << 30):,.1f} GiB"


def _connect_rtt_ms(host: str, port: int, tries: int = 5, timeout: float = 2.0) -> tuple[float | None, str]:
    """The link RTT (:data:`._checks.LINK_RTT_MEANING`): the lowest of ``tries`` TCP handshakes,
    each one round trip that the far kernel answers (SYN-ACK, or RST for a port nothing serves)."""
    times = []
    for _ in range(tries):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            t0 = time.perf_counter()
            try:
                s.connect((host, port))
            except ConnectionRefusedError:
                pass
            except OSError as exc:
                return None, exc.strerror or str(exc)
            times.append((time.perf_counter() - t0) * 1000)
    return min(times), ""


def _local_port_busy(bind: str, port: int) -> bool | None:
    """Like `up`'s own check; None when the address cannot be tried here."""
    try:
        return port_in_use(bind, port)
    except (ClusterError, OSError):
        return None


# -- the checks ------------------------------------------------------------------------------


def run_checks(
    spec: ClusterSpec,
    engines: dict[str, Engine] | None = None,
    skip: Iterable[str] = (),
    link_transfer: bool = False,
) -> list[CheckRow]:
    """Every preflight check for ``spec``; nothing is started or changed. With ``link_transfer``
    (`preflight`, not `up`), a short bulk transfer measures each remote worker's link."""
    from ._down import resolve_engines

    skipped = set(skip)
    rows: list[CheckRow] = []
    if engines is None:
        try:
            engines = resolve_engines(spec)
        except SplitserveError as exc:
            rows.append(CheckRow("engine", "head", "fail", str(exc), "build one: splitserve engine build"))
            return rows
    rows += model_rows(spec)
    hosts = ["local"] + [w.host for w in spec.workers if w.remote]
    hosts = list(dict.fromkeys(hosts))
    node_of_host: dict[str, list[str]] = {}
    node_of_host.setdefault("local", []).append("head")
    for w in spec.workers:
        node_of_host.setdefault("local" if not w.remote else w.host, []).append(w.name)

    facts: dict[str, NodeFacts | None] = {}
    for host in hosts:
        nodes = node_of_host.get(host, [host])
        if is_local_host(host):
            facts[host] = node_facts(spec, host)
            continue
        try:
            t0 = time.perf_counter()
            facts[host] = node_facts(spec, host)
            rows.extend(_per_node("ssh", nodes, "pass", f"{host} answers ({(time.perf_counter() - t0) * 1000:.0f} ms)"))
        except ClusterError as exc:
            facts[host] = None
            rows.extend(
                _per_node(
                    "ssh",
                    nodes,
                    "fail",
                    str(exc),
                    f"make `ssh {host} true` work without a prompt (ssh-copy-id {host}, ~/.ssh/config)",
                )
            )

    def host_of(w: WorkerSpec) -> str:
        return w.host if w.remote else "local"

    rows += _engine_rows(spec, engines, facts, host_of)
    rows += _memory_rows(spec, facts, host_of)
    for host in hosts:
        f = facts.get(host)
        nodes = node_of_host.get(host, [host])
        if f is None:
            continue
        if f.oom_killers:
            name = f.oom_killers[0]
            rows.extend(
                _per_node(
                    "oom-killer",
                    nodes,
                    "fail",
                    f"{', '.join(f.oom_killers)} runs on {host}: it may SIGTERM llama.cpp while the model loads",
                    OOM_KILLERS.get(name, f"stop {name}"),
                )
            )
        else:
            rows.extend(_per_node("oom-killer", nodes, "pass", "no earlyoom / systemd-oomd"))
    if "gpu-state" not in skipped:
        rows += _gpu_state_rows(spec, hosts, facts, node_of_host)
    rows += _link_rows(spec, facts, host_of)
    if "rdma" not in skipped:
        from ._rdma_node import preflight_rdma_rows

        rows += preflight_rdma_rows(spec, engines, lambda w: facts.get(host_of(w)) is not None)
    if link_transfer:
        from ._link import link_check_rows

        rows += link_check_rows(spec, [w for w in spec.workers if facts.get(host_of(w)) is not None])
    if "ports" not in skipped:
        rows += _port_rows(spec, facts, host_of)
    rows += _disk_rows(spec, facts, host_of)
    rows += _bind_rows(spec, facts, host_of)
    if "smoke" not in skipped:
        rows += _smoke_rows(spec, engines, facts, rows)
    if spec.drop_caches:
        for host in hosts:
            f = facts.get(host)
            if f is None:
                continue
            nodes = node_of_host.get(host, [host])
            if f.uid == 0 or f.sudo:
                rows.extend(
                    _per_node(
                        "drop-caches",
                        nodes,
                        "pass",
                        f"page cache will be dropped ({'root' if f.uid == 0 else 'sudo -n'})",
                    )
                )
            else:
                rows.extend(
                    _per_node(
                        "drop-caches",
                        nodes,
                        "warn",
                        f"drop_caches = true needs root or passwordless sudo on {host}; not available",
                        "allow `sudo -n tee /proc/sys/vm/drop_caches` there, or set drop_caches = false",
                    )
                )
    return rows


def _gpu_state_rows(
    spec: ClusterSpec, hosts: list[str], facts: dict[str, NodeFacts | None], node_of_host: dict[str, list[str]]
) -> list[CheckRow]:
    """Per node: its GPUs' clocks and power state (``gpu-state``: see :mod:`._gpu`)."""
    from ._gpu import gpu_rows, read_gpu_state
    from ._nodes import node_for

    reports = {}
    for host in hosts:
        if facts.get(host) is None:
            continue
        try:
            reports[host] = read_gpu_state(node_for(host, spec.ssh))
        except ClusterError:
            continue
    return gpu_rows(reports, node_of_host)


def _per_node(check: str, nodes: list[str], status: str, message: str, fix: str = "") -> list[CheckRow]:
    """A host-wide check's result as one row per node on that host (ssh, memory, OOM killer,
    drop-caches are made once per host; every check reports per node)."""
    return [CheckRow(check, node, status, message, fix) for node in nodes]


def _engine_rows(
    spec: ClusterSpec, engines: dict[str, Engine], facts: dict[str, NodeFacts | None], host_of: Any
) -> list[CheckRow]:
    from ._distribute import check_node_engine
    from ._nodes import node_for

    rows = []
    head = engines["head"]
    proto = head.rpc_protocol
    try:
        head.binary("server")
        rows.append(CheckRow("engine", "head", "pass", f"{head.key}, RPC protocol {proto or 'unknown'}"))
    except SplitserveError as exc:
        rows.append(CheckRow("engine", "head", "fail", str(exc), "splitserve engine build"))
    for w in spec.workers:
        eng = engines[w.name]
        if not w.remote:
            try:
                eng.binary("rpc_server")
            except SplitserveError as exc:
                rows.append(CheckRow("engine", w.name, "fail", str(exc), "splitserve engine build"))
                continue
            if proto and eng.rpc_protocol and eng.rpc_protocol != proto:
                rows.append(
                    CheckRow(
                        "engine",
                        w.name,
                        "fail",
                        f"RPC protocol {eng.rpc_protocol} differs from the head's {proto}",
                        "use one engine for every node (remove the worker's `engine`)",
                    )
                )
            else:
                rows.append(CheckRow("engine", w.name, "pass", f"{eng.key} (local)"))
            continue
        if facts.get(w.host) is None:
            rows.append(CheckRow("engine", w.name, "skip", "node unreachable", "fix ssh first"))
            continue
        try:
            found = check_node_engine(spec, w, eng, node_for(w.host, spec.ssh))
        except SplitserveError as exc:
            rows.append(CheckRow("engine", w.name, "fail", str(exc), "check the node's disk and ssh access"))
            continue
        own = eng.provenance.get("node_path")
        if own:
            if not found.present:
                rows.append(
                    CheckRow(
                        "engine",
                        w.name,
                        "fail",
                        f"{found.detail} on {w.host}",
                        f"build llama.cpp with -DGGML_RPC=ON in {own} there, or remove `engine` "
                        "to have up copy the head's",
                    )
                )
            elif proto and found.protocol != proto:
                rows.append(
                    CheckRow(
                        "engine",
                        w.name,
                        "fail",
                        f"{found.detail}; the head speaks {proto}",
                        "build the head's llama.cpp version on that node, or remove `engine` "
                        "to have up copy the head's build",
                    )
                )
            else:
                rows.append(CheckRow("engine", w.name, "pass", found.detail))
        elif found.same:
            rows.append(CheckRow("engine", w.name, "pass", f"same build as the head: {found.detail}"))
        else:
            # Copied now, as `up` would, so the smoke test runs the engine this node will use.
            from ._distribute import copy_engine

            try:
                sent = copy_engine(w, eng, node_for(w.host, spec.ssh))
            except SplitserveError as exc:
                rows.append(
                    CheckRow(
                        "engine",
                        w.name,
                        "fail",
                        f"{found.detail}; copying the head's build failed: {exc}",
                        f"check the disk and write access of {w.workdir} on {w.host}",
                    )
                )
                continue
            rows.append(
                CheckRow(
                    "engine",
                    w.name,
                    "pass",
                    f"{found.detail}: {COPIED} to {w.host}:{eng.bin_dir} ({sent / 1048576:.1f} MiB, sha256 verified)",
                )
            )
    return rows


def _smoke_rows(
    spec: ClusterSpec, engines: dict[str, Engine], facts: dict[str, NodeFacts | None], earlier: list[CheckRow]
) -> list[CheckRow]:
    """The engine smoke test on every node with the engine it will run (see ._smoke)."""
    from ._nodes import node_for
    from ._smoke import ROLES, fix_for, local_report, node_check

    failed = {(r.check, r.node) for r in earlier if r.status in ("fail", "skip")}
    rows: list[CheckRow] = []
    head = engines["head"]
    reports: dict[str, Any] = {}
    token: list[int] | None = None
    local_nodes = ["head"] + [w.name for w in spec.workers if not w.remote]
    for node in local_nodes:
        eng = engines[node]
        if ("engine", node) in failed:
            rows.append(CheckRow("smoke", node, "skip", "no usable engine", "fix the engine row first"))
            continue
        missing = [
            r for r in ROLES if not (eng.bin_dir / str(eng.provenance.get("binaries", {}).get(r, "-"))).is_file()
        ]
        if missing:
            rows.append(
                CheckRow(
                    "smoke",
                    node,
                    "skip",
                    f"engine {eng.key} has no {', '.join(missing)} binary",
                    "build one with `splitserve engine build` to have it tested",
                )
            )
            continue
        if eng.key not in reports:
            reports[eng.key] = local_report(eng)
        report, _from_build = reports[eng.key]
        if isinstance(report, dict):  # the build's own, on this machine
            rows.append(
                CheckRow(
                    "smoke",
                    node,
                    "pass",
                    f"{eng.key} passed its smoke test when built on this machine"
                    + (f" (CPU variant {report.get('cpu_variant')})" if report.get("cpu_variant") else ""),
                )
            )
            token = token or report.get("token")
        elif report.ok:
            rows.append(CheckRow("smoke", node, "pass", f"{eng.key}: {report.summary()}"))
            token = token or report.token
        else:
            bad = report.failed
            rows.append(
                CheckRow(
                    "smoke",
                    node,
                    "fail",
                    f"{eng.key} on this machine: {report.summary()}",
                    fix_for(eng, bad, "this machine"),
                )
            )
    head_ok = any(r.node == "head" and r.status == "pass" for r in rows)
    for w in spec.workers:
        if not w.remote:
            continue
        if facts.get(w.host) is None or ("engine", w.name) in failed or ("bind", w.name) in failed:
            rows.append(
                CheckRow("smoke", w.name, "skip", "node, engine or bind address not usable", "fix the rows above first")
            )
            continue
        if not head_ok:
            rows.append(
                CheckRow(
                    "smoke",
                    w.name,
                    "skip",
                    "the head's engine did not pass its own smoke test",
                    "fix the head's smoke row first",
                )
            )
            continue
        if ("ports", w.name) in failed or probe_port(w.bind, w.port) != "closed":
            rows.append(
                CheckRow(
                    "smoke",
                    w.name,
                    "skip",
                    f"{w.bind}:{w.port} is taken: the test runs on that port",
                    "free the port (see the ports row)",
                )
            )
            continue
        try:
            check = node_check(spec, w, engines[w.name], head, token, node_for(w.host, spec.ssh))
        except SplitserveError as exc:
            rows.append(
                CheckRow(
                    "smoke",
                    w.name,
                    "fail",
                    f"could not run the smoke test on {w.host}: {exc}",
                    "check ssh and the engine folder on that node",
                )
            )
            continue
        if check.ok:
            variant = f", CPU variant {check.cpu_variant}" if check.cpu_variant else ""
            rows.append(
                CheckRow(
                    "smoke",
                    w.name,
                    "pass",
                    f"ggml-rpc-server on {w.host} computed the head's token over {w.bind}:{w.port}{variant}",
                )
            )
        else:
            rows.append(
                CheckRow(
                    "smoke", w.name, "fail", f"on {w.host}: {check.line()}", fix_for(engines[w.name], check, w.host)
                )
            )
    return rows


def planned_need(spec: ClusterSpec, facts: dict[str, NodeFacts | None], host_of: Any) -> dict[str, float] | None:
    """Bytes each host must hold (weights + KV + compute of its workers' devices) from the
    planner, planning against each host's available memory; None when it cannot plan (no
    readable GGUF headers, an unreachable node)."""
    try:
        from ..model import inspect_model
        from ..plan import Node, make_plan
        from ._planning import spec_options

        per_host: dict[str, int] = {}
        for w in spec.workers:
            per_host[host_of(w)] = per_host.get(host_of(w), 0) + (len(w.devices) or 1)
        nodes, hosts = [], []
        for w in spec.workers:
            f = facts.get(host_of(w))
            if f is None or f.mem_available is None:
                return None
            devices: list[str | None] = list(w.devices) or [None]
            for d in devices:
                nodes.append(Node(w.name if d is None else f"{w.name}/{d}", f.mem_available // per_host[host_of(w)]))
                hosts.append(host_of(w))
        for d in spec.head.devices:
            f = facts.get("local")
            if f is None or f.mem_available is None:
                return None
            nodes.append(Node(f"head/{d}", f.mem_available))
            hosts.append("local")
        options = spec_options(spec)
        plan = make_plan(inspect_model(spec.model), nodes, options)
    except Exception:  # noqa: BLE001 - the planner is an estimate: any failure falls back to the file-size share
        return None
    need: dict[str, float] = {}
    for node, host in zip(plan.nodes, hosts):
        if not node.name.startswith("head/"):
            need[host] = need.get(host, 0.0) + node.total_bytes
    return need


def _memory_rows(spec: ClusterSpec, facts: dict[str, NodeFacts | None], host_of: Any) -> list[CheckRow]:
    rows = []
    total = model_bytes(spec.model)
    shares = weight_shares(spec)
    need: dict[str, float] = {}
    names: dict[str, list[str]] = {}
    for w in spec.workers:
        need[host_of(w)] = need.get(host_of(w), 0.0) + total * shares[w.name]
        names.setdefault(host_of(w), []).append(w.name)
    planned = planned_need(spec, facts, host_of) if total else None
    how = "planner: weights + KV + compute" if planned else "estimate: file size x split"
    if planned:
        need.update(planned)
    for host, want in need.items():
        f = facts.get(host)
        nodes = names[host]
        if f is None:
            continue
        if not total:
            rows.extend(_per_node("memory", nodes, "skip", f"model {spec.model} not found here; cannot estimate"))
            continue
        if f.mem_available is None:
            rows.extend(_per_node("memory", nodes, "warn", f"could not read /proc/meminfo on {host}", ""))
            continue
        text = f"needs {_mib(want)} ({how}) vs {_mib(f.mem_available)} available on {host}"
        if want > f.mem_available:
            rows.extend(
                _per_node(
                    "memory",
                    nodes,
                    "fail",
                    text,
                    "move layers to a bigger node with server.tensor_split, or free memory there",
                )
            )
        elif want > 0.9 * f.mem_available:
            rows.extend(
                _per_node(
                    "memory",
                    nodes,
                    "warn",
                    text + " (under 10% left for KV and compute)",
                    "lower ctx_size or shift server.tensor_split away from this node",
                )
            )
        else:
            rows.extend(_per_node("memory", nodes, "pass", text))
    return rows


def _link_rows(spec: ClusterSpec, facts: dict[str, NodeFacts | None], host_of: Any) -> list[CheckRow]:
    rows = []
    for w in spec.workers:
        if facts.get(host_of(w)) is None:
            continue
        if w.bind in ("0.0.0.0", "::"):
            rows.append(CheckRow("link", w.name, "skip", "wildcard bind: no single address to measure"))
            continue
        rtt, why = _connect_rtt_ms(w.bind, w.port)
        if rtt is None:
            # A listener with a full backlog (the ports check reports it) also times out:
            # measure the address on a port that nothing serves instead.
            rtt, _ = _connect_rtt_ms(w.bind, 9, tries=3)
        if rtt is None:
            rows.append(
                CheckRow(
                    "link",
                    w.name,
                    "fail",
                    f"cannot reach {w.bind}:{w.port} from the head: {why}",
                    "check the link's addresses and routes, and that no firewall drops the port",
                )
            )
        elif link_rtt_status(rtt) == "warn":
            rows.append(
                CheckRow(
                    "link",
                    w.name,
                    "warn",
                    f"link RTT to {w.bind}: {rtt:.3f} ms (lowest of 5 TCP handshakes; over {RTT_WARN_MS:g} ms): "
                    "WiFi or a routed path instead of the direct link?",
                    "set bind to the worker's address on the direct/fast link",
                )
            )
        else:
            rows.append(
                CheckRow("link", w.name, "pass", f"link RTT to {w.bind}: {rtt:.3f} ms (lowest of 5 TCP handshakes)")
            )
    return rows


def _recorded_ports(spec: ClusterSpec) -> set[tuple[str, int]]:
    from ._commands import cluster_state_dir
    from ._state import read_state

    try:
        state = read_state(cluster_state_dir(spec))
    except SplitserveError:
        return set()
    return {(p.bind, p.port) for p in state.processes} if state else set()


def _port_rows(spec: ClusterSpec, facts: dict[str, NodeFacts | None], host_of: Any) -> list[CheckRow]:
    rows = []
    ours = _recorded_ports(spec)
    items: list[tuple[str, str, str, int, str]] = [
        (w.name, host_of(w), w.bind, w.port, f"workers[{w.name}].port") for w in spec.workers
    ]
    items.append(("head", "local", spec.server.host, spec.server.port, "server.port"))
    if spec.gateway.enabled and spec.gateway.port is not None:  # without a port, up picks a free one
        items.append(("gateway", "local", spec.gateway.host, spec.gateway.port, "gateway.port"))
    for node, host, bind, port, key in items:
        if facts.get(host) is None:
            continue
        if is_local_host(host):
            busy = _local_port_busy(bind, port)
            if busy is None:
                rows.append(
                    CheckRow(
                        "ports",
                        node,
                        "fail",
                        f"{bind} is not an address of this machine",
                        f"use an address this machine has for {key.split('.')[0]}",
                    )
                )
                continue
        else:
            probe = probe_port(bind, port)
            if probe == "timeout":
                rows.append(
                    CheckRow(
                        "ports",
                        node,
                        "fail",
                        f"{bind}:{port} does not answer (connect timed out): "
                        "a listener that never accepts, or a firewall dropping the port",
                        f"find the process holding it on {host}, or change {key}",
                    )
                )
                continue
            busy = probe == "open"
        if not busy:
            rows.append(CheckRow("ports", node, "pass", f"{bind}:{port} is free"))
        elif (bind, port) in ours:
            rows.append(
                CheckRow(
                    "ports",
                    node,
                    "warn",
                    f"{bind}:{port} is held by this cluster (running)",
                    "nothing to do: up stops it first (or run `splitserve down`)",
                )
            )
        else:
            rows.append(
                CheckRow(
                    "ports",
                    node,
                    "fail",
                    f"{bind}:{port} is in use by another process",
                    f"stop that process or change {key}",
                )
            )
    return rows


def _disk_rows(spec: ClusterSpec, facts: dict[str, NodeFacts | None], host_of: Any) -> list[CheckRow]:
    rows = []
    total = model_bytes(spec.model)
    shares = weight_shares(spec)
    for w in spec.workers:
        f = facts.get(host_of(w))
        if f is None or not w.cache:
            continue
        want = total * shares[w.name]
        if f.disk_free is None:
            rows.append(CheckRow("disk", w.name, "warn", f"could not read free space on {w.host}"))
        elif want > f.disk_free:
            rows.append(
                CheckRow(
                    "disk",
                    w.name,
                    "warn",
                    f"RPC tensor cache needs ~{_mib(want)}, {_mib(f.disk_free)} free in {f.cache_dir}",
                    "free space there, point LLAMA_CACHE (worker env) elsewhere, or set cache = false",
                )
            )
        else:
            rows.append(
                CheckRow(
                    "disk", w.name, "pass", f"{_mib(f.disk_free)} free in {f.cache_dir} for ~{_mib(want)} of cache"
                )
            )
    return rows


def _auth_rows(spec: ClusterSpec) -> list[CheckRow]:
    """The listening rule of the HTTP endpoints (`up` refuses the same): llama-server and the
    gateway serve beyond loopback only with a key."""
    from ._down import _check_gateway_auth

    rows = []
    host = spec.server.host
    problem = server_auth_problem(spec)
    if problem:
        rows.append(
            CheckRow(
                "bind",
                "head",
                "fail",
                f"llama-server on {host} would serve every client without a key",
                'set server.api_key (the gateway sends it), or server.host = "127.0.0.1"',
            )
        )
    else:
        rows.append(
            CheckRow(
                "bind",
                "head",
                "pass",
                f"llama-server on {host}" + (" (loopback)" if is_loopback(host) else " (with a key)"),
            )
        )
    if spec.gateway.enabled:
        try:
            _check_gateway_auth(spec)
        except SplitserveError:
            rows.append(
                CheckRow(
                    "bind",
                    "gateway",
                    "fail",
                    f"the gateway on {spec.gateway.host} would serve every client without a key",
                    'set gateway.api_key or gateway.keys_file (or SPLITSERVE_API_KEY), or gateway.host = "127.0.0.1"',
                )
            )
        else:
            rows.append(
                CheckRow(
                    "bind",
                    "gateway",
                    "pass",
                    f"the gateway on {spec.gateway.host}"
                    + (" (loopback)" if is_loopback(spec.gateway.host) else " (with a key)"),
                )
            )
    return rows


def _bind_rows(spec: ClusterSpec, facts: dict[str, NodeFacts | None], host_of: Any) -> list[CheckRow]:
    rows = _auth_rows(spec)
    for w in spec.workers:
        f = facts.get(host_of(w))
        if f is None:
            continue
        problem = unsafe_bind(w.bind)
        if problem:
            status = "warn" if spec.allow_public_rpc else "fail"
            rows.append(
                CheckRow(
                    "bind",
                    w.name,
                    status,
                    f"{w.bind} is {problem}; llama.cpp's RPC has no authentication"
                    + (" (allowed by allow_public_rpc = true)" if spec.allow_public_rpc else ""),
                    "bind to the private link's address"
                    + ("" if spec.allow_public_rpc else ", or set allow_public_rpc = true"),
                )
            )
            continue
        if w.bind in ("localhost", "127.0.0.1", "::1") or f.addresses is None:
            rows.append(CheckRow("bind", w.name, "pass", f"{w.bind} is private"))
        elif w.bind not in f.addresses:
            rows.append(
                CheckRow(
                    "bind",
                    w.name,
                    "fail",
                    f"{w.bind} is not an address of {w.host}",
                    f"set workers[{w.name}].bind to one of: {', '.join(a for a in f.addresses if a not in ('127.0.0.1', '::1'))[:200]}",
                )
            )
        else:
            rows.append(CheckRow("bind", w.name, "pass", f"{w.bind} is a private address of {w.host}"))
    return rows


def preflight(spec: ClusterSpec, engine: Engine | None = None) -> list[CheckRow]:
    """The preflight rows for ``spec`` (what `splitserve preflight` prints)."""
    from ._down import resolve_engines

    if spec.backend != "llama.cpp":  # vLLM / SGLang: engine, NIC, GPUs, Ray, ports
        from ._engines_facts import engine_preflight

        return engine_preflight(spec)

    try:
        engines = resolve_engines(spec, engine)
    except SplitserveError as exc:
        return [*model_rows(spec), CheckRow("engine", "head", "fail", str(exc), "build one: splitserve engine build")]
    return run_checks(spec, engines, link_transfer=True)


def drop_page_caches(spec: ClusterSpec) -> list[tuple[str, str]]:
    """Drop the page cache on every node (``sync; echo 3 > /proc/sys/vm/drop_caches``)."""
    from ._launch import DROP_CACHES_SCRIPT
    from ._nodes import node_for

    out = []
    hosts = list(dict.fromkeys(["local"] + [w.host for w in spec.workers if w.remote]))
    for host in hosts:
        ok = node_for(host, spec.ssh).run(DROP_CACHES_SCRIPT, check=False, timeout=120).returncode == 0
        out.append((host, "page cache dropped" if ok else "could not drop the page cache (needs root or sudo -n)"))
    return out


__all__ = [
    "CheckRow",
    "NodeFacts",
    "drop_page_caches",
    "model_bytes",
    "parse_facts",
    "preflight",
    "run_checks",
    "weight_shares",
]
