"""The gateway's settings, one list of fields: the spec's ``[gateway]`` table, the flags of
``splitserve serve`` and the running gateway's configuration are all this model.

    GatewaySettings                      the fields a user sets, their defaults and checks
    ├── cluster.GatewaySpec              the spec's [gateway]: + enabled, extra_args; port None = 8000 or a free one
    └── gateway.GatewayConfig            what create_app/serve take: + engine_url, keys, the template text, ...

It sits in ``cluster`` because the spec is read here and ``cluster`` may not import ``gateway``
(the layer above it), while ``gateway`` may import ``cluster``.  `up` starts the gateway as
``splitserve serve`` with :meth:`GatewaySettings.serve_args`, so a key of the spec and a flag of
``serve`` are the same field by construction.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .._errors import SplitserveError, UsageError

ROUTES = ("affinity", "round-robin", "least-loaded")


def bind_address(value: str, what: str) -> str:
    """``value`` if it is an IP address or ``localhost`` (a listening address), else a ValueError."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if value != "localhost":
            raise ValueError(f"must be an IP address ({what})") from None
    return value


class GatewaySettings(BaseModel):
    """splitserve's gateway as a user sets it (docs/gateway.md); unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", validate_default=True, use_attribute_docstrings=True)

    # `serve_args` writes the flags in this order: the first four always, the others when not the default.
    host: str = "127.0.0.1"
    """The address the gateway listens on; beyond loopback needs api_key or keys_file."""
    port: int = 8000
    """The port the gateway listens on."""
    max_concurrent: Annotated[int, Field(ge=1)] = 16
    """Requests at once per API key."""
    max_queue: Annotated[int, Field(ge=0)] = 64
    """Requests waiting per API key before 429."""
    model_format: str | None = None
    """Tool-call format (`splitserve template formats`); default: detected from the template."""
    chat_template_file: Path | None = None
    """The jinja chat template the gateway renders; default: the engine's (``/props``)."""
    keys_file: Path | None = None
    """A file of hashed keys (``splitserve keys add``)."""
    model_name: str | None = None
    """The model id clients use; default: the GGUF's file name."""
    restore_reasoning: bool = True
    """Put back the reasoning clients drop from earlier assistant turns (prompt-cache hits)."""
    slot_affinity: bool = True
    """Send one session's requests (``X-Session-Id`` header, else ``user``) to one slot."""
    strict_model_names: bool = False
    """Answer 404 for a ``model`` that is not the served model's (default: serve any name)."""
    max_body_bytes: Annotated[int, Field(ge=1)] = 8 * 1024 * 1024
    """Request body limit (413 beyond)."""
    max_header_bytes: Annotated[int, Field(ge=1024)] = 64 * 1024
    """Request line and headers of one request, in bytes (431 beyond)."""
    max_headers: Annotated[int, Field(ge=8)] = 100
    """Header lines of one request (431 beyond)."""
    header_timeout: Annotated[float, Field(gt=0)] = 10.0
    """Seconds a connection has to send a whole request head (408 and closed beyond)."""
    body_timeout: Annotated[float, Field(gt=0)] = 60.0
    """Seconds a client has to send the whole body (408 beyond)."""
    keep_alive_timeout: Annotated[float, Field(gt=0)] = 5.0
    """Seconds an idle kept-alive connection stays open."""
    route: str = "affinity"
    """Over replicas: ``affinity``, ``round-robin`` or ``least-loaded``."""
    api_key: str | None = Field(default=None, repr=False)
    """A key clients must send; it reaches a started gateway through its environment, never argv."""

    @field_validator("host")
    @classmethod
    def _host_is_address(cls, value: str) -> str:
        return bind_address(value, "the interface the gateway listens on")

    @field_validator("port")
    @classmethod
    def _port(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= 65535:
            raise ValueError("a TCP port is 1 to 65535")
        return value

    @field_validator("route")
    @classmethod
    def _route(cls, value: str) -> str:
        if value not in ROUTES:
            raise ValueError(f"choose {', '.join(ROUTES[:-1])} or {ROUTES[-1]}")
        return value

    @field_validator("model_format")
    @classmethod
    def _known_format(cls, value: str | None) -> str | None:
        if value is None or value == "plain":
            return value
        from ..chat import get_format, list_formats

        try:
            get_format(value)  # a format's name, or another tool's name for it (vLLM's parser names)
        except SplitserveError:
            known = [f.name for f in list_formats()]
            raise ValueError(f"unknown tool-call format {value!r}; known: plain, {', '.join(known)}") from None
        return value

    @classmethod
    def from_flags(cls, **values: Any) -> Self:
        """The model from ``splitserve serve``'s flags (field names as keywords); a bad value is a
        :class:`UsageError` naming the flag: ``--port 99999: a TCP port is 1 to 65535``."""
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            name = str(first["loc"][0]) if first.get("loc") else ""
            msg = re.sub(r"^Value error, ", "", str(first.get("msg", "invalid")))
            raise UsageError(f"{flag_name(name)} {values.get(name)}: {msg}") from None

    def serve_args(self, port: int | None = None) -> list[str]:
        """These settings as ``splitserve serve`` flags (``port``: instead of the model's). The API
        key is left out: it travels in the environment (``SPLITSERVE_API_KEY``)."""
        out: list[str] = []
        for name, info in GatewaySettings.model_fields.items():
            value = port if name == "port" and port is not None else getattr(self, name)
            if name == "api_key" or value is None:
                continue
            if name not in _ALWAYS and value == info.default:
                continue
            flag = flag_name(name)
            if isinstance(value, bool):
                out.append(flag if value else "--no-" + flag[2:])
            else:
                out += [flag, str(value)]
        return out


_ALWAYS = ("host", "port", "max_concurrent", "max_queue")
#: fields whose ``serve`` flag is not the field's name
_FLAGS = {"engine_url": "--engine", "chat_template_file": "--chat-template"}


def flag_name(field: str) -> str:
    """The ``splitserve serve`` flag of a settings field (``max_queue`` -> ``--max-queue``)."""
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


__all__ = ["ROUTES", "GatewaySettings", "bind_address", "flag_name"]
