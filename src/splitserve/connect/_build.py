"""Pure builders: an endpoint (data) -> a coding agent's setup for it (env vars and file texts).

Each client reads its setup from its own place; :func:`connect_config` returns the text of
every file, keyed by its path relative to the client's home (``~``), and the environment
variables to export. Nothing here reads or writes a file, or talks to the endpoint.

What each setup sets, and why (docs/agents.md has the long form):

- Claude Code (``~/.claude/settings.json``, key ``env``; the same variables printed as
  ``export`` lines): ``ANTHROPIC_BASE_URL`` the gateway's root (Claude Code adds
  ``/v1/messages``); the key as ``ANTHROPIC_AUTH_TOKEN`` (sent as ``Authorization: Bearer``,
  which the gateway accepts as it does ``x-api-key``; only one of the two is set, since their
  precedence is not documented, and a token is not asked about at start as an API key is);
  ``ANTHROPIC_MODEL`` and the small/fast model (``ANTHROPIC_SMALL_FAST_MODEL``,
  ``ANTHROPIC_DEFAULT_HAIKU_MODEL``, and the Sonnet/Opus aliases) all the served name, so no
  request names a model the endpoint does not serve; ``CLAUDE_CODE_MAX_CONTEXT_TOKENS`` the
  served context (unset, Claude Code assumes a 1M-token window for a name it does not know and
  never compacts before the context overflows); ``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` a quarter of
  the context, at most 32000 (its own default, 32000, does not fit a small context beside a
  12k-token prompt); ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` (one request per turn, none
  to Anthropic); ``CLAUDE_CODE_ATTRIBUTION_HEADER=0`` (drops the billing block whose ``cch``
  changes per request; the gateway also neutralises it, this makes the prompt shorter).
  ``CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS`` is left unset: with the betas Claude Code 2.1.332
  sends 12 tools inline and defers the rest behind its ``ToolSearch`` tool, about 12k tokens on
  the first request; with them disabled it sends all 21 tools inline, about 20k tokens
  (agent-apis.md). The gateway accepts the beta fields (``context_management``,
  ``defer_loading``), so the shorter prompt costs nothing: less prefill per session, more room
  in a local context (older versions, 2.1.197, defer nothing: the same prompt either way,
  benchmarks/bench_connect_claude_prompt.py). ``disable_betas=True`` sets it (for a proxy that
  refuses those fields).
- Codex (``~/.codex/config.toml`` and ``~/.codex/splitserve-models.json``): a provider
  ``splitserve`` (a new key: a table named like a built-in provider does not replace it) with
  ``base_url`` the gateway's ``/v1``, ``wire_api = "responses"`` (the only one Codex speaks) and
  ``env_key`` the variable holding the key; ``model``/``model_provider`` select it; a model
  catalog entry (``model_catalog_json``) with the served context and
  ``apply_patch_tool_type = "freeform"``, without which Codex warns "Model metadata ... not
  found" and sends no ``apply_patch`` tool for a name it does not know; the context also as
  ``model_context_window`` and an auto-compact limit at 90% of it.
- OpenCode (``~/.config/opencode/opencode.json``): an OpenAI-compatible provider
  (``@ai-sdk/openai-compatible``) with the gateway's ``/v1``, the key from the environment, the
  model with its context and output limits.
- Aider (``~/.aider.conf.yml``, ``~/.aider.model.metadata.json``,
  ``~/.aider.model.settings.yml``): ``openai-api-base`` the gateway's ``/v1``, model
  ``openai/NAME`` (litellm's prefix for an OpenAI-compatible endpoint), the context in the
  metadata file (Aider otherwise warns that it does not know the model and guesses its
  window), the diff edit format and the repo map in the settings file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .._errors import UsageError

CLIENTS = ("claude-code", "codex", "opencode", "aider")
"""The coding agents ``splitserve connect`` sets up."""

KEY_ENV = "SPLITSERVE_API_KEY"
"""The variable Codex and OpenCode read the gateway's key from."""

PLACEHOLDER_KEY = "splitserve"
"""Sent where the gateway has no key (a client that requires one gets this; the gateway ignores it)."""

