"""The eval's client in the agent's own wire API (``eval run --api chat|messages|responses``).

inspect_ai drives every turn; which of its providers it uses decides the API the gateway
sees: ``openai-api`` for ``/v1/chat/completions``; the same with ``responses_api`` for
``/v1/responses`` (Codex's path); ``anthropic`` with the gateway as its base URL for
``/v1/messages`` (Claude Code's path). Anthropic's SDK no longer sends ``temperature`` for
newer API versions, so it goes in the body's extra fields (the gateway reads it, as the
Messages API defines it): the eval stays greedy on every path.
"""

from __future__ import annotations

from typing import Any

EVAL_APIS = ("chat", "messages", "responses")


def eval_model(api: str, model_name: str, v1_url: str, api_key: str | None, config: Any) -> Any:
    """inspect_ai's model for ``api`` against the endpoint (``v1_url`` ends with ``/v1``)."""
    from inspect_ai.model import get_model

    key = api_key or "none"
    if api == "chat":
        return get_model(f"openai-api/splitserve/{model_name}", base_url=v1_url, api_key=key, config=config)
    if api == "responses":
        return get_model(
            f"openai-api/splitserve/{model_name}", base_url=v1_url, api_key=key, config=config, responses_api=True
        )
    if api == "messages":
        root = v1_url.rstrip("/").removesuffix("/v1")
        extra = {"temperature": config.temperature} if getattr(config, "temperature", None) is not None else {}
        return get_model(f"anthropic/{model_name}", base_url=root, api_key=key, config=config, extra_body=extra)
    raise ValueError(f"api {api!r}: one of {', '.join(EVAL_APIS)}")
