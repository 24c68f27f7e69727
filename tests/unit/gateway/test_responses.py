"""``POST /v1/responses`` on the scripted engine: the official ``openai`` SDK's
``responses.create`` / ``responses.stream`` / ``responses.parse`` against the gateway in front of a
:class:`FakeEngine` whose raw output is written in the model's own format (hermes, minimax-m3,
qwen3-coder, with the real templates of those models); the stream's event order checked at
every chunk boundary of the engine's output; the streamed answer equal to the whole one;
``previous_response_id`` found and evicted; the prompt too long; ``max_output_tokens``."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import openai
import pytest
from openai.types.responses import ResponseCustomToolCall, ResponseFunctionToolCall
from pydantic import BaseModel

from splitserve.chat import get_format
from splitserve.engine import CompletionStream, EngineStreamError, FakeEngine, FakeOutput, resolve_source
from splitserve.engine._fake import FakeFailure
from splitserve.gateway import GatewayConfig, Plan, ServedModel, Turn, create_app, plan_chat
from splitserve.gateway._responses import ChatPlan, ResponsesRequest, ResponseStore, items_to_messages, to_chat
from splitserve.gateway._responses_out import ResponseBuilder
from unit.chat._support import SYNTAXES

TEMPLATES = {
    "hermes": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "minimax-m3": "MiniMax-M3.jinja",
    "qwen3-coder": "Qwen3-Coder.jinja",
}
FORMATS = list(TEMPLATES)
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello <b>world</b>\n*** End Patch"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
}
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch to files",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch"'},
}
AGENTS = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "agents",
    "tools": [
        {
            "type": "function",
            "name": "spawn",
            "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
        }
    ],
}
# the gateway's own tool kinds too (namespace), which the SDK's tool params do not name
TOOLS: list[Any] = [WEATHER, APPLY_PATCH, AGENTS, {"type": "web_search"}]


@functools.cache
def template(fmt: str) -> str:
    return (resolve_source(None).path / "models/templates" / TEMPLATES[fmt]).read_text()


def call(fmt: str, name: str, args: dict[str, str]) -> str:
    """A tool call as the model writes it in ``fmt``."""
    return SYNTAXES[fmt].one(name, args)


def think(fmt: str, text: str) -> str:
    opener, closer = SYNTAXES[fmt].think or ("", "")
    return f"{opener}{text}{closer}\n"


def engine(fmt: str, outputs: Any, **kw: Any) -> FakeEngine:
    props = {
        "chat_template": template(fmt),
        "model_path": "/models/m.gguf",
        "default_generation_settings": {"n_ctx": 65536},
        "total_slots": 4,
    }
    return FakeEngine(outputs, props=props, **kw)


def app_for(fmt: str, eng: FakeEngine) -> Any:
    return create_app(GatewayConfig(engine_url="fake://", model_format=fmt), eng)


def run(app: Any, work: Callable[[openai.AsyncOpenAI], Any]) -> Any:
    async def go() -> Any:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as http:
            client = openai.AsyncOpenAI(base_url="http://gw/v1", api_key="k", http_client=http, max_retries=0)  # type: ignore[arg-type]  # the SDK's stub names its httpx2 client class
            return await work(client)

    return anyio.run(go)


def parse_sse(text: str) -> list[dict[str, Any]]:
    """SSE events, each's ``event:`` line checked against its data's type."""
    out = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name, data = block.split("\n")
        ev = json.loads(data.removeprefix("data: "))
        assert name == "event: " + ev["type"]
        out.append(ev)
    return out


def raw_events(app: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The data of every SSE event of a streamed response, checked against its event line."""

    async def go() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            r = await c.post("/v1/responses", json={**body, "stream": True})
            assert r.status_code == 200, r.text
            return parse_sse(r.text)

    result: list[dict[str, Any]] = anyio.run(go)
    return result


def post(app: Any, body: dict[str, Any]) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            return await c.post("/v1/responses", json=body)

    result: httpx.Response = anyio.run(go)
    return result


# -- the stream's rules ----------------------------------------------------------------------

TERMINAL = ("response.completed", "response.incomplete", "response.failed")
DELTA_DONE = {
    "response.output_text.delta": ("response.output_text.done", "text"),
    "response.reasoning_text.delta": ("response.reasoning_text.done", "text"),
    "response.function_call_arguments.delta": ("response.function_call_arguments.done", "arguments"),
    "response.custom_tool_call_input.delta": ("response.custom_tool_call_input.done", "input"),
}