MAX_OUTPUT_CAP = 32000  # Claude Code's own default max_tokens
AUTO_COMPACT_SHARE = 0.9

CODEX_CATALOG = "splitserve-models.json"

# Codex's base instructions for the catalog entry (our own words, short: a local model's
# context is precious; Codex's own prompt for known models is ~17 kB).
CODEX_INSTRUCTIONS = (
    "You are Codex, a coding agent running in the Codex CLI on the user's computer, served by a local model. "
    "Work in the user's workspace: read files and run commands with the shell tool, and edit files with the "
    "apply_patch tool. An apply_patch input is a patch between '*** Begin Patch' and '*** End Patch' with "
    "'*** Add File: PATH', '*** Update File: PATH' (hunks of context, '-' and '+' lines after '@@') or "
    "'*** Delete File: PATH' sections; added lines start with '+'. Keep changes minimal, do not revert the "
    "user's changes, and finish with a short summary of what you did."
)


@dataclass(frozen=True)
class Endpoint:
    """What a client needs to know about the served endpoint."""

    url: str
    """The gateway's root URL, e.g. ``http://127.0.0.1:8000`` (a trailing ``/v1`` is dropped)."""
    model: str
    """The model name the gateway serves (its ``/v1/models`` id)."""
    context: int | None = None
    """The served context in tokens (the engine's ``n_ctx``); None: not known."""
    api_key: str | None = None
    """The gateway's key; None: the gateway has no auth."""

    @property
    def root(self) -> str:
        url = self.url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url

    @property
    def v1(self) -> str:
        return self.root + "/v1"

    @property
    def max_output(self) -> int:
        """Output tokens per request to ask for: a quarter of the context, at most 32000."""
        if not self.context:
            return MAX_OUTPUT_CAP
        return max(256, min(MAX_OUTPUT_CAP, self.context // 4))


@dataclass(frozen=True)
class ClientSetup:
    """One client's setup: variables to export, files (path under the home -> text), notes."""

    client: str
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    run: str = ""
    """A command that starts the client against the endpoint, once set up."""

    def shell(self) -> str:
        """The variables as ``export`` lines (POSIX shell quoting)."""
        return "".join(f"export {k}={_sh_quote(v)}\n" for k, v in self.env.items())


def _sh_quote(value: str) -> str:
    if value and all(c.isalnum() or c in "@%+=:,./-_" for c in value):
        return value
    return "'" + value.replace("'", "'\"'\"'") + "'"


def check_endpoint(endpoint: Endpoint) -> None:
    """A one-line error for an endpoint no client could use."""
    parts = urlsplit(endpoint.root)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"--url {endpoint.url!r}: give the gateway's http(s) URL, e.g. http://127.0.0.1:8000")
    if not endpoint.model or any(c in endpoint.model for c in "\n\"'\\"):
        raise UsageError(f"model name {endpoint.model!r}: empty or holds a quote, backslash or newline")
    if endpoint.context is not None and endpoint.context <= 0:
        raise UsageError(f"context {endpoint.context}: must be a positive number of tokens")


# -- Claude Code ----------------------------------------------------------------------------


def claude_code_env(endpoint: Endpoint, *, disable_betas: bool = False) -> dict[str, str]:
    """The environment Claude Code reads (see the module for each variable's reason)."""
    env = {
        "ANTHROPIC_BASE_URL": endpoint.root,
        "ANTHROPIC_AUTH_TOKEN": endpoint.api_key or PLACEHOLDER_KEY,
        "ANTHROPIC_MODEL": endpoint.model,
        "ANTHROPIC_SMALL_FAST_MODEL": endpoint.model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": endpoint.model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": endpoint.model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": endpoint.model,
    }
    if endpoint.context:
        env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] = str(endpoint.context)
    env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(endpoint.max_output)
    env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
    env["CLAUDE_CODE_ATTRIBUTION_HEADER"] = "0"
    if disable_betas:
        env["CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS"] = "1"
    return env


