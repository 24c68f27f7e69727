"""Where the endpoint is and what it serves: the gateway's ``/v1/models`` (the model's id and
its ``meta.n_ctx``), for ``--url`` or for the cluster a spec started (``-c``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from .._errors import UsageError
from ._build import Endpoint

TIMEOUT_S = 10.0


def models_info(url: str, api_key: str | None, timeout: float = TIMEOUT_S) -> tuple[str, int | None]:
    """(model id, served context or None) from ``GET {url}/v1/models``; a one-line error when
    the endpoint does not answer or refuses the key."""
    root = url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(root + "/v1/models", headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise UsageError(f"{root}/v1/models: no answer ({exc.__class__.__name__}); is the gateway up?") from None
    if r.status_code in (401, 403):
        raise UsageError(f"{root}/v1/models: HTTP {r.status_code}, the key was refused; give --api-key")
    if r.status_code != 200:
        raise UsageError(f"{root}/v1/models: HTTP {r.status_code}; is this splitserve's gateway?")
    try:
        data: Any = r.json()["data"]
        first = data[0]
        model = str(first["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise UsageError(f"{root}/v1/models: no model in the answer") from None
    meta = first.get("meta") if isinstance(first, dict) else None
    n_ctx = meta.get("n_ctx") if isinstance(meta, dict) else None
    return model, n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None


def discover(
    url: str | None,
    spec: Path | None,
    api_key: str | None = None,
    model: str | None = None,
    context: int | None = None,
) -> Endpoint:
    """The endpoint of ``--url`` or of the running cluster of ``-c``, asked what it serves;
    ``model`` / ``context`` given override what it says."""
    if (url is None) == (spec is None):
        raise UsageError("give exactly one of --url URL or -c cluster.toml")
    if spec is not None:
        from ..cluster import load_spec, require_state

        loaded = load_spec(spec)
        url = require_state(loaded).endpoint
        api_key = api_key or loaded.client_api_key
    assert url is not None
    served, n_ctx = models_info(url, api_key)
    return Endpoint(url=url, model=model or served, context=context or n_ctx, api_key=api_key)
