"""How far a worker's share of the first load has got, from the worker's side as well as the head's.

The live page's load meter used to count only the bytes the head's TCP socket to the worker had
sent (``ss -ti``'s ``bytes_acked``). That figure is low or zero when the tensors do not cross
that socket: with a warm or pre-filled ``-c`` cache the head sends a 24-byte hash per big tensor
and the worker reads the tensor from its cache file, and with RDMA the socket carries nothing
after the switch. So the worker's own side is read too:

* its process I/O counters (``/proc/PID/io``): ``rchar`` counts what it read with ``read()`` —
  the cache files of its cache hits (``std::ifstream`` in ``rpc_server::get_cached_file``); a
  socket's ``recv()`` is not counted there, so the head's bytes are not counted twice —, and
  ``wchar`` what it wrote with ``write()``: the cache files of its misses (``saved to``, which
  with RDMA are the big tensors that arrived without touching the socket), plus its log;
* its log, where the engine reports each cache hit itself when ``GGML_RPC_DEBUG`` is set
  (``[set_tensor_hash] buffer: …, size: N, hash: H``) and each miss it saved always
  (``[set_tensor] saved to '…'``).

:func:`worker_loaded_bytes` puts them together: what arrived over the link (the larger of the
head's TCP count and what the worker saved: with TCP the saved tensors are inside the TCP count,
with RDMA only the saved count sees them) plus what it read from its cache (the log's hits when
it reports them, else ``rchar``). Pure but for :func:`read_worker_side`, which reads a worker's
counters and log tail where it runs (this machine, or over its node's SSH).

``rchar`` counts from the worker's start: a worker that already served an earlier load in the
same process (the head alone restarted) reads high; the page caps the fraction at 100 %.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import SplitserveError

if TYPE_CHECKING:
    from ._spec import SshSpec

_HIT = re.compile(r"\[set_tensor_hash\] buffer: \S+, data: \S+, offset: \d+, size: (\d+), hash: ([0-9a-f]+)")
_SAVED = re.compile(r"\[set_tensor\] saved to '([^']*)'")
_SET = re.compile(r"\[set_tensor\] buffer: \S+, data: \S+, offset: \d+, size: (\d+)")
_IO = re.compile(r"^(rchar|wchar|read_bytes|write_bytes):\s*(\d+)\s*$", re.M)
_SESSION = "Accepted client connection"


@dataclass(frozen=True)
class CacheLog:
    """What a worker's log says of the current load (since its last accepted connection)."""

    hits: int = 0
    hit_bytes: int = 0
    """Bytes set from cache files (only with ``GGML_RPC_DEBUG``: the pinned engine logs a hit at debug level)."""
    saved: int = 0
    """Tensors received and written to the cache (logged at info level, always)."""
    set_bytes: int = 0
    """Bytes of tensors received whole (only with ``GGML_RPC_DEBUG``)."""
    debug: bool = False
    """Whether the log has the engine's debug lines (then ``hits`` is the whole truth)."""


def parse_cache_log(text: str) -> CacheLog:
    """The cache hits and saves of the last session in a ``ggml-rpc-server`` log."""
    at = text.rfind(_SESSION)
    if at >= 0:
        text = text[at:]
    hits = [int(m.group(1)) for m in _HIT.finditer(text)]
    sets = [int(m.group(1)) for m in _SET.finditer(text)]
    return CacheLog(
        hits=len(hits),
        hit_bytes=sum(hits),
        saved=len(_SAVED.findall(text)),
        set_bytes=sum(sets),
        debug=bool(hits or sets or "[hello]" in text or "[get_alloc_size]" in text),
    )


def parse_proc_io(text: str) -> dict[str, int]:
    """``/proc/PID/io`` as numbers (``rchar``, ``wchar``, ``read_bytes``, ``write_bytes``)."""
    return {m.group(1): int(m.group(2)) for m in _IO.finditer(text)}


def worker_loaded_bytes(tcp_sent: float, io: dict[str, int] | None = None, log: CacheLog | None = None) -> int:
    """Bytes of the worker's weights in place: over the link (the head's TCP count, or the
    saved bytes when larger: RDMA) plus those set from its cache (the log's hits, else ``rchar``)."""
    io = io or {}
    from_cache = log.hit_bytes if log is not None and log.debug else io.get("rchar", 0)
    over_link = max(float(tcp_sent), float(io.get("wchar", 0)))
    return int(over_link + from_cache)


def read_worker_side(host: str, pid: int, log: str, ssh: SshSpec | None = None) -> tuple[dict[str, int], CacheLog]:
    """A running worker's I/O counters and what its log says of the current load (empty when
    they cannot be read: another user's process, an unreachable node)."""
    from .._node import read_tail
    from ._nodes import node_for
    from ._spec import is_local_host

    io_text, log_text = "", ""
    try:
        if is_local_host(host):
            io_text = Path(f"/proc/{pid}/io").read_text()
            log_text = read_tail(Path(log), LOG_TAIL)
        else:
            node = node_for(host, ssh)
            res = node.run(f"cat /proc/{int(pid)}/io", check=False, timeout=5.0)
            io_text = res.stdout.decode("ascii", "replace") if res.returncode == 0 else ""
            log_text = node.read_log(Path(log), max_bytes=LOG_TAIL)
    except (OSError, SplitserveError):
        pass
    return parse_proc_io(io_text), parse_cache_log(log_text)


LOG_TAIL = 4 << 20
"""How much of a worker's log is read (a load's debug lines are ~100 bytes per tensor)."""

__all__ = ["CacheLog", "parse_cache_log", "parse_proc_io", "read_worker_side", "worker_loaded_bytes"]
