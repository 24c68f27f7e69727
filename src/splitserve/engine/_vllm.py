"""vLLM (and SGLang) behind :class:`~._backend.EngineBackend`: the engine's OpenAI completions API
made to look like llama-server's ``/completion`` to the gateway.

The gateway renders the chat template and parses tool calls and reasoning itself (the same way
on every backend); the engine only continues a prompt. So this backend translates:

- a :class:`~._backend.CompletionRequest` to a ``/v1/completions`` body: ``n_predict`` -> ``max_tokens``
  (``-1``: none), ``repeat_penalty`` -> ``repetition_penalty``, ``json_schema`` / ``grammar`` (GBNF,
  which xgrammar reads) -> ``structured_outputs``; llama.cpp-only fields (``cache_prompt``,
  ``id_slot``, ``extra``: ``samplers``, ...) are left out (vLLM caches prefixes by itself);
- each streamed chunk's ``choices[0].text`` to a ``{"content": ...}`` event, and the finish (with
  the usage chunk ``stream_options.include_usage`` asks for) to llama.cpp's final event:
  ``stop``, ``stop_type`` (``limit`` / ``word`` / ``eos``), ``tokens_predicted``,
  ``tokens_evaluated`` and ``timings`` measured here;
- ``info``: the chat template, BOS/EOS tokens and context length from ``/v1/models`` and the
  model's ``tokenizer_config.json`` (a local folder, or the Hugging Face cache for a hub id);
  a template given to the backend (the gateway's ``--chat-template``) wins;
- ``/tokenize`` and ``/detokenize`` (vLLM's, which take the model's name).

:func:`backend_for` picks the backend of an engine URL: ``vllm+http://host:port`` (and
``sglang+http://...``) is this one, a plain ``http://`` URL llama-server's.
:mod:`._fake_http` serves a :class:`~._fake.FakeEngine`'s script in vLLM's API, the fake beside this backend.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx

from ._backend import (
    CompletionRequest,
    CompletionStream,
    EngineBackend,
    EngineHTTPError,
    EngineInfo,
    EngineStreamError,
)
from ._http import DONE, HttpEngine, sse_data

KINDS = ("vllm", "sglang")
"""Engine URL prefixes (``vllm+http://...``) served by :class:`VllmBackend`."""

_SAME = ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty", "ignore_eos")


def split_engine_url(url: str) -> tuple[str, str]:
    """(kind, plain URL): ``vllm+http://h:p`` -> (``vllm``, ``http://h:p``); a plain URL is llama.cpp's."""
    head, sep, rest = url.partition("+")
    if sep and head in KINDS and rest.startswith(("http://", "https://")):
        return head, rest
    return "llama.cpp", url


def backend_for(url: str, api_key: str | None = None, **kwargs: Any) -> EngineBackend:
    """The backend of an engine URL (see :func:`split_engine_url`)."""
    kind, plain = split_engine_url(url)
    if kind in KINDS:
        return VllmBackend(plain, api_key=api_key, **kwargs)
    from ._llamacpp import LlamaCppBackend

    return LlamaCppBackend(plain, api_key=api_key, **kwargs)


def completions_body(request: CompletionRequest, model: str) -> dict[str, Any]:
    """A :class:`~._backend.CompletionRequest` as a vLLM ``/v1/completions`` body (see the module)."""
    out: dict[str, Any] = {"model": model, "prompt": request.prompt}
    if request.n_predict >= 0:
        out["max_tokens"] = request.n_predict
    for key in _SAME:
        value = getattr(request, key)
        if value is not None:
            out[key] = value
    if request.repeat_penalty is not None:
        out["repetition_penalty"] = request.repeat_penalty
    if request.n_probs is not None:
        out["logprobs"] = request.n_probs
    if request.stop:
        out["stop"] = list(request.stop)
    structured: dict[str, Any] = {}
    if isinstance(request.json_schema, dict):
        structured["json"] = request.json_schema
    if request.grammar:
        structured["grammar"] = request.grammar
    if structured:
        out["structured_outputs"] = structured
    return out


def stop_type(finish_reason: str | None, stop_reason: Any) -> str:
    """llama.cpp's ``stop_type`` for an OpenAI finish: ``limit``, ``word`` (a stop string) or ``eos``."""
    if finish_reason == "length":
        return "limit"
    return "word" if isinstance(stop_reason, str) else "eos"


def final_event(
    finish: dict[str, Any], usage: dict[str, Any] | None, started: float, first: float | None, ended: float
) -> dict[str, Any]:
    """llama.cpp's last streamed event from an OpenAI finish (``finish_reason``, ``stop_reason``) and usage."""
    predicted = int((usage or {}).get("completion_tokens") or 0)
    prompt = int((usage or {}).get("prompt_tokens") or 0)
    prompt_ms = ((first or ended) - started) * 1000
    predicted_ms = (ended - (first or ended)) * 1000
    timings = {
        "prompt_n": prompt,
        "prompt_ms": round(prompt_ms, 3),
        "predicted_n": predicted,
        "predicted_ms": round(predicted_ms, 3),
        "predicted_per_second": round((predicted - 1) / (predicted_ms / 1000), 3)
        if predicted > 1 and predicted_ms > 0
        else None,
    }
    event: dict[str, Any] = {
        "content": "",
        "stop": True,
        "stop_type": stop_type(finish.get("finish_reason"), finish.get("stop_reason")),
        "tokens_predicted": predicted,
        "tokens_evaluated": prompt,
        "timings": timings,
    }
    if isinstance(finish.get("stop_reason"), str):
        event["stopping_word"] = finish["stop_reason"]
    return event


def _text(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("content") or "")
    return str(value or "")


def read_tokenizer_config(root: str) -> dict[str, Any]:
    """The chat template, BOS and EOS of a model: its ``tokenizer_config.json`` (and
    ``chat_template.jinja``) in a local folder, or in the Hugging Face cache / hub for a hub id;
    {} when neither has one."""
    folder = Path(root).expanduser()
    config: dict[str, Any] = {}
    jinja: str | None = None
    if folder.is_dir():
        path = folder / "tokenizer_config.json"
        if path.is_file():
            config = json.loads(path.read_text())
        if (folder / "chat_template.jinja").is_file():
            jinja = (folder / "chat_template.jinja").read_text()
    elif "/" in root and not root.startswith(("/", ".")):
        try:
            from huggingface_hub import hf_hub_download

            config = json.loads(Path(hf_hub_download(root, "tokenizer_config.json")).read_text())
        except Exception:  # noqa: BLE001 - no hub access: the gateway then asks for --chat-template
            config = {}
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    return {
        "chat_template": jinja or (template if isinstance(template, str) else None),
        "bos_token": _text(config.get("bos_token")),
        "eos_token": _text(config.get("eos_token")),
    }


class VllmBackend(HttpEngine):
    """vLLM's (or SGLang's) OpenAI-compatible server at ``base_url`` (``http://127.0.0.1:8080``).

    ``chat_template`` overrides the model's; ``model`` the served model's name (default: the
    one ``/v1/models`` lists). Timeouts as :class:`~._http.HttpEngine`'s."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        connect_timeout: float = 5.0,
        max_connections: int = 256,
        timeout: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        chat_template: str | None = None,
        model: str | None = None,
    ) -> None:
        super().__init__(base_url, api_key, connect_timeout, max_connections, timeout, transport)
        self._chat_template = chat_template
        self._model = model
        self._card: dict[str, Any] | None = None
        self._props: dict[str, Any] | None = None

    async def card(self) -> dict[str, Any]:
        """The served model's entry in ``/v1/models`` (``id``, ``root``, ``max_model_len``)."""
        if self._card is None:
            data = await self._json("GET", "/v1/models")
            cards = [c for c in (data.get("data") or []) if isinstance(c, dict)] if isinstance(data, dict) else []
            if not cards:
                raise EngineHTTPError(200, "/v1/models lists no model")
            chosen = next((c for c in cards if c.get("id") == self._model), cards[0])
            self._card = chosen
        return self._card

    async def model(self) -> str:
        return self._model or str((await self.card()).get("id"))

    async def info(self, timeout: float | None = None) -> EngineInfo:
        """The template, BOS/EOS and context length (``/v1/models`` and the model's tokenizer
        config, read once); no slots: vLLM schedules requests itself."""
        if self._props is None:
            card = await self.card()
            root = str(card.get("root") or card.get("id") or "")
            tok = await anyio.to_thread.run_sync(read_tokenizer_config, root)
            self._props = {
                "chat_template": self._chat_template or tok["chat_template"],
                "model_path": root,
                "model_alias": str(card.get("id") or ""),
                "bos_token": tok["bos_token"],
                "eos_token": tok["eos_token"],
                "default_generation_settings": {"n_ctx": card.get("max_model_len")},
                "total_slots": None,
            }
        return EngineInfo(dict(self._props), [])

    async def tokenize(self, text: str, add_special: bool = False) -> list[int]:
        data = await self._json(
            "POST", "/tokenize", {"model": await self.model(), "prompt": text, "add_special_tokens": add_special}
        )
        return [int(t) for t in (data.get("tokens") or [])] if isinstance(data, dict) else []

    def stream(self, request: CompletionRequest) -> CompletionStream:
        return _VllmStream(self, request)

    async def _relay_content(self, path: str, content: bytes) -> bytes:
        if path in ("/v1/completions", "/tokenize", "/detokenize") and content:
            # The client names the gateway's model; the engine knows its own name only.
            try:
                data = json.loads(content)
            except ValueError:
                data = None
            if isinstance(data, dict):
                data["model"] = await self.model()
                content = json.dumps(data, ensure_ascii=False).encode()
        return content


class _VllmStream(CompletionStream):
    """One streamed completion, its OpenAI chunks turned into llama.cpp events (see the module)."""

    def __init__(self, backend: VllmBackend, request: CompletionRequest) -> None:
        self._backend = backend
        self._request = request
        self._resp: httpx.Response | None = None
        self._started = 0.0

    async def open(self) -> None:
        self._started = time.perf_counter()
        req = completions_body(self._request, await self._backend.model())
        req.update(stream=True, stream_options={"include_usage": True})
        request = self._backend._http.build_request("POST", "/v1/completions", json=req)
        self._resp = await self._backend.open(request, "/v1/completions")

    def batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        if self._resp is None:
            raise RuntimeError("the stream is not open: use `async with backend.stream(request) as events`")
        return self._events(self._resp)

    async def _events(self, resp: httpx.Response) -> AsyncIterator[list[dict[str, Any]]]:
        finish: dict[str, Any] | None = None
        usage: dict[str, Any] | None = None
        first: float | None = None
        pending = b""
        try:
            async for chunk in resp.aiter_bytes():
                pending += chunk
                if b"\n" not in chunk:
                    continue
                *lines, pending = pending.split(b"\n")
                batch: list[dict[str, Any]] = []
                done = False
                for line in lines:
                    data = _chunk(line)
                    if data is None:
                        continue
                    if data is DONE:
                        done = True
                        break
                    if isinstance(data.get("usage"), dict):
                        usage = data["usage"]
                    for choice in data.get("choices") or []:
                        text = str(choice.get("text") or "")
                        if text:
                            first = first or time.perf_counter()
                            batch.append({"content": text, "stop": False})
                        if choice.get("finish_reason"):
                            finish = choice
                if done or (finish is not None and usage is not None):
                    batch.append(final_event(finish or {}, usage, self._started, first, time.perf_counter()))
                    yield batch
                    return
                if batch:
                    yield batch
        except httpx.HTTPError as exc:
            raise EngineStreamError(f"the engine connection broke mid-stream: {type(exc).__name__}") from None
        if finish is not None:
            yield [final_event(finish, usage, self._started, first, time.perf_counter())]
        else:
            raise EngineStreamError("the engine's stream ended without a finish_reason")

    async def aclose(self) -> None:
        resp, self._resp = self._resp, None
        if resp is not None:
            await resp.aclose()


def _chunk(line: bytes) -> dict[str, Any] | None:
    """One SSE line of vLLM / SGLang (:func:`~._http.sse_data`); ``error`` or ``object: error``
    is their error event."""
    return sse_data(line, lambda d: "error" in d or d.get("object") == "error")


__all__ = [
    "KINDS",
    "VllmBackend",
    "backend_for",
    "completions_body",
    "final_event",
    "read_tokenizer_config",
    "split_engine_url",
    "stop_type",
]
