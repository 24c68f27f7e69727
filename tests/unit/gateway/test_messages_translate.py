"""The Messages API's pure translation: request -> chat request, deltas -> blocks and events.

Stream conformance is checked here without HTTP: a scripted raw output in each format, cut
at every character boundary, goes through the format's parser, the :class:`Turn` and
:class:`Blocks`; each event sequence must follow the Messages stream's order rules, and the
blocks it builds must equal the non-streamed answer's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from splitserve.chat import get_format
from splitserve.engine import resolve_source
from splitserve.gateway import APIError, ServedModel, plan_chat
from splitserve.gateway._chat import Turn
from splitserve.gateway._messages_translate import (
    Blocks,
    anthropic_error,
    stop_reason,
    to_chat,
    usage,
)
from splitserve.gateway._schemas import ChatRequest, check_history, parse_body

NS = "]<]minimax[>["
TEMPLATES = {
    "hermes": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "minimax-m3": "MiniMax-M3.jinja",
    "qwen3-coder": "Qwen3-Coder.jinja",
}
WRITE = {
    "name": "Write",
    "description": "Write a file",
    "input_schema": {
        "type": "object",
        "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["file_path", "content"],
    },
}
BASH = {
    "name": "Bash",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}
ARGS = {"file_path": "/tmp/x/a.txt", "content": "hi there"}


def template(fmt: str) -> str:
    return (resolve_source(None).path / "models/templates" / TEMPLATES[fmt]).read_text()


def model(fmt: str) -> ServedModel:
    return ServedModel(id="m", template=template(fmt), format=get_format(fmt))


def raw_call(fmt: str, name: str, args: dict[str, Any]) -> str:
    """A call as the model writes it in ``fmt``."""
    if fmt == "hermes":
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"
    if fmt == "qwen3-coder":
        params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    params = "".join(f"{NS}<{k}>{v}{NS}</{k}>" for k, v in args.items())
    return f'{NS}<tool_call>\n{NS}<invoke name="{name}">{params}{NS}</invoke>\n{NS}</tool_call>'


def think(fmt: str, text: str) -> str:
    return f"<mm:think>{text}</mm:think>" if fmt == "minimax-m3" else f"<think>{text}</think>"


def plan_of(body: dict[str, Any], fmt: str = "hermes") -> tuple[Any, Any]:
    m = model(fmt)
    tr = to_chat(body, m.template)
    req: ChatRequest = parse_body(ChatRequest, json.dumps(tr.chat).encode())
    check_history(req)
    return tr, plan_chat(req, m)


def base(**kw: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}], **kw}


# -- request ---------------------------------------------------------------------------------


def test_system_blocks_join_and_the_billing_block_is_dropped() -> None:
    body = base(
        system=[
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cch=abcde;"},
            {"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Be brief."},
        ]
    )
    msgs = to_chat(body, "").chat["messages"]
    assert msgs[0] == {"role": "system", "content": "You are an agent.\n\nBe brief."}
    assert to_chat(base(system="Plain."), "").chat["messages"][0] == {"role": "system", "content": "Plain."}


def test_system_messages_inside_messages_are_folded_never_left_for_the_template() -> None:
    body = base(
        system="S",
        messages=[
            {"role": "system", "content": "before any turn"},
            {"role": "user", "content": [{"type": "text", "text": "task"}]},
            {"role": "system", "content": [{"type": "text", "text": "env info"}]},
            {"role": "assistant", "content": "ok"},
            {"role": "system", "content": "late note"},
            {"role": "user", "content": "go"},
        ],
    )
    msgs = to_chat(body, "").chat["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[0]["content"] == "S\n\nbefore any turn"
    assert msgs[1]["content"] == "task\n\nenv info"
    assert msgs[3]["content"] == "late note\n\ngo"
    # Qwen3-Coder's template raises on a system message after the first: rendered fine here
    _, plan = plan_of(body, "qwen3-coder")
    assert "env info" in plan.prompt


def test_tool_use_and_tool_result_turns() -> None:
    body = base(
        tools=[BASH],
        messages=[
            {"role": "user", "content": "list"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "use ls", "signature": ""},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Running."},
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "a.txt"}],
                        "cache_control": {"type": "ephemeral"},
                    },
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "boom", "is_error": True},
                    {"type": "text", "text": "and now?"},
                ],
            },
        ],
    )
    msgs = to_chat(body, "").chat["messages"]
    assert msgs[1] == {
        "role": "assistant",
        "content": "Running.",
        "reasoning_content": "use ls",
        "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "ls"}'}}
        ],
    }
    assert msgs[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "a.txt"}
    assert msgs[3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: boom"}
    assert msgs[4] == {"role": "user", "content": "and now?"}
    _, plan = plan_of(body)
    assert "a.txt" in plan.prompt and "Error: boom" in plan.prompt


@pytest.mark.parametrize(
    "where,block",
    [
        (
            "messages.0.content.1",
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
        ),
        ("messages.0.content.0.content.0", None),
    ],
)
def test_images_are_refused_naming_the_block(where: str, block: dict[str, Any] | None) -> None:
    img = {"type": "image", "source": {"type": "url", "url": "http://127.0.0.1/x.png"}}
    content: list[Any] = (
        [{"type": "text", "text": "see"}, block]
        if block
        else [{"type": "tool_result", "tool_use_id": "t", "content": [img]}]
    )
    with pytest.raises(APIError) as err:
        to_chat(base(messages=[{"role": "user", "content": content}]), "")
    assert err.value.status == 400 and err.value.param == where
    assert "reads text only" in err.value.message


def test_tool_choice_maps_to_the_chat_paths_forced_grammar() -> None:
    _, any_ = plan_of(base(tools=[WRITE, BASH], tool_choice={"type": "any"}))
    assert any_.tool_choice == "required" and "Write" in any_.body["grammar"]
    _, named = plan_of(
        base(tools=[WRITE, BASH], tool_choice={"type": "tool", "name": "Bash", "disable_parallel_tool_use": True})
    )
    assert named.named_tool == "Bash" and not named.parallel
    assert "Bash" in named.body["grammar"] and "Write" not in named.body["grammar"]
    _, none = plan_of(base(tools=[WRITE], tool_choice={"type": "none"}))
    assert none.tool_choice == "none" and "grammar" not in none.body
    _, auto = plan_of(base(tools=[WRITE]))
    assert auto.tool_choice == "auto" and "grammar" not in auto.body
    with pytest.raises(APIError, match=r"tool_choice\.name"):
        to_chat(base(tools=[WRITE], tool_choice={"type": "tool", "name": "Nope"}), "")


def test_sampling_stop_thinking_and_effort() -> None:
    tr, plan = plan_of(
        base(
            stop_sequences=["END"],
            temperature=0.5,
            top_p=0.9,
            top_k=7,
            thinking={"type": "enabled", "budget_tokens": 2048},
            metadata={"user_id": "sess-1"},
        ),
        "minimax-m3",
    )
    assert plan.body["stop"][0] == "END" and tr.stop_sequences == ["END"]
    assert plan.body["temperature"] == 0.5 and plan.body["top_p"] == 0.9 and plan.body["top_k"] == 7
    assert plan.body["reasoning_budget_tokens"] == 2048
    assert tr.chat["chat_template_kwargs"] == {"thinking_mode": "enabled"}
    assert tr.session == "sess-1"
    adaptive = to_chat(base(thinking={"type": "adaptive"}), template("minimax-m3")).chat["chat_template_kwargs"]
    assert adaptive == {"thinking_mode": "adaptive"}
    off = to_chat(base(thinking={"type": "disabled"}), "{{ enable_thinking }}").chat["chat_template_kwargs"]
    assert off == {"enable_thinking": False}
    effort = to_chat(base(output_config={"effort": "max"}), "{{ reasoning_effort }}").chat
    assert effort["chat_template_kwargs"] == {"reasoning_effort": "high"}
    assert "chat_template_kwargs" not in to_chat(base(output_config={"effort": "low"}), "").chat
    with pytest.raises(APIError, match="max_tokens"):
        to_chat({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "")
    with pytest.raises(APIError, match="temperature"):
        to_chat(base(temperature=1.5), "")


def test_the_prompt_prefix_survives_billing_blocks_and_moving_cache_markers() -> None:
    """Turn 2 of a Claude Code loop (new billing hash, cache_control moved to the newest block)
    renders turn 1's prompt as its prefix, so the engine's prompt cache serves it."""

    def system(cch: str) -> list[dict[str, Any]]:
        return [
            {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1; cch={cch};"},
            {"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}},
        ]

    user1 = {
        "role": "user",
        "content": [{"type": "text", "text": "list files", "cache_control": {"type": "ephemeral"}}],
    }
    env = {"role": "system", "content": "cwd: /tmp"}
    for fmt in TEMPLATES:
        _, one = plan_of(base(system=system("aaaaa"), tools=[BASH], messages=[user1, env]), fmt)
        user1b = {"role": "user", "content": [{"type": "text", "text": "list files"}]}
        turn2 = [
            user1b,
            env,
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_9", "name": "Bash", "input": {"command": "ls"}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_9",
                        "content": "a",
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
        ]
        _, two = plan_of(base(system=system("bbbbb"), tools=[BASH], messages=turn2), fmt)
        assert two.prompt.startswith(one.prompt), fmt


def test_errors_have_anthropics_types_and_statuses() -> None:
    cases = {
        400: (400, "invalid_request_error"),
        401: (401, "authentication_error"),
        404: (404, "not_found_error"),
        413: (413, "request_too_large"),
        500: (500, "api_error"),
        502: (502, "api_error"),
        503: (503, "api_error"),
    }
    for status, (want, kind) in cases.items():
        got, body = anthropic_error(APIError(status, "m"))
        assert (got, body["error"]["type"]) == (want, kind) and body["type"] == "error"
    full = APIError(429, "queue full", type_="rate_limit_error", code="rate_limit_exceeded")
    assert anthropic_error(full)[0] == 529 and anthropic_error(full)[1]["error"]["type"] == "overloaded_error"
    assert anthropic_error(APIError(429, "slow down"))[1]["error"]["type"] == "rate_limit_error"


# -- answer ----------------------------------------------------------------------------------


def check_order(events: list[dict[str, Any]]) -> None:
    """The Messages stream's rules for the content events: indexes 0, 1, 2... in start order,
    one stop per start, deltas only inside their open block, each block closed before the next."""
    open_: int | None = None
    started = 0
    for ev in events:
        kind = ev["type"]
        if kind == "content_block_start":
            assert open_ is None and ev["index"] == started
            open_ = ev["index"]
            started += 1
        elif kind == "content_block_delta":
            assert ev["index"] == open_
        elif kind == "content_block_stop":
            assert ev["index"] == open_
            open_ = None
    assert open_ is None


def parse_sse(data: bytes) -> list[dict[str, Any]]:
    out = []
    for frame in data.decode().split("\n\n"):
        if not frame:
            continue
        name, payload = frame.split("\n", 1)
        ev = json.loads(payload.removeprefix("data: "))
        assert name == f"event: {ev['type']}"
        out.append(ev)
    return out


def accumulate(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blocks as the SDK's accumulator builds them from the events."""
    blocks: list[dict[str, Any]] = []
    partial: dict[int, str] = {}
    for ev in events:
        if ev["type"] == "content_block_start":
            blocks.append(dict(ev["content_block"]))
        elif ev["type"] == "content_block_delta":
            b, d = blocks[ev["index"]], ev["delta"]
            if d["type"] == "text_delta":
                b["text"] += d["text"]
            elif d["type"] == "thinking_delta":
                b["thinking"] += d["thinking"]
            elif d["type"] == "signature_delta":
                b["signature"] = d["signature"]
            elif d["type"] == "input_json_delta":
                partial[ev["index"]] = partial.get(ev["index"], "") + d["partial_json"]
        elif ev["type"] == "content_block_stop" and ev["index"] in partial:
            blocks[ev["index"]]["input"] = json.loads(partial[ev["index"]])
    return blocks


