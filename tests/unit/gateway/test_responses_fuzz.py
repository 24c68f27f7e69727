"""Hostile input to ``POST /v1/responses``: the fuzz's Responses cases (strategies and fake engine
from ``benchmarks/bench_gateway_fuzz.py``: every input item and tool type with wrong types per
field, garbage bodies, and well-formed requests with hostile text that reach the engine) get no
5xx, OpenAI's error shape, and streams that end with a terminal event; the gateway stays healthy."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import httpx
from hypothesis import HealthCheck, given, settings

_BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_gateway_fuzz.py"
_loaded = sys.modules.get("bench_gateway_fuzz")
if _loaded is None:
    _spec = importlib.util.spec_from_file_location("bench_gateway_fuzz", _BENCH)
    assert _spec is not None and _spec.loader is not None
    _loaded = importlib.util.module_from_spec(_spec)
    sys.modules["bench_gateway_fuzz"] = _loaded
    _spec.loader.exec_module(_loaded)
fuzz: ModuleType = _loaded

_APP = fuzz.in_process_app()


def send(case: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_APP), base_url="http://gw") as c:
            return await c.request(case.method, case.path, content=case.body, headers=case.headers)

    result: httpx.Response = anyio.run(go)
    return result


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(fuzz.responses_cases())
def test_fuzzed_responses_requests_get_no_5xx_and_openai_errors(case: Any) -> None:
    r = send(case)
    streamed = "text/event-stream" in r.headers.get("content-type", "")
    assert not fuzz.responses_problems(r.status_code, r.content, streamed)


def test_the_checker_sees_a_stream_without_its_end() -> None:
    cut = b'event: response.created\ndata: {"type":"response.created"}\n\n'
    assert fuzz.responses_problems(200, cut, True)
    failed = cut + b'event: response.failed\ndata: {"type":"response.failed","code":"server_error"}\n\n'
    assert fuzz.responses_problems(200, failed, True)
    done = cut + b'event: response.completed\ndata: {"type":"response.completed"}\n\n'
    assert not fuzz.responses_problems(200, done, True)
    assert fuzz.responses_problems(500, b'{"error": {"message": "x", "type": "server_error"}}', False)


def test_the_gateway_answers_a_normal_response_after_the_fuzz() -> None:
    body = json.dumps({"input": "hello", "max_output_tokens": 4}).encode()
    r = send(fuzz.Case("POST", "/v1/responses", body, {"content-type": "application/json"}))
    assert r.status_code == 200 and r.json()["object"] == "response"
    limiter = _APP.state.gateway.limiter
    assert limiter.running == 0 and limiter.queued == 0  # every fuzzed request gave its slot back