def check_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The Responses stream's order rules; returns the final response."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1]["type"] in TERMINAL
    assert sum(e["type"] in TERMINAL for e in events) == 1
    rid = events[0]["response"]["id"]
    assert events[1]["response"]["id"] == rid == events[-1]["response"]["id"]
    open_item: dict[str, Any] | None = None
    parts: set[tuple[int, int]] = set()
    deltas: dict[tuple[str, int], list[str]] = {}
    done_items: list[dict[str, Any]] = []
    for e in events[2:-1]:
        kind = e["type"]
        if kind == "response.output_item.added":
            assert open_item is None, "an item opened before the last one was done"
            assert e["output_index"] == len(done_items)
            open_item = e["item"]
        elif kind == "response.output_item.done":
            assert open_item is not None and e["output_index"] == len(done_items)
            assert e["item"]["id"] == open_item["id"] and e["item"]["type"] == open_item["type"]
            assert not any(p[0] == e["output_index"] for p in parts), "a content part was left open"
            done_items.append(e["item"])
            open_item = None
        else:
            assert open_item is not None, kind
            assert e["output_index"] == len(done_items) and e["item_id"] == open_item["id"], e
            where = (e["output_index"], e.get("content_index", 0))
            if kind == "response.content_part.added":
                assert where not in parts and e["content_index"] == 0
                parts.add(where)
            elif kind == "response.content_part.done":
                parts.remove(where)
            elif kind in DELTA_DONE:
                if "content_index" in e:
                    assert where in parts
                deltas.setdefault((kind, e["output_index"]), []).append(e["delta"])
            else:
                done = next(k for k, (d, _) in DELTA_DONE.items() if d == kind)
                field = DELTA_DONE[done][1]
                assert "".join(deltas.pop((done, e["output_index"]), [])) == e[field]
    assert open_item is None and not parts
    final: dict[str, Any] = events[-1]["response"]
    assert final["output"] == done_items
    return final


def normal(response: dict[str, Any]) -> dict[str, Any]:
    """A response without what differs between two runs (ids, times)."""
    text = json.dumps(response)
    ids = [response["id"]]
    for item in response["output"]:
        ids += [item["id"], item.get("call_id", "")]
    for n, old in enumerate(i for i in ids if i):
        text = text.replace(old, f"ID{n}")
    out: dict[str, Any] = json.loads(text)
    out.pop("created_at")
    return out


