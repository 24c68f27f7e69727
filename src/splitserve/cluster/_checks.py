"""One preflight row: the value both the llama.cpp preflight (I/O) and the vLLM/SGLang checks
(pure, :mod:`._engines_plan`) return, so neither side imports the other."""

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


__all__ = ["CheckRow"]
