"""Getting the same engine onto every node, and checking that it speaks the same RPC protocol.

A remote worker runs one of two things:

- the head's own engine, copied to ``<workdir>/engines/<key>/`` on the node
  when it is missing or differs (only what ``ggml-rpc-server`` needs: the
  binary and the ``libggml*`` libraries), verified file by file with SHA-256
  after the copy; or
- a build of its own (``engine = "/opt/llama.cpp/build/bin"`` in the worker's
  spec: a folder *on that node*), which is never touched; its protocol
  version is probed instead.

The copy is ``tar`` over the ssh connection (nothing to install on either side
beyond ``tar`` and ``sha256sum``).  Every worker is also asked for its
protocol version over the wire once it listens (:func:`rpc_hello`, the same
HELLO message llama-server sends), before the head starts.
"""

from __future__ import annotations

import hashlib
import shlex
import socket
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .._errors import ClusterError, NodeError
from .._node import Node
from ..engine import Engine
from ._spec import ClusterSpec, WorkerSpec

RPC_CMD_HELLO = 14
RPC_CONN_CAPS_SIZE = 24
RPC_NAMES = ("ggml-rpc-server", "rpc-server")


def is_engine_path(value: str) -> bool:
    """An engine given as a folder (not as a cache key)."""
    return "/" in value or value.startswith((".", "~"))


def engine_files(engine: Engine, server: bool = False) -> list[str]:
    """The files a worker needs, relative to the engine's ``bin_dir``: the RPC server and the
    ggml libraries (symlinks included, so the sonames resolve); with ``server`` (a worker that runs
    a replica's llama-server) llama-server and every library it loads too."""
    rpc = engine.path("rpc_server").name
    names = {rpc}
    if server:
        names.add(engine.path("server").name)
    prefixes = ("lib",) if server else ("libggml",)
    if engine.bin_dir.is_dir():
        for child in engine.bin_dir.iterdir():
            if child.name.startswith(prefixes) and ".so" in child.name:
                names.add(child.name)
    return sorted(names)


_SUMS: dict[tuple[str, float, int], str] = {}


def _sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime, st.st_size)
    if key not in _SUMS:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        _SUMS[key] = h.hexdigest()
    return _SUMS[key]


def local_manifest(engine: Engine, server: bool = False) -> dict[str, str]:
    """SHA-256 of every file a worker needs (symlinks by their target's content)."""
    return {name: _sha256(engine.bin_dir / name) for name in engine_files(engine, server)}


def remote_engine_dir(worker: WorkerSpec, key: str) -> str:
    return f"{worker.workdir.rstrip('/')}/engines/{key}"


def node_engine(worker: WorkerSpec, local: Engine | None, path: str | None = None) -> Engine:
    """The engine of a remote worker as seen *on that node* (paths are the node's)."""
    if path is not None:
        rpc = "ggml-rpc-server"
        return Engine(
            root=Path(path),
            bin_dir=Path(path),
            provenance={
                "key": f"{worker.name}:{path}",
                "backend": "unknown",
                "binaries": {"rpc_server": rpc, "server": "llama-server"},
                "node_path": path,
            },
        )
    assert local is not None
    where = remote_engine_dir(worker, local.key)
    prov = dict(local.provenance)
    prov.update({"bin_dir": where, "copied_from": str(local.bin_dir)})
    return Engine(root=Path(where), bin_dir=Path(where), provenance=prov)


@dataclass
class EngineCheck:
    """What :func:`check_node_engine` found on one node."""

    node: str
    present: bool
    same: bool | None
    """Every file matches the head's checksum (None for a node's own build)."""
    protocol: str | None
    detail: str


def _remote_sums(transport: Node, folder: str, names: list[str]) -> dict[str, str]:
    from ._ssh import sh_path

    files = " ".join(shlex.quote(n) for n in names)
    res = transport.run(
        f"cd {sh_path(folder)} 2>/dev/null && sha256sum {files} 2>/dev/null; true",
        check=False,
    )
    sums = {}
    for line in res.stdout.decode().splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2:
            sums[parts[1].lstrip("*").strip()] = parts[0]
    return sums


def check_node_engine(
    spec: ClusterSpec, worker: WorkerSpec, engine: Engine, transport: Node, server: bool = False
) -> EngineCheck:
    """Whether a remote worker's engine is present and the same build (no changes made); ``server``:
    with llama-server's files (a worker that runs a replica's llama-server)."""
    path = engine.provenance.get("node_path")
    if path:
        return _probe_own_build(worker, str(path), transport)
    source = Path(str(engine.provenance["copied_from"]))
    local = Engine(root=source, bin_dir=source, provenance=engine.provenance)
    want = local_manifest(local, server)
    have = _remote_sums(transport, str(engine.bin_dir), list(want))
    if not have:
        return EngineCheck(worker.name, False, False, engine.rpc_protocol, f"no copy in {engine.bin_dir}")
    diff = sorted(n for n in want if have.get(n) != want[n])
    if diff:
        return EngineCheck(
            worker.name,
            True,
            False,
            engine.rpc_protocol,
            f"{len(diff)} of {len(want)} files differ from the head's ({', '.join(diff[:3])})",
        )
    return EngineCheck(
        worker.name, True, True, engine.rpc_protocol, f"{len(want)} files match the head's build (sha256)"
    )