def run(fmt: str, body: dict[str, Any] | Any, tokens: list[str], stream: bool) -> tuple[Blocks, list[dict[str, Any]]]:
    plan = plan_of(body, fmt)[1] if isinstance(body, dict) else body
    turn = Turn(plan, plan.parser())
    blocks = Blocks(stream=stream)
    raw = b""
    for t in tokens:
        raw += b"".join(blocks.feed(turn.feed(t)))
    raw += b"".join(blocks.feed(turn.finish()) + blocks.finish())
    return blocks, parse_sse(raw)


@pytest.mark.parametrize("fmt", list(TEMPLATES))
def test_streams_follow_the_order_rules_at_every_chunk_boundary(fmt: str) -> None:
    output = think(fmt, "I will write it.") + "Writing now." + raw_call(fmt, "Write", ARGS)
    body = plan_of(base(tools=[WRITE, BASH]), fmt)[1]  # rendered once
    whole, none = run(fmt, body, [output], stream=False)
    assert none == []
    kinds = [b["type"] for b in whole.content]
    assert kinds == ["thinking", "text", "tool_use"], whole.content
    assert whole.content[2]["input"] == ARGS and whole.content[2]["id"].startswith("toolu_")
    assert whole.content[1]["text"].strip() == "Writing now."
    for cut in range(1, len(output)):
        _, events = run(fmt, body, [output[:cut], output[cut:]], stream=True)
        check_order(events)
        got = accumulate(events)
        for b in got + whole.content:
            b.pop("id", None)
        assert got == whole.content, cut
    _, events = run(fmt, body, list(output), stream=True)  # a character per token
    check_order(events)
    assert [b["type"] for b in accumulate(events)] == kinds


def test_a_call_cut_off_or_with_bad_arguments_never_reaches_the_client() -> None:
    body = base(tools=[WRITE])
    cut = raw_call("hermes", "Write", ARGS)[:-25]  # inside the arguments
    blocks, events = run("hermes", body, ["Hi. ", cut], stream=True)
    assert [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"] == ["text"]
    assert not blocks.tool_uses


def test_stop_reason_and_usage() -> None:
    b = Blocks(stream=False)
    assert stop_reason(b, {"stop_type": "limit"}, []) == ("max_tokens", None)
    assert stop_reason(b, {"stop_type": "word", "stopping_word": "END"}, ["END"]) == ("stop_sequence", "END")
    assert stop_reason(b, {"stop_type": "word", "stopping_word": "<|im_end|>"}, ["END"]) == ("end_turn", None)
    b.content.append({"type": "tool_use", "id": "toolu_1", "name": "x", "input": {}})
    assert stop_reason(b, {"stop_type": "eos"}, []) == ("tool_use", None)
    final = {"tokens_evaluated": 100, "tokens_predicted": 7, "timings": {"cache_n": 90}}
    assert usage(final) == {
        "input_tokens": 10,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 90,
        "output_tokens": 7,
    }
