"""A small HTTP client for llama-server: health, one-shot completions, slots, props.

Connection failures and HTTP errors become :class:`EngineUnavailable` /
:class:`EngineHTTPError` at this boundary.
"""

from __future__ import annotations

from typing import Any

import httpx

from .._errors import EngineError


class EngineUnavailable(EngineError):
    """The engine did not answer (not started, crashed, or still binding)."""


class EngineHTTPError(EngineError):
    """The engine answered with an error status."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"engine answered HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


class EngineClient:
    """llama-server at ``base_url`` (e.g. ``http://127.0.0.1:8080``)."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise EngineUnavailable(f"{self.base_url}{path}: {type(exc).__name__}: {exc}") from None

    def health_status(self) -> int:
        """HTTP status of ``/health``: 200 ready, 503 loading."""
        return self._request("GET", "/health", timeout=5.0).status_code

    def complete(self, prompt: str, n_predict: int = 1, **fields: Any) -> dict[str, Any]:
        """A non-streamed ``/completion``."""
        body = {"prompt": prompt, "n_predict": n_predict, **fields}
        resp = self._request("POST", "/completion", json=body)
        if resp.status_code != 200:
            raise EngineHTTPError(resp.status_code, resp.text)
        data: dict[str, Any] = resp.json()
        return data

    def _get_json(self, path: str) -> Any:
        resp = self._request("GET", path, timeout=5.0)
        if resp.status_code != 200:
            raise EngineHTTPError(resp.status_code, resp.text)
        return resp.json()

    def slots(self) -> list[dict[str, Any]]:
        """``/slots``: one entry per parallel slot."""
        data = self._get_json("/slots")
        return data if isinstance(data, list) else []

    def props(self) -> dict[str, Any]:
        """``/props``: the server's effective settings."""
        data = self._get_json("/props")
        return data if isinstance(data, dict) else {}
