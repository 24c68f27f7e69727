"""A FakeEngine's script served in vLLM's HTTP shape (splitserve.engine._fake_http), read over
httpx's ASGI transport as a client of vLLM reads it: whole and streamed completions, usage,
stop strings and limits, the other routes and vLLM's errors."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from splitserve.engine import FakeEngine, FakeOutput
from splitserve.engine._fake import FakeFailure
from splitserve.engine._fake_http import by_prompt, echo_reply, main, vllm_app

HELLO = ["Hel", "lo", " there", "."]


def call(app: Any, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://fake") as c:
            return await c.request(method, path, json=body, **kw)

    return anyio.run(go)


def events(response: httpx.Response) -> list[Any]:
    assert response.headers["content-type"].startswith("text/event-stream")
    lines = [ln.removeprefix("data: ") for ln in response.text.split("\n\n") if ln]
    assert lines[-1] == "[DONE]"
    return [json.loads(ln) for ln in lines[:-1]]


def test_a_whole_completion_in_vllms_shape() -> None:
    engine = FakeEngine([HELLO])
    app = vllm_app(engine, "m")
    r = call(app, "POST", "/v1/completions", {"model": "m", "prompt": "Hi", "max_tokens": 50, "temperature": 0})
    assert r.status_code == 200
    data = r.json()
    assert data["id"].startswith("cmpl-") and data["object"] == "text_completion" and data["model"] == "m"
    (choice,) = data["choices"]
    assert choice == {
        "index": 0,
        "text": "Hello there.",
        "logprobs": None,
        "finish_reason": "stop",
        "stop_reason": None,
        "prompt_logprobs": None,
    }
    # the fake's tokenizer (BOS + one byte a token) counts the prompt, the script's tokens the output
    assert data["usage"] == {
        "prompt_tokens": 3,
        "total_tokens": 7,
        "completion_tokens": 4,
        "prompt_tokens_details": None,
    }
    assert engine.bodies == [{"model": "m", "prompt": "Hi", "max_tokens": 50, "temperature": 0}]
    assert (engine.started, engine.finished, engine.aborted) == (1, 1, 0)


def test_a_streamed_completion_one_chunk_a_token_then_the_usage() -> None:
    app = vllm_app(FakeEngine([HELLO]), "m")
    body = {"prompt": "Hi", "stream": True, "stream_options": {"include_usage": True}}
    *chunks, usage = events(call(app, "POST", "/v1/completions", body))
    assert [c["choices"][0]["text"] for c in chunks] == HELLO
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "stop"]
    assert all(c["usage"] is None and c["object"] == "text_completion" and c["model"] == "m" for c in chunks)
    assert len({c["id"] for c in [*chunks, usage]}) == 1
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 3, "total_tokens": 7, "completion_tokens": 4}

    body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    *chunks, _ = events(call(app, "POST", "/v1/completions", body))
    assert [c["usage"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4]
    plain = events(call(app, "POST", "/v1/completions", {"prompt": "Hi", "stream": True}))
    assert len(plain) == 4 and plain[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("stream", [False, True])
def test_stop_strings_and_max_tokens(stream: bool) -> None:
    app = vllm_app(FakeEngine([HELLO]), "m")

    def ask(**kw: Any) -> tuple[str, str, Any, int]:
        r = call(app, "POST", "/v1/completions", {"prompt": "Hi", "stream": stream, **kw})
        if not stream:
            c, u = r.json()["choices"][0], r.json()["usage"]
            return c["text"], c["finish_reason"], c["stop_reason"], u["completion_tokens"]
        got = events(r)
        last = got[-1]["choices"][0]
        return "".join(e["choices"][0]["text"] for e in got), last["finish_reason"], last["stop_reason"], len(got)

    # a stop string cuts inside the token it starts in; vLLM names it in stop_reason
    assert ask(stop=["o th", "."]) == ("Hell", "stop", "o th", 2)
    assert ask(stop="there") == ("Hello ", "stop", "there", 3)
    assert ask(max_tokens=2) == ("Hello", "length", None, 2)
    assert ask(max_tokens=2, stop=["lo"]) == ("Hel", "stop", "lo", 1)


def test_scripts_of_reply_functions_one_token_a_character() -> None:
    app = vllm_app(by_prompt(lambda p: p.upper()), "m")
    r = call(app, "POST", "/v1/completions", {"prompt": "abc", "max_tokens": 2})
    assert r.json()["choices"][0]["text"] == "AB" and r.json()["choices"][0]["finish_reason"] == "length"
    echo = vllm_app(None, "m")  # the default script echoes the prompt's last words, markup removed
    r = call(echo, "POST", "/v1/completions", {"prompt": "<|im_start|>user\nhello there<|im_end|>"})
    assert r.json()["choices"][0]["text"] == "You said: user hello there" == echo_reply("user hello there")
    # one list of token ids is a prompt too
    ids = FakeEngine().token_ids("abc", add_special=False)
    r = call(app, "POST", "/v1/completions", {"prompt": [ids], "max_tokens": 10})
    assert r.json()["choices"][0]["text"] == "ABC" and r.json()["usage"]["prompt_tokens"] == 4


def test_models_tokenize_detokenize_version_health_metrics() -> None:
    engine = FakeEngine([HELLO], props={"default_generation_settings": {"n_ctx": 512}})
    app = vllm_app(engine, "/models/qwen")
    (card,) = call(app, "GET", "/v1/models").json()["data"]
    assert (card["id"], card["root"], card["owned_by"], card["max_model_len"]) == (
        "/models/qwen",
        "/models/qwen",
        "vllm",
        512,
    )
    tok = call(app, "POST", "/tokenize", {"model": "/models/qwen", "prompt": "ab", "return_token_strs": True}).json()
    assert tok == {
        "count": 3,
        "max_model_len": 512,
        "tokens": [1, ord("a") + 3, ord("b") + 3],
        "token_strs": ["<s>", "a", "b"],
    }
    plain = call(app, "POST", "/tokenize", {"prompt": "ab", "add_special_tokens": False}).json()
    assert plain["tokens"] == tok["tokens"][1:] and plain["token_strs"] is None
    (named,) = call(vllm_app(engine, "qwen", root="/models/qwen"), "GET", "/v1/models").json()["data"]
    assert (named["id"], named["root"]) == ("qwen", "/models/qwen")
    assert call(app, "POST", "/detokenize", {"tokens": tok["tokens"]}).json() == {"prompt": "ab"}
    health = call(app, "GET", "/health")
    assert health.status_code == 200 and health.content == b""
    assert "version" in call(app, "GET", "/version").json()

    call(app, "POST", "/v1/completions", {"prompt": "Hi"})
    call(app, "POST", "/v1/completions", {"prompt": "Hi", "stream": True, "max_tokens": 1})
    text = call(app, "GET", "/metrics").text
    assert 'vllm:prompt_tokens_total{engine="0",model_name="/models/qwen"} 6.0' in text
    assert 'vllm:generation_tokens_total{engine="0",model_name="/models/qwen"} 5.0' in text
    assert 'vllm:request_success_total{engine="0",finished_reason="stop",model_name="/models/qwen"} 1.0' in text
    assert 'vllm:request_success_total{engine="0",finished_reason="length",model_name="/models/qwen"} 1.0' in text
    assert 'vllm:num_requests_running{engine="0",model_name="/models/qwen"} 0.0' in text


def error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == status
    return dict(err)


def test_errors_in_vllms_shape() -> None:
    app = vllm_app(FakeEngine([HELLO], props={"default_generation_settings": {"n_ctx": 8}}), "m")
    assert (
        error(call(app, "POST", "/v1/completions", {"model": "other", "prompt": "x"}), 404)["type"] == "NotFoundError"
    )
    long = error(call(app, "POST", "/v1/completions", {"prompt": "x" * 8}), 400)
    assert long["message"].startswith("This model's maximum context length is 8 tokens. However, your request has 9")
    assert error(call(app, "POST", "/v1/completions", content=b"{nope"), 400)["message"] == "the body is not JSON"
    assert error(call(app, "POST", "/v1/completions", {"prompt": 3}), 400)["param"] == "prompt"
    assert error(call(app, "POST", "/v1/completions", {"prompt": "x", "n": 2}), 400)["param"] == "n"
    assert error(call(app, "POST", "/tokenize", {"prompt": ["x"]}), 400)["param"] == "prompt"
    assert error(call(app, "POST", "/detokenize", {"tokens": "x"}), 400)["param"] == "tokens"

    failing = vllm_app(FakeEngine([FakeFailure(503, "overloaded"), HELLO]), "m")
    assert error(call(failing, "POST", "/v1/completions", {"prompt": "x"}), 503)["message"] == "overloaded"
    assert call(failing, "POST", "/v1/completions", {"prompt": "x"}).json()["choices"][0]["text"] == "Hello there."

    locked = vllm_app(FakeEngine([HELLO]), "m", api_key="k")
    assert call(locked, "GET", "/v1/models").status_code == 401
    assert call(locked, "POST", "/v1/completions", {"prompt": "x"}).status_code == 401
    ok = call(locked, "POST", "/v1/completions", {"prompt": "x"}, headers={"authorization": "Bearer k"})
    assert ok.status_code == 200


def test_a_dropped_stream_breaks_off_and_counts_as_aborted() -> None:
    engine = FakeEngine([FakeOutput(HELLO, drop_after=2)])
    app = vllm_app(engine, "m")
    with pytest.raises(ConnectionAbortedError):
        call(app, "POST", "/v1/completions", {"prompt": "x", "stream": True})
    assert (engine.started, engine.finished, engine.aborted) == (1, 0, 1)


def test_the_process_refuses_a_shape_it_does_not_serve(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--shape", "sglang"])
    assert done.value.code == 2 and "invalid choice: 'sglang'" in capsys.readouterr().err
