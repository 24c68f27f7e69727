"""``splitserve connect``: a coding agent's setup for the served endpoint.

The builders (:func:`connect_config` and the per-client functions) are pure: an
:class:`Endpoint` in, env vars and file texts out. :func:`discover` asks a running gateway
what it serves; :func:`write_setup` writes a setup's files under a home folder.
"""

from __future__ import annotations

from ._build import (
    CLIENTS,
    KEY_ENV,
    PLACEHOLDER_KEY,
    ClientSetup,
    Endpoint,
    aider_config,
    aider_metadata,
    aider_settings,
    check_endpoint,
    claude_code_env,
    claude_code_settings,
    codex_catalog,
    codex_config,
    connect_config,
    opencode_config,
)
from ._discover import discover, models_info
from ._write import write_setup

__all__ = [
    "CLIENTS",
    "KEY_ENV",
    "PLACEHOLDER_KEY",
    "ClientSetup",
    "Endpoint",
    "aider_config",
    "aider_metadata",
    "aider_settings",
    "check_endpoint",
    "claude_code_env",
    "claude_code_settings",
    "codex_catalog",
    "codex_config",
    "connect_config",
    "discover",
    "models_info",
    "opencode_config",
    "write_setup",
]