def claude_code_settings(env: dict[str, str], existing: str | None = None) -> str:
    """``~/.claude/settings.json`` with ``env`` merged into its ``env`` key (other keys kept)."""
    data: dict[str, object] = {}
    if existing and existing.strip():
        loaded = json.loads(existing)
        if not isinstance(loaded, dict):
            raise UsageError("~/.claude/settings.json: not a JSON object; fix or move it first")
        data = loaded
    old = data.get("env")
    merged = dict(old) if isinstance(old, dict) else {}
    merged.update(env)
    data["env"] = merged
    return json.dumps(data, indent=2) + "\n"


# -- Codex ----------------------------------------------------------------------------------


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string for these values


def codex_catalog(endpoint: Endpoint) -> str:
    """The model catalog (``model_catalog_json``): one entry for the served model."""
    window = endpoint.context or 32768
    entry = {
        "slug": endpoint.model,
        "display_name": endpoint.model,
        "description": f"{endpoint.model} served by splitserve",
        "default_reasoning_level": "medium",
        "supported_reasoning_levels": [
            {"effort": "low", "description": "less reasoning"},
            {"effort": "medium", "description": "balanced"},
            {"effort": "high", "description": "more reasoning"},
        ],
        "shell_type": "shell_command",
        "visibility": "list",
        "supported_in_api": True,
        "priority": 0,
        "upgrade": None,
        "base_instructions": CODEX_INSTRUCTIONS,
        "supports_reasoning_summaries": False,
        "default_reasoning_summary": "none",
        "support_verbosity": False,
        "default_verbosity": None,
        "apply_patch_tool_type": "freeform",
        "web_search_tool_type": "text",
        "truncation_policy": {"mode": "tokens", "limit": 10000},
        "supports_parallel_tool_calls": True,
        "supports_image_detail_original": False,
        "context_window": window,
        "max_context_window": window,
        "auto_compact_token_limit": int(window * AUTO_COMPACT_SHARE),
        "effective_context_window_percent": 95,
        "experimental_supported_tools": [],
        "input_modalities": ["text"],
        "supports_search_tool": False,
    }
    return json.dumps({"models": [entry]}, indent=2) + "\n"


def codex_config(endpoint: Endpoint, catalog_path: str) -> str:
    """``$CODEX_HOME/config.toml``: the provider, the model, the catalog."""
    lines = [
        "# written by `splitserve connect codex`",
        f"model = {_toml_str(endpoint.model)}",
        'model_provider = "splitserve"',
        f"model_catalog_json = {_toml_str(catalog_path)}",
    ]
    if endpoint.context:
        lines.append(f"model_context_window = {endpoint.context}")
        lines.append(f"model_auto_compact_token_limit = {int(endpoint.context * AUTO_COMPACT_SHARE)}")
    lines += [
        "",
        "[model_providers.splitserve]",
        'name = "splitserve"',
        f"base_url = {_toml_str(endpoint.v1)}",
        'wire_api = "responses"',
    ]
    if endpoint.api_key:
        lines.append(f"env_key = {_toml_str(KEY_ENV)}")
    return "\n".join(lines) + "\n"


# -- OpenCode -------------------------------------------------------------------------------


def opencode_config(endpoint: Endpoint) -> str:
    """``~/.config/opencode/opencode.json``: an OpenAI-compatible provider and the model."""
    limit: dict[str, int] = {"output": endpoint.max_output}
    if endpoint.context:
        limit["context"] = endpoint.context
    data = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "splitserve": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "splitserve",
                "options": {
                    "baseURL": endpoint.v1,
                    "apiKey": "{env:" + KEY_ENV + "}" if endpoint.api_key else PLACEHOLDER_KEY,
                },
                "models": {endpoint.model: {"name": endpoint.model, "tool_call": True, "limit": limit}},
            }
        },
        "model": f"splitserve/{endpoint.model}",
    }
    return json.dumps(data, indent=2) + "\n"


# -- Aider ----------------------------------------------------------------------------------


def _yaml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a YAML double-quoted scalar


def aider_model(endpoint: Endpoint) -> str:
    return f"openai/{endpoint.model}"


