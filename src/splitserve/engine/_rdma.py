"""Whether an engine build gets llama.cpp's RDMA transport for RPC, and why (not).

The pinned ``ggml/src/ggml-rpc/CMakeLists.txt`` turns ``GGML_RPC_RDMA`` on by default only
when ``find_library(ibverbs)`` succeeds (RoCE/InfiniBand through libibverbs on Linux; Apple's
librdma over Thunderbolt on macOS) and prints ``RDMA transport enabled (...)`` or ``RDMA
transport disabled`` while configuring. ``option()`` keeps a cached value, so a build folder
first configured without libibverbs would stay off after it is installed: the build passes
``-DGGML_RPC_RDMA=ON|OFF`` itself, decided here.

The decision is not part of the engine's cache key (so machines without libibverbs keep their
engines); a cached engine built without RDMA where the library is now found is rebuilt in its
folder (the compiler cache makes that a relink of ggml-rpc).
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from pathlib import Path

#: Where Debian/Ubuntu (multiarch), Fedora and source installs put the development symlink
#: ``libibverbs.so`` that ``find_library(ibverbs)`` looks for.
LIB_DIRS = ("usr/lib/*-linux-*", "lib/*-linux-*", "usr/lib64", "usr/lib", "usr/local/lib", "usr/local/lib64")
HEADER = "usr/include/infiniband/verbs.h"
PACKAGES = "libibverbs-dev and rdma-core"

_LOG_LINE = re.compile(r"RDMA transport (?P<state>enabled|disabled)(?: \((?P<desc>[^)]*)\))?")


@dataclass(frozen=True)
class RdmaSupport:
    """What a build on this machine does about the RPC RDMA transport."""

    on: bool
    reason: str
    library: str | None = None

    @property
    def state(self) -> str:
        return "on" if self.on else "off"

    def cmake_flag(self) -> str | None:
        """``-DGGML_RPC_RDMA=ON|OFF`` (None where llama.cpp decides: not Linux)."""
        if self.reason.startswith("not a Linux build"):
            return None
        return f"-DGGML_RPC_RDMA={'ON' if self.on else 'OFF'}"

    def text(self) -> str:
        """``on (libibverbs: /usr/lib/x86_64-linux-gnu/libibverbs.so)``, ``off (libibverbs-dev not installed)``."""
        return f"{self.state} ({self.reason})"


def rdma_support(root: Path = Path("/"), system: str | None = None, cmake_args: list[str] | None = None) -> RdmaSupport:
    """Decide RDMA for a build here. ``root``: the filesystem root (a fake tree in tests);
    ``cmake_args``: the user's own ``-DGGML_RPC_RDMA=`` wins."""
    for arg in reversed(cmake_args or []):
        m = re.fullmatch(r"-DGGML_RPC_RDMA(?::BOOL)?=(\S+)", arg)
        if m:
            on = m.group(1).upper() in ("ON", "1", "TRUE", "YES")
            return RdmaSupport(on, f"{arg} given with --cmake-arg")
    system = system or platform.system()
    if system != "Linux":
        return RdmaSupport(False, f"not a Linux build ({system}: llama.cpp decides; Apple's librdma on macOS 26.2+)")
    library = next((p for pattern in LIB_DIRS for p in sorted(root.glob(f"{pattern}/libibverbs.so"))), None)
    if library is None:
        return RdmaSupport(False, f"libibverbs-dev not installed (apt-get install {PACKAGES.replace(' and ', ' ')})")
    if not (root / HEADER).is_file():
        return RdmaSupport(False, f"/{HEADER} missing (libibverbs-dev incomplete)")
    shown = "/" + str(library.relative_to(root))
    return RdmaSupport(True, f"libibverbs found: {shown}", library=shown)


def rdma_from_build_log(text: str) -> str | None:
    """``on`` or ``off`` from cmake's own line in a build log (the last configure wins)."""
    state = None
    for m in _LOG_LINE.finditer(text):
        state = "on" if m.group("state") == "enabled" else "off"
    return state


def rdma_provenance(support: RdmaSupport, build_log: str) -> dict[str, str]:
    """The provenance fields: ``rdma`` (what cmake said, else the decision) and ``rdma_reason``."""
    logged = rdma_from_build_log(build_log)
    state = logged or support.state
    reason = support.reason
    if logged is not None and logged != support.state:
        reason = f"cmake said RDMA transport {'enabled' if logged == 'on' else 'disabled'} ({support.reason})"
    out = {"rdma": state, "rdma_reason": reason}
    if state == "on":
        out["rdma_runtime"] = "needs libibverbs.so.1 (rdma-core) on every node that runs this engine"
    return out


def recorded_rdma(provenance: dict[str, object], build_log: Path | None) -> tuple[str, str]:
    """An engine's (rdma, reason), also for engines built before splitserve recorded it."""
    if provenance.get("rdma") in ("on", "off"):
        return str(provenance["rdma"]), str(provenance.get("rdma_reason") or "")
    text = ""
    if build_log is not None:
        try:
            text = build_log.read_text(errors="replace")
        except OSError:
            text = ""
    logged = rdma_from_build_log(text)
    if logged is None:
        return "unknown", "built before splitserve recorded RDMA, and its build log does not say"
    return logged, "from the build log (built before splitserve recorded RDMA)"


def runtime_hint(log: str) -> str | None:
    """What to do when the RPC backend did not load: with RDMA compiled in, ``libggml-rpc.so``
    needs ``libibverbs.so.1``, and a release build's loader drops the backend without a word
    (``ggml_backend_load_all`` is silent under NDEBUG), so the process only says ``Failed to
    find RPC backend`` (ggml-rpc-server) or ``failed to find RPC backend`` (llama-server --rpc)."""
    if "libibverbs.so.1" not in log and "find rpc backend" not in log.lower():
        return None
    return (
        "the RPC backend (libggml-rpc.so) did not load; an engine built with RDMA (engine info: rdma: on) "
        "needs libibverbs.so.1 on every node: install rdma-core (libibverbs1) there, or build the engine "
        "with --cmake-arg -DGGML_RPC_RDMA=OFF (ldd bin/libggml-rpc.so shows what is missing)"
    )
