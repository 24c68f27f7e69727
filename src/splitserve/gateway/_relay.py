"""The engine's answers as the gateway passes them on: relays (raw bytes, or server-sent events
with the gateway's model id), and whole answers put together from a stream; what each says
of its usage, first token and finish goes to the request's :class:`RequestRecord`."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio

from .._errors import EngineError
from ..engine import EngineReply
from ._access import RequestRecord
from ._errors import APIError
from ._schemas import safe_json_loads


async def relay(
    resp: EngineReply, stack: contextlib.AsyncExitStack, rec: RequestRecord | None = None
) -> AsyncIterator[bytes]:
    """The engine's bytes as they come; closes the engine response and frees the slot at the end.
    With ``rec`` (a streamed native generation) its events are read too, for the first token and
    the last event's usage."""
    pending = b""
    try:
        async for chunk in resp.chunks():
            if rec is not None:
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    _native_line(rec, line)
            yield chunk
    finally:
        with anyio.CancelScope(shield=True):
            await resp.aclose()
            await stack.aclose()


# -- whole answers asked streamed -------------------------------------------------------------
# llama-server checks a non-streamed request's connection only when no result of any task has
# reached its result queue for a whole second (server_response::recv_with_timeout restarts its
# wait on every result), so while another request streams, or anyone polls /slots, a client's
# disconnect goes unseen and the slot generates to the end. A streamed request fails at its next
# token write. So the gateway asks the engine for a stream and puts the whole answer together
# itself, for single-prompt requests (a batch of prompts, or OpenAI logprobs, go as they came).

NATIVE_GENERATING = ("/completion", "/completions", "/infill")


def single_prompt(body: dict[str, Any]) -> bool:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and not all(isinstance(t, int) for t in prompt):
        return len(prompt) == 1 and not isinstance(prompt[0], list)
    return True


def native_whole_body(path: str, method: str, raw: bytes) -> dict[str, Any] | None:
    """The JSON body of a non-streamed single-prompt native generation, else None."""
    if method != "POST" or path not in NATIVE_GENERATING:
        return None
    body = safe_json_loads(raw)  # hostile JSON is a 400 here, not the engine's problem
    if not isinstance(body, dict) or body.get("stream") or not single_prompt(body):
        return None
    return body


def _midstream(data: dict[str, Any]) -> APIError:
    err = data["error"]
    return APIError(
        502,
        f"the engine failed mid-stream: {err.get('message', err) if isinstance(err, dict) else err}",
        type_="server_error",
    )


async def _sse(resp: EngineReply) -> AsyncIterator[dict[str, Any]]:
    async for line in resp.lines():
        if line.startswith(b"data: {"):
            data = json.loads(line[6:])
            if isinstance(data, dict):
                yield data


async def native_whole(resp: EngineReply, body: dict[str, Any], rec: RequestRecord) -> bytes:
    """llama-server's non-streamed ``/completion`` answer from its stream: the last event with
    ``content``, ``completion_probabilities`` (and, if asked, ``tokens``) gathered."""
    content: list[str] = []
    probs: list[Any] = []
    tokens: list[Any] = []
    final: dict[str, Any] = {}
    async for data in _sse(resp):
        if "error" in data and "content" not in data:
            raise _midstream(data)
        if rec.ttft_s is None and data.get("content"):
            rec.ttft_s = time.perf_counter() - rec.arrived
        content.append(str(data.get("content") or ""))
        probs.extend(data.get("completion_probabilities") or [])
        tokens.extend(data.get("tokens") or [])
        if data.get("stop"):
            final = data
    _take_native(rec, final)
    final = {**final, "content": "".join(content), "tokens": tokens if body.get("return_tokens") else []}
    if probs or body.get("n_probs"):
        final["completion_probabilities"] = probs
    return json.dumps(final, ensure_ascii=False).encode()


