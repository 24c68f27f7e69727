"""The OpenAI-compatible gateway: chat templates and tool-call parsing in front of llama-server.

- :func:`create_app` builds the ASGI app from a :class:`GatewayConfig`; :func:`serve` runs it;
- :class:`KeyRing` / :func:`add_key`: API keys, stored hashed;
- :func:`probe_tools` (``splitserve doctor tools``) checks any OpenAI-compatible endpoint.
"""

from ._app import EngineStream, Gateway, create_app
from ._auth import KeyRing, add_key, hash_key, is_loopback, require_auth_off_loopback
from ._chat import Delta, Turn
from ._config import GatewayConfig, load_template
from ._doctor import probe_tools, report_markdown
from ._errors import APIError
from ._limits import KeyLimiter
from ._plain import PLAIN
from ._server import serve
from ._translate import Plan, ServedModel, gbnf_literal, plan_chat

__all__ = [
    "PLAIN",
    "APIError",
    "Delta",
    "EngineStream",
    "Gateway",
    "GatewayConfig",
    "KeyLimiter",
    "KeyRing",
    "Plan",
    "ServedModel",
    "Turn",
    "add_key",
    "create_app",
    "gbnf_literal",
    "hash_key",
    "is_loopback",
    "load_template",
    "plan_chat",
    "probe_tools",
    "report_markdown",
    "require_auth_off_loopback",
    "serve",
]