PROBE_SCRIPT = r"""
d={dir}
rpc=""
for n in {names}; do [ -x "$d/$n" ] && {{ rpc="$d/$n"; break; }}; done
[ -n "$rpc" ] || {{ echo "MISSING"; exit 0; }}
echo "BINARY $(basename "$rpc")"
out=$(mktemp)
port=$(( 40000 + $$ % 20000 ))
# Line-buffered, or the version line sits in a buffer (stdout is a file here).
if command -v stdbuf >/dev/null 2>&1; then buf="stdbuf -oL -eL"; else buf=""; fi
LD_LIBRARY_PATH="$d${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" $buf "$rpc" -H 127.0.0.1 -p $port > "$out" 2>&1 < /dev/null &
pid=$!
i=0
while [ $i -lt 200 ]; do grep -q "RPC server v" "$out" && break; kill -0 $pid 2>/dev/null || break; sleep 0.05; i=$((i+1)); done
kill $pid 2>/dev/null; wait $pid 2>/dev/null
grep -o "RPC server v[0-9.]*" "$out" | head -n 1
rm -f "$out"
"""


def _probe_own_build(worker: WorkerSpec, path: str, transport: Node) -> EngineCheck:
    from ._ssh import sh_path

    script = PROBE_SCRIPT.format(dir=sh_path(path.rstrip("/")), names=" ".join(RPC_NAMES))
    out = transport.run(script, check=False, timeout=30).stdout.decode()
    if "MISSING" in out:
        return EngineCheck(worker.name, False, None, None, f"no ggml-rpc-server in {path}")
    binary = next((ln.split()[1] for ln in out.splitlines() if ln.startswith("BINARY ")), "ggml-rpc-server")
    proto = next((ln.rsplit(" v", 1)[1] for ln in out.splitlines() if ln.startswith("RPC server v")), None)
    return EngineCheck(
        worker.name, True, None, proto, f"{binary} in {path}, RPC protocol {proto or 'unknown (it printed no version)'}"
    )


def copy_engine(worker: WorkerSpec, engine: Engine, transport: Node, server: bool = False) -> int:
    """Copy the head's engine to a remote worker and verify it; returns the bytes sent (``server``:
    llama-server and its libraries too)."""
    from ._ssh import sh_path

    source = Path(str(engine.provenance["copied_from"]))
    local = Engine(root=source, bin_dir=source, provenance=engine.provenance)
    want = local_manifest(local, server)
    dest = str(engine.bin_dir)
    tmp = dest.rstrip("/") + ".partial"
    tar = subprocess.run(["tar", "-C", str(source), "-cf", "-", *want], capture_output=True, check=False)
    if tar.returncode != 0:
        raise ClusterError(f"cannot pack the engine in {source}: {tar.stderr.decode().strip()[:200]}")
    transport.run(
        f"rm -rf {sh_path(tmp)} && mkdir -p {sh_path(tmp)} && tar -C {sh_path(tmp)} -xf -",
        input=tar.stdout,
        timeout=600,
    )
    have = _remote_sums(transport, tmp, list(want))
    bad = sorted(n for n in want if have.get(n) != want[n])
    if bad:
        raise NodeError(
            worker.name,
            f"the engine copied to {tmp} does not match the head's build "
            f"({', '.join(bad[:3])}): check the disk on {worker.host}",
        )
    transport.run(f"rm -rf {sh_path(dest)} && mv {sh_path(tmp)} {sh_path(dest)}")
    return len(tar.stdout)


def rpc_hello(host: str, port: int, timeout: float = 5.0) -> str:
    """Ask an RPC server its protocol version (the HELLO message llama-server sends first)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(struct.pack("<BQ", RPC_CMD_HELLO, RPC_CONN_CAPS_SIZE) + bytes(RPC_CONN_CAPS_SIZE))
        size = struct.unpack("<Q", _recv(s, 8))[0]
        if size < 3 or size > 4096:
            raise ClusterError(f"{host}:{port}: unexpected HELLO reply size {size}: is this a ggml-rpc-server?")
        body = _recv(s, size)
    return f"{body[0]}.{body[1]}.{body[2]}"


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ClusterError("the RPC server closed the connection during HELLO (an older protocol?)")
        buf += chunk
    return buf


__all__ = [
    "EngineCheck",
    "check_node_engine",
    "copy_engine",
    "engine_files",
    "is_engine_path",
    "local_manifest",
    "node_engine",
    "rpc_hello",
]
