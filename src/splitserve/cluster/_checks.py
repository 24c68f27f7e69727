"""One preflight row: the value both the llama.cpp preflight (I/O) and the vLLM/SGLang checks
(pure, :mod:`._engines_plan`) return, so neither side imports the other; and the one link figure
that preflight and the live page both show, with its one threshold."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CheckRow:
    """One check on one node."""

    check: str
    node: str
    status: str
    """``pass``, ``warn``, ``fail``, or ``skip`` (could not be checked: the reason is the message)."""
    message: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


LINK_RTT_WARN_MS = 1.0
"""Above this the link RTT is worth a look (WiFi or a routed path instead of the direct link): a
wired link's lowest round trip is well under it (tens of µs on a direct 200G cable, ~0.1–0.3 ms
through a switch); WiFi's is over it."""

LINK_RTT_MEANING = (
    "link RTT: the lowest TCP round trip between the head and the worker's RPC address "
    "(the wire's latency, without any program's delay)"
)
"""What the link figure is, in preflight (the lowest of 5 TCP handshakes from the head, which the
worker's kernel answers) and on the page (the kernel's ``minrtt`` of the head's RPC connection to
the worker, from ``ss -ti``: the lowest round trip it has seen, nothing sent). The kernel's smoothed
RTT (``srtt``) is not used: on a busy RPC connection it holds delayed ACKs and the worker's compute
time, milliseconds on loopback."""


def link_rtt_status(rtt_ms: float) -> str:
    """``pass`` or ``warn`` for a link RTT, the same in preflight and on the page."""
    return "warn" if rtt_ms > LINK_RTT_WARN_MS else "pass"


__all__ = ["LINK_RTT_MEANING", "LINK_RTT_WARN_MS", "CheckRow", "link_rtt_status"]
