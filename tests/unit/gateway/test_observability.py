"""The gateway's metrics follow vLLM's set, count each token once, see every request's first
token and finish, relay the engine's own metrics, and write one access log line per request
(issue 20, item 13); against a fake engine, in process."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import httpx
import pytest

from splitserve.engine import FakeEngine, FakeOutput
from splitserve.gateway import GatewayConfig, create_app
from splitserve.gateway._auth import KeyRing, hash_key

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
ENGINE_METRICS = (
    "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
    "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 123\n"
)


TIMINGS = {
    "cache_n": 15,
    "prompt_n": 5,
    "prompt_ms": 50.0,
    "predicted_n": 3,
    "predicted_ms": 200.0,
    "predicted_per_second": 15.0,
}


def fake_engine(metrics: bool = True) -> FakeEngine:
    """Every answer: 20 prompt tokens of which 15 cached, 3 generated; the chat and native
    generations hit the token limit, the OpenAI completion stops."""

    def output(body: dict[str, Any]) -> FakeOutput:
        return FakeOutput(
            ["Hi", " there"],
            stop_type="limit" if "n_predict" in body else "eos",
            final={"tokens_predicted": 3, "tokens_evaluated": 20, "timings": TIMINGS},
        )

    return FakeEngine(
        output,
        metrics=ENGINE_METRICS if metrics else None,
        props={
            "chat_template": CHATML,
            "model_path": "/m/smol.gguf",
            "default_generation_settings": {"n_ctx": 2048},
            "total_slots": 1,
        },
    )


def app_of(engine: FakeEngine, keys: dict[str, str] | None = None) -> Any:
    return create_app(
        GatewayConfig(
            engine_url="http://engine",
            model_format="hermes",
            keys=KeyRing({hash_key(k): n for n, k in (keys or {}).items()}),
        ),
        engine,
    )


def calls(
    app: Any, requests: list[tuple[str, str, dict[str, Any] | None]], headers: dict[str, str] | None = None
) -> list[httpx.Response]:
    async def go() -> list[httpx.Response]:
        out = []
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw", headers=headers or {}
        ) as c:
            for method, path, body in requests:
                out.append(await c.request(method, path, json=body))
        return out

    return anyio.run(go)


CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics:\n{text}")


def test_finished_streams_are_not_counted_as_disconnects() -> None:
    app = app_of(fake_engine())
    rs = calls(
        app,
        [
            ("POST", "/v1/chat/completions", {**CHAT, "stream": True}),
            ("POST", "/v1/completions", {"prompt": "x", "max_tokens": 3, "stream": True}),
            ("GET", "/metrics", None),
        ],
    )
    assert [r.status_code for r in rs] == [200, 200, 200]
    assert rs[0].text.rstrip().endswith("data: [DONE]")
    assert metric(rs[2].text, "splitserve_client_disconnects_total") == 0


def test_tokens_by_kind_do_not_overlap_and_match_usage() -> None:
    app = app_of(fake_engine())
    rs = calls(app, [("POST", "/v1/chat/completions", CHAT), ("GET", "/metrics", None)])
    usage = rs[0].json()["usage"]
    assert usage["prompt_tokens"] == 20 and usage["prompt_tokens_details"]["cached_tokens"] == 15
    text = rs[1].text
    assert metric(text, 'splitserve_tokens_total{kind="prompt"}') == 5
    assert metric(text, 'splitserve_tokens_total{kind="cached"}') == 15
    assert metric(text, 'splitserve_tokens_total{kind="completion"}') == 3
    assert metric(text, 'splitserve_prompt_tokens_total{model_name="smol"}') == 20
    assert metric(text, 'splitserve_prompt_tokens_cached_total{model_name="smol"}') == 15
    assert metric(text, 'splitserve_generation_tokens_total{model_name="smol"}') == 3


@pytest.mark.parametrize("stream", [False, True])
def test_every_generation_has_ttft_latency_and_a_finish_reason(stream: bool) -> None:
    app = app_of(fake_engine())
    rs = calls(
        app,
        [
            ("POST", "/v1/chat/completions", {**CHAT, "stream": stream}),
            ("POST", "/v1/completions", {"prompt": "x", "max_tokens": 3, "stream": stream}),
            ("POST", "/completion", {"prompt": "x", "n_predict": 3, "stream": stream}),
            ("GET", "/metrics", None),
        ],
    )
    assert [r.status_code for r in rs] == [200, 200, 200, 200]
    text = rs[3].text
    lab = '{model_name="smol"}'
    assert metric(text, "splitserve_time_to_first_token_seconds_count" + lab) == 3
    assert metric(text, "splitserve_e2e_request_latency_seconds_count" + lab) == 3
    assert metric(text, "splitserve_request_queue_time_seconds_count" + lab) == 3
    assert metric(text, "splitserve_request_prefill_time_seconds_sum" + lab) == pytest.approx(0.15)
    assert metric(text, "splitserve_request_decode_time_seconds_sum" + lab) == pytest.approx(0.6)
    # decode 0.2 s over 3 - 1 tokens: 0.1 s per output token, three times
    assert metric(text, "splitserve_request_time_per_output_token_seconds_sum" + lab) == pytest.approx(0.3)
    assert metric(text, "splitserve_request_generation_tokens_sum" + lab) == 9
    # chat and native hit the token limit; the OpenAI completion said "stop"
    assert metric(text, 'splitserve_request_success_total{finished_reason="length",model_name="smol"}') == 2
    assert metric(text, 'splitserve_request_success_total{finished_reason="stop",model_name="smol"}') == 1


def test_requests_that_generate_nothing_are_not_request_metrics() -> None:
    app = app_of(fake_engine())
    rs = calls(
        app,
        [("GET", "/v1/models", None), ("POST", "/v1/chat/completions", {"messages": []}), ("GET", "/metrics", None)],
    )
    assert rs[1].status_code == 400
    assert "splitserve_e2e_request_latency_seconds_count" not in rs[2].text
    assert metric(rs[2].text, 'splitserve_requests_total{endpoint="chat",status="400"}') == 1


def test_the_engine_metrics_are_appended_when_it_serves_them() -> None:
    text = calls(app_of(fake_engine(metrics=True)), [("GET", "/metrics", None)])[0].text
    assert "llamacpp:prompt_tokens_total 123" in text
    assert metric(text, "splitserve_engine_metrics_up") == 1
    text = calls(app_of(fake_engine(metrics=False)), [("GET", "/metrics", None)])[0].text
    assert "llamacpp:" not in text and metric(text, "splitserve_engine_metrics_up") == 0


@pytest.mark.parametrize("stream", [False, True])
def test_one_access_log_line_per_request(stream: bool, caplog: pytest.LogCaptureFixture) -> None:
    app = app_of(fake_engine(), keys={"alice": "sk-alice"})
    with caplog.at_level(logging.INFO, logger="splitserve.access"):
        rs = calls(
            app,
            [("POST", "/v1/chat/completions", {**CHAT, "stream": stream})],
            headers={"Authorization": "Bearer sk-alice"},
        )
        calls(app, [("GET", "/v1/models", None)])  # no key: 401
    assert rs[0].status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "splitserve.access"]
    assert len(lines) == 2, lines
    chat, denied = lines
    assert chat.startswith("req-") and " key=alice POST /v1/chat/completions 200 " in chat
    assert "model=smol prompt=20 cached=15 completion=3 finish=length" in chat
    assert "ttft=" in chat and "ttft=-" not in chat and "duration=" in chat
    assert "sk-alice" not in chat
    assert " key=- GET /v1/models 401 " in denied