async def openai_whole(resp: EngineReply, rec: RequestRecord) -> bytes:
    """An OpenAI ``text_completion`` from the engine's stream of one choice."""
    text: list[str] = []
    out: dict[str, Any] = {}
    finish = None
    async for data in _sse(resp):
        if "error" in data and "choices" not in data:
            raise _midstream(data)
        for choice in data.get("choices") or []:
            if rec.ttft_s is None and choice.get("text"):
                rec.ttft_s = time.perf_counter() - rec.arrived
            text.append(str(choice.get("text") or ""))
            finish = choice.get("finish_reason") or finish
        for k, v in data.items():
            if k != "choices":
                out[k] = v
    out["choices"] = [{"text": "".join(text), "index": 0, "logprobs": None, "finish_reason": finish}]
    _take_openai(rec, out)
    return json.dumps(out, ensure_ascii=False).encode()


def own_model(data: bytes, model_id: str) -> bytes:
    """An engine's JSON answer with ``model`` set to the gateway's id (llama-server writes its
    model path there, whatever the request named)."""
    try:
        obj = json.loads(data)
    except ValueError:
        return data
    if not isinstance(obj, dict) or "model" not in obj:
        return data
    obj["model"] = model_id
    return json.dumps(obj, ensure_ascii=False).encode()


def _take_openai(rec: RequestRecord, obj: dict[str, Any]) -> None:
    """Usage, finish reason and timings of an OpenAI completion object (or its last chunks)."""
    choices = obj.get("choices") or []
    finish = next((c.get("finish_reason") for c in choices if isinstance(c, dict) and c.get("finish_reason")), None)
    if isinstance(obj.get("usage"), dict):
        rec.usage(obj["usage"], finish or rec.finish_reason)
    elif finish:
        rec.finish_reason = finish
    if isinstance(obj.get("timings"), dict):
        rec.timings(obj["timings"])


def _native_line(rec: RequestRecord, line: bytes) -> None:
    if not line.startswith(b"data: {"):
        return
    try:
        data = json.loads(line[6:])
    except ValueError:
        return
    if not isinstance(data, dict):
        return
    if rec.ttft_s is None and data.get("content"):
        rec.ttft_s = time.perf_counter() - rec.arrived
    if data.get("stop"):
        _take_native(rec, data)


def _take_native(rec: RequestRecord, final: dict[str, Any]) -> None:
    """Usage and stop of llama-server's last ``/completion`` event."""
    if not final:
        return
    raw = final.get("timings")
    timings: dict[str, Any] = raw if isinstance(raw, dict) else {}
    stop = final.get("stop_type")
    rec.usage(
        {
            "prompt_tokens": final.get("tokens_evaluated"),
            "completion_tokens": final.get("tokens_predicted"),
            "prompt_tokens_details": {"cached_tokens": timings.get("cache_n")},
        },
        "length" if stop == "limit" else "stop" if stop in ("eos", "word") else stop,
    )
    rec.timings(timings)


async def relay_events(
    resp: EngineReply, stack: contextlib.AsyncExitStack, model_id: str, rec: RequestRecord
) -> AsyncIterator[bytes]:
    """:func:`relay` for server-sent events, one event per write, each ``model`` the gateway's
    id; the usage and finish reason they carry go to ``rec``."""
    try:
        event: list[bytes] = []
        async for line in resp.lines():
            if line:
                data = line
                if data.startswith(b"data: {"):
                    data = b"data: " + _own_event(data[6:], model_id, rec)
                event.append(data)
                continue
            if event:
                yield b"\n".join(event) + b"\n\n"
                event = []
        if event:
            yield b"\n".join(event) + b"\n\n"
    except EngineError:
        return  # the engine broke off: the stream ends, as a relay's would
    finally:
        with anyio.CancelScope(shield=True):
            await resp.aclose()
            await stack.aclose()


def _own_event(data: bytes, model_id: str, rec: RequestRecord) -> bytes:
    try:
        obj = json.loads(data)
    except ValueError:
        return data
    if not isinstance(obj, dict):
        return data
    if rec.ttft_s is None and any(isinstance(c, dict) and c.get("text") for c in obj.get("choices") or []):
        rec.ttft_s = time.perf_counter() - rec.arrived
    _take_openai(rec, obj)
    if "model" not in obj:
        return data
    obj["model"] = model_id
    return json.dumps(obj, ensure_ascii=False).encode()


__all__ = [
    "NATIVE_GENERATING",
    "native_whole",
    "native_whole_body",
    "openai_whole",
    "own_model",
    "relay",
    "relay_events",
    "single_prompt",
]