# -- the SDK, per format ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_function_call_then_its_output_then_the_answer(fmt: str) -> None:
    raw = think(fmt, "I should look it up.") + call(fmt, "get_weather", {"location": "Paris"})
    eng = engine(fmt, [list(raw), ["Sunny", " in", " Paris."]])
    app = app_for(fmt, eng)

    async def work(c: openai.AsyncOpenAI) -> Any:
        first = await c.responses.create(model="m", input="Weather in Paris?", tools=TOOLS)
        fc = first.output[-1]
        assert isinstance(fc, ResponseFunctionToolCall)
        history: list[Any] = [
            {"role": "user", "content": "Weather in Paris?"},
            *[o.model_dump(exclude_none=True) for o in first.output],
            {"type": "function_call_output", "call_id": fc.call_id, "output": "sunny, 21 C"},
        ]
        async with c.responses.stream(model="m", input=history, tools=TOOLS) as s:
            kinds = [ev.type async for ev in s]
            second = await s.get_final_response()
        return first, kinds, second

    first, kinds, second = run(app, work)
    assert [o.type for o in first.output] == ["reasoning", "function_call"]
    assert first.output[0].content[0].text == "I should look it up."
    fc = first.output[1]
    assert fc.name == "get_weather" and json.loads(fc.arguments) == {"location": "Paris"}
    assert fc.call_id.startswith("call_") and fc.id.startswith("fc_") and fc.status == "completed"
    assert first.status == "completed" and first.usage.output_tokens == len(raw)
    assert 0 < first.usage.output_tokens_details.reasoning_tokens < len(raw)
    assert "web_search" in first.model_extra["splitserve"]["warnings"][0]
    assert second.output_text == "Sunny in Paris." and "response.output_text.delta" in kinds
    prompt = eng.bodies[1]["prompt"]
    assert "sunny, 21 C" in prompt and "Paris" in prompt
    assert prompt.startswith(eng.bodies[0]["prompt"])  # the history renders as it was written


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_custom_tool_is_answered_as_a_custom_tool_call_with_the_raw_input(fmt: str) -> None:
    raw = call(fmt, "apply_patch", {"input": PATCH})
    eng = engine(fmt, [list(raw), "Done."])
    app = app_for(fmt, eng)

    async def work(c: openai.AsyncOpenAI) -> Any:
        events = []
        async with c.responses.stream(model="m", input="Write hello.txt", tools=TOOLS) as s:
            events = [ev async for ev in s]
            first = await s.get_final_response()
        ctc = first.output[0]
        assert isinstance(ctc, ResponseCustomToolCall)
        history: list[Any] = [
            {"role": "user", "content": "Write hello.txt"},
            ctc.model_dump(exclude_none=True),
            {"type": "custom_tool_call_output", "call_id": ctc.call_id, "output": "Success."},
        ]
        second = await c.responses.create(model="m", input=history, tools=TOOLS)
        return events, first, second

    events, first, second = run(app, work)
    ctc = first.output[0]
    assert ctc.type == "custom_tool_call" and ctc.name == "apply_patch" and ctc.input == PATCH
    done = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    assert len(done) == 1 and done[0].input == PATCH
    assert second.output_text == "Done."
    offered = eng.bodies[0]["prompt"]
    assert "apply_patch" in offered and "*** Begin Patch" in offered  # the grammar is described
    assert "Success." in eng.bodies[1]["prompt"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_namespace_function_is_called_with_its_namespace(fmt: str) -> None:
    raw = call(fmt, "multi_agent_v1.spawn", {"task": "tests"})
    app = app_for(fmt, engine(fmt, [list(raw)]))
    resp = run(app, lambda c: c.responses.create(model="m", input="go", tools=TOOLS))
    fc = resp.output[0]
    assert (fc.type, fc.name, fc.namespace) == ("function_call", "spawn", "multi_agent_v1")
    # sent back, it is the same call again
    msgs = items_to_messages([fc.model_dump(exclude_none=True)], None)
    assert msgs[0]["tool_calls"][0]["function"]["name"] == "multi_agent_v1.spawn"


class Answer(BaseModel):
    city: str
    temperature: int


@pytest.mark.parametrize("fmt", FORMATS)
def test_structured_output_is_grammar_forced_and_parsed(fmt: str) -> None:
    eng = engine(fmt, [list('{"city": "Paris", "temperature": 21}')])
    app = app_for(fmt, eng)
    resp = run(app, lambda c: c.responses.parse(model="m", input="Weather?", text_format=Answer))
    assert resp.output_parsed == Answer(city="Paris", temperature=21)
    schema = eng.bodies[0]["json_schema"]
    assert set(schema["properties"]) == {"city", "temperature"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_tool_choice_named_and_required_force_the_call_with_the_format_grammar(fmt: str) -> None:
    raw = call(fmt, "get_weather", {"location": "Paris"})
    eng = engine(fmt, [list(raw)])
    app = app_for(fmt, eng)
    for choice in (
        "required",
        {"type": "function", "name": "get_weather"},
        {"type": "custom", "name": "apply_patch"},
        {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_weather"}]},
    ):
        r = post(app, {"input": "hi", "tools": TOOLS, "tool_choice": choice})
        assert r.status_code == 200, r.text
        grammar = eng.bodies[-1]["grammar"]
        assert "root ::=" in grammar
    assert "get_weather" not in grammar.replace("get-weather", "") or "apply_patch" not in grammar
    r = post(app, {"input": "hi", "tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    raw = call("hermes", "get_weather", {"location": "Paris"}) + call("hermes", "get_weather", {"location": "Oslo"})
    app = app_for("hermes", engine("hermes", [list(raw)]))
    resp = post(app, {"input": "hi", "tools": TOOLS, "parallel_tool_calls": False}).json()
    assert [json.loads(o["arguments"])["location"] for o in resp["output"]] == ["Paris"]
    both = post(app, {"input": "hi", "tools": TOOLS}).json()
    assert len(both["output"]) == 2


def test_instructions_and_developer_messages_are_one_system_message_later_ones_a_user_turn() -> None:
    msgs = items_to_messages(
        [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "base"}]},
            {"role": "developer", "content": "perms"},
            {"role": "user", "content": "hi"},
            {"role": "developer", "content": "later"},
        ],
        "be brief",
    )
    assert msgs == [
        {"role": "system", "content": "be brief\n\nbase\n\nperms"},
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "later"},
    ]


def test_reasoning_items_come_back_as_the_turns_reasoning() -> None:
    msgs = items_to_messages(
        [
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": ""},
            {"type": "function_call_output", "call_id": "c1", "output": "1"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "2"}]},
            {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "sum"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        ],
        None,
    )
    assert msgs[1] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "hmm",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
        ],
    }
    assert msgs[2:4] == [
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
        {"role": "tool", "tool_call_id": "c2", "content": "2"},
    ]
    assert msgs[4] == {"role": "assistant", "content": "ok", "reasoning_content": "sum"}