def aider_config(endpoint: Endpoint, home: str) -> str:
    """``~/.aider.conf.yml`` (Aider's option names, without the leading dashes)."""
    lines = [
        "# written by `splitserve connect aider`",
        f"openai-api-base: {_yaml_str(endpoint.v1)}",
        f"openai-api-key: {_yaml_str(endpoint.api_key or PLACEHOLDER_KEY)}",
        f"model: {_yaml_str(aider_model(endpoint))}",
        f"weak-model: {_yaml_str(aider_model(endpoint))}",
        f"model-metadata-file: {_yaml_str(home.rstrip('/') + '/.aider.model.metadata.json')}",
        f"model-settings-file: {_yaml_str(home.rstrip('/') + '/.aider.model.settings.yml')}",
        "analytics-disable: true",
        "check-update: false",
    ]
    return "\n".join(lines) + "\n"


def aider_metadata(endpoint: Endpoint) -> str:
    """litellm's model metadata for the served model: its context and output, no cost."""
    entry: dict[str, object] = {
        "max_tokens": endpoint.max_output,
        "max_output_tokens": endpoint.max_output,
        "input_cost_per_token": 0.0,
        "output_cost_per_token": 0.0,
        "litellm_provider": "openai",
        "mode": "chat",
        "supports_function_calling": True,
    }
    if endpoint.context:
        entry["max_input_tokens"] = endpoint.context
    return json.dumps({aider_model(endpoint): entry}, indent=2) + "\n"


def aider_settings(endpoint: Endpoint) -> str:
    """Aider's model settings: the diff edit format, the repo map, the output cap."""
    lines = [
        f"- name: {_yaml_str(aider_model(endpoint))}",
        "  edit_format: diff",
        "  use_repo_map: true",
        "  examples_as_sys_msg: true",
        "  extra_params:",
        f"    max_tokens: {endpoint.max_output}",
    ]
    return "\n".join(lines) + "\n"


# -- all ------------------------------------------------------------------------------------


def connect_config(client: str, endpoint: Endpoint, *, home: str = "~", disable_betas: bool = False) -> ClientSetup:
    """The setup of ``client`` (one of :data:`CLIENTS`) for ``endpoint``.

    ``home`` is where the files will live (their absolute paths inside each other, e.g.
    Codex's catalog path, are written under it); ``files`` keys are relative to it.
    """
    check_endpoint(endpoint)
    home = home.rstrip("/") or "/"
    key_env = {KEY_ENV: endpoint.api_key} if endpoint.api_key else {}
    if client == "claude-code":
        env = claude_code_env(endpoint, disable_betas=disable_betas)
        return ClientSetup(
            client,
            env=env,
            files={".claude/settings.json": claude_code_settings(env)},
            notes=(
                "CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS is left unset: with the betas Claude Code 2.1.332's first "
                "request is ~12k tokens, without them ~20k (all tools inline); --disable-betas sets it",
            ),
            run='claude -p "say hi"',
        )
    if client == "codex":
        catalog = f"{home}/.codex/{CODEX_CATALOG}"
        return ClientSetup(
            client,
            env=key_env,
            files={
                ".codex/config.toml": codex_config(endpoint, catalog),
                f".codex/{CODEX_CATALOG}": codex_catalog(endpoint),
            },
            notes=("Codex reads $CODEX_HOME (default ~/.codex); set CODEX_HOME to the folder written",),
            run='codex exec --skip-git-repo-check "say hi" < /dev/null',
        )
    if client == "opencode":
        return ClientSetup(
            client,
            env=key_env,
            files={".config/opencode/opencode.json": opencode_config(endpoint)},
            run='opencode run "say hi"',
        )
    if client == "aider":
        return ClientSetup(
            client,
            env={"OPENAI_API_BASE": endpoint.v1, "OPENAI_API_KEY": endpoint.api_key or PLACEHOLDER_KEY},
            files={
                ".aider.conf.yml": aider_config(endpoint, home),
                ".aider.model.metadata.json": aider_metadata(endpoint),
                ".aider.model.settings.yml": aider_settings(endpoint),
            },
            run="aider",
        )
    raise UsageError(f"client {client!r}: use one of {', '.join(CLIENTS)}")
