"""VllmBackend on a FakeEngine served in vLLM's HTTP shape (in process, over httpx's ASGI transport): typed requests in,
llama.cpp events out, vLLM's OpenAI completions in between."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from splitserve.engine import CompletionRequest, EngineHTTPError, EngineStreamError, FakeEngine, VllmBackend
from splitserve.engine._fake_http import vllm_app
from splitserve.engine._vllm import completions_body, read_tokenizer_config, stop_type


def backend(engine: FakeEngine, model: str = "m", max_model_len: int | None = None, **kw: Any) -> VllmBackend:
    app = vllm_app(engine, model, max_model_len=max_model_len)
    return VllmBackend("http://fake", transport=httpx.ASGITransport(app=app), **kw)


def run(coro: Any) -> Any:
    async def main() -> Any:
        return await coro

    return anyio.run(main)


def test_completion_body_translation() -> None:
    request = CompletionRequest(
        "<|im_start|>user\nHi",
        n_predict=32,
        cache_prompt=True,
        id_slot=2,
        temperature=0.2,
        top_k=40,
        repeat_penalty=1.1,
        stop=["<|im_end|>"],
        json_schema={"type": "object"},
        grammar='root ::= "x"',
        extra={"samplers": ["top_k"]},
    )
    assert completions_body(request, "m") == {
        "model": "m",
        "prompt": "<|im_start|>user\nHi",
        "max_tokens": 32,
        "temperature": 0.2,
        "top_k": 40,
        "repetition_penalty": 1.1,
        "stop": ["<|im_end|>"],
        "structured_outputs": {"json": {"type": "object"}, "grammar": 'root ::= "x"'},
    }
    assert "max_tokens" not in completions_body(CompletionRequest("x", n_predict=-1), "m")
    assert completions_body(CompletionRequest("x", n_probs=2), "m")["logprobs"] == 2
    assert (stop_type("length", None), stop_type("stop", "</s>"), stop_type("stop", None)) == ("limit", "word", "eos")


async def collect(b: VllmBackend, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with b.stream(CompletionRequest.of(body)) as events:
        return [e async for e in events.events()]


@pytest.mark.parametrize(
    ("body", "text", "kind"),
    [
        ({"prompt": "Hi", "n_predict": 100}, "Hello there.", "eos"),
        ({"prompt": "Hi", "n_predict": 5}, "Hello", "limit"),
        ({"prompt": "Hi", "n_predict": 100, "stop": [" there"]}, "Hello", "word"),
    ],
)
def test_stream_gives_llama_events(body: dict[str, Any], text: str, kind: str) -> None:
    engine = FakeEngine([list("Hello there.")])
    events = run(collect(backend(engine), body))
    *tokens, final = events
    assert "".join(e["content"] for e in tokens) == text and all(not e["stop"] for e in tokens)
    assert final["stop"] is True and final["stop_type"] == kind
    assert final["tokens_predicted"] == len(text) and final["tokens_evaluated"] == len("Hi") + 1
    assert set(final["timings"]) >= {"prompt_n", "predicted_n", "predicted_ms"}
    sent = engine.bodies[-1]
    assert sent["model"] == "m" and sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


def test_complete_info_tokenize(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": [{"name": "default", "template": "T"}, {"name": "tool_use", "template": "U"}],
                "bos_token": {"content": "<s>"},
                "eos_token": "</s>",
            }
        )
    )
    engine = FakeEngine([list("Yes.")])
    b = backend(engine, str(tmp_path), 2048)
    done = run(b.complete(CompletionRequest("Q", n_predict=10)))
    assert (done["content"], done["stop"], done["tokens_predicted"]) == ("Yes.", True, 4)
    info = run(b.info())
    props = info.props
    assert (props["chat_template"], props["bos_token"], props["eos_token"]) == ("T", "<s>", "</s>")
    assert props["default_generation_settings"] == {"n_ctx": 2048} and props["model_path"] == str(tmp_path)
    assert run(b.tokenize("a", add_special=True)) == [1, ord("a") + 3]
    assert run(b.tokenize("a")) == [ord("a") + 3]
    assert info.slots == [] and info.n_ctx == 2048
    assert run(b.health()).ok
    assert b"vllm:num_requests_running" in (run(b.metrics()) or b"")
    given = backend(engine, str(tmp_path), chat_template="MINE")
    assert run(given.info()).chat_template == "MINE"


def test_read_tokenizer_config_prefers_chat_template_jinja(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "old", "eos_token": "<e>"}))
    (tmp_path / "chat_template.jinja").write_text("new")
    assert read_tokenizer_config(str(tmp_path)) == {"chat_template": "new", "bos_token": "", "eos_token": "<e>"}
    assert read_tokenizer_config(str(tmp_path / "missing"))["chat_template"] is None


def test_errors_are_engine_errors() -> None:
    with pytest.raises(EngineHTTPError, match="400"):
        run(collect(backend(FakeEngine()), {"prompt": "x" * 5000, "n_predict": 1}))

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        body = b'data: {"choices":[{"text":"a","finish_reason":null}]}\n\ndata: {"error":{"message":"boom"}}\n\n'
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    broken = VllmBackend("http://x", transport=httpx.MockTransport(handler))
    with pytest.raises(EngineStreamError, match="boom"):
        run(collect(broken, {"prompt": "x"}))
