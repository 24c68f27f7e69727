"""The gateway's /metrics counts drafted and accepted tokens from each response's timings
(llama-server's ``timings.draft_n`` / ``draft_n_accepted``), against a fake engine."""

from __future__ import annotations

from typing import Any

import anyio
import httpx

from splitserve.engine import FakeEngine, FakeOutput
from splitserve.gateway import GatewayConfig, create_app
from splitserve.gateway._metrics import Metrics

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics:\n{text}")


def test_on_timings_counts_drafts_and_keeps_the_ratio() -> None:
    m = Metrics()
    m.on_timings({"predicted_n": 10})  # no speculation: nothing counted
    m.on_timings({"draft_n": 40, "draft_n_accepted": 30})
    m.on_timings({"draft_n": 10, "draft_n_accepted": 0})
    m.on_timings({"draft_n": "x", "draft_n_accepted": 3})  # garbage is ignored
    text = m.render()[0].decode()
    assert metric(text, "splitserve_draft_tokens_total") == 50
    assert metric(text, "splitserve_draft_accepted_tokens_total") == 30
    assert metric(text, "splitserve_draft_acceptance_ratio") == 0.6


def fake_engine(timings: list[dict[str, object]]) -> FakeEngine:
    """A streamed /completion whose last event carries these timings, one per request."""
    left = list(timings)

    def output(body: dict[str, Any]) -> FakeOutput:
        merged = {"prompt_n": 5, "predicted_n": 3, "predicted_per_second": 30.0, "cache_n": 0, **left.pop(0)}
        return FakeOutput(["Hi", " there"], final={"tokens_predicted": 3, "tokens_evaluated": 5, "timings": merged})

    return FakeEngine(
        output,
        props={
            "chat_template": CHATML,
            "model_path": "/m/smol.gguf",
            "default_generation_settings": {"n_ctx": 2048},
            "total_slots": 1,
        },
    )


def test_chat_responses_feed_the_draft_counters() -> None:
    engine = fake_engine([{"draft_n": 12, "draft_n_accepted": 9}, {"draft_n": 4, "draft_n_accepted": 3}, {}])
    app = create_app(GatewayConfig(engine_url="http://engine"), engine)

    async def scenario() -> tuple[list[dict[str, object]], str]:
        out = []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            for stream in (False, True, False):
                r = await client.post(
                    "/v1/chat/completions",
                    json={"messages": [{"role": "user", "content": "hello"}], "stream": stream, "max_tokens": 8},
                )
                assert r.status_code == 200, r.text
                if not stream:
                    out.append(r.json()["timings"])
            text = (await client.get("/metrics")).text
        return out, text

    timings, text = anyio.run(scenario)
    assert timings[0]["draft_n"] == 12  # passed on to the client as llama-server does
    assert metric(text, "splitserve_draft_tokens_total") == 16
    assert metric(text, "splitserve_draft_accepted_tokens_total") == 12
    assert metric(text, "splitserve_draft_acceptance_ratio") == 0.75
