"""What a gateway is configured with: :class:`GatewayConfig`, the gateway's settings (the one list
of fields that the spec's ``[gateway]`` table and ``splitserve serve``'s flags share,
:class:`splitserve.cluster.GatewaySettings`) and what only the running process has: the engine's
URL and key, the accepted keys, the template's text.

    GatewayConfig(engine_url="http://127.0.0.1:8080", api_key="sk-...", max_queue=8)
    GatewayConfig.from_flags(engine_url=..., port=99999)   # UsageError: --port 99999: a TCP port is 1 to 65535
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, model_validator

from ..cluster import GatewaySettings
from ._auth import KeyRing


def load_template(path: Path) -> str:
    """A chat template file's text; an unreadable file is a one-line :class:`UsageError`."""
    from .._errors import UsageError

    try:
        return path.read_text()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the chat template: {exc.strerror}") from None


class GatewayConfig(GatewaySettings):
    """Everything ``splitserve serve`` takes; see docs/gateway.md."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    engine_url: str
    """The engine's base URL (``vllm+http://`` for vLLM/SGLang; replicas: a comma-separated list)."""
    keys: KeyRing = Field(default_factory=lambda: KeyRing({}))
    """The accepted keys; default: built from ``api_key`` and ``keys_file``."""
    chat_template: str | None = None
    """The template's text; default: ``chat_template_file``'s, else the engine's (``/props``)."""
    engine_api_key: str | None = Field(default=None, repr=False)
    """The key the engine itself expects."""
    test_hooks: bool = False
    """Allow the test-only ``force_output`` field."""

    @model_validator(mode="before")
    @classmethod
    def _derived(cls, data: Any) -> Any:
        """The key ring from ``api_key``/``keys_file`` and the template text from its file, unless given."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        if "keys" not in out and (out.get("api_key") or out.get("keys_file") is not None):
            keys_file = out.get("keys_file")
            out["keys"] = KeyRing.build(out.get("api_key"), Path(keys_file) if keys_file is not None else None)
        if out.get("chat_template") is None and out.get("chat_template_file") is not None:
            out["chat_template"] = load_template(Path(out["chat_template_file"]))
        return out


__all__ = ["GatewayConfig", "load_template"]
