"""Pure parts of the gateway: request validation, translation, the turn policy, auth, limits."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from splitserve._errors import SpecError, UsageError
from splitserve.chat import get_format
from splitserve.chat._format import random_call_id
from splitserve.gateway import (
    PLAIN,
    APIError,
    KeyLimiter,
    KeyRing,
    ServedModel,
    Turn,
    add_key,
    gbnf_literal,
    hash_key,
    plan_chat,
    require_auth_off_loopback,
)
from splitserve.gateway._chat import CALL_ARGS, CALL_START, CONTENT
from splitserve.gateway._schemas import ChatRequest, check_history, parse_body

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
NS = "]<]minimax[>["
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"location": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]


def req(**kw: object) -> ChatRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}
    r: ChatRequest = parse_body(ChatRequest, json.dumps(body).encode())
    check_history(r)
    return r


def model(fmt: str = "plain", template: str = CHATML) -> ServedModel:
    return ServedModel(id="m", template=template, format=PLAIN if fmt == "plain" else get_format(fmt), bos_token="<s>")


def m3_call(*invokes: tuple[str, dict[str, str]]) -> str:
    body = "".join(
        f'{NS}<invoke name="{n}">\n' + "".join(f"{NS}<{k}>{v}{NS}</{k}>\n" for k, v in a.items()) + f"{NS}</invoke>\n"
        for n, a in invokes
    )
    return f"{NS}<tool_call>\n{body}{NS}</tool_call>"


# -- validation -------------------------------------------------------------------------------


def test_model_may_be_left_out_as_with_llama_server_and_vllm() -> None:
    req = parse_body(ChatRequest, json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode())
    assert req.model is None


@pytest.mark.parametrize(
    "body,param",
    [
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages.0.content.0.type",
        ),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
        ({"model": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
    ],
)
def test_bad_fields_are_400_naming_the_field(body: dict[str, object], param: str) -> None:
    with pytest.raises(APIError) as err:
        parse_body(ChatRequest, json.dumps(body).encode())
    assert err.value.status == 400 and err.value.param == param
    assert err.value.body()["error"]["param"] == param


def test_malformed_json_and_history_are_400() -> None:
    with pytest.raises(APIError) as err:
        parse_body(ChatRequest, b"{nope")
    assert err.value.status == 400 and "not valid JSON" in err.value.message
    with pytest.raises(APIError) as err:
        req(messages=[{"role": "tool", "content": "x"}])
    assert err.value.param == "messages.0.tool_call_id"
    with pytest.raises(APIError) as err:
        req(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})
    assert err.value.param == "tool_choice"
    with pytest.raises(APIError):
        req(tool_choice="required")


# -- translation --------------------------------------------------------------------------------


def test_plan_maps_fields_and_strips_bos() -> None:
    tmpl = "{{ bos_token }}" + CHATML
    p = plan_chat(
        req(max_completion_tokens=7, temperature=0.2, top_k=5, min_p=0.1, seed=3, stop="END", unknown_field=1),
        model(template=tmpl),
    )
    b = p.body
    assert b["prompt"].startswith("<|im_start|>user\nhi") and not b["prompt"].startswith("<s>")
    assert b["n_predict"] == 7 and b["temperature"] == 0.2 and b["seed"] == 3
    assert b["top_k"] == 5 and b["min_p"] == 0.1 and "unknown_field" not in b
    assert b["cache_prompt"] is True and b["stop"] == ["END"]
    hermes = plan_chat(req(), model("hermes"))
    assert "<|im_end|>" in hermes.body["stop"] and hermes.body["n_predict"] == -1


def test_response_format_becomes_the_engine_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    p = plan_chat(req(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}), model())
    assert p.body["json_schema"] == schema
    assert plan_chat(req(response_format={"type": "json_object"}), model()).body["json_schema"] == {"type": "object"}
    with pytest.raises(APIError):
        plan_chat(req(response_format={"type": "json_object"}, grammar='root ::= "a"'), model())


def test_force_output_only_with_test_hooks() -> None:
    with pytest.raises(APIError) as err:
        plan_chat(req(force_output="x"), model())
    assert "--test-hooks" in err.value.message
    assert (
        plan_chat(req(force_output='a"b\n'), model(), test_hooks=True).body["grammar"]
        == gbnf_literal('a"b\n')
        == 'root ::= "a\\"b\\n"\n'
    )


# -- the turn policy ----------------------------------------------------------------------------


def run_turn(fmt: str, text: str, pieces: int = 3, **kw: object) -> Turn:
    plan = plan_chat(req(tools=TOOLS, **kw), model(fmt))
    turn = Turn(plan, plan.parser(get_format(fmt) if fmt != "plain" else PLAIN))
    step = max(1, len(text) // pieces)
    for i in range(0, len(text), step):
        turn.feed(text[i : i + step])
    turn.finish()
    return turn


def test_turn_keeps_calls_and_finish_reason_agrees() -> None:
    text = "Sure." + m3_call(("get_weather", {"location": "Paris", "days": "3"}))
    t = run_turn("minimax-m3", text)
    (call,) = t.tool_calls()
    assert json.loads(call["function"]["arguments"]) == {"location": "Paris", "days": 3}
    assert t.finish_reason("eos") == "tool_calls" and t.finish_reason("limit") == "length"
    assert t.message()["content"] == "Sure."


def test_turn_policy_none_named_and_single() -> None:
    two = m3_call(("get_weather", {"location": "Paris"}), ("get_time", {"city": "Oslo"}))
    assert [c["function"]["name"] for c in run_turn("minimax-m3", two).tool_calls()] == ["get_weather", "get_time"]
    single = run_turn("minimax-m3", two, parallel_tool_calls=False)
    assert [c["function"]["name"] for c in single.tool_calls()] == ["get_weather"]
    assert any("parallel_tool_calls" in w for w in single.warnings)
    named = run_turn("minimax-m3", two, tool_choice={"type": "function", "function": {"name": "get_time"}})
    (call,) = named.tool_calls()
    assert call["function"]["name"] == "get_time"
    none = run_turn("minimax-m3", "ok" + two, tool_choice="none")
    assert none.tool_calls() == [] and none.finish_reason("eos") == "stop"
    assert none.message()["content"] == "ok"
    req_ = run_turn("minimax-m3", "no call here", tool_choice="required")
    assert any("required" in w for w in req_.final_warnings("eos"))


def test_turn_deltas_are_renumbered_and_stream_equals_batch() -> None:
    two = m3_call(("get_weather", {"location": "Paris"}), ("get_time", {"city": "Oslo"}))
    plan = plan_chat(
        req(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}}), model("minimax-m3")
    )
    turn = Turn(plan, plan.parser(get_format("minimax-m3")))
    deltas = []
    for ch in two:  # one character at a time
        deltas += turn.feed(ch)
    deltas += turn.finish()
    starts = [d for d in deltas if d.kind == CALL_START]
    assert [(d.index, d.name) for d in starts] == [(0, "get_time")]
    args = "".join(d.text for d in deltas if d.kind == CALL_ARGS)
    assert json.loads(args) == {"city": "Oslo"}
    assert turn.tool_calls()[0]["function"]["arguments"] == args
    assert not [d for d in deltas if d.kind == CONTENT and d.text.strip()]


def test_truncated_call_is_dropped_and_reported_as_length() -> None:
    cut = "Hi" + m3_call(("get_weather", {"location": "Paris"}))[:-30]
    t = run_turn("minimax-m3", cut)
    assert t.tool_calls() == [] and t.finish_reason("limit") == "length"
    assert any("cut off" in w for w in t.final_warnings("limit"))


def test_call_ids_are_unique() -> None:
    assert len({random_call_id(0) for _ in range(50)}) == 50


# -- auth ---------------------------------------------------------------------------------------


def test_keys_file_stores_hashes_only(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    alice = add_key(path, "alice")
    bob = add_key(path, "bob")
    text = path.read_text()
    assert alice not in text and hash_key(alice) in text
    ring = KeyRing.build(None, path)
    assert ring.check(f"Bearer {alice}") == "alice" and ring.check(f"Bearer {bob}") == "bob"
    assert ring.check("Bearer nope") is None and ring.check(None) is None
    with pytest.raises(UsageError):
        add_key(path, "alice")
    (tmp_path / "bad.txt").write_text("alice plaintext\n")
    with pytest.raises(SpecError):
        KeyRing.build(None, tmp_path / "bad.txt")
    assert KeyRing.build("k").check("Bearer k") == "default"


def test_auth_required_beyond_loopback() -> None:
    require_auth_off_loopback("127.0.0.1", KeyRing({}))
    require_auth_off_loopback("::1", KeyRing({}))
    with pytest.raises(UsageError):
        require_auth_off_loopback("0.0.0.0", KeyRing({}))
    require_auth_off_loopback("0.0.0.0", KeyRing.build("k"))


# -- limits -------------------------------------------------------------------------------------


def test_limiter_queues_then_refuses() -> None:
    async def scenario() -> list[str]:
        lim = KeyLimiter(max_concurrent=1, max_queue=1)
        order: list[str] = []
        gate = asyncio.Event()

        async def job(name: str) -> None:
            async with lim.slot("k"):
                order.append(f"start {name}")
                await gate.wait()
                order.append(f"end {name}")

        a = asyncio.create_task(job("a"))
        await asyncio.sleep(0)
        b = asyncio.create_task(job("b"))
        await asyncio.sleep(0)
        assert lim.running == 1 and lim.queued == 1
        with pytest.raises(APIError) as err:
            async with lim.slot("k"):
                pass
        assert err.value.status == 429
        async with lim.slot("other"):  # another key has its own lane
            order.append("other")
        gate.set()
        await asyncio.gather(a, b)
        assert lim.running == 0 and lim.queued == 0
        return order

    assert asyncio.run(scenario()) == ["start a", "other", "end a", "start b", "end b"]


def test_a_cancelled_waiter_leaves_the_queue() -> None:
    async def scenario() -> None:
        lim = KeyLimiter(max_concurrent=1, max_queue=2)
        hold = asyncio.Event()

        async def holder() -> None:
            async with lim.slot("k"):
                await hold.wait()

        h = asyncio.create_task(holder())
        await asyncio.sleep(0)

        async def waiter() -> None:
            async with lim.slot("k"):
                pass

        w = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        assert lim.queued == 1
        w.cancel()
        await asyncio.sleep(0)
        assert lim.queued == 0
        hold.set()
        await h
        assert lim.running == 0

    asyncio.run(scenario())