def test_minimax_m3_renders_the_reasoning_sent_back_and_restores_what_a_client_drops() -> None:
    fmt = "minimax-m3"
    raw = think(fmt, "Let me check the weather.") + call(fmt, "get_weather", {"location": "Paris"})
    eng = engine(fmt, [list(raw), "Sunny."])
    app = app_for(fmt, eng)
    first = post(app, {"input": "Weather?", "tools": [WEATHER], "store": False}).json()
    fc = first["output"][1]
    out = {"type": "function_call_output", "call_id": fc["call_id"], "output": "sunny"}
    ask = {"role": "user", "content": "Weather?"}
    with_reasoning = post(app, {"input": [ask, *first["output"], out], "tools": [WEATHER]})
    assert with_reasoning.status_code == 200
    assert "Let me check the weather." in eng.bodies[1]["prompt"]
    # a client that drops the reasoning item: the gateway's memory puts it back, by call id
    dropped = [ask, fc, out]
    assert post(app, {"input": dropped, "tools": [WEATHER]}).status_code == 200
    assert eng.bodies[2]["prompt"] == eng.bodies[1]["prompt"]


def test_bad_input_is_a_400_naming_the_item() -> None:
    app = app_for("hermes", engine("hermes", ["x"]))
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input.0.content.0.type",
        ),
        ({"input": [{"type": "computer_call", "id": "x"}]}, "input.0.type"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]}, "input.0.arguments"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input.0.call_id"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input.0.role"),
        (
            {
                "input": [
                    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "c2", "output": "x"},
                ]
            },
            "input.1.call_id",
        ),
        ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        ({"input": "hi", "tools": [{"type": "function", "name": ""}]}, "tools.0.name"),
        ({"input": "hi", "tool_choice": "required"}, "tool_choice"),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": []}, "input"),
    ]
    for body, param in cases:
        r = post(app, body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["param"] == param, (body, r.json())


# -- the stream at every chunk boundary ------------------------------------------------------


def outputs(fmt: str) -> list[str]:
    """Raw outputs mixing reasoning, text, function and custom calls."""
    return [
        think(fmt, "Plan: check.") + "Checking." + call(fmt, "get_weather", {"location": "Paris"}),
        call(fmt, "apply_patch", {"input": PATCH}) + call(fmt, "multi_agent_v1.spawn", {"task": "t"}),
        think(fmt, "x") + 'Answer: <b>"ok"</b> é',
    ]


@functools.cache
def planned(fmt: str) -> tuple[Plan, ChatPlan]:
    req = ResponsesRequest.model_validate({"input": "hi", "tools": TOOLS})
    cp = to_chat(req, template(fmt))
    return plan_chat(cp.chat, ServedModel(id="m", template=template(fmt), format=get_format(fmt))), cp


def pure_events(fmt: str, tokens: list[str], stop_type: str = "eos") -> list[dict[str, Any]]:
    """Turn + ResponseBuilder without HTTP, the engine's output cut into ``tokens``."""
    plan, cp = planned(fmt)
    turn = Turn(plan, plan.parser())
    b = ResponseBuilder("m", cp.tools, {}, response_id="resp_x", created_at=0)
    wire = b.sse(b.start())  # encoded step by step, as the stream does
    for t in tokens:
        wire += b.sse(b.feed(turn.feed(t)))
    wire += b.sse(b.feed(turn.finish()) + b.finish(stop_type, {}, []))
    return parse_sse(wire.decode())


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_stream_keeps_its_rules_at_every_chunk_boundary(fmt: str) -> None:
    for raw in outputs(fmt):
        whole = check_stream(pure_events(fmt, [raw]))
        assert whole["status"] == "completed" and whole["output"]
        by_char = check_stream(pure_events(fmt, list(raw)))
        assert normal(by_char) == normal(whole)
        for cut in range(1, len(raw)):
            final = check_stream(pure_events(fmt, [raw[:cut], raw[cut:]]))
            assert normal(final) == normal(whole), (cut, raw[:cut])
        # cut off by max_output_tokens at every point: still every added has its done
        for cut in range(1, len(raw), 3):
            final = check_stream(pure_events(fmt, [raw[:cut]], stop_type="limit"))
            assert final["status"] == "incomplete"
            assert final["incomplete_details"] == {"reason": "max_output_tokens"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_streamed_equals_whole_through_the_gateway(fmt: str) -> None:
    for raw in outputs(fmt):
        for tokens in ([raw], list(raw)):
            app = app_for(fmt, engine(fmt, [tokens]))
            body = {"input": "hi", "tools": TOOLS, "store": False}
            events = raw_events(app, body)
            streamed = check_stream(events)
            whole = post(app, body).json()
            assert normal(streamed) == normal(whole)
            assert whole["usage"]["output_tokens"] == len(tokens)


def test_max_output_tokens_ends_incomplete() -> None:
    raw = "one two three four"
    eng = engine("hermes", [raw.split(" ")])
    app = app_for("hermes", eng)
    events = raw_events(app, {"input": "hi", "max_output_tokens": 2})
    final = check_stream(events)
    assert events[-1]["type"] == "response.incomplete" and final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["output"][0]["status"] == "incomplete" and eng.bodies[0]["n_predict"] == 2
    assert final["usage"]["output_tokens"] == 2


CONTEXT = "request (70000 tokens) exceeds the available context size (65536 tokens), try increasing it"


def test_a_prompt_too_long_is_context_length_exceeded() -> None:
    app = app_for("hermes", engine("hermes", [FakeFailure(400, CONTEXT)]))
    events = raw_events(app, {"input": "long"})
    final = check_stream(events)
    assert events[-1]["type"] == "response.failed"
    assert final["status"] == "failed" and final["error"]["code"] == "context_length_exceeded"
    r = post(app, {"input": "long"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    # the SDK raises it as an error of the stream
    other = app_for("hermes", engine("hermes", [FakeFailure(503, "Loading model")]))
    assert post(other, {"input": "x", "stream": True}).status_code == 503


class TooLongMidStream(CompletionStream):
    """An engine stream that says, once started, that the prompt does not fit (as an engine
    that reports it in the stream does)."""

    async def open(self) -> None:
        pass

    def batches(self) -> Any:
        raise EngineStreamError(f"the engine failed mid-stream: {CONTEXT}")

    async def aclose(self) -> None:
        pass


def test_an_engine_that_says_mid_stream_the_prompt_is_too_long_is_context_length_exceeded() -> None:
    eng = engine("hermes", ["x"])
    eng.stream = lambda body: TooLongMidStream()  # type: ignore[method-assign,assignment]
    app = app_for("hermes", eng)
    final = check_stream(raw_events(app, {"input": "long"}))
    assert final["error"]["code"] == "context_length_exceeded"
    r = post(app, {"input": "long"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


def test_an_engine_that_breaks_mid_stream_fails_the_response() -> None:
    app = app_for("hermes", engine("hermes", [FakeOutput(["a", "b", "c"], drop_after=2)]))
    events = raw_events(app, {"input": "hi"})
    final = check_stream(events)
    assert final["status"] == "failed" and final["error"]["code"] == "server_error"


# -- previous_response_id, sessions -------------------------------------------------------------


def test_previous_response_id_continues_and_a_forgotten_one_is_a_400_naming_the_store() -> None:
    eng = engine("hermes", ["First answer.", "Second answer."] + ["x"] * 80)
    app = app_for("hermes", eng)
    first = post(app, {"input": "Question one", "instructions": "Be brief."}).json()
    second = post(app, {"input": "Question two", "previous_response_id": first["id"]}).json()
    assert second["output"][0]["content"][0]["text"] == "Second answer."
    prompt = eng.bodies[1]["prompt"]
    assert prompt.index("Question one") < prompt.index("First answer.") < prompt.index("Question two")
    assert "Be brief." not in prompt  # instructions are not carried over
    third = post(app, {"input": "Question three", "previous_response_id": second["id"]})
    assert third.status_code == 200 and "Question one" in eng.bodies[2]["prompt"]
    not_stored = post(app, {"input": "q", "store": False}).json()
    r = post(app, {"input": "q", "previous_response_id": not_stored["id"]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "previous_response_id"
    for _ in range(64):  # the store keeps the last 64 per key
        post(app, {"input": "filler"})
    r = post(app, {"input": "q", "previous_response_id": first["id"]})
    assert r.status_code == 400
    assert "last 64 responses per API key" in r.json()["error"]["message"]
    assert r.json()["error"]["code"] == "previous_response_not_found"


def test_the_store_is_per_key_and_bounded() -> None:
    store = ResponseStore(per_key=2, max_chars=10_000)
    store.put("a", "r1", [{"x": 1}])
    store.put("a", "r2", [{"x": 2}])
    store.put("b", "r1", [{"x": 3}])
    assert store.get("a", "r1") == [{"x": 1}]  # used: now the newest of a's
    store.put("a", "r3", [{"x": 4}])  # a's oldest (r2) goes
    with pytest.raises(Exception, match="last 2 responses"):
        store.get("a", "r2")
    assert store.get("b", "r1") == [{"x": 3}]
    store.put("c", "big", [{"x": "y" * 9975}])  # 10016 characters in all: the oldest two go
    assert len(store) == 2 and store.get("b", "r1") == [{"x": 3}]  # the most recently used stays
    store.put("c", "huge", [{"x": "y" * 10_000}])  # larger than the store: not kept
    assert len(store) == 2


def test_a_session_keeps_its_slot() -> None:
    eng = engine("hermes", ["ok"])
    app = app_for("hermes", eng)
    for key in ("thread-a", "thread-b", "thread-a"):
        assert post(app, {"input": "hi", "prompt_cache_key": key}).status_code == 200
    slots = [b["id_slot"] for b in eng.bodies]
    assert slots[0] == slots[2] != slots[1]
    assert eng.bodies[0]["cache_prompt"] is True


def test_reasoning_effort_reaches_a_template_that_has_the_switch() -> None:
    tpl = (
        "{% if reasoning_effort is defined %}[{{ reasoning_effort }}]{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "<|im_start|>assistant\n"
    )
    eng = FakeEngine(["ok"], props={"chat_template": tpl, "model_path": "/m.gguf"})
    app = create_app(GatewayConfig(engine_url="fake://", model_format="hermes"), eng)
    assert post(app, {"input": "hi", "reasoning": {"effort": "low"}}).status_code == 200
    assert eng.bodies[0]["prompt"].startswith("[low]")


def test_tools_declared_in_the_input_are_offered_as_tools() -> None:
    eng = engine("hermes", [list(call("hermes", "get_weather", {"location": "Oslo"}))])
    app = app_for("hermes", eng)
    declared = {"type": "additional_tools", "id": "at_1", "role": "developer", "tools": [WEATHER]}
    resp = post(app, {"input": [declared, {"role": "user", "content": "Weather in Oslo?"}]}).json()
    assert resp["output"][0]["name"] == "get_weather"
    assert '"get_weather"' in eng.bodies[0]["prompt"]
    bad = post(app, {"input": [{**declared, "tools": "x"}, {"role": "user", "content": "hi"}]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "input.0.tools"


def test_a_call_the_output_ends_inside_is_incomplete_never_a_call_to_run() -> None:
    raw = call("hermes", "get_weather", {"location": "Paris"})
    cut = raw[: raw.index("Paris")]
    app = app_for("hermes", engine("hermes", [FakeOutput(list(cut), stop_type="word")]))
    body = {"input": "hi", "tools": TOOLS}
    resp = post(app, body).json()
    assert resp["status"] == "completed" and [o["status"] for o in resp["output"]] == ["incomplete"]
    assert "cut off" in resp["splitserve"]["warnings"][-1]
    assert normal(check_stream(raw_events(app, body))) == normal(resp)
